//! Retry policies the application chooses, on top of the queue's.
//!
//! In rdq a queue's policy lives with the queue and is read at every settle,
//! so an operator can raise `max_attempts` during an incident. A
//! [`RetryPolicy`] is the application's override of two of its numbers,
//! attempts and backoff, for a job type, a queue, or one job: the worker
//! sends it with the failure and the engine judges that failure by it
//! ([`rdq_engine::Settlement::FailureWithRetry`]). Classification globs,
//! leases and priorities stay the queue's, and a lease expiry (recorded by
//! the reaper, not by a worker) is judged by the queue's own numbers.

use std::time::Duration;

use rdq_engine::{Backoff, RetryOverride};

/// Attempts and, optionally, backoff that replace the queue's for the jobs a
/// worker applies it to.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts including the first; `1` means no retries.
    pub max_attempts: u32,
    /// The delay curve; `None` keeps the queue's.
    pub backoff: Option<Backoff>,
}

impl RetryPolicy {
    /// `max_attempts` attempts (at least 1) on the queue's backoff curve.
    pub fn attempts(max_attempts: u32) -> Self {
        Self {
            max_attempts: max_attempts.max(1),
            backoff: None,
        }
    }

    /// One attempt: the first failure dead-letters.
    pub fn none() -> Self {
        Self::attempts(1)
    }

    /// `max_attempts` attempts, `delay` apart.
    pub fn fixed(max_attempts: u32, delay: Duration) -> Self {
        Self::attempts(max_attempts).with_backoff(Backoff::Fixed {
            delay_ms: millis(delay),
        })
    }

    /// `max_attempts` attempts, retried at once.
    pub fn immediate(max_attempts: u32) -> Self {
        Self::attempts(max_attempts).with_backoff(Backoff::None)
    }

    /// `max_attempts` attempts on rdq's default exponential curve
    /// (1 s, doubling, capped at an hour, full jitter).
    pub fn exponential(max_attempts: u32) -> Self {
        Self::attempts(max_attempts).with_backoff(Backoff::default())
    }

    /// The same attempts on `backoff`.
    #[must_use]
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// The override the engine applies, filling an unset backoff from the
    /// queue's `backoff`.
    pub(crate) fn to_override(&self, queue_backoff: &Backoff) -> RetryOverride {
        RetryOverride {
            max_attempts: self.max_attempts.max(1),
            backoff: self
                .backoff
                .clone()
                .unwrap_or_else(|| queue_backoff.clone()),
        }
    }
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
