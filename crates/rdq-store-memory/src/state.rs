//! The in-memory store's data and its indexes, behind one lock.
//!
//! Every task lives once, in `tasks`; the indexes beside it only hold ids, so
//! each change goes through [`State::insert`], [`State::replace`] or
//! [`State::remove`], which keep them in step. The indexes are what keep the
//! hot path off full scans: claims walk one queue's due PENDING tasks in claim
//! order, the reaper walks IN_FLIGHT tasks by lease deadline, and listings walk
//! one queue's ids of one status.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use rdq_engine::flow::{self, Candidate, FlowLedger, FlowStatus};
use rdq_engine::glob::Glob;
use rdq_engine::machine::{self, LeaseToken};
use rdq_engine::store::{MAX_PAGE, finished_at, latest_error_type};
use rdq_engine::unique::{self, Decision};
use rdq_engine::{
    CancelRequest, ClaimRequest, EngineError, LeasedUpdate, ListOrder, ListQuery, NewTask, Page,
    QueueConfig, QueueCounts, RedriveRequest, Submitted,
};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};

/// One priority level of a queue's PENDING tasks, ordered by due time, then id.
type DueOrder = BTreeSet<(Option<Timestamp>, TaskId)>;

/// The ids of one queue's tasks, arranged for each way they are looked up.
#[derive(Debug, Default)]
struct QueueIndex {
    /// Every task of the queue, by id.
    all: BTreeSet<TaskId>,
    /// The queue's tasks per status (indexed by [`status_slot`]), by id.
    by_status: [BTreeSet<TaskId>; 4],
    /// PENDING tasks in claim order: highest priority first, then earliest
    /// due (a task with no due time is due now), then oldest id.
    claimable: BTreeMap<Reverse<u8>, DueOrder>,
    /// PENDING tasks per flow key, in claim order: what a flow-controlled
    /// claim gathers its candidates from without walking a loud key's
    /// whole backlog.
    by_key: HashMap<String, BTreeSet<ClaimOrder>>,
}

/// Claim order: highest priority, then earliest due, then oldest id.
type ClaimOrder = (Reverse<u8>, Option<Timestamp>, TaskId);

fn claim_order(env: &Envelope) -> ClaimOrder {
    (Reverse(env.priority), env.next_attempt_at, env.id)
}

impl QueueIndex {
    fn counts(&self, queue: &str) -> QueueCounts {
        let count = |status: Status| self.by_status[status_slot(status)].len() as u64;
        QueueCounts {
            queue: queue.to_owned(),
            pending: count(Status::Pending),
            in_flight: count(Status::InFlight),
            succeeded: count(Status::Succeeded),
            dead: count(Status::Dead),
        }
    }
}

fn status_slot(status: Status) -> usize {
    match status {
        Status::Pending => 0,
        Status::InFlight => 1,
        Status::Succeeded => 2,
        Status::Dead => 3,
    }
}

/// A queue name and an idempotency key: keys are scoped to their queue.
type IdempotencyKey = (String, String);

/// Everything the store holds.
#[derive(Debug, Default)]
pub(crate) struct State {
    tasks: BTreeMap<TaskId, Envelope>,
    queues: BTreeMap<String, QueueIndex>,
    /// IN_FLIGHT tasks with a lease, by deadline.
    leases: BTreeSet<(Timestamp, TaskId)>,
    idempotency: HashMap<IdempotencyKey, TaskId>,
    key_of_task: HashMap<TaskId, IdempotencyKey>,
    /// Unique slots (queue, slot) and the task that took each last: it
    /// holds the slot while its hold says so (`rdq_engine::unique`).
    unique: HashMap<(String, String), TaskId>,
    configs: BTreeMap<String, QueueConfig>,
    /// Each flow-controlled queue's buckets, virtual times and throttles.
    flow: HashMap<String, FlowLedger>,
}

fn matches(glob: Option<&Glob>, env: &Envelope) -> bool {
    glob.is_none_or(|g| latest_error_type(env).is_some_and(|t| g.matches(t)))
}

fn parse_glob(pattern: Option<&str>) -> Result<Option<Glob>, EngineError> {
    pattern
        .map(Glob::new)
        .transpose()
        .map_err(EngineError::InvalidArgument)
}

impl State {
    fn index(&mut self, env: &Envelope) {
        let queue = self.queues.entry(env.queue.clone()).or_default();
        queue.all.insert(env.id);
        queue.by_status[status_slot(env.status)].insert(env.id);
        match env.status {
            Status::Pending => {
                queue
                    .claimable
                    .entry(Reverse(env.priority))
                    .or_default()
                    .insert((env.next_attempt_at, env.id));
                queue
                    .by_key
                    .entry(flow::key_of(env).to_owned())
                    .or_default()
                    .insert(claim_order(env));
            }
            Status::InFlight => {
                if let Some(deadline) = env.lease_expires_at {
                    self.leases.insert((deadline, env.id));
                }
            }
            Status::Succeeded | Status::Dead => {}
        }
    }

