//! rdq's Redis store: low-latency claims and settles, on one Redis server
//! or a Redis Cluster.
//!
//! [`RedisStore`] keeps each queue in a handful of keys sharing one hash tag
//! (`{PREFIX:QUEUE}`): a hash of tasks holding each task's canonical
//! envelope bytes (returned byte for byte, unknown fields included) behind
//! a short header, and sorted sets that order what the hot path needs
//! (due tasks by priority then due time then id, delayed tasks by due time,
//! leases by deadline, finished tasks by end, every status by id). Every
//! transition that must be atomic is one Lua script over one queue's keys,
//! taking a batch: a claim of N, a settle of N or a submit of N is one round
//! trip. Submits and settles arriving together are grouped. Acknowledged
//! writes are as durable as the server's persistence makes them: see
//! `docs/stores/redis.md`, which also gives the key layout and tuning.

#![forbid(unsafe_code)]

mod admin;
mod cleanup;
mod conn;
mod error;
mod events;
mod flow;
mod keys;
mod options;
mod reads;
mod schedules;
mod scripts;
mod sources;
mod stored;
mod tls;
mod writes;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use rdq_engine::{
    Cancel, CancelRequest, ClaimRequest, ConfigStore, EngineError, LeaseToken, LeasedUpdate,
    ListQuery, NewTask, Page, Pruning, QueueConfig, QueueCounts, Redrive, RedriveRequest, Removal,
    Store, Submitted, TaskCounts, TaskListing, TaskLookup, WorkCapabilities,
};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use tokio::sync::{Notify, OnceCell, oneshot};
use tokio::task::AbortHandle;

use crate::conn::Conn;
use crate::error::Failure;
use crate::events::Events;
use crate::keys::Keys;
use crate::scripts::Scripts;
use rdq_engine::batch::Batcher;

pub use crate::flow::FlowClaimStats;
pub use crate::options::{DEFAULT_PREFIX, RedisOptions};
pub use crate::tls::RedisTls;

/// Grouped writes running at once, so that one group's round trip overlaps
/// the next group's.
const GROUPS_IN_FLIGHT: usize = 4;

/// The Redis store. Cheap to clone: clones share one connection and one
/// set of grouping tasks.
///
/// Nothing connects until the first operation; an operation that finds
/// Redis unreachable retries until [`RedisOptions::wait`] has passed, then
/// fails with `STORE_UNAVAILABLE`.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("options", &self.inner.shared.options)
            .finish_non_exhaustive()
    }
}

struct Inner {
    shared: Arc<Shared>,
    // Fields drop in order: the background tasks stop before a temporary
    // prefix is cleaned up.
    started: OnceCell<Started>,
    _temporary: Option<cleanup::TemporaryPrefix>,
}

/// The background tasks, started inside the caller's runtime on first use.
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

/// What the store's operations share.
pub(crate) struct Shared {
    pub(crate) options: RedisOptions,
    pub(crate) keys: Keys,
    pub(crate) scripts: Scripts,
    conn: OnceCell<Conn>,
    /// Read (or made) once, then never changes.
    lease_secret: OnceCell<[u8; 32]>,
    pub(crate) events: Events,
    /// How this process's flow claims went.
    pub(crate) flow_counters: flow::Counters,
}

impl Shared {
    /// The connection, made on first use.
    pub(crate) async fn conn(&self) -> Result<Conn, Failure> {
        self.conn
            .get_or_try_init(|| Conn::connect(&self.options))
            .await
            .cloned()
    }

    /// Drops ids from the id index (after their tasks were removed).
    pub(crate) async fn forget_ids(&self, conn: &mut Conn, ids: &[TaskId]) -> Result<(), Failure> {
        let mut shards: HashMap<String, Vec<String>> = HashMap::new();
        for id in ids {
            shards
                .entry(self.keys.index(*id))
                .or_default()
                .push(id.to_string());
        }
        let cmds = shards
            .into_iter()
            .map(|(shard, ids)| {
                let mut cmd = redis::cmd("HDEL");
                cmd.arg(shard).arg(ids);
                cmd
            })
            .collect();
        let _: Vec<redis::Value> = conn.each(cmds).await?;
        Ok(())
    }
}

impl RedisStore {
    /// A store for `url` (see [`RedisOptions::from_url`]); connects on first use.
    pub fn from_url(url: &str) -> Result<Self, EngineError> {
        Ok(Self::with_options(RedisOptions::from_url(url)?))
    }

    /// A store with explicit options; connects on first use.
    pub fn with_options(options: RedisOptions) -> Self {
        Self::build(options, None)
    }

