//! The work path: grouped submits and settles, and claims.
//!
//! Refusals (`LEASE_LOST`, `TASK_NOT_FOUND`, a taken id) are decided by the
//! scripts and change nothing, so one request's refusal never fails its
//! neighbours in a group. A failure of Redis fails the group, which the
//! store then retries: submits and settles recognise, by comparing the
//! stored envelope bytes, that an attempt whose answer was lost with the
//! connection had in fact been applied.

use std::collections::HashMap;

use futures::FutureExt;
use rdq_engine::unique::{self, Decision};
use rdq_engine::{ClaimRequest, EngineError, LeasedUpdate, NewTask, Submitted};
use rdq_envelope::{Envelope, TaskId};
use redis::Value;
use tokio::sync::oneshot;

use crate::Shared;
use crate::conn::{Retry, retrying};
use crate::error::{Failure, unexpected};
use crate::keys::QueueKeys;
use crate::stored::{self, Placement, envelope_bytes};

/// Most tasks one claim takes, whatever `max` asks for.
const MAX_CLAIM: usize = 10_000;

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
pub(crate) async fn run_submits(shared: &Shared, group: Vec<SubmitRequest>) {
    let mut replies = Vec::with_capacity(group.len());
    let mut tasks = Vec::new();
    for request in group {
        replies.push((request.tasks.len(), request.reply));
        tasks.extend(request.tasks);
    }
    let results = submit(shared, &tasks).await;
    let created = results
        .iter()
        .any(|r| matches!(r, Ok(Submitted::Created(_))));
    let mut results = results.into_iter();
    for (n, reply) in replies {
        // A caller that stopped waiting is no error: its write stands.
        let _ = reply.send(results.by_ref().take(n).collect());
    }
    if created {
        announce_work(shared).await;
    }
}

/// Writes one group of settles and answers each request.
pub(crate) async fn run_settles(shared: &Shared, group: Vec<SettleRequest>) {
    let mut replies = Vec::with_capacity(group.len());
    let mut updates = Vec::new();
    for request in group {
        replies.push((request.updates.len(), request.reply));
        updates.extend(request.updates);
    }
    let mut results = settle(shared, &updates).await.into_iter();
    for (n, reply) in replies {
        let _ = reply.send(results.by_ref().take(n).collect());
    }
}

/// Tells other processes that work was stored (best effort: their workers
/// poll anyway). Sent on its own task, so the group it announces does not
/// wait a round trip for it.
pub(crate) async fn announce_work(shared: &Shared) {
    let Ok(mut conn) = shared.conn().await else {
        return;
    };
    let mut publish = redis::cmd("PUBLISH");
    publish
        .arg(shared.keys.channel())
        .arg(format!("w:{}", shared.events.origin));
    tokio::spawn(async move {
        let published: redis::RedisResult<Value> = publish.query_async(&mut conn).await;
        if let Err(e) = published {
            tracing::debug!(error = %e, "cannot announce new work");
        }
    });
}

/// Most task ids in one cancel announcement.
const IDS_PER_ANNOUNCEMENT: usize = 500;

/// Tells other processes that these running tasks were asked to stop
/// (best effort: a process that misses it learns of each request at its
/// next lease extension).
pub(crate) async fn announce_cancel(shared: &Shared, ids: &[TaskId]) {
    let Ok(mut conn) = shared.conn().await else {
        return;
    };
    for chunk in ids.chunks(IDS_PER_ANNOUNCEMENT) {
        let list: Vec<String> = chunk.iter().map(ToString::to_string).collect();
        let published: redis::RedisResult<Value> = redis::cmd("PUBLISH")
            .arg(shared.keys.channel())
            .arg(format!("x:{}:{}", shared.events.origin, list.join(",")))
            .query_async(&mut conn)
            .await;
        if let Err(e) = published {
            tracing::warn!(error = %e, "cannot announce cancel requests to other processes");
        }
    }
}

/// The indices of `items` per queue, each queue's in order, queues in the
/// order they first appear.
fn by_queue<T>(items: &[T], queue: impl Fn(&T) -> &str) -> Vec<(String, Vec<usize>)> {
    let mut order: Vec<(String, Vec<usize>)> = Vec::new();
    let mut slot: HashMap<&str, usize> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        let q = queue(item);
        let at = *slot.entry(q).or_insert_with(|| {
            order.push((q.to_owned(), Vec::new()));
            order.len() - 1
        });
        order[at].1.push(i);
    }
    order
}

