//! Certificates and private keys from PEM files, for both sides: the
//! stores' CA files and client identities, and the listener's certificate.
//!
//! Files are read whole and parsed with `rustls-pki-types`' PEM decoder; a
//! file that parses but holds nothing of the kind asked for is refused
//! (`TLS_BAD_PEM`) rather than yielding an empty list that would fail later
//! with a vaguer handshake error.

use std::path::Path;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::TlsError;

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::FileUnreadable {
        path: path.to_owned(),
        source,
    })
}

fn bad(path: &Path, why: impl std::fmt::Display) -> TlsError {
    TlsError::BadPem {
        path: path.to_owned(),
        why: why.to_string(),
    }
}

/// Every certificate in a PEM file, in file order (a chain: leaf first).
/// Refuses a file with none.
pub fn load_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    certificates_from_pem(&read(path)?).map_err(|why| bad(path, why))
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in a PEM file.
pub fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(&read(path)?)
        .map_err(|e| bad(path, format!("no usable private key ({e})")))
}

/// A root store holding every certificate of a PEM file (a CA bundle).
/// Refuses a file with none, or with one that is not a usable trust anchor.
pub fn load_root_store(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certificates(path)? {
        roots
            .add(cert)
            .map_err(|e| bad(path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}

fn certificates_from_pem(bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("malformed PEM ({e})"))?;
    if certs.is_empty() {
        return Err("no CERTIFICATE in the file".into());
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn a_missing_file_is_unreadable_with_its_path() {
        let err = load_certificates(Path::new("/nonexistent/rdq/ca.pem")).unwrap_err();
        assert_eq!(err.code(), "TLS_FILE_UNREADABLE");
        assert!(err.to_string().contains("/nonexistent/rdq/ca.pem"));
    }

    #[test]
    fn a_file_without_certificates_is_refused() {
        assert!(certificates_from_pem(b"just text\n").is_err());
        assert!(certificates_from_pem(b"").is_err());
    }
}
