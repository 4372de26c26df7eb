//! Sources' cursors on Redis beyond the compliance kit: a cursor kept in
//! its queue's slot follows the queue an ingest names, a move cut short is
//! finished by the next ingest, racing ingests into two queues have one
//! winner, and no key is left behind (`src/sources.rs`), against the Redis
//! on this machine (`RDQ_TEST_REDIS`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::join_all;
use rdq_engine::{
    Engine, IngestOutcome, IngestRequest, QueuePolicy, SOURCE_HEADER, SourceCursor, SubmitRequest,
    Submitted, SystemClock,
};
use rdq_store_redis::RedisStore;

const SOURCE: &str = "orders";

async fn store_and_engine() -> (RedisStore, Engine) {
    let store = RedisStore::open_temporary(&common::url())
        .await
        .expect("a temporary Redis store");
    let engine = Engine::new(Arc::new(store.clone()), Arc::new(SystemClock))
        .with_fallback_policy(QueuePolicy::default());
    (store, engine)
}

async fn raw_conn() -> redis::aio::MultiplexedConnection {
    redis::Client::open(common::url())
        .expect("a client")
        .get_multiplexed_async_connection()
        .await
        .expect("a connection")
}

/// An ingest of records `from..to` of `partition` into `queue`.
async fn run_of(
    engine: &Engine,
    queue: &str,
    partition: &str,
    expected: Option<u64>,
    from: u64,
    to: u64,
) -> IngestRequest {
    let mut tasks = Vec::new();
    for offset in from..to {
        let locator = format!("kafka://test/{SOURCE}/{partition}/{offset}");
        let mut system_headers = BTreeMap::new();
        system_headers.insert(SOURCE_HEADER.to_owned(), locator.clone());
        tasks.push(
            engine
                .record_task(&SubmitRequest {
                    queue: queue.to_owned(),
                    handler_ref: "test.record".to_owned(),
                    payload: format!("record {offset}").into_bytes(),
                    payload_content_type: "text/plain".to_owned(),
                    system_headers,
                    idempotency_key: Some(locator),
                    ..SubmitRequest::default()
                })
                .await
                .expect("a record's task"),
        );
    }
    IngestRequest {
        source: SOURCE.to_owned(),
        partition: partition.to_owned(),
        queue: queue.to_owned(),
        expected,
        next: to,
        tasks,
        now_ms: 1_000 + i64::try_from(to).unwrap(),
    }
}

fn created(outcome: IngestOutcome) -> usize {
    match outcome {
        IngestOutcome::Ingested(results) => results
            .into_iter()
            .filter(|r| matches!(r, Ok(Submitted::Created(_))))
            .count(),
        other => panic!("expected the ingest to apply, got {other:?}"),
    }
}

async fn pending(engine: &Engine, queue: &str) -> u64 {
    engine
        .counts()
        .await
        .expect("counts")
        .into_iter()
        .find(|c| c.queue == queue)
        .map_or(0, |c| c.pending)
}

async fn cursors(engine: &Engine) -> Vec<(String, u64)> {
    engine
        .source_cursors(SOURCE)
        .await
        .expect("cursors")
        .into_iter()
        .map(|c| (c.partition, c.next))
        .collect()
}

