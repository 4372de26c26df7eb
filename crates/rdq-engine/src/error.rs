//! The engine's one error type; every variant has a stable code.

use rdq_envelope::{EnvelopeError, TaskId};
use rdq_schedule::ScheduleError;

/// Why the engine or a store refused an operation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The envelope itself is invalid (carries the envelope's own code).
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// The settle or extension names a lease that is no longer current: the task
    /// was reclaimed, reaped, redriven or already settled.
    #[error("LEASE_LOST: the lease on task {0} is no longer held")]
    LeaseLost(TaskId),
    /// The operation does not apply to the task's current status.
    #[error("INVALID_TRANSITION: {0}")]
    InvalidTransition(String),
    /// No task has this id.
    #[error("TASK_NOT_FOUND: no task {0}")]
    TaskNotFound(TaskId),
    /// A policy value is out of range or malformed.
    #[error("INVALID_POLICY: {0}")]
    InvalidPolicy(String),
    /// The store cannot do this; its capabilities say so.
    #[error("UNSUPPORTED: {0}")]
    Unsupported(String),
    /// A cursor or filter argument is malformed.
    #[error("INVALID_ARGUMENT: {0}")]
    InvalidArgument(String),
    /// The store's data is not rdq's, or is damaged; nothing was changed.
    #[error("CORRUPT_STORE: {0}")]
    CorruptStore(String),
    /// A schedule breaks a rule (carries the schedule's own code:
    /// `INVALID_CRON`, `UNKNOWN_TIME_ZONE`, `INVALID_SCHEDULE_NAME`, …).
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// No schedule has this name.
    #[error("SCHEDULE_NOT_FOUND: no schedule {0}")]
    ScheduleNotFound(String),
    /// A submit's unique key (or a redriven or imported task's) is held by
    /// another task (docs/uniqueness.md): nothing was written.
    #[error("UNIQUE_HELD: the unique key is held by task {holder} (hold {hold})")]
    UniqueHeld {
        /// The task that holds the key.
        holder: TaskId,
        /// Its hold, in its text form (`until_finished`, `for:60000`, …).
        hold: String,
    },
    /// The store could not be reached or failed; the operation may be retried.
    #[error("STORE_UNAVAILABLE: {0}")]
    Unavailable(String),
}

impl EngineError {
    /// The stable code, the same string that starts the display form.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Envelope(e) => e.code().as_str(),
            Self::LeaseLost(_) => "LEASE_LOST",
            Self::InvalidTransition(_) => "INVALID_TRANSITION",
            Self::TaskNotFound(_) => "TASK_NOT_FOUND",
            Self::InvalidPolicy(_) => "INVALID_POLICY",
            Self::Unsupported(_) => "UNSUPPORTED",
            Self::InvalidArgument(_) => "INVALID_ARGUMENT",
            Self::CorruptStore(_) => "CORRUPT_STORE",
            Self::Schedule(e) => e.code(),
            Self::ScheduleNotFound(_) => "SCHEDULE_NOT_FOUND",
            Self::UniqueHeld { .. } => "UNIQUE_HELD",
            Self::Unavailable(_) => "STORE_UNAVAILABLE",
        }
    }
}
