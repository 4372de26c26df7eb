#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]
use rdq_engine::{Engine, SystemClock};
use rdq_runtime::shutdown_channel;
use rdq_source::{KafkaConfig, Registry, SourceConfig};
use std::sync::Arc;
use std::time::Instant;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let topic = args[1].clone();
    let n: u64 = args[2].parse().unwrap();
    let batch: usize = args.get(3).map_or(500, |b| b.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let store = rdq_store_embedded::EmbeddedStore::open(dir.path()).unwrap();
    let engine = Engine::new(Arc::new(store), Arc::new(SystemClock));
    let mut config: SourceConfig = serde_json::from_value(serde_json::json!({
        "name": "probe", "queue": "probe", "handler": "h", "batch": batch}))
    .unwrap();
    config.kafka = Some(KafkaConfig {
        brokers: "127.0.0.1:9092".into(),
        topic,
        group: Some(format!("probe-{}", std::process::id())),
        cluster: "kafka".into(),
        properties: Default::default(),
    });
    let registry = Registry::default();
    let (trigger, stop) = shutdown_channel();
    let sources = rdq_source::start(&engine, &[config], &registry, &stop).unwrap();
    let mut first: Option<Instant> = None;
    let start = Instant::now();
    loop {
        let s = registry.get("probe").unwrap();
        if first.is_none() && s.ingested > 0 {
            first = Some(Instant::now());
        }
        if s.ingested >= n {
            break;
        }
        if let Some(e) = s.last_error {
            eprintln!("{e}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let end = Instant::now();
    let f = first.unwrap();
    println!(
        "{n} in {:.2}s from first ({:.0}/s), {:.2}s from start ({:.0}/s)",
        (end - f).as_secs_f64(),
        n as f64 / (end - f).as_secs_f64(),
        (end - start).as_secs_f64(),
        n as f64 / (end - start).as_secs_f64()
    );
    trigger.trigger();
    sources.join().await;
}
