//! An SQS queue, standard or FIFO (the AWS SDK): several receivers
//! long-poll it; each received batch is submitted, and only then deleted.
//!
//! SQS has no positions, so there is no cursor: a message whose delete was
//! lost (a crash between the submit and the delete, a visibility timeout
//! that ran out) comes again with the same message id, and its locator key
//! turns it into its original task while the store keeps the key
//! (docs/sources/sqs.md says how long that is).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName, QueueAttributeName,
};
use rdq_engine::Engine;
use rdq_runtime::Shutdown;
use tracing::info;

use crate::config::{SourceConfig, SqsConfig};
use crate::ingest::{Ingestor, Record, Step};
use crate::status::{Registry, SourceState};
use crate::{SourceError, WATCH_EVERY, remote_error, store_error};

/// Most messages one receive returns (SQS's limit).
const RECEIVE_MAX: i32 = 10;
/// Long-poll wait of a receive (s).
const RECEIVE_WAIT_S: i32 = 1;

/// Reads the queue until `stop` or an error.
pub(crate) async fn run(
    engine: &Engine,
    config: &Arc<SourceConfig>,
    registry: &Registry,
    stop: &Shutdown,
) -> Result<(), SourceError> {
    let Some(sqs) = config.sqs.clone() else {
        return Err(remote_error(config, "no [sqs] table"));
    };
    let client = client(config, &sqs)?;
    // Reading the queue's attributes checks the URL and the credentials.
    let lag = approximate_messages(config, &client, &sqs).await?;
    registry.partition(&config.name, "", None, Some(lag));
    info!(source = %config.name, queue_url = %sqs.queue_url, "reading the SQS queue");
    registry.update(&config.name, |s| s.state = SourceState::Running);
    let paused = Arc::new(AtomicBool::new(false));
    let mut receivers = Vec::new();
    for _ in 0..sqs.receivers {
        let receiver = Receiver {
            ingestor: Ingestor::new(engine.clone(), config.clone(), registry.clone(), false),
            config: config.clone(),
            sqs: sqs.clone(),
            client: client.clone(),
            paused: paused.clone(),
        };
        receivers.push(receiver.receive(stop.clone()));
    }
    let watcher = watch(
        Ingestor::new(engine.clone(), config.clone(), registry.clone(), false),
        config,
        &sqs,
        &client,
        registry,
        &paused,
        stop.clone(),
    );
    let receiving = futures::future::try_join_all(receivers);
    tokio::try_join!(receiving, watcher).map(|_| ())
}

fn client(config: &SourceConfig, sqs: &SqsConfig) -> Result<Client, SourceError> {
    let key = sqs
        .access_key_id
        .clone()
        .or_else(|| std::env::var("AWS_ACCESS_KEY_ID").ok());
    let secret = sqs
        .secret_access_key
        .clone()
        .or_else(|| std::env::var("AWS_SECRET_ACCESS_KEY").ok());
    let (Some(key), Some(secret)) = (key, secret) else {
        return Err(SourceError::Config {
            source_name: config.name.clone(),
            why: "sqs: no credentials (access_key_id and secret_access_key, or \
                  AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
                .into(),
        });
    };
    let token = std::env::var("AWS_SESSION_TOKEN").ok();
    let mut builder = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(sqs.region.clone()))
        .credentials_provider(Credentials::new(key, secret, token, None, "rdq"));
    if let Some(endpoint) = &sqs.endpoint {
        builder = builder.endpoint_url(endpoint);
    }
    Ok(Client::from_conf(builder.build()))
}

async fn approximate_messages(
    config: &SourceConfig,
    client: &Client,
    sqs: &SqsConfig,
) -> Result<u64, SourceError> {
    let attributes = client
        .get_queue_attributes()
        .queue_url(&sqs.queue_url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .map_err(|e| {
            remote_error(
                config,
                format!(
                    "the queue {}: {}",
                    sqs.queue_url,
                    aws_sdk_sqs::error::DisplayErrorContext(&e)
                ),
            )
        })?;
    Ok(attributes
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0))
}