/// Pairs of (code, value) from a script's flat answer.
pub(crate) fn pairs(answer: Vec<Vec<u8>>, expected: usize) -> Result<Vec<(u8, Vec<u8>)>, Failure> {
    if answer.len() != expected * 2 {
        return Err(unexpected("a batch"));
    }
    let mut out = Vec::with_capacity(expected);
    let mut it = answer.into_iter();
    while let (Some(code), Some(value)) = (it.next(), it.next()) {
        out.push((code.first().copied().unwrap_or(b'?'), value));
    }
    Ok(out)
}

/// Stores new tasks; one result per task. Tasks with a unique key are
/// written after the others ([`submit_unique`]), in their order.
async fn submit(shared: &Shared, tasks: &[NewTask]) -> Vec<Result<Submitted, EngineError>> {
    if tasks.iter().any(|t| t.unique.is_some()) {
        let (unique, plain): (Vec<usize>, Vec<usize>) =
            (0..tasks.len()).partition(|&i| tasks[i].unique.is_some());
        let group: Vec<NewTask> = plain.iter().map(|&i| tasks[i].clone()).collect();
        let mut results: Vec<Option<Result<Submitted, EngineError>>> = vec![None; tasks.len()];
        for (&i, answer) in plain.iter().zip(Box::pin(submit(shared, &group)).await) {
            results[i] = Some(answer);
        }
        let keyed: Vec<&NewTask> = unique.iter().map(|&i| &tasks[i]).collect();
        for (&i, answer) in unique.iter().zip(submit_unique(shared, &keyed).await) {
            results[i] = Some(answer);
        }
        return results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(EngineError::Unavailable("no answer".into()))))
            .collect();
    }
    if tasks.is_empty() {
        return Vec::new();
    }
    let values: Vec<Vec<u8>> = tasks
        .iter()
        .map(|t| stored::value_of(&t.envelope))
        .collect();
    let values = &values;
    let outcome = retrying(shared.options.wait, Retry::Always, |maybe_applied| {
        submit_attempt(shared, tasks, values, maybe_applied).boxed()
    })
    .await;
    outcome.unwrap_or_else(|e| vec![Err(e); tasks.len()])
}

async fn submit_attempt(
    shared: &Shared,
    tasks: &[NewTask],
    values: &[Vec<u8>],
    maybe_applied: bool,
) -> Result<Vec<Result<Submitted, EngineError>>, Failure> {
    let mut conn = shared.conn().await?;
    let keys = &shared.keys;
    let queues = by_queue(tasks, |t| t.envelope.queue.as_str());
    let envelopes: Vec<&Envelope> = tasks.iter().map(|t| &t.envelope).collect();
    let (mut results, fresh) = index_new(&mut conn, keys, &envelopes).await?;

    // A fresh id without an idempotency key is stored nowhere yet (a task's
    // index entry is written before it and cleared after it): nothing needs
    // checking, so each queue's such tasks are written by one MULTI/EXEC of
    // a few variadic commands instead of the submit script. First, so that
    // a repeat of one of their ids in this group finds it taken.
    for (queue, members) in &queues {
        let plain: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&i| results[i].is_none() && fresh[i] && tasks[i].idempotency_key.is_none())
            .collect();
        let queue_keys = keys.queue(queue);
        for chunk in plain.chunks(shared.options.max_group) {
            insert_plain(
                &mut conn,
                &queue_keys,
                chunk.iter().map(|&i| (&tasks[i].envelope, &values[i])),
            )
            .await?;
            for &i in chunk {
                results[i] = Some(Ok(Submitted::Created(tasks[i].envelope.clone())));
            }
        }
    }

    let mut unindex = Vec::new();
    for (queue, members) in queues {
        let todo: Vec<usize> = members
            .into_iter()
            .filter(|&i| results[i].is_none())
            .collect();
        let queue_keys = keys.queue(&queue);
        for chunk in todo.chunks(shared.options.max_group) {
            let mut args: Vec<Vec<u8>> = Vec::with_capacity(chunk.len() * 6);
            for &i in chunk {
                let env = &tasks[i].envelope;
                let place = Placement::of(env);
                args.push(env.id.to_string().into_bytes());
                args.push(match &tasks[i].idempotency_key {
                    Some(key) => [b"+", key.as_bytes()].concat(),
                    None => b"-".to_vec(),
                });
                args.push(values[i].clone());
                args.push(place.status.to_string().into_bytes());
                args.push(place.kind.to_string().into_bytes());
                args.push(place.score.into_bytes());
            }
            let answer: Vec<Vec<u8>> =
                crate::scripts::run(&mut conn, &shared.scripts.submit, &queue_keys, args).await?;
            for (&i, (code, value)) in chunk.iter().zip(pairs(answer, chunk.len())?) {
                let env = &tasks[i].envelope;
                results[i] = Some(match code {
                    b'C' => Ok(Submitted::Created(env.clone())),
                    b'E' => {
                        let original = stored::decode(&value)?;
                        if maybe_applied && original.id == env.id {
                            Ok(Submitted::Created(env.clone()))
                        } else {
                            if fresh[i] {
                                unindex.push(env.id);
                            }
                            Ok(Submitted::Existing(original))
                        }
                    }
                    b'D' if maybe_applied
                        && envelope_bytes(&value) == envelope_bytes(&values[i]) =>
                    {
                        Ok(Submitted::Created(env.clone()))
                    }
                    b'D' => Err(taken(env)),
                    _ => return Err(unexpected("a submit")),
                });
            }
        }
    }
    if !unindex.is_empty() {
        // Ids that lost to an idempotency key were never stored.
        shared.forget_ids(&mut conn, &unindex).await?;
    }
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(EngineError::Unavailable("no answer".into()))))
        .collect())
}

