//! Flow control: rates, per-key concurrency and rates, weighted fairness
//! and throttles, exact across every node on the database.
//!
//! A claim on a queue whose policy needs the ledger
//! ([`ClaimRequest::flow`]) is one transaction that first takes the queue's
//! advisory lock (the one a global concurrency limit takes), so such claims
//! of one queue run one at a time on every node. Under the lock it reads, in
//! one statement, the queue's IN_FLIGHT tasks per flow key, the due
//! candidates of each flow key (a loose index scan over `tasks_flow` for the
//! distinct keys, then up to the room of each key in claim order) and the
//! queue's [`FlowLedger`]. The engine's [`FlowLedger::select`] decides in
//! Rust; one more statement claims exactly the chosen tasks and stores the
//! ledger, and the transaction commits. The statements are pipelined: two
//! round trips in all.
//!
//! A policy whose limits are counts only ([`FlowPolicy::is_count_only`]:
//! global and per-key concurrency, claim order) needs nothing of that
//! decision but the counts and the candidates, so its claim is decided in
//! SQL ([`Q::FlowClaimCounted`]) and the whole transaction is one round
//! trip: the queue's lock is held for one statement and the commit, not
//! across a round trip to this process and back, which is what limited
//! claims of one queue on several nodes wait for. While a throttle holds
//! (back-pressure), that statement claims nothing and says so, and the
//! claim takes the two-trip way above, where [`FlowLedger::select`] judges
//! the throttles.
//!
//! In-flight counts come from the rows, never from the ledger: a task's flow
//! key is the one it was submitted with (`tasks.flow_key`, or the envelope's
//! for a row claimed before its queue came under flow control), so its
//! settle, its lease expiry or its deferral gives back the slot its claim
//! took, with no statement of its own. Before reading, the first claim of a
//! queue in each second ([`ADOPT_EVERY`]) gives the queue's PENDING rows
//! without a key theirs (rows written against the policy before this one:
//! see the schema's version 4). A queue without flow limits never reaches
//! this module.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rdq_engine::flow::Candidate;
use rdq_engine::{ClaimRequest, EngineError, FlowLedger, FlowPolicy, FlowStatus, machine};
use rdq_envelope::{Envelope, TaskId, Timestamp};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::columns::{task_id_of, uuid_of};
use crate::error::{Failure, undecodable};
use crate::pool::Conn;
use crate::sql::Q;
use crate::writes::MAX_CLAIM;
use crate::{Retry, Shared, retrying};

/// How often a flow-controlled queue's claims look for PENDING rows without
/// a flow key to adopt. Such rows are rare (written against the policy a
/// queue had before; storing a policy moves the rest), and the look, under
/// the queue's lock, cost a tenth of a limited queue's claim rate when every
/// claim took it.
pub(crate) const ADOPT_EVERY: Duration = Duration::from_secs(1);

/// When each queue's claims in this process last looked for rows to adopt.
#[derive(Debug, Default)]
pub(crate) struct Adoptions(Mutex<HashMap<String, Instant>>);

impl Adoptions {
    /// True when `queue`'s claim should look now (and notes that it did).
    fn due(&self, queue: &str) -> bool {
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        match last.get_mut(queue) {
            Some(at) if now.duration_since(*at) < ADOPT_EVERY => false,
            Some(at) => {
                *at = now;
                true
            }
            None => {
                last.insert(queue.to_owned(), now);
                true
            }
        }
    }
}

/// The ledger stored as `text`, or a fresh one for a queue without.
fn parse_ledger(queue: &str, text: Option<&str>) -> Result<FlowLedger, Failure> {
    match text {
        None => Ok(FlowLedger::default()),
        Some(text) => serde_json::from_str(text).map_err(|e| {
            Failure::Engine(EngineError::CorruptStore(format!(
                "the stored flow ledger of queue {queue} does not decode: {e}"
            )))
        }),
    }
}

/// The ledger as stored.
fn ledger_text(ledger: &FlowLedger) -> Result<String, Failure> {
    serde_json::to_string(ledger)
        .map_err(|e| Failure::Fatal(format!("a flow ledger does not encode: {e}")))
}

