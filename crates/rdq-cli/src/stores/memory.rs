//! The in-memory store (`rdq-store-memory`): `memory:`, for trials and
//! tests; nothing survives the process.

use std::sync::Arc;

use futures::future::BoxFuture;
use rdq_engine::Store;
use rdq_store_memory::MemoryStore;

use super::StoreEntry;
use crate::CliError;

/// The in-memory store's registry entry.
pub const ENTRY: StoreEntry = StoreEntry {
    name: "memory",
    feature: "store-memory",
    schemes: &["memory"],
    // `memory` alone has always named it too.
    names: &["memory:", "memory"],
    paths: false,
    parameters: &[],
    config_sections: &[],
    open,
    migrate: None,
    check: None,
};

fn open(spec: &str) -> BoxFuture<'_, Result<Arc<dyn Store>, CliError>> {
    Box::pin(async move {
        if !matches!(spec, "memory:" | "memory" | "memory://") {
            return Err(CliError::new(
                "INVALID_ARGUMENT",
                format!(
                    "{spec:?}: the in-memory store is named memory: alone, with no host, path or parameter"
                ),
            ));
        }
        Ok(Arc::new(MemoryStore::new()) as Arc<dyn Store>)
    })
}
