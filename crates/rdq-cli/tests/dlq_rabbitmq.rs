//! `rdq dlq … --store amqp://…` end to end: the real binary reading and
//! redriving a dead-letter queue on the local RabbitMQ (each run in a
//! namespace of its own, every queue deleted afterwards).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::process::{Command, Output};
use std::sync::Arc;

use rdq_engine::{Backoff, Engine, QueuePolicy, Settlement, SubmitRequest, SystemClock};
use rdq_envelope::{ErrorInfo, Status, TaskId};
use rdq_store_rabbitmq::RabbitStore;
use serde_json::Value;

fn rdq(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdq"))
        .args(args)
        .env_remove("RDQ_STORE")
        .env_remove("RDQ_SERVER")
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The dead tasks' ids a `dlq list --json` printed.
fn listed(out: &Output) -> Vec<String> {
    let page = json(out);
    let items = page["items"]
        .as_array()
        .or_else(|| page.as_array())
        .cloned()
        .unwrap_or_default();
    items
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_dlq_commands_work_on_a_rabbitmq_store() {
    let base = std::env::var("RDQ_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let namespace = format!(
        "rdq-cli-test.{}.",
        TaskId::generate().to_string().to_lowercase()
    );
    let url = format!("{base}?namespace={namespace}");
    let queue = "mail";
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = RabbitStore::from_url(&url).unwrap();
    let engine = Engine::new(Arc::new(store.clone()), Arc::new(SystemClock)).with_fallback_policy(
        QueuePolicy {
            max_attempts: 1,
            backoff: Backoff::None,
            ..QueuePolicy::default()
        },
    );

    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // Two tasks die: one permanent failure each.
        let dead: Vec<String> = runtime.block_on(async {
            let mut ids = Vec::new();
            for n in 0..2 {
                engine
                    .submit(SubmitRequest {
                        queue: queue.to_owned(),
                        handler_ref: "mail.send".to_owned(),
                        payload: format!(r#"{{"n":{n}}}"#).into_bytes(),
                        payload_content_type: "application/json".to_owned(),
                        ..SubmitRequest::default()
                    })
                    .await
                    .unwrap();
            }
            let mut claimed = Vec::new();
            for _ in 0..100 {
                claimed.extend(engine.claim(queue, 2, None).await.unwrap());
                if claimed.len() == 2 {
                    break;
                }
            }
            assert_eq!(claimed.len(), 2);
            for c in claimed {
                let settled = engine
                    .settle(
                        &c.envelope,
                        c.token,
                        Settlement::Failure {
                            error: ErrorInfo::new("mail.Bounced", "no such mailbox"),
                            kind: rdq_engine::FailureKind::Permanent,
                        },
                    )
                    .await
                    .unwrap();
                assert_eq!(settled.status, Status::Dead);
                ids.push(settled.id.to_string());
            }
            ids.sort();
            ids
        });

        // list sees both; the listing leaves them in place.
        let out = rdq(&["dlq", "list", queue, "--store", &url, "--json"]);
        let mut ids = listed(&out);
        ids.sort();
        assert_eq!(ids, dead);
        let out = rdq(&["dlq", "list", queue, "--store", &url]);
        assert!(out.status.success(), "{}", stderr(&out));
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(table.contains("mail.Bounced") && table.contains("PERMANENT_FAILURE"));

        // Why they died, counted and filtered.
        let reasons = json(&rdq(&["dlq", "reasons", queue, "--store", &url, "--json"]));
        assert_eq!(
            reasons["reasons"],
            serde_json::json!([{"reason": "PERMANENT_FAILURE", "count": 2}])
        );
        let permanent = ["dlq", "list", queue, "--reason", "PERMANENT_FAILURE"];
        let out = rdq(&[&permanent[..], &["--store", &url, "--json"]].concat());
        assert_eq!(listed(&out).len(), 2);
        let cancelled = ["dlq", "list", queue, "--reason", "CANCELLED"];
        let out = rdq(&[&cancelled[..], &["--store", &url, "--json"]].concat());
        assert!(listed(&out).is_empty());
        let out = rdq(&["dlq", "list", queue, "--reason", "nope", "--store", &url]);
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("INVALID_ARGUMENT"),
            "{}",
            stderr(&out)
        );

        // Counts come from queue depths, for named queues: nothing ready,
        // two dead; in flight and succeeded are unknown to a broker.
        let rows = json(&rdq(&["queue", "list", queue, "--store", &url, "--json"]));
        assert_eq!(rows["queues"][0]["queue"], queue);
        assert_eq!(rows["queues"][0]["pending"], 0);
        assert_eq!(rows["queues"][0]["dead"], 2);
        assert!(rows["queues"][0]["in_flight"].is_null());
        let out = rdq(&["queue", "list", queue, "--store", &url]);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(" - "),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let out = rdq(&["queue", "list", "--store", &url]);
        assert!(stderr(&out).starts_with("UNSUPPORTED"), "{}", stderr(&out));
        assert!(stderr(&out).contains("name the queues"), "{}", stderr(&out));
        let out = rdq(&["queue", "list", "nowhere", "--store", &url]);
        assert!(
            stderr(&out).starts_with("QUEUE_NOT_FOUND"),
            "{}",
            stderr(&out)
        );

        // export writes one canonical envelope per line.
        let out = rdq(&["dlq", "export", queue, "--store", &url]);
        assert!(out.status.success(), "{}", stderr(&out));
        let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().all(|e| e["status"] == "DEAD"));

        // A dry run changes nothing; a redrive by id moves exactly one back.
        let out = rdq(&[
            "dlq",
            "redrive",
            queue,
            "--dry-run",
            "--store",
            &url,
            "--json",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            listed(&rdq(&["dlq", "list", queue, "--store", &url, "--json"])).len(),
            2
        );
        let out = rdq(&[
            "dlq", "redrive", queue, "--id", &dead[0], "--store", &url, "--json",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            listed(&rdq(&["dlq", "list", queue, "--store", &url, "--json"])),
            vec![dead[1].clone()]
        );
        // The redriven task is work again: attempts reset, history kept.
        let back = runtime.block_on(async {
            for _ in 0..100 {
                let c = engine.claim(queue, 1, None).await.unwrap();
                if !c.is_empty() {
                    return c;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Vec::new()
        });
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].envelope.id.to_string(), dead[0]);
        assert_eq!(back[0].envelope.redrive_count, 1);
        assert_eq!(back[0].envelope.attempt_count, 1);
        assert_eq!(back[0].envelope.attempts.len(), 2);

        // A broker cannot look a task up by id: `dlq show` is refused with a
        // stable code and a hint, and works when it names the queue.
        let out = rdq(&["dlq", "show", &dead[1], "--store", &url]);
        assert!(!out.status.success());
        assert!(stderr(&out).starts_with("UNSUPPORTED"), "{}", stderr(&out));
        assert!(stderr(&out).contains("--queue"), "{}", stderr(&out));
        let out = rdq(&[
            "dlq", "show", &dead[1], "--queue", queue, "--store", &url, "--json",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(shown["id"], dead[1].as_str());
        assert_eq!(shown["status"], "DEAD");
        assert_eq!(
            shown,
            lines
                .iter()
                .find(|l| l["id"] == dead[1].as_str())
                .unwrap()
                .clone()
        );
        let out = rdq(&["dlq", "show", &dead[1], "--queue", queue, "--store", &url]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains(&dead[1]));
        // The redriven task is no longer dead.
        let out = rdq(&["dlq", "show", &dead[0], "--queue", queue, "--store", &url]);
        assert!(
            stderr(&out).starts_with("TASK_NOT_FOUND"),
            "{}",
            stderr(&out)
        );

        // purge empties the dead-letter queue.
        let out = rdq(&["dlq", "purge", queue, "--store", &url, "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(listed(&rdq(&["dlq", "list", queue, "--store", &url, "--json"])).is_empty());
    }));

    runtime.block_on(async {
        let names = store.broker_names(queue).unwrap();
        let mut all = store.declared_queues();
        all.extend([names.work.clone(), names.dead.clone()]);
        all.sort();
        all.dedup();
        let _ = store.delete_broker_queues(&all).await;
    });
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
