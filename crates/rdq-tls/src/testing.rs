//! Test certificates and a TLS-terminating proxy, for the stores' TLS tests
//! (feature `testing`; never in a release build).
//!
//! [`TestPki`] writes a fresh CA, a server certificate for the names given,
//! a client certificate and an unrelated second CA into a temporary
//! directory, as PEM files, so a test can start a real server
//! (PostgreSQL, `redis-server`, a proxy) on them and try each way a client
//! should accept or refuse it. [`tls_proxy`] puts TLS in front of a plain
//! TCP service (RabbitMQ on 5672) on a loopback port of its own.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use tokio::net::{TcpListener, TcpStream};

use crate::{pem, provider};

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// A throwaway PKI in a temporary directory (deleted on drop). Every path
/// names a PEM file; keys are unencrypted PKCS#8, mode 0600.
pub struct TestPki {
    dir: tempfile::TempDir,
    /// The CA that signed the server and client certificates.
    pub ca: PathBuf,
    /// A second CA that signed nothing here: the "wrong CA".
    pub other_ca: PathBuf,
    /// The server's certificate, for the names given to [`TestPki::new`].
    pub server_cert: PathBuf,
    /// The server's private key.
    pub server_key: PathBuf,
    /// A client certificate (CN `rdq-test-client`).
    pub client_cert: PathBuf,
    /// The client's private key.
    pub client_key: PathBuf,
}

impl TestPki {
    /// A new PKI whose server certificate names `server_names` (DNS names or
    /// IP addresses, e.g. `["localhost", "127.0.0.1"]`).
    pub fn new(server_names: &[&str]) -> io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("rdq-tls-").tempdir()?;
        let ca = new_ca("rdq test CA")?;
        let other_ca = new_ca("rdq unrelated CA")?;

        let names: Vec<String> = server_names.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(names).map_err(other)?;
        params.distinguished_name.push(
            DnType::CommonName,
            server_names.first().copied().unwrap_or("server"),
        );
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate().map_err(other)?;
        let server = params.signed_by(&server_key, &ca).map_err(other)?;

        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(other)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "rdq-test-client");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = KeyPair::generate().map_err(other)?;
        let client = params.signed_by(&client_key, &ca).map_err(other)?;

        let write = |name: &str, text: &str, secret: bool| -> io::Result<PathBuf> {
            let path = dir.path().join(name);
            std::fs::write(&path, text)?;
            if secret {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
            }
            Ok(path)
        };
        Ok(Self {
            ca: write("ca.pem", &ca.pem(), false)?,
            other_ca: write("other-ca.pem", &other_ca.pem(), false)?,
            server_cert: write("server.pem", &server.pem(), false)?,
            server_key: write("server.key", &server_key.serialize_pem(), true)?,
            client_cert: write("client.pem", &client.pem(), false)?,
            client_key: write("client.key", &client_key.serialize_pem(), true)?,
            dir,
        })
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A rustls server configuration on the server certificate; with
    /// `require_client_cert`, clients must present a certificate of this CA.
    pub fn server_config(&self, require_client_cert: bool) -> io::Result<ServerConfig> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(other)?;
        let builder = if require_client_cert {
            let roots = Arc::new(pem::load_root_store(&self.ca).map_err(other)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(other)?;
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        builder
            .with_single_cert(
                pem::load_certificates(&self.server_cert).map_err(other)?,
                pem::load_private_key(&self.server_key).map_err(other)?,
            )
            .map_err(other)
    }
}

fn new_ca(name: &str) -> io::Result<CertifiedIssuer<'static, KeyPair>> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(other)?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().map_err(other)?).map_err(other)
}

/// A TLS-terminating proxy on a free loopback port: every connection is
/// handshaken with `config` and its plaintext forwarded to `upstream`. Runs
/// until the returned task is aborted (or the runtime ends).
pub async fn tls_proxy(
    config: ServerConfig,
    upstream: SocketAddr,
) -> io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let task = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(socket).await else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    Ok((addr, task))
}
