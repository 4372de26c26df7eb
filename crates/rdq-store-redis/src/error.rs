//! How Redis failures become engine errors, and which are worth retrying.
//!
//! The engine knows one error type with stable codes: an unreachable or
//! failing Redis is `STORE_UNAVAILABLE` (the caller may retry), a value rdq
//! cannot read back is `CORRUPT_STORE`. Before giving up, the store retries
//! what is safe to retry: see [`Failure`].

use rdq_engine::EngineError;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// What went wrong with one attempt at a Redis operation.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// Redis certainly did not run the command (no connection could be
    /// made, or it answered that it is loading, failing over or read-only):
    /// trying again is always safe.
    #[error("{0}")]
    NotApplied(String),
    /// The connection failed with the command sent: it may or may not have run.
    #[error("{0}")]
    Unknown(String),
    /// An error answer a retry would only repeat.
    #[error("{0}")]
    Fatal(String),
    /// A refusal or a damaged value decided by the store; passed on as is.
    #[error("{0}")]
    Engine(EngineError),
}

impl Failure {
    /// The error the caller sees once the store stops retrying.
    pub(crate) fn into_engine(self) -> EngineError {
        match self {
            Self::Engine(e) => e,
            Self::NotApplied(why) | Self::Unknown(why) | Self::Fatal(why) => {
                EngineError::Unavailable(format!("the Redis store failed: {why}"))
            }
        }
    }
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Self {
        Self::Engine(e)
    }
}

impl From<RedisError> for Failure {
    fn from(e: RedisError) -> Self {
        classify(&e)
    }
}

/// Sorts a `redis` error into a [`Failure`].
pub(crate) fn classify(e: &RedisError) -> Failure {
    let text = e.to_string();
    if e.is_connection_refusal() {
        return Failure::NotApplied(text);
    }
    match e.kind() {
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask,
        ) => Failure::NotApplied(text),
        ErrorKind::Io | ErrorKind::ClusterConnectionNotFound => Failure::Unknown(text),
        _ if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => {
            Failure::Unknown(text)
        }
        _ => Failure::Fatal(text),
    }
}

/// A value rdq cannot read: not the shape its scripts answer.
pub(crate) fn unexpected(what: &str) -> Failure {
    Failure::Engine(EngineError::CorruptStore(format!(
        "Redis answered {what} in a shape rdq does not expect"
    )))
}
