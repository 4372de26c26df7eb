//! Errors as the API shows them: `application/problem+json` (RFC 9457) with
//! rdq's stable `code` beside the standard `type`, `title`, `status` and
//! `detail`.
//!
//! Every refusal of the HTTP API is an [`ApiError`]. Engine and envelope errors
//! keep their own codes; the few codes only the server knows
//! (`MALFORMED_REQUEST`, `UNAUTHENTICATED`, `FORBIDDEN`, `QUEUE_NOT_FOUND`, …)
//! are defined here, so `docs/http-api.md` can list them from one place.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rdq_engine::EngineError;
use rdq_envelope::{EnvelopeError, ErrorCode};
use serde_json::{Map, Value, json};

/// Media type of every error body.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// The request body is not JSON, has a value of the wrong type, misses a
/// required field or names an unknown one.
pub const MALFORMED_REQUEST: &str = "MALFORMED_REQUEST";
/// No bearer token, or one the server does not know.
pub const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
/// The token is known but lacks the scope or the queue.
pub const FORBIDDEN: &str = "FORBIDDEN";
/// No queue of that name has tasks or a stored policy.
pub const QUEUE_NOT_FOUND: &str = "QUEUE_NOT_FOUND";
/// No route has this path.
pub const ROUTE_NOT_FOUND: &str = "ROUTE_NOT_FOUND";
/// The route exists but not with this method.
pub const METHOD_NOT_ALLOWED: &str = "METHOD_NOT_ALLOWED";
/// Some lines of a DLQ import are bad; nothing was imported.
pub const INVALID_IMPORT: &str = "INVALID_IMPORT";
/// A task with the imported id already exists.
pub const TASK_EXISTS: &str = "TASK_EXISTS";
/// The server failed in a way that is not the caller's fault.
pub const INTERNAL: &str = "INTERNAL";

/// One refusal of the HTTP API, rendered as a problem document.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    code: String,
    detail: String,
    extensions: Map<String, Value>,
}

impl ApiError {
    /// A problem with this status, stable code and explanation.
    pub fn new(status: StatusCode, code: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            status,
            code: code.into(),
            detail: detail.into(),
            extensions: Map::new(),
        }
    }

    /// 400 `MALFORMED_REQUEST`.
    pub fn malformed(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, MALFORMED_REQUEST, detail)
    }

    /// 400 `INVALID_FIELD` about the field at `path`.
    pub fn invalid_field(path: &str, detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidField.as_str(),
            format!("{path}: {}", detail.into()),
        )
        .with("field", json!(path))
    }

    /// 404 `QUEUE_NOT_FOUND`.
    pub fn queue_not_found(queue: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            QUEUE_NOT_FOUND,
            format!("no queue {queue:?}: it has no tasks and no stored policy"),
        )
    }

    /// 500 `INTERNAL`.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, INTERNAL, detail)
    }

    /// Adds an extension member to the problem document.
    #[must_use]
    pub fn with(mut self, key: &str, value: Value) -> Self {
        self.extensions.insert(key.to_owned(), value);
        self
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable code.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The explanation for people.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The problem document.
    pub fn to_json(&self) -> Value {
        let mut doc = Map::new();
        doc.insert("type".into(), json!(format!("urn:rdq:error:{}", self.code)));
        doc.insert("title".into(), json!(title(&self.code, self.status)));
        doc.insert("status".into(), json!(self.status.as_u16()));
        doc.insert("code".into(), json!(self.code));
        doc.insert("detail".into(), json!(self.detail));
        for (k, v) in &self.extensions {
            doc.insert(k.clone(), v.clone());
        }
        Value::Object(doc)
    }
}

