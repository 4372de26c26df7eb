//! Periodic schedules on the engine: storing them (validated with
//! `rdq-schedule`'s rules) and firing their due times ([`Engine::fire_due`]).
//!
//! Every node runs `fire_due` on its own tick; no node leads. For each
//! schedule a tick reads the stored cursor, asks `rdq_schedule::plan` what
//! is due (with the state of the last fire's task, for the overlap policy)
//! and hands the store one [`FireRequest`]: move the cursor from the value
//! read, submit the fires' tasks, count the skips, atomically. A node that
//! planned from a cursor another node has since moved changes nothing, and
//! each task carries the key `rdq.schedule:{name}:{due_ms}`, so a due time
//! is submitted once whatever the nodes' clocks say; a clock that is off
//! only makes its node's fires early or late by as much.
//!
//! Changing a schedule keeps its cursor: due times already accounted for
//! stay so. The change counts as the schedule's new creation, so due times
//! of the new definition before the change are neither fired nor skipped,
//! and resuming a paused schedule does not catch up on the pause.

use std::collections::{BTreeMap, HashMap};

use rdq_envelope::{Status, TaskId, Timestamp};
use rdq_schedule::{
    Fire, RunState, Schedule, ScheduleError, Skipped, Tick, ValidSchedule, fire_headers,
    idempotency_key, plan,
};

use crate::engine::{Engine, SubmitRequest};
use crate::error::EngineError;
use crate::policy::QueuePolicy;
use crate::store::{
    FireOutcome, FireRequest, NewTask, ScheduleOwner, SchedulePut, Schedules, StoredSchedule,
    Submitted, unsupported,
};

/// Schedules read per store call while ticking or listing.
const PAGE: usize = 500;

/// Reads and compare-and-swaps a pause or resume tries before giving up
/// (each lost try means another put landed in between).
const MAX_REPLACE_TRIES: usize = 16;

/// Schedules fired per store call while ticking: on PostgreSQL, per
/// transaction.
pub const FIRE_BATCH: usize = 250;

/// A stored schedule as the engine reads it: the definition, its firing
/// state and when it is next due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleInfo {
    /// The definition, as put.
    pub schedule: Schedule,
    /// Who put it.
    pub owner: ScheduleOwner,
    /// When it was first put (ms since the Unix epoch).
    pub created_at_ms: i64,
    /// When it was last put.
    pub updated_at_ms: i64,
    /// The last due time accounted for (submitted or skipped).
    pub last_due_ms: Option<i64>,
    /// The task of the last fire.
    pub last_fired_task: Option<TaskId>,
    /// When the last fire that submitted a task ran.
    pub last_fire_at_ms: Option<i64>,
    /// Tasks submitted over the schedule's life.
    pub fires: u64,
    /// Due times skipped, by reason.
    pub skips: BTreeMap<String, u64>,
    /// The next due time after now and after the cursor, if any.
    pub next_due_ms: Option<i64>,
}

/// A task a tick submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleFired {
    /// The schedule.
    pub schedule: String,
    /// The fire's logical due time.
    pub due_ms: i64,
    /// A catch-up fire, not the latest due time.
    pub backfilled: bool,
    /// The task, new or (its key seen before) the original.
    pub task: TaskId,
    /// False when the key was seen before and the original came back.
    pub created: bool,
}

/// Due times a tick skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleSkipped {
    /// The schedule.
    pub schedule: String,
    /// The run of due times and why.
    pub skipped: Skipped,
}

/// A schedule a tick could not fire; the others were fired regardless.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleFailure {
    /// The schedule.
    pub schedule: String,
    /// Why.
    pub error: EngineError,
}

/// What one [`Engine::fire_due`] did: the counters the scheduler service
/// reports.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FireReport {
    /// Schedules looked at.
    pub schedules: usize,
    /// Tasks submitted, oldest due time first per schedule.
    pub fired: Vec<ScheduleFired>,
    /// Due times skipped.
    pub skipped: Vec<ScheduleSkipped>,
    /// Fires another node made first (this node's plan changed nothing).
    pub raced: usize,
    /// Schedules that could not be fired this time.
    pub failed: Vec<ScheduleFailure>,
    /// The earliest next due time over every schedule, if any.
    pub next_due_ms: Option<i64>,
}

impl FireReport {
    /// Skipped due times per reason (`rdq_schedule_skipped_total{reason}`).
    pub fn skipped_by_reason(&self) -> BTreeMap<&'static str, u64> {
        let mut by = BTreeMap::new();
        for s in &self.skipped {
            *by.entry(s.skipped.reason.as_str()).or_default() += s.skipped.count;
        }
        by
    }
}

