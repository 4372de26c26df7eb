//! Submitting a task inside the application's own transaction
//! (docs/stores/postgres.md, "Submitting inside your transaction").
//!
//! [`submit_in`] calls `SCHEMA.submit(…)` (`submit.sql`) on whatever the
//! caller holds: a `tokio_postgres::Transaction` (or a `Client`, for a
//! statement of its own). The task exists exactly when the caller's
//! transaction commits, and workers waiting on the queue are woken at that
//! commit. The function writes the row an rdq node would write, so nothing
//! here encodes an envelope. [`complete_in`] is the other end: a handler
//! settles its task's success in the transaction of its own writes.

use rdq_engine::{EngineError, SubmitRequest};
use rdq_envelope::{EnvelopeError, ErrorCode, TaskId};
use tokio_postgres::GenericClient;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use crate::options::validate_schema;

/// The statement [`submit_in`] runs, for `schema` (which must be a valid
/// rdq schema name): ten parameters, in the order of `SCHEMA.submit`.
/// Other clients (sqlx, a JDBC `Connection`, Go's `database/sql`) run the
/// same text.
pub fn submit_statement(schema: &str) -> String {
    format!(
        "SELECT {schema}.submit($1::text, $2::text, $3::bytea, $4::text, $5::text::jsonb, \
         $6::int4, $7::int8, $8::text, $9::text, $10::text)"
    )
}

/// Submits `request` through `client` (a transaction, usually) into the
/// rdq store in `schema`: the new task's id, or the id of the task already
/// holding its idempotency key in its queue.
///
/// Bad input is refused with rdq's stable codes (`INVALID_QUEUE_NAME`,
/// `RESERVED_HEADER`, `PAYLOAD_TOO_LARGE`, …) before anything is written;
/// the transaction is then aborted, as after any failed statement, and must
/// be rolled back. `request.system_headers` must be empty: only rdq sets
/// `rdq.` headers.
pub async fn submit_in(
    client: &impl GenericClient,
    schema: &str,
    request: &SubmitRequest,
) -> Result<TaskId, EngineError> {
    let headers = headers_of(schema, request)?;
    let priority = i32::from(request.priority);
    let delay_ms = i64::try_from(request.delay_ms).unwrap_or(i64::MAX);
    let params: [&(dyn ToSql + Sync); 10] = [
        &request.queue,
        &request.handler_ref,
        &request.payload,
        &request.payload_content_type,
        &headers,
        &priority,
        &delay_ms,
        &request.idempotency_key,
        &request.handler_version,
        &request.flow_key,
    ];
    let row = client
        .query_one(&submit_statement(schema), &params)
        .await
        .map_err(refusal)?;
    let id: String = row
        .try_get(0)
        .map_err(|e| EngineError::Unavailable(e.to_string()))?;
    TaskId::parse(&id)
        .ok_or_else(|| EngineError::Unavailable(format!("{schema}.submit answered {id:?}")))
}

/// Settles task `id` as SUCCEEDED through `client` (the transaction that
/// holds the handler's own writes), fenced by `lease_token` (the text its
/// claim handed out): `LEASE_LOST` when that claim is no longer the task's
/// (its lease lapsed and another worker claimed it; roll back), and
/// `TASK_NOT_FOUND`. The task is SUCCEEDED exactly when the transaction
/// commits.
pub async fn complete_in(
    client: &impl GenericClient,
    schema: &str,
    id: TaskId,
    lease_token: &str,
) -> Result<(), EngineError> {
    validate_schema(schema)?;
    client
        .execute(
            &format!("SELECT {schema}.complete($1::text, $2::text)"),
            &[&id.to_string(), &lease_token],
        )
        .await
        .map_err(|e| match e.as_db_error().and_then(|db| db.hint()) {
            Some("LEASE_LOST") => EngineError::LeaseLost(id),
            Some("TASK_NOT_FOUND") => EngineError::TaskNotFound(id),
            _ => refusal(e),
        })?;
    Ok(())
}

/// What every transactional submit checks before it sends anything (the
/// schema name, no system headers, no U+0000), and the headers' JSON text.
fn headers_of(schema: &str, request: &SubmitRequest) -> Result<String, EngineError> {
    validate_schema(schema)?;
    if !request.system_headers.is_empty() {
        return Err(EngineError::InvalidArgument(
            "system headers cannot be set on a transactional submit".into(),
        ));
    }
    refuse_nul(request)?;
    serde_json::to_string(&request.headers).map_err(|e| EngineError::InvalidArgument(e.to_string()))
}

/// Refuses a U+0000 in any text of `request`: PostgreSQL's `text` and
/// `jsonb` cannot hold one (an rdq node's submit can: it stores the
/// envelope as bytes).
fn refuse_nul(request: &SubmitRequest) -> Result<(), EngineError> {
    let texts = [
        ("queue", Some(&request.queue)),
        ("handler_ref", Some(&request.handler_ref)),
        ("payload_content_type", Some(&request.payload_content_type)),
        ("handler_version", request.handler_version.as_ref()),
        ("idempotency_key", request.idempotency_key.as_ref()),
        ("flow_key", request.flow_key.as_ref()),
    ];
    let headers = request
        .headers
        .iter()
        .flat_map(|(k, v)| [k, v])
        .map(|t| ("headers", Some(t)));
    match texts
        .into_iter()
        .chain(headers)
        .find(|(_, t)| t.is_some_and(|t| t.contains('\0')))
    {
        Some((field, _)) => Err(EngineError::Envelope(EnvelopeError::at(
            ErrorCode::InvalidField,
            field,
            "contains U+0000, which PostgreSQL text cannot hold: submit this task through rdq's API",
        ))),
        None => Ok(()),
    }
}

