//! The OpenAPI 3.1 document of the HTTP API, served at `/openapi.json` and
//! committed as `docs/openapi.json`.
//!
//! Written by hand next to the routes rather than derived from them: the
//! document is the contract other languages generate clients from, so it is
//! worth reading and editing as such. A test holds it to the router (every
//! registered route is documented, every documented operation is routed)
//! and to the committed copy; `crates/rdq-server/tests/openapi_contract.rs`
//! holds the server's answers to it, and `tests/api/run.sh` fuzzes the live
//! server against it (`docs/testing.md`).
//!
//! What the document promises (`docs/http-api.md`): ids and names carry the
//! envelope's rules (`docs/envelope.md`) as `pattern` and lengths; an
//! integer is any number with a zero fraction (`668.0` too); an optional
//! field may be `null`, which means absent; every status and content type
//! the server can answer is listed.

use serde_json::{Map, Value, json};

/// The envelope's task id rule: 26 characters of Crockford base32, upper
/// case, the first at most `7` (`rdq_envelope::TaskId::parse`).
pub const TASK_ID_PATTERN: &str = "^[0-7][0-9A-HJKMNP-TV-Z]{25}$";

/// The envelope's name rule for queues and handler refs: 1–240 bytes of
/// `[a-z0-9._-]`, not `.` or `..` (`rdq_envelope::is_valid_name`), written
/// without look-ahead so every generator can use it.
pub const NAME_PATTERN: &str =
    "^(?:[a-z0-9_-][a-z0-9._-]{0,239}|\\.[a-z0-9_-][a-z0-9._-]{0,238}|\\.\\.[a-z0-9._-]{1,238})$";

/// A lease token as the server hands it out: the claim number, a dot, and
/// 128 bits of MAC in lower-case hex. The server also reads claim numbers
/// up to 4294967295; a token of another task or claim is `409 LEASE_LOST`.
pub const LEASE_TOKEN_PATTERN: &str = "^[0-9]{1,9}\\.[0-9a-f]{32}$";

/// Standard base64, padding optional, no stray trailing bits
/// (`docs/http-api.md`).
pub const BASE64_PATTERN: &str =
    "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw](?:==)?|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=?)?$";

/// A glob on error types (`docs/configuration.md`): not empty, every `[`
/// class closed, a `]` right after `[` or `[!` being a member (so `[!]`
/// and `[]` are unclosed), as `rdq_engine`'s glob parser reads it.
pub const GLOB_PATTERN: &str = "^(?:[^\\[]|\\[(?:!?\\][^\\]]*|![^\\]]+|[^!\\]][^\\]]*)\\])+$";

/// Header names the submitter may not use: the reserved `rdq.` prefix, in
/// any case (`docs/envelope.md`).
const USER_HEADER_NAME_PATTERN: &str = "^(?![Rr][Dd][Qq]\\.)";

const U8_MAX: u64 = 255;
const U32_MAX: u64 = 4_294_967_295;
const U64_MAX: u64 = u64::MAX;

/// Problem responses, by status, as references to `components.responses`.
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

/// An integer from `min` to `max`.
fn int(min: u64, max: u64) -> Value {
    json!({"type": "integer", "minimum": min, "maximum": max})
}

/// An optional field: its schema, or `null` (which means absent).
fn nullable(mut schema: Value) -> Value {
    if let Some(t) = schema.get("type").cloned() {
        let mut types = match t {
            Value::Array(a) => a,
            other => vec![other],
        };
        if !types.contains(&json!("null")) {
            types.push(json!("null"));
        }
        schema["type"] = Value::Array(types);
        schema
    } else {
        json!({"anyOf": [schema, {"type": "null"}]})
    }
}

/// Which problems an operation may answer, beyond its own.
#[derive(Clone, Copy)]
enum Access {
    /// No token needed: only what the route itself answers.
    Public,
    /// A token with a scope: 401 and 403 when tokens are configured, 503
    /// when the store does not answer or the server is shutting down, 501
    /// where the store cannot do this.
    Scoped,
}

