//! The spans of a task, after OpenTelemetry's messaging semantic
//! conventions (`messaging.system` = `rdq`; `docs/observability.md` draws
//! the trace):
//!
//! - **submit**: a PRODUCER span, `send {queue}` (`create {queue}` for an
//!   item of a batch), a child of the submitter's `traceparent` (the
//!   envelope header, `docs/envelope.md`). Its context is the task's
//!   *creation context*.
//! - **attempt**: a CONSUMER span, `process {queue}`, from claim to settle,
//!   with the outcome (`rdq.outcome`) and the error type (`error.type`);
//!   status error on a failure. Its parent is the creation context (one
//!   attempt processes one task, so the task's whole life is one trace) and
//!   it also links to it; a retry links to the first attempt and is never
//!   its child.
//! - **callback**: a CLIENT span `POST`, a child of the attempt it carries
//!   out; its context is the `traceparent` request header the target gets.
//!
//! Nothing is kept between submit, claim and settle: the creation span's id
//! and each attempt's span id are derived from the task id (and attempt
//! number), and a task submitted without a trace context gets a trace id
//! derived from its task id, so any process can name them later. The
//! sampling decision is a function of the same inputs, hence the same for
//! every span of a task.
//!
//! Each span is built once its operation is over, from the task's own
//! timestamps, as the SDK's `SpanData`, and handed to the SDK's batch
//! processor: the ids must be the derived ones, which the SDK's span
//! builder does not take, and an attempt's span ends in a different request
//! (often a different process) from the one that claimed it.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;
use opentelemetry::trace::{
    Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use rdq_envelope::{Envelope, TaskId};

use crate::context::{Derived, derived_span, derived_trace, parse_traceparent};
use crate::export::Tracer;

pub use crate::context::TRACEPARENT_HEADER;

/// `messaging.system`.
pub const MESSAGING_SYSTEM: &str = "rdq";

/// Which producer operation a submit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOperation {
    /// One task submitted on its own (`send`).
    Send,
    /// One task of a batch submit (`create`).
    Create,
}

impl SendOperation {
    fn name(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Create => "create",
        }
    }
}

