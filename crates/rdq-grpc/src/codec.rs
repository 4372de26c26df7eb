//! The proto mapping of the v1 envelope (`proto/rdq/v1/envelope.proto`),
//! defined on the canonical JSON of `docs/envelope.md`, which stays the
//! arbiter: a message maps onto exactly one JSON object, and the JSON codec
//! validates it.
//!
//! JSON → proto takes the canonical encoding member by member: members the
//! writer left out are named in `omitted`, unknown members travel as
//! canonical JSON text in `unknown_json`, the base64 payload as its bytes.
//! Proto → JSON builds the object back and hands it to
//! [`Envelope::from_json_value`], so a message gets the codes its JSON would
//! get (`INVALID_FIELD`, `MALFORMED_ENVELOPE`, …), and JSON → proto → JSON
//! is byte-identical for every canonical envelope.

use base64::Engine as _;
use rdq_envelope::{
    ATTEMPT_KEYS as ATTEMPT_KNOWN, CANCEL_REQUEST_KEYS as CANCEL_REQUEST_KNOWN,
    DEAD_REASON_KEYS as DEAD_REASON_KNOWN, ENVELOPE_KEYS as ENVELOPE_KNOWN,
    ERROR_KEYS as ERROR_KNOWN,
};
use rdq_envelope::{Envelope, EnvelopeError, ErrorCode, parse_strict};
use serde_json::{Map, Value};

use crate::pb;

/// Envelope members a writer may leave out, in the order of `docs/envelope.md`.
pub const ENVELOPE_OPTIONAL: &[&str] = &[
    "handler_version",
    "payload_ref",
    "headers",
    "priority",
    "deferral_count",
    "attempt_count",
    "redrive_count",
    "claim_count",
    "next_attempt_at",
    "lease_expires_at",
    "attempts",
    "dead_reason",
    "cancel_requested",
];

/// Dead-reason members a writer may leave out.
pub const DEAD_REASON_OPTIONAL: &[&str] = &["message"];

/// Cancel-request members a writer may leave out.
pub const CANCEL_REQUEST_OPTIONAL: &[&str] = &["message"];

/// Attempt-record members a writer may leave out.
pub const ATTEMPT_OPTIONAL: &[&str] = &["finished_at", "outcome", "error"];

/// Error-object members a writer may leave out.
pub const ERROR_OPTIONAL: &[&str] = &["detail", "stack"];

fn malformed(path: &str, message: impl Into<String>) -> EnvelopeError {
    EnvelopeError::at(ErrorCode::MalformedEnvelope, path, message)
}

fn invalid(path: &str, message: impl Into<String>) -> EnvelopeError {
    EnvelopeError::at(ErrorCode::InvalidField, path, message)
}

/// The message for `env`, by way of its canonical encoding.
pub fn to_proto(env: &Envelope) -> pb::Envelope {
    into_proto(env.clone())
}

/// [`to_proto`] of an envelope the caller no longer needs: its strings move
/// into the message (what a Work stream does for every task it hands out).
pub fn into_proto(env: Envelope) -> pb::Envelope {
    direct(env).unwrap_or_else(|env| {
        // The canonical encoding of a decoded envelope always maps.
        from_canonical_json(&env.encode()).unwrap_or_default()
    })
}

/// The message of an envelope without unknown members at any level, built
/// from the model instead of its canonical JSON (`tests/codec_fixtures.rs`
/// checks it is the same message). `None` sends the envelope the long way.
#[doc(hidden)]
pub fn to_proto_direct(env: &Envelope) -> Option<pb::Envelope> {
    direct(env.clone()).ok()
}

