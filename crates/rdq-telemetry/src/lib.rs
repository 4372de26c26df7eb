//! rdq's OpenTelemetry tracing (`docs/observability.md`): the spans of a
//! task after the messaging semantic conventions ([`messaging`]), W3C Trace
//! Context and the ids derived from a task ([`context`]), configured by
//! `--otlp-endpoint`, `[telemetry]` and the standard `OTEL_*` variables
//! ([`config`]), and exported by the OpenTelemetry SDK's batch processor
//! and OTLP exporter, over gRPC or HTTP ([`export`]).
//!
//! Tracing is off unless an endpoint is configured; off, nothing here is
//! built and the request path only tests an `Option`.

#![forbid(unsafe_code)]

pub mod config;
pub mod context;
pub mod export;
pub mod messaging;

pub use config::{Protocol, Sampler, TelemetryConfig, TelemetryError, TelemetrySettings};
pub use export::Tracer;
pub use messaging::{
    Attempt, CallProtocol, Dispatch, DispatchResult, SendOperation, SubmitOutcome,
};
pub use opentelemetry::trace::{SpanContext, SpanId, TraceId};
