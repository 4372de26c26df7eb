//! The JSON Schemas that no serde type of this crate can describe, written
//! by hand in this one place; every other schema of the OpenAPI document
//! (`docs/openapi.json`) is derived from the request and response types
//! with `utoipa::ToSchema`.
//!
//! Written here, and why:
//! - the string rules of ids, names, lease tokens and globs, which the
//!   envelope and the engine check in code (`docs/envelope.md`), stated as
//!   `pattern`s every generator can use, so no look-around;
//! - the envelope, which travels as its canonical bytes ([`crate::RawEnvelope`],
//!   encoded by `rdq_envelope`'s hand-written codec, not by serde);
//! - a queue's policy document, read as a JSON patch and validated by the
//!   engine's policy code rather than deserialized into a type here;
//! - the settle body, whose one struct allows combinations the server
//!   refuses, so its schema lists the shapes by outcome;
//! - the problem document, whose extension members are an open map;
//! - what the server's dashboard routes pass through from the application
//!   layer as JSON or names (an audit record, a scope).

use serde_json::{Value, json};
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{ObjectBuilder, SchemaType};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::Problem;
use crate::work::SettleBody;

/// The envelope's task id rule: 26 characters of Crockford base32, upper
/// case, the first at most `7` (`rdq_envelope::TaskId::parse`).
pub const TASK_ID_PATTERN: &str = "^[0-7][0-9A-HJKMNP-TV-Z]{25}$";

/// The envelope's name rule for queues and handler refs: 1–240 bytes of
/// `[a-z0-9._-]`, not `.` or `..` (`rdq_envelope::is_valid_name`).
pub const NAME_PATTERN: &str =
    "^(?:[a-z0-9_-][a-z0-9._-]{0,239}|\\.[a-z0-9_-][a-z0-9._-]{0,238}|\\.\\.[a-z0-9._-]{1,238})$";

/// A lease token as the server hands it out: the claim number, a dot, and
/// 128 bits of MAC in lower-case hex. The server also reads claim numbers
/// up to 4294967295; a token of another task or claim is `409 LEASE_LOST`.
pub const LEASE_TOKEN_PATTERN: &str = "^[0-9]{1,9}\\.[0-9a-f]{32}$";

/// A glob on error types (`docs/configuration.md`): not empty, every `[`
/// class closed, a `]` right after `[` or `[!` being a member (so `[!]`
/// and `[]` are unclosed), as `rdq_engine`'s glob parser reads it.
pub const GLOB_PATTERN: &str = "^(?:[^\\[]|\\[(?:!?\\][^\\]]*|![^\\]]+|[^!\\]][^\\]]*)\\])+$";

/// Header names a submitter may not use: the reserved `rdq.` prefix, in
/// any case (`docs/envelope.md`).
pub const USER_HEADER_NAME_PATTERN: &str = "^(?![Rr][Dd][Qq]\\.)";

const U8_MAX: u64 = 255;
const U32_MAX: u64 = 4_294_967_295;
const U64_MAX: u64 = u64::MAX;

/// The JSON Schema object `schema` as utoipa's model, keyword for keyword:
/// an untyped object whose members are carried as extensions, which
/// utoipa serializes flattened and unchanged.
pub(crate) fn verbatim(schema: Value) -> RefOr<Schema> {
    let members: Extensions = match schema {
        Value::Object(map) => map.into_iter().collect(),
        _ => Extensions::default(),
    };
    ObjectBuilder::new()
        .schema_type(SchemaType::AnyValue)
        .extensions(Some(members))
        .build()
        .into()
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// An integer from `min` to `max`.
fn int(min: u64, max: u64) -> Value {
    json!({"type": "integer", "minimum": min, "maximum": max})
}

/// Declares a schema-only type whose schema is the given JSON; `uses`
/// names the hand-written schemas it refers to, so they are registered
/// with it.
macro_rules! hand_written {
    ($(#[$doc:meta])* $name:ident, uses [], $schema:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name;

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                verbatim($schema)
            }
        }

        impl ToSchema for $name {}
    };
    ($(#[$doc:meta])* $name:ident, uses [$($dep:ident),+], $schema:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name;

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                verbatim($schema)
            }
        }

        impl ToSchema for $name {
            fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
                $(
                    schemas.push(($dep::name().into_owned(), $dep::schema()));
                    $dep::schemas(schemas);
                )+
            }
        }
    };
}

