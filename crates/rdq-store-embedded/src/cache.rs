//! What the store remembers in memory to spare itself work: envelopes it
//! would otherwise decode again from bytes it wrote itself, and queue
//! configurations it would otherwise parse again.
//!
//! Every cache is a shortcut only. Every entry is checked against the row
//! (lease fencing, or the row's exact bytes) before it is used, so a stale
//! entry costs a decode, never a wrong answer.

// foldhash: every claim and settle hashes task ids several times; seeded per
// process, like std's SipHash, at a fraction of its cost.
use foldhash::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rdq_engine::QueueConfig;
use rdq_engine::machine::LeaseToken;
use rdq_envelope::{Envelope, Status, TaskId};

/// Most envelopes [`LeaseCache`] keeps; claims beyond it are looked up in
/// the database when settled, as without the cache.
const LEASE_CACHE_CAPACITY: usize = 65_536;

/// The envelopes this process handed out by claim, by task id, with their
/// rows' `seq`, until their settle or extension takes them: a settle's
/// lease check ([`rdq_engine::Store::leased`]) then reads no row and
/// decodes no envelope, and its write finds the row by `seq` rather than
/// through the id index. An entry is exactly what [`rdq_engine::TaskLookup::get`]
/// answers for an in-flight task (the row keeps the PENDING envelope; both
/// replay the same claim). The cache is only a shortcut: an entry left
/// behind by a task deleted, purged or reaped in the meantime fails the
/// write's lease fencing, exactly like a stale lease does (`LEASE_LOST` or
/// `TASK_NOT_FOUND`), and a write by `seq` also names the id, so a row
/// that is not the task's is never written.
pub(crate) struct LeaseCache(Mutex<HashMap<TaskId, Lease>>);

/// Entries [`LeaseCache`]'s map has room for from the start. The map sees
/// an insert and a remove per task; held near its load limit, its removals
/// leave tombstones and it reallocated itself every claim or two (about
/// 3 % of a `Work` stream's CPU, docs/benchmarks.md). Sparse, a removal
/// mostly leaves its slot empty.
const LEASE_CACHE_ROOM: usize = 4096;

impl Default for LeaseCache {
    fn default() -> Self {
        Self(Mutex::new(HashMap::with_capacity_and_hasher(
            LEASE_CACHE_ROOM,
            foldhash::fast::RandomState::default(),
        )))
    }
}

/// A claim this process handed out: the envelope until the lease check
/// takes it, and the row. The envelope is boxed to keep the map's entries
/// small (its room costs little, a rehash moves little).
pub(crate) struct Lease {
    pub(crate) env: Option<Box<Envelope>>,
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
                    env: Some(Box::new(env.clone())),
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
            Some(env) if LeaseToken::current(env) == Some(token) => {
                lease.env.take().map(|env| *env)
            }
            _ => None,
        }
    }

    /// Forgets these tasks, answering each one's row `seq` if it was known.
    pub(crate) fn forget(&self, ids: impl Iterator<Item = TaskId>) -> Vec<Option<i64>> {
        let mut map = self.lock();
        ids.map(|id| map.remove(&id).map(|l| l.seq)).collect()
    }
}

/// Most envelope bytes [`PendingCache`] keeps (each entry holds the bytes
/// and the decoded envelope, so it takes about twice this).
const PENDING_CACHE_BYTES: usize = 16 << 20;

/// How often a full cache may look for entries past their age.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// The room an envelope is assumed to need when asking whether there is any.
const ROOM_BYTES: usize = 4096;

/// How long an entry may wait for its claim before a full cache drops it
/// (a task due much later, or one another process claimed).
const PENDING_CACHE_AGE: Duration = Duration::from_secs(60);

/// The PENDING envelopes this process wrote (submitted, or settled back to
/// PENDING), by task id, until a claim takes them: a claim then finishes the
/// envelope it already has instead of decoding the row's bytes. An entry is
/// used only when its bytes are exactly the row's, so an entry left behind
/// by a task rewritten, deleted or purged in the meantime is never used.
/// When full, the cache drops entries older than a minute and otherwise
/// keeps what it has: queues are claimed oldest first, so the oldest
/// entries are the next ones used.
pub(crate) struct PendingCache(Mutex<Pending>);

