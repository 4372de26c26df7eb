//! rdq's application layer: every use case a front end offers, in one
//! place, transport-neutral. The HTTP API (`rdq-server`), the CLI's
//! direct-to-store path, the gRPC API and the dashboard are adapters over
//! [`App`]; none of them reaches the store.
//!
//! What lives here and nowhere else:
//! - **authorisation**: every use case takes the [`Caller`] and checks its
//!   scope on the queue ([`auth`]); a queue-scoped caller cannot tell a task
//!   of another queue from a missing one; a long-lived worker stream holds
//!   a [`work::WorkGrant`], decided once when it opens;
//! - **the capability fallbacks**: counts where the store has them, broker
//!   depths where it has those ([`queues`]); a dead task found by lookup or
//!   by paging the DLQ; a settle by id and lease token on every store
//!   ([`work`]), through [`rdq_engine::Store::leased`];
//! - **lease tokens** a worker presents, keyed with the store's secret
//!   ([`rdq_engine::LeaseKey`]);
//! - **the audit log** of operator actions ([`audit`]) and the counters
//!   behind `/metrics` ([`metrics`]);
//! - **errors** with rdq's stable codes and a transport-neutral kind
//!   ([`AppError`]).
//!
//! The use cases take domain values, never a front end's wire types: a
//! [`submit::SubmitCommand`] with the payload as bytes, a
//! [`work::Report`] that becomes the engine's settlement, DLQ
//! [`dlq::ImportEntry`]s, task ids and queue names. Each adapter turns its
//! own requests into these (HTTP JSON and JSONL in `rdq-server`, protobuf
//! messages in `rdq-grpc`). A few answers (a queue row, the result of a
//! redrive, import or purge) are `rdq-api`'s response types, which the
//! HTTP API and its Rust client share as they are.

#![forbid(unsafe_code)]

pub mod audit;
pub mod auth;
pub mod dlq;
pub mod error;
pub mod flow;
pub mod insights;
pub mod metrics;
pub mod queues;
pub mod schedule_metrics;
pub mod schedules;
pub mod sources;
pub mod submit;
pub mod tasks;
pub mod work;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rdq_engine::{Engine, EngineError, LeaseKey, QueueConfig};

pub use audit::{AuditLog, AuditRecord};
pub use auth::{Authenticator, Caller, Scope};
pub use error::{AppError, ErrorKind};
pub use metrics::{Metrics, OutcomeLabel};

