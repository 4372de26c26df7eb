//! What every check shares: a fresh store behind an [`Engine`] on virtual
//! time, the capability gate that lets a check skip itself, and the small
//! steps (submit, claim, settle, kill) checks are written in.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use rdq_engine::{
    Backoff, Capabilities, Claimed, Engine, EngineError, FailureKind, ListQuery, ManualClock, Page,
    QueueConfig, QueueCounts, QueueDepths, QueuePolicy, RedriveRequest, Settlement, Store,
    SubmitRequest, Submitted,
};
use rdq_envelope::{Envelope, ErrorInfo, Status, TaskId, Timestamp};

use crate::StoreFactory;

/// The store's SPI as checks call it: each extension's methods straight on
/// the store, answering `UNSUPPORTED` when the store does not offer that
/// extension, so a check about the SPI itself reads as one call.
#[async_trait]
pub(crate) trait Spi {
    async fn get(&self, id: TaskId) -> Result<Envelope, EngineError>;
    async fn list(&self, query: &ListQuery) -> Result<Page, EngineError>;
    async fn counts(&self) -> Result<Vec<QueueCounts>, EngineError>;
    async fn depths(&self, queue: &str) -> Result<Option<QueueDepths>, EngineError>;
    async fn redrive(
        &self,
        request: &RedriveRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError>;
    async fn purge(&self, queue: &str, status: Status, dry_run: bool) -> Result<u64, EngineError>;
    async fn delete(&self, id: TaskId) -> Result<(), EngineError>;
    async fn prune_succeeded(
        &self,
        queue: &str,
        finished_before: Timestamp,
        limit: usize,
    ) -> Result<u64, EngineError>;
    async fn get_config(&self, queue: &str) -> Result<Option<QueueConfig>, EngineError>;
    async fn put_config(&self, queue: &str, config: &QueueConfig) -> Result<(), EngineError>;
}

fn lacks<T>(extension: &str) -> Result<T, EngineError> {
    Err(EngineError::Unsupported(format!(
        "the store does not offer {extension}"
    )))
}

#[async_trait]
impl Spi for dyn Store {
    async fn get(&self, id: TaskId) -> Result<Envelope, EngineError> {
        match self.as_lookup() {
            Some(x) => x.get(id).await,
            None => lacks("TaskLookup"),
        }
    }
    async fn list(&self, query: &ListQuery) -> Result<Page, EngineError> {
        match self.as_listing() {
            Some(x) => x.list(query).await,
            None => lacks("TaskListing"),
        }
    }
    async fn counts(&self) -> Result<Vec<QueueCounts>, EngineError> {
        match self.as_counts() {
            Some(x) => x.counts().await,
            None => lacks("TaskCounts"),
        }
    }
    async fn depths(&self, queue: &str) -> Result<Option<QueueDepths>, EngineError> {
        match self.as_depths() {
            Some(x) => x.depths(queue).await,
            None => lacks("QueueDepthsSource"),
        }
    }
    async fn redrive(
        &self,
        request: &RedriveRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError> {
        match self.as_redrive() {
            Some(x) => x.redrive(request, now).await,
            None => lacks("Redrive"),
        }
    }
    async fn purge(&self, queue: &str, status: Status, dry_run: bool) -> Result<u64, EngineError> {
        match self.as_removal() {
            Some(x) => x.purge(queue, status, dry_run).await,
            None => lacks("Removal"),
        }
    }
    async fn delete(&self, id: TaskId) -> Result<(), EngineError> {
        match self.as_removal() {
            Some(x) => x.delete(id).await,
            None => lacks("Removal"),
        }
    }
    async fn prune_succeeded(
        &self,
        queue: &str,
        finished_before: Timestamp,
        limit: usize,
    ) -> Result<u64, EngineError> {
        match self.as_pruning() {
            Some(x) => x.prune_succeeded(queue, finished_before, limit).await,
            None => lacks("Pruning"),
        }
    }
    async fn get_config(&self, queue: &str) -> Result<Option<QueueConfig>, EngineError> {
        match self.as_config_store() {
            Some(x) => x.get_config(queue).await,
            None => lacks("ConfigStore"),
        }
    }
    async fn put_config(&self, queue: &str, config: &QueueConfig) -> Result<(), EngineError> {
        match self.as_config_store() {
            Some(x) => x.put_config(queue, config).await,
            None => lacks("ConfigStore"),
        }
    }
}

/// Where every check's clock starts: 2026-07-20T14:03:22.117Z.
pub(crate) const START_MS: i64 = 1_784_556_202_117;

/// The instant every check's clock starts at.
pub(crate) fn start() -> Timestamp {
    Timestamp::from_unix_ms(START_MS).expect("the start instant is representable")
}

/// The instant `ms` after the start.
pub(crate) fn at(ms: u64) -> Timestamp {
    start().plus_ms(ms)
}

/// A capability a check needs beyond the work path.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Need {
    GetById,
    List,
    Redrive,
    Purge,
    Counts,
    QueueConfig,
    IdempotentSubmit,
    Prune,
}

impl Need {
    fn is_met_by(self, caps: Capabilities) -> bool {
        match self {
            Self::GetById => caps.get_by_id,
            Self::List => caps.list,
            Self::Redrive => caps.redrive,
            Self::Purge => caps.purge,
            Self::Counts => caps.counts,
            Self::QueueConfig => caps.queue_config,
            Self::IdempotentSubmit => caps.idempotent_submit,
            Self::Prune => caps.prune,
        }
    }
}

/// True (after printing why) when `caps` lacks something `check` needs.
pub(crate) fn skipped(check: &str, caps: Capabilities, needs: &[Need]) -> bool {
    let missing: Vec<Need> = needs
        .iter()
        .copied()
        .filter(|need| !need.is_met_by(caps))
        .collect();
    if missing.is_empty() {
        return false;
    }
    eprintln!("rdq-compliance: skipping {check}: the store lacks {missing:?}");
    true
}

/// The policy checks run under unless they say otherwise: three attempts,
/// retries due at once, one-second leases.
pub(crate) fn test_policy() -> QueuePolicy {
    QueuePolicy {
        max_attempts: 3,
        backoff: Backoff::None,
        lease_ms: 1_000,
        ..QueuePolicy::default()
    }
}

/// A minimal task for `queue`.
pub(crate) fn task(queue: &str) -> SubmitRequest {
    SubmitRequest {
        queue: queue.to_owned(),
        handler_ref: "compliance.noop".to_owned(),
        payload: br#"{"n":1}"#.to_vec(),
        payload_content_type: "application/json".to_owned(),
        ..SubmitRequest::default()
    }
}

/// A failure the worker classified as retryable.
pub(crate) fn retryable(error_type: &str) -> Settlement {
    failure(error_type, FailureKind::Retryable)
}

/// A failure the worker classified as permanent.
pub(crate) fn permanent(error_type: &str) -> Settlement {
    failure(error_type, FailureKind::Permanent)
}

/// A failure of `error_type`, classified as `kind`.
pub(crate) fn failure(error_type: &str, kind: FailureKind) -> Settlement {
    Settlement::Failure {
        error: ErrorInfo::new(error_type, "failed on purpose by the compliance suite"),
        kind,
    }
}

/// The ids of some tasks, in order.
pub(crate) fn ids_of<'a>(envs: impl IntoIterator<Item = &'a Envelope>) -> Vec<TaskId> {
    envs.into_iter().map(|env| env.id).collect()
}

