//! Network faults between `rdq serve` and its store: a Toxiproxy server of
//! the test's own (`scripts/services.sh` installs the binary) standing
//! between the two, driven over its HTTP API, and the faults the tests
//! apply through it; and the read-back of a store that cannot find a task
//! by id (RabbitMQ), by draining it.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::faults::{Acknowledged, wait_for_port};

/// Where `scripts/services.sh` installs Toxiproxy; `RDQ_TOXIPROXY` names
/// another binary.
const TOXIPROXY: &str = "/usr/local/lib/rdq-tools/toxiproxy-server";

/// A `toxiproxy-server` of this test's own on a free port, killed on drop.
pub struct Toxiproxy {
    child: Child,
    api: String,
    /// Its standard error, quoted when a call fails.
    log: PathBuf,
    http: reqwest::Client,
    /// Each call blocks on it: the tests drive faults from plain threads.
    runtime: tokio::runtime::Runtime,
}

impl Toxiproxy {
    pub fn start() -> Self {
        let bin = std::env::var("RDQ_TOXIPROXY").unwrap_or_else(|_| TOXIPROXY.to_owned());
        let port = super::closed_port();
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(tmp).unwrap();
        let log = tmp.join(format!("toxiproxy-{}-{port}.log", std::process::id()));
        let child = Command::new(&bin)
            .args(["-host", "127.0.0.1", "-port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {bin} ({e}): `bash scripts/services.sh` installs it")
            });
        let proxy = Self {
            child,
            api: format!("http://127.0.0.1:{port}"),
            log,
            // A fresh connection per call: no kept-alive one to find closed.
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap(),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        };
        wait_for_port(port, "toxiproxy-server");
        proxy
    }

    /// Sends one API call; fails the test on an answer other than `expect`.
    /// A call that got no answer is sent again (twice at most); then an
    /// answer in `done` also means the first one did its work.
    fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        expect: u16,
        done: &[u16],
    ) -> Value {
        self.runtime.block_on(async {
            let mut failures = Vec::new();
            while failures.len() < 3 {
                let mut request = self
                    .http
                    .request(method.clone(), format!("{}{path}", self.api))
                    .timeout(Duration::from_secs(10));
                if let Some(body) = &body {
                    request = request.json(body);
                }
                let answer = match request.send().await {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        response.text().await.map(|text| (status, text))
                    }
                    Err(e) => Err(e),
                };
                match answer {
                    Ok((status, text)) => {
                        let retried = !failures.is_empty();
                        assert!(
                            status == expect || (retried && done.contains(&status)),
                            "toxiproxy {method} {path}: {status} {text}"
                        );
                        return serde_json::from_str(&text).unwrap_or(Value::Null);
                    }
                    Err(e) => failures.push(e.to_string()),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!(
                "toxiproxy {method} {path} got no answer: {failures:?}; its log ends:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        })
    }

    /// A proxy to `upstream` (`host:port`) listening on a free port.
    pub fn proxy(&self, name: &str, upstream: &str) -> Proxy<'_> {
        let made = self.call(
            reqwest::Method::POST,
            "/proxies",
            Some(json!({"name": name, "listen": "127.0.0.1:0", "upstream": upstream})),
            201,
            &[],
        );
        Proxy {
            toxiproxy: self,
            name: name.to_owned(),
            listen: made["listen"].as_str().unwrap().to_owned(),
        }
    }
}

impl Drop for Toxiproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Which way a toxic acts: on what the store answers or on what rdq sends.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    Downstream,
    Upstream,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Self::Downstream => "downstream",
            Self::Upstream => "upstream",
        }
    }
}

/// One proxy: `rdq serve` connects to `listen` instead of the store.
pub struct Proxy<'a> {
    toxiproxy: &'a Toxiproxy,
    name: String,
    /// `127.0.0.1:port`.
    pub listen: String,
}

