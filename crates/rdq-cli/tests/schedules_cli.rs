//! `rdq schedule …` end to end, against a running `rdq serve` and straight
//! on a store, and the scheduler every `rdq serve` runs: a schedule put
//! through the CLI fires its tasks within seconds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use common::{Api, FAST_CONFIG, RdqServer, rdq, stderr, stdout};
use serde_json::Value;

fn json_of(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_put_on_a_running_server_fires_tasks_with_the_schedule_headers() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let s = server.base.as_str();
    let out = rdq(&[
        "schedule",
        "put",
        "tick",
        "--every",
        "1s",
        "--queue",
        "ticks",
        "--handler",
        "tick",
        "--payload",
        r#"{"n":1}"#,
        "--server",
        s,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("created schedule tick"),
        "{}",
        stdout(&out)
    );

    let api = Api::new(s);
    let mut items = Vec::new();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (_, page) = api.get("/v1/queues/ticks/tasks").await;
        items = page["items"].as_array().cloned().unwrap_or_default();
        if items.len() >= 2 {
            break;
        }
    }
    assert!(items.len() >= 2, "two fires within five seconds: {items:?}");
    for t in &items {
        assert_eq!(t["headers"]["rdq.schedule"], "tick");
        assert!(
            t["headers"]["rdq.schedule_due"]
                .as_str()
                .unwrap()
                .ends_with(".000Z")
        );
    }

    let list = rdq(&["schedule", "list", "--server", s]);
    let text = stdout(&list);
    assert!(text.contains("NAME") && text.contains("NEXT RUN"), "{text}");
    assert!(
        text.contains("tick") && text.contains("every 1000ms"),
        "{text}"
    );
    let shown = rdq(&["schedule", "show", "tick", "--server", s]);
    assert!(stdout(&shown).contains("next due:"), "{}", stdout(&shown));
    assert!(stdout(&shown).matches(".000Z").count() >= 5);

    let run = json_of(&rdq(&["schedule", "run", "tick", "--server", s, "--json"]));
    assert_eq!(run["headers"]["rdq.schedule_manual"], "true");
    let paused = json_of(&rdq(&[
        "schedule", "pause", "tick", "--server", s, "--json",
    ]));
    assert_eq!(paused["schedule"]["paused"], true);
    let resumed = rdq(&["schedule", "resume", "tick", "--server", s]);
    assert!(stdout(&resumed).starts_with("resumed schedule tick"));
    assert!(
        rdq(&["schedule", "delete", "tick", "--server", s])
            .status
            .success()
    );
    let gone = rdq(&["schedule", "show", "tick", "--server", s]);
    assert!(!gone.status.success());
    assert!(
        stderr(&gone).starts_with("SCHEDULE_NOT_FOUND"),
        "{}",
        stderr(&gone)
    );
    assert!(server.terminate());
}

#[test]
fn schedules_are_managed_straight_on_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let st = store.to_str().unwrap();
    let file = dir.path().join("nightly.json");
    std::fs::write(
        &file,
        r#"{"task": {"queue": "reports", "handler_ref": "build"}, "spec": {"cron": "30 2 * * *"},
            "tz": "America/New_York", "catch_up": {"all": {"max": 3, "window_ms": 3600000}}}"#,
    )
    .unwrap();
    let put = json_of(&rdq(&[
        "schedule",
        "put",
        "nightly",
        "--file",
        file.to_str().unwrap(),
        "--store",
        st,
        "--json",
    ]));
    assert_eq!(put["schedule"]["tz"], "America/New_York");
    assert_eq!(put["schedule"]["catch_up"]["all"]["max"], 3);

    let list = json_of(&rdq(&["schedule", "list", "--store", st, "--json"]));
    assert_eq!(list["schedules"][0]["name"], "nightly");
    let next = json_of(&rdq(&[
        "schedule", "next", "nightly", "--count", "3", "--store", st, "--json",
    ]));
    let due = next["due_ms"].as_array().unwrap();
    assert_eq!(due.len(), 3);
    assert!(
        (23 * 3_600_000..=25 * 3_600_000)
            .contains(&(due[1].as_i64().unwrap() - due[0].as_i64().unwrap()))
    );
    assert!(next["due"][0].as_str().unwrap().contains(":30:00.000Z"));

    // A bad schedule names its field and stores nothing.
    let bad = rdq(&[
        "schedule",
        "put",
        "broken",
        "--cron",
        "99 * * * *",
        "--queue",
        "q",
        "--handler",
        "h",
        "--store",
        st,
    ]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).starts_with("INVALID_CRON: spec.cron"),
        "{}",
        stderr(&bad)
    );
    let bad = rdq(&["schedule", "next", "nightly", "--count", "0", "--store", st]);
    assert!(
        stderr(&bad).starts_with("INVALID_FIELD"),
        "{}",
        stderr(&bad)
    );

    let run = json_of(&rdq(&[
        "schedule", "run", "nightly", "--store", st, "--json",
    ]));
    assert_eq!(run["headers"]["rdq.schedule"], "nightly");
    assert!(
        rdq(&["schedule", "delete", "nightly", "--store", st])
            .status
            .success()
    );
    let list = json_of(&rdq(&["schedule", "list", "--store", st, "--json"]));
    assert_eq!(list["schedules"], serde_json::json!([]));
}
