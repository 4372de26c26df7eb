//! The read side: a small pool of read-only connections and the queries that
//! run on them.
//!
//! In WAL mode readers see the last committed state and never wait for the
//! writer (nor it for them), so `get`, `list`, `counts`, `get_config` and
//! `expired_leases` stay fast however busy the writer thread is. Each query
//! runs in its own implicit read transaction; a read that follows an
//! acknowledged write always sees it, because the writer answers only after
//! its commit.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use rdq_engine::glob::Glob;
use rdq_engine::store::MAX_PAGE;
use rdq_engine::{
    EngineError, FlowPolicy, FlowStatus, ListOrder, ListQuery, Page, QueueConfig, QueueCounts,
};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::cache::ConfigCache;
use crate::columns::{Columns, bytes, envelope_columns, slot, status_code, status_of, stored};
use crate::error::{from_sql, task_id, undecodable};
use crate::schema::{Tuning, open_reader};

/// A pool of read connections: one is taken per read and put back after.
pub(crate) struct Readers {
    path: PathBuf,
    tuning: Tuning,
    idle: Mutex<Vec<Connection>>,
    keep: usize,
}

impl Readers {
    /// A pool for the store at `path`, opening one connection now so that a
    /// store that cannot be read fails at open.
    pub(crate) fn new(path: PathBuf, tuning: Tuning, keep: usize) -> Result<Self, EngineError> {
        let first = open_reader(&path, tuning)?;
        Ok(Self {
            path,
            tuning,
            idle: Mutex::new(vec![first]),
            keep: keep.max(1),
        })
    }

    /// Runs `f` on a read connection.
    pub(crate) fn with<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let taken = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let conn = match taken {
            Some(conn) => conn,
            None => open_reader(&self.path, self.tuning)?,
        };
        let result = f(&conn);
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.keep {
            idle.push(conn);
        }
        result
    }
}

fn sql(e: rusqlite::Error) -> EngineError {
    from_sql(&e)
}

/// The envelope of a row whose columns `idx..idx + 5` are `envelope, status,
/// claimed_at, lease_expires_at, finished_at` (see `columns::stored`).
fn envelope_at(row: &Row<'_>, idx: usize, what: &str) -> Result<Envelope, EngineError> {
    let env = Envelope::decode(bytes(row, idx).map_err(sql)?).map_err(|e| undecodable(what, &e))?;
    stored(
        env,
        row.get(idx + 1).map_err(sql)?,
        row.get(idx + 2).map_err(sql)?,
        row.get(idx + 3).map_err(sql)?,
        row.get(idx + 4).map_err(sql)?,
    )
}

fn text<'r>(row: &'r Row<'_>, idx: usize) -> rusqlite::Result<Option<&'r str>> {
    Ok(match row.get_ref(idx)? {
        ValueRef::Text(t) => std::str::from_utf8(t).ok(),
        _ => None,
    })
}

/// The task with this id.
pub(crate) fn get(conn: &Connection, id: TaskId) -> Result<Envelope, EngineError> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            envelope_columns!(),
            " FROM tasks WHERE id = ?1"
        ))
        .map_err(sql)?;
    let mut rows = stmt.query([&id.to_bytes()[..]]).map_err(sql)?;
    match rows.next().map_err(sql)? {
        Some(row) => envelope_at(row, 0, &format!("task {id}")),
        None => Err(EngineError::TaskNotFound(id)),
    }
}

/// In-flight tasks whose lease ended at or before `now`, earliest deadline first.
pub(crate) fn expired_leases(
    conn: &Connection,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<Envelope>, EngineError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            envelope_columns!(),
            " FROM tasks WHERE status = 1 AND lease_expires_at <= ?1 \
                 ORDER BY lease_expires_at LIMIT ?2"
        ))
        .map_err(sql)?;
    let mut rows = stmt.query(params![now.unix_ms(), limit]).map_err(sql)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(sql)? {
        out.push(envelope_at(row, 0, "an in-flight task")?);
    }
    Ok(out)
}

