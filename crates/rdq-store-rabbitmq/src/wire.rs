//! What travels in a message: the body (rdq's v1 envelope or queuey's
//! envelope) and its AMQP properties, both ways.
//!
//! Every publish carries queuey 1.1's properties, whatever the format:
//! `content-type: application/json`, `delivery-mode: 2`, `message-id` (the
//! task id: a UUID in queuey format, the ULID in rdq's), `type` (the job
//! type / handler), `priority` (always set), and headers `x-attempt` (the
//! attempt this delivery will be, 1-based) and `x-deferrals`. Short strings
//! are cut at a UTF-8 boundary to 255 bytes. `expiration` is never set: a
//! wait is the hold queue's `x-message-ttl`. Dead letters add
//! `x-death-reason`, `x-original-queue` and `x-attempts`.
//!
//! Reading accepts both formats on every queue: a body that starts as rdq's
//! canonical encoding (or otherwise decodes as a v1 envelope) is rdq's,
//! one with queuey's fields is queuey's, anything else is malformed.

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use rdq_envelope::queuey::{JSON_CONTENT_TYPE, QueueyEnvelope};
use rdq_envelope::{AttemptRecord, Envelope, EnvelopeError, ErrorInfo, Outcome, Status, Timestamp};
use uuid::Uuid;

use crate::topology::{
    HEADER_ATTEMPT, HEADER_ATTEMPTS, HEADER_DEATH_REASON, HEADER_DEFERRALS, HEADER_ORIGINAL_QUEUE,
    MAX_NAME_BYTES, Mode,
};

/// Error type recorded on a dead letter read back from queuey's format,
/// whose only account of the failure is `x-death-reason`.
pub const QUEUEY_DEAD_ERROR_TYPE: &str = "queuey.DeadLetter";

/// A body and its properties, ready to publish.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The message body.
    pub body: Vec<u8>,
    /// Its AMQP properties.
    pub properties: BasicProperties,
}

/// A body as read from a queue.
#[derive(Debug, Clone)]
pub enum Incoming {
    /// An rdq v1 envelope (boxed: it is several times a queuey one's size).
    Rdq(Box<Envelope>),
    /// A queuey 1.1 envelope.
    Queuey(QueueyEnvelope),
}

