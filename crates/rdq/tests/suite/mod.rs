//! The SDK's end-to-end suite, written once against [`Harness`] and run by
//! `tests/stores.rs` on every store. Real time (the embedded store does real
//! I/O), short delays, every wait bounded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdq::prelude::*;
use rdq::{
    DeadLetter, DeadLetterHook, Engine, Envelope, Error, QueuePolicy, ReaperConfig,
    VersionMismatch, WorkerBuilder,
};
use rdq_engine::{Backoff, ListOrder, ListQuery, SubmitRequest};
use rdq_envelope::{Outcome as AttemptOutcome, Status};

pub const WORK: &str = "e2e.work";
pub const API: &str = "e2e.api";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "e2e")]
pub enum App {
    Work,
    Api,
}

#[derive(Debug, Clone, Serialize, Deserialize, Job)]
#[job(queue = App::Work)]
pub struct Step {
    pub n: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, Job)]
#[job(queue = App::Work, name = "versioned", version = "v1")]
pub struct Versioned {
    pub n: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, Job)]
#[job(queue = App::Api)]
pub struct CallApi {
    pub fail: bool,
}

/// What the (simulated) API answers: a status, not an error.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiStatus {
    Ok,
    Failed(String),
}

#[derive(Debug, thiserror::Error)]
#[error("card declined by the issuer")]
pub struct CardDeclined;

/// One store under test, and what keeps it alive.
pub struct Harness {
    pub engine: Engine,
    _dir: Option<tempfile::TempDir>,
}

type Shared<T> = Arc<Mutex<Vec<T>>>;

fn shared<T>() -> Shared<T> {
    Arc::new(Mutex::new(Vec::new()))
}

impl Harness {
    pub fn memory() -> Self {
        Self {
            engine: rdq::open_memory(),
            _dir: None,
        }
    }

    pub fn embedded() -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self {
            engine: rdq::open_embedded(dir.path()).unwrap(),
            _dir: Some(dir),
        }
    }

    /// A fresh schema of its own on the local PostgreSQL, dropped afterwards.
    pub async fn postgres() -> Self {
        let store = rdq_store_postgres::PostgresStore::open_temporary(
            "postgres://postgres@127.0.0.1:5432/test",
        )
        .await
        .unwrap();
        Self {
            engine: Engine::new(Arc::new(store), Arc::new(rdq_engine::SystemClock)),
            _dir: None,
        }
    }

    pub async fn policy(&self, queue: &str, policy: QueuePolicy) {
        self.engine.set_policy(queue, &policy).await.unwrap();
    }

    pub fn producer(&self) -> Producer<App> {
        Producer::new(self.engine.clone())
    }

    pub fn worker(&self) -> WorkerBuilder<App> {
        Worker::<App>::builder(self.engine.clone())
            .poll_interval(Duration::from_millis(10))
            .reaper(Some(ReaperConfig {
                interval: Duration::from_millis(50),
                ..ReaperConfig::default()
            }))
    }

    pub async fn tasks(&self, queue: &str) -> Vec<Envelope> {
        self.engine
            .list(&ListQuery {
                queue: queue.into(),
                limit: 1000,
                order: ListOrder::OldestFirst,
                ..ListQuery::default()
            })
            .await
            .unwrap()
            .items
    }

    pub async fn task(&self, queue: &str, id: rdq::TaskId) -> Envelope {
        self.tasks(queue)
            .await
            .into_iter()
            .find(|e| e.id == id)
            .unwrap()
    }

    /// Polls `queue` until `done` holds (10 s at most).
    pub async fn until(&self, queue: &str, what: &str, done: impl Fn(&[Envelope]) -> bool) {
        for _ in 0..1500 {
            if done(&self.tasks(queue).await) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "{what}: not reached within 15 s; tasks: {:#?}",
            self.tasks(queue).await
        );
    }

    async fn submit_raw(&self, handler_ref: &str, payload: &[u8]) -> rdq::TaskId {
        self.engine
            .submit(SubmitRequest {
                queue: WORK.into(),
                handler_ref: handler_ref.into(),
                payload: payload.to_vec(),
                payload_content_type: "application/json".into(),
                ..SubmitRequest::default()
            })
            .await
            .unwrap()
            .envelope()
            .id
    }
}

fn no_backoff(max_attempts: u32) -> QueuePolicy {
    QueuePolicy {
        max_attempts,
        backoff: Backoff::None,
        ..QueuePolicy::default()
    }
}

fn all(status: Status, n: usize) -> impl Fn(&[Envelope]) -> bool {
    move |t| t.len() == n && t.iter().all(|e| e.status == status)
}

fn dead_hook(sink: &Shared<DeadLetter>) -> impl DeadLetterHook {
    let sink = Arc::clone(sink);
    move |dead: DeadLetter| {
        let sink = Arc::clone(&sink);
        async move { sink.lock().unwrap().push(dead) }
    }
}

const STOP: Duration = Duration::from_secs(5);

