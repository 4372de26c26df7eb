//! W3C Trace Context: trace and span ids, the `traceparent` header
//! (`00-{trace-id}-{span-id}-{flags}`, lower-case hex), and the ids rdq
//! derives from a task id so that every span of a task can be named without
//! keeping any state between submit, claim and settle (`docs/observability.md`).

use std::fmt;

use rdq_envelope::TaskId;
use sha2::{Digest, Sha256};

/// A 16-byte trace id; never all zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId(pub [u8; 16]);

/// An 8-byte span id; never all zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(pub [u8; 8]);

impl TraceId {
    /// A random trace id.
    pub fn random() -> Self {
        let mut b = [0u8; 16];
        fill_random(&mut b);
        Self(b)
    }
}

impl SpanId {
    /// A random span id.
    pub fn random() -> Self {
        let mut b = [0u8; 8];
        fill_random(&mut b);
        Self(b)
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

/// The `sampled` bit of the trace flags.
pub const FLAG_SAMPLED: u8 = 0x01;

/// A span's identity as it crosses a process boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanContext {
    /// The trace.
    pub trace_id: TraceId,
    /// The span.
    pub span_id: SpanId,
    /// Trace flags (bit 0: sampled).
    pub flags: u8,
}

/// Why a `traceparent` value was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TraceparentError {
    /// Not `version-traceid-spanid-flags` with the right lengths.
    #[error("traceparent is not version-traceid-spanid-flags")]
    Shape,
    /// A field is not lower-case hex.
    #[error("traceparent has a field that is not lower-case hex")]
    Hex,
    /// Version `ff`, or version `00` with trailing data.
    #[error("traceparent has an invalid version")]
    Version,
    /// An all-zero trace id or span id.
    #[error("traceparent has an all-zero trace id or span id")]
    Zero,
}

impl SpanContext {
    /// True when the sampled flag is set.
    pub fn is_sampled(&self) -> bool {
        self.flags & FLAG_SAMPLED != 0
    }

    /// Parses a W3C `traceparent` value. Versions above `00` are read by
    /// their first four fields, as the recommendation asks of a parser.
    pub fn parse_traceparent(value: &str) -> Result<Self, TraceparentError> {
        let value = value.trim();
        let mut parts = value.split('-');
        let (Some(version), Some(trace), Some(span), Some(flags)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TraceparentError::Shape);
        };
        if version.len() != 2 || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
            return Err(TraceparentError::Shape);
        }
        let version = unhex::<1>(version)?[0];
        if version == 0xff || (version == 0 && parts.next().is_some()) {
            return Err(TraceparentError::Version);
        }
        let trace_id = unhex::<16>(trace)?;
        let span_id = unhex::<8>(span)?;
        let flags = unhex::<1>(flags)?[0];
        if trace_id == [0; 16] || span_id == [0; 8] {
            return Err(TraceparentError::Zero);
        }
        Ok(Self {
            trace_id: TraceId(trace_id),
            span_id: SpanId(span_id),
            flags,
        })
    }

    /// The `traceparent` value (version `00`).
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            self.trace_id,
            self.span_id,
            self.flags & FLAG_SAMPLED
        )
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
    TraceId(b)
}

/// A span id derived from the task id.
pub(crate) fn derived_span(task: TaskId, what: Derived) -> SpanId {
    let d = derive(task, what);
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    if b == [0; 8] {
        b[7] = 1;
    }
    SpanId(b)
}

fn fill_random(buf: &mut [u8]) {
    if getrandom::fill(buf).is_err() || buf.iter().all(|b| *b == 0) {
        // No OS randomness (should not happen): fall back to a fresh task
        // id's bits, which are unique within the process.
        let bits = TaskId::generate().to_bytes();
        for (i, b) in buf.iter_mut().enumerate() {
            *b = bits[i % bits.len()] ^ (i as u8).wrapping_mul(31);
        }
        if buf.iter().all(|b| *b == 0)
            && let Some(last) = buf.last_mut()
        {
            *last = 1;
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

fn unhex<const N: usize>(text: &str) -> Result<[u8; N], TraceparentError> {
    let bytes = text.as_bytes();
    if bytes.len() != N * 2 {
        return Err(TraceparentError::Shape);
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err(TraceparentError::Hex),
    };
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = (digit(bytes[2 * i])? << 4) | digit(bytes[2 * i + 1])?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let ctx = SpanContext::parse_traceparent(tp).unwrap();
        assert!(ctx.is_sampled());
        assert_eq!(ctx.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(ctx.span_id.to_string(), "00f067aa0ba902b7");
        assert_eq!(ctx.traceparent(), tp);
        let unsampled = SpanContext::parse_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
        )
        .unwrap();
        assert!(!unsampled.is_sampled());
    }

    #[test]
    fn a_later_version_is_read_by_its_first_fields() {
        let ctx = SpanContext::parse_traceparent(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        )
        .unwrap();
        assert_eq!(ctx.span_id.to_string(), "00f067aa0ba902b7");
    }

    #[test]
    fn broken_traceparents_are_refused() {
        for (bad, why) in [
            ("", TraceparentError::Shape),
            ("00-abc-def-01", TraceparentError::Shape),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                TraceparentError::Hex,
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                TraceparentError::Zero,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                TraceparentError::Zero,
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                TraceparentError::Version,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
                TraceparentError::Version,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
                TraceparentError::Hex,
            ),
        ] {
            assert_eq!(SpanContext::parse_traceparent(bad), Err(why), "{bad:?}");
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
        assert_ne!(SpanId::random(), SpanId::random());
    }
}
