//! Handlers: [`JobHandler`] for a struct, [`FnHandler`] for an async
//! closure, and the type-erased runner the worker keeps one of per job type.
//!
//! A handler returns `Result<T, E>`. `T` is usually `()`, but may be any value
//! the queue's [`crate::OutcomeMapper`] inspects (a `bool`, a status enum, a
//! response); `E` is anything that converts into a [`JobError`].

use std::any::Any;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use rdq_envelope::Timestamp;
use rdq_runtime::Task;
use tokio::sync::watch;

use crate::context::JobContext;
use crate::job::Job;
use crate::job_error::JobError;
use crate::retry::RetryPolicy;

/// Runs one job type.
///
/// ```
/// use rdq::prelude::*;
///
/// #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
/// enum AppQueues { Emails }
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(queue = AppQueues::Emails)]
/// struct SendEmail { to: String }
///
/// struct EmailHandler;
///
/// impl JobHandler for EmailHandler {
///     type Job = SendEmail;
///     type Output = ();
///     type Error = JobError;
///
///     async fn handle(&self, job: SendEmail, ctx: JobContext) -> Result<(), JobError> {
///         if job.to.is_empty() {
///             return Err(rdq::permanent(JobError::new("mail.NoRecipient", "no recipient")));
///         }
///         tracing::info!(to = %job.to, attempt = ctx.attempt, "sending");
///         Ok(())
///     }
/// }
/// ```
pub trait JobHandler: Send + Sync + 'static {
    /// The job type this handler runs.
    type Job: Job;
    /// What a successful call returns; an `OutcomeMapper` may inspect it.
    type Output: Send + 'static;
    /// What a failed call returns.
    type Error: Into<JobError> + Send + 'static;

    /// Runs one job.
    fn handle(
        &self,
        job: Self::Job,
        ctx: JobContext,
    ) -> impl Future<Output = Result<Self::Output, Self::Error>> + Send;

    /// A retry policy for this one job, chosen from its payload (queuey's
    /// `set_retry_policy`). Called once per run, after the payload decodes and
    /// before `handle`, so `ctx.max_attempts` already reports it. Keep it
    /// cheap and free of I/O. `None` (the default) keeps the worker's
    /// overrides, else the job's compiled-in policy, else the queue's.
    fn retry_policy(&self, job: &Self::Job) -> Option<RetryPolicy> {
        let _ = job;
        None
    }
}

/// An async closure as a [`JobHandler`]:
/// `FnHandler::new(|job: SendEmail, ctx: JobContext| async move { Ok::<(), JobError>(()) })`.
/// [`crate::WorkerBuilder::handler_fn`] wraps one for you.
pub struct FnHandler<J, F> {
    f: F,
    _job: PhantomData<fn(J)>,
}

impl<J, F> FnHandler<J, F> {
    /// Wraps `f`.
    pub fn new(f: F) -> Self {
        Self {
            f,
            _job: PhantomData,
        }
    }
}

impl<J, F, Fut, T, E> JobHandler for FnHandler<J, F>
where
    J: Job,
    F: Fn(J, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Send + 'static,
    E: Into<JobError> + Send + 'static,
{
    type Job = J;
    type Output = T;
    type Error = E;

    fn handle(&self, job: J, ctx: JobContext) -> impl Future<Output = Result<T, E>> + Send {
        (self.f)(job, ctx)
    }
}

/// How one run of a registered job ended, before the ladder.
// One per task, consumed at once: boxing the large variant would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Run {
    /// The payload did not decode into the job type.
    Undecodable(String),
    /// The handler returned.
    Returned {
        returned: Result<Box<dyn Any + Send>, JobError>,
        ctx: JobContext,
        retry: Option<RetryPolicy>,
    },
    /// The handler panicked.
    Panicked {
        message: String,
        retry: Option<RetryPolicy>,
    },
    /// Shutdown's deadline passed while it ran: hand the task back.
    Aborted,
}

/// What the worker knows before a run.
pub(crate) struct RunSetup {
    /// The worker's override for this job type or queue, else the job's own.
    pub configured: Option<RetryPolicy>,
    /// The queue's live `max_attempts`.
    pub queue_max_attempts: u32,
    /// The engine's clock now.
    pub now: Timestamp,
    /// Flips to true when shutdown's deadline passes.
    pub abort: watch::Receiver<bool>,
}

/// One job type's handler behind a pointer.
pub(crate) trait ErasedJob: Send + Sync + 'static {
    fn run(&self, task: Arc<Task>, setup: RunSetup) -> BoxFuture<'static, Run>;
}

pub(crate) struct Erased<H>(pub Arc<H>);

impl<H: JobHandler> ErasedJob for Erased<H> {
    fn run(&self, task: Arc<Task>, setup: RunSetup) -> BoxFuture<'static, Run> {
        let handler = Arc::clone(&self.0);
        Box::pin(async move {
            let job: H::Job = match serde_json::from_slice(&task.envelope().payload_bytes()) {
                Ok(job) => job,
                Err(e) => return Run::Undecodable(e.to_string()),
            };
            let retry = handler.retry_policy(&job).or(setup.configured);
            let max_attempts = retry
                .as_ref()
                .map_or(setup.queue_max_attempts, |r| r.max_attempts);
            let ctx = JobContext::from_task(task, H::Job::NAME, max_attempts, setup.now);
            let work = AssertUnwindSafe(handler.handle(job, ctx.clone())).catch_unwind();
            let mut abort = setup.abort;
            tokio::select! {
                result = work => match result {
                    Ok(Ok(value)) => Run::Returned {
                        returned: Ok(Box::new(value)),
                        ctx,
                        retry,
                    },
                    Ok(Err(error)) => Run::Returned {
                        returned: Err(error.into()),
                        ctx,
                        retry,
                    },
                    Err(panic) => Run::Panicked {
                        message: panic_message(&*panic),
                        retry,
                    },
                },
                () = aborted(&mut abort) => Run::Aborted,
            }
        })
    }
}

/// Completes when `abort` flips (never, if its sender is gone).
pub(crate) async fn aborted(abort: &mut watch::Receiver<bool>) {
    if abort.wait_for(|&a| a).await.is_err() {
        std::future::pending::<()>().await;
    }
}

pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "the handler panicked".to_owned())
}
