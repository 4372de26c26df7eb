//! Flow control checked from outside: three real `rdq serve` nodes on one
//! PostgreSQL schema and on one Redis prefix, pull workers claiming from all
//! three over HTTP. The per-key and global limits hold across the nodes, and
//! the rate bounds the starts of every window (docs/flow-control.md).
//!
//! Each test works in its own schema or key prefix and removes it afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{FAST_CONFIG, RdqServer};
use rdq_api::tasks::SubmitBody;
use rdq_api::work::SettleBody;
use rdq_client::Client;
use serde_json::json;

#[derive(Clone, Copy)]
enum Shared {
    Postgres,
    Redis,
}

fn tag() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("flow{}x{}", std::process::id(), nanos % 1_000_000)
}

fn spec(kind: Shared, tag: &str) -> String {
    match kind {
        Shared::Postgres => common::postgres_store(tag),
        Shared::Redis => common::redis_store(tag),
    }
}

/// Removes the schema or the keys the test left.
fn clean(kind: Shared, tag: &str) {
    let run = |cmd: &str, args: &[&str]| std::process::Command::new(cmd).args(args).output();
    match kind {
        Shared::Postgres => {
            common::drop_postgres_schema(tag);
        }
        Shared::Redis => {
            if let Ok(out) = run(
                "redis-cli",
                &[
                    "-h",
                    "127.0.0.1",
                    "--scan",
                    "--pattern",
                    &format!("*{tag}*"),
                ],
            ) {
                let keys: Vec<String> = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect();
                for chunk in keys.chunks(200) {
                    let mut args = vec!["-h", "127.0.0.1", "DEL"];
                    args.extend(chunk.iter().map(String::as_str));
                    let _ = run("redis-cli", &args);
                }
            }
        }
    }
}

struct Nodes {
    kind: Shared,
    tag: String,
    _dirs: Vec<tempfile::TempDir>,
    servers: Vec<RdqServer>,
    clients: Vec<Client>,
}

impl Nodes {
    fn start(kind: Shared) -> Self {
        let tag = tag();
        let spec = spec(kind, &tag);
        let mut dirs = Vec::new();
        let mut servers = Vec::new();
        let mut clients = Vec::new();
        for _ in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            let server = RdqServer::start_on(dir.path(), FAST_CONFIG, &spec, &[]);
            clients.push(Client::new(&server.base, None).unwrap());
            servers.push(server);
            dirs.push(dir);
        }
        Self {
            kind,
            tag,
            _dirs: dirs,
            servers,
            clients,
        }
    }

    async fn submit(&self, queue: &str, key: &str, n: usize) {
        for i in 0..n {
            let body = SubmitBody {
                queue: queue.to_owned(),
                handler_ref: "h".into(),
                flow_key: Some(key.to_owned()),
                ..Default::default()
            };
            // Spread over the nodes: any node takes submits.
            self.clients[i % 3].submit(&body).await.unwrap();
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for s in self.servers.drain(..) {
            s.terminate();
        }
        clean(self.kind, &self.tag);
    }
}

fn success(token: &str) -> SettleBody {
    serde_json::from_value(json!({"lease_token": token, "outcome": "SUCCESS"})).unwrap()
}

fn key_of(env: &rdq_envelope::Envelope) -> String {
    env.headers.get("rdq.flow_key").cloned().unwrap_or_default()
}

