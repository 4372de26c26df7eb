//! `/v1/schedules` over real HTTP: put, read, list, pause, resume, run now,
//! preview, delete; every bad schedule refused with its stable code and
//! field, storing nothing; scopes and the audit log; the scheduler every
//! server runs firing a stored schedule.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{TestServer, test_config};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn hourly() -> Value {
    json!({
        "task": {"queue": "reports", "handler_ref": "build-report", "payload": "eyJkYXlzIjoxfQ==",
                 "headers": {"team": "data"}},
        "spec": {"cron": "0 * * * *"},
        "tz": "Europe/London"
    })
}

#[tokio::test]
async fn a_put_schedule_is_201_then_200_and_reads_back_with_defaults_and_next_run() {
    let server = TestServer::start().await;
    let r = server.put("/v1/schedules/nightly.report", hourly()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(r.body["name"], "nightly.report");
    assert_eq!(r.body["owner"], "api");
    let s = &r.body["schedule"];
    assert_eq!(s["name"], "nightly.report");
    assert_eq!(s["spec"]["cron"], "0 * * * *");
    assert_eq!(s["tz"], "Europe/London");
    assert_eq!(s["overlap"], "allow");
    assert_eq!(s["catch_up"], "latest");
    assert_eq!(s["paused"], false);
    assert_eq!(s["task"]["payload"], "eyJkYXlzIjoxfQ==");
    assert_eq!(r.body["fires"], 0);
    let next = r.body["next_due_ms"].as_i64().unwrap();
    assert_eq!(next % 3_600_000, 0, "on the hour");

    let mut body = hourly();
    body["name"] = json!("nightly.report");
    body["overlap"] = json!("skip_if_running");
    let again = server.put("/v1/schedules/nightly.report", body).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    assert_eq!(again.body["schedule"]["overlap"], "skip_if_running");

    let got = server.get("/v1/schedules/nightly.report").await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body["schedule"], again.body["schedule"]);
    let list = server.get("/v1/schedules").await;
    assert_eq!(list.status, StatusCode::OK);
    assert_eq!(list.body["schedules"].as_array().unwrap().len(), 1);
    assert_eq!(list.body["schedules"][0]["name"], "nightly.report");
    server.stop().await;
}

#[tokio::test]
async fn a_put_names_its_owner_code_for_a_schedule_declared_in_code() {
    let server = TestServer::start().await;
    let r = server
        .put("/v1/schedules/declared?owner=code", hourly())
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(r.body["owner"], "code");
    // A put without the query is the API's again.
    let r = server.put("/v1/schedules/declared", hourly()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["owner"], "api");
    let bad = server
        .put("/v1/schedules/other?owner=robot", hourly())
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.text);
    assert_eq!(bad.body["code"], "INVALID_FIELD");
    assert_eq!(bad.body["field"], "owner");
    let missing = server.get("/v1/schedules/other").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    server.stop().await;
}

