//! The rdq v1 wire envelope.
//!
//! The envelope is the one language-neutral representation of a task: every SDK,
//! store, API and export agrees on it, and where two components disagree the
//! envelope is the arbiter. This crate owns its model ([`Envelope`]), the
//! deterministic canonical JSON codec, validation with stable [`ErrorCode`]s,
//! ULID task ids ([`TaskId`]), wire timestamps ([`Timestamp`]), the bounded
//! error text the engine records, and the codec for queuey 1.1 envelopes
//! ([`queuey`]) so rdq can share RabbitMQ queues with queuey processes.
//!
//! It does no I/O and knows nothing of policy or stores.

#![forbid(unsafe_code)]

mod codec;
mod error;
pub mod error_types;
mod id;
mod model;
mod names;
pub mod queuey;
mod time;
mod truncate;

pub use codec::{
    ATTEMPT_KEYS, CANCEL_REQUEST_KEYS, DEAD_REASON_KEYS, DEFAULT_MAX_ENVELOPE_BYTES, ENVELOPE_KEYS,
    ERROR_KEYS, is_canonical_base64, parse_strict,
};
pub use error::{EnvelopeError, ErrorCode};
pub use id::TaskId;
pub use model::{
    AttemptRecord, CancelRequest, DeadReason, ENVELOPE_VERSION, Envelope, ErrorInfo, Outcome,
    Status, dead_reasons,
};
pub use names::{
    MAX_FLOW_KEY_LEN, MAX_NAME_LEN, RESERVED_HEADER_PREFIX, is_reserved_header, is_valid_flow_key,
    is_valid_name, validate_flow_key, validate_handler_ref, validate_queue_name,
    validate_user_headers,
};
pub use time::Timestamp;
pub use truncate::{
    MAX_MESSAGE_BYTES, MAX_STACK_BYTES, TRUNCATION_MARKER, truncate_message, truncate_stack,
    truncate_text,
};
