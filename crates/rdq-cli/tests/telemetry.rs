//! Traces and logs of the real `rdq serve` (docs/observability.md): an OTLP
//! receiver (the collector's gRPC `TraceService` and OTLP/HTTP with
//! protobuf bodies, `collector`) runs inside the test, the binary exports
//! to it over HTTP or gRPC as `--otlp-endpoint`, `--otlp-protocol` and the
//! `OTEL_*` variables say, and the spans of a task that fails once and then
//! succeeds are checked (trace ids, parents, links, outcomes); a callback's
//! `traceparent` header (or a gRPC callback's metadata) is its exported
//! CLIENT span; a lapsed lease ends its attempt's span as `LEASE_EXPIRED`;
//! and `--log-format json` writes only JSON lines, never a token or a
//! payload.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "../../rdq-telemetry/tests/collector/mod.rs"]
mod collector;
mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use collector::{Collector, Transport, attr, of_kind, str_attr};
use common::{Api, FAST_CONFIG, RDQ, Receiver};
use serde_json::{Value, json};

/// The submitter's trace context, as a client would send it.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

fn traceparent() -> String {
    format!("00-{TRACE_ID}-{PARENT_SPAN}-01")
}

/// The real `rdq serve` with extra arguments and environment; stderr kept.
struct Rdq {
    child: Option<Child>,
    base: String,
    log: Arc<Mutex<String>>,
}

