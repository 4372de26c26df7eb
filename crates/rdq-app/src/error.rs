//! [`AppError`]: every refusal of a use case, with rdq's stable code and a
//! transport-neutral [`ErrorKind`] that each front end maps to its own
//! status (gRPC codes in `rdq-grpc`, CLI exit codes); the HTTP status of a
//! kind is [`ErrorKind::http_status`], the one place that says it.
//!
//! Engine and envelope errors keep their codes; the codes only the
//! application layer knows (`QUEUE_NOT_FOUND`, `FORBIDDEN`, …) are declared
//! here, once, so every front end and `docs/http-api.md` name them alike.

use rdq_engine::EngineError;
use rdq_envelope::{EnvelopeError, ErrorCode};
use serde_json::{Map, Value, json};

/// The request body or query is not valid (not JSON, a wrong type, an
/// unknown or missing field).
pub const MALFORMED_REQUEST: &str = "MALFORMED_REQUEST";
/// No bearer token, or one the server does not know.
pub const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
/// The token is known but lacks the scope or the queue.
pub const FORBIDDEN: &str = "FORBIDDEN";
/// No queue of that name has tasks or a stored policy.
pub const QUEUE_NOT_FOUND: &str = "QUEUE_NOT_FOUND";
/// No source of that name runs in this process (or its queue is not the
/// caller's to read).
pub const SOURCE_NOT_FOUND: &str = "SOURCE_NOT_FOUND";
/// Some lines of a DLQ import are bad; nothing was imported.
pub const INVALID_IMPORT: &str = "INVALID_IMPORT";
/// A task with the imported id already exists.
pub const TASK_EXISTS: &str = "TASK_EXISTS";
/// The server is shutting down.
pub const SHUTTING_DOWN: &str = "SHUTTING_DOWN";
/// The server failed in a way that is not the caller's fault.
pub const INTERNAL: &str = "INTERNAL";

/// What kind of refusal an error is, for a front end to pick its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Bad input (HTTP 400, gRPC `INVALID_ARGUMENT`).
    Invalid,
    /// No or unknown credentials (401, `UNAUTHENTICATED`).
    Unauthenticated,
    /// Known caller, not allowed (403, `PERMISSION_DENIED`).
    Forbidden,
    /// No such task or queue (404, `NOT_FOUND`).
    NotFound,
    /// The state changed under the caller: a lost lease, a transition the
    /// task's status does not allow (409, `ABORTED` / `FAILED_PRECONDITION`).
    Conflict,
    /// Larger than allowed (413, `RESOURCE_EXHAUSTED`).
    TooLarge,
    /// The store cannot do this (501, `UNIMPLEMENTED`).
    Unsupported,
    /// The store or the server cannot serve now (503, `UNAVAILABLE`).
    Unavailable,
    /// A fault of rdq's (500, `INTERNAL`).
    Internal,
}

impl ErrorKind {
    /// The HTTP status of this kind of refusal: the one mapping from a kind
    /// to an HTTP status, which the HTTP API answers with and gRPC's
    /// `rdq.v1.Problem` reports as `http_status`.
    pub const fn http_status(self) -> u16 {
        match self {
            Self::Invalid => 400,
            Self::Unauthenticated => 401,
            Self::Forbidden => 403,
            Self::NotFound => 404,
            Self::Conflict => 409,
            Self::TooLarge => 413,
            Self::Unsupported => 501,
            Self::Unavailable => 503,
            Self::Internal => 500,
        }
    }
}

/// One refusal: kind, stable code, explanation and optional extension
/// members (`field`, `errors`, `hint`, …).
#[derive(Debug, Clone, PartialEq)]
pub struct AppError {
    kind: ErrorKind,
    code: String,
    detail: String,
    extensions: Map<String, Value>,
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.detail)
    }
}

impl std::error::Error for AppError {}

impl AppError {
    /// An error of `kind` with this stable code and explanation.
    pub fn new(kind: ErrorKind, code: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind,
            code: code.into(),
            detail: detail.into(),
            extensions: Map::new(),
        }
    }

    /// `MALFORMED_REQUEST`.
    pub fn malformed(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, MALFORMED_REQUEST, detail)
    }

    /// `INVALID_FIELD` about the field at `path`.
    pub fn invalid_field(path: &str, detail: impl Into<String>) -> Self {
        Self::new(
            ErrorKind::Invalid,
            ErrorCode::InvalidField.as_str(),
            format!("{path}: {}", detail.into()),
        )
        .with("field", json!(path))
    }

    /// `INVALID_ARGUMENT`.
    pub fn invalid_argument(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, "INVALID_ARGUMENT", detail)
    }

    /// `QUEUE_NOT_FOUND`.
    pub fn queue_not_found(queue: &str) -> Self {
        Self::new(
            ErrorKind::NotFound,
            QUEUE_NOT_FOUND,
            format!("no queue {queue:?}: it has no tasks and no stored policy"),
        )
    }

    /// `INTERNAL`.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, INTERNAL, detail)
    }

    /// Adds an extension member.
    #[must_use]
    pub fn with(mut self, key: &str, value: Value) -> Self {
        self.extensions.insert(key.to_owned(), value);
        self
    }

    /// Adds a `hint` saying what the caller can do instead.
    #[must_use]
    pub fn with_hint(self, hint: &str) -> Self {
        self.with("hint", json!(hint))
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The stable code.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The explanation for people.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The extension members.
    pub fn extensions(&self) -> &Map<String, Value> {
        &self.extensions
    }
}

