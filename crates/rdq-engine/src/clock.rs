//! The one clock abstraction: real time in production, virtual time in tests.

use std::sync::atomic::{AtomicI64, Ordering};

use rdq_envelope::Timestamp;

/// Where "now" comes from.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves only when told to, for deterministic tests.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self(AtomicI64::new(start.unix_ms()))
    }

    /// Moves the clock forward by `ms`.
    pub fn advance_ms(&self, ms: u64) {
        let ms = i64::try_from(ms).unwrap_or(i64::MAX);
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `t`.
    pub fn set(&self, t: Timestamp) {
        self.0.store(t.unix_ms(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_unix_ms(self.0.load(Ordering::SeqCst)).unwrap_or(Timestamp::EPOCH)
    }
}
