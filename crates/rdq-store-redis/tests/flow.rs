//! Flow control across nodes: three store instances with connections of
//! their own on one prefix stand for three `rdq serve` nodes, each with
//! claimers of its own, against the Redis on this machine (`RDQ_TEST_REDIS`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdq_engine::{Engine, FlowPolicy, QueuePolicy, Settlement, SubmitRequest, SystemClock};
use rdq_envelope::TaskId;
use rdq_store_redis::{FlowClaimStats, RedisOptions, RedisStore};
use serde_json::{Value, json};

const QUEUE: &str = "flow.nodes";

fn flow(doc: Value) -> FlowPolicy {
    QueuePolicy::from_json(json!({ "flow": doc }))
        .expect("a valid flow section")
        .flow
}

fn policy(doc: Value) -> QueuePolicy {
    QueuePolicy {
        flow: flow(doc),
        lease_ms: 60_000,
        ..QueuePolicy::default()
    }
}

/// `n` stores on one fresh prefix (the first one deletes it when dropped),
/// each with its own connection, and an engine over each.
async fn nodes(n: usize, policy: &QueuePolicy) -> (Vec<RedisStore>, Vec<Engine>) {
    let first = RedisStore::open_temporary(&common::url())
        .await
        .expect("a temporary Redis store");
    let mut stores = vec![first.clone()];
    for _ in 1..n {
        let mut options = RedisOptions::from_url(&common::url()).expect("options");
        options.prefix = first.prefix().to_owned();
        stores.push(RedisStore::with_options(options));
    }
    let engines: Vec<Engine> = stores
        .iter()
        .map(|s| {
            Engine::new(Arc::new(s.clone()), Arc::new(SystemClock))
                .with_fallback_policy(policy.clone())
        })
        .collect();
    engines[0]
        .set_policy(QUEUE, policy)
        .await
        .expect("set_policy");
    (stores, engines)
}

fn task(key: Option<&str>) -> SubmitRequest {
    SubmitRequest {
        queue: QUEUE.to_owned(),
        handler_ref: "flow.noop".to_owned(),
        payload: br#"{"n":1}"#.to_vec(),
        payload_content_type: "application/json".to_owned(),
        flow_key: key.map(str::to_owned),
        ..SubmitRequest::default()
    }
}

async fn submit(engine: &Engine, key: Option<&str>, n: usize) -> Vec<TaskId> {
    let mut ids = Vec::with_capacity(n);
    let mut left = n;
    while left > 0 {
        let batch = left.min(500);
        left -= batch;
        for r in engine.submit_many(vec![task(key); batch]).await {
            ids.push(r.expect("submit").envelope().id);
        }
    }
    ids
}

fn total(stores: &[RedisStore]) -> FlowClaimStats {
    stores
        .iter()
        .map(RedisStore::flow_claim_stats)
        .fold(FlowClaimStats::default(), |a, s| FlowClaimStats {
            claims: a.claims + s.claims,
            conflicts: a.conflicts + s.conflicts,
            gave_up: a.gave_up + s.gave_up,
        })
}

/// The flow keys' own keys of the queue left in Redis (ready sets, the set
/// of keys, the IN_FLIGHT counts): none once every task has ended.
async fn flow_index_keys(store: &RedisStore) -> Vec<String> {
    let client = redis::Client::open(common::url()).expect("a client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    let mut found: Vec<String> = Vec::new();
    for pattern in ["fr:*", "fkeys", "fif"] {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{{{}:{QUEUE}}}:{pattern}", store.prefix()))
            .query_async(&mut conn)
            .await
            .expect("KEYS");
        found.extend(keys);
    }
    found
}

/// Six claimers on three nodes under `key_concurrency` 2 over four keys and
/// tasks without a key: no key ever has more than two in flight, every task
/// runs exactly once, and the optimistic claims' retry rate is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_hold_key_concurrency_and_run_every_task_once() {
    const LIMIT: u64 = 2;
    const PER_KEY: usize = 100;
    let policy = policy(json!({"key_concurrency": LIMIT, "fairness": "weighted"}));
    let (stores, engines) = nodes(3, &policy).await;
    let keys = ["a", "b", "c", "d"];
    let mut submitted: HashSet<TaskId> = HashSet::new();
    for key in keys {
        submitted.extend(submit(&engines[0], Some(key), PER_KEY).await);
    }
    submitted.extend(submit(&engines[1], None, PER_KEY).await);
    let total_tasks = submitted.len();

    let in_flight: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let peak: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let ran: Arc<Mutex<Vec<TaskId>>> = Arc::default();
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut claimers = tokio::task::JoinSet::new();
    for n in 0..6 {
        let engine = engines[n % 3].clone();
        let (in_flight, peak, ran, done) =
            (in_flight.clone(), peak.clone(), ran.clone(), done.clone());
        claimers.spawn(async move {
            let mut idle = 0;
            while done.load(SeqCst) < total_tasks && idle < 5_000 {
                let claimed = engine.claim(QUEUE, 3, None).await.expect("claim");
                if claimed.is_empty() {
                    idle += 1;
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    continue;
                }
                idle = 0;
                let key_of =
                    |c: &rdq_engine::Claimed| rdq_engine::flow::key_of(&c.envelope).to_owned();
                {
                    // Counted up after the store handed them out and down
                    // before a settle frees the slot: never above the
                    // store's own count.
                    let mut now = in_flight.lock().unwrap();
                    let mut peak = peak.lock().unwrap();
                    for c in &claimed {
                        let n = now.entry(key_of(c)).or_default();
                        *n += 1;
                        let p = peak.entry(key_of(c)).or_default();
                        *p = (*p).max(*n);
                    }
                }
                // The work: long enough that the limit binds.
                tokio::time::sleep(Duration::from_millis(1)).await;
                for c in claimed {
                    *in_flight.lock().unwrap().get_mut(&key_of(&c)).unwrap() -= 1;
                    ran.lock().unwrap().push(c.envelope.id);
                    engine
                        .settle(&c.envelope, c.token, Settlement::Success)
                        .await
                        .expect("settle");
                    done.fetch_add(1, SeqCst);
                }
            }
        });
    }
    while let Some(joined) = claimers.join_next().await {
        joined.expect("a claimer panicked");
    }
    let elapsed = started.elapsed();

    let ran = ran.lock().unwrap().clone();
    let unique: HashSet<TaskId> = ran.iter().copied().collect();
    assert_eq!(unique.len(), ran.len(), "no task ran twice");
    assert_eq!(unique, submitted, "every task ran");
    let peak = peak.lock().unwrap().clone();
    for key in keys.iter().copied().chain([""]) {
        let p = peak.get(key).copied().unwrap_or(0);
        assert!(
            (1..=LIMIT).contains(&p),
            "key {key:?} peaked at {p} in flight under a limit of {LIMIT}"
        );
    }
    let stats = total(&stores);
    let rate = stats.conflicts as f64 / stats.claims.max(1) as f64;
    eprintln!(
        "{total_tasks} tasks in {elapsed:?} on 3 nodes, 6 claimers: {} flow claims, \
         {} conflicts ({:.1} retries per 100 claims), {} gave up",
        stats.claims,
        stats.conflicts,
        rate * 100.0,
        stats.gave_up
    );
    assert!(stats.claims > 0);
    for c in engines[2].counts().await.expect("counts") {
        assert_eq!(
            (c.pending, c.in_flight, c.succeeded),
            (0, 0, total_tasks as u64)
        );
    }
    assert_eq!(
        flow_index_keys(&stores[0]).await,
        Vec::<String>::new(),
        "the per-key indexes are empty once every task ended"
    );
    drop(engines);
}

