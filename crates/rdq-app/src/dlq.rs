//! The dead-letter queue of a queue: page it, show one task, redrive,
//! export, import, purge. Every use case needs the `admin` scope on the
//! queue; redrive, import and purge are audited (dry runs too, marked as
//! such).
//!
//! An import takes [`ImportEntry`] values, each an envelope its front end
//! decoded (a line of a JSONL file over HTTP or from the CLI, a message of
//! a gRPC stream) or why it could not, numbered as the front end counts
//! them. Import is all or nothing: every entry is checked (a valid v1
//! envelope, DEAD, of this queue, within the queue's size limit, an id seen
//! neither earlier in the import nor in the store) before anything is
//! written; one bad entry and nothing is imported, and every bad entry is
//! reported by its number. Imported envelopes are stored exactly as they
//! were exported, so export → purge → import gives back the same bytes.

use std::collections::HashSet;

use rdq_api::dlq::{ImportResult, LineError, PurgeResult, RedriveResult};
use rdq_engine::{
    DeadReasonFilter, EngineError, ListOrder, ListQuery, Page, ReasonCount, RedriveRequest,
};
use rdq_envelope::{Envelope, EnvelopeError, Status, TaskId};
use serde_json::json;

use crate::auth::{Caller, READ_SCOPES, Scope};
use crate::error::{AppError, ErrorKind, INVALID_IMPORT, TASK_EXISTS};
use crate::{App, AuditRecord};

/// Envelopes written per store call during an import.
pub const IMPORT_CHUNK: usize = 500;

/// Envelopes read per store call during an export.
pub const EXPORT_PAGE: usize = 500;

/// Bad lines listed in an `INVALID_IMPORT` error (the count is always given).
pub const MAX_REPORTED_LINES: usize = 100;

/// One entry of a DLQ import, as its front end read it.
#[derive(Debug, Clone)]
pub struct ImportEntry {
    /// Its 1-based number (a line of a file, a message of a stream): bad
    /// entries are reported by it.
    pub line: usize,
    /// The envelope, or why the front end could not decode one.
    pub envelope: Result<Envelope, EnvelopeError>,
}

/// Which dead tasks a listing or an export shows; every field optional.
#[derive(Debug, Clone, Default)]
pub struct DeadFilter {
    /// Only tasks whose latest error type matches this glob.
    pub error_type: Option<String>,
    /// Only tasks that died for this reason (a code of
    /// `rdq_envelope::dead_reasons`, or `UNRECORDED`).
    pub reason: Option<String>,
}

fn reason_filter(reason: Option<&str>) -> Result<Option<DeadReasonFilter>, AppError> {
    Ok(reason.map(DeadReasonFilter::parse).transpose()?)
}

/// Which dead tasks a redrive takes; every field optional.
#[derive(Debug, Clone, Default)]
pub struct RedriveFilter {
    /// Only these tasks.
    pub ids: Option<Vec<TaskId>>,
    /// Only tasks whose latest error type matches this glob.
    pub error_type: Option<String>,
    /// Only tasks that died for this reason (see [`DeadFilter::reason`]).
    pub reason: Option<String>,
    /// At most this many.
    pub limit: Option<usize>,
    /// Report, change nothing.
    pub dry_run: bool,
}

impl App {
    /// One page of `queue`'s dead tasks, newest first, with a cursor that
    /// stays stable while tasks come and go. Reading the DLQ (page, task,
    /// export, breakdown) takes any scope on the queue; changing it, `admin`.
    pub async fn dlq_page(
        &self,
        caller: &Caller,
        queue: &str,
        filter: DeadFilter,
        cursor: Option<TaskId>,
        limit: usize,
    ) -> Result<Page, AppError> {
        self.existing_queue(caller, READ_SCOPES, queue).await?;
        if !(1..=rdq_engine::store::MAX_PAGE).contains(&limit) {
            return Err(AppError::invalid_field(
                "limit",
                format!("must be 1 to {}", rdq_engine::store::MAX_PAGE),
            ));
        }
        self.dead_list(queue, filter, cursor, limit, ListOrder::NewestFirst)
            .await
    }

