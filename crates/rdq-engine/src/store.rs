//! The storage SPI: what a store must do for the engine, and the capabilities
//! by which a store says what it cannot.
//!
//! Stores persist and schedule; they never see retry policy. The work path is
//! small and hot (submit, claim, settle, expired leases); the admin path has
//! defaults that answer `UNSUPPORTED`, so a broker implements only what it can
//! and its [`Capabilities`] say so.
//!
//! Rules every store follows (the compliance kit checks them):
//! - a submit without an idempotency key whose id already exists is refused
//!   with `INVALID_ARGUMENT`; `Submitted::Existing` carries the task's current state;
//! - updates in one `settle` batch apply in order, so a repeated update of the
//!   same lease succeeds once and then gets `LEASE_LOST`;
//! - `ListQuery::limit == 0` means the store's largest page ([`MAX_PAGE`]); an
//!   invalid glob in a filter is `INVALID_ARGUMENT`;
//! - redrive by `ids` skips ids that are not dead tasks of that queue and
//!   ignores duplicates;
//! - `counts` lists a queue while it has tasks or a stored policy.

use std::sync::Arc;

use async_trait::async_trait;
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use tokio::sync::Notify;

use crate::config::QueueConfig;
use crate::error::EngineError;
use crate::machine::LeaseToken;

/// What a store can do beyond the work path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// `get` finds any task by id.
    pub get_by_id: bool,
    /// `list` pages tasks of a queue by status (DLQ browsing).
    pub list: bool,
    /// `redrive` sends dead tasks back.
    pub redrive: bool,
    /// `purge` and `delete` remove tasks.
    pub purge: bool,
    /// `counts` reports tasks per queue and status.
    pub counts: bool,
    /// `get_config` / `put_config` hold queue policy (else it comes from the process config).
    pub queue_config: bool,
    /// `submit` honours idempotency keys.
    pub idempotent_submit: bool,
    /// `prune_succeeded` removes old SUCCEEDED tasks.
    pub prune: bool,
    /// `depths` reports how many messages wait in the broker queues behind
    /// a queue: what a store that cannot count tasks per status offers.
    pub depths: bool,
    /// Queue configuration (`queue_config`) is kept by this process only:
    /// other processes on the same store neither see nor share it, and it is
    /// lost at restart. A broker holds messages, not settings.
    pub config_local: bool,
}

impl Capabilities {
    /// Everything: what a database-backed store offers.
    pub const ALL: Capabilities = Capabilities {
        get_by_id: true,
        list: true,
        redrive: true,
        purge: true,
        counts: true,
        queue_config: true,
        idempotent_submit: true,
        prune: true,
        depths: false,
        config_local: false,
    };

    /// The capability names, each with whether this store has it: what
    /// `GET /v1/capabilities` and the docs' tables show.
    pub fn named(&self) -> [(&'static str, bool); 10] {
        [
            ("get_by_id", self.get_by_id),
            ("list", self.list),
            ("redrive", self.redrive),
            ("purge", self.purge),
            ("counts", self.counts),
            ("depths", self.depths),
            ("queue_config", self.queue_config),
            ("config_local", self.config_local),
            ("idempotent_submit", self.idempotent_submit),
            ("prune", self.prune),
        ]
    }
}

/// A task to store, already shaped by [`crate::machine::submit`].
#[derive(Debug, Clone, PartialEq)]
pub struct NewTask {
    /// The PENDING envelope.
    pub envelope: Envelope,
    /// With a key, a second submit to the same queue returns the first task.
    pub idempotency_key: Option<String>,
}

/// What a submit did.
#[derive(Debug, Clone, PartialEq)]
pub enum Submitted {
    /// A new task was stored.
    Created(Envelope),
    /// The idempotency key was seen before; this is the original task, unchanged.
    Existing(Envelope),
}

impl Submitted {
    /// The stored envelope, new or original.
    pub fn envelope(&self) -> &Envelope {
        match self {
            Self::Created(e) | Self::Existing(e) => e,
        }
    }
}

/// A new state for an in-flight task, applied only while `expected` is still
/// the task's current lease (compare-and-swap). Settles, lease extensions and
/// lease expiries all go through this, which is what makes a stale worker's
/// settle fail with `LEASE_LOST` and a lease be reaped exactly once.
#[derive(Debug, Clone, PartialEq)]
pub struct LeasedUpdate {
    /// The task's new state, decided by the engine.
    pub envelope: Envelope,
    /// The lease the caller believes is current.
    pub expected: LeaseToken,
}

/// Order of a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListOrder {
    /// Most recently submitted first (by id, descending): the DLQ default.
    #[default]
    NewestFirst,
    /// Oldest first (by id, ascending).
    OldestFirst,
}