pub async fn jobs_run_once_and_see_their_context(h: Harness) {
    h.policy(WORK, no_backoff(4)).await;
    let producer = h.producer();
    let first = producer
        .enqueue_with(
            &Step { n: 1 },
            EnqueueOptions::now()
                .correlation_id("req-1")
                .header("tenant", "acme")
                .flow_key("tenant-acme")
                .priority(3),
        )
        .await
        .unwrap();
    assert!(!first.existing);
    let bad = producer
        .enqueue_with(&Step { n: 9 }, EnqueueOptions::now().flow_key("no spaces"))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), "INVALID_FIELD", "{bad}");
    for n in 2..=5 {
        producer.enqueue(&Step { n }).await.unwrap();
    }
    let seen: Shared<(u32, JobContext)> = shared();
    let sink = Arc::clone(&seen);
    let worker = h
        .worker()
        .handler_fn(move |job: Step, ctx: JobContext| {
            let sink = Arc::clone(&sink);
            async move {
                sink.lock().unwrap().push((job.n, ctx));
                Ok::<(), JobError>(())
            }
        })
        .build()
        .unwrap()
        .start();
    h.until(WORK, "all succeeded", all(Status::Succeeded, 5))
        .await;
    let report = worker.shutdown(STOP).await.unwrap();
    assert_eq!(report.succeeded, 5);
    let seen = seen.lock().unwrap();
    let mut runs: HashMap<u32, usize> = HashMap::new();
    for (n, _) in seen.iter() {
        *runs.entry(*n).or_default() += 1;
    }
    assert!(
        runs.values().all(|&r| r == 1),
        "each job ran once: {runs:?}"
    );
    let (_, ctx) = seen.iter().find(|(n, _)| *n == 1).unwrap();
    assert_eq!(ctx.task_id, first.id);
    assert_eq!(ctx.job_name, "step");
    assert_eq!(ctx.queue, WORK);
    assert_eq!(ctx.attempt, 1);
    assert_eq!(ctx.max_attempts, 4);
    assert!(!ctx.is_last_attempt());
    assert_eq!(ctx.deferrals, 0);
    assert_eq!(ctx.priority, 3);
    assert_eq!(ctx.correlation_id.as_deref(), Some("req-1"));
    assert_eq!(ctx.header("tenant"), Some("acme"));
    assert_eq!(ctx.header("rdq.correlation_id"), Some("req-1"));
    assert_eq!(ctx.header("rdq.flow_key"), Some("tenant-acme"));
    assert!(ctx.lease_deadline().is_some());
}

pub async fn a_failing_job_is_retried_until_it_succeeds(h: Harness) {
    h.policy(WORK, no_backoff(5)).await;
    let id = h.producer().enqueue(&Step { n: 1 }).await.unwrap().id;
    let worker = h
        .worker()
        .handler_fn(|_job: Step, ctx: JobContext| async move {
            if ctx.attempt <= 2 {
                return Err(JobError::new("test.Flaky", "connection reset"));
            }
            Ok(())
        })
        .build()
        .unwrap()
        .start();
    h.until(WORK, "succeeded", all(Status::Succeeded, 1)).await;
    let report = worker.shutdown(STOP).await.unwrap();
    assert_eq!((report.retried, report.succeeded), (2, 1));
    let env = h.task(WORK, id).await;
    assert_eq!(env.attempt_count, 3);
    assert_eq!(env.attempts.len(), 3);
    for failed in &env.attempts[..2] {
        assert_eq!(failed.outcome, Some(AttemptOutcome::RetryableFailure));
        let error = failed.error.as_ref().unwrap();
        assert_eq!(error.error_type, "test.Flaky");
        assert_eq!(error.message, "connection reset");
    }
    assert_eq!(env.attempts[2].outcome, Some(AttemptOutcome::Success));
}

pub async fn a_permanent_failure_dead_letters_at_once_and_tells_the_hook(h: Harness) {
    h.policy(WORK, no_backoff(10)).await;
    let id = h.producer().enqueue(&Step { n: 1 }).await.unwrap().id;
    let dead = shared();
    let worker = h
        .worker()
        .handler_fn(|_job: Step, _ctx: JobContext| async move {
            Err::<(), _>(rdq::permanent(CardDeclined))
        })
        .on_dead_letter(dead_hook(&dead))
        .build()
        .unwrap()
        .start();
    h.until(WORK, "dead", all(Status::Dead, 1)).await;
    let report = worker.shutdown(STOP).await.unwrap();
    assert_eq!(report.dead_lettered, 1);
    let env = h.task(WORK, id).await;
    assert_eq!(
        env.attempt_count, 1,
        "a permanent failure spends no more attempts"
    );
    let last = env.attempts.last().unwrap();
    assert_eq!(last.outcome, Some(AttemptOutcome::PermanentFailure));
    let error = last.error.as_ref().unwrap();
    assert_eq!(error.error_type, "stores::suite::CardDeclined");
    assert_eq!(error.message, "card declined by the issuer");
    let dead = dead.lock().unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].cause, DeadLetterCause::PermanentFailure);
    assert_eq!(dead[0].envelope.id, id);
    assert_eq!(dead[0].envelope.status, Status::Dead);
    assert_eq!(dead[0].error().unwrap().error_type, error.error_type);
    let reason = dead[0].reason().expect("the reason is recorded");
    assert_eq!(
        (reason.code.as_str(), reason.by.as_str()),
        ("PERMANENT_FAILURE", "worker")
    );
}

