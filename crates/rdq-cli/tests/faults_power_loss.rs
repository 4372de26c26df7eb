//! Power loss on the embedded store (docs/reliability.md): `rdq serve` keeps
//! its data on LazyFS (`tools/lazyfs`), a FUSE file system that holds every
//! write in its own cache until it is synced and drops what was not synced
//! on `lazyfs::clear-cache`, as a power cut does. Under load (submitting
//! threads and a pull worker settling), the server is killed with SIGKILL,
//! the unsynced data is dropped, the file system mounted again and the
//! server restarted: every submit it acknowledged must be there, and every
//! settle it acknowledged must have left its task SUCCEEDED.
//!
//! `RDQ_FAULT_CYCLES` sets the number of power cuts (default 3). Needs
//! FUSE (`/dev/fuse`) and root, or a user allowed to mount FUSE; LazyFS is
//! built on first use into the target directory (Debian's cmake, g++,
//! libfuse3-dev, libtoml11-dev, libspdlog-dev; `tools/lazyfs/build.sh`
//! installs what is missing).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::{FAST_CONFIG, RdqServer};
use serde_json::{Value, json};

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

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The LazyFS binary, built once per target directory.
fn lazyfs_binary() -> PathBuf {
    let build = Path::new(env!("CARGO_TARGET_TMPDIR")).join("lazyfs-build");
    let bin = build.join("lazyfs/lazyfs");
    if bin.exists() {
        return bin;
    }
    let out = Command::new("sh")
        .arg(repo().join("tools/lazyfs/build.sh"))
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

/// A LazyFS mount: `mnt` shows what `root` holds plus the unsynced cache.
struct LazyFs {
    mnt: PathBuf,
    root: PathBuf,
    fifo: PathBuf,
    done: PathBuf,
    /// Kept open for reading and writing from before the mount: LazyFS
    /// answers on it, and reads its commands only while it has a reader.
    done_reader: Option<BufReader<File>>,
    bin: PathBuf,
}

impl LazyFs {
    fn mount(dir: &Path, bin: PathBuf) -> Self {
        let fs = Self {
            mnt: dir.join("mnt"),
            root: dir.join("disk"),
            fifo: dir.join("faults.fifo"),
            done: dir.join("done.fifo"),
            done_reader: None,
            bin,
        };
        for fifo in [&fs.fifo, &fs.done] {
            let status = Command::new("mkfifo").arg(fifo).status().unwrap();
            assert!(status.success(), "mkfifo {}", fifo.display());
        }
        let mut fs = fs;
        fs.remount();
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
            .arg(repo().join("tools/lazyfs/mount.sh"))
            .args([&self.mnt, &self.root, &self.fifo])
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

    /// Drops every write not synced, and waits until LazyFS says it did.
    fn cut_power(&mut self) {
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
    }

    fn unmount(&self) {
        let out = Command::new("sh")
            .arg(repo().join("tools/lazyfs/umount.sh"))
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
            .arg(repo().join("tools/lazyfs/umount.sh"))
            .arg(&self.mnt)
            .output();
    }
}

/// What the server acknowledged in one cycle.
#[derive(Default)]
struct Acknowledged {
    submitted: Vec<String>,
    settled: Vec<String>,
}

/// Submits from `SUBMITTERS` threads and settles from one pull worker until
/// `stop` is set or the server stops answering.
fn load(
    base: &str,
    stop: &Arc<AtomicBool>,
    acked: &Arc<Mutex<Acknowledged>>,
) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    for t in 0..=SUBMITTERS {
        let (base, stop, acked) = (base.to_owned(), Arc::clone(stop), Arc::clone(acked));
        threads.push(std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let client = reqwest::Client::new();
                if t == SUBMITTERS {
                    settle_until_stopped(&client, &base, &stop, &acked).await;
                } else {
                    submit_until_stopped(&client, &base, t, &stop, &acked).await;
                }
            });
        }));
    }
    threads
}

