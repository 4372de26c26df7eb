//! LazyFS (`tools/lazyfs`), a FUSE file system that keeps every write in its
//! own cache until it is synced and drops what was not synced on
//! `lazyfs::clear-cache`, as a power cut does; and the load and the count
//! the power-loss tests share; the stores' own servers the fault tests
//! start, kill and start again.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn script(name: &str) -> PathBuf {
    repo().join("tools/lazyfs").join(name)
}

/// The LazyFS binary, built once per target directory (one test process
/// builds while the others wait on a file lock).
pub fn binary() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(tmp).unwrap();
    let lock = File::create(tmp.join("lazyfs-build.lock")).unwrap();
    lock.lock().unwrap();
    let build = tmp.join("lazyfs-build");
    let bin = build.join("lazyfs/lazyfs");
    if bin.exists() {
        return bin;
    }
    let out = Command::new("sh")
        .arg(script("build.sh"))
        .arg(&build)
        .env("JOBS", "2")
        .output()
        .expect("run tools/lazyfs/build.sh");
    assert!(
        out.status.success() && bin.exists(),
        "building LazyFS failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// A LazyFS mount: `mnt` shows what `disk` holds plus the unsynced cache.
pub struct LazyFs {
    pub mnt: PathBuf,
    /// What the mount stands on: the "disk". Written directly, a file is
    /// on the disk at once (no cache to lose).
    pub disk: PathBuf,
    fifo: PathBuf,
    done: PathBuf,
    /// Open for reading and writing from before the mount: LazyFS answers
    /// on it, and reads its commands only while it has a reader.
    done_reader: Option<BufReader<File>>,
    bin: PathBuf,
}

impl LazyFs {
    /// Mounts a new LazyFS under `dir`, and checks that it drops a write
    /// never synced and keeps one synced (else no test on it proves a thing).
    pub fn mount(dir: &Path) -> Self {
        let mut fs = Self {
            mnt: dir.join("mnt"),
            disk: dir.join("disk"),
            fifo: dir.join("faults.fifo"),
            done: dir.join("done.fifo"),
            done_reader: None,
            bin: binary(),
        };
        for fifo in [&fs.fifo, &fs.done] {
            let status = Command::new("mkfifo").arg(fifo).status().unwrap();
            assert!(status.success(), "mkfifo {}", fifo.display());
        }
        fs.remount();
        std::fs::write(fs.mnt.join("unsynced"), b"lost").unwrap();
        let mut kept = File::create(fs.mnt.join("synced")).unwrap();
        kept.write_all(b"kept").unwrap();
        kept.sync_all().unwrap();
        drop(kept);
        fs.cut_power();
        assert_eq!(std::fs::read(fs.mnt.join("synced")).unwrap(), b"kept");
        assert_ne!(
            std::fs::read(fs.mnt.join("unsynced")).unwrap_or_default(),
            b"lost",
            "LazyFS kept a write that was never synced: a power cut on it proves nothing"
        );
        fs
    }

    fn remount(&mut self) {
        let reader = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.done)
            .unwrap();
        self.done_reader = Some(BufReader::new(reader));
        let out = Command::new("sh")
            .arg(script("mount.sh"))
            .args([&self.mnt, &self.disk, &self.fifo])
            .env("LAZYFS_BIN", &self.bin)
            .env("LAZYFS_DONE_FIFO", &self.done)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mounting LazyFS failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The power cut, once every process writing here is dead: drops every
    /// write not synced, then mounts again on what the disk kept.
    pub fn cut_power(&mut self) {
        let mut commands = OpenOptions::new().write(true).open(&self.fifo).unwrap();
        commands.write_all(b"lazyfs::clear-cache\n").unwrap();
        drop(commands);
        let mut reader = self.done_reader.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                if line.contains("finished::clear-cache") {
                    let _ = tx.send(());
                    return;
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("LazyFS did not finish clearing its cache within 60 s");
        self.unmount();
        self.remount();
    }

    fn unmount(&self) {
        let out = Command::new("sh")
            .arg(script("umount.sh"))
            .arg(&self.mnt)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "unmounting LazyFS failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        let _ = Command::new("sh")
            .arg(script("umount.sh"))
            .arg(&self.mnt)
            .output();
    }
}

/// What a server acknowledged.
#[derive(Default)]
pub struct Acknowledged {
    pub submitted: Vec<String>,
    pub settled: Vec<String>,
    /// Settles answered `503 STORE_UNAVAILABLE` or not at all: the task
    /// may have ended or may come back (found either way, never lost).
    pub settle_unknown: Vec<String>,
}

/// Load on the server at `base`: `submitters` threads submitting to
/// `queue` and one pull worker claiming and settling, each until `stop` is
/// set or the server stops answering, recording what was acknowledged.
pub struct Load {
    stop: Arc<AtomicBool>,
    pub acked: Arc<Mutex<Acknowledged>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    pub fn start(base: &str, queue: &str, submitters: usize) -> Self {
        Self::with(base, queue, submitters, false)
    }

    /// [`Load::start`], but riding out errors (a store that is down): each
    /// thread waits a little and tries again, until `stop`.
    pub fn enduring(base: &str, queue: &str, submitters: usize) -> Self {
        Self::with(base, queue, submitters, true)
    }

    fn with(base: &str, queue: &str, submitters: usize, endure: bool) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Acknowledged::default()));
        let mut threads = Vec::new();
        for t in 0..=submitters {
            let (base, queue) = (base.to_owned(), queue.to_owned());
            let (stop, acked) = (Arc::clone(&stop), Arc::clone(&acked));
            threads.push(std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let client = reqwest::Client::new();
                    loop {
                        if t == submitters {
                            settle(&client, &base, &queue, &stop, &acked).await;
                        } else {
                            submit(&client, &base, &queue, t, &stop, &acked).await;
                        }
                        if !endure || stop.load(Ordering::Acquire) {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                });
            }));
        }
        Self {
            stop,
            acked,
            threads,
        }
    }

    /// Acknowledged submits so far.
    pub fn submitted(&self) -> usize {
        self.acked.lock().unwrap().submitted.len()
    }

    /// Stops the threads (once the server is dead, they stop on their own)
    /// and answers what was acknowledged.
    pub fn stop(self) -> Acknowledged {
        self.stop.store(true, Ordering::Release);
        for t in self.threads {
            t.join().unwrap();
        }
        std::mem::take(&mut *self.acked.lock().unwrap())
    }
}

