//! Moves WAL checkpoints off the commit path.
//!
//! With SQLite's automatic checkpoints, the commit that crosses the WAL's size
//! threshold also copies the WAL into the database and fsyncs it, so one
//! unlucky group waits tens of milliseconds: that is the p99 of
//! enqueue-to-start. The writer therefore runs with `wal_autocheckpoint=0`
//! and this thread, on its own connection, runs PASSIVE checkpoints (which
//! never block the writer or readers) a few times a second.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use rdq_engine::EngineError;
use rusqlite::{Connection, OpenFlags};

/// Pause between passive checkpoints.
const INTERVAL: Duration = Duration::from_millis(250);

/// The running checkpointer; stops (after one last pass) when dropped.
pub(crate) struct Checkpointer {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts checkpointing the store at `path`.
    pub(crate) fn start(path: &Path) -> Result<Self, EngineError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| unavailable(path, &e))?;
        let (stop, stopped) = mpsc::channel::<()>();
        let name: PathBuf = path.to_owned();
        let thread = std::thread::Builder::new()
            .name("rdq-embedded-checkpointer".into())
            .spawn(move || {
                // Wakes every INTERVAL; a message or a closed channel means stop.
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(INTERVAL) {
                    if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)") {
                        tracing::warn!(path = %name.display(), error = %e, "WAL checkpoint failed");
                    }
                }
            })
            .map_err(|e| {
                EngineError::Unavailable(format!("cannot start the store's checkpointer: {e}"))
            })?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

fn unavailable(path: &Path, e: &rusqlite::Error) -> EngineError {
    EngineError::Unavailable(format!(
        "cannot open {} for checkpoints: {e}",
        path.display()
    ))
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the embedded store's checkpointer panicked");
        }
    }
}