/// A short, stable summary of a code, for the problem's `title`.
fn title(code: &str, status: StatusCode) -> String {
    let known = match code {
        MALFORMED_REQUEST => "Malformed request",
        UNAUTHENTICATED => "Authentication required",
        FORBIDDEN => "Not allowed",
        QUEUE_NOT_FOUND => "Queue not found",
        ROUTE_NOT_FOUND => "No such route",
        METHOD_NOT_ALLOWED => "Method not allowed",
        INVALID_IMPORT => "Invalid import",
        TASK_EXISTS => "Task already exists",
        INTERNAL => "Internal error",
        "LEASE_LOST" => "Lease lost",
        "TASK_NOT_FOUND" => "Task not found",
        "INVALID_TRANSITION" => "Invalid transition",
        "INVALID_POLICY" => "Invalid queue policy",
        "INVALID_ARGUMENT" => "Invalid argument",
        "UNSUPPORTED" => "Not supported by this store",
        "CORRUPT_STORE" => "Corrupt store",
        "STORE_UNAVAILABLE" => "Store unavailable",
        "MALFORMED_ENVELOPE" => "Malformed envelope",
        "UNSUPPORTED_ENVELOPE_VERSION" => "Unsupported envelope version",
        "INVALID_QUEUE_NAME" => "Invalid queue name",
        "INVALID_HANDLER_REF" => "Invalid handler ref",
        "INVALID_FIELD" => "Invalid field",
        "PAYLOAD_TOO_LARGE" => "Payload too large",
        "RESERVED_HEADER" => "Reserved header",
        _ => "",
    };
    if known.is_empty() {
        status.canonical_reason().unwrap_or("Error").to_owned()
    } else {
        known.to_owned()
    }
}

impl From<EnvelopeError> for ApiError {
    fn from(e: EnvelopeError) -> Self {
        let status = match e.code() {
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        };
        let detail = match e.path() {
            Some(path) => format!("{path}: {}", e.message()),
            None => e.message().to_owned(),
        };
        let err = Self::new(status, e.code().as_str(), detail);
        match e.path() {
            Some(path) => err.with("field", json!(path)),
            None => err,
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let status = match &e {
            EngineError::Envelope(inner) => return Self::from(inner.clone()),
            EngineError::LeaseLost(_) | EngineError::InvalidTransition(_) => StatusCode::CONFLICT,
            EngineError::TaskNotFound(_) => StatusCode::NOT_FOUND,
            EngineError::InvalidPolicy(_) | EngineError::InvalidArgument(_) => {
                StatusCode::BAD_REQUEST
            }
            EngineError::Unsupported(_) => StatusCode::NOT_IMPLEMENTED,
            EngineError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let text = e.to_string();
        // The display form starts with the code; the detail need not repeat it.
        let detail = text
            .strip_prefix(e.code())
            .and_then(|rest| rest.strip_prefix(": "))
            .unwrap_or(&text)
            .to_owned();
        Self::new(status, e.code(), detail)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.to_json().to_string();
        let mut response = (self.status, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
        );
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"rdq\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdq_envelope::TaskId;

    #[test]
    fn engine_errors_keep_their_code_and_get_the_right_status() {
        let lost = ApiError::from(EngineError::LeaseLost(TaskId::from_u128(1)));
        assert_eq!(lost.status(), StatusCode::CONFLICT);
        assert_eq!(lost.code(), "LEASE_LOST");
        assert!(!lost.detail().starts_with("LEASE_LOST"));
        let missing = ApiError::from(EngineError::TaskNotFound(TaskId::from_u128(1)));
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        let big = ApiError::from(EngineError::Envelope(EnvelopeError::new(
            ErrorCode::PayloadTooLarge,
            "too big",
        )));
        assert_eq!(big.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(big.code(), "PAYLOAD_TOO_LARGE");
    }

    #[test]
    fn the_problem_document_has_every_standard_member_and_the_code() {
        let doc = ApiError::malformed("not JSON").to_json();
        assert_eq!(doc["type"], "urn:rdq:error:MALFORMED_REQUEST");
        assert_eq!(doc["title"], "Malformed request");
        assert_eq!(doc["status"], 400);
        assert_eq!(doc["code"], "MALFORMED_REQUEST");
        assert_eq!(doc["detail"], "not JSON");
    }
}
