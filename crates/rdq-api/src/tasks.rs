//! `/v1/tasks`: submitting (one or a batch), reading and deleting tasks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use crate::RawEnvelope;
use crate::schema::{Envelope, HandlerRef, QueueName};

/// The body of `POST /v1/tasks`: the client subset of the envelope plus
/// scheduling options. `payload` and `payload_json` exclude each other.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SubmitRequest)]
pub struct SubmitBody {
    /// Target queue.
    #[schema(value_type = QueueName)]
    pub queue: String,
    /// Handler name.
    #[schema(value_type = HandlerRef)]
    pub handler_ref: String,
    /// Handler version; 1 to 255 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 255)]
    pub handler_version: Option<String>,
    /// Opaque bytes as standard base64 (padding optional); not with
    /// `payload_json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // Standard base64, padding optional, no stray trailing bits.
    #[schema(
        pattern = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw](?:==)?|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=?)?$",
        content_encoding = "base64"
    )]
    pub payload: Option<String>,
    /// Inline JSON payload, stored exactly as sent (`null` is a JSON null
    /// payload, not an absent one); not with `payload`.
    #[serde(
        default,
        deserialize_with = "present_raw",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = serde_json::Value)]
    pub payload_json: Option<Box<RawValue>>,
    /// MIME type; default `application/json` with `payload_json`,
    /// `application/octet-stream` otherwise; 1 to 255 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 255)]
    pub payload_content_type: Option<String>,
    /// User headers (the `rdq.` prefix is reserved, in any case).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(schema_with = crate::schema::user_headers)]
    pub headers: BTreeMap<String, String>,
    /// Due this long after now.
    #[serde(
        default,
        deserialize_with = "crate::int::u64",
        skip_serializing_if = "is_zero"
    )]
    #[schema(maximum = 18_446_744_073_709_551_615_u64)]
    pub delay_ms: u64,
    /// Claim priority, 0–255 (higher first).
    #[serde(
        default,
        deserialize_with = "crate::int::u8",
        skip_serializing_if = "is_zero_u8"
    )]
    #[schema(maximum = 255)]
    pub priority: u8,
    /// A repeated key on the same queue returns the original task; 1 to
    /// 255 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 255)]
    pub idempotency_key: Option<String>,
    /// The task's flow key: per-key limits and fairness count it
    /// (`docs/flow-control.md`); 1 to 128 bytes of `[A-Za-z0-9._:/@=+-]`,
    /// stored as the `rdq.flow_key` header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:/@=+-]+$")]
    pub flow_key: Option<String>,
    /// The task's unique key and how long it holds it
    /// (`docs/uniqueness.md`); a store without capability `unique` refuses
    /// it with `UNSUPPORTED`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique: Option<UniqueBody>,
}

/// A submit's uniqueness (`docs/uniqueness.md`): one task at a time holds
/// a key, for as long as its `hold` says; a second submit of a held key
/// does what `on_conflict` says.
#[derive(Debug, Default, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = UniqueOptions)]
pub struct UniqueBody {
    /// The key, 1 to 512 bytes without control characters; not with
    /// `key_from`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1)]
    pub key: Option<String>,
    /// JSON pointers (RFC 6901, e.g. `/customer_id`) into the JSON payload,
    /// at most 16: the server derives the key from their values
    /// (`sha256:` and the hex SHA-256 of their canonical JSON array); not
    /// with `key`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 16)]
    pub key_from: Vec<String>,
    /// `queue` (default: one holder per key in the queue) or `handler`
    /// (one per key and handler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<UniqueScope>)]
    pub scope: Option<String>,
    /// How long the task holds the key: `until_started`,
    /// `until_finished` (default), `until_succeeded`, `for` (`hold_ms`
    /// after its submit) or `forever`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<UniqueHold>)]
    pub hold: Option<String>,
    /// With `hold: "for"`, how long: 1 ms to ten years.
    #[serde(
        default,
        deserialize_with = "crate::int::option_u64",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(minimum = 1, maximum = 316_224_000_000_u64)]
    pub hold_ms: Option<u64>,
    /// What a submit of a held key does: `return` (default: `409
    /// UNIQUE_HELD` naming the holder, nothing written), `replace` (a
    /// holder still PENDING takes the new payload and headers: `200` with
    /// the holder), `debounce` (as `replace`, and the holder's due time
    /// moves to this submit's) or `existing` (`200` with the holder, nothing
    /// written: with hold `forever` in the queue's scope, an idempotency
    /// key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<UniqueConflict>)]
    pub on_conflict: Option<String>,
}

/// `queue` or `handler` (the schema of [`UniqueBody::scope`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UniqueScope {
    /// One holder per key in the queue.
    Queue,
    /// One holder per key and handler.
    Handler,
}

