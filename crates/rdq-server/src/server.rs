//! The composition root: binds the listener, assembles the engine, auth,
//! audit, metrics and dispatcher, runs the HTTP and gRPC server beside the
//! background services (the runtime's lease reaper, retention pruner and
//! scheduler, the callback dispatcher, and the configured sources), and
//! shuts everything down in order.
//!
//! Shutdown is one trigger ([`rdq_runtime::shutdown_channel`]) watched by
//! every part. When it fires: `/readyz` turns 503, the listener stops
//! accepting and in-flight requests finish (up to `shutdown_grace_ms`;
//! the listener itself is [`crate::listener`]), the
//! dispatcher stops claiming and lets running callbacks finish (handing back
//! what does not finish within the grace), the reaper, pruner, scheduler and
//! sources (`[[sources]]`, `rdq_source`) stop, and [`Server::run`] returns.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use rdq_engine::{Engine, Store, SystemClock};
use rdq_runtime::{PrunerConfig, ReaperConfig, run_pruner, run_reaper_with, shutdown_channel};
use tokio::net::TcpListener;
use tracing::{info, warn};

use rdq_app::{App, AppParts, AuditLog, Authenticator, Metrics, OutcomeLabel};

use crate::api::{AppState, route_table};
use crate::callback::{CallbackTarget, Dispatcher};
use crate::config::{ConfigError, ServerConfig};
use crate::listener::{self, TlsAcceptor};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {why}")]
    Bind {
        /// The address.
        addr: String,
        /// The OS error.
        why: String,
    },
    /// The audit log file could not be opened.
    #[error("cannot open the audit log {path}: {why}")]
    AuditLog {
        /// The file.
        path: String,
        /// The OS error.
        why: String,
    },
    /// The HTTP client for callbacks could not be built.
    #[error("cannot build the callback HTTP client: {0}")]
    Client(String),
    /// The HTTP server failed while running.
    #[error("the HTTP server failed: {0}")]
    Serve(String),
    /// The store could not give what the server needs to start (the lease
    /// secret); carries the store's code.
    #[error("the store cannot serve: {0}")]
    Store(rdq_engine::EngineError),
}

impl ServerError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Config(e) => e.code(),
            Self::Bind { .. } => "BIND_FAILED",
            Self::AuditLog { .. } => "IO_ERROR",
            Self::Client(_) | Self::Serve(_) => "SERVER_FAILED",
            Self::Store(e) => e.code(),
        }
    }
}

/// A bound, ready-to-run server.
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
    tls: Option<TlsAcceptor>,
    router: Router,
    state: AppState,
    engine: Engine,
    dispatcher: Arc<Dispatcher>,
    metrics: Arc<Metrics>,
    sources: rdq_source::Registry,
    config: ServerConfig,
}

impl Server {
    /// Checks `config`, binds its listen address and assembles the server
    /// over `store`. Refuses an open server (no tokens) on a non-loopback address.
    pub async fn bind(config: ServerConfig, store: Arc<dyn Store>) -> Result<Self, ServerError> {
        let addrs = config.validate()?;
        let auth =
            Authenticator::new(&config.tokens).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        // Certificates are read before binding: a bad file leaves no socket.
        let tls = tls_acceptor(&config)?;
        let listener = TcpListener::bind(&addrs[..])
            .await
            .map_err(|e| ServerError::Bind {
                addr: config.listen.clone(),
                why: e.to_string(),
            })?;
        let local_addr = listener.local_addr().map_err(|e| ServerError::Bind {
            addr: config.listen.clone(),
            why: e.to_string(),
        })?;
        if tls.is_none() && !local_addr.ip().is_loopback() {
            warn!(
                addr = %local_addr,
                "listening on a network address without TLS: bearer tokens, payloads and lease tokens cross the network in clear text; configure [tls] cert and key (or --tls-cert/--tls-key), see docs/deployment.md"
            );
        }
        let audit = match &config.audit_log {
            Some(path) => AuditLog::to_file(path).map_err(|e| ServerError::AuditLog {
                path: path.display().to_string(),
                why: e.to_string(),
            })?,
            None => AuditLog::tracing_only(),
        };
        let mut engine = Engine::new(store, Arc::new(SystemClock));
        if let Some(defaults) = &config.defaults {
            engine = engine.with_fallback_config(defaults.clone());
        }
        let metrics = Arc::new(Metrics::new());
        let grace = Duration::from_millis(config.shutdown_grace_ms);
        // Tracing (docs/observability.md): off unless an endpoint is configured.
        let tracer = match config.telemetry_config()? {
            Some(t) => {
                info!(endpoint = %t.endpoint, protocol = %t.protocol, "OpenTelemetry trace export on");
                Some(
                    rdq_telemetry::Tracer::start(t)
                        .map_err(|e| ConfigError::Invalid(e.to_string()))?,
                )
            }
            None => None,
        };
        let dispatcher = Arc::new(
            Dispatcher::new(
                engine.clone(),
                config.callbacks.clone(),
                Arc::clone(&metrics),
                grace,
            )
            .map_err(|e| ServerError::Client(e.to_string()))?
            .with_tracer(tracer.clone()),
        );
        if auth.is_open() {
            warn!(
                addr = %local_addr,
                "no tokens configured: the API is open, without authentication, to every process that can reach this loopback address"
            );
        } else {
            info!(
                tokens = config.tokens.len(),
                "bearer-token authentication on"
            );
        }
        let callbacks = config.callbacks.clone();
        let refresh = Arc::clone(&dispatcher);
        let sources = rdq_source::Registry::default();
        let app = App::new(AppParts {
            engine: engine.clone(),
            auth,
            audit,
            metrics: Arc::clone(&metrics),
            // A callback target must pass the server's allowlist, and its
            // host must not resolve to an address the rules refuse (checked
            // again at every connection: DNS can change).
            policy_check: Some(Arc::new(move |config| {
                let callbacks = callbacks.clone();
                Box::pin(async move {
                    match CallbackTarget::from_config(&config, &callbacks)? {
                        Some(target) => callbacks.check_resolved(&target.url).await,
                        None => Ok(()),
                    }
                })
            })),
            config_changed: Some(Arc::new(move |_queue| refresh.refresh_soon())),
            tracer: tracer.clone(),
            sources: sources.clone(),
        })
        .await
        .map_err(ServerError::Store)?;
        let state = AppState::new(
            app,
            Arc::clone(&dispatcher),
            config.callbacks.clone(),
            config.public_metrics,
        );
        let router = route_table(config.max_import_bytes)
            .into_router(state.clone(), config.max_request_bytes);
        // The gRPC API (docs/grpc.md) on the same address, told apart by
        // `content-type: application/grpc`.
        let router = rdq_grpc::router::multiplex(
            router,
            rdq_grpc::grpc_router(rdq_grpc::GrpcApi::new(state.app().clone())),
        );
        Ok(Self {
            listener,
            local_addr,
            tls,
            router,
            state,
            engine,
            dispatcher,
            metrics,
            sources,
            config,
        })
    }

