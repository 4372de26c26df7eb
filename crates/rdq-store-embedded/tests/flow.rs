//! Flow control in the embedded store, beyond the shared compliance checks:
//! the ledger is stored with the tasks (a reopen keeps buckets and
//! throttles), claims in one group see each other, a queue that comes under
//! flow control keeps its tasks without a key, and a version-3 store gets
//! its tasks' flow keys on upgrade.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use rdq_engine::flow::FLOW_KEY_HEADER;
use rdq_engine::machine::{self, LeaseToken};
use rdq_engine::store::admin::TaskLookup;
use rdq_engine::{ClaimRequest, FlowPolicy, LeasedUpdate, NewTask, QueuePolicy, Store};
use rdq_envelope::{Envelope, Timestamp};
use rdq_store_embedded::{DB_FILE_NAME, EmbeddedStore};
use serde_json::json;

fn t(ms: i64) -> Timestamp {
    Timestamp::from_unix_ms(1_800_000_000_000 + ms).unwrap()
}

fn flow(doc: serde_json::Value) -> FlowPolicy {
    QueuePolicy::from_json(json!({ "flow": doc })).unwrap().flow
}

fn task(queue: &str, key: Option<&str>) -> NewTask {
    let mut env = Envelope::new(queue, "handler", b"{}", "application/json", t(0));
    if let Some(key) = key {
        env.headers.insert(FLOW_KEY_HEADER.into(), key.into());
    }
    NewTask {
        envelope: env,
        idempotency_key: None,
        unique: None,
    }
}

async fn submit(store: &EmbeddedStore, queue: &str, key: Option<&str>, n: usize) {
    for r in store
        .submit((0..n).map(|_| task(queue, key)).collect())
        .await
    {
        r.unwrap();
    }
}

async fn claim(
    store: &EmbeddedStore,
    queue: &str,
    max: usize,
    policy: &FlowPolicy,
    now: Timestamp,
) -> Vec<Envelope> {
    store
        .claim(&ClaimRequest::new(queue, max, 60_000, now).with_flow(policy.clone()))
        .await
        .unwrap()
}

