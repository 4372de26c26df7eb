//! `/v1/queues`: counts and live policy; `/v1/queues/{queue}/dead`: paging,
//! redrive, export, import, purge.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::TestServer;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// Submits `n` tasks to `queue` and dead-letters them with `error_type`.
async fn dead_tasks(server: &TestServer, queue: &str, n: usize, error_type: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            server.submit(queue, json!(i)).await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let r = server
        .post(&format!("/v1/queues/{queue}/claim"), json!({"max": n}))
        .await;
    for t in r.body["tasks"].as_array().unwrap() {
        let s = server
            .post(
                &format!("/v1/tasks/{}/settle", t["id"].as_str().unwrap()),
                json!({"lease_token": t["lease_token"], "outcome": "PERMANENT_FAILURE",
                       "error": {"type": error_type, "message": "no"}}),
            )
            .await;
        assert_eq!(s.body["status"], "DEAD", "{}", s.text);
    }
    ids
}

#[tokio::test]
async fn queues_are_listed_with_counts_per_status() {
    let server = TestServer::start().await;
    server.submit("a", json!(1)).await;
    server.submit("a", json!(2)).await;
    dead_tasks(&server, "b", 1, "x").await;
    server
        .put("/v1/queues/c/config", json!({"paused": true}))
        .await;
    let r = server.get("/v1/queues").await;
    assert_eq!(r.status, StatusCode::OK);
    let queues = r.body["queues"].as_array().unwrap();
    let row = |name: &str| queues.iter().find(|q| q["queue"] == name).unwrap().clone();
    assert_eq!(row("a")["pending"], 2);
    assert_eq!(row("b")["dead"], 1);
    assert_eq!(row("c")["pending"], 0);
    server.stop().await;
}

#[tokio::test]
async fn config_reads_the_live_policy_and_a_put_changes_only_what_it_names() {
    let server = TestServer::start().await;
    server
        .get("/v1/queues/nope/config")
        .await
        .assert_problem(404, "QUEUE_NOT_FOUND");
    let put = server
        .put(
            "/v1/queues/q/config",
            json!({"max_attempts": 3, "lease_ms": 5000}),
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.text);
    assert_eq!(put.body["max_attempts"], 3);
    let second = server
        .put("/v1/queues/q/config", json!({"paused": true}))
        .await;
    assert_eq!(second.body["max_attempts"], 3);
    assert_eq!(second.body["paused"], true);
    let got = server.get("/v1/queues/q/config").await;
    assert_eq!(got.body, second.body);
    assert_eq!(got.body["backoff"]["kind"], "exponential");
    server.stop().await;
}

#[tokio::test]
async fn invalid_policies_and_callback_targets_are_refused_and_change_nothing() {
    let server = TestServer::start().await;
    server
        .put("/v1/queues/q/config", json!({"max_attempts": 4}))
        .await;
    let before = server.get("/v1/queues/q/config").await.body;
    for (body, code) in [
        (json!({"max_attempts": 0}), "INVALID_POLICY"),
        (json!({"max_attempts": "ten"}), "INVALID_POLICY"),
        (json!({"unknown_field": 1}), "INVALID_POLICY"),
        (json!([1, 2]), "INVALID_POLICY"),
        (
            json!({"callback": {"url": "http://example.com/hook"}}),
            "INVALID_POLICY",
        ),
        (
            json!({"callback": {"url": "http://127.0.0.1:1/x", "timeout_ms": 999999}}),
            "INVALID_POLICY",
        ),
        (json!({"callback": {"nope": 1}}), "INVALID_POLICY"),
    ] {
        server
            .put("/v1/queues/q/config", body.clone())
            .await
            .assert_problem(400, code);
        assert_eq!(
            server.get("/v1/queues/q/config").await.body,
            before,
            "{body}"
        );
    }
    server
        .raw(Method::PUT, "/v1/queues/q/config", b"{oops".to_vec())
        .await
        .assert_problem(400, "MALFORMED_REQUEST");
    server
        .put("/v1/queues/BAD/config", json!({}))
        .await
        .assert_problem(400, "INVALID_QUEUE_NAME");
    server.stop().await;
}