pub async fn a_cancelled_job_never_runs_and_says_why_it_is_dead(h: Harness) {
    h.policy(WORK, no_backoff(10)).await;
    let keep = h.producer().enqueue(&Step { n: 1 }).await.unwrap().id;
    let drop = h.producer().enqueue(&Step { n: 2 }).await.unwrap().id;
    let cancelled = h
        .producer()
        .cancel(App::Work, &[drop], "billing-service", "order withdrawn")
        .await
        .unwrap();
    if !h.producer().engine().capabilities().cancel {
        return;
    }
    assert_eq!(cancelled.ids, vec![drop]);
    let again = h
        .producer()
        .cancel(App::Work, &[drop], "billing-service", "twice")
        .await
        .unwrap();
    assert!(again.ids.is_empty(), "a dead task is not cancelled again");
    let ran = shared();
    let sink = Arc::clone(&ran);
    let worker = h
        .worker()
        .handler_fn(move |job: Step, _ctx: JobContext| {
            let sink = Arc::clone(&sink);
            async move {
                sink.lock().unwrap().push(job.n);
                Ok::<(), rdq::JobError>(())
            }
        })
        .build()
        .unwrap()
        .start();
    h.until(WORK, "the other job done", |t| {
        t.iter()
            .any(|e| e.id == keep && e.status == Status::Succeeded)
    })
    .await;
    worker.shutdown(STOP).await.unwrap();
    assert_eq!(*ran.lock().unwrap(), vec![1], "only the job kept ran");
    assert_eq!(h.task(WORK, keep).await.status, Status::Succeeded);
    let env = h.task(WORK, drop).await;
    assert_eq!(env.status, Status::Dead);
    let reason = env.dead_reason.unwrap();
    assert_eq!(reason.code, "CANCELLED");
    assert_eq!(reason.by, "billing-service");
    assert_eq!(reason.message.as_deref(), Some("order withdrawn"));
}

pub async fn a_running_job_hears_of_its_cancel_and_is_not_retried(h: Harness) {
    h.policy(WORK, no_backoff(10)).await;
    if !h.producer().engine().capabilities().cancel {
        return;
    }
    let stops = h.producer().enqueue(&Step { n: 1 }).await.unwrap().id;
    let stubborn = h.producer().enqueue(&Step { n: 2 }).await.unwrap().id;
    let heard: Shared<(u32, String)> = shared();
    let sink = Arc::clone(&heard);
    let worker = h
        .worker()
        .cancel_grace(Duration::from_millis(300))
        .handler_fn(move |job: Step, ctx: JobContext| {
            let sink = Arc::clone(&sink);
            async move {
                if job.n == 2 {
                    // Ignores the cancel: stopped after the grace.
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    return Ok::<(), JobError>(());
                }
                ctx.cancelled().await;
                let by = ctx
                    .cancel_request()
                    .map(|r| r.by.clone())
                    .unwrap_or_default();
                sink.lock().unwrap().push((job.n, by));
                assert!(ctx.is_cancelled());
                Err(JobError::new("app.Stopped", "stopped on request"))
            }
        })
        .build()
        .unwrap()
        .start();
    h.until(WORK, "both running", all(Status::InFlight, 2))
        .await;
    let asked = h
        .producer()
        .cancel(App::Work, &[stops, stubborn], "ops", "order withdrawn")
        .await
        .unwrap();
    assert_eq!(asked.running.len(), 2, "both were running");
    h.until(WORK, "both dead", all(Status::Dead, 2)).await;
    worker.shutdown(STOP).await.unwrap();
    assert_eq!(*heard.lock().unwrap(), vec![(1, "ops".to_owned())]);
    for id in [stops, stubborn] {
        let env = h.task(WORK, id).await;
        let reason = env.dead_reason.as_ref().unwrap();
        assert_eq!(
            (reason.code.as_str(), reason.by.as_str()),
            ("CANCELLED", "ops")
        );
        assert_eq!(env.attempt_count, 1, "no retry");
    }
    let stopped = h.task(WORK, stubborn).await;
    assert_eq!(
        stopped.last_error().unwrap().error_type,
        rdq::error_types::CANCELLED
    );
}

pub async fn a_live_handler_keeps_its_lease_by_heartbeat(h: Harness) {
    h.policy(
        WORK,
        QueuePolicy {
            lease_ms: 300,
            ..no_backoff(1)
        },
    )
    .await;
    let id = h.producer().enqueue(&Step { n: 1 }).await.unwrap().id;
    let worker = h
        .worker()
        .handler_fn(|_job: Step, _ctx: JobContext| async move {
            // Four times the lease, without touching it.
            tokio::time::sleep(Duration::from_millis(1200)).await;
            Ok::<(), JobError>(())
        })
        .build()
        .unwrap()
        .start();
    h.until(WORK, "succeeded", all(Status::Succeeded, 1)).await;
    let report = worker.shutdown(STOP).await.unwrap();
    assert_eq!(report.lease_overruns, 0);
    assert_eq!(h.task(WORK, id).await.attempt_count, 1);
}

