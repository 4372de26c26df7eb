//! `rdq bench`: the workloads of docs/benchmarks.md on any store, through the same
//! engine and worker loop the SDK uses.
//!
//! - `drain` (W1): submit `--jobs` no-op tasks with 64 submits in flight, then
//!   work them with `--concurrency`; reports submits/s and tasks worked/s.
//! - `latency` (W2): a steady producer at `--rate` tasks/s while workers run;
//!   reports enqueue-to-start p50/p99.
//! - `retry` (W3): every task fails once (retryable, no backoff) then succeeds.
//! - `backlog`: claim latency (claim 64, settle them) with `--backlog` pending
//!   tasks (default 1,000,000) against a queue of a few thousand, and the
//!   process's peak memory.
//! - `callback` and `pull`: rdq-server over HTTP (see `bench_server`):
//!   callback dispatch to a loopback receiver, and pull workers that claim 64
//!   and settle each batch in one call.
//! - `fairness`, `flow-exact` and `flow-limit`: flow control (see
//!   `bench_flow`).
//! - `cancel`: how soon a running task's worker on one node hears of a
//!   cancel asked on another (see `bench_cancel`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rdq_engine::{
    Backoff, Engine, FailureKind, QueuePolicy, Settlement, SubmitRequest, SystemClock,
};
use rdq_envelope::{ErrorInfo, TaskId};
use rdq_runtime::{
    Prefetch, ReaperConfig, Task, Worker, WorkerConfig, run_reaper, shutdown_channel,
};
use serde_json::json;
use tokio::sync::Mutex;

use crate::CliError;
use crate::bench_cancel;
use crate::bench_flow;
use crate::bench_server;
use crate::bench_source;
use crate::output::outln;
use crate::stores::{Registry, open_store};

/// Submits kept in flight during the submit phase (docs/benchmarks.md, W1).
const SUBMITS_IN_FLIGHT: usize = 64;

/// The workloads of docs/benchmarks.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// W1: enqueue everything, then drain it.
    Drain,
    /// W2: a steady producer; enqueue-to-start latency.
    Latency,
    /// W3: every task fails once, then succeeds.
    Retry,
    /// Claim latency with a large backlog against a small queue.
    Backlog,
    /// rdq-server pushing tasks to a loopback HTTP receiver (callback dispatch).
    Callback,
    /// Pull workers over HTTP: claim 64, settle the batch in one call.
    Pull,
    /// Weighted fairness: a loud key's backlog against a quiet key.
    Fairness,
    /// Per-key and global limits under load: overruns observed.
    FlowExact,
    /// A global concurrency limit's cost against the same queue unlimited.
    FlowLimit,
    /// How soon a running task's worker on `--worker-server` hears of a
    /// cancel asked on `--server`: on a gRPC Work stream, and at an HTTP
    /// worker's lease extension.
    Cancel,
    /// The sources of `--config`: records already waiting in their
    /// streams turned into tasks, per second.
    Source,
}

/// Arguments of `rdq bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Store to measure: a directory (embedded store), `memory:`, or a URL.
    /// Default: a fresh embedded store in a temporary directory, removed afterwards.
    #[arg(long, env = "RDQ_STORE")]
    store: Option<String>,
    /// Which workload.
    #[arg(long, value_enum, default_value = "drain")]
    workload: Workload,
    /// Tasks to run.
    #[arg(long, default_value_t = 20_000)]
    jobs: u64,
    /// Handlers running at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Claimed tasks kept ready beyond the free handler slots (the worker's
    /// `prefetch`; graphile-worker's local queue is the analogue). Default:
    /// the worker's own, adaptive (50 ms of work at its start rate, at most
    /// 1,024); 0 claims only for free slots.
    #[arg(long)]
    prefetch: Option<usize>,
    /// Producer rate for `latency`, tasks per second.
    #[arg(long, default_value_t = 1_000)]
    rate: u64,
    /// For `callback` and `pull`: a running rdq-server to measure (default:
    /// one started in this process on the store of `--store`).
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// For `cancel`: the node the worker takes its tasks from (`--server`
    /// submits and cancels them); both on one shared store.
    #[arg(long, value_name = "URL")]
    worker_server: Option<String>,
    /// For `cancel`: the HTTP worker's lease-extension interval.
    #[arg(long, default_value_t = 200, value_name = "MS")]
    extend_ms: u64,
    /// HTTP pull workers for `pull`, each claiming 64 at a time.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// For `pull`: the workers use the gRPC `Work` stream (128 credits,
    /// settles batched on the stream) instead of HTTP claim and batch settle.
    /// For `callback`: the receiver is a gRPC `rdq.v1.Handler` (a
    /// `grpc://` target) instead of an HTTP endpoint.
    #[arg(long)]
    grpc: bool,
    /// For `callback` and `pull`: measure HTTP against gRPC in this one run,
    /// N alternating pairs (HTTP first), each run on a fresh store unless
    /// `--store` or `--server` names one; reports every pair's rates, its
    /// ratio and the median ratio (docs/benchmarks.md).
    #[arg(long, value_name = "N", conflicts_with = "grpc")]
    pairs: Option<u32>,
    /// For `flow-exact` and `flow-limit`: store instances (nodes) working
    /// the queue at once, each with its own connections (a shared store
    /// only: PostgreSQL, Redis).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// For `flow-limit`: how long each handler works, in milliseconds
    /// (0: a no-op, the worst case for a limit's overhead).
    #[arg(long, default_value_t = 0, value_name = "MS")]
    handler_ms: u64,
    /// Pending tasks behind the measured claims, for `backlog`.
    #[arg(long, default_value_t = 1_000_000)]
    backlog: u64,
    /// For `drain` and `retry`: every submit carries a unique
    /// key of its own (hold `until_finished`, docs/uniqueness.md), to
    /// measure what uniqueness costs a submit against the same run without.
    #[arg(long)]
    unique: bool,
    /// For `source`: a configuration file whose `[[sources]]` are read
    /// (`--jobs` records in all).
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    json: bool,
}

