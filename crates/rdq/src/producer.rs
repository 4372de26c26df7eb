//! [`Producer`]: typed, checked submits into one application's queues.
//!
//! Every form is a shorthand for [`Producer::enqueue_with`] and its
//! [`EnqueueOptions`]; [`Producer::batch`] and [`Producer::enqueue_many`]
//! submit many jobs in one engine call, which the store commits at once.

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::time::Duration;

use rdq_engine::machine::BASE_PRIORITY_HEADER;
use rdq_engine::unique::UniqueRequest;
use rdq_engine::{Engine, EngineError, QueuePolicy, SubmitRequest, Submitted};
use rdq_envelope::TaskId;
use rdq_envelope::queuey::{CORRELATION_ID_HEADER, JSON_CONTENT_TYPE};

use crate::error::Error;
use crate::job::{Job, QueueSet};
use crate::retry::millis;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Schedule {
    #[default]
    Now,
    /// Due after the delay, at the task's own priority, behind the backlog.
    After(Duration),
    /// Held for the delay, then due at the queue's `max_priority`.
    Deferred(Duration),
}

/// When and how a job is submitted. The default is "now, priority 0, no key".
///
/// ```
/// # use std::time::Duration;
/// let options = rdq::EnqueueOptions::deferred(Duration::from_secs(30))
///     .correlation_id("req-7f3a")
///     .idempotency_key("order-42-receipt")
///     .header("tenant", "acme");
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnqueueOptions {
    schedule: Schedule,
    idempotency_key: Option<String>,
    correlation_id: Option<String>,
    headers: BTreeMap<String, String>,
    priority: Option<u8>,
    handler_version: Option<String>,
    flow_key: Option<String>,
    unique: Option<UniqueRequest>,
}

impl EnqueueOptions {
    /// Due now.
    pub fn now() -> Self {
        Self::default()
    }

    /// Due after `delay`, joining the queue at its own priority.
    pub fn after(delay: Duration) -> Self {
        Self {
            schedule: Schedule::After(delay),
            ..Self::default()
        }
    }

    /// Held for `delay`, then due at the queue's `max_priority`, ahead of
    /// the backlog that piled up meanwhile.
    pub fn deferred(delay: Duration) -> Self {
        Self {
            schedule: Schedule::Deferred(delay),
            ..Self::default()
        }
    }

    /// The task's flow key: the queue's per-key limits and fairness count it
    /// (`docs/flow-control.md`), stored as the `rdq.flow_key` header. A
    /// tenant id, an account, a host: 1–128 bytes of `[A-Za-z0-9._:/@=+-]`.
    #[must_use]
    pub fn flow_key(mut self, key: impl Into<String>) -> Self {
        self.flow_key = Some(key.into());
        self
    }

    /// The job's unique key, scope, hold and conflict mode
    /// (`docs/uniqueness.md`): while the task holding the key holds it, a
    /// second enqueue of the key fails with `UNIQUE_HELD` naming the holder
    /// (or, with [`crate::OnConflict::Replace`] / [`crate::OnConflict::Debounce`],
    /// updates a holder still waiting and answers it as
    /// [`Enqueued::existing`]; with [`crate::OnConflict::Existing`], answers
    /// the holder so, unchanged).
    ///
    /// ```
    /// use rdq::{EnqueueOptions, Hold, UniqueRequest};
    /// let options = EnqueueOptions::now().unique(UniqueRequest {
    ///     key_from: vec!["/customer_id".into()],
    ///     hold: Hold::UntilFinished,
    ///     ..UniqueRequest::default()
    /// });
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn unique(mut self, unique: UniqueRequest) -> Self {
        self.unique = Some(unique);
        self
    }

    /// A second submit with the same key to the same queue returns the first
    /// task instead of creating another ([`Enqueued::existing`]).
    #[must_use]
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Tags the task with a caller-owned id (system header
    /// `rdq.correlation_id`), kept across retries, deferrals and redrives and
    /// handed to the handler as `ctx.correlation_id`.
    #[must_use]
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.correlation_id = Some(id.into());
        self
    }

    /// Adds a user header. Keys starting with `rdq.` are reserved for the
    /// system and refused on submit with `RESERVED_HEADER`.
    #[must_use]
    pub fn header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(key.into(), value.into());
        self
    }

    /// Claim priority, higher first (default 0); at most the queue's
    /// `max_priority`, which deferred work comes back with.
    #[must_use]
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Submits for this handler version instead of the job's `VERSION`.
    #[must_use]
    pub fn handler_version(mut self, version: impl Into<String>) -> Self {
        self.handler_version = Some(version.into());
        self
    }
}

/// What a submit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Enqueued {
    /// The task's id.
    pub id: TaskId,
    /// True when the idempotency key was seen before: `id` is the original
    /// task, and nothing new was stored.
    pub existing: bool,
}

