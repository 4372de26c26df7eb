//! `/v1/queues/{queue}/dead`: the DLQ — page it, show one task, redrive,
//! export, import, purge. Thin adapters over the application layer
//! (`rdq_app::dlq`), which checks the `admin` scope and audits. Export
//! writes JSONL here; an import's JSONL body is read here into
//! [`ImportEntry`] values, one per line ([`import_entries`]).

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rdq_api::DEFAULT_PAGE;
use rdq_api::dlq::{
    DlqPage, DryRunQuery, ExportQuery, ImportResult, PageQuery, PurgeResult, ReasonCount,
    ReasonsResult, RedriveBody, RedriveResult,
};
use rdq_app::Caller;
use rdq_app::dlq::{DeadFilter, ImportEntry, RedriveFilter};
use rdq_envelope::Envelope;

use super::components::{Problem400, Problem404, Problem409, QueuePath, TaskPath};
use super::response::{envelope_response, json_response, page_response};
use super::state::AppState;
use crate::problem::ApiError;
use crate::request::{JsonBody, PathArgs, QueryArgs, parse_task_id, read_body};

#[utoipa::path(
    get, path = "/v1/queues/{queue}/dead", operation_id = "listDead", tag = "dlq",
    summary = "A page of the queue's dead tasks, newest first (any scope on the queue)",
    params(QueuePath, PageQuery),
    responses(
        (status = 200, description = "The page", body = DlqPage),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `GET /v1/queues/{queue}/dead?limit=&cursor=&error_type=`: newest first,
/// with a cursor that stays stable while tasks come and go.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
    QueryArgs(query): QueryArgs<PageQuery>,
) -> Result<Response, ApiError> {
    let cursor = query.cursor.as_deref().map(parse_task_id).transpose()?;
    let page = state
        .app()
        .dlq_page(
            &caller,
            &queue,
            DeadFilter {
                error_type: query.error_type,
                reason: query.reason,
            },
            cursor,
            query.limit.unwrap_or(DEFAULT_PAGE),
        )
        .await?;
    Ok(page_response(&page))
}

#[utoipa::path(
    get, path = "/v1/queues/{queue}/dead/reasons", operation_id = "deadReasons", tag = "dlq",
    summary = "The queue's dead tasks counted by why they died, most first (any scope on the queue)",
    params(QueuePath),
    responses(
        (status = 200, description = "The counts", body = ReasonsResult),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `GET /v1/queues/{queue}/dead/reasons`: counts by dead reason.
pub async fn reasons(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
) -> Result<Response, ApiError> {
    let reasons = state.app().dlq_reasons(&caller, &queue).await?;
    Ok(json_response(
        StatusCode::OK,
        &ReasonsResult {
            queue,
            reasons: reasons
                .into_iter()
                .map(|r| ReasonCount {
                    reason: r.reason,
                    count: r.count,
                })
                .collect(),
        },
    ))
}

#[utoipa::path(
    post, path = "/v1/queues/{queue}/dead/redrive", operation_id = "redriveDead", tag = "dlq",
    summary = "Send dead tasks back to PENDING (admin; audited)",
    params(QueuePath),
    request_body = RedriveBody,
    responses(
        (status = 200, description = "How many and which", body = RedriveResult),
        (status = 404, response = Problem404),
        (status = 409, response = Problem409),
    ),
)]
/// `POST /v1/queues/{queue}/dead/redrive`: how many and which.
pub async fn redrive(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
    JsonBody(body): JsonBody<RedriveBody>,
) -> Result<Response, ApiError> {
    let ids = body
        .ids
        .as_deref()
        .map(rdq_app::tasks::parse_task_ids)
        .transpose()?;
    let result = state
        .app()
        .dlq_redrive(
            &caller,
            &queue,
            RedriveFilter {
                ids,
                error_type: body.error_type,
                reason: body.reason,
                limit: body.limit,
                dry_run: body.dry_run,
            },
        )
        .await?;
    Ok(json_response(StatusCode::OK, &result))
}

#[utoipa::path(
    get, path = "/v1/queues/{queue}/dead/{id}", operation_id = "getDead", tag = "dlq",
    summary = "One dead task of the queue with its attempt history; works on stores that cannot look a task up by id (a broker) by paging the DLQ (any scope on the queue)",
    params(QueuePath, TaskPath),
    responses(
        (status = 200, description = "The dead task", body = rdq_api::schema::Envelope),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `GET /v1/queues/{queue}/dead/{id}`: one dead task with its history. Unlike
/// `GET /v1/tasks/{id}` it works on stores that cannot find a task by id
/// (a broker), by paging the queue's DLQ.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs((queue, id)): PathArgs<(String, String)>,
) -> Result<Response, ApiError> {
    let id = parse_task_id(&id)?;
    let env = state.app().dlq_task(&caller, &queue, id).await?;
    Ok(envelope_response(StatusCode::OK, &env))
}

