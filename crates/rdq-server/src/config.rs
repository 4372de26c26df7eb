//! The server's configuration: one TOML file (`--config`), every field
//! optional, so `rdq serve` with no file at all is a complete configuration.
//!
//! Precedence, highest first: command-line flags, environment variables
//! (`RDQ_LISTEN`, `RDQ_STORE`, `RDQ_CONFIG`), the file, the defaults here.
//! `docs/server.md` lists every field with its default.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use rdq_engine::QueuePolicy;
use serde::Deserialize;

use crate::callback::CallbackSettings;
use rdq_app::auth::{Authenticator, TokenConfig};

/// Where `rdq serve` listens by default: loopback, port 7480.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7480";
/// Where `rdq serve` keeps its embedded store by default.
pub const DEFAULT_STORE: &str = "./rdq-data";

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the configuration file {path}: {why}")]
    Unreadable {
        /// The file.
        path: String,
        /// The I/O error.
        why: String,
    },
    /// The file is not valid TOML or has an unknown or mistyped field.
    #[error("the configuration is not valid: {0}")]
    Invalid(String),
    /// The server would listen on a non-loopback address with no tokens.
    #[error(
        "refusing to listen on {0} without tokens: configure [[tokens]] or listen on a loopback address"
    )]
    OpenOnNetwork(String),
}

impl ConfigError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unreadable { .. } => "IO_ERROR",
            Self::Invalid(_) => "INVALID_CONFIG",
            Self::OpenOnNetwork(_) => "INSECURE_CONFIG",
        }
    }
}

/// Intervals and batch sizes of the background services.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MaintenanceSettings {
    /// Pause between lease-reaper passes that found nothing (ms).
    pub reaper_interval_ms: u64,
    /// Leases closed per reaper pass.
    pub reaper_batch: usize,
    /// Pause between retention-pruner passes (ms).
    pub pruner_interval_ms: u64,
    /// SUCCEEDED tasks removed per queue per pruner pass.
    pub pruner_batch: usize,
}

impl Default for MaintenanceSettings {
    fn default() -> Self {
        Self {
            reaper_interval_ms: 500,
            reaper_batch: 500,
            pruner_interval_ms: 30_000,
            pruner_batch: 10_000,
        }
    }
}

/// The whole server configuration. See the module documentation.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on (`host:port`).
    pub listen: String,
    /// The store: a directory (the embedded store) or a store URL.
    pub store: String,
    /// Bearer tokens; none means an open server (loopback only).
    pub tokens: Vec<TokenConfig>,
    /// Also append audit records to this file, one JSON object per line.
    pub audit_log: Option<PathBuf>,
    /// Serve `/metrics` without a token (otherwise it needs `admin`).
    pub public_metrics: bool,
    /// Largest request body, except DLQ imports (bytes).
    pub max_request_bytes: usize,
    /// Largest DLQ import body (bytes).
    pub max_import_bytes: usize,
    /// How long shutdown waits for in-flight requests and callback
    /// dispatches before handing unfinished dispatches back (ms).
    pub shutdown_grace_ms: u64,
    /// Callback dispatch: allowlist, timeouts, concurrency.
    pub callbacks: CallbackSettings,
    /// Lease reaper and retention pruner.
    pub maintenance: MaintenanceSettings,
    /// Policy of queues that have none stored (`QueuePolicy` fields).
    pub defaults: Option<QueuePolicy>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.to_owned(),
            store: DEFAULT_STORE.to_owned(),
            tokens: Vec::new(),
            audit_log: None,
            public_metrics: true,
            max_request_bytes: 8 * 1024 * 1024,
            max_import_bytes: 256 * 1024 * 1024,
            shutdown_grace_ms: 10_000,
            callbacks: CallbackSettings::default(),
            maintenance: MaintenanceSettings::default(),
            defaults: None,
        }
    }
}

