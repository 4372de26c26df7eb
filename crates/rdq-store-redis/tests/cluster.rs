//! Redis Cluster: a three-master cluster on free loopback ports, started
//! and killed by the test. Queues spread over the shards (each queue's keys
//! share one hash tag), every queue's scripts run on its own shard, and the
//! operations that span queues (counts, lapsed leases, lookups by id) see
//! every shard. The whole compliance kit runs against the cluster too.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Server, free_port, have_redis_binaries};
use rdq_engine::{Engine, ManualClock, QueuePolicy, SettleRequest, Settlement, SubmitRequest};
use rdq_envelope::{Status, TaskId, Timestamp};
use rdq_store_redis::RedisStore;

const QUEUES: usize = 12;
const TASKS_PER_QUEUE: usize = 60;

/// Three masters, no replicas, killed on drop.
struct Cluster {
    nodes: Vec<Server>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Cluster {
    fn start() -> Self {
        let mut nodes = Vec::new();
        let mut dirs = Vec::new();
        for _ in 0..3 {
            let dir = tempfile::tempdir().expect("a temporary directory");
            nodes.push(Server::start(
                free_port(),
                dir.path(),
                &["--cluster-enabled", "yes", "--appendonly", "no"],
            ));
            dirs.push(dir);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create runs");
        assert!(
            created.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !nodes
            .iter()
            .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        {
            assert!(Instant::now() < deadline, "the cluster did not settle");
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { nodes, _dirs: dirs }
    }

    /// The store URL: the first node, the others named in `cluster=`.
    fn url(&self, prefix: &str) -> String {
        let others: Vec<String> = self.nodes[1..]
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!(
            "redis://127.0.0.1:{}/?cluster={}&prefix={prefix}",
            self.nodes[0].port,
            others.join(",")
        )
    }

    /// Keys stored on each node.
    fn key_counts(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|n| n.cli(&["DBSIZE"]).trim().parse().unwrap_or(0))
            .collect()
    }
}

fn task(queue: &str) -> SubmitRequest {
    SubmitRequest {
        queue: queue.to_owned(),
        handler_ref: "cluster.noop".to_owned(),
        payload: br#"{"n":1}"#.to_vec(),
        payload_content_type: "application/json".to_owned(),
        ..SubmitRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_over_queues_on_every_shard_ends_each_task_once() {
    if !have_redis_binaries() {
        eprintln!("skipping: redis-server and redis-cli are not installed");
        return;
    }
    let cluster = tokio::task::block_in_place(Cluster::start);
    let store = RedisStore::open(&cluster.url("clu"))
        .await
        .expect("the cluster store");
    let clock = Arc::new(ManualClock::new(
        Timestamp::from_unix_ms(1_784_556_202_117).unwrap(),
    ));
    let engine =
        Engine::new(Arc::new(store.clone()), clock.clone()).with_fallback_policy(QueuePolicy {
            max_attempts: 3,
            backoff: rdq_engine::Backoff::None,
            lease_ms: 1_000,
            ..QueuePolicy::default()
        });
    let queues: Vec<String> = (0..QUEUES).map(|n| format!("cluster.q{n}")).collect();
    let mut submitted: HashMap<TaskId, String> = HashMap::new();
    for queue in &queues {
        let results = engine.submit_many(vec![task(queue); TASKS_PER_QUEUE]).await;
        for r in results {
            submitted.insert(r.expect("submit").envelope().id, queue.clone());
        }
    }
    let shards_used = cluster.key_counts().iter().filter(|n| **n > 0).count();
    assert!(
        shards_used >= 2,
        "queues spread over the shards: {:?}",
        cluster.key_counts()
    );

    // Lookups by id and counts span the shards.
    for (id, queue) in submitted.iter().take(30) {
        assert_eq!(&engine.get(*id).await.expect("get").queue, queue);
    }
    let counts = engine.counts().await.expect("counts");
    assert_eq!(counts.len(), QUEUES);
    assert!(counts.iter().all(|c| c.pending == TASKS_PER_QUEUE as u64));

    // A first claim of every queue lapses; the reaper finds them on every shard.
    let mut lapsed = 0;
    for queue in &queues {
        lapsed += engine.claim(queue, 5, None).await.expect("claim").len();
    }
    clock.advance_ms(1_000);
    let reaped = engine.reap_expired(10_000).await.expect("reap");
    assert_eq!(reaped.len(), lapsed);
    assert!(reaped.iter().all(|env| env.status == Status::Pending));

    // Then claimers on every queue at once work everything off.
    let mut workers = tokio::task::JoinSet::new();
    for queue in queues.clone() {
        let engine = engine.clone();
        workers.spawn(async move {
            let mut done = Vec::new();
            loop {
                let batch = engine.claim(&queue, 16, None).await.expect("claim");
                if batch.is_empty() {
                    return done;
                }
                let settles = batch
                    .iter()
                    .map(|c| SettleRequest {
                        envelope: c.envelope.clone(),
                        token: c.token,
                        settlement: Settlement::Success,
                    })
                    .collect();
                for r in engine.settle_many(settles).await {
                    done.push(r.expect("settle").id);
                }
            }
        });
    }
    let mut finished: Vec<TaskId> = Vec::new();
    while let Some(joined) = workers.join_next().await {
        finished.extend(joined.expect("a worker panicked"));
    }
    let unique: HashSet<TaskId> = finished.iter().copied().collect();
    assert_eq!(unique.len(), finished.len(), "no task settled twice");
    assert_eq!(
        unique,
        submitted.keys().copied().collect(),
        "every task ended"
    );
    for c in engine.counts().await.expect("counts") {
        assert_eq!(
            (c.pending, c.in_flight, c.succeeded, c.dead),
            (0, 0, TASKS_PER_QUEUE as u64, 0),
            "{}",
            c.queue
        );
    }
    store.delete_everything().await.expect("cleanup");
    assert_eq!(cluster.key_counts(), vec![0, 0, 0], "nothing left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compliance_kit_passes_on_a_cluster() {
    if !have_redis_binaries() {
        eprintln!("skipping: redis-server and redis-cli are not installed");
        return;
    }
    let cluster = tokio::task::block_in_place(Cluster::start);
    let url = cluster.url("kit");
    let factory = rdq_compliance::factory(move || {
        let url = url.clone();
        async move {
            RedisStore::open_temporary(&url)
                .await
                .expect("a temporary cluster store")
        }
    });
    for (name, check) in rdq_compliance::all_checks() {
        eprintln!("cluster: {name}");
        check(factory.clone()).await;
    }
    assert_eq!(cluster.key_counts(), vec![0, 0, 0], "nothing left behind");
}
