//! [`RabbitStore`]: the storage SPI on RabbitMQ. See the crate docs for the
//! mapping; this file is the work path (submit, claim, settle, expired
//! leases) and the consumers that feed claims.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use lapin::Acker;
use lapin::message::Delivery;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Consumer};
use rdq_engine::{
    Capabilities, EngineError, LeasedUpdate, ListQuery, NewTask, Page, QueueDepths, QueuePolicy,
    RedriveRequest, Store, Submitted, machine,
};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use tokio::sync::{Notify, mpsc, oneshot};
use tracing::{debug, warn};

use crate::acks::Acks;
use crate::connection::Broker;
use crate::error::RabbitError;
use crate::leases::{Lease, Leases};
use crate::options::RabbitOptions;
use crate::topology::{self, Mode, Names, REASON_MALFORMED};
use crate::wire::{self, Incoming};

/// How long a claim waits for its consumer to catch up with the broker
/// before answering with what it has (only an outage makes it wait long).
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Most consumer flushes one claim makes while the queue has messages
/// waiting but none has reached this consumer yet.
const FLUSH_ROUNDS: usize = 5;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data with no invariants a panic could break half-way.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Claim order among received deliveries: higher priority first, then
/// earlier due, then older id (the SPI's order, within what the broker has
/// pushed to this consumer), then arrival.
type ReadyKey = (Reverse<u8>, i64, u128, u64);

/// A claim asking the consumer to catch up: a round trip on the consumer's
/// channel, after which every delivery the broker sent before it is in the
/// buffer. With `count`, the round trip is a passive declare and the answer
/// is how many messages still wait in the queue (else 0).
struct Flush {
    count: bool,
    reply: oneshot::Sender<u32>,
}

/// What a queue's consumer task is asked to do.
enum Request {
    /// Catch up with the broker (see [`Flush`]); resumes a stopped consumer.
    Flush(Flush),
    /// Stop consuming and hand the buffer back ([`Store::stop_claiming`]).
    Stop(oneshot::Sender<()>),
}

/// A delivery received and not yet claimed.
struct Waiting {
    envelope: Envelope,
    delivery: Held,
    redelivered: bool,
}

/// An unacknowledged delivery: how to ack it, and the subscription it
/// belongs to (when that ends, the broker requeues the delivery).
pub(crate) struct Held {
    pub(crate) acker: Acker,
    pub(crate) tag: u64,
    pub(crate) subscription: Subscription,
}

impl Held {
    /// Acks the delivery (coalesced with its neighbours); true once the ack
    /// is on its way, false when the subscription ended first.
    pub(crate) async fn ack(self) -> bool {
        self.subscription.acks.ack(self.tag, self.acker).await
    }
}

/// One consumer subscription: its number and its ack queue.
#[derive(Clone)]
pub(crate) struct Subscription {
    pub(crate) epoch: u64,
    pub(crate) acks: Arc<Acks>,
}

/// One rdq queue: its broker queues and its consumer's buffer.
pub struct QueueState {
    /// The rdq queue name.
    pub name: String,
    /// Its broker queues.
    pub names: Names,
    declared: tokio::sync::Mutex<bool>,
    /// Received deliveries in claim order.
    ready: Mutex<BTreeMap<ReadyKey, Waiting>>,
    arrivals: AtomicU64,
    /// A clone of the live subscription's consumer and its epoch: claims
    /// drain what the client already received without waiting for the
    /// consumer task.
    consumer: Mutex<Option<(Consumer, Subscription)>>,
    /// Asks the consumer for a flush (see [`RabbitStore::claim`]).
    pump: Mutex<Option<mpsc::Sender<Request>>>,
}

impl QueueState {
    /// Puts a received delivery in the claim buffer, in claim order.
    fn buffer(&self, w: Waiting) {
        let seq = self.arrivals.fetch_add(1, Ordering::Relaxed);
        let env = &w.envelope;
        let due = env.next_attempt_at.unwrap_or(env.created_at);
        let key = (Reverse(env.priority), due.unix_ms(), env.id.as_u128(), seq);
        lock(&self.ready).insert(key, w);
    }
}