#[tokio::test]
async fn bad_schedules_are_400_with_the_code_naming_the_field_and_store_nothing() {
    let server = TestServer::start().await;
    let with = |patch: Value| {
        let mut body = hourly();
        for (k, v) in patch.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let cases = [
        (
            "ok",
            with(json!({"spec": {"cron": "61 * * * *"}})),
            "INVALID_CRON",
            "spec.cron",
        ),
        (
            "ok",
            with(json!({"spec": {"cron": "0 0 30 2 *"}})),
            "INVALID_CRON",
            "spec.cron",
        ),
        (
            "ok",
            with(json!({"tz": "Mars/Olympus"})),
            "UNKNOWN_TIME_ZONE",
            "tz",
        ),
        (
            "ok",
            with(json!({"spec": {"every_ms": 0}})),
            "INVALID_INTERVAL",
            "spec.every_ms",
        ),
        (
            "ok",
            with(json!({"start_ms": 2_000_000_000_000_i64, "end_ms": 1_000_000_000_000_i64})),
            "INVALID_WINDOW",
            "end_ms",
        ),
        (
            "ok",
            with(json!({"catch_up": {"all": {"max": 0, "window_ms": 1000}}})),
            "INVALID_WINDOW",
            "catch_up.all.max",
        ),
        (
            "ok",
            with(json!({"task": {"queue": "Bad Queue", "handler_ref": "h"}})),
            "INVALID_QUEUE_NAME",
            "task.queue",
        ),
        (
            "ok",
            with(json!({"task": {"queue": "q", "handler_ref": "h", "headers": {"rdq.x": "1"}}})),
            "RESERVED_HEADER",
            "task.headers.rdq.x",
        ),
        ("Bad..Name", hourly(), "INVALID_SCHEDULE_NAME", "name"),
        (
            "ok",
            with(json!({"name": "other"})),
            "INVALID_FIELD",
            "name",
        ),
    ];
    for (name, body, code, field) in cases {
        let r = server
            .put(&format!("/v1/schedules/{name}"), body.clone())
            .await;
        r.assert_problem(400, code);
        let got = r.body["field"].as_str().unwrap_or_default();
        assert!(got.starts_with(field), "{code}: field {got} for {body}");
    }
    // Not the schedule's JSON at all.
    for body in [
        json!({"task": {"queue": "q", "handler_ref": "h"}, "spec": {"every_ms": 1}, "colour": 1}),
        json!({"task": {"queue": "q", "handler_ref": "h"}, "spec": {"every_ms": 1, "cron": "* * * * *"}}),
        json!({"task": {"queue": "q", "handler_ref": "h"}, "spec": {"every_ms": -1}}),
    ] {
        server
            .put("/v1/schedules/ok", body)
            .await
            .assert_problem(400, "MALFORMED_REQUEST");
    }
    assert_eq!(
        server.get("/v1/schedules").await.body["schedules"],
        json!([])
    );
    server
        .get("/v1/schedules/ok")
        .await
        .assert_problem(404, "SCHEDULE_NOT_FOUND");
    server.stop().await;
}

#[tokio::test]
async fn next_previews_due_times_and_bounds_the_count() {
    let server = TestServer::start().await;
    let body = json!({
        "task": {"queue": "q", "handler_ref": "h"},
        "spec": {"every_ms": 60000}
    });
    assert_eq!(
        server.put("/v1/schedules/minutely", body).await.status,
        StatusCode::CREATED
    );
    let r = server.get("/v1/schedules/minutely/next?count=3").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let due: Vec<i64> = serde_json::from_value(r.body["due_ms"].clone()).unwrap();
    assert_eq!(due.len(), 3);
    assert!(due.iter().all(|d| d % 60_000 == 0));
    assert_eq!(due[1] - due[0], 60_000);
    assert!(r.body["due"][0].as_str().unwrap().ends_with(":00.000Z"));
    let default = server.get("/v1/schedules/minutely/next").await;
    assert_eq!(default.body["due_ms"].as_array().unwrap().len(), 5);
    for bad in ["0", "101", "x"] {
        let r = server
            .get(&format!("/v1/schedules/minutely/next?count={bad}"))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text);
    }
    server
        .get("/v1/schedules/missing/next")
        .await
        .assert_problem(404, "SCHEDULE_NOT_FOUND");
    server.stop().await;
}

#[tokio::test]
async fn pause_resume_run_and_delete() {
    let server = TestServer::start().await;
    server.put("/v1/schedules/hourly", hourly()).await;
    let paused = server.post("/v1/schedules/hourly/pause", json!({})).await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.text);
    assert_eq!(paused.body["schedule"]["paused"], true);
    let resumed = server.post("/v1/schedules/hourly/resume", json!({})).await;
    assert_eq!(resumed.body["schedule"]["paused"], false);

    let run = server.post("/v1/schedules/hourly/run", json!({})).await;
    assert_eq!(run.status, StatusCode::CREATED, "{}", run.text);
    let headers = &run.body["headers"];
    assert_eq!(headers["rdq.schedule"], "hourly");
    assert_eq!(headers["rdq.schedule_manual"], "true");
    assert_eq!(headers["team"], "data");
    assert!(headers.get("rdq.schedule_due").is_none());
    assert_eq!(run.body["queue"], "reports");
    // A second run is a second task: no idempotency key.
    let again = server.post("/v1/schedules/hourly/run", json!({})).await;
    assert_ne!(again.body["id"], run.body["id"]);

    assert_eq!(
        server.delete("/v1/schedules/hourly").await.status,
        StatusCode::NO_CONTENT
    );
    server
        .delete("/v1/schedules/hourly")
        .await
        .assert_problem(404, "SCHEDULE_NOT_FOUND");
    for path in ["pause", "resume", "run"] {
        server
            .post(&format!("/v1/schedules/hourly/{path}"), json!({}))
            .await
            .assert_problem(404, "SCHEDULE_NOT_FOUND");
    }
    // The tasks it submitted stay.
    let id = run.body["id"].as_str().unwrap();
    assert_eq!(
        server.get(&format!("/v1/tasks/{id}")).await.status,
        StatusCode::OK
    );
    server.stop().await;
}

const SUBMITTER: &str = "reports-submit-000001";
const OPS: &str = "ops-token-00000000001";

