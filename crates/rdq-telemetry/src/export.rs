//! The tracer and its exporter: finished spans go into a bounded queue
//! (`try_send`, never waiting: a full queue drops the span and counts it),
//! and one background task sends them in batches as OTLP/HTTP JSON
//! (`POST {endpoint}/v1/traces`, `content-type: application/json`).
//!
//! A failed export is logged at most once per [`WARN_INTERVAL`] (with the
//! number of batches and spans lost since the last warning), so a collector
//! outage does not flood the log; the spans of a failed batch are dropped,
//! not retried: tracing is best effort, the request path never waits on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::config::{Sampler, TelemetryConfig};
use crate::span::{AttrValue, SpanData, export_request};

/// Shortest pause between two warnings about failed exports or dropped spans.
pub const WARN_INTERVAL: Duration = Duration::from_secs(60);

/// Records finished spans for export. Cheap to clone; every clone feeds the
/// same queue.
#[derive(Clone)]
pub struct Tracer {
    inner: Arc<Inner>,
}

struct Inner {
    queue: mpsc::Sender<Message>,
    sampler: Sampler,
    counters: Arc<Counters>,
}

/// What the exporter has done so far.
#[derive(Debug, Default)]
struct Counters {
    dropped: AtomicU64,
    exported: AtomicU64,
    failed: AtomicU64,
}

enum Message {
    Span(Box<SpanData>),
    Flush(oneshot::Sender<()>),
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("sampler", &self.inner.sampler)
            .finish_non_exhaustive()
    }
}

