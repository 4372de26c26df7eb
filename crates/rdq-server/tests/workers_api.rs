//! The pull-worker API: claim with lease tokens, settle one or a batch,
//! extend a lease, and the fencing that refuses stale workers with 409.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use common::TestServer;
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn claim(server: &TestServer, queue: &str, body: Value) -> Vec<Value> {
    let r = server
        .post(&format!("/v1/queues/{queue}/claim"), body)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    r.body["tasks"].as_array().unwrap().clone()
}

fn settle_path(task: &Value) -> String {
    format!("/v1/tasks/{}/settle", task["id"].as_str().unwrap())
}

#[tokio::test]
async fn claimed_tasks_carry_a_lease_token_and_settle_to_succeeded() {
    let server = TestServer::start().await;
    for i in 0..3 {
        server.submit("work", json!(i)).await;
    }
    let tasks = claim(&server, "work", json!({"max": 2})).await;
    assert_eq!(tasks.len(), 2);
    for t in &tasks {
        assert_eq!(t["envelope"]["status"], "IN_FLIGHT");
        assert_eq!(t["envelope"]["attempt_count"], 1);
        assert_eq!(t["id"], t["envelope"]["id"]);
        assert!(t["lease_token"].as_str().unwrap().starts_with("1."));
    }
    let r = server
        .post(
            &settle_path(&tasks[0]),
            json!({"lease_token": tasks[0]["lease_token"], "outcome": "SUCCESS"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"], "SUCCEEDED");
    assert_eq!(r.body["attempts"][0]["outcome"], "SUCCESS");
    // A second settle with the same token is stale.
    server
        .post(
            &settle_path(&tasks[0]),
            json!({"lease_token": tasks[0]["lease_token"], "outcome": "SUCCESS"}),
        )
        .await
        .assert_problem(409, "LEASE_LOST");
    server.stop().await;
}

#[tokio::test]
async fn failures_record_the_error_and_follow_the_queue_policy() {
    let server = TestServer::start().await;
    server
        .put(
            "/v1/queues/flaky/config",
            json!({"max_attempts": 2, "backoff": {"kind": "none"}, "non_retryable_errors": ["billing.*"]}),
        )
        .await;
    for i in 0..3 {
        server.submit("flaky", json!(i)).await;
    }
    let tasks = claim(&server, "flaky", json!({"max": 3})).await;
    let settle = |i: usize, outcome: &str, ty: &str| {
        json!({"lease_token": tasks[i]["lease_token"], "outcome": outcome,
               "error": {"type": ty, "message": "boom", "detail": {"k": 1}, "stack": "at x"}})
    };
    let retried = server
        .post(
            &settle_path(&tasks[0]),
            settle(0, "RETRYABLE_FAILURE", "io.Timeout"),
        )
        .await;
    assert_eq!(retried.body["status"], "PENDING", "{}", retried.text);
    let error = &retried.body["attempts"][0]["error"];
    assert_eq!(error["type"], "io.Timeout");
    assert_eq!(error["message"], "boom");
    assert_eq!(error["detail"]["k"], 1);
    assert_eq!(error["stack"], "at x");
    let dead = server
        .post(
            &settle_path(&tasks[1]),
            settle(1, "PERMANENT_FAILURE", "x.Y"),
        )
        .await;
    assert_eq!(dead.body["status"], "DEAD");
    // FAILURE leaves classification to the queue's globs.
    let classified = server
        .post(
            &settle_path(&tasks[2]),
            settle(2, "FAILURE", "billing.Declined"),
        )
        .await;
    assert_eq!(classified.body["status"], "DEAD");
    assert_eq!(
        classified.body["attempts"][0]["outcome"],
        "PERMANENT_FAILURE"
    );
    server.stop().await;
}

#[tokio::test]
async fn defer_and_release_spend_no_attempt() {
    let server = TestServer::start().await;
    server.submit("d", json!(1)).await;
    server.submit("d", json!(2)).await;
    let tasks = claim(&server, "d", json!({"max": 2})).await;
    let deferred = server
        .post(
            &settle_path(&tasks[0]),
            json!({"lease_token": tasks[0]["lease_token"], "outcome": "DEFER", "defer_ms": 60000}),
        )
        .await;
    assert_eq!(deferred.body["status"], "PENDING", "{}", deferred.text);
    assert_eq!(deferred.body["attempt_count"], 0);
    assert_eq!(deferred.body["deferral_count"], 1);
    let released = server
        .post(
            &settle_path(&tasks[1]),
            json!({"lease_token": tasks[1]["lease_token"], "outcome": "RELEASE"}),
        )
        .await;
    assert_eq!(released.body["status"], "PENDING");
    assert_eq!(released.body["attempt_count"], 0);
    // Released is due now; deferred is not.
    let again = claim(&server, "d", json!({"max": 5})).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0]["id"], tasks[1]["id"]);
    server.stop().await;
}

#[tokio::test]
async fn a_batch_settle_answers_one_result_per_item_in_order() {
    let server = TestServer::start().await;
    for i in 0..4 {
        server.submit("batch", json!(i)).await;
    }
    let tasks = claim(&server, "batch", json!({"max": 4})).await;
    let settles = json!({"settles": [
        {"id": tasks[0]["id"], "lease_token": tasks[0]["lease_token"], "outcome": "SUCCESS"},
        {"id": tasks[1]["id"], "lease_token": "9.00000000", "outcome": "SUCCESS"},
        {"id": tasks[2]["id"], "lease_token": tasks[2]["lease_token"], "outcome": "MAYBE"},
        {"id": "01J2ZK7Q8XW5H3N9G4T6B8RDQ0", "lease_token": tasks[0]["lease_token"], "outcome": "SUCCESS"},
        {"id": tasks[3]["id"], "lease_token": tasks[3]["lease_token"], "outcome": "PERMANENT_FAILURE", "error": {"type": "t"}},
        {"id": tasks[0]["id"], "lease_token": tasks[0]["lease_token"], "outcome": "SUCCESS"},
    ]});
    let r = server.post("/v1/settle", settles).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let results = r.body["results"].as_array().unwrap();
    let summary: Vec<(u64, &str)> = results
        .iter()
        .map(|r| {
            (
                r["status"].as_u64().unwrap(),
                r["code"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (200, ""),
            (409, "LEASE_LOST"),
            (400, "MALFORMED_REQUEST"),
            // A token not issued for this id: whether or not the id exists.
            (409, "LEASE_LOST"),
            (200, ""),
            (409, "LEASE_LOST"),
        ]
    );
    assert_eq!(results[0]["envelope"]["status"], "SUCCEEDED");
    assert_eq!(results[4]["envelope"]["status"], "DEAD");
    assert_eq!(results[1]["id"], tasks[1]["id"]);
    server.stop().await;
}

#[tokio::test]
async fn a_batch_settle_answers_without_envelopes_when_asked() {
    let server = TestServer::start().await;
    for i in 0..3 {
        server.submit("bare", json!(i)).await;
    }
    let tasks = claim(&server, "bare", json!({"max": 3})).await;
    let item =
        |t: &Value| json!({"id": t["id"], "lease_token": t["lease_token"], "outcome": "SUCCESS"});
    let bare = server
        .post(
            "/v1/settle",
            json!({"settles": [item(&tasks[0]), item(&tasks[0])], "envelopes": false}),
        )
        .await;
    assert_eq!(bare.status, StatusCode::OK, "{}", bare.text);
    let results = bare.body["results"].as_array().unwrap();
    assert_eq!(results[0], json!({"id": tasks[0]["id"], "status": 200}));
    assert_eq!(results[1]["code"], "LEASE_LOST");
    // Settled all the same; true and null mean the default: with envelopes.
    let got = server
        .get(&format!("/v1/tasks/{}", tasks[0]["id"].as_str().unwrap()))
        .await;
    assert_eq!(got.body["status"], "SUCCEEDED");
    for (t, flag) in [(&tasks[1], json!(true)), (&tasks[2], Value::Null)] {
        let full = server
            .post(
                "/v1/settle",
                json!({"settles": [item(t)], "envelopes": flag}),
            )
            .await;
        assert_eq!(
            full.body["results"][0]["envelope"]["status"], "SUCCEEDED",
            "{}",
            full.text
        );
    }
    let wrong = server
        .post("/v1/settle", json!({"settles": [], "envelopes": "no"}))
        .await;
    wrong.assert_problem(400, "MALFORMED_REQUEST");
    server.stop().await;
}

#[tokio::test]
async fn a_lease_token_works_only_for_its_own_task() {
    let server = TestServer::start().await;
    server.submit("q", json!(1)).await;
    server.submit("q", json!(2)).await;
    let tasks = claim(&server, "q", json!({"max": 2})).await;
    // Both are on attempt 1, but the tokens are not interchangeable.
    server
        .post(
            &settle_path(&tasks[0]),
            json!({"lease_token": tasks[1]["lease_token"], "outcome": "SUCCESS"}),
        )
        .await
        .assert_problem(409, "LEASE_LOST");
    server
        .post(
            &settle_path(&tasks[0]),
            json!({"lease_token": "garbage", "outcome": "SUCCESS"}),
        )
        .await
        .assert_problem(400, "INVALID_FIELD");
    server.stop().await;
}

#[tokio::test]
async fn bad_settle_bodies_are_refused_and_change_nothing() {
    let server = TestServer::start().await;
    server.submit("q", json!(1)).await;
    let tasks = claim(&server, "q", json!({"max": 1})).await;
    let before = server.snapshot().await;
    let token = tasks[0]["lease_token"].clone();
    for (body, code) in [
        (
            json!({"lease_token": token, "outcome": "RETRYABLE_FAILURE"}),
            "INVALID_FIELD",
        ),
        (
            json!({"lease_token": token, "outcome": "DEFER"}),
            "INVALID_FIELD",
        ),
        (
            json!({"lease_token": token, "outcome": "SUCCESS", "defer_ms": 5}),
            "INVALID_FIELD",
        ),
        (
            json!({"lease_token": token, "outcome": "SUCCESS", "error": {"type": "x"}}),
            "INVALID_FIELD",
        ),
        (
            json!({"lease_token": token, "outcome": "FAILURE", "error": {"type": ""}}),
            "INVALID_FIELD",
        ),
        (
            json!({"lease_token": token, "outcome": "DONE"}),
            "MALFORMED_REQUEST",
        ),
        (json!({"outcome": "SUCCESS"}), "MALFORMED_REQUEST"),
        (
            json!({"lease_token": token, "outcome": "SUCCESS", "extra": 1}),
            "MALFORMED_REQUEST",
        ),
    ] {
        server
            .post(&settle_path(&tasks[0]), body.clone())
            .await
            .assert_problem(400, code);
        assert_eq!(server.snapshot().await, before, "{body}");
    }
    for (body, code) in [
        (json!({"max": 1001}), "INVALID_FIELD"),
        (json!({"max": 1, "lease_ms": 0}), "INVALID_FIELD"),
        (json!({"max": -1}), "MALFORMED_REQUEST"),
        (json!({}), "MALFORMED_REQUEST"),
    ] {
        server
            .post("/v1/queues/q/claim", body.clone())
            .await
            .assert_problem(400, code);
    }
    server
        .post("/v1/queues/Q!/claim", json!({"max": 1}))
        .await
        .assert_problem(400, "INVALID_QUEUE_NAME");
    assert_eq!(server.snapshot().await, before);
    server.stop().await;
}

#[tokio::test]
async fn a_lease_can_be_extended_while_held() {
    let server = TestServer::start().await;
    server.submit("q", json!(1)).await;
    let tasks = claim(&server, "q", json!({"max": 1, "lease_ms": 60000})).await;
    let path = format!("/v1/tasks/{}/lease", tasks[0]["id"].as_str().unwrap());
    let before = tasks[0]["envelope"]["lease_expires_at"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = server
        .post(
            &path,
            json!({"lease_token": tasks[0]["lease_token"], "extend_ms": 600000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(r.body["lease_expires_at"].as_str().unwrap() > before.as_str());
    server
        .post(
            &path,
            json!({"lease_token": tasks[0]["lease_token"], "extend_ms": 0}),
        )
        .await
        .assert_problem(400, "INVALID_FIELD");
    server
        .post(&path, json!({"lease_token": "7.00000000", "extend_ms": 10}))
        .await
        .assert_problem(409, "LEASE_LOST");
    server.stop().await;
}

#[tokio::test]
async fn a_crashed_workers_lease_expires_the_task_is_claimable_again_and_its_settle_is_refused() {
    let server = TestServer::start().await;
    server
        .put(
            "/v1/queues/crash/config",
            json!({"backoff": {"kind": "none"}}),
        )
        .await;
    server.submit("crash", json!(1)).await;
    let first = claim(&server, "crash", json!({"max": 1, "lease_ms": 100})).await;
    assert_eq!(first.len(), 1);
    // The worker "crashes": it never settles. The reaper closes the lease.
    let mut again = Vec::new();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        again = claim(&server, "crash", json!({"max": 1, "lease_ms": 60000})).await;
        if !again.is_empty() {
            break;
        }
    }
    assert_eq!(again.len(), 1, "the task became claimable again");
    let env = &again[0]["envelope"];
    assert_eq!(env["attempts"][0]["outcome"], "LEASE_EXPIRED");
    assert_eq!(env["attempts"][0]["error"]["type"], "rdq.LeaseExpired");
    assert_eq!(env["attempt_count"], 2);
    assert!(again[0]["lease_token"].as_str().unwrap().starts_with("2."));
    // The crashed worker comes back and settles: refused, nothing changes.
    let before = server.snapshot().await;
    server
        .post(
            &settle_path(&first[0]),
            json!({"lease_token": first[0]["lease_token"], "outcome": "SUCCESS"}),
        )
        .await
        .assert_problem(409, "LEASE_LOST");
    assert_eq!(server.snapshot().await, before);
    // The new holder settles fine.
    let ok = server
        .post(
            &settle_path(&again[0]),
            json!({"lease_token": again[0]["lease_token"], "outcome": "SUCCESS"}),
        )
        .await;
    assert_eq!(ok.body["status"], "SUCCEEDED");
    server.stop().await;
}

/// The check the server used before tokens were keyed: SplitMix64 over the
/// task id and claim, computable by anyone who can read the task.
fn public_token(id: &str, claim: u32) -> String {
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let bits = rdq_envelope::TaskId::parse(id).unwrap().as_u128();
    let mixed = mix(mix((bits >> 64) as u64 ^ u64::from(claim)) ^ bits as u64);
    format!("{claim}.{:08x}", (mixed >> 32) as u32)
}

#[tokio::test]
async fn a_token_computed_from_what_a_reader_can_see_is_refused_with_lease_lost() {
    let server = TestServer::start().await;
    server.submit("q", json!(1)).await;
    let task = claim(&server, "q", json!({"max": 1})).await.remove(0);
    let id = task["id"].as_str().unwrap();
    let seen = server.get(&format!("/v1/tasks/{id}")).await;
    let claim_count = u32::try_from(seen.body["claim_count"].as_u64().unwrap()).unwrap();
    let forged = public_token(id, claim_count);
    assert_ne!(forged, task["lease_token"].as_str().unwrap());
    for forged in [forged, format!("{claim_count}.{}", "0".repeat(32))] {
        server
            .post(
                &settle_path(&task),
                json!({"lease_token": forged, "outcome": "SUCCESS"}),
            )
            .await
            .assert_problem(409, "LEASE_LOST");
    }
    let still = server.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(still.body["status"], "IN_FLIGHT");
    let r = server
        .post(
            &settle_path(&task),
            json!({"lease_token": task["lease_token"], "outcome": "SUCCESS"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    server.stop().await;
}

/// The raw text of each envelope inside a JSON answer, found by its key.
fn raw_envelopes(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("\"envelope\":") {
        let from = &rest[at + "\"envelope\":".len()..];
        let mut depth = 0usize;
        let mut in_str = false;
        let mut escaped = false;
        let mut end = 0;
        for (i, c) in from.char_indices() {
            if in_str {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => in_str = false,
                    _ => {}
                }
                continue;
            }
            match c {
                '"' => in_str = true,
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push(from[..end].to_owned());
        rest = &from[end..];
    }
    out
}

#[tokio::test]
async fn claim_and_batch_settle_answers_carry_envelopes_in_their_canonical_bytes() {
    let server = TestServer::start().await;
    server.submit("canon", json!({"z": 1, "a": 2})).await;
    let r = server
        .post("/v1/queues/canon/claim", json!({"max": 1}))
        .await;
    let claimed = raw_envelopes(&r.text);
    assert_eq!(claimed.len(), 1, "{}", r.text);
    let env = rdq_envelope::Envelope::decode(claimed[0].as_bytes()).unwrap();
    assert_eq!(
        claimed[0],
        env.encode_string(),
        "claim: canonical byte order"
    );
    assert!(claimed[0].starts_with("{\"envelope_version\":1,\"id\":"));
    let task = &r.body["tasks"][0];
    let settled = server
        .post(
            "/v1/settle",
            json!({"settles": [{"id": task["id"], "lease_token": task["lease_token"], "outcome": "SUCCESS"}]}),
        )
        .await;
    let settled_raw = raw_envelopes(&settled.text);
    assert_eq!(settled_raw.len(), 1, "{}", settled.text);
    let env = rdq_envelope::Envelope::decode(settled_raw[0].as_bytes()).unwrap();
    assert_eq!(
        settled_raw[0],
        env.encode_string(),
        "batch settle: canonical byte order"
    );
    let got = server.get(&format!("/v1/tasks/{}", env.id)).await;
    assert_eq!(got.text, settled_raw[0], "the same bytes as GET");
    server.stop().await;
}

#[tokio::test]
async fn an_http_worker_hears_of_a_cancel_at_its_next_extension() {
    let server = TestServer::start().await;
    server.submit("q", json!(1)).await;
    server.submit("q", json!(2)).await;
    let tasks = claim(&server, "q", json!({"max": 1, "lease_ms": 60000})).await;
    let (running, waiting) = (
        tasks[0]["id"].as_str().unwrap().to_owned(),
        server.submit("q", json!(3)).await,
    );
    let waiting = waiting["id"].as_str().unwrap().to_owned();
    let r = server
        .post(
            "/v1/queues/q/cancel",
            json!({"ids": [running, waiting], "message": "not needed"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["count"], 2);
    assert_eq!(r.body["running"], json!([running]), "{}", r.text);
    let path = format!("/v1/tasks/{running}/lease");
    let r = server
        .post(
            &path,
            json!({"lease_token": tasks[0]["lease_token"], "extend_ms": 60000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"], "IN_FLIGHT");
    assert_eq!(r.body["cancel_requested"]["message"], "not needed");
    let r = server
        .post(
            &settle_path(&tasks[0]),
            json!({"lease_token": tasks[0]["lease_token"], "outcome": "RETRYABLE_FAILURE",
                   "error": {"type": "app.Stopped", "message": "stopped"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"], "DEAD");
    assert_eq!(r.body["dead_reason"]["code"], "CANCELLED");
    assert_eq!(r.body["attempt_count"], 1);
    // pending_only leaves a running task alone.
    let next = claim(&server, "q", json!({"max": 1, "lease_ms": 60000})).await;
    server
        .post(
            "/v1/queues/q/cancel",
            json!({"ids": [next[0]["id"]], "pending_only": true}),
        )
        .await
        .assert_problem(409, "INVALID_TRANSITION");
    server.stop().await;
}