impl Engine {
    fn schedule_store(&self) -> Result<&dyn Schedules, EngineError> {
        match self.store.as_schedules() {
            Some(s) => Ok(s),
            None => unsupported("store schedules"),
        }
    }

    /// Validates `schedule` and stores it under its name, replacing the
    /// definition of one with that name (its cursor and counters stay).
    /// A schedule that breaks a rule is refused with the rule's code
    /// (`INVALID_CRON`, `UNKNOWN_TIME_ZONE`, …) and nothing is stored.
    pub async fn put_schedule(
        &self,
        schedule: Schedule,
        owner: ScheduleOwner,
    ) -> Result<ScheduleInfo, EngineError> {
        let valid = ValidSchedule::new(schedule)?;
        let store = self.schedule_store()?;
        let rules = valid.schedule();
        store
            .put_schedule(&self.schedule_put(rules, owner)?)
            .await?;
        self.get_schedule(&rules.name).await
    }

    /// What the store keeps of `schedule`, put now by `owner`.
    fn schedule_put(
        &self,
        schedule: &Schedule,
        owner: ScheduleOwner,
    ) -> Result<SchedulePut, EngineError> {
        let definition = serde_json::to_string(schedule).map_err(|e| {
            EngineError::InvalidArgument(format!("the schedule does not serialise: {e}"))
        })?;
        Ok(SchedulePut {
            name: schedule.name.clone(),
            queue: schedule.task.queue.clone(),
            owner,
            definition,
            now_ms: self.now().unix_ms(),
        })
    }

    /// The schedule called `name`: `SCHEDULE_NOT_FOUND` when there is none.
    pub async fn get_schedule(&self, name: &str) -> Result<ScheduleInfo, EngineError> {
        match self.schedule_store()?.get_schedule(name).await? {
            Some(stored) => info(stored, self.now().unix_ms()),
            None => Err(EngineError::ScheduleNotFound(name.to_owned())),
        }
    }

