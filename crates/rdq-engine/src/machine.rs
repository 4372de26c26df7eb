//! The task state machine: every transition of a task as a pure function
//! `(envelope, event, policy, now) -> Result<envelope, error>`.
//!
//! Stores persist what these functions decide and never see policy. A refused
//! transition returns an error and the input is untouched (it is taken by
//! reference), so "changes nothing" holds by construction.
//!
//! Counters (`claim_count`, `attempt_count`, `deferral_count`,
//! `redrive_count`, `attempt_no`) never saturate and never wrap: a transition
//! that would raise one past `u32::MAX` is refused with `INVALID_TRANSITION`.
//! A saturated `claim_count` would hand two claims one lease token, and a
//! store counting on in SQL would disagree with the envelope, leaving the
//! task leased forever. So that no task is stranded by a refusal, a DEAD task
//! that could not be claimed again is not redriven (it stays in the DLQ), and
//! stores do not pick PENDING tasks whose `claim_count` is at the maximum.

use rdq_envelope::{
    AttemptRecord, CancelRequest, DeadReason, Envelope, ErrorInfo, Outcome, Status, Timestamp,
};
use rdq_envelope::{dead_reasons, error_types};

use crate::error::EngineError;
use crate::policy::{Backoff, Classification, QueuePolicy};

/// Header remembering a task's own priority while a deferral has raised it.
pub const BASE_PRIORITY_HEADER: &str = "rdq.base_priority";

/// The largest value of every counter: a task whose `claim_count` is here
/// can no longer be claimed (see the module documentation).
pub const MAX_COUNT: u32 = u32::MAX;

/// Fences a settle to one claim: the task's `claim_count` when it was claimed.
/// Every claim increments it and nothing decrements it (a deferral or release
/// undoes the attempt, not the claim), so a settle naming any earlier claim is
/// stale and refused with `LEASE_LOST`.
///
/// Tokens fence stale workers, not malicious ones; authentication does that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseToken(pub u32);

impl LeaseToken {
    /// The token of the task's current claim, if it is in flight.
    pub fn current(env: &Envelope) -> Option<Self> {
        (env.status == Status::InFlight).then_some(Self(env.claim_count))
    }
}

/// How a failure should be treated, as far as the caller decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Forced retryable (a wrapper or classifier said so).
    Retryable,
    /// Forced permanent (a wrapper or classifier said so).
    Permanent,
    /// Nobody decided: the queue's globs classify it, default retryable.
    Unclassified,
}

/// What a worker reports for a claimed task.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// The handler succeeded.
    Success,
    /// The handler failed.
    Failure {
        /// What went wrong (already truncated by `ErrorInfo::new`).
        error: ErrorInfo,
        /// Who decided retryable vs permanent.
        kind: FailureKind,
    },
    /// Put the task back for `delay_ms` without spending an attempt.
    Defer {
        /// Exact delay before it is due again.
        delay_ms: u64,
    },
    /// Hand the task back unrun (a worker shutting down): due now, no attempt
    /// spent, no deferral counted.
    Release,
    /// Like [`Settlement::Failure`], judged under the worker's own retry
    /// policy (the SDK's per-job and per-worker overrides) instead of the
    /// queue's `max_attempts` and `backoff`; everything else is the queue's.
    FailureWithRetry {
        /// What went wrong (already truncated by `ErrorInfo::new`).
        error: ErrorInfo,
        /// Who decided retryable vs permanent.
        kind: FailureKind,
        /// The attempts and backoff to judge this failure by.
        retry: RetryOverride,
    },
}

/// A worker's retry policy for one failure, replacing the queue's
/// `max_attempts` and `backoff` (see [`Settlement::FailureWithRetry`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryOverride {
    /// Attempts before the task is dead-lettered (at least 1).
    pub max_attempts: u32,
    /// Delay before the next attempt.
    pub backoff: Backoff,
}

impl RetryOverride {
    /// `policy` with this override's attempts and backoff.
    pub fn applied_to(&self, policy: &QueuePolicy) -> QueuePolicy {
        QueuePolicy {
            max_attempts: self.max_attempts.max(1),
            backoff: self.backoff.clone(),
            ..policy.clone()
        }
    }
}