/// One page of a queue's tasks, by id, optionally filtered by status and by a
/// glob on the latest error type.
pub(crate) fn list(conn: &Connection, query: &ListQuery) -> Result<Page, EngineError> {
    let limit = match query.limit {
        0 => MAX_PAGE,
        n => n.min(MAX_PAGE),
    };
    let glob = query
        .error_type
        .as_deref()
        .map(Glob::new)
        .transpose()
        .map_err(EngineError::InvalidArgument)?;
    let newest_first = query.order == ListOrder::NewestFirst;
    // Past every id (17 bytes sort after any 16) or before every id (empty).
    let start: Vec<u8> = match (query.cursor, newest_first) {
        (Some(cursor), _) => cursor.to_bytes().to_vec(),
        (None, true) => vec![0xff; 17],
        (None, false) => Vec::new(),
    };
    // DEAD has its own partial index (the DLQ); the other statuses walk the
    // queue's ids and filter, with the status as a parameter so that SQLite
    // keeps to the id order instead of sorting another index's rows.
    macro_rules! page {
        ($where_order:literal) => {
            concat!(
                "SELECT error_type, ",
                envelope_columns!(),
                " FROM tasks WHERE queue = ?1 AND ",
                $where_order
            )
        };
    }
    let sql_text = match (query.status, newest_first) {
        (None, true) => page!("id < ?2 ORDER BY id DESC"),
        (None, false) => page!("id > ?2 ORDER BY id"),
        (Some(Status::Dead), true) => page!("status = 3 AND id < ?2 ORDER BY id DESC"),
        (Some(Status::Dead), false) => page!("status = 3 AND id > ?2 ORDER BY id"),
        (Some(_), true) => page!("id < ?2 AND status = ?3 ORDER BY id DESC"),
        (Some(_), false) => page!("id > ?2 AND status = ?3 ORDER BY id"),
    };
    let mut stmt = conn.prepare_cached(sql_text).map_err(sql)?;
    let mut rows = match query.status {
        Some(s) if s != Status::Dead => stmt.query(params![query.queue, start, status_code(s)]),
        _ => stmt.query(params![query.queue, start]),
    }
    .map_err(sql)?;
    let mut items = Vec::with_capacity(limit.min(64));
    while items.len() < limit {
        let Some(row) = rows.next().map_err(sql)? else {
            break;
        };
        if let Some(glob) = &glob
            && !text(row, 0)
                .map_err(sql)?
                .is_some_and(|error_type| glob.matches(error_type))
        {
            continue;
        }
        items.push(envelope_at(
            row,
            1,
            &format!("a task of queue {}", query.queue),
        )?);
    }
    // A full page's cursor is its last id (there may be more); a short page
    // is the last.
    let next_cursor = if items.len() == limit {
        items.last().map(|env: &Envelope| env.id)
    } else {
        None
    };
    Ok(Page { items, next_cursor })
}

/// Tasks per status for every queue with tasks or a stored policy, by name.
pub(crate) fn counts(conn: &Connection) -> Result<Vec<QueueCounts>, EngineError> {
    let mut by_queue: BTreeMap<String, QueueCounts> = BTreeMap::new();
    let mut stmt = conn
        .prepare_cached("SELECT queue, pending, in_flight, succeeded, dead FROM queue_counts")
        .map_err(sql)?;
    let mut rows = stmt.query([]).map_err(sql)?;
    let count = |row: &Row<'_>, i: usize| -> Result<u64, EngineError> {
        let n: i64 = row.get(i).map_err(sql)?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    while let Some(row) = rows.next().map_err(sql)? {
        let c = QueueCounts {
            queue: row.get(0).map_err(sql)?,
            pending: count(row, 1)?,
            in_flight: count(row, 2)?,
            succeeded: count(row, 3)?,
            dead: count(row, 4)?,
        };
        if c.pending + c.in_flight + c.succeeded + c.dead > 0 {
            by_queue.insert(c.queue.clone(), c);
        }
    }
    drop(rows);
    let mut stmt = conn
        .prepare_cached("SELECT name FROM queues")
        .map_err(sql)?;
    let mut rows = stmt.query([]).map_err(sql)?;
    while let Some(row) = rows.next().map_err(sql)? {
        let name: String = row.get(0).map_err(sql)?;
        by_queue.entry(name.clone()).or_insert_with(|| QueueCounts {
            queue: name,
            ..QueueCounts::default()
        });
    }
    Ok(by_queue.into_values().collect())
}

