//! The shared store compliance suite against the Redis on this machine
//! (`RDQ_TEST_REDIS`, default `redis://127.0.0.1:6379`): every store the
//! factory makes lives under a fresh key prefix of its own, whose keys are
//! deleted when the check drops the store, so checks run in parallel and
//! leave nothing behind.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

rdq_compliance::store_tests!(|| async {
    rdq_store_redis::RedisStore::open_temporary(&common::url())
        .await
        .expect("a temporary Redis store")
});