/// A count read from the database as `u64`.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// What a flow-controlled claim reads under the queue's lock.
struct Read {
    in_flight: HashMap<String, u64>,
    candidates: Vec<Candidate>,
    ledger: Option<String>,
}

impl Read {
    /// Sorts the rows of [`Q::FlowRead`] (led by their kind: 0 a key's
    /// IN_FLIGHT count, 1 a candidate, 2 the ledger).
    fn of(rows: &[tokio_postgres::Row]) -> Result<Self, Failure> {
        let mut read = Self {
            in_flight: HashMap::new(),
            candidates: Vec::new(),
            ledger: None,
        };
        for row in rows {
            let kind: i16 = row.try_get(0)?;
            match kind {
                0 => {
                    let key: String = row.try_get(1)?;
                    read.in_flight.insert(key, count(row.try_get(2)?));
                }
                1 => {
                    let due: i64 = row.try_get(4)?;
                    let priority: i16 = row.try_get(3)?;
                    read.candidates.push(Candidate {
                        key: row.try_get(1)?,
                        priority: u8::try_from(priority).unwrap_or(u8::MAX),
                        // A task due since submit is stored as due at i64::MIN.
                        due: if due == i64::MIN {
                            None
                        } else {
                            Timestamp::from_unix_ms(due)
                        },
                        id: task_id_of(row.try_get::<_, Uuid>(5)?),
                    });
                }
                _ => read.ledger = row.try_get(1)?,
            }
        }
        Ok(read)
    }
}

/// Claims under `flow` (see the module documentation).
pub(crate) async fn claim(
    shared: &Shared,
    request: &ClaimRequest,
    flow: &FlowPolicy,
) -> Result<Vec<Envelope>, EngineError> {
    if flow.is_count_only()
        && let Some(claimed) = claim_counted(shared, request, flow).await?
    {
        return Ok(claimed);
    }
    claim_selected(shared, request, flow).await
}

/// What every flow-controlled claim's statement is given
/// (`sql::flow_candidates`), with the lease's end.
struct Limits {
    max: usize,
    max_sql: i64,
    now_ms: i64,
    until: i64,
    key_limit: Option<i64>,
    global_limit: Option<i64>,
}

impl Limits {
    fn of(request: &ClaimRequest, flow: &FlowPolicy) -> Self {
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let max = request.max.min(MAX_CLAIM);
        Self {
            max,
            max_sql: i64::try_from(max).unwrap_or(1),
            now_ms: request.now.unix_ms(),
            until: request.now.plus_ms(request.lease_ms).unix_ms(),
            key_limit: flow.key_concurrency.map(int),
            global_limit: request.max_in_flight.map(int),
        }
    }

    /// [`Q::FlowClaimCounted`]'s parameters.
    fn counted_params<'a>(&'a self, queue: &'a (dyn ToSql + Sync)) -> [&'a (dyn ToSql + Sync); 6] {
        [
            queue,
            &self.now_ms,
            &self.max_sql,
            &self.key_limit,
            &self.global_limit,
            &self.until,
        ]
    }

    /// The tasks [`Q::FlowClaimCounted`] claimed (its `rows`), in claim
    /// order; `None` when a throttle holds and it claimed none.
    fn counted(
        &self,
        queue: &str,
        rows: &[tokio_postgres::Row],
    ) -> Result<Option<Vec<Envelope>>, Failure> {
        let mut claimed = Vec::with_capacity(rows.len());
        for row in rows {
            if row.try_get::<_, i16>(0)? != 0 {
                return Ok(None);
            }
            let env = Envelope::decode(row.try_get::<_, &[u8]>(1)?)
                .map_err(|e| undecodable(&format!("a task of queue {queue}"), &e))?;
            claimed.push(machine::replay_claim(env, self.now_ms, self.until)?);
        }
        // RETURNING keeps no order: restore the claim order.
        claimed.sort_by_key(crate::writes::claim_order);
        Ok(Some(claimed))
    }
}

