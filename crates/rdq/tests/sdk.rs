//! The SDK's semantics in virtual time on the test backend: the outcome
//! ladder rung by rung, the `error_type` each kind of error records, retry
//! precedence, deferrals and the backend's own inspection helpers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::error::Error as StdError;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdq::prelude::*;
use rdq::testing::TestBackend;
use rdq::{Backoff, DeadLetterCause, Error, Forced, QueuePolicy, WorkerHandle};
use rdq_envelope::{Outcome as AttemptOutcome, Status};
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "t")]
enum App {
    Payments,
    #[queue(name = "hooks.out")]
    Webhooks,
}

const PAYMENTS: &str = "t.payments";
const WEBHOOKS: &str = "t.hooks.out";

/// What each test's handler does with a charge.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
enum Act {
    Ok,
    Status(bool),
    Declined,
    DeclinedPermanent,
    DeclinedRetryable,
    AlreadyProcessed,
    WrappedTimeout,
    Timeout,
    Other,
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = App::Payments)]
struct Charge {
    act: Act,
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = App::Webhooks, retry(max_attempts = 4, backoff = "fixed", delay_ms = 60000))]
struct Deliver {
    endpoint: String,
}

#[derive(Debug, thiserror::Error)]
#[error("card declined")]
struct CardDeclined;

#[derive(Debug, thiserror::Error)]
#[error("payment already processed")]
struct AlreadyProcessed;

#[derive(Debug, thiserror::Error)]
#[error("gateway timed out")]
struct GatewayTimeout;

/// A domain error wrapping its cause, so classifiers must walk `source()`.
#[derive(Debug, thiserror::Error)]
#[error("charge failed")]
struct ChargeFailed(#[source] GatewayTimeout);

#[derive(Debug, thiserror::Error)]
#[error("something else")]
struct Other;

async fn charge(job: Charge, _ctx: JobContext) -> Result<bool, JobError> {
    match job.act {
        Act::Ok => Ok(true),
        Act::Status(ok) => Ok(ok),
        Act::Declined => Err(CardDeclined.into()),
        Act::DeclinedPermanent => Err(rdq::permanent(CardDeclined)),
        Act::DeclinedRetryable => Err(rdq::retryable(CardDeclined)),
        Act::AlreadyProcessed => Err(rdq::permanent(AlreadyProcessed)),
        Act::WrappedTimeout => Err(ChargeFailed(GatewayTimeout).into()),
        Act::Timeout => Err(GatewayTimeout.into()),
        Act::Other => Err(Other.into()),
    }
}

async fn backend(policy: QueuePolicy) -> TestBackend {
    let backend = TestBackend::new();
    backend.set_policy(PAYMENTS, &policy).await.unwrap();
    backend.set_policy(WEBHOOKS, &policy).await.unwrap();
    backend
}

fn policy(max_attempts: u32) -> QueuePolicy {
    QueuePolicy {
        max_attempts,
        backoff: Backoff::None,
        ..QueuePolicy::default()
    }
}

/// Runs one charge through `worker` and returns the task as it ended.
async fn run_one(
    backend: &TestBackend,
    worker: rdq::WorkerBuilder<App>,
    act: Act,
) -> rdq::Envelope {
    let id = backend
        .producer::<App>()
        .enqueue(&Charge { act })
        .await
        .unwrap()
        .id;
    let handle = worker.handler_fn(charge).build().unwrap().start();
    assert!(
        backend
            .wait_until_settled(PAYMENTS, Duration::from_secs(60))
            .await
    );
    handle.shutdown(Duration::from_secs(1)).await.unwrap();
    backend.task(id).await.unwrap()
}

fn last_outcome(env: &rdq::Envelope) -> (Status, Option<AttemptOutcome>, u32) {
    (
        env.status,
        env.attempts.last().and_then(|a| a.outcome),
        env.attempt_count,
    )
}

const DEAD_AT_ONCE: (Status, Option<AttemptOutcome>, u32) =
    (Status::Dead, Some(AttemptOutcome::PermanentFailure), 1);

fn status_mapper(returned: Returned<'_>, _ctx: &JobContext) -> Outcome {
    if returned
        .error()
        .is_some_and(|e| e.find::<AlreadyProcessed>().is_some())
    {
        return Outcome::Success;
    }
    match returned.value::<bool>() {
        Some(true) => Outcome::Success,
        Some(false) => Outcome::permanent("payments.Refused", "the gateway answered false")
            .with_detail(json!({"returned": false})),
        None => Outcome::Unmapped,
    }
}

// --- Rung 1: the OutcomeMapper -------------------------------------------

#[tokio::test(start_paused = true)]
async fn rung1_a_mapper_turns_a_false_return_into_a_meaningful_dead_letter() {
    let backend = backend(policy(5)).await;
    let worker = backend
        .worker::<App>()
        .outcome_mapper(App::Payments, status_mapper);
    let env = run_one(&backend, worker, Act::Status(false)).await;
    assert_eq!(last_outcome(&env), DEAD_AT_ONCE);
    let dead = backend.dead_letters(PAYMENTS).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].cause, DeadLetterCause::PermanentFailure);
    assert_eq!(dead[0].error_type(), "payments.Refused");
    assert_eq!(dead[0].message(), "the gateway answered false");
    assert_eq!(
        dead[0].error.as_ref().unwrap().detail,
        Some(json!({"returned": false}))
    );
}