/// A page request over one queue's tasks.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ListQuery {
    /// The queue.
    pub queue: String,
    /// Only tasks in this status (all statuses when `None`).
    pub status: Option<Status>,
    /// Only tasks whose latest error type matches this glob.
    pub error_type: Option<String>,
    /// Continue after this task (the `next_cursor` of the previous page).
    pub cursor: Option<TaskId>,
    /// Page size; 0 means [`MAX_PAGE`], and stores cap it there.
    pub limit: usize,
    /// Sort order; the cursor is stable under concurrent inserts either way.
    pub order: ListOrder,
}

/// Largest page a store returns.
pub const MAX_PAGE: usize = 1000;

/// One page of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The tasks, in the requested order.
    pub items: Vec<Envelope>,
    /// Where the next page starts, if there may be one.
    pub next_cursor: Option<TaskId>,
}

/// Which dead tasks to redrive.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RedriveRequest {
    /// The queue.
    pub queue: String,
    /// Only these ids (all dead tasks of the queue when `None`).
    pub ids: Option<Vec<TaskId>>,
    /// Only tasks whose latest error type matches this glob.
    pub error_type: Option<String>,
    /// At most this many (no limit when `None`).
    pub limit: Option<usize>,
    /// Report what would be redriven, change nothing.
    pub dry_run: bool,
}

/// Tasks of one queue per status.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueCounts {
    /// The queue.
    pub queue: String,
    /// PENDING tasks.
    pub pending: u64,
    /// IN_FLIGHT tasks.
    pub in_flight: u64,
    /// SUCCEEDED tasks not yet pruned.
    pub succeeded: u64,
    /// DEAD tasks (the DLQ).
    pub dead: u64,
}

/// How many messages wait in the broker queues behind one rdq queue: what a
/// store that cannot count tasks per status (a broker) can still report.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueDepths {
    /// The queue.
    pub queue: String,
    /// Messages ready for delivery in the work queue: PENDING tasks that are
    /// due (tasks waiting out a delay in a hold queue are not included).
    pub ready: u64,
    /// Messages in the dead-letter queue: DEAD tasks.
    pub dead: u64,
}

fn unsupported<T>(what: &str) -> Result<T, EngineError> {
    Err(EngineError::Unsupported(format!(
        "this store cannot {what}"
    )))
}