/// Opens a flow-controlled claim's transaction, takes `queue`'s lock (and,
/// once a second per queue and process, adopts its rows without a flow
/// key) and runs `q`, then `COMMIT` when `commit`: one round trip.
///
/// Pipelined: each statement's snapshot is taken after the one before it
/// ended, so `q` sees every claim committed before the lock was granted.
/// No index-only scans and no bitmap scans: neither marks the index
/// entries of dead row versions (claimed tasks in `tasks_flow`, settled
/// ones in `tasks_lease`) as dead, so each read would step over every task
/// claimed or settled since the last vacuum, visiting the heap for each
/// (the IN_FLIGHT count's bitmap scan grew to 60,000 entries and 10 ms
/// within a run of `rdq bench --workload flow-limit`); an index scan marks
/// them once no transaction can see them, and later reads skip them.
async fn locked_query(
    shared: &Shared,
    conn: &mut Conn,
    queue: &str,
    q: Q,
    params: &[&(dyn ToSql + Sync)],
    commit: bool,
) -> Result<Vec<tokio_postgres::Row>, Failure> {
    let lock = conn.stmt(&shared.sql, Q::LockQueue).await?;
    let adopt = if shared.adopted.due(queue) {
        Some(conn.stmt(&shared.sql, Q::FlowAdopt).await?)
    } else {
        None
    };
    let stmt = conn.stmt(&shared.sql, q).await?;
    let client = &conn.client;
    let queue_param: [&(dyn ToSql + Sync); 1] = [&queue];
    let ((), _, (), rows, ()) = tokio::try_join!(
        client.batch_execute(
            "BEGIN; SET LOCAL enable_indexonlyscan = off; SET LOCAL enable_bitmapscan = off",
        ),
        client.execute(&lock, &queue_param),
        async {
            match &adopt {
                Some(adopt) => client.execute(adopt, &queue_param).await.map(drop),
                None => Ok(()),
            }
        },
        client.query(&stmt, params),
        async {
            if commit {
                client.batch_execute("COMMIT").await
            } else {
                Ok(())
            }
        },
    )?;
    Ok(rows)
}

/// A claim under a count-only policy in one round trip (module
/// documentation); `None` while a throttle holds.
async fn claim_counted(
    shared: &Shared,
    request: &ClaimRequest,
    flow: &FlowPolicy,
) -> Result<Option<Vec<Envelope>>, EngineError> {
    let queue = request.queue.as_str();
    let l = Limits::of(request, flow);
    retrying!(shared, Retry::Always, |conn, _applied| {
        let params = l.counted_params(&queue);
        let rows = locked_query(shared, conn, queue, Q::FlowClaimCounted, &params, true).await?;
        l.counted(queue, &rows)
    })
}

/// Claims under `flow` with [`FlowLedger::select`] deciding (module
/// documentation).
async fn claim_selected(
    shared: &Shared,
    request: &ClaimRequest,
    flow: &FlowPolicy,
) -> Result<Vec<Envelope>, EngineError> {
    let queue = request.queue.as_str();
    let l = Limits::of(request, flow);
    retrying!(shared, Retry::Always, |conn, _applied| {
        let params: [&(dyn ToSql + Sync); 5] =
            [&queue, &l.now_ms, &l.max_sql, &l.key_limit, &l.global_limit];
        let rows = locked_query(shared, conn, queue, Q::FlowRead, &params, false).await?;
        let read = Read::of(&rows)?;
        let before = parse_ledger(queue, read.ledger.as_deref())?;
        let mut ledger = before.clone();
        let in_flight: u64 = read.in_flight.values().sum();
        let room = request.room(in_flight).min(l.max);
        let chosen = ledger.select(flow, request.now, &read.in_flight, read.candidates, room);
        let changed = ledger != before;
        if chosen.is_empty() && !changed {
            conn.client.batch_execute("COMMIT").await?;
            return Ok(Vec::new());
        }
        let text = if changed {
            Some(ledger_text(&ledger)?)
        } else {
            None
        };
        let ids: Vec<Uuid> = chosen.iter().copied().map(uuid_of).collect();
        let stmt = conn.stmt(&shared.sql, Q::FlowClaim).await?;
        let client = &conn.client;
        let params: [&(dyn ToSql + Sync); 5] = [&queue, &l.now_ms, &ids, &l.until, &text];
        let (rows, ()) =
            tokio::try_join!(client.query(&stmt, &params), client.batch_execute("COMMIT"),)?;
        claimed(queue, &rows, &chosen, l.now_ms, l.until)
    })
}

