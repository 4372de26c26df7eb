//! Callback dispatch: queues whose policy has a `callback` target get their
//! tasks POSTed to it, and the answer mapped onto the canonical outcome of
//! `docs/outcomes.md`.
//!
//! - [`settings`]: the server-wide `[callbacks]` section and URL allowlist;
//! - [`address`]: which addresses a callback may reach, checked on every connection;
//! - [`target`]: a queue's target, parsed and checked when it is configured;
//! - [`mapping`]: answer → outcome, a pure function;
//! - [`dispatcher`]: the per-queue workers that make the calls;
//! - [`grpc`]: `grpc://` targets, called as `rdq.v1.Handler/Handle`.

pub mod address;
pub mod dispatcher;
pub mod grpc;
pub mod mapping;
pub mod settings;
pub mod target;

pub use dispatcher::Dispatcher;
pub use mapping::{CallResult, decide};
pub use settings::CallbackSettings;
pub use target::{BodyRule, CallbackTarget, MappedOutcome};