    /// Connects to `url` now, failing (with `STORE_UNAVAILABLE` after
    /// waiting [`RedisOptions::wait`]) rather than at first use.
    pub async fn open(url: &str) -> Result<Self, EngineError> {
        let store = Self::from_url(url)?;
        store.ping().await?;
        Ok(store)
    }

    /// A store under a fresh prefix of its own (`PREFIX_tmp_<ULID>`, from
    /// the URL's `?prefix=`) whose keys are all deleted when the last clone
    /// drops: for tests, benchmarks and trials. Dropping it blocks the
    /// dropping thread until the keys are gone.
    pub async fn open_temporary(url: &str) -> Result<Self, EngineError> {
        let mut options = RedisOptions::from_url(url)?;
        options.prefix = format!(
            "{}_tmp_{}",
            options.prefix,
            TaskId::generate().to_string().to_lowercase()
        );
        let temporary = cleanup::TemporaryPrefix {
            options: options.clone(),
        };
        let store = Self::build(options, Some(temporary));
        store.ping().await?;
        Ok(store)
    }

    fn build(options: RedisOptions, temporary: Option<cleanup::TemporaryPrefix>) -> Self {
        let shared = Shared {
            keys: Keys::new(&options.prefix),
            options,
            scripts: Scripts::default(),
            conn: OnceCell::new(),
            lease_secret: OnceCell::new(),
            events: Events::new(format!("{:x}", TaskId::generate().as_u128())),
            flow_counters: flow::Counters::default(),
        };
        Self {
            inner: Arc::new(Inner {
                shared: Arc::new(shared),
                started: OnceCell::new(),
                _temporary: temporary,
            }),
        }
    }

    /// The key prefix this store owns.
    pub fn prefix(&self) -> &str {
        self.inner.shared.keys.prefix()
    }

    /// How this process's claims under flow limits went: how many were
    /// made, how many choices another claim overtook (each costs one more
    /// round trip), and how many gave up taking nothing (see
    /// `docs/stores/redis.md`).
    pub fn flow_claim_stats(&self) -> FlowClaimStats {
        self.shared().flow_counters.stats()
    }

    /// Deletes every key under this store's prefix: every task, index and
    /// policy. What `open_temporary` does on drop; irreversible.
    pub async fn delete_everything(&self) -> Result<(), EngineError> {
        let mut conn = self.shared().conn().await.map_err(Failure::into_engine)?;
        cleanup::delete_prefix(&mut conn, &self.shared().keys)
            .await
            .map_err(Failure::into_engine)
    }

    async fn ping(&self) -> Result<(), EngineError> {
        let shared = self.shared();
        conn::retrying(shared.options.wait, conn::Retry::Always, |_| {
            Box::pin(async move {
                let mut conn = shared.conn().await?;
                let _: String = redis::cmd("PING").query_async(&mut conn).await?;
                Ok(())
            })
        })
        .await
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    async fn started(&self) -> &Started {
        self.inner
            .started
            .get_or_init(|| async {
                let max = self.shared().options.max_group;
                let for_submits = Arc::clone(&self.inner.shared);
                let for_settles = Arc::clone(&self.inner.shared);
                Started {
                    listener: tokio::spawn(events::listen(Arc::clone(&self.inner.shared)))
                        .abort_handle(),
                    submits: Batcher::start(
                        max,
                        GROUPS_IN_FLIGHT,
                        writes::SubmitRequest::weight,
                        move |group| {
                            let shared = Arc::clone(&for_submits);
                            async move { writes::run_submits(&shared, group).await }
                        },
                    ),
                    settles: Batcher::start(
                        max,
                        GROUPS_IN_FLIGHT,
                        writes::SettleRequest::weight,
                        move |group| {
                            let shared = Arc::clone(&for_settles);
                            async move { writes::run_settles(&shared, group).await }
                        },
                    ),
                }
            })
            .await
    }
}

fn batcher_gone() -> EngineError {
    EngineError::Unavailable("the Redis store's grouping task stopped".into())
}

#[async_trait]
impl Store for RedisStore {
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
        Some(Arc::clone(&self.inner.shared.events.work))
    }

    fn cancel_signal(&self) -> Option<tokio::sync::broadcast::Sender<TaskId>> {
        Some(self.inner.shared.events.cancels.clone())
    }

    async fn announce_cancel(&self, ids: &[TaskId]) {
        writes::announce_cancel(&self.inner.shared, ids).await;
    }