/// The envelopes a flow-controlled claim handed out, in the order
/// [`FlowLedger::select`] chose them.
fn claimed(
    queue: &str,
    rows: &[tokio_postgres::Row],
    chosen: &[TaskId],
    now_ms: i64,
    until: i64,
) -> Result<Vec<Envelope>, Failure> {
    let rank: HashMap<TaskId, usize> = chosen.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let mut claimed = Vec::with_capacity(rows.len());
    for row in rows {
        let env = Envelope::decode(row.try_get::<_, &[u8]>(0)?)
            .map_err(|e| undecodable(&format!("a task of queue {queue}"), &e))?;
        claimed.push(machine::replay_claim(env, now_ms, until)?);
    }
    claimed.sort_by_key(|env| rank.get(&env.id).copied().unwrap_or(usize::MAX));
    Ok(claimed)
}

/// Throttles `key` of `queue` (the whole queue with `None`) until `until`,
/// under the queue's lock, so no claim's ledger write undoes it.
pub(crate) async fn throttle(
    shared: &Shared,
    queue: &str,
    key: Option<&str>,
    until: Timestamp,
) -> Result<(), EngineError> {
    retrying!(shared, Retry::Always, |conn, _applied| {
        let mut ledger = locked_ledger(shared, conn, queue).await?;
        ledger.throttle(key, until);
        let text = ledger_text(&ledger)?;
        let put = conn.stmt(&shared.sql, Q::PutLedger).await?;
        let client = &conn.client;
        let params: [&(dyn ToSql + Sync); 2] = [&queue, &text];
        tokio::try_join!(
            client.execute(&put, &params),
            client.batch_execute("COMMIT"),
        )?;
        Ok(())
    })
}

/// Opens a transaction, takes `queue`'s lock and reads its ledger.
async fn locked_ledger(
    shared: &Shared,
    conn: &mut Conn,
    queue: &str,
) -> Result<FlowLedger, Failure> {
    let lock = conn.stmt(&shared.sql, Q::LockQueue).await?;
    let get = conn.stmt(&shared.sql, Q::GetLedger).await?;
    let client = &conn.client;
    let params: [&(dyn ToSql + Sync); 1] = [&queue];
    let ((), _, row) = tokio::try_join!(
        client.batch_execute("BEGIN"),
        client.execute(&lock, &params),
        client.query_opt(&get, &params),
    )?;
    let text: Option<String> = row.map(|r| r.try_get(0)).transpose()?;
    parse_ledger(queue, text.as_deref())
}

/// `queue`'s flow under `flow` at `now`: its ledger and IN_FLIGHT tasks per
/// flow key, read in one statement (one snapshot), without the lock.
pub(crate) async fn status(
    shared: &Shared,
    queue: &str,
    flow: &FlowPolicy,
    now: Timestamp,
) -> Result<FlowStatus, EngineError> {
    retrying!(shared, Retry::Always, |conn, _applied| {
        let stmt = conn.stmt(&shared.sql, Q::FlowStatus).await?;
        let rows = conn.client.query(&stmt, &[&queue]).await?;
        let mut in_flight = HashMap::new();
        let mut text = None;
        for row in &rows {
            match row.try_get::<_, Option<String>>(0)? {
                Some(key) => {
                    in_flight.insert(key, count(row.try_get(1)?));
                }
                None => text = row.try_get::<_, Option<String>>(2)?,
            }
        }
        let ledger = parse_ledger(queue, text.as_deref())?;
        Ok(ledger.status(flow, now, &in_flight))
    })
}
