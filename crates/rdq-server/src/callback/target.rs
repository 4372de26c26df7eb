//! A queue's callback target: the `callback` object of its policy, parsed and
//! checked once, so a bad target is refused when it is configured
//! (`INVALID_POLICY`) rather than discovered on the first dispatch.
//!
//! ```json
//! "callback": {
//!   "url": "http://127.0.0.1:9000/hooks/charge",
//!   "timeout_ms": 5000,
//!   "concurrency": 32,
//!   "headers": {"authorization": "Bearer …"},
//!   "status_map": {"409": "SUCCESS", "5xx": "PERMANENT_FAILURE"},
//!   "body_rules": [{"pointer": "/status", "equals": "FAILED", "outcome": "PERMANENT_FAILURE"}]
//! }
//! ```
//!
//! `status_map` keys are a status code (`"404"`) or a class (`"4xx"`); an
//! exact code wins over its class, and both over the default mapping of
//! `docs/outcomes.md`. `body_rules` test the response body, parsed as JSON,
//! with an RFC 6901 JSON Pointer; the first rule that matches decides, ahead
//! of `status_map`. A gRPC target (`grpc://`, `grpcs://`) takes gRPC status
//! codes as `status_map` keys (`"NOT_FOUND"`, `"5"`) and no body rules.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rdq_engine::QueueConfig;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use url::Url;

use super::settings::CallbackSettings;
use super::{grpc_status, scheme};

/// Request headers rdq sets itself; a target may not override them.
pub const RESERVED_REQUEST_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "host",
    "transfer-encoding",
    "connection",
    "traceparent",
];

/// Prefix of the headers rdq adds to every callback (`rdq-task-id`, `rdq-attempt`).
pub const RDQ_HEADER_PREFIX: &str = "rdq-";

/// Header (gRPC: metadata) carrying the task id on every callback.
pub const TASK_ID_HEADER: &str = "rdq-task-id";
/// Header (gRPC: metadata) carrying the attempt number on every callback.
pub const ATTEMPT_HEADER: &str = "rdq-attempt";

/// The canonical outcome a response maps to (`docs/outcomes.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MappedOutcome {
    /// The task succeeded.
    Success,
    /// Retry with backoff.
    RetryableFailure,
    /// Dead-letter now.
    PermanentFailure,
}

/// One response-body rule.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BodyRule {
    /// RFC 6901 JSON Pointer into the response body (`""` is the whole body).
    pub pointer: String,
    /// Matches when the value at `pointer` equals this (JSON equality).
    #[serde(default, deserialize_with = "present")]
    pub equals: Option<Value>,
    /// Matches when there is a value at `pointer` and it differs from this.
    #[serde(default, deserialize_with = "present")]
    pub not_equals: Option<Value>,
    /// Matches when a value at `pointer` exists (`true`) or does not (`false`).
    #[serde(default)]
    pub exists: Option<bool>,
    /// The outcome when the rule matches.
    pub outcome: MappedOutcome,
    /// Error type recorded when the outcome is a failure (default `http.ResponseBody`).
    #[serde(default)]
    pub error_type: Option<String>,
}

