//! The tracer: the OpenTelemetry SDK's batch span processor in front of
//! its OTLP exporter (gRPC through tonic, or HTTP with protobuf bodies).
//!
//! Recording a span hands it to the processor's bounded queue and never
//! waits: when the queue is full (`OTEL_BSP_MAX_QUEUE_SIZE`) the span is
//! dropped. The processor's own thread sends batches. A failed export is
//! counted and logged at most once per [`WARN_INTERVAL`] (with the number of
//! batches and spans lost since the last warning), so a collector outage
//! does not flood the log; tracing is best effort, the request path never
//! waits on it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry::InstrumentationScope;
use opentelemetry::trace::{SpanContext, SpanId, TraceId};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::resource::{
    EnvResourceDetector, ResourceDetector, TelemetryResourceDetector,
};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, SamplingDecision,
    ShouldSample, SpanData, SpanExporter, SpanProcessor,
};
use tracing::{debug, warn};

use crate::config::{Protocol, TelemetryConfig, TelemetryError};

/// Shortest pause between two warnings about failed exports.
pub const WARN_INTERVAL: Duration = Duration::from_secs(60);

/// Records finished spans for export. Cheap to clone; every clone feeds the
/// same processor.
#[derive(Clone)]
pub struct Tracer {
    inner: Arc<Inner>,
}

struct Inner {
    processor: BatchSpanProcessor,
    sampler: opentelemetry_sdk::trace::Sampler,
    ids: RandomIdGenerator,
    scope: InstrumentationScope,
    counters: Arc<Counters>,
}

/// What the exporter has done so far.
#[derive(Debug, Default)]
struct Counters {
    exported: AtomicU64,
    failed: AtomicU64,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("sampler", &self.inner.sampler)
            .finish_non_exhaustive()
    }
}

impl Tracer {
    /// Builds the exporter and starts the processor's thread. Call it inside
    /// the Tokio runtime: the gRPC exporter's connection lives there.
    /// Fails when the exporter cannot be built from the configuration.
    pub fn start(config: TelemetryConfig) -> Result<Self, TelemetryError> {
        let built = match config.protocol {
            Protocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_protocol(opentelemetry_otlp::Protocol::Grpc)
                .with_endpoint(config.endpoint.clone())
                .build(),
            Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(config.endpoint.clone())
                .build(),
        };
        let exporter = built.map_err(|e| {
            TelemetryError::Invalid(format!(
                "cannot build the OTLP exporter for {}: {e}",
                config.endpoint
            ))
        })?;
        Ok(Self::with_exporter(exporter, &config))
    }

