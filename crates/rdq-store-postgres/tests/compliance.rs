//! The shared store compliance suite against the PostgreSQL on this machine
//! (`RDQ_TEST_POSTGRES`, default `postgres://postgres@127.0.0.1:5432/test`):
//! every store the factory makes lives in a fresh schema of its own, dropped
//! when the check drops the store, so checks run in parallel and leave
//! nothing behind.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

rdq_compliance::store_tests!(|| async {
    rdq_store_postgres::PostgresStore::open_temporary(&common::url())
        .await
        .expect("a temporary PostgreSQL store")
});
