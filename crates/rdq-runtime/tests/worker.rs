//! The worker loop against the in-memory store, in real time with short leases.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rdq_engine::{
    Backoff, Engine, FailureKind, ListQuery, QueuePolicy, Settlement, SubmitRequest, SystemClock,
};
use rdq_envelope::{ErrorInfo, Outcome, Status, error_types};
use rdq_runtime::{
    Prefetch, ReaperConfig, Task, Worker, WorkerConfig, run_reaper, shutdown_channel,
};
use rdq_store_memory::MemoryStore;

async fn engine_with(queue: &str, policy: QueuePolicy) -> Engine {
    let engine = Engine::new(Arc::new(MemoryStore::new()), Arc::new(SystemClock));
    engine.set_policy(queue, &policy).await.unwrap();
    engine
}

async fn submit(engine: &Engine, queue: &str, n: usize) {
    for i in 0..n {
        engine
            .submit(SubmitRequest {
                queue: queue.into(),
                handler_ref: "h".into(),
                payload: format!("{i}").into_bytes(),
                payload_content_type: "text/plain".into(),
                ..SubmitRequest::default()
            })
            .await
            .unwrap();
    }
}

async fn all(engine: &Engine, queue: &str) -> Vec<rdq_envelope::Envelope> {
    engine
        .list(&ListQuery {
            queue: queue.into(),
            limit: 1000,
            ..ListQuery::default()
        })
        .await
        .unwrap()
        .items
}

fn config(queue: &str) -> WorkerConfig {
    WorkerConfig {
        queues: vec![queue.into()],
        concurrency: 8,
        claim_batch: 8,
        poll_interval: Duration::from_millis(10),
        ..WorkerConfig::default()
    }
}