pub async fn schedules_declared_in_code_fire_and_undeclared_ones_are_reported(h: Harness) {
    if !h.producer().engine().capabilities().schedules {
        return;
    }
    h.policy(WORK, no_backoff(3)).await;
    // What an earlier deploy declared, and this one no longer does.
    let old = rdq::Schedule::every("e2e.old", 3_600_000, rdq::TaskTemplate::new(WORK, "step"));
    h.engine
        .put_schedule(old, rdq_engine::ScheduleOwner::Code)
        .await
        .unwrap();
    let ran = shared();
    let sink = Arc::clone(&ran);
    let tick = rdq::Schedule::every(
        "e2e.tick",
        200,
        rdq::TaskTemplate::new(WORK, "step").payload(br#"{"n":7}"#.to_vec(), "application/json"),
    );
    let bad = rdq::Schedule::cron(
        "e2e.bad",
        "61 * * * *",
        rdq::TaskTemplate::new(WORK, "step"),
    );
    let refused = h
        .worker()
        .schedule(bad)
        .handler_fn(|_job: Step, _ctx: JobContext| async move { Ok::<(), JobError>(()) })
        .build()
        .map(|_| ())
        .unwrap_err();
    assert_eq!(refused.code(), "INVALID_CRON");
    let worker = h
        .worker()
        .schedule(tick)
        .scheduler(Some(rdq::SchedulerConfig {
            interval: Duration::from_millis(50),
        }))
        .handler_fn(move |job: Step, ctx: JobContext| {
            let sink = Arc::clone(&sink);
            async move {
                sink.lock()
                    .unwrap()
                    .push((job.n, ctx.header("rdq.schedule").map(str::to_owned)));
                Ok::<(), JobError>(())
            }
        })
        .build()
        .unwrap()
        .start();
    for _ in 0..300 {
        if ran.lock().unwrap().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(worker.undeclared_schedules(), vec!["e2e.old".to_owned()]);
    worker.shutdown(STOP).await.unwrap();
    let ran = ran.lock().unwrap().clone();
    assert!(ran.len() >= 3, "the declared schedule fires: {ran:?}");
    assert!(
        ran.iter()
            .all(|(n, s)| *n == 7 && s.as_deref() == Some("e2e.tick"))
    );
    let info = h.engine.get_schedule("e2e.tick").await.unwrap();
    assert_eq!(info.owner, rdq_engine::ScheduleOwner::Code);
    assert!(
        h.engine.get_schedule("e2e.old").await.is_ok(),
        "reported, not deleted"
    );
}

pub async fn exhausted_attempts_dead_letter_under_the_worker_override(h: Harness) {
    h.policy(WORK, no_backoff(10)).await;
    let id = h.producer().enqueue(&Step { n: 1 }).await.unwrap().id;
    let dead = shared();
    let seen: Shared<(u32, u32, bool)> = shared();
    let sink = Arc::clone(&seen);
    let worker = h
        .worker()
        .retry_override(App::Work, RetryPolicy::immediate(2))
        .handler_fn(move |_job: Step, ctx: JobContext| {
            let sink = Arc::clone(&sink);
            async move {
                sink.lock()
                    .unwrap()
                    .push((ctx.attempt, ctx.max_attempts, ctx.is_last_attempt()));
                Err::<(), _>(JobError::new("test.Down", "downstream is down"))
            }
        })
        .on_dead_letter(dead_hook(&dead))
        .build()
        .unwrap()
        .start();
    h.until(WORK, "dead", all(Status::Dead, 1)).await;
    worker.shutdown(STOP).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![(1, 2, false), (2, 2, true)]);
    let env = h.task(WORK, id).await;
    assert_eq!(env.attempt_count, 2, "the override, not the queue's 10");
    assert_eq!(
        env.attempts.last().unwrap().outcome,
        Some(AttemptOutcome::RetryableFailure)
    );
    let dead = dead.lock().unwrap();
    assert_eq!(dead[0].cause, DeadLetterCause::AttemptsExhausted);
    assert_eq!(dead[0].max_attempts, 2);
}

pub async fn a_task_without_a_handler_is_dead_lettered_not_looped(h: Harness) {
    h.policy(WORK, no_backoff(10)).await;
    let id = h.submit_raw("ghost", b"{}").await;
    let dead = shared();
    let worker = h
        .worker()
        .handler_fn(|_job: Step, _ctx: JobContext| async move { Ok::<(), JobError>(()) })
        .on_dead_letter(dead_hook(&dead))
        .build()
        .unwrap()
        .start();
    h.until(WORK, "dead", all(Status::Dead, 1)).await;
    worker.shutdown(STOP).await.unwrap();
    let env = h.task(WORK, id).await;
    assert_eq!(env.attempt_count, 1, "never loops");
    let last = env.attempts.last().unwrap();
    assert_eq!(last.outcome, Some(AttemptOutcome::PermanentFailure));
    assert_eq!(
        last.error.as_ref().unwrap().error_type,
        rdq::error_types::NO_HANDLER
    );
    assert!(last.error.as_ref().unwrap().message.contains("ghost"));
    assert_eq!(dead.lock().unwrap()[0].cause, DeadLetterCause::NoHandler);
}

pub async fn an_undecodable_payload_is_dead_lettered_not_looped(h: Harness) {
    h.policy(WORK, no_backoff(10)).await;
    let id = h.submit_raw("step", b"{\"n\": \"not a number\"}").await;
    let dead = shared();
    let worker = h
        .worker()
        .handler_fn(|_job: Step, _ctx: JobContext| async move { Ok::<(), JobError>(()) })
        .on_dead_letter(dead_hook(&dead))
        .build()
        .unwrap()
        .start();
    h.until(WORK, "dead", all(Status::Dead, 1)).await;
    worker.shutdown(STOP).await.unwrap();
    let env = h.task(WORK, id).await;
    assert_eq!(env.attempt_count, 1, "never loops");
    let error = env.last_error().unwrap();
    assert_eq!(error.error_type, rdq::error_types::UNDECODABLE_PAYLOAD);
    assert!(error.message.contains("invalid type"), "{}", error.message);
    assert_eq!(
        dead.lock().unwrap()[0].cause,
        DeadLetterCause::UndecodablePayload
    );
}

pub async fn a_handler_deferral_spends_no_attempt_and_returns_at_top_priority(h: Harness) {
    h.policy(
        WORK,
        QueuePolicy {
            max_priority: 7,
            ..no_backoff(3)
        },
    )
    .await;
    let id = h.producer().enqueue(&Step { n: 1 }).await.unwrap().id;
    let seen: Shared<(u32, u32, u8)> = shared();
    let sink = Arc::clone(&seen);
    let worker = h
        .worker()
        .handler_fn(move |_job: Step, ctx: JobContext| {
            let sink = Arc::clone(&sink);
            async move {
                sink.lock()
                    .unwrap()
                    .push((ctx.attempt, ctx.deferrals, ctx.priority));
                if ctx.deferrals == 0 {
                    return Err(rdq::defer(Duration::from_millis(50)));
                }
                Ok(())
            }
        })
        .build()
        .unwrap()
        .start();
    h.until(WORK, "succeeded", all(Status::Succeeded, 1)).await;
    let report = worker.shutdown(STOP).await.unwrap();
    assert_eq!(report.deferred, 1);
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(1, 0, 0), (1, 1, 7)],
        "same attempt, one deferral, back at max_priority"
    );
    let env = h.task(WORK, id).await;
    assert_eq!((env.attempt_count, env.deferral_count), (1, 1));
    assert_eq!(
        env.attempts.len(),
        1,
        "the deferred claim left no attempt record"
    );
}