struct Op {
    id: &'static str,
    summary: &'static str,
    tag: &'static str,
    params: Vec<Value>,
    body: Option<Value>,
    responses: Map<String, Value>,
    security: Option<Value>,
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
            security: None,
        }
        .access(Access::Scoped)
    }

    fn param(mut self, p: Value) -> Self {
        self.params.push(p);
        self
    }

    /// A required JSON body: an empty one is `400 MALFORMED_REQUEST`, one
    /// over `max_request_bytes` is `413`.
    fn body(self, schema: Value) -> Self {
        self.body_content(json!({"application/json": {"schema": schema}}))
    }

    fn body_content(mut self, content: Value) -> Self {
        self.body = Some(json!({"required": true, "content": content}));
        self.responses(problems(&[400, 413]))
    }

    /// A body that may be empty: an import of an empty JSONL file (what
    /// exporting an empty DLQ writes) imports nothing.
    fn optional_body_content(mut self, content: Value) -> Self {
        self.body = Some(json!({"required": false, "content": content}));
        self.responses(problems(&[400, 413]))
    }

    fn responses(mut self, r: Map<String, Value>) -> Self {
        self.responses.extend(r);
        self
    }

    /// Adds one link to the response with this status (stateful testing
    /// and client generators follow them).
    fn link(mut self, status: u16, name: &str, link: Value) -> Self {
        if let Some(Value::Object(response)) = self.responses.get_mut(&status.to_string()) {
            let links = response
                .entry("links")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(l) = links {
                l.insert(name.to_owned(), link);
            }
        }
        self
    }

    fn access(mut self, access: Access) -> Self {
        match access {
            Access::Public => {
                self.security = Some(json!([]));
                for code in ["401", "403", "501", "503"] {
                    self.responses.remove(code);
                }
            }
            Access::Scoped => {
                self.security = None;
                self = self.responses(problems(&[401, 403, 501, 503]));
            }
        }
        self
    }

    /// `/metrics`: public unless `public_metrics = false`, then admin.
    fn optional_auth(mut self) -> Self {
        self.security = Some(json!([{}, {"bearerAuth": []}]));
        self.responses(problems(&[401, 403]))
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
        let mut responses: Vec<(String, Value)> = self.responses.into_iter().collect();
        // Any request line can be too long for the HTTP layer.
        responses.push((
            "414".into(),
            json!({"$ref": "#/components/responses/UriTooLong"}),
        ));
        responses.sort_by(|a, b| a.0.cmp(&b.0));
        op.insert(
            "responses".into(),
            Value::Object(responses.into_iter().collect()),
        );
        if let Some(s) = self.security {
            op.insert("security".into(), s);
        }
        Value::Object(op)
    }
}

fn path_param(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description, "schema": schema})
}

fn query_param(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema})
}

fn id_param() -> Value {
    path_param("id", "Task id (ULID)", schema_ref("TaskId"))
}

fn queue_param() -> Value {
    path_param(
        "queue",
        "Queue name, `[a-z0-9._-]{1,240}`, not `.` or `..`",
        schema_ref("QueueName"),
    )
}

/// `?names=a,b`: only these queues. Empty items (`a,,b`, a trailing comma)
/// are ignored; any other item must be a queue name.
fn names_param() -> Value {
    json!({
        "name": "names", "in": "query", "required": false,
        "description": "Only these queues, comma-separated (needed on a store that cannot list its queues); a missing one is QUEUE_NOT_FOUND; empty items are ignored",
        "style": "form", "explode": false,
        "schema": {"type": "array", "items": {"anyOf": [schema_ref("QueueName"), {"const": ""}]}}
    })
}

fn dry_run_param(description: &str) -> Value {
    query_param("dry_run", description, json!({"type": "boolean"}))
}

fn error_type_param() -> Value {
    query_param(
        "error_type",
        "Glob on the latest error's type",
        schema_ref("Glob"),
    )
}

/// `204 No Content`.
fn no_content(description: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("204".into(), json!({"description": description}));
    m
}

/// A `200` whose body is not JSON.
fn ok_text(description: &str, media_type: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "200".into(),
        json!({"description": description, "content": {media_type: {"schema": {"type": "string"}}}}),
    );
    m
}