fn keys(claimed: &[Envelope]) -> Vec<String> {
    let mut keys: Vec<String> = claimed
        .iter()
        .map(|e| rdq_engine::flow::key_of(e).to_owned())
        .collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn the_ledger_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let policy = flow(json!({"key_rate": {"per_second": 1, "burst": 2}}));
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        submit(&store, "q", Some("a"), 4).await;
        submit(&store, "q", Some("b"), 4).await;
        let claimed = claim(&store, "q", 10, &policy, t(0)).await;
        assert_eq!(
            keys(&claimed),
            ["a", "a", "b", "b"],
            "each key's burst of two"
        );
        store.throttle("q", Some("b"), t(60_000)).await.unwrap();
        store.throttle("q", None, t(100)).await.unwrap();
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    store.verify().await.unwrap();
    let status = store.flow_status("q", &policy, t(0)).await.unwrap();
    assert_eq!(status.blocked_until, Some(t(100)), "the queue's throttle");
    assert_eq!(status.in_flight, 4);
    let a = status.keys.iter().find(|k| k.key == "a").expect("key a");
    assert_eq!(a.tokens, Some(0.0), "a's spent bucket");
    assert_eq!(a.in_flight, 2);
    let b = status.keys.iter().find(|k| k.key == "b").expect("key b");
    assert_eq!(b.blocked_until, Some(t(60_000)), "b's throttle");
    assert!(
        claim(&store, "q", 10, &policy, t(50)).await.is_empty(),
        "the queue is throttled"
    );
    assert!(
        claim(&store, "q", 10, &policy, t(500)).await.is_empty(),
        "a's bucket holds half a token, b is throttled"
    );
    assert_eq!(
        keys(&claim(&store, "q", 10, &policy, t(1_000)).await),
        ["a"]
    );
    let status = store.flow_status("q", &policy, t(1_000)).await.unwrap();
    assert!(status.throttled_claims >= 3, "{status:?}");
    store.verify().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_in_one_group_see_each_other() {
    let store = EmbeddedStore::open_temporary().unwrap();
    let policy = flow(json!({"key_concurrency": 1, "rate": {"per_second": 1, "burst": 3}}));
    submit(&store, "q", Some("a"), 10).await;
    submit(&store, "q", Some("b"), 10).await;
    // Sent at once, the claims share groups: each must see the ones before.
    let handles: Vec<_> = (0..16)
        .map(|_| {
            let (store, policy) = (store.clone(), policy.clone());
            tokio::spawn(async move { claim(&store, "q", 1, &policy, t(0)).await })
        })
        .collect();
    let mut claimed = Vec::new();
    for h in handles {
        claimed.extend(h.await.unwrap());
    }
    assert_eq!(keys(&claimed), ["a", "b"], "one per key, within the burst");
    let status = store.flow_status("q", &policy, t(0)).await.unwrap();
    assert!((status.tokens.unwrap() - 1.0).abs() < 1e-9, "{status:?}");
}

#[tokio::test]
async fn a_queue_coming_under_flow_control_keeps_its_tasks_without_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    submit(&store, "q", None, 3).await;
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
    let keyed = |conn: &rusqlite::Connection| -> i64 {
        conn.query_row(
            "SELECT count(*) FROM tasks WHERE flow_key IS NOT NULL",
            [],
            |row| row.get(0),
        )
        .unwrap()
    };
    assert_eq!(
        keyed(&conn),
        0,
        "a plain queue's tasks have no flow index entries"
    );
    let first = store
        .claim(&ClaimRequest::new("q", 1, 60_000, t(0)))
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    let policy = flow(json!({"key_concurrency": 1}));
    assert!(
        claim(&store, "q", 5, &policy, t(0)).await.is_empty(),
        "the task in flight holds the slot of the tasks without a key"
    );
    assert_eq!(keyed(&conn), 3, "the queue's tasks now store ''");
    submit(&store, "q", None, 1).await;
    submit(&store, "q", Some("k"), 1).await;
    assert_eq!(keyed(&conn), 5);
    store.verify().await.unwrap();
    // The first task's success frees the slot.
    let claimed = &first[0];
    let token = LeaseToken::current(claimed).unwrap();
    let done = machine::settle(
        claimed,
        token,
        &machine::Settlement::Success,
        &QueuePolicy::default(),
        t(1),
    )
    .unwrap();
    store
        .settle(vec![LeasedUpdate {
            envelope: done,
            expected: token,
        }])
        .await
        .pop()
        .unwrap()
        .unwrap();
    assert_eq!(keys(&claim(&store, "q", 5, &policy, t(2)).await), ["", "k"]);
    store.verify().await.unwrap();
}

#[tokio::test]
async fn a_version_3_store_gets_its_flow_keys() {
    let dir = tempfile::tempdir().unwrap();
    let keyed;
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        submit(&store, "q", Some("a"), 2).await;
        submit(&store, "q", None, 1).await;
        keyed = store
            .submit(vec![task("q", Some("b"))])
            .await
            .pop()
            .unwrap()
            .unwrap()
            .envelope()
            .clone();
    }
    // Make it a version-3 file: no flow key column, no flow indexes or ledgers.
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
        conn.execute_batch(
            "DROP INDEX tasks_flow; DROP INDEX tasks_busy; DROP TABLE flows;
             ALTER TABLE tasks DROP COLUMN flow_key;
             PRAGMA user_version = 3;",
        )
        .unwrap();
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    store.verify().await.unwrap();
    assert_eq!(store.get(keyed.id).await.unwrap().encode(), keyed.encode());
    let policy = flow(json!({"key_concurrency": 1}));
    assert_eq!(
        keys(&claim(&store, "q", 10, &policy, t(0)).await),
        ["", "a", "b"]
    );
    assert!(claim(&store, "q", 10, &policy, t(0)).await.is_empty());
    store.verify().await.unwrap();
}
