//! `/v1/tasks`: submit a task (or a batch), read it, delete it. Thin
//! adapters over the application layer (`rdq_app`): a submit body becomes
//! an [`rdq_app::submit::SubmitCommand`] here ([`submit_command`]), its
//! payload decoded from base64 or kept byte for byte as inline JSON.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use base64::Engine as _;
use rdq_api::IDEMPOTENCY_KEY_HEADER;
use rdq_api::schema::Envelope;
use rdq_api::tasks::{
    CancelBody, CancelResult, SubmitBatchBody, SubmitBatchResponse, SubmitBody, SubmitItemResult,
    TaskPageQuery,
};
use rdq_app::submit::SubmitCommand;
use rdq_app::{AppError, Caller};
use rdq_engine::Submitted;

use super::components::{
    BatchHeaders, Problem400, Problem404, Problem409, QueuePath, SubmitHeaders, TaskPath,
};
use super::response::{envelope_response, json_response, page_response, raw_envelope};
use super::state::AppState;
use crate::problem::{ApiError, item_error};
use crate::request::{JsonBody, PathArgs, QueryArgs, parse_task_id};

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

/// The command a submit body stands for. The payload comes either as
/// base64 (`payload`, opaque bytes, padding optional) or as inline JSON
/// (`payload_json`, stored byte for byte as sent, content type
/// `application/json` unless given), never both.
pub fn submit_command(body: SubmitBody) -> Result<SubmitCommand, AppError> {
    let (payload, json) = match (body.payload, body.payload_json) {
        (Some(_), Some(_)) => {
            return Err(AppError::invalid_field(
                "payload",
                "give either payload (base64) or payload_json, not both",
            ));
        }
        (Some(b64), None) => (decode_base64(&b64)?, false),
        (None, Some(raw)) => (raw.get().as_bytes().to_vec(), true),
        (None, None) => (Vec::new(), false),
    };
    let payload_content_type = match body.payload_content_type {
        None if json => Some("application/json".to_owned()),
        named => named,
    };
    Ok(SubmitCommand {
        queue: body.queue,
        handler_ref: body.handler_ref,
        handler_version: body.handler_version,
        payload,
        payload_content_type,
        headers: body.headers,
        delay_ms: body.delay_ms,
        priority: body.priority,
        idempotency_key: body.idempotency_key,
        flow_key: body.flow_key,
        unique: body
            .unique
            .map(rdq_app::submit::unique_request)
            .transpose()?,
    })
}

/// A text member of a refusal's problem document (`holder`, `field`, …).
fn extension(e: &AppError, name: &str) -> Option<String> {
    e.extensions()
        .get(name)
        .and_then(|v| v.as_str())
        .map(str::to_owned)
}

fn decode_base64(text: &str) -> Result<Vec<u8>, AppError> {
    let engine = base64::engine::general_purpose::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    engine
        .decode(text)
        .map_err(|e| AppError::invalid_field("payload", format!("is not standard base64: {e}")))
}

#[utoipa::path(
    post, path = "/v1/tasks", operation_id = "submitTask", tag = "tasks",
    summary = "Submit a task",
    params(SubmitHeaders),
    request_body = SubmitBody,
    responses(
        (status = 201, description = "The new task", body = Envelope,
            headers(("Location" = String, description = "/v1/tasks/{id} of the new task")),
            links(
                ("GetTask" = (operation_id = "getTask", parameters(("id" = "$response.body#/id")))),
                ("DeleteTask" = (operation_id = "deleteTask", parameters(("id" = "$response.body#/id")))),
                ("ClaimTasks" = (operation_id = "claimTasks", parameters(("queue" = "$response.body#/queue")))),
            )),
        (status = 200, description = "The original task (repeated idempotency key), or the unique key's holder (updated by on_conflict replace or debounce; unchanged with existing)", body = Envelope),
        (status = 409, response = Problem409),
    ),
)]
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
    let submitted = state.app().submit(&caller, submit_command(body)?).await?;
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

#[utoipa::path(
    post, path = "/v1/tasks/batch", operation_id = "submitTasks", tag = "tasks",
    summary = "Submit up to 1000 tasks in one store call; one result per item, in order",
    params(BatchHeaders),
    request_body = SubmitBatchBody,
    responses((status = 200, description = "One result per item", body = SubmitBatchResponse)),
)]
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
            submit_command(body)
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
                holder: None,
                hold: None,
                field: None,
            },
            Ok(Submitted::Existing(env)) => SubmitItemResult {
                status: 200,
                envelope: Some(raw_envelope(&env)),
                code: None,
                detail: None,
                holder: None,
                hold: None,
                field: None,
            },
            Err(e) => {
                let (status, code, detail) = item_error(&e);
                SubmitItemResult {
                    status,
                    envelope: None,
                    code,
                    detail,
                    holder: extension(&e, "holder"),
                    hold: extension(&e, "hold"),
                    field: extension(&e, "field"),
                }
            }
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &SubmitBatchResponse { results },
    ))
}

