//! `rdq bench --workload source --config FILE`: how fast the sources of a
//! configuration file turn records already waiting in their streams into
//! tasks (docs/benchmarks.md, "Sources").
//!
//! The sources start in this process on the store of `--store`; the clock
//! runs from the first record stored to the `--jobs`-th, so connecting and
//! joining a consumer group are not counted. `bench/sources.sh` fills a
//! Kafka topic and a JetStream stream, runs each system's own consumer
//! benchmark on them and then this, and prints the ratio.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdq_engine::{Engine, SystemClock};
use rdq_runtime::shutdown_channel;
use rdq_source::Registry;
use serde_json::json;

use crate::CliError;
use crate::stores::open_store;

/// How long the sources may take to store every record.
const BENCH_LIMIT: Duration = Duration::from_secs(600);

/// Runs the sources of `config` on `spec` until they stored `jobs` records.
pub async fn run(
    spec: &str,
    config: &std::path::Path,
    jobs: u64,
) -> Result<serde_json::Value, CliError> {
    let server = rdq_server::ServerConfig::from_file(config)
        .map_err(|e| CliError::new("INVALID_CONFIG", e.to_string()))?;
    if server.sources.is_empty() {
        return Err(CliError::new(
            "INVALID_CONFIG",
            format!("{} holds no [[sources]]", config.display()),
        ));
    }
    let engine = Engine::new(open_store(spec).await?, Arc::new(SystemClock));
    let registry = Registry::default();
    let (trigger, stop) = shutdown_channel();
    let sources = rdq_source::start(&engine, &server.sources, &registry, &stop)
        .map_err(|e| CliError::new("INVALID_CONFIG", e.to_string()))?;
    let started = Instant::now();
    let mut first: Option<Instant> = None;
    let stored = loop {
        let all = registry.all();
        let stored: u64 = all.iter().map(|s| s.ingested + s.dead).sum();
        if first.is_none() && stored > 0 {
            first = Some(Instant::now());
        }
        if stored >= jobs {
            break Ok(stored);
        }
        if started.elapsed() > BENCH_LIMIT {
            let errors: Vec<String> = all.iter().filter_map(|s| s.last_error.clone()).collect();
            break Err(CliError::new(
                "TIMEOUT",
                format!("{stored} of {jobs} records stored in {BENCH_LIMIT:?}; errors: {errors:?}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let done = Instant::now();
    trigger.trigger();
    sources.join().await;
    let stored = stored?;
    let secs = first.map_or(0.0, |f| done.duration_since(f).as_secs_f64());
    Ok(json!({
        "workload": "source",
        "store": spec,
        "sources": server.sources.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
        "records": stored,
        "seconds": secs,
        "records_per_sec": if secs > 0.0 { stored as f64 / secs } else { 0.0 },
    }))
}
