#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! Interop against the real `queuey_core::Envelope` (queuey 1.1): bytes queuey
//! writes survive queuey → rdq → queuey byte for byte and queuey reads ours
//! back as the same envelope. Also the example envelope of docs/envelope.md itself.

use queuey_core::{Job, QueueConfig, QueueSet};
use rdq_envelope::queuey::{
    ATTEMPT_HEADER, CORRELATION_ID_HEADER, ENQUEUED_AT_HEADER, JOB_TYPE_HEADER, JSON_CONTENT_TYPE,
    QUEUE_HEADER, QueueyEnvelope,
};
use rdq_envelope::{Envelope, ErrorCode, Outcome, Status, Timestamp, is_valid_name};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------
// A queuey application, as a queuey user would write it (without the derive macro).

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Queues {
    Emails,
    Reports,
}

impl QueueSet for Queues {
    fn all() -> &'static [Self] {
        &[Self::Emails, Self::Reports]
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Emails => "myapp.emails",
            Self::Reports => "MyApp.Reports",
        }
    }

    fn config(&self) -> QueueConfig {
        QueueConfig::new(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SendEmail {
    to: String,
    subject: String,
    body: String,
    headers: Vec<(String, String)>,
}

impl Job for SendEmail {
    type Queue = Queues;
    const NAME: &'static str = "myapp::jobs::SendEmail";
    const QUEUE: Queues = Queues::Emails;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct BuildReport {
    tenant: u64,
    filters: Value,
    ratio: f64,
}

impl Job for BuildReport {
    type Queue = Queues;
    const NAME: &'static str = "reports::BuildReport";
    const QUEUE: Queues = Queues::Reports;
}

fn email() -> SendEmail {
    SendEmail {
        to: "ada@example.com".into(),
        subject: "Grüße aus Zürich — 你好 🦀".into(),
        body: "line 1\nline 2\t\"quoted\" \\ back\u{0001}".into(),
        headers: vec![("X-Trace".into(), "αβγ".into())],
    }
}

fn report() -> BuildReport {
    BuildReport {
        tenant: u64::MAX,
        filters: json!({
            "range": {"from": "2026-01-01", "to": null},
            "tags": ["a", "ü", {"nested": [1, -2, 3.5, true]}],
            "empty": {},
        }),
        ratio: 0.25,
    }
}

fn now() -> Timestamp {
    Timestamp::from_unix_ms(1_784_556_202_117).unwrap()
}

// ---------------------------------------------------------------------------
// The round trip.

/// queuey bytes → ours → rdq → rdq bytes → rdq → ours → bytes, checking every step.
/// Returns the decoded rdq envelope for further checks.
fn round_trip(q: &queuey_core::Envelope) -> Envelope {
    let bytes = q.to_bytes().unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();

    let ours = QueueyEnvelope::decode(&bytes).unwrap();
    assert_eq!(
        String::from_utf8(ours.encode()).unwrap(),
        text,
        "our queuey codec is byte-exact"
    );

    let rdq_bytes = ours.to_rdq(now()).encode();
    let rdq = Envelope::decode(&rdq_bytes)
        .unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&rdq_bytes)));
    assert_eq!(rdq.encode(), rdq_bytes, "the rdq side is canonical");

    let back = QueueyEnvelope::from_rdq(&rdq).unwrap();
    let out = back.encode();
    assert_eq!(
        String::from_utf8(out.clone()).unwrap(),
        text,
        "byte-identical to queuey's"
    );
    assert_eq!(back, ours);
    assert_eq!(&queuey_core::Envelope::from_bytes(&out).unwrap(), q);

    check_mapping(q, &rdq);
    rdq
}

