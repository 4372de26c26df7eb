//! queuey 1.1 envelopes, and the lossless mapping between them and rdq's.
//!
//! queuey (a Rust job-queue crate on RabbitMQ) puts this JSON on the wire:
//! `job_id, job_type, queue, attempt, enqueued_at_ms, deferrals, priority,
//! correlation_id?, payload`. rdq reads and writes it so a fleet can move from
//! queuey to rdq one process at a time.
//!
//! | queuey | rdq |
//! |---|---|
//! | `job_id` (UUID) | `id` (ULID): the same 128 bits |
//! | `job_type` | `handler_ref`; if outside `[a-z0-9._-]`, a mapped name plus header `rdq.queuey.job_type` with the original |
//! | `queue` | `queue`; likewise with header `rdq.queuey.queue` |
//! | `attempt` (1-based, the attempt about to run) | `attempt_count = attempt - 1` (attempts consumed); `attempt = 0` is kept in header `rdq.queuey.attempt` |
//! | `enqueued_at_ms` | `created_at`; a value outside years 0000–9999 is kept in header `rdq.queuey.enqueued_at_ms` |
//! | `deferrals` | `deferral_count` |
//! | `priority` | `priority` |
//! | `correlation_id` | header `rdq.correlation_id` |
//! | `payload` (JSON value) | `payload`: base64 of the exact JSON bytes, `payload_content_type = application/json` |
//!
//! Going back, the headers win over the mapped fields, so every queuey field
//! survives queuey → rdq → queuey byte for byte. rdq-only fields (attempt
//! history, other headers) have no queuey equivalent and stay behind.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::error::{EnvelopeError, ErrorCode};
use crate::id::TaskId;
use crate::model::Envelope;
use crate::names::{MAX_NAME_LEN, is_valid_name};
use crate::time::Timestamp;

/// Header keeping a queuey `job_type` that is not a valid rdq handler ref.
pub const JOB_TYPE_HEADER: &str = "rdq.queuey.job_type";
/// Header keeping a queuey `queue` that is not a valid rdq queue name.
pub const QUEUE_HEADER: &str = "rdq.queuey.queue";
/// Header keeping a queuey `attempt` of 0, which has no rdq equivalent.
pub const ATTEMPT_HEADER: &str = "rdq.queuey.attempt";
/// Header keeping an `enqueued_at_ms` outside rdq's timestamp range.
pub const ENQUEUED_AT_HEADER: &str = "rdq.queuey.enqueued_at_ms";
/// Header carrying the correlation id (queuey's `correlation_id`).
pub const CORRELATION_ID_HEADER: &str = "rdq.correlation_id";
/// Content type of every queuey payload.
pub const JSON_CONTENT_TYPE: &str = "application/json";

/// A queuey 1.1 envelope as it travels in a message body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueueyEnvelope {
    /// Unique id, stable across retries.
    pub job_id: Uuid,
    /// `Job::NAME` of the payload; what queuey workers route on.
    pub job_type: String,
    /// Broker queue the envelope was published to.
    pub queue: String,
    /// 1-based attempt counter: the attempt this delivery is.
    pub attempt: u32,
    /// Unix epoch milliseconds of the first enqueue.
    pub enqueued_at_ms: u64,
    /// How often the job was deferred.
    #[serde(default)]
    pub deferrals: u32,
    /// Broker message priority.
    #[serde(default)]
    pub priority: u8,
    /// Caller-supplied id for tracing; left out of the JSON when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// The job, as the exact JSON text it was written with.
    pub payload: Box<RawValue>,
}

impl PartialEq for QueueyEnvelope {
    fn eq(&self, other: &Self) -> bool {
        self.job_id == other.job_id
            && self.job_type == other.job_type
            && self.queue == other.queue
            && self.attempt == other.attempt
            && self.enqueued_at_ms == other.enqueued_at_ms
            && self.deferrals == other.deferrals
            && self.priority == other.priority
            && self.correlation_id == other.correlation_id
            && self.payload.get() == other.payload.get()
    }
}

impl QueueyEnvelope {
    /// Parses a queuey message body.
    pub fn decode(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        serde_json::from_slice(bytes).map_err(|e| {
            EnvelopeError::new(
                ErrorCode::MalformedEnvelope,
                format!("not a queuey envelope: {e}"),
            )
        })
    }

