//! `kill -9` of the server while several threads submit: every submit the
//! server acknowledged (a 201) is there after a restart on the same data.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Api, FAST_CONFIG, RdqServer};
use serde_json::json;

const THREADS: usize = 4;
/// Upper bound per thread, so the test stops by itself whatever happens.
const MAX_SUBMITS_PER_THREAD: usize = 20_000;

/// Submits from `THREADS` OS threads until the server dies; returns the ids
/// it acknowledged.
fn submit_until_killed(base: &str, kill: impl FnOnce()) -> (Vec<String>, usize) {
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(Mutex::new(0usize));
    let started = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for t in 0..THREADS {
        let (base, acknowledged, failures, started) = (
            base.to_owned(),
            Arc::clone(&acknowledged),
            Arc::clone(&failures),
            Arc::clone(&started),
        );
        threads.push(std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let client = reqwest::Client::new();
                for n in 0..MAX_SUBMITS_PER_THREAD {
                    let sent = client
                        .post(format!("{base}/v1/tasks"))
                        .json(&json!({"queue": "crash", "handler_ref": "h", "payload_json": {"t": t, "n": n}}))
                        .timeout(Duration::from_secs(5))
                        .send()
                        .await;
                    let Ok(response) = sent else {
                        *failures.lock().unwrap() += 1;
                        return;
                    };
                    if response.status() != 201 {
                        *failures.lock().unwrap() += 1;
                        return;
                    }
                    let Ok(body) = response.json::<serde_json::Value>().await else {
                        *failures.lock().unwrap() += 1;
                        return;
                    };
                    acknowledged
                        .lock()
                        .unwrap()
                        .push(body["id"].as_str().unwrap().to_owned());
                    started.store(true, Ordering::Release);
                }
            });
        }));
    }
    // Let the submits get going, then kill the server mid-stream.
    let deadline = Instant::now() + Duration::from_secs(10);
    while acknowledged.lock().unwrap().len() < 300 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    kill();
    for t in threads {
        t.join().unwrap();
    }
    let ids = acknowledged.lock().unwrap().clone();
    let failed = *failures.lock().unwrap();
    (ids, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_submitting_loses_no_acknowledged_task() {
    let dir = tempfile::tempdir().unwrap();
    let mut all_acknowledged: Vec<String> = Vec::new();
    for round in 0..2 {
        let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
        let base = server.base.clone();
        let (ids, failed) = tokio::task::spawn_blocking(move || {
            submit_until_killed(&base, move || server.kill_hard())
        })
        .await
        .unwrap();
        assert!(
            ids.len() >= 300,
            "round {round}: only {} submits got through",
            ids.len()
        );
        assert!(failed > 0, "round {round}: the kill interrupted no submit");
        all_acknowledged.extend(ids);
    }

    let server = RdqServer::start(dir.path(), FAST_CONFIG, &[]);
    let api = Api::new(&server.base);
    let unique: HashSet<&String> = all_acknowledged.iter().collect();
    assert_eq!(unique.len(), all_acknowledged.len(), "ids are unique");
    let mut missing = Vec::new();
    for id in &all_acknowledged {
        let (status, _) = api.get(&format!("/v1/tasks/{id}")).await;
        if status != 200 {
            missing.push(id.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged tasks were lost: {:?}",
        missing.len(),
        all_acknowledged.len(),
        &missing[..missing.len().min(5)]
    );
    // Stored = acknowledged + at most the submits in flight at each kill
    // (one per thread): stored, but killed before the 201 went out.
    let (_, queues) = api.get("/v1/queues").await;
    let stored = queues["queues"][0]["pending"].as_u64().unwrap() as usize;
    assert!(stored >= all_acknowledged.len());
    assert!(stored <= all_acknowledged.len() + 2 * THREADS);
    server.terminate();
}
