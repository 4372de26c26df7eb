//! rdq's one TLS stack: rustls 0.23 with the aws-lc-rs provider, for every
//! connection rdq makes to a store ([`client`]) and for the listener of
//! `rdq serve` ([`server`]). Certificates and keys are read from PEM files
//! ([`pem`]). See `docs/deployment.md`.
//!
//! Every configuration is built on an explicit aws-lc-rs [`CryptoProvider`]
//! ([`provider`]), never on a process-wide default, so no other crate's
//! choice of provider can change (or panic) what rdq negotiates.
//!
//! [`CryptoProvider`]: rustls::crypto::CryptoProvider
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;

pub mod client;
pub mod pem;
pub mod server;
#[cfg(feature = "testing")]
pub mod testing;

pub use rustls;

/// The crypto provider every rdq TLS configuration uses: aws-lc-rs.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Why a TLS configuration could not be built. Each variant's message starts
/// with its stable code ([`TlsError::code`]); nothing was connected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A certificate, key or CA file could not be read.
    #[error("TLS_FILE_UNREADABLE: cannot read {}: {source}", path.display())]
    FileUnreadable {
        /// The file named by the configuration.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A file was read but holds no usable PEM item of the kind expected
    /// (no certificate, no private key, or malformed PEM).
    #[error("TLS_BAD_PEM: {}: {why}", path.display())]
    BadPem {
        /// The file named by the configuration.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The operating system's trusted roots could not be loaded, or none were found.
    #[error("TLS_NO_SYSTEM_ROOTS: {0}")]
    NoSystemRoots(String),
    /// The name to verify the server against is neither a DNS name nor an IP address.
    #[error("TLS_BAD_SERVER_NAME: {0:?} is not a DNS name or an IP address")]
    BadServerName(String),
    /// The certificate and key do not make an identity rustls accepts (the
    /// key does not match the certificate, or its algorithm is unsupported).
    #[error("TLS_BAD_IDENTITY: {0}")]
    BadIdentity(String),
    /// rustls refused the configuration for another reason.
    #[error("TLS_CONFIG: {0}")]
    Config(String),
}

impl TlsError {
    /// The stable code, the same string that starts the display form.
    pub fn code(&self) -> &'static str {
        match self {
            Self::FileUnreadable { .. } => "TLS_FILE_UNREADABLE",
            Self::BadPem { .. } => "TLS_BAD_PEM",
            Self::NoSystemRoots(_) => "TLS_NO_SYSTEM_ROOTS",
            Self::BadServerName(_) => "TLS_BAD_SERVER_NAME",
            Self::BadIdentity(_) => "TLS_BAD_IDENTITY",
            Self::Config(_) => "TLS_CONFIG",
        }
    }
}
