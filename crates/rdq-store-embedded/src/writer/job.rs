//! What the writer thread is sent and what it owes in return.
//!
//! A write request travels to the thread as a [`Job`] carrying its reply
//! channel, inside a [`Msg`]. Once the request has run, its decided answer
//! waits as a [`Done`] until its group commits (and, for anything but a
//! claim, until the fsync after that). Envelopes are encoded into an
//! [`Encoded`] on the caller's thread, so the one writer thread spends its
//! time on SQLite rather than on JSON.

use rdq_engine::{
    CancelRequest, EngineError, FlowPolicy, LeasedUpdate, NewTask, RedriveRequest, Submitted,
};
use rdq_envelope::{Status, TaskId, Timestamp};
use tokio::sync::oneshot;

use super::schedules::{ScheduleDone, ScheduleJob};
use super::sources::{SourceDone, SourceJob};

/// Most tasks one claim takes, whatever `max` asks for.
pub(super) const MAX_CLAIM: usize = 10_000;

type Tx<T> = oneshot::Sender<T>;

/// One write request and where its answer goes.
pub(crate) enum Job {
    Submit {
        tasks: Vec<Encoded<NewTask>>,
        reply: Tx<Vec<Result<Submitted, EngineError>>>,
    },
    Claim {
        queue: String,
        max: usize,
        /// The global concurrency limit, if the claim carries one.
        max_in_flight: Option<u64>,
        /// Flow limits the ledger decides (`ClaimRequest::flow`).
        /// Boxed: most claims carry none, and every job moves through a channel.
        flow: Option<Box<FlowPolicy>>,
        lease_ms: u64,
        now: Timestamp,
        reply: Tx<Result<Vec<ClaimedRow>, EngineError>>,
    },
    Settle {
        updates: Vec<Encoded<LeasedUpdate>>,
        /// Each update's row, where the claim is known to this process.
        seqs: Vec<Option<i64>>,
        reply: Tx<Vec<Result<(), EngineError>>>,
    },
    Redrive {
        request: RedriveRequest,
        now: Timestamp,
        reply: Tx<Result<Vec<TaskId>, EngineError>>,
    },
    Cancel {
        request: CancelRequest,
        now: Timestamp,
        reply: Tx<Result<Vec<TaskId>, EngineError>>,
    },
    Purge {
        queue: String,
        status: Status,
        dry_run: bool,
        reply: Tx<Result<u64, EngineError>>,
    },
    Delete {
        id: TaskId,
        reply: Tx<Result<(), EngineError>>,
    },
    PutConfig {
        queue: String,
        policy: String,
        reply: Tx<Result<(), EngineError>>,
    },
    /// Throttles a flow key (the whole queue with `None`) until `until`.
    Throttle {
        queue: String,
        key: Option<String>,
        until: Timestamp,
        reply: Tx<Result<(), EngineError>>,
    },
    Prune {
        queue: String,
        before: Timestamp,
        limit: usize,
        reply: Tx<Result<u64, EngineError>>,
    },
    /// Writes nothing of consequence, to learn whether writes commit now
    /// (readiness after a failed group).
    Probe { reply: Tx<Result<(), EngineError>> },
    /// A schedule's put, delete or fire.
    Schedule(ScheduleJob),
    /// A source's ingest or the reset of its cursors.
    Source(SourceJob),
}

/// A write with its envelope already encoded by the caller, so the one
/// writer thread spends its time on SQLite rather than on JSON.
pub(crate) struct Encoded<T> {
    pub(crate) item: T,
    pub(crate) bytes: Vec<u8>,
}

impl Encoded<NewTask> {
    /// `task` with its envelope encoded.
    pub(crate) fn task(task: NewTask) -> Self {
        let bytes = task.envelope.encode();
        Self { item: task, bytes }
    }
}

impl Encoded<LeasedUpdate> {
    /// `update` with its envelope encoded, unless it is written compactly.
    pub(crate) fn update(update: LeasedUpdate) -> Self {
        let mut encoded = Self {
            item: update,
            bytes: Vec::new(),
        };
        if !encoded.is_compact() {
            encoded.bytes = encoded.item.envelope.encode();
        }
        encoded
    }

    /// Whether this update is a success, which writes its row's columns
    /// only and keeps the claimed state's bytes (`columns::stored`).
    pub(crate) fn is_compact(&self) -> bool {
        self.item.envelope.status == Status::Succeeded
    }
}

