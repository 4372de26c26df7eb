//! Callback dispatch end to end: the real `rdq serve`, a real HTTP receiver,
//! and every row of `docs/outcomes.md`'s callback mapping table, plus a timeout, a
//! refused connection, a 200 with `{"status":"FAILED"}`, `Retry-After`,
//! `status_map`, graceful shutdown with a callback in flight, and a
//! target's back-pressure throttling a flow key.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use common::{Api, FAST_CONFIG, RdqServer, Receiver, closed_port};
use serde_json::{Value, json};

/// A queue that retries once at once, so a retryable failure shows as two
/// failed attempts and a permanent one as a single attempt.
async fn callback_queue(api: &Api, queue: &str, callback: Value) {
    api.configure(
        queue,
        json!({"max_attempts": 2, "backoff": {"kind": "none"}, "lease_ms": 5000, "callback": callback}),
    )
    .await;
}

fn outcomes(env: &Value) -> Vec<String> {
    env["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["outcome"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_of_the_default_mapping_table() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let receiver = Receiver::start().await;
    let api = Api::new(&server.base);
    callback_queue(
        &api,
        "map",
        json!({"url": receiver.url, "timeout_ms": 2000}),
    )
    .await;

    let elsewhere = receiver.url.replace("/hook", "/elsewhere");
    let rows: Vec<(Value, &str, Vec<&str>, Option<&str>)> = vec![
        (json!({"status": 200}), "SUCCEEDED", vec!["SUCCESS"], None),
        (json!({"status": 201}), "SUCCEEDED", vec!["SUCCESS"], None),
        (json!({"status": 204}), "SUCCEEDED", vec!["SUCCESS"], None),
        (
            json!({"status": 408, "body": "slow"}),
            "DEAD",
            vec!["RETRYABLE_FAILURE", "RETRYABLE_FAILURE"],
            Some("http.Status408"),
        ),
        (
            json!({"status": 429}),
            "DEAD",
            vec!["RETRYABLE_FAILURE", "RETRYABLE_FAILURE"],
            Some("http.Status429"),
        ),
        (
            json!({"status": 500, "body": "internal oops"}),
            "DEAD",
            vec!["RETRYABLE_FAILURE", "RETRYABLE_FAILURE"],
            Some("http.Status500"),
        ),
        (
            json!({"status": 502}),
            "DEAD",
            vec!["RETRYABLE_FAILURE", "RETRYABLE_FAILURE"],
            Some("http.Status502"),
        ),
        (
            json!({"status": 503}),
            "DEAD",
            vec!["RETRYABLE_FAILURE", "RETRYABLE_FAILURE"],
            Some("http.Status503"),
        ),
        (
            json!({"status": 400, "body": {"error": "bad order"}}),
            "DEAD",
            vec!["PERMANENT_FAILURE"],
            Some("http.Status400"),
        ),
        (
            json!({"status": 404}),
            "DEAD",
            vec!["PERMANENT_FAILURE"],
            Some("http.Status404"),
        ),
        (
            json!({"status": 422}),
            "DEAD",
            vec!["PERMANENT_FAILURE"],
            Some("http.Status422"),
        ),
        // Redirects are not followed: a 3xx is not a success.
        (
            json!({"status": 307, "location": elsewhere}),
            "DEAD",
            vec!["PERMANENT_FAILURE"],
            Some("http.Status307"),
        ),
        // A retryable failure then a success: retried, and succeeds.
        (
            json!({"status": 503, "then": {"status": 200}}),
            "SUCCEEDED",
            vec!["RETRYABLE_FAILURE", "SUCCESS"],
            None,
        ),
    ];
    let mut ids = Vec::new();
    for (script, ..) in &rows {
        ids.push(api.submit("map", script.clone()).await);
    }
    for ((script, status, expected, error_type), id) in rows.iter().zip(&ids) {
        let env = api.settled(id).await;
        assert_eq!(env["status"], *status, "{script}: {env}");
        assert_eq!(outcomes(&env), *expected, "{script}: {env}");
        if let Some(ty) = error_type {
            let error = &env["attempts"][0]["error"];
            assert_eq!(error["type"], *ty, "{script}");
            let code = script["status"].as_u64().unwrap();
            let message = error["message"].as_str().unwrap();
            assert!(message.contains(&format!("answered {code}")), "{message}");
            assert!(message.contains(&receiver.url), "{message}");
            assert_eq!(error["detail"]["status"], code);
        }
    }
    // The body excerpt is recorded.
    let with_body = api.task(&ids[5]).await;
    assert!(
        with_body["attempts"][0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("internal oops")
    );
    assert_eq!(
        with_body["attempts"][0]["error"]["detail"]["body"],
        "internal oops"
    );
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_callback_carries_the_envelope_and_the_rdq_headers() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let receiver = Receiver::start().await;
    let api = Api::new(&server.base);
    callback_queue(
        &api,
        "hdr",
        json!({"url": receiver.url, "headers": {"Authorization": "Bearer receiver-secret"}}),
    )
    .await;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (status, body) = api
        .post(
            "/v1/tasks",
            json!({"queue": "hdr", "handler_ref": "h", "payload_json": {"status": 200}, "headers": {"traceparent": tp}}),
        )
        .await;
    assert_eq!(status, 201);
    let id = body["id"].as_str().unwrap().to_owned();
    api.settled(&id).await;
    let got = receiver.for_task(&id);
    assert_eq!(got.len(), 1);
    let h = &got[0].headers;
    assert_eq!(h["rdq-task-id"], id.as_str());
    assert_eq!(h["rdq-attempt"], "1");
    assert_eq!(h["traceparent"], tp);
    assert_eq!(h["authorization"], "Bearer receiver-secret");
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(got[0].body["id"], id.as_str());
    assert_eq!(got[0].body["status"], "IN_FLIGHT");
    assert_eq!(got[0].body["queue"], "hdr");
    // The receiver's secret never reaches the log.
    assert!(!server.log().contains("receiver-secret"));
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_and_a_refused_connection_are_retryable_failures() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let receiver = Receiver::start().await;
    let api = Api::new(&server.base);
    callback_queue(
        &api,
        "slow",
        json!({"url": receiver.url, "timeout_ms": 300}),
    )
    .await;
    let refused_url = format!("http://127.0.0.1:{}/hook", closed_port());
    callback_queue(&api, "down", json!({"url": refused_url})).await;

    let slow = api.submit("slow", json!({"delay_ms": 2000})).await;
    let down = api.submit("down", json!({})).await;

    let env = api.settled(&slow).await;
    assert_eq!(env["status"], "DEAD");
    assert_eq!(
        outcomes(&env),
        vec!["RETRYABLE_FAILURE", "RETRYABLE_FAILURE"]
    );
    let error = &env["attempts"][0]["error"];
    assert_eq!(error["type"], "http.Timeout");
    assert!(
        error["message"].as_str().unwrap().contains("300 ms"),
        "{error}"
    );

    let env = api.settled(&down).await;
    assert_eq!(env["status"], "DEAD");
    assert_eq!(
        outcomes(&env),
        vec!["RETRYABLE_FAILURE", "RETRYABLE_FAILURE"]
    );
    let error = &env["attempts"][0]["error"];
    assert_eq!(error["type"], "http.Connect");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("refused"),
        "{error}"
    );
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_with_status_failed_inside_is_a_permanent_failure_by_body_rule() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let receiver = Receiver::start().await;
    let api = Api::new(&server.base);
    callback_queue(
        &api,
        "billing",
        json!({"url": receiver.url, "body_rules": [
            {"pointer": "/status", "equals": "FAILED", "outcome": "PERMANENT_FAILURE", "error_type": "billing.Failed"},
            {"pointer": "/status", "equals": "THROTTLED", "outcome": "RETRYABLE_FAILURE"}
        ]}),
    )
    .await;
    let failed = api
        .submit(
            "billing",
            json!({"status": 200, "body": {"status": "FAILED", "reason": "card declined"}}),
        )
        .await;
    let throttled = api
        .submit("billing", json!({"status": 200, "body": {"status": "THROTTLED"}, "then": {"status": 200, "body": {"status": "OK"}}}))
        .await;
    let ok = api
        .submit("billing", json!({"status": 200, "body": {"status": "OK"}}))
        .await;

    let env = api.settled(&failed).await;
    assert_eq!(env["status"], "DEAD");
    assert_eq!(outcomes(&env), vec!["PERMANENT_FAILURE"]);
    let error = &env["attempts"][0]["error"];
    assert_eq!(error["type"], "billing.Failed");
    assert!(error["message"].as_str().unwrap().contains("card declined"));
    let env = api.settled(&throttled).await;
    assert_eq!(env["status"], "SUCCEEDED");
    assert_eq!(outcomes(&env), vec!["RETRYABLE_FAILURE", "SUCCESS"]);
    assert_eq!(env["attempts"][0]["error"]["type"], "http.ResponseBody");
    assert_eq!(api.settled(&ok).await["status"], "SUCCEEDED");
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_on_429_and_503_defers_the_task_by_that_long() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let receiver = Receiver::start().await;
    let api = Api::new(&server.base);
    callback_queue(&api, "limited", json!({"url": receiver.url})).await;
    let busy = api
        .submit(
            "limited",
            json!({"status": 429, "retry_after": "1", "then": {"status": 200}}),
        )
        .await;
    let unavailable = api
        .submit(
            "limited",
            json!({"status": 503, "retry_after": "1", "then": {"status": 200}}),
        )
        .await;
    for id in [&busy, &unavailable] {
        let env = api.settled(id).await;
        assert_eq!(env["status"], "SUCCEEDED", "{env}");
        // Deferred, not failed: no attempt spent on the answer that said "later".
        assert_eq!(env["deferral_count"], 1);
        assert_eq!(outcomes(&env), vec!["SUCCESS"]);
        let calls = receiver.for_task(id);
        assert_eq!(calls.len(), 2);
        let waited = calls[1].at.duration_since(calls[0].at);
        assert!(
            waited >= Duration::from_millis(900),
            "redelivered after {waited:?}"
        );
    }
    server.terminate();
}

/// Submits a scripted task under flow key `key`.
async fn submit_keyed(api: &Api, queue: &str, key: &str, script: Value) -> String {
    let (status, body) = api
        .post(
            "/v1/tasks",
            json!({"queue": queue, "handler_ref": "h", "payload_json": script, "flow_key": key}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_throttles_the_tasks_flow_key_and_other_keys_keep_flowing() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start_on(dir.path(), FAST_CONFIG, "memory:", &[]);
    let receiver = Receiver::start().await;
    let api = Api::new(&server.base);
    api.configure(
        "pushed",
        json!({"backoff": {"kind": "none"}, "callback": {"url": receiver.url},
               "flow": {"key_concurrency": 10}}),
    )
    .await;
    let busy = submit_keyed(
        &api,
        "pushed",
        "tenant-a",
        json!({"status": 429, "retry_after": "2", "then": {"status": 200}}),
    )
    .await;
    for _ in 0..400 {
        if !receiver.for_task(&busy).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pushed_back = receiver.for_task(&busy)[0].at;
    // The key is throttled for every node, visible in its flow status once
    // the answer is handled.
    let blocked = |flow: &Value| {
        flow["keys"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|k| k["key"] == "tenant-a" && k["blocked_until"].is_string())
    };
    let mut flow = Value::Null;
    for _ in 0..200 {
        let (status, body) = api.get("/v1/queues/pushed/flow").await;
        assert_eq!(status, 200, "{body}");
        flow = body;
        if blocked(&flow) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(blocked(&flow), "tenant-a is not throttled: {flow}");
    assert_eq!(flow["blocked_until"], Value::Null);

    // Another key keeps flowing; a second task of the throttled key waits.
    let waiting = submit_keyed(&api, "pushed", "tenant-a", json!({"status": 200})).await;
    let other = submit_keyed(&api, "pushed", "tenant-b", json!({"status": 200})).await;
    assert_eq!(api.settled(&other).await["status"], "SUCCEEDED");
    let other_at = receiver.for_task(&other)[0].at;
    assert!(
        other_at.duration_since(pushed_back) < Duration::from_millis(1500),
        "tenant-b waited {:?}",
        other_at.duration_since(pushed_back)
    );
    assert_eq!(api.settled(&waiting).await["status"], "SUCCEEDED");
    let waited = receiver.for_task(&waiting)[0]
        .at
        .duration_since(pushed_back);
    assert!(
        waited >= Duration::from_millis(1800),
        "tenant-a ran again after {waited:?}"
    );
    let env = api.settled(&busy).await;
    assert_eq!(env["status"], "SUCCEEDED", "{env}");
    assert_eq!(env["deferral_count"], 1);
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_map_overrides_the_default_mapping_per_queue() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let receiver = Receiver::start().await;
    let api = Api::new(&server.base);
    callback_queue(
        &api,
        "mapped",
        json!({"url": receiver.url, "status_map": {"409": "SUCCESS", "5xx": "PERMANENT_FAILURE"}}),
    )
    .await;
    let conflict = api.submit("mapped", json!({"status": 409})).await;
    let broken = api.submit("mapped", json!({"status": 500})).await;
    assert_eq!(api.settled(&conflict).await["status"], "SUCCEEDED");
    let env = api.settled(&broken).await;
    assert_eq!(outcomes(&env), vec!["PERMANENT_FAILURE"]);
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_callback_in_flight_then_exits() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let receiver = Receiver::start().await;
    let api = Api::new(&server.base);
    callback_queue(&api, "graceful", json!({"url": receiver.url})).await;
    let id = api
        .submit("graceful", json!({"status": 200, "delay_ms": 1000}))
        .await;
    // Wait until the callback is in flight, then ask the server to stop.
    for _ in 0..200 {
        if !receiver.for_task(&id).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(receiver.for_task(&id).len(), 1);
    assert!(server.terminate(), "rdq serve exits 0 after SIGTERM");
    // Restart on the same data: the in-flight callback's answer was recorded.
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let api = Api::new(&server.base);
    let env = api.task(&id).await;
    assert_eq!(env["status"], "SUCCEEDED", "{env}");
    assert!(server.log().contains("listening on"));
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_aborts_the_callback_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let receiver = Receiver::start().await;
    let api = Api::new(&server.base);
    api.configure(
        "long",
        json!({"max_attempts": 2, "backoff": {"kind": "none"}, "lease_ms": 30000,
               "callback": {"url": receiver.url, "timeout_ms": 20000}}),
    )
    .await;
    let id = api.submit("long", json!({"delay_ms": 15000})).await;
    for _ in 0..500 {
        if !receiver.for_task(&id).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(receiver.for_task(&id).len(), 1, "the callback is in flight");
    let started = std::time::Instant::now();
    let (status, body) = api
        .post(
            "/v1/queues/long/cancel",
            json!({"ids": [id], "message": "stop it"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["running"], json!([id]));
    let env = api.settled(&id).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the call was cut short, not waited out"
    );
    assert_eq!(env["status"], "DEAD");
    assert_eq!(env["dead_reason"]["code"], "CANCELLED");
    assert_eq!(env["attempt_count"], 1, "not retried");
    assert_eq!(env["attempts"][0]["error"]["type"], "rdq.Cancelled");
    server.terminate();
}
