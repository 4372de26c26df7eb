//! The PostgreSQL store (`rdq-store-postgres`): `postgres://…` or
//! `postgresql://…`, options as query parameters
//! (`docs/stores/postgres.md`). It connects and migrates on first use;
//! `rdq migrate` does it now.

use std::sync::Arc;

use futures::future::BoxFuture;
use rdq_engine::Store;
use rdq_store_postgres::{PostgresStore, SCHEMA_VERSION};

use super::StoreEntry;
use crate::CliError;

/// The PostgreSQL store's registry entry.
pub const ENTRY: StoreEntry = StoreEntry {
    name: "postgres",
    feature: "store-postgres",
    schemes: &["postgres", "postgresql"],
    names: &[],
    paths: false,
    parameters: &[
        // rdq's own.
        "schema",
        "pool_size",
        "wait_ms",
        "max_group",
        // TLS, as libpq names it; rdq implements these.
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslsni",
        // Handed on to tokio-postgres, which refuses any other.
        "sslnegotiation",
        "user",
        "password",
        "dbname",
        "options",
        "application_name",
        "host",
        "hostaddr",
        "port",
        "connect_timeout",
        "tcp_user_timeout",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_retries",
        "target_session_attrs",
        "channel_binding",
        "load_balance_hosts",
    ],
    config_sections: &[],
    open,
    migrate: Some(migrate),
    check: None,
};

fn open(url: &str) -> BoxFuture<'_, Result<Arc<dyn Store>, CliError>> {
    Box::pin(async move {
        // Connects and migrates on first use, inside the caller's runtime.
        let store = PostgresStore::from_url(url)?;
        Ok(Arc::new(store) as Arc<dyn Store>)
    })
}

fn migrate(url: &str) -> BoxFuture<'_, Result<String, CliError>> {
    Box::pin(async move {
        let store = PostgresStore::from_url(url)?;
        let from = store.migrate().await?;
        let schema = store.schema();
        Ok(if from == SCHEMA_VERSION {
            format!("schema {schema} is at version {SCHEMA_VERSION}: nothing to do")
        } else {
            format!("schema {schema} migrated from version {from} to {SCHEMA_VERSION}")
        })
    })
}
