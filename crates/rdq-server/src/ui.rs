//! The web dashboard at `/ui` (`docs/dashboard.md`): a few hand-written
//! files under `web/ui/`, built into the binary, so the dashboard works
//! offline and behind a firewall with nothing to deploy.
//!
//! The files hold no data and need no token; everything they show comes
//! from the API, called by the page with the token the operator entered
//! (an `Authorization` header, never a cookie or a URL), under the API's
//! usual scope checks. Every response carries a Content-Security-Policy
//! that allows only this origin's own script, style and API: no inline
//! script, no framing, no other origin.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::request::PathArgs;

/// The policy on every `/ui` response.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// One built-in file: its name under `/ui/`, content type and bytes.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const INDEX: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("../../../web/ui/index.html"),
};

const ASSETS: [Asset; 4] = [
    INDEX,
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../../web/ui/app.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../../../web/ui/app.css"),
    },
    Asset {
        name: "favicon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("../../../web/ui/favicon.svg"),
    },
];

/// The dashboard's routes: `/ui` and `/ui/` (the page) and `/ui/{file}`.
/// They read no state, so they merge into a router of any state.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/{file}", get(file))
}

async fn index() -> Response {
    respond(StatusCode::OK, INDEX.content_type, INDEX.body)
}

async fn file(PathArgs(name): PathArgs<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => respond(StatusCode::OK, a.content_type, a.body),
        None => respond(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            b"no such dashboard file\n",
        ),
    }
}

fn respond(status: StatusCode, content_type: &'static str, body: &'static [u8]) -> Response {
    let mut response = (status, Body::from(body)).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
