//! [`RabbitStore`]: the storage SPI on RabbitMQ. See the crate docs for the
//! mapping; this file is the public handle and the `Store` impl (submit,
//! claim, settle, expired leases; the DLQ operations are in `dlq`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use rdq_engine::LeaseToken;
use rdq_engine::{
    ClaimRequest, ConfigStore, EngineError, LeasedUpdate, ListQuery, NewTask, Page, QueueConfig,
    QueueDepths, QueueDepthsSource, Redrive, RedriveRequest, Removal, Store, Submitted,
    TaskListing, WorkCapabilities,
};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use tokio::sync::{Notify, oneshot};
use tracing::warn;

use crate::connection::Broker;
use crate::consumer::lease;
use crate::core::Core;
use crate::error::RabbitError;
use crate::leases::{Lease, Leases};
use crate::options::RabbitOptions;
use crate::queue::{Flush, ReadyKey, Request, lock};
use crate::topology::Names;

/// How long a claim waits for its consumer to catch up with the broker
/// before answering with what it has (only an outage makes it wait long).
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Most consumer flushes one claim makes while the queue has messages
/// waiting but none has reached this consumer yet.
const FLUSH_ROUNDS: usize = 5;

/// Closes the broker handle when the last [`RabbitStore`] clone drops, which
/// ends the consumer tasks (they hold only the [`Core`]).
struct Owner {
    core: Arc<Core>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.core.broker.close();
    }
}

/// The RabbitMQ store. Cheap to clone; the connection closes when the last
/// clone drops (or at [`RabbitStore::close`]).
#[derive(Clone)]
pub struct RabbitStore {
    owner: Arc<Owner>,
}

impl std::fmt::Debug for RabbitStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitStore")
            .field("broker", &self.core().broker)
            .finish_non_exhaustive()
    }
}

impl RabbitStore {
    /// A store for `url` (`amqp://…`, options in the query string; see
    /// [`RabbitOptions::from_url`]). Nothing is dialled yet: the first
    /// operation connects, and fails fast if the broker is not there.
    pub fn from_url(url: &str) -> Result<Self, RabbitError> {
        Ok(Self::with_options(RabbitOptions::from_url(url)?))
    }

    /// A store with explicit options; connects on first use.
    pub fn with_options(options: RabbitOptions) -> Self {
        Self {
            owner: Arc::new(Owner {
                core: Arc::new(Core {
                    broker: Broker::new(options),
                    queues: Mutex::new(HashMap::new()),
                    leases: Mutex::new(Leases::default()),
                    configs: RwLock::new(HashMap::new()),
                    work: Arc::new(Notify::new()),
                    redelivered_waiting: AtomicUsize::new(0),
                    epochs: AtomicU64::new(0),
                }),
            }),
        }
    }

    /// Connects now: [`RabbitStore::from_url`] plus a first dial that fails
    /// fast when the broker cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, RabbitError> {
        let store = Self::from_url(url)?;
        store.core().broker.connection().await?;
        Ok(store)
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.owner.core
    }

    /// The options in use.
    pub fn options(&self) -> &RabbitOptions {
        self.core().broker.options()
    }

    /// True while the store holds a live connection (for health checks; it
    /// never dials).
    pub fn is_connected(&self) -> bool {
        self.core().broker.is_connected()
    }

    /// Connections made so far: 1 after the first dial, +1 per reconnect.
    pub fn connections(&self) -> u64 {
        self.core().broker.generation()
    }

    /// Sets the configuration of `queue` for this process (what `put_config` does).
    pub fn set_config(&self, queue: &str, config: QueueConfig) {
        self.core()
            .configs
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(queue.to_owned(), config);
    }

    /// The broker queues of rdq queue `queue` (work and dead-letter).
    pub fn broker_names(&self, queue: &str) -> Result<Names, RabbitError> {
        Names::new(&self.options().namespace, queue)
            .ok_or_else(|| RabbitError::NameTooLong(queue.to_owned()))
    }

    /// Every broker queue this store declared (work, dead-letter and hold
    /// queues), for cleanup tooling and tests.
    pub fn declared_queues(&self) -> Vec<String> {
        self.core().broker.declared_queues()
    }

    /// Deletes broker queues by name; missing ones are skipped.
    pub async fn delete_broker_queues(&self, names: &[String]) -> Result<(), RabbitError> {
        self.core().broker.delete_queues(names).await
    }

    /// Ready messages in a broker queue, `None` when it does not exist.
    pub async fn depth(&self, broker_queue: &str) -> Result<Option<u32>, RabbitError> {
        self.core().broker.depth(broker_queue).await
    }

    /// Closes the connection; later operations fail with `STORE_UNAVAILABLE`.
    /// Unacked deliveries go back to their queues (the broker redelivers them).
    pub fn close(&self) {
        self.core().broker.close();
    }
}

