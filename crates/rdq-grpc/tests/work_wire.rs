//! The `Work` stream writes each leased task straight from the model
//! (`wire`); its bytes must decode to exactly the message the generated
//! code would send (`messages::leased`), on every valid fixture of
//! `compliance/fixtures` as stored and as claimed, and on envelopes with
//! headers, attempts, errors and unknown members. Where the message has at
//! most one header (so no map order is involved) the bytes are prost's
//! bytes, one for one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::PathBuf;

use prost::Message;
use rdq_app::work::Leased;
use rdq_engine::machine::replay_claim;
use rdq_envelope::{Envelope, Timestamp};
use rdq_grpc::pb;
use rdq_grpc::wire::{WorkOut, task_bytes};
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../compliance/fixtures")
}

fn valid_fixtures() -> Vec<(String, Envelope)> {
    let manifest = std::fs::read(fixtures().join("manifest.json")).unwrap();
    let manifest: Value = serde_json::from_slice(&manifest).unwrap();
    manifest["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["valid"] == Value::Bool(true))
        .map(|c| {
            let bytes = std::fs::read(fixtures().join(c["file"].as_str().unwrap())).unwrap();
            (
                c["name"].as_str().unwrap().to_owned(),
                Envelope::decode(&bytes).unwrap(),
            )
        })
        .collect()
}

/// Checks `env`'s direct bytes against the generated message's.
fn check(name: &str, env: Envelope) {
    let task = || Leased {
        envelope: env.clone(),
        lease_token: "v1.token-of-the-lease".to_owned(),
    };
    let direct = task_bytes(task());
    let expected = WorkOut::Task(task()).into_message();
    let decoded = pb::WorkResponse::decode(direct.as_slice())
        .unwrap_or_else(|e| panic!("{name}: the direct bytes do not decode: {e}"));
    assert_eq!(decoded, expected, "{name}");
    if env.headers.len() <= 1 {
        assert_eq!(direct, expected.encode_to_vec(), "{name}: bytes");
    }
}

#[test]
fn every_valid_fixture_is_written_as_the_generated_message() {
    let claimed_at = Timestamp::from_unix_ms(1_800_000_000_000).unwrap();
    let until = Timestamp::from_unix_ms(1_800_000_030_000).unwrap();
    let mut claimed = 0;
    let fixtures = valid_fixtures();
    assert!(
        fixtures.len() >= 40,
        "only {} valid fixtures",
        fixtures.len()
    );
    for (name, env) in fixtures {
        check(&name, env.clone());
        if let Ok(c) = replay_claim(env, claimed_at.unix_ms(), until.unix_ms()) {
            check(&format!("{name} (claimed)"), c);
            claimed += 1;
        }
    }
    assert!(claimed >= 10, "only {claimed} fixtures could be claimed");
}

fn envelope(extra: Value) -> Envelope {
    let mut v = json!({
        "envelope_version": 1,
        "id": "01JDQ7Z8K3M4N5P6Q7R8S9T0VW",
        "queue": "emails",
        "handler_ref": "send",
        "handler_version": "",
        "payload": "",
        "payload_content_type": "application/octet-stream",
        "status": "IN_FLIGHT",
        "priority": 0,
        "created_at": "2026-12-04T05:00:00.000Z",
        "lease_expires_at": "2026-12-04T05:00:30.000Z",
        "claim_count": 1,
        "attempt_count": 1,
        "attempts": [
            {"attempt_no": 1, "started_at": "2026-12-04T05:00:01.000Z",
             "finished_at": "2026-12-04T05:00:02.000Z", "outcome": "RETRYABLE_FAILURE",
             "error": {"type": "http.503", "message": "", "detail": {"b": [1, 2.5, null]},
                       "stack": "at x"}},
            {"attempt_no": 2, "started_at": "2026-12-04T05:00:03.000Z",
             "error": {"type": "t", "message": "m", "detail": null}}
        ],
        "headers": {"a": "1", "b": "", "": "x", "rdq.trace": "00-ab"}
    });
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    Envelope::decode(&serde_json::to_vec(&v).unwrap()).unwrap()
}

#[test]
fn headers_attempts_errors_and_empty_values_are_written_as_generated() {
    check("full", envelope(json!({})));
    check(
        "payload and refs",
        envelope(json!({"payload": "aGVsbG8=", "payload_ref": "s3://b/k", "headers": {}})),
    );
    check(
        "one empty header",
        envelope(json!({"headers": {"": ""}, "attempts": []})),
    );
    check("priority", envelope(json!({"priority": 9, "headers": {}})));
}

#[test]
fn an_envelope_with_unknown_members_goes_the_long_way_unchanged() {
    check("unknown top-level", envelope(json!({"x-custom": {"k": 1}})));
    let mut env = envelope(json!({}));
    env.attempts[0]
        .extra
        .insert("x-attempt".into(), json!([true]));
    check("unknown in an attempt", env);
    let mut env = envelope(json!({}));
    if let Some(e) = env.attempts[1].error.as_mut() {
        e.extra.insert("x-error".into(), json!("v"));
    }
    check("unknown in an error", env);
}

#[test]
fn a_batch_of_tasks_is_written_as_the_generated_message() {
    let claimed_at = Timestamp::from_unix_ms(1_800_000_000_000).unwrap();
    let until = Timestamp::from_unix_ms(1_800_000_030_000).unwrap();
    let mut envelopes: Vec<Envelope> = valid_fixtures()
        .into_iter()
        .filter_map(|(_, env)| replay_claim(env, claimed_at.unix_ms(), until.unix_ms()).ok())
        .collect();
    // One the direct mapping does not take goes the long way inside the
    // batch, between two it takes.
    envelopes.insert(1, envelope(json!({"x-custom": {"k": 1}})));
    let tasks: Vec<Leased> = envelopes
        .into_iter()
        .enumerate()
        .map(|(i, envelope)| Leased {
            envelope,
            lease_token: format!("v1.token-{i}"),
        })
        .collect();
    assert!(tasks.len() >= 11, "only {} claimed fixtures", tasks.len());
    // A busy encoder's scratch holds the previous batch: nothing of it
    // may leak into the next.
    let earlier: Vec<Leased> = tasks.iter().rev().take(3).cloned().collect();
    let direct = rdq_grpc::wire::tasks_bytes(earlier, tasks.clone());
    let expected = WorkOut::Tasks(tasks).into_message();
    let decoded = pb::WorkResponse::decode(direct.as_slice()).unwrap();
    assert_eq!(decoded, expected);
    let one = rdq_grpc::wire::tasks_bytes(Vec::new(), Vec::new());
    assert_eq!(
        pb::WorkResponse::decode(one.as_slice()).unwrap(),
        WorkOut::Tasks(Vec::new()).into_message(),
        "an empty batch is a tasks message with none"
    );
}
