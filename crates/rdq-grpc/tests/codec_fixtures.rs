//! JSON → proto → JSON is byte-identical on every valid fixture of
//! `compliance/fixtures`, through the protobuf wire bytes too; every
//! invalid fixture (but the size ones: a size limit is the queue's) is
//! refused by `codec::from_json` with the manifest's code; a message that maps onto a bad envelope gets the code its JSON
//! would get.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::PathBuf;

use prost::Message;
use rdq_envelope::Envelope;
use rdq_grpc::{codec, pb};
use serde_json::Value;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../compliance/fixtures")
}

fn cases() -> Vec<Value> {
    let manifest = std::fs::read(fixtures().join("manifest.json")).unwrap();
    let manifest: Value = serde_json::from_slice(&manifest).unwrap();
    manifest["cases"].as_array().unwrap().clone()
}

#[test]
fn every_valid_fixture_round_trips_byte_for_byte() {
    let mut checked = 0;
    for case in cases() {
        if case["valid"] != Value::Bool(true) {
            continue;
        }
        let name = case["name"].as_str().unwrap();
        let bytes = std::fs::read(fixtures().join(case["file"].as_str().unwrap())).unwrap();
        let canonical = Envelope::decode(&bytes).unwrap().encode();
        let msg = codec::from_json(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Through the wire bytes, as a client would see it.
        let wire = msg.encode_to_vec();
        let back = pb::Envelope::decode(wire.as_slice()).unwrap();
        assert_eq!(back, msg, "{name}");
        let json = codec::to_json(&back).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            String::from_utf8_lossy(&json),
            String::from_utf8_lossy(&canonical),
            "{name}"
        );
        if case["canonical"] == Value::Bool(true) {
            assert_eq!(json, bytes, "{name}: canonical fixture");
        }
        // And from the decoded model.
        assert_eq!(
            codec::to_proto(&Envelope::decode(&bytes).unwrap()),
            msg,
            "{name}"
        );
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} valid fixtures");
}

#[test]
fn every_invalid_fixture_is_refused_with_its_code() {
    let mut checked = 0;
    for case in cases() {
        // Size is a queue's limit, checked where the envelope is stored,
        // not by the mapping.
        if case["valid"] != Value::Bool(false) || case["code"] == "PAYLOAD_TOO_LARGE" {
            continue;
        }
        let name = case["name"].as_str().unwrap();
        let bytes = std::fs::read(fixtures().join(case["file"].as_str().unwrap())).unwrap();
        let Err(err) = codec::from_json(&bytes) else {
            panic!("{name}: accepted");
        };
        assert_eq!(
            err.code().as_str(),
            case["code"].as_str().unwrap(),
            "{name}"
        );
        checked += 1;
    }
    assert!(checked >= 50, "only {checked} invalid fixtures");
}

fn seed() -> pb::Envelope {
    let bytes = std::fs::read(fixtures().join("valid/seed_canonical.json")).unwrap();
    codec::from_json(&bytes).unwrap()
}

