//! `/v1/sources`: the status of the server's sources, filtered by the
//! caller's queues; `DELETE /v1/sources/{name}/cursors`, admin-only and
//! audited; the `rdq_source_*` metrics; and a bad `[[sources]]` table
//! refused when the server is built. The statuses are registered by hand,
//! as a source reports them, so no broker is needed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;

use common::{TestServer, test_config};
use reqwest::{Method, StatusCode};
use serde_json::json;

const READER: &str = "orders-reader-token-0001";
const ORDERS_ADMIN: &str = "orders-admin-token-00001";
const OPS: &str = "ops-token-00000000000001";

fn secured_config() -> rdq_server::ServerConfig {
    let mut config = rdq_server::ServerConfig::from_toml(&format!(
        r#"
        [[tokens]]
        name = "orders-reader"
        token = "{READER}"
        scopes = ["work"]
        queues = ["orders"]
        [[tokens]]
        name = "orders-admin"
        token = "{ORDERS_ADMIN}"
        scopes = ["admin"]
        queues = ["orders"]
        [[tokens]]
        name = "ops"
        token = "{OPS}"
        scopes = ["admin"]
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

/// Two sources as they report themselves: `orders` (Kafka) retrying after
/// an error, `audit.events` (JetStream) running with a measured lag.
fn register(sources: &rdq_source::Registry) {
    sources.add("orders", rdq_source::Kind::Kafka, "orders");
    sources.error(
        "orders",
        "source orders: broker 127.0.0.1:1 is unreachable",
        1_767_225_600_000,
    );
    sources.add("audit.events", rdq_source::Kind::Nats, "audit");
    sources.update("audit.events", |s| {
        s.state = rdq_source::SourceState::Running;
        s.lag = Some(12);
        s.ingested = 40;
        s.dead = 1;
        s.duplicates = 3;
        s.cursors_in_store = true;
        s.partitions.push(rdq_source::PartitionStatus {
            partition: "AUDIT".into(),
            cursor: Some(45),
            lag: Some(12),
        });
    });
}

#[tokio::test]
async fn sources_are_listed_and_read_by_name() {
    let server = TestServer::start().await;
    let empty = server.get("/v1/sources").await;
    assert_eq!(empty.status, StatusCode::OK, "{}", empty.text);
    assert_eq!(empty.body, json!({"sources": []}));
    register(&server.sources);

    let all = server.get("/v1/sources").await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    let names: Vec<&str> = all.body["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["audit.events", "orders"]);

    let orders = server.get("/v1/sources/orders").await;
    assert_eq!(orders.status, StatusCode::OK, "{}", orders.text);
    let body = &orders.body;
    assert_eq!(body["kind"], "kafka");
    assert_eq!(body["queue"], "orders");
    assert_eq!(body["state"], "retrying");
    assert_eq!(body["paused"], false);
    assert_eq!(body["lag"], json!(null));
    assert_eq!(body["ingested"], 0);
    assert_eq!(body["rate"], 0.0);
    assert_eq!(body["last_error_at_ms"], 1_767_225_600_000_i64);
    assert!(body["last_error"].as_str().unwrap().contains("unreachable"));
    assert_eq!(body["partitions"], json!([]));

    let audit = server.get("/v1/sources/audit.events").await;
    assert_eq!(audit.body["state"], "running");
    assert_eq!(audit.body["kind"], "nats");
    assert_eq!(audit.body["lag"], 12);
    assert_eq!(audit.body["dead"], 1);
    assert_eq!(audit.body["duplicates"], 3);
    assert_eq!(audit.body["cursors_in_store"], true);
    assert_eq!(
        audit.body["partitions"],
        json!([{"partition": "AUDIT", "cursor": 45, "lag": 12}])
    );

    server
        .get("/v1/sources/nope")
        .await
        .assert_problem(404, "SOURCE_NOT_FOUND");
    server
        .get("/v1/sources/Not%20A%20Name")
        .await
        .assert_problem(400, "INVALID_ARGUMENT");
    server.stop().await;
}

#[tokio::test]
async fn a_token_sees_only_the_sources_of_its_queues() {
    let server = TestServer::with(
        secured_config(),
        Arc::new(rdq_store_memory::MemoryStore::new()),
    )
    .await;
    register(&server.sources);
    server
        .call_as(None, Method::GET, "/v1/sources", None)
        .await
        .assert_problem(401, "UNAUTHENTICATED");
    let listed = server
        .call_as(Some(READER), Method::GET, "/v1/sources", None)
        .await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text);
    let sources = listed.body["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 1);
    assert_eq!(sources[0]["name"], "orders");
    // Another queue's source cannot be told from a missing one.
    server
        .call_as(Some(READER), Method::GET, "/v1/sources/audit.events", None)
        .await
        .assert_problem(404, "SOURCE_NOT_FOUND");
    let ops = server
        .call_as(Some(OPS), Method::GET, "/v1/sources", None)
        .await;
    assert_eq!(ops.body["sources"].as_array().unwrap().len(), 2);
    server.stop().await;
}

async fn reset(server: &TestServer, token: &str, name: &str) -> common::Reply {
    let path = format!("/v1/sources/{name}/cursors");
    server
        .call_as(Some(token), Method::DELETE, &path, None)
        .await
}

#[tokio::test]
async fn resetting_cursors_needs_admin_and_is_audited() {
    let server = TestServer::with(
        secured_config(),
        Arc::new(rdq_store_memory::MemoryStore::new()),
    )
    .await;
    register(&server.sources);
    reset(&server, READER, "orders")
        .await
        .assert_problem(403, "FORBIDDEN");
    // A queue-scoped admin cannot reset a source of another queue, nor one
    // this server does not run (its queue is unknown).
    reset(&server, ORDERS_ADMIN, "audit.events")
        .await
        .assert_problem(404, "SOURCE_NOT_FOUND");
    reset(&server, ORDERS_ADMIN, "elsewhere")
        .await
        .assert_problem(403, "FORBIDDEN");
    reset(&server, OPS, "Bad Name")
        .await
        .assert_problem(400, "INVALID_ARGUMENT");

    let done = reset(&server, ORDERS_ADMIN, "orders").await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
    assert_eq!(done.body, json!({"name": "orders", "deleted": 0}));
    let done = reset(&server, OPS, "elsewhere").await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.text);

    let audit = server
        .call_as(Some(OPS), Method::GET, "/v1/audit", None)
        .await;
    let records: Vec<_> = audit.body["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "source.reset")
        .collect();
    assert_eq!(records.len(), 2, "{}", audit.text);
    assert_eq!(records[0]["who"], "ops");
    assert_eq!(records[0]["detail"]["name"], "elsewhere");
    assert_eq!(records[1]["who"], "orders-admin");
    assert_eq!(records[1]["queue"], "orders");
    assert_eq!(records[1]["count"], 0);
    server.stop().await;
}

#[tokio::test]
async fn metrics_show_each_source() {
    let server = TestServer::start().await;
    let before = server.get("/metrics").await;
    assert!(!before.text.contains("rdq_source_"), "{}", before.text);
    register(&server.sources);
    let text = server.get("/metrics").await.text;
    for line in [
        "rdq_source_up{source=\"orders\",kind=\"kafka\"} 0",
        "rdq_source_up{source=\"audit.events\",kind=\"nats\"} 1",
        "rdq_source_lag{source=\"audit.events\",kind=\"nats\"} 12",
        "rdq_source_paused{source=\"orders\",kind=\"kafka\"} 0",
        "rdq_source_records_total{source=\"audit.events\",kind=\"nats\",outcome=\"ingested\"} 40",
        "rdq_source_records_total{source=\"audit.events\",kind=\"nats\",outcome=\"dead\"} 1",
        "rdq_source_records_total{source=\"audit.events\",kind=\"nats\",outcome=\"duplicate\"} 3",
        "rdq_source_rate{source=\"orders\",kind=\"kafka\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
    assert!(!text.contains("rdq_source_lag{source=\"orders\""), "{text}");
    server.stop().await;
}

#[tokio::test]
async fn a_bad_source_is_refused_when_the_server_is_built() {
    let mut config = test_config();
    config.sources = vec![
        serde_json::from_value(json!({
            "name": "orders",
            "queue": "orders",
            "handler": "order.created",
            "batch": 0,
            "kafka": {"brokers": "127.0.0.1:1", "topic": "orders"},
        }))
        .unwrap(),
    ];
    let Err(err) =
        rdq_server::Server::bind(config, Arc::new(rdq_store_memory::MemoryStore::new())).await
    else {
        panic!("a source with batch = 0 was accepted");
    };
    assert_eq!(err.code(), "INVALID_CONFIG");
    let text = err.to_string();
    assert!(text.contains("orders") && text.contains("batch"), "{text}");
}
