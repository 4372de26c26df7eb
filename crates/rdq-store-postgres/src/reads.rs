//! The read side: lookups, listings, counts, policies and lapsed leases.
//!
//! Each read is one statement in its own snapshot, on a pooled connection,
//! retried across a lost connection. A read issued after a write was
//! acknowledged sees that write: the write's answer came after its commit.

use std::collections::{BTreeMap, HashMap};

use rdq_engine::LeaseToken;
use rdq_engine::glob::Glob;
use rdq_engine::store::{MAX_PAGE, under_lease};
use rdq_engine::{EngineError, ListOrder, ListQuery, Page, QueueConfig, QueueCounts};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use uuid::Uuid;

use crate::columns::{stored_envelope, task_id_of, uuid_of};
use crate::error::Failure;
use crate::sql::{Listing, Q, status_code};
use crate::{Retry, Shared, retrying};

/// Count deltas past which `counts` folds them into one row per queue.
const FOLD_AT: i64 = 1_000;

/// The task with this id.
pub(crate) async fn get(shared: &Shared, id: TaskId) -> Result<Envelope, EngineError> {
    retrying!(shared, Retry::Always, |conn, _applied| {
        let stmt = conn.stmt(&shared.sql, Q::Get).await?;
        let row = conn
            .client
            .query_opt(&stmt, &[&uuid_of(id)])
            .await?
            .ok_or(Failure::Engine(EngineError::TaskNotFound(id)))?;
        stored_envelope(&row, 0)
    })
}

/// The tasks under these leases, in one query for the whole batch (what
/// the default of `Store::leased` does with one `get` per lease).
pub(crate) async fn leased(
    shared: &Shared,
    leases: &[(TaskId, LeaseToken)],
) -> Vec<Result<Envelope, EngineError>> {
    let ids: Vec<Uuid> = leases.iter().map(|&(id, _)| uuid_of(id)).collect();
    let found = retrying!(shared, Retry::Always, |conn, _applied| {
        let stmt = conn.stmt(&shared.sql, Q::GetMany).await?;
        let rows = conn.client.query(&stmt, &[&ids]).await?;
        let mut by_id = HashMap::with_capacity(rows.len());
        for row in &rows {
            by_id.insert(task_id_of(row.try_get(0)?), stored_envelope(row, 1)?);
        }
        Ok(by_id)
    });
    match found {
        Ok(by_id) => leases
            .iter()
            .map(|&(id, token)| {
                let got = by_id.get(&id).cloned().ok_or(EngineError::TaskNotFound(id));
                under_lease(got, id, token)
            })
            .collect(),
        Err(e) => vec![Err(e); leases.len()],
    }
}

/// IN_FLIGHT tasks whose lease ended at or before `now`, earliest first.
pub(crate) async fn expired_leases(
    shared: &Shared,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<Envelope>, EngineError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    retrying!(shared, Retry::Always, |conn, _applied| {
        let stmt = conn.stmt(&shared.sql, Q::Expired).await?;
        let rows = conn.client.query(&stmt, &[&now.unix_ms(), &limit]).await?;
        rows.iter().map(|row| stored_envelope(row, 0)).collect()
    })
}

