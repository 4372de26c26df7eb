//! Source cursor writes on the writer thread: the ingest, which compares
//! the cursor, submits the run's tasks and moves the cursor in the same
//! group transaction (the thread is the database's only writer, so nothing
//! runs between the three), and the reset of a source's cursors.

use rdq_engine::{EngineError, IngestOutcome, IngestRequest, NewTask};
use rusqlite::{OptionalExtension, params};
use tokio::sync::oneshot;

use super::job::{Done, Encoded};
use super::transaction::Ctx;
use super::work::submit_one;
use crate::error::Fatal;
use crate::sources::{from_column, to_column};

type Tx<T> = oneshot::Sender<T>;

/// A source cursor write and where its answer goes.
pub(crate) enum SourceJob {
    Ingest {
        /// The request, its tasks taken out (they travel as `tasks`).
        request: IngestRequest,
        /// The request's tasks, encoded on the caller's thread.
        tasks: Vec<Encoded<NewTask>>,
        reply: Tx<Result<IngestOutcome, EngineError>>,
    },
    Delete {
        source: String,
        reply: Tx<Result<u64, EngineError>>,
    },
}

impl SourceJob {
    /// How much of a group's budget it takes: an ingest, one per task.
    pub(super) fn weight(&self) -> usize {
        match self {
            Self::Ingest { tasks, .. } => tasks.len().max(1),
            Self::Delete { .. } => 1,
        }
    }

    pub(super) fn unanswered(self) -> SourceDone {
        match self {
            Self::Ingest { reply, .. } => {
                SourceDone::Ingest(reply, Ok(IngestOutcome::Moved { current: None }))
            }
            Self::Delete { reply, .. } => SourceDone::Count(reply, Ok(0)),
        }
    }
}

/// A source cursor write's decided answer, held back until its group
/// commits (and its fsync).
pub(super) enum SourceDone {
    Ingest(
        Tx<Result<IngestOutcome, EngineError>>,
        Result<IngestOutcome, EngineError>,
    ),
    Count(Tx<Result<u64, EngineError>>, Result<u64, EngineError>),
}

impl SourceDone {
    pub(super) fn send(self) {
        match self {
            Self::Ingest(reply, r) => drop(reply.send(r)),
            Self::Count(reply, r) => drop(reply.send(r)),
        }
    }

    pub(super) fn fail(self, e: &EngineError) {
        match self {
            Self::Ingest(reply, _) => drop(reply.send(Err(e.clone()))),
            Self::Count(reply, _) => drop(reply.send(Err(e.clone()))),
        }
    }
}

/// Runs one source cursor write in the open group.
pub(super) fn execute(ctx: &mut Ctx, job: SourceJob) -> (Done, Option<Fatal>) {
    let (done, fatal) = match job {
        SourceJob::Ingest {
            request,
            tasks,
            reply,
        } => match ingest(ctx, &request, tasks) {
            Ok(outcome) => (SourceDone::Ingest(reply, Ok(outcome)), None),
            Err(f) => (
                SourceDone::Ingest(reply, Ok(IngestOutcome::Moved { current: None })),
                Some(f),
            ),
        },
        SourceJob::Delete { source, reply } => match delete_source_cursors(ctx, &source) {
            Ok(n) => (SourceDone::Count(reply, Ok(n)), None),
            Err(f) => (SourceDone::Count(reply, Ok(0)), Some(f)),
        },
    };
    (Done::Source(done), fatal)
}

/// The compare, then the submits, then the cursor's move: all in this
/// group's transaction, which sees every earlier request of the group, so
/// a second ingest from the same cursor in one group finds it moved.
fn ingest(
    ctx: &mut Ctx,
    request: &IngestRequest,
    tasks: Vec<Encoded<NewTask>>,
) -> Result<IngestOutcome, Fatal> {
    let current = ctx
        .conn
        .prepare_cached("SELECT next FROM source_cursors WHERE source = ?1 AND partition = ?2")?
        .query_row(params![request.source, request.partition], |row| {
            row.get::<_, i64>(0)
        })
        .optional()?
        .map(from_column);
    if current != request.expected {
        return Ok(IngestOutcome::Moved { current });
    }
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(submit_one(ctx, task)?);
    }
    ctx.conn
        .prepare_cached(
            "INSERT INTO source_cursors (source, partition, next, updated_at_ms) \
             VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (source, partition) DO UPDATE SET next = excluded.next, \
             updated_at_ms = excluded.updated_at_ms",
        )?
        .execute(params![
            request.source,
            request.partition,
            to_column(request.next),
            request.now_ms
        ])?;
    Ok(IngestOutcome::Ingested(results))
}

fn delete_source_cursors(ctx: &mut Ctx, source: &str) -> Result<u64, Fatal> {
    let n = ctx
        .conn
        .prepare_cached("DELETE FROM source_cursors WHERE source = ?1")?
        .execute([source])?;
    Ok(u64::try_from(n).unwrap_or(u64::MAX))
}
