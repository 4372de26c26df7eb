//! Queue policy: how the engine treats a queue's tasks, stored with the queue
//! and read at every claim and settle, so a change applies to tasks already
//! queued. This module is the one place that knows the defaults.

use rdq_envelope::{DEFAULT_MAX_ENVELOPE_BYTES, TaskId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::EngineError;
use crate::flow::FlowPolicy;
use crate::glob::Glob;

/// A queue's live policy. Every field has a documented default
/// (`docs/configuration.md`), so `{}` is a complete policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// Lenient on read, so a policy stored by a newer rdq still loads here;
// `from_json` (the path of API input) refuses unknown fields itself.
#[serde(default)]
pub struct QueuePolicy {
    /// Attempts before a task is dead-lettered (default 10, at least 1).
    pub max_attempts: u32,
    /// Lapsed leases before a task is dead-lettered with reason
    /// `LEASE_EXPIRIES_EXHAUSTED`, whatever `max_attempts` says: a poison
    /// budget for handlers that kill their worker (default 0: none, only
    /// `max_attempts` counts).
    pub max_lease_expiries: u32,
    /// Delay between a retryable failure and the next attempt.
    pub backoff: Backoff,
    /// How long a claim holds a task before it lapses (default 30 s).
    pub lease_ms: u64,
    /// Globs on `error_type` classified as retryable.
    pub retryable_errors: Vec<String>,
    /// Globs on `error_type` classified as permanent; they win over `retryable_errors`.
    pub non_retryable_errors: Vec<String>,
    /// Largest serialised envelope accepted on submit (default 1 MiB).
    pub max_envelope_bytes: usize,
    /// Priority a deferred task comes back with, so it runs ahead of the backlog (default 9).
    pub max_priority: u8,
    /// What a worker does with a task whose `handler_version` differs from its own.
    pub handler_version_mismatch: VersionMismatch,
    /// A paused queue keeps accepting submits but hands out no claims.
    pub paused: bool,
    /// How long SUCCEEDED tasks are kept before the pruner removes them
    /// (default 24 h; 0 removes them at the next prune).
    pub retain_succeeded_ms: u64,
    /// Rate, concurrency and fairness limits (`docs/flow-control.md`);
    /// `{}` limits nothing.
    pub flow: FlowPolicy,
}

impl Default for QueuePolicy {
    fn default() -> Self {
        Self {
            max_attempts: 10,
            max_lease_expiries: 0,
            backoff: Backoff::default(),
            lease_ms: 30_000,
            retryable_errors: Vec::new(),
            non_retryable_errors: Vec::new(),
            max_envelope_bytes: DEFAULT_MAX_ENVELOPE_BYTES,
            max_priority: 9,
            handler_version_mismatch: VersionMismatch::Run,
            paused: false,
            retain_succeeded_ms: 24 * 60 * 60 * 1000,
            flow: FlowPolicy::default(),
        }
    }
}

/// How long to wait before the next attempt after a retryable failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    deny_unknown_fields,
    from = "BackoffDocument"
)]
pub enum Backoff {
    /// Retry at once.
    None,
    /// The same delay every time.
    Fixed {
        /// Delay in milliseconds.
        delay_ms: u64,
    },
    /// `base_ms * factor^(attempt-1)`, capped at `cap_ms`; with `jitter`, a
    /// uniformly random delay between 0 and that ("full jitter").
    Exponential {
        /// Delay after the first failure, in milliseconds.
        base_ms: u64,
        /// Growth per attempt (at least 1.0).
        factor: f64,
        /// Longest delay, in milliseconds.
        cap_ms: u64,
        /// Full jitter: spread retries over `[0, delay]`.
        jitter: bool,
    },
}

/// What a policy document's `backoff` may hold, read by hand from a JSON
/// value: each kind takes exactly its fields (`{"kind":"none","x":1}` is
/// refused like an unknown field of any other kind), and numbers are read
/// from their text, so `2.50` is a factor like `2.5` whatever the JSON
/// parser's number mode.
struct BackoffDocument(Backoff);