/// Every key under the store's prefix.
async fn keys_under(prefix: &str) -> Vec<String> {
    let mut conn = raw_conn().await;
    let mut found: Vec<String> = Vec::new();
    for pattern in [format!("{prefix}:*"), format!("{{{prefix}:*")] {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut conn)
            .await
            .expect("KEYS");
        found.extend(keys);
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_follows_the_queue_its_ingest_names() {
    let (store, engine) = store_and_engine().await;
    let prefix = store.prefix().to_owned();
    let first = run_of(&engine, "src.a", "0", None, 0, 3).await;
    assert_eq!(created(engine.ingest(&first).await.expect("ingest")), 3);

    // The bridge now submits to another queue: the cursor comes along.
    let moved = run_of(&engine, "src.b", "0", Some(3), 3, 5).await;
    assert_eq!(created(engine.ingest(&moved).await.expect("ingest")), 2);
    assert_eq!(
        engine.source_cursors(SOURCE).await.expect("cursors"),
        vec![SourceCursor {
            partition: "0".into(),
            next: 5,
            updated_at_ms: 1_005,
        }]
    );
    // A bridge still on the old queue, from the old cursor, changes nothing.
    let stale = run_of(&engine, "src.a", "0", Some(3), 3, 9).await;
    assert_eq!(
        engine.ingest(&stale).await.expect("ingest"),
        IngestOutcome::Moved { current: Some(5) }
    );
    let never = run_of(&engine, "src.b", "0", None, 0, 9).await;
    assert_eq!(
        engine.ingest(&never).await.expect("ingest"),
        IngestOutcome::Moved { current: Some(5) }
    );
    // From the cursor it goes on, in either queue.
    let on = run_of(&engine, "src.b", "0", Some(5), 5, 7).await;
    assert_eq!(created(engine.ingest(&on).await.expect("ingest")), 2);
    let back = run_of(&engine, "src.a", "0", Some(7), 7, 8).await;
    assert_eq!(created(engine.ingest(&back).await.expect("ingest")), 1);
    // Another partition starts in its own first queue.
    let other = run_of(&engine, "src.b", "1", None, 40, 42).await;
    assert_eq!(created(engine.ingest(&other).await.expect("ingest")), 2);
    assert_eq!(
        cursors(&engine).await,
        vec![("0".into(), 8), ("1".into(), 42)]
    );
    assert_eq!(pending(&engine, "src.a").await, 4);
    assert_eq!(pending(&engine, "src.b").await, 6);

    // A reset removes both cursors; partition 0 starts again wherever.
    assert_eq!(
        engine.delete_source_cursors(SOURCE).await.expect("reset"),
        2
    );
    assert!(cursors(&engine).await.is_empty());
    let again = run_of(&engine, "src.b", "0", None, 8, 10).await;
    assert_eq!(created(engine.ingest(&again).await.expect("ingest")), 2);
    assert_eq!(cursors(&engine).await, vec![("0".into(), 10)]);
    let stale = run_of(&engine, "src.a", "0", None, 8, 10).await;
    assert_eq!(
        engine.ingest(&stale).await.expect("ingest"),
        IngestOutcome::Moved { current: Some(10) }
    );

    drop(engine);
    drop(store);
    assert_eq!(
        keys_under(&prefix).await,
        Vec::<String>::new(),
        "nothing left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_cut_short_is_finished_by_the_next_ingest() {
    let (store, engine) = store_and_engine().await;
    let prefix = store.prefix().to_owned();
    let first = run_of(&engine, "src.a", "0", None, 0, 3).await;
    assert_eq!(created(engine.ingest(&first).await.expect("ingest")), 3);

    // An ingest into src.b registered its queue and marked the cursor
    // moved there, then stopped before writing it into src.b's slot.
    let mut conn = raw_conn().await;
    let _: () = redis::cmd("HSET")
        .arg(format!("{prefix}:src:{SOURCE}"))
        .arg("q:src.b")
        .arg("1")
        .query_async(&mut conn)
        .await
        .expect("HSET");
    let _: () = redis::cmd("HSET")
        .arg(format!("{{{prefix}:src.a}}:src:{SOURCE}"))
        .arg("0")
        .arg("M,0,3,1003,src.b")
        .query_async(&mut conn)
        .await
        .expect("HSET");
    assert_eq!(
        cursors(&engine).await,
        vec![("0".into(), 3)],
        "a cursor on its way reads as where it was"
    );
    // An ingest into the old queue finishes the move, brings the cursor
    // back and applies from it.
    let next = run_of(&engine, "src.a", "0", Some(3), 3, 4).await;
    assert_eq!(created(engine.ingest(&next).await.expect("ingest")), 1);
    let stale = run_of(&engine, "src.b", "0", Some(3), 3, 6).await;
    assert_eq!(
        engine.ingest(&stale).await.expect("ingest"),
        IngestOutcome::Moved { current: Some(4) }
    );
    assert_eq!(cursors(&engine).await, vec![("0".into(), 4)]);
    assert_eq!(pending(&engine, "src.a").await, 4);
    assert_eq!(pending(&engine, "src.b").await, 0);
    drop(engine);
    drop(store);
    assert!(keys_under(&prefix).await.is_empty(), "nothing left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_ingests_into_two_queues_have_one_winner() {
    let (store, engine) = store_and_engine().await;
    let prefix = store.prefix().to_owned();
    let first = run_of(&engine, "src.a", "0", None, 0, 1).await;
    assert_eq!(created(engine.ingest(&first).await.expect("ingest")), 1);
    let mut runs = Vec::new();
    for bridge in 0..8u64 {
        let queue = if bridge % 2 == 0 { "src.a" } else { "src.b" };
        let from = 100 * (bridge + 1);
        runs.push(run_of(&engine, queue, "0", Some(1), from, from + 3).await);
    }
    let outcomes = join_all(runs.iter().map(|run| engine.ingest(run))).await;
    let mut winners = Vec::new();
    for (run, outcome) in runs.iter().zip(outcomes) {
        match outcome.expect("an ingest") {
            IngestOutcome::Ingested(results) => {
                assert!(results.iter().all(Result::is_ok));
                winners.push(run.next);
            }
            IngestOutcome::Moved { current } => {
                assert!(current.is_some_and(|c| c != 1), "moved: {current:?}");
            }
        }
    }
    assert_eq!(winners.len(), 1, "exactly one racing ingest applies");
    assert_eq!(cursors(&engine).await, vec![("0".into(), winners[0])]);
    assert_eq!(
        pending(&engine, "src.a").await + pending(&engine, "src.b").await,
        4,
        "only the winner's tasks are stored"
    );
    drop(engine);
    drop(store);
    assert!(keys_under(&prefix).await.is_empty(), "nothing left behind");
}
