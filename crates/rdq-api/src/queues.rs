//! `/v1/queues` and `/v1/capabilities`: queues with their numbers, and what
//! the store behind the server can do.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::schema::{QueueName, QueueNameItem};

/// Where a queue row's numbers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StatsSource {
    /// Tasks counted per status (a database-backed store).
    Counts,
    /// Messages waiting in the broker queues (RabbitMQ): `pending` is the
    /// ready messages of the work queue, `dead` those of the DLQ; tasks in
    /// flight or succeeded are unknown (`null`).
    Depths,
}

/// One row of `GET /v1/queues`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueueRow {
    /// The queue.
    #[schema(value_type = QueueName)]
    pub queue: String,
    /// PENDING tasks (with depths: ready messages).
    pub pending: u64,
    /// IN_FLIGHT tasks; `null` where the store cannot tell (depths).
    #[schema(required = true)]
    pub in_flight: Option<u64>,
    /// SUCCEEDED tasks not yet pruned; `null` where the store cannot tell
    /// (depths).
    #[schema(required = true)]
    pub succeeded: Option<u64>,
    /// DEAD tasks.
    pub dead: u64,
    /// Counts or depths.
    pub source: StatsSource,
}

/// The answer of `GET /v1/queues`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QueueList {
    /// The queues the caller may see.
    pub queues: Vec<QueueRow>,
}

/// Query of `GET /v1/queues`.
#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct QueueListQuery {
    /// Only these queues, comma-separated (needed on a store that cannot
    /// list its queues); a missing one is `QUEUE_NOT_FOUND`; empty items
    /// are ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<Vec<QueueNameItem>>, style = Form, explode = false)]
    pub names: Option<String>,
}

/// The answer of `GET /v1/capabilities`: each capability of the store.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CapabilityList {
    /// Capability name → whether the store has it.
    pub capabilities: std::collections::BTreeMap<String, bool>,
}
