//! Callback targets over TLS (`docs/server.md`, "Callbacks"; `docs/grpc.md`,
//! "gRPC callbacks"): the real `rdq serve` posts to an `https://` target and
//! calls a `grpcs://` one, each behind a TLS proxy with a certificate from a
//! CA the test makes (trusted through `SSL_CERT_FILE`, as an operator adds a
//! private CA), and refuses the same targets presenting a certificate from
//! a CA it does not trust.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::net::SocketAddr;

use common::{Api, FAST_CONFIG, RdqServer, Receiver};
use rdq_tls::testing::{TestPki, tls_proxy};
use serde_json::{Value, json};

/// A gRPC callback target answering OK to every task.
struct Ok;

#[tonic::async_trait]
impl rdq_grpc::pb::handler_server::Handler for Ok {
    async fn handle(
        &self,
        _request: tonic::Request<rdq_grpc::pb::HandleRequest>,
    ) -> Result<tonic::Response<rdq_grpc::pb::HandleResponse>, tonic::Status> {
        Result::Ok(tonic::Response::new(rdq_grpc::pb::HandleResponse {}))
    }
}

async fn grpc_receiver() -> SocketAddr {
    let router = tonic::service::Routes::new(rdq_grpc::pb::handler_server::HandlerServer::new(Ok))
        .into_axum_router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// A TLS proxy in front of `upstream` with `pki`'s server certificate,
/// offering `alpn`.
async fn proxy(pki: &TestPki, upstream: SocketAddr, alpn: &[&[u8]]) -> u16 {
    let mut config = pki.server_config(false).unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tls_proxy(config, upstream).await.unwrap().0.port()
}

fn upstream_of(url: &str) -> SocketAddr {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

async fn outcome(api: &Api, queue: &str) -> Value {
    let (status, body) = api
        .post(
            "/v1/tasks",
            json!({"queue": queue, "handler_ref": "h", "payload_json": {"n": 1}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    api.settled(body["id"].as_str().unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_and_grpcs_targets_are_reached_with_a_trusted_ca_and_refused_without() {
    let trusted = TestPki::new(&["localhost", "127.0.0.1"]).unwrap();
    let stranger = TestPki::new(&["localhost", "127.0.0.1"]).unwrap();
    let receiver = Receiver::start().await;
    let http = upstream_of(&receiver.url);
    let grpc = grpc_receiver().await;

    let https_ok = proxy(&trusted, http, &[b"http/1.1"]).await;
    let grpcs_ok = proxy(&trusted, grpc, &[b"h2"]).await;
    let https_bad = proxy(&stranger, http, &[b"http/1.1"]).await;
    let grpcs_bad = proxy(&stranger, grpc, &[b"h2"]).await;

    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let ca = trusted.ca.to_str().unwrap().to_owned();
    let server = RdqServer::start_with_env(
        dir.path(),
        FAST_CONFIG,
        store.to_str().unwrap(),
        &[],
        &[("SSL_CERT_FILE", ca.as_str())],
    );
    let api = Api::new(&server.base);
    for (queue, url) in [
        ("https-ok", format!("https://localhost:{https_ok}/hook")),
        ("grpcs-ok", format!("grpcs://localhost:{grpcs_ok}")),
        ("https-bad", format!("https://localhost:{https_bad}/hook")),
        ("grpcs-bad", format!("grpcs://localhost:{grpcs_bad}")),
    ] {
        api.configure(
            queue,
            json!({"max_attempts": 1, "callback": {"url": url, "timeout_ms": 5000}}),
        )
        .await;
    }

    let ok = outcome(&api, "https-ok").await;
    assert_eq!(ok["status"], "SUCCEEDED", "{ok}");
    assert_eq!(receiver.received.lock().unwrap().len(), 1);
    let ok = outcome(&api, "grpcs-ok").await;
    assert_eq!(ok["status"], "SUCCEEDED", "{ok}");

    let bad = outcome(&api, "https-bad").await;
    assert_eq!(bad["status"], "DEAD", "{bad}");
    assert_eq!(bad["attempts"][0]["error"]["type"], "http.Connect", "{bad}");
    let bad = outcome(&api, "grpcs-bad").await;
    assert_eq!(bad["status"], "DEAD", "{bad}");
    assert_eq!(
        bad["attempts"][0]["error"]["type"], "grpc.Unavailable",
        "{bad}"
    );
    let message = bad["attempts"][0]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("certificate") || message.contains("UnknownIssuer"),
        "the refusal says why: {message}"
    );
    // Nothing reached the receiver past an untrusted certificate.
    assert_eq!(receiver.received.lock().unwrap().len(), 1);
    drop(server);
}
