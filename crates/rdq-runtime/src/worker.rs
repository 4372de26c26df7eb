//! The worker loop: claim in batches, run handlers with bounded concurrency,
//! settle in batches, fence every handler by its lease.
//!
//! A handler's task learns that a cancel was asked of it ([`Task::cancelled`])
//! from the engine's cancel channel (announced by every process on stores
//! that can) or from a lease extension's answer; the worker gives it
//! [`WorkerConfig::cancel_grace`] to stop, then stops it and reports the
//! failure `rdq.Cancelled`. With [`WorkerConfig::heartbeat`] the worker
//! extends each running handler's lease itself.
//!
//! The SDK's `Worker` wraps this loop and `rdq bench` drives it directly, so
//! the benchmark measures exactly the path users get.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use std::collections::VecDeque;

use rdq_engine::{
    Claimed, Engine, EngineError, FailureKind, LeaseToken, SettleRequest, Settlement,
};
use rdq_envelope::error_types;
use rdq_envelope::{CancelRequest, Envelope, ErrorInfo, TaskId, Timestamp};
use tokio::sync::{Notify, Semaphore, broadcast, mpsc, watch};
use tokio::task::JoinSet;
use tracing::{debug, warn};

use crate::prefetch::{Pace, Prefetch};
use crate::shutdown::Shutdown;

/// A claimed task as a handler sees it, with a handle on its lease.
pub struct Task {
    envelope: Envelope,
    token: LeaseToken,
    lease_deadline_ms: AtomicI64,
    engine: Engine,
    /// The cancel asked of the task while it runs, once known.
    cancel: OnceLock<CancelRequest>,
    /// Wakes [`Task::cancelled`] when `cancel` is set.
    cancel_heard: Notify,
    /// Set by [`Task::settled_elsewhere`]: the worker reports nothing.
    settled_elsewhere: AtomicBool,
}

impl Task {
    /// The task as claimed: IN_FLIGHT, its open attempt last in `attempts`.
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// The token fencing this claim.
    pub fn token(&self) -> LeaseToken {
        self.token
    }

    /// The lease token as the store's API and its SQL functions take it
    /// (`CLAIM.MAC`, keyed with the store's lease secret): what
    /// `SCHEMA.complete(id, lease_token)` of the PostgreSQL store checks.
    pub async fn lease_token_text(&self) -> Result<String, EngineError> {
        Ok(self
            .engine
            .lease_key()
            .await?
            .format(self.envelope.id, self.token))
    }

    /// Tells the worker the task was settled by other means (its success
    /// committed in the handler's own transaction): whatever the handler
    /// returns, the worker settles nothing.
    pub fn settled_elsewhere(&self) {
        self.settled_elsewhere.store(true, Ordering::Release);
    }

    /// When the lease ends unless extended; the handler is stopped then.
    pub fn lease_deadline(&self) -> Timestamp {
        Timestamp::from_unix_ms(self.lease_deadline_ms.load(Ordering::Acquire))
            .unwrap_or(Timestamp::EPOCH)
    }

    /// Extends the lease so it ends `by` from now; fails with `LEASE_LOST`
    /// when the lease already lapsed or was taken over. The answer also
    /// tells of a cancel asked meanwhile ([`Task::cancelled`]).
    pub async fn extend_lease(&self, by: Duration) -> Result<Timestamp, EngineError> {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let mut current = self.envelope.clone();
        current.lease_expires_at = Some(self.lease_deadline());
        if let Some(request) = self.cancel.get() {
            current.cancel_requested = Some(request.clone());
        }
        let next = self.engine.extend_lease(&current, self.token, ms).await?;
        let deadline = next.lease_expires_at.unwrap_or_else(|| self.engine.now());
        self.lease_deadline_ms
            .store(deadline.unix_ms(), Ordering::Release);
        if let Some(request) = next.cancel_requested {
            self.asked_to_stop(request);
        }
        Ok(deadline)
    }

