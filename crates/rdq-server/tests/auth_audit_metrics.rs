//! Bearer tokens with scopes and queue globs, the audit log, and `/metrics`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;

use common::{TestServer, test_config};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const SUBMITTER: &str = "checkout-token-000001";
const WORKER: &str = "worker-token-00000001";
const OPS: &str = "ops-token-00000000001";

fn secured_config(audit: Option<std::path::PathBuf>) -> rdq_server::ServerConfig {
    let mut config = rdq_server::ServerConfig::from_toml(&format!(
        r#"
        public_metrics = false
        [[tokens]]
        name = "checkout-service"
        token = "{SUBMITTER}"
        scopes = ["submit"]
        queues = ["payments.*"]
        [[tokens]]
        name = "payments-worker"
        token = "{WORKER}"
        scopes = ["work"]
        queues = ["payments.*"]
        [[tokens]]
        name = "ops"
        token = "{OPS}"
        scopes = ["admin"]
        "#
    ))
    .unwrap();
    let base = test_config();
    config.listen = base.listen;
    config.maintenance = base.maintenance;
    config.callbacks = base.callbacks;
    config.shutdown_grace_ms = base.shutdown_grace_ms;
    config.audit_log = audit;
    config
}

async fn secured(audit: Option<std::path::PathBuf>) -> TestServer {
    TestServer::with(
        secured_config(audit),
        Arc::new(rdq_store_memory::MemoryStore::new()),
    )
    .await
}

