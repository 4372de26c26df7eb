//! Schedules fire exactly once per due time across nodes, with no leader,
//! checked from outside: three real `rdq serve` nodes on one PostgreSQL
//! schema run the scheduler while a schedule fires every second; one node
//! is killed with SIGKILL half way. Every due time from the first fire to
//! the last has exactly one task (docs/schedules.md).
//!
//! The test works in a schema of its own and drops it afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{FAST_CONFIG, RdqServer};
use rdq_engine::store::schedules::ScheduleOwner;
use rdq_engine::{Engine, ListOrder, ListQuery, SystemClock};
use rdq_store_postgres::PostgresStore;

const QUEUE: &str = "ticks";

/// Every task of the queue's `rdq.schedule_due` header, with how many
/// tasks carry it.
async fn fires(engine: &Engine) -> BTreeMap<String, usize> {
    let mut due = BTreeMap::new();
    let mut cursor = None;
    loop {
        let page = engine
            .list(&ListQuery {
                queue: QUEUE.into(),
                cursor,
                limit: 500,
                order: ListOrder::OldestFirst,
                ..ListQuery::default()
            })
            .await
            .unwrap();
        for env in &page.items {
            let at = env.headers.get("rdq.schedule_due").cloned().unwrap();
            *due.entry(at).or_insert(0) += 1;
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return due,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_fire_each_due_time_once_through_a_kill() {
    let schema = format!("rdq_sched_nodes_{}", std::process::id());
    common::drop_postgres_schema(&schema);
    let url = common::postgres_store(&schema);
    let store = PostgresStore::open(&url).await.unwrap();
    let engine = Engine::new(Arc::new(store), Arc::new(SystemClock));
    let schedule: rdq_schedule::Schedule = serde_json::from_value(serde_json::json!({
        "name": "every.second",
        "task": {"queue": QUEUE, "handler_ref": "tick"},
        "spec": {"every_ms": 1000},
        "catch_up": {"all": {"max": 100, "window_ms": 600000}}
    }))
    .unwrap();
    engine
        .put_schedule(schedule, ScheduleOwner::Api)
        .await
        .unwrap();
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes: Vec<RdqServer> = dirs
        .iter()
        .map(|d| RdqServer::start_on(d.path(), FAST_CONFIG, &url, &[]))
        .collect();
    tokio::time::sleep(Duration::from_millis(4500)).await;
    nodes.remove(0).kill_hard();
    tokio::time::sleep(Duration::from_millis(4500)).await;
    for node in nodes {
        node.terminate();
    }
    let due = fires(&engine).await;
    common::drop_postgres_schema(&schema);
    assert!(due.len() >= 7, "about nine seconds of fires, got {due:?}");
    let twice: Vec<_> = due.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        twice.is_empty(),
        "a due time fired more than once: {twice:?}"
    );
    let instants: Vec<i64> = due
        .keys()
        .map(|t| rdq_envelope::Timestamp::parse(t).unwrap().unix_ms())
        .collect();
    for pair in instants.windows(2) {
        assert_eq!(pair[1] - pair[0], 1000, "no due time skipped: {due:?}");
    }
}
