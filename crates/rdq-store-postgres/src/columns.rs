//! The query columns of a `tasks` row, derived from its envelope, and the
//! column arrays a batch write binds.
//!
//! The canonical envelope bytes are the row's source of truth; the other
//! columns are copies of what the indexes need (status, claim order, lease
//! deadline, the compare-and-swap token, the DLQ error type, the finish time).
//! Deriving them in one place, from the envelope the engine decided, keeps
//! every write path agreeing with every query.

use rdq_engine::store::{claim_order_count, finished_at, latest_error_type};
use rdq_envelope::{Envelope, Status, TaskId};
use uuid::Uuid;

use tokio_postgres::types::ToSql;

use crate::sql::status_code;

/// A task id as PostgreSQL's `uuid`: the ULID's 16 bytes, so `uuid` order is id order.
pub(crate) fn uuid_of(id: TaskId) -> Uuid {
    Uuid::from_u128(id.as_u128())
}

/// The task id of a stored `uuid`.
pub(crate) fn task_id_of(id: Uuid) -> TaskId {
    TaskId::from_u128(id.as_u128())
}

/// One column per array, one element per task, in the order the batch
/// statements' `unnest` takes them (see `sql.rs`).
#[derive(Default)]
pub(crate) struct Rows<'a> {
    pub(crate) ids: Vec<Uuid>,
    pub(crate) status: Vec<i16>,
    pub(crate) priority: Vec<i16>,
    pub(crate) next_attempt_at: Vec<Option<i64>>,
    pub(crate) lease_expires_at: Vec<Option<i64>>,
    pub(crate) claim_count: Vec<i64>,
    pub(crate) error_type: Vec<Option<&'a [u8]>>,
    pub(crate) finished_at: Vec<Option<i64>>,
    /// `None` keeps the stored bytes (a success's settle: see [`Rows::push`]).
    pub(crate) envelope: Vec<Option<&'a [u8]>>,
}

impl<'a> Rows<'a> {
    /// Room for `n` rows.
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self {
            ids: Vec::with_capacity(n),
            status: Vec::with_capacity(n),
            priority: Vec::with_capacity(n),
            next_attempt_at: Vec::with_capacity(n),
            lease_expires_at: Vec::with_capacity(n),
            claim_count: Vec::with_capacity(n),
            error_type: Vec::with_capacity(n),
            finished_at: Vec::with_capacity(n),
            envelope: Vec::with_capacity(n),
        }
    }

    /// The parameters of a batch rewrite (`sql.rs`): the ids, then `guard`
    /// (what each row must still hold for its write to apply), the columns,
    /// and the schema's notification channel and this store's origin.
    pub(crate) fn rewrite_params<'p>(
        &'p self,
        guard: &'p (dyn ToSql + Sync),
        channel: &'p String,
        origin: &'p String,
    ) -> [&'p (dyn ToSql + Sync); 12] {
        [
            &self.ids,
            guard,
            &self.status,
            &self.priority,
            &self.next_attempt_at,
            &self.lease_expires_at,
            &self.claim_count,
            &self.error_type,
            &self.finished_at,
            &self.envelope,
            channel,
            origin,
        ]
    }

    /// Appends the row of `env`, with its canonical bytes `encoded`, or
    /// with `None` for a success's settle: a SUCCEEDED state is a pure
    /// function of the claimed state and the finish time
    /// (`machine::replay_success`), so the settle statement keeps the
    /// stored bytes (and the claim's columns they are read with) and every
    /// read recomputes the success ([`stored_envelope`]) — no envelope
    /// encoded, sent or written.
    pub(crate) fn push(&mut self, env: &'a Envelope, encoded: Option<&'a [u8]>) {
        let next_attempt_at = match env.status {
            // A PENDING task without a due time is due now: sort it first.
            Status::Pending => Some(env.next_attempt_at.map_or(i64::MIN, |t| t.unix_ms())),
            _ => env.next_attempt_at.map(|t| t.unix_ms()),
        };
        self.ids.push(uuid_of(env.id));
        self.status.push(status_code(env.status));
        self.priority.push(i16::from(env.priority));
        self.next_attempt_at.push(next_attempt_at);
        self.lease_expires_at
            .push(env.lease_expires_at.map(|t| t.unix_ms()));
        // While IN_FLIGHT, the lease token settles compare against. A
        // PENDING task no claim could count on shows the maximum, keeping
        // it out of every claim.
        self.claim_count.push(i64::from(claim_order_count(env)));
        self.error_type
            .push(latest_error_type(env).map(str::as_bytes));
        self.finished_at
            .push(env.status.is_terminal().then(|| finished_at(env).unix_ms()));
        self.envelope.push(encoded);
    }
}

/// The envelope of a row read as `envelope, status, claimed_at,
/// lease_expires_at, finished_at` from column `at` on.
///
/// A claim is written in SQL, in the one statement that picks the tasks: it
/// sets the row's status, claim count and lease, and records `claimed_at`,
/// but leaves the envelope bytes as they were (PENDING). The envelope the
/// claim handed out is `machine::claim(pending, lease, claimed_at)`, a pure
/// function of what the row holds, so it is recomputed here, byte for byte
/// the same, whenever such a row is read; the next write of the task (a
/// settle, an extension, a reap) stores its full envelope again. Likewise a
/// task completed inside an application's transaction (`SCHEMA.complete`,
/// `submit.sql`) has only its columns changed: SUCCEEDED at `finished_at`,
/// recomputed here with `machine::replay_success`.
pub(crate) fn stored_envelope(
    row: &tokio_postgres::Row,
    at: usize,
) -> Result<Envelope, crate::error::Failure> {
    let bytes: &[u8] = row.try_get(at)?;
    let status: i16 = row.try_get(at + 1)?;
    let claimed_at: Option<i64> = row.try_get(at + 2)?;
    let lease_expires_at: Option<i64> = row.try_get(at + 3)?;
    let finished_at: Option<i64> = row.try_get(at + 4)?;
    let env = Envelope::decode(bytes)
        .map_err(|e| crate::error::Failure::Engine(crate::error::undecodable("a task", &e)))?;
    let claimed =
        status == status_code(Status::InFlight) || status == status_code(Status::Succeeded);
    let env = match (claimed_at, lease_expires_at) {
        (Some(claimed_at), Some(until)) if claimed && env.status == Status::Pending => {
            rdq_engine::machine::replay_claim(env, claimed_at, until)?
        }
        _ => env,
    };
    match finished_at {
        Some(finished_at)
            if status == status_code(Status::Succeeded) && env.status == Status::InFlight =>
        {
            Ok(rdq_engine::machine::replay_success(env, finished_at)?)
        }
        _ => Ok(env),
    }
}
