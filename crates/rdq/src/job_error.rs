//! [`JobError`]: what a failed handler returns, and the per-call wrappers
//! [`permanent`], [`retryable`] and [`defer`] (rung 2 of the outcome ladder).
//!
//! `JobError` is rdq's equivalent of `anyhow::Error` for handlers: `?` turns
//! any error into one and captures the concrete type name *where it was
//! converted* (`std::any::type_name`), which becomes the attempt's
//! `error_type` unless a wrapper or classifier names it. It deliberately does
//! not implement `std::error::Error`, so that `?` can convert every error
//! into it. A handler may also return any other error type (`E: Into<JobError>`):
//! a concrete error, `Box<dyn Error + Send + Sync>`, `anyhow::Error`, `String`;
//! see `docs/sdk.md` for exactly what `error_type` each records.

use std::backtrace::{Backtrace, BacktraceStatus};
use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use serde_json::Value;

/// A decision a wrapper forces for one call, overriding classifiers and globs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forced {
    /// `rdq::permanent(e)`: dead-letter now.
    Permanent,
    /// `rdq::retryable(e)`: retry under the retry policy, whatever the globs say.
    Retryable,
    /// `rdq::defer(delay)`: not a failure; run again after exactly `delay`,
    /// ahead of the backlog, without spending an attempt.
    Defer(Duration),
    /// `rdq::throttle(delay)`: as `Defer`, and the task's flow key (the whole
    /// queue for a task without one) is throttled for every worker on the
    /// store until then (docs/flow-control.md, "Back-pressure").
    Throttle(Duration),
}

/// A failed job: the error, the type name captured where it was converted,
/// and what the handler decided about it, if anything.
pub struct JobError {
    error: Box<dyn StdError + Send + Sync + 'static>,
    type_name: &'static str,
    error_type: Option<Cow<'static, str>>,
    forced: Option<Forced>,
    detail: Option<Value>,
    stack: Option<String>,
}

impl<E> From<E> for JobError
where
    E: Into<Box<dyn StdError + Send + Sync + 'static>> + 'static,
{
    /// Captures `type_name::<E>()` and, when `RUST_BACKTRACE` or
    /// `RUST_LIB_BACKTRACE` enables it, a backtrace.
    fn from(error: E) -> Self {
        let backtrace = Backtrace::capture();
        Self {
            error: error.into(),
            type_name: std::any::type_name::<E>(),
            error_type: None,
            forced: None,
            detail: None,
            stack: (backtrace.status() == BacktraceStatus::Captured).then(|| backtrace.to_string()),
        }
    }
}

/// The message of an error built by [`JobError::new`] or [`defer`].
#[derive(Debug)]
struct Message(String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for Message {}

impl JobError {
    /// An error with an explicit `error_type` and message, for failures that
    /// are not Rust errors (a status code, a rejected response).
    pub fn new(error_type: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::from(Message(message.into())).with_type(error_type)
    }

    /// Records `error_type` instead of the captured type name.
    #[must_use]
    pub fn with_type(mut self, error_type: impl Into<Cow<'static, str>>) -> Self {
        self.error_type = Some(error_type.into());
        self
    }

    /// Attaches structured detail to the attempt record.
    #[must_use]
    pub fn with_detail(mut self, detail: Value) -> Self {
        self.detail = Some(detail);
        self
    }

    /// Attaches a stack (cut to 64 KiB when recorded).
    #[must_use]
    pub fn with_stack(mut self, stack: impl Into<String>) -> Self {
        self.stack = Some(stack.into());
        self
    }

    /// The `error_type` this error records: a supplied name, else the
    /// type name captured where it was converted.
    pub fn error_type(&self) -> &str {
        self.error_type.as_deref().unwrap_or(self.type_name)
    }

    /// The type name captured where the error was converted.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// True if a wrapper or [`JobError::with_type`] supplied the `error_type`.
    pub fn has_supplied_type(&self) -> bool {
        self.error_type.is_some()
    }

    /// What a wrapper decided, if one was used.
    pub fn forced(&self) -> Option<Forced> {
        self.forced
    }

    /// The detail attached, if any.
    pub fn detail(&self) -> Option<&Value> {
        self.detail.as_ref()
    }

    /// The stack captured or attached, if any.
    pub fn stack(&self) -> Option<&str> {
        self.stack.as_deref()
    }

    /// The underlying error.
    pub fn as_error(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.error
    }

    /// The error and its `source()` chain, outermost first.
    pub fn chain(&self) -> impl Iterator<Item = &(dyn StdError + 'static)> {
        let first: &(dyn StdError + 'static) = &*self.error;
        std::iter::successors(Some(first), |e: &&(dyn StdError + 'static)| (*e).source())
    }

    /// The first error of type `T` in the chain (Rust's `errors.As`).
    pub fn find<T: StdError + 'static>(&self) -> Option<&T> {
        self.chain().find_map(|e| e.downcast_ref::<T>())
    }

    /// The underlying error as a box.
    pub fn into_inner(self) -> Box<dyn StdError + Send + Sync + 'static> {
        self.error
    }

    pub(crate) fn with_forced(mut self, forced: Forced) -> Self {
        self.forced = Some(forced);
        self
    }

    pub(crate) fn take_detail(&self) -> (Option<Value>, Option<String>) {
        (self.detail.clone(), self.stack.clone())
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("error_type", &self.error_type())
            .field("forced", &self.forced)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

/// Forces a permanent failure for this call: straight to the DLQ, whatever
/// classifiers and globs say (only an `OutcomeMapper` ranks higher).
/// `error_type` stays what it would have been.
///
/// ```
/// # #[derive(Debug, thiserror::Error)] #[error("card declined")] struct CardDeclined;
/// fn charge() -> Result<(), rdq::JobError> {
///     Err(rdq::permanent(CardDeclined))
/// }
/// assert_eq!(charge().unwrap_err().forced(), Some(rdq::Forced::Permanent));
/// ```
pub fn permanent(error: impl Into<JobError>) -> JobError {
    error.into().with_forced(Forced::Permanent)
}

/// Forces a retryable failure for this call, even if a classifier or a
/// `non_retryable_errors` glob would make it permanent.
pub fn retryable(error: impl Into<JobError>) -> JobError {
    error.into().with_forced(Forced::Retryable)
}

/// Not a failure: run the job again after exactly `delay`, ahead of the
/// backlog (at the queue's `max_priority`), without spending an attempt; the
/// rate-limit answer to `429 Retry-After`. `ctx.deferrals` counts them.
pub fn defer(delay: Duration) -> JobError {
    JobError::from(Message(format!("deferred for {delay:?}")))
        .with_type(rdq_envelope::error_types::DEFERRED)
        .with_forced(Forced::Defer(delay))
}

/// The target said to slow down (`429` with `Retry-After`, a quota): run
/// this job again after exactly `delay`, without spending an attempt, and
/// hold back every task of its flow key (or of its queue, when it has no
/// flow key) on every worker of the store until then. On a store that
/// cannot throttle (`claim_flow`), only this job is deferred.
pub fn throttle(delay: Duration) -> JobError {
    JobError::from(Message(format!("throttled for {delay:?}")))
        .with_type(rdq_envelope::error_types::DEFERRED)
        .with_forced(Forced::Throttle(delay))
}
