//! Flow control as the front ends offer it: a queue's flow limits with how
//! they stand now ([`App::flow_status`], any scope on the queue), and
//! throttling a flow key or the whole queue until a time ([`App::throttle`],
//! `admin`, audited). Both need a store that honours flow limits
//! (capability `claim_flow`); elsewhere they answer `UNSUPPORTED` with a hint.
//!
//! The rules of a throttle's time live here too, so HTTP, gRPC and the CLI
//! refuse alike: exactly one of a duration (`for_ms`, 1 ms to
//! [`MAX_THROTTLE_MS`]) and an RFC 3339 time (`until`, in the future and
//! within [`MAX_THROTTLE_MS`]), each refusal `INVALID_FIELD` naming the field.

use rdq_api::flow::{FlowKeyStatus, QueueFlow};
use rdq_engine::{EngineError, FlowPolicy, FlowStatus};
use rdq_envelope::Timestamp;
use serde_json::{Value, json};

use crate::auth::{Caller, READ_SCOPES, Scope};
use crate::error::AppError;
use crate::{App, AuditRecord};

pub use rdq_api::flow::MAX_THROTTLE_MS;

const UNSUPPORTED_HINT: &str =
    "this store does not keep flow limits (capability claim_flow); see GET /v1/capabilities";

/// A queue's flow limits and status, as the API shows them.
pub fn flow_view(queue: &str, limits: &FlowPolicy, status: &FlowStatus) -> QueueFlow {
    QueueFlow {
        queue: queue.to_owned(),
        limits: serde_json::to_value(limits).unwrap_or_else(|_| json!({})),
        tokens: status.tokens,
        blocked_until: status.blocked_until.map(|t| t.to_string()),
        in_flight: status.in_flight,
        keys: status
            .keys
            .iter()
            .map(|k| FlowKeyStatus {
                key: k.key.clone(),
                in_flight: k.in_flight,
                tokens: k.tokens,
                blocked_until: k.blocked_until.map(|t| t.to_string()),
            })
            .collect(),
        throttled_claims: status.throttled_claims,
    }
}

/// When a throttle asked for with `for_ms` or `until` ends, from `now`:
/// exactly one of the two, `for_ms` 1 to [`MAX_THROTTLE_MS`], `until` an
/// RFC 3339 time after `now` and at most [`MAX_THROTTLE_MS`] later.
pub fn throttle_until(
    for_ms: Option<u64>,
    until: Option<&str>,
    now: Timestamp,
) -> Result<Timestamp, AppError> {
    match (for_ms, until) {
        (Some(_), Some(_)) => Err(AppError::invalid_field(
            "until",
            "give for_ms or until, not both",
        )),
        (None, None) => Err(AppError::invalid_field(
            "for_ms",
            "give for_ms (milliseconds) or until (an RFC 3339 time)",
        )),
        (Some(ms), None) => {
            if ms == 0 || ms > MAX_THROTTLE_MS {
                return Err(AppError::invalid_field(
                    "for_ms",
                    format!("must be 1 to {MAX_THROTTLE_MS} (7 days)"),
                ));
            }
            Ok(now.plus_ms(ms))
        }
        (None, Some(text)) => {
            let at = parse_rfc3339(text).ok_or_else(|| {
                AppError::invalid_field(
                    "until",
                    format!("{text:?} is not an RFC 3339 time (2026-07-20T14:03:22Z)"),
                )
            })?;
            if at <= now {
                return Err(AppError::invalid_field("until", "is not in the future"));
            }
            if at.ms_since(now) > MAX_THROTTLE_MS {
                return Err(AppError::invalid_field(
                    "until",
                    "is more than 7 days from now",
                ));
            }
            Ok(at)
        }
    }
}

/// An RFC 3339 date-time (`2026-07-20T14:03:22Z`, `…22.117+02:00`; `T`/`t`
/// or a space, `Z`/`z` or an offset), to the millisecond (further digits
/// are cut).
pub fn parse_rfc3339(text: &str) -> Option<Timestamp> {
    let b = text.as_bytes();
    if b.len() < 20 || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (date, rest) = text.split_at(10);
    let rest = &rest[1..];
    if rest.len() < 9 || rest.as_bytes()[8] == b'.' && rest.len() < 10 {
        return None;
    }
    let (clock, mut tail) = rest.split_at(8);
    let mut millis = String::from("000");
    if let Some(frac) = tail.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let kept: String = frac[..digits].chars().chain("00".chars()).take(3).collect();
        millis = kept;
        tail = &frac[digits..];
    }
    let offset_ms: i64 = match tail {
        "Z" | "z" => 0,
        _ => {
            let tb = tail.as_bytes();
            if tb.len() != 6 || tb[3] != b':' || !matches!(tb[0], b'+' | b'-') {
                return None;
            }
            let num = |s: &str| -> Option<i64> {
                (s.len() == 2 && s.bytes().all(|c| c.is_ascii_digit()))
                    .then(|| s.parse().ok())
                    .flatten()
            };
            let (h, m) = (num(&tail[1..3])?, num(&tail[4..6])?);
            if h > 23 || m > 59 {
                return None;
            }
            let sign = if tb[0] == b'-' { -1 } else { 1 };
            sign * (h * 60 + m) * 60_000
        }
    };
    let local = Timestamp::parse(&format!("{date}T{clock}.{millis}Z"))?;
    Timestamp::from_unix_ms(local.unix_ms() - offset_ms)
}

