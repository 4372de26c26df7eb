//! Shutdown as one small explicit mechanism: a watch channel that flips once.

use tokio::sync::watch;

/// Tells running loops to stop. Cloneable; dropping every trigger does not
/// signal shutdown, only [`ShutdownTrigger::trigger`] does.
#[derive(Debug, Clone)]
pub struct ShutdownTrigger(watch::Sender<bool>);

/// What a loop watches to learn it should stop.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

/// A connected trigger and signal.
pub fn shutdown_channel() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger(tx), Shutdown(rx))
}

impl ShutdownTrigger {
    /// Asks every loop watching the matching [`Shutdown`] to stop.
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// True once shutdown was triggered.
    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes when shutdown is triggered (at once if it already was).
    pub async fn wait(&mut self) {
        // An error means every trigger is gone: nobody can stop us, so wait forever.
        if self.0.wait_for(|&stop| stop).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
