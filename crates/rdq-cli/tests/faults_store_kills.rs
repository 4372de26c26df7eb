//! Kills of a store's own server under load (docs/reliability.md): `rdq
//! serve` keeps running while its Redis (`appendfsync always`), its
//! PostgreSQL cluster or its RabbitMQ broker is killed with SIGKILL and started again, with
//! submitting threads and a pull worker riding out the errors. The server
//! must come back by itself (no restart of `rdq serve`), every submit it
//! acknowledged must be there and every settle it acknowledged must have
//! left its task SUCCEEDED.
//!
//! `RDQ_FAULT_CYCLES` sets the number of kills per store (default 3).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::faults::{
    Load, Postgres, RabbitMq, Redis, Service, assert_nothing_lost, assert_nothing_lost_by_draining,
};
use common::{FAST_CONFIG, RdqServer, closed_port};

const QUEUE: &str = "kills";
const SUBMITTERS: usize = 3;
/// Acknowledged submits between two kills.
const BETWEEN_KILLS: usize = 300;
/// How long the store stays dead.
const DOWN: Duration = Duration::from_millis(500);

fn cycles() -> usize {
    std::env::var("RDQ_FAULT_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// Waits until `load` has `target` acknowledged submits; answers how long.
fn until_submitted(load: &Load, target: usize, what: &str, server: &RdqServer) -> Duration {
    let started = Instant::now();
    while load.submitted() < target {
        if started.elapsed() > Duration::from_secs(60) {
            let log = server.log();
            let tail = &log[log.len().saturating_sub(6000)..];
            panic!(
                "{what}: {} of {target} submits acknowledged after 60 s; the server logged:\n{tail}",
                load.submitted()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    started.elapsed()
}

/// How a test reads back what was acknowledged.
#[derive(Clone, Copy)]
enum Check {
    /// Every task by id.
    ById,
    /// By draining the queue (a store that finds no task by id).
    ByDraining,
}

/// `policy`: a field of the queue's policy to set first (`KEY=VALUE`).
fn kills(dir: &Path, service: &mut dyn Service, check: Check, policy: Option<&str>) {
    let store = service.start();
    let server = RdqServer::start_on(dir, FAST_CONFIG, &store, &[]);
    if let Some(policy) = policy {
        let put = common::rdq(&[
            "queue",
            "config",
            QUEUE,
            "--set",
            policy,
            "--server",
            &server.base,
        ]);
        assert!(put.status.success(), "{}", common::stderr(&put));
    }
    let load = Load::enduring(&server.base, QUEUE, SUBMITTERS);
    until_submitted(&load, BETWEEN_KILLS, "before the first kill", &server);
    let mut recoveries = Vec::new();
    for cycle in 0..cycles() {
        service.kill();
        std::thread::sleep(DOWN);
        let restarted = Instant::now();
        service.start();
        // Recovered: submits are acknowledged again, with no help.
        let target = load.submitted() + BETWEEN_KILLS;
        until_submitted(&load, target, &format!("kill {cycle}"), &server);
        recoveries.push(restarted.elapsed());
    }
    let acked = load.stop();
    let report = service.report();
    if !report.is_empty() {
        eprintln!("before the read-back the store reports:\n{report}");
    }
    let checking = Instant::now();
    let log_to = std::env::var_os("RDQ_FAULT_LOG");
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match check {
        Check::ById => assert_nothing_lost(&server.base, &acked),
        Check::ByDraining => assert_nothing_lost_by_draining(&server.base, QUEUE, &acked),
    }));
    if let Some(path) = &log_to {
        // `RDQ_FAULT_LOG=FILE`: the server's log, for a post-mortem.
        std::fs::write(path, server.log()).unwrap();
    }
    if let Err(failed) = checked {
        std::panic::resume_unwind(failed);
    }
    let slowest = recoveries.iter().max().copied().unwrap_or_default();
    eprintln!("read back in {:?}", checking.elapsed());
    eprintln!(
        "{} kills: {} acknowledged submits and {} acknowledged settles, none lost; \
         {BETWEEN_KILLS} more submits acknowledged at most {slowest:?} after each restart",
        cycles(),
        acked.submitted.len(),
        acked.settled.len()
    );
    server.terminate();
    service.kill();
}

#[test]
fn redis_killed_under_load_loses_nothing_acknowledged_and_rdq_recovers_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let mut service = Redis {
        dir: dir.path().join("redis"),
        port: closed_port(),
        child: None,
    };
    kills(dir.path(), &mut service, Check::ById, None);
}

#[test]
fn postgresql_killed_under_load_loses_nothing_acknowledged_and_rdq_recovers_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    // The `postgres` user reaches its data directory through this one.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir.path().join("pg");
    let mut service = Postgres::new(data.clone(), data, dir.path().join("socket"));
    kills(dir.path(), &mut service, Check::ById, None);
}

#[test]
fn rabbitmq_killed_under_load_loses_nothing_acknowledged_and_rdq_recovers_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    // The `rabbitmq` user reaches its data directory through this one.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut service = RabbitMq::new(dir.path().join("rabbitmq"));
    // A task whose lease lapsed with the broker is retried at once, onto its
    // work queue: with a backoff it would wait in a quorum hold queue, and
    // RabbitMQ 3.10 (Debian 12's) can leave one without a leader, or
    // holding its messages past their TTL, after a SIGKILL
    // (docs/stores/rabbitmq.md, "Failures"): a broker fault, not rdq's.
    kills(
        dir.path(),
        &mut service,
        Check::ByDraining,
        Some(r#"backoff={"kind":"none"}"#),
    );
}

/// A broker that stops answering (here: a memory alarm, during which
/// RabbitMQ stops reading from publishing connections) fails a submit with
/// `STORE_UNAVAILABLE` once the store's operation timeout (`op_timeout_ms`)
/// passes, instead of holding it for as long as the broker is silent; and
/// submits succeed again, with no help, once it answers.
#[test]
fn a_silent_rabbitmq_fails_submits_within_the_operation_timeout_and_rdq_recovers() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut broker = RabbitMq::new(dir.path().join("rabbitmq"));
    let store = format!("{}&op_timeout_ms=1000", broker.start());
    let server = RdqServer::start_on(dir.path(), FAST_CONFIG, &store, &[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let api = common::Api::new(&server.base);
    let submit = || {
        let started = Instant::now();
        let (status, body) = runtime.block_on(api.post(
            "/v1/tasks",
            serde_json::json!({"queue": QUEUE, "handler_ref": "h", "payload_json": {}}),
        ));
        (status, body, started.elapsed())
    };
    assert_eq!(submit().0, 201);

    broker.ctl(&["set_vm_memory_high_watermark", "0.0000001"]);
    let (status, body, took) = submit();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "STORE_UNAVAILABLE", "{body}");
    assert!(
        took < Duration::from_secs(4),
        "a submit to a silent broker took {took:?}, op_timeout_ms is 1000"
    );

    broker.ctl(&["set_vm_memory_high_watermark", "0.4"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body, _) = submit();
        if status == 201 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no submit acknowledged 30 s after the alarm cleared: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    server.terminate();
    broker.kill();
}
