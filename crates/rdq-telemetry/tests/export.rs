//! The tracer against a real OTLP receiver on loopback (`collector`): spans
//! arrive over OTLP/HTTP (protobuf) and over OTLP/gRPC with their names,
//! kinds, attributes, parents and links; recording never waits, even with
//! no collector; a refusing collector is counted; unsampled traces are not
//! sent.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod collector;

use std::time::{Duration, Instant, SystemTime};

use collector::{Collector, Transport, attr, of_kind, str_attr};
use rdq_envelope::{Envelope, TaskId, Timestamp};
use rdq_telemetry::config::{RootSampler, Sampler};
use rdq_telemetry::{Attempt, Protocol, SendOperation, SubmitOutcome, TelemetryConfig, Tracer};

const SUBMITTER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn config(endpoint: &str, protocol: Protocol) -> TelemetryConfig {
    let endpoint = match protocol {
        Protocol::Grpc => endpoint.to_owned(),
        Protocol::HttpProtobuf => format!("{endpoint}/v1/traces"),
    };
    TelemetryConfig {
        endpoint,
        protocol,
        service_name: Some("export-test".into()),
        sampler: Sampler::ParentBased(RootSampler::AlwaysOn),
    }
}

fn envelope(traceparent: Option<&str>) -> Envelope {
    let mut env = Envelope::new("q", "h", b"", "application/octet-stream", Timestamp::now());
    env.id = TaskId::generate();
    if let Some(tp) = traceparent {
        env.headers.insert("traceparent".into(), tp.into());
    }
    env
}

/// A submit under the submitter's context, a failed first attempt and a
/// successful retry.
fn record_a_task(tracer: &Tracer, env: &Envelope) {
    tracer.record_submit(
        "q",
        SendOperation::Send,
        SystemTime::now(),
        Some(SUBMITTER),
        SubmitOutcome::Created(env),
    );
    for (n, outcome, error_type) in [
        (1, "RETRYABLE_FAILURE", Some("smtp.Timeout")),
        (2, "SUCCESS", None),
    ] {
        tracer.record_attempt(&Attempt {
            task: env.id,
            queue: "q",
            handler_ref: "h",
            traceparent: Some(SUBMITTER),
            attempt_no: n,
            started_ms: Timestamp::now().unix_ms() - 5,
            outcome,
            error_type,
        });
    }
}

