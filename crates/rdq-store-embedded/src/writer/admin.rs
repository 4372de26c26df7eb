//! The operator's writes: redrive from the DLQ, purge, delete, a queue's
//! configuration, and pruning of finished tasks.
//!
//! They run in the same groups as the work path and follow its rules: a
//! refusal is an `Ok(Err(..))` that changes nothing, an `Err(Fatal)` ends the
//! group, and every change to a queue's counts is recorded in the group's
//! deltas.

use std::collections::HashSet;

use rdq_engine::glob::Glob;
use rdq_engine::{CancelRequest, EngineError, RedriveRequest, machine};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use rusqlite::types::ValueRef;
use rusqlite::{OptionalExtension, params};

use super::transaction::Ctx;
use crate::columns::{Columns, bytes};
use crate::error::{Fatal, task_id, undecodable};

pub(super) fn redrive(
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
    // Decide every transition before writing any, so a damaged row or a
    // unique key another task holds fails the request without
    // half-applying it (a dry run answers the same).
    let mut next = Vec::with_capacity(chosen.len());
    for &(seq, id) in &chosen {
        let decoded = ctx
            .conn
            .prepare_cached("SELECT envelope FROM tasks WHERE seq = ?1")?
            .query_row([seq], |row| Ok(Envelope::decode(bytes(row, 0)?)))?;
        let env = match decoded {
            Ok(env) => env,
            Err(e) => return Ok(Err(undecodable(&format!("task {id}"), &e))),
        };
        if let Err(e) = super::unique::may_return(ctx, &env, now)? {
            return Ok(Err(e));
        }
        match machine::redrive(&env, now) {
            Ok(redriven) => next.push((seq, redriven)),
            Err(e) => {
                tracing::warn!(task = %id, error = %e, "a task indexed as dead could not be redriven");
            }
        }
    }
    if request.dry_run {
        return Ok(Ok(chosen.into_iter().map(|(_, id)| id).collect()));
    }
    let mut ids = Vec::with_capacity(next.len());
    for (seq, env) in &next {
        rewrite(ctx, *seq, env)?;
        // A redriven task holds its unique key again.
        if let Some(slot) = rdq_engine::unique::slot_of_task(env) {
            super::unique::take(ctx, queue, &slot, env.id)?;
        }
        ctx.deltas.moved(queue, Status::Dead, env.status, 1);
        ids.push(env.id);
    }
    Ok(Ok(ids))
}

/// Cancels the request's PENDING tasks in the writer's transaction, so no
/// claim can take one in between.
pub(super) fn cancel_pending(
    ctx: &mut Ctx,
    request: &CancelRequest,
    now: Timestamp,
) -> Result<Result<Vec<TaskId>, EngineError>, Fatal> {
    let queue = request.queue.as_str();
    let mut next = Vec::new();
    {
        let mut seen = HashSet::with_capacity(request.ids.len());
        let mut stmt = ctx.conn.prepare_cached(
            "SELECT seq, envelope FROM tasks WHERE id = ?1 AND queue = ?2 AND status = 0",
        )?;
        for &id in &request.ids {
            if !seen.insert(id) {
                continue;
            }
            let found = stmt
                .query_row(params![&id.to_bytes()[..], queue], |row| {
                    Ok((row.get::<_, i64>(0)?, Envelope::decode(bytes(row, 1)?)))
                })
                .optional()?;
            let Some((seq, decoded)) = found else {
                continue;
            };
            let env = match decoded {
                Ok(env) => env,
                Err(e) => return Ok(Err(undecodable(&format!("task {id}"), &e))),
            };
            match machine::cancel(&env, &request.by, &request.message, now) {
                Ok(cancelled) => next.push((seq, cancelled)),
                Err(e) => return Ok(Err(e)),
            }
        }
    }
    if request.dry_run {
        return Ok(Ok(next.into_iter().map(|(_, env)| env.id).collect()));
    }
    let mut ids = Vec::with_capacity(next.len());
    for (seq, env) in &next {
        rewrite(ctx, *seq, env)?;
        // A redriven task holds its unique key again.
        if let Some(slot) = rdq_engine::unique::slot_of_task(env) {
            super::unique::take(ctx, queue, &slot, env.id)?;
        }
        ctx.deltas.moved(queue, Status::Pending, env.status, 1);
        ids.push(env.id);
    }
    Ok(Ok(ids))
}

const UPDATE_BY_SEQ: &str = "UPDATE tasks SET status = ?2, priority = ?3, next_attempt_at = ?4, \
     lease_expires_at = ?5, lease_attempt = ?6, error_type = ?7, finished_at = ?8, envelope = ?9, \
     claimed_at = NULL WHERE seq = ?1";

fn glob_matches(glob: Option<&Glob>, error_type: Option<&str>) -> bool {
    glob.is_none_or(|g| error_type.is_some_and(|t| g.matches(t)))
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

pub(super) fn purge(
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

pub(super) fn delete(ctx: &mut Ctx, id: TaskId) -> Result<Result<(), EngineError>, Fatal> {
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

pub(super) fn put_config(ctx: &mut Ctx, queue: &str, policy: &str) -> Result<(), Fatal> {
    ctx.conn
        .prepare_cached(
            "INSERT INTO queues (name, policy) VALUES (?1, ?2) \
             ON CONFLICT (name) DO UPDATE SET policy = excluded.policy",
        )?
        .execute(params![queue, policy])?;
    Ok(())
}

pub(super) fn prune(
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
