//! The lease secret the PostgreSQL store keeps: one per schema, the same for
//! every node (even nodes asking for it at once) and after a restart.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use rdq_engine::{LeaseKey, LeaseToken, Store};
use rdq_envelope::TaskId;
use rdq_store_postgres::PostgresStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_on_one_schema_issue_identical_tokens() {
    let first = PostgresStore::open_temporary(&common::url()).await.unwrap();
    let url = common::url_with_schema(first.schema());
    let mut asking = Vec::new();
    for _ in 0..4 {
        let url = url.clone();
        asking.push(tokio::spawn(async move {
            PostgresStore::from_url(&url)
                .unwrap()
                .lease_secret()
                .await
                .unwrap()
        }));
    }
    let mut secrets = Vec::new();
    for a in asking {
        secrets.push(a.await.unwrap().expect("a persistent secret"));
    }
    secrets.push(first.lease_secret().await.unwrap().unwrap());
    assert!(
        secrets.windows(2).all(|w| w[0] == w[1]),
        "one secret per schema"
    );

    let id = TaskId::generate();
    let text = LeaseKey::of(&first)
        .await
        .unwrap()
        .format(id, LeaseToken(3));
    let restarted = PostgresStore::from_url(&url).unwrap();
    let key = LeaseKey::of(&restarted).await.unwrap();
    assert_eq!(key.parse(id, &text), Ok(LeaseToken(3)));

    let other = PostgresStore::open_temporary(&common::url()).await.unwrap();
    assert_ne!(
        other.lease_secret().await.unwrap(),
        Some(secrets[0]),
        "each schema has its own secret"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reachable_store_is_ready() {
    let store = PostgresStore::open_temporary(&common::url()).await.unwrap();
    store.ready().await.unwrap();
    let unreachable =
        PostgresStore::from_url("postgres://postgres@127.0.0.1:1/test?wait_ms=0").unwrap();
    assert_eq!(
        Store::ready(&unreachable).await.unwrap_err().code(),
        "STORE_UNAVAILABLE"
    );
}