pub async fn a_producer_deferral_runs_ahead_of_the_backlog(h: Harness) {
    h.policy(WORK, no_backoff(3)).await;
    let producer = h.producer();
    for n in 1..=3 {
        producer.enqueue(&Step { n }).await.unwrap();
    }
    let later = producer
        .enqueue_after(&Step { n: 50 }, Duration::from_millis(100))
        .await
        .unwrap();
    let deferred = producer
        .defer(&Step { n: 99 }, Duration::from_millis(100))
        .await
        .unwrap();
    let held = h.task(WORK, deferred.id).await;
    assert_eq!(held.priority, QueuePolicy::default().max_priority);
    assert_eq!(
        held.deferral_count, 0,
        "the producer's deferral is not a run"
    );
    assert_eq!(
        held.headers.get("rdq.base_priority").map(String::as_str),
        Some("0")
    );
    assert!(held.next_attempt_at.unwrap() >= held.created_at.plus_ms(100));
    let after = h.task(WORK, later.id).await;
    assert_eq!(after.priority, 0);
    assert!(after.next_attempt_at.unwrap() >= after.created_at.plus_ms(100));

    tokio::time::sleep(Duration::from_millis(150)).await;
    let order: Shared<u32> = shared();
    let sink = Arc::clone(&order);
    let worker = h
        .worker()
        .concurrency(1)
        .claim_batch(1)
        .handler_fn(move |job: Step, _ctx: JobContext| {
            let sink = Arc::clone(&sink);
            async move {
                sink.lock().unwrap().push(job.n);
                Ok::<(), JobError>(())
            }
        })
        .build()
        .unwrap()
        .start();
    h.until(WORK, "all succeeded", all(Status::Succeeded, 5))
        .await;
    worker.shutdown(STOP).await.unwrap();
    assert_eq!(*order.lock().unwrap(), vec![99, 1, 2, 3, 50]);
}

pub async fn enqueue_many_and_idempotency_keys(h: Harness) {
    let producer = h.producer();
    let steps: Vec<Step> = (0..50).map(|n| Step { n }).collect();
    let results = producer.enqueue_many(&steps).await;
    assert_eq!(results.len(), 50);
    let mut ids: Vec<_> = results.into_iter().map(|r| r.unwrap().id).collect();
    ids.dedup();
    assert_eq!(ids.len(), 50);

    let mut batch = producer.batch();
    batch
        .add(&Step { n: 100 })
        .add_with(&CallApi { fail: false }, EnqueueOptions::now().priority(2));
    assert_eq!(batch.len(), 2);
    let mixed = batch.submit().await;
    assert!(mixed.iter().all(Result::is_ok));
    let api = h.tasks(API).await;
    assert_eq!((api.len(), api[0].priority), (1, 2));

    let keyed = EnqueueOptions::now().idempotency_key("order-42");
    let first = producer
        .enqueue_with(&Step { n: 42 }, keyed.clone())
        .await
        .unwrap();
    let again = producer.enqueue_with(&Step { n: 43 }, keyed).await.unwrap();
    assert!(!first.existing);
    assert!(again.existing);
    assert_eq!(first.id, again.id);
    assert_eq!(h.tasks(WORK).await.len(), 52);
}