impl Proxy<'_> {
    /// Adds toxic `kind` (`latency`, `bandwidth`, `timeout`, `reset_peer`,
    /// `limit_data`, …) with `attributes`, named `kind-stream`, on `stream`.
    pub fn add(&self, kind: &str, stream: Stream, attributes: Value) {
        self.toxiproxy.call(
            reqwest::Method::POST,
            &format!("/proxies/{}/toxics", self.name),
            Some(json!({
                "name": format!("{kind}-{}", stream.name()),
                "type": kind,
                "stream": stream.name(),
                "toxicity": 1.0,
                "attributes": attributes,
            })),
            200,
            &[409],
        );
    }

    /// [`Proxy::add`] on both streams.
    pub fn add_both(&self, kind: &str, attributes: &Value) {
        for stream in [Stream::Downstream, Stream::Upstream] {
            self.add(kind, stream, attributes.clone());
        }
    }

    /// Removes every toxic.
    pub fn clear(&self) {
        let toxics = self.toxiproxy.call(
            reqwest::Method::GET,
            &format!("/proxies/{}/toxics", self.name),
            None,
            200,
            &[],
        );
        for toxic in toxics.as_array().unwrap() {
            self.toxiproxy.call(
                reqwest::Method::DELETE,
                &format!(
                    "/proxies/{}/toxics/{}",
                    self.name,
                    toxic["name"].as_str().unwrap()
                ),
                None,
                204,
                &[404],
            );
        }
    }

    /// Disabled, the proxy closes every connection through it and refuses
    /// new ones: the network cut. Enabled again, it listens on the same port.
    pub fn set_enabled(&self, enabled: bool) {
        self.toxiproxy.call(
            reqwest::Method::POST,
            &format!("/proxies/{}", self.name),
            Some(json!({"enabled": enabled})),
            200,
            &[],
        );
    }

    /// `url` (a store URL) with its host and port replaced by this proxy's.
    pub fn url_through(&self, url: &str) -> String {
        let mut url = url::Url::parse(url).unwrap();
        let (host, port) = self.listen.rsplit_once(':').unwrap();
        url.set_host(Some(host)).unwrap();
        url.set_port(Some(port.parse().unwrap())).unwrap();
        url.to_string()
    }
}

/// `host:port` of a store URL (its default port when the URL has none).
pub fn upstream_of(url: &str) -> String {
    let url = url::Url::parse(url).unwrap();
    let port = url.port().unwrap_or(match url.scheme() {
        "postgres" | "postgresql" => 5432,
        "redis" => 6379,
        _ => 5672,
    });
    format!("{}:{port}", url.host_str().unwrap())
}

/// One network fault the tests apply and then heal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// 200 ms ± 100 ms more each way.
    Latency,
    /// The proxy disabled: every connection closed at once, mid-statement
    /// or mid-transaction under load, and new ones refused.
    Cut,
    /// `reset_peer`: every connection, old and new, reset (RST).
    Reset,
    /// `limit_data`: every connection closed once 1,500 more bytes came
    /// from the store, most often in the middle of an answer.
    Truncated,
    /// `timeout` with timeout 0 both ways: the connections stay open and
    /// nothing gets through, as with a peer that vanished without a FIN or
    /// RST. A real half-open connection never carries data again, so the
    /// heal also closes the connections that lived through it (Toxiproxy
    /// drops the bytes it held back: kept open, such a connection would
    /// resume with a gap no real network makes).
    HalfOpen,
    /// 4 KB/s each way.
    Starved,
}

impl Fault {
    pub const ALL: [Fault; 6] = [
        Fault::Latency,
        Fault::Cut,
        Fault::Reset,
        Fault::Truncated,
        Fault::HalfOpen,
        Fault::Starved,
    ];

    pub fn apply(self, proxy: &Proxy<'_>) {
        match self {
            Self::Latency => proxy.add_both("latency", &json!({"latency": 200, "jitter": 100})),
            Self::Cut => proxy.set_enabled(false),
            Self::Reset => proxy.add("reset_peer", Stream::Downstream, json!({"timeout": 0})),
            Self::Truncated => proxy.add("limit_data", Stream::Downstream, json!({"bytes": 1500})),
            Self::HalfOpen => proxy.add_both("timeout", &json!({"timeout": 0})),
            Self::Starved => proxy.add_both("bandwidth", &json!({"rate": 4})),
        }
    }

    pub fn heal(self, proxy: &Proxy<'_>) {
        match self {
            Self::Cut => proxy.set_enabled(true),
            Self::HalfOpen => {
                proxy.clear();
                proxy.set_enabled(false);
                proxy.set_enabled(true);
            }
            Self::Latency | Self::Reset | Self::Truncated | Self::Starved => proxy.clear(),
        }
    }
}

