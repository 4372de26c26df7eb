//! The work path on a real broker, in real time: what the virtual-time
//! compliance checks cannot show on a broker (delays, priorities), plus
//! what is particular to RabbitMQ (redelivery as a lapsed lease, malformed
//! bodies, hold queues).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use rdq_engine::store::admin::{QueueDepthsSource, TaskListing};
use std::sync::Arc;
use std::time::Duration;

use common::{Stores, amqp_url, unique};
use lapin::options::BasicPublishOptions;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use rdq_engine::{
    Backoff, Engine, FailureKind, QueuePolicy, Settlement, SubmitRequest, SystemClock,
};
use rdq_envelope::{ErrorInfo, Outcome, Status};
use rdq_store_rabbitmq::RabbitStore;

fn engine(store: &RabbitStore, policy: QueuePolicy) -> Engine {
    Engine::new(Arc::new(store.clone()), Arc::new(SystemClock)).with_fallback_policy(policy)
}

fn task(queue: &str) -> SubmitRequest {
    SubmitRequest {
        queue: queue.to_owned(),
        handler_ref: "test.noop".to_owned(),
        payload: br#"{"n":1}"#.to_vec(),
        payload_content_type: "application/json".to_owned(),
        ..SubmitRequest::default()
    }
}

fn policy() -> QueuePolicy {
    QueuePolicy {
        max_attempts: 2,
        backoff: Backoff::None,
        lease_ms: 60_000,
        ..QueuePolicy::default()
    }
}

/// Runs `test` on a multi-threaded runtime, then deletes every queue it made.
fn with_stores<F, Fut>(test: F)
where
    F: FnOnce(Stores) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let stores = Stores::default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(test(stores.clone()));
    }));
    drop(runtime);
    stores.cleanup();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn delayed_tasks_wait_in_a_hold_queue_and_are_never_released_early() {
    with_stores(|stores| async move {
        let queue = format!("rdq-test.delay.{}", unique());
        let store = stores.make(|o| o.retry_granularity = Duration::from_millis(200));
        let engine = engine(&store, policy());
        let mut delayed = task(&queue);
        delayed.delay_ms = 300;
        // From before the submit: the task waits out its hold queue's 400 ms
        // after it, however long the submit and the checks take.
        let started = std::time::Instant::now();
        let submitted = engine.submit(delayed).await.unwrap();
        let hold = store
            .broker_names(&queue)
            .unwrap()
            .hold(rdq_store_rabbitmq::topology::Mode::Rdq, 400);
        assert_eq!(
            store.depth(&hold).await.unwrap(),
            Some(1),
            "held in the 400 ms quorum hold queue"
        );
        let mut claimed = Vec::new();
        while claimed.is_empty() {
            claimed = engine.claim(&queue, 10, None).await.unwrap();
            if claimed.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "released in time"
            );
        }
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "never released early"
        );
        assert_eq!(claimed[0].envelope.id, submitted.envelope().id);
        engine
            .settle(&claimed[0].envelope, claimed[0].token, Settlement::Success)
            .await
            .unwrap();
    });
}

#[test]
fn a_queue_deleted_under_the_store_is_declared_again_and_nothing_is_reported_stored_unrouted() {
    with_stores(|stores| async move {
        let queue = format!("rdq-test.vanished.{}", unique());
        let store = stores.make(|o| o.retry_granularity = Duration::from_millis(200));
        let engine = engine(&store, policy());
        engine.submit(task(&queue)).await.unwrap();
        let mut delayed = task(&queue);
        delayed.delay_ms = 60_000;
        engine.submit(delayed.clone()).await.unwrap();
        let names = store.broker_names(&queue).unwrap();
        let hold = names.hold(rdq_store_rabbitmq::topology::Mode::Rdq, 60_000);
        // An operator deletes the queues under the running store, which still
        // believes it declared them: its next publishes come back unroutable
        // (mandatory), and each is declared again and published once more.
        let operator = stores.make(|_| {});
        operator
            .delete_broker_queues(&[names.work.clone(), hold.clone()])
            .await
            .unwrap();
        assert_eq!(store.depth(&names.work).await.unwrap(), None);
        let submits = (0..32).map(|_| engine.submit(task(&queue)));
        for result in futures::future::join_all(submits).await {
            result.expect("stored after the queue was declared again");
        }
        assert_eq!(
            store.depth(&names.work).await.unwrap(),
            Some(32),
            "every acknowledged submit is in the queue, none was reported stored while unroutable"
        );
        engine.submit(delayed).await.unwrap();
        assert_eq!(
            store.depth(&hold).await.unwrap(),
            Some(1),
            "the hold queue too"
        );
    });
}

