//! The one writer: a dedicated thread that owns the write connection and
//! commits every write in groups.
//!
//! Every write request (submit, claim, settle, redrive, purge, delete,
//! put_config, prune) travels over a channel as a [`Job`]. The thread takes
//! whatever is queued (up to a bound), runs it all in one transaction, commits
//! once (one fsync of the WAL for the whole group) and only then answers each
//! request. Many concurrent submits and settles therefore share one fsync, and
//! because one thread does every claim, no task can be handed to two claimers.
//!
//! Within a group each request is independent: refusals (`LEASE_LOST`,
//! `TASK_NOT_FOUND`, a duplicate id) are decided by check-then-write inside the
//! transaction and touch nothing, so they never fail their neighbours. A
//! failure of SQLite itself (I/O, a full disk, a failed commit) rolls the
//! whole group back and answers every request in it `STORE_UNAVAILABLE`:
//! nothing in the group was acknowledged, so nothing acknowledged is lost.

use std::collections::HashSet;
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
    /// `update` with its envelope encoded.
    pub(crate) fn update(update: LeasedUpdate) -> Self {
        let bytes = update.envelope.encode();
        Self {
            item: update,
            bytes,
        }
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
/// committed, else why it did not.
#[derive(Default)]
pub(crate) struct Health(Mutex<Option<String>>);

impl Health {
    fn set(&self, failure: Option<String>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = failure;
    }

    /// Why the last group failed, if it did.
    pub(crate) fn last_failure(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The handle the store holds: a channel to the writer thread.
pub(crate) struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    health: Arc<Health>,
}

impl Writer {
    /// Starts the writer thread on `conn`.
    pub(crate) fn start(
        conn: Connection,
        max_group: usize,
        nice: i32,
    ) -> Result<Self, EngineError> {
        let (jobs, queue) = mpsc::channel();
        let health = Arc::new(Health::default());
        let reported = Arc::clone(&health);
        let thread = std::thread::Builder::new()
            .name("rdq-embedded-writer".into())
            .spawn(move || run(conn, &queue, max_group.max(1), nice, &reported))
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
        jobs.send(job).map_err(|_| gone())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the channel lets the thread finish its group and exit.
        drop(self.jobs.take());
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
    /// Whether the connection is at `synchronous=FULL` (it opens that way).
    durable: bool,
}

fn run(
    conn: Connection,
    queue: &mpsc::Receiver<Job>,
    max_group: usize,
    nice: i32,
    health: &Health,
) {
    prioritise(nice);
    let mut ctx = Ctx {
        conn,
        buf: Vec::with_capacity(4096),
        deltas: Deltas::default(),
        durable: true,
    };
    let mut group = Vec::with_capacity(64);
    while let Ok(first) = queue.recv() {
        let mut weight = first.weight();
        group.push(first);
        while weight < max_group {
            match queue.try_recv() {
                Ok(job) => {
                    weight += job.weight();
                    group.push(job);
                }
                Err(_) => break,
            }
        }
        run_group(&mut ctx, &mut group, health);
    }
    tracing::debug!("the embedded store's writer is closing");
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

/// Runs one group in one transaction, records in `health` whether it
/// committed, then answers it (in that order: a caller told its write failed
/// must find the store not ready).
fn run_group(ctx: &mut Ctx, group: &mut Vec<Job>, health: &Health) {
    let started = Instant::now();
    let size = group.len();
    let mut done = Vec::with_capacity(size);
    // A claim needs no fsync of its own: one lost to power failure leaves its
    // tasks PENDING (they run again, at least once), and every later
    // synchronous commit makes the WAL before it durable too. Groups holding
    // anything else (submits, settles, admin writes) fsync before answering.
    let durable = group.iter().any(|job| !matches!(job, Job::Claim { .. }));
    let mut fatal = set_durability(ctx, durable).err();
    if fatal.is_none() {
        fatal = begin(&ctx.conn).err();
    }
    for job in group.drain(..) {
        if fatal.is_some() {
            done.push(job.unanswered());
            continue;
        }
        let (answer, failed) = execute(ctx, job);
        done.push(answer);
        fatal = failed;
    }
    if fatal.is_none() {
        fatal = flush_deltas(ctx).and_then(|()| commit(&ctx.conn)).err();
    }
    ctx.deltas.0.clear();
    match fatal {
        None => {
            tracing::trace!(
                requests = size,
                micros = started.elapsed().as_micros() as u64,
                "group committed"
            );
            health.set(None);
            done.into_iter().for_each(Done::send);
        }
        Some(Fatal(why)) => {
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
        }
    }
}

/// Switches `synchronous` between FULL (fsync at commit) and NORMAL (no
/// fsync) when the next group needs the other one.
fn set_durability(ctx: &mut Ctx, durable: bool) -> Result<(), Fatal> {
    if ctx.durable != durable {
        let mode = if durable { "FULL" } else { "NORMAL" };
        ctx.conn
            .pragma_update(None, "synchronous", mode)
            .map_err(|e| Fatal(format!("cannot set synchronous={mode}: {e}")))?;
        ctx.durable = durable;
    }
    Ok(())
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
            lease_ms,
            now,
            reply,
        } => split(claim(ctx, &queue, max, lease_ms, now), |r| {
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

/// What a settle writes, and the lease it must still find (?10 queue, ?11
/// claim counter); the row is named after it.
macro_rules! settle_if_leased {
    ($row:literal) => {
        concat!(
            "UPDATE tasks SET status = ?2, priority = ?3, next_attempt_at = ?4, \
             lease_expires_at = ?5, lease_attempt = ?6, error_type = ?7, finished_at = ?8, \
             envelope = ?9, claimed_at = NULL WHERE ",
            $row,
            " AND queue = ?10 AND status = 1 AND lease_attempt = ?11"
        )
    };
}

/// A settle of the task ?1, found through the id index.
const UPDATE_IF_LEASED: &str = settle_if_leased!("id = ?1");

/// A settle of the task ?1 on the row ?12, which must still be the task's:
/// a seek by rowid instead of one through the id index.
const UPDATE_IF_LEASED_AT: &str = settle_if_leased!("seq = ?12 AND id = ?1");

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
                Ok(Envelope::decode(bytes(row, 0)?).map(|e| (e, status, claimed_at, until)))
            })
            .optional()?;
        if let Some(existing) = existing {
            return Ok(existing
                .map_err(|e| undecodable(&format!("the task holding key {key:?}"), &e))
                .and_then(|(e, status, claimed_at, until)| stored(e, status, claimed_at, until))
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
    let mut changed = 0;
    if let Some(seq) = seq {
        let at: &dyn rusqlite::ToSql = &seq;
        changed = ctx
            .conn
            .prepare_cached(UPDATE_IF_LEASED_AT)?
            .execute(rusqlite::params_from_iter(columns.iter().chain([&at])))?;
    }
    if changed == 0 {
        changed = ctx
            .conn
            .prepare_cached(UPDATE_IF_LEASED)?
            .execute(columns)?;
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
    lease_ms: u64,
    now: Timestamp,
) -> Result<Result<Vec<ClaimedRow>, EngineError>, Fatal> {
    let max = max.min(MAX_CLAIM);
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
            // A task whose claim counter is at its maximum cannot be
            // claimed (`machine::MAX_COUNT`): it is left as it is.
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