    async fn submit(&self, tasks: Vec<NewTask>) -> Vec<Result<Submitted, EngineError>> {
        let n = tasks.len();
        if n == 0 {
            return Vec::new();
        }
        let batchers = self.started().await;
        through(&batchers.submits, n, |reply| writes::SubmitRequest {
            tasks,
            reply,
        })
        .await
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Envelope>, EngineError> {
        request.refuse_unsupported(self.capabilities())?;
        if request.max == 0 {
            return Ok(Vec::new());
        }
        writes::claim(self.shared(), request).await
    }

    async fn settle(&self, updates: Vec<LeasedUpdate>) -> Vec<Result<(), EngineError>> {
        let n = updates.len();
        if n == 0 {
            return Vec::new();
        }
        let batchers = self.started().await;
        through(&batchers.settles, n, |reply| writes::SettleRequest {
            updates,
            reply,
        })
        .await
    }

    async fn throttle(
        &self,
        queue: &str,
        key: Option<&str>,
        until: Timestamp,
    ) -> Result<(), EngineError> {
        flow::throttle(self.shared(), queue, key, until).await
    }

    async fn flow_status(
        &self,
        queue: &str,
        flow: &rdq_engine::FlowPolicy,
        now: Timestamp,
    ) -> Result<rdq_engine::FlowStatus, EngineError> {
        flow::status(self.shared(), queue, flow, now).await
    }

    async fn expired_leases(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Envelope>, EngineError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        reads::expired_leases(self.shared(), now, limit).await
    }

    async fn leased(&self, leases: &[(TaskId, LeaseToken)]) -> Vec<Result<Envelope, EngineError>> {
        reads::leased(self.shared(), leases).await
    }

    async fn lease_secret(&self) -> Result<Option<[u8; 32]>, EngineError> {
        let shared = self.shared();
        let secret = shared
            .lease_secret
            .get_or_try_init(|| admin::lease_secret(shared))
            .await?;
        Ok(Some(*secret))
    }

    async fn ready(&self) -> Result<(), EngineError> {
        reads::ready(self.shared()).await
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
impl TaskLookup for RedisStore {
    async fn get(&self, id: TaskId) -> Result<Envelope, EngineError> {
        reads::get(self.shared(), id).await
    }
}

#[async_trait]
impl TaskListing for RedisStore {
    async fn list(&self, query: &ListQuery) -> Result<Page, EngineError> {
        reads::list(self.shared(), query).await
    }
}

#[async_trait]
impl TaskCounts for RedisStore {
    async fn counts(&self) -> Result<Vec<QueueCounts>, EngineError> {
        reads::counts(self.shared()).await
    }
}

#[async_trait]
impl Redrive for RedisStore {
    async fn redrive(
        &self,
        request: &RedriveRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError> {
        admin::redrive(self.shared(), request, now).await
    }
}

#[async_trait]
impl Cancel for RedisStore {
    async fn cancel_pending(
        &self,
        request: &CancelRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError> {
        admin::cancel_pending(self.shared(), request, now).await
    }
}

#[async_trait]
impl Removal for RedisStore {
    async fn purge(&self, queue: &str, status: Status, dry_run: bool) -> Result<u64, EngineError> {
        admin::purge(self.shared(), queue, status, dry_run).await
    }

    async fn delete(&self, id: TaskId) -> Result<(), EngineError> {
        admin::delete(self.shared(), id).await
    }
}

#[async_trait]
impl Pruning for RedisStore {
    async fn prune_succeeded(
        &self,
        queue: &str,
        finished_before: Timestamp,
        limit: usize,
    ) -> Result<u64, EngineError> {
        if limit == 0 {
            return Ok(0);
        }
        admin::prune(self.shared(), queue, finished_before, limit).await
    }
}

#[async_trait]
impl ConfigStore for RedisStore {
    async fn get_config(&self, queue: &str) -> Result<Option<QueueConfig>, EngineError> {
        self.started().await;
        reads::get_config(self.shared(), queue).await
    }

    async fn put_config(&self, queue: &str, policy: &QueueConfig) -> Result<(), EngineError> {
        admin::put_config(self.shared(), queue, policy).await
    }
}

/// Sends one request through a grouping task and waits for its `n`
/// results; a stopped task answers every item `STORE_UNAVAILABLE`.
async fn through<T: Clone, R: Send + 'static>(
    batcher: &Batcher<R>,
    n: usize,
    request: impl FnOnce(oneshot::Sender<Vec<Result<T, EngineError>>>) -> R,
) -> Vec<Result<T, EngineError>> {
    let (reply, answer) = oneshot::channel();
    if batcher.send(request(reply)).is_err() {
        return vec![Err(batcher_gone()); n];
    }
    answer
        .await
        .unwrap_or_else(|_| vec![Err(batcher_gone()); n])
}
