//! One task by id: read it, delete it.
//!
//! A caller limited to some queues gets `TASK_NOT_FOUND` for a task of
//! another queue, exactly as for an id that does not exist, so a token
//! cannot probe which ids exist elsewhere.

use rdq_engine::EngineError;
use rdq_envelope::{Envelope, TaskId};
use serde_json::json;

use crate::auth::{Caller, Scope};
use crate::error::AppError;
use crate::{App, AuditRecord};

/// Where a store that cannot look tasks up by id sends the caller.
const NO_LOOKUP_HINT: &str = "this store cannot find a task by id; a dead task is found by queue: GET /v1/queues/{queue}/dead/{id} (rdq dlq show ID --queue Q)";

impl App {
    /// The task `id`, as a caller with any scope on its queue sees it.
    pub async fn task(&self, caller: &Caller, id: TaskId) -> Result<Envelope, AppError> {
        let env = self.lookup(id).await?;
        if !caller.allows_queue(&env.queue) {
            return Err(EngineError::TaskNotFound(id).into());
        }
        caller.require_any(&[Scope::Submit, Scope::Work, Scope::Admin], &env.queue)?;
        Ok(env)
    }

    /// Removes the task `id`, whatever its status (`admin`); audited.
    pub async fn delete_task(&self, caller: &Caller, id: TaskId) -> Result<(), AppError> {
        let env = self.lookup(id).await?;
        if !caller.allows_queue(&env.queue) {
            return Err(EngineError::TaskNotFound(id).into());
        }
        caller.require(Scope::Admin, &env.queue)?;
        self.engine.delete(id).await?;
        self.audit().record(AuditRecord {
            who: caller.who().to_owned(),
            action: "task.delete",
            queue: Some(env.queue.clone()),
            count: Some(1),
            dry_run: false,
            detail: json!({"id": id.to_string(), "status": env.status.as_str()}),
        });
        Ok(())
    }

    async fn lookup(&self, id: TaskId) -> Result<Envelope, AppError> {
        self.engine
            .get(id)
            .await
            .map_err(|e| Self::unsupported_hint(e, NO_LOOKUP_HINT))
    }
}