/// A place tasks live. See the module documentation.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// What this store can do beyond the work path.
    fn capabilities(&self) -> Capabilities;

    /// Wake-ups for work made due by other processes (a database's
    /// `LISTEN/NOTIFY`, say): an [`crate::Engine`] built on this store
    /// signals its idle workers through this `Notify`, and the store calls
    /// `notify_waiters` on it when another process commits claimable work.
    /// `None` (the default): only this process's own writes wake workers,
    /// and work from elsewhere waits for the workers' poll.
    fn work_signal(&self) -> Option<Arc<Notify>> {
        None
    }

    /// This process claims no more from `queue` (its worker is stopping):
    /// hand back whatever the store holds ready for claims here, so that it
    /// is neither stuck nor counted as a lapsed lease. Leases already handed
    /// out stay valid and are settled as usual. A later claim resumes.
    /// Stores that buffer nothing for claims (the default) do nothing.
    async fn stop_claiming(&self, queue: &str) {
        let _ = queue;
    }

    /// Stores new tasks, one result per task in order. Durable when it returns.
    async fn submit(&self, tasks: Vec<NewTask>) -> Vec<Result<Submitted, EngineError>>;

    /// Atomically takes up to `max` due PENDING tasks of `queue`, highest
    /// priority first, then earliest due, then oldest id, applying
    /// [`crate::machine::claim`] with `lease_ms`. No task is handed to two claimers.
    async fn claim(
        &self,
        queue: &str,
        max: usize,
        lease_ms: u64,
        now: Timestamp,
    ) -> Result<Vec<Envelope>, EngineError>;

    /// Applies compare-and-swap updates to in-flight tasks, one result per
    /// update: `LEASE_LOST` when the lease is no longer `expected`,
    /// `TASK_NOT_FOUND` when the task is gone. Durable when it returns.
    async fn settle(&self, updates: Vec<LeasedUpdate>) -> Vec<Result<(), EngineError>>;

    /// The in-flight envelope behind each `(id, token)` a worker presents,
    /// one result per item in order: `LEASE_LOST` when the task is no longer
    /// IN_FLIGHT under that claim, `TASK_NOT_FOUND` when it is gone. This is
    /// how a settle or extension by id and token finds the state the engine
    /// decides from, on every store: the default reads each task by id
    /// ([`Store::get`]); a store that cannot look tasks up (a broker) answers
    /// from the leases it holds.
    async fn leased(&self, leases: &[(TaskId, LeaseToken)]) -> Vec<Result<Envelope, EngineError>> {
        let mut out = Vec::with_capacity(leases.len());
        for &(id, token) in leases {
            out.push(under_lease(self.get(id).await, id, token));
        }
        out
    }

    /// Up to `limit` IN_FLIGHT tasks whose lease ended at or before `now`.
    async fn expired_leases(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Envelope>, EngineError>;

    /// The task with this id.
    async fn get(&self, id: TaskId) -> Result<Envelope, EngineError> {
        let _ = id;
        unsupported("look tasks up by id")
    }

    /// One page of a queue's tasks.
    async fn list(&self, query: &ListQuery) -> Result<Page, EngineError> {
        let _ = query;
        unsupported("list tasks")
    }

    /// Redrives matching DEAD tasks with [`crate::machine::redrive`]; returns
    /// their ids (what would be redriven, on a dry run).
    async fn redrive(
        &self,
        request: &RedriveRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError> {
        let _ = (request, now);
        unsupported("redrive")
    }

    /// Removes every task of `queue` in `status`; returns how many (would be) removed.
    async fn purge(&self, queue: &str, status: Status, dry_run: bool) -> Result<u64, EngineError> {
        let _ = (queue, status, dry_run);
        unsupported("purge")
    }

    /// Removes one task.
    async fn delete(&self, id: TaskId) -> Result<(), EngineError> {
        let _ = id;
        unsupported("delete tasks")
    }

    /// Tasks per status for every queue that has tasks or a stored policy.
    async fn counts(&self) -> Result<Vec<QueueCounts>, EngineError> {
        unsupported("count tasks")
    }

    /// Every queue this store knows of: those with tasks or a stored policy.
    /// The default takes them from [`Store::counts`]; a store that cannot
    /// count (a broker) lists the queues this process declared or configured.
    async fn queue_names(&self) -> Result<Vec<String>, EngineError> {
        Ok(self.counts().await?.into_iter().map(|c| c.queue).collect())
    }

    /// The depths of the broker queues behind `queue` (`None` when it has
    /// none), for stores that cannot [`Store::counts`] tasks per status.
    async fn depths(&self, queue: &str) -> Result<Option<QueueDepths>, EngineError> {
        let _ = queue;
        unsupported("report queue depths")
    }

    /// The stored configuration of `queue` (policy and sections), if one was stored.
    async fn get_config(&self, queue: &str) -> Result<Option<QueueConfig>, EngineError> {
        let _ = queue;
        unsupported("hold queue configuration")
    }

    /// Stores the configuration of `queue`, sections verbatim; later claims
    /// and settles see it.
    async fn put_config(&self, queue: &str, config: &QueueConfig) -> Result<(), EngineError> {
        let _ = (queue, config);
        unsupported("hold queue configuration")
    }

    /// Removes up to `limit` SUCCEEDED tasks of `queue` that finished before
    /// `finished_before`; returns how many.
    async fn prune_succeeded(
        &self,
        queue: &str,
        finished_before: Timestamp,
        limit: usize,
    ) -> Result<u64, EngineError> {
        let _ = (queue, finished_before, limit);
        unsupported("prune")
    }

    /// The secret lease tokens are keyed with ([`crate::lease_key`]), the
    /// same for every process on this store and across restarts, so a token
    /// handed out by one node settles on another. `None` (the default): the
    /// store keeps none and each process uses a random one, which suits
    /// stores whose leases die with the process anyway.
    async fn lease_secret(&self) -> Result<Option<[u8; 32]>, EngineError> {
        Ok(None)
    }

    /// Whether the store can serve and write now (what `/readyz` reports):
    /// `STORE_UNAVAILABLE` or `CORRUPT_STORE` with why not. Cheap: a health
    /// probe calls it every few seconds. The default says yes.
    async fn ready(&self) -> Result<(), EngineError> {
        Ok(())
    }

    /// The id of `queue`'s oldest PENDING task (lowest id: the earliest
    /// submitted), for the age the dashboard shows. The default lists one
    /// PENDING task oldest first; a database reads it from the claim index.
    async fn oldest_pending(&self, queue: &str) -> Result<Option<TaskId>, EngineError> {
        let page = self
            .list(&ListQuery {
                queue: queue.to_owned(),
                status: Some(Status::Pending),
                limit: 1,
                order: ListOrder::OldestFirst,
                ..ListQuery::default()
            })
            .await?;
        Ok(page.items.first().map(|env| env.id))
    }

    /// `queue`'s DLQ grouped by the latest error type: how many died of
    /// each and the newest of them, most frequent first (what the dashboard
    /// shows, `docs/dashboard.md`). The default pages the DLQ with
    /// [`Store::list`], which works on every store that lists; a database
    /// answers from one grouped query instead.
    async fn dead_groups(&self, queue: &str) -> Result<Vec<DeadGroup>, EngineError> {
        let mut groups: Vec<DeadGroup> = Vec::new();
        let mut cursor = None;
        loop {
            let page = self
                .list(&ListQuery {
                    queue: queue.to_owned(),
                    status: Some(Status::Dead),
                    cursor,
                    limit: MAX_PAGE,
                    order: ListOrder::NewestFirst,
                    ..ListQuery::default()
                })
                .await?;
            for env in page.items {
                let error_type = latest_error_type(&env).map(str::to_owned);
                match groups.iter_mut().find(|g| g.error_type == error_type) {
                    Some(g) => g.count += 1,
                    None => groups.push(DeadGroup {
                        error_type,
                        count: 1,
                        newest: env,
                    }),
                }
            }
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        sort_groups(&mut groups);
        Ok(groups)
    }
}

/// The dead tasks of one queue that share their latest error type.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadGroup {
    /// The latest error's type; `None` for tasks that died without one.
    pub error_type: Option<String>,
    /// How many dead tasks have it.
    pub count: u64,
    /// The newest of them (highest id).
    pub newest: Envelope,
}

/// The order [`Store::dead_groups`] answers in: most tasks first, then by
/// error type, so that equal counts keep one order.
pub fn sort_groups(groups: &mut [DeadGroup]) {
    groups.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.error_type.cmp(&b.error_type))
    });
}

