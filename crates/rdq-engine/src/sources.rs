//! Sources on the engine (docs/sources.md): ingesting a run of a source's
//! records as tasks, and the cursors that say where each partition stands.
//!
//! A store that keeps cursors ([`SourceCursors`]) applies an ingest as one
//! compare-and-swap step; on any other store an ingest is a submit of the
//! same tasks, each under its record's locator as idempotency key, so a
//! replayed record finds its task while the store keeps the key; a store
//! that keeps no keys (a broker) takes them without, at least once.

use std::collections::BTreeMap;

use rdq_envelope::{Envelope, dead_reasons};

use crate::engine::{Engine, SubmitRequest};
use crate::error::EngineError;
use crate::machine;
use crate::store::sources::validate_cursor_names;
use crate::store::{IngestOutcome, IngestRequest, NewTask, SourceCursor, Submitted, unsupported};

/// The system header that carries a task's origin: its record's locator
/// (`kafka://…`, `nats://…`, `sqs://…`), also its idempotency key.
pub const SOURCE_HEADER: &str = "rdq.source";

/// [`rdq_envelope::DeadReason::by`] of a record a source could not turn
/// into a task it may run.
pub const BY_SOURCE: &str = "source";

/// A record that could not become a task it may run: what the DLQ keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct RefusedRecord {
    /// The queue the record was for.
    pub queue: String,
    /// The handler it was for.
    pub handler_ref: String,
    /// The record's bytes (cut to what the queue takes: `full_len` says
    /// how long it was).
    pub payload: Vec<u8>,
    /// The record's length before any cut.
    pub full_len: usize,
    /// The payload's content type.
    pub payload_content_type: String,
    /// The record's locator (`rdq.source`), also the task's idempotency key.
    pub locator: String,
    /// Why: what the engine refused.
    pub error: EngineError,
}

impl Engine {
    /// True when the store keeps sources' cursors with the tasks (capability
    /// `source_cursors`): ingests are exactly once even after the tasks'
    /// idempotency keys are pruned.
    pub fn keeps_source_cursors(&self) -> bool {
        self.store.as_source_cursors().is_some()
    }

    /// Every cursor of `source`; `UNSUPPORTED` on a store that keeps none.
    pub async fn source_cursors(&self, source: &str) -> Result<Vec<SourceCursor>, EngineError> {
        validate_cursor_names(source, "-")?;
        match self.store.as_source_cursors() {
            Some(cursors) => cursors.source_cursors(source).await,
            None => unsupported("keep source cursors"),
        }
    }

    /// Removes every cursor of `source`; how many there were.
    /// `UNSUPPORTED` on a store that keeps none.
    pub async fn delete_source_cursors(&self, source: &str) -> Result<u64, EngineError> {
        validate_cursor_names(source, "-")?;
        match self.store.as_source_cursors() {
            Some(cursors) => cursors.delete_source_cursors(source).await,
            None => unsupported("keep source cursors"),
        }
    }

    /// Ingests a run of records' tasks (module documentation): on a store
    /// with cursors, the tasks and the cursor move as one compare-and-swap
    /// step; elsewhere a submit of the tasks, answered as
    /// [`IngestOutcome::Ingested`].
    pub async fn ingest(&self, request: &IngestRequest) -> Result<IngestOutcome, EngineError> {
        validate_cursor_names(&request.source, &request.partition)?;
        if let Some(bad) = request
            .tasks
            .iter()
            .find(|t| t.envelope.queue != request.queue)
        {
            return Err(EngineError::InvalidArgument(format!(
                "tasks: every task of an ingest goes to queue {:?}, not {:?}",
                request.queue, bad.envelope.queue
            )));
        }
        let outcome = match self.store.as_source_cursors() {
            Some(cursors) => cursors.ingest(request).await?,
            None if request.tasks.is_empty() => IngestOutcome::Ingested(Vec::new()),
            None => IngestOutcome::Ingested(
                self.store
                    .submit(self.keyed_if_kept(request.tasks.clone()))
                    .await,
            ),
        };
        self.work_available.notify_waiters();
        Ok(outcome)
    }

