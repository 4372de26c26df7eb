//! TLS to PostgreSQL with libpq's settings and libpq's meaning
//! (`docs/stores/postgres.md`, "TLS"), on rdq's one TLS stack (`rdq-tls`).
//!
//! The URL carries libpq's parameters: `sslmode`, `sslrootcert`, `sslcert`,
//! `sslkey`, `sslsni`. They are taken out of the URL here, before the rest
//! goes to `tokio-postgres` (which knows only `disable`, `prefer` and
//! `require`), and become a [`PostgresTls`]: the `tokio-postgres` mode to ask
//! for, and a [`Connector`] whose verification is libpq's for the mode:
//!
//! | `sslmode` | TLS | certificate check |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (default) | if the server offers it; a failed handshake retries in clear | the chain, if a root certificate is available; else none |
//! | `require` | always | the chain, if a root certificate is available; else none |
//! | `verify-ca` | always | the chain (a root certificate is required) |
//! | `verify-full` | always | the chain and the host name (a root certificate is required) |
//!
//! "A root certificate is available": `sslrootcert` names one, or libpq's
//! default `~/.postgresql/root.crt` exists. `sslrootcert=system` means the
//! operating system's roots and, as in libpq, makes `verify-full` the default
//! and anything weaker an error.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use rdq_engine::EngineError;
use rdq_tls::client::{ClientIdentity, ClientTls, Connector, Roots, Verification};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::SslMode as WireMode;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_postgres::{Client, Config, Connection, Socket};

use crate::error::{Failure, classify};

