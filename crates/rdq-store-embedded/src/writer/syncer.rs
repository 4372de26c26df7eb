//! The syncer: the thread that makes committed groups durable.
//!
//! The writer commits with `synchronous=NORMAL` and hands each committed
//! group's answers here; this thread fsyncs the write-ahead log (a
//! [`SyncFn`], normally [`wal_sync`]) and only then answers them, while the
//! writer already runs the next group.

use std::fs::File;
use std::path::PathBuf;
use std::sync::mpsc;

use rdq_engine::EngineError;

use super::health::Health;
use super::job::{Done, Msg};

/// The syncer thread: fsyncs the write-ahead log for each committed group
/// it is given, then answers the group's requests (and tells the writer,
/// first, so the next group commits at once). An fsync that fails leaves
/// the WAL's state on disk unknown (Linux may drop the dirty pages it
/// could not write), so the store stops taking writes, as PostgreSQL
/// does: every later write is refused `STORE_UNAVAILABLE` and the store is
/// not ready until it is opened again.
pub(super) fn sync_loop(
    mut sync: SyncFn,
    batches: &mpsc::Receiver<Vec<Done>>,
    writer: &mpsc::Sender<Msg>,
    health: &Health,
) {
    while let Ok(done) = batches.recv() {
        let synced = match health.poisoned() {
            Some(why) => Err(why),
            None => sync(),
        };
        if let Err(why) = &synced
            && health.poisoned().is_none()
        {
            tracing::error!(error = %why, "fsync of the write-ahead log failed; the store takes no more writes");
            health.poison(why.clone());
        }
        let _ = writer.send(Msg::Synced);
        match synced {
            Ok(()) => done.into_iter().for_each(Done::send),
            Err(why) => {
                let e = EngineError::Unavailable(format!(
                    "the embedded store could not make this write durable: {why}"
                ));
                done.into_iter().for_each(|d| d.fail(&e));
            }
        }
    }
}

/// Makes every write committed so far durable; `Err` says why it could not.
pub(crate) type SyncFn = Box<dyn FnMut() -> Result<(), String> + Send>;

/// `fdatasync` of the write-ahead log `wal` (opened on first use and kept:
/// the writer's connection keeps the file for as long as the store is open).
pub(crate) fn wal_sync(wal: PathBuf) -> SyncFn {
    let mut file: Option<File> = None;
    Box::new(move || {
        if file.is_none() {
            let opened = File::open(&wal)
                .map_err(|e| format!("cannot open {} to fsync it: {e}", wal.display()))?;
            file = Some(opened);
        }
        file.as_ref()
            .map_or(Ok(()), File::sync_data)
            .map_err(|e| format!("fsync of {} failed: {e}", wal.display()))
    })
}
