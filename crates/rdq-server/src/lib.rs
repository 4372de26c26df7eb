//! rdq-server: how every non-Rust service uses rdq, and how operators run it.
//!
//! One process over one store (the embedded store by default) offering:
//!
//! - the HTTP JSON API under `/v1` ([`api`]): submit and read tasks, queue
//!   counts and live policy, the DLQ (page, redrive, export, import, purge),
//!   errors as `application/problem+json` with rdq's stable codes;
//! - the pull-worker API: claim with a lease, settle (one or a batch),
//!   extend the lease, fenced by lease tokens;
//! - the gRPC API of `rdq-grpc` on the same address;
//! - callback dispatch ([`callback`]): tasks of queues with a callback target
//!   are POSTed to it (or, for a `grpc://` target, sent as a gRPC call) and
//!   the answer is mapped onto the canonical outcome;
//! - bearer-token auth with scopes, an audit log, Prometheus metrics,
//!   health, readiness and an OpenAPI document;
//! - the runtime's lease reaper and retention pruner, the scheduler, the
//!   sources of `[[sources]]` (`rdq_source`: Kafka, NATS JetStream and SQS
//!   records as tasks, their status under `/v1/sources`), and graceful
//!   shutdown ([`server`]);
//! - the dashboard's files under `/ui` ([`ui`]);
//! - the listener ([`listener`]): HTTP/1.1 and HTTP/2 on one port, optional
//!   HTTPS with client certificates, timeouts for slow and idle clients and a
//!   connection limit.
//!
//! Every use case lives in the application layer (`rdq_app`), shared with
//! the `rdq` CLI's direct-to-store path; the handlers here only translate
//! HTTP to it and back. Request and response types are `rdq_api`'s, shared
//! with the Rust client (`rdq_client`).

#![forbid(unsafe_code)]

pub mod api;
pub mod callback;
pub mod config;
pub mod listener;
pub mod problem;
pub mod request;
pub mod server;
pub mod ui;

pub use config::{
    ConfigError, DEFAULT_LISTEN, DEFAULT_STORE, HttpSettings, ServerConfig, TlsSettings,
};
pub use problem::ApiError;
pub use server::{Server, ServerError, shutdown_signal};
