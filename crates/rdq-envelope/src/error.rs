//! The one error type of the envelope layer, with the stable codes callers branch on.

use std::fmt;

/// Stable, machine-readable reason an envelope (or a part of one) was refused.
///
/// The string forms (`MALFORMED_ENVELOPE`, …) are part of rdq's public contract:
/// they appear in API problem documents, CLI output and compliance fixtures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// Not JSON, not an object, a duplicate key, a missing required field or a
    /// value of the wrong JSON type.
    MalformedEnvelope,
    /// `envelope_version` is greater than this engine's.
    UnsupportedEnvelopeVersion,
    /// `queue` is empty, longer than 240 bytes or outside `[a-z0-9._-]`.
    InvalidQueueName,
    /// `handler_ref` is empty, longer than 240 bytes or outside `[a-z0-9._-]`.
    InvalidHandlerRef,
    /// A value of the right JSON type that breaks a rule (bad ULID, unknown status,
    /// negative count, bad timestamp…); the error names the field's path.
    InvalidField,
    /// The serialised envelope is larger than the configured limit.
    PayloadTooLarge,
    /// A user-supplied header uses the `rdq.` prefix reserved for the system.
    ReservedHeader,
}

impl ErrorCode {
    /// The stable string form of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MalformedEnvelope => "MALFORMED_ENVELOPE",
            Self::UnsupportedEnvelopeVersion => "UNSUPPORTED_ENVELOPE_VERSION",
            Self::InvalidQueueName => "INVALID_QUEUE_NAME",
            Self::InvalidHandlerRef => "INVALID_HANDLER_REF",
            Self::InvalidField => "INVALID_FIELD",
            Self::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Self::ReservedHeader => "RESERVED_HEADER",
        }
    }

    /// The code with this stable string form, if there is one.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::MalformedEnvelope,
            Self::UnsupportedEnvelopeVersion,
            Self::InvalidQueueName,
            Self::InvalidHandlerRef,
            Self::InvalidField,
            Self::PayloadTooLarge,
            Self::ReservedHeader,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an envelope was refused: a stable code, the JSON path of the offending
/// field where there is one, and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct EnvelopeError {
    code: ErrorCode,
    path: Option<String>,
    message: String,
}

impl EnvelopeError {
    /// An error with a code and message, about no particular field.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            path: None,
            message: message.into(),
        }
    }

    /// An error about the field at `path` (e.g. `attempts[0].error.type`).
    pub fn at(code: ErrorCode, path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code,
            path: Some(path.into()),
            message: message.into(),
        }
    }

    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The JSON path of the offending field, when the error is about one.
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// The human-readable explanation, without code or path.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(path) => write!(f, "{}: {}: {}", self.code, path, self.message),
            None => write!(f, "{}: {}", self.code, self.message),
        }
    }
}
