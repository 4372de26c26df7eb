//! Flow control (rates, per-key concurrency, per-key rates, weighted
//! fairness, throttles), held exactly across every process on the store.
//!
//! # How a flow claim is decided
//!
//! rdq has one selection algorithm, [`FlowLedger::select`], and this store
//! runs it as is, in the claiming process, inside an optimistic transaction
//! (`lua/flow.lua`):
//!
//! 1. A snapshot, read in one atomic script: the queue's ledger and its
//!    version, the room the global limit leaves, and for each flow key with
//!    due ready tasks its first `room` tasks in claim order and its
//!    IN_FLIGHT count.
//! 2. [`FlowLedger::select`] chooses on that snapshot.
//! 3. A commit script claims the chosen tasks and stores the new ledger only
//!    if the ledger's version is still the snapshot's and every chosen task
//!    is still a due PENDING task within the global limit's room; otherwise
//!    it answers a fresh snapshot in the same round trip, and the claim
//!    chooses again (at most [`MAX_ATTEMPTS`] times, backing off after the
//!    first few conflicts).
//!
//! Every flow claim that takes a task and every throttle bumps the version,
//! so a commit always builds on the ledger and the per-key counts it chose
//! from. Settles, lapsed leases and deferrals do not bump it: they only
//! lower IN_FLIGHT counts, so a count read earlier is an upper bound and
//! the choice stays within every limit. A claim that takes nothing writes
//! no ledger (its bucket refills and idle keys are recomputed by the next
//! select from the same state), so idle pollers never make claimers retry.
//!
//! Why not port the algorithm to Lua: two copies of the same floating-point
//! arithmetic (token buckets, virtual times) would have to agree forever,
//! and cjson writes numbers with 14 significant digits, which a bucket a
//! hair under one token does not survive. One algorithm, with the store
//! only deciding whether the world it chose in is still the world it
//! commits to, is exact by construction.
//!
//! # What the store keeps for it
//!
//! Each task's flow key is in its stored value's header (fixed at submit).
//! The scripts keep, for tasks with a key only, each key's ready set
//! (`fr:KEY`, the ready set's tasks of that key with the same scores), the
//! set of keys with ready tasks, and the IN_FLIGHT count per key, wherever a
//! task enters or leaves the ready set or IN_FLIGHT, whatever the policy
//! says: a slot taken by a claim is given back by that task's settle, lapsed
//! lease or deferral even when the policy changed in between. A quiet key's
//! tasks are found without walking another key's backlog. Tasks without a
//! key (the `""` key) are the ready set's tasks outside every key's ready
//! set; a queue with no flow keys keeps none of this.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::FutureExt;
use rdq_engine::flow::{Candidate, FlowLedger, FlowPolicy, FlowStatus};
use rdq_engine::{ClaimRequest, EngineError};
use rdq_envelope::{Envelope, TaskId, Timestamp};
use redis::Value;

use crate::Shared;
use crate::conn::{Retry, retrying};
use crate::error::{Failure, unexpected};
use crate::keys::QueueKeys;
use crate::stored;

/// Most snapshots one flow claim chooses on before it answers with nothing
/// (the caller polls again; nothing is lost).
pub(crate) const MAX_ATTEMPTS: u32 = 16;

/// Reads a throttle makes before it answers `STORE_UNAVAILABLE`.
const THROTTLE_ATTEMPTS: u32 = 64;

/// Conflicts a flow claim retries at once before it starts backing off.
const EAGER_RETRIES: u32 = 2;

/// Ready scores are `(255 - priority) * 2^44 + due ms`.
const SPAN_MS: i64 = 1 << 44;

/// Counts of this process's flow claims, for tuning and tests.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    claims: AtomicU64,
    conflicts: AtomicU64,
    gave_up: AtomicU64,
}

/// How this process's flow claims went: see
/// [`crate::RedisStore::flow_claim_stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowClaimStats {
    /// Flow claims made.
    pub claims: u64,
    /// Choices another claim (or a throttle) overtook: each cost one more
    /// round trip.
    pub conflicts: u64,
    /// Claims that met a conflict [`MAX_ATTEMPTS`] times and took nothing.
    pub gave_up: u64,
}

