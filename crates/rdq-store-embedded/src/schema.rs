//! The on-disk format: the schema, how a data file is recognised as rdq's,
//! and how connections are opened and tuned.
//!
//! A file is rdq's when its SQLite header carries rdq's `application_id` and a
//! `user_version` this build understands. Everything else (bytes that are not
//! SQLite, another program's database, a newer rdq's schema) is refused with
//! `CORRUPT_STORE` before anything writes to it, so a wrong path can never be
//! silently "initialised" over somebody's data. A brand-new database is
//! initialised in one rollback-journal transaction (schema, version and
//! application id together) and only then switched to WAL, so the header
//! always says what the file is, even after a crash during creation.

use std::path::Path;
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension};

use crate::error::{from_open, from_sql};
use rdq_engine::EngineError;

/// `PRAGMA application_id` of an rdq data file: the ASCII bytes `rdq1`.
pub const APPLICATION_ID: i32 = 0x7264_7131;

/// `PRAGMA user_version` of the schema this build writes and reads.
pub const SCHEMA_VERSION: i32 = 8;

/// Status codes stored in `tasks.status`.
pub(crate) mod status {
    pub(crate) const PENDING: i64 = 0;
    pub(crate) const IN_FLIGHT: i64 = 1;
    pub(crate) const SUCCEEDED: i64 = 2;
    pub(crate) const DEAD: i64 = 3;
}