/// The longest prefix of `value` that fits in an AMQP short string, cut at a
/// character boundary.
pub fn truncate_short(value: &str) -> &str {
    if value.len() <= MAX_NAME_BYTES {
        return value;
    }
    let mut end = MAX_NAME_BYTES;
    while end > 0 && !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

fn short(value: &str) -> ShortString {
    ShortString::from(truncate_short(value))
}

fn base_properties(message_id: &str, kind: &str, priority: u8) -> BasicProperties {
    BasicProperties::default()
        .with_content_type(JSON_CONTENT_TYPE.into())
        .with_delivery_mode(2)
        .with_message_id(short(message_id))
        .with_type(short(kind))
        .with_priority(priority)
}

fn counters(attempt: u32, deferrals: u32) -> FieldTable {
    let mut headers = FieldTable::default();
    headers.insert(HEADER_ATTEMPT.into(), AMQPValue::LongUInt(attempt));
    headers.insert(HEADER_DEFERRALS.into(), AMQPValue::LongUInt(deferrals));
    headers
}

/// The message for a PENDING task in `mode`. In queuey mode the body is the
/// queuey envelope of the task's next attempt (which needs a JSON payload).
pub fn encode_task(env: &Envelope, mode: Mode) -> Result<Outgoing, EnvelopeError> {
    match mode {
        Mode::Rdq => Ok(Outgoing {
            body: env.encode(),
            properties: base_properties(&env.id.to_string(), &env.handler_ref, env.priority)
                .with_headers(counters(
                    env.attempt_count.saturating_add(1),
                    env.deferral_count,
                )),
        }),
        Mode::Queuey => {
            let q = QueueyEnvelope::from_rdq(env)?;
            Ok(queuey_outgoing(&q, counters(q.attempt, q.deferrals)))
        }
    }
}

fn queuey_outgoing(q: &QueueyEnvelope, headers: FieldTable) -> Outgoing {
    Outgoing {
        body: q.encode(),
        properties: base_properties(&q.job_id.to_string(), &q.job_type, q.priority)
            .with_headers(headers),
    }
}

/// The message for a DEAD task in `mode`, with the death headers. In queuey
/// mode the body is the envelope of the attempt that failed, as queuey
/// writes its dead letters.
pub fn encode_dead(
    env: &Envelope,
    mode: Mode,
    original_queue: &str,
) -> Result<Outgoing, EnvelopeError> {
    let reason = death_reason(env);
    let mut out = match mode {
        Mode::Rdq => encode_task(env, Mode::Rdq)?,
        Mode::Queuey => {
            let mut q = QueueyEnvelope::from_rdq(env)?;
            q.attempt = env.attempt_count.max(1);
            let headers = counters(q.attempt, q.deferrals);
            queuey_outgoing(&q, headers)
        }
    };
    let mut headers = out.properties.headers().clone().unwrap_or_default();
    headers.insert(
        HEADER_DEATH_REASON.into(),
        AMQPValue::LongString(LongString::from(reason.as_str())),
    );
    headers.insert(
        HEADER_ORIGINAL_QUEUE.into(),
        AMQPValue::LongString(LongString::from(original_queue)),
    );
    headers.insert(
        HEADER_ATTEMPTS.into(),
        AMQPValue::LongUInt(env.attempt_count),
    );
    out.properties = out.properties.with_headers(headers);
    Ok(out)
}

/// Why a task died, in one line: its latest error, as `type: message`.
pub fn death_reason(env: &Envelope) -> String {
    match env.last_error() {
        Some(e) if e.message.is_empty() => e.error_type.clone(),
        Some(e) => format!("{}: {}", e.error_type, e.message),
        None => "dead".to_owned(),
    }
}

/// Properties for a body that is no envelope, copied verbatim to `q.dead`
/// (queuey's: persistent, `x-death-reason` and `x-original-queue` only).
pub fn malformed_properties(original_queue: &str, reason: &str) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert(
        HEADER_DEATH_REASON.into(),
        AMQPValue::LongString(LongString::from(reason)),
    );
    headers.insert(
        HEADER_ORIGINAL_QUEUE.into(),
        AMQPValue::LongString(LongString::from(original_queue)),
    );
    BasicProperties::default()
        .with_delivery_mode(2)
        .with_headers(headers)
}

/// Reads a body in either format.
pub fn decode(body: &[u8]) -> Result<Incoming, EnvelopeError> {
    if body.starts_with(br#"{"envelope_version""#) {
        return Envelope::decode(body).map(|env| Incoming::Rdq(Box::new(env)));
    }
    match QueueyEnvelope::decode(body) {
        Ok(q) => Ok(Incoming::Queuey(q)),
        Err(queuey_error) => Envelope::decode(body)
            .map(|env| Incoming::Rdq(Box::new(env)))
            .map_err(|_| queuey_error),
    }
}