    /// The cancel asked of this task while it runs, if one was heard of.
    pub fn cancel_request(&self) -> Option<&CancelRequest> {
        self.cancel.get()
    }

    /// Whether a cancel was asked of this task while it runs.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.get().is_some()
    }

    /// Completes once a cancel is asked of this task (at once if it was
    /// already). A handler that then succeeds keeps its success; one that
    /// fails, defers or stops ends the task DEAD with reason `CANCELLED`.
    pub async fn cancelled(&self) {
        loop {
            let heard = self.cancel_heard.notified();
            tokio::pin!(heard);
            heard.as_mut().enable();
            if self.cancel.get().is_some() {
                return;
            }
            heard.await;
        }
    }

    /// The failure to report for a handler stopped because of a cancel:
    /// `rdq.Cancelled`, saying who asked and why.
    pub fn cancelled_failure(&self) -> Settlement {
        let message = match self.cancel.get() {
            Some(r) => format!(
                "cancelled by {}: {}",
                r.by,
                r.message.as_deref().unwrap_or("no reason given")
            ),
            None => "cancelled".to_owned(),
        };
        Settlement::Failure {
            error: ErrorInfo::new(error_types::CANCELLED, &message),
            kind: FailureKind::Permanent,
        }
    }

    /// Records the cancel asked of the task (the first one heard stands).
    fn asked_to_stop(&self, request: CancelRequest) {
        if self.cancel.set(request).is_ok() {
            self.cancel_heard.notify_waiters();
        }
    }

    /// The length of this claim's lease: from the open attempt's start to
    /// the deadline it was claimed with.
    fn lease_length(&self) -> Option<Duration> {
        let started = self.envelope.open_attempt()?.started_at.unix_ms();
        let until = self.envelope.lease_expires_at?.unix_ms();
        u64::try_from(until - started)
            .ok()
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis)
    }
}

/// Runs tasks. Implemented for any `Fn(Arc<Task>) -> impl Future<Output = Settlement>`.
pub trait Handler: Send + Sync + 'static {
    /// Runs one task and says how it went.
    fn handle(&self, task: Arc<Task>) -> BoxFuture<'static, Settlement>;
}

impl<F, Fut> Handler for F
where
    F: Fn(Arc<Task>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Settlement> + Send + 'static,
{
    fn handle(&self, task: Arc<Task>) -> BoxFuture<'static, Settlement> {
        Box::pin(self(task))
    }
}

/// Whether and how often a worker extends its running handlers' leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Heartbeat {
    /// Never: a handler's lease is what it was claimed with, unless the
    /// handler extends it ([`Task::extend_lease`]).
    #[default]
    Off,
    /// Every third of the claim's lease, by the lease's length.
    Auto,
    /// At this interval, by the lease's length.
    Every(Duration),
}

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Queues to claim from, in turn.
    pub queues: Vec<String>,
    /// Handlers running at once (default 64).
    pub concurrency: usize,
    /// Most tasks taken per claim (default 64).
    pub claim_batch: usize,
    /// Longest idle wait before claiming again, for work submitted by other
    /// processes (default 200 ms; work submitted in this process wakes the
    /// worker at once).
    pub poll_interval: Duration,
    /// Most settles written per store call (default 512).
    pub settle_batch: usize,
    /// How long shutdown waits for running handlers before handing their
    /// tasks back (default 30 s).
    pub shutdown_grace: Duration,
    /// Lease for claims; the queue's `lease_ms` when `None`.
    pub lease_ms: Option<u64>,
    /// Claimed tasks kept ready beyond the free handler slots, so one claim
    /// feeds many handlers (graphile-worker's local queue). Each waits under
    /// its own lease; those still waiting at shutdown are handed back unrun.
    /// Default [`Prefetch::Adaptive`]: 50 ms of work at the rate the
    /// handlers have been starting tasks, at most 1,024.
    pub prefetch: Prefetch,
    /// Lease extensions while a handler runs (default [`Heartbeat::Off`]).
    /// Each extension's answer also tells of a cancel asked of the task.
    pub heartbeat: Heartbeat,
    /// How long a handler asked to stop may go on before the worker stops
    /// it and reports the failure `rdq.Cancelled` (default 5 s). A handler
    /// that finishes first keeps its outcome: a success stands, anything
    /// else ends the task DEAD with reason `CANCELLED`.
    pub cancel_grace: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            queues: Vec::new(),
            concurrency: 64,
            claim_batch: 64,
            poll_interval: Duration::from_millis(200),
            settle_batch: 512,
            shutdown_grace: Duration::from_secs(30),
            lease_ms: None,
            prefetch: Prefetch::Adaptive,
            heartbeat: Heartbeat::Off,
            cancel_grace: Duration::from_secs(5),
        }
    }
}

