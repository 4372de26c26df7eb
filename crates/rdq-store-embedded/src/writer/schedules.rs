//! Schedule writes on the writer thread: put, delete, and the fire, which
//! compares the cursor and submits the fire's tasks in the same group
//! transaction (the thread is the database's only writer, so nothing runs
//! between the two).

use std::collections::BTreeMap;

use rdq_engine::store::schedules::{add_skips, created_count, last_task};
use rdq_engine::{EngineError, FireOutcome, FireRequest, NewTask, SchedulePut};
use rusqlite::{OptionalExtension, params};
use tokio::sync::oneshot;

use super::job::{Done, Encoded};
use super::transaction::Ctx;
use super::work::submit_one;
use crate::error::Fatal;

type Tx<T> = oneshot::Sender<T>;

/// A schedule write and where its answer goes.
pub(crate) enum ScheduleJob {
    Put {
        put: SchedulePut,
        reply: Tx<Result<bool, EngineError>>,
    },
    ReplaceIf {
        put: SchedulePut,
        expected: String,
        reply: Tx<Result<bool, EngineError>>,
    },
    Delete {
        name: String,
        reply: Tx<Result<bool, EngineError>>,
    },
    Fire {
        fire: FireRequest,
        /// `fire.tasks`, encoded on the caller's thread.
        tasks: Vec<Encoded<NewTask>>,
        reply: Tx<Result<FireOutcome, EngineError>>,
    },
}

impl ScheduleJob {
    /// How much of a group's budget it takes: a fire, one per task.
    pub(super) fn weight(&self) -> usize {
        match self {
            Self::Fire { tasks, .. } => tasks.len().max(1),
            _ => 1,
        }
    }

    pub(super) fn unanswered(self) -> ScheduleDone {
        match self {
            Self::Put { reply, .. }
            | Self::ReplaceIf { reply, .. }
            | Self::Delete { reply, .. } => ScheduleDone::Flag(reply, Ok(false)),
            Self::Fire { reply, .. } => ScheduleDone::Fire(reply, Ok(FireOutcome::Raced)),
        }
    }
}

/// A schedule write's decided answer, held back until its group commits.
pub(super) enum ScheduleDone {
    Flag(Tx<Result<bool, EngineError>>, Result<bool, EngineError>),
    Fire(
        Tx<Result<FireOutcome, EngineError>>,
        Result<FireOutcome, EngineError>,
    ),
}

impl ScheduleDone {
    pub(super) fn send(self) {
        match self {
            Self::Flag(reply, r) => drop(reply.send(r)),
            Self::Fire(reply, r) => drop(reply.send(r)),
        }
    }

    pub(super) fn fail(self, e: &EngineError) {
        match self {
            Self::Flag(reply, _) => drop(reply.send(Err(e.clone()))),
            Self::Fire(reply, _) => drop(reply.send(Err(e.clone()))),
        }
    }
}

/// Runs one schedule write in the open group.
pub(super) fn execute(ctx: &mut Ctx, job: ScheduleJob) -> (Done, Option<Fatal>) {
    let (done, fatal) = match job {
        ScheduleJob::Put { put, reply } => flag(put_schedule(ctx, &put), reply),
        ScheduleJob::ReplaceIf {
            put,
            expected,
            reply,
        } => flag(replace_schedule_if(ctx, &put, &expected), reply),
        ScheduleJob::Delete { name, reply } => flag(delete_schedule(ctx, &name), reply),
        ScheduleJob::Fire { fire, tasks, reply } => match fire_schedule(ctx, &fire, tasks) {
            Ok(outcome) => (ScheduleDone::Fire(reply, outcome), None),
            Err(f) => (ScheduleDone::Fire(reply, Ok(FireOutcome::Raced)), Some(f)),
        },
    };
    (Done::Schedule(done), fatal)
}

fn flag(
    outcome: Result<bool, Fatal>,
    reply: Tx<Result<bool, EngineError>>,
) -> (ScheduleDone, Option<Fatal>) {
    match outcome {
        Ok(b) => (ScheduleDone::Flag(reply, Ok(b)), None),
        Err(f) => (ScheduleDone::Flag(reply, Ok(false)), Some(f)),
    }
}

fn put_schedule(ctx: &mut Ctx, put: &SchedulePut) -> Result<bool, Fatal> {
    let existed = ctx
        .conn
        .prepare_cached("SELECT 1 FROM schedules WHERE name = ?1")?
        .query_row([&put.name], |_| Ok(()))
        .optional()?
        .is_some();
    ctx.conn
        .prepare_cached(
            "INSERT INTO schedules (name, owner, definition, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?4) \
             ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, \
             definition = excluded.definition, updated_at = excluded.updated_at",
        )?
        .execute(params![
            put.name,
            put.owner.as_str(),
            put.definition,
            put.now_ms
        ])?;
    Ok(!existed)
}

fn replace_schedule_if(ctx: &mut Ctx, put: &SchedulePut, expected: &str) -> Result<bool, Fatal> {
    let n = ctx
        .conn
        .prepare_cached(
            "UPDATE schedules SET owner = ?2, definition = ?3, updated_at = ?4 \
             WHERE name = ?1 AND definition = ?5",
        )?
        .execute(params![
            put.name,
            put.owner.as_str(),
            put.definition,
            put.now_ms,
            expected
        ])?;
    Ok(n > 0)
}

fn delete_schedule(ctx: &mut Ctx, name: &str) -> Result<bool, Fatal> {
    let n = ctx
        .conn
        .prepare_cached("DELETE FROM schedules WHERE name = ?1")?
        .execute([name])?;
    Ok(n > 0)
}

/// The compare-and-swap on the cursor, then the submits, then the
/// bookkeeping: all in this group's transaction.
fn fire_schedule(
    ctx: &mut Ctx,
    fire: &FireRequest,
    tasks: Vec<Encoded<NewTask>>,
) -> Result<Result<FireOutcome, EngineError>, Fatal> {
    let moved = ctx
        .conn
        .prepare_cached("UPDATE schedules SET last_due = ?2 WHERE name = ?1 AND last_due IS ?3")?
        .execute(params![
            fire.name,
            fire.last_due_ms,
            fire.expected_last_due_ms
        ])?;
    if moved == 0 {
        return Ok(Ok(FireOutcome::Raced));
    }
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(submit_one(ctx, task)?);
    }
    let skips: String = ctx
        .conn
        .prepare_cached("SELECT skips FROM schedules WHERE name = ?1")?
        .query_row([&fire.name], |row| row.get(0))?;
    // The counters are the store's own JSON; unreadable ones start over
    // rather than stop the schedule.
    let mut skips: BTreeMap<String, u64> = serde_json::from_str(&skips).unwrap_or_default();
    add_skips(&mut skips, &fire.skipped);
    let skips = serde_json::to_string(&skips).unwrap_or_else(|_| "{}".to_owned());
    let last = last_task(&results).map(|id| id.to_bytes().to_vec());
    let fires = i64::try_from(created_count(&results)).unwrap_or(i64::MAX);
    ctx.conn
        .prepare_cached(
            "UPDATE schedules SET skips = ?2, fires = fires + ?3, \
             last_task = coalesce(?4, last_task), \
             last_fire_at = CASE WHEN ?4 IS NULL THEN last_fire_at ELSE ?5 END \
             WHERE name = ?1",
        )?
        .execute(params![fire.name, skips, fires, last, fire.now_ms])?;
    Ok(Ok(FireOutcome::Fired(results)))
}
