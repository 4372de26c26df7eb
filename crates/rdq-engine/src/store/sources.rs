//! The store side of sources (docs/sources.md): where a source's cursors
//! live, and the one atomic step that submits a batch of records' tasks and
//! moves the cursor past them.
//!
//! A source (a Kafka topic, a JetStream stream) reads records in order per
//! partition. The bridge turns a run of records into tasks and hands the
//! store an [`IngestRequest`]: the tasks, and the cursor move from the
//! position the bridge read to the one after the last record. The store
//! applies both or neither, and only while the cursor still holds the
//! position the bridge read (compare-and-swap), exactly as a schedule's
//! fire moves its cursor ([`crate::store::schedules`]). So:
//!
//! - a bridge killed between the store's commit and the source's own
//!   acknowledgement finds its position in the store on restart, and skips
//!   what it already submitted: no record becomes two tasks, even once the
//!   tasks' idempotency keys are pruned or the consumer group is reset;
//! - of two bridges reading the same partition (a rebalance, a zombie
//!   process), one moves the cursor; the other finds it moved
//!   ([`IngestOutcome::Moved`]), changes nothing, and seeks to where it is.
//!
//! Each task also carries its record's locator as idempotency key, so a
//! store without cursors still turns a replayed record into the original
//! task while the key is kept.

use async_trait::async_trait;

use crate::error::EngineError;
use crate::store::{NewTask, Submitted};

/// The longest source name, in characters (`[a-z0-9._-]`).
pub const MAX_SOURCE_NAME: usize = 120;
/// The longest partition name, in bytes.
pub const MAX_PARTITION_NAME: usize = 255;

/// A source's position in one partition, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceCursor {
    /// The partition: a Kafka partition's number, a JetStream stream's name.
    pub partition: String,
    /// The position of the next record to submit (a Kafka offset, a stream
    /// sequence): every record before it is stored as a task.
    pub next: u64,
    /// When the cursor last moved (ms since the Unix epoch).
    pub updated_at_ms: i64,
}

/// One run of records: submit the tasks and move the cursor, as one step.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestRequest {
    /// The source's name.
    pub source: String,
    /// The partition the records came from.
    pub partition: String,
    /// The queue every task goes to: a store that keeps a queue's data
    /// together (Redis's hash tags) keeps the cursor with it.
    pub queue: String,
    /// The cursor the caller read; the step applies only while the store
    /// holds exactly this value (`None`: no cursor stored yet).
    pub expected: Option<u64>,
    /// The new cursor: one past the last record. Equal to `expected` for a
    /// submit that must not move it (a record's task submitted again as
    /// DEAD after its store refused it).
    pub next: u64,
    /// The tasks, each with its record's locator as idempotency key.
    pub tasks: Vec<NewTask>,
    /// Now (ms since the Unix epoch): the cursor's `updated_at_ms`.
    pub now_ms: i64,
}

/// What an ingest did.
#[derive(Debug, Clone, PartialEq)]
pub enum IngestOutcome {
    /// The cursor moved and the tasks were submitted: one result per task,
    /// as a submit answers (a key seen before gives back the original).
    Ingested(Vec<Result<Submitted, EngineError>>),
    /// The cursor no longer held the expected value (another bridge moved
    /// it): nothing changed. `current` is where it is now.
    Moved {
        /// The cursor as stored now (`None`: there is none).
        current: Option<u64>,
    },
}

/// Keeps sources' cursors with the tasks and ingests atomically (module
/// documentation).
#[async_trait]
pub trait SourceCursors: Send + Sync {
    /// Every cursor of `source`, by partition name.
    async fn source_cursors(&self, source: &str) -> Result<Vec<SourceCursor>, EngineError>;

    /// Applies `request` only if the cursor of its source and partition is
    /// still `request.expected`: submits its tasks (with their idempotency
    /// keys) and sets the cursor to `request.next`, in one atomic step.
    /// Otherwise changes nothing and answers [`IngestOutcome::Moved`].
    async fn ingest(&self, request: &IngestRequest) -> Result<IngestOutcome, EngineError>;

    /// Removes every cursor of `source` (an operator's reset: the next
    /// bridge starts where the source's own position says); answers how
    /// many there were.
    async fn delete_source_cursors(&self, source: &str) -> Result<u64, EngineError>;
}

/// Refuses a source or partition name a store cannot key by.
pub fn validate_cursor_names(source: &str, partition: &str) -> Result<(), EngineError> {
    if source.is_empty()
        || source.chars().count() > MAX_SOURCE_NAME
        || !source.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
    {
        return Err(EngineError::InvalidArgument(format!(
            "source: a source name is 1 to {MAX_SOURCE_NAME} characters of [a-z0-9._-], not {source:?}"
        )));
    }
    if partition.is_empty() || partition.len() > MAX_PARTITION_NAME {
        return Err(EngineError::InvalidArgument(format!(
            "partition: 1 to {MAX_PARTITION_NAME} bytes, not {} bytes",
            partition.len()
        )));
    }
    Ok(())
}
