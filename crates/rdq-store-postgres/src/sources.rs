//! Sources' cursors in PostgreSQL: the `source_cursors` table (schema
//! version 10).
//!
//! An ingest is one transaction that compares and moves its partition's
//! cursor first, then submits the run's tasks through the store's grouped
//! submit statement (counts, wake-ups and idempotency keys as every submit),
//! then commits:
//!
//! - from a cursor (`expected` = `Some(n)`): `UPDATE … SET next = $next
//!   WHERE source = $1 AND partition = $2 AND next = $n`. Under READ
//!   COMMITTED a racing update of the row waits for the row lock, then
//!   compares again with the row the winner committed: it matches nothing;
//! - from no cursor (`None`): `INSERT … ON CONFLICT (source, partition) DO
//!   NOTHING`. A racing insert of the same key waits for the first one's
//!   transaction and then inserts nothing (or, if that one rolled back,
//!   inserts its own).
//!
//! Either way the winner holds the row (its lock, or its not yet committed
//! key) until it commits the tasks with it, so of ingests racing from one
//! cursor exactly one applies. A loser rolls back and reads the cursor as
//! committed now (`Moved`). Should the connection drop after the commit was
//! sent, the retry finds the cursor at the run's end, moved at this
//! ingest's time, and answers as the lost commit did, each task found by
//! its key or id.

use async_trait::async_trait;
use rdq_engine::{
    EngineError, IngestOutcome, IngestRequest, NewTask, SourceCursor, SourceCursors, Submitted,
};
use tokio_postgres::Row;

use crate::error::Failure;
use crate::pool::Conn;
use crate::sql::Q;
use crate::writes::{explain_conflict, insert_tasks};
use crate::{PostgresStore, Retry, Shared, retrying};

/// How often an ingest compares again after finding the cursor it lost to
/// gone (a reset between its compare and its read).
const ROUNDS: usize = 8;

/// A cursor position as stored (`bigint`).
fn stored_position(what: &str, position: u64) -> Result<i64, EngineError> {
    i64::try_from(position).map_err(|_| {
        EngineError::InvalidArgument(format!(
            "{what}: a cursor position is at most {}, not {position}",
            i64::MAX
        ))
    })
}

/// A stored position as the engine has it.
fn position_of(stored: i64) -> Result<u64, Failure> {
    u64::try_from(stored).map_err(|_| {
        Failure::Engine(EngineError::CorruptStore(format!(
            "a stored source cursor is negative: {stored}"
        )))
    })
}

fn read(row: &Row) -> Result<SourceCursor, Failure> {
    Ok(SourceCursor {
        partition: row.try_get(0)?,
        next: position_of(row.try_get(1)?)?,
        updated_at_ms: row.try_get(2)?,
    })
}

#[async_trait]
impl SourceCursors for PostgresStore {
    async fn source_cursors(&self, source: &str) -> Result<Vec<SourceCursor>, EngineError> {
        self.started().await?;
        let shared = self.shared();
        retrying!(shared, Retry::Always, |conn, _applied| {
            let stmt = conn.stmt(&shared.sql, Q::SourceCursors).await?;
            let rows = conn.client.query(&stmt, &[&source]).await?;
            rows.iter().map(read).collect::<Result<Vec<_>, _>>()
        })
    }

    async fn ingest(&self, request: &IngestRequest) -> Result<IngestOutcome, EngineError> {
        self.started().await?;
        ingest(self.shared(), request).await
    }

    async fn delete_source_cursors(&self, source: &str) -> Result<u64, EngineError> {
        self.started().await?;
        let shared = self.shared();
        // Applied once and tried again, it would find none: only a
        // rolled-back attempt is retried.
        retrying!(shared, Retry::RolledBackOnly, |conn, _applied| {
            let stmt = conn.stmt(&shared.sql, Q::DeleteCursors).await?;
            Ok(conn.client.execute(&stmt, &[&source]).await?)
        })
    }
}

