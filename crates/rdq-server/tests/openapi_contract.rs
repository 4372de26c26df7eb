//! The OpenAPI document is the contract (`docs/http-api.md`): the server's
//! answers validate against the schemas it documents, it accepts what the
//! document calls valid (`668.0` is an integer, `null` is absent) and refuses
//! what the document requires (an empty body), ids and names carry the
//! envelope's rules, and every status it can answer is documented.
//!
//! Responses are checked with a small JSON Schema validator below (the
//! keywords `docs/openapi.json` uses); `tests/api/run.sh` fuzzes the live
//! server against the same document with schemathesis.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;

use common::{Reply, TestServer, test_config};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const ADMIN: &str = "contract-admin-token-0001";

fn doc() -> Value {
    rdq_server::api::openapi::document().unwrap()
}

/// Follows `$ref`s inside the document.
fn resolve<'a>(doc: &'a Value, mut schema: &'a Value) -> &'a Value {
    while let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let mut node = doc;
        for part in r.trim_start_matches("#/").split('/') {
            node = &node[part];
        }
        assert!(!node.is_null(), "dangling $ref {r}");
        schema = node;
    }
    schema
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        // JSON Schema: any number with a zero fractional part.
        "integer" => v.as_number().is_some_and(|n| {
            let text = n.to_string();
            let magnitude = text.strip_prefix('-').unwrap_or(&text);
            rdq_api::int::parse_unsigned(magnitude, u64::MAX).is_ok()
        }),
        other => panic!("unknown type {other}"),
    }
}

fn number(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// Every way `v` breaks `schema`, as `path: why`.
fn violations(doc: &Value, schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    let schema = resolve(doc, schema);
    if schema.as_object().is_some_and(|m| m.is_empty()) || schema == &json!(true) {
        return;
    }
    if let Some(t) = schema.get("type") {
        let ok = match t {
            Value::String(t) => type_matches(t, v),
            Value::Array(ts) => ts.iter().any(|t| type_matches(t.as_str().unwrap(), v)),
            _ => panic!("bad type {t}"),
        };
        if !ok {
            out.push(format!("{path}: {v} is not of type {t}"));
            return;
        }
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        out.push(format!("{path}: {v} is not one of {e:?}"));
    }
    if let Some(c) = schema.get("const")
        && c != v
    {
        out.push(format!("{path}: {v} is not {c}"));
    }
    if let Some(min) = schema.get("minimum")
        && v.is_number()
        && number(v) < number(min)
    {
        out.push(format!("{path}: {v} < {min}"));
    }
    if let Some(max) = schema.get("maximum")
        && v.is_number()
        && number(v) > number(max)
    {
        out.push(format!("{path}: {v} > {max}"));
    }
    if let Some(s) = v.as_str() {
        let chars = s.chars().count() as u64;
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && chars < min
        {
            out.push(format!("{path}: {s:?} is shorter than {min}"));
        }
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && chars > max
        {
            out.push(format!("{path}: {s:?} is longer than {max}"));
        }
        if let Some(p) = schema.get("pattern").and_then(Value::as_str)
            && !pattern_matches(p, s)
        {
            out.push(format!("{path}: {s:?} does not match {p}"));
        }
    }
    if let Some(items) = v.as_array() {
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && items.len() as u64 > max
        {
            out.push(format!("{path}: more than {max} items"));
        }
        if let Some(item_schema) = schema.get("items") {
            for (i, item) in items.iter().enumerate() {
                violations(doc, item_schema, item, &format!("{path}[{i}]"), out);
            }
        }
    }
    if let Some(map) = v.as_object() {
        if let Some(req) = schema.get("required").and_then(Value::as_array) {
            for r in req {
                if !map.contains_key(r.as_str().unwrap()) {
                    out.push(format!("{path}: missing required {r}"));
                }
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, item) in map {
            if let Some(names) = schema.get("propertyNames") {
                violations(doc, names, &json!(k), &format!("{path}.{k} (name)"), out);
            }
            match props.and_then(|p| p.get(k)) {
                Some(s) => violations(doc, s, item, &format!("{path}.{k}"), out),
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        out.push(format!("{path}: unexpected property {k}"));
                    }
                    Some(s @ Value::Object(_)) => {
                        violations(doc, s, item, &format!("{path}.{k}"), out);
                    }
                    _ => {}
                },
            }
        }
    }
    let passes = |s: &Value| {
        let mut o = Vec::new();
        violations(doc, s, v, path, &mut o);
        o.is_empty()
    };
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array)
        && !any.iter().any(passes)
    {
        out.push(format!("{path}: {v} matches no anyOf branch"));
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        let n = one.iter().filter(|s| passes(s)).count();
        if n != 1 {
            out.push(format!("{path}: {v} matches {n} oneOf branches"));
        }
    }
    if let Some(not) = schema.get("not")
        && passes(not)
    {
        out.push(format!("{path}: {v} matches a `not`"));
    }
}

