//! The client configurations against a real TLS server (a tokio-rustls
//! echo server on the certificates of a fresh `TestPki`): what each
//! verification mode accepts and refuses, client certificates, and the
//! server-name override.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::Arc;

use rdq_tls::client::{ClientIdentity, ClientTls, Roots, Verification};
use rdq_tls::testing::TestPki;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An echo server over TLS on a free loopback port.
async fn echo_server(pki: &TestPki, require_client_cert: bool) -> SocketAddr {
    let acceptor =
        tokio_rustls::TlsAcceptor::from(Arc::new(pki.server_config(require_client_cert).unwrap()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(socket).await {
                    let mut buf = [0u8; 4];
                    if tls.read_exact(&mut buf).await.is_ok() {
                        let _ = tls.write_all(&buf).await;
                        let _ = tls.flush().await;
                    }
                }
            });
        }
    });
    addr
}

/// Connects as `host` and exchanges four bytes; the error text on failure.
async fn round_trip(tls: &ClientTls, addr: SocketAddr, host: &str) -> Result<(), String> {
    let connector = tls.connector().map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let mut stream = connector
        .connect(host, tcp)
        .await
        .map_err(|e| e.to_string())?;
    stream.write_all(b"ping").await.map_err(|e| e.to_string())?;
    stream.flush().await.map_err(|e| e.to_string())?;
    let mut buf = [0u8; 4];
    // TLS 1.3 reports a refused client certificate on the first read.
    stream
        .read_exact(&mut buf)
        .await
        .map_err(|e| e.to_string())?;
    assert_eq!(&buf, b"ping");
    Ok(())
}

fn with(roots: Roots, verification: Verification) -> ClientTls {
    let mut tls = ClientTls::new();
    tls.roots = roots;
    tls.verification = verification;
    tls
}

#[tokio::test]
async fn full_verification_accepts_the_right_ca_and_name_only() {
    let pki = TestPki::new(&["localhost", "127.0.0.1"]).unwrap();
    let addr = echo_server(&pki, false).await;
    let good = with(Roots::CaFile(pki.ca.clone()), Verification::Full);
    round_trip(&good, addr, "localhost").await.unwrap();
    round_trip(&good, addr, "127.0.0.1").await.unwrap();

    let wrong_name = round_trip(&good, addr, "db.example").await.unwrap_err();
    assert!(wrong_name.contains("not valid for name"), "{wrong_name}");

    let wrong_ca = with(Roots::CaFile(pki.other_ca.clone()), Verification::Full);
    let err = round_trip(&wrong_ca, addr, "localhost").await.unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");
}

#[tokio::test]
async fn chain_only_ignores_the_name_but_not_the_ca() {
    let pki = TestPki::new(&["localhost"]).unwrap();
    let addr = echo_server(&pki, false).await;
    let chain = with(Roots::CaFile(pki.ca.clone()), Verification::ChainOnly);
    round_trip(&chain, addr, "db.example").await.unwrap();

    let wrong_ca = with(Roots::CaFile(pki.other_ca.clone()), Verification::ChainOnly);
    let err = round_trip(&wrong_ca, addr, "localhost").await.unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");
}

#[tokio::test]
async fn no_verification_accepts_any_certificate() {
    let pki = TestPki::new(&["localhost"]).unwrap();
    let addr = echo_server(&pki, false).await;
    let none = with(Roots::CaFile(pki.other_ca.clone()), Verification::None);
    round_trip(&none, addr, "db.example").await.unwrap();
}

#[tokio::test]
async fn a_server_name_override_is_what_the_certificate_must_name() {
    let pki = TestPki::new(&["db.internal"]).unwrap();
    let addr = echo_server(&pki, false).await;
    let mut tls = with(Roots::CaFile(pki.ca.clone()), Verification::Full);
    let err = round_trip(&tls, addr, "127.0.0.1").await.unwrap_err();
    assert!(err.contains("not valid for name"), "{err}");
    tls.server_name = Some("db.internal".into());
    round_trip(&tls, addr, "127.0.0.1").await.unwrap();
}

#[tokio::test]
async fn a_client_certificate_is_presented_when_configured() {
    let pki = TestPki::new(&["localhost"]).unwrap();
    let addr = echo_server(&pki, true).await;
    let mut tls = with(Roots::CaFile(pki.ca.clone()), Verification::Full);
    assert!(round_trip(&tls, addr, "localhost").await.is_err());
    tls.identity = Some(ClientIdentity {
        certificate: pki.client_cert.clone(),
        key: pki.client_key.clone(),
    });
    round_trip(&tls, addr, "localhost").await.unwrap();
}

#[test]
fn a_key_that_is_not_a_key_is_refused_with_a_code() {
    let pki = TestPki::new(&["localhost"]).unwrap();
    let mut tls = with(Roots::CaFile(pki.ca.clone()), Verification::Full);
    tls.identity = Some(ClientIdentity {
        certificate: pki.client_cert.clone(),
        key: pki.client_cert.clone(),
    });
    assert_eq!(tls.connector().unwrap_err().code(), "TLS_BAD_PEM");
    tls.identity = Some(ClientIdentity {
        certificate: pki.client_cert.clone(),
        key: pki.server_key.clone(),
    });
    let err = tls.connector().unwrap_err();
    assert_eq!(err.code(), "TLS_BAD_IDENTITY", "{err}");
}
