//! Counters and a latency histogram, rendered in the Prometheus text format
//! (version 0.0.4) by hand: the format is a few lines of text and a metrics
//! crate would be the largest dependency of the server.
//!
//! Counters live per queue behind atomics, so the hot paths (submit, claim,
//! settle, dispatch) take a read lock on the queue map and one atomic add.
//! Queue sizes (and the DLQ size) are read from the store at scrape time.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use rdq_engine::{FlowStatus, QueueCounts};

/// Upper bounds of the dispatch latency buckets, in seconds.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// How a settle or a lease ended, as counted in `rdq_outcomes_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeLabel {
    /// The task succeeded.
    Success,
    /// A retryable failure (retried, or dead once attempts ran out).
    RetryableFailure,
    /// A permanent failure (dead now).
    PermanentFailure,
    /// Deferred without spending an attempt.
    Deferred,
    /// Handed back unrun.
    Released,
    /// The lease lapsed with no outcome.
    LeaseExpired,
}

impl OutcomeLabel {
    const ALL: [OutcomeLabel; 6] = [
        Self::Success,
        Self::RetryableFailure,
        Self::PermanentFailure,
        Self::Deferred,
        Self::Released,
        Self::LeaseExpired,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "SUCCESS",
            Self::RetryableFailure => "RETRYABLE_FAILURE",
            Self::PermanentFailure => "PERMANENT_FAILURE",
            Self::Deferred => "DEFERRED",
            Self::Released => "RELEASED",
            Self::LeaseExpired => "LEASE_EXPIRED",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Cumulative histogram with fixed buckets.
#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = LATENCY_BUCKETS.iter().position(|&b| secs <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }
}

/// The counters of one queue.
#[derive(Debug, Default)]
struct QueueMetrics {
    submitted: AtomicU64,
    claimed: AtomicU64,
    outcomes: [AtomicU64; 6],
    dispatch: Histogram,
    /// Per-minute outcomes of the last hour, for the dashboard.
    minutes: Mutex<MinuteRing>,
}

/// Minutes of outcome history kept per queue.
pub const HISTORY_MINUTES: usize = 60;

/// Outcomes of one minute: `minute` is its start, in minutes since the epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MinuteCounts {
    /// The minute's start, in whole minutes since the Unix epoch.
    pub minute: u64,
    /// Attempts that succeeded.
    pub succeeded: u64,
    /// Attempts that failed (retryable, permanent, or a lapsed lease).
    pub failed: u64,
}

/// A ring of [`HISTORY_MINUTES`] minutes, slot `minute % HISTORY_MINUTES`;
/// a slot holding an older minute is stale and reads as zero.
#[derive(Debug)]
struct MinuteRing([MinuteCounts; HISTORY_MINUTES]);

impl Default for MinuteRing {
    fn default() -> Self {
        Self([MinuteCounts::default(); HISTORY_MINUTES])
    }
}

impl MinuteRing {
    fn slot(&mut self, minute: u64) -> &mut MinuteCounts {
        let slot = &mut self.0[(minute % HISTORY_MINUTES as u64) as usize];
        if slot.minute != minute {
            *slot = MinuteCounts {
                minute,
                ..MinuteCounts::default()
            };
        }
        slot
    }
}

/// Every counter the server keeps. Cheap to share (`Arc`).
#[derive(Debug, Default)]
pub struct Metrics {
    queues: RwLock<HashMap<String, Arc<QueueMetrics>>>,
    /// The scheduler's counters (`rdq_schedule_*`).
    pub schedules: crate::schedule_metrics::ScheduleMetrics,
}