/// The handlers a worker is running, by task: where a cancel heard on the
/// engine's channel is delivered.
#[derive(Default)]
struct Running(Mutex<HashMap<TaskId, Arc<Task>>>);

impl Running {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, Arc<Task>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, task: &Arc<Task>) {
        self.lock().insert(task.envelope.id, Arc::clone(task));
    }

    fn remove(&self, id: TaskId) {
        self.lock().remove(&id);
    }

    /// Reads the tasks `ids` (those running here) under their leases and
    /// tells each one a cancel was asked of.
    async fn deliver(&self, engine: &Engine, ids: &[TaskId]) {
        let tasks: Vec<Arc<Task>> = {
            let running = self.lock();
            ids.iter()
                .filter_map(|id| running.get(id).cloned())
                .collect()
        };
        let leases: Vec<_> = tasks
            .iter()
            .filter(|t| !t.is_cancelled())
            .map(|t| (t.envelope.id, t.token))
            .collect();
        for (state, (id, _)) in engine.leased(&leases).await.into_iter().zip(&leases) {
            let Ok(env) = state else { continue };
            let Some(request) = env.cancel_requested else {
                continue;
            };
            if let Some(task) = tasks.iter().find(|t| t.envelope.id == *id) {
                task.asked_to_stop(request);
            }
        }
    }

    fn ids(&self) -> Vec<TaskId> {
        self.lock().keys().copied().collect()
    }
}

