//! The outcome ladder of `docs/outcomes.md`, in Rust idiom: how what a handler
//! returned becomes SUCCESS, a retryable or a permanent failure, or a
//! deferral. Highest rung first:
//!
//! 1. an [`OutcomeMapper`] registered for the queue is authoritative: it sees
//!    the `Ok` value and the error, and supplies the recorded error;
//! 2. per-call wrappers: [`crate::permanent`], [`crate::retryable`], [`crate::defer`];
//! 3. code [`Classifier`]s registered on the worker, matched by downcasting
//!    through the error's `source()` chain;
//! 4. the queue's `retryable_errors` / `non_retryable_errors` globs on
//!    `error_type` (the engine applies them; a non-retryable match wins);
//! 5. default: retryable.
//!
//! Rungs 1–3 run here, in the worker; rung 4 and 5 in the engine, which is
//! why an undecided failure is sent as [`FailureKind::Unclassified`].

use std::any::Any;
use std::borrow::Cow;
use std::error::Error as StdError;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use rdq_engine::FailureKind;
use rdq_engine::policy::Classification;
use rdq_envelope::{ErrorInfo, error_types};
use serde_json::Value;

use crate::context::JobContext;
use crate::job_error::{Forced, JobError};

/// The canonical outcome an [`OutcomeMapper`] decides.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// The call succeeded.
    Success,
    /// A transient failure: retried with backoff until attempts run out.
    RetryableFailure(ErrorInfo),
    /// An unrecoverable failure: dead-lettered now.
    PermanentFailure(ErrorInfo),
    /// Not a failure: run again after exactly this long, ahead of the
    /// backlog, without spending an attempt.
    Defer(Duration),
    /// Not the mapper's call: the lower rungs decide on what the handler returned.
    Unmapped,
}

impl Outcome {
    /// A retryable failure with this `error_type` and message.
    pub fn retryable(error_type: &str, message: &str) -> Self {
        Self::RetryableFailure(ErrorInfo::new(error_type, message))
    }

    /// A permanent failure with this `error_type` and message.
    pub fn permanent(error_type: &str, message: &str) -> Self {
        Self::PermanentFailure(ErrorInfo::new(error_type, message))
    }

    /// A retryable failure recording `error` as the handler would have.
    pub fn retryable_error(error: &JobError) -> Self {
        Self::RetryableFailure(error_info(error, None))
    }

    /// A permanent failure recording `error` as the handler would have.
    pub fn permanent_error(error: &JobError) -> Self {
        Self::PermanentFailure(error_info(error, None))
    }

    /// Attaches structured detail to a failure (other outcomes are unchanged).
    #[must_use]
    pub fn with_detail(self, detail: Value) -> Self {
        match self {
            Self::RetryableFailure(e) => Self::RetryableFailure(e.with_detail(detail)),
            Self::PermanentFailure(e) => Self::PermanentFailure(e.with_detail(detail)),
            other => other,
        }
    }
}

/// What a handler returned, as an [`OutcomeMapper`] sees it.
#[derive(Clone, Copy)]
pub enum Returned<'a> {
    /// The `Ok` value; downcast it with [`Returned::value`].
    Value(&'a (dyn Any + Send)),
    /// The error.
    Error(&'a JobError),
}

impl<'a> Returned<'a> {
    /// The `Ok` value if the handler returned one of type `T`.
    pub fn value<T: Any>(&self) -> Option<&'a T> {
        match *self {
            Self::Value(v) => v.downcast_ref::<T>(),
            Self::Error(_) => None,
        }
    }

    /// The error, if the handler returned one.
    pub fn error(&self) -> Option<&'a JobError> {
        match *self {
            Self::Value(_) => None,
            Self::Error(e) => Some(e),
        }
    }
}

/// Maps what a handler returned onto the canonical outcome, for every job of
/// one queue. Implemented for `Fn(Returned<'_>, &JobContext) -> Outcome`.
///
/// ```
/// use rdq::{Outcome, Returned, JobContext};
///
/// #[derive(Debug, PartialEq)]
/// enum Status { Ok, Throttled, Rejected(String) }
///
/// let mapper = |returned: Returned<'_>, _ctx: &JobContext| match returned.value::<Status>() {
///     Some(Status::Ok) => Outcome::Success,
///     Some(Status::Throttled) => Outcome::retryable("api.Throttled", "downstream throttled"),
///     Some(Status::Rejected(why)) => Outcome::permanent("api.Rejected", why),
///     None => Outcome::Unmapped, // an error, or another job's value: the rest of the ladder decides
/// };
/// # let _: &dyn rdq::OutcomeMapper = &mapper;
/// ```
pub trait OutcomeMapper: Send + Sync + 'static {
    /// The outcome of one run.
    fn map(&self, returned: Returned<'_>, ctx: &JobContext) -> Outcome;
}

