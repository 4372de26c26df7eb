//! `rdq.v1` request messages as the application layer's commands and
//! values, and its answers as messages: a submit as a
//! [`SubmitCommand`] (the payload's bytes as they came), a settle as a
//! [`Settle`] built from a [`Report`], an import entry as an
//! [`ImportEntry`], a claimed task as a `LeasedTask`. Both the services
//! ([`crate::service`]) and the `Work` stream ([`crate::work`]) use these;
//! nothing here decides.

use std::collections::BTreeMap;

use rdq_app::dlq::ImportEntry;
use rdq_app::submit::SubmitCommand;
use rdq_app::work::{DeferThrottle, Leased, Report, ReportedError, ReportedOutcome, Settle};
use rdq_app::{App, AppError, Caller};
use rdq_envelope::{Envelope, EnvelopeError, ErrorCode, TaskId};
use tonic::Status;
use tonic::metadata::MetadataMap;

use crate::codec;
use crate::pb;
use crate::status::{problem, to_status};

/// Metadata a client may send instead of a submit's `idempotency_key`.
pub const IDEMPOTENCY_KEY_METADATA: &str = "idempotency-key";

/// The caller behind a request's `authorization` metadata.
pub fn caller(app: &App, metadata: &MetadataMap) -> Result<Caller, Status> {
    app.authenticate(metadata.get("authorization").map(|v| v.as_bytes()))
        .map_err(|e| to_status(&e))
}

/// A task id, refused with `INVALID_ARGUMENT` as over HTTP.
pub fn parse_id(text: &str) -> Result<TaskId, AppError> {
    TaskId::parse(text).ok_or_else(|| {
        AppError::invalid_argument(format!("{text:?} is not a task id (a 26-character ULID)"))
    })
}

/// A message's envelope field.
pub fn envelope(env: &Envelope) -> Option<pb::Envelope> {
    Some(codec::to_proto(env))
}

/// A `TaskResponse` holding `env`.
pub fn task_response(env: &Envelope) -> pb::TaskResponse {
    pb::TaskResponse {
        envelope: envelope(env),
    }
}

/// The submit a message stands for. With `metadata` (a single submit), a
/// `traceparent` fills the task's headers unless they have one and an
/// `idempotency-key` the key unless the message has one.
pub fn submit_command(
    msg: pb::SubmitRequest,
    metadata: Option<&MetadataMap>,
) -> Result<SubmitCommand, AppError> {
    let priority = u8::try_from(msg.priority)
        .map_err(|_| AppError::malformed(format!("priority: {} is over 255", msg.priority)))?;
    let mut headers: BTreeMap<String, String> = msg.headers.into_iter().collect();
    let mut idempotency_key = msg.idempotency_key;
    if let Some(md) = metadata {
        if !headers.contains_key("traceparent")
            && let Some(tp) = md.get("traceparent").and_then(|v| v.to_str().ok())
        {
            headers.insert("traceparent".to_owned(), tp.to_owned());
        }
        if idempotency_key.is_none()
            && let Some(k) = md
                .get(IDEMPOTENCY_KEY_METADATA)
                .and_then(|v| v.to_str().ok())
        {
            idempotency_key = Some(k.to_owned());
        }
    }
    Ok(SubmitCommand {
        queue: msg.queue,
        handler_ref: msg.handler_ref,
        handler_version: msg.handler_version,
        payload: msg.payload,
        payload_content_type: msg.payload_content_type,
        headers,
        delay_ms: msg.delay_ms,
        priority,
        idempotency_key,
        flow_key: msg.flow_key,
        unique: msg
            .unique
            .map(|u| {
                rdq_app::submit::unique_request(rdq_api::tasks::UniqueBody {
                    key: u.key,
                    key_from: u.key_from,
                    scope: u.scope,
                    hold: u.hold,
                    hold_ms: u.hold_ms,
                    on_conflict: u.on_conflict,
                })
            })
            .transpose()?,
    })
}

/// The settle a message stands for.
pub fn settle_of(msg: pb::SettleRequest) -> Result<Settle, AppError> {
    let id = parse_id(&msg.id);
    settle_for(id, msg)
}