/// A new task enters the queue: PENDING, due after `delay_ms`, no attempts.
pub fn submit(
    env: &Envelope,
    policy: &QueuePolicy,
    now: Timestamp,
    delay_ms: u64,
) -> Result<Envelope, EngineError> {
    let mut next = env.clone();
    next.mark_written();
    next.status = Status::Pending;
    next.attempt_count = 0;
    next.next_attempt_at = Some(now.plus_ms(delay_ms));
    next.lease_expires_at = None;
    next.check_size(policy.max_envelope_bytes)?;
    Ok(next)
}

/// A worker takes a due PENDING task: IN_FLIGHT under a lease of `lease_ms`
/// (the queue's `lease_ms`), one attempt opened and counted.
///
/// The lease length is the only policy a claim needs, so stores can apply
/// this transition inside their own atomic claim without seeing policy.
pub fn claim(
    env: &Envelope,
    lease_ms: u64,
    now: Timestamp,
) -> Result<(Envelope, LeaseToken), EngineError> {
    check_claimable(env, now)?;
    Ok(claimed(env.clone(), lease_ms, now))
}

/// [`claim`] for a store that owns the pending envelope (decoded from its
/// row) and needs no copy of it: the same decision without cloning the history.
pub fn claim_owned(
    env: Envelope,
    lease_ms: u64,
    now: Timestamp,
) -> Result<(Envelope, LeaseToken), EngineError> {
    check_claimable(&env, now)?;
    Ok(claimed(env, lease_ms, now))
}

/// The IN_FLIGHT envelope a claim at `claimed_at` with a lease until `until`
/// (unix ms) made of the PENDING `env`. Stores that write only a claim's
/// columns and keep the PENDING envelope bytes recompute the claim with it
/// on every read; `CORRUPT_STORE` when the stored state cannot have been
/// claimed that way.
pub fn replay_claim(env: Envelope, claimed_at: i64, until: i64) -> Result<Envelope, EngineError> {
    let id = env.id;
    let now = Timestamp::from_unix_ms(claimed_at).ok_or_else(|| {
        EngineError::CorruptStore(format!(
            "task {id} was claimed at an impossible time ({claimed_at})"
        ))
    })?;
    let lease_ms = u64::try_from(until.saturating_sub(claimed_at)).unwrap_or(0);
    claim_owned(env, lease_ms, now)
        .map(|(next, _token)| next)
        .map_err(|e| {
            EngineError::CorruptStore(format!(
                "task {id} is leased but its stored state cannot be claimed: {e}"
            ))
        })
}

/// The SUCCEEDED envelope a successful settle at `finished_at` (unix ms)
/// made of the IN_FLIGHT `env`. A SUCCEEDED state depends on nothing but
/// the claimed state and that instant, so a store may write only a
/// success's columns and keep the claimed state's bytes, recomputing the
/// success on every read; `CORRUPT_STORE` when the stored state cannot
/// have been settled that way.
pub fn replay_success(env: Envelope, finished_at: i64) -> Result<Envelope, EngineError> {
    let id = env.id;
    let now = Timestamp::from_unix_ms(finished_at).ok_or_else(|| {
        EngineError::CorruptStore(format!(
            "task {id} finished at an impossible time ({finished_at})"
        ))
    })?;
    if env.status != Status::InFlight || env.open_attempt().is_none() {
        return Err(EngineError::CorruptStore(format!(
            "task {id} is stored as succeeded but its stored state ({}) was not in flight",
            env.status.as_str()
        )));
    }
    Ok(succeeded(env, now))
}

fn succeeded(mut next: Envelope, now: Timestamp) -> Envelope {
    next.mark_written();
    close_attempt(&mut next, now, Outcome::Success, None);
    finish(&mut next, Status::Succeeded);
    next
}

fn check_claimable(env: &Envelope, now: Timestamp) -> Result<(), EngineError> {
    if env.status != Status::Pending {
        return Err(EngineError::InvalidTransition(format!(
            "task {} is {}, only PENDING tasks can be claimed",
            env.id,
            env.status.as_str()
        )));
    }
    if env.next_attempt_at.is_some_and(|due| due > now) {
        return Err(EngineError::InvalidTransition(format!(
            "task {} is not due yet",
            env.id
        )));
    }
    check_claim_counters(env)
}

/// Whether a claim of `env` could count on: its `claim_count`,
/// `attempt_count` and next `attempt_no` all have room. Stores keep a
/// PENDING task that has none out of their claim order, so it is never
/// handed out and never fails a claim of other tasks.
pub fn claim_counters_have_room(env: &Envelope) -> bool {
    check_claim_counters(env).is_ok()
}

