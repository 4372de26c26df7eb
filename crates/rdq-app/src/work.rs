//! The pull-worker use cases: claim, settle (one or a batch), extend a lease.
//!
//! A worker names a task by id and presents the lease token it was handed;
//! nothing is looked up first. The token is checked against the store's key
//! ([`rdq_engine::LeaseKey`]), the in-flight state comes from
//! [`rdq_engine::Engine::leased`] (a database reads the row, a broker its
//! lease table), and the engine's compare-and-swap fences stale workers:
//! a settle or extension after the lease was lost (lapsed and reaped,
//! reclaimed, redriven, already settled) is refused with `LEASE_LOST` and
//! changes nothing.

use rdq_api::work::{ReportedError, ReportedOutcome, SettleBody};
use rdq_engine::{
    Claimed, EngineError, FailureKind, LeaseToken, SettleRequest, Settlement, TokenMismatch,
};
use rdq_envelope::{Envelope, ErrorInfo, Outcome, TaskId, validate_queue_name};

use rdq_telemetry::Attempt;
use rdq_telemetry::messaging::TRACEPARENT_HEADER;
use tracing::debug;

use crate::App;
use crate::auth::{Caller, Scope};
use crate::error::AppError;
use crate::metrics::OutcomeLabel;

/// Most tasks one claim hands out.
pub const MAX_CLAIM: usize = rdq_api::MAX_CLAIM;

/// Most settles in one batch.
pub const MAX_SETTLE_BATCH: usize = rdq_api::MAX_SETTLE_BATCH;

/// One settle, as a front end hands it over: which task, the presented
/// token, and what happened.
#[derive(Debug, Clone)]
pub struct Settle {
    /// The task.
    pub id: TaskId,
    /// The lease token from the claim, as presented.
    pub lease_token: String,
    /// What happened.
    pub settlement: Settlement,
}

/// A claimed task with the token its worker presents.
#[derive(Debug, Clone)]
pub struct Leased {
    /// The task as claimed: IN_FLIGHT, its open attempt last.
    pub envelope: Envelope,
    /// The lease token (opaque to workers).
    pub lease_token: String,
}

/// The settlement a reported outcome stands for, checking which fields
/// go with which outcome.
pub fn settlement(body: &SettleBody) -> Result<Settlement, AppError> {
    let needs_error = matches!(
        body.outcome,
        ReportedOutcome::RetryableFailure
            | ReportedOutcome::PermanentFailure
            | ReportedOutcome::Failure
    );
    if body.defer_ms.is_some() && body.outcome != ReportedOutcome::Defer {
        return Err(AppError::invalid_field(
            "defer_ms",
            "is only allowed with outcome DEFER",
        ));
    }
    if body.error.is_some() && !needs_error {
        return Err(AppError::invalid_field(
            "error",
            "is only allowed with a failure outcome",
        ));
    }
    let failure = |kind: FailureKind, error: Option<&ReportedError>| {
        let error = error.ok_or_else(|| {
            AppError::invalid_field("error", "is required with a failure outcome")
        })?;
        if error.error_type.is_empty() {
            return Err(AppError::invalid_field("error.type", "must not be empty"));
        }
        let mut info = ErrorInfo::new(error.error_type.clone(), &error.message);
        if let Some(stack) = &error.stack {
            info = info.with_stack(stack);
        }
        if let Some(detail) = &error.detail {
            info = info.with_detail(detail.clone());
        }
        Ok(Settlement::Failure { error: info, kind })
    };
    match body.outcome {
        ReportedOutcome::Success => Ok(Settlement::Success),
        ReportedOutcome::RetryableFailure => failure(FailureKind::Retryable, body.error.as_ref()),
        ReportedOutcome::PermanentFailure => failure(FailureKind::Permanent, body.error.as_ref()),
        ReportedOutcome::Failure => failure(FailureKind::Unclassified, body.error.as_ref()),
        ReportedOutcome::Defer => match body.defer_ms {
            Some(delay_ms) => Ok(Settlement::Defer { delay_ms }),
            None => Err(AppError::invalid_field(
                "defer_ms",
                "is required with outcome DEFER",
            )),
        },
        ReportedOutcome::Release => Ok(Settlement::Release),
    }
}

/// What an attempt span needs from the task as claimed, taken before the
/// settle consumes it (`docs/observability.md`).
struct TracedAttempt {
    id: TaskId,
    queue: String,
    handler_ref: String,
    traceparent: Option<String>,
    attempt_no: u32,
    started_ms: i64,
    error_type: Option<String>,
}

