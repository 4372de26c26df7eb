//! What every kind of source shares: a record, the task it becomes, and
//! the ingest step that stores a run of records and moves the cursor.
//!
//! A reader (Kafka, NATS, SQS) hands the [`Ingestor`] runs of records of
//! one partition in position order, and acknowledges to its source only
//! what an ingest stored. The ingestor skips records behind the cursor
//! (their tasks are stored), builds each task (a record that cannot be one
//! becomes a DEAD task with its bytes), and ingests the run from the cursor
//! it knows: if another bridge moved the cursor, nothing is stored and the
//! reader seeks to where it now stands.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rdq_engine::{
    Engine, EngineError, IngestOutcome, IngestRequest, NewTask, QueuePolicy, RefusedRecord,
    SOURCE_HEADER, SubmitRequest, Submitted,
};

use crate::config::SourceConfig;
use crate::status::Registry;

/// One record, as a reader hands it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The partition it came from (a Kafka partition's number, the
    /// stream's name; empty for SQS).
    pub partition: String,
    /// Its position in the partition (a Kafka offset, a stream sequence;
    /// 0 for SQS).
    pub position: u64,
    /// Its locator (`rdq.source`, the task's idempotency key).
    pub locator: String,
    /// Its key (Kafka key, NATS subject, SQS message group), if any.
    pub key: Option<Vec<u8>>,
    /// Its headers (Kafka headers, NATS headers, SQS attributes).
    pub headers: Vec<(String, Vec<u8>)>,
    /// Its bytes.
    pub payload: Vec<u8>,
}

/// What an ingest step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Every record of the run is stored (or was before): acknowledge up to
    /// `next` to the source.
    Stored {
        /// One past the run's last record.
        next: u64,
    },
    /// Another bridge moved the cursor: nothing was stored; read again
    /// from `to` (`None`: from the source's own position).
    Moved {
        /// Where the cursor stands.
        to: Option<u64>,
    },
}

/// True when `e` says the record itself cannot be a task (bad input), not
/// that the store failed: such a record is kept DEAD, never retried.
fn is_refusal(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::Envelope(_) | EngineError::InvalidArgument(_)
    )
}

/// Builds runs of one source's records into tasks: the engine and the
/// source's configuration, cheap to clone, so that a reader can build its
/// next run while the last one is stored ([`Ingestor::builder`]).
#[derive(Clone)]
pub(crate) struct Builder {
    engine: Engine,
    config: Arc<SourceConfig>,
    uses_cursors: bool,
}

/// A run of one partition's records built into tasks, ready to store
/// ([`Builder::prepare`], [`Ingestor::store`]). `R` is a record or a
/// reference to one.
pub(crate) struct Run<R> {
    partition: String,
    /// The cursor the run was built from.
    expected: Option<u64>,
    /// One past the run's last record (0 without cursors).
    next: u64,
    /// The records ahead of the cursor, in position order, and their tasks.
    fresh: Vec<R>,
    tasks: Vec<NewTask>,
    /// Records behind the cursor (stored before) and records kept DEAD.
    behind: u64,
    dead: u64,
}

impl<R> Run<R> {
    /// Where the partition's cursor stands once this run is stored: what
    /// the run after it is built from.
    pub(crate) fn cursor_after(&self) -> Option<u64> {
        if self.fresh.is_empty() {
            self.expected
        } else if self.next == 0 {
            None
        } else {
            Some(self.next)
        }
    }
}

/// Stores runs of one source's records (module documentation).
pub(crate) struct Ingestor {
    builder: Builder,
    registry: Registry,
    /// The cursors as last read or moved, by partition (`None`: none stored).
    cursors: HashMap<String, Option<u64>>,
    /// The queue's PENDING tasks as last counted, plus those ingested
    /// since: pending can grow by no more than that (but for other
    /// submitters), so back-pressure need count again only once this
    /// passes the high-water mark.
    estimate: Option<u64>,
}

