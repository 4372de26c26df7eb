//! [`JobContext`]: what a handler knows about the run it is in, and its
//! handle on the lease (the job's timeout).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rdq_envelope::queuey::CORRELATION_ID_HEADER;
use rdq_envelope::{CancelRequest, Envelope, TaskId, Timestamp};
use rdq_runtime::Task;

use crate::error::Error;
use crate::job::{Job, QueueSet};

/// Metadata about one run of a job, handed to its handler.
#[derive(Clone)]
#[non_exhaustive]
pub struct JobContext {
    /// The task's id, stable across retries, deferrals and redrives.
    pub task_id: TaskId,
    /// The job's name (`Job::NAME`, the envelope's `handler_ref`).
    pub job_name: &'static str,
    /// The queue the task was claimed from.
    pub queue: String,
    /// This attempt, 1-based (the envelope's `attempt_count` after the claim);
    /// a deferral does not count, a lease expiry does.
    pub attempt: u32,
    /// Attempts the effective retry policy allows: the handler's per-job
    /// policy, else a worker override, else the job's compiled-in policy,
    /// else the queue's live `max_attempts`.
    pub max_attempts: u32,
    /// How often the task was deferred.
    pub deferrals: u32,
    /// How often an operator redrove it from the DLQ.
    pub redrives: u32,
    /// The priority it was claimed at (`max_priority` after a deferral).
    pub priority: u8,
    /// Time since the task was first submitted.
    pub age: Duration,
    /// Every header, user headers and the `rdq.`-prefixed system ones.
    pub headers: BTreeMap<String, String>,
    /// The correlation id it was enqueued with (header `rdq.correlation_id`).
    pub correlation_id: Option<String>,
    /// The `handler_version` the task was submitted for.
    pub handler_version: Option<String>,
    lease: Option<Arc<Task>>,
}

impl std::fmt::Debug for JobContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobContext")
            .field("task_id", &self.task_id)
            .field("job_name", &self.job_name)
            .field("queue", &self.queue)
            .field("attempt", &self.attempt)
            .field("max_attempts", &self.max_attempts)
            .field("deferrals", &self.deferrals)
            .field("priority", &self.priority)
            .field("age", &self.age)
            .field("correlation_id", &self.correlation_id)
            .finish_non_exhaustive()
    }
}

impl JobContext {
    pub(crate) fn from_task(
        task: Arc<Task>,
        job_name: &'static str,
        max_attempts: u32,
        now: Timestamp,
    ) -> Self {
        let mut ctx = Self::from_envelope(task.envelope(), job_name, max_attempts, now);
        ctx.lease = Some(task);
        ctx
    }

    pub(crate) fn from_envelope(
        env: &Envelope,
        job_name: &'static str,
        max_attempts: u32,
        now: Timestamp,
    ) -> Self {
        Self {
            task_id: env.id,
            job_name,
            queue: env.queue.clone(),
            attempt: env.attempt_count,
            max_attempts,
            deferrals: env.deferral_count,
            redrives: env.redrive_count,
            priority: env.priority,
            age: Duration::from_millis(now.ms_since(env.created_at)),
            headers: env.headers.clone(),
            correlation_id: env.headers.get(CORRELATION_ID_HEADER).cloned(),
            handler_version: env.handler_version.clone(),
            lease: None,
        }
    }

    /// A context for unit-testing a handler without a store or worker: job
    /// `J` on its `attempt`-th of `max_attempts` tries, a fresh id, nothing
    /// deferred, no headers, no lease (extending it fails).
    ///
    /// ```
    /// # use rdq::prelude::*;
    /// # #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)] enum Q { Mail }
    /// # #[derive(Serialize, Deserialize, Job)] #[job(queue = Q::Mail)] struct Ping;
    /// let ctx = JobContext::for_test::<Ping>(3, 3).with_correlation_id("req-1");
    /// assert!(ctx.is_last_attempt());
    /// assert_eq!(ctx.queue, "mail");
    /// ```
    pub fn for_test<J: Job>(attempt: u32, max_attempts: u32) -> Self {
        Self {
            task_id: TaskId::generate(),
            job_name: J::NAME,
            queue: J::QUEUE.name().to_owned(),
            attempt,
            max_attempts,
            deferrals: 0,
            redrives: 0,
            priority: 0,
            age: Duration::ZERO,
            headers: BTreeMap::new(),
            correlation_id: None,
            handler_version: J::VERSION.map(str::to_owned),
            lease: None,
        }
    }

    /// Sets `deferrals` (for tests).
    #[must_use]
    pub fn with_deferrals(mut self, deferrals: u32) -> Self {
        self.deferrals = deferrals;
        self
    }

