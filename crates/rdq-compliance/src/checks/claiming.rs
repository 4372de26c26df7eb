//! Claims: exclusive under concurrency, in priority-then-due order, never
//! early, never from a paused queue, and always under the queue's live policy.

use std::collections::HashMap;

use rdq_engine::{LeaseToken, QueueConfig, QueuePolicy, SettleRequest, Settlement};
use rdq_envelope::{Status, TaskId};
use tokio::task::JoinSet;

use crate::StoreFactory;
use crate::harness::{
    Harness, Need, Spi as _, assert_same_ids, at, claimed_ids, ids_of, retryable, task, test_policy,
};

/// Eight claimers taking small batches of 500 due tasks at once, settling as
/// they go: every task is handed out exactly once and none is left over.
pub async fn concurrent_claimers_never_share_a_task(factory: StoreFactory) {
    const QUEUE: &str = "claim.race";
    const TASKS: usize = 500;
    const CLAIMERS: usize = 8;
    const BATCH: usize = 7;
    let h = Harness::new(&factory).await;
    let submitted = h.submit_n(QUEUE, TASKS).await;

    let mut claimers = JoinSet::new();
    for _ in 0..CLAIMERS {
        let engine = h.engine.clone();
        claimers.spawn(async move {
            let mut mine: Vec<TaskId> = Vec::new();
            loop {
                let batch = engine
                    .claim(QUEUE, BATCH, None)
                    .await
                    .expect("claim should succeed");
                if batch.is_empty() {
                    return mine;
                }
                assert!(batch.len() <= BATCH, "a claim returned more than max");
                for c in &batch {
                    assert_eq!(c.envelope.status, Status::InFlight);
                    assert_eq!(c.envelope.attempt_count, 1);
                    assert_eq!(c.token, LeaseToken(1), "a first claim opens attempt 1");
                }
                let settles = batch
                    .iter()
                    .map(|c| SettleRequest {
                        envelope: c.envelope.clone(),
                        token: c.token,
                        settlement: Settlement::Success,
                    })
                    .collect();
                for result in engine.settle_many(settles).await {
                    result.expect("the claimer holding a lease can settle it");
                }
                mine.extend(batch.iter().map(|c| c.envelope.id));
                tokio::task::yield_now().await;
            }
        });
    }
    let mut times_claimed: HashMap<TaskId, usize> = HashMap::new();
    while let Some(joined) = claimers.join_next().await {
        for id in joined.expect("a claimer panicked") {
            *times_claimed.entry(id).or_default() += 1;
        }
    }
    let twice: Vec<String> = times_claimed
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, n)| format!("{id} ×{n}"))
        .collect();
    assert!(
        twice.is_empty(),
        "{} tasks were handed to more than one claimer, e.g. {:?}",
        twice.len(),
        &twice[..twice.len().min(5)]
    );
    let claimed: Vec<TaskId> = times_claimed.keys().copied().collect();
    assert_same_ids(&claimed, &ids_of(&submitted), "every task claimed once");
    assert!(h.claim(QUEUE, 10).await.is_empty(), "nothing left to claim");
    if h.caps().counts {
        let counts = h.store.counts().await.expect("counts");
        let queue = counts.iter().find(|c| c.queue == QUEUE).expect("the queue");
        assert_eq!(
            (queue.pending, queue.in_flight, queue.succeeded, queue.dead),
            (0, 0, TASKS as u64, 0)
        );
    }
}

