//! Queue policies cached in memory, trusted only while notifications flow.
//!
//! The engine reads a queue's policy at every claim and settle; asking the
//! database each time would add a round trip to every one. Instead each node
//! keeps the policies it read, and drops them all when any node stores a
//! policy (`put_config` sends a notification in the same transaction) or when
//! its listening connection drops (notifications may have been missed). While
//! the node is not listening it reads every policy from the database, so the
//! cache can make a change late by at most the notification's delivery time,
//! and never indefinitely.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use rdq_engine::QueueConfig;

/// The cache; see the module documentation.
#[derive(Default)]
pub(crate) struct PolicyCache {
    listening: AtomicBool,
    /// Bumped by every invalidation, so a read that raced one is not cached.
    epoch: AtomicU64,
    policies: Mutex<HashMap<String, Option<QueueConfig>>>,
}

impl PolicyCache {
    /// The cached policy of `queue` (`Some(None)`: known to have none), if
    /// the cache may be trusted now.
    pub(crate) fn get(&self, queue: &str) -> Option<Option<QueueConfig>> {
        if !self.listening.load(Ordering::Acquire) {
            return None;
        }
        self.policies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(queue)
            .cloned()
    }

    /// Call before reading a policy from the database; pass the result to
    /// [`PolicyCache::insert`].
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Caches what a read that began at `epoch` found, unless an
    /// invalidation happened since (the read may predate the change).
    pub(crate) fn insert(&self, queue: &str, policy: Option<QueueConfig>, epoch: u64) {
        if !self.listening.load(Ordering::Acquire) {
            return;
        }
        let mut policies = self.policies.lock().unwrap_or_else(PoisonError::into_inner);
        if self.epoch.load(Ordering::Acquire) == epoch {
            policies.insert(queue.to_owned(), policy);
        }
    }

    /// Forgets every cached policy.
    pub(crate) fn invalidate(&self) {
        let mut policies = self.policies.lock().unwrap_or_else(PoisonError::into_inner);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        policies.clear();
    }

    /// Whether notifications are flowing (the cache may be used).
    pub(crate) fn set_listening(&self, listening: bool) {
        self.invalidate();
        self.listening.store(listening, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_cached_while_not_listening() {
        let cache = PolicyCache::default();
        let epoch = cache.epoch();
        cache.insert("q", None, epoch);
        assert_eq!(cache.get("q"), None);
    }

    #[test]
    fn a_read_that_raced_an_invalidation_is_not_cached() {
        let cache = PolicyCache::default();
        cache.set_listening(true);
        let epoch = cache.epoch();
        cache.invalidate();
        cache.insert("q", Some(QueueConfig::default()), epoch);
        assert_eq!(cache.get("q"), None);
        let epoch = cache.epoch();
        cache.insert("q", Some(QueueConfig::default()), epoch);
        assert_eq!(cache.get("q"), Some(Some(QueueConfig::default())));
        cache.set_listening(false);
        assert_eq!(cache.get("q"), None, "losing the listener drops the cache");
    }
}