impl<F> OutcomeMapper for F
where
    F: Fn(Returned<'_>, &JobContext) -> Outcome + Send + Sync + 'static,
{
    fn map(&self, returned: Returned<'_>, ctx: &JobContext) -> Outcome {
        self(returned, ctx)
    }
}

type Matcher = Box<dyn Fn(&(dyn StdError + 'static)) -> bool + Send + Sync>;

/// A code classifier: errors of type `E` anywhere in the `source()` chain
/// (optionally only those a predicate accepts) are retryable or permanent,
/// optionally recorded under a name of their own. Registered on the worker
/// with [`crate::WorkerBuilder::classifier`]; the first match wins.
///
/// ```
/// use rdq::Classifier;
///
/// let classifiers = [
///     Classifier::permanent::<serde_json::Error>().named("json.Invalid"),
///     Classifier::retryable_if::<std::io::Error>(|e| e.kind() == std::io::ErrorKind::TimedOut),
/// ];
/// # let _ = classifiers;
/// ```
pub struct Classifier {
    matches: Matcher,
    class: Classification,
    error_type: Option<Cow<'static, str>>,
    target: &'static str,
}

impl std::fmt::Debug for Classifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Classifier")
            .field("target", &self.target)
            .field("class", &self.class)
            .field("error_type", &self.error_type)
            .finish_non_exhaustive()
    }
}

impl Classifier {
    fn of<E: StdError + 'static>(
        class: Classification,
        accept: impl Fn(&E) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self {
            matches: Box::new(move |e| e.downcast_ref::<E>().is_some_and(&accept)),
            class,
            error_type: None,
            target: std::any::type_name::<E>(),
        }
    }

    /// Any `E` in the chain is a permanent failure.
    pub fn permanent<E: StdError + 'static>() -> Self {
        Self::of::<E>(Classification::Permanent, |_| true)
    }

    /// Any `E` in the chain is a retryable failure.
    pub fn retryable<E: StdError + 'static>() -> Self {
        Self::of::<E>(Classification::Retryable, |_| true)
    }

    /// An `E` in the chain that `accept` approves is a permanent failure.
    pub fn permanent_if<E: StdError + 'static>(
        accept: impl Fn(&E) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self::of::<E>(Classification::Permanent, accept)
    }

    /// An `E` in the chain that `accept` approves is a retryable failure.
    pub fn retryable_if<E: StdError + 'static>(
        accept: impl Fn(&E) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self::of::<E>(Classification::Retryable, accept)
    }

    /// Records matching failures under `error_type` instead of the captured type name.
    #[must_use]
    pub fn named(mut self, error_type: impl Into<Cow<'static, str>>) -> Self {
        self.error_type = Some(error_type.into());
        self
    }

    fn classify(&self, error: &JobError) -> Option<(Classification, Option<&str>)> {
        error
            .chain()
            .any(|e| (self.matches)(e))
            .then_some((self.class, self.error_type.as_deref()))
    }
}

/// What the ladder decided for one run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// SUCCESS.
    Success,
    /// Run again after this long, no attempt spent.
    Defer(Duration),
    /// As `Defer`, and throttle the task's flow key (or queue) until then.
    Throttle(Duration),
    /// A failure, with who decided its class.
    Failure {
        /// The attempt's error record.
        error: ErrorInfo,
        /// Forced by a rung, or left to the engine's globs.
        kind: FailureKind,
    },
}

/// The attempt record for `error`, under `error_type` when a classifier named it.
pub(crate) fn error_info(error: &JobError, named: Option<&str>) -> ErrorInfo {
    let (detail, stack) = error.take_detail();
    let mut info = ErrorInfo::new(named.unwrap_or(error.error_type()), &error.to_string());
    if let Some(detail) = detail {
        info = info.with_detail(detail);
    }
    if let Some(stack) = stack {
        info = info.with_stack(&stack);
    }
    info
}

/// Applies rungs 1–3 to what a handler returned; rungs 4–5 are the engine's.
pub(crate) fn decide(
    returned: &Result<Box<dyn Any + Send>, JobError>,
    mapper: Option<&dyn OutcomeMapper>,
    classifiers: &[Classifier],
    ctx: &JobContext,
) -> Decision {
    if let Some(mapper) = mapper {
        let view = match returned {
            Ok(value) => Returned::Value(&**value),
            Err(error) => Returned::Error(error),
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| mapper.map(view, ctx))) {
            Ok(Outcome::Success) => return Decision::Success,
            Ok(Outcome::Defer(delay)) => return Decision::Defer(delay),
            Ok(Outcome::RetryableFailure(error)) => {
                return Decision::Failure {
                    error,
                    kind: FailureKind::Retryable,
                };
            }
            Ok(Outcome::PermanentFailure(error)) => {
                return Decision::Failure {
                    error,
                    kind: FailureKind::Permanent,
                };
            }
            Ok(Outcome::Unmapped) => {}
            Err(_) => {
                tracing::error!(queue = %ctx.queue, "outcome mapper panicked; retrying the task");
                return Decision::Failure {
                    error: ErrorInfo::new(
                        error_types::OUTCOME_MAPPER_PANIC,
                        "the outcome mapper panicked",
                    ),
                    kind: FailureKind::Retryable,
                };
            }
        }
    }
    let error = match returned {
        Ok(_) => return Decision::Success,
        Err(error) => error,
    };
    match error.forced() {
        Some(Forced::Defer(delay)) => return Decision::Defer(delay),
        Some(Forced::Throttle(delay)) => return Decision::Throttle(delay),
        Some(Forced::Permanent) => {
            return Decision::Failure {
                error: error_info(error, None),
                kind: FailureKind::Permanent,
            };
        }
        Some(Forced::Retryable) => {
            return Decision::Failure {
                error: error_info(error, None),
                kind: FailureKind::Retryable,
            };
        }
        None => {}
    }
    if let Some((class, named)) = classifiers.iter().find_map(|c| c.classify(error)) {
        let named = if error.has_supplied_type() {
            None
        } else {
            named
        };
        return Decision::Failure {
            error: error_info(error, named),
            kind: match class {
                Classification::Retryable => FailureKind::Retryable,
                Classification::Permanent => FailureKind::Permanent,
            },
        };
    }
    Decision::Failure {
        error: error_info(error, None),
        kind: FailureKind::Unclassified,
    }
}
