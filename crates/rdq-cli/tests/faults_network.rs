//! Network faults between `rdq serve` and its store (docs/reliability.md):
//! `rdq serve` reaches PostgreSQL, Redis or RabbitMQ through a Toxiproxy of
//! the test's own while submitting threads and a pull worker ride out the
//! errors. Each cycle applies every fault of [`Fault::ALL`] in turn (added
//! latency, a cut, resets, connections closed mid-answer, a half-open
//! connection, bandwidth starvation),
//! holds it, then heals it. During a cut and while a connection is
//! half-open, a submit and a claim must be answered (an error is fine)
//! within the store's documented bound; after each heal `rdq serve` must acknowledge more submits with no
//! help; at the end every acknowledged submit must be there, every
//! acknowledged settle must have left its task SUCCEEDED, and no task may
//! have ended twice (on every store, RabbitMQ included, whatever its
//! `ends_once` declaration, which is checked too).
//!
//! `RDQ_FAULT_CYCLES` sets the number of cycles per store (default 3).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::faults::{Acknowledged, Load, assert_nothing_lost};
use common::netfault::{Duplicates, Fault, Proxy, Toxiproxy, drain, settled_twice, upstream_of};
use common::{Api, FAST_CONFIG, RdqServer};
use serde_json::{Value, json};

const QUEUE: &str = "net";
const SUBMITTERS: usize = 3;
/// Acknowledged submits after a heal that show `rdq serve` recovered.
const AFTER_HEAL: usize = 100;
/// The longest a recovery may take before the test fails.
const RECOVERY_LIMIT: Duration = Duration::from_secs(30);
/// How long a fault lasts (longer while requests sent during it are timed).
const HOLD: Duration = Duration::from_secs(1);
/// `wait_ms` of the PostgreSQL and Redis stores under test.
const WAIT_MS: u64 = 2000;

fn cycles() -> usize {
    std::env::var("RDQ_FAULT_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Postgres,
    Redis,
    Rabbit,
}

/// One store under test: its URL straight to the service, and the longest
/// a request may go unanswered while the store cannot be reached.
struct Store {
    kind: Kind,
    tag: String,
    url: String,
    answer_bound: Duration,
}

impl Store {
    fn new(kind: Kind) -> Self {
        let tag = format!("netfault_{kind:?}_{}", std::process::id()).to_lowercase();
        let (url, answer_bound) = match kind {
            // docs/stores/postgres.md: an operation fails after `wait_ms`
            // without an answer; one queued behind a group of writes in
            // flight waits for that group first.
            Kind::Postgres => (
                format!("{}&wait_ms={WAIT_MS}", common::postgres_store(&tag)),
                Duration::from_millis(2 * WAIT_MS + 1000),
            ),
            // docs/stores/redis.md: a command is presumed lost after 5 s,
            // and retried until `wait_ms` has passed.
            Kind::Redis => (
                format!("{}&wait_ms={WAIT_MS}", common::redis_store(&tag)),
                Duration::from_millis(5000 + WAIT_MS + 1000),
            ),
            // docs/stores/rabbitmq.md: a submit (its declarations and its
            // publish) fails after `op_timeout_ms` (10 s) without an answer.
            Kind::Rabbit => (
                format!(
                    "{}?namespace={tag}.",
                    std::env::var("RDQ_AMQP_URL")
                        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
                ),
                Duration::from_secs(11),
            ),
        };
        Self {
            kind,
            tag,
            url,
            answer_bound,
        }
    }

    /// Removes what the test left in the shared service.
    fn clean(&self) {
        let run = |cmd: &str, args: &[&str]| {
            let _ = std::process::Command::new(cmd).args(args).output();
        };
        match self.kind {
            Kind::Postgres => common::drop_postgres_schema(&self.tag),
            Kind::Redis => {
                let out = std::process::Command::new("redis-cli")
                    .args(["-h", "127.0.0.1", "--scan", "--pattern"])
                    .arg(format!("*{}*", self.tag))
                    .output();
                if let Ok(out) = out {
                    let keys: Vec<String> = String::from_utf8_lossy(&out.stdout)
                        .lines()
                        .map(str::to_owned)
                        .collect();
                    for chunk in keys.chunks(200) {
                        let mut args = vec!["-h", "127.0.0.1", "DEL"];
                        args.extend(chunk.iter().map(String::as_str));
                        run("redis-cli", &args);
                    }
                }
            }
            Kind::Rabbit => {
                let out = std::process::Command::new("rabbitmqctl")
                    .args(["list_queues", "-q", "name"])
                    .output();
                if let Ok(out) = out {
                    for name in String::from_utf8_lossy(&out.stdout).lines() {
                        if name.trim().starts_with(&self.tag) {
                            run("rabbitmqctl", &["delete_queue", name.trim()]);
                        }
                    }
                }
            }
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.clean();
    }
}

/// Waits until `load` has `target` acknowledged submits; answers how long.
fn until_submitted(load: &Load, target: usize, what: &str) -> Duration {
    let started = Instant::now();
    while load.submitted() < target {
        assert!(
            started.elapsed() < RECOVERY_LIMIT,
            "{what}: {} of {target} submits acknowledged after {RECOVERY_LIMIT:?}",
            load.submitted()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    started.elapsed()
}

/// One request timed by [`probe`].
struct Answer {
    what: &'static str,
    took: Duration,
    /// Status and body; `None`: no answer within the probe's limit.
    answer: Option<(u16, Value)>,
}

/// A submit and a claim sent at once to a server cut off from its store:
/// how long each took and what came back.
fn probe(base: &str, limit: Duration) -> [Answer; 2] {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let one = |what: &'static str, path: String, body: Value| {
            let request = client
                .post(format!("{base}{path}"))
                .json(&body)
                .timeout(limit);
            async move {
                let started = Instant::now();
                let answer = match request.send().await {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        Some((
                            status,
                            response.json::<Value>().await.unwrap_or(Value::Null),
                        ))
                    }
                    Err(_) => None,
                };
                Answer {
                    what,
                    took: started.elapsed(),
                    answer,
                }
            }
        };
        let (submit, claim) = tokio::join!(
            one(
                "submit",
                "/v1/tasks".into(),
                json!({"queue": QUEUE, "handler_ref": "h", "payload_json": {"probe": true}}),
            ),
            one(
                "claim",
                format!("/v1/queues/{QUEUE}/claim"),
                json!({"max": 1, "lease_ms": 60000}),
            ),
        );
        [submit, claim]
    })
}