/// A hold (the schema of [`UniqueBody::hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UniqueHold {
    /// While it waits for its first claim.
    UntilStarted,
    /// While PENDING or IN_FLIGHT.
    UntilFinished,
    /// Until it succeeds (a DEAD task keeps it).
    UntilSucceeded,
    /// For `hold_ms` after its submit.
    For,
    /// As long as it exists.
    Forever,
}

/// What a submit of a held key does (the schema of
/// [`UniqueBody::on_conflict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UniqueConflict {
    /// `409 UNIQUE_HELD` naming the holder.
    Return,
    /// A waiting holder takes the new payload.
    Replace,
    /// As `replace`, and the holder's due time moves.
    Debounce,
    /// `200` with the holder, nothing written.
    Existing,
}

/// A field that is present holds a value, even `null`: serde's `Option`
/// would read `null` as absent.
fn present_raw<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u8(n: &u8) -> bool {
    *n == 0
}

/// The body of `POST /v1/tasks/batch`: up to 1000 submits, stored in one
/// store call where the store can.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SubmitBatchRequest)]
pub struct SubmitBatchBody {
    /// The submits, each as `POST /v1/tasks` takes it.
    #[schema(schema_with = crate::schema::submit_items)]
    pub tasks: Vec<serde_json::Value>,
}

/// One result of a batch submit, in request order.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SubmitItemResult {
    /// 201 created, 200 an idempotent repeat, else the error's status.
    pub status: u16,
    /// The stored envelope (created or original).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Envelope)]
    pub envelope: Option<RawEnvelope>,
    /// The stable error code, when the item was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// What was wrong, when the item was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// With `UNIQUE_HELD`: the task that holds the item's unique key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::schema::TaskId>)]
    pub holder: Option<String>,
    /// With `UNIQUE_HELD`: the holder's hold (`until_finished`, `for:60000`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<String>,
    /// When the item was refused for one field: which (as a problem's `field`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// The answer of `POST /v1/tasks/batch`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SubmitBatchResponse {
    /// One result per submitted item, in order.
    pub results: Vec<SubmitItemResult>,
}

/// Body of `POST /v1/queues/{queue}/cancel`: which PENDING tasks to cancel.
/// Every filter is optional and they combine; `{}` cancels every PENDING
/// task of the queue (run it with `dry_run` first).
#[derive(Debug, Default, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// Only these tasks (one id alone that cannot be cancelled is an error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<crate::schema::TaskId>>, min_items = 1)]
    pub ids: Option<Vec<String>>,
    /// Only tasks of this handler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::schema::HandlerRef>)]
    pub handler_ref: Option<String>,
    /// Only tasks with every one of these headers, value for value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    /// Only tasks submitted more than this many milliseconds ago.
    #[serde(
        default,
        deserialize_with = "crate::int::option_u64",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(maximum = 18_446_744_073_709_551_615_u64)]
    pub older_than_ms: Option<u64>,
    /// At most this many, oldest first.
    #[serde(
        default,
        deserialize_with = "crate::int::option_usize",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(maximum = 18_446_744_073_709_551_615_u64)]
    pub limit: Option<usize>,
    /// Report what would be cancelled, change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Why, recorded in each task's dead reason (cut to 4 KiB; default
    /// "cancelled").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Leave running (IN_FLIGHT) tasks alone: cancel only PENDING ones.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending_only: bool,
}

/// The answer of a cancel.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CancelResult {
    /// The queue.
    #[schema(value_type = crate::schema::QueueName)]
    pub queue: String,
    /// True when nothing was changed.
    pub dry_run: bool,
    /// How many were (or would be) cancelled.
    pub count: usize,
    /// Which, oldest first for a filter, in the given order for ids:
    /// every task cancelled or asked to stop.
    #[schema(value_type = Vec<crate::schema::TaskId>)]
    pub ids: Vec<String>,
    /// Those of `ids` that were running: asked to stop, they end DEAD with
    /// reason CANCELLED unless their handler succeeds first.
    #[serde(default)]
    #[schema(value_type = Vec<crate::schema::TaskId>)]
    pub running: Vec<String>,
}

/// Query of `GET /v1/queues/{queue}/tasks`: a page of a queue's tasks.
#[derive(Debug, Default, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TaskPageQuery {
    /// Only tasks in this status (`PENDING`, `IN_FLIGHT`, `SUCCEEDED`,
    /// `DEAD`); every status when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<String>, pattern = "^(PENDING|IN_FLIGHT|SUCCEEDED|DEAD)$")]
    pub status: Option<String>,
    /// Only tasks of this handler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<HandlerRef>)]
    pub handler_ref: Option<String>,
    /// Only tasks with this header, `KEY=VALUE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(pattern = "^[^=]+=")]
    pub header: Option<String>,
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
    #[param(value_type = Option<crate::schema::TaskId>)]
    pub cursor: Option<String>,
}