hand_written!(
    /// A task id: a ULID (`docs/envelope.md`).
    TaskId,
    uses [],
    json!({"type": "string", "minLength": 26, "maxLength": 26, "pattern": TASK_ID_PATTERN,
        "description": "A ULID: 26 upper-case Crockford base32 characters (docs/envelope.md)"})
);

hand_written!(
    /// A queue name.
    QueueName,
    uses [],
    json!({"type": "string", "minLength": 1, "maxLength": 240, "pattern": NAME_PATTERN,
        "description": "[a-z0-9._-], 1 to 240 bytes, not . or .. (docs/envelope.md)"})
);

hand_written!(
    /// An item of a `names` query list: a queue name, or empty (ignored).
    QueueNameItem,
    uses [QueueName],
    json!({"anyOf": [schema_ref("QueueName"), {"const": ""}]})
);

hand_written!(
    /// A handler ref: a name by the queue name rule.
    HandlerRef,
    uses [],
    json!({"type": "string", "minLength": 1, "maxLength": 240, "pattern": NAME_PATTERN,
        "description": "[a-z0-9._-], 1 to 240 bytes, not . or .. (docs/envelope.md)"})
);

hand_written!(
    /// A lease token from a claim.
    LeaseToken,
    uses [],
    json!({"type": "string", "pattern": LEASE_TOKEN_PATTERN,
        "description": "Opaque, from the claim; bound to its task and claim. A token of another task or claim is 409 LEASE_LOST"})
);

hand_written!(
    /// A glob on error types.
    Glob,
    uses [],
    json!({"type": "string", "minLength": 1, "pattern": GLOB_PATTERN,
        "description": "`*` any run, `?` one character, `[abc]`/`[!abc]` a class"})
);

hand_written!(
    /// A dead reason code a filter takes: one rdq writes, or `UNRECORDED`.
    DeadReasonCode,
    uses [],
    json!({"type": "string", "enum": ["ATTEMPTS_EXHAUSTED", "PERMANENT_FAILURE",
        "LEASE_EXPIRIES_EXHAUSTED", "CANCELLED", "HANDLER_VERSION_MISMATCH",
        "COUNTERS_EXHAUSTED", "UNRECORDED"]})
);

hand_written!(
    /// The error of a finished attempt, as the envelope stores it.
    AttemptError,
    uses [],
    json!({
        "type": "object",
        "required": ["type"],
        "properties": {
            "type": {"type": "string", "minLength": 1},
            "message": {"type": "string"},
            "detail": {},
            "stack": {"type": ["string", "null"]}
        }
    })
);

hand_written!(
    /// One attempt of a task, as the envelope stores it.
    Attempt,
    uses [AttemptError],
    json!({
        "type": "object",
        "required": ["attempt_no", "started_at"],
        "properties": {
            "attempt_no": int(1, U32_MAX),
            "started_at": timestamp(),
            "finished_at": {"type": ["string", "null"], "format": "date-time", "description": "null while in flight"},
            "outcome": {"type": ["string", "null"], "enum": ["SUCCESS", "RETRYABLE_FAILURE", "PERMANENT_FAILURE", "LEASE_EXPIRED", null],
                "description": "null while the attempt is in flight"},
            "error": {"anyOf": [schema_ref("AttemptError"), {"type": "null"}]}
        }
    })
);

fn timestamp() -> Value {
    json!({"type": "string", "format": "date-time",
        "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$"})
}

