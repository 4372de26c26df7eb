//! The write side: grouped submits and settles, claims, and the admin writes.
//!
//! Refusals (`LEASE_LOST`, `TASK_NOT_FOUND`, a duplicate id) are decided by
//! the statements themselves (`ON CONFLICT DO NOTHING`, a compare-and-swap in
//! the `WHERE` clause) and change nothing, so one request's refusal never
//! fails its neighbours in a group. A failure of the database fails the
//! group, which the store then retries (see `retrying!`): submits and
//! settles recognise, by comparing the stored envelope bytes, that an
//! attempt whose answer was lost with the connection had in fact committed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rdq_engine::glob::Glob;
use rdq_engine::unique::{self, Decision};
use rdq_engine::{
    CancelRequest, ClaimRequest, EngineError, LeasedUpdate, NewTask, QueueConfig, RedriveRequest,
    Submitted, machine,
};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use tokio::sync::oneshot;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::columns::{Rows, stored_envelope, task_id_of, uuid_of};
use crate::error::{Failure, undecodable};
use crate::pool::Conn;
use crate::sql::{Q, status_code};
use crate::{Retry, Shared, retrying};

/// Dead tasks read per statement while redriving by filter.
const REDRIVE_PAGE: i64 = 500;

/// Most tasks one claim takes, whatever `max` asks for.
pub(crate) const MAX_CLAIM: usize = 10_000;

/// A submit waiting for its group.
pub(crate) struct SubmitRequest {
    pub(crate) tasks: Vec<NewTask>,
    pub(crate) reply: oneshot::Sender<Vec<Result<Submitted, EngineError>>>,
}

impl SubmitRequest {
    /// Its share of a group: one per task.
    pub(crate) fn weight(&self) -> usize {
        self.tasks.len().max(1)
    }
}

/// A settle waiting for its group.
pub(crate) struct SettleRequest {
    pub(crate) updates: Vec<LeasedUpdate>,
    pub(crate) reply: oneshot::Sender<Vec<Result<(), EngineError>>>,
}

impl SettleRequest {
    /// Its share of a group: one per update.
    pub(crate) fn weight(&self) -> usize {
        self.updates.len().max(1)
    }
}

/// Writes one group of submits and answers each request.
pub(crate) async fn run_submits(shared: Arc<Shared>, batch: Vec<SubmitRequest>) {
    let tasks: Vec<&NewTask> = batch.iter().flat_map(|r| &r.tasks).collect();
    let mut results = Vec::with_capacity(tasks.len());
    for chunk in tasks.chunks(shared.max_group) {
        results.extend(submit_group(&shared, chunk).await);
    }
    let mut results = results.into_iter();
    for request in batch {
        let mine: Vec<_> = results.by_ref().take(request.tasks.len()).collect();
        // A caller that stopped waiting is no error: its write stands.
        let _ = request.reply.send(mine);
    }
}

/// Writes a group of submits; one result per task. Tasks without a unique
/// key are inserted in one statement ([`insert_tasks`]); those with one
/// follow, together in one transaction ([`submit_unique`]).
async fn submit_group(shared: &Shared, tasks: &[&NewTask]) -> Vec<Result<Submitted, EngineError>> {
    let (unique, plain): (Vec<usize>, Vec<usize>) =
        (0..tasks.len()).partition(|&i| tasks[i].unique.is_some());
    let mut results: Vec<Option<Result<Submitted, EngineError>>> = vec![None; tasks.len()];
    for (indices, keyed) in [(plain, false), (unique, true)] {
        if indices.is_empty() {
            continue;
        }
        let group: Vec<&NewTask> = indices.iter().map(|&i| tasks[i]).collect();
        let encoded: Vec<Vec<u8>> = group.iter().map(|t| t.envelope.encode()).collect();
        let outcome = retrying!(shared, Retry::Always, |conn, maybe_applied| {
            if keyed {
                submit_unique(shared, conn, &group, &encoded, maybe_applied).await
            } else {
                insert_tasks(shared, conn, &group, &encoded, maybe_applied).await
            }
        });
        let answers = outcome.unwrap_or_else(|e| vec![Err(e); group.len()]);
        for (&i, answer) in indices.iter().zip(answers) {
            results[i] = Some(answer);
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(EngineError::Unavailable("no answer".into()))))
        .collect()
}

/// Who holds a unique slot while a group is decided: a stored task (read
/// with its row locked), or a task of this group about to be inserted.
enum Holder {
    Stored(Box<Envelope>),
    Group(usize),
}

/// How often a group's unique submits are decided again after a submit of
/// the same key elsewhere took a slot they found free.
const UNIQUE_ROUNDS: usize = 32;

