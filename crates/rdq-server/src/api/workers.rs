//! The pull-worker API: what a Go, Java or Python worker uses.
//!
//! `POST /v1/queues/{queue}/claim` hands out tasks, each with a
//! `lease_token`; `POST /v1/tasks/{id}/settle` (or `POST /v1/settle` for a
//! batch, one result per item, written in one store call) reports the
//! outcome; `POST /v1/tasks/{id}/lease` extends the lease. A settle or
//! extension after the lease was lost (lapsed and reaped, reclaimed,
//! redriven, already settled) is refused with 409 `LEASE_LOST` and changes
//! nothing.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use rdq_engine::{FailureKind, LeaseToken, SettleRequest, Settlement};
use rdq_envelope::{Envelope, ErrorInfo, Outcome, TaskId, validate_queue_name};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::{AppState, envelope_response, json_response, parse_task_id, raw_envelope};
use crate::auth::{Caller, Scope};
use crate::lease_token::{self, TokenMismatch};
use crate::metrics::OutcomeLabel;
use crate::problem::ApiError;
use crate::request::JsonBody;

/// Most tasks one claim hands out.
pub const MAX_CLAIM: usize = 1000;

/// Most settles in one batch.
pub const MAX_SETTLE_BATCH: usize = 1000;

/// Body of a claim.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    /// Most tasks to take, 0–1000.
    pub max: usize,
    /// Lease for these claims; the queue's `lease_ms` when absent.
    #[serde(default)]
    pub lease_ms: Option<u64>,
}

/// One claimed task.
#[derive(Debug, Serialize)]
pub struct ClaimedTask {
    /// The task id.
    pub id: String,
    /// Present this when settling or extending.
    pub lease_token: String,
    /// The task as claimed: IN_FLIGHT, its open attempt last.
    pub envelope: Box<RawValue>,
}

/// `POST /v1/queues/{queue}/claim`: up to `max` due tasks, highest priority first.
pub async fn claim(
    State(state): State<AppState>,
    caller: Caller,
    Path(queue): Path<String>,
    JsonBody(body): JsonBody<ClaimBody>,
) -> Result<Response, ApiError> {
    caller.require(Scope::Work, &queue)?;
    validate_queue_name(&queue)?;
    if body.max > MAX_CLAIM {
        return Err(ApiError::invalid_field(
            "max",
            format!("must be 0 to {MAX_CLAIM}"),
        ));
    }
    if body.lease_ms == Some(0) {
        return Err(ApiError::invalid_field("lease_ms", "must be at least 1"));
    }
    let claimed = state
        .engine()
        .claim(&queue, body.max, body.lease_ms)
        .await?;
    state.metrics().claimed(&queue, claimed.len() as u64);
    let tasks: Vec<ClaimedTask> = claimed
        .iter()
        .map(|c| ClaimedTask {
            id: c.envelope.id.to_string(),
            lease_token: lease_token::format(c.envelope.id, c.token),
            envelope: raw_envelope(&c.envelope),
        })
        .collect();
    Ok(json_response(StatusCode::OK, &json!({ "tasks": tasks })))
}

/// What a worker reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReportedOutcome {
    /// The task succeeded.
    Success,
    /// Retry with backoff (until `max_attempts`).
    RetryableFailure,
    /// Dead-letter now.
    PermanentFailure,
    /// A failure the worker did not classify: the queue's
    /// `non_retryable_errors` globs decide, default retryable.
    Failure,
    /// Put back for `defer_ms` without spending an attempt.
    Defer,
    /// Hand back unrun (a worker shutting down): due now, no attempt spent.
    Release,
}

/// The error of a failed attempt, as a worker reports it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportedError {
    /// Language-native type name; classification globs match on it.
    #[serde(rename = "type")]
    pub error_type: String,
    /// What went wrong (cut at 4 KiB).
    #[serde(default)]
    pub message: String,
    /// Optional structured JSON.
    #[serde(default)]
    pub detail: Option<Value>,
    /// Optional stack (cut at 64 KiB).
    #[serde(default)]
    pub stack: Option<String>,
}