/// The settle of task `id` (as parsed from `msg.id`, which is not read
/// again) that `msg` stands for.
fn settle_for(id: Result<TaskId, AppError>, msg: pb::SettleRequest) -> Result<Settle, AppError> {
    let id = id?;
    let outcome = match pb::ReportedOutcome::try_from(msg.outcome) {
        Ok(pb::ReportedOutcome::ReportedSuccess) => ReportedOutcome::Success,
        Ok(pb::ReportedOutcome::ReportedRetryableFailure) => ReportedOutcome::RetryableFailure,
        Ok(pb::ReportedOutcome::ReportedPermanentFailure) => ReportedOutcome::PermanentFailure,
        Ok(pb::ReportedOutcome::ReportedFailure) => ReportedOutcome::Failure,
        Ok(pb::ReportedOutcome::ReportedDefer) => ReportedOutcome::Defer,
        Ok(pb::ReportedOutcome::ReportedRelease) => ReportedOutcome::Release,
        _ => {
            return Err(AppError::invalid_field(
                "outcome",
                "is not a reported outcome",
            ));
        }
    };
    let error = match msg.error {
        None => None,
        Some(e) => Some(ReportedError {
            error_type: e.r#type,
            message: e.message,
            detail: match e.detail_json {
                None => None,
                Some(text) => Some(rdq_envelope::parse_strict(text.as_bytes()).map_err(|err| {
                    AppError::malformed(format!("error.detail_json: {}", err.message()))
                })?),
            },
            stack: e.stack,
        }),
    };
    let throttle = match pb::DeferThrottle::try_from(msg.throttle) {
        Ok(pb::DeferThrottle::None) => None,
        Ok(pb::DeferThrottle::Key) => Some(DeferThrottle::Key),
        Ok(pb::DeferThrottle::Queue) => Some(DeferThrottle::Queue),
        Err(_) => {
            return Err(AppError::invalid_field(
                "throttle",
                "is not a DeferThrottle value",
            ));
        }
    };
    let report = Report {
        outcome,
        error,
        defer_ms: msg.defer_ms,
        throttle,
    };
    report.into_settle(id, msg.lease_token)
}

/// The FlowResponse of a queue's flow.
pub fn flow_response(flow: rdq_api::flow::QueueFlow) -> pb::FlowResponse {
    pb::FlowResponse {
        queue: flow.queue,
        limits_json: flow.limits.to_string(),
        tokens: flow.tokens,
        blocked_until: flow.blocked_until,
        in_flight: flow.in_flight,
        keys: flow
            .keys
            .into_iter()
            .map(|k| pb::FlowKeyStatus {
                key: k.key,
                in_flight: k.in_flight,
                tokens: k.tokens,
                blocked_until: k.blocked_until,
            })
            .collect(),
        throttled_claims: flow.throttled_claims,
    }
}

/// The settles `items` stand for, each with the id it names as given (for
/// its result); one per item, in order.
pub fn settles_of(items: Vec<pb::SettleRequest>) -> (Vec<String>, Vec<Result<Settle, AppError>>) {
    let mut ids = Vec::with_capacity(items.len());
    let mut settles = Vec::with_capacity(items.len());
    for mut item in items {
        let id = parse_id(&item.id);
        ids.push(std::mem::take(&mut item.id));
        settles.push(settle_for(id, item));
    }
    (ids, settles)
}

/// One result per settle or extension, in order, with the new envelope
/// or (for a Work stream's bare acks) without it.
pub fn settle_results(
    ids: Vec<String>,
    results: Vec<Result<Envelope, AppError>>,
    with_envelopes: bool,
) -> Vec<pb::SettleItemResult> {
    ids.into_iter()
        .zip(results)
        .map(|(id, r)| settle_result(id, r, with_envelopes))
        .collect()
}

/// The result of one settle or extension.
pub fn settle_result(
    id: String,
    result: Result<Envelope, AppError>,
    with_envelope: bool,
) -> pb::SettleItemResult {
    match result {
        Ok(env) => pb::SettleItemResult {
            id,
            cancel_requested: env.status == rdq_envelope::Status::InFlight
                && env.cancel_requested.is_some(),
            envelope: if with_envelope { envelope(&env) } else { None },
            problem: None,
        },
        Err(e) => pb::SettleItemResult {
            id,
            envelope: None,
            problem: Some(problem(&e)),
            cancel_requested: false,
        },
    }
}

/// The leased-task message of a claim.
pub fn leased(l: Leased) -> pb::LeasedTask {
    let envelope = codec::into_proto(l.envelope);
    pb::LeasedTask {
        id: envelope.id.clone(),
        lease_token: l.lease_token,
        envelope: Some(envelope),
    }
}