/// Submits a group of tasks with unique keys (`docs/uniqueness.md`); one
/// result per task. A task's slot is its row's `unique_slot`, under a
/// partial unique index. First, the first task of each slot is inserted
/// with its slot, as plain submits are ([`Q::SubmitUnique`]): the index
/// leaves out each whose slot a row names. The rest are decided in one
/// transaction, in a handful of statements whatever their number: the rows
/// naming their slots are read and locked, `unique::decide` settles each
/// task in group order (a later task of the group sees an earlier one as
/// its holder), then the slots moved off old holders, the replaced holders
/// and the new tasks are written. A new task that still meets a named slot
/// (a submit elsewhere took it meanwhile) rolls the transaction back, to
/// decide again.
async fn submit_unique(
    shared: &Shared,
    conn: &mut Conn,
    tasks: &[&NewTask],
    encoded: &[Vec<u8>],
    maybe_applied: bool,
) -> Result<Vec<Result<Submitted, EngineError>>, Failure> {
    let mut results: Vec<Option<Result<Submitted, EngineError>>> = vec![None; tasks.len()];
    let slot_of = |i: usize| {
        let t = tasks[i];
        (
            t.envelope.queue.as_str(),
            t.unique.as_ref().map_or("", |u| u.slot.as_str()),
        )
    };
    if maybe_applied {
        // The earlier attempt committed or did not: a task stored byte for
        // byte says it did.
        let ids: Vec<Uuid> = tasks.iter().map(|t| uuid_of(t.envelope.id)).collect();
        let stmt = conn.stmt(&shared.sql, Q::GetMany).await?;
        let rows = conn.client.query(&stmt, &[&ids]).await?;
        for row in &rows {
            let id: Uuid = row.try_get(0)?;
            let bytes: &[u8] = row.try_get(1)?;
            if let Some(i) = ids.iter().position(|x| *x == id)
                && encoded[i] == bytes
            {
                results[i] = Some(Ok(Submitted::Created(tasks[i].envelope.clone())));
            }
        }
    } else {
        // The common case in one statement: the first task of each slot,
        // without an idempotency key, inserted unless a row names its slot.
        let mut seen = HashSet::new();
        let fast: Vec<usize> = (0..tasks.len())
            .filter(|&i| seen.insert(slot_of(i)) && tasks[i].idempotency_key.is_none())
            .collect();
        let group: Vec<&NewTask> = fast.iter().map(|&i| tasks[i]).collect();
        let bytes: Vec<&[u8]> = fast.iter().map(|&i| encoded[i].as_slice()).collect();
        let slots: Vec<&str> = fast.iter().map(|&i| slot_of(i).1).collect();
        let rows =
            run_insert(shared, conn, Q::SubmitUnique, &group, &bytes, Some(&slots)).await??;
        let inserted: HashSet<Uuid> = rows
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?;
        for &i in &fast {
            if inserted.contains(&uuid_of(tasks[i].envelope.id)) {
                results[i] = Some(Ok(Submitted::Created(tasks[i].envelope.clone())));
            }
        }
    }
    let todo: Vec<usize> = (0..tasks.len()).filter(|&i| results[i].is_none()).collect();
    if todo.is_empty() {
        return Ok(results.into_iter().flatten().collect());
    }
    for _ in 0..UNIQUE_ROUNDS {
        if let Some(decided) = decide_unique(shared, conn, tasks, &todo, &slot_of).await? {
            for (i, answer) in todo.iter().zip(decided) {
                results[*i] = Some(answer);
            }
            return Ok(results
                .into_iter()
                .map(|r| r.unwrap_or_else(|| Err(EngineError::Unavailable("no answer".into()))))
                .collect());
        }
    }
    Err(Failure::RolledBack(
        "the unique keys of a group kept changing hands".into(),
    ))
}