/// Registers the queues of `envelopes` and takes their ids in the id index,
/// first, as every submit does: a task is never stored where the reaper,
/// `counts` or `get` cannot find it. Answers a refusal for each id a task
/// of another queue has, and which ids were new to the index.
async fn index_new(
    conn: &mut crate::conn::Conn,
    keys: &crate::keys::Keys,
    envelopes: &[&Envelope],
) -> Result<(Vec<Option<Result<Submitted, EngineError>>>, Vec<bool>), Failure> {
    let queues = by_queue(envelopes, |e| e.queue.as_str());
    let mut cmds = Vec::with_capacity(envelopes.len() + 1);
    let mut register = redis::cmd("SADD");
    register.arg(keys.registry());
    for (queue, _) in &queues {
        register.arg(queue);
    }
    cmds.push(register);
    for env in envelopes {
        let mut index = redis::cmd("HSETNX");
        index
            .arg(keys.index(env.id))
            .arg(env.id.to_string())
            .arg(&env.queue);
        cmds.push(index);
    }
    let answers: Vec<Value> = conn.each(cmds).await?;
    let fresh: Vec<bool> = answers
        .iter()
        .skip(1)
        .map(|v| matches!(v, Value::Int(1)))
        .collect();
    let mut results: Vec<Option<Result<Submitted, EngineError>>> = vec![None; envelopes.len()];
    for (i, env) in envelopes.iter().enumerate() {
        if !fresh[i] && !index_is_ours(conn, keys, env).await? {
            results[i] = Some(Err(taken(env)));
        }
    }
    Ok((results, fresh))
}

/// Writes new tasks of one queue that no script needs to check, atomically:
/// the stored values and each index their placement names.
async fn insert_plain<'a>(
    conn: &mut crate::conn::Conn,
    keys: &QueueKeys,
    tasks: impl Iterator<Item = (&'a Envelope, &'a Vec<u8>)>,
) -> Result<(), Failure> {
    let mut values = redis::cmd("HSET");
    values.arg(keys.tasks());
    let mut sets: Vec<(&str, redis::Cmd)> = Vec::new();
    // Flow keys' ready sets and IN_FLIGHT counts, as `lua/common.lua`'s
    // `place` keeps them (tasks with a flow key only).
    let mut flow_ready: Vec<(&str, redis::Cmd)> = Vec::new();
    let mut in_flight: HashMap<&str, i64> = HashMap::new();
    for (env, value) in tasks {
        let id = env.id.to_string();
        let place = Placement::of(env);
        values.arg(&id).arg(value.as_slice());
        add_member(&mut sets, keys.ids(place.status), "0", &id)?;
        if place.kind != '-' {
            add_member(&mut sets, keys.scored(place.kind), &place.score, &id)?;
        }
        let key = stored::flow_key(env);
        if key.is_empty() {
            continue;
        }
        if place.kind == 'r' {
            if let Some((_, cmd)) = flow_ready.iter_mut().find(|(k, _)| *k == key) {
                cmd.arg(&place.score).arg(&id);
            } else {
                let mut cmd = redis::cmd("ZADD");
                cmd.arg(keys.flow_ready(key)).arg(&place.score).arg(&id);
                flow_ready.push((key, cmd));
            }
        }
        if place.status == '1' {
            *in_flight.entry(key).or_default() += 1;
        }
    }
    let mut pipe = redis::pipe();
    pipe.atomic().add_command(values).ignore();
    for (_, cmd) in sets {
        pipe.add_command(cmd).ignore();
    }
    if !flow_ready.is_empty() {
        let mut flow_keys = redis::cmd("SADD");
        flow_keys.arg(keys.flow_keys());
        for (key, cmd) in flow_ready {
            flow_keys.arg(key);
            pipe.add_command(cmd).ignore();
        }
        pipe.add_command(flow_keys).ignore();
    }
    for (key, n) in in_flight {
        pipe.hincr(keys.flow_in_flight(), key, n).ignore();
    }
    let () = pipe.query_async(conn).await?;
    Ok(())
}