#[tokio::test]
async fn the_dlq_pages_newest_first_with_a_stable_cursor_and_filters_by_error_type() {
    let server = TestServer::start().await;
    let mut ids = dead_tasks(&server, "q", 3, "http.Status500").await;
    ids.extend(dead_tasks(&server, "q", 2, "billing.Declined").await);
    server.submit("q", json!("alive")).await;
    let first = server.get("/v1/queues/q/dead?limit=2").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    let items = first.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["id"], ids[4].as_str());
    assert_eq!(items[1]["id"], ids[3].as_str());
    let cursor = first.body["next_cursor"].as_str().unwrap();
    // A task dying meanwhile does not disturb the next page.
    dead_tasks(&server, "q", 1, "late").await;
    let second = server
        .get(&format!("/v1/queues/q/dead?limit=2&cursor={cursor}"))
        .await;
    let items: Vec<&str> = second.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(items, vec![ids[2].as_str(), ids[1].as_str()]);
    let filtered = server.get("/v1/queues/q/dead?error_type=http.*").await;
    assert_eq!(filtered.body["items"].as_array().unwrap().len(), 3);
    assert!(filtered.body["next_cursor"].is_null());
    server
        .get("/v1/queues/q/dead?limit=0")
        .await
        .assert_problem(400, "INVALID_FIELD");
    server
        .get("/v1/queues/q/dead?cursor=zzz")
        .await
        .assert_problem(400, "INVALID_ARGUMENT");
    server
        .get("/v1/queues/q/dead?error_type=[x")
        .await
        .assert_problem(400, "INVALID_ARGUMENT");
    server
        .get("/v1/queues/q/dead?limit=abc")
        .await
        .assert_problem(400, "MALFORMED_REQUEST");
    server
        .get("/v1/queues/none/dead")
        .await
        .assert_problem(404, "QUEUE_NOT_FOUND");
    server.stop().await;
}

#[tokio::test]
async fn redrive_by_filter_ids_and_limit_with_a_dry_run_first() {
    let server = TestServer::start().await;
    let timeouts = dead_tasks(&server, "q", 3, "http.Timeout").await;
    let declined = dead_tasks(&server, "q", 2, "billing.Declined").await;
    let before = server.snapshot().await;
    let dry = server
        .post(
            "/v1/queues/q/dead/redrive",
            json!({"error_type": "http.*", "dry_run": true}),
        )
        .await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.text);
    assert_eq!(dry.body["count"], 3);
    assert_eq!(dry.body["dry_run"], true);
    assert_eq!(server.snapshot().await, before);
    let limited = server
        .post(
            "/v1/queues/q/dead/redrive",
            json!({"error_type": "http.*", "limit": 2}),
        )
        .await;
    assert_eq!(limited.body["count"], 2);
    let by_id = server
        .post("/v1/queues/q/dead/redrive", json!({"ids": [declined[0]]}))
        .await;
    assert_eq!(by_id.body["ids"], json!([declined[0]]));
    let env = server.get(&format!("/v1/tasks/{}", declined[0])).await.body;
    assert_eq!(env["status"], "PENDING");
    assert_eq!(env["redrive_count"], 1);
    assert_eq!(env["attempt_count"], 0);
    assert_eq!(env["attempts"].as_array().unwrap().len(), 1);
    let _ = timeouts;
    let counts = server.get("/v1/queues").await.body["queues"][0].clone();
    assert_eq!(counts["dead"], 2);
    assert_eq!(counts["pending"], 3);
    server
        .post("/v1/queues/q/dead/redrive", json!({"ids": ["nope"]}))
        .await
        .assert_problem(400, "INVALID_FIELD");
    server
        .post("/v1/queues/q/dead/redrive", json!({"error_type": ""}))
        .await
        .assert_problem(400, "INVALID_ARGUMENT");
    server
        .post("/v1/queues/q/dead/redrive", json!({"everything": true}))
        .await
        .assert_problem(400, "MALFORMED_REQUEST");
    server
        .post("/v1/queues/none/dead/redrive", json!({}))
        .await
        .assert_problem(404, "QUEUE_NOT_FOUND");
    server.stop().await;
}

async fn export(server: &TestServer, queue: &str) -> Vec<u8> {
    let r = server
        .client
        .get(format!("{}/v1/queues/{queue}/dead/export", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    r.bytes().await.unwrap().to_vec()
}

#[tokio::test]
async fn export_purge_import_restores_the_same_envelopes_byte_for_byte() {
    let server = TestServer::start().await;
    // More than one export page.
    dead_tasks(&server, "q", 520, "x.Failed").await;
    server.submit("q", json!("alive")).await;
    let before = server.snapshot().await;
    let exported = export(&server, "q").await;
    assert_eq!(exported.iter().filter(|&&b| b == b'\n').count(), 520);

    let dry = server.delete("/v1/queues/q/dead?dry_run=true").await;
    assert_eq!(dry.body["purged"], 520);
    assert_eq!(server.snapshot().await, before);
    let purged = server.delete("/v1/queues/q/dead").await;
    assert_eq!(purged.body["purged"], 520, "{}", purged.text);
    assert_eq!(server.snapshot().await.len(), 1);

    let checked = server
        .raw(
            Method::POST,
            "/v1/queues/q/dead/import?dry_run=true",
            exported.clone(),
        )
        .await;
    assert_eq!(checked.body["checked"], 520, "{}", checked.text);
    assert_eq!(checked.body["imported"], 0);
    assert_eq!(server.snapshot().await.len(), 1);
    let imported = server
        .raw(Method::POST, "/v1/queues/q/dead/import", exported.clone())
        .await;
    assert_eq!(imported.status, StatusCode::OK, "{}", imported.text);
    assert_eq!(imported.body["imported"], 520);
    assert_eq!(server.snapshot().await, before);
    assert_eq!(export(&server, "q").await, exported);
    server.stop().await;
}

#[tokio::test]
async fn an_import_with_bad_lines_imports_nothing_and_reports_them_by_number() {
    let server = TestServer::start().await;
    dead_tasks(&server, "q", 2, "x").await;
    let exported = export(&server, "q").await;
    let mut lines: Vec<Vec<u8>> = exported
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    server.delete("/v1/queues/q/dead").await;
    let before = server.snapshot().await;
    // Line 2 is not JSON, line 3 a newer envelope version, line 4 repeats line 1.
    let mut newer: Value = serde_json::from_slice(&lines[1]).unwrap();
    newer["envelope_version"] = json!(2);
    lines.insert(1, b"{broken".to_vec());
    lines.insert(2, newer.to_string().into_bytes());
    lines.push(lines[0].clone());
    let body = lines.join(&b'\n');
    let r = server
        .raw(Method::POST, "/v1/queues/q/dead/import", body)
        .await;
    r.assert_problem(400, "INVALID_IMPORT");
    let reported: Vec<(u64, &str)> = r.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["line"].as_u64().unwrap(), e["code"].as_str().unwrap()))
        .collect();
    assert_eq!(
        reported,
        vec![
            (2, "MALFORMED_ENVELOPE"),
            (3, "UNSUPPORTED_ENVELOPE_VERSION"),
            (5, "TASK_EXISTS"),
        ]
    );
    assert_eq!(server.snapshot().await, before);
    // Into another queue's DLQ: every line is refused.
    let r = server
        .raw(Method::POST, "/v1/queues/other/dead/import", exported)
        .await;
    r.assert_problem(400, "INVALID_IMPORT");
    assert_eq!(r.body["error_count"], 2);
    assert_eq!(server.snapshot().await, before);
    server.stop().await;
}