/// The ids of some claims, in order.
pub(crate) fn claimed_ids(claims: &[Claimed]) -> Vec<TaskId> {
    claims.iter().map(|c| c.envelope.id).collect()
}

/// Asserts two lists hold the same ids, in any order, each once.
pub(crate) fn assert_same_ids(actual: &[TaskId], expected: &[TaskId], what: &str) {
    let actual_set: HashSet<TaskId> = actual.iter().copied().collect();
    let expected_set: HashSet<TaskId> = expected.iter().copied().collect();
    assert_eq!(actual_set.len(), actual.len(), "{what}: an id came twice");
    assert_eq!(actual_set, expected_set, "{what}: not the expected tasks");
}

/// Asserts both envelopes have the same canonical bytes.
pub(crate) fn assert_same_bytes(actual: &Envelope, expected: &Envelope, what: &str) {
    assert_eq!(
        actual.encode_string(),
        expected.encode_string(),
        "{what}: the store did not give back the envelope byte for byte"
    );
}

/// The error code of a refusal, or "OK".
pub(crate) fn code_of<T>(result: &Result<T, EngineError>) -> &'static str {
    match result {
        Ok(_) => "OK",
        Err(e) => e.code(),
    }
}

/// A store made by the factory, an engine over it and the engine's clock.
pub(crate) struct Harness {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) engine: Engine,
}

impl Harness {
    /// A fresh store under [`test_policy`].
    pub(crate) async fn new(factory: &StoreFactory) -> Self {
        Self::with_policy(factory, test_policy()).await
    }

    /// A fresh store; queues without stored config run under `policy`.
    pub(crate) async fn with_policy(factory: &StoreFactory, policy: QueuePolicy) -> Self {
        let store = factory().await;
        let clock = Arc::new(ManualClock::new(start()));
        let engine = Engine::new(store.clone(), clock.clone()).with_fallback_policy(policy);
        Self {
            store,
            clock,
            engine,
        }
    }

    /// What the store says it can do.
    pub(crate) fn caps(&self) -> Capabilities {
        Capabilities::of(self.store.as_ref())
    }