    /// Submits tasks already built ([`Engine::record_task`],
    /// [`Engine::refused_record_task`]) in one store call, one result each:
    /// an ingest of a source without positions (SQS), where each task's
    /// locator key is what makes a redelivered record its original task.
    pub async fn submit_tasks(&self, tasks: Vec<NewTask>) -> Vec<Result<Submitted, EngineError>> {
        if tasks.is_empty() {
            return Vec::new();
        }
        let stored = self.store.submit(self.keyed_if_kept(tasks)).await;
        self.work_available.notify_waiters();
        stored
    }

    /// `tasks` with their locator keys, or without on a store that keeps
    /// no idempotency keys (a broker): there a record read again after a
    /// crash before its acknowledgement is a second task (docs/sources.md).
    fn keyed_if_kept(&self, mut tasks: Vec<NewTask>) -> Vec<NewTask> {
        if !self.store.capabilities().idempotent_submit {
            for task in &mut tasks {
                task.idempotency_key = None;
            }
        }
        tasks
    }

    /// How many PENDING tasks `queue` holds: what a source's high- and
    /// low-water marks compare with. A store that counts answers its
    /// count; a broker, the messages ready in its work queue.
    pub async fn pending_depth(&self, queue: &str) -> Result<u64, EngineError> {
        if let Some(counts) = self.store.as_counts() {
            return Ok(counts
                .counts()
                .await?
                .into_iter()
                .find(|c| c.queue == queue)
                .map_or(0, |c| c.pending));
        }
        match self.store.as_depths() {
            Some(depths) => Ok(depths.depths(queue).await?.map_or(0, |d| d.ready)),
            None => unsupported("count a queue's pending tasks"),
        }
    }

    /// The PENDING task for a record (as [`Engine::build`] makes it), or the
    /// engine's refusal when the record cannot be one.
    pub async fn record_task(&self, req: &SubmitRequest) -> Result<NewTask, EngineError> {
        let policy = self.policy(&req.queue).await?;
        self.build(req, &policy)
    }

    /// The DEAD task that keeps a refused record in the DLQ: its bytes (as
    /// many as the queue's `max_envelope_bytes` leaves room for), its
    /// locator, and reason `UNDECODABLE_SOURCE` with what was refused.
    pub async fn refused_record_task(&self, record: RefusedRecord) -> Result<NewTask, EngineError> {
        let policy = self.policy(&record.queue).await?;
        let now = self.now();
        let mut headers = BTreeMap::new();
        headers.insert(SOURCE_HEADER.to_owned(), record.locator.clone());
        let message = format!(
            "{} ({} bytes): {}",
            record.locator, record.full_len, record.error
        );
        let build = |payload: &[u8]| -> Envelope {
            let mut env = Envelope::new(
                record.queue.clone(),
                record.handler_ref.clone(),
                payload,
                record.payload_content_type.clone(),
                now,
            );
            env.headers = headers.clone();
            machine::dead_on_arrival(
                &env,
                dead_reasons::UNDECODABLE_SOURCE,
                BY_SOURCE,
                now,
                &message,
            )
        };
        let mut keep = record.payload.len();
        let mut envelope = build(&record.payload);
        // Cut the bytes until the envelope fits the queue's limit.
        while envelope.check_size(policy.max_envelope_bytes).is_err() && keep > 0 {
            let over = envelope
                .encoded_len()
                .saturating_sub(policy.max_envelope_bytes);
            // Base64 makes 3 bytes 4 characters: cut a little more than over.
            keep = keep.saturating_sub(over.saturating_mul(3) / 4 + 16);
            envelope = build(&record.payload[..keep]);
        }
        envelope.check_size(policy.max_envelope_bytes)?;
        Ok(NewTask {
            envelope,
            idempotency_key: Some(record.locator),
            unique: None,
        })
    }
}
