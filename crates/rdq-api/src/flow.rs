//! `/v1/queues/{queue}/flow` and `/v1/queues/{queue}/throttle`: a queue's
//! flow limits with how they stand now, and throttling a flow key (or the
//! whole queue) for a while.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::schema::{FlowPolicy, QueueName};

/// Longest throttle one request may set: 7 days, in milliseconds.
pub const MAX_THROTTLE_MS: u64 = 7 * 24 * 3_600_000;

/// The pattern of a flow key: 1 to 128 bytes of `[A-Za-z0-9._:/@=+-]`.
pub const FLOW_KEY_PATTERN: &str = "^[A-Za-z0-9._:/@=+-]+$";

/// The answer of `GET /v1/queues/{queue}/flow` (and of a throttle): the
/// queue's flow limits and how they stand now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct QueueFlow {
    /// The queue.
    #[schema(value_type = QueueName)]
    pub queue: String,
    /// The policy's `flow` section (`{}`: nothing is limited).
    #[schema(value_type = FlowPolicy)]
    pub limits: Value,
    /// Tokens left in the queue's rate bucket; `null` without a rate.
    #[schema(required = true)]
    pub tokens: Option<f64>,
    /// The whole queue is throttled until then; `null` when it is not.
    #[schema(required = true, format = DateTime)]
    pub blocked_until: Option<String>,
    /// The queue's IN_FLIGHT tasks.
    pub in_flight: u64,
    /// The busiest flow keys (most in flight first) and the throttled
    /// ones, at most 20.
    pub keys: Vec<FlowKeyStatus>,
    /// Claims so far that flow limits cut short (a rate, a per-key limit or
    /// a throttle passed due tasks over).
    pub throttled_claims: u64,
}

/// One flow key in a [`QueueFlow`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FlowKeyStatus {
    /// The flow key.
    #[schema(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:/@=+-]+$")]
    pub key: String,
    /// Its IN_FLIGHT tasks.
    pub in_flight: u64,
    /// Tokens left in its rate bucket; `null` without a `key_rate`.
    #[schema(required = true)]
    pub tokens: Option<f64>,
    /// Throttled until then; `null` when it is not.
    #[schema(required = true, format = DateTime)]
    pub blocked_until: Option<String>,
}

/// Body of `POST /v1/queues/{queue}/throttle`: whom to throttle and until
/// when; exactly one of `for_ms` and `until`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ThrottleRequest)]
pub struct ThrottleBody {
    /// The flow key to throttle; the whole queue when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:/@=+-]+$")]
    pub flow_key: Option<String>,
    /// Throttle for this long from now, 1 ms to 7 days; not with `until`.
    /// Kept as JSON so a negative or fractional value is answered
    /// `INVALID_FIELD` naming it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 604_800_000)]
    pub for_ms: Option<Value>,
    /// Throttle until this time (RFC 3339, within 7 days from now); not
    /// with `for_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub until: Option<String>,
}
