//! Sources' cursors on PostgreSQL beyond the compliance kit: ingests racing
//! from no cursor on two nodes, an ingest waiting on a cursor another
//! transaction holds (and what it finds once that one ends), a submit that
//! keeps its cursor, positions `bigint` cannot hold, and the upgrade of a
//! schema of version 9.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use rdq_engine::store::admin::{TaskCounts, TaskLookup};
use rdq_engine::{
    Engine, IngestOutcome, IngestRequest, ManualClock, QueuePolicy, SourceCursors, SubmitRequest,
    Submitted,
};
use rdq_envelope::Timestamp;
use rdq_store_postgres::{PostgresStore, SCHEMA_VERSION};
use tokio_postgres::NoTls;

const QUEUE: &str = "src";

fn engine_on(store: &PostgresStore) -> (Engine, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(
        Timestamp::from_unix_ms(1_784_556_202_117).unwrap(),
    ));
    let engine = Engine::new(Arc::new(store.clone()), clock.clone())
        .with_fallback_policy(QueuePolicy::default());
    (engine, clock)
}

async fn psql() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&common::url(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// An ingest of records `from..to` of `partition` of source `orders`.
async fn run_of(
    engine: &Engine,
    partition: &str,
    expected: Option<u64>,
    from: u64,
    to: u64,
) -> IngestRequest {
    let mut tasks = Vec::new();
    for offset in from..to {
        let locator = format!("kafka://test/orders/{partition}/{offset}");
        tasks.push(
            engine
                .record_task(&SubmitRequest {
                    queue: QUEUE.into(),
                    handler_ref: "test.record".into(),
                    payload: format!("record {offset}").into_bytes(),
                    payload_content_type: "text/plain".into(),
                    idempotency_key: Some(locator),
                    ..SubmitRequest::default()
                })
                .await
                .unwrap(),
        );
    }
    IngestRequest {
        source: "orders".into(),
        partition: partition.into(),
        queue: QUEUE.into(),
        expected,
        next: to,
        tasks,
        now_ms: engine.now().unix_ms(),
    }
}

/// The rows of `tasks` in `schema`.
async fn task_rows(db: &tokio_postgres::Client, schema: &str) -> i64 {
    db.query_one(&format!("SELECT count(*) FROM {schema}.tasks"), &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingests_racing_from_no_cursor_on_two_nodes_have_one_winner() {
    let a = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let b = PostgresStore::open(&common::url_with_schema(a.schema()))
        .await
        .unwrap();
    let (engine_a, _) = engine_on(&a);
    let (engine_b, _) = engine_on(&b);
    let db = psql().await;
    let mut stored = 0;
    for round in 0..6u64 {
        let partition = round.to_string();
        let mut runs = Vec::new();
        for bridge in 0..8u64 {
            let from = 100 * bridge;
            runs.push(run_of(&engine_a, &partition, None, from, from + 2 + bridge).await);
        }
        let outcomes = join_all(runs.iter().enumerate().map(|(i, run)| {
            let engine = if i % 2 == 0 { &engine_a } else { &engine_b };
            engine.ingest(run)
        }))
        .await;
        let mut won = Vec::new();
        let mut moved = Vec::new();
        for (run, outcome) in runs.iter().zip(outcomes) {
            match outcome.expect("an ingest is never an error") {
                IngestOutcome::Ingested(results) => {
                    assert!(
                        results
                            .iter()
                            .all(|r| matches!(r, Ok(Submitted::Created(_))))
                    );
                    won.push(run.next);
                }
                IngestOutcome::Moved { current } => moved.push(current),
            }
        }
        assert_eq!(won.len(), 1, "round {round}: one winner, not {won:?}");
        assert!(
            moved.iter().all(|c| *c == Some(won[0])),
            "round {round}: the others find the winner's cursor: {moved:?}"
        );
        let cursors = a.source_cursors("orders").await.unwrap();
        let mine = cursors.iter().find(|c| c.partition == partition).unwrap();
        assert_eq!(mine.next, won[0]);
        stored += i64::try_from(won[0] % 100).unwrap();
        assert_eq!(
            task_rows(&db, a.schema()).await,
            stored,
            "round {round}: only the winner's tasks are stored"
        );
    }
}

/// An ingest from cursor 5 while another transaction moves the cursor: it
/// waits for the row's lock, then finds the cursor moved and changes
/// nothing; a move back to 5 counts once committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingest_waits_for_a_held_cursor_and_compares_with_what_was_committed() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let schema = store.schema().to_owned();
    let (engine, _) = engine_on(&store);
    let first = run_of(&engine, "0", None, 0, 5).await;
    assert!(matches!(
        engine.ingest(&first).await.unwrap(),
        IngestOutcome::Ingested(_)
    ));
    let db = psql().await;
    db.batch_execute(&format!(
        "BEGIN; UPDATE {schema}.source_cursors SET next = 10 WHERE source = 'orders'"
    ))
    .await
    .unwrap();
    let run = run_of(&engine, "0", Some(5), 5, 8).await;
    let racing = {
        let engine = engine.clone();
        let run = run.clone();
        tokio::spawn(async move { engine.ingest(&run).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!racing.is_finished(), "the ingest waits for the row's lock");
    db.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        racing.await.unwrap().unwrap(),
        IngestOutcome::Moved { current: Some(10) }
    );
    assert_eq!(task_rows(&db, &schema).await, 5, "nothing was submitted");

    // Moved back to 5, not yet committed: the cursor is still 10, without
    // waiting; once committed, the ingest applies.
    db.batch_execute(&format!(
        "BEGIN; UPDATE {schema}.source_cursors SET next = 5 WHERE source = 'orders'"
    ))
    .await
    .unwrap();
    assert_eq!(
        engine.ingest(&run).await.unwrap(),
        IngestOutcome::Moved { current: Some(10) }
    );
    db.batch_execute("COMMIT").await.unwrap();
    assert!(matches!(
        engine.ingest(&run).await.unwrap(),
        IngestOutcome::Ingested(_)
    ));
    assert_eq!(task_rows(&db, &schema).await, 8);
    assert_eq!(store.source_cursors("orders").await.unwrap()[0].next, 8);
}

/// An ingest from no cursor while another transaction inserts the
/// partition's first one: it waits, and finds that cursor if it was
/// committed, or inserts its own if it was rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingest_from_no_cursor_waits_for_an_uncommitted_first_cursor() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let schema = store.schema().to_owned();
    let (engine, _) = engine_on(&store);
    let db = psql().await;
    for (partition, end, expected) in [
        ("0", "COMMIT", IngestOutcome::Moved { current: Some(3) }),
        ("1", "ROLLBACK", IngestOutcome::Ingested(Vec::new())),
    ] {
        db.batch_execute(&format!(
            "BEGIN; INSERT INTO {schema}.source_cursors (source, partition, next, updated_at)
             VALUES ('orders', '{partition}', 3, 0)"
        ))
        .await
        .unwrap();
        let run = run_of(&engine, partition, None, 0, 2).await;
        let racing = {
            let engine = engine.clone();
            tokio::spawn(async move { engine.ingest(&run).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!racing.is_finished(), "partition {partition}: it waits");
        db.batch_execute(end).await.unwrap();
        let outcome = racing.await.unwrap().unwrap();
        match expected {
            IngestOutcome::Ingested(_) => match outcome {
                IngestOutcome::Ingested(results) => assert_eq!(results.len(), 2),
                other => panic!("partition {partition}: expected it to apply, got {other:?}"),
            },
            moved => assert_eq!(outcome, moved, "partition {partition}"),
        }
    }
    let mut cursors: Vec<(String, u64)> = store
        .source_cursors("orders")
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.partition, c.next))
        .collect();
    cursors.sort();
    assert_eq!(cursors, vec![("0".into(), 3), ("1".into(), 2)]);
    assert_eq!(task_rows(&db, &schema).await, 2);
}

/// An ingest whose cursor stays put (a refused record's DEAD task) submits
/// its tasks and records when; the DEAD task is counted in the DLQ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingest_that_keeps_its_cursor_still_submits() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let (engine, clock) = engine_on(&store);
    engine
        .ingest(&run_of(&engine, "0", None, 0, 4).await)
        .await
        .unwrap();
    clock.advance_ms(5_000);
    let refusal = rdq_engine::EngineError::InvalidArgument("too large".into());
    let dead = engine
        .refused_record_task(rdq_engine::RefusedRecord {
            queue: QUEUE.into(),
            handler_ref: "test.record".into(),
            payload: b"bytes".to_vec(),
            full_len: 5,
            payload_content_type: "text/plain".into(),
            locator: "kafka://test/orders/0/3".into(),
            error: refusal,
        })
        .await
        .unwrap();
    let kept = IngestRequest {
        expected: Some(4),
        next: 4,
        tasks: vec![dead.clone()],
        ..run_of(&engine, "0", None, 0, 0).await
    };
    match engine.ingest(&kept).await.unwrap() {
        IngestOutcome::Ingested(results) => {
            // Record 3's key was taken by its PENDING task.
            assert!(matches!(results[0], Ok(Submitted::Existing(_))));
        }
        other => panic!("expected it to apply, got {other:?}"),
    }
    let fresh = rdq_engine::NewTask {
        idempotency_key: Some("kafka://test/orders/0/9".into()),
        ..dead
    };
    let kept = IngestRequest {
        tasks: vec![fresh.clone()],
        ..kept
    };
    match engine.ingest(&kept).await.unwrap() {
        IngestOutcome::Ingested(results) => {
            assert!(matches!(results[0], Ok(Submitted::Created(_))));
        }
        other => panic!("expected it to apply, got {other:?}"),
    }
    let cursor = &store.source_cursors("orders").await.unwrap()[0];
    assert_eq!(cursor.next, 4);
    assert_eq!(cursor.updated_at_ms, engine.now().unix_ms());
    assert_eq!(
        store.get(fresh.envelope.id).await.unwrap().status,
        rdq_envelope::Status::Dead
    );
    let counts = store.counts().await.unwrap();
    let counts = counts.iter().find(|c| c.queue == QUEUE).unwrap();
    assert_eq!((counts.pending, counts.dead), (4, 1));
    assert!(engine.claim(QUEUE, 10, None).await.unwrap().len() == 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_bigint_cannot_hold_are_refused() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let (engine, _) = engine_on(&store);
    let mut run = run_of(&engine, "0", None, 0, 1).await;
    run.next = u64::MAX;
    let err = engine.ingest(&run).await.unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
    assert!(store.source_cursors("orders").await.unwrap().is_empty());
    assert_eq!(task_rows(&psql().await, store.schema()).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_of_version_9_gets_source_cursors_in_place() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let schema = store.schema().to_owned();
    let (engine, _) = engine_on(&store);
    let kept = engine
        .submit(SubmitRequest {
            queue: QUEUE.into(),
            handler_ref: "test.record".into(),
            payload: b"before".to_vec(),
            payload_content_type: "text/plain".into(),
            ..SubmitRequest::default()
        })
        .await
        .unwrap()
        .envelope()
        .id;
    // Back to the schema of version 9.
    let db = psql().await;
    db.batch_execute(&format!(
        "DROP TABLE {schema}.source_cursors;
         DELETE FROM {schema}.migrations WHERE version >= 10;"
    ))
    .await
    .unwrap();
    let node = PostgresStore::from_url(&common::url_with_schema(&schema)).unwrap();
    assert_eq!(node.migrate().await.unwrap(), 9, "found at version 9");
    let versions: Vec<i32> = db
        .query(
            &format!("SELECT version FROM {schema}.migrations ORDER BY version"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    assert_eq!(node.get(kept).await.unwrap().id, kept, "the tasks stay");
    let (on_node, _) = engine_on(&node);
    let run = run_of(&on_node, "0", None, 0, 2).await;
    assert!(matches!(
        on_node.ingest(&run).await.unwrap(),
        IngestOutcome::Ingested(_)
    ));
    assert_eq!(node.source_cursors("orders").await.unwrap()[0].next, 2);
    assert_eq!(node.delete_source_cursors("orders").await.unwrap(), 1);
    drop(node);
}