/// The shared state behind every clone of a [`RabbitStore`], also held by
/// the consumer tasks.
pub(crate) struct Core {
    pub(crate) broker: Broker,
    queues: Mutex<HashMap<String, Arc<QueueState>>>,
    pub(crate) leases: Mutex<Leases>,
    policies: RwLock<HashMap<String, QueuePolicy>>,
    work: Arc<Notify>,
    redelivered_waiting: AtomicUsize,
    epochs: AtomicU64,
}

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
                    policies: RwLock::new(HashMap::new()),
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

    /// Sets the policy of `queue` for this process (what `put_config` does).
    pub fn set_policy(&self, queue: &str, policy: QueuePolicy) {
        self.core()
            .policies
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(queue.to_owned(), policy);
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

impl Core {
    /// The wire format and hold queues of `queue`.
    pub(crate) fn mode(&self, queue: &str) -> Mode {
        let by_policy = self
            .policies
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(queue)
            .is_some_and(|p| p.queuey_compatible);
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

    /// Starts the queue's consumer if it is not running; returns its flush handle.
    fn pump(self: &Arc<Self>, q: &Arc<QueueState>) -> mpsc::Sender<Request> {
        let mut slot = lock(&q.pump);
        if let Some(tx) = slot.as_ref().filter(|tx| !tx.is_closed()) {
            return tx.clone();
        }
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(run_consumer(Arc::clone(self), Arc::clone(q), rx));
        *slot = Some(tx.clone());
        tx
    }

    /// Takes up to `max` claimable deliveries of `q` as IN_FLIGHT tasks.
    fn take(
        &self,
        q: &Arc<QueueState>,
        max: usize,
        lease_ms: u64,
        now: Timestamp,
    ) -> Vec<Envelope> {
        let mut leases = lock(&self.leases);
        let mut ready = lock(&q.ready);
        let keys: Vec<ReadyKey> = ready
            .iter()
            .filter(|(_, w)| !w.redelivered && !leases.held.contains_key(&w.envelope.id))
            .map(|(k, _)| *k)
            .take(max)
            .collect();
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let Some(w) = ready.remove(&key) else {
                continue;
            };
            match lease(w, lease_ms, now, q) {
                Ok(l) => {
                    out.push(l.envelope.clone());
                    leases.saw(l.envelope.id);
                    leases.held.insert(l.envelope.id, l);
                }
                Err(refused) => {
                    let (w, e) = *refused;
                    warn!(task = %w.envelope.id, error = %e, "a delivery could not be claimed; it stays buffered");
                    ready.insert(key, w);
                }
            }
        }
        out
    }

    /// Moves every delivery the client has already received into the buffer.
    fn drain(self: &Arc<Self>, q: &Arc<QueueState>) {
        let consumer = lock(&q.consumer).clone();
        if let Some((mut consumer, sub)) = consumer {
            while let Some(Some(Ok(delivery))) = consumer.next().now_or_never() {
                self.accept(q, delivery, &sub);
            }
        }
    }

    /// Returns the deliveries buffered for claims (never redelivered ones:
    /// those lapsed already) to the work queue untouched: publish a copy,
    /// then ack, so the broker does not mark them redelivered and nobody
    /// counts them as a lapsed attempt. A copy that cannot be published
    /// stays buffered (and comes back redelivered when the channel closes).
    async fn hand_back(&self, q: &Arc<QueueState>, epoch: u64) {
        let waiting: Vec<Waiting> = {
            let mut ready = lock(&q.ready);
            let keys: Vec<ReadyKey> = ready
                .iter()
                .filter(|(_, w)| !w.redelivered && w.delivery.subscription.epoch == epoch)
                .map(|(k, _)| *k)
                .collect();
            keys.iter().filter_map(|k| ready.remove(k)).collect()
        };
        if waiting.is_empty() {
            return;
        }
        let granularity = self.broker.options().retry_granularity;
        let count = waiting.len();
        let returned = futures::future::join_all(waiting.into_iter().map(|w| async move {
            match self.publish_task(q, &w.envelope, 0, granularity).await {
                Ok(()) => w.delivery.ack().await,
                Err(e) => {
                    warn!(task = %w.envelope.id, error = %e, "handing a buffered task back failed; it stays buffered");
                    q.buffer(w);
                    false
                }
            }
        }))
        .await;
        let acked = returned.iter().filter(|ok| **ok).count();
        debug!(queue = %q.name, count, acked, "handed buffered deliveries back");
    }

    /// True when the queue's consumer holds as many unacked deliveries as
    /// its prefetch allows, so the broker has nothing in flight to it.
    fn credit_used_up(&self, q: &QueueState) -> bool {
        let prefetch = u64::from(self.broker.options().prefetch);
        lock(&q.consumer)
            .as_ref()
            .is_some_and(|(_, sub)| prefetch > 0 && sub.acks.unacked() >= prefetch)
    }

    /// Drops what a finished subscription held: the broker requeues it.
    fn forget_epoch(&self, q: &QueueState, epoch: u64) {
        let mut leases = lock(&self.leases);
        leases
            .held
            .retain(|_, l| l.delivery.subscription.epoch != epoch);
        let mut ready = lock(&q.ready);
        let before = ready.values().filter(|w| w.redelivered).count();
        ready.retain(|_, w| w.delivery.subscription.epoch != epoch);
        let after = ready.values().filter(|w| w.redelivered).count();
        self.redelivered_waiting
            .fetch_sub(before - after, Ordering::Relaxed);
    }

    fn accept(self: &Arc<Self>, q: &Arc<QueueState>, delivery: Delivery, sub: &Subscription) {
        sub.acks.received();
        let envelope = match wire::decode(&delivery.data) {
            Ok(Incoming::Rdq(mut env)) => {
                if env.queue != q.name {
                    env.queue = q.name.clone();
                }
                env
            }
            Ok(Incoming::Queuey(job)) => wire::queuey_to_rdq(&job, &q.name, Timestamp::now()),
            Err(e) => {
                warn!(queue = %q.name, error = %e, bytes = delivery.data.len(), "a message is no envelope; copying it to the dead-letter queue");
                tokio::spawn(dead_letter_malformed(
                    Arc::clone(self),
                    Arc::clone(q),
                    delivery,
                    sub.clone(),
                ));
                return;
            }
        };
        let mut envelope = envelope;
        if envelope.status != Status::Pending {
            // On a work queue a message is waiting, whatever its body says.
            envelope.status = Status::Pending;
            envelope.lease_expires_at = None;
        }
        let redelivered = delivery.redelivered;
        q.buffer(Waiting {
            envelope,
            delivery: Held {
                acker: delivery.acker,
                tag: delivery.delivery_tag,
                subscription: sub.clone(),
            },
            redelivered,
        });
        if redelivered {
            self.redelivered_waiting.fetch_add(1, Ordering::Relaxed);
        } else {
            self.work.notify_waiters();
        }
    }

    async fn finish(&self, lease: Lease, next: Envelope) -> Result<(), EngineError> {
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
        if lease.delivery.ack().await {
            Ok(())
        } else if next.status == Status::Succeeded {
            Err(EngineError::LeaseLost(id))
        } else {
            // The successor is published; the original comes back and is
            // counted as a lapsed attempt: a duplicate, never a loss.
            warn!(task = %id, "acking after a publish failed; the broker will redeliver the original");
            Ok(())
        }
    }
}

/// Turns a waiting delivery into a lease: IN_FLIGHT under `lease_ms` from `now`.
fn lease(
    w: Waiting,
    lease_ms: u64,
    now: Timestamp,
    q: &Arc<QueueState>,
) -> Result<Lease, Box<(Waiting, EngineError)>> {
    let mut pending = w.envelope.clone();
    // The broker released it, so it is due, whatever clocks say.
    if pending.next_attempt_at.is_some_and(|due| due > now) {
        pending.next_attempt_at = Some(now);
    }
    match machine::claim(&pending, lease_ms, now) {
        Ok((envelope, token)) => Ok(Lease {
            token,
            envelope,
            delivery: w.delivery,
            queue: Arc::clone(q),
            claimed_now: now,
            claimed_at: Instant::now(),
        }),
        Err(e) => Err(Box::new((w, e))),
    }
}

/// Copies a body that is no envelope verbatim to `q.dead` (queuey's
/// `x-death-reason = "malformed envelope"`), then acks it, so a poison
/// message cannot stall the queue. If the copy fails the delivery stays
/// unacked and comes back later.
async fn dead_letter_malformed(
    core: Arc<Core>,
    q: Arc<QueueState>,
    delivery: Delivery,
    sub: Subscription,
) {
    let properties = wire::malformed_properties(&q.names.work, REASON_MALFORMED);
    match core
        .broker
        .publish(&q.names.dead, &delivery.data, properties)
        .await
    {
        Ok(()) => {
            sub.acks.ack_detached(delivery.delivery_tag, delivery.acker);
        }
        Err(e) => {
            warn!(queue = %q.name, error = %e, "copying a malformed message to the dead-letter queue failed")
        }
    }
}

async fn subscribe(core: &Core, q: &QueueState) -> Result<(Channel, Consumer), RabbitError> {
    let channel = core.broker.channel().await?;
    channel
        .basic_qos(
            core.broker.options().prefetch,
            BasicQosOptions { global: false },
        )
        .await?;
    let consumer = consume(&channel, q).await?;
    Ok((channel, consumer))
}

/// Starts a consumer of `q`'s work queue on `channel`.
async fn consume(channel: &Channel, q: &QueueState) -> Result<Consumer, RabbitError> {
    Ok(channel
        .basic_consume(
            crate::connection::short_name(&q.names.work)?,
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?)
}

/// One queue's consumer: pushes deliveries into the buffer claims read,
/// answers flush requests, and resubscribes after a reconnect.
async fn run_consumer(core: Arc<Core>, q: Arc<QueueState>, mut requests: mpsc::Receiver<Request>) {
    let mut closed = core.broker.watch_closed();
    let mut failures = 0u32;
    loop {
        if core.broker.is_closing() {
            return;
        }
        let subscribed = async {
            core.declare(&q).await?;
            subscribe(&core, &q).await
        }
        .await;
        let (channel, mut consumer) = match subscribed {
            Ok(pair) => {
                failures = 0;
                pair
            }
            Err(RabbitError::Closed | RabbitError::ReconnectExhausted { .. }) => return,
            Err(e) => {
                failures += 1;
                warn!(queue = %q.name, error = %e, failures, "subscribing failed; trying again");
                *q.declared.lock().await = false;
                let delay = core
                    .broker
                    .options()
                    .reconnect
                    .delay(failures, 0.5)
                    .unwrap_or(Duration::from_secs(1));
                tokio::select! {
                    () = tokio::time::sleep(delay.max(Duration::from_millis(100))) => continue,
                    () = crate::connection::until_closed(&mut closed) => return,
                }
            }
        };
        let epoch = core.epochs.fetch_add(1, Ordering::Relaxed) + 1;
        let sub = Subscription {
            epoch,
            acks: Acks::start(),
        };
        *lock(&q.consumer) = Some((consumer.clone(), sub.clone()));
        let prefetch = core.broker.options().prefetch;
        debug!(queue = %q.name, epoch, "consuming");
        // Stopped: no consumer on the channel, which stays open for the
        // acks of the leases still out.
        let mut stopped = false;
        loop {
            tokio::select! {
                biased;
                () = crate::connection::until_closed(&mut closed) => return,
                request = requests.recv() => {
                    let Some(request) = request else { return };
                    let Flush { count, reply } = match request {
                        Request::Stop(reply) => {
                            if !stopped {
                                stopped = true;
                                if let Err(e) = channel
                                    .basic_cancel(consumer.tag(), BasicCancelOptions::default())
                                    .await
                                {
                                    warn!(queue = %q.name, error = %e, "cancelling the consumer failed");
                                }
                                core.drain(&q);
                                *lock(&q.consumer) = None;
                                core.hand_back(&q, epoch).await;
                                debug!(queue = %q.name, epoch, "stopped consuming");
                            }
                            let _ = reply.send(());
                            continue;
                        }
                        Request::Flush(flush) => flush,
                    };
                    if stopped {
                        // A claim after a stop: consume again on the same channel.
                        match consume(&channel, &q).await {
                            Ok(resumed) => {
                                consumer = resumed;
                                stopped = false;
                                *lock(&q.consumer) = Some((consumer.clone(), sub.clone()));
                                debug!(queue = %q.name, epoch, "consuming again");
                            }
                            Err(e) => {
                                warn!(queue = %q.name, error = %e, "consuming again failed; resubscribing");
                                let _ = reply.send(0);
                                break;
                            }
                        }
                    }
                    let synced = if count {
                        // A passive declare also says how many messages wait.
                        let passive = lapin::options::QueueDeclareOptions {
                            passive: true,
                            ..topology::declare_options()
                        };
                        match crate::connection::short_name(&q.names.work) {
                            Ok(name) => channel
                                .queue_declare(name, passive, FieldTable::default())
                                .await
                                .map(|queue| queue.message_count())
                                .map_err(RabbitError::from),
                            Err(e) => Err(e),
                        }
                    } else {
                        // The cheapest round trip: the channel answers it alone.
                        channel
                            .basic_qos(prefetch, BasicQosOptions { global: false })
                            .await
                            .map(|()| 0)
                            .map_err(RabbitError::from)
                    };
                    core.drain(&q);
                    let _ = reply.send(*synced.as_ref().unwrap_or(&0));
                    if synced.is_err() {
                        break;
                    }
                }
                item = consumer.next(), if !stopped => match item {
                    Some(Ok(delivery)) => core.accept(&q, delivery, &sub),
                    _ => break,
                },
            }
        }
        *lock(&q.consumer) = None;
        sub.acks.close();
        core.forget_epoch(&q, epoch);
        // The subscription may have ended because its queue was deleted (the
        // broker cancels the consumer): declare it again before resubscribing.
        *q.declared.lock().await = false;
        debug!(queue = %q.name, epoch, "subscription ended; resubscribing");
    }
}

#[async_trait]
impl Store for RabbitStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            get_by_id: false,
            list: true,
            redrive: true,
            purge: true,
            counts: false,
            queue_config: true,
            idempotent_submit: false,
            prune: false,
        }
    }

    fn work_signal(&self) -> Option<Arc<Notify>> {
        Some(Arc::clone(&self.core().work))
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
        let publishes = tasks.into_iter().map(|task| async move {
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
            core.publish_task(&q, &env, delay, granularity).await?;
            lock(&core.leases).saw(env.id);
            Ok(Submitted::Created(env))
        });
        futures::future::join_all(publishes).await
    }

    async fn claim(
        &self,
        queue: &str,
        max: usize,
        lease_ms: u64,
        now: Timestamp,
    ) -> Result<Vec<Envelope>, EngineError> {
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

    async fn list(&self, query: &ListQuery) -> Result<Page, EngineError> {
        crate::dlq::list(self.core(), query).await
    }

    async fn redrive(
        &self,
        request: &RedriveRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError> {
        crate::dlq::redrive(self.core(), request, now).await
    }

    async fn purge(&self, queue: &str, status: Status, dry_run: bool) -> Result<u64, EngineError> {
        crate::dlq::purge(self.core(), queue, status, dry_run).await
    }

    async fn delete(&self, id: TaskId) -> Result<(), EngineError> {
        crate::dlq::delete(self.core(), id).await
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

    async fn get_config(&self, queue: &str) -> Result<Option<QueuePolicy>, EngineError> {
        Ok(self
            .core()
            .policies
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(queue)
            .cloned())
    }

    async fn put_config(&self, queue: &str, policy: &QueuePolicy) -> Result<(), EngineError> {
        self.set_policy(queue, policy.clone());
        Ok(())
    }
}
