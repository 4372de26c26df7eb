//! Database faults: PostgreSQL restarts under load, and nothing acknowledged
//! is lost.
//!
//! Producers submit single tasks continuously while a worker claims and
//! settles them; a second of load in, the test restarts the server with
//! `pg_ctlcluster --skip-systemctl-redirect VERSION main restart` (the
//! version is read from `/etc/postgresql`). Four producers use a store that
//! waits out an outage (the default `wait_ms`); a fifth uses one that does
//! not wait (`wait_ms=0`), so its submits during the restart fail. The test
//! checks that the clients waited and reconnected instead of crashing (the
//! worker finishes every task, including those submitted after the
//! restart), that every submit answered `Ok` is stored and ends SUCCEEDED,
//! and that the submits that could not be stored answered an error
//! (`STORE_UNAVAILABLE`), never `Ok`.
//!
//! It restarts the machine's shared PostgreSQL server, so it is ignored by
//! default. Run it alone:
//!
//! ```sh
//! cargo test -p rdq-store-postgres -- --ignored db_restart
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use rdq_engine::store::admin::{TaskCounts, TaskLookup};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdq_engine::{Backoff, Engine, QueuePolicy, Settlement, SubmitRequest, SystemClock};
use rdq_envelope::{Status, TaskId};
use rdq_runtime::{ReaperConfig, Task, Worker, WorkerConfig, run_reaper, shutdown_channel};
use rdq_store_postgres::PostgresStore;

const QUEUE: &str = "restart";

fn request(n: u64) -> SubmitRequest {
    SubmitRequest {
        queue: QUEUE.into(),
        handler_ref: "restart.noop".into(),
        payload: format!("{{\"n\":{n}}}").into_bytes(),
        payload_content_type: "application/json".into(),
        ..SubmitRequest::default()
    }
}

/// The installed PostgreSQL major version (the one directory of `/etc/postgresql`).
fn pg_version() -> String {
    let mut versions: Vec<String> = std::fs::read_dir("/etc/postgresql")
        .expect("PostgreSQL's configuration directory /etc/postgresql")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    versions.sort();
    versions.pop().expect("a PostgreSQL cluster version")
}

/// Submits single tasks until `stop`; returns the acknowledged ids and the
/// number of refusals (each checked to be `STORE_UNAVAILABLE`).
async fn produce(engine: Engine, stop: Arc<AtomicBool>, base: u64) -> (Vec<TaskId>, u64) {
    let mut acked = Vec::new();
    let mut failed = 0;
    let mut n = base;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        match engine.submit(request(n)).await {
            Ok(done) => acked.push(done.envelope().id),
            Err(e) => {
                assert_eq!(e.code(), "STORE_UNAVAILABLE", "{e}");
                failed += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    (acked, failed)
}

#[test]
#[ignore = "restarts the shared PostgreSQL server; run alone with: cargo test -p rdq-store-postgres -- --ignored db_restart"]
fn db_restart_under_load_loses_no_acknowledged_submit() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
        let engine = Engine::new(Arc::new(store.clone()), Arc::new(SystemClock));
        engine
            .set_policy(
                QUEUE,
                &QueuePolicy {
                    lease_ms: 3_000,
                    backoff: Backoff::None,
                    ..QueuePolicy::default()
                },
            )
            .await
            .unwrap();
        let impatient_url = format!("{}&wait_ms=0", common::url_with_schema(store.schema()));
        let impatient = Engine::new(
            Arc::new(PostgresStore::open(&impatient_url).await.unwrap()),
            Arc::new(SystemClock),
        );

        let executed = Arc::new(AtomicU64::new(0));
        let (trigger, shutdown) = shutdown_channel();
        let reaper = tokio::spawn(run_reaper(
            engine.clone(),
            ReaperConfig::default(),
            shutdown.clone(),
        ));
        let counter = Arc::clone(&executed);
        let worker = Worker::new(
            engine.clone(),
            WorkerConfig {
                queues: vec![QUEUE.into()],
                concurrency: 16,
                ..WorkerConfig::default()
            },
            move |_task: Arc<Task>| {
                let counter = Arc::clone(&counter);
                async move {
                    counter.fetch_add(1, Ordering::Relaxed);
                    Settlement::Success
                }
            },
        );
        let stats = worker.stats();
        let working = tokio::spawn(worker.run(shutdown.clone()));

        let stop = Arc::new(AtomicBool::new(false));
        let mut producers = Vec::new();
        for p in 0..4u64 {
            producers.push(tokio::spawn(produce(
                engine.clone(),
                Arc::clone(&stop),
                p * 1_000_000,
            )));
        }
        let impatient_producer = tokio::spawn(produce(impatient, Arc::clone(&stop), 9_000_000));

        tokio::time::sleep(Duration::from_secs(1)).await;
        let version = pg_version();
        let restarted = Instant::now();
        let status = tokio::task::spawn_blocking(move || {
            std::process::Command::new("pg_ctlcluster")
                .args(["--skip-systemctl-redirect", &version, "main", "restart"])
                .status()
        })
        .await
        .unwrap()
        .expect("pg_ctlcluster runs");
        assert!(status.success(), "pg_ctlcluster restart failed: {status}");
        eprintln!(
            "db_restart: PostgreSQL restarted in {:?}",
            restarted.elapsed()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.store(true, Ordering::Relaxed);

        let mut acked = Vec::new();
        let mut patient_failures = 0;
        for p in producers {
            let (ids, failed) = p.await.unwrap();
            acked.extend(ids);
            patient_failures += failed;
        }
        let (impatient_ids, impatient_failures) = impatient_producer.await.unwrap();
        acked.extend(&impatient_ids);

        // Everything acknowledged gets worked, by a worker that lived through it.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let counts = store.counts().await.unwrap();
            let c = counts.iter().find(|c| c.queue == QUEUE).unwrap();
            if c.pending + c.in_flight == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "tasks left unfinished: {c:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        trigger.trigger();
        working.await.unwrap();
        reaper.await.unwrap();

        for id in &acked {
            let env = store
                .get(*id)
                .await
                .unwrap_or_else(|e| panic!("acknowledged submit {id} was lost: {e}"));
            assert_eq!(env.status, Status::Succeeded, "{id}");
        }
        eprintln!(
            "db_restart: {} submits acknowledged ({} by the client that does not wait), \
             {patient_failures} refused by waiting clients, {impatient_failures} refused by the \
             client that does not wait; {} executions, {} settles refused",
            acked.len(),
            impatient_ids.len(),
            executed.load(Ordering::Relaxed),
            stats.settle_errors.load(Ordering::Relaxed),
        );
        assert!(
            impatient_failures > 0,
            "a client that does not wait saw no error while the database was down"
        );
        assert!(!acked.is_empty());
    });
}