/// One transaction deciding the unique submits `todo` of `tasks` (see
/// [`submit_unique`]): their answers, or `None` when a new task met a slot
/// named meanwhile and the transaction was rolled back.
async fn decide_unique<'a>(
    shared: &Shared,
    conn: &mut Conn,
    tasks: &[&'a NewTask],
    todo: &[usize],
    slot_of: &(dyn Fn(usize) -> (&'a str, &'a str) + Sync),
) -> Result<Option<Vec<Result<Submitted, EngineError>>>, Failure> {
    conn.client.batch_execute("BEGIN").await?;
    let mut wanted: Vec<(&str, &str)> = todo.iter().map(|&i| slot_of(i)).collect();
    wanted.sort_unstable();
    wanted.dedup();
    let (queues, slots): (Vec<&str>, Vec<&str>) = wanted.iter().copied().unzip();
    let stmt = conn.stmt(&shared.sql, Q::SlotHolders).await?;
    let mut holders: HashMap<(&str, &str), Holder> = HashMap::new();
    for row in conn.client.query(&stmt, &[&queues, &slots]).await? {
        let (queue, slot): (String, String) = (row.try_get(0)?, row.try_get(1)?);
        if let Ok(at) = wanted.binary_search(&(queue.as_str(), slot.as_str())) {
            holders.insert(
                wanted[at],
                Holder::Stored(Box::new(stored_envelope(&row, 3)?)),
            );
        }
    }
    // Decide in group order; what a decision writes is gathered.
    let mut answers: Vec<Option<Result<Submitted, EngineError>>> = vec![None; todo.len()];
    let mut inserts: Vec<NewTask> = Vec::new();
    let mut inserted_at: Vec<usize> = Vec::new();
    let mut replaced: Vec<Envelope> = Vec::new();
    let mut freed: Vec<Uuid> = Vec::new();
    for (n, &i) in todo.iter().enumerate() {
        let task = tasks[i];
        let Some(unique) = &task.unique else {
            answers[n] = Some(Err(EngineError::InvalidArgument(
                "a unique submit without its slot".into(),
            )));
            continue;
        };
        let key = slot_of(i);
        let decision = match holders.get(&key) {
            None => Decision::Take,
            Some(Holder::Stored(env)) => unique::decide(env, &task.envelope, unique),
            Some(Holder::Group(at)) => {
                unique::decide(&inserts[*at].envelope, &task.envelope, unique)
            }
        };
        match decision {
            Decision::Take => {
                if let Some(Holder::Stored(env)) = holders.get(&key)
                    && env.id != task.envelope.id
                {
                    freed.push(uuid_of(env.id));
                }
                holders.insert(key, Holder::Group(inserts.len()));
                inserts.push((*task).clone());
                inserted_at.push(n);
            }
            Decision::Replace(next) => {
                match holders.get_mut(&key) {
                    Some(Holder::Group(at)) => inserts[*at].envelope = (*next).clone(),
                    Some(Holder::Stored(env)) => {
                        **env = (*next).clone();
                        replaced.retain(|r| r.id != next.id);
                        replaced.push((*next).clone());
                    }
                    None => {}
                }
                answers[n] = Some(Ok(Submitted::Existing(*next)));
            }
            Decision::Conflict(e) => answers[n] = Some(Err(e)),
            Decision::Existing(holder) => answers[n] = Some(Ok(Submitted::Existing(*holder))),
        }
    }
    if !freed.is_empty() {
        let stmt = conn.stmt(&shared.sql, Q::SlotFree).await?;
        conn.client.execute(&stmt, &[&freed]).await?;
    }
    if !replaced.is_empty() {
        let stmt = conn.stmt(&shared.sql, Q::ReplaceHolder).await?;
        for next in &replaced {
            // PENDING: a task without a due time sorts first.
            let due = next.next_attempt_at.map_or(i64::MIN, |t| t.unix_ms());
            conn.client
                .execute(
                    &stmt,
                    &[
                        &uuid_of(next.id),
                        &next.encode(),
                        &due,
                        &rdq_engine::flow::key_of(next),
                    ],
                )
                .await?;
        }
    }
    if !inserts.is_empty() {
        let refs: Vec<&NewTask> = inserts.iter().collect();
        let bytes: Vec<Vec<u8>> = inserts.iter().map(|t| t.envelope.encode()).collect();
        let slots: Vec<&str> = inserts
            .iter()
            .map(|t| t.unique.as_ref().map_or("", |u| u.slot.as_str()))
            .collect();
        let rows = run_insert(shared, conn, Q::SubmitUnique, &refs, &bytes, Some(&slots)).await??;
        let stored: HashSet<Uuid> = rows
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?;
        for (t, &n) in inserts.iter().zip(&inserted_at) {
            let i = todo[n];
            if stored.contains(&uuid_of(t.envelope.id)) {
                // A task the group replaced before it was stored answers as
                // created: its submit made it.
                answers[n] = Some(Ok(Submitted::Created(tasks[i].envelope.clone())));
                continue;
            }
            // Not inserted: its id is taken, or a submit elsewhere took its
            // slot since it was read (decide again).
            let get = conn.stmt(&shared.sql, Q::Get).await?;
            if conn
                .client
                .query_opt(&get, &[&uuid_of(t.envelope.id)])
                .await?
                .is_none()
            {
                conn.client.batch_execute("ROLLBACK").await?;
                return Ok(None);
            }
            answers[n] = Some(Err(EngineError::InvalidArgument(format!(
                "a task with id {} already exists",
                t.envelope.id
            ))));
        }
    }
    conn.client.batch_execute("COMMIT").await?;
    Ok(Some(
        answers
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(EngineError::Unavailable("no answer".into()))))
            .collect(),
    ))
}

/// Inserts `tasks` (their canonical bytes `encoded`) in one statement on
/// `conn`, counting them and waking workers as every submit does; one
/// result per task. A task not inserted is explained ([`explain_conflict`]).
pub(crate) async fn insert_tasks(
    shared: &Shared,
    conn: &mut Conn,
    tasks: &[&NewTask],
    encoded: &[Vec<u8>],
    maybe_applied: bool,
) -> Result<Vec<Result<Submitted, EngineError>>, Failure> {
    let inserted = run_insert(shared, conn, Q::Submit, tasks, encoded, None).await??;
    let mut fresh: HashSet<Uuid> = HashSet::with_capacity(inserted.len());
    for row in &inserted {
        fresh.insert(row.try_get(0)?);
    }
    let mut results = Vec::with_capacity(tasks.len());
    for (i, task) in tasks.iter().enumerate() {
        // `remove`: of two tasks with one id in a group, only the
        // first was inserted.
        if fresh.remove(&uuid_of(task.envelope.id)) {
            results.push(Ok(Submitted::Created(task.envelope.clone())));
        } else {
            results.push(explain_conflict(shared, conn, task, &encoded[i], maybe_applied).await?);
        }
    }
    Ok(results)
}

