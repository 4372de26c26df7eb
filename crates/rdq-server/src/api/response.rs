//! Response bodies of the HTTP API: envelopes in their canonical encoding
//! (whole, or embedded in a larger document byte for byte) and other values
//! as JSON.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rdq_envelope::Envelope;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::problem::ApiError;

/// An envelope as a response body, in its canonical encoding.
pub fn envelope_response(status: StatusCode, env: &Envelope) -> Response {
    json_bytes(status, env.encode())
}

/// An envelope as an embeddable JSON value, byte for byte its canonical encoding.
pub fn raw_envelope(env: &Envelope) -> Box<RawValue> {
    RawValue::from_string(env.encode_string()).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// `value` serialised as a JSON response.
pub fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => json_bytes(status, bytes),
        Err(e) => {
            ApiError::internal(format!("the response did not serialise: {e}")).into_response()
        }
    }
}

fn json_bytes(status: StatusCode, bytes: Vec<u8>) -> Response {
    let mut response = (status, Body::from(bytes)).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A page of tasks as `GET …/dead` and `GET …/tasks` answer it.
pub fn page_response(page: &rdq_engine::Page) -> Response {
    json_response(
        StatusCode::OK,
        &rdq_api::dlq::DlqPage {
            items: page.items.iter().map(raw_envelope).collect(),
            next_cursor: page.next_cursor.map(|c| c.to_string()),
        },
    )
}
