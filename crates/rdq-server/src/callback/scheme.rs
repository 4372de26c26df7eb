//! The URL schemes a callback target may use, and which protocol each one
//! means: `http://` and `https://` targets get the envelope POSTed as JSON;
//! `grpc://` (plaintext HTTP/2) and `grpcs://` (TLS) targets get a call to
//! `rdq.v1.Handler/Handle` ([`super::grpc`]).

/// The URL scheme of a plaintext gRPC callback target.
pub const GRPC: &str = "grpc";

/// The URL scheme of a gRPC callback target over TLS.
pub const GRPCS: &str = "grpcs";

/// The port of a `grpcs://` URL that names none (a `grpc://` URL must name one).
pub const GRPCS_DEFAULT_PORT: u16 = 443;

/// For a gRPC scheme, whether it is the TLS one; `None` for any other.
pub fn grpc_tls(scheme: &str) -> Option<bool> {
    match scheme {
        GRPC => Some(false),
        GRPCS => Some(true),
        _ => None,
    }
}

/// True for `grpc` and `grpcs`.
pub fn is_grpc(scheme: &str) -> bool {
    grpc_tls(scheme).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_grpc_and_grpcs_are_grpc_schemes() {
        assert_eq!(grpc_tls("grpc"), Some(false));
        assert_eq!(grpc_tls("grpcs"), Some(true));
        for other in ["http", "https", "GRPC", "grpc+tls", ""] {
            assert_eq!(grpc_tls(other), None, "{other}");
            assert!(!is_grpc(other));
        }
    }
}
