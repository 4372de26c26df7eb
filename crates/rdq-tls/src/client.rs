//! Client-side TLS for the stores: a `rustls::ClientConfig` built from a
//! [`ClientTls`] description (which roots, how much to verify, an optional
//! client certificate, a server-name override), and a [`Connector`] that
//! runs the handshake over any tokio stream.
//!
//! **Roots.** [`Roots::System`] reads the operating system's trust store
//! with `rustls-native-certs` (on Linux the distribution's bundle, or the
//! files `SSL_CERT_FILE` / `SSL_CERT_DIR` name), once per process. System
//! roots rather than a bundle compiled in (`webpki-roots`): the CAs an
//! operator adds to the machine (a company CA, a cloud provider's database
//! CA) are trusted without rebuilding rdq, and the distribution's updates
//! (a distrusted CA) apply. [`Roots::CaFile`] trusts exactly the
//! certificates of one PEM file, nothing else.
//!
//! **Verification.** [`Verification::Full`] (chain and name) is the default;
//! [`Verification::ChainOnly`] and [`Verification::None`] exist for
//! PostgreSQL's `sslmode=verify-ca` and `sslmode=require`, whose meaning rdq
//! keeps (`docs/stores/postgres.md`).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite};

pub use tokio_rustls::client::TlsStream;

use crate::{TlsError, pem, provider};

/// Which certificates a server's chain must lead to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Roots {
    /// The operating system's trusted roots (see the module docs).
    #[default]
    System,
    /// Only the certificates of this PEM file (a CA or a bundle).
    CaFile(PathBuf),
}

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verification {
    /// The chain leads to a trusted root and the certificate names the host
    /// connected to (or [`ClientTls::server_name`]).
    #[default]
    Full,
    /// The chain leads to a trusted root; the name is not checked
    /// (PostgreSQL's `verify-ca`).
    ChainOnly,
    /// No certificate check: encryption against eavesdroppers only, not
    /// against an impostor (PostgreSQL's `require` without a root
    /// certificate). The handshake's signature is still checked, so the
    /// peer holds the key of the certificate it showed.
    None,
}

/// A client certificate (chain, leaf first) and its private key, both PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The PEM file of the certificate chain.
    pub certificate: PathBuf,
    /// The PEM file of the private key (PKCS#8, PKCS#1 or SEC1, unencrypted).
    pub key: PathBuf,
}

/// What a store's TLS connection should look like; [`ClientTls::connector`] builds it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientTls {
    /// The roots the server's chain must lead to.
    pub roots: Roots,
    /// How much of the server's certificate is checked.
    pub verification: Verification,
    /// A certificate to present when the server asks for one.
    pub identity: Option<ClientIdentity>,
    /// The name the server's certificate must carry (and the SNI sent),
    /// instead of the host connected to: for connecting by IP address, or
    /// through a tunnel, to a server whose certificate names its DNS name.
    pub server_name: Option<String>,
    /// ALPN protocols offered, most preferred first (none by default).
    pub alpn: Vec<Vec<u8>>,
    /// Send the server name (SNI) in the handshake (default `true`; never
    /// sent for an IP address).
    pub sni: bool,
}

impl Default for ClientTls {
    fn default() -> Self {
        Self {
            roots: Roots::System,
            verification: Verification::Full,
            identity: None,
            server_name: None,
            alpn: Vec::new(),
            sni: true,
        }
    }
}

impl ClientTls {
    /// System roots, full verification, no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// The rustls configuration: reads the CA and identity files now, so a
    /// bad file is refused before anything connects.
    pub fn config(&self) -> Result<ClientConfig, TlsError> {
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match self.verification {
            Verification::None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerification(provider))),
            Verification::Full | Verification::ChainOnly => {
                let roots = Arc::new(self.root_store()?);
                let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| TlsError::Config(e.to_string()))?;
                if self.verification == Verification::Full {
                    builder.with_webpki_verifier(webpki)
                } else {
                    builder
                        .dangerous()
                        .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki)))
                }
            }
        };
        let mut config = match &self.identity {
            None => builder.with_no_client_auth(),
            Some(identity) => {
                let chain = pem::load_certificates(&identity.certificate)?;
                let key = pem::load_private_key(&identity.key)?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    TlsError::BadIdentity(format!(
                        "{} with {}: {e}",
                        identity.certificate.display(),
                        identity.key.display()
                    ))
                })?
            }
        };
        config.alpn_protocols.clone_from(&self.alpn);
        config.enable_sni = self.sni;
        Ok(config)
    }

    /// A connector for this configuration (see [`ClientTls::config`]).
    pub fn connector(&self) -> Result<Connector, TlsError> {
        let server_name = self
            .server_name
            .as_deref()
            .map(parse_server_name)
            .transpose()?;
        Ok(Connector {
            config: Arc::new(self.config()?),
            server_name,
        })
    }

    fn root_store(&self) -> Result<RootCertStore, TlsError> {
        match &self.roots {
            Roots::CaFile(path) => pem::load_root_store(path),
            Roots::System => system_roots(),
        }
    }
}

