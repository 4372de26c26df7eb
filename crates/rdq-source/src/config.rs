//! A source's configuration: the `[[sources]]` tables of the server's
//! configuration file, or the file `rdq source --config` reads
//! (docs/sources.md). Every field is checked at start-up, before anything
//! connects; a mistake is an error naming the source.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::SourceError;

/// One source: where records come from, and the tasks they become.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// The source's name, `[a-z0-9._-]{1,120}`: its cursors, status and
    /// metrics go by it. Changing it starts the source afresh.
    pub name: String,
    /// The queue every record's task goes to.
    pub queue: String,
    /// The handler every record's task is for.
    pub handler: String,
    /// The payload's content type (default `application/octet-stream`).
    #[serde(default = "default_content_type")]
    pub content_type: String,
    /// Which of a record's headers (Kafka headers, NATS headers, SQS
    /// message attributes) become task headers: `"all"` (default),
    /// `"none"`, or a list of names.
    #[serde(default)]
    pub headers: HeaderSelection,
    /// Put before every mapped header's name (default none).
    #[serde(default)]
    pub header_prefix: String,
    /// Keep the record's key (Kafka key, NATS subject, SQS message group)
    /// as this task header (default: not kept).
    #[serde(default)]
    pub key_header: Option<String>,
    /// Make the record's key the task's flow key, so per-key limits and
    /// `key_concurrency = 1` order a key's tasks (docs/flow-control.md).
    #[serde(default)]
    pub key_as_flow_key: bool,
    /// Records per ingest step at most (default 500).
    #[serde(default = "default_batch")]
    pub batch: usize,
    /// Stop reading while the queue holds more PENDING tasks than this
    /// (default: never).
    #[serde(default)]
    pub high_water: Option<u64>,
    /// Read again once the queue holds fewer PENDING tasks than this
    /// (default: half of `high_water`).
    #[serde(default)]
    pub low_water: Option<u64>,
    /// How long to wait before trying again after an error (ms, default
    /// 1000; doubled up to 30 s while errors repeat).
    #[serde(default = "default_retry_ms")]
    pub retry_ms: u64,
    /// A Kafka topic (exactly one of `kafka`, `nats`, `sqs`).
    #[serde(default)]
    pub kafka: Option<KafkaConfig>,
    /// A NATS JetStream stream.
    #[serde(default)]
    pub nats: Option<NatsConfig>,
    /// An SQS queue.
    #[serde(default)]
    pub sqs: Option<SqsConfig>,
}

/// Which record headers become task headers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub enum HeaderSelection {
    /// Every header.
    #[default]
    All,
    /// None.
    None,
    /// These, by name.
    Only(Vec<String>),
}

impl<'de> Deserialize<'de> for HeaderSelection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Word(String),
            List(Vec<String>),
        }
        match Raw::deserialize(d)? {
            Raw::Word(w) if w == "all" => Ok(Self::All),
            Raw::Word(w) if w == "none" => Ok(Self::None),
            Raw::Word(w) => Err(serde::de::Error::custom(format!(
                "headers: \"all\", \"none\" or a list of names, not {w:?}"
            ))),
            Raw::List(names) => Ok(Self::Only(names)),
        }
    }
}

impl HeaderSelection {
    /// True when a header called `name` is mapped.
    pub fn takes(&self, name: &str) -> bool {
        match self {
            Self::All => true,
            Self::None => false,
            Self::Only(names) => names.iter().any(|n| n == name),
        }
    }
}

/// A Kafka topic read by a consumer group.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, `host:port[,host:port…]`.
    pub brokers: String,
    /// The topic.
    pub topic: String,
    /// The consumer group (default `rdq.<source name>`).
    #[serde(default)]
    pub group: Option<String>,
    /// The cluster's name in locators (`kafka://<cluster>/<topic>/<partition>/<offset>`;
    /// default `kafka`).
    #[serde(default = "default_cluster")]
    pub cluster: String,
    /// Extra client settings passed to librdkafka as they are
    /// (`security.protocol`, `sasl.*`, `ssl.*`, …).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// A JetStream stream read through a durable pull consumer.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NatsConfig {
    /// The server, `nats://host:port` (credentials in the URL if any).
    pub url: String,
    /// The stream.
    pub stream: String,
    /// The durable consumer, created if missing (default `rdq-<source name>`
    /// with dots made dashes).
    #[serde(default)]
    pub consumer: Option<String>,
    /// Only subjects matching this filter (default: every subject).
    #[serde(default)]
    pub filter_subject: Option<String>,
    /// Acknowledgement wait of a created consumer (ms, default 30000).
    #[serde(default = "default_ack_wait_ms")]
    pub ack_wait_ms: u64,
}

/// An SQS queue, standard or FIFO.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SqsConfig {
    /// The queue's URL.
    pub queue_url: String,
    /// The region (default `us-east-1`).
    #[serde(default = "default_region")]
    pub region: String,
    /// Another endpoint than AWS's (an SQS-compatible server).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Access key; default `AWS_ACCESS_KEY_ID` from the environment.
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// Secret key; default `AWS_SECRET_ACCESS_KEY` from the environment.
    #[serde(default)]
    pub secret_access_key: Option<String>,
    /// Receives in flight at once (default 4).
    #[serde(default = "default_receivers")]
    pub receivers: usize,
    /// Visibility timeout asked with each receive (s, default 60): longer
    /// than a submit ever takes.
    #[serde(default = "default_visibility_s")]
    pub visibility_timeout_s: i32,
}

