//! The work path's writes: submit, claim and settle, and their SQL.
//!
//! These run most often, so each is a handful of cached statements that seek
//! by index or rowid. A claim and a successful settle write a row's columns
//! only and leave its envelope bytes as they were (`columns::stored` replays
//! them on read). A refusal (a duplicate id, `LEASE_LOST`, `TASK_NOT_FOUND`)
//! is an `Ok(Err(..))` that changes nothing; an `Err(Fatal)` ends the group.

use rdq_engine::flow;
use rdq_engine::unique::Decision;
use rdq_engine::{EngineError, FlowPolicy, LeasedUpdate, NewTask, Submitted};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use rusqlite::{ErrorCode, OptionalExtension, params};

use super::job::{ClaimedRow, Encoded, MAX_CLAIM};
use super::transaction::Ctx;
use crate::columns::{Columns, bytes, envelope_columns, stored};
use crate::error::{Fatal, task_id, undecodable};

const INSERT_TASK: &str = "INSERT INTO tasks (id, queue, status, priority, next_attempt_at, \
     lease_expires_at, lease_attempt, error_type, finished_at, idempotency_key, envelope, \
     flow_key) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

/// A claim writes the row's columns only; the envelope bytes stay PENDING
/// and the caller finishes the claim on them (`columns::stored`). A PENDING
/// row without a due time sorts first (`i64::MIN`); leased, it has none.
const CLAIM_ROW: &str = "UPDATE tasks SET status = 1, lease_expires_at = ?2, \
     lease_attempt = lease_attempt + 1, claimed_at = ?3, \
     next_attempt_at = NULLIF(next_attempt_at, ?4) WHERE seq = ?1";

/// What a settle writes: the columns ?2 to ?8 (`Columns::of` the settled
/// envelope) and `$more`, on the row `$row`, if it still holds the lease
/// (?10 queue, ?11 claim counter) and, when the task was asked to stop, the
/// new state knows it (?12: 1 when the settled envelope has
/// `cancel_requested`, else NULL; kept in the column while IN_FLIGHT).
macro_rules! settle_if_leased {
    ($more:literal, $row:literal) => {
        concat!(
            "UPDATE tasks SET status = ?2, priority = ?3, next_attempt_at = ?4, \
             lease_expires_at = ?5, lease_attempt = ?6, error_type = ?7, finished_at = ?8, \
             cancel_requested = CASE WHEN ?2 = 1 THEN ?12 END",
            $more,
            " WHERE ",
            $row,
            " AND queue = ?10 AND status = 1 AND lease_attempt = ?11 \
             AND (cancel_requested IS NULL OR ?12 IS NOT NULL)"
        )
    };
}

/// A settle of the task ?1, found through the id index, with its whole
/// envelope ?9.
const UPDATE_IF_LEASED: &str = settle_if_leased!(", envelope = ?9, claimed_at = NULL", "id = ?1");

/// [`UPDATE_IF_LEASED`] on the row ?13, which must still be the task's: a
/// seek by rowid instead of one through the id index.
const UPDATE_IF_LEASED_AT: &str = settle_if_leased!(
    ", envelope = ?9, claimed_at = NULL",
    "seq = ?13 AND id = ?1"
);

/// A successful settle of the task ?1: its columns only. The row keeps the
/// claimed state's bytes and `claimed_at`, from which a read replays the
/// success (`columns::stored`); ?9 is not used.
const SUCCEED_IF_LEASED: &str = settle_if_leased!("", "id = ?1");

/// [`SUCCEED_IF_LEASED`] on the row ?13.
const SUCCEED_IF_LEASED_AT: &str = settle_if_leased!("", "seq = ?13 AND id = ?1");

/// The `flow_key` column of a new task: its flow key, or for a task without
/// one `''` in a flow-controlled queue and NULL elsewhere (`schema::FLOW`).
/// Asked once per queue (`Ctx::flow_queues`).
pub(super) fn flow_key_column<'e>(
    ctx: &mut Ctx,
    env: &'e Envelope,
) -> Result<Option<&'e str>, Fatal> {
    let key = flow::key_of(env);
    if !key.is_empty() {
        return Ok(Some(key));
    }
    let controlled = match ctx.flow_queues.get(&env.queue) {
        Some(&controlled) => controlled,
        None => {
            let controlled = super::flow::is_flow_queue(ctx, &env.queue)?;
            ctx.flow_queues.insert(env.queue.clone(), controlled);
            controlled
        }
    };
    Ok(controlled.then_some(""))
}

pub(super) fn submit_one(
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
    if let Some(unique) = &task.unique {
        match super::unique::decide(ctx, env, unique)? {
            Ok(Decision::Take) => {}
            Ok(Decision::Replace(next) | Decision::Existing(next)) => {
                return Ok(Ok(Submitted::Existing(*next)));
            }
            Ok(Decision::Conflict(e)) | Err(e) => return Ok(Err(e)),
        }
    }
    let flow_key = flow_key_column(ctx, env)?;
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
        flow_key,
    ]);
    match inserted {
        Ok(_) => {
            ctx.deltas.add(&env.queue, env.status, 1);
            if let Some(unique) = &task.unique {
                super::unique::take(ctx, &env.queue, &unique.slot, env.id)?;
            }
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
pub(super) fn settle_one(
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
        env.cancel_requested.as_ref().map(|_| 1_i64),
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

/// Takes due PENDING tasks in claim order: priority level by level
/// (highest first), each level in due order then id. Every step is a seek on
/// the `tasks_claim` partial index, so tasks due later (or at other levels)
/// are never scanned. Under flow limits (`flow`), the flow ledger chooses
/// among the due tasks instead (`flow::claim`).
pub(super) fn claim(
    ctx: &mut Ctx,
    queue: &str,
    max: usize,
    max_in_flight: Option<u64>,
    flow: Option<&FlowPolicy>,
    lease_ms: u64,
    now: Timestamp,
) -> Result<Result<Vec<ClaimedRow>, EngineError>, Fatal> {
    let mut max = max.min(MAX_CLAIM);
    // The writer is the only one changing tasks, so the stored count plus
    // this group's changes is exact: no other claim can interleave. Read
    // only when a limit needs it.
    let in_flight = match (max_in_flight, flow) {
        (None, None) => 0,
        _ => super::flow::in_flight_now(ctx, queue)?,
    };
    if let Some(limit) = max_in_flight {
        let room = limit.saturating_sub(in_flight);
        max = max.min(usize::try_from(room).unwrap_or(usize::MAX));
        if max == 0 {
            return Ok(Ok(Vec::new()));
        }
    }
    if let Some(policy) = flow {
        return super::flow::claim(ctx, queue, policy, max, in_flight, lease_ms, now);
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
    Ok(Ok(claim_rows(ctx, queue, rows, lease_ms, now)?))
}

/// Claims the PENDING rows `rows` (`seq`, id, envelope bytes) of `queue`.
pub(super) fn claim_rows(
    ctx: &mut Ctx,
    queue: &str,
    rows: Vec<(i64, Option<TaskId>, Vec<u8>)>,
    lease_ms: u64,
    now: Timestamp,
) -> Result<Vec<ClaimedRow>, Fatal> {
    let now_ms = now.unix_ms();
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
    Ok(claimed)
}
