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
//! [`SEEN_CAPACITY`]). An AMQP ack has no answer: a broker that dies just
//! after one can come back with the message (the ack never reached its
//! disk), and the task would run again. A redelivery of a task settled
//! here is acked and dropped instead (`Core::accept`); another process,
//! which never saw the settle, still gets it: at least once.

use std::collections::{HashMap, HashSet, VecDeque};
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
}

impl Lease {
    /// The caller's clock now, estimated from the claim.
    pub fn estimated_now(&self) -> Timestamp {
        let elapsed = u64::try_from(self.claimed_at.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.claimed_now.plus_ms(elapsed)
    }
}

/// Held deliveries plus the memory of recent ids.
#[derive(Default)]
pub struct Leases {
    /// Held deliveries by task id.
    pub held: HashMap<TaskId, Lease>,
    seen: HashSet<TaskId>,
    order: VecDeque<TaskId>,
    succeeded: HashSet<TaskId>,
    succeeded_order: VecDeque<TaskId>,
}

impl Leases {
    /// Remembers that `id` passed through this store.
    pub fn saw(&mut self, id: TaskId) {
        if self.seen.insert(id) {
            self.order.push_back(id);
            if self.order.len() > SEEN_CAPACITY
                && let Some(old) = self.order.pop_front()
            {
                self.seen.remove(&old);
            }
        }
    }

    /// True when `id` passed through this store recently.
    pub fn has_seen(&self, id: TaskId) -> bool {
        self.seen.contains(&id)
    }

    /// Remembers that this process settled `id` as SUCCEEDED.
    pub fn succeeded(&mut self, id: TaskId) {
        if self.succeeded.insert(id) {
            self.succeeded_order.push_back(id);
            if self.succeeded_order.len() > SEEN_CAPACITY
                && let Some(old) = self.succeeded_order.pop_front()
            {
                self.succeeded.remove(&old);
            }
        }
    }

    /// True when this process settled `id` as SUCCEEDED recently.
    pub fn has_succeeded(&self, id: TaskId) -> bool {
        self.succeeded.contains(&id)
    }
}
