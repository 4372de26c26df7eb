//! Many nodes on one database: three worker processes share one schema, one
//! of them is killed with SIGKILL mid-load (the moment it starts a handler),
//! and every task still ends exactly once.
//!
//! The test re-executes its own binary three times as child processes
//! (selected by `RDQ_NODE_CHILD_URL`), each a full node: the rdq-runtime
//! worker loop on two queues, the lease reaper and the retention pruner, all
//! running on every node at once. Handlers print `X ID TOKEN NODE` when they
//! start, then sleep a few milliseconds; one task in twenty fails
//! permanently. The parent submits the workload while the nodes work, kills
//! one node about a second in, waits for every task to finish, and checks:
//!
//! - every acknowledged submit ends exactly once, SUCCEEDED or DEAD, with at
//!   most one successful attempt and its terminal outcome last;
//! - the killed node's leases come back as `LEASE_EXPIRED` attempts (at least
//!   one did), and only the killed node's claims ever expired;
//! - no task ran twice except after a lease expiry: every attempt but the
//!   last closed as `LEASE_EXPIRED`, and no claim (task, token) ran twice;
//! - the pruners removed every SUCCEEDED task of the queue that retains
//!   none, and the store's counts agree with its rows.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use rdq_engine::store::admin::TaskCounts;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdq_engine::{
    Backoff, Engine, FailureKind, ListOrder, ListQuery, QueuePolicy, Settlement, Store,
    SubmitRequest, SystemClock,
};
use rdq_envelope::{Envelope, ErrorInfo, Outcome, Status, TaskId};
use rdq_runtime::{
    PrunerConfig, ReaperConfig, Task, Worker, WorkerConfig, run_pruner, run_reaper,
    shutdown_channel,
};
use rdq_store_postgres::PostgresStore;

const CHILD_URL: &str = "RDQ_NODE_CHILD_URL";
const CHILD_ID: &str = "RDQ_NODE_CHILD_ID";
const MAIN: &str = "nodes.main";
const PRUNED: &str = "nodes.pruned";
const NODES: usize = 3;
const TASKS: usize = 1_500;
const PRUNED_TASKS: usize = 200;

fn mix(id: TaskId) -> u64 {
    let mut h = id.as_u128() as u64 ^ (id.as_u128() >> 64) as u64;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// A node's half: works until killed. A no-op in a normal test run.
#[test]
fn node_child() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let node: usize = std::env::var(CHILD_ID).unwrap().parse().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = Arc::new(PostgresStore::open(&url).await.unwrap());
        let engine = Engine::new(store, Arc::new(SystemClock));
        let (_trigger, shutdown) = shutdown_channel();
        let reaper = ReaperConfig {
            interval: Duration::from_millis(100),
            batch: 100,
        };
        let pruner = PrunerConfig {
            interval: Duration::from_millis(150),
            batch: 40,
        };
        tokio::spawn(run_reaper(engine.clone(), reaper, shutdown.clone()));
        tokio::spawn(run_pruner(engine.clone(), pruner, shutdown.clone()));
        let config = WorkerConfig {
            queues: vec![MAIN.into(), PRUNED.into()],
            concurrency: 16,
            claim_batch: 8,
            poll_interval: Duration::from_millis(100),
            ..WorkerConfig::default()
        };
        let worker = Worker::new(engine, config, move |task: Arc<Task>| async move {
            let id = task.envelope().id;
            println!("X {id} {} {node}", task.token().0);
            tokio::time::sleep(Duration::from_millis(20 + mix(id) % 40)).await;
            if mix(id).is_multiple_of(20) {
                Settlement::Failure {
                    error: ErrorInfo::new("nodes.Poison", "fails on purpose"),
                    kind: FailureKind::Permanent,
                }
            } else {
                Settlement::Success
            }
        });
        println!("READY");
        worker.run(shutdown).await;
    });
}

/// A running node and the lines it printed.
struct Node {
    child: Child,
    lines: mpsc::Receiver<String>,
}

fn start_node(url: &str, node: usize) -> Node {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "node_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_URL, url)
        .env(CHILD_ID, node.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // A line cut off by the kill has no newline: it is dropped.
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            if line.ends_with('\n') {
                let _ = tx.send(line.trim_end().to_owned());
            }
            line.clear();
        }
    });
    Node { child, lines: rx }
}

/// One handler start: task, claim token, node.
type Execution = (TaskId, u32, usize);

