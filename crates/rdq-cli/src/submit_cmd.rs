//! `rdq submit`: submit one task to a server or a store.

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine as _;
use clap::Args;
use serde_json::{Map, Value, json};

use crate::CliError;
use crate::backend::{Backend, TargetArgs};
use crate::output::outln;

/// Arguments of `rdq submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
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
    /// Content type of the payload (default: `application/json` with
    /// `--payload-json`, `application/octet-stream` otherwise).
    #[arg(long)]
    content_type: Option<String>,
    /// A user header `KEY=VALUE` (repeatable; the `rdq.` prefix is reserved).
    #[arg(long = "header", value_name = "KEY=VALUE")]
    headers: Vec<String>,
    /// Claim priority, 0–255 (higher first).
    #[arg(long)]
    priority: Option<u8>,
    /// Due this many milliseconds from now.
    #[arg(long)]
    delay_ms: Option<u64>,
    /// A repeated submit with the same key returns the original task.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Handler version.
    #[arg(long)]
    handler_version: Option<String>,
    /// Flow key: the queue's per-key limits and fairness count the task
    /// under it (1-128 bytes of `[A-Za-z0-9._:/@=+-]`; a tenant, an account).
    #[arg(long, value_name = "KEY")]
    flow_key: Option<String>,
    /// A unique key: while the task holding it holds it, another submit of
    /// the key conflicts (`UNIQUE_HELD`, naming the holder). See
    /// docs/uniqueness.md.
    #[arg(long, value_name = "KEY", conflicts_with = "unique_key_from")]
    unique_key: Option<String>,
    /// Derive the unique key from these JSON pointers into the JSON payload
    /// (repeatable, e.g. `/customer_id`); the server computes it.
    #[arg(long, value_name = "POINTER")]
    unique_key_from: Vec<String>,
    /// Where the key is unique: `queue` (default) or `handler`.
    #[arg(long, value_name = "SCOPE")]
    unique_scope: Option<String>,
    /// How long the task holds the key: `until_started`, `until_finished`
    /// (default), `until_succeeded`, `forever`, or `for` with
    /// `--unique-hold-ms`.
    #[arg(long, value_name = "HOLD")]
    unique_hold: Option<String>,
    /// With `--unique-hold for`: how long, in milliseconds.
    #[arg(long, value_name = "MS")]
    unique_hold_ms: Option<u64>,
    /// What a submit of a held key does: `return` (default: refused with
    /// `UNIQUE_HELD`), `replace` or `debounce` (a waiting holder takes the
    /// new payload; debounce also moves its due time), or `existing` (the
    /// holder is printed, as for an idempotency key).
    #[arg(long, value_name = "MODE")]
    unique_on_conflict: Option<String>,
    #[command(flatten)]
    target: TargetArgs,
}

/// Runs `rdq submit`.
pub async fn run(args: SubmitArgs) -> Result<(), CliError> {
    let backend = Backend::open(&args.target).await?;
    let mut body = Map::new();
    body.insert("queue".into(), json!(args.queue));
    body.insert("handler_ref".into(), json!(args.handler));
    if let Some(text) = &args.payload_json {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            CliError::new(
                "INVALID_ARGUMENT",
                format!("--payload-json is not JSON: {e}"),
            )
        })?;
        body.insert("payload_json".into(), value);
    }
    if let Some(path) = &args.payload_file {
        let bytes = std::fs::read(path).map_err(|e| {
            CliError::new("IO_ERROR", format!("cannot read {}: {e}", path.display()))
        })?;
        body.insert(
            "payload".into(),
            json!(base64::engine::general_purpose::STANDARD.encode(bytes)),
        );
    }
    if let Some(ct) = args.content_type {
        body.insert("payload_content_type".into(), json!(ct));
    }
    let mut headers = BTreeMap::new();
    for h in &args.headers {
        let (k, v) = h.split_once('=').ok_or_else(|| {
            CliError::new(
                "INVALID_ARGUMENT",
                format!("--header {h:?}: expected KEY=VALUE"),
            )
        })?;
        headers.insert(k.to_owned(), v.to_owned());
    }
    if !headers.is_empty() {
        body.insert("headers".into(), json!(headers));
    }
    for (key, value) in [
        ("priority", args.priority.map(|p| json!(p))),
        ("delay_ms", args.delay_ms.map(|d| json!(d))),
        ("idempotency_key", args.idempotency_key.map(|k| json!(k))),
        ("handler_version", args.handler_version.map(|v| json!(v))),
        ("flow_key", args.flow_key.map(|k| json!(k))),
    ] {
        if let Some(v) = value {
            body.insert(key.into(), v);
        }
    }
    let mut unique = Map::new();
    for (key, value) in [
        ("key", args.unique_key.map(|k| json!(k))),
        (
            "key_from",
            (!args.unique_key_from.is_empty()).then(|| json!(args.unique_key_from)),
        ),
        ("scope", args.unique_scope.map(|s| json!(s))),
        ("hold", args.unique_hold.map(|h| json!(h))),
        ("hold_ms", args.unique_hold_ms.map(|ms| json!(ms))),
        ("on_conflict", args.unique_on_conflict.map(|m| json!(m))),
    ] {
        if let Some(v) = value {
            unique.insert(key.into(), v);
        }
    }
    if !unique.is_empty() {
        body.insert("unique".into(), Value::Object(unique));
    }
    let (created, env) = backend.submit(Value::Object(body)).await?;
    if args.target.json {
        outln!("{}", env.encode_string())?;
    } else if created {
        outln!(
            "submitted {} to {} ({})",
            env.id,
            env.queue,
            env.status.as_str()
        )?;
    } else {
        outln!(
            "already submitted: {} in {} ({}) has this idempotency key or unique key",
            env.id,
            env.queue,
            env.status.as_str()
        )?;
    }
    Ok(())
}
