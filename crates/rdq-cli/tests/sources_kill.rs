//! The bridge killed: `rdq source run` is `kill -9`ed at random moments
//! while records keep arriving (`RDQ_SOURCE_KILLS` times per kind, 20 by
//! default), then `rdq serve` runs the same source until it has read
//! everything. Every record is exactly one task: none lost, none twice.
//! Kafka, NATS JetStream and SQS, each against the real server
//! `scripts/services.sh` starts, on the embedded store.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Api, RDQ, RdqServer};
use rdq_engine::{Engine, ListQuery, SOURCE_HEADER, SystemClock};

fn kills() -> usize {
    std::env::var("RDQ_SOURCE_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}{}x{}", std::process::id(), nanos % 1_000_000_000)
}

/// A small deterministic generator, seeded from the clock and printed.
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        eprintln!("sources_kill: seed {seed}");
        Self(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn spawn_bridge(config: &Path, store: &Path) -> Child {
    Command::new(RDQ)
        .args(["source", "run", "--config"])
        .arg(config)
        .arg("--store")
        .arg(store)
        .env("RDQ_LOG", "warn")
        .env_remove("RDQ_STORE")
        .env_remove("RDQ_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Kills `rdq source run` at random moments while `produce` runs, then lets
/// `rdq serve` finish the source; answers the locators and payloads stored.
async fn kill_while_producing<F>(
    name: &str,
    source_toml: &str,
    total: usize,
    produce: F,
) -> Vec<(String, Vec<u8>)>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sources.toml");
    std::fs::write(&config, source_toml).unwrap();
    let store = dir.path().join("data");
    let producing = tokio::spawn(produce);
    let mut rng = Rng::new();
    for _ in 0..kills() {
        let mut bridge = spawn_bridge(&config, &store);
        tokio::time::sleep(Duration::from_millis(300 + rng.below(1_500))).await;
        bridge.kill().unwrap();
        bridge.wait().unwrap();
    }
    producing.await.unwrap();

    // The server runs the same source until every record is a task.
    let server = RdqServer::start_on(dir.path(), source_toml, store.to_str().unwrap(), &[]);
    let client = Api::new(&server.base);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, queues) = client.get("/v1/queues").await;
        let pending = queues["queues"]
            .as_array()
            .and_then(|qs| qs.iter().find(|q| q["queue"] == name))
            .and_then(|q| q["pending"].as_u64())
            .unwrap_or(0);
        if pending >= total as u64 {
            break;
        }
        if Instant::now() > deadline {
            let (_, status) = client.get(&format!("/v1/sources/{name}")).await;
            panic!("{pending} of {total} tasks after 120 s; the source: {status}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Whatever would come twice has had time to.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(server.terminate(), "rdq serve exits cleanly");

    let engine = Engine::new(
        Arc::new(rdq_store_embedded::EmbeddedStore::open(&store).unwrap()),
        Arc::new(SystemClock),
    );
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = engine
            .list(&ListQuery {
                queue: name.to_owned(),
                cursor,
                ..ListQuery::default()
            })
            .await
            .unwrap();
        for env in page.items {
            out.push((env.headers[SOURCE_HEADER].clone(), env.payload_bytes()));
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    out
}

/// Every expected payload once, every locator once.
fn assert_exactly_once(stored: &[(String, Vec<u8>)], expected: &BTreeSet<Vec<u8>>) {
    let locators: BTreeSet<&String> = stored.iter().map(|(l, _)| l).collect();
    assert_eq!(locators.len(), stored.len(), "a record became two tasks");
    let payloads: BTreeSet<Vec<u8>> = stored.iter().map(|(_, p)| p.clone()).collect();
    assert_eq!(payloads.len(), stored.len(), "a payload was stored twice");
    let missing: Vec<String> = expected
        .difference(&payloads)
        .take(5)
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    assert!(missing.is_empty(), "records lost, e.g. {missing:?}");
    assert_eq!(payloads, *expected, "exactly the records produced");
}

/// Records `p<i>` for `i` in `0..total`, sent at a steady pace over about
/// `secs` seconds by `send`.
async fn paced<S, Fut>(total: usize, secs: u64, mut send: S)
where
    S: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let per_tick = total.div_ceil((secs * 10) as usize).max(1);
    let mut i = 0;
    while i < total {
        for _ in 0..per_tick.min(total - i) {
            send(i).await;
            i += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn expected(total: usize) -> BTreeSet<Vec<u8>> {
    (0..total).map(|i| format!("p{i}").into_bytes()).collect()
}

/// How long the kills take, roughly: what the producers spread over.
fn kill_secs() -> u64 {
    (kills() as u64 * 1_300 / 1_000).max(5)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_bridge_killed_at_random_loses_and_duplicates_nothing() {
    use rdkafka::ClientConfig;
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::producer::{FutureProducer, FutureRecord};

    let brokers = std::env::var("RDQ_TEST_KAFKA").unwrap_or_else(|_| "127.0.0.1:9092".into());
    let topic = unique("rdq-kill-");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()
        .unwrap();
    for made in admin
        .create_topics(
            &[NewTopic::new(&topic, 3, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .unwrap()
    {
        made.unwrap();
    }
    let total = 4_000;
    let name = "kill.kafka";
    // Static membership: a restarted bridge takes its partitions back at
    // once instead of waiting out the killed one's session.
    let toml = format!(
        r#"
[[sources]]
name = "{name}"
queue = "{name}"
handler = "kill.record"
batch = 100
retry_ms = 200
[sources.kafka]
brokers = "{brokers}"
topic = "{topic}"
group = "{topic}"
[sources.kafka.properties]
"group.instance.id" = "kill-test"
"session.timeout.ms" = "6000"
"#
    );
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("acks", "all")
        .create()
        .unwrap();
    let (t, p) = (topic.clone(), producer.clone());
    let produce = async move {
        paced(total, kill_secs(), |i| {
            let (t, p) = (t.clone(), p.clone());
            async move {
                let payload = format!("p{i}");
                let key = format!("k{}", i % 11);
                p.send(
                    FutureRecord::to(&t).payload(&payload).key(&key),
                    Duration::from_secs(30),
                )
                .await
                .map_err(|(e, _)| e)
                .unwrap();
            }
        })
        .await;
    };
    let stored = kill_while_producing(name, &toml, total, produce).await;
    assert_exactly_once(&stored, &expected(total));
    let _ = admin.delete_topics(&[&topic], &AdminOptions::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_bridge_killed_at_random_loses_and_duplicates_nothing() {
    let url = std::env::var("RDQ_TEST_NATS").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let js = async_nats::jetstream::new(async_nats::connect(&url).await.unwrap());
    let stream = unique("KILL");
    js.create_stream(async_nats::jetstream::stream::Config {
        name: stream.clone(),
        subjects: vec![format!("{stream}.>")],
        ..Default::default()
    })
    .await
    .unwrap();
    let total = 4_000;
    let name = "kill.nats";
    let toml = format!(
        r#"
[[sources]]
name = "{name}"
queue = "{name}"
handler = "kill.record"
batch = 100
retry_ms = 200
[sources.nats]
url = "{url}"
stream = "{stream}"
ack_wait_ms = 60000
"#
    );
    let (s, j) = (stream.clone(), js.clone());
    let produce = async move {
        paced(total, kill_secs(), |i| {
            let (s, j) = (s.clone(), j.clone());
            async move {
                j.publish(format!("{s}.r"), format!("p{i}").into())
                    .await
                    .unwrap()
                    .await
                    .unwrap();
            }
        })
        .await;
    };
    let stored = kill_while_producing(name, &toml, total, produce).await;
    assert_exactly_once(&stored, &expected(total));
    js.delete_stream(&stream).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqs_bridge_killed_at_random_loses_and_duplicates_nothing() {
    use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};

    let endpoint = std::env::var("RDQ_TEST_SQS").unwrap_or_else(|_| "http://127.0.0.1:9324".into());
    let sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("x", "x", None, None, "test"))
            .endpoint_url(&endpoint)
            .build(),
    );
    let url = sqs
        .create_queue()
        .queue_name(unique("rdq-kill-"))
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_owned();
    let total = 2_000;
    let name = "kill.sqs";
    // A short visibility timeout: what a killed bridge received comes back
    // soon, and finds its task by its key if it was stored.
    let toml = format!(
        r#"
[[sources]]
name = "{name}"
queue = "{name}"
handler = "kill.record"
retry_ms = 200
[sources.sqs]
queue_url = "{url}"
endpoint = "{endpoint}"
access_key_id = "x"
secret_access_key = "x"
visibility_timeout_s = 3
"#
    );
    let (u, c) = (url.clone(), sqs.clone());
    let produce = async move {
        paced(total, kill_secs(), |i| {
            let (u, c) = (u.clone(), c.clone());
            async move {
                c.send_message()
                    .queue_url(&u)
                    .message_body(format!("p{i}"))
                    .send()
                    .await
                    .unwrap();
            }
        })
        .await;
    };
    let stored = kill_while_producing(name, &toml, total, produce).await;
    assert_exactly_once(&stored, &expected(total));
    let _ = sqs.delete_queue().queue_url(&url).send().await;
}
