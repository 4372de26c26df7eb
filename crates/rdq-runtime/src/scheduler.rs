//! The scheduler: fires periodic schedules' due times on every node, with
//! no leader ([`run_scheduler`]).
//!
//! Each tick is one [`Engine::fire_due`]: every schedule is planned from its
//! stored cursor and fired in one atomic store step that moves the cursor
//! only from the value read. Many nodes ticking at once therefore submit
//! each due time once: the others' steps find the cursor moved and change
//! nothing, and the fire's idempotency key stops even a retried step.
//!
//! Clocks: a node plans with its own clock. One that runs ahead by `d`
//! submits due times up to `d` early, one that runs behind leaves them to
//! the nodes on time (or fires them up to `d` late when it is alone); no
//! clock can make a due time fire twice or not at all. Keep the nodes'
//! clocks within one tick of each other (NTP does far better), so that a
//! due time counts as on time (within the grace, the tick) on every node.

use std::time::Duration;

use rdq_engine::{Engine, FireReport};
use tracing::{debug, warn};

use crate::shutdown::Shutdown;

/// How often the scheduler ticks.
#[derive(Debug, Clone, Copy)]
pub struct SchedulerConfig {
    /// The longest pause between ticks (default 1 s): a tick comes sooner
    /// when a schedule falls due sooner, at its due time. Also the grace: a
    /// due time at most this late is on time, so every catch-up policy
    /// submits it.
    pub interval: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
        }
    }
}

impl SchedulerConfig {
    /// The grace of each tick, in ms: the interval.
    pub fn grace_ms(&self) -> u64 {
        u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX)
    }
}

/// Fires schedules' due times every `config.interval` until shutdown.
pub async fn run_scheduler(engine: Engine, config: SchedulerConfig, shutdown: Shutdown) {
    run_scheduler_with(engine, config, shutdown, |_: &FireReport| {}).await;
}

/// [`run_scheduler`], handing every tick's report (fires, skips by reason,
/// races lost, failures) to `on_tick`: where metrics are counted.
pub async fn run_scheduler_with(
    engine: Engine,
    config: SchedulerConfig,
    mut shutdown: Shutdown,
    mut on_tick: impl FnMut(&FireReport) + Send,
) {
    loop {
        let mut wait = config.interval;
        if let Some(report) = tick_schedules(&engine, config).await {
            wait = until_next(&report, engine.now().unix_ms(), config.interval);
            on_tick(&report);
        }
        tokio::select! {
            () = shutdown.wait() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// How long a scheduler sleeps after a tick at `now_ms`: until the earliest
/// next due time when that comes before a whole `interval`, so a due time
/// fires as it falls due rather than up to a tick later; else `interval`.
pub fn until_next(report: &FireReport, now_ms: i64, interval: Duration) -> Duration {
    match report.next_due_ms {
        Some(next) if next > now_ms => {
            let ms = u64::try_from(next - now_ms).unwrap_or(u64::MAX);
            Duration::from_millis(ms).min(interval)
        }
        _ => interval,
    }
}

/// One tick at the engine's now; `None` when it failed as a whole (logged).
pub async fn tick_schedules(engine: &Engine, config: SchedulerConfig) -> Option<FireReport> {
    match engine.fire_due(engine.now(), config.grace_ms()).await {
        Ok(report) => {
            for failure in &report.failed {
                warn!(schedule = %failure.schedule, error = %failure.error, "a schedule could not fire");
            }
            if !report.fired.is_empty() || !report.skipped.is_empty() {
                debug!(
                    fired = report.fired.len(),
                    skipped = ?report.skipped_by_reason(),
                    raced = report.raced,
                    "scheduler tick"
                );
            }
            Some(report)
        }
        Err(e) => {
            warn!(error = %e, "scheduler tick failed");
            None
        }
    }
}