/// [`to_proto_direct`], moving the strings; gives the envelope back when it
/// has unknown members (or a payload that is not base64).
fn direct(env: Envelope) -> Result<pb::Envelope, Box<Envelope>> {
    if has_unknown_members(&env) {
        return Err(Box::new(env));
    }
    let Some(status) = pb::Status::from_str_name(env.status.as_str()) else {
        return Err(Box::new(env));
    };
    let Ok(payload) = base64::engine::general_purpose::STANDARD.decode(env.payload.as_bytes())
    else {
        return Err(Box::new(env));
    };
    let omitted = owned(env.left_out());
    let attempts = env
        .attempts
        .into_iter()
        .map(|a| {
            let omitted = owned(a.left_out());
            let error = a.error.map(|e| {
                let omitted = owned(e.left_out());
                pb::ErrorInfo {
                    r#type: e.error_type,
                    message: e.message,
                    detail_json: e.detail.filter(|v| !v.is_null()).map(|v| v.to_string()),
                    stack: e.stack,
                    omitted,
                    unknown_json: String::new(),
                }
            });
            pb::AttemptRecord {
                attempt_no: a.attempt_no,
                started_at: a.started_at.to_string(),
                finished_at: a.finished_at.map(|t| t.to_string()),
                outcome: a
                    .outcome
                    .and_then(|o| pb::Outcome::from_str_name(o.as_str()))
                    .map_or(0, Into::into),
                error,
                omitted,
                unknown_json: String::new(),
            }
        })
        .collect();
    let dead_reason = env.dead_reason.map(|r| pb::DeadReason {
        omitted: owned(r.left_out()),
        code: r.code,
        at: r.at.to_string(),
        by: r.by,
        message: r.message,
        unknown_json: String::new(),
    });
    let cancel_requested = env.cancel_requested.map(cancel_request);
    Ok(pb::Envelope {
        envelope_version: env.envelope_version,
        id: env.id.to_string(),
        queue: env.queue,
        handler_ref: env.handler_ref,
        handler_version: env.handler_version,
        payload,
        payload_content_type: env.payload_content_type,
        payload_ref: env.payload_ref,
        headers: env.headers.into_iter().collect(),
        status: status.into(),
        priority: u32::from(env.priority),
        deferral_count: env.deferral_count,
        attempt_count: env.attempt_count,
        redrive_count: env.redrive_count,
        claim_count: env.claim_count,
        next_attempt_at: env.next_attempt_at.map(|t| t.to_string()),
        lease_expires_at: env.lease_expires_at.map(|t| t.to_string()),
        created_at: env.created_at.to_string(),
        attempts,
        omitted,
        unknown_json: String::new(),
        dead_reason,
        cancel_requested,
    })
}

/// Whether `env` has members the model does not know, at any level: such
/// an envelope maps by way of its canonical JSON (`unknown_json`), not
/// field by field.
pub(crate) fn has_unknown_members(env: &Envelope) -> bool {
    let extra =
        |m: &Map<String, Value>, known: &[&str]| m.keys().any(|k| !known.contains(&k.as_str()));
    extra(&env.extra, ENVELOPE_KNOWN)
        || env.attempts.iter().any(|a| {
            extra(&a.extra, ATTEMPT_KNOWN)
                || a.error
                    .as_ref()
                    .is_some_and(|e| extra(&e.extra, ERROR_KNOWN))
        })
        || env
            .dead_reason
            .as_ref()
            .is_some_and(|r| extra(&r.extra, DEAD_REASON_KNOWN))
        || env
            .cancel_requested
            .as_ref()
            .is_some_and(|r| extra(&r.extra, CANCEL_REQUEST_KNOWN))
}

/// The message of a cancel request the model knows whole (no unknown
/// members: [`has_unknown_members`] sends those by way of the JSON).
pub(crate) fn cancel_request(r: rdq_envelope::CancelRequest) -> pb::CancelRequest {
    pb::CancelRequest {
        omitted: owned(r.left_out()),
        at: r.at.to_string(),
        by: r.by,
        message: r.message,
        unknown_json: String::new(),
    }
}

fn owned(names: Vec<&'static str>) -> Vec<String> {
    names.into_iter().map(str::to_owned).collect()
}

