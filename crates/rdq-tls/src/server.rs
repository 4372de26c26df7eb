//! The listener's TLS: the server configuration of `rdq serve` (see `docs/deployment.md`).
//!
//! A certificate chain and its key from PEM files, TLS 1.2 and 1.3 on the
//! aws-lc-rs provider, ALPN `h2` then `http/1.1` (so HTTP/2 and gRPC share
//! the port with HTTP/1.1), and optionally client-certificate
//! authentication: with a client CA file, a client must present a
//! certificate that chains to one of its certificates or the handshake fails.

use std::path::Path;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;

use crate::{TlsError, pem, provider};

/// The files of the listener's TLS configuration.
#[derive(Debug, Clone, Copy)]
pub struct ServerTlsFiles<'a> {
    /// The certificate chain, PEM, leaf first.
    pub cert: &'a Path,
    /// The private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: &'a Path,
    /// When given: require client certificates issued by these CAs (PEM).
    pub client_ca: Option<&'a Path>,
}

/// Builds the listener's `rustls::ServerConfig` from PEM files (see the
/// module documentation). Every file error names its file.
pub fn server_config(files: ServerTlsFiles<'_>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = pem::load_certificates(files.cert)?;
    let key = pem::load_private_key(files.key)?;
    let provider = provider();
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let roots = pem::load_root_store(path)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::Config(format!("client_ca {}: {e}", path.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        TlsError::BadIdentity(format!(
            "{} and {}: {e}",
            files.cert.display(),
            files.key.display()
        ))
    })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn missing_and_empty_files_are_refused_with_the_file_named() {
        let dir = std::env::temp_dir().join(format!("rdq-tls-server-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not pem at all\n").unwrap();
        let missing = dir.join("missing.pem");
        let err = server_config(ServerTlsFiles {
            cert: &missing,
            key: &missing,
            client_ca: None,
        })
        .unwrap_err();
        assert_eq!(err.code(), "TLS_FILE_UNREADABLE");
        assert!(err.to_string().contains("missing.pem"), "{err}");
        let err = server_config(ServerTlsFiles {
            cert: &empty,
            key: &empty,
            client_ca: None,
        })
        .unwrap_err();
        assert_eq!(err.code(), "TLS_BAD_PEM");
        assert!(err.to_string().contains("empty.pem"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