/// Runs [`Q::Submit`], or [`Q::SubmitUnique`] with each task's unique slot
/// (`slots`), for `tasks` (their canonical bytes `encoded`): the rows of
/// the tasks inserted, or the statement's error as PostgreSQL gave it.
async fn run_insert(
    shared: &Shared,
    conn: &mut Conn,
    q: Q,
    tasks: &[&NewTask],
    encoded: &[impl AsRef<[u8]>],
    slots: Option<&[&str]>,
) -> Result<Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>, Failure> {
    let stmt = conn.stmt(&shared.sql, q).await?;
    let mut rows = Rows::with_capacity(tasks.len());
    let mut queues = Vec::with_capacity(tasks.len());
    let mut keys = Vec::with_capacity(tasks.len());
    let mut flow_keys = Vec::with_capacity(tasks.len());
    for (task, bytes) in tasks.iter().zip(encoded) {
        rows.push(&task.envelope, Some(bytes.as_ref()));
        queues.push(task.envelope.queue.as_str());
        keys.push(task.idempotency_key.as_deref().map(str::as_bytes));
        flow_keys.push(rdq_engine::flow::key_of(&task.envelope));
    }
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &rows.ids,
        &queues,
        &rows.status,
        &rows.priority,
        &rows.next_attempt_at,
        &rows.lease_expires_at,
        &rows.claim_count,
        &rows.error_type,
        &rows.finished_at,
        &rows.envelope,
        &keys,
        &shared.channel,
        &shared.origin,
        &flow_keys,
    ];
    if let Some(slots) = &slots {
        params.push(slots);
    }
    Ok(conn.client.query(&stmt, &params).await)
}

/// Why a task was not inserted: its idempotency key is taken (the original
/// comes back), or its id is (refused). After an attempt whose outcome was
/// lost, finding this very envelope means that attempt stored it.
pub(crate) async fn explain_conflict(
    shared: &Shared,
    conn: &mut Conn,
    task: &NewTask,
    encoded: &[u8],
    maybe_applied: bool,
) -> Result<Result<Submitted, EngineError>, Failure> {
    let env = &task.envelope;
    if let Some(key) = &task.idempotency_key {
        let stmt = conn.stmt(&shared.sql, Q::ByKey).await?;
        if let Some(row) = conn
            .client
            .query_opt(&stmt, &[&env.queue, &key.as_bytes()])
            .await?
        {
            let stored: &[u8] = row.try_get(0)?;
            if maybe_applied && stored == encoded {
                return Ok(Ok(Submitted::Created(env.clone())));
            }
            return Ok(Ok(Submitted::Existing(stored_envelope(&row, 0)?)));
        }
    }
    let stmt = conn.stmt(&shared.sql, Q::Get).await?;
    match conn.client.query_opt(&stmt, &[&uuid_of(env.id)]).await? {
        Some(row) if maybe_applied && row.try_get::<_, &[u8]>(0)? == encoded => {
            Ok(Ok(Submitted::Created(env.clone())))
        }
        Some(_) => Ok(Err(EngineError::InvalidArgument(format!(
            "a task with id {} already exists",
            env.id
        )))),
        // The conflicting row went away meanwhile (deleted or pruned).
        None => Ok(Err(EngineError::Unavailable(format!(
            "task {} conflicted with a row deleted meanwhile; submit it again",
            env.id
        )))),
    }
}

/// Writes one group of settles and answers each request.
pub(crate) async fn run_settles(shared: Arc<Shared>, batch: Vec<SettleRequest>) {
    let updates: Vec<&LeasedUpdate> = batch.iter().flat_map(|r| &r.updates).collect();
    let mut results = Vec::with_capacity(updates.len());
    for chunk in updates.chunks(shared.max_group) {
        results.extend(settle_group(&shared, chunk).await);
    }
    let mut results = results.into_iter();
    for request in batch {
        let mine: Vec<_> = results.by_ref().take(request.updates.len()).collect();
        let _ = request.reply.send(mine);
    }
}

