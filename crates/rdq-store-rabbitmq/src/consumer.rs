//! The consumer loop: one task per queue that subscribes with a prefetch,
//! buffers deliveries in claim order, answers flush and stop requests, and
//! resubscribes after a reconnect; and the claim side that takes buffered
//! deliveries as leases.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use lapin::message::Delivery;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Consumer};
use rdq_engine::{EngineError, machine};
use rdq_envelope::{Envelope, Status, Timestamp};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::acks::{AckOutcome, Acks};
use crate::core::Core;
use crate::error::RabbitError;
use crate::leases::Lease;
use crate::queue::{Flush, Held, QueueState, ReadyKey, Request, Subscription, Waiting, lock};
use crate::topology::{self, REASON_MALFORMED};
use crate::wire::{self, Incoming};

impl Core {
    /// Starts the queue's consumer if it is not running; returns its flush handle.
    pub(crate) fn pump(self: &Arc<Self>, q: &Arc<QueueState>) -> mpsc::Sender<Request> {
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
    pub(crate) fn take(
        &self,
        q: &Arc<QueueState>,
        max: usize,
        lease_ms: u64,
        now: Timestamp,
    ) -> Vec<Envelope> {
        let mut leases = lock(&self.leases);
        let mut ready = lock(&q.ready);
        // A task is in the queue twice when a publish was retried after its
        // confirm was lost (at least once): one copy a claim, the other
        // waits until that one is settled.
        let mut taken = std::collections::HashSet::new();
        let keys: Vec<ReadyKey> = ready
            .iter()
            .filter(|(_, w)| !w.redelivered && !leases.held.contains_key(&w.envelope.id))
            .filter(|(_, w)| taken.insert(w.envelope.id))
            .map(|(k, _)| *k)
            .take(max)
            .collect();
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let Some(w) = ready.remove(&key) else {
                continue;
            };
            if leases.has_succeeded(w.envelope.id) {
                // A copy of a task settled here as SUCCEEDED: done already.
                info!(task = %w.envelope.id, queue = %q.name, "a second copy of a task settled here; acking it");
                w.delivery
                    .subscription
                    .acks
                    .ack_detached(w.delivery.tag, w.delivery.acker);
                continue;
            }
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
    pub(crate) fn drain(self: &Arc<Self>, q: &Arc<QueueState>) {
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
    pub(crate) async fn hand_back(&self, q: &Arc<QueueState>, epoch: u64) {
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
                // The copy is stored. An ack not sent or not confirmed lets
                // the original come back: here it is acked and dropped (the
                // copy lives on); another process would run it beside its
                // copy: a duplicate, never a loss.
                Ok(()) => match w.delivery.ack().await {
                    AckOutcome::Confirmed => true,
                    AckOutcome::NotSent | AckOutcome::Unconfirmed => {
                        lock(&self.leases).superseded(w.envelope.id, w.envelope.claim_count);
                        false
                    }
                },
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
    pub(crate) fn credit_used_up(&self, q: &QueueState) -> bool {
        let prefetch = u64::from(self.broker.options().prefetch);
        lock(&q.consumer)
            .as_ref()
            .is_some_and(|(_, sub)| prefetch > 0 && sub.acks.unacked() >= prefetch)
    }

    /// Drops what a finished subscription held: the broker requeues it.
    pub(crate) fn forget_epoch(&self, q: &QueueState, epoch: u64) {
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

    pub(crate) fn accept(
        self: &Arc<Self>,
        q: &Arc<QueueState>,
        delivery: Delivery,
        sub: &Subscription,
    ) {
        sub.acks.received();
        let envelope = match wire::decode(&delivery.data) {
            Ok(Incoming::Rdq(mut env)) => {
                if env.queue != q.name {
                    env.queue = q.name.clone();
                }
                *env
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
        let (succeeded, superseded) = {
            let leases = lock(&self.leases);
            (
                leases.has_succeeded(envelope.id),
                redelivered && leases.is_superseded(envelope.id, envelope.claim_count),
            )
        };
        if succeeded || superseded {
            // Settled here already, and the broker lost the ack (it died
            // after taking it) or never confirmed it: a task that succeeded
            // is done, and one whose successor is published lives on in it.
            info!(task = %envelope.id, queue = %q.name, redelivered, succeeded, "a delivery settled here came back; acking it");
            sub.acks.ack_detached(delivery.delivery_tag, delivery.acker);
            return;
        }
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
}

/// Turns a waiting delivery into a lease: IN_FLIGHT under `lease_ms` from `now`.
pub(crate) fn lease(
    w: Waiting,
    lease_ms: u64,
    now: Timestamp,
    q: &Arc<QueueState>,
) -> Result<Lease, Box<(Waiting, EngineError)>> {
    let message_claims = w.envelope.claim_count;
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
            message_claims,
        }),
        Err(e) => Err(Box::new((w, e))),
    }
}

/// Copies a body that is no envelope verbatim to `q.dead` (queuey's
/// `x-death-reason = "malformed envelope"`), then acks it, so a poison
/// message cannot stall the queue. If the copy fails the delivery stays
/// unacked and comes back later.
pub(crate) async fn dead_letter_malformed(
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

pub(crate) async fn subscribe(
    core: &Core,
    q: &QueueState,
) -> Result<(Channel, Consumer), RabbitError> {
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
pub(crate) async fn consume(channel: &Channel, q: &QueueState) -> Result<Consumer, RabbitError> {
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
pub(crate) async fn run_consumer(
    core: Arc<Core>,
    q: Arc<QueueState>,
    mut requests: mpsc::Receiver<Request>,
) {
    let mut closed = core.broker.watch_closed();
    let mut failures = 0u32;
    loop {
        if core.broker.is_closing() {
            return;
        }
        let op_timeout = core.broker.options().op_timeout;
        let subscribed = tokio::time::timeout(op_timeout, async {
            core.declare(&q).await?;
            subscribe(&core, &q).await
        })
        .await
        .unwrap_or_else(|_| {
            Err(RabbitError::timed_out(
                format!("the subscription to `{}`", q.names.work),
                op_timeout,
            ))
        });
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
        let prefetch = core.broker.options().prefetch;
        let sub = Subscription {
            epoch,
            acks: Acks::start(channel.clone(), prefetch),
        };
        *lock(&q.consumer) = Some((consumer.clone(), sub.clone()));
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