/// Submits one task: declares its queue (once) and publishes it, into the
/// dead-letter queue for a DLQ import.
async fn submit_one(
    core: &Core,
    task: NewTask,
    granularity: Duration,
) -> Result<Submitted, EngineError> {
    if task.idempotency_key.is_some() {
        return Err(EngineError::Unsupported(
            "a RabbitMQ store cannot honour idempotency keys (a broker cannot look a queued task up)".into(),
        ));
    }
    let env = task.envelope;
    let q = core.queue(&env.queue)?;
    core.declare(&q).await?;
    let delay = env.next_attempt_at.map_or(0, |due| {
        u64::try_from(due.unix_ms() - env.created_at.unix_ms()).unwrap_or(0)
    });
    if env.status == Status::Dead {
        // A DLQ import: the task goes where dead tasks live.
        core.publish_dead(&q, &env).await?;
    } else {
        core.publish_task(&q, &env, delay, granularity).await?;
    }
    lock(&core.leases).saw(env.id);
    Ok(Submitted::Created(env))
}

#[async_trait]
impl Store for RabbitStore {
    fn capabilities(&self) -> WorkCapabilities {
        WorkCapabilities {
            idempotent_submit: false,
            claim_max_in_flight: false,
            claim_flow: false,
            // At least once: a broker crash can lose an ack it answered,
            // and a retry's successor is published before the original's
            // ack, which a network fault can lose (docs/stores/rabbitmq.md).
            ends_once: false,
            // A broker cannot find the message that holds a key.
            unique: false,
        }
    }

    fn work_signal(&self) -> Option<Arc<Notify>> {
        Some(Arc::clone(&self.core().work))
    }

    /// Ready while the broker connection is up (asking never dials).
    async fn ready(&self) -> Result<(), EngineError> {
        // Connects on first use like every other call (and after an outage
        // waits for the reconnect), so a fresh process is ready once the
        // broker answers.
        self.core()
            .broker
            .connection()
            .await
            .map(drop)
            .map_err(|e| {
                EngineError::Unavailable(format!(
                    "the RabbitMQ store is not connected to the broker: {e}"
                ))
            })
    }

    async fn stop_claiming(&self, queue: &str) {
        let core = self.core();
        let Some(q) = lock(&core.queues).get(queue).cloned() else {
            return;
        };
        let pump = lock(&q.pump).clone().filter(|tx| !tx.is_closed());
        let Some(pump) = pump else { return };
        let (reply, done) = oneshot::channel();
        if pump.send(Request::Stop(reply)).await.is_ok() {
            let _ = tokio::time::timeout(FLUSH_WAIT * 5, done).await;
        }
    }

