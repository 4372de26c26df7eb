//! Refusals as gRPC statuses (`docs/grpc.md`, "Errors").
//!
//! The status code follows the error's kind; the stable code rides three
//! ways, so every client can read it: the status message starts with it
//! (`LEASE_LOST: …`), the trailing metadata has `rdq-code`, and the
//! standard `grpc-status-details-bin` carries a `google.rpc.Status` whose
//! details hold one `rdq.v1.Problem`.

use prost::Message;
use rdq_app::{AppError, ErrorKind};
use tonic::{Code, Status};

use crate::pb;

/// Metadata key of the stable code on every refusal.
pub const CODE_METADATA: &str = "rdq-code";

/// Type URL of the `rdq.v1.Problem` in a status's details.
pub const PROBLEM_TYPE_URL: &str = "type.googleapis.com/rdq.v1.Problem";

/// `google.rpc.Status`, the standard carrier of rich error details.
#[derive(Clone, PartialEq, Message)]
pub struct RpcStatus {
    /// The gRPC code.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// The message.
    #[prost(string, tag = "2")]
    pub message: String,
    /// The details.
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<prost_any::Any>,
}

/// `google.protobuf.Any`.
pub mod prost_any {
    /// A packed message and its type URL.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Any {
        /// The message's type.
        #[prost(string, tag = "1")]
        pub type_url: String,
        /// The encoded message.
        #[prost(bytes = "vec", tag = "2")]
        pub value: Vec<u8>,
    }
}

/// The gRPC code for an error kind (the table in `docs/grpc.md`).
pub fn grpc_code(e: &AppError) -> Code {
    match e.kind() {
        ErrorKind::Invalid => Code::InvalidArgument,
        ErrorKind::Unauthenticated => Code::Unauthenticated,
        ErrorKind::Forbidden => Code::PermissionDenied,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::Conflict if e.code() == "INVALID_TRANSITION" => Code::FailedPrecondition,
        ErrorKind::Conflict => Code::Aborted,
        ErrorKind::TooLarge => Code::ResourceExhausted,
        ErrorKind::Unsupported => Code::Unimplemented,
        ErrorKind::Unavailable => Code::Unavailable,
        _ => Code::Internal,
    }
}

/// The `rdq.v1.Problem` of an error; its `http_status` is the status the
/// same error gets over HTTP ([`ErrorKind::http_status`]).
pub fn problem(e: &AppError) -> pb::Problem {
    pb::Problem {
        code: e.code().to_owned(),
        detail: e.detail().to_owned(),
        http_status: e.kind().http_status().into(),
        extensions_json: if e.extensions().is_empty() {
            String::new()
        } else {
            serde_json::Value::Object(e.extensions().clone()).to_string()
        },
    }
}

/// The gRPC status of an error.
pub fn to_status(e: &AppError) -> Status {
    let code = grpc_code(e);
    let message = format!("{}: {}", e.code(), e.detail());
    let details = RpcStatus {
        code: code as i32,
        message: message.clone(),
        details: vec![prost_any::Any {
            type_url: PROBLEM_TYPE_URL.to_owned(),
            value: problem(e).encode_to_vec(),
        }],
    }
    .encode_to_vec();
    let mut status = Status::with_details(code, message, details.into());
    if let Ok(v) = e.code().parse() {
        status.metadata_mut().insert(CODE_METADATA, v);
    }
    status
}

/// The `rdq.v1.Problem` in a status, if it has one.
pub fn problem_of(status: &Status) -> Option<pb::Problem> {
    let rpc = RpcStatus::decode(status.details()).ok()?;
    rpc.details
        .iter()
        .find(|d| d.type_url == PROBLEM_TYPE_URL)
        .and_then(|d| pb::Problem::decode(d.value.as_slice()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_rides_in_message_metadata_and_details() {
        let e = AppError::invalid_field("queue", "bad");
        let s = to_status(&e);
        assert_eq!(s.code(), Code::InvalidArgument);
        assert!(s.message().starts_with("INVALID_FIELD: "));
        assert_eq!(
            s.metadata()
                .get(CODE_METADATA)
                .and_then(|v| v.to_str().ok()),
            Some("INVALID_FIELD")
        );
        let p = problem_of(&s).expect("a problem in the details");
        assert_eq!(p.code, "INVALID_FIELD");
        assert_eq!(p.http_status, 400);
        assert_eq!(p.extensions_json, r#"{"field":"queue"}"#);
    }

    #[test]
    fn lease_lost_is_aborted_and_invalid_transition_failed_precondition() {
        let lost = AppError::new(ErrorKind::Conflict, "LEASE_LOST", "gone");
        assert_eq!(grpc_code(&lost), Code::Aborted);
        let tr = AppError::new(ErrorKind::Conflict, "INVALID_TRANSITION", "no");
        assert_eq!(grpc_code(&tr), Code::FailedPrecondition);
    }
}
