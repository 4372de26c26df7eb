#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! Property tests for the canonical codec, the queuey mapping and the decoders'
//! robustness.
//!
//! * Arbitrary valid envelopes (every optional field randomly left out, null or
//!   set, unknown fields at every level) decode, re-encode to a canonical form
//!   that is idempotent, equal as JSON to the input, and independent of the
//!   input's key order and whitespace.
//! * queuey → rdq → queuey is byte-for-byte lossless for arbitrary queuey
//!   envelopes.
//! * Neither decoder panics on arbitrary bytes or on mutations of valid input
//!   (this is what CI runs in place of the cargo-fuzz target in `fuzz/`).
//!
//! `PROPTEST_CASES=10000 cargo test -p rdq-envelope --test properties` runs more cases.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::Index;
use rdq_envelope::queuey::{self, QueueyEnvelope};
use rdq_envelope::{Envelope, TaskId, Timestamp, is_valid_name};
use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use uuid::Uuid;

/// `0000-01-01T00:00:00.000Z` in Unix milliseconds.
const MIN_MS: i64 = -62_167_219_200_000;
/// `9999-12-31T23:59:59.999Z` in Unix milliseconds.
const MAX_MS: i64 = 253_402_300_799_999;

/// Top-level fields in the canonical order of docs/envelope.md, including the additive
/// v1 fields `priority` and `deferral_count`.
const KNOWN_TOP: &[&str] = &[
    "envelope_version",
    "id",
    "queue",
    "handler_ref",
    "handler_version",
    "payload",
    "payload_content_type",
    "payload_ref",
    "headers",
    "status",
    "priority",
    "deferral_count",
    "attempt_count",
    "redrive_count",
    "next_attempt_at",
    "lease_expires_at",
    "created_at",
    "attempts",
];
const KNOWN_ATTEMPT: &[&str] = &[
    "attempt_no",
    "started_at",
    "finished_at",
    "outcome",
    "error",
];
const KNOWN_ERROR: &[&str] = &["type", "message", "detail", "stack"];

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases,
        // Do not write proptest-regressions/ files into the source tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Generators: text and JSON.

/// Any Rust string: every code point, control characters and non-BMP included.
fn any_text(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        vec(any::<char>(), 0..max).prop_map(String::from_iter),
        proptest::string::string_regex(&format!("\\PC{{0,{max}}}")).unwrap(),
        proptest::string::string_regex(&format!("[ -~]{{0,{max}}}")).unwrap(),
    ]
}

fn nonempty_text(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        vec(any::<char>(), 1..max).prop_map(String::from_iter),
        proptest::string::string_regex(&format!("[A-Za-z.$]{{1,{max}}}")).unwrap(),
    ]
}

/// A valid queue name / handler ref: `[a-z0-9._-]{1,240}`, not `.` or `..`.
fn valid_name() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[a-z0-9._-]{1,40}",
        1 => "[a-z0-9._-]{240}",
        1 => Just("payments.charge".to_owned()),
    ]
    .prop_filter("`.` and `..` are path segments", |n| n != "." && n != "..")
}

/// An integer-only JSON leaf (numbers must compare equal as numbers after a round trip).
fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        Just(Value::from(i64::MIN)),
        any_text(12).prop_map(Value::String),
    ]
}

