//! An OTLP receiver on loopback, for tests: the collector's gRPC
//! `TraceService` (the server `opentelemetry-proto` generates for tonic)
//! and OTLP/HTTP `POST /v1/traces` with protobuf bodies, both on one port
//! (`http://127.0.0.1:{port}` serves either protocol). Each request is kept
//! with the transport it came by; its spans are converted to OTLP's JSON
//! mapping (hex ids, 64-bit integers as decimal strings, enums as numbers)
//! so tests read them as JSON.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message as _;
use serde_json::{Value, json};

/// How a request reached the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `TraceService/Export` over gRPC.
    Grpc,
    /// `POST /v1/traces`.
    Http,
}

/// One export request.
#[derive(Debug, Clone)]
pub struct Received {
    /// gRPC or HTTP.
    pub transport: Transport,
    /// The request's `content-type`.
    pub content_type: String,
    /// An HTTP request header the test asks about (`x-api-key`).
    pub api_key: Option<String>,
    /// The request in OTLP's JSON mapping.
    pub body: Value,
}

/// The receiver; it runs until the test's runtime ends.
pub struct Collector {
    /// `http://127.0.0.1:{port}`.
    pub endpoint: String,
    received: Arc<Mutex<Vec<Received>>>,
}

#[derive(Clone)]
struct Service {
    received: Arc<Mutex<Vec<Received>>>,
    fail: bool,
}

#[tonic::async_trait]
impl TraceService for Service {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let api_key = request
            .metadata()
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        self.received.lock().unwrap().push(Received {
            transport: Transport::Grpc,
            content_type: "application/grpc".into(),
            api_key,
            body: to_json(&request.into_inner()),
        });
        if self.fail {
            return Err(tonic::Status::invalid_argument("refused by the test"));
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl Collector {
    /// A collector that accepts every request.
    pub async fn start() -> Self {
        Self::serve(false).await
    }

    /// A collector that refuses every request (HTTP 400, gRPC
    /// `INVALID_ARGUMENT`: errors an exporter does not retry).
    pub async fn refusing() -> Self {
        Self::serve(true).await
    }

    async fn serve(fail: bool) -> Self {
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let service = Service {
            received: Arc::clone(&received),
            fail,
        };
        let grpc = tonic::service::Routes::new(TraceServiceServer::new(service.clone()))
            .into_axum_router();
        let http = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let service = service.clone();
                async move {
                    let header = |name: &str| {
                        headers
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned)
                    };
                    let request = ExportTraceServiceRequest::decode(body).unwrap();
                    service.received.lock().unwrap().push(Received {
                        transport: Transport::Http,
                        content_type: header("content-type").unwrap_or_default(),
                        api_key: header("x-api-key"),
                        body: to_json(&request),
                    });
                    let status = if service.fail {
                        StatusCode::BAD_REQUEST
                    } else {
                        StatusCode::OK
                    };
                    let answer = ExportTraceServiceResponse {
                        partial_success: None,
                    };
                    (
                        status,
                        [("content-type", "application/x-protobuf")],
                        answer.encode_to_vec(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, http.merge(grpc)).await;
        });
        Self {
            endpoint: format!("http://{addr}"),
            received,
        }
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Every span so far, with its resource's `service.name` beside it.
    pub fn spans(&self) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        for r in self.received() {
            for rs in r.body["resourceSpans"].as_array().unwrap() {
                let service = attr(&rs["resource"], "service.name")
                    .map(|v| v["stringValue"].as_str().unwrap().to_owned())
                    .unwrap_or_default();
                for ss in rs["scopeSpans"].as_array().unwrap() {
                    for span in ss["spans"].as_array().unwrap() {
                        out.push((service.clone(), span.clone()));
                    }
                }
            }
        }
        out
    }

    /// The spans of task `id` (its `messaging.message.id`).
    pub fn spans_of(&self, id: &str) -> Vec<Value> {
        self.spans()
            .into_iter()
            .map(|(_, s)| s)
            .filter(|s| str_attr(s, "messaging.message.id") == Some(id))
            .collect()
    }
}

/// The value of attribute `key` of a span, link or resource.
pub fn attr<'a>(holder: &'a Value, key: &str) -> Option<&'a Value> {
    holder["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

/// A string attribute.
pub fn str_attr<'a>(holder: &'a Value, key: &str) -> Option<&'a str> {
    attr(holder, key).and_then(|v| v["stringValue"].as_str())
}

/// The span of `kind` (OTLP's number: 3 CLIENT, 4 PRODUCER, 5 CONSUMER).
pub fn of_kind(spans: &[Value], kind: i64) -> &Value {
    spans
        .iter()
        .find(|s| s["kind"] == kind)
        .unwrap_or_else(|| panic!("no span of kind {kind} in {spans:?}"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn value(v: &AnyValue) -> Value {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => json!({ "stringValue": s }),
        Some(any_value::Value::IntValue(i)) => json!({ "intValue": i.to_string() }),
        Some(any_value::Value::BoolValue(b)) => json!({ "boolValue": b }),
        Some(any_value::Value::DoubleValue(d)) => json!({ "doubleValue": d }),
        other => json!({ "other": format!("{other:?}") }),
    }
}

fn attributes(kvs: &[KeyValue]) -> Value {
    Value::Array(
        kvs.iter()
            .map(|kv| json!({ "key": kv.key, "value": kv.value.as_ref().map(value) }))
            .collect(),
    )
}

/// `request` in OTLP's JSON mapping; an empty parent span id is left out.
fn to_json(request: &ExportTraceServiceRequest) -> Value {
    let resource_spans: Vec<Value> = request
        .resource_spans
        .iter()
        .map(|rs| {
            let scope_spans: Vec<Value> = rs
                .scope_spans
                .iter()
                .map(|ss| {
                    let spans: Vec<Value> = ss
                        .spans
                        .iter()
                        .map(|s| {
                            let mut span = json!({
                                "traceId": hex(&s.trace_id),
                                "spanId": hex(&s.span_id),
                                "flags": s.flags,
                                "name": s.name,
                                "kind": s.kind,
                                "startTimeUnixNano": s.start_time_unix_nano.to_string(),
                                "endTimeUnixNano": s.end_time_unix_nano.to_string(),
                                "attributes": attributes(&s.attributes),
                                "links": s.links.iter().map(|l| json!({
                                    "traceId": hex(&l.trace_id),
                                    "spanId": hex(&l.span_id),
                                    "attributes": attributes(&l.attributes),
                                })).collect::<Vec<_>>(),
                                "status": s.status.as_ref().map_or_else(
                                    || json!({ "code": 0 }),
                                    |st| json!({ "code": st.code, "message": st.message }),
                                ),
                            });
                            if !s.parent_span_id.is_empty() {
                                span["parentSpanId"] = json!(hex(&s.parent_span_id));
                            }
                            span
                        })
                        .collect();
                    json!({
                        "scope": ss.scope.as_ref().map(|sc| json!({ "name": sc.name, "version": sc.version })),
                        "spans": spans,
                    })
                })
                .collect();
            json!({
                "resource": { "attributes": rs.resource.as_ref().map_or_else(|| json!([]), |r| attributes(&r.attributes)) },
                "scopeSpans": scope_spans,
            })
        })
        .collect();
    json!({ "resourceSpans": resource_spans })
}