/// Runs `rdq bench`.
pub fn run(args: BenchArgs) -> Result<(), CliError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new("IO_ERROR", format!("cannot start the runtime: {e}")))?;
    let temp_dir = match &args.store {
        Some(_) => None,
        None => Some(std::env::temp_dir().join(format!(
            "rdq-bench-{}",
            TaskId::generate().to_string().to_lowercase()
        ))),
    };
    let spec = match (&args.store, &temp_dir) {
        (Some(s), _) => s.clone(),
        (None, Some(dir)) => dir.display().to_string(),
        (None, None) => String::new(),
    };
    let result = runtime.block_on(bench(&args, &spec));
    if let Some(dir) = temp_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    let report = result?;
    if args.json
        || matches!(
            args.workload,
            Workload::Backlog
                | Workload::Callback
                | Workload::Pull
                | Workload::Fairness
                | Workload::FlowExact
                | Workload::FlowLimit
                | Workload::Source
        )
    {
        outln!("{report}")?;
    } else {
        outln!(
            "{} on {}: {} jobs, concurrency {}\n  submits/s  {:>10.0}\n  worked/s   {:>10.0}\n  enqueue-to-start p50 {:.3} ms, p99 {:.3} ms",
            report["workload"].as_str().unwrap_or(""),
            report["store"].as_str().unwrap_or(""),
            args.jobs,
            args.concurrency,
            report["submit_per_s"].as_f64().unwrap_or(0.0),
            report["work_per_s"].as_f64().unwrap_or(0.0),
            report["p50_ms"].as_f64().unwrap_or(0.0),
            report["p99_ms"].as_f64().unwrap_or(0.0),
        )?;
    }
    Ok(())
}

struct Shared {
    epoch: Instant,
    started: AtomicU64,
    latencies_us: Mutex<Vec<u64>>,
    workload: Workload,
}

