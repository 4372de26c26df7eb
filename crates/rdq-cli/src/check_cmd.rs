//! `rdq check --store STORE`: is the store sound and able to serve?
//!
//! For the embedded store (a directory) this is the full check that opening
//! only bounds in time: SQLite's `PRAGMA integrity_check` over every page,
//! run on the file without opening it as a store (so it also explains a
//! store that open refuses), then every envelope, its row and the counts
//! (`EmbeddedStore::verify`). Every store is then asked whether it can
//! serve and write now (`Store::ready`).

use clap::Args;
use rdq_store_embedded::EmbeddedStore;

use crate::CliError;
use crate::output::outln;

/// Arguments of `rdq check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The store to check: a data directory, `postgres://…`, `redis://…`, `amqp://…`.
    #[arg(long, env = "RDQ_STORE")]
    store: String,
}

fn engine_err(e: rdq_engine::EngineError) -> CliError {
    CliError::new(e.code(), e.to_string())
}

/// Runs `rdq check`.
pub async fn run(args: CheckArgs) -> Result<(), CliError> {
    let spec = args.store.as_str();
    if spec.contains("://") || spec.starts_with("memory") {
        let store = crate::stores::open_store(spec)?;
        store.ready().await.map_err(engine_err)?;
        return outln!("{spec}: ok (ready)");
    }
    EmbeddedStore::check_files(spec).map_err(engine_err)?;
    let store = EmbeddedStore::open(spec).map_err(engine_err)?;
    store.verify().await.map_err(engine_err)?;
    rdq_engine::Store::ready(&store).await.map_err(engine_err)?;
    outln!("{spec}: ok (pages, indexes, envelopes and counts; ready)")
}