fn check_mapping(q: &queuey_core::Envelope, rdq: &Envelope) {
    assert_eq!(rdq.id.as_u128(), q.job_id.as_u128(), "id bits == uuid bits");
    assert_eq!(rdq.id.to_bytes(), *q.job_id.as_bytes());
    assert_eq!(
        rdq.attempt_count,
        q.attempt.saturating_sub(1),
        "attempt_count == attempt - 1"
    );
    assert_eq!(rdq.deferral_count, q.deferrals);
    assert_eq!(rdq.priority, q.priority);
    assert_eq!(rdq.status, Status::Pending);
    assert_eq!(rdq.next_attempt_at, Some(now()));
    assert!(rdq.attempts.is_empty());

    match i64::try_from(q.enqueued_at_ms)
        .ok()
        .and_then(Timestamp::from_unix_ms)
    {
        Some(t) => {
            assert_eq!(rdq.created_at, t);
            assert_eq!(
                u64::try_from(rdq.created_at.unix_ms()).unwrap(),
                q.enqueued_at_ms
            );
            assert_eq!(rdq.headers.get(ENQUEUED_AT_HEADER), None);
        }
        None => assert_eq!(
            rdq.headers.get(ENQUEUED_AT_HEADER),
            Some(&q.enqueued_at_ms.to_string())
        ),
    }

    assert_eq!(rdq.payload_content_type, JSON_CONTENT_TYPE);
    let payload: Value = serde_json::from_slice(&rdq.payload_bytes()).unwrap();
    assert_eq!(payload, q.payload, "payload bytes decode to the same JSON");

    assert!(is_valid_name(&rdq.handler_ref), "{:?}", rdq.handler_ref);
    assert!(is_valid_name(&rdq.queue), "{:?}", rdq.queue);
    if is_valid_name(&q.job_type) {
        assert_eq!(rdq.handler_ref, q.job_type);
        assert_eq!(rdq.headers.get(JOB_TYPE_HEADER), None);
    } else {
        assert_eq!(rdq.headers.get(JOB_TYPE_HEADER), Some(&q.job_type));
    }
    if is_valid_name(&q.queue) {
        assert_eq!(rdq.queue, q.queue);
        assert_eq!(rdq.headers.get(QUEUE_HEADER), None);
    } else {
        assert_eq!(rdq.headers.get(QUEUE_HEADER), Some(&q.queue));
    }
    assert_eq!(
        rdq.headers.get(CORRELATION_ID_HEADER),
        q.correlation_id.as_ref()
    );
    assert_eq!(
        rdq.headers.get(ATTEMPT_HEADER).map(String::as_str),
        (q.attempt == 0).then_some("0")
    );
}

#[test]
fn a_first_delivery_of_a_rust_path_job_type_round_trips() {
    let q = queuey_core::Envelope::new(&email()).unwrap();
    assert_eq!(q.job_type, "myapp::jobs::SendEmail");
    let rdq = round_trip(&q);
    assert_eq!(rdq.handler_ref, "myapp..jobs..sendemail");
    assert_eq!(
        rdq.headers.get(JOB_TYPE_HEADER).unwrap(),
        "myapp::jobs::SendEmail"
    );
    assert_eq!(rdq.queue, "myapp.emails");
    assert_eq!(rdq.attempt_count, 0);
    let job: SendEmail = serde_json::from_slice(&rdq.payload_bytes()).unwrap();
    assert_eq!(job, email());
}

#[test]
fn retries_and_deferrals_round_trip() {
    let first = queuey_core::Envelope::new(&email()).unwrap();
    let retried = first.next_attempt();
    let deferred = first.deferred(10);
    let deferred_then_retried = deferred.next_attempt();
    let busy = first
        .next_attempt()
        .deferred(7)
        .deferred(255)
        .next_attempt()
        .deferred(3);

    let rdq = round_trip(&retried);
    assert_eq!(
        (rdq.attempt_count, rdq.deferral_count, rdq.priority),
        (1, 0, 0)
    );
    let rdq = round_trip(&deferred);
    assert_eq!(
        (rdq.attempt_count, rdq.deferral_count, rdq.priority),
        (0, 1, 10)
    );
    let rdq = round_trip(&deferred_then_retried);
    assert_eq!(
        (rdq.attempt_count, rdq.deferral_count, rdq.priority),
        (1, 1, 0)
    );
    let rdq = round_trip(&busy);
    assert_eq!(
        (rdq.attempt_count, rdq.deferral_count, rdq.priority),
        (2, 3, 3)
    );
    assert_eq!(
        rdq.id.as_u128(),
        first.job_id.as_u128(),
        "one identity across deliveries"
    );
}

