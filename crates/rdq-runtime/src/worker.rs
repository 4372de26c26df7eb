//! The worker loop: claim in batches, run handlers with bounded concurrency,
//! settle in batches, fence every handler by its lease.
//!
//! The SDK's `Worker` wraps this loop and `rdq bench` drives it directly, so
//! the benchmark measures exactly the path users get.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use std::collections::VecDeque;

use rdq_engine::{
    Claimed, Engine, EngineError, FailureKind, LeaseToken, SettleRequest, Settlement,
};
use rdq_envelope::error_types;
use rdq_envelope::{Envelope, ErrorInfo, Timestamp};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tracing::{debug, warn};

use crate::shutdown::Shutdown;

/// A claimed task as a handler sees it, with a handle on its lease.
pub struct Task {
    envelope: Envelope,
    token: LeaseToken,
    lease_deadline_ms: AtomicI64,
    engine: Engine,
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

    /// When the lease ends unless extended; the handler is stopped then.
    pub fn lease_deadline(&self) -> Timestamp {
        Timestamp::from_unix_ms(self.lease_deadline_ms.load(Ordering::Acquire))
            .unwrap_or(Timestamp::EPOCH)
    }

    /// Extends the lease so it ends `by` from now; fails with `LEASE_LOST`
    /// when the lease already lapsed or was taken over.
    pub async fn extend_lease(&self, by: Duration) -> Result<Timestamp, EngineError> {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let mut current = self.envelope.clone();
        current.lease_expires_at = Some(self.lease_deadline());
        let next = self.engine.extend_lease(&current, self.token, ms).await?;
        let deadline = next.lease_expires_at.unwrap_or_else(|| self.engine.now());
        self.lease_deadline_ms
            .store(deadline.unix_ms(), Ordering::Release);
        Ok(deadline)
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
    /// Claimed tasks kept ready beyond the free handler slots (default 0), so
    /// one claim feeds many handlers (graphile-worker's local queue). Each
    /// waits under its own lease; those still waiting at shutdown are handed
    /// back unrun.
    pub prefetch: usize,
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
            prefetch: 0,
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
        let mut running = JoinSet::new();
        let mut next_queue = 0usize;
        let mut ready: VecDeque<Claimed> = VecDeque::new();

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
            for _ in 0..self.config.queues.len() {
                if started.len() >= slots {
                    break;
                }
                let queue = &self.config.queues[next_queue % self.config.queues.len()];
                next_queue = next_queue.wrapping_add(1);
                let want = slots - started.len() + self.config.prefetch.saturating_sub(ready.len());
                let claimed = match self.engine.claim(queue, want, self.config.lease_ms).await {
                    Ok(c) => c,
                    Err(e) => {
                        warn!(queue = %queue, error = %e, "claim failed");
                        Vec::new()
                    }
                };
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
                    let task = Arc::new(Task {
                        lease_deadline_ms: AtomicI64::new(
                            c.envelope
                                .lease_expires_at
                                .map_or(i64::MAX, Timestamp::unix_ms),
                        ),
                        envelope: c.envelope,
                        token: c.token,
                        engine: self.engine.clone(),
                    });
                    running.spawn(run_one(
                        task,
                        Arc::clone(&self.handler),
                        self.engine.clone(),
                        settle_tx.clone(),
                        abort_rx.clone(),
                        Arc::clone(&self.stats),
                        permit,
                    ));
                }
            }
            drop(held);
            if !claimed_any {
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
        drop(settle_tx);
        if settler.await.is_err() {
            warn!("the settle loop ended abnormally");
        }
        self.stats
    }
}

/// Runs one handler under its lease and queues its settle.
async fn run_one(
    task: Arc<Task>,
    handler: Arc<dyn Handler>,
    engine: Engine,
    settle_tx: mpsc::UnboundedSender<SettleRequest>,
    mut abort: watch::Receiver<bool>,
    stats: Arc<WorkerStats>,
    _permit: tokio::sync::OwnedSemaphorePermit,
) {
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
        () = lease_lapse(&task, &engine) => {
            // Past the lease the task may already run elsewhere: stop, report
            // nothing, and let the reaper record LEASE_EXPIRED.
            stats.lease_overruns.fetch_add(1, Ordering::Relaxed);
            return;
        }
        _ = abort.wait_for(|&a| a) => {
            stats.released.fetch_add(1, Ordering::Relaxed);
            Settlement::Release
        }
    };
    let deadline = task.lease_deadline();
    let token = task.token;
    // The handler is done with the task: take the envelope rather than copy it.
    let mut envelope = match Arc::try_unwrap(task) {
        Ok(task) => task.envelope,
        Err(shared) => shared.envelope.clone(),
    };
    envelope.lease_expires_at = Some(deadline);
    let request = SettleRequest {
        envelope,
        token,
        settlement,
    };
    if let Err(unsent) = settle_tx.send(request) {
        let env = &unsent.0.envelope;
        warn!(
            task_id = %env.id,
            queue = %env.queue,
            attempt = env.open_attempt().map_or(env.attempt_count, |a| a.attempt_no),
            "settle loop gone; the lease will lapse and the task retry"
        );
    }
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