/// `queue`'s flow at `now` under `flow` (`FlowLedger::status`): its stored
/// ledger (a fresh one if it has none yet) and its IN_FLIGHT tasks per flow
/// key, in one snapshot.
pub(crate) fn flow_status(
    conn: &Connection,
    queue: &str,
    flow: &FlowPolicy,
    now: Timestamp,
) -> Result<FlowStatus, EngineError> {
    conn.execute_batch("BEGIN").map_err(sql)?;
    let result = flow_snapshot(conn, queue, flow, now);
    let _ = conn.execute_batch("COMMIT");
    result
}

fn flow_snapshot(
    conn: &Connection,
    queue: &str,
    flow: &FlowPolicy,
    now: Timestamp,
) -> Result<FlowStatus, EngineError> {
    let ledger = crate::flow::stored_ledger(conn, queue)
        .map_err(sql)?
        .transpose()?
        .unwrap_or_default();
    let total = crate::flow::stored_in_flight(conn, queue).map_err(sql)?;
    let per_key = crate::flow::in_flight_per_key(conn, queue, u64::try_from(total).unwrap_or(0))
        .map_err(sql)?;
    Ok(ledger.status(flow, now, &per_key))
}

/// The stored policy of `queue`.
pub(crate) fn get_config(
    conn: &Connection,
    queue: &str,
    parsed: &ConfigCache,
) -> Result<Option<QueueConfig>, EngineError> {
    let parsed = conn
        .prepare_cached("SELECT policy FROM queues WHERE name = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([queue], |row| Ok(parsed.parse(queue, bytes(row, 0)?)))
                .optional()
        })
        .map_err(sql)?;
    match parsed {
        None => Ok(None),
        Some(Ok(policy)) => Ok(Some(policy)),
        Some(Err(e)) => Err(EngineError::CorruptStore(format!(
            "the stored policy of queue {queue} does not parse: {e}"
        ))),
    }
}

/// Checks the whole store in one snapshot; returns what is wrong (empty if
/// nothing). See [`crate::EmbeddedStore::verify`].
pub(crate) fn verify(conn: &Connection) -> Result<Vec<String>, EngineError> {
    conn.execute_batch("BEGIN").map_err(sql)?;
    let result = verify_snapshot(conn);
    let _ = conn.execute_batch("COMMIT");
    result
}

