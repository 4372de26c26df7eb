//! The embedded store (`rdq-store-embedded`): a directory path, rdq's
//! zero-setup default. It brings its schema up to date when opened, and
//! `rdq check` reads every page and envelope it holds.

use std::sync::Arc;

use futures::future::BoxFuture;
use rdq_engine::Store;
use rdq_store_embedded::EmbeddedStore;

use super::StoreEntry;
use crate::CliError;

/// The embedded store's registry entry.
pub const ENTRY: StoreEntry = StoreEntry {
    name: "embedded",
    feature: "store-embedded",
    schemes: &[],
    names: &[],
    paths: true,
    parameters: &[],
    config_sections: &[],
    open,
    migrate: None,
    check: Some(check),
};

fn open(dir: &str) -> BoxFuture<'_, Result<Arc<dyn Store>, CliError>> {
    Box::pin(async move {
        let store =
            EmbeddedStore::open(dir).map_err(|e| CliError::new(e.code(), format!("{dir}: {e}")))?;
        Ok(Arc::new(store) as Arc<dyn Store>)
    })
}

/// The full check that opening only bounds in time: SQLite's
/// `PRAGMA integrity_check` over every page, run on the file without
/// opening it as a store (so it also explains a store that open refuses),
/// then every envelope, its row and the counts, then readiness.
fn check(dir: &str) -> BoxFuture<'_, Result<String, CliError>> {
    Box::pin(async move {
        EmbeddedStore::check_files(dir)?;
        let store = EmbeddedStore::open(dir)?;
        store.verify().await?;
        store.ready().await?;
        Ok("ok (pages, indexes, envelopes and counts; ready)".to_owned())
    })
}