/// A claim raises `claim_count`, `attempt_count` and opens attempt number
/// `next_attempt_no`: refused when any of them has no room left.
fn check_claim_counters(env: &Envelope) -> Result<(), EngineError> {
    counted(env, "claim_count", env.claim_count)?;
    counted(env, "attempt_count", env.attempt_count)?;
    if next_attempt_no(env).is_none() {
        return Err(overflow(env, "attempt_no"));
    }
    Ok(())
}

/// `Ok` when `value` can still be raised by one.
fn counted(env: &Envelope, counter: &str, value: u32) -> Result<u32, EngineError> {
    value.checked_add(1).ok_or_else(|| overflow(env, counter))
}

fn overflow(env: &Envelope, counter: &str) -> EngineError {
    EngineError::InvalidTransition(format!(
        "task {}: {counter} is at its maximum ({MAX_COUNT}); counters never wrap or saturate",
        env.id
    ))
}

/// The claim of `next`, whose counters [`check_claim_counters`] found room in.
fn claimed(mut next: Envelope, lease_ms: u64, now: Timestamp) -> (Envelope, LeaseToken) {
    next.mark_written();
    let attempt_no = next_attempt_no(&next).unwrap_or(MAX_COUNT);
    next.status = Status::InFlight;
    next.claim_count = next.claim_count.saturating_add(1);
    next.attempt_count = next.attempt_count.saturating_add(1);
    next.lease_expires_at = Some(now.plus_ms(lease_ms));
    next.attempts.push(AttemptRecord::open(attempt_no, now));
    let token = LeaseToken(next.claim_count);
    (next, token)
}

/// The number of the attempt a claim would open, `None` when there is none left.
fn next_attempt_no(env: &Envelope) -> Option<u32> {
    let after_last = match env.attempts.last() {
        Some(a) => a.attempt_no.checked_add(1)?,
        None => 1,
    };
    let after_all = u32::try_from(env.attempts.len()).ok()?.checked_add(1)?;
    Some(after_last.max(after_all))
}

fn check_lease(env: &Envelope, token: LeaseToken) -> Result<(), EngineError> {
    if LeaseToken::current(env) == Some(token) {
        Ok(())
    } else {
        Err(EngineError::LeaseLost(env.id))
    }
}

/// A worker reports the outcome of its claim.
pub fn settle(
    env: &Envelope,
    token: LeaseToken,
    settlement: &Settlement,
    policy: &QueuePolicy,
    now: Timestamp,
) -> Result<Envelope, EngineError> {
    check_lease(env, token)?;
    check_settle_counters(env, settlement)?;
    Ok(settled(env.clone(), settlement, policy, now))
}

/// [`settle`] for a caller that owns the claimed envelope and has no use for
/// it once settled (the worker loop's batches): the same decision, without a
/// copy. On refusal the envelope is dropped; nothing else changes.
pub fn settle_owned(
    env: Envelope,
    token: LeaseToken,
    settlement: &Settlement,
    policy: &QueuePolicy,
    now: Timestamp,
) -> Result<Envelope, EngineError> {
    check_lease(&env, token)?;
    check_settle_counters(&env, settlement)?;
    Ok(settled(env, settlement, policy, now))
}

/// A deferral raises `deferral_count`: refused when it has no room left (the
/// task stays leased; its worker can still settle it otherwise, or the lease
/// lapses and is reaped as usual).
fn check_settle_counters(env: &Envelope, settlement: &Settlement) -> Result<(), EngineError> {
    match settlement {
        Settlement::Defer { .. } => counted(env, "deferral_count", env.deferral_count).map(drop),
        _ => Ok(()),
    }
}

