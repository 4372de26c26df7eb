//! What the PostgreSQL store promises beyond the shared compliance suite:
//! migrations and foreign schemas, claims read back byte for byte, wake-ups
//! and policy changes across nodes, an unreachable database, strings
//! `text` could not hold, and counts that fold without changing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use rdq_engine::store::admin::{ConfigStore, TaskCounts, TaskListing, TaskLookup};
use std::sync::Arc;
use std::time::Duration;

use rdq_engine::{
    Backoff, Engine, FailureKind, ListQuery, ManualClock, QueuePolicy, Settlement, Store,
    SubmitRequest, Submitted,
};
use rdq_envelope::{ErrorInfo, Status, Timestamp};
use rdq_store_postgres::{PostgresStore, SCHEMA_VERSION};
use tokio_postgres::NoTls;

fn request(queue: &str) -> SubmitRequest {
    SubmitRequest {
        queue: queue.into(),
        handler_ref: "store.noop".into(),
        payload: br#"{"n":1}"#.to_vec(),
        payload_content_type: "application/json".into(),
        ..SubmitRequest::default()
    }
}

fn engine_on(store: &PostgresStore) -> (Engine, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(
        Timestamp::from_unix_ms(1_784_556_202_117).unwrap(),
    ));
    let engine =
        Engine::new(Arc::new(store.clone()), clock.clone()).with_fallback_policy(QueuePolicy {
            backoff: Backoff::None,
            lease_ms: 1_000,
            ..QueuePolicy::default()
        });
    (engine, clock)
}

