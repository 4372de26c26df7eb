//! `rdq source …`: sources (Kafka topics, NATS JetStream streams, SQS
//! queues whose records become tasks; docs/sources.md). `run` runs the
//! sources of a configuration file in this process, straight on a store,
//! until SIGINT or SIGTERM; `status` shows what a running server's sources
//! are doing; `reset` removes a source's cursors from the store.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use rdq_api::sources::SourceStatus;
use rdq_app::schedules::format_instant;
use rdq_engine::{Engine, SystemClock};
use rdq_server::{ServerConfig, shutdown_signal};
use rdq_source::{Registry, SourceState};
use serde_json::json;
use tracing::{info, warn};

use crate::CliError;
use crate::backend::{Backend, TargetArgs};
use crate::output;
use crate::output::{out, outln};
use crate::serve::{LogFormat, init_logging};
use crate::stores::open_store;

/// How often `rdq source run` looks for status changes to log.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// Subcommands of `rdq source`.
#[derive(Debug, Subcommand)]
pub enum SourceCommand {
    /// Run the sources of a configuration file in this process, straight on
    /// the store, until SIGINT or SIGTERM.
    Run(RunArgs),
    /// What a running server's sources are doing: state, lag, rate,
    /// counters and last error.
    Status {
        /// Only this source, with its partitions.
        name: Option<String>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Remove a source's cursors from the store: it resumes from the
    /// source's own position (Kafka's committed offset, the JetStream
    /// consumer's acknowledgements).
    Reset {
        /// The source's name.
        name: String,
        #[command(flatten)]
        target: TargetArgs,
    },
}

/// Arguments of `rdq source run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// A TOML file with `[[sources]]` tables and, optionally, `store` and
    /// `[defaults]`: the server's configuration file will do (its other
    /// sections are checked, not used).
    #[arg(long, env = "RDQ_CONFIG", value_name = "FILE")]
    config: PathBuf,
    /// Store: a directory (the embedded store) or a store URL; overrides
    /// the file's `store` [default: ./rdq-data].
    #[arg(long, env = "RDQ_STORE", value_name = "STORE")]
    store: Option<String>,
    /// Log filter: a level, or `level,target=level,…`.
    #[arg(long, env = "RDQ_LOG", default_value = "info", value_name = "FILTER")]
    log: String,
    /// Log lines as text for people, or as JSON objects, one per line.
    #[arg(long, env = "RDQ_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// Runs `rdq source …`.
pub fn run(cmd: SourceCommand) -> Result<(), CliError> {
    match cmd {
        SourceCommand::Run(args) => run_sources(args),
        SourceCommand::Status { name, target } => {
            crate::block_on(async move { status(name.as_deref(), &target).await })
        }
        SourceCommand::Reset { name, target } => crate::block_on(async move {
            let deleted = Backend::open(&target)
                .await?
                .reset_source_cursors(&name)
                .await?;
            if target.json {
                outln!("{}", json!({"name": name, "deleted": deleted}))?;
            } else {
                outln!(
                    "deleted {deleted} cursor{} of source {name}; its next start takes its position from the source",
                    if deleted == 1 { "" } else { "s" }
                )?;
            }
            Ok(())
        }),
    }
}

/// `rdq source run`: checks the file, opens the store, runs every source
/// until a signal, logging each source's status changes.
fn run_sources(args: RunArgs) -> Result<(), CliError> {
    init_logging(&args.log, args.log_format)?;
    let mut config = ServerConfig::from_file(&args.config)
        .map_err(|e| CliError::new(e.code(), e.to_string()))?;
    if let Some(store) = args.store {
        config.store = store;
    }
    if config.sources.is_empty() {
        return Err(CliError::new(
            "INVALID_CONFIG",
            format!(
                "{} has no [[sources]] tables: there is nothing to run",
                args.config.display()
            ),
        ));
    }
    // The same checks as `rdq serve`: a mistake names its source, before
    // the store is opened.
    config
        .validate()
        .map_err(|e| CliError::new(e.code(), e.to_string()))?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new("IO_ERROR", format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async move {
        let signal = shutdown_signal();
        let mut engine = Engine::new(open_store(&config.store).await?, Arc::new(SystemClock));
        if let Some(defaults) = &config.defaults {
            engine = engine.with_fallback_config(defaults.clone());
        }
        let registry = Registry::default();
        let (trigger, stop) = rdq_runtime::shutdown_channel();
        let sources =
            rdq_source::start(&engine, &config.sources, &registry, &stop).map_err(|e| {
                CliError::new(
                    "INVALID_CONFIG",
                    format!("the configuration is not valid: sources: {e}"),
                )
            })?;
        info!(
            sources = config.sources.len(),
            store = %config.store,
            "rdq source run: running {} source{}",
            config.sources.len(),
            if config.sources.len() == 1 { "" } else { "s" }
        );
        let mut watch_stop = stop.clone();
        let watcher = tokio::spawn(async move {
            let mut seen = BTreeMap::new();
            loop {
                log_changes(&registry, &mut seen);
                tokio::select! {
                    () = tokio::time::sleep(WATCH_EVERY) => {}
                    () = watch_stop.wait() => break,
                }
            }
            sources.join().await;
            log_changes(&registry, &mut seen);
        });
        signal.await;
        info!("shutdown requested: the sources stop after their current step");
        trigger.trigger();
        if watcher.await.is_err() {
            warn!("the status watcher ended abnormally");
        }
        info!("rdq source run stopped");
        Ok(())
    })
}

/// What a status change is judged by.
type Seen = (SourceState, bool, Option<String>);

/// Logs every source whose state, pause or last error changed since `seen`.
fn log_changes(registry: &Registry, seen: &mut BTreeMap<String, Seen>) {
    for s in registry.all() {
        let now: Seen = (s.state, s.paused, s.last_error.clone());
        if seen.get(&s.name) == Some(&now) {
            continue;
        }
        let state = s.state.as_str();
        match (&s.state, &s.last_error) {
            (SourceState::Retrying, Some(error)) => warn!(
                source = %s.name,
                kind = s.kind.as_str(),
                queue = %s.queue,
                state,
                error = %error,
                "source {}: {state}",
                s.name
            ),
            _ => info!(
                source = %s.name,
                kind = s.kind.as_str(),
                queue = %s.queue,
                state,
                paused = s.paused,
                lag = s.lag,
                ingested = s.ingested,
                "source {}: {state}",
                s.name
            ),
        }
        seen.insert(s.name.clone(), now);
    }
}

/// `rdq source status [NAME]`.
async fn status(name: Option<&str>, target: &TargetArgs) -> Result<(), CliError> {
    let backend = Backend::open(target).await?;
    let Some(name) = name else {
        let sources = backend.sources().await?;
        if target.json {
            outln!("{}", json!({"sources": sources}))?;
        } else if sources.is_empty() {
            outln!("no sources")?;
        } else {
            out!("{}", table(&sources))?;
        }
        return Ok(());
    };
    let s = backend.source(name).await?;
    if target.json {
        outln!("{}", serde_json::to_string(&s).unwrap_or_default())?;
        return Ok(());
    }
    let last_error = match (&s.last_error, s.last_error_at_ms) {
        (Some(e), Some(at)) => format!("{e} (at {})", format_instant(at)),
        (Some(e), None) => e.clone(),
        (None, _) => "—".to_owned(),
    };
    let lines = [
        ("name", s.name.clone()),
        ("kind", s.kind.as_str().to_owned()),
        ("queue", s.queue.clone()),
        ("state", s.state.as_str().to_owned()),
        ("paused", s.paused.to_string()),
        ("lag", count(s.lag)),
        ("rate", rate(s.rate)),
        ("ingested", s.ingested.to_string()),
        ("dead", s.dead.to_string()),
        ("duplicates", s.duplicates.to_string()),
        ("cursors", cursors(&s)),
        ("last error", last_error),
    ];
    for (label, value) in lines {
        outln!("{label:<11} {value}")?;
    }
    if !s.partitions.is_empty() {
        outln!("")?;
        let rows: Vec<Vec<String>> = s
            .partitions
            .iter()
            .map(|p| vec![p.partition.clone(), count(p.cursor), count(p.lag)])
            .collect();
        out!("{}", output::table(&["PARTITION", "CURSOR", "LAG"], &rows))?;
    }
    Ok(())
}

/// The sources as a table for people.
fn table(sources: &[SourceStatus]) -> String {
    let rows: Vec<Vec<String>> = sources
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                s.kind.as_str().to_owned(),
                s.queue.clone(),
                s.state.as_str().to_owned(),
                count(s.lag),
                rate(s.rate),
                s.ingested.to_string(),
                s.dead.to_string(),
                s.last_error
                    .as_deref()
                    .map_or_else(|| "—".to_owned(), |e| output::one_line(e, 80)),
            ]
        })
        .collect();
    output::table(
        &[
            "NAME",
            "KIND",
            "QUEUE",
            "STATE",
            "LAG",
            "RATE",
            "INGESTED",
            "DEAD",
            "LAST ERROR",
        ],
        &rows,
    )
}

fn count(n: Option<u64>) -> String {
    n.map_or_else(|| "—".to_owned(), |n| n.to_string())
}

fn rate(r: f64) -> String {
    format!("{r:.1}/s")
}

fn cursors(s: &SourceStatus) -> String {
    if s.cursors_in_store {
        "in the store".to_owned()
    } else {
        "the source's own".to_owned()
    }
}
