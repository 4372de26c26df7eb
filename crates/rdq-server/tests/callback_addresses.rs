//! The callback address rules through a running server (`docs/server.md`,
//! "Callback addresses"): special-purpose addresses, their IPv6 forms and
//! the cloud metadata services' addresses and names are refused as targets
//! whatever `allow`, `allow_loopback` and `allow_private` say, and a
//! receiver's redirect is never followed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{TestServer, test_config};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A server whose settings admit everything they can: any URL, loopback and
/// private networks.
async fn wide_open() -> TestServer {
    let mut config = test_config();
    config.callbacks.allow = vec!["*".into(), "grpc://*:*".into(), "grpcs://*:*".into()];
    config.callbacks.allow_loopback = true;
    config.callbacks.allow_private = true;
    TestServer::with(config, Arc::new(rdq_store_memory::MemoryStore::new())).await
}

#[tokio::test]
async fn special_purpose_and_metadata_targets_are_refused_whatever_the_settings() {
    let server = wide_open().await;
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://169.254.170.2/v2/credentials",
        "http://169.254.1.1/x",
        "http://100.100.100.200/latest/meta-data/",
        "http://168.63.129.16/machine",
        "http://192.0.0.192/x",
        "http://0.0.0.0:9000/x",
        "http://192.0.2.1/x",
        "http://198.18.0.1/x",
        "http://224.0.0.1/x",
        "http://255.255.255.255/x",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://[fe80::1]/x",
        "http://[::]/x",
        "http://[2001:db8::1]/x",
        "http://[::ffff:169.254.169.254]/x",
        "http://[64:ff9b::a9fe:a9fe]/x",
        "http://[64:ff9b:1::808:808]/x",
        "http://[2002:a9fe:a9fe::1]/x",
        "http://[2001:0:808:808:8000:f227:5601:5601]/x",
        "http://[2606:4700::200:5efe:a9fe:a9fe]/x",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://metadata/computeMetadata/v1/",
        "http://instance-data/latest/meta-data/",
        "https://metadata.goog/x",
        "grpc://metadata.google.internal:80",
        "grpc://169.254.169.254:80",
        "grpc://[fd00:ec2::254]:80",
    ] {
        let r = server
            .put("/v1/queues/ssrf/config", json!({"callback": {"url": url}}))
            .await;
        r.assert_problem(400, "INVALID_POLICY");
        let detail = r.body["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("never a callback target"),
            "{url}: {detail}"
        );
    }
    let r = server.get("/v1/queues/ssrf/config").await;
    assert_eq!(r.status, 404, "a refused config stores nothing: {}", r.text);
    // The same settings admit a private receiver and a loopback one.
    for url in [
        "http://10.0.0.1:9/x",
        "http://[fd12::1]:9/x",
        "http://127.0.0.1:9/x",
    ] {
        let r = server
            .put("/v1/queues/ok/config", json!({"callback": {"url": url}}))
            .await;
        assert_eq!(r.status, 200, "{url}: {}", r.text);
    }
    server.stop().await;
}

/// A loopback HTTP server giving every request `answer` and closing; its
/// port and how many connections it accepted.
async fn serve(answer: String) -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = conn.read(&mut buf).await;
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    (port, accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receivers_redirect_is_the_answer_and_is_not_followed() {
    let (elsewhere, reached) =
        serve("HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into()).await;
    let server = TestServer::start().await;
    let locations = [
        format!("http://127.0.0.1:{elsewhere}/"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ];
    let mut ids = Vec::new();
    for (i, location) in locations.iter().enumerate() {
        let (port, _) = serve(format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ))
        .await;
        let queue = format!("redirect-{i}");
        let r = server
            .put(
                &format!("/v1/queues/{queue}/config"),
                json!({"max_attempts": 1, "callback": {"url": format!("http://127.0.0.1:{port}/hook"), "timeout_ms": 2000}}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let env = server.submit(&queue, json!({"n": i})).await;
        ids.push(env["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        let env = server.settled(id).await;
        assert_eq!(env["status"], "DEAD", "{env}");
        let attempt = &env["attempts"][0];
        assert_eq!(attempt["outcome"], "PERMANENT_FAILURE", "{env}");
        assert_eq!(attempt["error"]["type"], "http.Status307", "{env}");
    }
    assert_eq!(reached.load(Ordering::SeqCst), 0, "a redirect was followed");
    server.stop().await;
}
