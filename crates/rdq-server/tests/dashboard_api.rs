//! The dashboard at `/ui` and the API routes it reads besides the queue and
//! DLQ routes: `/v1/whoami`, `/v1/overview`, `…/dead/breakdown` and
//! `/v1/audit` (`docs/dashboard.md`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;

use common::{TestServer, test_config};
use reqwest::StatusCode;
use serde_json::{Value, json};

const READER: &str = "reader-token-00000001";
const OPS: &str = "ops-token-00000000001";

fn secured_config() -> rdq_server::ServerConfig {
    let mut config = rdq_server::ServerConfig::from_toml(&format!(
        r#"
        [[tokens]]
        name = "reader"
        token = "{READER}"
        scopes = ["submit", "work"]
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
    config
}

async fn secured() -> TestServer {
    TestServer::with(
        secured_config(),
        Arc::new(rdq_store_memory::MemoryStore::new()),
    )
    .await
    .with_token(OPS)
}

async fn embedded(dir: &tempfile::TempDir) -> TestServer {
    let store = rdq_store_embedded::EmbeddedStore::open(dir.path().join("data")).unwrap();
    TestServer::with(test_config(), Arc::new(store)).await
}

/// Submits one task per error type in `kinds`, claims them and fails each
/// permanently with that error type: each lands in the DLQ.
async fn kill(server: &TestServer, queue: &str, kinds: &[&str]) -> Vec<String> {
    let mut ids = Vec::new();
    for kind in kinds {
        let env = server.submit(queue, json!({"kind": kind})).await;
        let claimed = server
            .post(&format!("/v1/queues/{queue}/claim"), json!({"max": 1}))
            .await;
        assert_eq!(claimed.status, StatusCode::OK, "{}", claimed.text);
        let task = &claimed.body["tasks"][0];
        assert_eq!(task["id"], env["id"]);
        let settled = server
            .post(
                &format!("/v1/tasks/{}/settle", task["id"].as_str().unwrap()),
                json!({
                    "lease_token": task["lease_token"],
                    "outcome": "PERMANENT_FAILURE",
                    "error": {"type": kind, "message": format!("{kind} happened")}
                }),
            )
            .await;
        assert_eq!(settled.body["status"], "DEAD", "{}", settled.text);
        ids.push(env["id"].as_str().unwrap().to_owned());
    }
    ids
}

async fn ui_get(server: &TestServer, path: &str) -> reqwest::Response {
    server
        .client
        .get(format!("{}{path}", server.base))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_dashboard_files_are_served_without_a_token_with_their_types_and_a_strict_csp() {
    let server = secured().await;
    for (path, content_type) in [
        ("/ui", "text/html; charset=utf-8"),
        ("/ui/", "text/html; charset=utf-8"),
        ("/ui/index.html", "text/html; charset=utf-8"),
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/app.css", "text/css; charset=utf-8"),
        ("/ui/favicon.svg", "image/svg+xml"),
    ] {
        let r = ui_get(&server, path).await;
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        let h = r.headers();
        assert_eq!(h["content-type"], content_type, "{path}");
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'"), "{csp}");
        assert!(csp.contains("default-src 'none'"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert!(h.get("set-cookie").is_none());
        assert!(!r.bytes().await.unwrap().is_empty());
    }
    let missing = ui_get(&server, "/ui/secrets.txt").await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert!(missing.headers().contains_key("content-security-policy"));
    server.stop().await;
}

#[tokio::test]
async fn the_page_has_no_inline_script_or_handlers_and_loads_only_its_own_files() {
    let server = TestServer::start().await;
    let html = ui_get(&server, "/ui").await.text().await.unwrap();
    let lower = html.to_lowercase();
    for (i, _) in lower.match_indices("<script") {
        let tag = &lower[i..i + lower[i..].find('>').unwrap()];
        assert!(tag.contains("src=\"/ui/app.js\""), "inline script: {tag}");
        assert!(lower[i..].starts_with(&format!("{tag}></script>")));
    }
    assert!(lower.contains("<script"), "the page loads its script");
    for attr in [
        " onclick=",
        " onload=",
        " onerror=",
        " onsubmit=",
        "javascript:",
    ] {
        assert!(!lower.contains(attr), "{attr} in the page");
    }
    assert!(!lower.contains("http://") && !lower.contains("https://"));
    let js = ui_get(&server, "/ui/app.js").await.text().await.unwrap();
    // The token goes in a header, never in a URL or a cookie.
    assert!(js.contains("Authorization"));
    assert!(!js.contains("document.cookie"));
    assert!(!js.contains("eval("));
    server.stop().await;
}

#[tokio::test]
async fn whoami_names_the_token_and_its_scopes() {
    let server = secured().await;
    let ops = server.get("/v1/whoami").await;
    assert_eq!(ops.status, StatusCode::OK);
    assert_eq!(
        ops.body,
        json!({"name": "ops", "open": false, "scopes": ["submit", "work", "admin"]})
    );
    let reader = server
        .call_as(Some(READER), reqwest::Method::GET, "/v1/whoami", None)
        .await;
    assert_eq!(reader.body["scopes"], json!(["submit", "work"]));
    server
        .call_as(None, reqwest::Method::GET, "/v1/whoami", None)
        .await
        .assert_problem(401, "UNAUTHENTICATED");
    let open = TestServer::start().await;
    let anon = open.get("/v1/whoami").await;
    assert_eq!(
        anon.body,
        json!({"name": null, "open": true, "scopes": ["submit", "work", "admin"]})
    );
    open.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn the_overview_shows_counts_paused_the_oldest_pending_age_and_the_last_hour() {
    let dir = tempfile::tempdir().unwrap();
    let server = embedded(&dir).await;
    kill(&server, "mail", &["smtp.Timeout", "smtp.Refused"]).await;
    let first = server.submit("mail", json!({"n": 1})).await;
    server.submit("mail", json!({"n": 2})).await;
    let paused = server
        .put("/v1/queues/idle/config", json!({"paused": true}))
        .await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.text);

    let r = server.get("/v1/overview").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["history_minutes"], 60);
    assert_eq!(r.body["history_scope"], "process");
    let queues = r.body["queues"].as_array().unwrap();
    let mail = queues.iter().find(|q| q["queue"] == "mail").unwrap();
    assert_eq!(mail["pending"], 2);
    assert_eq!(mail["dead"], 2);
    assert_eq!(mail["in_flight"], 0);
    assert_eq!(mail["source"], "counts");
    assert_eq!(mail["paused"], false);
    assert_eq!(mail["oldest_pending_id"], first["id"]);
    assert_eq!(mail["oldest_pending_at"], first["created_at"]);
    assert!(mail["oldest_pending_age_ms"].is_u64());
    let history = mail["history"].as_array().unwrap();
    assert_eq!(history.len(), 60);
    let failed: u64 = history.iter().map(|m| m["failed"].as_u64().unwrap()).sum();
    let succeeded: u64 = history
        .iter()
        .map(|m| m["succeeded"].as_u64().unwrap())
        .sum();
    assert_eq!((failed, succeeded), (2, 0));
    let idle = queues.iter().find(|q| q["queue"] == "idle").unwrap();
    assert_eq!(idle["paused"], true);
    assert_eq!(idle["oldest_pending_id"], Value::Null);

    let named = server.get("/v1/overview?names=idle").await;
    assert_eq!(named.body["queues"].as_array().unwrap().len(), 1);
    server
        .get("/v1/overview?names=nope")
        .await
        .assert_problem(404, "QUEUE_NOT_FOUND");
    server
        .get("/v1/overview?names=Bad%20Name")
        .await
        .assert_problem(400, "INVALID_QUEUE_NAME");
    server.stop().await;
}

/// The breakdown, as (error type, count, newest id) triples.
fn groups(body: &Value) -> Vec<(Value, u64, Value)> {
    body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            assert_eq!(g["newest"]["status"], "DEAD");
            (
                g["error_type"].clone(),
                g["count"].as_u64().unwrap(),
                g["newest"]["id"].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_breakdown_counts_the_dlq_by_error_type_with_the_newest_of_each_on_every_store() {
    let dir = tempfile::tempdir().unwrap();
    // The embedded store answers from one grouped query, the memory store
    // from the SPI's default (paging the DLQ): the answers must agree.
    for server in [embedded(&dir).await, TestServer::start().await] {
        let ids = kill(
            &server,
            "billing",
            &[
                "http.Status503",
                "card.Declined",
                "http.Status503",
                "http.Status503",
                "card.Declined",
                "z.Other",
            ],
        )
        .await;
        let r = server.get("/v1/queues/billing/dead/breakdown").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(r.body["queue"], "billing");
        assert_eq!(r.body["total"], 6);
        assert_eq!(
            groups(&r.body),
            vec![
                (json!("http.Status503"), 3, json!(ids[3])),
                (json!("card.Declined"), 2, json!(ids[4])),
                (json!("z.Other"), 1, json!(ids[5])),
            ]
        );
        let example = &r.body["groups"][0]["newest"];
        let attempts = example["attempts"].as_array().unwrap();
        assert_eq!(attempts.last().unwrap()["error"]["type"], "http.Status503");

        // A redrive empties a group; the answer follows.
        let redriven = server
            .post(
                "/v1/queues/billing/dead/redrive",
                json!({"error_type": "card.*"}),
            )
            .await;
        assert_eq!(redriven.body["count"], 2);
        let after = server.get("/v1/queues/billing/dead/breakdown").await;
        assert_eq!(after.body["total"], 4);
        assert_eq!(groups(&after.body).len(), 2);

        server
            .get("/v1/queues/nope/dead/breakdown")
            .await
            .assert_problem(404, "QUEUE_NOT_FOUND");
        server.stop().await;
    }
}

#[tokio::test]
async fn a_reader_reads_the_breakdown_the_audit_log_needs_admin_and_actions_are_refused() {
    let server = secured().await;
    let ids = kill(&server, "jobs", &["x.Boom"]).await;
    let breakdown = server
        .call_as(
            Some(READER),
            reqwest::Method::GET,
            "/v1/queues/jobs/dead/breakdown",
            None,
        )
        .await;
    assert_eq!(breakdown.body["total"], 1, "{}", breakdown.body);
    for path in ["/v1/audit", "/v1/audit?queue=jobs"] {
        server
            .call_as(Some(READER), reqwest::Method::GET, path, None)
            .await
            .assert_problem(403, "FORBIDDEN");
    }
    // The overview is for every caller: the reader sees the queue.
    let seen = server
        .call_as(Some(READER), reqwest::Method::GET, "/v1/overview", None)
        .await;
    assert_eq!(seen.body["queues"][0]["queue"], "jobs");
    let before = server.snapshot().await;
    server
        .call_as(
            Some(READER),
            reqwest::Method::POST,
            "/v1/queues/jobs/dead/redrive",
            Some(json!({"ids": ids})),
        )
        .await
        .assert_problem(403, "FORBIDDEN");
    server
        .call_as(
            Some(READER),
            reqwest::Method::PUT,
            "/v1/queues/jobs/config",
            Some(json!({"paused": true})),
        )
        .await
        .assert_problem(403, "FORBIDDEN");
    assert_eq!(server.snapshot().await, before);
    server.stop().await;
}

#[tokio::test]
async fn the_audit_tail_shows_this_processs_actions_newest_first() {
    let server = secured().await;
    let ids = kill(&server, "jobs", &["x.Boom", "x.Bang"]).await;
    kill(&server, "other", &["y.Boom"]).await;
    let dry = server
        .post(
            "/v1/queues/jobs/dead/redrive",
            json!({"error_type": "x.*", "dry_run": true}),
        )
        .await;
    assert_eq!(dry.body["count"], 2);
    server
        .post("/v1/queues/jobs/dead/redrive", json!({"ids": [ids[0]]}))
        .await;
    server.delete("/v1/queues/other/dead").await;

    let all = server.get("/v1/audit").await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert_eq!(all.body["scope"], "process");
    let actions: Vec<(Value, Value, Value)> = all.body["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["action"].clone(),
                r["queue"].clone(),
                r["dry_run"].clone(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        vec![
            (json!("dlq.purge"), json!("other"), json!(false)),
            (json!("dlq.redrive"), json!("jobs"), json!(false)),
            (json!("dlq.redrive"), json!("jobs"), json!(true)),
        ]
    );
    assert_eq!(all.body["records"][1]["who"], "ops");
    assert_eq!(all.body["records"][1]["detail"]["ids"], json!([ids[0]]));

    let jobs = server.get("/v1/audit?queue=jobs&limit=1").await;
    let records = jobs.body["records"].as_array().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["dry_run"], false);

    server
        .get("/v1/audit?limit=0")
        .await
        .assert_problem(400, "INVALID_FIELD");
    server
        .get("/v1/audit?limit=many")
        .await
        .assert_problem(400, "MALFORMED_REQUEST");
    server
        .get("/v1/audit?queue=Bad")
        .await
        .assert_problem(400, "INVALID_QUEUE_NAME");
    server
        .get("/v1/audit?since=yesterday")
        .await
        .assert_problem(400, "MALFORMED_REQUEST");
    server.stop().await;
}