/// ECMA-262 patterns as the document writes them; the `regex` crate has
/// no look-around, so the one negative look-ahead the document uses (the
/// reserved header prefix) is checked by hand.
fn pattern_matches(p: &str, s: &str) -> bool {
    if let Some(rest) = p.strip_prefix("^(?!") {
        let inner = rest.strip_suffix(')').unwrap();
        return !regex::Regex::new(&format!("^{inner}")).unwrap().is_match(s);
    }
    regex::Regex::new(p).unwrap().is_match(s)
}

fn check(doc: &Value, schema: &Value, v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    violations(doc, schema, v, "$", &mut out);
    out
}

fn component(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// The operation documented for `method path`.
fn operation<'a>(doc: &'a Value, method: &str, path: &str) -> &'a Value {
    let op = &doc["paths"][path][method.to_lowercase()];
    assert!(op.is_object(), "{method} {path} is not documented");
    op
}

/// Asserts `reply` is documented for `method path`: its status is listed,
/// its content type is the documented one, and its body validates.
fn assert_documented(doc: &Value, method: &str, path: &str, reply: &Reply) {
    let op = operation(doc, method, path);
    let status = reply.status.as_u16().to_string();
    let response = op["responses"].get(&status).unwrap_or_else(|| {
        panic!(
            "{method} {path} answered {status}, which its responses do not list: {}",
            reply.text
        )
    });
    let response = resolve(doc, response);
    let Some(content) = response.get("content").and_then(Value::as_object) else {
        assert!(
            reply.text.is_empty(),
            "{method} {path} {status}: a body was sent"
        );
        return;
    };
    let media = reply.content_type.split(';').next().unwrap_or("").trim();
    let entry = content.get(media).unwrap_or_else(|| {
        panic!("{method} {path} {status}: content type {media} is not documented")
    });
    if media == "application/json" || media.ends_with("+json") {
        let errors = check(doc, &entry["schema"], &reply.body);
        assert!(
            errors.is_empty(),
            "{method} {path} {status} breaks its schema: {errors:?}\n{}",
            reply.text
        );
    }
}

