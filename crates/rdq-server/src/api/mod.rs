//! The HTTP API: the route table, the shared state handlers see, and the
//! helpers that turn envelopes into responses.
//!
//! One file per resource: [`tasks`] (submit, read, delete), [`queues`]
//! (counts, live policy), [`dead`] (the DLQ), [`workers`] (the pull-worker
//! API) and [`health`] (liveness, readiness, metrics, the OpenAPI document).
//! Every route is registered through [`RouteTable`], which remembers what it
//! registered, so a test can hold the router and `openapi.json` to each other.

pub mod dead;
pub mod health;
pub mod insights;
pub mod openapi;
pub mod queues;
pub mod tasks;
pub mod workers;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRequestParts};
use axum::handler::Handler;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, on};
use rdq_app::{App, Caller};
use rdq_envelope::{Envelope, TaskId};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::callback::{CallbackSettings, Dispatcher};
use crate::problem::{ApiError, METHOD_NOT_ALLOWED, ROUTE_NOT_FOUND};

/// What every handler can reach: the application layer, plus what only
/// the HTTP server has. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    app: App,
    inner: Arc<StateInner>,
}

struct StateInner {
    dispatcher: Arc<Dispatcher>,
    callbacks: CallbackSettings,
    public_metrics: bool,
}

impl AppState {
    /// Assembles the state.
    pub fn new(
        app: App,
        dispatcher: Arc<Dispatcher>,
        callbacks: CallbackSettings,
        public_metrics: bool,
    ) -> Self {
        Self {
            app,
            inner: Arc::new(StateInner {
                dispatcher,
                callbacks,
                public_metrics,
            }),
        }
    }

    /// The application layer: every use case.
    pub fn app(&self) -> &App {
        &self.app
    }

    /// The callback dispatcher.
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.inner.dispatcher
    }

    /// The `[callbacks]` settings.
    pub fn callbacks(&self) -> &CallbackSettings {
        &self.inner.callbacks
    }

    /// Whether `/metrics` needs no token.
    pub fn public_metrics(&self) -> bool {
        self.inner.public_metrics
    }

    /// The caller behind `parts`' `Authorization` header.
    pub fn authenticate(&self, parts: &Parts) -> Result<Caller, ApiError> {
        Ok(self.app.authenticate(
            parts
                .headers
                .get(header::AUTHORIZATION)
                .map(HeaderValue::as_bytes),
        )?)
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        state.authenticate(parts)
    }
}

/// Routes as they are registered: the router plus the list of
/// `(method, path)` pairs it holds.
pub struct RouteTable {
    router: Router<AppState>,
    routes: Vec<(Method, &'static str)>,
}

impl RouteTable {
    fn new() -> Self {
        Self {
            router: Router::new(),
            routes: Vec::new(),
        }
    }

    fn add<H, T>(self, method: Method, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.add_router(method, path, |filter| on(filter, handler))
    }

    fn add_router(
        mut self,
        method: Method,
        path: &'static str,
        make: impl FnOnce(MethodFilter) -> MethodRouter<AppState>,
    ) -> Self {
        let Ok(filter) = MethodFilter::try_from(method.clone()) else {
            return self;
        };
        self.router = self.router.route(path, make(filter));
        self.routes.push((method, path));
        self
    }

    /// Every `(method, path)` registered, in registration order.
    pub fn routes(&self) -> &[(Method, &'static str)] {
        &self.routes
    }

    /// The router, with the body limit and problem+json fallbacks.
    pub fn into_router(self, state: AppState, max_request_bytes: usize) -> Router {
        self.router
            .merge(crate::ui::router::<AppState>())
            .fallback(route_not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .layer(DefaultBodyLimit::max(max_request_bytes))
            .with_state(state)
    }
}

/// The API's routes. Paths use OpenAPI's `{param}` syntax, which axum shares.
pub fn route_table(max_import_bytes: usize) -> RouteTable {
    RouteTable::new()
        .add(Method::POST, "/v1/tasks", tasks::submit)
        .add(Method::POST, "/v1/tasks/batch", tasks::submit_batch)
        .add(Method::GET, "/v1/tasks/{id}", tasks::get)
        .add(Method::DELETE, "/v1/tasks/{id}", tasks::delete)
        .add(Method::POST, "/v1/tasks/{id}/settle", workers::settle)
        .add(Method::POST, "/v1/tasks/{id}/lease", workers::extend_lease)
        .add(Method::POST, "/v1/settle", workers::settle_batch)
        .add(Method::GET, "/v1/queues", queues::list)
        .add(Method::GET, "/v1/capabilities", queues::capabilities)
        .add(Method::GET, "/v1/queues/{queue}/config", queues::get_config)
        .add(Method::PUT, "/v1/queues/{queue}/config", queues::put_config)
        .add(Method::POST, "/v1/queues/{queue}/claim", workers::claim)
        .add(Method::GET, "/v1/queues/{queue}/dead", dead::list)
        .add(Method::DELETE, "/v1/queues/{queue}/dead", dead::purge)
        .add(
            Method::POST,
            "/v1/queues/{queue}/dead/redrive",
            dead::redrive,
        )
        .add(Method::GET, "/v1/queues/{queue}/dead/export", dead::export)
        .add(
            Method::GET,
            "/v1/queues/{queue}/dead/breakdown",
            insights::breakdown,
        )
        .add(Method::GET, "/v1/whoami", insights::whoami)
        .add(Method::GET, "/v1/overview", insights::overview)
        .add(Method::GET, "/v1/audit", insights::audit)
        .add(Method::GET, "/v1/queues/{queue}/dead/{id}", dead::get)
        .add_router(
            Method::POST,
            "/v1/queues/{queue}/dead/import",
            move |filter| on(filter, dead::import).layer(DefaultBodyLimit::max(max_import_bytes)),
        )
        .add(Method::GET, "/healthz", health::healthz)
        .add(Method::GET, "/readyz", health::readyz)
        .add(Method::GET, "/metrics", health::metrics)
        .add(Method::GET, "/openapi.json", health::openapi)
}

async fn route_not_found() -> ApiError {
    ApiError::http_only(
        StatusCode::NOT_FOUND,
        ROUTE_NOT_FOUND,
        "no route has this path; see /openapi.json",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::http_only(
        StatusCode::METHOD_NOT_ALLOWED,
        METHOD_NOT_ALLOWED,
        "the route exists but not with this method; see /openapi.json",
    )
}

/// Parses a task id from a path or body, refusing with 400 `INVALID_ARGUMENT`.
pub fn parse_task_id(text: &str) -> Result<TaskId, ApiError> {
    TaskId::parse(text).ok_or_else(|| {
        ApiError::invalid_argument(format!("{text:?} is not a task id (a 26-character ULID)"))
    })
}

/// An envelope as a response body, in its canonical encoding.
pub fn envelope_response(status: StatusCode, env: &Envelope) -> Response {
    json_bytes(status, env.encode())
}

/// An envelope as an embeddable JSON value, byte for byte its canonical encoding.
pub fn raw_envelope(env: &Envelope) -> Box<RawValue> {
    RawValue::from_string(env.encode_string()).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// `value` serialised as a JSON response.
pub fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => json_bytes(status, bytes),
        Err(e) => {
            ApiError::internal(format!("the response did not serialise: {e}")).into_response()
        }
    }
}

fn json_bytes(status: StatusCode, bytes: Vec<u8>) -> Response {
    let mut response = (status, Body::from(bytes)).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
