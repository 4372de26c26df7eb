//! `rdq bench --workload cancel`: how soon a running task's worker hears of
//! a cancel asked on another node (docs/benchmarks.md, "Cancelling running
//! tasks").
//!
//! Two servers on one store: tasks are submitted and cancelled through
//! `--server` (node A) and worked on `--worker-server` (node B). Each task
//! is cancelled once its worker holds it; the latency of one cancel is from
//! just before the cancel call is sent to node A until node B's worker
//! learns of it:
//!
//! - `stream`: a gRPC `Work` stream on node B; the worker learns of it
//!   from the `WorkCancel` the server pushes;
//! - `extension`: an HTTP worker on node B extending each lease every
//!   `--extend-ms`; it learns of it from an extension's answer
//!   (`cancel_requested`), so the bound is one extension interval (plus
//!   the extension's round trip). Measured from the cancel's answer (the
//!   request is stored), not from its start.
//!
//! Each cancelled task is then settled as a failure (DEAD, `CANCELLED`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdq_grpc::pb;
use serde_json::{Value, json};
use tokio::sync::{Mutex, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use crate::CliError;
use crate::bench_grpc::connect;

fn failed(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::new("BENCH_FAILED", format!("{what}: {e}"))
}

/// What to measure.
pub struct CancelBench {
    /// Node A: submits and cancels.
    pub server: String,
    /// Node B: the worker.
    pub worker_server: String,
    /// Cancels to measure per path.
    pub jobs: u64,
    /// Tasks held (and cancelled) at once.
    pub concurrency: usize,
    /// The HTTP worker's extension interval.
    pub extend_ms: u64,
}

/// Latencies in microseconds, sorted, as a summary.
fn summary(mut micros: Vec<u64>) -> Value {
    micros.sort_unstable();
    let at = |q: f64| {
        let i = ((micros.len() as f64 - 1.0) * q).round() as usize;
        micros.get(i).copied().unwrap_or(0) as f64 / 1000.0
    };
    json!({
        "count": micros.len(),
        "p50_ms": at(0.5),
        "p95_ms": at(0.95),
        "p99_ms": at(0.99),
        "max_ms": at(1.0),
    })
}

/// Runs both paths; one JSON object with each path's latencies.
pub async fn run(setup: &CancelBench) -> Result<Value, CliError> {
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .map_err(|e| failed("HTTP client", e))?;
    let stream = stream_path(setup, &http).await?;
    let extension = extension_path(setup, &http).await?;
    Ok(json!({
        "workload": "cancel",
        "server": setup.server,
        "worker_server": setup.worker_server,
        "stream": stream,
        "extension": extension,
        "extend_ms": setup.extend_ms,
    }))
}

fn queue_name(path: &str) -> String {
    format!(
        "bench.cancel.{path}.{}",
        rdq_envelope::TaskId::generate().to_string().to_lowercase()
    )
}

async fn submit_all(
    http: &reqwest::Client,
    base: &str,
    queue: &str,
    n: u64,
) -> Result<(), CliError> {
    let mut left = n;
    while left > 0 {
        let take = left.min(1000);
        let tasks: Vec<Value> = (0..take)
            .map(|i| json!({"queue": queue, "handler_ref": "bench.cancel", "payload_json": i}))
            .collect();
        let r = http
            .post(format!("{base}/v1/tasks/batch"))
            .json(&json!({"tasks": tasks}))
            .send()
            .await
            .map_err(|e| failed("submit", e))?;
        if !r.status().is_success() {
            return Err(failed("submit", r.status()));
        }
        left -= take;
    }
    Ok(())
}

async fn cancel(http: &reqwest::Client, base: &str, queue: &str, id: &str) -> Result<(), CliError> {
    let r = http
        .post(format!("{base}/v1/queues/{queue}/cancel"))
        .json(&json!({"ids": [id], "message": "bench"}))
        .send()
        .await
        .map_err(|e| failed("cancel", e))?;
    let body: Value = r.json().await.map_err(|e| failed("cancel answer", e))?;
    if body["running"].as_array().is_none_or(Vec::is_empty) {
        return Err(failed(
            "cancel",
            format!("the task was not running: {body}"),
        ));
    }
    Ok(())
}

/// The gRPC `Work` stream on node B; cancels through node A.
async fn stream_path(setup: &CancelBench, http: &reqwest::Client) -> Result<Value, CliError> {
    let queue = queue_name("stream");
    let channel = connect(&setup.worker_server).await?;
    let (tx, rx) = mpsc::channel(256);
    let credits = u32::try_from(setup.concurrency.max(1)).unwrap_or(64);
    tx.send(pb::WorkRequest {
        kind: Some(pb::work_request::Kind::Hello(pb::WorkHello {
            queues: vec![queue.clone()],
            credits,
            lease_ms: Some(60_000),
            bare_acks: true,
            task_batches: false,
        })),
    })
    .await
    .map_err(|e| failed("Work stream", e))?;
    let mut inbound = pb::workers_client::WorkersClient::new(channel)
        .work(tonic::Request::new(ReceiverStream::new(rx)))
        .await
        .map_err(|e| failed("Work stream", e))?
        .into_inner();
    submit_all(http, &setup.server, &queue, setup.jobs).await?;
    let asked: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let mut held: HashMap<String, String> = HashMap::new();
    let mut latencies = Vec::with_capacity(setup.jobs as usize);
    let mut seq = 0u64;
    while (latencies.len() as u64) < setup.jobs {
        let msg = tokio::time::timeout(Duration::from_secs(30), inbound.message())
            .await
            .map_err(|_| failed("Work stream", "nothing for 30 s"))?
            .map_err(|e| failed("Work stream", e))?
            .ok_or_else(|| failed("Work stream", "ended"))?;
        match msg.kind {
            Some(pb::work_response::Kind::Task(t)) => {
                held.insert(t.id.clone(), t.lease_token.clone());
                let (http, base, queue, asked) = (
                    http.clone(),
                    setup.server.clone(),
                    queue.clone(),
                    Arc::clone(&asked),
                );
                tokio::spawn(async move {
                    asked.lock().await.insert(t.id.clone(), Instant::now());
                    if let Err(e) = cancel(&http, &base, &queue, &t.id).await {
                        eprintln!("{}", e.message);
                    }
                });
            }
            // Not asked for (`task_batches` is off).
            Some(pb::work_response::Kind::Tasks(_)) => {}
            Some(pb::work_response::Kind::Cancel(c)) => {
                let Some(t0) = asked.lock().await.remove(&c.id) else {
                    continue;
                };
                latencies.push(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
                let Some(lease_token) = held.remove(&c.id) else {
                    continue;
                };
                seq += 1;
                tx.send(pb::WorkRequest {
                    kind: Some(pb::work_request::Kind::Settle(pb::WorkSettle {
                        seq,
                        settles: vec![pb::SettleRequest {
                            id: c.id,
                            lease_token,
                            outcome: pb::ReportedOutcome::ReportedRetryableFailure as i32,
                            error: Some(pb::ReportedError {
                                r#type: "rdq.Cancelled".into(),
                                message: "stopped".into(),
                                detail_json: None,
                                stack: None,
                            }),
                            defer_ms: None,
                            throttle: 0,
                        }],
                    })),
                })
                .await
                .map_err(|e| failed("Work stream", e))?;
            }
            Some(pb::work_response::Kind::Ack(_)) | None => {}
        }
    }
    Ok(summary(latencies))
}

/// An HTTP worker on node B extending its leases every `extend_ms`;
/// cancels through node A.
async fn extension_path(setup: &CancelBench, http: &reqwest::Client) -> Result<Value, CliError> {
    let queue = queue_name("extension");
    submit_all(http, &setup.server, &queue, setup.jobs).await?;
    let mut latencies = Vec::with_capacity(setup.jobs as usize);
    let every = Duration::from_millis(setup.extend_ms.max(1));
    while (latencies.len() as u64) < setup.jobs {
        let r = http
            .post(format!("{}/v1/queues/{queue}/claim", setup.worker_server))
            .json(&json!({"max": setup.concurrency.max(1), "lease_ms": 60000}))
            .send()
            .await
            .map_err(|e| failed("claim", e))?;
        let body: Value = r.json().await.map_err(|e| failed("claim answer", e))?;
        let tasks = body["tasks"].as_array().cloned().unwrap_or_default();
        if tasks.is_empty() {
            return Err(failed("claim", "no task left to cancel"));
        }
        let mut handles = Vec::with_capacity(tasks.len());
        for t in tasks {
            let (http, a, b, queue) = (
                http.clone(),
                setup.server.clone(),
                setup.worker_server.clone(),
                queue.clone(),
            );
            handles.push(tokio::spawn(async move {
                let id = t["id"].as_str().unwrap_or_default().to_owned();
                let token = t["lease_token"].clone();
                // The worker's extensions run on their own beat, from the
                // claim; the cancel comes at a random point of it.
                let worker = tokio::spawn({
                    let (http, b, id, token) = (http.clone(), b.clone(), id.clone(), token.clone());
                    async move {
                        loop {
                            tokio::time::sleep(every).await;
                            let r = http
                                .post(format!("{b}/v1/tasks/{id}/lease"))
                                .json(&json!({"lease_token": token, "extend_ms": 60000}))
                                .send()
                                .await
                                .map_err(|e| failed("extend", e))?;
                            let env: Value =
                                r.json().await.map_err(|e| failed("extend answer", e))?;
                            if !env["cancel_requested"].is_null() {
                                return Ok::<Instant, CliError>(Instant::now());
                            }
                        }
                    }
                });
                let jitter = Duration::from_micros(u64::from(rand_below(
                    u32::try_from(every.as_micros()).unwrap_or(1),
                )));
                tokio::time::sleep(jitter).await;
                cancel(&http, &a, &queue, &id).await?;
                // From the cancel's answer: the request is stored; the
                // worker's next extension after it must see it.
                let t0 = Instant::now();
                let heard = worker.await.map_err(|e| failed("extension worker", e))??;
                let _ = http
                    .post(format!("{b}/v1/tasks/{id}/settle"))
                    .json(
                        &json!({"lease_token": token, "outcome": "RETRYABLE_FAILURE",
                        "error": {"type": "rdq.Cancelled", "message": "stopped"}}),
                    )
                    .send()
                    .await;
                Ok::<u64, CliError>(
                    u64::try_from(heard.saturating_duration_since(t0).as_micros())
                        .unwrap_or(u64::MAX),
                )
            }));
        }
        for h in handles {
            latencies.push(h.await.map_err(|e| failed("extension path", e))??);
        }
    }
    latencies.truncate(setup.jobs as usize);
    Ok(summary(latencies))
}

/// A number below `n` (at least 1), from the clock's nanoseconds: where in
/// an extension interval the cancel lands.
fn rand_below(n: u32) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    nanos % n.max(1)
}