/// The message by way of the canonical JSON, as [`to_proto`] does for an
/// envelope with unknown members: the reference the direct mapping is
/// tested against.
#[doc(hidden)]
pub fn to_proto_via_json(env: &Envelope) -> pb::Envelope {
    from_canonical_json(&env.encode()).unwrap_or_default()
}

/// The message for the JSON envelope `bytes`, after checking them as the
/// JSON codec does (any valid layout; the canonical form is what maps).
pub fn from_json(bytes: &[u8]) -> Result<pb::Envelope, EnvelopeError> {
    let env = Envelope::decode(bytes)?;
    from_canonical_json(&env.encode())
}

fn from_canonical_json(bytes: &[u8]) -> Result<pb::Envelope, EnvelopeError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| EnvelopeError::new(ErrorCode::MalformedEnvelope, e.to_string()))?;
    let Value::Object(mut obj) = value else {
        return Err(EnvelopeError::new(
            ErrorCode::MalformedEnvelope,
            "not an object",
        ));
    };
    let mut out = pb::Envelope {
        envelope_version: take_u32(&mut obj, "envelope_version")?.unwrap_or(0),
        id: take_string(&mut obj, "id")?.unwrap_or_default(),
        queue: take_string(&mut obj, "queue")?.unwrap_or_default(),
        handler_ref: take_string(&mut obj, "handler_ref")?.unwrap_or_default(),
        ..Default::default()
    };
    let mut omitted = Vec::new();
    out.handler_version = take_nullable_string(&mut obj, "handler_version", &mut omitted)?;
    let payload = take_string(&mut obj, "payload")?.unwrap_or_default();
    out.payload = base64::engine::general_purpose::STANDARD
        .decode(payload.as_bytes())
        .map_err(|e| invalid("payload", format!("is not base64: {e}")))?;
    out.payload_content_type = take_string(&mut obj, "payload_content_type")?.unwrap_or_default();
    out.payload_ref = take_nullable_string(&mut obj, "payload_ref", &mut omitted)?;
    match obj.remove("headers") {
        None => omitted.push("headers"),
        Some(Value::Object(headers)) => {
            for (k, v) in headers {
                match v {
                    Value::String(s) => {
                        out.headers.insert(k, s);
                    }
                    _ => return Err(invalid(&format!("headers.{k}"), "is not a string")),
                }
            }
        }
        Some(_) => return Err(malformed("headers", "is not an object")),
    }
    let status = take_string(&mut obj, "status")?.unwrap_or_default();
    out.status = pb::Status::from_str_name(&status)
        .filter(|s| *s != pb::Status::Unspecified)
        .ok_or_else(|| invalid("status", format!("unknown status {status:?}")))?
        .into();
    for (name, slot) in [
        ("priority", &mut out.priority),
        ("deferral_count", &mut out.deferral_count),
        ("attempt_count", &mut out.attempt_count),
        ("redrive_count", &mut out.redrive_count),
        ("claim_count", &mut out.claim_count),
    ] {
        match take_u32(&mut obj, name)? {
            Some(n) => *slot = n,
            None => omitted.push(name),
        }
    }
    out.next_attempt_at = take_nullable_string(&mut obj, "next_attempt_at", &mut omitted)?;
    out.lease_expires_at = take_nullable_string(&mut obj, "lease_expires_at", &mut omitted)?;
    out.created_at = take_string(&mut obj, "created_at")?.unwrap_or_default();
    match obj.remove("attempts") {
        None => omitted.push("attempts"),
        Some(Value::Array(items)) => {
            for (i, item) in items.into_iter().enumerate() {
                out.attempts
                    .push(attempt_from_json(item, &format!("attempts[{i}]"))?);
            }
        }
        Some(_) => return Err(malformed("attempts", "is not an array")),
    }
    match obj.remove("dead_reason") {
        None => omitted.push("dead_reason"),
        Some(Value::Null) => {}
        Some(v) => out.dead_reason = Some(dead_reason_from_json(v, "dead_reason")?),
    }
    match obj.remove("cancel_requested") {
        None => omitted.push("cancel_requested"),
        Some(Value::Null) => {}
        Some(v) => {
            out.cancel_requested = Some(cancel_request_from_json(v, "cancel_requested")?);
        }
    }
    out.omitted = in_order(ENVELOPE_OPTIONAL, &omitted);
    out.unknown_json = unknown_text(obj);
    Ok(out)
}

