//! [`Engine`]: the state machine and policy bound to a store and a clock.
//!
//! Everything that uses a store (the SDK, the server, the CLI, the background
//! services) goes through here, so policy is resolved in one place: read from
//! the queue's stored config at every claim and settle.
//!
//! Who does what: the engine validates input, resolves policy and decides
//! every transition with [`machine`]; the store persists those decisions
//! atomically (the work path, [`Store`]) and answers the queries it offers
//! through its extension traits ([`crate::store::admin`]). The engine is
//! the only caller of a store: a query whose extension the store lacks is
//! answered `UNSUPPORTED` here, and `rdq-app` layers the fallbacks (depths
//! for counts, paging the DLQ for a lookup) on top.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rdq_envelope::{
    Envelope, Status, TaskId, Timestamp, validate_handler_ref, validate_queue_name,
    validate_user_headers,
};

use tokio::sync::{Notify, broadcast};

use crate::clock::Clock;
use crate::config::QueueConfig;
use crate::error::EngineError;
use crate::flow::{FLOW_KEY_HEADER, FlowStatus, validate_flow_key};
use crate::lease_key::LeaseKey;
use crate::local::LocalSlots;
use crate::machine::{self, LeaseToken, Settlement};
use crate::policy::QueuePolicy;
use crate::store::{
    CancelRequest, Capabilities, ClaimRequest, DeadGroup, LeasedUpdate, ListOrder, ListQuery,
    MAX_PAGE, NewTask, Page, QueueCounts, QueueDepths, ReasonCount, RedriveRequest, Store,
    Submitted, finished_at, reason_code, unsupported,
};

/// Which tasks [`Engine::cancel`] takes, and who cancels them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CancelFilter {
    /// The queue.
    pub queue: String,
    /// Only these tasks.
    pub ids: Option<Vec<TaskId>>,
    /// Only tasks of this handler.
    pub handler_ref: Option<String>,
    /// Only tasks with every one of these headers, value for value.
    pub headers: BTreeMap<String, String>,
    /// Only tasks submitted longer ago than this.
    pub older_than_ms: Option<u64>,
    /// At most this many.
    pub limit: Option<usize>,
    /// Report what would be cancelled, change nothing.
    pub dry_run: bool,
    /// Who cancels (the dead reason's `by`).
    pub by: String,
    /// Why, for people (the dead reason's `message`).
    pub message: String,
    /// Leave running tasks alone: cancel PENDING ones only.
    pub pending_only: bool,
}

/// What [`Engine::cancel`] did (or would do, on a dry run).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Cancelled {
    /// Every task cancelled or asked to stop, in the order chosen.
    pub ids: Vec<TaskId>,
    /// Those of `ids` that were running: asked to stop, they end DEAD with
    /// reason `CANCELLED` unless their handler succeeds first.
    pub running: Vec<TaskId>,
}

/// Capacity of the channel of cancel requests ([`Engine::cancel_requests`]):
/// a subscriber that falls this far behind is told it lagged and re-checks
/// the leases it holds.
const CANCEL_CHANNEL: usize = 4096;

/// How often [`Engine::cancel`] retries asking a running task to stop when
/// its state changes underneath (settled, released, reclaimed).
const ASK_ATTEMPTS: usize = 4;

impl CancelFilter {
    /// True when ids are the only filter.
    fn only_ids(&self) -> bool {
        self.ids.is_some()
            && self.handler_ref.is_none()
            && self.headers.is_empty()
            && self.older_than_ms.is_none()
    }
}

/// A task to submit: the client subset of the envelope plus scheduling options.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SubmitRequest {
    /// Target queue.
    pub queue: String,
    /// Handler name.
    pub handler_ref: String,
    /// Optional handler version.
    pub handler_version: Option<String>,
    /// Opaque payload bytes.
    pub payload: Vec<u8>,
    /// MIME type of the payload.
    pub payload_content_type: String,
    /// User headers; the `rdq.` prefix is refused with `RESERVED_HEADER`.
    pub headers: BTreeMap<String, String>,
    /// Headers set by the system itself (`rdq.submitted_by`, `rdq.source`, …).
    pub system_headers: BTreeMap<String, String>,
    /// Due this long after now.
    pub delay_ms: u64,
    /// Claim priority (higher first).
    pub priority: u8,
    /// Makes a repeated submit return the original task.
    pub idempotency_key: Option<String>,
    /// The task's flow key (`docs/flow-control.md`), stored as the
    /// `rdq.flow_key` header: per-key limits and fairness count it.
    pub flow_key: Option<String>,
    /// The task's unique key, scope, hold and conflict mode
    /// (docs/uniqueness.md).
    pub unique: Option<crate::unique::UniqueRequest>,
}

/// A claimed task and the token that fences its settle.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    /// The task as it is now: IN_FLIGHT, with its open attempt.
    pub envelope: Envelope,
    /// Present this when settling or extending.
    pub token: LeaseToken,
}

/// One settle in a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct SettleRequest {
    /// The task as claimed.
    pub envelope: Envelope,
    /// The claim's token.
    pub token: LeaseToken,
    /// What happened.
    pub settlement: Settlement,
}

/// The engine bound to a store and a clock. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    fallback: Arc<QueueConfig>,
    /// Wakes this process's idle workers when work may have become due, so
    /// they start within microseconds instead of at their next poll.
    pub(crate) work_available: Arc<Notify>,
    /// Local concurrency: what this process holds per queue.
    local: Arc<LocalSlots>,
    /// Running tasks asked to stop, by this process or (through the store)
    /// another: how the holder of a lease learns of it at once.
    cancels: broadcast::Sender<TaskId>,
}

