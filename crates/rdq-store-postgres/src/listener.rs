//! One connection per store that `LISTEN`s: how an idle worker on one node
//! learns within milliseconds that another node made work due, without
//! polling the database.
//!
//! Writes that make tasks claimable (submits, retries due now, releases,
//! reaps, redrives) queue a `NOTIFY` in their own transaction, so it is sent
//! exactly when the work becomes visible. Payloads are `w ORIGIN QUEUE` (work),
//! `c ORIGIN QUEUE` (a stored policy changed) and `x ORIGIN ID…` (running
//! tasks asked to stop, relayed to `Shared::cancels`); a node ignores its own
//! (it already woke its workers, or dropped its cache, itself). The worker
//! loop still polls slowly as a fallback: a notification lost with a dropped
//! connection costs at most one poll interval, and tasks that become due by
//! the clock (a backoff ending) are found by that poll.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Notification};

use crate::Shared;

/// How often an idle listening connection is checked for life.
const PING_EVERY: Duration = Duration::from_secs(15);

/// How long a ping may take before the connection is given up for dead.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs until aborted: listens, and after a lost connection listens again.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut backoff = Duration::from_millis(50);
    loop {
        match listen(&shared).await {
            Ok(()) => backoff = Duration::from_millis(50),
            Err(e) => {
                tracing::warn!(schema = %shared.schema, error = %e, "cannot listen for rdq notifications; retrying");
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
        tokio::time::sleep(backoff).await;
    }
}

/// One listening session: returns when its connection ends.
async fn listen(shared: &Shared) -> Result<(), crate::error::Failure> {
    let (client, mut connection) = crate::tls::connect(&shared.config, &shared.tls).await?;
    let (tx, mut rx) = mpsc::unbounded_channel::<Notification>();
    let driver = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(n).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "the listening connection failed");
                    return;
                }
            }
        }
    });
    let result = async {
        client
            .batch_execute(&format!("LISTEN {}", shared.channel))
            .await?;
        // From here on no change goes unnoticed; anything that happened while
        // not listening may have been missed, so forget and look again.
        shared.policies.set_listening(true);
        shared.work.notify_waiters();
        tracing::debug!(schema = %shared.schema, "listening for rdq notifications");
        loop {
            tokio::select! {
                n = rx.recv() => match n {
                    Some(n) => handle(shared, n.payload()),
                    None => return Ok(()),
                },
                () = tokio::time::sleep(PING_EVERY) => {
                    // A connection that died silently (a partition, a failed-over
                    // host) may never answer: treat silence as death.
                    match tokio::time::timeout(PING_TIMEOUT, client.batch_execute("SELECT 1")).await {
                        Ok(answer) => answer?,
                        Err(_) => {
                            tracing::warn!(schema = %shared.schema, "the listening connection stopped answering; reconnecting");
                            return Ok(());
                        }
                    }
                }
            }
        }
    }
    .await;
    shared.policies.set_listening(false);
    driver.abort();
    result
}

/// Acts on one notification payload.
fn handle(shared: &Shared, payload: &str) {
    let mut parts = payload.splitn(3, ' ');
    let (Some(kind), Some(origin)) = (parts.next(), parts.next()) else {
        return;
    };
    if origin == shared.origin {
        return;
    }
    match kind {
        "w" => shared.work.notify_waiters(),
        "c" => shared.policies.invalidate(),
        "x" => {
            let ids = parts.next().unwrap_or_default().split(' ');
            for id in ids.filter_map(rdq_envelope::TaskId::parse) {
                // No receiver is fine: nobody here holds the task.
                let _ = shared.cancels.send(id);
            }
        }
        _ => {}
    }
}
