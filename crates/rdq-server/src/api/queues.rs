//! `/v1/queues`: every queue with its numbers, each queue's live policy and
//! flow (`…/flow`, `…/throttle`), and `/v1/capabilities`: what the store
//! can do. Thin adapters over the application layer (`rdq_app`).
//!
//! `PUT …/config` takes a partial document: the fields it names replace the
//! current ones (nested objects such as `backoff` and `callback` whole), the
//! result is validated (the callback target against the server's allowlist
//! too), stored, audited, and the dispatcher picks it up at once. On a store
//! whose configuration lives in the process (RabbitMQ) the answers carry
//! `rdq-config-scope: process`.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use rdq_api::flow::{QueueFlow, ThrottleBody};
use rdq_api::queues::{CapabilityList, QueueList, QueueListQuery};
use rdq_api::schema::{QueuePolicy, QueuePolicyPatch};
use rdq_app::flow::{MAX_THROTTLE_MS, throttle_until};
use rdq_app::{AppError, Caller};
use rdq_envelope::Timestamp;
use serde_json::Value;

use super::components::{ConfigScope, Problem400, Problem404, QueuePath};
use super::response::json_response;
use super::state::AppState;
use crate::problem::ApiError;
use crate::request::{JsonBody, JsonDocument, PathArgs, QueryArgs};

/// Response header saying a policy lives in this process only.
pub const CONFIG_SCOPE_HEADER: &str = "rdq-config-scope";

#[utoipa::path(
    get, path = "/v1/queues", operation_id = "listQueues", tag = "queues",
    summary = "Every queue the caller may see, with counts per status",
    params(QueueListQuery),
    responses(
        (status = 200, description = "The queues", body = QueueList),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `GET /v1/queues?names=a,b`: the queues the caller may see, with counts
/// per status where the store counts tasks, depths where it reports those.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    QueryArgs(query): QueryArgs<QueueListQuery>,
) -> Result<Response, ApiError> {
    let names: Vec<String> = query
        .names
        .as_deref()
        .map(|n| {
            n.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let queues = state.app().queues(&caller, &names).await?;
    Ok(json_response(StatusCode::OK, &QueueList { queues }))
}

#[utoipa::path(
    get, path = "/v1/capabilities", operation_id = "getCapabilities", tag = "queues",
    summary = "What the store behind the server can do, by capability",
    responses((status = 200, description = "The capabilities", body = CapabilityList)),
)]
/// `GET /v1/capabilities`: each capability of the store behind the server.
pub async fn capabilities(State(state): State<AppState>, _caller: Caller) -> Response {
    let capabilities: BTreeMap<String, bool> = state
        .app()
        .capabilities()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    json_response(StatusCode::OK, &CapabilityList { capabilities })
}

fn with_scope(state: &AppState, mut response: Response) -> Response {
    if state.app().config_is_local() {
        response
            .headers_mut()
            .insert(CONFIG_SCOPE_HEADER, HeaderValue::from_static("process"));
    }
    response
}

#[utoipa::path(
    get, path = "/v1/queues/{queue}/config", operation_id = "getQueueConfig", tag = "queues",
    summary = "The queue's live policy, defaults filled in (any scope on the queue; without admin, callback header values and URL secrets read as …)",
    params(QueuePath),
    responses(
        (status = 200, description = "The policy", body = QueuePolicy,
            headers(("rdq-config-scope" = inline(ConfigScope), description = "`process` on a store whose queue configuration lives in this server process (RabbitMQ); absent otherwise"))),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `GET /v1/queues/{queue}/config`: the live policy, defaults filled in.
pub async fn get_config(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
) -> Result<Response, ApiError> {
    let policy = state.app().queue_config(&caller, &queue).await?;
    Ok(with_scope(&state, json_response(StatusCode::OK, &policy)))
}

#[utoipa::path(
    put, path = "/v1/queues/{queue}/config", operation_id = "putQueueConfig", tag = "queues",
    summary = "Change the queue's policy: the fields given replace the current ones (admin; audited)",
    params(QueuePath),
    request_body = QueuePolicyPatch,
    responses(
        (status = 200, description = "The new policy", body = QueuePolicy,
            headers(("rdq-config-scope" = inline(ConfigScope), description = "`process` on a store whose queue configuration lives in this server process (RabbitMQ); absent otherwise")),
            links(("GetQueueConfig" = (operation_id = "getQueueConfig", parameters(("queue" = "$request.path.queue")))))),
    ),
)]
/// `PUT /v1/queues/{queue}/config`: applies a partial policy document.
pub async fn put_config(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
    JsonDocument(mut patch): JsonDocument,
) -> Result<Response, ApiError> {
    // `668.0` is the integer 668 wherever the document says integer; a
    // body rule's values are compared as written, so they stay as sent.
    rdq_api::int::normalize_integers(&mut patch, &["equals", "not_equals"]);
    let next = state
        .app()
        .set_queue_config(&caller, &queue, &patch)
        .await?;
    Ok(with_scope(&state, json_response(StatusCode::OK, &next)))
}

#[utoipa::path(
    get, path = "/v1/queues/{queue}/flow", operation_id = "getQueueFlow", tag = "queues",
    summary = "The queue's flow limits and how they stand now: tokens left, throttles, the busiest flow keys (any scope on the queue)",
    params(QueuePath),
    responses(
        (status = 200, description = "The flow limits and status", body = QueueFlow),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `GET /v1/queues/{queue}/flow`: the queue's flow limits and status.
pub async fn get_flow(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
) -> Result<Response, ApiError> {
    let flow = state.app().flow_status(&caller, &queue).await?;
    Ok(json_response(StatusCode::OK, &flow))
}

#[utoipa::path(
    post, path = "/v1/queues/{queue}/throttle", operation_id = "throttleQueue", tag = "queues",
    summary = "Throttle a flow key, or the whole queue, for a while: claims pass over its tasks until then, on every node (admin; audited)",
    params(QueuePath),
    request_body = ThrottleBody,
    responses(
        (status = 200, description = "The flow limits and status after the throttle", body = QueueFlow,
            links(("GetQueueFlow" = (operation_id = "getQueueFlow", parameters(("queue" = "$request.path.queue")))))),
        (status = 404, response = Problem404),
    ),
)]
/// `POST /v1/queues/{queue}/throttle`: throttles `flow_key` (or the queue)
/// for `for_ms` or until `until`; answers the flow status.
pub async fn throttle(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
    JsonBody(body): JsonBody<ThrottleBody>,
) -> Result<Response, ApiError> {
    let for_ms = match &body.for_ms {
        None => None,
        Some(Value::Number(n)) => Some(
            rdq_api::int::number_to_unsigned(n, MAX_THROTTLE_MS).map_err(|_| throttle_range())?,
        ),
        Some(_) => return Err(throttle_range().into()),
    };
    let until = throttle_until(for_ms, body.until.as_deref(), Timestamp::now())?;
    let app = state.app();
    app.throttle(&caller, &queue, body.flow_key.as_deref(), until)
        .await?;
    let flow = app.flow_status(&caller, &queue).await?;
    Ok(json_response(StatusCode::OK, &flow))
}

fn throttle_range() -> AppError {
    AppError::invalid_field(
        "for_ms",
        format!("must be an integer from 1 to {MAX_THROTTLE_MS} (7 days)"),
    )
}