async fn submit_until_stopped(
    client: &reqwest::Client,
    base: &str,
    t: usize,
    stop: &AtomicBool,
    acked: &Mutex<Acknowledged>,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        n += 1;
        let sent = client
            .post(format!("{base}/v1/tasks"))
            .json(&json!({"queue": QUEUE, "handler_ref": "h", "payload_json": {"t": t, "n": n}}))
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

async fn settle_until_stopped(
    client: &reqwest::Client,
    base: &str,
    stop: &AtomicBool,
    acked: &Mutex<Acknowledged>,
) {
    while !stop.load(Ordering::Acquire) {
        let claimed = client
            .post(format!("{base}/v1/queues/{QUEUE}/claim"))
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
            let Ok(response) = settled else { return };
            if response.status() != 200 {
                return;
            }
            acked.lock().unwrap().settled.push(id);
        }
    }
}

#[test]
fn a_power_cut_loses_no_acknowledged_submit_or_settle_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut fs = LazyFs::mount(dir.path(), lazyfs_binary());
    let store = fs.mnt.join("rdq");
    let store = store.to_str().unwrap().to_owned();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (mut submitted, mut settled): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());

    // LazyFS really drops what was not synced: a file written and not
    // synced is gone after the cut, one synced is kept.
    std::fs::write(fs.mnt.join("unsynced"), b"lost").unwrap();
    let mut kept = File::create(fs.mnt.join("synced")).unwrap();
    kept.write_all(b"kept").unwrap();
    kept.sync_all().unwrap();
    drop(kept);
    fs.cut_power();
    fs.unmount();
    fs.remount();
    assert_eq!(std::fs::read(fs.mnt.join("synced")).unwrap(), b"kept");
    assert_ne!(
        std::fs::read(fs.mnt.join("unsynced")).unwrap_or_default(),
        b"lost",
        "LazyFS kept a write that was never synced: the cut below proves nothing"
    );

    for cycle in 0..cycles() {
        let server = RdqServer::start_on(dir.path(), FAST_CONFIG, &store, &[]);
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Acknowledged::default()));
        let threads = load(&server.base, &stop, &acked);
        let deadline = Instant::now() + Duration::from_secs(60);
        while acked.lock().unwrap().submitted.len() < BEFORE_CUT && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        // The cut: the process dies with whatever it had not synced, then
        // the file system forgets it too.
        server.kill_hard();
        stop.store(true, Ordering::Release);
        for t in threads {
            t.join().unwrap();
        }
        fs.cut_power();
        fs.unmount();
        fs.remount();
        let acked = std::mem::take(&mut *acked.lock().unwrap());
        assert!(
            acked.submitted.len() >= BEFORE_CUT,
            "cycle {cycle}: only {} submits got through",
            acked.submitted.len()
        );
        submitted.extend(acked.submitted);
        settled.extend(acked.settled);
        eprintln!(
            "power cut {cycle}: {} submits and {} settles acknowledged so far",
            submitted.len(),
            settled.len()
        );
    }

    let server = RdqServer::start_on(dir.path(), FAST_CONFIG, &store, &[]);
    let api = common::Api::new(&server.base);
    let settled_set: HashSet<&String> = settled.iter().collect();
    let (lost, unsettled) = runtime.block_on(async {
        let mut lost = Vec::new();
        let mut unsettled = Vec::new();
        for id in &submitted {
            let (status, task) = api.get(&format!("/v1/tasks/{id}")).await;
            if status != 200 {
                lost.push(id.clone());
            } else if settled_set.contains(id) && task["status"] != "SUCCEEDED" {
                unsettled.push((id.clone(), task["status"].clone()));
            }
        }
        (lost, unsettled)
    });
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged submits were lost: {:?}",
        lost.len(),
        submitted.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(
        unsettled.is_empty(),
        "{} of {} acknowledged settles were lost: {:?}",
        unsettled.len(),
        settled.len(),
        &unsettled[..unsettled.len().min(5)]
    );
    assert!(
        !settled.is_empty(),
        "the worker settled nothing: the settles were not tested"
    );
    eprintln!(
        "{} power cuts: {} acknowledged submits and {} acknowledged settles, none lost",
        cycles(),
        submitted.len(),
        settled.len()
    );
    server.terminate();
}
