//! The OpenAPI 3.1 document of the HTTP API, served at `/openapi.json` and
//! committed as `docs/openapi.json`.
//!
//! Written by hand next to the routes rather than derived from them: the
//! document is the contract other languages generate clients from, so it is
//! worth reading and editing as such. A test holds it to the router (every
//! registered route is documented, every documented operation is routed)
//! and to the committed copy.

use serde_json::{Map, Value, json};

/// Problem responses every operation may give.
fn problems(codes: &[u16]) -> Map<String, Value> {
    let mut out = Map::new();
    for code in codes {
        out.insert(
            code.to_string(),
            json!({"$ref": format!("#/components/responses/Problem{code}")}),
        );
    }
    out
}

fn ok(status: u16, description: &str, schema: Value) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        status.to_string(),
        json!({"description": description, "content": {"application/json": {"schema": schema}}}),
    );
    m
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

struct Op {
    id: &'static str,
    summary: &'static str,
    tag: &'static str,
    params: Vec<Value>,
    body: Option<Value>,
    responses: Map<String, Value>,
    public: bool,
}

impl Op {
    fn new(id: &'static str, tag: &'static str, summary: &'static str) -> Self {
        Self {
            id,
            summary,
            tag,
            params: Vec::new(),
            body: None,
            responses: Map::new(),
            public: false,
        }
    }

    fn param(mut self, p: Value) -> Self {
        self.params.push(p);
        self
    }

    fn body(mut self, schema: Value) -> Self {
        self.body =
            Some(json!({"required": true, "content": {"application/json": {"schema": schema}}}));
        self
    }

    fn body_content(mut self, content: Value) -> Self {
        self.body = Some(json!({"required": true, "content": content}));
        self
    }

    fn responds(mut self, r: Map<String, Value>) -> Self {
        self.responses.extend(r);
        self
    }

    fn public(mut self) -> Self {
        self.public = true;
        self
    }

    fn build(self) -> Value {
        let mut op = Map::new();
        op.insert("operationId".into(), json!(self.id));
        op.insert("summary".into(), json!(self.summary));
        op.insert("tags".into(), json!([self.tag]));
        if !self.params.is_empty() {
            op.insert("parameters".into(), Value::Array(self.params));
        }
        if let Some(b) = self.body {
            op.insert("requestBody".into(), b);
        }
        op.insert("responses".into(), Value::Object(self.responses));
        if self.public {
            op.insert("security".into(), json!([]));
        }
        Value::Object(op)
    }
}

fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description, "schema": {"type": "string"}})
}

fn query_param(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema})
}

fn id_param() -> Value {
    path_param("id", "Task id (ULID)")
}

fn queue_param() -> Value {
    path_param("queue", "Queue name, `[a-z0-9._-]{1,240}`")
}