impl<'de> Deserialize<'de> for BackoffDocument {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(d)?;
        let serde_json::Value::Object(mut map) = value else {
            return Err(D::Error::custom(
                "backoff must be an object with a \"kind\"",
            ));
        };
        let kind = match map.remove("kind") {
            Some(serde_json::Value::String(k)) => k,
            Some(_) => return Err(D::Error::custom("backoff.kind must be a string")),
            None => return Err(D::Error::missing_field("kind")),
        };
        let mut take_u64 = |key: &'static str| match map.remove(key) {
            Some(v) => v.as_u64().ok_or_else(|| {
                D::Error::custom(format!("backoff.{key} must be a non-negative integer"))
            }),
            None => Err(D::Error::missing_field(key)),
        };
        let backoff = match kind.as_str() {
            "none" => Backoff::None,
            "fixed" => Backoff::Fixed {
                delay_ms: take_u64("delay_ms")?,
            },
            "exponential" => {
                let base_ms = take_u64("base_ms")?;
                let cap_ms = take_u64("cap_ms")?;
                let factor = match map.remove("factor") {
                    Some(v) => v
                        .as_f64()
                        .ok_or_else(|| D::Error::custom("backoff.factor must be a number"))?,
                    None => return Err(D::Error::missing_field("factor")),
                };
                let jitter = match map.remove("jitter") {
                    Some(serde_json::Value::Bool(b)) => b,
                    Some(_) => return Err(D::Error::custom("backoff.jitter must be a boolean")),
                    None => return Err(D::Error::missing_field("jitter")),
                };
                Backoff::Exponential {
                    base_ms,
                    factor,
                    cap_ms,
                    jitter,
                }
            }
            other => {
                return Err(D::Error::unknown_variant(
                    other,
                    &["none", "fixed", "exponential"],
                ));
            }
        };
        if let Some(extra) = map.keys().next() {
            return Err(D::Error::custom(format!(
                "unknown field `{extra}` in a backoff of kind {kind:?}"
            )));
        }
        Ok(Self(backoff))
    }
}

impl From<BackoffDocument> for Backoff {
    fn from(doc: BackoffDocument) -> Self {
        doc.0
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::Exponential {
            base_ms: 1_000,
            factor: 2.0,
            cap_ms: 3_600_000,
            jitter: true,
        }
    }
}

impl Backoff {
    /// Delay before the attempt that follows failed attempt number `attempt`
    /// (1-based). Jitter is drawn deterministically from the task id and
    /// attempt, so the state machine stays a pure function.
    pub fn delay_ms(&self, attempt: u32, id: TaskId) -> u64 {
        match *self {
            Self::None => 0,
            Self::Fixed { delay_ms } => delay_ms,
            Self::Exponential {
                base_ms,
                factor,
                cap_ms,
                jitter,
            } => {
                let exp = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
                let raw = base_ms as f64 * factor.powi(exp);
                let delay = if raw.is_finite() {
                    raw.min(cap_ms as f64) as u64
                } else {
                    cap_ms
                };
                if jitter {
                    let unit = (mix(id.as_u128() as u64 ^ u64::from(attempt)) >> 11) as f64
                        / (1u64 << 53) as f64;
                    (delay as f64 * unit) as u64
                } else {
                    delay
                }
            }
        }
    }
}

/// SplitMix64 finaliser: a cheap, well-spread hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What to do with a task whose `handler_version` is not the worker's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VersionMismatch {
    /// Run it anyway.
    Run,
    /// Put it back (deferred) for a worker with the right version.
    Requeue,
    /// Dead-letter it as a permanent failure.
    Dead,
}

/// How the engine classifies a failure by its `error_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classification {
    /// Try again after backoff.
    Retryable,
    /// Dead-letter now.
    Permanent,
}

impl QueuePolicy {
    /// Checks every value, refusing with `INVALID_POLICY` and the field's name.
    pub fn validate(&self) -> Result<(), EngineError> {
        let bad =
            |field: &str, why: &str| Err(EngineError::InvalidPolicy(format!("{field}: {why}")));
        if self.max_attempts == 0 {
            return bad("max_attempts", "must be at least 1");
        }
        if self.lease_ms == 0 {
            return bad("lease_ms", "must be at least 1");
        }
        if self.max_envelope_bytes < 256 {
            return bad("max_envelope_bytes", "must be at least 256");
        }
        if let Backoff::Exponential {
            factor,
            base_ms,
            cap_ms,
            ..
        } = self.backoff
        {
            if !(factor.is_finite() && factor >= 1.0) {
                return bad("backoff.factor", "must be a finite number of at least 1.0");
            }
            if cap_ms < base_ms {
                return bad("backoff.cap_ms", "must not be less than base_ms");
            }
        }
        for (field, globs) in [
            ("retryable_errors", &self.retryable_errors),
            ("non_retryable_errors", &self.non_retryable_errors),
        ] {
            for g in globs {
                Glob::new(g)
                    .map_err(|why| EngineError::InvalidPolicy(format!("{field}: {why}")))?;
            }
        }
        self.flow.validate()
    }

