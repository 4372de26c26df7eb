//! `rdq migrate`: bring a store's schema up to this build's version now,
//! rather than on the first connection of a server or worker.

use clap::Args;

use crate::CliError;
use crate::output::outln;
use crate::stores::Registry;

/// Arguments of `rdq migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The store to migrate (`postgres://…`). The embedded store migrates
    /// itself when opened, so a directory path is checked and reported.
    #[arg(long, env = "RDQ_STORE")]
    store: String,
}

/// Runs `rdq migrate`.
pub async fn run(args: MigrateArgs) -> Result<(), CliError> {
    let entry = Registry::compiled().resolve(&args.store)?;
    if let Some(migrate) = entry.migrate {
        let report = migrate(&args.store).await?;
        return outln!("{report}");
    }
    // Every other store brings its schema up to date when opened.
    (entry.open)(&args.store).await?;
    outln!(
        "{}: up to date (this store migrates itself when opened)",
        args.store
    )
}