fn payload(epoch: Instant) -> Vec<u8> {
    // About 100 bytes of JSON, carrying the submit instant for latency.
    let t = epoch.elapsed().as_micros();
    format!(r#"{{"submitted_us":{t:>16},"order_id":42,"note":"rdq bench no-op task, about one hundred bytes"}}"#)
        .into_bytes()
}

fn submitted_us(task: &Task) -> Option<u64> {
    let bytes = task.envelope().payload_bytes();
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("submitted_us")?.as_u64()
}

async fn handle(shared: Arc<Shared>, task: Arc<Task>) -> Settlement {
    if (task.envelope().attempt_count == 1 || shared.workload != Workload::Retry)
        && let Some(t0) = submitted_us(&task)
    {
        let now = shared.epoch.elapsed().as_micros() as u64;
        shared
            .latencies_us
            .lock()
            .await
            .push(now.saturating_sub(t0));
    }
    shared.started.fetch_add(1, Ordering::Relaxed);
    if shared.workload == Workload::Retry && task.envelope().attempt_count == 1 {
        return Settlement::Failure {
            error: ErrorInfo::new("bench.Flaky", "fails once by design"),
            kind: FailureKind::Retryable,
        };
    }
    Settlement::Success
}

fn progress(args: &BenchArgs, label: &str) -> ProgressBar {
    let bar = ProgressBar::new(args.jobs);
    if args.json || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    if let Ok(style) = ProgressStyle::with_template("{msg:>8} [{bar:40}] {pos}/{len} {per_sec}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(label.to_owned());
    bar
}

async fn submit_all(
    engine: &Engine,
    queue: &str,
    args: &BenchArgs,
    epoch: Instant,
) -> Result<Duration, CliError> {
    let bar = progress(args, "submit");
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut producers = Vec::new();
    for _ in 0..SUBMITS_IN_FLIGHT {
        let (engine, queue, next, bar, jobs, unique) = (
            engine.clone(),
            queue.to_owned(),
            Arc::clone(&next),
            bar.clone(),
            args.jobs,
            args.unique,
        );
        producers.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= jobs {
                    break;
                }
                let mut request = request(&queue, epoch);
                if unique {
                    request.unique = Some(rdq_engine::unique::UniqueRequest {
                        key: Some(format!("bench-{n}")),
                        ..rdq_engine::unique::UniqueRequest::default()
                    });
                }
                engine.submit(request).await?;
                bar.inc(1);
            }
            Ok::<(), rdq_engine::EngineError>(())
        }));
    }
    for p in producers {
        p.await
            .map_err(|e| CliError::new("BENCH_FAILED", e.to_string()))?
            .map_err(|e| CliError::new(e.code(), e.to_string()))?;
    }
    bar.finish_and_clear();
    Ok(start.elapsed())
}

fn request(queue: &str, epoch: Instant) -> SubmitRequest {
    SubmitRequest {
        queue: queue.to_owned(),
        handler_ref: "bench.noop".to_owned(),
        payload: payload(epoch),
        payload_content_type: "application/json".to_owned(),
        ..SubmitRequest::default()
    }
}