    /// Serialises exactly as queuey does: its field order, compact JSON.
    pub fn encode(&self) -> Vec<u8> {
        // Serialising strings, integers, a UUID and raw JSON into a Vec cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The rdq envelope for this job, PENDING and due at `now`.
    pub fn to_rdq(&self, now: Timestamp) -> Envelope {
        let mut env = Envelope::new(
            map_name(&self.queue),
            map_name(&self.job_type),
            self.payload.get().as_bytes(),
            JSON_CONTENT_TYPE,
            now,
        );
        env.id = TaskId::from_u128(self.job_id.as_u128());
        if env.queue != self.queue {
            env.headers
                .insert(QUEUE_HEADER.to_owned(), self.queue.clone());
        }
        if env.handler_ref != self.job_type {
            env.headers
                .insert(JOB_TYPE_HEADER.to_owned(), self.job_type.clone());
        }
        if self.attempt == 0 {
            env.headers
                .insert(ATTEMPT_HEADER.to_owned(), "0".to_owned());
        }
        env.attempt_count = self.attempt.saturating_sub(1);
        match i64::try_from(self.enqueued_at_ms)
            .ok()
            .and_then(Timestamp::from_unix_ms)
        {
            Some(t) => env.created_at = t,
            None => {
                env.headers.insert(
                    ENQUEUED_AT_HEADER.to_owned(),
                    self.enqueued_at_ms.to_string(),
                );
            }
        }
        env.deferral_count = self.deferrals;
        env.priority = self.priority;
        if let Some(cid) = &self.correlation_id {
            env.headers
                .insert(CORRELATION_ID_HEADER.to_owned(), cid.clone());
        }
        env
    }

    /// The queuey envelope for an rdq task: the delivery that is its next attempt.
    ///
    /// Fails with `INVALID_FIELD` when the payload is not JSON, since queuey
    /// payloads are JSON values.
    pub fn from_rdq(env: &Envelope) -> Result<Self, EnvelopeError> {
        let header = |key: &str| env.headers.get(key);
        let payload =
            RawValue::from_string(String::from_utf8(env.payload_bytes()).map_err(|_| not_json())?)
                .map_err(|_| not_json())?;
        let attempt = match header(ATTEMPT_HEADER).and_then(|v| v.parse().ok()) {
            Some(a) => a,
            None => env.attempt_count.saturating_add(1),
        };
        let enqueued_at_ms = match header(ENQUEUED_AT_HEADER).and_then(|v| v.parse().ok()) {
            Some(ms) => ms,
            None => u64::try_from(env.created_at.unix_ms()).unwrap_or(0),
        };
        Ok(Self {
            job_id: Uuid::from_u128(env.id.as_u128()),
            job_type: header(JOB_TYPE_HEADER).unwrap_or(&env.handler_ref).clone(),
            queue: header(QUEUE_HEADER).unwrap_or(&env.queue).clone(),
            attempt,
            enqueued_at_ms,
            deferrals: env.deferral_count,
            priority: env.priority,
            correlation_id: header(CORRELATION_ID_HEADER).cloned(),
            payload,
        })
    }
}

fn not_json() -> EnvelopeError {
    EnvelopeError::at(
        ErrorCode::InvalidField,
        "payload",
        "the payload is not JSON, and queuey payloads are JSON values",
    )
}

/// Maps any name into rdq's charset: lower-case, `:` becomes `.`, anything else
/// outside `[a-z0-9._-]` becomes `_`, cut to 240 bytes; a result that would be
/// the path segment `.` or `..` (not a name) has its dots as `_`. Valid names
/// are unchanged.
pub fn map_name(name: &str) -> String {
    if is_valid_name(name) {
        return name.to_owned();
    }
    let mut out: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '.' | '_' | '-' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            ':' => '.',
            _ => '_',
        })
        .take(MAX_NAME_LEN)
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    if out == "." || out == ".." {
        out = out.replace('.', "_");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_map_to_dot_segments_become_names() {
        assert_eq!(map_name(":"), "_");
        assert_eq!(map_name("::"), "__");
        assert_eq!(map_name("."), "_");
        assert_eq!(map_name(".."), "__");
        assert!(is_valid_name(&map_name(":")));
    }

    #[test]
    fn rust_paths_map_into_the_charset() {
        assert_eq!(map_name("myapp::jobs::SendEmail"), "myapp..jobs..sendemail");
        assert_eq!(map_name("send-email"), "send-email");
        assert_eq!(map_name(""), "_");
        assert_eq!(map_name("Grüße"), "gr__e");
        assert!(is_valid_name(&map_name(&"Ä".repeat(500))));
    }
}
