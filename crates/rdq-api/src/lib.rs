//! The request and response bodies of rdq's HTTP API (`docs/http-api.md`),
//! defined once and shared by the server (`rdq-server`, which parses
//! requests and writes responses) and the Rust client (`rdq-client`, which
//! does the opposite), so the two cannot drift apart.
//!
//! Requests are parsed strictly (`deny_unknown_fields`). Envelopes inside
//! responses travel as raw JSON ([`RawEnvelope`]) so they stay byte for
//! byte their canonical encoding (`docs/envelope.md`); the client decodes
//! them with `rdq_envelope::Envelope::decode`.
//!
//! The types derive `utoipa::ToSchema` (bodies) and `utoipa::IntoParams`
//! (query strings): the server's OpenAPI document is generated from them,
//! with the field rules (`pattern`, bounds) as `#[schema]` attributes.
//! [`schema`] holds the few schemas written by hand, and says why.

#![forbid(unsafe_code)]

pub mod dlq;
pub mod flow;
pub mod int;
pub mod problem;
pub mod queues;
pub mod schedules;
pub mod schema;
pub mod sources;
pub mod tasks;
pub mod work;

pub use problem::Problem;

/// An envelope embedded in a response, exactly its canonical bytes.
pub type RawEnvelope = Box<serde_json::value::RawValue>;

/// Header a client may send instead of a submit body's `idempotency_key`.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// Most tasks one claim hands out.
pub const MAX_CLAIM: usize = 1000;

/// Most settles in one batch.
pub const MAX_SETTLE_BATCH: usize = 1000;

/// Most submits in one batch.
pub const MAX_SUBMIT_BATCH: usize = 1000;

/// Page size of a DLQ listing when the query names none.
pub const DEFAULT_PAGE: usize = 50;
