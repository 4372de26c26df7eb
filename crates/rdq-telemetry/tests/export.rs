//! The exporter against a real OTLP/HTTP receiver on loopback: batches
//! arrive as OTLP JSON, a full queue drops and counts instead of waiting,
//! unsampled spans are not sent, and a failing collector is counted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use rdq_envelope::TaskId;
use rdq_telemetry::config::{RootSampler, Sampler};
use rdq_telemetry::span::{SpanData, SpanKind, Status};
use rdq_telemetry::{
    SendOperation, SpanContext, SpanId, SubmitOutcome, TelemetryConfig, TraceId, Tracer,
};
use serde_json::Value;

struct Collector {
    url: String,
    bodies: Arc<Mutex<Vec<Value>>>,
}

async fn collector(status: StatusCode) -> Collector {
    let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
    let b = Arc::clone(&bodies);
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let b = Arc::clone(&b);
            async move {
                b.lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap());
                (status, "{}")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Collector {
        url: format!("http://{addr}/v1/traces"),
        bodies,
    }
}

fn config(url: &str, max_queue: usize) -> TelemetryConfig {
    TelemetryConfig {
        traces_url: url.to_owned(),
        service_name: "export-test".into(),
        resource: vec![("deployment.environment".into(), "test".into())],
        headers: vec![("x-api-key".into(), "k".into())],
        sampler: Sampler::ParentBased(RootSampler::AlwaysOn),
        max_queue,
        max_batch: 512,
        schedule_delay: Duration::from_secs(3600),
        export_timeout: Duration::from_secs(10),
    }
}

fn span(flags: u8) -> SpanData {
    SpanData {
        context: SpanContext {
            trace_id: TraceId::random(),
            span_id: SpanId::random(),
            flags,
        },
        parent: None,
        name: "x".into(),
        kind: SpanKind::Internal,
        start_ns: 1,
        end_ns: 2,
        attributes: Vec::new(),
        links: Vec::new(),
        status: Status::Unset,
    }
}

fn spans_in(bodies: &[Value]) -> Vec<Value> {
    bodies
        .iter()
        .flat_map(|b| {
            b["resourceSpans"][0]["scopeSpans"][0]["spans"]
                .as_array()
                .unwrap()
                .clone()
        })
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn a_full_queue_drops_and_counts_without_waiting() {
    let c = collector(StatusCode::OK).await;
    let tracer = Tracer::start(config(&c.url, 4)).unwrap();
    // The exporter task cannot run until this task yields: exactly four fit.
    for _ in 0..100 {
        tracer.record(span(1));
    }
    tracer.record(span(0)); // unsampled: ignored, not dropped
    assert_eq!(tracer.dropped(), 96);
    tracer.flush(Duration::from_secs(10)).await;
    assert_eq!(tracer.exported(), 4);
    let bodies = c.bodies.lock().unwrap().clone();
    assert_eq!(spans_in(&bodies).len(), 4);
    let resource = &bodies[0]["resourceSpans"][0]["resource"]["attributes"];
    let keys: Vec<&str> = resource
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["key"].as_str().unwrap())
        .collect();
    assert!(keys.contains(&"service.name") && keys.contains(&"deployment.environment"));
    assert_eq!(resource[0]["value"]["stringValue"], "export-test");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_collector_is_counted_and_later_spans_still_go_out() {
    let c = collector(StatusCode::INTERNAL_SERVER_ERROR).await;
    let tracer = Tracer::start(config(&c.url, 64)).unwrap();
    tracer.record(span(1));
    tracer.record(span(1));
    tracer.flush(Duration::from_secs(10)).await;
    assert_eq!(tracer.failed(), 2);
    assert_eq!(tracer.exported(), 0);
    tracer.record(span(1));
    tracer.flush(Duration::from_secs(10)).await;
    assert_eq!(tracer.failed(), 3);
    assert_eq!(c.bodies.lock().unwrap().len(), 2, "one request per flush");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_never_blocks_recording() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let tracer = Tracer::start(config(&format!("http://127.0.0.1:{port}/v1/traces"), 8)).unwrap();
    for _ in 0..8 {
        tracer.record(span(1));
    }
    tracer.flush(Duration::from_secs(10)).await;
    assert_eq!(tracer.failed(), 8);
}

#[tokio::test(flavor = "current_thread")]
async fn a_submit_without_trace_context_starts_the_trace_its_attempts_join() {
    let c = collector(StatusCode::OK).await;
    let tracer = Tracer::start(config(&c.url, 64)).unwrap();
    let mut env = rdq_envelope::Envelope::new(
        "q",
        "h",
        b"",
        "application/octet-stream",
        rdq_envelope::Timestamp::now(),
    );
    env.id = TaskId::generate();
    tracer.record_submit(
        "q",
        SendOperation::Send,
        std::time::SystemTime::now(),
        None,
        SubmitOutcome::Created(&env),
    );
    let creation = tracer.creation_context(env.id, None);
    let attempt = tracer.attempt_context(&env, 1);
    assert_eq!(attempt.trace_id, creation.trace_id);
    assert_ne!(attempt.span_id, creation.span_id);
    tracer.flush(Duration::from_secs(10)).await;
    let spans = spans_in(&c.bodies.lock().unwrap());
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0]["traceId"], creation.trace_id.to_string());
    assert_eq!(spans[0]["spanId"], creation.span_id.to_string());
    assert!(spans[0].get("parentSpanId").is_none());
    // An unsampled submitter: nothing of the task is recorded.
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
    assert!(!tracer.creation_context(env.id, Some(tp)).is_sampled());
}