impl Metrics {
    /// No counts yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn queue(&self, queue: &str) -> Arc<QueueMetrics> {
        if let Some(q) = self
            .queues
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(queue)
        {
            return Arc::clone(q);
        }
        let mut map = self.queues.write().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(map.entry(queue.to_owned()).or_default())
    }

    /// Counts `n` tasks stored by submits to `queue`.
    pub fn submitted(&self, queue: &str, n: u64) {
        self.queue(queue).submitted.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts `n` tasks handed out by claims (pull workers and callbacks).
    pub fn claimed(&self, queue: &str, n: u64) {
        self.queue(queue).claimed.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one settle, deferral, release or lease expiry.
    pub fn outcome(&self, queue: &str, outcome: OutcomeLabel) {
        let q = self.queue(queue);
        q.outcomes[outcome.index()].fetch_add(1, Ordering::Relaxed);
        let succeeded = match outcome {
            OutcomeLabel::Success => true,
            OutcomeLabel::RetryableFailure
            | OutcomeLabel::PermanentFailure
            | OutcomeLabel::LeaseExpired => false,
            OutcomeLabel::Deferred | OutcomeLabel::Released => return,
        };
        let minute = now_minute();
        let mut ring = q.minutes.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = ring.slot(minute);
        if succeeded {
            slot.succeeded += 1;
        } else {
            slot.failed += 1;
        }
    }

    /// `queue`'s outcomes per minute over the last [`HISTORY_MINUTES`]
    /// minutes up to `now_minute` (see [`MinuteCounts`]), oldest first, as
    /// counted by this process since it started.
    pub fn history(&self, queue: &str, now_minute: u64) -> Vec<MinuteCounts> {
        let known = self
            .queues
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(queue)
            .cloned();
        let first = now_minute.saturating_sub(HISTORY_MINUTES as u64 - 1);
        (first..=now_minute)
            .map(|minute| {
                let empty = MinuteCounts {
                    minute,
                    ..MinuteCounts::default()
                };
                known.as_ref().map_or(empty, |q| {
                    let ring = q.minutes.lock().unwrap_or_else(PoisonError::into_inner);
                    let slot = ring.0[(minute % HISTORY_MINUTES as u64) as usize];
                    if slot.minute == minute { slot } else { empty }
                })
            })
            .collect()
    }

    /// Records how long one callback took, from request to mapped outcome.
    pub fn dispatch_latency(&self, queue: &str, took: Duration) {
        self.queue(queue).dispatch.observe(took);
    }

    /// The Prometheus text exposition, with queue sizes from `counts`.
    pub fn render(&self, counts: &[QueueCounts]) -> String {
        let queues = self.queues.read().unwrap_or_else(PoisonError::into_inner);
        let mut names: Vec<&String> = queues.keys().collect();
        names.sort();
        let mut out = String::with_capacity(4096);
        counter_family(
            &mut out,
            "rdq_tasks_submitted_total",
            "Tasks stored by submits.",
            names.iter().map(|n| (*n, &queues[*n].submitted)),
        );
        counter_family(
            &mut out,
            "rdq_tasks_claimed_total",
            "Tasks handed out by claims (pull workers and callback dispatch).",
            names.iter().map(|n| (*n, &queues[*n].claimed)),
        );
        let _ = writeln!(
            out,
            "# HELP rdq_outcomes_total Settles by outcome, including deferrals, releases and lease expiries.\n# TYPE rdq_outcomes_total counter"
        );
        for name in &names {
            for label in OutcomeLabel::ALL {
                let v = queues[*name].outcomes[label.index()].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "rdq_outcomes_total{{queue=\"{}\",outcome=\"{}\"}} {v}",
                    escape(name),
                    label.as_str()
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP rdq_lease_expiries_total Leases that lapsed with no outcome (closed as LEASE_EXPIRED).\n# TYPE rdq_lease_expiries_total counter"
        );
        for name in &names {
            let v =
                queues[*name].outcomes[OutcomeLabel::LeaseExpired.index()].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "rdq_lease_expiries_total{{queue=\"{}\"}} {v}",
                escape(name)
            );
        }
        let _ = writeln!(
            out,
            "# HELP rdq_queue_tasks Tasks per queue and status.\n# TYPE rdq_queue_tasks gauge"
        );
        for c in counts {
            for (status, v) in [
                ("PENDING", c.pending),
                ("IN_FLIGHT", c.in_flight),
                ("SUCCEEDED", c.succeeded),
                ("DEAD", c.dead),
            ] {
                let _ = writeln!(
                    out,
                    "rdq_queue_tasks{{queue=\"{}\",status=\"{status}\"}} {v}",
                    escape(&c.queue)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP rdq_dlq_size Dead tasks per queue.\n# TYPE rdq_dlq_size gauge"
        );
        for c in counts {
            let _ = writeln!(
                out,
                "rdq_dlq_size{{queue=\"{}\"}} {}",
                escape(&c.queue),
                c.dead
            );
        }
        let _ = writeln!(
            out,
            "# HELP rdq_dispatch_duration_seconds Callback dispatch latency, request to mapped outcome.\n# TYPE rdq_dispatch_duration_seconds histogram"
        );
        for name in &names {
            let h = &queues[*name].dispatch;
            let q = escape(name);
            let mut cumulative = 0u64;
            for (i, bound) in LATENCY_BUCKETS.iter().enumerate() {
                cumulative += h.buckets[i].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "rdq_dispatch_duration_seconds_bucket{{queue=\"{q}\",le=\"{bound}\"}} {cumulative}"
                );
            }
            let count = h.count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "rdq_dispatch_duration_seconds_bucket{{queue=\"{q}\",le=\"+Inf\"}} {count}"
            );
            let sum = h.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(
                out,
                "rdq_dispatch_duration_seconds_sum{{queue=\"{q}\"}} {sum}"
            );
            let _ = writeln!(
                out,
                "rdq_dispatch_duration_seconds_count{{queue=\"{q}\"}} {count}"
            );
        }
        out
    }
}

/// The `rdq_flow_*` families for the queues with a flow section, from
/// each one's [`FlowStatus`] at scrape time: claims the limits cut short,
/// tokens left (queues with a rate), the busiest keys' in-flight counts,
/// and the throttles' ends in Unix seconds (`key=""`: the whole queue).
pub fn render_flow(flows: &[(String, FlowStatus)]) -> String {
    let mut out = String::new();
    if flows.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "# HELP rdq_flow_throttled_claims_total Claims that flow limits cut short (a rate, a per-key limit or a throttle passed due tasks over).\n# TYPE rdq_flow_throttled_claims_total counter"
    );
    for (queue, status) in flows {
        let _ = writeln!(
            out,
            "rdq_flow_throttled_claims_total{{queue=\"{}\"}} {}",
            escape(queue),
            status.throttled_claims
        );
    }
    let _ = writeln!(
        out,
        "# HELP rdq_flow_tokens Tokens left in the queue's rate bucket.\n# TYPE rdq_flow_tokens gauge"
    );
    for (queue, status) in flows {
        if let Some(tokens) = status.tokens {
            let _ = writeln!(
                out,
                "rdq_flow_tokens{{queue=\"{}\"}} {tokens}",
                escape(queue)
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP rdq_flow_in_flight In-flight tasks of the busiest flow keys.\n# TYPE rdq_flow_in_flight gauge"
    );
    for (queue, status) in flows {
        for key in status.keys.iter().filter(|k| k.in_flight > 0) {
            let _ = writeln!(
                out,
                "rdq_flow_in_flight{{queue=\"{}\",key=\"{}\"}} {}",
                escape(queue),
                escape(&key.key),
                key.in_flight
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP rdq_flow_blocked_until_seconds When a throttle ends, in Unix seconds (key=\"\": the whole queue).\n# TYPE rdq_flow_blocked_until_seconds gauge"
    );
    for (queue, status) in flows {
        let queue_wide = status.blocked_until.map(|t| ("", t));
        let keys = status
            .keys
            .iter()
            .filter_map(|k| k.blocked_until.map(|t| (k.key.as_str(), t)));
        for (key, until) in queue_wide.into_iter().chain(keys) {
            let _ = writeln!(
                out,
                "rdq_flow_blocked_until_seconds{{queue=\"{}\",key=\"{}\"}} {}",
                escape(queue),
                escape(key),
                until.unix_ms() as f64 / 1000.0
            );
        }
    }
    out
}

/// The `rdq_source_*` series of the sources this process runs, labelled
/// `source` and `kind`: lag (left out while unknown), paused (0/1), up (1
/// while running or paused), records by outcome, and the rate. Empty when
/// it runs none.
pub fn render_sources(sources: &[rdq_source::SourceStatus]) -> String {
    let mut out = String::new();
    if sources.is_empty() {
        return out;
    }
    let labels = |s: &rdq_source::SourceStatus| {
        format!(
            "source=\"{}\",kind=\"{}\"",
            escape(&s.name),
            s.kind.as_str()
        )
    };
    let _ = writeln!(
        out,
        "# HELP rdq_source_lag Records in the source not yet ingested, as last measured.\n# TYPE rdq_source_lag gauge"
    );
    for s in sources {
        if let Some(lag) = s.lag {
            let _ = writeln!(out, "rdq_source_lag{{{}}} {lag}", labels(s));
        }
    }
    let _ = writeln!(
        out,
        "# HELP rdq_source_paused 1 while the source does not read because its queue is above the high-water mark.\n# TYPE rdq_source_paused gauge"
    );
    for s in sources {
        let _ = writeln!(
            out,
            "rdq_source_paused{{{}}} {}",
            labels(s),
            u8::from(s.paused)
        );
    }
    let _ = writeln!(
        out,
        "# HELP rdq_source_up 1 while the source runs (reading or paused), 0 while it starts, retries or has stopped.\n# TYPE rdq_source_up gauge"
    );
    for s in sources {
        let up = matches!(
            s.state,
            rdq_source::SourceState::Running | rdq_source::SourceState::Paused
        );
        let _ = writeln!(out, "rdq_source_up{{{}}} {}", labels(s), u8::from(up));
    }
    let _ = writeln!(
        out,
        "# HELP rdq_source_records_total Records the source handled, by outcome: ingested (a PENDING task), dead (a DEAD task, UNDECODABLE_SOURCE), duplicate (its task was already stored).\n# TYPE rdq_source_records_total counter"
    );
    for s in sources {
        for (outcome, n) in [
            ("ingested", s.ingested),
            ("dead", s.dead),
            ("duplicate", s.duplicates),
        ] {
            let _ = writeln!(
                out,
                "rdq_source_records_total{{{},outcome=\"{outcome}\"}} {n}",
                labels(s)
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP rdq_source_rate Records per second over the last 10 seconds.\n# TYPE rdq_source_rate gauge"
    );
    for s in sources {
        let _ = writeln!(out, "rdq_source_rate{{{}}} {}", labels(s), s.rate);
    }
    out
}

fn counter_family<'a>(
    out: &mut String,
    name: &str,
    help: &str,
    values: impl Iterator<Item = (&'a String, &'a AtomicU64)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (queue, v) in values {
        let _ = writeln!(
            out,
            "{name}{{queue=\"{}\"}} {}",
            escape(queue),
            v.load(Ordering::Relaxed)
        );
    }
}

/// The current minute, in whole minutes since the Unix epoch.
pub fn now_minute() -> u64 {
    u64::try_from(rdq_envelope::Timestamp::now().unix_ms()).unwrap_or(0) / 60_000
}

/// Label values are queue, schedule and source names (`[a-z0-9._-]`), but
/// escape anyway.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_counts_successes_and_failures_per_minute_for_the_last_hour() {
        let m = Metrics::new();
        m.outcome("q", OutcomeLabel::Success);
        m.outcome("q", OutcomeLabel::PermanentFailure);
        m.outcome("q", OutcomeLabel::LeaseExpired);
        m.outcome("q", OutcomeLabel::Deferred);
        let now = now_minute();
        let h = m.history("q", now);
        assert_eq!(h.len(), HISTORY_MINUTES);
        assert_eq!(h[0].minute, now - 59);
        let last = h[HISTORY_MINUTES - 1];
        // The minute may have turned between the outcomes and `now`.
        let total: u64 = h.iter().map(|c| c.succeeded + c.failed).sum();
        assert!(last.minute == now && total == 3, "{h:?}");
        assert_eq!(h.iter().map(|c| c.failed).sum::<u64>(), 2);
        // An hour later the same slots read as empty.
        let later = m.history("q", now + 60);
        assert!(later.iter().all(|c| c.succeeded == 0 && c.failed == 0));
        assert!(m.history("unknown", now).iter().all(|c| c.succeeded == 0));
    }

    #[test]
    fn counters_and_the_histogram_render_in_the_text_format() {
        let m = Metrics::new();
        m.submitted("emails", 3);
        m.claimed("emails", 2);
        m.outcome("emails", OutcomeLabel::Success);
        m.outcome("emails", OutcomeLabel::LeaseExpired);
        m.dispatch_latency("emails", Duration::from_millis(3));
        m.dispatch_latency("emails", Duration::from_secs(60));
        let text = m.render(&[QueueCounts {
            queue: "emails".into(),
            dead: 4,
            ..QueueCounts::default()
        }]);
        for line in [
            "rdq_tasks_submitted_total{queue=\"emails\"} 3",
            "rdq_tasks_claimed_total{queue=\"emails\"} 2",
            "rdq_outcomes_total{queue=\"emails\",outcome=\"SUCCESS\"} 1",
            "rdq_lease_expiries_total{queue=\"emails\"} 1",
            "rdq_dlq_size{queue=\"emails\"} 4",
            "rdq_queue_tasks{queue=\"emails\",status=\"DEAD\"} 4",
            "rdq_dispatch_duration_seconds_bucket{queue=\"emails\",le=\"0.0025\"} 0",
            "rdq_dispatch_duration_seconds_bucket{queue=\"emails\",le=\"0.005\"} 1",
            "rdq_dispatch_duration_seconds_bucket{queue=\"emails\",le=\"30\"} 1",
            "rdq_dispatch_duration_seconds_bucket{queue=\"emails\",le=\"+Inf\"} 2",
            "rdq_dispatch_duration_seconds_count{queue=\"emails\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        assert!(text.contains("# TYPE rdq_dispatch_duration_seconds histogram"));
    }
    #[test]
    fn sources_render_with_their_labels_and_an_unknown_lag_is_left_out() {
        let registry = rdq_source::Registry::default();
        registry.add("orders", rdq_source::Kind::Kafka, "orders");
        registry.add("events", rdq_source::Kind::Nats, "events");
        registry.update("orders", |s| {
            s.state = rdq_source::SourceState::Paused;
            s.paused = true;
            s.lag = Some(42);
            s.ingested = 7;
            s.dead = 1;
            s.duplicates = 2;
        });
        registry.error("events", "unreachable", 1);
        let text = render_sources(&registry.all());
        for line in [
            "# TYPE rdq_source_lag gauge",
            "rdq_source_lag{source=\"orders\",kind=\"kafka\"} 42",
            "rdq_source_paused{source=\"orders\",kind=\"kafka\"} 1",
            "rdq_source_paused{source=\"events\",kind=\"nats\"} 0",
            "rdq_source_up{source=\"orders\",kind=\"kafka\"} 1",
            "rdq_source_up{source=\"events\",kind=\"nats\"} 0",
            "# TYPE rdq_source_records_total counter",
            "rdq_source_records_total{source=\"orders\",kind=\"kafka\",outcome=\"ingested\"} 7",
            "rdq_source_records_total{source=\"orders\",kind=\"kafka\",outcome=\"dead\"} 1",
            "rdq_source_records_total{source=\"orders\",kind=\"kafka\",outcome=\"duplicate\"} 2",
            "rdq_source_rate{source=\"events\",kind=\"nats\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
        assert!(!text.contains("rdq_source_lag{source=\"events\""), "{text}");
        assert_eq!(render_sources(&[]), "");
    }
}