async fn secured(audit: std::path::PathBuf) -> TestServer {
    let mut config = rdq_server::ServerConfig::from_toml(&format!(
        r#"
        [[tokens]]
        name = "reports-service"
        token = "{SUBMITTER}"
        scopes = ["submit"]
        queues = ["reports"]
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
    config.audit_log = Some(audit);
    TestServer::with(config, Arc::new(rdq_store_memory::MemoryStore::new())).await
}

#[tokio::test]
async fn reading_needs_a_scope_on_the_queue_writing_needs_admin_and_writes_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let server = secured(audit.clone()).await;
    let put = |token| {
        server.call_as(
            Some(token),
            Method::PUT,
            "/v1/schedules/hourly",
            Some(hourly()),
        )
    };
    put(SUBMITTER).await.assert_problem(403, "FORBIDDEN");
    assert_eq!(put(OPS).await.status, StatusCode::CREATED);
    let mut other = hourly();
    other["task"]["queue"] = json!("billing");
    server
        .call_as(Some(OPS), Method::PUT, "/v1/schedules/billing", Some(other))
        .await;

    // The submitter reads schedules of its queue only.
    let list = server
        .call_as(Some(SUBMITTER), Method::GET, "/v1/schedules", None)
        .await;
    let names: Vec<&str> = list.body["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hourly"]);
    server
        .call_as(Some(SUBMITTER), Method::GET, "/v1/schedules/billing", None)
        .await
        .assert_problem(404, "SCHEDULE_NOT_FOUND");
    for (method, path) in [
        (Method::POST, "/v1/schedules/hourly/pause"),
        (Method::POST, "/v1/schedules/hourly/run"),
        (Method::DELETE, "/v1/schedules/hourly"),
    ] {
        server
            .call_as(Some(SUBMITTER), method, path, None)
            .await
            .assert_problem(403, "FORBIDDEN");
    }
    for (method, path) in [
        (Method::POST, "/v1/schedules/hourly/pause"),
        (Method::POST, "/v1/schedules/hourly/resume"),
        (Method::POST, "/v1/schedules/hourly/run"),
        (Method::DELETE, "/v1/schedules/hourly"),
    ] {
        let r = server.call_as(Some(OPS), method, path, None).await;
        assert!(r.status.is_success(), "{path}: {}", r.text);
    }
    server.stop().await;
    let text = std::fs::read_to_string(&audit).unwrap();
    let actions: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["detail"]["name"] == "hourly")
        .map(|r| {
            assert_eq!(r["who"], "ops");
            r["action"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        actions,
        [
            "schedule.put",
            "schedule.pause",
            "schedule.resume",
            "schedule.run",
            "schedule.delete"
        ]
    );
}

#[tokio::test]
async fn the_server_fires_an_every_second_schedule_and_counts_it_in_metrics() {
    let mut config = test_config();
    config.scheduler.interval_ms = 100;
    let server = TestServer::with(config, Arc::new(rdq_store_memory::MemoryStore::new())).await;
    let body =
        json!({"task": {"queue": "ticks", "handler_ref": "tick"}, "spec": {"every_ms": 1000}});
    assert_eq!(
        server.put("/v1/schedules/tick", body).await.status,
        StatusCode::CREATED
    );
    let mut tasks = Vec::new();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let page = server.get("/v1/queues/ticks/tasks").await;
        tasks = page.body["items"].as_array().cloned().unwrap_or_default();
        if tasks.len() >= 2 {
            break;
        }
    }
    assert!(tasks.len() >= 2, "two fires within five seconds: {tasks:?}");
    for t in &tasks {
        assert_eq!(t["headers"]["rdq.schedule"], "tick");
        let due = t["headers"]["rdq.schedule_due"].as_str().unwrap();
        assert!(due.ends_with(":00.000Z") || due.ends_with(".000Z"), "{due}");
    }
    let state = server.get("/v1/schedules/tick").await;
    assert!(state.body["fires"].as_u64().unwrap() >= 2, "{}", state.text);
    assert!(state.body["last_fired_task"].is_string());
    let metrics = server.get("/metrics").await.text;
    assert!(
        metrics.contains("rdq_schedule_fires_total{schedule=\"tick\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("rdq_schedule_lateness_seconds_count"));
    server.stop().await;
}

#[tokio::test]
async fn a_disabled_scheduler_fires_nothing() {
    let mut config = test_config();
    config.scheduler.enabled = false;
    let server = TestServer::with(config, Arc::new(rdq_store_memory::MemoryStore::new())).await;
    let body =
        json!({"task": {"queue": "ticks", "handler_ref": "tick"}, "spec": {"every_ms": 100}});
    server.put("/v1/schedules/tick", body).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let state = server.get("/v1/schedules/tick").await;
    assert_eq!(state.body["fires"], 0);
    server.stop().await;
}
