//! Opening a store from the one string users type everywhere (`--store`):
//! a bare filesystem path is the embedded store in that directory; other
//! stores are URLs (`postgres://…`: the PostgreSQL store).

use std::sync::Arc;

use rdq_engine::Store;

use crate::CliError;

/// Opens the store `spec` names: `memory:` (in-process, for trials), a
/// directory path (the embedded store), or a URL of a store this build has.
pub fn open_store(spec: &str) -> Result<Arc<dyn Store>, CliError> {
    if spec == "memory:" || spec == "memory://" || spec == "memory" {
        return Ok(Arc::new(rdq_store_memory::MemoryStore::new()));
    }
    if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        // Connects and migrates on first use, inside the caller's runtime.
        let store = rdq_store_postgres::PostgresStore::from_url(spec)
            .map_err(|e| CliError::new(e.code(), e.to_string()))?;
        return Ok(Arc::new(store));
    }
    if spec.starts_with("redis://") || spec.starts_with("rediss://") {
        // Connects on first use, inside the caller's runtime.
        let store = rdq_store_redis::RedisStore::from_url(spec)
            .map_err(|e| CliError::new(e.code(), e.to_string()))?;
        return Ok(Arc::new(store));
    }
    if spec.starts_with("amqp://") || spec.starts_with("amqps://") {
        // Connects on first use, inside the caller's runtime; the first dial fails fast.
        let store = rdq_store_rabbitmq::RabbitStore::from_url(spec)
            .map_err(|e| CliError::new(e.code(), e.to_string()))?;
        return Ok(Arc::new(store));
    }
    if let Some((scheme, _)) = spec.split_once("://") {
        return Err(CliError::new(
            "UNSUPPORTED_STORE",
            format!(
                "no {scheme}:// store in this build; use a directory path (the embedded store) or memory:"
            ),
        ));
    }
    let store = rdq_store_embedded::EmbeddedStore::open(spec)
        .map_err(|e| CliError::new(e.code(), format!("{spec}: {e}")))?;
    Ok(Arc::new(store))
}