impl TracedAttempt {
    fn of(request: &SettleRequest) -> Self {
        let env = &request.envelope;
        let open = env.open_attempt();
        let error_type = match &request.settlement {
            Settlement::Failure { error, .. } | Settlement::FailureWithRetry { error, .. } => {
                Some(error.error_type.clone())
            }
            _ => None,
        };
        Self {
            id: env.id,
            queue: env.queue.clone(),
            handler_ref: env.handler_ref.clone(),
            traceparent: env.headers.get(TRACEPARENT_HEADER).cloned(),
            attempt_no: open.map_or(env.attempt_count, |a| a.attempt_no),
            started_ms: open.map_or_else(|| env.created_at.unix_ms(), |a| a.started_at.unix_ms()),
            error_type,
        }
    }

    /// Logs the settle (debug) and records the CONSUMER span of this
    /// attempt, settled as `result`.
    fn record(
        &self,
        tracer: Option<&rdq_telemetry::Tracer>,
        fixed: Option<OutcomeLabel>,
        result: &Result<Envelope, AppError>,
    ) {
        let (outcome, error_type) = match result {
            Ok(env) => {
                let recorded = env
                    .attempts
                    .iter()
                    .rev()
                    .find(|a| a.attempt_no == self.attempt_no)
                    .and_then(|a| a.outcome);
                match (fixed, recorded) {
                    (Some(label), _) => (label.as_str(), None),
                    (None, Some(Outcome::Success)) => (Outcome::Success.as_str(), None),
                    (None, Some(o)) => (o.as_str(), self.error_type.as_deref()),
                    (None, None) => ("UNKNOWN", self.error_type.as_deref()),
                }
            }
            Err(e) => (e.code(), Some(e.code())),
        };
        debug!(
            task_id = %self.id,
            queue = %self.queue,
            attempt = self.attempt_no,
            outcome,
            error_type,
            "task settled"
        );
        let Some(tracer) = tracer else { return };
        tracer.record_attempt(&Attempt {
            task: self.id,
            queue: &self.queue,
            handler_ref: &self.handler_ref,
            traceparent: self.traceparent.as_deref(),
            attempt_no: self.attempt_no,
            started_ms: self.started_ms,
            outcome,
            error_type,
        });
    }
}

/// The label a settle is counted under when its kind alone decides it.
fn fixed_label(settlement: &Settlement) -> Option<OutcomeLabel> {
    match settlement {
        Settlement::Defer { .. } => Some(OutcomeLabel::Deferred),
        Settlement::Release => Some(OutcomeLabel::Released),
        _ => None,
    }
}

impl App {
    /// Claims up to `max` due tasks of `queue` (`work`), highest priority
    /// first, under the queue's lease or `lease_ms`.
    pub async fn claim(
        &self,
        caller: &Caller,
        queue: &str,
        max: usize,
        lease_ms: Option<u64>,
    ) -> Result<Vec<Leased>, AppError> {
        caller.require(Scope::Work, queue)?;
        validate_queue_name(queue)?;
        if max > MAX_CLAIM {
            return Err(AppError::invalid_field(
                "max",
                format!("must be 0 to {MAX_CLAIM}"),
            ));
        }
        if lease_ms == Some(0) {
            return Err(AppError::invalid_field("lease_ms", "must be at least 1"));
        }
        let claimed = self.engine.claim(queue, max, lease_ms).await?;
        self.metrics.claimed(queue, claimed.len() as u64);
        if tracing::enabled!(tracing::Level::DEBUG) {
            for c in &claimed {
                let attempt = c.envelope.open_attempt().map_or(0, |a| a.attempt_no);
                debug!(task_id = %c.envelope.id, queue, attempt, "task claimed");
            }
        }
        Ok(claimed
            .into_iter()
            .map(|Claimed { envelope, token }| Leased {
                lease_token: self.shared.lease_key.format(envelope.id, token),
                envelope,
            })
            .collect())
    }

    /// Settles one task; its new state.
    pub async fn settle(&self, caller: &Caller, settle: Settle) -> Result<Envelope, AppError> {
        self.settle_many(caller, vec![Ok(settle)])
            .await
            .pop()
            .unwrap_or_else(|| Err(AppError::internal("the store returned no result")))
    }

