//! Uniqueness: a submit that names a unique key takes the key's slot, and
//! while the task holding the slot still holds it (its **hold**, an
//! invariant over the holder's state) another submit of the key conflicts
//! (docs/uniqueness.md).
//!
//! The hold is judged lazily, from the holder's state at the moment a
//! second submit arrives, inside the store's atomic submit step: nothing
//! has to release a slot when a task moves on, so a slot cannot be left
//! behind by a crash between two writes, and a holder that moved on never
//! takes its slot back (redrive and import check it again).
//!
//! What a task holds is written on it as system headers, so it travels
//! with the envelope (export, import, redrive) without a new envelope
//! member: [`KEY_HEADER`], [`SCOPE_HEADER`] and [`HOLD_HEADER`].

use std::fmt;
use std::str::FromStr;

use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use sha2::{Digest, Sha256};

use crate::error::EngineError;

/// The key a task holds.
pub const KEY_HEADER: &str = "rdq.unique_key";
/// `queue` or `handler`: whether the key is unique in the queue or per
/// handler in the queue.
pub const SCOPE_HEADER: &str = "rdq.unique_scope";
/// The hold ([`Hold`]'s text form).
pub const HOLD_HEADER: &str = "rdq.unique_hold";

/// The longest unique key, in bytes.
pub const MAX_KEY_BYTES: usize = 512;
/// The most JSON pointers a derived key may name.
pub const MAX_KEY_FIELDS: usize = 16;

/// The longest idempotency key, in characters: a key of the idempotency
/// case ([`UniqueRequest::is_idempotency`]) up to this long is submitted
/// as one.
pub const MAX_IDEMPOTENCY_CHARS: usize = 255;
/// The longest `for` hold: ten years.
pub const MAX_HOLD_MS: u64 = 10 * 366 * 24 * 3_600_000;

/// How long a task holds its key: an invariant over its state, so no
/// state is left out by accident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hold {
    /// While it waits for its first claim (PENDING, never claimed).
    UntilStarted,
    /// While it is not finished: PENDING or IN_FLIGHT (a retry waiting
    /// included). SUCCEEDED and DEAD release it.
    #[default]
    UntilFinished,
    /// Until it succeeds: a DEAD task keeps the key (redrive it, or delete
    /// it, to free the key).
    UntilSucceeded,
    /// For this many milliseconds after it was submitted, whatever its
    /// state (throttling).
    For(u64),
    /// As long as the task exists.
    Forever,
}

impl Hold {
    /// Whether a task in `holder`'s state holds its key at `now` under
    /// this hold.
    pub fn holds(self, holder: &Envelope, now: Timestamp) -> bool {
        match self {
            Self::UntilStarted => {
                holder.status == Status::Pending
                    && holder.claim_count == 0
                    && holder.attempts.is_empty()
            }
            Self::UntilFinished => matches!(holder.status, Status::Pending | Status::InFlight),
            Self::UntilSucceeded => holder.status != Status::Succeeded,
            Self::For(ms) => now.unix_ms() < holder.created_at.plus_ms(ms).unix_ms(),
            Self::Forever => true,
        }
    }
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UntilStarted => f.write_str("until_started"),
            Self::UntilFinished => f.write_str("until_finished"),
            Self::UntilSucceeded => f.write_str("until_succeeded"),
            Self::For(ms) => write!(f, "for:{ms}"),
            Self::Forever => f.write_str("forever"),
        }
    }
}

impl FromStr for Hold {
    type Err = EngineError;

    /// The text form ([`Hold`]'s `Display`): `until_started`,
    /// `until_finished`, `until_succeeded`, `forever`, or `for:MS`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "until_started" => Ok(Self::UntilStarted),
            "until_finished" => Ok(Self::UntilFinished),
            "until_succeeded" => Ok(Self::UntilSucceeded),
            "forever" => Ok(Self::Forever),
            _ => match s.strip_prefix("for:").map(str::parse::<u64>) {
                Some(Ok(ms)) => Self::duration(ms),
                _ => Err(invalid(
                    "unique.hold",
                    format!(
                        "{s:?} is no hold: until_started, until_finished, until_succeeded, \
                         forever or for:MS"
                    ),
                )),
            },
        }
    }
}