#[tokio::test(start_paused = true)]
async fn rung1_a_mapper_overrides_a_thrown_error_into_success_for_an_idempotent_replay() {
    let backend = backend(policy(5)).await;
    // Even a permanent wrapper and a permanent classifier rank below the mapper.
    let worker = backend
        .worker::<App>()
        .classifier(Classifier::permanent::<AlreadyProcessed>())
        .outcome_mapper(App::Payments, status_mapper);
    let env = run_one(&backend, worker, Act::AlreadyProcessed).await;
    assert_eq!(
        last_outcome(&env),
        (Status::Succeeded, Some(AttemptOutcome::Success), 1)
    );
}

#[tokio::test(start_paused = true)]
async fn rung1_an_unmapped_outcome_falls_through_to_the_lower_rungs() {
    let backend = backend(policy(5)).await;
    let worker = backend
        .worker::<App>()
        .outcome_mapper(App::Payments, status_mapper);
    let env = run_one(&backend, worker, Act::DeclinedPermanent).await;
    assert_eq!(last_outcome(&env), DEAD_AT_ONCE);
}

// --- Rung 2: per-call wrappers -------------------------------------------

#[tokio::test(start_paused = true)]
async fn rung2_permanent_beats_a_retryable_classifier_and_glob() {
    let backend = backend(QueuePolicy {
        retryable_errors: vec!["*".into()],
        ..policy(5)
    })
    .await;
    let worker = backend
        .worker::<App>()
        .classifier(Classifier::retryable::<CardDeclined>());
    let env = run_one(&backend, worker, Act::DeclinedPermanent).await;
    assert_eq!(last_outcome(&env), DEAD_AT_ONCE);
    assert_eq!(env.last_error().unwrap().error_type, "sdk::CardDeclined");
}

#[tokio::test(start_paused = true)]
async fn rung2_retryable_beats_a_permanent_classifier_and_a_non_retryable_glob() {
    let backend = backend(QueuePolicy {
        non_retryable_errors: vec!["*CardDeclined".into()],
        ..policy(3)
    })
    .await;
    let worker = backend
        .worker::<App>()
        .classifier(Classifier::permanent::<CardDeclined>());
    let env = run_one(&backend, worker, Act::DeclinedRetryable).await;
    assert_eq!(
        last_outcome(&env),
        (Status::Dead, Some(AttemptOutcome::RetryableFailure), 3),
        "retried until attempts ran out"
    );
}

// --- Rung 3: code classifiers --------------------------------------------

#[tokio::test(start_paused = true)]
async fn rung3_a_classifier_matches_through_the_source_chain_and_names_the_error() {
    let backend = backend(policy(5)).await;
    let worker = backend
        .worker::<App>()
        .classifier(Classifier::permanent::<GatewayTimeout>().named("gateway.Timeout"));
    let env = run_one(&backend, worker, Act::WrappedTimeout).await;
    assert_eq!(last_outcome(&env), DEAD_AT_ONCE);
    let error = env.last_error().unwrap();
    assert_eq!(error.error_type, "gateway.Timeout");
    assert_eq!(error.message, "charge failed");
}