pub async fn a_unique_key_has_one_holder_at_a_time(h: Harness) {
    let producer = h.producer();
    let unique = EnqueueOptions::now().unique(rdq::UniqueRequest {
        key_from: vec!["/n".into()],
        hold: rdq::Hold::UntilFinished,
        ..rdq::UniqueRequest::default()
    });
    let first = producer
        .enqueue_with(&Step { n: 7 }, unique.clone())
        .await
        .unwrap();
    let held = producer
        .enqueue_with(&Step { n: 7 }, unique.clone())
        .await
        .unwrap_err();
    assert_eq!(held.code(), "UNIQUE_HELD");
    assert!(
        matches!(&held, Error::Engine(rdq_engine::EngineError::UniqueHeld { holder, .. }) if *holder == first.id),
        "{held:?}"
    );
    // Another value of the field is another key.
    producer
        .enqueue_with(&Step { n: 8 }, unique.clone())
        .await
        .unwrap();
    // Replace: the waiting holder takes the new payload.
    let replaced = producer
        .enqueue_with(
            &Step { n: 7 },
            EnqueueOptions::now().unique(rdq::UniqueRequest {
                key_from: vec!["/n".into()],
                on_conflict: rdq::OnConflict::Replace,
                ..rdq::UniqueRequest::default()
            }),
        )
        .await
        .unwrap();
    assert!(replaced.existing);
    assert_eq!(replaced.id, first.id);
    assert_eq!(h.tasks(WORK).await.len(), 2);
}

pub async fn bad_submits_are_refused_with_their_codes(h: Harness) {
    let producer = h.producer();
    let reserved = producer
        .enqueue_with(
            &Step { n: 1 },
            EnqueueOptions::now().header("rdq.trace", "x"),
        )
        .await
        .unwrap_err();
    assert_eq!(reserved.code(), "RESERVED_HEADER");
    let too_high = producer
        .enqueue_with(&Step { n: 1 }, EnqueueOptions::now().priority(200))
        .await
        .unwrap_err();
    assert!(matches!(too_high, Error::InvalidPriority { max: 9, .. }));
    assert_eq!(too_high.code(), "INVALID_PRIORITY");
    assert!(h.tasks(WORK).await.is_empty(), "nothing was stored");
}

pub async fn a_panicking_handler_is_a_retryable_failure(h: Harness) {
    h.policy(WORK, no_backoff(3)).await;
    let id = h.producer().enqueue(&Step { n: 1 }).await.unwrap().id;
    let worker = h
        .worker()
        .handler_fn(|_job: Step, ctx: JobContext| async move {
            if ctx.attempt == 1 {
                panic!("boom");
            }
            Ok::<(), JobError>(())
        })
        .build()
        .unwrap()
        .start();
    h.until(WORK, "succeeded", all(Status::Succeeded, 1)).await;
    let report = worker.shutdown(STOP).await.unwrap();
    assert_eq!(report.panicked, 1);
    let env = h.task(WORK, id).await;
    let first = &env.attempts[0];
    assert_eq!(first.outcome, Some(AttemptOutcome::RetryableFailure));
    assert_eq!(
        first.error.as_ref().unwrap().error_type,
        rdq::error_types::PANIC
    );
    assert_eq!(first.error.as_ref().unwrap().message, "boom");
}