#[test]
fn the_seed_maps_field_by_field() {
    let m = seed();
    assert_eq!(m.envelope_version, 1);
    assert_eq!(m.queue, "payments.charge");
    assert_eq!(m.payload, br#"{"order_id": 42}"#);
    assert_eq!(m.status, pb::Status::Pending as i32);
    assert_eq!(m.attempts[0].outcome, pb::Outcome::RetryableFailure as i32);
    assert_eq!(m.lease_expires_at, None);
    assert!(
        m.omitted
            .iter()
            .all(|o| codec::ENVELOPE_OPTIONAL.contains(&o.as_str()))
    );
}

#[test]
fn a_bad_message_gets_the_code_its_json_would_get() {
    let mut m = seed();
    m.queue = "Bad Queue".into();
    assert_eq!(
        codec::to_json(&m).unwrap_err().code().as_str(),
        "INVALID_QUEUE_NAME"
    );

    let mut m = seed();
    m.status = 0;
    let e = codec::to_json(&m).unwrap_err();
    assert_eq!(
        (e.code().as_str(), e.path()),
        ("INVALID_FIELD", Some("status"))
    );

    let mut m = seed();
    m.unknown_json = "[1]".into();
    assert_eq!(
        codec::to_json(&m).unwrap_err().code().as_str(),
        "MALFORMED_ENVELOPE"
    );

    let mut m = seed();
    m.unknown_json = r#"{"queue":"x"}"#.into();
    assert_eq!(
        codec::to_json(&m).unwrap_err().code().as_str(),
        "MALFORMED_ENVELOPE"
    );

    let mut m = seed();
    m.omitted = vec!["created_at".into()];
    assert_eq!(
        codec::to_json(&m).unwrap_err().code().as_str(),
        "INVALID_FIELD"
    );

    let mut m = seed();
    m.priority = 256;
    assert_eq!(
        codec::to_json(&m).unwrap_err().code().as_str(),
        "INVALID_FIELD"
    );

    let mut m = seed();
    m.created_at = "2026-07-20T14:03:22Z".into();
    assert_eq!(
        codec::to_json(&m).unwrap_err().code().as_str(),
        "INVALID_FIELD"
    );
}

#[test]
fn unknown_members_keep_every_digit() {
    let bytes = std::fs::read(fixtures().join("valid/unknown_numbers_exact.json")).unwrap();
    let m = codec::from_json(&bytes).unwrap();
    assert!(
        m.unknown_json.contains("18446744073709551616"),
        "{}",
        m.unknown_json
    );
    assert_eq!(
        codec::to_json(&m).unwrap(),
        Envelope::decode(&bytes).unwrap().encode()
    );
}

#[test]
fn the_direct_mapping_is_the_mapping_through_json() {
    use rdq_envelope::{AttemptRecord, ErrorInfo, Outcome, Status, Timestamp};
    let now = Timestamp::from_unix_ms(1_767_225_600_123).unwrap();
    let fresh = Envelope::new("mail", "send", b"{\"to\":1}", "application/json", now);
    let mut failed = fresh.clone();
    failed.status = Status::Pending;
    failed.attempt_count = 2;
    failed.claim_count = 2;
    failed.priority = 7;
    failed.handler_version = Some("v2".into());
    failed
        .headers
        .insert("traceparent".into(), "00-ab-cd-01".into());
    failed.next_attempt_at = Some(now);
    let mut first = AttemptRecord::open(1, now);
    first.finished_at = Some(now);
    first.outcome = Some(Outcome::RetryableFailure);
    first.error = Some(
        ErrorInfo::new("smtp.Timeout", "no answer \"quoted\" ✓")
            .with_stack("at line 1\n")
            .with_detail(serde_json::json!({"n": 12345678901234567890u64, "ok": [true, null]})),
    );
    let mut second = AttemptRecord::open(2, now);
    second.finished_at = Some(now);
    second.outcome = Some(Outcome::LeaseExpired);
    second.error = Some(ErrorInfo::new("rdq.LeaseExpired", "lapsed"));
    failed.attempts = vec![first, second, AttemptRecord::open(3, now)];
    let mut checked = 0;
    let fixtures = cases()
        .into_iter()
        .filter(|c| c["valid"] == Value::Bool(true))
        .map(|c| {
            let bytes = std::fs::read(fixtures().join(c["file"].as_str().unwrap())).unwrap();
            Envelope::decode(&bytes).unwrap()
        });
    assert!(codec::to_proto_direct(&fresh).is_some());
    assert!(codec::to_proto_direct(&failed).is_some());
    for env in [fresh, failed].into_iter().chain(fixtures) {
        // Through the wire and back to the same canonical JSON, too.
        let msg = codec::to_proto(&env);
        assert_eq!(
            msg,
            codec::to_proto_via_json(&env),
            "{}",
            env.encode_string()
        );
        assert_eq!(codec::to_json(&msg).unwrap(), env.encode());
        checked += 1;
    }
    assert!(checked > 2);
}
