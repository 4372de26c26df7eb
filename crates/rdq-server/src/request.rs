//! Reading request bodies, query strings, path parameters and task ids into
//! typed values, with every refusal as a problem document
//! (`MALFORMED_REQUEST`, `INVALID_ARGUMENT`, or 413 `PAYLOAD_TOO_LARGE` past
//! the body limit) instead of axum's plain text.
//!
//! JSON bodies are accepted whatever their `Content-Type` says: clients that
//! forget the header are common and the body is parsed strictly anyway.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use rdq_envelope::{EnvelopeError, ErrorCode, TaskId};
use serde::de::DeserializeOwned;

use crate::problem::ApiError;

/// A JSON request body of type `T`. Every route that takes one documents
/// it as a required JSON object (`docs/openapi.json`), so an empty body (or
/// one of only whitespace) and any other JSON value (an array, which serde
/// would otherwise read as the struct's fields in order, a string, `null`)
/// are refused with 400 `MALFORMED_REQUEST`, like any other body that is
/// not the JSON value the route takes.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(req, state).await?;
        if first_byte(&bytes)? != b'{' {
            return Err(ApiError::malformed(
                "the request body is not a JSON object; this route takes one",
            ));
        }
        parse(&bytes).map(JsonBody)
    }
}

/// A JSON request body of any JSON value, for a route that validates the
/// document itself (a queue's configuration answers `INVALID_POLICY` for a
/// document that is not an object); only an empty body is refused here.
#[derive(Debug)]
pub struct JsonDocument(pub serde_json::Value);

impl<S> FromRequest<S> for JsonDocument
where
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(req, state).await?;
        first_byte(&bytes)?;
        parse(&bytes).map(JsonDocument)
    }
}

/// The first byte of a body that is not whitespace; an empty body is refused.
fn first_byte(bytes: &[u8]) -> Result<u8, ApiError> {
    bytes
        .iter()
        .copied()
        .find(|b| !b.is_ascii_whitespace())
        .ok_or_else(|| {
            ApiError::malformed("the request body is empty; this route takes a JSON object")
        })
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::malformed(format!("the request body is not valid: {e}")))
}

/// Reads the whole body, refusing one over the route's limit with 413.
pub async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(|rejection| {
        if let Some(stalled) = crate::listener::BodyStalled::find(&rejection) {
            // The listener's body-read timeout (`docs/server.md`, "The listener").
            ApiError::http_only(
                StatusCode::REQUEST_TIMEOUT,
                crate::listener::REQUEST_TIMEOUT,
                stalled.to_string(),
            )
        } else if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            EnvelopeError::new(
                ErrorCode::PayloadTooLarge,
                "the request body is larger than the server accepts (max_request_bytes)",
            )
            .into()
        } else {
            ApiError::malformed(format!("the request body could not be read: {rejection}"))
        }
    })
}

/// A query string of type `T`.
#[derive(Debug)]
pub struct QueryArgs<T>(pub T);

impl<S, T> FromRequestParts<S> for QueryArgs<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| QueryArgs(v))
            .map_err(|e| ApiError::malformed(format!("the query string is not valid: {e}")))
    }
}

/// Path parameters of type `T`, refused as a problem document (400
/// `INVALID_ARGUMENT`: a segment that is not UTF-8 once percent-decoded,
/// say) instead of axum's plain text.
#[derive(Debug)]
pub struct PathArgs<T>(pub T);

impl<S, T> FromRequestParts<S> for PathArgs<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(v)| PathArgs(v))
            .map_err(|e| {
                ApiError::invalid_argument(format!("the path is not valid: {}", e.body_text()))
            })
    }
}

/// Parses a task id from a path or body, refusing with 400 `INVALID_ARGUMENT`.
pub fn parse_task_id(text: &str) -> Result<TaskId, ApiError> {
    TaskId::parse(text).ok_or_else(|| {
        ApiError::invalid_argument(format!("{text:?} is not a task id (a 26-character ULID)"))
    })
}
