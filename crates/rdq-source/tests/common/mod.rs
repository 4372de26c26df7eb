//! What the sources' tests share: stores, engines, waiting, and reading
//! back the tasks a source stored.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdq_engine::{Engine, ListQuery, QueuePolicy, SOURCE_HEADER, Settlement, SystemClock};
use rdq_envelope::{Envelope, Status};
use rdq_runtime::{Shutdown, ShutdownTrigger, shutdown_channel};
use rdq_source::{Registry, SourceConfig, SourceState, SourceStatus, Sources};

/// A name no other test uses.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000_000
    )
}

/// An engine over a fresh embedded store in `dir`.
pub fn embedded(dir: &std::path::Path) -> Engine {
    let store = rdq_store_embedded::EmbeddedStore::open(dir).expect("open the embedded store");
    Engine::new(Arc::new(store), Arc::new(SystemClock)).with_fallback_policy(QueuePolicy::default())
}

/// An engine over a fresh memory store.
pub fn memory() -> Engine {
    Engine::new(
        Arc::new(rdq_store_memory::MemoryStore::new()),
        Arc::new(SystemClock),
    )
}

/// Running sources and how to stop them.
pub struct Running {
    pub registry: Registry,
    trigger: ShutdownTrigger,
    sources: Option<Sources>,
}

impl Running {
    pub fn start(engine: &Engine, configs: &[SourceConfig]) -> Self {
        if std::env::var("RDQ_TEST_LOG").is_ok() {
            let _ = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::DEBUG)
                .with_test_writer()
                .try_init();
        }
        let registry = Registry::default();
        let (trigger, stop): (ShutdownTrigger, Shutdown) = shutdown_channel();
        let sources = rdq_source::start(engine, configs, &registry, &stop).expect("start");
        Self {
            registry,
            trigger,
            sources: Some(sources),
        }
    }

    pub fn status(&self, name: &str) -> SourceStatus {
        self.registry.get(name).expect("a registered source")
    }

    pub async fn stop(mut self) {
        self.trigger.trigger();
        if let Some(sources) = self.sources.take() {
            tokio::time::timeout(Duration::from_secs(30), sources.join())
                .await
                .expect("sources stop within 30 s");
        }
    }
}

/// Waits up to `secs` for `check`, polling; panics with `what` otherwise.
pub async fn wait_until<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out after {secs} s waiting until {what}");
}

/// Every task of `queue`, by its locator; panics if a locator has two.
pub async fn tasks_by_locator(engine: &Engine, queue: &str) -> BTreeMap<String, Envelope> {
    let mut out = BTreeMap::new();
    let mut cursor = None;
    loop {
        let page = engine
            .list(&ListQuery {
                queue: queue.to_owned(),
                cursor,
                ..ListQuery::default()
            })
            .await
            .expect("list");
        for env in page.items {
            let locator = env
                .headers
                .get(SOURCE_HEADER)
                .cloned()
                .expect("a source's task carries its locator");
            if let Some(twin) = out.insert(locator.clone(), env) {
                panic!("record {locator} became two tasks (one is {})", twin.id);
            }
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    out
}

/// How many tasks of `queue` there are in `status`.
pub async fn count(engine: &Engine, queue: &str, status: Status) -> u64 {
    engine
        .counts()
        .await
        .expect("counts")
        .into_iter()
        .find(|c| c.queue == queue)
        .map_or(0, |c| match status {
            Status::Pending => c.pending,
            Status::Dead => c.dead,
            Status::Succeeded => c.succeeded,
            _ => c.in_flight,
        })
}

/// A source's configuration with the fields every test sets (the kind's
/// table is added by the test).
pub fn source(name: &str, queue: &str) -> SourceConfig {
    serde_json::from_value(serde_json::json!({
        "name": name,
        "queue": queue,
        "handler": "test.record",
        "batch": 200,
        "retry_ms": 200,
    }))
    .expect("a source configuration")
}

/// How many tasks of `queue` wait (PENDING).
pub async fn pending(engine: &Engine, queue: &str) -> u64 {
    count(engine, queue, Status::Pending).await
}

/// Back-pressure as every kind must apply it, for a source `name` started
/// on `queue` with `high_water = 300`, `low_water = 100` and a batch of 50
/// while `total` records wait in its stream: it pauses above the high-water
/// mark and stores little more while paused; workers draining the queue
/// make it read again below the low-water mark, until every record is
/// one task.
pub async fn assert_back_pressure(
    engine: &Engine,
    running: &Running,
    name: &str,
    queue: &str,
    total: usize,
) {
    wait_until(60, "the source pauses", || async {
        running.status(name).paused
    })
    .await;
    assert_eq!(running.status(name).state, SourceState::Paused);
    let at_pause = pending(engine, queue).await;
    assert!(
        at_pause > 300,
        "paused above the high-water mark: {at_pause}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = pending(engine, queue).await;
    assert!(
        held < total as u64 && held <= at_pause + 600,
        "paused, it stores little more (what it had fetched): {at_pause} then {held}"
    );
    assert!(
        running.status(name).paused,
        "still paused while nothing drains"
    );
    // Workers drain the queue: below the low-water mark it reads again,
    // and in the end every record is a task.
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    wait_until(120, "every record is a task", || {
        let (engine, done) = (engine.clone(), done.clone());
        async move {
            for claimed in engine.claim(queue, 100, None).await.expect("claim") {
                engine
                    .settle(&claimed.envelope, claimed.token, Settlement::Success)
                    .await
                    .expect("settle");
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            done.load(std::sync::atomic::Ordering::Relaxed) >= total
        }
    })
    .await;
    wait_until(30, "the source runs again", || async {
        !running.status(name).paused
    })
    .await;
    assert_eq!(running.status(name).state, SourceState::Running);
}