impl Hold {
    /// [`Hold::For`], checked: 1 ms to [`MAX_HOLD_MS`].
    pub fn duration(ms: u64) -> Result<Self, EngineError> {
        if ms == 0 || ms > MAX_HOLD_MS {
            return Err(invalid(
                "unique.hold_ms",
                format!("a hold lasts 1 to {MAX_HOLD_MS} ms, not {ms}"),
            ));
        }
        Ok(Self::For(ms))
    }
}

/// Where a key is unique.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// One holder per key in the queue.
    #[default]
    Queue,
    /// One holder per key and handler in the queue.
    Handler,
}

impl Scope {
    /// The text form: `queue` or `handler`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queue => "queue",
            Self::Handler => "handler",
        }
    }
}

impl FromStr for Scope {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "queue" => Ok(Self::Queue),
            "handler" => Ok(Self::Handler),
            _ => Err(invalid(
                "unique.scope",
                format!("{s:?} is no scope: queue or handler"),
            )),
        }
    }
}

/// What a submit does when the key's holder still holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnConflict {
    /// Nothing is written; the submit fails with `UNIQUE_HELD` naming the
    /// holder.
    #[default]
    Return,
    /// A holder still waiting (PENDING) takes the new payload, content
    /// type and headers; it keeps its id, its due time and its history.
    /// A holder that is running, or finished, conflicts as with `Return`.
    Replace,
    /// As `Replace`, and the holder's due time moves to the new submit's
    /// (now plus its delay): a burst of submits runs once, after the last.
    Debounce,
    /// Nothing is written; the submit succeeds with the holder, as an
    /// idempotent repeat does (an idempotency key is this mode with hold
    /// `Forever` in the queue's scope).
    Existing,
}

impl OnConflict {
    /// The text form: `return`, `replace`, `debounce` or `existing`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Return => "return",
            Self::Replace => "replace",
            Self::Debounce => "debounce",
            Self::Existing => "existing",
        }
    }
}

impl FromStr for OnConflict {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "return" => Ok(Self::Return),
            "replace" => Ok(Self::Replace),
            "debounce" => Ok(Self::Debounce),
            "existing" => Ok(Self::Existing),
            _ => Err(invalid(
                "unique.on_conflict",
                format!("{s:?} is no conflict mode: return, replace, debounce or existing"),
            )),
        }
    }
}

/// A submit's uniqueness, as the caller asked for it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UniqueRequest {
    /// The key, given. Exactly one of `key` and `key_from`.
    pub key: Option<String>,
    /// JSON pointers (RFC 6901) into the JSON payload whose values make
    /// the key: the server derives it, so every client agrees.
    pub key_from: Vec<String>,
    /// Where the key is unique.
    pub scope: Scope,
    /// How long the task holds it.
    pub hold: Hold,
    /// What a conflicting submit does.
    pub on_conflict: OnConflict,
}

/// What a store needs to apply a submit's uniqueness: the slot (one per
/// key and scope in the task's queue) and the conflict mode. The hold is
/// on the task's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueSlot {
    /// The slot's name within the queue: scope, handler (for the
    /// `handler` scope) and key, separated by U+001F (which no handler
    /// name contains).
    pub slot: String,
    /// What a conflicting submit does.
    pub on_conflict: OnConflict,
    /// The submitter's clock: a `for` hold is judged against it.
    pub now: Timestamp,
}

