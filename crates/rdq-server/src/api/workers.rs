//! The pull-worker API: what a Go, Java or Python worker uses. Thin
//! adapters over the application layer (`rdq_app::work`), which settles by
//! id and lease token on every store without looking the task up first.
//!
//! `POST /v1/queues/{queue}/claim` hands out tasks, each with a
//! `lease_token`; `POST /v1/tasks/{id}/settle` (or `POST /v1/settle` for a
//! batch, one result per item, written in one store call) reports the
//! outcome; `POST /v1/tasks/{id}/lease` extends the lease. A settle or
//! extension after the lease was lost is refused with 409 `LEASE_LOST` and
//! changes nothing. A settle body becomes the application's
//! [`rdq_app::work::Report`] here, and the report its settlement there.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use rdq_api::work::{
    ClaimBody, ClaimResponse, ClaimedTask, DeferThrottle, ExtendBody, ReportedError,
    ReportedOutcome, SettleBatchBody, SettleBatchResponse, SettleBody, SettleItemResult,
};
use rdq_app::work::{self, MAX_SETTLE_BATCH, Report, Settle};
use rdq_app::{AppError, Caller};
use rdq_envelope::TaskId;
use serde_json::Value;

use super::components::{Problem404, Problem409, QueuePath, TaskPath};
use super::response::{envelope_response, json_response, raw_envelope};
use super::state::AppState;
use crate::problem::{ApiError, item_error};
use crate::request::{JsonBody, PathArgs, parse_task_id};

#[utoipa::path(
    post, path = "/v1/queues/{queue}/claim", operation_id = "claimTasks", tag = "workers",
    summary = "Claim up to max due tasks under a lease",
    params(QueuePath),
    request_body = ClaimBody,
    responses((status = 200, description = "The claimed tasks (possibly none)", body = ClaimResponse,
        links(
            ("SettleTask" = (operation_id = "settleTask", parameters(("id" = "$response.body#/tasks/0/id")),
                request_body = json!({"lease_token": "$response.body#/tasks/0/lease_token", "outcome": "SUCCESS"}))),
            ("ExtendLease" = (operation_id = "extendLease", parameters(("id" = "$response.body#/tasks/0/id")),
                request_body = json!({"lease_token": "$response.body#/tasks/0/lease_token", "extend_ms": 60000}))),
        ))),
)]
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

/// The settle a body stands for, for task `id`.
fn settle_of(id: TaskId, body: SettleBody) -> Result<Settle, AppError> {
    let report = Report {
        outcome: match body.outcome {
            ReportedOutcome::Success => work::ReportedOutcome::Success,
            ReportedOutcome::RetryableFailure => work::ReportedOutcome::RetryableFailure,
            ReportedOutcome::PermanentFailure => work::ReportedOutcome::PermanentFailure,
            ReportedOutcome::Failure => work::ReportedOutcome::Failure,
            ReportedOutcome::Defer => work::ReportedOutcome::Defer,
            ReportedOutcome::Release => work::ReportedOutcome::Release,
        },
        error: body.error.map(
            |ReportedError {
                 error_type,
                 message,
                 detail,
                 stack,
             }| work::ReportedError {
                error_type,
                message,
                detail,
                stack,
            },
        ),
        defer_ms: body.defer_ms,
        throttle: body.throttle.map(|t| match t {
            DeferThrottle::Key => work::DeferThrottle::Key,
            DeferThrottle::Queue => work::DeferThrottle::Queue,
        }),
    };
    report.into_settle(id, body.lease_token)
}

#[utoipa::path(
    post, path = "/v1/tasks/{id}/settle", operation_id = "settleTask", tag = "workers",
    summary = "Report the outcome of a claimed task",
    params(TaskPath),
    request_body = SettleBody,
    responses(
        (status = 200, description = "The task after the settle", body = rdq_api::schema::Envelope),
        (status = 404, response = Problem404),
        (status = 409, response = Problem409),
    ),
)]
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

#[utoipa::path(
    post, path = "/v1/settle", operation_id = "settleBatch", tag = "workers",
    summary = "Settle up to 1000 claimed tasks in one store call; one result per item, in order",
    request_body = SettleBatchBody,
    responses((status = 200, description = "One result per item", body = SettleBatchResponse)),
)]
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

#[utoipa::path(
    post, path = "/v1/tasks/{id}/lease", operation_id = "extendLease", tag = "workers",
    summary = "Extend a claim's lease",
    params(TaskPath),
    request_body = ExtendBody,
    responses(
        (status = 200, description = "The task with its new lease_expires_at", body = rdq_api::schema::Envelope),
        (status = 404, response = Problem404),
        (status = 409, response = Problem409),
    ),
)]
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