impl Builder {
    /// Builds a run of `partition`'s records (in position order) from the
    /// cursor `expected`: records behind it are skipped (stored before),
    /// each other one becomes its task, or a DEAD task keeping its bytes
    /// when it cannot be one.
    pub(crate) async fn prepare<R: Borrow<Record>>(
        &self,
        partition: &str,
        expected: Option<u64>,
        records: impl IntoIterator<Item = R>,
    ) -> Result<Run<R>, EngineError> {
        let mut behind = 0;
        let fresh: Vec<R> = records
            .into_iter()
            .filter(|r| {
                let ahead = expected.is_none_or(|c| r.borrow().position >= c);
                behind += u64::from(!ahead);
                ahead
            })
            .collect();
        let mut run = Run {
            partition: partition.to_owned(),
            expected,
            next: 0,
            fresh,
            tasks: Vec::new(),
            behind,
            dead: 0,
        };
        let Some(last) = run.fresh.last() else {
            return Ok(run);
        };
        if self.uses_cursors {
            run.next = last.borrow().position.saturating_add(1);
        }
        // One policy for the run: what every record's task is checked against.
        let policy = self.engine.policy(&self.config.queue).await?;
        run.tasks.reserve(run.fresh.len());
        for record in &run.fresh {
            match self.task(record.borrow(), &policy) {
                Ok(task) => run.tasks.push(task),
                Err(e) if is_refusal(&e) => {
                    run.dead += 1;
                    run.tasks.push(self.dead_task(record.borrow(), e).await?);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(run)
    }

    /// The task `record` becomes, or why it cannot be one.
    fn task(&self, record: &Record, policy: &QueuePolicy) -> Result<NewTask, EngineError> {
        let c = &self.config;
        let mut headers = BTreeMap::new();
        for (name, value) in &record.headers {
            if !c.headers.takes(name) {
                continue;
            }
            let value = String::from_utf8(value.clone()).map_err(|_| {
                EngineError::InvalidArgument(format!("header {name:?}: the value is not UTF-8"))
            })?;
            headers.insert(format!("{}{name}", c.header_prefix), value);
        }
        let key = match &record.key {
            Some(key) if c.key_header.is_some() || c.key_as_flow_key => {
                Some(String::from_utf8(key.clone()).map_err(|_| {
                    EngineError::InvalidArgument("the record's key is not UTF-8".into())
                })?)
            }
            _ => None,
        };
        if let (Some(name), Some(key)) = (&c.key_header, &key) {
            headers.insert(name.clone(), key.clone());
        }
        let mut system_headers = BTreeMap::new();
        system_headers.insert(SOURCE_HEADER.to_owned(), record.locator.clone());
        self.engine.build(
            &SubmitRequest {
                queue: c.queue.clone(),
                handler_ref: c.handler.clone(),
                payload: record.payload.clone(),
                payload_content_type: c.content_type.clone(),
                headers,
                system_headers,
                idempotency_key: Some(record.locator.clone()),
                flow_key: key.filter(|_| c.key_as_flow_key),
                ..SubmitRequest::default()
            },
            policy,
        )
    }

    /// The DEAD task that keeps `record`, refused with `error`.
    async fn dead_task(&self, record: &Record, error: EngineError) -> Result<NewTask, EngineError> {
        self.engine
            .refused_record_task(RefusedRecord {
                queue: self.config.queue.clone(),
                handler_ref: self.config.handler.clone(),
                payload: record.payload.clone(),
                full_len: record.payload.len(),
                payload_content_type: self.config.content_type.clone(),
                locator: record.locator.clone(),
                error,
            })
            .await
    }
}

impl Ingestor {
    /// An ingestor for `config`; `ordered` says the source has positions
    /// (Kafka, NATS) a cursor can stand at.
    pub(crate) fn new(
        engine: Engine,
        config: Arc<SourceConfig>,
        registry: Registry,
        ordered: bool,
    ) -> Self {
        let uses_cursors = ordered && engine.keeps_source_cursors();
        registry.update(&config.name, |s| s.cursors_in_store = uses_cursors);
        Self {
            builder: Builder {
                engine,
                config,
                uses_cursors,
            },
            registry,
            cursors: HashMap::new(),
            estimate: None,
        }
    }

    /// True when the store keeps this source's cursors.
    pub(crate) fn uses_cursors(&self) -> bool {
        self.builder.uses_cursors
    }

    /// What builds this source's runs, to build one while another is stored.
    pub(crate) fn builder(&self) -> Builder {
        self.builder.clone()
    }

    /// The cursor of `partition`: where the store says the next record to
    /// ingest is (`None`: no cursor, start where the source says).
    pub(crate) async fn cursor(&mut self, partition: &str) -> Result<Option<u64>, EngineError> {
        if !self.builder.uses_cursors {
            return Ok(None);
        }
        if let Some(known) = self.cursors.get(partition) {
            return Ok(*known);
        }
        let stored = self
            .builder
            .engine
            .source_cursors(&self.builder.config.name)
            .await?;
        let found = stored
            .iter()
            .find(|c| c.partition == partition)
            .map(|c| c.next);
        self.cursors.insert(partition.to_owned(), found);
        self.registry
            .partition(&self.builder.config.name, partition, found, None);
        Ok(found)
    }

    /// Forgets what is known of `partition`'s cursor (the partition was
    /// revoked): the next run reads it again.
    pub(crate) fn forget(&mut self, partition: &str) {
        self.cursors.remove(partition);
    }

    /// Stores a run of `partition`'s records (in position order) and moves
    /// the cursor past them (module documentation).
    pub(crate) async fn ingest(
        &mut self,
        partition: &str,
        records: &[Record],
    ) -> Result<Step, EngineError> {
        let expected = self.cursor(partition).await?;
        let run = self.builder.prepare(partition, expected, records).await?;
        self.store(run).await
    }

    /// Stores a run built from the cursor as it stood (when one run is
    /// built while another is stored, from where that one leaves it:
    /// [`Run::cursor_after`]) and moves the cursor past it; if another
    /// bridge moved the cursor in between, nothing is stored.
    pub(crate) async fn store<R: Borrow<Record>>(
        &mut self,
        run: Run<R>,
    ) -> Result<Step, EngineError> {
        let Run {
            partition,
            expected,
            next,
            fresh,
            tasks,
            behind,
            mut dead,
        } = run;
        let name = &self.builder.config.name;
        if fresh.is_empty() {
            self.registry.count(name, 0, 0, behind);
            return Ok(Step::Stored {
                next: expected.unwrap_or(0),
            });
        }
        let uses_cursors = self.builder.uses_cursors;
        let results = if uses_cursors {
            match self
                .builder
                .engine
                .ingest(&self.request(&partition, expected, next, tasks))
                .await?
            {
                IngestOutcome::Ingested(results) => results,
                IngestOutcome::Moved { current } => {
                    self.cursors.insert(partition.clone(), current);
                    self.registry.partition(name, &partition, current, None);
                    return Ok(Step::Moved { to: current });
                }
            }
        } else {
            self.builder.engine.submit_tasks(tasks).await
        };
        if uses_cursors {
            self.cursors.insert(partition.clone(), Some(next));
            self.registry.partition(name, &partition, Some(next), None);
        }
        let (mut created, mut existing) = (0u64, behind);
        let mut refused = Vec::new();
        for (result, record) in results.into_iter().zip(&fresh) {
            match result {
                Ok(Submitted::Created(env)) if env.dead_reason.is_none() => created += 1,
                Ok(Submitted::Created(_)) => {}
                Ok(Submitted::Existing(_)) => existing += 1,
                Err(e) if is_refusal(&e) => {
                    refused.push(self.builder.dead_task(record.borrow(), e).await?);
                }
                Err(e) => return Err(e),
            }
        }
        if !refused.is_empty() {
            // The store refused what the engine took: keep those records
            // DEAD too, without moving the cursor again.
            dead += refused.len() as u64;
            self.store_refused(&partition, next, refused).await?;
        }
        self.registry
            .count(&self.builder.config.name, created, dead, existing);
        self.estimate = self.estimate.map(|e| e.saturating_add(created));
        Ok(Step::Stored { next })
    }

    async fn store_refused(
        &mut self,
        partition: &str,
        next: u64,
        refused: Vec<NewTask>,
    ) -> Result<(), EngineError> {
        let results = if self.builder.uses_cursors {
            match self
                .builder
                .engine
                .ingest(&self.request(partition, Some(next), next, refused))
                .await?
            {
                IngestOutcome::Ingested(results) => results,
                IngestOutcome::Moved { current } => {
                    return Err(EngineError::Unavailable(format!(
                        "the cursor of partition {partition} moved to {current:?} while its run was stored"
                    )));
                }
            }
        } else {
            self.builder.engine.submit_tasks(refused).await
        };
        match results.into_iter().find_map(Result::err) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn request(
        &self,
        partition: &str,
        expected: Option<u64>,
        next: u64,
        tasks: Vec<NewTask>,
    ) -> IngestRequest {
        IngestRequest {
            source: self.builder.config.name.clone(),
            partition: partition.to_owned(),
            queue: self.builder.config.queue.clone(),
            expected,
            next,
            tasks,
            now_ms: self.builder.engine.now().unix_ms(),
        }
    }

    /// True when the queue may have passed the high-water mark since it
    /// was last counted: back-pressure should count it now, before the
    /// next run.
    pub(crate) fn may_be_over(&self) -> bool {
        self.builder
            .config
            .high_water
            .is_some_and(|high| self.estimate.is_none_or(|e| e > high))
    }

    /// Whether reading should stop (or stay stopped, when `paused`): the
    /// queue's PENDING tasks against the high- and low-water marks.
    pub(crate) async fn should_pause(&mut self, paused: bool) -> Result<bool, EngineError> {
        let Some(high) = self.builder.config.high_water else {
            return Ok(false);
        };
        let low = self.builder.config.low_water().unwrap_or(high / 2);
        let pending = self
            .builder
            .engine
            .pending_depth(&self.builder.config.queue)
            .await?;
        self.estimate = Some(pending);
        Ok(if paused {
            pending >= low
        } else {
            pending > high
        })
    }
}
