//! `rdq serve`: run rdq-server. With no arguments it keeps its data in
//! `./rdq-data` (the embedded store) and listens on `127.0.0.1:7480`, open
//! (no tokens) because it is loopback only; `--config` adds tokens, the
//! callback allowlist and the rest (docs/server.md); `--tls-cert` and
//! `--tls-key` turn on HTTPS (docs/deployment.md).
//!
//! Logs go to stderr; `--log` (or `RDQ_LOG`) filters them by target and
//! level, e.g. `info,rdq::audit=off`; `--log-format json` writes one JSON
//! object per line. `--otlp-endpoint` (or the `OTEL_*` variables) turns on
//! OpenTelemetry trace export (docs/observability.md).

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use rdq_server::{Server, ServerConfig, shutdown_signal};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::CliError;
use crate::stores::open_store;

/// Arguments of `rdq serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:7480]. A non-loopback
    /// address needs tokens in the configuration file.
    #[arg(long, env = "RDQ_LISTEN", value_name = "ADDR")]
    listen: Option<String>,
    /// Store: a directory (the embedded store), a store URL or `memory:` [default: ./rdq-data].
    #[arg(long, env = "RDQ_STORE", value_name = "STORE")]
    store: Option<String>,
    /// Configuration file (TOML; see docs/server.md).
    #[arg(long, env = "RDQ_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// HTTPS: the server's certificate chain (PEM, leaf first); needs
    /// `--tls-key`. Overrides `[tls] cert` (docs/deployment.md).
    #[arg(long, env = "RDQ_TLS_CERT", value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// HTTPS: the certificate's private key (PEM). Overrides `[tls] key`.
    #[arg(long, env = "RDQ_TLS_KEY", value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by these CA certificates (PEM).
    /// Overrides `[tls] client_ca`.
    #[arg(long, env = "RDQ_TLS_CLIENT_CA", value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
    /// Log filter: a level, or `level,target=level,…`.
    #[arg(long, env = "RDQ_LOG", default_value = "info", value_name = "FILTER")]
    log: String,
    /// Log lines as text for people, or as JSON objects, one per line
    /// (docs/observability.md).
    #[arg(long, env = "RDQ_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Export OpenTelemetry traces over OTLP to this collector, e.g.
    /// `http://127.0.0.1:4318` (HTTP: spans go to `/v1/traces`) or
    /// `http://127.0.0.1:4317` with `--otlp-protocol grpc`. Overrides
    /// `[telemetry] otlp_endpoint` and the `OTEL_EXPORTER_OTLP_*` variables.
    #[arg(long, env = "RDQ_OTLP_ENDPOINT", value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// How traces travel: `grpc`, `http/protobuf` or `http/json` (sent as
    /// protobuf). Overrides `[telemetry] otlp_protocol` and
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` [default: `http/protobuf`].
    #[arg(long, env = "RDQ_OTLP_PROTOCOL", value_name = "PROTOCOL")]
    otlp_protocol: Option<String>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message`
    /// and the event's fields at the top level.
    Json,
}

/// Sends log lines to stderr, filtered by `filter` (a level, or
/// `level,target=level,…`), in `format`.
pub fn init_logging(filter: &str, format: LogFormat) -> Result<(), CliError> {
    let targets: Targets = filter
        .parse()
        .map_err(|e| CliError::new("INVALID_ARGUMENT", format!("--log {filter:?}: {e}")))?;
    let text = (format == LogFormat::Text).then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
    });
    let json = (format == LogFormat::Json).then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_writer(std::io::stderr)
    });
    let _ = tracing_subscriber::registry()
        .with(text)
        .with(json)
        .with(targets)
        .try_init();
    Ok(())
}

/// Runs `rdq serve` until SIGTERM or SIGINT.
pub fn run(args: ServeArgs) -> Result<(), CliError> {
    init_logging(&args.log, args.log_format)?;

    let mut config = match &args.config {
        Some(path) => {
            ServerConfig::from_file(path).map_err(|e| CliError::new(e.code(), e.to_string()))?
        }
        None => ServerConfig::default(),
    };
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(store) = args.store {
        config.store = store;
    }
    if let Some(cert) = args.tls_cert {
        config.tls.cert = Some(cert);
    }
    if let Some(key) = args.tls_key {
        config.tls.key = Some(key);
    }
    if let Some(ca) = args.tls_client_ca {
        config.tls.client_ca = Some(ca);
    }
    if let Some(endpoint) = args.otlp_endpoint {
        config.telemetry.otlp_endpoint = Some(endpoint);
    }
    if let Some(protocol) = args.otlp_protocol {
        config.telemetry.otlp_protocol = Some(protocol);
    }
    // Refuse a bad configuration before touching the store.
    config
        .validate()
        .map_err(|e| CliError::new(e.code(), e.to_string()))?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new("IO_ERROR", format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async {
        // Signal handlers first: a SIGTERM during start-up still shuts down gracefully.
        let shutdown = shutdown_signal();
        let store = open_store(&config.store).await?;
        let server = Server::bind(config, store)
            .await
            .map_err(|e| CliError::new(e.code(), e.to_string()))?;
        let tracer = server.tracer();
        let served = server
            .run(shutdown)
            .await
            .map_err(|e| CliError::new(e.code(), e.to_string()));
        // The last spans (the final settles) go out before the process exits.
        if let Some(tracer) = tracer {
            tracer.flush(std::time::Duration::from_secs(5)).await;
        }
        served
    })
}