#[tokio::test]
async fn calls_without_a_known_token_are_401_and_change_nothing() {
    let server = secured(None).await;
    let submit = json!({"queue": "payments.charge", "handler_ref": "h"});
    for token in [None, Some("wrong-token-0000000000"), Some("")] {
        let r = server
            .call_as(token, Method::POST, "/v1/tasks", Some(submit.clone()))
            .await;
        r.assert_problem(401, "UNAUTHENTICATED");
    }
    let raw = server
        .client
        .get(format!("{}/v1/queues", server.base))
        .header("authorization", format!("Basic {OPS}"))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(raw.headers()["www-authenticate"], "Bearer realm=\"rdq\"");
    assert!(server.snapshot().await.is_empty());
    // Health and the API document need no token.
    for path in ["/healthz", "/readyz", "/openapi.json"] {
        assert_eq!(
            server.call_as(None, Method::GET, path, None).await.status,
            StatusCode::OK,
            "{path}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn scopes_and_queue_globs_decide_what_a_token_may_do() {
    let server = secured(None).await;
    let submit = |queue: &str| json!({"queue": queue, "handler_ref": "h"});
    // The submitter: its queues only, and submit only.
    let created = server
        .call_as(
            Some(SUBMITTER),
            Method::POST,
            "/v1/tasks",
            Some(submit("payments.charge")),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(
        created.body["headers"]["rdq.submitted_by"],
        "checkout-service"
    );
    let id = created.body["id"].as_str().unwrap().to_owned();
    server
        .call_as(
            Some(SUBMITTER),
            Method::POST,
            "/v1/tasks",
            Some(submit("emails")),
        )
        .await
        .assert_problem(403, "FORBIDDEN");
    server
        .call_as(
            Some(SUBMITTER),
            Method::POST,
            "/v1/queues/payments.charge/claim",
            Some(json!({"max": 1})),
        )
        .await
        .assert_problem(403, "FORBIDDEN");
    // Any scope on a queue reads its DLQ; changing it needs admin.
    assert_eq!(
        server
            .call_as(
                Some(SUBMITTER),
                Method::GET,
                "/v1/queues/payments.charge/dead",
                None,
            )
            .await
            .status,
        StatusCode::OK
    );
    server
        .call_as(
            Some(SUBMITTER),
            Method::DELETE,
            "/v1/queues/payments.charge/dead?dry_run=true",
            None,
        )
        .await
        .assert_problem(403, "FORBIDDEN");
    server
        .call_as(Some(SUBMITTER), Method::GET, "/v1/queues/emails/dead", None)
        .await
        .assert_problem(403, "FORBIDDEN");
    assert_eq!(
        server
            .call_as(
                Some(SUBMITTER),
                Method::GET,
                &format!("/v1/tasks/{id}"),
                None
            )
            .await
            .status,
        StatusCode::OK
    );
    // The worker: claims and settles on its queues, cannot submit or configure.
    server
        .call_as(
            Some(WORKER),
            Method::POST,
            "/v1/tasks",
            Some(submit("payments.charge")),
        )
        .await
        .assert_problem(403, "FORBIDDEN");
    server
        .call_as(
            Some(WORKER),
            Method::PUT,
            "/v1/queues/payments.charge/config",
            Some(json!({"paused": true})),
        )
        .await
        .assert_problem(403, "FORBIDDEN");
    let claimed = server
        .call_as(
            Some(WORKER),
            Method::POST,
            "/v1/queues/payments.charge/claim",
            Some(json!({"max": 1})),
        )
        .await;
    assert_eq!(claimed.status, StatusCode::OK);
    let task = &claimed.body["tasks"][0];
    let settled = server
        .call_as(
            Some(WORKER),
            Method::POST,
            &format!("/v1/tasks/{id}/settle"),
            Some(json!({"lease_token": task["lease_token"], "outcome": "SUCCESS"})),
        )
        .await;
    assert_eq!(settled.status, StatusCode::OK, "{}", settled.text);
    // Admin: everything; the queue list shows only what a token may see.
    let other = server
        .call_as(Some(OPS), Method::POST, "/v1/tasks", Some(submit("emails")))
        .await;
    assert_eq!(other.status, StatusCode::CREATED);
    let seen = |token| {
        let server = &server;
        async move {
            let r = server
                .call_as(Some(token), Method::GET, "/v1/queues", None)
                .await;
            r.body["queues"]
                .as_array()
                .unwrap()
                .iter()
                .map(|q| q["queue"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(seen(OPS).await, vec!["emails", "payments.charge"]);
    assert_eq!(seen(WORKER).await, vec!["payments.charge"]);
    // The worker's token cannot read a task of a queue outside its globs,
    // nor tell it from one that does not exist: both are 404.
    let emails_id = other.body["id"].as_str().unwrap();
    let elsewhere = server
        .call_as(
            Some(WORKER),
            Method::GET,
            &format!("/v1/tasks/{emails_id}"),
            None,
        )
        .await;
    elsewhere.assert_problem(404, "TASK_NOT_FOUND");
    let missing = server
        .call_as(
            Some(WORKER),
            Method::GET,
            "/v1/tasks/01J2ZK7Q8XW5H3N9G4T6B8RDQ0",
            None,
        )
        .await;
    missing.assert_problem(404, "TASK_NOT_FOUND");
    assert_eq!(
        elsewhere.body["detail"]
            .as_str()
            .map(|d| d.replace(emails_id, "ID")),
        missing.body["detail"]
            .as_str()
            .map(|d| d.replace("01J2ZK7Q8XW5H3N9G4T6B8RDQ0", "ID"))
    );
    server
        .call_as(
            Some(WORKER),
            Method::DELETE,
            &format!("/v1/tasks/{emails_id}"),
            None,
        )
        .await
        .assert_problem(404, "TASK_NOT_FOUND");
    // Metrics are admin-only here.
    server
        .call_as(Some(WORKER), Method::GET, "/metrics", None)
        .await
        .assert_problem(403, "FORBIDDEN");
    server
        .call_as(None, Method::GET, "/metrics", None)
        .await
        .assert_problem(401, "UNAUTHENTICATED");
    assert_eq!(
        server
            .call_as(Some(OPS), Method::GET, "/metrics", None)
            .await
            .status,
        StatusCode::OK
    );
    server.stop().await;
}

#[tokio::test]
async fn redrive_import_purge_delete_and_config_changes_are_audited_without_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let server = secured(Some(audit.clone())).await.with_token(OPS);
    server
        .put(
            "/v1/queues/payments.charge/config",
            json!({"max_attempts": 1, "callback": {"url": "http://127.0.0.1:9/x", "headers": {"authorization": "Bearer callback-secret"}}}),
        )
        .await;
    server
        .put(
            "/v1/queues/payments.charge/config",
            json!({"callback": null}),
        )
        .await;
    let a = server.submit("payments.charge", json!(1)).await;
    let b = server.submit("payments.charge", json!(2)).await;
    let claimed = server
        .post("/v1/queues/payments.charge/claim", json!({"max": 2}))
        .await;
    for t in claimed.body["tasks"].as_array().unwrap() {
        server
            .post(
                &format!("/v1/tasks/{}/settle", t["id"].as_str().unwrap()),
                json!({"lease_token": t["lease_token"], "outcome": "PERMANENT_FAILURE", "error": {"type": "x"}}),
            )
            .await;
    }
    let exported = server
        .client
        .get(format!(
            "{}/v1/queues/payments.charge/dead/export",
            server.base
        ))
        .bearer_auth(OPS)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    server
        .post(
            "/v1/queues/payments.charge/dead/redrive",
            json!({"dry_run": true}),
        )
        .await;
    server.delete("/v1/queues/payments.charge/dead").await;
    server
        .raw(
            Method::POST,
            "/v1/queues/payments.charge/dead/import",
            exported.to_vec(),
        )
        .await;
    server
        .post(
            "/v1/queues/payments.charge/dead/redrive",
            json!({"ids": [a["id"]]}),
        )
        .await;
    server
        .delete(&format!("/v1/tasks/{}", b["id"].as_str().unwrap()))
        .await;
    server.stop().await;

    let text = std::fs::read_to_string(&audit).unwrap();
    assert!(!text.contains("callback-secret"), "{text}");
    assert!(!text.contains(OPS));
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary: Vec<(String, Option<u64>, bool)> = records
        .iter()
        .map(|r| {
            assert_eq!(r["who"], "ops");
            assert!(r["at"].as_str().unwrap().ends_with('Z'));
            (
                r["action"].as_str().unwrap().to_owned(),
                r["count"].as_u64(),
                r["dry_run"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("queue.config".into(), None, false),
            ("queue.config".into(), None, false),
            ("dlq.redrive".into(), Some(2), true),
            ("dlq.purge".into(), Some(2), false),
            ("dlq.import".into(), Some(2), false),
            ("dlq.redrive".into(), Some(1), false),
            ("task.delete".into(), Some(1), false),
        ]
    );
    assert_eq!(records[0]["queue"], "payments.charge");
    assert_eq!(records[0]["detail"]["patch"]["max_attempts"], 1);
}

#[tokio::test]
async fn metrics_count_submits_claims_outcomes_and_the_dlq() {
    let server = TestServer::start().await;
    for i in 0..3 {
        server.submit("m", json!(i)).await;
    }
    let claimed = server.post("/v1/queues/m/claim", json!({"max": 2})).await;
    let tasks = claimed.body["tasks"].as_array().unwrap().clone();
    server
        .post(
            &format!("/v1/tasks/{}/settle", tasks[0]["id"].as_str().unwrap()),
            json!({"lease_token": tasks[0]["lease_token"], "outcome": "SUCCESS"}),
        )
        .await;
    server
        .post(
            &format!("/v1/tasks/{}/settle", tasks[1]["id"].as_str().unwrap()),
            json!({"lease_token": tasks[1]["lease_token"], "outcome": "PERMANENT_FAILURE", "error": {"type": "t"}}),
        )
        .await;
    let r = server.get("/metrics").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.content_type.starts_with("text/plain; version=0.0.4"));
    for line in [
        "rdq_tasks_submitted_total{queue=\"m\"} 3",
        "rdq_tasks_claimed_total{queue=\"m\"} 2",
        "rdq_outcomes_total{queue=\"m\",outcome=\"SUCCESS\"} 1",
        "rdq_outcomes_total{queue=\"m\",outcome=\"PERMANENT_FAILURE\"} 1",
        "rdq_dlq_size{queue=\"m\"} 1",
        "rdq_queue_tasks{queue=\"m\",status=\"PENDING\"} 1",
        "rdq_lease_expiries_total{queue=\"m\"} 0",
        "# TYPE rdq_dispatch_duration_seconds histogram",
    ] {
        assert!(
            r.text.lines().any(|l| l == line),
            "missing {line}:\n{}",
            r.text
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn a_token_without_admin_reads_the_config_with_callback_secrets_redacted() {
    let server = secured(None).await.with_token(OPS);
    server
        .put(
            "/v1/queues/payments.charge/config",
            json!({"callback": {"url": "http://127.0.0.1:9/x?key=s3cret", "headers": {"authorization": "Bearer callback-secret"}}}),
        )
        .await;
    let admin = server
        .call_as(
            Some(OPS),
            Method::GET,
            "/v1/queues/payments.charge/config",
            None,
        )
        .await;
    assert_eq!(
        admin.body["callback"]["headers"]["authorization"],
        "Bearer callback-secret"
    );
    let reader = server
        .call_as(
            Some(SUBMITTER),
            Method::GET,
            "/v1/queues/payments.charge/config",
            None,
        )
        .await;
    assert_eq!(reader.status, StatusCode::OK, "{}", reader.body);
    assert_eq!(reader.body["callback"]["headers"]["authorization"], "…");
    let text = reader.body.to_string();
    assert!(
        !text.contains("callback-secret") && !text.contains("s3cret"),
        "{text}"
    );
    assert_eq!(reader.body["max_attempts"], admin.body["max_attempts"]);
    // Changing it still needs admin.
    server
        .call_as(
            Some(SUBMITTER),
            Method::PUT,
            "/v1/queues/payments.charge/config",
            Some(json!({"paused": true})),
        )
        .await
        .assert_problem(403, "FORBIDDEN");
}
