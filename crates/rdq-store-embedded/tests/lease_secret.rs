//! The lease secret the embedded store keeps: one per data directory, the
//! same for every store opened on it and after a restart, added to stores
//! written before it existed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use rdq_engine::store::admin::TaskLookup;
use std::sync::Arc;

use rdq_engine::{Engine, LeaseKey, ManualClock, Settlement, Store, SubmitRequest};
use rdq_envelope::Timestamp;
use rdq_store_embedded::{DB_FILE_NAME, EmbeddedStore};

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        Timestamp::from_unix_ms(1_800_000_000_000).unwrap(),
    ))
}

fn request() -> SubmitRequest {
    SubmitRequest {
        queue: "secrets".into(),
        handler_ref: "h".into(),
        payload: b"{}".to_vec(),
        payload_content_type: "application/json".into(),
        ..SubmitRequest::default()
    }
}

#[tokio::test]
async fn two_stores_on_one_directory_issue_identical_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let a = EmbeddedStore::open(dir.path()).unwrap();
    let b = EmbeddedStore::open(dir.path()).unwrap();
    let secret = a
        .lease_secret()
        .await
        .unwrap()
        .expect("a persistent secret");
    assert_eq!(b.lease_secret().await.unwrap(), Some(secret));
    assert_ne!(secret, [0; 32]);

    let other = tempfile::tempdir().unwrap();
    let c = EmbeddedStore::open(other.path()).unwrap();
    assert_ne!(
        c.lease_secret().await.unwrap(),
        Some(secret),
        "each store has its own secret"
    );
}

#[tokio::test]
async fn a_token_from_before_a_restart_still_settles_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let (id, text) = {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let engine = Engine::new(Arc::new(store.clone()), clock());
        engine.submit(request()).await.unwrap();
        let claimed = engine.claim("secrets", 1, None).await.unwrap().remove(0);
        let key = LeaseKey::of(&store).await.unwrap();
        (
            claimed.envelope.id,
            key.format(claimed.envelope.id, claimed.token),
        )
    };

    let store = EmbeddedStore::open(dir.path()).unwrap();
    let key = LeaseKey::of(&store).await.unwrap();
    let token = key.parse(id, &text).expect("the token survives a restart");
    let engine = Engine::new(Arc::new(store.clone()), clock());
    let leased = store.get(id).await.unwrap();
    let done = engine
        .settle(&leased, token, Settlement::Success)
        .await
        .unwrap();
    assert_eq!(done.status, rdq_envelope::Status::Succeeded);
}

#[tokio::test]
async fn a_store_written_before_the_secret_existed_gets_one_at_open() {
    let dir = tempfile::tempdir().unwrap();
    drop(EmbeddedStore::open(dir.path()).unwrap());
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
        conn.execute_batch("DROP TABLE meta").unwrap();
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let secret = store.lease_secret().await.unwrap().expect("added at open");
    drop(store);
    let again = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(again.lease_secret().await.unwrap(), Some(secret), "kept");
    again.verify().await.unwrap();
}