/// What a store does with a submit whose slot has a holder.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The holder no longer holds: the new task is written and takes the slot.
    Take,
    /// The holder takes the new payload (and due time): write this state
    /// of the holder, answer it as the submit's result.
    Replace(Box<Envelope>),
    /// Nothing is written; answer this error (`UNIQUE_HELD`).
    Conflict(EngineError),
    /// Nothing is written; answer the holder (`OnConflict::Existing`).
    Existing(Box<Envelope>),
}

impl UniqueRequest {
    /// Checks the request and works out the key: given, or derived from
    /// `payload`, which must then be JSON (whatever its content type says).
    pub fn key(&self, payload: &[u8]) -> Result<String, EngineError> {
        match (&self.key, self.key_from.is_empty()) {
            (Some(_), false) => Err(invalid(
                "unique.key",
                "give a key or key_from, not both".to_owned(),
            )),
            (None, true) => Err(invalid(
                "unique.key",
                "a unique submit needs a key or key_from".to_owned(),
            )),
            (Some(key), true) => {
                check_key(key)?;
                Ok(key.clone())
            }
            (None, false) => derive_key(&self.key_from, payload),
        }
    }

    /// Whether this is the case an idempotency key is: hold `Forever` in
    /// the queue's scope, a repeat answered with the holder
    /// (`OnConflict::Existing`). The engine submits it as that idempotency
    /// key when the key is short enough to be one, so the two spellings
    /// share one key.
    pub fn is_idempotency(&self) -> bool {
        self.scope == Scope::Queue
            && self.hold == Hold::Forever
            && self.on_conflict == OnConflict::Existing
    }

    /// The slot and the headers the task carries.
    pub fn apply(
        &self,
        key: String,
        handler_ref: &str,
        headers: &mut std::collections::BTreeMap<String, String>,
        now: Timestamp,
    ) -> UniqueSlot {
        let slot = slot_of(self.scope, handler_ref, &key);
        headers.insert(KEY_HEADER.to_owned(), key);
        headers.insert(SCOPE_HEADER.to_owned(), self.scope.as_str().to_owned());
        headers.insert(HOLD_HEADER.to_owned(), self.hold.to_string());
        UniqueSlot {
            slot,
            on_conflict: self.on_conflict,
            now,
        }
    }
}

/// The slot of `key` under `scope` for a task of `handler_ref`.
pub fn slot_of(scope: Scope, handler_ref: &str, key: &str) -> String {
    match scope {
        Scope::Queue => format!("queue\u{1f}{key}"),
        Scope::Handler => format!("handler\u{1f}{handler_ref}\u{1f}{key}"),
    }
}

/// The slot a stored task holds (or held), read from its headers; `None`
/// for a task without a unique key. A header that does not parse counts
/// as none.
pub fn slot_of_task(env: &Envelope) -> Option<String> {
    let key = env.headers.get(KEY_HEADER)?;
    let scope = env.headers.get(SCOPE_HEADER)?.parse().ok()?;
    Some(slot_of(scope, &env.handler_ref, key))
}

/// Whether `holder` still holds its slot at `now` (its own hold, from its
/// headers; a task without one holds nothing).
pub fn holds(holder: &Envelope, now: Timestamp) -> bool {
    holder
        .headers
        .get(HOLD_HEADER)
        .and_then(|h| h.parse::<Hold>().ok())
        .is_some_and(|hold| hold.holds(holder, now))
}

/// The conflict error naming `holder`.
pub fn held_by(holder: &Envelope) -> EngineError {
    EngineError::UniqueHeld {
        holder: holder.id,
        hold: holder.headers.get(HOLD_HEADER).cloned().unwrap_or_default(),
    }
}

