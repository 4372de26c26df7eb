//! `/v1/tasks`: submitting (one or a batch), reading and deleting tasks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::RawEnvelope;

/// The body of `POST /v1/tasks`: the client subset of the envelope plus
/// scheduling options.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitBody {
    /// Target queue, `[a-z0-9._-]{1,240}`.
    pub queue: String,
    /// Handler name, `[a-z0-9._-]{1,240}`.
    pub handler_ref: String,
    /// Optional handler version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler_version: Option<String>,
    /// The payload as standard base64 (padding optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    /// The payload as JSON, stored exactly as sent (`null` included: a
    /// JSON `null` payload, not an absent one).
    #[serde(
        default,
        deserialize_with = "present_raw",
        skip_serializing_if = "Option::is_none"
    )]
    pub payload_json: Option<Box<RawValue>>,
    /// MIME type; defaults to `application/json` with `payload_json`,
    /// `application/octet-stream` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_content_type: Option<String>,
    /// User headers (the `rdq.` prefix is reserved).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Due this long after now.
    #[serde(
        default,
        deserialize_with = "crate::int::u64",
        skip_serializing_if = "is_zero"
    )]
    pub delay_ms: u64,
    /// Claim priority, 0–255 (higher first).
    #[serde(
        default,
        deserialize_with = "crate::int::u8",
        skip_serializing_if = "is_zero_u8"
    )]
    pub priority: u8,
    /// Makes a repeated submit to the same queue return the original task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
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
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitBatchBody {
    /// The submits, each as `POST /v1/tasks` takes it.
    pub tasks: Vec<serde_json::Value>,
}

/// One result of a batch submit, in request order.
#[derive(Debug, Serialize, Deserialize)]
pub struct SubmitItemResult {
    /// 201 created, 200 an idempotent repeat, else the error's status.
    pub status: u16,
    /// The stored envelope (created or original).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope: Option<RawEnvelope>,
    /// The stable error code, when the item was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// What was wrong, when the item was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The answer of `POST /v1/tasks/batch`.
#[derive(Debug, Serialize, Deserialize)]
pub struct SubmitBatchResponse {
    /// One result per submitted item, in order.
    pub results: Vec<SubmitItemResult>,
}
