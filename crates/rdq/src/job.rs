//! Typed jobs and queue sets: what a Rust service declares about its work.
//!
//! A [`QueueSet`] is an application's closed set of queues (an enum with
//! `#[derive(Queues)]`); a [`Job`] is a payload type bound to one of them
//! under a stable name. Because a job names its queue set in its type, a
//! [`crate::Producer`] or [`crate::Worker`] of one application cannot be
//! handed another application's job: that is a compile error, not a task on
//! the wrong queue.

use std::fmt::Debug;
use std::hash::Hash;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::retry::RetryPolicy;

/// An application's closed set of queues, normally an enum with
/// `#[derive(Queues)]`. The hand-written equivalent:
///
/// ```
/// #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
/// enum AppQueues { Emails, Images }
///
/// impl rdq::QueueSet for AppQueues {
///     fn all() -> &'static [Self] { &[AppQueues::Emails, AppQueues::Images] }
///     fn name(&self) -> &'static str {
///         match self { AppQueues::Emails => "myapp.emails", AppQueues::Images => "myapp.img" }
///     }
/// }
///
/// use rdq::QueueSet as _;
/// assert_eq!(AppQueues::from_name("myapp.img"), Some(AppQueues::Images));
/// ```
pub trait QueueSet: Copy + Eq + Hash + Debug + Send + Sync + 'static {
    /// Every queue of the set, in declaration order.
    fn all() -> &'static [Self];

    /// The queue's name in the store (`[a-z0-9._-]{1,240}`).
    fn name(&self) -> &'static str;

    /// The queue with this name, if it belongs to the set.
    fn from_name(name: &str) -> Option<Self> {
        Self::all().iter().copied().find(|q| q.name() == name)
    }
}

/// A unit of work: a serde payload bound to one queue under a stable name.
/// Normally `#[derive(Job)]`; the hand-written equivalent:
///
/// ```
/// # #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
/// # enum AppQueues { Emails }
/// # impl rdq::QueueSet for AppQueues {
/// #     fn all() -> &'static [Self] { &[AppQueues::Emails] }
/// #     fn name(&self) -> &'static str { "emails" }
/// # }
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct SendEmail { to: String }
///
/// impl rdq::Job for SendEmail {
///     type Queue = AppQueues;
///     const NAME: &'static str = "send_email";
///     const QUEUE: AppQueues = AppQueues::Emails;
/// }
/// ```
///
/// The derive checks `NAME` at compile time; a hand-written one is checked
/// when a worker registers it ([`crate::Error::InvalidName`]) and when it is
/// enqueued (`INVALID_HANDLER_REF`).
pub trait Job: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The queue set this job belongs to.
    type Queue: QueueSet;

    /// The stable name carried as the envelope's `handler_ref`; workers route
    /// on it. Renaming a job strands the tasks already queued under the old
    /// name (they dead-letter as `rdq.NoHandler`), so treat it as a wire name.
    const NAME: &'static str;

    /// The queue this job is submitted to and claimed from.
    const QUEUE: Self::Queue;

    /// The handler version stamped on submit and compared by workers under
    /// the queue's `handler_version_mismatch` policy; `None` stamps nothing.
    const VERSION: Option<&'static str> = None;

    /// A compiled-in retry policy for this job type; `None` keeps the queue's.
    /// Worker overrides and [`crate::JobHandler::retry_policy`] win over it.
    fn retry_policy() -> Option<RetryPolicy> {
        None
    }
}
