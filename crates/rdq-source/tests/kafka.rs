//! A Kafka source against the real broker `scripts/services.sh` starts
//! (`RDQ_TEST_KAFKA`, default 127.0.0.1:9092): every record becomes exactly
//! one task, partitions move between bridges on a rebalance, a group reset
//! or pruned keys make no second task, a poison
//! record is kept DEAD while its partition moves on, back-pressure pauses
//! and resumes, and a missing topic or an unreachable broker is reported in
//! the source's status.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use common::{
    Running, assert_back_pressure, embedded, pending, source, tasks_by_locator, unique, wait_until,
};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdq_engine::QueuePolicy;
use rdq_envelope::{Status, dead_reasons};
use rdq_source::{KafkaConfig, SourceConfig, SourceState};

fn brokers() -> String {
    std::env::var("RDQ_TEST_KAFKA").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

async fn create_topic(name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .expect("an admin client");
    let made = admin
        .create_topics(
            &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .expect("create the topic");
    for result in made {
        result.expect("the topic is created");
    }
}

async fn delete_topic(name: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .expect("an admin client");
    let _ = admin.delete_topics(&[name], &AdminOptions::new()).await;
}

fn producer() -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .expect("a producer")
}

/// Sends `n` records `r0…` to `topic`, keyed `k<i % 7>`, with a header,
/// spread over the partitions by key.
async fn produce(producer: &FutureProducer, topic: &str, from: usize, n: usize) {
    let mut sends = Vec::new();
    for i in from..from + n {
        let payload = format!("r{i}");
        let key = format!("k{}", i % 7);
        let headers = OwnedHeaders::new().insert(Header {
            key: "trace",
            value: Some(format!("t{i}").as_bytes()),
        });
        sends.push(async move {
            producer
                .send(
                    FutureRecord::to(topic)
                        .payload(&payload)
                        .key(&key)
                        .headers(headers),
                    Duration::from_secs(30),
                )
                .await
                .map_err(|(e, _)| e)
                .expect("the broker takes the record");
        });
    }
    futures::future::join_all(sends).await;
}

fn kafka_source(name: &str, queue: &str, topic: &str, group: &str) -> SourceConfig {
    let mut config = source(name, queue);
    config.kafka = Some(KafkaConfig {
        brokers: brokers(),
        topic: topic.to_owned(),
        group: Some(group.to_owned()),
        cluster: "test".to_owned(),
        properties: [
            ("session.timeout.ms".to_owned(), "6000".to_owned()),
            ("heartbeat.interval.ms".to_owned(), "500".to_owned()),
        ]
        .into_iter()
        .collect(),
    });
    config.key_header = Some("kafka.key".to_owned());
    config.key_as_flow_key = true;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_becomes_one_task_and_a_reset_makes_none_again() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path());
    let topic = unique("rdq-src-once");
    create_topic(&topic, 3).await;
    let producer = producer();
    produce(&producer, &topic, 0, 3_000).await;

    let config = kafka_source("once", "src.once", &topic, &unique("g"));
    let running = Running::start(&engine, std::slice::from_ref(&config));
    wait_until(60, "3000 tasks are stored", || async {
        pending(&engine, "src.once").await >= 3_000
    })
    .await;
    // More records while it runs.
    produce(&producer, &topic, 3_000, 500).await;
    wait_until(60, "3500 tasks are stored", || async {
        pending(&engine, "src.once").await >= 3_500
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = running.status("once");
    running.stop().await;

    let tasks = tasks_by_locator(&engine, "src.once").await;
    assert_eq!(tasks.len(), 3_500, "one task per record");
    let mut payloads: Vec<String> = tasks
        .values()
        .map(|t| String::from_utf8(t.payload_bytes()).unwrap())
        .collect();
    payloads.sort();
    let mut expected: Vec<String> = (0..3_500).map(|i| format!("r{i}")).collect();
    expected.sort();
    assert_eq!(payloads, expected, "every record's bytes, once");
    let (locator, task) = tasks.iter().next().unwrap();
    assert!(
        locator.starts_with(&format!("kafka://test/{topic}/")),
        "{locator}"
    );
    let n: usize = String::from_utf8(task.payload_bytes()).unwrap()[1..]
        .parse()
        .unwrap();
    assert_eq!(task.headers.get("trace"), Some(&format!("t{n}")));
    assert_eq!(task.headers.get("kafka.key"), Some(&format!("k{}", n % 7)));
    assert_eq!(
        task.headers.get("rdq.flow_key"),
        Some(&format!("k{}", n % 7))
    );
    assert_eq!(task.handler_ref, "test.record");
    assert_eq!(status.ingested, 3_500);
    assert!(status.cursors_in_store);

    // The store holds each partition's cursor: one past its last record.
    let cursors = engine.source_cursors("once").await.unwrap();
    let total: u64 = cursors.iter().map(|c| c.next).sum();
    assert_eq!(
        total, 3_500,
        "the cursors stand past every record: {cursors:?}"
    );

    // Every task is done and pruned-like gone: remove them, so no
    // idempotency key is left; then the group is reset (a new group reads
    // from the earliest offset). The store's cursors keep every record
    // from becoming a task again; new records still come.
    engine
        .purge("src.once", Status::Pending, false)
        .await
        .expect("purge");
    let reset = kafka_source("once", "src.once", &topic, &unique("g-reset"));
    let running = Running::start(&engine, std::slice::from_ref(&reset));
    produce(&producer, &topic, 3_500, 50).await;
    wait_until(60, "the 50 new records are stored", || async {
        pending(&engine, "src.once").await >= 50
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    running.stop().await;
    let again = tasks_by_locator(&engine, "src.once").await;
    assert_eq!(again.len(), 50, "only the new records became tasks");
    delete_topic(&topic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_record_is_kept_dead_and_its_partition_moves_on() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path());
    engine
        .set_policy(
            "src.poison",
            &QueuePolicy {
                max_envelope_bytes: 2_048,
                ..QueuePolicy::default()
            },
        )
        .await
        .unwrap();
    let topic = unique("rdq-src-poison");
    create_topic(&topic, 1).await;
    let producer = producer();
    let big = "x".repeat(10_000);
    let bad = [0xffu8, 0xfe];
    for (payload, header) in [
        ("first", None),
        (big.as_str(), None),
        ("bad header", Some(&bad[..])),
        ("last", None),
    ] {
        let mut record = FutureRecord::<str, str>::to(&topic).payload(payload);
        if let Some(value) = header {
            record = record.headers(OwnedHeaders::new().insert(Header {
                key: "h",
                value: Some(value),
            }));
        }
        producer
            .send(record, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
    let config = kafka_source("poison", "src.poison", &topic, &unique("g"));
    let running = Running::start(&engine, std::slice::from_ref(&config));
    wait_until(60, "four tasks are stored", || async {
        tasks_by_locator(&engine, "src.poison").await.len() == 4
    })
    .await;
    let status = running.status("poison");
    running.stop().await;
    let tasks = tasks_by_locator(&engine, "src.poison").await;
    let by_offset = |o: u64| {
        tasks
            .get(&format!("kafka://test/{topic}/0/{o}"))
            .unwrap_or_else(|| panic!("offset {o}"))
    };
    assert_eq!(by_offset(0).status, Status::Pending);
    assert_eq!(
        by_offset(3).status,
        Status::Pending,
        "the partition moved on"
    );
    for offset in [1, 2] {
        let dead = by_offset(offset);
        assert_eq!(dead.status, Status::Dead);
        let reason = dead.dead_reason.as_ref().unwrap();
        assert_eq!(reason.code, dead_reasons::UNDECODABLE_SOURCE);
        assert_eq!(reason.by, "source");
    }
    assert!(by_offset(1).payload_bytes().starts_with(b"xxxx"));
    assert!(
        by_offset(1)
            .dead_reason
            .as_ref()
            .unwrap()
            .message
            .as_deref()
            .unwrap()
            .contains("10000 bytes")
    );
    assert_eq!(by_offset(2).payload_bytes(), b"bad header");
    assert_eq!(status.dead, 2);
    assert_eq!(status.ingested, 2);
    delete_topic(&topic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_pressure_pauses_above_the_high_water_mark_and_resumes_below_the_low() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path());
    let topic = unique("rdq-src-bp");
    create_topic(&topic, 2).await;
    produce(&producer(), &topic, 0, 2_000).await;
    let mut config = kafka_source("bp", "src.bp", &topic, &unique("g"));
    config.high_water = Some(300);
    config.low_water = Some(100);
    config.batch = 50;
    let running = Running::start(&engine, std::slice::from_ref(&config));
    assert_back_pressure(&engine, &running, "bp", "src.bp", 2_000).await;
    running.stop().await;
    let tasks = tasks_by_locator(&engine, "src.bp").await;
    assert_eq!(tasks.len(), 2_000, "every record once");
    delete_topic(&topic).await;
}

/// Two bridges of one source in one consumer group share the partitions;
/// one stops while records keep coming, the group gives its partitions to
/// the other, which resumes each at its stored cursor: every record once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_move_between_bridges_on_a_rebalance_and_nothing_is_lost_or_doubled() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path());
    let topic = unique("rdq-src-rebalance");
    create_topic(&topic, 4).await;
    let producer = producer();
    let config = kafka_source("rebal", "src.rebal", &topic, &unique("g"));
    let first = Running::start(&engine, std::slice::from_ref(&config));
    let second = Running::start(&engine, std::slice::from_ref(&config));
    // Records keep coming until the group has given each bridge partitions
    // and each has stored some.
    let mut sent = 0;
    while !(first.status("rebal").ingested > 0 && second.status("rebal").ingested > 0) {
        assert!(
            sent < 20_000,
            "both bridges store records within 200 rounds"
        );
        produce(&producer, &topic, sent, 100).await;
        sent += 100;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    produce(&producer, &topic, sent, 1_000).await;
    sent += 1_000;
    first.stop().await;
    produce(&producer, &topic, sent, 1_000).await;
    let total = sent + 1_000;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while tasks_by_locator(&engine, "src.rebal").await.len() < total {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {total} records are tasks after 90 s; the bridge left: {:?}",
            tasks_by_locator(&engine, "src.rebal").await.len(),
            second.status("rebal")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    second.stop().await;
    let tasks = tasks_by_locator(&engine, "src.rebal").await;
    assert_eq!(tasks.len(), total, "one task per record");
    let payloads: std::collections::BTreeSet<Vec<u8>> =
        tasks.values().map(|t| t.payload_bytes()).collect();
    assert_eq!(payloads.len(), total, "every record once");
    let cursors = engine.source_cursors("rebal").await.unwrap();
    assert_eq!(
        cursors.iter().map(|c| c.next).sum::<u64>(),
        total as u64,
        "the cursors stand past every record: {cursors:?}"
    );
    delete_topic(&topic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_or_an_unreachable_broker_is_in_the_status() {
    let engine = common::memory();
    let missing = kafka_source("missing", "src.missing", &unique("no-such-topic"), "g");
    let mut unreachable = kafka_source("unreachable", "src.unreachable", "t", "g");
    unreachable.kafka.as_mut().unwrap().brokers = "127.0.0.1:1".to_owned();
    unreachable.kafka.as_mut().unwrap().properties.insert(
        "socket.connection.setup.timeout.ms".to_owned(),
        "1000".to_owned(),
    );
    let running = Running::start(&engine, &[missing, unreachable]);
    wait_until(60, "both report their errors", || async {
        running.status("missing").last_error.is_some()
            && running.status("unreachable").last_error.is_some()
    })
    .await;
    let missing = running.status("missing");
    assert_eq!(missing.state, SourceState::Retrying);
    let error = missing.last_error.unwrap();
    assert!(
        error.contains("source missing") && error.contains("does not exist"),
        "{error}"
    );
    let error = running.status("unreachable").last_error.unwrap();
    assert!(
        error.contains("source unreachable") && error.contains("127.0.0.1:1"),
        "{error}"
    );
    running.stop().await;
}
