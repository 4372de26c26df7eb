//! Operations on a queue's dead-letter queue: paging, export, import and the
//! checks before an import. The HTTP API and the CLI's `--store` mode both
//! call these, so a DLQ behaves the same whichever way an operator reaches it.
//!
//! Import is all or nothing: every line is decoded and checked (a valid v1
//! envelope, DEAD, of this queue, within the queue's size limit, an id seen
//! neither earlier in the file nor in the store) before anything is written;
//! one bad line and nothing is imported, and every bad line is reported by
//! number. Imported envelopes are stored exactly as they were exported, so
//! export → purge → import gives back the same bytes.

use rdq_engine::{Engine, EngineError, ListOrder, ListQuery, NewTask, Page};
use rdq_envelope::{Envelope, Status, TaskId};
use serde::Serialize;
use std::collections::HashSet;

use crate::problem::TASK_EXISTS;

/// Envelopes written per store call during an import.
pub const IMPORT_CHUNK: usize = 500;

/// Envelopes read per store call during an export.
pub const EXPORT_PAGE: usize = 500;

/// True if `queue` has tasks or a stored policy.
pub async fn queue_exists(engine: &Engine, queue: &str) -> Result<bool, EngineError> {
    if !engine.store().capabilities().counts {
        // A store that cannot count (a broker) cannot enumerate its queues
        // either: every valid name exists, with a DLQ that may be empty.
        return Ok(true);
    }
    let counts = engine.store().counts().await?;
    Ok(counts.iter().any(|c| c.queue == queue))
}

/// One page of `queue`'s dead tasks, newest first.
pub async fn page(
    engine: &Engine,
    queue: &str,
    error_type: Option<String>,
    cursor: Option<TaskId>,
    limit: usize,
) -> Result<Page, EngineError> {
    engine
        .store()
        .list(&ListQuery {
            queue: queue.to_owned(),
            status: Some(Status::Dead),
            error_type,
            cursor,
            limit,
            order: ListOrder::NewestFirst,
        })
        .await
}

/// One page of an export: dead tasks oldest first, from `cursor`.
pub async fn export_page(
    engine: &Engine,
    queue: &str,
    error_type: Option<String>,
    cursor: Option<TaskId>,
) -> Result<Page, EngineError> {
    engine
        .store()
        .list(&ListQuery {
            queue: queue.to_owned(),
            status: Some(Status::Dead),
            error_type,
            cursor,
            limit: EXPORT_PAGE,
            order: ListOrder::OldestFirst,
        })
        .await
}

/// A line of an import that cannot be imported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineError {
    /// 1-based line number in the file.
    pub line: usize,
    /// Stable code (`MALFORMED_ENVELOPE`, `INVALID_FIELD`, `TASK_EXISTS`, …).
    pub code: String,
    /// What is wrong, for people.
    pub message: String,
}

/// An import, decoded and checked: what would be stored and what is wrong.
#[derive(Debug, Clone, Default)]
pub struct ImportPlan {
    /// The good envelopes with their line numbers, in file order.
    pub envelopes: Vec<(usize, Envelope)>,
    /// The bad lines, in file order.
    pub errors: Vec<LineError>,
}

/// Decodes and checks every line of `jsonl` for an import into `queue`'s DLQ.
/// Blank lines are skipped; each envelope must be canonical-decodable, DEAD,
/// of `queue`, at most `max_envelope_bytes`, with an id not repeated in the file.
pub fn plan_import(jsonl: &[u8], queue: &str, max_envelope_bytes: usize) -> ImportPlan {
    let mut plan = ImportPlan::default();
    let mut seen: HashSet<TaskId> = HashSet::new();
    for (i, raw) in jsonl.split(|&b| b == b'\n').enumerate() {
        let line = i + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let bad = |code: &str, message: String| LineError {
            line,
            code: code.to_owned(),
            message,
        };
        let env = match Envelope::decode_with_limit(raw, max_envelope_bytes) {
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
                format!("id {} appears earlier in the file", env.id),
            ));
        } else {
            plan.envelopes.push((line, env));
        }
    }
    plan
}

/// Adds a `TASK_EXISTS` error for every planned envelope whose id is
/// already in the store.
pub async fn check_existing(engine: &Engine, plan: &mut ImportPlan) -> Result<(), EngineError> {
    for (line, env) in &plan.envelopes {
        match engine.store().get(env.id).await {
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
/// `progress` with the number stored so far; returns how many were stored,
/// or the lines the store refused (a task created since the check).
pub async fn apply_import(
    engine: &Engine,
    plan: ImportPlan,
    mut progress: impl FnMut(u64),
) -> Result<u64, ImportFailure> {
    let mut stored = 0u64;
    let mut refused = Vec::new();
    let mut lines = plan.envelopes.into_iter().peekable();
    while lines.peek().is_some() {
        let chunk: Vec<(usize, Envelope)> = lines.by_ref().take(IMPORT_CHUNK).collect();
        let numbers: Vec<usize> = chunk.iter().map(|(n, _)| *n).collect();
        let tasks = chunk
            .into_iter()
            .map(|(_, envelope)| NewTask {
                envelope,
                idempotency_key: None,
            })
            .collect();
        let results = engine.store().submit(tasks).await;
        for (line, result) in numbers.into_iter().zip(results) {
            match result {
                Ok(_) => stored += 1,
                Err(EngineError::InvalidArgument(message)) => refused.push(LineError {
                    line,
                    code: TASK_EXISTS.to_owned(),
                    message,
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

/// An import that stopped or partly failed after checking passed.
#[derive(Debug, Clone)]
pub struct ImportFailure {
    /// Envelopes stored before the failure.
    pub stored: u64,
    /// Lines the store refused.
    pub refused: Vec<LineError>,
    /// The store failure that stopped the import, if one did.
    pub error: Option<EngineError>,
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

    #[test]
    fn every_bad_line_is_reported_by_number() {
        let good = dead("q");
        let mut text = Vec::new();
        text.extend(good.encode());
        text.extend(b"\n\nnot json\n");
        text.extend(dead("other").encode());
        text.push(b'\n');
        let mut pending = dead("q");
        pending.status = Status::Pending;
        pending.next_attempt_at = Some(Timestamp::EPOCH);
        text.extend(pending.encode());
        text.push(b'\n');
        text.extend(good.encode());
        text.extend(b"\r\n");
        let plan = plan_import(&text, "q", 1 << 20);
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
        let plan = plan_import(&big.encode(), "q", 1024);
        assert_eq!(plan.errors[0].code, "PAYLOAD_TOO_LARGE");
    }
}