hand_written!(
    /// The v1 wire envelope, as its canonical encoding writes it.
    Envelope,
    uses [TaskId, QueueName, HandlerRef, Attempt],
    json!({
        "type": "object",
        "description": "The v1 wire envelope (docs/envelope.md), byte for byte its canonical encoding; unknown fields are preserved.",
        "required": ["envelope_version", "id", "queue", "handler_ref", "payload", "payload_content_type", "status", "created_at"],
        "properties": {
            "envelope_version": {"type": "integer", "minimum": 1},
            "id": schema_ref("TaskId"),
            "queue": schema_ref("QueueName"),
            "handler_ref": schema_ref("HandlerRef"),
            "handler_version": {"type": ["string", "null"]},
            "payload": {"type": "string", "contentEncoding": "base64"},
            "payload_content_type": {"type": "string"},
            "payload_ref": {"type": ["string", "null"]},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "status": {"type": "string", "enum": ["PENDING", "IN_FLIGHT", "SUCCEEDED", "DEAD"]},
            "priority": int(0, U8_MAX),
            "deferral_count": int(0, U32_MAX),
            "attempt_count": int(0, U32_MAX),
            "redrive_count": int(0, U32_MAX),
            "claim_count": int(0, U32_MAX),
            "next_attempt_at": {"type": ["string", "null"], "format": "date-time"},
            "lease_expires_at": {"type": ["string", "null"], "format": "date-time"},
            "created_at": timestamp(),
            "attempts": {"type": "array", "items": schema_ref("Attempt")},
            "dead_reason": {"type": ["object", "null"], "required": ["code", "at", "by"],
                "description": "Why the task is DEAD (docs/outcomes.md); left out otherwise",
                "properties": {
                    "code": {"type": "string", "pattern": "^[A-Z][A-Z0-9_]{0,63}$"},
                    "at": timestamp(),
                    "by": {"type": "string", "minLength": 1},
                    "message": {"type": ["string", "null"]}
                }},
            "cancel_requested": {"type": ["object", "null"], "required": ["at", "by"],
                "description": "A cancel asked while the task ran (docs/outcomes.md); left out otherwise",
                "properties": {
                    "at": timestamp(),
                    "by": {"type": "string", "minLength": 1},
                    "message": {"type": ["string", "null"]}
                }}
        },
        "additionalProperties": true
    })
);

/// A submit's user headers: names without the reserved prefix.
pub fn user_headers() -> RefOr<Schema> {
    verbatim(json!({
        "type": "object",
        "additionalProperties": {"type": "string"},
        "propertyNames": {"pattern": USER_HEADER_NAME_PATTERN},
        "description": "The rdq. prefix is reserved, in any case"
    }))
}

/// The items of a batch submit: each a submit body, or anything else,
/// which is answered in its slot.
pub fn submit_items() -> RefOr<Schema> {
    verbatim(json!({
        "type": "array",
        "maxItems": crate::MAX_SUBMIT_BATCH,
        "items": {
            "description": "A submit body as submitTask takes it; an item that is not one is answered in its slot",
            "anyOf": [schema_ref("SubmitRequest"), {}]
        }
    }))
}

/// The items of a batch settle: each a settle naming its task, or
/// anything else, which is answered in its slot.
pub fn settle_items() -> RefOr<Schema> {
    verbatim(json!({
        "type": "array",
        "maxItems": crate::MAX_SETTLE_BATCH,
        "items": {
            "description": "A settle naming its task id; an item that is not one is answered in its slot",
            "anyOf": [schema_ref("SettleBatchItem"), {}]
        }
    }))
}

/// The settle shapes, one per group of outcomes: a failure carries an
/// error, a deferral its delay, and neither comes with another outcome.
fn settle_shapes(with_id: bool) -> Value {
    let shape = |outcomes: Value, extra: Value, required: &[&str]| {
        let mut properties = json!({
            "lease_token": schema_ref("LeaseToken"),
            "outcome": {"type": "string", "enum": outcomes}
        });
        let mut req: Vec<&str> = vec!["lease_token", "outcome"];
        if with_id {
            properties["id"] = schema_ref("TaskId");
            req.insert(0, "id");
        }
        if let (Value::Object(p), Value::Object(e)) = (&mut properties, extra) {
            p.extend(e);
        }
        req.extend_from_slice(required);
        json!({"type": "object", "additionalProperties": false, "required": req, "properties": properties})
    };
    json!({"oneOf": [
        shape(json!(["SUCCESS", "RELEASE"]), json!({"error": {"type": "null"}, "defer_ms": {"type": "null"}, "throttle": {"type": "null"}}), &[]),
        shape(json!(["RETRYABLE_FAILURE", "PERMANENT_FAILURE", "FAILURE"]),
            json!({"error": schema_ref("ReportedError"), "defer_ms": {"type": "null"}, "throttle": {"type": "null"}}), &["error"]),
        shape(json!(["DEFER"]), json!({"error": {"type": "null"}, "defer_ms": int(0, U64_MAX),
            "throttle": {"type": ["string", "null"], "enum": ["key", "queue", null],
                "description": "Also throttle the task's flow key (the queue for a task without one) or the whole queue until the deferral is due"}}), &["defer_ms"]),
    ]})
}

