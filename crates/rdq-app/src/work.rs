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
//!
//! A request-per-call front end (HTTP, gRPC's unary methods) authorises
//! every call as its [`Caller`]. A long-lived worker connection (gRPC's
//! `Work` stream) asks once, when it opens, for a [`WorkGrant`]: the
//! caller's `work` scope on its queues, decided then; its claims, and the
//! settles and extensions of tasks of those queues, are not authorised
//! again. What a worker reports is a [`Report`], which each front end
//! builds from its own wire and which becomes the engine's [`Settlement`].

use rdq_engine::{
    Claimed, EngineError, FailureKind, LeaseToken, SettleRequest, Settlement, TokenMismatch,
};
use rdq_envelope::{Envelope, ErrorInfo, Outcome, TaskId, validate_queue_name};
use serde_json::Value;

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
    /// With a deferral only: what to throttle until it is due.
    pub throttle: Option<DeferThrottle>,
}

/// What a worker's deferral throttles until it is due: back-pressure the
/// worker met, passed on to every worker and node (`docs/flow-control.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeferThrottle {
    /// The task's flow key (the whole queue for a task without one).
    Key,
    /// The whole queue.
    Queue,
}

/// A claimed task with the token its worker presents.
#[derive(Debug, Clone)]
pub struct Leased {
    /// The task as claimed: IN_FLIGHT, its open attempt last.
    pub envelope: Envelope,
    /// The lease token (opaque to workers).
    pub lease_token: String,
}

/// What a worker says became of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportedOutcome {
    /// The task succeeded.
    Success,
    /// Retry with backoff (until `max_attempts`).
    RetryableFailure,
    /// Dead-letter now.
    PermanentFailure,
    /// A failure the worker did not classify: the queue's globs decide.
    Failure,
    /// Put back for `defer_ms` without spending an attempt.
    Defer,
    /// Hand back unrun: due now, no attempt spent.
    Release,
}

/// The error of a failed attempt, as a worker reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportedError {
    /// Language-native type name; classification globs match on it.
    pub error_type: String,
    /// What went wrong (cut at 4 KiB when stored).
    pub message: String,
    /// Optional structured JSON.
    pub detail: Option<Value>,
    /// Optional stack (cut at 64 KiB when stored).
    pub stack: Option<String>,
}

/// A worker's report of one attempt: the outcome and the fields that go
/// with it, not yet checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// What happened.
    pub outcome: ReportedOutcome,
    /// Required with the failure outcomes, refused with the others.
    pub error: Option<ReportedError>,
    /// Required with `Defer`, refused with the others.
    pub defer_ms: Option<u64>,
    /// With `Defer` only: also throttle until the deferral is due.
    pub throttle: Option<DeferThrottle>,
}

impl Report {
    /// The settlement this report stands for, checking which fields go
    /// with which outcome (`INVALID_FIELD` naming the field otherwise).
    pub fn settlement(self) -> Result<Settlement, AppError> {
        let Report {
            outcome,
            error,
            defer_ms,
            throttle,
        } = self;
        if throttle.is_some() && outcome != ReportedOutcome::Defer {
            return Err(AppError::invalid_field(
                "throttle",
                "is only allowed with outcome DEFER",
            ));
        }
        let needs_error = matches!(
            outcome,
            ReportedOutcome::RetryableFailure
                | ReportedOutcome::PermanentFailure
                | ReportedOutcome::Failure
        );
        if defer_ms.is_some() && outcome != ReportedOutcome::Defer {
            return Err(AppError::invalid_field(
                "defer_ms",
                "is only allowed with outcome DEFER",
            ));
        }
        if error.is_some() && !needs_error {
            return Err(AppError::invalid_field(
                "error",
                "is only allowed with a failure outcome",
            ));
        }
        let failure = |kind: FailureKind| {
            let error = error.ok_or_else(|| {
                AppError::invalid_field("error", "is required with a failure outcome")
            })?;
            if error.error_type.is_empty() {
                return Err(AppError::invalid_field("error.type", "must not be empty"));
            }
            let mut info = ErrorInfo::new(error.error_type, &error.message);
            if let Some(stack) = &error.stack {
                info = info.with_stack(stack);
            }
            if let Some(detail) = error.detail {
                info = info.with_detail(detail);
            }
            Ok(Settlement::Failure { error: info, kind })
        };
        match outcome {
            ReportedOutcome::Success => Ok(Settlement::Success),
            ReportedOutcome::RetryableFailure => failure(FailureKind::Retryable),
            ReportedOutcome::PermanentFailure => failure(FailureKind::Permanent),
            ReportedOutcome::Failure => failure(FailureKind::Unclassified),
            ReportedOutcome::Defer => match defer_ms {
                Some(delay_ms) => Ok(Settlement::Defer { delay_ms }),
                None => Err(AppError::invalid_field(
                    "defer_ms",
                    "is required with outcome DEFER",
                )),
            },
            ReportedOutcome::Release => Ok(Settlement::Release),
        }
    }