/// What one store's run measured.
#[derive(Default)]
struct Figures {
    /// Per fault: the slowest recovery after a heal.
    recovery: BTreeMap<Fault, Duration>,
    /// The slowest answer during a cut or a half-open connection, and the
    /// errors answered.
    slowest_answer: Duration,
    errors: BTreeMap<String, usize>,
}

/// Applies every fault `cycles()` times to `proxy` under `load`.
fn cycle_faults(server: &RdqServer, proxy: &Proxy<'_>, load: &Load, store: &Store) -> Figures {
    let mut figures = Figures::default();
    for cycle in 0..cycles() {
        for fault in Fault::ALL {
            fault.apply(proxy);
            let held = Instant::now();
            if matches!(fault, Fault::HalfOpen | Fault::Cut) {
                for Answer { what, took, answer } in probe(&server.base, store.answer_bound * 3) {
                    let Some((status, body)) = answer else {
                        panic!(
                            "{:?}, cycle {cycle}: a {what} got no answer within {took:?} \
                             during {fault:?} (bound {:?})",
                            store.kind, store.answer_bound
                        );
                    };
                    assert!(
                        took <= store.answer_bound,
                        "{:?}, cycle {cycle}: a {what} was answered {status} only after \
                         {took:?} during {fault:?} (bound {:?}): {body}",
                        store.kind,
                        store.answer_bound
                    );
                    // An error is reported as one: a 503 with the stable code
                    // a caller may retry on, never a false success.
                    if status >= 400 {
                        let code = body["code"].as_str().unwrap_or("no code").to_owned();
                        assert_eq!(
                            (status, code.as_str()),
                            (503, "STORE_UNAVAILABLE"),
                            "{:?}, cycle {cycle}: a {what} during {fault:?}: {body}",
                            store.kind
                        );
                        *figures
                            .errors
                            .entry(format!("{fault:?}: {what} {status} {code}"))
                            .or_default() += 1;
                    } else if what == "submit" {
                        let id = body["id"].as_str().unwrap().to_owned();
                        load.acked.lock().unwrap().submitted.push(id);
                    }
                    figures.slowest_answer = figures.slowest_answer.max(took);
                }
            }
            std::thread::sleep(HOLD.saturating_sub(held.elapsed()));
            fault.heal(proxy);
            let target = load.submitted() + AFTER_HEAL;
            let took = until_submitted(load, target, &format!("cycle {cycle}, {fault:?} healed"));
            let worst = figures.recovery.entry(fault).or_default();
            *worst = (*worst).max(took);
        }
    }
    figures
}

