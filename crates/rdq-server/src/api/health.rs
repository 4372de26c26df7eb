//! Liveness, readiness, metrics and the OpenAPI document: the routes that
//! need no token (except `/metrics` when `public_metrics = false`).

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{AppState, json_response, openapi};
use crate::auth::Scope;
use crate::problem::ApiError;

/// `GET /healthz`: the process is up.
pub async fn healthz() -> Response {
    json_response(StatusCode::OK, &json!({"status": "ok"}))
}

/// `GET /readyz`: the store answers and the server is not shutting down.
pub async fn readyz(State(state): State<AppState>) -> Response {
    if !state.ready().load(Ordering::Acquire) {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "SHUTTING_DOWN",
            "the server is shutting down",
        )
        .into_response();
    }
    match state.engine().store().counts().await {
        Ok(_) => json_response(StatusCode::OK, &json!({"status": "ready"})),
        Err(e) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            e.code(),
            format!("the store does not answer: {e}"),
        )
        .into_response(),
    }
}

/// `GET /metrics`: the Prometheus text exposition.
pub async fn metrics(State(state): State<AppState>, parts: Parts) -> Result<Response, ApiError> {
    if !state.public_metrics() {
        state.authenticate(&parts)?.require_scope(Scope::Admin)?;
    }
    let counts = state.engine().store().counts().await.unwrap_or_default();
    let mut response = state.metrics().render(&counts).into_response();
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