    fn unindex(&mut self, env: &Envelope) {
        if let Some(deadline) = env.lease_expires_at {
            self.leases.remove(&(deadline, env.id));
        }
        let Some(queue) = self.queues.get_mut(&env.queue) else {
            return;
        };
        queue.all.remove(&env.id);
        queue.by_status[status_slot(env.status)].remove(&env.id);
        if env.status == Status::Pending {
            let level = Reverse(env.priority);
            if let Some(due) = queue.claimable.get_mut(&level) {
                due.remove(&(env.next_attempt_at, env.id));
                if due.is_empty() {
                    queue.claimable.remove(&level);
                }
            }
            let key = flow::key_of(env);
            if let Some(tasks) = queue.by_key.get_mut(key) {
                tasks.remove(&claim_order(env));
                if tasks.is_empty() {
                    queue.by_key.remove(key);
                }
            }
        }
        if queue.all.is_empty() {
            self.queues.remove(&env.queue);
        }
    }

    fn insert(&mut self, env: Envelope) {
        self.index(&env);
        self.tasks.insert(env.id, env);
    }

    /// Stores a new state of a task that exists, reindexing it.
    fn replace(&mut self, env: Envelope) {
        if let Some(old) = self.tasks.remove(&env.id) {
            self.unindex(&old);
        }
        self.insert(env);
    }

    fn remove(&mut self, id: TaskId) -> Option<Envelope> {
        let env = self.tasks.remove(&id)?;
        self.unindex(&env);
        if let Some(key) = self.key_of_task.remove(&id) {
            self.idempotency.remove(&key);
        }
        if let Some(slot) = unique::slot_of_task(&env) {
            let slot = (env.queue.clone(), slot);
            if self.unique.get(&slot) == Some(&id) {
                self.unique.remove(&slot);
            }
        }
        Some(env)
    }

    pub(crate) fn submit(&mut self, task: NewTask) -> Result<Submitted, EngineError> {
        let slot = task
            .unique
            .as_ref()
            .map(|u| (task.envelope.queue.clone(), u.slot.clone()));
        if let (Some(unique), Some(slot)) = (&task.unique, &slot)
            && let Some(holder) = self.unique.get(slot).and_then(|id| self.tasks.get(id))
        {
            match unique::decide(holder, &task.envelope, unique) {
                Decision::Take => {}
                Decision::Replace(next) => {
                    self.replace(*next.clone());
                    return Ok(Submitted::Existing(*next));
                }
                Decision::Conflict(e) => return Err(e),
                Decision::Existing(holder) => return Ok(Submitted::Existing(*holder)),
            }
        }
        let key = task
            .idempotency_key
            .map(|key| (task.envelope.queue.clone(), key));
        if let Some(original) = key
            .as_ref()
            .and_then(|key| self.idempotency.get(key))
            .and_then(|id| self.tasks.get(id))
        {
            return Ok(Submitted::Existing(original.clone()));
        }
        let id = task.envelope.id;
        if self.tasks.contains_key(&id) {
            return Err(EngineError::InvalidArgument(format!(
                "a task with id {id} already exists"
            )));
        }
        if let Some(key) = key {
            self.idempotency.insert(key.clone(), id);
            self.key_of_task.insert(id, key);
        }
        if let Some(slot) = slot {
            self.unique.insert(slot, id);
        }
        self.insert(task.envelope.clone());
        Ok(Submitted::Created(task.envelope))
    }

    /// Claims under every limit the request carries, in this one locked
    /// step: the global concurrency limit counts the queue's IN_FLIGHT
    /// tasks now.
    pub(crate) fn claim(&mut self, request: &ClaimRequest) -> Vec<Envelope> {
        let (lease_ms, now) = (request.lease_ms, request.now);
        let Some(index) = self.queues.get(&request.queue) else {
            return Vec::new();
        };
        let in_flight = index.by_status[status_slot(Status::InFlight)].len();
        let max = request.room(u64::try_from(in_flight).unwrap_or(u64::MAX));
        let due_ids = match &request.flow {
            None => Self::due_in_order(index, now, max),
            Some(policy) => {
                let per_key = self.in_flight_per_key(&request.queue);
                let mut candidates = Vec::new();
                for (key, tasks) in &index.by_key {
                    let due = tasks
                        .iter()
                        .filter(|(_, at, _)| at.is_none_or(|at| at <= now))
                        .take(max);
                    candidates.extend(due.map(|&(Reverse(priority), due, id)| Candidate {
                        key: key.clone(),
                        priority,
                        due,
                        id,
                    }));
                }
                self.flow
                    .entry(request.queue.clone())
                    .or_default()
                    .select(policy, now, &per_key, candidates, max)
            }
        };
        let mut claimed = Vec::with_capacity(due_ids.len());
        for id in due_ids {
            let Some(Ok((next, _token))) = self
                .tasks
                .get(&id)
                .map(|env| machine::claim(env, lease_ms, now))
            else {
                continue;
            };
            self.replace(next.clone());
            claimed.push(next);
        }
        claimed
    }