impl Engine {
    /// An engine over `store`, reading time from `clock`.
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        let work_available = store
            .work_signal()
            .unwrap_or_else(|| Arc::new(Notify::new()));
        let cancels = store
            .cancel_signal()
            .unwrap_or_else(|| broadcast::channel(CANCEL_CHANNEL).0);
        Self {
            store,
            clock,
            fallback: Arc::new(QueueConfig::default()),
            work_available,
            local: Arc::default(),
            cancels,
        }
    }

    /// The ids of running tasks asked to stop from now on, by any process
    /// on the store that announces them ([`Store::cancel_signal`]), else by
    /// this one. A worker holding one of them reads its `cancel_requested`
    /// ([`Engine::leased`]) and stops its handler. A receiver that lags
    /// re-checks every lease it holds; a store without announcements is
    /// still covered by lease extensions, which answer the request.
    pub fn cancel_requests(&self) -> broadcast::Receiver<TaskId> {
        self.cancels.subscribe()
    }

    /// Signalled after submits, retries and reaps in this process, and by
    /// stores that hear of work from other processes
    /// ([`Store::work_signal`]). An idle worker creates a `notified()`
    /// future, enables it, tries to claim, and waits on it (with a poll
    /// timeout for work no signal announces).
    pub fn work_available(&self) -> &Arc<Notify> {
        &self.work_available
    }

    /// Uses `policy` for queues without stored config (and for stores that hold none).
    #[must_use]
    pub fn with_fallback_policy(self, policy: QueuePolicy) -> Self {
        self.with_fallback_config(policy.into())
    }

    /// Uses `config` (policy and sections) for queues without stored config
    /// (and for stores that hold none).
    #[must_use]
    pub fn with_fallback_config(mut self, config: QueueConfig) -> Self {
        self.fallback = Arc::new(config);
        self
    }

    /// Tells the store this process claims no more from `queue` (see
    /// [`Store::stop_claiming`]); a worker calls it when it stops.
    pub async fn stop_claiming(&self, queue: &str) {
        self.store.stop_claiming(queue).await;
    }

    /// What the store underneath can do: its work path's declarations and
    /// the extensions it offers.
    pub fn capabilities(&self) -> Capabilities {
        Capabilities::of(self.store.as_ref())
    }

    /// Whether the store can serve and write now ([`Store::ready`]).
    pub async fn ready(&self) -> Result<(), EngineError> {
        self.store.ready().await
    }

    /// The key lease tokens are bound with: the store's secret, or a random
    /// one for stores that keep none ([`LeaseKey::of`]).
    pub async fn lease_key(&self) -> Result<LeaseKey, EngineError> {
        LeaseKey::of(self.store.as_ref()).await
    }

    /// The clock in use.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The live configuration of `queue`: its stored one, else the fallback.
    pub async fn config(&self, queue: &str) -> Result<QueueConfig, EngineError> {
        let Some(configs) = self.store.as_config_store() else {
            return Ok((*self.fallback).clone());
        };
        Ok(configs
            .get_config(queue)
            .await?
            .unwrap_or_else(|| (*self.fallback).clone()))
    }

    /// The configuration stored for `queue`, if any (`None` also when the
    /// store holds none: see [`Engine::config`] for the live one).
    pub async fn stored_config(&self, queue: &str) -> Result<Option<QueueConfig>, EngineError> {
        match self.store.as_config_store() {
            Some(configs) => configs.get_config(queue).await,
            None => Ok(None),
        }
    }

    /// The live policy of `queue`: its stored config's, else the fallback's.
    pub async fn policy(&self, queue: &str) -> Result<QueuePolicy, EngineError> {
        Ok(self.config(queue).await?.policy)
    }

    /// Validates and stores the configuration of `queue`.
    pub async fn set_config(&self, queue: &str, config: &QueueConfig) -> Result<(), EngineError> {
        validate_queue_name(queue)?;
        config.policy.validate()?;
        self.flow_request(&config.policy, ClaimRequest::new(queue, 1, 1, self.now()))
            .refuse_unsupported(self.store.capabilities())?;
        match self.store.as_config_store() {
            Some(configs) => configs.put_config(queue, config).await?,
            None => return unsupported("hold queue configuration"),
        }
        // A resumed queue, or a raised limit, may have tasks to hand out
        // now: workers waiting in this process look at once rather than at
        // their next poll.
        self.work_available.notify_waiters();
        Ok(())
    }

    /// Validates and stores `policy` as the whole configuration of `queue`
    /// (no sections).
    pub async fn set_policy(&self, queue: &str, policy: &QueuePolicy) -> Result<(), EngineError> {
        self.set_config(queue, &QueueConfig::from(policy.clone()))
            .await
    }

    /// Builds the PENDING envelope for a request, refusing bad input before
    /// anything is stored.
    pub fn build(&self, req: &SubmitRequest, policy: &QueuePolicy) -> Result<NewTask, EngineError> {
        validate_queue_name(&req.queue)?;
        validate_handler_ref(&req.handler_ref)?;
        validate_user_headers(&req.headers)?;
        let now = self.clock.now();
        let mut env = Envelope::new(
            req.queue.clone(),
            req.handler_ref.clone(),
            &req.payload,
            req.payload_content_type.clone(),
            now,
        );
        env.handler_version = req.handler_version.clone();
        env.headers = req.headers.clone();
        env.headers.extend(req.system_headers.clone());
        if let Some(key) = &req.flow_key {
            validate_flow_key(key)?;
            env.headers.insert(FLOW_KEY_HEADER.to_owned(), key.clone());
        }
        env.priority = req.priority;
        let mut idempotency_key = req.idempotency_key.clone();
        let unique = match &req.unique {
            Some(unique) => {
                if !self.store.capabilities().unique {
                    return Err(EngineError::Unsupported(
                        "this store keeps no unique keys (capability unique): \
                         see docs/uniqueness.md"
                            .into(),
                    ));
                }
                if idempotency_key.is_some() {
                    return Err(EngineError::InvalidArgument(
                        "unique: an idempotency key is a unique key (hold forever, on_conflict \
                         existing): give idempotency_key or unique, not both"
                            .into(),
                    ));
                }
                let key = unique.key(&req.payload)?;
                if unique.is_idempotency()
                    && key.chars().count() <= crate::unique::MAX_IDEMPOTENCY_CHARS
                {
                    // One key whichever way it was spelt (docs/uniqueness.md).
                    idempotency_key = Some(key);
                    None
                } else {
                    Some(unique.apply(key, &req.handler_ref, &mut env.headers, now))
                }
            }
            None => None,
        };
        Ok(NewTask {
            envelope: machine::submit(&env, policy, now, req.delay_ms)?,
            idempotency_key,
            unique,
        })
    }

    /// Submits one task.
    pub async fn submit(&self, req: SubmitRequest) -> Result<Submitted, EngineError> {
        let mut results = self.submit_many(vec![req]).await;
        results.pop().unwrap_or_else(|| {
            Err(EngineError::Unavailable(
                "the store returned no result".into(),
            ))
        })
    }

    /// Submits many tasks in one store call (one commit where the store can);
    /// one result per request, in order.
    pub async fn submit_many(
        &self,
        reqs: Vec<SubmitRequest>,
    ) -> Vec<Result<Submitted, EngineError>> {
        let mut policies = BatchPolicies::default();
        let mut slots: Vec<Result<usize, EngineError>> = Vec::with_capacity(reqs.len());
        let mut tasks = Vec::with_capacity(reqs.len());
        for req in &reqs {
            let built = match policies.of(self, &req.queue).await {
                Ok(policy) => self.build(req, policy),
                Err(e) => Err(e),
            };
            slots.push(built.map(|task| {
                tasks.push(task);
                tasks.len() - 1
            }));
        }
        let stored = if tasks.is_empty() {
            Vec::new()
        } else {
            self.store.submit(tasks).await
        };
        self.work_available.notify_waiters();
        let mut stored: Vec<Option<Result<Submitted, EngineError>>> =
            stored.into_iter().map(Some).collect();
        slots
            .into_iter()
            .map(|slot| match slot {
                Ok(i) => stored.get_mut(i).and_then(Option::take).unwrap_or_else(|| {
                    Err(EngineError::Unavailable(
                        "the store returned too few results".into(),
                    ))
                }),
                Err(e) => Err(e),
            })
            .collect()
    }

    /// Claims up to `max` due tasks of `queue` under the queue's lease
    /// (or `lease_ms` when given). A paused queue hands out nothing.
    pub async fn claim(
        &self,
        queue: &str,
        max: usize,
        lease_ms: Option<u64>,
    ) -> Result<Vec<Claimed>, EngineError> {
        let policy = self.policy(queue).await?;
        let lease_ms = lease_ms.unwrap_or(policy.lease_ms).max(1);
        self.claim_under(&policy, ClaimRequest::new(queue, max, lease_ms, self.now()))
            .await
    }

    /// Claims what `request` asks for, with the limits it carries, under the
    /// queue's live policy (a paused queue hands out nothing). The request's
    /// time is the engine's clock, whatever `request.now` says.
    pub async fn claim_with(&self, request: ClaimRequest) -> Result<Vec<Claimed>, EngineError> {
        let policy = self.policy(&request.queue).await?;
        self.claim_under(&policy, request).await
    }

    async fn claim_under(
        &self,
        policy: &QueuePolicy,
        mut request: ClaimRequest,
    ) -> Result<Vec<Claimed>, EngineError> {
        validate_queue_name(&request.queue)?;
        request.now = self.clock.now();
        request = self.flow_request(policy, request);
        request.refuse_unsupported(self.store.capabilities())?;
        if let Some(limit) = policy.flow.local_concurrency {
            request.max = request
                .max
                .min(self.local.room(&request.queue, limit, request.now));
        }
        if policy.paused || request.max == 0 {
            return Ok(Vec::new());
        }
        request.lease_ms = request.lease_ms.max(1);
        let envs = self.store.claim(&request).await?;
        if policy.flow.local_concurrency.is_some() {
            self.local.claimed(&envs);
        }
        Ok(envs
            .into_iter()
            .filter_map(|envelope| {
                LeaseToken::current(&envelope).map(|token| Claimed { envelope, token })
            })
            .collect())
    }

    /// `request` with the limits of `policy`'s `flow` section: the global
    /// concurrency (the lower of the request's and the policy's) and, when
    /// the section needs one, the ledger's part.
    fn flow_request(&self, policy: &QueuePolicy, mut request: ClaimRequest) -> ClaimRequest {
        let flow = &policy.flow;
        if flow.is_unlimited() {
            return request;
        }
        if let Some(limit) = flow.concurrency {
            request.max_in_flight = Some(request.max_in_flight.map_or(limit, |l| l.min(limit)));
        }
        if flow.needs_ledger() {
            request = request.with_flow(flow.clone());
        }
        request
    }

    /// Throttles `queue`'s flow key `key` (the whole queue with `None`)
    /// until `until`, for every process on the store ([`Store::throttle`]).
    pub async fn throttle(
        &self,
        queue: &str,
        key: Option<&str>,
        until: Timestamp,
    ) -> Result<(), EngineError> {
        validate_queue_name(queue)?;
        if let Some(key) = key {
            validate_flow_key(key)?;
        }
        self.store.throttle(queue, key, until).await
    }

    /// `queue`'s flow now: tokens left, throttles and the busiest keys
    /// ([`Store::flow_status`]).
    pub async fn flow_status(&self, queue: &str) -> Result<FlowStatus, EngineError> {
        validate_queue_name(queue)?;
        let policy = self.policy(queue).await?;
        self.store
            .flow_status(queue, &policy.flow, self.clock.now())
            .await
    }

    /// Settles one claimed task; returns its new state.
    pub async fn settle(
        &self,
        envelope: &Envelope,
        token: LeaseToken,
        settlement: Settlement,
    ) -> Result<Envelope, EngineError> {
        let mut results = self
            .settle_many(vec![SettleRequest {
                envelope: envelope.clone(),
                token,
                settlement,
            }])
            .await;
        results.pop().unwrap_or_else(|| {
            Err(EngineError::Unavailable(
                "the store returned no result".into(),
            ))
        })
    }

    /// Settles many tasks in one store call; one result per request, in
    /// order, with each task's new state.
    pub async fn settle_many(
        &self,
        reqs: Vec<SettleRequest>,
    ) -> Vec<Result<Envelope, EngineError>> {
        self.settle_kept(reqs, Keep::States)
            .await
            .into_iter()
            .map(|r| r.and_then(|kept| kept.ok_or_else(too_few)))
            .collect()
    }

    /// Like [`Engine::settle_many`] for callers that do not need the new
    /// states (the worker loop): the decided envelopes move into the store
    /// instead of being copied for the caller.
    pub async fn settle_batch(&self, reqs: Vec<SettleRequest>) -> Vec<Result<(), EngineError>> {
        self.settle_kept(reqs, Keep::Nothing)
            .await
            .into_iter()
            .map(|r| r.map(drop))
            .collect()
    }

    /// Decides and writes `reqs`; then decides again, from the stored
    /// state, each one the store refused because the task was asked to stop
    /// after the caller's copy was taken ([`Engine::redecide`]).
    async fn settle_kept(
        &self,
        reqs: Vec<SettleRequest>,
        keep: Keep,
    ) -> Vec<Result<Option<Envelope>, EngineError>> {
        let (decided, tokens, unaware) = self.decide(reqs).await;
        let mut results = self.apply(decided, tokens.clone(), keep).await;
        let again: Vec<_> = unaware
            .into_iter()
            .zip(&tokens)
            .enumerate()
            .filter_map(|(i, (u, token))| {
                let (id, settlement) = u?;
                matches!(results[i], Err(EngineError::LeaseLost(_))).then_some((
                    i,
                    id,
                    *token,
                    Event::Settle(settlement),
                ))
            })
            .collect();
        if !again.is_empty() {
            self.redecide(again, keep, &mut results).await;
        }
        results
    }
    /// The in-flight state behind each `(id, token)` a worker presents
    /// ([`Store::leased`]): what a settle or extension by id and token
    /// decides from, on every store.
    pub async fn leased(
        &self,
        leases: &[(TaskId, LeaseToken)],
    ) -> Vec<Result<Envelope, EngineError>> {
        if leases.is_empty() {
            return Vec::new();
        }
        self.store.leased(leases).await
    }

    /// The engine's decision for each settle, under each queue's live policy
    /// (read once per queue per batch), consuming the requests so no
    /// envelope is copied; with the tokens the writes are fenced by, and,
    /// for each decision made from a copy without a cancel request, what to
    /// decide again should the task have been asked to stop since.
    async fn decide(
        &self,
        reqs: Vec<SettleRequest>,
    ) -> (
        Vec<Result<Envelope, EngineError>>,
        Vec<LeaseToken>,
        Vec<Option<(TaskId, Settlement)>>,
    ) {
        let now = self.clock.now();
        let mut policies = BatchPolicies::default();
        let mut decided = Vec::with_capacity(reqs.len());
        let mut tokens = Vec::with_capacity(reqs.len());
        let mut unaware = Vec::with_capacity(reqs.len());
        for req in reqs {
            tokens.push(req.token);
            let id = req.envelope.id;
            let aware = req.envelope.cancel_requested.is_some();
            decided.push(match policies.of(self, &req.envelope.queue).await {
                Ok(policy) => {
                    machine::settle_owned(req.envelope, req.token, &req.settlement, policy, now)
                }
                Err(e) => Err(e),
            });
            unaware.push((!aware).then_some((id, req.settlement)));
        }
        (decided, tokens, unaware)
    }

    /// Extends a claim's lease to `extend_ms` from now. The state answered
    /// carries `cancel_requested` when the task was asked to stop: the
    /// worker should stop its handler.
    pub async fn extend_lease(
        &self,
        envelope: &Envelope,
        token: LeaseToken,
        extend_ms: u64,
    ) -> Result<Envelope, EngineError> {
        let next = machine::extend_lease(envelope, token, extend_ms, self.clock.now());
        let mut results = self.apply(vec![next], vec![token], Keep::States).await;
        if envelope.cancel_requested.is_none()
            && matches!(results.first(), Some(Err(EngineError::LeaseLost(_))))
        {
            let again = vec![(0, envelope.id, token, Event::Extend(extend_ms))];
            self.redecide(again, Keep::States, &mut results).await;
        }
        results
            .pop()
            .unwrap_or_else(|| Err(too_few()))
            .and_then(|kept| kept.ok_or_else(too_few))
    }

    /// Decides `again` from the stored states: a store refuses a state
    /// decided without the task's cancel request (`LEASE_LOST`), so a
    /// worker's copy taken before the request cannot overwrite it. Where
    /// the task is still under the same claim and was asked to stop, the
    /// event is decided again and written in place of the refusal; any
    /// other refusal stands. The request is never withdrawn while the task
    /// runs, so one more decision suffices.
    async fn redecide(
        &self,
        again: Vec<(usize, TaskId, LeaseToken, Event)>,
        keep: Keep,
        results: &mut [Result<Option<Envelope>, EngineError>],
    ) {
        let leases: Vec<_> = again
            .iter()
            .map(|(_, id, token, _)| (*id, *token))
            .collect();
        let fresh = self.store.leased(&leases).await;
        let now = self.clock.now();
        let mut policies = BatchPolicies::default();
        let mut slots = Vec::new();
        let mut decided = Vec::new();
        let mut tokens = Vec::new();
        for ((i, _, token, event), env) in again.into_iter().zip(fresh) {
            let Ok(env) = env else { continue };
            if env.cancel_requested.is_none() {
                continue;
            }
            let next = match event {
                Event::Extend(ms) => machine::extend_lease(&env, token, ms, now),
                Event::Settle(settlement) => match policies.of(self, &env.queue).await {
                    Ok(policy) => machine::settle_owned(env, token, &settlement, policy, now),
                    Err(e) => Err(e),
                },
            };
            slots.push(i);
            decided.push(next);
            tokens.push(token);
        }
        if decided.is_empty() {
            return;
        }
        let written = self.apply(decided, tokens, keep).await;
        for (i, r) in slots.into_iter().zip(written) {
            if let Some(slot) = results.get_mut(i) {
                *slot = r;
            }
        }
    }

    /// The one write path of every transition of an in-flight task (settle,
    /// extension, reap): engine decisions written as compare-and-swap
    /// updates in one store call, one result per decision in order.
    /// Decisions that already failed keep their error; with
    /// [`Keep::States`] each success also hands back the state written.
    async fn apply(
        &self,
        decided: Vec<Result<Envelope, EngineError>>,
        tokens: Vec<LeaseToken>,
        keep: Keep,
    ) -> Vec<Result<Option<Envelope>, EngineError>> {
        let mut outcomes = Vec::with_capacity(decided.len());
        let mut updates = Vec::with_capacity(decided.len());
        for (d, expected) in decided.into_iter().zip(tokens) {
            match d {
                Ok(envelope) => {
                    outcomes.push(Ok((keep == Keep::States).then(|| envelope.clone())));
                    updates.push(LeasedUpdate { envelope, expected });
                }
                Err(e) => outcomes.push(Err(e)),
            }
        }
        let mut written = self.write(updates).await;
        outcomes
            .into_iter()
            .map(|o| {
                let kept = o?;
                written.next().unwrap_or_else(|| Err(too_few()))?;
                Ok(kept)
            })
            .collect()
    }

    /// Writes `updates` in one store call (none for none) and wakes idle
    /// workers: a retry with no backoff, a release or a reap may make work
    /// due now.
    async fn write(
        &self,
        updates: Vec<LeasedUpdate>,
    ) -> std::vec::IntoIter<Result<(), EngineError>> {
        self.local.observe(updates.iter().map(|u| &u.envelope));
        let written = if updates.is_empty() {
            Vec::new()
        } else {
            self.store.settle(updates).await
        };
        self.work_available.notify_waiters();
        written.into_iter()
    }

    /// Closes up to `limit` lapsed leases as `LEASE_EXPIRED`; returns the tasks
    /// it reaped. Safe to run on every node at once: each lease is reaped by
    /// exactly one caller (the others get `LEASE_LOST` and skip it).
    pub async fn reap_expired(&self, limit: usize) -> Result<Vec<Envelope>, EngineError> {
        let now = self.clock.now();
        let expired = self.store.expired_leases(now, limit).await?;
        let mut policies = BatchPolicies::default();
        let mut decided = Vec::with_capacity(expired.len());
        let mut tokens = Vec::with_capacity(expired.len());
        for env in &expired {
            let Some(token) = LeaseToken::current(env) else {
                continue;
            };
            let policy = policies.of(self, &env.queue).await?;
            decided.push(machine::expire_lease(env, policy, now));
            tokens.push(token);
        }
        Ok(self
            .apply(decided, tokens, Keep::States)
            .await
            .into_iter()
            .filter_map(|r| r.ok().flatten())
            .collect())
    }

    /// The dead task `id` of `queue`. Works on every store that can either
    /// find a task by id or list a queue's DLQ (a broker can only do the
    /// latter: the DLQ is paged through until the task turns up).
    pub async fn dead_task(&self, queue: &str, id: TaskId) -> Result<Envelope, EngineError> {
        validate_queue_name(queue)?;
        if let Some(lookup) = self.store.as_lookup() {
            let env = lookup.get(id).await?;
            return if env.queue == queue && env.status == Status::Dead {
                Ok(env)
            } else {
                Err(EngineError::TaskNotFound(id))
            };
        }
        let Some(listing) = self.store.as_listing() else {
            return Err(EngineError::Unsupported(
                "this store can neither find a task by id nor list a dead-letter queue".into(),
            ));
        };
        let mut cursor = None;
        loop {
            let page = listing
                .list(&ListQuery {
                    queue: queue.to_owned(),
                    status: Some(Status::Dead),
                    cursor,
                    limit: MAX_PAGE,
                    order: ListOrder::NewestFirst,
                    ..ListQuery::default()
                })
                .await?;
            if let Some(env) = page.items.into_iter().find(|e| e.id == id) {
                return Ok(env);
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Err(EngineError::TaskNotFound(id)),
            }
        }
    }

    /// Redrives dead tasks (or reports which would be, on a dry run).
    pub async fn redrive(&self, request: &RedriveRequest) -> Result<Vec<TaskId>, EngineError> {
        validate_queue_name(&request.queue)?;
        if let Some(glob) = &request.error_type {
            crate::glob::Glob::new(glob).map_err(EngineError::InvalidArgument)?;
        }
        let Some(redrive) = self.store.as_redrive() else {
            return unsupported("redrive");
        };
        let Some(reason) = &request.reason else {
            return redrive.redrive(request, self.clock.now()).await;
        };
        // Stores filter on ids and error types; the reason is matched here,
        // on a listing, and the store redrives the ids that matched (a task
        // redriven by someone else in between is simply no longer DEAD).
        let limit = request.limit.unwrap_or(usize::MAX);
        let mut chosen = Vec::new();
        let query = ListQuery {
            queue: request.queue.clone(),
            status: Some(Status::Dead),
            error_type: request.error_type.clone(),
            reason: Some(reason.clone()),
            order: ListOrder::OldestFirst,
            ..ListQuery::default()
        };
        if limit > 0 {
            self.scan(query, |env| {
                if request.ids.as_ref().is_none_or(|ids| ids.contains(&env.id)) {
                    chosen.push(env.id);
                }
                chosen.len() < limit
            })
            .await?;
        }
        if chosen.is_empty() {
            return Ok(chosen);
        }
        let by_id = RedriveRequest {
            queue: request.queue.clone(),
            ids: Some(chosen),
            error_type: None,
            reason: None,
            limit: None,
            dry_run: request.dry_run,
        };
        redrive.redrive(&by_id, self.clock.now()).await
    }

    /// Cancels tasks: those among `filter.ids` (when given) that match
    /// every other filter, PENDING ones first then running ones, oldest
    /// first, at most `filter.limit`. A PENDING task becomes DEAD with
    /// reason `CANCELLED` in one atomic step against concurrent claims; a
    /// running (IN_FLIGHT) one, unless `filter.pending_only`, is asked to
    /// stop ([`machine::request_cancel`], one compare-and-swap against its
    /// worker's settle) and the holder of its lease is told
    /// ([`Engine::cancel_requests`]). A task that changes state meanwhile
    /// (retried, released) is taken as it is then. Answers which were
    /// cancelled or asked (would be, on a dry run). One id given alone that
    /// can be neither is an error: `TASK_NOT_FOUND`, or
    /// `INVALID_TRANSITION` naming its status.
    pub async fn cancel(&self, filter: &CancelFilter) -> Result<Cancelled, EngineError> {
        validate_queue_name(&filter.queue)?;
        let Some(cancel) = self.store.as_cancel() else {
            return unsupported("cancel tasks");
        };
        let limit = filter.limit.unwrap_or(usize::MAX);
        let chosen: Vec<TaskId> = match &filter.ids {
            Some(ids) if filter.only_ids() => ids.iter().copied().take(limit).collect(),
            _ => self.cancellable(filter, limit).await?,
        };
        let mut pending = if chosen.is_empty() {
            Vec::new()
        } else {
            let request = CancelRequest {
                queue: filter.queue.clone(),
                ids: chosen.clone(),
                by: filter.by.clone(),
                message: filter.message.clone(),
                dry_run: filter.dry_run,
            };
            cancel.cancel_pending(&request, self.clock.now()).await?
        };
        let mut running = Vec::new();
        if !filter.pending_only {
            let rest: Vec<TaskId> = chosen
                .iter()
                .copied()
                .filter(|id| !pending.contains(id))
                .collect();
            for id in rest {
                match self.ask_to_stop(filter, id).await? {
                    Asked::Running => running.push(id),
                    Asked::Cancelled => pending.push(id),
                    Asked::Neither => {}
                }
            }
            if !filter.dry_run && !running.is_empty() {
                self.store.announce_cancel(&running).await;
            }
        }
        if let Some([id]) = filter.ids.as_deref()
            && filter.only_ids()
            && pending.is_empty()
            && running.is_empty()
        {
            let env = match self.store.as_lookup() {
                Some(lookup) => lookup.get(*id).await?,
                None => return Err(EngineError::TaskNotFound(*id)),
            };
            if env.queue != filter.queue {
                return Err(EngineError::TaskNotFound(*id));
            }
            let which = if filter.pending_only {
                "only PENDING tasks can be cancelled (pending_only)"
            } else {
                "only PENDING and IN_FLIGHT tasks can be cancelled"
            };
            return Err(EngineError::InvalidTransition(format!(
                "task {id} is {}; {which}",
                env.status.as_str()
            )));
        }
        let ids = chosen
            .into_iter()
            .filter(|id| pending.contains(id) || running.contains(id))
            .collect();
        Ok(Cancelled { ids, running })
    }

    /// Asks the running task `id` to stop, retrying while its state
    /// changes underneath; a task found PENDING again is cancelled.
    async fn ask_to_stop(&self, filter: &CancelFilter, id: TaskId) -> Result<Asked, EngineError> {
        let Some(lookup) = self.store.as_lookup() else {
            return Ok(Asked::Neither);
        };
        let Some(cancel) = self.store.as_cancel() else {
            return Ok(Asked::Neither);
        };
        for _ in 0..ASK_ATTEMPTS {
            let env = match lookup.get(id).await {
                Ok(env) if env.queue == filter.queue => env,
                Ok(_) | Err(EngineError::TaskNotFound(_)) => return Ok(Asked::Neither),
                Err(e) => return Err(e),
            };
            match env.status {
                Status::InFlight if env.cancel_requested.is_some() || filter.dry_run => {
                    return Ok(Asked::Running);
                }
                Status::InFlight => {
                    let Some(token) = LeaseToken::current(&env) else {
                        continue;
                    };
                    let now = self.clock.now();
                    let next = machine::request_cancel(&env, &filter.by, &filter.message, now);
                    let written = self.apply(vec![next], vec![token], Keep::Nothing).await;
                    match written.into_iter().next() {
                        Some(Ok(_)) => {
                            // No receiver is fine: nobody here holds it.
                            let _ = self.cancels.send(id);
                            return Ok(Asked::Running);
                        }
                        Some(Err(
                            EngineError::LeaseLost(_) | EngineError::InvalidTransition(_),
                        )) => {}
                        Some(Err(e)) => return Err(e),
                        None => return Err(too_few()),
                    }
                }
                Status::Pending => {
                    let request = CancelRequest {
                        queue: filter.queue.clone(),
                        ids: vec![id],
                        by: filter.by.clone(),
                        message: filter.message.clone(),
                        dry_run: filter.dry_run,
                    };
                    if !cancel
                        .cancel_pending(&request, self.clock.now())
                        .await?
                        .is_empty()
                    {
                        return Ok(Asked::Cancelled);
                    }
                }
                Status::Succeeded | Status::Dead => return Ok(Asked::Neither),
            }
        }
        Ok(Asked::Neither)
    }

    /// The PENDING tasks of `filter.queue` matching `filter`, oldest first,
    /// then (unless `pending_only`) the running ones.
    async fn cancellable(
        &self,
        filter: &CancelFilter,
        limit: usize,
    ) -> Result<Vec<TaskId>, EngineError> {
        let born_before = filter.older_than_ms.map(|ms| self.clock.now().minus_ms(ms));
        let mut chosen = Vec::new();
        let statuses: &[Status] = if filter.pending_only {
            &[Status::Pending]
        } else {
            &[Status::Pending, Status::InFlight]
        };
        for &status in statuses {
            if chosen.len() >= limit {
                break;
            }
            let query = ListQuery {
                queue: filter.queue.clone(),
                status: Some(status),
                handler_ref: filter.handler_ref.clone(),
                headers: filter.headers.clone(),
                order: ListOrder::OldestFirst,
                ..ListQuery::default()
            };
            self.scan(query, |env| {
                let wanted = filter.ids.as_ref().is_none_or(|ids| ids.contains(&env.id))
                    && born_before.is_none_or(|t| env.created_at < t);
                if wanted {
                    chosen.push(env.id);
                }
                chosen.len() < limit
            })
            .await?;
        }
        Ok(chosen)
    }

    /// How many of `queue`'s dead tasks died for each reason, most first
    /// (then by code), on a store that lists: the DLQ is paged through.
    pub async fn dead_reasons(&self, queue: &str) -> Result<Vec<ReasonCount>, EngineError> {
        let mut counts: Vec<ReasonCount> = Vec::new();
        let query = ListQuery {
            queue: queue.to_owned(),
            status: Some(Status::Dead),
            ..ListQuery::default()
        };
        self.scan(query, |env| {
            let code = reason_code(env);
            match counts.iter_mut().find(|c| c.reason == code) {
                Some(c) => c.count += 1,
                None => counts.push(ReasonCount {
                    reason: code.to_owned(),
                    count: 1,
                }),
            }
            true
        })
        .await?;
        counts.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.reason.cmp(&b.reason)));
        Ok(counts)
    }

    /// Pages through every task `query` lists (its cursor and limit are
    /// the scan's), calling `visit` on each until it answers false.
    async fn scan(
        &self,
        mut query: ListQuery,
        mut visit: impl FnMut(&Envelope) -> bool,
    ) -> Result<(), EngineError> {
        query.cursor = None;
        query.limit = MAX_PAGE;
        loop {
            let page = self.list(&query).await?;
            for env in &page.items {
                if !visit(env) {
                    return Ok(());
                }
            }
            match page.next_cursor {
                Some(next) => query.cursor = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// The task with this id, on a store that can look tasks up.
    pub async fn get(&self, id: TaskId) -> Result<Envelope, EngineError> {
        match self.store.as_lookup() {
            Some(lookup) => lookup.get(id).await,
            None => unsupported("look tasks up by id"),
        }
    }

    /// One page of a queue's tasks, on a store that lists. Filters on the
    /// reason, the handler and headers are applied here: the store's pages
    /// are read on until the page is full or the listing ends.
    pub async fn list(&self, query: &ListQuery) -> Result<Page, EngineError> {
        validate_queue_name(&query.queue)?;
        let Some(listing) = self.store.as_listing() else {
            return unsupported("list tasks");
        };
        if !query.filters_in_engine() {
            return listing.list(query).await;
        }
        let limit = match query.limit {
            0 => MAX_PAGE,
            n => n.min(MAX_PAGE),
        };
        let mut inner = ListQuery {
            reason: None,
            handler_ref: None,
            headers: BTreeMap::new(),
            limit: MAX_PAGE,
            ..query.clone()
        };
        let mut items = Vec::new();
        loop {
            let page = listing.list(&inner).await?;
            for env in page.items {
                if items.len() == limit {
                    break;
                }
                if query.matches(&env) {
                    items.push(env);
                }
            }
            match page.next_cursor {
                Some(next) if items.len() < limit => inner.cursor = Some(next),
                _ => break,
            }
        }
        let next_cursor = if items.len() == limit {
            items.last().map(|env| env.id)
        } else {
            None
        };
        Ok(Page { items, next_cursor })
    }

    /// The id of `queue`'s oldest PENDING task, on a store that lists.
    pub async fn oldest_pending(&self, queue: &str) -> Result<Option<TaskId>, EngineError> {
        match self.store.as_listing() {
            Some(listing) => listing.oldest_pending(queue).await,
            None => unsupported("list tasks"),
        }
    }

    /// `queue`'s DLQ grouped by latest error type, on a store that lists.
    pub async fn dead_groups(&self, queue: &str) -> Result<Vec<DeadGroup>, EngineError> {
        match self.store.as_listing() {
            Some(listing) => listing.dead_groups(queue).await,
            None => unsupported("list tasks"),
        }
    }

    /// Tasks per status for every queue, on a store that counts.
    pub async fn counts(&self) -> Result<Vec<QueueCounts>, EngineError> {
        match self.store.as_counts() {
            Some(counts) => counts.counts().await,
            None => unsupported("count tasks"),
        }
    }

    /// Every queue the store knows of: those with tasks or a stored policy
    /// on a store that counts, the queues this process declared or
    /// configured on a broker.
    pub async fn queue_names(&self) -> Result<Vec<String>, EngineError> {
        if let Some(counts) = self.store.as_counts() {
            return Ok(counts
                .counts()
                .await?
                .into_iter()
                .map(|c| c.queue)
                .collect());
        }
        match self.store.as_depths() {
            Some(depths) => depths.queue_names().await,
            None => unsupported("list its queues"),
        }
    }

    /// The broker queue depths behind `queue`, on a store that reports them.
    pub async fn depths(&self, queue: &str) -> Result<Option<QueueDepths>, EngineError> {
        match self.store.as_depths() {
            Some(depths) => depths.depths(queue).await,
            None => unsupported("report queue depths"),
        }
    }

    /// Removes every task of `queue` in `status` (or counts them, on a dry
    /// run), on a store that removes tasks.
    pub async fn purge(
        &self,
        queue: &str,
        status: Status,
        dry_run: bool,
    ) -> Result<u64, EngineError> {
        validate_queue_name(queue)?;
        match self.store.as_removal() {
            Some(removal) => removal.purge(queue, status, dry_run).await,
            None => unsupported("purge"),
        }
    }

    /// Removes one task, on a store that removes tasks.
    pub async fn delete(&self, id: TaskId) -> Result<(), EngineError> {
        match self.store.as_removal() {
            Some(removal) => removal.delete(id).await,
            None => unsupported("delete tasks"),
        }
    }

    /// Stores envelopes exactly as given (an import: DLQ entries moved from
    /// another store or exported earlier), one result per envelope in
    /// order; an id that already exists is refused with `INVALID_ARGUMENT`,
    /// a task whose unique key another task holds with `UNIQUE_HELD`.
    /// Idle workers are woken, as a PENDING import may be due.
    pub async fn import(&self, envelopes: Vec<Envelope>) -> Vec<Result<Submitted, EngineError>> {
        if envelopes.is_empty() {
            return Vec::new();
        }
        // A task that held a unique key takes its slot back, unless another
        // task holds it now (`UNIQUE_HELD`).
        let unique = self.store.capabilities().unique;
        let now = self.clock.now();
        let tasks = envelopes
            .into_iter()
            .map(|envelope| NewTask {
                unique: unique
                    .then(|| crate::unique::slot_of_task(&envelope))
                    .flatten()
                    .map(|slot| crate::unique::UniqueSlot {
                        slot,
                        on_conflict: crate::unique::OnConflict::Return,
                        now,
                    }),
                envelope,
                idempotency_key: None,
            })
            .collect();
        let stored = self.store.submit(tasks).await;
        self.work_available.notify_waiters();
        stored
    }

    /// Removes SUCCEEDED tasks older than each queue's retention, at most
    /// `limit` per queue; returns how many were removed.
    pub async fn prune(&self, limit: usize) -> Result<u64, EngineError> {
        let (Some(pruning), Some(task_counts)) = (self.store.as_pruning(), self.store.as_counts())
        else {
            return Ok(0);
        };
        let now = self.clock.now();
        let mut removed = 0;
        for counts in task_counts.counts().await? {
            if counts.succeeded == 0 {
                continue;
            }
            let policy = self.policy(&counts.queue).await?;
            let cutoff = Timestamp::from_unix_ms(
                now.unix_ms()
                    .saturating_sub(i64::try_from(policy.retain_succeeded_ms).unwrap_or(i64::MAX)),
            )
            .unwrap_or(Timestamp::EPOCH);
            // `finished_before` is exclusive, so retention 0 removes everything finished by now.
            let cutoff = if policy.retain_succeeded_ms == 0 {
                now.plus_ms(1)
            } else {
                cutoff
            };
            removed += pruning
                .prune_succeeded(&counts.queue, cutoff, limit)
                .await?;
        }
        Ok(removed)
    }
}

/// True if a SUCCEEDED task is past `retain_ms` at `now`: exactly what
/// [`Engine::prune`] removes (strictly older than the retention; everything
/// finished by now when the retention is 0).
pub fn is_prunable(env: &Envelope, retain_ms: u64, now: Timestamp) -> bool {
    env.status == Status::Succeeded
        && (retain_ms == 0 || now.ms_since(finished_at(env)) > retain_ms)
}

/// The live policy of each queue one batch touches, read once per queue.
#[derive(Default)]
struct BatchPolicies(HashMap<String, Result<QueuePolicy, EngineError>>);

impl BatchPolicies {
    async fn of(&mut self, engine: &Engine, queue: &str) -> Result<&QueuePolicy, EngineError> {
        if !self.0.contains_key(queue) {
            let policy = engine.policy(queue).await;
            self.0.insert(queue.to_owned(), policy);
        }
        match self.0.get(queue) {
            Some(Ok(policy)) => Ok(policy),
            Some(Err(e)) => Err(e.clone()),
            None => Err(EngineError::Unavailable("policy lookup failed".into())),
        }
    }
}

/// What [`Engine::ask_to_stop`] found and did.
enum Asked {
    /// Running, and asked to stop (or already asked).
    Running,
    /// PENDING by then, and cancelled.
    Cancelled,
    /// Finished, gone, or in another queue.
    Neither,
}

/// What a worker asked of a lease, kept to be decided again
/// ([`Engine::redecide`]).
enum Event {
    Settle(Settlement),
    Extend(u64),
}

/// Whether [`Engine::apply`] hands back the states it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    States,
    Nothing,
}

/// A store answered fewer results than it was asked for.
fn too_few() -> EngineError {
    EngineError::Unavailable("the store returned too few results".into())
}
