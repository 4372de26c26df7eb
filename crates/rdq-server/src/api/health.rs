//! Liveness, readiness, metrics and the OpenAPI document: the routes that
//! need no token (except `/metrics` when `public_metrics = false`).

use axum::extract::State;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rdq_app::Scope;
use serde::Serialize;
use utoipa::ToSchema;

use super::components::Problem503;
use super::response::json_response;
use super::state::AppState;
use crate::problem::ApiError;

/// The answer of `/healthz` and `/readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Status {
    status: Health,
}

/// What `/healthz` and `/readyz` say when they answer `200`.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum Health {
    /// The process is up.
    Ok,
    /// The process can serve.
    Ready,
}

#[utoipa::path(
    get, path = "/healthz", operation_id = "healthz", tag = "operations", summary = "Liveness",
    security(),
    responses((status = 200, description = "Up", body = Status)),
)]
/// `GET /healthz`: the process is up.
pub async fn healthz() -> Response {
    json_response(StatusCode::OK, &Status { status: Health::Ok })
}

#[utoipa::path(
    get, path = "/readyz", operation_id = "readyz", tag = "operations",
    summary = "Readiness: the store answers and can write, and the server is not shutting down",
    security(),
    responses(
        (status = 200, description = "Ready", body = Status),
        (status = 503, response = Problem503),
    ),
)]
/// `GET /readyz`: the server is not shutting down and the store can serve
/// and write (a check every store answers).
pub async fn readyz(State(state): State<AppState>) -> Response {
    match state.app().ready().await {
        Ok(()) => json_response(
            StatusCode::OK,
            &Status {
                status: Health::Ready,
            },
        ),
        Err(e) => ApiError::from(e).into_response(),
    }
}

#[utoipa::path(
    get, path = "/metrics", operation_id = "metrics", tag = "operations",
    summary = "Prometheus text exposition (needs an admin token when public_metrics = false)",
    security((), ("bearerAuth" = [])),
    responses((status = 200, description = "Metrics", body = String, content_type = "text/plain")),
)]
/// `GET /metrics`: the Prometheus text exposition.
pub async fn metrics(State(state): State<AppState>, parts: Parts) -> Result<Response, ApiError> {
    if !state.public_metrics() {
        state.authenticate(&parts)?.require_scope(Scope::Admin)?;
    }
    let mut response = state.app().metrics_text().await.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(response)
}