/// Pauses and resumes every receiver by the queue's depth, and measures
/// the lag, until `stop`.
async fn watch(
    ingestor: Ingestor,
    config: &SourceConfig,
    sqs: &SqsConfig,
    client: &Client,
    registry: &Registry,
    paused: &AtomicBool,
    mut stop: Shutdown,
) -> Result<(), SourceError> {
    let mut ingestor = ingestor;
    loop {
        tokio::select! {
            () = stop.wait() => return Ok(()),
            () = tokio::time::sleep(WATCH_EVERY) => {}
        }
        let pause = back_pressure(&mut ingestor, config, paused).await?;
        registry.set_paused(&config.name, pause);
        let lag = approximate_messages(config, client, sqs).await?;
        registry.partition(&config.name, "", None, Some(lag));
    }
}

/// Pauses or resumes every receiver by the queue's depth; answers whether
/// they are paused.
async fn back_pressure(
    ingestor: &mut Ingestor,
    config: &SourceConfig,
    paused: &AtomicBool,
) -> Result<bool, SourceError> {
    let was = paused.load(Ordering::Relaxed);
    let pause = ingestor
        .should_pause(was)
        .await
        .map_err(|e| store_error(config, e))?;
    if pause != was {
        info!(source = %config.name, paused = pause, "back-pressure");
        paused.store(pause, Ordering::Relaxed);
    }
    Ok(pause)
}

struct Receiver {
    ingestor: Ingestor,
    config: Arc<SourceConfig>,
    sqs: SqsConfig,
    client: Client,
    paused: Arc<AtomicBool>,
}

impl Receiver {
    async fn receive(mut self, mut stop: Shutdown) -> Result<(), SourceError> {
        loop {
            if self.paused.load(Ordering::Relaxed) {
                tokio::select! {
                    () = stop.wait() => return Ok(()),
                    () = tokio::time::sleep(WATCH_EVERY) => continue,
                }
            }
            let received = tokio::select! {
                () = stop.wait() => return Ok(()),
                r = self.client
                    .receive_message()
                    .queue_url(&self.sqs.queue_url)
                    .max_number_of_messages(RECEIVE_MAX.min(i32::try_from(self.config.batch).unwrap_or(RECEIVE_MAX)))
                    .wait_time_seconds(RECEIVE_WAIT_S)
                    .visibility_timeout(self.sqs.visibility_timeout_s)
                    .message_attribute_names("All")
                    .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
                    .send() => r,
            }
            .map_err(|e| {
                remote_error(
                    &self.config,
                    format!("receive: {}", aws_sdk_sqs::error::DisplayErrorContext(&e)),
                )
            })?;
            let messages = received.messages();
            if messages.is_empty() {
                continue;
            }
            let records: Vec<Record> = messages.iter().map(|m| self.record(m)).collect();
            match self
                .ingestor
                .ingest("", &records)
                .await
                .map_err(|e| store_error(&self.config, e))?
            {
                Step::Stored { .. } => self.delete(messages).await?,
                Step::Moved { .. } => {}
            }
            if self.ingestor.may_be_over() {
                back_pressure(&mut self.ingestor, &self.config, &self.paused).await?;
            }
        }
    }

    fn record(&self, message: &Message) -> Record {
        let id = message.message_id().unwrap_or_default();
        let headers = message
            .message_attributes()
            .into_iter()
            .flatten()
            .map(|(name, value)| {
                let bytes = match (value.string_value(), value.binary_value()) {
                    (Some(s), _) => s.as_bytes().to_vec(),
                    (None, Some(b)) => b.as_ref().to_vec(),
                    (None, None) => Vec::new(),
                };
                (name.clone(), bytes)
            })
            .collect();
        let group = message
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
            .map(|g| g.as_bytes().to_vec());
        Record {
            partition: String::new(),
            position: 0,
            locator: format!("sqs://{}/{id}", self.sqs.queue_url),
            key: group,
            headers,
            payload: message.body().unwrap_or_default().as_bytes().to_vec(),
        }
    }

    async fn delete(&self, messages: &[Message]) -> Result<(), SourceError> {
        let entries = messages
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
                    .ok()
            })
            .collect();
        let deleted = self
            .client
            .delete_message_batch()
            .queue_url(&self.sqs.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| {
                remote_error(
                    &self.config,
                    format!("delete: {}", aws_sdk_sqs::error::DisplayErrorContext(&e)),
                )
            })?;
        if let Some(failed) = deleted.failed().first() {
            // The message comes again after its visibility timeout and
            // finds its task by its key.
            return Err(remote_error(
                &self.config,
                format!(
                    "delete: {} ({})",
                    failed.message().unwrap_or_default(),
                    failed.code()
                ),
            ));
        }
        Ok(())
    }
}