/// What reading a store back by draining it found.
#[derive(Debug, Default)]
pub struct Drained {
    /// Tasks claimed by the drain.
    pub claimed: usize,
    /// Acknowledged submits found in the DLQ (found, not lost).
    pub dead: usize,
    /// Acknowledged submits found neither among the drained tasks nor
    /// among the acknowledged settles.
    pub lost: Vec<String>,
    /// Tasks that ended twice: settled with an acknowledgement more than
    /// once ([`settled_twice`]), or claimed by the drain after an
    /// acknowledged settle, or claimed twice by the drain.
    pub duplicated: Duplicates,
}

/// Tasks that ended twice, by how it showed.
#[derive(Debug, Default)]
pub struct Duplicates {
    pub settled_twice: Vec<String>,
    pub drained_after_settle: Vec<String>,
    pub drained_twice: Vec<String>,
}

impl Duplicates {
    pub fn count(&self) -> usize {
        self.settled_twice.len() + self.drained_after_settle.len() + self.drained_twice.len()
    }
}

/// Acknowledged settles of one task beyond the first.
pub fn settled_twice(acked: &Acknowledged) -> Vec<String> {
    let mut seen = HashSet::new();
    acked
        .settled
        .iter()
        .filter(|id| !seen.insert(id.as_str()))
        .cloned()
        .collect()
}

/// Claims and settles (SUCCESS) everything left in `queue` on the server at
/// `base` until claims come back empty for `quiet`, and counts it against
/// `acked`: every acknowledged submit must be seen exactly once among the
/// drained tasks and the acknowledged settles, and no acknowledged settle's
/// task may come back. For a store that cannot find a task by id; the
/// server must hold no lease of the load's (a fresh `rdq serve`).
pub fn drain(base: &str, queue: &str, acked: &Acknowledged, quiet: Duration) -> Drained {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut claims: HashMap<String, usize> = HashMap::new();
    let mut dead = HashSet::new();
    runtime.block_on(async {
        let api = super::Api::new(base);
        let mut empty_since = std::time::Instant::now();
        while empty_since.elapsed() < quiet {
            let (status, body) = api
                .post(
                    &format!("/v1/queues/{queue}/claim"),
                    json!({"max": 64, "lease_ms": 60000}),
                )
                .await;
            assert_eq!(status, 200, "claim while draining: {body}");
            let tasks = body["tasks"].as_array().unwrap();
            if tasks.is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            empty_since = std::time::Instant::now();
            for task in tasks {
                let id = task["id"].as_str().unwrap().to_owned();
                let (status, body) = api
                    .post(
                        &format!("/v1/tasks/{id}/settle"),
                        json!({"lease_token": task["lease_token"], "outcome": "SUCCESS"}),
                    )
                    .await;
                assert_eq!(status, 200, "settle while draining: {body}");
                *claims.entry(id).or_default() += 1;
            }
        }
        let (status, body) = api
            .get(&format!("/v1/queues/{queue}/dead?limit=1000"))
            .await;
        assert_eq!(status, 200, "DLQ while draining: {body}");
        for task in body["items"].as_array().unwrap() {
            dead.insert(task["id"].as_str().unwrap().to_owned());
        }
    });
    count_drained(acked, &claims, &dead)
}

/// The count behind [`drain`]: `claims` is how often the drain claimed each
/// task, `dead` the tasks in the DLQ.
pub fn count_drained(
    acked: &Acknowledged,
    claims: &HashMap<String, usize>,
    dead: &HashSet<String>,
) -> Drained {
    let settled: HashSet<&str> = acked.settled.iter().map(String::as_str).collect();
    let unknown: HashSet<&str> = acked.settle_unknown.iter().map(String::as_str).collect();
    let lost = acked
        .submitted
        .iter()
        .filter(|id| {
            !claims.contains_key(id.as_str())
                && !settled.contains(id.as_str())
                && !unknown.contains(id.as_str())
                && !dead.contains(id.as_str())
        })
        .cloned()
        .collect();
    let mut duplicated = Duplicates {
        settled_twice: settled_twice(acked),
        ..Duplicates::default()
    };
    for (id, times) in claims {
        if settled.contains(id.as_str()) {
            duplicated.drained_after_settle.push(id.clone());
        }
        if *times > 1 {
            duplicated.drained_twice.push(id.clone());
        }
    }
    Drained {
        claimed: claims.values().sum(),
        dead: acked
            .submitted
            .iter()
            .filter(|id| dead.contains(id.as_str()))
            .count(),
        lost,
        duplicated,
    }
}
