//! rdq's OpenTelemetry tracing (`docs/observability.md`): W3C Trace Context
//! ([`context`]), the spans of a task after the messaging semantic
//! conventions ([`messaging`]), and a lean exporter of OTLP over HTTP with
//! JSON bodies ([`export`]) configured by `--otlp-endpoint`, `[telemetry]`
//! and the standard `OTEL_*` variables ([`config`]).
//!
//! Why an exporter of its own instead of the `opentelemetry` SDK crates:
//! rdq records finished spans only (it builds each span when its operation
//! is over, from the task's own timestamps), so it needs no context
//! propagation machinery, no span processors and no protobuf code; the
//! HTTP client (`reqwest`) and `serde_json` are already in the binary. The
//! exporter is one background task with a bounded queue: recording a span
//! is a `try_send` and never waits.

#![forbid(unsafe_code)]

pub mod config;
pub mod context;
pub mod export;
pub mod messaging;
pub mod span;

pub use config::{Sampler, TelemetryConfig, TelemetryError, TelemetrySettings};
pub use context::{SpanContext, SpanId, TraceId};
pub use export::Tracer;
pub use messaging::{
    Attempt, CallProtocol, Dispatch, DispatchResult, SendOperation, SubmitOutcome,
};
