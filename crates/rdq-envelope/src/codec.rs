//! The canonical JSON codec.
//!
//! Decoding is strict (duplicate keys, wrong types and out-of-range values are
//! refused with a stable code and the field's path) and keeps every field it
//! does not know. Encoding is deterministic: known fields in the canonical order,
//! then unknown fields sorted by key, compact, no trailing newline. So
//! `encode(decode(b)) == b` for every canonical `b`.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::error::{EnvelopeError, ErrorCode};
use crate::id::TaskId;
use crate::model::{
    Absent, AttemptRecord, CancelRequest, DeadReason, ENVELOPE_VERSION, Envelope, ErrorInfo,
    Outcome, Status, absent,
};
use crate::names::{validate_handler_ref, validate_queue_name};
use crate::time::Timestamp;

/// The members of an envelope the v1 model knows, in canonical order; any
/// other member is unknown and kept verbatim (`docs/envelope.md`).
pub const ENVELOPE_KEYS: &[&str] = &[
    "envelope_version",
    "id",
    "queue",
    "handler_ref",
    "handler_version",
    "payload",
    "payload_content_type",
    "payload_ref",
    "headers",
    "status",
    "priority",
    "deferral_count",
    "attempt_count",
    "redrive_count",
    "claim_count",
    "next_attempt_at",
    "lease_expires_at",
    "created_at",
    "attempts",
    "dead_reason",
    "cancel_requested",
];
/// The members of an attempt record the v1 model knows, in canonical order.
pub const ATTEMPT_KEYS: &[&str] = &[
    "attempt_no",
    "started_at",
    "finished_at",
    "outcome",
    "error",
];
/// The members of an error object the v1 model knows, in canonical order.
pub const ERROR_KEYS: &[&str] = &["type", "message", "detail", "stack"];
/// The members of a dead reason the v1 model knows, in canonical order.
pub const DEAD_REASON_KEYS: &[&str] = &["code", "at", "by", "message"];
/// The members of a cancel request the v1 model knows, in canonical order.
pub const CANCEL_REQUEST_KEYS: &[&str] = &["at", "by", "message"];

/// Default limit on a serialised envelope: 1 MiB.
pub const DEFAULT_MAX_ENVELOPE_BYTES: usize = 1024 * 1024;

