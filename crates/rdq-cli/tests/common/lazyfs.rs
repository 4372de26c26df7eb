//! LazyFS (`tools/lazyfs`), a FUSE file system that keeps every write in its
//! own cache until it is synced and drops what was not synced on
//! `lazyfs::clear-cache`, as a power cut does; and the load and the count
//! the power-loss tests share.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

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
                    if t == submitters {
                        settle(&client, &base, &queue, &stop, &acked).await;
                    } else {
                        submit(&client, &base, &queue, t, &stop, &acked).await;
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
            let Ok(response) = settled else { return };
            if response.status() != 200 {
                return;
            }
            acked.lock().unwrap().settled.push(id);
        }
    }
}

/// Reads every acknowledged task from the server at `base`: answers the
/// submits not found and the settles whose task is not SUCCEEDED.
pub async fn count(base: &str, acked: &Acknowledged) -> (Vec<String>, Vec<(String, Value)>) {
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
