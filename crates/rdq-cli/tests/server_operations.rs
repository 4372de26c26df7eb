//! `rdq serve` and the operator CLI end to end: starting rules, a pull
//! worker that crashes, redrive from the CLI, export → purge → import byte
//! for byte, and the same operations straight on a store.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use common::{Api, FAST_CONFIG, RDQ, RdqServer, rdq, rdq_env, stderr, stdout};
use serde_json::{Value, json};

#[test]
fn serve_refuses_a_network_address_without_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(RDQ)
        .args(["serve", "--listen", "0.0.0.0:0", "--store"])
        .arg(dir.path().join("data"))
        .env_remove("RDQ_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("INSECURE_CONFIG: "),
        "{}",
        stderr(&out)
    );
    // Nothing was created: the store is not touched before the check.
    assert!(!dir.path().join("data").exists());
}

#[test]
fn serve_reads_listen_and_store_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(RDQ)
        .arg("serve")
        .env("RDQ_LISTEN", "10.1.2.3:7480")
        .env("RDQ_STORE", dir.path().join("data"))
        .env_remove("RDQ_CONFIG")
        .output()
        .unwrap();
    assert!(
        stderr(&out).starts_with("INSECURE_CONFIG: "),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("10.1.2.3:7480"));
    let out = std::process::Command::new(RDQ)
        .arg("serve")
        .env("RDQ_CONFIG", dir.path().join("missing.toml"))
        .output()
        .unwrap();
    assert!(stderr(&out).starts_with("IO_ERROR: "), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_loopback_server_says_so_in_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    assert!(server.base.starts_with("http://127.0.0.1:"));
    assert!(
        server.log().contains("no tokens configured"),
        "{}",
        server.log()
    );
    assert!(dir.path().join("data").join("rdq.db").exists());
    assert!(server.terminate());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_pull_worker_loses_its_lease_and_its_late_settle_gets_409() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let api = Api::new(&server.base);
    api.configure("pull", json!({"backoff": {"kind": "none"}}))
        .await;
    let id = api.submit("pull", json!({"n": 1})).await;
    let (_, claimed) = api
        .post("/v1/queues/pull/claim", json!({"max": 64, "lease_ms": 200}))
        .await;
    let crashed = claimed["tasks"][0].clone();
    assert_eq!(crashed["id"], id.as_str());
    // The worker dies here. The lease lapses and the reaper records it.
    let mut again = Value::Null;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(30)).await;
        let (_, c) = api
            .post(
                "/v1/queues/pull/claim",
                json!({"max": 64, "lease_ms": 30000}),
            )
            .await;
        if let Some(t) = c["tasks"].get(0) {
            again = t.clone();
            break;
        }
    }
    assert_eq!(again["id"], id.as_str(), "the task is claimable again");
    assert_eq!(again["envelope"]["attempts"][0]["outcome"], "LEASE_EXPIRED");
    assert_eq!(
        again["envelope"]["attempts"][0]["error"]["type"],
        "rdq.LeaseExpired"
    );
    let before = api.task(&id).await;
    let (status, problem) = api
        .post(
            &format!("/v1/tasks/{id}/settle"),
            json!({"lease_token": crashed["lease_token"], "outcome": "SUCCESS"}),
        )
        .await;
    assert_eq!(status, 409);
    assert_eq!(problem["code"], "LEASE_LOST");
    assert_eq!(
        api.task(&id).await,
        before,
        "the stale settle changed nothing"
    );
    // The live worker settles in a batch.
    let (status, results) = api
        .post(
            "/v1/settle",
            json!({"settles": [{"id": id, "lease_token": again["lease_token"], "outcome": "SUCCESS"}]}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(results["results"][0]["envelope"]["status"], "SUCCEEDED");
    let metrics = reqwest::get(format!("{}/metrics", server.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("rdq_lease_expiries_total{queue=\"pull\"} 1"),
        "{metrics}"
    );
    server.terminate();
}

/// Dead-letters `n` tasks of `queue` through the pull API.
async fn kill_tasks(api: &Api, queue: &str, n: usize, error_type: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(api.submit(queue, json!({"i": i})).await);
    }
    let (_, claimed) = api
        .post(&format!("/v1/queues/{queue}/claim"), json!({"max": n}))
        .await;
    let settles: Vec<Value> = claimed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            json!({"id": t["id"], "lease_token": t["lease_token"], "outcome": "PERMANENT_FAILURE",
                   "error": {"type": error_type, "message": "failed on purpose"}})
        })
        .collect();
    let (status, _) = api.post("/v1/settle", json!({ "settles": settles })).await;
    assert_eq!(status, 200);
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_shows_and_redrives_the_dlq() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let api = Api::new(&server.base);
    let http = kill_tasks(&api, "orders", 3, "http.Status503").await;
    let billing = kill_tasks(&api, "orders", 2, "billing.Declined").await;
    let s = server.base.as_str();

    let out = rdq(&["queue", "list", "--server", s]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(table.starts_with("QUEUE"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("orders") && l.trim_end().ends_with('5')),
        "{table}"
    );

    let out = rdq(&[
        "dlq",
        "list",
        "orders",
        "--error-type",
        "billing.*",
        "--server",
        s,
        "--json",
    ]);
    let page: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(page["items"].as_array().unwrap().len(), 2);

    let out = rdq(&["dlq", "show", &billing[0], "--server", s]);
    let text = stdout(&out);
    assert!(text.contains("attempt history"), "{text}");
    assert!(text.contains("PERMANENT_FAILURE"));
    assert!(text.contains("billing.Declined: failed on purpose"));

    let out = rdq(&[
        "dlq",
        "redrive",
        "orders",
        "--error-type",
        "http.*",
        "--dry-run",
        "--server",
        s,
        "--json",
    ]);
    let dry: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(dry["count"], 3);
    assert_eq!(api.task(&http[0]).await["status"], "DEAD");

    let out = rdq(&[
        "dlq",
        "redrive",
        "orders",
        "--error-type",
        "http.*",
        "--limit",
        "2",
        "--server",
        s,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "redrove 2 dead task(s) of orders");
    let out = rdq(&[
        "dlq",
        "redrive",
        "orders",
        "--id",
        &billing[1],
        "--server",
        s,
    ]);
    assert_eq!(stdout(&out).trim(), "redrove 1 dead task(s) of orders");
    let env = api.task(&billing[1]).await;
    assert_eq!(env["status"], "PENDING");
    assert_eq!(env["redrive_count"], 1);
    let (_, queues) = api.get("/v1/queues").await;
    assert_eq!(queues["queues"][0]["dead"], 2);
    assert_eq!(queues["queues"][0]["pending"], 3);

    let out = rdq(&["dlq", "list", "nope", "--server", s]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("QUEUE_NOT_FOUND: "),
        "{}",
        stderr(&out)
    );
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_purge_import_through_the_cli_restores_the_same_envelopes_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let api = Api::new(&server.base);
    let ids = kill_tasks(&api, "exp", 40, "x.Broken").await;
    let s = server.base.as_str();
    let mut before = Vec::new();
    for id in &ids {
        let (_, env) = api.get(&format!("/v1/tasks/{id}")).await;
        before.push(env);
    }
    let file = dir.path().join("dead.jsonl");
    let out = rdq(&[
        "dlq",
        "export",
        "exp",
        "-o",
        file.to_str().unwrap(),
        "--server",
        s,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let exported = std::fs::read(&file).unwrap();
    assert_eq!(exported.iter().filter(|&&b| b == b'\n').count(), 40);

    let out = rdq(&["dlq", "purge", "exp", "--dry-run", "--server", s]);
    assert!(stdout(&out).contains("40 dead task(s) of exp would be purged"));
    let out = rdq(&["dlq", "purge", "exp", "--server", s]);
    assert_eq!(stdout(&out).trim(), "purged 40 dead task(s) of exp");
    let (status, _) = api.get(&format!("/v1/tasks/{}", ids[0])).await;
    assert_eq!(status, 404);

    let out = rdq(&["dlq", "import", file.to_str().unwrap(), "--server", s]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "imported 40 envelope(s) into the DLQ of exp"
    );
    for (id, env) in ids.iter().zip(&before) {
        assert_eq!(&api.task(id).await, env);
    }
    // Exporting again gives the same bytes.
    let again = dir.path().join("again.jsonl");
    rdq(&[
        "dlq",
        "export",
        "exp",
        "-o",
        again.to_str().unwrap(),
        "--server",
        s,
    ]);
    assert_eq!(std::fs::read(&again).unwrap(), exported);
    // And to standard output.
    let out = rdq(&["dlq", "export", "exp", "--server", s]);
    assert_eq!(out.stdout, exported);

    // Importing again: every line exists, nothing imported, lines reported.
    let out = rdq(&["dlq", "import", file.to_str().unwrap(), "--server", s]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.starts_with("line 1: TASK_EXISTS: "), "{err}");
    assert!(
        err.lines()
            .last()
            .unwrap()
            .starts_with("INVALID_IMPORT: 40 line(s)"),
        "{err}"
    );
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_config_and_submit_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let base = server.base.clone();
    let s = base.as_str();
    let out = rdq_env(
        &[
            "submit",
            "--queue",
            "emails",
            "--handler",
            "send-email",
            "--payload-json",
            r#"{"to":"a@b.c"}"#,
            "--header",
            "tenant=acme",
            "--priority",
            "3",
            "--json",
        ],
        &[("RDQ_SERVER", s)],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let env: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(env["priority"], 3);
    assert_eq!(env["headers"]["tenant"], "acme");
    let out = rdq(&["task", "show", env["id"].as_str().unwrap(), "--server", s]);
    assert!(
        stdout(&out).contains(r#"payload       {"to":"a@b.c"}"#),
        "{}",
        stdout(&out)
    );

    let out = rdq(&[
        "queue",
        "config",
        "emails",
        "--set",
        "max_attempts=4",
        "--set",
        "backoff={\"kind\":\"fixed\",\"delay_ms\":250}",
        "--server",
        s,
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let policy: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(policy["max_attempts"], 4);
    assert_eq!(policy["backoff"]["delay_ms"], 250);
    let out = rdq(&[
        "queue",
        "config",
        "emails",
        "--set",
        "max_attempts=0",
        "--server",
        s,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("INVALID_POLICY: "),
        "{}",
        stderr(&out)
    );
    let out = rdq(&["queue", "config", "emails", "--server", s, "--json"]);
    let policy: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(policy["max_attempts"], 4);

    let out = rdq(&["submit", "--queue", "Bad", "--handler", "h", "--server", s]);
    assert!(
        stderr(&out).starts_with("INVALID_QUEUE_NAME: "),
        "{}",
        stderr(&out)
    );
    let out = rdq(&[
        "submit",
        "--queue",
        "q",
        "--handler",
        "h",
        "--header",
        "rdq.source=x",
        "--server",
        s,
    ]);
    assert!(
        stderr(&out).starts_with("RESERVED_HEADER: "),
        "{}",
        stderr(&out)
    );
    server.terminate();
    // Not the stopped server's port: tests run in parallel, and another
    // test's server may take a freed port at once. Nothing listens on port
    // 1, and no test can bind it.
    let out = rdq(&["queue", "list", "--server", "http://127.0.0.1:1"]);
    assert!(
        stderr(&out).starts_with("SERVER_UNREACHABLE: "),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_keys_flow_status_and_throttles_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start_on(dir.path(), FAST_CONFIG, "memory:", &[]);
    let base = server.base.clone();
    let s = base.as_str();
    let out = rdq(&[
        "queue",
        "config",
        "flows",
        "--set",
        "flow.key_concurrency=2",
        "--server",
        s,
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = rdq(&[
        "submit",
        "--queue",
        "flows",
        "--handler",
        "h",
        "--flow-key",
        "tenant-a",
        "--server",
        s,
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let env: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(env["headers"]["rdq.flow_key"], "tenant-a");
    let out = rdq(&[
        "submit",
        "--queue",
        "flows",
        "--handler",
        "h",
        "--flow-key",
        "bad key",
        "--server",
        s,
    ]);
    assert!(
        stderr(&out).starts_with("INVALID_FIELD: flow_key"),
        "{}",
        stderr(&out)
    );

    let out = rdq(&[
        "queue", "throttle", "flows", "--key", "tenant-a", "--for", "30s", "--server", s, "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let flow: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(flow["keys"][0]["key"], "tenant-a");
    assert!(flow["keys"][0]["blocked_until"].is_string(), "{flow}");
    let out = rdq(&[
        "queue",
        "throttle",
        "flows",
        "--until",
        "2999-01-01T00:00:00Z",
        "--server",
        s,
    ]);
    assert!(
        stderr(&out).starts_with("INVALID_FIELD: until"),
        "{}",
        stderr(&out)
    );
    for (args, code) in [
        (&["--for", "10x"][..], "INVALID_ARGUMENT: "),
        (
            &["--for", "1s", "--key", "bad key"][..],
            "INVALID_FIELD: flow_key",
        ),
        (&["--for", "8d"][..], "INVALID_FIELD: for_ms"),
    ] {
        let mut all = vec!["queue", "throttle", "flows", "--server", s];
        all.extend_from_slice(args);
        let out = rdq(&all);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(stderr(&out).starts_with(code), "{args:?}: {}", stderr(&out));
    }
    // Neither --for nor --until: a usage error.
    let out = rdq(&["queue", "throttle", "flows", "--server", s]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    let out = rdq(&["queue", "flow", "flows", "--server", s]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("FLOW KEY"), "{text}");
    assert!(text.contains("tenant-a"), "{text}");
    assert!(
        text.contains(r#"limits:           {"key_concurrency":2}"#),
        "{text}"
    );
    let out = rdq(&["queue", "flow", "flows", "--server", s, "--json"]);
    let flow: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(flow["limits"]["key_concurrency"], 2);
    server.terminate();
}

#[test]
fn the_operator_cli_works_straight_on_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let st = store.to_str().unwrap();
    let out = rdq(&[
        "submit",
        "--queue",
        "local",
        "--handler",
        "h",
        "--payload-json",
        "1",
        "--store",
        st,
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = rdq_env(&["queue", "list", "--json"], &[("RDQ_STORE", st)]);
    let queues: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(queues["queues"][0]["pending"], 1);
    // Named queues: only those, and a missing one is an error.
    let out = rdq(&["queue", "list", "local", "--store", st, "--json"]);
    let named: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(named["queues"], queues["queues"]);
    let out = rdq(&["queue", "list", "local", "nope", "--store", st]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).starts_with("QUEUE_NOT_FOUND"),
        "{}",
        stderr(&out)
    );
    let out = rdq(&["task", "show", &id, "--store", st, "--json"]);
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"],
        id.as_str()
    );
    let out = rdq(&[
        "queue",
        "config",
        "local",
        "--set",
        "paused=true",
        "--store",
        st,
        "--json",
    ]);
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["paused"],
        true
    );
    let out = rdq(&[
        "queue",
        "config",
        "local",
        "--set",
        "callback.url=http://127.0.0.1:9/x",
        "--set",
        "callback.timeout_ms=0",
        "--store",
        st,
    ]);
    assert!(
        stderr(&out).starts_with("INVALID_POLICY: callback.timeout_ms"),
        "{}",
        stderr(&out)
    );
    let out = rdq(&["dlq", "list", "local", "--store", st]);
    assert!(
        stdout(&out).contains("the DLQ of local is empty"),
        "{}",
        stdout(&out)
    );
    let out = rdq(&["dlq", "purge", "local", "--store", st, "--json"]);
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["purged"],
        0
    );
    let out = rdq(&["dlq", "redrive", "local", "--store", st]);
    assert_eq!(stdout(&out).trim(), "redrove 0 dead task(s) of local");
    let out = rdq(&["task", "show", "01J2ZK7Q8XW5H3N9G4T6B8RDQ0", "--store", st]);
    assert!(
        stderr(&out).starts_with("TASK_NOT_FOUND: "),
        "{}",
        stderr(&out)
    );
    let out = rdq(&[
        "queue",
        "list",
        "--store",
        st,
        "--server",
        "http://127.0.0.1:1",
    ]);
    assert_eq!(out.status.code(), Some(2), "--store and --server conflict");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_mode_export_and_import_round_trip_a_dlq_made_by_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let api = Api::new(&server.base);
    kill_tasks(&api, "offline", 5, "x").await;
    let file = dir.path().join("server.jsonl");
    rdq(&[
        "dlq",
        "export",
        "offline",
        "-o",
        file.to_str().unwrap(),
        "--server",
        &server.base,
    ]);
    assert!(server.terminate());

    let store = dir.path().join("data");
    let st = store.to_str().unwrap();
    let out = rdq(&["dlq", "purge", "offline", "--store", st]);
    assert_eq!(stdout(&out).trim(), "purged 5 dead task(s) of offline");
    let out = rdq(&[
        "dlq",
        "import",
        file.to_str().unwrap(),
        "--dry-run",
        "--store",
        st,
    ]);
    assert!(
        stdout(&out).contains("5 envelope(s) can be imported"),
        "{}",
        stdout(&out)
    );
    let out = rdq(&["dlq", "import", file.to_str().unwrap(), "--store", st]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = rdq(&["dlq", "export", "offline", "--store", st]);
    assert_eq!(out.stdout, std::fs::read(&file).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_the_cli_authenticates_from_rdq_token_and_tokens_are_never_logged() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{FAST_CONFIG}\n[[tokens]]\nname = \"ops\"\ntoken = \"ops-secret-token-0042\"\nscopes = [\"admin\"]\n\
         [[tokens]]\nname = \"checkout\"\ntoken = \"checkout-secret-0042\"\nscopes = [\"submit\"]\nqueues = [\"pay.*\"]\n"
    );
    let server = RdqServer::start(dir.path(), &config, &[]);
    let s = server.base.clone();
    let out = rdq(&["queue", "list", "--server", &s]);
    assert!(
        stderr(&out).starts_with("UNAUTHENTICATED: "),
        "{}",
        stderr(&out)
    );
    let out = rdq_env(
        &[
            "submit",
            "--queue",
            "pay.in",
            "--handler",
            "h",
            "--server",
            &s,
            "--json",
        ],
        &[("RDQ_TOKEN", "checkout-secret-0042")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let env: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(env["headers"]["rdq.submitted_by"], "checkout");
    let out = rdq_env(
        &["dlq", "purge", "pay.in", "--server", &s],
        &[("RDQ_TOKEN", "checkout-secret-0042")],
    );
    assert!(stderr(&out).starts_with("FORBIDDEN: "), "{}", stderr(&out));
    let out = rdq_env(
        &["dlq", "purge", "pay.in", "--server", &s],
        &[("RDQ_TOKEN", "ops-secret-token-0042")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let log = server.wait_for_log("\"who\":\"ops\"");
    assert!(!log.contains("no tokens configured"));
    assert!(log.contains("\"who\":\"ops\""), "{log}");
    assert!(
        !log.contains("secret-token") && !log.contains("checkout-secret"),
        "{log}"
    );
    assert!(server.terminate());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_tasks_are_cancelled_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let s = server.base.clone();
    let s = s.as_str();
    let mut ids = Vec::new();
    for tenant in ["acme", "acme", "globex"] {
        let header = format!("tenant={tenant}");
        let out = rdq(&[
            "submit",
            "--queue",
            "reports",
            "--handler",
            "build",
            "--header",
            &header,
            "--server",
            s,
            "--json",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let env: Value = serde_json::from_slice(&out.stdout).unwrap();
        ids.push(env["id"].as_str().unwrap().to_owned());
    }
    let acme = ["task", "cancel", "reports", "--header", "tenant=acme"];
    let out = rdq(&[&acme[..], &["--dry-run", "--server", s, "--json"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let dry: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(dry["count"], 2);
    assert_eq!(dry["ids"], serde_json::json!([ids[0], ids[1]]));
    let out = rdq(&[
        &acme[..],
        &["--message", "tenant offboarded", "--server", s],
    ]
    .concat());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "cancelled 2 PENDING task(s) of reports"
    );
    let out = rdq(&["task", "cancel", "reports", "--id", &ids[0], "--server", s]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("INVALID_TRANSITION: "),
        "{}",
        stderr(&out)
    );
    let out = rdq(&[
        "task", "cancel", "reports", "--header", "tenant", "--server", s,
    ]);
    assert!(
        stderr(&out).starts_with("INVALID_ARGUMENT: "),
        "{}",
        stderr(&out)
    );
    let pending = ["task", "list", "reports", "--status", "PENDING"];
    let out = rdq(&[&pending[..], &["--server", s, "--json"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let page: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert_eq!(page["items"][0]["id"], ids[2].as_str());
    let out = rdq(&[
        "task",
        "list",
        "reports",
        "--header",
        "tenant=acme",
        "--server",
        s,
    ]);
    assert_eq!(stdout(&out).matches("DEAD").count(), 2, "{}", stdout(&out));
    let out = rdq(&["dlq", "reasons", "reports", "--server", s, "--json"]);
    let reasons: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        reasons["reasons"],
        serde_json::json!([{"reason": "CANCELLED", "count": 2}])
    );
    server.terminate();
}

/// `rdq submit --unique-key …` (docs/uniqueness.md): through a server and
/// straight on a store, a second submit of a held key is refused with
/// `UNIQUE_HELD` naming the holder; a key derived from the payload; a
/// waiting holder replaced; bad input refused with its field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_submits_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start_on(dir.path(), FAST_CONFIG, "memory:", &[]);
    let store = format!("{}", dir.path().join("direct").display());
    let server_target = ["--server", server.base.as_str()];
    let store_target = ["--store", store.as_str()];
    for target in [&server_target[..], &store_target[..]] {
        let submit = |extra: &[&str]| {
            let mut args = vec![
                "submit",
                "--queue",
                "billing",
                "--handler",
                "charge",
                "--payload-json",
                r#"{"customer_id":42,"month":"2026-12"}"#,
                "--json",
            ];
            args.extend_from_slice(extra);
            args.extend_from_slice(target);
            rdq(&args)
        };
        let out = submit(&["--unique-key", "c42"]);
        assert!(out.status.success(), "{target:?}: {}", stderr(&out));
        let holder: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(holder["headers"]["rdq.unique_key"], "c42");
        assert_eq!(holder["headers"]["rdq.unique_hold"], "until_finished");
        let out = submit(&["--unique-key", "c42"]);
        assert_eq!(out.status.code(), Some(1), "{target:?}");
        let err = stderr(&out);
        assert!(err.starts_with("UNIQUE_HELD: "), "{target:?}: {err}");
        assert!(
            err.contains(holder["id"].as_str().unwrap()),
            "{target:?}: the holder is named: {err}"
        );

        let out = submit(&[
            "--unique-key-from",
            "/customer_id",
            "--unique-key-from",
            "/month",
            "--unique-hold",
            "forever",
        ]);
        assert!(out.status.success(), "{target:?}: {}", stderr(&out));
        let derived: Value = serde_json::from_slice(&out.stdout).unwrap();
        let key = derived["headers"]["rdq.unique_key"].as_str().unwrap();
        assert!(key.starts_with("sha256:"), "{key}");
        let out = submit(&[
            "--unique-key-from",
            "/customer_id",
            "--unique-key-from",
            "/month",
            "--unique-on-conflict",
            "replace",
        ]);
        assert!(out.status.success(), "{target:?}: {}", stderr(&out));
        let replaced: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(replaced["id"], derived["id"], "replace answers the holder");

        for (extra, code) in [
            (
                &["--unique-key-from", "/nope"][..],
                "INVALID_ARGUMENT: unique.key_from",
            ),
            (
                &["--unique-key", "k", "--unique-hold", "for"][..],
                "INVALID_ARGUMENT: unique.hold_ms",
            ),
            (
                &["--unique-key", "k", "--unique-hold", "sometimes"][..],
                "INVALID_ARGUMENT: unique.hold",
            ),
        ] {
            let out = submit(extra);
            assert_eq!(out.status.code(), Some(1), "{target:?} {extra:?}");
            assert!(
                stderr(&out).starts_with(code),
                "{target:?} {extra:?}: {}",
                stderr(&out)
            );
        }
    }
}
