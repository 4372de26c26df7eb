//! Grouped writes: submits (and settles) that arrive while a group is being
//! written go into the next group, which is one script call per queue.
//!
//! Sixty-four producers each submitting one task become, under load, a
//! stream of scripts writing dozens of tasks each: Redis runs one script
//! instead of dozens, and the store makes one round trip instead of dozens.
//! When load is light a group is whatever one request brought, so grouping
//! never adds a wait. A few groups may be in flight at once.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc};

/// The sending side; the grouping task ends when the last sender drops.
pub(crate) struct Batcher<R> {
    tx: mpsc::UnboundedSender<R>,
}

impl<R: Send + 'static> Batcher<R> {
    /// Starts the grouping task: it takes whatever requests are queued, up
    /// to `max_weight` units (a request weighs what `weight` says), and hands
    /// them to `run`, with at most `in_flight` groups running at once.
    pub(crate) fn start<F, Fut>(
        max_weight: usize,
        in_flight: usize,
        weight: fn(&R) -> usize,
        run: F,
    ) -> Self
    where
        F: Fn(Vec<R>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<R>();
        let permits = Arc::new(Semaphore::new(in_flight.max(1)));
        let run = Arc::new(run);
        tokio::spawn(async move {
            let mut carried: Option<R> = None;
            loop {
                let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                    return;
                };
                let first = match carried.take() {
                    Some(r) => r,
                    None => match rx.recv().await {
                        Some(r) => r,
                        None => return,
                    },
                };
                let mut load = weight(&first);
                let mut group = vec![first];
                while load < max_weight {
                    match rx.try_recv() {
                        Ok(r) if load + weight(&r) > max_weight => {
                            carried = Some(r);
                            break;
                        }
                        Ok(r) => {
                            load += weight(&r);
                            group.push(r);
                        }
                        Err(_) => break,
                    }
                }
                let run = Arc::clone(&run);
                tokio::spawn(async move {
                    run(group).await;
                    drop(permit);
                });
            }
        });
        Self { tx }
    }

    /// Queues a request; gives it back if the grouping task has stopped.
    pub(crate) fn send(&self, request: R) -> Result<(), R> {
        self.tx.send(request).map_err(|e| e.0)
    }
}
