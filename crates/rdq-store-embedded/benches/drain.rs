//! W1 "drain" on the embedded store, through the engine: enqueue N no-op
//! tasks (about 100-byte JSON payloads) with up to 64 single submits in
//! flight, then work them with 64 concurrent workers that claim and settle.
//! Prints enqueue/s and work/s. Speed is measured here, never in tests.
//!
//! `cargo bench -p rdq-store-embedded --bench drain` (`RDQ_BENCH_TASKS`
//! overrides N = 20,000; `RDQ_BENCH_CLAIM` the tasks per claim, default 1;
//! `RDQ_BENCH_BACKLOG=1000000` first fills the store with that many tasks due
//! an hour later, half in the benchmark's queue and half in another, to show
//! that the work path stays flat as the table grows).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rdq_engine::{Engine, NewTask, Settlement, Store, SubmitRequest, SystemClock};
use rdq_envelope::Envelope;
use rdq_store_embedded::EmbeddedStore;

const CONCURRENCY: usize = 64;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this too, briefly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let total = if quick {
        500
    } else {
        env_usize("RDQ_BENCH_TASKS", 20_000)
    };
    let per_claim = env_usize("RDQ_BENCH_CLAIM", 1).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = Arc::new(EmbeddedStore::open_temporary().unwrap());
        let engine = Engine::new(store.clone(), Arc::new(SystemClock));
        let backlog = env_usize("RDQ_BENCH_BACKLOG", 0);
        if backlog > 0 {
            let filling = Instant::now();
            let later = rdq_envelope::Timestamp::now().plus_ms(3_600_000);
            let mut made = 0;
            while made < backlog {
                let batch: Vec<NewTask> = (0..1000.min(backlog - made))
                    .map(|i| {
                        let queue = if (made + i) % 2 == 0 {
                            "bench"
                        } else {
                            "other"
                        };
                        let mut env = Envelope::new(
                            queue,
                            "bench.noop",
                            &[b'x'; 100],
                            "application/json",
                            later,
                        );
                        env.next_attempt_at = Some(later);
                        NewTask {
                            envelope: env,
                            idempotency_key: None,
                            unique: None,
                        }
                    })
                    .collect();
                made += batch.len();
                for r in store.submit(batch).await {
                    r.unwrap();
                }
            }
            println!(
                "backlog of {backlog} tasks stored in {:.2?}",
                filling.elapsed()
            );
        }
        let payload = format!(
            "{{\"order_id\":42,\"customer\":\"c-1\",\"note\":\"{}\"}}",
            "x".repeat(56)
        );

        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let mut handles = Vec::new();
        for _ in 0..CONCURRENCY {
            let engine = engine.clone();
            let next = Arc::clone(&next);
            let payload = payload.clone().into_bytes();
            handles.push(tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < total {
                    engine
                        .submit(SubmitRequest {
                            queue: "bench".into(),
                            handler_ref: "bench.noop".into(),
                            payload: payload.clone(),
                            payload_content_type: "application/json".into(),
                            ..SubmitRequest::default()
                        })
                        .await
                        .unwrap();
                }
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
        let enqueue = started.elapsed();

        let done = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let mut handles = Vec::new();
        for _ in 0..CONCURRENCY {
            let engine = engine.clone();
            let done = Arc::clone(&done);
            handles.push(tokio::spawn(async move {
                loop {
                    let claims = engine.claim("bench", per_claim, None).await.unwrap();
                    if claims.is_empty() {
                        break;
                    }
                    for c in claims {
                        engine
                            .settle(&c.envelope, c.token, Settlement::Success)
                            .await
                            .unwrap();
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
        let work = started.elapsed();
        assert_eq!(done.load(Ordering::Relaxed), total);
        println!(
            "embedded W1 drain: {total} tasks, {CONCURRENCY} in flight, {per_claim} per claim: \
             enqueue {:.0}/s ({enqueue:.2?}), work {:.0}/s ({work:.2?})",
            total as f64 / enqueue.as_secs_f64(),
            total as f64 / work.as_secs_f64(),
        );
    });
}
