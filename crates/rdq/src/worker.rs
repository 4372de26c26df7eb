//! [`Worker`]: runs an application's handlers on its queues.
//!
//! A worker wraps the runtime's loop (`rdq_runtime::Worker`: batched claims,
//! bounded concurrency, lease fencing, batched settles) with the SDK's
//! per-task path (`dispatch`), and runs the lease reaper and the retention
//! pruner beside it. [`Worker::start`] returns a [`WorkerHandle`] whose
//! [`WorkerHandle::shutdown`] stops claiming, lets running jobs finish until
//! a deadline, and hands back to the queue what did not finish (due at once,
//! no attempt spent): nothing claimed is lost.

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rdq_engine::Engine;
use rdq_envelope::is_valid_name;
use rdq_runtime::{
    Heartbeat, PrunerConfig, ReaperConfig, SchedulerConfig, ShutdownTrigger, Task, WorkerConfig,
    WorkerStats, run_pruner, run_reaper_with, run_scheduler, shutdown_channel,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::context::JobContext;
use crate::dead_letter::{DeadLetterHook, ErasedHook};
use crate::dispatch::{Counters, Dispatcher, Entry, PolicyCache};
use crate::error::Error;
use crate::handler::{Erased, ErasedJob, FnHandler, JobHandler};
use crate::job::{Job, QueueSet};
use crate::job_error::JobError;
use crate::outcome::{Classifier, OutcomeMapper};
use crate::retry::{RetryPolicy, millis};

/// Runtime grace: effectively unbounded, because the SDK's own deadline
/// (see [`WorkerHandle::shutdown`]) hands unfinished tasks back.
const RUNTIME_GRACE: Duration = Duration::from_secs(24 * 60 * 60);

struct Registration {
    job: &'static str,
    queue: &'static str,
    version: Option<&'static str>,
    runner: Arc<dyn ErasedJob>,
    compiled: Option<RetryPolicy>,
}

/// Configures a [`Worker`]; from [`Worker::builder`].
pub struct WorkerBuilder<Q: QueueSet> {
    engine: Engine,
    registrations: Vec<Registration>,
    queues: Option<Vec<Q>>,
    config: WorkerConfig,
    queue_retry: HashMap<&'static str, RetryPolicy>,
    job_retry: HashMap<(&'static str, &'static str), RetryPolicy>,
    classifiers: Vec<Classifier>,
    mappers: HashMap<&'static str, Arc<dyn OutcomeMapper>>,
    hook: Option<Arc<dyn ErasedHook>>,
    version_requeue_delay: Duration,
    reaper: Option<ReaperConfig>,
    pruner: Option<PrunerConfig>,
    schedules: Vec<rdq_schedule::Schedule>,
    scheduler: Option<SchedulerConfig>,
    policy_ttl: Duration,
}

impl<Q: QueueSet> WorkerBuilder<Q> {
    /// Registers `handler` for its job type. Only jobs of `Q` compile here.
    pub fn handler<H>(mut self, handler: H) -> Self
    where
        H: JobHandler,
        H::Job: Job<Queue = Q>,
    {
        self.registrations.push(Registration {
            job: <H::Job as Job>::NAME,
            queue: <H::Job as Job>::QUEUE.name(),
            version: <H::Job as Job>::VERSION,
            runner: Arc::new(Erased(Arc::new(handler))),
            compiled: <H::Job as Job>::retry_policy(),
        });
        self
    }

    /// Registers an async closure for job type `J` (named by the closure's
    /// first parameter type):
    /// `.handler_fn(|job: SendEmail, ctx: JobContext| async move { Ok::<(), JobError>(()) })`.
    pub fn handler_fn<J, F, Fut, T, E>(self, f: F) -> Self
    where
        J: Job<Queue = Q>,
        F: Fn(J, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send,
        T: Send + 'static,
        E: Into<JobError> + Send + 'static,
    {
        self.handler(FnHandler::<J, F>::new(f))
    }

    /// Claims only from these queues. Default: the queues of the registered
    /// handlers, so a worker never claims (and dead-letters as
    /// `rdq.NoHandler`) tasks it has no handler for. A listed queue without
    /// handlers dead-letters everything on it; that is logged at build.
    #[must_use]
    pub fn queues(mut self, queues: &[Q]) -> Self {
        self.queues = Some(queues.to_vec());
        self
    }

    /// Handlers running at once (default 64).
    #[must_use]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.config.concurrency = concurrency.max(1);
        self
    }

    /// Most tasks taken per claim (default 64).
    #[must_use]
    pub fn claim_batch(mut self, batch: usize) -> Self {
        self.config.claim_batch = batch.max(1);
        self
    }

    /// Exactly `tasks` claimed tasks kept ready beyond the free handler
    /// slots, so one claim feeds many handlers — queuey's `prefetch`,
    /// graphile-worker's local queue; 0 claims only for free slots. Each
    /// waits under its own lease; those still waiting at shutdown are handed
    /// back unrun. By default the worker adapts: 50 ms of work at the rate
    /// its handlers have been starting tasks, at most 1,024
    /// ([`Prefetch::Adaptive`](rdq_runtime::Prefetch::Adaptive)).
    #[must_use]
    pub fn prefetch(mut self, tasks: usize) -> Self {
        self.config.prefetch = rdq_runtime::Prefetch::Fixed(tasks);
        self
    }

    /// Longest idle wait before claiming again, for work submitted by other
    /// processes (default 200 ms; work submitted through the same engine
    /// wakes the worker at once).
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.config.poll_interval = interval;
        self
    }

    /// The job timeout: a fixed lease this worker claims with, which it then
    /// does not extend by itself (no `heartbeat`). A handler still running
    /// when its lease ends is stopped and the attempt is recorded as
    /// `LEASE_EXPIRED`; long jobs call `ctx.extend_lease(d)`. Without a job
    /// timeout, a handler runs for as long as it lives: the worker claims
    /// with the queue's `lease_ms` and extends the lease every third of it,
    /// so only a dead worker's tasks are reclaimed.
    #[must_use]
    pub fn job_timeout(mut self, timeout: Duration) -> Self {
        self.config.lease_ms = Some(millis(timeout).max(1));
        self.config.heartbeat = Heartbeat::Off;
        self
    }

    /// How often the worker extends a running handler's lease, by the
    /// lease's length (default: every third of the lease). The heartbeat is
    /// separate from the lease: a long lease with frequent beats hears of a
    /// cancel sooner on stores that do not announce it; a short lease with
    /// the default beats reclaims a dead worker's tasks sooner. Replaces a
    /// `job_timeout`'s fixed lease.
    #[must_use]
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.config.heartbeat = Heartbeat::Every(every.max(Duration::from_millis(1)));
        self
    }

    /// How long a handler asked to stop ([`JobContext::cancelled`]) may go
    /// on before the worker stops it (default 5 s). One that finishes first
    /// keeps its outcome: a success stands, anything else ends the task
    /// DEAD with reason `CANCELLED`.
    #[must_use]
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.config.cancel_grace = grace;
        self
    }

    /// Replaces the attempts (and, if set, the backoff) of every job on
    /// `queue` handled by this worker. The queue's stored policy is
    /// untouched; other workers keep theirs.
    #[must_use]
    pub fn retry_override(mut self, queue: Q, policy: RetryPolicy) -> Self {
        self.queue_retry.insert(queue.name(), policy);
        self
    }

    /// Replaces the retry policy of job type `J` in this worker; beats
    /// [`WorkerBuilder::retry_override`]. `JobHandler::retry_policy` beats both.
    #[must_use]
    pub fn job_retry_override<J: Job<Queue = Q>>(mut self, policy: RetryPolicy) -> Self {
        self.job_retry.insert((J::QUEUE.name(), J::NAME), policy);
        self
    }

    /// Adds a code classifier (rung 3 of the outcome ladder); the first match wins.
    #[must_use]
    pub fn classifier(mut self, classifier: Classifier) -> Self {
        self.classifiers.push(classifier);
        self
    }

    /// Registers the authoritative [`OutcomeMapper`] of `queue` (rung 1);
    /// a second one for the same queue replaces the first.
    #[must_use]
    pub fn outcome_mapper(mut self, queue: Q, mapper: impl OutcomeMapper) -> Self {
        self.mappers.insert(queue.name(), Arc::new(mapper));
        self
    }

    /// Calls `hook` for every task this worker sends to the DLQ, whatever the
    /// cause; a second hook replaces the first.
    #[must_use]
    pub fn on_dead_letter(mut self, hook: impl DeadLetterHook) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// How long a task is put back for when its `handler_version` differs and
    /// the queue's `handler_version_mismatch` is `requeue` (default 5 s).
    #[must_use]
    pub fn version_requeue_delay(mut self, delay: Duration) -> Self {
        self.version_requeue_delay = delay;
        self
    }

    /// Lease reaper settings (default: on, every 500 ms). Every node may run one.
    #[must_use]
    pub fn reaper(mut self, config: Option<ReaperConfig>) -> Self {
        self.reaper = config;
        self
    }

    /// Retention pruner settings (default: on, every 30 s).
    #[must_use]
    pub fn pruner(mut self, config: Option<PrunerConfig>) -> Self {
        self.pruner = config;
        self
    }

    /// Declares a schedule in code (docs/schedules.md): stored by name,
    /// owned by code, when the worker starts, replacing the stored
    /// definition (its cursor and counters stay). A schedule code put once
    /// and declares no more keeps firing and is reported
    /// ([`WorkerHandle::undeclared_schedules`], and a warning), never
    /// deleted silently. An invalid one fails [`WorkerBuilder::build`] with
    /// its code (`INVALID_CRON`, `UNKNOWN_TIME_ZONE`, …).
    #[must_use]
    pub fn schedule(mut self, schedule: rdq_schedule::Schedule) -> Self {
        self.schedules.push(schedule);
        self
    }

    /// Runs the scheduler beside the worker (default: off), firing every
    /// stored schedule's due times as each `rdq serve` node does; any
    /// number of workers and nodes may run one, and each due time fires
    /// once.
    #[must_use]
    pub fn scheduler(mut self, config: Option<SchedulerConfig>) -> Self {
        self.scheduler = config;
        self
    }

    /// Builds the worker, refusing invalid names and duplicate handlers.
    pub fn build(self) -> Result<Worker<Q>, Error> {
        crate::schedules::validate(&self.schedules)?;
        let mut entries: HashMap<String, HashMap<String, Arc<Entry>>> = HashMap::new();
        let mut handled_queues: Vec<&'static str> = Vec::new();
        for r in self.registrations {
            for (what, name) in [("job", r.job), ("queue", r.queue)] {
                if !is_valid_name(name) {
                    return Err(Error::InvalidName(format!(
                        "{what} name {name:?} is not 1-240 characters of [a-z0-9._-]"
                    )));
                }
            }
            let configured = self
                .job_retry
                .get(&(r.queue, r.job))
                .or_else(|| self.queue_retry.get(r.queue))
                .cloned()
                .or(r.compiled);
            let jobs = entries.entry(r.queue.to_owned()).or_default();
            let entry = Arc::new(Entry {
                job: r.job,
                version: r.version,
                runner: r.runner,
                configured,
            });
            if jobs.insert(r.job.to_owned(), entry).is_some() {
                return Err(Error::DuplicateHandler {
                    job: r.job,
                    queue: r.queue,
                });
            }
            if !handled_queues.contains(&r.queue) {
                handled_queues.push(r.queue);
            }
        }
        let queues: Vec<&'static str> = match &self.queues {
            Some(selected) => {
                let mut names: Vec<&'static str> = Vec::new();
                for q in selected {
                    if !names.contains(&q.name()) {
                        names.push(q.name());
                    }
                }
                names
            }
            None => handled_queues,
        };
        for queue in &queues {
            if !entries.contains_key(*queue) {
                warn!(
                    queue,
                    "this worker claims a queue it has no handler for; its tasks will be dead-lettered as rdq.NoHandler"
                );
                entries.insert((*queue).to_owned(), HashMap::new());
            }
        }
        for queue in self.queue_retry.keys().chain(self.mappers.keys()) {
            if !queues.contains(queue) {
                debug!(
                    queue,
                    "retry override or outcome mapper for a queue this worker does not claim"
                );
            }
        }
        let (abort_tx, abort_rx) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let dispatcher = Dispatcher {
            engine: self.engine.clone(),
            entries,
            classifiers: self.classifiers,
            mappers: self
                .mappers
                .into_iter()
                .map(|(q, m)| (q.to_owned(), m))
                .collect(),
            hook: self.hook,
            policies: PolicyCache::new(self.engine.clone(), self.policy_ttl),
            abort: abort_rx,
            version_requeue_delay: self.version_requeue_delay,
            counters: Arc::clone(&counters),
        };
        let mut config = self.config;
        config.queues = queues.iter().map(|q| (*q).to_owned()).collect();
        config.shutdown_grace = RUNTIME_GRACE;
        Ok(Worker {
            engine: self.engine,
            dispatcher: Arc::new(dispatcher),
            config,
            reaper: self.reaper,
            pruner: self.pruner,
            schedules: self.schedules,
            scheduler: self.scheduler,
            abort_tx,
            counters,
            _queues: PhantomData,
        })
    }
}