#[utoipa::path(
    get, path = "/v1/queues/{queue}/dead/export", operation_id = "exportDead", tag = "dlq",
    summary = "The queue's dead tasks as JSONL of canonical envelopes, oldest first, streamed (any scope on the queue)",
    params(QueuePath, ExportQuery),
    responses(
        (status = 200, description = "One envelope per line", body = String, content_type = "application/x-ndjson"),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `GET /v1/queues/{queue}/dead/export`: JSONL of canonical envelopes,
/// oldest first, streamed page by page.
pub async fn export(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
    QueryArgs(query): QueryArgs<ExportQuery>,
) -> Result<Response, ApiError> {
    // Fail before the 200 if the caller, queue or filter is bad: fetch the first page now.
    let filter = DeadFilter {
        error_type: query.error_type,
        reason: query.reason,
    };
    let first = state
        .app()
        .dlq_export_page(&caller, &queue, filter.clone(), None)
        .await?;
    let stream = futures::stream::unfold(
        (Some(first), state, caller, queue, filter),
        |(page, state, caller, queue, error_type)| async move {
            let page = page?;
            let mut chunk = Vec::with_capacity(page.items.len() * 512);
            for env in &page.items {
                env.encode_into(&mut chunk);
                chunk.push(b'\n');
            }
            let next = match page.next_cursor {
                Some(cursor) => match state
                    .app()
                    .dlq_export_page(&caller, &queue, error_type.clone(), Some(cursor))
                    .await
                {
                    Ok(p) => Some(p),
                    Err(e) => {
                        // The 200 is already sent: break the body off, so
                        // the client sees a failed transfer, not a short file.
                        tracing::error!(queue = %queue, error = %e, "DLQ export stopped");
                        return Some((
                            Err(std::io::Error::other(e.to_string())),
                            (None, state, caller, queue, error_type),
                        ));
                    }
                },
                None => None,
            };
            Some((
                Ok::<Bytes, std::io::Error>(Bytes::from(chunk)),
                (next, state, caller, queue, error_type),
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

#[utoipa::path(
    post, path = "/v1/queues/{queue}/dead/import", operation_id = "importDead", tag = "dlq",
    summary = "Import JSONL of DEAD envelopes of this queue; all or nothing (admin; audited). The body is read whatever its Content-Type; its limit is max_import_bytes",
    params(QueuePath, DryRunQuery),
    request_body(content = String, content_type = "application/x-ndjson",
        description = "One canonical envelope per line (what exportDead writes); a bad line is 400 INVALID_IMPORT listing the bad lines; an empty body imports nothing"),
    responses(
        (status = 200, description = "How many were imported", body = ImportResult),
        (status = 409, response = Problem409),
    ),
)]
/// `POST /v1/queues/{queue}/dead/import`: JSONL of DEAD envelopes of this
/// queue. All or nothing: one bad line and nothing is imported; the answer
/// lists the bad lines by number.
pub async fn import(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
    QueryArgs(query): QueryArgs<DryRunQuery>,
    request: Request,
) -> Result<Response, ApiError> {
    // Refused before a body of up to max_import_bytes is read; the use case
    // checks again, as for every front end.
    caller.require(rdq_app::Scope::Admin, &queue)?;
    let body = read_body(request, &()).await?;
    let result = state
        .app()
        .dlq_import(
            &caller,
            &queue,
            import_entries(&body),
            query.dry_run,
            |_| {},
        )
        .await?;
    Ok(json_response(StatusCode::OK, &result))
}

/// The entries of a JSONL import: one envelope per line, numbered from 1;
/// blank lines are skipped (but counted), a trailing `\r` is ignored.
pub fn import_entries(jsonl: &[u8]) -> Vec<ImportEntry> {
    jsonl
        .split(|&b| b == b'\n')
        .enumerate()
        .filter_map(|(i, raw)| {
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            (!raw.iter().all(u8::is_ascii_whitespace)).then(|| ImportEntry {
                line: i + 1,
                envelope: Envelope::decode(raw),
            })
        })
        .collect()
}

#[utoipa::path(
    delete, path = "/v1/queues/{queue}/dead", operation_id = "purgeDead", tag = "dlq",
    summary = "Remove every dead task of the queue (admin; audited)",
    params(QueuePath, DryRunQuery),
    responses(
        (status = 200, description = "How many were (or would be) removed", body = PurgeResult),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `DELETE /v1/queues/{queue}/dead`: removes every dead task of the queue.
pub async fn purge(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
    QueryArgs(query): QueryArgs<DryRunQuery>,
) -> Result<Response, ApiError> {
    let result = state
        .app()
        .dlq_purge(&caller, &queue, query.dry_run)
        .await?;
    Ok(json_response(StatusCode::OK, &result))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdq_envelope::Timestamp;

    #[test]
    fn jsonl_lines_are_numbered_as_in_the_file() {
        let env = Envelope::new("q", "h", b"x", "text/plain", Timestamp::EPOCH);
        let mut text = env.encode();
        text.extend(b"\n\n  \nnot json\r\n");
        text.extend(env.encode());
        text.extend(b"\r\n");
        let entries = import_entries(&text);
        let lines: Vec<(usize, bool)> = entries
            .iter()
            .map(|e| (e.line, e.envelope.is_ok()))
            .collect();
        assert_eq!(lines, vec![(1, true), (4, false), (5, true)]);
        assert_eq!(entries[2].envelope.as_ref().unwrap(), &env);
    }
}