fn executions(lines: &[String]) -> Vec<Execution> {
    lines
        .iter()
        .filter_map(|line| {
            // libtest may have printed "test node_child ... " before a line.
            let at = line.find("X ")?;
            let parts: Vec<&str> = line[at..].split(' ').collect();
            Some((
                TaskId::parse(parts.get(1)?)?,
                parts.get(2)?.parse().ok()?,
                parts.get(3)?.parse().ok()?,
            ))
        })
        .collect()
}

async fn all_tasks(store: &dyn Store, queue: &str) -> HashMap<TaskId, Envelope> {
    let mut out = HashMap::new();
    let mut cursor = None;
    loop {
        let page = store
            .as_listing()
            .expect("the PostgreSQL store lists")
            .list(&ListQuery {
                queue: queue.into(),
                cursor,
                limit: 1000,
                order: ListOrder::OldestFirst,
                ..ListQuery::default()
            })
            .await
            .unwrap();
        out.extend(page.items.into_iter().map(|env| (env.id, env)));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return out,
        }
    }
}

fn request(queue: &str, n: usize) -> SubmitRequest {
    SubmitRequest {
        queue: queue.into(),
        handler_ref: "nodes.work".into(),
        payload: format!("{{\"n\":{n}}}").into_bytes(),
        payload_content_type: "application/json".into(),
        ..SubmitRequest::default()
    }
}

#[test]
fn three_nodes_survive_one_killed_and_every_task_ends_exactly_once() {
    if std::env::var_os(CHILD_URL).is_some() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
        let engine = Engine::new(Arc::new(store.clone()), Arc::new(SystemClock));
        let main_policy = QueuePolicy {
            lease_ms: 1_000,
            max_attempts: 4,
            backoff: Backoff::None,
            ..QueuePolicy::default()
        };
        engine.set_policy(MAIN, &main_policy).await.unwrap();
        let pruned_policy = QueuePolicy {
            retain_succeeded_ms: 0,
            ..main_policy.clone()
        };
        engine.set_policy(PRUNED, &pruned_policy).await.unwrap();

        let node_url = common::url_with_schema(store.schema());
        let mut nodes: Vec<Node> = (0..NODES).map(|n| start_node(&node_url, n)).collect();
        let mut lines: Vec<Vec<String>> = vec![Vec::new(); NODES];
        for (n, node) in nodes.iter().enumerate() {
            loop {
                let line = node
                    .lines
                    .recv_timeout(Duration::from_secs(30))
                    .expect("a node never became ready");
                if line.ends_with("READY") {
                    break;
                }
                lines[n].push(line);
            }
        }

        // The workload arrives while the nodes work.
        let producer = {
            let engine = engine.clone();
            tokio::spawn(async move {
                let mut acked = Vec::new();
                for batch in 0..TASKS / 10 {
                    let reqs = (0..10).map(|i| request(MAIN, batch * 10 + i)).collect();
                    for result in engine.submit_many(reqs).await {
                        acked.push(result.unwrap().envelope().id);
                    }
                    // Spread over about two seconds, so the kill lands mid-load.
                    tokio::time::sleep(Duration::from_millis(12)).await;
                }
                let reqs = (0..PRUNED_TASKS).map(|i| request(PRUNED, i)).collect();
                for result in engine.submit_many(reqs).await {
                    result.unwrap();
                }
                acked
            })
        };
        tokio::time::sleep(Duration::from_millis(800)).await;
        // Kill the node the moment it starts a handler (each sleeps at least
        // 20 ms), so it certainly dies holding a lease.
        const KILLED: usize = 0;
        // Lines printed so far are history: wait for a fresh start.
        lines[KILLED].extend(nodes[KILLED].lines.try_iter());
        loop {
            let line = nodes[KILLED]
                .lines
                .recv_timeout(Duration::from_secs(10))
                .expect("the node to kill runs nothing");
            let running = line.contains("X ");
            lines[KILLED].push(line);
            if running {
                break;
            }
        }
        nodes[KILLED].child.kill().unwrap();
        nodes[KILLED].child.wait().unwrap();
        eprintln!("nodes: killed node {KILLED}");
        let acked = producer.await.unwrap();

        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let counts = store.counts().await.unwrap();
            let open: u64 = counts
                .iter()
                .map(|c| c.pending + c.in_flight + if c.queue == PRUNED { c.succeeded } else { 0 })
                .sum();
            if open == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "tasks left unfinished: {counts:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for node in &mut nodes {
            let _ = node.child.kill();
            node.child.wait().unwrap();
        }
        for (n, node) in nodes.iter().enumerate() {
            // The reader threads end with the pipes; take everything.
            while let Ok(line) = node.lines.recv_timeout(Duration::from_secs(5)) {
                lines[n].push(line);
            }
        }
        let runs: Vec<Execution> = lines.iter().flat_map(|l| executions(l)).collect();
        check(&store, &acked, &runs, KILLED).await;
    });
}

