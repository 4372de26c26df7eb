//! `/v1/sources`: the sources this server runs (`[[sources]]`;
//! `docs/sources.md`) with their status, and a source's cursors in the
//! store. Thin adapters over `rdq_app`'s source use cases.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use rdq_api::sources::{SourceCursorsReset, SourceList, SourceStatus};
use rdq_app::Caller;
use utoipa::IntoParams;

use super::components::{Problem400, Problem404};
use super::response::json_response;
use super::state::AppState;
use crate::problem::ApiError;
use crate::request::PathArgs;

/// The `{name}` path parameter.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SourcePath {
    /// Source name, `[a-z0-9._-]{1,120}`, not `.` or `..` (which no path can carry)
    #[param(
        min_length = 1,
        max_length = 120,
        pattern = "^(?:[a-z0-9_-][a-z0-9._-]{0,119}|\\.[a-z0-9_-][a-z0-9._-]{0,118}|\\.\\.[a-z0-9._-]{1,118})$"
    )]
    pub name: String,
}

#[utoipa::path(
    get, path = "/v1/sources", operation_id = "listSources", tag = "sources",
    summary = "Every source this server runs on a queue the caller may read, with its state, lag, rate, counters and last error",
    responses((status = 200, description = "The sources, by name", body = SourceList)),
)]
/// `GET /v1/sources`.
pub async fn list(State(state): State<AppState>, caller: Caller) -> Response {
    let sources = state.app().sources(&caller);
    json_response(StatusCode::OK, &SourceList { sources })
}

#[utoipa::path(
    get, path = "/v1/sources/{name}", operation_id = "getSource", tag = "sources",
    summary = "A source this server runs, with its status and partitions (any scope on its queue)",
    params(SourcePath),
    responses(
        (status = 200, description = "The source", body = SourceStatus),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `GET /v1/sources/{name}`: `404 SOURCE_NOT_FOUND` for a name this server
/// does not run.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(name): PathArgs<String>,
) -> Result<Response, ApiError> {
    let status = state.app().source(&caller, &name)?;
    Ok(json_response(StatusCode::OK, &status))
}

#[utoipa::path(
    delete, path = "/v1/sources/{name}/cursors", operation_id = "resetSourceCursors", tag = "sources",
    summary = "Remove the source's cursors from the store, so its next start takes its position from the source (admin on its queue; audited)",
    params(SourcePath),
    responses(
        (status = 200, description = "How many cursors were removed", body = SourceCursorsReset),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `DELETE /v1/sources/{name}/cursors`.
pub async fn reset_cursors(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(name): PathArgs<String>,
) -> Result<Response, ApiError> {
    let deleted = state.app().reset_source_cursors(&caller, &name).await?;
    Ok(json_response(
        StatusCode::OK,
        &SourceCursorsReset { name, deleted },
    ))
}