fn settled(
    mut next: Envelope,
    settlement: &Settlement,
    policy: &QueuePolicy,
    now: Timestamp,
) -> Envelope {
    next.mark_written();
    let own_priority = next.priority;
    if let Some(request) = next.cancel_requested.clone()
        && *settlement != Settlement::Success
    {
        return stopped(next, settlement, &request, policy, now);
    }
    match settlement {
        // The one way to SUCCEEDED (stores rely on it: `replay_success`).
        Settlement::Success => return succeeded(next, now),
        Settlement::Failure { error, kind } | Settlement::FailureWithRetry { error, kind, .. } => {
            let overridden = match settlement {
                Settlement::FailureWithRetry { retry, .. } => Some(retry.applied_to(policy)),
                _ => None,
            };
            let policy = overridden.as_ref().unwrap_or(policy);
            let class = match kind {
                FailureKind::Retryable => Classification::Retryable,
                FailureKind::Permanent => Classification::Permanent,
                FailureKind::Unclassified => policy.classify(&error.error_type),
            };
            match class {
                Classification::Permanent => {
                    close_attempt(
                        &mut next,
                        now,
                        Outcome::PermanentFailure,
                        Some(error.clone()),
                    );
                    let code = if error.error_type == error_types::HANDLER_VERSION_MISMATCH {
                        dead_reasons::HANDLER_VERSION_MISMATCH
                    } else {
                        dead_reasons::PERMANENT_FAILURE
                    };
                    let why = format!("{}: {}", error.error_type, error.message);
                    die(&mut next, code, BY_WORKER, now, &why);
                }
                Classification::Retryable => {
                    close_attempt(
                        &mut next,
                        now,
                        Outcome::RetryableFailure,
                        Some(error.clone()),
                    );
                    retry_or_die(&mut next, policy, now, BY_WORKER);
                }
            }
        }
        Settlement::Defer { delay_ms } => {
            // A deferral spends no attempt: the claim's attempt is undone.
            next.attempts.pop();
            next.attempt_count = next.attempt_count.saturating_sub(1);
            next.deferral_count = next.deferral_count.saturating_add(1);
            next.headers
                .entry(BASE_PRIORITY_HEADER.to_owned())
                .or_insert_with(|| own_priority.to_string());
            next.priority = policy.max_priority;
            next.status = Status::Pending;
            next.lease_expires_at = None;
            next.next_attempt_at = Some(now.plus_ms(*delay_ms));
        }
        Settlement::Release => {
            next.attempts.pop();
            next.attempt_count = next.attempt_count.saturating_sub(1);
            next.status = Status::Pending;
            next.lease_expires_at = None;
            next.next_attempt_at = Some(now);
        }
    }
    next
}

/// A task asked to stop while it ran ends with any outcome but success:
/// DEAD with reason `CANCELLED` by whoever asked, spending no further
/// attempt. A failure closes its attempt as reported; a deferral or a
/// release undoes it, as they always do.
fn stopped(
    mut next: Envelope,
    settlement: &Settlement,
    request: &CancelRequest,
    policy: &QueuePolicy,
    now: Timestamp,
) -> Envelope {
    match settlement {
        Settlement::Failure { error, kind } | Settlement::FailureWithRetry { error, kind, .. } => {
            let permanent = match kind {
                FailureKind::Permanent => true,
                FailureKind::Retryable => false,
                FailureKind::Unclassified => {
                    policy.classify(&error.error_type) == Classification::Permanent
                }
            };
            let outcome = if permanent {
                Outcome::PermanentFailure
            } else {
                Outcome::RetryableFailure
            };
            close_attempt(&mut next, now, outcome, Some(error.clone()));
        }
        Settlement::Defer { .. } | Settlement::Release | Settlement::Success => {
            next.attempts.pop();
            next.attempt_count = next.attempt_count.saturating_sub(1);
        }
    }
    restore_base_priority(&mut next);
    let message = request
        .message
        .as_deref()
        .unwrap_or("cancelled while running");
    die(
        &mut next,
        dead_reasons::CANCELLED,
        &request.by,
        now,
        message,
    );
    next
}

