//! Testing an application without any service: [`TestBackend`] is the
//! in-memory store on a clock driven by tokio's ([`TokioClock`]), so with
//! `#[tokio::test(start_paused = true)]` every delay, backoff, deferral and
//! lease runs in virtual time, and a test that "waits an hour" takes
//! milliseconds. Its helpers say what happened to each queue's tasks.
//!
//! ```
//! use std::time::Duration;
//! use rdq::prelude::*;
//! use rdq::testing::TestBackend;
//!
//! #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
//! enum AppQueues { Emails }
//!
//! #[derive(Serialize, Deserialize, Job)]
//! #[job(queue = AppQueues::Emails)]
//! struct SendEmail { to: String }
//!
//! #[tokio::main(flavor = "current_thread", start_paused = true)]
//! async fn main() {
//!     let backend = TestBackend::new();
//!     let producer = backend.producer::<AppQueues>();
//!     producer.enqueue_after(&SendEmail { to: "a@b.c".into() }, Duration::from_secs(3600)).await.unwrap();
//!
//!     let worker = backend
//!         .worker::<AppQueues>()
//!         .handler_fn(|_job: SendEmail, _ctx: JobContext| async move { Ok::<(), JobError>(()) })
//!         .build()
//!         .unwrap()
//!         .start();
//!     assert!(backend.wait_until_settled("emails", Duration::from_secs(7200)).await);
//!     worker.shutdown(Duration::from_secs(1)).await.unwrap();
//!
//!     assert_eq!(backend.succeeded("emails").await.len(), 1);
//!     assert!(backend.dead_letters("emails").await.is_empty());
//! }
//! ```

use std::sync::Arc;
use std::time::Duration;

use rdq_engine::machine::BASE_PRIORITY_HEADER;
use rdq_engine::store::MAX_PAGE;
use rdq_engine::{Clock, Engine, ListOrder, ListQuery, QueueCounts, QueuePolicy};
use rdq_envelope::{AttemptRecord, Envelope, ErrorInfo, Outcome, Status, TaskId, Timestamp};
use rdq_store_memory::MemoryStore;

use crate::dead_letter::DeadLetterCause;
use crate::error::Error;
use crate::job::QueueSet;
use crate::producer::Producer;
use crate::worker::{Worker, WorkerBuilder};

/// A [`Clock`] that follows `tokio::time`: paused and advanced with tokio's,
/// so `tokio::time::advance` (or a sleep under a paused clock) moves rdq's
/// time too. Create it inside the runtime whose clock it should follow.
#[derive(Debug)]
pub struct TokioClock {
    base: Timestamp,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading `base` now, moving with tokio's time from here.
    pub fn starting_at(base: Timestamp) -> Self {
        Self {
            base,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        self.base.plus(self.start.elapsed())
    }
}

/// Where a [`TestBackend`]'s clock starts: a fixed instant, so test output
/// (timestamps, backoff jitter aside) is the same on every run.
pub const TEST_EPOCH_MS: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00.000Z

/// One task in the DLQ, with why it is there.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DeadTask {
    /// The task as stored.
    pub envelope: Envelope,
    /// Why it died.
    pub cause: DeadLetterCause,
    /// The error of its last attempt.
    pub error: Option<ErrorInfo>,
}

impl DeadTask {
    /// The last attempt's `error_type` (empty if none was recorded).
    pub fn error_type(&self) -> &str {
        self.error.as_ref().map_or("", |e| e.error_type.as_str())
    }

    /// The last attempt's message (empty if none was recorded).
    pub fn message(&self) -> &str {
        self.error.as_ref().map_or("", |e| e.message.as_str())
    }
}

/// One failed attempt after which the task was tried again.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Retry {
    /// The task.
    pub task_id: TaskId,
    /// The attempt that failed (its outcome, error and times).
    pub attempt: AttemptRecord,
}

/// The in-memory store on virtual time, with inspection helpers.
/// Cheap to clone; clones share the store.
#[derive(Clone)]
pub struct TestBackend {
    engine: Engine,
}

impl std::fmt::Debug for TestBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestBackend")
            .field("now", &self.engine.now())
            .finish_non_exhaustive()
    }
}

impl Default for TestBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl TestBackend {
    /// A fresh in-memory store whose clock starts at [`TEST_EPOCH_MS`] and
    /// follows tokio's. Call it inside the test's runtime.
    pub fn new() -> Self {
        let clock = TokioClock::starting_at(
            Timestamp::from_unix_ms(TEST_EPOCH_MS).unwrap_or(Timestamp::EPOCH),
        );
        Self {
            engine: Engine::new(Arc::new(MemoryStore::new()), Arc::new(clock)),
        }
    }

    /// The engine, for anything the helpers do not cover.
    pub fn engine(&self) -> Engine {
        self.engine.clone()
    }

    /// rdq's time now.
    pub fn now(&self) -> Timestamp {
        self.engine.now()
    }

