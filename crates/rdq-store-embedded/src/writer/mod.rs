//! The one writer: a dedicated thread that owns the write connection and
//! commits every write in groups.
//!
//! Every write request (submit, claim, settle, redrive, purge, delete,
//! put_config, prune, throttle, a schedule's or a source's writes) travels
//! over a channel as a [`Job`]. The thread runs whatever is queued (up to
//! a bound) in one transaction and commits it; a second thread, the
//! syncer, fsyncs the WAL and only then answers the group's requests,
//! while the writer already runs the next group (see [`group::run`]). Many
//! concurrent submits and settles therefore share one fsync, and because
//! one thread does every claim, no task can be handed to two claimers.
//!
//! Within a group each request is independent: refusals (`LEASE_LOST`,
//! `TASK_NOT_FOUND`, a duplicate id) are decided by check-then-write inside the
//! transaction and touch nothing, so they never fail their neighbours. A
//! failure of SQLite itself (I/O, a full disk, a failed commit) rolls the
//! whole group back and answers every request in it `STORE_UNAVAILABLE`:
//! nothing in the group was acknowledged, so nothing acknowledged is lost.
//!
//! The parts, each depending only on those listed before it: `job` (what the
//! thread is sent and the answers it holds back), `health` (whether the last
//! group committed), `counts` (per-queue count changes), `transaction` (the
//! connection and the open group's state), `work` (submit, claim, settle),
//! `flow` (a claim under flow limits, throttles) and `admin` (redrive,
//! purge, delete, configuration, prune), `schedules` (a schedule's put,
//! delete and fire) and `sources` (an ingest, a cursor reset), `syncer` (the
//! fsync thread), `group` (the loop that runs and commits groups), and this
//! file, the [`Writer`] handle the store holds.

mod admin;
mod counts;
mod flow;
mod group;
mod health;
mod job;
mod schedules;
mod sources;
mod syncer;
mod transaction;
mod unique;
mod work;

use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use rdq_engine::EngineError;
use rusqlite::Connection;

use group::run;
pub(crate) use health::Health;
use job::Msg;
pub(crate) use job::{Encoded, Job};
pub(crate) use schedules::ScheduleJob;
pub(crate) use sources::SourceJob;
pub(crate) use syncer::{SyncFn, wal_sync};

/// The handle the store holds: a channel to the writer thread.
pub(crate) struct Writer {
    jobs: Option<mpsc::Sender<Msg>>,
    thread: Option<JoinHandle<()>>,
    health: Arc<Health>,
}

impl Writer {
    /// Starts the writer thread on `conn`; `sync` makes what it committed
    /// durable (an fsync of the write-ahead log, [`wal_sync`]), on a thread
    /// of its own (see [`syncer::sync_loop`]).
    pub(crate) fn start(
        conn: Connection,
        sync: SyncFn,
        max_group: usize,
        nice: i32,
    ) -> Result<Self, EngineError> {
        let (jobs, queue) = mpsc::channel();
        let health = Arc::new(Health::default());
        let reported = Arc::clone(&health);
        let synced = jobs.clone();
        let thread = std::thread::Builder::new()
            .name("rdq-embedded-writer".into())
            .spawn(move || {
                run(
                    conn,
                    &queue,
                    synced,
                    sync,
                    max_group.max(1),
                    nice,
                    &reported,
                )
            })
            .map_err(|e| {
                EngineError::Unavailable(format!("cannot start the store's writer thread: {e}"))
            })?;
        Ok(Self {
            jobs: Some(jobs),
            thread: Some(thread),
            health,
        })
    }

    /// Whether the writer thread is still running.
    pub(crate) fn is_alive(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// What the last group did.
    pub(crate) fn health(&self) -> &Health {
        &self.health
    }

    /// Sends a job; the error is what every request in it should answer.
    pub(crate) fn send(&self, job: Job) -> Result<(), EngineError> {
        let gone = || EngineError::Unavailable("the embedded store's writer has stopped".into());
        let jobs = self.jobs.as_ref().ok_or_else(gone)?;
        jobs.send(Msg::Job(job)).map_err(|_| gone())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // The thread finishes its group, waits for its fsync and exits.
        if let Some(jobs) = self.jobs.take() {
            let _ = jobs.send(Msg::Close);
        }
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the embedded store's writer thread panicked");
        }
    }
}

#[cfg(test)]
mod tests;
