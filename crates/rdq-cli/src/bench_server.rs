//! `rdq bench --workload callback|pull`: rdq-server's two ways of running
//! tasks for other languages, measured over real HTTP on loopback.
//!
//! Both submit `--jobs` tasks over HTTP (64 submits in flight) into a paused
//! queue, then unpause it and time how long the server takes to run them all:
//!
//! - `callback`: the queue's callback target is a minimal HTTP receiver in
//!   this process that answers 200 at once; the server dispatches with
//!   `--concurrency` callbacks in flight. Reports tasks dispatched/s.
//! - `pull`: `--workers` HTTP pull workers each claim 64 tasks, then settle
//!   the 64 in one `POST /v1/settle`. Reports tasks worked/s.
//!
//! Without `--server` the server runs in this process on the `--store` (a
//! fresh embedded store by default), so one command measures the whole path;
//! with `--server URL` it measures that server (the receiver must be reachable
//! from it on loopback, which the default callback allowlist permits).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdq_runtime::shutdown_channel;
use rdq_server::{Server, ServerConfig};
use serde_json::{Value, json};

use crate::CliError;
use crate::output::progress;
use crate::stores::open_store;

/// Submits kept in flight while filling the queue.
const SUBMITS_IN_FLIGHT: u64 = 64;
/// Tasks a pull worker claims at once; a gRPC Work stream settles in
/// batches of as many, with twice as many credits.
const PULL_BATCH: u64 = 64;

/// Which server path to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Callback dispatch.
    Callback,
    /// HTTP pull workers.
    Pull,
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct ServerBench {
    /// Callback or pull.
    pub mode: Mode,
    /// A running server, or `None` to start one here.
    pub server: Option<String>,
    /// Store of the in-process server.
    pub store: String,
    /// Whether `store` was named by the user (for the report).
    pub store_named: bool,
    /// Tasks.
    pub jobs: u64,
    /// Callbacks in flight (callback mode).
    pub concurrency: usize,
    /// Pull workers (pull mode).
    pub workers: usize,
    /// Pull workers use the gRPC `Work` stream, callbacks go to a gRPC
    /// receiver (`docs/grpc.md`).
    pub grpc: bool,
}

fn failed(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::new("BENCH_FAILED", format!("{what}: {e}"))
}

/// Runs the benchmark and returns its report.
pub async fn run(setup: &ServerBench) -> Result<Value, CliError> {
    let (trigger, mut stop) = shutdown_channel();
    let (base, running) = match &setup.server {
        Some(url) => (url.trim_end_matches('/').to_owned(), None),
        None => {
            let mut config = ServerConfig {
                listen: "127.0.0.1:0".into(),
                store: setup.store.clone(),
                ..ServerConfig::default()
            };
            config.callbacks.poll_interval_ms = 20;
            config.callbacks.max_concurrency = setup.concurrency.max(1);
            let server = Server::bind(config, open_store(&setup.store).await?)
                .await
                .map_err(|e| CliError::new(e.code(), e.to_string()))?;
            let base = format!("http://{}", server.local_addr());
            let handle = tokio::spawn(server.run(async move { stop.wait().await }));
            (base, Some(handle))
        }
    };
    let result = measure(setup, &base).await;
    trigger.trigger();
    if let Some(handle) = running {
        let _ = handle.await;
    }
    let mut report = result?;
    report["server"] = json!(server_label(setup, "in-process on a fresh embedded store"));
    Ok(report)
}

/// The report's `server`: the URL measured, or the store the in-process
/// server ran on (`fresh`, when it was the benchmark's own).
fn server_label(setup: &ServerBench, fresh: &str) -> String {
    match &setup.server {
        Some(url) => url.clone(),
        None if setup.store_named => format!("in-process on {}", setup.store),
        None => fresh.to_owned(),
    }
}

/// The fields every report of `setup` starts with: what ran, and how wide.
fn described(setup: &ServerBench) -> serde_json::Map<String, Value> {
    let pull = setup.mode == Mode::Pull;
    let mut fields = serde_json::Map::new();
    fields.insert(
        "workload".into(),
        json!(if pull { "pull" } else { "callback" }),
    );
    fields.insert("jobs".into(), json!(setup.jobs));
    fields.insert(
        "concurrency".into(),
        if pull {
            Value::Null
        } else {
            json!(setup.concurrency)
        },
    );
    fields.insert(
        "workers".into(),
        if pull {
            json!(setup.workers)
        } else {
            Value::Null
        },
    );
    fields
}

/// Most pairs `--pairs` takes: each pair is two whole runs.
const MAX_PAIRS: u32 = 100;

