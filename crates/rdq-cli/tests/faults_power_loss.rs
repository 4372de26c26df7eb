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

use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::lazyfs::{Acknowledged, LazyFs, Load, count};
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

/// A store's own server, its data on the LazyFS mount.
trait Service {
    /// Starts it (again) on its data; answers the store URL for `rdq serve`.
    fn start(&mut self) -> String;
    /// SIGKILL, no chance to flush anything.
    fn kill(&mut self);
}

/// The embedded store: `rdq serve` itself writes the data directory.
struct Embedded(PathBuf);

impl Service for Embedded {
    fn start(&mut self) -> String {
        self.0.to_str().unwrap().to_owned()
    }
    fn kill(&mut self) {}
}

/// Waits until something listens on `port`.
fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {port} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill_child(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// `redis-server` with an append-only file synced at every write.
struct Redis {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Service for Redis {
    fn start(&mut self) -> String {
        std::fs::create_dir_all(&self.dir).unwrap();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--dir")
            .arg(&self.dir)
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        wait_for_port(self.port, "redis-server");
        format!("redis://127.0.0.1:{}/?prefix=power", self.port)
    }
    fn kill(&mut self) {
        kill_child(&mut self.child);
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        kill_child(&mut self.child);
    }
}

/// Whether process `pid` still runs (a zombie no longer does: it holds
/// no file and no shared memory).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// A PostgreSQL cluster of its own, run as the `postgres` user, with its
/// default durability (`fsync` and `synchronous_commit` on).
struct Postgres {
    data: PathBuf,
    socket: PathBuf,
    port: u16,
    child: Option<Child>,
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// `program` of PostgreSQL's, run as the `postgres` user (PostgreSQL will
/// not run as root), as a child of this process.
fn as_postgres(program: &str) -> Command {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("the postgres user")
    };
    let mut cmd = Command::new(Path::new(PG_BIN).join(program));
    cmd.uid(id("-u")).gid(id("-g")).env("HOME", "/tmp");
    cmd
}

impl Postgres {
    /// A new cluster, made on the disk under `fs` (past LazyFS, where
    /// `initdb` needs no fsync) and run through the mount.
    fn new(fs: &LazyFs, socket: PathBuf) -> Self {
        let on_disk = fs.disk.join("pg");
        std::fs::create_dir_all(&on_disk).unwrap();
        std::fs::create_dir_all(&socket).unwrap();
        for dir in [&on_disk, &socket] {
            let ok = Command::new("chown")
                .arg("postgres:postgres")
                .arg(dir)
                .status()
                .unwrap();
            assert!(ok.success());
        }
        let out = as_postgres("initdb")
            .args(["-D"])
            .arg(&on_disk)
            .args(["-U", "postgres", "--auth", "trust", "--no-sync"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self {
            data: fs.mnt.join("pg"),
            socket,
            port: closed_port(),
            child: None,
        }
    }
}

impl Service for Postgres {
    fn start(&mut self) -> String {
        let child = as_postgres("postgres")
            .arg("-D")
            .arg(&self.data)
            .args([
                "-p",
                &self.port.to_string(),
                "-c",
                "listen_addresses=127.0.0.1",
            ])
            .arg("-k")
            .arg(&self.socket)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.socket.join("postgres.log")).unwrap())
            .spawn()
            .expect("start postgres");
        self.child = Some(child);
        if let Err(waited) = std::panic::catch_unwind(|| wait_for_port(self.port, "postgres")) {
            let log = std::fs::read_to_string(self.socket.join("postgres.log")).unwrap_or_default();
            panic!("{waited:?}; its log:\n{log}");
        }
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
    fn kill(&mut self) {
        // The postmaster (found by its data directory) and its backends
        // at once: SIGKILL to every one.
        let pgrep = |args: &[&str]| -> Vec<String> {
            let out = Command::new("pgrep").args(args).output().unwrap();
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        };
        let data = self.data.display().to_string();
        for postmaster in pgrep(&["-f", &format!("bin/postgres -D {data}")]) {
            let mut all = pgrep(&["-P", &postmaster]);
            all.push(postmaster);
            let _ = Command::new("kill").arg("-KILL").args(&all).status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while all.iter().any(|pid| alive(pid)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        kill_child(&mut self.child);
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.kill();
    }
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
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (lost, unsettled) = runtime.block_on(count(&server.base, &all));
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged submits were lost: {:?}",
        lost.len(),
        all.submitted.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(
        unsettled.is_empty(),
        "{} of {} acknowledged settles were lost: {:?}",
        unsettled.len(),
        all.settled.len(),
        &unsettled[..unsettled.len().min(5)]
    );
    assert!(
        !all.settled.is_empty(),
        "the worker settled nothing: settles went untested"
    );
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
    let mut service = Postgres::new(&fs, dir.path().join("socket"));
    power_cuts(&mut fs, dir.path(), &mut service);
}
