//! rdq and the real queuey 1.1 crate on the same RabbitMQ queues: queuey
//! producers feeding rdq, rdq producers feeding queuey workers, and both
//! workers on one queue at once. Every test has queues of its own
//! (`rdq-interop.<ulid>.<case>`), deleted at the end, hold queues included.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use rdq_engine::store::admin::TaskListing;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{Stores, amqp_url, unique};
use queuey::prelude::{
    Job, JobContext, JobError, JobHandler, Producer, QueueConfig, QueueSet, RabbitMqBackend,
    RetryPolicy, Worker, async_trait,
};
use rdq_engine::{
    Backoff, Engine, FailureKind, ListQuery, QueuePolicy, Settlement, SubmitRequest, SystemClock,
};
use rdq_envelope::{ErrorInfo, Status};
use rdq_store_rabbitmq::RabbitStore;
use serde::{Deserialize, Serialize};

/// One queue per test, named per process run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Q {
    QueueyToRdqSuccess,
    QueueyToRdqRetry,
    QueueyToRdqDead,
    QueueyToRdqDefer,
    RdqToQueueySuccess,
    RdqToQueueyRetry,
    RdqToQueueyDead,
    RdqToQueueyDefer,
    Shared,
}

const ALL: [Q; 9] = [
    Q::QueueyToRdqSuccess,
    Q::QueueyToRdqRetry,
    Q::QueueyToRdqDead,
    Q::QueueyToRdqDefer,
    Q::RdqToQueueySuccess,
    Q::RdqToQueueyRetry,
    Q::RdqToQueueyDead,
    Q::RdqToQueueyDefer,
    Q::Shared,
];

impl QueueSet for Q {
    fn all() -> &'static [Self] {
        &ALL
    }

    fn name(&self) -> &'static str {
        static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
        let names = NAMES.get_or_init(|| {
            let run = unique();
            ALL.iter()
                .map(|q| {
                    let name = format!("rdq-interop.{run}.{}", format!("{q:?}").to_lowercase());
                    &*Box::leak(name.into_boxed_str())
                })
                .collect()
        });
        names[*self as usize]
    }

    fn config(&self) -> QueueConfig {
        QueueConfig::new(self.name())
            .prefetch(64)
            .retry(RetryPolicy::fixed(3, Duration::from_millis(100)))
    }
}

/// The job both sides know: queuey by `Job::NAME`, rdq by `handler_ref`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ping {
    n: u32,
    fail_first: bool,
}

macro_rules! ping_on {
    ($job:ident, $queue:expr) => {
        #[derive(Debug, Clone, Serialize, Deserialize)]
        struct $job(Ping);
        impl Job for $job {
            type Queue = Q;
            const NAME: &'static str = "interop.ping";
            const QUEUE: Q = $queue;
        }
    };
}

ping_on!(PingSuccess, Q::QueueyToRdqSuccess);
ping_on!(PingRetry, Q::QueueyToRdqRetry);
ping_on!(PingDead, Q::QueueyToRdqDead);
ping_on!(PingDefer, Q::QueueyToRdqDefer);
ping_on!(PingToQueueySuccess, Q::RdqToQueueySuccess);
ping_on!(PingToQueueyRetry, Q::RdqToQueueyRetry);
ping_on!(PingToQueueyDead, Q::RdqToQueueyDead);
ping_on!(PingToQueueyDefer, Q::RdqToQueueyDefer);
ping_on!(PingShared, Q::Shared);

fn with_broker<F, Fut>(queue: Q, test: F)
where
    F: FnOnce(Stores, &'static str) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let stores = Stores::default();
    let name = queue.name();
    // queuey's producer and worker declare the whole queue set.
    stores.also_delete(ALL.iter().flat_map(|q| {
        let n = q.name();
        [
            n.to_owned(),
            format!("{n}.dead"),
            format!("{n}.deferred.1000"),
        ]
    }));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(test(stores.clone(), name));
    }));
    drop(runtime);
    stores.cleanup();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// An rdq engine on a store speaking queuey's format on `queue`.
fn rdq(stores: &Stores, queue: &str) -> (RabbitStore, Engine) {
    let store = stores.make(|o| {
        o.queuey_queues.insert(queue.to_owned());
    });
    let policy = QueuePolicy {
        max_attempts: 3,
        backoff: Backoff::None,
        max_priority: 10,
        lease_ms: 60_000,
        ..QueuePolicy::default()
    };
    let engine =
        Engine::new(Arc::new(store.clone()), Arc::new(SystemClock)).with_fallback_policy(policy);
    (store, engine)
}

