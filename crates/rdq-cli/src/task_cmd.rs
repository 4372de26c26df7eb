//! `rdq task show ID`: one task, readable, with its attempt history.

use clap::Subcommand;
use rdq_envelope::Envelope;

use crate::CliError;
use crate::backend::{Backend, TargetArgs};
use crate::output;
use crate::output::{out, outln};

/// Subcommands of `rdq task`.
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Show a task: its fields and attempt history (`--json`: the envelope).
    Show {
        /// The task id.
        id: String,
        #[command(flatten)]
        target: TargetArgs,
    },
}

/// Runs `rdq task …`.
pub async fn run(cmd: TaskCommand) -> Result<(), CliError> {
    match cmd {
        TaskCommand::Show { id, target } => show(&id, &target).await,
    }
}

/// Prints one task for people, or its canonical JSON with `--json`.
pub async fn show(id: &str, target: &TargetArgs) -> Result<(), CliError> {
    let env = Backend::open(target).await?.task(id).await?;
    print(&env, target)
}

/// Prints `env` for people, or its canonical JSON with `--json`.
pub fn print(env: &Envelope, target: &TargetArgs) -> Result<(), CliError> {
    if target.json {
        outln!("{}", env.encode_string())?;
    } else {
        out!("{}", output::envelope(env))?;
    }
    Ok(())
}
