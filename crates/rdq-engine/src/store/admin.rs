//! What a store can do beyond the work path, one extension trait per
//! capability, as apalis's backend traits are: a store implements the ones
//! it truly can and returns itself from the matching `as_…` accessor of
//! [`Store`](super::Store). The defaults here are honest: they are built
//! only from the trait's own required methods, never on a guess.

use async_trait::async_trait;
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};

use crate::config::QueueConfig;
use crate::error::EngineError;
use crate::store::latest_error_type;

/// Finds any task by id.
#[async_trait]
pub trait TaskLookup: Send + Sync {
    /// The task with this id: `TASK_NOT_FOUND` when there is none.
    async fn get(&self, id: TaskId) -> Result<Envelope, EngineError>;
}

/// Pages a queue's tasks, and the dashboard's views built on paging.
#[async_trait]
pub trait TaskListing: Send + Sync {
    /// One page of a queue's tasks.
    async fn list(&self, query: &ListQuery) -> Result<Page, EngineError>;

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
    /// [`TaskListing::list`]; a database answers from one grouped query.
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

/// Counts tasks per queue and status.
#[async_trait]
pub trait TaskCounts: Send + Sync {
    /// Tasks per status for every queue that has tasks or a stored policy.
    async fn counts(&self) -> Result<Vec<QueueCounts>, EngineError>;
}

/// Broker queue depths: what a store that cannot count tasks per status
/// (a broker) reports instead, with the queues it knows of.
#[async_trait]
pub trait QueueDepthsSource: Send + Sync {
    /// The depths of the broker queues behind `queue` (`None` when it has none).
    async fn depths(&self, queue: &str) -> Result<Option<QueueDepths>, EngineError>;

    /// The queues this process declared or configured.
    async fn queue_names(&self) -> Result<Vec<String>, EngineError>;
}

/// Sends dead tasks back.
#[async_trait]
pub trait Redrive: Send + Sync {
    /// Redrives matching DEAD tasks with [`crate::machine::redrive`]; returns
    /// their ids (what would be redriven, on a dry run).
    async fn redrive(
        &self,
        request: &RedriveRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError>;
}

/// Cancels PENDING tasks.
#[async_trait]
pub trait Cancel: Send + Sync {
    /// Cancels the tasks of `request.queue` among `request.ids` that are
    /// PENDING, with [`crate::machine::cancel`], each in one atomic step
    /// against concurrent claims (a task claimed first is not cancelled);
    /// returns the ids cancelled (that would be, on a dry run), in
    /// `request.ids` order.
    async fn cancel_pending(
        &self,
        request: &CancelRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError>;
}

/// Which PENDING tasks to cancel, by id (the engine resolves filters).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CancelRequest {
    /// The queue.
    pub queue: String,
    /// The tasks.
    pub ids: Vec<TaskId>,
    /// Who cancels: the dead reason's `by`.
    pub by: String,
    /// Why, for people: the dead reason's `message`.
    pub message: String,
    /// Report what would be cancelled, change nothing.
    pub dry_run: bool,
}

/// Removes tasks.
#[async_trait]
pub trait Removal: Send + Sync {
    /// Removes every task of `queue` in `status`; returns how many (would be) removed.
    async fn purge(&self, queue: &str, status: Status, dry_run: bool) -> Result<u64, EngineError>;

    /// Removes one task; removing a task that does not exist is not an error.
    async fn delete(&self, id: TaskId) -> Result<(), EngineError>;
}

/// Removes old SUCCEEDED tasks (the retention pruner's store side).
#[async_trait]
pub trait Pruning: Send + Sync {
    /// Removes up to `limit` SUCCEEDED tasks of `queue` that finished before
    /// `finished_before`; returns how many.
    async fn prune_succeeded(
        &self,
        queue: &str,
        finished_before: Timestamp,
        limit: usize,
    ) -> Result<u64, EngineError>;
}

/// Holds queue configuration (policy and sections) for every process on
/// the store.
#[async_trait]
pub trait ConfigStore: Send + Sync {
    /// The stored configuration of `queue` (policy and sections), if one was stored.
    async fn get_config(&self, queue: &str) -> Result<Option<QueueConfig>, EngineError>;