async fn bench(args: &BenchArgs, spec: &str) -> Result<serde_json::Value, CliError> {
    if args.workload == Workload::Source {
        let Some(config) = &args.config else {
            return Err(CliError::new(
                "INVALID_ARGUMENT",
                "--workload source needs --config FILE with [[sources]]",
            ));
        };
        return bench_source::run(spec, config, args.jobs).await;
    }
    if args.workload == Workload::Cancel {
        let (Some(server), Some(worker_server)) = (&args.server, &args.worker_server) else {
            return Err(CliError::new(
                "INVALID_ARGUMENT",
                "--workload cancel needs --server and --worker-server: two nodes on one store",
            ));
        };
        let setup = bench_cancel::CancelBench {
            server: server.trim_end_matches('/').to_owned(),
            worker_server: worker_server.trim_end_matches('/').to_owned(),
            jobs: args.jobs,
            concurrency: args.concurrency,
            extend_ms: args.extend_ms,
        };
        return bench_cancel::run(&setup).await;
    }
    if matches!(args.workload, Workload::Callback | Workload::Pull) {
        let mode = if args.workload == Workload::Callback {
            bench_server::Mode::Callback
        } else {
            bench_server::Mode::Pull
        };
        let setup = bench_server::ServerBench {
            mode,
            server: args.server.clone(),
            store: spec.to_owned(),
            store_named: args.store.is_some(),
            jobs: args.jobs,
            concurrency: args.concurrency,
            workers: args.workers,
            grpc: args.grpc,
        };
        return match args.pairs {
            Some(pairs) => bench_server::compare(&setup, pairs).await,
            None => bench_server::run(&setup).await,
        };
    }
    let flow = bench_flow::FlowBench {
        spec: spec.to_owned(),
        jobs: args.jobs,
        concurrency: args.concurrency,
        nodes: args.nodes,
        pairs: args.pairs.unwrap_or(3),
        handler_ms: args.handler_ms,
    };
    if args.handler_ms > 0 && args.workload != Workload::FlowLimit {
        return Err(CliError::new(
            "INVALID_ARGUMENT",
            "--handler-ms applies to --workload flow-limit",
        ));
    }
    match args.workload {
        Workload::Fairness => return bench_flow::fairness(&flow).await,
        Workload::FlowExact => return bench_flow::exact(&flow).await,
        Workload::FlowLimit => return bench_flow::limit(&flow).await,
        _ => {}
    }
    if args.pairs.is_some() {
        return Err(CliError::new(
            "INVALID_ARGUMENT",
            "--pairs applies to --workload callback and pull (HTTP against gRPC) and flow-limit",
        ));
    }
    let store = open_store(spec).await?;
    let engine = Engine::new(store, Arc::new(SystemClock));
    if args.workload == Workload::Backlog {
        return backlog(&engine, args, spec).await;
    }
    let queue = format!("bench.{}", TaskId::generate().to_string().to_lowercase());
    let policy = QueuePolicy {
        backoff: Backoff::None,
        max_attempts: 3,
        ..QueuePolicy::default()
    };
    engine
        .set_policy(&queue, &policy)
        .await
        .map_err(|e| CliError::new(e.code(), e.to_string()))?;
    let epoch = Instant::now();
    let shared = Arc::new(Shared {
        epoch,
        started: AtomicU64::new(0),
        latencies_us: Mutex::new(Vec::with_capacity(args.jobs as usize)),
        workload: args.workload,
    });
    let config = WorkerConfig {
        queues: vec![queue.clone()],
        concurrency: args.concurrency,
        claim_batch: args.concurrency,
        prefetch: args.prefetch.map_or(Prefetch::Adaptive, Prefetch::Fixed),
        ..WorkerConfig::default()
    };
    let expected_settles = match args.workload {
        Workload::Retry => args.jobs * 2,
        _ => args.jobs,
    };

    let (trigger, shutdown) = shutdown_channel();
    let reaper = tokio::spawn(run_reaper(
        engine.clone(),
        ReaperConfig::default(),
        shutdown.clone(),
    ));
    let handler_shared = Arc::clone(&shared);
    let worker = Worker::new(engine.clone(), config, move |task: Arc<Task>| {
        handle(Arc::clone(&handler_shared), task)
    });
    let stats = worker.stats();

    let (submit_elapsed, work_elapsed) = match args.workload {
        Workload::Drain
        | Workload::Fairness
        | Workload::FlowExact
        | Workload::FlowLimit
        | Workload::Retry
        | Workload::Backlog
        | Workload::Callback
        | Workload::Pull
        | Workload::Cancel
        | Workload::Source => {
            let submit_elapsed = submit_all(&engine, &queue, args, epoch).await?;
            let bar = progress(args, "work");
            let start = Instant::now();
            let running = tokio::spawn(worker.run(shutdown.clone()));
            wait_for(&stats.settled, expected_settles, &bar).await;
            let work_elapsed = start.elapsed();
            trigger.trigger();
            let _ = running.await;
            (submit_elapsed, work_elapsed)
        }
        Workload::Latency => {
            let running = tokio::spawn(worker.run(shutdown.clone()));
            let bar = progress(args, "latency");
            let start = Instant::now();
            let mut tick =
                tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate.max(1) as f64));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            for _ in 0..args.jobs {
                tick.tick().await;
                let (engine, queue) = (engine.clone(), queue.clone());
                tokio::spawn(async move { engine.submit(request(&queue, epoch)).await });
            }
            let submit_elapsed = start.elapsed();
            wait_for(&stats.settled, expected_settles, &bar).await;
            let work_elapsed = start.elapsed();
            trigger.trigger();
            let _ = running.await;
            (submit_elapsed, work_elapsed)
        }
    };
    let _ = reaper.await;

    let mut latencies = std::mem::take(&mut *shared.latencies_us.lock().await);
    latencies.sort_unstable();
    let pct = |p: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[i] as f64 / 1000.0
    };
    // The physical limit group commit is measured against: this disk's
    // fsync rate, in the store's own directory when it has one.
    let fsync_dir = Registry::compiled()
        .directory(spec)
        .map_or_else(std::env::temp_dir, std::path::Path::to_path_buf);
    let fsync_per_s = fsync_rate(&fsync_dir);
    let submit_per_s = args.jobs as f64 / submit_elapsed.as_secs_f64();
    Ok(json!({
        "workload": format!("{:?}", args.workload).to_lowercase(),
        "fsync_per_s": fsync_per_s,
        "submit_per_fsync": if fsync_per_s > 0.0 { json!(submit_per_s / fsync_per_s) } else { json!(null) },
        "store": if args.store.is_some() { spec.to_owned() } else { "embedded (temporary directory)".to_owned() },
        "jobs": args.jobs,
        "concurrency": args.concurrency,
        "prefetch": args.prefetch.map_or(json!("adaptive"), |n| json!(n)),
        "rate": if args.workload == Workload::Latency { json!(args.rate) } else { json!(null) },
        "submit_per_s": submit_per_s,
        "work_per_s": args.jobs as f64 / work_elapsed.as_secs_f64(),
        "executions": shared.started.load(Ordering::Relaxed),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "settle_errors": stats.settle_errors.load(Ordering::Relaxed),
    }))
}

