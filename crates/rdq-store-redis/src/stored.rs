//! What a task looks like in Redis: one field of its queue's task hash
//! whose value is a short header, `S,C,P,CA,L,K`, followed by the canonical
//! envelope bytes (the source of truth, returned byte for byte).
//!
//! `S` is the status digit, `C` the claim count (the lease token the
//! scripts compare), `P` the priority, `K` the flow key (empty for a task
//! without one; a value written before flow keys existed has no `K` and
//! reads as a task without one). `CA` and `L` are written only by the
//! claim script, which marks a task IN_FLIGHT without rewriting its PENDING
//! envelope: reading such a task replays [`machine::replay_claim`] on the
//! stored envelope, which gives the very bytes the claimer got. The next
//! full write (settle, extension, reap) stores the whole envelope again.
//!
//! [`Placement`] is where a fully written task goes in its queue's indexes.

use rdq_engine::store::finished_at;
use rdq_engine::{EngineError, flow, machine};
use rdq_envelope::{Envelope, Status, Timestamp};

/// Ready-set scores are `(255 - priority) * 2^44 + due ms` (see `lua/common.lua`).
const SPAN_MS: i64 = 1 << 44;

/// The status digit the scripts use.
pub(crate) fn status_digit(status: Status) -> char {
    match status {
        Status::Pending => '0',
        Status::InFlight => '1',
        Status::Succeeded => '2',
        Status::Dead => '3',
    }
}

/// Where a task goes in its queue's indexes: its status, the scored set
/// (`r` ready, `d` delayed, `l` leases, `f` done, `-` none) and the score.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Placement {
    pub(crate) status: char,
    pub(crate) kind: char,
    pub(crate) score: String,
}

impl Placement {
    /// The placement of `env`, written in full.
    ///
    /// A PENDING task goes straight into the ready set when it was due by
    /// the latest time its envelope records (its creation or an attempt's
    /// start or end: a time the writer's clock has already reached), into
    /// the delayed set otherwise; the claim script moves delayed tasks over
    /// once due, and sends back any ready task that is not due yet.
    pub(crate) fn of(env: &Envelope) -> Self {
        let status = status_digit(env.status);
        let (kind, score) = match env.status {
            // A counter at its maximum can never be counted on by a claim:
            // such a task waits in no claim order (see `machine::MAX_COUNT`).
            Status::Pending if !machine::claim_counters_have_room(env) => ('-', "0".to_owned()),
            Status::Pending => {
                let due = env
                    .next_attempt_at
                    .map_or(0, Timestamp::unix_ms)
                    .clamp(0, SPAN_MS - 1);
                if due <= reference_ms(env) {
                    let rank = 255 - i64::from(env.priority);
                    ('r', (rank * SPAN_MS + due).to_string())
                } else {
                    ('d', due.to_string())
                }
            }
            Status::InFlight => (
                'l',
                env.lease_expires_at
                    .map_or_else(|| "+inf".to_owned(), |t| t.unix_ms().to_string()),
            ),
            Status::Succeeded => ('f', finished_at(env).unix_ms().to_string()),
            Status::Dead => ('-', "0".to_owned()),
        };
        Self {
            status,
            kind,
            score,
        }
    }
}

/// The latest instant an envelope records.
fn reference_ms(env: &Envelope) -> i64 {
    env.attempts
        .iter()
        .flat_map(|a| [Some(a.started_at), a.finished_at])
        .flatten()
        .chain([env.created_at])
        .map(Timestamp::unix_ms)
        .max()
        .unwrap_or(0)
}

/// The flow key the scripts file `env` under: its `rdq.flow_key` header
/// when that is a valid flow key (which rdq checks at submit, and which
/// never holds the `,` or `{` the header layout relies on), else `""`.
pub(crate) fn flow_key(env: &Envelope) -> &str {
    let key = flow::key_of(env);
    if flow::is_valid_flow_key(key) {
        key
    } else {
        ""
    }
}

/// The stored value of `env`, written in full.
pub(crate) fn value_of(env: &Envelope) -> Vec<u8> {
    let header = format!(
        "{},{},{},,,{}",
        status_digit(env.status),
        env.claim_count,
        env.priority,
        flow_key(env)
    );
    let mut out = Vec::with_capacity(header.len() + env.payload.len() * 2 + 512);
    out.extend_from_slice(header.as_bytes());
    env.encode_into(&mut out);
    out
}

/// The envelope bytes of a stored value, header cut off.
pub(crate) fn envelope_bytes(value: &[u8]) -> &[u8] {
    match value.iter().position(|&b| b == b'{') {
        Some(at) => &value[at..],
        None => &[],
    }
}