/// How a submit ended, for its span.
#[derive(Debug, Clone, Copy)]
pub enum SubmitOutcome<'a> {
    /// A new task was stored.
    Created(&'a Envelope),
    /// The idempotency key matched this earlier task; nothing was stored.
    Existing(&'a Envelope),
    /// Refused, with rdq's stable error code.
    Refused(&'a str),
}

/// One attempt from claim to settle, for its span.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// The task.
    pub task: TaskId,
    /// Its queue.
    pub queue: &'a str,
    /// Its handler.
    pub handler_ref: &'a str,
    /// Its `traceparent` header, as submitted.
    pub traceparent: Option<&'a str>,
    /// The attempt's number (`attempts[].attempt_no`).
    pub attempt_no: u32,
    /// When it was claimed (Unix ms, `attempts[].started_at`).
    pub started_ms: i64,
    /// The outcome: `SUCCESS`, `RETRYABLE_FAILURE`, `PERMANENT_FAILURE`,
    /// `DEFERRED`, `RELEASED`, or the error code of a refused settle.
    pub outcome: &'a str,
    /// The failure's type (the handler's `error.type`, or the refusal's code).
    pub error_type: Option<&'a str>,
}

/// The submitter's context in a `traceparent` value, if it is valid.
pub fn parent_of(traceparent: Option<&str>) -> Option<SpanContext> {
    traceparent.and_then(parse_traceparent)
}

fn common(queue: &str, operation: &'static str, op_type: &'static str) -> Vec<KeyValue> {
    vec![
        KeyValue::new("messaging.system", MESSAGING_SYSTEM),
        KeyValue::new("messaging.operation.type", op_type),
        KeyValue::new("messaging.operation.name", operation),
        KeyValue::new("messaging.destination.name", queue.to_owned()),
    ]
}

fn link(context: SpanContext, kind: &'static str) -> Link {
    Link::new(context, vec![KeyValue::new("rdq.link", kind)], 0)
}

fn context(trace_id: TraceId, span_id: SpanId, sampled: bool) -> SpanContext {
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    SpanContext::new(trace_id, span_id, flags, false, TraceState::default())
}

/// The time of a Unix-milliseconds timestamp (the epoch before it).
fn from_unix_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// What a finished span is made of, besides the tracer's scope.
struct Finished {
    context: SpanContext,
    /// The parent span, and whether it lives in another process.
    parent: Option<(SpanId, bool)>,
    name: Cow<'static, str>,
    kind: SpanKind,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    links: Vec<Link>,
    status: Status,
}

impl Tracer {
    /// Records `span`, ending now.
    fn finish(&self, span: Finished) {
        let end = SystemTime::now().max(span.start);
        let (parent_span_id, parent_span_is_remote) =
            span.parent.unwrap_or((SpanId::INVALID, false));
        let mut links = SpanLinks::default();
        links.links = span.links;
        self.record(SpanData {
            span_context: span.context,
            parent_span_id,
            parent_span_is_remote,
            span_kind: span.kind,
            name: span.name,
            start_time: span.start,
            end_time: end,
            attributes: span.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links,
            status: span.status,
            instrumentation_scope: self.scope(),
        });
    }

    /// A fresh context in `parent`'s trace (or a new trace), sampled as the
    /// sampler says.
    fn fresh(&self, parent: Option<&SpanContext>) -> SpanContext {
        let trace_id = parent.map_or_else(|| self.random_trace_id(), SpanContext::trace_id);
        context(
            trace_id,
            self.random_span_id(),
            self.sampled(parent, trace_id),
        )
    }

    /// The creation context of task `id` submitted under `traceparent`:
    /// the context of its submit span, parent of every attempt.
    pub fn creation_context(&self, id: TaskId, traceparent: Option<&str>) -> SpanContext {
        let parent = parent_of(traceparent);
        let trace_id = parent
            .as_ref()
            .map_or_else(|| derived_trace(id), SpanContext::trace_id);
        context(
            trace_id,
            derived_span(id, Derived::Create),
            self.sampled(parent.as_ref(), trace_id),
        )
    }

    /// The context of attempt `attempt_no` of `envelope`'s task.
    pub fn attempt_context(&self, envelope: &Envelope, attempt_no: u32) -> SpanContext {
        let creation = self.creation_context(envelope.id, traceparent(envelope));
        with_span(
            &creation,
            derived_span(envelope.id, Derived::Attempt(attempt_no)),
        )
    }

    /// Records a submit's PRODUCER span, started at `started` and ending now.
    /// `traceparent` is the request's (the header the envelope got).
    pub fn record_submit(
        &self,
        queue: &str,
        operation: SendOperation,
        started: SystemTime,
        traceparent: Option<&str>,
        outcome: SubmitOutcome<'_>,
    ) {
        let parent = parent_of(traceparent);
        let op = operation.name();
        let mut attributes = common(queue, op, op);
        let mut links = Vec::new();
        let mut status = Status::Unset;
        let context = match outcome {
            SubmitOutcome::Created(env) => {
                attributes.push(KeyValue::new("messaging.message.id", env.id.to_string()));
                attributes.push(KeyValue::new("rdq.handler_ref", env.handler_ref.clone()));
                self.creation_context(env.id, traceparent)
            }
            SubmitOutcome::Existing(env) => {
                attributes.push(KeyValue::new("messaging.message.id", env.id.to_string()));
                attributes.push(KeyValue::new("rdq.idempotent_replay", true));
                links.push(link(
                    self.creation_context(env.id, self::traceparent(env)),
                    "creation",
                ));
                self.fresh(parent.as_ref())
            }
            SubmitOutcome::Refused(code) => {
                attributes.push(KeyValue::new("error.type", code.to_owned()));
                status = Status::error(code.to_owned());
                self.fresh(parent.as_ref())
            }
        };
        self.finish(Finished {
            context,
            parent: parent.map(|p| (p.span_id(), true)),
            name: format!("{op} {queue}").into(),
            kind: SpanKind::Producer,
            start: started,
            attributes,
            links,
            status,
        });
    }

    /// Records an attempt's CONSUMER span, from its claim to now.
    pub fn record_attempt(&self, attempt: &Attempt<'_>) {
        let id = attempt.task;
        let creation = self.creation_context(id, attempt.traceparent);
        let context = with_span(
            &creation,
            derived_span(id, Derived::Attempt(attempt.attempt_no)),
        );
        let mut attributes = common(attempt.queue, "process", "process");
        attributes.push(KeyValue::new("messaging.message.id", id.to_string()));
        attributes.push(KeyValue::new(
            "rdq.handler_ref",
            attempt.handler_ref.to_owned(),
        ));
        attributes.push(KeyValue::new("rdq.attempt", i64::from(attempt.attempt_no)));
        attributes.push(KeyValue::new("rdq.outcome", attempt.outcome.to_owned()));
        let mut status = Status::Unset;
        if let Some(error_type) = attempt.error_type {
            attributes.push(KeyValue::new("error.type", error_type.to_owned()));
            status = Status::error(format!("{}: {error_type}", attempt.outcome));
        }
        let mut links = vec![link(creation.clone(), "creation")];
        if attempt.attempt_no > 1 {
            attributes.push(KeyValue::new("rdq.retry", true));
            links.push(link(
                with_span(&creation, derived_span(id, Derived::Attempt(1))),
                "first_attempt",
            ));
        }
        self.finish(Finished {
            context,
            parent: Some((creation.span_id(), false)),
            name: format!("process {}", attempt.queue).into(),
            kind: SpanKind::Consumer,
            start: from_unix_ms(attempt.started_ms),
            attributes,
            links,
            status,
        });
    }

    /// Starts a callback request of attempt `attempt_no`: its context goes
    /// out as the `traceparent` header; [`Dispatch::finish`] records it.
    pub fn start_dispatch(&self, envelope: &Envelope, attempt_no: u32) -> Dispatch {
        let attempt = self.attempt_context(envelope, attempt_no);
        Dispatch {
            trace_id: attempt.trace_id(),
            span_id: derived_span(envelope.id, Derived::Dispatch(attempt_no)),
            flags: attempt.trace_flags(),
            parent: attempt.span_id(),
            started: SystemTime::now(),
        }
    }
}

/// `context` with another span id (same trace, same flags).
fn with_span(context: &SpanContext, span_id: SpanId) -> SpanContext {
    SpanContext::new(
        context.trace_id(),
        span_id,
        context.trace_flags(),
        false,
        TraceState::default(),
    )
}

/// A callback request in progress (see [`Tracer::start_dispatch`]).
#[derive(Debug, Clone, Copy)]
pub struct Dispatch {
    trace_id: TraceId,
    span_id: SpanId,
    flags: TraceFlags,
    parent: SpanId,
    started: SystemTime,
}

/// How a callback reached its target: the span follows OpenTelemetry's
/// HTTP or RPC client conventions accordingly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallProtocol {
    /// An HTTP `POST` of the envelope.
    Http,
    /// A call of `rdq.v1.Handler/Handle`.
    Grpc,
}

