//! `rdq serve --store amqp://…?queuey=all` with the real queuey 1.1 crate on
//! the other side: a queuey producer's jobs are claimed and settled by an
//! HTTP pull worker (and acked on the broker), and jobs submitted over HTTP
//! are run by a queuey worker. Queues are named per run and deleted after.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::{FAST_CONFIG, RdqServer};
use queuey::prelude::{
    Job, JobContext, JobError, JobHandler, Producer, QueueConfig, QueueSet, RabbitMqBackend,
    RetryPolicy, Worker, async_trait,
};
use rdq_api::tasks::SubmitBody;
use rdq_api::work::{ReportedOutcome, SettleBody};
use rdq_client::Client;
use rdq_envelope::Status;
use serde::{Deserialize, Serialize};

fn amqp_url() -> String {
    std::env::var("RDQ_AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Q {
    FromQueuey,
    ToQueuey,
}

const ALL: [Q; 2] = [Q::FromQueuey, Q::ToQueuey];

impl QueueSet for Q {
    fn all() -> &'static [Self] {
        &ALL
    }

    fn name(&self) -> &'static str {
        static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
        let names = NAMES.get_or_init(|| {
            let run = format!(
                "{}x{}",
                std::process::id(),
                rdq_envelope::TaskId::generate()
            );
            ALL.iter()
                .map(|q| {
                    let name = format!(
                        "rdq-serve-queuey.{}.{}",
                        run.to_lowercase(),
                        format!("{q:?}").to_lowercase()
                    );
                    &*Box::leak(name.into_boxed_str())
                })
                .collect()
        });
        names[*self as usize]
    }

    fn config(&self) -> QueueConfig {
        QueueConfig::new(self.name())
            .prefetch(16)
            .retry(RetryPolicy::fixed(3, Duration::from_millis(100)))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ping {
    n: u32,
}

impl Job for Ping {
    type Queue = Q;
    const NAME: &'static str = "interop.ping";
    const QUEUE: Q = Q::FromQueuey;
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pong {
    n: u32,
}

impl Job for Pong {
    type Queue = Q;
    const NAME: &'static str = "interop.pong";
    const QUEUE: Q = Q::ToQueuey;
}

struct Counter(Arc<AtomicU32>);

#[async_trait]
impl JobHandler for Counter {
    type Job = Pong;
    async fn handle(&self, job: Pong, _ctx: JobContext) -> Result<(), JobError> {
        self.0.fetch_add(job.n, Ordering::SeqCst);
        Ok(())
    }
}

fn cleanup() {
    for q in ALL {
        let n = q.name();
        for name in [
            n.to_owned(),
            format!("{n}.dead"),
            format!("{n}.deferred.1000"),
        ] {
            let _ = std::process::Command::new("rabbitmqctl")
                .args(["delete_queue", &name])
                .output();
        }
    }
}

#[test]
fn queuey_and_http_workers_share_queues_through_rdq_serve() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(scenario());
    }));
    drop(runtime);
    cleanup();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

async fn scenario() {
    let dir = tempfile::tempdir().unwrap();
    let spec = format!("{}?queuey=all", amqp_url());
    let server = RdqServer::start_on(dir.path(), FAST_CONFIG, &spec, &[]);
    let client = Client::new(&server.base, None).unwrap();
    let backend = Arc::new(RabbitMqBackend::connect(&amqp_url()).await.unwrap());

    // queuey producer → HTTP pull worker.
    let producer = Producer::<Q, _>::new(Arc::clone(&backend)).await.unwrap();
    let job_id = producer.enqueue(&Ping { n: 7 }).await.unwrap();
    let from = Q::FromQueuey.name();
    let deadline = Instant::now() + Duration::from_secs(15);
    let claimed = loop {
        let mut got = client.claim(from, 1, Some(30_000)).await.unwrap();
        if let Some(c) = got.pop() {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "the queuey job never reached the HTTP worker"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(claimed.envelope.id.as_u128(), job_id.as_u128());
    assert_eq!(claimed.envelope.handler_ref, "interop.ping");
    let settled = client
        .settle(
            claimed.envelope.id,
            &SettleBody {
                id: None,
                lease_token: claimed.lease_token.clone(),
                outcome: ReportedOutcome::Success,
                error: None,
                defer_ms: None,
                throttle: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(settled.status, Status::Succeeded);
    // Acked on the broker: nothing ready, nothing unacked, nothing dead.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = std::process::Command::new("rabbitmqctl")
            .args(["list_queues", "-q", "name", "messages"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let count = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(from))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse::<u64>().ok());
        if count == Some(0) {
            break;
        }
        assert!(Instant::now() < deadline, "the job was not acked: {text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rows = client.queues(&[from.to_owned()]).await.unwrap();
    assert_eq!((rows[0].pending, rows[0].dead), (0, 0));

    // HTTP submit → queuey worker.
    let to = Q::ToQueuey.name();
    for n in [1u32, 2, 4] {
        let body = SubmitBody {
            queue: to.to_owned(),
            handler_ref: "interop.pong".into(),
            payload_json: Some(serde_json::value::to_raw_value(&Pong { n }).unwrap()),
            ..Default::default()
        };
        client.submit(&body).await.unwrap();
    }
    let sum = Arc::new(AtomicU32::new(0));
    let worker = Worker::<Q, _>::builder(Arc::clone(&backend))
        .queues(&[Q::ToQueuey])
        .handler(Counter(Arc::clone(&sum)))
        .build()
        .await
        .unwrap();
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    let started = Instant::now();
    while sum.load(Ordering::SeqCst) < 7 && started.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle.shutdown();
    running.await.unwrap().unwrap();
    assert_eq!(
        sum.load(Ordering::SeqCst),
        7,
        "the queuey worker ran every HTTP-submitted job once"
    );
    server.terminate();
}