/// The lease lapsed with no outcome: the attempt closes as `LEASE_EXPIRED`,
/// counts against `max_attempts`, and the task retries or dies.
pub fn expire_lease(
    env: &Envelope,
    policy: &QueuePolicy,
    now: Timestamp,
) -> Result<Envelope, EngineError> {
    let deadline = match (env.status, env.lease_expires_at) {
        (Status::InFlight, Some(deadline)) if deadline <= now => deadline,
        (Status::InFlight, _) => {
            return Err(EngineError::InvalidTransition(format!(
                "the lease on task {} has not expired",
                env.id
            )));
        }
        (status, _) => {
            return Err(EngineError::InvalidTransition(format!(
                "task {} is {}, not IN_FLIGHT",
                env.id,
                status.as_str()
            )));
        }
    };
    let mut next = env.clone();
    next.mark_written();
    let error = ErrorInfo::new(
        error_types::LEASE_EXPIRED,
        &format!("lease expired at {deadline} before the worker reported an outcome"),
    );
    if next.open_attempt().is_none() {
        // An IN_FLIGHT task written by another system may lack its open record.
        let Some(no) = next_attempt_no(&next) else {
            // No attempt number left to record the lapse under: the reaper
            // must still end the lease, and the task could not run again.
            die(
                &mut next,
                dead_reasons::COUNTERS_EXHAUSTED,
                BY_REAPER,
                now,
                "the lease expired and no attempt number is left to record it under",
            );
            return Ok(next);
        };
        next.attempts.push(AttemptRecord::open(no, deadline));
    }
    close_attempt(&mut next, now, Outcome::LeaseExpired, Some(error));
    if let Some(request) = &next.cancel_requested {
        // Asked to stop, and it did (or its worker died): no retry.
        let message = request
            .message
            .clone()
            .unwrap_or_else(|| "cancelled while running".to_owned());
        let by = request.by.clone();
        restore_base_priority(&mut next);
        die(&mut next, dead_reasons::CANCELLED, &by, now, &message);
        return Ok(next);
    }
    let budget = policy.max_lease_expiries;
    if budget > 0 && lease_expiries(&next) >= budget {
        let why = format!(
            "the lease expired {budget} times (max_lease_expiries); the handler may be killing its worker"
        );
        die(
            &mut next,
            dead_reasons::LEASE_EXPIRIES_EXHAUSTED,
            BY_REAPER,
            now,
            &why,
        );
        return Ok(next);
    }
    retry_or_die(&mut next, policy, now, BY_REAPER);
    Ok(next)
}

/// A worker asks for more time: the lease now ends `extend_ms` after `now`.
pub fn extend_lease(
    env: &Envelope,
    token: LeaseToken,
    extend_ms: u64,
    now: Timestamp,
) -> Result<Envelope, EngineError> {
    check_lease(env, token)?;
    if env.lease_expires_at.is_some_and(|d| d <= now) {
        // A lapsed lease is the reaper's, even if it has not run yet.
        return Err(EngineError::LeaseLost(env.id));
    }
    let mut next = env.clone();
    next.mark_written();
    next.lease_expires_at = Some(now.plus_ms(extend_ms));
    Ok(next)
}

/// An operator sends a dead task back: PENDING now, attempts reset, history
/// kept. Refused for a task whose `redrive_count` is at the maximum, and for
/// one that could not be claimed again (`claim_count` or the last
/// `attempt_no` at the maximum): it stays in the DLQ rather than wait forever.
pub fn redrive(env: &Envelope, now: Timestamp) -> Result<Envelope, EngineError> {
    if env.status != Status::Dead {
        return Err(EngineError::InvalidTransition(format!(
            "task {} is {}, only DEAD tasks can be redriven",
            env.id,
            env.status.as_str()
        )));
    }
    counted(env, "redrive_count", env.redrive_count)?;
    counted(env, "claim_count", env.claim_count)?;
    if next_attempt_no(env).is_none() {
        return Err(overflow(env, "attempt_no"));
    }
    let mut next = env.clone();
    next.mark_written();
    next.status = Status::Pending;
    next.dead_reason = None;
    next.cancel_requested = None;
    next.attempt_count = 0;
    next.redrive_count = next.redrive_count.saturating_add(1);
    next.next_attempt_at = Some(now);
    next.lease_expires_at = None;
    restore_base_priority(&mut next);
    Ok(next)
}

/// An operator or a program cancels a PENDING task: DEAD now with reason
/// `CANCELLED`, decided by `by`, its history kept (a redrive reverses it).
/// Any other status is refused with `INVALID_TRANSITION`.
pub fn cancel(
    env: &Envelope,
    by: &str,
    message: &str,
    now: Timestamp,
) -> Result<Envelope, EngineError> {
    if env.status != Status::Pending {
        return Err(EngineError::InvalidTransition(format!(
            "task {} is {}, only PENDING tasks are cancelled this way",
            env.id,
            env.status.as_str()
        )));
    }
    let mut next = env.clone();
    next.mark_written();
    restore_base_priority(&mut next);
    die(&mut next, dead_reasons::CANCELLED, by, now, message);
    Ok(next)
}