/// Reads a field that is present, even when its value is `null`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl BodyRule {
    /// True if the rule matches `body`.
    pub fn matches(&self, body: &Value) -> bool {
        let found = body.pointer(&self.pointer);
        if let Some(expected) = &self.equals {
            return found == Some(expected);
        }
        if let Some(unexpected) = &self.not_equals {
            return found.is_some_and(|v| v != unexpected);
        }
        match self.exists {
            Some(want) => found.is_some() == want,
            None => false,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetDocument {
    url: String,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    concurrency: Option<usize>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    status_map: BTreeMap<String, MappedOutcome>,
    #[serde(default)]
    body_rules: Vec<BodyRule>,
}

/// A validated callback target. See the module documentation.
#[derive(Debug, Clone)]
pub struct CallbackTarget {
    /// Where tasks are POSTed.
    pub url: Url,
    /// Whole-request timeout (connect, send, response and body).
    pub timeout: Duration,
    /// Callbacks in flight at once for this queue.
    pub concurrency: usize,
    /// Extra request headers (values may be secrets: never logged).
    pub headers: HeaderMap,
    exact: HashMap<u16, MappedOutcome>,
    /// Index 1–5 for `1xx`–`5xx`.
    classes: [Option<MappedOutcome>; 6],
    /// Body rules, first match wins.
    pub body_rules: Vec<BodyRule>,
    /// Deferrals a task may take from `Retry-After` before a 429/503 counts
    /// as a retryable failure (the queue's `max_attempts`), so a receiver that
    /// always answers "later" still lets the task reach the DLQ.
    pub max_deferrals: u32,
}

/// The queue-configuration section that holds a queue's callback target
/// (`docs/server.md`).
pub const CALLBACK_SECTION: &str = "callback";

impl CallbackTarget {
    /// The target of a queue's configuration (its [`CALLBACK_SECTION`]),
    /// if it has one; a bad target is refused with a message naming the
    /// field (`callback.url: …`).
    pub fn from_config(
        config: &QueueConfig,
        settings: &CallbackSettings,
    ) -> Result<Option<Self>, String> {
        let Some(doc) = config.section(CALLBACK_SECTION) else {
            return Ok(None);
        };
        let policy = &config.policy;
        let doc: TargetDocument =
            serde_json::from_value(doc.clone()).map_err(|e| format!("callback: {e}"))?;
        let url = Url::parse(&doc.url).map_err(|e| format!("callback.url: {e}"))?;
        settings
            .check_url(&url)
            .map_err(|why| format!("callback.url: {why}"))?;
        let grpc = scheme::is_grpc(url.scheme());
        if url.scheme() == scheme::GRPC && url.port().is_none() {
            return Err("callback.url: a grpc:// URL needs a port".into());
        }
        if grpc && !doc.body_rules.is_empty() {
            return Err(
                "callback.body_rules: a gRPC target's status decides; body rules are for HTTP"
                    .into(),
            );
        }
        let timeout_ms = match doc.timeout_ms {
            Some(0) => return Err("callback.timeout_ms: must be at least 1".into()),
            Some(t) if t >= policy.lease_ms => {
                return Err(format!(
                    "callback.timeout_ms: {t} must be less than the queue's lease_ms ({}), or the lease lapses while the callback runs",
                    policy.lease_ms
                ));
            }
            Some(t) => t,
            // The server default, kept well inside the lease.
            None => settings
                .default_timeout_ms
                .min(policy.lease_ms.saturating_mul(4) / 5)
                .max(1),
        };
        let concurrency = doc.concurrency.unwrap_or(settings.default_concurrency);
        if concurrency == 0 || concurrency > settings.max_concurrency {
            return Err(format!(
                "callback.concurrency: must be 1 to {}",
                settings.max_concurrency
            ));
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &doc.headers {
            let lower = name.to_ascii_lowercase();
            if RESERVED_REQUEST_HEADERS.contains(&lower.as_str())
                || lower.starts_with(RDQ_HEADER_PREFIX)
            {
                return Err(format!(
                    "callback.headers.{name}: this header is set by rdq"
                ));
            }
            let header_name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("callback.headers.{name}: not a valid header name"))?;
            let header_value = HeaderValue::from_str(value)
                .map_err(|_| format!("callback.headers.{name}: not a valid header value"))?;
            headers.insert(header_name, header_value);
        }
        let mut exact = HashMap::new();
        let mut classes = [None; 6];
        for (key, outcome) in &doc.status_map {
            if grpc {
                // gRPC status codes (docs/grpc.md): names or numbers.
                let code = grpc_status::parse_code(key).ok_or_else(|| {
                    format!("callback.status_map.{key}: keys of a gRPC target are status codes (\"UNAVAILABLE\", \"14\")")
                })?;
                exact.insert(code, *outcome);
                continue;
            }
            match parse_status_key(key) {
                Some(StatusKey::Exact(code)) => {
                    exact.insert(code, *outcome);
                }
                Some(StatusKey::Class(class)) => classes[class] = Some(*outcome),
                None => {
                    return Err(format!(
                        "callback.status_map.{key}: keys are status codes (\"404\") or classes (\"4xx\")"
                    ));
                }
            }
        }
        for (i, rule) in doc.body_rules.iter().enumerate() {
            if !(rule.pointer.is_empty() || rule.pointer.starts_with('/')) {
                return Err(format!(
                    "callback.body_rules[{i}].pointer: a JSON Pointer is empty or starts with '/'"
                ));
            }
            let tests = usize::from(rule.equals.is_some())
                + usize::from(rule.not_equals.is_some())
                + usize::from(rule.exists.is_some());
            if tests != 1 {
                return Err(format!(
                    "callback.body_rules[{i}]: give exactly one of equals, not_equals, exists"
                ));
            }
            if rule.error_type.as_deref().is_some_and(str::is_empty) {
                return Err(format!(
                    "callback.body_rules[{i}].error_type: must not be empty"
                ));
            }
        }
        Ok(Some(Self {
            url,
            timeout: Duration::from_millis(timeout_ms),
            concurrency,
            headers,
            exact,
            classes,
            body_rules: doc.body_rules,
            max_deferrals: policy.max_attempts,
        }))
    }

    /// The outcome `status_map` gives `status`, if it names it or its class.
    pub fn mapped_status(&self, status: u16) -> Option<MappedOutcome> {
        self.exact.get(&status).copied().or_else(|| {
            self.classes
                .get(usize::from(status / 100))
                .copied()
                .flatten()
        })
    }

    /// True for a `grpc://` or `grpcs://` target (`rdq.v1.Handler/Handle`).
    pub fn is_grpc(&self) -> bool {
        scheme::is_grpc(self.url.scheme())
    }

    /// The outcome `status_map` gives gRPC status `code`, for a gRPC target.
    pub fn mapped_grpc(&self, code: u16) -> Option<MappedOutcome> {
        self.exact.get(&code).copied()
    }

    /// The URL without its query string, for messages (a query may hold secrets).
    pub fn display_url(&self) -> String {
        let mut shown = self.url.clone();
        shown.set_query(None);
        shown.set_fragment(None);
        shown.to_string()
    }
}

enum StatusKey {
    Exact(u16),
    Class(usize),
}

fn parse_status_key(key: &str) -> Option<StatusKey> {
    let b = key.as_bytes();
    if b.len() != 3 || !(b'1'..=b'5').contains(&b[0]) {
        return None;
    }
    if b[1..].eq_ignore_ascii_case(b"xx") {
        return Some(StatusKey::Class(usize::from(b[0] - b'0')));
    }
    key.parse::<u16>().ok().map(StatusKey::Exact)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(callback: Value) -> QueueConfig {
        QueueConfig::default().with_section(CALLBACK_SECTION, callback)
    }

    fn target(callback: Value) -> Result<Option<CallbackTarget>, String> {
        CallbackTarget::from_config(&policy(callback), &CallbackSettings::default())
    }

    #[test]
    fn a_full_target_parses() {
        let t = target(json!({
            "url": "http://127.0.0.1:9000/hook?key=secret",
            "timeout_ms": 500,
            "concurrency": 8,
            "headers": {"Authorization": "Bearer x"},
            "status_map": {"409": "SUCCESS", "4xx": "RETRYABLE_FAILURE"},
            "body_rules": [{"pointer": "/status", "equals": "FAILED", "outcome": "PERMANENT_FAILURE"}]
        }))
        .unwrap()
        .unwrap();
        assert_eq!(t.timeout, Duration::from_millis(500));
        assert_eq!(t.concurrency, 8);
        assert_eq!(t.mapped_status(409), Some(MappedOutcome::Success));
        assert_eq!(t.mapped_status(404), Some(MappedOutcome::RetryableFailure));
        assert_eq!(t.mapped_status(500), None);
        assert_eq!(t.display_url(), "http://127.0.0.1:9000/hook");
        assert!(t.body_rules[0].matches(&json!({"status": "FAILED"})));
        assert!(!t.body_rules[0].matches(&json!({"status": "OK"})));
    }

    #[test]
    fn no_callback_is_no_target() {
        assert!(
            CallbackTarget::from_config(&QueueConfig::default(), &CallbackSettings::default())
                .unwrap()
                .is_none()
        );
        assert!(target(Value::Null).unwrap().is_none());
    }

    #[test]
    fn the_default_timeout_stays_inside_the_lease() {
        let mut p = QueueConfig::default()
            .with_section(CALLBACK_SECTION, json!({"url": "http://localhost:1/"}));
        p.policy.lease_ms = 1000;
        let t = CallbackTarget::from_config(&p, &CallbackSettings::default())
            .unwrap()
            .unwrap();
        assert_eq!(t.timeout, Duration::from_millis(800));
    }

    #[test]
    fn bad_targets_are_refused_naming_the_field() {
        for (doc, field) in [
            (json!({"url": "not a url"}), "callback.url"),
            (json!({"url": "ftp://127.0.0.1/x"}), "callback.url"),
            (json!({"url": "http://user:pw@127.0.0.1/x"}), "callback.url"),
            (json!({"url": "http://example.com/x"}), "callback.url"),
            (
                json!({"url": "http://127.0.0.1/x", "timeout_ms": 30000}),
                "callback.timeout_ms",
            ),
            (
                json!({"url": "http://127.0.0.1/x", "timeout_ms": 0}),
                "callback.timeout_ms",
            ),
            (
                json!({"url": "http://127.0.0.1/x", "concurrency": 0}),
                "callback.concurrency",
            ),
            (
                json!({"url": "http://127.0.0.1/x", "headers": {"Content-Type": "x"}}),
                "callback.headers",
            ),
            (
                json!({"url": "http://127.0.0.1/x", "headers": {"rdq-task-id": "x"}}),
                "callback.headers",
            ),
            (
                json!({"url": "http://127.0.0.1/x", "status_map": {"6xx": "SUCCESS"}}),
                "callback.status_map",
            ),
            (
                json!({"url": "http://127.0.0.1/x", "status_map": {"404": "MAYBE"}}),
                "callback",
            ),
            (
                json!({"url": "http://127.0.0.1/x", "body_rules": [{"pointer": "status", "equals": 1, "outcome": "SUCCESS"}]}),
                "callback.body_rules[0].pointer",
            ),
            (
                json!({"url": "http://127.0.0.1/x", "body_rules": [{"pointer": "/s", "outcome": "SUCCESS"}]}),
                "callback.body_rules[0]",
            ),
            (
                json!({"url": "http://127.0.0.1/x", "retries": 3}),
                "callback",
            ),
        ] {
            let err = target(doc.clone()).unwrap_err();
            assert!(err.starts_with(field), "{doc}: {err}");
        }
    }

    #[test]
    fn the_allowlist_admits_matching_urls_only() {
        let settings = CallbackSettings {
            allow: vec!["https://hooks.example.com/*".into()],
            allow_loopback: false,
            ..CallbackSettings::default()
        };
        let p = |url: &str| policy(json!({ "url": url }));
        assert!(
            CallbackTarget::from_config(&p("https://hooks.example.com/charge"), &settings).is_ok()
        );
        assert!(CallbackTarget::from_config(&p("http://127.0.0.1:9000/x"), &settings).is_err());
        assert!(
            CallbackTarget::from_config(&p("https://hooks.example.com.evil.net/x"), &settings)
                .is_err()
        );
    }

    #[test]
    fn body_rules_can_match_null_absence_and_difference() {
        let rule = |doc: Value| serde_json::from_value::<BodyRule>(doc).unwrap();
        assert!(
            rule(json!({"pointer": "/error", "equals": null, "outcome": "SUCCESS"}))
                .matches(&json!({"error": null}))
        );
        assert!(
            rule(json!({"pointer": "/error", "exists": true, "outcome": "PERMANENT_FAILURE"}))
                .matches(&json!({"error": "x"}))
        );
        let not_ok =
            rule(json!({"pointer": "/status", "not_equals": "OK", "outcome": "RETRYABLE_FAILURE"}));
        assert!(not_ok.matches(&json!({"status": "BUSY"})));
        assert!(!not_ok.matches(&json!({"status": "OK"})));
        assert!(!not_ok.matches(&json!({})));
    }
}
