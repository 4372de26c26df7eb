//! gRPC callback targets against a real tonic receiver started by the test
//! (`docs/grpc.md`, "gRPC callbacks"): every row of the default status
//! mapping, `status_map` overrides, a deadline overrun, an unreachable
//! endpoint, a receiver that drops the connection, the metadata a call
//! carries, one shared connection for concurrent calls, and targets refused
//! at config time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::TestServer;
use rdq_grpc::pb;
use serde_json::{Value, json};
use tonic::{Code, Request, Response, Status};

/// What the receiver saw of one call.
#[derive(Debug, Clone)]
struct Seen {
    metadata: HashMap<String, String>,
}

/// Answers each task with the status its payload names (`"OK"`,
/// `"NOT_FOUND"`, …); `"SLEEP"` answers after 5 s.
#[derive(Clone, Default)]
struct Receiver {
    seen: Arc<Mutex<HashMap<String, Seen>>>,
}

#[tonic::async_trait]
impl pb::handler_server::Handler for Receiver {
    async fn handle(
        &self,
        request: Request<pb::HandleRequest>,
    ) -> Result<Response<pb::HandleResponse>, Status> {
        let metadata = request
            .metadata()
            .iter()
            .filter_map(|kv| match kv {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                    Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned()))
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        let env = request.into_inner().envelope.unwrap();
        let what = String::from_utf8(env.payload.clone()).unwrap();
        self.seen
            .lock()
            .unwrap()
            .insert(env.id.clone(), Seen { metadata });
        if what == "\"SLEEP\"" {
            tokio::time::sleep(Duration::from_secs(5)).await;
            return Ok(Response::new(pb::HandleResponse {}));
        }
        let name = what.trim_matches('"');
        let code = rdq_server::callback::grpc_status::parse_code(name).unwrap();
        if code == 0 {
            return Ok(Response::new(pb::HandleResponse {}));
        }
        Err(Status::with_details(
            Code::from_i32(i32::from(code)),
            format!("receiver says {name}"),
            b"\x01\x02".to_vec().into(),
        ))
    }
}

async fn start_receiver() -> (String, Receiver) {
    let receiver = Receiver::default();
    let router =
        tonic::service::Routes::new(pb::handler_server::HandlerServer::new(receiver.clone()))
            .into_axum_router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (format!("grpc://{addr}"), receiver)
}

