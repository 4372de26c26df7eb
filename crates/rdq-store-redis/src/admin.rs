//! The admin writes: redrive, purge, delete, prune and stored policies.
//!
//! Redrive reads the DLQ a page at a time, lets the engine decide each
//! task's new state ([`machine::redrive`]) and writes the page back with the
//! compare-and-swap script, which skips any task that stopped being that
//! DEAD task meanwhile. Removals run as batches of one script each and then
//! drop the removed ids from the id index.

use std::collections::HashSet;

use futures::FutureExt;
use rdq_engine::glob::Glob;
use rdq_engine::store::latest_error_type;
use rdq_engine::unique;
use rdq_engine::{
    CancelRequest, EngineError, LeaseToken, LeasedUpdate, ListOrder, QueueConfig, RedriveRequest,
    machine,
};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};

use crate::Shared;
use crate::conn::{Retry, retrying};
use crate::reads;
use crate::stored::{self, status_digit};
use crate::writes::swap_attempt;

/// Dead tasks read (and redriven) per round trip.
const REDRIVE_PAGE: usize = 500;

/// Tasks one purge script removes.
const PURGE_BATCH: usize = 1_000;

/// Redrives matching DEAD tasks; returns their ids (what would be, on a dry run).
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
    let matches = |env: &Envelope| {
        env.status == Status::Dead
            && env.queue == request.queue
            && glob
                .as_ref()
                .is_none_or(|g| latest_error_type(env).is_some_and(|t| g.matches(t)))
    };
    let limit = request.limit.unwrap_or(usize::MAX);
    let mut chosen: Vec<TaskId> = Vec::new();
    match &request.ids {
        Some(ids) => {
            let mut seen = HashSet::new();
            let unique: Vec<TaskId> = ids.iter().copied().filter(|id| seen.insert(*id)).collect();
            for page in unique.chunks(REDRIVE_PAGE) {
                let found = fetch(shared, &request.queue, page).await?;
                let picked: Vec<Envelope> = found
                    .into_iter()
                    .filter(|env| matches(env))
                    .take(limit - chosen.len())
                    .collect();
                chosen.extend(apply(shared, picked, request.dry_run, now).await?);
                if chosen.len() >= limit {
                    break;
                }
            }
        }
        None => {
            let mut cursor = None;
            loop {
                let raw = reads::chunk(
                    shared,
                    &request.queue,
                    "3",
                    cursor,
                    REDRIVE_PAGE,
                    ListOrder::OldestFirst,
                )
                .await?;
                let full = raw.len() == REDRIVE_PAGE;
                let mut picked = Vec::new();
                for (id, value) in raw {
                    cursor = Some(id);
                    let env = stored::decode(&value)?;
                    if matches(&env) && chosen.len() + picked.len() < limit {
                        picked.push(env);
                    }
                }
                chosen.extend(apply(shared, picked, request.dry_run, now).await?);
                if !full || chosen.len() >= limit {
                    break;
                }
            }
        }
    }
    Ok(chosen)
}

/// Cancels the request's PENDING tasks with the compare-and-swap script,
/// which skips any task that stopped being that PENDING task meanwhile (a
/// claim won); returns the ids cancelled (that would be, on a dry run).
pub(crate) async fn cancel_pending(
    shared: &Shared,
    request: &CancelRequest,
    now: Timestamp,
) -> Result<Vec<TaskId>, EngineError> {
    let mut seen = HashSet::new();
    let unique: Vec<TaskId> = request
        .ids
        .iter()
        .copied()
        .filter(|id| seen.insert(*id))
        .collect();
    let mut cancelled = Vec::new();
    for page in unique.chunks(REDRIVE_PAGE) {
        let mut updates = Vec::new();
        for env in fetch(shared, &request.queue, page).await? {
            if env.queue != request.queue {
                continue;
            }
            if let Ok(next) = machine::cancel(&env, &request.by, &request.message, now) {
                updates.push(LeasedUpdate {
                    envelope: next,
                    // For a PENDING task the script compares the claim count alone.
                    expected: LeaseToken(env.claim_count),
                });
            }
        }
        if request.dry_run || updates.is_empty() {
            cancelled.extend(updates.iter().map(|u| u.envelope.id));
            continue;
        }
        let values: Vec<Vec<u8>> = updates
            .iter()
            .map(|u| stored::value_of(&u.envelope))
            .collect();
        let (updates, values) = (&updates, &values);
        let results = retrying(shared.options.wait, Retry::NotAppliedOnly, |_| {
            swap_attempt(shared, '0', updates, values, false).boxed()
        })
        .await?;
        cancelled.extend(applied(updates, results));
    }
    Ok(cancelled)
}

