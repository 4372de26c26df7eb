//! [`Core`]: the state every clone of a [`crate::RabbitStore`] shares with
//! the consumer tasks: the broker handle, the queues, the lease table and
//! the queue configurations; and the publishing half of the work path (declare, publish
//! a task or a dead task, finish a lease).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use rdq_engine::{EngineError, QueueConfig};

use crate::QUEUEY_SECTION;
use rdq_envelope::{Envelope, Status};
use tokio::sync::Notify;
use tracing::warn;

use crate::acks::AckOutcome;
use crate::connection::Broker;
use crate::error::RabbitError;
use crate::leases::{Lease, Leases};
use crate::queue::{QueueState, lock};
use crate::topology::{self, Mode, Names};
use crate::wire::{self};

/// The shared state behind every clone of a [`RabbitStore`], also held by
/// the consumer tasks.
pub(crate) struct Core {
    pub(crate) broker: Broker,
    pub(crate) queues: Mutex<HashMap<String, Arc<QueueState>>>,
    pub(crate) leases: Mutex<Leases>,
    pub(crate) configs: RwLock<HashMap<String, QueueConfig>>,
    pub(crate) work: Arc<Notify>,
    pub(crate) redelivered_waiting: AtomicUsize,
    pub(crate) epochs: AtomicU64,
}

impl Core {
    /// The wire format and hold queues of `queue`.
    pub(crate) fn mode(&self, queue: &str) -> Mode {
        let by_policy = self
            .configs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(queue)
            .is_some_and(|c| c.section(QUEUEY_SECTION) == Some(&serde_json::Value::Bool(true)));
        if by_policy || self.broker.options().is_queuey(queue) {
            Mode::Queuey
        } else {
            Mode::Rdq
        }
    }

    pub(crate) fn queue(&self, name: &str) -> Result<Arc<QueueState>, RabbitError> {
        let mut queues = lock(&self.queues);
        if let Some(q) = queues.get(name) {
            return Ok(Arc::clone(q));
        }
        let names = Names::new(&self.broker.options().namespace, name)
            .ok_or_else(|| RabbitError::NameTooLong(name.to_owned()))?;
        let q = Arc::new(QueueState {
            name: name.to_owned(),
            names,
            declared: tokio::sync::Mutex::new(false),
            ready: Mutex::new(BTreeMap::new()),
            arrivals: AtomicU64::new(0),
            consumer: Mutex::new(None),
            pump: Mutex::new(None),
        });
        queues.insert(name.to_owned(), Arc::clone(&q));
        Ok(q)
    }

    pub(crate) fn known_queues(&self) -> Vec<Arc<QueueState>> {
        lock(&self.queues).values().cloned().collect()
    }

    /// Declares the work and dead-letter queues once per process (the
    /// broker handle re-declares them after a reconnect).
    pub(crate) async fn declare(&self, q: &QueueState) -> Result<(), RabbitError> {
        let mut declared = q.declared.lock().await;
        if !*declared {
            let max_priority = self.broker.options().max_priority;
            self.broker
                .declare(&q.names.work, topology::work_args(max_priority))
                .await?;
            self.broker
                .declare(&q.names.dead, topology::dead_args())
                .await?;
            *declared = true;
        }
        Ok(())
    }

    /// Publishes a PENDING task: straight onto its queue when due now, else
    /// into the hold queue of its delay rounded up to `granularity`.
    pub(crate) async fn publish_task(
        &self,
        q: &QueueState,
        env: &Envelope,
        delay_ms: u64,
        granularity: Duration,
    ) -> Result<(), EngineError> {
        let mode = self.mode(&q.name);
        let out = wire::encode_task(env, mode)?;
        if delay_ms == 0 {
            self.broker
                .publish(&q.names.work, &out.body, out.properties)
                .await?;
            return Ok(());
        }
        let step = u64::try_from(granularity.as_millis()).unwrap_or(u64::MAX);
        let ttl =
            topology::hold_ttl_ms(delay_ms, step).ok_or(RabbitError::DelayTooLong(delay_ms))?;
        let hold = q.names.hold(mode, ttl);
        self.broker
            .declare_hold(&hold, ttl, topology::hold_args(mode, &q.names.work, ttl))
            .await?;
        self.broker
            .publish(&hold, &out.body, out.properties)
            .await?;
        Ok(())
    }

    /// Publishes a DEAD task to `q.dead` with the death headers.
    pub(crate) async fn publish_dead(
        &self,
        q: &QueueState,
        env: &Envelope,
    ) -> Result<(), EngineError> {
        let out = wire::encode_dead(env, self.mode(&q.name), &q.names.work)?;
        self.broker
            .publish(&q.names.dead, &out.body, out.properties)
            .await?;
        Ok(())
    }

    pub(crate) async fn finish(&self, lease: Lease, next: Envelope) -> Result<(), EngineError> {
        let id = next.id;
        if !lease.delivery.acker.usable() {
            return Err(EngineError::LeaseLost(id));
        }
        let q = Arc::clone(&lease.queue);
        let published = match next.status {
            Status::Succeeded | Status::InFlight => Ok(()),
            Status::Pending => {
                let now = match (next.attempts.last(), lease.envelope.open_attempt()) {
                    (Some(last), Some(open)) if last.attempt_no == open.attempt_no => {
                        last.finished_at.unwrap_or_else(|| lease.estimated_now())
                    }
                    _ => lease.estimated_now(),
                };
                let delay = next.next_attempt_at.map_or(0, |due| {
                    u64::try_from(due.unix_ms() - now.unix_ms()).unwrap_or(0)
                });
                let options = self.broker.options();
                let granularity = if next.deferral_count > lease.envelope.deferral_count {
                    options.defer_granularity
                } else {
                    options.retry_granularity
                };
                self.publish_task(&q, &next, delay, granularity).await
            }
            Status::Dead => self.publish_dead(&q, &next).await,
        };
        if let Err(e) = published {
            // Nothing was acked: the lease stays, for a later settle or the reaper.
            if lease.delivery.acker.usable() {
                lock(&self.leases).held.insert(id, lease);
            }
            return Err(e);
        }
        let succeeded = next.status == Status::Succeeded;
        match lease.delivery.ack().await {
            AckOutcome::Confirmed => {
                if succeeded {
                    lock(&self.leases).succeeded(id);
                }
                Ok(())
            }
            // Never sent: the broker gives the task back.
            AckOutcome::NotSent if succeeded => Err(EngineError::LeaseLost(id)),
            AckOutcome::Unconfirmed if succeeded => {
                // It may have ended: if it comes back here it is acked
                // again; the caller hears that the outcome is unknown.
                lock(&self.leases).succeeded(id);
                Err(EngineError::Unavailable(format!(
                    "the broker's connection failed before it confirmed the ack of task {id}: the task may have ended, or may run again"
                )))
            }
            AckOutcome::NotSent | AckOutcome::Unconfirmed => {
                // The successor is published; the original may come back.
                // Here it is acked and dropped; another process would count
                // it as a lapsed attempt: a duplicate, never a loss.
                lock(&self.leases).superseded(id, lease.message_claims);
                warn!(task = %id, "the ack after a successor's publish was not confirmed; the broker may redeliver the original");
                Ok(())
            }
        }
    }
}
