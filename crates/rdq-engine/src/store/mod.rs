//! The storage SPI: the work path every store implements ([`Store`]), the
//! claim request it answers ([`ClaimRequest`]), and the extension traits by
//! which a store offers what it truly can beyond the work path ([`admin`]).
//!
//! Stores persist and schedule; they never see retry policy. The work path is
//! small and hot (submit, claim, settle, extend and expire through
//! compare-and-swap updates, readiness). Listing, counting, DLQ paging,
//! redrive, removal, pruning, queue configuration and the dashboard's
//! insights are extension traits ([`TaskLookup`], [`TaskListing`],
//! [`TaskCounts`], [`QueueDepthsSource`], [`Redrive`], [`Removal`],
//! [`Pruning`], [`ConfigStore`]), reached through [`Store`]'s `as_…`
//! accessors: a broker implements the work path plus what it can, and the
//! type system says so. Nothing above the engine calls a store: front ends
//! go through [`crate::Engine`], which answers `UNSUPPORTED` for an
//! extension a store does not offer.
//!
//! Rules every store follows (the compliance kit checks them):
//! - a submit without an idempotency key whose id already exists is refused
//!   with `INVALID_ARGUMENT`; `Submitted::Existing` carries the task's current state;
//! - a claim decides every limit it carries in its atomic step, and a part
//!   of a [`ClaimRequest`] the store does not honour is `UNSUPPORTED`;
//! - updates in one `settle` batch apply in order, so a repeated update of the
//!   same lease succeeds once and then gets `LEASE_LOST`;
//! - `ListQuery::limit == 0` means the store's largest page ([`MAX_PAGE`]); an
//!   invalid glob in a filter is `INVALID_ARGUMENT`;
//! - redrive by `ids` skips ids that are not dead tasks of that queue and
//!   ignores duplicates;
//! - `counts` lists a queue while it has tasks or a stored policy.

pub mod admin;
mod claim;
pub mod schedules;
pub mod sources;

use std::sync::Arc;

use async_trait::async_trait;
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use tokio::sync::Notify;

use crate::error::EngineError;
use crate::machine::LeaseToken;

pub use admin::{
    Cancel, CancelRequest, ConfigStore, DeadGroup, DeadReasonFilter, ListOrder, ListQuery,
    MAX_PAGE, Page, Pruning, QueueCounts, QueueDepths, QueueDepthsSource, ReasonCount, Redrive,
    RedriveRequest, Removal, TaskCounts, TaskListing, TaskLookup, UNRECORDED_REASON, reason_code,
    sort_groups,
};
pub use claim::ClaimRequest;
pub use schedules::{
    FireOutcome, FireRequest, ScheduleOwner, SchedulePut, Schedules, StoredSchedule,
};
pub use sources::{IngestOutcome, IngestRequest, SourceCursor, SourceCursors};

/// What a store's work path honours, as the store declares it. The
/// compliance kit checks each declaration: what is declared works, what is
/// not is refused with `UNSUPPORTED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCapabilities {
    /// `submit` honours idempotency keys.
    pub idempotent_submit: bool,
    /// `claim` honours [`ClaimRequest::max_in_flight`]: a global concurrency
    /// limit decided in the claim's atomic step, across every process on
    /// the store.
    pub claim_max_in_flight: bool,
    /// `claim` honours [`ClaimRequest::flow`] (rates, per-key concurrency
    /// and rates, weighted fairness) in its atomic step across every process
    /// on the store, and the store offers [`Store::throttle`] and
    /// [`Store::flow_status`].
    pub claim_flow: bool,
    /// Every task ends once, across crashes of the store and network faults
    /// between it and rdq: a settle the store acknowledged is never undone,
    /// and no acknowledged submit exists twice. Not a call a store can
    /// refuse but a guarantee: the fault suite (docs/reliability.md) holds
    /// every store that declares it to zero tasks ending twice. A broker
    /// cannot declare it (RabbitMQ: an AMQP ack has no answer, and a
    /// publish whose confirm was lost is sent again): there a task ends
    /// at least once.
    pub ends_once: bool,
    /// `submit` honours [`NewTask::unique`] (docs/uniqueness.md): one
    /// holder per slot, decided in the store's atomic submit step; redrive
    /// and import refuse a task whose slot another task holds. A store
    /// without it refuses a unique submit with `UNSUPPORTED`.
    pub unique: bool,
}

