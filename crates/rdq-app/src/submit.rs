//! Submitting: a [`SubmitCommand`] (the client subset of the envelope,
//! payload as bytes, plus scheduling options) checked and translated into
//! an engine [`SubmitRequest`], and the submit use cases (one task, or a
//! batch in one store call).
//!
//! Each front end builds the command from its own wire: the HTTP API
//! decodes its base64 or inline-JSON payload (`rdq-server`), gRPC takes the
//! message's bytes as they are (`rdq-grpc`). Everything the envelope layer
//! checks (names, reserved headers, size) is checked again by the engine
//! before anything is stored; this module refuses what only a command can
//! get wrong.

use std::collections::BTreeMap;
use std::time::SystemTime;

use rdq_engine::unique::{Hold, OnConflict, Scope as UniqueScope, UniqueRequest};
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

/// The content type of a payload whose command names none.
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// One task to submit, as a front end hands it over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmitCommand {
    /// Target queue.
    pub queue: String,
    /// Handler name.
    pub handler_ref: String,
    /// Optional handler version, 1 to [`MAX_SHORT_FIELD_LEN`] characters.
    pub handler_version: Option<String>,
    /// The payload's bytes, stored as they are.
    pub payload: Vec<u8>,
    /// MIME type of the payload, 1 to [`MAX_SHORT_FIELD_LEN`] characters;
    /// [`DEFAULT_CONTENT_TYPE`] when `None`.
    pub payload_content_type: Option<String>,
    /// User headers (the `rdq.` prefix is reserved).
    pub headers: BTreeMap<String, String>,
    /// Due this long after now.
    pub delay_ms: u64,
    /// Claim priority (higher first).
    pub priority: u8,
    /// Makes a repeated submit to the same queue return the original task;
    /// 1 to [`MAX_IDEMPOTENCY_KEY_LEN`] characters.
    pub idempotency_key: Option<String>,
    /// The task's flow key for per-key limits and fairness
    /// (`docs/flow-control.md`), stored as the `rdq.flow_key` header.
    pub flow_key: Option<String>,
    /// The task's unique key and hold (`docs/uniqueness.md`).
    pub unique: Option<rdq_engine::unique::UniqueRequest>,
}

/// A submit's `unique` as every front end carries it (text values, as
/// the HTTP body and the gRPC message have them), checked and turned into
/// the engine's request; a bad value is `INVALID_ARGUMENT` naming its
/// field (`unique.hold`, …).
pub fn unique_request(body: rdq_api::tasks::UniqueBody) -> Result<UniqueRequest, AppError> {
    let scope = match body.scope.as_deref() {
        None => UniqueScope::default(),
        Some(text) => text.parse()?,
    };
    let invalid = |field: &str, why: &str| {
        AppError::from(rdq_engine::EngineError::InvalidArgument(format!(
            "{field}: {why}"
        )))
    };
    let hold = match (body.hold.as_deref(), body.hold_ms) {
        (Some("for"), Some(ms)) => Hold::duration(ms)?,
        (Some("for"), None) => return Err(invalid("unique.hold_ms", "a hold `for` needs hold_ms")),
        (_, Some(_)) => {
            return Err(invalid(
                "unique.hold_ms",
                "hold_ms goes with hold `for` only",
            ));
        }
        // `for:MS` is the stored form only: the request says `for` and
        // `hold_ms`.
        (Some(text), None) if text.starts_with("for:") => {
            return Err(invalid(
                "unique.hold",
                "no such hold: until_started, until_finished, until_succeeded, for (with \
                 hold_ms) or forever",
            ));
        }
        (Some(text), None) => text.parse()?,
        (None, None) => Hold::default(),
    };
    let on_conflict = match body.on_conflict.as_deref() {
        None => OnConflict::default(),
        Some(text) => text.parse()?,
    };
    Ok(UniqueRequest {
        key: body.key,
        key_from: body.key_from,
        scope,
        hold,
        on_conflict,
    })
}

/// Whether `text` is 1 to `max` characters long.
fn short_enough(text: &str, max: usize) -> bool {
    // Each character is at least one byte: most texts are decided by `len`.
    !text.is_empty() && (text.len() <= max || text.chars().count() <= max)
}

/// The engine request for `command`, submitted by `submitted_by` (a token
/// name; `None` on an open server, which sets no `rdq.submitted_by`).
pub fn submit_request(
    command: SubmitCommand,
    submitted_by: Option<&str>,
) -> Result<SubmitRequest, AppError> {
    let payload_content_type = command
        .payload_content_type
        .unwrap_or_else(|| DEFAULT_CONTENT_TYPE.to_owned());
    if !short_enough(&payload_content_type, MAX_SHORT_FIELD_LEN) {
        return Err(AppError::invalid_field(
            "payload_content_type",
            format!("must be 1 to {MAX_SHORT_FIELD_LEN} characters"),
        ));
    }
    if let Some(v) = &command.handler_version
        && !short_enough(v, MAX_SHORT_FIELD_LEN)
    {
        return Err(AppError::invalid_field(
            "handler_version",
            format!("must be 1 to {MAX_SHORT_FIELD_LEN} characters"),
        ));
    }
    if let Some(k) = &command.idempotency_key
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
        queue: command.queue,
        handler_ref: command.handler_ref,
        handler_version: command.handler_version,
        payload: command.payload,
        payload_content_type,
        headers: command.headers,
        system_headers,
        delay_ms: command.delay_ms,
        priority: command.priority,
        idempotency_key: command.idempotency_key,
        flow_key: command.flow_key,
        unique: command.unique,
    })
}

