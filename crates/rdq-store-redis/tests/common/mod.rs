//! What the Redis store's tests share: where the test Redis is, and
//! throwaway `redis-server` processes for the tests that kill or cluster them.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Redis tests run against: `RDQ_TEST_REDIS`, else the local one.
pub fn url() -> String {
    std::env::var("RDQ_TEST_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// Whether `redis-server` and `redis-cli` can be run here.
pub fn have_redis_binaries() -> bool {
    ["redis-server", "redis-cli"].iter().all(|bin| {
        Command::new(bin)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("its address").port()
}

/// A `redis-server` child process on a loopback port, killed when dropped.
pub struct Server {
    pub port: u16,
    dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl Server {
    /// Starts `redis-server` on `port` with its files in `dir` and `args`
    /// added, and waits until it answers.
    pub fn start(port: u16, dir: &Path, args: &[&str]) -> Self {
        let mut server = Self {
            port,
            dir: dir.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            child: None,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--daemonize", "no", "--save", ""])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        self.wait_until_answering();
    }

    /// `kill -9`: no shutdown, no last fsync.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// The URL of this server.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against this server; its standard output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn wait_until_answering(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            // LOADING answers until the append-only file is read back.
            if self.cli(&["PING"]).trim() == "PONG" {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server on port {} did not come up", self.port);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}
