//! The schedule operations (`rdq schedule …`) of both backends: [`Local`]
//! over the application layer's schedule use cases, [`Remote`] over the
//! client's `/v1/schedules` calls.

use async_trait::async_trait;
use rdq_api::schedules::{ScheduleBody, ScheduleState};
use rdq_app::schedules::schedule_from_body;
use rdq_envelope::Envelope;

use super::{Local, Remote};
use crate::CliError;

/// Periodic schedules, on a server or straight on a store.
#[async_trait(?Send)]
pub trait ScheduleOperations {
    /// Creates or replaces `name`; answers it and whether it is new.
    async fn put_schedule(
        &self,
        name: &str,
        body: ScheduleBody,
    ) -> Result<(ScheduleState, bool), CliError>;
    /// Every schedule, by name.
    async fn schedules(&self) -> Result<Vec<ScheduleState>, CliError>;
    /// One schedule.
    async fn schedule(&self, name: &str) -> Result<ScheduleState, CliError>;
    /// Removes one.
    async fn delete_schedule(&self, name: &str) -> Result<(), CliError>;
    /// Pauses or resumes one.
    async fn set_schedule_paused(
        &self,
        name: &str,
        paused: bool,
    ) -> Result<ScheduleState, CliError>;
    /// Submits its task once now.
    async fn run_schedule(&self, name: &str) -> Result<Envelope, CliError>;
    /// Its next `count` due times (ms since the Unix epoch).
    async fn next_due(&self, name: &str, count: usize) -> Result<Vec<i64>, CliError>;
}

#[async_trait(?Send)]
impl ScheduleOperations for Local {
    async fn put_schedule(
        &self,
        name: &str,
        body: ScheduleBody,
    ) -> Result<(ScheduleState, bool), CliError> {
        rdq_app::schedules::check_name(name)?;
        let schedule = schedule_from_body(name, body)?;
        Ok(self
            .app
            .put_schedule(&self.caller, schedule, rdq_engine::ScheduleOwner::Api)
            .await?)
    }

    async fn schedules(&self) -> Result<Vec<ScheduleState>, CliError> {
        Ok(self.app.schedules(&self.caller).await?)
    }

    async fn schedule(&self, name: &str) -> Result<ScheduleState, CliError> {
        Ok(self.app.schedule(&self.caller, name).await?)
    }

    async fn delete_schedule(&self, name: &str) -> Result<(), CliError> {
        Ok(self.app.delete_schedule(&self.caller, name).await?)
    }

    async fn set_schedule_paused(
        &self,
        name: &str,
        paused: bool,
    ) -> Result<ScheduleState, CliError> {
        Ok(self
            .app
            .set_schedule_paused(&self.caller, name, paused)
            .await?)
    }

    async fn run_schedule(&self, name: &str) -> Result<Envelope, CliError> {
        Ok(self.app.run_schedule(&self.caller, name).await?)
    }

    async fn next_due(&self, name: &str, count: usize) -> Result<Vec<i64>, CliError> {
        Ok(self.app.next_due(&self.caller, name, count).await?)
    }
}

#[async_trait(?Send)]
impl ScheduleOperations for Remote {
    async fn put_schedule(
        &self,
        name: &str,
        body: ScheduleBody,
    ) -> Result<(ScheduleState, bool), CliError> {
        Ok(self.client.put_schedule(name, &body).await?)
    }

    async fn schedules(&self) -> Result<Vec<ScheduleState>, CliError> {
        Ok(self.client.schedules().await?)
    }

    async fn schedule(&self, name: &str) -> Result<ScheduleState, CliError> {
        Ok(self.client.schedule(name).await?)
    }

    async fn delete_schedule(&self, name: &str) -> Result<(), CliError> {
        Ok(self.client.delete_schedule(name).await?)
    }

    async fn set_schedule_paused(
        &self,
        name: &str,
        paused: bool,
    ) -> Result<ScheduleState, CliError> {
        Ok(self.client.set_schedule_paused(name, paused).await?)
    }

    async fn run_schedule(&self, name: &str) -> Result<Envelope, CliError> {
        Ok(self.client.run_schedule(name).await?)
    }

    async fn next_due(&self, name: &str, count: usize) -> Result<Vec<i64>, CliError> {
        Ok(self.client.next_due(name, count).await?)
    }
}