async fn claim_one(server: &TestServer, queue: &str) -> (String, String, Value) {
    let r = server
        .post(&format!("/v1/queues/{queue}/claim"), json!({"max": 1}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let t = &r.body["tasks"][0];
    (
        t["id"].as_str().unwrap().to_owned(),
        t["lease_token"].as_str().unwrap().to_owned(),
        r.body.clone(),
    )
}

#[tokio::test]
async fn answers_validate_against_their_documented_schemas_in_flight_attempts_included() {
    let doc = doc();
    let server = TestServer::start().await;
    let submitted = server
        .post(
            "/v1/tasks",
            json!({"queue": "contract.a", "handler_ref": "h", "payload_json": {"n": 1}}),
        )
        .await;
    assert_documented(&doc, "POST", "/v1/tasks", &submitted);
    let (id, token, claim) = claim_one(&server, "contract.a").await;
    let claimed = server
        .post("/v1/queues/contract.a/claim", json!({"max": 0}))
        .await;
    assert_documented(&doc, "POST", "/v1/queues/{queue}/claim", &claimed);
    assert!(check(&doc, &component("ClaimResponse"), &claim).is_empty());

    // The claimed task has an open attempt: finished_at and outcome null.
    let in_flight = server.get(&format!("/v1/tasks/{id}")).await;
    let attempt = &in_flight.body["attempts"][0];
    assert!(
        attempt["outcome"].is_null() && attempt["finished_at"].is_null(),
        "{attempt}"
    );
    assert_documented(&doc, "GET", "/v1/tasks/{id}", &in_flight);

    let failed = server
        .post(
            &format!("/v1/tasks/{id}/settle"),
            json!({"lease_token": token, "outcome": "PERMANENT_FAILURE", "error": {"type": "x.Err", "message": "m", "detail": {"k": [1]}}}),
        )
        .await;
    assert_documented(&doc, "POST", "/v1/tasks/{id}/settle", &failed);
    let stale = server
        .post(
            &format!("/v1/tasks/{id}/settle"),
            json!({"lease_token": token, "outcome": "SUCCESS"}),
        )
        .await;
    stale.assert_problem(409, "LEASE_LOST");
    assert_documented(&doc, "POST", "/v1/tasks/{id}/settle", &stale);

    for (method, path, concrete) in [
        ("GET", "/v1/queues", "/v1/queues".to_owned()),
        ("GET", "/v1/capabilities", "/v1/capabilities".to_owned()),
        (
            "GET",
            "/v1/queues/{queue}/config",
            "/v1/queues/contract.a/config".to_owned(),
        ),
        (
            "GET",
            "/v1/queues/{queue}/dead",
            "/v1/queues/contract.a/dead?limit=1".to_owned(),
        ),
        (
            "GET",
            "/v1/queues/{queue}/dead/{id}",
            format!("/v1/queues/contract.a/dead/{id}"),
        ),
        (
            "GET",
            "/v1/queues/{queue}/dead/export",
            "/v1/queues/contract.a/dead/export".to_owned(),
        ),
        (
            "GET",
            "/v1/tasks/{id}",
            "/v1/tasks/01J2ZK7Q8XW5H3N9G4T6B8RDQ0".to_owned(),
        ),
        (
            "GET",
            "/v1/queues/{queue}/config",
            "/v1/queues/contract.none/config".to_owned(),
        ),
        ("GET", "/healthz", "/healthz".to_owned()),
        ("GET", "/readyz", "/readyz".to_owned()),
        ("GET", "/metrics", "/metrics".to_owned()),
    ] {
        let r = server.get(&concrete).await;
        assert_documented(&doc, method, path, &r);
    }
    let redrive = server
        .post(
            "/v1/queues/contract.a/dead/redrive",
            json!({"dry_run": true}),
        )
        .await;
    assert_documented(&doc, "POST", "/v1/queues/{queue}/dead/redrive", &redrive);
    let purge = server
        .delete("/v1/queues/contract.a/dead?dry_run=true")
        .await;
    assert_documented(&doc, "DELETE", "/v1/queues/{queue}/dead", &purge);
    let batch = server
        .post(
            "/v1/tasks/batch",
            json!({"tasks": [{"queue": "contract.a", "handler_ref": "h"}, {"queue": "Bad"}, 7]}),
        )
        .await;
    assert_documented(&doc, "POST", "/v1/tasks/batch", &batch);
    let settles = server
        .post(
            "/v1/settle",
            json!({"settles": [{"id": id, "lease_token": token, "outcome": "SUCCESS"}, {"x": 1}]}),
        )
        .await;
    assert_documented(&doc, "POST", "/v1/settle", &settles);
    server.stop().await;
}

#[test]
fn ids_and_names_in_the_document_carry_the_envelope_rules() {
    let doc = doc();
    let id = &doc["components"]["schemas"]["TaskId"];
    assert_eq!(
        (id["minLength"].as_u64(), id["maxLength"].as_u64()),
        (Some(26), Some(26))
    );
    let name = &doc["components"]["schemas"]["QueueName"];
    assert_eq!(
        (name["minLength"].as_u64(), name["maxLength"].as_u64()),
        (Some(1), Some(240))
    );
    let ids = [
        rdq_envelope::TaskId::generate().to_string(),
        "01J2ZK7Q8XW5H3N9G4T6B8RDQ0".into(),
        "7ZZZZZZZZZZZZZZZZZZZZZZZZZ".into(),
        "8ZZZZZZZZZZZZZZZZZZZZZZZZZ".into(),
        "01J2ZK7Q8XW5H3N9G4T6B8RDQ".into(),
        "01J2ZK7Q8XW5H3N9G4T6B8RDQ00".into(),
        "01j2zk7q8xw5h3n9g4t6b8rdq0".into(),
        "01J2ZK7Q8XW5H3N9G4T6B8RDQU".into(),
        "01J2ZK7Q8XW5H3N9G4T6B8RDQI".into(),
        String::new(),
    ];
    for candidate in ids {
        let documented = check(&doc, &component("TaskId"), &json!(candidate)).is_empty();
        let parsed = rdq_envelope::TaskId::parse(&candidate).is_some();
        assert_eq!(documented, parsed, "{candidate:?}");
    }
    let long = "a".repeat(240);
    let too_long = "a".repeat(241);
    for candidate in [
        "payments.charge",
        "a",
        "a-b_c.0",
        "...",
        ".a",
        "..a",
        "a..",
        "_",
        long.as_str(),
        "",
        ".",
        "..",
        "Payments",
        "a b",
        "a/b",
        "café",
        too_long.as_str(),
        "a\n",
    ] {
        for schema in ["QueueName", "HandlerRef"] {
            let documented = check(&doc, &component(schema), &json!(candidate)).is_empty();
            assert_eq!(
                documented,
                rdq_envelope::is_valid_name(candidate),
                "{schema} {candidate:?}"
            );
        }
    }
    // Every id and queue path parameter uses them.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for p in op["parameters"].as_array().into_iter().flatten() {
                let expected = match p["name"].as_str().unwrap() {
                    "id" => "#/components/schemas/TaskId",
                    "queue" => "#/components/schemas/QueueName",
                    _ => continue,
                };
                assert_eq!(
                    p["schema"]["$ref"], expected,
                    "{method} {path} {}",
                    p["name"]
                );
            }
        }
    }
}

