//! The audit log: one JSON object per operator action that changes data in
//! bulk or changes behaviour — redrive, import, purge, task deletion and
//! queue configuration — saying who, what, on which queue, how many and when.
//!
//! Every record goes to `tracing` under the target `rdq::audit` (so it lands
//! in the server's log and can be routed on its own), and, when `audit_log`
//! is configured, is appended to that file as a line of JSON. Secrets never
//! reach it: callback header values are redacted before recording.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use rdq_envelope::Timestamp;
use serde_json::{Map, Value, json};

/// The `tracing` target audit records are emitted under.
pub const AUDIT_TARGET: &str = "rdq::audit";

/// One audited action.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    /// Who: the token's name, or `anonymous` on an open server.
    pub who: String,
    /// What: `dlq.redrive`, `dlq.import`, `dlq.purge`, `task.delete`,
    /// `queue.config`, `schedule.*`, `source.reset`.
    pub action: &'static str,
    /// The queue acted on.
    pub queue: Option<String>,
    /// How many tasks were (or on a dry run, would be) affected.
    pub count: Option<u64>,
    /// True when nothing was changed.
    pub dry_run: bool,
    /// Action-specific detail (ids, filters, the config patch).
    pub detail: Value,
}

/// Where audit records go. See the module documentation.
#[derive(Debug)]
pub struct AuditLog {
    /// Appends are whole lines under the lock, so concurrent records never
    /// interleave.
    file: Option<Mutex<File>>,
    /// The latest [`RECENT_RECORDS`] records of this process, newest last:
    /// what the dashboard shows (`docs/dashboard.md`).
    recent: Mutex<VecDeque<(Timestamp, AuditRecord)>>,
}

/// Records kept in memory for [`AuditLog::recent`].
pub const RECENT_RECORDS: usize = 1000;

impl AuditLog {
    /// Records to `tracing` only.
    pub fn tracing_only() -> Self {
        Self {
            file: None,
            recent: Mutex::default(),
        }
    }

    /// Records to `tracing` and appends to `path` (created if absent).
    pub fn to_file(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            file: Some(Mutex::new(file)),
            recent: Mutex::default(),
        })
    }

    /// The latest records this process wrote that `keep` accepts, newest
    /// first, at most `limit`, each as its JSON document.
    pub fn recent(&self, limit: usize, keep: impl Fn(&AuditRecord) -> bool) -> Vec<Value> {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent
            .iter()
            .rev()
            .filter(|(_, r)| keep(r))
            .take(limit)
            .filter_map(|(at, r)| serde_json::from_str(&Self::to_line(r, *at)).ok())
            .collect()
    }

    /// Writes one record, stamped with the current time.
    pub fn record(&self, record: AuditRecord) {
        let at = Timestamp::now();
        let line = Self::to_line(&record, at);
        {
            let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
            if recent.len() == RECENT_RECORDS {
                recent.pop_front();
            }
            recent.push_back((at, record));
        }
        tracing::info!(target: AUDIT_TARGET, "{line}");
        if let Some(file) = &self.file {
            let mut file = file.lock().unwrap_or_else(PoisonError::into_inner);
            let written = file
                .write_all(format!("{line}\n").as_bytes())
                .and_then(|()| file.flush());
            if let Err(e) = written {
                tracing::error!(error = %e, "cannot append to the audit log file");
            }
        }
    }

    /// The JSON line of `record` at `at`.
    pub fn to_line(record: &AuditRecord, at: Timestamp) -> String {
        let mut doc = Map::new();
        doc.insert("at".into(), json!(at.to_string()));
        doc.insert("who".into(), json!(record.who));
        doc.insert("action".into(), json!(record.action));
        if let Some(q) = &record.queue {
            doc.insert("queue".into(), json!(q));
        }
        if let Some(n) = record.count {
            doc.insert("count".into(), json!(n));
        }
        doc.insert("dry_run".into(), json!(record.dry_run));
        if !record.detail.is_null() {
            doc.insert("detail".into(), record.detail.clone());
        }
        Value::Object(doc).to_string()
    }
}