    async fn submit(&self, tasks: Vec<NewTask>) -> Vec<Result<Submitted, EngineError>> {
        let core = self.core();
        let granularity = core.broker.options().retry_granularity;
        let op_timeout = core.broker.options().op_timeout;
        let publishes = tasks.into_iter().map(|task| async move {
            // Its declarations and its publish together within one
            // operation timeout, not one each.
            let queue = task.envelope.queue.clone();
            tokio::time::timeout(op_timeout, submit_one(core, task, granularity))
                .await
                .unwrap_or_else(|_| {
                    Err(
                        RabbitError::timed_out(format!("the submit to `{queue}`"), op_timeout)
                            .into(),
                    )
                })
        });
        futures::future::join_all(publishes).await
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Envelope>, EngineError> {
        request.refuse_unsupported(self.capabilities())?;
        let ClaimRequest {
            ref queue,
            max,
            lease_ms,
            now,
            ..
        } = *request;
        if max == 0 {
            return Ok(Vec::new());
        }
        let core = self.core();
        let q = core.queue(queue)?;
        let flush = core.pump(&q);
        core.drain(&q);
        let mut claimed = core.take(&q, max, lease_ms, now);
        // Short of `max`: let the consumer catch up with what the broker
        // already sent (one round trip on its channel). While nothing is
        // found but the queue still has messages waiting (the broker is
        // about to push them, e.g. after acks freed prefetch credit), look
        // again a few times before answering empty. Not when the consumer
        // already holds all the deliveries its prefetch allows: the broker
        // sends more only after acks (the consumer wakes the worker then),
        // and under load a round trip per claim would cost the broker more
        // than the deliveries themselves.
        for round in 0..FLUSH_ROUNDS {
            if claimed.len() >= max || core.credit_used_up(&q) {
                break;
            }
            let (reply, answer) = oneshot::channel();
            let count = claimed.is_empty() && round > 0;
            if flush
                .send(Request::Flush(Flush { count, reply }))
                .await
                .is_err()
            {
                break;
            }
            let waiting = match tokio::time::timeout(FLUSH_WAIT, answer).await {
                Ok(Ok(waiting)) => waiting,
                _ => break,
            };
            core.drain(&q);
            claimed.extend(core.take(&q, max - claimed.len(), lease_ms, now));
            if !claimed.is_empty() || (count && waiting == 0) {
                break;
            }
            if count {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        Ok(claimed)
    }

    async fn settle(&self, updates: Vec<LeasedUpdate>) -> Vec<Result<(), EngineError>> {
        enum Plan {
            Done(Result<(), EngineError>),
            Finish(Box<(Lease, Envelope)>),
        }
        let core = self.core();
        let plans: Vec<Plan> = {
            let mut leases = lock(&core.leases);
            updates
                .into_iter()
                .map(|update| {
                    let id = update.envelope.id;
                    let current = leases.held.get(&id).map(|l| l.token);
                    match current {
                        None if leases.has_seen(id) => Plan::Done(Err(EngineError::LeaseLost(id))),
                        None => Plan::Done(Err(EngineError::TaskNotFound(id))),
                        Some(token) if token != update.expected => {
                            Plan::Done(Err(EngineError::LeaseLost(id)))
                        }
                        Some(_) if update.envelope.status == Status::InFlight => {
                            // An extension: the lease is ours to keep.
                            if let Some(l) = leases.held.get_mut(&id) {
                                l.envelope = update.envelope;
                            }
                            Plan::Done(Ok(()))
                        }
                        Some(_) => match leases.held.remove(&id) {
                            Some(lease) => Plan::Finish(Box::new((lease, update.envelope))),
                            None => Plan::Done(Err(EngineError::LeaseLost(id))),
                        },
                    }
                })
                .collect()
        };
        futures::future::join_all(plans.into_iter().map(|plan| async move {
            match plan {
                Plan::Done(result) => result,
                Plan::Finish(finish) => {
                    let (lease, next) = *finish;
                    core.finish(lease, next).await
                }
            }
        }))
        .await
    }

    async fn leased(&self, leases: &[(TaskId, LeaseToken)]) -> Vec<Result<Envelope, EngineError>> {
        // A broker cannot look a task up; the leases this process holds are
        // exactly the tasks a settle here can name.
        let table = lock(&self.core().leases);
        leases
            .iter()
            .map(|&(id, token)| match table.held.get(&id) {
                Some(lease) if lease.token == token => Ok(lease.envelope.clone()),
                Some(_) => Err(EngineError::LeaseLost(id)),
                None if table.has_seen(id) => Err(EngineError::LeaseLost(id)),
                None => Err(EngineError::TaskNotFound(id)),
            })
            .collect()
    }

    async fn expired_leases(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Envelope>, EngineError> {
        let core = self.core();
        let mut leases = lock(&core.leases);
        let mut out: Vec<Envelope> = leases
            .held
            .values()
            .filter(|l| l.envelope.lease_expires_at.is_some_and(|end| end <= now))
            .take(limit)
            .map(|l| l.envelope.clone())
            .collect();
        if out.len() < limit && core.redelivered_waiting.load(Ordering::Relaxed) > 0 {
            // A redelivery means the previous holder died with the task in
            // hand: its lease lapsed. Hold it as a lease that ended now, for
            // the engine to close as LEASE_EXPIRED like any other.
            for q in core.known_queues() {
                let mut ready = lock(&q.ready);
                let keys: Vec<ReadyKey> = ready
                    .iter()
                    .filter(|(_, w)| w.redelivered && !leases.held.contains_key(&w.envelope.id))
                    .map(|(k, _)| *k)
                    .take(limit - out.len())
                    .collect();
                for key in keys {
                    let Some(w) = ready.remove(&key) else {
                        continue;
                    };
                    core.redelivered_waiting.fetch_sub(1, Ordering::Relaxed);
                    match lease(w, 0, now, &q) {
                        Ok(l) => {
                            out.push(l.envelope.clone());
                            leases.saw(l.envelope.id);
                            leases.held.insert(l.envelope.id, l);
                        }
                        Err(refused) => {
                            let (mut w, e) = *refused;
                            warn!(task = %w.envelope.id, error = %e, "a redelivered task could not be leased");
                            w.redelivered = false;
                            ready.insert(key, w);
                        }
                    }
                }
                if out.len() >= limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    rdq_engine::offer_extensions!(
        TaskListing,
        QueueDepthsSource,
        Redrive,
        Removal,
        ConfigStore
    );
}

#[async_trait]
impl TaskListing for RabbitStore {
    async fn list(&self, query: &ListQuery) -> Result<Page, EngineError> {
        crate::dlq::list(self.core(), query).await
    }
}

#[async_trait]
impl QueueDepthsSource for RabbitStore {
    async fn queue_names(&self) -> Result<Vec<String>, EngineError> {
        // The queues this process declared or holds a policy for: a broker
        // has no registry of rdq queues to ask.
        let core = self.core();
        let mut names: Vec<String> = core.known_queues().iter().map(|q| q.name.clone()).collect();
        names.extend(
            core.configs
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .keys()
                .cloned(),
        );
        names.sort();
        names.dedup();
        Ok(names)
    }

    async fn depths(&self, queue: &str) -> Result<Option<QueueDepths>, EngineError> {
        rdq_envelope::validate_queue_name(queue)?;
        let names = self.broker_names(queue)?;
        let broker = &self.core().broker;
        let Some(ready) = broker.depth(&names.work).await? else {
            return Ok(None);
        };
        let dead = broker.depth(&names.dead).await?.unwrap_or(0);
        Ok(Some(QueueDepths {
            queue: queue.to_owned(),
            ready: u64::from(ready),
            dead: u64::from(dead),
        }))
    }
}

#[async_trait]
impl Redrive for RabbitStore {
    async fn redrive(
        &self,
        request: &RedriveRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError> {
        crate::dlq::redrive(self.core(), request, now).await
    }
}

#[async_trait]
impl Removal for RabbitStore {
    async fn purge(&self, queue: &str, status: Status, dry_run: bool) -> Result<u64, EngineError> {
        crate::dlq::purge(self.core(), queue, status, dry_run).await
    }

    async fn delete(&self, id: TaskId) -> Result<(), EngineError> {
        crate::dlq::delete(self.core(), id).await
    }
}

#[async_trait]
impl ConfigStore for RabbitStore {
    async fn get_config(&self, queue: &str) -> Result<Option<QueueConfig>, EngineError> {
        Ok(self
            .core()
            .configs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(queue)
            .cloned())
    }

    async fn put_config(&self, queue: &str, config: &QueueConfig) -> Result<(), EngineError> {
        self.set_config(queue, config.clone());
        Ok(())
    }

    /// A broker holds messages, not settings: the configuration lives in
    /// this process only.
    fn process_local(&self) -> bool {
        true
    }
}
