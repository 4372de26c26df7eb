//! What the binary-level tests share: the real `rdq serve` on a free port
//! with a temporary data directory, a real HTTP callback receiver, the
//! `rdq` CLI, and a small JSON client.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    dead_code
)]

pub mod faults;
pub mod grpc;
pub mod netfault;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub const RDQ: &str = env!("CARGO_BIN_EXE_rdq");

/// A configuration for tests: fast reaper, fast dispatcher refresh.
pub const FAST_CONFIG: &str = r#"
shutdown_grace_ms = 5000
[maintenance]
reaper_interval_ms = 50
[callbacks]
refresh_interval_ms = 100
poll_interval_ms = 50
"#;

/// The real `rdq serve`, on `127.0.0.1:0`.
pub struct RdqServer {
    child: Option<Child>,
    pub base: String,
    pub dir: PathBuf,
    log: Arc<Mutex<String>>,
}

impl RdqServer {
    /// Starts `rdq serve` on `dir` with `config` (TOML) and extra args.
    pub fn start(dir: &Path, config: &str, extra: &[&str]) -> Self {
        let store = dir.join("data");
        Self::start_on(dir, config, store.to_str().unwrap(), extra)
    }

    /// Starts `rdq serve --store STORE` (a directory or a store URL), with
    /// `config` (TOML) written to `dir`.
    pub fn start_on(dir: &Path, config: &str, store: &str, extra: &[&str]) -> Self {
        Self::start_with_env(dir, config, store, extra, &[])
    }

    /// [`Self::start_on`] with extra environment variables.
    pub fn start_with_env(
        dir: &Path,
        config: &str,
        store: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_listening(dir, config, store, "127.0.0.1:0", extra, env)
    }