impl Envelope {
    /// Decodes and validates one envelope from JSON bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        decode_envelope(parse_strict(bytes)?)
    }

    /// Decodes an already-parsed JSON value (e.g. one line of a larger document).
    pub fn from_json_value(value: Value) -> Result<Self, EnvelopeError> {
        decode_envelope(value)
    }

    /// Decodes, validates and refuses envelopes whose canonical form exceeds `max_bytes`.
    pub fn decode_with_limit(bytes: &[u8], max_bytes: usize) -> Result<Self, EnvelopeError> {
        let env = Self::decode(bytes)?;
        env.check_size(max_bytes)?;
        Ok(env)
    }

    /// Refuses with `PAYLOAD_TOO_LARGE` if the canonical encoding exceeds `max_bytes`.
    pub fn check_size(&self, max_bytes: usize) -> Result<(), EnvelopeError> {
        let len = self.encoded_len();
        if len > max_bytes {
            return Err(EnvelopeError::new(
                ErrorCode::PayloadTooLarge,
                format!("the serialised envelope is {len} bytes; the limit is {max_bytes}"),
            ));
        }
        Ok(())
    }

    /// The canonical encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.payload.len() + 512);
        self.encode_into(&mut out);
        out
    }

    /// The canonical encoding as a string.
    pub fn encode_string(&self) -> String {
        // The encoder writes only valid UTF-8.
        String::from_utf8(self.encode()).unwrap_or_default()
    }

    /// Length in bytes of the canonical encoding.
    pub fn encoded_len(&self) -> usize {
        self.encode().len()
    }

    /// Appends the canonical encoding to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let a = self.absent;
        let mut w = ObjectWriter::start(out);
        w.field("envelope_version", &self.envelope_version);
        w.field_display("id", &self.id);
        w.field("queue", &self.queue);
        w.field("handler_ref", &self.handler_ref);
        if !(a.has(absent::HANDLER_VERSION) && self.handler_version.is_none()) {
            w.field("handler_version", &self.handler_version);
        }
        w.field("payload", &self.payload);
        w.field("payload_content_type", &self.payload_content_type);
        if !(a.has(absent::PAYLOAD_REF) && self.payload_ref.is_none()) {
            w.field("payload_ref", &self.payload_ref);
        }
        if !(a.has(absent::HEADERS) && self.headers.is_empty()) {
            w.field("headers", &self.headers);
        }
        w.field("status", self.status.as_str());
        if !(a.has(absent::PRIORITY) && self.priority == 0) {
            w.field("priority", &self.priority);
        }
        if !(a.has(absent::DEFERRAL_COUNT) && self.deferral_count == 0) {
            w.field("deferral_count", &self.deferral_count);
        }
        if !(a.has(absent::ATTEMPT_COUNT) && self.attempt_count == 0) {
            w.field("attempt_count", &self.attempt_count);
        }
        if !(a.has(absent::REDRIVE_COUNT) && self.redrive_count == 0) {
            w.field("redrive_count", &self.redrive_count);
        }
        if !(a.has(absent::CLAIM_COUNT) && self.claim_count == 0) {
            w.field("claim_count", &self.claim_count);
        }
        if !(a.has(absent::NEXT_ATTEMPT_AT) && self.next_attempt_at.is_none()) {
            w.field_opt_display("next_attempt_at", self.next_attempt_at.as_ref());
        }
        if !(a.has(absent::LEASE_EXPIRES_AT) && self.lease_expires_at.is_none()) {
            w.field_opt_display("lease_expires_at", self.lease_expires_at.as_ref());
        }
        w.field_display("created_at", &self.created_at);
        if !(a.has(absent::ATTEMPTS) && self.attempts.is_empty()) {
            w.key("attempts");
            w.out.push(b'[');
            for (i, attempt) in self.attempts.iter().enumerate() {
                if i > 0 {
                    w.out.push(b',');
                }
                encode_attempt(attempt, w.out);
            }
            w.out.push(b']');
        }
        match &self.dead_reason {
            Some(reason) => {
                w.key("dead_reason");
                encode_dead_reason(reason, w.out);
            }
            None if a.has(absent::DEAD_REASON_NULL) => w.field("dead_reason", &()),
            None => {}
        }
        match &self.cancel_requested {
            Some(request) => {
                w.key("cancel_requested");
                encode_cancel_request(request, w.out);
            }
            None if a.has(absent::CANCEL_REQUESTED_NULL) => w.field("cancel_requested", &()),
            None => {}
        }
        w.extra(&self.extra, ENVELOPE_KEYS);
        w.finish();
    }
}

fn encode_attempt(r: &AttemptRecord, out: &mut Vec<u8>) {
    let a = r.absent;
    let mut w = ObjectWriter::start(out);
    w.field("attempt_no", &r.attempt_no);
    w.field_display("started_at", &r.started_at);
    if !(a.has(absent::FINISHED_AT) && r.finished_at.is_none()) {
        w.field_opt_display("finished_at", r.finished_at.as_ref());
    }
    if !(a.has(absent::OUTCOME) && r.outcome.is_none()) {
        w.field("outcome", &r.outcome.map(Outcome::as_str));
    }
    if !(a.has(absent::ERROR) && r.error.is_none()) {
        match &r.error {
            Some(e) => {
                w.key("error");
                encode_error(e, w.out);
            }
            None => w.field("error", &()),
        }
    }
    w.extra(&r.extra, ATTEMPT_KEYS);
    w.finish();
}

fn encode_error(e: &ErrorInfo, out: &mut Vec<u8>) {
    let a = e.absent;
    let mut w = ObjectWriter::start(out);
    w.field("type", &e.error_type);
    w.field("message", &e.message);
    if !(a.has(absent::DETAIL) && e.detail.is_none()) {
        w.field("detail", &e.detail);
    }
    if !(a.has(absent::STACK) && e.stack.is_none()) {
        w.field("stack", &e.stack);
    }
    w.extra(&e.extra, ERROR_KEYS);
    w.finish();
}