/// Everything a store can do, as [`crate::Engine::capabilities`] reports it:
/// the work path's declarations ([`WorkCapabilities`]) and which extension
/// traits the store offers. What `GET /v1/capabilities` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// [`TaskLookup`]: `get` finds any task by id.
    pub get_by_id: bool,
    /// [`TaskListing`]: pages tasks of a queue by status (DLQ browsing).
    pub list: bool,
    /// [`Redrive`]: sends dead tasks back.
    pub redrive: bool,
    /// [`Cancel`]: cancels PENDING tasks.
    pub cancel: bool,
    /// [`Removal`]: `purge` and `delete` remove tasks.
    pub purge: bool,
    /// [`TaskCounts`]: tasks per queue and status.
    pub counts: bool,
    /// [`ConfigStore`]: queue policy is held by the store (else it comes
    /// from the process configuration).
    pub queue_config: bool,
    /// `submit` honours idempotency keys.
    pub idempotent_submit: bool,
    /// [`Pruning`]: old SUCCEEDED tasks are removed.
    pub prune: bool,
    /// [`QueueDepthsSource`]: how many messages wait in the broker queues
    /// behind a queue: what a store that cannot count tasks per status offers.
    pub depths: bool,
    /// Queue configuration is kept by this process only
    /// ([`ConfigStore::process_local`]): other processes on the same store
    /// neither see nor share it, and it is lost at restart. A broker holds
    /// messages, not settings.
    pub config_local: bool,
    /// `claim` honours a global concurrency limit ([`ClaimRequest::max_in_flight`]).
    pub claim_max_in_flight: bool,
    /// `claim` honours rates, per-key limits and fairness
    /// ([`ClaimRequest::flow`]) across every process on the store; throttles
    /// and flow status are kept with the store.
    pub claim_flow: bool,
    /// [`Schedules`]: periodic schedules stored with the tasks, each due
    /// time fired once across every process on the store.
    pub schedules: bool,
    /// [`WorkCapabilities::ends_once`]: every task ends once, across store
    /// crashes and network faults.
    pub ends_once: bool,
    /// [`WorkCapabilities::unique`]: unique keys with holds.
    pub unique: bool,
    /// [`SourceCursors`]: sources' positions kept with the tasks, moved in
    /// the same atomic step that submits their records' tasks.
    pub source_cursors: bool,
}

impl Capabilities {
    /// What `store` offers: its work path's declarations and its extensions.
    pub fn of(store: &dyn Store) -> Self {
        let work = store.capabilities();
        Self {
            get_by_id: store.as_lookup().is_some(),
            list: store.as_listing().is_some(),
            redrive: store.as_redrive().is_some(),
            cancel: store.as_cancel().is_some(),
            purge: store.as_removal().is_some(),
            counts: store.as_counts().is_some(),
            queue_config: store.as_config_store().is_some(),
            idempotent_submit: work.idempotent_submit,
            prune: store.as_pruning().is_some(),
            depths: store.as_depths().is_some(),
            config_local: store
                .as_config_store()
                .is_some_and(ConfigStore::process_local),
            claim_max_in_flight: work.claim_max_in_flight,
            claim_flow: work.claim_flow,
            schedules: store.as_schedules().is_some(),
            ends_once: work.ends_once,
            unique: work.unique,
            source_cursors: store.as_source_cursors().is_some(),
        }
    }