/// The engine error of a failed `SCHEMA.submit` call: its refusal with
/// rdq's code and field, or the database's own error.
fn refusal(e: tokio_postgres::Error) -> EngineError {
    let Some(db) = e.as_db_error() else {
        return EngineError::Unavailable(e.to_string());
    };
    if db.code() != &SqlState::INVALID_PARAMETER_VALUE {
        return EngineError::Unavailable(db.message().to_owned());
    }
    // "CODE: field: why", with the code as the hint and the field as the detail.
    let code = db.hint().unwrap_or_default();
    let field = db.detail().unwrap_or_default();
    let why = db
        .message()
        .splitn(3, ": ")
        .nth(2)
        .unwrap_or(db.message())
        .to_owned();
    let code = match code {
        "INVALID_QUEUE_NAME" => ErrorCode::InvalidQueueName,
        "INVALID_HANDLER_REF" => ErrorCode::InvalidHandlerRef,
        "RESERVED_HEADER" => ErrorCode::ReservedHeader,
        "PAYLOAD_TOO_LARGE" => ErrorCode::PayloadTooLarge,
        "INVALID_FIELD" => ErrorCode::InvalidField,
        _ => return EngineError::InvalidArgument(db.message().to_owned()),
    };
    EngineError::Envelope(EnvelopeError::at(code, field, why))
}

/// [`submit_in`] and [`complete_in`] on sqlx: `executor` is what the
/// caller holds, `&mut *transaction` usually (a `&mut PgConnection`).
#[cfg(feature = "sqlx")]
mod on_sqlx {
    use rdq_engine::{EngineError, SubmitRequest};
    use rdq_envelope::{EnvelopeError, ErrorCode, TaskId};
    use sqlx::{AssertSqlSafe, Executor, Postgres};

    use super::{headers_of, submit_statement};
    use crate::options::validate_schema;

    /// [`super::submit_in`] on an sqlx PostgreSQL executor.
    pub async fn submit_in_sqlx<'c, E>(
        executor: E,
        schema: &str,
        request: &SubmitRequest,
    ) -> Result<TaskId, EngineError>
    where
        E: Executor<'c, Database = Postgres>,
    {
        let headers = headers_of(schema, request)?;
        // The statement's only variable part is the schema name, checked
        // above to be a plain lower-case identifier; everything else is bound.
        let id: String = sqlx::query_scalar(AssertSqlSafe(submit_statement(schema)))
            .bind(&request.queue)
            .bind(&request.handler_ref)
            .bind(&request.payload)
            .bind(&request.payload_content_type)
            .bind(headers)
            .bind(i32::from(request.priority))
            .bind(i64::try_from(request.delay_ms).unwrap_or(i64::MAX))
            .bind(&request.idempotency_key)
            .bind(&request.handler_version)
            .bind(&request.flow_key)
            .fetch_one(executor)
            .await
            .map_err(|e| refusal(&e, None))?;
        TaskId::parse(&id)
            .ok_or_else(|| EngineError::Unavailable(format!("{schema}.submit answered {id:?}")))
    }

    /// [`super::complete_in`] on an sqlx PostgreSQL executor.
    pub async fn complete_in_sqlx<'c, E>(
        executor: E,
        schema: &str,
        id: TaskId,
        lease_token: &str,
    ) -> Result<(), EngineError>
    where
        E: Executor<'c, Database = Postgres>,
    {
        validate_schema(schema)?;
        // As above: only the checked schema name is spliced in.
        sqlx::query(AssertSqlSafe(format!(
            "SELECT {schema}.complete($1::text, $2::text)"
        )))
        .bind(id.to_string())
        .bind(lease_token)
        .execute(executor)
        .await
        .map_err(|e| refusal(&e, Some(id)))?;
        Ok(())
    }

    /// The engine error of a failed call, from its SQLSTATE and hint.
    fn refusal(e: &sqlx::Error, id: Option<TaskId>) -> EngineError {
        let Some(db) = e.as_database_error() else {
            return EngineError::Unavailable(e.to_string());
        };
        let pg = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>();
        let (hint, detail) = pg.map_or((None, None), |pg| (pg.hint(), pg.detail()));
        let why = db.message().splitn(3, ": ").nth(2).unwrap_or(db.message());
        let code = match (hint, id) {
            (Some("LEASE_LOST"), Some(id)) => return EngineError::LeaseLost(id),
            (Some("TASK_NOT_FOUND"), Some(id)) => return EngineError::TaskNotFound(id),
            (Some("INVALID_QUEUE_NAME"), _) => ErrorCode::InvalidQueueName,
            (Some("INVALID_HANDLER_REF"), _) => ErrorCode::InvalidHandlerRef,
            (Some("RESERVED_HEADER"), _) => ErrorCode::ReservedHeader,
            (Some("PAYLOAD_TOO_LARGE"), _) => ErrorCode::PayloadTooLarge,
            (Some("INVALID_FIELD"), _) => ErrorCode::InvalidField,
            _ => return EngineError::Unavailable(db.message().to_owned()),
        };
        EngineError::Envelope(EnvelopeError::at(code, detail.unwrap_or_default(), why))
    }
}

#[cfg(feature = "sqlx")]
pub use on_sqlx::{complete_in_sqlx, submit_in_sqlx};
