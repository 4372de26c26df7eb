//! How SQLite failures become engine errors.
//!
//! The engine knows one error type with stable codes; this store maps SQLite's
//! failures onto it: a file that is not a database, or is damaged, is
//! `CORRUPT_STORE`; anything else (I/O, locks held by another process, a full
//! disk) is `STORE_UNAVAILABLE`, which callers may retry. Inside the writer a
//! failed statement is a [`Fatal`] for the whole group commit.

use std::path::Path;

use rdq_engine::EngineError;
use rdq_envelope::TaskId;
use rusqlite::ErrorCode;

/// A failure that ends the current group commit: the transaction is rolled
/// back and every request in the group is answered `STORE_UNAVAILABLE`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Fatal(pub(crate) String);

impl From<rusqlite::Error> for Fatal {
    fn from(e: rusqlite::Error) -> Self {
        Self(e.to_string())
    }
}

/// Maps a failure while opening `path`.
pub(crate) fn from_open(path: &Path, e: rusqlite::Error) -> EngineError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            EngineError::CorruptStore(format!("{} is not a usable rdq store: {e}", path.display()))
        }
        _ => EngineError::Unavailable(format!("cannot open {}: {e}", path.display())),
    }
}

/// Maps a failure of a statement on an open store.
pub(crate) fn from_sql(e: &rusqlite::Error) -> EngineError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            EngineError::CorruptStore(format!("the store's database is damaged: {e}"))
        }
        _ => EngineError::Unavailable(format!("the embedded store failed: {e}")),
    }
}

/// A stored envelope that no longer decodes.
pub(crate) fn undecodable(what: &str, e: &dyn std::fmt::Display) -> EngineError {
    EngineError::CorruptStore(format!("stored envelope of {what} does not decode: {e}"))
}

/// A stored task id that is not 16 bytes.
pub(crate) fn bad_id(len: usize) -> EngineError {
    EngineError::CorruptStore(format!("a stored task id is {len} bytes, not 16"))
}

/// Reads a task id column.
pub(crate) fn task_id(bytes: &[u8]) -> Result<TaskId, EngineError> {
    let raw: [u8; 16] = bytes.try_into().map_err(|_| bad_id(bytes.len()))?;
    Ok(TaskId::from_u128(u128::from_be_bytes(raw)))
}
