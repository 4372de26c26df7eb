//! The HTTP API's route table: every route, the dashboard's, and the
//! problem+json fallbacks for an unknown route or method.
//!
//! One file per resource: [`tasks`] (submit, read, delete), [`queues`]
//! (counts, live policy), [`dead`] (the DLQ), [`workers`] (the pull-worker
//! API), [`schedules`], [`sources`] (the sources' status and cursors),
//! [`insights`] (the dashboard's queries) and [`health`] (liveness,
//! readiness, metrics, the OpenAPI document); the handlers share
//! [`state`] (what every handler can reach) and [`response`] (envelopes and
//! values as response bodies), and import nothing from this file. Every
//! route is registered through [`RouteTable`], which remembers what it
//! registered, so a test can hold the router and `openapi.json` to each other.

pub mod components;
pub mod dead;
pub mod health;
pub mod insights;
pub mod openapi;
pub mod queues;
pub mod response;
pub mod schedules;
pub mod sources;
pub mod state;
pub mod tasks;
pub mod workers;

pub use state::AppState;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::http::{Method, StatusCode};
use axum::routing::{MethodFilter, MethodRouter, on};

use crate::problem::{ApiError, METHOD_NOT_ALLOWED, ROUTE_NOT_FOUND};

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
        .add(Method::POST, "/v1/queues/{queue}/cancel", tasks::cancel)
        .add(Method::GET, "/v1/queues/{queue}/tasks", tasks::list)
        .add(Method::POST, "/v1/tasks/{id}/settle", workers::settle)
        .add(Method::POST, "/v1/tasks/{id}/lease", workers::extend_lease)
        .add(Method::POST, "/v1/settle", workers::settle_batch)
        .add(Method::GET, "/v1/queues", queues::list)
        .add(Method::GET, "/v1/capabilities", queues::capabilities)
        .add(Method::GET, "/v1/queues/{queue}/config", queues::get_config)
        .add(Method::PUT, "/v1/queues/{queue}/config", queues::put_config)
        .add(Method::GET, "/v1/queues/{queue}/flow", queues::get_flow)
        .add(
            Method::POST,
            "/v1/queues/{queue}/throttle",
            queues::throttle,
        )
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
            "/v1/queues/{queue}/dead/reasons",
            dead::reasons,
        )
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
        .add(Method::GET, "/v1/schedules", schedules::list)
        .add(Method::GET, "/v1/schedules/{name}", schedules::get)
        .add(Method::PUT, "/v1/schedules/{name}", schedules::put)
        .add(Method::DELETE, "/v1/schedules/{name}", schedules::delete)
        .add(Method::POST, "/v1/schedules/{name}/pause", schedules::pause)
        .add(
            Method::POST,
            "/v1/schedules/{name}/resume",
            schedules::resume,
        )
        .add(Method::POST, "/v1/schedules/{name}/run", schedules::run)
        .add(Method::GET, "/v1/schedules/{name}/next", schedules::next)
        .add(Method::GET, "/v1/sources", sources::list)
        .add(Method::GET, "/v1/sources/{name}", sources::get)
        .add(
            Method::DELETE,
            "/v1/sources/{name}/cursors",
            sources::reset_cursors,
        )
        .add(Method::GET, "/healthz", health::healthz)
        .add(Method::GET, "/readyz", health::readyz)
        .add(Method::GET, "/metrics", health::metrics)
        .add(Method::GET, "/openapi.json", openapi::openapi)
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
