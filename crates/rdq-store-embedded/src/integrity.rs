//! SQLite's own integrity checks: a bounded one at open, a full one on demand.
//!
//! A data file damaged in the middle (a bad disk, a copy cut short, bytes
//! written over it) can still have an intact header and schema, so it would
//! open and report ready while most writes fail. At open the store therefore
//! runs `PRAGMA quick_check` within a time budget
//! ([`crate::EmbeddedOptions::open_check_budget`]): damage found is
//! `CORRUPT_STORE` and the file is left as it was; a check that runs out of
//! time is logged and the store opens (a large store is checked in full by
//! [`crate::EmbeddedStore::check_files`], which `rdq check` runs).

use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use rdq_engine::EngineError;
use rusqlite::{Connection, ErrorCode, OpenFlags};

use crate::error::from_open;

/// Most problems a check reports.
const MAX_PROBLEMS: u32 = 20;

/// `PRAGMA quick_check` on `conn`, interrupted after `budget` (a zero
/// budget skips it).
pub(crate) fn quick_check(
    conn: &Connection,
    path: &Path,
    budget: Duration,
) -> Result<(), EngineError> {
    if budget.is_zero() {
        return Ok(());
    }
    let handle = conn.get_interrupt_handle();
    let (finished, wait) = mpsc::channel::<()>();
    let timer = std::thread::Builder::new()
        .name("rdq-embedded-check".into())
        .spawn(move || {
            if matches!(wait.recv_timeout(budget), Err(RecvTimeoutError::Timeout)) {
                handle.interrupt();
            }
        });
    let timer = match timer {
        Ok(timer) => timer,
        Err(e) => {
            tracing::warn!(error = %e, "cannot time the integrity check at open; skipping it");
            return Ok(());
        }
    };
    let outcome = problems(conn, "quick_check");
    drop(finished);
    // Joined before the connection is used again, so a late interrupt
    // cannot land on the next statement.
    let _ = timer.join();
    match outcome {
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::OperationInterrupted) => {
            tracing::warn!(
                path = %path.display(),
                budget_ms = budget.as_millis() as u64,
                "the integrity check at open did not finish in its budget; run `rdq check` for a full one"
            );
            Ok(())
        }
        other => verdict(path, "quick_check", other),
    }
}

/// `PRAGMA integrity_check` of the store file at `path`, in full, on a
/// read-only connection: `CORRUPT_STORE` listing what is damaged.
pub(crate) fn full_check(path: &Path) -> Result<(), EngineError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| from_open(path, e))?;
    verdict(path, "integrity_check", problems(&conn, "integrity_check"))
}

fn problems(conn: &Connection, pragma: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(&format!("PRAGMA {pragma}({MAX_PROBLEMS})"))?;
    let lines = stmt.query_map([], |row| row.get::<_, String>(0))?;
    let mut found = Vec::new();
    for line in lines {
        let line = line?;
        if line != "ok" {
            found.push(line);
        }
    }
    Ok(found)
}

fn verdict(
    path: &Path,
    pragma: &str,
    outcome: rusqlite::Result<Vec<String>>,
) -> Result<(), EngineError> {
    let damaged = |why: String| {
        EngineError::CorruptStore(format!(
            "{} is damaged (PRAGMA {pragma}): {why}; restore it from a backup \
             (rdq check --store DIR reports everything)",
            path.display()
        ))
    };
    match outcome {
        Ok(found) if found.is_empty() => Ok(()),
        Ok(found) => Err(damaged(found.join("; "))),
        Err(e)
            if matches!(
                e.sqlite_error_code(),
                Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
            ) =>
        {
            Err(damaged(e.to_string()))
        }
        Err(e) => Err(from_open(path, e)),
    }
}