/// One page of a queue's tasks by id, optionally filtered by status and by
/// a glob on the latest error type (matched here, reading on until the page
/// is full).
pub(crate) async fn list(shared: &Shared, query: &ListQuery) -> Result<Page, EngineError> {
    let limit = match query.limit {
        0 => MAX_PAGE,
        n => n.min(MAX_PAGE),
    };
    let glob = query
        .error_type
        .as_deref()
        .map(Glob::new)
        .transpose()
        .map_err(EngineError::InvalidArgument)?;
    let newest = query.order == ListOrder::NewestFirst;
    let listing = match query.status {
        None => Listing::All,
        Some(Status::Dead) => Listing::Dead,
        Some(_) => Listing::Status,
    };
    let status = query.status.map(status_code);
    // Without a filter every row read is kept; with one, read more per trip.
    let chunk = i64::try_from(if glob.is_some() { MAX_PAGE } else { limit }).unwrap_or(1);
    retrying!(shared, Retry::Always, |conn, _applied| {
        let mut items: Vec<Envelope> = Vec::with_capacity(limit.min(64));
        let mut cursor: Option<Uuid> = query.cursor.map(uuid_of);
        loop {
            let q = Q::List {
                listing,
                newest,
                cursor: cursor.is_some(),
            };
            let stmt = conn.stmt(&shared.sql, q).await?;
            let rows = match (cursor, status.filter(|_| listing == Listing::Status)) {
                (Some(c), Some(s)) => {
                    conn.client
                        .query(&stmt, &[&query.queue, &c, &chunk, &s])
                        .await?
                }
                (Some(c), None) => {
                    conn.client
                        .query(&stmt, &[&query.queue, &c, &chunk])
                        .await?
                }
                (None, Some(s)) => {
                    conn.client
                        .query(&stmt, &[&query.queue, &chunk, &s])
                        .await?
                }
                (None, None) => conn.client.query(&stmt, &[&query.queue, &chunk]).await?,
            };
            for row in &rows {
                let id: Uuid = row.try_get(0)?;
                cursor = Some(id);
                if items.len() == limit {
                    break;
                }
                if let Some(glob) = &glob {
                    let error_type: Option<&[u8]> = row.try_get(1)?;
                    let hit = error_type
                        .and_then(|t| std::str::from_utf8(t).ok())
                        .is_some_and(|t| glob.matches(t));
                    if !hit {
                        continue;
                    }
                }
                items.push(stored_envelope(row, 2)?);
            }
            let exhausted = i64::try_from(rows.len()).unwrap_or(0) < chunk;
            if items.len() == limit || exhausted {
                break;
            }
        }
        // A full page's cursor is its last id (there may be more); a
        // short page is the last.
        let next_cursor = if items.len() == limit {
            items.last().map(|env| env.id)
        } else {
            None
        };
        Ok(Page { items, next_cursor })
    })
}

/// Tasks per status for every queue with tasks or a stored policy, by name.
pub(crate) async fn counts(shared: &Shared) -> Result<Vec<QueueCounts>, EngineError> {
    let (counts, deltas) = retrying!(shared, Retry::Always, |conn, _applied| {
        let sums = conn.stmt(&shared.sql, Q::Counts).await?;
        let names = conn.stmt(&shared.sql, Q::QueueNames).await?;
        let (sums, names) = tokio::join!(
            conn.client.query(&sums, &[]),
            conn.client.query(&names, &[])
        );
        let mut by_queue: BTreeMap<String, QueueCounts> = BTreeMap::new();
        let mut deltas = 0i64;
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        for row in sums? {
            let c = QueueCounts {
                queue: row.try_get(0)?,
                pending: count(row.try_get(1)?),
                in_flight: count(row.try_get(2)?),
                succeeded: count(row.try_get(3)?),
                dead: count(row.try_get(4)?),
            };
            deltas += row.try_get::<_, i64>(5)?;
            if c.pending + c.in_flight + c.succeeded + c.dead > 0 {
                by_queue.insert(c.queue.clone(), c);
            }
        }
        for row in names? {
            let name: String = row.try_get(0)?;
            by_queue.entry(name.clone()).or_insert_with(|| QueueCounts {
                queue: name,
                ..QueueCounts::default()
            });
        }
        Ok((by_queue.into_values().collect::<Vec<_>>(), deltas))
    })?;
    if deltas > FOLD_AT {
        fold_counts(shared).await;
    }
    Ok(counts)
}