/// Measures HTTP against gRPC `pairs` times in this one run, alternating
/// (HTTP first, so neither transport always runs on the warmer machine),
/// and reports each pair's rates and ratio and the median ratio. Without a
/// named store or server every run gets a fresh embedded store of its own,
/// so none runs on a file its predecessors grew.
pub async fn compare(setup: &ServerBench, pairs: u32) -> Result<Value, CliError> {
    if !(1..=MAX_PAIRS).contains(&pairs) {
        return Err(CliError::new(
            "INVALID_ARGUMENT",
            format!("--pairs must be 1 to {MAX_PAIRS}, not {pairs}"),
        ));
    }
    let fresh_stores = setup.server.is_none() && !setup.store_named;
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for pair in 1..=pairs {
        let mut rates = [0.0f64; 2];
        for (rate, grpc) in rates.iter_mut().zip([false, true]) {
            let mut run_setup = ServerBench {
                grpc,
                ..setup.clone()
            };
            if fresh_stores {
                let transport = if grpc { "grpc" } else { "http" };
                run_setup.store = std::path::Path::new(&setup.store)
                    .join(format!("{pair}-{transport}"))
                    .display()
                    .to_string();
            }
            // Let the previous run's background I/O settle first.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let report = run(&run_setup).await;
            if fresh_stores {
                let _ = std::fs::remove_dir_all(&run_setup.store);
            }
            *rate = report?["work_per_s"].as_f64().unwrap_or(0.0);
        }
        let ratio = if rates[0] > 0.0 {
            rates[1] / rates[0]
        } else {
            0.0
        };
        ratios.push(ratio);
        rows.push(
            json!({"pair": pair, "http_per_s": rates[0], "grpc_per_s": rates[1], "ratio": ratio}),
        );
    }
    ratios.sort_by(f64::total_cmp);
    let mid = ratios.len() / 2;
    let median = if ratios.len() % 2 == 1 {
        ratios[mid]
    } else {
        (ratios[mid - 1] + ratios[mid]) / 2.0
    };
    let mut report = described(setup);
    report.insert("pairs".into(), json!(rows));
    report.insert("ratio_median".into(), json!(median));
    report.insert("ratio_min".into(), json!(ratios.first()));
    report.insert("ratio_max".into(), json!(ratios.last()));
    report.insert(
        "server".into(),
        json!(server_label(
            setup,
            "in-process, a fresh embedded store per run"
        )),
    );
    Ok(Value::Object(report))
}

async fn measure(setup: &ServerBench, base: &str) -> Result<Value, CliError> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(256)
        .build()
        .map_err(|e| failed("HTTP client", e))?;
    let api = Api {
        base: base.to_owned(),
        client,
        token: std::env::var("RDQ_TOKEN").ok().filter(|t| !t.is_empty()),
    };
    let queue = format!(
        "bench.{}",
        rdq_envelope::TaskId::generate().to_string().to_lowercase()
    );
    let hits = Arc::new(AtomicU64::new(0));
    let mut policy = json!({"paused": true, "backoff": {"kind": "none"}, "max_attempts": 3});
    if setup.mode == Mode::Callback {
        let url = if setup.grpc {
            crate::bench_grpc::start_receiver(Arc::clone(&hits)).await?
        } else {
            start_receiver(Arc::clone(&hits)).await?
        };
        policy["callback"] =
            json!({"url": url, "concurrency": setup.concurrency.max(1), "timeout_ms": 10_000});
    }
    api.send(
        reqwest::Method::PUT,
        &format!("/v1/queues/{queue}/config"),
        &policy,
    )
    .await?;

    let submit_elapsed = submit_all(&api, &queue, setup.jobs).await?;

    let mut channels = Vec::new();
    if setup.grpc && setup.mode == Mode::Pull {
        for _ in 0..setup.workers.max(1) {
            channels.push(crate::bench_grpc::connect(&api.base).await?);
        }
    }

    let bar = progress("work", setup.jobs, false);
    let start = Instant::now();
    api.send(
        reqwest::Method::PUT,
        &format!("/v1/queues/{queue}/config"),
        &json!({"paused": false}),
    )
    .await?;
    match setup.mode {
        Mode::Callback => loop {
            let done = finished(&api, &queue).await?;
            bar.set_position(done);
            if done >= setup.jobs {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        },
        Mode::Pull => {
            let settled = Arc::new(AtomicU64::new(0));
            let done = Arc::new(tokio::sync::watch::channel(false).0);
            let mut workers = Vec::new();
            for _ in 0..setup.workers.max(1) {
                let (api, queue, settled, jobs, done) = (
                    api.clone(),
                    queue.clone(),
                    Arc::clone(&settled),
                    setup.jobs,
                    Arc::clone(&done),
                );
                let channel = channels.pop();
                workers.push(tokio::spawn(async move {
                    if let Some(channel) = channel {
                        crate::bench_grpc::work_stream_worker(
                            channel,
                            api.token.as_deref(),
                            &queue,
                            PULL_BATCH,
                            &settled,
                            jobs,
                            &done,
                        )
                        .await
                    } else {
                        pull_worker(&api, &queue, &settled, jobs).await
                    }
                }));
            }
            let watcher = {
                let (settled, bar) = (Arc::clone(&settled), bar.clone());
                tokio::spawn(async move {
                    loop {
                        bar.set_position(settled.load(Ordering::Relaxed));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                })
            };
            for w in workers {
                w.await.map_err(|e| failed("pull worker", e))??;
            }
            watcher.abort();
        }
    }
    let work_elapsed = start.elapsed();
    bar.finish_and_clear();
    let (_, counts) = api.get("/v1/queues").await?;
    let row = counts["queues"]
        .as_array()
        .and_then(|qs| qs.iter().find(|q| q["queue"] == queue.as_str()))
        .cloned()
        .unwrap_or(Value::Null);
    let mut report = described(setup);
    if let Value::Object(mut measured) = json!({
        "pull_batch": if setup.mode == Mode::Pull { json!(PULL_BATCH) } else { json!(null) },
        "transport": match (setup.mode, setup.grpc) {
            (Mode::Pull, true) => "grpc-work-stream",
            (Mode::Callback, true) => "grpc",
            _ => "http",
        },
        "submit_per_s": setup.jobs as f64 / submit_elapsed.as_secs_f64(),
        "work_per_s": setup.jobs as f64 / work_elapsed.as_secs_f64(),
        "work_seconds": work_elapsed.as_secs_f64(),
        "callbacks_received": if setup.mode == Mode::Callback { json!(hits.load(Ordering::Relaxed)) } else { json!(null) },
        "succeeded": row["succeeded"],
        "dead": row["dead"],
    }) {
        report.append(&mut measured);
    }
    Ok(Value::Object(report))
}

/// SUCCEEDED plus DEAD tasks of `queue`.
async fn finished(api: &Api, queue: &str) -> Result<u64, CliError> {
    let (_, counts) = api.get("/v1/queues").await?;
    Ok(counts["queues"]
        .as_array()
        .and_then(|qs| qs.iter().find(|q| q["queue"] == queue))
        .map_or(0, |q| {
            q["succeeded"].as_u64().unwrap_or(0) + q["dead"].as_u64().unwrap_or(0)
        }))
}

async fn submit_all(api: &Api, queue: &str, jobs: u64) -> Result<Duration, CliError> {
    let bar = progress("submit", jobs, false);
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut producers = Vec::new();
    for _ in 0..SUBMITS_IN_FLIGHT {
        let (api, queue, next, bar) = (
            api.clone(),
            queue.to_owned(),
            Arc::clone(&next),
            bar.clone(),
        );
        producers.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < jobs {
                let body = json!({
                    "queue": queue,
                    "handler_ref": "bench.noop",
                    "payload_json": {"order_id": 42, "note": "rdq bench no-op task, about one hundred bytes of JSON"}
                });
                api.send(reqwest::Method::POST, "/v1/tasks", &body).await?;
                bar.inc(1);
            }
            Ok::<(), CliError>(())
        }));
    }
    for p in producers {
        p.await.map_err(|e| failed("submit", e))??;
    }
    bar.finish_and_clear();
    Ok(start.elapsed())
}