/// Runs handlers for the jobs of queue set `Q`. Build with [`Worker::builder`],
/// run with [`Worker::start`] or [`Worker::run_until`].
pub struct Worker<Q: QueueSet> {
    engine: Engine,
    dispatcher: Arc<Dispatcher>,
    config: WorkerConfig,
    reaper: Option<ReaperConfig>,
    pruner: Option<PrunerConfig>,
    schedules: Vec<rdq_schedule::Schedule>,
    scheduler: Option<SchedulerConfig>,
    abort_tx: watch::Sender<bool>,
    counters: Arc<Counters>,
    _queues: PhantomData<fn(Q)>,
}

impl<Q: QueueSet> std::fmt::Debug for Worker<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("queues", &self.config.queues)
            .field("concurrency", &self.config.concurrency)
            .finish_non_exhaustive()
    }
}

impl<Q: QueueSet> Worker<Q> {
    /// Starts configuring a worker for queue set `Q` on `engine`.
    pub fn builder(engine: Engine) -> WorkerBuilder<Q> {
        WorkerBuilder {
            engine,
            registrations: Vec::new(),
            queues: None,
            config: WorkerConfig {
                // A live handler keeps its lease (see `heartbeat`).
                heartbeat: Heartbeat::Auto,
                ..WorkerConfig::default()
            },
            queue_retry: HashMap::new(),
            job_retry: HashMap::new(),
            classifiers: Vec::new(),
            mappers: HashMap::new(),
            hook: None,
            version_requeue_delay: Duration::from_secs(5),
            reaper: Some(ReaperConfig::default()),
            pruner: Some(PrunerConfig::default()),
            schedules: Vec::new(),
            scheduler: None,
            policy_ttl: Duration::from_secs(1),
        }
    }