/// The whole document.
pub fn document() -> Value {
    let mut paths: Map<String, Value> = Map::new();
    let mut add = |path: &str, method: &str, op: Op| {
        let entry = paths
            .entry(path.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = entry {
            m.insert(method.to_owned(), op.build());
        }
    };

    add(
        "/v1/tasks",
        "post",
        Op::new("submitTask", "tasks", "Submit a task")
            .param(json!({"name": "Idempotency-Key", "in": "header", "required": false, "description": "Used when the body has no idempotency_key", "schema": {"type": "string"}}))
            .param(json!({"name": "traceparent", "in": "header", "required": false, "description": "W3C trace context, copied into the envelope's headers", "schema": {"type": "string"}}))
            .body(schema_ref("SubmitRequest"))
            .responds(ok(201, "The new task", schema_ref("Envelope")))
            .responds(ok(200, "The original task (repeated idempotency key)", schema_ref("Envelope")))
            .responds(problems(&[400, 401, 403, 413])),
    );
    add(
        "/v1/tasks/batch",
        "post",
        Op::new(
            "submitTasks",
            "tasks",
            "Submit up to 1000 tasks in one store call; one result per item, in order",
        )
        .param(json!({"name": "traceparent", "in": "header", "required": false, "description": "W3C trace context, copied into each item's headers that has none", "schema": {"type": "string"}}))
        .body(schema_ref("SubmitBatchRequest"))
        .responds(ok(200, "One result per item", schema_ref("SubmitBatchResponse")))
        .responds(problems(&[400, 401, 413])),
    );
    add(
        "/v1/tasks/{id}",
        "get",
        Op::new(
            "getTask",
            "tasks",
            "Read a task: the full envelope with its attempt history",
        )
        .param(id_param())
        .responds(ok(200, "The task", schema_ref("Envelope")))
        .responds(problems(&[400, 401, 403, 404])),
    );
    add(
        "/v1/tasks/{id}",
        "delete",
        Op::new(
            "deleteTask",
            "tasks",
            "Delete a task, whatever its status (admin; audited)",
        )
        .param(id_param())
        .responds({
            let mut m = Map::new();
            m.insert("204".into(), json!({"description": "Deleted"}));
            m
        })
        .responds(problems(&[400, 401, 403, 404])),
    );
    add(
        "/v1/tasks/{id}/settle",
        "post",
        Op::new(
            "settleTask",
            "workers",
            "Report the outcome of a claimed task",
        )
        .param(id_param())
        .body(schema_ref("SettleRequest"))
        .responds(ok(200, "The task after the settle", schema_ref("Envelope")))
        .responds(problems(&[400, 401, 403, 404, 409])),
    );
    add(
        "/v1/tasks/{id}/lease",
        "post",
        Op::new("extendLease", "workers", "Extend a claim's lease")
            .param(id_param())
            .body(schema_ref("LeaseRequest"))
            .responds(ok(
                200,
                "The task with its new lease_expires_at",
                schema_ref("Envelope"),
            ))
            .responds(problems(&[400, 401, 403, 404, 409])),
    );
    add(
        "/v1/settle",
        "post",
        Op::new(
            "settleBatch",
            "workers",
            "Settle many claimed tasks in one store call; one result per item, in order",
        )
        .body(schema_ref("SettleBatchRequest"))
        .responds(ok(
            200,
            "One result per item",
            schema_ref("SettleBatchResponse"),
        ))
        .responds(problems(&[400, 401])),
    );
    add(
        "/v1/queues",
        "get",
        Op::new(
            "listQueues",
            "queues",
            "Every queue the caller may see, with counts per status",
        )
        .param(query_param(
            "names",
            "Only these queues, comma-separated (needed on a store that cannot list its queues)",
            json!({"type": "string"}),
        ))
        .responds(ok(200, "The queues", schema_ref("QueueList")))
        .responds(problems(&[400, 401, 404, 501])),
    );
    add(
        "/v1/capabilities",
        "get",
        Op::new(
            "getCapabilities",
            "queues",
            "What the store behind the server can do, by capability",
        )
        .responds(ok(200, "The capabilities", schema_ref("CapabilityList")))
        .responds(problems(&[401])),
    );
    add(
        "/v1/queues/{queue}/config",
        "get",
        Op::new(
            "getQueueConfig",
            "queues",
            "The queue's live policy, defaults filled in",
        )
        .param(queue_param())
        .responds(ok(200, "The policy", schema_ref("QueuePolicy")))
        .responds(problems(&[400, 401, 403, 404])),
    );
    add(
        "/v1/queues/{queue}/config",
        "put",
        Op::new(
            "putQueueConfig",
            "queues",
            "Change the queue's policy: the fields given replace the current ones (audited)",
        )
        .param(queue_param())
        .body(schema_ref("QueuePolicy"))
        .responds(ok(200, "The new policy", schema_ref("QueuePolicy")))
        .responds(problems(&[400, 401, 403])),
    );
    add(
        "/v1/queues/{queue}/claim",
        "post",
        Op::new(
            "claimTasks",
            "workers",
            "Claim up to max due tasks under a lease",
        )
        .param(queue_param())
        .body(schema_ref("ClaimRequest"))
        .responds(ok(
            200,
            "The claimed tasks (possibly none)",
            schema_ref("ClaimResponse"),
        ))
        .responds(problems(&[400, 401, 403])),
    );
    add(
        "/v1/queues/{queue}/dead",
        "get",
        Op::new(
            "listDead",
            "dlq",
            "A page of the queue's dead tasks, newest first",
        )
        .param(queue_param())
        .param(query_param(
            "limit",
            "Page size, 1-1000 (default 50)",
            json!({"type": "integer", "minimum": 1, "maximum": 1000}),
        ))
        .param(query_param(
            "cursor",
            "next_cursor of the previous page",
            json!({"type": "string"}),
        ))
        .param(query_param(
            "error_type",
            "Glob on the latest error's type",
            json!({"type": "string"}),
        ))
        .responds(ok(200, "The page", schema_ref("DeadPage")))
        .responds(problems(&[400, 401, 403, 404])),
    );
    add(
        "/v1/queues/{queue}/dead",
        "delete",
        Op::new(
            "purgeDead",
            "dlq",
            "Remove every dead task of the queue (audited)",
        )
        .param(queue_param())
        .param(query_param(
            "dry_run",
            "Count only",
            json!({"type": "boolean"}),
        ))
        .responds(ok(
            200,
            "How many were (or would be) removed",
            schema_ref("PurgeResponse"),
        ))
        .responds(problems(&[400, 401, 403, 404])),
    );
    add(
        "/v1/queues/{queue}/dead/redrive",
        "post",
        Op::new(
            "redriveDead",
            "dlq",
            "Send dead tasks back to PENDING (audited)",
        )
        .param(queue_param())
        .body(schema_ref("RedriveRequest"))
        .responds(ok(200, "How many and which", schema_ref("RedriveResponse")))
        .responds(problems(&[400, 401, 403, 404])),
    );
    add(
        "/v1/queues/{queue}/dead/export",
        "get",
        Op::new("exportDead", "dlq", "The queue's dead tasks as JSONL of canonical envelopes, oldest first, streamed")
            .param(queue_param())
            .param(query_param("error_type", "Glob on the latest error's type", json!({"type": "string"})))
            .responds({
                let mut m = Map::new();
                m.insert("200".into(), json!({"description": "One envelope per line", "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}));
                m
            })
            .responds(problems(&[400, 401, 403, 404])),
    );
    add(
        "/v1/queues/{queue}/dead/{id}",
        "get",
        Op::new(
            "getDead",
            "dlq",
            "One dead task of the queue with its attempt history; works on stores that cannot look a task up by id (a broker) by paging the DLQ",
        )
        .param(queue_param())
        .param(id_param())
        .responds(ok(200, "The dead task", schema_ref("Envelope")))
        .responds(problems(&[400, 401, 403, 404])),
    );
    add(
        "/v1/queues/{queue}/dead/import",
        "post",
        Op::new(
            "importDead",
            "dlq",
            "Import JSONL of DEAD envelopes of this queue; all or nothing (audited)",
        )
        .param(queue_param())
        .param(query_param(
            "dry_run",
            "Check every line, import nothing",
            json!({"type": "boolean"}),
        ))
        .body_content(json!({"application/x-ndjson": {"schema": {"type": "string"}}}))
        .responds(ok(
            200,
            "How many were imported",
            schema_ref("ImportResponse"),
        ))
        .responds(problems(&[400, 401, 403, 413])),
    );
    add(
        "/healthz",
        "get",
        Op::new("healthz", "operations", "Liveness")
            .public()
            .responds(ok(200, "Up", json!({"type": "object"}))),
    );
    add(
        "/readyz",
        "get",
        Op::new(
            "readyz",
            "operations",
            "Readiness: the store answers and the server is not shutting down",
        )
        .public()
        .responds(ok(200, "Ready", json!({"type": "object"})))
        .responds(problems(&[503])),
    );
    add(
        "/metrics",
        "get",
        Op::new("metrics", "operations", "Prometheus text exposition (needs admin unless public_metrics)")
            .public()
            .responds({
                let mut m = Map::new();
                m.insert("200".into(), json!({"description": "Metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}));
                m
            }),
    );
    add(
        "/openapi.json",
        "get",
        Op::new("openapi", "operations", "This document")
            .public()
            .responds(ok(200, "OpenAPI 3.1", json!({"type": "object"}))),
    );

    let mut responses = Map::new();
    for (code, description) in [
        (
            400,
            "Malformed or invalid input (MALFORMED_REQUEST, INVALID_FIELD, INVALID_QUEUE_NAME, INVALID_HANDLER_REF, RESERVED_HEADER, INVALID_POLICY, INVALID_ARGUMENT, INVALID_IMPORT)",
        ),
        (401, "No or unknown bearer token (UNAUTHENTICATED)"),
        (403, "The token lacks the scope or the queue (FORBIDDEN)"),
        (
            404,
            "Unknown task or queue (TASK_NOT_FOUND, QUEUE_NOT_FOUND)",
        ),
        (
            409,
            "The lease is no longer held (LEASE_LOST), or the task's status does not allow this (INVALID_TRANSITION)",
        ),
        (413, "Too large (PAYLOAD_TOO_LARGE)"),
        (501, "The store cannot do this (UNSUPPORTED, with a hint)"),
        (
            503,
            "The store does not answer or the server is shutting down",
        ),
    ] {
        responses.insert(
            format!("Problem{code}"),
            json!({"description": description, "content": {"application/problem+json": {"schema": schema_ref("Problem")}}}),
        );
    }

    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "rdq-server",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "rdq's HTTP API: submit tasks, pull workers, queue configuration and the dead-letter queue. Errors are application/problem+json with a stable `code`. See docs/http-api.md."
        },
        "servers": [{"url": "http://127.0.0.1:7480"}],
        "security": [{"bearerAuth": []}],
        "paths": Value::Object(paths),
        "components": {
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
            "responses": Value::Object(responses),
            "schemas": schemas(),
        }
    })
}

fn schemas() -> Value {
    let outcome = json!({"type": "string", "enum": ["SUCCESS", "RETRYABLE_FAILURE", "PERMANENT_FAILURE", "LEASE_EXPIRED"]});
    let mut all = Map::new();
    all.insert("Problem".into(), json!({
            "type": "object",
            "required": ["type", "title", "status", "code", "detail"],
            "properties": {
                "type": {"type": "string", "description": "urn:rdq:error:CODE"},
                "title": {"type": "string"},
                "status": {"type": "integer"},
                "code": {"type": "string", "description": "Stable machine-readable code"},
                "detail": {"type": "string"},
                "field": {"type": "string", "description": "Path of the offending field, when there is one"},
                "errors": {"type": "array", "items": {"$ref": "#/components/schemas/ImportLineError"}}
            }
        }));
    all.insert("ImportLineError".into(), json!({
            "type": "object",
            "properties": {"line": {"type": "integer"}, "code": {"type": "string"}, "message": {"type": "string"}}
        }));
    all.insert("Envelope".into(), json!({
            "type": "object",
            "description": "The v1 wire envelope (docs/envelope.md); unknown fields are preserved.",
            "required": ["envelope_version", "id", "queue", "handler_ref", "payload", "payload_content_type", "status", "created_at"],
            "properties": {
                "envelope_version": {"type": "integer"},
                "id": {"type": "string"},
                "queue": {"type": "string"},
                "handler_ref": {"type": "string"},
                "handler_version": {"type": ["string", "null"]},
                "payload": {"type": "string", "contentEncoding": "base64"},
                "payload_content_type": {"type": "string"},
                "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                "status": {"type": "string", "enum": ["PENDING", "IN_FLIGHT", "SUCCEEDED", "DEAD"]},
                "priority": {"type": "integer"},
                "deferral_count": {"type": "integer"},
                "attempt_count": {"type": "integer"},
                "redrive_count": {"type": "integer"},
                "next_attempt_at": {"type": ["string", "null"], "format": "date-time"},
                "lease_expires_at": {"type": ["string", "null"], "format": "date-time"},
                "created_at": {"type": "string", "format": "date-time"},
                "attempts": {"type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "attempt_no": {"type": "integer"},
                        "started_at": {"type": "string", "format": "date-time"},
                        "finished_at": {"type": ["string", "null"], "format": "date-time"},
                        "outcome": outcome,
                        "error": {"type": ["object", "null"], "properties": {
                            "type": {"type": "string"}, "message": {"type": "string"},
                            "detail": {}, "stack": {"type": ["string", "null"]}
                        }}
                    }
                }}
            },
            "additionalProperties": true
        }));
    all.insert("SubmitRequest".into(), json!({
            "type": "object",
            "required": ["queue", "handler_ref"],
            "additionalProperties": false,
            "properties": {
                "queue": {"type": "string"},
                "handler_ref": {"type": "string"},
                "handler_version": {"type": "string"},
                "payload": {"type": "string", "contentEncoding": "base64", "description": "Opaque bytes; not with payload_json"},
                "payload_json": {"description": "Inline JSON payload, stored exactly as sent; not with payload"},
                "payload_content_type": {"type": "string"},
                "headers": {"type": "object", "additionalProperties": {"type": "string"}, "description": "The rdq. prefix is reserved"},
                "delay_ms": {"type": "integer", "minimum": 0},
                "priority": {"type": "integer", "minimum": 0, "maximum": 255},
                "idempotency_key": {"type": "string"}
            }
        }));
    all.insert("QueueList".into(), json!({
            "type": "object",
            "required": ["queues"],
            "properties": {"queues": {"type": "array", "items": {
                "type": "object",
                "required": ["queue", "pending", "in_flight", "succeeded", "dead", "source"],
                "properties": {
                    "queue": {"type": "string"}, "pending": {"type": "integer"},
                    "in_flight": {"type": ["integer", "null"], "description": "null where the store cannot tell (depths)"},
                    "succeeded": {"type": ["integer", "null"], "description": "null where the store cannot tell (depths)"},
                    "dead": {"type": "integer"},
                    "source": {"type": "string", "enum": ["counts", "depths"], "description": "counts: tasks per status; depths: messages waiting in the broker queues"}
                }
            }}}
        }));
    all.insert("CapabilityList".into(), json!({
            "type": "object",
            "required": ["capabilities"],
            "properties": {"capabilities": {"type": "object", "additionalProperties": {"type": "boolean"}}}
        }));
    all.insert("SubmitBatchRequest".into(), json!({
            "type": "object",
            "required": ["tasks"],
            "additionalProperties": false,
            "properties": {"tasks": {"type": "array", "maxItems": 1000, "items": {"$ref": "#/components/schemas/SubmitRequest"}}}
        }));
    all.insert("SubmitBatchResponse".into(), json!({
            "type": "object",
            "required": ["results"],
            "properties": {"results": {"type": "array", "items": {
                "type": "object",
                "required": ["status"],
                "properties": {
                    "status": {"type": "integer", "description": "201 created, 200 an idempotent repeat, else the item's error status"},
                    "envelope": {"$ref": "#/components/schemas/Envelope"},
                    "code": {"type": "string"},
                    "detail": {"type": "string"}
                }
            }}}
        }));
    all.insert("QueuePolicy".into(), json!({
            "type": "object",
            "description": "docs/configuration.md lists every field and its default; a PUT names only the fields it changes.",
            "additionalProperties": false,
            "properties": {
                "max_attempts": {"type": "integer", "minimum": 1},
                "backoff": {"type": "object"},
                "lease_ms": {"type": "integer", "minimum": 1},
                "retryable_errors": {"type": "array", "items": {"type": "string"}},
                "non_retryable_errors": {"type": "array", "items": {"type": "string"}},
                "max_envelope_bytes": {"type": "integer"},
                "max_priority": {"type": "integer"},
                "handler_version_mismatch": {"type": "string", "enum": ["run", "requeue", "dead"]},
                "paused": {"type": "boolean"},
                "retain_succeeded_ms": {"type": "integer"},
                "queuey_compatible": {"type": "boolean"},
                "callback": {"$ref": "#/components/schemas/CallbackTarget"}
            }
        }));
    all.insert("CallbackTarget".into(), json!({
            "type": ["object", "null"],
            "required": ["url"],
            "additionalProperties": false,
            "properties": {
                "url": {"type": "string"},
                "timeout_ms": {"type": "integer", "minimum": 1},
                "concurrency": {"type": "integer", "minimum": 1},
                "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                "status_map": {"type": "object", "additionalProperties": {"type": "string", "enum": ["SUCCESS", "RETRYABLE_FAILURE", "PERMANENT_FAILURE"]}},
                "body_rules": {"type": "array", "items": {
                    "type": "object",
                    "required": ["pointer", "outcome"],
                    "properties": {
                        "pointer": {"type": "string", "description": "RFC 6901 JSON Pointer"},
                        "equals": {}, "not_equals": {}, "exists": {"type": "boolean"},
                        "outcome": {"type": "string", "enum": ["SUCCESS", "RETRYABLE_FAILURE", "PERMANENT_FAILURE"]},
                        "error_type": {"type": "string"}
                    }
                }}
            }
        }));
    all.insert("ClaimRequest".into(), json!({
            "type": "object",
            "required": ["max"],
            "additionalProperties": false,
            "properties": {"max": {"type": "integer", "minimum": 0, "maximum": 1000}, "lease_ms": {"type": "integer", "minimum": 1}}
        }));
    all.insert("ClaimResponse".into(), json!({
            "type": "object",
            "properties": {"tasks": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "lease_token": {"type": "string", "description": "Opaque; bound to this task and claim"},
                    "envelope": {"$ref": "#/components/schemas/Envelope"}
                }
            }}}
        }));
    all.insert("SettleRequest".into(), json!({
            "type": "object",
            "required": ["lease_token", "outcome"],
            "additionalProperties": false,
            "properties": {
                "id": {"type": "string", "description": "Required in a batch"},
                "lease_token": {"type": "string"},
                "outcome": {"type": "string", "enum": ["SUCCESS", "RETRYABLE_FAILURE", "PERMANENT_FAILURE", "FAILURE", "DEFER", "RELEASE"]},
                "error": {"type": "object", "required": ["type"], "properties": {
                    "type": {"type": "string"}, "message": {"type": "string"}, "detail": {}, "stack": {"type": "string"}
                }},
                "defer_ms": {"type": "integer", "minimum": 0}
            }
        }));
    all.insert("SettleBatchRequest".into(), json!({
            "type": "object",
            "required": ["settles"],
            "properties": {"settles": {"type": "array", "maxItems": 1000, "items": {"$ref": "#/components/schemas/SettleRequest"}}}
        }));
    all.insert(
        "SettleBatchResponse".into(),
        json!({
            "type": "object",
            "properties": {"results": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"}, "status": {"type": "integer"},
                    "envelope": {"$ref": "#/components/schemas/Envelope"},
                    "code": {"type": "string"}, "detail": {"type": "string"}
                }
            }}}
        }),
    );
    all.insert("LeaseRequest".into(), json!({
            "type": "object",
            "required": ["lease_token", "extend_ms"],
            "additionalProperties": false,
            "properties": {"lease_token": {"type": "string"}, "extend_ms": {"type": "integer", "minimum": 1}}
        }));
    all.insert(
        "DeadPage".into(),
        json!({
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"$ref": "#/components/schemas/Envelope"}},
                "next_cursor": {"type": ["string", "null"]}
            }
        }),
    );
    all.insert(
        "RedriveRequest".into(),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "ids": {"type": "array", "items": {"type": "string"}},
                "error_type": {"type": "string"},
                "limit": {"type": "integer", "minimum": 0},
                "dry_run": {"type": "boolean"}
            }
        }),
    );
    all.insert(
        "RedriveResponse".into(),
        json!({
            "type": "object",
            "properties": {
                "queue": {"type": "string"}, "dry_run": {"type": "boolean"},
                "count": {"type": "integer"}, "ids": {"type": "array", "items": {"type": "string"}}
            }
        }),
    );
    all.insert(
        "ImportResponse".into(),
        json!({
            "type": "object",
            "properties": {
                "queue": {"type": "string"}, "dry_run": {"type": "boolean"},
                "checked": {"type": "integer"}, "imported": {"type": "integer"}
            }
        }),
    );
    all.insert("PurgeResponse".into(), json!({
            "type": "object",
            "properties": {"queue": {"type": "string"}, "dry_run": {"type": "boolean"}, "purged": {"type": "integer"}}
        }));
    Value::Object(all)
}
