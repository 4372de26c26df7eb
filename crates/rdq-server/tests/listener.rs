//! The listener over real sockets (`docs/server.md`, "The listener";
//! `docs/deployment.md`): slow and idle clients are closed, the connection
//! limit holds, HTTPS with and without client certificates, and HTTP/2 by
//! prior knowledge on the same port.
//!
//! Timeouts are configured short (a few hundred ms) so the tests finish
//! quickly; they assert what happens (a close, an answer), never how long it
//! took. A generous safety bound only keeps a broken build from hanging.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{TestServer, test_config};
use rdq_server::ServerConfig;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Long enough for anything that should happen; only a broken server hits it.
const SAFETY: Duration = Duration::from_secs(30);

async fn start(config: ServerConfig) -> (TestServer, SocketAddr) {
    let server = TestServer::with(config, Arc::new(rdq_store_memory::MemoryStore::new())).await;
    let addr: SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
    (server, addr)
}

/// A response read off a raw HTTP/1.1 connection.
#[derive(Debug)]
struct RawResponse {
    status: u16,
    head: String,
    body: Vec<u8>,
}

/// Reads one response (Content-Length framed); `None` if the server closed
/// the connection before sending any byte.
async fn read_response(stream: &mut TcpStream) -> Option<RawResponse> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = tokio::time::timeout(SAFETY, stream.read(&mut chunk))
            .await
            .expect("the server neither answers nor closes")
            .unwrap_or(0);
        if n == 0 {
            assert!(buf.is_empty(), "closed mid-response: {buf:?}");
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let status = head[9..12].parse().unwrap();
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = tokio::time::timeout(SAFETY, stream.read(&mut chunk))
            .await
            .expect("the body never came")
            .unwrap();
        assert!(n > 0, "closed mid-body");
        body.extend_from_slice(&chunk[..n]);
    }
    Some(RawResponse { status, head, body })
}

/// True once the server has closed the connection (EOF or reset), having
/// sent nothing more; panics if it stays open past the safety bound.
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut chunk = [0u8; 256];
    match tokio::time::timeout(SAFETY, stream.read(&mut chunk)).await {
        Err(_) => panic!("the server kept the connection open"),
        Ok(Ok(0)) => true,
        Ok(Ok(n)) => panic!(
            "the server sent {:?} instead of closing",
            String::from_utf8_lossy(&chunk[..n])
        ),
        Ok(Err(e)) => {
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
            true
        }
    }
}

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: rdq\r\n\r\n";

#[tokio::test]
async fn a_half_request_line_that_stalls_is_closed_without_an_answer() {
    let mut config = test_config();
    config.http.header_read_timeout_ms = 200;
    let (server, addr) = start(config).await;

    // On a new connection.
    let mut fresh = TcpStream::connect(addr).await.unwrap();
    fresh.write_all(b"GET /heal").await.unwrap();
    assert!(closed_by_server(&mut fresh).await);

    // A connection that never sends a byte.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    assert!(closed_by_server(&mut silent).await);

    // On a kept-alive connection, after a complete request.
    let mut kept = TcpStream::connect(addr).await.unwrap();
    kept.write_all(HEALTHZ).await.unwrap();
    assert_eq!(read_response(&mut kept).await.unwrap().status, 200);
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHo")
        .await
        .unwrap();
    assert!(closed_by_server(&mut kept).await);

    // The server still serves others.
    let r = server.get("/healthz").await;
    assert_eq!(r.status, 200);
    server.stop().await;
}

