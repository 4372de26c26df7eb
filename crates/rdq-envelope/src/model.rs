//! The v1 envelope: one task, its scheduling state and its full attempt history.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::id::TaskId;
use crate::time::Timestamp;
use crate::truncate::{truncate_message, truncate_stack};

/// The envelope version this engine reads and writes.
pub const ENVELOPE_VERSION: u32 = 1;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// Waiting to become due or to be claimed.
    Pending,
    /// Claimed by a worker under a lease.
    InFlight,
    /// Finished successfully (terminal).
    Succeeded,
    /// In the dead-letter queue (terminal until redriven).
    Dead,
}

impl Status {
    /// Every status, in lifecycle order.
    pub const ALL: [Status; 4] = [Self::Pending, Self::InFlight, Self::Succeeded, Self::Dead];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::InFlight => "IN_FLIGHT",
            Self::Succeeded => "SUCCEEDED",
            Self::Dead => "DEAD",
        }
    }

    /// The status with this wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// True for the statuses nothing but a redrive leaves.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Dead)
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The handler succeeded.
    Success,
    /// The handler failed transiently; retry with backoff.
    RetryableFailure,
    /// The handler failed for good; dead-letter now.
    PermanentFailure,
    /// The lease lapsed with no outcome reported (set by the engine only).
    LeaseExpired,
}

impl Outcome {
    /// Every outcome.
    pub const ALL: [Outcome; 4] = [
        Self::Success,
        Self::RetryableFailure,
        Self::PermanentFailure,
        Self::LeaseExpired,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "SUCCESS",
            Self::RetryableFailure => "RETRYABLE_FAILURE",
            Self::PermanentFailure => "PERMANENT_FAILURE",
            Self::LeaseExpired => "LEASE_EXPIRED",
        }
    }

    /// The outcome with this wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// Which optional fields a writer left out. A field left out and still at its
/// default stays left out on re-encoding, so foreign envelopes round-trip exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub(crate) struct Absent(pub(crate) u16);

impl Absent {
    pub(crate) fn has(self, bit: u16) -> bool {
        self.0 & bit != 0
    }
}

/// Bits of [`Absent`] for [`Envelope`] fields.
pub(crate) mod absent {
    pub const HANDLER_VERSION: u16 = 1 << 0;
    pub const PAYLOAD_REF: u16 = 1 << 1;
    pub const HEADERS: u16 = 1 << 2;
    pub const PRIORITY: u16 = 1 << 3;
    pub const DEFERRAL_COUNT: u16 = 1 << 4;
    pub const ATTEMPT_COUNT: u16 = 1 << 5;
    pub const REDRIVE_COUNT: u16 = 1 << 6;
    pub const NEXT_ATTEMPT_AT: u16 = 1 << 7;
    pub const LEASE_EXPIRES_AT: u16 = 1 << 8;
    pub const ATTEMPTS: u16 = 1 << 9;
    pub const CLAIM_COUNT: u16 = 1 << 10;
    /// Unlike the others, set when the member was written as `null`: an
    /// unset dead reason is left out unless a writer wrote it so.
    pub const DEAD_REASON_NULL: u16 = 1 << 11;
    /// Like [`DEAD_REASON_NULL`], for `cancel_requested`.
    pub const CANCEL_REQUESTED_NULL: u16 = 1 << 12;
    // Attempt records.
    pub const FINISHED_AT: u16 = 1 << 0;
    pub const OUTCOME: u16 = 1 << 1;
    pub const ERROR: u16 = 1 << 2;
    // Error objects.
    pub const DETAIL: u16 = 1 << 0;
    pub const STACK: u16 = 1 << 1;
    // Dead reasons.
    pub const MESSAGE: u16 = 1 << 0;
}

/// The error recorded with a failed attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorInfo {
    /// Language-native type name; classification globs match on it.
    pub error_type: String,
    /// What went wrong, at most 4 KiB when recorded by rdq.
    pub message: String,
    /// Optional structured JSON, e.g. from an `OutcomeMapper`.
    pub detail: Option<Value>,
    /// Optional stack or backtrace, at most 64 KiB when recorded by rdq.
    pub stack: Option<String>,
    /// Fields this version does not know, kept as written.
    pub extra: Map<String, Value>,
    pub(crate) absent: Absent,
}

