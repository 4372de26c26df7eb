//! The dead-letter hook: one notification for every task a worker sends to
//! the DLQ, including the ones no handler ever saw (no handler, undecodable
//! payload) and the ones the reaper killed (lease expiries).
//!
//! For decisions the worker makes, the hook runs *before* the settle is
//! written, with the envelope as the engine will store it (the worker runs
//! the engine's own pure `settle` function to know): if the process dies in
//! between, the task is claimed again and the hook runs again, so the
//! notification is at-least-once, like the work. Should the settle then be
//! refused (`LEASE_LOST`: the lease lapsed meanwhile), the hook has reported
//! a death the reaper's retry overtook; the DLQ itself is the record of truth.
//! Lease-expiry deaths are reported after the reaper wrote them, by the
//! worker whose reaper reaped them. A hook that panics is logged and ignored:
//! it is a notification, never a veto.

use std::future::Future;

use futures::future::BoxFuture;
use rdq_envelope::error_types;
use rdq_envelope::{DeadReason, Envelope, ErrorInfo, Outcome, Status};

/// Why a task went to the DLQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeadLetterCause {
    /// No handler is registered for the task's `handler_ref` on its queue
    /// (`rdq.NoHandler`); the payload was never decoded.
    NoHandler,
    /// The payload did not decode into the job type (`rdq.UndecodablePayload`).
    UndecodablePayload,
    /// The task's `handler_version` differs from the handler's and the queue's
    /// `handler_version_mismatch` is `dead` (`rdq.HandlerVersionMismatch`).
    HandlerVersionMismatch,
    /// The outcome was a permanent failure (a mapper, wrapper, classifier or
    /// `non_retryable_errors` glob said so).
    PermanentFailure,
    /// A retryable failure (or a panic) on the last allowed attempt.
    AttemptsExhausted,
    /// The lease lapsed on the last allowed attempt (`rdq.LeaseExpired`).
    LeaseExpired,
}

impl DeadLetterCause {
    /// Why a DEAD task died, read from its last attempt: the SDK's own error
    /// types name wiring faults; otherwise the attempt's outcome decides.
    /// `None` if the task is not DEAD.
    pub fn of(env: &Envelope) -> Option<Self> {
        if env.status != Status::Dead {
            return None;
        }
        let last = env.attempts.last();
        let error_type = last
            .and_then(|a| a.error.as_ref())
            .map(|e| e.error_type.as_str());
        Some(match (error_type, last.and_then(|a| a.outcome)) {
            (Some(error_types::NO_HANDLER), _) => Self::NoHandler,
            (Some(error_types::UNDECODABLE_PAYLOAD), _) => Self::UndecodablePayload,
            (Some(error_types::HANDLER_VERSION_MISMATCH), _) => Self::HandlerVersionMismatch,
            (_, Some(Outcome::PermanentFailure)) => Self::PermanentFailure,
            (_, Some(Outcome::LeaseExpired)) | (Some(error_types::LEASE_EXPIRED), _) => {
                Self::LeaseExpired
            }
            _ => Self::AttemptsExhausted,
        })
    }

    /// True if user code ran: false for wiring faults (no handler, payload,
    /// version) that a redrive alone will not fix.
    pub fn reached_handler(self) -> bool {
        matches!(
            self,
            Self::PermanentFailure | Self::AttemptsExhausted | Self::LeaseExpired
        )
    }
}

/// A task sent to the DLQ, as handed to a [`DeadLetterHook`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DeadLetter {
    /// The task as stored DEAD, its last attempt record carrying the error.
    pub envelope: Envelope,
    /// Why it died.
    pub cause: DeadLetterCause,
    /// The attempts the policy that judged it allowed.
    pub max_attempts: u32,
}

impl DeadLetter {
    /// A report, for unit-testing a hook without a worker.
    pub fn new(envelope: Envelope, cause: DeadLetterCause, max_attempts: u32) -> Self {
        Self {
            envelope,
            cause,
            max_attempts,
        }
    }

    /// The error of the attempt that killed it.
    pub fn error(&self) -> Option<&ErrorInfo> {
        self.envelope.last_error()
    }

    /// Attempts spent since submit or the last redrive.
    pub fn attempts(&self) -> u32 {
        self.envelope.attempt_count
    }

    /// Why the task is dead as the envelope records it (`docs/outcomes.md`):
    /// its code, who decided and when.
    pub fn reason(&self) -> Option<&DeadReason> {
        self.envelope.dead_reason.as_ref()
    }
}

/// Called for every task a worker sends to the DLQ. Implemented for async
/// closures `Fn(DeadLetter) -> impl Future<Output = ()>`.
pub trait DeadLetterHook: Send + Sync + 'static {
    /// Reports one dead task.
    fn on_dead_letter(&self, dead: DeadLetter) -> impl Future<Output = ()> + Send;
}

impl<F, Fut> DeadLetterHook for F
where
    F: Fn(DeadLetter) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn on_dead_letter(&self, dead: DeadLetter) -> impl Future<Output = ()> + Send {
        self(dead)
    }
}

/// [`DeadLetterHook`] behind a pointer.
pub(crate) trait ErasedHook: Send + Sync + 'static {
    fn call(&self, dead: DeadLetter) -> BoxFuture<'_, ()>;
}

impl<H: DeadLetterHook> ErasedHook for H {
    fn call(&self, dead: DeadLetter) -> BoxFuture<'_, ()> {
        Box::pin(self.on_dead_letter(dead))
    }
}