    /// The policy's top-level field names, as its JSON document spells them.
    pub fn field_names() -> &'static [&'static str] {
        &[
            "max_attempts",
            "max_lease_expiries",
            "backoff",
            "lease_ms",
            "retryable_errors",
            "non_retryable_errors",
            "max_envelope_bytes",
            "max_priority",
            "handler_version_mismatch",
            "paused",
            "retain_succeeded_ms",
            "flow",
        ]
    }

    /// Parses a submitted policy document and validates it, refusing fields
    /// this version does not know.
    pub fn from_json(value: Value) -> Result<Self, EngineError> {
        if let Value::Object(map) = &value
            && let Some(unknown) = map
                .keys()
                .find(|k| !Self::field_names().contains(&k.as_str()))
        {
            return Err(EngineError::InvalidPolicy(format!(
                "{unknown}: unknown policy field"
            )));
        }
        let policy: Self = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            EngineError::InvalidPolicy(format!("{path}: {}", e.into_inner()))
        })?;
        policy.validate()?;
        Ok(policy)
    }

    /// Classifies a failure that no wrapper or code classifier decided:
    /// a non-retryable glob wins, then a retryable one, then the default (retryable).
    pub fn classify(&self, error_type: &str) -> Classification {
        let any = |globs: &[String]| {
            globs
                .iter()
                .any(|g| Glob::new(g).is_ok_and(|g| g.matches(error_type)))
        };
        if any(&self.non_retryable_errors) {
            Classification::Permanent
        } else {
            Classification::Retryable
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_empty_document_is_the_default_policy() {
        assert_eq!(
            QueuePolicy::from_json(json!({})).unwrap(),
            QueuePolicy::default()
        );
        QueuePolicy::default().validate().unwrap();
    }

    #[test]
    fn every_backoff_kind_refuses_unknown_fields() {
        for doc in [
            json!({"backoff": {"kind": "none", "x": 1}}),
            json!({"backoff": {"kind": "fixed", "delay_ms": 5, "x": 1}}),
            json!({"backoff": {"kind": "exponential", "base_ms": 1, "factor": 2.0, "cap_ms": 9, "jitter": false, "x": 1}}),
        ] {
            let err = QueuePolicy::from_json(doc.clone()).unwrap_err();
            assert_eq!(err.code(), "INVALID_POLICY", "{doc}");
            assert!(err.to_string().contains('x'), "{err}");
        }
        let none = QueuePolicy::from_json(json!({"backoff": {"kind": "none"}})).unwrap();
        assert_eq!(none.backoff, Backoff::None);
        assert_eq!(
            serde_json::to_value(&none.backoff).unwrap(),
            json!({"kind": "none"})
        );
    }

    #[test]
    fn invalid_values_are_refused_with_the_field() {
        for (doc, field) in [
            (json!({"max_attempts": 0}), "max_attempts"),
            (json!({"lease_ms": 0}), "lease_ms"),
            (json!({"lease_ms": -5}), "lease_ms"),
            (
                json!({"non_retryable_errors": ["java.[net"]}),
                "non_retryable_errors",
            ),
            (
                json!({"backoff": {"kind": "exponential", "base_ms": 10, "factor": 0.5, "cap_ms": 100, "jitter": false}}),
                "factor",
            ),
            (
                json!({"backoff": {"kind": "fixed", "delay_ms": -1}}),
                "backoff",
            ),
            (json!({"backoff": {"kind": "sometimes"}}), "sometimes"),
            (json!({"no_such_field": 1}), "no_such_field"),
        ] {
            let err = QueuePolicy::from_json(doc.clone()).unwrap_err();
            assert_eq!(err.code(), "INVALID_POLICY", "{doc}");
            assert!(err.to_string().contains(field), "{err} should name {field}");
        }
    }

    #[test]
    fn field_names_are_the_documents_keys() {
        let doc = serde_json::to_value(QueuePolicy::default()).unwrap();
        let mut keys: Vec<&str> = doc
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut names = QueuePolicy::field_names().to_vec();
        keys.sort_unstable();
        names.sort_unstable();
        assert_eq!(keys, names);
    }

    #[test]
    fn non_retryable_globs_beat_retryable_ones() {
        let p = QueuePolicy {
            retryable_errors: vec!["java.net.*".into()],
            non_retryable_errors: vec!["java.net.UnknownHost*".into()],
            ..QueuePolicy::default()
        };
        assert_eq!(
            p.classify("java.net.SocketTimeoutException"),
            Classification::Retryable
        );
        assert_eq!(
            p.classify("java.net.UnknownHostException"),
            Classification::Permanent
        );
        assert_eq!(p.classify("anything.Else"), Classification::Retryable);
    }

    #[test]
    fn backoff_grows_caps_and_jitters_within_bounds() {
        let id = TaskId::from_u128(42);
        let exp = Backoff::Exponential {
            base_ms: 100,
            factor: 2.0,
            cap_ms: 1_000,
            jitter: false,
        };
        assert_eq!(exp.delay_ms(1, id), 100);
        assert_eq!(exp.delay_ms(3, id), 400);
        assert_eq!(exp.delay_ms(10, id), 1_000);
        assert_eq!(exp.delay_ms(u32::MAX, id), 1_000);
        let jittered = Backoff::Exponential {
            base_ms: 100,
            factor: 2.0,
            cap_ms: 1_000,
            jitter: true,
        };
        let delays: Vec<u64> = (0..200)
            .map(|i| jittered.delay_ms(4, TaskId::from_u128(i)))
            .collect();
        assert!(delays.iter().all(|&d| d <= 800));
        assert!(delays.iter().any(|&d| d < 400) && delays.iter().any(|&d| d > 400));
        assert_eq!(Backoff::Fixed { delay_ms: 250 }.delay_ms(7, id), 250);
        assert_eq!(Backoff::None.delay_ms(7, id), 0);
    }
}