impl ErrorInfo {
    /// The members this error's canonical encoding leaves out (absent when
    /// it was decoded and still unset), in `docs/envelope.md` order: what
    /// another mapping of the model (the gRPC messages) must leave out too.
    pub fn left_out(&self) -> Vec<&'static str> {
        let a = self.absent;
        let mut out = Vec::new();
        if a.has(absent::DETAIL) && self.detail.is_none() {
            out.push("detail");
        }
        if a.has(absent::STACK) && self.stack.is_none() {
            out.push("stack");
        }
        out
    }

    /// An error of `error_type` with `message` cut to 4 KiB.
    pub fn new(error_type: impl Into<String>, message: &str) -> Self {
        Self {
            error_type: error_type.into(),
            message: truncate_message(message),
            detail: None,
            stack: None,
            extra: Map::new(),
            absent: Absent::default(),
        }
    }

    /// Adds a stack, cut to 64 KiB.
    #[must_use]
    pub fn with_stack(mut self, stack: &str) -> Self {
        self.stack = Some(truncate_stack(stack));
        self
    }

    /// Adds structured detail.
    #[must_use]
    pub fn with_detail(mut self, detail: Value) -> Self {
        self.detail = Some(detail);
        self
    }
}

/// One execution of a task.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// 1-based number of this attempt within the task's whole history.
    pub attempt_no: u32,
    /// When the attempt was claimed.
    pub started_at: Timestamp,
    /// When it ended; `None` while in flight.
    pub finished_at: Option<Timestamp>,
    /// How it ended; `None` while in flight.
    pub outcome: Option<Outcome>,
    /// The failure, for failed attempts.
    pub error: Option<ErrorInfo>,
    /// Fields this version does not know, kept as written.
    pub extra: Map<String, Value>,
    pub(crate) absent: Absent,
}

impl AttemptRecord {
    /// The members this record's canonical encoding leaves out (see
    /// [`ErrorInfo::left_out`]).
    pub fn left_out(&self) -> Vec<&'static str> {
        let a = self.absent;
        let mut out = Vec::new();
        if a.has(absent::FINISHED_AT) && self.finished_at.is_none() {
            out.push("finished_at");
        }
        if a.has(absent::OUTCOME) && self.outcome.is_none() {
            out.push("outcome");
        }
        if a.has(absent::ERROR) && self.error.is_none() {
            out.push("error");
        }
        out
    }

    /// An open attempt, started at `started_at`.
    pub fn open(attempt_no: u32, started_at: Timestamp) -> Self {
        Self {
            attempt_no,
            started_at,
            finished_at: None,
            outcome: None,
            error: None,
            extra: Map::new(),
            absent: Absent::default(),
        }
    }

    /// True while the attempt has no outcome.
    pub fn is_open(&self) -> bool {
        self.outcome.is_none()
    }
}

/// Why a task is DEAD: what caused it, who, and when. Written by rdq on
/// every transition to DEAD and removed by a redrive; other writers'
/// codes are kept as written (readers meet causes newer than themselves).
#[derive(Debug, Clone, PartialEq)]
pub struct DeadReason {
    /// The cause, `[A-Z][A-Z0-9_]{0,63}`: one of [`dead_reasons`] or a
    /// newer one.
    pub code: String,
    /// When the task became DEAD.
    pub at: Timestamp,
    /// Who or what decided: `worker` (a settle), `reaper` (a lapsed
    /// lease), or the principal that cancelled it.
    pub by: String,
    /// Details for people, at most 4 KiB when recorded by rdq.
    pub message: Option<String>,
    /// Fields this version does not know, kept as written.
    pub extra: Map<String, Value>,
    pub(crate) absent: Absent,
}

impl DeadReason {
    /// A reason `code`, decided by `by` at `at`, with `message` cut to 4 KiB.
    pub fn new(code: &str, by: impl Into<String>, at: Timestamp, message: &str) -> Self {
        Self {
            code: code.to_owned(),
            at,
            by: by.into(),
            message: Some(truncate_message(message)),
            extra: Map::new(),
            absent: Absent::default(),
        }
    }

    /// The members this reason's canonical encoding leaves out (see
    /// [`ErrorInfo::left_out`]).
    pub fn left_out(&self) -> Vec<&'static str> {
        if self.absent.has(absent::MESSAGE) && self.message.is_none() {
            vec!["message"]
        } else {
            Vec::new()
        }
    }

    /// True when `code` is a well-formed reason code (known or not).
    pub fn is_valid_code(code: &str) -> bool {
        let bytes = code.as_bytes();
        !bytes.is_empty()
            && bytes.len() <= 64
            && bytes[0].is_ascii_uppercase()
            && bytes
                .iter()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
    }
}

/// A cancellation asked of a task while it ran: who asked, when, and why.
/// Set on an IN_FLIGHT task by a cancel; the worker holding the lease
/// learns of it, and an outcome other than success then ends the task DEAD
/// with reason `CANCELLED` instead of retrying it. Kept as history once the
/// task has finished; removed by a redrive.
#[derive(Debug, Clone, PartialEq)]
pub struct CancelRequest {
    /// When the cancel was asked.
    pub at: Timestamp,
    /// Who asked (a principal's name).
    pub by: String,
    /// Details for people, at most 4 KiB when recorded by rdq.
    pub message: Option<String>,
    /// Fields this version does not know, kept as written.
    pub extra: Map<String, Value>,
    pub(crate) absent: Absent,
}

