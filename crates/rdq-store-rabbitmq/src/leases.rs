//! Leases on a broker: the deliveries this process holds unacknowledged.
//!
//! A claim hands out a delivery the consumer received; until it is acked the
//! broker gives it to nobody else, so the unacked delivery **is** the lease,
//! held by this connection's channel. The table here maps each held task to
//! its delivery and its engine-level lease token (`claim_count` after the
//! claim), and is the compare-and-swap the SPI asks for: a settle removes
//! the entry only if its token matches, so of two reapers, or a reaper and a
//! late worker, exactly one wins and the other gets `LEASE_LOST`.
//!
//! A settle for a task this process holds no lease on cannot be told apart,
//! on a broker, from a settle for a task that does not exist. The table
//! remembers the ids that passed through this store recently (submitted or
//! claimed, the last [`SEEN_CAPACITY`]): those answer `LEASE_LOST`, others
//! `TASK_NOT_FOUND`.
//!
//! It also remembers the tasks this process settled as SUCCEEDED (the last
//! [`SEEN_CAPACITY`]). A broker that dies just after it took an ack can
//! come back with the message (the ack never reached its disk), and the
//! task would run again. A delivery of a task settled here is acked and
//! dropped instead (`Core::accept`); another process, which never saw the
//! settle, still gets it: at least once.
//!
//! And it remembers the deliveries whose successor (a retry, a deferral, a
//! dead letter) it published without the broker confirming the
//! original's ack: by task id and the claim count the delivered message
//! carried, which its successor does not. If that original comes back
//! here, it is acked and dropped rather than closed a second time (which
//! would publish a second successor).

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use rdq_engine::LeaseToken;
use rdq_envelope::{Envelope, TaskId, Timestamp};

use crate::queue::{Held, QueueState};

/// How many recently seen task ids the store remembers.
pub const SEEN_CAPACITY: usize = 200_000;

/// One held delivery.
pub struct Lease {
    /// The claim's token; a settle must present it.
    pub token: LeaseToken,
    /// The task as the engine last wrote it (IN_FLIGHT).
    pub envelope: Envelope,
    /// The unacked delivery: acking it ends the lease. When its
    /// subscription ends the broker requeues it, and the lease is gone.
    pub delivery: Held,
    /// The queue it came from.
    pub queue: Arc<QueueState>,
    /// The caller's clock at the claim, and the local instant it was read:
    /// together they estimate the caller's "now" at settle time.
    pub claimed_now: Timestamp,
    /// See `claimed_now`.
    pub claimed_at: Instant,
    /// The claim count the delivered message carried (before this claim):
    /// with the id, what tells this delivery from its successor.
    pub message_claims: u32,
}

impl Lease {
    /// The caller's clock now, estimated from the claim.
    pub fn estimated_now(&self) -> Timestamp {
        let elapsed = u64::try_from(self.claimed_at.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.claimed_now.plus_ms(elapsed)
    }
}

/// A set that keeps its last [`SEEN_CAPACITY`] members.
struct Recent<T> {
    members: HashSet<T>,
    order: VecDeque<T>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Self {
            members: HashSet::new(),
            order: VecDeque::new(),
        }
    }
}

impl<T: Hash + Eq + Copy> Recent<T> {
    fn insert(&mut self, member: T) {
        if self.members.insert(member) {
            self.order.push_back(member);
            if self.order.len() > SEEN_CAPACITY
                && let Some(old) = self.order.pop_front()
            {
                self.members.remove(&old);
            }
        }
    }

    fn contains(&self, member: &T) -> bool {
        self.members.contains(member)
    }
}

/// Held deliveries plus the memory of recent ids.
#[derive(Default)]
pub struct Leases {
    /// Held deliveries by task id.
    pub held: HashMap<TaskId, Lease>,
    seen: Recent<TaskId>,
    succeeded: Recent<TaskId>,
    superseded: Recent<(TaskId, u32)>,
}

impl Leases {
    /// Remembers that `id` passed through this store.
    pub fn saw(&mut self, id: TaskId) {
        self.seen.insert(id);
    }

    /// True when `id` passed through this store recently.
    pub fn has_seen(&self, id: TaskId) -> bool {
        self.seen.contains(&id)
    }

    /// Remembers that this process settled `id` as SUCCEEDED.
    pub fn succeeded(&mut self, id: TaskId) {
        self.succeeded.insert(id);
    }

    /// True when this process settled `id` as SUCCEEDED recently.
    pub fn has_succeeded(&self, id: TaskId) -> bool {
        self.succeeded.contains(&id)
    }

    /// Remembers that the delivery of `id` carrying `claims` has a published
    /// successor, though its own ack was not confirmed.
    pub fn superseded(&mut self, id: TaskId, claims: u32) {
        self.superseded.insert((id, claims));
    }

    /// True when a delivery of `id` carrying `claims` was superseded here.
    pub fn is_superseded(&self, id: TaskId, claims: u32) -> bool {
        self.superseded.contains(&(id, claims))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_superseded_delivery_is_told_from_its_successor_by_its_claims() {
        let mut leases = Leases::default();
        let id = TaskId::from_u128(7);
        leases.superseded(id, 3);
        assert!(leases.is_superseded(id, 3));
        assert!(
            !leases.is_superseded(id, 4),
            "the successor carries more claims"
        );
        assert!(!leases.is_superseded(TaskId::from_u128(8), 3));
        assert!(!leases.has_succeeded(id));
    }

    #[test]
    fn the_memory_keeps_the_most_recent_members() {
        let mut recent = Recent::default();
        for n in 0..=SEEN_CAPACITY {
            recent.insert(n);
        }
        assert!(!recent.contains(&0), "the oldest is forgotten");
        assert!(recent.contains(&1) && recent.contains(&SEEN_CAPACITY));
        recent.insert(SEEN_CAPACITY);
        assert_eq!(
            recent.order.len(),
            SEEN_CAPACITY,
            "a repeat is not counted twice"
        );
    }
}
