//! rdq's sources (docs/sources.md): tasks from the streams and queues a
//! company already has, each record exactly one task.
//!
//! A source reads a Kafka topic through a consumer group, a NATS JetStream
//! stream through a durable pull consumer, or an SQS queue, and turns each
//! record into a task on one queue for one handler: the record's bytes as
//! payload, its headers and key as task headers (as configured), and its
//! locator (`kafka://<cluster>/<topic>/<partition>/<offset>`,
//! `nats://<stream>/<sequence>`, `sqs://<queue-url>/<message-id>`) as the
//! system header `rdq.source` and the task's idempotency key.
//!
//! The source's own position (Kafka's committed offset, the JetStream
//! acknowledgement, the SQS delete) moves only after the task is durably
//! stored. On a store that keeps cursors (capability `source_cursors`), a
//! Kafka or JetStream source's position is also kept in the store, moved in
//! the same atomic step that stores the run's tasks (the `ingest` module):
//! the store is where a source resumes, so even a consumer-group reset or
//! a replay after the idempotency keys were pruned makes no second task. On
//! a store that keeps no idempotency keys (RabbitMQ) a source delivers at
//! least once (docs/sources.md).
//!
//! A record that cannot be a task (too large for the queue, a header that
//! is not UTF-8 or is reserved) becomes a DEAD task with reason
//! `UNDECODABLE_SOURCE` and its bytes; its partition moves on. A source
//! stops reading while its queue holds more PENDING tasks than its
//! high-water mark, and reads again below its low-water mark.

#![forbid(unsafe_code)]
// Built without any reader (a front end that only shows sources' status,
// as rdq-app does), the readers' shared machinery is unused.
#![cfg_attr(
    not(any(feature = "kafka", feature = "nats", feature = "sqs")),
    allow(dead_code)
)]

pub mod config;
mod ingest;
pub mod status;

#[cfg(feature = "kafka")]
mod kafka;
#[cfg(feature = "nats")]
mod nats;
#[cfg(feature = "sqs")]
mod sqs;

use std::sync::Arc;
use std::time::Duration;

use rdq_engine::{Engine, EngineError};
use rdq_runtime::Shutdown;
use tokio::task::JoinHandle;
use tracing::{info, warn};

pub use config::{HeaderSelection, KafkaConfig, Kind, NatsConfig, SourceConfig, SqsConfig};
pub use ingest::Record;
pub use status::{PartitionStatus, Registry, SourceState, SourceStatus};

/// What can go wrong with a source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The configuration is wrong (found before connecting).
    #[error("source {source_name}: {why}")]
    Config {
        /// The source's name.
        source_name: String,
        /// What is wrong.
        why: String,
    },
    /// The source's server refused or failed (connect, read, acknowledge).
    #[error("source {source_name}: {why}")]
    Remote {
        /// The source's name.
        source_name: String,
        /// What the server said.
        why: String,
    },
    /// The store failed.
    #[error("source {source_name}: the store: {error}")]
    Store {
        /// The source's name.
        source_name: String,
        /// The engine's error.
        error: EngineError,
    },
}

impl SourceError {
    /// A stable code: `SOURCE_CONFIG`, `SOURCE_UNAVAILABLE` or the store's.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Config { .. } => "SOURCE_CONFIG",
            Self::Remote { .. } => "SOURCE_UNAVAILABLE",
            Self::Store { error, .. } => error.code(),
        }
    }
}

/// The running sources of a process (their status is in the [`Registry`]
/// they were started with).
#[derive(Debug)]
pub struct Sources {
    tasks: Vec<JoinHandle<()>>,
}

impl Sources {
    /// Waits until every source has stopped (after shutdown).
    pub async fn join(self) {
        for task in self.tasks {
            if let Err(e) = task.await {
                warn!(error = %e, "a source's task ended abnormally");
            }
        }
    }
}

/// Checks `configs`, then starts each source on the current runtime,
/// reporting to `registry`: each runs until `stop`, trying again after every
/// error (the error is in its status meanwhile). A configuration mistake is
/// refused before anything starts. A queue the store does not know yet is
/// created by the first record, as a submit creates it.
pub fn start(
    engine: &Engine,
    configs: &[SourceConfig],
    registry: &Registry,
    stop: &Shutdown,
) -> Result<Sources, SourceError> {
    config::validate_all(configs)?;
    let mut tasks = Vec::new();
    for config in configs {
        let kind = config.kind()?;
        registry.add(&config.name, kind, &config.queue);
        tasks.push(tokio::spawn(run(
            engine.clone(),
            Arc::new(config.clone()),
            registry.clone(),
            stop.clone(),
        )));
    }
    Ok(Sources { tasks })
}

/// Runs one source until `stop`, starting it again after every error.
async fn run(engine: Engine, config: Arc<SourceConfig>, registry: Registry, mut stop: Shutdown) {
    let mut failures = 0u32;
    while !stop.is_triggered() {
        let ran = run_once(&engine, &config, &registry, &stop).await;
        if stop.is_triggered() {
            break;
        }
        match ran {
            Ok(()) => failures = 0,
            Err(e) => {
                // A start that got to reading counts its error as the first.
                let read = registry
                    .get(&config.name)
                    .is_some_and(|s| matches!(s.state, SourceState::Running | SourceState::Paused));
                if read {
                    failures = 0;
                }
                warn!(source = %config.name, code = e.code(), error = %e, "the source failed; it tries again");
                registry.error(&config.name, &e.to_string(), engine.now().unix_ms());
                failures = failures.saturating_add(1);
            }
        }
        tokio::select! {
            () = tokio::time::sleep(config.backoff(failures.saturating_sub(1))) => {}
            () = stop.wait() => {}
        }
    }
    registry.update(&config.name, |s| s.state = SourceState::Stopped);
    info!(source = %config.name, "the source stopped");
}

/// One connection's life: connect, read until `stop` or an error.
async fn run_once(
    engine: &Engine,
    config: &Arc<SourceConfig>,
    registry: &Registry,
    stop: &Shutdown,
) -> Result<(), SourceError> {
    let kind = config.kind()?;
    // A source trying again stays `retrying` until it reads again.
    registry.update(&config.name, |s| {
        if s.state != SourceState::Retrying {
            s.state = SourceState::Starting;
        }
    });
    match kind {
        #[cfg(feature = "kafka")]
        Kind::Kafka => kafka::run(engine, config, registry, stop).await,
        #[cfg(feature = "nats")]
        Kind::Nats => nats::run(engine, config, registry, stop).await,
        #[cfg(feature = "sqs")]
        Kind::Sqs => sqs::run(engine, config, registry, stop).await,
        #[allow(unreachable_patterns)]
        other => {
            let _ = (engine, stop);
            Err(SourceError::Config {
                source_name: config.name.clone(),
                why: format!("this rdq is built without the `{}` feature", other.as_str()),
            })
        }
    }
}

/// How long a reader waits for more records before ingesting what it has.
pub(crate) const LINGER: Duration = Duration::from_millis(5);

/// How often a paused source looks at its queue's depth, and a running one
/// measures its lag.
pub(crate) const WATCH_EVERY: Duration = Duration::from_millis(500);

/// Wraps a store error as the source's.
pub(crate) fn store_error(config: &SourceConfig, error: EngineError) -> SourceError {
    SourceError::Store {
        source_name: config.name.clone(),
        error,
    }
}

/// Wraps a remote error as the source's.
pub(crate) fn remote_error(config: &SourceConfig, why: impl std::fmt::Display) -> SourceError {
    SourceError::Remote {
        source_name: config.name.clone(),
        why: why.to_string(),
    }
}
