//! Crash safety: whatever the store acknowledged survives `kill -9`.
//!
//! The test re-executes its own binary as a child process (selected by the
//! `RDQ_CRASH_CHILD_DIR` environment variable) that opens the store and runs
//! concurrent submits, claims, settles and lease reaps, printing each
//! operation to stdout only after it returned `Ok`. The parent kills the child
//! with SIGKILL at a random moment (10–300 ms into the load), reopens the
//! store and checks that every acknowledged submit, claim, settle and reap is
//! there, that every task is in a consistent state, and that the store
//! verifies (rows agree with their envelopes, counts with the rows). The same
//! directory is reused across iterations, so each child also recovers the
//! previous one's crash.
//!
//! `RDQ_CRASH_ITERATIONS` (default 20) sets the number of kills and
//! `RDQ_CRASH_SEED` makes the kill timings repeatable.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use rdq_engine::store::admin::{TaskCounts, TaskListing};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdq_engine::machine::LeaseToken;
use rdq_engine::{
    Backoff, Engine, FailureKind, ListOrder, ListQuery, QueuePolicy, Settlement, Store,
    SubmitRequest, SystemClock,
};
use rdq_envelope::{Envelope, ErrorInfo, Outcome, Status, TaskId};
use rdq_store_embedded::EmbeddedStore;

const CHILD_ENV: &str = "RDQ_CRASH_CHILD_DIR";
const QUEUE: &str = "crash";

/// The child's half: runs load until killed. A no-op in a normal test run.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(child_load(Path::new(&dir)));
}

fn policy() -> QueuePolicy {
    QueuePolicy {
        max_attempts: 3,
        backoff: Backoff::None,
        lease_ms: 150,
        ..QueuePolicy::default()
    }
}

fn request(n: u64, keyed: bool) -> SubmitRequest {
    SubmitRequest {
        queue: QUEUE.into(),
        handler_ref: "crash.noop".into(),
        payload: format!("{{\"n\":{n},\"pad\":\"{}\"}}", "x".repeat(64)).into_bytes(),
        payload_content_type: "application/json".into(),
        priority: (n % 3) as u8,
        idempotency_key: keyed.then(|| format!("key-{}-{n}", std::process::id())),
        ..SubmitRequest::default()
    }
}

/// What a worker does with attempt `attempt_no` of task `id`: mostly succeed,
/// sometimes fail (retryable or not), sometimes vanish and let the lease lapse.
fn decide(id: TaskId, attempt_no: u32) -> Option<Settlement> {
    let mut h = (id.as_u128() as u64) ^ (u64::from(attempt_no) << 32);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    let failure = |kind| Settlement::Failure {
        error: ErrorInfo::new("crash.Boom", "failed on purpose"),
        kind,
    };
    match h % 100 {
        0..60 => Some(Settlement::Success),
        60..85 => Some(failure(FailureKind::Retryable)),
        85..95 => Some(failure(FailureKind::Permanent)),
        _ => None,
    }
}

fn outcome_name(settlement: &Settlement) -> &'static str {
    match settlement {
        Settlement::Success => "SUCCESS",
        Settlement::Failure {
            kind: FailureKind::Permanent,
            ..
        } => "PERMANENT_FAILURE",
        Settlement::Failure { .. } => "RETRYABLE_FAILURE",
        _ => "OTHER",
    }
}

