//! [`Broker`]: the one AMQP connection a store uses, kept alive across
//! outages, and the publishing channels on it.
//!
//! - **Reconnection.** The connection is a slot, not a socket. The first
//!   dial is never retried (startup fails fast). After that, whoever first
//!   finds the connection dead redials while everyone else waits behind it
//!   (single flight), with the bounded, jittered backoff of
//!   [`ReconnectPolicy`](crate::ReconnectPolicy); the work and dead-letter
//!   queues declared so far are re-declared, hold-queue declarations are
//!   forgotten (so they are made again), and the `generation` counter moves
//!   on, which is how consumers and leases learn that their channel is gone.
//! - **Publishing.** Every publish is `mandatory`, on a channel in confirm
//!   mode, and waits for the broker's confirm: `Ok` means a real queue took
//!   the message. Each pooled channel carries **one publish at a time**: the
//!   AMQP client does not tie a `basic.return` to its delivery tag, so with
//!   two publishes outstanding on one channel an unroutable one could be
//!   reported as confirmed (and its original acked: a lost task). A pool of
//!   channels (64 by default, queuey uses 8) buys the concurrency back. A
//!   publish that finds the connection down waits for the redial instead of
//!   failing, bounded by the reconnect policy. A publish that comes back
//!   unroutable stored nothing: its queue vanished, so it is declared again
//!   and the publish made once more.
//! - **Declarations** run on a channel of their own: a refused declaration
//!   (`PRECONDITION_FAILED`) closes the channel it ran on, and must not take
//!   publishes down with it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use lapin::Confirmation;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use tokio::sync::{Semaphore, watch};
use tracing::{debug, info, warn};

use crate::error::RabbitError;
use crate::options::RabbitOptions;
use crate::topology::{self, MAX_NAME_BYTES};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data with no invariants a panic could break half-way.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A queue name as an AMQP short string, refusing what cannot be one.
pub fn short_name(name: &str) -> Result<ShortString, RabbitError> {
    if name.len() > MAX_NAME_BYTES {
        return Err(RabbitError::NameTooLong(name.to_owned()));
    }
    Ok(ShortString::from(name))
}