pub async fn handler_version_mismatch_follows_the_queue_policy(h: Harness) {
    let runs: Shared<u32> = shared();
    let start = |h: &Harness, runs: &Shared<u32>| {
        let sink = Arc::clone(runs);
        h.worker()
            .version_requeue_delay(Duration::from_millis(30))
            .handler_fn(move |job: Versioned, _ctx: JobContext| {
                let sink = Arc::clone(&sink);
                async move {
                    sink.lock().unwrap().push(job.n);
                    Ok::<(), JobError>(())
                }
            })
            .build()
            .unwrap()
            .start()
    };
    let producer = h.producer();
    let v2 = || EnqueueOptions::now().handler_version("v2");

    // dead: the mismatched task is dead-lettered; a matching one runs.
    h.policy(
        WORK,
        QueuePolicy {
            handler_version_mismatch: VersionMismatch::Dead,
            ..no_backoff(5)
        },
    )
    .await;
    let stamped = producer.enqueue(&Versioned { n: 1 }).await.unwrap().id;
    assert_eq!(
        h.task(WORK, stamped).await.handler_version.as_deref(),
        Some("v1"),
        "the job's VERSION is stamped"
    );
    let wrong = producer
        .enqueue_with(&Versioned { n: 2 }, v2())
        .await
        .unwrap()
        .id;
    let worker = start(&h, &runs);
    h.until(WORK, "both settled", |t| {
        t.iter().all(|e| e.status.is_terminal())
    })
    .await;
    worker.shutdown(STOP).await.unwrap();
    let dead = h.task(WORK, wrong).await;
    assert_eq!(dead.status, Status::Dead);
    assert_eq!(
        dead.last_error().unwrap().error_type,
        rdq::error_types::HANDLER_VERSION_MISMATCH
    );
    assert_eq!(h.task(WORK, stamped).await.status, Status::Succeeded);

    // run: it runs anyway.
    h.policy(WORK, no_backoff(5)).await;
    let ran = producer
        .enqueue_with(&Versioned { n: 3 }, v2())
        .await
        .unwrap()
        .id;
    let worker = start(&h, &runs);
    h.until(WORK, "ran", |t| {
        t.iter()
            .any(|e| e.id == ran && e.status == Status::Succeeded)
    })
    .await;
    worker.shutdown(STOP).await.unwrap();

    // requeue: put back (deferred) again and again, never run, never dead.
    h.policy(
        WORK,
        QueuePolicy {
            handler_version_mismatch: VersionMismatch::Requeue,
            ..no_backoff(5)
        },
    )
    .await;
    let requeued = producer
        .enqueue_with(&Versioned { n: 4 }, v2())
        .await
        .unwrap()
        .id;
    let worker = start(&h, &runs);
    h.until(WORK, "requeued twice", |t| {
        t.iter().any(|e| e.id == requeued && e.deferral_count >= 2)
    })
    .await;
    worker.shutdown(STOP).await.unwrap();
    let env = h.task(WORK, requeued).await;
    assert_eq!(env.status, Status::Pending);
    assert_eq!(env.attempt_count, 0, "requeues spend no attempt");
    assert_eq!(*runs.lock().unwrap(), vec![1, 3]);
}

pub async fn an_overrun_lease_is_recorded_and_reported_as_lease_expired(h: Harness) {
    h.policy(WORK, no_backoff(1)).await;
    let id = h.producer().enqueue(&Step { n: 1 }).await.unwrap().id;
    let dead = shared();
    let worker = h
        .worker()
        .job_timeout(Duration::from_millis(100))
        .handler_fn(|_job: Step, _ctx: JobContext| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<(), JobError>(())
        })
        .on_dead_letter(dead_hook(&dead))
        .build()
        .unwrap()
        .start();
    h.until(WORK, "dead", all(Status::Dead, 1)).await;
    for _ in 0..200 {
        if !dead.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let report = worker.shutdown(STOP).await.unwrap();
    assert_eq!(report.lease_overruns, 1);
    let env = h.task(WORK, id).await;
    assert_eq!(
        env.attempts.last().unwrap().outcome,
        Some(AttemptOutcome::LeaseExpired)
    );
    assert_eq!(
        env.last_error().unwrap().error_type,
        rdq::error_types::LEASE_EXPIRED
    );
    let dead = dead.lock().unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].cause, DeadLetterCause::LeaseExpired);
}

pub async fn extending_the_lease_keeps_a_long_job_alive(h: Harness) {
    h.policy(WORK, no_backoff(1)).await;
    let id = h.producer().enqueue(&Step { n: 1 }).await.unwrap().id;
    let worker = h
        .worker()
        .job_timeout(Duration::from_millis(1000))
        .handler_fn(|_job: Step, ctx: JobContext| async move {
            // Runs 1.5 s on a 1 s lease, extending it every 300 ms.
            let first = ctx.lease_deadline().unwrap();
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                ctx.extend_lease(Duration::from_millis(1000)).await?;
            }
            assert!(ctx.lease_deadline().unwrap() > first);
            Ok::<(), JobError>(())
        })
        .build()
        .unwrap()
        .start();
    h.until(WORK, "succeeded", all(Status::Succeeded, 1)).await;
    let report = worker.shutdown(STOP).await.unwrap();
    assert_eq!(report.lease_overruns, 0);
    assert_eq!(h.task(WORK, id).await.attempt_count, 1);
}

pub async fn an_outcome_mapper_turns_a_returned_status_into_a_dead_letter(h: Harness) {
    h.policy(API, no_backoff(5)).await;
    let producer = h.producer();
    let ok = producer.enqueue(&CallApi { fail: false }).await.unwrap().id;
    let failed = producer.enqueue(&CallApi { fail: true }).await.unwrap().id;
    let worker = h
        .worker()
        .handler_fn(|job: CallApi, _ctx: JobContext| async move {
            Ok::<_, JobError>(if job.fail {
                ApiStatus::Failed("insufficient funds".into())
            } else {
                ApiStatus::Ok
            })
        })
        .outcome_mapper(
            App::Api,
            |returned: Returned<'_>, _ctx: &JobContext| match returned.value::<ApiStatus>() {
                Some(ApiStatus::Ok) => Outcome::Success,
                Some(ApiStatus::Failed(why)) => Outcome::permanent("api.Rejected", why)
                    .with_detail(serde_json::json!({"status": "FAILED", "reason": why})),
                None => Outcome::Unmapped,
            },
        )
        .build()
        .unwrap()
        .start();
    h.until(API, "both settled", |t| {
        t.len() == 2 && t.iter().all(|e| e.status.is_terminal())
    })
    .await;
    worker.shutdown(STOP).await.unwrap();
    assert_eq!(h.task(API, ok).await.status, Status::Succeeded);
    let dead = h.task(API, failed).await;
    assert_eq!((dead.status, dead.attempt_count), (Status::Dead, 1));
    let error = dead.last_error().unwrap();
    assert_eq!(error.error_type, "api.Rejected");
    assert_eq!(error.message, "insufficient funds");
    assert_eq!(
        error.detail,
        Some(serde_json::json!({"status": "FAILED", "reason": "insufficient funds"}))
    );
}

