//! `rdq.v1.Sources`: the status of the server's sources as `/v1/sources`
//! shows it, SOURCE_NOT_FOUND as NOT_FOUND, and a cursor reset. The status
//! is registered by hand, as a source reports it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use rdq_app::{App, AppParts};
use rdq_engine::{Engine, SystemClock};
use rdq_grpc::GrpcApi;
use rdq_grpc::pb;
use rdq_grpc::pb::sources_client::SourcesClient;
use rdq_store_memory::MemoryStore;
use tonic::transport::{Channel, Endpoint};

async fn serve(sources: rdq_source::Registry) -> Channel {
    let engine = Engine::new(Arc::new(MemoryStore::new()), Arc::new(SystemClock));
    let app = App::new(AppParts {
        sources,
        ..AppParts::local(engine)
    })
    .await
    .unwrap();
    let router = rdq_grpc::grpc_router(GrpcApi::new(app));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn sources_are_listed_read_and_reset() {
    let registry = rdq_source::Registry::default();
    registry.add("orders", rdq_source::Kind::Kafka, "orders");
    registry.update("orders", |s| {
        s.state = rdq_source::SourceState::Running;
        s.lag = Some(3);
        s.ingested = 9;
        s.partitions.push(rdq_source::PartitionStatus {
            partition: "0".into(),
            cursor: Some(9),
            lag: Some(3),
        });
    });
    registry.add("events", rdq_source::Kind::Sqs, "events");
    registry.error("events", "source events: the queue does not exist", 7);
    let mut client = SourcesClient::new(serve(registry).await);

    let list = client
        .list(pb::ListSourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = list.sources.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["events", "orders"]);

    let orders = client
        .get(pb::GetSourceRequest {
            name: "orders".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(orders.kind, "kafka");
    assert_eq!(orders.state, "running");
    assert_eq!(orders.lag, Some(3));
    assert_eq!(orders.ingested, 9);
    assert_eq!(orders.last_error, None);
    assert_eq!(
        orders.partitions,
        [pb::SourcePartition {
            partition: "0".into(),
            cursor: Some(9),
            lag: Some(3),
        }]
    );
    let events = &list.sources[0];
    assert_eq!(events.state, "retrying");
    assert_eq!(events.kind, "sqs");
    assert_eq!(events.last_error_at_ms, Some(7));

    let missing = client
        .get(pb::GetSourceRequest {
            name: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert!(
        missing.message().starts_with("SOURCE_NOT_FOUND"),
        "{missing:?}"
    );
    let bad = client
        .get(pb::GetSourceRequest {
            name: "Bad Name".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);

    let reset = client
        .reset_cursors(pb::ResetSourceCursorsRequest {
            name: "orders".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reset.name, "orders");
    assert_eq!(reset.deleted, 0);
}