/// The operating system's roots, read once per process.
fn system_roots() -> Result<RootCertStore, TlsError> {
    static ROOTS: OnceLock<Result<RootCertStore, String>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::debug!(%error, "skipped part of the system's trust store");
            }
            let mut roots = RootCertStore::empty();
            let (added, ignored) = roots.add_parsable_certificates(found.certs);
            if ignored > 0 {
                tracing::debug!(ignored, "skipped unparsable system root certificates");
            }
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map_or_else(|| "none found".to_owned(), ToString::to_string);
                return Err(format!(
                    "no trusted root certificate in the system's store ({why}); name a CA file instead"
                ));
            }
            Ok(roots)
        })
        .clone()
        .map_err(TlsError::NoSystemRoots)
}

/// A host name or IP address (IPv6 with or without brackets) as rustls wants it.
pub fn parse_server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    ServerName::try_from(bare.to_owned()).map_err(|_| TlsError::BadServerName(host.to_owned()))
}

/// Runs TLS handshakes for one [`ClientTls`]: cheap to clone, shared by
/// every connection of a store.
#[derive(Clone)]
pub struct Connector {
    config: Arc<ClientConfig>,
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl Connector {
    /// The rustls configuration handshakes use.
    pub fn config(&self) -> &Arc<ClientConfig> {
        &self.config
    }

    /// The name the server's certificate is checked against when connecting
    /// to `host`: the override if one was given, else `host` itself.
    pub fn server_name(&self, host: &str) -> Result<ServerName<'static>, TlsError> {
        match &self.server_name {
            Some(name) => Ok(name.clone()),
            None => parse_server_name(host),
        }
    }

    /// The TLS handshake over `stream`, connected to `host`. A refused
    /// certificate is an `InvalidData` I/O error whose message says why
    /// (`invalid peer certificate: UnknownIssuer`, `certificate not valid for name …`).
    pub async fn connect<S>(&self, host: &str, stream: S) -> std::io::Result<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let name = self
            .server_name(host)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        tokio_rustls::TlsConnector::from(Arc::clone(&self.config))
            .connect(name, stream)
            .await
    }
}

/// [`Verification::ChainOnly`]: webpki's verdict, except that a certificate
/// for another name passes. webpki checks the chain (signatures, validity,
/// usage, revocation) before the name, so a name error means the chain passed.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// [`Verification::None`]: any certificate, but a valid handshake signature.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn server_names_accept_dns_names_and_ip_addresses() {
        assert!(matches!(
            parse_server_name("db.internal"),
            Ok(ServerName::DnsName(_))
        ));
        assert!(matches!(
            parse_server_name("127.0.0.1"),
            Ok(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            parse_server_name("[::1]"),
            Ok(ServerName::IpAddress(_))
        ));
        assert_eq!(
            parse_server_name("not a name!").unwrap_err().code(),
            "TLS_BAD_SERVER_NAME"
        );
    }

    #[test]
    fn a_missing_ca_file_is_refused_before_connecting() {
        let tls = ClientTls {
            roots: Roots::CaFile("/nonexistent/ca.pem".into()),
            ..ClientTls::new()
        };
        assert_eq!(tls.connector().unwrap_err().code(), "TLS_FILE_UNREADABLE");
    }

    #[test]
    fn no_verification_needs_no_roots() {
        let tls = ClientTls {
            roots: Roots::CaFile("/nonexistent/ca.pem".into()),
            verification: Verification::None,
            ..ClientTls::new()
        };
        assert!(tls.connector().is_ok());
    }
}
