//! The scheduler's counters (`docs/observability.md`): fires and skips per
//! schedule, and how late fires were submitted, in the Prometheus text
//! format as the rest of [`crate::Metrics`].
//!
//! Fed from each scheduler tick's `rdq_engine::FireReport` by
//! [`ScheduleMetrics::tick`]; a fire another node made (or a key seen
//! before) is counted by the node that created its task, so a fleet's sum
//! counts each due time once.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};

use rdq_engine::FireReport;

/// Upper bounds of the lateness buckets, in seconds: from a tick's jitter
/// to a catch-up after hours of downtime.
pub const LATENESS_BUCKETS: [f64; 12] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 30.0, 300.0, 3600.0, 86400.0,
];

#[derive(Debug, Default)]
struct Counts {
    /// Tasks created by fires, per schedule.
    fires: BTreeMap<String, u64>,
    /// Skipped due times, per schedule and reason.
    skips: BTreeMap<(String, &'static str), u64>,
    /// Lateness histogram: per bucket, then count and sum (seconds).
    buckets: [u64; LATENESS_BUCKETS.len()],
    count: u64,
    sum_seconds: f64,
}

/// Counters of the scheduler service. A tick a second updates them, so one
/// lock is cheap enough.
#[derive(Debug, Default)]
pub struct ScheduleMetrics {
    counts: Mutex<Counts>,
}

impl ScheduleMetrics {
    /// Counts one tick's report, made at `now_ms`: each created task as a
    /// fire of its schedule with its lateness (`now_ms` minus its due time),
    /// each skipped run of due times under its reason.
    pub fn tick(&self, report: &FireReport, now_ms: i64) {
        if report.fired.is_empty() && report.skipped.is_empty() {
            return;
        }
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        for fired in report.fired.iter().filter(|f| f.created) {
            *c.fires.entry(fired.schedule.clone()).or_default() += 1;
            let late = now_ms.saturating_sub(fired.due_ms).max(0) as f64 / 1000.0;
            if let Some(i) = LATENESS_BUCKETS.iter().position(|&b| late <= b) {
                c.buckets[i] += 1;
            }
            c.count += 1;
            c.sum_seconds += late;
        }
        for s in &report.skipped {
            let key = (s.schedule.clone(), s.skipped.reason.as_str());
            *c.skips.entry(key).or_default() += s.skipped.count;
        }
    }

    /// The `rdq_schedule_*` families.
    pub fn render(&self) -> String {
        let c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP rdq_schedule_fires_total Tasks submitted by schedules' fires on this node.\n# TYPE rdq_schedule_fires_total counter"
        );
        for (name, n) in &c.fires {
            let _ = writeln!(
                out,
                "rdq_schedule_fires_total{{schedule=\"{}\"}} {n}",
                escape(name)
            );
        }
        let _ = writeln!(
            out,
            "# HELP rdq_schedule_skips_total Due times schedules skipped, by reason.\n# TYPE rdq_schedule_skips_total counter"
        );
        for ((name, reason), n) in &c.skips {
            let _ = writeln!(
                out,
                "rdq_schedule_skips_total{{schedule=\"{}\",reason=\"{reason}\"}} {n}",
                escape(name)
            );
        }
        let _ = writeln!(
            out,
            "# HELP rdq_schedule_lateness_seconds How late fires were submitted: submit time minus due time.\n# TYPE rdq_schedule_lateness_seconds histogram"
        );
        let mut cumulative = 0u64;
        for (i, bound) in LATENESS_BUCKETS.iter().enumerate() {
            cumulative += c.buckets[i];
            let _ = writeln!(
                out,
                "rdq_schedule_lateness_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "rdq_schedule_lateness_seconds_bucket{{le=\"+Inf\"}} {}",
            c.count
        );
        let _ = writeln!(out, "rdq_schedule_lateness_seconds_sum {}", c.sum_seconds);
        let _ = writeln!(out, "rdq_schedule_lateness_seconds_count {}", c.count);
        out
    }
}

/// Schedule names are `[a-z0-9._-]`, but escape anyway.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdq_engine::{ScheduleFired, ScheduleSkipped};
    use rdq_envelope::TaskId;
    use rdq_schedule::{SkipReason, Skipped};

    #[test]
    fn fires_skips_and_lateness_render_per_schedule() {
        let m = ScheduleMetrics::default();
        let report = FireReport {
            fired: vec![ScheduleFired {
                schedule: "nightly".into(),
                due_ms: 10_000,
                backfilled: false,
                task: TaskId::from_u128(1),
                created: true,
            }],
            skipped: vec![ScheduleSkipped {
                schedule: "nightly".into(),
                skipped: Skipped {
                    reason: SkipReason::Paused,
                    first_due_ms: 1,
                    last_due_ms: 2,
                    count: 2,
                },
            }],
            ..FireReport::default()
        };
        m.tick(&report, 10_300);
        let text = m.render();
        assert!(
            text.contains("rdq_schedule_fires_total{schedule=\"nightly\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("rdq_schedule_skips_total{schedule=\"nightly\",reason=\"paused\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("rdq_schedule_lateness_seconds_bucket{le=\"0.25\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("rdq_schedule_lateness_seconds_bucket{le=\"0.5\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("rdq_schedule_lateness_seconds_count 1"),
            "{text}"
        );
    }
}