fn attempt_from_json(value: Value, path: &str) -> Result<pb::AttemptRecord, EnvelopeError> {
    let Value::Object(mut obj) = value else {
        return Err(malformed(path, "is not an object"));
    };
    let mut omitted = Vec::new();
    let mut out = pb::AttemptRecord {
        attempt_no: take_u32(&mut obj, "attempt_no")?.unwrap_or(0),
        started_at: take_string(&mut obj, "started_at")?.unwrap_or_default(),
        ..Default::default()
    };
    out.finished_at = take_nullable_string(&mut obj, "finished_at", &mut omitted)?;
    match take_nullable_string(&mut obj, "outcome", &mut omitted)? {
        None => {}
        Some(text) => {
            out.outcome = pb::Outcome::from_str_name(&text)
                .filter(|o| *o != pb::Outcome::Unspecified)
                .ok_or_else(|| {
                    invalid(
                        &format!("{path}.outcome"),
                        format!("unknown outcome {text:?}"),
                    )
                })?
                .into();
        }
    }
    match obj.remove("error") {
        None => omitted.push("error"),
        Some(Value::Null) => {}
        Some(v) => out.error = Some(error_from_json(v, &format!("{path}.error"))?),
    }
    out.omitted = in_order(ATTEMPT_OPTIONAL, &omitted);
    out.unknown_json = unknown_text(obj);
    Ok(out)
}

fn error_from_json(value: Value, path: &str) -> Result<pb::ErrorInfo, EnvelopeError> {
    let Value::Object(mut obj) = value else {
        return Err(malformed(path, "is not an object"));
    };
    let mut omitted = Vec::new();
    let mut out = pb::ErrorInfo {
        r#type: take_string(&mut obj, "type")?.unwrap_or_default(),
        message: take_string(&mut obj, "message")?.unwrap_or_default(),
        ..Default::default()
    };
    match obj.remove("detail") {
        None => omitted.push("detail"),
        Some(Value::Null) => {}
        Some(v) => out.detail_json = Some(v.to_string()),
    }
    out.stack = take_nullable_string(&mut obj, "stack", &mut omitted)?;
    out.omitted = in_order(ERROR_OPTIONAL, &omitted);
    out.unknown_json = unknown_text(obj);
    Ok(out)
}

fn dead_reason_from_json(value: Value, path: &str) -> Result<pb::DeadReason, EnvelopeError> {
    let Value::Object(mut obj) = value else {
        return Err(malformed(path, "is not an object"));
    };
    let mut omitted = Vec::new();
    let mut out = pb::DeadReason {
        code: take_string(&mut obj, "code")?.unwrap_or_default(),
        at: take_string(&mut obj, "at")?.unwrap_or_default(),
        by: take_string(&mut obj, "by")?.unwrap_or_default(),
        ..Default::default()
    };
    out.message = take_nullable_string(&mut obj, "message", &mut omitted)?;
    out.omitted = in_order(DEAD_REASON_OPTIONAL, &omitted);
    out.unknown_json = unknown_text(obj);
    Ok(out)
}

fn cancel_request_from_json(value: Value, path: &str) -> Result<pb::CancelRequest, EnvelopeError> {
    let Value::Object(mut obj) = value else {
        return Err(malformed(path, "is not an object"));
    };
    let mut omitted = Vec::new();
    let mut out = pb::CancelRequest {
        at: take_string(&mut obj, "at")?.unwrap_or_default(),
        by: take_string(&mut obj, "by")?.unwrap_or_default(),
        ..Default::default()
    };
    out.message = take_nullable_string(&mut obj, "message", &mut omitted)?;
    out.omitted = in_order(CANCEL_REQUEST_OPTIONAL, &omitted);
    out.unknown_json = unknown_text(obj);
    Ok(out)
}

