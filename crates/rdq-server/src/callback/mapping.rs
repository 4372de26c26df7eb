//! From what a callback did to the canonical outcome (`docs/outcomes.md`, "Callback
//! response mapping — server mode"), as pure functions so every row of the
//! tables is a unit test: [`decide`] for an HTTP target's answer,
//! [`decide_grpc`] for a gRPC target's status.
//!
//! **HTTP.** Order of precedence: a matching body rule, then `status_map`
//! (exact code, then class), then the default: 2xx SUCCESS; 408, 429 and 5xx
//! RETRYABLE_FAILURE; every other status (other 4xx, and 1xx/3xx, since
//! redirects are not followed) PERMANENT_FAILURE; a timeout, a refused or
//! failed connection, or a broken response RETRYABLE_FAILURE.
//!
//! A retryable 429 or 503 with a `Retry-After` header defers the task by
//! that long instead (no attempt spent), capped by the server's
//! `max_retry_after_ms`, until the task has been deferred `max_deferrals`
//! times; after that the answer counts as a retryable failure so a receiver
//! that always says "later" still lets the task reach the DLQ. The
//! dispatcher also throttles the task's flow key until then
//! ([`super::dispatcher::back_pressure`]).
//!
//! Every failure records what happened: `http.Status503` (with the status,
//! the URL and a bounded excerpt of the body in the message and in `detail`),
//! `http.Timeout`, `http.Connect`, `http.Error`, or a body rule's error type
//! (default `http.ResponseBody`).
//!
//! **gRPC.** The status decides, `status_map` first (keys are code names
//! such as `"NOT_FOUND"` or numbers such as `"5"`), then the default:
//! `OK` SUCCESS; `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED`,
//! `ABORTED` RETRYABLE_FAILURE; every other code PERMANENT_FAILURE. The
//! error recorded is `grpc.<Code>` (`grpc.Unavailable`, …) with the status
//! message, and the code, message and details (base64) in `detail`.

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use rdq_engine::{FailureKind, Settlement};
use rdq_envelope::{ErrorInfo, truncate_text};
use serde_json::{Value, json};
use tonic::{Code, Status};

use super::grpc_status::{camel_name, code_name};
use super::target::{CallbackTarget, MappedOutcome};

/// Error type of a callback that did not answer in time.
pub const TIMEOUT_ERROR_TYPE: &str = "http.Timeout";
/// Error type of a callback whose connection could not be made.
pub const CONNECT_ERROR_TYPE: &str = "http.Connect";
/// Error type of any other transport failure (a reset, a broken response).
pub const TRANSPORT_ERROR_TYPE: &str = "http.Error";
/// Default error type of a failure decided by a body rule.
pub const BODY_RULE_ERROR_TYPE: &str = "http.ResponseBody";

/// What a callback request came to.
#[derive(Debug, Clone, PartialEq)]
pub enum CallResult {
    /// The receiver answered.
    Answered {
        /// HTTP status code.
        status: u16,
        /// The start of the body (at most the read limit).
        body: Vec<u8>,
        /// The `Retry-After` header, if any.
        retry_after: Option<String>,
    },
    /// No complete answer within the target's timeout.
    TimedOut,
    /// The connection could not be made (refused, unreachable, DNS).
    ConnectFailed(String),
    /// The request failed another way after connecting.
    Failed(String),
}