async fn child_load(dir: &Path) {
    let store = Arc::new(EmbeddedStore::open(dir).unwrap());
    let engine = Engine::new(store, Arc::new(SystemClock));
    engine.set_policy(QUEUE, &policy()).await.unwrap();
    println!("READY");
    let mut tasks = Vec::new();
    // Single submits, many in flight.
    for s in 0..6u64 {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0.. {
                let n = s * 1_000_000 + n;
                if let Ok(done) = engine.submit(request(n, n % 4 == 0)).await {
                    println!("S {}", done.envelope().id);
                }
                // Paced, so the store stays small enough to check quickly.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }
    // Batched submits.
    {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            for b in 0u64.. {
                let reqs = (0..5).map(|i| request(900_000_000 + b * 5 + i, false));
                for done in engine
                    .submit_many(reqs.collect())
                    .await
                    .into_iter()
                    .flatten()
                {
                    println!("S {}", done.envelope().id);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }
    // Workers: claim, then settle (or abandon) what they got.
    for _ in 0..4 {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let claims = match engine.claim(QUEUE, 8, None).await {
                    Ok(claims) => claims,
                    Err(_) => continue,
                };
                if claims.is_empty() {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                for c in &claims {
                    println!("C {} {}", c.envelope.id, c.token.0);
                }
                for c in claims {
                    let Some(settlement) = decide(c.envelope.id, c.token.0) else {
                        continue;
                    };
                    let name = outcome_name(&settlement);
                    if engine
                        .settle(&c.envelope, c.token, settlement)
                        .await
                        .is_ok()
                    {
                        println!("D {} {} {name}", c.envelope.id, c.token.0);
                    }
                }
            }
        }));
    }
    // The reaper.
    {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                if let Ok(reaped) = engine.reap_expired(100).await {
                    for env in reaped {
                        // The attempt it closed is the last closed one.
                        if let Some(a) = env.attempts.iter().rev().find(|a| !a.is_open()) {
                            println!("R {} {}", env.id, a.attempt_no);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Every acknowledged operation, by task.
#[derive(Default)]
struct Acks {
    submitted: Vec<TaskId>,
    claimed: Vec<(TaskId, u32)>,
    settled: Vec<(TaskId, u32, Outcome)>,
    reaped: Vec<(TaskId, u32)>,
}

impl Acks {
    fn record(&mut self, line: &str) {
        let parts: Vec<&str> = line.split(' ').collect();
        let id = |i: usize| TaskId::parse(parts[i]).unwrap_or_else(|| panic!("bad line {line:?}"));
        let no = |i: usize| {
            parts[i]
                .parse::<u32>()
                .unwrap_or_else(|_| panic!("bad line {line:?}"))
        };
        match parts.first().copied() {
            Some("S") if parts.len() == 2 => self.submitted.push(id(1)),
            Some("C") if parts.len() == 3 => self.claimed.push((id(1), no(2))),
            Some("D") if parts.len() == 4 => {
                self.settled
                    .push((id(1), no(2), Outcome::parse(parts[3]).unwrap()));
            }
            Some("R") if parts.len() == 3 => self.reaped.push((id(1), no(2))),
            _ => {}
        }
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Runs one child until READY plus `delay`, kills it, returns its stdout lines.
fn run_and_kill(dir: &Path, delay: Duration) -> Vec<String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        // A line cut off by the kill has no newline and is dropped: it was
        // never fully acknowledged.
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            if line.ends_with('\n') {
                let _ = tx.send(line.trim_end().to_owned());
            }
            line.clear();
        }
    });
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            // libtest may have printed "test crash_child ... " on the same line.
            Ok(line) if line.ends_with("READY") => break,
            Ok(line) => lines.push(line),
            Err(_) => {
                let _ = child.kill();
                panic!("the child never became ready");
            }
        }
    }
    std::thread::sleep(delay);
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    lines
}

async fn all_tasks(store: &EmbeddedStore) -> HashMap<TaskId, Envelope> {
    let mut out = HashMap::new();
    let mut cursor = None;
    loop {
        let page = store
            .list(&ListQuery {
                queue: QUEUE.into(),
                cursor,
                limit: 1000,
                order: ListOrder::OldestFirst,
                ..ListQuery::default()
            })
            .await
            .unwrap();
        for env in page.items {
            out.insert(env.id, env);
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return out,
        }
    }
}

fn assert_consistent(env: &Envelope) {
    let id = env.id;
    let last = env.attempts.last();
    assert!(
        env.attempt_count as usize <= env.attempts.len(),
        "{id}: {} attempts counted, {} recorded",
        env.attempt_count,
        env.attempts.len()
    );
    for (i, a) in env.attempts.iter().enumerate() {
        assert_eq!(a.attempt_no as usize, i + 1, "{id}: attempt numbering");
        if i + 1 < env.attempts.len() {
            assert!(!a.is_open(), "{id}: an earlier attempt is still open");
        }
    }
    match env.status {
        Status::Pending => {
            assert!(env.lease_expires_at.is_none(), "{id}: PENDING with a lease");
            assert!(env.next_attempt_at.is_some(), "{id}: PENDING, never due");
            assert!(
                last.is_none_or(|a| !a.is_open()),
                "{id}: PENDING, attempt open"
            );
        }
        Status::InFlight => {
            assert!(
                env.lease_expires_at.is_some(),
                "{id}: IN_FLIGHT without a lease"
            );
            assert!(
                LeaseToken::current(env).is_some(),
                "{id}: IN_FLIGHT, no open attempt"
            );
        }
        Status::Succeeded => {
            assert!(
                env.lease_expires_at.is_none() && env.next_attempt_at.is_none(),
                "{id}"
            );
            assert_eq!(last.and_then(|a| a.outcome), Some(Outcome::Success), "{id}");
        }
        Status::Dead => {
            assert!(
                env.lease_expires_at.is_none() && env.next_attempt_at.is_none(),
                "{id}"
            );
            assert!(
                last.is_some_and(|a| a.outcome.is_some_and(|o| o != Outcome::Success)),
                "{id}: DEAD without a failed last attempt"
            );
        }
    }
}

fn outcome_of(env: &Envelope, attempt_no: u32) -> Option<Option<Outcome>> {
    env.attempts
        .iter()
        .find(|a| a.attempt_no == attempt_no)
        .map(|a| a.outcome)
}

async fn check(dir: &Path, acks: &Acks) {
    let store = EmbeddedStore::open(dir).unwrap();
    store.verify().await.unwrap();
    let tasks = all_tasks(&store).await;
    for id in &acks.submitted {
        assert!(
            tasks.contains_key(id),
            "acknowledged submit of {id} was lost"
        );
    }
    for (id, no) in &acks.claimed {
        let env = &tasks[id];
        assert!(
            outcome_of(env, *no).is_some(),
            "acknowledged claim {no} of {id} was lost: {env:?}"
        );
    }
    for (id, no, outcome) in &acks.settled {
        let env = &tasks[id];
        assert_eq!(
            outcome_of(env, *no),
            Some(Some(*outcome)),
            "acknowledged settle {no} of {id} was lost"
        );
        if *outcome == Outcome::Success {
            assert_eq!(env.status, Status::Succeeded, "{id}");
        }
    }
    for (id, no) in &acks.reaped {
        assert_eq!(
            outcome_of(&tasks[id], *no),
            Some(Some(Outcome::LeaseExpired)),
            "acknowledged reap {no} of {id} was lost"
        );
    }
    let mut by_status = [0u64; 4];
    for env in tasks.values() {
        assert_consistent(env);
        by_status[match env.status {
            Status::Pending => 0,
            Status::InFlight => 1,
            Status::Succeeded => 2,
            Status::Dead => 3,
        }] += 1;
    }
    let counts = store.counts().await.unwrap();
    let c = counts.iter().find(|c| c.queue == QUEUE).unwrap();
    assert_eq!(
        [c.pending, c.in_flight, c.succeeded, c.dead],
        by_status,
        "counts disagree with the tasks"
    );
    // The lease index agrees with the tasks: every IN_FLIGHT task is found.
    let far = rdq_envelope::Timestamp::from_unix_ms(253_402_300_799_999).unwrap();
    let leased = store.expired_leases(far, 1_000_000).await.unwrap();
    assert_eq!(leased.len() as u64, by_status[1]);
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let iterations: usize = std::env::var("RDQ_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let seed = std::env::var("RDQ_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("crash test: {iterations} iterations, RDQ_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut acks = Acks::default();
    let started = Instant::now();
    for i in 0..iterations {
        let delay = Duration::from_millis(10 + rng.next() % 291);
        let lines = run_and_kill(dir.path(), delay);
        let before = acks.submitted.len();
        let settled_before = acks.settled.len();
        for line in &lines {
            acks.record(line);
        }
        eprintln!(
            "crash test: iteration {i}: killed after {delay:?}: {} submits, {} settles acknowledged",
            acks.submitted.len() - before,
            acks.settled.len() - settled_before
        );
        runtime.block_on(check(dir.path(), &acks));
    }
    eprintln!(
        "crash test: {} submits, {} claims, {} settles, {} reaps acknowledged and found in {:?}",
        acks.submitted.len(),
        acks.claimed.len(),
        acks.settled.len(),
        acks.reaped.len(),
        started.elapsed()
    );
    assert!(!acks.submitted.is_empty(), "the child acknowledged nothing");
    assert!(!acks.settled.is_empty(), "the child settled nothing");
}
