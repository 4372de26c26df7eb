//! Power loss (docs/reliability.md): the data of the store under `rdq
//! serve` lives on LazyFS (`tools/lazyfs`), which drops every write not
//! synced on command, as a power cut does. Under load (submitting threads
//! and a pull worker settling), every process is killed with SIGKILL, the
//! unsynced data is dropped, the file system mounted again and everything
//! restarted: every submit the server acknowledged must be there, and every
//! settle it acknowledged must have left its task SUCCEEDED. On the
//! embedded store (its data directory), Redis (`appendfsync always`) and
//! PostgreSQL (its data directory, default durability settings).
//!
//! `RDQ_FAULT_CYCLES` sets the number of power cuts per store (default 3).
//! Needs FUSE (`/dev/fuse`) and root; LazyFS is built on first use into the
//! target directory (`tools/lazyfs/build.sh` installs Debian's build
//! dependencies when missing).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::faults::{
    Acknowledged, Embedded, LazyFs, Load, Postgres, Redis, Service, assert_nothing_lost,
};
use common::{FAST_CONFIG, RdqServer, closed_port};

const QUEUE: &str = "power";
const SUBMITTERS: usize = 3;
/// Acknowledged submits a cycle waits for before the cut.
const BEFORE_CUT: usize = 400;

fn cycles() -> usize {
    std::env::var("RDQ_FAULT_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// Power cuts under load on `service`'s store: asserts nothing
/// acknowledged was lost, and answers what was acknowledged.
fn power_cuts(fs: &mut LazyFs, dir: &Path, service: &mut dyn Service) -> Acknowledged {
    let mut all = Acknowledged::default();
    for cycle in 0..cycles() {
        let store = service.start();
        let server = RdqServer::start_on(dir, FAST_CONFIG, &store, &[]);
        let load = Load::start(&server.base, QUEUE, SUBMITTERS);
        let deadline = Instant::now() + Duration::from_secs(60);
        while load.submitted() < BEFORE_CUT && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        // The cut: every process dies with whatever it had not synced,
        // then the file system forgets it too.
        server.kill_hard();
        service.kill();
        let acked = load.stop();
        fs.cut_power();
        assert!(
            acked.submitted.len() >= BEFORE_CUT,
            "cycle {cycle}: only {} submits got through",
            acked.submitted.len()
        );
        all.submitted.extend(acked.submitted);
        all.settled.extend(acked.settled);
    }
    let store = service.start();
    let server = RdqServer::start_on(dir, FAST_CONFIG, &store, &[]);
    assert_nothing_lost(&server.base, &all);
    eprintln!(
        "{} power cuts: {} acknowledged submits and {} acknowledged settles, none lost",
        cycles(),
        all.submitted.len(),
        all.settled.len()
    );
    server.terminate();
    service.kill();
    all
}

#[test]
fn a_power_cut_loses_nothing_acknowledged_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut fs = LazyFs::mount(dir.path());
    let mut service = Embedded(fs.mnt.join("rdq"));
    power_cuts(&mut fs, dir.path(), &mut service);
}

#[test]
fn a_power_cut_loses_nothing_acknowledged_on_redis_with_appendfsync_always() {
    let dir = tempfile::tempdir().unwrap();
    let mut fs = LazyFs::mount(dir.path());
    let mut service = Redis {
        dir: fs.mnt.join("redis"),
        port: closed_port(),
        child: None,
    };
    power_cuts(&mut fs, dir.path(), &mut service);
}

#[test]
fn a_power_cut_loses_nothing_acknowledged_on_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    // The `postgres` user reaches its data directory through this one.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut fs = LazyFs::mount(dir.path());
    let mut service = Postgres::new(
        fs.disk.join("pg"),
        fs.mnt.join("pg"),
        dir.path().join("socket"),
    );
    power_cuts(&mut fs, dir.path(), &mut service);
}