/// The import entry the `line`th message of an import stream stands for:
/// its envelope, from JSON or from the message (checked by the JSON codec
/// either way), or why there is none.
pub fn import_entry(line: usize, entry: Option<pb::import_request::Entry>) -> ImportEntry {
    let envelope = match entry {
        Some(pb::import_request::Entry::EnvelopeJson(bytes)) => Envelope::decode(&bytes),
        Some(pb::import_request::Entry::Envelope(env)) => codec::from_proto(&env),
        None => Err(EnvelopeError::new(
            ErrorCode::MalformedEnvelope,
            "the entry has no envelope",
        )),
    };
    ImportEntry { line, envelope }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdq_engine::{FailureKind, Settlement};
    use rdq_envelope::Timestamp;

    #[test]
    fn a_submit_keeps_its_payload_bytes_and_takes_metadata_it_lacks() {
        let msg = pb::SubmitRequest {
            queue: "q".into(),
            handler_ref: "h".into(),
            payload: vec![0, 159, 255],
            priority: 7,
            ..Default::default()
        };
        let mut md = MetadataMap::new();
        md.insert("traceparent", "00-abc-def-01".parse().unwrap());
        md.insert(IDEMPOTENCY_KEY_METADATA, "k-1".parse().unwrap());
        let cmd = submit_command(msg.clone(), Some(&md)).unwrap();
        assert_eq!(cmd.payload, vec![0, 159, 255]);
        assert_eq!(cmd.payload_content_type, None);
        assert_eq!(cmd.priority, 7);
        assert_eq!(cmd.headers["traceparent"], "00-abc-def-01");
        assert_eq!(cmd.idempotency_key.as_deref(), Some("k-1"));
        // A batch item takes no metadata.
        let item = submit_command(msg, None).unwrap();
        assert!(item.headers.is_empty() && item.idempotency_key.is_none());
    }

    #[test]
    fn a_priority_over_255_is_malformed() {
        let msg = pb::SubmitRequest {
            queue: "q".into(),
            handler_ref: "h".into(),
            priority: 256,
            ..Default::default()
        };
        assert_eq!(
            submit_command(msg, None).unwrap_err().code(),
            "MALFORMED_REQUEST"
        );
    }

    #[test]
    fn a_settle_message_becomes_the_settlement_it_reports() {
        let id = TaskId::from_u128(7).to_string();
        let msg = pb::SettleRequest {
            id: id.clone(),
            lease_token: "token".into(),
            outcome: pb::ReportedOutcome::ReportedPermanentFailure as i32,
            error: Some(pb::ReportedError {
                r#type: "smtp.Rejected".into(),
                message: "550".into(),
                detail_json: Some(r#"{"smtp":550}"#.into()),
                stack: None,
            }),
            defer_ms: None,
            throttle: 0,
        };
        let (ids, settles) = settles_of(vec![
            msg,
            pb::SettleRequest {
                id: "not-an-id".into(),
                ..Default::default()
            },
        ]);
        assert_eq!(ids, vec![id, "not-an-id".to_owned()]);
        let settle = settles[0].as_ref().unwrap();
        assert_eq!(settle.lease_token, "token");
        let Settlement::Failure { error, kind } = &settle.settlement else {
            panic!("a failure: {:?}", settle.settlement);
        };
        assert_eq!(*kind, FailureKind::Permanent);
        assert_eq!(error.detail, Some(serde_json::json!({"smtp": 550})));
        assert_eq!(settles[1].as_ref().unwrap_err().code(), "INVALID_ARGUMENT");
    }

    #[test]
    fn an_unknown_outcome_or_broken_detail_is_refused() {
        let id = TaskId::from_u128(7).to_string();
        let unknown = pb::SettleRequest {
            id: id.clone(),
            outcome: 99,
            ..Default::default()
        };
        assert_eq!(settle_of(unknown).unwrap_err().code(), "INVALID_FIELD");
        let broken = pb::SettleRequest {
            id,
            outcome: pb::ReportedOutcome::ReportedFailure as i32,
            error: Some(pb::ReportedError {
                r#type: "x".into(),
                detail_json: Some("{".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(settle_of(broken).unwrap_err().code(), "MALFORMED_REQUEST");
    }

    #[test]
    fn an_import_entry_is_decoded_from_json_or_from_the_message() {
        let env = Envelope::new("q", "h", b"x", "text/plain", Timestamp::EPOCH);
        let json = import_entry(
            1,
            Some(pb::import_request::Entry::EnvelopeJson(env.encode())),
        );
        let message = import_entry(
            2,
            Some(pb::import_request::Entry::Envelope(codec::to_proto(&env))),
        );
        assert_eq!(json.envelope.unwrap(), env);
        assert_eq!((message.line, message.envelope.unwrap()), (2, env));
        let missing = import_entry(3, None);
        assert_eq!(
            missing.envelope.unwrap_err().code(),
            ErrorCode::MalformedEnvelope
        );
    }
}