#[test]
fn correlation_ids_ride_in_a_header() {
    for cid in [
        "trace-abc",
        "",
        "корреляция-🧵 \"x\"\n",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ] {
        let q = queuey_core::Envelope::new(&email())
            .unwrap()
            .with_correlation_id(cid);
        let rdq = round_trip(&q);
        assert_eq!(
            rdq.headers.get(CORRELATION_ID_HEADER).map(String::as_str),
            Some(cid)
        );
        round_trip(&q.next_attempt().deferred(10));
    }
    let rdq = round_trip(&queuey_core::Envelope::new(&email()).unwrap());
    assert_eq!(rdq.headers.get(CORRELATION_ID_HEADER), None);
}

#[test]
fn nested_and_unicode_payloads_round_trip() {
    let q = queuey_core::Envelope::new(&report()).unwrap();
    let rdq = round_trip(&q);
    assert_eq!(rdq.queue, "myapp.reports");
    assert_eq!(rdq.headers.get(QUEUE_HEADER).unwrap(), "MyApp.Reports");
    assert_eq!(rdq.handler_ref, "reports..buildreport");
    let job: BuildReport = serde_json::from_slice(&rdq.payload_bytes()).unwrap();
    assert_eq!(job, report());

    for payload in [
        json!(null),
        json!(0),
        json!(-12345678901234i64),
        json!(u64::MAX),
        json!("just a string with \u{0000} and \u{10FFFF}"),
        json!([]),
        json!({}),
        json!([[[[{"deep": [{"deeper": {"deepest": "ü"}}]}]]]]),
        json!({"to": "a@b.c", "body": "hi", "ключ": {"值": ["🦀", 1.5, false, null]}}),
    ] {
        let q = queuey_core::Envelope::raw("myapp::jobs::SendEmail", "myapp.emails", payload);
        round_trip(&q);
        round_trip(&q.with_correlation_id("c").next_attempt().deferred(10));
    }
}

#[test]
fn any_job_type_and_queue_round_trip() {
    for (job_type, queue) in [
        ("send-email", "emails"),
        ("", ""),
        ("SendEmail", "UPPER.QUEUE"),
        ("a b/c", "q with spaces"),
        ("Grüße::Über", "очередь"),
        ("rdq.queuey.job_type", "rdq.queuey.queue"),
        ("_", "_"),
    ] {
        let q = queuey_core::Envelope::raw(job_type, queue, json!({"k": 1}));
        let rdq = round_trip(&q);
        assert!(is_valid_name(&rdq.handler_ref));
    }
    let long = "x".repeat(241);
    let q = queuey_core::Envelope::raw(long.as_str(), "a".repeat(240), json!(1));
    let rdq = round_trip(&q);
    assert_eq!(rdq.handler_ref.len(), 240);
    assert_eq!(rdq.headers.get(JOB_TYPE_HEADER), Some(&long));
    assert_eq!(rdq.headers.get(QUEUE_HEADER), None);
}

#[test]
fn counters_at_their_limits_round_trip() {
    let base = queuey_core::Envelope::new(&email())
        .unwrap()
        .with_correlation_id("x");
    for (attempt, enqueued_at_ms, deferrals, priority) in [
        (0u32, 0u64, 0u32, 0u8),
        (1, 253_402_300_799_999, 0, 255),
        (u32::MAX, 253_402_300_800_000, u32::MAX, 255),
        (2, i64::MAX as u64, 1, 1),
        (3, i64::MAX as u64 + 1, 2, 2),
        (4, u64::MAX, 3, 3),
    ] {
        let mut q = base.clone();
        q.attempt = attempt;
        q.enqueued_at_ms = enqueued_at_ms;
        q.deferrals = deferrals;
        q.priority = priority;
        round_trip(&q);
    }
}