    /// Every schedule, in name order.
    pub async fn list_schedules(&self) -> Result<Vec<ScheduleInfo>, EngineError> {
        let store = self.schedule_store()?;
        let now_ms = self.now().unix_ms();
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = store.list_schedules(after.as_deref(), PAGE).await?;
            let full = page.len() >= PAGE;
            after = page.last().map(|s| s.name.clone());
            for stored in page {
                out.push(info(stored, now_ms)?);
            }
            if !full {
                return Ok(out);
            }
        }
    }

    /// Pauses (`paused`) or resumes the schedule called `name`
    /// (`SCHEDULE_NOT_FOUND` when there is none), changing nothing else: a
    /// read-modify-write that applies only while the definition read is
    /// still stored, read again after a concurrent put, so that put is
    /// never undone. Pausing a paused schedule (or resuming a running one)
    /// changes nothing. A change counts as the schedule's new creation
    /// (module documentation): resuming does not catch up on the pause.
    pub async fn set_schedule_paused(
        &self,
        name: &str,
        paused: bool,
    ) -> Result<ScheduleInfo, EngineError> {
        let store = self.schedule_store()?;
        for _ in 0..MAX_REPLACE_TRIES {
            let Some(stored) = store.get_schedule(name).await? else {
                return Err(EngineError::ScheduleNotFound(name.to_owned()));
            };
            let mut schedule = parse(&stored)?.into_schedule();
            if schedule.paused == paused {
                return info(stored, self.now().unix_ms());
            }
            schedule.paused = paused;
            let put = self.schedule_put(&schedule, stored.owner)?;
            if store.replace_schedule_if(&put, &stored.definition).await? {
                return self.get_schedule(name).await;
            }
        }
        Err(EngineError::Unavailable(format!(
            "schedule {name} changed {MAX_REPLACE_TRIES} times while it was being paused or resumed; try again"
        )))
    }

    /// Removes the schedule called `name` (`SCHEDULE_NOT_FOUND` when there
    /// is none); the tasks it submitted stay.
    pub async fn delete_schedule(&self, name: &str) -> Result<(), EngineError> {
        if self.schedule_store()?.delete_schedule(name).await? {
            Ok(())
        } else {
            Err(EngineError::ScheduleNotFound(name.to_owned()))
        }
    }

    /// One scheduler tick at `now`: plans every schedule (a due time at
    /// most `grace_ms` late is on time; the tick period) and fires what is
    /// due, [`FIRE_BATCH`] schedules per store call, each fire atomic on its
    /// own (module documentation). A schedule that cannot be fired is
    /// reported and left for the next tick; the others fire regardless.
    /// `UNSUPPORTED` on a store without schedules.
    ///
    /// Each tick walks the schedules from a random point, so nodes ticking
    /// at the same instant (every node wakes at the same due time) mostly
    /// fire different schedules instead of racing for the same ones.
    pub async fn fire_due(&self, now: Timestamp, grace_ms: u64) -> Result<FireReport, EngineError> {
        let store = self.schedule_store()?;
        let mut report = FireReport::default();
        let mut all: Vec<StoredSchedule> = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = store.list_schedules(after.as_deref(), PAGE).await?;
            let full = page.len() >= PAGE;
            after = page.last().map(|s| s.name.clone());
            all.extend(page);
            if !full {
                break;
            }
        }
        report.schedules = all.len();
        if !all.is_empty() {
            let start =
                usize::try_from(getrandom::u64().unwrap_or(0) % all.len() as u64).unwrap_or(0);
            all.rotate_left(start);
        }
        let now_ms = now.unix_ms();
        let mut policies: HashMap<String, QueuePolicy> = HashMap::new();
        for chunk in all.chunks(FIRE_BATCH) {
            let mut planned: Vec<Planned> = Vec::with_capacity(chunk.len());
            let mut requests: Vec<FireRequest> = Vec::with_capacity(chunk.len());
            for stored in chunk {
                match self
                    .plan_fire(stored, now_ms, grace_ms, &mut policies, &mut report)
                    .await
                {
                    Ok(Some((p, request))) => {
                        planned.push(p);
                        requests.push(request);
                    }
                    Ok(None) => {}
                    Err(error) => report.failed.push(ScheduleFailure {
                        schedule: stored.name.clone(),
                        error,
                    }),
                }
            }
            if planned.is_empty() {
                continue;
            }
            let outcomes = store.fire_schedules(&requests).await;
            for (p, outcome) in planned.into_iter().zip(outcomes) {
                match outcome {
                    Ok(outcome) => account(p, outcome, &mut report),
                    Err(error) => report.failed.push(ScheduleFailure {
                        schedule: p.name,
                        error,
                    }),
                }
            }
        }
        if !report.fired.is_empty() {
            self.work_available.notify_waiters();
        }
        Ok(report)
    }

    /// What `stored` has due at `now_ms`, as a fire to hand the store;
    /// `None` when nothing is due. Each queue's policy is read once a tick.
    async fn plan_fire(
        &self,
        stored: &StoredSchedule,
        now_ms: i64,
        grace_ms: u64,
        policies: &mut HashMap<String, QueuePolicy>,
        report: &mut FireReport,
    ) -> Result<Option<(Planned, FireRequest)>, EngineError> {
        let valid = parse(stored)?;
        let rules = valid.schedule();
        let previous_run = match stored.last_fired_task {
            // Only an overlap policy reads the previous task: spare the
            // lookup for the others.
            Some(id) if rules.overlap != rdq_schedule::Overlap::Allow => {
                Some(self.run_state(id).await?)
            }
            _ => None,
        };
        // A change counts as the schedule's creation (module documentation).
        let since = stored.updated_at_ms;
        let tick = Tick {
            now_ms,
            last_fired_due_ms: stored.last_due_ms.map(|c| c.max(since.saturating_sub(1))),
            previous_run,
            created_at_ms: since,
            grace_ms,
        };
        let planned = plan(&valid, &tick);
        if let Some(next) = planned.next_due_ms {
            report.next_due_ms = Some(report.next_due_ms.map_or(next, |n| n.min(next)));
        }
        let Some(last_due_ms) = planned.last_due_ms else {
            return Ok(None);
        };
        if planned.submit.is_empty() && planned.skipped.is_empty() {
            return Ok(None);
        }
        let queue = &rules.task.queue;
        let policy = match policies.get(queue) {
            Some(policy) => policy,
            None => {
                let policy = self.policy(queue).await?;
                policies.entry(queue.clone()).or_insert(policy)
            }
        };
        let tasks = planned
            .submit
            .iter()
            .map(|fire| self.fire_task(rules, fire, policy))
            .collect::<Result<Vec<NewTask>, EngineError>>()?;
        let mut skipped: BTreeMap<&'static str, u64> = BTreeMap::new();
        for run in &planned.skipped {
            *skipped.entry(run.reason.as_str()).or_default() += run.count;
        }
        let request = FireRequest {
            name: rules.name.clone(),
            expected_last_due_ms: stored.last_due_ms,
            last_due_ms,
            tasks,
            skipped: skipped
                .into_iter()
                .map(|(reason, n)| (reason.to_owned(), n))
                .collect(),
            now_ms,
        };
        let planned = Planned {
            name: rules.name.clone(),
            submit: planned.submit,
            skipped: planned.skipped,
        };
        Ok(Some((planned, request)))
    }

    /// The task of a fire: the template, the fire's reserved headers and
    /// its idempotency key, shaped as any submit is.
    fn fire_task(
        &self,
        rules: &Schedule,
        fire: &Fire,
        policy: &QueuePolicy,
    ) -> Result<NewTask, EngineError> {
        let t = &rules.task;
        self.build(
            &SubmitRequest {
                queue: t.queue.clone(),
                handler_ref: t.handler_ref.clone(),
                payload: t.payload.clone(),
                payload_content_type: t.payload_content_type.clone(),
                headers: t.headers.clone(),
                system_headers: fire_headers(&rules.name, fire),
                priority: t.priority,
                idempotency_key: Some(idempotency_key(&rules.name, fire.due_ms)),
                flow_key: t.flow_key.clone(),
                ..SubmitRequest::default()
            },
            policy,
        )
    }

    /// Where the previous fire's task stands, for the overlap policy.
    async fn run_state(&self, id: TaskId) -> Result<RunState, EngineError> {
        match self.get(id).await {
            Ok(env) => Ok(match env.status {
                Status::Pending => RunState::Pending,
                Status::InFlight => RunState::Running,
                Status::Succeeded | Status::Dead => RunState::Finished,
            }),
            Err(EngineError::TaskNotFound(_) | EngineError::Unsupported(_)) => {
                Ok(RunState::Unknown)
            }
            Err(e) => Err(e),
        }
    }
}

