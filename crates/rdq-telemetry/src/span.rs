//! The span model rdq records (finished spans only: a span is built once its
//! operation is over) and its OTLP JSON encoding: the protobuf JSON mapping
//! of `ExportTraceServiceRequest` as OTLP/HTTP specifies it (hex trace and
//! span ids, 64-bit integers as decimal strings, enums as numbers,
//! lowerCamelCase field names).

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::context::{SpanContext, SpanId};

/// What role a span plays (OTLP `SpanKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// In-process work.
    Internal,
    /// Serving a request.
    Server,
    /// Making a request (a callback POST).
    Client,
    /// Creating or sending a message (a submit).
    Producer,
    /// Processing a message (an attempt).
    Consumer,
}

impl SpanKind {
    fn otlp(self) -> u8 {
        match self {
            Self::Internal => 1,
            Self::Server => 2,
            Self::Client => 3,
            Self::Producer => 4,
            Self::Consumer => 5,
        }
    }
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// A string.
    Str(String),
    /// A signed integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
}

impl AttrValue {
    fn otlp(&self) -> Value {
        match self {
            Self::Str(s) => json!({ "stringValue": s }),
            Self::Int(i) => json!({ "intValue": i.to_string() }),
            Self::Bool(b) => json!({ "boolValue": b }),
        }
    }
}

impl From<&str> for AttrValue {
    fn from(s: &str) -> Self {
        Self::Str(s.to_owned())
    }
}

impl From<String> for AttrValue {
    fn from(s: String) -> Self {
        Self::Str(s)
    }
}

impl From<i64> for AttrValue {
    fn from(i: i64) -> Self {
        Self::Int(i)
    }
}

impl From<u32> for AttrValue {
    fn from(i: u32) -> Self {
        Self::Int(i64::from(i))
    }
}

impl From<bool> for AttrValue {
    fn from(b: bool) -> Self {
        Self::Bool(b)
    }
}

/// A key and its value.
pub type Attribute = (&'static str, AttrValue);

/// A link to another span (a retry to the first attempt, a repeated submit
/// to the task's creation).
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// The linked span.
    pub context: SpanContext,
    /// What the link means.
    pub attributes: Vec<Attribute>,
}

/// How a span ended (OTLP `Status`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Status {
    /// Not set: the default for success.
    #[default]
    Unset,
    /// Failed, with a short description (never a payload or a token).
    Error(String),
}

/// A finished span.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanData {
    /// Its trace id, span id and flags.
    pub context: SpanContext,
    /// The parent span in the same trace, if any.
    pub parent: Option<SpanId>,
    /// Low-cardinality name, e.g. `process payments`.
    pub name: String,
    /// Its role.
    pub kind: SpanKind,
    /// Start, nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// End, nanoseconds since the Unix epoch.
    pub end_ns: u64,
    /// Attributes.
    pub attributes: Vec<Attribute>,
    /// Links to other spans.
    pub links: Vec<Link>,
    /// How it ended.
    pub status: Status,
}

/// Nanoseconds since the Unix epoch of `t` (0 before the epoch).
pub fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Nanoseconds of a Unix-milliseconds timestamp (0 before the epoch).
pub fn ms_to_nanos(ms: i64) -> u64 {
    u64::try_from(ms).map_or(0, |ms| ms.saturating_mul(1_000_000))
}

fn attributes<'a>(attrs: impl IntoIterator<Item = (&'a str, &'a AttrValue)>) -> Value {
    Value::Array(
        attrs
            .into_iter()
            .map(|(k, v)| json!({ "key": k, "value": v.otlp() }))
            .collect(),
    )
}

fn static_attributes(attrs: &[Attribute]) -> Value {
    attributes(attrs.iter().map(|(k, v)| (*k, v)))
}

impl SpanData {
    /// This span as an OTLP JSON `Span`.
    pub fn to_otlp(&self) -> Value {
        let mut span = json!({
            "traceId": self.context.trace_id.to_string(),
            "spanId": self.context.span_id.to_string(),
            "flags": u32::from(self.context.flags & crate::context::FLAG_SAMPLED) | 0x100,
            "name": self.name,
            "kind": self.kind.otlp(),
            "startTimeUnixNano": self.start_ns.to_string(),
            "endTimeUnixNano": self.end_ns.max(self.start_ns).to_string(),
            "attributes": static_attributes(&self.attributes),
        });
        if let Some(parent) = self.parent {
            span["parentSpanId"] = json!(parent.to_string());
        }
        if !self.links.is_empty() {
            span["links"] = Value::Array(
                self.links
                    .iter()
                    .map(|l| {
                        json!({
                            "traceId": l.context.trace_id.to_string(),
                            "spanId": l.context.span_id.to_string(),
                            "attributes": static_attributes(&l.attributes),
                        })
                    })
                    .collect(),
            );
        }
        span["status"] = match &self.status {
            Status::Unset => json!({ "code": 0 }),
            Status::Error(message) => json!({ "code": 2, "message": message }),
        };
        span
    }
}

/// An `ExportTraceServiceRequest` for `spans` from one resource.
pub fn export_request(resource: &[(String, AttrValue)], spans: &[SpanData]) -> Value {
    json!({
        "resourceSpans": [{
            "resource": { "attributes": attributes(resource.iter().map(|(k, v)| (k.as_str(), v))) },
            "scopeSpans": [{
                "scope": { "name": "rdq", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans.iter().map(SpanData::to_otlp).collect::<Vec<_>>(),
            }],
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{SpanContext, TraceId};

    #[test]
    fn the_otlp_json_mapping_is_followed() {
        let ctx = SpanContext {
            trace_id: TraceId([0xab; 16]),
            span_id: SpanId([0x01; 8]),
            flags: 1,
        };
        let span = SpanData {
            context: ctx,
            parent: Some(SpanId([0x02; 8])),
            name: "process q".into(),
            kind: SpanKind::Consumer,
            start_ns: 1_700_000_000_000_000_000,
            end_ns: 1_700_000_000_500_000_000,
            attributes: vec![("rdq.attempt", 2u32.into()), ("ok", true.into())],
            links: vec![Link {
                context: ctx,
                attributes: vec![("rdq.link", "first_attempt".into())],
            }],
            status: Status::Error("E".into()),
        };
        let v = export_request(&[("service.name".to_owned(), "rdq".into())], &[span]);
        let s = &v["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(s["traceId"], "abababababababababababababababab");
        assert_eq!(s["spanId"], "0101010101010101");
        assert_eq!(s["parentSpanId"], "0202020202020202");
        assert_eq!(s["kind"], 5);
        assert_eq!(s["startTimeUnixNano"], "1700000000000000000");
        assert_eq!(s["endTimeUnixNano"], "1700000000500000000");
        assert_eq!(s["attributes"][0]["value"]["intValue"], "2");
        assert_eq!(s["attributes"][1]["value"]["boolValue"], true);
        assert_eq!(s["links"][0]["spanId"], "0101010101010101");
        assert_eq!(s["status"]["code"], 2);
        assert_eq!(
            v["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"],
            "rdq"
        );
    }
}