fn encode_dead_reason(r: &DeadReason, out: &mut Vec<u8>) {
    let mut w = ObjectWriter::start(out);
    w.field("code", &r.code);
    w.field_display("at", &r.at);
    w.field("by", &r.by);
    if !(r.absent.has(absent::MESSAGE) && r.message.is_none()) {
        w.field("message", &r.message);
    }
    w.extra(&r.extra, DEAD_REASON_KEYS);
    w.finish();
}

fn encode_cancel_request(r: &CancelRequest, out: &mut Vec<u8>) {
    let mut w = ObjectWriter::start(out);
    w.field_display("at", &r.at);
    w.field("by", &r.by);
    if !(r.absent.has(absent::MESSAGE) && r.message.is_none()) {
        w.field("message", &r.message);
    }
    w.extra(&r.extra, CANCEL_REQUEST_KEYS);
    w.finish();
}

/// Writes one compact JSON object field by field.
struct ObjectWriter<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> ObjectWriter<'a> {
    fn start(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, first: true }
    }

    fn key(&mut self, key: &str) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        write_json(self.out, key);
        self.out.push(b':');
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) {
        self.key(key);
        write_json(self.out, value);
    }

    fn field_display(&mut self, key: &str, value: &dyn fmt::Display) {
        self.key(key);
        self.out.push(b'"');
        // Ids and timestamps are plain ASCII; writing into a Vec cannot fail.
        let _ = std::io::Write::write_fmt(self.out, format_args!("{value}"));
        self.out.push(b'"');
    }

    fn field_opt_display<T: fmt::Display>(&mut self, key: &str, value: Option<&T>) {
        match value {
            Some(v) => self.field_display(key, v),
            None => self.field(key, &()),
        }
    }

    /// Writes unknown fields, skipping any that shadow a known one (only
    /// possible when a caller filled `extra` by hand), so the output always
    /// decodes.
    fn extra(&mut self, extra: &Map<String, Value>, known: &[&str]) {
        for (k, v) in extra {
            if !known.contains(&k.as_str()) {
                self.field(k, v);
            }
        }
    }

    fn finish(self) {
        self.out.push(b'}');
    }
}

fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Writing strings, integers and parsed JSON values into a Vec cannot fail.
    let _ = serde_json::to_writer(out, value);
}

// ---------------------------------------------------------------------------
// Strict parsing: serde_json's own Value parser silently keeps the last of two
// duplicate keys; the envelope refuses them.

/// Parses JSON bytes, refusing duplicate keys at any depth.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, EnvelopeError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = StrictValue
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| EnvelopeError::new(ErrorCode::MalformedEnvelope, e.to_string()))?;
    Ok(value)
}

struct StrictValue;

/// The key under which serde_json (with exact numbers, its
/// `arbitrary_precision` mode) passes a number's text to a visitor.
const EXACT_NUMBER_TOKEN: &str = "$serde_json::private::Number";

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number is not finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(StrictValue)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.is_empty() && key == EXACT_NUMBER_TOKEN {
                // A number that fits no machine type (a big integer, a
                // decimal): serde_json hands over its text, kept digit for
                // digit.
                let text: String = map.next_value()?;
                return text
                    .parse::<Number>()
                    .map(Value::Number)
                    .map_err(|e| de::Error::custom(format!("bad number {text:?}: {e}")));
            }
            let value = map.next_value_seed(StrictValue)?;
            match out.entry(key) {
                serde_json::map::Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                serde_json::map::Entry::Occupied(slot) => {
                    return Err(de::Error::custom(format!("duplicate key {:?}", slot.key())));
                }
            }
        }
        Ok(Value::Object(out))
    }
}

// ---------------------------------------------------------------------------
// From a parsed value to the typed model, field by field, with paths.

fn malformed(path: &str, message: impl Into<String>) -> EnvelopeError {
    if path.is_empty() {
        EnvelopeError::new(ErrorCode::MalformedEnvelope, message)
    } else {
        EnvelopeError::at(ErrorCode::MalformedEnvelope, path, message)
    }
}

fn invalid(path: &str, message: impl Into<String>) -> EnvelopeError {
    EnvelopeError::at(ErrorCode::InvalidField, path, message)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// One JSON object being taken apart; what is left at the end is `extra`.
struct Fields<'p> {
    map: Map<String, Value>,
    prefix: &'p str,
}