#[test]
fn a_consumer_whose_queue_is_deleted_resubscribes_to_the_queue_declared_again() {
    with_stores(|stores| async move {
        let queue = format!("rdq-test.resubscribe.{}", unique());
        let store = stores.make(|_| {});
        let engine = engine(&store, policy());
        assert!(engine.claim(&queue, 10, None).await.unwrap().is_empty());
        let work = store.broker_names(&queue).unwrap().work;
        let operator = stores.make(|_| {});
        operator
            .delete_broker_queues(std::slice::from_ref(&work))
            .await
            .unwrap();
        // The broker cancels the consumer; it declares the queue again and
        // resubscribes by itself, without waiting for a producer to do it.
        let started = std::time::Instant::now();
        while store.depth(&work).await.unwrap().is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the consumer declared its queue again"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let submitted = engine.submit(task(&queue)).await.unwrap();
        let started = std::time::Instant::now();
        let claimed = loop {
            let claimed = engine.claim(&queue, 10, None).await.unwrap();
            if !claimed.is_empty() {
                break claimed;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the consumer came back on the queue declared again"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(claimed[0].envelope.id, submitted.envelope().id);
        engine
            .settle(&claimed[0].envelope, claimed[0].token, Settlement::Success)
            .await
            .unwrap();
    });
}

#[test]
fn higher_priority_waiting_tasks_are_claimed_first() {
    with_stores(|stores| async move {
        let queue = format!("rdq-test.priority.{}", unique());
        let store = stores.make(|_| {});
        let engine = engine(&store, policy());
        let mut ids = Vec::new();
        for priority in [0u8, 5, 9, 5] {
            let mut request = task(&queue);
            request.priority = priority;
            ids.push(engine.submit(request).await.unwrap().envelope().id);
        }
        let claimed = engine.claim(&queue, 10, None).await.unwrap();
        let order: Vec<_> = claimed.iter().map(|c| c.envelope.id).collect();
        assert_eq!(order, vec![ids[2], ids[1], ids[3], ids[0]]);
    });
}

#[test]
fn a_worker_that_dies_holding_a_task_costs_it_an_attempt_until_it_is_dead() {
    with_stores(|stores| async move {
        let queue = format!("rdq-test.crash.{}", unique());
        let producer = stores.make(|_| {});
        let submitted = engine_for(&producer).submit(task(&queue)).await.unwrap();
        // Each process takes the task over from the one before (whose death
        // the broker reports as a redelivery), then dies holding it too.
        let mut holder = stores.make(|_| {});
        assert_eq!(
            engine_for(&holder)
                .claim(&queue, 1, None)
                .await
                .unwrap()
                .len(),
            1
        );
        for round in 1..=2u32 {
            holder.close();
            let next = stores.make(|_| {});
            let engine = engine_for(&next);
            let mut reaped = Vec::new();
            for _ in 0..100 {
                assert!(engine.claim(&queue, 1, None).await.unwrap().is_empty());
                reaped = engine.reap_expired(10).await.unwrap();
                if !reaped.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(
                reaped.len(),
                1,
                "round {round}: the redelivery is a lapsed lease"
            );
            let env = &reaped[0];
            assert_eq!(env.id, submitted.envelope().id);
            assert_eq!(
                env.attempts.last().and_then(|a| a.outcome),
                Some(Outcome::LeaseExpired)
            );
            assert_eq!(env.attempt_count, round, "the lapse counts");
            if round == 1 {
                assert_eq!(env.status, Status::Pending);
                assert_eq!(engine.claim(&queue, 1, None).await.unwrap().len(), 1);
            } else {
                assert_eq!(env.status, Status::Dead, "max_attempts spent");
            }
            holder = next;
        }
        let dead = holder
            .list(&rdq_engine::ListQuery {
                queue: queue.clone(),
                status: Some(Status::Dead),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(dead.items.len(), 1, "the poison pill reached the DLQ");
        assert_eq!(dead.items[0].id, submitted.envelope().id);
        assert!(
            dead.items[0]
                .attempts
                .iter()
                .all(|a| a.outcome == Some(Outcome::LeaseExpired))
        );
    });
}

fn engine_for(store: &RabbitStore) -> Engine {
    engine(store, policy())
}

#[test]
fn retries_wait_out_their_backoff_and_the_last_failure_is_dead_lettered_with_its_reason() {
    with_stores(|stores| async move {
        let queue = format!("rdq-test.retry.{}", unique());
        let store = stores.make(|o| o.retry_granularity = Duration::from_millis(100));
        let engine = engine(
            &store,
            QueuePolicy {
                backoff: Backoff::Fixed { delay_ms: 150 },
                ..policy()
            },
        );
        engine.submit(task(&queue)).await.unwrap();
        let failure = || Settlement::Failure {
            error: ErrorInfo::new("net.Timeout", "upstream timed out"),
            kind: FailureKind::Retryable,
        };
        let first = engine.claim(&queue, 1, None).await.unwrap().remove(0);
        let retried = engine
            .settle(&first.envelope, first.token, failure())
            .await
            .unwrap();
        assert_eq!(retried.status, Status::Pending);
        assert!(
            engine.claim(&queue, 1, None).await.unwrap().is_empty(),
            "backoff"
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
        let second = engine.claim(&queue, 1, None).await.unwrap().remove(0);
        assert_eq!(second.envelope.attempt_count, 2);
        assert_eq!(
            second.envelope.attempts.len(),
            2,
            "the history travels with the task"
        );
        let dead = engine
            .settle(&second.envelope, second.token, failure())
            .await
            .unwrap();
        assert_eq!(dead.status, Status::Dead);
        let listed = store
            .list(&rdq_engine::ListQuery {
                queue: queue.clone(),
                status: Some(Status::Dead),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(listed.items.len(), 1);
        assert_eq!(
            listed.items[0].encode(),
            dead.encode(),
            "the DLQ holds the task byte for byte"
        );
    });
}

#[test]
fn a_body_that_is_no_envelope_is_copied_to_the_dead_letter_queue_and_acked() {
    with_stores(|stores| async move {
        let queue = format!("rdq-test.malformed.{}", unique());
        let store = stores.make(|_| {});
        let engine = engine(&store, policy());
        // Declares the topology and starts the consumer.
        assert!(engine.claim(&queue, 1, None).await.unwrap().is_empty());
        let names = store.broker_names(&queue).unwrap();
        let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
            .await
            .unwrap();
        let channel = connection.create_channel().await.unwrap();
        channel
            .basic_publish(
                "".into(),
                names.work.as_str().into(),
                BasicPublishOptions::default(),
                b"definitely not an envelope",
                BasicProperties::default(),
            )
            .await
            .unwrap();
        let mut dead = None;
        for _ in 0..100 {
            assert!(engine.claim(&queue, 1, None).await.unwrap().is_empty());
            dead = store.depth(&names.dead).await.unwrap();
            if dead == Some(1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(dead, Some(1), "copied verbatim to q.dead");
        assert_eq!(
            store.depth(&names.work).await.unwrap(),
            Some(0),
            "and acked"
        );
        let _ = connection.close(200, "OK".into()).await;
    });
}

#[test]
fn a_stopping_worker_hands_its_buffered_deliveries_back_without_spending_attempts() {
    with_stores(|stores| async move {
        let queue = format!("rdq-test.stop.{}", unique());
        let producer = engine_for(&stores.make(|_| {}));
        for _ in 0..5 {
            producer.submit(task(&queue)).await.unwrap();
        }
        let worker_store = stores.make(|_| {});
        let worker = engine_for(&worker_store);
        let held = worker.claim(&queue, 1, None).await.unwrap();
        assert_eq!(held.len(), 1);
        // The other four reach the consumer's buffer (prefetch 128).
        tokio::time::sleep(Duration::from_millis(300)).await;
        worker.stop_claiming(&queue).await;
        // The lease handed out before the stop is still good.
        worker
            .settle(&held[0].envelope, held[0].token, Settlement::Success)
            .await
            .unwrap();

        // Another process gets the four as fresh work: no lapsed attempt.
        let other = engine_for(&stores.make(|_| {}));
        let mut taken = Vec::new();
        for _ in 0..250 {
            taken.extend(other.claim(&queue, 10, None).await.unwrap());
            if taken.len() >= 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(taken.len(), 4, "every buffered task came back");
        for c in &taken {
            assert_eq!(
                c.envelope.attempt_count, 1,
                "no attempt was spent on the stop"
            );
            assert_eq!(c.envelope.attempts.len(), 1);
            other
                .settle(&c.envelope, c.token, Settlement::Success)
                .await
                .unwrap();
        }
        assert!(other.reap_expired(10).await.unwrap().is_empty());
        other.stop_claiming(&queue).await;

        // A claim after the stop consumes again.
        let again = producer.submit(task(&queue)).await.unwrap();
        let mut resumed = Vec::new();
        for _ in 0..250 {
            resumed.extend(worker.claim(&queue, 1, None).await.unwrap());
            if !resumed.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(resumed.len(), 1);
        assert_eq!(resumed[0].envelope.id, again.envelope().id);
    });
}

#[test]
fn queue_depths_count_ready_and_dead_messages() {
    with_stores(|stores| async move {
        let queue = format!("rdq-test.depths.{}", unique());
        let store = stores.make(|_| {});
        let engine = engine(&store, policy());
        assert_eq!(store.depths(&queue).await.unwrap(), None, "no queue yet");
        for _ in 0..3 {
            engine.submit(task(&queue)).await.unwrap();
        }
        let depths = store.depths(&queue).await.unwrap().unwrap();
        assert_eq!((depths.ready, depths.dead), (3, 0));

        let claimed = engine.claim(&queue, 1, None).await.unwrap();
        assert_eq!(claimed.len(), 1);
        let c = &claimed[0];
        let failure = Settlement::Failure {
            error: ErrorInfo::new("test.Fatal", "no"),
            kind: FailureKind::Permanent,
        };
        engine.settle(&c.envelope, c.token, failure).await.unwrap();
        let depths = store.depths(&queue).await.unwrap().unwrap();
        // The consumer holds the other two unacked: not ready, not counted.
        assert_eq!(depths.dead, 1);
        assert!(depths.ready <= 2);
        assert_eq!(
            store.depths("Bad Name").await.unwrap_err().code(),
            "INVALID_QUEUE_NAME"
        );
    });
}
