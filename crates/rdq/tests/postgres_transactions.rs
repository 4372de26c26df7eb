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

mod sdk {
    use std::time::Duration;

    use rdq::prelude::*;
    use rdq_engine::{Engine, ListQuery, SystemClock};
    use rdq_envelope::Status;
    use rdq_store_postgres::{PostgresStore, complete_in_sqlx};

    use super::URL;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
    #[queues(prefix = "shop")]
    enum Shop {
        Receipts,
    }

    #[derive(Debug, Clone, Serialize, Deserialize, Job)]
    #[job(queue = Shop::Receipts)]
    struct Receipt {
        order: u32,
    }

    /// A handler whose work is a row: it writes the row and completes its
    /// task in one transaction, and the worker reports nothing more.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_handler_completes_its_task_in_its_own_transaction() {
        let store = PostgresStore::open_temporary(URL).await.unwrap();
        let schema = store.schema().to_owned();
        let engine = Engine::new(
            std::sync::Arc::new(store.clone()),
            std::sync::Arc::new(SystemClock),
        );
        let pool = sqlx::PgPool::connect(URL).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {schema}.sent (task text PRIMARY KEY, order_no int)"
        )))
        .execute(&pool)
        .await
        .unwrap();
        let producer = Producer::<Shop>::new(engine.clone());
        for order in 1..=3 {
            producer.enqueue(&Receipt { order }).await.unwrap();
        }
        let (handler_pool, handler_schema) = (pool.clone(), schema.clone());
        let worker = Worker::<Shop>::builder(engine.clone())
            .poll_interval(Duration::from_millis(10))
            .handler_fn(move |job: Receipt, ctx: JobContext| {
                let (pool, schema) = (handler_pool.clone(), handler_schema.clone());
                async move {
                    let failed = |e: &dyn std::fmt::Display| JobError::new("db", e.to_string());
                    let token = ctx.lease_token().await.map_err(|e| failed(&e))?;
                    let mut tx = pool.begin().await.map_err(|e| failed(&e))?;
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "INSERT INTO {schema}.sent VALUES ($1, $2)"
                    )))
                    .bind(ctx.task_id.to_string())
                    .bind(i32::try_from(job.order).unwrap())
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| failed(&e))?;
                    complete_in_sqlx(&mut *tx, &schema, ctx.task_id, &token)
                        .await
                        .map_err(|e| failed(&e))?;
                    tx.commit().await.map_err(|e| failed(&e))?;
                    ctx.settled_elsewhere();
                    Ok::<(), JobError>(())
                }
            })
            .build()
            .unwrap()
            .start();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let tasks = loop {
            let page = engine
                .list(&ListQuery {
                    queue: "shop.receipts".into(),
                    limit: 10,
                    ..ListQuery::default()
                })
                .await
                .unwrap();
            if page
                .items
                .iter()
                .filter(|t| t.status == Status::Succeeded)
                .count()
                == 3
            {
                break page.items;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not done: {:?}",
                page.items
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let report = worker.shutdown(Duration::from_secs(5)).await.unwrap();
        // The worker reported nothing: a settle of its own would have been
        // refused (LEASE_LOST), the task being SUCCEEDED already.
        assert_eq!(
            (report.claimed, report.settled, report.settle_errors),
            (3, 0, 0),
            "{report:?}"
        );
        for task in &tasks {
            assert_eq!(task.attempts.len(), 1, "ran once: {task:?}");
        }
        let sent: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {schema}.sent"
        )))
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(sent, 3);
        pool.close().await;
    }
}
