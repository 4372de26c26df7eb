//! Every `rdq.v1` service the server serves, the standard
//! `grpc.health.v1.Health` service and server reflection
//! (`grpc.reflection.v1`), as one axum router, and the multiplexer
//! `rdq serve` uses to answer gRPC and HTTP on one address.
//!
//! Reflection lists exactly the services the router answers:
//! `rdq.v1.Handler`, also in `proto/rdq/v1`, is what a callback target
//! implements, not something rdq serves.

use std::convert::Infallible;

use axum::Router;
use axum::extract::Request;
use axum::http::header::CONTENT_TYPE;
use tonic::server::NamedService;
use tonic::service::Routes;
use tower::ServiceExt as _;

use crate::pb;
use crate::service::GrpcApi;
use crate::wire::WorkCodec;
use crate::work::{WORK_PATH, WorkMethod};

/// Service name the health service reports for the whole server.
pub const HEALTH_SERVICE: &str = "";

/// The `rdq.v1` services the router serves.
pub const RDQ_SERVICES: [&str; 6] = [
    <pb::tasks_server::TasksServer<GrpcApi> as NamedService>::NAME,
    <pb::queues_server::QueuesServer<GrpcApi> as NamedService>::NAME,
    <pb::dlq_server::DlqServer<GrpcApi> as NamedService>::NAME,
    <pb::workers_server::WorkersServer<GrpcApi> as NamedService>::NAME,
    <pb::schedules_server::SchedulesServer<GrpcApi> as NamedService>::NAME,
    <pb::sources_server::SourcesServer<GrpcApi> as NamedService>::NAME,
];

/// The standard services the router serves beside them: health and
/// reflection itself.
pub const STANDARD_SERVICES: [&str; 2] = [
    tonic_health::pb::health_server::SERVICE_NAME,
    tonic_reflection::pb::v1::server_reflection_server::SERVICE_NAME,
];

/// The gRPC services over `api` as a router (gRPC paths only, no fallback).
/// Health reports `SERVING` for the server and every `rdq.v1` service;
/// callers need no token for health or reflection.
pub fn grpc_router(api: GrpcApi) -> Router {
    let (reporter, health) = tonic_health::server::health_reporter();
    tokio::spawn(async move {
        for name in std::iter::once(HEALTH_SERVICE).chain(RDQ_SERVICES) {
            reporter
                .set_service_status(name, tonic_health::ServingStatus::Serving)
                .await;
        }
    });
    // The Work method writes its tasks itself (`wire`); the generated
    // server answers the `Workers` service's other methods.
    let work = WorkMethod(api.app().clone());
    let work = tower::service_fn(move |request: Request| {
        let work = work.clone();
        async move {
            let mut grpc = tonic::server::Grpc::new(WorkCodec);
            Ok::<_, Infallible>(grpc.streaming(work, request).await)
        }
    });
    let mut routes = Routes::new(pb::tasks_server::TasksServer::new(api.clone()))
        .add_service(pb::queues_server::QueuesServer::new(api.clone()))
        .add_service(pb::dlq_server::DlqServer::new(api.clone()))
        .add_service(pb::schedules_server::SchedulesServer::new(api.clone()))
        .add_service(pb::sources_server::SourcesServer::new(api.clone()))
        .add_service(pb::workers_server::WorkersServer::new(api))
        .add_service(health);
    let reflection = RDQ_SERVICES.into_iter().chain(STANDARD_SERVICES).fold(
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET),
        |builder, name| builder.with_service_name(name),
    );
    match reflection.build_v1() {
        Ok(reflection) => routes = routes.add_service(reflection),
        Err(e) => tracing::warn!(error = %e, "gRPC server reflection is off"),
    }
    routes.into_axum_router().route_service(WORK_PATH, work)
}

/// True when a request is gRPC (`content-type: application/grpc…`).
pub fn is_grpc(request: &Request) -> bool {
    request
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// One router answering gRPC requests with `grpc` and every other request
/// with `http`, told apart by content type, so both share one address.
pub fn multiplex(http: Router, grpc: Router) -> Router {
    Router::new().fallback_service(tower::service_fn(move |request: Request| {
        let target = if is_grpc(&request) {
            grpc.clone()
        } else {
            http.clone()
        };
        target.oneshot(request)
    }))
}