async fn queuey_backend() -> Arc<RabbitMqBackend> {
    Arc::new(RabbitMqBackend::connect(&amqp_url()).await.unwrap())
}

/// Claims one task, waiting up to `within` for it.
async fn claim_one(engine: &Engine, queue: &str, within: Duration) -> rdq_engine::Claimed {
    let started = Instant::now();
    loop {
        if let Some(c) = engine.claim(queue, 1, None).await.unwrap().pop() {
            return c;
        }
        assert!(
            started.elapsed() < within,
            "no task on {queue} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ping_of(claimed: &rdq_engine::Claimed) -> Ping {
    serde_json::from_slice(&claimed.envelope.payload_bytes()).unwrap()
}

fn retryable() -> Settlement {
    Settlement::Failure {
        error: ErrorInfo::new("net.Timeout", "try again"),
        kind: FailureKind::Retryable,
    }
}

async fn dead_letters(store: &RabbitStore, queue: &str) -> Vec<rdq_envelope::Envelope> {
    store
        .list(&ListQuery {
            queue: queue.to_owned(),
            status: Some(Status::Dead),
            ..ListQuery::default()
        })
        .await
        .unwrap()
        .items
}

// ---- queuey producer → rdq worker ---------------------------------------

#[test]
fn queuey_producer_to_rdq_worker_success() {
    with_broker(Q::QueueyToRdqSuccess, |stores, queue| async move {
        let producer = Producer::<Q, _>::new(queuey_backend().await).await.unwrap();
        let job_id = producer
            .enqueue(&PingSuccess(Ping {
                n: 7,
                fail_first: false,
            }))
            .await
            .unwrap();
        let (_, engine) = rdq(&stores, queue);
        let c = claim_one(&engine, queue, Duration::from_secs(5)).await;
        assert_eq!(
            c.envelope.id.as_u128(),
            job_id.as_u128(),
            "the same 128-bit id"
        );
        assert_eq!(c.envelope.handler_ref, "interop.ping");
        assert_eq!(ping_of(&c).n, 7);
        assert_eq!(c.envelope.attempt_count, 1);
        let done = engine
            .settle(&c.envelope, c.token, Settlement::Success)
            .await
            .unwrap();
        assert_eq!(done.status, Status::Succeeded);
        assert!(engine.claim(queue, 10, None).await.unwrap().is_empty());
    });
}

#[test]
fn queuey_producer_to_rdq_worker_retryable_failure_then_success() {
    with_broker(Q::QueueyToRdqRetry, |stores, queue| async move {
        let producer = Producer::<Q, _>::new(queuey_backend().await).await.unwrap();
        producer
            .enqueue(&PingRetry(Ping {
                n: 1,
                fail_first: true,
            }))
            .await
            .unwrap();
        let (_, engine) = rdq(&stores, queue);
        let first = claim_one(&engine, queue, Duration::from_secs(5)).await;
        let retried = engine
            .settle(&first.envelope, first.token, retryable())
            .await
            .unwrap();
        assert_eq!(retried.status, Status::Pending);
        let second = claim_one(&engine, queue, Duration::from_secs(5)).await;
        assert_eq!(second.envelope.id, first.envelope.id);
        assert_eq!(
            second.envelope.attempt_count, 2,
            "queuey's attempt 2 on the wire"
        );
        engine
            .settle(&second.envelope, second.token, Settlement::Success)
            .await
            .unwrap();
    });
}

#[test]
fn queuey_producer_to_rdq_worker_permanent_failure_reaches_the_dlq() {
    with_broker(Q::QueueyToRdqDead, |stores, queue| async move {
        let producer = Producer::<Q, _>::new(queuey_backend().await).await.unwrap();
        let job_id = producer
            .enqueue(&PingDead(Ping {
                n: 2,
                fail_first: false,
            }))
            .await
            .unwrap();
        let (store, engine) = rdq(&stores, queue);
        let c = claim_one(&engine, queue, Duration::from_secs(5)).await;
        let failure = Settlement::Failure {
            error: ErrorInfo::new("app.Invalid", "bad input"),
            kind: FailureKind::Permanent,
        };
        engine.settle(&c.envelope, c.token, failure).await.unwrap();
        let dead = dead_letters(&store, queue).await;
        assert_eq!(dead.len(), 1, "readable by the DLQ listing (rdq dlq list)");
        assert_eq!(dead[0].id.as_u128(), job_id.as_u128());
        assert_eq!(dead[0].attempt_count, 1);
        let error = dead[0].last_error().unwrap();
        assert!(
            error.message.contains("app.Invalid: bad input"),
            "{error:?}"
        );
    });
}

#[test]
fn queuey_producer_to_rdq_worker_deferral() {
    with_broker(Q::QueueyToRdqDefer, |stores, queue| async move {
        let producer = Producer::<Q, _>::new(queuey_backend().await).await.unwrap();
        producer
            .enqueue(&PingDefer(Ping {
                n: 3,
                fail_first: false,
            }))
            .await
            .unwrap();
        let (_, engine) = rdq(&stores, queue);
        let c = claim_one(&engine, queue, Duration::from_secs(5)).await;
        let deferred_at = Instant::now();
        engine
            .settle(&c.envelope, c.token, Settlement::Defer { delay_ms: 200 })
            .await
            .unwrap();
        let back = claim_one(&engine, queue, Duration::from_secs(5)).await;
        assert!(
            deferred_at.elapsed() >= Duration::from_millis(200),
            "never early"
        );
        assert_eq!(back.envelope.deferral_count, 1);
        assert_eq!(
            back.envelope.attempt_count, 1,
            "a deferral spends no attempt"
        );
        assert_eq!(back.envelope.priority, 10, "back ahead of the backlog");
        engine
            .settle(&back.envelope, back.token, Settlement::Success)
            .await
            .unwrap();
    });
}

// ---- rdq producer → queuey worker ---------------------------------------

/// What a queuey handler saw, per job n: (attempt, deferrals) of each run.
type Runs = Arc<Mutex<HashMap<u32, Vec<(u32, u32)>>>>;

struct Recorder {
    runs: Runs,
    fail: &'static str,
}

macro_rules! recorder_for {
    ($job:ident) => {
        #[async_trait]
        impl JobHandler for RecorderOf<$job> {
            type Job = $job;
            async fn handle(&self, job: $job, ctx: JobContext) -> Result<(), JobError> {
                self.0.handle(job.0, ctx).await
            }
        }
    };
}

struct RecorderOf<J>(Recorder, std::marker::PhantomData<J>);

impl Recorder {
    async fn handle(&self, job: Ping, ctx: JobContext) -> Result<(), JobError> {
        self.runs
            .lock()
            .unwrap()
            .entry(job.n)
            .or_default()
            .push((ctx.attempt, ctx.deferrals));
        match self.fail {
            "retry" if ctx.attempt == 1 => Err(JobError::retryable_msg("flaky")),
            "fatal" => Err(JobError::fatal_msg("cannot ever work")),
            "defer" if ctx.deferrals == 0 => Err(JobError::deferred(Duration::from_millis(200))),
            _ => Ok(()),
        }
    }
}

recorder_for!(PingToQueueySuccess);
recorder_for!(PingToQueueyRetry);
recorder_for!(PingToQueueyDead);
recorder_for!(PingToQueueyDefer);

fn ping_request(queue: &str, n: u32) -> SubmitRequest {
    SubmitRequest {
        queue: queue.to_owned(),
        handler_ref: "interop.ping".to_owned(),
        payload: serde_json::to_vec(&Ping {
            n,
            fail_first: false,
        })
        .unwrap(),
        payload_content_type: "application/json".to_owned(),
        ..SubmitRequest::default()
    }
}

/// Runs a queuey worker with `handler` until `done` holds (or 15 s pass).
async fn run_queuey<H>(queues: &[Q], handler: H, done: impl Fn() -> bool)
where
    H: JobHandler,
    H::Job: Job<Queue = Q>,
{
    let worker = Worker::<Q, _>::builder(queuey_backend().await)
        .queues(queues)
        .handler(handler)
        .build()
        .await
        .unwrap();
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    let started = Instant::now();
    while !done() && started.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle.shutdown();
    running.await.unwrap().unwrap();
}

fn recorder<J>(runs: &Runs, fail: &'static str) -> RecorderOf<J> {
    RecorderOf(
        Recorder {
            runs: Arc::clone(runs),
            fail,
        },
        std::marker::PhantomData,
    )
}

#[test]
fn rdq_producer_to_queuey_worker_success() {
    with_broker(Q::RdqToQueueySuccess, |stores, queue| async move {
        let (_, engine) = rdq(&stores, queue);
        engine.submit(ping_request(queue, 11)).await.unwrap();
        let runs: Runs = Arc::default();
        let seen = Arc::clone(&runs);
        run_queuey(
            &[Q::RdqToQueueySuccess],
            recorder::<PingToQueueySuccess>(&runs, ""),
            move || seen.lock().unwrap().contains_key(&11),
        )
        .await;
        assert_eq!(
            runs.lock().unwrap()[&11],
            vec![(1, 0)],
            "run once, as attempt 1"
        );
    });
}

#[test]
fn rdq_producer_to_queuey_worker_retryable_failure_then_success() {
    with_broker(Q::RdqToQueueyRetry, |stores, queue| async move {
        let (_, engine) = rdq(&stores, queue);
        engine.submit(ping_request(queue, 12)).await.unwrap();
        let runs: Runs = Arc::default();
        let seen = Arc::clone(&runs);
        run_queuey(
            &[Q::RdqToQueueyRetry],
            recorder::<PingToQueueyRetry>(&runs, "retry"),
            move || seen.lock().unwrap().get(&12).is_some_and(|r| r.len() == 2),
        )
        .await;
        assert_eq!(runs.lock().unwrap()[&12], vec![(1, 0), (2, 0)]);
    });
}

#[test]
fn rdq_producer_to_queuey_worker_permanent_failure_reaches_the_dlq() {
    with_broker(Q::RdqToQueueyDead, |stores, queue| async move {
        let (store, engine) = rdq(&stores, queue);
        let submitted = engine.submit(ping_request(queue, 13)).await.unwrap();
        let runs: Runs = Arc::default();
        let seen = Arc::clone(&runs);
        run_queuey(
            &[Q::RdqToQueueyDead],
            recorder::<PingToQueueyDead>(&runs, "fatal"),
            move || seen.lock().unwrap().contains_key(&13),
        )
        .await;
        let mut dead = Vec::new();
        for _ in 0..50 {
            dead = dead_letters(&store, queue).await;
            if !dead.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(dead.len(), 1, "queuey's dead letter is readable by rdq");
        assert_eq!(dead[0].id, submitted.envelope().id);
        let error = dead[0].last_error().unwrap();
        assert!(error.message.contains("cannot ever work"), "{error:?}");
        // And rdq can redrive it back onto the queue, in queuey's format.
        let redriven = engine
            .redrive(&rdq_engine::RedriveRequest {
                queue: queue.to_owned(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(redriven, vec![submitted.envelope().id]);
        let back = claim_one(&engine, queue, Duration::from_secs(5)).await;
        assert_eq!(back.envelope.attempt_count, 1, "a fresh budget");
        engine
            .settle(&back.envelope, back.token, Settlement::Success)
            .await
            .unwrap();
    });
}

#[test]
fn rdq_producer_to_queuey_worker_deferral_and_delayed_submit() {
    with_broker(Q::RdqToQueueyDefer, |stores, queue| async move {
        let (_, engine) = rdq(&stores, queue);
        let mut delayed = ping_request(queue, 14);
        delayed.delay_ms = 300;
        let submitted_at = Instant::now();
        engine.submit(delayed).await.unwrap();
        let runs: Runs = Arc::default();
        let seen = Arc::clone(&runs);
        let first_run: Arc<Mutex<Option<Duration>>> = Arc::default();
        let first = Arc::clone(&first_run);
        run_queuey(
            &[Q::RdqToQueueyDefer],
            recorder::<PingToQueueyDefer>(&runs, "defer"),
            move || {
                let runs = seen.lock().unwrap();
                if runs.contains_key(&14) {
                    first.lock().unwrap().get_or_insert(submitted_at.elapsed());
                }
                runs.get(&14).is_some_and(|r| r.len() == 2)
            },
        )
        .await;
        assert!(
            first_run.lock().unwrap().unwrap() >= Duration::from_millis(300),
            "the delay held"
        );
        assert_eq!(
            runs.lock().unwrap()[&14],
            vec![(1, 0), (1, 1)],
            "deferred once, no attempt spent"
        );
    });
}

// ---- one queue, both workers ---------------------------------------------

struct SharedRecorder {
    runs: Runs,
    done: Arc<AtomicU32>,
}

#[async_trait]
impl JobHandler for SharedRecorder {
    type Job = PingShared;
    async fn handle(&self, job: PingShared, ctx: JobContext) -> Result<(), JobError> {
        self.runs
            .lock()
            .unwrap()
            .entry(job.0.n)
            .or_default()
            .push((ctx.attempt, 1));
        if job.0.fail_first && ctx.attempt == 1 {
            return Err(JobError::retryable_msg("flaky"));
        }
        self.done.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn a_queue_consumed_by_queuey_and_rdq_at_once_runs_every_attempt_exactly_once() {
    const JOBS: u32 = 200;
    with_broker(Q::Shared, |stores, queue| async move {
        let (_, engine) = rdq(&stores, queue);
        let producer = Producer::<Q, _>::new(queuey_backend().await).await.unwrap();
        let runs: Runs = Arc::default();
        let done = Arc::new(AtomicU32::new(0));
        // Both workers run before the first job is published.
        let queuey_worker = Worker::<Q, _>::builder(queuey_backend().await)
            .queues(&[Q::Shared])
            .concurrency(16)
            .handler(SharedRecorder {
                runs: Arc::clone(&runs),
                done: Arc::clone(&done),
            })
            .build()
            .await
            .unwrap();
        let queuey_handle = queuey_worker.handle();
        let queuey_running = tokio::spawn(queuey_worker.run());
        // rdq: the runtime's worker loop (tag 2 in the records).
        let rdq_runs = Arc::clone(&runs);
        let rdq_done = Arc::clone(&done);
        let worker = rdq_runtime::Worker::new(
            engine.clone(),
            rdq_runtime::WorkerConfig {
                queues: vec![queue.to_owned()],
                concurrency: 16,
                claim_batch: 16,
                ..Default::default()
            },
            move |task: Arc<rdq_runtime::Task>| {
                let (runs, done) = (Arc::clone(&rdq_runs), Arc::clone(&rdq_done));
                async move {
                    let ping: Ping =
                        serde_json::from_slice(&task.envelope().payload_bytes()).unwrap();
                    let attempt = task.envelope().attempt_count;
                    runs.lock()
                        .unwrap()
                        .entry(ping.n)
                        .or_default()
                        .push((attempt, 2));
                    // A little work, so neither worker drains the queue alone.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    if ping.fail_first && attempt == 1 {
                        return retryable();
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                    Settlement::Success
                }
            },
        );
        let (trigger, shutdown) = rdq_runtime::shutdown_channel();
        let rdq_worker = tokio::spawn(worker.run(shutdown));
        // Half the jobs from each producer; every fourth fails once.
        for n in 0..JOBS {
            let ping = Ping {
                n,
                fail_first: n % 4 == 0,
            };
            if n % 2 == 0 {
                producer.enqueue(&PingShared(ping)).await.unwrap();
            } else {
                let mut request = ping_request(queue, n);
                request.payload = serde_json::to_vec(&ping).unwrap();
                engine.submit(request).await.unwrap();
            }
        }
        let started = Instant::now();
        while done.load(Ordering::SeqCst) < JOBS && started.elapsed() < Duration::from_secs(20) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        queuey_handle.shutdown();
        queuey_running.await.unwrap().unwrap();
        trigger.trigger();
        rdq_worker.await.unwrap();
        let runs = runs.lock().unwrap();
        assert_eq!(
            done.load(Ordering::SeqCst),
            JOBS,
            "every job succeeded, once"
        );
        assert_eq!(runs.len(), JOBS as usize, "nothing lost");
        let mut by = [0u32; 3];
        for (n, attempts) in runs.iter() {
            let numbers: Vec<u32> = attempts.iter().map(|(a, _)| *a).collect();
            let expected: Vec<u32> = if n % 4 == 0 { vec![1, 2] } else { vec![1] };
            assert_eq!(numbers, expected, "job {n}: each attempt ran exactly once");
            for (_, who) in attempts {
                by[*who as usize] += 1;
            }
        }
        assert!(
            by[1] > 0 && by[2] > 0,
            "both workers took part: queuey {} rdq {}",
            by[1],
            by[2]
        );
    });
}
