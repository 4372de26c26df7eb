//! `amqps://` against the real broker behind a TLS-terminating proxy the
//! test starts (`rdq_tls::testing::tls_proxy`: rustls on the certificates of
//! a fresh test CA, naming `localhost` only, forwarding to the local
//! RabbitMQ on 5672), and what the store accepts and refuses
//! (`docs/stores/rabbitmq.md`, "TLS").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use rdq_engine::{Engine, Settlement, SubmitRequest, SystemClock};
use rdq_store_rabbitmq::{RabbitOptions, RabbitStore};
use rdq_tls::testing::{TestPki, tls_proxy};

/// The local broker's AMQP port, from the test URL.
fn upstream() -> SocketAddr {
    let url = url::Url::parse(&common::amqp_url()).unwrap();
    let host = url.host_str().unwrap().to_owned();
    let port = url.port().unwrap_or(5672);
    std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
        .unwrap()
        .next()
        .unwrap()
}

/// A TLS proxy in front of the broker; its address.
async fn proxy(pki: &TestPki, require_client_cert: bool) -> SocketAddr {
    let config = pki.server_config(require_client_cert).unwrap();
    let (addr, _task) = tls_proxy(config, upstream()).await.unwrap();
    addr
}

fn url(scheme: &str, host: &str, proxy: SocketAddr, params: &str) -> String {
    format!(
        "{scheme}://guest:guest@{host}:{}/%2f?reconnect_max_attempts=0&namespace=tls.{}.&{params}",
        proxy.port(),
        common::unique()
    )
}

/// Connects (the first dial); the error text if it fails.
async fn connects(url: &str) -> Result<(), String> {
    let store = RabbitStore::connect(url).await.map_err(|e| e.to_string())?;
    store.close();
    Ok(())
}

fn task() -> SubmitRequest {
    SubmitRequest {
        queue: "tls".into(),
        handler_ref: "tls.noop".into(),
        payload: br#"{"n":1}"#.to_vec(),
        payload_content_type: "application/json".into(),
        ..SubmitRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_claim_and_settle_run_over_amqps() {
    let pki = TestPki::new(&["localhost"]).unwrap();
    let proxy = proxy(&pki, false).await;
    let url = url(
        "amqps",
        "localhost",
        proxy,
        &format!("tls_ca={}", pki.ca.display()),
    );
    let options = RabbitOptions::from_url(&url).unwrap();
    assert!(options.tls.is_some());
    let store = RabbitStore::with_options(options);
    let engine = Engine::new(Arc::new(store.clone()), Arc::new(SystemClock));
    let outcome = async {
        let submitted = engine.submit(task()).await.unwrap();
        let claimed = engine.claim("tls", 1, None).await.unwrap().remove(0);
        assert_eq!(claimed.envelope.id, submitted.envelope().id);
        engine
            .settle(&claimed.envelope, claimed.token, Settlement::Success)
            .await
            .unwrap();
    };
    outcome.await;
    assert!(store.is_connected());
    store
        .delete_broker_queues(&store.declared_queues())
        .await
        .unwrap();
    store.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_a_wrong_host_name_and_plain_amqp_are_refused() {
    let pki = TestPki::new(&["localhost"]).unwrap();
    let proxy = proxy(&pki, false).await;
    let ca = format!("tls_ca={}", pki.ca.display());
    connects(&url("amqps", "localhost", proxy, &ca))
        .await
        .unwrap();

    let other = format!("tls_ca={}", pki.other_ca.display());
    let err = connects(&url("amqps", "localhost", proxy, &other))
        .await
        .unwrap_err();
    assert!(err.starts_with("STORE_UNAVAILABLE"), "{err}");
    assert!(err.contains("UnknownIssuer"), "{err}");

    // The certificate names localhost only…
    let err = connects(&url("amqps", "127.0.0.1", proxy, &ca))
        .await
        .unwrap_err();
    assert!(err.contains("not valid for name"), "{err}");
    // …unless tls_server_name says which name to expect.
    let named = format!("{ca}&tls_server_name=localhost");
    connects(&url("amqps", "127.0.0.1", proxy, &named))
        .await
        .unwrap();

    // The system's roots do not hold the test CA.
    assert!(
        connects(&url("amqps", "localhost", proxy, ""))
            .await
            .is_err()
    );
    // Clear-text AMQP to the TLS port never gets a broker to talk to.
    let err = connects(&url("amqp", "localhost", proxy, ""))
        .await
        .unwrap_err();
    assert!(err.starts_with("STORE_UNAVAILABLE"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented_with_tls_cert_and_tls_key() {
    let pki = TestPki::new(&["localhost"]).unwrap();
    let proxy = proxy(&pki, true).await;
    let ca = format!("tls_ca={}", pki.ca.display());
    assert!(
        connects(&url("amqps", "localhost", proxy, &ca))
            .await
            .is_err()
    );
    let with_cert = format!(
        "{ca}&tls_cert={}&tls_key={}",
        pki.client_cert.display(),
        pki.client_key.display()
    );
    connects(&url("amqps", "localhost", proxy, &with_cert))
        .await
        .unwrap();
}

#[test]
fn unusable_tls_files_are_refused_when_the_url_is_parsed() {
    let pki = TestPki::new(&["localhost"]).unwrap();
    let bad_key = format!(
        "amqps://localhost/%2f?tls_cert={}&tls_key={}",
        pki.client_cert.display(),
        pki.server_key.display()
    );
    let err = RabbitOptions::from_url(&bad_key).unwrap_err();
    assert!(err.to_string().contains("TLS_BAD_IDENTITY"), "{err}");
}
