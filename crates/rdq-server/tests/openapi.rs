//! `/openapi.json` agrees with the router: every registered route is
//! documented, every documented operation is routed (probed over HTTP), and
//! the committed `docs/openapi.json` is what `GET /openapi.json` answers.
//!
//! After changing the API, regenerate the committed copy with
//! `RDQ_UPDATE_OPENAPI=1 cargo test -p rdq-server --test openapi`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use common::TestServer;
use reqwest::Method;
use serde_json::Value;

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            ops.insert((method.to_uppercase(), path.clone()));
        }
    }
    ops
}

#[test]
fn every_route_is_documented_and_every_documented_operation_is_a_route() {
    let routed: BTreeSet<(String, String)> = rdq_server::api::route_table(1 << 20)
        .routes()
        .iter()
        .map(|(m, p)| (m.as_str().to_owned(), (*p).to_owned()))
        .collect();
    let doc = rdq_server::api::openapi::document().unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(documented(&doc), routed);
    // Every operation has an id, and every $ref resolves.
    let text = doc.to_string();
    for piece in text.split("\"$ref\":\"#/").skip(1) {
        let target = piece.split('"').next().unwrap();
        let mut node = &doc;
        for part in target.split('/') {
            node = &node[part];
        }
        assert!(!node.is_null(), "dangling $ref #/{target}");
    }
    for (_, item) in doc["paths"].as_object().unwrap() {
        for (_, op) in item.as_object().unwrap() {
            assert!(op["operationId"].is_string());
            assert!(op["responses"].as_object().is_some_and(|r| !r.is_empty()));
        }
    }
}

/// Every schema object in `v`, with its path.
fn schemas<'a>(v: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
    match v {
        Value::Object(map) => {
            out.push((path.clone(), v));
            for (k, item) in map {
                schemas(item, format!("{path}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                schemas(item, format!("{path}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn no_integer_is_documented_with_a_format_narrower_than_its_bounds() {
    // Generators read `format: int64` as a bound: a u64 field documented so
    // would have its upper half called invalid though the server takes it.
    let doc = rdq_server::api::openapi::document().unwrap();
    let mut all = Vec::new();
    schemas(&doc, String::new(), &mut all);
    let mut unsigned = 0;
    for (path, schema) in all {
        let max = schema["maximum"].as_u64();
        let unsigned_min = schema["minimum"].as_u64().is_some();
        match schema["format"].as_str() {
            // A derived u64 (a non-negative minimum, no smaller maximum)
            // must not say int64.
            Some("int64") => assert!(
                max.is_some_and(|m| m <= i64::MAX as u64) || (max.is_none() && !unsigned_min),
                "{path}: int64 with bounds {:?}..{max:?}",
                schema["minimum"]
            ),
            Some("int32") => assert!(
                max.is_none_or(|m| m <= i32::MAX as u64),
                "{path}: int32 with maximum {max:?}"
            ),
            Some("uint64") => unsigned += 1,
            _ => {}
        }
    }
    assert!(unsigned > 0, "no uint64 field: the rule was not applied");
}

#[tokio::test]
async fn every_documented_operation_answers_on_the_running_server() {
    let server = TestServer::start().await;
    let served = server.get("/openapi.json").await;
    assert_eq!(served.body, rdq_server::api::openapi::document().unwrap());
    for (method, path) in documented(&served.body) {
        let concrete = path
            .replace("{id}", "01J2ZK7Q8XW5H3N9G4T6B8RDQ0")
            .replace("{queue}", "probe");
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let r = server.raw(method.clone(), &concrete, b"{}".to_vec()).await;
        let code = r.body["code"].as_str().unwrap_or("");
        assert!(
            code != "ROUTE_NOT_FOUND" && code != "METHOD_NOT_ALLOWED",
            "{method} {path} is documented but not routed: {}",
            r.text
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn the_committed_document_is_the_one_the_server_serves() {
    let server = TestServer::start().await;
    let served = server.get("/openapi.json").await;
    server.stop().await;
    assert_eq!(served.status, reqwest::StatusCode::OK);
    // Keys sorted, two-space indent: the committed copy diffs well.
    let mut current = serde_json::to_string_pretty(&served.body).unwrap();
    current.push('\n');
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    if std::env::var_os("RDQ_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &current).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == current,
        "docs/openapi.json differs from GET /openapi.json: run RDQ_UPDATE_OPENAPI=1 cargo test -p rdq-server --test openapi"
    );
}
