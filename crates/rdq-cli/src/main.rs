//! `rdq`: the operator's command-line tool.
//!
//! Each subcommand lives in its own module; `main` only parses arguments and
//! turns a failure into a stable code on stderr and a non-zero exit status.

#![forbid(unsafe_code)]

mod backend;
mod bench;
mod bench_cancel;
mod bench_flow;
mod bench_grpc;
mod bench_server;
mod bench_source;
mod check_cmd;
mod dlq_cmd;
mod envelope_cmd;
mod input;
mod migrate_cmd;
mod output;
mod queue_cmd;
mod schedule_cmd;
mod serve;
mod source_cmd;
mod stores;
mod stores_cmd;
mod submit_cmd;
mod task_cmd;

use std::process::ExitCode;

/// mimalloc instead of the system allocator: under a retry storm glibc's
/// allocator spent a third more time per task in its free lists
/// (`unlink_chunk`, `malloc_consolidate`) as the heap fragmented.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// rdq: a durable task queue with retries, backoff, leases and a dead-letter queue.
#[derive(Parser)]
#[command(name = "rdq", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate, create and convert wire envelopes.
    #[command(subcommand)]
    Envelope(envelope_cmd::EnvelopeCommand),
    /// Measure a store (docs/benchmarks.md: drain, latency, retry, backlog) or rdq-server (callback, pull).
    Bench(bench::BenchArgs),
    /// Run rdq-server: the HTTP API, pull workers, callbacks (default 127.0.0.1:7480, ./rdq-data).
    Serve(serve::ServeArgs),
    /// Submit a task.
    Submit(Box<submit_cmd::SubmitArgs>),
    /// Read tasks.
    #[command(subcommand)]
    Task(task_cmd::TaskCommand),
    /// List queues, read and change their policy.
    #[command(subcommand)]
    Queue(queue_cmd::QueueCommand),
    /// Manage periodic schedules: put, list, show, next, pause, resume, run, delete.
    #[command(subcommand)]
    Schedule(schedule_cmd::ScheduleCommand),
    /// Run sources (Kafka, NATS JetStream, SQS records as tasks), show their status, reset their cursors.
    #[command(subcommand)]
    Source(source_cmd::SourceCommand),
    /// Operate the dead-letter queue: list, show, export, import, redrive, purge.
    #[command(subcommand)]
    Dlq(dlq_cmd::DlqCommand),
    /// Bring a store's schema up to this build's version (PostgreSQL).
    Migrate(migrate_cmd::MigrateArgs),
    /// Check a store in full (the embedded store's pages and tasks) and whether it can serve.
    Check(check_cmd::CheckArgs),
    /// List the stores this build opens, how --store names each and the URL parameters each takes.
    Stores(stores_cmd::StoresArgs),
}

/// A command failure: a stable code (first on the stderr line) and a message.
#[derive(Debug)]
pub struct CliError {
    /// Stable code, e.g. `INVALID_QUEUE_NAME` or `IO_ERROR`.
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
}

impl CliError {
    /// A failure with this code and message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }

    /// Tells the operator what to do instead when the store refused the
    /// command as `UNSUPPORTED`; other errors pass unchanged.
    pub fn hint_if_unsupported(mut self, hint: &str) -> Self {
        if self.code == "UNSUPPORTED" {
            self.message.push_str("; ");
            self.message.push_str(hint);
        }
        self
    }
}

impl From<rdq_envelope::EnvelopeError> for CliError {
    fn from(e: rdq_envelope::EnvelopeError) -> Self {
        let message = match e.path() {
            Some(path) => format!("{path}: {}", e.message()),
            None => e.message().to_owned(),
        };
        Self::new(e.code().as_str(), message)
    }
}

impl From<rdq_engine::EngineError> for CliError {
    fn from(e: rdq_engine::EngineError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

/// Runs an operator command on a small runtime of its own.
fn block_on(work: impl std::future::Future<Output = Result<(), CliError>>) -> Result<(), CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new("IO_ERROR", format!("cannot start the runtime: {e}")))?
        .block_on(work)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Envelope(cmd) => envelope_cmd::run(cmd),
        Command::Bench(args) => bench::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Submit(args) => block_on(submit_cmd::run(*args)),
        Command::Task(cmd) => block_on(task_cmd::run(cmd)),
        Command::Queue(cmd) => block_on(queue_cmd::run(cmd)),
        Command::Dlq(cmd) => block_on(dlq_cmd::run(cmd)),
        Command::Schedule(cmd) => block_on(schedule_cmd::run(cmd)),
        Command::Source(cmd) => source_cmd::run(cmd),
        Command::Migrate(args) => block_on(migrate_cmd::run(args)),
        Command::Check(args) => block_on(check_cmd::run(args)),
        Command::Stores(args) => stores_cmd::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output went away (`rdq … | head`): stop quietly.
        Err(e) if e.code == output::BROKEN_PIPE => ExitCode::from(141),
        Err(e) => {
            eprintln!("{}: {}", e.code, e.message);
            ExitCode::FAILURE
        }
    }
}
