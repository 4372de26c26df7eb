//! Flow control in the writer: a claim under a queue's flow limits, and
//! throttles (`docs/flow-control.md`).
//!
//! Everything runs in the group's open transaction, on the one write
//! connection: the IN_FLIGHT counts and the `flows` row a claim reads
//! include every earlier write of the same group (SQLite shows a
//! transaction its own changes), and the ledger the claim writes back is
//! what the next claim of the group reads. A failed group rolls the ledger
//! back with the tasks. SQLite's write lock serialises the writers of
//! several processes on one directory, so the decision is atomic for all
//! of them.

use std::collections::HashMap;

use rdq_engine::flow::Candidate;
use rdq_engine::{EngineError, FlowLedger, FlowPolicy};
use rdq_envelope::{Status, TaskId, Timestamp};
use rusqlite::{OptionalExtension, params};

use super::job::ClaimedRow;
use super::transaction::Ctx;
use super::work::claim_rows;
use crate::columns::bytes;
use crate::error::{Fatal, task_id};
use crate::flow::{in_flight_per_key, stored_ledger};

/// `queue`'s ledger for a write that is about to store it. A queue without
/// a `flows` row is becoming flow-controlled: its unfinished tasks without a
/// flow key get `''` (see `schema::FLOW`), once, in this transaction. That
/// walks the queue's rows through `tasks_queue`; every later submit to the
/// queue stores `''` itself.
fn ledger_for_update(ctx: &mut Ctx, queue: &str) -> Result<Result<FlowLedger, EngineError>, Fatal> {
    match stored_ledger(&ctx.conn, queue)? {
        Some(ledger) => Ok(ledger),
        None => {
            let n = ctx
                .conn
                .prepare_cached(
                    "UPDATE tasks SET flow_key = '' \
                     WHERE queue = ?1 AND flow_key IS NULL AND status != 2",
                )?
                .execute(params![queue])?;
            tracing::debug!(queue, tasks = n, "a queue comes under flow control");
            ctx.flow_queues.insert(queue.to_owned(), true);
            Ok(Ok(FlowLedger::default()))
        }
    }
}

fn store_ledger(ctx: &mut Ctx, queue: &str, ledger: &FlowLedger) -> Result<(), Fatal> {
    let text = serde_json::to_string(ledger)
        .map_err(|e| Fatal(format!("the flow ledger does not serialise: {e}")))?;
    ctx.conn
        .prepare_cached(
            "INSERT INTO flows (queue, ledger) VALUES (?1, ?2) \
             ON CONFLICT (queue) DO UPDATE SET ledger = excluded.ledger",
        )?
        .execute(params![queue, text])?;
    Ok(())
}