async fn spans_arrive_over(protocol: Protocol, transport: Transport) {
    let c = Collector::start().await;
    let tracer = Tracer::start(config(&c.endpoint, protocol)).unwrap();
    let env = envelope(Some(SUBMITTER));
    record_a_task(&tracer, &env);
    tracer.flush(Duration::from_secs(10)).await;
    assert_eq!(tracer.exported(), 3);
    let received = c.received();
    assert!(!received.is_empty());
    for r in &received {
        assert_eq!(r.transport, transport);
        if transport == Transport::Http {
            assert_eq!(r.content_type, "application/x-protobuf");
        }
        let scope = &r.body["resourceSpans"][0]["scopeSpans"][0]["scope"];
        assert_eq!(scope["name"], "rdq");
    }
    let spans = c.spans();
    assert!(spans.iter().all(|(svc, _)| svc == "export-test"));
    let spans = c.spans_of(&env.id.to_string());
    assert_eq!(spans.len(), 3, "{spans:#?}");

    let submit = of_kind(&spans, 4);
    assert_eq!(submit["name"], "send q");
    assert_eq!(submit["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(submit["parentSpanId"], "00f067aa0ba902b7");
    assert_eq!(submit["flags"].as_u64().unwrap() & 0x1, 1, "sampled");
    assert_eq!(str_attr(submit, "messaging.system"), Some("rdq"));
    assert_eq!(str_attr(submit, "messaging.operation.type"), Some("send"));
    assert_eq!(str_attr(submit, "messaging.operation.name"), Some("send"));
    assert_eq!(str_attr(submit, "messaging.destination.name"), Some("q"));
    assert_eq!(str_attr(submit, "rdq.handler_ref"), Some("h"));
    let creation = tracer.creation_context(env.id, Some(SUBMITTER));
    assert_eq!(submit["spanId"], creation.span_id().to_string());

    let mut attempts: Vec<&serde_json::Value> = spans.iter().filter(|s| s["kind"] == 5).collect();
    attempts.sort_by_key(|s| {
        attr(s, "rdq.attempt").unwrap()["intValue"]
            .as_str()
            .unwrap()
            .to_owned()
    });
    let (first, retry) = (attempts[0], attempts[1]);
    for (span, n) in [(first, 1), (retry, 2)] {
        assert_eq!(span["name"], "process q");
        assert_eq!(span["traceId"], submit["traceId"]);
        assert_eq!(span["parentSpanId"], submit["spanId"]);
        assert_eq!(
            span["spanId"],
            tracer.attempt_context(&env, n).span_id().to_string()
        );
        assert_eq!(str_attr(span, "messaging.operation.type"), Some("process"));
        let start: u128 = span["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
        let end: u128 = span["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
        assert!(start > 0 && end >= start + 1_000_000, "{start} {end}");
        assert!(span["links"].as_array().unwrap().iter().any(|l| {
            l["spanId"] == submit["spanId"] && str_attr(l, "rdq.link") == Some("creation")
        }));
    }
    assert_eq!(str_attr(first, "error.type"), Some("smtp.Timeout"));
    assert_eq!(first["status"]["code"], 2);
    assert_eq!(
        first["status"]["message"],
        "RETRYABLE_FAILURE: smtp.Timeout"
    );
    assert_eq!(retry["status"]["code"], 0);
    assert_eq!(attr(retry, "rdq.retry").unwrap()["boolValue"], true);
    let to_first = retry["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| str_attr(l, "rdq.link") == Some("first_attempt"))
        .unwrap();
    assert_eq!(to_first["spanId"], first["spanId"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_arrive_over_http_protobuf() {
    spans_arrive_over(Protocol::HttpProtobuf, Transport::Http).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_arrive_over_grpc() {
    spans_arrive_over(Protocol::Grpc, Transport::Grpc).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_grpc_export_completes_on_a_single_threaded_runtime() {
    // The flush blocks a thread of its own, not the runtime the gRPC
    // connection lives on.
    let c = Collector::start().await;
    let tracer = Tracer::start(config(&c.endpoint, Protocol::Grpc)).unwrap();
    record_a_task(&tracer, &envelope(Some(SUBMITTER)));
    tracer.flush(Duration::from_secs(10)).await;
    assert_eq!(tracer.exported(), 3);
    assert_eq!(c.spans().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_collector_is_counted_and_later_spans_still_go_out() {
    for protocol in [Protocol::HttpProtobuf, Protocol::Grpc] {
        let c = Collector::refusing().await;
        let tracer = Tracer::start(config(&c.endpoint, protocol)).unwrap();
        record_a_task(&tracer, &envelope(None));
        tracer.flush(Duration::from_secs(10)).await;
        assert_eq!(tracer.failed(), 3, "{protocol}");
        assert_eq!(tracer.exported(), 0);
        record_a_task(&tracer, &envelope(None));
        tracer.flush(Duration::from_secs(10)).await;
        assert_eq!(tracer.failed(), 6, "{protocol}");
        assert_eq!(c.received().len(), 2, "one request per flush ({protocol})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_never_blocks_recording() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let tracer = Tracer::start(config(
        &format!("http://127.0.0.1:{port}"),
        Protocol::HttpProtobuf,
    ))
    .unwrap();
    let env = envelope(None);
    let began = Instant::now();
    // Far more than the queue holds (2048): the rest are dropped, not waited for.
    for _ in 0..10_000 {
        record_a_task(&tracer, &env);
    }
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    tracer.flush(Duration::from_secs(20)).await;
    assert!(tracer.failed() > 0);
    assert_eq!(tracer.exported(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_without_trace_context_starts_the_trace_its_attempts_join() {
    let c = Collector::start().await;
    let tracer = Tracer::start(config(&c.endpoint, Protocol::HttpProtobuf)).unwrap();
    let env = envelope(None);
    tracer.record_submit(
        "q",
        SendOperation::Create,
        SystemTime::now(),
        None,
        SubmitOutcome::Created(&env),
    );
    let creation = tracer.creation_context(env.id, None);
    let attempt = tracer.attempt_context(&env, 1);
    assert_eq!(attempt.trace_id(), creation.trace_id());
    assert_ne!(attempt.span_id(), creation.span_id());
    // Another process names the same ids.
    let other = Tracer::start(config(&c.endpoint, Protocol::HttpProtobuf)).unwrap();
    assert_eq!(other.creation_context(env.id, None), creation);
    tracer.flush(Duration::from_secs(10)).await;
    let spans = c.spans_of(&env.id.to_string());
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0]["name"], "create q");
    assert_eq!(
        str_attr(&spans[0], "messaging.operation.type"),
        Some("create")
    );
    assert_eq!(spans[0]["traceId"], creation.trace_id().to_string());
    assert_eq!(spans[0]["spanId"], creation.span_id().to_string());
    assert!(spans[0].get("parentSpanId").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsampled_submitter_keeps_the_whole_task_out_of_the_export() {
    let c = Collector::start().await;
    let tracer = Tracer::start(config(&c.endpoint, Protocol::HttpProtobuf)).unwrap();
    let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
    let env = envelope(Some(unsampled));
    assert!(
        !tracer
            .creation_context(env.id, Some(unsampled))
            .is_sampled()
    );
    tracer.record_submit(
        "q",
        SendOperation::Send,
        SystemTime::now(),
        Some(unsampled),
        SubmitOutcome::Created(&env),
    );
    tracer.record_attempt(&Attempt {
        task: env.id,
        queue: "q",
        handler_ref: "h",
        traceparent: Some(unsampled),
        attempt_no: 1,
        started_ms: Timestamp::now().unix_ms(),
        outcome: "SUCCESS",
        error_type: None,
    });
    let dispatch = tracer.start_dispatch(&env, 1);
    assert!(
        dispatch.traceparent().ends_with("-00"),
        "{}",
        dispatch.traceparent()
    );
    // A sampled task beside it still goes out.
    let sampled = envelope(None);
    tracer.record_submit(
        "q",
        SendOperation::Send,
        SystemTime::now(),
        None,
        SubmitOutcome::Created(&sampled),
    );
    tracer.flush(Duration::from_secs(10)).await;
    assert!(c.spans_of(&env.id.to_string()).is_empty());
    assert_eq!(c.spans_of(&sampled.id.to_string()).len(), 1);
}