impl PartialSchema for SettleBody {
    fn schema() -> RefOr<Schema> {
        verbatim(settle_shapes(false))
    }
}

impl ToSchema for SettleBody {
    fn name() -> std::borrow::Cow<'static, str> {
        "SettleRequest".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((TaskId::name().into_owned(), TaskId::schema()));
        schemas.push((LeaseToken::name().into_owned(), LeaseToken::schema()));
        schemas.push((
            crate::work::ReportedError::name().into_owned(),
            crate::work::ReportedError::schema(),
        ));
    }
}

hand_written!(
    /// One settle of `POST /v1/settle`: a settle body naming its task.
    SettleBatchItem,
    uses [TaskId, LeaseToken],
    settle_shapes(true)
);

impl PartialSchema for Problem {
    fn schema() -> RefOr<Schema> {
        verbatim(json!({
            "type": "object",
            "required": ["type", "title", "status", "code", "detail"],
            "properties": {
                "type": {"type": "string", "description": "urn:rdq:error:CODE"},
                "title": {"type": "string"},
                "status": {"type": "integer", "minimum": 400, "maximum": 599},
                "code": {"type": "string", "pattern": "^[A-Z][A-Z0-9_]*$", "description": "Stable machine-readable code"},
                "detail": {"type": "string"},
                "field": {"type": "string", "description": "Path of the offending field, when there is one"},
                "hint": {"type": "string", "description": "What to do instead (UNSUPPORTED)"},
                "error_count": {"type": "integer", "minimum": 0, "description": "INVALID_IMPORT: how many lines are bad"},
                "errors": {"type": "array", "items": schema_ref("ImportLineError")}
            }
        }))
    }
}

impl ToSchema for Problem {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((
            crate::dlq::LineError::name().into_owned(),
            crate::dlq::LineError::schema(),
        ));
    }
}

fn policy_properties() -> Value {
    json!({
        "max_attempts": int(1, U32_MAX),
        "max_lease_expiries": int(0, U32_MAX),
        "backoff": schema_ref("Backoff"),
        "lease_ms": int(1, U64_MAX),
        "retryable_errors": {"type": "array", "items": schema_ref("Glob")},
        "non_retryable_errors": {"type": "array", "items": schema_ref("Glob")},
        "max_envelope_bytes": int(256, U64_MAX),
        "max_priority": int(0, U8_MAX),
        "handler_version_mismatch": {"type": "string", "enum": ["run", "requeue", "dead"]},
        "paused": {"type": "boolean"},
        "retain_succeeded_ms": int(0, U64_MAX),
        "queuey_compatible": {"type": ["boolean", "null"],
            "description": "Speak queuey 1.1's wire format on a broker (docs/stores/rabbitmq.md); default false, and null removes the setting"},
        "callback": schema_ref("CallbackTarget"),
        "flow": schema_ref("FlowPolicy")
    })
}

/// A token bucket of a flow policy.
fn flow_rate() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["per_second"],
        "properties": {
            "per_second": {"type": "number", "exclusiveMinimum": 0, "maximum": 1_000_000,
                "description": "Starts per second; fractions allowed (0.5: one start every two seconds)"},
            "burst": int(1, 1_000_000)
        }
    })
}

hand_written!(
    /// A queue's flow limits: the policy's `flow` section.
    FlowPolicy,
    uses [],
    json!({
        "type": "object",
        "description": "Rate, concurrency and fairness limits (docs/flow-control.md); {} limits nothing. Weights need \"fairness\": \"weighted\".",
        "additionalProperties": false,
        "properties": {
            "rate": flow_rate(),
            "concurrency": int(1, 1_000_000),
            "local_concurrency": int(1, 1_000_000),
            "key_concurrency": int(1, 1_000_000),
            "key_rate": flow_rate(),
            "fairness": {"type": "string", "enum": ["fifo", "weighted"]},
            "weights": {
                "type": "object",
                "maxProperties": 1000,
                "propertyNames": {"minLength": 1, "maxLength": 128, "pattern": crate::flow::FLOW_KEY_PATTERN},
                "additionalProperties": int(1, 1000)
            },
            "default_weight": int(1, 1000)
        }
    })
);

hand_written!(
    /// A token scope, as `GET /v1/whoami` lists them.
    ScopeName,
    uses [],
    json!({"type": "string", "enum": ["submit", "work", "admin"]})
);

