//! Throwaway schemas for tests and benchmarks: [`crate::PostgresStore::open_temporary`]
//! makes a store in a schema of its own, and the schema is dropped with
//! everything in it when the store's last clone drops.

use std::time::Duration;

use rdq_envelope::TaskId;
use tokio_postgres::Config;

use crate::tls::PostgresTls;

/// A fresh schema name: `rdq_tmp_` and a new ULID, so names never collide
/// across processes and tell when they were made.
pub(crate) fn fresh_schema() -> String {
    format!("rdq_tmp_{}", TaskId::generate().to_string().to_lowercase())
}

/// Owns a temporary schema; dropping it drops the schema.
pub(crate) struct TemporarySchema {
    pub(crate) config: Config,
    pub(crate) tls: PostgresTls,
    pub(crate) schema: String,
}

impl Drop for TemporarySchema {
    fn drop(&mut self) {
        // Drop may run inside an async runtime or while one shuts down, so
        // the cleanup gets a thread and a small runtime of its own, and the
        // caller waits for it: the schema is gone when the store is.
        let config = self.config.clone();
        let tls = self.tls.clone();
        let schema = std::mem::take(&mut self.schema);
        let worker = std::thread::Builder::new()
            .name("rdq-drop-schema".into())
            .spawn(move || drop_schema(config, &tls, &schema));
        match worker.map(std::thread::JoinHandle::join) {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "cannot drop a temporary rdq schema"),
            _ => tracing::warn!("the thread dropping a temporary rdq schema failed"),
        }
    }
}

fn drop_schema(config: Config, tls: &PostgresTls, schema: &str) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let mut config = config;
        config.application_name("rdq-cleanup");
        config.connect_timeout(Duration::from_secs(5));
        let client = crate::pool::connect(&config, tls)
            .await
            .map_err(|e| e.to_string())?;
        // The store's own connections may still be open (idle, or holding a
        // transaction a cancelled caller left): end them first, so the drop
        // never waits on their locks.
        client
            .batch_execute(&format!(
                "SET lock_timeout = '10s';
                 SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                  WHERE application_name = '{schema}' AND pid <> pg_backend_pid();
                 DROP SCHEMA IF EXISTS {schema} CASCADE;"
            ))
            .await
            .map_err(|e| e.to_string())
    })
}
