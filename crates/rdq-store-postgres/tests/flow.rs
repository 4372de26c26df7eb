//! Flow control across nodes: three store instances (each with its own
//! connection pool, as three `rdq serve` nodes have) share one schema, and
//! their claimers race. The per-key limit and the queue's rate hold for the
//! nodes together, not per node. Rows written before schema version 3 get
//! their flow key when the schema is upgraded, and a queue's rows follow its
//! policy between the two claim indexes (with and without a flow key).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdq_engine::{
    Backoff, ClaimRequest, Engine, QueuePolicy, Settlement, SubmitRequest, SystemClock,
};
use rdq_envelope::TaskId;
use rdq_store_postgres::PostgresStore;
use serde_json::json;
use tokio_postgres::NoTls;

const QUEUE: &str = "flow.nodes";
const NODES: usize = 3;

fn policy(flow: serde_json::Value) -> QueuePolicy {
    QueuePolicy {
        max_attempts: 3,
        backoff: Backoff::None,
        lease_ms: 60_000,
        ..QueuePolicy::from_json(json!({ "flow": flow })).unwrap()
    }
}

fn keyed(key: Option<&str>) -> SubmitRequest {
    SubmitRequest {
        queue: QUEUE.into(),
        handler_ref: "flow.noop".into(),
        payload: br#"{"n":1}"#.to_vec(),
        payload_content_type: "application/json".into(),
        flow_key: key.map(str::to_owned),
        ..SubmitRequest::default()
    }
}

fn key_of(env: &rdq_envelope::Envelope) -> String {
    rdq_engine::flow::key_of(env).to_owned()
}

/// Three nodes on one fresh schema: the first owns it (dropped with it),
/// the others open it by name. Each node is an engine on its own store.
async fn nodes(flow: serde_json::Value) -> (Vec<PostgresStore>, Vec<Engine>) {
    let owner = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let url = common::url_with_schema(owner.schema());
    let mut stores = vec![owner];
    for _ in 1..NODES {
        stores.push(PostgresStore::open(&url).await.unwrap());
    }
    let engines: Vec<Engine> = stores
        .iter()
        .map(|s| Engine::new(Arc::new(s.clone()), Arc::new(SystemClock)))
        .collect();
    engines[0].set_policy(QUEUE, &policy(flow)).await.unwrap();
    (stores, engines)
}

