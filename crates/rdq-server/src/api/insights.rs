//! What the dashboard reads besides the queue and DLQ routes: who the
//! caller is (`/v1/whoami`), every queue at a glance (`/v1/overview`), a
//! DLQ broken down by error type (`…/dead/breakdown`) and the audit log's
//! tail (`/v1/audit`). Thin adapters over `rdq_app::insights`, which checks
//! scopes; see `docs/dashboard.md`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use rdq_api::queues::{QueueListQuery, QueueRow};
use rdq_api::schema::{AuditRecord, Envelope, QueueName, ScopeName, TaskId};
use rdq_app::Caller;
use rdq_app::metrics::HISTORY_MINUTES;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

use super::components::{Problem400, Problem404, QueuePath};
use super::response::{json_response, raw_envelope};
use super::state::AppState;
use crate::problem::ApiError;
use crate::request::{PathArgs, QueryArgs};

/// Audit records `GET /v1/audit` returns without `limit`.
pub const DEFAULT_AUDIT_TAIL: usize = 100;

/// The answer of `GET /v1/whoami`.
#[derive(Debug, Serialize, ToSchema)]
struct WhoAmI {
    /// The token's name; null on an open server.
    #[schema(required = true)]
    name: Option<String>,
    /// The server runs without tokens.
    open: bool,
    #[schema(value_type = Vec<ScopeName>)]
    scopes: Vec<&'static str>,
}

/// Whose records or counts an answer holds: this server process's, since
/// it started.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum ProcessScope {
    /// This process only.
    Process,
}

#[utoipa::path(
    get, path = "/v1/whoami", operation_id = "whoami", tag = "dashboard",
    summary = "The caller's token name and scopes, so a front end can disable what it may not do",
    responses((status = 200, description = "The caller", body = WhoAmI)),
)]
/// `GET /v1/whoami`: the caller's name and scopes, so a front end can
/// disable what the caller may not do (the server refuses it anyway).
pub async fn whoami(State(state): State<AppState>, caller: Caller) -> Response {
    let me = state.app().whoami(&caller);
    json_response(
        StatusCode::OK,
        &WhoAmI {
            name: me.name,
            open: me.open,
            scopes: me.scopes.iter().map(|s| s.as_str()).collect(),
        },
    )
}

/// The answer of `GET /v1/overview`.
#[derive(Debug, Serialize, ToSchema)]
struct Overview {
    /// Minutes in each queue's `history`.
    #[schema(minimum = 1, maximum = 1440)]
    history_minutes: usize,
    /// Whose counts the history is: this process's since it started.
    history_scope: ProcessScope,
    queues: Vec<OverviewRow>,
}

/// A queue at a glance.
#[derive(Debug, Serialize, ToSchema)]
struct OverviewRow {
    #[schema(value_type = QueueName)]
    queue: String,
    pending: u64,
    #[schema(required = true)]
    in_flight: Option<u64>,
    #[schema(required = true)]
    succeeded: Option<u64>,
    dead: u64,
    source: rdq_api::queues::StatsSource,
    paused: bool,
    #[schema(value_type = Option<TaskId>, required = true)]
    oldest_pending_id: Option<String>,
    #[schema(format = DateTime, required = true)]
    oldest_pending_at: Option<String>,
    #[schema(required = true)]
    oldest_pending_age_ms: Option<u64>,
    #[schema(required = true)]
    oldest_pending_unknown: Option<String>,
    history: Vec<Minute>,
}

/// One minute of a queue's outcomes in this process.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = OutcomeMinute)]
struct Minute {
    /// Start of the minute.
    #[schema(format = DateTime)]
    at: String,
    succeeded: u64,
    failed: u64,
}

