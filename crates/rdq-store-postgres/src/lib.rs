//! rdq's PostgreSQL store: any number of `rdq serve` processes and SDK
//! workers, on any number of hosts, sharing one database.
//!
//! [`PostgresStore`] keeps every task in one row of `SCHEMA.tasks`: the
//! canonical envelope bytes (the source of truth, returned byte for byte,
//! unknown fields included) beside the columns its partial indexes need.
//! Claims lock the next due tasks with `FOR UPDATE SKIP LOCKED`, so nodes
//! never wait for each other and never share a task; settles are a
//! compare-and-swap on the lease token. Submits and settles arriving together
//! are grouped into one multi-row statement and one commit. `LISTEN/NOTIFY`
//! wakes idle workers on every node as soon as work is committed. A write is
//! acknowledged only after PostgreSQL committed it (with the default
//! `synchronous_commit = on`, after its WAL reached disk).
//!
//! See `docs/stores/postgres.md` for the schema, migrations, tuning and how
//! to run several nodes.

#![forbid(unsafe_code)]

mod columns;
mod error;
mod flow;
mod listener;
mod options;
mod policies;
mod pool;
mod reads;
mod schedules;
mod schema;
mod sources;
mod sql;
mod temporary;
mod tls;
mod transactional;
mod writes;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rdq_engine::{
    Cancel, CancelRequest, ClaimRequest, ConfigStore, EngineError, LeaseToken, LeasedUpdate,
    ListQuery, NewTask, Page, Pruning, QueueConfig, QueueCounts, Redrive, RedriveRequest, Removal,
    Store, Submitted, TaskCounts, TaskListing, TaskLookup, WorkCapabilities,
};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use tokio::sync::{Notify, OnceCell, oneshot};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_postgres::Config;

use crate::error::Failure;
use crate::policies::PolicyCache;
use crate::pool::Pool;
use crate::sql::Sql;
use crate::temporary::TemporarySchema;
use rdq_engine::batch::Batcher;

pub use crate::options::{DEFAULT_SCHEMA, PostgresOptions};
pub use crate::schema::SCHEMA_VERSION;
pub use crate::tls::{PostgresTls, SslMode};
pub use crate::transactional::{complete_in, submit_in, submit_statement};
#[cfg(feature = "sqlx")]
pub use crate::transactional::{complete_in_sqlx, submit_in_sqlx};

/// Grouped writes running at once (each on its own connection), so that one
/// group's commit overlaps the next group's statement.
const GROUPS_IN_FLIGHT: usize = 2;

/// The PostgreSQL store. Cheap to clone: clones share one pool, one
/// listening connection and one set of batching tasks, which stop when the
/// last clone drops.
///
/// Nothing connects until the first operation (or [`PostgresStore::migrate`]):
/// that one runs the migrations and starts the listener, and an operation
/// that finds the database unreachable fails with `STORE_UNAVAILABLE` after
/// waiting [`PostgresOptions::wait`] for it.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.inner.shared.schema)
            .finish_non_exhaustive()
    }
}

struct Inner {
    shared: Arc<Shared>,
    // Fields drop in order: the background work stops before a temporary
    // schema is dropped.
    started: OnceCell<Started>,
    _temporary: Option<TemporarySchema>,
}

/// What runs once the store has connected.
struct Started {
    submits: Batcher<writes::SubmitRequest>,
    settles: Batcher<writes::SettleRequest>,
    listener: AbortHandle,
}

impl Drop for Started {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// Capacity of the channel of cancel requests (`Shared::cancels`).
const CANCEL_CHANNEL: usize = 4096;

/// What the store's operations and background tasks share.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) tls: tls::PostgresTls,
    pub(crate) pool: Pool,
    pub(crate) sql: Sql,
    pub(crate) schema: String,
    /// The notification channel of this schema.
    pub(crate) channel: String,
    /// This store instance in notification payloads, to skip its own.
    pub(crate) origin: String,
    /// Signalled when another node made work due (see `listener.rs`).
    pub(crate) work: Arc<Notify>,
    /// Running tasks asked to stop, by this node's engine or announced by
    /// another node (see `listener.rs`).
    pub(crate) cancels: tokio::sync::broadcast::Sender<TaskId>,
    pub(crate) policies: PolicyCache,
    pub(crate) wait: Duration,
    pub(crate) max_group: usize,
    /// When each flow-controlled queue last looked for rows to adopt
    /// (see `flow.rs`).
    pub(crate) adopted: flow::Adoptions,
}

