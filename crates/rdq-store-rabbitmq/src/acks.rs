//! Coalesced acknowledgements for one consumer subscription.
//!
//! Acking each delivery on its own costs the broker one frame and one
//! queue operation per task; a single `basic.ack` with `multiple = true`
//! settles a whole run of deliveries at once. Settles finish in any order,
//! so acks go through one task per subscription that tracks which delivery
//! tags are settled:
//!
//! - the longest run of settled tags directly after the highest tag known
//!   to be acked is acked with one `multiple` ack of its last tag;
//! - settled tags beyond a gap (a delivery still being worked, or one not
//!   yet seen by this process) are acked one by one at once, so a slow task
//!   never holds back the prefetch credit of the tasks after it.
//!
//! Every ack is sent by the one task, in order, so a `multiple` ack never
//! overtakes a single ack of a tag it covers (the broker would close the
//! channel on an unknown tag). Delivery tags on a channel are consecutive
//! from 1 and the consumer's channel receives nothing else, so a run of
//! consecutive settled tags contains every unacked delivery it covers.
//!
//! An AMQP ack has no answer: one written to a connection that dies before
//! the broker reads it is lost, and the broker delivers the task again,
//! perhaps to another process. So after each round of acks the task sends
//! one method that has an answer (`basic.qos`, changing nothing) on the same
//! channel; a channel handles its methods in order, so its answer means the
//! broker has taken every ack before it. A settle waits for that answer
//! ([`AckOutcome::Confirmed`]); without it the outcome is unknown
//! ([`AckOutcome::Unconfirmed`]). One round trip per round, shared by every
//! ack of the round.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lapin::options::{BasicAckOptions, BasicQosOptions};
use lapin::{Acker, Channel};
use tokio::sync::{Notify, oneshot};
use tracing::{debug, warn};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What became of an ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// The broker has taken it: the delivery will not come back (short of
    /// the broker itself losing it in a crash).
    Confirmed,
    /// It was never written (the subscription or its channel ended first):
    /// the broker requeues the delivery.
    NotSent,
    /// Written, but the connection failed before the broker answered the
    /// method after it: the delivery may or may not come back.
    Unconfirmed,
}

/// A settled delivery waiting for its ack.
struct Settled {
    acker: Acker,
    reply: Option<oneshot::Sender<AckOutcome>>,
}

struct State<T = Settled> {
    /// Every tag up to here is acked.
    floor: u64,
    /// Settled, not yet acked.
    settled: BTreeMap<u64, T>,
    /// Acked one by one above `floor`.
    acked_above_floor: BTreeSet<u64>,
    closed: bool,
}

impl<T> Default for State<T> {
    fn default() -> Self {
        Self {
            floor: 0,
            settled: BTreeMap::new(),
            acked_above_floor: BTreeSet::new(),
            closed: false,
        }
    }
}

/// What one round of the ack task sends.
struct Round<T> {
    /// A run right after the floor: acked together through its last acker.
    run: Vec<T>,
    /// Settled beyond a gap: acked one by one.
    singles: Vec<T>,
}

impl<T> State<T> {
    fn take_round(&mut self) -> Round<T> {
        let mut round = Round {
            run: Vec::new(),
            singles: Vec::new(),
        };
        loop {
            let next = self.floor + 1;
            if let Some(s) = self.settled.remove(&next) {
                round.run.push(s);
            } else if !self.acked_above_floor.remove(&next) {
                break;
            }
            self.floor = next;
        }
        for (tag, s) in std::mem::take(&mut self.settled) {
            self.acked_above_floor.insert(tag);
            round.singles.push(s);
        }
        round
    }
}

/// The ack queue of one subscription (see the module docs).
pub struct Acks {
    state: Mutex<State>,
    wake: Notify,
    received: AtomicU64,
    acked: AtomicU64,
    /// The subscription's channel, for the method that confirms a round.
    channel: Channel,
    /// The channel's prefetch, which that method sets again.
    prefetch: u16,
}

impl Acks {
    /// A queue for a new subscription on `channel` (consuming with
    /// `prefetch`), with its ack task running.
    pub fn start(channel: Channel, prefetch: u16) -> Arc<Self> {
        let acks = Arc::new(Self {
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            received: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            channel,
            prefetch,
        });
        tokio::spawn(run(Arc::clone(&acks)));
        acks
    }

    /// Counts a delivery received on the subscription.
    pub fn received(&self) {
        self.received.fetch_add(1, Ordering::Relaxed);
    }

    /// Deliveries received and not yet acked: the prefetch credit in use.
    pub fn unacked(&self) -> u64 {
        let acked = self.acked.load(Ordering::Relaxed);
        self.received.load(Ordering::Relaxed).saturating_sub(acked)
    }

    /// Acks delivery `tag` and waits until the broker has taken the ack
    /// ([`AckOutcome`]).
    pub async fn ack(&self, tag: u64, acker: Acker) -> AckOutcome {
        let (reply, answer) = oneshot::channel();
        if !self.push(tag, acker, Some(reply)) {
            return AckOutcome::NotSent;
        }
        answer.await.unwrap_or(AckOutcome::NotSent)
    }

    /// Acks delivery `tag` without waiting for the outcome.
    pub fn ack_detached(&self, tag: u64, acker: Acker) {
        self.push(tag, acker, None);
    }