struct Pending {
    map: HashMap<TaskId, Kept>,
    bytes: usize,
    /// Most entries (`EmbeddedOptions::claim_cache`).
    capacity: usize,
    /// When a full cache last looked for old entries (at most once a
    /// second: the look visits every entry).
    swept: Option<Instant>,
}

struct Kept {
    bytes: Vec<u8>,
    env: Envelope,
    at: Instant,
}

impl Pending {
    fn full(&self, more: usize) -> bool {
        self.map.len() >= self.capacity || self.bytes + more > PENDING_CACHE_BYTES
    }

    fn remove(&mut self, id: &TaskId) -> Option<Kept> {
        let kept = self.map.remove(id)?;
        self.bytes -= kept.bytes.len();
        Some(kept)
    }
}

impl PendingCache {
    /// A cache of at most `capacity` envelopes (0: none).
    pub(crate) fn new(capacity: usize) -> Self {
        Self(Mutex::new(Pending {
            map: HashMap::default(),
            bytes: 0,
            capacity,
            swept: None,
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the cache takes new entries now (so a writer need not copy
    /// what it would keep).
    pub(crate) fn has_room(&self) -> bool {
        let p = self.lock();
        // Room for a typical envelope, or a sweep due that may make some.
        p.capacity > 0
            && (!p.full(ROOM_BYTES) || p.swept.is_none_or(|at| at.elapsed() >= SWEEP_INTERVAL))
    }

    /// Copies of the PENDING envelopes among `writes` (with their bytes)
    /// for [`PendingCache::keep`] once they are stored; none when the cache
    /// has no room, so a full cache costs a write no copy.
    pub(crate) fn copies<'a>(
        &self,
        writes: impl Iterator<Item = (&'a Vec<u8>, &'a Envelope)>,
    ) -> Vec<Option<(Vec<u8>, Envelope)>> {
        let room = self.has_room();
        writes
            .map(|(bytes, env)| {
                (room && env.status == Status::Pending).then(|| (bytes.clone(), env.clone()))
            })
            .collect()
    }

    /// Remembers envelopes just written with these exact bytes, as far as
    /// there is room.
    pub(crate) fn keep(&self, written: impl IntoIterator<Item = (Vec<u8>, Envelope)>) {
        let mut p = self.lock();
        let now = Instant::now();
        for (bytes, env) in written {
            if p.full(bytes.len()) {
                if p.swept
                    .is_some_and(|at| now.duration_since(at) < SWEEP_INTERVAL)
                {
                    return;
                }
                p.swept = Some(now);
                p.map
                    .retain(|_, k| now.duration_since(k.at) < PENDING_CACHE_AGE);
                p.bytes = p.map.values().map(|k| k.bytes.len()).sum();
                if p.full(bytes.len()) {
                    return;
                }
            }
            p.remove(&env.id);
            p.bytes += bytes.len();
            p.map.insert(
                env.id,
                Kept {
                    bytes,
                    env,
                    at: now,
                },
            );
        }
    }

    /// The envelope `bytes` (the row of `id`) decode to, when it was kept
    /// with exactly those bytes. The entry leaves the cache either way.
    pub(crate) fn take(&self, id: TaskId, bytes: &[u8]) -> Option<Envelope> {
        let kept = self.lock().remove(&id)?;
        (kept.bytes == bytes).then_some(kept.env)
    }

    /// Forgets one task (deleted).
    pub(crate) fn forget(&self, id: TaskId) {
        self.lock().remove(&id);
    }

    /// Forgets everything (a purge of PENDING tasks).
    pub(crate) fn clear(&self) {
        let mut p = self.lock();
        p.map.clear();
        p.bytes = 0;
    }
}

/// Most queue configurations [`ConfigCache`] keeps; past it, it starts
/// afresh.
const CONFIG_CACHE_CAPACITY: usize = 1024;

/// Queue configurations parsed from their stored text, by queue. Every
/// claim and settle reads its queue's configuration: the row is still read
/// each time (another process may have changed it), but text this process
/// has parsed before is not parsed again.
#[derive(Default)]
pub(crate) struct ConfigCache(Mutex<HashMap<String, (Vec<u8>, QueueConfig)>>);

impl ConfigCache {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, (Vec<u8>, QueueConfig)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The configuration `text` (the stored row of `queue`) stands for.
    pub(crate) fn parse(&self, queue: &str, text: &[u8]) -> serde_json::Result<QueueConfig> {
        if let Some((seen, config)) = self.lock().get(queue)
            && seen == text
        {
            return Ok(config.clone());
        }
        let config: QueueConfig = serde_json::from_slice(text)?;
        let mut cached = self.lock();
        if cached.len() >= CONFIG_CACHE_CAPACITY && !cached.contains_key(queue) {
            cached.clear();
        }
        cached.insert(queue.to_owned(), (text.to_vec(), config.clone()));
        Ok(config)
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
        let cache = PendingCache::new(8);
        let (bytes, env) = pending();
        cache.keep([(bytes.clone(), env.clone())]);
        let mut other = bytes.clone();
        other.push(b' ');
        assert_eq!(cache.take(TaskId::generate(), &bytes), None);
        assert_eq!(cache.take(env.id, &bytes), Some(env.clone()));
        assert_eq!(cache.take(env.id, &bytes), None);
        // Other bytes than kept: not used, and gone.
        cache.keep([(bytes.clone(), env.clone())]);
        assert_eq!(cache.take(env.id, &other), None);
        assert_eq!(cache.take(env.id, &bytes), None);
        assert_eq!(cache.lock().bytes, 0);
        cache.keep([(bytes.clone(), env.clone())]);
        cache.forget(env.id);
        assert_eq!(cache.take(env.id, &bytes), None);
        cache.keep([(bytes.clone(), env.clone())]);
        cache.clear();
        assert_eq!(cache.take(env.id, &bytes), None);
        // None at all.
        let none = PendingCache::new(0);
        assert!(!none.has_room());
        none.keep([(bytes.clone(), env.clone())]);
        assert_eq!(none.take(env.id, &bytes), None);
    }

    #[test]
    fn a_full_cache_keeps_what_it_has_and_drops_only_old_entries() {
        const CAPACITY: usize = 1_000;
        let cache = PendingCache::new(CAPACITY);
        let (bytes, env) = pending();
        let first = env.id;
        cache.keep([(bytes.clone(), env.clone())]);
        cache.keep((1..CAPACITY).map(|_| {
            let mut e = env.clone();
            e.id = TaskId::generate();
            (e.encode(), e)
        }));
        assert_eq!(cache.lock().map.len(), CAPACITY);
        // Full of young entries: the new one is not kept, the old ones stay,
        // and the cache says so (until a second has passed).
        let (more_bytes, more) = pending();
        cache.keep([(more_bytes.clone(), more.clone())]);
        assert!(!cache.has_room());
        assert_eq!(cache.take(more.id, &more_bytes), None);
        assert_eq!(cache.take(first, &bytes), Some(env.clone()));
        assert!(cache.has_room());
        cache.keep([(bytes.clone(), env.clone())]);
        assert_eq!(cache.lock().map.len(), CAPACITY);
        // Entries past their age go at the next look.
        let old = Instant::now().checked_sub(PENDING_CACHE_AGE).unwrap();
        cache.lock().map.values_mut().for_each(|k| k.at = old);
        cache.lock().swept = Some(old);
        assert!(cache.has_room());
        cache.keep([(more_bytes.clone(), more.clone())]);
        assert_eq!(cache.lock().map.len(), 1);
        assert_eq!(cache.lock().bytes, more_bytes.len());
        assert_eq!(cache.take(more.id, &more_bytes), Some(more));
        assert_eq!(cache.take(first, &bytes), None);
        assert_eq!(cache.lock().bytes, 0);
    }
}
