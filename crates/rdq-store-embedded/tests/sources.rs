//! Sources' cursors in the embedded store, beyond the shared compliance
//! checks: cursors and their tasks survive a reopen, a version-7 store
//! gains the cursor table, a group that cannot commit moves no cursor and
//! stores no task, a DEAD task of an ingest is counted in the DLQ, and a
//! position past `i64::MAX` reads back unchanged.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use rdq_engine::store::admin::{TaskCounts, TaskLookup};
use rdq_engine::{
    ClaimRequest, IngestOutcome, IngestRequest, NewTask, SourceCursor, SourceCursors, Store,
    Submitted, machine,
};
use rdq_envelope::{Envelope, Status, Timestamp, dead_reasons};
use rdq_store_embedded::{DB_FILE_NAME, EmbeddedOptions, EmbeddedStore, SCHEMA_VERSION};

fn t(ms: i64) -> Timestamp {
    Timestamp::from_unix_ms(1_800_000_000_000 + ms).unwrap()
}

/// Record `offset`'s task, keyed by its locator.
fn record(offset: u64) -> NewTask {
    let env = Envelope::new("q", "handler", b"{\"n\":1}", "application/json", t(0));
    NewTask {
        envelope: env,
        idempotency_key: Some(format!("kafka://test/orders/0/{offset}")),
        unique: None,
    }
}

/// An ingest of records `from..to` of `orders`/`0` from `expected`.
fn run(expected: Option<u64>, from: u64, to: u64, now: Timestamp) -> IngestRequest {
    IngestRequest {
        source: "orders".into(),
        partition: "0".into(),
        queue: "q".into(),
        expected,
        next: to,
        tasks: (from..to).map(record).collect(),
        now_ms: now.unix_ms(),
    }
}

fn applied(outcome: IngestOutcome) -> Vec<Envelope> {
    match outcome {
        IngestOutcome::Ingested(results) => results
            .into_iter()
            .map(|r| r.unwrap().envelope().clone())
            .collect(),
        IngestOutcome::Moved { current } => panic!("the cursor had moved to {current:?}"),
    }
}

#[tokio::test]
async fn cursors_and_their_tasks_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let ingested = {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        applied(store.ingest(&run(None, 0, 3, t(5))).await.unwrap())
    };
    let store = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(
        store.source_cursors("orders").await.unwrap(),
        vec![SourceCursor {
            partition: "0".into(),
            next: 3,
            updated_at_ms: t(5).unix_ms(),
        }]
    );
    for env in &ingested {
        assert_eq!(store.get(env.id).await.unwrap().encode(), env.encode());
    }
    assert_eq!(
        store.ingest(&run(None, 0, 3, t(6))).await.unwrap(),
        IngestOutcome::Moved { current: Some(3) }
    );
    store.verify().await.unwrap();
}

#[tokio::test]
async fn a_version_7_store_gains_the_cursor_table() {
    let dir = tempfile::tempdir().unwrap();
    let old = {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let submitted = store.submit(vec![record(99)]).await.pop().unwrap();
        submitted.unwrap().envelope().clone()
    };
    // Make it a version-7 file: no cursor table.
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
        conn.execute_batch(
            "DROP TABLE source_cursors;
             PRAGMA user_version = 7;",
        )
        .unwrap();
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let version: i32 = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME))
        .unwrap()
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert_eq!(SCHEMA_VERSION, 8);
    assert!(store.source_cursors("orders").await.unwrap().is_empty());
    applied(store.ingest(&run(None, 0, 2, t(1))).await.unwrap());
    assert_eq!(store.source_cursors("orders").await.unwrap()[0].next, 2);
    assert_eq!(store.get(old.id).await.unwrap().encode(), old.encode());
    store.verify().await.unwrap();
}

#[tokio::test]
async fn a_group_that_cannot_commit_moves_no_cursor_and_stores_no_task() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = EmbeddedOptions::default();
    options.busy_timeout = std::time::Duration::from_millis(50);
    let store = EmbeddedStore::open_with(dir.path(), options).unwrap();
    // Another process holds the write lock.
    let other = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let refused = store.ingest(&run(None, 0, 3, t(1))).await.unwrap_err();
    assert_eq!(refused.code(), "STORE_UNAVAILABLE");
    assert_eq!(
        store
            .delete_source_cursors("orders")
            .await
            .unwrap_err()
            .code(),
        "STORE_UNAVAILABLE"
    );
    other.execute_batch("ROLLBACK").unwrap();
    drop(other);
    assert!(store.source_cursors("orders").await.unwrap().is_empty());
    assert!(store.counts().await.unwrap().iter().all(|c| c.pending == 0));
    // Nothing was stored: the same run applies from no cursor.
    let created = store.ingest(&run(None, 0, 3, t(2))).await.unwrap();
    let IngestOutcome::Ingested(results) = created else {
        panic!("the retried ingest did not apply: {created:?}");
    };
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Ok(Submitted::Created(_))))
    );
    store.verify().await.unwrap();
}

#[tokio::test]
async fn a_dead_task_of_an_ingest_is_in_the_dlq_and_never_claimed() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let mut request = run(None, 0, 3, t(1));
    let refused = machine::dead_on_arrival(
        &request.tasks[1].envelope,
        dead_reasons::UNDECODABLE_SOURCE,
        "source",
        t(1),
        "too large",
    );
    request.tasks[1].envelope = refused.clone();
    let stored = applied(store.ingest(&request).await.unwrap());
    assert_eq!(stored[1].status, Status::Dead);
    assert_eq!(
        store.get(refused.id).await.unwrap().encode(),
        refused.encode()
    );
    let counts = store.counts().await.unwrap();
    assert_eq!((counts[0].pending, counts[0].dead), (2, 1));
    let claimed = store
        .claim(&ClaimRequest::new("q", 10, 30_000, t(2)))
        .await
        .unwrap();
    let ids: Vec<_> = claimed.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), 2);
    assert!(!ids.contains(&refused.id));
    store.verify().await.unwrap();
}

#[tokio::test]
async fn a_position_past_i64_max_reads_back_unchanged() {
    let (_dir, store) = {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        (dir, store)
    };
    let far = u64::MAX - 1;
    let mut request = run(None, 0, 1, t(1));
    request.next = far;
    applied(store.ingest(&request).await.unwrap());
    assert_eq!(store.source_cursors("orders").await.unwrap()[0].next, far);
    // A run that does not move the cursor applies from it.
    let mut same = run(Some(far), 0, 0, t(2));
    same.next = far;
    applied(store.ingest(&same).await.unwrap());
    assert_eq!(
        store.ingest(&run(Some(far - 1), 0, 0, t(3))).await.unwrap(),
        IngestOutcome::Moved { current: Some(far) }
    );
    assert_eq!(store.delete_source_cursors("orders").await.unwrap(), 1);
    assert_eq!(store.delete_source_cursors("orders").await.unwrap(), 0);
}