/// The schema (version 5). The envelope bytes are the source of truth; every other
/// column of `tasks` is derived from them (see `columns.rs`) for the queries'
/// sake. Partial indexes keep each hot lookup an index seek over only the rows
/// it can match: claimable PENDING tasks, leased IN_FLIGHT tasks, the DLQ and
/// prunable SUCCEEDED tasks.
const SCHEMA: &str = "
CREATE TABLE tasks (
    seq              INTEGER PRIMARY KEY,
    id               BLOB    NOT NULL,
    queue            TEXT    NOT NULL,
    status           INTEGER NOT NULL,
    priority         INTEGER NOT NULL,
    next_attempt_at  INTEGER,
    lease_expires_at INTEGER,
    lease_attempt    INTEGER,
    error_type       TEXT,
    finished_at      INTEGER,
    idempotency_key  TEXT,
    envelope         BLOB    NOT NULL,
    claimed_at       INTEGER,
    flow_key         TEXT,
    cancel_requested INTEGER
);
CREATE UNIQUE INDEX tasks_id ON tasks (id);
CREATE INDEX tasks_queue ON tasks (queue, id);
CREATE INDEX tasks_claim ON tasks (queue, priority DESC, next_attempt_at, id) WHERE status = 0;
CREATE INDEX tasks_lease ON tasks (lease_expires_at) WHERE status = 1;
CREATE INDEX tasks_done ON tasks (queue, finished_at) WHERE status = 2;
CREATE INDEX tasks_dead ON tasks (queue, id) WHERE status = 3;
CREATE UNIQUE INDEX tasks_idempotency ON tasks (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE TABLE queues (
    name   TEXT PRIMARY KEY,
    policy TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE queue_counts (
    queue     TEXT PRIMARY KEY,
    pending   INTEGER NOT NULL DEFAULT 0,
    in_flight INTEGER NOT NULL DEFAULT 0,
    succeeded INTEGER NOT NULL DEFAULT 0,
    dead      INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
";

/// Version 2 adds `tasks.claimed_at`: a claim writes only the row's columns
/// and leaves the envelope bytes as they were (see `columns::stored`).
/// Version 1 kept the claim counter only for leased rows; a claim now counts
/// on from the column, so every row gets its envelope's.
const V1_TO_V2: &str = "ALTER TABLE tasks ADD COLUMN claimed_at INTEGER;
UPDATE tasks SET lease_attempt = coalesce(json_extract(CAST(envelope AS TEXT), '$.claim_count'), 0)
    WHERE status != 1;";

/// Version 4 adds flow control (`docs/flow-control.md`): each task's flow
/// key in `tasks.flow_key`, two partial indexes over keyed tasks, and each
/// flow-controlled queue's `FlowLedger` in `flows`. Written so that it can
/// run on a store that already has any of it (`IF NOT EXISTS`; the column is
/// added by [`add_flow_key`]); creating a store runs it too.
///
/// `tasks.flow_key` is the task's `rdq.flow_key` header, fixed at submit.
/// A task without one stores NULL, except in a queue with a `flows` row,
/// where it stores `''` (the key such tasks share): a queue gets its row at
/// its first flow-controlled claim or throttle, which also turns every NULL
/// of its unfinished tasks into `''` in the same transaction. So the partial
/// indexes hold every PENDING and IN_FLIGHT task of a flow-controlled queue
/// and, elsewhere, keyed tasks only: a queue without flow control that never
/// sets a flow key never writes an entry to either of them.
const FLOW: &str = "
CREATE INDEX IF NOT EXISTS tasks_flow
    ON tasks (queue, flow_key, priority DESC, next_attempt_at, id, lease_attempt)
    WHERE status = 0 AND flow_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_busy ON tasks (queue, flow_key)
    WHERE status = 1 AND flow_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS flows (
    queue  TEXT PRIMARY KEY,
    ledger TEXT NOT NULL
) WITHOUT ROWID;
";

/// Fills `tasks.flow_key` of an upgraded store from the envelopes' headers
/// (finished tasks never need it; a dead one may be redriven).
const FLOW_KEYS_FROM_ENVELOPES: &str =
    "UPDATE tasks SET flow_key = json_extract(CAST(envelope AS TEXT), '$.headers.\"rdq.flow_key\"')
    WHERE status != 2 AND instr(envelope, CAST('\"rdq.flow_key\"' AS BLOB)) > 0
    AND json_valid(CAST(envelope AS TEXT));";

/// Version 5 adds `tasks.cancel_requested`: 1 while an IN_FLIGHT task has
/// been asked to stop, NULL otherwise. A settle's compare-and-swap refuses
/// a new state decided without the request (a worker's stale copy), so a
/// failure cannot overwrite the cancel with a retry (`writer::work`).
/// Older rows need no value: no older build could ask a task to stop.
/// Added by [`add_cancel_requested`] (a store created by a build that had
/// it already has it).
const V5_CANCEL: &str = "ALTER TABLE tasks ADD COLUMN cancel_requested INTEGER;";

/// Version 6 adds periodic schedules (`docs/schedules.md`): one row per
/// schedule, its definition as JSON (the store never reads it), the cursor
/// `last_due` a fire compares and moves in the transaction that submits the
/// fire's tasks, the last task (for the overlap policy) and counters.
/// `IF NOT EXISTS`, as [`FLOW`]: creating a store runs it too.
const V6_SCHEDULES: &str = "
CREATE TABLE IF NOT EXISTS schedules (
    name         TEXT    PRIMARY KEY,
    owner        TEXT    NOT NULL,
    definition   TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    last_due     INTEGER,
    last_task    BLOB,
    last_fire_at INTEGER,
    fires        INTEGER NOT NULL DEFAULT 0,
    skips        TEXT    NOT NULL DEFAULT '{}'
) WITHOUT ROWID;
";

/// Version 7 adds unique keys (`docs/uniqueness.md`): per queue and slot,
/// the task that took the slot last (`writer::unique`); whether it still
/// holds it is read from the task's row. A version-6 build would submit
/// past a held key, so it must not open a version-7 store.
const V7_UNIQUE: &str = "
CREATE TABLE IF NOT EXISTS unique_slots (
    queue TEXT NOT NULL,
    slot  TEXT NOT NULL,
    task  BLOB NOT NULL,
    PRIMARY KEY (queue, slot)
) WITHOUT ROWID;
";

/// Version 8 adds sources' cursors (`docs/sources.md`): per source and
/// partition, the position of the next record to submit and when it last
/// moved. An ingest compares and moves it in the transaction that submits
/// its run's tasks (`writer::sources`). A version-7 build would not know
/// the table, so it must not open a version-8 store. `next` holds the
/// position's 64 bits as SQLite's signed integer (`sources::to_column`).
const V8_SOURCES: &str = "
CREATE TABLE IF NOT EXISTS source_cursors (
    source        TEXT    NOT NULL,
    partition     TEXT    NOT NULL,
    next          INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (source, partition)
) WITHOUT ROWID;
";

/// Settings the store itself keeps, such as the lease secret. Not versioned:
/// every open creates the table if it is missing (a store written before it
/// existed), and builds that do not know it ignore it.
const META: &str = "CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value BLOB NOT NULL
) WITHOUT ROWID;";

/// The `meta` key of the secret lease tokens are keyed with.
const LEASE_SECRET_KEY: &str = "lease_secret";

/// Tables a store must have.
const TABLES: [&str; 3] = ["tasks", "queues", "queue_counts"];

/// Connection tuning shared by the writer and the readers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tuning {
    /// Page size of a database this connection creates (an existing one
    /// keeps its own: SQLite changes it only by a `VACUUM` outside WAL mode).
    pub(crate) page_size: u32,
    pub(crate) cache_kib: u32,
    pub(crate) busy_timeout: Duration,
    /// Time the integrity check at open may take (see `integrity.rs`).
    pub(crate) check_budget: Duration,
}

/// What an existing file turned out to be.
enum Found {
    /// An SQLite database with nothing in it (a zero-length file, or a crash
    /// before the first transaction committed): safe to initialise.
    Empty,
    /// An rdq store of a version this build reads (the version).
    Rdq(i32),
}

/// Opens (creating if absent) the write connection to the store at `path`:
/// validated, initialised, in WAL mode with `synchronous=FULL`.
pub(crate) fn open_writer(path: &Path, tuning: Tuning) -> Result<Connection, EngineError> {
    let existing = match std::fs::metadata(path) {
        Ok(meta) => meta.len() > 0,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            return Err(EngineError::Unavailable(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    if existing {
        // Look before touching: a read-only connection cannot change the file,
        // whatever it turns out to be.
        let probe = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| from_open(path, e))?;
        inspect(&probe, path)?;
        crate::integrity::quick_check(&probe, path, tuning.check_budget)?;
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| from_open(path, e))?;
    conn.busy_timeout(tuning.busy_timeout)
        .map_err(|e| from_open(path, e))?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| from_open(path, e))?;
    conn.pragma_update(None, "page_size", tuning.page_size)
        .map_err(|e| from_open(path, e))?;
    initialise(&conn, path)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(|e| from_open(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(EngineError::Unavailable(format!(
            "{} cannot use write-ahead logging (journal_mode is {mode})",
            path.display()
        )));
    }
    // Set again and read back: acknowledging a write promises it was fsynced.
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| from_open(path, e))?;
    let synchronous: i64 = conn
        .pragma_query_value(None, "synchronous", |row| row.get(0))
        .map_err(|e| from_open(path, e))?;
    if synchronous != 2 {
        return Err(EngineError::Unavailable(format!(
            "{} refused synchronous=FULL (it is {synchronous})",
            path.display()
        )));
    }
    // Keep the WAL file from growing without bound after a burst.
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)
        .map_err(|e| from_open(path, e))?;
    tune(&conn, tuning).map_err(|e| from_open(path, e))?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// Opens a read connection to an already-opened store.
pub(crate) fn open_reader(path: &Path, tuning: Tuning) -> Result<Connection, EngineError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| from_open(path, e))?;
    conn.busy_timeout(tuning.busy_timeout)
        .map_err(|e| from_open(path, e))?;
    tune(&conn, tuning).map_err(|e| from_open(path, e))?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

fn tune(conn: &Connection, tuning: Tuning) -> rusqlite::Result<()> {
    // The query planner stability guarantee: plans never depend on bound
    // values. Without it SQLite re-prepares a statement whenever a new value
    // is bound to a `LIMIT ?` or to some `col = ?` terms, which on the hot
    // path means re-planning nearly every claim, settle and reap.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    conn.pragma_update(None, "cache_size", -i64::from(tuning.cache_kib))?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    Ok(())
}

/// Creates the schema in an empty database, in one transaction, and
/// re-validates whatever is there (another process may have won the race).
fn initialise(conn: &Connection, path: &Path) -> Result<(), EngineError> {
    conn.execute_batch("BEGIN EXCLUSIVE")
        .map_err(|e| from_open(path, e))?;
    let result = match inspect(conn, path) {
        Ok(Found::Rdq(SCHEMA_VERSION)) => Ok(()),
        Ok(Found::Rdq(from)) => upgrade(conn, from).map_err(|e| from_open(path, e)),
        Ok(Found::Empty) => create(conn).map_err(|e| from_open(path, e)),
        Err(e) => Err(e),
    }
    .and_then(|()| ensure_lease_secret(conn, path));
    match result {
        Ok(()) => conn.execute_batch("COMMIT").map_err(|e| from_open(path, e)),
        Err(e) => {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            Err(e)
        }
    }
}

/// Creates the `meta` table and the lease secret where they are missing
/// (inside the caller's exclusive transaction, so two processes opening one
/// new store agree on one secret).
fn ensure_lease_secret(conn: &Connection, path: &Path) -> Result<(), EngineError> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| {
        EngineError::Unavailable(format!("no randomness for the lease secret: {e}"))
    })?;
    conn.execute_batch(META).map_err(|e| from_open(path, e))?;
    conn.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES (?1, ?2)",
        rusqlite::params![LEASE_SECRET_KEY, &secret[..]],
    )
    .map_err(|e| from_open(path, e))?;
    Ok(())
}

