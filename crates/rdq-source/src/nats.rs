//! A NATS JetStream stream through a durable pull consumer (async-nats):
//! records are fetched in batches, ingested, and only then acknowledged.
//!
//! The stream's sequence is the position. On a store that keeps cursors,
//! the store says where the source resumes: each time the reader starts it
//! makes the durable consumer afresh at the stored cursor (deliver by start
//! sequence), so what an earlier reader fetched but did not store comes
//! again, in order, and nothing behind the cursor does. Within one start,
//! the consumer's delivery sequence must run on without a gap or a
//! redelivery: a gap means another reader took messages from the same
//! consumer, a redelivery that a run outlived its acknowledgement wait, and
//! either ends the start (the reader starts again from the stored cursor)
//! rather than let the cursor move past a message that was not stored; so
//! does finding, before a run is stored, that another reader's start made
//! the consumer afresh since this one's. The
//! cursor's compare-and-swap does the same for two readers racing on one
//! stream. On a store without cursors the consumer is kept as it is, and
//! redeliveries find their tasks by their locator keys.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::AckPolicy, consumer::DeliverPolicy, consumer::pull};
use futures::StreamExt;
use rdq_engine::Engine;
use rdq_runtime::Shutdown;
use tracing::info;

use crate::config::{NatsConfig, SourceConfig};
use crate::ingest::{Builder, Ingestor, Record, Run, Step};
use crate::status::{Registry, SourceState};
use crate::{SourceError, WATCH_EVERY, remote_error, store_error};

type Consumer = jetstream::consumer::Consumer<pull::Config>;

/// The longest a fetch may take (a waiting one lasts a watch interval).
const FETCH_LIMIT: Duration = Duration::from_secs(10);

/// Reads the stream until `stop` or an error.
pub(crate) async fn run(
    engine: &Engine,
    config: &Arc<SourceConfig>,
    registry: &Registry,
    stop: &Shutdown,
) -> Result<(), SourceError> {
    let Some(nats) = config.nats.clone() else {
        return Err(remote_error(config, "no [nats] table"));
    };
    let client = async_nats::ConnectOptions::new()
        .name(format!("rdq-source-{}", config.name))
        .connect(&nats.url)
        .await
        .map_err(|e| remote_error(config, format!("cannot connect to {}: {e}", nats.url)))?;
    let js = jetstream::new(client);
    let stream = js
        .get_stream(&nats.stream)
        .await
        .map_err(|e| remote_error(config, format!("the stream {}: {e}", nats.stream)))?;
    let durable = nats
        .consumer
        .clone()
        .unwrap_or_else(|| format!("rdq-{}", config.name.replace('.', "-")));
    let mut ingestor = Ingestor::new(engine.clone(), config.clone(), registry.clone(), true);
    let cursor = ingestor
        .cursor(&nats.stream)
        .await
        .map_err(|e| store_error(config, e))?;
    let fresh = ingestor.uses_cursors();
    if fresh {
        // Made afresh at the cursor: see the module documentation.
        match stream.delete_consumer(&durable).await {
            Ok(_) => {}
            Err(e) if e.to_string().contains("not found") => {}
            Err(e) => {
                return Err(remote_error(
                    config,
                    format!("delete the consumer {durable}: {e}"),
                ));
            }
        }
    }
    let consumer: Consumer = stream
        .get_or_create_consumer(
            &durable,
            pull::Config {
                durable_name: Some(durable.clone()),
                // Made afresh, the consumer delivers in order and one
                // acknowledgement covers a run; kept, each is acknowledged.
                ack_policy: if fresh {
                    AckPolicy::All
                } else {
                    AckPolicy::Explicit
                },
                deliver_policy: match cursor {
                    Some(start_sequence) => DeliverPolicy::ByStartSequence { start_sequence },
                    None => DeliverPolicy::All,
                },
                ack_wait: Duration::from_millis(nats.ack_wait_ms),
                // Room for two runs unacknowledged: a fetch never asks for
                // more than the consumer may hand out.
                max_ack_pending: i64::try_from(config.batch.saturating_mul(2))
                    .unwrap_or(i64::MAX)
                    .max(1_000),
                filter_subject: nats.filter_subject.clone().unwrap_or_default(),
                ..pull::Config::default()
            },
        )
        .await
        .map_err(|e| remote_error(config, format!("the consumer {durable}: {e}")))?;
    info!(source = %config.name, stream = %nats.stream, consumer = %durable, "reading the JetStream stream");
    registry.update(&config.name, |s| s.state = SourceState::Running);
    let made = consumer.cached_info().clone();
    let mut reader = Reader {
        ingestor,
        next_delivery: fresh.then_some(1),
        made,
        config: config.clone(),
        nats,
        consumer,
        registry: registry.clone(),
        paused: false,
        watched: Instant::now(),
    };
    reader.read(stop.clone()).await
}

