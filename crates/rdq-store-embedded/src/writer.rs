//! The one writer: a dedicated thread that owns the write connection and
//! commits every write in groups.
//!
//! Every write request (submit, claim, settle, redrive, purge, delete,
//! put_config, prune) travels over a channel as a [`Job`]. The thread runs
//! whatever is queued (up to a bound) in one transaction and commits it; a
//! second thread, the syncer, fsyncs the WAL and only then answers the
//! group's requests, while the writer already runs the next group (see
//! [`run`]). Many concurrent submits and settles therefore share one fsync,
//! and because one thread does every claim, no task can be handed to two
//! claimers.
//!
//! Within a group each request is independent: refusals (`LEASE_LOST`,
//! `TASK_NOT_FOUND`, a duplicate id) are decided by check-then-write inside the
//! transaction and touch nothing, so they never fail their neighbours. A
//! failure of SQLite itself (I/O, a full disk, a failed commit) rolls the
//! whole group back and answers every request in it `STORE_UNAVAILABLE`:
//! nothing in the group was acknowledged, so nothing acknowledged is lost.

use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::Instant;

use rdq_engine::glob::Glob;
use rdq_engine::{EngineError, LeasedUpdate, NewTask, RedriveRequest, Submitted, machine};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode, OptionalExtension, Row, params};
use tokio::sync::oneshot;

use crate::columns::{Columns, envelope_columns, slot, stored};
use crate::error::{Fatal, task_id, undecodable};

/// Most tasks one claim takes, whatever `max` asks for.
const MAX_CLAIM: usize = 10_000;

type Tx<T> = oneshot::Sender<T>;

/// One write request and where its answer goes.
pub(crate) enum Job {
    Submit {
        tasks: Vec<Encoded<NewTask>>,
        reply: Tx<Vec<Result<Submitted, EngineError>>>,
    },
    Claim {
        queue: String,
        max: usize,
        /// The global concurrency limit, if the claim carries one.
        max_in_flight: Option<u64>,
        lease_ms: u64,
        now: Timestamp,
        reply: Tx<Result<Vec<ClaimedRow>, EngineError>>,
    },
    Settle {
        updates: Vec<Encoded<LeasedUpdate>>,
        /// Each update's row, where the claim is known to this process.
        seqs: Vec<Option<i64>>,
        reply: Tx<Vec<Result<(), EngineError>>>,
    },
    Redrive {
        request: RedriveRequest,
        now: Timestamp,
        reply: Tx<Result<Vec<TaskId>, EngineError>>,
    },
    Purge {
        queue: String,
        status: Status,
        dry_run: bool,
        reply: Tx<Result<u64, EngineError>>,
    },
    Delete {
        id: TaskId,
        reply: Tx<Result<(), EngineError>>,
    },
    PutConfig {
        queue: String,
        policy: String,
        reply: Tx<Result<(), EngineError>>,
    },
    Prune {
        queue: String,
        before: Timestamp,
        limit: usize,
        reply: Tx<Result<u64, EngineError>>,
    },
    /// Writes nothing of consequence, to learn whether writes commit now
    /// (readiness after a failed group).
    Probe { reply: Tx<Result<(), EngineError>> },
}

/// A write with its envelope already encoded by the caller, so the one
/// writer thread spends its time on SQLite rather than on JSON.
pub(crate) struct Encoded<T> {
    pub(crate) item: T,
    pub(crate) bytes: Vec<u8>,
}

impl Encoded<NewTask> {
    /// `task` with its envelope encoded.
    pub(crate) fn task(task: NewTask) -> Self {
        let bytes = task.envelope.encode();
        Self { item: task, bytes }
    }
}

impl Encoded<LeasedUpdate> {
    /// `update` with its envelope encoded, unless it is written compactly.
    pub(crate) fn update(update: LeasedUpdate) -> Self {
        let mut encoded = Self {
            item: update,
            bytes: Vec::new(),
        };
        if !encoded.is_compact() {
            encoded.bytes = encoded.item.envelope.encode();
        }
        encoded
    }

    /// Whether this update is a success, which writes its row's columns
    /// only and keeps the claimed state's bytes (`columns::stored`).
    pub(crate) fn is_compact(&self) -> bool {
        self.item.envelope.status == Status::Succeeded
    }
}

/// A row a claim took: its PENDING envelope bytes and the claim's instant
/// and lease deadline (unix ms), from which the caller finishes the claim.
pub(crate) struct ClaimedRow {
    pub(crate) seq: i64,
    /// The row's id column, to find the envelope in the pending cache
    /// (`None` if the column is damaged: the bytes are decoded instead).
    pub(crate) id: Option<TaskId>,
    pub(crate) bytes: Vec<u8>,
    pub(crate) claimed_at: i64,
    pub(crate) until: i64,
}

impl Job {
    /// How much of a group's budget this request takes.
    fn weight(&self) -> usize {
        match self {
            Self::Submit { tasks, .. } => tasks.len().max(1),
            Self::Settle { updates, .. } => updates.len().max(1),
            Self::Claim { max, .. } => (*max).clamp(1, MAX_CLAIM),
            _ => 1,
        }
    }

    /// The request's answer slot, with nothing decided yet.
    fn unanswered(self) -> Done {
        match self {
            Self::Submit { tasks, reply } => Done::Submit {
                n: tasks.len(),
                reply,
                results: Vec::new(),
            },
            Self::Settle { updates, reply, .. } => Done::Settle {
                n: updates.len(),
                reply,
                results: Vec::new(),
            },
            Self::Claim { reply, .. } => Done::Claim(reply, Ok(Vec::new())),
            Self::Redrive { reply, .. } => Done::Ids(reply, Ok(Vec::new())),
            Self::Purge { reply, .. } | Self::Prune { reply, .. } => Done::Count(reply, Ok(0)),
            Self::Delete { reply, .. } | Self::PutConfig { reply, .. } | Self::Probe { reply } => {
                Done::Unit(reply, Ok(()))
            }
        }
    }
}

