//! A NATS JetStream source against the real server `scripts/services.sh`
//! starts (`RDQ_TEST_NATS`, default nats://127.0.0.1:4222): every record
//! becomes exactly one task, another consumer makes no second task even
//! after the keys are gone, messages a dead reader fetched come again, a
//! poison record is kept DEAD, and a missing stream is reported in the
//! status.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use common::{
    Running, assert_back_pressure, count, embedded, source, tasks_by_locator, unique, wait_until,
};
use rdq_engine::QueuePolicy;
use rdq_envelope::{Status, dead_reasons};
use rdq_source::{NatsConfig, SourceConfig, SourceState};

fn url() -> String {
    std::env::var("RDQ_TEST_NATS").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

async fn context() -> jetstream::Context {
    jetstream::new(async_nats::connect(url()).await.expect("connect to NATS"))
}

/// A stream of its own over subjects `<name>.>`.
async fn make_stream(js: &jetstream::Context, name: &str) {
    js.create_stream(stream::Config {
        name: name.to_owned(),
        subjects: vec![format!("{name}.>")],
        ..stream::Config::default()
    })
    .await
    .expect("create the stream");
}

async fn publish(js: &jetstream::Context, subject: &str, payload: Vec<u8>) {
    js.publish(subject.to_owned(), payload.into())
        .await
        .expect("publish")
        .await
        .expect("the stream stores it");
}

fn nats_source(name: &str, queue: &str, stream: &str, consumer: &str) -> SourceConfig {
    let mut config = source(name, queue);
    config.nats = Some(NatsConfig {
        url: url(),
        stream: stream.to_owned(),
        consumer: Some(consumer.to_owned()),
        filter_subject: None,
        ack_wait_ms: 30_000,
    });
    config.key_header = Some("subject".to_owned());
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_becomes_one_task_and_a_new_consumer_makes_none_again() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path());
    let js = context().await;
    let name = unique("rdqsrc").replace('-', "_");
    make_stream(&js, &name).await;
    for i in 0..1_000 {
        publish(
            &js,
            &format!("{name}.orders.{}", i % 3),
            format!("m{i}").into_bytes(),
        )
        .await;
    }
    let config = nats_source("jsonce", "src.jsonce", &name, "c1");
    let running = Running::start(&engine, std::slice::from_ref(&config));
    wait_until(60, "1000 tasks are stored", || async {
        count(&engine, "src.jsonce", Status::Pending).await >= 1_000
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let status = running.status("jsonce");
    running.stop().await;
    let tasks = tasks_by_locator(&engine, "src.jsonce").await;
    assert_eq!(tasks.len(), 1_000, "one task per message");
    for seq in 1..=1_000u64 {
        let task = tasks
            .get(&format!("nats://{name}/{seq}"))
            .unwrap_or_else(|| panic!("sequence {seq}"));
        assert_eq!(task.payload_bytes(), format!("m{}", seq - 1).into_bytes());
        assert_eq!(
            task.headers.get("subject"),
            Some(&format!("{name}.orders.{}", (seq - 1) % 3))
        );
    }
    assert_eq!(status.ingested, 1_000);
    assert_eq!(status.lag, Some(0), "nothing left behind: {status:?}");
    let cursors = engine.source_cursors("jsonce").await.unwrap();
    assert_eq!(cursors.len(), 1);
    assert_eq!(cursors[0].partition, name);
    assert_eq!(cursors[0].next, 1_001);

    // The tasks are gone (no key left) and a new consumer reads the
    // stream from its start: the cursor keeps every message from
    // becoming a task again; new messages still come.
    engine
        .purge("src.jsonce", Status::Pending, false)
        .await
        .unwrap();
    let again = nats_source("jsonce", "src.jsonce", &name, "c2");
    let running = Running::start(&engine, std::slice::from_ref(&again));
    for i in 1_000..1_010 {
        publish(
            &js,
            &format!("{name}.orders.x"),
            format!("m{i}").into_bytes(),
        )
        .await;
    }
    wait_until(60, "the 10 new messages are stored", || async {
        count(&engine, "src.jsonce", Status::Pending).await >= 10
    })
    .await;
    wait_until(30, "the new consumer has read everything", || async {
        running.status("jsonce").lag == Some(0)
    })
    .await;
    let duplicates = running.status("jsonce").duplicates;
    running.stop().await;
    assert_eq!(tasks_by_locator(&engine, "src.jsonce").await.len(), 10);
    assert_eq!(
        duplicates, 0,
        "the new consumer starts at the stored cursor: nothing old comes"
    );
    js.delete_stream(&name).await.unwrap();
}

/// A reader died after fetching messages it never stored (they wait out
/// the acknowledgement wait on the durable consumer) while newer messages
/// keep coming: the next reader starts at the stored cursor, so the
/// fetched messages come again first and none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_a_dead_reader_fetched_are_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path());
    let js = context().await;
    let name = unique("rdqdead").replace('-', "_");
    make_stream(&js, &name).await;
    for i in 0..10 {
        publish(&js, &format!("{name}.a"), format!("m{i}").into_bytes()).await;
    }
    let config = nats_source("jsdead", "src.jsdead", &name, "c");
    let running = Running::start(&engine, std::slice::from_ref(&config));
    wait_until(30, "the first 10 are stored", || async {
        count(&engine, "src.jsdead", Status::Pending).await >= 10
    })
    .await;
    running.stop().await;
    for i in 10..20 {
        publish(&js, &format!("{name}.a"), format!("m{i}").into_bytes()).await;
    }
    // The dead reader: fetches 10 from the durable consumer, stores and
    // acknowledges nothing.
    let stream = js.get_stream(&name).await.unwrap();
    let consumer: jetstream::consumer::PullConsumer = stream.get_consumer("c").await.unwrap();
    let mut fetched = consumer.fetch().max_messages(10).messages().await.unwrap();
    let mut taken = 0;
    while let Some(m) = futures::StreamExt::next(&mut fetched).await {
        m.unwrap();
        taken += 1;
    }
    assert_eq!(taken, 10);
    for i in 20..30 {
        publish(&js, &format!("{name}.a"), format!("m{i}").into_bytes()).await;
    }
    let running = Running::start(&engine, std::slice::from_ref(&config));
    wait_until(30, "all 30 are stored", || async {
        count(&engine, "src.jsdead", Status::Pending).await >= 30
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await;
    let tasks = tasks_by_locator(&engine, "src.jsdead").await;
    assert_eq!(tasks.len(), 30, "every message once");
    for seq in 1..=30u64 {
        assert!(
            tasks.contains_key(&format!("nats://{name}/{seq}")),
            "sequence {seq}"
        );
    }
    js.delete_stream(&name).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_is_kept_dead_and_the_stream_moves_on() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path());
    engine
        .set_policy(
            "src.jspoison",
            &QueuePolicy {
                max_envelope_bytes: 2_048,
                ..QueuePolicy::default()
            },
        )
        .await
        .unwrap();
    let js = context().await;
    let name = unique("rdqpoison").replace('-', "_");
    make_stream(&js, &name).await;
    publish(&js, &format!("{name}.a"), b"first".to_vec()).await;
    publish(&js, &format!("{name}.a"), vec![b'y'; 10_000]).await;
    publish(&js, &format!("{name}.a"), b"last".to_vec()).await;
    let running = Running::start(
        &engine,
        &[nats_source("jspoison", "src.jspoison", &name, "c")],
    );
    wait_until(60, "three tasks are stored", || async {
        tasks_by_locator(&engine, "src.jspoison").await.len() == 3
    })
    .await;
    running.stop().await;
    let tasks = tasks_by_locator(&engine, "src.jspoison").await;
    let dead = &tasks[&format!("nats://{name}/2")];
    assert_eq!(dead.status, Status::Dead);
    assert_eq!(
        dead.dead_reason.as_ref().unwrap().code,
        dead_reasons::UNDECODABLE_SOURCE
    );
    assert_eq!(tasks[&format!("nats://{name}/3")].status, Status::Pending);
    js.delete_stream(&name).await.unwrap();
}

/// The reader stops fetching while the queue is above its high-water mark
/// (the consumer's pending messages wait in the stream) and fetches again
/// below the low-water mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_pressure_stops_fetching_above_the_high_water_mark_and_resumes_below_the_low() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path());
    let js = context().await;
    let name = unique("rdqbp").replace('-', "_");
    make_stream(&js, &name).await;
    for i in 0..2_000 {
        publish(&js, &format!("{name}.a"), format!("m{i}").into_bytes()).await;
    }
    let mut config = nats_source("jsbp", "src.jsbp", &name, "c");
    config.high_water = Some(300);
    config.low_water = Some(100);
    config.batch = 50;
    let running = Running::start(&engine, std::slice::from_ref(&config));
    assert_back_pressure(&engine, &running, "jsbp", "src.jsbp", 2_000).await;
    running.stop().await;
    assert_eq!(
        tasks_by_locator(&engine, "src.jsbp").await.len(),
        2_000,
        "every message once"
    );
    js.delete_stream(&name).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_stream_is_in_the_status() {
    let engine = common::memory();
    let running = Running::start(
        &engine,
        &[nats_source(
            "jsmissing",
            "src.jsmissing",
            "NO_SUCH_STREAM_X",
            "c",
        )],
    );
    wait_until(30, "the error is reported", || async {
        running.status("jsmissing").last_error.is_some()
    })
    .await;
    let status = running.status("jsmissing");
    assert_eq!(status.state, SourceState::Retrying);
    let error = status.last_error.unwrap();
    assert!(
        error.contains("source jsmissing") && error.contains("NO_SUCH_STREAM_X"),
        "{error}"
    );
    running.stop().await;
}