async fn submit(
    client: &reqwest::Client,
    base: &str,
    queue: &str,
    t: usize,
    stop: &AtomicBool,
    acked: &Mutex<Acknowledged>,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        n += 1;
        let sent = client
            .post(format!("{base}/v1/tasks"))
            .json(&json!({"queue": queue, "handler_ref": "h", "payload_json": {"t": t, "n": n}}))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        let Ok(response) = sent else { return };
        if response.status() != 201 {
            return;
        }
        let Ok(body) = response.json::<Value>().await else {
            return;
        };
        let id = body["id"].as_str().unwrap().to_owned();
        acked.lock().unwrap().submitted.push(id);
    }
}

async fn settle(
    client: &reqwest::Client,
    base: &str,
    queue: &str,
    stop: &AtomicBool,
    acked: &Mutex<Acknowledged>,
) {
    while !stop.load(Ordering::Acquire) {
        let claimed = client
            .post(format!("{base}/v1/queues/{queue}/claim"))
            .json(&json!({"max": 16, "lease_ms": 60000}))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        let Ok(response) = claimed else { return };
        let Ok(body) = response.json::<Value>().await else {
            return;
        };
        let Some(tasks) = body["tasks"].as_array() else {
            return;
        };
        if tasks.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for task in tasks {
            let id = task["id"].as_str().unwrap().to_owned();
            let settled = client
                .post(format!("{base}/v1/tasks/{id}/settle"))
                .json(&json!({"lease_token": task["lease_token"], "outcome": "SUCCESS"}))
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            let status = settled.as_ref().map(reqwest::Response::status).ok();
            match status {
                Some(reqwest::StatusCode::OK) => acked.lock().unwrap().settled.push(id),
                None | Some(reqwest::StatusCode::SERVICE_UNAVAILABLE) => {
                    acked.lock().unwrap().settle_unknown.push(id);
                    return;
                }
                Some(_) => return,
            }
        }
    }
}

/// Reads every acknowledged task from the server at `base` and fails the
/// test for a submit not found or a settle whose task is not SUCCEEDED (or
/// for no settle at all: then settles went untested).
pub fn assert_nothing_lost(base: &str, acked: &Acknowledged) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (lost, unsettled) = runtime.block_on(count(base, acked));
    assert_counted(acked, &lost, &unsettled, "were lost");
}

/// Fails the test for any of `lost` (acknowledged submits not found) or
/// `unsettled` (acknowledged settles whose task `how` — was found
/// otherwise, or came back), or when nothing was settled at all.
fn assert_counted<L: std::fmt::Debug, U: std::fmt::Debug>(
    acked: &Acknowledged,
    lost: &[L],
    unsettled: &[U],
    how: &str,
) {
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged submits were lost: {:?}",
        lost.len(),
        acked.submitted.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(
        unsettled.is_empty(),
        "{} of {} acknowledged settles {how}: {:?}",
        unsettled.len(),
        acked.settled.len(),
        &unsettled[..unsettled.len().min(5)]
    );
    assert!(
        !acked.settled.is_empty(),
        "the worker settled nothing: settles went untested"
    );
}

