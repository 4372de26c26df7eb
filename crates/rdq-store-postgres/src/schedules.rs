//! Schedules in PostgreSQL: the `schedules` table (schema version 6).
//!
//! A fire is one transaction: the compare-and-swap on the cursor
//! (`UPDATE … WHERE last_due IS NOT DISTINCT FROM $expected`, which also
//! locks the row against every other node's fire), then the fire's tasks
//! through the store's grouped submit statement, then the counters. A node
//! whose update finds another cursor rolls back and changes nothing. Should
//! the connection drop after the commit was sent, the retry finds the
//! cursor moved and answers `Raced`: the fire happened once either way.

use std::collections::BTreeMap;

use async_trait::async_trait;
use rdq_engine::store::schedules::{add_skips, created_count, last_task};
use rdq_engine::{
    EngineError, FireOutcome, FireRequest, NewTask, ScheduleOwner, SchedulePut, Schedules,
    StoredSchedule,
};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::columns::{task_id_of, uuid_of};
use crate::error::Failure;
use crate::writes::insert_tasks;
use crate::{PostgresStore, Retry, Shared, retrying};

const COLUMNS: &str = "name, owner, definition, created_at, updated_at, last_due, last_task, \
     last_fire_at, fires, skips::text";

fn read(row: &Row) -> Result<StoredSchedule, Failure> {
    let owner: String = row.try_get(1)?;
    let last_task: Option<Uuid> = row.try_get(6)?;
    let fires: i64 = row.try_get(8)?;
    let skips: String = row.try_get(9)?;
    Ok(StoredSchedule {
        name: row.try_get(0)?,
        owner: ScheduleOwner::parse(&owner).unwrap_or_default(),
        definition: row.try_get(2)?,
        created_at_ms: row.try_get(3)?,
        updated_at_ms: row.try_get(4)?,
        last_due_ms: row.try_get(5)?,
        last_fired_task: last_task.map(task_id_of),
        last_fire_at_ms: row.try_get(7)?,
        fires: u64::try_from(fires).unwrap_or(0),
        skips: serde_json::from_str(&skips).unwrap_or_default(),
    })
}

#[async_trait]
impl Schedules for PostgresStore {
    async fn put_schedule(&self, put: &SchedulePut) -> Result<bool, EngineError> {
        self.started().await?;
        let shared = self.shared();
        let s = &shared.schema;
        let sql = format!(
            "INSERT INTO {s}.schedules (name, owner, definition, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $4)
             ON CONFLICT (name) DO UPDATE SET owner = excluded.owner,
                 definition = excluded.definition, updated_at = excluded.updated_at
             RETURNING (xmax = 0)"
        );
        retrying!(shared, Retry::Always, |conn, _applied| {
            let row = conn
                .client
                .query_one(
                    &sql,
                    &[&put.name, &put.owner.as_str(), &put.definition, &put.now_ms],
                )
                .await?;
            Ok(row.try_get::<_, bool>(0)?)
        })
    }

    async fn get_schedule(&self, name: &str) -> Result<Option<StoredSchedule>, EngineError> {
        self.started().await?;
        let shared = self.shared();
        let sql = format!(
            "SELECT {COLUMNS} FROM {}.schedules WHERE name = $1",
            shared.schema
        );
        retrying!(shared, Retry::Always, |conn, _applied| {
            let row = conn.client.query_opt(&sql, &[&name]).await?;
            row.as_ref().map(read).transpose()
        })
    }

    async fn list_schedules(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StoredSchedule>, EngineError> {
        self.started().await?;
        let shared = self.shared();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let sql = format!(
            "SELECT {COLUMNS} FROM {}.schedules WHERE $1::text IS NULL OR name > $1
             ORDER BY name LIMIT $2",
            shared.schema
        );
        retrying!(shared, Retry::Always, |conn, _applied| {
            let rows = conn.client.query(&sql, &[&after, &limit]).await?;
            rows.iter().map(read).collect::<Result<Vec<_>, _>>()
        })
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool, EngineError> {
        self.started().await?;
        let shared = self.shared();
        let sql = format!("DELETE FROM {}.schedules WHERE name = $1", shared.schema);
        retrying!(shared, Retry::RolledBackOnly, |conn, _applied| {
            Ok(conn.client.execute(&sql, &[&name]).await? > 0)
        })
    }

    async fn fire_schedule(&self, fire: &FireRequest) -> Result<FireOutcome, EngineError> {
        self.started().await?;
        fire_schedule(self.shared(), fire).await
    }
}

async fn fire_schedule(shared: &Shared, fire: &FireRequest) -> Result<FireOutcome, EngineError> {
    let s = &shared.schema;
    let cas = format!(
        "UPDATE {s}.schedules SET last_due = $2
         WHERE name = $1 AND last_due IS NOT DISTINCT FROM $3
         RETURNING skips::text"
    );
    let record = format!(
        "UPDATE {s}.schedules SET skips = $2::text::jsonb, fires = fires + $3,
             last_task = coalesce($4, last_task),
             last_fire_at = CASE WHEN $4::uuid IS NULL THEN last_fire_at ELSE $5 END
         WHERE name = $1"
    );
    let encoded: Vec<Vec<u8>> = fire.tasks.iter().map(|t| t.envelope.encode()).collect();
    retrying!(shared, Retry::Always, |conn, maybe_applied| {
        conn.client.batch_execute("BEGIN").await?;
        let moved = conn
            .client
            .query_opt(
                &cas,
                &[&fire.name, &fire.last_due_ms, &fire.expected_last_due_ms],
            )
            .await?;
        let Some(moved) = moved else {
            conn.client.batch_execute("ROLLBACK").await?;
            return Ok(FireOutcome::Raced);
        };
        let skips: String = moved.try_get(0)?;
        // The same statement as every submit: counts and wake-ups included.
        let tasks: Vec<&NewTask> = fire.tasks.iter().collect();
        let results = insert_tasks(shared, conn, &tasks, &encoded, maybe_applied).await?;
        let mut counted: BTreeMap<String, u64> = serde_json::from_str(&skips).unwrap_or_default();
        add_skips(&mut counted, &fire.skipped);
        let counted = serde_json::to_string(&counted).unwrap_or_else(|_| "{}".to_owned());
        let fires = i64::try_from(created_count(&results)).unwrap_or(i64::MAX);
        let last = last_task(&results).map(uuid_of);
        conn.client
            .execute(
                &record,
                &[&fire.name, &counted, &fires, &last, &fire.now_ms],
            )
            .await?;
        conn.client.batch_execute("COMMIT").await?;
        Ok(FireOutcome::Fired(results))
    })
}