impl<'p> Fields<'p> {
    fn new(value: Value, prefix: &'p str) -> Result<Self, EnvelopeError> {
        match value {
            Value::Object(map) => Ok(Self { map, prefix }),
            other => Err(malformed(
                prefix,
                format!("expected an object, found {}", type_name(&other)),
            )),
        }
    }

    fn path(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    /// Takes a field; `Ok(None)` when absent, `Ok(Some(Value::Null))` when null.
    fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key)
    }

    fn required(&mut self, key: &str) -> Result<Value, EnvelopeError> {
        match self.take(key) {
            Some(Value::Null) | None => Err(malformed(
                &self.path(key),
                "required field is missing or null",
            )),
            Some(v) => Ok(v),
        }
    }

    fn string(&mut self, key: &str) -> Result<String, EnvelopeError> {
        let v = self.required(key)?;
        self.as_string(key, v)
    }

    fn as_string(&self, key: &str, v: Value) -> Result<String, EnvelopeError> {
        match v {
            Value::String(s) => Ok(s),
            other => Err(malformed(
                &self.path(key),
                format!("expected a string, found {}", type_name(&other)),
            )),
        }
    }

    /// A nullable string: `(value, absent)`.
    fn opt_string(&mut self, key: &str) -> Result<(Option<String>, bool), EnvelopeError> {
        match self.take(key) {
            None => Ok((None, true)),
            Some(Value::Null) => Ok((None, false)),
            Some(v) => Ok((Some(self.as_string(key, v)?), false)),
        }
    }

    fn as_uint(&self, key: &str, v: Value, max: u64) -> Result<u64, EnvelopeError> {
        // The path is built only for an error: this runs for every count of
        // every envelope decoded.
        let Value::Number(n) = v else {
            return Err(malformed(
                &self.path(key),
                format!("expected an integer, found {}", type_name(&v)),
            ));
        };
        if let Some(u) = n.as_u64() {
            return if u <= max {
                Ok(u)
            } else {
                Err(invalid(
                    &self.path(key),
                    format!("{u} is larger than {max}"),
                ))
            };
        }
        if n.as_i64().is_some() {
            return Err(invalid(&self.path(key), format!("{n} is negative")));
        }
        Err(malformed(
            &self.path(key),
            format!("expected an integer, found {n}"),
        ))
    }

    /// An optional unsigned integer defaulting to 0: `(value, absent)`.
    fn uint_or_zero(&mut self, key: &str, max: u64) -> Result<(u64, bool), EnvelopeError> {
        match self.take(key) {
            None => Ok((0, true)),
            Some(v) => Ok((self.as_uint(key, v, max)?, false)),
        }
    }

    fn as_timestamp(&self, key: &str, v: Value) -> Result<Timestamp, EnvelopeError> {
        let s = self.as_string(key, v)?;
        Timestamp::parse(&s).ok_or_else(|| {
            invalid(
                &self.path(key),
                format!(
                    "{s:?} is not an RFC 3339 UTC timestamp of the form 2026-07-20T14:03:22.117Z"
                ),
            )
        })
    }

    fn timestamp(&mut self, key: &str) -> Result<Timestamp, EnvelopeError> {
        let v = self.required(key)?;
        self.as_timestamp(key, v)
    }

    fn opt_timestamp(&mut self, key: &str) -> Result<(Option<Timestamp>, bool), EnvelopeError> {
        match self.take(key) {
            None => Ok((None, true)),
            Some(Value::Null) => Ok((None, false)),
            Some(v) => Ok((Some(self.as_timestamp(key, v)?), false)),
        }
    }

    fn into_extra(self) -> Map<String, Value> {
        self.map
    }
}

fn absent_bit(is_absent: bool, bit: u16) -> u16 {
    if is_absent { bit } else { 0 }
}