/// What an ingest compares and sets, as stored.
struct Move<'a> {
    request: &'a IngestRequest,
    expected: Option<i64>,
    next: i64,
    tasks: Vec<&'a NewTask>,
    encoded: Vec<Vec<u8>>,
}

/// Applies `request` (module documentation), retrying transient failures.
async fn ingest(shared: &Shared, request: &IngestRequest) -> Result<IngestOutcome, EngineError> {
    if request.tasks.iter().any(|t| t.unique.is_some()) {
        return Err(EngineError::InvalidArgument(
            "tasks: an ingest's tasks carry their records' locators as idempotency keys, \
             not unique keys"
                .into(),
        ));
    }
    let m = Move {
        request,
        expected: request
            .expected
            .map(|p| stored_position("expected", p))
            .transpose()?,
        next: stored_position("next", request.next)?,
        tasks: request.tasks.iter().collect(),
        encoded: request.tasks.iter().map(|t| t.envelope.encode()).collect(),
    };
    retrying!(shared, Retry::Always, |conn, maybe_applied| {
        for _ in 0..ROUNDS {
            if let Some(outcome) = ingest_once(shared, conn, &m, maybe_applied).await? {
                return Ok(outcome);
            }
        }
        Err(Failure::RolledBack(format!(
            "the cursor of source {:?}, partition {:?} kept being reset",
            request.source, request.partition
        )))
    })
}

/// One transaction of an ingest: its outcome, or `None` when the cursor it
/// lost to was removed before it could read it (compare again).
async fn ingest_once(
    shared: &Shared,
    conn: &mut Conn,
    m: &Move<'_>,
    maybe_applied: bool,
) -> Result<Option<IngestOutcome>, Failure> {
    let r = m.request;
    conn.client.batch_execute("BEGIN").await?;
    let won = match m.expected {
        None => {
            let stmt = conn.stmt(&shared.sql, Q::CursorCreate).await?;
            conn.client
                .query_opt(&stmt, &[&r.source, &r.partition, &m.next, &r.now_ms])
                .await?
        }
        Some(expected) => {
            let stmt = conn.stmt(&shared.sql, Q::CursorMove).await?;
            conn.client
                .query_opt(
                    &stmt,
                    &[&r.source, &r.partition, &expected, &m.next, &r.now_ms],
                )
                .await?
        }
    }
    .is_some();
    if won {
        // The same statement as every submit, in this transaction.
        let results = if m.tasks.is_empty() {
            Vec::new()
        } else {
            insert_tasks(shared, conn, &m.tasks, &m.encoded, maybe_applied).await?
        };
        conn.client.batch_execute("COMMIT").await?;
        return Ok(Some(IngestOutcome::Ingested(results)));
    }
    // Lost: the cursor as committed now (READ COMMITTED: a fresh snapshot).
    let stmt = conn.stmt(&shared.sql, Q::SourceCursor).await?;
    let stored: Option<(i64, i64)> = match conn
        .client
        .query_opt(&stmt, &[&r.source, &r.partition])
        .await?
    {
        Some(row) => Some((row.try_get(0)?, row.try_get(1)?)),
        None => None,
    };
    conn.client.batch_execute("ROLLBACK").await?;
    let current = stored.map(|(next, _)| next);
    if current == m.expected {
        return Ok(None);
    }
    if maybe_applied && m.expected != Some(m.next) && stored == Some((m.next, r.now_ms)) {
        // An earlier attempt committed and its answer was lost: answer as
        // it would have (a task stored byte for byte is the one it created).
        let mut results: Vec<Result<Submitted, EngineError>> = Vec::with_capacity(m.tasks.len());
        for (task, bytes) in m.tasks.iter().zip(&m.encoded) {
            results.push(explain_conflict(shared, conn, task, bytes, true).await?);
        }
        return Ok(Some(IngestOutcome::Ingested(results)));
    }
    Ok(Some(IngestOutcome::Moved {
        current: current.map(position_of).transpose()?,
    }))
}
