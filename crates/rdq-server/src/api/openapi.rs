//! The OpenAPI 3.1 document of the HTTP API, served at `/openapi.json` and
//! committed as `docs/openapi.json`.
//!
//! Generated with utoipa, not written by hand: the request and response
//! bodies are `rdq_api`'s types (`ToSchema`, `IntoParams`), each operation
//! is a `#[utoipa::path]` on its handler, and [`ApiDoc`] lists them. The
//! few schemas no type describes are written in `rdq_api::schema`, which
//! says why. What every operation shares is added here by rule, once
//! ([`SharedResponses`]): `414` everywhere, `400` and `413` with a body,
//! `401`, `403`, `501` and `503` where a token is needed.
//!
//! Tests hold the document to the router (every registered route is
//! documented, every documented operation is routed) and the committed
//! copy to what the server serves (`tests/openapi.rs`);
//! `tests/openapi_contract.rs` holds the server's answers to it, and
//! `tests/api/run.sh` fuzzes the live server against it
//! (`docs/testing.md`).
//!
//! What the document promises (`docs/http-api.md`): ids and names carry the
//! envelope's rules (`docs/envelope.md`) as `pattern` and lengths; an
//! integer is any number with a zero fraction (`668.0` too); an optional
//! field may be `null`, which means absent; every status and content type
//! the server can answer is listed.

use std::borrow::Cow;

use rdq_api::schema::{DeadReasonCode, Glob, QueueName, QueueNameItem, SettleBatchItem, TaskId};
use serde_json::{Value, json};
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::path::Operation;
use utoipa::openapi::schema::{KnownFormat, SchemaFormat};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{Ref, RefOr, Required, Schema};
use utoipa::{Modify, Number, OpenApi};

use axum::http::StatusCode;

use super::components::{
    Problem400, Problem401, Problem403, Problem404, Problem409, Problem413, Problem501, Problem503,
    UriTooLong,
};
use super::response::json_response;
use super::{dead, health, insights, queues, schedules, sources, tasks, workers};

/// The document: every operation, and the components no operation names
/// directly.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "rdq-server",
        description = "rdq's HTTP API: submit tasks, pull workers, queue configuration and the dead-letter queue. Errors are application/problem+json with a stable `code`. Bodies are parsed strictly whatever their Content-Type; an integer is any number with a zero fraction (668.0 is 668); an optional field may be null, which means absent. Without configured tokens the server is open (loopback only) and answers no 401 or 403. See docs/http-api.md.",
    ),
    servers((url = "http://127.0.0.1:7480")),
    security(("bearerAuth" = [])),
    paths(
        tasks::submit,
        tasks::submit_batch,
        tasks::get,
        tasks::delete,
        tasks::cancel,
        tasks::list,
        workers::claim,
        workers::settle,
        workers::settle_batch,
        workers::extend_lease,
        queues::list,
        queues::capabilities,
        queues::get_config,
        queues::put_config,
        queues::get_flow,
        queues::throttle,
        dead::list,
        dead::get,
        dead::redrive,
        dead::export,
        dead::reasons,
        dead::import,
        dead::purge,
        insights::whoami,
        insights::overview,
        insights::breakdown,
        insights::audit,
        schedules::list,
        schedules::get,
        schedules::put,
        schedules::delete,
        schedules::pause,
        schedules::resume,
        schedules::run,
        schedules::next,
        sources::list,
        sources::get,
        sources::reset_cursors,
        health::healthz,
        health::readyz,
        health::metrics,
        openapi,
    ),
    // What utoipa does not collect by itself: the schemas that only
    // responses, parameters and hand-written schemas refer to.
    components(
        schemas(rdq_api::Problem, SettleBatchItem, QueueNameItem, TaskId, QueueName, Glob, DeadReasonCode),
        responses(
            Problem400, Problem401, Problem403, Problem404, Problem409, Problem413,
            Problem501, Problem503, UriTooLong
        )
    ),
    modifiers(
        &SharedResponses,
        &BearerAuth,
        &ExclusivePayloads,
        &OptionalImportBody,
        &Unsigned64
    )
)]
pub struct ApiDoc;