impl From<EnvelopeError> for AppError {
    fn from(e: EnvelopeError) -> Self {
        let kind = match e.code() {
            ErrorCode::PayloadTooLarge => ErrorKind::TooLarge,
            _ => ErrorKind::Invalid,
        };
        let detail = match e.path() {
            Some(path) => format!("{path}: {}", e.message()),
            None => e.message().to_owned(),
        };
        let err = Self::new(kind, e.code().as_str(), detail);
        match e.path() {
            Some(path) => err.with("field", json!(path)),
            None => err,
        }
    }
}

impl From<EngineError> for AppError {
    fn from(e: EngineError) -> Self {
        let kind = match &e {
            EngineError::Envelope(inner) => return Self::from(inner.clone()),
            EngineError::Schedule(inner) => return Self::from(inner.clone()),
            EngineError::ScheduleNotFound(_) => ErrorKind::NotFound,
            EngineError::LeaseLost(_) | EngineError::InvalidTransition(_) => ErrorKind::Conflict,
            EngineError::UniqueHeld { holder, hold } => {
                return Self::new(
                    ErrorKind::Conflict,
                    e.code(),
                    format!(
                        "the unique key is held by task {holder} (hold {hold}); nothing was written"
                    ),
                )
                .with("holder", json!(holder.to_string()))
                .with("hold", json!(hold));
            }
            EngineError::TaskNotFound(_) => ErrorKind::NotFound,
            EngineError::InvalidPolicy(_) | EngineError::InvalidArgument(_) => ErrorKind::Invalid,
            EngineError::Unsupported(_) => ErrorKind::Unsupported,
            EngineError::Unavailable(_) => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        };
        let text = e.to_string();
        // The display form starts with the code; the detail need not repeat it.
        let detail = text
            .strip_prefix(e.code())
            .and_then(|rest| rest.strip_prefix(": "))
            .unwrap_or(&text)
            .to_owned();
        // An engine's INVALID_ARGUMENT and INVALID_POLICY name their field
        // first ("flow.rate.burst: must be at least 1"): say which, as
        // INVALID_FIELD does.
        let field = matches!(
            e,
            EngineError::InvalidArgument(_) | EngineError::InvalidPolicy(_)
        )
        .then(|| detail.split_once(": ").map(|(f, _)| f.to_owned()))
        .flatten()
        .filter(|f| is_field_path(f));
        let err = Self::new(kind, e.code(), detail);
        match field {
            Some(f) => err.with("field", json!(f)),
            None => err,
        }
    }
}

impl From<rdq_schedule::ScheduleError> for AppError {
    /// A schedule's refusal: 400 with its stable code, naming its field
    /// (`spec.cron`, `tz`, `task.queue`, …).
    fn from(e: rdq_schedule::ScheduleError) -> Self {
        let field = e.field().to_owned();
        let text = e.to_string();
        let detail = if text.starts_with(&field) {
            text
        } else {
            format!("{field}: {text}")
        };
        Self::new(ErrorKind::Invalid, e.code(), detail).with("field", json!(field))
    }
}

/// True when `text` reads as a field path (`flow_key`, `error.type`).
fn is_field_path(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
}

/// A short, stable summary of a code, for a problem document's `title`.
pub fn title(code: &str) -> Option<&'static str> {
    Some(match code {
        MALFORMED_REQUEST => "Malformed request",
        UNAUTHENTICATED => "Authentication required",
        FORBIDDEN => "Not allowed",
        QUEUE_NOT_FOUND => "Queue not found",
        SOURCE_NOT_FOUND => "Source not found",
        INVALID_IMPORT => "Invalid import",
        TASK_EXISTS => "Task already exists",
        SHUTTING_DOWN => "Shutting down",
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
        "SCHEDULE_NOT_FOUND" => "Schedule not found",
        "INVALID_SCHEDULE_NAME" => "Invalid schedule name",
        "INVALID_CRON" => "Invalid cron pattern",
        "UNKNOWN_TIME_ZONE" => "Unknown time zone",
        "INVALID_INTERVAL" => "Invalid interval",
        "INVALID_WINDOW" => "Invalid window",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdq_envelope::TaskId;

    #[test]
    fn engine_errors_keep_their_code_and_get_the_right_kind() {
        let lost = AppError::from(EngineError::LeaseLost(TaskId::from_u128(1)));
        assert_eq!(lost.kind(), ErrorKind::Conflict);
        assert_eq!(lost.code(), "LEASE_LOST");
        assert!(!lost.detail().starts_with("LEASE_LOST"));
        let missing = AppError::from(EngineError::TaskNotFound(TaskId::from_u128(1)));
        assert_eq!(missing.kind(), ErrorKind::NotFound);
        let big = AppError::from(EngineError::Envelope(EnvelopeError::new(
            ErrorCode::PayloadTooLarge,
            "too big",
        )));
        assert_eq!(big.kind(), ErrorKind::TooLarge);
        assert_eq!(big.code(), "PAYLOAD_TOO_LARGE");
    }
}