/// Which failures an operation may be retried after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Any transient failure: the operation is safe to repeat (reads,
    /// claims, policy writes, pruning) or detects that an earlier attempt
    /// already landed (submits and settles compare the stored bytes).
    Always,
    /// Only failures that certainly rolled back: repeating the operation
    /// after an unknown outcome would answer wrongly (purge, delete, redrive).
    RolledBackOnly,
}

/// The least time an attempt waits for an answer (see [`Attempts::answer_by`]).
pub(crate) const ANSWER_FLOOR: Duration = Duration::from_secs(1);

/// Where a retried operation stands: see [`retrying!`].
pub(crate) struct Attempts {
    deadline: Instant,
    backoff: Duration,
    /// An earlier attempt failed with its outcome unknown.
    pub(crate) maybe_applied: bool,
}

impl Attempts {
    /// A first attempt, with until `wait` from now for all of them.
    pub(crate) fn new(wait: Duration) -> Self {
        Self {
            deadline: Instant::now() + wait,
            backoff: Duration::from_millis(10),
            maybe_applied: false,
        }
    }

    /// When the operation gives up.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// When the attempt under way is abandoned for want of an answer: the
    /// deadline, but never less than [`ANSWER_FLOOR`] from now, so that a
    /// store with `wait_ms=0` still waits for a database that answers.
    pub(crate) fn answer_by(&self) -> Instant {
        self.deadline.max(Instant::now() + ANSWER_FLOOR)
    }

    /// After a failed attempt: `Ok(())` once it is time to try again, or the
    /// error to give the caller.
    pub(crate) async fn after(
        &mut self,
        failure: Failure,
        retry: Retry,
        pool: &Pool,
    ) -> Result<(), EngineError> {
        let again = match failure {
            Failure::RolledBack(_) => true,
            Failure::Connection(_) => retry == Retry::Always,
            Failure::Fatal(_) | Failure::Engine(_) => false,
        };
        if !again || Instant::now() + self.backoff >= self.deadline {
            return Err(failure.into_engine());
        }
        tracing::debug!(error = %failure, "retrying a PostgreSQL operation");
        if matches!(failure, Failure::Connection(_)) {
            self.maybe_applied = true;
            // After a restart or failover every idle connection is dead too.
            pool.clear();
        }
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(Duration::from_millis(500));
        Ok(())
    }
}

/// Pins an attempt's future to `Result<T, Failure>` (for type inference).
pub(crate) fn attempt<T, F: std::future::Future<Output = Result<T, Failure>>>(f: F) -> F {
    f
}

/// Runs a block on a pooled connection, retrying transient failures (as its
/// [`Retry`] allows) until the store's `wait` has passed:
/// `retrying!(shared, Retry::Always, |conn, maybe_applied| { … Ok(x) })`.
/// The block is an async body returning `Result<_, Failure>`; `conn` is the
/// `&mut Conn`, and `maybe_applied` says whether an earlier attempt may have
/// committed. The connection returns to the pool only after a success.
///
/// An attempt still unanswered at the deadline is abandoned as a connection
/// failure: a connection that went half-open (the peer vanished, nothing
/// arrives, nothing fails) would otherwise hold the operation, and every
/// write grouped behind it, for as long as TCP keeps the socket open. Its
/// connection is closed with its lease, so the server rolls back whatever
/// the attempt left open.
macro_rules! retrying {
    ($shared:expr, $retry:expr, |$conn:ident, $applied:ident| $body:block) => {{
        let shared: &$crate::Shared = $shared;
        let mut attempts = $crate::Attempts::new(shared.wait);
        loop {
            let attempt = $crate::attempt(async {
                let mut lease = shared.pool.get(attempts.deadline()).await?;
                let value = {
                    let $conn = &mut lease.conn;
                    let $applied = attempts.maybe_applied;
                    $crate::attempt(async $body).await?
                };
                lease.keep();
                Ok(value)
            });
            let outcome = match tokio::time::timeout_at(attempts.answer_by(), attempt).await {
                Ok(outcome) => outcome,
                Err(_) => Err($crate::error::Failure::Connection(format!(
                    "no answer from PostgreSQL within {:?}",
                    shared.wait.max($crate::ANSWER_FLOOR)
                ))),
            };
            match outcome {
                Ok(value) => break Ok(value),
                Err(failure) => {
                    if let Err(e) = attempts.after(failure, $retry, &shared.pool).await {
                        break Err(e);
                    }
                }
            }
        }
    }};
}
pub(crate) use retrying;

