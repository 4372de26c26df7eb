//! queuey 1.1 under the benchmark workloads' W1 (drain) and W3 (retry storm), the same
//! workload `rdq bench` runs: `--jobs` no-op jobs of about 100 bytes of
//! JSON, 64 enqueues in flight, then a worker with `--concurrency` and
//! `--prefetch`. Prints one JSON line like `rdq bench --json`.
//!
//! `queuey-bench [drain|retry] [--jobs N] [--concurrency N] [--prefetch N] [--url URL]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use queuey::prelude::*;

static NAME: OnceLock<&'static str> = OnceLock::new();
static PREFETCH: OnceLock<u16> = OnceLock::new();

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Bench {
    Queue,
}

impl QueueSet for Bench {
    fn all() -> &'static [Self] {
        &[Bench::Queue]
    }
    fn name(&self) -> &'static str {
        NAME.get().copied().unwrap_or("queuey-bench")
    }
    fn config(&self) -> QueueConfig {
        QueueConfig::new(self.name())
            .prefetch(PREFETCH.get().copied().unwrap_or(64))
            .retry(RetryPolicy::new(3, Backoff::None))
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Noop {
    submitted_us: u64,
    order_id: u32,
    note: String,
}

impl Job for Noop {
    type Queue = Bench;
    const NAME: &'static str = "bench.noop";
    const QUEUE: Bench = Bench::Queue;
}

struct Handler {
    retry: bool,
    done: Arc<AtomicU64>,
}

#[async_trait]
impl JobHandler for Handler {
    type Job = Noop;
    async fn handle(&self, _job: Noop, ctx: JobContext) -> Result<(), JobError> {
        if self.retry && ctx.attempt == 1 {
            return Err(JobError::retryable_msg("fails once by design"));
        }
        self.done.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn arg(args: &[String], key: &str) -> Option<String> {
    args.iter()
        .position(|a| a == key)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let retry = args.iter().any(|a| a == "retry");
    let jobs: u64 = arg(&args, "--jobs").map_or(Ok(20_000), |v| v.parse())?;
    let concurrency: usize = arg(&args, "--concurrency").map_or(Ok(64), |v| v.parse())?;
    let prefetch: u16 = arg(&args, "--prefetch").map_or(Ok(64), |v| v.parse())?;
    let url = arg(&args, "--url").unwrap_or_else(|| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let name: &'static str = Box::leak(format!("queuey-bench.{nanos:x}").into_boxed_str());
    let _ = NAME.set(name);
    let _ = PREFETCH.set(prefetch);

    let backend = Arc::new(RabbitMqBackend::connect(&url).await?);
    let producer = Producer::<Bench, _>::new(Arc::clone(&backend)).await?;
    let epoch = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut producers = Vec::new();
    for _ in 0..64 {
        let (producer, next) = (producer.clone(), Arc::clone(&next));
        producers.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < jobs {
                let job = Noop {
                    submitted_us: epoch.elapsed().as_micros() as u64,
                    order_id: 42,
                    note: "queuey bench no-op task, about one hundred bytes".into(),
                };
                producer.enqueue(&job).await?;
            }
            Ok::<(), queuey::Error>(())
        }));
    }
    for p in producers {
        p.await??;
    }
    let submit_s = started.elapsed().as_secs_f64();

    let done = Arc::new(AtomicU64::new(0));
    let worker = Worker::<Bench, _>::builder(Arc::clone(&backend))
        .concurrency(concurrency)
        .handler(Handler {
            retry,
            done: Arc::clone(&done),
        })
        .build()
        .await?;
    let handle = worker.handle();
    let started = Instant::now();
    let running = tokio::spawn(worker.run());
    while done.load(Ordering::Relaxed) < jobs {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let work_s = started.elapsed().as_secs_f64();
    handle.shutdown();
    running.await??;
    // Leave nothing behind: the work queue, its DLQ and the 1 s hold queue.
    let cleanup = lapin_free_cleanup(&backend, name).await;
    println!(
        "{}",
        serde_json::json!({
            "system": "queuey 1.1",
            "workload": if retry { "retry" } else { "drain" },
            "jobs": jobs,
            "concurrency": concurrency,
            "prefetch": prefetch,
            "submit_per_s": jobs as f64 / submit_s,
            "work_per_s": jobs as f64 / work_s,
            "queues_to_delete": cleanup,
        })
    );
    Ok(())
}

/// queuey exposes no queue deletion, so the script deletes these.
async fn lapin_free_cleanup(_backend: &RabbitMqBackend, name: &str) -> Vec<String> {
    vec![
        name.to_owned(),
        format!("{name}.dead"),
        format!("{name}.deferred.1000"),
    ]
}