impl App {
    /// Submits one task as `caller`: `Submitted::Created`, or
    /// `Submitted::Existing` when the queue has seen its idempotency key.
    pub async fn submit(
        &self,
        caller: &Caller,
        command: SubmitCommand,
    ) -> Result<Submitted, AppError> {
        caller.require(Scope::Submit, &command.queue)?;
        let request = submit_request(command, caller.name())?;
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
    /// per item, in order (an item a front end could not read is an `Err`
    /// in its slot). Items are independent: a refused one does not stop the
    /// others.
    pub async fn submit_many(
        &self,
        caller: &Caller,
        commands: Vec<Result<SubmitCommand, AppError>>,
    ) -> Vec<Result<Submitted, AppError>> {
        let mut results: Vec<Option<Result<Submitted, AppError>>> =
            Vec::with_capacity(commands.len());
        let mut requests = Vec::new();
        let mut slots = Vec::new();
        for command in commands {
            let request = command.and_then(|command| {
                caller.require(Scope::Submit, &command.queue)?;
                submit_request(command, caller.name())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> SubmitCommand {
        SubmitCommand {
            queue: "q".into(),
            handler_ref: "h".into(),
            payload: b"hi".to_vec(),
            ..SubmitCommand::default()
        }
    }

    #[test]
    fn a_command_keeps_its_payload_and_names_its_submitter() {
        let req = submit_request(command(), Some("svc")).unwrap();
        assert_eq!(req.payload, b"hi");
        assert_eq!(req.payload_content_type, DEFAULT_CONTENT_TYPE);
        assert_eq!(req.system_headers[SUBMITTED_BY_HEADER], "svc");
        let open = submit_request(command(), None).unwrap();
        assert!(open.system_headers.is_empty());
    }

    #[test]
    fn a_named_content_type_is_kept() {
        let req = submit_request(
            SubmitCommand {
                payload_content_type: Some("text/plain".into()),
                ..command()
            },
            None,
        )
        .unwrap();
        assert_eq!(req.payload_content_type, "text/plain");
    }

    #[test]
    fn empty_or_overlong_short_fields_are_invalid() {
        let long = "x".repeat(MAX_SHORT_FIELD_LEN + 1);
        for (cmd, field) in [
            (
                SubmitCommand {
                    idempotency_key: Some(String::new()),
                    ..command()
                },
                "idempotency_key",
            ),
            (
                SubmitCommand {
                    idempotency_key: Some(long.clone()),
                    ..command()
                },
                "idempotency_key",
            ),
            (
                SubmitCommand {
                    payload_content_type: Some(String::new()),
                    ..command()
                },
                "payload_content_type",
            ),
            (
                SubmitCommand {
                    handler_version: Some(long.clone()),
                    ..command()
                },
                "handler_version",
            ),
        ] {
            let err = submit_request(cmd, None).unwrap_err();
            assert_eq!(err.code(), "INVALID_FIELD", "{field}");
            assert!(err.detail().starts_with(field), "{}", err.detail());
        }
    }

    #[test]
    fn lengths_count_characters_not_bytes() {
        // 255 two-byte characters: 510 bytes, 255 characters.
        let key = "é".repeat(MAX_IDEMPOTENCY_KEY_LEN);
        let cmd = SubmitCommand {
            idempotency_key: Some(key),
            ..command()
        };
        assert!(submit_request(cmd, None).is_ok());
    }

    #[test]
    fn unique_holds_parse_from_their_request_form() {
        let body = |hold: Option<&str>, hold_ms: Option<u64>| rdq_api::tasks::UniqueBody {
            key: Some("k".into()),
            hold: hold.map(str::to_owned),
            hold_ms,
            ..rdq_api::tasks::UniqueBody::default()
        };
        for (hold, hold_ms, want) in [
            (Some("forever"), None, Hold::Forever),
            (Some("until_started"), None, Hold::UntilStarted),
            (Some("until_succeeded"), None, Hold::UntilSucceeded),
            (None, None, Hold::UntilFinished),
            (Some("for"), Some(60_000), Hold::For(60_000)),
        ] {
            let request = unique_request(body(hold, hold_ms)).unwrap();
            assert_eq!(request.hold, want, "{hold:?} {hold_ms:?}");
        }
        for (hold, hold_ms, field) in [
            (Some("for"), None, "unique.hold_ms"),
            (None, Some(5), "unique.hold_ms"),
            (Some("forever"), Some(5), "unique.hold_ms"),
            (Some("for"), Some(0), "unique.hold_ms"),
            (Some("for:5"), None, "unique.hold"),
            (Some("sometimes"), None, "unique.hold"),
        ] {
            let err = unique_request(body(hold, hold_ms)).unwrap_err();
            assert_eq!(err.code(), "INVALID_ARGUMENT", "{hold:?} {hold_ms:?}");
            assert_eq!(
                err.extensions().get("field").and_then(|f| f.as_str()),
                Some(field),
                "{hold:?} {hold_ms:?}: {err}"
            );
        }
    }
}
