//! The store side of periodic schedules ([`Schedules`]): where each
//! schedule's definition and cursor live, and the one atomic step that
//! fires a schedule.
//!
//! A store keeps a schedule as opaque JSON (the engine's
//! `rdq_schedule::Schedule`) beside the fields the engine reads back at
//! every tick: the cursor (the last due time accounted for), the task the
//! last fire submitted (for the overlap policy) and counters. It needs no
//! knowledge of cron patterns, zones or policies: the engine plans every
//! tick with `rdq_schedule::plan` and hands the store a [`FireRequest`].
//!
//! Exactly once, without a leader: every node ticks every schedule, and a
//! fire moves the cursor only from the value its planner read, in the same
//! transaction, script or writer step that submits the fire's tasks. Of two
//! nodes planning the same due time, one moves the cursor and submits; the
//! other finds the cursor moved and changes nothing ([`FireOutcome::Raced`]).
//! Each task also carries the fire's idempotency key, so even a fire whose
//! answer was lost and that is tried again cannot submit a due time twice.

use std::collections::BTreeMap;

use async_trait::async_trait;
use rdq_envelope::TaskId;

use crate::error::EngineError;
use crate::store::{NewTask, Submitted};

/// Who put a schedule: what a reconciliation may replace or remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ScheduleOwner {
    /// Declared in a program's code and upserted at its start.
    Code,
    /// Created through the API (HTTP, gRPC, the CLI).
    #[default]
    Api,
}

impl ScheduleOwner {
    /// The stored spelling: `code` or `api`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Code => "code",
            Self::Api => "api",
        }
    }

    /// The owner a stored spelling names; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "code" => Some(Self::Code),
            "api" => Some(Self::Api),
            _ => None,
        }
    }
}

/// A schedule to store, replacing one of the same name (an upsert).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulePut {
    /// The unique name.
    pub name: String,
    /// The queue its fires submit to: a store that keeps a queue's data
    /// together (Redis's hash tags) keeps the schedule with it.
    pub queue: String,
    /// Who put it.
    pub owner: ScheduleOwner,
    /// The schedule's JSON, stored and given back verbatim.
    pub definition: String,
    /// When it is put (ms since the Unix epoch): the creation time of a new
    /// schedule, the update time of an existing one.
    pub now_ms: i64,
}

/// A stored schedule and its firing state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoredSchedule {
    /// The unique name.
    pub name: String,
    /// Who put it last.
    pub owner: ScheduleOwner,
    /// The schedule's JSON, as put.
    pub definition: String,
    /// When it was first put.
    pub created_at_ms: i64,
    /// When it was last put (equal to `created_at_ms` until a change).
    pub updated_at_ms: i64,
    /// The cursor: the last due time a fire accounted for, submitted or
    /// skipped; `None` until the first fire. Kept across puts.
    pub last_due_ms: Option<i64>,
    /// The task the last fire submitted (or found under its key).
    pub last_fired_task: Option<TaskId>,
    /// When the last fire that submitted a task ran.
    pub last_fire_at_ms: Option<i64>,
    /// Tasks submitted by fires, over the schedule's life.
    pub fires: u64,
    /// Due times skipped, by reason (`rdq_schedule::SkipReason::as_str`).
    pub skips: BTreeMap<String, u64>,
}

/// One fire: move the cursor, submit, count, as one atomic step.
#[derive(Debug, Clone, PartialEq)]
pub struct FireRequest {
    /// The schedule.
    pub name: String,
    /// The cursor the caller read; the fire applies only while the store
    /// still holds exactly this value (`None`: never fired).
    pub expected_last_due_ms: Option<i64>,
    /// The new cursor.
    pub last_due_ms: i64,
    /// The tasks to submit, oldest due time first, each with its fire's
    /// idempotency key; the last becomes `last_fired_task`.
    pub tasks: Vec<NewTask>,
    /// Due times skipped by this fire, by reason, to add to the counters.
    pub skipped: Vec<(String, u64)>,
    /// Now (ms since the Unix epoch): `last_fire_at_ms` when tasks are submitted.
    pub now_ms: i64,
}

/// What a fire did.
#[derive(Debug, Clone, PartialEq)]
pub enum FireOutcome {
    /// The cursor moved and the tasks were submitted: one result per task,
    /// as a submit answers (a key seen before gives back the original).
    Fired(Vec<Result<Submitted, EngineError>>),
    /// The cursor no longer held the expected value (another node fired
    /// first), or the schedule is gone: nothing changed.
    Raced,
}

