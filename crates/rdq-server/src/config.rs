//! The server's configuration: one TOML file (`--config`), every field
//! optional, so `rdq serve` with no file at all is a complete configuration.
//!
//! Precedence, highest first: command-line flags, environment variables
//! (`RDQ_LISTEN`, `RDQ_STORE`, `RDQ_CONFIG`, `RDQ_TLS_*`), the file, the defaults here.
//! `docs/server.md` lists every field with its default.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use rdq_engine::QueueConfig;
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

/// The scheduler service (`[scheduler]`; `docs/schedules.md`): every node
/// fires the stored schedules' due times, on stores with schedules.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerSettings {
    /// Run the scheduler on this node.
    pub enabled: bool,
    /// Pause between ticks (ms); also the grace of a due time.
    pub interval_ms: u64,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            interval_ms: 1_000,
        }
    }
}

/// The listener's limits on slow, idle and numerous clients
/// (`[http]`; `docs/server.md`, "The listener").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSettings {
    /// How long a client has, from the moment it starts a request (the TCP
    /// accept for a new connection, TLS handshake included; its first byte on
    /// a kept-alive one), to send the whole request head (ms). Past it the
    /// connection is closed without an answer.
    pub header_read_timeout_ms: u64,
    /// The longest a request body may go without delivering any data (ms).
    /// Past it the request is answered 408 `REQUEST_TIMEOUT` and an HTTP/1.1
    /// connection is closed.
    pub body_read_timeout_ms: u64,
    /// How long a connection with no request in flight is kept open (ms).
    pub idle_timeout_ms: u64,
    /// Most connections open at once; more wait in the operating system's
    /// accept backlog until one closes.
    pub max_connections: usize,
    /// HTTP/2: pause between the server's keep-alive pings (ms).
    pub h2_keepalive_interval_ms: u64,
    /// HTTP/2: a ping not acknowledged within this closes the connection (ms).
    pub h2_keepalive_timeout_ms: u64,
    /// HTTP/2: most requests (streams) in flight on one connection.
    pub h2_max_concurrent_streams: u32,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 60_000,
            idle_timeout_ms: 120_000,
            max_connections: 10_000,
            h2_keepalive_interval_ms: 30_000,
            h2_keepalive_timeout_ms: 20_000,
            h2_max_concurrent_streams: 200,
        }
    }
}

impl HttpSettings {
    /// Refuses a zero anywhere: every limit here is a protection, none can
    /// be switched off.
    pub fn validate(&self) -> Result<(), String> {
        let fields = [
            ("header_read_timeout_ms", self.header_read_timeout_ms),
            ("body_read_timeout_ms", self.body_read_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("max_connections", self.max_connections as u64),
            ("h2_keepalive_interval_ms", self.h2_keepalive_interval_ms),
            ("h2_keepalive_timeout_ms", self.h2_keepalive_timeout_ms),
            (
                "h2_max_concurrent_streams",
                u64::from(self.h2_max_concurrent_streams),
            ),
        ];
        for (name, value) in fields {
            if value == 0 {
                return Err(format!("{name}: must be at least 1"));
            }
        }
        // Far beyond any sensible setting; keeps deadline arithmetic in range.
        const MAX_MS: u64 = 365 * 24 * 3_600_000;
        for (name, value) in &fields[..3] {
            if *value > MAX_MS {
                return Err(format!("{name}: must be at most {MAX_MS} (a year)"));
            }
        }
        // Far beyond any file-descriptor limit; keeps the semaphore in range.
        const MAX_CONNECTIONS: usize = 10_000_000;
        if self.max_connections > MAX_CONNECTIONS {
            return Err(format!(
                "max_connections: must be at most {MAX_CONNECTIONS}"
            ));
        }
        Ok(())
    }
}

/// HTTPS on the listener (`[tls]`; `docs/deployment.md`). Both `cert` and
/// `key`, or neither (plain HTTP).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSettings {
    /// The server's certificate chain, PEM, leaf first.
    pub cert: Option<PathBuf>,
    /// The certificate's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
    /// Require client certificates signed by these CA certificates (PEM).
    pub client_ca: Option<PathBuf>,
}

impl TlsSettings {
    /// True when the listener speaks HTTPS.
    pub fn enabled(&self) -> bool {
        self.cert.is_some()
    }

