//! What processes sharing one Redis tell each other, over one pub/sub
//! channel (`PREFIX:events`): a queue's policy changed (`c:QUEUE`), new
//! work was stored (`w:ORIGIN`), or running tasks were asked to stop
//! (`x:ORIGIN:ID,ID…`, relayed to [`Events::cancels`]).
//!
//! The engine reads a queue's policy at every claim and settle; asking
//! Redis each time would add a round trip to every one. Instead each
//! process keeps the policies it read, and forgets one when any process
//! announces a change to it, or all of them when its subscription drops
//! (announcements may have been missed). While not subscribed it reads
//! every policy from Redis, and no cached policy is older than
//! [`MAX_AGE`] whatever happens, so a change is late by at most the
//! announcement's delivery, and never by more than that bound.
//!
//! Work announcements wake this process's idle workers when another
//! process stored due work ([`rdq_engine::Store::work_signal`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rdq_engine::QueueConfig;
use rdq_envelope::TaskId;
use tokio::sync::Notify;

use crate::Shared;

/// Capacity of the channel of cancel requests ([`Events::cancels`]).
const CANCEL_CHANNEL: usize = 4096;

/// The longest a cached policy is trusted without reading it again.
const MAX_AGE: Duration = Duration::from_secs(5);

/// The cache and the wake-up signal; see the module documentation.
pub(crate) struct Events {
    /// This process in work announcements, to skip its own.
    pub(crate) origin: String,
    /// Signalled when another process stored work.
    pub(crate) work: Arc<Notify>,
    /// Running tasks asked to stop, by this process's engine or announced
    /// by another process.
    pub(crate) cancels: tokio::sync::broadcast::Sender<TaskId>,
    listening: AtomicBool,
    /// Bumped by every invalidation, so a read that raced one is not cached.
    epoch: AtomicU64,
    policies: Mutex<HashMap<String, (Option<QueueConfig>, Instant)>>,
}

impl Events {
    /// A cache with nothing in it, trusted once subscribed.
    pub(crate) fn new(origin: String) -> Self {
        Self {
            origin,
            work: Arc::new(Notify::new()),
            cancels: tokio::sync::broadcast::channel(CANCEL_CHANNEL).0,
            listening: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            policies: Mutex::new(HashMap::new()),
        }
    }

    /// The cached policy of `queue` (`Some(None)`: known to have none), if
    /// the cache may be trusted now.
    pub(crate) fn cached(&self, queue: &str) -> Option<Option<QueueConfig>> {
        if !self.listening.load(Ordering::Acquire) {
            return None;
        }
        let policies = self.policies.lock().unwrap_or_else(PoisonError::into_inner);
        match policies.get(queue) {
            Some((policy, read_at)) if read_at.elapsed() < MAX_AGE => Some(policy.clone()),
            _ => None,
        }
    }

    /// Call before reading a policy from Redis; pass the result to
    /// [`Events::insert`].
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Caches what a read that began at `epoch` found, unless an
    /// invalidation happened since.
    pub(crate) fn insert(&self, queue: &str, policy: Option<QueueConfig>, epoch: u64) {
        if !self.listening.load(Ordering::Acquire) {
            return;
        }
        let mut policies = self.policies.lock().unwrap_or_else(PoisonError::into_inner);
        if self.epoch.load(Ordering::Acquire) == epoch {
            policies.insert(queue.to_owned(), (policy, Instant::now()));
        }
    }

    /// Forgets the cached policy of `queue`.
    pub(crate) fn forget(&self, queue: &str) {
        let mut policies = self.policies.lock().unwrap_or_else(PoisonError::into_inner);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        policies.remove(queue);
    }

    fn set_listening(&self, listening: bool) {
        let mut policies = self.policies.lock().unwrap_or_else(PoisonError::into_inner);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        policies.clear();
        self.listening.store(listening, Ordering::Release);
    }

    fn heard(&self, message: &str) {
        if let Some(queue) = message.strip_prefix("c:") {
            self.forget(queue);
        } else if message
            .strip_prefix("w:")
            .is_some_and(|origin| origin != self.origin)
        {
            self.work.notify_waiters();
        } else if let Some((origin, ids)) = message
            .strip_prefix("x:")
            .and_then(|rest| rest.split_once(':'))
            && origin != self.origin
        {
            for id in ids.split(',').filter_map(TaskId::parse) {
                // No receiver is fine: nobody here holds the task.
                let _ = self.cancels.send(id);
            }
        }
    }
}

/// Listens on the channel until the task is aborted, subscribing again
/// (with backoff) whenever the subscription drops.
pub(crate) async fn listen(shared: Arc<Shared>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match subscribe(&shared).await {
            Ok(mut pubsub) => {
                shared.events.set_listening(true);
                backoff = Duration::from_millis(100);
                let mut messages = pubsub.on_message();
                while let Some(msg) = messages.next().await {
                    if let Ok(text) = msg.get_payload::<String>() {
                        shared.events.heard(&text);
                    }
                }
                drop(messages);
                shared.events.set_listening(false);
                tracing::debug!("the Redis event subscription dropped");
            }
            Err(e) => tracing::debug!(error = %e, "cannot subscribe to Redis events"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

async fn subscribe(shared: &Shared) -> redis::RedisResult<redis::aio::PubSub> {
    // On a cluster too: classic pub/sub reaches every node's subscribers.
    let client = shared.options.tls.client(shared.options.url.as_str())?;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(shared.keys.channel()).await?;
    Ok(pubsub)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_cached_while_not_listening() {
        let events = Events::new("me".into());
        let epoch = events.epoch();
        events.insert("q", None, epoch);
        assert_eq!(events.cached("q"), None);
    }

    #[test]
    fn an_announced_change_or_a_raced_read_is_not_served() {
        let events = Events::new("me".into());
        events.set_listening(true);
        let epoch = events.epoch();
        events.insert("q", Some(QueueConfig::default()), epoch);
        assert_eq!(events.cached("q"), Some(Some(QueueConfig::default())));
        events.heard("c:q");
        assert_eq!(events.cached("q"), None);
        let epoch = events.epoch();
        events.heard("c:other");
        events.insert("q", None, epoch);
        assert_eq!(events.cached("q"), None, "the read raced an invalidation");
        events.set_listening(false);
        assert_eq!(events.cached("q"), None);
    }
}
