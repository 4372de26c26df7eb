//! The scheduler service on virtual time: it fires each due time once
//! however many nodes run it, reports skips, and stops on shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdq_engine::FireReport;
use rdq_engine::{Engine, ListQuery, ManualClock, ScheduleOwner};
use rdq_envelope::Timestamp;
use rdq_runtime::{SchedulerConfig, run_scheduler_with, shutdown_channel, until_next};
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

/// A memory store holding the schedule `every.2s`, on a virtual clock at `at`.
async fn every_two_seconds_from(at: &str) -> (Arc<ManualClock>, Arc<MemoryStore>, Engine) {
    let clock = Arc::new(ManualClock::new(Timestamp::parse(at).unwrap()));
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::new(store.clone(), clock.clone());
    engine
        .put_schedule(schedule("every.2s", 2_000), ScheduleOwner::Api)
        .await
        .unwrap();
    (clock, store, engine)
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn three_schedulers_fire_each_due_time_once_and_stop_on_shutdown() {
    let (clock, store, engine) = every_two_seconds_from("2026-07-20T14:00:00.500Z").await;
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

#[test]
fn a_scheduler_sleeps_to_the_next_due_time_when_it_comes_before_a_tick() {
    let second = Duration::from_secs(1);
    let due_at = |next| FireReport {
        next_due_ms: next,
        ..FireReport::default()
    };
    assert_eq!(
        until_next(&due_at(Some(10_250)), 10_000, second),
        Duration::from_millis(250)
    );
    assert_eq!(until_next(&due_at(Some(15_000)), 10_000, second), second);
    // Nothing to come, or a due time not in the future: a whole tick.
    assert_eq!(until_next(&due_at(None), 10_000, second), second);
    assert_eq!(until_next(&due_at(Some(10_000)), 10_000, second), second);
    assert_eq!(until_next(&due_at(Some(9_000)), 10_000, second), second);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_due_time_fires_when_it_falls_due_not_a_tick_later() {
    let (clock, store, engine) = every_two_seconds_from("2026-07-20T14:00:00.050Z").await;
    let (trigger, shutdown) = shutdown_channel();
    // A tick of a minute: without waking at the due time, nothing would
    // fire before the minute is up.
    let node = tokio::spawn(run_scheduler_with(
        Engine::new(store.clone(), clock.clone()),
        SchedulerConfig {
            interval: Duration::from_secs(60),
        },
        shutdown,
        |_| {},
    ));
    // Virtual time moves with the runtime's, 10 ms at a time, for 7 s.
    for _ in 0..700 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        clock.advance_ms(10);
    }
    trigger.trigger();
    node.await.unwrap();
    let page = engine
        .list(&ListQuery {
            queue: "s.q".into(),
            ..ListQuery::default()
        })
        .await
        .unwrap();
    // 14:00:02, :04, :06, each within a step of its due time.
    assert_eq!(page.items.len(), 3);
    for task in &page.items {
        let due = Timestamp::parse(&task.headers["rdq.schedule_due"])
            .unwrap()
            .unix_ms();
        let late = task.created_at.unix_ms() - due;
        assert!((0..=20).contains(&late), "{late} ms late");
    }
}