    /// Sets `age` (for tests).
    #[must_use]
    pub fn with_age(mut self, age: Duration) -> Self {
        self.age = age;
        self
    }

    /// Sets the correlation id and its header (for tests).
    #[must_use]
    pub fn with_correlation_id(mut self, id: impl Into<String>) -> Self {
        let id = id.into();
        self.headers
            .insert(CORRELATION_ID_HEADER.to_owned(), id.clone());
        self.correlation_id = Some(id);
        self
    }

    /// Adds a header (for tests).
    #[must_use]
    pub fn with_header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(key.into(), value.into());
        self
    }

    /// True when a failure now dead-letters the task (unless a deferral or an
    /// operator intervenes).
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }

    /// A header's value.
    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers.get(key).map(String::as_str)
    }

    /// When the lease ends unless extended (the worker extends it while the
    /// handler runs, unless a `job_timeout` is set). At that moment the
    /// worker stops the handler and the reaper records `LEASE_EXPIRED` (a
    /// retryable failure that counts as an attempt). `None` in tests.
    pub fn lease_deadline(&self) -> Option<Timestamp> {
        self.lease.as_ref().map(|t| t.lease_deadline())
    }

    /// Time left before the lease ends, by the engine's clock.
    pub fn lease_remaining(&self, now: Timestamp) -> Option<Duration> {
        self.lease_deadline()
            .map(|d| Duration::from_millis(d.ms_since(now)))
    }

    /// Whether a cancel was asked of this task while it runs (an operator's
    /// `rdq task cancel`, a program's `Producer::cancel`, on any node). A
    /// handler that checks it at safe points can stop early: returning an
    /// error then ends the task DEAD with reason `CANCELLED`, without a
    /// retry; returning `Ok` keeps the success. Always false in tests.
    pub fn is_cancelled(&self) -> bool {
        self.lease.as_ref().is_some_and(|t| t.is_cancelled())
    }

    /// Who asked this task to stop, when and why, once known.
    pub fn cancel_request(&self) -> Option<&CancelRequest> {
        self.lease.as_ref().and_then(|t| t.cancel_request())
    }

    /// Completes once a cancel is asked of this task (never, in tests): race
    /// it against the work, e.g. in `tokio::select!`. A handler that does not
    /// stop within the worker's `cancel_grace` (5 s by default) is stopped
    /// and its task ends DEAD with reason `CANCELLED`.
    ///
    /// ```no_run
    /// # use rdq::prelude::*;
    /// # async fn work() {}
    /// # async fn handle(ctx: JobContext) -> Result<(), JobError> {
    /// tokio::select! {
    ///     () = work() => Ok(()),
    ///     () = ctx.cancelled() => Err(JobError::new("app.Cancelled", "stopped on request")),
    /// }
    /// # }
    /// ```
    pub async fn cancelled(&self) {
        match &self.lease {
            Some(task) => task.cancelled().await,
            None => std::future::pending().await,
        }
    }

    /// Extends the lease so it ends `by` from now; returns the new deadline.
    /// Fails with `LEASE_LOST` when the lease already lapsed or was taken over,
    /// and with `UNSUPPORTED` on a context made by [`JobContext::for_test`].
    pub async fn extend_lease(&self, by: Duration) -> Result<Timestamp, Error> {
        match &self.lease {
            Some(task) => Ok(task.extend_lease(by).await?),
            None => Err(Error::Engine(rdq_engine::EngineError::Unsupported(
                "a test context holds no lease".into(),
            ))),
        }
    }

    /// The lease token in the form the store's SQL functions take: with the
    /// PostgreSQL store, `rdq_store_postgres::complete_in(&tx, schema,
    /// ctx.task_id, &token)` settles the task's success in the handler's own
    /// transaction (docs/stores/postgres.md, "Completing inside your
    /// transaction"); then call [`JobContext::settled_elsewhere`].
    /// `UNSUPPORTED` on a test context.
    pub async fn lease_token(&self) -> Result<String, Error> {
        match &self.lease {
            Some(task) => Ok(task.lease_token_text().await?),
            None => Err(Error::Engine(rdq_engine::EngineError::Unsupported(
                "a test context holds no lease".into(),
            ))),
        }
    }

    /// Tells the worker this task was settled by the handler itself (its
    /// success committed with the handler's own writes): the worker reports
    /// nothing for it, whatever the handler returns. Call it once that
    /// transaction committed.
    pub fn settled_elsewhere(&self) {
        if let Some(task) = &self.lease {
            task.settled_elsewhere();
        }
    }
}
