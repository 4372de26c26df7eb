//! Group commit: the writer thread's loop.
//!
//! Requests run one after another in one open transaction (a [`Group`]),
//! which commits when no more are waiting or it is full; its answers then
//! wait for the syncer's fsync while the next group already runs. This file
//! decides when a group opens, commits or fails, and which operation runs a
//! request ([`execute`]); the operations themselves are in `work.rs` and
//! `admin.rs`.

use std::collections::VecDeque;
use std::sync::{Arc, mpsc};
use std::time::Instant;

use rdq_engine::EngineError;
use rusqlite::Connection;

use super::admin::{cancel_pending, delete, prune, purge, put_config, redrive};
use super::counts::Deltas;
use super::flow::throttle;
use super::health::Health;
use super::job::{Done, Job, Msg};
use super::syncer::{SyncFn, sync_loop};
use super::transaction::{Ctx, begin, commit};
use super::work::{claim, settle_one, submit_one};
use crate::error::Fatal;

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
pub(super) fn run(
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
        flow_queues: Default::default(),
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
        fatal = ctx
            .deltas
            .flush(&ctx.conn)
            .and_then(|()| commit(&ctx.conn))
            .err();
    }
    ctx.deltas.clear();
    if let Some(Fatal(why)) = fatal {
        // The group's `flows` rows are gone with it.
        ctx.flow_queues.clear();
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
            flow,
            lease_ms,
            now,
            reply,
        } => split(
            claim(
                ctx,
                &queue,
                max,
                max_in_flight,
                flow.as_deref(),
                lease_ms,
                now,
            ),
            |r| Done::Claim(reply, r),
        ),
        Job::Throttle {
            queue,
            key,
            until,
            reply,
        } => split(throttle(ctx, &queue, key.as_deref(), until), |r| {
            Done::Unit(reply, r)
        }),
        Job::Redrive {
            request,
            now,
            reply,
        } => split(redrive(ctx, &request, now), |r| Done::Ids(reply, r)),
        Job::Cancel {
            request,
            now,
            reply,
        } => split(cancel_pending(ctx, &request, now), |r| Done::Ids(reply, r)),
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
        Job::Schedule(job) => super::schedules::execute(ctx, job),
        Job::Source(job) => super::sources::execute(ctx, job),
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