impl From<&Submitted> for Enqueued {
    fn from(s: &Submitted) -> Self {
        Self {
            id: s.envelope().id,
            existing: matches!(s, Submitted::Existing(_)),
        }
    }
}

/// Submits jobs of queue set `Q`, and only those: a job of another
/// application's queue set does not compile. Cheap to clone.
pub struct Producer<Q: QueueSet> {
    engine: Engine,
    _queues: PhantomData<fn(Q)>,
}

impl<Q: QueueSet> Clone for Producer<Q> {
    fn clone(&self) -> Self {
        Self {
            engine: self.engine.clone(),
            _queues: PhantomData,
        }
    }
}

impl<Q: QueueSet> std::fmt::Debug for Producer<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("queues", &Q::all())
            .finish_non_exhaustive()
    }
}

/// A job encoded but not yet submitted.
struct Draft {
    request: SubmitRequest,
    schedule: Schedule,
    priority: Option<u8>,
}

impl<Q: QueueSet> Producer<Q> {
    /// A producer submitting through `engine`.
    pub fn new(engine: Engine) -> Self {
        Self {
            engine,
            _queues: PhantomData,
        }
    }

    /// The engine underneath.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Cancels tasks of `queue` among `ids`, decided by `by` for
    /// `message`: a PENDING one becomes DEAD with reason `CANCELLED`; a
    /// running one is asked to stop (its handler learns of it through
    /// [`crate::JobContext::cancelled`]; unless it then succeeds it ends
    /// DEAD with reason `CANCELLED`). Answers which were cancelled or asked
    /// ([`rdq_engine::Cancelled`]); a finished or dead task is left alone. A
    /// redrive brings one back. For filters (handler, headers, age), use
    /// [`Engine::cancel`] on [`Producer::engine`].
    pub async fn cancel(
        &self,
        queue: Q,
        ids: &[TaskId],
        by: &str,
        message: &str,
    ) -> Result<rdq_engine::Cancelled, Error> {
        let filter = rdq_engine::CancelFilter {
            queue: queue.name().to_owned(),
            ids: Some(ids.to_vec()),
            by: by.to_owned(),
            message: message.to_owned(),
            ..rdq_engine::CancelFilter::default()
        };
        match self.engine.cancel(&filter).await {
            // One id alone that cannot be cancelled is an error to an API
            // caller; here the answer (none cancelled) says the same.
            Err(
                rdq_engine::EngineError::InvalidTransition(_)
                | rdq_engine::EngineError::TaskNotFound(_),
            ) if ids.len() == 1 => Ok(rdq_engine::Cancelled::default()),
            other => Ok(other?),
        }
    }

    /// Submits `job`, due now.
    pub async fn enqueue<J: Job<Queue = Q>>(&self, job: &J) -> Result<Enqueued, Error> {
        self.enqueue_with(job, EnqueueOptions::now()).await
    }

    /// Submits `job`, due after `delay` at its own priority (behind the backlog).
    pub async fn enqueue_after<J: Job<Queue = Q>>(
        &self,
        job: &J,
        delay: Duration,
    ) -> Result<Enqueued, Error> {
        self.enqueue_with(job, EnqueueOptions::after(delay)).await
    }

    /// Submits `job` held for `delay`, then due at the queue's `max_priority`,
    /// ahead of the backlog: the producer-side twin of a handler's
    /// [`crate::defer`]. The task's own priority is remembered (system header
    /// `rdq.base_priority`) and restored if it is ever retried, and its
    /// `deferral_count` stays 0, since it never ran.
    pub async fn defer<J: Job<Queue = Q>>(
        &self,
        job: &J,
        delay: Duration,
    ) -> Result<Enqueued, Error> {
        self.enqueue_with(job, EnqueueOptions::deferred(delay))
            .await
    }

    /// Submits `job` with `options`.
    pub async fn enqueue_with<J: Job<Queue = Q>>(
        &self,
        job: &J,
        options: EnqueueOptions,
    ) -> Result<Enqueued, Error> {
        let mut results = self.submit(vec![draft(job, options)]).await;
        results.pop().unwrap_or_else(|| Err(no_result()))
    }

