//! `/v1/queues/{queue}/dead`: the DLQ — page it, show one task, redrive,
//! export, import, purge. Thin adapters over the application layer
//! (`rdq_app::dlq`), which checks the `admin` scope and audits.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rdq_api::DEFAULT_PAGE;
use rdq_api::dlq::{DlqPage, DryRunQuery, ExportQuery, PageQuery, RedriveBody};
use rdq_app::Caller;
use rdq_app::dlq::RedriveFilter;
use rdq_envelope::TaskId;

use super::response::{envelope_response, json_response, raw_envelope};
use super::state::AppState;
use crate::problem::ApiError;
use crate::request::{JsonBody, PathArgs, QueryArgs, parse_task_id, read_body};

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
            query.error_type,
            cursor,
            query.limit.unwrap_or(DEFAULT_PAGE),
        )
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &DlqPage {
            items: page.items.iter().map(raw_envelope).collect(),
            next_cursor: page.next_cursor.map(|c| c.to_string()),
        },
    ))
}

/// `POST /v1/queues/{queue}/dead/redrive`: how many and which.
pub async fn redrive(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
    JsonBody(body): JsonBody<RedriveBody>,
) -> Result<Response, ApiError> {
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
    let result = state
        .app()
        .dlq_redrive(
            &caller,
            &queue,
            RedriveFilter {
                ids,
                error_type: body.error_type,
                limit: body.limit,
                dry_run: body.dry_run,
            },
        )
        .await?;
    Ok(json_response(StatusCode::OK, &result))
}

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

/// `GET /v1/queues/{queue}/dead/export`: JSONL of canonical envelopes,
/// oldest first, streamed page by page.
pub async fn export(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
    QueryArgs(query): QueryArgs<ExportQuery>,
) -> Result<Response, ApiError> {
    // Fail before the 200 if the caller, queue or filter is bad: fetch the first page now.
    let first = state
        .app()
        .dlq_export_page(&caller, &queue, query.error_type.clone(), None)
        .await?;
    let stream = futures::stream::unfold(
        (Some(first), state, caller, queue, query.error_type),
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
        .dlq_import(&caller, &queue, &body, query.dry_run, |_| {})
        .await?;
    Ok(json_response(StatusCode::OK, &result))
}

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