/// Higher priority first; within a priority, earlier due first; within the
/// same due time, older id first; tasks not yet due wait whatever their priority.
pub async fn claims_follow_priority_then_due_order(factory: StoreFactory) {
    const QUEUE: &str = "claim.order";
    let h = Harness::new(&factory).await;
    let submit = |priority: u8, delay_ms: u64| {
        let mut request = task(QUEUE);
        request.priority = priority;
        request.delay_ms = delay_ms;
        h.submit(request)
    };
    // At t0.
    let low_due_60 = submit(0, 60).await;
    let mid_due_40 = submit(5, 40).await;
    let low_due_0 = submit(0, 0).await;
    let mid_due_40_younger = submit(5, 40).await;
    let top_not_due = submit(9, 500).await;
    // At t0+20: younger ids, some due earlier than older tasks.
    h.advance(20);
    let mid_due_20 = submit(5, 0).await;
    let low_due_20 = submit(0, 0).await;
    let top_due_20 = submit(9, 0).await;

    h.advance(80);
    let first = h.claim(QUEUE, 3).await;
    assert_eq!(
        claimed_ids(&first),
        ids_of([&top_due_20, &mid_due_20, &mid_due_40]),
        "the first three claims, in order"
    );
    let rest = h.claim(QUEUE, 10).await;
    assert_eq!(
        claimed_ids(&rest),
        ids_of([&mid_due_40_younger, &low_due_0, &low_due_20, &low_due_60]),
        "the remaining due tasks, in order; the one not yet due waits"
    );
    assert!(h.claim(QUEUE, 10).await.is_empty());
    h.advance(400);
    assert_eq!(
        claimed_ids(&h.claim(QUEUE, 10).await),
        vec![top_not_due.id],
        "due at last"
    );
}

/// A task is claimable from its due time on, not a millisecond before; the
/// same holds for a retry waiting out its backoff.
pub async fn not_yet_due_tasks_are_not_claimed(factory: StoreFactory) {
    const QUEUE: &str = "claim.due";
    let policy = QueuePolicy {
        backoff: rdq_engine::Backoff::Fixed { delay_ms: 500 },
        ..test_policy()
    };
    let h = Harness::with_policy(&factory, policy).await;
    let mut delayed = task(QUEUE);
    delayed.delay_ms = 1_000;
    let later = h.submit(delayed).await;
    let now = h.submit(task(QUEUE)).await;
    assert_eq!(later.next_attempt_at, Some(at(1_000)));

    assert_eq!(claimed_ids(&h.claim(QUEUE, 10).await), vec![now.id]);
    h.advance(999);
    assert!(h.claim(QUEUE, 10).await.is_empty(), "not due 1 ms early");
    h.advance(1);
    let claimed = h.claim_one(QUEUE).await;
    assert_eq!(claimed.envelope.id, later.id, "due exactly at its due time");

    let retry = h.settle(&claimed, retryable("net.Timeout")).await;
    assert_eq!(retry.status, Status::Pending);
    assert_eq!(retry.next_attempt_at, Some(at(1_500)));
    assert!(h.claim(QUEUE, 10).await.is_empty(), "backoff not yet over");
    h.advance(499);
    assert!(h.claim(QUEUE, 10).await.is_empty(), "backoff not yet over");
    h.advance(1);
    assert_eq!(claimed_ids(&h.claim(QUEUE, 10).await), vec![later.id]);

    // PENDING tasks never show up as expired leases, however late it is.
    let waiting = {
        let mut far = task(QUEUE);
        far.delay_ms = 10_000_000;
        h.submit(far).await
    };
    let expired = h
        .store
        .expired_leases(at(u64::MAX / 4), 100)
        .await
        .expect("expired_leases");
    assert!(expired.iter().all(|env| env.status == Status::InFlight));
    assert!(!expired.iter().any(|env| env.id == waiting.id));
}

/// A paused queue still accepts submits but hands out nothing until it is
/// resumed; other queues are not affected.
pub async fn paused_queue_hands_out_nothing(factory: StoreFactory) {
    const QUEUE: &str = "claim.paused";
    const OTHER: &str = "claim.running";
    let h = Harness::new(&factory).await;
    if h.skips("paused_queue_hands_out_nothing", &[Need::QueueConfig]) {
        return;
    }
    let paused = QueuePolicy {
        paused: true,
        ..test_policy()
    };
    h.engine
        .set_policy(QUEUE, &paused)
        .await
        .expect("set_policy");
    let queued = h.submit_n(QUEUE, 2).await;
    let other = h.submit(task(OTHER)).await;
    assert!(h.claim(QUEUE, 10).await.is_empty(), "paused");
    h.advance(60_000);
    assert!(h.claim(QUEUE, 10).await.is_empty(), "still paused");
    assert_eq!(claimed_ids(&h.claim(OTHER, 10).await), vec![other.id]);
    for env in &queued {
        h.assert_status(env.id, Status::Pending, "a paused queue's task waits")
            .await;
    }

    h.engine
        .set_policy(QUEUE, &test_policy())
        .await
        .expect("set_policy");
    assert_eq!(claimed_ids(&h.claim(QUEUE, 10).await), ids_of(&queued));
}

