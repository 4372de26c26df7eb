//! `rdq serve`: run rdq-server. With no arguments it keeps its data in
//! `./rdq-data` (the embedded store) and listens on `127.0.0.1:7480`, open
//! (no tokens) because it is loopback only; `--config` adds tokens, the
//! callback allowlist and the rest (docs/server.md).
//!
//! Logs go to stderr; `--log` (or `RDQ_LOG`) filters them by target and
//! level, e.g. `info,rdq::audit=off`.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;
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
    /// Store: a directory (the embedded store) or `memory:` [default: ./rdq-data].
    #[arg(long, env = "RDQ_STORE", value_name = "STORE")]
    store: Option<String>,
    /// Configuration file (TOML; see docs/server.md).
    #[arg(long, env = "RDQ_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log filter: a level, or `level,target=level,…`.
    #[arg(long, env = "RDQ_LOG", default_value = "info", value_name = "FILTER")]
    log: String,
}

/// Runs `rdq serve` until SIGTERM or SIGINT.
pub fn run(args: ServeArgs) -> Result<(), CliError> {
    let filter: Targets = args
        .log
        .parse()
        .map_err(|e| CliError::new("INVALID_ARGUMENT", format!("--log {:?}: {e}", args.log)))?;
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal()),
        )
        .with(filter)
        .try_init();

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
        let store = open_store(&config.store)?;
        let server = Server::bind(config, store)
            .await
            .map_err(|e| CliError::new(e.code(), e.to_string()))?;
        server
            .run(shutdown)
            .await
            .map_err(|e| CliError::new(e.code(), e.to_string()))
    })
}