/// Arbitrary nested JSON: unicode strings, arrays, objects, integers.
fn arb_json() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map(any_text(8), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Unknown fields for an object whose known fields are `known`.
fn arb_extras(known: &'static [&'static str]) -> impl Strategy<Value = Vec<(String, Value)>> {
    let key = prop_oneof![
        any_text(10),
        "x_[a-z_]{1,8}",
        // Sometimes collides with a known name; those are dropped below.
        "[a-z_]{1,12}",
    ];
    vec((key, arb_json()), 0..3).prop_map(move |fields| {
        fields
            .into_iter()
            .filter(|(k, _)| !known.contains(&k.as_str()))
            .collect()
    })
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A wire timestamp, built from its parts (independently of the crate's formatter).
fn arb_timestamp() -> impl Strategy<Value = String> {
    let year = prop_oneof![
        Just(0u32),
        Just(9999),
        Just(1970),
        1900u32..2200,
        0u32..=9999
    ];
    (
        year,
        1u32..=12,
        1u32..=31,
        0u32..24,
        0u32..60,
        0u32..60,
        0u32..1000,
    )
        .prop_map(|(y, mo, d, h, mi, s, ms)| {
            let d = d.min(days_in_month(y, mo));
            format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z")
        })
}

/// `None` = field left out, `Some(Null)` = explicit null, `Some(v)` = set.
fn nullable<S>(s: S) -> impl Strategy<Value = Option<Value>>
where
    S: Strategy<Value = Value> + 'static,
{
    prop_oneof![1 => Just(None), 1 => Just(Some(Value::Null)), 2 => s.prop_map(Some)]
}

/// `None` = field left out, `Some(v)` = set (null is not allowed for these).
fn omittable<S>(s: S) -> impl Strategy<Value = Option<Value>>
where
    S: Strategy<Value = Value> + 'static,
{
    prop_oneof![1 => Just(None), 2 => s.prop_map(Some)]
}

fn text_value(max: usize) -> impl Strategy<Value = Value> {
    any_text(max).prop_map(Value::String)
}

fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        map.insert(key.to_owned(), v);
    }
}

fn put_extras(map: &mut Map<String, Value>, extras: Vec<(String, Value)>) {
    for (k, v) in extras {
        map.insert(k, v);
    }
}

fn arb_error() -> impl Strategy<Value = Value> {
    (
        nonempty_text(24),
        any_text(40),
        nullable(arb_json()),
        nullable(text_value(60)),
        arb_extras(KNOWN_ERROR),
    )
        .prop_map(|(ty, message, detail, stack, extras)| {
            let mut o = Map::new();
            o.insert("type".into(), Value::String(ty));
            o.insert("message".into(), Value::String(message));
            put(&mut o, "detail", detail);
            put(&mut o, "stack", stack);
            put_extras(&mut o, extras);
            Value::Object(o)
        })
}

fn arb_outcome() -> impl Strategy<Value = Value> {
    prop::sample::select(vec![
        "SUCCESS",
        "RETRYABLE_FAILURE",
        "PERMANENT_FAILURE",
        "LEASE_EXPIRED",
    ])
    .prop_map(|s| Value::String(s.to_owned()))
}

fn arb_attempt() -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just(1u32), Just(u32::MAX), 1u32..=u32::MAX],
        arb_timestamp(),
        nullable(arb_timestamp().prop_map(Value::String)),
        nullable(arb_outcome()),
        nullable(arb_error()),
        arb_extras(KNOWN_ATTEMPT),
    )
        .prop_map(|(no, started, finished, outcome, error, extras)| {
            let mut o = Map::new();
            o.insert("attempt_no".into(), Value::from(no));
            o.insert("started_at".into(), Value::String(started));
            put(&mut o, "finished_at", finished);
            put(&mut o, "outcome", outcome);
            put(&mut o, "error", error);
            put_extras(&mut o, extras);
            Value::Object(o)
        })
}

fn arb_headers() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        any_text(12),
        Just("traceparent".to_owned()),
        Just("rdq.source".to_owned()),
        Just("rdq.submitted_by".to_owned()),
        Just("ключ-🔑".to_owned()),
    ];
    btree_map(key, any_text(24), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k, Value::String(v))).collect()))
}

fn arb_count() -> impl Strategy<Value = Value> {
    prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()].prop_map(Value::from)
}