pub async fn graceful_shutdown_under_load_loses_nothing(h: Harness) {
    h.policy(WORK, no_backoff(3)).await;
    const TOTAL: usize = 300;
    let steps: Vec<Step> = (1..=TOTAL as u32).map(|n| Step { n }).collect();
    assert!(
        h.producer()
            .enqueue_many(&steps)
            .await
            .iter()
            .all(Result::is_ok)
    );
    let worker = h
        .worker()
        .concurrency(16)
        .handler_fn(|job: Step, _ctx: JobContext| async move {
            // Every tenth job outlives the shutdown deadline.
            let ms = if job.n.is_multiple_of(10) {
                60_000
            } else {
                u64::from(job.n % 7)
            };
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<(), JobError>(())
        })
        .build()
        .unwrap()
        .start();
    h.until(WORK, "a third done", |t| {
        t.iter().filter(|e| e.status == Status::Succeeded).count() >= TOTAL / 3
    })
    .await;
    let report = worker.shutdown(Duration::from_millis(100)).await.unwrap();
    assert!(
        report.released >= 1,
        "long jobs were handed back: {report:?}"
    );

    let tasks = h.tasks(WORK).await;
    let now = h.engine.now();
    let count = |s: Status| tasks.iter().filter(|e| e.status == s).count();
    assert_eq!(tasks.len(), TOTAL);
    assert_eq!(count(Status::InFlight), 0, "nothing left claimed");
    assert_eq!(count(Status::Dead), 0);
    assert_eq!(count(Status::Succeeded) + count(Status::Pending), TOTAL);
    assert_eq!(count(Status::Succeeded) as u64, report.succeeded);
    for pending in tasks.iter().filter(|e| e.status == Status::Pending) {
        assert!(
            pending.next_attempt_at.unwrap() <= now,
            "visible again at once"
        );
        assert_eq!(pending.attempt_count, 0, "a hand-back spends no attempt");
    }

    // Another worker takes over and finishes everything.
    let worker = h
        .worker()
        .concurrency(16)
        .handler_fn(|_job: Step, _ctx: JobContext| async move { Ok::<(), JobError>(()) })
        .build()
        .unwrap()
        .start();
    h.until(WORK, "all succeeded", all(Status::Succeeded, TOTAL))
        .await;
    worker.shutdown(STOP).await.unwrap();
}

/// `rdq::throttle` defers the job and, on a store that declares
/// `claim_flow`, holds back every task of its flow key until then while
/// other keys keep running.
pub async fn a_throttled_job_holds_back_its_flow_key(h: Harness) {
    let throttles = h.engine.capabilities().claim_flow;
    let mut policy = no_backoff(4);
    if throttles {
        // Throttles hold on queues with flow control.
        policy.flow = serde_json::from_value(serde_json::json!({"fairness": "weighted"})).unwrap();
    }
    h.policy(WORK, policy).await;
    let producer = h.producer();
    let keyed = |key: &str| EnqueueOptions::now().flow_key(key);
    let first = producer
        .enqueue_with(&Step { n: 1 }, keyed("slow"))
        .await
        .unwrap();
    let worker = h
        .worker()
        .handler_fn(move |job: Step, _ctx: JobContext| async move {
            if job.n == 1 {
                return Err(rdq::throttle(Duration::from_secs(60)));
            }
            Ok::<(), JobError>(())
        })
        .build()
        .unwrap()
        .start();
    h.until(WORK, "deferred", |t| {
        t.iter().any(|e| e.id == first.id && e.deferral_count == 1)
    })
    .await;
    let held = producer
        .enqueue_with(&Step { n: 2 }, keyed("slow"))
        .await
        .unwrap();
    let other = producer
        .enqueue_with(&Step { n: 3 }, keyed("fast"))
        .await
        .unwrap();
    h.until(WORK, "the other key ran", |t| {
        t.iter()
            .any(|e| e.id == other.id && e.status == Status::Succeeded)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let tasks = h.tasks(WORK).await;
    let held_now = tasks.iter().find(|e| e.id == held.id).unwrap();
    if throttles {
        assert_eq!(
            held_now.status,
            Status::Pending,
            "the throttled key's next task waits"
        );
        let status = h.engine.flow_status(WORK).await.unwrap();
        let slow = status.keys.iter().find(|k| k.key == "slow").unwrap();
        assert!(slow.blocked_until.is_some(), "{status:?}");
    } else {
        assert_eq!(
            held_now.status,
            Status::Succeeded,
            "only the job was deferred"
        );
    }
    worker.shutdown(STOP).await.unwrap();
}
