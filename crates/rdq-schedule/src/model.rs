//! The stored schedule, as the API reads and writes it.
//!
//! The JSON form uses externally tagged enums, so each choice reads as what it
//! is: `{"spec":{"cron":"*/5 * * * *"}}`, `{"spec":{"every_ms":60000}}`,
//! `"overlap":"skip_if_running"`, `"catch_up":"latest"` or
//! `{"catch_up":{"all":{"max":10,"window_ms":3600000}}}`. Unknown fields are
//! refused at every level, so a typo is an error rather than a default.
//! These types hold what was sent; [`ValidSchedule`](crate::ValidSchedule)
//! holds one that passed every rule.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The zone a schedule without `tz` runs in.
pub const DEFAULT_TIME_ZONE: &str = "UTC";

/// The content type of a template whose payload names none (as for a submit).
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// A periodic schedule: which task to submit, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// Unique name, with the rules of queue names: 1–240 bytes of `[a-z0-9._-]`.
    pub name: String,
    /// The task each fire submits.
    pub task: TaskTemplate,
    /// When it fires.
    pub spec: Spec,
    /// IANA zone the cron pattern's wall-clock times are read in; intervals
    /// ignore it.
    #[serde(default = "default_time_zone")]
    pub tz: String,
    /// No due time before this instant (ms since the Unix epoch, inclusive);
    /// also the anchor of an interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<i64>,
    /// No due time after this instant (ms since the Unix epoch, inclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<i64>,
    /// A paused schedule submits nothing; the due times it passes are
    /// skipped, not caught up on resume.
    #[serde(default)]
    pub paused: bool,
    /// What to do when the previous fire's task has not finished.
    #[serde(default)]
    pub overlap: Overlap,
    /// What to do with due times missed while no node was ticking.
    #[serde(default)]
    pub catch_up: CatchUp,
}

fn default_time_zone() -> String {
    DEFAULT_TIME_ZONE.to_owned()
}

impl Schedule {
    /// A schedule `name` firing `task` on the cron `pattern`, in UTC until
    /// [`Schedule::in_zone`]; every other field at its default.
    pub fn cron(name: impl Into<String>, pattern: impl Into<String>, task: TaskTemplate) -> Self {
        Self::with_spec(name.into(), Spec::Cron(pattern.into()), task)
    }

    /// A schedule `name` firing `task` every `every_ms` milliseconds.
    pub fn every(name: impl Into<String>, every_ms: u64, task: TaskTemplate) -> Self {
        Self::with_spec(name.into(), Spec::EveryMs(every_ms), task)
    }

    fn with_spec(name: String, spec: Spec, task: TaskTemplate) -> Self {
        Self {
            name,
            task,
            spec,
            tz: default_time_zone(),
            start_ms: None,
            end_ms: None,
            paused: false,
            overlap: Overlap::default(),
            catch_up: CatchUp::default(),
        }
    }

    /// Reads the cron pattern in the IANA zone `tz`.
    #[must_use]
    pub fn in_zone(mut self, tz: impl Into<String>) -> Self {
        self.tz = tz.into();
        self
    }

    /// Sets the overlap policy.
    #[must_use]
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// Sets the catch-up policy.
    #[must_use]
    pub fn catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
        self
    }
}

impl TaskTemplate {
    /// A task of `handler_ref` on `queue`, with no payload.
    pub fn new(queue: impl Into<String>, handler_ref: impl Into<String>) -> Self {
        Self {
            queue: queue.into(),
            handler_ref: handler_ref.into(),
            payload: Vec::new(),
            payload_content_type: default_content_type(),
            headers: BTreeMap::new(),
            priority: 0,
            flow_key: None,
        }
    }

    /// With these payload bytes, of MIME type `content_type`.
    #[must_use]
    pub fn payload(mut self, bytes: impl Into<Vec<u8>>, content_type: impl Into<String>) -> Self {
        self.payload = bytes.into();
        self.payload_content_type = content_type.into();
        self
    }
}

/// The task a fire submits; the fields of a submit that make sense to repeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskTemplate {
    /// Target queue.
    pub queue: String,
    /// Handler name.
    pub handler_ref: String,
    /// The payload's bytes; base64 in JSON, as a submit's `payload`.
    #[serde(default, with = "base64_bytes", skip_serializing_if = "Vec::is_empty")]
    pub payload: Vec<u8>,
    /// MIME type of the payload.
    #[serde(default = "default_content_type")]
    pub payload_content_type: String,
    /// User headers; the `rdq.` prefix is reserved.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Claim priority (higher first).
    #[serde(default)]
    pub priority: u8,
    /// Flow key for per-key limits and fairness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_key: Option<String>,
}

fn default_content_type() -> String {
    DEFAULT_CONTENT_TYPE.to_owned()
}

/// When a schedule is due.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Spec {
    /// A cron pattern: 5 fields, or 6 with leading seconds, read in the
    /// schedule's zone.
    Cron(String),
    /// A fixed period in milliseconds, anchored at `start_ms` or else at the
    /// Unix epoch; an absolute duration, blind to zones.
    EveryMs(u64),
}

/// What a fire does when the previous fire's task has not finished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Submit regardless, as cron does.
    #[default]
    Allow,
    /// Skip while the previous task waits to be claimed.
    SkipIfPending,
    /// Skip while the previous task is being worked on.
    SkipIfRunning,
    /// Skip while the previous task is waiting or being worked on.
    SkipIfUnfinished,
}

/// What a tick does with due times missed while no node was ticking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum CatchUp {
    /// Submit a due time only if it is at most the grace late; skip the rest.
    Skip,
    /// Submit the most recent missed due time; skip older ones.
    #[default]
    Latest,
    /// Submit every missed due time within `window_ms` of now, at most `max`
    /// of them (the newest); skip the rest.
    All {
        /// Most fires one tick submits, 1 to [`MAX_CATCH_UP_FIRES`](crate::MAX_CATCH_UP_FIRES).
        max: u32,
        /// How far back a missed due time is still worth running, in ms, 1 to
        /// [`MAX_CATCH_UP_WINDOW_MS`](crate::MAX_CATCH_UP_WINDOW_MS).
        window_ms: u64,
    },
}

/// `Vec<u8>` as standard base64 with padding, as the task API's `payload`.
mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD
            .decode(text.as_bytes())
            .map_err(|e| serde::de::Error::custom(format!("payload is not base64: {e}")))
    }
}
