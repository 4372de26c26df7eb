//! `rdq bench` workloads for flow control (docs/flow-control.md,
//! docs/benchmarks.md), each through the same engine and worker loop the
//! SDK uses, with `--nodes` store instances (own connections, as separate
//! `rdq serve` nodes have) where the store is shared:
//!
//! - `fairness`: `--jobs` tasks of one flow key, then 100 of another, all
//!   queued before the workers start, weighted fairness with equal weights,
//!   `--concurrency` handlers: how much of the loud key's backlog ran before
//!   the quiet key's last task started.
//! - `flow-exact`: `--jobs` tasks over 16 flow keys under a per-key limit of
//!   4 and a global limit of 48, `--concurrency` handlers on each node,
//!   once with weighted fairness and once in claim order: the most tasks of
//!   one key (and of the queue) seen running at once, and how many starts
//!   exceeded a limit.
//! - `flow-limit`: tasks worked per second with a global concurrency limit
//!   equal to `--concurrency` (each node's worker as wide as the limit)
//!   against the same queue unlimited with `--concurrency` handlers in all,
//!   in `--pairs` pairs that take turns at going first, each handler working
//!   `--handler-ms`.
//!
//! Workers here claim no task ahead of their free handlers (prefetch 0):
//! limits count claimed tasks, so both sides of a comparison hold the same.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdq_engine::{Backoff, Engine, QueuePolicy, Settlement, SubmitRequest, SystemClock};
use rdq_envelope::TaskId;
use rdq_runtime::{
    Prefetch, ReaperConfig, Task, Worker, WorkerConfig, run_reaper, shutdown_channel,
};
use serde_json::{Value, json};

use crate::CliError;
use crate::stores::open_store;

/// The quiet key's tasks in `fairness`.
const QUIET_TASKS: u64 = 100;
/// Flow keys in `flow-exact`.
const EXACT_KEYS: u64 = 16;
/// The per-key limit in `flow-exact`.
const EXACT_KEY_LIMIT: u64 = 4;
/// The global limit in `flow-exact`.
const EXACT_GLOBAL_LIMIT: u64 = 48;

/// What one flow workload needs from `rdq bench`'s arguments.
pub struct FlowBench {
    /// The store, opened once per node.
    pub spec: String,
    /// Tasks to run.
    pub jobs: u64,
    /// Handlers per node (`fairness`, `flow-exact`) or in all (`flow-limit`).
    pub concurrency: usize,
    /// Store instances working the queue at once.
    pub nodes: usize,
    /// Alternating pairs for `flow-limit`.
    pub pairs: u32,
    /// How long each `flow-limit` handler works (0: a no-op).
    pub handler_ms: u64,
}

fn failed(e: impl std::fmt::Display) -> CliError {
    CliError::new("BENCH_FAILED", e.to_string())
}

fn engine_error(e: rdq_engine::EngineError) -> CliError {
    CliError::new(e.code(), e.to_string())
}

/// `nodes` engines, each over its own instance of the store (an in-process
/// store such as `memory:` cannot be shared: one node).
async fn nodes(spec: &str, nodes: usize) -> Result<Vec<Engine>, CliError> {
    let nodes = if spec.starts_with("memory:") || !spec.contains("://") {
        1
    } else {
        nodes.max(1)
    };
    let mut engines = Vec::with_capacity(nodes);
    for _ in 0..nodes {
        engines.push(Engine::new(open_store(spec).await?, Arc::new(SystemClock)));
    }
    Ok(engines)
}

/// A fresh queue under `flow` (a `flow` section document).
async fn queue_with(engine: &Engine, flow: Value) -> Result<String, CliError> {
    let queue = format!(
        "bench.flow.{}",
        TaskId::generate().to_string().to_lowercase()
    );
    let policy = QueuePolicy::from_json(json!({ "flow": flow })).map_err(engine_error)?;
    let policy = QueuePolicy {
        backoff: Backoff::None,
        max_attempts: 3,
        ..policy
    };
    engine
        .set_policy(&queue, &policy)
        .await
        .map_err(engine_error)?;
    Ok(queue)
}

/// Submits `n` tasks of flow key `key` (none for `None`), 100 per call.
async fn submit(engine: &Engine, queue: &str, key: Option<String>, n: u64) -> Result<(), CliError> {
    let task = SubmitRequest {
        queue: queue.to_owned(),
        handler_ref: "bench.noop".to_owned(),
        payload: br#"{"note":"rdq bench flow task"}"#.to_vec(),
        payload_content_type: "application/json".to_owned(),
        flow_key: key,
        ..SubmitRequest::default()
    };
    let mut left = n;
    while left > 0 {
        let batch = left.min(100);
        left -= batch;
        for r in engine.submit_many(vec![task.clone(); batch as usize]).await {
            r.map_err(engine_error)?;
        }
    }
    Ok(())
}