/// How a callback request ended, for its span.
#[derive(Debug, Clone)]
pub struct DispatchResult<'a> {
    /// HTTP or gRPC.
    pub protocol: CallProtocol,
    /// `server.address`.
    pub host: &'a str,
    /// `server.port`.
    pub port: Option<u16>,
    /// `url.full`, without query or fragment (they may hold secrets).
    pub url: &'a str,
    /// `http.response.status_code` when an HTTP target answered;
    /// `rpc.grpc.status_code` of a gRPC call (always known: a call that
    /// could not be made is `UNAVAILABLE`).
    pub status_code: Option<u16>,
    /// `error.type`: the status of an error answer (`503`, `UNAVAILABLE`),
    /// or `timeout`, `connect`, `transport` (rdq's names for an HTTP
    /// transport failure).
    pub error_type: Option<&'a str>,
}

impl Dispatch {
    /// The `traceparent` value the target receives.
    pub fn traceparent(&self) -> String {
        crate::context::traceparent(&self.context())
    }

    /// This request's context.
    pub fn context(&self) -> SpanContext {
        SpanContext::new(
            self.trace_id,
            self.span_id,
            self.flags,
            false,
            TraceState::default(),
        )
    }

    /// Records the CLIENT span, ending now.
    pub fn finish(self, tracer: &Tracer, envelope: &Envelope, result: &DispatchResult<'_>) {
        let (name, status_key, mut attributes): (&'static str, &'static str, Vec<KeyValue>) =
            match result.protocol {
                CallProtocol::Http => (
                    "POST",
                    "http.response.status_code",
                    vec![KeyValue::new("http.request.method", "POST")],
                ),
                CallProtocol::Grpc => (
                    "rdq.v1.Handler/Handle",
                    "rpc.grpc.status_code",
                    vec![
                        KeyValue::new("rpc.system", "grpc"),
                        KeyValue::new("rpc.service", "rdq.v1.Handler"),
                        KeyValue::new("rpc.method", "Handle"),
                    ],
                ),
            };
        attributes.extend([
            KeyValue::new("server.address", result.host.to_owned()),
            KeyValue::new("url.full", result.url.to_owned()),
            KeyValue::new("messaging.system", MESSAGING_SYSTEM),
            KeyValue::new("messaging.destination.name", envelope.queue.clone()),
            KeyValue::new("messaging.message.id", envelope.id.to_string()),
        ]);
        if let Some(port) = result.port {
            attributes.push(KeyValue::new("server.port", i64::from(port)));
        }
        if let Some(code) = result.status_code {
            attributes.push(KeyValue::new(status_key, i64::from(code)));
        }
        let mut status = Status::Unset;
        if let Some(error_type) = result.error_type {
            attributes.push(KeyValue::new("error.type", error_type.to_owned()));
            status = Status::error(error_type.to_owned());
        }
        tracer.finish(Finished {
            context: self.context(),
            parent: Some((self.parent, false)),
            name: Cow::Borrowed(name),
            kind: SpanKind::Client,
            start: self.started,
            attributes,
            links: Vec::new(),
            status,
        });
    }
}

fn traceparent(envelope: &Envelope) -> Option<&str> {
    envelope.headers.get(TRACEPARENT_HEADER).map(String::as_str)
}