/// Applies a group of compare-and-swap updates; one result per update.
///
/// Updates of one task apply in order: the group is split into rounds (the
/// first update of each task, then the second, …), one statement per round,
/// each round's rows sorted by id so that concurrent groups lock rows in the
/// same order and cannot deadlock.
async fn settle_group(shared: &Shared, updates: &[&LeasedUpdate]) -> Vec<Result<(), EngineError>> {
    // A success is written as columns only (`Rows::push`).
    let encoded: Vec<Option<Vec<u8>>> = updates
        .iter()
        .map(|u| (u.envelope.status != Status::Succeeded).then(|| u.envelope.encode()))
        .collect();
    let mut round_of = Vec::with_capacity(updates.len());
    let mut seen: HashMap<TaskId, usize> = HashMap::with_capacity(updates.len());
    let mut last_of: HashMap<TaskId, usize> = HashMap::with_capacity(updates.len());
    for (i, u) in updates.iter().enumerate() {
        let n = seen.entry(u.envelope.id).or_insert(0);
        round_of.push(*n);
        *n += 1;
        last_of.insert(u.envelope.id, i);
    }
    let rounds = round_of.iter().copied().max().map_or(0, |r| r + 1);
    let outcome = retrying!(shared, Retry::Always, |conn, maybe_applied| {
        let stmt = conn.stmt(&shared.sql, Q::Settle).await?;
        let mut results: Vec<Option<Result<(), EngineError>>> = vec![None; updates.len()];
        let mut refused: Vec<usize> = Vec::new();
        for round in 0..rounds {
            let mut members: Vec<usize> = (0..updates.len())
                .filter(|&i| round_of[i] == round)
                .collect();
            members.sort_by_key(|&i| updates[i].envelope.id);
            let mut rows = Rows::with_capacity(members.len());
            let mut expected = Vec::with_capacity(members.len());
            let mut cancel = Vec::with_capacity(members.len());
            for &i in &members {
                rows.push(&updates[i].envelope, encoded[i].as_deref());
                expected.push(i64::from(updates[i].expected.0));
                cancel.push(updates[i].envelope.cancel_requested.is_some());
            }
            let [p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12] =
                rows.rewrite_params(&expected, &shared.channel, &shared.origin);
            let params: [&(dyn ToSql + Sync); 13] =
                [p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12, &cancel];
            let applied = conn.client.query(&stmt, &params).await?;
            let mut done: HashSet<Uuid> = HashSet::with_capacity(applied.len());
            for row in &applied {
                done.insert(row.try_get(0)?);
            }
            for (k, &i) in members.iter().enumerate() {
                if done.contains(&rows.ids[k]) {
                    results[i] = Some(Ok(()));
                } else {
                    refused.push(i);
                }
            }
        }
        if !refused.is_empty() {
            let ids: Vec<Uuid> = refused
                .iter()
                .map(|&i| uuid_of(updates[i].envelope.id))
                .collect();
            let current = current_envelopes(shared, conn, &ids).await?;
            for i in refused {
                let id = updates[i].envelope.id;
                results[i] = Some(match current.get(&id) {
                    None => Err(EngineError::TaskNotFound(id)),
                    // A lost answer: the task holds what this group
                    // wrote last for it, so the group had committed.
                    Some(stored)
                        if maybe_applied
                            && last_of
                                .get(&id)
                                .is_some_and(|&l| *stored == updates[l].envelope.encode()) =>
                    {
                        Ok(())
                    }
                    Some(_) => Err(EngineError::LeaseLost(id)),
                });
            }
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(EngineError::Unavailable("no answer".into()))))
            .collect::<Vec<_>>())
    });
    outcome.unwrap_or_else(|e| vec![Err(e); updates.len()])
}

/// The canonical bytes of these tasks' current envelopes, by id (absent
/// ones left out): as stored, or recomputed where the row keeps a claimed
/// state with the columns of a claim or a success ([`stored_envelope`]).
async fn current_envelopes(
    shared: &Shared,
    conn: &mut Conn,
    ids: &[Uuid],
) -> Result<HashMap<TaskId, Vec<u8>>, Failure> {
    let stmt = conn.stmt(&shared.sql, Q::GetMany).await?;
    let mut out = HashMap::with_capacity(ids.len());
    for row in conn.client.query(&stmt, &[&ids]).await? {
        out.insert(
            task_id_of(row.try_get(0)?),
            stored_envelope(&row, 1)?.encode(),
        );
    }
    Ok(out)
}

/// Rewrites rows this transaction holds locked with their new states, from
/// `old` status; returns how many were written.
async fn rewrite(
    shared: &Shared,
    conn: &mut Conn,
    old: Status,
    next: &[Envelope],
) -> Result<usize, Failure> {
    if next.is_empty() {
        return Ok(0);
    }
    let stmt = conn.stmt(&shared.sql, Q::Rewrite).await?;
    let encoded: Vec<Vec<u8>> = next.iter().map(Envelope::encode).collect();
    let mut rows = Rows::with_capacity(next.len());
    for (env, bytes) in next.iter().zip(&encoded) {
        rows.push(env, Some(bytes));
    }
    let olds = vec![status_code(old); next.len()];
    let written = conn
        .client
        .query(
            &stmt,
            &rows.rewrite_params(&olds, &shared.channel, &shared.origin),
        )
        .await?;
    Ok(written.len())
}

