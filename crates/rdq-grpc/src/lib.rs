//! rdq's gRPC API (`docs/grpc.md`): the `rdq.v1` protobuf package of
//! `proto/rdq/v1/`, its mapping of the v1 envelope ([`codec`]), and the
//! services that serve it, each method a thin adapter over the application
//! layer ([`rdq_app::App`]), exactly like the HTTP handlers of `rdq-server`.
//!
//! - [`codec`]: envelope JSON ↔ `rdq.v1.Envelope`, lossless (the JSON stays
//!   the arbiter and validates);
//! - [`status`]: an [`rdq_app::AppError`] as a gRPC status carrying rdq's
//!   stable code;
//! - [`messages`]: request messages as the application layer's commands
//!   (a submit's payload bytes, a settle's report, import entries), and
//!   answers as messages;
//! - [`wire`]: the `Work` stream's messages towards the worker, a leased
//!   task written straight from the model;
//! - [`work`]: the bidirectional `Workers/Work` stream with credits,
//!   authorised once when it opens;
//! - [`service`]: `rdq.v1.Tasks`, `Queues`, `Dlq` and `Workers`' unary and
//!   DLQ streaming methods;
//! - [`schedules`]: `rdq.v1.Schedules`, the definition as JSON text;
//! - [`sources`]: `rdq.v1.Sources`, the status of the server's sources and
//!   their cursors;
//! - [`router`]: every service, the standard health service and server
//!   reflection as one axum [`axum::Router`], which `rdq serve` merges into
//!   its HTTP router (requests are told apart by `content-type:
//!   application/grpc`).
//!
//! Each module uses only those listed before it (`router` the last).
//!
//! The generated code in `src/generated/` is committed (no `protoc` needed
//! to build); `tests/generated.rs` holds it to the `.proto` files.

#![forbid(unsafe_code)]

/// The `rdq.v1` messages, service traits, servers and clients, generated
/// from `proto/rdq/v1/*.proto`.
#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
pub mod pb {
    include!("generated/rdq.v1.rs");

    /// The encoded `FileDescriptorSet` of the `rdq.v1` files, for server
    /// reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!("generated/descriptor.bin");
}

/// A boxed stream of messages, as the streaming methods return.
pub type BoxStream<T> =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;

pub mod codec;
pub mod messages;
pub mod router;
pub mod schedules;
pub mod service;
pub mod sources;
pub mod status;
pub mod wire;
pub mod work;

pub use router::grpc_router;
pub use service::GrpcApi;
