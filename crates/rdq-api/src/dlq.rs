//! `/v1/queues/{queue}/dead`: the dead-letter queue.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::RawEnvelope;
use crate::schema::{DeadReasonCode, Envelope, Glob, QueueName, TaskId};

/// Query of `GET …/dead`.
#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Page size, 1–1000 (default 50).
    #[serde(
        default,
        deserialize_with = "crate::int::query_option_usize",
        skip_serializing_if = "Option::is_none"
    )]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<TaskId>)]
    pub cursor: Option<String>,
    /// Glob on the latest error's type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<Glob>)]
    pub error_type: Option<String>,
    /// Only tasks that died for this reason: a dead reason code rdq writes
    /// (`ATTEMPTS_EXHAUSTED`, `PERMANENT_FAILURE`, `LEASE_EXPIRIES_EXHAUSTED`,
    /// `CANCELLED`, `HANDLER_VERSION_MISMATCH`, `COUNTERS_EXHAUSTED`) or
    /// `UNRECORDED` (dead with no reason recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<DeadReasonCode>)]
    pub reason: Option<String>,
}

/// A page of tasks (a DLQ's, or a queue's by status), newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(as = TaskPage)]
pub struct DlqPage {
    /// The envelopes, newest first.
    #[schema(value_type = Vec<Envelope>)]
    pub items: Vec<RawEnvelope>,
    /// Pass as `cursor` for the next page; `null` on the last.
    #[schema(value_type = Option<TaskId>, required = true)]
    pub next_cursor: Option<String>,
}

/// Body of `POST …/dead/redrive`; every field optional.
///
/// `{}` redrives every dead task of the queue.
#[derive(Debug, Default, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RedriveRequest)]
pub struct RedriveBody {
    /// Only these tasks.
    #[serde(default)]
    #[schema(value_type = Option<Vec<TaskId>>)]
    pub ids: Option<Vec<String>>,
    /// Only tasks whose latest error type matches this glob.
    #[serde(default)]
    #[schema(value_type = Option<Glob>)]
    pub error_type: Option<String>,
    /// Only tasks that died for this reason (as the listing's `reason`).
    #[serde(default)]
    #[schema(value_type = Option<DeadReasonCode>)]
    pub reason: Option<String>,
    /// At most this many.
    #[serde(default, deserialize_with = "crate::int::option_usize")]
    #[schema(maximum = 18_446_744_073_709_551_615_u64)]
    pub limit: Option<usize>,
    /// Report, change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// The answer of a redrive.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = RedriveResponse)]
pub struct RedriveResult {
    /// The queue.
    #[schema(value_type = QueueName)]
    pub queue: String,
    /// True when nothing was changed.
    pub dry_run: bool,
    /// How many were (or would be) redriven.
    pub count: usize,
    /// Which.
    #[schema(value_type = Vec<TaskId>)]
    pub ids: Vec<String>,
}

/// The answer of `GET …/dead/reasons`: the queue's dead tasks counted by
/// why they died.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = DeadReasons)]
pub struct ReasonsResult {
    /// The queue.
    #[schema(value_type = QueueName)]
    pub queue: String,
    /// One entry per reason, most tasks first, then by code.
    pub reasons: Vec<ReasonCount>,
}

/// How many dead tasks died for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReasonCount {
    /// The reason code (`UNRECORDED` for tasks without one).
    #[schema(value_type = DeadReasonCode)]
    pub reason: String,
    /// How many.
    pub count: u64,
}

/// Query of `GET …/dead/export`.
#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ExportQuery {
    /// Only tasks whose latest error type matches this glob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<Glob>)]
    pub error_type: Option<String>,
    /// Only tasks that died for this reason: a dead reason code rdq writes
    /// (`ATTEMPTS_EXHAUSTED`, `PERMANENT_FAILURE`, `LEASE_EXPIRIES_EXHAUSTED`,
    /// `CANCELLED`, `HANDLER_VERSION_MISMATCH`, `COUNTERS_EXHAUSTED`) or
    /// `UNRECORDED` (dead with no reason recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<DeadReasonCode>)]
    pub reason: Option<String>,
}

/// Query of `POST …/dead/import` and `DELETE …/dead`.
#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DryRunQuery {
    /// Check or count, change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// A line of an import that cannot be imported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = ImportLineError)]
pub struct LineError {
    /// 1-based line number in the file.
    #[schema(minimum = 1)]
    pub line: usize,
    /// Stable code (`MALFORMED_ENVELOPE`, `INVALID_FIELD`, `TASK_EXISTS`, …).
    pub code: String,
    /// What is wrong, for people.
    pub message: String,
}

/// The answer of an import.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = ImportResponse)]
pub struct ImportResult {
    /// The queue.
    #[schema(value_type = QueueName)]
    pub queue: String,
    /// True when nothing was stored.
    pub dry_run: bool,
    /// Lines checked.
    pub checked: u64,
    /// Envelopes stored.
    pub imported: u64,
}

/// The answer of a purge.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = PurgeResponse)]
pub struct PurgeResult {
    /// The queue.
    #[schema(value_type = QueueName)]
    pub queue: String,
    /// True when nothing was removed.
    pub dry_run: bool,
    /// How many were (or would be) removed.
    pub purged: u64,
}