    /// Up to `max` of the queue's due PENDING tasks in claim order.
    fn due_in_order(index: &QueueIndex, now: Timestamp, max: usize) -> Vec<TaskId> {
        let mut due_ids = Vec::new();
        'levels: for level in index.claimable.values() {
            for &(due_at, id) in level {
                if due_ids.len() >= max {
                    break 'levels;
                }
                if due_at.is_some_and(|at| at > now) {
                    // The rest of this priority level is due later still.
                    break;
                }
                due_ids.push(id);
            }
        }
        due_ids
    }

    /// The queue's IN_FLIGHT tasks per flow key.
    fn in_flight_per_key(&self, queue: &str) -> HashMap<String, u64> {
        let mut per_key = HashMap::new();
        if let Some(index) = self.queues.get(queue) {
            for id in &index.by_status[status_slot(Status::InFlight)] {
                if let Some(env) = self.tasks.get(id) {
                    *per_key.entry(flow::key_of(env).to_owned()).or_default() += 1;
                }
            }
        }
        per_key
    }

    pub(crate) fn throttle(&mut self, queue: &str, key: Option<&str>, until: Timestamp) {
        self.flow
            .entry(queue.to_owned())
            .or_default()
            .throttle(key, until);
    }

    pub(crate) fn flow_status(
        &self,
        queue: &str,
        policy: &rdq_engine::FlowPolicy,
        now: Timestamp,
    ) -> FlowStatus {
        let per_key = self.in_flight_per_key(queue);
        self.flow
            .get(queue)
            .cloned()
            .unwrap_or_default()
            .status(policy, now, &per_key)
    }

    pub(crate) fn settle(&mut self, update: LeasedUpdate) -> Result<(), EngineError> {
        let id = update.envelope.id;
        let stored = self.tasks.get(&id).ok_or(EngineError::TaskNotFound(id))?;
        if LeaseToken::current(stored) != Some(update.expected) {
            return Err(EngineError::LeaseLost(id));
        }
        // A state decided without the task's cancel request (a worker's
        // stale copy) must not overwrite it: the engine decides again.
        if stored.cancel_requested.is_some() && update.envelope.cancel_requested.is_none() {
            return Err(EngineError::LeaseLost(id));
        }
        self.replace(update.envelope);
        Ok(())
    }

    pub(crate) fn expired_leases(&self, now: Timestamp, limit: usize) -> Vec<Envelope> {
        self.leases
            .iter()
            .take_while(|(deadline, _)| *deadline <= now)
            .filter_map(|(_, id)| self.tasks.get(id))
            .take(limit)
            .cloned()
            .collect()
    }

    pub(crate) fn get(&self, id: TaskId) -> Result<Envelope, EngineError> {
        self.tasks
            .get(&id)
            .cloned()
            .ok_or(EngineError::TaskNotFound(id))
    }

    pub(crate) fn list(&self, query: &ListQuery) -> Result<Page, EngineError> {
        // No limit given (0) means the largest page.
        let limit = match query.limit {
            0 => MAX_PAGE,
            n => n.min(MAX_PAGE),
        };
        let glob = parse_glob(query.error_type.as_deref())?;
        let Some(index) = self.queues.get(&query.queue) else {
            return Ok(Page {
                items: Vec::new(),
                next_cursor: None,
            });
        };
        let ids = match query.status {
            Some(status) => &index.by_status[status_slot(status)],
            None => &index.all,
        };
        let walk: Box<dyn Iterator<Item = &TaskId>> = match (query.order, query.cursor) {
            (ListOrder::NewestFirst, Some(after)) => Box::new(ids.range(..after).rev()),
            (ListOrder::NewestFirst, None) => Box::new(ids.iter().rev()),
            (ListOrder::OldestFirst, Some(after)) => {
                Box::new(ids.range((Bound::Excluded(after), Bound::Unbounded)))
            }
            (ListOrder::OldestFirst, None) => Box::new(ids.iter()),
        };
        let items: Vec<Envelope> = walk
            .filter_map(|id| self.tasks.get(id))
            .filter(|env| matches(glob.as_ref(), env))
            .take(limit)
            .cloned()
            .collect();
        let next_cursor = if items.len() == limit {
            items.last().map(|env| env.id)
        } else {
            None
        };
        Ok(Page { items, next_cursor })
    }

    pub(crate) fn redrive(
        &mut self,
        request: &RedriveRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError> {
        let glob = parse_glob(request.error_type.as_deref())?;
        let Some(index) = self.queues.get(&request.queue) else {
            return Ok(Vec::new());
        };
        let dead = &index.by_status[status_slot(Status::Dead)];
        let candidates: Vec<TaskId> = match &request.ids {
            Some(ids) => {
                let mut seen = BTreeSet::new();
                ids.iter()
                    .copied()
                    .filter(|id| dead.contains(id) && seen.insert(*id))
                    .collect()
            }
            None => dead.iter().copied().collect(),
        };
        let chosen: Vec<TaskId> = candidates
            .into_iter()
            .filter(|id| {
                self.tasks
                    .get(id)
                    .is_some_and(|env| matches(glob.as_ref(), env))
            })
            .take(request.limit.unwrap_or(usize::MAX))
            .collect();
        for id in &chosen {
            self.may_redrive(*id, now)?;
        }
        if request.dry_run {
            return Ok(chosen);
        }
        let mut redriven = Vec::with_capacity(chosen.len());
        for id in chosen {
            let Some(Ok(next)) = self.tasks.get(&id).map(|env| machine::redrive(env, now)) else {
                continue;
            };
            if let Some(slot) = unique::slot_of_task(&next) {
                self.unique.insert((next.queue.clone(), slot), id);
            }
            self.replace(next);
            redriven.push(id);
        }
        Ok(redriven)
    }

    /// Refuses (`UNIQUE_HELD`) to bring back task `id` while another task
    /// holds its unique slot; else the slot is the task's again.
    fn may_redrive(&mut self, id: TaskId, now: Timestamp) -> Result<(), EngineError> {
        let Some(env) = self.tasks.get(&id) else {
            return Ok(());
        };
        let Some(slot) = unique::slot_of_task(env) else {
            return Ok(());
        };
        let slot = (env.queue.clone(), slot);
        if let Some(holder) = self.unique.get(&slot).and_then(|h| self.tasks.get(h)) {
            unique::may_return(id, holder, now)?;
        }
        Ok(())
    }

    pub(crate) fn cancel_pending(
        &mut self,
        request: &CancelRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError> {
        let mut seen = BTreeSet::new();
        let mut cancelled = Vec::new();
        for id in &request.ids {
            if !seen.insert(*id) {
                continue;
            }
            let Some(env) = self.tasks.get(id).filter(|env| env.queue == request.queue) else {
                continue;
            };
            let Ok(next) = machine::cancel(env, &request.by, &request.message, now) else {
                continue;
            };
            if !request.dry_run {
                self.replace(next);
            }
            cancelled.push(*id);
        }
        Ok(cancelled)
    }

    pub(crate) fn purge(&mut self, queue: &str, status: Status, dry_run: bool) -> u64 {
        let ids: Vec<TaskId> = self
            .queues
            .get(queue)
            .map(|index| {
                index.by_status[status_slot(status)]
                    .iter()
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        if !dry_run {
            for &id in &ids {
                self.remove(id);
            }
        }
        ids.len() as u64
    }

    pub(crate) fn delete(&mut self, id: TaskId) -> Result<(), EngineError> {
        self.remove(id)
            .map(|_| ())
            .ok_or(EngineError::TaskNotFound(id))
    }

    pub(crate) fn counts(&self) -> Vec<QueueCounts> {
        let names: BTreeSet<&String> = self.queues.keys().chain(self.configs.keys()).collect();
        names
            .into_iter()
            .map(|name| match self.queues.get(name) {
                Some(index) => index.counts(name),
                None => QueueCounts {
                    queue: name.clone(),
                    ..QueueCounts::default()
                },
            })
            .collect()
    }

    pub(crate) fn get_config(&self, queue: &str) -> Option<QueueConfig> {
        self.configs.get(queue).cloned()
    }

    pub(crate) fn put_config(&mut self, queue: &str, policy: &QueueConfig) {
        self.configs.insert(queue.to_owned(), policy.clone());
    }

    pub(crate) fn prune_succeeded(
        &mut self,
        queue: &str,
        finished_before: Timestamp,
        limit: usize,
    ) -> u64 {
        let Some(index) = self.queues.get(queue) else {
            return 0;
        };
        let prunable: Vec<TaskId> = index.by_status[status_slot(Status::Succeeded)]
            .iter()
            .filter(|id| {
                self.tasks
                    .get(id)
                    .is_some_and(|env| finished_at(env) < finished_before)
            })
            .take(limit)
            .copied()
            .collect();
        for &id in &prunable {
            self.remove(id);
        }
        prunable.len() as u64
    }
}
