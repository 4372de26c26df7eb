//! A Kafka topic through a consumer group (librdkafka): partitions are
//! assigned and rebalanced by the group; each partition's records are
//! ingested in offset order; the group's committed offset moves only after
//! the run is stored.
//!
//! On a store that keeps cursors the store is where a partition resumes:
//! the first record seen from a newly assigned partition tells where the
//! group's position is, and if that is not the stored cursor the reader
//! seeks to the cursor (librdkafka drops what it fetched before a seek).
//! Records behind the cursor are skipped (their tasks exist), so a group
//! reset to the earliest offset makes no second task; a group ahead of the
//! cursor is brought back, so nothing between is lost. Offsets committed to
//! the group are advisory there: they let tools measure the group's lag.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};
use rdq_engine::Engine;
use rdq_runtime::Shutdown;
use tracing::{debug, info};

use crate::config::{KafkaConfig, SourceConfig};
use crate::ingest::{Ingestor, Record, Step};
use crate::status::{Registry, SourceState};
use crate::{LINGER, SourceError, WATCH_EVERY, remote_error, store_error};

/// How long a partition with records behind may give none before the
/// reader starts again.
const STALL_AFTER: Duration = Duration::from_secs(10);

/// How long a metadata or watermark request may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// Hears the group's rebalances: the partitions taken away, so what is
/// known of their cursors is read again when they come back.
#[derive(Default)]
struct Context {
    revoked: Mutex<Vec<i32>>,
}

impl ClientContext for Context {}

impl ConsumerContext for Context {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            let mut revoked = self.revoked.lock().unwrap_or_else(PoisonError::into_inner);
            revoked.extend(list.elements().iter().map(|e| e.partition()));
        }
    }
}