/// Adds `id` with `score` to the ZADD of sorted set `key` in `sets`.
fn add_member<'k>(
    sets: &mut Vec<(&'k str, redis::Cmd)>,
    key: Option<&'k str>,
    score: &str,
    id: &str,
) -> Result<(), Failure> {
    let key = key.ok_or_else(|| unexpected("a placement"))?;
    if let Some((_, cmd)) = sets.iter_mut().find(|(k, _)| *k == key) {
        cmd.arg(score).arg(id);
    } else {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(key).arg(score).arg(id);
        sets.push((key, cmd));
    }
    Ok(())
}

/// How often a unique submit decides again after its slot or holder
/// changed under it before it gives up (`STORE_UNAVAILABLE`).
pub(crate) const UNIQUE_ROUNDS: usize = 32;

/// Submits tasks with unique keys (`docs/uniqueness.md`), in their order;
/// one result per task. The first task of each slot are decided together
/// ([`decide_unique`]): a few reads and one script per queue, whatever
/// their number. A task whose slot or holder changed meanwhile is decided
/// again; a later task of a slot waits for the earlier ones.
async fn submit_unique(shared: &Shared, tasks: &[&NewTask]) -> Vec<Result<Submitted, EngineError>> {
    let mut results: Vec<Option<Result<Submitted, EngineError>>> = vec![None; tasks.len()];
    let slot_of = |i: usize| {
        let t = tasks[i];
        (
            t.envelope.queue.as_str(),
            t.unique.as_ref().map_or("", |u| u.slot.as_str()),
        )
    };
    let mut remaining: Vec<usize> = (0..tasks.len()).collect();
    while !remaining.is_empty() {
        let mut seen = std::collections::HashSet::new();
        let (mut pending, later): (Vec<usize>, Vec<usize>) =
            remaining.iter().partition(|&&i| seen.insert(slot_of(i)));
        for round in 0..UNIQUE_ROUNDS {
            if pending.is_empty() {
                break;
            }
            // First assume each slot free: a fresh key costs no read.
            let read = round > 0;
            let group: Vec<&NewTask> = pending.iter().map(|&i| tasks[i]).collect();
            let values: Vec<Vec<u8>> = group
                .iter()
                .map(|t| stored::value_of(&t.envelope))
                .collect();
            let (group, values) = (&group, &values);
            let answers = retrying(shared.options.wait, Retry::Always, |maybe_applied| {
                if read {
                    decide_unique(shared, group, values, maybe_applied).boxed()
                } else {
                    take_free_slots(shared, group, values).boxed()
                }
            })
            .await
            .unwrap_or_else(|e| vec![Some(Err(e)); group.len()]);
            let mut again = Vec::new();
            for (&i, answer) in pending.iter().zip(answers) {
                match answer {
                    Some(answer) => results[i] = Some(answer),
                    None => again.push(i),
                }
            }
            pending = again;
        }
        for i in pending {
            results[i] = Some(Err(EngineError::Unavailable(format!(
                "the unique key of task {} kept changing hands; submit it again",
                tasks[i].envelope.id
            ))));
        }
        remaining = later;
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(EngineError::Unavailable("no answer".into()))))
        .collect()
}

