//! The per-task path inside a worker: find the handler, honour the queue's
//! `handler_version_mismatch`, decode, run, apply the outcome ladder, and
//! tell the dead-letter hook before the engine stores a death.
//!
//! It is the handler the runtime's worker loop (`rdq_runtime::Worker`) runs
//! for every claimed task; claiming, concurrency, lease fencing and batched
//! settles stay in that loop, so the SDK and `rdq bench` share one path.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use rdq_engine::machine;
use rdq_engine::{Engine, FailureKind, QueuePolicy, Settlement, VersionMismatch};
use rdq_envelope::error_types;
use rdq_envelope::{Envelope, ErrorInfo, Status};
use rdq_runtime::Task;
use tokio::sync::watch;
use tracing::{Instrument, debug, error, info, warn};

use crate::dead_letter::{DeadLetter, DeadLetterCause, ErasedHook};
use crate::handler::{ErasedJob, Run, RunSetup, aborted};
use crate::outcome::{Classifier, Decision, OutcomeMapper, decide};
use crate::retry::{RetryPolicy, millis};

/// One registered job type, as dispatch needs it.
pub(crate) struct Entry {
    pub job: &'static str,
    pub version: Option<&'static str>,
    pub runner: Arc<dyn ErasedJob>,
    /// Worker override, else the job's compiled-in policy.
    pub configured: Option<RetryPolicy>,
}

/// Outcome counters a worker keeps beside the runtime's.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub succeeded: AtomicU64,
    pub retried: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub deferred: AtomicU64,
    pub released: AtomicU64,
    pub panicked: AtomicU64,
}

/// Queue policies read through a short-lived cache: the engine re-reads the
/// live policy at every settle anyway; the worker needs it for `JobContext`
/// and to foresee deaths, and one store read per task would be wasteful.
pub(crate) struct PolicyCache {
    engine: Engine,
    ttl: Duration,
    entries: Mutex<HashMap<String, (tokio::time::Instant, QueuePolicy)>>,
}

impl PolicyCache {
    pub fn new(engine: Engine, ttl: Duration) -> Self {
        Self {
            engine,
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn cached(&self, queue: &str, fresh_only: bool) -> Option<QueuePolicy> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(queue)
            .filter(|(at, _)| !fresh_only || at.elapsed() < self.ttl)
            .map(|(_, p)| p.clone())
    }

    pub async fn get(&self, queue: &str) -> QueuePolicy {
        if let Some(policy) = self.cached(queue, true) {
            return policy;
        }
        match self.engine.policy(queue).await {
            Ok(policy) => {
                self.entries
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(
                        queue.to_owned(),
                        (tokio::time::Instant::now(), policy.clone()),
                    );
                policy
            }
            Err(e) => {
                warn!(queue, error = %e, "queue policy unavailable; using the last known or the default");
                self.cached(queue, false).unwrap_or_default()
            }
        }
    }
}

/// Everything the per-task path needs, shared by all of a worker's tasks.
pub(crate) struct Dispatcher {
    pub engine: Engine,
    /// queue → job name → entry.
    pub entries: HashMap<String, HashMap<String, Arc<Entry>>>,
    pub classifiers: Vec<Classifier>,
    pub mappers: HashMap<String, Arc<dyn OutcomeMapper>>,
    pub hook: Option<Arc<dyn ErasedHook>>,
    pub policies: PolicyCache,
    pub abort: watch::Receiver<bool>,
    pub version_requeue_delay: Duration,
    pub counters: Arc<Counters>,
}

/// What the worker decided, before it is written.
struct Verdict {
    settlement: Settlement,
    /// Set when the cause is known without looking at the outcome.
    cause: Option<DeadLetterCause>,
    max_attempts: u32,
}

impl Verdict {
    fn permanent(error_type: &str, message: &str, cause: DeadLetterCause, max: u32) -> Self {
        Self {
            settlement: Settlement::Failure {
                error: ErrorInfo::new(error_type, message),
                kind: FailureKind::Permanent,
            },
            cause: Some(cause),
            max_attempts: max,
        }
    }
}

fn failure(
    error: ErrorInfo,
    kind: FailureKind,
    retry: Option<&RetryPolicy>,
    policy: &QueuePolicy,
) -> Settlement {
    match retry {
        Some(retry) => Settlement::FailureWithRetry {
            error,
            kind,
            retry: retry.to_override(&policy.backoff),
        },
        None => Settlement::Failure { error, kind },
    }
}

impl Dispatcher {
    /// Runs one claimed task and says how to settle it.
    pub async fn dispatch(self: Arc<Self>, task: Arc<Task>) -> Settlement {
        let env = task.envelope();
        let span = tracing::info_span!(
            "task",
            task_id = %env.id,
            queue = %env.queue,
            job = %env.handler_ref,
            attempt = env.attempt_count,
        );
        self.dispatch_in_span(task).instrument(span).await
    }

