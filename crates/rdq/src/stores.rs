//! Opening an engine on a store in one call, for the common cases. Any other
//! store (or a custom clock) goes through `Engine::new(store, clock)`.

use std::sync::Arc;

use rdq_engine::{Engine, SystemClock};
use rdq_store_memory::MemoryStore;

#[cfg(feature = "embedded")]
use crate::error::Error;

/// The embedded store in directory `dir` (created if absent), on the system
/// clock: rdq's zero-setup default, durable across crashes.
#[cfg(feature = "embedded")]
pub fn open_embedded(dir: impl AsRef<std::path::Path>) -> Result<Engine, Error> {
    let store = rdq_store_embedded::EmbeddedStore::open(dir)?;
    Ok(Engine::new(Arc::new(store), Arc::new(SystemClock)))
}

/// An in-memory store on the system clock: nothing survives the process.
/// For tests in virtual time use [`crate::testing::TestBackend`].
pub fn open_memory() -> Engine {
    Engine::new(Arc::new(MemoryStore::new()), Arc::new(SystemClock))
}