/// The ids of the updates whose compare-and-swap applied.
fn applied<T>(updates: &[LeasedUpdate], results: Vec<Result<(), T>>) -> Vec<TaskId> {
    updates
        .iter()
        .zip(results)
        .filter(|(_, r)| r.is_ok())
        .map(|(u, _)| u.envelope.id)
        .collect()
}

/// The stored tasks of `queue` with these ids (missing ones left out).
async fn fetch(shared: &Shared, queue: &str, ids: &[TaskId]) -> Result<Vec<Envelope>, EngineError> {
    let key = shared.keys.queue(queue).tasks().to_owned();
    let values: Vec<Option<Vec<u8>>> = retrying(shared.options.wait, Retry::Always, |_| {
        let key = &key;
        async move {
            let mut conn = shared.conn().await?;
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(key);
            for id in ids {
                cmd.arg(id.to_string());
            }
            Ok(cmd.query_async(&mut conn).await?)
        }
        .boxed()
    })
    .await?;
    values
        .into_iter()
        .flatten()
        .map(|v| stored::decode(&v))
        .collect()
}

/// Redrives `picked` (unless a dry run); returns the ids redriven.
async fn apply(
    shared: &Shared,
    picked: Vec<Envelope>,
    dry_run: bool,
    now: Timestamp,
) -> Result<Vec<TaskId>, EngineError> {
    // A task whose unique key another task holds stays DEAD, and the
    // redrive is refused (docs/uniqueness.md); each such task is then
    // redriven by a compare-and-swap that checks its slot again.
    for env in &picked {
        may_return(shared, env, now).await?;
    }
    if dry_run {
        return Ok(picked
            .iter()
            .filter(|env| machine::redrive(env, now).is_ok())
            .map(|env| env.id)
            .collect());
    }
    let (keyed, picked): (Vec<Envelope>, Vec<Envelope>) = picked
        .into_iter()
        .partition(|env| unique::slot_of_task(env).is_some());
    let mut redriven_keyed = Vec::new();
    for env in &keyed {
        if redrive_keyed(shared, env, now).await? {
            redriven_keyed.push(env.id);
        }
    }
    let mut updates = Vec::with_capacity(picked.len());
    for env in &picked {
        // A task the machine will not redrive (a counter at its maximum)
        // stays in the DLQ as it is.
        if let Ok(next) = machine::redrive(env, now) {
            updates.push(LeasedUpdate {
                envelope: next,
                // For a DEAD task the script compares the claim count alone.
                expected: LeaseToken(env.claim_count),
            });
        }
    }
    if updates.is_empty() {
        return Ok(redriven_keyed);
    }
    let values: Vec<Vec<u8>> = updates
        .iter()
        .map(|u| stored::value_of(&u.envelope))
        .collect();
    let (updates, values) = (&updates, &values);
    let results = retrying(shared.options.wait, Retry::NotAppliedOnly, |_| {
        swap_attempt(shared, '3', updates, values, false).boxed()
    })
    .await?;
    redriven_keyed.extend(applied(updates, results));
    Ok(redriven_keyed)
}

