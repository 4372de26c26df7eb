//! `rdq migrate`: bring a store's schema up to this build's version now,
//! rather than on the first connection of a server or worker.

use clap::Args;

use crate::CliError;
use crate::output::outln;

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
    if args.store.starts_with("postgres://") || args.store.starts_with("postgresql://") {
        let store = rdq_store_postgres::PostgresStore::from_url(&args.store)
            .map_err(|e| CliError::new(e.code(), e.to_string()))?;
        let from = store
            .migrate()
            .await
            .map_err(|e| CliError::new(e.code(), e.to_string()))?;
        let to = rdq_store_postgres::SCHEMA_VERSION;
        if from == to {
            outln!(
                "schema {} is at version {to}: nothing to do",
                store.schema()
            )?;
        } else {
            outln!(
                "schema {} migrated from version {from} to {to}",
                store.schema()
            )?;
        }
        return Ok(());
    }
    // Every other store this build has brings its schema up to date on open.
    crate::stores::open_store(&args.store)?;
    outln!(
        "{}: up to date (this store migrates itself when opened)",
        args.store
    )
}