#[utoipa::path(
    get, path = "/v1/tasks/{id}", operation_id = "getTask", tag = "tasks",
    summary = "Read a task: the full envelope with its attempt history",
    params(TaskPath),
    responses(
        (status = 200, description = "The task", body = Envelope),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
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

#[utoipa::path(
    delete, path = "/v1/tasks/{id}", operation_id = "deleteTask", tag = "tasks",
    summary = "Delete a task, whatever its status (admin; audited)",
    params(TaskPath),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
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

#[cfg(test)]
mod tests {
    use super::*;

    fn command(json: &str) -> Result<SubmitCommand, AppError> {
        submit_command(serde_json::from_str(json).unwrap())
    }

    #[test]
    fn payload_json_is_kept_byte_for_byte_with_a_json_content_type() {
        let cmd = command(
            r#"{"queue":"q","handler_ref":"h","payload_json":{"n": 1.000000000000000000001}}"#,
        )
        .unwrap();
        assert_eq!(cmd.payload, br#"{"n": 1.000000000000000000001}"#);
        assert_eq!(
            cmd.payload_content_type.as_deref(),
            Some("application/json")
        );
    }

    #[test]
    fn base64_payloads_decode_with_or_without_padding() {
        for b64 in ["aGk=", "aGk"] {
            let cmd = command(&format!(
                r#"{{"queue":"q","handler_ref":"h","payload":"{b64}"}}"#
            ))
            .unwrap();
            assert_eq!(cmd.payload, b"hi");
            assert_eq!(cmd.payload_content_type, None);
        }
    }

    #[test]
    fn conflicting_or_broken_payloads_are_invalid() {
        for json in [
            r#"{"queue":"q","handler_ref":"h","payload":"aGk=","payload_json":1}"#,
            r#"{"queue":"q","handler_ref":"h","payload":"!!"}"#,
        ] {
            let err = command(json).unwrap_err();
            assert_eq!(err.code(), "INVALID_FIELD", "{json}");
            assert!(err.detail().starts_with("payload"), "{}", err.detail());
        }
    }

    #[test]
    fn unknown_fields_and_wrong_types_do_not_parse() {
        for json in [
            r#"{"queue":"q","handler_ref":"h","delay":5}"#,
            r#"{"queue":"q","handler_ref":"h","priority":300}"#,
            r#"{"queue":1,"handler_ref":"h"}"#,
            r#"{"handler_ref":"h"}"#,
        ] {
            assert!(serde_json::from_str::<SubmitBody>(json).is_err(), "{json}");
        }
    }
}

#[utoipa::path(
    post, path = "/v1/queues/{queue}/cancel", operation_id = "cancelTasks", tag = "tasks",
    summary = "Cancel PENDING tasks by id or filter: each becomes DEAD with reason CANCELLED (admin; audited)",
    params(QueuePath),
    request_body = CancelBody,
    responses(
        (status = 200, description = "How many and which", body = CancelResult),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
        (status = 409, response = Problem409),
    ),
)]
/// `POST /v1/queues/{queue}/cancel`: how many and which.
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
    JsonBody(body): JsonBody<CancelBody>,
) -> Result<Response, ApiError> {
    let result = state.app().cancel_tasks(&caller, &queue, body).await?;
    Ok(json_response(StatusCode::OK, &result))
}

#[utoipa::path(
    get, path = "/v1/queues/{queue}/tasks", operation_id = "listTasks", tag = "tasks",
    summary = "A page of the queue's tasks, newest first, by status, handler and header (any scope on the queue)",
    params(QueuePath, TaskPageQuery),
    responses(
        (status = 200, description = "The page", body = rdq_api::dlq::DlqPage),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `GET /v1/queues/{queue}/tasks?status=&handler_ref=&header=K=V&limit=&cursor=`.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
    QueryArgs(query): QueryArgs<TaskPageQuery>,
) -> Result<Response, ApiError> {
    let status = query
        .status
        .as_deref()
        .map(|s| {
            rdq_envelope::Status::parse(s).ok_or_else(|| {
                ApiError::invalid_field("status", "is not PENDING, IN_FLIGHT, SUCCEEDED or DEAD")
            })
        })
        .transpose()?;
    let headers = match query.header.as_deref() {
        None => std::collections::BTreeMap::new(),
        Some(pair) => match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                std::collections::BTreeMap::from([(k.to_owned(), v.to_owned())])
            }
            _ => return Err(ApiError::invalid_field("header", "is not KEY=VALUE")),
        },
    };
    let cursor = query.cursor.as_deref().map(parse_task_id).transpose()?;
    let filter = rdq_app::tasks::TaskFilter {
        status,
        handler_ref: query.handler_ref,
        headers,
    };
    let page = state
        .app()
        .tasks_page(
            &caller,
            &queue,
            filter,
            cursor,
            query.limit.unwrap_or(rdq_api::DEFAULT_PAGE),
        )
        .await?;
    Ok(page_response(&page))
}
