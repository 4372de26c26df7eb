//! The query columns of a `tasks` row, derived from its envelope.
//!
//! The canonical envelope bytes are the row's source of truth; these columns
//! are copies of what the indexes need (status, claim order, lease deadline,
//! the CAS token, the DLQ error type, the finish time). Deriving them in one
//! place, from the envelope the engine decided, is what keeps every write path
//! (submit, claim, settle, redrive) agreeing with every query.

use rdq_engine::machine::LeaseToken;
use rdq_engine::store::{finished_at, latest_error_type};
use rdq_envelope::{Envelope, Status};

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
            lease_attempt: LeaseToken::current(env).map(|t| i64::from(t.0)),
            error_type: latest_error_type(env),
            finished_at: env.status.is_terminal().then(|| finished_at(env).unix_ms()),
        }
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
