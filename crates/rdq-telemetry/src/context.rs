//! W3C Trace Context as rdq uses it: the `traceparent` header read and
//! written by the SDK's `TraceContextPropagator`, and the ids rdq derives
//! from a task id so that every span of a task can be named without keeping
//! any state between submit, claim and settle (`docs/observability.md`).

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceId};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use rdq_envelope::TaskId;
use sha2::{Digest, Sha256};

/// The header (in an envelope, an HTTP request or gRPC metadata) carrying
/// the W3C trace context.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// The submitter's context in a `traceparent` value, if it is valid.
///
/// The fields must have their exact widths (2, 32, 16 and 2 hex digits), as
/// W3C Trace Context says; the propagator alone would also take shorter ones.
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let value = value.trim();
    let mut fields = value.split('-');
    let widths = [2, 32, 16, 2];
    if !widths
        .iter()
        .all(|w| fields.next().is_some_and(|f| f.len() == *w))
    {
        return None;
    }
    let cx = TraceContextPropagator::new().extract(&One(value));
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| sc.clone())
}

/// The `traceparent` value (version `00`) of `context`.
pub fn traceparent(context: &SpanContext) -> String {
    let mut slot = Slot(None);
    let cx = Context::new().with_remote_span_context(context.clone());
    TraceContextPropagator::new().inject_context(&cx, &mut slot);
    slot.0.unwrap_or_default()
}

/// One `traceparent` value, as the propagator reads headers.
struct One<'a>(&'a str);

impl Extractor for One<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == TRACEPARENT_HEADER).then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT_HEADER]
    }
}

/// Where the propagator writes `traceparent` (its empty `tracestate` is not kept).
struct Slot(Option<String>);

impl Injector for Slot {
    fn set(&mut self, key: &str, value: String) {
        if key == TRACEPARENT_HEADER {
            self.0 = Some(value);
        }
    }
}

/// What a derived id stands for; part of the hash input, so the ids of one
/// task never collide with each other.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Derived {
    /// The trace of a task submitted without a `traceparent`.
    Trace,
    /// The task's creation (submit) span.
    Create,
    /// Attempt `n`'s process span.
    Attempt(u32),
    /// Attempt `n`'s callback request span.
    Dispatch(u32),
}

/// 32 bytes derived from a task id and what the id is for (SHA-256).
fn derive(task: TaskId, what: Derived) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"rdq-telemetry/1\0");
    h.update(task.to_bytes());
    match what {
        Derived::Trace => h.update(b"trace"),
        Derived::Create => h.update(b"create"),
        Derived::Attempt(n) => {
            h.update(b"attempt");
            h.update(n.to_be_bytes());
        }
        Derived::Dispatch(n) => {
            h.update(b"dispatch");
            h.update(n.to_be_bytes());
        }
    }
    h.finalize().into()
}

/// The trace id of a task submitted without a trace context.
pub(crate) fn derived_trace(task: TaskId) -> TraceId {
    let d = derive(task, Derived::Trace);
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    if b == [0; 16] {
        b[15] = 1;
    }
    TraceId::from_bytes(b)
}

/// A span id derived from the task id.
pub(crate) fn derived_span(task: TaskId, what: Derived) -> SpanId {
    let d = derive(task, what);
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    if b == [0; 8] {
        b[7] = 1;
    }
    SpanId::from_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let ctx = parse_traceparent(tp).unwrap();
        assert!(ctx.is_sampled());
        assert_eq!(
            ctx.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(ctx.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(traceparent(&ctx), tp);
        let unsampled =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!unsampled.is_sampled());
        assert!(traceparent(&unsampled).ends_with("-00"));
    }

    #[test]
    fn a_later_version_is_read_by_its_first_fields() {
        let ctx =
            parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")
                .unwrap();
        assert_eq!(ctx.span_id().to_string(), "00f067aa0ba902b7");
    }

    #[test]
    fn broken_traceparents_are_refused() {
        for bad in [
            "",
            "00-abc-def-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn derived_ids_are_stable_per_task_and_distinct_per_purpose() {
        let a = TaskId::generate();
        let b = TaskId::generate();
        assert_eq!(derived_trace(a), derived_trace(a));
        assert_ne!(derived_trace(a), derived_trace(b));
        let ids = [
            derived_span(a, Derived::Create),
            derived_span(a, Derived::Attempt(1)),
            derived_span(a, Derived::Attempt(2)),
            derived_span(a, Derived::Dispatch(1)),
        ];
        for (i, x) in ids.iter().enumerate() {
            for y in &ids[i + 1..] {
                assert_ne!(x, y);
            }
        }
        assert_eq!(
            derived_span(a, Derived::Attempt(2)),
            derived_span(a, Derived::Attempt(2))
        );
    }
}