/// What queuey before 1.1 wrote, and queuey's hand-written example body: rdq
/// reads them and writes what queuey 1.1 itself would re-serialise them as.
#[test]
fn older_and_pretty_printed_queuey_bodies_are_read() {
    for body in [
        r#"{
  "job_id": "0d8f9c22-5e3b-4f1a-9c77-2b1a6f0e3d44",
  "job_type": "myapp::jobs::SendEmail",
  "queue": "myapp.emails",
  "attempt": 2,
  "enqueued_at_ms": 1757846400123,
  "deferrals": 0,
  "priority": 0,
  "payload": { "to": "a@b.c", "body": "hi" }
}"#,
        r#"{"job_id":"8b1a9953-4c2f-4a5b-9c2e-0d1f2a3b4c5d","job_type":"test::Greet","queue":"test.alpha","attempt":2,"enqueued_at_ms":1700000000000,"payload":{"name":"ada"}}"#,
    ] {
        let q = queuey_core::Envelope::from_bytes(body.as_bytes()).unwrap();
        let ours = QueueyEnvelope::decode(body.as_bytes()).unwrap();
        let rdq = Envelope::decode(&ours.to_rdq(now()).encode()).unwrap();
        check_mapping(&q, &rdq);
        let out = QueueyEnvelope::from_rdq(&rdq).unwrap().encode();
        assert_eq!(queuey_core::Envelope::from_bytes(&out).unwrap(), q);
        // Compact payload text is kept exactly as written.
        if !body.contains('\n') {
            assert_eq!(out, q.to_bytes().unwrap());
        }
        round_trip(&q);
    }
}

// ---------------------------------------------------------------------------
// rdq-native envelopes going to queuey.

#[test]
fn an_rdq_native_json_task_becomes_a_queuey_envelope() {
    let mut env = Envelope::new(
        "payments.charge",
        "charge-payment",
        r#"{"order_id": 42, "note": "ü"}"#.as_bytes(),
        "application/json",
        now(),
    );
    env.attempt_count = 2;
    env.deferral_count = 1;
    env.priority = 3;
    env.headers
        .insert(CORRELATION_ID_HEADER.into(), "c-1".into());
    env.headers.insert("traceparent".into(), "00-ab-01".into());
    let env = Envelope::decode(&env.encode()).unwrap();

    let bytes = QueueyEnvelope::from_rdq(&env).unwrap().encode();
    let q = queuey_core::Envelope::from_bytes(&bytes)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)));
    assert_eq!(q.job_id.as_u128(), env.id.as_u128());
    assert_eq!(q.job_type, "charge-payment");
    assert_eq!(q.queue, "payments.charge");
    assert_eq!(q.attempt, 3, "the delivery is the next attempt");
    assert_eq!(q.enqueued_at_ms, 1_784_556_202_117);
    assert_eq!(q.deferrals, 1);
    assert_eq!(q.priority, 3);
    assert_eq!(q.correlation_id.as_deref(), Some("c-1"));
    assert_eq!(q.payload, json!({"order_id": 42, "note": "ü"}));

    // And back: the queuey fields survive.
    let again = QueueyEnvelope::decode(&q.to_bytes().unwrap())
        .unwrap()
        .to_rdq(now());
    assert_eq!(again.id, env.id);
    assert_eq!(again.handler_ref, env.handler_ref);
    assert_eq!(again.queue, env.queue);
    assert_eq!(again.attempt_count, env.attempt_count);
    assert_eq!(again.created_at, env.created_at);
}

#[test]
fn a_non_json_payload_is_refused_with_invalid_field() {
    for payload in [
        &b"\x00\xff\xfe binary"[..],
        b"plain text",
        b"",
        b"{\"a\":1",
        b"1 2",
    ] {
        let env = Envelope::new("q", "h", payload, "application/octet-stream", now());
        let err = QueueyEnvelope::from_rdq(&env).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidField, "{payload:?}");
        assert_eq!(err.path(), Some("payload"));
    }
}

