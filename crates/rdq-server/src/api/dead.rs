//! `/v1/queues/{queue}/dead`: the DLQ — page it, redrive, export, import,
//! purge. Every call needs the `admin` scope on the queue; redrive, import and
//! purge are audited (dry runs too, marked as such).

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rdq_engine::RedriveRequest;
use rdq_envelope::{TaskId, validate_queue_name};
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use super::{AppState, envelope_response, json_response, parse_task_id, raw_envelope};
use crate::audit::AuditRecord;
use crate::auth::{Caller, Scope};
use crate::dead_letters::{self, LineError};
use crate::problem::{ApiError, INVALID_IMPORT};
use crate::request::{JsonBody, QueryArgs, read_body};

/// Page size when the query names none.
pub const DEFAULT_PAGE: usize = 50;

/// Bad lines listed in an `INVALID_IMPORT` problem (the count is always given).
pub const MAX_REPORTED_LINES: usize = 100;

/// Query of `GET …/dead`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Page size, 1–1000 (default 50).
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Glob on the latest error's type.
    pub error_type: Option<String>,
}

/// A page of dead tasks.
#[derive(Debug, Serialize)]
pub struct DeadPage {
    /// The envelopes, newest first.
    pub items: Vec<Box<RawValue>>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

async fn existing_queue(state: &AppState, caller: &Caller, queue: &str) -> Result<(), ApiError> {
    caller.require(Scope::Admin, queue)?;
    validate_queue_name(queue)?;
    if dead_letters::queue_exists(state.engine(), queue).await? {
        Ok(())
    } else {
        Err(ApiError::queue_not_found(queue))
    }
}

/// `GET /v1/queues/{queue}/dead?limit=&cursor=&error_type=`: newest first,
/// with a cursor that stays stable while tasks come and go.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(queue): Path<String>,
    QueryArgs(query): QueryArgs<PageQuery>,
) -> Result<Response, ApiError> {
    existing_queue(&state, &caller, &queue).await?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=rdq_engine::store::MAX_PAGE).contains(&limit) {
        return Err(ApiError::invalid_field(
            "limit",
            format!("must be 1 to {}", rdq_engine::store::MAX_PAGE),
        ));
    }
    let cursor = query.cursor.as_deref().map(parse_task_id).transpose()?;
    let page = dead_letters::page(state.engine(), &queue, query.error_type, cursor, limit).await?;
    Ok(json_response(
        StatusCode::OK,
        &DeadPage {
            items: page.items.iter().map(raw_envelope).collect(),
            next_cursor: page.next_cursor.map(|c| c.to_string()),
        },
    ))
}

/// Body of `POST …/dead/redrive`; every field optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedriveBody {
    /// Only these tasks.
    pub ids: Option<Vec<String>>,
    /// Only tasks whose latest error type matches this glob.
    pub error_type: Option<String>,
    /// At most this many.
    pub limit: Option<usize>,
    /// Report, change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// `POST /v1/queues/{queue}/dead/redrive`: how many and which.