/// Redrives DEAD task `env`, which has a unique slot, if no other task
/// holds the slot: reads the slot's holder, judges it (`unique::may_return`)
/// and applies the redrive with `lua/unique.lua` (mode `V`), which also
/// makes the task the slot's holder, only if neither the slot nor the
/// holder changed since and the task is still that DEAD task; else reads
/// again. False when the task is not redriven (the machine will not, it
/// changed meanwhile, or a submit took its key meanwhile).
async fn redrive_keyed(
    shared: &Shared,
    env: &Envelope,
    now: Timestamp,
) -> Result<bool, EngineError> {
    let (Some(slot), Ok(next)) = (unique::slot_of_task(env), machine::redrive(env, now)) else {
        return Ok(false);
    };
    let queue_keys = shared.keys.queue(&env.queue);
    let value = stored::value_of(&next);
    let place = stored::Placement::of(&next);
    let (slot, queue_keys, value, place) = (&slot, &queue_keys, &value, &place);
    for _ in 0..crate::writes::UNIQUE_ROUNDS {
        let (named, read) = read_slot(shared, queue_keys, slot).await?;
        match held_against(env, &named, read.as_deref(), now) {
            Ok(()) => {}
            Err(EngineError::UniqueHeld { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
        let args = &[
            b"V".to_vec(),
            slot.as_bytes().to_vec(),
            named.into_bytes(),
            read.unwrap_or_default(),
            env.id.to_string().into_bytes(),
            value.clone(),
            place.status.to_string().into_bytes(),
            place.kind.to_string().into_bytes(),
            place.score.clone().into_bytes(),
            env.claim_count.to_string().into_bytes(),
        ];
        let code = retrying(shared.options.wait, Retry::Always, |_| {
            async move {
                let mut conn = shared.conn().await?;
                let answer: Vec<Vec<u8>> =
                    crate::scripts::run(&mut conn, &shared.scripts.unique, queue_keys, args.iter())
                        .await?;
                Ok(crate::writes::pairs(answer, 1)?
                    .first()
                    .map_or(b'?', |(code, _)| *code))
            }
            .boxed()
        })
        .await?;
        match code {
            b'C' => return Ok(true),
            b'R' => {}
            _ => return Ok(false),
        }
    }
    Ok(false)
}

/// The task a unique slot names (`""` for none) and its stored value.
async fn read_slot(
    shared: &Shared,
    queue_keys: &crate::keys::QueueKeys,
    slot: &str,
) -> Result<(String, Option<Vec<u8>>), EngineError> {
    retrying(shared.options.wait, Retry::Always, |_| {
        async move {
            let mut conn = shared.conn().await?;
            let named: Option<String> = redis::cmd("HGET")
                .arg(queue_keys.unique_slots())
                .arg(slot)
                .query_async(&mut conn)
                .await?;
            let Some(named) = named else {
                return Ok((String::new(), None));
            };
            let read: Option<Vec<u8>> = redis::cmd("HGET")
                .arg(queue_keys.tasks())
                .arg(&named)
                .query_async(&mut conn)
                .await?;
            Ok((named, read))
        }
        .boxed()
    })
    .await
}

/// Refuses (`UNIQUE_HELD`) to redrive `env` while another task holds its
/// unique slot.
async fn may_return(shared: &Shared, env: &Envelope, now: Timestamp) -> Result<(), EngineError> {
    let Some(slot) = unique::slot_of_task(env) else {
        return Ok(());
    };
    let (named, read) = read_slot(shared, &shared.keys.queue(&env.queue), &slot).await?;
    held_against(env, &named, read.as_deref(), now)
}

/// `UNIQUE_HELD` when the slot of `env` names another task (`named`, stored
/// as `read`) that holds it at `now`.
fn held_against(
    env: &Envelope,
    named: &str,
    read: Option<&[u8]>,
    now: Timestamp,
) -> Result<(), EngineError> {
    match read {
        Some(read) if named != env.id.to_string() => {
            unique::may_return(env.id, &stored::decode(read)?, now)
        }
        _ => Ok(()),
    }
}

/// Runs the removal script with `args` once; returns the removed ids,
/// already dropped from the id index.
async fn remove(
    shared: &Shared,
    queue: &str,
    args: Vec<String>,
    retry: Retry,
) -> Result<Vec<TaskId>, EngineError> {
    let queue_keys = shared.keys.queue(queue);
    let (queue_keys, args) = (&queue_keys, &args);
    retrying(shared.options.wait, retry, |_| {
        async move {
            let mut conn = shared.conn().await?;
            let removed: Vec<String> =
                crate::scripts::run(&mut conn, &shared.scripts.remove, queue_keys, args).await?;
            let ids: Vec<TaskId> = removed.iter().filter_map(|s| TaskId::parse(s)).collect();
            shared.forget_ids(&mut conn, &ids).await?;
            Ok(ids)
        }
        .boxed()
    })
    .await
}

/// Removes every task of `queue` in `status`; returns how many (would be) removed.
pub(crate) async fn purge(
    shared: &Shared,
    queue: &str,
    status: Status,
    dry_run: bool,
) -> Result<u64, EngineError> {
    if dry_run {
        return reads::count_of(shared, queue, status).await;
    }
    let mut removed = 0u64;
    loop {
        let args = vec![
            "status".to_owned(),
            status_digit(status).to_string(),
            PURGE_BATCH.to_string(),
        ];
        let batch = remove(shared, queue, args, Retry::NotAppliedOnly).await?;
        removed += batch.len() as u64;
        if batch.len() < PURGE_BATCH {
            return Ok(removed);
        }
    }
}

/// Removes one task.
pub(crate) async fn delete(shared: &Shared, id: TaskId) -> Result<(), EngineError> {
    let queue = retrying(shared.options.wait, Retry::Always, |_| {
        async move {
            let mut conn = shared.conn().await?;
            reads::queue_of(shared, &mut conn, id).await
        }
        .boxed()
    })
    .await?
    .ok_or(EngineError::TaskNotFound(id))?;
    let removed = remove(
        shared,
        &queue,
        vec!["ids".to_owned(), id.to_string()],
        Retry::NotAppliedOnly,
    )
    .await?;
    if removed.is_empty() {
        return Err(EngineError::TaskNotFound(id));
    }
    Ok(())
}

/// Removes up to `limit` SUCCEEDED tasks of `queue` finished before the cutoff.
pub(crate) async fn prune(
    shared: &Shared,
    queue: &str,
    finished_before: Timestamp,
    limit: usize,
) -> Result<u64, EngineError> {
    let args = vec![
        "finished".to_owned(),
        finished_before.unix_ms().to_string(),
        limit.to_string(),
    ];
    Ok(remove(shared, queue, args, Retry::Always).await?.len() as u64)
}

/// Stores the policy of `queue`.
pub(crate) async fn put_config(
    shared: &Shared,
    queue: &str,
    policy: &QueueConfig,
) -> Result<(), EngineError> {
    let text = serde_json::to_string(policy)
        .map_err(|e| EngineError::InvalidPolicy(format!("the policy does not serialise: {e}")))?;
    let key = shared.keys.queue(queue).config().to_owned();
    let (key, text) = (&key, &text);
    retrying(shared.options.wait, Retry::Always, |_| {
        async move {
            let mut conn = shared.conn().await?;
            let mut register = redis::cmd("SADD");
            register.arg(shared.keys.registry()).arg(queue);
            let mut set = redis::cmd("SET");
            set.arg(key).arg(text);
            let _: Vec<redis::Value> = conn.each(vec![register, set]).await?;
            shared.events.forget(queue);
            let _: redis::Value = redis::cmd("PUBLISH")
                .arg(shared.keys.channel())
                .arg(format!("c:{queue}"))
                .query_async(&mut conn)
                .await?;
            Ok(())
        }
        .boxed()
    })
    .await
}

/// The lease secret: made by the first process to ask (`SET NX`), then the
/// same for every process until the data is lost.
pub(crate) async fn lease_secret(shared: &Shared) -> Result<[u8; 32], EngineError> {
    let mut fresh = [0u8; 32];
    getrandom::fill(&mut fresh).map_err(|e| {
        EngineError::Unavailable(format!("no randomness for the lease secret: {e}"))
    })?;
    let key = shared.keys.lease_secret();
    let (key, fresh_ref) = (&key, &fresh);
    let earlier: Option<Vec<u8>> = retrying(shared.options.wait, Retry::Always, |_| {
        async move {
            let mut conn = shared.conn().await?;
            Ok(redis::cmd("SET")
                .arg(key)
                .arg(&fresh_ref[..])
                .arg("NX")
                .arg("GET")
                .query_async(&mut conn)
                .await?)
        }
        .boxed()
    })
    .await?;
    match earlier {
        None => Ok(fresh),
        Some(stored) => stored.try_into().map_err(|v: Vec<u8>| {
            EngineError::CorruptStore(format!(
                "the stored lease secret is {} bytes, not 32",
                v.len()
            ))
        }),
    }
}