/// A quiet key behind another key's backlog of 10,000 is found at once,
/// and a claim does not walk the backlog to find it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_key_behind_a_large_backlog_is_found_at_once() {
    let policy = policy(json!({"fairness": "weighted", "key_concurrency": 100}));
    let (_stores, engines) = nodes(1, &policy).await;
    let engine = &engines[0];
    submit(engine, Some("loud"), 10_000).await;
    let quiet: HashSet<TaskId> = submit(engine, Some("quiet"), 3).await.into_iter().collect();
    let started = Instant::now();
    let mut order = Vec::new();
    for _ in 0..40 {
        let claimed = engine.claim(QUEUE, 1, None).await.expect("claim");
        assert_eq!(claimed.len(), 1, "work is due");
        order.push(quiet.contains(&claimed[0].envelope.id));
        engine
            .settle(&claimed[0].envelope, claimed[0].token, Settlement::Success)
            .await
            .expect("settle");
    }
    let per_claim = started.elapsed() / 40;
    let quiet_at: Vec<usize> = order
        .iter()
        .enumerate()
        .filter(|(_, q)| **q)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        quiet_at,
        vec![1, 3, 5],
        "the quiet key alternates with the loud one"
    );
    eprintln!("claim + settle of one task behind a backlog of 10,000: {per_claim:?}");
    assert!(
        per_claim < Duration::from_millis(50),
        "a claim walks no backlog: {per_claim:?} per claim"
    );

    // Tasks without a key behind the keyed backlog are found by walking
    // the ready set past it: found all the same, at a cost the docs state.
    let unkeyed: HashSet<TaskId> = submit(engine, None, 2).await.into_iter().collect();
    let started = Instant::now();
    let mut found = 0;
    for _ in 0..6 {
        for c in engine.claim(QUEUE, 1, None).await.expect("claim") {
            found += usize::from(unkeyed.contains(&c.envelope.id));
            engine
                .settle(&c.envelope, c.token, Settlement::Success)
                .await
                .expect("settle");
        }
    }
    assert_eq!(found, 2, "tasks without a key take their turns");
    eprintln!(
        "claim + settle with tasks without a key behind the backlog: {:?}",
        started.elapsed() / 6
    );
}

/// IN_FLIGHT counts per key are kept by every claim, with or without flow
/// limits: tasks claimed while the queue had none still take their slots
/// when a limit arrives, and give them back when they settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_taken_without_a_limit_count_once_one_is_set() {
    let plain = policy(json!({}));
    let (stores, engines) = nodes(2, &plain).await;
    submit(&engines[0], Some("a"), 6).await;
    let held = engines[0].claim(QUEUE, 3, None).await.expect("claim");
    assert_eq!(held.len(), 3);
    engines[0]
        .set_policy(QUEUE, &policy(json!({"key_concurrency": 3})))
        .await
        .expect("set_policy");
    // The other node reads the new policy from the store.
    let limited = policy(json!({"key_concurrency": 3}));
    let other = Engine::new(Arc::new(stores[1].clone()), Arc::new(SystemClock))
        .with_fallback_policy(limited);
    assert!(
        other.claim(QUEUE, 5, None).await.expect("claim").is_empty(),
        "three in flight, claimed with no limit, fill a limit of three"
    );
    let status = other.flow_status(QUEUE).await.expect("flow status");
    assert_eq!(status.in_flight, 3);
    assert_eq!(status.keys[0].key, "a");
    assert_eq!(status.keys[0].in_flight, 3);
    for c in &held[..2] {
        engines[0]
            .settle(&c.envelope, c.token, Settlement::Success)
            .await
            .expect("settle");
    }
    assert_eq!(
        other.claim(QUEUE, 5, None).await.expect("claim").len(),
        2,
        "two settles gave two slots back"
    );
}
