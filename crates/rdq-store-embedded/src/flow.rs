//! Flow control's stored state, read by the writer (inside a claim's
//! transaction) and by the readers (flow status): each flow-controlled
//! queue's [`FlowLedger`] in the `flows` table, and its IN_FLIGHT tasks per
//! flow key from the `tasks_busy` index (see `schema::FLOW`).

use std::collections::HashMap;

use rdq_engine::{EngineError, FlowLedger};
use rusqlite::{Connection, OptionalExtension, params};

/// `queue`'s stored ledger: `None` when the queue has no `flows` row (no
/// flow-controlled claim or throttle yet), `Some(Err)` when the row does not
/// parse.
pub(crate) fn stored_ledger(
    conn: &Connection,
    queue: &str,
) -> rusqlite::Result<Option<Result<FlowLedger, EngineError>>> {
    let text: Option<String> = conn
        .prepare_cached("SELECT ledger FROM flows WHERE queue = ?1")?
        .query_row(params![queue], |row| row.get(0))
        .optional()?;
    Ok(text.map(|text| {
        serde_json::from_str(&text).map_err(|e| {
            EngineError::CorruptStore(format!(
                "the stored flow ledger of queue {queue} does not parse: {e}"
            ))
        })
    }))
}

/// `queue`'s IN_FLIGHT tasks per flow key, when `total` of them are
/// IN_FLIGHT: keyed tasks counted from `tasks_busy` (an index range over
/// the queue's keyed IN_FLIGHT tasks only, no row read), and the rest under
/// `""` (tasks without a key, which store NULL outside flow-controlled
/// queues). Costs one index entry per IN_FLIGHT task of the queue, which
/// concurrency limits keep small.
pub(crate) fn in_flight_per_key(
    conn: &Connection,
    queue: &str,
    total: u64,
) -> rusqlite::Result<HashMap<String, u64>> {
    let mut per_key: HashMap<String, u64> = HashMap::new();
    let mut stmt = conn.prepare_cached(
        "SELECT flow_key, count(*) FROM tasks \
         WHERE queue = ?1 AND status = 1 AND flow_key IS NOT NULL GROUP BY flow_key",
    )?;
    let mut rows = stmt.query(params![queue])?;
    let mut keyed = 0u64;
    while let Some(row) = rows.next()? {
        let key: String = row.get(0)?;
        let n = u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0);
        keyed += n;
        *per_key.entry(key).or_default() += n;
    }
    let unkeyed = total.saturating_sub(keyed);
    if unkeyed > 0 {
        *per_key.entry(String::new()).or_default() += unkeyed;
    }
    Ok(per_key)
}

/// The number of `queue`'s IN_FLIGHT tasks the `queue_counts` table holds.
pub(crate) fn stored_in_flight(conn: &Connection, queue: &str) -> rusqlite::Result<i64> {
    Ok(conn
        .prepare_cached("SELECT in_flight FROM queue_counts WHERE queue = ?1")?
        .query_row(params![queue], |row| row.get(0))
        .optional()?
        .unwrap_or(0))
}