/// A request's decided answer, held back until its group commits.
enum Done {
    Submit {
        n: usize,
        reply: Tx<Vec<Result<Submitted, EngineError>>>,
        results: Vec<Result<Submitted, EngineError>>,
    },
    Settle {
        n: usize,
        reply: Tx<Vec<Result<(), EngineError>>>,
        results: Vec<Result<(), EngineError>>,
    },
    Claim(
        Tx<Result<Vec<ClaimedRow>, EngineError>>,
        Result<Vec<ClaimedRow>, EngineError>,
    ),
    Ids(
        Tx<Result<Vec<TaskId>, EngineError>>,
        Result<Vec<TaskId>, EngineError>,
    ),
    Count(Tx<Result<u64, EngineError>>, Result<u64, EngineError>),
    Unit(Tx<Result<(), EngineError>>, Result<(), EngineError>),
}

impl Done {
    /// Answers with what was decided (the group committed). A caller that
    /// stopped waiting is no error: its write stands.
    fn send(self) {
        match self {
            Self::Submit { reply, results, .. } => drop(reply.send(results)),
            Self::Settle { reply, results, .. } => drop(reply.send(results)),
            Self::Claim(reply, r) => drop(reply.send(r)),
            Self::Ids(reply, r) => drop(reply.send(r)),
            Self::Count(reply, r) => drop(reply.send(r)),
            Self::Unit(reply, r) => drop(reply.send(r)),
        }
    }

    /// Answers `e` to everything in the request (the group did not commit).
    fn fail(self, e: &EngineError) {
        match self {
            Self::Submit { n, reply, .. } => drop(reply.send(vec![Err(e.clone()); n])),
            Self::Settle { n, reply, .. } => drop(reply.send(vec![Err(e.clone()); n])),
            Self::Claim(reply, _) => drop(reply.send(Err(e.clone()))),
            Self::Ids(reply, _) => drop(reply.send(Err(e.clone()))),
            Self::Count(reply, _) => drop(reply.send(Err(e.clone()))),
            Self::Unit(reply, _) => drop(reply.send(Err(e.clone()))),
        }
    }
}

/// What the writer thread reports about its last group: `None` when it
/// committed, else why it did not; and whether an fsync failed, after
/// which the store takes no more writes.
#[derive(Default)]
pub(crate) struct Health {
    last: Mutex<Option<String>>,
    poisoned: Mutex<Option<String>>,
}