    fn push(&self, tag: u64, acker: Acker, reply: Option<oneshot::Sender<AckOutcome>>) -> bool {
        {
            let mut state = lock(&self.state);
            if state.closed || tag <= state.floor || state.acked_above_floor.contains(&tag) {
                return false;
            }
            state.settled.insert(tag, Settled { acker, reply });
        }
        self.wake.notify_one();
        true
    }

    /// Ends the subscription's acks: waiting settles answer false.
    pub fn close(&self) {
        let pending = {
            let mut state = lock(&self.state);
            state.closed = true;
            std::mem::take(&mut state.settled)
        };
        for (_, s) in pending {
            if let Some(reply) = s.reply {
                let _ = reply.send(AckOutcome::NotSent);
            }
        }
        self.wake.notify_one();
    }
}

/// How long one ack may take to be written before it counts as not sent.
/// When the broker closes the connection (a restart, `stop_app`), the AMQP
/// client can leave an ack it was writing pending for good, and every
/// settle behind it would wait with it; a settle must answer. An ack
/// normally takes well under a millisecond.
const ACK_WAIT: Duration = Duration::from_secs(5);

/// Sends one ack; true once it is written. An ack on a channel already
/// closed is not attempted.
async fn send(acker: &Acker, multiple: bool) -> bool {
    if !acker.usable() {
        return false;
    }
    let ack = acker.ack(BasicAckOptions { multiple });
    match tokio::time::timeout(ACK_WAIT, ack).await {
        Ok(written) => matches!(written, Ok(true)),
        Err(_) => {
            warn!("an ack was not written within {ACK_WAIT:?}; counted as not sent");
            false
        }
    }
}

async fn run(acks: Arc<Acks>) {
    loop {
        acks.wake.notified().await;
        loop {
            let round = {
                let mut state = lock(&acks.state);
                if state.closed {
                    return;
                }
                state.take_round()
            };
            if round.run.is_empty() && round.singles.is_empty() {
                break;
            }
            let count = round.run.len() + round.singles.len();
            acks.acked.fetch_add(count as u64, Ordering::Relaxed);
            // Each settle with whether its ack was written.
            let mut written = Vec::with_capacity(count);
            if let Some(last) = round.run.last() {
                let ok = send(&last.acker, round.run.len() > 1).await;
                if round.run.len() > 1 {
                    debug!(count = round.run.len(), "acked a run of deliveries at once");
                }
                written.extend(round.run.into_iter().map(|s| (s.reply, ok)));
            }
            for s in round.singles {
                let ok = send(&s.acker, false).await;
                written.push((s.reply, ok));
            }
            let confirmed = if written.iter().any(|(_, ok)| *ok) {
                acks.confirm().await
            } else {
                false
            };
            for (reply, ok) in written {
                let outcome = match (ok, confirmed) {
                    (false, _) => AckOutcome::NotSent,
                    (true, true) => AckOutcome::Confirmed,
                    (true, false) => AckOutcome::Unconfirmed,
                };
                if let Some(reply) = reply {
                    let _ = reply.send(outcome);
                }
            }
        }
    }
}

impl Acks {
    /// Sends `basic.qos` with the prefetch the channel already has and waits
    /// for its answer: true once the broker has answered, so it has taken
    /// every ack written before it (module docs).
    async fn confirm(&self) -> bool {
        let qos = self
            .channel
            .basic_qos(self.prefetch, BasicQosOptions { global: false });
        match tokio::time::timeout(ACK_WAIT, qos).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                debug!(error = %e, "the broker did not answer after acks; their outcome is unknown");
                false
            }
            Err(_) => {
                warn!(
                    "the broker did not answer after acks within {ACK_WAIT:?}; their outcome is unknown"
                );
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settled(state: &mut State<u64>, tag: u64) {
        state.settled.insert(tag, tag);
    }

    #[test]
    fn a_run_after_the_floor_goes_in_one_ack_and_the_rest_one_by_one() {
        let mut state = State::<u64>::default();
        for tag in [1, 2, 3, 5, 6] {
            settled(&mut state, tag);
        }
        let round = state.take_round();
        assert_eq!(round.run, [1, 2, 3]);
        assert_eq!(round.singles, [5, 6]);
        assert_eq!(state.floor, 3);
        // Tag 4 settles: the floor moves through the tags acked one by one.
        settled(&mut state, 4);
        let round = state.take_round();
        assert_eq!(round.run, [4]);
        assert!(round.singles.is_empty());
        assert_eq!(state.floor, 6);
        assert!(state.acked_above_floor.is_empty());
    }

    #[test]
    fn nothing_is_acked_twice() {
        let mut state = State::<u64>::default();
        settled(&mut state, 2);
        let round = state.take_round();
        assert_eq!((round.run, round.singles), (vec![], vec![2]));
        assert_eq!(state.floor, 0);
        let round = state.take_round();
        assert_eq!((round.run, round.singles), (vec![], vec![]));
        // Tag 1 settles: one ack of it alone, and the floor passes 2.
        settled(&mut state, 1);
        let round = state.take_round();
        assert_eq!(round.run, [1]);
        assert_eq!(state.floor, 2);
    }
}