/// Folds the count deltas into one row per queue. Best effort: a failure only
/// leaves more rows for the next fold. Concurrent folds are safe: each
/// deletes and re-adds only the rows it saw, so totals never change.
async fn fold_counts(shared: &Shared) {
    let folded = retrying!(shared, Retry::RolledBackOnly, |conn, _applied| {
        let stmt = conn.stmt(&shared.sql, Q::FoldCounts).await?;
        conn.client.execute(&stmt, &[]).await?;
        Ok(())
    });
    if let Err(e) = folded {
        tracing::debug!(error = %e, "folding the count deltas failed");
    }
}

/// The stored policy of `queue`, from the cache when it may be trusted.
pub(crate) async fn get_config(
    shared: &Shared,
    queue: &str,
) -> Result<Option<QueueConfig>, EngineError> {
    if let Some(cached) = shared.policies.get(queue) {
        return Ok(cached);
    }
    let epoch = shared.policies.epoch();
    let text: Option<String> = retrying!(shared, Retry::Always, |conn, _applied| {
        let stmt = conn.stmt(&shared.sql, Q::GetConfig).await?;
        let row = conn.client.query_opt(&stmt, &[&queue]).await?;
        row.map(|r| r.try_get(0)).transpose().map_err(Failure::from)
    })?;
    let policy = match text {
        None => None,
        Some(text) => Some(serde_json::from_str::<QueueConfig>(&text).map_err(|e| {
            EngineError::CorruptStore(format!(
                "the stored policy of queue {queue} does not parse: {e}"
            ))
        })?),
    };
    shared.policies.insert(queue, policy.clone(), epoch);
    Ok(policy)
}

/// `queue`'s DLQ grouped by latest error type, with the newest envelope of
/// each group, in one statement over the DLQ's index. (PostgreSQL has no
/// `max(uuid)`; a uuid's text form sorts as its bytes do.)
pub(crate) async fn dead_groups(
    shared: &Shared,
    queue: &str,
) -> Result<Vec<rdq_engine::DeadGroup>, EngineError> {
    let s = shared.sql.schema().to_owned();
    let text = format!(
        "SELECT g.error_type, g.n, t.envelope, t.status, t.claimed_at, t.lease_expires_at, t.finished_at
         FROM (SELECT error_type, count(*) AS n, max(id::text)::uuid AS newest
               FROM {s}.tasks WHERE queue = $1 AND status = 3 GROUP BY error_type) g
         JOIN {s}.tasks t ON t.id = g.newest"
    );
    let mut groups = retrying!(shared, Retry::Always, |conn, _applied| {
        let rows = conn.client.query(text.as_str(), &[&queue]).await?;
        let mut groups = Vec::with_capacity(rows.len());
        for row in &rows {
            let error_type: Option<&[u8]> = row.try_get(0)?;
            let count: i64 = row.try_get(1)?;
            groups.push(rdq_engine::DeadGroup {
                error_type: error_type.map(|t| String::from_utf8_lossy(t).into_owned()),
                count: u64::try_from(count).unwrap_or(0),
                newest: stored_envelope(row, 2)?,
            });
        }
        Ok(groups)
    })?;
    rdq_engine::store::sort_groups(&mut groups);
    Ok(groups)
}

/// The lowest id among `queue`'s PENDING tasks, from the two claim indexes
/// (a uuid's text form sorts as its bytes do).
pub(crate) async fn oldest_pending(
    shared: &Shared,
    queue: &str,
) -> Result<Option<TaskId>, EngineError> {
    let s = shared.sql.schema().to_owned();
    let text = format!(
        "SELECT min(id)::uuid FROM (
            SELECT min(id::text) AS id FROM {s}.tasks
            WHERE queue = $1 AND status = 0 AND flow_key IS NULL
            UNION ALL
            SELECT min(id::text) FROM {s}.tasks
            WHERE queue = $1 AND status = 0 AND flow_key IS NOT NULL) pending"
    );
    retrying!(shared, Retry::Always, |conn, _applied| {
        let row = conn.client.query_one(text.as_str(), &[&queue]).await?;
        let id: Option<Uuid> = row.try_get(0)?;
        Ok(id.map(crate::columns::task_id_of))
    })
}