async fn submit(engine: &Engine, key: Option<&str>, n: usize) -> Vec<TaskId> {
    let results = engine.submit_many(vec![keyed(key); n]).await;
    results
        .into_iter()
        .map(|r| r.unwrap().envelope().id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn key_concurrency_holds_across_nodes() {
    const LIMIT: u64 = 2;
    const PER_KEY: usize = 25;
    let (stores, engines) = nodes(json!({"key_concurrency": LIMIT, "fairness": "weighted"})).await;
    let keys = ["acme", "globex", "initech", "umbrella"];
    let mut submitted = HashSet::new();
    for key in keys {
        submitted.extend(submit(&engines[0], Some(key), PER_KEY).await);
    }
    let total = submitted.len();
    // Counted up after a store handed a task out and down before its
    // settle frees the slot: never more than the store's own count.
    let in_flight: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let peak: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let ran: Arc<Mutex<Vec<TaskId>>> = Arc::default();
    let done = Arc::new(AtomicUsize::new(0));
    let mut claimers = Vec::new();
    for i in 0..2 * NODES {
        let engine = engines[i % NODES].clone();
        let (in_flight, peak, ran, done) =
            (in_flight.clone(), peak.clone(), ran.clone(), done.clone());
        claimers.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while done.load(SeqCst) < total {
                assert!(Instant::now() < deadline, "the claimers stalled");
                let claimed = engine.claim(QUEUE, 3, None).await.unwrap();
                if claimed.is_empty() {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
                {
                    let mut now = in_flight.lock().unwrap();
                    let mut peak = peak.lock().unwrap();
                    for c in &claimed {
                        let n = now.entry(key_of(&c.envelope)).or_default();
                        *n += 1;
                        let p = peak.entry(key_of(&c.envelope)).or_default();
                        *p = (*p).max(*n);
                    }
                    ran.lock()
                        .unwrap()
                        .extend(claimed.iter().map(|c| c.envelope.id));
                }
                // The handler's work: long enough for the other claimers
                // to try the same keys meanwhile.
                tokio::time::sleep(Duration::from_millis(3)).await;
                for c in claimed {
                    *in_flight
                        .lock()
                        .unwrap()
                        .get_mut(&key_of(&c.envelope))
                        .unwrap() -= 1;
                    engine
                        .settle(&c.envelope, c.token, Settlement::Success)
                        .await
                        .unwrap();
                    done.fetch_add(1, SeqCst);
                }
            }
        }));
    }
    for c in claimers {
        c.await.unwrap();
    }
    let ran = ran.lock().unwrap().clone();
    let once: HashSet<TaskId> = ran.iter().copied().collect();
    assert_eq!(ran.len(), total, "no task ran twice");
    assert_eq!(once, submitted, "every task ran");
    let peak = peak.lock().unwrap().clone();
    for key in keys {
        let p = peak.get(key).copied().unwrap_or(0);
        assert!(
            (1..=LIMIT).contains(&p),
            "key {key} peaked at {p} in flight across the nodes under a limit of {LIMIT}"
        );
    }
    assert!(
        peak.values().any(|&p| p == LIMIT),
        "the claimers overlapped: some key reached its limit ({peak:?})"
    );
    let status = engines[1].flow_status(QUEUE).await.unwrap();
    assert_eq!(status.in_flight, 0, "every slot came back");
    drop(engines);
    drop(stores);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_rate_holds_across_nodes() {
    const RATE: f64 = 40.0;
    const BURST: f64 = 4.0;
    const RUN: Duration = Duration::from_millis(1_500);
    let (stores, engines) = nodes(json!({"rate": {"per_second": RATE, "burst": 4}})).await;
    submit(&engines[0], None, 400).await;
    let lease_ms = 60_000;
    // The time each claim ran at (its lease end minus the lease), per task.
    let starts: Arc<Mutex<Vec<i64>>> = Arc::default();
    let stop = Instant::now() + RUN;
    let mut claimers = Vec::new();
    for i in 0..2 * NODES {
        let engine = engines[i % NODES].clone();
        let starts = starts.clone();
        claimers.push(tokio::spawn(async move {
            while Instant::now() < stop {
                let claimed = engine.claim(QUEUE, 5, Some(lease_ms)).await.unwrap();
                if claimed.is_empty() {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    continue;
                }
                for c in &claimed {
                    let at = c.envelope.lease_expires_at.unwrap().unix_ms() - lease_ms as i64;
                    starts.lock().unwrap().push(at);
                }
                for c in claimed {
                    engine
                        .settle(&c.envelope, c.token, Settlement::Success)
                        .await
                        .unwrap();
                }
            }
        }));
    }
    for c in claimers {
        c.await.unwrap();
    }
    let mut starts = starts.lock().unwrap().clone();
    starts.sort_unstable();
    assert!(!starts.is_empty());
    // A claim reads the clock before it waits for the queue's lock, so one
    // may be decided a few milliseconds after its reading: one start of
    // slack for that.
    for (i, &from) in starts.iter().enumerate() {
        for (j, &at) in starts.iter().enumerate().skip(i) {
            let started = (j - i + 1) as f64;
            let allowed = BURST + RATE * (at - from) as f64 / 1_000.0 + 1.0;
            assert!(
                started <= allowed,
                "{started} tasks started across the nodes within {} ms; the bucket allows {allowed}",
                at - from
            );
        }
    }
    let span = (starts[starts.len() - 1] - starts[0]) as f64 / 1_000.0;
    let expected = BURST + RATE * span;
    assert!(
        starts.len() as f64 >= 0.7 * expected,
        "{} started in {span} s; the rate allows {expected}",
        starts.len()
    );
    drop(engines);
    drop(stores);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_before_flow_keys_get_theirs_on_upgrade() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let schema = store.schema().to_owned();
    let engine = Engine::new(Arc::new(store.clone()), Arc::new(SystemClock));
    engine
        .set_policy(QUEUE, &policy(json!({"key_concurrency": 1})))
        .await
        .unwrap();
    let keyed_ids = submit(&engine, Some("tenant-7"), 3).await;
    let plain = submit(&engine, None, 1).await;
    // Back to the schema of version 2: no flow_key column, no ledgers (the
    // column's drop takes the indexes naming it, the claim index included).
    let (db, connection) = tokio_postgres::connect(&common::url(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    db.batch_execute(&format!(
        "ALTER TABLE {schema}.tasks DROP COLUMN flow_key;
         CREATE INDEX tasks_claim ON {schema}.tasks (queue, priority DESC, next_attempt_at, id)
             WHERE status = 0;
         DROP TABLE {schema}.flow_ledgers, {schema}.flow_queues;
         DELETE FROM {schema}.migrations WHERE version >= 3;"
    ))
    .await
    .unwrap();
    // A node of this version upgrades it.
    let node = PostgresStore::open(&common::url_with_schema(&schema))
        .await
        .unwrap();
    let rows = db
        .query(&format!("SELECT id, flow_key FROM {schema}.tasks"), &[])
        .await
        .unwrap();
    let keys: HashMap<u128, Option<String>> = rows
        .iter()
        .map(|r| (r.get::<_, uuid::Uuid>(0).as_u128(), r.get(1)))
        .collect();
    // The queue's stored policy has a flow limit: its rows keep their keys.
    for id in &keyed_ids {
        assert_eq!(keys[&id.as_u128()].as_deref(), Some("tenant-7"));
    }
    assert_eq!(keys[&plain[0].as_u128()].as_deref(), Some(""));
    // And the upgraded rows count under a per-key limit.
    let flow = policy(json!({"key_concurrency": 1})).flow;
    let now = engine.now();
    let claim = ClaimRequest::new(QUEUE, 10, 60_000, now).with_flow(flow);
    let claimed = rdq_engine::Store::claim(&node, &claim).await.unwrap();
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for env in &claimed {
        *per_key.entry(key_of(env)).or_default() += 1;
    }
    assert_eq!(per_key.get("tenant-7"), Some(&1), "{per_key:?}");
    assert_eq!(per_key.get(""), Some(&1), "{per_key:?}");
    let again = rdq_engine::Store::claim(&node, &claim).await.unwrap();
    assert!(again.is_empty(), "each key is at its limit: {again:?}");
    drop(node);
    drop(engine);
    drop(store);
}

/// Each row's `flow_key` column, by task id.
async fn stored_keys(db: &tokio_postgres::Client, schema: &str) -> HashMap<u128, Option<String>> {
    db.query(&format!("SELECT id, flow_key FROM {schema}.tasks"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, uuid::Uuid>(0).as_u128(), r.get(1)))
        .collect()
}

/// A queue without flow control keeps no flow key on its rows (one claim
/// index entry per PENDING task); storing a flow policy gives them theirs,
/// and storing one without takes them away. Rows written against the policy
/// a claim no longer follows (a submit that began before the policy was
/// stored, here written by hand) are moved by the next claim, and an
/// IN_FLIGHT row claimed before flow control counts under its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queues_rows_follow_its_policy_between_the_claim_indexes() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let schema = store.schema().to_owned();
    let engine = Engine::new(Arc::new(store.clone()), Arc::new(SystemClock));
    let (db, connection) = tokio_postgres::connect(&common::url(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);

    // No flow control: no keys stored, whatever the tasks carry.
    let busy = submit(&engine, Some("t1"), 1).await;
    let claimed = engine.claim(QUEUE, 1, None).await.unwrap();
    assert_eq!(claimed[0].envelope.id, busy[0]);
    let t1 = submit(&engine, Some("t1"), 3).await;
    let plain = submit(&engine, None, 2).await;
    let keys = stored_keys(&db, &schema).await;
    assert!(keys.values().all(Option::is_none), "{keys:?}");

    // Under flow control: the PENDING rows get their keys, new ones too.
    let flowed = policy(json!({"key_concurrency": 1}));
    engine.set_policy(QUEUE, &flowed).await.unwrap();
    let t2 = submit(&engine, Some("t2"), 2).await;
    let keys = stored_keys(&db, &schema).await;
    for id in t1.iter().chain(&t2) {
        assert!(
            keys[&id.as_u128()]
                .as_deref()
                .is_some_and(|k| k.starts_with('t'))
        );
    }
    for id in &plain {
        assert_eq!(keys[&id.as_u128()].as_deref(), Some(""));
    }
    assert_eq!(keys[&busy[0].as_u128()], None, "IN_FLIGHT rows keep theirs");
    // A submit that read the policy before it was stored wrote no key.
    db.execute(
        &format!("UPDATE {schema}.tasks SET flow_key = NULL WHERE id = $1"),
        &[&uuid::Uuid::from_u128(t2[0].as_u128())],
    )
    .await
    .unwrap();
    // One claim: t1 is at its limit through the task claimed before flow
    // control (counted by its envelope's key); '' and t2 take one each,
    // t2's first task adopted in the claim's transaction.
    let got: Vec<TaskId> = engine
        .claim(QUEUE, 10, None)
        .await
        .unwrap()
        .iter()
        .map(|c| c.envelope.id)
        .collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.contains(&t2[0]), "the stray row was adopted: {got:?}");
    assert!(got.contains(&plain[0]), "{got:?}");

    // Flow control removed: the PENDING rows lose their keys.
    engine.set_policy(QUEUE, &policy(json!({}))).await.unwrap();
    let keys = stored_keys(&db, &schema).await;
    for id in t1.iter().chain([&plain[1], &t2[1]]) {
        assert_eq!(keys[&id.as_u128()], None, "{keys:?}");
    }
    // A stray keyed row is moved by the next claim and claimed after it.
    db.execute(
        &format!("UPDATE {schema}.tasks SET flow_key = 'stray' WHERE id = $1"),
        &[&uuid::Uuid::from_u128(t1[0].as_u128())],
    )
    .await
    .unwrap();
    let mut rest: HashSet<TaskId> = HashSet::new();
    for _ in 0..2 {
        for c in engine.claim(QUEUE, 10, None).await.unwrap() {
            rest.insert(c.envelope.id);
        }
    }
    let expected: HashSet<TaskId> = t1.iter().chain([&plain[1], &t2[1]]).copied().collect();
    assert_eq!(rest, expected);
    drop(engine);
    drop(store);
}
