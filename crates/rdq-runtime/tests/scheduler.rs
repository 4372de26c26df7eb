//! The scheduler service on virtual time: it fires each due time once
//! however many nodes run it, reports skips, and stops on shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdq_engine::{Engine, ListQuery, ManualClock, ScheduleOwner};
use rdq_envelope::Timestamp;
use rdq_runtime::{SchedulerConfig, run_scheduler_with, shutdown_channel};
use rdq_schedule::{CatchUp, Overlap, Schedule, Spec, TaskTemplate};
use rdq_store_memory::MemoryStore;

fn schedule(name: &str, every_ms: u64) -> Schedule {
    Schedule {
        name: name.into(),
        task: TaskTemplate {
            queue: "s.q".into(),
            handler_ref: "h".into(),
            payload: Vec::new(),
            payload_content_type: "text/plain".into(),
            headers: BTreeMap::new(),
            priority: 0,
            flow_key: None,
        },
        spec: Spec::EveryMs(every_ms),
        tz: "UTC".into(),
        start_ms: None,
        end_ms: None,
        paused: false,
        overlap: Overlap::Allow,
        catch_up: CatchUp::Latest,
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn three_schedulers_fire_each_due_time_once_and_stop_on_shutdown() {
    let clock = Arc::new(ManualClock::new(
        Timestamp::parse("2026-07-20T14:00:00.500Z").unwrap(),
    ));
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::new(store.clone(), clock.clone());
    engine
        .put_schedule(schedule("every.2s", 2_000), ScheduleOwner::Api)
        .await
        .unwrap();
    let (trigger, shutdown) = shutdown_channel();
    let fired = Arc::new(Mutex::new(0usize));
    let mut nodes = Vec::new();
    for _ in 0..3 {
        let node = Engine::new(store.clone(), clock.clone());
        let fired = fired.clone();
        nodes.push(tokio::spawn(run_scheduler_with(
            node,
            SchedulerConfig {
                interval: Duration::from_millis(250),
            },
            shutdown.clone(),
            move |report| *fired.lock().unwrap() += report.fired.len(),
        )));
    }
    // Ten virtual seconds, in steps of the tick.
    for _ in 0..40 {
        clock.advance_ms(250);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    trigger.trigger();
    for node in nodes {
        node.await.unwrap();
    }
    let page = engine
        .list(&ListQuery {
            queue: "s.q".into(),
            ..ListQuery::default()
        })
        .await
        .unwrap();
    // 14:00:02, :04, :06, :08, :10: five due times, each once.
    assert_eq!(page.items.len(), 5);
    assert_eq!(*fired.lock().unwrap(), 5);
    let info = engine.get_schedule("every.2s").await.unwrap();
    assert_eq!(info.fires, 5);
}

#[test]
fn the_default_tick_is_a_second_and_is_the_grace() {
    let config = SchedulerConfig::default();
    assert_eq!(config.interval, Duration::from_secs(1));
    assert_eq!(config.grace_ms(), 1_000);
}
