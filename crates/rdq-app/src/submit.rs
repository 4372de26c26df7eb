//! Submitting: the client subset of the envelope (`docs/envelope.md`) plus
//! scheduling options, translated into an engine [`SubmitRequest`], and the
//! submit use cases (one task, or a batch in one store call).
//!
//! The payload comes either as base64 (`payload`, opaque bytes) or as inline
//! JSON (`payload_json`, stored byte for byte as sent, content type
//! `application/json` unless given). Everything the envelope layer checks
//! (names, reserved headers, size) is checked again by the engine before
//! anything is stored; this module refuses what only a request can get wrong.

use std::collections::BTreeMap;
use std::time::SystemTime;

use base64::Engine as _;
use rdq_api::tasks::SubmitBody;
use rdq_engine::{SubmitRequest, Submitted};
use rdq_telemetry::messaging::TRACEPARENT_HEADER;
use rdq_telemetry::{SendOperation, SubmitOutcome};

use crate::App;
use crate::auth::{Caller, Scope};
use crate::error::AppError;

/// System header recording who submitted the task.
pub const SUBMITTED_BY_HEADER: &str = "rdq.submitted_by";

/// Longest idempotency key, in characters (Unicode scalar values, as JSON
/// Schema's `maxLength` counts them in docs/openapi.json).
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// Longest `payload_content_type` or `handler_version`, in characters.
pub const MAX_SHORT_FIELD_LEN: usize = 255;

/// Whether `text` is 1 to `max` characters long.
fn short_enough(text: &str, max: usize) -> bool {
    // Each character is at least one byte: most texts are decided by `len`.
    !text.is_empty() && (text.len() <= max || text.chars().count() <= max)
}

/// The engine request for `body`, submitted by `submitted_by` (a token
/// name; `None` on an open server, which sets no `rdq.submitted_by`).
pub fn submit_request(
    body: SubmitBody,
    submitted_by: Option<&str>,
) -> Result<SubmitRequest, AppError> {
    let (payload, default_type) = match (body.payload, body.payload_json) {
        (Some(_), Some(_)) => {
            return Err(AppError::invalid_field(
                "payload",
                "give either payload (base64) or payload_json, not both",
            ));
        }
        (Some(b64), None) => (decode_base64(&b64)?, "application/octet-stream"),
        (None, Some(raw)) => (raw.get().as_bytes().to_vec(), "application/json"),
        (None, None) => (Vec::new(), "application/octet-stream"),
    };
    let payload_content_type = body
        .payload_content_type
        .unwrap_or_else(|| default_type.to_owned());
    if !short_enough(&payload_content_type, MAX_SHORT_FIELD_LEN) {
        return Err(AppError::invalid_field(
            "payload_content_type",
            format!("must be 1 to {MAX_SHORT_FIELD_LEN} characters"),
        ));
    }
    if let Some(v) = &body.handler_version
        && !short_enough(v, MAX_SHORT_FIELD_LEN)
    {
        return Err(AppError::invalid_field(
            "handler_version",
            format!("must be 1 to {MAX_SHORT_FIELD_LEN} characters"),
        ));
    }
    if let Some(k) = &body.idempotency_key
        && !short_enough(k, MAX_IDEMPOTENCY_KEY_LEN)
    {
        return Err(AppError::invalid_field(
            "idempotency_key",
            format!("must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} characters"),
        ));
    }
    let mut system_headers = BTreeMap::new();
    if let Some(name) = submitted_by {
        system_headers.insert(SUBMITTED_BY_HEADER.to_owned(), name.to_owned());
    }
    Ok(SubmitRequest {
        queue: body.queue,
        handler_ref: body.handler_ref,
        handler_version: body.handler_version,
        payload,
        payload_content_type,
        headers: body.headers,
        system_headers,
        delay_ms: body.delay_ms,
        priority: body.priority,
        idempotency_key: body.idempotency_key,
    })
}

impl App {
    /// Submits one task as `caller`: `Submitted::Created`, or
    /// `Submitted::Existing` when the queue has seen its idempotency key.
    pub async fn submit(&self, caller: &Caller, body: SubmitBody) -> Result<Submitted, AppError> {
        caller.require(Scope::Submit, &body.queue)?;
        let request = submit_request(body, caller.name())?;
        let queue = request.queue.clone();
        let traced = self.trace_start(&request);
        let submitted = self.engine.submit(request).await.map_err(AppError::from);
        self.trace_submit(traced, &queue, SendOperation::Send, &submitted);
        let submitted = submitted?;
        tracing::debug!(
            task_id = %submitted.envelope().id,
            queue = %queue,
            created = matches!(submitted, Submitted::Created(_)),
            "task submitted"
        );
        if let Submitted::Created(_) = submitted {
            self.metrics.submitted(&queue, 1);
        }
        Ok(submitted)
    }

