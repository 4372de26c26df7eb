//! How many claimed tasks a worker keeps ready beyond its free handler slots
//! (docs/configuration.md, "Workers").
//!
//! A claim that asks only for the free slots is small and leaves the
//! handlers idle while it travels; tasks claimed ahead let one claim feed
//! many handlers (graphile-worker's local queue, queuey's `prefetch`). Each
//! one waits under its own lease, so holding many is only safe when they
//! start soon: [`Prefetch::Adaptive`] keeps about [`WINDOW`] of work at the
//! rate the handlers have been starting tasks, which is none for a worker
//! whose handlers are slow and a few hundred for one whose handlers take
//! microseconds. It claims none ahead on a queue under flow control: a task
//! claimed ahead is IN_FLIGHT and would hold a slot of the queue's limits
//! while it waits.

use std::time::{Duration, Instant};

/// How much work, in time at the recent start rate, an adaptive worker
/// keeps claimed ahead.
pub const WINDOW: Duration = Duration::from_millis(50);

/// The most tasks an adaptive worker keeps claimed ahead.
pub const MAX: usize = 1024;

/// How often the start rate is measured.
const SAMPLE: Duration = Duration::from_millis(20);

/// Claimed tasks kept ready beyond the free handler slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Prefetch {
    /// What the handlers start in [`WINDOW`] at the rate they have been
    /// starting tasks, at most [`MAX`]; none on a queue under flow control
    /// (the default).
    #[default]
    Adaptive,
    /// Exactly this many (0: claim only for free slots).
    Fixed(usize),
}

/// The start rate an adaptive worker measures, and what it keeps ahead.
#[derive(Debug)]
pub(crate) struct Pace {
    mode: Prefetch,
    /// When the current sample began, and the starts counted at that time.
    since: Instant,
    started_then: u64,
    /// Tasks started per second, smoothed over samples.
    rate: f64,
}

impl Pace {
    pub(crate) fn new(mode: Prefetch, now: Instant) -> Self {
        Self {
            mode,
            since: now,
            started_then: 0,
            rate: 0.0,
        }
    }

    /// How many tasks to keep ready, given the handlers have started
    /// `started` tasks in all by `now`.
    pub(crate) fn ahead(&mut self, started: u64, now: Instant) -> usize {
        if let Prefetch::Fixed(n) = self.mode {
            return n;
        }
        let elapsed = now.saturating_duration_since(self.since);
        if elapsed >= SAMPLE {
            let sample = started.saturating_sub(self.started_then) as f64 / elapsed.as_secs_f64();
            // Half the last sample, half the history: a burst is seen within
            // a few samples, and a queue gone quiet drops to none.
            self.rate = (self.rate + sample) / 2.0;
            self.since = now;
            self.started_then = started;
        }
        let ahead = self.rate * WINDOW.as_secs_f64();
        // Below one task ahead there is nothing to keep.
        if ahead.is_finite() && ahead >= 1.0 {
            (ahead as usize).min(MAX)
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_is_what_it_says() {
        let t0 = Instant::now();
        let mut pace = Pace::new(Prefetch::Fixed(30), t0);
        assert_eq!(pace.ahead(0, t0), 30);
        assert_eq!(pace.ahead(1_000_000, t0 + Duration::from_secs(1)), 30);
        let mut none = Pace::new(Prefetch::Fixed(0), t0);
        assert_eq!(none.ahead(1_000_000, t0 + Duration::from_secs(1)), 0);
    }

    #[test]
    fn adaptive_keeps_the_window_of_work_at_the_start_rate() {
        let t0 = Instant::now();
        let mut pace = Pace::new(Prefetch::Adaptive, t0);
        assert_eq!(pace.ahead(0, t0), 0, "nothing measured, nothing ahead");
        // 10,000 starts a second, held for a while: 50 ms of it is 500.
        let mut started = 0;
        let mut at = t0;
        for _ in 0..20 {
            at += SAMPLE;
            started += 200;
            pace.ahead(started, at);
        }
        let ahead = pace.ahead(started, at);
        assert!((495..=500).contains(&ahead), "{ahead}");
        // Far faster handlers are capped.
        for _ in 0..20 {
            at += SAMPLE;
            started += 1_000_000;
            pace.ahead(started, at);
        }
        assert_eq!(pace.ahead(started, at), MAX);
        // Slow handlers (64 a second) keep three ahead; stopped ones none.
        for _ in 0..40 {
            at += Duration::from_secs(1);
            started += 64;
            pace.ahead(started, at);
        }
        assert_eq!(pace.ahead(started, at), 3);
        for _ in 0..10 {
            at += Duration::from_secs(1);
            pace.ahead(started, at);
        }
        assert_eq!(pace.ahead(started, at), 0);
    }

    #[test]
    fn samples_shorter_than_the_period_do_not_move_the_rate() {
        let t0 = Instant::now();
        let mut pace = Pace::new(Prefetch::Adaptive, t0);
        // A burst of starts within a few microseconds is not a rate.
        assert_eq!(pace.ahead(400, t0 + Duration::from_micros(5)), 0);
        // 400 in a sample of 20 ms: 20,000 a second, half of it the history
        // of none: 10,000 a second, 500 in 50 ms.
        assert_eq!(pace.ahead(400, t0 + SAMPLE), 500);
    }
}