impl Counters {
    pub(crate) fn stats(&self) -> FlowClaimStats {
        FlowClaimStats {
            claims: self.claims.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
            gave_up: self.gave_up.load(Ordering::Relaxed),
        }
    }
}

/// What a flow claim chooses on.
#[derive(Debug, Default)]
struct Snapshot {
    version: String,
    ledger: FlowLedger,
    room: usize,
    in_flight: HashMap<String, u64>,
    candidates: Vec<Candidate>,
}

/// What the flow script answered.
enum Answer {
    Claimed(Vec<Vec<u8>>),
    Snapshot(Snapshot),
}

fn text(bytes: &[u8]) -> Result<&str, Failure> {
    std::str::from_utf8(bytes).map_err(|_| unexpected("a flow snapshot"))
}

fn number<T: std::str::FromStr>(bytes: &[u8]) -> Result<T, Failure> {
    text(bytes)?
        .parse()
        .map_err(|_| unexpected("a flow snapshot"))
}

fn ledger_of(json: &[u8]) -> Result<FlowLedger, Failure> {
    if json.is_empty() {
        return Ok(FlowLedger::default());
    }
    serde_json::from_slice(json).map_err(|e| {
        Failure::Engine(EngineError::CorruptStore(format!(
            "the flow ledger does not decode: {e}"
        )))
    })
}

fn parse(answer: Vec<Vec<u8>>) -> Result<Answer, Failure> {
    let mut it = answer.into_iter();
    match it.next().as_deref() {
        Some(b"K") => return Ok(Answer::Claimed(it.collect())),
        Some(b"S") => {}
        _ => return Err(unexpected("a flow claim")),
    }
    let mut next = || it.next().ok_or_else(|| unexpected("a flow snapshot"));
    let mut snap = Snapshot {
        version: text(&next()?)?.to_owned(),
        ledger: ledger_of(&next()?)?,
        room: number(&next()?)?,
        ..Snapshot::default()
    };
    while let Ok(key) = next() {
        let key = text(&key)?.to_owned();
        snap.in_flight.insert(key.clone(), number(&next()?)?);
        let n: usize = number(&next()?)?;
        for _ in 0..n {
            let id = TaskId::parse(text(&next()?)?).ok_or_else(|| unexpected("a task id"))?;
            // Scores below 2^53 are exact as doubles, as Redis writes them.
            let score = number::<f64>(&next()?)? as i64;
            let due_ms = score % SPAN_MS;
            snap.candidates.push(Candidate {
                key: key.clone(),
                priority: u8::try_from(255 - score / SPAN_MS).unwrap_or(0),
                // A task due since submit is filed at 0: `None` orders first
                // as 0 does.
                due: (due_ms > 0)
                    .then(|| Timestamp::from_unix_ms(due_ms))
                    .flatten(),
                id,
            });
        }
    }
    Ok(Answer::Snapshot(snap))
}

/// Runs the flow script once: `choice` is `None` to read a snapshot, or the
/// version chosen on, the new ledger, whether the claim was cut short, and
/// the chosen ids.
async fn run(
    shared: &Shared,
    keys: &QueueKeys,
    base: &[Vec<u8>],
    choice: Option<(&str, &str, bool, &[TaskId])>,
) -> Result<Answer, EngineError> {
    let mut args: Vec<Vec<u8>> = base.to_vec();
    match choice {
        None => args.extend([Vec::new(), Vec::new(), b"0".to_vec()]),
        Some((version, ledger, throttled, ids)) => {
            args.push(version.as_bytes().to_vec());
            args.push(ledger.as_bytes().to_vec());
            args.push(if throttled {
                b"1".to_vec()
            } else {
                b"0".to_vec()
            });
            args.extend(ids.iter().map(|id| id.to_string().into_bytes()));
        }
    }
    let args = &args;
    // A lost answer is retried as is: a commit that did apply is then met
    // by a moved-on version and answers a snapshot, and the tasks it took
    // stay IN_FLIGHT until their leases lapse, as with a plain claim.
    let answer: Vec<Vec<u8>> = retrying(shared.options.wait, Retry::Always, |_| {
        async move {
            let mut conn = shared.conn().await?;
            crate::scripts::run(&mut conn, &shared.scripts.flow, keys, args.iter()).await
        }
        .boxed()
    })
    .await?;
    parse(answer).map_err(Failure::into_engine)
}

