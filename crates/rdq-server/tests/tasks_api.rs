//! `POST /v1/tasks`, `GET /v1/tasks/{id}`, `DELETE /v1/tasks/{id}` over real
//! HTTP, and the bad-input rules: every bad input is refused with a stable code and
//! leaves the store unchanged.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use base64::Engine as _;
use common::TestServer;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

#[tokio::test]
async fn submit_returns_201_with_the_full_envelope_and_get_returns_it_again() {
    let server = TestServer::start().await;
    let r = server
        .post(
            "/v1/tasks",
            json!({
                "queue": "emails",
                "handler_ref": "send-email",
                "handler_version": "v3",
                "payload_json": {"to": "a@b.c"},
                "headers": {"tenant": "acme"},
                "priority": 5,
                "delay_ms": 60000
            }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(r.content_type, "application/json");
    let env = &r.body;
    assert_eq!(env["envelope_version"], 1);
    assert_eq!(env["queue"], "emails");
    assert_eq!(env["handler_ref"], "send-email");
    assert_eq!(env["handler_version"], "v3");
    assert_eq!(env["status"], "PENDING");
    assert_eq!(env["priority"], 5);
    assert_eq!(env["attempt_count"], 0);
    assert_eq!(env["headers"]["tenant"], "acme");
    assert_eq!(env["payload_content_type"], "application/json");
    let payload = base64::engine::general_purpose::STANDARD
        .decode(env["payload"].as_str().unwrap())
        .unwrap();
    assert_eq!(payload, br#"{"to":"a@b.c"}"#);
    assert!(env["next_attempt_at"].as_str().unwrap() > env["created_at"].as_str().unwrap());
    // An open server records no submitter.
    assert!(env["headers"].get("rdq.submitted_by").is_none());

    let id = env["id"].as_str().unwrap();
    let again = server.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(again.status, StatusCode::OK);
    // The same canonical bytes both times.
    assert_eq!(again.text, r.text);
    server.stop().await;
}

#[tokio::test]
async fn a_base64_payload_is_stored_as_opaque_bytes() {
    let server = TestServer::start().await;
    let r = server
        .post(
            "/v1/tasks",
            json!({"queue": "q", "handler_ref": "h", "payload": "AAEC/w==", "payload_content_type": "application/x-thing"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.body["payload"], "AAEC/w==");
    assert_eq!(r.body["payload_content_type"], "application/x-thing");
    server.stop().await;
}

#[tokio::test]
async fn a_repeated_idempotency_key_returns_200_with_the_original() {
    let server = TestServer::start().await;
    let body =
        json!({"queue": "q", "handler_ref": "h", "payload_json": 1, "idempotency_key": "order-42"});
    let first = server.post("/v1/tasks", body.clone()).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let mut changed = body.clone();
    changed["payload_json"] = json!(2);
    let second = server.post("/v1/tasks", changed).await;
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(second.text, first.text);
    // The header form works the same way.
    let by_header = server
        .client
        .post(format!("{}/v1/tasks", server.base))
        .header("Idempotency-Key", "order-42")
        .json(&json!({"queue": "q", "handler_ref": "h"}))
        .send()
        .await
        .unwrap();
    assert_eq!(by_header.status(), StatusCode::OK);
    assert_eq!(server.snapshot().await.len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn a_traceparent_request_header_rides_in_the_envelope() {
    let server = TestServer::start().await;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let r = server
        .client
        .post(format!("{}/v1/tasks", server.base))
        .header("traceparent", tp)
        .json(&json!({"queue": "q", "handler_ref": "h"}))
        .send()
        .await
        .unwrap();
    let env: Value = r.json().await.unwrap();
    assert_eq!(env["headers"]["traceparent"], tp);
    server.stop().await;
}

#[tokio::test]
async fn every_bad_submit_is_refused_with_its_code_and_stores_nothing() {
    let server = TestServer::start().await;
    server.submit("q", json!("keep me")).await;
    let before = server.snapshot().await;
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{not json".to_vec(), 400, "MALFORMED_REQUEST"),
        (b"[1,2]".to_vec(), 400, "MALFORMED_REQUEST"),
        (
            br#"{"queue": 5, "handler_ref": "h"}"#.to_vec(),
            400,
            "MALFORMED_REQUEST",
        ),
        (
            br#"{"handler_ref": "h"}"#.to_vec(),
            400,
            "MALFORMED_REQUEST",
        ),
        (
            br#"{"queue": "q", "handler_ref": "h", "delay": 5}"#.to_vec(),
            400,
            "MALFORMED_REQUEST",
        ),
        (
            br#"{"queue": "q", "handler_ref": "h", "priority": -1}"#.to_vec(),
            400,
            "MALFORMED_REQUEST",
        ),
        (
            br#"{"queue": "q", "queue": "r", "handler_ref": "h"}"#.to_vec(),
            400,
            "MALFORMED_REQUEST",
        ),
        (
            br#"{"queue": "Bad Queue", "handler_ref": "h"}"#.to_vec(),
            400,
            "INVALID_QUEUE_NAME",
        ),
        (
            br#"{"queue": "", "handler_ref": "h"}"#.to_vec(),
            400,
            "INVALID_QUEUE_NAME",
        ),
        (
            br#"{"queue": "q", "handler_ref": "my::Handler"}"#.to_vec(),
            400,
            "INVALID_HANDLER_REF",
        ),
        (
            br#"{"queue": "q", "handler_ref": "h", "headers": {"rdq.submitted_by": "mallory"}}"#
                .to_vec(),
            400,
            "RESERVED_HEADER",
        ),
        (
            br#"{"queue": "q", "handler_ref": "h", "payload": "not base64!"}"#.to_vec(),
            400,
            "INVALID_FIELD",
        ),
        (
            br#"{"queue": "q", "handler_ref": "h", "payload": "aGk=", "payload_json": {}}"#
                .to_vec(),
            400,
            "INVALID_FIELD",
        ),
        (
            format!(
                r#"{{"queue": "q", "handler_ref": "h", "payload": "{}"}}"#,
                base64::engine::general_purpose::STANDARD.encode(vec![b'x'; 1024 * 1024 + 1])
            )
            .into_bytes(),
            413,
            "PAYLOAD_TOO_LARGE",
        ),
    ];
    for (body, status, code) in cases {
        let r = server.raw(Method::POST, "/v1/tasks", body.clone()).await;
        r.assert_problem(status, code);
        assert_eq!(
            server.snapshot().await,
            before,
            "{} changed the store",
            String::from_utf8_lossy(&body[..body.len().min(80)])
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn a_body_over_the_request_limit_is_refused_with_413() {
    let mut config = common::test_config();
    config.max_request_bytes = 4096;
    let server = TestServer::with(
        config,
        std::sync::Arc::new(rdq_store_memory::MemoryStore::new()),
    )
    .await;
    let big = json!({"queue": "q", "handler_ref": "h", "payload": "A".repeat(8192)});
    server
        .raw(Method::POST, "/v1/tasks", big.to_string().into_bytes())
        .await
        .assert_problem(413, "PAYLOAD_TOO_LARGE");
    assert!(server.snapshot().await.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_queue_policy_size_limit_applies_to_submits() {
    let server = TestServer::start().await;
    let r = server
        .put(
            "/v1/queues/small/config",
            json!({"max_envelope_bytes": 512}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    server
        .post(
            "/v1/tasks",
            json!({"queue": "small", "handler_ref": "h", "payload_json": "x".repeat(600)}),
        )
        .await
        .assert_problem(413, "PAYLOAD_TOO_LARGE");
    server.stop().await;
}

#[tokio::test]
async fn unknown_and_malformed_task_ids_are_refused() {
    let server = TestServer::start().await;
    server
        .get("/v1/tasks/01J2ZK7Q8XW5H3N9G4T6B8RDQ0")
        .await
        .assert_problem(404, "TASK_NOT_FOUND");
    server
        .get("/v1/tasks/not-an-id")
        .await
        .assert_problem(400, "INVALID_ARGUMENT");
    server
        .delete("/v1/tasks/01J2ZK7Q8XW5H3N9G4T6B8RDQ0")
        .await
        .assert_problem(404, "TASK_NOT_FOUND");
    server.stop().await;
}

#[tokio::test]
async fn delete_removes_a_task() {
    let server = TestServer::start().await;
    let env = server.submit("q", json!(1)).await;
    let path = format!("/v1/tasks/{}", env["id"].as_str().unwrap());
    assert_eq!(server.delete(&path).await.status, StatusCode::NO_CONTENT);
    server
        .get(&path)
        .await
        .assert_problem(404, "TASK_NOT_FOUND");
    server.stop().await;
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_with_problems() {
    let server = TestServer::start().await;
    server
        .get("/v1/nothing")
        .await
        .assert_problem(404, "ROUTE_NOT_FOUND");
    server
        .call(Method::PATCH, "/v1/tasks", None)
        .await
        .assert_problem(405, "METHOD_NOT_ALLOWED");
    server.stop().await;
}

#[tokio::test]
async fn health_and_readiness_answer() {
    let server = TestServer::start().await;
    assert_eq!(server.get("/healthz").await.status, StatusCode::OK);
    let ready = server.get("/readyz").await;
    assert_eq!(ready.status, StatusCode::OK);
    assert_eq!(ready.body["status"], "ready");
    server.stop().await;
}

#[tokio::test]
async fn a_path_segment_that_is_not_utf8_gets_a_problem_document() {
    let server = common::TestServer::start().await;
    for path in [
        "/v1/tasks/%FF%FE",
        "/v1/queues/%C3%28/config",
        "/v1/queues/q/dead/%80",
    ] {
        let r = server.get(path).await;
        r.assert_problem(400, "INVALID_ARGUMENT");
    }
    server.stop().await;
}