/// Claims up to `max` due tasks of `queue` in one statement and one round
/// trip: it locks the next due tasks in claim order, skipping any another
/// claimer holds (`FOR UPDATE SKIP LOCKED`, so claimers never wait for each
/// other), and marks them IN_FLIGHT under the lease. The engine's
/// `machine::claim` then decides each envelope here, as it will again
/// whenever the row is read (see `columns::stored_envelope`).
///
/// With a global concurrency limit the claim is one transaction that first
/// takes the queue's advisory lock, so limited claims of one queue run one
/// at a time on every node: it counts the queue's IN_FLIGHT tasks (all
/// committed, since the lock was taken before the count's snapshot) and
/// claims at most the room left. Settles and reaps only lower the count
/// and take no lock; an unlimited queue pays nothing.
pub(crate) async fn claim(
    shared: &Shared,
    request: &ClaimRequest,
) -> Result<Vec<Envelope>, EngineError> {
    let queue = request.queue.as_str();
    let max = i64::try_from(request.max.min(MAX_CLAIM)).unwrap_or(1);
    let now_ms = request.now.unix_ms();
    let until = request.now.plus_ms(request.lease_ms).unix_ms();
    let limited = request.max_in_flight.is_some();
    if let Some(flow) = &request.flow {
        return crate::flow::claim(shared, request, flow).await;
    }
    retrying!(shared, Retry::Always, |conn, _applied| {
        let mut limit = max;
        if let Some(max_in_flight) = request.max_in_flight {
            conn.client.batch_execute("BEGIN").await?;
            let lock = conn.stmt(&shared.sql, Q::LockQueue).await?;
            conn.client.execute(&lock, &[&queue]).await?;
            let count = conn.stmt(&shared.sql, Q::InFlight).await?;
            let in_flight: i64 = conn.client.query_one(&count, &[&queue]).await?.try_get(0)?;
            let room = i64::try_from(max_in_flight)
                .unwrap_or(i64::MAX)
                .saturating_sub(in_flight);
            limit = limit.min(room.max(0));
            if limit == 0 {
                conn.client.batch_execute("COMMIT").await?;
                return Ok(Vec::new());
            }
        }
        let stmt = conn.stmt(&shared.sql, Q::Claim).await?;
        let rows = conn
            .client
            .query(&stmt, &[&queue, &now_ms, &limit, &until])
            .await?;
        if limited {
            conn.client.batch_execute("COMMIT").await?;
        }
        let mut claimed = Vec::with_capacity(rows.len());
        for row in &rows {
            let env = Envelope::decode(row.try_get::<_, &[u8]>(0)?)
                .map_err(|e| undecodable(&format!("a task of queue {queue}"), &e))?;
            claimed.push(machine::replay_claim(env, now_ms, until)?);
        }
        // RETURNING keeps no order: restore the claim order.
        claimed.sort_by_key(claim_order);
        Ok(claimed)
    })
}

/// Where a claimed task stands in claim order: priority first, then due
/// time, then id.
pub(crate) fn claim_order(env: &Envelope) -> (std::cmp::Reverse<u8>, i64, TaskId) {
    (
        std::cmp::Reverse(env.priority),
        env.next_attempt_at.map_or(i64::MIN, Timestamp::unix_ms),
        env.id,
    )
}