async fn check(store: &PostgresStore, acked: &[TaskId], runs: &[Execution], killed: usize) {
    let tasks = all_tasks(store, MAIN).await;
    assert_eq!(acked.len(), TASKS);
    // Every acknowledged task ends exactly once, in SUCCEEDED or DEAD.
    for id in acked {
        let env = tasks
            .get(id)
            .unwrap_or_else(|| panic!("acknowledged task {id} was lost"));
        let last = env.attempts.last().and_then(|a| a.outcome);
        let successes = env
            .attempts
            .iter()
            .filter(|a| a.outcome == Some(Outcome::Success))
            .count();
        match env.status {
            Status::Succeeded => assert_eq!(last, Some(Outcome::Success), "{id}"),
            Status::Dead => assert!(
                matches!(
                    last,
                    Some(Outcome::PermanentFailure | Outcome::LeaseExpired)
                ),
                "{id}: DEAD after {last:?}"
            ),
            other => panic!("{id} ended {other:?}"),
        }
        assert!(successes <= 1, "{id} succeeded {successes} times");
        // Only a lapsed lease lets a task run again.
        for a in &env.attempts[..env.attempts.len() - 1] {
            assert_eq!(
                a.outcome,
                Some(Outcome::LeaseExpired),
                "{id}: attempt {} closed {:?} and the task ran again",
                a.attempt_no,
                a.outcome
            );
        }
    }
    // No claim ran twice, and every run is a recorded attempt.
    let mut seen: HashSet<(TaskId, u32)> = HashSet::new();
    let mut by_claim: HashMap<(TaskId, u32), usize> = HashMap::new();
    for &(id, token, node) in runs {
        assert!(seen.insert((id, token)), "claim {token} of {id} ran twice");
        by_claim.insert((id, token), node);
        if let Some(env) = tasks.get(&id) {
            assert!(
                env.attempts
                    .iter()
                    .any(|a| a.attempt_no == token && a.outcome.is_some()),
                "{id}: a run of claim {token} left no closed attempt"
            );
        }
    }
    // Leases lapse only on the killed node, and they came back.
    let mut expired = 0;
    for (id, env) in &tasks {
        for a in &env.attempts {
            if a.outcome == Some(Outcome::LeaseExpired) {
                expired += 1;
                if let Some(&node) = by_claim.get(&(*id, a.attempt_no)) {
                    assert_eq!(node, killed, "{id}: a lease of live node {node} lapsed");
                }
            }
        }
    }
    assert!(
        expired > 0,
        "the killed node held no lease: nothing came back through LEASE_EXPIRED"
    );
    let killed_runs = runs.iter().filter(|r| r.2 == killed).count();
    eprintln!(
        "nodes: {} tasks, {} runs ({killed_runs} on the killed node), {expired} leases expired and came back",
        tasks.len(),
        runs.len()
    );
    // The pruners (on every node at once) removed every SUCCEEDED task of the
    // queue that retains none; its dead tasks stay in the DLQ.
    let left = all_tasks(store, PRUNED).await;
    assert!(
        left.values().all(|env| env.status == Status::Dead),
        "SUCCEEDED tasks were not pruned"
    );
    assert!(left.len() < PRUNED_TASKS / 4, "{} tasks left", left.len());
    // Counts agree with the rows.
    let counts = store.counts().await.unwrap();
    let main = counts.iter().find(|c| c.queue == MAIN).unwrap();
    let mut by_status = [0u64; 4];
    for env in tasks.values() {
        by_status[match env.status {
            Status::Pending => 0,
            Status::InFlight => 1,
            Status::Succeeded => 2,
            Status::Dead => 3,
        }] += 1;
    }
    assert_eq!(
        [main.pending, main.in_flight, main.succeeded, main.dead],
        by_status
    );
}