async fn pull_worker(
    api: &Api,
    queue: &str,
    settled: &AtomicU64,
    jobs: u64,
) -> Result<(), CliError> {
    let claim_path = format!("/v1/queues/{queue}/claim");
    while settled.load(Ordering::Relaxed) < jobs {
        let (_, mut claimed) = api
            .send(
                reqwest::Method::POST,
                &claim_path,
                &json!({"max": PULL_BATCH}),
            )
            .await?;
        let tasks = match claimed["tasks"].take() {
            Value::Array(tasks) => tasks,
            _ => Vec::new(),
        };
        if tasks.is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        }
        let settles: Vec<Value> = tasks
            .iter()
            .map(|t| json!({"id": t["id"], "lease_token": t["lease_token"], "outcome": "SUCCESS"}))
            .collect();
        let (_, results) = api
            .send(
                reqwest::Method::POST,
                "/v1/settle",
                &json!({ "settles": settles }),
            )
            .await?;
        let ok = results["results"]
            .as_array()
            .map_or(0, |r| r.iter().filter(|r| r["status"] == 200).count());
        settled.fetch_add(ok as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// A minimal callback receiver on `127.0.0.1:0` answering 200 at once;
/// returns its URL.
async fn start_receiver(hits: Arc<AtomicU64>) -> Result<String, CliError> {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            hits.fetch_add(1, Ordering::Relaxed);
            async { "" }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| failed("receiver", e))?;
    let addr = listener.local_addr().map_err(|e| failed("receiver", e))?;
    tokio::spawn(async move {
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let _ = axum::serve(listener, app).await;
    });
    Ok(format!("http://{addr}/hook"))
}

#[derive(Clone)]
struct Api {
    base: String,
    client: reqwest::Client,
    token: Option<String>,
}

impl Api {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &Value,
    ) -> Result<(u16, Value), CliError> {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .json(body);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        Self::read(req.send().await, path).await
    }

    async fn get(&self, path: &str) -> Result<(u16, Value), CliError> {
        let mut req = self.client.get(format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        Self::read(req.send().await, path).await
    }

    async fn read(
        sent: Result<reqwest::Response, reqwest::Error>,
        path: &str,
    ) -> Result<(u16, Value), CliError> {
        let response = sent.map_err(|e| failed(path, e))?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(|e| failed(path, e))?;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status >= 400 {
            return Err(CliError::new(
                value["code"].as_str().unwrap_or("HTTP_ERROR"),
                format!("{path}: {}", value["detail"].as_str().unwrap_or("")),
            ));
        }
        Ok((status, value))
    }
}