/// The store's lease secret (see [`ensure_lease_secret`]).
pub(crate) fn lease_secret(conn: &Connection, path: &Path) -> Result<[u8; 32], EngineError> {
    let value: Vec<u8> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = ?1",
            [LEASE_SECRET_KEY],
            |row| row.get(0),
        )
        .map_err(|e| from_open(path, e))?;
    value.try_into().map_err(|v: Vec<u8>| {
        EngineError::CorruptStore(format!(
            "{}: the stored lease secret is {} bytes, not 32",
            path.display(),
            v.len()
        ))
    })
}

/// Brings an older store (version `from`) to the current version (inside
/// the caller's exclusive transaction). Version 3 changes no table: it
/// marks stores that may hold successes written as columns only
/// (`columns::stored`), which a version-2 build would misread. Version 4
/// adds flow control ([`FLOW`]); a version-3 build would store tasks
/// without their flow key. Version 5 adds [`V5_CANCEL`]; a version-4 build
/// would settle over a cancel request. Version 6 adds [`V6_SCHEDULES`]; a
/// version-5 build would not know the table. Version 7 adds [`V7_UNIQUE`].
/// Version 8 adds [`V8_SOURCES`].
fn upgrade(conn: &Connection, from: i32) -> rusqlite::Result<()> {
    tracing::info!(
        from,
        "upgrading an rdq store to schema version {SCHEMA_VERSION}"
    );
    if from < 2 {
        conn.execute_batch(V1_TO_V2)?;
    }
    if from < 4 {
        add_flow_key(conn)?;
        conn.execute_batch(FLOW)?;
        conn.execute_batch(FLOW_KEYS_FROM_ENVELOPES)?;
    }
    if from < 5 {
        add_cancel_requested(conn)?;
    }
    if from < 6 {
        conn.execute_batch(V6_SCHEDULES)?;
    }
    if from < 7 {
        conn.execute_batch(V7_UNIQUE)?;
    }
    if from < 8 {
        conn.execute_batch(V8_SOURCES)?;
    }
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
}