#[tokio::test(start_paused = true)]
async fn rung3_a_classifier_beats_the_queue_globs() {
    let backend = backend(QueuePolicy {
        non_retryable_errors: vec!["*GatewayTimeout".into()],
        ..policy(2)
    })
    .await;
    let worker = backend
        .worker::<App>()
        .classifier(Classifier::retryable_if::<GatewayTimeout>(|_| true));
    let env = run_one(&backend, worker, Act::Timeout).await;
    assert_eq!(
        last_outcome(&env),
        (Status::Dead, Some(AttemptOutcome::RetryableFailure), 2)
    );
}

#[tokio::test(start_paused = true)]
async fn rung3_a_predicate_that_refuses_leaves_the_decision_below() {
    let backend = backend(QueuePolicy {
        non_retryable_errors: vec!["*GatewayTimeout".into()],
        ..policy(5)
    })
    .await;
    let worker = backend
        .worker::<App>()
        .classifier(Classifier::retryable_if::<GatewayTimeout>(|_| false));
    let env = run_one(&backend, worker, Act::Timeout).await;
    assert_eq!(last_outcome(&env), DEAD_AT_ONCE, "the glob decided");
}

// --- Rung 4: the queue's globs -------------------------------------------

#[tokio::test(start_paused = true)]
async fn rung4_a_non_retryable_glob_beats_a_retryable_one() {
    let backend = backend(QueuePolicy {
        retryable_errors: vec!["sdk::*".into()],
        non_retryable_errors: vec!["sdk::Card*".into()],
        ..policy(5)
    })
    .await;
    let env = run_one(&backend, backend.worker::<App>(), Act::Declined).await;
    assert_eq!(last_outcome(&env), DEAD_AT_ONCE);
    let env = run_one(&backend, backend.worker::<App>(), Act::Timeout).await;
    assert_eq!(
        last_outcome(&env),
        (Status::Dead, Some(AttemptOutcome::RetryableFailure), 5),
        "only the retryable glob matched"
    );
}

// --- Rung 5: the default ---------------------------------------------------

#[tokio::test(start_paused = true)]
async fn rung5_an_unclassified_error_is_retryable() {
    let backend = backend(policy(3)).await;
    let env = run_one(&backend, backend.worker::<App>(), Act::Other).await;
    assert_eq!(
        last_outcome(&env),
        (Status::Dead, Some(AttemptOutcome::RetryableFailure), 3)
    );
    assert_eq!(backend.retried(PAYMENTS).await.len(), 2);
    let dead = backend.dead_letters(PAYMENTS).await;
    assert_eq!(dead[0].cause, DeadLetterCause::AttemptsExhausted);
    assert_eq!(dead[0].error_type(), "sdk::Other");
}

#[tokio::test(start_paused = true)]
async fn an_ok_value_without_a_mapper_is_success() {
    let backend = backend(policy(3)).await;
    let env = run_one(&backend, backend.worker::<App>(), Act::Status(false)).await;
    assert_eq!(
        env.status,
        Status::Succeeded,
        "any return value is a success"
    );
}

// --- error_type: what each kind of error records --------------------------

#[test]
fn error_type_is_the_concrete_type_name_where_the_error_was_converted() {
    // A concrete error, returned as is or converted by `?`.
    assert_eq!(
        JobError::from(CardDeclined).error_type(),
        "sdk::CardDeclined"
    );
    let io = std::io::Error::other("disk full");
    assert_eq!(JobError::from(io).error_type(), "std::io::error::Error");
    // A concrete error wrapping a cause: the outer type, whatever its source.
    assert_eq!(
        JobError::from(ChargeFailed(GatewayTimeout)).error_type(),
        "sdk::ChargeFailed"
    );
    // An already-erased error: the erasing type, since Rust keeps no name for the inner one.
    let boxed: Box<dyn StdError + Send + Sync> = Box::new(CardDeclined);
    let from_box = JobError::from(boxed);
    assert_eq!(
        from_box.error_type(),
        "alloc::boxed::Box<dyn core::error::Error + core::marker::Send + core::marker::Sync>"
    );
    assert!(
        from_box.find::<CardDeclined>().is_some(),
        "still downcastable"
    );
    let from_anyhow = JobError::from(anyhow::Error::new(CardDeclined).context("charging"));
    assert_eq!(from_anyhow.error_type(), "anyhow::Error");
    assert_eq!(from_anyhow.to_string(), "charging");
    // Plain strings.
    assert_eq!(
        JobError::from("boom".to_owned()).error_type(),
        "alloc::string::String"
    );
    assert_eq!(JobError::from("boom").error_type(), "&str");
    // Supplied names win: `JobError::new`, `with_type`, and wrappers keep them.
    assert_eq!(
        JobError::new("billing.Declined", "no").error_type(),
        "billing.Declined"
    );
    let renamed = rdq::permanent(JobError::from(CardDeclined).with_type("billing.Declined"));
    assert_eq!(renamed.error_type(), "billing.Declined");
    assert_eq!(renamed.forced(), Some(Forced::Permanent));
    // A wrapper over a concrete error keeps its concrete name.
    assert_eq!(
        rdq::retryable(CardDeclined).error_type(),
        "sdk::CardDeclined"
    );
}

