//! rdq's engine: the part that decides.
//!
//! - [`policy`]: a queue's live policy and its defaults;
//! - [`flow`]: rate, concurrency and fairness limits, and the selection every
//!   store runs inside its atomic claim step;
//! - [`machine`]: every task transition as a pure function
//!   `(envelope, event, policy, now) -> Result<envelope, error>`;
//! - [`store`]: the storage SPI: the work path every store implements, the
//!   claim request, and extension traits for what a store can do beyond it;
//! - [`lease_key`]: lease tokens keyed with the store's secret, so only the holder can present one;
//! - [`batch`]: group commit for stores that write over a network;
//! - [`Engine`]: the machine and policy bound to a store and a [`Clock`], the
//!   one entry point the SDK, server and CLI use; it also stores periodic
//!   schedules and fires their due times (`Engine::fire_due`).
//!
//! Stores persist what the engine decided; no store ever sees retry policy.

#![forbid(unsafe_code)]

pub mod batch;
mod clock;
pub mod config;
mod engine;
mod error;
pub mod flow;
pub mod glob;
pub mod lease_key;
mod local;
pub mod machine;
pub mod policy;
mod schedules;
mod sources;
pub mod store;
pub mod unique;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::QueueConfig;
pub use engine::{
    CancelFilter, Cancelled, Claimed, Engine, SettleRequest, SubmitRequest, is_prunable,
};
pub use error::EngineError;
pub use flow::{FlowLedger, FlowPolicy, FlowStatus};
pub use lease_key::{LeaseKey, TokenMismatch};
pub use machine::{FailureKind, LeaseToken, RetryOverride, Settlement};
pub use policy::{Backoff, QueuePolicy, VersionMismatch};
pub use schedules::{
    FIRE_BATCH, FireReport, ScheduleFailure, ScheduleFired, ScheduleInfo, ScheduleSkipped,
};
pub use sources::{BY_SOURCE, RefusedRecord, SOURCE_HEADER};
pub use store::{
    Cancel, CancelRequest, Capabilities, ClaimRequest, ConfigStore, DeadGroup, DeadReasonFilter,
    FireOutcome, FireRequest, IngestOutcome, IngestRequest, LeasedUpdate, ListOrder, ListQuery,
    NewTask, Page, Pruning, QueueCounts, QueueDepths, QueueDepthsSource, ReasonCount, Redrive,
    RedriveRequest, Removal, ScheduleOwner, SchedulePut, Schedules, SourceCursor, SourceCursors,
    Store, StoredSchedule, Submitted, TaskCounts, TaskListing, TaskLookup, WorkCapabilities,
};
