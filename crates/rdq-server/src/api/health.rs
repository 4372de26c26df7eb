//! Liveness, readiness, metrics and the OpenAPI document: the routes that
//! need no token (except `/metrics` when `public_metrics = false`).

use axum::extract::State;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rdq_app::Scope;
use serde_json::json;

use super::openapi;
use super::response::json_response;
use super::state::AppState;
use crate::problem::ApiError;

/// `GET /healthz`: the process is up.
pub async fn healthz() -> Response {
    json_response(StatusCode::OK, &json!({"status": "ok"}))
}

/// `GET /readyz`: the server is not shutting down and the store can serve
/// and write (a check every store answers).
pub async fn readyz(State(state): State<AppState>) -> Response {
    match state.app().ready().await {
        Ok(()) => json_response(StatusCode::OK, &json!({"status": "ready"})),
        Err(e) => ApiError::from(e).into_response(),
    }
}

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

/// `GET /openapi.json`: the API's OpenAPI 3 document.
pub async fn openapi() -> Response {
    json_response(StatusCode::OK, &openapi::document())
}
