//! Faults and durability: a Redis restarted under load makes the store
//! wait and reconnect, never fail a submit it acknowledged, and never
//! acknowledge one it could not write.
//!
//! The test runs its own `redis-server` (append-only file, `fsync` on every
//! write) on a free loopback port in a temporary directory, kills it with
//! SIGKILL while eight producers submit, starts it again on the same port
//! and directory, and then finds every acknowledged task.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Server, free_port, have_redis_binaries};
use rdq_engine::{Engine, SubmitRequest, Submitted, SystemClock};
use rdq_envelope::{Status, TaskId};
use rdq_store_redis::RedisStore;

const QUEUE: &str = "durability.submits";
const PRODUCERS: usize = 8;

fn task() -> SubmitRequest {
    SubmitRequest {
        queue: QUEUE.to_owned(),
        handler_ref: "durability.noop".to_owned(),
        payload: br#"{"n":1}"#.to_vec(),
        payload_content_type: "application/json".to_owned(),
        ..SubmitRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_submits_survive_kill_9_of_redis_with_appendfsync_always() {
    if !have_redis_binaries() {
        eprintln!("skipping: redis-server and redis-cli are not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut server = Server::start(
        free_port(),
        dir.path(),
        &["--appendonly", "yes", "--appendfsync", "always"],
    );
    let store = RedisStore::from_url(&format!("{}/?prefix=durable&wait_ms=30000", server.url()))
        .expect("the store URL");
    let engine = Engine::new(Arc::new(store.clone()), Arc::new(SystemClock));

    let stop = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    for _ in 0..PRODUCERS {
        let (engine, stop) = (engine.clone(), Arc::clone(&stop));
        producers.push(tokio::spawn(async move {
            let mut acknowledged: Vec<TaskId> = Vec::new();
            let mut refused = 0usize;
            while !stop.load(Ordering::Relaxed) {
                match engine.submit(task()).await {
                    Ok(Submitted::Created(env)) => acknowledged.push(env.id),
                    Ok(other) => panic!("an unkeyed submit created nothing: {other:?}"),
                    Err(e) => {
                        assert_eq!(e.code(), "STORE_UNAVAILABLE", "{e}");
                        eprintln!("refused: {e}");
                        refused += 1;
                    }
                }
            }
            (acknowledged, refused)
        }));
    }

    tokio::time::sleep(Duration::from_millis(700)).await;
    // SIGKILL mid-load; back on the same port and directory a moment later.
    tokio::task::block_in_place(|| {
        server.kill();
        std::thread::sleep(Duration::from_millis(500));
        server.restart();
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, Ordering::Relaxed);

    let mut acknowledged: Vec<TaskId> = Vec::new();
    let mut refused = 0;
    for producer in producers {
        let (ids, errors) = producer.await.expect("a producer panicked");
        acknowledged.extend(ids);
        refused += errors;
    }
    eprintln!(
        "{} submits acknowledged across the kill -9",
        acknowledged.len()
    );
    assert!(acknowledged.len() > 100, "the producers made progress");
    assert_eq!(
        refused, 0,
        "with wait_ms=30000 every submit waits out the restart"
    );

    let unique: HashSet<TaskId> = acknowledged.iter().copied().collect();
    assert_eq!(unique.len(), acknowledged.len());
    let mut missing = Vec::new();
    for id in &acknowledged {
        match engine.get(*id).await {
            Ok(env) => assert_eq!(env.status, Status::Pending),
            Err(e) => missing.push(format!("{id}: {e}")),
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged submits were lost, e.g. {:?}",
        missing.len(),
        acknowledged.len(),
        &missing[..missing.len().min(5)]
    );
    let counts = engine.counts().await.expect("counts");
    let queue = counts.iter().find(|c| c.queue == QUEUE).expect("the queue");
    assert_eq!(queue.pending, acknowledged.len() as u64, "and nothing else");

    // Work goes on after the restart: the store reconnected by itself.
    let claimed = engine.claim(QUEUE, 10, None).await.expect("claim");
    assert_eq!(claimed.len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_while_redis_is_down_fails_and_is_never_acknowledged() {
    if !have_redis_binaries() {
        eprintln!("skipping: redis-server and redis-cli are not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut server = Server::start(
        free_port(),
        dir.path(),
        &["--appendonly", "yes", "--appendfsync", "always"],
    );
    let store = RedisStore::from_url(&format!("{}/?prefix=down&wait_ms=300", server.url()))
        .expect("the store URL");
    let engine = Engine::new(Arc::new(store), Arc::new(SystemClock));
    let before = engine
        .submit(task())
        .await
        .expect("a submit while Redis is up");

    tokio::task::block_in_place(|| server.kill());
    for _ in 0..5 {
        let refused = engine.submit(task()).await;
        match refused {
            Err(e) => assert_eq!(e.code(), "STORE_UNAVAILABLE", "{e}"),
            Ok(s) => panic!("a submit was acknowledged with Redis down: {s:?}"),
        }
    }
    assert_eq!(
        engine
            .claim(QUEUE, 10, None)
            .await
            .map(|c| c.len())
            .map_err(|e| e.code()),
        Err("STORE_UNAVAILABLE")
    );

    tokio::task::block_in_place(|| server.restart());
    let back = engine.get(before.envelope().id).await.expect("get");
    assert_eq!(back.id, before.envelope().id);
    let claimed = engine
        .claim(QUEUE, 10, None)
        .await
        .expect("claim after restart");
    assert_eq!(claimed.len(), 1, "only the acknowledged task exists");
}