    /// The queues this worker claims from, in turn.
    pub fn queues(&self) -> &[String] {
        &self.config.queues
    }

    /// Handlers running at once.
    pub fn concurrency(&self) -> usize {
        self.config.concurrency
    }

    /// The retry policy this worker applies to job `job` on `queue`, before a
    /// handler's per-job `retry_policy`; `None` means the queue's own.
    pub fn retry_policy_for(&self, queue: Q, job: &str) -> Option<RetryPolicy> {
        self.dispatcher
            .entries
            .get(queue.name())
            .and_then(|jobs| jobs.get(job))
            .and_then(|e| e.configured.clone())
    }

    /// Starts the worker (and its reaper and pruner) on the current tokio
    /// runtime and returns its handle. Dropping the handle leaves it running.
    pub fn start(mut self) -> WorkerHandle {
        let (trigger, shutdown) = shutdown_channel();
        let dispatcher = Arc::clone(&self.dispatcher);
        let runtime = rdq_runtime::Worker::new(
            self.engine.clone(),
            self.config.clone(),
            move |task: Arc<Task>| Arc::clone(&dispatcher).dispatch(task),
        );
        let stats = runtime.stats();
        info!(queues = ?self.config.queues, concurrency = self.config.concurrency, "worker starting");
        let reaper = self.reaper.map(|config| {
            let dispatcher = Arc::clone(&self.dispatcher);
            tokio::spawn(run_reaper_with(
                self.engine.clone(),
                config,
                shutdown.clone(),
                move |reaped: &[rdq_envelope::Envelope]| dispatcher.reaped(reaped),
            ))
        });
        let pruner = self
            .pruner
            .map(|config| tokio::spawn(run_pruner(self.engine.clone(), config, shutdown.clone())));
        let declared = Arc::new(crate::schedules::Declared::default());
        let schedules = std::mem::take(&mut self.schedules);
        let scheduler = {
            let (engine, declared, shutdown) =
                (self.engine.clone(), Arc::clone(&declared), shutdown.clone());
            let config = self.scheduler;
            (!schedules.is_empty() || config.is_some()).then(|| {
                tokio::spawn(async move {
                    if !schedules.is_empty() {
                        crate::schedules::reconcile(&engine, schedules, declared).await;
                    }
                    if let Some(config) = config {
                        run_scheduler(engine, config, shutdown).await;
                    }
                })
            })
        };
        let join = tokio::spawn(async move {
            runtime.run(shutdown).await;
            for service in [reaper, pruner, scheduler].into_iter().flatten() {
                if service.await.is_err() {
                    warn!("a background service ended abnormally");
                }
            }
        });
        WorkerHandle {
            trigger,
            abort: self.abort_tx,
            join,
            stats,
            counters: self.counters,
            declared,
        }
    }