/// Claims up to `max` due tasks of the request's queue under `flow`.
pub(crate) async fn claim(
    shared: &Shared,
    request: &ClaimRequest,
    flow: &FlowPolicy,
    max: usize,
) -> Result<Vec<Envelope>, EngineError> {
    let queue = request.queue.as_str();
    let keys = shared.keys.queue(queue);
    let now = request.now;
    let limit = request
        .max_in_flight
        .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
    let base: Vec<Vec<u8>> = [
        now.unix_ms(),
        now.plus_ms(request.lease_ms).unix_ms(),
        max as i64,
        shared.options.promote as i64,
        limit,
    ]
    .iter()
    .map(|n| n.to_string().into_bytes())
    .collect();
    let counters = &shared.flow_counters;
    counters.claims.fetch_add(1, Ordering::Relaxed);
    let mut answer = run(shared, &keys, &base, None).await?;
    for attempt in 0..MAX_ATTEMPTS {
        let snap = match answer {
            Answer::Claimed(values) => return Ok(decode_all(values, queue)),
            Answer::Snapshot(snap) => snap,
        };
        let snap = if attempt == 0 {
            snap
        } else {
            counters.conflicts.fetch_add(1, Ordering::Relaxed);
            if attempt <= EAGER_RETRIES {
                // The conflict's answer is a snapshot as fresh as any.
                snap
            } else {
                // After a pause, the world has moved on: read it again.
                tokio::time::sleep(backoff(attempt)).await;
                match run(shared, &keys, &base, None).await? {
                    Answer::Snapshot(snap) => snap,
                    Answer::Claimed(_) => return Err(unexpected("a flow snapshot").into_engine()),
                }
            }
        };
        let Snapshot {
            version,
            mut ledger,
            room,
            in_flight,
            candidates,
        } = snap;
        // The count of cut-short claims is kept beside the ledger, so that
        // a claim that takes nothing need not write the ledger.
        ledger.throttled_claims = 0;
        let chosen = ledger.select(flow, now, &in_flight, candidates, room);
        let throttled = ledger.throttled_claims > 0;
        ledger.throttled_claims = 0;
        if chosen.is_empty() {
            if throttled {
                count_throttled(shared, &keys).await?;
            }
            return Ok(Vec::new());
        }
        let json = serde_json::to_string(&ledger).map_err(|e| {
            EngineError::CorruptStore(format!("the flow ledger does not encode: {e}"))
        })?;
        answer = run(
            shared,
            &keys,
            &base,
            Some((&version, &json, throttled, &chosen)),
        )
        .await?;
    }
    if let Answer::Claimed(values) = answer {
        return Ok(decode_all(values, queue));
    }
    counters.gave_up.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(
        queue,
        attempts = MAX_ATTEMPTS,
        "a flow claim kept meeting other claims and took nothing this time"
    );
    Ok(Vec::new())
}

/// A random pause that grows with the attempt: claimers that keep meeting
/// each other spread out.
fn backoff(attempt: u32) -> Duration {
    let mut seed = [0u8; 2];
    let spread = u64::from(attempt - EAGER_RETRIES).min(8) * 250;
    let jitter = match getrandom::fill(&mut seed) {
        Ok(()) => u64::from(u16::from_le_bytes(seed)) % spread.max(1),
        Err(_) => spread / 2,
    };
    Duration::from_micros(100 + jitter)
}

fn decode_all(values: Vec<Vec<u8>>, queue: &str) -> Vec<Envelope> {
    let mut claimed = Vec::with_capacity(values.len());
    for value in values {
        match stored::decode(&value) {
            Ok(env) => claimed.push(env),
            // Left IN_FLIGHT: the reaper reports it again, nothing is lost.
            Err(e) => tracing::warn!(error = %e, queue, "a claimed task does not decode"),
        }
    }
    claimed
}

/// Counts one claim that flow limits cut short.
async fn count_throttled(shared: &Shared, keys: &QueueKeys) -> Result<(), EngineError> {
    let flow = keys.flow();
    retrying(shared.options.wait, Retry::NotAppliedOnly, |_| {
        async move {
            let mut conn = shared.conn().await?;
            let _: Value = redis::cmd("HINCRBY")
                .arg(flow)
                .arg("t")
                .arg(1)
                .query_async(&mut conn)
                .await?;
            Ok(())
        }
        .boxed()
    })
    .await
}