    /// One page of `queue`'s dead tasks in `order`.
    async fn dead_list(
        &self,
        queue: &str,
        filter: DeadFilter,
        cursor: Option<TaskId>,
        limit: usize,
        order: ListOrder,
    ) -> Result<Page, AppError> {
        Ok(self
            .engine
            .list(&ListQuery {
                queue: queue.to_owned(),
                status: Some(Status::Dead),
                error_type: filter.error_type,
                reason: reason_filter(filter.reason.as_deref())?,
                handler_ref: None,
                headers: Default::default(),
                cursor,
                limit,
                order,
            })
            .await?)
    }

    /// How many of `queue`'s dead tasks died for each reason, most first.
    pub async fn dlq_reasons(
        &self,
        caller: &Caller,
        queue: &str,
    ) -> Result<Vec<ReasonCount>, AppError> {
        self.existing_queue(caller, READ_SCOPES, queue).await?;
        Ok(self.engine.dead_reasons(queue).await?)
    }

    /// The dead task `id` of `queue`, on every store that can look a task
    /// up or list a DLQ (see [`rdq_engine::Engine::dead_task`]).
    pub async fn dlq_task(
        &self,
        caller: &Caller,
        queue: &str,
        id: TaskId,
    ) -> Result<Envelope, AppError> {
        caller.require_any(READ_SCOPES, queue)?;
        Ok(self.engine.dead_task(queue, id).await?)
    }

    /// One page of an export of `queue`'s DLQ: oldest first, from `cursor`.
    /// The first call checks the caller and the queue; a front end streams
    /// the pages that follow.
    pub async fn dlq_export_page(
        &self,
        caller: &Caller,
        queue: &str,
        filter: DeadFilter,
        cursor: Option<TaskId>,
    ) -> Result<Page, AppError> {
        if cursor.is_none() {
            self.existing_queue(caller, READ_SCOPES, queue).await?;
        } else {
            caller.require_any(READ_SCOPES, queue)?;
        }
        self.dead_list(queue, filter, cursor, EXPORT_PAGE, ListOrder::OldestFirst)
            .await
    }

    /// Redrives matching dead tasks of `queue` (or, on a dry run, lists
    /// them); audited.
    pub async fn dlq_redrive(
        &self,
        caller: &Caller,
        queue: &str,
        filter: RedriveFilter,
    ) -> Result<RedriveResult, AppError> {
        self.existing_queue(caller, &[Scope::Admin], queue).await?;
        let request = RedriveRequest {
            queue: queue.to_owned(),
            ids: filter.ids.clone(),
            error_type: filter.error_type.clone(),
            reason: reason_filter(filter.reason.as_deref())?,
            limit: filter.limit,
            dry_run: filter.dry_run,
        };
        let redriven = self.engine.redrive(&request).await?;
        let ids: Vec<String> = redriven.iter().map(ToString::to_string).collect();
        self.audit().record(AuditRecord {
            who: caller.who().to_owned(),
            action: "dlq.redrive",
            queue: Some(queue.to_owned()),
            count: Some(ids.len() as u64),
            dry_run: filter.dry_run,
            detail: json!({
                "filter": {
                    "ids": filter.ids.map(|ids| ids.iter().map(ToString::to_string).collect::<Vec<_>>()),
                    "error_type": filter.error_type,
                    "reason": filter.reason,
                    "limit": filter.limit,
                },
                "ids": ids,
            }),
        });
        Ok(RedriveResult {
            queue: queue.to_owned(),
            dry_run: filter.dry_run,
            count: ids.len(),
            ids,
        })
    }

    /// Removes every dead task of `queue` (or counts them, on a dry run); audited.
    pub async fn dlq_purge(
        &self,
        caller: &Caller,
        queue: &str,
        dry_run: bool,
    ) -> Result<PurgeResult, AppError> {
        self.existing_queue(caller, &[Scope::Admin], queue).await?;
        let purged = self.engine.purge(queue, Status::Dead, dry_run).await?;
        self.audit().record(AuditRecord {
            who: caller.who().to_owned(),
            action: "dlq.purge",
            queue: Some(queue.to_owned()),
            count: Some(purged),
            dry_run,
            detail: serde_json::Value::Null,
        });
        Ok(PurgeResult {
            queue: queue.to_owned(),
            dry_run,
            purged,
        })
    }

