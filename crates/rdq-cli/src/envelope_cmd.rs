//! `rdq envelope`: check an envelope and print its canonical form, make a new
//! one, and convert to and from queuey's wire format.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Subcommand;
use rdq_envelope::queuey::QueueyEnvelope;
use rdq_envelope::{
    DEFAULT_MAX_ENVELOPE_BYTES, Envelope, Timestamp, validate_handler_ref, validate_queue_name,
    validate_user_headers,
};

use crate::CliError;
use crate::input::read_all;

/// Subcommands of `rdq envelope`.
#[derive(Subcommand)]
pub enum EnvelopeCommand {
    /// Validate one envelope and print its canonical JSON; exit 1 with the error code otherwise.
    Check {
        /// The envelope file; `-` or nothing reads standard input.
        file: Option<PathBuf>,
        /// Largest accepted serialised envelope, in bytes.
        #[arg(long, default_value_t = DEFAULT_MAX_ENVELOPE_BYTES)]
        max_bytes: usize,
    },
    /// Print a fresh PENDING envelope.
    New {
        /// Queue name, `[a-z0-9._-]{1,240}`.
        #[arg(long)]
        queue: String,
        /// Handler ref, `[a-z0-9._-]{1,240}`.
        #[arg(long)]
        handler: String,
        /// Payload as JSON text (content type `application/json`).
        #[arg(long, conflicts_with = "payload_file")]
        payload_json: Option<String>,
        /// Payload read from a file, as opaque bytes.
        #[arg(long)]
        payload_file: Option<PathBuf>,
        /// Content type of `--payload-file`.
        #[arg(long, default_value = "application/octet-stream")]
        content_type: String,
        /// A user header `KEY=VALUE` (repeatable; the `rdq.` prefix is reserved).
        #[arg(long = "header", value_name = "KEY=VALUE")]
        headers: Vec<String>,
        /// Claim priority, 0–255.
        #[arg(long, default_value_t = 0)]
        priority: u8,
    },
    /// Convert a queuey 1.1 envelope into an rdq envelope.
    FromQueuey {
        /// The queuey envelope; `-` or nothing reads standard input.
        file: Option<PathBuf>,
    },
    /// Convert an rdq envelope into the queuey 1.1 envelope of its next delivery.
    ToQueuey {
        /// The rdq envelope; `-` or nothing reads standard input.
        file: Option<PathBuf>,
    },
}

/// Runs one `rdq envelope` subcommand.
pub fn run(cmd: EnvelopeCommand) -> Result<(), CliError> {
    let out = match cmd {
        EnvelopeCommand::Check { file, max_bytes } => {
            let bytes = read_all(file.as_deref())?;
            Envelope::decode_with_limit(&bytes, max_bytes)?.encode()
        }
        EnvelopeCommand::New {
            queue,
            handler,
            payload_json,
            payload_file,
            content_type,
            headers,
            priority,
        } => {
            validate_queue_name(&queue)?;
            validate_handler_ref(&handler)?;
            let (payload, content_type) = match (payload_json, payload_file) {
                (Some(json), _) => {
                    serde_json::from_str::<serde_json::Value>(&json).map_err(|e| {
                        CliError::new(
                            "INVALID_PAYLOAD",
                            format!("--payload-json is not JSON: {e}"),
                        )
                    })?;
                    (json.into_bytes(), "application/json".to_owned())
                }
                (None, Some(path)) => (read_all(Some(&path))?, content_type),
                (None, None) => (b"null".to_vec(), "application/json".to_owned()),
            };
            let headers = parse_headers(&headers)?;
            validate_user_headers(&headers)?;
            let mut env = Envelope::new(queue, handler, &payload, content_type, Timestamp::now());
            env.headers = headers;
            env.priority = priority;
            env.check_size(DEFAULT_MAX_ENVELOPE_BYTES)?;
            env.encode()
        }
        EnvelopeCommand::FromQueuey { file } => {
            let bytes = read_all(file.as_deref())?;
            QueueyEnvelope::decode(&bytes)?
                .to_rdq(Timestamp::now())
                .encode()
        }
        EnvelopeCommand::ToQueuey { file } => {
            let bytes = read_all(file.as_deref())?;
            QueueyEnvelope::from_rdq(&Envelope::decode(&bytes)?)?.encode()
        }
    };
    crate::output::write_stdout(format_args!("{}", String::from_utf8_lossy(&out)), true)
}

pub(crate) fn parse_headers(pairs: &[String]) -> Result<BTreeMap<String, String>, CliError> {
    pairs
        .iter()
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| {
                    CliError::new(
                        "INVALID_ARGUMENT",
                        format!("header {pair:?} is not KEY=VALUE"),
                    )
                })
        })
        .collect()
}
