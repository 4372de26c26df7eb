//! An SQS source against the SQS-compatible server `scripts/services.sh`
//! starts (ElasticMQ; `RDQ_TEST_SQS`, default http://127.0.0.1:9324):
//! every message of a standard and of a FIFO queue becomes exactly one
//! task and is deleted, a message delivered again finds its task, and a
//! missing queue is reported in the status.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::QueueAttributeName;
use common::{
    Running, assert_back_pressure, count, embedded, source, tasks_by_locator, unique, wait_until,
};
use rdq_envelope::Status;
use rdq_source::{SourceConfig, SourceState, SqsConfig};

fn endpoint() -> String {
    std::env::var("RDQ_TEST_SQS").unwrap_or_else(|_| "http://127.0.0.1:9324".to_owned())
}

fn client() -> Client {
    Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("x", "x", None, None, "test"))
            .endpoint_url(endpoint())
            .build(),
    )
}

async fn make_queue(sqs: &Client, name: &str, fifo: bool) -> String {
    let mut create = sqs.create_queue().queue_name(name);
    if fifo {
        create = create
            .attributes(QueueAttributeName::FifoQueue, "true")
            .attributes(QueueAttributeName::ContentBasedDeduplication, "true");
    }
    create
        .send()
        .await
        .expect("create the queue")
        .queue_url()
        .expect("a queue URL")
        .to_owned()
}

fn sqs_source(name: &str, queue: &str, url: &str) -> SourceConfig {
    let mut config = source(name, queue);
    config.sqs = Some(SqsConfig {
        queue_url: url.to_owned(),
        region: "us-east-1".to_owned(),
        endpoint: Some(endpoint()),
        access_key_id: Some("x".to_owned()),
        secret_access_key: Some("x".to_owned()),
        receivers: 4,
        visibility_timeout_s: 30,
    });
    config.key_header = Some("group".to_owned());
    config
}

async fn visible(sqs: &Client, url: &str) -> u64 {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let get = |a: QueueAttributeName| -> u64 {
        attributes
            .attributes()
            .and_then(|m| m.get(&a))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    get(QueueAttributeName::ApproximateNumberOfMessages)
        + get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_becomes_one_task_and_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path());
    let sqs = client();
    let standard = make_queue(&sqs, &unique("rdq-std"), false).await;
    let fifo = make_queue(&sqs, &format!("{}.fifo", unique("rdq-fifo")), true).await;
    for i in 0..300 {
        sqs.send_message()
            .queue_url(&standard)
            .message_body(format!("s{i}"))
            .send()
            .await
            .unwrap();
        sqs.send_message()
            .queue_url(&fifo)
            .message_body(format!("f{i}"))
            .message_group_id(format!("g{}", i % 4))
            .send()
            .await
            .unwrap();
    }
    let running = Running::start(
        &engine,
        &[
            sqs_source("sqsstd", "src.sqsstd", &standard),
            sqs_source("sqsfifo", "src.sqsfifo", &fifo),
        ],
    );
    wait_until(60, "600 tasks are stored", || async {
        count(&engine, "src.sqsstd", Status::Pending).await >= 300
            && count(&engine, "src.sqsfifo", Status::Pending).await >= 300
    })
    .await;
    wait_until(30, "every message is deleted", || async {
        visible(&sqs, &standard).await == 0 && visible(&sqs, &fifo).await == 0
    })
    .await;
    assert!(
        !running.status("sqsstd").cursors_in_store,
        "SQS has no positions"
    );
    running.stop().await;
    let std_tasks = tasks_by_locator(&engine, "src.sqsstd").await;
    let fifo_tasks = tasks_by_locator(&engine, "src.sqsfifo").await;
    assert_eq!(std_tasks.len(), 300);
    assert_eq!(fifo_tasks.len(), 300);
    let mut bodies: Vec<String> = fifo_tasks
        .values()
        .map(|t| String::from_utf8(t.payload_bytes()).unwrap())
        .collect();
    bodies.sort();
    let mut expected: Vec<String> = (0..300).map(|i| format!("f{i}")).collect();
    expected.sort();
    assert_eq!(bodies, expected);
    let (locator, task) = fifo_tasks.iter().next().unwrap();
    assert!(locator.starts_with(&format!("sqs://{fifo}/")), "{locator}");
    assert!(
        task.headers
            .get("group")
            .is_some_and(|g| g.starts_with('g'))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_delivered_again_finds_its_task() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path());
    let sqs = client();
    let url = make_queue(&sqs, &unique("rdq-again"), false).await;
    sqs.send_message()
        .queue_url(&url)
        .message_body("once")
        .send()
        .await
        .unwrap();
    // A receive whose delete was lost: the message comes again after its
    // visibility timeout, with the same id.
    let first = sqs
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(1)
        .send()
        .await
        .unwrap();
    let id = first.messages()[0].message_id().unwrap().to_owned();
    let running = Running::start(&engine, &[sqs_source("sqsagain", "src.sqsagain", &url)]);
    wait_until(30, "the task is stored", || async {
        count(&engine, "src.sqsagain", Status::Pending).await >= 1
    })
    .await;
    sqs.send_message()
        .queue_url(&url)
        .message_body("twice?")
        .send()
        .await
        .unwrap();
    wait_until(30, "the second message is stored", || async {
        count(&engine, "src.sqsagain", Status::Pending).await >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    running.stop().await;
    let tasks = tasks_by_locator(&engine, "src.sqsagain").await;
    assert_eq!(tasks.len(), 2);
    assert!(tasks.contains_key(&format!("sqs://{url}/{id}")));
}

/// Every receiver stops receiving while the queue is above its high-water
/// mark (the messages wait in SQS) and receives again below the low-water
/// mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_pressure_stops_receiving_above_the_high_water_mark_and_resumes_below_the_low() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path());
    let sqs = client();
    let url = make_queue(&sqs, &unique("rdq-bp"), false).await;
    for batch in 0..200 {
        let mut send = sqs.send_message_batch().queue_url(&url);
        for i in 0..10 {
            send = send.entries(
                aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                    .id(format!("e{i}"))
                    .message_body(format!("m{}", batch * 10 + i))
                    .build()
                    .unwrap(),
            );
        }
        let sent = send.send().await.unwrap();
        assert!(sent.failed().is_empty(), "{:?}", sent.failed());
    }
    let mut config = sqs_source("sqsbp", "src.sqsbp", &url);
    config.high_water = Some(300);
    config.low_water = Some(100);
    config.batch = 50;
    let running = Running::start(&engine, std::slice::from_ref(&config));
    assert_back_pressure(&engine, &running, "sqsbp", "src.sqsbp", 2_000).await;
    running.stop().await;
    assert_eq!(
        tasks_by_locator(&engine, "src.sqsbp").await.len(),
        2_000,
        "every message once"
    );
    assert_eq!(visible(&sqs, &url).await, 0, "every message deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_queue_is_in_the_status() {
    let engine = common::memory();
    let url = format!("{}/000000000000/no-such-queue-x", endpoint());
    let running = Running::start(&engine, &[sqs_source("sqsmissing", "src.sqsmissing", &url)]);
    wait_until(30, "the error is reported", || async {
        running.status("sqsmissing").last_error.is_some()
    })
    .await;
    let status = running.status("sqsmissing");
    assert_eq!(status.state, SourceState::Retrying);
    let error = status.last_error.unwrap();
    assert!(
        error.contains("source sqsmissing") && error.contains("no-such-queue-x"),
        "{error}"
    );
    running.stop().await;
}