async fn wait_for(counter: &AtomicU64, target: u64, bar: &ProgressBar) {
    loop {
        let n = counter.load(Ordering::Relaxed);
        bar.set_position(n.min(target));
        if n >= target {
            bar.finish_and_clear();
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Claims measured per queue in the `backlog` workload.
const BACKLOG_CLAIMS: usize = 300;
/// Tasks per claim in the `backlog` workload.
const BACKLOG_BATCH: usize = 64;

fn engine_err(e: rdq_engine::EngineError) -> CliError {
    CliError::new(e.code(), e.to_string())
}

/// Fills `queue` with `n` tasks through `submit_many` in batches of 1,000.
async fn fill(
    engine: &Engine,
    queue: &str,
    n: u64,
    epoch: Instant,
    bar: &ProgressBar,
) -> Result<(), CliError> {
    let mut left = n;
    while left > 0 {
        let batch = left.min(1_000);
        let reqs = (0..batch).map(|_| request(queue, epoch)).collect();
        for r in engine.submit_many(reqs).await {
            r.map_err(engine_err)?;
        }
        left -= batch;
        bar.inc(batch);
    }
    Ok(())
}

/// p50 and p99 of claim latency (ms) over `BACKLOG_CLAIMS` claim+settle rounds.
async fn claim_latency(engine: &Engine, queue: &str) -> Result<(f64, f64), CliError> {
    let mut samples = Vec::with_capacity(BACKLOG_CLAIMS);
    for _ in 0..BACKLOG_CLAIMS {
        let start = Instant::now();
        let claimed = engine
            .claim(queue, BACKLOG_BATCH, None)
            .await
            .map_err(engine_err)?;
        samples.push(start.elapsed().as_secs_f64() * 1000.0);
        let settles = claimed
            .into_iter()
            .map(|c| rdq_engine::SettleRequest {
                envelope: c.envelope,
                token: c.token,
                settlement: Settlement::Success,
            })
            .collect();
        for r in engine.settle_many(settles).await {
            r.map_err(engine_err)?;
        }
    }
    samples.sort_by(f64::total_cmp);
    let at =
        |p: f64| samples[((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1];
    Ok((at(0.50), at(0.99)))
}

/// Peak resident memory of this process, in MiB (Linux; 0 elsewhere).
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn backlog(
    engine: &Engine,
    args: &BenchArgs,
    spec: &str,
) -> Result<serde_json::Value, CliError> {
    let epoch = Instant::now();
    let run = TaskId::generate().to_string().to_lowercase();
    let (small, large) = (format!("bench.small.{run}"), format!("bench.backlog.{run}"));
    let small_size = (BACKLOG_CLAIMS * BACKLOG_BATCH) as u64;
    let bar = progress(
        &BenchArgs {
            jobs: small_size + args.backlog,
            ..args.clone()
        },
        "fill",
    );
    fill(engine, &small, small_size, epoch, &bar).await?;
    let (small_p50, small_p99) = claim_latency(engine, &small).await?;
    fill(engine, &large, args.backlog + small_size, epoch, &bar).await?;
    bar.finish_and_clear();
    let (large_p50, large_p99) = claim_latency(engine, &large).await?;
    Ok(json!({
        "workload": "backlog",
        "store": if args.store.is_some() { spec.to_owned() } else { "embedded (temporary directory)".to_owned() },
        "backlog": args.backlog,
        "claim_batch": BACKLOG_BATCH,
        "claims_measured": BACKLOG_CLAIMS,
        "small_queue_claim_p50_ms": small_p50,
        "small_queue_claim_p99_ms": small_p99,
        "backlog_claim_p50_ms": large_p50,
        "backlog_claim_p99_ms": large_p99,
        "p99_ratio": large_p99 / small_p99,
        "peak_rss_mib": peak_rss_mib(),
    }))
}

/// Small writes each followed by `fdatasync`, for one second: the disk's fsync rate.
fn fsync_rate(dir: &std::path::Path) -> f64 {
    use std::io::Write;
    let path = dir.join(format!("rdq-fsync-probe-{}", std::process::id()));
    let Ok(mut file) = std::fs::File::create(&path) else {
        return 0.0;
    };
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_secs(1) {
        if file.write_all(&[0u8; 512]).is_err() || file.sync_data().is_err() {
            break;
        }
        n += 1;
    }
    let _ = std::fs::remove_file(&path);
    n as f64 / start.elapsed().as_secs_f64()
}