    /// The capability names, each with whether this store has it: what
    /// `GET /v1/capabilities` and the docs' tables show.
    pub fn named(&self) -> [(&'static str, bool); 17] {
        [
            ("get_by_id", self.get_by_id),
            ("list", self.list),
            ("redrive", self.redrive),
            ("cancel", self.cancel),
            ("purge", self.purge),
            ("counts", self.counts),
            ("depths", self.depths),
            ("queue_config", self.queue_config),
            ("config_local", self.config_local),
            ("idempotent_submit", self.idempotent_submit),
            ("prune", self.prune),
            ("claim_max_in_flight", self.claim_max_in_flight),
            ("claim_flow", self.claim_flow),
            ("schedules", self.schedules),
            ("ends_once", self.ends_once),
            ("unique", self.unique),
            ("source_cursors", self.source_cursors),
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
    /// The unique slot the task takes, and what a conflict does
    /// ([`crate::unique`]): the store looks up the slot's holder inside its
    /// atomic submit step and does what [`crate::unique::decide`] says.
    pub unique: Option<crate::unique::UniqueSlot>,
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

pub(crate) fn unsupported<T>(what: &str) -> Result<T, EngineError> {
    Err(EngineError::Unsupported(format!(
        "this store cannot {what}"
    )))
}

/// A place tasks live: the work path every store implements. See the
/// module documentation; what a store can do beyond the work path it offers
/// through the extension traits in [`admin`], each reached through an
/// `as_…` accessor here that answers `None` unless the store implements it.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// What this store's work path honours (idempotency keys, the parts of a
    /// [`ClaimRequest`]). Everything else is said by which extensions it
    /// offers; [`crate::Engine::capabilities`] puts both together.
    fn capabilities(&self) -> WorkCapabilities;

    /// Wake-ups for work made due by other processes (a database's
    /// `LISTEN/NOTIFY`, say): an [`crate::Engine`] built on this store
    /// signals its idle workers through this `Notify`, and the store calls
    /// `notify_waiters` on it when another process commits claimable work.
    /// `None` (the default): only this process's own writes wake workers,
    /// and work from elsewhere waits for the workers' poll.
    fn work_signal(&self) -> Option<Arc<Notify>> {
        None
    }

    /// Where this store relays the running tasks other processes asked to
    /// stop ([`Store::announce_cancel`] elsewhere): an [`crate::Engine`]
    /// built on it sends its own requests through the same channel, so a
    /// subscriber ([`crate::Engine::cancel_requests`]) hears every one.
    /// `None` (the default): a store only this process uses.
    fn cancel_signal(&self) -> Option<tokio::sync::broadcast::Sender<TaskId>> {
        None
    }

    /// Tells the other processes on this store that these running tasks
    /// were asked to stop (a database's `NOTIFY`, a `PUBLISH`), so whoever
    /// holds their leases learns of it at once instead of at its next
    /// lease extension. Best effort; the default does nothing.
    async fn announce_cancel(&self, ids: &[TaskId]) {
        let _ = ids;
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

    /// Atomically takes up to `request.max` due PENDING tasks of
    /// `request.queue`, highest priority first, then earliest due, then
    /// oldest id, applying [`crate::machine::claim`] with `request.lease_ms`.
    /// No task is handed to two claimers. Every limit the request carries is
    /// decided in the same atomic step; a part of the request this store
    /// does not honour ([`WorkCapabilities`]) is refused with `UNSUPPORTED`
    /// before anything is claimed, never ignored ([`ClaimRequest::refuse_unsupported`]).
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Envelope>, EngineError>;

    /// Applies compare-and-swap updates to in-flight tasks, one result per
    /// update: `LEASE_LOST` when the lease is no longer `expected`,
    /// `TASK_NOT_FOUND` when the task is gone. Durable when it returns.
    async fn settle(&self, updates: Vec<LeasedUpdate>) -> Vec<Result<(), EngineError>>;

    /// The in-flight envelope behind each `(id, token)` a worker presents,
    /// one result per item in order: `LEASE_LOST` when the task is no longer
    /// IN_FLIGHT under that claim, `TASK_NOT_FOUND` when it is gone. This is
    /// how a settle or extension by id and token finds the state the engine
    /// decides from, on every store: the default reads each task by id
    /// ([`TaskLookup::get`]); a store that cannot look tasks up (a broker)
    /// answers from the leases it holds.
    async fn leased(&self, leases: &[(TaskId, LeaseToken)]) -> Vec<Result<Envelope, EngineError>> {
        let mut out = Vec::with_capacity(leases.len());
        for &(id, token) in leases {
            let got = match self.as_lookup() {
                Some(lookup) => lookup.get(id).await,
                None => unsupported("look tasks up by id"),
            };
            out.push(under_lease(got, id, token));
        }
        out
    }

    /// Throttles `queue`'s flow key `key` (the whole queue with `None`)
    /// until `until` for every process on the store: claims pass over its
    /// tasks until then (back-pressure from a target). A later throttle
    /// never shortens an earlier one. Stores that declare
    /// [`WorkCapabilities::claim_flow`] keep it in the queue's
    /// [`crate::FlowLedger`]; the default is `UNSUPPORTED`.
    async fn throttle(
        &self,
        queue: &str,
        key: Option<&str>,
        until: Timestamp,
    ) -> Result<(), EngineError> {
        let _ = (queue, key, until);
        unsupported("throttle a flow key")
    }

    /// `queue`'s flow under `flow` at `now` ([`crate::FlowLedger::status`]),
    /// with its IN_FLIGHT count per flow key. Stores that declare
    /// [`WorkCapabilities::claim_flow`] answer it; the default is
    /// `UNSUPPORTED`.
    async fn flow_status(
        &self,
        queue: &str,
        flow: &crate::FlowPolicy,
        now: Timestamp,
    ) -> Result<crate::FlowStatus, EngineError> {
        let _ = (queue, flow, now);
        unsupported("report flow status")
    }

    /// Up to `limit` IN_FLIGHT tasks whose lease ended at or before `now`.
    async fn expired_leases(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Envelope>, EngineError>;

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

    /// Finding any task by id, if this store can.
    fn as_lookup(&self) -> Option<&dyn TaskLookup> {
        None
    }

    /// Paging a queue's tasks by status (DLQ browsing), if this store can.
    fn as_listing(&self) -> Option<&dyn TaskListing> {
        None
    }

    /// Counting tasks per queue and status, if this store can.
    fn as_counts(&self) -> Option<&dyn TaskCounts> {
        None
    }

    /// Broker queue depths, for a store that cannot count tasks per status.
    fn as_depths(&self) -> Option<&dyn QueueDepthsSource> {
        None
    }

    /// Sending dead tasks back, if this store can.
    fn as_redrive(&self) -> Option<&dyn Redrive> {
        None
    }

    /// Cancelling PENDING tasks, if this store can.
    fn as_cancel(&self) -> Option<&dyn Cancel> {
        None
    }

    /// Removing tasks (purge, delete), if this store can.
    fn as_removal(&self) -> Option<&dyn Removal> {
        None
    }

    /// Removing old SUCCEEDED tasks, if this store can.
    fn as_pruning(&self) -> Option<&dyn Pruning> {
        None
    }

    /// Holding queue configuration, if this store can (else it comes from
    /// the process's configuration).
    fn as_config_store(&self) -> Option<&dyn ConfigStore> {
        None
    }

    /// Storing schedules and firing them atomically, if this store can.
    fn as_schedules(&self) -> Option<&dyn Schedules> {
        None
    }

    /// Keeping sources' cursors with the tasks, if this store can.
    fn as_source_cursors(&self) -> Option<&dyn SourceCursors> {
        None
    }
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

/// Writes, inside an `impl Store for …` block, the `as_…` accessors of the
/// extension traits the store implements, each answering `Some(self)`:
///
/// ```text
/// impl Store for MyStore {
///     /* the work path … */
///     rdq_engine::offer_extensions!(TaskLookup, TaskListing, Redrive);
/// }
/// ```
#[macro_export]
macro_rules! offer_extensions {
    ($($extension:ident),* $(,)?) => {
        $( $crate::__offer_extension!($extension); )*
    };
}

/// One accessor of [`offer_extensions!`]. Not public API.
#[doc(hidden)]
#[macro_export]
macro_rules! __offer_extension {
    (TaskLookup) => {
        fn as_lookup(&self) -> Option<&dyn $crate::TaskLookup> {
            Some(self)
        }
    };
    (TaskListing) => {
        fn as_listing(&self) -> Option<&dyn $crate::TaskListing> {
            Some(self)
        }
    };
    (TaskCounts) => {
        fn as_counts(&self) -> Option<&dyn $crate::TaskCounts> {
            Some(self)
        }
    };
    (QueueDepthsSource) => {
        fn as_depths(&self) -> Option<&dyn $crate::QueueDepthsSource> {
            Some(self)
        }
    };
    (Redrive) => {
        fn as_redrive(&self) -> Option<&dyn $crate::Redrive> {
            Some(self)
        }
    };
    (Removal) => {
        fn as_removal(&self) -> Option<&dyn $crate::Removal> {
            Some(self)
        }
    };
    (Cancel) => {
        fn as_cancel(&self) -> Option<&dyn $crate::Cancel> {
            Some(self)
        }
    };
    (Pruning) => {
        fn as_pruning(&self) -> Option<&dyn $crate::Pruning> {
            Some(self)
        }
    };
    (ConfigStore) => {
        fn as_config_store(&self) -> Option<&dyn $crate::ConfigStore> {
            Some(self)
        }
    };
    (Schedules) => {
        fn as_schedules(&self) -> Option<&dyn $crate::Schedules> {
            Some(self)
        }
    };
    (SourceCursors) => {
        fn as_source_cursors(&self) -> Option<&dyn $crate::SourceCursors> {
            Some(self)
        }
    };
}
