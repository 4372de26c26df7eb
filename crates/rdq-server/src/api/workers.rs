//! The pull-worker API: what a Go, Java or Python worker uses. Thin
//! adapters over the application layer (`rdq_app::work`), which settles by
//! id and lease token on every store without looking the task up first.
//!
//! `POST /v1/queues/{queue}/claim` hands out tasks, each with a
//! `lease_token`; `POST /v1/tasks/{id}/settle` (or `POST /v1/settle` for a
//! batch, one result per item, written in one store call) reports the
//! outcome; `POST /v1/tasks/{id}/lease` extends the lease. A settle or
//! extension after the lease was lost is refused with 409 `LEASE_LOST` and
//! changes nothing.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use rdq_api::work::{
    ClaimBody, ClaimResponse, ClaimedTask, ExtendBody, SettleBatchBody, SettleBatchResponse,
    SettleBody, SettleItemResult,
};
use rdq_app::work::{MAX_SETTLE_BATCH, Settle, settlement};
use rdq_app::{AppError, Caller};
use rdq_envelope::TaskId;
use serde_json::Value;

use super::response::{envelope_response, json_response, raw_envelope};
use super::state::AppState;
use crate::problem::{ApiError, item_error};
use crate::request::{JsonBody, PathArgs, parse_task_id};

/// `POST /v1/queues/{queue}/claim`: up to `max` due tasks, highest priority first.
pub async fn claim(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
    JsonBody(body): JsonBody<ClaimBody>,
) -> Result<Response, ApiError> {
    let claimed = state
        .app()
        .claim(&caller, &queue, body.max, body.lease_ms)
        .await?;
    let tasks = claimed
        .into_iter()
        .map(|c| ClaimedTask {
            id: c.envelope.id.to_string(),
            lease_token: c.lease_token,
            envelope: raw_envelope(&c.envelope),
        })
        .collect();
    Ok(json_response(StatusCode::OK, &ClaimResponse { tasks }))
}

fn settle_of(id: TaskId, body: SettleBody) -> Result<Settle, AppError> {
    Ok(Settle {
        id,
        settlement: settlement(&body)?,
        lease_token: body.lease_token,
    })
}

/// `POST /v1/tasks/{id}/settle`: the updated envelope, or 409 `LEASE_LOST`.
pub async fn settle(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(id): PathArgs<String>,
    JsonBody(body): JsonBody<SettleBody>,
) -> Result<Response, ApiError> {
    let id = parse_task_id(&id)?;
    if body.id.as_deref().is_some_and(|b| b != id.to_string()) {
        return Err(ApiError::invalid_field(
            "id",
            "differs from the task id in the path",
        ));
    }
    let settled = state.app().settle(&caller, settle_of(id, body)?).await?;
    Ok(envelope_response(StatusCode::OK, &settled))
}

/// `POST /v1/settle`: many settles, one result per item in order:
/// `{"id", "status": 200, "envelope"}` (no envelope with `"envelopes":
/// false`) or `{"id", "status", "code", "detail"}`.
/// Items are independent: a bad or stale one does not fail the others.
pub async fn settle_batch(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<SettleBatchBody>,
) -> Result<Response, ApiError> {
    if body.settles.len() > MAX_SETTLE_BATCH {
        return Err(ApiError::invalid_field(
            "settles",
            format!("at most {MAX_SETTLE_BATCH} items"),
        ));
    }
    let with_envelopes = body.envelopes != Some(false);
    let mut ids = Vec::with_capacity(body.settles.len());
    let items = body
        .settles
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let id_text = item
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            ids.push(id_text.clone());
            let parsed: SettleBody = serde_json::from_value(item).map_err(|e| {
                AppError::malformed(format!("settles[{i}] is not a valid settle: {e}"))
            })?;
            let id = rdq_envelope::TaskId::parse(&id_text).ok_or_else(|| {
                AppError::invalid_argument(format!(
                    "{id_text:?} is not a task id (a 26-character ULID)"
                ))
            })?;
            settle_of(id, parsed)
        })
        .collect();
    let settled = state.app().settle_many(&caller, items).await;
    let results = ids
        .into_iter()
        .zip(settled)
        .map(|(id, r)| match r {
            Ok(env) => SettleItemResult {
                id,
                status: 200,
                envelope: with_envelopes.then(|| raw_envelope(&env)),
                code: None,
                detail: None,
            },
            Err(e) => {
                let (status, code, detail) = item_error(&e);
                SettleItemResult {
                    id,
                    status,
                    envelope: None,
                    code,
                    detail,
                }
            }
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &SettleBatchResponse { results },
    ))
}

/// `POST /v1/tasks/{id}/lease`: the envelope with its new `lease_expires_at`.
pub async fn extend_lease(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(id): PathArgs<String>,
    JsonBody(body): JsonBody<ExtendBody>,
) -> Result<Response, ApiError> {
    let id = parse_task_id(&id)?;
    let extended = state
        .app()
        .extend_lease(&caller, id, &body.lease_token, body.extend_ms)
        .await?;
    Ok(envelope_response(StatusCode::OK, &extended))
}
