//! What an operator looks at before acting: who the caller is, every queue
//! at a glance (numbers, paused or not, the oldest pending task's age, the
//! last hour's outcomes per minute), a DLQ broken down by error type, and
//! the audit log's tail. The dashboard (`docs/dashboard.md`) is built on
//! these; every other front end may use them too.
//!
//! The same rules hold as for every use case: the overview shows only the
//! queues a caller may see; the breakdown carries dead envelopes and the
//! audit log says who did what, so both need `admin`, like the DLQ itself.
//! The per-minute history and the audit tail are this process's (kept in
//! memory since it started), which the answers say.

use rdq_api::queues::QueueRow;
use rdq_engine::DeadGroup;
use rdq_envelope::{TaskId, Timestamp};
use serde_json::Value;

use crate::auth::{Caller, READ_SCOPES, Scope};
use crate::error::AppError;
use crate::metrics::{MinuteCounts, now_minute};
use crate::{App, AuditRecord};

/// Most audit records one call returns.
pub const MAX_AUDIT_TAIL: usize = crate::audit::RECENT_RECORDS;

/// Who the caller is and what they may do: what a front end needs to
/// disable what the caller cannot do, before the server refuses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The token's name; `None` on an open server.
    pub name: Option<String>,
    /// True when the server runs without tokens.
    pub open: bool,
    /// The scopes the caller has (`admin` implies the others).
    pub scopes: Vec<Scope>,
}

/// One queue as the overview shows it.
#[derive(Debug, Clone)]
pub struct QueueOverview {
    /// Its numbers, as `GET /v1/queues` gives them (counts or depths).
    pub row: QueueRow,
    /// Whether claims are paused (the policy's `paused`).
    pub paused: bool,
    /// The oldest PENDING task (`None`: there is none, or the store cannot tell).
    pub oldest_pending: Option<OldestPending>,
    /// Why the oldest pending task is unknown, when the store cannot tell.
    pub oldest_pending_unknown: Option<String>,
    /// Outcomes per minute over the last hour, oldest first, counted by this process.
    pub history: Vec<MinuteCounts>,
}

/// The oldest PENDING task of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OldestPending {
    /// Its id.
    pub id: TaskId,
    /// When it was submitted (its id's time).
    pub since: Timestamp,
    /// How long ago that was, in milliseconds.
    pub age_ms: u64,
}

/// A DLQ grouped by latest error type.
#[derive(Debug, Clone)]
pub struct Breakdown {
    /// The queue.
    pub queue: String,
    /// Dead tasks in all.
    pub total: u64,
    /// One group per error type, most tasks first.
    pub groups: Vec<DeadGroup>,
}

impl App {
    /// Who `caller` is and which scopes it has.
    pub fn whoami(&self, caller: &Caller) -> Identity {
        Identity {
            name: caller.name().map(str::to_owned),
            open: self.is_open(),
            scopes: [Scope::Submit, Scope::Work, Scope::Admin]
                .into_iter()
                .filter(|s| caller.has_scope(*s))
                .collect(),
        }
    }

    /// Every queue `caller` may see (only `names` when given), each with its
    /// numbers, whether it is paused, its oldest pending task's age and the
    /// last hour's outcomes. Fails as [`App::queues`] does (a broker with no
    /// queue used yet answers `UNSUPPORTED` with a hint: name the queues).
    pub async fn overview(
        &self,
        caller: &Caller,
        names: &[String],
    ) -> Result<Vec<QueueOverview>, AppError> {
        let rows = self.queues(caller, names).await?;
        let now = Timestamp::now();
        let minute = now_minute();
        let can_list = self.engine.capabilities().list;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let paused = self.engine.policy(&row.queue).await?.paused;
            let (oldest_pending, oldest_pending_unknown) = if row.pending == 0 {
                (None, None)
            } else if !can_list {
                (
                    None,
                    Some("this store cannot list pending tasks (a broker)".to_owned()),
                )
            } else {
                let oldest = self.engine.oldest_pending(&row.queue).await?.map(|id| {
                    let since = Timestamp::from_unix_ms(
                        i64::try_from(id.timestamp_ms()).unwrap_or(i64::MAX),
                    )
                    .unwrap_or(now);
                    OldestPending {
                        id,
                        since,
                        age_ms: now.ms_since(since),
                    }
                });
                (oldest, None)
            };
            out.push(QueueOverview {
                history: self.metrics.history(&row.queue, minute),
                row,
                paused,
                oldest_pending,
                oldest_pending_unknown,
            });
        }
        Ok(out)
    }

    /// `queue`'s DLQ by latest error type: how many died of each, and the
    /// newest of each (any scope on the queue).
    pub async fn dlq_breakdown(&self, caller: &Caller, queue: &str) -> Result<Breakdown, AppError> {
        self.existing_queue(caller, READ_SCOPES, queue).await?;
        let groups = self.engine.dead_groups(queue).await.map_err(|e| {
            Self::unsupported_hint(e, "this store cannot list its DLQ; export it instead")
        })?;
        Ok(Breakdown {
            queue: queue.to_owned(),
            total: groups.iter().map(|g| g.count).sum(),
            groups,
        })
    }

    /// The latest audit records of this process, newest first (`admin`):
    /// those of `queue` when given, else of every queue `caller` may see;
    /// at most `limit` (1 to [`MAX_AUDIT_TAIL`]).
    pub fn audit_tail(
        &self,
        caller: &Caller,
        queue: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Value>, AppError> {
        match queue {
            Some(q) => {
                rdq_envelope::validate_queue_name(q)?;
                caller.require(Scope::Admin, q)?;
            }
            None => caller.require_scope(Scope::Admin)?,
        }
        if !(1..=MAX_AUDIT_TAIL).contains(&limit) {
            return Err(AppError::invalid_field(
                "limit",
                format!("must be 1 to {MAX_AUDIT_TAIL}"),
            ));
        }
        let keep = |r: &AuditRecord| match (&r.queue, queue) {
            (Some(rq), Some(q)) => rq == q,
            (Some(rq), None) => caller.allows_queue(rq),
            (None, Some(_)) => false,
            (None, None) => true,
        };
        Ok(self.audit().recent(limit, keep))
    }
}