impl Health {
    fn set(&self, failure: Option<String>) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = failure;
    }

    /// Stops every later write: an fsync failed (`why`).
    fn poison(&self, why: String) {
        self.set(Some(why.clone()));
        *self.poisoned.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
    }

    fn poisoned(&self) -> Option<String> {
        self.poisoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Why the last group failed, if it did (or the fsync failure that
    /// stopped the store's writes).
    pub(crate) fn last_failure(&self) -> Option<String> {
        self.poisoned().or_else(|| {
            self.last
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
    }
}

/// What the writer thread is told: a write, that the last group's fsync
/// is done, or to finish and stop.
pub(crate) enum Msg {
    Job(Job),
    /// The syncer finished the fsync of the group it was given.
    Synced,
    /// Commit what is open, wait for its fsync, and stop.
    Close,
}

/// The handle the store holds: a channel to the writer thread.
pub(crate) struct Writer {
    jobs: Option<mpsc::Sender<Msg>>,
    thread: Option<JoinHandle<()>>,
    health: Arc<Health>,
}

impl Writer {
    /// Starts the writer thread on `conn`; `sync` makes what it committed
    /// durable (an fsync of the write-ahead log, [`wal_sync`]), on a thread
    /// of its own (see [`sync_loop`]).
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

/// Per-queue count changes made by the current group, applied before commit.
#[derive(Default)]
struct Deltas(Vec<(String, [i64; 4])>);

impl Deltas {
    fn add(&mut self, queue: &str, status: Status, by: i64) {
        if by == 0 {
            return;
        }
        if let Some((_, counts)) = self.0.iter_mut().find(|(q, _)| q == queue) {
            counts[slot(status)] += by;
        } else {
            let mut counts = [0; 4];
            counts[slot(status)] = by;
            self.0.push((queue.to_owned(), counts));
        }
    }

    /// The change the current group made to `queue`'s count of `status`.
    fn of(&self, queue: &str, status: Status) -> i64 {
        self.0
            .iter()
            .find(|(q, _)| q == queue)
            .map_or(0, |(_, counts)| counts[slot(status)])
    }

    fn moved(&mut self, queue: &str, from: Status, to: Status, n: i64) {
        if from != to {
            self.add(queue, from, -n);
            self.add(queue, to, n);
        }
    }
}

/// The writer thread's state.
struct Ctx {
    conn: Connection,
    /// Reused for every envelope encoding, so writes allocate nothing per row.
    buf: Vec<u8>,
    deltas: Deltas,
}

/// The group being written: one open transaction.
#[derive(Default)]
struct Group {
    open: bool,
    /// Answers decided so far, held back until the commit (and, for
    /// anything but claims, its fsync).
    done: Vec<Done>,
    weight: usize,
    /// Whether it holds anything but claims (and so needs an fsync).
    durable: bool,
    /// Whether it holds a claim (which should not wait for an fsync).
    claims: bool,
    /// The failure that ends it: it is rolled back, every request failed.
    fatal: Option<Fatal>,
    started: Option<Instant>,
}

/// The writer's loop. Writes go into one open transaction as they arrive;
/// it commits once no more are waiting (or it holds `max_group`), with
/// `synchronous=NORMAL`, and its answers wait for the fsync the syncer
/// thread then does. While that fsync runs, the writer already executes
/// the next requests in a new transaction, which commits when the fsync is
/// done, so the writer's work and the disk's overlap and a group is as
/// large as the writes that arrive during one fsync. Claims need no fsync
/// (one lost to power failure leaves its tasks PENDING: they run again,
/// at least once), so a group of claims only commits and answers at once
/// even while an fsync runs, and the claims of any group answer at its
/// commit; a claim joins the open group even when it is full, so that it
/// never waits behind the group's fsync.
fn run(
    conn: Connection,
    queue: &mpsc::Receiver<Msg>,
    synced: mpsc::Sender<Msg>,
    sync: SyncFn,
    max_group: usize,
    nice: i32,
    health: &Arc<Health>,
) {
    prioritise(nice);
    // Acknowledging a write still promises it was fsynced: by the syncer.
    if let Err(e) = conn.pragma_update(None, "synchronous", "NORMAL") {
        tracing::warn!(error = %e, "the embedded store keeps synchronous=FULL (slower, as durable)");
    }
    let mut ctx = Ctx {
        conn,
        buf: Vec::with_capacity(4096),
        deltas: Deltas::default(),
    };
    let (to_sync, batches) = mpsc::channel::<Vec<Done>>();
    let syncer = {
        let health = Arc::clone(health);
        std::thread::Builder::new()
            .name("rdq-embedded-sync".into())
            .spawn(move || sync_loop(sync, &batches, &synced, &health))
    };
    let syncer = match syncer {
        Ok(handle) => Some(handle),
        Err(e) => {
            health.poison(format!("cannot start the store's fsync thread: {e}"));
            None
        }
    };
    let mut group = Group::default();
    let mut backlog: VecDeque<Job> = VecDeque::new();
    // Answers of committed groups waiting for an fsync not yet begun.
    let mut unsynced: Vec<Done> = Vec::new();
    let mut syncing = false;
    let mut closing = false;
    loop {
        if !syncing && !unsynced.is_empty() {
            syncing = hand_over(std::mem::take(&mut unsynced), &to_sync, health);
        }
        let can_commit = group.open && (!syncing || !group.durable || group.claims);
        let full = group.weight >= max_group;
        let next = if can_commit && full {
            None
        } else if !full && let Some(job) = backlog.pop_front() {
            Some(Msg::Job(job))
        } else if can_commit {
            queue.try_recv().ok()
        } else if closing && !group.open && !syncing && backlog.is_empty() && unsynced.is_empty() {
            break;
        } else {
            match queue.recv() {
                Ok(msg) => Some(msg),
                Err(_) => break,
            }
        };
        match next {
            None => unsynced.extend(finish(&mut ctx, &mut group, health)),
            // A claim joins even a full group (and so commits it at once):
            // otherwise it would wait behind the group's fsync.
            Some(Msg::Job(job)) if full && !matches!(job, Job::Claim { .. }) => {
                backlog.push_back(job);
            }
            Some(Msg::Job(job)) => add(&mut ctx, &mut group, job, health),
            Some(Msg::Synced) => syncing = false,
            Some(Msg::Close) => closing = true,
        }
    }
    drop(to_sync);
    if let Some(handle) = syncer
        && handle.join().is_err()
    {
        tracing::error!("the embedded store's fsync thread panicked");
    }
    tracing::debug!("the embedded store's writer is closing");
}

/// Runs `job` in the open group, opening it first if need be.
fn add(ctx: &mut Ctx, group: &mut Group, job: Job, health: &Health) {
    if !group.open {
        group.open = true;
        group.started = Some(Instant::now());
        group.fatal = match health.poisoned() {
            Some(why) => Some(Fatal(why)),
            None => begin(&ctx.conn).err(),
        };
    }
    group.weight += job.weight();
    let claim = matches!(job, Job::Claim { .. });
    group.claims |= claim;
    group.durable |= !claim;
    if group.fatal.is_some() {
        group.done.push(job.unanswered());
        return;
    }
    let (answer, failed) = execute(ctx, job);
    group.done.push(answer);
    group.fatal = failed;
}

/// Commits the open group (or rolls it back after a failure), records in
/// `health` whether it committed, and answers its claims: the answers that
/// wait for an fsync.
fn finish(ctx: &mut Ctx, group: &mut Group, health: &Health) -> Vec<Done> {
    let Group {
        done,
        durable,
        mut fatal,
        started,
        ..
    } = std::mem::take(group);
    let size = done.len();
    if fatal.is_none() {
        // An fsync failed while this group ran: nothing after it may commit.
        fatal = health.poisoned().map(Fatal);
    }
    if fatal.is_none() {
        fatal = flush_deltas(ctx).and_then(|()| commit(&ctx.conn)).err();
    }
    ctx.deltas.0.clear();
    if let Some(Fatal(why)) = fatal {
        if !ctx.conn.is_autocommit()
            && let Err(e) = ctx.conn.execute_batch("ROLLBACK")
        {
            tracing::error!(error = %e, "rolling back a failed group also failed");
        }
        tracing::error!(requests = size, error = %why, "group commit failed; nothing in it was stored");
        let e = EngineError::Unavailable(format!(
            "the embedded store could not commit this write: {why}"
        ));
        health.set(Some(why));
        done.into_iter().for_each(|d| d.fail(&e));
        return Vec::new();
    }
    tracing::trace!(
        requests = size,
        micros = started.map_or(0, |s| s.elapsed().as_micros() as u64),
        "group committed"
    );
    health.set(None);
    if !durable {
        done.into_iter().for_each(Done::send);
        return Vec::new();
    }
    let (claims, rest): (Vec<Done>, Vec<Done>) =
        done.into_iter().partition(|d| matches!(d, Done::Claim(..)));
    claims.into_iter().for_each(Done::send);
    rest
}

/// Gives the syncer the answers of every group committed since its last
/// fsync: whether it took them (else they are failed and the store stops
/// taking writes).
fn hand_over(done: Vec<Done>, to_sync: &mpsc::Sender<Vec<Done>>, health: &Health) -> bool {
    match to_sync.send(done) {
        Ok(()) => true,
        Err(mpsc::SendError(done)) => {
            let why = "the store's fsync thread has stopped".to_owned();
            health.poison(why.clone());
            let e = EngineError::Unavailable(format!("the embedded store cannot fsync: {why}"));
            done.into_iter().for_each(|d| d.fail(&e));
            false
        }
    }
}

/// The syncer thread: fsyncs the write-ahead log for each committed group
/// it is given, then answers the group's requests (and tells the writer,
/// first, so the next group commits at once). An fsync that fails leaves
/// the WAL's state on disk unknown (Linux may drop the dirty pages it
/// could not write), so the store stops taking writes, as PostgreSQL
/// does: every later write is refused `STORE_UNAVAILABLE` and the store is
/// not ready until it is opened again.
fn sync_loop(
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

/// Asks the scheduler to favour this thread (`nice`, as `nice(1)` counts:
/// lower runs first), so the one thread every write waits for is not kept
/// waiting for a core by the threads that feed it. Raising priority needs
/// the privilege to (root or `CAP_SYS_NICE`); without it the thread keeps
/// the process's priority, which is no error. Linux only; 0 changes nothing.
fn prioritise(nice: i32) {
    if nice == 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    match rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice) {
        Ok(()) => tracing::debug!(
            nice,
            "the embedded store's writer runs at a raised priority"
        ),
        Err(e) => {
            tracing::debug!(nice, error = %e, "the embedded store's writer keeps its priority")
        }
    }
}

fn begin(conn: &Connection) -> Result<(), Fatal> {
    if !conn.is_autocommit() {
        // A failed rollback left a transaction open: end it before anything else.
        conn.execute_batch("ROLLBACK")?;
    }
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    Ok(())
}

fn commit(conn: &Connection) -> Result<(), Fatal> {
    conn.prepare_cached("COMMIT")?.execute([])?;
    Ok(())
}

fn flush_deltas(ctx: &mut Ctx) -> Result<(), Fatal> {
    if ctx.deltas.0.is_empty() {
        return Ok(());
    }
    let mut stmt = ctx.conn.prepare_cached(
        "INSERT INTO queue_counts (queue, pending, in_flight, succeeded, dead)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (queue) DO UPDATE SET
             pending = pending + excluded.pending,
             in_flight = in_flight + excluded.in_flight,
             succeeded = succeeded + excluded.succeeded,
             dead = dead + excluded.dead",
    )?;
    for (queue, [p, i, s, d]) in &ctx.deltas.0 {
        if [*p, *i, *s, *d] != [0; 4] {
            stmt.execute(params![queue, p, i, s, d])?;
        }
    }
    Ok(())
}

/// Runs one request: its answer, and the failure that ends the group, if any.
fn execute(ctx: &mut Ctx, job: Job) -> (Done, Option<Fatal>) {
    match job {
        Job::Submit { tasks, reply } => {
            let n = tasks.len();
            let mut results = Vec::with_capacity(n);
            for task in tasks {
                match submit_one(ctx, task) {
                    Ok(r) => results.push(r),
                    Err(f) => return (Done::Submit { n, reply, results }, Some(f)),
                }
            }
            (Done::Submit { n, reply, results }, None)
        }
        Job::Settle {
            updates,
            seqs,
            reply,
        } => {
            let n = updates.len();
            let mut results = Vec::with_capacity(n);
            for (i, update) in updates.iter().enumerate() {
                match settle_one(ctx, update, seqs.get(i).copied().flatten()) {
                    Ok(r) => results.push(r),
                    Err(f) => return (Done::Settle { n, reply, results }, Some(f)),
                }
            }
            (Done::Settle { n, reply, results }, None)
        }
        Job::Claim {
            queue,
            max,
            max_in_flight,
            lease_ms,
            now,
            reply,
        } => split(claim(ctx, &queue, max, max_in_flight, lease_ms, now), |r| {
            Done::Claim(reply, r)
        }),
        Job::Redrive {
            request,
            now,
            reply,
        } => split(redrive(ctx, &request, now), |r| Done::Ids(reply, r)),
        Job::Purge {
            queue,
            status,
            dry_run,
            reply,
        } => split(purge(ctx, &queue, status, dry_run), |r| {
            Done::Count(reply, r)
        }),
        Job::Delete { id, reply } => split(delete(ctx, id), |r| Done::Unit(reply, r)),
        Job::PutConfig {
            queue,
            policy,
            reply,
        } => split(put_config(ctx, &queue, &policy).map(Ok), |r| {
            Done::Unit(reply, r)
        }),
        Job::Prune {
            queue,
            before,
            limit,
            reply,
        } => split(prune(ctx, &queue, before, limit), |r| Done::Count(reply, r)),
        Job::Probe { reply } => split(probe(ctx).map(Ok), |r| Done::Unit(reply, r)),
    }
}

/// A write that changes nothing but still needs the write lock and a commit.
fn probe(ctx: &mut Ctx) -> Result<(), Fatal> {
    ctx.conn
        .prepare_cached("UPDATE meta SET value = value WHERE key = 'lease_secret'")?
        .execute([])?;
    Ok(())
}

/// Pairs a request's outcome with its reply; a fatal failure gets a
/// placeholder answer that [`Done::fail`] replaces.
fn split<T: Default>(
    outcome: Result<Result<T, EngineError>, Fatal>,
    answer: impl FnOnce(Result<T, EngineError>) -> Done,
) -> (Done, Option<Fatal>) {
    match outcome {
        Ok(r) => (answer(r), None),
        Err(f) => (answer(Ok(T::default())), Some(f)),
    }
}

/// The bytes of a BLOB (or TEXT) column; anything else reads as empty, which
/// no decoder accepts.
fn bytes<'r>(row: &'r Row<'_>, idx: usize) -> rusqlite::Result<&'r [u8]> {
    Ok(match row.get_ref(idx)? {
        ValueRef::Blob(b) | ValueRef::Text(b) => b,
        _ => &[],
    })
}

fn glob_matches(glob: Option<&Glob>, error_type: Option<&str>) -> bool {
    glob.is_none_or(|g| error_type.is_some_and(|t| g.matches(t)))
}

const INSERT_TASK: &str = "INSERT INTO tasks (id, queue, status, priority, next_attempt_at, \
     lease_expires_at, lease_attempt, error_type, finished_at, idempotency_key, envelope) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

/// A claim writes the row's columns only; the envelope bytes stay PENDING
/// and the caller finishes the claim on them (`columns::stored`). A PENDING
/// row without a due time sorts first (`i64::MIN`); leased, it has none.
const CLAIM_ROW: &str = "UPDATE tasks SET status = 1, lease_expires_at = ?2, \
     lease_attempt = lease_attempt + 1, claimed_at = ?3, \
     next_attempt_at = NULLIF(next_attempt_at, ?4) WHERE seq = ?1";

const UPDATE_BY_SEQ: &str = "UPDATE tasks SET status = ?2, priority = ?3, next_attempt_at = ?4, \
     lease_expires_at = ?5, lease_attempt = ?6, error_type = ?7, finished_at = ?8, envelope = ?9, \
     claimed_at = NULL WHERE seq = ?1";

/// What a settle writes: the columns ?2 to ?8 (`Columns::of` the settled
/// envelope) and `$more`, on the row `$row`, if it still holds the lease
/// (?10 queue, ?11 claim counter).
macro_rules! settle_if_leased {
    ($more:literal, $row:literal) => {
        concat!(
            "UPDATE tasks SET status = ?2, priority = ?3, next_attempt_at = ?4, \
             lease_expires_at = ?5, lease_attempt = ?6, error_type = ?7, finished_at = ?8",
            $more,
            " WHERE ",
            $row,
            " AND queue = ?10 AND status = 1 AND lease_attempt = ?11"
        )
    };
}

/// A settle of the task ?1, found through the id index, with its whole
/// envelope ?9.
const UPDATE_IF_LEASED: &str = settle_if_leased!(", envelope = ?9, claimed_at = NULL", "id = ?1");

/// [`UPDATE_IF_LEASED`] on the row ?12, which must still be the task's: a
/// seek by rowid instead of one through the id index.
const UPDATE_IF_LEASED_AT: &str = settle_if_leased!(
    ", envelope = ?9, claimed_at = NULL",
    "seq = ?12 AND id = ?1"
);

/// A successful settle of the task ?1: its columns only. The row keeps the
/// claimed state's bytes and `claimed_at`, from which a read replays the
/// success (`columns::stored`); ?9 is not used.
const SUCCEED_IF_LEASED: &str = settle_if_leased!("", "id = ?1");

/// [`SUCCEED_IF_LEASED`] on the row ?12.
const SUCCEED_IF_LEASED_AT: &str = settle_if_leased!("", "seq = ?12 AND id = ?1");

fn submit_one(
    ctx: &mut Ctx,
    encoded: Encoded<NewTask>,
) -> Result<Result<Submitted, EngineError>, Fatal> {
    let Encoded {
        item: task,
        bytes: encoded_bytes,
    } = encoded;
    let env = &task.envelope;
    if let Some(key) = &task.idempotency_key {
        let mut stmt = ctx.conn.prepare_cached(concat!(
            "SELECT ",
            envelope_columns!(),
            " FROM tasks WHERE queue = ?1 AND idempotency_key = ?2"
        ))?;
        let existing = stmt
            .query_row(params![env.queue, key], |row| {
                let status: i64 = row.get(1)?;
                let claimed_at: Option<i64> = row.get(2)?;
                let until: Option<i64> = row.get(3)?;
                let finished_at: Option<i64> = row.get(4)?;
                Ok(Envelope::decode(bytes(row, 0)?)
                    .map(|e| (e, status, claimed_at, until, finished_at)))
            })
            .optional()?;
        if let Some(existing) = existing {
            return Ok(existing
                .map_err(|e| undecodable(&format!("the task holding key {key:?}"), &e))
                .and_then(|(e, status, claimed_at, until, finished_at)| {
                    stored(e, status, claimed_at, until, finished_at)
                })
                .map(Submitted::Existing));
        }
    }
    let c = Columns::of(env);
    let inserted = ctx.conn.prepare_cached(INSERT_TASK)?.execute(params![
        &env.id.to_bytes()[..],
        env.queue,
        c.status,
        c.priority,
        c.next_attempt_at,
        c.lease_expires_at,
        c.lease_attempt,
        c.error_type,
        c.finished_at,
        task.idempotency_key,
        encoded_bytes,
    ]);
    match inserted {
        Ok(_) => {
            ctx.deltas.add(&env.queue, env.status, 1);
            Ok(Ok(Submitted::Created(task.envelope)))
        }
        Err(e)
            if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation)
                && !ctx.conn.is_autocommit() =>
        {
            Ok(Err(EngineError::InvalidArgument(format!(
                "a task with id {} already exists",
                env.id
            ))))
        }
        Err(e) => Err(e.into()),
    }
}

/// Writes one settle if the task is still under the claim it names; `seq`
/// is where this process last saw the task's row (tried first).
fn settle_one(
    ctx: &mut Ctx,
    encoded: &Encoded<LeasedUpdate>,
    seq: Option<i64>,
) -> Result<Result<(), EngineError>, Fatal> {
    let update = &encoded.item;
    let env = &update.envelope;
    let id = &env.id.to_bytes()[..];
    let c = Columns::of(env);
    let columns = params![
        id,
        c.status,
        c.priority,
        c.next_attempt_at,
        c.lease_expires_at,
        c.lease_attempt,
        c.error_type,
        c.finished_at,
        encoded.bytes,
        env.queue,
        i64::from(update.expected.0),
    ];
    let (by_id, at_seq) = if encoded.is_compact() {
        (SUCCEED_IF_LEASED, SUCCEED_IF_LEASED_AT)
    } else {
        (UPDATE_IF_LEASED, UPDATE_IF_LEASED_AT)
    };
    let mut changed = 0;
    if let Some(seq) = seq {
        let at: &dyn rusqlite::ToSql = &seq;
        changed = ctx
            .conn
            .prepare_cached(at_seq)?
            .execute(rusqlite::params_from_iter(columns.iter().chain([&at])))?;
    }
    if changed == 0 {
        changed = ctx.conn.prepare_cached(by_id)?.execute(columns)?;
    }
    if changed == 1 {
        ctx.deltas
            .moved(&env.queue, Status::InFlight, env.status, 1);
        return Ok(Ok(()));
    }
    let exists = ctx
        .conn
        .prepare_cached("SELECT 1 FROM tasks WHERE id = ?1")?
        .query_row([id], |_| Ok(()))
        .optional()?;
    Ok(Err(match exists {
        Some(()) => EngineError::LeaseLost(env.id),
        None => EngineError::TaskNotFound(env.id),
    }))
}

/// Writes a new state of the row `seq`.
fn rewrite(ctx: &mut Ctx, seq: i64, env: &Envelope) -> Result<(), Fatal> {
    ctx.buf.clear();
    env.encode_into(&mut ctx.buf);
    let c = Columns::of(env);
    ctx.conn.prepare_cached(UPDATE_BY_SEQ)?.execute(params![
        seq,
        c.status,
        c.priority,
        c.next_attempt_at,
        c.lease_expires_at,
        c.lease_attempt,
        c.error_type,
        c.finished_at,
        ctx.buf,
    ])?;
    Ok(())
}

/// Takes due PENDING tasks in claim order: priority level by priority level
/// (highest first), each level in due order then id. Every step is a seek on
/// the `tasks_claim` partial index, so tasks due later (or at other levels)
/// are never scanned.
fn claim(
    ctx: &mut Ctx,
    queue: &str,
    max: usize,
    max_in_flight: Option<u64>,
    lease_ms: u64,
    now: Timestamp,
) -> Result<Result<Vec<ClaimedRow>, EngineError>, Fatal> {
    let mut max = max.min(MAX_CLAIM);
    if let Some(limit) = max_in_flight {
        // The writer is the only one changing tasks, so the stored count
        // plus this group's changes is exact: no other claim can interleave.
        let stored: i64 = ctx
            .conn
            .prepare_cached("SELECT in_flight FROM queue_counts WHERE queue = ?1")?
            .query_row(params![queue], |row| row.get(0))
            .optional()?
            .unwrap_or(0);
        let in_flight = u64::try_from(stored + ctx.deltas.of(queue, Status::InFlight)).unwrap_or(0);
        let room = limit.saturating_sub(in_flight);
        max = max.min(usize::try_from(room).unwrap_or(usize::MAX));
        if max == 0 {
            return Ok(Ok(Vec::new()));
        }
    }
    let now_ms = now.unix_ms();
    let mut rows: Vec<(i64, Option<TaskId>, Vec<u8>)> = Vec::new();
    let mut below: i64 = 256;
    while rows.len() < max {
        let level: Option<i64> = ctx
            .conn
            .prepare_cached(
                "SELECT priority FROM tasks WHERE queue = ?1 AND status = 0 AND priority < ?2 \
                 ORDER BY priority DESC LIMIT 1",
            )?
            .query_row(params![queue, below], |row| row.get(0))
            .optional()?;
        let Some(level) = level else { break };
        let mut stmt = ctx.conn.prepare_cached(
            // A task with a counter at its maximum cannot be claimed
            // (`machine::MAX_COUNT`; its `lease_attempt` column shows the
            // maximum, `columns.rs`): it is left as it is.
            "SELECT seq, id, envelope FROM tasks \
             WHERE queue = ?1 AND status = 0 AND priority = ?2 AND next_attempt_at <= ?3 \
             AND lease_attempt < 4294967295 \
             ORDER BY next_attempt_at, id LIMIT ?4",
        )?;
        let wanted = i64::try_from(max - rows.len()).unwrap_or(i64::MAX);
        let mut found = stmt.query(params![queue, level, now_ms, wanted])?;
        while let Some(row) = found.next()? {
            let id = task_id(bytes(row, 1)?).ok();
            rows.push((row.get(0)?, id, bytes(row, 2)?.to_vec()));
        }
        below = level;
    }
    let until = now.plus_ms(lease_ms).unix_ms();
    let mut claimed = Vec::with_capacity(rows.len());
    let mut stmt = ctx.conn.prepare_cached(CLAIM_ROW)?;
    for (seq, id, bytes) in rows {
        stmt.execute(params![seq, until, now_ms, i64::MIN])?;
        claimed.push(ClaimedRow {
            seq,
            id,
            bytes,
            claimed_at: now_ms,
            until,
        });
    }
    drop(stmt);
    let n = claimed.len() as i64;
    ctx.deltas
        .moved(queue, Status::Pending, Status::InFlight, n);
    Ok(Ok(claimed))
}

fn redrive(
    ctx: &mut Ctx,
    request: &RedriveRequest,
    now: Timestamp,
) -> Result<Result<Vec<TaskId>, EngineError>, Fatal> {
    let glob = match request.error_type.as_deref().map(Glob::new).transpose() {
        Ok(glob) => glob,
        Err(e) => return Ok(Err(EngineError::InvalidArgument(e))),
    };
    let limit = request.limit.unwrap_or(usize::MAX);
    let queue = request.queue.as_str();
    let mut chosen: Vec<(i64, TaskId)> = Vec::new();
    match &request.ids {
        Some(ids) => {
            let mut seen = HashSet::with_capacity(ids.len());
            let mut stmt = ctx.conn.prepare_cached(
                "SELECT seq, error_type FROM tasks WHERE id = ?1 AND queue = ?2 AND status = 3",
            )?;
            for &id in ids {
                if chosen.len() >= limit {
                    break;
                }
                if !seen.insert(id) {
                    continue;
                }
                let found: Option<(i64, Option<String>)> = stmt
                    .query_row(params![&id.to_bytes()[..], queue], |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })
                    .optional()?;
                if let Some((seq, error_type)) = found
                    && glob_matches(glob.as_ref(), error_type.as_deref())
                {
                    chosen.push((seq, id));
                }
            }
        }
        None => {
            let mut stmt = ctx.conn.prepare_cached(
                "SELECT seq, id, error_type FROM tasks WHERE queue = ?1 AND status = 3 ORDER BY id",
            )?;
            let mut rows = stmt.query([queue])?;
            while chosen.len() < limit {
                let Some(row) = rows.next()? else { break };
                let error_type = match row.get_ref(2)? {
                    ValueRef::Text(t) => std::str::from_utf8(t).ok(),
                    _ => None,
                };
                if !glob_matches(glob.as_ref(), error_type) {
                    continue;
                }
                let id = match task_id(bytes(row, 1)?) {
                    Ok(id) => id,
                    Err(e) => return Ok(Err(e)),
                };
                chosen.push((row.get(0)?, id));
            }
        }
    }
    if request.dry_run {
        return Ok(Ok(chosen.into_iter().map(|(_, id)| id).collect()));
    }
    // Decide every transition before writing any, so a damaged row fails the
    // request without half-applying it.
    let mut next = Vec::with_capacity(chosen.len());
    {
        let mut stmt = ctx
            .conn
            .prepare_cached("SELECT envelope FROM tasks WHERE seq = ?1")?;
        for &(seq, id) in &chosen {
            let decoded = stmt.query_row([seq], |row| Ok(Envelope::decode(bytes(row, 0)?)))?;
            let env = match decoded {
                Ok(env) => env,
                Err(e) => return Ok(Err(undecodable(&format!("task {id}"), &e))),
            };
            match machine::redrive(&env, now) {
                Ok(redriven) => next.push((seq, redriven)),
                Err(e) => {
                    tracing::warn!(task = %id, error = %e, "a task indexed as dead could not be redriven");
                }
            }
        }
    }
    let mut ids = Vec::with_capacity(next.len());
    for (seq, env) in &next {
        rewrite(ctx, *seq, env)?;
        ctx.deltas.moved(queue, Status::Dead, env.status, 1);
        ids.push(env.id);
    }
    Ok(Ok(ids))
}

fn purge(
    ctx: &mut Ctx,
    queue: &str,
    status: Status,
    dry_run: bool,
) -> Result<Result<u64, EngineError>, Fatal> {
    // One statement per status, with the status as a literal, so SQLite can
    // use that status's partial index.
    let (count, delete) = match status {
        Status::Pending => (
            "SELECT count(*) FROM tasks WHERE queue = ?1 AND status = 0",
            "DELETE FROM tasks WHERE queue = ?1 AND status = 0",
        ),
        Status::InFlight => (
            "SELECT count(*) FROM tasks WHERE queue = ?1 AND status = 1",
            "DELETE FROM tasks WHERE queue = ?1 AND status = 1",
        ),
        Status::Succeeded => (
            "SELECT count(*) FROM tasks WHERE queue = ?1 AND status = 2",
            "DELETE FROM tasks WHERE queue = ?1 AND status = 2",
        ),
        Status::Dead => (
            "SELECT count(*) FROM tasks WHERE queue = ?1 AND status = 3",
            "DELETE FROM tasks WHERE queue = ?1 AND status = 3",
        ),
    };
    let n: i64 = if dry_run {
        ctx.conn
            .prepare_cached(count)?
            .query_row([queue], |row| row.get(0))?
    } else {
        let n = ctx.conn.prepare_cached(delete)?.execute([queue])?;
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        ctx.deltas.add(queue, status, -n);
        n
    };
    Ok(Ok(u64::try_from(n).unwrap_or(0)))
}

fn delete(ctx: &mut Ctx, id: TaskId) -> Result<Result<(), EngineError>, Fatal> {
    let removed: Option<(String, i64)> = ctx
        .conn
        .prepare_cached("DELETE FROM tasks WHERE id = ?1 RETURNING queue, status")?
        .query_row([&id.to_bytes()[..]], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    Ok(match removed {
        Some((queue, code)) => {
            if let Some(status) = crate::columns::status_of(code) {
                ctx.deltas.add(&queue, status, -1);
            }
            Ok(())
        }
        None => Err(EngineError::TaskNotFound(id)),
    })
}

fn put_config(ctx: &mut Ctx, queue: &str, policy: &str) -> Result<(), Fatal> {
    ctx.conn
        .prepare_cached(
            "INSERT INTO queues (name, policy) VALUES (?1, ?2) \
             ON CONFLICT (name) DO UPDATE SET policy = excluded.policy",
        )?
        .execute(params![queue, policy])?;
    Ok(())
}

fn prune(
    ctx: &mut Ctx,
    queue: &str,
    before: Timestamp,
    limit: usize,
) -> Result<Result<u64, EngineError>, Fatal> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let n = ctx
        .conn
        .prepare_cached(
            "DELETE FROM tasks WHERE seq IN (SELECT seq FROM tasks \
             WHERE queue = ?1 AND status = 2 AND finished_at < ?2 \
             ORDER BY finished_at LIMIT ?3)",
        )?
        .execute(params![queue, before.unix_ms(), limit])?;
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    ctx.deltas.add(queue, Status::Succeeded, -n);
    Ok(Ok(u64::try_from(n).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc as std_mpsc;
    use std::time::Duration;

    use super::*;
    use crate::schema::{Tuning, open_writer};

    /// A writer on a fresh store whose fsyncs are done by `sync`.
    fn writer(dir: &tempfile::TempDir, sync: SyncFn) -> Writer {
        let tuning = Tuning {
            page_size: 4096,
            cache_kib: 1024,
            busy_timeout: Duration::from_secs(1),
            check_budget: Duration::ZERO,
        };
        let conn = open_writer(&dir.path().join("rdq.db"), tuning).expect("open");
        Writer::start(conn, sync, 64, 0).expect("start")
    }

    fn put_config(w: &Writer) -> oneshot::Receiver<Result<(), EngineError>> {
        let (reply, answer) = oneshot::channel();
        w.send(Job::PutConfig {
            queue: "q".into(),
            policy: "{}".into(),
            reply,
        })
        .expect("send");
        answer
    }

    fn claim(w: &Writer) -> oneshot::Receiver<Result<Vec<ClaimedRow>, EngineError>> {
        let (reply, answer) = oneshot::channel();
        w.send(Job::Claim {
            queue: "q".into(),
            max: 10,
            max_in_flight: None,
            lease_ms: 1000,
            now: Timestamp::now(),
            reply,
        })
        .expect("send");
        answer
    }

    /// The answer, waiting up to ten seconds for it.
    fn answer<T>(mut rx: oneshot::Receiver<T>) -> T {
        for _ in 0..1000 {
            match rx.try_recv() {
                Ok(v) => return v,
                Err(oneshot::error::TryRecvError::Empty) => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("the writer dropped the request: {e}"),
            }
        }
        panic!("no answer within ten seconds");
    }

    /// Whether `rx` is still unanswered a tenth of a second from now.
    fn still_waiting<T>(rx: &mut oneshot::Receiver<T>) -> bool {
        std::thread::sleep(Duration::from_millis(100));
        still_waiting_now(rx)
    }

    /// A writer whose every fsync says on `entered` that it began, then
    /// waits for a message on `gate` (and fails once `gate` is dropped).
    fn gated_writer(
        dir: &tempfile::TempDir,
    ) -> (Writer, std_mpsc::Receiver<()>, std_mpsc::Sender<()>) {
        let (entered_tx, entered) = std_mpsc::channel::<()>();
        let (gate, gate_rx) = std_mpsc::channel::<()>();
        let w = writer(
            dir,
            Box::new(move || {
                entered_tx.send(()).map_err(|e| e.to_string())?;
                gate_rx.recv().map_err(|e| e.to_string())
            }),
        );
        (w, entered, gate)
    }

    #[test]
    fn writes_wait_for_their_fsync_and_claims_do_not() {
        let dir = tempfile::tempdir().expect("dir");
        let (w, entered, gate) = gated_writer(&dir);
        let mut first = put_config(&w);
        entered
            .recv_timeout(Duration::from_secs(10))
            .expect("the first write's fsync began");
        assert!(still_waiting(&mut first), "answered before its fsync");
        // Committed and fsyncing: a write now waits for a second fsync, a
        // claim for nothing.
        let mut second = put_config(&w);
        assert!(answer(claim(&w)).expect("claim").is_empty());
        assert!(still_waiting(&mut first));
        assert!(still_waiting(&mut second));
        gate.send(()).expect("open");
        answer(first).expect("first write");
        entered
            .recv_timeout(Duration::from_secs(10))
            .expect("the second write's fsync began");
        assert!(still_waiting(&mut second), "answered before its own fsync");
        gate.send(()).expect("open");
        answer(second).expect("second write");
    }

    #[test]
    fn a_claim_does_not_wait_for_an_fsync_behind_a_full_group() {
        let dir = tempfile::tempdir().expect("dir");
        let (w, entered, gate) = gated_writer(&dir);
        let first = put_config(&w);
        entered
            .recv_timeout(Duration::from_secs(10))
            .expect("the first write's fsync began");
        // While it runs, writes fill the next group to its limit (64) and
        // beyond; they wait for an fsync, the claim must not.
        let mut waiting: Vec<_> = (0..80).map(|_| put_config(&w)).collect();
        assert!(answer(claim(&w)).expect("claim").is_empty());
        assert!(waiting.iter_mut().all(still_waiting_now));
        gate.send(()).expect("open");
        answer(first).expect("first write");
    }

    /// Whether `rx` is unanswered.
    fn still_waiting_now<T>(rx: &mut oneshot::Receiver<T>) -> bool {
        matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty))
    }

    #[test]
    fn a_failed_fsync_fails_its_writes_and_every_later_one() {
        let dir = tempfile::tempdir().expect("dir");
        let w = writer(&dir, Box::new(|| Err("the disk is on fire".to_owned())));
        let failed = answer(put_config(&w)).expect_err("the write was not durable");
        assert_eq!(failed.code(), "STORE_UNAVAILABLE");
        assert!(
            failed.to_string().contains("the disk is on fire"),
            "{failed}"
        );
        let Err(later) = answer(claim(&w)) else {
            panic!("a claim committed after a failed fsync");
        };
        assert!(later.to_string().contains("the disk is on fire"), "{later}");
        assert!(answer(put_config(&w)).is_err());
        let why = w.health().last_failure().expect("not healthy");
        assert!(why.contains("the disk is on fire"), "{why}");
    }

    #[test]
    fn closing_answers_the_write_still_waiting_for_its_fsync() {
        let dir = tempfile::tempdir().expect("dir");
        let (entered_tx, entered) = std_mpsc::channel::<()>();
        let w = writer(
            &dir,
            Box::new(move || {
                let _ = entered_tx.send(());
                std::thread::sleep(Duration::from_millis(200));
                Ok(())
            }),
        );
        let pending = put_config(&w);
        entered
            .recv_timeout(Duration::from_secs(10))
            .expect("fsync began");
        drop(w);
        answer(pending).expect("answered before the writer stopped");
    }
}
