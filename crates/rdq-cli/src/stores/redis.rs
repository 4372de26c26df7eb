//! The Redis store (`rdq-store-redis`): `redis://…`, or `rediss://…` over
//! TLS, a cluster by the `cluster` parameter (`docs/stores/redis.md`). It
//! connects on first use.

use std::sync::Arc;

use futures::future::BoxFuture;
use rdq_engine::Store;
use rdq_store_redis::RedisStore;

use super::StoreEntry;
use crate::CliError;

/// The Redis store's registry entry.
pub const ENTRY: StoreEntry = StoreEntry {
    name: "redis",
    feature: "store-redis",
    schemes: &["redis", "rediss"],
    names: &[],
    paths: false,
    parameters: &[
        // rdq's own.
        "prefix",
        "cluster",
        "wait_ms",
        "max_group",
        "promote",
        "tls_ca",
        "tls_cert",
        "tls_key",
        // Handed on to the `redis` crate (RESP2 or RESP3).
        "protocol",
    ],
    config_sections: &[],
    open,
    migrate: None,
    check: None,
};

fn open(url: &str) -> BoxFuture<'_, Result<Arc<dyn Store>, CliError>> {
    Box::pin(async move {
        // Connects on first use, inside the caller's runtime.
        let store = RedisStore::from_url(url)?;
        Ok(Arc::new(store) as Arc<dyn Store>)
    })
}
