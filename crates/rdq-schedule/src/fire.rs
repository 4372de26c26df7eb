//! A fire's identity: its idempotency key and the headers its task carries.
//!
//! Submitting a fire with [`idempotency_key`] is the leaderless "fire once"
//! step: every node that plans the same due time submits the same key, and
//! the store keeps the first task.

use std::collections::BTreeMap;

use rdq_envelope::Timestamp;
use sha2::{Digest as _, Sha256};

use crate::plan::Fire;

/// Header naming the schedule that submitted the task.
pub const SCHEDULE_HEADER: &str = "rdq.schedule";
/// Header holding the fire's logical due time, `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub const SCHEDULE_DUE_HEADER: &str = "rdq.schedule_due";
/// Header set to `true` on a backfilled (caught-up) fire; absent otherwise.
pub const BACKFILLED_HEADER: &str = "rdq.backfilled";

/// The start of every fire's idempotency key.
pub const IDEMPOTENCY_KEY_PREFIX: &str = "rdq.schedule:";

/// Longest idempotency key a submit takes, in characters (rdq-app's limit).
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// Longest schedule name a key spells out in full: the key's prefix (13),
/// the name, `:` and the longest due time (15 characters, `-62167219200000`)
/// fit in [`MAX_IDEMPOTENCY_KEY_LEN`].
pub const MAX_NAME_IN_KEY: usize = 226;

/// How much of a longer name its key keeps before the hash.
const NAME_PREFIX_IN_KEY: usize = 128;

/// The idempotency key of the fire of schedule `name` due at `due_ms`:
/// `rdq.schedule:{name}:{due_ms}`.
///
/// A name over [`MAX_NAME_IN_KEY`] bytes would overflow the key's limit, so
/// it is written as its first 128 bytes, `~`, and the SHA-256 of the whole
/// name in lowercase hex. `~` is not a name character, so such a key never
/// equals the key of another, shorter name.
pub fn idempotency_key(name: &str, due_ms: i64) -> String {
    if name.len() <= MAX_NAME_IN_KEY {
        return format!("{IDEMPOTENCY_KEY_PREFIX}{name}:{due_ms}");
    }
    let digest = Sha256::digest(name.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    // Names are ASCII, but cut on a character boundary whatever is passed.
    let mut cut = NAME_PREFIX_IN_KEY;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{IDEMPOTENCY_KEY_PREFIX}{}~{hex}:{due_ms}", &name[..cut])
}

/// The reserved headers of the task fire `fire` of schedule `name`
/// submits, to be merged with the template's own.
pub fn fire_headers(name: &str, fire: &Fire) -> BTreeMap<String, String> {
    let mut headers = BTreeMap::new();
    headers.insert(SCHEDULE_HEADER.to_owned(), name.to_owned());
    headers.insert(SCHEDULE_DUE_HEADER.to_owned(), due_text(fire.due_ms));
    if fire.backfilled {
        headers.insert(BACKFILLED_HEADER.to_owned(), "true".to_owned());
    }
    headers
}

/// The envelope's spelling of a due time; due times always lie in its range,
/// and one that does not is clamped to it rather than refused.
fn due_text(due_ms: i64) -> String {
    let ts = Timestamp::from_unix_ms(due_ms).unwrap_or_else(|| {
        if due_ms < 0 {
            Timestamp::EPOCH.minus_ms(due_ms.unsigned_abs())
        } else {
            Timestamp::EPOCH.plus_ms(due_ms.unsigned_abs())
        }
    });
    ts.to_string()
}