fn in_order(all: &[&str], omitted: &[&'static str]) -> Vec<String> {
    all.iter()
        .filter(|name| omitted.contains(name))
        .map(|name| (*name).to_owned())
        .collect()
}

fn unknown_text(obj: Map<String, Value>) -> String {
    if obj.is_empty() {
        String::new()
    } else {
        Value::Object(obj).to_string()
    }
}

fn take_string(obj: &mut Map<String, Value>, key: &str) -> Result<Option<String>, EnvelopeError> {
    match obj.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(malformed(key, "is not a string")),
    }
}

fn take_nullable_string(
    obj: &mut Map<String, Value>,
    key: &'static str,
    omitted: &mut Vec<&'static str>,
) -> Result<Option<String>, EnvelopeError> {
    if !obj.contains_key(key) {
        omitted.push(key);
        return Ok(None);
    }
    take_string(obj, key)
}

fn take_u32(obj: &mut Map<String, Value>, key: &str) -> Result<Option<u32>, EnvelopeError> {
    match obj.remove(key) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| invalid(key, "is not a u32")),
        Some(_) => Err(malformed(key, "is not an integer")),
    }
}

// ---------------------------------------------------------------------------
// Proto → JSON.

/// The envelope a message stands for, checked by the JSON codec.
pub fn from_proto(msg: &pb::Envelope) -> Result<Envelope, EnvelopeError> {
    Envelope::from_json_value(Value::Object(json_object(msg)?))
}

/// The canonical JSON of the envelope a message stands for.
pub fn to_json(msg: &pb::Envelope) -> Result<Vec<u8>, EnvelopeError> {
    Ok(from_proto(msg)?.encode())
}

fn check_omitted(
    omitted: &[String],
    allowed: &[&'static str],
    path: &str,
) -> Result<Vec<&'static str>, EnvelopeError> {
    let mut out = Vec::with_capacity(omitted.len());
    for name in omitted {
        let Some(known) = allowed.iter().copied().find(|a| *a == name.as_str()) else {
            return Err(invalid(
                path,
                format!("{name:?} is not a member a writer may leave out"),
            ));
        };
        if out.contains(&known) {
            return Err(invalid(path, format!("names {name:?} twice")));
        }
        out.push(known);
    }
    Ok(out)
}

fn put(
    obj: &mut Map<String, Value>,
    omitted: &[&str],
    key: &str,
    value: Value,
    is_default: bool,
    path: &str,
) -> Result<(), EnvelopeError> {
    if omitted.contains(&key) {
        if !is_default {
            return Err(invalid(path, format!("names {key:?}, which has a value")));
        }
        return Ok(());
    }
    obj.insert(key.to_owned(), value);
    Ok(())
}

fn opt_string(v: &Option<String>) -> Value {
    v.as_ref().map_or(Value::Null, |s| Value::String(s.clone()))
}

fn unknown_members(
    text: &str,
    known: &[&str],
    path: &str,
    obj: &mut Map<String, Value>,
) -> Result<(), EnvelopeError> {
    if text.is_empty() {
        return Ok(());
    }
    let parsed = parse_strict(text.as_bytes()).map_err(|e| malformed(path, e.message()))?;
    let Value::Object(members) = parsed else {
        return Err(malformed(path, "is not a JSON object"));
    };
    for (k, v) in members {
        if known.contains(&k.as_str()) {
            return Err(malformed(
                path,
                format!("names {k:?}, a member the message carries as a field"),
            ));
        }
        obj.insert(k, v);
    }
    Ok(())
}