/// The `rdq-config-scope` response header of the queue config routes.
fn with_config_scope(mut r: Map<String, Value>) -> Map<String, Value> {
    if let Some(Value::Object(ok)) = r.get_mut("200") {
        ok.insert(
            "headers".into(),
            json!({"rdq-config-scope": {
                "description": "`process` on a store whose queue configuration lives in this server process (RabbitMQ); absent otherwise",
                "required": false,
                "schema": {"type": "string", "enum": ["process"]}
            }}),
        );
    }
    r
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

    let mut created = ok(201, "The new task", schema_ref("Envelope"));
    if let Some(Value::Object(r)) = created.get_mut("201") {
        r.insert(
            "headers".into(),
            json!({"Location": {"description": "/v1/tasks/{id} of the new task", "required": true, "schema": {"type": "string"}}}),
        );
    }
    add(
        "/v1/tasks",
        "post",
        Op::new("submitTask", "tasks", "Submit a task")
            .param(json!({"name": "Idempotency-Key", "in": "header", "required": false, "description": "Used when the body has no idempotency_key; when present, 1 to 255 bytes of visible ASCII whatever the body says (else 400 INVALID_FIELD)", "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]*[!-~][ -~]*$"}}))
            .param(json!({"name": "traceparent", "in": "header", "required": false, "description": "W3C trace context, copied into the envelope's headers unless the body has one", "schema": {"type": "string"}}))
            .body(schema_ref("SubmitRequest"))
            .responses(created)
            .responses(ok(200, "The original task (repeated idempotency key)", schema_ref("Envelope")))
            .link(201, "GetTask", json!({"operationId": "getTask", "parameters": {"id": "$response.body#/id"}}))
            .link(201, "DeleteTask", json!({"operationId": "deleteTask", "parameters": {"id": "$response.body#/id"}}))
            .link(201, "ClaimTasks", json!({"operationId": "claimTasks", "parameters": {"queue": "$response.body#/queue"}})),
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
        .responses(ok(200, "One result per item", schema_ref("SubmitBatchResponse"))),
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
        .responses(ok(200, "The task", schema_ref("Envelope")))
        .responses(problems(&[400, 404])),
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
        .responses(no_content("Deleted"))
        .responses(problems(&[400, 404])),
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
        .responses(ok(200, "The task after the settle", schema_ref("Envelope")))
        .responses(problems(&[404, 409])),
    );
    add(
        "/v1/tasks/{id}/lease",
        "post",
        Op::new("extendLease", "workers", "Extend a claim's lease")
            .param(id_param())
            .body(schema_ref("LeaseRequest"))
            .responses(ok(
                200,
                "The task with its new lease_expires_at",
                schema_ref("Envelope"),
            ))
            .responses(problems(&[404, 409])),
    );
    add(
        "/v1/settle",
        "post",
        Op::new(
            "settleBatch",
            "workers",
            "Settle up to 1000 claimed tasks in one store call; one result per item, in order",
        )
        .body(schema_ref("SettleBatchRequest"))
        .responses(ok(
            200,
            "One result per item",
            schema_ref("SettleBatchResponse"),
        )),
    );
    add(
        "/v1/queues",
        "get",
        Op::new(
            "listQueues",
            "queues",
            "Every queue the caller may see, with counts per status",
        )
        .param(names_param())
        .responses(ok(200, "The queues", schema_ref("QueueList")))
        .responses(problems(&[400, 404])),
    );
    add(
        "/v1/capabilities",
        "get",
        Op::new(
            "getCapabilities",
            "queues",
            "What the store behind the server can do, by capability",
        )
        .responses(ok(200, "The capabilities", schema_ref("CapabilityList"))),
    );
    add(
        "/v1/queues/{queue}/config",
        "get",
        Op::new(
            "getQueueConfig",
            "queues",
            "The queue's live policy, defaults filled in (any scope on the queue; without admin, callback header values and URL secrets read as …)",
        )
        .param(queue_param())
        .responses(with_config_scope(ok(
            200,
            "The policy",
            schema_ref("QueuePolicy"),
        )))
        .responses(problems(&[400, 404])),
    );
    add(
        "/v1/queues/{queue}/config",
        "put",
        Op::new(
            "putQueueConfig",
            "queues",
            "Change the queue's policy: the fields given replace the current ones (admin; audited)",
        )
        .param(queue_param())
        .body(schema_ref("QueuePolicyPatch"))
        .responses(with_config_scope(ok(200, "The new policy", schema_ref("QueuePolicy"))))
        .link(200, "GetQueueConfig", json!({"operationId": "getQueueConfig", "parameters": {"queue": "$request.path.queue"}})),
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
        .responses(ok(
            200,
            "The claimed tasks (possibly none)",
            schema_ref("ClaimResponse"),
        ))
        .link(200, "SettleTask", json!({
            "operationId": "settleTask",
            "parameters": {"id": "$response.body#/tasks/0/id"},
            "requestBody": {"lease_token": "$response.body#/tasks/0/lease_token", "outcome": "SUCCESS"}
        }))
        .link(200, "ExtendLease", json!({
            "operationId": "extendLease",
            "parameters": {"id": "$response.body#/tasks/0/id"},
            "requestBody": {"lease_token": "$response.body#/tasks/0/lease_token", "extend_ms": 60000}
        })),
    );
    add(
        "/v1/queues/{queue}/dead",
        "get",
        Op::new(
            "listDead",
            "dlq",
            "A page of the queue's dead tasks, newest first (any scope on the queue)",
        )
        .param(queue_param())
        .param(query_param(
            "limit",
            "Page size, 1-1000 (default 50)",
            int(1, 1000),
        ))
        .param(query_param(
            "cursor",
            "next_cursor of the previous page",
            schema_ref("TaskId"),
        ))
        .param(error_type_param())
        .responses(ok(200, "The page", schema_ref("DeadPage")))
        .responses(problems(&[400, 404])),
    );
    add(
        "/v1/queues/{queue}/dead",
        "delete",
        Op::new(
            "purgeDead",
            "dlq",
            "Remove every dead task of the queue (admin; audited)",
        )
        .param(queue_param())
        .param(dry_run_param("Count only"))
        .responses(ok(
            200,
            "How many were (or would be) removed",
            schema_ref("PurgeResponse"),
        ))
        .responses(problems(&[400, 404])),
    );
    add(
        "/v1/queues/{queue}/dead/redrive",
        "post",
        Op::new(
            "redriveDead",
            "dlq",
            "Send dead tasks back to PENDING (admin; audited)",
        )
        .param(queue_param())
        .body(schema_ref("RedriveRequest"))
        .responses(ok(200, "How many and which", schema_ref("RedriveResponse")))
        .responses(problems(&[404, 409])),
    );
    add(
        "/v1/queues/{queue}/dead/export",
        "get",
        Op::new(
            "exportDead",
            "dlq",
            "The queue's dead tasks as JSONL of canonical envelopes, oldest first, streamed (any scope on the queue)",
        )
        .param(queue_param())
        .param(error_type_param())
        .responses(ok_text("One envelope per line", "application/x-ndjson"))
        .responses(problems(&[400, 404])),
    );
    add(
        "/v1/queues/{queue}/dead/{id}",
        "get",
        Op::new(
            "getDead",
            "dlq",
            "One dead task of the queue with its attempt history; works on stores that cannot look a task up by id (a broker) by paging the DLQ (any scope on the queue)",
        )
        .param(queue_param())
        .param(id_param())
        .responses(ok(200, "The dead task", schema_ref("Envelope")))
        .responses(problems(&[400, 404])),
    );
    add(
        "/v1/queues/{queue}/dead/import",
        "post",
        Op::new(
            "importDead",
            "dlq",
            "Import JSONL of DEAD envelopes of this queue; all or nothing (admin; audited). The body is read whatever its Content-Type; its limit is max_import_bytes",
        )
        .param(queue_param())
        .param(dry_run_param("Check every line, import nothing"))
        .optional_body_content(json!({"application/x-ndjson": {"schema": {"type": "string", "description": "One canonical envelope per line (what exportDead writes); a bad line is 400 INVALID_IMPORT listing the bad lines"}}}))
        .responses(ok(
            200,
            "How many were imported",
            schema_ref("ImportResponse"),
        ))
        .responses(problems(&[409])),
    );
    // ---- Dashboard reads (docs/dashboard.md; crates/rdq-server/src/api/insights.rs) ----
    {
        let minute = json!({
            "type": "object",
            "required": ["at", "succeeded", "failed"],
            "properties": {
                "at": {"type": "string", "format": "date-time", "description": "Start of the minute"},
                "succeeded": int(0, U64_MAX),
                "failed": int(0, U64_MAX)
            }
        });
        let count_or_null = json!({"type": ["integer", "null"], "minimum": 0, "maximum": U64_MAX});
        let text_or_null = json!({"type": ["string", "null"]});
        add(
            "/v1/whoami",
            "get",
            Op::new(
                "whoami",
                "dashboard",
                "The caller's token name and scopes, so a front end can disable what it may not do",
            )
            .responses(ok(200, "The caller", json!({
                "type": "object",
                "required": ["name", "open", "scopes"],
                "properties": {
                    "name": {"type": ["string", "null"], "description": "The token's name; null on an open server"},
                    "open": {"type": "boolean", "description": "The server runs without tokens"},
                    "scopes": {"type": "array", "items": {"type": "string", "enum": ["submit", "work", "admin"]}}
                }
            }))),
        );
        add(
            "/v1/overview",
            "get",
            Op::new(
                "overview",
                "dashboard",
                "Every queue the caller may see: numbers (as listQueues), paused, the oldest pending task's age, and this process's outcomes per minute over the last hour",
            )
            .param(names_param())
            .responses(ok(200, "The queues", json!({
                "type": "object",
                "required": ["history_minutes", "history_scope", "queues"],
                "properties": {
                    "history_minutes": int(1, 1440),
                    "history_scope": {"type": "string", "enum": ["process"], "description": "The history counts what this server process did since it started"},
                    "queues": {"type": "array", "items": {
                        "type": "object",
                        "required": ["queue", "pending", "in_flight", "succeeded", "dead", "source", "paused",
                            "oldest_pending_id", "oldest_pending_at", "oldest_pending_age_ms", "oldest_pending_unknown", "history"],
                        "properties": {
                            "queue": schema_ref("QueueName"),
                            "pending": int(0, U64_MAX),
                            "in_flight": count_or_null.clone(),
                            "succeeded": count_or_null.clone(),
                            "dead": int(0, U64_MAX),
                            "source": {"type": "string", "enum": ["counts", "depths"]},
                            "paused": {"type": "boolean"},
                            "oldest_pending_id": {"anyOf": [schema_ref("TaskId"), {"type": "null"}]},
                            "oldest_pending_at": {"type": ["string", "null"], "format": "date-time"},
                            "oldest_pending_age_ms": count_or_null,
                            "oldest_pending_unknown": text_or_null.clone(),
                            "history": {"type": "array", "items": minute}
                        }
                    }}
                }
            })))
            .responses(problems(&[400, 404])),
        );
        add(
            "/v1/queues/{queue}/dead/breakdown",
            "get",
            Op::new(
                "breakdownDead",
                "dlq",
                "The queue's DLQ grouped by latest error type, most tasks first, with the newest task of each (any scope on the queue)",
            )
            .param(queue_param())
            .responses(ok(200, "The groups", json!({
                "type": "object",
                "required": ["queue", "total", "groups"],
                "properties": {
                    "queue": schema_ref("QueueName"),
                    "total": int(0, U64_MAX),
                    "groups": {"type": "array", "items": {
                        "type": "object",
                        "required": ["error_type", "count", "newest"],
                        "properties": {
                            "error_type": text_or_null,
                            "count": int(1, U64_MAX),
                            "newest": schema_ref("Envelope")
                        }
                    }}
                }
            })))
            .responses(problems(&[400, 404])),
        );
        add(
            "/v1/audit",
            "get",
            Op::new(
                "auditTail",
                "dashboard",
                "This process's latest audit records, newest first (admin)",
            )
            .param(query_param(
                "queue",
                "Only this queue's records",
                schema_ref("QueueName"),
            ))
            .param(query_param("limit", "How many (default 100)", int(1, 1000)))
            .responses(ok(
                200,
                "The records",
                json!({
                    "type": "object",
                    "required": ["scope", "records"],
                    "properties": {
                        "scope": {"type": "string", "enum": ["process"]},
                        "records": {"type": "array", "items": {
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
                        }}
                    }
                }),
            ))
            .responses(problems(&[400])),
        );
    }
    // ---- end of dashboard reads ----
    add(
        "/healthz",
        "get",
        Op::new("healthz", "operations", "Liveness")
            .access(Access::Public)
            .responses(ok(200, "Up", schema_ref("Status"))),
    );
    add(
        "/readyz",
        "get",
        Op::new(
            "readyz",
            "operations",
            "Readiness: the store answers and can write, and the server is not shutting down",
        )
        .access(Access::Public)
        .responses(ok(200, "Ready", schema_ref("Status")))
        .responses(problems(&[503])),
    );
    add(
        "/metrics",
        "get",
        Op::new(
            "metrics",
            "operations",
            "Prometheus text exposition (needs an admin token when public_metrics = false)",
        )
        .access(Access::Public)
        .optional_auth()
        .responses(ok_text("Metrics", "text/plain")),
    );
    add(
        "/openapi.json",
        "get",
        Op::new("openapi", "operations", "This document")
            .access(Access::Public)
            .responses(ok(200, "OpenAPI 3.1", json!({"type": "object"}))),
    );

    let mut responses = Map::new();
    for (code, description) in [
        (
            400,
            "Malformed or invalid input (MALFORMED_REQUEST: not JSON, an empty body, wrong type, unknown or missing field; INVALID_FIELD, INVALID_QUEUE_NAME, INVALID_HANDLER_REF, RESERVED_HEADER, INVALID_POLICY, INVALID_ARGUMENT, INVALID_IMPORT)",
        ),
        (
            401,
            "Tokens are configured and the request has no known bearer token (UNAUTHENTICATED)",
        ),
        (403, "The token lacks the scope or the queue (FORBIDDEN)"),
        (
            404,
            "Unknown task or queue (TASK_NOT_FOUND, QUEUE_NOT_FOUND); a queue-scoped token gets TASK_NOT_FOUND for another queue's task too",
        ),
        (
            409,
            "The lease is no longer held (LEASE_LOST), the task's status or counters do not allow this (INVALID_TRANSITION), or the task exists (TASK_EXISTS)",
        ),
        (
            413,
            "The body exceeds max_request_bytes (max_import_bytes for an import), or the envelope the queue's max_envelope_bytes (PAYLOAD_TOO_LARGE)",
        ),
        (501, "The store cannot do this (UNSUPPORTED, with a hint)"),
        (
            503,
            "The store does not answer (STORE_UNAVAILABLE) or the server is shutting down (SHUTTING_DOWN)",
        ),
    ] {
        let mut response = json!({"description": description, "content": {"application/problem+json": {"schema": schema_ref("Problem")}}});
        if code == 401 {
            response["headers"] = json!({"WWW-Authenticate": {"description": "Bearer realm=\"rdq\"", "required": true, "schema": {"type": "string"}}});
        }
        responses.insert(format!("Problem{code}"), response);
    }

    responses.insert(
        "UriTooLong".into(),
        json!({"description": "The request line (path and query string) is longer than 65,534 bytes: refused by the HTTP layer before routing, with an empty body"}),
    );

    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "rdq-server",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "rdq's HTTP API: submit tasks, pull workers, queue configuration and the dead-letter queue. Errors are application/problem+json with a stable `code`. Bodies are parsed strictly whatever their Content-Type; an integer is any number with a zero fraction (668.0 is 668); an optional field may be null, which means absent. Without configured tokens the server is open (loopback only) and answers no 401 or 403. See docs/http-api.md."
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
    let outcome = json!({"type": ["string", "null"], "enum": ["SUCCESS", "RETRYABLE_FAILURE", "PERMANENT_FAILURE", "LEASE_EXPIRED", null], "description": "null while the attempt is in flight"});
    let count = int(0, U32_MAX);
    let timestamp = json!({"type": "string", "format": "date-time", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$"});
    let short_text = |what: &str| json!({"type": "string", "minLength": 1, "maxLength": 255, "description": format!("{what}; 1 to 255 characters")});
    let reported_error = json!({
        "type": "object",
        "required": ["type"],
        "additionalProperties": false,
        "properties": {
            "type": {"type": "string", "minLength": 1, "description": "Language-native type name; classification globs match on it"},
            "message": {"type": "string", "description": "Cut at 4 KiB"},
            "detail": {"description": "Any JSON; null is absent"},
            "stack": {"type": ["string", "null"], "description": "Cut at 64 KiB"}
        }
    });
    let settle_shapes = |with_id: bool| {
        let base = |outcomes: Value, extra: Value, required: &[&str]| {
            let mut properties = json!({
                "lease_token": schema_ref("LeaseToken"),
                "outcome": {"type": "string", "enum": outcomes}
            });
            if with_id {
                properties["id"] = schema_ref("TaskId");
            }
            if let (Value::Object(p), Value::Object(e)) = (&mut properties, extra) {
                p.extend(e);
            }
            let mut req: Vec<&str> = vec!["lease_token", "outcome"];
            if with_id {
                req.insert(0, "id");
            }
            req.extend_from_slice(required);
            json!({"type": "object", "additionalProperties": false, "required": req, "properties": properties})
        };
        json!({"oneOf": [
            base(json!(["SUCCESS", "RELEASE"]), json!({"error": {"type": "null"}, "defer_ms": {"type": "null"}}), &[]),
            base(json!(["RETRYABLE_FAILURE", "PERMANENT_FAILURE", "FAILURE"]), json!({"error": schema_ref("ReportedError"), "defer_ms": {"type": "null"}}), &["error"]),
            base(json!(["DEFER"]), json!({"error": {"type": "null"}, "defer_ms": int(0, U64_MAX)}), &["defer_ms"]),
        ]})
    };

    let mut all = Map::new();
    all.insert(
        "TaskId".into(),
        json!({"type": "string", "minLength": 26, "maxLength": 26, "pattern": TASK_ID_PATTERN, "description": "A ULID: 26 upper-case Crockford base32 characters (docs/envelope.md)"}),
    );
    all.insert(
        "QueueName".into(),
        json!({"type": "string", "minLength": 1, "maxLength": 240, "pattern": NAME_PATTERN, "description": "[a-z0-9._-], 1 to 240 bytes, not . or .. (docs/envelope.md)"}),
    );
    all.insert(
        "HandlerRef".into(),
        json!({"type": "string", "minLength": 1, "maxLength": 240, "pattern": NAME_PATTERN, "description": "[a-z0-9._-], 1 to 240 bytes, not . or .. (docs/envelope.md)"}),
    );
    all.insert(
        "LeaseToken".into(),
        json!({"type": "string", "pattern": LEASE_TOKEN_PATTERN, "description": "Opaque, from the claim; bound to its task and claim. A token of another task or claim is 409 LEASE_LOST"}),
    );
    all.insert(
        "Glob".into(),
        json!({"type": "string", "minLength": 1, "pattern": GLOB_PATTERN, "description": "`*` any run, `?` one character, `[abc]`/`[!abc]` a class"}),
    );
    all.insert(
        "Status".into(),
        json!({
            "type": "object",
            "required": ["status"],
            "properties": {"status": {"type": "string", "enum": ["ok", "ready"]}}
        }),
    );
    all.insert("Problem".into(), json!({
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
    }));
    all.insert("ImportLineError".into(), json!({
        "type": "object",
        "required": ["line", "code", "message"],
        "properties": {"line": {"type": "integer", "minimum": 1}, "code": {"type": "string"}, "message": {"type": "string"}}
    }));
    all.insert(
        "AttemptError".into(),
        json!({
            "type": "object",
            "required": ["type"],
            "properties": {
                "type": {"type": "string", "minLength": 1},
                "message": {"type": "string"},
                "detail": {},
                "stack": {"type": ["string", "null"]}
            }
        }),
    );
    all.insert("Attempt".into(), json!({
        "type": "object",
        "required": ["attempt_no", "started_at"],
        "properties": {
            "attempt_no": int(1, U32_MAX),
            "started_at": timestamp,
            "finished_at": {"type": ["string", "null"], "format": "date-time", "description": "null while in flight"},
            "outcome": outcome,
            "error": {"anyOf": [schema_ref("AttemptError"), {"type": "null"}]}
        }
    }));
    all.insert("Envelope".into(), json!({
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
            "deferral_count": count,
            "attempt_count": count,
            "redrive_count": count,
            "claim_count": count,
            "next_attempt_at": {"type": ["string", "null"], "format": "date-time"},
            "lease_expires_at": {"type": ["string", "null"], "format": "date-time"},
            "created_at": timestamp,
            "attempts": {"type": "array", "items": schema_ref("Attempt")}
        },
        "additionalProperties": true
    }));
    all.insert("SubmitRequest".into(), json!({
        "type": "object",
        "required": ["queue", "handler_ref"],
        "additionalProperties": false,
        "properties": {
            "queue": schema_ref("QueueName"),
            "handler_ref": schema_ref("HandlerRef"),
            "handler_version": nullable(short_text("Handler version")),
            "payload": nullable(json!({"type": "string", "pattern": BASE64_PATTERN, "contentEncoding": "base64", "description": "Opaque bytes as standard base64 (padding optional); not with payload_json"})),
            "payload_json": {"description": "Inline JSON payload, stored exactly as sent (null is a JSON null payload); not with payload"},
            "payload_content_type": nullable(short_text("MIME type; default application/json with payload_json, application/octet-stream otherwise")),
            "headers": {"type": "object", "additionalProperties": {"type": "string"}, "propertyNames": {"pattern": USER_HEADER_NAME_PATTERN}, "description": "The rdq. prefix is reserved, in any case"},
            "delay_ms": int(0, U64_MAX),
            "priority": int(0, U8_MAX),
            "idempotency_key": nullable(short_text("A repeated key on the same queue returns the original task"))
        },
        "not": {"required": ["payload", "payload_json"], "properties": {"payload": {"type": "string"}}}
    }));
    all.insert("QueueList".into(), json!({
        "type": "object",
        "required": ["queues"],
        "properties": {"queues": {"type": "array", "items": {
            "type": "object",
            "required": ["queue", "pending", "in_flight", "succeeded", "dead", "source"],
            "properties": {
                "queue": schema_ref("QueueName"), "pending": int(0, U64_MAX),
                "in_flight": {"type": ["integer", "null"], "minimum": 0, "description": "null where the store cannot tell (depths)"},
                "succeeded": {"type": ["integer", "null"], "minimum": 0, "description": "null where the store cannot tell (depths)"},
                "dead": int(0, U64_MAX),
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
        "properties": {"tasks": {"type": "array", "maxItems": 1000, "items": {
            "description": "A submit body as submitTask takes it; an item that is not one is answered in its slot",
            "anyOf": [schema_ref("SubmitRequest"), {}]
        }}}
    }));
    all.insert("SubmitBatchResponse".into(), json!({
        "type": "object",
        "required": ["results"],
        "properties": {"results": {"type": "array", "items": {
            "type": "object",
            "required": ["status"],
            "properties": {
                "status": {"type": "integer", "description": "201 created, 200 an idempotent repeat, else the item's error status"},
                "envelope": schema_ref("Envelope"),
                "code": {"type": "string"},
                "detail": {"type": "string"}
            }
        }}}
    }));
    let policy_properties = json!({
        "max_attempts": int(1, U32_MAX),
        "backoff": schema_ref("Backoff"),
        "lease_ms": int(1, U64_MAX),
        "retryable_errors": {"type": "array", "items": schema_ref("Glob")},
        "non_retryable_errors": {"type": "array", "items": schema_ref("Glob")},
        "max_envelope_bytes": int(256, U64_MAX),
        "max_priority": int(0, U8_MAX),
        "handler_version_mismatch": {"type": "string", "enum": ["run", "requeue", "dead"]},
        "paused": {"type": "boolean"},
        "retain_succeeded_ms": int(0, U64_MAX),
        "queuey_compatible": {"type": ["boolean", "null"], "description": "Speak queuey 1.1's wire format on a broker (docs/stores/rabbitmq.md); default false, and null removes the setting"},
        "callback": schema_ref("CallbackTarget")
    });
    all.insert(
        "QueuePolicy".into(),
        json!({
            "type": "object",
            "description": "docs/configuration.md lists every field and its default.",
            "properties": policy_properties.clone()
        }),
    );
    all.insert("QueuePolicyPatch".into(), json!({
        "type": "object",
        "description": "The fields to change (docs/configuration.md); nested objects such as backoff and callback are replaced whole; \"callback\": null removes the target. A callback URL must pass the server's allowlist ([callbacks] allow), which this document cannot know: elsewhere it is 400 INVALID_POLICY.",
        "additionalProperties": false,
        "properties": policy_properties
    }));
    all.insert("Backoff".into(), json!({
        "oneOf": [
            {"type": "object", "additionalProperties": false, "required": ["kind"], "properties": {"kind": {"const": "none"}}},
            {"type": "object", "additionalProperties": false, "required": ["kind", "delay_ms"], "properties": {"kind": {"const": "fixed"}, "delay_ms": int(0, U64_MAX)}},
            {"type": "object", "additionalProperties": false, "required": ["kind", "base_ms", "factor", "cap_ms", "jitter"], "properties": {
                "kind": {"const": "exponential"},
                "base_ms": int(0, U64_MAX),
                "factor": {"type": "number", "minimum": 1},
                "cap_ms": int(0, U64_MAX),
                "jitter": {"type": "boolean"}
            }}
        ]
    }));
    all.insert("CallbackTarget".into(), json!({
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
    }));
    all.insert(
        "ClaimRequest".into(),
        json!({
            "type": "object",
            "required": ["max"],
            "additionalProperties": false,
            "properties": {"max": int(0, 1000), "lease_ms": nullable(int(1, U64_MAX))}
        }),
    );
    all.insert(
        "ClaimResponse".into(),
        json!({
            "type": "object",
            "required": ["tasks"],
            "properties": {"tasks": {"type": "array", "items": {
                "type": "object",
                "required": ["id", "lease_token", "envelope"],
                "properties": {
                    "id": schema_ref("TaskId"),
                    "lease_token": schema_ref("LeaseToken"),
                    "envelope": schema_ref("Envelope")
                }
            }}}
        }),
    );
    all.insert("ReportedError".into(), reported_error);
    all.insert("SettleRequest".into(), settle_shapes(false));
    all.insert("SettleBatchItem".into(), settle_shapes(true));
    all.insert("SettleBatchRequest".into(), json!({
        "type": "object",
        "required": ["settles"],
        "additionalProperties": false,
        "properties": {
            "settles": {"type": "array", "maxItems": 1000, "items": {
                "description": "A settle naming its task id; an item that is not one is answered in its slot",
                "anyOf": [schema_ref("SettleBatchItem"), {}]
            }},
            "envelopes": {"type": ["boolean", "null"], "description": "false: answer each item without its envelope (id and status only), for a worker that reads only the statuses; default true"}
        }
    }));
    all.insert(
        "SettleBatchResponse".into(),
        json!({
            "type": "object",
            "required": ["results"],
            "properties": {"results": {"type": "array", "items": {
                "type": "object",
                "required": ["id", "status"],
                "properties": {
                    "id": {"type": "string", "description": "The id as given (empty when the item had none)"},
                    "status": {"type": "integer"},
                    "envelope": schema_ref("Envelope"),
                    "code": {"type": "string"}, "detail": {"type": "string"}
                }
            }}}
        }),
    );
    all.insert(
        "LeaseRequest".into(),
        json!({
            "type": "object",
            "required": ["lease_token", "extend_ms"],
            "additionalProperties": false,
            "properties": {"lease_token": schema_ref("LeaseToken"), "extend_ms": int(1, U64_MAX)}
        }),
    );
    all.insert(
        "DeadPage".into(),
        json!({
            "type": "object",
            "required": ["items", "next_cursor"],
            "properties": {
                "items": {"type": "array", "items": schema_ref("Envelope")},
                "next_cursor": {"anyOf": [schema_ref("TaskId"), {"type": "null"}]}
            }
        }),
    );
    all.insert(
        "RedriveRequest".into(),
        json!({
            "type": "object",
            "additionalProperties": false,
            "description": "Every field optional: {} redrives every dead task of the queue",
            "properties": {
                "ids": nullable(json!({"type": "array", "items": schema_ref("TaskId")})),
                "error_type": {"anyOf": [schema_ref("Glob"), {"type": "null"}]},
                "limit": nullable(int(0, U64_MAX)),
                "dry_run": {"type": "boolean"}
            }
        }),
    );
    all.insert(
        "RedriveResponse".into(),
        json!({
            "type": "object",
            "required": ["queue", "dry_run", "count", "ids"],
            "properties": {
                "queue": schema_ref("QueueName"), "dry_run": {"type": "boolean"},
                "count": int(0, U64_MAX), "ids": {"type": "array", "items": schema_ref("TaskId")}
            }
        }),
    );
    all.insert(
        "ImportResponse".into(),
        json!({
            "type": "object",
            "required": ["queue", "dry_run", "checked", "imported"],
            "properties": {
                "queue": schema_ref("QueueName"), "dry_run": {"type": "boolean"},
                "checked": int(0, U64_MAX), "imported": int(0, U64_MAX)
            }
        }),
    );
    all.insert("PurgeResponse".into(), json!({
        "type": "object",
        "required": ["queue", "dry_run", "purged"],
        "properties": {"queue": schema_ref("QueueName"), "dry_run": {"type": "boolean"}, "purged": int(0, U64_MAX)}
    }));
    Value::Object(all)
}