    /// Runs until `signal` completes (e.g. `tokio::signal::ctrl_c()`), then
    /// shuts down gracefully within `deadline`.
    pub async fn run_until(
        self,
        signal: impl Future<Output = ()>,
        deadline: Duration,
    ) -> Result<WorkerReport, Error> {
        let handle = self.start();
        signal.await;
        handle.shutdown(deadline).await
    }
}

/// A running worker.
#[derive(Debug)]
pub struct WorkerHandle {
    trigger: ShutdownTrigger,
    abort: watch::Sender<bool>,
    join: JoinHandle<()>,
    stats: Arc<WorkerStats>,
    counters: Arc<Counters>,
    declared: Arc<crate::schedules::Declared>,
}

impl WorkerHandle {
    /// Schedules put by code (by this or another program) that this
    /// worker does not declare: they keep firing until deleted (`rdq
    /// schedule delete NAME`). Known once the worker has stored its own.
    pub fn undeclared_schedules(&self) -> Vec<String> {
        self.declared.undeclared()
    }

    /// Counters so far.
    pub fn report(&self) -> WorkerReport {
        WorkerReport::read(&self.stats, &self.counters)
    }

    /// True once the worker has stopped.
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }

    /// Graceful shutdown: stop claiming now; let running jobs finish for up
    /// to `deadline`; then stop the ones still running and hand their tasks
    /// back (`Release`: due at once, no attempt spent, for any worker to take);
    /// flush every settle; stop the reaper and pruner. Returns the final counts.
    pub async fn shutdown(self, deadline: Duration) -> Result<WorkerReport, Error> {
        info!(?deadline, "worker shutting down");
        self.trigger.trigger();
        let abort = self.abort;
        let mut join = self.join;
        let finished = tokio::select! {
            joined = &mut join => Some(joined),
            () = tokio::time::sleep(deadline) => None,
        };
        let joined = match finished {
            Some(joined) => joined,
            None => {
                debug!("shutdown deadline passed; handing unfinished tasks back");
                abort.send_replace(true);
                join.await
            }
        };
        joined.map_err(|e| Error::WorkerFailed(e.to_string()))?;
        let report = WorkerReport::read(&self.stats, &self.counters);
        info!(?report, "worker stopped");
        Ok(report)
    }
}