struct Reader {
    ingestor: Ingestor,
    /// The consumer's delivery sequence the next message must have, on a
    /// consumer made afresh at the cursor.
    next_delivery: Option<u64>,
    /// The consumer as this start made it (its creation time tells it
    /// apart): another reader's start makes it afresh, and a run fetched
    /// from that one is not this start's to store.
    made: jetstream::consumer::Info,
    config: Arc<SourceConfig>,
    nats: NatsConfig,
    consumer: Consumer,
    registry: Registry,
    paused: bool,
    watched: Instant,
}

impl Reader {
    async fn read(&mut self, mut stop: Shutdown) -> Result<(), SourceError> {
        // The next run, fetched and built while the last one was stored.
        let mut ahead: Option<Fetched> = None;
        loop {
            if stop.is_triggered() {
                return Ok(());
            }
            if self.watched.elapsed() >= WATCH_EVERY
                || (!self.paused && self.ingestor.may_be_over())
            {
                self.watch().await?;
            }
            // A run already built is stored before pausing: its records
            // were fetched by this start and are waiting for their ack.
            if self.paused && ahead.is_none() {
                tokio::select! {
                    () = stop.wait() => return Ok(()),
                    () = tokio::time::sleep(WATCH_EVERY) => continue,
                }
            }
            let builder = self.ingestor.builder();
            let fetched = match ahead.take() {
                Some(fetched) => fetched,
                None => {
                    let messages = tokio::select! {
                        () = stop.wait() => return Ok(()),
                        m = next_batch(&self.consumer, &self.config) => m?,
                    };
                    if messages.is_empty() {
                        continue;
                    }
                    let expected = self
                        .ingestor
                        .cursor(&self.nats.stream)
                        .await
                        .map_err(|e| store_error(&self.config, e))?;
                    self.checks().build(&builder, messages, expected).await?
                }
            };
            // Store this run while the next is fetched, checked and built
            // (from the cursor this run leaves): runs are stored and
            // acknowledged one after another, in order, and a failed store
            // drops the next run too (the reader starts again from the
            // stored cursor).
            let after = fetched.run.cursor_after();
            let prefetch = !self.paused;
            let acks_all = self.next_delivery.is_some();
            let config = Arc::clone(&self.config);
            let (checks, ingestor) = self.split();
            let next_run = async {
                if !prefetch {
                    return Ok(None);
                }
                let messages = fetch(checks.consumer, checks.config, false).await?;
                if messages.is_empty() {
                    return Ok(None);
                }
                let mut checks = checks;
                checks.build(&builder, messages, after).await.map(Some)
            };
            let (stored, next) =
                tokio::join!(store(ingestor, &config, acks_all, fetched), next_run);
            stored?;
            ahead = next?;
        }
    }

    /// What checks and builds a fetched run.
    fn checks(&mut self) -> Checks<'_> {
        self.split().0
    }

    /// The run checks and the ingestor, borrowed apart: one run is built
    /// while another is stored.
    fn split(&mut self) -> (Checks<'_>, &mut Ingestor) {
        let Self {
            ingestor,
            next_delivery,
            made,
            config,
            nats,
            consumer,
            ..
        } = self;
        let checks = Checks {
            next_delivery,
            made,
            config,
            stream: &nats.stream,
            consumer,
        };
        (checks, ingestor)
    }
}

/// A fetched run: its messages, acknowledged once it is stored, and its
/// records built into tasks.
struct Fetched {
    messages: Vec<jetstream::Message>,
    run: Run<Record>,
}

/// What a fetched run must pass before it may be stored (module
/// documentation): the consumer's delivery sequence runs on without a gap or
/// a redelivery, and the consumer is still the one this start made.
struct Checks<'a> {
    next_delivery: &'a mut Option<u64>,
    made: &'a jetstream::consumer::Info,
    config: &'a SourceConfig,
    stream: &'a str,
    consumer: &'a Consumer,
}

