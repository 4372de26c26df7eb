//! Schedules in the embedded store: the `schedules` table (schema version
//! 6). Reads use the read connections; puts, deletes and fires go to the
//! writer thread, where a fire's cursor compare-and-swap and its submits
//! share one transaction (`writer::schedules`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use rdq_engine::{
    EngineError, FireOutcome, FireRequest, ScheduleOwner, SchedulePut, Schedules, StoredSchedule,
    Submitted,
};
use rusqlite::{Connection, OptionalExtension, Row};

use crate::EmbeddedStore;
use crate::error::{from_sql, task_id};
use crate::writer::{Encoded, Job, ScheduleJob};

const COLUMNS: &str = "name, owner, definition, created_at, updated_at, last_due, last_task, \
     last_fire_at, fires, skips";

fn read(row: &Row<'_>) -> rusqlite::Result<StoredSchedule> {
    let owner: String = row.get(1)?;
    let last_task: Option<Vec<u8>> = row.get(6)?;
    let fires: i64 = row.get(8)?;
    let skips: String = row.get(9)?;
    Ok(StoredSchedule {
        name: row.get(0)?,
        owner: ScheduleOwner::parse(&owner).unwrap_or_default(),
        definition: row.get(2)?,
        created_at_ms: row.get(3)?,
        updated_at_ms: row.get(4)?,
        last_due_ms: row.get(5)?,
        last_fired_task: last_task.and_then(|b| task_id(&b).ok()),
        last_fire_at_ms: row.get(7)?,
        fires: u64::try_from(fires).unwrap_or(0),
        skips: serde_json::from_str::<BTreeMap<String, u64>>(&skips).unwrap_or_default(),
    })
}

fn get(conn: &Connection, name: &str) -> Result<Option<StoredSchedule>, EngineError> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM schedules WHERE name = ?1"))
        .and_then(|mut stmt| stmt.query_row([name], read).optional())
        .map_err(|e| from_sql(&e))
}

fn list(
    conn: &Connection,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<StoredSchedule>, EngineError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM schedules WHERE ?1 IS NULL OR name > ?1 ORDER BY name LIMIT ?2"
    ))
    .and_then(|mut stmt| {
        stmt.query_map(rusqlite::params![after, limit], read)?
            .collect::<rusqlite::Result<Vec<_>>>()
    })
    .map_err(|e| from_sql(&e))
}

#[async_trait]
impl Schedules for EmbeddedStore {
    async fn put_schedule(&self, put: &SchedulePut) -> Result<bool, EngineError> {
        let put = put.clone();
        self.write(|reply| Job::Schedule(ScheduleJob::Put { put, reply }))
            .await?
    }

    async fn replace_schedule_if(
        &self,
        put: &SchedulePut,
        expected: &str,
    ) -> Result<bool, EngineError> {
        let put = put.clone();
        let expected = expected.to_owned();
        self.write(|reply| {
            Job::Schedule(ScheduleJob::ReplaceIf {
                put,
                expected,
                reply,
            })
        })
        .await?
    }

    async fn get_schedule(&self, name: &str) -> Result<Option<StoredSchedule>, EngineError> {
        self.inner.readers.with(|conn| get(conn, name))
    }

    async fn list_schedules(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StoredSchedule>, EngineError> {
        self.inner.readers.with(|conn| list(conn, after, limit))
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool, EngineError> {
        let name = name.to_owned();
        self.write(|reply| Job::Schedule(ScheduleJob::Delete { name, reply }))
            .await?
    }

    async fn fire_schedule(&self, fire: &FireRequest) -> Result<FireOutcome, EngineError> {
        let tasks: Vec<_> = fire.tasks.iter().cloned().map(Encoded::task).collect();
        // As a submit does: keep what was written, so claims decode nothing.
        let written =
            (self.inner.pending).copies(tasks.iter().map(|t| (&t.bytes, &t.item.envelope)));
        let fire = FireRequest {
            tasks: Vec::new(),
            ..fire.clone()
        };
        let outcome = self
            .write(|reply| Job::Schedule(ScheduleJob::Fire { fire, tasks, reply }))
            .await??;
        if let FireOutcome::Fired(results) = &outcome {
            self.inner.pending.keep(
                results.iter().zip(written).filter_map(|(r, kept)| {
                    kept.filter(|_| matches!(r, Ok(Submitted::Created(_))))
                }),
            );
        }
        Ok(outcome)
    }
}