/// The settlement for `result`, for a task deferred `deferral_count` times.
pub fn decide(
    target: &CallbackTarget,
    result: &CallResult,
    deferral_count: u32,
    excerpt_bytes: usize,
    max_retry_after: Duration,
    now: SystemTime,
) -> Settlement {
    let url = target.display_url();
    let (status, body, retry_after) = match result {
        CallResult::Answered {
            status,
            body,
            retry_after,
        } => (*status, body, retry_after),
        CallResult::TimedOut => {
            return failure(
                ErrorInfo::new(
                    TIMEOUT_ERROR_TYPE,
                    &format!(
                        "POST {url} did not answer within {} ms",
                        target.timeout.as_millis()
                    ),
                )
                .with_detail(json!({"url": url, "timeout_ms": target.timeout.as_millis() as u64})),
                MappedOutcome::RetryableFailure,
            );
        }
        CallResult::ConnectFailed(why) => {
            return failure(
                ErrorInfo::new(
                    CONNECT_ERROR_TYPE,
                    &format!("POST {url}: cannot connect: {why}"),
                )
                .with_detail(json!({"url": url})),
                MappedOutcome::RetryableFailure,
            );
        }
        CallResult::Failed(why) => {
            return failure(
                ErrorInfo::new(TRANSPORT_ERROR_TYPE, &format!("POST {url}: {why}"))
                    .with_detail(json!({"url": url})),
                MappedOutcome::RetryableFailure,
            );
        }
    };

    let excerpt = truncate_text(&String::from_utf8_lossy(body), excerpt_bytes);
    let detail = |rule: Option<usize>| {
        let mut d = json!({"url": url, "status": status, "body": excerpt});
        if let Some(i) = rule {
            d["body_rule"] = json!(i);
        }
        d
    };

    if !target.body_rules.is_empty()
        && let Ok(parsed) = serde_json::from_slice::<Value>(body)
        && let Some((i, rule)) = target
            .body_rules
            .iter()
            .enumerate()
            .find(|(_, r)| r.matches(&parsed))
    {
        if rule.outcome == MappedOutcome::Success {
            return Settlement::Success;
        }
        let error_type = rule.error_type.as_deref().unwrap_or(BODY_RULE_ERROR_TYPE);
        return failure(
            ErrorInfo::new(
                error_type,
                &format!(
                    "POST {url} answered {status} and body rule {i} (pointer {:?}) matched: {excerpt}",
                    rule.pointer
                ),
            )
            .with_detail(detail(Some(i))),
            rule.outcome,
        );
    }

    let outcome = target
        .mapped_status(status)
        .unwrap_or_else(|| default_outcome(status));
    if outcome == MappedOutcome::Success {
        return Settlement::Success;
    }
    if outcome == MappedOutcome::RetryableFailure
        && matches!(status, 429 | 503)
        && deferral_count < target.max_deferrals
        && let Some(delay) = retry_after
            .as_deref()
            .and_then(|h| parse_retry_after(h, now))
    {
        let delay_ms = u64::try_from(delay.min(max_retry_after).as_millis()).unwrap_or(u64::MAX);
        return Settlement::Defer { delay_ms };
    }
    failure(
        ErrorInfo::new(
            format!("http.Status{status}"),
            &format!("POST {url} answered {status}: {excerpt}"),
        )
        .with_detail(detail(None)),
        outcome,
    )
}

/// The default outcome of an HTTP status code (`docs/outcomes.md`).
pub fn default_outcome(status: u16) -> MappedOutcome {
    match status {
        200..=299 => MappedOutcome::Success,
        408 | 429 | 500..=599 => MappedOutcome::RetryableFailure,
        _ => MappedOutcome::PermanentFailure,
    }
}

