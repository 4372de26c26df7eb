//! Schedules declared in code ([`crate::WorkerBuilder::schedule`]): upserted
//! by name, owned by code, when the worker starts; a schedule code put once
//! and declares no more is reported, never deleted behind an operator's
//! back (docs/schedules.md). A worker that opts in also runs the scheduler
//! ([`crate::WorkerBuilder::scheduler`]), as every `rdq serve` node does.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use rdq_engine::{Engine, ScheduleOwner};
use rdq_schedule::{Schedule, ValidSchedule};
use tracing::{error, info, warn};

use crate::error::Error;

/// What reconciling the declared schedules found.
#[derive(Debug, Default)]
pub(crate) struct Declared {
    /// Schedules owned by code that no worker of this process declares.
    undeclared: Mutex<Vec<String>>,
}

impl Declared {
    /// The names of schedules code put once and declares no more.
    pub(crate) fn undeclared(&self) -> Vec<String> {
        self.undeclared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Checks each declared schedule, refusing the first that breaks a rule
/// (its stable code, e.g. `INVALID_CRON`), and two with one name.
pub(crate) fn validate(schedules: &[Schedule]) -> Result<(), Error> {
    let mut names = BTreeSet::new();
    for s in schedules {
        ValidSchedule::new(s.clone()).map_err(rdq_engine::EngineError::from)?;
        if !names.insert(s.name.as_str()) {
            return Err(Error::Engine(rdq_engine::EngineError::InvalidArgument(
                format!("schedule {} is declared twice", s.name),
            )));
        }
    }
    Ok(())
}

/// Upserts `schedules` (owner code) and records the code-owned schedules
/// the store has that none of them names.
pub(crate) async fn reconcile(engine: &Engine, schedules: Vec<Schedule>, found: Arc<Declared>) {
    let names: BTreeSet<String> = schedules.iter().map(|s| s.name.clone()).collect();
    for schedule in schedules {
        let name = schedule.name.clone();
        match engine.put_schedule(schedule, ScheduleOwner::Code).await {
            Ok(_) => info!(schedule = %name, "schedule declared"),
            Err(e) => error!(schedule = %name, error = %e, "cannot store a declared schedule"),
        }
    }
    let stored = match engine.list_schedules().await {
        Ok(stored) => stored,
        Err(e) => {
            warn!(error = %e, "cannot list schedules to find those no longer declared");
            return;
        }
    };
    let gone: Vec<String> = stored
        .into_iter()
        .filter(|s| s.owner == ScheduleOwner::Code && !names.contains(&s.schedule.name))
        .map(|s| s.schedule.name)
        .collect();
    for name in &gone {
        warn!(
            schedule = %name,
            "a schedule put by code is declared no more; it still fires: delete it with `rdq schedule delete {name}` if it should stop"
        );
    }
    *found
        .undeclared
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = gone;
}