impl Context {
    fn take_revoked(&self) -> Vec<i32> {
        std::mem::take(&mut *self.revoked.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

type Kafka = StreamConsumer<Context>;

/// Reads the topic until `stop` or an error.
pub(crate) async fn run(
    engine: &Engine,
    config: &Arc<SourceConfig>,
    registry: &Registry,
    stop: &Shutdown,
) -> Result<(), SourceError> {
    let Some(kafka) = config.kafka.clone() else {
        return Err(remote_error(config, "no [kafka] table"));
    };
    let consumer = Arc::new(connect(config, &kafka)?);
    check_topic(config, &kafka, &consumer).await?;
    consumer
        .subscribe(&[&kafka.topic])
        .map_err(|e| remote_error(config, format!("subscribe to {}: {e}", kafka.topic)))?;
    info!(source = %config.name, topic = %kafka.topic, "reading the Kafka topic");
    registry.update(&config.name, |s| s.state = SourceState::Running);
    let mut reader = Reader {
        ingestor: Ingestor::new(engine.clone(), config.clone(), registry.clone(), true),
        config: config.clone(),
        kafka,
        consumer,
        registry: registry.clone(),
        aligned: HashSet::new(),
        heard: BTreeMap::new(),
        paused: false,
        watched: Instant::now(),
    };
    // The lag is measured beside the reading (watermark requests are round
    // trips to the broker), and stops with it.
    let lag = tokio::spawn(measure_lag(
        Arc::clone(&reader.consumer),
        reader.kafka.topic.clone(),
        config.name.clone(),
        registry.clone(),
    ));
    let read = reader.read(stop.clone()).await;
    lag.abort();
    read
}

/// Every watch interval, each assigned partition's newest offset minus
/// where it stands (the stored cursor as last known, else the consumer's
/// position), into the status.
async fn measure_lag(consumer: Arc<Kafka>, topic: String, name: String, registry: Registry) {
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let (probe, of) = (Arc::clone(&consumer), topic.clone());
        let measured = tokio::task::spawn_blocking(move || {
            let assignment = probe.assignment()?;
            let position = probe.position()?;
            let mut out = Vec::new();
            for element in assignment.elements() {
                let partition = element.partition();
                let (_, high) = probe.fetch_watermarks(&of, partition, METADATA_TIMEOUT)?;
                let at = position
                    .find_partition(&of, partition)
                    .and_then(|p| p.offset().to_raw())
                    .filter(|&o| o >= 0);
                out.push((partition, high, at));
            }
            Ok::<_, rdkafka::error::KafkaError>(out)
        })
        .await;
        let Ok(Ok(measured)) = measured else {
            continue;
        };
        let cursors = registry
            .get(&name)
            .map(|s| s.partitions)
            .unwrap_or_default();
        for (partition, high, at) in measured {
            let label = partition.to_string();
            let cursor = cursors
                .iter()
                .find(|p| p.partition == label)
                .and_then(|p| p.cursor)
                .and_then(|c| i64::try_from(c).ok())
                .or(at);
            let lag = cursor.map(|c| u64::try_from(high - c).unwrap_or(0));
            registry.partition(&name, &label, None, lag);
        }
    }
}

fn connect(config: &SourceConfig, kafka: &KafkaConfig) -> Result<Kafka, SourceError> {
    let mut client = ClientConfig::new();
    let group = kafka
        .group
        .clone()
        .unwrap_or_else(|| format!("rdq.{}", config.name));
    client
        .set("bootstrap.servers", &kafka.brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .set("client.id", format!("rdq-source-{}", config.name));
    for (key, value) in &kafka.properties {
        client.set(key, value);
    }
    client
        .create_with_context(Context::default())
        .map_err(|e| remote_error(config, format!("the Kafka client: {e}")))
}

/// Refuses a topic the cluster does not have (or a cluster it cannot reach)
/// with an error naming it.
async fn check_topic(
    config: &SourceConfig,
    kafka: &KafkaConfig,
    consumer: &Arc<Kafka>,
) -> Result<(), SourceError> {
    let probe = Arc::clone(consumer);
    let topic = kafka.topic.clone();
    let metadata = tokio::task::spawn_blocking(move || {
        probe
            .fetch_metadata(Some(&topic), METADATA_TIMEOUT)
            .map(|m| {
                m.topics()
                    .first()
                    .map(|t| (t.error(), t.partitions().len()))
            })
    })
    .await
    .map_err(|e| remote_error(config, e))?
    .map_err(|e| {
        remote_error(
            config,
            format!("cannot reach the Kafka cluster at {}: {e}", kafka.brokers),
        )
    })?;
    match metadata {
        Some((None, n)) if n > 0 => Ok(()),
        _ => Err(remote_error(
            config,
            format!(
                "the topic {} does not exist on {}",
                kafka.topic, kafka.brokers
            ),
        )),
    }
}

struct Reader {
    ingestor: Ingestor,
    config: Arc<SourceConfig>,
    kafka: KafkaConfig,
    consumer: Arc<Kafka>,
    registry: Registry,
    /// Partitions whose position was compared with the stored cursor
    /// since they were assigned.
    aligned: HashSet<i32>,
    /// When each partition last gave a record (or was found with nothing
    /// behind), to tell a stalled partition.
    heard: BTreeMap<i32, Instant>,
    paused: bool,
    watched: Instant,
}

impl Reader {
    async fn read(&mut self, mut stop: Shutdown) -> Result<(), SourceError> {
        let mut runs: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
        // Messages borrow the consumer, not the reader.
        let consumer = Arc::clone(&self.consumer);
        loop {
            let first = tokio::select! {
                () = stop.wait() => return Ok(()),
                m = tokio::time::timeout(WATCH_EVERY, consumer.recv()) => m,
            };
            let mut count = 0;
            if let Ok(message) = first {
                let message = message.map_err(|e| remote_error(&self.config, e))?;
                // A rebalance happens inside `recv`, before the message it
                // returns: what was taken before it of a revoked partition
                // is dropped (its next owner reads it from the committed
                // offset), what comes after it is the new assignment's.
                self.forget_revoked(&mut runs);
                self.take(&message, &mut runs);
                count += 1;
                // Whatever else arrives within the linger joins the step.
                while count < self.config.batch {
                    match tokio::time::timeout(LINGER, consumer.recv()).await {
                        Ok(Ok(m)) => {
                            self.forget_revoked(&mut runs);
                            self.take(&m, &mut runs);
                            count += 1;
                        }
                        Ok(Err(e)) => return Err(remote_error(&self.config, e)),
                        Err(_) => break,
                    }
                }
            }
            self.forget_revoked(&mut runs);
            for (partition, records) in std::mem::take(&mut runs) {
                self.heard.insert(partition, Instant::now());
                self.ingest(partition, records).await?;
            }
            if self.watched.elapsed() >= WATCH_EVERY {
                self.watched = Instant::now();
                self.back_pressure().await?;
                self.check_stalls()?;
            } else if !self.paused && self.ingestor.may_be_over() {
                self.back_pressure().await?;
            }
        }
    }

    /// Forgets the partitions the group took away since the last call:
    /// their cursors as this bridge knew them, their status, and the
    /// records of theirs taken since (before the rebalance).
    fn forget_revoked(&mut self, runs: &mut BTreeMap<i32, Vec<Record>>) {
        for partition in self.consumer.context().take_revoked() {
            debug!(source = %self.config.name, partition, "partition revoked");
            self.ingestor.forget(&partition.to_string());
            self.registry
                .drop_partition(&self.config.name, &partition.to_string());
            self.heard.remove(&partition);
            self.aligned.remove(&partition);
            runs.remove(&partition);
        }
    }

    /// Adds a message to its partition's run.
    fn take(&self, message: &BorrowedMessage<'_>, runs: &mut BTreeMap<i32, Vec<Record>>) {
        let partition = message.partition();
        let offset = u64::try_from(message.offset()).unwrap_or(0);
        let headers = message
            .headers()
            .map(|h| {
                h.iter()
                    .map(|header| {
                        (
                            header.key.to_owned(),
                            header.value.map(<[u8]>::to_vec).unwrap_or_default(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        runs.entry(partition).or_default().push(Record {
            partition: partition.to_string(),
            position: offset,
            locator: format!(
                "kafka://{}/{}/{partition}/{offset}",
                self.kafka.cluster, self.kafka.topic
            ),
            key: message.key().map(<[u8]>::to_vec),
            headers,
            payload: message.payload().map(<[u8]>::to_vec).unwrap_or_default(),
        });
    }

    async fn ingest(&mut self, partition: i32, records: Vec<Record>) -> Result<(), SourceError> {
        let name = partition.to_string();
        let Some(first) = records.first().map(|r| r.position) else {
            return Ok(());
        };
        if !self.aligned.contains(&partition) {
            // The first records since the partition was assigned: the
            // group's position, which must be the stored cursor.
            let cursor = self
                .ingestor
                .cursor(&name)
                .await
                .map_err(|e| store_error(&self.config, e))?;
            if let Some(cursor) = cursor.filter(|&c| first > c) {
                // Records between the cursor and this run exist unless the
                // log no longer starts before the run (retention).
                if self.log_start(partition).await? <= cursor {
                    info!(source = %self.config.name, partition, from = first, to = cursor,
                          "the consumer is ahead of the stored cursor; seeking back");
                    // Until a run starts at the cursor, this check stays.
                    return self.seek(partition, cursor).await;
                }
            }
            self.aligned.insert(partition);
        }
        match self
            .ingestor
            .ingest(&name, &records)
            .await
            .map_err(|e| store_error(&self.config, e))?
        {
            Step::Stored { next } => self.commit(partition, next),
            Step::Moved { to } => {
                info!(source = %self.config.name, partition, to = ?to,
                      "another bridge moved the cursor; seeking to it");
                match to {
                    Some(to) => self.seek(partition, to).await,
                    None => {
                        self.aligned.remove(&partition);
                        Ok(())
                    }
                }
            }
        }
    }

    /// Moves `partition`'s fetch position to `to`, waiting until it is
    /// done: a seek that cannot apply (the partition is not fetching yet)
    /// is an error, and the reader starts again from the committed offsets.
    async fn seek(&self, partition: i32, to: u64) -> Result<(), SourceError> {
        let offset = Offset::Offset(i64::try_from(to).unwrap_or(i64::MAX));
        let (consumer, topic) = (Arc::clone(&self.consumer), self.kafka.topic.clone());
        tokio::task::spawn_blocking(move || {
            consumer.seek(&topic, partition, offset, METADATA_TIMEOUT)
        })
        .await
        .map_err(|e| remote_error(&self.config, e))?
        .map_err(|e| remote_error(&self.config, format!("seek partition {partition}: {e}")))
    }

    /// The oldest offset `partition` still holds.
    async fn log_start(&self, partition: i32) -> Result<u64, SourceError> {
        let (consumer, topic) = (Arc::clone(&self.consumer), self.kafka.topic.clone());
        let (low, _) = tokio::task::spawn_blocking(move || {
            consumer.fetch_watermarks(&topic, partition, METADATA_TIMEOUT)
        })
        .await
        .map_err(|e| remote_error(&self.config, e))?
        .map_err(|e| remote_error(&self.config, format!("watermarks: {e}")))?;
        Ok(u64::try_from(low).unwrap_or(0))
    }

    /// Moves the group's committed offset of `partition` to `next`.
    fn commit(&self, partition: i32, next: u64) -> Result<(), SourceError> {
        if next == 0 {
            return Ok(());
        }
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(
            &self.kafka.topic,
            partition,
            Offset::Offset(i64::try_from(next).unwrap_or(i64::MAX)),
        )
        .map_err(|e| remote_error(&self.config, e))?;
        self.consumer
            .commit(&list, CommitMode::Async)
            .map_err(|e| remote_error(&self.config, format!("commit: {e}")))
    }

    /// A partition with records behind its cursor that gave none for
    /// [`STALL_AFTER`] while the source reads ends this connection: the
    /// reader starts again from the committed offsets (a safety net for a
    /// fetch that a rebalance left stuck).
    fn check_stalls(&mut self) -> Result<(), SourceError> {
        if self.paused {
            self.heard.clear();
            return Ok(());
        }
        let Some(status) = self.registry.get(&self.config.name) else {
            return Ok(());
        };
        let now = Instant::now();
        for p in &status.partitions {
            let Ok(partition) = p.partition.parse::<i32>() else {
                continue;
            };
            let heard = *self.heard.entry(partition).or_insert(now);
            match p.lag {
                Some(lag) if lag > 0 && now.duration_since(heard) >= STALL_AFTER => {
                    return Err(remote_error(
                        &self.config,
                        format!(
                            "partition {partition} gave no record for {} s with {lag} behind \
                             its cursor; starting again",
                            STALL_AFTER.as_secs()
                        ),
                    ));
                }
                Some(0) => {
                    self.heard.insert(partition, now);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Pauses or resumes by the queue's depth.
    async fn back_pressure(&mut self) -> Result<(), SourceError> {
        let pause = self
            .ingestor
            .should_pause(self.paused)
            .await
            .map_err(|e| store_error(&self.config, e))?;
        if pause != self.paused {
            let assignment = self
                .consumer
                .assignment()
                .map_err(|e| remote_error(&self.config, e))?;
            if pause {
                self.consumer.pause(&assignment)
            } else {
                self.consumer.resume(&assignment)
            }
            .map_err(|e| remote_error(&self.config, e))?;
            self.paused = pause;
            info!(source = %self.config.name, paused = pause, "back-pressure");
        }
        self.registry.set_paused(&self.config.name, pause);
        Ok(())
    }
}