fn json_object(msg: &pb::Envelope) -> Result<Map<String, Value>, EnvelopeError> {
    let omitted = check_omitted(&msg.omitted, ENVELOPE_OPTIONAL, "omitted")?;
    let mut obj = Map::new();
    obj.insert("envelope_version".into(), msg.envelope_version.into());
    obj.insert("id".into(), msg.id.clone().into());
    obj.insert("queue".into(), msg.queue.clone().into());
    obj.insert("handler_ref".into(), msg.handler_ref.clone().into());
    let o = &omitted;
    put(
        &mut obj,
        o,
        "handler_version",
        opt_string(&msg.handler_version),
        msg.handler_version.is_none(),
        "omitted",
    )?;
    obj.insert(
        "payload".into(),
        base64::engine::general_purpose::STANDARD
            .encode(&msg.payload)
            .into(),
    );
    obj.insert(
        "payload_content_type".into(),
        msg.payload_content_type.clone().into(),
    );
    put(
        &mut obj,
        o,
        "payload_ref",
        opt_string(&msg.payload_ref),
        msg.payload_ref.is_none(),
        "omitted",
    )?;
    let headers: Map<String, Value> = msg
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    put(
        &mut obj,
        o,
        "headers",
        Value::Object(headers),
        msg.headers.is_empty(),
        "omitted",
    )?;
    let status = match pb::Status::try_from(msg.status) {
        Ok(s) if s != pb::Status::Unspecified => s.as_str_name().to_owned(),
        _ => format!("STATUS_{}", msg.status),
    };
    obj.insert("status".into(), status.into());
    for (key, n) in [
        ("priority", msg.priority),
        ("deferral_count", msg.deferral_count),
        ("attempt_count", msg.attempt_count),
        ("redrive_count", msg.redrive_count),
        ("claim_count", msg.claim_count),
    ] {
        put(&mut obj, o, key, n.into(), n == 0, "omitted")?;
    }
    put(
        &mut obj,
        o,
        "next_attempt_at",
        opt_string(&msg.next_attempt_at),
        msg.next_attempt_at.is_none(),
        "omitted",
    )?;
    put(
        &mut obj,
        o,
        "lease_expires_at",
        opt_string(&msg.lease_expires_at),
        msg.lease_expires_at.is_none(),
        "omitted",
    )?;
    obj.insert("created_at".into(), msg.created_at.clone().into());
    let mut attempts = Vec::with_capacity(msg.attempts.len());
    for (i, a) in msg.attempts.iter().enumerate() {
        attempts.push(Value::Object(attempt_object(a, &format!("attempts[{i}]"))?));
    }
    put(
        &mut obj,
        o,
        "attempts",
        Value::Array(attempts),
        msg.attempts.is_empty(),
        "omitted",
    )?;
    let dead_reason = match &msg.dead_reason {
        Some(r) => Value::Object(dead_reason_object(r, "dead_reason")?),
        None => Value::Null,
    };
    put(
        &mut obj,
        o,
        "dead_reason",
        dead_reason,
        msg.dead_reason.is_none(),
        "omitted",
    )?;
    let cancel_requested = match &msg.cancel_requested {
        Some(r) => Value::Object(cancel_request_object(r, "cancel_requested")?),
        None => Value::Null,
    };
    put(
        &mut obj,
        o,
        "cancel_requested",
        cancel_requested,
        msg.cancel_requested.is_none(),
        "omitted",
    )?;
    unknown_members(&msg.unknown_json, ENVELOPE_KNOWN, "unknown_json", &mut obj)?;
    Ok(obj)
}