/// Runs `handler` on every node with `concurrency` handlers each until
/// `total` tasks are settled; returns the time it took.
async fn work<H, F>(
    engines: &[Engine],
    queue: &str,
    concurrency: &[usize],
    total: u64,
    handler: H,
) -> Result<Duration, CliError>
where
    H: Fn(Arc<Task>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Settlement> + Send + 'static,
{
    let (trigger, shutdown) = shutdown_channel();
    let mut running = Vec::new();
    let mut reapers = Vec::new();
    let mut settled = Vec::new();
    let start = Instant::now();
    for (engine, &width) in engines.iter().zip(concurrency) {
        // No task claimed ahead on either side of a comparison: under a
        // concurrency limit every claimed task is one of the limit's, so
        // the unlimited queue is measured at the same claim depth (the
        // worker's adaptive prefetch claims none ahead on a flow-controlled
        // queue anyway).
        let config = WorkerConfig {
            queues: vec![queue.to_owned()],
            concurrency: width,
            claim_batch: width,
            prefetch: Prefetch::Fixed(0),
            ..WorkerConfig::default()
        };
        let worker = Worker::new(engine.clone(), config, handler.clone());
        settled.push(worker.stats());
        running.push(tokio::spawn(worker.run(shutdown.clone())));
        reapers.push(tokio::spawn(run_reaper(
            engine.clone(),
            ReaperConfig::default(),
            shutdown.clone(),
        )));
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let done: u64 = settled
            .iter()
            .map(|s| s.settled.load(Ordering::Relaxed))
            .sum();
        if done >= total {
            break;
        }
        if Instant::now() > deadline {
            trigger.trigger();
            return Err(failed(format!("only {done} of {total} tasks ran in 600 s")));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = start.elapsed();
    trigger.trigger();
    for r in running {
        let _ = r.await;
    }
    for r in reapers {
        let _ = r.await;
    }
    Ok(elapsed)
}

/// `fairness`: see the module documentation.
pub async fn fairness(b: &FlowBench) -> Result<Value, CliError> {
    let engines = nodes(&b.spec, 1).await?;
    let queue = queue_with(&engines[0], json!({"fairness": "weighted"})).await?;
    submit(&engines[0], &queue, Some("loud".into()), b.jobs).await?;
    submit(&engines[0], &queue, Some("quiet".into()), QUIET_TASKS).await?;
    // (loud tasks started, quiet tasks started, loud started when the
    // quiet key's last task started)
    let seen = Arc::new(Mutex::new((0u64, 0u64, 0u64)));
    let counted = Arc::clone(&seen);
    let elapsed = work(
        &engines,
        &queue,
        &[b.concurrency],
        b.jobs + QUIET_TASKS,
        move |task: Arc<Task>| {
            let counted = Arc::clone(&counted);
            async move {
                let quiet = rdq_engine::flow::key_of(task.envelope()) == "quiet";
                let mut s = counted
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if quiet {
                    s.1 += 1;
                    if s.1 == QUIET_TASKS {
                        s.2 = s.0;
                    }
                } else {
                    s.0 += 1;
                }
                Settlement::Success
            }
        },
    )
    .await?;
    let (_, _, loud_before) = *seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let share = loud_before as f64 / b.jobs.max(1) as f64;
    Ok(json!({
        "workload": "fairness",
        "store": b.spec,
        "loud_tasks": b.jobs,
        "quiet_tasks": QUIET_TASKS,
        "concurrency": b.concurrency,
        "loud_started_before_quiet_finished_starting": loud_before,
        "loud_share": share,
        "target_share": 0.05,
        "met": share < 0.05,
        "work_per_s": (b.jobs + QUIET_TASKS) as f64 / elapsed.as_secs_f64(),
    }))
}

/// Running tasks per key and in all, and the most seen at once.
#[derive(Default)]
struct Occupancy {
    per_key: HashMap<String, u64>,
    all: u64,
    peak_key: u64,
    peak_all: u64,
    overruns: u64,
}

/// `flow-exact`: see the module documentation. Runs twice, with weighted
/// fairness and in claim order (a policy of counts only, which PostgreSQL
/// decides in one statement).
pub async fn exact(b: &FlowBench) -> Result<Value, CliError> {
    let engines = nodes(&b.spec, b.nodes).await?;
    let mut runs = Vec::new();
    for fairness in ["fifo", "weighted"] {
        runs.push(exact_under(b, &engines, fairness).await?);
    }
    let sum = |field: &str| runs.iter().filter_map(|r| r[field].as_u64()).sum::<u64>();
    let most = |field: &str| runs.iter().filter_map(|r| r[field].as_u64()).max();
    Ok(json!({
        "workload": "flow-exact",
        "store": b.spec,
        "nodes": engines.len(),
        "claims": sum("claims"),
        "keys": EXACT_KEYS,
        "key_limit": EXACT_KEY_LIMIT,
        "global_limit": EXACT_GLOBAL_LIMIT,
        "concurrency_per_node": b.concurrency,
        "peak_per_key": most("peak_per_key"),
        "peak_in_all": most("peak_in_all"),
        "overruns": sum("overruns"),
        "runs": runs,
    }))
}

/// One run of `flow-exact` with `fairness`.
async fn exact_under(b: &FlowBench, engines: &[Engine], fairness: &str) -> Result<Value, CliError> {
    let queue = queue_with(
        &engines[0],
        json!({"key_concurrency": EXACT_KEY_LIMIT, "concurrency": EXACT_GLOBAL_LIMIT, "fairness": fairness}),
    )
    .await?;
    let per_key = b.jobs / EXACT_KEYS;
    for k in 0..EXACT_KEYS {
        submit(&engines[0], &queue, Some(format!("key-{k}")), per_key).await?;
    }
    let total = per_key * EXACT_KEYS;
    let occupancy = Arc::new(Mutex::new(Occupancy::default()));
    let counted = Arc::clone(&occupancy);
    let widths = vec![b.concurrency; engines.len()];
    let elapsed = work(engines, &queue, &widths, total, move |task: Arc<Task>| {
        let counted = Arc::clone(&counted);
        async move {
            let key = rdq_engine::flow::key_of(task.envelope()).to_owned();
            {
                // Counted from the handler's start to its end: inside the
                // claim-to-settle window, so never more than the store's count.
                let mut o = counted
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let n = o.per_key.entry(key.clone()).or_default();
                *n += 1;
                let n = *n;
                o.all += 1;
                o.peak_key = o.peak_key.max(n);
                o.peak_all = o.peak_all.max(o.all);
                if n > EXACT_KEY_LIMIT || o.all > EXACT_GLOBAL_LIMIT {
                    o.overruns += 1;
                }
            }
            tokio::task::yield_now().await;
            let mut o = counted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(n) = o.per_key.get_mut(&key) {
                *n -= 1;
            }
            o.all -= 1;
            Settlement::Success
        }
    })
    .await?;
    let o = occupancy
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(json!({
        "fairness": fairness,
        "claims": total,
        "peak_per_key": o.peak_key,
        "peak_in_all": o.peak_all,
        "overruns": o.overruns,
        "work_per_s": total as f64 / elapsed.as_secs_f64(),
    }))
}

/// `flow-limit`: see the module documentation.
pub async fn limit(b: &FlowBench) -> Result<Value, CliError> {
    let engines = nodes(&b.spec, b.nodes).await?;
    let n = engines.len();
    // Unlimited: `concurrency` handlers in all, split over the nodes.
    let split: Vec<usize> = (0..n)
        .map(|i| b.concurrency / n + usize::from(i < b.concurrency % n))
        .collect();
    let limited_widths = vec![b.concurrency; n];
    let mut pairs = Vec::new();
    for pair in 0..b.pairs.max(1) {
        let mut rates = [0.0; 2];
        // Every run leaves its tasks in the store, and both rates fall a
        // little as the store grows: the pairs take turns at going first
        // (unlimited first, then limited first, ...), so neither side always
        // runs on the larger store.
        let order = if pair % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for limited in order {
            let slot = usize::from(limited);
            let flow = if limited {
                json!({"concurrency": b.concurrency})
            } else {
                json!({})
            };
            let queue = queue_with(&engines[0], flow).await?;
            submit(&engines[0], &queue, None, b.jobs).await?;
            let widths = if limited { &limited_widths } else { &split };
            let pause = Duration::from_millis(b.handler_ms);
            let elapsed = work(
                &engines,
                &queue,
                widths,
                b.jobs,
                move |_task: Arc<Task>| async move {
                    if !pause.is_zero() {
                        tokio::time::sleep(pause).await;
                    }
                    Settlement::Success
                },
            )
            .await?;
            rates[slot] = b.jobs as f64 / elapsed.as_secs_f64();
        }
        pairs.push(json!({
            "unlimited_per_s": rates[0],
            "limited_per_s": rates[1],
            "ratio": rates[1] / rates[0],
        }));
    }
    let mut ratios: Vec<f64> = pairs.iter().filter_map(|p| p["ratio"].as_f64()).collect();
    ratios.sort_by(f64::total_cmp);
    let median = ratios.get(ratios.len() / 2).copied().unwrap_or(0.0);
    Ok(json!({
        "workload": "flow-limit",
        "store": b.spec,
        "nodes": n,
        "jobs": b.jobs,
        "limit": b.concurrency,
        "handler_ms": b.handler_ms,
        "unlimited_handlers": split,
        "limited_handlers_per_node": b.concurrency,
        "pairs": pairs,
        "median_ratio": median,
        "target_ratio": 0.8,
        "met": median >= 0.8,
    }))
}