impl PostgresStore {
    /// A store for `url` (see [`PostgresOptions::from_url`]). Connects, runs
    /// the migrations and starts listening on first use; see
    /// [`PostgresStore::open`] to do that now.
    pub fn from_url(url: &str) -> Result<Self, EngineError> {
        Ok(Self::with_options(PostgresOptions::from_url(url)?))
    }

    /// A store with explicit options; connects on first use.
    pub fn with_options(options: PostgresOptions) -> Self {
        Self::build(options, None)
    }

    /// Connects to `url`, brings the schema up to date and starts listening:
    /// fails now (with `STORE_UNAVAILABLE` after waiting
    /// [`PostgresOptions::wait`], or `CORRUPT_STORE` for a schema that is
    /// not rdq's or is newer than this build) rather than at first use.
    pub async fn open(url: &str) -> Result<Self, EngineError> {
        let store = Self::from_url(url)?;
        store.started().await?;
        Ok(store)
    }

    /// A store in a fresh schema of its own (`rdq_tmp_…`) on the database of
    /// `url` (whose `?schema=` is ignored), dropped with everything in it when
    /// the last clone drops: for tests, benchmarks and trials. Dropping it
    /// blocks the dropping thread until the schema is gone.
    pub async fn open_temporary(url: &str) -> Result<Self, EngineError> {
        let mut options = PostgresOptions::from_url(url)?;
        options.schema = temporary::fresh_schema();
        // Names this store's connections, so the cleanup can end them.
        options.config.application_name(&options.schema);
        let temporary = TemporarySchema {
            config: options.config.clone(),
            tls: options.tls.clone(),
            schema: options.schema.clone(),
        };
        let store = Self::build(options, Some(temporary));
        store.started().await?;
        Ok(store)
    }

    fn build(options: PostgresOptions, temporary: Option<TemporarySchema>) -> Self {
        let origin = format!("{:x}", TaskId::generate().as_u128());
        let shared = Shared {
            pool: Pool::new(
                options.config.clone(),
                options.tls.clone(),
                options.pool_size,
                options.wait,
            ),
            sql: Sql::new(&options.schema),
            channel: format!("rdq_{}", options.schema),
            schema: options.schema,
            config: options.config,
            tls: options.tls,
            origin,
            work: Arc::new(Notify::new()),
            cancels: tokio::sync::broadcast::channel(CANCEL_CHANNEL).0,
            policies: PolicyCache::default(),
            wait: options.wait,
            max_group: options.max_group,
            adopted: flow::Adoptions::default(),
        };
        Self {
            inner: Arc::new(Inner {
                shared: Arc::new(shared),
                started: OnceCell::new(),
                _temporary: temporary,
            }),
        }
    }

    /// The schema this store owns.
    pub fn schema(&self) -> &str {
        &self.inner.shared.schema
    }

    /// Brings the schema to [`SCHEMA_VERSION`] now (what `rdq migrate`
    /// does); returns the version found before (0 for a new schema). Safe to
    /// run from several nodes at once: an advisory lock serialises them and
    /// each migration is applied once, in one transaction.
    pub async fn migrate(&self) -> Result<i32, EngineError> {
        let shared = &self.inner.shared;
        retrying!(shared, Retry::Always, |conn, _applied| {
            schema::migrate(&mut conn.client, &shared.schema).await
        })
    }

