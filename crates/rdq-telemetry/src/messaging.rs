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

use std::time::SystemTime;

use rdq_envelope::{Envelope, TaskId};

use crate::context::{Derived, SpanContext, SpanId, TraceId, derived_span, derived_trace};
use crate::export::Tracer;
use crate::span::{Attribute, Link, SpanData, SpanKind, Status, ms_to_nanos, unix_nanos};

/// `messaging.system`.
pub const MESSAGING_SYSTEM: &str = "rdq";

/// The envelope header carrying the submitter's W3C trace context.
pub const TRACEPARENT_HEADER: &str = "traceparent";

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
    traceparent.and_then(|tp| SpanContext::parse_traceparent(tp).ok())
}

fn common(queue: &str, operation: &'static str, op_type: &'static str) -> Vec<Attribute> {
    vec![
        ("messaging.system", MESSAGING_SYSTEM.into()),
        ("messaging.operation.type", op_type.into()),
        ("messaging.operation.name", operation.into()),
        ("messaging.destination.name", queue.into()),
    ]
}

fn link(context: SpanContext, kind: &'static str) -> Link {
    Link {
        context,
        attributes: vec![("rdq.link", kind.into())],
    }
}

impl Tracer {
    /// A fresh context in `parent`'s trace (or a new trace), sampled as the
    /// sampler says.
    fn fresh(&self, parent: Option<&SpanContext>) -> SpanContext {
        let trace_id = parent.map_or_else(TraceId::random, |p| p.trace_id);
        SpanContext {
            trace_id,
            span_id: SpanId::random(),
            flags: u8::from(self.sampler().sampled(parent, trace_id)),
        }
    }

    /// The creation context of task `id` submitted under `traceparent`:
    /// the context of its submit span, parent of every attempt.
    pub fn creation_context(&self, id: TaskId, traceparent: Option<&str>) -> SpanContext {
        let parent = parent_of(traceparent);
        let trace_id = parent.map_or_else(|| derived_trace(id), |p| p.trace_id);
        SpanContext {
            trace_id,
            span_id: derived_span(id, Derived::Create),
            flags: u8::from(self.sampler().sampled(parent.as_ref(), trace_id)),
        }
    }

    /// The context of attempt `attempt_no` of `envelope`'s task.
    pub fn attempt_context(&self, envelope: &Envelope, attempt_no: u32) -> SpanContext {
        let creation = self.creation_context(envelope.id, traceparent(envelope));
        SpanContext {
            span_id: derived_span(envelope.id, Derived::Attempt(attempt_no)),
            ..creation
        }
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
                attributes.push(("messaging.message.id", env.id.to_string().into()));
                attributes.push(("rdq.handler_ref", env.handler_ref.as_str().into()));
                self.creation_context(env.id, traceparent)
            }
            SubmitOutcome::Existing(env) => {
                attributes.push(("messaging.message.id", env.id.to_string().into()));
                attributes.push(("rdq.idempotent_replay", true.into()));
                links.push(link(
                    self.creation_context(env.id, self::traceparent(env)),
                    "creation",
                ));
                self.fresh(parent.as_ref())
            }
            SubmitOutcome::Refused(code) => {
                attributes.push(("error.type", code.into()));
                status = Status::Error(code.to_owned());
                self.fresh(parent.as_ref())
            }
        };
        self.record(SpanData {
            context,
            parent: parent.map(|p| p.span_id),
            name: format!("{op} {queue}"),
            kind: SpanKind::Producer,
            start_ns: unix_nanos(started),
            end_ns: unix_nanos(SystemTime::now()),
            attributes,
            links,
            status,
        });
    }

    /// Records an attempt's CONSUMER span, from its claim to now.
    pub fn record_attempt(&self, attempt: &Attempt<'_>) {
        let id = attempt.task;
        let creation = self.creation_context(id, attempt.traceparent);
        let context = SpanContext {
            span_id: derived_span(id, Derived::Attempt(attempt.attempt_no)),
            ..creation
        };
        let mut attributes = common(attempt.queue, "process", "process");
        attributes.push(("messaging.message.id", id.to_string().into()));
        attributes.push(("rdq.handler_ref", attempt.handler_ref.into()));
        attributes.push(("rdq.attempt", attempt.attempt_no.into()));
        attributes.push(("rdq.outcome", attempt.outcome.into()));
        let mut status = Status::Unset;
        if let Some(error_type) = attempt.error_type {
            attributes.push(("error.type", error_type.into()));
            status = Status::Error(format!("{}: {error_type}", attempt.outcome));
        }
        let mut links = vec![link(creation, "creation")];
        if attempt.attempt_no > 1 {
            attributes.push(("rdq.retry", true.into()));
            links.push(link(
                SpanContext {
                    span_id: derived_span(id, Derived::Attempt(1)),
                    ..creation
                },
                "first_attempt",
            ));
        }
        self.record(SpanData {
            context,
            parent: Some(creation.span_id),
            name: format!("process {}", attempt.queue),
            kind: SpanKind::Consumer,
            start_ns: ms_to_nanos(attempt.started_ms),
            end_ns: unix_nanos(SystemTime::now()),
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
            context: SpanContext {
                span_id: derived_span(envelope.id, Derived::Dispatch(attempt_no)),
                ..attempt
            },
            parent: attempt.span_id,
            started: SystemTime::now(),
        }
    }
}

/// A callback request in progress (see [`Tracer::start_dispatch`]).
#[derive(Debug, Clone, Copy)]
pub struct Dispatch {
    context: SpanContext,
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
        self.context.traceparent()
    }

    /// This request's context.
    pub fn context(&self) -> SpanContext {
        self.context
    }

    /// Records the CLIENT span, ending now.
    pub fn finish(self, tracer: &Tracer, envelope: &Envelope, result: &DispatchResult<'_>) {
        let (name, status_key, mut attributes): (&str, &str, Vec<Attribute>) = match result.protocol
        {
            CallProtocol::Http => (
                "POST",
                "http.response.status_code",
                vec![("http.request.method", "POST".into())],
            ),
            CallProtocol::Grpc => (
                "rdq.v1.Handler/Handle",
                "rpc.grpc.status_code",
                vec![
                    ("rpc.system", "grpc".into()),
                    ("rpc.service", "rdq.v1.Handler".into()),
                    ("rpc.method", "Handle".into()),
                ],
            ),
        };
        attributes.extend([
            ("server.address", result.host.into()),
            ("url.full", result.url.into()),
            ("messaging.system", MESSAGING_SYSTEM.into()),
            ("messaging.destination.name", envelope.queue.as_str().into()),
            ("messaging.message.id", envelope.id.to_string().into()),
        ]);
        if let Some(port) = result.port {
            attributes.push(("server.port", i64::from(port).into()));
        }
        if let Some(code) = result.status_code {
            attributes.push((status_key, i64::from(code).into()));
        }
        let mut status = Status::Unset;
        if let Some(error_type) = result.error_type {
            attributes.push(("error.type", error_type.into()));
            status = Status::Error(error_type.to_owned());
        }
        tracer.record(SpanData {
            context: self.context,
            parent: Some(self.parent),
            name: name.into(),
            kind: SpanKind::Client,
            start_ns: unix_nanos(self.started),
            end_ns: unix_nanos(SystemTime::now()),
            attributes,
            links: Vec::new(),
            status,
        });
    }
}

fn traceparent(envelope: &Envelope) -> Option<&str> {
    envelope.headers.get(TRACEPARENT_HEADER).map(String::as_str)
}
