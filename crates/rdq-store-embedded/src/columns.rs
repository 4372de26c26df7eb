//! The query columns of a `tasks` row, derived from its envelope.
//!
//! The canonical envelope bytes are the row's source of truth; these columns
//! are copies of what the indexes need (status, claim order, lease deadline,
//! the CAS token, the DLQ error type, the finish time). Deriving them in one
//! place, from the envelope the engine decided, is what keeps every write path
//! (submit, claim, settle, redrive) agreeing with every query.

use rdq_engine::store::{claim_order_count, finished_at, latest_error_type};
use rdq_engine::{EngineError, machine};
use rdq_envelope::{Envelope, Status};
use rusqlite::Row;
use rusqlite::types::ValueRef;

use crate::schema::status;

/// The derived columns of one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Columns<'a> {
    pub(crate) status: i64,
    pub(crate) priority: i64,
    pub(crate) next_attempt_at: Option<i64>,
    pub(crate) lease_expires_at: Option<i64>,
    pub(crate) lease_attempt: Option<i64>,
    pub(crate) error_type: Option<&'a str>,
    pub(crate) finished_at: Option<i64>,
}

impl<'a> Columns<'a> {
    /// The columns of `env`.
    pub(crate) fn of(env: &'a Envelope) -> Self {
        let next_attempt_at = match env.status {
            // A PENDING task without a due time is due now: sort it first.
            Status::Pending => Some(env.next_attempt_at.map_or(i64::MIN, |t| t.unix_ms())),
            _ => env.next_attempt_at.map(|t| t.unix_ms()),
        };
        Self {
            status: status_code(env.status),
            priority: i64::from(env.priority),
            next_attempt_at,
            lease_expires_at: env.lease_expires_at.map(|t| t.unix_ms()),
            // The claim counter, whatever the status: a claim (which writes
            // only the columns) counts on from it; a settle's compare-and-swap
            // also requires status IN_FLIGHT. A PENDING task no claim could
            // count on shows the maximum, keeping it out of every claim.
            lease_attempt: Some(i64::from(claim_order_count(env))),
            error_type: latest_error_type(env),
            finished_at: env.status.is_terminal().then(|| finished_at(env).unix_ms()),
        }
    }
}

/// The columns [`stored`] needs, in its argument order, for a `SELECT`:
/// `concat!("SELECT ", envelope_columns!(), " FROM tasks …")`.
macro_rules! envelope_columns {
    () => {
        "envelope, status, claimed_at, lease_expires_at, finished_at"
    };
}
pub(crate) use envelope_columns;

/// The envelope a row stands for. Two writes store only a row's columns
/// and leave its envelope bytes as they were, because what they decide is
/// a pure function of those bytes and the columns:
///
/// - a claim (status, lease, claim counter, `claimed_at`) leaves the bytes
///   PENDING: the envelope it handed out is `machine::replay_claim(pending,
///   claimed_at, lease_expires_at)`;
/// - a successful settle (status SUCCEEDED, `finished_at`) leaves the bytes
///   of the state it settled (PENDING with the claim's `claimed_at`, or
///   IN_FLIGHT after a lease extension): the envelope is
///   `machine::replay_success(claimed, finished_at)`.
///
/// Both are recomputed here byte for byte the same whenever such a row is
/// read. Every other write stores the whole envelope.
pub(crate) fn stored(
    env: Envelope,
    status: i64,
    claimed_at: Option<i64>,
    lease_expires_at: Option<i64>,
    finished_at: Option<i64>,
) -> Result<Envelope, EngineError> {
    let claimed = |env: Envelope, until: Option<i64>| match (env.status, claimed_at, until) {
        (Status::Pending, Some(at), Some(until)) => machine::replay_claim(env, at, until),
        _ => Ok(env),
    };
    match status {
        status::IN_FLIGHT if env.status == Status::Pending => claimed(env, lease_expires_at),
        status::SUCCEEDED if env.status != Status::Succeeded => {
            let Some(finished_at) = finished_at else {
                return Err(EngineError::CorruptStore(format!(
                    "task {} is stored as succeeded without a finish time",
                    env.id
                )));
            };
            // The lease ended with the success: any deadline replays the same.
            machine::replay_success(claimed(env, claimed_at)?, finished_at)
        }
        _ => Ok(env),
    }
}

/// The stored code of a status.
pub(crate) fn status_code(s: Status) -> i64 {
    match s {
        Status::Pending => status::PENDING,
        Status::InFlight => status::IN_FLIGHT,
        Status::Succeeded => status::SUCCEEDED,
        Status::Dead => status::DEAD,
    }
}

/// The status of a stored code.
pub(crate) fn status_of(code: i64) -> Option<Status> {
    match code {
        status::PENDING => Some(Status::Pending),
        status::IN_FLIGHT => Some(Status::InFlight),
        status::SUCCEEDED => Some(Status::Succeeded),
        status::DEAD => Some(Status::Dead),
        _ => None,
    }
}

/// Index of a status in per-queue count arrays.
pub(crate) fn slot(s: Status) -> usize {
    match s {
        Status::Pending => 0,
        Status::InFlight => 1,
        Status::Succeeded => 2,
        Status::Dead => 3,
    }
}

/// The bytes of a BLOB (or TEXT) column; anything else reads as empty, which
/// no decoder accepts.
pub(crate) fn bytes<'r>(row: &'r Row<'_>, idx: usize) -> rusqlite::Result<&'r [u8]> {
    Ok(match row.get_ref(idx)? {
        ValueRef::Blob(b) | ValueRef::Text(b) => b,
        _ => &[],
    })
}
