//! Whether the writer's last group committed, shared by the writer thread,
//! the syncer thread and the store (which reports it as readiness).
//!
//! A failed group is forgotten once a later group commits; a failed fsync is
//! not: it poisons the store, whose every later write is refused.

use std::sync::{Mutex, PoisonError};

/// What the writer thread reports about its last group: `None` when it
/// committed, else why it did not; and whether an fsync failed, after
/// which the store takes no more writes.
#[derive(Default)]
pub(crate) struct Health {
    last: Mutex<Option<String>>,
    poisoned: Mutex<Option<String>>,
}

impl Health {
    pub(super) fn set(&self, failure: Option<String>) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = failure;
    }

    /// Stops every later write: an fsync failed (`why`).
    pub(super) fn poison(&self, why: String) {
        self.set(Some(why.clone()));
        *self.poisoned.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
    }

    pub(super) fn poisoned(&self) -> Option<String> {
        self.poisoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Why the last group failed, if it did (or the fsync failure that
    /// stopped the store's writes).
    pub(crate) fn last_failure(&self) -> Option<String> {
        self.poisoned().or_else(|| {
            self.last
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
    }
}
