//! Callback dispatch: queues whose policy has a `callback` target get their
//! tasks sent to it (POSTed as JSON, or called as `rdq.v1.Handler/Handle`),
//! and the answer mapped onto the canonical outcome of `docs/outcomes.md`.
//!
//! The files depend on each other one way only, leaves first:
//!
//! - [`address`]: which addresses a callback may reach, checked on every connection;
//! - [`scheme`]: the URL schemes a target may use, and the protocol of each;
//! - [`grpc_status`]: gRPC status codes by number and name;
//! - [`settings`]: the server-wide `[callbacks]` section and URL allowlist;
//! - [`target`]: a queue's target, parsed and checked when it is configured;
//! - [`mapping`]: answer → outcome, pure functions for HTTP and gRPC;
//! - [`grpc`]: the tonic client that calls `grpc://` and `grpcs://` targets;
//! - [`dispatcher`]: the per-queue workers that make the calls.

pub mod address;
pub mod dispatcher;
pub mod grpc;
pub mod grpc_status;
pub mod mapping;
pub mod scheme;
pub mod settings;
pub mod target;

pub use dispatcher::Dispatcher;
pub use mapping::{CallResult, decide, decide_grpc};
pub use settings::CallbackSettings;
pub use target::{BodyRule, CallbackTarget, MappedOutcome};
