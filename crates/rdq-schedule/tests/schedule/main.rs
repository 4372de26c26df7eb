//! The specification of rdq-schedule, one module per concern.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod dst;
mod due_times;
mod fire;
mod model;
mod plan;
mod properties;
mod validation;

use rdq_schedule::{CatchUp, Overlap, Schedule, Spec, TaskTemplate, Timing, ValidSchedule};

/// Milliseconds of an RFC 3339 instant with an offset, such as `2026-03-08T03:00:00-04:00`.
pub fn ms(instant: &str) -> i64 {
    instant
        .parse::<jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("{instant}: {e}"))
        .as_millisecond()
}

/// A timing for a cron pattern in a zone, unbounded.
pub fn cron(pattern: &str, tz: &str) -> Timing {
    Timing::new(&Spec::Cron(pattern.to_owned()), tz, None, None).unwrap()
}

/// The first `n` due times after `after`.
pub fn next_n(timing: &Timing, after: i64, n: usize) -> Vec<i64> {
    timing.due_between(after, i64::MAX, n)
}

/// A valid schedule to vary in tests.
pub fn schedule(spec: Spec) -> Schedule {
    Schedule {
        name: "nightly.report".to_owned(),
        task: TaskTemplate {
            queue: "reports".to_owned(),
            handler_ref: "build-report".to_owned(),
            payload: b"{}".to_vec(),
            payload_content_type: "application/json".to_owned(),
            headers: Default::default(),
            priority: 0,
            flow_key: None,
        },
        spec,
        tz: "UTC".to_owned(),
        start_ms: None,
        end_ms: None,
        paused: false,
        overlap: Overlap::Allow,
        catch_up: CatchUp::Latest,
    }
}

/// `schedule` checked.
pub fn valid(s: Schedule) -> ValidSchedule {
    ValidSchedule::new(s).unwrap()
}