    /// Settles many tasks in one store call; one result per item, in order.
    /// Items are independent: a bad or stale one does not fail the others.
    pub async fn settle_many(
        &self,
        caller: &Caller,
        items: Vec<Result<Settle, AppError>>,
    ) -> Vec<Result<Envelope, AppError>> {
        let mut results: Vec<Option<Result<Envelope, AppError>>> = Vec::with_capacity(items.len());
        let mut pending: Vec<(usize, TaskId, LeaseToken, Settlement)> = Vec::new();
        for item in items {
            match item.and_then(|s| {
                let token = self.token(s.id, &s.lease_token)?;
                Ok((s.id, token, s.settlement))
            }) {
                Ok((id, token, settlement)) => {
                    pending.push((results.len(), id, token, settlement));
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let leases: Vec<(TaskId, LeaseToken)> = pending.iter().map(|p| (p.1, p.2)).collect();
        let found = self.engine.leased(&leases).await;
        let mut requests = Vec::with_capacity(pending.len());
        let mut slots = Vec::with_capacity(pending.len());
        for ((slot, id, token, settlement), found) in pending.into_iter().zip(found) {
            let checked = found.map_err(AppError::from).and_then(|envelope| {
                self.work_allowed(caller, id, &envelope.queue)?;
                Ok(envelope)
            });
            match checked {
                Ok(envelope) => {
                    slots.push((slot, fixed_label(&settlement)));
                    requests.push(SettleRequest {
                        envelope,
                        token,
                        settlement,
                    });
                }
                Err(e) => {
                    if let Some(r) = results.get_mut(slot) {
                        *r = Some(Err(e));
                    }
                }
            }
        }
        // Who settled what, for the attempt span and the debug log line.
        let traced: Vec<TracedAttempt> =
            if self.shared.tracer.is_some() || tracing::enabled!(tracing::Level::DEBUG) {
                requests.iter().map(TracedAttempt::of).collect()
            } else {
                Vec::new()
            };
        let settled = self.engine.settle_many(requests).await;
        for (i, ((slot, label), result)) in slots.into_iter().zip(settled).enumerate() {
            if let Ok(env) = &result {
                self.count_outcome(label, env);
            }
            let result = result.map_err(AppError::from);
            if let Some(t) = traced.get(i) {
                t.record(self.shared.tracer.as_ref(), label, &result);
            }
            if let Some(r) = results.get_mut(slot) {
                *r = Some(result);
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(AppError::internal("the store returned too few results")))
            })
            .collect()
    }

    /// Extends the lease on task `id` to `extend_ms` from now (`work`).
    pub async fn extend_lease(
        &self,
        caller: &Caller,
        id: TaskId,
        lease_token: &str,
        extend_ms: u64,
    ) -> Result<Envelope, AppError> {
        if extend_ms == 0 {
            return Err(AppError::invalid_field("extend_ms", "must be at least 1"));
        }
        let token = self.token(id, lease_token)?;
        let envelope = self
            .engine
            .leased(&[(id, token)])
            .await
            .pop()
            .unwrap_or(Err(EngineError::TaskNotFound(id)))?;
        self.work_allowed(caller, id, &envelope.queue)?;
        Ok(self
            .engine
            .extend_lease(&envelope, token, extend_ms)
            .await?)
    }

    /// The engine token in a presented `text` for task `id`: `INVALID_FIELD`
    /// when it is no lease token, `LEASE_LOST` when it was not issued for
    /// this task (another task's, a forged one).
    fn token(&self, id: TaskId, text: &str) -> Result<LeaseToken, AppError> {
        self.shared
            .lease_key
            .parse(id, text)
            .map_err(|mismatch| match mismatch {
                TokenMismatch::Malformed => AppError::invalid_field(
                    "lease_token",
                    "is not a lease token issued by this server",
                ),
                TokenMismatch::OtherTask => AppError::from(EngineError::LeaseLost(id)),
            })
    }

    /// `work` on the task's queue; a caller limited to other queues sees
    /// `TASK_NOT_FOUND`, as for a task that does not exist.
    fn work_allowed(&self, caller: &Caller, id: TaskId, queue: &str) -> Result<(), AppError> {
        if !caller.allows_queue(queue) {
            return Err(EngineError::TaskNotFound(id).into());
        }
        caller.require(Scope::Work, queue)
    }

    /// Counts a settle: by its kind for a deferral or release, else by the
    /// outcome the engine recorded.
    fn count_outcome(&self, fixed: Option<OutcomeLabel>, settled: &Envelope) {
        let label =
            fixed.unwrap_or_else(|| match settled.attempts.last().and_then(|a| a.outcome) {
                Some(Outcome::Success) => OutcomeLabel::Success,
                Some(Outcome::PermanentFailure) => OutcomeLabel::PermanentFailure,
                _ => OutcomeLabel::RetryableFailure,
            });
        self.metrics.outcome(&settled.queue, label);
    }
}