/// Six pull workers, two per node, under a per-key limit of 2 and a global
/// limit of 5 with `fairness` (`weighted` is decided from the ledger; `fifo`
/// makes a policy of counts only, which PostgreSQL decides in one
/// statement): neither limit is ever exceeded, and every task runs once.
async fn limits_hold_across_three_nodes(kind: Shared, fairness: &str) {
    let nodes = Nodes::start(kind);
    let queue = format!("flow.{}", nodes.tag);
    nodes.clients[0]
        .set_queue_config(
            &queue,
            &json!({"flow": {"key_concurrency": 2, "concurrency": 5, "fairness": fairness}}),
        )
        .await
        .unwrap();
    let keys = ["a", "b", "c"];
    for key in keys {
        nodes.submit(&queue, key, 15).await;
    }
    let total = keys.len() * 15;
    let running: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let peaks: Arc<Mutex<(HashMap<String, u64>, u64)>> = Arc::default();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..6 {
        let client = nodes.clients[w % 3].clone();
        let (queue, running, peaks, done) =
            (queue.clone(), running.clone(), peaks.clone(), done.clone());
        workers.push(tokio::spawn(async move {
            use std::sync::atomic::Ordering::SeqCst;
            let deadline = Instant::now() + Duration::from_secs(60);
            while done.load(SeqCst) < total && Instant::now() < deadline {
                let claimed = client.claim(&queue, 2, Some(60_000)).await.unwrap();
                if claimed.is_empty() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                {
                    // Counted after the claim answered and down before the
                    // settle is sent: never more than the store's count.
                    let mut now = running.lock().unwrap();
                    let mut peaks = peaks.lock().unwrap();
                    for c in &claimed {
                        let n = now.entry(key_of(&c.envelope)).or_default();
                        *n += 1;
                        let p = peaks.0.entry(key_of(&c.envelope)).or_default();
                        *p = (*p).max(*n);
                    }
                    let all: u64 = now.values().sum();
                    peaks.1 = peaks.1.max(all);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                for c in claimed {
                    *running
                        .lock()
                        .unwrap()
                        .get_mut(&key_of(&c.envelope))
                        .unwrap() -= 1;
                    client
                        .settle(c.envelope.id, &success(&c.lease_token))
                        .await
                        .unwrap();
                    done.fetch_add(1, SeqCst);
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(
        done.load(std::sync::atomic::Ordering::SeqCst),
        total,
        "every task ran once"
    );
    let (per_key, all) = peaks.lock().unwrap().clone();
    for key in keys {
        let p = per_key.get(key).copied().unwrap_or(0);
        assert!((1..=2).contains(&p), "key {key} peaked at {p} under 2");
    }
    assert!(all <= 5, "{all} ran at once under a global limit of 5");
    assert!(all >= 3, "the workers did run side by side (peak {all})");
    let flow = nodes.clients[1].queue_config(&queue).await.unwrap();
    assert_eq!(
        flow["flow"]["key_concurrency"], 2,
        "every node sees the policy"
    );
}

/// A rate of 20/s with a burst of 5, claimed as fast as six workers on
/// three nodes can: no window holds more starts than the bucket allows.
async fn the_rate_holds_across_three_nodes(kind: Shared) {
    let nodes = Nodes::start(kind);
    let queue = format!("rate.{}", nodes.tag);
    nodes.clients[0]
        .set_queue_config(
            &queue,
            &json!({"flow": {"rate": {"per_second": 20, "burst": 5}}}),
        )
        .await
        .unwrap();
    nodes.submit(&queue, "k", 45).await;
    let starts: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let begin = Instant::now();
    let mut workers = Vec::new();
    for w in 0..6 {
        let client = nodes.clients[w % 3].clone();
        let (queue, starts) = (queue.clone(), starts.clone());
        workers.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            while starts.lock().unwrap().len() < 45 && Instant::now() < deadline {
                let claimed = client.claim(&queue, 10, Some(60_000)).await.unwrap();
                let at = Instant::now();
                starts
                    .lock()
                    .unwrap()
                    .extend(std::iter::repeat_n(at, claimed.len()));
                for c in claimed {
                    client
                        .settle(c.envelope.id, &success(&c.lease_token))
                        .await
                        .unwrap();
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let mut starts = starts.lock().unwrap().clone();
    starts.sort();
    assert_eq!(starts.len(), 45, "every task started");
    // Seen from outside, a start is observed after the store took its
    // token; 150 ms of slack covers the answer's way back.
    for (i, from) in starts.iter().enumerate() {
        for (j, to) in starts.iter().enumerate().skip(i) {
            let window = to.duration_since(*from).as_secs_f64() + 0.15;
            let started = (j - i + 1) as f64;
            assert!(
                started <= 5.0 + 20.0 * window,
                "{started} starts within {window:.3} s; the bucket allows {:.1}",
                5.0 + 20.0 * window
            );
        }
    }
    let took = begin.elapsed().as_secs_f64();
    assert!(
        took >= 1.8,
        "45 starts at 20/s after a burst of 5 take 2 s, not {took:.2}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_across_three_postgres_nodes() {
    limits_hold_across_three_nodes(Shared::Postgres, "weighted").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_across_three_postgres_nodes_in_claim_order() {
    limits_hold_across_three_nodes(Shared::Postgres, "fifo").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_across_three_redis_nodes() {
    limits_hold_across_three_nodes(Shared::Redis, "weighted").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_across_three_redis_nodes_in_claim_order() {
    limits_hold_across_three_nodes(Shared::Redis, "fifo").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_holds_across_three_postgres_nodes() {
    the_rate_holds_across_three_nodes(Shared::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_holds_across_three_redis_nodes() {
    the_rate_holds_across_three_nodes(Shared::Redis).await;
}
