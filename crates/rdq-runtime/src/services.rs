//! Background services: the lease reaper and the retention pruner. Each is a
//! small loop around one engine call, safe to run on every node at once (the
//! store's compare-and-swap decides who reaps a lease; pruning is idempotent).

use std::time::Duration;

use rdq_engine::Engine;
use rdq_envelope::Envelope;
use tracing::{debug, warn};

use crate::shutdown::Shutdown;

/// How often the reaper looks for lapsed leases, and how many it takes per pass.
#[derive(Debug, Clone, Copy)]
pub struct ReaperConfig {
    /// Pause between passes that found nothing (default 500 ms).
    pub interval: Duration,
    /// Leases closed per store call (default 500).
    pub batch: usize,
}

impl Default for ReaperConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(500),
            batch: 500,
        }
    }
}

/// Closes lapsed leases as `LEASE_EXPIRED` until shutdown.
pub async fn run_reaper(engine: Engine, config: ReaperConfig, shutdown: Shutdown) {
    run_reaper_with(engine, config, shutdown, |_: &[Envelope]| {}).await;
}

/// [`run_reaper`], handing every pass's reaped tasks (their new state: PENDING
/// for a retry, DEAD once attempts are spent) to `on_reaped`; the SDK's
/// dead-letter hook learns of lease-expiry deaths this way.
pub async fn run_reaper_with(
    engine: Engine,
    config: ReaperConfig,
    mut shutdown: Shutdown,
    mut on_reaped: impl FnMut(&[Envelope]) + Send,
) {
    loop {
        let reaped = match engine.reap_expired(config.batch).await {
            Ok(reaped) => {
                if !reaped.is_empty() {
                    on_reaped(&reaped);
                }
                reaped.len()
            }
            Err(e) => {
                warn!(error = %e, "lease reaper pass failed");
                0
            }
        };
        if reaped > 0 {
            debug!(reaped, "closed lapsed leases");
        }
        if reaped < config.batch {
            tokio::select! {
                () = shutdown.wait() => return,
                () = tokio::time::sleep(config.interval) => {}
            }
        } else if shutdown.is_triggered() {
            return;
        }
    }
}

/// How often the pruner removes SUCCEEDED tasks past their queue's retention.
#[derive(Debug, Clone, Copy)]
pub struct PrunerConfig {
    /// Pause between passes (default 30 s).
    pub interval: Duration,
    /// Tasks removed per queue per pass (default 10,000).
    pub batch: usize,
}

impl Default for PrunerConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(30),
            batch: 10_000,
        }
    }
}

/// Removes SUCCEEDED tasks older than their queue's `retain_succeeded_ms` until shutdown.
pub async fn run_pruner(engine: Engine, config: PrunerConfig, mut shutdown: Shutdown) {
    loop {
        match engine.prune(config.batch).await {
            Ok(0) => {}
            Ok(removed) => debug!(removed, "pruned succeeded tasks"),
            Err(e) => warn!(error = %e, "retention pruner pass failed"),
        }
        tokio::select! {
            () = shutdown.wait() => return,
            () = tokio::time::sleep(config.interval) => {}
        }
    }
}