// ---------------------------------------------------------------------------
// The example envelope of `docs/envelope.md`.

/// The example envelope of `docs/envelope.md`, from the compliance fixtures.
const EXAMPLE_ENVELOPE: &str =
    include_str!("../../../compliance/fixtures/valid/seed_concrete_envelope.json");

/// Removes JSON whitespace outside strings, keeping key order.
fn minify(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if !c.is_ascii_whitespace() {
            out.push(c);
            in_string = c == '"';
        }
    }
    out
}

#[test]
fn the_example_envelope_decodes_and_encodes_canonically() {
    let env = Envelope::decode(EXAMPLE_ENVELOPE.as_bytes()).unwrap();
    assert_eq!(env.id.to_string(), "01J2ZK7Q8XW5H3N9G4T6B8RDQ0");
    assert_eq!(env.queue, "payments.charge");
    assert_eq!(env.handler_ref, "charge-payment");
    assert_eq!(env.handler_version.as_deref(), Some("v3"));
    assert_eq!(env.payload_bytes(), br#"{"order_id": 42}"#);
    assert_eq!(env.headers.len(), 3);
    assert_eq!(env.status, Status::Pending);
    assert_eq!((env.attempt_count, env.redrive_count), (2, 0));
    assert_eq!(
        env.next_attempt_at.unwrap().to_string(),
        "2026-07-20T14:05:22.117Z"
    );
    assert_eq!(env.lease_expires_at, None);
    assert_eq!(env.created_at.unix_ms(), 1_784_556_202_117);
    assert_eq!(env.attempts.len(), 1);
    let attempt = &env.attempts[0];
    assert_eq!(attempt.outcome, Some(Outcome::RetryableFailure));
    let error = attempt.error.as_ref().unwrap();
    assert_eq!(error.error_type, "java.net.SocketTimeoutException");
    assert_eq!(error.detail, None);
    assert!(env.extra.is_empty() && attempt.extra.is_empty() && error.extra.is_empty());

    let encoded = env.encode();
    // JSON-equal to the input ...
    let input: Value = serde_json::from_str(EXAMPLE_ENVELOPE).unwrap();
    let output: Value = serde_json::from_slice(&encoded).unwrap();
    assert_eq!(output, input);
    // ... and, since docs/envelope.md lists the fields in canonical order, exactly its
    // compact form once the header map is in key order (headers are a map, and
    // the canonical form writes maps sorted).
    let tp = r#""traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01""#;
    let rdq = r#""rdq.source":"kafka://payments/3/42351","rdq.submitted_by":"checkout-service""#;
    let compact = minify(EXAMPLE_ENVELOPE);
    let expected = compact.replace(&format!("{tp},{rdq}"), &format!("{rdq},{tp}"));
    assert_ne!(expected, compact);
    assert_eq!(String::from_utf8(encoded.clone()).unwrap(), expected);
    // Canonical: re-decoding and re-encoding changes nothing.
    let again = Envelope::decode(&encoded).unwrap();
    assert_eq!(again, env);
    assert_eq!(again.encode(), encoded);
}

#[test]
fn the_example_envelope_goes_to_queuey_and_back() {
    let env = Envelope::decode(EXAMPLE_ENVELOPE.as_bytes()).unwrap();
    let q = QueueyEnvelope::from_rdq(&env).unwrap();
    let parsed = queuey_core::Envelope::from_bytes(&q.encode()).unwrap();
    assert_eq!(parsed.attempt, 3);
    assert_eq!(parsed.job_type, "charge-payment");
    assert_eq!(parsed.payload, json!({"order_id": 42}));
    // The queuey fields survive the trip back; the rdq-only ones stay behind.
    let back = Envelope::decode(&q.to_rdq(now()).encode()).unwrap();
    assert_eq!(QueueyEnvelope::from_rdq(&back).unwrap(), q);
}