/// [`assert_nothing_lost`] for a store that finds no task by id (RabbitMQ):
/// drains `queue` (claims and settles until it stays empty) and fails the
/// test for an acknowledged submit neither settled nor drained (lost), or
/// an acknowledged settle whose task is drained again (its end undone).
pub fn assert_nothing_lost_by_draining(base: &str, queue: &str, acked: &Acknowledged) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut drained = runtime.block_on(drain(base, queue));
    // Dead-lettered (its attempts spent on lapsed leases) is found, not lost.
    drained.extend(runtime.block_on(dead(base, queue)));
    let settled: std::collections::HashSet<&String> =
        acked.settled.iter().chain(&acked.settle_unknown).collect();
    let lost: Vec<&String> = acked
        .submitted
        .iter()
        .filter(|id| !settled.contains(id) && !drained.contains(*id))
        .collect();
    let undone: Vec<&String> = acked
        .settled
        .iter()
        .filter(|id| drained.contains(*id))
        .collect();
    assert_counted(acked, &lost, &undone, "came back");
}

/// The ids in `queue`'s DLQ.
async fn dead(base: &str, queue: &str) -> Vec<String> {
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    let mut cursor = String::new();
    loop {
        let page: Value = client
            .get(format!("{base}/v1/queues/{queue}/dead?limit=100{cursor}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let Some(items) = page["items"].as_array() else {
            panic!("listing the DLQ: {page}")
        };
        for item in items {
            ids.push(item["id"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return ids,
        }
    }
}

/// How long claims must find nothing before a drain is over. A broker
/// pushes a consumer at most its prefetch at a time, and redelivered
/// messages wait for the reaper: after a broker restart the deliveries
/// in flight at the kill come back redelivered, take the whole prefetch,
/// and leave only once their retries are published, which can wait out
/// the broker's recovery (up to the store's `op_timeout_ms`, 10 s; 8 s
/// measured after 30 kills).
const DRAIN_QUIET: Duration = Duration::from_secs(20);

/// Claims and settles (SUCCESS) everything in `queue` until claims have
/// found nothing for [`DRAIN_QUIET`]; answers the ids.
async fn drain(base: &str, queue: &str) -> std::collections::HashSet<String> {
    let client = reqwest::Client::new();
    let mut ids = std::collections::HashSet::new();
    let mut last_found = Instant::now();
    while last_found.elapsed() < DRAIN_QUIET {
        let claimed: Value = client
            .post(format!("{base}/v1/queues/{queue}/claim"))
            .json(&json!({"max": 1000, "lease_ms": 600000}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let tasks = claimed["tasks"].as_array().cloned().unwrap_or_default();
        if tasks.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        last_found = Instant::now();
        let settles: Vec<Value> = tasks
            .iter()
            .map(|t| json!({"id": t["id"], "lease_token": t["lease_token"], "outcome": "SUCCESS"}))
            .collect();
        let answer: Value = client
            .post(format!("{base}/v1/settle"))
            .json(&json!({"settles": settles, "envelopes": false}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        for result in answer["results"].as_array().unwrap() {
            assert_eq!(result["status"], 200, "settling a drained task: {result}");
        }
        ids.extend(tasks.iter().map(|t| t["id"].as_str().unwrap().to_owned()));
    }
    ids
}

/// The submits of `acked` not found on the server at `base`, and the settles
/// whose task is not SUCCEEDED.
async fn count(base: &str, acked: &Acknowledged) -> (Vec<String>, Vec<(String, Value)>) {
    let api = super::Api::new(base);
    let settled: std::collections::HashSet<&String> = acked.settled.iter().collect();
    let mut lost = Vec::new();
    let mut unsettled = Vec::new();
    for id in &acked.submitted {
        let (status, task) = api.get(&format!("/v1/tasks/{id}")).await;
        if status != 200 {
            lost.push(id.clone());
        } else if settled.contains(id) && task["status"] != "SUCCEEDED" {
            unsettled.push((id.clone(), task["status"].clone()));
        }
    }
    (lost, unsettled)
}

/// A store's own server, its data on the LazyFS mount.
pub trait Service {
    /// Starts it (again) on its data; answers the store URL for `rdq serve`.
    fn start(&mut self) -> String;
    /// SIGKILL, no chance to flush anything.
    fn kill(&mut self);
    /// What the service itself says of its state, for a failure's message.
    fn report(&self) -> String {
        String::new()
    }
}

/// The embedded store: `rdq serve` itself writes the data directory.
pub struct Embedded(pub PathBuf);

impl Service for Embedded {
    fn start(&mut self) -> String {
        self.0.to_str().unwrap().to_owned()
    }
    fn kill(&mut self) {}
}

/// Waits until something listens on `port`.
pub fn wait_for_port(port: u16, what: &str) {
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
pub struct Redis {
    pub dir: PathBuf,
    pub port: u16,
    pub child: Option<Child>,
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
pub struct Postgres {
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
    /// A new cluster made by `initdb` in `on_disk` (with no fsync: past
    /// LazyFS, when the cluster runs on a mount) and run on `data`, the
    /// same directory or the mount's view of it.
    pub fn new(on_disk: PathBuf, data: PathBuf, socket: PathBuf) -> Self {
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
            data,
            socket,
            port: super::closed_port(),
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

/// A RabbitMQ broker of the test's own (node `rdqfault{port}@localhost`),
/// on free ports, its data under `dir` (kept across restarts): the
/// broker the suite shares is never touched.
pub struct RabbitMq {
    dir: PathBuf,
    port: u16,
    dist_port: u16,
    child: Option<Child>,
}

impl RabbitMq {
    pub fn new(dir: PathBuf) -> Self {
        std::fs::create_dir_all(dir.join("mnesia")).unwrap();
        std::fs::create_dir_all(dir.join("log")).unwrap();
        let port = super::closed_port();
        std::fs::write(
            dir.join("rabbitmq.conf"),
            format!("listeners.tcp.default = 127.0.0.1:{port}\n"),
        )
        .unwrap();
        std::fs::write(dir.join("enabled_plugins"), "[].\n").unwrap();
        std::fs::write(dir.join("env"), "").unwrap();
        // The broker drops to the `rabbitmq` user.
        let ok = Command::new("chown")
            .args(["-R", "rabbitmq:rabbitmq"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(ok.success());
        Self {
            dir,
            port,
            dist_port: super::closed_port(),
            child: None,
        }
    }
}

impl RabbitMq {
    /// `rabbitmqctl` against this broker.
    pub fn ctl(&self, args: &[&str]) {
        let out = self.ctl_output(args);
        assert!(
            out.status.success(),
            "rabbitmqctl {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn ctl_output(&self, args: &[&str]) -> std::process::Output {
        Command::new("rabbitmqctl")
            .env("HOME", &self.dir)
            .args(["-n", &format!("rdqfault{}@localhost", self.port)])
            .args(args)
            .output()
            .unwrap()
    }
}

impl Service for RabbitMq {
    fn start(&mut self) -> String {
        let d = |name: &str| self.dir.join(name);
        let child = Command::new("rabbitmq-server")
            .env("HOME", &self.dir)
            .env(
                "RABBITMQ_NODENAME",
                format!("rdqfault{}@localhost", self.port),
            )
            .env("RABBITMQ_CONFIG_FILE", d("rabbitmq.conf"))
            .env("RABBITMQ_CONF_ENV_FILE", d("env"))
            .env("RABBITMQ_MNESIA_BASE", d("mnesia"))
            .env("RABBITMQ_LOG_BASE", d("log"))
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d("enabled_plugins"))
            .env("RABBITMQ_FEATURE_FLAGS_FILE", d("feature_flags"))
            .env("RABBITMQ_PLUGINS_EXPAND_DIR", d("plugins-expand"))
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start rabbitmq-server");
        self.child = Some(child);
        wait_for_port(self.port, "rabbitmq-server");
        format!(
            "amqp://guest:guest@127.0.0.1:{}/%2f?namespace=fault.",
            self.port
        )
    }

    fn kill(&mut self) {
        // The broker (`beam.smp`, started by `rabbitmq-server` under the
        // `rabbitmq` user in a session of its own) is the process that
        // listens on the port: SIGKILL to it and its children.
        let out = Command::new("ss")
            .args(["-ltnpH", &format!("sport = :{}", self.port)])
            .output()
            .unwrap();
        let listing = String::from_utf8_lossy(&out.stdout);
        for pid in listing
            .split("pid=")
            .skip(1)
            .filter_map(|rest| rest.split(',').next())
        {
            let children = Command::new("pgrep").args(["-P", pid]).output().unwrap();
            let children = String::from_utf8_lossy(&children.stdout).to_string();
            // A child may be gone already: `kill` says so, harmlessly.
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(pid)
                .args(children.split_whitespace())
                .stderr(Stdio::null())
                .status();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            assert!(
                Instant::now() < deadline,
                "the broker on {} outlived its SIGKILL",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn report(&self) -> String {
        let out = self.ctl_output(&[
            "list_queues",
            "name",
            "messages_ready",
            "messages_unacknowledged",
            "consumers",
        ]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for RabbitMq {
    fn drop(&mut self) {
        self.kill();
    }
}
