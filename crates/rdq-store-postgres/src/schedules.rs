//! Schedules in PostgreSQL: the `schedules` table (schema version 6).
//!
//! A tick's fires (up to `rdq_engine::FIRE_BATCH`) are one transaction: the
//! schedules' rows are locked in name order (`SELECT … FOR UPDATE`, so two
//! nodes' batches wait for each other instead of deadlocking), the fires
//! whose stored cursor is still the one their planner read are kept, their
//! tasks go through the store's grouped submit statement at once, and one
//! `UPDATE … FROM unnest(…)` moves the kept cursors and counters. A fire
//! whose cursor moved (another node fired first) changes nothing. Should
//! the connection drop after the commit was sent, the retry finds the
//! cursors moved and answers `Raced`: each fire happened once either way.

use std::collections::{BTreeMap, HashMap};

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

    async fn replace_schedule_if(
        &self,
        put: &SchedulePut,
        expected: &str,
    ) -> Result<bool, EngineError> {
        self.started().await?;
        let shared = self.shared();
        let sql = format!(
            "UPDATE {}.schedules SET owner = $2, definition = $3, updated_at = $4
             WHERE name = $1 AND definition = $5",
            shared.schema
        );
        // Applied once and tried again, it finds its own definition: not
        // replaced the second time, so only a rolled-back attempt is retried.
        retrying!(shared, Retry::RolledBackOnly, |conn, _applied| {
            let n = conn
                .client
                .execute(
                    &sql,
                    &[
                        &put.name,
                        &put.owner.as_str(),
                        &put.definition,
                        &put.now_ms,
                        &expected,
                    ],
                )
                .await?;
            Ok(n > 0)
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
        let mut outcomes = fire_batch(self.shared(), std::slice::from_ref(fire)).await?;
        outcomes
            .pop()
            .ok_or_else(|| EngineError::CorruptStore("a fire went unanswered".to_owned()))
    }

    async fn fire_schedules(&self, fires: &[FireRequest]) -> Vec<Result<FireOutcome, EngineError>> {
        let outcome = match self.started().await {
            Ok(_) => fire_batch(self.shared(), fires).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
            Err(e) => fires.iter().map(|_| Err(e.clone())).collect(),
        }
    }
}

/// Applies `fires` in one transaction (module documentation): locks their
/// rows in name order (so two nodes' batches never deadlock), keeps the
/// fires whose cursor is still the expected one, submits all their tasks
/// in one statement and records every won fire in one more.
async fn fire_batch(
    shared: &Shared,
    fires: &[FireRequest],
) -> Result<Vec<FireOutcome>, EngineError> {
    if fires.is_empty() {
        return Ok(Vec::new());
    }
    let s = &shared.schema;
    let lock = format!(
        "SELECT name, last_due, skips::text FROM {s}.schedules
         WHERE name = ANY($1) ORDER BY name FOR UPDATE"
    );
    let record = format!(
        "UPDATE {s}.schedules AS s SET last_due = r.last_due, skips = r.skips::jsonb,
             fires = s.fires + r.fires, last_task = coalesce(r.last_task, s.last_task),
             last_fire_at = CASE WHEN r.last_task IS NULL THEN s.last_fire_at ELSE $6 END
         FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $5::uuid[])
             AS r(name, last_due, skips, fires, last_task)
         WHERE s.name = r.name"
    );
    let names: Vec<&str> = fires.iter().map(|f| f.name.as_str()).collect();
    let encoded: Vec<Vec<Vec<u8>>> = fires
        .iter()
        .map(|f| f.tasks.iter().map(|t| t.envelope.encode()).collect())
        .collect();
    let now_ms = fires.iter().map(|f| f.now_ms).max().unwrap_or_default();
    retrying!(shared, Retry::Always, |conn, maybe_applied| {
        conn.client.batch_execute("BEGIN").await?;
        let rows = conn.client.query(&lock, &[&names]).await?;
        let mut cursors: HashMap<String, (Option<i64>, String)> =
            HashMap::with_capacity(rows.len());
        for row in &rows {
            cursors.insert(row.try_get(0)?, (row.try_get(1)?, row.try_get(2)?));
        }
        // The fires still planned from the stored cursor.
        let won: Vec<usize> = (0..fires.len())
            .filter(|&i| {
                cursors
                    .get(&fires[i].name)
                    .is_some_and(|(cursor, _)| *cursor == fires[i].expected_last_due_ms)
            })
            .collect();
        if won.is_empty() {
            conn.client.batch_execute("ROLLBACK").await?;
            return Ok(fires.iter().map(|_| FireOutcome::Raced).collect());
        }
        // The same statement as every submit: counts and wake-ups included.
        let tasks: Vec<&NewTask> = won.iter().flat_map(|&i| &fires[i].tasks).collect();
        let bytes: Vec<Vec<u8>> = won
            .iter()
            .flat_map(|&i| encoded[i].iter().cloned())
            .collect();
        let mut results = if tasks.is_empty() {
            Vec::new()
        } else {
            insert_tasks(shared, conn, &tasks, &bytes, maybe_applied).await?
        }
        .into_iter();
        let mut outcomes: Vec<FireOutcome> = fires.iter().map(|_| FireOutcome::Raced).collect();
        let (mut r_names, mut r_due, mut r_skips, mut r_fires, mut r_last) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for &i in &won {
            let fire = &fires[i];
            let mine: Vec<_> = results.by_ref().take(fire.tasks.len()).collect();
            let stored_skips = cursors.get(&fire.name).map_or("{}", |(_, s)| s.as_str());
            let mut counted: BTreeMap<String, u64> =
                serde_json::from_str(stored_skips).unwrap_or_default();
            add_skips(&mut counted, &fire.skipped);
            r_names.push(fire.name.as_str());
            r_due.push(fire.last_due_ms);
            r_skips.push(serde_json::to_string(&counted).unwrap_or_else(|_| "{}".to_owned()));
            r_fires.push(i64::try_from(created_count(&mine)).unwrap_or(i64::MAX));
            r_last.push(last_task(&mine).map(uuid_of));
            outcomes[i] = FireOutcome::Fired(mine);
        }
        conn.client
            .execute(
                &record,
                &[&r_names, &r_due, &r_skips, &r_fires, &r_last, &now_ms],
            )
            .await?;
        conn.client.batch_execute("COMMIT").await?;
        Ok(outcomes)
    })
}
