//! `/v1/queues`: every queue with its counts, and each queue's live policy.
//!
//! `PUT …/config` takes a partial document: the fields it names replace the
//! current ones (nested objects such as `backoff` and `callback` whole), the
//! result is validated (the callback target against the server's allowlist
//! too), stored, audited, and the dispatcher picks it up at once.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use rdq_engine::EngineError;
use rdq_envelope::validate_queue_name;
use serde::Serialize;
use serde_json::Value;

use super::{AppState, json_response};
use crate::audit::{AuditRecord, redact_policy};
use crate::auth::{Caller, Scope};
use crate::callback::CallbackTarget;
use crate::dead_letters::queue_exists;
use crate::problem::ApiError;
use crate::request::JsonBody;

/// One row of `GET /v1/queues`.
#[derive(Debug, Serialize)]
pub struct QueueRow {
    /// The queue.
    pub queue: String,
    /// PENDING tasks.
    pub pending: u64,
    /// IN_FLIGHT tasks.
    pub in_flight: u64,
    /// SUCCEEDED tasks not yet pruned.
    pub succeeded: u64,
    /// DEAD tasks.
    pub dead: u64,
}

/// `GET /v1/queues`: the queues the caller may see, with counts per status.
pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    let counts = state.engine().store().counts().await?;
    let queues: Vec<QueueRow> = counts
        .into_iter()
        .filter(|c| caller.allows_queue(&c.queue))
        .map(|c| QueueRow {
            queue: c.queue,
            pending: c.pending,
            in_flight: c.in_flight,
            succeeded: c.succeeded,
            dead: c.dead,
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "queues": queues }),
    ))
}

/// `GET /v1/queues/{queue}/config`: the live policy, defaults filled in.
pub async fn get_config(
    State(state): State<AppState>,
    caller: Caller,
    Path(queue): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(Scope::Admin, &queue)?;
    validate_queue_name(&queue)?;
    if !queue_exists(state.engine(), &queue).await? {
        return Err(ApiError::queue_not_found(&queue));
    }
    let policy = state.engine().policy(&queue).await?;
    Ok(json_response(StatusCode::OK, &policy))
}

/// `PUT /v1/queues/{queue}/config`: applies a partial policy document.
pub async fn put_config(
    State(state): State<AppState>,
    caller: Caller,
    Path(queue): Path<String>,
    JsonBody(patch): JsonBody<Value>,
) -> Result<Response, ApiError> {
    caller.require(Scope::Admin, &queue)?;
    validate_queue_name(&queue)?;
    let current = state.engine().policy(&queue).await?;
    let next = current.patched(&patch)?;
    CallbackTarget::from_policy(&next, state.callbacks()).map_err(EngineError::InvalidPolicy)?;
    state.engine().set_policy(&queue, &next).await?;
    state.audit().record(AuditRecord {
        who: caller.who().to_owned(),
        action: "queue.config",
        queue: Some(queue.clone()),
        count: None,
        dry_run: false,
        detail: serde_json::json!({ "patch": redact_policy(&patch) }),
    });
    state.dispatcher().refresh_soon();
    Ok(json_response(StatusCode::OK, &next))
}