/// An arbitrary valid envelope as a JSON value.
fn arb_envelope_json() -> impl Strategy<Value = Value> {
    let identity = (
        any::<u128>(),
        valid_name(),
        valid_name(),
        nullable(text_value(16)),
        vec(any::<u8>(), 0..48),
        any_text(24),
        nullable(text_value(16)),
        omittable(arb_headers()),
    );
    let state = (
        prop::sample::select(vec!["PENDING", "IN_FLIGHT", "SUCCEEDED", "DEAD"]),
        omittable(prop_oneof![Just(0u8), Just(255), any::<u8>()].prop_map(Value::from)),
        omittable(arb_count()),
        omittable(arb_count()),
        omittable(arb_count()),
        nullable(arb_timestamp().prop_map(Value::String)),
        nullable(arb_timestamp().prop_map(Value::String)),
        arb_timestamp(),
        omittable(vec(arb_attempt(), 0..4).prop_map(Value::Array)),
        arb_extras(KNOWN_TOP),
    );
    (identity, state).prop_map(
        |(
            (id, queue, handler_ref, handler_version, payload, content_type, payload_ref, headers),
            (
                status,
                priority,
                deferrals,
                attempt_count,
                redrives,
                next,
                lease,
                created,
                attempts,
                extras,
            ),
        )| {
            let mut o = Map::new();
            o.insert("envelope_version".into(), Value::from(1));
            o.insert(
                "id".into(),
                Value::String(TaskId::from_u128(id).to_string()),
            );
            o.insert("queue".into(), Value::String(queue));
            o.insert("handler_ref".into(), Value::String(handler_ref));
            put(&mut o, "handler_version", handler_version);
            o.insert(
                "payload".into(),
                Value::String(base64::engine::general_purpose::STANDARD.encode(payload)),
            );
            o.insert("payload_content_type".into(), Value::String(content_type));
            put(&mut o, "payload_ref", payload_ref);
            put(&mut o, "headers", headers);
            o.insert("status".into(), Value::String(status.to_owned()));
            put(&mut o, "priority", priority);
            put(&mut o, "deferral_count", deferrals);
            put(&mut o, "attempt_count", attempt_count);
            put(&mut o, "redrive_count", redrives);
            put(&mut o, "next_attempt_at", next);
            put(&mut o, "lease_expires_at", lease);
            o.insert("created_at".into(), Value::String(created));
            put(&mut o, "attempts", attempts);
            put_extras(&mut o, extras);
            Value::Object(o)
        },
    )
}

// ---------------------------------------------------------------------------
// Helpers: re-serialising with shuffled keys and whitespace, reading key order.

fn next_rand(state: &mut u64) -> u64 {
    // xorshift64*; the seed is forced odd so it is never zero.
    let mut x = *state | 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn maybe_ws(seed: &mut u64, out: &mut String) {
    const WS: [&str; 5] = ["", "", " ", "\n  ", "\t\r\n"];
    out.push_str(WS[(next_rand(seed) % WS.len() as u64) as usize]);
}

/// Writes `v` as JSON with every object's keys in a seed-determined order and
/// random insignificant whitespace.
fn write_shuffled(v: &Value, seed: &mut u64, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            for i in (1..entries.len()).rev() {
                let j = (next_rand(seed) % (i as u64 + 1)) as usize;
                entries.swap(i, j);
            }
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                maybe_ws(seed, out);
                out.push_str(&serde_json::to_string(k).unwrap());
                maybe_ws(seed, out);
                out.push(':');
                maybe_ws(seed, out);
                write_shuffled(v, seed, out);
                maybe_ws(seed, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                maybe_ws(seed, out);
                write_shuffled(item, seed, out);
            }
            maybe_ws(seed, out);
            out.push(']');
        }
        other => out.push_str(&serde_json::to_string(other).unwrap()),
    }
}

fn shuffled(v: &Value, seed: u64) -> String {
    let mut seed = seed;
    let mut out = String::new();
    maybe_ws(&mut seed, &mut out);
    write_shuffled(v, &mut seed, &mut out);
    maybe_ws(&mut seed, &mut out);
    out
}

/// The keys of a top-level JSON object, in the order they are written.
fn top_level_keys(bytes: &[u8]) -> Vec<String> {
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
            let mut keys = Vec::new();
            while let Some(k) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                keys.push(k);
            }
            Ok(keys)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    (&mut de).deserialize_map(Keys).unwrap()
}

fn decode_ok(bytes: &[u8]) -> Result<Envelope, TestCaseError> {
    Envelope::decode(bytes).map_err(|e| {
        TestCaseError::fail(format!(
            "decode refused: {e}\n{}",
            String::from_utf8_lossy(bytes)
        ))
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("the encoder writes UTF-8")
}

/// Checks `decode(encode(x)).encode() == encode(x)` for a decoded envelope.
fn assert_idempotent(env: &Envelope) -> Result<(), TestCaseError> {
    let c = env.encode();
    let again = decode_ok(&c)?;
    prop_assert_eq!(text(&again.encode()), text(&c));
    prop_assert_eq!(&again, env);
    Ok(())
}

// ---------------------------------------------------------------------------
// Generators: queuey envelopes and byte mutations.

/// Names as queuey writes them: Rust paths, upper case, empty, long, anything.
fn foreign_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9._-]{1,30}",
        "[A-Za-z][A-Za-z0-9_]{0,8}(::[A-Za-z][A-Za-z0-9_]{0,12}){1,3}",
        Just("myapp::jobs::SendEmail".to_owned()),
        Just(String::new()),
        any_text(20),
        "[a-z]{241,260}",
        "\\PC{230,250}",
    ]
}