/// What a worker did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct WorkerReport {
    /// Tasks claimed.
    pub claimed: u64,
    /// Settles the store accepted.
    pub settled: u64,
    /// Settles the store refused (`LEASE_LOST` after a lapse).
    pub settle_errors: u64,
    /// Runs that succeeded.
    pub succeeded: u64,
    /// Failures that will be retried.
    pub retried: u64,
    /// Tasks sent to the DLQ (including lease-expiry deaths this worker's reaper wrote).
    pub dead_lettered: u64,
    /// Deferrals (by handlers, or requeues for a handler version).
    pub deferred: u64,
    /// Tasks handed back unfinished at shutdown.
    pub released: u64,
    /// Handlers stopped because their lease ran out.
    pub lease_overruns: u64,
    /// Handlers that panicked.
    pub panicked: u64,
}

impl WorkerReport {
    fn read(stats: &WorkerStats, counters: &Counters) -> Self {
        let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        Self {
            claimed: get(&stats.claimed),
            settled: get(&stats.settled),
            settle_errors: get(&stats.settle_errors),
            succeeded: get(&counters.succeeded),
            retried: get(&counters.retried),
            dead_lettered: get(&counters.dead_lettered),
            deferred: get(&counters.deferred),
            released: get(&counters.released) + get(&stats.released),
            lease_overruns: get(&stats.lease_overruns),
            panicked: get(&counters.panicked) + get(&stats.panicked),
        }
    }
}