/// A task that arrives DEAD: what a source makes of a record it cannot turn
/// into a task it may run (docs/sources.md), kept in the DLQ with reason
/// `code` decided by `by`, never claimed.
pub fn dead_on_arrival(
    env: &Envelope,
    code: &str,
    by: &str,
    now: Timestamp,
    message: &str,
) -> Envelope {
    let mut next = env.clone();
    next.mark_written();
    next.attempt_count = 0;
    die(&mut next, code, by, now, message);
    next
}

/// Someone asks a running task to stop: the IN_FLIGHT task keeps its lease
/// and gains `cancel_requested`, which its worker learns of (on its next
/// lease extension, at once on a `Work` stream). What it then reports
/// decides: a success stands; anything else ends it DEAD with reason
/// `CANCELLED` ([`settle`], [`expire_lease`]). Refused for a task that is
/// not IN_FLIGHT or was already asked (`INVALID_TRANSITION`).
pub fn request_cancel(
    env: &Envelope,
    by: &str,
    message: &str,
    now: Timestamp,
) -> Result<Envelope, EngineError> {
    if env.status != Status::InFlight {
        return Err(EngineError::InvalidTransition(format!(
            "task {} is {}, only IN_FLIGHT tasks are asked to stop",
            env.id,
            env.status.as_str()
        )));
    }
    if env.cancel_requested.is_some() {
        return Err(EngineError::InvalidTransition(format!(
            "task {} was already asked to stop",
            env.id
        )));
    }
    let mut next = env.clone();
    next.mark_written();
    next.cancel_requested = Some(CancelRequest::new(by, now, message));
    Ok(next)
}

fn close_attempt(env: &mut Envelope, now: Timestamp, outcome: Outcome, error: Option<ErrorInfo>) {
    if let Some(open) = env.attempts.last_mut().filter(|a| a.is_open()) {
        // Never record a finish before the start, whatever the clocks say.
        open.finished_at = Some(now.max(open.started_at));
        open.outcome = Some(outcome);
        open.error = error;
    }
}

fn finish(env: &mut Envelope, status: Status) {
    env.status = status;
    env.next_attempt_at = None;
    env.lease_expires_at = None;
}

/// [`DeadReason::by`] of a death a worker's settle decided.
pub const BY_WORKER: &str = "worker";
/// [`DeadReason::by`] of a death a lapsed lease decided.
pub const BY_REAPER: &str = "reaper";

/// The task becomes DEAD for `code`.
fn die(env: &mut Envelope, code: &str, by: &str, now: Timestamp, message: &str) {
    finish(env, Status::Dead);
    env.dead_reason = Some(DeadReason::new(code, by, now, message));
}

/// How many of the attempts since submit or the last redrive ended with
/// the lease lapsing.
fn lease_expiries(env: &Envelope) -> u32 {
    let current = usize::try_from(env.attempt_count).unwrap_or(usize::MAX);
    let n = env
        .attempts
        .iter()
        .rev()
        .take(current)
        .filter(|a| a.outcome == Some(Outcome::LeaseExpired))
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn retry_or_die(env: &mut Envelope, policy: &QueuePolicy, now: Timestamp, by: &str) {
    if env.attempt_count >= policy.max_attempts {
        let last = env.attempts.last().and_then(|a| a.error.as_ref());
        let why = match last {
            Some(e) => format!(
                "{} of {} attempts spent; the last failed with {}: {}",
                env.attempt_count, policy.max_attempts, e.error_type, e.message
            ),
            None => format!(
                "{} of {} attempts spent",
                env.attempt_count, policy.max_attempts
            ),
        };
        die(env, dead_reasons::ATTEMPTS_EXHAUSTED, by, now, &why);
        return;
    }
    let delay = policy.backoff.delay_ms(env.attempt_count, env.id);
    env.status = Status::Pending;
    env.lease_expires_at = None;
    env.next_attempt_at = Some(now.plus_ms(delay));
    restore_base_priority(env);
}

/// A retry is scheduled like any failed attempt: a priority raised by an
/// earlier deferral goes back to the task's own.
fn restore_base_priority(env: &mut Envelope) {
    if let Some(base) = env.headers.remove(BASE_PRIORITY_HEADER) {
        env.priority = base.parse().unwrap_or(0);
    }
}