/// Body of a settle (one item of a batch also names the task `id`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettleBody {
    /// The task (batch items only; the path names it otherwise).
    #[serde(default)]
    pub id: Option<String>,
    /// The token from the claim.
    pub lease_token: String,
    /// What happened.
    pub outcome: ReportedOutcome,
    /// Required with the failure outcomes.
    #[serde(default)]
    pub error: Option<ReportedError>,
    /// Required with `DEFER`.
    #[serde(default)]
    pub defer_ms: Option<u64>,
}

impl SettleBody {
    fn settlement(self) -> Result<Settlement, ApiError> {
        let needs_error = matches!(
            self.outcome,
            ReportedOutcome::RetryableFailure
                | ReportedOutcome::PermanentFailure
                | ReportedOutcome::Failure
        );
        if self.defer_ms.is_some() && self.outcome != ReportedOutcome::Defer {
            return Err(ApiError::invalid_field(
                "defer_ms",
                "is only allowed with outcome DEFER",
            ));
        }
        if self.error.is_some() && !needs_error {
            return Err(ApiError::invalid_field(
                "error",
                "is only allowed with a failure outcome",
            ));
        }
        let failure = |kind: FailureKind, error: Option<ReportedError>| {
            let error = error.ok_or_else(|| {
                ApiError::invalid_field("error", "is required with a failure outcome")
            })?;
            if error.error_type.is_empty() {
                return Err(ApiError::invalid_field("error.type", "must not be empty"));
            }
            let mut info = ErrorInfo::new(error.error_type, &error.message);
            if let Some(stack) = &error.stack {
                info = info.with_stack(stack);
            }
            if let Some(detail) = error.detail {
                info = info.with_detail(detail);
            }
            Ok(Settlement::Failure { error: info, kind })
        };
        match self.outcome {
            ReportedOutcome::Success => Ok(Settlement::Success),
            ReportedOutcome::RetryableFailure => failure(FailureKind::Retryable, self.error),
            ReportedOutcome::PermanentFailure => failure(FailureKind::Permanent, self.error),
            ReportedOutcome::Failure => failure(FailureKind::Unclassified, self.error),
            ReportedOutcome::Defer => match self.defer_ms {
                Some(delay_ms) => Ok(Settlement::Defer { delay_ms }),
                None => Err(ApiError::invalid_field(
                    "defer_ms",
                    "is required with outcome DEFER",
                )),
            },
            ReportedOutcome::Release => Ok(Settlement::Release),
        }
    }
}

/// The engine token in `text` for task `id`: 400 when malformed, 409
/// `LEASE_LOST` when it was issued for another task.
fn parse_token(id: TaskId, text: &str) -> Result<LeaseToken, ApiError> {
    lease_token::parse(id, text).map_err(|mismatch| match mismatch {
        TokenMismatch::Malformed => {
            ApiError::invalid_field("lease_token", "is not a lease token issued by this server")
        }
        TokenMismatch::OtherTask => ApiError::from(rdq_engine::EngineError::LeaseLost(id)),
    })
}

/// Everything a settle needs, checked: the current envelope, the token, the
/// settlement.
async fn prepare(
    state: &AppState,
    caller: &Caller,
    id: TaskId,
    body: SettleBody,
) -> Result<SettleRequest, ApiError> {
    let text = body.lease_token.clone();
    let settlement = body.settlement()?;
    let envelope = state.engine().store().get(id).await?;
    caller.require(Scope::Work, &envelope.queue)?;
    let token = parse_token(id, &text)?;
    Ok(SettleRequest {
        envelope,
        token,
        settlement,
    })
}

fn count_outcome(state: &AppState, settlement: &Settlement, settled: &Envelope) {
    let label = match settlement {
        Settlement::Defer { .. } => OutcomeLabel::Deferred,
        Settlement::Release => OutcomeLabel::Released,
        _ => match settled.attempts.last().and_then(|a| a.outcome) {
            Some(Outcome::Success) => OutcomeLabel::Success,
            Some(Outcome::PermanentFailure) => OutcomeLabel::PermanentFailure,
            _ => OutcomeLabel::RetryableFailure,
        },
    };
    state.metrics().outcome(&settled.queue, label);
}