/// When a finished task finished: its last attempt's end, else its creation.
pub fn finished_at(env: &Envelope) -> Timestamp {
    env.attempts
        .last()
        .and_then(|a| a.finished_at)
        .unwrap_or(env.created_at)
}

/// The claim counter a store's claim-order column holds for `env`: its
/// `claim_count`, or [`crate::machine::MAX_COUNT`] for a PENDING task that
/// no claim could count on (a counter at its maximum), which keeps such a
/// task out of every claim (`machine::claim_counters_have_room`).
pub fn claim_order_count(env: &Envelope) -> u32 {
    if env.status == Status::Pending && !crate::machine::claim_counters_have_room(env) {
        crate::machine::MAX_COUNT
    } else {
        env.claim_count
    }
}

/// The error type a DLQ filter matches: the latest recorded error's.
pub fn latest_error_type(env: &Envelope) -> Option<&str> {
    env.last_error().map(|e| e.error_type.as_str())
}

/// The task `get` answered, if it is still under `token`'s claim: what
/// [`Store::leased`] answers for one lease.
pub fn under_lease(
    got: Result<Envelope, EngineError>,
    id: TaskId,
    token: LeaseToken,
) -> Result<Envelope, EngineError> {
    match got {
        Ok(env) if LeaseToken::current(&env) == Some(token) => Ok(env),
        Ok(_) => Err(EngineError::LeaseLost(id)),
        Err(e) => Err(e),
    }
}
