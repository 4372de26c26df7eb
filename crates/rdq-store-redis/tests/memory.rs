//! Redis bytes per pending task (a measurement, not a check: run it by
//! hand with `cargo test -p rdq-store-redis --test memory -- --ignored
//! --nocapture`). Submits 50,000 tasks of a 100-byte JSON payload under a
//! temporary prefix and prints `used_memory` (INFO memory) after minus
//! before, per task.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;

use rdq_engine::{Engine, SubmitRequest, SystemClock};
use rdq_store_redis::RedisStore;

const TASKS: usize = 50_000;

async fn used_memory(url: &str) -> i64 {
    let client = redis::Client::open(url).expect("client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run by hand"]
async fn redis_bytes_per_pending_task() {
    let url = common::url();
    // Exactly 100 bytes of JSON.
    let mut payload = br#"{"order_id":123456,"note":""}"#.to_vec();
    let pad = 100 - payload.len();
    payload.splice(
        payload.len() - 2..payload.len() - 2,
        std::iter::repeat_n(b'x', pad),
    );
    assert_eq!(payload.len(), 100);
    let store = RedisStore::open_temporary(&url).await.expect("store");
    let engine = Engine::new(Arc::new(store), Arc::new(SystemClock));
    let request = SubmitRequest {
        queue: "memory.pending".to_owned(),
        handler_ref: "bench.noop".to_owned(),
        payload,
        payload_content_type: "application/json".to_owned(),
        ..SubmitRequest::default()
    };
    // The queue's fixed keys and the index shards exist before measuring.
    let first = engine.submit(request.clone()).await.expect("submit");
    let before = used_memory(&url).await;
    for _ in 0..TASKS / 500 {
        for r in engine.submit_many(vec![request.clone(); 500]).await {
            r.expect("submit");
        }
    }
    let after = used_memory(&url).await;
    let sample = first.envelope();
    eprintln!(
        "{TASKS} pending tasks: {} bytes of Redis memory, {} per task (envelope {} bytes)",
        after - before,
        (after - before) / TASKS as i64,
        sample.encode().len()
    );
}
