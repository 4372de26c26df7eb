//! `/v1/tasks`: submit a task (or a batch), read it, delete it. Thin
//! adapters over the application layer (`rdq_app`).

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use rdq_api::IDEMPOTENCY_KEY_HEADER;
use rdq_api::tasks::{SubmitBatchBody, SubmitBatchResponse, SubmitBody, SubmitItemResult};
use rdq_app::{AppError, Caller};
use rdq_engine::Submitted;

use super::{AppState, envelope_response, json_response, parse_task_id, raw_envelope};
use crate::problem::{ApiError, item_error};
use crate::request::{JsonBody, PathArgs};

/// Most submits in one batch.
pub const MAX_SUBMIT_BATCH: usize = rdq_api::MAX_SUBMIT_BATCH;

/// Fills what a submit takes from request headers: an `Idempotency-Key`
/// when the body has no key, and W3C `traceparent` into the envelope's
/// headers unless the body has one (trace context rides there,
/// `docs/envelope.md`).
fn from_headers(body: &mut SubmitBody, headers: &HeaderMap) {
    if body.idempotency_key.is_none()
        && let Some(key) = headers
            .get(IDEMPOTENCY_KEY_HEADER)
            .and_then(|v| v.to_str().ok())
    {
        body.idempotency_key = Some(key.to_owned());
    }
    if !body.headers.contains_key("traceparent")
        && let Some(tp) = headers.get("traceparent").and_then(|v| v.to_str().ok())
    {
        body.headers.insert("traceparent".to_owned(), tp.to_owned());
    }
}

/// `POST /v1/tasks`: 201 with the new envelope, or 200 with the original
/// when the idempotency key was seen before on this queue.
pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    JsonBody(mut body): JsonBody<SubmitBody>,
) -> Result<Response, ApiError> {
    from_headers(&mut body, &headers);
    let submitted = state.app().submit(&caller, body).await?;
    let (status, env) = match &submitted {
        Submitted::Created(env) => (StatusCode::CREATED, env),
        Submitted::Existing(env) => (StatusCode::OK, env),
    };
    let mut response = envelope_response(status, env);
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/tasks/{}", env.id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// `POST /v1/tasks/batch`: up to 1000 submits in one store call; one result
/// per item, in order (`status` 201, 200 for an idempotent repeat, or the
/// item's error). Items are independent; a `traceparent` header applies to
/// every item without one.
pub async fn submit_batch(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    JsonBody(body): JsonBody<SubmitBatchBody>,
) -> Result<Response, ApiError> {
    if body.tasks.len() > MAX_SUBMIT_BATCH {
        return Err(ApiError::invalid_field(
            "tasks",
            format!("at most {MAX_SUBMIT_BATCH} items"),
        ));
    }
    let bodies = body
        .tasks
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let mut body: SubmitBody = serde_json::from_value(item).map_err(|e| {
                AppError::malformed(format!("tasks[{i}] is not a valid submit: {e}"))
            })?;
            // An idempotency key header would make every item one task.
            let key = body.idempotency_key.take();
            from_headers(&mut body, &headers);
            body.idempotency_key = key;
            Ok(body)
        })
        .collect();
    let results = state
        .app()
        .submit_many(&caller, bodies)
        .await
        .into_iter()
        .map(|r| match r {
            Ok(Submitted::Created(env)) => SubmitItemResult {
                status: 201,
                envelope: Some(raw_envelope(&env)),
                code: None,
                detail: None,
            },
            Ok(Submitted::Existing(env)) => SubmitItemResult {
                status: 200,
                envelope: Some(raw_envelope(&env)),
                code: None,
                detail: None,
            },
            Err(e) => {
                let (status, code, detail) = item_error(&e);
                SubmitItemResult {
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
        &SubmitBatchResponse { results },
    ))
}

/// `GET /v1/tasks/{id}`: the full envelope.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(id): PathArgs<String>,
) -> Result<Response, ApiError> {
    let id = parse_task_id(&id)?;
    let env = state.app().task(&caller, id).await?;
    Ok(envelope_response(StatusCode::OK, &env))
}

/// `DELETE /v1/tasks/{id}`: removes the task, whatever its status (admin).
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(id): PathArgs<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_task_id(&id)?;
    state.app().delete_task(&caller, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
