//! The OpenAPI components the handlers' `#[utoipa::path]` annotations
//! name: path and header parameters, the problem responses, the `414`
//! answer. Kept apart from the document itself ([`super::openapi`]), which
//! lists the handlers, so no handler module and the document import each
//! other.

use rdq_api::schema::{QueueName, TaskId};
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::schema::{Object, Type};
use utoipa::openapi::{Content, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{IntoParams, ToResponse, ToSchema};

/// The `{id}` path parameter.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TaskPath {
    /// Task id (ULID)
    #[param(value_type = TaskId)]
    pub id: String,
}

/// The `{queue}` path parameter.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct QueuePath {
    /// Queue name, `[a-z0-9._-]{1,240}`, not `.` or `..`
    #[param(value_type = QueueName)]
    pub queue: String,
}

/// The request headers a submit reads.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
pub struct SubmitHeaders {
    /// Used when the body has no idempotency_key; when present, 1 to 255 bytes of visible ASCII whatever the body says (else 400 INVALID_FIELD)
    #[param(
        rename = "Idempotency-Key",
        required = false,
        min_length = 1,
        max_length = 255,
        pattern = "^[ -~]*[!-~][ -~]*$"
    )]
    pub idempotency_key: String,
    /// W3C trace context, copied into the envelope's headers unless the body has one
    #[param(required = false)]
    pub traceparent: String,
}

/// The request header a batch submit reads.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
pub struct BatchHeaders {
    /// W3C trace context, copied into each item's headers that has none
    #[param(required = false)]
    pub traceparent: String,
}

/// The value of the `rdq-config-scope` response header.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum ConfigScope {
    /// The policy lives in this server process (RabbitMQ).
    Process,
}

/// Declares a problem response of `components.responses`.
macro_rules! problem_response {
    ($name:ident, $description:expr) => {
        problem_response!($name, $description, |response| response);
    };
    ($name:ident, $description:expr, $extra:expr) => {
        #[doc = $description]
        pub struct $name;

        impl<'r> ToResponse<'r> for $name {
            fn response() -> (&'r str, RefOr<Response>) {
                let response = ResponseBuilder::new().description($description).content(
                    rdq_api::problem::PROBLEM_CONTENT_TYPE,
                    Content::new(Some(Ref::from_schema_name("Problem"))),
                );
                (stringify!($name), $extra(response).build().into())
            }
        }
    };
}

problem_response!(
    Problem400,
    "Malformed or invalid input (MALFORMED_REQUEST: not JSON, an empty body, wrong type, unknown or missing field; INVALID_FIELD, INVALID_QUEUE_NAME, INVALID_HANDLER_REF, RESERVED_HEADER, INVALID_POLICY, INVALID_ARGUMENT, INVALID_IMPORT)"
);
problem_response!(
    Problem401,
    "Tokens are configured and the request has no known bearer token (UNAUTHENTICATED)",
    |response: ResponseBuilder| response.header(
        "WWW-Authenticate",
        HeaderBuilder::new()
            .description(Some("Bearer realm=\"rdq\""))
            .schema(Some(Object::with_type(Type::String)))
            .build()
    )
);
problem_response!(
    Problem403,
    "The token lacks the scope or the queue (FORBIDDEN)"
);
problem_response!(
    Problem404,
    "Unknown task, queue, schedule or source (TASK_NOT_FOUND, QUEUE_NOT_FOUND, SCHEDULE_NOT_FOUND, SOURCE_NOT_FOUND); a queue-scoped token gets TASK_NOT_FOUND for another queue's task too"
);
problem_response!(
    Problem409,
    "The lease is no longer held (LEASE_LOST), the task's status or counters do not allow this (INVALID_TRANSITION), the task exists (TASK_EXISTS), or another task holds the unique key (UNIQUE_HELD, naming it in `holder`)"
);
problem_response!(
    Problem413,
    "The body exceeds max_request_bytes (max_import_bytes for an import), or the envelope the queue's max_envelope_bytes (PAYLOAD_TOO_LARGE)"
);
problem_response!(
    Problem501,
    "The store cannot do this (UNSUPPORTED, with a hint)"
);
problem_response!(
    Problem503,
    "The store does not answer (STORE_UNAVAILABLE) or the server is shutting down (SHUTTING_DOWN)"
);

/// A request line (path and query string) over 65,534 bytes, refused by
/// the HTTP layer before routing.
pub struct UriTooLong;

impl<'r> ToResponse<'r> for UriTooLong {
    fn response() -> (&'r str, RefOr<Response>) {
        (
            "UriTooLong",
            ResponseBuilder::new()
                .description("The request line (path and query string) is longer than 65,534 bytes: refused by the HTTP layer before routing, with an empty body")
                .build()
                .into(),
        )
    }
}
