//! `/v1/sources`: the sources this server runs (Kafka topics, NATS
//! JetStream streams, SQS queues whose records become tasks), each with its
//! state, lag, rate, counters and last error; and a source's cursors in the
//! store, which an operator can reset.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::schema::QueueName;

/// Where a source reads records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// A Kafka topic, through a consumer group.
    Kafka,
    /// A NATS JetStream stream, through a durable pull consumer.
    Nats,
    /// An SQS queue.
    Sqs,
}

impl SourceKind {
    /// The kind's name: `kafka`, `nats` or `sqs`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Kafka => "kafka",
            Self::Nats => "nats",
            Self::Sqs => "sqs",
        }
    }
}

/// How a source stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SourceState {
    /// Connecting, or reading its cursors.
    Starting,
    /// Reading records.
    Running,
    /// Not reading: its queue holds more PENDING tasks than its high-water
    /// mark.
    Paused,
    /// Its last step failed (`last_error` says why); it tries again after
    /// a wait.
    Retrying,
    /// Stopped: the server is shutting down.
    Stopped,
}

impl SourceState {
    /// The state's name, as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Retrying => "retrying",
            Self::Stopped => "stopped",
        }
    }
}

/// One partition of a source (a Kafka partition, a JetStream stream).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SourcePartition {
    /// The partition: a Kafka partition's number, a stream's name.
    pub partition: String,
    /// The position of the next record to ingest, as last known; `null`
    /// until known.
    #[schema(required = true)]
    pub cursor: Option<u64>,
    /// Records behind the newest, as last measured; `null` until measured.
    #[schema(required = true)]
    pub lag: Option<u64>,
}

/// A source and how it stands, as `GET /v1/sources` and
/// `GET /v1/sources/{name}` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SourceStatus {
    /// The source's name.
    #[schema(min_length = 1, max_length = 120, pattern = "^[a-z0-9._-]{1,120}$")]
    pub name: String,
    /// Where it reads.
    pub kind: SourceKind,
    /// The queue its tasks go to.
    #[schema(value_type = QueueName)]
    pub queue: String,
    /// How it stands.
    pub state: SourceState,
    /// True while it does not read because its queue is above its
    /// high-water mark.
    pub paused: bool,
    /// Records in the source not yet ingested (Kafka: the partitions'
    /// newest offsets minus their cursors; JetStream: the consumer's
    /// pending count; SQS: the queue's approximate message count), as last
    /// measured; `null` until measured.
    #[schema(required = true)]
    pub lag: Option<u64>,
    /// Records that became PENDING tasks since the server started.
    pub ingested: u64,
    /// Records kept as DEAD tasks (reason `UNDECODABLE_SOURCE`) since the
    /// server started.
    pub dead: u64,
    /// Records skipped because their task was already stored, since the
    /// server started.
    pub duplicates: u64,
    /// Records per second over the last 10 seconds.
    pub rate: f64,
    /// The last error, if a step failed since the server started.
    #[schema(required = true)]
    pub last_error: Option<String>,
    /// When the last error happened (ms since the Unix epoch).
    #[schema(required = true)]
    pub last_error_at_ms: Option<i64>,
    /// True when the store keeps this source's cursors with its tasks
    /// (capability `source_cursors`).
    pub cursors_in_store: bool,
    /// Per partition, where known.
    pub partitions: Vec<SourcePartition>,
}

/// The answer of `GET /v1/sources`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SourceList {
    /// The sources on a queue the caller may read, by name.
    pub sources: Vec<SourceStatus>,
}

/// The answer of `DELETE /v1/sources/{name}/cursors`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SourceCursorsReset {
    /// The source.
    pub name: String,
    /// How many cursors (one per partition) were removed.
    pub deleted: u64,
}