#[test]
fn anyhow_hides_its_outermost_error_from_downcasts_but_not_its_sources() {
    let root = anyhow::Error::new(ChargeFailed(GatewayTimeout));
    let error = JobError::from(root);
    assert!(
        error.find::<ChargeFailed>().is_none(),
        "anyhow's own wrapper comes first"
    );
    assert!(
        error.find::<GatewayTimeout>().is_some(),
        "sources stay reachable"
    );
    let wrapped = JobError::from(anyhow::Error::new(GatewayTimeout).context("charging"));
    assert!(
        wrapped.find::<GatewayTimeout>().is_some(),
        "a context's source is the root"
    );
}

#[tokio::test(start_paused = true)]
async fn the_recorded_error_type_is_what_the_handler_returned() {
    let backend = backend(QueuePolicy {
        non_retryable_errors: vec!["*".into()],
        ..policy(1)
    })
    .await;
    let producer = backend.producer::<App>();
    for endpoint in ["box", "anyhow", "io"] {
        producer
            .enqueue(&Deliver {
                endpoint: endpoint.into(),
            })
            .await
            .unwrap();
    }
    let handle = backend
        .worker::<App>()
        .handler_fn(|job: Deliver, _ctx: JobContext| async move {
            let error: JobError = match job.endpoint.as_str() {
                "box" => Box::<dyn StdError + Send + Sync>::from("refused").into(),
                "anyhow" => anyhow::anyhow!("refused").into(),
                _ => std::fs::read("/no/such/file")
                    .map(|_| ())
                    .unwrap_err()
                    .into(),
            };
            Err::<(), _>(error)
        })
        .build()
        .unwrap()
        .start();
    assert!(
        backend
            .wait_until_settled(WEBHOOKS, Duration::from_secs(5))
            .await
    );
    handle.shutdown(Duration::from_secs(1)).await.unwrap();
    let types: Vec<String> = backend
        .dead_letters(WEBHOOKS)
        .await
        .iter()
        .map(|d| d.error_type().to_owned())
        .collect();
    assert_eq!(
        types,
        [
            "alloc::boxed::Box<dyn core::error::Error + core::marker::Send + core::marker::Sync>",
            "anyhow::Error",
            "std::io::error::Error"
        ]
    );
}

// --- Retry precedence --------------------------------------------------------

struct Webhooks {
    lenient: &'static str,
    seen: Arc<Mutex<Vec<(String, u32)>>>,
}

impl JobHandler for Webhooks {
    type Job = Deliver;
    type Output = ();
    type Error = JobError;

    fn retry_policy(&self, job: &Deliver) -> Option<RetryPolicy> {
        (job.endpoint == self.lenient).then(|| RetryPolicy::fixed(6, Duration::from_secs(10)))
    }

    async fn handle(&self, job: Deliver, ctx: JobContext) -> Result<(), JobError> {
        self.seen
            .lock()
            .unwrap()
            .push((job.endpoint, ctx.max_attempts));
        Err(JobError::new("http.Status503", "unavailable"))
    }
}

