//! gRPC status codes by number and by name: a gRPC target's `status_map`
//! keys name a code (`"NOT_FOUND"`, any case) or give its number (`"5"`);
//! the upper-case name is what spans' `error.type` and a failure's
//! `detail.code` say, and the CamelCase name makes the error type
//! (`grpc.NotFound`).

use tonic::Code;

/// Every gRPC status code, by number: the code, its upper-case name and
/// its CamelCase name.
pub const CODES: [(Code, &str, &str); 17] = [
    (Code::Ok, "OK", "Ok"),
    (Code::Cancelled, "CANCELLED", "Cancelled"),
    (Code::Unknown, "UNKNOWN", "Unknown"),
    (Code::InvalidArgument, "INVALID_ARGUMENT", "InvalidArgument"),
    (
        Code::DeadlineExceeded,
        "DEADLINE_EXCEEDED",
        "DeadlineExceeded",
    ),
    (Code::NotFound, "NOT_FOUND", "NotFound"),
    (Code::AlreadyExists, "ALREADY_EXISTS", "AlreadyExists"),
    (
        Code::PermissionDenied,
        "PERMISSION_DENIED",
        "PermissionDenied",
    ),
    (
        Code::ResourceExhausted,
        "RESOURCE_EXHAUSTED",
        "ResourceExhausted",
    ),
    (
        Code::FailedPrecondition,
        "FAILED_PRECONDITION",
        "FailedPrecondition",
    ),
    (Code::Aborted, "ABORTED", "Aborted"),
    (Code::OutOfRange, "OUT_OF_RANGE", "OutOfRange"),
    (Code::Unimplemented, "UNIMPLEMENTED", "Unimplemented"),
    (Code::Internal, "INTERNAL", "Internal"),
    (Code::Unavailable, "UNAVAILABLE", "Unavailable"),
    (Code::DataLoss, "DATA_LOSS", "DataLoss"),
    (Code::Unauthenticated, "UNAUTHENTICATED", "Unauthenticated"),
];

/// A `status_map` key of a gRPC target: a code name (any case) or number.
pub fn parse_code(key: &str) -> Option<u16> {
    if let Ok(n) = key.parse::<u16>() {
        return (usize::from(n) < CODES.len()).then_some(n);
    }
    CODES
        .iter()
        .position(|(_, name, _)| name.eq_ignore_ascii_case(key))
        .and_then(|i| u16::try_from(i).ok())
}

/// The upper-case name of `code` (`UNAVAILABLE`).
pub fn code_name(code: Code) -> &'static str {
    names(code).0
}

/// The CamelCase name of `code` (`Unavailable`).
pub fn camel_name(code: Code) -> &'static str {
    names(code).1
}

fn names(code: Code) -> (&'static str, &'static str) {
    CODES
        .get(code as usize)
        .map_or(("UNKNOWN", "Unknown"), |(_, upper, camel)| (*upper, *camel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_sits_at_its_number() {
        for (i, (code, _, _)) in CODES.iter().enumerate() {
            assert_eq!(*code as usize, i);
        }
    }

    #[test]
    fn keys_are_names_in_any_case_or_numbers_in_range() {
        assert_eq!(parse_code("NOT_FOUND"), Some(5));
        assert_eq!(parse_code("unavailable"), Some(14));
        assert_eq!(parse_code("16"), Some(16));
        assert_eq!(parse_code("17"), None);
        assert_eq!(parse_code("NOPE"), None);
        assert_eq!(code_name(Code::DeadlineExceeded), "DEADLINE_EXCEEDED");
        assert_eq!(camel_name(Code::DeadlineExceeded), "DeadlineExceeded");
    }
}