/// A fire planned for one schedule, and what to report once it is applied.
struct Planned {
    name: String,
    submit: Vec<Fire>,
    skipped: Vec<Skipped>,
}

/// Reports what the store did with a planned fire.
fn account(p: Planned, outcome: FireOutcome, report: &mut FireReport) {
    match outcome {
        FireOutcome::Raced => report.raced += 1,
        FireOutcome::Fired(results) => {
            for (fire, result) in p.submit.iter().zip(results) {
                match result {
                    Ok(submitted) => report.fired.push(ScheduleFired {
                        schedule: p.name.clone(),
                        due_ms: fire.due_ms,
                        backfilled: fire.backfilled,
                        task: submitted.envelope().id,
                        created: matches!(submitted, Submitted::Created(_)),
                    }),
                    Err(error) => report.failed.push(ScheduleFailure {
                        schedule: p.name.clone(),
                        error,
                    }),
                }
            }
            report
                .skipped
                .extend(p.skipped.into_iter().map(|skipped| ScheduleSkipped {
                    schedule: p.name.clone(),
                    skipped,
                }));
        }
    }
}

/// The stored definition, checked again: rules may have tightened since it
/// was put, and the store's bytes are not trusted blindly.
fn parse(stored: &StoredSchedule) -> Result<ValidSchedule, EngineError> {
    let schedule: Schedule = serde_json::from_str(&stored.definition).map_err(|e| {
        EngineError::CorruptStore(format!(
            "schedule {}: the stored definition does not parse: {e}",
            stored.name
        ))
    })?;
    ValidSchedule::new(schedule).map_err(|e: ScheduleError| {
        EngineError::CorruptStore(format!(
            "schedule {}: the stored definition breaks a rule: {} ({e})",
            stored.name,
            e.code()
        ))
    })
}

fn info(stored: StoredSchedule, now_ms: i64) -> Result<ScheduleInfo, EngineError> {
    let valid = parse(&stored)?;
    // As a tick reads it: after the cursor and the last change, and not
    // before now (a due time at now itself is still to come).
    let since = stored.updated_at_ms.saturating_sub(1);
    let after = stored
        .last_due_ms
        .map_or(since, |c| c.max(since))
        .max(now_ms.saturating_sub(1));
    let next_due_ms = valid.timing().next_due_after(after);
    Ok(ScheduleInfo {
        schedule: valid.into_schedule(),
        owner: stored.owner,
        created_at_ms: stored.created_at_ms,
        updated_at_ms: stored.updated_at_ms,
        last_due_ms: stored.last_due_ms,
        last_fired_task: stored.last_fired_task,
        last_fire_at_ms: stored.last_fire_at_ms,
        fires: stored.fires,
        skips: stored.skips,
        next_due_ms,
    })
}