fn decode_envelope(value: Value) -> Result<Envelope, EnvelopeError> {
    let mut f = Fields::new(value, "")?;

    // The version decides how to read everything else, so it is checked first.
    let version = f.required("envelope_version")?;
    let version = match &version {
        Value::Number(n) if n.as_u64().is_some_and(|v| v > u64::from(ENVELOPE_VERSION)) => {
            return Err(EnvelopeError::at(
                ErrorCode::UnsupportedEnvelopeVersion,
                "envelope_version",
                format!("version {n} is newer than this engine's version {ENVELOPE_VERSION}"),
            ));
        }
        _ => f.as_uint("envelope_version", version, u64::from(ENVELOPE_VERSION))?,
    };
    if version == 0 {
        return Err(invalid(
            "envelope_version",
            "version 0 does not exist; the first is 1",
        ));
    }

    let id_text = f.string("id")?;
    let id = TaskId::parse(&id_text).ok_or_else(|| {
        invalid(
            "id",
            format!("{id_text:?} is not a ULID (26 upper-case Crockford base32 characters)"),
        )
    })?;
    let queue = f.string("queue")?;
    validate_queue_name(&queue)?;
    let handler_ref = f.string("handler_ref")?;
    validate_handler_ref(&handler_ref)?;
    let (handler_version, hv_absent) = f.opt_string("handler_version")?;
    let payload = f.string("payload")?;
    if !is_canonical_base64(payload.as_bytes()) {
        return Err(invalid(
            "payload",
            "not canonical standard base64 with padding",
        ));
    }
    let payload_content_type = f.string("payload_content_type")?;
    let (payload_ref, pr_absent) = f.opt_string("payload_ref")?;
    let (headers, headers_absent) = match f.take("headers") {
        None => (BTreeMap::new(), true),
        Some(Value::Object(map)) => {
            let mut headers = BTreeMap::new();
            for (k, v) in map {
                match v {
                    Value::String(s) => {
                        headers.insert(k, s);
                    }
                    other => {
                        return Err(invalid(
                            &format!("headers.{k}"),
                            format!("header values must be strings, found {}", type_name(&other)),
                        ));
                    }
                }
            }
            (headers, false)
        }
        Some(other) => {
            return Err(malformed(
                "headers",
                format!("expected an object of strings, found {}", type_name(&other)),
            ));
        }
    };
    let status_text = f.string("status")?;
    let status = Status::parse(&status_text).ok_or_else(|| {
        invalid(
            "status",
            format!(
                "unknown status {status_text:?}; expected PENDING, IN_FLIGHT, SUCCEEDED or DEAD"
            ),
        )
    })?;
    let (priority, prio_absent) = f.uint_or_zero("priority", u64::from(u8::MAX))?;
    let (deferral_count, dc_absent) = f.uint_or_zero("deferral_count", u64::from(u32::MAX))?;
    let (attempt_count, ac_absent) = f.uint_or_zero("attempt_count", u64::from(u32::MAX))?;
    let (redrive_count, rc_absent) = f.uint_or_zero("redrive_count", u64::from(u32::MAX))?;
    let (claim_count, cc_absent) = f.uint_or_zero("claim_count", u64::from(u32::MAX))?;
    let (next_attempt_at, na_absent) = f.opt_timestamp("next_attempt_at")?;
    let (lease_expires_at, le_absent) = f.opt_timestamp("lease_expires_at")?;
    let created_at = f.timestamp("created_at")?;
    let (attempts, attempts_absent) = match f.take("attempts") {
        None => (Vec::new(), true),
        Some(Value::Array(items)) => {
            let mut attempts = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                attempts.push(decode_attempt(item, &format!("attempts[{i}]"))?);
            }
            (attempts, false)
        }
        Some(other) => {
            return Err(malformed(
                "attempts",
                format!("expected an array, found {}", type_name(&other)),
            ));
        }
    };
    let (dead_reason, dr_null) = match f.take("dead_reason") {
        None => (None, false),
        Some(Value::Null) => (None, true),
        Some(v) => (Some(decode_dead_reason(v, "dead_reason")?), false),
    };
    let (cancel_requested, cr_null) = match f.take("cancel_requested") {
        None => (None, false),
        Some(Value::Null) => (None, true),
        Some(v) => (Some(decode_cancel_request(v, "cancel_requested")?), false),
    };

    let absent = absent_bit(hv_absent, absent::HANDLER_VERSION)
        | absent_bit(pr_absent, absent::PAYLOAD_REF)
        | absent_bit(headers_absent, absent::HEADERS)
        | absent_bit(prio_absent, absent::PRIORITY)
        | absent_bit(dc_absent, absent::DEFERRAL_COUNT)
        | absent_bit(ac_absent, absent::ATTEMPT_COUNT)
        | absent_bit(rc_absent, absent::REDRIVE_COUNT)
        | absent_bit(cc_absent, absent::CLAIM_COUNT)
        | absent_bit(na_absent, absent::NEXT_ATTEMPT_AT)
        | absent_bit(le_absent, absent::LEASE_EXPIRES_AT)
        | absent_bit(attempts_absent, absent::ATTEMPTS)
        | absent_bit(dr_null, absent::DEAD_REASON_NULL)
        | absent_bit(cr_null, absent::CANCEL_REQUESTED_NULL);

    // Narrowing casts below are bounded by the `max` passed to `uint_or_zero`.
    Ok(Envelope {
        envelope_version: ENVELOPE_VERSION,
        id,
        queue,
        handler_ref,
        handler_version,
        payload,
        payload_content_type,
        payload_ref,
        headers,
        status,
        priority: priority as u8,
        deferral_count: deferral_count as u32,
        attempt_count: attempt_count as u32,
        redrive_count: redrive_count as u32,
        claim_count: claim_count as u32,
        next_attempt_at,
        lease_expires_at,
        created_at,
        attempts,
        dead_reason,
        cancel_requested,
        extra: f.into_extra(),
        absent: Absent(absent),
    })
}