/// The settlement for the status a gRPC call ended with (`Ok` stands for
/// an `OK` answer).
pub fn decide_grpc(
    target: &CallbackTarget,
    result: &Result<(), Status>,
    excerpt_bytes: usize,
) -> Settlement {
    let (code, message, details) = match result {
        Ok(()) => (Code::Ok, "", &[][..]),
        Err(s) => (s.code(), s.message(), s.details()),
    };
    let outcome = target
        .mapped_grpc(code as u16)
        .unwrap_or_else(|| default_grpc_outcome(code));
    if outcome == MappedOutcome::Success {
        return Settlement::Success;
    }
    let name = code_name(code);
    let url = target.display_url();
    let message = truncate_text(message, excerpt_bytes);
    let mut detail =
        json!({"url": url, "code": name, "code_number": code as i32, "message": message});
    if !details.is_empty() {
        detail["details_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(details));
    }
    let text = if message.is_empty() {
        format!("rdq.v1.Handler/Handle at {url}: {name}")
    } else {
        format!("rdq.v1.Handler/Handle at {url}: {name}: {message}")
    };
    failure(
        ErrorInfo::new(format!("grpc.{}", camel_name(code)), &text).with_detail(detail),
        outcome,
    )
}

/// The default outcome of a gRPC status code.
pub fn default_grpc_outcome(code: Code) -> MappedOutcome {
    match code {
        Code::Ok => MappedOutcome::Success,
        Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted | Code::Aborted => {
            MappedOutcome::RetryableFailure
        }
        _ => MappedOutcome::PermanentFailure,
    }
}

fn failure(error: ErrorInfo, outcome: MappedOutcome) -> Settlement {
    let kind = match outcome {
        MappedOutcome::PermanentFailure => FailureKind::Permanent,
        _ => FailureKind::Retryable,
    };
    Settlement::Failure { error, kind }
}

/// A `Retry-After` value: delay-seconds or an HTTP-date (past dates mean now).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdq_engine::QueueConfig;
    use serde_json::json;

    use crate::callback::settings::CallbackSettings;

    fn target(extra: Value) -> CallbackTarget {
        let mut doc = json!({"url": "http://127.0.0.1:9/hook?token=secret", "timeout_ms": 500});
        if let (Value::Object(d), Value::Object(e)) = (&mut doc, extra) {
            d.extend(e);
        }
        let mut policy = QueueConfig::default().with_section("callback", doc);
        policy.policy.max_attempts = 3;
        CallbackTarget::from_config(&policy, &CallbackSettings::default())
            .unwrap()
            .unwrap()
    }

    fn answered(status: u16, body: &str, retry_after: Option<&str>) -> CallResult {
        CallResult::Answered {
            status,
            body: body.as_bytes().to_vec(),
            retry_after: retry_after.map(str::to_owned),
        }
    }

    fn run(t: &CallbackTarget, r: &CallResult) -> Settlement {
        decide(
            t,
            r,
            0,
            64,
            Duration::from_secs(3600),
            SystemTime::UNIX_EPOCH,
        )
    }

    fn kind_and_type(s: &Settlement) -> (FailureKind, String) {
        match s {
            Settlement::Failure { error, kind } => (*kind, error.error_type.clone()),
            other => panic!("not a failure: {other:?}"),
        }
    }

    #[test]
    fn the_default_table_of_http_statuses() {
        let t = target(json!({}));
        for status in [200, 201, 204, 299] {
            assert_eq!(run(&t, &answered(status, "", None)), Settlement::Success);
        }
        for status in [408, 429, 500, 502, 503, 504, 599] {
            let (kind, ty) = kind_and_type(&run(&t, &answered(status, "", None)));
            assert_eq!(kind, FailureKind::Retryable, "{status}");
            assert_eq!(ty, format!("http.Status{status}"));
        }
        for status in [400, 401, 403, 404, 409, 410, 422, 301, 302, 101] {
            let (kind, _) = kind_and_type(&run(&t, &answered(status, "", None)));
            assert_eq!(kind, FailureKind::Permanent, "{status}");
        }
        assert_eq!(
            kind_and_type(&run(&t, &CallResult::TimedOut)),
            (FailureKind::Retryable, TIMEOUT_ERROR_TYPE.into())
        );
        assert_eq!(
            kind_and_type(&run(&t, &CallResult::ConnectFailed("refused".into()))),
            (FailureKind::Retryable, CONNECT_ERROR_TYPE.into())
        );
        assert_eq!(
            kind_and_type(&run(&t, &CallResult::Failed("reset".into()))),
            (FailureKind::Retryable, TRANSPORT_ERROR_TYPE.into())
        );
    }

    #[test]
    fn the_error_records_status_url_and_a_bounded_body_excerpt() {
        let t = target(json!({}));
        let body = "x".repeat(1000);
        let Settlement::Failure { error, .. } = run(&t, &answered(503, &body, None)) else {
            panic!()
        };
        assert!(
            error
                .message
                .starts_with("POST http://127.0.0.1:9/hook answered 503: xxx")
        );
        assert!(!error.message.contains("secret"));
        assert!(error.message.len() < 200, "{}", error.message);
        let detail = error.detail.unwrap();
        assert_eq!(detail["status"], 503);
        assert!(detail["body"].as_str().unwrap().ends_with("…[truncated]"));
    }

    #[test]
    fn status_map_overrides_exact_code_before_class() {
        let t = target(
            json!({"status_map": {"404": "SUCCESS", "4xx": "RETRYABLE_FAILURE", "503": "PERMANENT_FAILURE"}}),
        );
        assert_eq!(run(&t, &answered(404, "", None)), Settlement::Success);
        assert_eq!(
            kind_and_type(&run(&t, &answered(400, "", None))).0,
            FailureKind::Retryable
        );
        assert_eq!(
            kind_and_type(&run(&t, &answered(503, "", None))).0,
            FailureKind::Permanent
        );
    }

    #[test]
    fn a_body_rule_turns_a_200_into_a_failure() {
        let t = target(
            json!({"body_rules": [{"pointer": "/status", "equals": "FAILED", "outcome": "PERMANENT_FAILURE"}]}),
        );
        let s = run(
            &t,
            &answered(200, r#"{"status":"FAILED","why":"card declined"}"#, None),
        );
        let Settlement::Failure { error, kind } = s else {
            panic!()
        };
        assert_eq!(kind, FailureKind::Permanent);
        assert_eq!(error.error_type, BODY_RULE_ERROR_TYPE);
        assert!(error.message.contains("card declined"));
        assert_eq!(
            run(&t, &answered(200, r#"{"status":"OK"}"#, None)),
            Settlement::Success
        );
        assert_eq!(
            run(&t, &answered(200, "not json", None)),
            Settlement::Success
        );
    }

    #[test]
    fn retry_after_defers_429_and_503_until_the_deferral_budget_is_spent() {
        let t = target(json!({}));
        assert_eq!(
            run(&t, &answered(429, "", Some("2"))),
            Settlement::Defer { delay_ms: 2000 }
        );
        assert_eq!(
            run(
                &t,
                &answered(503, "", Some("Thu, 01 Jan 1970 00:00:05 GMT"))
            ),
            Settlement::Defer { delay_ms: 5000 }
        );
        // Capped by the server's maximum.
        let capped = decide(
            &t,
            &answered(503, "", Some("86400")),
            0,
            64,
            Duration::from_secs(60),
            SystemTime::UNIX_EPOCH,
        );
        assert_eq!(capped, Settlement::Defer { delay_ms: 60_000 });
        // Not on other statuses, not unparsable, not past the budget.
        assert!(matches!(
            run(&t, &answered(500, "", Some("2"))),
            Settlement::Failure { .. }
        ));
        assert!(matches!(
            run(&t, &answered(429, "", Some("soon"))),
            Settlement::Failure { .. }
        ));
        let spent = decide(
            &t,
            &answered(429, "", Some("2")),
            3,
            64,
            Duration::from_secs(60),
            SystemTime::UNIX_EPOCH,
        );
        assert!(matches!(spent, Settlement::Failure { .. }));
    }

    #[test]
    fn a_grpc_status_maps_by_status_map_then_the_default_and_records_the_code() {
        let mut policy = QueueConfig::default().with_section(
            "callback",
            json!({"url": "grpc://127.0.0.1:9", "timeout_ms": 500,
                   "status_map": {"NOT_FOUND": "SUCCESS", "14": "PERMANENT_FAILURE"}}),
        );
        policy.policy.max_attempts = 3;
        let t = CallbackTarget::from_config(&policy, &CallbackSettings::default())
            .unwrap()
            .unwrap();
        let grpc = |r: Result<(), Status>| decide_grpc(&t, &r, 8);
        assert_eq!(grpc(Ok(())), Settlement::Success);
        assert_eq!(grpc(Err(Status::not_found("gone"))), Settlement::Success);
        assert_eq!(
            kind_and_type(&grpc(Err(Status::unavailable("down")))),
            (FailureKind::Permanent, "grpc.Unavailable".to_owned())
        );
        assert_eq!(
            kind_and_type(&grpc(Err(Status::aborted("")))),
            (FailureKind::Retryable, "grpc.Aborted".to_owned())
        );
        let failed = grpc(Err(Status::with_details(
            Code::InvalidArgument,
            "a message longer than eight bytes",
            vec![1, 2].into(),
        )));
        let Settlement::Failure { error, kind } = failed else {
            panic!("{failed:?}")
        };
        assert_eq!(kind, FailureKind::Permanent);
        assert_eq!(error.error_type, "grpc.InvalidArgument");
        let detail = error.detail.unwrap();
        assert_eq!(detail["code"], "INVALID_ARGUMENT");
        assert_eq!(detail["code_number"], 3);
        assert_eq!(detail["details_base64"], "AQI=");
        let kept = detail["message"].as_str().unwrap();
        assert!(
            kept.len() < "a message longer than eight bytes".len(),
            "{kept}"
        );
        assert!(
            error
                .message
                .starts_with("rdq.v1.Handler/Handle at grpc://127.0.0.1:9")
        );
    }
}