#[tokio::test]
async fn integers_written_with_a_zero_fraction_are_integers_everywhere() {
    let server = TestServer::start().await;
    let r = server
        .post(
            "/v1/tasks",
            json!({"queue": "contract.int", "handler_ref": "h", "delay_ms": 0.0, "priority": 5.0}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(r.body["priority"], 5);
    let raw = server
        .raw(
            Method::POST,
            "/v1/tasks",
            br#"{"queue":"contract.int","handler_ref":"h","priority":7e0,"delay_ms":66800e-2}"#
                .to_vec(),
        )
        .await;
    assert_eq!(raw.status, StatusCode::CREATED, "{}", raw.text);
    assert_eq!(raw.body["priority"], 7);
    let batch = server
        .post(
            "/v1/tasks/batch",
            json!({"tasks": [{"queue": "contract.int", "handler_ref": "h", "priority": 2.0}]}),
        )
        .await;
    assert_eq!(batch.body["results"][0]["status"], 201, "{}", batch.text);

    let claim = server
        .raw(
            Method::POST,
            "/v1/queues/contract.int/claim",
            br#"{"max":1.0,"lease_ms":3.0e4}"#.to_vec(),
        )
        .await;
    assert_eq!(claim.status, StatusCode::OK, "{}", claim.text);
    let id = claim.body["tasks"][0]["id"].as_str().unwrap().to_owned();
    let token = claim.body["tasks"][0]["lease_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let extended = server
        .post(
            &format!("/v1/tasks/{id}/lease"),
            json!({"lease_token": token, "extend_ms": 60000.0}),
        )
        .await;
    assert_eq!(extended.status, StatusCode::OK, "{}", extended.text);
    let deferred = server
        .post(
            &format!("/v1/tasks/{id}/settle"),
            json!({"lease_token": token, "outcome": "DEFER", "defer_ms": 1000.0}),
        )
        .await;
    assert_eq!(deferred.status, StatusCode::OK, "{}", deferred.text);

    let config = server
        .put(
            "/v1/queues/contract.int/config",
            json!({"max_attempts": 3.0, "lease_ms": 5e3, "backoff": {"kind": "fixed", "delay_ms": 100.0}}),
        )
        .await;
    assert_eq!(config.status, StatusCode::OK, "{}", config.text);
    assert_eq!(config.body["max_attempts"], 3);
    assert_eq!(config.body["lease_ms"], 5000);
    assert_eq!(config.body["backoff"]["delay_ms"], 100);

    let page = server.get("/v1/queues/contract.int/dead?limit=10.0").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    let redrive = server
        .post(
            "/v1/queues/contract.int/dead/redrive",
            json!({"limit": 1.0, "dry_run": true}),
        )
        .await;
    assert_eq!(redrive.status, StatusCode::OK, "{}", redrive.text);

    // A fraction is still refused, with the same codes as any wrong type.
    let before = server.snapshot().await;
    server
        .post(
            "/v1/tasks",
            json!({"queue": "contract.int", "handler_ref": "h", "priority": 1.5}),
        )
        .await
        .assert_problem(400, "MALFORMED_REQUEST");
    server
        .post("/v1/queues/contract.int/claim", json!({"max": 0.5}))
        .await
        .assert_problem(400, "MALFORMED_REQUEST");
    server
        .put(
            "/v1/queues/contract.int/config",
            json!({"max_attempts": 2.5}),
        )
        .await
        .assert_problem(400, "INVALID_POLICY");
    server
        .get("/v1/queues/contract.int/dead?limit=1.5")
        .await
        .assert_problem(400, "MALFORMED_REQUEST");
    assert_eq!(server.snapshot().await, before);
    server.stop().await;
}

#[tokio::test]
async fn an_empty_body_is_refused_where_the_document_requires_one() {
    let doc = doc();
    let server = TestServer::start().await;
    let env = server.submit("contract.empty", json!(1)).await;
    let id = env["id"].as_str().unwrap();
    server
        .put(
            "/v1/queues/contract.empty/config",
            json!({"max_attempts": 4}),
        )
        .await;
    let before = server.snapshot().await;
    let config_before = server.get("/v1/queues/contract.empty/config").await.body;
    for (method, path, concrete) in [
        (Method::POST, "/v1/tasks", "/v1/tasks".to_owned()),
        (
            Method::POST,
            "/v1/tasks/batch",
            "/v1/tasks/batch".to_owned(),
        ),
        (Method::POST, "/v1/settle", "/v1/settle".to_owned()),
        (
            Method::POST,
            "/v1/tasks/{id}/settle",
            format!("/v1/tasks/{id}/settle"),
        ),
        (
            Method::POST,
            "/v1/tasks/{id}/lease",
            format!("/v1/tasks/{id}/lease"),
        ),
        (
            Method::POST,
            "/v1/queues/{queue}/claim",
            "/v1/queues/contract.empty/claim".to_owned(),
        ),
        (
            Method::PUT,
            "/v1/queues/{queue}/config",
            "/v1/queues/contract.empty/config".to_owned(),
        ),
        (
            Method::POST,
            "/v1/queues/{queue}/dead/redrive",
            "/v1/queues/contract.empty/dead/redrive".to_owned(),
        ),
    ] {
        assert_eq!(
            operation(&doc, method.as_str(), path)["requestBody"]["required"],
            true,
            "{method} {path}"
        );
        for body in [&b""[..], b"  \n"] {
            let r = server.raw(method.clone(), &concrete, body.to_vec()).await;
            r.assert_problem(400, "MALFORMED_REQUEST");
            assert_documented(&doc, method.as_str(), path, &r);
        }
        // Any other JSON value where the document requires an object is
        // refused too: `null`, scalars, and arrays (which serde would read
        // as the struct's fields in order: `[null]` once redrove nothing
        // with 200).
        for body in [
            &b"null"[..],
            b"[null]",
            b"[]",
            b"[{}]",
            b" [true, 1]",
            b"\"x\"",
            b"7",
            b"true",
        ] {
            let r = server.raw(method.clone(), &concrete, body.to_vec()).await;
            // A queue's configuration is a document the route validates
            // itself: one that is not an object is an invalid policy.
            let code = if path.ends_with("/config") {
                "INVALID_POLICY"
            } else {
                "MALFORMED_REQUEST"
            };
            r.assert_problem(400, code);
            assert_documented(&doc, method.as_str(), path, &r);
        }
    }
    assert_eq!(server.snapshot().await, before);
    assert_eq!(
        server.get("/v1/queues/contract.empty/config").await.body,
        config_before
    );
    // An import's body may be empty (an empty JSONL file), as documented.
    let import = "/v1/queues/{queue}/dead/import";
    assert_eq!(
        operation(&doc, "POST", import)["requestBody"]["required"],
        false
    );
    let r = server
        .raw(
            Method::POST,
            "/v1/queues/contract.empty/dead/import",
            Vec::new(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["imported"], 0);
    assert_documented(&doc, "POST", import, &r);
    server.stop().await;
}

#[tokio::test]
async fn a_null_payload_json_is_a_json_null_payload_and_optional_nulls_are_absent() {
    let doc = doc();
    let body = json!({"queue": "contract.null", "handler_ref": "h", "payload_json": null,
        "handler_version": null, "payload_content_type": null, "idempotency_key": null});
    assert!(check(&doc, &component("SubmitRequest"), &body).is_empty());
    let server = TestServer::start().await;
    let r = server.post("/v1/tasks", body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    // "null" in standard base64: the payload is the JSON value null.
    assert_eq!(r.body["payload"], "bnVsbA==", "{}", r.text);
    assert_eq!(r.body["payload_content_type"], "application/json");
    server.stop().await;
}

fn secured_config() -> rdq_server::ServerConfig {
    let mut config = rdq_server::ServerConfig::from_toml(&format!(
        r#"
        public_metrics = false
        max_request_bytes = 2048
        [[tokens]]
        name = "ops"
        token = "{ADMIN}"
        scopes = ["admin"]
        [[tokens]]
        name = "narrow"
        token = "narrow-token-0000000001"
        scopes = ["submit"]
        queues = ["elsewhere"]
        "#
    ))
    .unwrap();
    let base = test_config();
    config.listen = base.listen;
    config.maintenance = base.maintenance;
    config.callbacks = base.callbacks;
    config.shutdown_grace_ms = base.shutdown_grace_ms;
    config
}

#[tokio::test]
async fn every_status_the_server_answers_is_documented_auth_and_limits_included() {
    let doc = doc();
    let server = TestServer::with(
        secured_config(),
        Arc::new(rdq_store_memory::MemoryStore::new()),
    )
    .await
    .with_token(ADMIN);
    let big = json!({"pad": "x".repeat(4096)});
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let concrete = path
                .replace("{id}", "01J2ZK7Q8XW5H3N9G4T6B8RDQ0")
                .replace("{queue}", "contract.auth");
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let public = op["security"] == json!([]);
            let body = op.get("requestBody").map(|_| json!({}));
            // No token, a wrong one: 401 where a token is needed.
            for token in [None, Some("wrong-token-00000000000")] {
                let r = server
                    .call_as(token, method.clone(), &concrete, body.clone())
                    .await;
                if public {
                    assert_ne!(r.status, StatusCode::UNAUTHORIZED, "{method} {path}");
                } else {
                    r.assert_problem(401, "UNAUTHENTICATED");
                }
                assert_documented(&doc, method.as_str(), path, &r);
            }
            // A token without the scope: 403.
            let r = server
                .call_as(
                    Some("narrow-token-0000000001"),
                    method.clone(),
                    &concrete,
                    body.clone(),
                )
                .await;
            if r.status == StatusCode::FORBIDDEN {
                r.assert_problem(403, "FORBIDDEN");
            }
            assert_documented(&doc, method.as_str(), path, &r);
            // A body over max_request_bytes: 413.
            if op.get("requestBody").is_some() && !path.ends_with("/import") {
                let r = server
                    .call(method.clone(), &concrete, Some(big.clone()))
                    .await;
                r.assert_problem(413, "PAYLOAD_TOO_LARGE");
                assert_documented(&doc, method.as_str(), path, &r);
            }
            // And with the admin token, whatever the operation answers.
            let r = server.call(method.clone(), &concrete, body.clone()).await;
            assert_documented(&doc, method.as_str(), path, &r);
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn a_present_idempotency_key_header_must_be_a_key_whatever_the_body_says() {
    let doc = doc();
    let header = operation(&doc, "POST", "/v1/tasks")["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "Idempotency-Key")
        .unwrap()["schema"]
        .clone();
    assert!(!check(&doc, &header, &json!("")).is_empty());
    assert!(!check(&doc, &header, &json!("k".repeat(256))).is_empty());
    assert!(check(&doc, &header, &json!("order-42")).is_empty());
    let server = TestServer::start().await;
    let before = server.snapshot().await;
    let body = json!({"queue": "contract.key", "handler_ref": "h", "idempotency_key": "body-key"});
    assert!(!check(&doc, &header, &json!("a\tb")).is_empty());
    for bad in [String::new(), "k".repeat(256), "a\tb".to_owned()] {
        let r = server
            .client
            .post(format!("{}/v1/tasks", server.base))
            .header("idempotency-key", bad)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let problem: Value = r.json().await.unwrap();
        assert_eq!(problem["code"], "INVALID_FIELD", "{problem}");
        assert_eq!(problem["field"], "Idempotency-Key", "{problem}");
    }
    assert_eq!(server.snapshot().await, before);
    let ok = server
        .client
        .post(format!("{}/v1/tasks", server.base))
        .header("idempotency-key", "header-key")
        .json(&json!({"queue": "contract.key", "handler_ref": "h"}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::CREATED);
    server.stop().await;
}

#[tokio::test]
async fn globs_and_queue_lists_are_documented_as_the_server_reads_them() {
    let doc = doc();
    let server = TestServer::start().await;
    server.submit("contract.glob", json!(1)).await;
    for glob in [
        "*", "a?", "[ab]", "[!a]", "[]]", "[!]]", "]", "![", "[", "[]", "[!]", "a[b", "",
    ] {
        let documented = check(&doc, &component("Glob"), &json!(glob)).is_empty();
        let query: String = glob.bytes().map(|b| format!("%{b:02X}")).collect();
        let r = server
            .get(&format!("/v1/queues/contract.glob/dead?error_type={query}"))
            .await;
        let accepted = r.status == StatusCode::OK;
        assert_eq!(documented, accepted, "{glob:?}: {}", r.text);
    }
    // `names` ignores empty items, as its schema says.
    let names = operation(&doc, "GET", "/v1/queues")["parameters"][0]["schema"].clone();
    assert!(check(&doc, &names, &json!(["contract.glob", "", ""])).is_empty());
    assert!(!check(&doc, &names, &json!(["Bad"])).is_empty());
    let r = server.get("/v1/queues?names=contract.glob,,").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["queues"].as_array().unwrap().len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn short_texts_are_counted_in_characters_as_the_document_counts_them() {
    // JSON Schema's maxLength counts characters, so 255 characters of
    // four-byte UTF-8 are schema-valid and must be accepted; 256 are not.
    let doc = doc();
    let schema = component("SubmitRequest");
    let server = TestServer::start().await;
    for field in ["idempotency_key", "handler_version", "payload_content_type"] {
        for (ch, n) in [('𝄞', 255), ('é', 255), ('k', 255), ('𝄞', 256), ('k', 256)] {
            let text: String = std::iter::repeat_n(ch, n).collect();
            let mut body = json!({"queue": "contract.short", "handler_ref": "h"});
            body[field] = json!(text);
            let documented = check(&doc, &schema, &body).is_empty();
            assert_eq!(documented, n == 255, "{field}: {n} x {ch:?}");
            let r = server.post("/v1/tasks", body.clone()).await;
            if documented {
                assert_eq!(r.status, StatusCode::CREATED, "{field}: {}", r.text);
                let id = r.body["id"].clone();
                if field == "idempotency_key" {
                    let again = server.post("/v1/tasks", body.clone()).await;
                    assert_eq!(again.body["id"], id, "{}", again.text);
                } else {
                    let task = server
                        .get(&format!("/v1/tasks/{}", id.as_str().unwrap()))
                        .await;
                    assert_eq!(task.body[field], json!(text), "{}", task.text);
                }
            } else {
                r.assert_problem(400, "INVALID_FIELD");
                assert_eq!(r.body["field"], field, "{}", r.text);
            }
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn a_null_field_is_accepted_exactly_where_the_document_allows_null() {
    // Each optional property alone set to null: the server accepts it when
    // the document says null is allowed, and refuses it when it does not.
    let doc = doc();
    let server = TestServer::start().await;
    let cases = [
        (
            "QueuePolicyPatch",
            json!({}),
            Method::PUT,
            "/v1/queues/contract.nulls/config",
            StatusCode::OK,
        ),
        (
            "SubmitRequest",
            json!({"queue": "contract.nulls", "handler_ref": "h"}),
            Method::POST,
            "/v1/tasks",
            StatusCode::CREATED,
        ),
    ];
    for (name, base, method, path, accepted) in cases {
        let schema = component(name);
        let shape = &doc["components"]["schemas"][name];
        let required = shape["required"].as_array().cloned().unwrap_or_default();
        for field in shape["properties"].as_object().unwrap().keys() {
            if required.contains(&json!(field)) {
                continue;
            }
            let mut body = base.clone();
            body[field] = Value::Null;
            let documented = check(&doc, &schema, &body).is_empty();
            let r = server.call(method.clone(), path, Some(body)).await;
            assert_eq!(
                documented,
                r.status == accepted,
                "{name}.{field}: {}",
                r.text
            );
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn an_overlong_request_line_is_answered_414_as_documented_everywhere() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let doc = doc();
    let server = TestServer::start().await;
    let addr = server.base.trim_start_matches("http://").to_owned();
    let long = "n".repeat(70_000);
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let concrete = path
                .replace("{id}", "01J2ZK7Q8XW5H3N9G4T6B8RDQ0")
                .replace("{queue}", "contract.long");
            // Past what an HTTP client library will send: written by hand.
            let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let request = format!(
                "{} {concrete}?names={long} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n",
                method.to_uppercase()
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer).await;
            let head = String::from_utf8_lossy(&answer[..answer.len().min(64)]).into_owned();
            assert!(
                head.starts_with("HTTP/1.1 414"),
                "{method} {path}: {head:?}"
            );
            let responses = &operation(&doc, &method.to_uppercase(), path)["responses"];
            assert!(
                responses.get("414").is_some(),
                "{method} {path}: 414 is not documented"
            );
        }
    }
    server.stop().await;
}
