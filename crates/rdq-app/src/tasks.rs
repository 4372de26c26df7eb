//! Tasks by id or filter: read one, delete one, cancel PENDING ones.
//!
//! A caller limited to some queues gets `TASK_NOT_FOUND` for a task of
//! another queue, exactly as for an id that does not exist, so a token
//! cannot probe which ids exist elsewhere.

use rdq_api::tasks::{CancelBody, CancelResult};
use rdq_engine::{CancelFilter, EngineError};
use rdq_envelope::{Envelope, TaskId};
use serde_json::json;

use crate::auth::{Caller, Scope};
use crate::error::AppError;
use crate::{App, AuditRecord};

/// Where a store that cannot look tasks up by id sends the caller.
const NO_LOOKUP_HINT: &str = "this store cannot find a task by id; a dead task is found by queue: GET /v1/queues/{queue}/dead/{id} (rdq dlq show ID --queue Q)";

/// Task ids as a request wrote them; `INVALID_FIELD` naming `ids[i]` for
/// the first that is not one.
pub fn parse_task_ids(ids: &[String]) -> Result<Vec<TaskId>, AppError> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            TaskId::parse(id)
                .ok_or_else(|| AppError::invalid_field(&format!("ids[{i}]"), "is not a task id"))
        })
        .collect()
}

/// Which tasks [`App::tasks_page`] lists; every field optional.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    /// Only tasks in this status.
    pub status: Option<rdq_envelope::Status>,
    /// Only tasks of this handler.
    pub handler_ref: Option<String>,
    /// Only tasks with every one of these headers, value for value.
    pub headers: std::collections::BTreeMap<String, String>,
}

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

    /// Cancels PENDING tasks of `queue` by id or filter (`admin`); audited,
    /// dry runs too. Each becomes DEAD with reason `CANCELLED`, `by` the
    /// caller.
    pub async fn cancel_tasks(
        &self,
        caller: &Caller,
        queue: &str,
        body: CancelBody,
    ) -> Result<CancelResult, AppError> {
        self.existing_queue(caller, &[Scope::Admin], queue).await?;
        let ids = body.ids.as_deref().map(parse_task_ids).transpose()?;
        if let Some(handler) = &body.handler_ref {
            rdq_envelope::validate_handler_ref(handler)?;
        }
        if ids.as_ref().is_some_and(Vec::is_empty) {
            return Err(AppError::invalid_field("ids", "names no task"));
        }
        let filter = CancelFilter {
            queue: queue.to_owned(),
            ids,
            handler_ref: body.handler_ref.clone(),
            headers: body.headers.clone().unwrap_or_default(),
            older_than_ms: body.older_than_ms,
            limit: body.limit,
            dry_run: body.dry_run,
            by: caller.who().to_owned(),
            message: body
                .message
                .clone()
                .unwrap_or_else(|| "cancelled".to_owned()),
            pending_only: body.pending_only,
        };
        let cancelled = self.engine.cancel(&filter).await?;
        let ids: Vec<String> = cancelled.ids.iter().map(ToString::to_string).collect();
        let running: Vec<String> = cancelled.running.iter().map(ToString::to_string).collect();
        self.audit().record(AuditRecord {
            who: caller.who().to_owned(),
            action: "task.cancel",
            queue: Some(queue.to_owned()),
            count: Some(ids.len() as u64),
            dry_run: body.dry_run,
            detail: json!({
                "filter": {
                    "ids": body.ids,
                    "handler_ref": body.handler_ref,
                    "headers": body.headers,
                    "older_than_ms": body.older_than_ms,
                    "limit": body.limit,
                    "pending_only": body.pending_only,
                },
                "message": body.message,
                "ids": ids,
                "running": running,
            }),
        });
        Ok(CancelResult {
            queue: queue.to_owned(),
            dry_run: body.dry_run,
            count: ids.len(),
            ids,
            running,
        })
    }

    /// One page of `queue`'s tasks, newest first, filtered by status,
    /// handler and headers (any scope on the queue): how an operator finds
    /// the task to look at or cancel.
    pub async fn tasks_page(
        &self,
        caller: &Caller,
        queue: &str,
        filter: TaskFilter,
        cursor: Option<TaskId>,
        limit: usize,
    ) -> Result<rdq_engine::Page, AppError> {
        self.existing_queue(caller, crate::auth::READ_SCOPES, queue)
            .await?;
        if let Some(handler) = &filter.handler_ref {
            rdq_envelope::validate_handler_ref(handler)?;
        }
        if !(1..=rdq_engine::store::MAX_PAGE).contains(&limit) {
            return Err(AppError::invalid_field(
                "limit",
                format!("must be 1 to {}", rdq_engine::store::MAX_PAGE),
            ));
        }
        Ok(self
            .engine
            .list(&rdq_engine::ListQuery {
                queue: queue.to_owned(),
                status: filter.status,
                handler_ref: filter.handler_ref,
                headers: filter.headers,
                cursor,
                limit,
                ..rdq_engine::ListQuery::default()
            })
            .await?)
    }

    async fn lookup(&self, id: TaskId) -> Result<Envelope, AppError> {
        self.engine
            .get(id)
            .await
            .map_err(|e| Self::unsupported_hint(e, NO_LOOKUP_HINT))
    }
}
