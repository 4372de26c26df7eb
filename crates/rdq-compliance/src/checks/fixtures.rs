//! The envelope is the arbiter: whatever valid envelope a store is given, in
//! whatever status, it gives back byte for byte, unknown fields included. The
//! cases are the language-neutral fixtures under `compliance/fixtures` plus a
//! few envelopes built here.

use std::path::Path;

use rdq_engine::store::MAX_PAGE;
use rdq_engine::{Capabilities, ListQuery, NewTask, Submitted};
use rdq_envelope::{AttemptRecord, Envelope, ErrorInfo, Outcome, Status};
use serde_json::{Value, json};

use crate::harness::{Need, Spi as _, assert_same_bytes, at, skipped, start};
use crate::{FIXTURES_DIR, StoreFactory};

/// Every valid fixture (and a few envelopes of the suite's own), submitted
/// as is through `Store::submit` to a fresh store, comes back from `get` (and
/// from `list`, where the store can list) with the same canonical bytes.
pub async fn fixtures_round_trip(factory: StoreFactory) {
    let caps = Capabilities::of(factory().await.as_ref());
    if skipped("fixtures_round_trip", caps, &[Need::GetById]) {
        return;
    }
    let mut cases = own_envelopes();
    cases.extend(valid_fixtures(Path::new(FIXTURES_DIR)));
    for (name, original) in cases {
        // Fixtures share ids, so each gets a store of its own.
        let store = factory().await;
        let mut results = store
            .submit(vec![NewTask {
                envelope: original.clone(),
                idempotency_key: None,
                unique: None,
            }])
            .await;
        assert_eq!(results.len(), 1, "{name}: one result per submitted task");
        let submitted = results
            .remove(0)
            .unwrap_or_else(|e| panic!("{name}: the store refused a valid envelope: {e}"));
        assert!(
            matches!(submitted, Submitted::Created(_)),
            "{name}: a new task should be created"
        );
        assert_same_bytes(submitted.envelope(), &original, &format!("{name} (submit)"));
        let stored = store
            .get(original.id)
            .await
            .unwrap_or_else(|e| panic!("{name}: get after submit failed: {e}"));
        assert_same_bytes(&stored, &original, &format!("{name} (get)"));
        if caps.list {
            let page = store
                .list(&ListQuery {
                    queue: original.queue.clone(),
                    status: Some(original.status),
                    limit: MAX_PAGE,
                    ..ListQuery::default()
                })
                .await
                .unwrap_or_else(|e| panic!("{name}: list failed: {e}"));
            let listed = page
                .items
                .iter()
                .find(|env| env.id == original.id)
                .unwrap_or_else(|| panic!("{name}: the task is missing from its queue's list"));
            assert_same_bytes(listed, &original, &format!("{name} (list)"));
        }
    }
}

/// The valid cases of the fixture manifest, decoded.
fn valid_fixtures(dir: &Path) -> Vec<(String, Envelope)> {
    let manifest_path = dir.join("manifest.json");
    let manifest = std::fs::read(&manifest_path).unwrap_or_else(|e| {
        panic!(
            "the fixture manifest {} cannot be read: {e}",
            manifest_path.display()
        )
    });
    let manifest: Value = serde_json::from_slice(&manifest).expect("the manifest is JSON");
    assert_eq!(manifest["format"], json!(1), "unknown manifest format");
    let cases = manifest["cases"]
        .as_array()
        .expect("the manifest has cases");
    let valid: Vec<(String, Envelope)> = cases
        .iter()
        .filter(|case| case["valid"] == json!(true))
        .map(|case| {
            let name = case["name"].as_str().expect("a case has a name").to_owned();
            let file = case["file"].as_str().expect("a case names its file");
            let bytes = std::fs::read(dir.join(file))
                .unwrap_or_else(|e| panic!("fixture {name}: cannot read {file}: {e}"));
            let env = Envelope::decode(&bytes)
                .unwrap_or_else(|e| panic!("fixture {name} is marked valid but: {e}"));
            (format!("fixture {name}"), env)
        })
        .collect();
    assert!(!valid.is_empty(), "the manifest has no valid cases");
    valid
}

/// Envelopes of the suite's own, one per status, with unknown fields at every level.
fn own_envelopes() -> Vec<(String, Envelope)> {
    let mut pending = Envelope::new(
        "compliance.own",
        "own-handler",
        b"\x00\x01 binary \xff",
        "application/octet-stream",
        start(),
    );
    pending.priority = 7;
    pending
        .headers
        .insert("traceparent".into(), "00-abc-def-01".into());
    pending
        .extra
        .insert("x_future_field".into(), json!({"nested": [1, "two", null]}));

    let mut dead = Envelope::new(
        "compliance.own",
        "own-handler",
        br#"{"k":"v"}"#,
        "application/json",
        start(),
    );
    dead.status = Status::Dead;
    dead.attempt_count = 2;
    dead.redrive_count = 1;
    dead.deferral_count = 3;
    dead.next_attempt_at = None;
    for no in 1..=2u32 {
        let mut attempt = AttemptRecord::open(no, at(u64::from(no) * 1_000));
        attempt.finished_at = Some(at(u64::from(no) * 1_000 + 250));
        attempt.outcome = Some(if no == 1 {
            Outcome::LeaseExpired
        } else {
            Outcome::PermanentFailure
        });
        let mut error = ErrorInfo::new("app.Validation", "naïve input — ✓ rejected")
            .with_stack("at main\n\tat handler")
            .with_detail(json!({"field": "email"}));
        error.extra.insert("x_error_note".into(), json!("kept"));
        attempt.error = Some(error);
        attempt
            .extra
            .insert("x_attempt_host".into(), json!("worker-7"));
        dead.attempts.push(attempt);
    }
    dead.extra.insert("a_first_unknown".into(), json!(true));

    let mut in_flight = Envelope::new("compliance.own", "own-handler", b"", "text/plain", start());
    in_flight.status = Status::InFlight;
    in_flight.attempt_count = 1;
    in_flight.next_attempt_at = None;
    in_flight.lease_expires_at = Some(at(30_000));
    in_flight.attempts.push(AttemptRecord::open(1, start()));

    vec![
        ("own pending".to_owned(), pending),
        ("own dead".to_owned(), dead),
        ("own in-flight".to_owned(), in_flight),
    ]
}