    /// The status of the server's sources (`[[sources]]`), as
    /// `/v1/sources` and `/metrics` show it; filled in by [`Server::run`].
    pub fn sources(&self) -> &rdq_source::Registry {
        &self.sources
    }

    /// The tracer, when tracing is on: flush it after [`Server::run`]
    /// returns so the last spans are exported.
    pub fn tracer(&self) -> Option<rdq_telemetry::Tracer> {
        self.state.app().tracer().cloned()
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` completes, then shuts down in order (see the
    /// module documentation) and returns.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let (trigger, stop) = shutdown_channel();
        let m = &self.config.maintenance;
        // The runtime's reaper; each lease it closes is counted in the
        // metrics and, with tracing on, ends its attempt's span.
        let (metrics, tracer) = (Arc::clone(&self.metrics), self.tracer());
        let reaper = tokio::spawn(run_reaper_with(
            self.engine.clone(),
            ReaperConfig {
                interval: Duration::from_millis(m.reaper_interval_ms),
                batch: m.reaper_batch.max(1),
            },
            stop.clone(),
            move |reaped| {
                for env in reaped {
                    metrics.outcome(&env.queue, OutcomeLabel::LeaseExpired);
                    if let Some(t) = &tracer {
                        trace_expiry(t, env);
                    }
                }
            },
        ));
        let pruner = tokio::spawn(run_pruner(
            self.engine.clone(),
            PrunerConfig {
                interval: Duration::from_millis(m.pruner_interval_ms),
                batch: m.pruner_batch.max(1),
            },
            stop.clone(),
        ));
        let scheduler = self.spawn_scheduler(&stop);
        let dispatch = tokio::spawn(Arc::clone(&self.dispatcher).run(stop.clone()));
        // The sources (docs/sources.md): their configuration was checked when
        // the server was bound; an unreachable broker or a missing topic only
        // shows in the source's status while it tries again.
        let sources =
            match rdq_source::start(&self.engine, &self.config.sources, &self.sources, &stop) {
                Ok(sources) => {
                    if !self.config.sources.is_empty() {
                        info!(sources = self.config.sources.len(), "sources started");
                    }
                    sources
                }
                Err(e) => {
                    self.state.app().start_shutdown();
                    trigger.trigger();
                    for task in [dispatch, reaper, pruner, scheduler] {
                        let _ = task.await;
                    }
                    return Err(ConfigError::Invalid(format!("sources: {e}")).into());
                }
            };

        let state = self.state.clone();
        let stop_all = trigger.clone();
        tokio::spawn(async move {
            shutdown.await;
            info!(
                "shutdown requested: no new connections; finishing in-flight requests and callbacks"
            );
            state.app().start_shutdown();
            stop_all.trigger();
        });

        let scheme = if self.tls.is_some() { "https" } else { "http" };
        info!(
            addr = %self.local_addr,
            store = %self.config.store,
            "rdq-server listening on {scheme}://{}",
            self.local_addr
        );
        let mut serving = tokio::spawn(listener::serve(
            self.listener,
            self.router,
            self.config.http.clone(),
            self.tls,
            stop.clone(),
        ));
        let mut stop_wait = stop.clone();
        let ended_early = tokio::select! {
            () = stop_wait.wait() => None,
            result = &mut serving => Some(result),
        };
        let served = match ended_early {
            // The listener failed on its own: stop everything else too.
            Some(result) => {
                self.state.app().start_shutdown();
                trigger.trigger();
                match result {
                    Ok(()) => Ok(()),
                    Err(e) => Err(ServerError::Serve(e.to_string())),
                }
            }
            None => {
                let grace = Duration::from_millis(self.config.shutdown_grace_ms);
                match tokio::time::timeout(grace, &mut serving).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(ServerError::Serve(e.to_string())),
                    Err(_) => {
                        warn!(
                            "in-flight requests did not finish within the grace period; closing them"
                        );
                        serving.abort();
                        Ok(())
                    }
                }
            }
        };
        for (name, task) in [
            ("callback dispatch", dispatch),
            ("lease reaper", reaper),
            ("pruner", pruner),
            ("scheduler", scheduler),
        ] {
            if task.await.is_err() {
                warn!(service = name, "a background service ended abnormally");
            }
        }
        sources.join().await;
        info!("rdq-server stopped");
        served
    }
}

impl Server {
    /// The scheduler service (`[scheduler]`), counting each tick in the
    /// metrics; an idle task when it is off or the store has no schedules.
    fn spawn_scheduler(&self, stop: &rdq_runtime::Shutdown) -> tokio::task::JoinHandle<()> {
        let settings = &self.config.scheduler;
        if !settings.enabled || !self.engine.capabilities().schedules {
            if settings.enabled {
                info!("the store has no schedules: the scheduler does not run");
            }
            return tokio::spawn(async {});
        }
        let metrics = Arc::clone(&self.metrics);
        let engine = self.engine.clone();
        tokio::spawn(rdq_runtime::run_scheduler_with(
            self.engine.clone(),
            rdq_runtime::SchedulerConfig {
                interval: Duration::from_millis(settings.interval_ms.max(1)),
            },
            stop.clone(),
            move |report| metrics.schedules.tick(report, engine.now().unix_ms()),
        ))
    }
}

/// The listener's TLS acceptor, when `[tls]` configures one.
#[cfg(feature = "https")]
fn tls_acceptor(config: &ServerConfig) -> Result<Option<TlsAcceptor>, ServerError> {
    let (Some(cert), Some(key)) = (&config.tls.cert, &config.tls.key) else {
        return Ok(None);
    };
    let tls = rdq_tls::server::server_config(rdq_tls::server::ServerTlsFiles {
        cert,
        key,
        client_ca: config.tls.client_ca.as_deref(),
    })
    .map_err(|e| ConfigError::Invalid(format!("tls: {e}")))?;
    if config.tls.client_ca.is_some() {
        info!("TLS client certificates required");
    }
    Ok(Some(TlsAcceptor::from(tls)))
}

/// Without the `https` feature a configured `[tls]` is refused.
#[cfg(not(feature = "https"))]
fn tls_acceptor(config: &ServerConfig) -> Result<Option<TlsAcceptor>, ServerError> {
    if config.tls.enabled() {
        return Err(ConfigError::Invalid(
            "tls: this build has no TLS (built without the `https` feature)".into(),
        )
        .into());
    }
    Ok(None)
}

/// A future that completes on SIGTERM or SIGINT (Ctrl-C).
///
/// The handlers are installed when this is called, not when the future is
/// first polled, so a signal that arrives while the server is still starting
/// is not lost (and does not kill the process the default way). Call it
/// inside the Tokio runtime.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let terminate = signal(SignalKind::terminate());
        let interrupt = signal(SignalKind::interrupt());
        async move {
            match (terminate, interrupt) {
                (Ok(mut terminate), Ok(mut interrupt)) => {
                    tokio::select! {
                        _ = terminate.recv() => {}
                        _ = interrupt.recv() => {}
                    }
                }
                (Ok(mut terminate), Err(_)) => {
                    terminate.recv().await;
                }
                (Err(_), Ok(mut interrupt)) => {
                    interrupt.recv().await;
                }
                (Err(_), Err(_)) => std::future::pending::<()>().await,
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The CONSUMER span of an attempt whose lease lapsed: from its claim to
/// the reaper closing it.
fn trace_expiry(tracer: &rdq_telemetry::Tracer, env: &rdq_envelope::Envelope) {
    let Some(attempt) = env
        .attempts
        .iter()
        .rev()
        .find(|a| a.outcome == Some(rdq_envelope::Outcome::LeaseExpired))
    else {
        return;
    };
    tracer.record_attempt(&rdq_telemetry::Attempt {
        task: env.id,
        queue: &env.queue,
        handler_ref: &env.handler_ref,
        traceparent: env.headers.get("traceparent").map(String::as_str),
        attempt_no: attempt.attempt_no,
        started_ms: attempt.started_at.unix_ms(),
        outcome: rdq_envelope::Outcome::LeaseExpired.as_str(),
        error_type: Some(rdq_envelope::error_types::LEASE_EXPIRED),
    });
}
