//! `/v1/schedules`: periodic schedules (`docs/schedules.md`). Thin adapters
//! over `rdq_app`'s schedule use cases: a put body becomes an
//! `rdq_schedule::Schedule` there ([`rdq_app::schedules::schedule_from_body`]),
//! which the engine validates before anything is stored.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use rdq_api::schedules::{
    NextDue, NextDueQuery, PutScheduleQuery, ScheduleBody, ScheduleList, ScheduleState,
};
use rdq_api::schema::Envelope;
use rdq_app::Caller;
use rdq_app::schedules::{DEFAULT_NEXT_DUE, format_instant, schedule_from_body};
use utoipa::IntoParams;

use super::components::{Problem400, Problem404, Problem413};
use super::response::{envelope_response, json_response};
use super::state::AppState;
use crate::problem::ApiError;
use crate::request::{JsonBody, PathArgs, QueryArgs};

/// The `{name}` path parameter.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SchedulePath {
    /// Schedule name, `[a-z0-9._-]{1,240}`, not `.` or `..`
    #[param(value_type = rdq_api::schema::QueueName)]
    pub name: String,
}

#[utoipa::path(
    put, path = "/v1/schedules/{name}", operation_id = "putSchedule", tag = "schedules",
    summary = "Create or replace a schedule (admin on its queue; audited); its cursor and counters stay",
    params(SchedulePath, PutScheduleQuery),
    request_body = ScheduleBody,
    responses(
        (status = 201, description = "The new schedule", body = ScheduleState),
        (status = 200, description = "The replaced schedule", body = ScheduleState),
        (status = 400, response = Problem400),
    ),
)]
/// `PUT /v1/schedules/{name}`: 201 when new, 200 when replaced.
pub async fn put(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(name): PathArgs<String>,
    QueryArgs(query): QueryArgs<PutScheduleQuery>,
    JsonBody(body): JsonBody<ScheduleBody>,
) -> Result<Response, ApiError> {
    rdq_app::schedules::check_name(&name)?;
    let owner = rdq_app::schedules::owner_of(query.owner.as_deref())?;
    let schedule = schedule_from_body(&name, body)?;
    let (stored, created) = state.app().put_schedule(&caller, schedule, owner).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut response = json_response(status, &stored);
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/schedules/{name}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

#[utoipa::path(
    get, path = "/v1/schedules", operation_id = "listSchedules", tag = "schedules",
    summary = "Every schedule on a queue the caller may read, with its last and next runs",
    responses((status = 200, description = "The schedules, by name", body = ScheduleList)),
)]
/// `GET /v1/schedules`.
pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    let schedules = state.app().schedules(&caller).await?;
    Ok(json_response(StatusCode::OK, &ScheduleList { schedules }))
}

#[utoipa::path(
    get, path = "/v1/schedules/{name}", operation_id = "getSchedule", tag = "schedules",
    summary = "A schedule with its firing state (any scope on its queue)",
    params(SchedulePath),
    responses(
        (status = 200, description = "The schedule", body = ScheduleState),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `GET /v1/schedules/{name}`.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(name): PathArgs<String>,
) -> Result<Response, ApiError> {
    let stored = state.app().schedule(&caller, &name).await?;
    Ok(json_response(StatusCode::OK, &stored))
}

#[utoipa::path(
    delete, path = "/v1/schedules/{name}", operation_id = "deleteSchedule", tag = "schedules",
    summary = "Delete a schedule; the tasks it submitted stay (admin on its queue; audited)",
    params(SchedulePath),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `DELETE /v1/schedules/{name}`.
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(name): PathArgs<String>,
) -> Result<StatusCode, ApiError> {
    state.app().delete_schedule(&caller, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    post, path = "/v1/schedules/{name}/pause", operation_id = "pauseSchedule", tag = "schedules",
    summary = "Pause a schedule: its due times are skipped as paused (admin on its queue; audited)",
    params(SchedulePath),
    responses(
        (status = 200, description = "The schedule", body = ScheduleState),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `POST /v1/schedules/{name}/pause`.
pub async fn pause(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(name): PathArgs<String>,
) -> Result<Response, ApiError> {
    let stored = state
        .app()
        .set_schedule_paused(&caller, &name, true)
        .await?;
    Ok(json_response(StatusCode::OK, &stored))
}

#[utoipa::path(
    post, path = "/v1/schedules/{name}/resume", operation_id = "resumeSchedule", tag = "schedules",
    summary = "Resume a paused schedule from now, without catching up (admin on its queue; audited)",
    params(SchedulePath),
    responses(
        (status = 200, description = "The schedule", body = ScheduleState),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `POST /v1/schedules/{name}/resume`.
pub async fn resume(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(name): PathArgs<String>,
) -> Result<Response, ApiError> {
    let stored = state
        .app()
        .set_schedule_paused(&caller, &name, false)
        .await?;
    Ok(json_response(StatusCode::OK, &stored))
}

#[utoipa::path(
    post, path = "/v1/schedules/{name}/run", operation_id = "runSchedule", tag = "schedules",
    summary = "Submit the schedule's task once now, marked rdq.schedule_manual (admin on its queue; audited)",
    params(SchedulePath),
    responses(
        (status = 201, description = "The task", body = Envelope,
            headers(("Location" = String, description = "/v1/tasks/{id} of the task"))),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
        (status = 413, response = Problem413),
    ),
)]
/// `POST /v1/schedules/{name}/run`: 201 with the submitted task (413 when
/// the task is larger than its queue's `max_envelope_bytes` now allows).
pub async fn run(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(name): PathArgs<String>,
) -> Result<Response, ApiError> {
    let env = state.app().run_schedule(&caller, &name).await?;
    let mut response = envelope_response(StatusCode::CREATED, &env);
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/tasks/{}", env.id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

#[utoipa::path(
    get, path = "/v1/schedules/{name}/next", operation_id = "nextScheduleDue", tag = "schedules",
    summary = "The schedule's next due times from now (any scope on its queue)",
    params(SchedulePath, NextDueQuery),
    responses(
        (status = 200, description = "The due times", body = NextDue),
        (status = 400, response = Problem400),
        (status = 404, response = Problem404),
    ),
)]
/// `GET /v1/schedules/{name}/next?count=N`.
pub async fn next(
    State(state): State<AppState>,
    caller: Caller,
    PathArgs(name): PathArgs<String>,
    QueryArgs(query): QueryArgs<NextDueQuery>,
) -> Result<Response, ApiError> {
    let count = query.count.unwrap_or(DEFAULT_NEXT_DUE);
    let due_ms = state.app().next_due(&caller, &name, count).await?;
    let due = due_ms.iter().map(|&ms| format_instant(ms)).collect();
    Ok(json_response(
        StatusCode::OK,
        &NextDue { name, due_ms, due },
    ))
}