    /// Refuses a certificate without its key (or the reverse), and client
    /// authentication without a server certificate.
    pub fn validate(&self) -> Result<(), String> {
        match (&self.cert, &self.key) {
            (Some(_), None) => Err("cert is set but key is not".into()),
            (None, Some(_)) => Err("key is set but cert is not".into()),
            (None, None) if self.client_ca.is_some() => {
                Err("client_ca needs cert and key (client certificates need TLS)".into())
            }
            _ => Ok(()),
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
    /// The scheduler service.
    pub scheduler: SchedulerSettings,
    /// The listener's timeouts and connection limit.
    pub http: HttpSettings,
    /// HTTPS on the listener.
    pub tls: TlsSettings,
    /// OpenTelemetry trace export (`docs/observability.md`); off unless an
    /// endpoint is set here, by `--otlp-endpoint` or by `OTEL_*` variables.
    pub telemetry: rdq_telemetry::TelemetrySettings,
    /// Configuration of queues that have none stored: policy fields and
    /// sections, as in `PUT /v1/queues/{queue}/config`.
    pub defaults: Option<QueueConfig>,
    /// Sources (`[[sources]]`; `docs/sources.md`): Kafka topics, NATS
    /// JetStream streams and SQS queues whose records become tasks, read
    /// while the server runs.
    pub sources: Vec<rdq_source::SourceConfig>,
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
            scheduler: SchedulerSettings::default(),
            http: HttpSettings::default(),
            tls: TlsSettings::default(),
            telemetry: rdq_telemetry::TelemetrySettings::default(),
            defaults: None,
            sources: Vec::new(),
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
    /// allowlist compiles, every source is valid (the error names it), and
    /// an open server stays on loopback.
    pub fn validate(&self) -> Result<Vec<SocketAddr>, ConfigError> {
        let addrs = self.listen_addrs()?;
        Authenticator::new(&self.tokens).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if let Some(defaults) = &self.defaults {
            // Read as a document so a misspelt field is refused, not kept.
            let doc = serde_json::to_value(defaults)
                .map_err(|e| ConfigError::Invalid(format!("defaults: {e}")))?;
            QueueConfig::from_json(doc, rdq_app::queues::CONFIG_SECTIONS)
                .map_err(|e| ConfigError::Invalid(format!("defaults: {e}")))?;
        }
        self.callbacks
            .validate()
            .map_err(|e| ConfigError::Invalid(format!("callbacks: {e}")))?;
        self.http
            .validate()
            .map_err(|e| ConfigError::Invalid(format!("http: {e}")))?;
        self.tls
            .validate()
            .map_err(|e| ConfigError::Invalid(format!("tls: {e}")))?;
        self.telemetry_config()?;
        rdq_source::config::validate_all(&self.sources)
            .map_err(|e| ConfigError::Invalid(format!("sources: {e}")))?;
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

    /// Trace export as `[telemetry]` and the `OTEL_*` environment variables
    /// configure it; `None` when tracing is off.
    pub fn telemetry_config(&self) -> Result<Option<rdq_telemetry::TelemetryConfig>, ConfigError> {
        rdq_telemetry::TelemetryConfig::resolve(&self.telemetry, &|name| std::env::var(name).ok())
            .map_err(|e| ConfigError::Invalid(e.to_string()))
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
    fn listener_sections_parse_and_bad_combinations_are_refused() {
        let config = ServerConfig::from_toml(
            r#"
            [http]
            header_read_timeout_ms = 500
            max_connections = 3
            [tls]
            cert = "/etc/rdq/cert.pem"
            key = "/etc/rdq/key.pem"
            client_ca = "/etc/rdq/clients.pem"
            "#,
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.http.header_read_timeout_ms, 500);
        assert_eq!(config.http.max_connections, 3);
        assert_eq!(config.http.idle_timeout_ms, 120_000);
        assert!(config.tls.enabled());
        for bad in [
            "[tls]\ncert = \"c.pem\"",
            "[tls]\nkey = \"k.pem\"",
            "[tls]\nclient_ca = \"ca.pem\"",
            "[http]\nmax_connections = 0",
            "[http]\nbody_read_timeout_ms = 0",
            "[http]\nmax_connections = 9223372036854775807",
            "[http]\nidle_timeout_ms = 9223372036854775807",
        ] {
            let config = ServerConfig::from_toml(bad).unwrap();
            let err = config.validate().unwrap_err();
            assert_eq!(err.code(), "INVALID_CONFIG", "{bad}");
        }
        let err = ServerConfig::from_toml("[http]\nheader_timeout_ms = 1").unwrap_err();
        assert!(err.to_string().contains("header_timeout_ms"), "{err}");
    }

    #[test]
    fn the_telemetry_section_parses_and_a_bad_endpoint_is_refused() {
        let config = ServerConfig::from_toml(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\nservice_name = \"q\"",
        )
        .unwrap();
        assert_eq!(
            config.telemetry.otlp_endpoint.as_deref(),
            Some("http://127.0.0.1:4318")
        );
        config.validate().unwrap();
        let bad = ServerConfig::from_toml("[telemetry]\notlp_endpoint = \"ftp://x\"").unwrap();
        assert_eq!(bad.validate().unwrap_err().code(), "INVALID_CONFIG");
        let grpc = ServerConfig::from_toml(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4317\"\notlp_protocol = \"grpc\"",
        )
        .unwrap();
        assert_eq!(grpc.telemetry.otlp_protocol.as_deref(), Some("grpc"));
        let bad = ServerConfig::from_toml(
            "[telemetry]\notlp_endpoint = \"http://x:4317\"\notlp_protocol = \"thrift\"",
        )
        .unwrap();
        assert_eq!(bad.validate().unwrap_err().code(), "INVALID_CONFIG");
        let err = ServerConfig::from_toml("[telemetry]\nendpoint = \"http://x\"").unwrap_err();
        assert!(err.to_string().contains("endpoint"), "{err}");
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
        assert_eq!(config.defaults.as_ref().unwrap().policy.max_attempts, 3);
        assert_eq!(config.maintenance.reaper_interval_ms, 100);
        assert!(!config.callbacks.allow_loopback);
        let err = ServerConfig::from_toml("lisen = \"127.0.0.1:1\"").unwrap_err();
        assert_eq!(err.code(), "INVALID_CONFIG");
        assert!(err.to_string().contains("lisen"));
        let bad_policy = ServerConfig::from_toml("[defaults]\nmax_attempts = 0").unwrap();
        assert_eq!(bad_policy.validate().unwrap_err().code(), "INVALID_CONFIG");
        let bad_policy = ServerConfig::from_toml("[http]\nidle_timeout_ms = 0").unwrap();
        assert_eq!(bad_policy.validate().unwrap_err().code(), "INVALID_CONFIG");
    }
    #[test]
    fn sources_parse_and_a_bad_one_is_refused_by_name() {
        let config = ServerConfig::from_toml(
            r#"
            [[sources]]
            name = "orders"
            queue = "orders"
            handler = "order.created"
            [sources.kafka]
            brokers = "127.0.0.1:9092"
            topic = "orders"

            [[sources]]
            name = "audit.events"
            queue = "audit"
            handler = "audit.record"
            high_water = 1000
            [sources.nats]
            url = "nats://127.0.0.1:4222"
            stream = "AUDIT"
            "#,
        )
        .unwrap();
        assert_eq!(config.sources.len(), 2);
        assert_eq!(config.sources[0].name, "orders");
        assert_eq!(config.sources[1].high_water, Some(1000));
        assert!(ServerConfig::default().sources.is_empty());
        // Whether a kind can run depends on the build's features; the
        // rules below hold in every build.
        for (bad, named) in [
            (
                "[[sources]]\nname = \"bad-queue\"\nqueue = \"Bad Queue\"\nhandler = \"h\"\n[sources.kafka]\nbrokers = \"b:1\"\ntopic = \"t\"",
                "bad-queue",
            ),
            (
                "[[sources]]\nname = \"twice\"\nqueue = \"q\"\nhandler = \"h\"",
                "twice",
            ),
            (
                "[[sources]]\nname = \"batchy\"\nqueue = \"q\"\nhandler = \"h\"\nbatch = 0\n[sources.sqs]\nqueue_url = \"http://x/q\"",
                "batchy",
            ),
            (
                "[[sources]]\nname = \"Upper\"\nqueue = \"q\"\nhandler = \"h\"\n[sources.kafka]\nbrokers = \"b:1\"\ntopic = \"t\"",
                "Upper",
            ),
        ] {
            let config = ServerConfig::from_toml(bad).unwrap();
            let err = config.validate().unwrap_err();
            assert_eq!(err.code(), "INVALID_CONFIG", "{bad}");
            assert!(err.to_string().contains(named), "{bad}: {err}");
        }
        let dup = ServerConfig {
            sources: vec![config.sources[0].clone(), config.sources[0].clone()],
            ..ServerConfig::default()
        };
        let err = dup.validate().unwrap_err();
        assert!(err.to_string().contains("orders"), "{err}");
        let err = ServerConfig::from_toml(
            "[[sources]]\nname = \"s\"\nqueue = \"q\"\nhandler = \"h\"\nbrokers = \"b\"",
        )
        .unwrap_err();
        assert_eq!(err.code(), "INVALID_CONFIG");
        assert!(err.to_string().contains("brokers"), "{err}");
    }
}
