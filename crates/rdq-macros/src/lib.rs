//! Derive macros of the rdq SDK, re-exported by the `rdq` crate.
//!
//! - `#[derive(Queues)]` turns a fieldless enum into an application's queue
//!   set (`rdq::QueueSet`), one queue per variant.
//! - `#[derive(Job)]` binds a payload type to one queue of such a set under a
//!   stable name (`rdq::Job`), which is the envelope's `handler_ref`.
//!
//! Every name is checked here, at compile time, against the envelope's rule
//! (`[a-z0-9._-]{1,240}`), so a name a store would refuse never compiles.
//! Generated code names the facade crate as `::rdq`; use the macros through
//! it, not directly.

#![forbid(unsafe_code)]

mod job;
mod names;
mod queues;

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

/// Implements `rdq::Job` for a `Serialize + Deserialize` struct or enum.
///
/// `#[job(queue = AppQueues::Emails)]` is required; optional keys:
/// `name = "emails.send"` (default: the type name in snake_case, e.g.
/// `send_email`), `version = "2"` (the `handler_version` the producer stamps
/// and the worker compares), and `retry(max_attempts = 5, backoff = "fixed",
/// delay_ms = 500)` (a compiled-in retry policy; `backoff` is `"none"`,
/// `"fixed"` with `delay_ms`, or `"exponential"` with `base_ms`, `factor`,
/// `cap_ms`, `jitter`; without `backoff` the queue's curve is kept).
#[proc_macro_derive(Job, attributes(job))]
pub fn derive_job(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    job::derive(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Implements `rdq::QueueSet` for a fieldless enum, one queue per variant.
///
/// Queue names default to the variant in snake_case; `#[queue(name = "img")]`
/// sets one, and `#[queues(prefix = "myapp")]` on the enum prefixes them all
/// (`myapp.img`). Duplicate names are a compile error.
#[proc_macro_derive(Queues, attributes(queues, queue))]
pub fn derive_queues(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    queues::derive(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