fn create(conn: &Connection) -> rusqlite::Result<()> {
    tracing::info!("initialising a new rdq store, schema version {SCHEMA_VERSION}");
    conn.pragma_update(None, "application_id", APPLICATION_ID)?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    conn.execute_batch(SCHEMA)?;
    conn.execute_batch(FLOW)?;
    conn.execute_batch(V6_SCHEDULES)?;
    conn.execute_batch(V7_UNIQUE)?;
    conn.execute_batch(V8_SOURCES)
}

/// Adds `tasks.flow_key` unless the table has it already.
fn add_flow_key(conn: &Connection) -> rusqlite::Result<()> {
    let present = conn
        .query_row(
            "SELECT 1 FROM pragma_table_info('tasks') WHERE name = 'flow_key'",
            [],
            |_| Ok(()),
        )
        .optional()?;
    if present.is_none() {
        conn.execute_batch("ALTER TABLE tasks ADD COLUMN flow_key TEXT;")?;
    }
    Ok(())
}

fn add_cancel_requested(conn: &Connection) -> rusqlite::Result<()> {
    let present = conn
        .query_row(
            "SELECT 1 FROM pragma_table_info('tasks') WHERE name = 'cancel_requested'",
            [],
            |_| Ok(()),
        )
        .optional()?;
    if present.is_none() {
        conn.execute_batch(V5_CANCEL)?;
    }
    Ok(())
}

/// Decides what the database behind `conn` is, without writing to it.
fn inspect(conn: &Connection, path: &Path) -> Result<Found, EngineError> {
    let shown = path.display();
    let not_rdq = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            EngineError::CorruptStore(format!(
                "{shown} is not an rdq store: it is not an SQLite database ({e}); refusing to touch it"
            ))
        }
        _ => from_open(path, e),
    };
    let application_id: i32 = conn
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(not_rdq)?;
    let version: i32 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(not_rdq)?;
    let objects: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))
        .map_err(not_rdq)?;
    if application_id == 0 && version == 0 && objects == 0 {
        return Ok(Found::Empty);
    }
    if application_id != APPLICATION_ID {
        return Err(EngineError::CorruptStore(format!(
            "{shown} is not an rdq store: it is an SQLite database with application_id \
             {application_id:#010x} (rdq's is {APPLICATION_ID:#010x}) and {objects} schema \
             objects; refusing to touch it"
        )));
    }
    if version > SCHEMA_VERSION {
        return Err(EngineError::CorruptStore(format!(
            "{shown} has rdq schema version {version}, newer than this build understands \
             ({SCHEMA_VERSION}); upgrade rdq to open it"
        )));
    }
    if version < 1 {
        return Err(EngineError::CorruptStore(format!(
            "{shown} carries rdq's application id but no schema version ({version}); \
             refusing to touch it"
        )));
    }
    for table in TABLES {
        let present = conn
            .query_row(
                "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                [table],
                |_| Ok(()),
            )
            .optional()
            .map_err(|e| from_sql(&e))?;
        if present.is_none() {
            return Err(EngineError::CorruptStore(format!(
                "{shown} is damaged: rdq schema version {version} but table `{table}` is missing"
            )));
        }
    }
    Ok(Found::Rdq(version))
}