fn decode_dead_reason(value: Value, prefix: &str) -> Result<DeadReason, EnvelopeError> {
    let mut f = Fields::new(value, prefix)?;
    let code = f.string("code")?;
    if !DeadReason::is_valid_code(&code) {
        return Err(invalid(
            &f.path("code"),
            format!("{code:?} is not a reason code ([A-Z][A-Z0-9_], at most 64 bytes)"),
        ));
    }
    let at = f.timestamp("at")?;
    let by = f.string("by")?;
    if by.is_empty() {
        return Err(invalid(&f.path("by"), "who decided must not be empty"));
    }
    let (message, message_absent) = f.opt_string("message")?;
    Ok(DeadReason {
        code,
        at,
        by,
        message,
        extra: f.into_extra(),
        absent: Absent(absent_bit(message_absent, absent::MESSAGE)),
    })
}

fn decode_cancel_request(value: Value, prefix: &str) -> Result<CancelRequest, EnvelopeError> {
    let mut f = Fields::new(value, prefix)?;
    let at = f.timestamp("at")?;
    let by = f.string("by")?;
    if by.is_empty() {
        return Err(invalid(&f.path("by"), "who asked must not be empty"));
    }
    let (message, message_absent) = f.opt_string("message")?;
    Ok(CancelRequest {
        at,
        by,
        message,
        extra: f.into_extra(),
        absent: Absent(absent_bit(message_absent, absent::MESSAGE)),
    })
}

fn decode_attempt(value: Value, prefix: &str) -> Result<AttemptRecord, EnvelopeError> {
    let mut f = Fields::new(value, prefix)?;
    let attempt_no = f.required("attempt_no")?;
    let attempt_no = f.as_uint("attempt_no", attempt_no, u64::from(u32::MAX))?;
    if attempt_no == 0 {
        return Err(invalid(&f.path("attempt_no"), "attempt numbers start at 1"));
    }
    let started_at = f.timestamp("started_at")?;
    let (finished_at, fa_absent) = f.opt_timestamp("finished_at")?;
    let (outcome_text, oc_absent) = f.opt_string("outcome")?;
    let outcome = match outcome_text {
        None => None,
        Some(text) => Some(Outcome::parse(&text).ok_or_else(|| {
            invalid(
                &f.path("outcome"),
                format!("unknown outcome {text:?}; expected SUCCESS, RETRYABLE_FAILURE, PERMANENT_FAILURE or LEASE_EXPIRED"),
            )
        })?),
    };
    let (error, err_absent) = match f.take("error") {
        None => (None, true),
        Some(Value::Null) => (None, false),
        Some(v) => (Some(decode_error(v, &f.path("error"))?), false),
    };
    let absent = absent_bit(fa_absent, absent::FINISHED_AT)
        | absent_bit(oc_absent, absent::OUTCOME)
        | absent_bit(err_absent, absent::ERROR);
    Ok(AttemptRecord {
        attempt_no: attempt_no as u32,
        started_at,
        finished_at,
        outcome,
        error,
        extra: f.into_extra(),
        absent: Absent(absent),
    })
}