    /// Submits every job of `jobs`, due now, in one engine call (one commit
    /// on stores that can); one result per job, in order. A job refused
    /// (e.g. `PAYLOAD_TOO_LARGE`) does not stop the others.
    pub async fn enqueue_many<'a, J: Job<Queue = Q>>(
        &self,
        jobs: impl IntoIterator<Item = &'a J>,
    ) -> Vec<Result<Enqueued, Error>> {
        let mut batch = self.batch();
        for job in jobs {
            batch.add(job);
        }
        batch.submit().await
    }

    /// A batch of jobs of any types of `Q`, each with its own options,
    /// submitted by [`Batch::submit`] in one engine call.
    pub fn batch(&self) -> Batch<'_, Q> {
        Batch {
            producer: self,
            drafts: Vec::new(),
        }
    }

    async fn submit(&self, drafts: Vec<Result<Draft, Error>>) -> Vec<Result<Enqueued, Error>> {
        let mut policies: HashMap<String, Result<QueuePolicy, EngineError>> = HashMap::new();
        for draft in drafts.iter().flatten() {
            let needs_policy =
                draft.priority.is_some_and(|p| p > 0) || draft.schedule != Schedule::Now;
            if needs_policy && !policies.contains_key(&draft.request.queue) {
                let policy = self.engine.policy(&draft.request.queue).await;
                policies.insert(draft.request.queue.clone(), policy);
            }
        }
        let mut slots: Vec<Result<usize, Error>> = Vec::with_capacity(drafts.len());
        let mut requests = Vec::with_capacity(drafts.len());
        for draft in drafts {
            let slot = draft.and_then(|d| {
                let policy = policies.get(&d.request.queue);
                finish(d, policy).map(|request| {
                    requests.push(request);
                    requests.len() - 1
                })
            });
            slots.push(slot);
        }
        let mut submitted: Vec<Option<Result<Submitted, Error>>> = if requests.is_empty() {
            Vec::new()
        } else {
            self.engine
                .submit_many(requests)
                .await
                .into_iter()
                .map(|r| Some(r.map_err(Error::from)))
                .collect()
        };
        slots
            .into_iter()
            .map(|slot| {
                let i = slot?;
                submitted
                    .get_mut(i)
                    .and_then(Option::take)
                    .unwrap_or_else(|| Err(no_result()))
                    .map(|s| Enqueued::from(&s))
            })
            .collect()
    }
}

/// Jobs collected for one submit. See [`Producer::batch`].
pub struct Batch<'p, Q: QueueSet> {
    producer: &'p Producer<Q>,
    drafts: Vec<Result<Draft, Error>>,
}

impl<Q: QueueSet> Batch<'_, Q> {
    /// Adds `job`, due now.
    pub fn add<J: Job<Queue = Q>>(&mut self, job: &J) -> &mut Self {
        self.add_with(job, EnqueueOptions::now())
    }

    /// Adds `job` with `options`.
    pub fn add_with<J: Job<Queue = Q>>(&mut self, job: &J, options: EnqueueOptions) -> &mut Self {
        self.drafts.push(draft(job, options));
        self
    }

    /// Jobs added so far.
    pub fn len(&self) -> usize {
        self.drafts.len()
    }

    /// True if nothing was added.
    pub fn is_empty(&self) -> bool {
        self.drafts.is_empty()
    }

    /// Submits every job in one engine call; one result per job, in order.
    pub async fn submit(self) -> Vec<Result<Enqueued, Error>> {
        self.producer.submit(self.drafts).await
    }
}

fn no_result() -> Error {
    Error::Engine(EngineError::Unavailable(
        "the engine returned too few results".into(),
    ))
}

fn draft<J: Job>(job: &J, options: EnqueueOptions) -> Result<Draft, Error> {
    let payload = serde_json::to_vec(job).map_err(|source| Error::Encode {
        job: J::NAME,
        source,
    })?;
    let mut system_headers = BTreeMap::new();
    if let Some(id) = options.correlation_id {
        system_headers.insert(CORRELATION_ID_HEADER.to_owned(), id);
    }
    let delay_ms = match options.schedule {
        Schedule::Now => 0,
        Schedule::After(d) | Schedule::Deferred(d) => millis(d),
    };
    Ok(Draft {
        request: SubmitRequest {
            queue: J::QUEUE.name().to_owned(),
            handler_ref: J::NAME.to_owned(),
            handler_version: options
                .handler_version
                .or_else(|| J::VERSION.map(str::to_owned)),
            payload,
            payload_content_type: JSON_CONTENT_TYPE.to_owned(),
            headers: options.headers,
            system_headers,
            delay_ms,
            priority: options.priority.unwrap_or(0),
            idempotency_key: options.idempotency_key,
            flow_key: options.flow_key,
            unique: options.unique,
        },
        schedule: options.schedule,
        priority: options.priority,
    })
}

/// Applies the queue's policy: the deferral priority and the priority cap.
fn finish(
    draft: Draft,
    policy: Option<&Result<QueuePolicy, EngineError>>,
) -> Result<SubmitRequest, Error> {
    let mut request = draft.request;
    let policy = match policy {
        None => return Ok(request),
        Some(Ok(policy)) => policy,
        Some(Err(e)) => return Err(Error::Engine(e.clone())),
    };
    if let Some(priority) = draft.priority
        && priority > policy.max_priority
    {
        return Err(Error::InvalidPriority {
            queue: request.queue,
            priority,
            max: policy.max_priority,
        });
    }
    if let Schedule::Deferred(_) = draft.schedule {
        request.system_headers.insert(
            BASE_PRIORITY_HEADER.to_owned(),
            request.priority.to_string(),
        );
        request.priority = policy.max_priority;
    }
    Ok(request)
}