/// Whether `queue` is flow-controlled (has a `flows` row): its tasks
/// without a flow key then store `''`.
pub(super) fn is_flow_queue(ctx: &Ctx, queue: &str) -> Result<bool, Fatal> {
    Ok(ctx
        .conn
        .prepare_cached("SELECT 1 FROM flows WHERE queue = ?1")?
        .query_row(params![queue], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Throttles `queue`'s `key` (the whole queue with `None`) until `until`.
pub(super) fn throttle(
    ctx: &mut Ctx,
    queue: &str,
    key: Option<&str>,
    until: Timestamp,
) -> Result<Result<(), EngineError>, Fatal> {
    let mut ledger = match ledger_for_update(ctx, queue)? {
        Ok(ledger) => ledger,
        Err(e) => return Ok(Err(e)),
    };
    ledger.throttle(key, until);
    store_ledger(ctx, queue, &ledger)?;
    Ok(Ok(()))
}

/// One due PENDING task a flow-controlled claim may take: what the ledger
/// decides on, and the row to claim.
struct Gathered {
    seq: i64,
    candidate: Candidate,
}

/// Claims up to `room` of `queue`'s due tasks under `policy`, with
/// `in_flight` of the queue's tasks IN_FLIGHT now: counts them per flow
/// key, gathers each key's first `room` due tasks in claim order, lets
/// [`FlowLedger::select`] choose, claims exactly those and stores the
/// ledger.
///
/// Cost: one seek per flow key with PENDING tasks, plus, per such key and
/// priority level, one range read of at most `room` entries of
/// `tasks_flow`; then one index entry per IN_FLIGHT task (`tasks_busy`).
/// Every read but the claimed rows' is of index entries only: no envelope
/// is read to decide. A queue with many thousands of keys holding PENDING
/// tasks pays that many seeks per claim.
pub(super) fn claim(
    ctx: &mut Ctx,
    queue: &str,
    policy: &FlowPolicy,
    room: usize,
    in_flight: u64,
    lease_ms: u64,
    now: Timestamp,
) -> Result<Result<Vec<ClaimedRow>, EngineError>, Fatal> {
    if room == 0 {
        return Ok(Ok(Vec::new()));
    }
    let mut ledger = match ledger_for_update(ctx, queue)? {
        Ok(ledger) => ledger,
        Err(e) => return Ok(Err(e)),
    };
    let per_key = in_flight_per_key(&ctx.conn, queue, in_flight)?;
    let gathered = match gather(ctx, queue, room, now)? {
        Ok(gathered) => gathered,
        Err(e) => return Ok(Err(e)),
    };
    let mut seqs: HashMap<TaskId, i64> = HashMap::with_capacity(gathered.len());
    let candidates = gathered
        .into_iter()
        .map(|g| {
            seqs.insert(g.candidate.id, g.seq);
            g.candidate
        })
        .collect();
    let chosen = ledger.select(policy, now, &per_key, candidates, room);
    store_ledger(ctx, queue, &ledger)?;
    let mut rows = Vec::with_capacity(chosen.len());
    {
        let mut stmt = ctx
            .conn
            .prepare_cached("SELECT envelope FROM tasks WHERE seq = ?1")?;
        for id in chosen {
            let Some(&seq) = seqs.get(&id) else { continue };
            let envelope = stmt.query_row([seq], |row| Ok(bytes(row, 0)?.to_vec()))?;
            rows.push((seq, Some(id), envelope));
        }
    }
    Ok(Ok(claim_rows(ctx, queue, rows, lease_ms, now)?))
}

/// For each flow key with due PENDING tasks of `queue`, its first `room`
/// in claim order (priority level by level, then due time, then id), from
/// `tasks_flow` alone.
fn gather(
    ctx: &mut Ctx,
    queue: &str,
    room: usize,
    now: Timestamp,
) -> Result<Result<Vec<Gathered>, EngineError>, Fatal> {
    let now_ms = now.unix_ms();
    let wanted = i64::try_from(room).unwrap_or(i64::MAX);
    let mut gathered = Vec::new();
    let mut key: Option<String> = None;
    loop {
        let next: Option<String> = match &key {
            None => ctx
                .conn
                .prepare_cached(
                    "SELECT flow_key FROM tasks WHERE queue = ?1 AND status = 0 \
                     AND flow_key >= '' ORDER BY flow_key LIMIT 1",
                )?
                .query_row(params![queue], |row| row.get(0))
                .optional()?,
            Some(after) => ctx
                .conn
                .prepare_cached(
                    "SELECT flow_key FROM tasks WHERE queue = ?1 AND status = 0 \
                     AND flow_key > ?2 ORDER BY flow_key LIMIT 1",
                )?
                .query_row(params![queue, after], |row| row.get(0))
                .optional()?,
        };
        let Some(next) = next else { break };
        let mut taken = 0usize;
        let mut below: i64 = 256;
        while taken < room {
            let level: Option<i64> = ctx
                .conn
                .prepare_cached(
                    "SELECT priority FROM tasks WHERE queue = ?1 AND status = 0 \
                     AND flow_key = ?2 AND priority < ?3 ORDER BY priority DESC LIMIT 1",
                )?
                .query_row(params![queue, next, below], |row| row.get(0))
                .optional()?;
            let Some(level) = level else { break };
            let mut stmt = ctx.conn.prepare_cached(
                // As the plain claim: a task whose counter is at its maximum
                // is never claimed (`work::claim`).
                "SELECT seq, id, next_attempt_at FROM tasks \
                 WHERE queue = ?1 AND status = 0 AND flow_key = ?2 AND priority = ?3 \
                 AND next_attempt_at <= ?4 AND lease_attempt < 4294967295 \
                 ORDER BY next_attempt_at, id LIMIT ?5",
            )?;
            let left = wanted.saturating_sub(i64::try_from(taken).unwrap_or(i64::MAX));
            let mut found = stmt.query(params![queue, next, level, now_ms, left])?;
            while let Some(row) = found.next()? {
                let id = match task_id(bytes(row, 1)?) {
                    Ok(id) => id,
                    Err(e) => return Ok(Err(e)),
                };
                let due: i64 = row.get(2)?;
                gathered.push(Gathered {
                    seq: row.get(0)?,
                    candidate: Candidate {
                        key: next.clone(),
                        priority: u8::try_from(level).unwrap_or(u8::MAX),
                        // A PENDING task with no due time stores i64::MIN.
                        due: if due == i64::MIN {
                            None
                        } else {
                            Timestamp::from_unix_ms(due)
                        },
                        id,
                    },
                });
                taken += 1;
            }
            below = level;
        }
        key = Some(next);
    }
    Ok(Ok(gathered))
}

/// The IN_FLIGHT count of `queue` the group sees: the stored count plus
/// this group's changes.
pub(super) fn in_flight_now(ctx: &Ctx, queue: &str) -> Result<u64, Fatal> {
    let stored = crate::flow::stored_in_flight(&ctx.conn, queue)?;
    Ok(u64::try_from(stored + ctx.deltas.of(queue, Status::InFlight)).unwrap_or(0))
}
