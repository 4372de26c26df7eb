//! The broker restarted under load: a private Kafka broker
//! (`scripts/kafka-node.sh`) is `kill -9`ed and a private nats-server with
//! JetStream stopped, and each started again on the same data while
//! records keep coming and a source reads them. The source reconnects by itself; every
//! record the broker acknowledged is exactly one task.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Running, embedded, source, tasks_by_locator, unique, wait_until};
use rdq_source::{KafkaConfig, NatsConfig};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn script(name: &str) -> String {
    format!("{}/../../scripts/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn kafka_broker(dir: &Path, port: u16, controller: u16) -> Child {
    Command::new("bash")
        .arg(script("kafka-node.sh"))
        .arg(dir)
        .arg(port.to_string())
        .arg(controller.to_string())
        .args([
            "broker.session.timeout.ms=3000",
            "broker.heartbeat.interval.ms=500",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn wait_kafka(port: u16) {
    let ok = Command::new("bash")
        .arg(script("kafka-node.sh"))
        .args(["ready", &format!("127.0.0.1:{port}"), "120"])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "the private Kafka broker answers");
}

/// Kills a process group leader and what it started (the JVM under bash).
fn kill_hard(child: &mut Child) {
    let _ = Command::new("pkill")
        .args(["-9", "-P", &child.id().to_string()])
        .status();
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_broker_restarted_under_load_loses_and_duplicates_nothing() {
    use rdkafka::ClientConfig;
    use rdkafka::producer::{FutureProducer, FutureRecord};

    let data = tempfile::tempdir().unwrap();
    let (port, controller) = (free_port(), free_port());
    let mut broker = kafka_broker(data.path(), port, controller);
    wait_kafka(port);
    let brokers = format!("127.0.0.1:{port}");
    let topic = unique("restart");
    assert!(
        Command::new("bash")
            .arg(script("kafka-node.sh"))
            .args(["topic", &brokers, &topic, "2"])
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success()
    );
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path());
    let mut config = source("kafka-restart", "src.krestart");
    config.kafka = Some(KafkaConfig {
        brokers: brokers.clone(),
        topic: topic.clone(),
        group: Some(unique("g")),
        cluster: "test".into(),
        properties: Default::default(),
    });
    let running = Running::start(&engine, std::slice::from_ref(&config));

    // An idempotent producer: a send retried across the restart is stored
    // once by the broker, so every acknowledged payload is one record.
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", "120000")
        .create()
        .unwrap();
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let total = 3_000;
    let producing = {
        let (acked, topic) = (acked.clone(), topic.clone());
        tokio::spawn(async move {
            let mut sends = Vec::new();
            for i in 0..total {
                let (p, t, acked) = (producer.clone(), topic.clone(), acked.clone());
                sends.push(tokio::spawn(async move {
                    let payload = format!("p{i}");
                    if p.send(
                        FutureRecord::<str, str>::to(&t).payload(&payload),
                        Duration::from_secs(120),
                    )
                    .await
                    .is_ok()
                    {
                        acked.lock().unwrap().insert(payload.into_bytes());
                    }
                }));
                if i % 100 == 99 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            for send in sends {
                send.await.unwrap();
            }
        })
    };
    wait_until(60, "records are being ingested", || async {
        running.status("kafka-restart").ingested > 300
    })
    .await;
    kill_hard(&mut broker);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut broker = kafka_broker(data.path(), port, controller);
    wait_kafka(port);
    producing.await.unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > total / 2,
        "most sends were acknowledged: {}",
        acked.len()
    );
    wait_until(120, "every acknowledged record is a task", || async {
        let stored = tasks_by_locator(&engine, "src.krestart").await;
        stored.len() >= acked.len()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    running.stop().await;
    let stored = tasks_by_locator(&engine, "src.krestart").await;
    let payloads: Vec<Vec<u8>> = stored.values().map(|t| t.payload_bytes()).collect();
    let distinct: BTreeSet<Vec<u8>> = payloads.iter().cloned().collect();
    assert_eq!(distinct.len(), payloads.len(), "no record is two tasks");
    assert!(
        acked.is_subset(&distinct),
        "every acknowledged record is a task"
    );
    kill_hard(&mut broker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_server_restarted_under_load_loses_and_duplicates_nothing() {
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let start = || {
        Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(data.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut server = start();
    let url = format!("nats://127.0.0.1:{port}");
    let connect = || async {
        for _ in 0..100 {
            if let Ok(client) = async_nats::connect(&url).await {
                return client;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the private nats-server answers");
    };
    let js = async_nats::jetstream::new(connect().await);
    let stream = unique("RESTART").replace('-', "_");
    js.create_stream(async_nats::jetstream::stream::Config {
        name: stream.clone(),
        subjects: vec![format!("{stream}.>")],
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path());
    let mut config = source("nats-restart", "src.nrestart");
    config.nats = Some(NatsConfig {
        url: url.clone(),
        stream: stream.clone(),
        consumer: None,
        filter_subject: None,
        ack_wait_ms: 30_000,
    });
    let running = Running::start(&engine, std::slice::from_ref(&config));
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let total = 3_000;
    let producing = {
        let (acked, stream, js) = (acked.clone(), stream.clone(), js.clone());
        tokio::spawn(async move {
            for i in 0..total {
                let payload = format!("p{i}");
                // A message id: a publish tried again is stored once.
                for _ in 0..200 {
                    let mut headers = async_nats::HeaderMap::new();
                    headers.insert("Nats-Msg-Id", payload.as_str());
                    let sent = js
                        .publish_with_headers(
                            format!("{stream}.r"),
                            headers,
                            payload.clone().into(),
                        )
                        .await;
                    if let Ok(ack) = sent
                        && ack.await.is_ok()
                    {
                        acked.lock().unwrap().insert(payload.clone().into_bytes());
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                if i % 100 == 99 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        })
    };
    wait_until(60, "messages are being ingested", || async {
        running.status("nats-restart").ingested > 300
    })
    .await;
    // Stopped, not killed: nats-server 2.9 acknowledges a publish before
    // its file store has written it, so a kill can lose acknowledged
    // messages in the server itself.
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let _ = server.wait();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut server = start();
    producing.await.unwrap();
    let acked = acked.lock().unwrap().clone();
    assert_eq!(
        acked.len(),
        total,
        "every publish was acknowledged in the end"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while tasks_by_locator(&engine, "src.nrestart").await.len() < acked.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {} acknowledged messages are tasks after 120 s; the source: {:?}",
            tasks_by_locator(&engine, "src.nrestart").await.len(),
            acked.len(),
            running.status("nats-restart")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    running.stop().await;
    let stored = tasks_by_locator(&engine, "src.nrestart").await;
    let payloads: Vec<Vec<u8>> = stored.values().map(|t| t.payload_bytes()).collect();
    let distinct: BTreeSet<Vec<u8>> = payloads.iter().cloned().collect();
    assert_eq!(distinct.len(), payloads.len(), "no message is two tasks");
    assert_eq!(distinct, acked, "every acknowledged message is one task");
    let _ = server.kill();
    let _ = server.wait();
}
