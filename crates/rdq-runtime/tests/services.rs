//! The lease reaper and the retention pruner as separate units, on virtual time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use rdq_engine::{Backoff, Engine, ManualClock, QueuePolicy, Settlement, SubmitRequest};
use rdq_envelope::{Outcome, Status, Timestamp};
use rdq_runtime::{PrunerConfig, ReaperConfig, run_pruner, run_reaper, shutdown_channel};
use rdq_store_memory::MemoryStore;

fn start() -> Timestamp {
    Timestamp::parse("2026-07-20T14:00:00.000Z").unwrap()
}

async fn setup(queue: &str, policy: QueuePolicy) -> (Engine, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(start()));
    let engine = Engine::new(Arc::new(MemoryStore::new()), clock.clone());
    engine.set_policy(queue, &policy).await.unwrap();
    (engine, clock)
}

async fn submit(engine: &Engine, queue: &str, n: usize) {
    for _ in 0..n {
        engine
            .submit(SubmitRequest {
                queue: queue.into(),
                handler_ref: "h".into(),
                payload_content_type: "text/plain".into(),
                ..SubmitRequest::default()
            })
            .await
            .unwrap();
    }
}

async fn statuses(engine: &Engine, queue: &str) -> Vec<Status> {
    let page = engine
        .list(&rdq_engine::ListQuery {
            queue: queue.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    page.items.iter().map(|e| e.status).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reaper_closes_only_lapsed_leases_as_lease_expired() {
    let policy = QueuePolicy {
        lease_ms: 1_000,
        backoff: Backoff::None,
        ..QueuePolicy::default()
    };
    let (engine, clock) = setup("r.q", policy).await;
    submit(&engine, "r.q", 10).await;
    let early = engine.claim("r.q", 4, None).await.unwrap();
    clock.advance_ms(600);
    let late = engine.claim("r.q", 6, Some(5_000)).await.unwrap();
    assert_eq!((early.len(), late.len()), (4, 6));
    clock.advance_ms(500); // the 1 s leases lapsed; the 5 s ones did not

    let (trigger, shutdown) = shutdown_channel();
    let reaper = tokio::spawn(run_reaper(
        engine.clone(),
        ReaperConfig {
            interval: Duration::from_millis(5),
            batch: 2,
        },
        shutdown,
    ));
    for _ in 0..400 {
        if statuses(&engine, "r.q")
            .await
            .iter()
            .filter(|s| **s == Status::Pending)
            .count()
            == 4
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    trigger.trigger();
    reaper.await.unwrap();

    for c in &early {
        let env = engine.get(c.envelope.id).await.unwrap();
        assert_eq!(env.status, Status::Pending);
        assert_eq!(env.attempts[0].outcome, Some(Outcome::LeaseExpired));
        assert_eq!(
            env.attempts[0].error.as_ref().unwrap().error_type,
            "rdq.LeaseExpired"
        );
        // The stale worker's settle is fenced off.
        let stale = engine
            .settle(&c.envelope, c.token, Settlement::Success)
            .await;
        assert_eq!(stale.unwrap_err().code(), "LEASE_LOST");
    }
    for c in &late {
        assert_eq!(
            engine.get(c.envelope.id).await.unwrap().status,
            Status::InFlight
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reapers_on_every_node_reap_each_lease_exactly_once() {
    let policy = QueuePolicy {
        lease_ms: 100,
        max_attempts: 5,
        backoff: Backoff::None,
        ..QueuePolicy::default()
    };
    let (engine, clock) = setup("r.many", policy).await;
    submit(&engine, "r.many", 200).await;
    assert_eq!(engine.claim("r.many", 200, None).await.unwrap().len(), 200);
    clock.advance_ms(101);
    // Four "nodes" reap the same store at once.
    let passes: Vec<_> = (0..4)
        .map(|_| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let mut reaped = 0;
                loop {
                    let n = engine.reap_expired(7).await.unwrap().len();
                    if n == 0 {
                        return reaped;
                    }
                    reaped += n;
                }
            })
        })
        .collect();
    let mut total = 0;
    for p in passes {
        total += p.await.unwrap();
    }
    assert_eq!(total, 200, "every lapsed lease reaped once, none twice");
    let page = engine
        .list(&rdq_engine::ListQuery {
            queue: "r.many".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    for env in page.items {
        assert_eq!(
            env.attempts.len(),
            1,
            "exactly one LEASE_EXPIRED record per lease"
        );
        assert_eq!(env.status, Status::Pending);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pruner_removes_succeeded_tasks_past_retention_only() {
    let policy = QueuePolicy {
        retain_succeeded_ms: 60_000,
        ..QueuePolicy::default()
    };
    let (engine, clock) = setup("p.q", policy).await;
    submit(&engine, "p.q", 6).await;
    let claimed = engine.claim("p.q", 6, None).await.unwrap();
    // Two finish now, two a minute later, two stay in flight.
    for c in &claimed[..2] {
        engine
            .settle(&c.envelope, c.token, Settlement::Success)
            .await
            .unwrap();
    }
    clock.advance_ms(30_000);
    for c in &claimed[2..4] {
        engine
            .settle(&c.envelope, c.token, Settlement::Success)
            .await
            .unwrap();
    }
    clock.advance_ms(30_001);

    let (trigger, shutdown) = shutdown_channel();
    let pruner = tokio::spawn(run_pruner(
        engine.clone(),
        PrunerConfig {
            interval: Duration::from_millis(5),
            batch: 100,
        },
        shutdown,
    ));
    for _ in 0..400 {
        if statuses(&engine, "p.q").await.len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    trigger.trigger();
    pruner.await.unwrap();

    let left = statuses(&engine, "p.q").await;
    assert_eq!(left.len(), 4);
    assert_eq!(left.iter().filter(|s| **s == Status::Succeeded).count(), 2);
    assert_eq!(left.iter().filter(|s| **s == Status::InFlight).count(), 2);
    for c in &claimed[..2] {
        assert_eq!(
            engine.get(c.envelope.id).await.unwrap_err().code(),
            "TASK_NOT_FOUND"
        );
    }
}