/// A cheap pseudo-random number in `[0, 1)` for jitter (no cryptography
/// needed, no dependency either).
fn jitter_unit() -> f64 {
    static STATE: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut z = STATE.fetch_add(u64::from(nanos) | 1, Ordering::Relaxed);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// The store's connection, channels and declaration bookkeeping.
pub struct Broker {
    options: RabbitOptions,
    /// The live connection, `None` before the first dial.
    current: RwLock<Option<Arc<Connection>>>,
    /// Successful connections so far; moves on at every redial.
    generation: watch::Sender<u64>,
    /// Held while dialling, so concurrent callers share one attempt.
    dialling: tokio::sync::Mutex<()>,
    closing: AtomicBool,
    closed_tx: watch::Sender<bool>,
    /// Work and dead-letter queues declared so far, replayed after a redial.
    declared: Mutex<HashMap<String, FieldTable>>,
    /// When each hold queue was last declared, and its arguments; see
    /// [`Broker::declare_hold`].
    holds: Mutex<HashMap<String, (Instant, FieldTable)>>,
    /// Every hold queue ever declared through this handle (for cleanup tooling).
    hold_names: Mutex<std::collections::BTreeSet<String>>,
    idle: Mutex<Vec<Channel>>,
    permits: Semaphore,
    declare_channel: tokio::sync::Mutex<Option<Channel>>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("generation", &*self.generation.borrow())
            .field("closing", &self.is_closing())
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// A broker handle; nothing is dialled until first use.
    pub fn new(options: RabbitOptions) -> Self {
        let permits = Semaphore::new(options.publish_channels.max(1));
        Self {
            options,
            current: RwLock::new(None),
            generation: watch::Sender::new(0),
            dialling: tokio::sync::Mutex::new(()),
            closing: AtomicBool::new(false),
            closed_tx: watch::Sender::new(false),
            declared: Mutex::new(HashMap::new()),
            holds: Mutex::new(HashMap::new()),
            hold_names: Mutex::new(std::collections::BTreeSet::new()),
            idle: Mutex::new(Vec::new()),
            permits,
            declare_channel: tokio::sync::Mutex::new(None),
        }
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &RabbitOptions {
        &self.options
    }

    /// Connections made so far (0 before the first).
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// Resolves once the store is closing.
    pub fn watch_closed(&self) -> watch::Receiver<bool> {
        self.closed_tx.subscribe()
    }

    /// True once [`Broker::close`] was called.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// True while a live connection is held.
    pub fn is_connected(&self) -> bool {
        self.peek().is_some_and(|c| c.status().connected())
    }

    fn peek(&self) -> Option<Arc<Connection>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn properties(&self) -> ConnectionProperties {
        let properties = ConnectionProperties::default();
        match &self.options.connection_name {
            Some(name) => properties.with_connection_name(name.as_str().into()),
            None => properties,
        }
    }

    /// Stops everything: no more dials, consumers end, publishes fail.
    pub fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.closed_tx.send_replace(true);
        self.permits.close();
        if let Some(connection) = self.peek() {
            // Best effort, in the background: closing needs a round trip.
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    let _ = connection.close(200, "rdq store closed".into()).await;
                });
            }
        }
    }

    /// A live connection: the current one, or a new one dialled now. The
    /// first dial fails fast; later ones follow the reconnect policy.
    pub async fn connection(&self) -> Result<Arc<Connection>, RabbitError> {
        if self.is_closing() {
            return Err(RabbitError::Closed);
        }
        if let Some(c) = self.peek().filter(|c| c.status().connected()) {
            return Ok(c);
        }
        let _dialling = self.dialling.lock().await;
        if let Some(c) = self.peek().filter(|c| c.status().connected()) {
            return Ok(c);
        }
        let first = self.peek().is_none();
        let mut failures = 0u32;
        let mut last = String::new();
        loop {
            if self.is_closing() {
                return Err(RabbitError::Closed);
            }
            if !first {
                let Some(delay) = self.options.reconnect.delay(failures, jitter_unit()) else {
                    return Err(RabbitError::ReconnectExhausted {
                        attempts: failures,
                        last,
                    });
                };
                if !delay.is_zero() {
                    let mut closed = self.watch_closed();
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = crate::connection::until_closed(&mut closed) => return Err(RabbitError::Closed),
                    }
                }
            }
            // A dial that hangs (a broker that accepts and then says
            // nothing) holds the dialling lock: bound each attempt.
            let dial = tokio::time::timeout(
                self.options.op_timeout,
                crate::tls::connect(
                    &self.options.uri,
                    self.properties(),
                    self.options.tls.as_ref(),
                ),
            );
            let dialled = dial.await.unwrap_or_else(|_| {
                Err(RabbitError::timed_out(
                    "the connection handshake",
                    self.options.op_timeout,
                ))
            });
            match dialled {
                Ok(connection) => {
                    let connection = Arc::new(connection);
                    *self.current.write().unwrap_or_else(PoisonError::into_inner) =
                        Some(Arc::clone(&connection));
                    lock(&self.holds).clear();
                    lock(&self.idle).clear();
                    if !first {
                        let replayed = tokio::time::timeout(
                            self.options.op_timeout,
                            self.redeclare(&connection),
                        );
                        if replayed.await.is_err() {
                            warn!(
                                after_ms = self.timeout_ms(),
                                "re-declaring queues after a reconnect timed out"
                            );
                        }
                        info!(attempts = failures + 1, "reconnected to RabbitMQ");
                    }
                    self.generation.send_modify(|g| *g += 1);
                    return Ok(connection);
                }
                Err(e) if first => return Err(e),
                Err(e) => {
                    failures += 1;
                    warn!(error = %e, failures, "reconnecting to RabbitMQ failed");
                    last = e.to_string();
                }
            }
        }
    }

    async fn redeclare(&self, connection: &Connection) {
        let declared: Vec<(String, FieldTable)> = lock(&self.declared)
            .iter()
            .map(|(n, a)| (n.clone(), a.clone()))
            .collect();
        let Ok(channel) = connection.create_channel().await else {
            return;
        };
        for (name, args) in declared {
            let declared = channel
                .queue_declare(name.as_str().into(), topology::declare_options(), args)
                .await;
            if let Err(e) = declared {
                warn!(queue = %name, error = %e, "re-declaring a queue after a reconnect failed");
                return;
            }
        }
        let _ = channel.close(200, "OK".into()).await;
    }

    /// A fresh channel on a live connection.
    pub async fn channel(&self) -> Result<Channel, RabbitError> {
        let connection = self.connection().await?;
        Ok(connection.create_channel().await?)
    }

    /// Runs `declare` on the declaration channel, within the operation
    /// timeout; a declaration that timed out takes its channel with it (a
    /// late answer must not be read as the next declaration's).
    async fn with_declare_channel<T>(
        &self,
        queue: &str,
        declare: impl AsyncFnOnce(&Channel) -> Result<T, lapin::Error>,
    ) -> Result<T, RabbitError> {
        let deadline = self.deadline();
        let what = || format!("the declaration of `{queue}`");
        let mut slot = self
            .within(deadline, what, async {
                Ok(self.declare_channel.lock().await)
            })
            .await?;
        let declared = self
            .within(deadline, what, async {
                let channel = match slot.as_ref().filter(|c| c.status().connected()) {
                    Some(c) => c.clone(),
                    None => {
                        let c = self.channel().await?;
                        *slot = Some(c.clone());
                        c
                    }
                };
                Ok(declare(&channel).await?)
            })
            .await;
        if matches!(declared, Err(RabbitError::TimedOut { .. })) {
            *slot = None;
        }
        declared
    }

    /// Declares a durable queue with `args` (work and dead-letter queues),
    /// remembering it for re-declaration after a reconnect.
    pub async fn declare(&self, name: &str, args: FieldTable) -> Result<(), RabbitError> {
        let queue = short_name(name)?;
        let remembered = args.clone();
        self.with_declare_channel(name, async |c| {
            c.queue_declare(queue, topology::declare_options(), args)
                .await
                .map(drop)
        })
        .await?;
        lock(&self.declared).insert(name.to_owned(), remembered);
        debug!(queue = name, "declared");
        Ok(())
    }

    /// Declares a hold queue before a publish into it. An idle hold queue
    /// deletes itself after `x-expires = 2 × ttl` without a declaration (a
    /// publish does not count as use), so it is declared again whenever the
    /// last declaration is more than half a TTL old: a message published
    /// within half a TTL of a declaration leaves the queue at most 1.5 TTL
    /// after it, well before the queue may expire. (queuey declares before
    /// every publish, one round trip on one channel each.)
    pub async fn declare_hold(
        &self,
        name: &str,
        ttl_ms: u32,
        args: FieldTable,
    ) -> Result<(), RabbitError> {
        let fresh = lock(&self.holds)
            .get(name)
            .is_some_and(|(at, _)| at.elapsed() < Duration::from_millis(u64::from(ttl_ms / 2)));
        if fresh {
            return Ok(());
        }
        self.declare_hold_now(name, args).await
    }

    /// Declares a hold queue now, whenever it was last declared.
    async fn declare_hold_now(&self, name: &str, args: FieldTable) -> Result<(), RabbitError> {
        let queue = short_name(name)?;
        let remembered = args.clone();
        let declared_at = Instant::now();
        self.with_declare_channel(name, async |c| {
            c.queue_declare(queue, topology::declare_options(), args)
                .await
                .map(drop)
        })
        .await?;
        lock(&self.holds).insert(name.to_owned(), (declared_at, remembered));
        lock(&self.hold_names).insert(name.to_owned());
        Ok(())
    }

    /// How many ready messages `name` holds, `None` when it does not exist.
    pub async fn depth(&self, name: &str) -> Result<Option<u32>, RabbitError> {
        let queue = short_name(name)?;
        self.within(
            self.deadline(),
            || format!("the depth of `{name}`"),
            async {
                // A passive declare of a missing queue closes its channel: use a throwaway one.
                let channel = self.channel().await?;
                let options = QueueDeclareOptions {
                    passive: true,
                    ..topology::declare_options()
                };
                let result = channel
                    .queue_declare(queue, options, FieldTable::default())
                    .await;
                match result {
                    Ok(q) => {
                        let _ = channel.close(200, "OK".into()).await;
                        Ok(Some(q.message_count()))
                    }
                    Err(e) if is_not_found(&e) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            },
        )
        .await
    }

    /// Publishes `body` to queue `routing_key` through the default exchange,
    /// `mandatory`, and waits for the broker's confirm. Waits out an outage
    /// instead of failing, up to the operation timeout.
    pub async fn publish(
        &self,
        routing_key: &str,
        body: &[u8],
        properties: BasicProperties,
    ) -> Result<(), RabbitError> {
        let key = short_name(routing_key)?;
        let deadline = self.deadline();
        let mut tries = 0u32;
        let mut redeclared = false;
        loop {
            tries += 1;
            match self
                .publish_once(&key, body, properties.clone(), deadline)
                .await
            {
                Ok(()) => return Ok(()),
                Err(e @ RabbitError::Returned { .. }) => {
                    // Nothing was stored: the queue is gone (deleted under
                    // us). Declare it again and publish once more.
                    if !redeclared && self.redeclare_after_return(routing_key).await {
                        redeclared = true;
                        continue;
                    }
                    return Err(e);
                }
                Err(
                    e @ (RabbitError::Nacked(_)
                    | RabbitError::Unconfirmed { .. }
                    | RabbitError::Closed
                    | RabbitError::TimedOut { .. }
                    | RabbitError::ReconnectExhausted { .. }),
                ) => {
                    return Err(e);
                }
                Err(e) if tries < 3 || !self.is_connected() => {
                    // The channel or connection failed before the publish
                    // was sent: wait for a live connection (the redial
                    // happens in `connection()`), then publish again. Once
                    // sent, a publish is never sent again (`Unconfirmed`).
                    debug!(error = %e, tries, "publish failed; retrying on a live channel");
                    if tries >= 3 {
                        self.within(
                            deadline,
                            || format!("the publish to `{routing_key}`"),
                            async { self.connection().await },
                        )
                        .await?;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// When an operation starting now must be over.
    fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.options.op_timeout
    }

    /// `work`, or [`RabbitError::TimedOut`] once `deadline` passes (`work`
    /// is dropped then: a channel it held closes with its last handle).
    async fn within<T>(
        &self,
        deadline: tokio::time::Instant,
        what: impl FnOnce() -> String,
        work: impl Future<Output = Result<T, RabbitError>>,
    ) -> Result<T, RabbitError> {
        match tokio::time::timeout_at(deadline, work).await {
            Ok(result) => result,
            Err(_) => {
                let what = what();
                warn!(%what, after_ms = self.timeout_ms(), "RabbitMQ did not answer in time");
                Err(RabbitError::timed_out(what, self.options.op_timeout))
            }
        }
    }

    fn timeout_ms(&self) -> u64 {
        u64::try_from(self.options.op_timeout.as_millis()).unwrap_or(u64::MAX)
    }

    /// After a publish to `name` came back unroutable: declares the queue
    /// again with the arguments it was declared with (true: publish again).
    async fn redeclare_after_return(&self, name: &str) -> bool {
        let work = lock(&self.declared).get(name).cloned();
        let hold = lock(&self.holds).get(name).map(|(_, args)| args.clone());
        if work.is_none() && hold.is_none() {
            return false;
        }
        warn!(
            queue = name,
            "a declared queue is gone from the broker; declaring it again"
        );
        let declared = match (work, hold) {
            (Some(args), _) => self.declare(name, args).await,
            (None, Some(args)) => self.declare_hold_now(name, args).await,
            (None, None) => return false,
        };
        match declared {
            Ok(()) => true,
            Err(e) => {
                warn!(queue = name, error = %e, "declaring a vanished queue again failed");
                false
            }
        }
    }

    async fn publish_once(
        &self,
        key: &ShortString,
        body: &[u8],
        properties: BasicProperties,
        deadline: tokio::time::Instant,
    ) -> Result<(), RabbitError> {
        let what = || format!("the publish to `{}`", key.as_str());
        let _permit = self
            .within(deadline, what, async {
                self.permits
                    .acquire()
                    .await
                    .map_err(|_| RabbitError::Closed)
            })
            .await?;
        let pooled = lock(&self.idle).pop();
        let channel = match pooled.filter(|c| c.status().connected()) {
            Some(c) => c,
            None => {
                self.within(deadline, what, async {
                    let c = self.channel().await?;
                    c.confirm_select(ConfirmSelectOptions::default()).await?;
                    Ok(c)
                })
                .await?
            }
        };
        // A publish that times out leaves its channel behind (dropped, so
        // closed): whatever the broker answers later is answered to nobody.
        let confirmation = self
            .within(deadline, what, async {
                let confirm = channel
                    .basic_publish(
                        ShortString::from(""),
                        key.clone(),
                        BasicPublishOptions {
                            mandatory: true,
                            immediate: false,
                        },
                        body,
                        properties,
                    )
                    .await?;
                // Sent: from here a failure leaves the broker's copy unknown.
                confirm.await.map_err(|e| RabbitError::Unconfirmed {
                    queue: key.as_str().to_owned(),
                    reason: e.to_string(),
                })
            })
            .await;
        if confirmation.is_ok() && channel.status().connected() {
            lock(&self.idle).push(channel);
        }
        match confirmation? {
            Confirmation::Ack(None) => Ok(()),
            Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)) => {
                Err(RabbitError::Returned {
                    queue: key.as_str().to_owned(),
                    reason: returned.reply_text.as_str().to_owned(),
                })
            }
            Confirmation::Nack(None) => Err(RabbitError::Nacked(key.as_str().to_owned())),
            Confirmation::NotRequested => Err(RabbitError::Amqp(format!(
                "publisher confirms are not enabled on the channel publishing to `{}`",
                key.as_str()
            ))),
        }
    }

    /// Deletes queues (tests and tooling); a missing queue is not an error.
    pub async fn delete_queues(&self, names: &[String]) -> Result<(), RabbitError> {
        for name in names {
            let queue = short_name(name)?;
            self.within(
                self.deadline(),
                || format!("the deletion of `{name}`"),
                async {
                    let channel = self.channel().await?;
                    let deleted = channel
                        .queue_delete(queue, lapin::options::QueueDeleteOptions::default())
                        .await;
                    match deleted {
                        Ok(_) => {
                            let _ = channel.close(200, "OK".into()).await;
                            Ok(())
                        }
                        Err(e) if is_not_found(&e) => Ok(()),
                        Err(e) => Err(RabbitError::from(e)),
                    }
                },
            )
            .await?;
            lock(&self.declared).remove(name);
            lock(&self.holds).remove(name);
            lock(&self.hold_names).remove(name);
        }
        Ok(())
    }

    /// Every queue this handle declared (work, dead-letter and hold queues).
    pub fn declared_queues(&self) -> Vec<String> {
        let mut names: Vec<String> = lock(&self.declared).keys().cloned().collect();
        names.extend(lock(&self.hold_names).iter().cloned());
        names.sort();
        names.dedup();
        names
    }
}

/// Resolves once the store is closing (the watch guard never crosses an await).
pub async fn until_closed(closed: &mut watch::Receiver<bool>) {
    let _ = closed.wait_for(|c| *c).await;
}

/// True when the broker answered `NOT_FOUND` (404): a missing queue.
pub fn is_not_found(e: &lapin::Error) -> bool {
    let text = e.to_string();
    text.contains("NOT_FOUND") || text.contains("404")
}
