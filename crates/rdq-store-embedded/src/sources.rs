//! Sources' cursors in the embedded store: the `source_cursors` table
//! (schema version 8). Reads use the read connections; an ingest and a
//! reset go to the writer thread, where an ingest's cursor compare, its
//! submits and its cursor move share one group transaction
//! (`writer::sources`), answered once that group's fsync is done.

use async_trait::async_trait;
use rdq_engine::{
    EngineError, IngestOutcome, IngestRequest, SourceCursor, SourceCursors, Submitted,
};
use rusqlite::Connection;

use crate::EmbeddedStore;
use crate::error::from_sql;
use crate::writer::{Encoded, Job, SourceJob};

/// A cursor as its column stores it: SQLite's integers are signed, so a
/// position past `i64::MAX` is stored as the negative integer with the
/// same bits, and read back unchanged ([`from_column`]).
pub(crate) fn to_column(next: u64) -> i64 {
    next.cast_signed()
}

/// A cursor column's position ([`to_column`]).
pub(crate) fn from_column(stored: i64) -> u64 {
    stored.cast_unsigned()
}

/// Every cursor of `source`, by partition name.
fn cursors(conn: &Connection, source: &str) -> Result<Vec<SourceCursor>, EngineError> {
    conn.prepare_cached(
        "SELECT partition, next, updated_at_ms FROM source_cursors \
         WHERE source = ?1 ORDER BY partition",
    )
    .and_then(|mut stmt| {
        stmt.query_map([source], |row| {
            Ok(SourceCursor {
                partition: row.get(0)?,
                next: from_column(row.get(1)?),
                updated_at_ms: row.get(2)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()
    })
    .map_err(|e| from_sql(&e))
}

#[async_trait]
impl SourceCursors for EmbeddedStore {
    async fn source_cursors(&self, source: &str) -> Result<Vec<SourceCursor>, EngineError> {
        self.inner.readers.with(|conn| cursors(conn, source))
    }

    async fn ingest(&self, request: &IngestRequest) -> Result<IngestOutcome, EngineError> {
        let tasks: Vec<_> = request.tasks.iter().cloned().map(Encoded::task).collect();
        // As a submit does: keep what was written, so claims decode nothing.
        let written =
            (self.inner.pending).copies(tasks.iter().map(|t| (&t.bytes, &t.item.envelope)));
        // The tasks travel encoded; the rest of the request as it is.
        let request = IngestRequest {
            source: request.source.clone(),
            partition: request.partition.clone(),
            queue: request.queue.clone(),
            expected: request.expected,
            next: request.next,
            tasks: Vec::new(),
            now_ms: request.now_ms,
        };
        let outcome = self
            .write(|reply| {
                Job::Source(SourceJob::Ingest {
                    request,
                    tasks,
                    reply,
                })
            })
            .await??;
        if let IngestOutcome::Ingested(results) = &outcome {
            self.inner.pending.keep(
                results.iter().zip(written).filter_map(|(r, kept)| {
                    kept.filter(|_| matches!(r, Ok(Submitted::Created(_))))
                }),
            );
        }
        Ok(outcome)
    }

    async fn delete_source_cursors(&self, source: &str) -> Result<u64, EngineError> {
        let source = source.to_owned();
        self.write(|reply| Job::Source(SourceJob::Delete { source, reply }))
            .await?
    }
}
