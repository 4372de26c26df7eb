//! Unique slots (`docs/uniqueness.md`): the table `unique_slots` names,
//! per queue and slot, the task that took the slot last. Whether that task
//! still holds it is judged from its stored state at the moment another
//! submit, a redrive or an import asks, inside the writer's transaction
//! (`rdq_engine::unique`), so no write ever has to release a slot. A slot
//! whose task is gone (purged, pruned, deleted) is free.

use rdq_engine::EngineError;
use rdq_engine::unique::{self, Decision, UniqueSlot};
use rdq_envelope::{Envelope, TaskId, Timestamp};
use rusqlite::{OptionalExtension, params};

use super::transaction::Ctx;
use crate::columns::{Columns, bytes, stored};
use crate::error::{Fatal, undecodable};

/// The task that took `slot` of `queue` last, with its row, as stored now.
fn holder(
    ctx: &mut Ctx,
    queue: &str,
    slot: &str,
) -> Result<Result<Option<(i64, Envelope)>, EngineError>, Fatal> {
    let mut stmt = ctx.conn.prepare_cached(concat!(
        "SELECT t.seq, ",
        "t.envelope, t.status, t.claimed_at, t.lease_expires_at, t.finished_at",
        " FROM unique_slots u JOIN tasks t ON t.id = u.task WHERE u.queue = ?1 AND u.slot = ?2"
    ))?;
    let found = stmt
        .query_row(params![queue, slot], |row| {
            let seq: i64 = row.get(0)?;
            let decoded = Envelope::decode(bytes(row, 1)?);
            Ok((
                seq,
                decoded,
                row.get::<_, i64>(2)?,
                row.get::<_, Option<i64>>(3)?,
                row.get::<_, Option<i64>>(4)?,
                row.get::<_, Option<i64>>(5)?,
            ))
        })
        .optional()?;
    let Some((seq, decoded, status, claimed_at, until, finished_at)) = found else {
        return Ok(Ok(None));
    };
    Ok(decoded
        .map_err(|e| undecodable(&format!("the task holding unique slot {slot:?}"), &e))
        .and_then(|env| stored(env, status, claimed_at, until, finished_at))
        .map(|env| Some((seq, env))))
}

/// What a submit of `task` taking `unique` does (`unique::decide`); a
/// replace or debounce is written here (the holder is PENDING).
pub(super) fn decide(
    ctx: &mut Ctx,
    task: &Envelope,
    unique: &UniqueSlot,
) -> Result<Result<Decision, EngineError>, Fatal> {
    let (seq, holder) = match holder(ctx, &task.queue, &unique.slot)? {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(Ok(Decision::Take)),
        Err(e) => return Ok(Err(e)),
    };
    let decision = unique::decide(&holder, task, unique);
    if let Decision::Replace(next) = &decision {
        let flow_key = super::work::flow_key_column(ctx, next)?.map(str::to_owned);
        ctx.buf.clear();
        next.encode_into(&mut ctx.buf);
        let c = Columns::of(next);
        ctx.conn
            .prepare_cached(
                "UPDATE tasks SET envelope = ?2, next_attempt_at = ?3, flow_key = ?4 \
                 WHERE seq = ?1 AND status = 0",
            )?
            .execute(params![seq, ctx.buf, c.next_attempt_at, flow_key])?;
    }
    Ok(Ok(decision))
}

/// Makes task `id` the one that took `slot` of `queue`.
pub(super) fn take(ctx: &mut Ctx, queue: &str, slot: &str, id: TaskId) -> Result<(), Fatal> {
    ctx.conn
        .prepare_cached(
            "INSERT INTO unique_slots (queue, slot, task) VALUES (?1, ?2, ?3) \
             ON CONFLICT (queue, slot) DO UPDATE SET task = excluded.task",
        )?
        .execute(params![queue, slot, &id.to_bytes()[..]])?;
    Ok(())
}

/// Refuses (`UNIQUE_HELD`) to bring `env` back (a redrive) while another
/// task holds its slot.
pub(super) fn may_return(
    ctx: &mut Ctx,
    env: &Envelope,
    now: Timestamp,
) -> Result<Result<(), EngineError>, Fatal> {
    let Some(slot) = unique::slot_of_task(env) else {
        return Ok(Ok(()));
    };
    Ok(match holder(ctx, &env.queue, &slot)? {
        Ok(Some((_, holder))) => unique::may_return(env.id, &holder, now),
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    })
}