    /// The settle of task `id` this report stands for, with the token the
    /// worker presented (checked as [`Report::settlement`] does).
    pub fn into_settle(self, id: TaskId, lease_token: String) -> Result<Settle, AppError> {
        let throttle = self.throttle;
        Ok(Settle {
            id,
            lease_token,
            settlement: self.settlement()?,
            throttle,
        })
    }
}

/// A caller's `work` scope on some queues, decided once: what a long-lived
/// worker connection holds so that its claims, and its settles and
/// extensions of those queues' tasks, are not authorised one by one.
/// Only [`App::grant_work`] makes one.
#[derive(Debug, Clone)]
pub struct WorkGrant {
    caller: Caller,
    queues: Vec<String>,
}

impl WorkGrant {
    /// The granted queues, in the order they were asked for.
    pub fn queues(&self) -> &[String] {
        &self.queues
    }

    /// The caller it was granted to (who settles a task of another queue).
    pub fn caller(&self) -> &Caller {
        &self.caller
    }
}

/// Who is doing a settle or an extension: a caller checked on every
/// task, or a grant whose queues were decided when it was made.
#[derive(Clone, Copy)]
enum Worker<'a> {
    Caller(&'a Caller),
    Granted(&'a WorkGrant),
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
        self.claim_from(queue, max, lease_ms).await
    }

    /// Decides once whether `caller` may work `queues` (`work` on each, a
    /// valid name each): the grant a long-lived worker connection claims,
    /// settles and extends under.
    pub fn grant_work(&self, caller: &Caller, queues: Vec<String>) -> Result<WorkGrant, AppError> {
        for queue in &queues {
            validate_queue_name(queue)?;
            caller.require(Scope::Work, queue)?;
        }
        Ok(WorkGrant {
            caller: caller.clone(),
            queues,
        })
    }

    /// [`App::claim`] from the granted queue at `queue` (an index into
    /// [`WorkGrant::queues`]), authorised by the grant.
    pub async fn claim_granted(
        &self,
        grant: &WorkGrant,
        queue: usize,
        max: usize,
        lease_ms: Option<u64>,
    ) -> Result<Vec<Leased>, AppError> {
        let Some(queue) = grant.queues.get(queue) else {
            return Err(AppError::invalid_argument(format!(
                "the grant has {} queue(s), not {}",
                grant.queues.len(),
                queue + 1
            )));
        };
        self.claim_from(queue, max, lease_ms).await
    }

    /// A claim whose caller and queue name were checked.
    async fn claim_from(
        &self,
        queue: &str,
        max: usize,
        lease_ms: Option<u64>,
    ) -> Result<Vec<Leased>, AppError> {
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
        self.settle_as(Worker::Caller(caller), items).await
    }

    /// [`App::settle_many`] under a grant: a task of a granted queue is
    /// not authorised again; one of another queue is, as the grant's caller.
    pub async fn settle_many_granted(
        &self,
        grant: &WorkGrant,
        items: Vec<Result<Settle, AppError>>,
    ) -> Vec<Result<Envelope, AppError>> {
        self.settle_as(Worker::Granted(grant), items).await
    }

    async fn settle_as(
        &self,
        worker: Worker<'_>,
        items: Vec<Result<Settle, AppError>>,
    ) -> Vec<Result<Envelope, AppError>> {
        let mut results: Vec<Option<Result<Envelope, AppError>>> = Vec::with_capacity(items.len());
        let mut pending: Vec<(usize, TaskId, LeaseToken, Settlement)> = Vec::new();
        let mut throttles: Vec<(usize, DeferThrottle)> = Vec::new();
        let flow = self.engine.capabilities().claim_flow;
        for item in items {
            match item.and_then(|s| {
                if s.throttle.is_some() && !flow {
                    return Err(AppError::from(EngineError::Unsupported(
                        "this store cannot throttle a flow key (capability claim_flow)".into(),
                    ))
                    .with_hint("defer without throttle"));
                }
                let token = self.token(s.id, &s.lease_token)?;
                Ok((s.id, token, s.settlement, s.throttle))
            }) {
                Ok((id, token, settlement, throttle)) => {
                    if let Some(t) = throttle {
                        throttles.push((results.len(), t));
                    }
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
                work_allowed(worker, id, &envelope.queue)?;
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
        for (slot, throttle) in throttles {
            if let Some(Some(Ok(env))) = results.get(slot) {
                self.throttle_deferred(env, throttle).await;
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(AppError::internal("the store returned too few results")))
            })
            .collect()
    }

    /// Throttles what a deferral asked for until the deferred task is due
    /// (at most [`crate::flow::MAX_THROTTLE_MS`] from now). The settle
    /// stands whatever happens here; a failure is logged.
    async fn throttle_deferred(&self, env: &Envelope, throttle: DeferThrottle) {
        let now = rdq_envelope::Timestamp::now();
        let Some(due) = env.next_attempt_at.filter(|t| *t > now) else {
            return;
        };
        let until = due.min(now.plus_ms(crate::flow::MAX_THROTTLE_MS));
        let key = match throttle {
            DeferThrottle::Key => env
                .headers
                .get(rdq_engine::flow::FLOW_KEY_HEADER)
                .map(String::as_str),
            DeferThrottle::Queue => None,
        };
        match self.engine.throttle(&env.queue, key, until).await {
            Ok(()) => debug!(
                task_id = %env.id,
                queue = %env.queue,
                flow_key = key.unwrap_or(""),
                %until,
                "a deferral throttled its flow"
            ),
            Err(e) => tracing::warn!(
                task_id = %env.id,
                queue = %env.queue,
                error = %e,
                "a deferral could not throttle its flow"
            ),
        }
    }

    /// Extends the lease on task `id` to `extend_ms` from now (`work`).
    pub async fn extend_lease(
        &self,
        caller: &Caller,
        id: TaskId,
        lease_token: &str,
        extend_ms: u64,
    ) -> Result<Envelope, AppError> {
        self.extend_as(Worker::Caller(caller), id, lease_token, extend_ms)
            .await
    }

    /// [`App::extend_lease`] under a grant (see [`App::settle_many_granted`]).
    pub async fn extend_lease_granted(
        &self,
        grant: &WorkGrant,
        id: TaskId,
        lease_token: &str,
        extend_ms: u64,
    ) -> Result<Envelope, AppError> {
        self.extend_as(Worker::Granted(grant), id, lease_token, extend_ms)
            .await
    }

    async fn extend_as(
        &self,
        worker: Worker<'_>,
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
        work_allowed(worker, id, &envelope.queue)?;
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

/// `work` on the task's queue: granted already for a granted queue; else
/// the caller's, where a caller limited to other queues sees
/// `TASK_NOT_FOUND`, as for a task that does not exist.
fn work_allowed(worker: Worker<'_>, id: TaskId, queue: &str) -> Result<(), AppError> {
    let caller = match worker {
        Worker::Granted(grant) if grant.queues.iter().any(|q| q == queue) => return Ok(()),
        Worker::Granted(grant) => &grant.caller,
        Worker::Caller(caller) => caller,
    };
    if !caller.allows_queue(queue) {
        return Err(EngineError::TaskNotFound(id).into());
    }
    caller.require(Scope::Work, queue)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(outcome: ReportedOutcome) -> Report {
        Report {
            outcome,
            error: None,
            defer_ms: None,
            throttle: None,
        }
    }

    fn error(error_type: &str) -> Option<ReportedError> {
        Some(ReportedError {
            error_type: error_type.into(),
            message: "550 no such user".into(),
            detail: Some(serde_json::json!({"smtp": 550})),
            stack: None,
        })
    }

    #[test]
    fn each_outcome_becomes_its_settlement() {
        assert_eq!(
            report(ReportedOutcome::Success).settlement().unwrap(),
            Settlement::Success
        );
        assert_eq!(
            report(ReportedOutcome::Release).settlement().unwrap(),
            Settlement::Release
        );
        let defer = Report {
            defer_ms: Some(500),
            ..report(ReportedOutcome::Defer)
        };
        assert_eq!(
            defer.settlement().unwrap(),
            Settlement::Defer { delay_ms: 500 }
        );
        for (outcome, kind) in [
            (ReportedOutcome::RetryableFailure, FailureKind::Retryable),
            (ReportedOutcome::PermanentFailure, FailureKind::Permanent),
            (ReportedOutcome::Failure, FailureKind::Unclassified),
        ] {
            let failed = Report {
                error: error("smtp.Rejected"),
                ..report(outcome)
            };
            let Settlement::Failure { error, kind: got } = failed.settlement().unwrap() else {
                panic!("{outcome:?} is a failure");
            };
            assert_eq!(got, kind);
            assert_eq!(error.error_type, "smtp.Rejected");
            assert_eq!(error.detail, Some(serde_json::json!({"smtp": 550})));
        }
    }

    #[test]
    fn fields_that_do_not_go_with_the_outcome_are_refused_by_name() {
        for (bad, field) in [
            (report(ReportedOutcome::RetryableFailure), "error"),
            (
                Report {
                    throttle: Some(DeferThrottle::Key),
                    ..report(ReportedOutcome::Release)
                },
                "throttle",
            ),
            (report(ReportedOutcome::Defer), "defer_ms"),
            (
                Report {
                    defer_ms: Some(1),
                    ..report(ReportedOutcome::Success)
                },
                "defer_ms",
            ),
            (
                Report {
                    error: error("x"),
                    ..report(ReportedOutcome::Release)
                },
                "error",
            ),
            (
                Report {
                    error: error(""),
                    ..report(ReportedOutcome::Failure)
                },
                "error.type",
            ),
        ] {
            let e = bad.settlement().unwrap_err();
            assert_eq!(e.code(), "INVALID_FIELD");
            assert_eq!(e.extensions()["field"], field);
        }
    }
}
