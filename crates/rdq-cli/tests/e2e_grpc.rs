//! The gRPC API end to end (`docs/grpc.md`): the real `rdq serve` binary on
//! the embedded store, driven by a tonic client on the HTTP address
//! (requests told apart by content type): every service, bearer tokens and
//! scopes, the stable codes of refusals (the same as over HTTP, and a
//! refused request changes nothing), the standard health service and server
//! reflection, and the `Work` stream's credits, acknowledgements, and a
//! dropped stream that releases nothing early.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use common::grpc::{ALL, SUBMIT_ONLY, channel, config, req};
use common::{Api, RdqServer};
use rdq_grpc::pb;
use rdq_grpc::pb::dlq_client::DlqClient;
use rdq_grpc::pb::queues_client::QueuesClient;
use rdq_grpc::pb::tasks_client::TasksClient;
use rdq_grpc::pb::workers_client::WorkersClient;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

fn code_of(s: &Status) -> String {
    s.metadata()
        .get("rdq-code")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

fn assert_refused<T: std::fmt::Debug>(r: Result<T, Status>, grpc: Code, code: &str) {
    let s = r.expect_err("refused");
    assert_eq!(s.code(), grpc, "{s:?}");
    assert_eq!(code_of(&s), code, "{s:?}");
    assert!(s.message().starts_with(code), "{s:?}");
    let problem = rdq_grpc::status::problem_of(&s).expect("an rdq.v1.Problem in the details");
    assert_eq!(problem.code, code);
}

fn submit(queue: &str, payload: &[u8]) -> pb::SubmitRequest {
    pb::SubmitRequest {
        queue: queue.into(),
        handler_ref: "h".into(),
        payload: payload.to_vec(),
        payload_content_type: Some("text/plain".into()),
        ..Default::default()
    }
}

fn settle(t: &pb::LeasedTask, outcome: pb::ReportedOutcome) -> pb::SettleRequest {
    let failed = matches!(
        outcome,
        pb::ReportedOutcome::ReportedPermanentFailure
            | pb::ReportedOutcome::ReportedRetryableFailure
    );
    pb::SettleRequest {
        id: t.id.clone(),
        lease_token: t.lease_token.clone(),
        outcome: outcome as i32,
        error: failed.then(|| pb::ReportedError {
            r#type: "smtp.Rejected".into(),
            message: "550 no such user".into(),
            detail_json: Some(r#"{"smtp":550}"#.into()),
            stack: None,
        }),
        defer_ms: None,
        throttle: 0,
    }
}

/// A Work stream's hello for one queue.
fn hello(queue: &str, credits: u32, lease_ms: Option<u64>, bare_acks: bool) -> pb::WorkHello {
    pb::WorkHello {
        queues: vec![queue.into()],
        credits,
        lease_ms,
        bare_acks,
        task_batches: false,
    }
}

fn status_of(env: &pb::Envelope) -> pb::Status {
    pb::Status::try_from(env.status).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_answers_on_the_http_address() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), &config(), &[]);
    let ch = channel(&server).await;
    let mut tasks = TasksClient::new(ch.clone());
    let mut queues = QueuesClient::new(ch.clone());
    let mut dlq = DlqClient::new(ch.clone());
    let mut workers = WorkersClient::new(ch.clone());

    // Health and reflection need no token.
    let mut health = tonic_health::pb::health_client::HealthClient::new(ch.clone());
    for service in ["", "rdq.v1.Workers"] {
        let h = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            h.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        );
    }
    let mut reflection =
        tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient::new(ch.clone());
    let ask = tonic_reflection::pb::v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            tonic_reflection::pb::v1::server_reflection_request::MessageRequest::ListServices(
                String::new(),
            ),
        ),
    };
    let mut answers = reflection
        .server_reflection_info(tokio_stream::iter([ask]))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.next().await.unwrap().unwrap();
    let Some(
        tonic_reflection::pb::v1::server_reflection_response::MessageResponse::ListServicesResponse(
            list,
        ),
    ) = answer.message_response
    else {
        panic!("no service list");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for name in [
        "rdq.v1.Tasks",
        "rdq.v1.Queues",
        "rdq.v1.Dlq",
        "rdq.v1.Workers",
    ] {
        assert!(names.contains(&name.to_owned()), "{names:?}");
    }
    assert!(
        !names.iter().any(|n| n == "rdq.v1.Handler"),
        "a callback target's service is not served: {names:?}"
    );

    // HTTP still answers on the same address.
    let http = Api::new(&server.base);
    let (status, _) = http.get("/healthz").await;
    assert_eq!(status, 200);

    // Auth: no token, an unknown one, a known one without the scope.
    assert_refused(
        tasks.submit(Request::new(submit("mail", b"x"))).await,
        Code::Unauthenticated,
        "UNAUTHENTICATED",
    );
    assert_refused(
        tasks
            .submit(req(submit("mail", b"x"), "not-a-token-at-all"))
            .await,
        Code::Unauthenticated,
        "UNAUTHENTICATED",
    );

    // Bad input: the same codes as over HTTP, and nothing changes.
    let bad = pb::SubmitRequest {
        queue: "Bad Queue".into(),
        ..submit("x", b"")
    };
    assert_refused(
        tasks.submit(req(bad, ALL)).await,
        Code::InvalidArgument,
        "INVALID_QUEUE_NAME",
    );
    let mut reserved = submit("mail", b"x");
    reserved.headers.insert("rdq.secret".into(), "1".into());
    assert_refused(
        tasks.submit(req(reserved, ALL)).await,
        Code::InvalidArgument,
        "RESERVED_HEADER",
    );
    let mut priority = submit("mail", b"x");
    priority.priority = 300;
    let http_code = {
        let mut http = Api::new(&server.base);
        http.token = Some(ALL.into());
        let (status, body) = http
            .post(
                "/v1/tasks",
                json!({"queue": "mail", "handler_ref": "h", "priority": 300}),
            )
            .await;
        assert_eq!(status, 400);
        body["code"].as_str().unwrap().to_owned()
    };
    assert_refused(
        tasks.submit(req(priority, ALL)).await,
        Code::InvalidArgument,
        &http_code,
    );
    assert_refused(
        tasks
            .get(req(pb::GetTaskRequest { id: "nope".into() }, ALL))
            .await,
        Code::InvalidArgument,
        "INVALID_ARGUMENT",
    );
    let none = queues
        .list(req(pb::ListQueuesRequest::default(), ALL))
        .await
        .unwrap()
        .into_inner();
    assert!(none.queues.is_empty(), "{none:?}");

    // Submit: created, an idempotent repeat, traceparent from metadata.
    let mut first = req(
        pb::SubmitRequest {
            idempotency_key: Some("order-42".into()),
            priority: 3,
            ..submit("mail", b"hello")
        },
        ALL,
    );
    first.metadata_mut().insert(
        "traceparent",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            .parse()
            .unwrap(),
    );
    let created = tasks.submit(first).await.unwrap().into_inner();
    assert!(created.created);
    let env = created.envelope.unwrap();
    assert_eq!(env.payload, b"hello");
    assert_eq!(env.priority, 3);
    assert_eq!(
        env.headers["traceparent"],
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    );
    assert_eq!(env.headers["rdq.submitted_by"], "all");
    let again = tasks
        .submit(req(
            pb::SubmitRequest {
                idempotency_key: Some("order-42".into()),
                ..submit("mail", b"other")
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!again.created);
    assert_eq!(again.envelope.unwrap().id, env.id);

    // A known token without the scope.
    assert_refused(
        dlq.purge(req(
            pb::PurgeRequest {
                queue: "mail".into(),
                dry_run: true,
            },
            SUBMIT_ONLY,
        ))
        .await,
        Code::PermissionDenied,
        "FORBIDDEN",
    );
    // The gRPC envelope is the HTTP envelope, byte for byte.
    let http_env = reqwest::Client::new()
        .get(format!("{}/v1/tasks/{}", server.base, env.id))
        .bearer_auth(ALL)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    let got = tasks
        .get(req(pb::GetTaskRequest { id: env.id.clone() }, ALL))
        .await
        .unwrap()
        .into_inner()
        .envelope
        .unwrap();
    assert_eq!(rdq_grpc::codec::to_json(&got).unwrap(), http_env);

    // A batch: items are independent.
    let batch = tasks
        .submit_batch(req(
            pb::SubmitBatchRequest {
                tasks: vec![
                    submit("mail", b"a"),
                    submit("Bad", b"b"),
                    submit("mail", b"c"),
                ],
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(batch.results.len(), 3);
    assert!(batch.results[0].created && batch.results[2].created);
    assert_eq!(
        batch.results[1].problem.as_ref().unwrap().code,
        "INVALID_QUEUE_NAME"
    );

    // Queues: numbers, config, capabilities.
    let rows = queues
        .list(req(
            pb::ListQueuesRequest {
                names: vec!["mail".into()],
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(rows.queues[0].pending, 3);
    assert_eq!(rows.queues[0].source, "counts");
    let put = queues
        .put_config(req(
            pb::PutConfigRequest {
                queue: "mail".into(),
                patch_json: r#"{"max_attempts": 1}"#.into(),
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    let policy: serde_json::Value = serde_json::from_str(&put.policy_json).unwrap();
    assert_eq!(policy["max_attempts"], 1);
    let got = queues
        .get_config(req(
            pb::GetConfigRequest {
                queue: "mail".into(),
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.policy_json, put.policy_json);
    assert!(!got.process_scope);
    assert_refused(
        queues
            .put_config(req(
                pb::PutConfigRequest {
                    queue: "mail".into(),
                    patch_json: r#"{"max_attempts": "x"}"#.into(),
                },
                ALL,
            ))
            .await,
        Code::InvalidArgument,
        "INVALID_POLICY",
    );
    let caps = queues
        .capabilities(req(pb::CapabilitiesRequest {}, ALL))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(caps.capabilities.get("get_by_id"), Some(&true));

    // Workers: claim, extend, settle, batch settle, a lost lease.
    let claimed = workers
        .claim(req(
            pb::ClaimRequest {
                queue: "mail".into(),
                max: 3,
                lease_ms: Some(60_000),
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(claimed.len(), 3);
    assert_eq!(claimed[0].id, env.id, "highest priority first");
    let extended = workers
        .extend_lease(req(
            pb::ExtendLeaseRequest {
                id: claimed[0].id.clone(),
                lease_token: claimed[0].lease_token.clone(),
                extend_ms: 120_000,
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner()
        .envelope
        .unwrap();
    assert_eq!(status_of(&extended), pb::Status::InFlight);
    let done = workers
        .settle(req(
            settle(&claimed[0], pb::ReportedOutcome::ReportedSuccess),
            ALL,
        ))
        .await
        .unwrap()
        .into_inner()
        .envelope
        .unwrap();
    assert_eq!(status_of(&done), pb::Status::Succeeded);
    assert_refused(
        workers
            .settle(req(
                settle(&claimed[0], pb::ReportedOutcome::ReportedSuccess),
                ALL,
            ))
            .await,
        Code::Aborted,
        "LEASE_LOST",
    );
    let mut no_error = settle(&claimed[1], pb::ReportedOutcome::ReportedPermanentFailure);
    no_error.error = None;
    assert_refused(
        workers.settle(req(no_error, ALL)).await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    let mut forged = settle(&claimed[2], pb::ReportedOutcome::ReportedSuccess);
    forged.lease_token = claimed[1].lease_token.clone();
    let results = workers
        .settle_batch(req(
            pb::SettleBatchRequest {
                settles: vec![
                    settle(&claimed[1], pb::ReportedOutcome::ReportedPermanentFailure),
                    forged,
                    settle(&claimed[2], pb::ReportedOutcome::ReportedPermanentFailure),
                ],
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(
        status_of(results[0].envelope.as_ref().unwrap()),
        pb::Status::Dead
    );
    assert_eq!(results[1].problem.as_ref().unwrap().code, "LEASE_LOST");
    assert_eq!(results[1].problem.as_ref().unwrap().http_status, 409);
    assert_eq!(
        status_of(results[2].envelope.as_ref().unwrap()),
        pb::Status::Dead
    );

    // The DLQ: list, show, export, purge, import back, redrive.
    let page = dlq
        .list(req(
            pb::DlqListRequest {
                queue: "mail".into(),
                limit: Some(1),
                ..Default::default()
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.items.len(), 1);
    let next = page.next_cursor.clone().expect("a second page");
    let page2 = dlq
        .list(req(
            pb::DlqListRequest {
                queue: "mail".into(),
                limit: Some(10),
                cursor: Some(next),
                error_type: Some("smtp.*".into()),
                reason: None,
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page2.items.len(), 1);
    let shown = dlq
        .show(req(
            pb::DlqShowRequest {
                queue: "mail".into(),
                id: claimed[1].id.clone(),
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner()
        .envelope
        .unwrap();
    let error = shown.attempts.last().unwrap().error.as_ref().unwrap();
    assert_eq!(error.r#type, "smtp.Rejected");
    let reason = shown
        .dead_reason
        .as_ref()
        .expect("a dead task has a reason");
    assert_eq!(
        (reason.code.as_str(), reason.by.as_str()),
        ("PERMANENT_FAILURE", "worker")
    );
    let reasons = dlq
        .reasons(req(
            pb::DlqReasonsRequest {
                queue: "mail".into(),
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner()
        .reasons;
    assert_eq!(
        reasons,
        vec![pb::ReasonCount {
            reason: "PERMANENT_FAILURE".into(),
            count: 2
        }]
    );
    let by_reason = |reason: &str| pb::DlqListRequest {
        queue: "mail".into(),
        reason: Some(reason.into()),
        ..Default::default()
    };
    let permanent = dlq.list(req(by_reason("PERMANENT_FAILURE"), ALL)).await;
    assert_eq!(permanent.unwrap().into_inner().items.len(), 2);
    let cancelled = dlq.list(req(by_reason("CANCELLED"), ALL)).await;
    assert!(cancelled.unwrap().into_inner().items.is_empty());
    assert_refused(
        dlq.list(req(by_reason("permanent"), ALL)).await,
        Code::InvalidArgument,
        "INVALID_ARGUMENT",
    );
    assert_eq!(error.detail_json.as_deref(), Some(r#"{"smtp":550}"#));
    let exported: Vec<pb::Envelope> = dlq
        .export(req(
            pb::ExportRequest {
                queue: "mail".into(),
                error_type: None,
                reason: None,
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner()
        .map(|r| r.unwrap().envelope.unwrap())
        .collect()
        .await;
    assert_eq!(exported.len(), 2);
    let before: Vec<Vec<u8>> = exported
        .iter()
        .map(|e| rdq_grpc::codec::to_json(e).unwrap())
        .collect();
    let purged = dlq
        .purge(req(
            pb::PurgeRequest {
                queue: "mail".into(),
                dry_run: false,
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(purged.purged, 2);

    // A bad entry in an import is reported by position; nothing is stored.
    let mut not_dead = exported[1].clone();
    not_dead.status = pb::Status::Pending as i32;
    let mut broken = exported[0].clone();
    broken.unknown_json = "not json".into();
    let entries = vec![
        import_entry(Some(exported[0].clone()), true),
        import_entry(Some(not_dead), false),
        import_entry(Some(broken), false),
    ];
    assert_refused(
        dlq.import(req(tokio_stream::iter(entries), ALL)).await,
        Code::InvalidArgument,
        "INVALID_IMPORT",
    );
    let err = dlq
        .import(req(
            tokio_stream::iter(vec![
                import_entry(Some(exported[0].clone()), false),
                import_entry(
                    Some({
                        let mut e = exported[1].clone();
                        e.status = pb::Status::Pending as i32;
                        e
                    }),
                    false,
                ),
            ]),
            ALL,
        ))
        .await
        .unwrap_err();
    let problem = rdq_grpc::status::problem_of(&err).unwrap();
    let ext: serde_json::Value = serde_json::from_str(&problem.extensions_json).unwrap();
    assert_eq!(ext["error_count"], 1);
    assert_eq!(ext["errors"][0]["line"], 2);
    assert_eq!(ext["errors"][0]["code"], "INVALID_FIELD");
    let rows = queues
        .list(req(pb::ListQueuesRequest::default(), ALL))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(rows.queues[0].dead, 0, "a refused import stores nothing");

    // Import back, one as a message and one as JSON text: the same bytes.
    let entries = vec![
        import_entry(Some(exported[0].clone()), false),
        pb::ImportRequest {
            queue: String::new(),
            dry_run: false,
            entry: Some(pb::import_request::Entry::EnvelopeJson(before[1].clone())),
        },
    ];
    let imported = dlq
        .import(req(tokio_stream::iter(entries), ALL))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((imported.checked, imported.imported), (2, 2));
    for (i, e) in exported.iter().enumerate() {
        let back = tasks
            .get(req(pb::GetTaskRequest { id: e.id.clone() }, ALL))
            .await
            .unwrap()
            .into_inner()
            .envelope
            .unwrap();
        assert_eq!(rdq_grpc::codec::to_json(&back).unwrap(), before[i]);
    }
    let dry = dlq
        .redrive(req(
            pb::RedriveRequest {
                queue: "mail".into(),
                ids: vec![exported[0].id.clone()],
                dry_run: true,
                ..Default::default()
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((dry.count, dry.dry_run), (1, true));
    let redriven = dlq
        .redrive(req(
            pb::RedriveRequest {
                queue: "mail".into(),
                error_type: Some("smtp.*".into()),
                limit: Some(10),
                ..Default::default()
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(redriven.count, 2);
    assert_refused(
        dlq.redrive(req(
            pb::RedriveRequest {
                queue: "mail".into(),
                ids: vec!["bad".into()],
                ..Default::default()
            },
            ALL,
        ))
        .await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );

    // Delete (admin), then the task is gone.
    tasks
        .delete(req(pb::DeleteTaskRequest { id: env.id.clone() }, ALL))
        .await
        .unwrap();
    assert_refused(
        tasks
            .get(req(pb::GetTaskRequest { id: env.id.clone() }, ALL))
            .await,
        Code::NotFound,
        "TASK_NOT_FOUND",
    );
    assert!(server.terminate());
}

fn import_entry(env: Option<pb::Envelope>, dry_run: bool) -> pb::ImportRequest {
    pb::ImportRequest {
        queue: "mail".into(),
        dry_run,
        entry: env.map(pb::import_request::Entry::Envelope),
    }
}

/// A worker's end of a Work stream. Acknowledgements and tasks may
/// interleave (settles are written while the stream keeps claiming), so
/// each kind is kept until asked for.
struct WorkStream {
    tx: mpsc::Sender<pb::WorkRequest>,
    rx: tonic::Streaming<pb::WorkResponse>,
    tasks: std::collections::VecDeque<pb::LeasedTask>,
    /// The sizes of the `tasks` messages received, in order.
    batches: Vec<usize>,
    acks: std::collections::VecDeque<pb::WorkAck>,
    cancels: std::collections::VecDeque<pb::WorkCancel>,
}

impl WorkStream {
    async fn open(ch: Channel, hello: pb::WorkHello) -> Result<Self, Status> {
        let (tx, rx) = mpsc::channel(16);
        tx.send(pb::WorkRequest {
            kind: Some(pb::work_request::Kind::Hello(hello)),
        })
        .await
        .unwrap();
        let rx = WorkersClient::new(ch)
            .work(req(ReceiverStream::new(rx), ALL))
            .await?
            .into_inner();
        Ok(Self {
            tx,
            rx,
            tasks: Default::default(),
            batches: Vec::new(),
            acks: Default::default(),
            cancels: Default::default(),
        })
    }

    async fn send(&self, kind: pb::work_request::Kind) {
        self.tx
            .send(pb::WorkRequest { kind: Some(kind) })
            .await
            .unwrap();
    }

    async fn next(&mut self) {
        match self.rx.message().await.unwrap().unwrap().kind {
            Some(pb::work_response::Kind::Task(t)) => self.tasks.push_back(t),
            Some(pb::work_response::Kind::Tasks(b)) => {
                self.batches.push(b.tasks.len());
                self.tasks.extend(b.tasks);
            }
            Some(pb::work_response::Kind::Ack(a)) => self.acks.push_back(a),
            Some(pb::work_response::Kind::Cancel(c)) => self.cancels.push_back(c),
            None => panic!("a message without a kind"),
        }
    }

    async fn task(&mut self) -> pb::LeasedTask {
        loop {
            if let Some(t) = self.tasks.pop_front() {
                return t;
            }
            self.next().await;
        }
    }

    async fn ack(&mut self) -> pb::WorkAck {
        loop {
            if let Some(a) = self.acks.pop_front() {
                return a;
            }
            self.next().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_work_stream_keeps_to_its_credits_and_acknowledges() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), &config(), &[]);
    let ch = channel(&server).await;
    let mut tasks = TasksClient::new(ch.clone());
    let mut queues = QueuesClient::new(ch.clone());
    for i in 0..5u8 {
        tasks.submit(req(submit("jobs", &[i]), ALL)).await.unwrap();
    }

    // Refused hellos: no hello first, a bad queue, no credits.
    let (tx, rx) = mpsc::channel(1);
    tx.send(pb::WorkRequest {
        kind: Some(pb::work_request::Kind::Credit(pb::WorkCredit {
            credits: 1,
        })),
    })
    .await
    .unwrap();
    assert_refused(
        WorkersClient::new(ch.clone())
            .work(req(ReceiverStream::new(rx), ALL))
            .await,
        Code::InvalidArgument,
        "MALFORMED_REQUEST",
    );
    for (hello, code) in [
        (hello("Jobs!", 1, None, false), "INVALID_QUEUE_NAME"),
        (hello("jobs", 0, None, false), "INVALID_FIELD"),
    ] {
        assert_refused(
            WorkStream::open(ch.clone(), hello).await.map(|_| ()),
            Code::InvalidArgument,
            code,
        );
    }
    let counts = |rows: pb::ListQueuesResponse| {
        let r = &rows.queues[0];
        (
            r.pending,
            r.in_flight.unwrap_or(0),
            r.succeeded.unwrap_or(0),
        )
    };
    let list = || pb::ListQueuesRequest {
        names: vec!["jobs".into()],
    };
    assert_eq!(
        counts(queues.list(req(list(), ALL)).await.unwrap().into_inner()),
        (5, 0, 0),
        "refused streams claim nothing"
    );

    // Two credits: two tasks, and no more until one is settled.
    let mut w = WorkStream::open(
        ch.clone(),
        pb::WorkHello {
            queues: vec!["other".into(), "jobs".into()],
            credits: 2,
            lease_ms: Some(60_000),
            bare_acks: false,
            task_batches: false,
        },
    )
    .await
    .unwrap();
    let a = w.task().await;
    let b = w.task().await;
    assert_eq!(
        counts(queues.list(req(list(), ALL)).await.unwrap().into_inner()),
        (3, 2, 0)
    );

    // Settles and an extension on the stream, acknowledged by seq.
    w.send(pb::work_request::Kind::Extend(pb::WorkExtend {
        seq: 7,
        extend: Some(pb::ExtendLeaseRequest {
            id: a.id.clone(),
            lease_token: a.lease_token.clone(),
            extend_ms: 90_000,
        }),
    }))
    .await;
    let ack = w.ack().await;
    assert_eq!(ack.seq, 7);
    assert_eq!(
        status_of(ack.results[0].envelope.as_ref().unwrap()),
        pb::Status::InFlight
    );
    let mut forged = settle(&b, pb::ReportedOutcome::ReportedSuccess);
    forged.lease_token = a.lease_token.clone();
    w.send(pb::work_request::Kind::Settle(pb::WorkSettle {
        seq: 8,
        settles: vec![settle(&a, pb::ReportedOutcome::ReportedSuccess), forged],
    }))
    .await;
    let ack = w.ack().await;
    assert_eq!(ack.seq, 8);
    assert_eq!(
        status_of(ack.results[0].envelope.as_ref().unwrap()),
        pb::Status::Succeeded
    );
    assert_eq!(ack.results[1].problem.as_ref().unwrap().code, "LEASE_LOST");
    // Both credits came back: two more tasks.
    let c = w.task().await;
    let d = w.task().await;
    assert_ne!(c.id, d.id);
    w.send(pb::work_request::Kind::Settle(pb::WorkSettle {
        seq: 9,
        settles: vec![settle(&b, pb::ReportedOutcome::ReportedSuccess)],
    }))
    .await;
    assert_eq!(w.ack().await.seq, 9);
    // b's credit came back with the refused settle of seq 8 (a settle
    // gives its credit back whatever its result): one more credit, one
    // more task.
    w.send(pb::work_request::Kind::Credit(pb::WorkCredit {
        credits: 1,
    }))
    .await;
    let e = w.task().await;
    assert_eq!(
        counts(queues.list(req(list(), ALL)).await.unwrap().into_inner()),
        (0, 3, 2)
    );

    // Dropping the stream releases nothing: the tasks stay IN_FLIGHT.
    drop(w);
    for t in [&c, &d, &e] {
        let env = tasks
            .get(req(pb::GetTaskRequest { id: t.id.clone() }, ALL))
            .await
            .unwrap()
            .into_inner()
            .envelope
            .unwrap();
        assert_eq!(status_of(&env), pb::Status::InFlight);
    }
    // They can still be settled by id and token, on another stream.
    let mut w2 = WorkStream::open(ch.clone(), hello("jobs", 1, None, false))
        .await
        .unwrap();
    w2.send(pb::work_request::Kind::Settle(pb::WorkSettle {
        seq: 1,
        settles: [&c, &d, &e]
            .iter()
            .map(|t| settle(t, pb::ReportedOutcome::ReportedSuccess))
            .collect(),
    }))
    .await;
    let ack = w2.ack().await;
    assert!(ack.results.iter().all(|r| r.problem.is_none()), "{ack:?}");
    // A protocol violation ends the stream with a code.
    w2.send(pb::work_request::Kind::Hello(pb::WorkHello::default()))
        .await;
    let end = w2.rx.message().await.unwrap_err();
    assert_eq!(code_of(&end), "MALFORMED_REQUEST");
    assert_eq!(
        counts(queues.list(req(list(), ALL)).await.unwrap().into_inner()),
        (0, 0, 5)
    );
    assert!(server.terminate());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_streams_leases_lapse_as_usual() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), &config(), &[]);
    let ch = channel(&server).await;
    let mut tasks = TasksClient::new(ch.clone());
    let id = tasks
        .submit(req(submit("lapse", b"x"), ALL))
        .await
        .unwrap()
        .into_inner()
        .envelope
        .unwrap()
        .id;
    let mut w = WorkStream::open(ch.clone(), hello("lapse", 1, Some(300), false))
        .await
        .unwrap();
    let t = w.task().await;
    assert_eq!(t.id, id);
    drop(w);
    // The reaper records LEASE_EXPIRED once the lease lapses (bounded wait).
    let mut outcome = None;
    for _ in 0..200 {
        let env = tasks
            .get(req(pb::GetTaskRequest { id: id.clone() }, ALL))
            .await
            .unwrap()
            .into_inner()
            .envelope
            .unwrap();
        if status_of(&env) != pb::Status::InFlight {
            outcome = env.attempts.first().map(|a| a.outcome);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(outcome, Some(pb::Outcome::LeaseExpired as i32));
    assert!(server.terminate());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_acks_carry_results_without_envelopes_and_refills_come_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), &config(), &[]);
    let ch = channel(&server).await;
    let mut tasks = TasksClient::new(ch.clone());
    for i in 0..12u8 {
        tasks.submit(req(submit("bare", &[i]), ALL)).await.unwrap();
    }
    let mut w = WorkStream::open(ch.clone(), hello("bare", 8, Some(60_000), true))
        .await
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(w.task().await);
    }
    // One settle frees one credit: below a quarter of the credits (2), so
    // no task comes while the worker still holds seven.
    let first = held.remove(0);
    w.send(pb::work_request::Kind::Settle(pb::WorkSettle {
        seq: 1,
        settles: vec![settle(&first, pb::ReportedOutcome::ReportedSuccess)],
    }))
    .await;
    let ack = w.ack().await;
    assert_eq!(ack.seq, 1);
    assert_eq!(ack.results.len(), 1);
    assert_eq!(ack.results[0].id, first.id);
    assert!(
        ack.results[0].envelope.is_none(),
        "a bare ack has no envelope"
    );
    assert!(ack.results[0].problem.is_none());
    let early = tokio::time::timeout(Duration::from_millis(300), w.next()).await;
    assert!(
        early.is_err(),
        "one free credit of eight is no refill: {:?}",
        w.tasks
    );
    // A refused settle still names its problem, and gives the credit back:
    // two free, so two tasks come as one refill.
    let mut forged = settle(&held[0], pb::ReportedOutcome::ReportedSuccess);
    forged.lease_token = first.lease_token.clone();
    w.send(pb::work_request::Kind::Settle(pb::WorkSettle {
        seq: 2,
        settles: vec![forged],
    }))
    .await;
    let ack = w.ack().await;
    assert_eq!(ack.seq, 2);
    assert_eq!(ack.results[0].problem.as_ref().unwrap().code, "LEASE_LOST");
    let next = [w.task().await, w.task().await];
    assert_ne!(next[0].id, next[1].id);
    assert!(next.iter().all(|t| held.iter().all(|h| h.id != t.id)));
    assert!(
        w.batches.is_empty(),
        "a stream that did not ask for task batches gets one message a task"
    );
    let got = tasks
        .get(req(
            pb::GetTaskRequest {
                id: first.id.clone(),
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner()
        .envelope
        .unwrap();
    assert_eq!(status_of(&got), pb::Status::Succeeded);
    drop(w);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_batches_bring_a_claims_tasks_in_one_message() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), &config(), &[]);
    let ch = channel(&server).await;
    let mut tasks = TasksClient::new(ch.clone());
    let mut submitted = Vec::new();
    for i in 0..12u8 {
        let id = tasks
            .submit(req(submit("batched", &[i]), ALL))
            .await
            .unwrap()
            .into_inner()
            .envelope
            .unwrap()
            .id;
        submitted.push(id);
    }
    let mut hello = hello("batched", 8, Some(60_000), true);
    hello.task_batches = true;
    let mut w = WorkStream::open(ch.clone(), hello).await.unwrap();
    w.next().await;
    assert_eq!(w.batches, vec![8], "one claim of eight, one message");
    let held: Vec<pb::LeasedTask> = w.tasks.drain(..).collect();
    // In claim order (equal priority: submit order), each one whole.
    let ids: Vec<&str> = held.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        submitted[..8]
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
    );
    for (i, t) in held.iter().enumerate() {
        let env = t.envelope.as_ref().unwrap();
        assert_eq!(env.id, t.id);
        assert_eq!(status_of(env), pb::Status::InFlight);
        assert_eq!(env.payload, vec![u8::try_from(i).unwrap()]);
        assert!(!t.lease_token.is_empty());
    }
    // Settling three frees a quarter of the credits and more: the next
    // claim (three of the four left) comes as one message again.
    w.send(pb::work_request::Kind::Settle(pb::WorkSettle {
        seq: 1,
        settles: held[..3]
            .iter()
            .map(|t| settle(t, pb::ReportedOutcome::ReportedSuccess))
            .collect(),
    }))
    .await;
    let ack = w.ack().await;
    assert!(ack.results.iter().all(|r| r.problem.is_none()));
    while w.tasks.len() < 3 {
        w.next().await;
    }
    assert_eq!(w.batches, vec![8, 3]);
    let next: Vec<&str> = w.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        next,
        submitted[8..11]
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
    );
    drop(w);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_flow_and_throttle_and_a_deferral_that_throttles_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start_on(dir.path(), &config(), "memory:", &[]);
    let ch = channel(&server).await;
    let mut tasks = TasksClient::new(ch.clone());
    let mut queues = QueuesClient::new(ch.clone());
    let mut workers = WorkersClient::new(ch.clone());
    queues
        .put_config(req(
            pb::PutConfigRequest {
                queue: "flows".into(),
                patch_json: json!({"flow": {"key_concurrency": 4, "rate": {"per_second": 100}}})
                    .to_string(),
            },
            ALL,
        ))
        .await
        .unwrap();

    // Submit with a flow key: stored as its header; a bad key is refused.
    let keyed = |key: &str| pb::SubmitRequest {
        flow_key: Some(key.into()),
        ..submit("flows", b"x")
    };
    let created = tasks
        .submit(req(keyed("tenant-a"), ALL))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        created.envelope.unwrap().headers["rdq.flow_key"],
        "tenant-a"
    );
    assert_refused(
        tasks.submit(req(keyed("bad key"), ALL)).await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    tasks.submit(req(keyed("tenant-b"), ALL)).await.unwrap();

    let flow = queues
        .get_flow(req(
            pb::GetFlowRequest {
                queue: "flows".into(),
            },
            SUBMIT_ONLY,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(flow.queue, "flows");
    let limits: serde_json::Value = serde_json::from_str(&flow.limits_json).unwrap();
    assert_eq!(limits["key_concurrency"], 4);
    assert!(flow.tokens.is_some());
    assert_eq!(flow.blocked_until, None);

    // Throttle: admin only; exactly one of for_ms and until; bad keys refused.
    let throttle =
        |key: Option<&str>, for_ms: Option<u64>, until: Option<&str>| pb::ThrottleRequest {
            queue: "flows".into(),
            flow_key: key.map(str::to_owned),
            for_ms,
            until: until.map(str::to_owned),
        };
    assert_refused(
        queues
            .throttle(req(throttle(None, Some(1000), None), SUBMIT_ONLY))
            .await,
        Code::PermissionDenied,
        "FORBIDDEN",
    );
    for (bad, code) in [
        (throttle(None, None, None), "INVALID_FIELD"),
        (
            throttle(None, Some(5), Some("2030-01-01T00:00:00Z")),
            "INVALID_FIELD",
        ),
        (throttle(None, Some(0), None), "INVALID_FIELD"),
        (throttle(None, None, Some("later")), "INVALID_FIELD"),
        (throttle(Some(""), Some(5), None), "INVALID_FIELD"),
    ] {
        assert_refused(
            queues.throttle(req(bad, ALL)).await,
            Code::InvalidArgument,
            code,
        );
    }
    let after = queues
        .throttle(req(throttle(Some("tenant-c"), Some(60_000), None), ALL))
        .await
        .unwrap()
        .into_inner();
    let c = after.keys.iter().find(|k| k.key == "tenant-c").unwrap();
    assert!(c.blocked_until.is_some());

    // A deferral with DEFER_THROTTLE_KEY throttles its task's key until due.
    let claimed = workers
        .claim(req(
            pb::ClaimRequest {
                queue: "flows".into(),
                max: 10,
                ..Default::default()
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(claimed.tasks.len(), 2);
    let a = claimed
        .tasks
        .iter()
        .find(|t| t.envelope.as_ref().unwrap().headers["rdq.flow_key"] == "tenant-a")
        .unwrap();
    let mut defer = settle(a, pb::ReportedOutcome::ReportedDefer);
    defer.defer_ms = Some(30_000);
    defer.throttle = pb::DeferThrottle::Key as i32;
    workers.settle(req(defer, ALL)).await.unwrap();
    let flow = queues
        .get_flow(req(
            pb::GetFlowRequest {
                queue: "flows".into(),
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    let a_key = flow.keys.iter().find(|k| k.key == "tenant-a").unwrap();
    assert!(a_key.blocked_until.is_some(), "{flow:?}");
    let b_key = flow.keys.iter().find(|k| k.key == "tenant-b").unwrap();
    assert_eq!(b_key.blocked_until, None);
    assert_eq!(b_key.in_flight, 1);
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_tasks_are_cancelled_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), &config(), &[]);
    let ch = channel(&server).await;
    let mut tasks = TasksClient::new(ch.clone());
    let mut dlq = DlqClient::new(ch.clone());
    let mut ids = Vec::new();
    for _ in 0..3 {
        let created = tasks
            .submit(req(submit("orders", b"x"), ALL))
            .await
            .unwrap()
            .into_inner();
        ids.push(created.envelope.unwrap().id);
    }
    let by_id = pb::CancelTasksRequest {
        queue: "orders".into(),
        ids: vec![ids[0].clone()],
        message: Some("duplicate".into()),
        ..Default::default()
    };
    let done = tasks
        .cancel(req(by_id.clone(), ALL))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((done.count, done.ids), (1, vec![ids[0].clone()]));
    assert_refused(
        tasks.cancel(req(by_id, ALL)).await,
        Code::FailedPrecondition,
        "INVALID_TRANSITION",
    );
    let dry = pb::CancelTasksRequest {
        queue: "orders".into(),
        limit: Some(1),
        dry_run: true,
        ..Default::default()
    };
    let would = tasks.cancel(req(dry, ALL)).await.unwrap().into_inner();
    assert_eq!((would.dry_run, would.ids), (true, vec![ids[1].clone()]));
    let pending = tasks
        .list(req(
            pb::ListTasksRequest {
                queue: "orders".into(),
                status: pb::Status::Pending.into(),
                ..Default::default()
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner()
        .items;
    let listed: Vec<String> = pending.into_iter().map(|e| e.id).collect();
    assert_eq!(listed, vec![ids[2].clone(), ids[1].clone()], "newest first");
    let cancelled = dlq
        .list(req(
            pb::DlqListRequest {
                queue: "orders".into(),
                reason: Some("CANCELLED".into()),
                ..Default::default()
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(cancelled.len(), 1);
    let reason = cancelled[0].dead_reason.as_ref().unwrap();
    assert_eq!(
        (reason.code.as_str(), reason.message.as_deref()),
        ("CANCELLED", Some("duplicate"))
    );
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_is_cancelled_on_its_work_stream() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), &config(), &[]);
    let ch = channel(&server).await;
    let mut tasks = TasksClient::new(ch.clone());
    let mut w = WorkStream::open(ch.clone(), hello("orders", 4, Some(60_000), false))
        .await
        .unwrap();
    for i in 0..2u8 {
        tasks
            .submit(req(submit("orders", &[i]), ALL))
            .await
            .unwrap();
    }
    let (a, b) = (w.task().await, w.task().await);
    let asked = tasks
        .cancel(req(
            pb::CancelTasksRequest {
                queue: "orders".into(),
                ids: vec![a.id.clone()],
                message: Some("customer withdrew".into()),
                ..Default::default()
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(asked.ids, vec![a.id.clone()]);
    assert_eq!(asked.running, vec![a.id.clone()], "it was running");
    let told = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(c) = w.cancels.pop_front() {
                return c;
            }
            w.next().await;
        }
    })
    .await
    .expect("the stream pushes the cancel");
    assert_eq!(
        (told.id.as_str(), told.lease_token.as_str()),
        (a.id.as_str(), a.lease_token.as_str())
    );
    let request = told.request.expect("who and why");
    assert_eq!(request.message.as_deref(), Some("customer withdrew"));
    assert!(!request.by.is_empty());

    // An extension says so too; the other task's does not.
    for (seq, t, expected) in [(1, &a, true), (2, &b, false)] {
        w.send(pb::work_request::Kind::Extend(pb::WorkExtend {
            seq,
            extend: Some(pb::ExtendLeaseRequest {
                id: t.id.clone(),
                lease_token: t.lease_token.clone(),
                extend_ms: 60_000,
            }),
        }))
        .await;
        let ack = w.ack().await;
        assert_eq!(ack.results[0].cancel_requested, expected, "task {}", t.id);
        let env = ack.results[0].envelope.as_ref().unwrap();
        assert_eq!(env.cancel_requested.is_some(), expected);
    }

    // The handler then fails: DEAD, cancelled, not retried; the other's
    // failure retries as usual.
    w.send(pb::work_request::Kind::Settle(pb::WorkSettle {
        seq: 3,
        settles: vec![
            settle(&a, pb::ReportedOutcome::ReportedRetryableFailure),
            settle(&b, pb::ReportedOutcome::ReportedRetryableFailure),
        ],
    }))
    .await;
    let ack = w.ack().await;
    let dead = ack.results[0].envelope.as_ref().unwrap();
    assert_eq!(status_of(dead), pb::Status::Dead);
    assert_eq!(dead.dead_reason.as_ref().unwrap().code, "CANCELLED");
    let retried = ack.results[1].envelope.as_ref().unwrap();
    assert_eq!(status_of(retried), pb::Status::Pending);
    assert!(w.cancels.is_empty(), "one push per task");
    drop(server);
}
