//! Rules for queue names, handler refs and user headers.

use std::collections::BTreeMap;

use crate::error::{EnvelopeError, ErrorCode};

/// Longest queue name or handler ref, in bytes.
pub const MAX_NAME_LEN: usize = 240;

/// Prefix reserved for headers the system sets (`rdq.source`, `rdq.submitted_by`).
pub const RESERVED_HEADER_PREFIX: &str = "rdq.";

/// True if `name` is 1–240 characters of `[a-z0-9._-]`, other than `.` and
/// `..`: names end up in URL paths (`/v1/queues/{queue}`) and file names,
/// where those two mean "here" and "up".
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && !is_dot_segment(name)
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'))
}

/// Checks a queue name, refusing with `INVALID_QUEUE_NAME`.
pub fn validate_queue_name(name: &str) -> Result<(), EnvelopeError> {
    check(name, ErrorCode::InvalidQueueName, "queue")
}

/// Checks a handler ref, refusing with `INVALID_HANDLER_REF`.
pub fn validate_handler_ref(name: &str) -> Result<(), EnvelopeError> {
    check(name, ErrorCode::InvalidHandlerRef, "handler_ref")
}

fn is_dot_segment(name: &str) -> bool {
    name == "." || name == ".."
}

fn check(name: &str, code: ErrorCode, field: &str) -> Result<(), EnvelopeError> {
    if is_valid_name(name) {
        return Ok(());
    }
    let why = if name.is_empty() {
        "must not be empty".to_owned()
    } else if is_dot_segment(name) {
        format!("{name:?} is a path segment, not a name")
    } else if name.len() > MAX_NAME_LEN {
        format!("is {} bytes long; the limit is {MAX_NAME_LEN}", name.len())
    } else {
        format!("{name:?} has characters outside [a-z0-9._-]")
    };
    Err(EnvelopeError::at(code, field, why))
}

/// Longest flow key, in bytes.
pub const MAX_FLOW_KEY_LEN: usize = 128;

/// True when `key` is 1–128 bytes of `[A-Za-z0-9._:/@=+-]`: a tenant id,
/// an account, a host name, an API route. A rule of the task itself (the
/// `rdq.flow_key` header it carries), so it lives with the other name rules
/// and every layer that shapes a task checks the same thing.
pub fn is_valid_flow_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_FLOW_KEY_LEN
        && key.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(b, b'.' | b'_' | b':' | b'/' | b'@' | b'=' | b'+' | b'-')
        })
}

/// Checks a flow key, refusing with `INVALID_FIELD` naming `flow_key`.
pub fn validate_flow_key(key: &str) -> Result<(), EnvelopeError> {
    if is_valid_flow_key(key) {
        return Ok(());
    }
    let why = if key.is_empty() {
        "must not be empty".to_owned()
    } else if key.len() > MAX_FLOW_KEY_LEN {
        format!(
            "is {} bytes long; the limit is {MAX_FLOW_KEY_LEN}",
            key.len()
        )
    } else {
        format!("{key:?} has characters outside [A-Za-z0-9._:/@=+-]")
    };
    Err(EnvelopeError::at(ErrorCode::InvalidField, "flow_key", why))
}

/// True if header `key` is in the reserved namespace: `rdq.` in any case
/// (`RDQ.x` and `Rdq.submitted_by` too), since header names are
/// case-insensitive in HTTP and in most of the languages that read them.
pub fn is_reserved_header(key: &str) -> bool {
    key.get(..RESERVED_HEADER_PREFIX.len())
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(RESERVED_HEADER_PREFIX))
}

/// Checks headers supplied by a user (on submit): none may use the `rdq.`
/// prefix, in any case.
///
/// Stored envelopes may carry `rdq.` headers; only the system sets them.
pub fn validate_user_headers(headers: &BTreeMap<String, String>) -> Result<(), EnvelopeError> {
    match headers.keys().find(|k| is_reserved_header(k)) {
        Some(key) => Err(EnvelopeError::at(
            ErrorCode::ReservedHeader,
            format!("headers.{key}"),
            format!(
                "header {key:?} uses the prefix {RESERVED_HEADER_PREFIX:?}, which is reserved for system metadata"
            ),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_charset_and_length_rule() {
        assert!(is_valid_name("payments.charge"));
        assert!(is_valid_name("a-b_c.0"));
        assert!(is_valid_name(&"a".repeat(240)));
        assert!(!is_valid_name(&"a".repeat(241)));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("Payments"));
        assert!(!is_valid_name("a b"));
        assert!(!is_valid_name("a/b"));
        assert!(!is_valid_name("myapp::jobs::SendEmail"));
        assert!(!is_valid_name("café"));
    }

    #[test]
    fn dot_segments_are_not_names() {
        for name in [".", ".."] {
            assert!(!is_valid_name(name), "{name}");
            let err = validate_queue_name(name).unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidQueueName);
            let err = validate_handler_ref(name).unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidHandlerRef);
        }
        assert!(is_valid_name("..."));
        assert!(is_valid_name(".a"));
        assert!(is_valid_name("a.."));
    }

    #[test]
    fn the_reserved_prefix_is_refused_in_any_case() {
        for key in ["RDQ.x", "Rdq.submitted_by", "rDq.source", "rdq."] {
            let mut h = BTreeMap::new();
            h.insert(key.to_owned(), "x".to_owned());
            let err = validate_user_headers(&h).unwrap_err();
            assert_eq!(err.code(), ErrorCode::ReservedHeader, "{key}");
        }
        for key in ["rdq", "rdqx.y", "r.dq", "é"] {
            let mut h = BTreeMap::new();
            h.insert(key.to_owned(), "x".to_owned());
            assert!(validate_user_headers(&h).is_ok(), "{key}");
        }
    }

    #[test]
    fn the_reserved_prefix_is_refused_from_users() {
        let mut h = BTreeMap::new();
        h.insert("traceparent".to_owned(), "00-ab-01".to_owned());
        assert!(validate_user_headers(&h).is_ok());
        h.insert("rdq.source".to_owned(), "x".to_owned());
        let err = validate_user_headers(&h).unwrap_err();
        assert_eq!(err.code(), ErrorCode::ReservedHeader);
        assert_eq!(err.path(), Some("headers.rdq.source"));
    }
}