    fn with_exporter<E: SpanExporter + 'static>(exporter: E, config: &TelemetryConfig) -> Self {
        let counters = Arc::new(Counters::default());
        let counting = Counting {
            inner: exporter,
            counters: Arc::clone(&counters),
            warnings: Mutex::new(Warnings::default()),
        };
        // OTEL_BSP_* are read here, by the SDK.
        let mut processor = BatchSpanProcessor::builder(counting)
            .with_batch_config(BatchConfigBuilder::default().build())
            .build();
        processor.set_resource(&resource(config.service_name.as_deref()));
        debug!(endpoint = %config.endpoint, protocol = %config.protocol, "OTLP trace export on");
        Self {
            inner: Arc::new(Inner {
                processor,
                sampler: config.sampler.to_sdk(),
                ids: RandomIdGenerator::default(),
                scope: InstrumentationScope::builder("rdq")
                    .with_version(env!("CARGO_PKG_VERSION"))
                    .build(),
                counters,
            }),
        }
    }

    /// Whether a span of `trace_id` under `parent` (if any) is kept, as the
    /// configured sampler decides.
    pub(crate) fn sampled(&self, parent: Option<&SpanContext>, trace_id: TraceId) -> bool {
        use opentelemetry::trace::TraceContextExt as _;
        let parent =
            parent.map(|p| opentelemetry::Context::new().with_remote_span_context(p.clone()));
        let result = self.inner.sampler.should_sample(
            parent.as_ref(),
            trace_id,
            "",
            &opentelemetry::trace::SpanKind::Internal,
            &[],
            &[],
        );
        result.decision == SamplingDecision::RecordAndSample
    }

    pub(crate) fn random_trace_id(&self) -> TraceId {
        self.inner.ids.new_trace_id()
    }

    pub(crate) fn random_span_id(&self) -> SpanId {
        self.inner.ids.new_span_id()
    }

    pub(crate) fn scope(&self) -> InstrumentationScope {
        self.inner.scope.clone()
    }

    /// Hands a finished span to the processor without waiting; an unsampled
    /// span is ignored, and one that finds the queue full is dropped.
    pub fn record(&self, span: SpanData) {
        if span.span_context.is_sampled() {
            self.inner.processor.on_end(span);
        }
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
    /// be exported: called once at shutdown. The processor's flush blocks,
    /// so it runs on a blocking thread and the runtime (where the gRPC
    /// exporter's connection lives) keeps running.
    pub async fn flush(&self, within: Duration) {
        let inner = Arc::clone(&self.inner);
        let flushing = tokio::task::spawn_blocking(move || inner.processor.force_flush());
        match tokio::time::timeout(within, flushing).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => debug!(error = %e, "trace flush did not complete"),
            Ok(Err(e)) => debug!(error = %e, "trace flush did not complete"),
            Err(_) => debug!("trace flush timed out"),
        }
    }
}

/// The resource of every span: `service.name` (rdq's setting or
/// `OTEL_SERVICE_NAME`; else `service.name` in `OTEL_RESOURCE_ATTRIBUTES`;
/// else `rdq`), `OTEL_RESOURCE_ATTRIBUTES`, and the SDK's `telemetry.sdk.*`.
fn resource(service_name: Option<&str>) -> Resource {
    let from_env = EnvResourceDetector::new().detect();
    let name = match service_name {
        Some(name) => name.to_owned(),
        None => from_env
            .get(&opentelemetry::Key::from_static_str("service.name"))
            .map_or_else(|| "rdq".to_owned(), |v| v.to_string()),
    };
    Resource::builder_empty()
        .with_detectors(&[
            Box::new(EnvResourceDetector::new()),
            Box::new(TelemetryResourceDetector),
        ])
        .with_service_name(name)
        .build()
}

/// The OTLP exporter, counting what it sends and warning (rate-limited)
/// about what it loses.
#[derive(Debug)]
struct Counting<E> {
    inner: E,
    counters: Arc<Counters>,
    warnings: Mutex<Warnings>,
}

/// When the exporter last warned, and what was lost since.
#[derive(Debug, Default)]
struct Warnings {
    last: Option<Instant>,
    failed_batches: u64,
    failed_spans: u64,
}

impl<E: SpanExporter> SpanExporter for Counting<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let n = batch.len() as u64;
        let exporting = self.inner.export(batch);
        async move {
            let result = exporting.await;
            match &result {
                Ok(()) => {
                    self.counters.exported.fetch_add(n, Ordering::Relaxed);
                }
                Err(e) => {
                    self.counters.failed.fetch_add(n, Ordering::Relaxed);
                    let mut w = self.warnings.lock().unwrap_or_else(PoisonError::into_inner);
                    w.failed_batches += 1;
                    w.failed_spans += n;
                    if w.last.is_none_or(|t| t.elapsed() >= WARN_INTERVAL) {
                        warn!(
                            error = %e,
                            failed_batches = w.failed_batches,
                            failed_spans = w.failed_spans,
                            "OTLP trace export failed; the spans are dropped (this warning repeats at most once a minute)"
                        );
                        w.last = Some(Instant::now());
                        w.failed_batches = 0;
                        w.failed_spans = 0;
                    }
                }
            }
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
