//! The shared store compliance suite, run against fresh embedded stores (each
//! in its own temporary directory, removed when the check drops the store).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

rdq_compliance::store_tests!(|| async {
    rdq_store_embedded::EmbeddedStore::open_temporary().expect("a temporary embedded store")
});