async fn until(mut done: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("condition not reached within 5 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_is_run_once_and_succeeds() {
    let engine = engine_with("w.ok", QueuePolicy::default()).await;
    submit(&engine, "w.ok", 200).await;
    let runs = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&runs);
    let worker = Worker::new(engine.clone(), config("w.ok"), move |_t: Arc<Task>| {
        let counted = Arc::clone(&counted);
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            Settlement::Success
        }
    });
    let stats = worker.stats();
    let (trigger, shutdown) = shutdown_channel();
    let running = tokio::spawn(worker.run(shutdown));
    until(|| stats.settled.load(Ordering::SeqCst) == 200).await;
    trigger.trigger();
    running.await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 200);
    assert!(
        all(&engine, "w.ok")
            .await
            .iter()
            .all(|e| e.status == Status::Succeeded)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_a_retryable_failure_not_a_dead_worker() {
    let policy = QueuePolicy {
        backoff: Backoff::None,
        max_attempts: 2,
        ..QueuePolicy::default()
    };
    let engine = engine_with("w.panic", policy).await;
    submit(&engine, "w.panic", 3).await;
    let worker = Worker::new(
        engine.clone(),
        config("w.panic"),
        |t: Arc<Task>| async move {
            if t.envelope().attempt_count == 1 {
                panic!("boom");
            }
            Settlement::Success
        },
    );
    let stats = worker.stats();
    let (trigger, shutdown) = shutdown_channel();
    let running = tokio::spawn(worker.run(shutdown));
    until(|| stats.settled.load(Ordering::SeqCst) == 6).await;
    trigger.trigger();
    running.await.unwrap();
    assert_eq!(stats.panicked.load(Ordering::SeqCst), 3);
    for env in all(&engine, "w.panic").await {
        assert_eq!(env.status, Status::Succeeded);
        let first = &env.attempts[0];
        assert_eq!(first.outcome, Some(Outcome::RetryableFailure));
        let error = first.error.as_ref().unwrap();
        assert_eq!(error.error_type, error_types::PANIC);
        assert_eq!(error.message, "boom");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_classified_and_reach_the_dlq() {
    let policy = QueuePolicy {
        backoff: Backoff::None,
        max_attempts: 3,
        ..QueuePolicy::default()
    };
    let engine = engine_with("w.fail", policy).await;
    submit(&engine, "w.fail", 4).await;
    let worker = Worker::new(
        engine.clone(),
        config("w.fail"),
        |_t: Arc<Task>| async move {
            Settlement::Failure {
                error: ErrorInfo::new("io.Timeout", "always"),
                kind: FailureKind::Unclassified,
            }
        },
    );
    let stats = worker.stats();
    let (trigger, shutdown) = shutdown_channel();
    let running = tokio::spawn(worker.run(shutdown));
    until(|| stats.settled.load(Ordering::SeqCst) == 12).await;
    trigger.trigger();
    running.await.unwrap();
    for env in all(&engine, "w.fail").await {
        assert_eq!(env.status, Status::Dead);
        assert_eq!(env.attempt_count, 3);
        assert_eq!(env.attempts.len(), 3);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_hands_back_unfinished_tasks_and_loses_nothing() {
    let engine = engine_with("w.stop", QueuePolicy::default()).await;
    submit(&engine, "w.stop", 50).await;
    let started = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&started);
    let worker = Worker::new(
        engine.clone(),
        WorkerConfig {
            shutdown_grace: Duration::from_millis(100),
            ..config("w.stop")
        },
        move |t: Arc<Task>| {
            let seen = Arc::clone(&seen);
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                // Even-numbered payloads finish quickly, odd ones hang past the grace period.
                let n: u64 = String::from_utf8(t.envelope().payload_bytes())
                    .unwrap()
                    .parse()
                    .unwrap();
                if n % 2 == 1 {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                Settlement::Success
            }
        },
    );
    let stats = worker.stats();
    let (trigger, shutdown) = shutdown_channel();
    let running = tokio::spawn(worker.run(shutdown));
    until(|| started.load(Ordering::SeqCst) >= 8).await;
    trigger.trigger();
    running.await.unwrap();

    let tasks = all(&engine, "w.stop").await;
    assert_eq!(tasks.len(), 50);
    let succeeded = tasks
        .iter()
        .filter(|e| e.status == Status::Succeeded)
        .count() as u64;
    let pending = tasks.iter().filter(|e| e.status == Status::Pending).count() as u64;
    // Nothing is left in flight: every task is settled or claimable again.
    assert_eq!(succeeded + pending, 50);
    assert!(stats.released.load(Ordering::SeqCst) >= 1);
    for env in tasks.iter().filter(|e| e.status == Status::Pending) {
        // Handed back unrun: no attempt spent, no deferral counted.
        assert_eq!(env.attempt_count, 0);
        assert!(env.attempts.is_empty());
        assert_eq!(env.deferral_count, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_overruns_its_lease_is_stopped_and_reaped_as_lease_expired() {
    let policy = QueuePolicy {
        backoff: Backoff::None,
        max_attempts: 2,
        lease_ms: 50,
        ..QueuePolicy::default()
    };
    let engine = engine_with("w.slow", policy).await;
    submit(&engine, "w.slow", 1).await;
    let (trigger, shutdown) = shutdown_channel();
    let reaper = tokio::spawn(run_reaper(
        engine.clone(),
        ReaperConfig {
            interval: Duration::from_millis(10),
            batch: 10,
        },
        shutdown.clone(),
    ));
    let worker = Worker::new(
        engine.clone(),
        config("w.slow"),
        |_t: Arc<Task>| async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Settlement::Success
        },
    );
    let stats = worker.stats();
    let running = tokio::spawn(worker.run(shutdown));
    let probe = engine.clone();
    let mut dead = false;
    for _ in 0..400 {
        if all(&probe, "w.slow").await[0].status == Status::Dead {
            dead = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    trigger.trigger();
    running.await.unwrap();
    reaper.await.unwrap();
    assert!(dead, "the poison pill never reached the DLQ");
    let env = &all(&engine, "w.slow").await[0];
    assert!(
        env.attempts
            .iter()
            .all(|a| a.outcome == Some(Outcome::LeaseExpired))
    );
    assert_eq!(env.attempts.len(), 2);
    assert_eq!(stats.lease_overruns.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extending_the_lease_keeps_a_long_handler_running() {
    // Runs 1.8 s on a 1.2 s lease, extending it every 200 ms: each
    // extension leaves a second of slack for a busy machine's scheduler
    // (450 ms was once not enough while the whole suite ran on 2 cores).
    let policy = QueuePolicy {
        lease_ms: 1_200,
        ..QueuePolicy::default()
    };
    let engine = engine_with("w.long", policy).await;
    submit(&engine, "w.long", 1).await;
    let worker = Worker::new(
        engine.clone(),
        config("w.long"),
        |t: Arc<Task>| async move {
            for _ in 0..9 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                t.extend_lease(Duration::from_millis(1_200)).await.unwrap();
            }
            Settlement::Success
        },
    );
    let stats = worker.stats();
    let (trigger, shutdown) = shutdown_channel();
    let running = tokio::spawn(worker.run(shutdown));
    until(|| stats.settled.load(Ordering::SeqCst) == 1).await;
    trigger.trigger();
    running.await.unwrap();
    assert_eq!(stats.lease_overruns.load(Ordering::SeqCst), 0);
    assert_eq!(all(&engine, "w.long").await[0].status, Status::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetched_tasks_run_once_and_are_handed_back_unrun_at_shutdown() {
    let engine = engine_with("w.prefetch", QueuePolicy::default()).await;
    submit(&engine, "w.prefetch", 100).await;
    let runs = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&runs);
    let config = WorkerConfig {
        concurrency: 2,
        claim_batch: 2,
        prefetch: Prefetch::Fixed(30),
        shutdown_grace: Duration::from_millis(50),
        ..config("w.prefetch")
    };
    let worker = Worker::new(engine.clone(), config, move |_t: Arc<Task>| {
        let counted = Arc::clone(&counted);
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            Settlement::Success
        }
    });
    let stats = worker.stats();
    let (trigger, shutdown) = shutdown_channel();
    let running = tokio::spawn(worker.run(shutdown));
    until(|| stats.settled.load(Ordering::SeqCst) >= 10).await;
    // More were claimed than handlers could run: the rest waited, prefetched.
    assert!(stats.claimed.load(Ordering::SeqCst) > stats.settled.load(Ordering::SeqCst) + 2);
    trigger.trigger();
    running.await.unwrap();

    let tasks = all(&engine, "w.prefetch").await;
    let succeeded = tasks
        .iter()
        .filter(|e| e.status == Status::Succeeded)
        .count() as u64;
    let pending: Vec<_> = tasks
        .iter()
        .filter(|e| e.status == Status::Pending)
        .collect();
    assert_eq!(
        succeeded + pending.len() as u64,
        100,
        "nothing left in flight"
    );
    assert_eq!(
        succeeded,
        runs.load(Ordering::SeqCst),
        "each run settled exactly once"
    );
    assert!(
        stats.released.load(Ordering::SeqCst) >= 20,
        "the prefetched tasks were handed back"
    );
    for env in pending {
        assert!(env.attempts.is_empty() && env.attempt_count == 0 && env.deferral_count == 0);
    }
}

/// The most tasks a worker held claimed but not started, seen by its
/// handlers, over `n` tasks that each take `work`.
async fn most_held_ahead(prefetch: Prefetch, policy: QueuePolicy, n: usize, work: Duration) -> u64 {
    let queue = "w.pace";
    let engine = engine_with(queue, policy).await;
    submit(&engine, queue, n).await;
    let config = WorkerConfig {
        concurrency: 2,
        claim_batch: 2,
        prefetch,
        ..config(queue)
    };
    let started = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let stats_cell: Arc<OnceLock<Arc<rdq_runtime::WorkerStats>>> = Arc::new(OnceLock::new());
    let (s, m, cell) = (
        Arc::clone(&started),
        Arc::clone(&most),
        Arc::clone(&stats_cell),
    );
    let worker = Worker::new(engine.clone(), config, move |_t: Arc<Task>| {
        let (s, m, cell) = (Arc::clone(&s), Arc::clone(&m), Arc::clone(&cell));
        async move {
            let now_started = s.fetch_add(1, Ordering::SeqCst) + 1;
            if let Some(stats) = cell.get() {
                let ahead = stats
                    .claimed
                    .load(Ordering::SeqCst)
                    .saturating_sub(now_started);
                m.fetch_max(ahead, Ordering::SeqCst);
            }
            if !work.is_zero() {
                tokio::time::sleep(work).await;
            }
            Settlement::Success
        }
    });
    let stats = worker.stats();
    stats_cell.set(Arc::clone(&stats)).ok();
    let (trigger, shutdown) = shutdown_channel();
    let running = tokio::spawn(worker.run(shutdown));
    until(|| stats.settled.load(Ordering::SeqCst) >= n as u64).await;
    trigger.trigger();
    running.await.unwrap();
    most.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_prefetch_follows_the_handlers_pace() {
    let open = QueuePolicy::default;
    // Quick handlers: the worker claims well ahead of its two handlers.
    let quick = most_held_ahead(Prefetch::Adaptive, open(), 5_000, Duration::ZERO).await;
    assert!(quick >= 50, "held {quick} ahead of quick handlers");
    // Without prefetch, never more than a claim's worth.
    let none = most_held_ahead(Prefetch::Fixed(0), open(), 2_000, Duration::ZERO).await;
    assert!(none <= 2, "held {none} ahead without prefetch");
    // Handlers of 10 ms (two run 200 a second): 50 ms of that is 10.
    let slow = most_held_ahead(Prefetch::Adaptive, open(), 100, Duration::from_millis(10)).await;
    assert!(slow <= 12, "held {slow} ahead of slow handlers");
    // A queue under flow control: none ahead, even where the limit is far.
    let mut limited = open();
    limited.flow.concurrency = Some(10_000);
    let flow = most_held_ahead(Prefetch::Adaptive, limited, 5_000, Duration::ZERO).await;
    assert!(flow <= 2, "held {flow} ahead on a flow-controlled queue");
}

#[tokio::test]
async fn a_configuration_change_wakes_the_workers_waiting_for_work() {
    let engine = engine_with("w.wake", QueuePolicy::default()).await;
    let notify = Arc::clone(engine.work_available());
    let woken = notify.notified();
    tokio::pin!(woken);
    woken.as_mut().enable();
    assert!(
        futures::FutureExt::now_or_never(woken.as_mut()).is_none(),
        "nothing woke the waiter yet"
    );
    engine
        .set_policy("w.wake", &QueuePolicy::default())
        .await
        .unwrap();
    assert!(
        futures::FutureExt::now_or_never(woken).is_some(),
        "a configuration change (resuming a paused queue) wakes waiting workers"
    );
}