/// A copy of a queue policy document with callback header values replaced by
/// `"…"`, for logs and audit records.
pub fn redact_policy(policy: &Value) -> Value {
    let mut copy = policy.clone();
    if let Some(Value::Object(headers)) =
        copy.get_mut("callback").and_then(|c| c.get_mut("headers"))
    {
        for v in headers.values_mut() {
            *v = json!("…");
        }
    }
    // A callback URL's query string and userinfo may hold secrets (API keys,
    // signed tokens) just as its headers may.
    if let Some(url) = copy.get_mut("callback").and_then(|c| c.get_mut("url"))
        && let Some(text) = url.as_str()
    {
        *url = json!(redact_url(text));
    }
    copy
}

/// `url` with its userinfo and query string values replaced by `…`; the
/// scheme, host, port, path and query keys stay readable.
fn redact_url(url: &str) -> String {
    let (before_fragment, _) = url.split_once('#').unwrap_or((url, ""));
    let (base, query) = match before_fragment.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (before_fragment, None),
    };
    let base = match base.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            match authority.rsplit_once('@') {
                Some((_, host)) => format!("{scheme}://…@{host}{path}"),
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    match query {
        Some(q) => {
            let redacted: Vec<String> = q
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((k, _)) => format!("{k}=…"),
                    None => pair.to_owned(),
                })
                .collect();
            format!("{base}?{}", redacted.join("&"))
        }
        None => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callback_url_secrets_are_redacted_like_header_values() {
        let patch = json!({"callback": {
            "url": "https://user:pw@hooks.example.com/charge?api_key=s3cret&sig=abc#frag",
            "headers": {"authorization": "Bearer x"}
        }});
        let red = redact_policy(&patch);
        let url = red["callback"]["url"].as_str().unwrap();
        assert_eq!(url, "https://…@hooks.example.com/charge?api_key=…&sig=…");
        assert!(!red.to_string().contains("s3cret"));
        assert!(!red.to_string().contains("pw"));
        assert_eq!(red["callback"]["headers"]["authorization"], "…");
        let plain = redact_policy(&json!({"callback": {"url": "http://127.0.0.1:9000/hook"}}));
        assert_eq!(plain["callback"]["url"], "http://127.0.0.1:9000/hook");
    }

    #[test]
    fn a_record_says_who_what_where_how_many_and_when() {
        let line = AuditLog::to_line(
            &AuditRecord {
                who: "ops".into(),
                action: "dlq.redrive",
                queue: Some("emails".into()),
                count: Some(3),
                dry_run: false,
                detail: json!({"error_type": "http.*"}),
            },
            Timestamp::parse("2026-07-20T14:03:22.117Z").unwrap(),
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["at"], "2026-07-20T14:03:22.117Z");
        assert_eq!(v["who"], "ops");
        assert_eq!(v["action"], "dlq.redrive");
        assert_eq!(v["queue"], "emails");
        assert_eq!(v["count"], 3);
        assert_eq!(v["dry_run"], false);
        assert_eq!(v["detail"]["error_type"], "http.*");
    }

    #[test]
    fn records_are_appended_to_the_file_as_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::to_file(&path).unwrap();
        for n in 0..2 {
            log.record(AuditRecord {
                who: "ops".into(),
                action: "dlq.purge",
                queue: Some("q".into()),
                count: Some(n),
                dry_run: true,
                detail: Value::Null,
            });
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["count"], 1);
    }

    #[test]
    fn the_latest_records_are_kept_newest_first() {
        let log = AuditLog::tracing_only();
        for n in 0..(RECENT_RECORDS as u64 + 5) {
            log.record(AuditRecord {
                who: "ops".into(),
                action: "dlq.purge",
                queue: Some(if n % 2 == 0 { "a" } else { "b" }.into()),
                count: Some(n),
                dry_run: false,
                detail: Value::Null,
            });
        }
        let all = log.recent(usize::MAX, |_| true);
        assert_eq!(all.len(), RECENT_RECORDS);
        assert_eq!(all[0]["count"], RECENT_RECORDS as u64 + 4);
        let b = log.recent(2, |r| r.queue.as_deref() == Some("b"));
        assert_eq!(b.len(), 2);
        assert_eq!(b[0]["count"], RECENT_RECORDS as u64 + 3);
        assert_eq!(b[1]["count"], RECENT_RECORDS as u64 + 1);
    }

    #[test]
    fn callback_header_values_are_redacted() {
        let policy = json!({"max_attempts": 3, "callback": {"url": "http://x", "headers": {"authorization": "Bearer s3cret"}}});
        let redacted = redact_policy(&policy);
        assert!(!redacted.to_string().contains("s3cret"));
        assert_eq!(redacted["callback"]["url"], "http://x");
    }
}