/// Any JSON a queuey payload may hold (floats included: the payload travels as raw text).
fn queuey_payload() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        json_leaf(),
        any::<f64>().prop_map(Value::from),
        Just(serde_json::json!({"to": "a@b.c", "body": "hi"})),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map(any_text(8), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_queuey() -> impl Strategy<Value = QueueyEnvelope> {
    let enqueued = prop_oneof![
        any::<u64>(),
        0..=MAX_MS as u64,
        Just(0),
        Just(MAX_MS as u64),
        Just(MAX_MS as u64 + 1),
        Just(i64::MAX as u64),
        Just(i64::MAX as u64 + 1),
        Just(u64::MAX),
    ];
    (
        any::<u128>(),
        foreign_name(),
        foreign_name(),
        prop_oneof![Just(0u32), Just(1), Just(2), Just(u32::MAX), any::<u32>()],
        enqueued,
        prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()],
        any::<u8>(),
        proptest::option::of(any_text(20)),
        queuey_payload(),
    )
        .prop_map(
            |(
                bits,
                job_type,
                queue,
                attempt,
                enqueued_at_ms,
                deferrals,
                priority,
                cid,
                payload,
            )| {
                QueueyEnvelope {
                    job_id: Uuid::from_u128(bits),
                    job_type,
                    queue,
                    attempt,
                    enqueued_at_ms,
                    deferrals,
                    priority,
                    correlation_id: cid,
                    payload: RawValue::from_string(serde_json::to_string(&payload).unwrap())
                        .unwrap(),
                }
            },
        )
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(Index, u8),
    Set(Index, u8),
    Truncate(Index),
    Insert(Index, u8),
    Delete(Index),
    Splice(Index, &'static str),
}

/// Byte sequences that tend to matter to a JSON parser or to the envelope rules.
const TOKENS: &[&str] = &[
    "\"",
    "\\",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "null",
    "true",
    "-",
    "-1",
    "0",
    "1.5",
    "1e999",
    "-0",
    "18446744073709551616",
    "\\u0000",
    "\\ud800",
    "\\udc00\\ud800",
    "\u{feff}",
    "\u{ff}",
    "\"envelope_version\":2,",
    "\"id\":\"8ZZZZZZZZZZZZZZZZZZZZZZZZZ\",",
    "\"x\":{\"y\":[]},",
    "\"priority\":256,",
    "\"attempt_no\":0,",
    "==",
    "\"payload\":\"QQ\",",
    "2026-02-29T00:00:00.000Z",
    "9999-12-31T23:59:59.999Z",
    "[[[[[[[[[[[[[[[[",
];

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Index>(), 1u8..=255).prop_map(|(i, m)| Mutation::Flip(i, m)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<Index>().prop_map(Mutation::Delete),
        (any::<Index>(), prop::sample::select(TOKENS)).prop_map(|(i, t)| Mutation::Splice(i, t)),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = bytes.len();
        match m {
            Mutation::Flip(i, mask) if len > 0 => bytes[i.index(len)] ^= mask,
            Mutation::Set(i, b) if len > 0 => bytes[i.index(len)] = *b,
            Mutation::Truncate(i) if len > 0 => bytes.truncate(i.index(len)),
            Mutation::Insert(i, b) => bytes.insert(i.index(len + 1), *b),
            Mutation::Delete(i) if len > 0 => {
                bytes.remove(i.index(len));
            }
            Mutation::Splice(i, t) => {
                let at = i.index(len + 1);
                bytes.splice(at..at, t.bytes());
            }
            _ => {}
        }
    }
    bytes
}

