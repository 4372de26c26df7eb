//! The RabbitMQ store (`rdq-store-rabbitmq`): `amqp://…`, or `amqps://…`
//! over TLS (`docs/stores/rabbitmq.md`). It connects on first use, and the
//! first dial fails fast. It reads a queue's `queuey_compatible` section.

use std::sync::Arc;

use futures::future::BoxFuture;
use rdq_engine::Store;
use rdq_store_rabbitmq::{QUEUEY_SECTION, RabbitStore};

use super::StoreEntry;
use crate::CliError;

/// The RabbitMQ store's registry entry.
pub const ENTRY: StoreEntry = StoreEntry {
    name: "rabbitmq",
    feature: "store-rabbitmq",
    schemes: &["amqp", "amqps"],
    names: &[],
    paths: false,
    parameters: &[
        // rdq's own.
        "prefetch",
        "publish_channels",
        "queuey",
        "retry_granularity_ms",
        "defer_granularity_ms",
        "max_priority",
        "namespace",
        "connection_name",
        "reconnect_max_attempts",
        "op_timeout_ms",
        "tls_ca",
        "tls_cert",
        "tls_key",
        "tls_server_name",
        // Handed on to the AMQP client (lapin).
        "heartbeat",
        "frame_max",
        "channel_max",
        "connection_timeout",
        "auth_mechanism",
    ],
    config_sections: &[QUEUEY_SECTION],
    open,
    migrate: None,
    check: None,
};

fn open(url: &str) -> BoxFuture<'_, Result<Arc<dyn Store>, CliError>> {
    Box::pin(async move {
        let store =
            RabbitStore::from_url(url).map_err(|e| CliError::new(e.code(), e.to_string()))?;
        Ok(Arc::new(store) as Arc<dyn Store>)
    })
}
