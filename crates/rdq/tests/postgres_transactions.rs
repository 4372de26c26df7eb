//! Transactional enqueue and complete on the transaction types a Rust
//! service holds (docs/stores/postgres.md, "Submitting inside your
//! transaction"): tokio-postgres is tested with the store; this is sqlx's
//! `Transaction<Postgres>`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use rdq_engine::{Engine, LeaseKey, SubmitRequest, SystemClock};
use rdq_envelope::Status;
use rdq_store_postgres::{PostgresStore, complete_in_sqlx, submit_in_sqlx};

const URL: &str = "postgres://postgres@127.0.0.1:5432/test";

fn request() -> SubmitRequest {
    SubmitRequest {
        queue: "receipts".into(),
        handler_ref: "send-receipt".into(),
        payload: br#"{"order":42}"#.to_vec(),
        payload_content_type: "application/json".into(),
        ..SubmitRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqlx_transaction_submits_and_completes_with_its_own_writes() {
    let store = PostgresStore::open_temporary(URL).await.unwrap();
    let schema = store.schema().to_owned();
    let engine = Engine::new(Arc::new(store.clone()), Arc::new(SystemClock));
    let pool = sqlx::PgPool::connect(URL).await.unwrap();

    let mut tx = pool.begin().await.unwrap();
    let gone = submit_in_sqlx(&mut *tx, &schema, &request()).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(engine.get(gone).await.unwrap_err().code(), "TASK_NOT_FOUND");

    let mut tx = pool.begin().await.unwrap();
    let id = submit_in_sqlx(&mut *tx, &schema, &request()).await.unwrap();
    tx.commit().await.unwrap();
    let claimed = engine.claim("receipts", 1, None).await.unwrap().remove(0);
    assert_eq!(claimed.envelope.id, id);

    let token = LeaseKey::of(&store)
        .await
        .unwrap()
        .format(id, claimed.token);
    let mut tx = pool.begin().await.unwrap();
    complete_in_sqlx(&mut *tx, &schema, id, &token)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(engine.get(id).await.unwrap().status, Status::Succeeded);
    let mut tx = pool.begin().await.unwrap();
    let err = complete_in_sqlx(&mut *tx, &schema, id, &token)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "LEASE_LOST");
    tx.rollback().await.unwrap();

    let mut bad = request();
    bad.queue = "Receipts".into();
    let err = submit_in_sqlx(&pool, &schema, &bad).await.unwrap_err();
    assert_eq!(err.code(), "INVALID_QUEUE_NAME", "{err}");
    bad = request();
    bad.headers.insert("rdq.by".into(), "me".into());
    let err = submit_in_sqlx(&pool, &schema, &bad).await.unwrap_err();
    assert_eq!(err.code(), "RESERVED_HEADER", "{err}");
    pool.close().await;
}