/// Redrives matching DEAD tasks in one transaction (or lists them, on a dry run).
pub(crate) async fn redrive(
    shared: &Shared,
    request: &RedriveRequest,
    now: Timestamp,
) -> Result<Vec<TaskId>, EngineError> {
    let glob = request
        .error_type
        .as_deref()
        .map(Glob::new)
        .transpose()
        .map_err(EngineError::InvalidArgument)?;
    let limit = request.limit.unwrap_or(usize::MAX);
    let lock = !request.dry_run;
    let redriven = retrying!(shared, Retry::RolledBackOnly, |conn, _applied| {
        if lock {
            conn.client.batch_execute("BEGIN").await?;
        }
        let chosen = choose_dead(shared, conn, request, glob.as_ref(), limit, lock).await?;
        // The slots to move to redriven tasks, off tasks that no longer
        // hold them.
        let mut freed = Vec::new();
        for env in &chosen {
            match may_return(shared, conn, env, now, lock).await? {
                Ok(holder) => freed.extend(holder),
                Err(e) => {
                    if lock {
                        conn.client.batch_execute("ROLLBACK").await?;
                    }
                    return Ok(Err(e));
                }
            }
        }
        if !lock {
            return Ok(Ok(chosen.into_iter().map(|env| env.id).collect()));
        }
        let mut next = Vec::with_capacity(chosen.len());
        for env in &chosen {
            match machine::redrive(env, now) {
                Ok(redriven) => next.push(redriven),
                Err(e) => {
                    tracing::warn!(task = %env.id, error = %e, "a task indexed as dead could not be redriven");
                }
            }
        }
        rewrite(shared, conn, Status::Dead, &next).await?;
        // A redriven task holds its unique key again.
        if !freed.is_empty() {
            let stmt = conn.stmt(&shared.sql, Q::SlotFree).await?;
            conn.client.execute(&stmt, &[&freed]).await?;
        }
        let take = conn.stmt(&shared.sql, Q::SlotTake).await?;
        for env in &next {
            if let Some(slot) = unique::slot_of_task(env) {
                match conn.client.execute(&take, &[&uuid_of(env.id), &slot]).await {
                    Ok(_) => {}
                    // A submit took the free slot since it was read: the
                    // redrive starts again, and finds it held.
                    Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                        return Err(Failure::RolledBack(format!(
                            "the unique key of task {} was taken meanwhile",
                            env.id
                        )));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        conn.client.batch_execute("COMMIT").await?;
        Ok(Ok(next.iter().map(|env| env.id).collect::<Vec<_>>()))
    })??;
    if !request.dry_run && !redriven.is_empty() {
        shared.work.notify_waiters();
    }
    Ok(redriven)
}

/// Refuses (`UNIQUE_HELD`) to redrive `env` while another task holds its
/// unique slot; else answers the other task that names the slot, if any,
/// whose slot the redrive moves to `env`. In a real redrive (`lock`) that
/// task's row stays locked until the transaction ends.
async fn may_return(
    shared: &Shared,
    conn: &mut Conn,
    env: &Envelope,
    now: Timestamp,
    lock: bool,
) -> Result<Result<Option<Uuid>, EngineError>, Failure> {
    let Some(slot) = unique::slot_of_task(env) else {
        return Ok(Ok(None));
    };
    let q = if lock {
        Q::SlotHolderForUpdate
    } else {
        Q::SlotHolder
    };
    let stmt = conn.stmt(&shared.sql, q).await?;
    let Some(row) = conn.client.query_opt(&stmt, &[&env.queue, &slot]).await? else {
        return Ok(Ok(None));
    };
    let named: Uuid = row.try_get(0)?;
    if named == uuid_of(env.id) {
        return Ok(Ok(None));
    }
    Ok(unique::may_return(env.id, &stored_envelope(&row, 1)?, now).map(|()| Some(named)))
}

/// The dead tasks a redrive takes, in order, locked when `lock`.
/// Cancels the request's PENDING tasks in one transaction: they are locked
/// first, so a concurrent claim (which skips locked rows) cannot take one,
/// and one claimed first is no longer PENDING here.
pub(crate) async fn cancel_pending(
    shared: &Shared,
    request: &CancelRequest,
    now: Timestamp,
) -> Result<Vec<TaskId>, EngineError> {
    let lock = !request.dry_run;
    let wanted: Vec<Uuid> = request.ids.iter().map(|&id| uuid_of(id)).collect();
    retrying!(shared, Retry::RolledBackOnly, |conn, _applied| {
        if lock {
            conn.client.batch_execute("BEGIN").await?;
        }
        let stmt = conn.stmt(&shared.sql, Q::PendingByIds { lock }).await?;
        let rows = conn.client.query(&stmt, &[&wanted, &request.queue]).await?;
        let mut found: HashMap<Uuid, &tokio_postgres::Row> = HashMap::with_capacity(rows.len());
        for row in &rows {
            found.insert(row.try_get(0)?, row);
        }
        let mut next = Vec::with_capacity(found.len());
        let mut seen = HashSet::with_capacity(wanted.len());
        for &id in &wanted {
            let Some(row) = found.get(&id).filter(|_| seen.insert(id)) else {
                continue;
            };
            let env = Envelope::decode(row.try_get(1)?).map_err(|e| {
                Failure::Engine(undecodable(&format!("task {}", task_id_of(id)), &e))
            })?;
            next.push(
                machine::cancel(&env, &request.by, &request.message, now)
                    .map_err(Failure::Engine)?,
            );
        }
        if lock {
            rewrite(shared, conn, Status::Pending, &next).await?;
            conn.client.batch_execute("COMMIT").await?;
        }
        Ok(next.iter().map(|env| env.id).collect::<Vec<_>>())
    })
}

async fn choose_dead(
    shared: &Shared,
    conn: &mut Conn,
    request: &RedriveRequest,
    glob: Option<&Glob>,
    limit: usize,
    lock: bool,
) -> Result<Vec<Envelope>, Failure> {
    let matches = |error_type: Option<&[u8]>| {
        glob.is_none_or(|g| {
            error_type
                .and_then(|t| std::str::from_utf8(t).ok())
                .is_some_and(|t| g.matches(t))
        })
    };
    let decode = |id: Uuid, bytes: &[u8]| {
        Envelope::decode(bytes)
            .map_err(|e| Failure::Engine(undecodable(&format!("task {}", task_id_of(id)), &e)))
    };
    let mut chosen = Vec::new();
    match &request.ids {
        Some(ids) => {
            let wanted: Vec<Uuid> = ids.iter().map(|&id| uuid_of(id)).collect();
            let stmt = conn.stmt(&shared.sql, Q::DeadByIds { lock }).await?;
            let rows = conn.client.query(&stmt, &[&wanted, &request.queue]).await?;
            let mut found: HashMap<Uuid, &tokio_postgres::Row> = HashMap::with_capacity(rows.len());
            for row in &rows {
                found.insert(row.try_get(0)?, row);
            }
            let mut seen = HashSet::with_capacity(wanted.len());
            for id in wanted {
                if chosen.len() >= limit {
                    break;
                }
                if !seen.insert(id) {
                    continue;
                }
                if let Some(row) = found.get(&id)
                    && matches(row.try_get(1)?)
                {
                    chosen.push(decode(id, row.try_get(2)?)?);
                }
            }
        }
        None => {
            let first = conn
                .stmt(
                    &shared.sql,
                    Q::DeadPage {
                        lock,
                        cursor: false,
                    },
                )
                .await?;
            let next = conn
                .stmt(&shared.sql, Q::DeadPage { lock, cursor: true })
                .await?;
            let mut cursor: Option<Uuid> = None;
            while chosen.len() < limit {
                let rows = match cursor {
                    None => {
                        conn.client
                            .query(&first, &[&request.queue, &REDRIVE_PAGE])
                            .await?
                    }
                    Some(after) => {
                        conn.client
                            .query(&next, &[&request.queue, &REDRIVE_PAGE, &after])
                            .await?
                    }
                };
                for row in &rows {
                    let id: Uuid = row.try_get(0)?;
                    cursor = Some(id);
                    if chosen.len() < limit && matches(row.try_get(1)?) {
                        chosen.push(decode(id, row.try_get(2)?)?);
                    }
                }
                if rows.len() < usize::try_from(REDRIVE_PAGE).unwrap_or(0) {
                    break;
                }
            }
        }
    }
    Ok(chosen)
}

/// Removes every task of `queue` in `status` (or counts them, on a dry run).
pub(crate) async fn purge(
    shared: &Shared,
    queue: &str,
    status: Status,
    dry_run: bool,
) -> Result<u64, EngineError> {
    let q = if dry_run {
        Q::CountStatus(status)
    } else {
        Q::Purge(status)
    };
    retrying!(shared, Retry::RolledBackOnly, |conn, _applied| {
        let stmt = conn.stmt(&shared.sql, q).await?;
        let n: i64 = conn.client.query_one(&stmt, &[&queue]).await?.try_get(0)?;
        Ok(u64::try_from(n).unwrap_or(0))
    })
}

/// Removes one task.
pub(crate) async fn delete(shared: &Shared, id: TaskId) -> Result<(), EngineError> {
    retrying!(shared, Retry::RolledBackOnly, |conn, _applied| {
        let stmt = conn.stmt(&shared.sql, Q::Delete).await?;
        match conn.client.query_opt(&stmt, &[&uuid_of(id)]).await? {
            Some(_) => Ok(()),
            None => Err(Failure::Engine(EngineError::TaskNotFound(id))),
        }
    })
}

/// Stores a queue's policy; every node drops its cached policies.
pub(crate) async fn put_config(
    shared: &Shared,
    queue: &str,
    policy: &QueueConfig,
) -> Result<(), EngineError> {
    let text = serde_json::to_string(policy)
        .map_err(|e| EngineError::InvalidPolicy(format!("the policy does not serialise: {e}")))?;
    let flow_controlled = policy.policy.flow.needs_ledger();
    retrying!(shared, Retry::Always, |conn, _applied| {
        let stmt = conn.stmt(&shared.sql, Q::PutConfig).await?;
        conn.client
            .query(
                &stmt,
                &[
                    &queue,
                    &text,
                    &shared.channel,
                    &shared.origin,
                    &flow_controlled,
                ],
            )
            .await?;
        Ok(())
    })?;
    shared.policies.invalidate();
    Ok(())
}

/// Removes up to `limit` SUCCEEDED tasks of `queue` finished before `before`.
/// Rows another pruner holds are skipped, so pruners on every node never wait
/// for each other.
pub(crate) async fn prune(
    shared: &Shared,
    queue: &str,
    before: Timestamp,
    limit: usize,
) -> Result<u64, EngineError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let before = before.unix_ms();
    retrying!(shared, Retry::Always, |conn, _applied| {
        let stmt = conn.stmt(&shared.sql, Q::Prune).await?;
        let n: i64 = conn
            .client
            .query_one(&stmt, &[&queue, &before, &limit])
            .await?
            .try_get(0)?;
        Ok(u64::try_from(n).unwrap_or(0))
    })
}

/// Most task ids in one cancel announcement: a `NOTIFY` payload holds at
/// most 8000 bytes, and each id takes 27.
const IDS_PER_NOTIFY: usize = 250;

/// Tells the other nodes listening on this schema that these running tasks
/// were asked to stop (`x ORIGIN ID…`, see `listener.rs`). Best effort: a
/// node that misses it learns of the request at its next lease extension.
pub(crate) async fn announce_cancel(shared: &Shared, ids: &[TaskId]) {
    for chunk in ids.chunks(IDS_PER_NOTIFY) {
        let mut payload = format!("x {}", shared.origin);
        for id in chunk {
            payload.push(' ');
            payload.push_str(&id.to_string());
        }
        let sent: Result<(), EngineError> = retrying!(shared, Retry::Always, |conn, _applied| {
            conn.client
                .execute("SELECT pg_notify($1, $2)", &[&shared.channel, &payload])
                .await?;
            Ok(())
        });
        if let Err(e) = sent {
            tracing::warn!(error = %e, "cannot announce cancel requests to other nodes");
        }
    }
}