/// The header of a stored value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    status: u8,
    claim_count: u32,
    claim: Option<(i64, i64)>,
}

fn header(value: &[u8]) -> Option<(Header, &[u8])> {
    let at = value.iter().position(|&b| b == b'{')?;
    let text = std::str::from_utf8(&value[..at]).ok()?;
    let mut parts = text.split(',');
    let status = parts.next()?.parse::<u8>().ok()?;
    let claim_count = parts.next()?.parse::<u32>().ok()?;
    let _priority = parts.next()?;
    let claimed_at = parts.next()?;
    let until = parts.next()?;
    let claim = match (claimed_at, until) {
        ("", "") => None,
        (a, u) => Some((a.parse().ok()?, u.parse().ok()?)),
    };
    Some((
        Header {
            status,
            claim_count,
            claim,
        },
        &value[at..],
    ))
}

/// The task a stored value holds, as the engine sees it: the stored
/// envelope, with a claim made by the claim script replayed on it.
pub(crate) fn decode(value: &[u8]) -> Result<Envelope, EngineError> {
    let corrupt = |why: String| EngineError::CorruptStore(why);
    let (header, bytes) =
        header(value).ok_or_else(|| corrupt("a stored task has no readable header".into()))?;
    let env = Envelope::decode(bytes)
        .map_err(|e| corrupt(format!("a stored envelope does not decode: {e}")))?;
    let env = match header.claim {
        Some((claimed_at, until)) => machine::replay_claim(env, claimed_at, until)?,
        None => env,
    };
    if status_digit(env.status) as u8 - b'0' != header.status
        || env.claim_count != header.claim_count
    {
        return Err(corrupt(format!(
            "task {} is stored as status {} claim {} but its envelope says {} claim {}",
            env.id,
            header.status,
            header.claim_count,
            env.status.as_str(),
            env.claim_count
        )));
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn pending() -> Envelope {
        let now = Timestamp::from_unix_ms(1_784_556_202_117).unwrap();
        let mut env = Envelope::new("q", "h", b"{}", "application/json", now);
        env.next_attempt_at = Some(now);
        env
    }

    #[test]
    fn a_full_write_reads_back_byte_for_byte() {
        let env = pending();
        let value = value_of(&env);
        assert!(value.starts_with(b"0,0,0,,,{"));
        assert_eq!(envelope_bytes(&value), env.encode().as_slice());
        assert_eq!(decode(&value).unwrap().encode(), env.encode());
    }

    #[test]
    fn a_claim_made_by_the_script_is_replayed_on_read() {
        let env = pending();
        let now = env.created_at.unix_ms();
        let mut value = format!("1,1,0,{now},{},", now + 1_000).into_bytes();
        value.extend_from_slice(&env.encode());
        let (expected, _) = machine::claim(&env, 1_000, env.created_at).unwrap();
        assert_eq!(decode(&value).unwrap().encode(), expected.encode());
        let mut wrong = format!("1,7,0,{now},{},", now + 1_000).into_bytes();
        wrong.extend_from_slice(&env.encode());
        assert_eq!(decode(&wrong).unwrap_err().code(), "CORRUPT_STORE");
    }

    #[test]
    fn the_flow_key_is_in_the_header_and_a_claim_keeps_it() {
        let mut env = pending();
        env.headers
            .insert(flow::FLOW_KEY_HEADER.to_owned(), "tenant-7".to_owned());
        let value = value_of(&env);
        assert!(value.starts_with(b"0,0,0,,,tenant-7{"));
        assert_eq!(decode(&value).unwrap().encode(), env.encode());
        // As the claim script writes it.
        let now = env.created_at.unix_ms();
        let mut claimed = format!("1,1,0,{now},{},tenant-7", now + 1_000).into_bytes();
        claimed.extend_from_slice(&env.encode());
        let (expected, _) = machine::claim(&env, 1_000, env.created_at).unwrap();
        assert_eq!(decode(&claimed).unwrap().encode(), expected.encode());
    }

    #[test]
    fn due_tasks_are_ready_and_later_ones_delayed() {
        let mut env = pending();
        env.priority = 9;
        let ready = Placement::of(&env);
        assert_eq!(ready.kind, 'r');
        let due = env.created_at.unix_ms();
        assert_eq!(ready.score, (246 * SPAN_MS + due).to_string());
        env.next_attempt_at = Some(env.created_at.plus_ms(1));
        let delayed = Placement::of(&env);
        assert_eq!((delayed.kind, delayed.score), ('d', (due + 1).to_string()));
    }
}
