//! The SDK's one error type for its own operations (enqueue, build, shut
//! down). What a *handler* returns is a [`crate::JobError`], a different thing:
//! that one describes a failed job, this one a failed call.

use rdq_engine::EngineError;

/// Why an SDK call failed. [`Error::code`] is the stable code callers branch on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The engine or store refused (carries its stable code: `RESERVED_HEADER`,
    /// `PAYLOAD_TOO_LARGE`, `STORE_UNAVAILABLE`, …).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A job could not be serialised to JSON.
    #[error("ENCODE_FAILED: job {job} could not be serialised: {source}")]
    Encode {
        /// The job's name.
        job: &'static str,
        /// What serde said.
        source: serde_json::Error,
    },
    /// A job or queue name breaks the envelope's `[a-z0-9._-]{1,240}` rule.
    #[error("INVALID_NAME: {0}")]
    InvalidName(String),
    /// Two handlers were registered for the same job on the same queue.
    #[error("DUPLICATE_HANDLER: job {job} on queue {queue} has two handlers")]
    DuplicateHandler {
        /// The job's name.
        job: &'static str,
        /// Its queue.
        queue: &'static str,
    },
    /// A priority above the queue's `max_priority` (it would overtake deferred work).
    #[error("INVALID_PRIORITY: priority {priority} is above queue {queue}'s max_priority {max}")]
    InvalidPriority {
        /// The queue.
        queue: String,
        /// What was asked for.
        priority: u8,
        /// The queue's `max_priority`.
        max: u8,
    },
    /// The worker's loop ended abnormally (it panicked or was cancelled).
    #[error("WORKER_FAILED: {0}")]
    WorkerFailed(String),
}

impl Error {
    /// The stable code, the same string that starts the display form.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Engine(e) => e.code(),
            Self::Encode { .. } => "ENCODE_FAILED",
            Self::InvalidName(_) => "INVALID_NAME",
            Self::DuplicateHandler { .. } => "DUPLICATE_HANDLER",
            Self::InvalidPriority { .. } => "INVALID_PRIORITY",
            Self::WorkerFailed(_) => "WORKER_FAILED",
        }
    }
}