/// What a submit of `task` (taking `unique`'s slot) does, the slot being
/// held by `holder` (read inside the same atomic step).
pub fn decide(holder: &Envelope, task: &Envelope, unique: &UniqueSlot) -> Decision {
    if holder.id == task.id || !holds(holder, unique.now) {
        return Decision::Take;
    }
    let waiting = holder.status == Status::Pending;
    match unique.on_conflict {
        OnConflict::Replace | OnConflict::Debounce if waiting => {
            let mut next = holder.clone();
            next.payload.clone_from(&task.payload);
            next.payload_content_type
                .clone_from(&task.payload_content_type);
            next.headers.clone_from(&task.headers);
            if unique.on_conflict == OnConflict::Debounce {
                next.next_attempt_at = task.next_attempt_at;
            }
            Decision::Replace(Box::new(next))
        }
        OnConflict::Existing => Decision::Existing(Box::new(holder.clone())),
        _ => Decision::Conflict(held_by(holder)),
    }
}

/// Whether dead task `task_id` may be redriven with its slot held by
/// `holder` at `now`: refused with `UNIQUE_HELD` when another task holds
/// it. A redrive checks every task it chose first and changes nothing
/// when one is refused.
pub fn may_return(task_id: TaskId, holder: &Envelope, now: Timestamp) -> Result<(), EngineError> {
    if holder.id != task_id && holds(holder, now) {
        return Err(held_by(holder));
    }
    Ok(())
}

fn check_key(key: &str) -> Result<(), EngineError> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(invalid(
            "unique.key",
            format!(
                "a unique key is 1 to {MAX_KEY_BYTES} bytes, not {}",
                key.len()
            ),
        ));
    }
    if key.chars().any(char::is_control) {
        return Err(invalid(
            "unique.key",
            "a unique key has no control characters".to_owned(),
        ));
    }
    Ok(())
}

/// `sha256:` and the hex SHA-256 of the canonical JSON array of the
/// values at `pointers` (object members sorted by name, no whitespace,
/// numbers as written).
fn derive_key(pointers: &[String], payload: &[u8]) -> Result<String, EngineError> {
    if pointers.len() > MAX_KEY_FIELDS {
        return Err(invalid(
            "unique.key_from",
            format!(
                "at most {MAX_KEY_FIELDS} fields make a key, not {}",
                pointers.len()
            ),
        ));
    }
    let value: serde_json::Value = serde_json::from_slice(payload).map_err(|e| {
        invalid(
            "unique.key_from",
            format!("the payload is not JSON, so no key can be derived from it: {e}"),
        )
    })?;
    let mut picked = Vec::with_capacity(pointers.len());
    for pointer in pointers {
        if !(pointer.is_empty() || pointer.starts_with('/')) {
            return Err(invalid(
                "unique.key_from",
                format!("{pointer:?} is no JSON pointer (one starts with '/')"),
            ));
        }
        let found = value.pointer(pointer).ok_or_else(|| {
            invalid(
                "unique.key_from",
                format!("the payload has nothing at {pointer:?}"),
            )
        })?;
        picked.push(found.clone());
    }
    let canonical = serde_json::Value::Array(picked).to_string();
    let digest = Sha256::digest(canonical.as_bytes());
    let mut key = String::with_capacity(7 + 64);
    key.push_str("sha256:");
    for byte in digest {
        key.push_str(&format!("{byte:02x}"));
    }
    Ok(key)
}

