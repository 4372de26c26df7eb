//! What the broker tests share: the local RabbitMQ's URL, a namespace per
//! test so tests never see each other's queues, and cleanup that deletes
//! every queue a test's stores declared.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs
)]

use std::sync::{Arc, Mutex};

use rdq_store_rabbitmq::{RabbitOptions, RabbitStore};

/// The broker on this machine (`RDQ_AMQP_URL` overrides).
pub fn amqp_url() -> String {
    std::env::var("RDQ_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// A fresh, unique lower-case token for queue names.
pub fn unique() -> String {
    rdq_envelope::TaskId::generate().to_string().to_lowercase()
}

/// Stores made for one test, remembered so their queues can be deleted.
#[derive(Clone, Default)]
pub struct Stores {
    made: Arc<Mutex<Vec<RabbitStore>>>,
    extra: Arc<Mutex<Vec<String>>>,
}

impl Stores {
    /// A store in `namespace` with `options` adjusted by `adjust`.
    pub fn make(&self, adjust: impl FnOnce(&mut RabbitOptions)) -> RabbitStore {
        let mut options = RabbitOptions::from_url(&amqp_url()).expect("the broker URL parses");
        adjust(&mut options);
        let store = RabbitStore::with_options(options);
        self.made.lock().unwrap().push(store.clone());
        store
    }

    /// Also delete these broker queues at cleanup (queues made by queuey).
    pub fn also_delete(&self, names: impl IntoIterator<Item = String>) {
        self.extra.lock().unwrap().extend(names);
    }

    /// Deletes every queue the stores declared, on a runtime of its own (the
    /// test's runtime, and with it the stores' connections, may be gone).
    pub fn cleanup(&self) {
        let mut names: Vec<String> = self
            .made
            .lock()
            .unwrap()
            .iter()
            .flat_map(RabbitStore::declared_queues)
            .collect();
        names.extend(self.extra.lock().unwrap().iter().cloned());
        names.sort();
        names.dedup();
        self.made.lock().unwrap().clear();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for cleanup");
        runtime.block_on(async {
            let store = RabbitStore::connect(&amqp_url())
                .await
                .expect("connect for cleanup");
            store
                .delete_broker_queues(&names)
                .await
                .expect("delete the test's queues");
            store.close();
        });
    }
}
