//! How PostgreSQL failures become engine errors, and which of them are worth
//! trying again.
//!
//! The engine knows one error type with stable codes. Every failure of the
//! database or of the connection to it is `STORE_UNAVAILABLE` (the caller may
//! retry); a row rdq cannot read back is `CORRUPT_STORE`. Before that, the
//! store itself retries what is safe to retry: see [`Failure`].

use rdq_engine::EngineError;
use tokio_postgres::error::SqlState;

/// What went wrong with one attempt at a database operation.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// The database rolled the statement back (a deadlock or serialization
    /// failure): nothing was written, so trying again is always safe.
    #[error("{0}")]
    RolledBack(String),
    /// The connection failed or the server went away (restart, failover,
    /// network). The statement may or may not have committed.
    #[error("{0}")]
    Connection(String),
    /// Anything else: an error answer the store does not expect, which a
    /// retry would only repeat.
    #[error("{0}")]
    Fatal(String),
    /// A refusal or a damaged row decided by the store itself; passed to the
    /// caller as is.
    #[error("{0}")]
    Engine(EngineError),
}

impl Failure {
    /// The error the caller sees once the store stops retrying.
    pub(crate) fn into_engine(self) -> EngineError {
        match self {
            Self::Engine(e) => e,
            Self::RolledBack(why) | Self::Connection(why) | Self::Fatal(why) => {
                EngineError::Unavailable(format!("the PostgreSQL store failed: {why}"))
            }
        }
    }
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Self {
        Self::Engine(e)
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        classify(&e)
    }
}

/// Sorts a `tokio-postgres` error into a [`Failure`].
pub(crate) fn classify(e: &tokio_postgres::Error) -> Failure {
    let text = describe(e);
    if e.is_closed() {
        return Failure::Connection(text);
    }
    match e.code() {
        Some(code)
            if *code == SqlState::T_R_DEADLOCK_DETECTED
                || *code == SqlState::T_R_SERIALIZATION_FAILURE =>
        {
            Failure::RolledBack(text)
        }
        Some(code)
            if code.code().starts_with("08")
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
                || *code == SqlState::TOO_MANY_CONNECTIONS
                || *code == SqlState::READ_ONLY_SQL_TRANSACTION =>
        {
            Failure::Connection(text)
        }
        Some(_) => Failure::Fatal(text),
        // No SQLSTATE: an I/O error, a timeout or a protocol failure.
        None => Failure::Connection(text),
    }
}

/// The server's message with its SQLSTATE when there is one.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

/// A stored envelope that no longer decodes.
pub(crate) fn undecodable(what: &str, e: &dyn std::fmt::Display) -> EngineError {
    EngineError::CorruptStore(format!("stored envelope of {what} does not decode: {e}"))
}