impl Rdq {
    fn start(dir: &Path, config: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let config_path = dir.join("rdq.toml");
        std::fs::write(&config_path, config).unwrap();
        let mut cmd = Command::new(RDQ);
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0", "--store"])
            .arg(dir.join("data"))
            .arg("--config")
            .arg(&config_path)
            .args(args)
            .env("RDQ_LOG", "info");
        for var in [
            "RDQ_LISTEN",
            "RDQ_STORE",
            "RDQ_CONFIG",
            "RDQ_LOG_FORMAT",
            "RDQ_OTLP_ENDPOINT",
            "OTEL_SDK_DISABLED",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_SERVICE_NAME",
            "OTEL_TRACES_SAMPLER",
            "OTEL_TRACES_SAMPLER_ARG",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_RESOURCE_ATTRIBUTES",
            "OTEL_TRACES_EXPORTER",
            "OTEL_BSP_SCHEDULE_DELAY",
            "RDQ_OTLP_PROTOCOL",
        ] {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (base, log) = common::await_listening(&mut child);
        Self {
            child: Some(child),
            base,
            log,
        }
    }

    /// SIGTERM and wait: a graceful stop flushes the span queue.
    fn terminate(&mut self) -> String {
        let mut child = self.child.take().unwrap();
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "rdq serve failed:\n{}", self.log());
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("rdq serve did not exit after SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The stderr reader may still be draining the pipe.
        std::thread::sleep(Duration::from_millis(100));
        self.log()
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Rdq {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn submit_traced(api: &Api, queue: &str, payload: Value) -> String {
    let mut req = reqwest::Client::new()
        .post(format!("{}/v1/tasks", api.base))
        .header("traceparent", traceparent())
        .json(&json!({"queue": queue, "handler_ref": "mail.send", "payload_json": payload}));
    if let Some(t) = &api.token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 201);
    let body: Value = resp.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

async fn claim_one(api: &Api, queue: &str) -> (String, String) {
    let (status, body) = api
        .post(&format!("/v1/queues/{queue}/claim"), json!({"max": 1}))
        .await;
    assert_eq!(status, 200, "{body}");
    let task = &body["tasks"][0];
    (
        task["id"].as_str().unwrap().to_owned(),
        task["lease_token"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_fails_once_then_succeeds_is_one_trace_of_linked_spans() {
    let collector = Collector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut server = Rdq::start(
        dir.path(),
        FAST_CONFIG,
        &["--otlp-endpoint", &collector.endpoint],
        &[
            ("OTEL_SERVICE_NAME", "rdq-under-test"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=k1"),
        ],
    );
    let api = Api::new(&server.base);
    api.configure(
        "mail",
        json!({"max_attempts": 3, "backoff": {"kind": "none"}}),
    )
    .await;
    let id = submit_traced(&api, "mail", json!({"to": "a@example.com"})).await;
    assert_eq!(api.task(&id).await["headers"]["traceparent"], traceparent());

    let (claimed, token) = claim_one(&api, "mail").await;
    assert_eq!(claimed, id);
    let (status, body) = api
        .post(
            &format!("/v1/tasks/{id}/settle"),
            json!({"lease_token": token, "outcome": "RETRYABLE_FAILURE",
                   "error": {"type": "smtp.Timeout", "message": "no answer"}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, token) = claim_one(&api, "mail").await;
    let (status, body) = api
        .post(
            &format!("/v1/tasks/{id}/settle"),
            json!({"lease_token": token, "outcome": "SUCCESS"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "SUCCEEDED");
    server.terminate();

    // OTLP/HTTP with protobuf bodies is the default; the SDK reads the
    // headers and resource variables.
    let received = collector.received();
    assert!(!received.is_empty());
    for r in &received {
        assert_eq!(r.transport, Transport::Http);
        assert_eq!(r.content_type, "application/x-protobuf");
        assert_eq!(r.api_key.as_deref(), Some("k1"));
        let resource = &r.body["resourceSpans"][0]["resource"];
        assert_eq!(str_attr(resource, "deployment.environment"), Some("test"));
        assert_eq!(
            str_attr(resource, "telemetry.sdk.name"),
            Some("opentelemetry")
        );
    }
    let spans: Vec<(String, Value)> = collector
        .spans()
        .into_iter()
        .filter(|(_, s)| str_attr(s, "messaging.message.id") == Some(id.as_str()))
        .collect();
    assert!(spans.iter().all(|(svc, _)| svc == "rdq-under-test"));
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let spans: Vec<Value> = spans.into_iter().map(|(_, s)| s).collect();

    // The submit: PRODUCER, a child of the submitter's span.
    let submit = of_kind(&spans, 4);
    assert_eq!(submit["name"], "send mail");
    assert_eq!(submit["traceId"], TRACE_ID);
    assert_eq!(submit["parentSpanId"], PARENT_SPAN);
    assert_eq!(str_attr(submit, "messaging.system"), Some("rdq"));
    assert_eq!(str_attr(submit, "messaging.destination.name"), Some("mail"));
    assert_eq!(str_attr(submit, "messaging.operation.type"), Some("send"));
    let submit_id = submit["spanId"].as_str().unwrap();
    assert_eq!(submit_id.len(), 16);

    // The attempts: CONSUMER, children of the submit, in the same trace.
    let mut attempts: Vec<&Value> = spans.iter().filter(|s| s["kind"] == 5).collect();
    assert_eq!(attempts.len(), 2);
    attempts.sort_by_key(|s| {
        attr(s, "rdq.attempt").unwrap()["intValue"]
            .as_str()
            .unwrap()
            .to_owned()
    });
    let (first, retry) = (attempts[0], attempts[1]);
    for (span, n) in [(first, "1"), (retry, "2")] {
        assert_eq!(span["name"], "process mail");
        assert_eq!(span["traceId"], TRACE_ID);
        assert_eq!(
            span["parentSpanId"], submit_id,
            "an attempt is a child of the creation"
        );
        assert_eq!(str_attr(span, "messaging.operation.type"), Some("process"));
        assert_eq!(str_attr(span, "messaging.destination.name"), Some("mail"));
        assert_eq!(attr(span, "rdq.attempt").unwrap()["intValue"], n);
        let start: u128 = span["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
        let end: u128 = span["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
        assert!(start > 0 && end >= start);
        let links = span["links"].as_array().unwrap();
        assert!(
            links
                .iter()
                .any(|l| l["spanId"] == submit_id && l["traceId"] == TRACE_ID),
            "every attempt links to the creation context: {span}"
        );
    }
    assert_ne!(first["spanId"], retry["spanId"]);
    assert_eq!(str_attr(first, "rdq.outcome"), Some("RETRYABLE_FAILURE"));
    assert_eq!(str_attr(first, "error.type"), Some("smtp.Timeout"));
    assert_eq!(first["status"]["code"], 2);
    assert_eq!(str_attr(retry, "rdq.outcome"), Some("SUCCESS"));
    assert_eq!(str_attr(retry, "error.type"), None);
    assert_eq!(retry["status"]["code"], 0);
    // The retry links to the first attempt and is not its child.
    assert_ne!(retry["parentSpanId"], first["spanId"]);
    let to_first: Vec<&Value> = retry["links"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["spanId"] == first["spanId"])
        .collect();
    assert_eq!(to_first.len(), 1, "{retry}");
    assert_eq!(str_attr(to_first[0], "rdq.link"), Some("first_attempt"));
    assert!(
        !first["links"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| str_attr(l, "rdq.link") == Some("first_attempt"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_nothing_is_exported_and_the_traceparent_passes_unchanged() {
    let collector = Collector::start().await;
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    // An endpoint in the environment, but the SDK switched off.
    let mut server = Rdq::start(
        dir.path(),
        FAST_CONFIG,
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
            ("OTEL_SDK_DISABLED", "true"),
        ],
    );
    let api = Api::new(&server.base);
    api.configure(
        "off",
        json!({"max_attempts": 1, "callback": {"url": receiver.url}}),
    )
    .await;
    let id = submit_traced(&api, "off", json!({"status": 200})).await;
    assert_eq!(api.settled(&id).await["status"], "SUCCEEDED");
    server.terminate();
    let got = receiver.for_task(&id);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].headers["traceparent"], traceparent().as_str());
    assert!(collector.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_sends_its_client_span_as_traceparent() {
    let collector = Collector::start().await;
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut server = Rdq::start(
        dir.path(),
        FAST_CONFIG,
        &[],
        // The standard variables work as well as the flags: OTLP/gRPC here.
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
    );
    let api = Api::new(&server.base);
    api.configure(
        "hooked",
        json!({"max_attempts": 1, "callback": {"url": receiver.url}}),
    )
    .await;
    let id = submit_traced(&api, "hooked", json!({"status": 200})).await;
    assert_eq!(api.settled(&id).await["status"], "SUCCEEDED");
    server.terminate();

    assert!(
        collector
            .received()
            .iter()
            .all(|r| r.transport == Transport::Grpc)
    );
    let got = receiver.for_task(&id);
    assert_eq!(got.len(), 1);
    let sent = got[0].headers["traceparent"].to_str().unwrap().to_owned();
    let parts: Vec<&str> = sent.split('-').collect();
    assert_eq!(parts.len(), 4, "{sent}");
    assert_eq!(parts[0], "00");
    assert_eq!(
        parts[1], TRACE_ID,
        "the callback continues the submitter's trace"
    );
    assert_eq!(parts[3], "01");

    let spans: Vec<Value> = collector.spans_of(&id);
    let client = of_kind(&spans, 3);
    assert_eq!(
        client["spanId"], parts[2],
        "the header is the CLIENT span's context"
    );
    assert_eq!(client["traceId"], TRACE_ID);
    assert_eq!(client["name"], "POST");
    assert_eq!(
        attr(client, "http.response.status_code").unwrap()["intValue"],
        "200"
    );
    assert_eq!(str_attr(client, "server.address"), Some("127.0.0.1"));
    let process = of_kind(&spans, 5);
    assert_eq!(client["parentSpanId"], process["spanId"]);
    assert_eq!(str_attr(process, "rdq.outcome"), Some("SUCCESS"));
    let submit = of_kind(&spans, 4);
    assert_eq!(process["parentSpanId"], submit["spanId"]);
    assert_eq!(submit["parentSpanId"], PARENT_SPAN);
}

/// A gRPC callback target answering each task with the status its payload
/// names (`"OK"`, `"NOT_FOUND"`), keeping each call's `traceparent`.
#[derive(Clone, Default)]
struct GrpcReceiver {
    traceparents: Arc<Mutex<Vec<(String, String)>>>,
}

#[tonic::async_trait]
impl rdq_grpc::pb::handler_server::Handler for GrpcReceiver {
    async fn handle(
        &self,
        request: tonic::Request<rdq_grpc::pb::HandleRequest>,
    ) -> Result<tonic::Response<rdq_grpc::pb::HandleResponse>, tonic::Status> {
        let tp = request
            .metadata()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let env = request.into_inner().envelope.unwrap();
        self.traceparents.lock().unwrap().push((env.id.clone(), tp));
        if env.payload == b"\"OK\"" {
            Ok(tonic::Response::new(rdq_grpc::pb::HandleResponse {}))
        } else {
            Err(tonic::Status::not_found("no such order"))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_callback_sends_its_client_span_as_metadata() {
    let collector = Collector::start().await;
    let receiver = GrpcReceiver::default();
    let router = tonic::service::Routes::new(rdq_grpc::pb::handler_server::HandlerServer::new(
        receiver.clone(),
    ))
    .into_axum_router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let dir = tempfile::tempdir().unwrap();
    let mut server = Rdq::start(
        dir.path(),
        FAST_CONFIG,
        &[
            "--otlp-endpoint",
            &collector.endpoint,
            "--otlp-protocol",
            "grpc",
        ],
        &[],
    );
    let api = Api::new(&server.base);
    api.configure(
        "grpc-hooked",
        json!({"max_attempts": 1, "callback": {"url": format!("grpc://{addr}")}}),
    )
    .await;
    let ok = submit_traced(&api, "grpc-hooked", json!("OK")).await;
    let missing = submit_traced(&api, "grpc-hooked", json!("NOT_FOUND")).await;
    assert_eq!(api.settled(&ok).await["status"], "SUCCEEDED");
    assert_eq!(api.settled(&missing).await["status"], "DEAD");
    server.terminate();

    assert!(
        collector
            .received()
            .iter()
            .all(|r| r.transport == Transport::Grpc)
    );
    let sent: std::collections::HashMap<String, String> = receiver
        .traceparents
        .lock()
        .unwrap()
        .iter()
        .cloned()
        .collect();
    for (id, code, error_type) in [(&ok, 0, None), (&missing, 5, Some("NOT_FOUND"))] {
        let tp = &sent[id.as_str()];
        let parts: Vec<&str> = tp.split('-').collect();
        assert_eq!(parts.len(), 4, "{tp}");
        assert_eq!(
            parts[1], TRACE_ID,
            "the call continues the submitter's trace"
        );
        let spans: Vec<Value> = collector.spans_of(id);
        let client = of_kind(&spans, 3);
        assert_eq!(
            client["spanId"], parts[2],
            "the metadata is the CLIENT span's context"
        );
        assert_eq!(client["traceId"], TRACE_ID);
        assert_eq!(client["name"], "rdq.v1.Handler/Handle");
        assert_eq!(str_attr(client, "rpc.system"), Some("grpc"));
        assert_eq!(str_attr(client, "rpc.service"), Some("rdq.v1.Handler"));
        assert_eq!(str_attr(client, "rpc.method"), Some("Handle"));
        assert_eq!(
            attr(client, "rpc.grpc.status_code").unwrap()["intValue"],
            code.to_string()
        );
        assert_eq!(str_attr(client, "error.type"), error_type);
        assert_eq!(attr(client, "http.request.method"), None);
        let process = of_kind(&spans, 5);
        assert_eq!(client["parentSpanId"], process["spanId"]);
        let (outcome, failure) = if code == 0 {
            ("SUCCESS", None)
        } else {
            ("PERMANENT_FAILURE", Some("grpc.NotFound"))
        };
        assert_eq!(str_attr(process, "rdq.outcome"), Some(outcome));
        assert_eq!(str_attr(process, "error.type"), failure);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_lease_ends_its_attempt_span_as_lease_expired() {
    let collector = Collector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut server = Rdq::start(
        dir.path(),
        FAST_CONFIG,
        &["--otlp-endpoint", &collector.endpoint],
        &[],
    );
    let api = Api::new(&server.base);
    api.configure(
        "lapsing",
        json!({"max_attempts": 3, "backoff": {"kind": "none"}}),
    )
    .await;
    let id = submit_traced(&api, "lapsing", json!({"n": 1})).await;
    let (status, body) = api
        .post(
            "/v1/queues/lapsing/claim",
            json!({"max": 1, "lease_ms": 100}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tasks"][0]["id"], id.as_str());
    // The worker never settles: the reaper closes the attempt.
    let mut expired = false;
    for _ in 0..200 {
        let (_, task) = api.get(&format!("/v1/tasks/{id}")).await;
        if task["attempts"][0]["outcome"] == "LEASE_EXPIRED" {
            expired = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(expired, "the lease was not reaped");
    server.terminate();

    let spans: Vec<Value> = collector.spans_of(&id);
    let submit = of_kind(&spans, 4);
    let process = of_kind(&spans, 5);
    assert_eq!(process["traceId"], TRACE_ID);
    assert_eq!(process["parentSpanId"], submit["spanId"]);
    assert_eq!(str_attr(process, "rdq.outcome"), Some("LEASE_EXPIRED"));
    assert_eq!(str_attr(process, "error.type"), Some("rdq.LeaseExpired"));
    assert_eq!(attr(process, "rdq.attempt").unwrap()["intValue"], "1");
    assert_eq!(process["status"]["code"], 2, "an expiry is an error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_json_lines_with_task_fields_and_no_secrets() {
    const TOKEN: &str = "tok-9f8e7d6c5b4a39281706f5e4";
    const MARKER: &str = "PAYLOAD-MARKER-5c1a";
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{FAST_CONFIG}\n[[tokens]]\nname = \"ops\"\ntoken = \"{TOKEN}\"\nscopes = [\"admin\"]\n"
    );
    let mut server = Rdq::start(
        dir.path(),
        &config,
        &["--log-format", "json"],
        &[("RDQ_LOG", "debug")],
    );
    let mut api = Api::new(&server.base);
    api.token = Some(TOKEN.to_owned());
    api.configure(
        "logged",
        json!({"max_attempts": 3, "backoff": {"kind": "none"}}),
    )
    .await;
    let id = submit_traced(&api, "logged", json!({"secret": MARKER})).await;
    let (_, first_token) = claim_one(&api, "logged").await;
    let (status, _) = api
        .post(
            &format!("/v1/tasks/{id}/settle"),
            json!({"lease_token": first_token, "outcome": "RETRYABLE_FAILURE",
                   "error": {"type": "db.Deadlock", "message": "retry me"}}),
        )
        .await;
    assert_eq!(status, 200);
    // A stale token: refused (before any store write); never logged.
    let (status, _) = api
        .post(
            &format!("/v1/tasks/{id}/settle"),
            json!({"lease_token": first_token, "outcome": "SUCCESS"}),
        )
        .await;
    assert_eq!(status, 409);
    let (_, second_token) = claim_one(&api, "logged").await;
    let (status, _) = api
        .post(
            &format!("/v1/tasks/{id}/settle"),
            json!({"lease_token": second_token, "outcome": "SUCCESS"}),
        )
        .await;
    assert_eq!(status, 200);
    // A wrong bearer token is refused; it must not be logged either.
    let mut stranger = Api::new(&server.base);
    stranger.token = Some("tok-wrong-0000000000000000".into());
    assert_eq!(stranger.get(&format!("/v1/tasks/{id}")).await.0, 401);
    let log = server.terminate();

    let payload_b64 = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(format!("{{\"secret\":\"{MARKER}\"}}"))
    };
    let mut task_lines = Vec::new();
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(
            v["timestamp"].is_string() && v["level"].is_string(),
            "{line}"
        );
        for secret in [
            TOKEN,
            "tok-wrong-0000000000000000",
            first_token.as_str(),
            second_token.as_str(),
            MARKER,
            payload_b64.as_str(),
        ] {
            assert!(!line.contains(secret), "a secret in the log: {line}");
        }
        if v["task_id"].is_string() {
            task_lines.push(v);
        }
    }
    // Task-related lines carry the task id, the queue and the attempt.
    let ours: Vec<&Value> = task_lines
        .iter()
        .filter(|v| v["task_id"] == id.as_str())
        .collect();
    assert!(
        ours.iter().any(|v| v["message"] == "task submitted"),
        "{log}"
    );
    for v in &task_lines {
        assert!(v["queue"].is_string(), "{v}");
        if v["message"] != "task submitted" {
            assert!(v["attempt"].is_number(), "{v}");
        }
    }
    let settled: Vec<&&Value> = ours
        .iter()
        .filter(|v| v["message"] == "task settled")
        .collect();
    let outcomes: Vec<&str> = settled
        .iter()
        .map(|v| v["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["RETRYABLE_FAILURE", "SUCCESS"], "{log}");
    assert_eq!(settled[0]["error_type"], "db.Deadlock");
    assert_eq!(settled[0]["queue"], "logged");
    assert_eq!(settled[0]["attempt"], 1);
    assert_eq!(settled[1]["attempt"], 2);
}
