//! Damage found at open and readiness: a data file whose pages are damaged in
//! the middle is refused with `CORRUPT_STORE` (and left as it was) instead of
//! opening and failing most writes, a full check reports it too, and a store
//! whose writes fail says it is not ready until they commit again.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{Seek, SeekFrom, Write};
use std::time::Duration;

use rdq_engine::{EngineError, NewTask, Store};
use rdq_envelope::{Envelope, Timestamp};
use rdq_store_embedded::{DB_FILE_NAME, EmbeddedOptions, EmbeddedStore};

fn task(n: usize) -> NewTask {
    let payload = format!("{{\"n\":{n},\"pad\":\"{}\"}}", "x".repeat(1000));
    let now = Timestamp::from_unix_ms(1_800_000_000_000).unwrap();
    NewTask {
        envelope: Envelope::new("q", "h", payload.as_bytes(), "application/json", now),
        idempotency_key: None,
        unique: None,
    }
}

/// Pseudo-random bytes (xorshift), the same every run.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_damaged_in_the_middle_is_refused_at_open_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        for chunk in 0..30 {
            let results = store
                .submit((0..100).map(|i| task(chunk * 100 + i)).collect())
                .await;
            assert!(results.iter().all(Result::is_ok));
        }
    }
    let path = dir.path().join(DB_FILE_NAME);
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(
        len > 1_000_000,
        "the store should span many pages ({len} bytes)"
    );
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.seek(SeekFrom::Start(len / 2)).unwrap();
    file.write_all(&noise(40 * 1024)).unwrap();
    file.sync_all().unwrap();
    drop(file);
    let before = std::fs::read(&path).unwrap();

    for _ in 0..2 {
        match EmbeddedStore::open(dir.path()) {
            Err(EngineError::CorruptStore(msg)) => assert!(msg.contains("damaged"), "{msg}"),
            Err(other) => panic!("expected CORRUPT_STORE, got {other:?}"),
            Ok(_) => panic!("a damaged store was opened"),
        }
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file was modified"
    );
    let full = EmbeddedStore::check_files(dir.path()).unwrap_err();
    assert_eq!(full.code(), "CORRUPT_STORE", "{full}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intact_store_passes_the_full_check() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    assert!(store.submit(vec![task(1)]).await[0].is_ok());
    EmbeddedStore::check_files(dir.path()).unwrap();
    let missing = tempfile::tempdir().unwrap();
    assert_eq!(
        EmbeddedStore::check_files(missing.path())
            .unwrap_err()
            .code(),
        "INVALID_ARGUMENT"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_whose_writes_fail_is_not_ready_until_they_commit_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = EmbeddedOptions::default();
    options.busy_timeout = Duration::from_millis(50);
    let store = EmbeddedStore::open_with(dir.path(), options).unwrap();
    assert!(store.submit(vec![task(1)]).await[0].is_ok());
    store.ready().await.unwrap();

    // Another process holds the write lock: writes fail.
    let other = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let refused = store.submit(vec![task(2)]).await;
    assert_eq!(refused[0].as_ref().unwrap_err().code(), "STORE_UNAVAILABLE");
    assert_eq!(store.ready().await.unwrap_err().code(), "STORE_UNAVAILABLE");

    other.execute_batch("ROLLBACK").unwrap();
    drop(other);
    store.ready().await.unwrap();
    assert!(store.submit(vec![task(3)]).await[0].is_ok());
}
