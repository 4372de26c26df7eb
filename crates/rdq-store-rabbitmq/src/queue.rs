//! One rdq queue on the broker as this process sees it: its broker queues,
//! the deliveries its consumer received and claims have not taken yet, and
//! the unacknowledged deliveries (leases) handed out from them.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use lapin::Acker;
use lapin::Consumer;
use rdq_envelope::Envelope;
use tokio::sync::{mpsc, oneshot};

use crate::acks::{AckOutcome, Acks};
use crate::topology::Names;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data with no invariants a panic could break half-way.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Claim order among received deliveries: higher priority first, then
/// earlier due, then older id (the SPI's order, within what the broker has
/// pushed to this consumer), then arrival.
pub(crate) type ReadyKey = (Reverse<u8>, i64, u128, u64);

/// A claim asking the consumer to catch up: a round trip on the consumer's
/// channel, after which every delivery the broker sent before it is in the
/// buffer. With `count`, the round trip is a passive declare and the answer
/// is how many messages still wait in the queue (else 0).
pub(crate) struct Flush {
    pub(crate) count: bool,
    pub(crate) reply: oneshot::Sender<u32>,
}

/// What a queue's consumer task is asked to do.
pub(crate) enum Request {
    /// Catch up with the broker (see [`Flush`]); resumes a stopped consumer.
    Flush(Flush),
    /// Stop consuming and hand the buffer back ([`rdq_engine::Store::stop_claiming`]).
    Stop(oneshot::Sender<()>),
}

/// A delivery received and not yet claimed.
pub(crate) struct Waiting {
    pub(crate) envelope: Envelope,
    pub(crate) delivery: Held,
    pub(crate) redelivered: bool,
}

/// An unacknowledged delivery: how to ack it, and the subscription it
/// belongs to (when that ends, the broker requeues the delivery).
pub(crate) struct Held {
    pub(crate) acker: Acker,
    pub(crate) tag: u64,
    pub(crate) subscription: Subscription,
}

impl Held {
    /// Acks the delivery (coalesced with its neighbours) and waits until
    /// the broker has taken the ack ([`AckOutcome`]).
    pub(crate) async fn ack(self) -> AckOutcome {
        self.subscription.acks.ack(self.tag, self.acker).await
    }
}

/// One consumer subscription: its number and its ack queue.
#[derive(Clone)]
pub(crate) struct Subscription {
    pub(crate) epoch: u64,
    pub(crate) acks: Arc<Acks>,
}

/// One rdq queue: its broker queues and its consumer's buffer.
pub struct QueueState {
    /// The rdq queue name.
    pub name: String,
    /// Its broker queues.
    pub names: Names,
    pub(crate) declared: tokio::sync::Mutex<bool>,
    /// Received deliveries in claim order.
    pub(crate) ready: Mutex<BTreeMap<ReadyKey, Waiting>>,
    pub(crate) arrivals: AtomicU64,
    /// A clone of the live subscription's consumer and its epoch: claims
    /// drain what the client already received without waiting for the
    /// consumer task.
    pub(crate) consumer: Mutex<Option<(Consumer, Subscription)>>,
    /// Asks the consumer for a flush (see the claim in [`crate::RabbitStore`]).
    pub(crate) pump: Mutex<Option<mpsc::Sender<Request>>>,
}

impl QueueState {
    /// Puts a received delivery in the claim buffer, in claim order.
    pub(crate) fn buffer(&self, w: Waiting) {
        let seq = self.arrivals.fetch_add(1, Ordering::Relaxed);
        let env = &w.envelope;
        let due = env.next_attempt_at.unwrap_or(env.created_at);
        let key = (Reverse(env.priority), due.unix_ms(), env.id.as_u128(), seq);
        lock(&self.ready).insert(key, w);
    }
}