/// `INVALID_ARGUMENT` naming the field first, as the front ends expect.
fn invalid(field: &str, message: String) -> EngineError {
    EngineError::InvalidArgument(format!("{field}: {message}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn request(key_from: &[&str]) -> UniqueRequest {
        UniqueRequest {
            key_from: key_from.iter().map(|s| (*s).to_owned()).collect(),
            ..UniqueRequest::default()
        }
    }

    #[test]
    fn a_derived_key_ignores_member_order_and_whitespace() {
        let a = request(&["/customer", "/order/id"])
            .key(br#"{"order": {"id": 7, "x": 1}, "customer": {"b": 2, "a": 1}}"#)
            .unwrap();
        let b = request(&["/customer", "/order/id"])
            .key(br#"{"customer":{"a":1,"b":2},"order":{"id":7}}"#)
            .unwrap();
        assert_eq!(a, b);
        assert!(a.starts_with("sha256:") && a.len() == 71, "{a}");
        let other = request(&["/customer", "/order/id"])
            .key(br#"{"customer":{"a":1,"b":2},"order":{"id":8}}"#)
            .unwrap();
        assert_ne!(a, other);
    }

    #[test]
    fn bad_unique_requests_are_refused_with_the_field_named() {
        let cases: Vec<(UniqueRequest, &[u8], &str)> = vec![
            (request(&["/missing"]), br#"{"a":1}"#, "unique.key_from"),
            (request(&["a"]), br#"{"a":1}"#, "unique.key_from"),
            (request(&["/a"]), b"not json", "unique.key_from"),
            (UniqueRequest::default(), b"{}", "unique.key"),
            (
                UniqueRequest {
                    key: Some("k".into()),
                    ..request(&["/a"])
                },
                br#"{"a":1}"#,
                "unique.key",
            ),
            (
                UniqueRequest {
                    key: Some("k".repeat(MAX_KEY_BYTES + 1)),
                    ..UniqueRequest::default()
                },
                b"{}",
                "unique.key",
            ),
            (
                UniqueRequest {
                    key: Some("a\nb".into()),
                    ..UniqueRequest::default()
                },
                b"{}",
                "unique.key",
            ),
        ];
        for (req, payload, field) in cases {
            match req.key(payload) {
                Err(EngineError::InvalidArgument(m)) => {
                    assert!(m.starts_with(&format!("{field}: ")), "{req:?}: {m}");
                }
                other => panic!("{req:?}: {other:?}"),
            }
        }
        assert!(Hold::duration(0).is_err());
        assert!(Hold::duration(MAX_HOLD_MS + 1).is_err());
        assert!("for:-5".parse::<Hold>().is_err());
        assert!("sometimes".parse::<Hold>().is_err());
        assert!("table".parse::<Scope>().is_err());
        assert!("merge".parse::<OnConflict>().is_err());
    }

    #[test]
    fn conflict_modes_round_trip_and_only_one_case_is_an_idempotency_key() {
        for mode in [
            OnConflict::Return,
            OnConflict::Replace,
            OnConflict::Debounce,
            OnConflict::Existing,
        ] {
            assert_eq!(mode.as_str().parse::<OnConflict>().ok(), Some(mode));
        }
        let idempotency = UniqueRequest {
            key: Some("k".into()),
            hold: Hold::Forever,
            on_conflict: OnConflict::Existing,
            ..UniqueRequest::default()
        };
        assert!(idempotency.is_idempotency());
        for other in [
            UniqueRequest {
                scope: Scope::Handler,
                ..idempotency.clone()
            },
            UniqueRequest {
                hold: Hold::UntilSucceeded,
                ..idempotency.clone()
            },
            UniqueRequest {
                on_conflict: OnConflict::Return,
                ..idempotency.clone()
            },
        ] {
            assert!(!other.is_idempotency(), "{other:?}");
        }
    }

    #[test]
    fn holds_round_trip_through_their_text_form() {
        for hold in [
            Hold::UntilStarted,
            Hold::UntilFinished,
            Hold::UntilSucceeded,
            Hold::For(60_000),
            Hold::Forever,
        ] {
            assert_eq!(hold.to_string().parse::<Hold>().unwrap(), hold);
        }
    }

    #[test]
    fn slots_of_the_two_scopes_never_meet() {
        assert_ne!(
            slot_of(Scope::Queue, "h", "k"),
            slot_of(Scope::Handler, "h", "k")
        );
        // The separator can be in neither part: handler names are
        // `[a-z0-9._-]`, and a key with a control character is refused.
        assert!(rdq_envelope::validate_handler_ref("a\u{1f}b").is_err());
        let key = UniqueRequest {
            key: Some("b\u{1f}c".into()),
            ..UniqueRequest::default()
        };
        assert!(key.key(b"{}").is_err());
    }
}