#[utoipa::path(
    get, path = "/v1/overview", operation_id = "overview", tag = "dashboard",
    summary = "Every queue the caller may see: numbers (as listQueues), paused, the oldest pending task's age, and this process's outcomes per minute over the last hour",
    params(QueueListQuery),
    responses(
        (status = 200, description = "The queues", body = Overview),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `GET /v1/overview?names=a,b`: every queue the caller may see with its
/// numbers (as `GET /v1/queues`), paused or not, the oldest pending task's
/// age and the last hour's outcomes per minute.
pub async fn overview(
    State(state): State<AppState>,
    caller: Caller,
    QueryArgs(query): QueryArgs<QueueListQuery>,
) -> Result<Response, ApiError> {
    let names: Vec<String> = query
        .names
        .as_deref()
        .map(|n| {
            n.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let rows = state.app().overview(&caller, &names).await?;
    let queues = rows
        .into_iter()
        .map(|q| {
            let QueueRow {
                queue,
                pending,
                in_flight,
                succeeded,
                dead,
                source,
            } = q.row;
            OverviewRow {
                queue,
                pending,
                in_flight,
                succeeded,
                dead,
                source,
                paused: q.paused,
                oldest_pending_id: q.oldest_pending.map(|o| o.id.to_string()),
                oldest_pending_at: q.oldest_pending.map(|o| o.since.to_string()),
                oldest_pending_age_ms: q.oldest_pending.map(|o| o.age_ms),
                oldest_pending_unknown: q.oldest_pending_unknown,
                history: q
                    .history
                    .iter()
                    .map(|m| Minute {
                        at: minute_start(m.minute),
                        succeeded: m.succeeded,
                        failed: m.failed,
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &Overview {
            history_minutes: HISTORY_MINUTES,
            history_scope: ProcessScope::Process,
            queues,
        },
    ))
}

fn minute_start(minute: u64) -> String {
    let ms = i64::try_from(minute.saturating_mul(60_000)).unwrap_or(i64::MAX);
    rdq_envelope::Timestamp::from_unix_ms(ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The answer of `GET …/dead/breakdown`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = DeadBreakdown)]
struct BreakdownBody {
    #[schema(value_type = QueueName)]
    queue: String,
    total: u64,
    groups: Vec<Group>,
}

/// The dead tasks whose latest error has one type.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = DeadBreakdownGroup)]
struct Group {
    #[schema(required = true)]
    error_type: Option<String>,
    #[schema(minimum = 1)]
    count: u64,
    #[schema(value_type = Envelope)]
    newest: Box<RawValue>,
}

#[utoipa::path(
    get, path = "/v1/queues/{queue}/dead/breakdown", operation_id = "breakdownDead", tag = "dlq",
    summary = "The queue's DLQ grouped by latest error type, most tasks first, with the newest task of each (any scope on the queue)",
    params(QueuePath),
    responses(
        (status = 200, description = "The groups", body = BreakdownBody),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `GET /v1/queues/{queue}/dead/breakdown`: the DLQ grouped by latest
/// error type, most tasks first, with the newest envelope of each.
pub async fn breakdown(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(queue): PathArgs<String>,
) -> Result<Response, ApiError> {
    let b = state.app().dlq_breakdown(&caller, &queue).await?;
    Ok(json_response(
        StatusCode::OK,
        &BreakdownBody {
            queue: b.queue,
            total: b.total,
            groups: b
                .groups
                .iter()
                .map(|g| Group {
                    error_type: g.error_type.clone(),
                    count: g.count,
                    newest: raw_envelope(&g.newest),
                })
                .collect(),
        },
    ))
}

/// Query of `GET /v1/audit`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Only this queue's records.
    #[serde(default)]
    #[param(value_type = Option<QueueName>)]
    pub queue: Option<String>,
    /// How many, newest first (default 100).
    #[serde(default, deserialize_with = "rdq_api::int::query_option_usize")]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// The answer of `GET /v1/audit`.
#[derive(Debug, Serialize, ToSchema)]
struct AuditTail {
    /// Whose records these are: this process's since it started.
    scope: ProcessScope,
    #[schema(value_type = Vec<AuditRecord>)]
    records: Vec<Value>,
}

#[utoipa::path(
    get, path = "/v1/audit", operation_id = "auditTail", tag = "dashboard",
    summary = "This process's latest audit records, newest first (admin)",
    params(AuditQuery),
    responses(
        (status = 200, description = "The records", body = AuditTail),
        (status = 400, response = Problem400),
    ),
)]
/// `GET /v1/audit?queue=&limit=`: this process's latest audit records,
/// newest first.
pub async fn audit(
    State(state): State<AppState>,
    caller: Caller,
    QueryArgs(query): QueryArgs<AuditQuery>,
) -> Result<Response, ApiError> {
    let records = state.app().audit_tail(
        &caller,
        query.queue.as_deref(),
        query.limit.unwrap_or(DEFAULT_AUDIT_TAIL),
    )?;
    Ok(json_response(
        StatusCode::OK,
        &AuditTail {
            scope: ProcessScope::Process,
            records,
        },
    ))
}
