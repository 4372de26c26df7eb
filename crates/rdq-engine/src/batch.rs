//! Group commit for stores that write over a network: requests that arrive
//! while a batch is being written go into the next batch, which the store
//! writes in one statement or script (PostgreSQL: one multi-row statement
//! and one commit; Redis: one script call per queue).
//!
//! Sixty-four producers each submitting one task become, under load, a
//! stream of batches of dozens of tasks each: the round trip and the commit
//! are shared. When load is light a batch is whatever one request brought,
//! so batching never adds a wait. A few batches may be in flight at once so
//! that one batch's commit overlaps the next one's write.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc};

/// The sending side: cheap to clone; the batching task ends when every
/// sender is gone and the queue is drained.
pub struct Batcher<R> {
    tx: mpsc::UnboundedSender<R>,
}

impl<R: Send + 'static> Batcher<R> {
    /// Starts the batching task: it takes whatever requests are queued, up
    /// to `max_weight` units (a request weighs what `weight` says; one
    /// heavier than that goes alone), and hands them to `run`, with at most
    /// `in_flight` batches running at once.
    pub fn start<F, Fut>(
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
                let mut batch = vec![first];
                while load < max_weight {
                    match rx.try_recv() {
                        Ok(r) if load + weight(&r) > max_weight => {
                            carried = Some(r);
                            break;
                        }
                        Ok(r) => {
                            load += weight(&r);
                            batch.push(r);
                        }
                        Err(_) => break,
                    }
                }
                let run = Arc::clone(&run);
                tokio::spawn(async move {
                    run(batch).await;
                    drop(permit);
                });
            }
        });
        Self { tx }
    }

    /// Queues a request; gives it back if the batching task has stopped.
    pub fn send(&self, request: R) -> Result<(), R> {
        self.tx.send(request).map_err(|e| e.0)
    }
}