/// Runs both decoders; whatever `Envelope::decode` accepts must be canonical-idempotent.
fn decode_everything(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(env) = Envelope::decode(bytes) {
        assert_idempotent(&env)?;
    }
    let _ = Envelope::decode_with_limit(bytes, 256);
    if let Ok(q) = QueueyEnvelope::decode(bytes) {
        let again = QueueyEnvelope::decode(&q.encode());
        prop_assert!(
            again.is_ok(),
            "queuey re-encoding does not decode: {:?}",
            again
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Properties.

proptest! {
    #![proptest_config(config())]

    /// decode succeeds; the canonical form is idempotent, stable, JSON-equal to
    /// the input and independent of key order and whitespace.
    #[test]
    fn valid_envelopes_have_one_canonical_form(input in arb_envelope_json(), seed in any::<u64>()) {
        let bytes = serde_json::to_vec(&input).unwrap();
        let env = decode_ok(&bytes)?;
        let c = env.encode();

        // Encoding the same envelope twice (or a clone) gives the same bytes.
        prop_assert_eq!(text(&env.encode()), text(&c));
        prop_assert_eq!(text(&env.clone().encode()), text(&c));
        prop_assert_eq!(env.encoded_len(), c.len());

        // decode(c).encode() == c, and the decoded model is the same.
        assert_idempotent(&env)?;

        // Nothing is lost, renamed, retyped or invented: left-out fields stay
        // left out, nulls stay null, unknown fields survive at every level.
        let value: Value = serde_json::from_slice(&c).unwrap();
        prop_assert_eq!(&value, &input);

        // Compact, known fields in canonical order, then unknown fields sorted.
        // (A compact serialisation's length does not depend on key order.)
        prop_assert_eq!(c.len(), serde_json::to_vec(&value).unwrap().len());
        let keys = top_level_keys(&c);
        let known: Vec<&str> = KNOWN_TOP.iter().copied().filter(|k| input.get(*k).is_some()).collect();
        prop_assert_eq!(&keys[..known.len()], &known[..]);
        let extra = &keys[known.len()..];
        prop_assert!(extra.windows(2).all(|w| w[0] < w[1]), "unknown fields not sorted: {:?}", extra);

        // Key order and whitespace of the input do not matter.
        let reordered = shuffled(&input, seed);
        let env2 = decode_ok(reordered.as_bytes())?;
        prop_assert_eq!(text(&env2.encode()), text(&c));
        prop_assert_eq!(&env2, &env);
    }

    /// queuey → rdq → queuey is lossless, and the rdq side is a valid envelope.
    #[test]
    fn queuey_round_trips_through_rdq(q in arb_queuey(), now_ms in MIN_MS..=MAX_MS) {
        let original = q.encode();
        prop_assert_eq!(&QueueyEnvelope::decode(&original).unwrap(), &q);

        let rdq = q.to_rdq(Timestamp::from_unix_ms(now_ms).unwrap());
        let bytes = rdq.encode();
        let decoded = decode_ok(&bytes)?;
        prop_assert_eq!(text(&decoded.encode()), text(&bytes));

        // The mapping itself.
        prop_assert_eq!(decoded.id.as_u128(), q.job_id.as_u128());
        prop_assert!(is_valid_name(&decoded.handler_ref));
        prop_assert!(is_valid_name(&decoded.queue));
        prop_assert_eq!(decoded.attempt_count, q.attempt.saturating_sub(1));
        prop_assert_eq!(decoded.deferral_count, q.deferrals);
        prop_assert_eq!(decoded.priority, q.priority);
        prop_assert_eq!(decoded.payload_bytes(), q.payload.get().as_bytes().to_vec());
        prop_assert_eq!(decoded.payload_content_type.as_str(), queuey::JSON_CONTENT_TYPE);
        prop_assert_eq!(decoded.headers.get(queuey::CORRELATION_ID_HEADER), q.correlation_id.as_ref());
        let job_type_header = decoded.headers.get(queuey::JOB_TYPE_HEADER);
        if is_valid_name(&q.job_type) {
            prop_assert_eq!(&decoded.handler_ref, &q.job_type);
            prop_assert_eq!(job_type_header, None);
        } else {
            prop_assert_eq!(job_type_header, Some(&q.job_type));
        }

        let back = QueueyEnvelope::from_rdq(&decoded)
            .map_err(|e| TestCaseError::fail(format!("from_rdq refused: {e}")))?;
        prop_assert_eq!(text(&back.encode()), text(&original));
        prop_assert_eq!(&back, &q);
    }

    /// Neither decoder panics on arbitrary bytes.
    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(bytes in vec(any::<u8>(), 0..512)) {
        decode_everything(&bytes)?;
    }

    /// Neither decoder panics on mutations of a valid canonical envelope.
    #[test]
    fn decoders_never_panic_on_mutated_envelopes(
        input in arb_envelope_json(),
        mutations in vec(arb_mutation(), 1..8),
    ) {
        let canonical = decode_ok(&serde_json::to_vec(&input).unwrap())?.encode();
        decode_everything(&mutate(canonical, &mutations))?;
    }

    /// Neither decoder panics on mutations of a valid queuey envelope.
    #[test]
    fn decoders_never_panic_on_mutated_queuey_envelopes(
        q in arb_queuey(),
        mutations in vec(arb_mutation(), 1..8),
    ) {
        decode_everything(&mutate(q.encode(), &mutations))?;
    }
}

/// Headers compare as a map: the shuffled writer must not have changed them.
#[test]
fn the_shuffled_writer_keeps_the_value() {
    let mut headers = BTreeMap::new();
    headers.insert("b".to_owned(), "1".to_owned());
    headers.insert("a".to_owned(), "ü".to_owned());
    let v = serde_json::json!({"z": [1, {"y": null, "x": "é"}], "h": headers, "a": -1});
    for seed in 0..64 {
        let s = shuffled(&v, seed);
        assert_eq!(serde_json::from_str::<Value>(&s).unwrap(), v, "{s}");
    }
}

/// Nesting far beyond serde_json's recursion limit is refused, never a stack overflow.
#[test]
fn deeply_nested_input_is_refused_without_overflowing() {
    for depth in [127usize, 128, 129, 10_000, 200_000] {
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let doc = format!(
            r#"{{"envelope_version":1,"id":"01J2ZK7Q8XW5H3N9G4T6B8RDQ0","queue":"q","handler_ref":"h","payload":"","payload_content_type":"x","status":"PENDING","created_at":"2026-07-20T14:03:22.117Z","x":{nested}}}"#
        );
        if let Ok(env) = Envelope::decode(doc.as_bytes()) {
            assert!(depth < 128, "depth {depth} accepted");
            assert_eq!(
                Envelope::decode(&env.encode()).unwrap().encode(),
                env.encode()
            );
        }
        let _ = Envelope::decode(nested.as_bytes());
        let queuey = format!(
            r#"{{"job_id":"0d8f9c22-5e3b-4f1a-9c77-2b1a6f0e3d44","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"deferrals":0,"priority":0,"payload":{nested}}}"#
        );
        if let Ok(q) = QueueyEnvelope::decode(queuey.as_bytes()) {
            assert_eq!(q.encode(), queuey.as_bytes());
        }
    }
}

/// Known bug (reported): serde_json is built without `float_roundtrip`, so its
/// parser may misround a float by one ulp. A float in an unknown field (or in an
/// error's `detail`) that the encoder writes as its shortest round-trip text is
/// read back as a neighbouring float: `decode(encode(env)) != env` and
/// `decode(c).encode() != c`. Fix: enable serde_json's `float_roundtrip` feature.
#[test]
fn floats_in_unknown_fields_keep_their_canonical_form() {
    let now = Timestamp::from_unix_ms(1_784_556_202_117).unwrap();
    for text_form in [
        "1.0715660391465825e-75",
        "3.026199944157321e-52",
        "6.4660538264326985e-236",
    ] {
        // Rust's own parser is correctly rounded.
        let float: f64 = text_form.parse().unwrap();
        let mut env = Envelope::new("q", "h", b"", "x", now);
        env.extra.insert("x".into(), Value::from(float));
        let c = env.encode();
        assert!(
            text(&c).ends_with(&format!(r#""x":{text_form}}}"#)),
            "{}",
            text(&c)
        );
        let decoded = Envelope::decode(&c).unwrap();
        assert_eq!(
            decoded.extra["x"].as_f64().map(f64::to_bits),
            Some(float.to_bits()),
            "{text_form}"
        );
        assert_eq!(text(&decoded.encode()), text(&c), "{text_form}");
        assert_eq!(decoded, env);
    }
}