async fn psql() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&common::url(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_holding_foreign_tables_is_refused_and_left_unchanged() {
    let owner = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let foreign = format!("{}_foreign", owner.schema());
    let db = psql().await;
    db.batch_execute(&format!(
        "CREATE SCHEMA {foreign}; CREATE TABLE {foreign}.tasks (x int); \
         INSERT INTO {foreign}.tasks VALUES (42);"
    ))
    .await
    .unwrap();
    let err = PostgresStore::open(&common::url_with_schema(&foreign))
        .await
        .unwrap_err();
    let kept: i32 = db
        .query_one(&format!("SELECT x FROM {foreign}.tasks"), &[])
        .await
        .unwrap()
        .get(0);
    db.batch_execute(&format!("DROP SCHEMA {foreign} CASCADE"))
        .await
        .unwrap();
    assert_eq!(err.code(), "CORRUPT_STORE", "{err}");
    assert_eq!(kept, 42);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_written_by_a_newer_rdq_is_refused() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let db = psql().await;
    db.batch_execute(&format!(
        "INSERT INTO {}.migrations (version, description) VALUES (99, 'from the future')",
        store.schema()
    ))
    .await
    .unwrap();
    let err = PostgresStore::open(&common::url_with_schema(store.schema()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "CORRUPT_STORE");
    assert!(err.to_string().contains("upgrade rdq"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_apply_once_when_nodes_start_together() {
    let first = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let url = common::url_with_schema(first.schema());
    let mut starting = Vec::new();
    for _ in 0..4 {
        let url = url.clone();
        starting.push(tokio::spawn(async move {
            PostgresStore::from_url(&url).unwrap().migrate().await
        }));
    }
    for s in starting {
        assert_eq!(
            s.await.unwrap().unwrap(),
            SCHEMA_VERSION,
            "already migrated"
        );
    }
    let versions: i64 = psql()
        .await
        .query_one(
            &format!("SELECT count(*) FROM {}.migrations", first.schema()),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(versions, i64::from(SCHEMA_VERSION));
    // Room on each page for the row versions a claim and a settle write.
    let options: Vec<String> = psql()
        .await
        .query_one(
            "SELECT coalesce(c.reloptions, '{}') FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relname = 'tasks'",
            &[&first.schema()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(options.contains(&"fillfactor=50".to_owned()), "{options:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_task_reads_back_exactly_as_its_claimer_got_it() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let (engine, clock) = engine_on(&store);
    let mut keyed = request("claims");
    keyed.idempotency_key = Some("k".into());
    engine.submit(keyed.clone()).await.unwrap();
    let claimed = engine.claim("claims", 1, None).await.unwrap().remove(0);
    let bytes = claimed.envelope.encode_string();
    assert_eq!(
        store
            .get(claimed.envelope.id)
            .await
            .unwrap()
            .encode_string(),
        bytes
    );
    let listed = store
        .list(&ListQuery {
            queue: "claims".into(),
            status: Some(Status::InFlight),
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.items[0].encode_string(), bytes);
    match engine.submit(keyed).await.unwrap() {
        Submitted::Existing(env) => assert_eq!(env.encode_string(), bytes),
        other => panic!("expected the original, got {other:?}"),
    }
    clock.advance_ms(1_000);
    let lapsed = store.expired_leases(engine.now(), 10).await.unwrap();
    assert_eq!(lapsed[0].encode_string(), bytes);
    // The next write stores the whole envelope again.
    let extended = engine
        .extend_lease(&claimed.envelope, claimed.token, 5_000)
        .await;
    assert_eq!(
        extended.unwrap_err().code(),
        "LEASE_LOST",
        "a lapsed lease is the reaper's"
    );
    let reaped = engine.reap_expired(10).await.unwrap();
    assert_eq!(store.get(claimed.envelope.id).await.unwrap(), reaped[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_submitted_on_one_node_wakes_idle_workers_on_another() {
    let a = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let b = PostgresStore::open(&common::url_with_schema(a.schema()))
        .await
        .unwrap();
    // The listener starts with the store; give it a moment to be LISTENing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signal = a.work_signal().expect("the store announces work");
    let woken = signal.notified();
    tokio::pin!(woken);
    woken.as_mut().enable();
    let (engine_b, _) = engine_on(&b);
    engine_b.submit(request("wake")).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), woken)
        .await
        .expect("node A heard of node B's submit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_stored_on_one_node_reaches_the_others() {
    let a = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let b = PostgresStore::open(&common::url_with_schema(a.schema()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        a.get_config("shared").await.unwrap(),
        None,
        "now cached on A"
    );
    let paused = rdq_engine::QueueConfig::from(QueuePolicy {
        paused: true,
        ..QueuePolicy::default()
    });
    b.put_config("shared", &paused).await.unwrap();
    for _ in 0..100 {
        if a.get_config("shared").await.unwrap().as_ref() == Some(&paused) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("node A kept a stale policy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_answers_store_unavailable_never_ok() {
    let store = PostgresStore::from_url(
        "postgres://postgres@127.0.0.1:1/test?wait_ms=300&connect_timeout=1",
    )
    .unwrap();
    let (engine, _) = engine_on(&store);
    let started = std::time::Instant::now();
    let refused = engine.submit(request("nowhere")).await.unwrap_err();
    assert_eq!(refused.code(), "STORE_UNAVAILABLE", "{refused}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let results = store.settle(Vec::new()).await;
    assert!(results.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_error_types_with_nul_bytes_are_stored() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let (engine, _) = engine_on(&store);
    let mut keyed = request("nul");
    keyed.idempotency_key = Some("a\0b".into());
    let first = engine.submit(keyed.clone()).await.unwrap();
    assert!(matches!(first, Submitted::Created(_)));
    assert!(matches!(
        engine.submit(keyed).await.unwrap(),
        Submitted::Existing(_)
    ));
    let claimed = engine.claim("nul", 1, None).await.unwrap().remove(0);
    let dead = engine
        .settle(
            &claimed.envelope,
            claimed.token,
            Settlement::Failure {
                error: ErrorInfo::new("app.\0Odd", "a NUL in the type"),
                kind: FailureKind::Permanent,
            },
        )
        .await
        .unwrap();
    assert_eq!(store.get(dead.id).await.unwrap(), dead);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_fold_their_deltas_without_changing() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let (engine, _) = engine_on(&store);
    // Single submits: one count delta each, past the folding threshold.
    for _ in 0..1_100 {
        engine.submit(request("fold")).await.unwrap();
    }
    let before = store.counts().await.unwrap();
    let after = store.counts().await.unwrap();
    assert_eq!(before, after);
    assert_eq!(before[0].pending, 1_100);
    let rows: i64 = psql()
        .await
        .query_one(
            &format!("SELECT count(*) FROM {}.queue_counts", store.schema()),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(rows < 10, "{rows} delta rows left after a fold");
}