impl Tracer {
    /// Starts the exporter task on the current Tokio runtime. Call it inside
    /// the runtime. Fails only when the HTTP client cannot be built.
    pub fn start(config: TelemetryConfig) -> Result<Self, crate::TelemetryError> {
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in &config.headers {
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                crate::TelemetryError::Invalid(format!("OTLP header name {k:?} is not valid"))
            })?;
            let value = reqwest::header::HeaderValue::from_str(v).map_err(|_| {
                crate::TelemetryError::Invalid(format!("OTLP header {k:?} has an invalid value"))
            })?;
            headers.insert(name, value);
        }
        let client = reqwest::Client::builder()
            .timeout(config.export_timeout)
            .default_headers(headers)
            .no_proxy()
            .user_agent(concat!("rdq-telemetry/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                crate::TelemetryError::Invalid(format!("cannot build the OTLP client: {e}"))
            })?;
        let (tx, rx) = mpsc::channel(config.max_queue.max(1));
        let counters = Arc::new(Counters::default());
        let mut resource: Vec<(String, AttrValue)> = vec![
            (
                "service.name".into(),
                AttrValue::Str(config.service_name.clone()),
            ),
            ("telemetry.sdk.name".into(), "rdq-telemetry".into()),
            ("telemetry.sdk.language".into(), "rust".into()),
            (
                "telemetry.sdk.version".into(),
                env!("CARGO_PKG_VERSION").into(),
            ),
        ];
        for (k, v) in &config.resource {
            if k != "service.name" {
                resource.push((k.clone(), AttrValue::Str(v.clone())));
            }
        }
        let exporter = Exporter {
            client,
            url: config.traces_url.clone(),
            max_batch: config.max_batch.max(1),
            delay: config.schedule_delay,
            counters: Arc::clone(&counters),
        };
        tokio::spawn(exporter.run(rx, resource));
        debug!(url = %config.traces_url, "OTLP trace export on");
        Ok(Self {
            inner: Arc::new(Inner {
                queue: tx,
                sampler: config.sampler,
                counters,
            }),
        })
    }

    /// The sampler, for the decisions made when a span's context is formed.
    pub fn sampler(&self) -> &Sampler {
        &self.inner.sampler
    }

    /// Queues a finished span for export without waiting; an unsampled
    /// span is ignored, and one that finds the queue full is dropped and counted.
    pub fn record(&self, span: SpanData) {
        if !span.context.is_sampled() {
            return;
        }
        if self
            .inner
            .queue
            .try_send(Message::Span(Box::new(span)))
            .is_err()
        {
            self.inner.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Spans dropped because the queue was full (or the exporter gone).
    pub fn dropped(&self) -> u64 {
        self.inner.counters.dropped.load(Ordering::Relaxed)
    }

    /// Spans the collector accepted.
    pub fn exported(&self) -> u64 {
        self.inner.counters.exported.load(Ordering::Relaxed)
    }

    /// Spans lost to failed export requests.
    pub fn failed(&self) -> u64 {
        self.inner.counters.failed.load(Ordering::Relaxed)
    }

    /// Sends everything queued so far and waits (up to `within`) for it to
    /// be exported: called once at shutdown.
    pub async fn flush(&self, within: Duration) {
        let (tx, rx) = oneshot::channel();
        let sent = tokio::time::timeout(within, self.inner.queue.send(Message::Flush(tx))).await;
        if matches!(sent, Ok(Ok(()))) {
            let _ = tokio::time::timeout(within, rx).await;
        }
    }
}

struct Exporter {
    client: reqwest::Client,
    url: String,
    max_batch: usize,
    delay: Duration,
    counters: Arc<Counters>,
}

/// When the exporter last warned, and what was lost since.
struct Warnings {
    last: Option<Instant>,
    failed_batches: u64,
    failed_spans: u64,
    dropped_seen: u64,
}

impl Exporter {
    async fn run(self, mut rx: mpsc::Receiver<Message>, resource: Vec<(String, AttrValue)>) {
        let mut batch: Vec<SpanData> = Vec::with_capacity(self.max_batch);
        let mut warnings = Warnings {
            last: None,
            failed_batches: 0,
            failed_spans: 0,
            dropped_seen: 0,
        };
        let mut deadline: Option<tokio::time::Instant> = None;
        loop {
            let message = match deadline {
                Some(at) => match tokio::time::timeout_at(at, rx.recv()).await {
                    Ok(m) => m,
                    Err(_) => {
                        self.send(&resource, &mut batch, &mut warnings).await;
                        deadline = None;
                        continue;
                    }
                },
                None => rx.recv().await,
            };
            match message {
                Some(Message::Span(span)) => {
                    batch.push(*span);
                    if batch.len() >= self.max_batch {
                        self.send(&resource, &mut batch, &mut warnings).await;
                        deadline = None;
                    } else if deadline.is_none() {
                        deadline = Some(tokio::time::Instant::now() + self.delay);
                    }
                }
                Some(Message::Flush(done)) => {
                    self.send(&resource, &mut batch, &mut warnings).await;
                    deadline = None;
                    let _ = done.send(());
                }
                None => {
                    self.send(&resource, &mut batch, &mut warnings).await;
                    return;
                }
            }
        }
    }

    async fn send(
        &self,
        resource: &[(String, AttrValue)],
        batch: &mut Vec<SpanData>,
        warnings: &mut Warnings,
    ) {
        if batch.is_empty() {
            self.warn_dropped(warnings);
            return;
        }
        let spans = std::mem::take(batch);
        let body = export_request(resource, &spans);
        let n = spans.len() as u64;
        let result = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await;
        let failure = match result {
            Ok(r) if r.status().is_success() => None,
            Ok(r) => Some(format!("the collector answered {}", r.status())),
            Err(e) => Some(describe(&e)),
        };
        match failure {
            None => {
                self.counters.exported.fetch_add(n, Ordering::Relaxed);
            }
            Some(why) => {
                self.counters.failed.fetch_add(n, Ordering::Relaxed);
                warnings.failed_batches += 1;
                warnings.failed_spans += n;
                if warnings.last.is_none_or(|t| t.elapsed() >= WARN_INTERVAL) {
                    warn!(
                        url = %self.url,
                        error = %why,
                        failed_batches = warnings.failed_batches,
                        failed_spans = warnings.failed_spans,
                        "OTLP trace export failed; the spans are dropped (this warning repeats at most once a minute)"
                    );
                    warnings.last = Some(Instant::now());
                    warnings.failed_batches = 0;
                    warnings.failed_spans = 0;
                }
            }
        }
        self.warn_dropped(warnings);
    }

    fn warn_dropped(&self, warnings: &mut Warnings) {
        let dropped = self.counters.dropped.load(Ordering::Relaxed);
        if dropped > warnings.dropped_seen
            && warnings.last.is_none_or(|t| t.elapsed() >= WARN_INTERVAL)
        {
            warn!(
                dropped_spans = dropped - warnings.dropped_seen,
                "the span export queue was full; spans were dropped (OTEL_BSP_MAX_QUEUE_SIZE)"
            );
            warnings.dropped_seen = dropped;
            warnings.last = Some(Instant::now());
        }
    }
}

/// The innermost cause of an export failure, without the URL's query.
fn describe(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut last = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        last = s.to_string();
        source = s.source();
    }
    if e.is_timeout() {
        format!("timed out: {last}")
    } else {
        last
    }
}
