//! `rdq check --store STORE`: is the store sound and able to serve?
//!
//! A store with a full check of its own runs it (the embedded store reads
//! every page, envelope and count: `crate::stores`); every other store is
//! asked whether it can serve and write now (`Store::ready`).

use clap::Args;

use crate::CliError;
use crate::output::outln;
use crate::stores::Registry;

/// Arguments of `rdq check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The store to check: a data directory, `postgres://…`, `redis://…`, `amqp://…`.
    #[arg(long, env = "RDQ_STORE")]
    store: String,
}

/// Runs `rdq check`.
pub async fn run(args: CheckArgs) -> Result<(), CliError> {
    let spec = args.store.as_str();
    let entry = Registry::compiled().resolve(spec)?;
    if let Some(check) = entry.check {
        let report = check(spec).await?;
        return outln!("{spec}: {report}");
    }
    let store = (entry.open)(spec).await?;
    store
        .ready()
        .await
        .map_err(|e| CliError::new(e.code(), e.to_string()))?;
    outln!("{spec}: ok (ready)")
}