#[utoipa::path(
    get, path = "/openapi.json", operation_id = "openapi", tag = "operations", summary = "This document",
    security(),
    responses((status = 200, description = "OpenAPI 3.1", body = Object, content_type = "application/json")),
)]
/// `GET /openapi.json`: the API's OpenAPI 3 document.
pub async fn openapi() -> axum::response::Response {
    json_response(StatusCode::OK, &ApiDoc::openapi())
}

/// The whole document as a JSON value, as `/openapi.json` serves it.
pub fn document() -> Result<Value, serde_json::Error> {
    serde_json::to_value(ApiDoc::openapi())
}

/// The responses every operation shares, by rule: any request line can be
/// too long (`414`); a body can be malformed or too large (`400`, `413`);
/// an operation behind a token can be refused (`401`, `403`) and, like
/// every store call, meet a store that cannot do it or does not answer
/// (`501`, `503`). An operation that declares `security` is public (`[]`)
/// or takes a token optionally (`/metrics`: `401` and `403` only).
struct SharedResponses;

impl Modify for SharedResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.options,
                &mut item.head,
                &mut item.patch,
                &mut item.trace,
            ]
            .into_iter()
            .flatten()
            {
                add_shared(op);
            }
        }
    }
}

fn add_shared(op: &mut Operation) {
    let mut codes = vec![414];
    if op.request_body.is_some() {
        codes.extend([400, 413]);
    }
    match &op.security {
        None => codes.extend([401, 403, 501, 503]),
        Some(requirements) if !requirements.is_empty() => codes.extend([401, 403]),
        Some(_) => {}
    }
    for code in codes {
        let name = if code == 414 {
            Cow::Borrowed("UriTooLong")
        } else {
            Cow::Owned(format!("Problem{code}"))
        };
        op.responses
            .responses
            .entry(code.to_string())
            .or_insert_with(|| RefOr::Ref(Ref::from_response_name(name)));
    }
}

/// The `bearerAuth` scheme the document's `security` names.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme(
                "bearerAuth",
                SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
            );
        }
    }
}

/// A submit takes `payload` or `payload_json`, not both: a rule between
/// two fields, which a derived schema cannot state.
struct ExclusivePayloads;

impl Modify for ExclusivePayloads {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        if let Some(RefOr::T(Schema::Object(submit))) = components.schemas.get_mut("SubmitRequest")
        {
            let not = json!({"required": ["payload", "payload_json"], "properties": {"payload": {"type": "string"}}});
            let mut extensions = submit.extensions.take().unwrap_or_default();
            extensions.merge([("not", not)].into_iter().collect::<Extensions>());
            submit.extensions = Some(extensions);
        }
    }
}

/// An import's body may be empty (an empty JSONL file, what exporting an
/// empty DLQ writes), which imports nothing. utoipa makes a body optional
/// only through an `Option` type, whose schema would then admit `null`,
/// which no text body is; so the annotation names a `String` and this
/// marks the body optional.
struct OptionalImportBody;

impl Modify for OptionalImportBody {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(RefOr::T(body)) = openapi
            .paths
            .paths
            .get_mut("/v1/queues/{queue}/dead/import")
            .and_then(|item| item.post.as_mut())
            .and_then(|op| op.request_body.as_mut())
        {
            body.required = Some(Required::False);
        }
    }
}

/// utoipa writes a `u64` as `format: int64`, whose range is half of it,
/// and generators read the format as a bound: `lease_ms` of 2^63 would be
/// called invalid though the server takes it. A property that is an
/// unsigned 64-bit integer (`int64` with a `minimum` of 0 or more) says
/// `uint64`.
struct Unsigned64;

impl Modify for Unsigned64 {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        for schema in components.schemas.values_mut() {
            let RefOr::T(Schema::Object(object)) = schema else {
                continue;
            };
            for property in object.properties.values_mut() {
                if let RefOr::T(Schema::Object(field)) = property
                    && field.format == Some(SchemaFormat::KnownFormat(KnownFormat::Int64))
                    && field.minimum.as_ref().is_some_and(is_non_negative)
                {
                    field.format = Some(SchemaFormat::Custom("uint64".to_owned()));
                }
            }
        }
    }
}

fn is_non_negative(n: &Number) -> bool {
    match n {
        Number::Int(i) => *i >= 0,
        Number::UInt(_) => true,
        Number::Float(f) => *f >= 0.0,
    }
}