/// The first round of unique submits of distinct slots, each taken to find
/// its slot free: per queue, one MULTI writes the stored values of the
/// tasks whose ids are new and runs `lua/take.lua`, which places each whose
/// slot is free and removes the others' values. `None` for every task not
/// created so, to be decided on a read ([`decide_unique`]).
async fn take_free_slots(
    shared: &Shared,
    tasks: &[&NewTask],
    values: &[Vec<u8>],
) -> Result<Vec<Option<Result<Submitted, EngineError>>>, Failure> {
    let mut conn = shared.conn().await?;
    let keys = &shared.keys;
    let envelopes: Vec<&Envelope> = tasks.iter().map(|t| &t.envelope).collect();
    let (mut results, fresh) = index_new(&mut conn, keys, &envelopes).await?;
    for (queue, members) in by_queue(tasks, |t| t.envelope.queue.as_str()) {
        let queue_keys = keys.queue(&queue);
        let todo: Vec<(usize, &str)> = members
            .into_iter()
            .filter(|&i| results[i].is_none() && fresh[i])
            .filter_map(|i| tasks[i].unique.as_ref().map(|u| (i, u.slot.as_str())))
            .collect();
        for chunk in todo.chunks(shared.options.max_group) {
            let mut write = redis::cmd("HSET");
            write.arg(queue_keys.tasks());
            let mut take = redis::cmd("EVAL");
            take.arg(crate::scripts::TAKE).arg(queue_keys.all.len());
            for key in &queue_keys.all {
                take.arg(key);
            }
            for &(i, slot) in chunk {
                let env = &tasks[i].envelope;
                let id = env.id.to_string();
                let place = Placement::of(env);
                write.arg(&id).arg(values[i].as_slice());
                take.arg(slot)
                    .arg(&id)
                    .arg(place.kind.to_string())
                    .arg(&place.score)
                    .arg(stored::flow_key(env));
            }
            let mut pipe = redis::pipe();
            pipe.atomic().add_command(write).ignore().add_command(take);
            let (codes,): (Vec<String>,) = pipe.query_async(&mut conn).await?;
            if codes.len() != chunk.len() {
                return Err(unexpected("a unique submit"));
            }
            for (&(i, _), code) in chunk.iter().zip(codes) {
                if code == "C" {
                    results[i] = Some(Ok(Submitted::Created(tasks[i].envelope.clone())));
                }
            }
        }
    }
    Ok(results)
}

