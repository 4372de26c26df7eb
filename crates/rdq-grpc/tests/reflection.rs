//! Server reflection lists exactly the services the router serves: the six
//! `rdq.v1` services, health and reflection itself, and not
//! `rdq.v1.Handler` (a callback target's service, which rdq does not
//! serve); every listed service answers, and its descriptor resolves.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use rdq_app::{App, AppParts};
use rdq_engine::{Engine, SystemClock};
use rdq_grpc::GrpcApi;
use rdq_store_memory::MemoryStore;
use tonic::transport::{Channel, Endpoint};
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};

async fn serve() -> Channel {
    let engine = Engine::new(Arc::new(MemoryStore::new()), Arc::new(SystemClock));
    let app = App::new(AppParts::local(engine)).await.unwrap();
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

async fn ask(channel: &Channel, request: MessageRequest) -> MessageResponse {
    let mut client = ServerReflectionClient::new(channel.clone());
    let ask = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let mut answers = client
        .server_reflection_info(tokio_stream::iter([ask]))
        .await
        .unwrap()
        .into_inner();
    let answer: ServerReflectionResponse = answers.message().await.unwrap().unwrap();
    answer.message_response.unwrap()
}

#[tokio::test]
async fn reflection_lists_the_served_services_and_not_the_handler() {
    let channel = serve().await;
    let MessageResponse::ListServicesResponse(list) =
        ask(&channel, MessageRequest::ListServices(String::new())).await
    else {
        panic!("no service list");
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "rdq.v1.Dlq",
            "rdq.v1.Queues",
            "rdq.v1.Schedules",
            "rdq.v1.Sources",
            "rdq.v1.Tasks",
            "rdq.v1.Workers",
        ]
    );
    assert!(!names.iter().any(|n| n == "rdq.v1.Handler"));

    // Each listed service is described, health included.
    for name in &names {
        let answer = ask(&channel, MessageRequest::FileContainingSymbol(name.clone())).await;
        assert!(
            matches!(answer, MessageResponse::FileDescriptorResponse(ref f) if !f.file_descriptor_proto.is_empty()),
            "{name}: {answer:?}"
        );
    }
}

#[tokio::test]
async fn every_listed_service_answers_and_the_handler_does_not() {
    let channel = serve().await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    for service in [
        "",
        "rdq.v1.Tasks",
        "rdq.v1.Queues",
        "rdq.v1.Dlq",
        "rdq.v1.Workers",
        "rdq.v1.Schedules",
        "rdq.v1.Sources",
    ] {
        let status = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(
            status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
            "{service:?}"
        );
    }
    let mut handler = rdq_grpc::pb::handler_client::HandlerClient::new(channel);
    let refused = handler
        .handle(rdq_grpc::pb::HandleRequest { envelope: None })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unimplemented);
}
