//! `/v1/tasks`: submit a task (or a batch), read it, delete it. Thin
//! adapters over the application layer (`rdq_app`).

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use rdq_api::IDEMPOTENCY_KEY_HEADER;
use rdq_api::tasks::{SubmitBatchBody, SubmitBatchResponse, SubmitBody, SubmitItemResult};
use rdq_app::{AppError, Caller};
use rdq_engine::Submitted;

use super::response::{envelope_response, json_response, raw_envelope};
use super::state::AppState;
use crate::problem::{ApiError, item_error};
use crate::request::{JsonBody, PathArgs, parse_task_id};

/// Most submits in one batch.
pub const MAX_SUBMIT_BATCH: usize = rdq_api::MAX_SUBMIT_BATCH;

/// Longest `Idempotency-Key` header, in bytes (as the body's `idempotency_key`).
const MAX_IDEMPOTENCY_KEY_HEADER: usize = 255;

/// The `Idempotency-Key` header, if present. A present header must be a key
/// (1 to 255 bytes of visible ASCII), whether or not the body has one, so
/// a malformed header is refused instead of silently ignored.
fn idempotency_header(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY_HEADER) else {
        return Ok(None);
    };
    // Visible ASCII and spaces only: `to_str` would also pass a tab.
    let printable = value.as_bytes().iter().all(|b| (0x20..=0x7e).contains(b));
    match value.to_str() {
        Ok(key) if printable && !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY_HEADER => {
            Ok(Some(key.to_owned()))
        }
        _ => Err(ApiError::invalid_field(
            "Idempotency-Key",
            format!("the header must be 1 to {MAX_IDEMPOTENCY_KEY_HEADER} bytes of visible ASCII"),
        )),
    }
}

/// Fills what a submit takes from request headers: an `Idempotency-Key`
/// when the body has no key, and W3C `traceparent` into the envelope's
/// headers unless the body has one (trace context rides there,
/// `docs/envelope.md`).
fn from_headers(body: &mut SubmitBody, headers: &HeaderMap, key: Option<String>) {
    if body.idempotency_key.is_none() {
        body.idempotency_key = key;
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
    let key = idempotency_header(&headers)?;
    from_headers(&mut body, &headers, key);
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
            from_headers(&mut body, &headers, None);
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