    /// Connects, migrates and starts the background work, once.
    async fn started(&self) -> Result<&Started, EngineError> {
        self.inner
            .started
            .get_or_try_init(|| async {
                let from = self.migrate().await?;
                let shared = &self.inner.shared;
                tracing::debug!(schema = %shared.schema, from, to = SCHEMA_VERSION, "PostgreSQL store ready");
                let max = shared.max_group;
                let for_submits = Arc::clone(shared);
                let for_settles = Arc::clone(shared);
                Ok::<Started, EngineError>(Started {
                    submits: Batcher::start(
                        max,
                        GROUPS_IN_FLIGHT,
                        writes::SubmitRequest::weight,
                        move |batch| writes::run_submits(Arc::clone(&for_submits), batch),
                    ),
                    settles: Batcher::start(
                        max,
                        GROUPS_IN_FLIGHT,
                        writes::SettleRequest::weight,
                        move |batch| writes::run_settles(Arc::clone(&for_settles), batch),
                    ),
                    listener: tokio::spawn(listener::run(Arc::clone(shared))).abort_handle(),
                })
            })
            .await
    }

    /// Queues one request of `n` items on the batcher `pick` chooses and
    /// waits for its `n` answers: none for none, the startup error for each
    /// if the store cannot start, `STORE_UNAVAILABLE` for each if the
    /// batching task has stopped.
    async fn through<R, A>(
        &self,
        n: usize,
        pick: fn(&Started) -> &Batcher<R>,
        request: impl FnOnce(oneshot::Sender<Vec<Result<A, EngineError>>>) -> R,
    ) -> Vec<Result<A, EngineError>>
    where
        R: Send + 'static,
        A: Clone,
    {
        if n == 0 {
            return Vec::new();
        }
        let batcher = match self.started().await {
            Ok(started) => pick(started),
            Err(e) => return vec![Err(e); n],
        };
        let (reply, answer) = oneshot::channel();
        if batcher.send(request(reply)).is_err() {
            return vec![Err(batcher_gone()); n];
        }
        answer
            .await
            .unwrap_or_else(|_| vec![Err(batcher_gone()); n])
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }
}

fn batcher_gone() -> EngineError {
    EngineError::Unavailable("the PostgreSQL store's batching task stopped".into())
}

#[async_trait]
impl Store for PostgresStore {
    fn capabilities(&self) -> WorkCapabilities {
        WorkCapabilities {
            idempotent_submit: true,
            claim_max_in_flight: true,
            claim_flow: true,
            ends_once: true,
            unique: true,
        }
    }

    fn work_signal(&self) -> Option<Arc<Notify>> {
        Some(Arc::clone(&self.inner.shared.work))
    }

    fn cancel_signal(&self) -> Option<tokio::sync::broadcast::Sender<TaskId>> {
        Some(self.inner.shared.cancels.clone())
    }

    async fn announce_cancel(&self, ids: &[TaskId]) {
        if self.started().await.is_ok() {
            writes::announce_cancel(self.shared(), ids).await;
        }
    }