/// `POST /v1/tasks/{id}/settle`: the updated envelope, or 409 `LEASE_LOST`.
pub async fn settle(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<SettleBody>,
) -> Result<Response, ApiError> {
    let id = parse_task_id(&id)?;
    if body.id.as_deref().is_some_and(|b| b != id.to_string()) {
        return Err(ApiError::invalid_field(
            "id",
            "differs from the task id in the path",
        ));
    }
    let request = prepare(&state, &caller, id, body).await?;
    let settled = state
        .engine()
        .settle(&request.envelope, request.token, request.settlement.clone())
        .await?;
    count_outcome(&state, &request.settlement, &settled);
    Ok(envelope_response(StatusCode::OK, &settled))
}

/// Body of `POST /v1/settle`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettleBatchBody {
    /// The settles, each naming its task `id`.
    pub settles: Vec<Value>,
}

/// `POST /v1/settle`: many settles, one result per item in order:
/// `{"id", "status": 200, "envelope"}` or `{"id", "status", "code", "detail"}`.
/// Items are independent: a bad or stale one does not fail the others.
pub async fn settle_batch(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<SettleBatchBody>,
) -> Result<Response, ApiError> {
    if body.settles.len() > MAX_SETTLE_BATCH {
        return Err(ApiError::invalid_field(
            "settles",
            format!("at most {MAX_SETTLE_BATCH} items"),
        ));
    }
    let mut results: Vec<Option<Value>> = Vec::with_capacity(body.settles.len());
    let mut ids: Vec<String> = Vec::with_capacity(body.settles.len());
    let mut requests = Vec::new();
    let mut slots = Vec::new();
    for (i, item) in body.settles.into_iter().enumerate() {
        let id_text = item
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        ids.push(id_text.clone());
        let prepared = async {
            let parsed: SettleBody = serde_json::from_value(item).map_err(|e| {
                ApiError::malformed(format!("settles[{i}] is not a valid settle: {e}"))
            })?;
            let id = parse_task_id(&id_text)?;
            prepare(&state, &caller, id, parsed).await
        }
        .await;
        match prepared {
            Ok(request) => {
                slots.push(i);
                requests.push(request);
                results.push(None);
            }
            Err(e) => results.push(Some(item_error(&id_text, &e))),
        }
    }
    let settlements: Vec<Settlement> = requests.iter().map(|r| r.settlement.clone()).collect();
    let settled = state.engine().settle_many(requests).await;
    for ((slot, settlement), result) in slots.into_iter().zip(settlements).zip(settled) {
        let id = ids.get(slot).cloned().unwrap_or_default();
        let value = match result {
            Ok(env) => {
                count_outcome(&state, &settlement, &env);
                json!({"id": id, "status": 200, "envelope": raw_envelope(&env)})
            }
            Err(e) => item_error(&id, &ApiError::from(e)),
        };
        if let Some(r) = results.get_mut(slot) {
            *r = Some(value);
        }
    }
    let results: Vec<Value> = results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| json!({"status": 500, "code": "INTERNAL"})))
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({ "results": results }),
    ))
}

fn item_error(id: &str, e: &ApiError) -> Value {
    json!({"id": id, "status": e.status().as_u16(), "code": e.code(), "detail": e.detail()})
}

/// Body of a lease extension.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtendBody {
    /// The token from the claim.
    pub lease_token: String,
    /// The lease then ends this long from now.
    pub extend_ms: u64,
}

/// `POST /v1/tasks/{id}/lease`: the envelope with its new `lease_expires_at`.
pub async fn extend_lease(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<ExtendBody>,
) -> Result<Response, ApiError> {
    let id = parse_task_id(&id)?;
    if body.extend_ms == 0 {
        return Err(ApiError::invalid_field("extend_ms", "must be at least 1"));
    }
    let envelope = state.engine().store().get(id).await?;
    caller.require(Scope::Work, &envelope.queue)?;
    let token = parse_token(id, &body.lease_token)?;
    let extended = state
        .engine()
        .extend_lease(&envelope, token, body.extend_ms)
        .await?;
    Ok(envelope_response(StatusCode::OK, &extended))
}
