//! Schedules in memory: a map by name beside the tasks.
//!
//! A fire holds the schedules' lock while it checks the cursor and, under
//! the tasks' lock, submits: no other fire of the schedule can run between
//! the two, so the compare-and-swap and the submit are one step. The lock
//! order is always schedules, then tasks.

use std::collections::BTreeMap;
use std::ops::Bound;

use async_trait::async_trait;
use rdq_engine::store::schedules::record_fire;
use rdq_engine::{EngineError, FireOutcome, FireRequest, SchedulePut, Schedules, StoredSchedule};

use crate::MemoryStore;

/// The schedules, by name.
pub(crate) type ScheduleMap = BTreeMap<String, StoredSchedule>;

#[async_trait]
impl Schedules for MemoryStore {
    async fn put_schedule(&self, put: &SchedulePut) -> Result<bool, EngineError> {
        let mut schedules = self.schedules();
        let created = !schedules.contains_key(&put.name);
        let entry = schedules
            .entry(put.name.clone())
            .or_insert_with(|| StoredSchedule {
                name: put.name.clone(),
                created_at_ms: put.now_ms,
                ..StoredSchedule::default()
            });
        entry.owner = put.owner;
        entry.definition.clone_from(&put.definition);
        entry.updated_at_ms = put.now_ms;
        Ok(created)
    }

    async fn replace_schedule_if(
        &self,
        put: &SchedulePut,
        expected: &str,
    ) -> Result<bool, EngineError> {
        let mut schedules = self.schedules();
        match schedules.get_mut(&put.name) {
            Some(entry) if entry.definition == expected => {
                entry.owner = put.owner;
                entry.definition.clone_from(&put.definition);
                entry.updated_at_ms = put.now_ms;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn get_schedule(&self, name: &str) -> Result<Option<StoredSchedule>, EngineError> {
        Ok(self.schedules().get(name).cloned())
    }

    async fn list_schedules(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StoredSchedule>, EngineError> {
        let schedules = self.schedules();
        let from = after.map_or(Bound::Unbounded, |a| Bound::Excluded(a.to_owned()));
        Ok(schedules
            .range((from, Bound::Unbounded))
            .take(limit)
            .map(|(_, s)| s.clone())
            .collect())
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool, EngineError> {
        Ok(self.schedules().remove(name).is_some())
    }

    async fn fire_schedule(&self, fire: &FireRequest) -> Result<FireOutcome, EngineError> {
        let mut schedules = self.schedules();
        let Some(schedule) = schedules
            .get_mut(&fire.name)
            .filter(|s| s.last_due_ms == fire.expected_last_due_ms)
        else {
            return Ok(FireOutcome::Raced);
        };
        let results: Vec<_> = {
            let mut state = self.state();
            fire.tasks
                .iter()
                .map(|task| state.submit(task.clone()))
                .collect()
        };
        record_fire(schedule, fire, &results);
        Ok(FireOutcome::Fired(results))
    }
}