    /// Stores the configuration of `queue`, sections verbatim; later claims
    /// and settles see it.
    async fn put_config(&self, queue: &str, config: &QueueConfig) -> Result<(), EngineError>;

    /// True when the configuration is kept by this process only: other
    /// processes on the same store neither see nor share it, and it is lost
    /// at restart (a broker holds messages, not settings).
    fn process_local(&self) -> bool {
        false
    }
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
    /// Only DEAD tasks with this reason ([`DeadReasonFilter`]). This and
    /// the two filters below are applied by the engine; stores never see
    /// them.
    pub reason: Option<DeadReasonFilter>,
    /// Only tasks of this handler.
    pub handler_ref: Option<String>,
    /// Only tasks with every one of these headers, value for value.
    pub headers: std::collections::BTreeMap<String, String>,
    /// Continue after this task (the `next_cursor` of the previous page).
    pub cursor: Option<TaskId>,
    /// Page size; 0 means [`MAX_PAGE`], and stores cap it there.
    pub limit: usize,
    /// Sort order; the cursor is stable under concurrent inserts either way.
    pub order: ListOrder,
}

impl ListQuery {
    /// True when the query has a filter the engine applies
    /// ([`ListQuery::matches`]) rather than the store.
    pub fn filters_in_engine(&self) -> bool {
        self.reason.is_some() || self.handler_ref.is_some() || !self.headers.is_empty()
    }

    /// Whether `env` passes the filters the engine applies.
    pub fn matches(&self, env: &Envelope) -> bool {
        self.reason
            .as_ref()
            .is_none_or(|r| env.status == Status::Dead && r.matches(env))
            && self
                .handler_ref
                .as_ref()
                .is_none_or(|h| *h == env.handler_ref)
            && self
                .headers
                .iter()
                .all(|(k, v)| env.headers.get(k) == Some(v))
    }
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
    /// Only tasks with this reason; the engine applies it, stores never
    /// see it.
    pub reason: Option<DeadReasonFilter>,
    /// At most this many (no limit when `None`).
    pub limit: Option<usize>,
    /// Report what would be redriven, change nothing.
    pub dry_run: bool,
}

/// A filter on why a task is DEAD: one of the codes rdq writes
/// ([`rdq_envelope::dead_reasons`]), or `UNRECORDED` for DEAD tasks with no
/// reason (dead before rdq recorded reasons, or imported so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadReasonFilter(String);

/// The filter value for DEAD tasks without a recorded reason.
pub const UNRECORDED_REASON: &str = "UNRECORDED";

impl DeadReasonFilter {
    /// The filter for `code`; `INVALID_ARGUMENT` for a code rdq does not
    /// write (a typo would otherwise match nothing, silently).
    pub fn parse(code: &str) -> Result<Self, EngineError> {
        if code == UNRECORDED_REASON || rdq_envelope::dead_reasons::ALL.contains(&code) {
            Ok(Self(code.to_owned()))
        } else {
            Err(EngineError::InvalidArgument(format!(
                "reason {code:?} is not one of {}, {UNRECORDED_REASON}",
                rdq_envelope::dead_reasons::ALL.join(", ")
            )))
        }
    }

    /// The code it matches.
    pub fn code(&self) -> &str {
        &self.0
    }

    /// True when `env` is DEAD for this reason.
    pub fn matches(&self, env: &Envelope) -> bool {
        reason_code(env) == self.0
    }
}

/// The reason code of a DEAD task, [`UNRECORDED_REASON`] when it has none.
pub fn reason_code(env: &Envelope) -> &str {
    env.dead_reason
        .as_ref()
        .map_or(UNRECORDED_REASON, |r| r.code.as_str())
}

/// How many of a queue's dead tasks died for one reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReasonCount {
    /// The reason code ([`UNRECORDED_REASON`] for tasks without one).
    pub reason: String,
    /// How many.
    pub count: u64,
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

/// The order [`TaskListing::dead_groups`] answers in: most tasks first, then by
/// error type, so that equal counts keep one order.
pub fn sort_groups(groups: &mut [DeadGroup]) {
    groups.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.error_type.cmp(&b.error_type))
    });
}