fn verify_snapshot(conn: &Connection) -> Result<Vec<String>, EngineError> {
    const MAX_PROBLEMS: usize = 20;
    let mut problems = Vec::new();
    let mut note = |p: String| {
        if problems.len() < MAX_PROBLEMS {
            problems.push(p);
        }
    };
    let mut stmt = conn.prepare("PRAGMA quick_check").map_err(sql)?;
    let mut rows = stmt.query([]).map_err(sql)?;
    while let Some(row) = rows.next().map_err(sql)? {
        let line: String = row.get(0).map_err(sql)?;
        if line != "ok" {
            note(format!("sqlite: {line}"));
        }
    }
    drop(rows);
    drop(stmt);

    let flow_queues: std::collections::BTreeSet<String> = {
        let mut stmt = conn.prepare("SELECT queue FROM flows").map_err(sql)?;
        stmt.query_map([], |row| row.get(0))
            .map_err(sql)?
            .collect::<Result<_, _>>()
            .map_err(sql)?
    };
    let mut actual: BTreeMap<String, [i64; 4]> = BTreeMap::new();
    let mut stmt = conn
        .prepare(
            "SELECT id, queue, status, priority, next_attempt_at, lease_expires_at, \
             lease_attempt, error_type, finished_at, envelope, claimed_at, flow_key FROM tasks",
        )
        .map_err(sql)?;
    let mut rows = stmt.query([]).map_err(sql)?;
    while let Some(row) = rows.next().map_err(sql)? {
        let id = match task_id(bytes(row, 0).map_err(sql)?) {
            Ok(id) => id,
            Err(e) => {
                note(e.to_string());
                continue;
            }
        };
        let env = match Envelope::decode(bytes(row, 9).map_err(sql)?) {
            Ok(env) => env,
            Err(e) => {
                note(format!("task {id}: envelope does not decode: {e}"));
                continue;
            }
        };
        let env = match stored(
            env,
            row.get(2).map_err(sql)?,
            row.get(10).map_err(sql)?,
            row.get(5).map_err(sql)?,
            row.get(8).map_err(sql)?,
        ) {
            Ok(env) => env,
            Err(e) => {
                note(format!("task {id}: {e}"));
                continue;
            }
        };
        let queue: String = row.get(1).map_err(sql)?;
        let stored = Columns {
            status: row.get(2).map_err(sql)?,
            priority: row.get(3).map_err(sql)?,
            next_attempt_at: row.get(4).map_err(sql)?,
            lease_expires_at: row.get(5).map_err(sql)?,
            lease_attempt: row.get(6).map_err(sql)?,
            error_type: text(row, 7).map_err(sql)?,
            finished_at: row.get(8).map_err(sql)?,
        };
        if env.id != id || env.queue != queue {
            note(format!(
                "task {id}: row is keyed {id}/{queue} but its envelope is {}/{}",
                env.id, env.queue
            ));
        }
        let flow_key = text(row, 11).map_err(sql)?;
        let key = rdq_engine::flow::key_of(&env);
        let keyed_right = match flow_key {
            Some(stored_key) => stored_key == key,
            // A task without a key stores NULL, but `''` in a
            // flow-controlled queue unless it is finished (`schema::FLOW`).
            None => {
                key.is_empty()
                    && (stored.status == status_code(Status::Succeeded)
                        || !flow_queues.contains(&queue))
            }
        };
        if !keyed_right {
            note(format!(
                "task {id}: flow_key column {flow_key:?} disagrees with its envelope's flow key {key:?}"
            ));
        }
        let derived = Columns::of(&env);
        if derived != stored {
            note(format!(
                "task {id}: columns {stored:?} disagree with its envelope {derived:?}"
            ));
        }
        if let Some(s) = status_of(stored.status) {
            actual.entry(queue).or_default()[slot(s)] += 1;
        } else {
            note(format!("task {id}: unknown status code {}", stored.status));
        }
    }
    drop(rows);
    drop(stmt);

    let mut recorded: BTreeMap<String, [i64; 4]> = BTreeMap::new();
    let mut stmt = conn
        .prepare("SELECT queue, pending, in_flight, succeeded, dead FROM queue_counts")
        .map_err(sql)?;
    let mut rows = stmt.query([]).map_err(sql)?;
    while let Some(row) = rows.next().map_err(sql)? {
        let counts = [
            row.get(1).map_err(sql)?,
            row.get(2).map_err(sql)?,
            row.get(3).map_err(sql)?,
            row.get(4).map_err(sql)?,
        ];
        if counts != [0; 4] {
            recorded.insert(row.get(0).map_err(sql)?, counts);
        }
    }
    if recorded != actual {
        note(format!(
            "queue counts {recorded:?} disagree with the tasks {actual:?}"
        ));
    }
    Ok(problems)
}

/// `queue`'s DLQ grouped by latest error type, from one grouped scan of the
/// DLQ's index; the newest of each group read by id.
pub(crate) fn dead_groups(
    conn: &Connection,
    queue: &str,
) -> Result<Vec<rdq_engine::DeadGroup>, EngineError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT error_type, count(*), max(id) FROM tasks \
             WHERE queue = ?1 AND status = 3 GROUP BY error_type",
        )
        .map_err(sql)?;
    let mut rows = stmt.query(params![queue]).map_err(sql)?;
    let mut found = Vec::new();
    while let Some(row) = rows.next().map_err(sql)? {
        let error_type = text(row, 0).map_err(sql)?.map(str::to_owned);
        let count: i64 = row.get(1).map_err(sql)?;
        let newest = task_id(bytes(row, 2).map_err(sql)?)?;
        found.push((error_type, u64::try_from(count).unwrap_or(0), newest));
    }
    let mut groups = Vec::with_capacity(found.len());
    for (error_type, count, id) in found {
        groups.push(rdq_engine::DeadGroup {
            error_type,
            count,
            newest: get(conn, id)?,
        });
    }
    rdq_engine::store::sort_groups(&mut groups);
    Ok(groups)
}

/// The lowest id among `queue`'s PENDING tasks, from the claim index.
pub(crate) fn oldest_pending(
    conn: &Connection,
    queue: &str,
) -> Result<Option<TaskId>, EngineError> {
    let mut stmt = conn
        .prepare_cached("SELECT min(id) FROM tasks WHERE queue = ?1 AND status = 0")
        .map_err(sql)?;
    let mut rows = stmt.query(params![queue]).map_err(sql)?;
    match rows.next().map_err(sql)? {
        Some(row) => match row.get_ref(0).map_err(sql)? {
            ValueRef::Blob(b) => Ok(Some(task_id(b)?)),
            _ => Ok(None),
        },
        None => Ok(None),
    }
}
