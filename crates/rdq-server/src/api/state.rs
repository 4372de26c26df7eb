//! What every HTTP handler can reach ([`AppState`]): the application layer,
//! plus what only the HTTP server has (the callback dispatcher and settings,
//! whether `/metrics` is public), and the caller behind a request's bearer
//! token as an extractor.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderValue, header};
use rdq_app::{App, Caller};

use crate::callback::{CallbackSettings, Dispatcher};
use crate::problem::ApiError;

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