fn default_content_type() -> String {
    "application/octet-stream".to_owned()
}
fn default_batch() -> usize {
    500
}
fn default_retry_ms() -> u64 {
    1_000
}
fn default_cluster() -> String {
    "kafka".to_owned()
}
fn default_ack_wait_ms() -> u64 {
    30_000
}
fn default_region() -> String {
    "us-east-1".to_owned()
}
fn default_receivers() -> usize {
    4
}
fn default_visibility_s() -> i32 {
    60
}

/// Which kind of source a configuration names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A Kafka topic.
    Kafka,
    /// A NATS JetStream stream.
    Nats,
    /// An SQS queue.
    Sqs,
}

impl Kind {
    /// The kind's name, as status and metrics say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Kafka => "kafka",
            Self::Nats => "nats",
            Self::Sqs => "sqs",
        }
    }

    /// True when this build can run the kind (its cargo feature is on).
    pub fn is_built(self) -> bool {
        match self {
            Self::Kafka => cfg!(feature = "kafka"),
            Self::Nats => cfg!(feature = "nats"),
            Self::Sqs => cfg!(feature = "sqs"),
        }
    }
}

impl SourceConfig {
    /// The kind its one kind table names.
    pub fn kind(&self) -> Result<Kind, SourceError> {
        match (&self.kafka, &self.nats, &self.sqs) {
            (Some(_), None, None) => Ok(Kind::Kafka),
            (None, Some(_), None) => Ok(Kind::Nats),
            (None, None, Some(_)) => Ok(Kind::Sqs),
            _ => Err(self.invalid("give exactly one of [kafka], [nats] or [sqs]")),
        }
    }

    /// The wait after `failures` errors in a row.
    pub fn backoff(&self, failures: u32) -> Duration {
        let ms = self
            .retry_ms
            .max(1)
            .saturating_mul(1u64 << failures.min(16))
            .min(30_000);
        Duration::from_millis(ms)
    }

    /// The low-water mark: as configured, else half the high-water mark.
    pub fn low_water(&self) -> Option<u64> {
        self.high_water
            .map(|high| self.low_water.unwrap_or(high / 2))
    }

    fn invalid(&self, why: impl std::fmt::Display) -> SourceError {
        SourceError::Config {
            source_name: self.name.clone(),
            why: why.to_string(),
        }
    }

    /// Checks everything that can be checked without connecting.
    pub fn validate(&self) -> Result<Kind, SourceError> {
        rdq_engine::store::sources::validate_cursor_names(&self.name, "-")
            .map_err(|e| self.invalid(e))?;
        if !rdq_envelope::is_valid_name(&self.queue) {
            return Err(self.invalid(format!(
                "queue: {:?} is not a queue name ([a-z0-9._-]{{1,240}})",
                self.queue
            )));
        }
        if self.handler.is_empty() {
            return Err(self.invalid("handler: must not be empty"));
        }
        if self.batch == 0 || self.batch > 10_000 {
            return Err(self.invalid("batch: from 1 to 10000"));
        }
        if let (Some(high), Some(low)) = (self.high_water, self.low_water())
            && (high == 0 || low >= high)
        {
            return Err(self.invalid("high_water must be above zero and above low_water"));
        }
        if self.low_water.is_some() && self.high_water.is_none() {
            return Err(self.invalid("low_water needs high_water"));
        }
        for name in [&self.key_header]
            .into_iter()
            .flatten()
            .chain(match &self.headers {
                HeaderSelection::Only(names) => names.iter().collect::<Vec<_>>(),
                _ => Vec::new(),
            })
        {
            if name.is_empty() || rdq_envelope::is_reserved_header(name) {
                return Err(self.invalid(format!(
                    "header {name:?}: a header name is not empty and does not start with \"rdq.\""
                )));
            }
        }
        if rdq_envelope::is_reserved_header(&self.header_prefix) {
            return Err(self.invalid("header_prefix: must not start with \"rdq.\""));
        }
        let kind = self.kind()?;
        if !kind.is_built() {
            return Err(self.invalid(format!(
                "this rdq is built without the `{}` feature",
                kind.as_str()
            )));
        }
        match (&self.kafka, &self.nats, &self.sqs) {
            (Some(k), _, _) if k.brokers.is_empty() || k.topic.is_empty() => {
                Err(self.invalid("kafka: brokers and topic are required"))
            }
            (_, Some(n), _) if n.url.is_empty() || n.stream.is_empty() => {
                Err(self.invalid("nats: url and stream are required"))
            }
            (_, _, Some(s)) if s.queue_url.is_empty() => {
                Err(self.invalid("sqs: queue_url is required"))
            }
            (_, _, Some(s)) if s.receivers == 0 || s.receivers > 64 => {
                Err(self.invalid("sqs: receivers from 1 to 64"))
            }
            _ => Ok(kind),
        }
    }
}

/// Checks a list of sources: each one, and that names are unique.
pub fn validate_all(sources: &[SourceConfig]) -> Result<(), SourceError> {
    let mut seen = std::collections::HashSet::new();
    for source in sources {
        source.validate()?;
        if !seen.insert(source.name.as_str()) {
            return Err(source.invalid("two sources have this name"));
        }
    }
    Ok(())
}
