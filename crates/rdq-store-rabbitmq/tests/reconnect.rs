//! A broker restart under load (`rabbitmqctl stop_app` / `start_app`):
//! the store redials with backoff, re-declares its queues, resubscribes, and
//! publishes issued during the outage wait instead of failing, so no
//! confirmed submit is lost.
//!
//! Ignored by default because it stops the machine's shared broker for a few
//! seconds: `cargo nextest run -p rdq-store-rabbitmq --run-ignored only`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::HashSet;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Stores, unique};
use rdq_engine::{Engine, QueuePolicy, Settlement, SubmitRequest, SystemClock};
use rdq_envelope::TaskId;

/// `call`'s answer; panics naming `what` if it takes a minute (a hang).
async fn answered<T>(what: &str, call: impl Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(60), call).await {
        Ok(answer) => answer,
        Err(_) => panic!("{what} did not answer within 60 s"),
    }
}

fn rabbitmqctl(command: &str) {
    // Bounded, so a broker that does not come back fails the test with a
    // reason instead of hanging it until the runner's timeout.
    let status = Command::new("timeout")
        .args(["120", "rabbitmqctl", command])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("rabbitmqctl runs");
    assert!(status.success(), "rabbitmqctl {command}");
}

#[test]
#[ignore = "stops and restarts the shared RabbitMQ on this machine"]
fn a_broker_restart_under_load_loses_no_confirmed_submit() {
    let stores = Stores::default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            let queue = format!("rdq-test.restart.{}", unique());
            let store = stores.make(|_| {});
            let engine = Engine::new(Arc::new(store.clone()), Arc::new(SystemClock))
                .with_fallback_policy(QueuePolicy {
                    backoff: rdq_engine::Backoff::None,
                    ..QueuePolicy::default()
                });
            let confirmed: Arc<Mutex<Vec<TaskId>>> = Arc::default();
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let mut producers = Vec::new();
            for _ in 0..8 {
                let (engine, queue, confirmed, stop) = (
                    engine.clone(),
                    queue.clone(),
                    confirmed.clone(),
                    stop.clone(),
                );
                producers.push(tokio::spawn(async move {
                    // Failed submits, and those sent when the connection
                    // dropped (the broker may or may not have stored them:
                    // never sent twice, so reported).
                    let (mut failures, mut unconfirmed) = (0u32, 0u32);
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let request = SubmitRequest {
                            queue: queue.clone(),
                            handler_ref: "test.noop".into(),
                            payload: br#"{"n":1}"#.to_vec(),
                            payload_content_type: "application/json".into(),
                            ..SubmitRequest::default()
                        };
                        match engine.submit(request).await {
                            Ok(s) => confirmed.lock().unwrap().push(s.envelope().id),
                            Err(e) if e.to_string().contains("may or may not have been stored") => {
                                unconfirmed += 1;
                            }
                            Err(e) => {
                                eprintln!("a submit failed: {e}");
                                failures += 1;
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    (failures, unconfirmed)
                }));
            }
            // Consume some before the restart too: leases held across it are lost and redelivered.
            let mut seen: HashSet<TaskId> = HashSet::new();
            let claim_some = async |seen: &mut HashSet<TaskId>| {
                // Deliveries held when the connection dropped come back
                // redelivered: the reaper records the lapsed attempt and
                // retries them. Each call must answer, whatever the broker
                // is doing: one that takes a minute is a hang, and the
                // failure names the call.
                let _ = answered("a reap", engine.reap_expired(100)).await;
                if let Ok(claimed) = answered("a claim", engine.claim(&queue, 32, None)).await {
                    for c in claimed {
                        let settled = answered(
                            "a settle",
                            engine.settle(&c.envelope, c.token, Settlement::Success),
                        );
                        match settled.await {
                            Ok(_) => {
                                seen.insert(c.envelope.id);
                            }
                            // The ack was written and the connection failed
                            // before the broker confirmed it: the task may
                            // have ended (or comes back and is seen again).
                            Err(e) if e.to_string().contains("may have ended") => {
                                seen.insert(c.envelope.id);
                            }
                            Err(_) => {}
                        }
                    }
                }
            };
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_millis(500) {
                claim_some(&mut seen).await;
            }
            eprintln!("{:?}: restarting the broker", t0.elapsed());
            let stopper = tokio::task::spawn_blocking(|| {
                rabbitmqctl("stop_app");
                std::thread::sleep(Duration::from_secs(3));
                rabbitmqctl("start_app");
            });
            while !stopper.is_finished() {
                claim_some(&mut seen).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            stopper.await.unwrap();
            let t1 = Instant::now();
            while t1.elapsed() < Duration::from_secs(1) {
                claim_some(&mut seen).await;
            }
            eprintln!("{:?}: broker back; stopping the producers", t0.elapsed());
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let (mut failed, mut unconfirmed) = (0, 0);
            for p in producers {
                // A submit must answer (OK or an error) once the broker is
                // back: one still waiting after a minute is a hang.
                let (f, u) = tokio::time::timeout(Duration::from_secs(60), p)
                    .await
                    .expect("a producer's submit answered within 60 s of the broker's return")
                    .unwrap();
                failed += f;
                unconfirmed += u;
            }
            eprintln!("{:?}: producers stopped", t0.elapsed());
            let confirmed: HashSet<TaskId> = confirmed.lock().unwrap().iter().copied().collect();
            let deadline = Instant::now() + Duration::from_secs(20);
            while !confirmed.is_subset(&seen) && Instant::now() < deadline {
                claim_some(&mut seen).await;
            }
            let lost: Vec<&TaskId> = confirmed.difference(&seen).collect();
            eprintln!(
                "confirmed {} submits, {} failed, {} unconfirmed, {} worked, {} connections",
                confirmed.len(),
                failed,
                unconfirmed,
                seen.len(),
                store.connections()
            );
            assert!(store.connections() >= 2, "the store reconnected");
            assert_eq!(
                failed, 0,
                "submits waited out the outage instead of failing"
            );
            // Only a submit already sent when the connection dropped can be
            // unconfirmed: at most one per producer per connection lost.
            assert!(
                u64::from(unconfirmed) <= 8 * store.connections().saturating_sub(1),
                "{unconfirmed} unconfirmed submits over {} connections",
                store.connections()
            );
            assert!(
                lost.is_empty(),
                "{} confirmed submits lost, e.g. {:?}",
                lost.len(),
                lost.first()
            );
        });
    }));
    drop(runtime);
    stores.cleanup();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