/// Stored policy round-trips whole, and every claim and settle reads the
/// queue's policy as it is at that moment.
pub async fn queue_config_changes_are_seen_by_the_next_claim(factory: StoreFactory) {
    const QUEUE: &str = "claim.config";
    const OTHER: &str = "claim.unconfigured";
    let h = Harness::new(&factory).await;
    if h.skips(
        "queue_config_changes_are_seen_by_the_next_claim",
        &[Need::QueueConfig],
    ) {
        return;
    }
    assert_eq!(h.store.get_config(QUEUE).await.expect("get_config"), None);

    // Every field away from its default survives the store.
    let unusual = QueuePolicy {
        max_attempts: 17,
        max_lease_expiries: 3,
        backoff: rdq_engine::Backoff::Exponential {
            base_ms: 250,
            factor: 1.5,
            cap_ms: 90_000,
            jitter: false,
        },
        lease_ms: 5_000,
        retryable_errors: vec!["net.*".into()],
        non_retryable_errors: vec!["app.[A-Z]*".into(), "db.Constraint".into()],
        max_envelope_bytes: 4_096,
        max_priority: 4,
        handler_version_mismatch: rdq_engine::VersionMismatch::Requeue,
        paused: false,
        retain_succeeded_ms: 0,
        flow: rdq_engine::FlowPolicy::default(),
    };
    // Sections (a front end's or a store's keys) are kept verbatim, numbers
    // digit for digit.
    let unusual = QueueConfig::from(unusual)
        .with_section(
            "callback",
            serde_json::json!({"url": "https://example.invalid/hook", "timeout_ms": 800}),
        )
        .with_section("queuey_compatible", serde_json::json!(true))
        .with_section(
            "some.front_end",
            serde_json::from_str("{\"big\": 18446744073709551617, \"x\": [1.50]}")
                .expect("a JSON section"),
        );
    h.engine
        .set_config(QUEUE, &unusual)
        .await
        .expect("set_config");
    assert_eq!(
        h.store.get_config(QUEUE).await.expect("get_config"),
        Some(unusual.clone())
    );
    assert_eq!(h.store.get_config(OTHER).await.expect("get_config"), None);

    let one_attempt = QueuePolicy {
        max_attempts: 1,
        lease_ms: 5_000,
        ..test_policy()
    };
    h.engine
        .set_policy(QUEUE, &one_attempt)
        .await
        .expect("set_policy");
    assert_eq!(
        h.store.get_config(QUEUE).await.expect("get_config"),
        Some(QueueConfig::from(one_attempt.clone())),
        "put_config replaces the whole configuration"
    );
    h.submit_n(QUEUE, 2).await;
    let first = h.claim_one(QUEUE).await;
    assert_eq!(first.envelope.lease_expires_at, Some(at(5_000)));

    h.engine
        .set_policy(
            QUEUE,
            &QueuePolicy {
                lease_ms: 9_000,
                ..one_attempt.clone()
            },
        )
        .await
        .expect("set_policy");
    let second = h.claim_one(QUEUE).await;
    assert_eq!(
        second.envelope.lease_expires_at,
        Some(at(9_000)),
        "the next claim uses the new lease"
    );

    // Raising max_attempts during an incident saves the task in flight.
    h.engine
        .set_policy(
            QUEUE,
            &QueuePolicy {
                max_attempts: 3,
                ..one_attempt.clone()
            },
        )
        .await
        .expect("set_policy");
    let retried = h.settle(&first, retryable("net.Timeout")).await;
    assert_eq!(
        retried.status,
        Status::Pending,
        "the settle saw max_attempts 3"
    );

    // Lowering it again applies just as fast.
    h.engine
        .set_policy(QUEUE, &one_attempt)
        .await
        .expect("set_policy");
    let dead = h.settle(&second, retryable("net.Timeout")).await;
    assert_eq!(dead.status, Status::Dead, "the settle saw max_attempts 1");
}