    /// True (after printing why) when the store lacks something `check` needs.
    pub(crate) fn skips(&self, check: &str, needs: &[Need]) -> bool {
        skipped(check, self.caps(), needs)
    }

    /// True (after printing why) when the store lacks a work-path part
    /// (`has` is false) that `check` needs.
    pub(crate) fn skips_unless(&self, check: &str, has: bool) -> bool {
        if !has {
            eprintln!("rdq-compliance: skipping {check}: the store does not declare it");
        }
        !has
    }

    /// The virtual now.
    pub(crate) fn now(&self) -> Timestamp {
        self.engine.now()
    }

    /// Moves virtual time forward.
    pub(crate) fn advance(&self, ms: u64) {
        self.clock.advance_ms(ms);
    }

    /// Submits one task, which must be new.
    pub(crate) async fn submit(&self, request: SubmitRequest) -> Envelope {
        match self.engine.submit(request).await {
            Ok(Submitted::Created(env)) => env,
            other => panic!("a new task should be created, got {other:?}"),
        }
    }

    /// Submits `n` minimal tasks to `queue` in batches; returns them in order.
    pub(crate) async fn submit_n(&self, queue: &str, n: usize) -> Vec<Envelope> {
        submit_n(&self.engine, queue, n).await
    }

    /// Claims up to `max` tasks of `queue`.
    pub(crate) async fn claim(&self, queue: &str, max: usize) -> Vec<Claimed> {
        self.engine
            .claim(queue, max, None)
            .await
            .expect("claim should succeed")
    }

    /// Claims exactly one task of `queue`.
    pub(crate) async fn claim_one(&self, queue: &str) -> Claimed {
        let mut claimed = self.claim(queue, 1).await;
        assert_eq!(claimed.len(), 1, "one task of {queue} should be claimable");
        claimed.remove(0)
    }

    /// Settles a claim, which must be accepted; returns the new state.
    pub(crate) async fn settle(&self, claimed: &Claimed, settlement: Settlement) -> Envelope {
        self.engine
            .settle(&claimed.envelope, claimed.token, settlement)
            .await
            .expect("a settle under the current lease should be accepted")
    }

    /// Submits `n` tasks to `queue` and fails them permanently with
    /// `error_type`; returns their ids. The queue must have no other due tasks.
    pub(crate) async fn kill(&self, queue: &str, n: usize, error_type: &str) -> Vec<TaskId> {
        kill(&self.engine, queue, n, error_type).await
    }

    /// The stored task, when the store can look tasks up.
    pub(crate) async fn stored(&self, id: TaskId) -> Option<Envelope> {
        if !self.caps().get_by_id {
            return None;
        }
        Some(self.store.get(id).await.expect("the task should be stored"))
    }

    /// Asserts the stored task is `expected` byte for byte (when the store can
    /// look tasks up).
    pub(crate) async fn assert_stored(&self, expected: &Envelope, what: &str) {
        if let Some(stored) = self.stored(expected.id).await {
            assert_same_bytes(&stored, expected, what);
        }
    }

    /// Asserts the stored task is in `status` (when the store can look tasks up).
    pub(crate) async fn assert_status(&self, id: TaskId, status: Status, what: &str) {
        if let Some(stored) = self.stored(id).await {
            assert_eq!(stored.status, status, "{what}");
        }
    }
}

/// Submits `n` minimal tasks to `queue` in batches; returns them in order.
pub(crate) async fn submit_n(engine: &Engine, queue: &str, n: usize) -> Vec<Envelope> {
    let mut created = Vec::with_capacity(n);
    let mut left = n;
    while left > 0 {
        let batch = left.min(100);
        left -= batch;
        let results = engine.submit_many(vec![task(queue); batch]).await;
        for result in results {
            match result {
                Ok(Submitted::Created(env)) => created.push(env),
                other => panic!("a new task should be created, got {other:?}"),
            }
        }
    }
    created
}

/// Submits `n` tasks to `queue` and fails them permanently with `error_type`;
/// returns their ids. The queue must have no other due tasks.
pub(crate) async fn kill(engine: &Engine, queue: &str, n: usize, error_type: &str) -> Vec<TaskId> {
    let submitted = submit_n(engine, queue, n).await;
    let claimed = engine
        .claim(queue, n, None)
        .await
        .expect("claim should succeed");
    assert_same_ids(
        &claimed_ids(&claimed),
        &ids_of(&submitted),
        "the tasks just submitted should be claimed",
    );
    for c in &claimed {
        let dead = engine
            .settle(&c.envelope, c.token, permanent(error_type))
            .await
            .expect("a permanent failure should be accepted");
        assert_eq!(dead.status, Status::Dead);
    }
    claimed_ids(&claimed)
}