    /// [`Self::start_with_env`] on the address `listen` (a restarted node
    /// keeps its address).
    pub fn start_listening(
        dir: &Path,
        config: &str,
        store: &str,
        listen: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let config_path = dir.join("rdq.toml");
        std::fs::write(&config_path, config).unwrap();
        let mut child = Command::new(RDQ)
            .arg("serve")
            .args(["--listen", listen])
            .arg("--store")
            .arg(store)
            .arg("--config")
            .arg(&config_path)
            .args(extra)
            .env("RDQ_LOG", "info")
            .env_remove("RDQ_LISTEN")
            .env_remove("RDQ_STORE")
            .env_remove("RDQ_CONFIG")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (base, log) = await_listening(&mut child);
        Self {
            child: Some(child),
            base,
            dir: dir.to_owned(),
            log,
        }
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits (up to 5 s) until the log contains `needle`; the log arrives
    /// through a pipe, a little after the request that caused it.
    pub fn wait_for_log(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let log = self.log();
            if log.contains(needle) || Instant::now() > deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// `kill -9`: no chance to flush or finish anything.
    pub fn kill_hard(mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGTERM, then waits for the exit; returns whether it exited 0.
    pub fn terminate(mut self) -> bool {
        let mut child = self.child.take().unwrap();
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("rdq serve did not exit after SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RdqServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs the `rdq` CLI.
pub fn rdq(args: &[&str]) -> Output {
    Command::new(RDQ)
        .args(args)
        .env_remove("RDQ_SERVER")
        .env_remove("RDQ_STORE")
        .env_remove("RDQ_TOKEN")
        .output()
        .unwrap()
}

/// Runs the `rdq` CLI with environment variables.
pub fn rdq_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(RDQ);
    cmd.args(args)
        .env_remove("RDQ_SERVER")
        .env_remove("RDQ_STORE")
        .env_remove("RDQ_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A JSON client for the server.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub token: Option<String>,
    http: reqwest::Client,
}

impl Api {
    pub fn new(base: &str) -> Self {
        Self {
            base: base.to_owned(),
            token: None,
            http: reqwest::Client::new(),
        }
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::PUT, path, Some(body)).await
    }

    pub async fn configure(&self, queue: &str, policy: Value) {
        let (status, body) = self
            .put(&format!("/v1/queues/{queue}/config"), policy)
            .await;
        assert_eq!(status, 200, "{body}");
    }

    pub async fn submit(&self, queue: &str, payload: Value) -> String {
        let (status, body) = self
            .post(
                "/v1/tasks",
                json!({"queue": queue, "handler_ref": "h", "payload_json": payload}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().unwrap().to_owned()
    }

    pub async fn task(&self, id: &str) -> Value {
        let (status, body) = self.get(&format!("/v1/tasks/{id}")).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Waits until the task is SUCCEEDED or DEAD.
    pub async fn settled(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let env = self.task(id).await;
            if env["status"] == "SUCCEEDED" || env["status"] == "DEAD" {
                return env;
            }
            assert!(Instant::now() < deadline, "task {id} never settled: {env}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Value,
    pub at: Instant,
}

/// A real HTTP callback receiver on `127.0.0.1:0`. Each task's payload
/// scripts the answer: `{"status": 503, "body": "…", "retry_after": "1",
/// "delay_ms": 500, "then": {…}}` (`then` answers later attempts).
pub struct Receiver {
    pub url: String,
    pub received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub async fn start() -> Self {
        let received: Arc<Mutex<Vec<Received>>> = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&received);
        let app = axum::Router::new()
            .route(
                "/hook",
                axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                    let log = Arc::clone(&log);
                    async move { answer(&log, headers, &body).await }
                }),
            )
            .route(
                "/elsewhere",
                axum::routing::post(|| async { "redirect followed" }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url: format!("http://{addr}/hook"),
            received,
        }
    }

    /// The requests received for `task_id`.
    pub fn for_task(&self, task_id: &str) -> Vec<Received> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.headers.get("rdq-task-id").and_then(|v| v.to_str().ok()) == Some(task_id))
            .cloned()
            .collect()
    }

    pub fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }
}

async fn answer(log: &Arc<Mutex<Vec<Received>>>, headers: HeaderMap, body: &[u8]) -> Response {
    let envelope: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    log.lock().unwrap().push(Received {
        headers: headers.clone(),
        body: envelope.clone(),
        at: Instant::now(),
    });
    let payload = envelope["payload"]
        .as_str()
        .and_then(|p| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.decode(p).ok()
        })
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .unwrap_or(Value::Null);
    let attempt: u64 = headers
        .get("rdq-attempt")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let deferrals = envelope["deferral_count"].as_u64().unwrap_or(0);
    // `then` scripts every call after the first (a retry or a deferred redelivery).
    let script = if (attempt > 1 || deferrals > 0) && payload.get("then").is_some() {
        payload["then"].clone()
    } else {
        payload
    };
    if let Some(ms) = script["delay_ms"].as_u64() {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let status = StatusCode::from_u16(script["status"].as_u64().unwrap_or(200) as u16)
        .unwrap_or(StatusCode::OK);
    let body = match &script["body"] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let mut response = (status, body).into_response();
    if let Some(ra) = script["retry_after"].as_str() {
        response
            .headers_mut()
            .insert("retry-after", ra.parse().unwrap());
    }
    if let Some(loc) = script["location"].as_str() {
        response
            .headers_mut()
            .insert("location", loc.parse().unwrap());
    }
    response
}

/// A `127.0.0.1` port that nothing listens on.
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Collects a started `rdq serve`'s standard error and waits for its
/// "listening on http://…" line (text or JSON logs); returns the base URL and
/// the growing log. Kills the child and panics with the log if it never
/// starts.
pub fn await_listening(child: &mut std::process::Child) -> (String, Arc<Mutex<String>>) {
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let sink = Arc::clone(&log);
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            // Text: `… listening on http://addr`; JSON: the same in `message`.
            let message = serde_json::from_str::<serde_json::Value>(&line)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| line.clone());
            if let Some(at) = message.find("listening on http://")
                && let Some(tx) = tx.take()
            {
                let rest = &message[at + "listening on ".len()..];
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_owned());
            }
            let mut log = sink.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    let Ok(base) = rx.recv_timeout(Duration::from_secs(20)) else {
        let _ = child.kill();
        panic!("rdq serve did not start:\n{}", log.lock().unwrap());
    };
    (base, log)
}

/// Drops `schema` (and everything in it) from the local test database, if
/// it is there: what a test on a schema of its own leaves behind.
pub fn drop_postgres_schema(schema: &str) {
    let _ = Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-qc"])
        .arg(format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .output();
}

/// The store URL of a PostgreSQL schema of its own, on `RDQ_TEST_POSTGRES`
/// (default the local service).
pub fn postgres_store(schema: &str) -> String {
    format!(
        "{}?schema={schema}",
        std::env::var("RDQ_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
    )
}

/// The store URL of a Redis key prefix of its own, on `RDQ_TEST_REDIS`
/// (default the local service).
pub fn redis_store(prefix: &str) -> String {
    format!(
        "{}/?prefix={prefix}",
        std::env::var("RDQ_TEST_REDIS")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
            .trim_end_matches('/')
    )
}