impl CancelRequest {
    /// A request by `by` at `at`, with `message` cut to 4 KiB.
    pub fn new(by: impl Into<String>, at: Timestamp, message: &str) -> Self {
        Self {
            at,
            by: by.into(),
            message: Some(truncate_message(message)),
            extra: Map::new(),
            absent: Absent::default(),
        }
    }

    /// The members this request's canonical encoding leaves out (see
    /// [`ErrorInfo::left_out`]).
    pub fn left_out(&self) -> Vec<&'static str> {
        if self.absent.has(absent::MESSAGE) && self.message.is_none() {
            vec!["message"]
        } else {
            Vec::new()
        }
    }
}

/// The reason codes rdq itself writes (`docs/outcomes.md`).
pub mod dead_reasons {
    /// A failure spent the last of the queue's `max_attempts` (a lapsed
    /// lease counts as a failed attempt).
    pub const ATTEMPTS_EXHAUSTED: &str = "ATTEMPTS_EXHAUSTED";
    /// The handler's failure was permanent (a wrapper, a classifier or the
    /// queue's globs said so).
    pub const PERMANENT_FAILURE: &str = "PERMANENT_FAILURE";
    /// The lease lapsed `max_lease_expiries` times: a handler that keeps
    /// killing its worker.
    pub const LEASE_EXPIRIES_EXHAUSTED: &str = "LEASE_EXPIRIES_EXHAUSTED";
    /// Cancelled by an operator or a program.
    pub const CANCELLED: &str = "CANCELLED";
    /// The task's `handler_version` differs from the worker's and the queue
    /// says `handler_version_mismatch = "dead"`.
    pub const HANDLER_VERSION_MISMATCH: &str = "HANDLER_VERSION_MISMATCH";
    /// A counter reached its maximum, so the task could never run again.
    pub const COUNTERS_EXHAUSTED: &str = "COUNTERS_EXHAUSTED";
    /// A source's record could not become a task it may run (too large for
    /// the queue, a header the envelope refuses): kept with its raw bytes.
    pub const UNDECODABLE_SOURCE: &str = "UNDECODABLE_SOURCE";

    /// Every code rdq writes, for filters that refuse unknown ones.
    pub const ALL: [&str; 7] = [
        ATTEMPTS_EXHAUSTED,
        PERMANENT_FAILURE,
        LEASE_EXPIRIES_EXHAUSTED,
        CANCELLED,
        HANDLER_VERSION_MISMATCH,
        COUNTERS_EXHAUSTED,
        UNDECODABLE_SOURCE,
    ];
}

/// A task: the one language-neutral representation every component agrees on.
///
/// Fields mirror the wire format of `docs/envelope.md`. `extra` holds fields this
/// version does not know; they survive every decode and encode.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// Always [`ENVELOPE_VERSION`] once decoded.
    pub envelope_version: u32,
    /// Identity for the task's whole life.
    pub id: TaskId,
    /// Logical queue, `[a-z0-9._-]{1,240}`.
    pub queue: String,
    /// Stable handler name, `[a-z0-9._-]{1,240}`.
    pub handler_ref: String,
    /// Optional handler version; mismatch behaviour is queue policy.
    pub handler_version: Option<String>,
    /// The opaque payload, as canonical standard base64 (with padding).
    pub payload: String,
    /// MIME type of the payload.
    pub payload_content_type: String,
    /// Reserved for a claim-check pointer; rdq never populates it.
    pub payload_ref: Option<String>,
    /// Flat string headers; `rdq.`-prefixed keys are system metadata.
    pub headers: BTreeMap<String, String>,
    /// Lifecycle status.
    pub status: Status,
    /// Claim priority: higher first. Additive v1 field, default 0.
    pub priority: u8,
    /// How often the task was deferred. Additive v1 field, default 0.
    pub deferral_count: u32,
    /// Attempts consumed since submit or the last redrive.
    pub attempt_count: u32,
    /// How often the task was redriven from the DLQ.
    pub redrive_count: u32,
    /// Claims made so far, never decreasing; the current claim's fencing
    /// token. Additive v1 field, default 0.
    pub claim_count: u32,
    /// When the task becomes due; `None` once terminal.
    pub next_attempt_at: Option<Timestamp>,
    /// Lease deadline while in flight.
    pub lease_expires_at: Option<Timestamp>,
    /// Submit time.
    pub created_at: Timestamp,
    /// Full attempt history, oldest first; kept across redrives.
    pub attempts: Vec<AttemptRecord>,
    /// Why the task is DEAD. Additive v1 member, written only when set.
    pub dead_reason: Option<DeadReason>,
    /// A cancel asked while the task ran. Additive v1 member, written only
    /// when set.
    pub cancel_requested: Option<CancelRequest>,
    /// Fields this version does not know, kept as written.
    pub extra: Map<String, Value>,
    pub(crate) absent: Absent,
}