hand_written!(
    /// One record of the audit log (`docs/server.md`).
    AuditRecord,
    uses [QueueName],
    json!({
        "type": "object",
        "required": ["at", "who", "action", "dry_run"],
        "properties": {
            "at": {"type": "string", "format": "date-time"},
            "who": {"type": "string"},
            "action": {"type": "string"},
            "queue": schema_ref("QueueName"),
            "count": int(0, U64_MAX),
            "dry_run": {"type": "boolean"},
            "detail": {}
        }
    })
);

hand_written!(
    /// A queue's live policy, defaults filled in.
    QueuePolicy,
    uses [Backoff, Glob, CallbackTarget, FlowPolicy],
    json!({
        "type": "object",
        "description": "docs/configuration.md lists every field and its default.",
        "properties": policy_properties()
    })
);

hand_written!(
    /// The fields of a queue's policy to change.
    QueuePolicyPatch,
    uses [Backoff, Glob, CallbackTarget, FlowPolicy],
    json!({
        "type": "object",
        "description": "The fields to change (docs/configuration.md); nested objects such as backoff and callback are replaced whole; \"callback\": null removes the target. A callback URL must pass the server's allowlist ([callbacks] allow), which this document cannot know: elsewhere it is 400 INVALID_POLICY.",
        "additionalProperties": false,
        "properties": policy_properties()
    })
);

hand_written!(
    /// How long a task waits before its next attempt.
    Backoff,
    uses [],
    json!({"oneOf": [
        {"type": "object", "additionalProperties": false, "required": ["kind"], "properties": {"kind": {"const": "none"}}},
        {"type": "object", "additionalProperties": false, "required": ["kind", "delay_ms"],
            "properties": {"kind": {"const": "fixed"}, "delay_ms": int(0, U64_MAX)}},
        {"type": "object", "additionalProperties": false, "required": ["kind", "base_ms", "factor", "cap_ms", "jitter"], "properties": {
            "kind": {"const": "exponential"},
            "base_ms": int(0, U64_MAX),
            "factor": {"type": "number", "minimum": 1},
            "cap_ms": int(0, U64_MAX),
            "jitter": {"type": "boolean"}
        }}
    ]})
);

hand_written!(
    /// Where a queue's tasks are pushed instead of pulled.
    CallbackTarget,
    uses [],
    json!({
        "type": ["object", "null"],
        "required": ["url"],
        "additionalProperties": false,
        "properties": {
            "url": {"type": "string", "format": "uri"},
            "timeout_ms": int(1, U64_MAX),
            "concurrency": int(1, U64_MAX),
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "status_map": {"type": "object", "additionalProperties": {"type": "string", "enum": ["SUCCESS", "RETRYABLE_FAILURE", "PERMANENT_FAILURE"]}},
            "body_rules": {"type": "array", "items": {
                "type": "object",
                "required": ["pointer", "outcome"],
                "additionalProperties": false,
                "properties": {
                    "pointer": {"type": "string", "description": "RFC 6901 JSON Pointer"},
                    "equals": {}, "not_equals": {}, "exists": {"type": "boolean"},
                    "outcome": {"type": "string", "enum": ["SUCCESS", "RETRYABLE_FAILURE", "PERMANENT_FAILURE"]},
                    "error_type": {"type": "string"}
                }
            }}
        }
    })
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_written_schema_serializes_exactly_as_written() {
        let written = settle_shapes(true);
        let served = serde_json::to_value(SettleBatchItem::schema()).unwrap();
        assert_eq!(served, written);
        let envelope = serde_json::to_value(Envelope::schema()).unwrap();
        assert_eq!(
            envelope["properties"]["attempts"]["items"],
            schema_ref("Attempt")
        );
        assert_eq!(envelope["additionalProperties"], true);
    }

    #[test]
    fn a_hand_written_schema_registers_the_schemas_it_refers_to() {
        let mut registered = Vec::new();
        Envelope::schemas(&mut registered);
        let names: Vec<&str> = registered.iter().map(|(n, _)| n.as_str()).collect();
        for name in [
            "TaskId",
            "QueueName",
            "HandlerRef",
            "Attempt",
            "AttemptError",
        ] {
            assert!(names.contains(&name), "{name} missing from {names:?}");
        }
    }
}
