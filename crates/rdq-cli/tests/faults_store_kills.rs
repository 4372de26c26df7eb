//! Kills of a store's own server under load (docs/reliability.md): `rdq
//! serve` keeps running while its Redis (`appendfsync always`) or its
//! PostgreSQL cluster is killed with SIGKILL and started again, with
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

use common::faults::{Load, Postgres, Redis, Service, assert_nothing_lost};
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
fn until_submitted(load: &Load, target: usize, what: &str) -> Duration {
    let started = Instant::now();
    while load.submitted() < target {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: {} of {target} submits acknowledged after 60 s",
            load.submitted()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    started.elapsed()
}

fn kills(dir: &Path, service: &mut dyn Service) {
    let store = service.start();
    let server = RdqServer::start_on(dir, FAST_CONFIG, &store, &[]);
    let load = Load::enduring(&server.base, QUEUE, SUBMITTERS);
    until_submitted(&load, BETWEEN_KILLS, "before the first kill");
    let mut recoveries = Vec::new();
    for cycle in 0..cycles() {
        service.kill();
        std::thread::sleep(DOWN);
        let restarted = Instant::now();
        service.start();
        // Recovered: submits are acknowledged again, with no help.
        let target = load.submitted() + BETWEEN_KILLS;
        until_submitted(&load, target, &format!("kill {cycle}"));
        recoveries.push(restarted.elapsed());
    }
    let acked = load.stop();
    assert_nothing_lost(&server.base, &acked);
    let slowest = recoveries.iter().max().copied().unwrap_or_default();
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
    kills(dir.path(), &mut service);
}

#[test]
fn postgresql_killed_under_load_loses_nothing_acknowledged_and_rdq_recovers_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    // The `postgres` user reaches its data directory through this one.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir.path().join("pg");
    let mut service = Postgres::new(data.clone(), data, dir.path().join("socket"));
    kills(dir.path(), &mut service);
}