    async fn dispatch_in_span(&self, task: Arc<Task>) -> Settlement {
        let env = task.envelope();
        let policy = self.policies.get(&env.queue).await;
        let verdict = self.verdict(&task, &policy).await;
        let Some(verdict) = verdict else {
            self.counters.released.fetch_add(1, Ordering::Relaxed);
            debug!("shutdown deadline passed; handing the task back");
            return Settlement::Release;
        };
        self.count_and_report(&task, &policy, verdict).await
    }

    /// `None` when the run was aborted by shutdown's deadline.
    async fn verdict(&self, task: &Arc<Task>, policy: &QueuePolicy) -> Option<Verdict> {
        let env = task.envelope();
        let Some(entry) = self
            .entries
            .get(&env.queue)
            .and_then(|jobs| jobs.get(&env.handler_ref))
        else {
            warn!("no handler registered; dead-lettering");
            return Some(Verdict::permanent(
                error_types::NO_HANDLER,
                &format!(
                    "no handler for job {:?} on queue {:?} in this worker",
                    env.handler_ref, env.queue
                ),
                DeadLetterCause::NoHandler,
                policy.max_attempts,
            ));
        };
        if let Some(wanted) = env.handler_version.as_deref()
            && entry.version != Some(wanted)
        {
            let have = entry.version.unwrap_or("none");
            match policy.handler_version_mismatch {
                VersionMismatch::Run => {
                    debug!(
                        wanted,
                        have, "handler version differs; running anyway (policy: run)"
                    );
                }
                VersionMismatch::Requeue => {
                    info!(
                        wanted,
                        have, "handler version differs; requeueing (policy: requeue)"
                    );
                    return Some(Verdict {
                        settlement: Settlement::Defer {
                            delay_ms: millis(self.version_requeue_delay),
                        },
                        cause: None,
                        max_attempts: policy.max_attempts,
                    });
                }
                VersionMismatch::Dead => {
                    warn!(
                        wanted,
                        have, "handler version differs; dead-lettering (policy: dead)"
                    );
                    return Some(Verdict::permanent(
                        error_types::HANDLER_VERSION_MISMATCH,
                        &format!(
                            "task wants handler version {wanted:?}; this worker's {} is {have:?}",
                            entry.job
                        ),
                        DeadLetterCause::HandlerVersionMismatch,
                        policy.max_attempts,
                    ));
                }
            }
        }
        let setup = RunSetup {
            configured: entry.configured.clone(),
            queue_max_attempts: policy.max_attempts,
            now: self.engine.now(),
            abort: self.abort.clone(),
        };
        let verdict = match entry.runner.run(Arc::clone(task), setup).await {
            Run::Aborted => return None,
            Run::Undecodable(why) => {
                error!(error = %why, "payload does not decode into the job type; dead-lettering");
                Verdict::permanent(
                    error_types::UNDECODABLE_PAYLOAD,
                    &format!("payload of job {:?} does not decode: {why}", entry.job),
                    DeadLetterCause::UndecodablePayload,
                    policy.max_attempts,
                )
            }
            Run::Panicked { message, retry } => {
                warn!(panic = %message, "handler panicked; a retryable failure");
                self.counters.panicked.fetch_add(1, Ordering::Relaxed);
                Verdict {
                    settlement: failure(
                        ErrorInfo::new(error_types::PANIC, &message),
                        FailureKind::Retryable,
                        retry.as_ref(),
                        policy,
                    ),
                    cause: None,
                    max_attempts: retry.map_or(policy.max_attempts, |r| r.max_attempts),
                }
            }
            Run::Returned {
                returned,
                ctx,
                retry,
            } => {
                let mapper = self.mappers.get(&env.queue).map(|m| &**m);
                let settlement = match decide(&returned, mapper, &self.classifiers, &ctx) {
                    Decision::Success => Settlement::Success,
                    Decision::Defer(delay) => Settlement::Defer {
                        delay_ms: millis(delay),
                    },
                    Decision::Throttle(delay) => {
                        self.throttle(env, delay).await;
                        Settlement::Defer {
                            delay_ms: millis(delay),
                        }
                    }
                    Decision::Failure { error, kind } => {
                        debug!(error_type = %error.error_type, ?kind, "handler failed");
                        failure(error, kind, retry.as_ref(), policy)
                    }
                };
                Verdict {
                    settlement,
                    cause: None,
                    max_attempts: ctx.max_attempts,
                }
            }
        };
        Some(verdict)
    }

