//! `/v1/tasks`: submit a task, read it, delete it.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use rdq_engine::Submitted;
use serde_json::json;

use super::{AppState, envelope_response, parse_task_id};
use crate::audit::AuditRecord;
use crate::auth::{Caller, Scope};
use crate::problem::ApiError;
use crate::request::JsonBody;
use crate::submission::SubmitBody;

/// Request header a client may use instead of the body's `idempotency_key`.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// `POST /v1/tasks`: 201 with the new envelope, or 200 with the original
/// when the idempotency key was seen before on this queue.
pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    JsonBody(mut body): JsonBody<SubmitBody>,
) -> Result<Response, ApiError> {
    caller.require(Scope::Submit, &body.queue)?;
    if body.idempotency_key.is_none()
        && let Some(key) = headers
            .get(IDEMPOTENCY_KEY_HEADER)
            .and_then(|v| v.to_str().ok())
    {
        body.idempotency_key = Some(key.to_owned());
    }
    // W3C trace context rides in the envelope's headers (seed `000`).
    if !body.headers.contains_key("traceparent")
        && let Some(tp) = headers.get("traceparent").and_then(|v| v.to_str().ok())
    {
        body.headers.insert("traceparent".to_owned(), tp.to_owned());
    }
    let request = body.into_request(caller.name())?;
    let queue = request.queue.clone();
    let submitted = state.engine().submit(request).await?;
    let (status, env) = match &submitted {
        Submitted::Created(env) => {
            state.metrics().submitted(&queue, 1);
            (StatusCode::CREATED, env)
        }
        Submitted::Existing(env) => (StatusCode::OK, env),
    };
    let mut response = envelope_response(status, env);
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/tasks/{}", env.id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// `GET /v1/tasks/{id}`: the full envelope.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_task_id(&id)?;
    let env = state.engine().store().get(id).await?;
    caller.require_any(&[Scope::Submit, Scope::Work, Scope::Admin], &env.queue)?;
    Ok(envelope_response(StatusCode::OK, &env))
}

/// `DELETE /v1/tasks/{id}`: removes the task, whatever its status (admin).
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_task_id(&id)?;
    let env = state.engine().store().get(id).await?;
    caller.require(Scope::Admin, &env.queue)?;
    state.engine().store().delete(id).await?;
    state.audit().record(AuditRecord {
        who: caller.who().to_owned(),
        action: "task.delete",
        queue: Some(env.queue.clone()),
        count: Some(1),
        dry_run: false,
        detail: json!({"id": id.to_string(), "status": env.status.as_str()}),
    });
    Ok(StatusCode::NO_CONTENT)
}
