//! A data file that is not rdq's is refused with `CORRUPT_STORE` and left
//! exactly as it was: garbage bytes, another program's SQLite database, an
//! rdq store from a newer build. Never silently reinitialised.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use rdq_engine::store::admin::TaskCounts;
use std::path::Path;

use rdq_engine::EngineError;
use rdq_store_embedded::{APPLICATION_ID, DB_FILE_NAME, EmbeddedStore, SCHEMA_VERSION};

fn refused(dir: &Path) -> String {
    match EmbeddedStore::open(dir) {
        Err(EngineError::CorruptStore(msg)) => msg,
        Err(other) => panic!("expected CORRUPT_STORE, got {other:?}"),
        Ok(_) => panic!("a foreign file was opened as a store"),
    }
}

/// Opens twice (a second attempt must not find anything changed either) and
/// checks the file's bytes are untouched.
fn assert_refused_untouched(dir: &Path) -> String {
    let path = dir.join(DB_FILE_NAME);
    let before = std::fs::read(&path).unwrap();
    let msg = refused(dir);
    let msg_again = refused(dir);
    assert_eq!(msg, msg_again);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file was modified"
    );
    msg
}

#[test]
fn garbage_bytes_are_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let garbage: Vec<u8> = (0..10_000u32).map(|i| (i * 7919 % 251) as u8).collect();
    std::fs::write(dir.path().join(DB_FILE_NAME), &garbage).unwrap();
    let msg = assert_refused_untouched(dir.path());
    assert!(msg.contains("not an SQLite database"), "{msg}");
    assert!(msg.contains(DB_FILE_NAME), "{msg}");
}

#[test]
fn a_short_text_file_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(DB_FILE_NAME),
        "hello, I am not a database\n",
    )
    .unwrap();
    assert_refused_untouched(dir.path());
}

#[test]
fn an_sqlite_header_over_garbage_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend((0..8192u32).map(|i| (i * 31 % 256) as u8));
    std::fs::write(dir.path().join(DB_FILE_NAME), &bytes).unwrap();
    assert_refused_untouched(dir.path());
}

#[test]
fn a_foreign_sqlite_database_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
        conn.execute_batch(
            "CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount INTEGER);
             INSERT INTO invoices (amount) VALUES (42), (7);",
        )
        .unwrap();
    }
    let msg = assert_refused_untouched(dir.path());
    assert!(msg.contains("application_id"), "{msg}");
    // It is still the other program's database.
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM invoices", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2);
}

#[test]
fn a_foreign_wal_database_with_another_application_id_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA application_id = 1234;
             CREATE TABLE t (x);",
        )
        .unwrap();
    }
    assert_refused_untouched(dir.path());
}

#[test]
fn a_newer_schema_version_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    drop(EmbeddedStore::open(dir.path()).unwrap());
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
        let id: i32 = conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .unwrap();
        assert_eq!(id, APPLICATION_ID);
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    let msg = assert_refused_untouched(dir.path());
    assert!(msg.contains("newer"), "{msg}");
}

#[test]
fn an_rdq_file_missing_its_tables_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    drop(EmbeddedStore::open(dir.path()).unwrap());
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
        conn.execute_batch("DROP TABLE queue_counts").unwrap();
    }
    let msg = assert_refused_untouched(dir.path());
    assert!(msg.contains("queue_counts"), "{msg}");
}

#[tokio::test]
async fn an_empty_file_or_directory_becomes_a_store_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    // A zero-length file holds nothing to lose: it is initialised.
    std::fs::write(dir.path().join(DB_FILE_NAME), b"").unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    store.verify().await.unwrap();
    drop(store);
    // A missing nested directory is created.
    let nested = dir.path().join("a/b/c");
    let store = EmbeddedStore::open(&nested).unwrap();
    assert!(store.counts().await.unwrap().is_empty());
    assert_eq!(store.path(), nested.join(DB_FILE_NAME));
    drop(store);
    let store = EmbeddedStore::open(&nested).unwrap();
    store.verify().await.unwrap();
}

#[test]
fn a_data_directory_that_is_a_file_is_unavailable_not_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    match EmbeddedStore::open(&file) {
        Err(e) => assert_eq!(e.code(), "STORE_UNAVAILABLE", "{e}"),
        Ok(_) => panic!("opened a store inside a file"),
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}
