//! What the store remembers in memory to spare itself work: envelopes it
//! would otherwise decode again from bytes it wrote itself.
//!
//! Both caches are shortcuts only. Every entry is checked against the row
//! (lease fencing, or the row's exact bytes) before it is used, so a stale
//! entry costs a decode, never a wrong answer.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use rdq_engine::machine::LeaseToken;
use rdq_envelope::{Envelope, TaskId};

/// Most envelopes [`LeaseCache`] keeps; claims beyond it are looked up in
/// the database when settled, as without the cache.
const LEASE_CACHE_CAPACITY: usize = 65_536;

/// The envelopes this process handed out by claim, by task id, with their
/// rows' `seq`, until their settle or extension takes them: a settle's
/// lease check ([`rdq_engine::Store::leased`]) then reads no row and
/// decodes no envelope, and its write finds the row by `seq` rather than
/// through the id index. An entry is exactly what [`rdq_engine::Store::get`]
/// answers for an in-flight task (the row keeps the PENDING envelope; both
/// replay the same claim). The cache is only a shortcut: an entry left
/// behind by a task deleted, purged or reaped in the meantime fails the
/// write's lease fencing, exactly like a stale lease does (`LEASE_LOST` or
/// `TASK_NOT_FOUND`), and a write by `seq` also names the id, so a row
/// that is not the task's is never written.
#[derive(Default)]
pub(crate) struct LeaseCache(Mutex<HashMap<TaskId, Lease>>);

/// A claim this process handed out: the envelope until the lease check
/// takes it, and the row.
pub(crate) struct Lease {
    pub(crate) env: Option<Envelope>,
    pub(crate) seq: i64,
}

impl LeaseCache {
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<TaskId, Lease>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers claimed envelopes with their rows' `seq`.
    pub(crate) fn keep<'a>(&self, claimed: impl IntoIterator<Item = (&'a Envelope, i64)>) {
        let mut map = self.lock();
        for (env, seq) in claimed {
            if map.len() >= LEASE_CACHE_CAPACITY {
                break;
            }
            map.insert(
                env.id,
                Lease {
                    env: Some(env.clone()),
                    seq,
                },
            );
        }
    }

    /// The cached envelope of `id` if it is still under `token`'s claim
    /// (the row's `seq` stays for the write that follows).
    pub(crate) fn take(&self, id: TaskId, token: LeaseToken) -> Option<Envelope> {
        let mut map = self.lock();
        let lease = map.get_mut(&id)?;
        match &lease.env {
            Some(env) if LeaseToken::current(env) == Some(token) => lease.env.take(),
            _ => None,
        }
    }

    /// Forgets these tasks, answering each one's row `seq` if it was known.
    pub(crate) fn forget(&self, ids: impl Iterator<Item = TaskId>) -> Vec<Option<i64>> {
        let mut map = self.lock();
        ids.map(|id| map.remove(&id).map(|l| l.seq)).collect()
    }
}

/// Most envelopes [`PendingCache`] keeps.
const PENDING_CACHE_CAPACITY: usize = 65_536;

/// Most envelope bytes [`PendingCache`] keeps (each entry holds the bytes
/// and the decoded envelope, so it takes about twice this).
const PENDING_CACHE_BYTES: usize = 32 << 20;

/// The PENDING envelopes this process wrote (submitted, or settled back to
/// PENDING), by task id, until a claim takes them: a claim then finishes the
/// envelope it already has instead of decoding the row's bytes. An entry is
/// used only when its bytes are exactly the row's, so an entry left behind
/// by a task rewritten, deleted or purged in the meantime is never used;
/// when the cache is full it is emptied and fills again.
#[derive(Default)]
pub(crate) struct PendingCache(Mutex<Pending>);

#[derive(Default)]
struct Pending {
    map: HashMap<TaskId, (Vec<u8>, Envelope)>,
    bytes: usize,
}

impl PendingCache {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers envelopes just written with these exact bytes.
    pub(crate) fn keep(&self, written: impl IntoIterator<Item = (Vec<u8>, Envelope)>) {
        let mut p = self.lock();
        for (bytes, env) in written {
            if p.map.len() >= PENDING_CACHE_CAPACITY || p.bytes + bytes.len() > PENDING_CACHE_BYTES
            {
                p.map.clear();
                p.bytes = 0;
            }
            p.bytes += bytes.len();
            if let Some((old, _)) = p.map.insert(env.id, (bytes, env)) {
                p.bytes -= old.len();
            }
        }
    }

    /// The envelope `bytes` (the row of `id`) decode to, when it was kept
    /// with exactly those bytes; the entry leaves the cache.
    pub(crate) fn take(&self, id: TaskId, bytes: &[u8]) -> Option<Envelope> {
        let mut p = self.lock();
        match p.map.get(&id) {
            Some((kept, _)) if kept.as_slice() == bytes => {
                let (kept, env) = p.map.remove(&id)?;
                p.bytes -= kept.len();
                Some(env)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use rdq_envelope::Timestamp;

    fn pending() -> (Vec<u8>, Envelope) {
        let now = Timestamp::from_unix_ms(1_800_000_000_000).unwrap();
        let env = Envelope::new("q", "h", b"{}", "application/json", now);
        (env.encode(), env)
    }

    #[test]
    fn an_entry_is_used_once_and_only_for_its_exact_bytes() {
        let cache = PendingCache::default();
        let (bytes, env) = pending();
        cache.keep([(bytes.clone(), env.clone())]);
        let mut other = bytes.clone();
        other.push(b' ');
        assert_eq!(cache.take(env.id, &other), None);
        assert_eq!(cache.take(TaskId::generate(), &bytes), None);
        assert_eq!(cache.take(env.id, &bytes), Some(env.clone()));
        assert_eq!(cache.take(env.id, &bytes), None);
        assert_eq!(cache.lock().bytes, 0);
    }

    #[test]
    fn a_full_cache_empties_and_fills_again() {
        let cache = PendingCache::default();
        let (bytes, env) = pending();
        let first = env.id;
        cache.keep([(bytes.clone(), env.clone())]);
        cache.keep((1..PENDING_CACHE_CAPACITY).map(|_| {
            let mut e = env.clone();
            e.id = TaskId::generate();
            (e.encode(), e)
        }));
        assert_eq!(cache.lock().map.len(), PENDING_CACHE_CAPACITY);
        let (more_bytes, more) = pending();
        cache.keep([(more_bytes.clone(), more.clone())]);
        assert_eq!(cache.lock().map.len(), 1);
        assert_eq!(cache.lock().bytes, more_bytes.len());
        assert_eq!(cache.take(first, &bytes), None);
        assert_eq!(cache.take(more.id, &more_bytes), Some(more));
    }
}