impl ServerConfig {
    /// Parses a TOML document.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Invalid(e.to_string()))
    }

    /// Reads and parses a TOML file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Unreadable {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        Self::from_toml(&text)
    }

    /// Checks everything that can be checked before binding: the listen
    /// address resolves, tokens and policy defaults are valid, the callback
    /// allowlist compiles, and an open server stays on loopback.
    pub fn validate(&self) -> Result<Vec<SocketAddr>, ConfigError> {
        let addrs = self.listen_addrs()?;
        Authenticator::new(&self.tokens).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if let Some(defaults) = &self.defaults {
            defaults
                .validate()
                .map_err(|e| ConfigError::Invalid(format!("defaults: {e}")))?;
        }
        self.callbacks
            .validate()
            .map_err(|e| ConfigError::Invalid(format!("callbacks: {e}")))?;
        if self.max_request_bytes < 1024 {
            return Err(ConfigError::Invalid(
                "max_request_bytes: must be at least 1024".into(),
            ));
        }
        if self.tokens.is_empty() && !addrs.iter().all(|a| a.ip().is_loopback()) {
            return Err(ConfigError::OpenOnNetwork(self.listen.clone()));
        }
        Ok(addrs)
    }

    /// The addresses `listen` names.
    pub fn listen_addrs(&self) -> Result<Vec<SocketAddr>, ConfigError> {
        let addrs: Vec<SocketAddr> = self
            .listen
            .to_socket_addrs()
            .map_err(|e| ConfigError::Invalid(format!("listen: {:?}: {e}", self.listen)))?
            .collect();
        if addrs.is_empty() {
            return Err(ConfigError::Invalid(format!(
                "listen: {:?} resolves to no address",
                self.listen
            )));
        }
        Ok(addrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_file_at_all_is_a_complete_configuration_on_loopback() {
        let config = ServerConfig::default();
        let addrs = config.validate().unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()));
        assert_eq!(config.listen, "127.0.0.1:7480");
        assert_eq!(config.store, "./rdq-data");
    }

    #[test]
    fn an_open_server_on_a_network_address_is_refused() {
        let config = ServerConfig {
            listen: "0.0.0.0:7480".into(),
            ..ServerConfig::default()
        };
        let err = config.validate().unwrap_err();
        assert_eq!(err.code(), "INSECURE_CONFIG");
        let with_token = ServerConfig::from_toml(
            r#"
            listen = "0.0.0.0:7480"
            [[tokens]]
            name = "ops"
            token = "0123456789abcdef"
            scopes = ["admin"]
            "#,
        )
        .unwrap();
        with_token.validate().unwrap();
    }

    #[test]
    fn a_full_file_parses_and_unknown_fields_are_refused() {
        let config = ServerConfig::from_toml(
            r#"
            listen = "127.0.0.1:0"
            store = "/var/lib/rdq"
            audit_log = "/var/log/rdq-audit.jsonl"
            public_metrics = false
            [callbacks]
            allow = ["https://hooks.example.com/*"]
            allow_loopback = false
            [maintenance]
            reaper_interval_ms = 100
            [defaults]
            max_attempts = 3
            lease_ms = 5000
            [[tokens]]
            name = "checkout"
            token = "checkout-token-0001"
            scopes = ["submit"]
            queues = ["payments.*"]
            "#,
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.defaults.as_ref().unwrap().max_attempts, 3);
        assert_eq!(config.maintenance.reaper_interval_ms, 100);
        assert!(!config.callbacks.allow_loopback);
        let err = ServerConfig::from_toml("lisen = \"127.0.0.1:1\"").unwrap_err();
        assert_eq!(err.code(), "INVALID_CONFIG");
        assert!(err.to_string().contains("lisen"));
        let bad_policy = ServerConfig::from_toml("[defaults]\nmax_attempts = 0").unwrap();
        assert_eq!(bad_policy.validate().unwrap_err().code(), "INVALID_CONFIG");
    }
}