/// libpq's `sslmode`, less `allow` (see the module docs for each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, else clear text (libpq's default).
    #[default]
    Prefer,
    /// TLS always; the certificate is checked only against a root
    /// certificate when one is available.
    Require,
    /// TLS always; the chain must lead to the root certificate.
    VerifyCa,
    /// TLS always; the chain must lead to the root certificate and the
    /// certificate must name the host.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, EngineError> {
        Ok(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            "allow" => {
                return Err(invalid(
                    "sslmode=allow is not supported: use prefer (TLS when offered) or disable",
                ));
            }
            other => {
                return Err(invalid(format!(
                    "sslmode={other:?} is not one of disable, prefer, require, verify-ca, verify-full"
                )));
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

fn invalid(why: impl Into<String>) -> EngineError {
    EngineError::InvalidArgument(why.into())
}

/// The TLS parameters of a URL, as given (before libpq's defaults apply).
#[derive(Debug, Default)]
pub(crate) struct SslParams {
    mode: Option<SslMode>,
    rootcert: Option<String>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    sni: Option<bool>,
}

impl SslParams {
    /// Takes `key=value` if it is a TLS parameter (`true`); refuses the TLS
    /// parameters libpq has and rdq does not.
    pub(crate) fn take(&mut self, key: &str, value: &str) -> Result<bool, EngineError> {
        match key {
            "sslmode" => self.mode = Some(SslMode::parse(value)?),
            "sslrootcert" => self.rootcert = Some(value.to_owned()),
            "sslcert" => self.cert = Some(PathBuf::from(value)),
            "sslkey" => self.key = Some(PathBuf::from(value)),
            "sslsni" => {
                self.sni = Some(match value {
                    "1" => true,
                    "0" => false,
                    _ => return Err(invalid(format!("sslsni must be 0 or 1, not {value:?}"))),
                });
            }
            // Passed on: tokio-postgres implements direct TLS negotiation.
            "sslnegotiation" => return Ok(false),
            "sslpassword"
            | "sslcrl"
            | "sslcrldir"
            | "sslcertmode"
            | "sslcompression"
            | "ssl_min_protocol_version"
            | "ssl_max_protocol_version"
            | "requiressl" => {
                return Err(invalid(format!(
                    "{key} is not supported by rdq's PostgreSQL store (see docs/stores/postgres.md)"
                )));
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// How the store's connections use TLS: built from the URL by
/// [`PostgresOptions::from_url`](crate::PostgresOptions::from_url).
#[derive(Clone, Debug)]
pub struct PostgresTls {
    mode: SslMode,
    /// What the connector checks (after libpq's root-certificate rule).
    verification: Option<Verification>,
    connector: Option<Connector>,
}

impl Default for PostgresTls {
    /// No TLS (`sslmode=disable`).
    fn default() -> Self {
        Self {
            mode: SslMode::Disable,
            verification: None,
            connector: None,
        }
    }
}

impl PostgresTls {
    /// The `sslmode` in effect (after libpq's defaults).
    pub fn mode(&self) -> SslMode {
        self.mode
    }

    /// What the server's certificate is checked for under libpq's rules
    /// (`verify-ca`, or `require` with a root certificate: the chain only);
    /// `None` with `sslmode=disable`.
    pub fn verification(&self) -> Option<Verification> {
        self.verification
    }

    /// libpq's rules applied to the URL's parameters, with `home` standing
    /// for the user's home directory (libpq's default files live in
    /// `home/.postgresql/`). Reads the certificate files now, so a missing
    /// or malformed one is refused before anything connects.
    pub(crate) fn resolve(params: SslParams, home: Option<&Path>) -> Result<Self, EngineError> {
        let system = params.rootcert.as_deref() == Some("system");
        let mode = match params.mode {
            Some(mode) if system && mode != SslMode::VerifyFull => {
                return Err(invalid(format!(
                    "sslmode={} may not be used with sslrootcert=system: use verify-full (libpq's rule)",
                    mode.name()
                )));
            }
            Some(mode) => mode,
            None if system => SslMode::VerifyFull,
            None => SslMode::Prefer,
        };
        if mode == SslMode::Disable {
            return Ok(Self::default());
        }
        let default_file = |name: &str| {
            home.map(|h| h.join(".postgresql").join(name))
                .filter(|p| p.is_file())
        };
        let roots = match params.rootcert {
            Some(_) if system => Some(Roots::System),
            Some(file) => Some(Roots::CaFile(PathBuf::from(file))),
            None => default_file("root.crt").map(Roots::CaFile),
        };
        let verification = match (mode, &roots) {
            (SslMode::VerifyFull, Some(_)) => Verification::Full,
            (SslMode::VerifyCa, Some(_)) => Verification::ChainOnly,
            (SslMode::VerifyFull | SslMode::VerifyCa, None) => {
                return Err(invalid(format!(
                    "sslmode={} needs a root certificate: name its file with sslrootcert=… \
                     (or sslrootcert=system for the system's roots); ~/.postgresql/root.crt \
                     does not exist",
                    mode.name()
                )));
            }
            // libpq: with a root certificate, require (and prefer) check the chain.
            (_, Some(_)) => Verification::ChainOnly,
            (_, None) => Verification::None,
        };
        let identity = match (params.cert, params.key) {
            (Some(certificate), key) => {
                let key = key.or_else(|| default_file("postgresql.key")).ok_or_else(|| {
                    invalid("sslcert needs its key: name it with sslkey=… (~/.postgresql/postgresql.key does not exist)")
                })?;
                Some(ClientIdentity { certificate, key })
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "sslkey needs its certificate: name it with sslcert=…",
                ));
            }
            (None, None) => default_file("postgresql.crt")
                .zip(default_file("postgresql.key"))
                .map(|(certificate, key)| ClientIdentity { certificate, key }),
        };
        let mut tls = ClientTls::new();
        tls.roots = roots.unwrap_or_default();
        tls.verification = verification;
        tls.identity = identity;
        tls.sni = params.sni.unwrap_or(true);
        // What PostgreSQL 17 expects with sslnegotiation=direct; ignored before.
        tls.alpn = vec![b"postgresql".to_vec()];
        let connector = tls
            .connector()
            .map_err(|e| invalid(format!("PostgreSQL TLS settings: {e}")))?;
        Ok(Self {
            mode,
            verification: Some(verification),
            connector: Some(connector),
        })
    }

    /// The mode `tokio-postgres` negotiates with: whether to ask for TLS
    /// and whether a server without it is acceptable.
    pub(crate) fn wire_mode(&self) -> WireMode {
        match self.mode {
            SslMode::Disable => WireMode::Disable,
            SslMode::Prefer => WireMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireMode::Require,
        }
    }

    fn make(&self) -> MakeRustls {
        MakeRustls(self.connector.clone())
    }
}

/// A connection of the store, TLS or not.
pub(crate) type PgConnection = Connection<Socket, PgTlsStream>;

/// Opens one connection to `config` with `tls`. Under `prefer`, a failed
/// handshake retries without TLS, as libpq does. A refused certificate, or a
/// server without TLS when TLS is required, is [`Failure::Fatal`]: waiting
/// would not change the answer.
pub(crate) async fn connect(
    config: &Config,
    tls: &PostgresTls,
) -> Result<(Client, PgConnection), Failure> {
    match config.connect(tls.make()).await {
        Ok(pair) => Ok(pair),
        Err(e) if tls.mode == SslMode::Prefer && handshake_failure(&e).is_some() => {
            tracing::debug!(error = %e, "TLS handshake failed under sslmode=prefer; connecting without TLS");
            let mut plain = config.clone();
            plain.ssl_mode(WireMode::Disable);
            plain.connect(tls.make()).await.map_err(|e| classify(&e))
        }
        Err(e) => Err(classify_tls(&e, tls.mode)),
    }
}

/// The handshake error under `e`, if the TLS handshake is what failed.
fn handshake_failure(e: &tokio_postgres::Error) -> Option<&HandshakeError> {
    std::error::Error::source(e).and_then(|s| s.downcast_ref::<HandshakeError>())
}

fn classify_tls(e: &tokio_postgres::Error, mode: SslMode) -> Failure {
    if let Some(handshake) = handshake_failure(e) {
        // rustls reports a refused certificate, a fatal alert or a protocol
        // error as InvalidData; a reset or EOF mid-handshake may be a restart.
        return if handshake.0.kind() == io::ErrorKind::InvalidData {
            Failure::Fatal(format!(
                "TLS handshake with PostgreSQL refused: {}",
                handshake.0
            ))
        } else {
            Failure::Connection(e.to_string())
        };
    }
    // tokio-postgres's words when the server answers TLS negotiation with "no".
    let no_tls = std::error::Error::source(e)
        .is_some_and(|s| s.to_string() == "server does not support TLS");
    if no_tls {
        return Failure::Fatal(format!(
            "sslmode={} but the PostgreSQL server does not support TLS",
            mode.name()
        ));
    }
    classify(e)
}

/// A failed TLS handshake (what [`connect`] looks for under `prefer`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct HandshakeError(io::Error);

/// `tokio-postgres`'s `MakeTlsConnect` over rdq's connector; `None` only
/// with `sslmode=disable`, where it is never asked to connect.
pub(crate) struct MakeRustls(Option<Connector>);

impl MakeTlsConnect<Socket> for MakeRustls {
    type Stream = PgTlsStream;
    type TlsConnect = RustlsConnect;
    type Error = HandshakeError;

    fn make_tls_connect(&mut self, host: &str) -> Result<RustlsConnect, HandshakeError> {
        Ok(RustlsConnect {
            connector: self.0.clone(),
            host: host.to_owned(),
        })
    }
}

/// One connection's handshake, to `host`.
pub(crate) struct RustlsConnect {
    connector: Option<Connector>,
    host: String,
}

impl TlsConnect<Socket> for RustlsConnect {
    type Stream = PgTlsStream;
    type Error = HandshakeError;
    type Future = Pin<Box<dyn Future<Output = Result<PgTlsStream, HandshakeError>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let connector = self.connector.ok_or_else(|| {
                HandshakeError(io::Error::other("TLS is disabled (sslmode=disable)"))
            })?;
            connector
                .connect(&self.host, stream)
                .await
                .map(PgTlsStream)
                .map_err(HandshakeError)
        })
    }
}

/// A TLS session with PostgreSQL. It offers no channel binding, so SCRAM
/// authenticates without `-PLUS` (as libpq does with `channel_binding=prefer`
/// when it has none to offer).
pub(crate) struct PgTlsStream(rdq_tls::client::TlsStream<Socket>);

impl TlsStream for PgTlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for PgTlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for PgTlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn params(pairs: &[(&str, &str)]) -> SslParams {
        let mut p = SslParams::default();
        for (k, v) in pairs {
            assert!(p.take(k, v).unwrap(), "{k}");
        }
        p
    }

    #[test]
    fn prefer_is_the_default_and_verifies_nothing_without_a_root_certificate() {
        let tls = PostgresTls::resolve(SslParams::default(), None).unwrap();
        assert_eq!(tls.mode(), SslMode::Prefer);
        assert_eq!(tls.wire_mode(), WireMode::Prefer);
    }

    #[test]
    fn verify_modes_without_a_root_certificate_are_refused() {
        for mode in ["verify-ca", "verify-full"] {
            let err = PostgresTls::resolve(params(&[("sslmode", mode)]), None).unwrap_err();
            assert_eq!(err.code(), "INVALID_ARGUMENT");
            assert!(err.to_string().contains("sslrootcert"), "{err}");
        }
    }

    #[test]
    fn sslrootcert_system_defaults_to_verify_full_and_refuses_weaker_modes() {
        let tls = PostgresTls::resolve(params(&[("sslrootcert", "system")]), None);
        // The machine may have no system roots; the mode is decided either way.
        if let Ok(tls) = tls {
            assert_eq!(tls.mode(), SslMode::VerifyFull);
        }
        let err = PostgresTls::resolve(
            params(&[("sslrootcert", "system"), ("sslmode", "require")]),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("verify-full"), "{err}");
    }

    #[test]
    fn unknown_modes_allow_and_unsupported_parameters_are_refused() {
        let mut p = SslParams::default();
        for (k, v) in [
            ("sslmode", "allow"),
            ("sslmode", "verify"),
            ("sslpassword", "x"),
            ("sslcrl", "/x"),
            ("sslsni", "yes"),
        ] {
            assert_eq!(
                p.take(k, v).unwrap_err().code(),
                "INVALID_ARGUMENT",
                "{k}={v}"
            );
        }
        assert!(!p.take("sslnegotiation", "direct").unwrap());
    }

    #[test]
    fn a_named_root_certificate_that_is_missing_is_refused() {
        let err = PostgresTls::resolve(
            params(&[
                ("sslmode", "require"),
                ("sslrootcert", "/nonexistent/root.crt"),
            ]),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("TLS_FILE_UNREADABLE"), "{err}");
    }

    #[test]
    fn a_key_without_a_certificate_is_refused() {
        let err = PostgresTls::resolve(
            params(&[("sslmode", "require"), ("sslkey", "/x.key")]),
            None,
        )
        .unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
    }

    #[test]
    fn libpqs_default_root_certificate_makes_require_and_prefer_check_the_chain() {
        let pki = rdq_tls::testing::TestPki::new(&["localhost"]).unwrap();
        let home = tempfile::tempdir().unwrap();
        let none = PostgresTls::resolve(params(&[("sslmode", "require")]), Some(home.path()));
        assert_eq!(none.unwrap().verification(), Some(Verification::None));
        std::fs::create_dir(home.path().join(".postgresql")).unwrap();
        std::fs::copy(&pki.ca, home.path().join(".postgresql/root.crt")).unwrap();
        for mode in ["require", "prefer"] {
            let tls = PostgresTls::resolve(params(&[("sslmode", mode)]), Some(home.path()));
            assert_eq!(
                tls.unwrap().verification(),
                Some(Verification::ChainOnly),
                "{mode}"
            );
        }
        let full = PostgresTls::resolve(params(&[("sslmode", "verify-full")]), Some(home.path()));
        assert_eq!(full.unwrap().verification(), Some(Verification::Full));
    }

    #[test]
    fn disable_ignores_the_other_settings() {
        let tls = PostgresTls::resolve(
            params(&[("sslmode", "disable"), ("sslrootcert", "/nonexistent")]),
            None,
        )
        .unwrap();
        assert_eq!(tls.wire_mode(), WireMode::Disable);
    }
}