    /// Imports DEAD envelopes into `queue`'s DLQ, all or nothing (see the
    /// module documentation), calling `progress` with the number stored so
    /// far; audited.
    pub async fn dlq_import(
        &self,
        caller: &Caller,
        queue: &str,
        entries: Vec<ImportEntry>,
        dry_run: bool,
        progress: impl FnMut(u64),
    ) -> Result<ImportResult, AppError> {
        caller.require(Scope::Admin, queue)?;
        rdq_envelope::validate_queue_name(queue)?;
        let policy = self.engine.policy(queue).await?;
        let mut plan = plan_import(entries, queue, policy.max_envelope_bytes);
        self.check_existing(&mut plan).await?;
        if !plan.errors.is_empty() {
            return Err(invalid_import(&plan.errors));
        }
        let checked = plan.envelopes.len() as u64;
        let imported = if dry_run {
            0
        } else {
            match self.apply_import(plan, progress).await {
                Ok(n) => n,
                Err(failure) => {
                    self.audit_import(caller, queue, failure.stored, false);
                    return Err(match failure.error {
                        Some(e) => AppError::from(e).with("imported", json!(failure.stored)),
                        None => {
                            invalid_import(&failure.refused).with("imported", json!(failure.stored))
                        }
                    });
                }
            }
        };
        self.audit_import(
            caller,
            queue,
            if dry_run { checked } else { imported },
            dry_run,
        );
        Ok(ImportResult {
            queue: queue.to_owned(),
            dry_run,
            checked,
            imported,
        })
    }

    fn audit_import(&self, caller: &Caller, queue: &str, count: u64, dry_run: bool) {
        self.audit().record(AuditRecord {
            who: caller.who().to_owned(),
            action: "dlq.import",
            queue: Some(queue.to_owned()),
            count: Some(count),
            dry_run,
            detail: serde_json::Value::Null,
        });
    }

