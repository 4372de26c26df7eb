//! rdq for Rust services: typed jobs, a producer, a worker pool and the
//! outcome contract, on any rdq store.
//!
//! Queues are an enum with `#[derive(Queues)]`; jobs are serde types with
//! `#[derive(Job)]`, whose names (the envelope's `handler_ref`) are checked at
//! compile time. A [`Producer<App>`](Producer) only enqueues, and a
//! [`Worker<App>`](Worker) only registers, jobs of application `App`.
//!
//! ```no_run
//! use std::time::Duration;
//! use rdq::prelude::*;
//!
//! #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
//! #[queues(prefix = "shop")]
//! enum AppQueues { Emails }
//!
//! #[derive(Debug, Serialize, Deserialize, Job)]
//! #[job(queue = AppQueues::Emails)]
//! struct SendEmail { to: String }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), rdq::Error> {
//!     let engine = rdq::open_embedded("./rdq-data")?;
//!     let producer = Producer::<AppQueues>::new(engine.clone());
//!     producer.enqueue(&SendEmail { to: "a@b.c".into() }).await?;
//!
//!     Worker::<AppQueues>::builder(engine)
//!         .handler_fn(|job: SendEmail, ctx: JobContext| async move {
//!             tracing::info!(to = %job.to, attempt = ctx.attempt, "sending");
//!             Ok::<(), JobError>(())
//!         })
//!         .build()?
//!         .run_until(async { tokio::signal::ctrl_c().await.ok(); }, Duration::from_secs(30))
//!         .await?;
//!     Ok(())
//! }
//! ```
//!
//! What a handler returns becomes an outcome through the classification
//! ladder of docs/outcomes.md ([`outcome`]): an [`OutcomeMapper`] on the queue, then the
//! [`permanent`] / [`retryable`] / [`defer`] wrappers, then [`Classifier`]s,
//! then the queue's globs, then retryable. `docs/sdk.md` is the guide;
//! `docs/queuey-migration.md` maps every queuey 1.1 feature to this crate.
//! [`testing::TestBackend`] runs all of it in virtual time, with no service.

#![forbid(unsafe_code)]

// Lets the derives' `::rdq::…` paths resolve inside this crate's own tests.
extern crate self as rdq;

mod context;
mod dead_letter;
mod dispatch;
mod error;
mod handler;
mod job;
mod job_error;
pub mod outcome;
mod producer;
mod retry;
mod schedules;
mod stores;
pub mod testing;
mod worker;

pub use context::JobContext;
pub use dead_letter::{DeadLetter, DeadLetterCause, DeadLetterHook};
pub use error::Error;
pub use handler::{FnHandler, JobHandler};
pub use job::{Job, QueueSet};
pub use job_error::{Forced, JobError, defer, permanent, retryable, throttle};
pub use outcome::{Classifier, Outcome, OutcomeMapper, Returned};
pub use producer::{Batch, EnqueueOptions, Enqueued, Producer};
pub use rdq_engine::policy::Classification;
pub use rdq_engine::unique::{Hold, OnConflict, Scope as UniqueScope, UniqueRequest};
pub use rdq_engine::{Backoff, Engine, QueuePolicy, VersionMismatch};
pub use rdq_envelope::error_types;
pub use rdq_envelope::{Envelope, ErrorInfo, TaskId, Timestamp};
pub use rdq_macros::{Job, Queues};
pub use rdq_runtime::{PrunerConfig, ReaperConfig, SchedulerConfig};
pub use rdq_schedule::{CatchUp, Overlap, Schedule, Spec, TaskTemplate};
pub use retry::RetryPolicy;
#[cfg(feature = "embedded")]
pub use stores::open_embedded;
pub use stores::open_memory;
pub use worker::{Worker, WorkerBuilder, WorkerHandle, WorkerReport};

/// Everything a typical application names, in one import, plus serde's
/// derives (the calling crate still needs `serde` in its `Cargo.toml`).
pub mod prelude {
    #[doc(no_inline)]
    pub use crate::{
        Classifier, DeadLetter, DeadLetterCause, EnqueueOptions, Job, JobContext, JobError,
        JobHandler, Outcome, OutcomeMapper, Producer, QueueSet, Queues, RetryPolicy, Returned,
        Worker,
    };
    #[doc(no_inline)]
    pub use serde::{Deserialize, Serialize};
}
