//! `rdq source …` and `[[sources]]` in `rdq serve`, end to end: a bad
//! source is refused before anything starts, naming it; a source whose
//! broker cannot be reached shows its error in `rdq source status` while
//! the server keeps serving; `rdq source run` runs until a signal; and
//! `rdq source reset` removes cursors through a server or on a store.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::{rdq, stderr, stdout};
use serde_json::Value;

/// A source whose queue name is not one: refused in every build.
const BAD_SOURCE: &str = r#"
[[sources]]
name = "orders"
queue = "Not A Queue"
handler = "order.created"
[sources.kafka]
brokers = "127.0.0.1:1"
topic = "orders"
"#;

#[test]
fn a_bad_source_is_refused_by_serve_and_by_source_run_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sources.toml");
    std::fs::write(&file, BAD_SOURCE).unwrap();
    let f = file.to_str().unwrap();
    let store = dir.path().join("data");
    let st = store.to_str().unwrap();
    for args in [
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            st,
            "--config",
            f,
        ][..],
        &["source", "run", "--config", f, "--store", st][..],
    ] {
        let out = rdq(args);
        assert!(!out.status.success(), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains("INVALID_CONFIG: "), "{args:?}: {err}");
        assert!(
            err.contains("source orders") && err.contains("Not A Queue"),
            "{args:?}: {err}"
        );
    }
    assert!(!store.exists(), "nothing was opened");

    // A file without sources has nothing to run; a missing file is an I/O error.
    std::fs::write(&file, "store = \"memory:\"\n").unwrap();
    let empty = rdq(&["source", "run", "--config", f]);
    assert!(!empty.status.success());
    assert!(
        stderr(&empty).starts_with("INVALID_CONFIG: ") && stderr(&empty).contains("[[sources]]"),
        "{}",
        stderr(&empty)
    );
    let missing = rdq(&["source", "run", "--config", "/nonexistent/rdq.toml"]);
    assert!(
        stderr(&missing).starts_with("IO_ERROR: "),
        "{}",
        stderr(&missing)
    );
    // An unknown field of a source is refused by name.
    std::fs::write(
        &file,
        "[[sources]]\nname = \"s\"\nqueue = \"q\"\nhandler = \"h\"\nbrokerz = \"x\"\n",
    )
    .unwrap();
    let unknown = rdq(&["source", "run", "--config", f, "--store", "memory:"]);
    assert!(
        stderr(&unknown).starts_with("INVALID_CONFIG: ") && stderr(&unknown).contains("brokerz"),
        "{}",
        stderr(&unknown)
    );
}

#[test]
fn status_needs_a_server_and_reset_works_on_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let st = store.to_str().unwrap();
    let status = rdq(&["source", "status", "--store", st]);
    assert!(!status.status.success());
    assert!(
        stderr(&status).starts_with("UNSUPPORTED: ") && stderr(&status).contains("--server"),
        "{}",
        stderr(&status)
    );
    let reset = rdq(&["source", "reset", "orders", "--store", st, "--json"]);
    assert!(reset.status.success(), "{}", stderr(&reset));
    let body: Value = serde_json::from_slice(&reset.stdout).unwrap();
    assert_eq!(body["name"], "orders");
    assert_eq!(body["deleted"], 0);
    let bad = rdq(&["source", "reset", "Orders!", "--store", st]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).starts_with("INVALID_ARGUMENT: "),
        "{}",
        stderr(&bad)
    );
}

/// A Kafka source whose broker does not answer (`127.0.0.1:1`).
#[cfg(feature = "kafka")]
const UNREACHABLE_KAFKA: &str = r#"
shutdown_grace_ms = 5000
[[sources]]
name = "orders"
queue = "orders"
handler = "order.created"
retry_ms = 200
[sources.kafka]
brokers = "127.0.0.1:1"
topic = "orders"
"#;

#[cfg(feature = "kafka")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_broker_shows_in_the_status_while_the_server_serves() {
    use std::time::{Duration, Instant};

    use common::{Api, RdqServer};

    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), UNREACHABLE_KAFKA, &[]);
    let s = server.base.as_str();

    let table = rdq(&["source", "status", "--server", s]);
    assert!(table.status.success(), "{}", stderr(&table));
    let text = stdout(&table);
    for column in [
        "NAME",
        "KIND",
        "QUEUE",
        "STATE",
        "LAG",
        "RATE",
        "INGESTED",
        "DEAD",
        "LAST ERROR",
    ] {
        assert!(text.contains(column), "{column}: {text}");
    }
    assert!(text.contains("orders") && text.contains("kafka"), "{text}");

    // librdkafka gives up on the broker after its metadata timeout.
    let deadline = Instant::now() + Duration::from_secs(40);
    let status = loop {
        let out = rdq(&["source", "status", "orders", "--server", s, "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let status: Value = serde_json::from_slice(&out.stdout).unwrap();
        if status["last_error"].is_string() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "no error within 40 s: {status}\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(status["kind"], "kafka");
    assert_eq!(status["queue"], "orders");
    assert!(
        ["starting", "retrying"].contains(&status["state"].as_str().unwrap()),
        "{status}"
    );
    assert!(
        status["last_error"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1:1"),
        "{status}"
    );

    // The server keeps serving.
    let api = Api::new(s);
    let id = api.submit("jobs", serde_json::json!({"n": 1})).await;
    assert_eq!(api.task(&id).await["status"], "PENDING");
    let metrics = reqwest::get(format!("{s}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("rdq_source_up{source=\"orders\",kind=\"kafka\"} 0"),
        "{metrics}"
    );

    let shown = rdq(&["source", "status", "orders", "--server", s]);
    let text = stdout(&shown);
    assert!(
        text.contains("last error") && text.contains("127.0.0.1:1"),
        "{text}"
    );
    let missing = rdq(&["source", "status", "nope", "--server", s]);
    assert!(
        stderr(&missing).starts_with("SOURCE_NOT_FOUND: "),
        "{}",
        stderr(&missing)
    );
    let reset = rdq(&["source", "reset", "orders", "--server", s]);
    assert!(reset.status.success(), "{}", stderr(&reset));
    assert!(
        stdout(&reset).starts_with("deleted 0 cursors of source orders"),
        "{}",
        stdout(&reset)
    );
    assert!(
        server
            .wait_for_log("source.reset")
            .contains("\"queue\":\"orders\"")
    );
    assert!(server.terminate());
}

#[cfg(feature = "kafka")]
#[test]
fn source_run_logs_status_changes_and_stops_on_a_signal() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sources.toml");
    std::fs::write(&file, UNREACHABLE_KAFKA).unwrap();
    let mut child = Command::new(common::RDQ)
        .args(["source", "run", "--config"])
        .arg(&file)
        .args(["--store", "memory:"])
        .env_remove("RDQ_STORE")
        .env_remove("RDQ_CONFIG")
        .env("RDQ_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let mut log = String::new();
    while !log.contains("source orders: starting") {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) => {
                log.push_str(&line);
                log.push('\n');
            }
            Err(_) => {
                let _ = child.kill();
                panic!("no status line within 20 s:\n{log}");
            }
        }
    }
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(1)) {
        log.push_str(&line);
        log.push('\n');
    }
    assert!(status.success(), "{log}");
    assert!(log.contains("source orders: stopped"), "{log}");
    assert!(log.contains("rdq source run stopped"), "{log}");
}