/// Checks a queue configuration before it is stored, beyond the engine's
/// own rules: the server checks a callback target against its allowlist, and
/// where its host resolves to. `Err` says why the configuration is refused.
pub type PolicyCheck = Arc<
    dyn Fn(
            QueueConfig,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>
        + Send
        + Sync,
>;

/// Called after a queue's policy changed (the dispatcher reconciles).
pub type ConfigChanged = Arc<dyn Fn(&str) + Send + Sync>;

/// What an [`App`] is built from; everything but the engine has a default.
pub struct AppParts {
    /// The engine over the store.
    pub engine: Engine,
    /// The configured tokens (open when empty).
    pub auth: Authenticator,
    /// Where audit records go.
    pub audit: AuditLog,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Extra policy checks (see [`PolicyCheck`]).
    pub policy_check: Option<PolicyCheck>,
    /// Told about policy changes (see [`ConfigChanged`]).
    pub config_changed: Option<ConfigChanged>,
    /// Records submit and attempt spans when tracing is on
    /// (`docs/observability.md`); `None` records nothing.
    pub tracer: Option<rdq_telemetry::Tracer>,
    /// The status of the sources this process runs (`rdq_source`): what
    /// `/v1/sources` and the `rdq_source_*` metrics show. Empty when it
    /// runs none.
    pub sources: rdq_source::Registry,
}

impl AppParts {
    /// Parts with an open authenticator, a tracing-only audit log and
    /// fresh counters: what the CLI's direct-to-store path uses.
    pub fn local(engine: Engine) -> Self {
        Self {
            engine,
            auth: Authenticator::open(),
            audit: AuditLog::tracing_only(),
            metrics: Arc::new(Metrics::new()),
            policy_check: None,
            config_changed: None,
            tracer: None,
            sources: rdq_source::Registry::default(),
        }
    }
}

/// The application: every use case, bound to one engine. Cheap to clone.
#[derive(Clone)]
pub struct App {
    engine: Engine,
    metrics: Arc<Metrics>,
    shared: Arc<Shared>,
}

struct Shared {
    auth: Authenticator,
    audit: AuditLog,
    lease_key: LeaseKey,
    policy_check: Option<PolicyCheck>,
    config_changed: Option<ConfigChanged>,
    tracer: Option<rdq_telemetry::Tracer>,
    sources: rdq_source::Registry,
    /// Cleared when shutdown starts, so readiness tells load balancers to
    /// stop sending work before the listener closes.
    serving: AtomicBool,
}

impl App {
    /// Assembles the application; reads the store's lease secret (see
    /// [`rdq_engine::Store::lease_secret`]).
    pub async fn new(parts: AppParts) -> Result<Self, EngineError> {
        let lease_key = parts.engine.lease_key().await?;
        Ok(Self {
            engine: parts.engine,
            metrics: parts.metrics,
            shared: Arc::new(Shared {
                auth: parts.auth,
                audit: parts.audit,
                lease_key,
                policy_check: parts.policy_check,
                config_changed: parts.config_changed,
                tracer: parts.tracer,
                sources: parts.sources,
                serving: AtomicBool::new(true),
            }),
        })
    }

    /// The engine, for the background services (reaper, pruner, callback
    /// dispatch) that run beside the front ends.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The tracer, when tracing is on.
    pub fn tracer(&self) -> Option<&rdq_telemetry::Tracer> {
        self.shared.tracer.as_ref()
    }

    /// The audit log.
    pub fn audit(&self) -> &AuditLog {
        &self.shared.audit
    }

    /// The caller behind a presented `authorization` value (an HTTP
    /// `Authorization` header, gRPC `authorization` metadata).
    pub fn authenticate(&self, authorization: Option<&[u8]>) -> Result<Caller, AppError> {
        self.shared.auth.authenticate(authorization)
    }

    /// True when no tokens are configured.
    pub fn is_open(&self) -> bool {
        self.shared.auth.is_open()
    }

    /// Readiness: not shutting down, and the store can serve and write
    /// ([`rdq_engine::Store::ready`], which every store answers).
    pub async fn ready(&self) -> Result<(), AppError> {
        if !self.shared.serving.load(Ordering::Acquire) {
            return Err(AppError::new(
                ErrorKind::Unavailable,
                error::SHUTTING_DOWN,
                "the server is shutting down",
            ));
        }
        self.engine.ready().await.map_err(|e| {
            let e = AppError::from(e);
            AppError::new(
                ErrorKind::Unavailable,
                e.code().to_owned(),
                format!("the store is not ready: {}", e.detail()),
            )
        })
    }

    /// Marks the application as shutting down: readiness fails from now on.
    pub fn start_shutdown(&self) {
        self.shared.serving.store(false, Ordering::Release);
    }

    /// The Prometheus text of the counters, with queue sizes where the
    /// store counts tasks, the `rdq_flow_*` gauges of every queue with
    /// a flow section where the store keeps flow limits, and the
    /// `rdq_source_*` series of every source this process runs.
    pub async fn metrics_text(&self) -> String {
        let counts = if self.engine.capabilities().counts {
            self.engine.counts().await.unwrap_or_default()
        } else {
            Vec::new()
        };
        let mut text = self.metrics.render(&counts);
        text.push_str(&self.metrics.schedules.render());
        text.push_str(&metrics::render_flow(&self.flow_statuses().await));
        text.push_str(&metrics::render_sources(&self.shared.sources.all()));
        text
    }

    /// Each queue with a flow section, with its flow status now; none on a
    /// store without flow limits. A queue whose status cannot be read is
    /// left out (logged at debug).
    async fn flow_statuses(&self) -> Vec<(String, rdq_engine::FlowStatus)> {
        if !self.engine.capabilities().claim_flow {
            return Vec::new();
        }
        let Ok(mut queues) = self.engine.queue_names().await else {
            return Vec::new();
        };
        queues.sort();
        let mut out = Vec::new();
        for queue in queues {
            let limited = self
                .engine
                .policy(&queue)
                .await
                .is_ok_and(|p| !p.flow.is_unlimited());
            if !limited {
                continue;
            }
            match self.engine.flow_status(&queue).await {
                Ok(status) => out.push((queue, status)),
                Err(e) => {
                    tracing::debug!(queue = %queue, error = %e, "no flow status for /metrics")
                }
            }
        }
        out
    }

    /// What the store can do, by capability name.
    pub fn capabilities(&self) -> Vec<(&'static str, bool)> {
        self.engine.capabilities().named().to_vec()
    }

    fn unsupported_hint(e: EngineError, hint: &str) -> AppError {
        let unsupported = matches!(e, EngineError::Unsupported(_));
        let e = AppError::from(e);
        if unsupported { e.with_hint(hint) } else { e }
    }
}
