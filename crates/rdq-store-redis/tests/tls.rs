//! `rediss://` against a real TLS Redis: each test starts its own
//! `redis-server --port 0 --tls-port <free>` on the certificates of a fresh
//! test CA (the server's certificate names `localhost` only), and checks what
//! the store accepts and refuses (`docs/stores/redis.md`, "TLS").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use rdq_engine::store::admin::{TaskCounts, TaskLookup};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdq_engine::{Engine, Settlement, SubmitRequest, SystemClock};
use rdq_envelope::Status;
use rdq_store_redis::RedisStore;
use rdq_tls::testing::TestPki;

/// A TLS-only `redis-server`, killed on drop.
struct TlsRedis {
    child: Child,
    port: u16,
    pki: TestPki,
}

impl TlsRedis {
    fn start(auth_clients: bool) -> Self {
        let pki = TestPki::new(&["localhost"]).unwrap();
        let port = common::free_port();
        let child = Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .arg("--tls-cert-file")
            .arg(&pki.server_cert)
            .arg("--tls-key-file")
            .arg(&pki.server_key)
            .arg("--tls-ca-cert-file")
            .arg(&pki.ca)
            .args([
                "--tls-auth-clients",
                if auth_clients { "yes" } else { "no" },
            ])
            .arg("--dir")
            .arg(pki.dir())
            .args(["--daemonize", "no", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let server = Self { child, port, pki };
        server.wait_until_listening();
        server
    }

    fn wait_until_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn url(&self, scheme: &str, host: &str, params: &str) -> String {
        format!(
            "{scheme}://{host}:{}/?prefix=tls&wait_ms=0&{params}",
            self.port
        )
    }

    fn ca(&self) -> String {
        self.pki.ca.display().to_string()
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn request() -> SubmitRequest {
    SubmitRequest {
        queue: "tls".into(),
        handler_ref: "tls.noop".into(),
        payload: br#"{"n":1}"#.to_vec(),
        payload_content_type: "application/json".into(),
        ..SubmitRequest::default()
    }
}

/// Opens the store and runs one operation; the error text if it fails.
async fn works(url: &str) -> Result<(), String> {
    let store = RedisStore::open(url).await.map_err(|e| e.to_string())?;
    store.counts().await.map(drop).map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_claim_and_settle_run_over_rediss() {
    if !common::have_redis_binaries() {
        eprintln!("skipping: redis-server is not installed");
        return;
    }
    let redis = TlsRedis::start(false);
    let url = redis.url("rediss", "localhost", &format!("tls_ca={}", redis.ca()));
    let store = RedisStore::open(&url).await.unwrap();
    let engine = Engine::new(Arc::new(store.clone()), Arc::new(SystemClock));
    let submitted = engine.submit(request()).await.unwrap();
    let claimed = engine.claim("tls", 1, None).await.unwrap().remove(0);
    assert_eq!(claimed.envelope.id, submitted.envelope().id);
    engine
        .settle(&claimed.envelope, claimed.token, Settlement::Success)
        .await
        .unwrap();
    let stored = store.get(submitted.envelope().id).await.unwrap();
    assert_eq!(stored.status, Status::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_a_wrong_host_name_and_plain_redis_are_refused() {
    if !common::have_redis_binaries() {
        eprintln!("skipping: redis-server is not installed");
        return;
    }
    let redis = TlsRedis::start(false);
    works(&redis.url("rediss", "localhost", &format!("tls_ca={}", redis.ca())))
        .await
        .unwrap();
    let other_ca = redis.pki.other_ca.display().to_string();
    let err = works(&redis.url("rediss", "localhost", &format!("tls_ca={other_ca}")))
        .await
        .unwrap_err();
    assert!(err.starts_with("STORE_UNAVAILABLE"), "{err}");
    assert!(err.contains("UnknownIssuer"), "{err}");
    // The certificate names localhost only.
    let err = works(&redis.url("rediss", "127.0.0.1", &format!("tls_ca={}", redis.ca())))
        .await
        .unwrap_err();
    assert!(err.contains("not valid for name"), "{err}");
    // The system's roots do not hold the test CA.
    let err = works(&redis.url("rediss", "localhost", ""))
        .await
        .unwrap_err();
    assert!(err.starts_with("STORE_UNAVAILABLE"), "{err}");
    // Clear text to the TLS port gets no answer a client could use.
    let err = works(&redis.url("redis", "localhost", ""))
        .await
        .unwrap_err();
    assert!(err.starts_with("STORE_UNAVAILABLE"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented_with_tls_cert_and_tls_key() {
    if !common::have_redis_binaries() {
        eprintln!("skipping: redis-server is not installed");
        return;
    }
    let redis = TlsRedis::start(true);
    let ca = redis.ca();
    let err = works(&redis.url("rediss", "localhost", &format!("tls_ca={ca}")))
        .await
        .unwrap_err();
    assert!(err.starts_with("STORE_UNAVAILABLE"), "{err}");
    let with_cert = format!(
        "tls_ca={ca}&tls_cert={}&tls_key={}",
        redis.pki.client_cert.display(),
        redis.pki.client_key.display()
    );
    works(&redis.url("rediss", "localhost", &with_cert))
        .await
        .unwrap();
}

#[test]
fn unusable_tls_files_are_refused_when_the_url_is_parsed() {
    let pki = TestPki::new(&["localhost"]).unwrap();
    let bad_key = format!(
        "rediss://localhost:1/?tls_ca={}&tls_cert={}&tls_key={}",
        pki.ca.display(),
        pki.client_cert.display(),
        pki.ca.display()
    );
    let err = RedisStore::from_url(&bad_key).err().unwrap();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    assert!(err.to_string().contains("TLS_BAD_PEM"), "{err}");
}