    /// Adds a `TASK_EXISTS` error for every planned envelope whose id is
    /// already in the store. A store that cannot look tasks up (a broker)
    /// cannot tell, and the check is skipped: the store itself refuses a
    /// duplicate where it can.
    async fn check_existing(&self, plan: &mut ImportPlan) -> Result<(), EngineError> {
        if !self.engine.capabilities().get_by_id {
            return Ok(());
        }
        for (line, env) in &plan.envelopes {
            match self.engine.get(env.id).await {
                Ok(_) => plan.errors.push(LineError {
                    line: *line,
                    code: TASK_EXISTS.to_owned(),
                    message: format!("a task with id {} already exists", env.id),
                }),
                Err(EngineError::TaskNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        plan.errors.sort_by_key(|e| e.line);
        Ok(())
    }

    /// Stores the planned envelopes in chunks of [`IMPORT_CHUNK`], calling
    /// `progress` with the number stored so far; returns how many were
    /// stored, or the lines the store refused (a task created since the check).
    async fn apply_import(
        &self,
        plan: ImportPlan,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, ImportFailure> {
        let mut stored = 0u64;
        let mut refused = Vec::new();
        let mut lines = plan.envelopes.into_iter().peekable();
        while lines.peek().is_some() {
            let chunk: Vec<(usize, Envelope)> = lines.by_ref().take(IMPORT_CHUNK).collect();
            let numbers: Vec<usize> = chunk.iter().map(|(n, _)| *n).collect();
            let envelopes = chunk.into_iter().map(|(_, envelope)| envelope).collect();
            let results = self.engine.import(envelopes).await;
            for (line, result) in numbers.into_iter().zip(results) {
                match result {
                    Ok(_) => stored += 1,
                    Err(EngineError::InvalidArgument(message)) => refused.push(LineError {
                        line,
                        code: TASK_EXISTS.to_owned(),
                        message,
                    }),
                    // Another task holds the line's unique key
                    // (docs/uniqueness.md).
                    Err(e @ EngineError::UniqueHeld { .. }) => refused.push(LineError {
                        line,
                        code: e.code().to_owned(),
                        message: e.to_string(),
                    }),
                    Err(e) => {
                        return Err(ImportFailure {
                            stored,
                            refused,
                            error: Some(e),
                        });
                    }
                }
            }
            progress(stored);
        }
        if refused.is_empty() {
            Ok(stored)
        } else {
            Err(ImportFailure {
                stored,
                refused,
                error: None,
            })
        }
    }
}

/// `INVALID_IMPORT` listing the first [`MAX_REPORTED_LINES`] bad lines.
fn invalid_import(errors: &[LineError]) -> AppError {
    let shown: Vec<&LineError> = errors.iter().take(MAX_REPORTED_LINES).collect();
    AppError::new(
        ErrorKind::Invalid,
        INVALID_IMPORT,
        format!(
            "{} line(s) cannot be imported (first: line {}); nothing was imported",
            errors.len(),
            errors.first().map_or(0, |e| e.line)
        ),
    )
    .with("error_count", json!(errors.len()))
    .with("errors", json!(shown))
}

/// An import, decoded and checked: what would be stored and what is wrong.
#[derive(Debug, Clone, Default)]
struct ImportPlan {
    /// The good envelopes with their line numbers, in file order.
    envelopes: Vec<(usize, Envelope)>,
    /// The bad lines, in file order.
    errors: Vec<LineError>,
}

/// Checks every entry of an import into `queue`'s DLQ: each envelope must
/// have decoded, be at most `max_envelope_bytes`, DEAD, of `queue`, with an
/// id not repeated in the import.
fn plan_import(entries: Vec<ImportEntry>, queue: &str, max_envelope_bytes: usize) -> ImportPlan {
    let mut plan = ImportPlan::default();
    let mut seen: HashSet<TaskId> = HashSet::new();
    for ImportEntry { line, envelope } in entries {
        let bad = |code: &str, message: String| LineError {
            line,
            code: code.to_owned(),
            message,
        };
        let env = match envelope.and_then(|env| env.check_size(max_envelope_bytes).map(|()| env)) {
            Ok(env) => env,
            Err(e) => {
                let message = match e.path() {
                    Some(path) => format!("{path}: {}", e.message()),
                    None => e.message().to_owned(),
                };
                plan.errors.push(bad(e.code().as_str(), message));
                continue;
            }
        };
        if env.queue != queue {
            plan.errors.push(bad(
                "INVALID_FIELD",
                format!(
                    "queue: the envelope belongs to {:?}, not {queue:?}",
                    env.queue
                ),
            ));
        } else if env.status != Status::Dead {
            plan.errors.push(bad(
                "INVALID_FIELD",
                format!(
                    "status: only DEAD envelopes are imported into a DLQ, this one is {}",
                    env.status.as_str()
                ),
            ));
        } else if !seen.insert(env.id) {
            plan.errors.push(bad(
                TASK_EXISTS,
                format!("id {} appears earlier in the import", env.id),
            ));
        } else {
            plan.envelopes.push((line, env));
        }
    }
    plan.errors.sort_by_key(|e| e.line);
    plan
}

/// An import that stopped or partly failed after checking passed.
#[derive(Debug, Clone)]
struct ImportFailure {
    /// Envelopes stored before the failure.
    stored: u64,
    /// Lines the store refused.
    refused: Vec<LineError>,
    /// The store failure that stopped the import, if one did.
    error: Option<EngineError>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdq_envelope::Timestamp;

    fn dead(queue: &str) -> Envelope {
        let mut env = Envelope::new(queue, "h", b"x", "text/plain", Timestamp::EPOCH);
        env.status = Status::Dead;
        env.next_attempt_at = None;
        env
    }

    fn entry(line: usize, env: Envelope) -> ImportEntry {
        ImportEntry {
            line,
            envelope: Ok(env),
        }
    }

    #[test]
    fn every_bad_entry_is_reported_by_number() {
        let good = dead("q");
        let mut pending = dead("q");
        pending.status = Status::Pending;
        pending.next_attempt_at = Some(Timestamp::EPOCH);
        let entries = vec![
            entry(1, good.clone()),
            ImportEntry {
                line: 3,
                envelope: Envelope::decode(b"not json"),
            },
            entry(4, dead("other")),
            entry(5, pending),
            entry(6, good),
        ];
        let plan = plan_import(entries, "q", 1 << 20);
        assert_eq!(plan.envelopes.len(), 1);
        assert_eq!(plan.envelopes[0].0, 1);
        let lines: Vec<(usize, &str)> = plan
            .errors
            .iter()
            .map(|e| (e.line, e.code.as_str()))
            .collect();
        assert_eq!(
            lines,
            vec![
                (3, "MALFORMED_ENVELOPE"),
                (4, "INVALID_FIELD"),
                (5, "INVALID_FIELD"),
                (6, TASK_EXISTS),
            ]
        );
    }

    #[test]
    fn an_envelope_over_the_queue_limit_is_refused() {
        let mut big = dead("q");
        big.set_payload_bytes(&[7u8; 4096]);
        let plan = plan_import(vec![entry(1, big)], "q", 1024);
        assert_eq!(plan.errors[0].code, "PAYLOAD_TOO_LARGE");
    }
}
