//! rdq's in-memory store: the whole storage SPI held in one process.
//!
//! [`MemoryStore`] is what tests, examples and the SDK's no-broker backend run
//! on. It keeps no clock of its own (time always arrives as `now`), so with a
//! [`rdq_engine::ManualClock`] every schedule, lease and backoff is virtual and
//! deterministic. It implements every extension of the SPI and honours every
//! part of a claim request, and is
//! held to the same compliance suite as the durable stores. Nothing survives
//! the process: it is for tests, not for data that matters.

#![forbid(unsafe_code)]

mod schedules;
mod sources;
mod state;

use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use rdq_engine::{
    Cancel, CancelRequest, ClaimRequest, ConfigStore, EngineError, LeasedUpdate, ListQuery,
    NewTask, Page, Pruning, QueueConfig, QueueCounts, Redrive, RedriveRequest, Removal, Store,
    Submitted, TaskCounts, TaskListing, TaskLookup, WorkCapabilities,
};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};

use crate::state::State;

/// A [`Store`] that keeps every task in memory, indexed so that claims and
/// lease reaping never scan.
///
/// Every operation takes one lock for its whole duration, so each call is
/// atomic: no task is handed to two claimers and every settle is a true
/// compare-and-swap on the task's lease.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
    /// Apart from the tasks: a fire takes this lock, then the tasks' one.
    schedules: Mutex<schedules::ScheduleMap>,
    /// Apart from the tasks: an ingest takes this lock, then the tasks' one.
    cursors: Mutex<sources::CursorMap>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // No operation can panic half-way through a change, so a poisoned lock
        // still guards consistent data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn cursors(&self) -> MutexGuard<'_, sources::CursorMap> {
        // As for `state`: no change can panic half-way.
        self.cursors.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn schedules(&self) -> MutexGuard<'_, schedules::ScheduleMap> {
        // As for `state`: no change can panic half-way.
        self.schedules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn capabilities(&self) -> WorkCapabilities {
        WorkCapabilities {
            idempotent_submit: true,
            claim_max_in_flight: true,
            claim_flow: true,
            ends_once: true,
            unique: true,
        }
    }

    async fn submit(&self, tasks: Vec<NewTask>) -> Vec<Result<Submitted, EngineError>> {
        let mut state = self.state();
        tasks.into_iter().map(|task| state.submit(task)).collect()
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Envelope>, EngineError> {
        request.refuse_unsupported(self.capabilities())?;
        Ok(self.state().claim(request))
    }

    async fn settle(&self, updates: Vec<LeasedUpdate>) -> Vec<Result<(), EngineError>> {
        let mut state = self.state();
        updates
            .into_iter()
            .map(|update| state.settle(update))
            .collect()
    }

    async fn throttle(
        &self,
        queue: &str,
        key: Option<&str>,
        until: Timestamp,
    ) -> Result<(), EngineError> {
        self.state().throttle(queue, key, until);
        Ok(())
    }

    async fn flow_status(
        &self,
        queue: &str,
        flow: &rdq_engine::FlowPolicy,
        now: Timestamp,
    ) -> Result<rdq_engine::FlowStatus, EngineError> {
        Ok(self.state().flow_status(queue, flow, now))
    }

    async fn expired_leases(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Envelope>, EngineError> {
        Ok(self.state().expired_leases(now, limit))
    }

    rdq_engine::offer_extensions!(
        TaskLookup,
        TaskListing,
        TaskCounts,
        Redrive,
        Cancel,
        Removal,
        Pruning,
        ConfigStore,
        Schedules,
        SourceCursors
    );
}

#[async_trait]
impl TaskLookup for MemoryStore {
    async fn get(&self, id: TaskId) -> Result<Envelope, EngineError> {
        self.state().get(id)
    }
}

#[async_trait]
impl TaskListing for MemoryStore {
    async fn list(&self, query: &ListQuery) -> Result<Page, EngineError> {
        self.state().list(query)
    }
}

#[async_trait]
impl TaskCounts for MemoryStore {
    async fn counts(&self) -> Result<Vec<QueueCounts>, EngineError> {
        Ok(self.state().counts())
    }
}

#[async_trait]
impl Redrive for MemoryStore {
    async fn redrive(
        &self,
        request: &RedriveRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError> {
        self.state().redrive(request, now)
    }
}

#[async_trait]
impl Cancel for MemoryStore {
    async fn cancel_pending(
        &self,
        request: &CancelRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError> {
        self.state().cancel_pending(request, now)
    }
}

#[async_trait]
impl Removal for MemoryStore {
    async fn purge(&self, queue: &str, status: Status, dry_run: bool) -> Result<u64, EngineError> {
        Ok(self.state().purge(queue, status, dry_run))
    }

    async fn delete(&self, id: TaskId) -> Result<(), EngineError> {
        self.state().delete(id)
    }
}

#[async_trait]
impl Pruning for MemoryStore {
    async fn prune_succeeded(
        &self,
        queue: &str,
        finished_before: Timestamp,
        limit: usize,
    ) -> Result<u64, EngineError> {
        Ok(self.state().prune_succeeded(queue, finished_before, limit))
    }
}

#[async_trait]
impl ConfigStore for MemoryStore {
    async fn get_config(&self, queue: &str) -> Result<Option<QueueConfig>, EngineError> {
        Ok(self.state().get_config(queue))
    }

    async fn put_config(&self, queue: &str, policy: &QueueConfig) -> Result<(), EngineError> {
        self.state().put_config(queue, policy);
        Ok(())
    }
}