fn network_faults(kind: Kind) {
    let store = Store::new(kind);
    store.clean();
    let toxiproxy = Toxiproxy::start();
    let proxy = toxiproxy.proxy("store", &upstream_of(&store.url));
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start_on(dir.path(), FAST_CONFIG, &proxy.url_through(&store.url), &[]);
    // Tasks redelivered after each reconnection count lapsed leases: keep
    // them out of the DLQ and out of long backoffs, where a drain would not
    // claim them.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(Api::new(&server.base).configure(
        QUEUE,
        json!({"max_attempts": 1000, "backoff": {"kind": "none"}}),
    ));
    // Every store is checked for its declaration of `ends_once`, and held
    // to no task ending twice under network faults. RabbitMQ does not
    // declare it (a broker crash can lose an ack it had taken), but a
    // network fault cannot undo an acknowledged success there: its ack was
    // confirmed, a publish is never sent twice, and an original whose
    // successor was published is dropped when it comes back.
    let (status, capabilities) = runtime.block_on(Api::new(&server.base).get("/v1/capabilities"));
    assert_eq!(status, 200, "{capabilities}");
    let ends_once = capabilities["capabilities"]["ends_once"]
        .as_bool()
        .unwrap_or_else(|| panic!("no ends_once in {capabilities}"));
    assert_eq!(
        ends_once,
        kind != Kind::Rabbit,
        "{kind:?} declares ends_once {ends_once}"
    );
    let load = Load::enduring(&server.base, QUEUE, SUBMITTERS);
    until_submitted(&load, AFTER_HEAL, "before the first fault");
    let figures = cycle_faults(&server, &proxy, &load, &store);
    let acked = load.stop();
    let (found, duplicated) = read_back(kind, server, dir.path(), &store, &acked);
    assert_eq!(
        duplicated.count(),
        0,
        "{kind:?}: tasks ended twice: {duplicated:?}"
    );
    eprintln!(
        "{kind:?}: {} cycles of {:?}: {} acknowledged submits, {} found, 0 lost; \
         {} acknowledged settles; ended twice: {} (settled twice {}, drained after an \
         acknowledged settle {}); slowest recovery ({AFTER_HEAL} more \
         submits) per fault {:?}; during cuts and half-open connections: slowest \
         answer {:?}, errors {:?}",
        cycles(),
        Fault::ALL,
        acked.submitted.len(),
        found,
        acked.settled.len(),
        duplicated.count(),
        duplicated.settled_twice.len(),
        duplicated.drained_after_settle.len(),
        figures.recovery,
        figures.slowest_answer,
        figures.errors
    );
}

/// Reads every acknowledged write back: by id where the store can find a
/// task, else by draining the queue from a fresh `rdq serve` (the broker
/// requeues what the old one held). Answers the acknowledged submits found
/// and the tasks that ended twice.
fn read_back(
    kind: Kind,
    server: RdqServer,
    dir: &std::path::Path,
    store: &Store,
    acked: &Acknowledged,
) -> (usize, Duplicates) {
    if kind != Kind::Rabbit {
        assert_nothing_lost(&server.base, acked);
        server.terminate();
        let duplicated = Duplicates {
            settled_twice: settled_twice(acked),
            ..Duplicates::default()
        };
        return (acked.submitted.len(), duplicated);
    }
    server.terminate();
    let fresh = RdqServer::start_on(dir, FAST_CONFIG, &store.url, &[]);
    let drained = drain(&fresh.base, QUEUE, acked, Duration::from_secs(3));
    fresh.terminate();
    assert!(
        drained.lost.is_empty(),
        "{} of {} acknowledged submits were lost: {:?}",
        drained.lost.len(),
        acked.submitted.len(),
        &drained.lost[..drained.lost.len().min(5)]
    );
    assert!(
        !acked.settled.is_empty(),
        "the worker settled nothing: settles went untested"
    );
    (
        acked.submitted.len() - drained.lost.len(),
        drained.duplicated,
    )
}

#[test]
fn postgresql_behind_network_faults_loses_nothing_acknowledged_answers_in_time_and_recovers() {
    network_faults(Kind::Postgres);
}

#[test]
fn redis_behind_network_faults_loses_nothing_acknowledged_answers_in_time_and_recovers() {
    network_faults(Kind::Redis);
}

/// RabbitMQ does not declare `ends_once` (a broker crash can lose an ack
/// it had taken: docs/stores/rabbitmq.md), and is held to no task ending
/// twice under network faults all the same.
#[test]
fn rabbitmq_behind_network_faults_loses_nothing_acknowledged_answers_in_time_and_recovers() {
    network_faults(Kind::Rabbit);
}