/// Delivers the engine's cancel requests to the handlers running here until
/// the channel closes; after falling behind, checks every one.
async fn watch_cancels(
    engine: Engine,
    running: Arc<Running>,
    mut heard: broadcast::Receiver<TaskId>,
) {
    loop {
        match heard.recv().await {
            Ok(id) => running.deliver(&engine, &[id]).await,
            Err(broadcast::error::RecvError::Lagged(_)) => {
                let ids = running.ids();
                running.deliver(&engine, &ids).await;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Counters a worker keeps; read them while it runs.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Tasks claimed.
    pub claimed: AtomicU64,
    /// Settles the store accepted.
    pub settled: AtomicU64,
    /// Settles the store refused (e.g. `LEASE_LOST` after a lapse).
    pub settle_errors: AtomicU64,
    /// Handlers that panicked (recorded as retryable failures).
    pub panicked: AtomicU64,
    /// Handlers stopped because their lease lapsed (the reaper records them).
    pub lease_overruns: AtomicU64,
    /// Tasks handed back unrun or unfinished at shutdown.
    pub released: AtomicU64,
}

/// The worker loop. See the module documentation.
pub struct Worker {
    engine: Engine,
    config: WorkerConfig,
    handler: Arc<dyn Handler>,
    stats: Arc<WorkerStats>,
}

impl Worker {
    /// A worker running `handler` on tasks of `config.queues`.
    pub fn new(engine: Engine, config: WorkerConfig, handler: impl Handler) -> Self {
        Self {
            engine,
            config,
            handler: Arc::new(handler),
            stats: Arc::new(WorkerStats::default()),
        }
    }

    /// The worker's counters.
    pub fn stats(&self) -> Arc<WorkerStats> {
        Arc::clone(&self.stats)
    }

    /// Runs until `shutdown`, then stops claiming, lets running handlers finish
    /// within the grace period, hands back what did not finish, flushes every
    /// settle, and returns.
    pub async fn run(self, mut shutdown: Shutdown) -> Arc<WorkerStats> {
        let concurrency = self.config.concurrency.max(1);
        let permits = Arc::new(Semaphore::new(concurrency));
        let (settle_tx, settle_rx) = mpsc::unbounded_channel();
        let settler = tokio::spawn(settle_loop(
            self.engine.clone(),
            settle_rx,
            self.config.settle_batch.max(1),
            Arc::clone(&self.stats),
        ));
        let (abort_tx, abort_rx) = watch::channel(false);
        let live = Arc::new(Running::default());
        let watcher = tokio::spawn(watch_cancels(
            self.engine.clone(),
            Arc::clone(&live),
            self.engine.cancel_requests(),
        ));
        let mut running = JoinSet::new();
        let mut next_queue = 0usize;
        let mut ready: VecDeque<Claimed> = VecDeque::new();
        let mut pace = Pace::new(self.config.prefetch, std::time::Instant::now());
        let mut started_total = 0u64;
        let mut limited = FlowLimited::default();

        'claiming: while !shutdown.is_triggered() && !self.config.queues.is_empty() {
            let first = tokio::select! {
                () = shutdown.wait() => break 'claiming,
                permit = Arc::clone(&permits).acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => break 'claiming,
                },
            };
            let mut held = vec![first];
            while held.len() < self.config.claim_batch.max(1) {
                match Arc::clone(&permits).try_acquire_owned() {
                    Ok(p) => held.push(p),
                    Err(_) => break,
                }
            }
            // Reap finished handler tasks so the set does not grow.
            while running.try_join_next().is_some() {}

            let notify = Arc::clone(self.engine.work_available());
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();

            let mut claimed_any = false;
            let slots = held.len();
            let mut started = Vec::with_capacity(slots);
            // Tasks claimed earlier go first, unless their lease already lapsed
            // (the reaper records those).
            let now_ms = self.engine.now().unix_ms();
            while started.len() < slots {
                let Some(c) = ready.pop_front() else { break };
                if c.envelope
                    .lease_expires_at
                    .is_some_and(|d| d.unix_ms() <= now_ms)
                {
                    self.stats.lease_overruns.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                started.push(c);
            }
            let ahead = pace.ahead(started_total, std::time::Instant::now());
            // Whether claiming again at once may find more. A claim on a
            // flow-controlled queue that got fewer tasks than it asked for
            // met the queue's limits (or its end): room comes back with a
            // settle, which wakes this loop, so it waits for that instead of
            // taking the queue's turn again for nothing.
            let mut more = started.len() >= slots;
            for _ in 0..self.config.queues.len() {
                if started.len() >= slots {
                    break;
                }
                let queue = &self.config.queues[next_queue % self.config.queues.len()];
                next_queue = next_queue.wrapping_add(1);
                let flow_limited = limited.is_limited(&self.engine, queue).await;
                let ahead = if self.config.prefetch == Prefetch::Adaptive && flow_limited {
                    0
                } else {
                    ahead
                };
                let want = slots - started.len() + ahead.saturating_sub(ready.len());
                let claimed = match self.engine.claim(queue, want, self.config.lease_ms).await {
                    Ok(c) => c,
                    Err(e) => {
                        warn!(queue = %queue, error = %e, "claim failed");
                        Vec::new()
                    }
                };
                more |= claimed.len() >= want || (!flow_limited && !claimed.is_empty());
                self.stats
                    .claimed
                    .fetch_add(claimed.len() as u64, Ordering::Relaxed);
                for c in claimed {
                    if started.len() < slots {
                        started.push(c);
                    } else {
                        ready.push_back(c);
                    }
                }
            }
            for c in started {
                let Some(permit) = held.pop() else {
                    ready.push_front(c);
                    continue;
                };
                {
                    claimed_any = true;
                    started_total += 1;
                    let task = Arc::new(Task {
                        lease_deadline_ms: AtomicI64::new(
                            c.envelope
                                .lease_expires_at
                                .map_or(i64::MAX, Timestamp::unix_ms),
                        ),
                        envelope: c.envelope,
                        token: c.token,
                        engine: self.engine.clone(),
                        cancel: OnceLock::new(),
                        cancel_heard: Notify::new(),
                        settled_elsewhere: AtomicBool::new(false),
                    });
                    running.spawn(run_one(
                        task,
                        Arc::clone(&self.handler),
                        Lane {
                            engine: self.engine.clone(),
                            settle_tx: settle_tx.clone(),
                            abort: abort_rx.clone(),
                            stats: Arc::clone(&self.stats),
                            live: Arc::clone(&live),
                            heartbeat: self.config.heartbeat,
                            cancel_grace: self.config.cancel_grace,
                        },
                        permit,
                    ));
                }
            }
            drop(held);
            if !claimed_any || !more {
                tokio::select! {
                    () = shutdown.wait() => break 'claiming,
                    () = &mut woken => {}
                    () = tokio::time::sleep(self.config.poll_interval) => {}
                }
            }
        }

        debug!(running = running.len(), "worker stopping: no more claims");
        // What the store buffered for our claims goes back untouched.
        for queue in &self.config.queues {
            self.engine.stop_claiming(queue).await;
        }
        // Claimed but never started: hand them back, due now, no attempt spent.
        for c in ready.drain(..) {
            self.stats.released.fetch_add(1, Ordering::Relaxed);
            let request = SettleRequest {
                envelope: c.envelope,
                token: c.token,
                settlement: Settlement::Release,
            };
            if settle_tx.send(request).is_err() {
                warn!("settle loop gone; prefetched tasks will return when their leases lapse");
            }
        }
        let drained = tokio::time::timeout(self.config.shutdown_grace, async {
            while running.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            abort_tx.send_replace(true);
            while running.join_next().await.is_some() {}
        }
        watcher.abort();
        drop(settle_tx);
        if settler.await.is_err() {
            warn!("the settle loop ended abnormally");
        }
        self.stats
    }
}

/// Which queues are under flow control, read from their policies at most
/// once a second. An adaptive worker claims none ahead on those: a task
/// claimed ahead is IN_FLIGHT, so it would hold a slot of the queue's
/// limits while it waits, a slot a free handler elsewhere could use.
#[derive(Default)]
struct FlowLimited(HashMap<String, (std::time::Instant, bool)>);

impl FlowLimited {
    const FRESH: Duration = Duration::from_secs(1);

    async fn is_limited(&mut self, engine: &Engine, queue: &str) -> bool {
        let now = std::time::Instant::now();
        if let Some(&(read, limited)) = self.0.get(queue)
            && now.saturating_duration_since(read) < Self::FRESH
        {
            return limited;
        }
        // A policy that cannot be read is taken as limited: claim no more
        // than the free slots until it can.
        let limited = engine
            .policy(queue)
            .await
            .map_or(true, |policy| !policy.flow.is_unlimited());
        self.0.insert(queue.to_owned(), (now, limited));
        limited
    }
}

/// What every handler of one worker shares.
struct Lane {
    engine: Engine,
    settle_tx: mpsc::UnboundedSender<SettleRequest>,
    abort: watch::Receiver<bool>,
    stats: Arc<WorkerStats>,
    live: Arc<Running>,
    heartbeat: Heartbeat,
    cancel_grace: Duration,
}

/// Runs one handler under its lease and queues its settle.
async fn run_one(
    task: Arc<Task>,
    handler: Arc<dyn Handler>,
    mut lane: Lane,
    _permit: tokio::sync::OwnedSemaphorePermit,
) {
    let stats = Arc::clone(&lane.stats);
    lane.live.add(&task);
    let work = AssertUnwindSafe(handler.handle(Arc::clone(&task))).catch_unwind();
    let settlement = tokio::select! {
        result = work => match result {
            Ok(settlement) => settlement,
            Err(panic) => {
                stats.panicked.fetch_add(1, Ordering::Relaxed);
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "the handler panicked".to_owned());
                Settlement::Failure {
                    error: ErrorInfo::new(error_types::PANIC, &message),
                    kind: FailureKind::Retryable,
                }
            }
        },
        () = lease_lapse(&task, &lane.engine) => {
            // Past the lease the task may already run elsewhere: stop, report
            // nothing, and let the reaper record LEASE_EXPIRED.
            stats.lease_overruns.fetch_add(1, Ordering::Relaxed);
            lane.live.remove(task.envelope.id);
            return;
        }
        _ = lane.abort.wait_for(|&a| a) => {
            stats.released.fetch_add(1, Ordering::Relaxed);
            Settlement::Release
        }
        never = heartbeats(&task, lane.heartbeat) => match never {},
        () = stop_after_grace(&task, lane.cancel_grace) => task.cancelled_failure(),
    };
    lane.live.remove(task.envelope.id);
    if task.settled_elsewhere.load(Ordering::Acquire) {
        debug!(task_id = %task.envelope.id, "settled by the handler's own transaction");
        return;
    }
    let deadline = task.lease_deadline();
    let token = task.token;
    let asked = task.cancel.get().cloned();
    // The handler is done with the task: take the envelope rather than copy it.
    let mut envelope = match Arc::try_unwrap(task) {
        Ok(task) => task.envelope,
        Err(shared) => shared.envelope.clone(),
    };
    envelope.lease_expires_at = Some(deadline);
    if asked.is_some() {
        // Decide from what the store holds: the request is part of it.
        envelope.cancel_requested = asked;
    }
    let request = SettleRequest {
        envelope,
        token,
        settlement,
    };
    if let Err(unsent) = lane.settle_tx.send(request) {
        let env = &unsent.0.envelope;
        warn!(
            task_id = %env.id,
            queue = %env.queue,
            attempt = env.open_attempt().map_or(env.attempt_count, |a| a.attempt_no),
            "settle loop gone; the lease will lapse and the task retry"
        );
    }
}

/// Extends `task`'s lease by its length at each beat, for as long as the
/// handler runs; never completes. A refused extension stops beating (the
/// lease lapses as it would have).
async fn heartbeats(task: &Task, heartbeat: Heartbeat) -> std::convert::Infallible {
    let Some(length) = task.lease_length() else {
        return std::future::pending().await;
    };
    let every = match heartbeat {
        Heartbeat::Off => return std::future::pending().await,
        Heartbeat::Auto => length / 3,
        Heartbeat::Every(every) => every,
    }
    .max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(every).await;
        if let Err(e) = task.extend_lease(length).await {
            debug!(task_id = %task.envelope.id, error = %e, "lease extension refused; no more heartbeats");
            return std::future::pending().await;
        }
    }
}

/// Completes `grace` after a cancel is asked of `task`.
async fn stop_after_grace(task: &Task, grace: Duration) {
    task.cancelled().await;
    tokio::time::sleep(grace).await;
}

/// Completes when the task's lease (as extended) has passed.
async fn lease_lapse(task: &Task, engine: &Engine) {
    loop {
        let remaining = task.lease_deadline().unix_ms() - engine.now().unix_ms();
        if remaining <= 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(u64::try_from(remaining).unwrap_or(0))).await;
    }
}

/// Writes settles in batches: whatever is queued when the store is free goes
/// in one call (one commit on stores that can).
async fn settle_loop(
    engine: Engine,
    mut rx: mpsc::UnboundedReceiver<SettleRequest>,
    max_batch: usize,
    stats: Arc<WorkerStats>,
) {
    let mut batch = Vec::with_capacity(max_batch);
    while rx.recv_many(&mut batch, max_batch).await > 0 {
        let results = engine.settle_batch(std::mem::take(&mut batch)).await;
        for result in results {
            match result {
                Ok(_) => stats.settled.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    debug!(error = %e, "settle refused");
                    stats.settle_errors.fetch_add(1, Ordering::Relaxed)
                }
            };
        }
    }
}
