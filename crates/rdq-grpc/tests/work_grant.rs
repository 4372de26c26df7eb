//! A `Work` stream is authorised once, when it opens: its claims, and its
//! settles of tasks of its queues, make no further authorisation decision
//! (each decision is traced by `rdq_app::auth`, which these tests count);
//! a settle of another queue's task is still decided, as the stream's
//! caller; a hello naming a queue the token may not work is refused before
//! anything is claimed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use rdq_app::auth::{Secret, TokenConfig};
use rdq_app::submit::SubmitCommand;
use rdq_app::{App, AppParts, Authenticator, Caller, Scope};
use rdq_engine::{Engine, SystemClock};
use rdq_grpc::pb::work_request::Kind;
use rdq_grpc::wire::WorkOut;
use rdq_grpc::{BoxStream, pb};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tracing::span;

const WORKER: &str = "worker-secret-token-0001";
const ADMIN: &str = "admin-secret-token-00001";

/// Counts the authorisation decisions traced on the thread it is the
/// default subscriber of (a current-thread runtime runs the stream's
/// driver there too).
#[derive(Clone, Default)]
struct Decisions(Arc<AtomicUsize>);

impl Decisions {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl tracing::Subscriber for Decisions {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if event.metadata().target() == "rdq_app::auth" {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

async fn app() -> App {
    let engine = Engine::new(
        Arc::new(rdq_store_memory::MemoryStore::new()),
        Arc::new(SystemClock),
    );
    let mut parts = AppParts::local(engine);
    parts.auth = Authenticator::new(&[
        TokenConfig {
            name: "worker".into(),
            token: Secret::new(WORKER),
            scopes: vec![Scope::Submit, Scope::Work],
            queues: vec!["jobs".into()],
        },
        TokenConfig {
            name: "ops".into(),
            token: Secret::new(ADMIN),
            scopes: vec![Scope::Admin],
            queues: Vec::new(),
        },
    ])
    .unwrap();
    App::new(parts).await.unwrap()
}

fn caller(app: &App, token: &str) -> Caller {
    app.authenticate(Some(format!("Bearer {token}").as_bytes()))
        .unwrap()
}

async fn submit(app: &App, caller: &Caller, queue: &str, n: usize) {
    for i in 0..n {
        let command = SubmitCommand {
            queue: queue.into(),
            handler_ref: "h".into(),
            payload: format!("task {i}").into_bytes(),
            ..SubmitCommand::default()
        };
        app.submit(caller, command).await.unwrap();
    }
}

fn hello(queues: &[&str], credits: u32) -> pb::WorkRequest {
    pb::WorkRequest {
        kind: Some(Kind::Hello(pb::WorkHello {
            queues: queues.iter().map(|q| (*q).to_owned()).collect(),
            credits,
            lease_ms: Some(60_000),
            bare_acks: true,
            task_batches: false,
        })),
    }
}

fn settle(seq: u64, id: &str, lease_token: &str) -> Result<pb::WorkRequest, Status> {
    Ok(pb::WorkRequest {
        kind: Some(Kind::Settle(pb::WorkSettle {
            seq,
            settles: vec![pb::SettleRequest {
                id: id.to_owned(),
                lease_token: lease_token.to_owned(),
                outcome: pb::ReportedOutcome::ReportedSuccess as i32,
                ..Default::default()
            }],
        })),
    })
}

/// What the worker receives next: a task or an ack.
async fn next(out: &mut BoxStream<WorkOut>) -> WorkOut {
    tokio::time::timeout(Duration::from_secs(5), out.next())
        .await
        .expect("the stream answers within 5 s")
        .expect("the stream is open")
        .expect("no error status")
}

fn ack_of(out: WorkOut) -> pb::WorkAck {
    match out {
        WorkOut::Message(pb::WorkResponse {
            kind: Some(pb::work_response::Kind::Ack(ack)),
        }) => ack,
        WorkOut::Task(t) => panic!("expected an ack, got task {}", t.envelope.id),
        WorkOut::Tasks(t) => panic!("expected an ack, got {} tasks", t.len()),
        WorkOut::Message(m) => panic!("expected an ack, got {m:?}"),
    }
}

#[tokio::test]
async fn a_work_stream_decides_authorisation_once_not_per_claim_or_settle() {
    let app = app().await;
    let worker = caller(&app, WORKER);
    submit(&app, &worker, "jobs", 6).await;

    let decisions = Decisions::default();
    let _guard = tracing::subscriber::set_default(decisions.clone());
    let (tx, rx) = mpsc::channel(16);
    tx.send(Ok(hello(&["jobs"], 1))).await.unwrap();
    let mut out = rdq_grpc::work::start(app.clone(), &worker, ReceiverStream::new(rx))
        .await
        .unwrap();
    // One decision: `work` on the hello's one queue.
    assert_eq!(decisions.count(), 1);

    // One credit: every task is its own claim, freed by its settle.
    let mut settled = 0;
    let mut acked = 0;
    while acked < 6 {
        match next(&mut out).await {
            WorkOut::Task(task) => {
                assert_eq!(task.envelope.queue, "jobs");
                settled += 1;
                let id = task.envelope.id.to_string();
                tx.send(settle(settled, &id, &task.lease_token))
                    .await
                    .unwrap();
            }
            other => {
                let ack = ack_of(other);
                assert!(ack.results.iter().all(|r| r.problem.is_none()), "{ack:?}");
                acked += 1;
            }
        }
    }
    assert_eq!(settled, 6);
    assert_eq!(
        decisions.count(),
        1,
        "six claims and six settles after the hello decided nothing again"
    );
}

#[tokio::test]
async fn a_settle_of_another_queues_task_is_decided_as_the_streams_caller() {
    let app = app().await;
    let worker = caller(&app, WORKER);
    let admin = caller(&app, ADMIN);
    submit(&app, &admin, "private", 1).await;
    let claimed = app.claim(&admin, "private", 1, None).await.unwrap();
    let task = &claimed[0];

    let decisions = Decisions::default();
    let _guard = tracing::subscriber::set_default(decisions.clone());
    let (tx, rx) = mpsc::channel(16);
    tx.send(Ok(hello(&["jobs"], 1))).await.unwrap();
    let mut out = rdq_grpc::work::start(app.clone(), &worker, ReceiverStream::new(rx))
        .await
        .unwrap();
    let opened = decisions.count();
    tx.send(settle(1, &task.envelope.id.to_string(), &task.lease_token))
        .await
        .unwrap();
    let ack = ack_of(next(&mut out).await);
    let problem = ack.results[0].problem.as_ref().expect("refused");
    // A token limited to `jobs` cannot tell another queue's task from a
    // missing one; the task keeps its lease.
    assert_eq!(problem.code, "TASK_NOT_FOUND");
    assert_eq!(
        app.task(&admin, task.envelope.id).await.unwrap().status,
        rdq_envelope::Status::InFlight
    );
    assert_eq!(opened, 1);
}

#[tokio::test]
async fn a_hello_naming_a_queue_the_token_may_not_work_is_refused() {
    let app = app().await;
    let worker = caller(&app, WORKER);
    submit(&app, &worker, "jobs", 1).await;
    let (tx, rx) = mpsc::channel(16);
    tx.send(Ok(hello(&["jobs", "private"], 1))).await.unwrap();
    let refused = rdq_grpc::work::start(app.clone(), &worker, ReceiverStream::new(rx)).await;
    let Err(status) = refused else {
        panic!("the hello was accepted")
    };
    assert_eq!(status.code(), tonic::Code::PermissionDenied);
    assert!(status.message().starts_with("FORBIDDEN"), "{status:?}");
    // Nothing was claimed.
    let admin = caller(&app, ADMIN);
    let rows = app.queues(&admin, &["jobs".to_owned()]).await.unwrap();
    assert_eq!(rows[0].pending, 1);
}