#[tokio::test]
async fn importing_a_task_that_exists_is_refused() {
    let server = TestServer::start().await;
    dead_tasks(&server, "q", 1, "x").await;
    let exported = export(&server, "q").await;
    let r = server
        .raw(Method::POST, "/v1/queues/q/dead/import", exported)
        .await;
    r.assert_problem(400, "INVALID_IMPORT");
    assert_eq!(r.body["errors"][0]["code"], "TASK_EXISTS");
    server.stop().await;
}

#[tokio::test]
async fn purge_and_export_of_an_unknown_queue_are_404() {
    let server = TestServer::start().await;
    server
        .delete("/v1/queues/none/dead")
        .await
        .assert_problem(404, "QUEUE_NOT_FOUND");
    server
        .get("/v1/queues/none/dead/export")
        .await
        .assert_problem(404, "QUEUE_NOT_FOUND");
    server
        .delete("/v1/queues/none/dead?dry_run=maybe")
        .await
        .assert_problem(400, "MALFORMED_REQUEST");
    server.stop().await;
}

#[tokio::test]
async fn imports_have_their_own_body_limit() {
    let mut config = common::test_config();
    config.max_request_bytes = 4096;
    config.max_import_bytes = 256 * 1024;
    let server = TestServer::with(
        config,
        std::sync::Arc::new(rdq_store_memory::MemoryStore::new()),
    )
    .await;
    dead_tasks(&server, "q", 40, "x").await;
    let exported = export(&server, "q").await;
    assert!(
        exported.len() > 4096,
        "the export is larger than max_request_bytes"
    );
    server.delete("/v1/queues/q/dead").await;
    let r = server
        .raw(Method::POST, "/v1/queues/q/dead/import", exported.clone())
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["imported"], 40);
    let mut huge = Vec::new();
    while huge.len() <= 256 * 1024 {
        huge.extend_from_slice(&exported);
    }
    server
        .raw(Method::POST, "/v1/queues/q/dead/import", huge)
        .await
        .assert_problem(413, "PAYLOAD_TOO_LARGE");
    server.stop().await;
}

#[tokio::test]
async fn a_dead_task_is_read_by_queue_and_id() {
    let server = TestServer::start().await;
    let dead = dead_tasks(&server, "shown", 2, "app.Shown").await;
    let waiting = server.submit("shown", json!(9)).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let other = dead_tasks(&server, "elsewhere", 1, "app.Other").await;

    let r = server
        .get(&format!("/v1/queues/shown/dead/{}", dead[1]))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["id"], dead[1].as_str());
    assert_eq!(r.body["status"], "DEAD");
    assert_eq!(r.body["attempts"][0]["error"]["type"], "app.Shown");
    // The same envelope `GET /v1/tasks/{id}` returns, byte for byte.
    assert_eq!(
        r.text,
        server.get(&format!("/v1/tasks/{}", dead[1])).await.text
    );

    for id in [&waiting, &other[0]] {
        server
            .get(&format!("/v1/queues/shown/dead/{id}"))
            .await
            .assert_problem(404, "TASK_NOT_FOUND");
    }
    server
        .get("/v1/queues/shown/dead/not-a-ulid")
        .await
        .assert_problem(400, "INVALID_ARGUMENT");
    // The export route is not taken for an id.
    assert_eq!(
        server.get("/v1/queues/shown/dead/export").await.status,
        StatusCode::OK
    );
    server.stop().await;
}