    /// Throttles `env`'s flow key (its queue, without one) for `delay`;
    /// a store that cannot throttle leaves it to the deferral alone.
    async fn throttle(&self, env: &rdq_envelope::Envelope, delay: Duration) {
        let key = env.headers.get(rdq_engine::flow::FLOW_KEY_HEADER);
        let until = self.engine.now().plus(delay);
        if let Err(e) = self
            .engine
            .throttle(&env.queue, key.map(String::as_str), until)
            .await
        {
            debug!(error = %e, queue = %env.queue, "the store cannot throttle; deferring the task only");
        }
    }

    async fn count_and_report(
        &self,
        task: &Task,
        policy: &QueuePolicy,
        verdict: Verdict,
    ) -> Settlement {
        let counter = match &verdict.settlement {
            Settlement::Success => &self.counters.succeeded,
            Settlement::Defer { .. } => &self.counters.deferred,
            Settlement::Release => &self.counters.released,
            _ => &self.counters.retried,
        };
        // Foresee the engine's decision with its own pure function.
        let mut current = task.envelope().clone();
        current.lease_expires_at = Some(task.lease_deadline());
        let next = machine::settle(
            &current,
            task.token(),
            &verdict.settlement,
            policy,
            self.engine.now(),
        );
        let Ok(next) = next else {
            counter.fetch_add(1, Ordering::Relaxed);
            return verdict.settlement;
        };
        if next.status != Status::Dead {
            counter.fetch_add(1, Ordering::Relaxed);
            return verdict.settlement;
        }
        self.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
        let cause = verdict
            .cause
            .or_else(|| DeadLetterCause::of(&next))
            .unwrap_or(DeadLetterCause::AttemptsExhausted);
        warn!(?cause, "task goes to the DLQ");
        if let Some(hook) = &self.hook {
            // A hook that hangs must not hold shutdown past its deadline.
            let mut abort = self.abort.clone();
            let dead = DeadLetter::new(next, cause, verdict.max_attempts);
            tokio::select! {
                () = notify(hook.as_ref(), dead) => {}
                () = aborted(&mut abort) => {
                    warn!("shutdown deadline passed during the dead-letter hook; settling anyway");
                }
            }
        }
        verdict.settlement
    }

    /// Reports lease-expiry deaths the reaper just wrote, for this worker's queues.
    pub fn reaped(self: &Arc<Self>, reaped: &[Envelope]) {
        if self.hook.is_none() {
            return;
        }
        let dead: Vec<Envelope> = reaped
            .iter()
            .filter(|e| e.status == Status::Dead && self.entries.contains_key(&e.queue))
            .cloned()
            .collect();
        if dead.is_empty() {
            return;
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let Some(hook) = &this.hook else { return };
            for env in dead {
                this.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
                let max_attempts = this.policies.get(&env.queue).await.max_attempts;
                let cause = DeadLetterCause::of(&env).unwrap_or(DeadLetterCause::LeaseExpired);
                notify(hook.as_ref(), DeadLetter::new(env, cause, max_attempts)).await;
            }
        });
    }
}

async fn notify(hook: &dyn ErasedHook, dead: DeadLetter) {
    let cause = dead.cause;
    if AssertUnwindSafe(hook.call(dead))
        .catch_unwind()
        .await
        .is_err()
    {
        error!(
            ?cause,
            "the dead-letter hook panicked; the task is dead-lettered anyway"
        );
    }
}