pub async fn redrive(
    State(state): State<AppState>,
    caller: Caller,
    Path(queue): Path<String>,
    JsonBody(body): JsonBody<RedriveBody>,
) -> Result<Response, ApiError> {
    existing_queue(&state, &caller, &queue).await?;
    let ids = body
        .ids
        .as_ref()
        .map(|ids| {
            ids.iter()
                .enumerate()
                .map(|(i, id)| {
                    TaskId::parse(id).ok_or_else(|| {
                        ApiError::invalid_field(&format!("ids[{i}]"), "is not a task id")
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let request = RedriveRequest {
        queue: queue.clone(),
        ids,
        error_type: body.error_type.clone(),
        limit: body.limit,
        dry_run: body.dry_run,
    };
    let redriven = state.engine().redrive(&request).await?;
    let ids: Vec<String> = redriven.iter().map(ToString::to_string).collect();
    state.audit().record(AuditRecord {
        who: caller.who().to_owned(),
        action: "dlq.redrive",
        queue: Some(queue.clone()),
        count: Some(ids.len() as u64),
        dry_run: body.dry_run,
        detail: json!({
            "filter": {"ids": body.ids, "error_type": body.error_type, "limit": body.limit},
            "ids": ids,
        }),
    });
    Ok(json_response(
        StatusCode::OK,
        &json!({"queue": queue, "dry_run": body.dry_run, "count": ids.len(), "ids": ids}),
    ))
}

/// Query of `GET …/dead/export`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    /// Only tasks whose latest error type matches this glob.
    pub error_type: Option<String>,
}

/// `GET /v1/queues/{queue}/dead/{id}`: one dead task with its history. Unlike
/// `GET /v1/tasks/{id}` it works on stores that cannot find a task by id
/// (a broker), by paging the queue's DLQ.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path((queue, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    caller.require(Scope::Admin, &queue)?;
    let id = parse_task_id(&id)?;
    let env = state.engine().dead_task(&queue, id).await?;
    Ok(envelope_response(StatusCode::OK, &env))
}

/// `GET /v1/queues/{queue}/dead/export`: JSONL of canonical envelopes,
/// oldest first, streamed page by page.
pub async fn export(
    State(state): State<AppState>,
    caller: Caller,
    Path(queue): Path<String>,
    QueryArgs(query): QueryArgs<ExportQuery>,
) -> Result<Response, ApiError> {
    existing_queue(&state, &caller, &queue).await?;
    // Fail before the 200 if the filter is bad: fetch the first page now.
    let first =
        dead_letters::export_page(state.engine(), &queue, query.error_type.clone(), None).await?;
    let stream = futures::stream::unfold(
        (Some(first), state, queue, query.error_type),
        |(page, state, queue, error_type)| async move {
            let page = page?;
            let mut chunk = Vec::with_capacity(page.items.len() * 512);
            for env in &page.items {
                env.encode_into(&mut chunk);
                chunk.push(b'\n');
            }
            let next = match page.next_cursor {
                Some(cursor) => match dead_letters::export_page(
                    state.engine(),
                    &queue,
                    error_type.clone(),
                    Some(cursor),
                )
                .await
                {
                    Ok(p) => Some(p),
                    Err(e) => {
                        // The 200 is already sent: break the body off, so
                        // the client sees a failed transfer, not a short file.
                        tracing::error!(queue = %queue, error = %e, "DLQ export stopped");
                        return Some((
                            Err(std::io::Error::other(e.to_string())),
                            (None, state, queue, error_type),
                        ));
                    }
                },
                None => None,
            };
            Some((
                Ok::<Bytes, std::io::Error>(Bytes::from(chunk)),
                (next, state, queue, error_type),
            ))
        },
    );
    let mut response = Body::from_stream(stream).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(response)
}

/// Query of `POST …/dead/import`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportQuery {
    /// Check every line, import nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// `POST /v1/queues/{queue}/dead/import`: JSONL of DEAD envelopes of this
/// queue. All or nothing: one bad line and nothing is imported; the answer
/// lists the bad lines by number.
pub async fn import(
    State(state): State<AppState>,
    caller: Caller,
    Path(queue): Path<String>,
    QueryArgs(query): QueryArgs<ImportQuery>,
    request: Request,
) -> Result<Response, ApiError> {
    caller.require(Scope::Admin, &queue)?;
    validate_queue_name(&queue)?;
    let body = read_body(request, &()).await?;
    let policy = state.engine().policy(&queue).await?;
    let mut plan = dead_letters::plan_import(&body, &queue, policy.max_envelope_bytes);
    dead_letters::check_existing(state.engine(), &mut plan).await?;
    if !plan.errors.is_empty() {
        return Err(invalid_import(&plan.errors));
    }
    let count = plan.envelopes.len() as u64;
    let imported = if query.dry_run {
        0
    } else {
        match dead_letters::apply_import(state.engine(), plan, |_| {}).await {
            Ok(n) => n,
            Err(failure) => {
                audit_import(&state, &caller, &queue, failure.stored, false);
                return Err(match failure.error {
                    Some(e) => ApiError::from(e).with("imported", json!(failure.stored)),
                    None => {
                        invalid_import(&failure.refused).with("imported", json!(failure.stored))
                    }
                });
            }
        }
    };
    audit_import(
        &state,
        &caller,
        &queue,
        if query.dry_run { count } else { imported },
        query.dry_run,
    );
    Ok(json_response(
        StatusCode::OK,
        &json!({"queue": queue, "dry_run": query.dry_run, "checked": count, "imported": imported}),
    ))
}

fn audit_import(state: &AppState, caller: &Caller, queue: &str, count: u64, dry_run: bool) {
    state.audit().record(AuditRecord {
        who: caller.who().to_owned(),
        action: "dlq.import",
        queue: Some(queue.to_owned()),
        count: Some(count),
        dry_run,
        detail: serde_json::Value::Null,
    });
}

fn invalid_import(errors: &[LineError]) -> ApiError {
    let shown: Vec<&LineError> = errors.iter().take(MAX_REPORTED_LINES).collect();
    ApiError::new(
        StatusCode::BAD_REQUEST,
        INVALID_IMPORT,
        format!(
            "{} line(s) cannot be imported (first: line {}); nothing was imported",
            errors.len(),
            errors.first().map_or(0, |e| e.line)
        ),
    )
    .with("error_count", json!(errors.len()))
    .with("errors", json!(shown))
}

/// Query of `DELETE …/dead`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurgeQuery {
    /// Count, remove nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// `DELETE /v1/queues/{queue}/dead`: removes every dead task of the queue.
pub async fn purge(
    State(state): State<AppState>,
    caller: Caller,
    Path(queue): Path<String>,
    QueryArgs(query): QueryArgs<PurgeQuery>,
) -> Result<Response, ApiError> {
    existing_queue(&state, &caller, &queue).await?;
    let purged = state
        .engine()
        .store()
        .purge(&queue, rdq_envelope::Status::Dead, query.dry_run)
        .await?;
    state.audit().record(AuditRecord {
        who: caller.who().to_owned(),
        action: "dlq.purge",
        queue: Some(queue.clone()),
        count: Some(purged),
        dry_run: query.dry_run,
        detail: serde_json::Value::Null,
    });
    Ok(json_response(
        StatusCode::OK,
        &json!({"queue": queue, "dry_run": query.dry_run, "purged": purged}),
    ))
}