    async fn submit(&self, tasks: Vec<NewTask>) -> Vec<Result<Submitted, EngineError>> {
        self.through(
            tasks.len(),
            |s| &s.submits,
            |reply| writes::SubmitRequest { tasks, reply },
        )
        .await
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Envelope>, EngineError> {
        request.refuse_unsupported(self.capabilities())?;
        if request.max == 0 {
            return Ok(Vec::new());
        }
        self.started().await?;
        writes::claim(self.shared(), request).await
    }

    async fn throttle(
        &self,
        queue: &str,
        key: Option<&str>,
        until: Timestamp,
    ) -> Result<(), EngineError> {
        self.started().await?;
        flow::throttle(self.shared(), queue, key, until).await
    }

    async fn flow_status(
        &self,
        queue: &str,
        flow: &rdq_engine::FlowPolicy,
        now: Timestamp,
    ) -> Result<rdq_engine::FlowStatus, EngineError> {
        self.started().await?;
        flow::status(self.shared(), queue, flow, now).await
    }

    async fn settle(&self, updates: Vec<LeasedUpdate>) -> Vec<Result<(), EngineError>> {
        self.through(
            updates.len(),
            |s| &s.settles,
            |reply| writes::SettleRequest { updates, reply },
        )
        .await
    }

    async fn expired_leases(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Envelope>, EngineError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.started().await?;
        reads::expired_leases(self.shared(), now, limit).await
    }

    async fn leased(&self, leases: &[(TaskId, LeaseToken)]) -> Vec<Result<Envelope, EngineError>> {
        if let Err(e) = self.started().await {
            return vec![Err(e); leases.len()];
        }
        reads::leased(self.shared(), leases).await
    }

    async fn lease_secret(&self) -> Result<Option<[u8; 32]>, EngineError> {
        self.started().await?;
        let mut candidate = [0u8; 32];
        getrandom::fill(&mut candidate).map_err(|e| {
            EngineError::Unavailable(format!("no randomness for the lease secret: {e}"))
        })?;
        let shared = self.shared();
        let secret = retrying!(shared, Retry::Always, |conn, _applied| {
            schema::lease_secret(&conn.client, &shared.schema, &candidate).await
        })?;
        Ok(Some(secret))
    }

    async fn ready(&self) -> Result<(), EngineError> {
        self.started().await?;
        let shared = self.shared();
        retrying!(shared, Retry::Always, |conn, _applied| {
            conn.client.simple_query("SELECT 1").await?;
            Ok(())
        })
    }

    rdq_engine::offer_extensions!(
        TaskLookup,
        TaskListing,
        TaskCounts,
        Redrive,
        Cancel,
        Removal,
        Pruning,
        ConfigStore,
        Schedules,
        SourceCursors
    );
}

#[async_trait]
impl TaskLookup for PostgresStore {
    async fn get(&self, id: TaskId) -> Result<Envelope, EngineError> {
        self.started().await?;
        reads::get(self.shared(), id).await
    }
}

#[async_trait]
impl TaskListing for PostgresStore {
    async fn list(&self, query: &ListQuery) -> Result<Page, EngineError> {
        self.started().await?;
        reads::list(self.shared(), query).await
    }

    async fn oldest_pending(&self, queue: &str) -> Result<Option<TaskId>, EngineError> {
        self.started().await?;
        reads::oldest_pending(self.shared(), queue).await
    }

    async fn dead_groups(&self, queue: &str) -> Result<Vec<rdq_engine::DeadGroup>, EngineError> {
        self.started().await?;
        reads::dead_groups(self.shared(), queue).await
    }
}

#[async_trait]
impl TaskCounts for PostgresStore {
    async fn counts(&self) -> Result<Vec<QueueCounts>, EngineError> {
        self.started().await?;
        reads::counts(self.shared()).await
    }
}

#[async_trait]
impl Redrive for PostgresStore {
    async fn redrive(
        &self,
        request: &RedriveRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError> {
        self.started().await?;
        writes::redrive(self.shared(), request, now).await
    }
}

#[async_trait]
impl Cancel for PostgresStore {
    async fn cancel_pending(
        &self,
        request: &CancelRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError> {
        self.started().await?;
        writes::cancel_pending(self.shared(), request, now).await
    }
}

#[async_trait]
impl Removal for PostgresStore {
    async fn purge(&self, queue: &str, status: Status, dry_run: bool) -> Result<u64, EngineError> {
        self.started().await?;
        writes::purge(self.shared(), queue, status, dry_run).await
    }

    async fn delete(&self, id: TaskId) -> Result<(), EngineError> {
        self.started().await?;
        writes::delete(self.shared(), id).await
    }
}

#[async_trait]
impl Pruning for PostgresStore {
    async fn prune_succeeded(
        &self,
        queue: &str,
        finished_before: Timestamp,
        limit: usize,
    ) -> Result<u64, EngineError> {
        if limit == 0 {
            return Ok(0);
        }
        self.started().await?;
        writes::prune(self.shared(), queue, finished_before, limit).await
    }
}

#[async_trait]
impl ConfigStore for PostgresStore {
    async fn get_config(&self, queue: &str) -> Result<Option<QueueConfig>, EngineError> {
        self.started().await?;
        reads::get_config(self.shared(), queue).await
    }

    async fn put_config(&self, queue: &str, policy: &QueueConfig) -> Result<(), EngineError> {
        self.started().await?;
        writes::put_config(self.shared(), queue, policy).await
    }
}
