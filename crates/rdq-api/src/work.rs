//! The pull-worker API: claim, settle (one or a batch), extend a lease.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::RawEnvelope;
use crate::schema::{Envelope, LeaseToken, TaskId};

/// Body of `POST /v1/queues/{queue}/claim`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ClaimRequest)]
pub struct ClaimBody {
    /// Most tasks to take, 0–1000.
    #[serde(deserialize_with = "crate::int::usize")]
    #[schema(maximum = 1000)]
    pub max: usize,
    /// Lease for these claims; the queue's `lease_ms` when absent.
    #[serde(
        default,
        deserialize_with = "crate::int::option_u64",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(minimum = 1, maximum = 18_446_744_073_709_551_615_u64)]
    pub lease_ms: Option<u64>,
}

/// One claimed task.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClaimedTask {
    /// The task id.
    #[schema(value_type = TaskId)]
    pub id: String,
    /// Present this when settling or extending; opaque.
    #[schema(value_type = LeaseToken)]
    pub lease_token: String,
    /// The task as claimed: IN_FLIGHT, its open attempt last.
    #[schema(value_type = Envelope)]
    pub envelope: RawEnvelope,
}

/// The answer of a claim.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClaimResponse {
    /// The claimed tasks, highest priority first.
    pub tasks: Vec<ClaimedTask>,
}

/// What a worker reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReportedOutcome {
    /// The task succeeded.
    Success,
    /// Retry with backoff (until `max_attempts`).
    RetryableFailure,
    /// Dead-letter now.
    PermanentFailure,
    /// A failure the worker did not classify: the queue's
    /// `retryable_errors` / `non_retryable_errors` globs decide, default retryable.
    Failure,
    /// Put back for `defer_ms` without spending an attempt.
    Defer,
    /// Hand back unrun (a worker shutting down): due now, no attempt spent.
    Release,
}

/// The error of a failed attempt, as a worker reports it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportedError {
    /// Language-native type name; classification globs match on it.
    #[serde(rename = "type")]
    #[schema(min_length = 1)]
    pub error_type: String,
    /// What went wrong (cut at 4 KiB).
    #[serde(default)]
    pub message: String,
    /// Optional structured JSON; `null` is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
    /// Optional stack (cut at 64 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<String>,
}

/// Body of `POST /v1/tasks/{id}/settle`; one item of `POST /v1/settle`
/// also names the task `id`. Its schema is written by hand
/// ([`crate::schema`]): one shape per group of outcomes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettleBody {
    /// The task (batch items only; the path names it otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The token from the claim.
    pub lease_token: String,
    /// What happened.
    pub outcome: ReportedOutcome,
    /// Required with the failure outcomes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ReportedError>,
    /// Required with `DEFER`.
    #[serde(
        default,
        deserialize_with = "crate::int::option_u64",
        skip_serializing_if = "Option::is_none"
    )]
    pub defer_ms: Option<u64>,
    /// With `DEFER` only: also throttle the task's flow key (`key`; the
    /// whole queue for a task without one) or the whole queue (`queue`)
    /// until the deferral is due, for every worker and node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<DeferThrottle>,
}

/// What a deferral throttles until it is due (back-pressure a worker met).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeferThrottle {
    /// The task's flow key (the whole queue for a task without one).
    Key,
    /// The whole queue.
    Queue,
}

/// Body of `POST /v1/settle`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SettleBatchRequest)]
pub struct SettleBatchBody {
    /// The settles, each naming its task `id`. Kept as JSON so a malformed
    /// item is answered in its slot instead of failing the batch.
    #[schema(schema_with = crate::schema::settle_items)]
    pub settles: Vec<Value>,
    /// `false`: answer each item without its envelope, for a worker that
    /// reads only the statuses (default `true`; `null` is absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelopes: Option<bool>,
}

/// One result of a batch settle, in request order.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SettleItemResult {
    /// The task id as given (empty when the item had none).
    pub id: String,
    /// 200, or the error's status (409 `LEASE_LOST`, 400, …).
    pub status: u16,
    /// The task's new state, on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Envelope)]
    pub envelope: Option<RawEnvelope>,
    /// The stable error code, on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// What was wrong, on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The answer of `POST /v1/settle`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SettleBatchResponse {
    /// One result per item, in order.
    pub results: Vec<SettleItemResult>,
}

/// Body of `POST /v1/tasks/{id}/lease`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = LeaseRequest)]
pub struct ExtendBody {
    /// The token from the claim.
    #[schema(value_type = LeaseToken)]
    pub lease_token: String,
    /// The lease then ends this long from now.
    #[serde(deserialize_with = "crate::int::u64")]
    #[schema(minimum = 1, maximum = 18_446_744_073_709_551_615_u64)]
    pub extend_ms: u64,
}