fn outcome(env: &Value) -> (String, String) {
    let a = &env["attempts"][0];
    (
        a["outcome"].as_str().unwrap().to_owned(),
        a["error"]["type"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_status_code_maps_by_the_default_table() {
    let (url, receiver) = start_receiver().await;
    let server = TestServer::start().await;
    let r = server
        .put(
            "/v1/queues/grpc-default/config",
            json!({"max_attempts": 1, "callback": {"url": url, "timeout_ms": 2000,
                   "headers": {"x-tenant": "acme"}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut ids = Vec::new();
    for (_, name, _) in rdq_server::callback::grpc_status::CODES {
        let mut body = json!({"queue": "grpc-default", "handler_ref": "h", "payload_json": name});
        if name == "OK" {
            body["headers"] =
                json!({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"});
        }
        let r = server.post("/v1/tasks", body).await;
        assert_eq!(r.status, 201, "{}", r.text);
        ids.push((name, r.body["id"].as_str().unwrap().to_owned()));
    }
    for (name, id) in &ids {
        let env = server.settled(id).await;
        let camel = rdq_server::callback::grpc_status::CODES
            .iter()
            .find(|c| c.1 == *name)
            .unwrap()
            .2;
        let (got, error_type) = outcome(&env);
        let want = match *name {
            "OK" => "SUCCESS",
            "UNAVAILABLE" | "DEADLINE_EXCEEDED" | "RESOURCE_EXHAUSTED" | "ABORTED" => {
                "RETRYABLE_FAILURE"
            }
            _ => "PERMANENT_FAILURE",
        };
        assert_eq!(got, want, "{name}");
        if *name == "OK" {
            assert_eq!(env["status"], "SUCCEEDED");
            continue;
        }
        assert_eq!(env["status"], "DEAD", "{name}");
        assert_eq!(error_type, format!("grpc.{camel}"));
        let error = &env["attempts"][0]["error"];
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .ends_with(&format!("{name}: receiver says {name}")),
            "{error}"
        );
        assert_eq!(error["detail"]["code"], *name);
        assert_eq!(error["detail"]["details_base64"], "AQI=");
    }
    // The metadata of a call.
    let seen = receiver.seen.lock().unwrap().clone();
    let (_, ok_id) = &ids[0];
    let md = &seen[ok_id].metadata;
    assert_eq!(md["rdq-task-id"], *ok_id);
    assert_eq!(md["rdq-attempt"], "1");
    assert_eq!(md["x-tenant"], "acme");
    assert_eq!(
        md["traceparent"],
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    );
    assert!(md.contains_key("grpc-timeout"), "{md:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_map_overrides_and_failures_of_the_call() {
    let (url, _receiver) = start_receiver().await;
    let server = TestServer::start().await;
    let r = server
        .put(
            "/v1/queues/grpc-mapped/config",
            json!({"max_attempts": 1, "callback": {"url": url, "timeout_ms": 300,
                   "status_map": {"NOT_FOUND": "SUCCESS", "unavailable": "PERMANENT_FAILURE",
                                  "3": "RETRYABLE_FAILURE"}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // A port nobody listens on.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let r = server
        .put(
            "/v1/queues/grpc-unreachable/config",
            json!({"max_attempts": 1, "callback": {"url": format!("grpc://127.0.0.1:{closed}"), "timeout_ms": 1000}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let cases = [
        ("grpc-mapped", "NOT_FOUND", "SUCCESS", ""),
        (
            "grpc-mapped",
            "UNAVAILABLE",
            "PERMANENT_FAILURE",
            "grpc.Unavailable",
        ),
        (
            "grpc-mapped",
            "INVALID_ARGUMENT",
            "RETRYABLE_FAILURE",
            "grpc.InvalidArgument",
        ),
        (
            "grpc-mapped",
            "PERMISSION_DENIED",
            "PERMANENT_FAILURE",
            "grpc.PermissionDenied",
        ),
        (
            "grpc-mapped",
            "SLEEP",
            "RETRYABLE_FAILURE",
            "grpc.DeadlineExceeded",
        ),
        (
            "grpc-unreachable",
            "OK",
            "RETRYABLE_FAILURE",
            "grpc.Unavailable",
        ),
    ];
    let mut ids = Vec::new();
    for (queue, payload, _, _) in cases {
        let r = server
            .post(
                "/v1/tasks",
                json!({"queue": queue, "handler_ref": "h", "payload_json": payload}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        ids.push(r.body["id"].as_str().unwrap().to_owned());
    }
    for ((queue, payload, want, error_type), id) in cases.iter().zip(&ids) {
        let env = server.settled(id).await;
        let (got, ty) = outcome(&env);
        assert_eq!(
            (got.as_str(), ty.as_str()),
            (*want, *error_type),
            "{queue} {payload}: {env}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn bad_grpc_targets_are_refused_when_configured() {
    let server = TestServer::start().await;
    for callback in [
        json!({"url": "grpc://127.0.0.1"}),
        json!({"url": "grpc://127.0.0.1:9", "status_map": {"NOPE": "SUCCESS"}}),
        json!({"url": "grpc://127.0.0.1:9", "status_map": {"17": "SUCCESS"}}),
        json!({"url": "grpc://127.0.0.1:9", "body_rules": [{"pointer": "/s", "exists": true, "outcome": "SUCCESS"}]}),
    ] {
        let r = server
            .put("/v1/queues/grpc-bad/config", json!({"callback": callback}))
            .await;
        r.assert_problem(400, "INVALID_POLICY");
    }
    let r = server.get("/v1/queues/grpc-bad/config").await;
    assert_eq!(r.status, 404, "a refused config stores nothing: {}", r.text);
    server.stop().await;
}

/// A TCP relay to `to` that counts the connections it accepts.
async fn counting_relay(to: std::net::SocketAddr) -> (String, Arc<AtomicUsize>) {
    let accepted = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut outbound = tokio::net::TcpStream::connect(to).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    (format!("grpc://{addr}"), accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_one_connection() {
    let (url, _receiver) = start_receiver().await;
    let receiver_addr = url.trim_start_matches("grpc://").parse().unwrap();
    let (relayed, accepted) = counting_relay(receiver_addr).await;
    let server = TestServer::start().await;
    let r = server
        .put(
            "/v1/queues/grpc-shared/config",
            json!({"max_attempts": 1, "callback": {"url": relayed, "concurrency": 8}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut ids = Vec::new();
    for _ in 0..24 {
        let r = server
            .post(
                "/v1/tasks",
                json!({"queue": "grpc-shared", "handler_ref": "h", "payload_json": "OK"}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        ids.push(r.body["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        assert_eq!(server.settled(id).await["status"], "SUCCEEDED");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one HTTP/2 connection");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_drops_the_connection_is_unavailable_and_retryable() {
    // Accepts every connection and closes it at once, before any answer.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            drop(socket);
        }
    });
    let server = TestServer::start().await;
    let r = server
        .put(
            "/v1/queues/grpc-dropped/config",
            json!({"max_attempts": 1, "callback": {"url": format!("grpc://{addr}"), "timeout_ms": 2000}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = server
        .post(
            "/v1/tasks",
            json!({"queue": "grpc-dropped", "handler_ref": "h", "payload_json": "OK"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let env = server.settled(r.body["id"].as_str().unwrap()).await;
    let (got, error_type) = outcome(&env);
    assert_eq!(
        (got.as_str(), error_type.as_str()),
        ("RETRYABLE_FAILURE", "grpc.Unavailable"),
        "{env}"
    );
    server.stop().await;
}