/// Decides unique submits of distinct slots: reads each slot's holder and
/// its stored value (one `HMGET` each per queue), lets the engine decide
/// (`unique::decide`), and applies the decisions with `lua/unique.lua`,
/// which refuses each whose slot or holder changed meanwhile: `None` for
/// those, to decide again.
async fn decide_unique(
    shared: &Shared,
    tasks: &[&NewTask],
    values: &[Vec<u8>],
    maybe_applied: bool,
) -> Result<Vec<Option<Result<Submitted, EngineError>>>, Failure> {
    let mut conn = shared.conn().await?;
    let keys = &shared.keys;
    let envelopes: Vec<&Envelope> = tasks.iter().map(|t| &t.envelope).collect();
    let (mut results, _) = index_new(&mut conn, keys, &envelopes).await?;
    for (queue, members) in by_queue(tasks, |t| t.envelope.queue.as_str()) {
        let queue_keys = keys.queue(&queue);
        let mut todo: Vec<(usize, &rdq_engine::unique::UniqueSlot)> = Vec::new();
        for i in members {
            if results[i].is_some() {
                continue;
            }
            match &tasks[i].unique {
                Some(unique) => todo.push((i, unique)),
                None => {
                    results[i] = Some(Err(EngineError::InvalidArgument(
                        "a unique submit without its slot".into(),
                    )));
                }
            }
        }
        for chunk in todo.chunks(shared.options.max_group) {
            let mut slots = redis::cmd("HMGET");
            slots.arg(queue_keys.unique_slots());
            for (_, unique) in chunk {
                slots.arg(&unique.slot);
            }
            let named: Vec<Option<String>> = slots.query_async(&mut conn).await?;
            let holders: Vec<&str> = named.iter().flatten().map(String::as_str).collect();
            let values_of: HashMap<&str, Vec<u8>> = if holders.is_empty() {
                HashMap::new()
            } else {
                let mut get = redis::cmd("HMGET");
                get.arg(queue_keys.tasks()).arg(&holders);
                let got: Vec<Option<Vec<u8>>> = get.query_async(&mut conn).await?;
                holders
                    .iter()
                    .zip(got)
                    .filter_map(|(h, v)| v.map(|v| (*h, v)))
                    .collect()
            };
            let mut args: Vec<Vec<u8>> = Vec::with_capacity(chunk.len() * 10);
            let mut applied: Vec<(usize, Option<Box<Envelope>>)> = Vec::new();
            for ((i, unique), named) in chunk.iter().zip(&named) {
                let (i, env) = (*i, &tasks[*i].envelope);
                let holder = named.as_deref().unwrap_or("");
                let stored = values_of.get(holder);
                if holder == env.id.to_string() {
                    // The task holds its slot already: stored by an
                    // earlier attempt (this very envelope), or its id is
                    // taken.
                    let ours =
                        stored.is_some_and(|v| envelope_bytes(v) == envelope_bytes(&values[i]));
                    results[i] = Some(if ours {
                        Ok(Submitted::Created(env.clone()))
                    } else {
                        Err(taken(env))
                    });
                    continue;
                }
                let decision = match stored {
                    Some(stored) => unique::decide(&stored::decode(stored)?, env, unique),
                    None => Decision::Take,
                };
                let (mode, id, next) = match decision {
                    Decision::Conflict(e) => {
                        results[i] = Some(Err(e));
                        continue;
                    }
                    Decision::Existing(holder) => {
                        results[i] = Some(Ok(Submitted::Existing(*holder)));
                        continue;
                    }
                    Decision::Take => ("T", env.id, None),
                    Decision::Replace(next) => ("P", next.id, Some(next)),
                };
                let (written, place) = match &next {
                    Some(next) => (stored::value_of(next), Placement::of(next)),
                    None => (values[i].clone(), Placement::of(env)),
                };
                args.extend([
                    mode.as_bytes().to_vec(),
                    unique.slot.as_bytes().to_vec(),
                    holder.as_bytes().to_vec(),
                    stored.cloned().unwrap_or_default(),
                    id.to_string().into_bytes(),
                    written,
                    place.status.to_string().into_bytes(),
                    place.kind.to_string().into_bytes(),
                    place.score.into_bytes(),
                    Vec::new(),
                ]);
                applied.push((i, next));
            }
            if applied.is_empty() {
                continue;
            }
            let answer: Vec<Vec<u8>> =
                crate::scripts::run(&mut conn, &shared.scripts.unique, &queue_keys, args).await?;
            let answers = pairs(answer, applied.len())?;
            for ((i, next), (code, stored_value)) in applied.into_iter().zip(answers) {
                let env = &tasks[i].envelope;
                let answer = match (code, next) {
                    (b'C', _) => Ok(Submitted::Created(env.clone())),
                    (b'P', Some(next)) => Ok(Submitted::Existing(*next)),
                    (b'D', _)
                        if maybe_applied
                            && envelope_bytes(&stored_value) == envelope_bytes(&values[i]) =>
                    {
                        Ok(Submitted::Created(env.clone()))
                    }
                    (b'D', _) => Err(taken(env)),
                    (b'R', _) => continue,
                    _ => return Err(unexpected("a unique submit")),
                };
                results[i] = Some(answer);
            }
        }
    }
    // A task still undecided changed hands meanwhile: `None`, to decide
    // again.
    Ok(results)
}

/// For an id the index knows already: whether `env` may have it. False
/// when a task of another queue has it (a duplicate); otherwise the index
/// names `env`'s queue now.
async fn index_is_ours(
    conn: &mut crate::conn::Conn,
    keys: &crate::keys::Keys,
    env: &Envelope,
) -> Result<bool, Failure> {
    let index = keys.index(env.id);
    let owner: Option<String> = redis::cmd("HGET")
        .arg(&index)
        .arg(env.id.to_string())
        .query_async(conn)
        .await?;
    if let Some(owner) = owner.filter(|q| *q != env.queue) {
        let there: bool = redis::cmd("HEXISTS")
            .arg(keys.queue(&owner).tasks())
            .arg(env.id.to_string())
            .query_async(conn)
            .await?;
        if there {
            return Ok(false);
        }
        let _: Value = redis::cmd("HSET")
            .arg(&index)
            .arg(env.id.to_string())
            .arg(&env.queue)
            .query_async(conn)
            .await?;
    }
    Ok(true)
}

fn taken(env: &Envelope) -> EngineError {
    EngineError::InvalidArgument(format!("a task with id {} already exists", env.id))
}