    /// Submits many tasks in one store call where the store can; one result
    /// per body, in order. Items are independent: a refused one does not
    /// stop the others.
    pub async fn submit_many(
        &self,
        caller: &Caller,
        bodies: Vec<Result<SubmitBody, AppError>>,
    ) -> Vec<Result<Submitted, AppError>> {
        let mut results: Vec<Option<Result<Submitted, AppError>>> =
            Vec::with_capacity(bodies.len());
        let mut requests = Vec::new();
        let mut slots = Vec::new();
        for body in bodies {
            let request = body.and_then(|body| {
                caller.require(Scope::Submit, &body.queue)?;
                submit_request(body, caller.name())
            });
            match request {
                Ok(r) => {
                    slots.push(results.len());
                    requests.push(r);
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let traced: Vec<_> = requests
            .iter()
            .map(|r| (self.trace_start(r), r.queue.clone()))
            .collect();
        let stored = self.engine.submit_many(requests).await;
        for ((slot, result), (started, queue)) in slots.into_iter().zip(stored).zip(traced) {
            if let Ok(Submitted::Created(env)) = &result {
                self.metrics.submitted(&env.queue, 1);
            }
            let result = result.map_err(AppError::from);
            self.trace_submit(started, &queue, SendOperation::Create, &result);
            if let Some(r) = results.get_mut(slot) {
                *r = Some(result);
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(AppError::internal("the store returned too few results")))
            })
            .collect()
    }
}

/// What a submit span needs from before the store call: the start time and
/// the submitter's `traceparent`. `None` when tracing is off.
type TraceStart = Option<(SystemTime, Option<String>)>;

impl App {
    fn trace_start(&self, request: &SubmitRequest) -> TraceStart {
        self.shared.tracer.as_ref().map(|_| {
            (
                SystemTime::now(),
                request.headers.get(TRACEPARENT_HEADER).cloned(),
            )
        })
    }

    /// Records a submit's PRODUCER span (`docs/observability.md`).
    fn trace_submit(
        &self,
        started: TraceStart,
        queue: &str,
        operation: SendOperation,
        result: &Result<Submitted, AppError>,
    ) {
        let (Some(tracer), Some((started, traceparent))) = (&self.shared.tracer, started) else {
            return;
        };
        let outcome = match result {
            Ok(Submitted::Created(env)) => SubmitOutcome::Created(env),
            Ok(Submitted::Existing(env)) => SubmitOutcome::Existing(env),
            Err(e) => SubmitOutcome::Refused(e.code()),
        };
        tracer.record_submit(queue, operation, started, traceparent.as_deref(), outcome);
    }
}

fn decode_base64(text: &str) -> Result<Vec<u8>, AppError> {
    let engine = base64::engine::general_purpose::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    engine
        .decode(text)
        .map_err(|e| AppError::invalid_field("payload", format!("is not standard base64: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: &str) -> SubmitBody {
        serde_json::from_str(json).unwrap()
    }

    trait IntoRequest {
        fn into_request(self, by: Option<&str>) -> Result<SubmitRequest, AppError>;
    }

    impl IntoRequest for SubmitBody {
        fn into_request(self, by: Option<&str>) -> Result<SubmitRequest, AppError> {
            submit_request(self, by)
        }
    }

    #[test]
    fn payload_json_is_kept_byte_for_byte_with_a_json_content_type() {
        let req = body(
            r#"{"queue":"q","handler_ref":"h","payload_json":{"n": 1.000000000000000000001}}"#,
        )
        .into_request(Some("svc"))
        .unwrap();
        assert_eq!(req.payload, br#"{"n": 1.000000000000000000001}"#);
        assert_eq!(req.payload_content_type, "application/json");
        assert_eq!(req.system_headers[SUBMITTED_BY_HEADER], "svc");
    }

    #[test]
    fn base64_payloads_decode_with_or_without_padding() {
        for b64 in ["aGk=", "aGk"] {
            let req = body(&format!(
                r#"{{"queue":"q","handler_ref":"h","payload":"{b64}"}}"#
            ))
            .into_request(None)
            .unwrap();
            assert_eq!(req.payload, b"hi");
            assert_eq!(req.payload_content_type, "application/octet-stream");
            assert!(req.system_headers.is_empty());
        }
    }

    #[test]
    fn conflicting_or_broken_fields_are_invalid() {
        for (json, field) in [
            (
                r#"{"queue":"q","handler_ref":"h","payload":"aGk=","payload_json":1}"#,
                "payload",
            ),
            (
                r#"{"queue":"q","handler_ref":"h","payload":"!!"}"#,
                "payload",
            ),
            (
                r#"{"queue":"q","handler_ref":"h","idempotency_key":""}"#,
                "idempotency_key",
            ),
            (
                r#"{"queue":"q","handler_ref":"h","payload_content_type":""}"#,
                "payload_content_type",
            ),
        ] {
            let err = body(json).into_request(None).unwrap_err();
            assert_eq!(err.code(), "INVALID_FIELD", "{json}");
            assert!(err.detail().starts_with(field), "{}", err.detail());
        }
    }

    #[test]
    fn unknown_fields_and_wrong_types_do_not_parse() {
        for json in [
            r#"{"queue":"q","handler_ref":"h","delay":5}"#,
            r#"{"queue":"q","handler_ref":"h","priority":300}"#,
            r#"{"queue":1,"handler_ref":"h"}"#,
            r#"{"handler_ref":"h"}"#,
        ] {
            assert!(serde_json::from_str::<SubmitBody>(json).is_err(), "{json}");
        }
    }
}