fn decode_error(value: Value, prefix: &str) -> Result<ErrorInfo, EnvelopeError> {
    let mut f = Fields::new(value, prefix)?;
    let error_type = f.string("type")?;
    if error_type.is_empty() {
        return Err(invalid(&f.path("type"), "the error type must not be empty"));
    }
    let message = f.string("message")?;
    let (detail, detail_absent) = match f.take("detail") {
        None => (None, true),
        Some(Value::Null) => (None, false),
        Some(v) => (Some(v), false),
    };
    let (stack, stack_absent) = f.opt_string("stack")?;
    Ok(ErrorInfo {
        error_type,
        message,
        detail,
        stack,
        extra: f.into_extra(),
        absent: Absent(
            absent_bit(detail_absent, absent::DETAIL) | absent_bit(stack_absent, absent::STACK),
        ),
    })
}

const BASE64_INVALID: u8 = 0xff;

const BASE64_DECODE: [u8; 256] = {
    let mut table = [BASE64_INVALID; 256];
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut i = 0;
    while i < 64 {
        table[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// True if every byte is in the standard base64 alphabet. Written as
/// branch-free arithmetic over fixed chunks so the compiler vectorises it: a
/// 1 MiB payload must not cost more to check than to parse.
fn all_base64_alphabet(bytes: &[u8]) -> bool {
    let mut chunks = bytes.chunks_exact(64);
    for chunk in &mut chunks {
        let mut bad = 0u8;
        for &c in chunk {
            let letter = (c | 0x20).wrapping_sub(b'a') < 26;
            let digit = c.wrapping_sub(b'0') < 10;
            let symbol = (c == b'+') | (c == b'/');
            bad |= u8::from(!(letter | digit | symbol));
        }
        if bad != 0 {
            return false;
        }
    }
    chunks
        .remainder()
        .iter()
        .all(|&c| BASE64_DECODE[c as usize] != BASE64_INVALID)
}

/// True for standard base64 with padding whose unused trailing bits are zero:
/// exactly the strings an encoder produces, so the payload text is canonical.
pub fn is_canonical_base64(text: &[u8]) -> bool {
    if !text.len().is_multiple_of(4) {
        return false;
    }
    let pad = text
        .iter()
        .rev()
        .take(2)
        .take_while(|&&c| c == b'=')
        .count();
    let body = &text[..text.len() - pad];
    if !all_base64_alphabet(body) {
        return false;
    }
    match (pad, body.last()) {
        (0, _) | (_, None) => true,
        (1, Some(&c)) => BASE64_DECODE[c as usize] & 0b11 == 0,
        (_, Some(&c)) => BASE64_DECODE[c as usize] & 0b1111 == 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    #[test]
    fn canonical_base64_is_exactly_what_an_encoder_writes() {
        let engine = base64::engine::general_purpose::STANDARD;
        for len in 0..40 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert!(is_canonical_base64(engine.encode(&bytes).as_bytes()));
        }
        for bad in [
            "A", "AB", "ABC", "AB=C", "A===", "QR==", "QUJ=", "QUI=x", "QUI", "QU I", "QUI-",
            "====", "QUJD==",
        ] {
            assert!(!is_canonical_base64(bad.as_bytes()), "{bad} accepted");
        }
        assert!(is_canonical_base64(b"QUI="));
        assert!(is_canonical_base64(b"QQ=="));
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        for doc in [
            r#"{"a":1,"a":2}"#,
            r#"{"x":{"b":1,"b":1}}"#,
            r#"[{"c":[{"d":0,"d":0}]}]"#,
        ] {
            let err = parse_strict(doc.as_bytes()).unwrap_err();
            assert_eq!(err.code(), ErrorCode::MalformedEnvelope, "{doc}");
        }
    }
}
