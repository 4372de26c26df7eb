//! Flow control over HTTP: `GET /v1/queues/{queue}/flow`, `POST
//! /v1/queues/{queue}/throttle`, submits with a `flow_key`, a deferral
//! that throttles its key, and the `rdq_flow_*` metrics.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::TestServer;
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn submit_keyed(server: &TestServer, queue: &str, key: &str) -> Value {
    let r = server
        .post(
            "/v1/tasks",
            json!({"queue": queue, "handler_ref": "h", "payload_json": {}, "flow_key": key}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    r.body
}

#[tokio::test]
async fn flow_shows_the_limits_tokens_and_busiest_keys() {
    let server = TestServer::start().await;
    let put = server
        .put(
            "/v1/queues/q/config",
            json!({"flow": {"rate": {"per_second": 10, "burst": 5}, "key_concurrency": 2}}),
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.text);
    assert_eq!(put.body["flow"]["key_concurrency"], 2);
    for key in ["tenant-a", "tenant-a", "tenant-b"] {
        submit_keyed(&server, "q", key).await;
    }
    let claimed = server.post("/v1/queues/q/claim", json!({"max": 10})).await;
    assert_eq!(claimed.body["tasks"].as_array().unwrap().len(), 3);

    let r = server.get("/v1/queues/q/flow").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["queue"], "q");
    assert_eq!(
        r.body["limits"],
        json!({"rate": {"per_second": 10.0, "burst": 5}, "key_concurrency": 2})
    );
    let tokens = r.body["tokens"].as_f64().unwrap();
    assert!((1.9..=2.5).contains(&tokens), "{tokens}");
    assert_eq!(r.body["in_flight"], 3);
    assert_eq!(r.body["blocked_until"], Value::Null);
    assert_eq!(r.body["keys"][0]["key"], "tenant-a");
    assert_eq!(r.body["keys"][0]["in_flight"], 2);
    assert_eq!(r.body["keys"][1]["key"], "tenant-b");
    assert_eq!(r.body["throttled_claims"], 0);

    server
        .get("/v1/queues/nope/flow")
        .await
        .assert_problem(404, "QUEUE_NOT_FOUND");
    server
        .post("/v1/queues/nope/throttle", json!({"for_ms": 1000}))
        .await
        .assert_problem(404, "QUEUE_NOT_FOUND");
    assert!(!server.get("/v1/queues").await.text.contains("nope"));
    server.stop().await;
}

#[tokio::test]
async fn a_throttle_blocks_its_key_until_then_and_other_keys_keep_flowing() {
    let server = TestServer::start().await;
    server
        .put(
            "/v1/queues/q/config",
            json!({"flow": {"key_concurrency": 10}}),
        )
        .await;
    let r = server
        .post(
            "/v1/queues/q/throttle",
            json!({"flow_key": "tenant-a", "for_ms": 60_000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let until = r.body["keys"][0]["blocked_until"].as_str().unwrap();
    assert_eq!(r.body["keys"][0]["key"], "tenant-a");
    assert!(until.ends_with('Z') && until.len() == 24, "{until}");

    submit_keyed(&server, "q", "tenant-a").await;
    let b = submit_keyed(&server, "q", "tenant-b").await;
    let claimed = server.post("/v1/queues/q/claim", json!({"max": 10})).await;
    let tasks = claimed.body["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{}", claimed.text);
    assert_eq!(tasks[0]["id"], b["id"]);
    let flow = server.get("/v1/queues/q/flow").await;
    assert!(flow.body["throttled_claims"].as_u64().unwrap() >= 1);

    // The whole queue, until an RFC 3339 time with an offset.
    let r = server
        .post(
            "/v1/queues/q/throttle",
            json!({"until": "9999-01-01T00:00:00+00:00"}),
        )
        .await;
    r.assert_problem(400, "INVALID_FIELD");
    assert_eq!(r.body["field"], "until");
    server.stop().await;
}

#[tokio::test]
async fn bad_throttles_are_refused_by_field_and_change_nothing() {
    let server = TestServer::start().await;
    server
        .put("/v1/queues/q/config", json!({"flow": {"concurrency": 3}}))
        .await;
    let before = server.get("/v1/queues/q/flow").await.body;
    for (body, code, field) in [
        (json!({"for_ms": -5}), "INVALID_FIELD", "for_ms"),
        (json!({"for_ms": 1.5}), "INVALID_FIELD", "for_ms"),
        (json!({"for_ms": "10"}), "INVALID_FIELD", "for_ms"),
        (json!({"for_ms": 0}), "INVALID_FIELD", "for_ms"),
        (
            json!({"for_ms": 604_800_001_u64}),
            "INVALID_FIELD",
            "for_ms",
        ),
        (json!({}), "INVALID_FIELD", "for_ms"),
        (
            json!({"for_ms": 10, "until": "2030-01-01T00:00:00Z"}),
            "INVALID_FIELD",
            "until",
        ),
        (json!({"until": "tomorrow"}), "INVALID_FIELD", "until"),
        (
            json!({"until": "2000-01-01T00:00:00Z"}),
            "INVALID_FIELD",
            "until",
        ),
        (
            json!({"flow_key": "has space", "for_ms": 10}),
            "INVALID_FIELD",
            "flow_key",
        ),
        (
            json!({"flow_key": "", "for_ms": 10}),
            "INVALID_FIELD",
            "flow_key",
        ),
    ] {
        let r = server.post("/v1/queues/q/throttle", body.clone()).await;
        r.assert_problem(400, code);
        assert_eq!(r.body["field"], field, "{body}: {}", r.text);
    }
    server
        .post("/v1/queues/q/throttle", json!({"for_ms": 10, "extra": 1}))
        .await
        .assert_problem(400, "MALFORMED_REQUEST");
    let after = server.get("/v1/queues/q/flow").await.body;
    assert_eq!(before, after);
    server.stop().await;
}

#[tokio::test]
async fn throttling_needs_admin_and_reading_any_scope() {
    let mut config = common::test_config();
    config.tokens = vec![
        rdq_app::auth::TokenConfig {
            name: "producer".into(),
            token: rdq_app::auth::Secret::new("producer-secret-0001"),
            scopes: vec![rdq_app::Scope::Submit],
            queues: Vec::new(),
        },
        rdq_app::auth::TokenConfig {
            name: "ops".into(),
            token: rdq_app::auth::Secret::new("ops-secret-0000000001"),
            scopes: vec![rdq_app::Scope::Admin],
            queues: Vec::new(),
        },
    ];
    let server = TestServer::with(
        config,
        std::sync::Arc::new(rdq_store_memory::MemoryStore::new()),
    )
    .await;
    let put = server
        .call_as(
            Some("ops-secret-0000000001"),
            reqwest::Method::PUT,
            "/v1/queues/q/config",
            Some(json!({"flow": {"concurrency": 1}})),
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.text);
    let read = server
        .call_as(
            Some("producer-secret-0001"),
            reqwest::Method::GET,
            "/v1/queues/q/flow",
            None,
        )
        .await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.text);
    server
        .call_as(
            Some("producer-secret-0001"),
            reqwest::Method::POST,
            "/v1/queues/q/throttle",
            Some(json!({"for_ms": 1000})),
        )
        .await
        .assert_problem(403, "FORBIDDEN");
    server.stop().await;
}

#[tokio::test]
async fn a_submitted_flow_key_is_stored_as_its_header_and_a_bad_one_is_refused() {
    let server = TestServer::start().await;
    let env = submit_keyed(&server, "q", "tenant-42").await;
    assert_eq!(env["headers"]["rdq.flow_key"], "tenant-42");
    let stored = server
        .get(&format!("/v1/tasks/{}", env["id"].as_str().unwrap()))
        .await;
    assert_eq!(stored.body["headers"]["rdq.flow_key"], "tenant-42");

    let before = server.snapshot().await;
    for bad in ["", "white space", &"k".repeat(129)] {
        let r = server
            .post(
                "/v1/tasks",
                json!({"queue": "q", "handler_ref": "h", "payload_json": {}, "flow_key": bad}),
            )
            .await;
        r.assert_problem(400, "INVALID_FIELD");
        assert_eq!(r.body["field"], "flow_key", "{}", r.text);
        assert!(r.body["detail"].as_str().unwrap().starts_with("flow_key"));
    }
    assert_eq!(server.snapshot().await, before);
    server.stop().await;
}

#[tokio::test]
async fn a_deferral_with_throttle_key_blocks_that_key_until_it_is_due() {
    let server = TestServer::start().await;
    server
        .put(
            "/v1/queues/q/config",
            json!({"flow": {"key_concurrency": 10}}),
        )
        .await;
    submit_keyed(&server, "q", "tenant-a").await;
    submit_keyed(&server, "q", "tenant-b").await;
    let claimed = server.post("/v1/queues/q/claim", json!({"max": 10})).await;
    let tasks = claimed.body["tasks"].as_array().unwrap().clone();
    let a = tasks
        .iter()
        .find(|t| t["envelope"]["headers"]["rdq.flow_key"] == "tenant-a")
        .unwrap();
    let b = tasks
        .iter()
        .find(|t| t["envelope"]["headers"]["rdq.flow_key"] == "tenant-b")
        .unwrap();
    // Not with another outcome.
    server
        .post(
            &format!("/v1/tasks/{}/settle", b["id"].as_str().unwrap()),
            json!({"lease_token": b["lease_token"], "outcome": "SUCCESS", "throttle": "key"}),
        )
        .await
        .assert_problem(400, "INVALID_FIELD");
    let settled = server
        .post(
            &format!("/v1/tasks/{}/settle", a["id"].as_str().unwrap()),
            json!({"lease_token": a["lease_token"], "outcome": "DEFER", "defer_ms": 60_000, "throttle": "key"}),
        )
        .await;
    assert_eq!(settled.status, StatusCode::OK, "{}", settled.text);
    let flow = server.get("/v1/queues/q/flow").await.body;
    assert_eq!(flow["blocked_until"], Value::Null);
    let key = flow["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == "tenant-a")
        .unwrap();
    assert_eq!(key["blocked_until"], settled.body["next_attempt_at"]);

    // `queue` throttles the whole queue, through a batch settle too.
    let r = server
        .post(
            "/v1/settle",
            json!({"settles": [{"id": b["id"], "lease_token": b["lease_token"], "outcome": "DEFER", "defer_ms": 30_000, "throttle": "queue"}]}),
        )
        .await;
    assert_eq!(r.body["results"][0]["status"], 200, "{}", r.text);
    let flow = server.get("/v1/queues/q/flow").await.body;
    assert!(flow["blocked_until"].is_string(), "{flow}");
    server.stop().await;
}

#[tokio::test]
async fn metrics_show_each_flow_controlled_queue_at_scrape_time() {
    let server = TestServer::start().await;
    server
        .put(
            "/v1/queues/q/config",
            json!({"flow": {"rate": {"per_second": 1, "burst": 2}, "key_concurrency": 5}}),
        )
        .await;
    server.submit("plain", json!(1)).await;
    for key in ["tenant-a", "tenant-a", "tenant-b"] {
        submit_keyed(&server, "q", key).await;
    }
    // The bucket holds 2: two start, the third is cut short.
    let claimed = server.post("/v1/queues/q/claim", json!({"max": 10})).await;
    assert_eq!(claimed.body["tasks"].as_array().unwrap().len(), 2);
    let throttled = server
        .post(
            "/v1/queues/q/throttle",
            json!({"flow_key": "tenant-c", "for_ms": 60_000}),
        )
        .await;
    let key_until = throttled.body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == "tenant-c")
        .unwrap()["blocked_until"]
        .as_str()
        .unwrap()
        .to_owned();
    server
        .post("/v1/queues/q/throttle", json!({"for_ms": 30_000}))
        .await;

    let text = server.get("/metrics").await.text;
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    assert!(text.contains("# TYPE rdq_flow_throttled_claims_total counter"));
    assert!(line("rdq_flow_throttled_claims_total{queue=\"q\"}") >= 1.0);
    assert!(line("rdq_flow_tokens{queue=\"q\"}") < 1.0);
    // FIFO claim order: both starts were tenant-a's.
    assert_eq!(
        line("rdq_flow_in_flight{queue=\"q\",key=\"tenant-a\"}"),
        2.0
    );
    assert!(!text.contains("rdq_flow_in_flight{queue=\"q\",key=\"tenant-b\"}"));
    let key_ms = rdq_envelope::Timestamp::parse(&key_until)
        .unwrap()
        .unix_ms();
    assert_eq!(
        line("rdq_flow_blocked_until_seconds{queue=\"q\",key=\"tenant-c\"}"),
        key_ms as f64 / 1000.0
    );
    let now = rdq_envelope::Timestamp::now().unix_ms() as f64 / 1000.0;
    let queue_wide = line("rdq_flow_blocked_until_seconds{queue=\"q\",key=\"\"}");
    assert!(
        (now + 25.0..now + 31.0).contains(&queue_wide),
        "{queue_wide}"
    );
    // A queue without a flow section has no flow series.
    assert!(!text.contains("rdq_flow_throttled_claims_total{queue=\"plain\"}"));
    server.stop().await;
}

#[tokio::test]
async fn a_bad_flow_policy_is_refused_naming_its_field_and_changes_nothing() {
    let server = TestServer::start().await;
    let good = json!({"flow": {"rate": {"per_second": 10}}});
    assert_eq!(
        server.put("/v1/queues/q/config", good).await.status,
        StatusCode::OK
    );
    for (flow, field) in [
        (json!({"rate": {"per_second": -1}}), "flow.rate.per_second"),
        (json!({"rate": {"per_second": 0}}), "flow.rate.per_second"),
        (
            json!({"rate": {"per_second": 5, "burst": 0}}),
            "flow.rate.burst",
        ),
        (json!({"concurrency": 2_000_000}), "flow.concurrency"),
        (json!({"key_concurrency": 0}), "flow.key_concurrency"),
        (
            json!({"fairness": "weighted", "weights": {"ok": 0}}),
            "flow.weights.ok",
        ),
    ] {
        let r = server
            .put("/v1/queues/q/config", json!({ "flow": flow }))
            .await;
        r.assert_problem(400, "INVALID_POLICY");
        assert_eq!(r.body["field"], field, "{}", r.text);
    }
    for flow in [
        json!({"bogus": 1}),
        json!({"fairness": "weighted", "weights": {"bad key": 2}}),
    ] {
        let r = server
            .put("/v1/queues/q/config", json!({ "flow": flow }))
            .await;
        r.assert_problem(400, "INVALID_POLICY");
        assert!(
            r.body["detail"].as_str().unwrap().starts_with("flow."),
            "{}",
            r.text
        );
    }
    let flow = server.get("/v1/queues/q/flow").await.body;
    assert_eq!(flow["limits"], json!({"rate": {"per_second": 10.0}}));
}