/// Stores schedules and fires them atomically (module documentation).
#[async_trait]
pub trait Schedules: Send + Sync {
    /// Stores `put`, replacing the definition and owner of a schedule of the
    /// same name while keeping its cursor, counters and creation time.
    /// Answers whether it was new.
    async fn put_schedule(&self, put: &SchedulePut) -> Result<bool, EngineError>;

    /// Replaces the definition and owner of schedule `put.name` only while
    /// its stored definition is exactly `expected` (what the caller read),
    /// keeping its cursor, counters and creation time: the compare-and-swap
    /// behind a read-modify-write such as pausing, so a concurrent put is
    /// never overwritten with what was read before it. `put.queue` is the
    /// queue of `expected`. Answers whether it replaced; `false` when the
    /// definition changed or the schedule is gone.
    async fn replace_schedule_if(
        &self,
        put: &SchedulePut,
        expected: &str,
    ) -> Result<bool, EngineError>;

    /// The schedule called `name`, if there is one.
    async fn get_schedule(&self, name: &str) -> Result<Option<StoredSchedule>, EngineError>;

    /// Up to `limit` schedules in name order, after `after` when given.
    async fn list_schedules(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StoredSchedule>, EngineError>;

    /// Removes the schedule called `name`; answers whether there was one.
    /// Tasks it submitted stay.
    async fn delete_schedule(&self, name: &str) -> Result<bool, EngineError>;

    /// Applies `fire` only if the schedule's cursor is still
    /// `fire.expected_last_due_ms`: moves it to `fire.last_due_ms`, submits
    /// `fire.tasks` (with their idempotency keys), records the last task and
    /// adds to the counters, all in one atomic step. Otherwise changes
    /// nothing and answers [`FireOutcome::Raced`].
    async fn fire_schedule(&self, fire: &FireRequest) -> Result<FireOutcome, EngineError>;

    /// Applies each of `fires` as [`Schedules::fire_schedule`] does, one
    /// outcome per fire in order: what a tick hands the store. A store that
    /// can do many fires in one transaction does (PostgreSQL), so a tick of
    /// thousands of schedules costs a few commits; each fire still applies
    /// only from its own expected cursor, and a fire that fails fails
    /// alone where the store can tell (a batch that fails as a whole
    /// answers its error for each fire). `fires` name distinct schedules.
    /// By default, one after another.
    async fn fire_schedules(&self, fires: &[FireRequest]) -> Vec<Result<FireOutcome, EngineError>> {
        let mut out = Vec::with_capacity(fires.len());
        for fire in fires {
            out.push(self.fire_schedule(fire).await);
        }
        out
    }
}

/// Adds `skipped` to a schedule's counters.
pub fn add_skips(skips: &mut BTreeMap<String, u64>, skipped: &[(String, u64)]) {
    for (reason, n) in skipped {
        let count = skips.entry(reason.clone()).or_default();
        *count = count.saturating_add(*n);
    }
}

/// The task a fire records as its last: the newest task's id as stored
/// (the original's, when its key was seen before), if it was stored.
pub fn last_task(results: &[Result<Submitted, EngineError>]) -> Option<TaskId> {
    results.iter().rev().find_map(|r| match r {
        Ok(s) => Some(s.envelope().id),
        Err(_) => None,
    })
}

/// How many of a fire's tasks were new (a key seen before brings back the
/// original, which an earlier fire counted).
pub fn created_count(results: &[Result<Submitted, EngineError>]) -> u64 {
    results
        .iter()
        .filter(|r| matches!(r, Ok(Submitted::Created(_))))
        .count() as u64
}

/// Applies a won fire's bookkeeping to `schedule`: the cursor, the last
/// task, the counters. What every store records, wherever it keeps it.
pub fn record_fire(
    schedule: &mut StoredSchedule,
    fire: &FireRequest,
    results: &[Result<Submitted, EngineError>],
) {
    schedule.last_due_ms = Some(fire.last_due_ms);
    if let Some(task) = last_task(results) {
        schedule.last_fired_task = Some(task);
        schedule.last_fire_at_ms = Some(fire.now_ms);
    }
    schedule.fires = schedule.fires.saturating_add(created_count(results));
    add_skips(&mut schedule.skips, &fire.skipped);
}