    /// A producer for queue set `Q`.
    pub fn producer<Q: QueueSet>(&self) -> Producer<Q> {
        Producer::new(self.engine.clone())
    }

    /// A worker builder for queue set `Q`, polling every 100 ms and reaping
    /// lapsed leases every 100 ms (of virtual time, when paused): delayed
    /// work starts within 100 ms of falling due, and an hour of virtual
    /// time costs 36,000 polls, not millions.
    pub fn worker<Q: QueueSet>(&self) -> WorkerBuilder<Q> {
        Worker::builder(self.engine.clone())
            .poll_interval(Duration::from_millis(100))
            .reaper(Some(rdq_runtime::ReaperConfig {
                interval: Duration::from_millis(100),
                ..rdq_runtime::ReaperConfig::default()
            }))
    }

    /// Stores `queue`'s policy.
    pub async fn set_policy(&self, queue: &str, policy: &QueuePolicy) -> Result<(), Error> {
        Ok(self.engine.set_policy(queue, policy).await?)
    }

    /// Every task of `queue` (optionally only in `status`), oldest first.
    pub async fn tasks(&self, queue: &str, status: Option<Status>) -> Vec<Envelope> {
        let mut all = Vec::new();
        let mut cursor = None;
        loop {
            let query = ListQuery {
                queue: queue.to_owned(),
                status,
                cursor,
                limit: MAX_PAGE,
                order: ListOrder::OldestFirst,
                ..ListQuery::default()
            };
            let Ok(page) = self.engine.list(&query).await else {
                return all;
            };
            all.extend(page.items);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return all,
            }
        }
    }

    /// The task with this id.
    pub async fn task(&self, id: TaskId) -> Option<Envelope> {
        self.engine.get(id).await.ok()
    }

    /// Tasks waiting (due or not yet due).
    pub async fn pending(&self, queue: &str) -> Vec<Envelope> {
        self.tasks(queue, Some(Status::Pending)).await
    }

    /// Tasks waiting and not yet due: delayed, backing off or deferred.
    pub async fn scheduled(&self, queue: &str) -> Vec<Envelope> {
        let now = self.now();
        let mut tasks = self.pending(queue).await;
        tasks.retain(|e| e.next_attempt_at.is_some_and(|due| due > now));
        tasks
    }

    /// Tasks waiting after a deferral (by a handler, or `Producer::defer`),
    /// held or released but not yet run again.
    pub async fn deferred(&self, queue: &str) -> Vec<Envelope> {
        let mut tasks = self.pending(queue).await;
        tasks.retain(|e| e.deferral_count > 0 || e.headers.contains_key(BASE_PRIORITY_HEADER));
        tasks
    }

    /// Tasks claimed and not yet settled.
    pub async fn in_flight(&self, queue: &str) -> Vec<Envelope> {
        self.tasks(queue, Some(Status::InFlight)).await
    }

    /// Tasks that succeeded (until the pruner removes them).
    pub async fn succeeded(&self, queue: &str) -> Vec<Envelope> {
        self.tasks(queue, Some(Status::Succeeded)).await
    }

    /// Every failed attempt (retryable failure or lease expiry) after which
    /// the task was scheduled again, oldest task first.
    pub async fn retried(&self, queue: &str) -> Vec<Retry> {
        let mut retries = Vec::new();
        for env in self.tasks(queue, None).await {
            let last = env.attempts.len().saturating_sub(1);
            for (i, attempt) in env.attempts.iter().enumerate() {
                let failed = matches!(
                    attempt.outcome,
                    Some(Outcome::RetryableFailure | Outcome::LeaseExpired)
                );
                let fatal = i == last && env.status == Status::Dead;
                if failed && !fatal {
                    retries.push(Retry {
                        task_id: env.id,
                        attempt: attempt.clone(),
                    });
                }
            }
        }
        retries
    }

    /// The DLQ of `queue`, oldest first, each with its cause and last error.
    pub async fn dead_letters(&self, queue: &str) -> Vec<DeadTask> {
        self.tasks(queue, Some(Status::Dead))
            .await
            .into_iter()
            .map(|envelope| DeadTask {
                cause: DeadLetterCause::of(&envelope).unwrap_or(DeadLetterCause::AttemptsExhausted),
                error: envelope.last_error().cloned(),
                envelope,
            })
            .collect()
    }

    /// Tasks of `queue` per status.
    pub async fn counts(&self, queue: &str) -> QueueCounts {
        self.engine
            .counts()
            .await
            .ok()
            .and_then(|all| all.into_iter().find(|c| c.queue == queue))
            .unwrap_or_else(|| QueueCounts {
                queue: queue.to_owned(),
                ..QueueCounts::default()
            })
    }

    /// Waits (in virtual time, when paused) until every task of `queue` is
    /// SUCCEEDED or DEAD, checking every 100 ms; false if `timeout` passed first.
    pub async fn wait_until_settled(&self, queue: &str, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let c = self.counts(queue).await;
            if c.pending == 0 && c.in_flight == 0 {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