fn attempt_object(a: &pb::AttemptRecord, path: &str) -> Result<Map<String, Value>, EnvelopeError> {
    let omitted_path = format!("{path}.omitted");
    let omitted = check_omitted(&a.omitted, ATTEMPT_OPTIONAL, &omitted_path)?;
    let o = &omitted;
    let mut obj = Map::new();
    obj.insert("attempt_no".into(), a.attempt_no.into());
    obj.insert("started_at".into(), a.started_at.clone().into());
    put(
        &mut obj,
        o,
        "finished_at",
        opt_string(&a.finished_at),
        a.finished_at.is_none(),
        &omitted_path,
    )?;
    let outcome = match pb::Outcome::try_from(a.outcome) {
        Ok(pb::Outcome::Unspecified) => Value::Null,
        Ok(o) => o.as_str_name().into(),
        Err(_) => format!("OUTCOME_{}", a.outcome).into(),
    };
    let no_outcome = outcome.is_null();
    put(&mut obj, o, "outcome", outcome, no_outcome, &omitted_path)?;
    let error = match &a.error {
        Some(e) => Value::Object(error_object(e, &format!("{path}.error"))?),
        None => Value::Null,
    };
    put(
        &mut obj,
        o,
        "error",
        error,
        a.error.is_none(),
        &omitted_path,
    )?;
    unknown_members(
        &a.unknown_json,
        ATTEMPT_KNOWN,
        &format!("{path}.unknown_json"),
        &mut obj,
    )?;
    Ok(obj)
}

fn error_object(e: &pb::ErrorInfo, path: &str) -> Result<Map<String, Value>, EnvelopeError> {
    let omitted_path = format!("{path}.omitted");
    let omitted = check_omitted(&e.omitted, ERROR_OPTIONAL, &omitted_path)?;
    let o = &omitted;
    let mut obj = Map::new();
    obj.insert("type".into(), e.r#type.clone().into());
    obj.insert("message".into(), e.message.clone().into());
    let detail = match &e.detail_json {
        Some(text) => parse_strict(text.as_bytes())
            .map_err(|err| malformed(&format!("{path}.detail_json"), err.message()))?,
        None => Value::Null,
    };
    put(
        &mut obj,
        o,
        "detail",
        detail,
        e.detail_json.is_none(),
        &omitted_path,
    )?;
    put(
        &mut obj,
        o,
        "stack",
        opt_string(&e.stack),
        e.stack.is_none(),
        &omitted_path,
    )?;
    unknown_members(
        &e.unknown_json,
        ERROR_KNOWN,
        &format!("{path}.unknown_json"),
        &mut obj,
    )?;
    Ok(obj)
}

fn dead_reason_object(r: &pb::DeadReason, path: &str) -> Result<Map<String, Value>, EnvelopeError> {
    let omitted_path = format!("{path}.omitted");
    let omitted = check_omitted(&r.omitted, DEAD_REASON_OPTIONAL, &omitted_path)?;
    let mut obj = Map::new();
    obj.insert("code".into(), r.code.clone().into());
    obj.insert("at".into(), r.at.clone().into());
    obj.insert("by".into(), r.by.clone().into());
    put(
        &mut obj,
        &omitted,
        "message",
        opt_string(&r.message),
        r.message.is_none(),
        &omitted_path,
    )?;
    unknown_members(
        &r.unknown_json,
        DEAD_REASON_KNOWN,
        &format!("{path}.unknown_json"),
        &mut obj,
    )?;
    Ok(obj)
}

fn cancel_request_object(
    r: &pb::CancelRequest,
    path: &str,
) -> Result<Map<String, Value>, EnvelopeError> {
    let omitted_path = format!("{path}.omitted");
    let omitted = check_omitted(&r.omitted, CANCEL_REQUEST_OPTIONAL, &omitted_path)?;
    let mut obj = Map::new();
    obj.insert("at".into(), r.at.clone().into());
    obj.insert("by".into(), r.by.clone().into());
    put(
        &mut obj,
        &omitted,
        "message",
        opt_string(&r.message),
        r.message.is_none(),
        &omitted_path,
    )?;
    unknown_members(
        &r.unknown_json,
        CANCEL_REQUEST_KNOWN,
        &format!("{path}.unknown_json"),
        &mut obj,
    )?;
    Ok(obj)
}
