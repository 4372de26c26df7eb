//! `rdq`: the operator's command-line tool.
//!
//! Each subcommand lives in its own module; `main` only parses arguments and
//! turns a failure into a stable code on stderr and a non-zero exit status.

#![forbid(unsafe_code)]

mod bench;
mod envelope_cmd;
mod input;
mod stores;

use std::process::ExitCode;

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
    /// Measure a store with the workloads of SPEC §10 (drain, latency, retry).
    Bench(bench::BenchArgs),
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Envelope(cmd) => envelope_cmd::run(cmd),
        Command::Bench(args) => bench::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: {}", e.code, e.message);
            ExitCode::FAILURE
        }
    }
}
