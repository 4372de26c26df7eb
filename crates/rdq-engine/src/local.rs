//! Local concurrency (`flow.local_concurrency`): the tasks this process
//! claimed and has not yet settled, per queue. It is the one flow limit held
//! in a process's memory, by definition: it bounds what one `rdq serve` node
//! or one embedding application holds at once, on every store.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use rdq_envelope::{Envelope, Status, TaskId, Timestamp};

/// This process's open leases on queues with a local concurrency limit.
#[derive(Debug, Default)]
pub(crate) struct LocalSlots {
    /// Set once any queue is tracked, so that settles on engines without a
    /// local limit skip the lock.
    active: AtomicBool,
    /// Per queue: each held task and when its lease ends (a lease that
    /// lapsed frees its slot even if another process reaped it).
    held: Mutex<HashMap<String, HashMap<TaskId, Timestamp>>>,
}

impl LocalSlots {
    /// How many more tasks of `queue` this process may claim at `now`
    /// under `limit`.
    pub(crate) fn room(&self, queue: &str, limit: u64, now: Timestamp) -> usize {
        self.active.store(true, Ordering::Relaxed);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let leases = held.entry(queue.to_owned()).or_default();
        leases.retain(|_, deadline| *deadline > now);
        let room = limit.saturating_sub(leases.len() as u64);
        usize::try_from(room).unwrap_or(usize::MAX)
    }

    /// Records tasks this process just claimed.
    pub(crate) fn claimed(&self, claimed: &[Envelope]) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        for env in claimed {
            if let Some(deadline) = env.lease_expires_at {
                held.entry(env.queue.clone())
                    .or_default()
                    .insert(env.id, deadline);
            }
        }
    }

    /// Follows each new state of a task: a task no longer IN_FLIGHT frees
    /// its slot; an extended lease moves its deadline.
    pub(crate) fn observe<'a>(&self, states: impl Iterator<Item = &'a Envelope>) {
        if !self.active.load(Ordering::Relaxed) {
            return;
        }
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        for env in states {
            let Some(leases) = held.get_mut(&env.queue) else {
                continue;
            };
            match (env.status, env.lease_expires_at) {
                (Status::InFlight, Some(deadline)) => {
                    if let Some(slot) = leases.get_mut(&env.id) {
                        *slot = deadline;
                    }
                }
                _ => {
                    leases.remove(&env.id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leased(queue: &str, id: u128, until_ms: i64) -> Envelope {
        let mut env = Envelope::new(
            queue,
            "h",
            b"",
            "application/octet-stream",
            Timestamp::EPOCH,
        );
        env.id = TaskId::from_u128(id);
        env.status = Status::InFlight;
        env.lease_expires_at = Timestamp::from_unix_ms(until_ms);
        env
    }

    #[test]
    fn slots_are_taken_by_claims_and_freed_by_settles_and_lapses() {
        let slots = LocalSlots::default();
        let at = |ms| Timestamp::from_unix_ms(ms).unwrap();
        assert_eq!(slots.room("q", 2, at(0)), 2);
        let a = leased("q", 1, 100);
        let b = leased("q", 2, 200);
        slots.claimed(&[a.clone(), b.clone()]);
        assert_eq!(slots.room("q", 2, at(50)), 0);
        assert_eq!(slots.room("other", 2, at(50)), 2);
        let mut done = a;
        done.status = Status::Succeeded;
        done.lease_expires_at = None;
        slots.observe([&done].into_iter());
        assert_eq!(slots.room("q", 2, at(50)), 1);
        // b's lease lapses at 200: its slot is free after, even unsettled.
        assert_eq!(slots.room("q", 2, at(199)), 1);
        assert_eq!(slots.room("q", 2, at(200)), 2);
        // A lowered limit leaves no room while more are held.
        slots.claimed(&[leased("q", 3, 900), leased("q", 4, 900)]);
        assert_eq!(slots.room("q", 1, at(300)), 0);
    }
}
