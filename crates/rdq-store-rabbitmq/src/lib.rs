//! rdq's RabbitMQ store: the storage SPI on a broker, speaking queuey 1.1's
//! topology and wire format so rdq and queuey processes can share queues.
//!
//! ```text
//! let store = rdq_store_rabbitmq::RabbitStore::connect("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
//! let engine = rdq_engine::Engine::new(Arc::new(store), Arc::new(rdq_engine::SystemClock));
//! ```
//!
//! How the SPI maps onto AMQP (the full account is `docs/stores/rabbitmq.md`):
//!
//! - **submit** publishes the task (mandatory, persistent, publisher
//!   confirm) to `q`, or to a hold queue for a delay;
//! - **claim** takes deliveries a per-queue consumer (prefetch) received;
//!   the unacknowledged delivery is the lease, the task's `claim_count` its
//!   token, and this process's lease table the compare-and-swap;
//! - **settle** publishes the successor first (a retry or deferral to `q` or
//!   a hold queue, a dead task to `q.dead`) and acks the original only once
//!   the broker confirmed it, so a failure in between duplicates a task but
//!   never loses one; a success is the ack, answered once the broker has
//!   taken it (`acks`);
//! - **expired leases** are this process's leases past their deadline, plus
//!   every delivery that arrives with `redelivered = true`: its previous
//!   holder died without settling, so the engine closes that attempt as
//!   `LEASE_EXPIRED`, counted against `max_attempts`.
//!
//! What a broker cannot do is declared in [`Capabilities`](rdq_engine::Capabilities):
//! no lookup by id, no counts per status, no idempotency keys, no pruning
//! (nothing is kept after success). Listing, redrive, purge and delete work
//! on dead tasks by reading `q.dead`. Queue policy lives in the process.

#![forbid(unsafe_code)]

mod acks;
mod connection;
mod consumer;
mod core;
mod dlq;
mod error;
mod leases;
mod options;
mod queue;
mod store;
mod tls;
pub mod topology;
pub mod wire;

pub use error::RabbitError;
pub use options::{RabbitOptions, ReconnectPolicy};
pub use queue::QueueState;
pub use store::RabbitStore;

/// The queue-configuration section this store reads: `"queuey_compatible": true`
/// makes a queue speak queuey 1.1's wire format (`docs/stores/rabbitmq.md`).
pub const QUEUEY_SECTION: &str = "queuey_compatible";