impl Envelope {
    /// The top-level members this envelope's canonical encoding leaves out
    /// (see [`ErrorInfo::left_out`]).
    pub fn left_out(&self) -> Vec<&'static str> {
        let a = self.absent;
        let mut out = Vec::new();
        for (bit, unset, name) in [
            (
                absent::HANDLER_VERSION,
                self.handler_version.is_none(),
                "handler_version",
            ),
            (
                absent::PAYLOAD_REF,
                self.payload_ref.is_none(),
                "payload_ref",
            ),
            (absent::HEADERS, self.headers.is_empty(), "headers"),
            (absent::PRIORITY, self.priority == 0, "priority"),
            (
                absent::DEFERRAL_COUNT,
                self.deferral_count == 0,
                "deferral_count",
            ),
            (
                absent::ATTEMPT_COUNT,
                self.attempt_count == 0,
                "attempt_count",
            ),
            (
                absent::REDRIVE_COUNT,
                self.redrive_count == 0,
                "redrive_count",
            ),
            (absent::CLAIM_COUNT, self.claim_count == 0, "claim_count"),
            (
                absent::NEXT_ATTEMPT_AT,
                self.next_attempt_at.is_none(),
                "next_attempt_at",
            ),
            (
                absent::LEASE_EXPIRES_AT,
                self.lease_expires_at.is_none(),
                "lease_expires_at",
            ),
            (absent::ATTEMPTS, self.attempts.is_empty(), "attempts"),
        ] {
            if unset && a.has(bit) {
                out.push(name);
            }
        }
        if self.dead_reason.is_none() && !a.has(absent::DEAD_REASON_NULL) {
            out.push("dead_reason");
        }
        if self.cancel_requested.is_none() && !a.has(absent::CANCEL_REQUESTED_NULL) {
            out.push("cancel_requested");
        }
        out
    }

    /// A fresh PENDING envelope with a new id, due at `now`.
    pub fn new(
        queue: impl Into<String>,
        handler_ref: impl Into<String>,
        payload: &[u8],
        payload_content_type: impl Into<String>,
        now: Timestamp,
    ) -> Self {
        Self {
            envelope_version: ENVELOPE_VERSION,
            id: TaskId::generate(),
            queue: queue.into(),
            handler_ref: handler_ref.into(),
            handler_version: None,
            payload: base64::engine::general_purpose::STANDARD.encode(payload),
            payload_content_type: payload_content_type.into(),
            payload_ref: None,
            headers: BTreeMap::new(),
            status: Status::Pending,
            priority: 0,
            deferral_count: 0,
            attempt_count: 0,
            redrive_count: 0,
            claim_count: 0,
            next_attempt_at: Some(now),
            lease_expires_at: None,
            created_at: now,
            attempts: Vec::new(),
            dead_reason: None,
            cancel_requested: None,
            extra: Map::new(),
            // payload_ref is reserved: a writer of v1 never emits it.
            absent: Absent(absent::PAYLOAD_REF),
        }
    }

    /// The payload bytes, decoded from base64.
    pub fn payload_bytes(&self) -> Vec<u8> {
        // `payload` is validated canonical base64 when decoded; a caller that
        // assigned garbage gets the bytes that decode, never a panic.
        base64::engine::general_purpose::STANDARD
            .decode(&self.payload)
            .unwrap_or_default()
    }

    /// Replaces the payload with `bytes`, base64-encoded.
    pub fn set_payload_bytes(&mut self, bytes: &[u8]) {
        self.payload = base64::engine::general_purpose::STANDARD.encode(bytes);
    }

    /// Marks every optional field as written, as rdq does for every envelope
    /// it changes: from then on each is encoded even at its default, so one
    /// state always has one encoding whatever its writer left out before.
    /// (`payload_ref` stays as it was: rdq never populates it; an unset
    /// `dead_reason` or `cancel_requested` is left out.)
    pub fn mark_written(&mut self) {
        self.absent = Absent(self.absent.0 & absent::PAYLOAD_REF);
    }

    /// The attempt currently open, if the task is in flight.
    pub fn open_attempt(&self) -> Option<&AttemptRecord> {
        self.attempts.last().filter(|a| a.is_open())
    }

    /// The error of the most recent closed attempt, if it failed.
    pub fn last_error(&self) -> Option<&ErrorInfo> {
        self.attempts.iter().rev().find_map(|a| a.error.as_ref())
    }
}
