//! A task id is stored once per installation, however it arrives: twice in
//! one group, again later, or in another queue. Most new tasks skip the
//! submit script (a fresh id needs no check, `docs/stores/redis.md`), so
//! these cases prove the path that does check still sees them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use rdq_engine::store::admin::{TaskCounts, TaskLookup};
use rdq_engine::{EngineError, NewTask, Store, Submitted};
use rdq_envelope::Envelope;

fn fixture() -> Envelope {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../compliance/fixtures/valid/empty_payload.json"
    );
    Envelope::decode(&std::fs::read(path).unwrap()).unwrap()
}

fn plain(envelope: &Envelope) -> NewTask {
    NewTask {
        envelope: envelope.clone(),
        idempotency_key: None,
        unique: None,
    }
}

fn is_taken(result: &Result<Submitted, EngineError>) -> bool {
    matches!(result, Err(EngineError::InvalidArgument(m)) if m.contains("already exists"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_is_stored_once_within_a_group_across_groups_and_across_queues() {
    let store = rdq_store_redis::RedisStore::open_temporary(&common::url())
        .await
        .expect("a temporary Redis store");
    let first = fixture();
    let mut second = first.clone();
    second.handler_ref = "another-handler".into();
    let mut elsewhere = first.clone();
    elsewhere.queue = "emails.other".into();

    // Twice in one group: the first wins, the second is refused.
    let results = store.submit(vec![plain(&first), plain(&second)]).await;
    assert!(
        matches!(&results[0], Ok(Submitted::Created(_))),
        "{results:?}"
    );
    assert!(is_taken(&results[1]), "{results:?}");
    // Again in a later group, and in another queue.
    for again in [&second, &elsewhere, &first] {
        let results = store.submit(vec![plain(again)]).await;
        assert!(
            is_taken(&results[0]),
            "{} in {}: {results:?}",
            again.id,
            again.queue
        );
    }
    let stored = store.get(first.id).await.unwrap();
    assert_eq!(stored.handler_ref, first.handler_ref);
    assert_eq!(stored.queue, first.queue);
    let counts = store.counts().await.unwrap();
    let pending: u64 = counts.iter().map(|c| c.pending).sum();
    assert_eq!(pending, 1, "{counts:?}");
}
