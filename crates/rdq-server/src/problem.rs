//! Errors as the API shows them: `application/problem+json` (RFC 9457) with
//! rdq's stable `code` beside the standard `type`, `title`, `status` and
//! `detail`.
//!
//! Every refusal of the HTTP API is an [`ApiError`]: an application-layer
//! [`AppError`] (whose codes are declared once, in `rdq_app::error`) with
//! the HTTP status of its kind ([`rdq_app::ErrorKind::http_status`], the only
//! mapping from a kind to a status), or one of the codes only HTTP has
//! (`ROUTE_NOT_FOUND`, `METHOD_NOT_ALLOWED`, `REQUEST_TIMEOUT`).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rdq_app::AppError;
use rdq_engine::EngineError;
use rdq_envelope::EnvelopeError;
use serde_json::{Map, Value, json};

pub use rdq_api::problem::PROBLEM_CONTENT_TYPE;
pub use rdq_app::error::{
    FORBIDDEN, INTERNAL, INVALID_IMPORT, MALFORMED_REQUEST, QUEUE_NOT_FOUND, SHUTTING_DOWN,
    TASK_EXISTS, UNAUTHENTICATED,
};

/// No route has this path.
pub const ROUTE_NOT_FOUND: &str = "ROUTE_NOT_FOUND";
/// The route exists but not with this method.
pub const METHOD_NOT_ALLOWED: &str = "METHOD_NOT_ALLOWED";

/// One refusal of the HTTP API, rendered as a problem document.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    code: String,
    detail: String,
    extensions: Map<String, Value>,
}

impl ApiError {
    /// A problem with a code only HTTP has (no [`rdq_app::ErrorKind`]), with its status.
    pub(crate) fn http_only(
        status: StatusCode,
        code: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            status,
            code: code.into(),
            detail: detail.into(),
            extensions: Map::new(),
        }
    }

    /// 400 `MALFORMED_REQUEST`.
    pub fn malformed(detail: impl Into<String>) -> Self {
        AppError::malformed(detail).into()
    }

    /// 400 `INVALID_FIELD` about the field at `path`.
    pub fn invalid_field(path: &str, detail: impl Into<String>) -> Self {
        AppError::invalid_field(path, detail).into()
    }

    /// 400 `INVALID_ARGUMENT`.
    pub fn invalid_argument(detail: impl Into<String>) -> Self {
        AppError::invalid_argument(detail).into()
    }

    /// 500 `INTERNAL`.
    pub fn internal(detail: impl Into<String>) -> Self {
        AppError::internal(detail).into()
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
    match code {
        ROUTE_NOT_FOUND => "No such route".to_owned(),
        METHOD_NOT_ALLOWED => "Method not allowed".to_owned(),
        _ => rdq_app::error::title(code)
            .map(str::to_owned)
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("Error").to_owned()),
    }
}

/// The status, code and detail of a refused item of a batch answer.
pub fn item_error(e: &AppError) -> (u16, Option<String>, Option<String>) {
    (
        e.kind().http_status(),
        Some(e.code().to_owned()),
        Some(e.detail().to_owned()),
    )
}

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        let status = StatusCode::from_u16(e.kind().http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut err = Self::http_only(status, e.code(), e.detail());
        err.extensions = e.extensions().clone();
        err
    }
}

impl From<EnvelopeError> for ApiError {
    fn from(e: EnvelopeError) -> Self {
        AppError::from(e).into()
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        AppError::from(e).into()
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
            rdq_envelope::ErrorCode::PayloadTooLarge,
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