impl App {
    /// `queue`'s flow limits (its policy's `flow` section) and how they
    /// stand now: tokens left, throttles, the busiest keys, the claims the
    /// limits cut short (any scope on the queue: reading changes nothing).
    pub async fn flow_status(&self, caller: &Caller, queue: &str) -> Result<QueueFlow, AppError> {
        self.existing_queue(caller, READ_SCOPES, queue).await?;
        let limits = self.engine.policy(queue).await?.flow;
        let status = self
            .engine
            .flow_status(queue)
            .await
            .map_err(|e| Self::unsupported_hint(e, UNSUPPORTED_HINT))?;
        Ok(flow_view(queue, &limits, &status))
    }

    /// Throttles `queue`'s flow key `key` (the whole queue with `None`)
    /// until `until`, for every node on the store (`admin`; audited): claims
    /// pass over its tasks until then. A later throttle is never shortened.
    /// A bad key is `INVALID_FIELD` naming `flow_key`, a queue with no
    /// tasks and no stored policy `QUEUE_NOT_FOUND`; nothing changes.
    pub async fn throttle(
        &self,
        caller: &Caller,
        queue: &str,
        key: Option<&str>,
        until: Timestamp,
    ) -> Result<(), AppError> {
        self.existing_queue(caller, &[Scope::Admin], queue).await?;
        if let Some(key) = key {
            rdq_engine::flow::validate_flow_key(key)?;
        }
        if !self.engine.capabilities().claim_flow {
            return Err(AppError::from(EngineError::Unsupported(
                "this store cannot throttle a flow key".into(),
            ))
            .with_hint(UNSUPPORTED_HINT));
        }
        self.engine
            .throttle(queue, key, until)
            .await
            .map_err(|e| Self::unsupported_hint(e, UNSUPPORTED_HINT))?;
        self.audit().record(AuditRecord {
            who: caller.who().to_owned(),
            action: "queue.throttle",
            queue: Some(queue.to_owned()),
            count: None,
            dry_run: false,
            detail: json!({
                "flow_key": key.map_or(Value::Null, |k| json!(k)),
                "until": until.to_string(),
            }),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::AppParts;
    use crate::auth::{Authenticator, TokenConfig};
    use rdq_engine::{Engine, SystemClock};

    async fn app() -> App {
        let engine = Engine::new(
            Arc::new(rdq_store_memory::MemoryStore::new()),
            Arc::new(SystemClock),
        );
        App::new(AppParts::local(engine)).await.unwrap()
    }

    fn at(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap()
    }

    #[test]
    fn rfc3339_times_are_read_with_their_offset_and_fraction() {
        for (text, want) in [
            ("2026-07-20T14:03:22Z", "2026-07-20T14:03:22.000Z"),
            ("2026-07-20T14:03:22.117Z", "2026-07-20T14:03:22.117Z"),
            ("2026-07-20t14:03:22.1z", "2026-07-20T14:03:22.100Z"),
            ("2026-07-20T14:03:22.123456Z", "2026-07-20T14:03:22.123Z"),
            ("2026-07-20T16:03:22+02:00", "2026-07-20T14:03:22.000Z"),
            ("2026-07-20 12:03:22.5-02:00", "2026-07-20T14:03:22.500Z"),
        ] {
            assert_eq!(parse_rfc3339(text), Some(at(want)), "{text}");
        }
        for bad in [
            "",
            "2026-07-20",
            "2026-07-20T14:03:22",
            "2026-07-20T14:03:22.Z",
            "2026-13-20T14:03:22Z",
            "2026-07-20T14:03:22+2:00",
            "2026-07-20T14:03:22+24:00",
            "tomorrow",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_throttle_takes_exactly_one_of_for_ms_and_until_each_checked() {
        let now = at("2026-07-20T14:00:00.000Z");
        assert_eq!(
            throttle_until(Some(30_000), None, now).unwrap(),
            at("2026-07-20T14:00:30.000Z")
        );
        assert_eq!(
            throttle_until(None, Some("2026-07-20T15:00:00Z"), now).unwrap(),
            at("2026-07-20T15:00:00.000Z")
        );
        for (for_ms, until, field) in [
            (None, None, "for_ms"),
            (Some(1), Some("2026-07-20T15:00:00Z"), "until"),
            (Some(0), None, "for_ms"),
            (Some(MAX_THROTTLE_MS + 1), None, "for_ms"),
            (None, Some("soon"), "until"),
            (None, Some("2026-07-20T13:00:00Z"), "until"),
            (None, Some("2026-08-20T13:00:00Z"), "until"),
        ] {
            let e = throttle_until(for_ms, until, now).unwrap_err();
            assert_eq!(e.code(), "INVALID_FIELD", "{for_ms:?} {until:?}");
            assert_eq!(e.extensions()["field"], field, "{for_ms:?} {until:?}");
        }
    }

    #[tokio::test]
    async fn a_throttle_shows_in_the_flow_status_and_a_bad_key_changes_nothing() {
        let app = app().await;
        let caller = Caller::open();
        app.set_queue_config(&caller, "q", &json!({"flow": {"key_concurrency": 2}}))
            .await
            .unwrap();
        let until = Timestamp::now().plus_ms(60_000);
        let bad = app
            .throttle(&caller, "q", Some("no spaces"), until)
            .await
            .unwrap_err();
        assert_eq!(bad.code(), "INVALID_FIELD");
        assert_eq!(bad.extensions()["field"], "flow_key");
        let before = app.flow_status(&caller, "q").await.unwrap();
        assert!(before.keys.is_empty());
        assert_eq!(before.limits, json!({"key_concurrency": 2}));

        app.throttle(&caller, "q", Some("tenant-a"), until)
            .await
            .unwrap();
        app.throttle(&caller, "q", None, until).await.unwrap();
        let flow = app.flow_status(&caller, "q").await.unwrap();
        assert_eq!(flow.blocked_until, Some(until.to_string()));
        assert_eq!(flow.keys.len(), 1);
        assert_eq!(flow.keys[0].key, "tenant-a");
        assert_eq!(flow.keys[0].blocked_until, Some(until.to_string()));
    }

    #[tokio::test]
    async fn a_deferral_that_asks_for_it_throttles_its_key_until_it_is_due() {
        use crate::submit::SubmitCommand;
        use crate::work::{DeferThrottle, Report, ReportedOutcome};
        let app = app().await;
        let caller = Caller::open();
        app.set_queue_config(&caller, "q", &json!({"flow": {"key_concurrency": 5}}))
            .await
            .unwrap();
        for key in ["tenant-a", "tenant-b"] {
            app.submit(
                &caller,
                SubmitCommand {
                    queue: "q".into(),
                    handler_ref: "h".into(),
                    payload: b"{}".to_vec(),
                    flow_key: Some(key.into()),
                    ..SubmitCommand::default()
                },
            )
            .await
            .unwrap();
        }
        let claimed = app.claim(&caller, "q", 10, None).await.unwrap();
        let a = claimed
            .iter()
            .find(|l| l.envelope.headers["rdq.flow_key"] == "tenant-a")
            .unwrap();
        let report = Report {
            outcome: ReportedOutcome::Defer,
            error: None,
            defer_ms: Some(60_000),
            throttle: Some(DeferThrottle::Key),
        };
        let settled = app
            .settle(
                &caller,
                report
                    .into_settle(a.envelope.id, a.lease_token.clone())
                    .unwrap(),
            )
            .await
            .unwrap();
        let flow = app.flow_status(&caller, "q").await.unwrap();
        assert_eq!(flow.blocked_until, None);
        let key = flow.keys.iter().find(|k| k.key == "tenant-a").unwrap();
        assert_eq!(
            key.blocked_until,
            settled.next_attempt_at.map(|t| t.to_string())
        );
        let other = flow.keys.iter().find(|k| k.key == "tenant-b").unwrap();
        assert_eq!(other.blocked_until, None);
        assert_eq!(other.in_flight, 1);
    }

    #[tokio::test]
    async fn reading_needs_any_scope_and_throttling_needs_admin() {
        let auth = Authenticator::new(&[
            TokenConfig {
                name: "producer".into(),
                token: crate::auth::Secret::new("producer-token-0123456789"),
                scopes: vec![Scope::Submit],
                queues: Vec::new(),
            },
            TokenConfig {
                name: "ops".into(),
                token: crate::auth::Secret::new("ops-token-0123456789abcdef"),
                scopes: vec![Scope::Admin],
                queues: Vec::new(),
            },
        ])
        .unwrap();
        let engine = Engine::new(
            Arc::new(rdq_store_memory::MemoryStore::new()),
            Arc::new(SystemClock),
        );
        let app = App::new(AppParts {
            auth,
            ..AppParts::local(engine)
        })
        .await
        .unwrap();
        let producer = app
            .authenticate(Some(b"Bearer producer-token-0123456789"))
            .unwrap();
        let ops = app
            .authenticate(Some(b"Bearer ops-token-0123456789abcdef"))
            .unwrap();
        app.set_queue_config(&ops, "q", &json!({"flow": {"concurrency": 1}}))
            .await
            .unwrap();
        assert!(app.flow_status(&producer, "q").await.is_ok());
        let until = Timestamp::now().plus_ms(1_000);
        let refused = app.throttle(&producer, "q", None, until).await.unwrap_err();
        assert_eq!(refused.code(), "FORBIDDEN");
        app.throttle(&ops, "q", None, until).await.unwrap();
        let missing = app.flow_status(&ops, "nope").await.unwrap_err();
        assert_eq!(missing.code(), "QUEUE_NOT_FOUND");
        let missing = app.throttle(&ops, "nope", None, until).await.unwrap_err();
        assert_eq!(missing.code(), "QUEUE_NOT_FOUND");
    }
}