impl Checks<'_> {
    /// Checks `messages` and builds their run from the cursor `expected`.
    async fn build(
        &mut self,
        builder: &Builder,
        messages: Vec<jetstream::Message>,
        expected: Option<u64>,
    ) -> Result<Fetched, SourceError> {
        let mut records = Vec::with_capacity(messages.len());
        for message in &messages {
            let info = message
                .info()
                .map_err(|e| remote_error(self.config, format!("a message's metadata: {e}")))?;
            if let Some(expected) = *self.next_delivery {
                if info.consumer_sequence != expected || info.delivered != 1 {
                    return Err(remote_error(
                        self.config,
                        format!(
                            "the consumer delivered #{} (delivery {}) where #{expected} was next: \
                             another reader uses it, or a run outlived the acknowledgement wait; \
                             starting again from the stored cursor",
                            info.consumer_sequence, info.delivered
                        ),
                    ));
                }
                *self.next_delivery = Some(expected + 1);
            }
            let headers = message
                .headers
                .iter()
                .flat_map(|h| h.iter())
                .flat_map(|(name, values)| {
                    values
                        .iter()
                        .map(move |v| (name.to_string(), v.as_str().as_bytes().to_vec()))
                })
                .collect();
            records.push(Record {
                partition: self.stream.to_owned(),
                position: info.stream_sequence,
                locator: format!("nats://{}/{}", self.stream, info.stream_sequence),
                key: Some(message.subject.as_bytes().to_vec()),
                headers,
                payload: message.payload.to_vec(),
            });
        }
        // Redeliveries can come after newer records: a run is in order.
        records.sort_by_key(|r| r.position);
        if self.next_delivery.is_some() {
            // Fetched from this start's consumer, or another reader made it
            // afresh in between and these follow that reader's fetches.
            let info = self
                .consumer
                .get_info()
                .await
                .map_err(|e| remote_error(self.config, format!("consumer info: {e}")))?;
            if info.created != self.made.created {
                return Err(remote_error(
                    self.config,
                    "another reader made the consumer afresh; starting again from the stored cursor",
                ));
            }
        }
        let run = builder
            .prepare(self.stream, expected, records)
            .await
            .map_err(|e| store_error(self.config, e))?;
        Ok(Fetched { messages, run })
    }
}

/// Stores a fetched run, then acknowledges it: with `acks_all` (a consumer
/// made afresh, acknowledging all up to a message) its last message, else
/// each one.
async fn store(
    ingestor: &mut Ingestor,
    config: &SourceConfig,
    acks_all: bool,
    fetched: Fetched,
) -> Result<(), SourceError> {
    let Fetched { messages, run } = fetched;
    let step = ingestor
        .store(run)
        .await
        .map_err(|e| store_error(config, e))?;
    match step {
        Step::Stored { .. } => {
            let acks: Vec<_> = if acks_all {
                messages.last().into_iter().map(|m| m.ack()).collect()
            } else {
                messages.iter().map(|m| m.ack()).collect()
            };
            futures::future::try_join_all(acks)
                .await
                .map_err(|e| remote_error(config, format!("ack: {e}")))?;
            Ok(())
        }
        // Another reader stored past these: start again from the cursor.
        Step::Moved { to } => Err(remote_error(
            config,
            format!("another reader moved the cursor to {to:?}; starting again from it"),
        )),
    }
}

/// Up to a batch of records: what is there at once, else the first to come
/// within a watch interval and what follows it at once.
async fn next_batch(
    consumer: &Consumer,
    config: &SourceConfig,
) -> Result<Vec<jetstream::Message>, SourceError> {
    let mut out = fetch(consumer, config, false).await?;
    if out.is_empty() {
        out = fetch(consumer, config, true).await?;
        if !out.is_empty() {
            out.extend(fetch(consumer, config, false).await?);
        }
    }
    Ok(out)
}

async fn fetch(
    consumer: &Consumer,
    config: &SourceConfig,
    wait: bool,
) -> Result<Vec<jetstream::Message>, SourceError> {
    // A pull request the server forgot (it restarted while the request
    // waited) is never answered: past this, the reader starts again.
    match tokio::time::timeout(FETCH_LIMIT, fetch_unbounded(consumer, config, wait)).await {
        Ok(fetched) => fetched,
        Err(_) => Err(remote_error(
            config,
            format!("fetch: no answer in {} s", FETCH_LIMIT.as_secs()),
        )),
    }
}

async fn fetch_unbounded(
    consumer: &Consumer,
    config: &SourceConfig,
    wait: bool,
) -> Result<Vec<jetstream::Message>, SourceError> {
    let batch = if wait {
        consumer
            .batch()
            .max_messages(1)
            .expires(WATCH_EVERY)
            .messages()
            .await
    } else {
        consumer.fetch().max_messages(config.batch).messages().await
    }
    .map_err(|e| remote_error(config, format!("fetch: {e}")))?;
    let mut batch = std::pin::pin!(batch);
    let mut out = Vec::new();
    while let Some(message) = batch.next().await {
        out.push(message.map_err(|e| remote_error(config, format!("fetch: {e}")))?);
    }
    Ok(out)
}

impl Reader {
    /// Pauses or resumes by the queue's depth, and measures the lag.
    async fn watch(&mut self) -> Result<(), SourceError> {
        self.watched = Instant::now();
        let pause = self
            .ingestor
            .should_pause(self.paused)
            .await
            .map_err(|e| store_error(&self.config, e))?;
        if pause != self.paused {
            info!(source = %self.config.name, paused = pause, "back-pressure");
            self.paused = pause;
        }
        self.registry.set_paused(&self.config.name, pause);
        let info = self
            .consumer
            .get_info()
            .await
            .map_err(|e| remote_error(&self.config, format!("consumer info: {e}")))?;
        let lag = info.num_pending + info.num_ack_pending as u64;
        self.registry
            .partition(&self.config.name, &self.nats.stream, None, Some(lag));
        Ok(())
    }
}
