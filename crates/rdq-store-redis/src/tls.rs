//! TLS to Redis (`rediss://`), through the `redis` crate's rustls support
//! (`docs/stores/redis.md`, "TLS").
//!
//! The URL's query names the files: `tls_ca` (the CA the server's chain
//! must lead to, instead of the system's roots), `tls_cert` and `tls_key`
//! (a client certificate, for `tls-auth-clients yes`). They are read and
//! checked here with rdq's TLS stack (`rdq-tls`), so a missing or
//! malformed file, or a key that does not match its certificate, is
//! refused when the URL is parsed; then their bytes go to the `redis` crate,
//! which does the handshakes. The server's certificate must name the host
//! of the URL: the `redis` crate offers no name override, and rdq does not
//! enable its `#insecure` mode.

use std::path::{Path, PathBuf};

use rdq_engine::EngineError;
use rdq_tls::client::{ClientIdentity, ClientTls, Roots};
use redis::cluster::ClusterClientBuilder;
use redis::{Client, ClientTlsConfig, RedisResult, TlsCertificates};

fn invalid(why: impl Into<String>) -> EngineError {
    EngineError::InvalidArgument(why.into())
}

/// The TLS parameters of a URL, as given.
#[derive(Debug, Default)]
pub(crate) struct TlsParams {
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

impl TlsParams {
    /// Takes `key=value` if it is a TLS parameter.
    pub(crate) fn take(&mut self, key: &str, value: &str) -> bool {
        let slot = match key {
            "tls_ca" => &mut self.ca,
            "tls_cert" => &mut self.cert,
            "tls_key" => &mut self.key,
            _ => return false,
        };
        *slot = Some(PathBuf::from(value));
        true
    }

    fn is_empty(&self) -> bool {
        self.ca.is_none() && self.cert.is_none() && self.key.is_none()
    }
}

/// Whether and how the store's connections use TLS.
#[derive(Clone, Debug, Default)]
pub struct RedisTls {
    /// `None` for `redis://`.
    certificates: Option<TlsCertificates>,
}

impl RedisTls {
    /// Whether connections use TLS (`rediss://`).
    pub fn enabled(&self) -> bool {
        self.certificates.is_some()
    }

    /// The settings for a `rediss://` URL (`tls`) or a `redis://` one,
    /// which takes no TLS parameter.
    pub(crate) fn resolve(tls: bool, params: TlsParams) -> Result<Self, EngineError> {
        if !tls {
            if params.is_empty() {
                return Ok(Self::default());
            }
            return Err(invalid(
                "tls_ca, tls_cert and tls_key apply to rediss:// URLs only",
            ));
        }
        let identity = match (params.cert, params.key) {
            (Some(certificate), Some(key)) => Some(ClientIdentity { certificate, key }),
            (None, None) => None,
            _ => return Err(invalid("tls_cert and tls_key go together")),
        };
        // Built once to check every file the way a handshake would use it.
        let mut check = ClientTls::new();
        check.roots = params.ca.clone().map_or(Roots::System, Roots::CaFile);
        check.identity.clone_from(&identity);
        if params.ca.is_some() || identity.is_some() {
            check
                .config()
                .map_err(|e| invalid(format!("Redis TLS settings: {e}")))?;
        }
        let client_tls = identity
            .map(|id| -> Result<ClientTlsConfig, EngineError> {
                Ok(ClientTlsConfig {
                    client_cert: read(&id.certificate)?,
                    client_key: read(&id.key)?,
                })
            })
            .transpose()?;
        let root_cert = params.ca.as_deref().map(read).transpose()?;
        Ok(Self {
            certificates: Some(TlsCertificates {
                client_tls,
                root_cert,
            }),
        })
    }

    /// A client of the node at `url`.
    pub(crate) fn client(&self, url: &str) -> RedisResult<Client> {
        match &self.certificates {
            Some(certificates) => Client::build_with_tls(url, certificates.clone()),
            None => Client::open(url),
        }
    }

    /// `builder` with this TLS configuration for every cluster node.
    pub(crate) fn cluster(&self, builder: ClusterClientBuilder) -> ClusterClientBuilder {
        match &self.certificates {
            Some(certificates) => builder.certs(certificates.clone()),
            None => builder,
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, EngineError> {
    std::fs::read(path).map_err(|e| {
        invalid(format!(
            "Redis TLS settings: TLS_FILE_UNREADABLE: cannot read {}: {e}",
            path.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn params(pairs: &[(&str, &str)]) -> TlsParams {
        let mut p = TlsParams::default();
        for (k, v) in pairs {
            assert!(p.take(k, v));
        }
        p
    }

    #[test]
    fn tls_parameters_need_a_rediss_url() {
        let err = RedisTls::resolve(false, params(&[("tls_ca", "/ca.pem")])).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        assert!(
            !RedisTls::resolve(false, TlsParams::default())
                .unwrap()
                .enabled()
        );
    }

    #[test]
    fn missing_files_and_half_identities_are_refused() {
        let err =
            RedisTls::resolve(true, params(&[("tls_ca", "/nonexistent/ca.pem")])).unwrap_err();
        assert!(err.to_string().contains("TLS_FILE_UNREADABLE"), "{err}");
        let err = RedisTls::resolve(true, params(&[("tls_cert", "/c.pem")])).unwrap_err();
        assert!(err.to_string().contains("together"), "{err}");
    }
}