/// A string header of a message, if present.
pub fn header_string(properties: &BasicProperties, key: &str) -> Option<String> {
    let headers = properties.headers().as_ref()?;
    match headers.inner().get(key)? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

/// An integer header of a message, if present.
pub fn header_u32(properties: &BasicProperties, key: &str) -> Option<u32> {
    let headers = properties.headers().as_ref()?;
    match headers.inner().get(key)? {
        AMQPValue::LongUInt(n) => Some(*n),
        AMQPValue::LongInt(n) => u32::try_from(*n).ok(),
        AMQPValue::LongLongInt(n) => u32::try_from(*n).ok(),
        AMQPValue::ShortUInt(n) => Some(u32::from(*n)),
        AMQPValue::ShortShortUInt(n) => Some(u32::from(*n)),
        _ => None,
    }
}

/// The rdq envelope of a queuey job delivered on rdq queue `queue`:
/// PENDING, due now. The broker queue is the truth about which queue a
/// message is in; a different `queue` in the body is kept in a header so it
/// survives a trip back to queuey's format.
pub fn queuey_to_rdq(q: &QueueyEnvelope, queue: &str, now: Timestamp) -> Envelope {
    let mut env = q.to_rdq(now);
    if env.queue != queue {
        env.headers
            .entry(rdq_envelope::queuey::QUEUE_HEADER.to_owned())
            .or_insert_with(|| q.queue.clone());
        env.queue = queue.to_owned();
    }
    env
}

/// A dead letter in queuey's format as an rdq DEAD task: its attempts are the
/// body's `attempt` (the one that failed), and `x-death-reason` becomes the
/// error of one closed attempt record, timestamped at the job's creation (the
/// format records no failure time).
pub fn queuey_dead_to_rdq(
    q: &QueueyEnvelope,
    queue: &str,
    properties: &BasicProperties,
) -> Envelope {
    let mut env = queuey_to_rdq(q, queue, Timestamp::EPOCH);
    let attempts = header_u32(properties, HEADER_ATTEMPTS)
        .unwrap_or(q.attempt)
        .max(1);
    env.status = Status::Dead;
    env.attempt_count = attempts;
    env.next_attempt_at = None;
    env.lease_expires_at = None;
    let reason =
        header_string(properties, HEADER_DEATH_REASON).unwrap_or_else(|| "dead".to_owned());
    let mut record = AttemptRecord::open(attempts, env.created_at);
    record.finished_at = Some(env.created_at);
    record.outcome = Some(Outcome::PermanentFailure);
    record.error = Some(ErrorInfo::new(QUEUEY_DEAD_ERROR_TYPE, &reason));
    env.attempts = vec![record];
    env
}

/// The queuey job id for an rdq task id (the same 128 bits).
pub fn queuey_id(env: &Envelope) -> Uuid {
    Uuid::from_u128(env.id.as_u128())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> Envelope {
        let now = Timestamp::from_unix_ms(1_700_000_000_000).unwrap_or(Timestamp::EPOCH);
        let mut env = Envelope::new(
            "emails",
            "send",
            br#"{"to":"a@b.c"}"#,
            JSON_CONTENT_TYPE,
            now,
        );
        env.attempt_count = 2;
        env.deferral_count = 1;
        env.priority = 3;
        env
    }

    #[test]
    fn queuey_mode_writes_queueys_envelope_and_properties() {
        let env = task();
        let out = encode_task(&env, Mode::Queuey).map_err(|e| e.to_string());
        let Ok(out) = out else {
            unreachable!("{out:?}")
        };
        let body: serde_json::Value = serde_json::from_slice(&out.body).unwrap_or_default();
        assert_eq!(body["attempt"], 3, "the attempt this delivery will be");
        assert_eq!(body["deferrals"], 1);
        assert_eq!(body["payload"]["to"], "a@b.c");
        let p = &out.properties;
        assert_eq!(
            p.content_type().as_ref().map(|s| s.as_str()),
            Some("application/json")
        );
        assert_eq!(*p.delivery_mode(), Some(2));
        assert_eq!(*p.priority(), Some(3));
        assert!(p.expiration().is_none());
        assert_eq!(
            p.message_id().as_ref().map(|s| s.as_str().to_owned()),
            Some(queuey_id(&env).to_string())
        );
        assert_eq!(header_u32(p, HEADER_ATTEMPT), Some(3));
        assert_eq!(header_u32(p, HEADER_DEFERRALS), Some(1));
    }

    #[test]
    fn both_formats_decode_and_garbage_does_not() {
        let env = task();
        assert!(matches!(decode(&env.encode()), Ok(Incoming::Rdq(_))));
        let out = encode_task(&env, Mode::Queuey).map_err(|e| e.to_string());
        let Ok(out) = out else { unreachable!() };
        assert!(matches!(decode(&out.body), Ok(Incoming::Queuey(_))));
        assert!(decode(b"not json").is_err());
        assert!(decode(br#"{"hello":1}"#).is_err());
    }

    #[test]
    fn long_types_are_cut_at_a_character_boundary() {
        let long = "é".repeat(200);
        let cut = truncate_short(&long);
        assert_eq!(cut.len(), 254);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