#[tokio::test]
async fn a_kept_alive_connection_waits_for_its_next_request_beyond_the_header_timeout() {
    // The header timeout starts at a request's first byte; waiting between
    // requests is the idle timeout's business.
    let mut config = test_config();
    config.http.header_read_timeout_ms = 100;
    config.http.idle_timeout_ms = 60_000;
    let (server, addr) = start(config).await;
    let mut kept = TcpStream::connect(addr).await.unwrap();
    kept.write_all(HEALTHZ).await.unwrap();
    assert_eq!(read_response(&mut kept).await.unwrap().status, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    kept.write_all(HEALTHZ).await.unwrap();
    assert_eq!(read_response(&mut kept).await.unwrap().status, 200);
    server.stop().await;
}

#[tokio::test]
async fn a_stalled_body_is_answered_408_and_the_connection_closed() {
    let mut config = test_config();
    config.http.body_read_timeout_ms = 200;
    let (server, addr) = start(config).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            b"POST /v1/tasks HTTP/1.1\r\nHost: rdq\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"queue\":\"q\",",
        )
        .await
        .unwrap();
    let response = read_response(&mut stream).await.expect("an answer");
    assert_eq!(response.status, 408, "{}", response.head);
    let problem: Value = serde_json::from_slice(&response.body).unwrap();
    assert_eq!(problem["code"], "REQUEST_TIMEOUT", "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("body_read_timeout_ms"),
        "{problem}"
    );
    assert!(
        response
            .head
            .to_ascii_lowercase()
            .contains("connection: close"),
        "{}",
        response.head
    );
    assert!(closed_by_server(&mut stream).await);
    assert!(server.snapshot().await.is_empty(), "nothing was submitted");
    server.stop().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let mut config = test_config();
    config.http.idle_timeout_ms = 200;
    // Far beyond the safety bound: only the idle timeout can close it.
    config.http.header_read_timeout_ms = 120_000;
    let (server, addr) = start(config).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(HEALTHZ).await.unwrap();
    assert_eq!(read_response(&mut stream).await.unwrap().status, 200);
    assert!(closed_by_server(&mut stream).await);
    server.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_limit_wait_until_one_closes() {
    let mut config = test_config();
    config.http.max_connections = 1;
    let (server, addr) = start(config).await;
    let mut first = TcpStream::connect(addr).await.unwrap();
    first.write_all(HEALTHZ).await.unwrap();
    assert_eq!(read_response(&mut first).await.unwrap().status, 200);

    // The second connects (the OS backlog takes it) but is not served.
    let mut second = TcpStream::connect(addr).await.unwrap();
    second.write_all(HEALTHZ).await.unwrap();
    let mut byte = [0u8; 1];
    let waited = tokio::time::timeout(Duration::from_millis(500), second.read(&mut byte)).await;
    assert!(
        waited.is_err(),
        "the second connection was served while the first held the only slot: {waited:?}"
    );

    // Once the first closes, the second is served.
    drop(first);
    assert_eq!(read_response(&mut second).await.unwrap().status, 200);
    drop(second);
    server.stop().await;
}

#[tokio::test]
async fn in_flight_requests_finish_at_shutdown_and_new_connections_are_refused() {
    let store: Arc<dyn rdq_engine::Store> = Arc::new(rdq_store_memory::MemoryStore::new());
    let server = rdq_server::Server::bind(test_config(), Arc::clone(&store))
        .await
        .unwrap();
    let addr = server.local_addr();
    let (trigger, mut stop) = rdq_runtime::shutdown_channel();
    let running = tokio::spawn(server.run(async move { stop.wait().await }));

    let body = br#"{"queue":"q","handler_ref":"h","payload_json":{"n":1}}"#;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/tasks HTTP/1.1\r\nHost: rdq\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // 100 Continue: the handler is reading the body, the request is in flight.
    let interim = read_response(&mut stream).await.unwrap();
    assert_eq!(interim.status, 100, "{}", interim.head);

    trigger.trigger();
    stream.write_all(body).await.unwrap();
    let response = read_response(&mut stream)
        .await
        .expect("the in-flight request is answered");
    assert_eq!(
        response.status,
        201,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    assert!(closed_by_server(&mut stream).await);
    tokio::time::timeout(SAFETY, running)
        .await
        .expect("the server stops")
        .unwrap()
        .unwrap();
    let counts = store.as_counts().unwrap().counts().await.unwrap();
    assert_eq!(counts.len(), 1, "{counts:?}");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
}

#[tokio::test]
async fn a_grpc_stream_may_stay_silent_beyond_the_body_timeout() {
    let mut config = test_config();
    config.http.body_read_timeout_ms = 200;
    let (server, addr) = start(config).await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    let driver = tokio::spawn(conn);
    // A Work stream whose worker has not said its hello yet: the server
    // waits for it. Were the body timeout applied, the stream would end
    // with an error status after 200 ms.
    let (_silent, body) =
        futures::channel::mpsc::unbounded::<Result<axum::body::Bytes, std::io::Error>>();
    let request = hyper::Request::post(format!("http://{addr}/rdq.v1.Workers/Work"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(axum::body::Body::from_stream(body))
        .unwrap();
    let answered =
        tokio::time::timeout(Duration::from_millis(1500), sender.send_request(request)).await;
    assert!(
        answered.is_err(),
        "the silent stream was answered: {:?}",
        answered.map(|r| r.map(|r| r.headers().clone()))
    );
    drop(sender);
    driver.abort();
    server.stop().await;
}

#[tokio::test]
async fn http2_with_prior_knowledge_shares_the_port() {
    let (server, addr) = start(test_config()).await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    let driver = tokio::spawn(conn);
    for _ in 0..3 {
        let request = hyper::Request::get(format!("http://{addr}/readyz"))
            .body(axum::body::Body::empty())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.version(), hyper::Version::HTTP_2);
        assert_eq!(response.status(), 200);
        let body = axum::body::to_bytes(axum::body::Body::new(response.into_body()), 1 << 20)
            .await
            .unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["status"], "ready");
    }
    drop(sender);
    driver.await.unwrap().unwrap();
    server.stop().await;
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed() {
    let mut config = test_config();
    config.http.idle_timeout_ms = 200;
    let (server, addr) = start(config).await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    let driver = tokio::spawn(conn);
    let request = hyper::Request::get(format!("http://{addr}/healthz"))
        .body(axum::body::Body::empty())
        .unwrap();
    assert_eq!(sender.send_request(request).await.unwrap().status(), 200);
    // The server sends GOAWAY and closes: the client's connection ends
    // while `sender` is still held.
    tokio::time::timeout(SAFETY, driver)
        .await
        .expect("the idle HTTP/2 connection stayed open")
        .unwrap()
        .ok();
    assert!(sender.is_closed());
    server.stop().await;
}

// ---- HTTPS (the `https` feature, on by default) ------------------------

#[cfg(feature = "https")]
mod https {
    use std::path::{Path, PathBuf};

    use super::*;

    /// A CA, a server certificate for 127.0.0.1 and localhost, and client
    /// certificates, written as PEM files in a temporary directory.
    struct Pki {
        dir: tempfile::TempDir,
        ca_pem: String,
        client_pem: String,
        stranger_pem: String,
    }

    impl Pki {
        fn new() -> Self {
            use rcgen::{
                BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
            };
            let ca_key = KeyPair::generate().unwrap();
            let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            ca_params
                .distinguished_name
                .push(rcgen::DnType::CommonName, "rdq test CA");
            let ca_cert = ca_params.self_signed(&ca_key).unwrap();
            let issuer = Issuer::new(ca_params, ca_key);

            let leaf = |names: Vec<String>, eku: ExtendedKeyUsagePurpose, issuer: &Issuer<_>| {
                let key = KeyPair::generate().unwrap();
                let mut params = CertificateParams::new(names).unwrap();
                params.extended_key_usages = vec![eku];
                let cert = params.signed_by(&key, issuer).unwrap();
                (cert.pem(), key.serialize_pem())
            };
            let (server_cert, server_key) = leaf(
                vec!["127.0.0.1".into(), "localhost".into()],
                ExtendedKeyUsagePurpose::ServerAuth,
                &issuer,
            );
            let (client_cert, client_key) = leaf(
                vec!["worker.test".into()],
                ExtendedKeyUsagePurpose::ClientAuth,
                &issuer,
            );
            // A client certificate from a CA the server does not trust.
            let other_key = KeyPair::generate().unwrap();
            let mut other_params = CertificateParams::new(Vec::<String>::new()).unwrap();
            other_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let other_issuer = Issuer::new(other_params, other_key);
            let (stranger_cert, stranger_key) = leaf(
                vec!["stranger.test".into()],
                ExtendedKeyUsagePurpose::ClientAuth,
                &other_issuer,
            );

            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
            std::fs::write(dir.path().join("server.pem"), &server_cert).unwrap();
            std::fs::write(dir.path().join("server.key"), &server_key).unwrap();
            Self {
                dir,
                ca_pem: ca_cert.pem(),
                client_pem: format!("{client_cert}{client_key}"),
                stranger_pem: format!("{stranger_cert}{stranger_key}"),
            }
        }

        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }

        fn config(&self, client_ca: bool) -> ServerConfig {
            let mut config = test_config();
            config.tls.cert = Some(self.path("server.pem"));
            config.tls.key = Some(self.path("server.key"));
            config.tls.client_ca = client_ca.then(|| self.path("ca.pem"));
            config
        }

        /// A reqwest client trusting only the test CA, optionally presenting
        /// a client certificate.
        fn client(&self, identity: Option<&str>) -> reqwest::Client {
            let mut builder = reqwest::Client::builder()
                .no_proxy()
                .tls_certs_only([reqwest::Certificate::from_pem(self.ca_pem.as_bytes()).unwrap()]);
            if let Some(pem) = identity {
                builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
            }
            builder.build().unwrap()
        }
    }

    fn https(addr: SocketAddr, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", addr.port())
    }

    #[tokio::test]
    async fn https_serves_the_api_and_the_client_trusts_a_private_ca() {
        let pki = Pki::new();
        let (server, addr) = start(pki.config(false)).await;

        let r = pki
            .client(None)
            .get(https(addr, "/readyz"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);

        // rdq-client with the CA file (what `--server https://…` uses).
        let client = rdq_client::Client::with_ca_pem(
            &format!("https://localhost:{}", addr.port()),
            None,
            pki.ca_pem.as_bytes(),
        )
        .unwrap();
        client.ready().await.unwrap();
        let body = rdq_api::tasks::SubmitBody {
            queue: "tls".into(),
            handler_ref: "h".into(),
            ..Default::default()
        };
        let (created, task) = client.submit(&body).await.unwrap();
        assert!(created);
        assert_eq!(task.queue.as_str(), "tls");

        // Without the CA the certificate is not trusted.
        let untrusting = rdq_client::Client::new(&https(addr, ""), None).unwrap();
        let err = untrusting.ready().await.unwrap_err();
        assert_eq!(err.code, "SERVER_UNREACHABLE", "{err}");
        server.stop().await;
    }

    /// A gRPC channel to the TLS listener, trusting the test CA and offering
    /// ALPN `h2`, optionally with a client certificate (PEM: chain + key).
    async fn grpc_channel(
        pki: &Pki,
        addr: SocketAddr,
        identity: Option<&str>,
    ) -> Result<tonic::transport::Channel, tonic::transport::Error> {
        let mut tls = rdq_tls::client::ClientTls::new();
        tls.roots = rdq_tls::client::Roots::CaFile(pki.path("ca.pem"));
        tls.alpn = vec![b"h2".to_vec()];
        if let Some(pem) = identity {
            let path = pki.path("grpc-client.pem");
            std::fs::write(&path, pem).unwrap();
            tls.identity = Some(rdq_tls::client::ClientIdentity {
                certificate: path.clone(),
                key: path,
            });
        }
        let connector = tls.connector().unwrap();
        let port = addr.port();
        tonic::transport::Endpoint::from_shared(format!("http://localhost:{port}"))
            .unwrap()
            .connect_with_connector(tower::service_fn(move |_uri| {
                let connector = connector.clone();
                async move {
                    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
                    let tls = connector.connect("localhost", tcp).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
                }
            }))
            .await
    }

    fn grpc_submit(queue: &str) -> rdq_grpc::pb::SubmitRequest {
        rdq_grpc::pb::SubmitRequest {
            queue: queue.into(),
            handler_ref: "h".into(),
            payload: b"{}".to_vec(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn grpc_is_served_over_tls_on_the_https_port() {
        use rdq_grpc::pb::tasks_client::TasksClient;
        let pki = Pki::new();
        let (server, addr) = start(pki.config(false)).await;
        let channel = grpc_channel(&pki, addr, None).await.unwrap();
        let mut tasks = TasksClient::new(channel);
        let created = tasks
            .submit(grpc_submit("grpc-tls"))
            .await
            .unwrap()
            .into_inner();
        assert!(created.created);
        let env = created.envelope.unwrap();
        let got = tasks
            .get(rdq_grpc::pb::GetTaskRequest { id: env.id.clone() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.envelope.unwrap().queue, "grpc-tls");

        // Plaintext HTTP/2 (h2c) to the TLS port is no gRPC at all.
        let plain = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await;
        let refused = match plain {
            Err(_) => true,
            Ok(ch) => TasksClient::new(ch)
                .submit(grpc_submit("grpc-tls"))
                .await
                .is_err(),
        };
        assert!(refused, "an h2c call to the TLS port must fail");
        server.stop().await;
    }

    #[tokio::test]
    async fn grpc_over_tls_needs_a_trusted_client_certificate_when_one_is_required() {
        use rdq_grpc::pb::tasks_client::TasksClient;
        let pki = Pki::new();
        let (server, addr) = start(pki.config(true)).await;
        let mut trusted = TasksClient::new(
            grpc_channel(&pki, addr, Some(&pki.client_pem))
                .await
                .unwrap(),
        );
        assert!(
            trusted
                .submit(grpc_submit("grpc-mtls"))
                .await
                .unwrap()
                .into_inner()
                .created
        );
        for identity in [None, Some(pki.stranger_pem.as_str())] {
            let refused = match grpc_channel(&pki, addr, identity).await {
                Err(_) => true,
                Ok(ch) => TasksClient::new(ch)
                    .submit(grpc_submit("grpc-mtls"))
                    .await
                    .is_err(),
            };
            assert!(
                refused,
                "a call without a trusted client certificate must fail"
            );
        }
        server.stop().await;
    }

    #[tokio::test]
    async fn plain_http_to_the_tls_port_gets_no_http_answer() {
        let pki = Pki::new();
        let (server, addr) = start(pki.config(false)).await;
        let plain = reqwest::Client::builder().no_proxy().build().unwrap();
        let result = plain.get(format!("http://{addr}/healthz")).send().await;
        assert!(result.is_err(), "{result:?}");

        let mut raw = TcpStream::connect(addr).await.unwrap();
        raw.write_all(HEALTHZ).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(SAFETY, raw.read_to_end(&mut answer))
            .await
            .expect("the server closes the connection");
        assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");
        server.stop().await;
    }

    #[tokio::test]
    async fn a_stalled_tls_handshake_is_closed_after_the_header_timeout() {
        let pki = Pki::new();
        let mut config = pki.config(false);
        config.http.header_read_timeout_ms = 200;
        let (server, addr) = start(config).await;
        let mut raw = TcpStream::connect(addr).await.unwrap();
        // The first bytes of a TLS record header, then nothing.
        raw.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
        assert!(closed_by_server(&mut raw).await);
        server.stop().await;
    }

    #[tokio::test]
    async fn client_certificates_are_required_when_a_client_ca_is_configured() {
        let pki = Pki::new();
        let (server, addr) = start(pki.config(true)).await;

        let without = pki.client(None).get(https(addr, "/healthz")).send().await;
        assert!(
            without.is_err(),
            "a client without a certificate: {without:?}"
        );

        let stranger = pki
            .client(Some(&pki.stranger_pem))
            .get(https(addr, "/healthz"))
            .send()
            .await;
        assert!(
            stranger.is_err(),
            "a certificate from another CA: {stranger:?}"
        );

        let with = pki
            .client(Some(&pki.client_pem))
            .get(https(addr, "/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(with.status(), 200);
        server.stop().await;
    }

    #[tokio::test]
    async fn bad_tls_files_are_refused_at_bind_with_the_file_named() {
        let pki = Pki::new();
        let mut config = pki.config(false);
        config.tls.key = Some(pki.path("server.pem")); // a certificate, not a key
        let err = rdq_server::Server::bind(config, Arc::new(rdq_store_memory::MemoryStore::new()))
            .await
            .err()
            .expect("refused");
        assert_eq!(err.code(), "INVALID_CONFIG");
        assert!(err.to_string().contains("server.pem"), "{err}");

        let mut config = pki.config(false);
        config.tls.cert = Some(Path::new("/nonexistent/rdq/cert.pem").to_owned());
        let err = rdq_server::Server::bind(config, Arc::new(rdq_store_memory::MemoryStore::new()))
            .await
            .err()
            .expect("refused");
        assert!(
            err.to_string().contains("/nonexistent/rdq/cert.pem"),
            "{err}"
        );
    }
}