/// Applies compare-and-swap updates; one result per update, in order.
async fn settle(shared: &Shared, updates: &[LeasedUpdate]) -> Vec<Result<(), EngineError>> {
    if updates.is_empty() {
        return Vec::new();
    }
    let values: Vec<Vec<u8>> = updates
        .iter()
        .map(|u| stored::value_of(&u.envelope))
        .collect();
    let values = &values;
    let outcome = retrying(shared.options.wait, Retry::Always, |maybe_applied| {
        swap_attempt(shared, '1', updates, values, maybe_applied).boxed()
    })
    .await;
    outcome.unwrap_or_else(|e| vec![Err(e); updates.len()])
}

/// One attempt at compare-and-swap writes of tasks in `required` status
/// (IN_FLIGHT for settles, DEAD for redrives).
pub(crate) async fn swap_attempt(
    shared: &Shared,
    required: char,
    updates: &[LeasedUpdate],
    values: &[Vec<u8>],
    maybe_applied: bool,
) -> Result<Vec<Result<(), EngineError>>, Failure> {
    let mut conn = shared.conn().await?;
    // After a lost answer, only the last write of a task can be recognised
    // as applied by the bytes it left.
    let mut last_of: HashMap<_, usize> = HashMap::new();
    for (i, u) in updates.iter().enumerate() {
        last_of.insert(u.envelope.id, i);
    }
    let mut results: Vec<Option<Result<(), EngineError>>> = vec![None; updates.len()];
    for (queue, members) in by_queue(updates, |u| u.envelope.queue.as_str()) {
        let queue_keys = shared.keys.queue(&queue);
        for chunk in members.chunks(shared.options.max_group) {
            let mut args: Vec<Vec<u8>> = Vec::with_capacity(1 + chunk.len() * 6);
            args.push(required.to_string().into_bytes());
            for &i in chunk {
                let env = &updates[i].envelope;
                let place = Placement::of(env);
                args.push(env.id.to_string().into_bytes());
                args.push(updates[i].expected.0.to_string().into_bytes());
                args.push(values[i].clone());
                args.push(place.status.to_string().into_bytes());
                args.push(place.kind.to_string().into_bytes());
                args.push(place.score.into_bytes());
            }
            let answer: Vec<Vec<u8>> =
                crate::scripts::run(&mut conn, &shared.scripts.swap, &queue_keys, args).await?;
            for (&i, (code, value)) in chunk.iter().zip(pairs(answer, chunk.len())?) {
                let id = updates[i].envelope.id;
                results[i] = Some(match code {
                    b'K' => Ok(()),
                    b'N' => Err(EngineError::TaskNotFound(id)),
                    b'L' if maybe_applied && last_of.get(&id) == Some(&i) && value == values[i] => {
                        Ok(())
                    }
                    b'L' => Err(EngineError::LeaseLost(id)),
                    _ => return Err(unexpected("a settle")),
                });
            }
        }
    }
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(EngineError::Unavailable("no answer".into()))))
        .collect())
}

/// Claims up to `max` due tasks of `queue` (see `lua/claim.lua`).
pub(crate) async fn claim(
    shared: &Shared,
    request: &ClaimRequest,
) -> Result<Vec<Envelope>, EngineError> {
    let queue = request.queue.as_str();
    let queue_keys = shared.keys.queue(queue);
    let now_ms = request.now.unix_ms();
    let until = request.now.plus_ms(request.lease_ms).unix_ms();
    let max = request.max.min(MAX_CLAIM);
    if let Some(flow) = &request.flow {
        return crate::flow::claim(shared, request, flow, max).await;
    }
    let limit = request
        .max_in_flight
        .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
    let values: Vec<Vec<u8>> = retrying(shared.options.wait, Retry::Always, |_| {
        let queue_keys = &queue_keys;
        async move {
            let mut conn = shared.conn().await?;
            crate::scripts::run(
                &mut conn,
                &shared.scripts.claim,
                queue_keys,
                [
                    now_ms,
                    until,
                    max as i64,
                    shared.options.promote as i64,
                    limit,
                ],
            )
            .await
        }
        .boxed()
    })
    .await?;
    let mut claimed = Vec::with_capacity(values.len());
    for value in values {
        match stored::decode(&value) {
            Ok(env) => claimed.push(env),
            // Left IN_FLIGHT: the reaper reports it again, nothing is lost.
            Err(e) => tracing::warn!(error = %e, queue, "a claimed task does not decode"),
        }
    }
    Ok(claimed)
}