/// A row a claim took: its PENDING envelope bytes and the claim's instant
/// and lease deadline (unix ms), from which the caller finishes the claim.
pub(crate) struct ClaimedRow {
    pub(crate) seq: i64,
    /// The row's id column, to find the envelope in the pending cache
    /// (`None` if the column is damaged: the bytes are decoded instead).
    pub(crate) id: Option<TaskId>,
    pub(crate) bytes: Vec<u8>,
    pub(crate) claimed_at: i64,
    pub(crate) until: i64,
}

impl Job {
    /// How much of a group's budget this request takes.
    pub(super) fn weight(&self) -> usize {
        match self {
            Self::Submit { tasks, .. } => tasks.len().max(1),
            Self::Settle { updates, .. } => updates.len().max(1),
            Self::Claim { max, .. } => (*max).clamp(1, MAX_CLAIM),
            Self::Schedule(job) => job.weight(),
            Self::Source(job) => job.weight(),
            _ => 1,
        }
    }

    /// The request's answer slot, with nothing decided yet.
    pub(super) fn unanswered(self) -> Done {
        match self {
            Self::Submit { tasks, reply } => Done::Submit {
                n: tasks.len(),
                reply,
                results: Vec::new(),
            },
            Self::Settle { updates, reply, .. } => Done::Settle {
                n: updates.len(),
                reply,
                results: Vec::new(),
            },
            Self::Claim { reply, .. } => Done::Claim(reply, Ok(Vec::new())),
            Self::Redrive { reply, .. } | Self::Cancel { reply, .. } => {
                Done::Ids(reply, Ok(Vec::new()))
            }
            Self::Purge { reply, .. } | Self::Prune { reply, .. } => Done::Count(reply, Ok(0)),
            Self::Delete { reply, .. }
            | Self::PutConfig { reply, .. }
            | Self::Throttle { reply, .. }
            | Self::Probe { reply } => Done::Unit(reply, Ok(())),
            Self::Schedule(job) => Done::Schedule(job.unanswered()),
            Self::Source(job) => Done::Source(job.unanswered()),
        }
    }
}

/// A request's decided answer, held back until its group commits.
pub(super) enum Done {
    Submit {
        n: usize,
        reply: Tx<Vec<Result<Submitted, EngineError>>>,
        results: Vec<Result<Submitted, EngineError>>,
    },
    Settle {
        n: usize,
        reply: Tx<Vec<Result<(), EngineError>>>,
        results: Vec<Result<(), EngineError>>,
    },
    Claim(
        Tx<Result<Vec<ClaimedRow>, EngineError>>,
        Result<Vec<ClaimedRow>, EngineError>,
    ),
    Ids(
        Tx<Result<Vec<TaskId>, EngineError>>,
        Result<Vec<TaskId>, EngineError>,
    ),
    Count(Tx<Result<u64, EngineError>>, Result<u64, EngineError>),
    Unit(Tx<Result<(), EngineError>>, Result<(), EngineError>),
    Schedule(ScheduleDone),
    Source(SourceDone),
}

impl Done {
    /// Answers with what was decided (the group committed). A caller that
    /// stopped waiting is no error: its write stands.
    pub(super) fn send(self) {
        match self {
            Self::Submit { reply, results, .. } => drop(reply.send(results)),
            Self::Settle { reply, results, .. } => drop(reply.send(results)),
            Self::Claim(reply, r) => drop(reply.send(r)),
            Self::Ids(reply, r) => drop(reply.send(r)),
            Self::Count(reply, r) => drop(reply.send(r)),
            Self::Unit(reply, r) => drop(reply.send(r)),
            Self::Schedule(done) => done.send(),
            Self::Source(done) => done.send(),
        }
    }

    /// Answers `e` to everything in the request (the group did not commit).
    pub(super) fn fail(self, e: &EngineError) {
        match self {
            Self::Submit { n, reply, .. } => drop(reply.send(vec![Err(e.clone()); n])),
            Self::Settle { n, reply, .. } => drop(reply.send(vec![Err(e.clone()); n])),
            Self::Claim(reply, _) => drop(reply.send(Err(e.clone()))),
            Self::Ids(reply, _) => drop(reply.send(Err(e.clone()))),
            Self::Count(reply, _) => drop(reply.send(Err(e.clone()))),
            Self::Unit(reply, _) => drop(reply.send(Err(e.clone()))),
            Self::Schedule(done) => done.fail(e),
            Self::Source(done) => done.fail(e),
        }
    }
}

/// What the writer thread is told: a write, that the last group's fsync
/// is done, or to finish and stop.
pub(super) enum Msg {
    Job(Job),
    /// The syncer finished the fsync of the group it was given.
    Synced,
    /// Commit what is open, wait for its fsync, and stop.
    Close,
}