async fn deliver_all(backend: &TestBackend, handle: WorkerHandle) {
    assert!(
        backend
            .wait_until_settled(WEBHOOKS, Duration::from_secs(24 * 3600))
            .await
    );
    handle.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn retry_policy_precedence_is_handler_then_job_override_then_queue_override_then_compiled() {
    let backend = backend(policy(10)).await;
    let producer = backend.producer::<App>();
    for endpoint in ["flaky", "new"] {
        producer
            .enqueue(&Deliver {
                endpoint: endpoint.into(),
            })
            .await
            .unwrap();
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let worker = backend
        .worker::<App>()
        .handler(Webhooks {
            lenient: "flaky",
            seen: Arc::clone(&seen),
        })
        .build()
        .unwrap();
    assert_eq!(
        worker.retry_policy_for(App::Webhooks, "deliver"),
        Some(RetryPolicy::fixed(4, Duration::from_secs(60))),
        "the compiled-in #[job(retry(...))]"
    );
    deliver_all(&backend, worker.start()).await;
    let max_of = |endpoint: &str| {
        seen.lock()
            .unwrap()
            .iter()
            .filter(|(e, _)| e == endpoint)
            .map(|(_, m)| *m)
            .collect::<Vec<_>>()
    };
    assert_eq!(max_of("flaky"), vec![6; 6], "the handler's per-job policy");
    assert_eq!(max_of("new"), vec![4; 4], "the job's compiled-in policy");

    // A queue override beats the compiled-in policy; a job override beats both.
    let with_queue_override = backend
        .worker::<App>()
        .retry_override(App::Webhooks, RetryPolicy::immediate(2))
        .handler(Webhooks {
            lenient: "none",
            seen: Arc::clone(&seen),
        })
        .build()
        .unwrap();
    assert_eq!(
        with_queue_override
            .retry_policy_for(App::Webhooks, "deliver")
            .map(|p| p.max_attempts),
        Some(2)
    );
    let with_both = backend
        .worker::<App>()
        .retry_override(App::Webhooks, RetryPolicy::immediate(2))
        .job_retry_override::<Deliver>(RetryPolicy::immediate(3))
        .handler(Webhooks {
            lenient: "none",
            seen: Arc::clone(&seen),
        })
        .build()
        .unwrap();
    assert_eq!(
        with_both
            .retry_policy_for(App::Webhooks, "deliver")
            .map(|p| p.max_attempts),
        Some(3)
    );
}

#[tokio::test(start_paused = true)]
async fn an_override_backoff_schedules_the_retry() {
    let backend = backend(policy(10)).await;
    let id = backend
        .producer::<App>()
        .enqueue(&Deliver {
            endpoint: "x".into(),
        })
        .await
        .unwrap()
        .id;
    let handle = backend
        .worker::<App>()
        .handler(Webhooks {
            lenient: "none",
            seen: Arc::default(),
        })
        .build()
        .unwrap()
        .start();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let env = backend.task(id).await.unwrap();
    let failed_at = env.attempts[0].finished_at.unwrap();
    assert_eq!(env.status, Status::Pending);
    assert_eq!(
        env.next_attempt_at,
        Some(failed_at.plus_ms(60_000)),
        "the job's fixed 60 s, not the queue's immediate retry"
    );
    assert_eq!(backend.scheduled(WEBHOOKS).await.len(), 1);
    handle.shutdown(Duration::from_secs(1)).await.unwrap();
}

// --- Deferral, virtual time, inspection ------------------------------------

#[tokio::test(start_paused = true)]
async fn a_producer_deferral_is_held_then_released_ahead_of_the_backlog() {
    let backend = backend(policy(3)).await;
    let producer = backend.producer::<App>();
    producer.enqueue(&Charge { act: Act::Ok }).await.unwrap();
    let held = producer
        .defer(&Charge { act: Act::Other }, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(backend.deferred(PAYMENTS).await.len(), 1);
    assert_eq!(backend.scheduled(PAYMENTS).await.len(), 1);
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert_eq!(backend.scheduled(PAYMENTS).await.len(), 1, "still held");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(backend.scheduled(PAYMENTS).await.is_empty(), "released");
    let claimed = backend.engine().claim(PAYMENTS, 1, None).await.unwrap();
    assert_eq!(claimed[0].envelope.id, held.id, "served before the backlog");
    assert_eq!(claimed[0].envelope.priority, 9);
}

#[tokio::test(start_paused = true)]
async fn a_handler_deferral_waits_exactly_its_delay_in_virtual_time() {
    let backend = backend(policy(3)).await;
    let id = backend
        .producer::<App>()
        .enqueue(&Deliver {
            endpoint: "rate-limited".into(),
        })
        .await
        .unwrap()
        .id;
    let ages = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&ages);
    let handle = backend
        .worker::<App>()
        .handler_fn(move |_job: Deliver, ctx: JobContext| {
            let sink = Arc::clone(&sink);
            async move {
                sink.lock().unwrap().push((ctx.deferrals, ctx.age));
                if ctx.deferrals < 2 {
                    return Err(rdq::defer(Duration::from_secs(600)));
                }
                Ok::<(), JobError>(())
            }
        })
        .build()
        .unwrap()
        .start();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(backend.deferred(WEBHOOKS).await.len(), 1);
    assert!(
        backend
            .wait_until_settled(WEBHOOKS, Duration::from_secs(3600))
            .await
    );
    handle.shutdown(Duration::from_secs(1)).await.unwrap();
    let ages = ages.lock().unwrap().clone();
    assert_eq!(ages.len(), 3);
    assert!(ages[2].1 >= Duration::from_secs(1200), "{ages:?}");
    assert!(ages[2].1 < Duration::from_secs(1201), "{ages:?}");
    let env = backend.task(id).await.unwrap();
    assert_eq!((env.attempt_count, env.deferral_count), (1, 2));
    assert_eq!(backend.succeeded(WEBHOOKS).await.len(), 1);
    assert!(backend.retried(WEBHOOKS).await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_panicking_dead_letter_hook_does_not_stop_the_dead_letter() {
    let backend = backend(policy(1)).await;
    let handle = backend
        .worker::<App>()
        .handler_fn(charge)
        .on_dead_letter(|dead: rdq::DeadLetter| async move {
            if dead.attempts() > 0 {
                panic!("hook bug");
            }
        })
        .build()
        .unwrap()
        .start();
    backend
        .producer::<App>()
        .enqueue(&Charge {
            act: Act::DeclinedPermanent,
        })
        .await
        .unwrap();
    assert!(
        backend
            .wait_until_settled(PAYMENTS, Duration::from_secs(5))
            .await
    );
    let report = handle.shutdown(Duration::from_secs(1)).await.unwrap();
    assert_eq!(report.dead_lettered, 1);
    assert_eq!(backend.counts(PAYMENTS).await.dead, 1);
}

#[tokio::test(start_paused = true)]
async fn a_worker_claims_only_its_selected_queues() {
    let backend = backend(policy(1)).await;
    let producer = backend.producer::<App>();
    producer.enqueue(&Charge { act: Act::Ok }).await.unwrap();
    producer
        .enqueue(&Deliver {
            endpoint: "x".into(),
        })
        .await
        .unwrap();
    let worker = backend
        .worker::<App>()
        .handler_fn(charge)
        .handler(Webhooks {
            lenient: "none",
            seen: Arc::default(),
        })
        .queues(&[App::Payments])
        .build()
        .unwrap();
    assert_eq!(worker.queues(), [PAYMENTS]);
    let handle = worker.start();
    assert!(
        backend
            .wait_until_settled(PAYMENTS, Duration::from_secs(5))
            .await
    );
    handle.shutdown(Duration::from_secs(1)).await.unwrap();
    assert_eq!(backend.pending(WEBHOOKS).await.len(), 1, "untouched");
}

#[test]
fn build_refuses_duplicate_handlers_and_invalid_hand_written_names() {
    let engine = rdq::open_memory();
    let twice = Worker::<App>::builder(engine.clone())
        .handler_fn(charge)
        .handler_fn(charge)
        .build()
        .unwrap_err();
    assert!(matches!(
        twice,
        Error::DuplicateHandler { job: "charge", .. }
    ));

    #[derive(Serialize, Deserialize)]
    struct HandWritten;
    impl Job for HandWritten {
        type Queue = App;
        const NAME: &'static str = "Not A Valid Name";
        const QUEUE: App = App::Payments;
    }
    let invalid = Worker::<App>::builder(engine)
        .handler_fn(|_job: HandWritten, _ctx: JobContext| async move { Ok::<(), JobError>(()) })
        .build()
        .unwrap_err();
    assert_eq!(invalid.code(), "INVALID_NAME");
}

#[test]
fn derived_names_follow_the_type_and_the_queue_set() {
    use rdq::QueueSet as _;
    assert_eq!(Charge::NAME, "charge");
    assert_eq!(Deliver::QUEUE.name(), "t.hooks.out");
    assert_eq!(App::from_name("t.payments"), Some(App::Payments));
    assert_eq!(App::all(), [App::Payments, App::Webhooks]);
    assert_eq!(
        Deliver::retry_policy(),
        Some(RetryPolicy::fixed(4, Duration::from_secs(60)))
    );
}

#[tokio::test]
async fn a_handler_is_testable_without_a_worker() {
    let ctx = JobContext::for_test::<Charge>(3, 3).with_correlation_id("req-9");
    assert!(ctx.is_last_attempt());
    assert_eq!(ctx.correlation_id.as_deref(), Some("req-9"));
    assert!(charge(Charge { act: Act::Ok }, ctx.clone()).await.unwrap());
    assert_eq!(
        ctx.extend_lease(Duration::from_secs(1))
            .await
            .unwrap_err()
            .code(),
        "UNSUPPORTED"
    );
}

// --- One submit, one store call ----------------------------------------------

/// The memory store, counting how often the engine calls `submit`.
#[derive(Default)]
struct CountingStore {
    inner: rdq_store_memory::MemoryStore,
    submits: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl rdq_engine::Store for CountingStore {
    fn capabilities(&self) -> rdq_engine::WorkCapabilities {
        self.inner.capabilities()
    }

    async fn submit(
        &self,
        tasks: Vec<rdq_engine::NewTask>,
    ) -> Vec<Result<rdq_engine::Submitted, rdq_engine::EngineError>> {
        self.submits
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.submit(tasks).await
    }

    async fn claim(
        &self,
        request: &rdq_engine::ClaimRequest,
    ) -> Result<Vec<rdq::Envelope>, rdq_engine::EngineError> {
        self.inner.claim(request).await
    }

    async fn settle(
        &self,
        updates: Vec<rdq_engine::LeasedUpdate>,
    ) -> Vec<Result<(), rdq_engine::EngineError>> {
        self.inner.settle(updates).await
    }

    async fn expired_leases(
        &self,
        now: rdq::Timestamp,
        limit: usize,
    ) -> Result<Vec<rdq::Envelope>, rdq_engine::EngineError> {
        self.inner.expired_leases(now, limit).await
    }

    fn as_config_store(&self) -> Option<&dyn rdq_engine::ConfigStore> {
        self.inner.as_config_store()
    }
}

#[tokio::test]
async fn enqueue_many_and_a_batch_are_one_store_submit_each() {
    let store = Arc::new(CountingStore::default());
    let engine = rdq::Engine::new(store.clone(), Arc::new(rdq_engine::SystemClock));
    let producer = Producer::<App>::new(engine);
    let charges: Vec<Charge> = (0..50).map(|_| Charge { act: Act::Ok }).collect();
    let results = producer.enqueue_many(&charges).await;
    assert!(results.iter().all(Result::is_ok));
    let mut batch = producer.batch();
    batch.add(&Charge { act: Act::Ok }).add_with(
        &Deliver {
            endpoint: "x".into(),
        },
        EnqueueOptions::deferred(Duration::from_secs(5)),
    );
    assert!(batch.submit().await.iter().all(Result::is_ok));
    assert_eq!(store.submits.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn the_attempt_record_carries_a_truncated_message_detail_and_stack() {
    let backend = backend(policy(1)).await;
    backend
        .producer::<App>()
        .enqueue(&Deliver {
            endpoint: "verbose".into(),
        })
        .await
        .unwrap();
    let handle = backend
        .worker::<App>()
        .handler_fn(|_job: Deliver, _ctx: JobContext| async move {
            Err::<(), _>(rdq::permanent(
                JobError::new("http.Status400", "x".repeat(10_000))
                    .with_detail(json!({"status": 400}))
                    .with_stack("at deliver (webhooks.rs:42)"),
            ))
        })
        .build()
        .unwrap()
        .start();
    assert!(
        backend
            .wait_until_settled(WEBHOOKS, Duration::from_secs(5))
            .await
    );
    handle.shutdown(Duration::from_secs(1)).await.unwrap();
    let dead = backend.dead_letters(WEBHOOKS).await;
    let error = dead[0].error.as_ref().unwrap();
    assert_eq!(error.error_type, "http.Status400");
    assert!(error.message.len() <= 4096);
    assert!(error.message.ends_with("…[truncated]"));
    assert_eq!(error.detail, Some(json!({"status": 400})));
    assert_eq!(error.stack.as_deref(), Some("at deliver (webhooks.rs:42)"));
}
