//! The one error type of schedules, with the stable codes callers branch on.
//!
//! Every refusal names the field it is about (`spec.cron`, `catch_up.all.max`,
//! `task.queue`) and says why; the code is for programs, the text for people.

use rdq_envelope::EnvelopeError;

/// Why a schedule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// `name` is empty, longer than 240 bytes, outside `[a-z0-9._-]`, or `.`/`..`.
    #[error("name: {why}")]
    InvalidScheduleName {
        /// What is wrong with the name.
        why: String,
    },
    /// `spec.cron` does not parse, or matches no date at all.
    #[error("spec.cron: {why}")]
    InvalidCron {
        /// What the parser refused.
        why: String,
    },
    /// `tz` names no zone in the IANA database compiled into rdq.
    #[error("tz: {why}")]
    UnknownTimeZone {
        /// Which name was not found.
        why: String,
    },
    /// `spec.every_ms` is zero or above [`MAX_INTERVAL_MS`](crate::MAX_INTERVAL_MS).
    #[error("spec.every_ms: {why}")]
    InvalidInterval {
        /// The bound that was broken.
        why: String,
    },
    /// `start_ms`/`end_ms` are out of range or out of order, or the catch-up
    /// policy's `max` or `window_ms` is zero or above its cap.
    #[error("{field}: {why}")]
    InvalidWindow {
        /// The field's path (`end_ms`, `catch_up.all.max`, …).
        field: &'static str,
        /// The bound that was broken.
        why: String,
    },
    /// The task template breaks a rule of tasks themselves; the code is the
    /// envelope's (`INVALID_QUEUE_NAME`, `INVALID_HANDLER_REF`,
    /// `RESERVED_HEADER`, `INVALID_FIELD`), the path starts with `task.`.
    #[error("{0}")]
    InvalidTask(EnvelopeError),
}

impl ScheduleError {
    /// The stable code: `INVALID_SCHEDULE_NAME`, `INVALID_CRON`,
    /// `UNKNOWN_TIME_ZONE`, `INVALID_INTERVAL`, `INVALID_WINDOW`, or for the
    /// task template the envelope's code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidScheduleName { .. } => "INVALID_SCHEDULE_NAME",
            Self::InvalidCron { .. } => "INVALID_CRON",
            Self::UnknownTimeZone { .. } => "UNKNOWN_TIME_ZONE",
            Self::InvalidInterval { .. } => "INVALID_INTERVAL",
            Self::InvalidWindow { .. } => "INVALID_WINDOW",
            Self::InvalidTask(e) => e.code().as_str(),
        }
    }

    /// The path of the field the error is about, as in the JSON form.
    pub fn field(&self) -> &str {
        match self {
            Self::InvalidScheduleName { .. } => "name",
            Self::InvalidCron { .. } => "spec.cron",
            Self::UnknownTimeZone { .. } => "tz",
            Self::InvalidInterval { .. } => "spec.every_ms",
            Self::InvalidWindow { field, .. } => field,
            Self::InvalidTask(e) => e.path().unwrap_or("task"),
        }
    }
}