/// The ledger of `keys`' queue as stored: its version, the ledger with its
/// count of cut-short claims, and the IN_FLIGHT count per flow key.
async fn read(
    shared: &Shared,
    keys: &QueueKeys,
) -> Result<(String, FlowLedger, HashMap<String, u64>), EngineError> {
    let (fields, per_key, total): (HashMap<String, Vec<u8>>, HashMap<String, u64>, u64) =
        retrying(shared.options.wait, Retry::Always, |_| {
            async move {
                let mut conn = shared.conn().await?;
                let mut pipe = redis::pipe();
                pipe.atomic()
                    .hgetall(keys.flow())
                    .hgetall(keys.flow_in_flight())
                    .zcard(keys.ids('1').ok_or_else(|| unexpected("a status"))?);
                Ok(pipe.query_async(&mut conn).await?)
            }
            .boxed()
        })
        .await?;
    let version = fields
        .get("v")
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_else(|| "0".to_owned());
    let mut ledger = match fields.get("ledger") {
        Some(json) => ledger_of(json).map_err(Failure::into_engine)?,
        None => FlowLedger::default(),
    };
    ledger.throttled_claims = fields
        .get("t")
        .and_then(|t| std::str::from_utf8(t).ok()?.parse().ok())
        .unwrap_or(0);
    let keyed: u64 = per_key.values().sum();
    let mut in_flight = per_key;
    let unkeyed = total.saturating_sub(keyed);
    if unkeyed > 0 {
        in_flight.insert(String::new(), unkeyed);
    }
    Ok((version, ledger, in_flight))
}

/// Throttles `key` of `queue` (the whole queue with `None`) until `until`:
/// a version-checked write of the ledger, read again on a conflict.
pub(crate) async fn throttle(
    shared: &Shared,
    queue: &str,
    key: Option<&str>,
    until: Timestamp,
) -> Result<(), EngineError> {
    let keys = shared.keys.queue(queue);
    register(shared, queue).await?;
    for attempt in 0..THROTTLE_ATTEMPTS {
        if attempt > EAGER_RETRIES {
            tokio::time::sleep(backoff(attempt.min(10))).await;
        }
        let (version, mut ledger, _) = read(shared, &keys).await?;
        ledger.throttle(key, until);
        ledger.throttled_claims = 0;
        let json = serde_json::to_string(&ledger).map_err(|e| {
            EngineError::CorruptStore(format!("the flow ledger does not encode: {e}"))
        })?;
        let (keys, version, json) = (&keys, &version, &json);
        let stored: i64 = retrying(shared.options.wait, Retry::Always, |_| {
            async move {
                let mut conn = shared.conn().await?;
                crate::scripts::run(&mut conn, &shared.scripts.flow_put, keys, [version, json])
                    .await
            }
            .boxed()
        })
        .await?;
        // A lost answer retried finds the version moved on and reads again:
        // a throttle applied twice is the same throttle.
        if stored == 1 {
            return Ok(());
        }
    }
    Err(EngineError::Unavailable(format!(
        "the throttle of queue {queue} kept meeting claims; try again"
    )))
}

/// Adds `queue` to the registry, so that its keys are found (and deleted
/// with the prefix) even before it has a task.
async fn register(shared: &Shared, queue: &str) -> Result<(), EngineError> {
    let registry = shared.keys.registry();
    let registry = &registry;
    retrying(shared.options.wait, Retry::Always, |_| {
        async move {
            let mut conn = shared.conn().await?;
            let _: Value = redis::cmd("SADD")
                .arg(registry)
                .arg(queue)
                .query_async(&mut conn)
                .await?;
            Ok(())
        }
        .boxed()
    })
    .await
}

/// `queue`'s flow under `flow` at `now`.
pub(crate) async fn status(
    shared: &Shared,
    queue: &str,
    flow: &FlowPolicy,
    now: Timestamp,
) -> Result<FlowStatus, EngineError> {
    let keys = shared.keys.queue(queue);
    let (_, ledger, in_flight) = read(shared, &keys).await?;
    Ok(ledger.status(flow, now, &in_flight))
}
