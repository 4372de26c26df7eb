//! Every statement the store runs, as text for one schema.
//!
//! Statements are named by [`Q`] and prepared once per connection on first
//! use (see `pool.rs`), so the hot path never parses SQL. Batch writes take
//! one array per column and `unnest` them: a thousand tasks are one statement
//! and one round trip. Each write also appends its change to the per-queue
//! counts (`queue_counts`, an insert-only log of deltas, so concurrent writers
//! never queue behind one hot counter row) in the same statement, and
//! statements that make work due queue a `NOTIFY` in the same transaction,
//! delivered when it commits.

use rdq_engine::machine::MAX_COUNT;
use rdq_envelope::Status;

/// The columns of `tasks` a batch write sets, in the order of its arrays:
/// `$n::type[]` for each, as `unnest` takes them.
const ROW_ARRAYS: &str = "$3::int2[], $4::int2[], $5::int8[], $6::int8[], $7::int8[], \
     $8::bytea[], $9::int8[], $10::bytea[]";

/// Those columns' names, matching [`ROW_ARRAYS`].
const ROW_COLUMNS: &str = "status, priority, next_attempt_at, lease_expires_at, claim_count, error_type, finished_at, envelope";

/// `SET` of every derived column and the envelope from `v`.
const SET_ROW: &str = "status = v.status, priority = v.priority, \
     next_attempt_at = v.next_attempt_at, lease_expires_at = v.lease_expires_at, \
     claim_count = v.claim_count, error_type = v.error_type, \
     finished_at = v.finished_at, envelope = v.envelope, claimed_at = NULL";

/// `SET` of a settle: [`SET_ROW`], except that a row given no envelope
/// (a success: `Rows::push`) keeps its bytes and the claim's columns they
/// are read with, `claimed_at` and `lease_expires_at`.
const SET_SETTLED: &str = "status = v.status, priority = v.priority, \
     next_attempt_at = v.next_attempt_at, \
     lease_expires_at = CASE WHEN v.envelope IS NULL THEN t.lease_expires_at ELSE v.lease_expires_at END, \
     claim_count = v.claim_count, error_type = v.error_type, \
     finished_at = v.finished_at, envelope = coalesce(v.envelope, t.envelope), \
     claimed_at = CASE WHEN v.envelope IS NULL THEN t.claimed_at END";

/// How a stored envelope is read: the bytes and what
/// `columns::stored_envelope` needs to finish a claim written in SQL.
const STORED: &str = "envelope, status, claimed_at, lease_expires_at, finished_at";

/// A row's flow key as its envelope has it (its `rdq.flow_key` header, `''`
/// without one): the envelope is canonical JSON.
const ENVELOPE_FLOW_KEY: &str =
    "coalesce(convert_from(envelope, 'UTF8')::json -> 'headers' ->> 'rdq.flow_key', '')";

/// Most rows a claim moves to the other claim index at once (rows written
/// against a policy that has since changed: `Q::Claim`, `Q::FlowAdopt`).
const MOVE_BATCH: i64 = 1000;

/// The start of a flow-controlled claim's statement, after the queue's
/// lock (`$1` queue, `$2` now, `$3` most to claim, `$4` the per-key limit,
/// `$5` the global one): `busy`, the IN_FLIGHT tasks per flow key; `room`,
/// what the global limit and `$3` leave; `cands`, the due PENDING tasks of
/// each key in claim order, up to the room and to one more than the key's
/// limit leaves (so a claim its limit cuts short can be told), each with
/// its `rank` in its key and the key's `key_room` (NULL: no per-key limit).
/// The keys are found by a loose index scan over `tasks_flow`.
fn flow_candidates(s: &str) -> String {
    format!(
        "WITH RECURSIVE busy AS (
            SELECT coalesce(flow_key, {ENVELOPE_FLOW_KEY}) AS flow_key, count(*) AS n
            FROM {s}.tasks
            WHERE status = 1 AND queue = $1 GROUP BY 1
         ), room AS (
            SELECT greatest(least($3::int8,
                $5::int8 - (SELECT coalesce(sum(n), 0) FROM busy)::int8), 0) AS r
         ), keys (k) AS (
            (SELECT flow_key FROM {s}.tasks
             WHERE queue = $1 AND status = 0 AND flow_key IS NOT NULL
             ORDER BY flow_key LIMIT 1)
            UNION ALL
            SELECT (SELECT t.flow_key FROM {s}.tasks t
                    WHERE t.queue = $1 AND t.status = 0 AND t.flow_key IS NOT NULL
                        AND t.flow_key > keys.k
                    ORDER BY t.flow_key LIMIT 1)
            FROM keys WHERE keys.k IS NOT NULL
         ), limits AS (
            SELECT keys.k, room.r, CASE WHEN $4::int8 IS NOT NULL THEN greatest($4::int8
                - coalesce((SELECT n FROM busy WHERE busy.flow_key = keys.k), 0), 0)
                END AS key_room
            FROM keys CROSS JOIN room WHERE keys.k IS NOT NULL
         ), cands AS (
            SELECT c.*, limits.key_room FROM limits CROSS JOIN LATERAL (
                SELECT t.flow_key, t.priority, t.next_attempt_at, t.id,
                    row_number() OVER (
                        ORDER BY t.priority DESC, t.next_attempt_at, t.id) AS rank
                FROM {s}.tasks t
                WHERE t.queue = $1 AND t.status = 0 AND t.flow_key IS NOT NULL
                    AND t.flow_key = limits.k
                    AND t.next_attempt_at <= $2 AND t.claim_count < {MAX_COUNT}
                ORDER BY t.priority DESC, t.next_attempt_at, t.id
                LIMIT least(limits.r, coalesce(limits.key_room + 1, limits.r))
            ) c
         )"
    )
}

/// Which statuses a listing walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Listing {
    /// Every status: the primary key in id order, filtered by queue.
    All,
    /// DEAD only, on the DLQ's partial index.
    Dead,
    /// Another single status (a parameter): the primary key, filtered.
    Status,
}

/// A statement of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Q {
    /// Grouped submit: insert every new task, skip conflicts, count, notify.
    Submit,
    /// Grouped settle: compare-and-swap on `(status, claim_count)` and the
    /// task's cancel request.
    Settle,
    /// Rewrites rows this transaction holds locked (redrive).
    Rewrite,
    /// Claims the next due PENDING tasks of a queue, skipping locked ones.
    Claim,
    /// Serialises the limited claims of one queue until the transaction
    /// ends (a transaction-scoped advisory lock on the schema and queue).
    LockQueue,
    /// The IN_FLIGHT tasks of a queue (from the lease index).
    InFlight,
    /// A flow-controlled claim's reads, after the queue's lock: IN_FLIGHT
    /// tasks per flow key, the due candidates of each key and the ledger.
    FlowRead,
    /// Gives a flow-controlled queue's PENDING rows without a flow key
    /// theirs (rows written against the policy before flow control).
    FlowAdopt,
    /// Claims chosen PENDING tasks by id and stores the queue's ledger.
    FlowClaim,
    /// A whole flow-controlled claim in one statement, after the queue's
    /// lock, for a policy whose limits are counts only
    /// (`FlowPolicy::is_count_only`).
    FlowClaimCounted,
    /// One queue's flow ledger.
    GetLedger,
    /// Stores one queue's flow ledger.
    PutLedger,
    /// IN_FLIGHT tasks per flow key and the ledger (flow status).
    FlowStatus,
    /// IN_FLIGHT tasks whose lease ended.
    Expired,
    /// One task by id.
    Get,
    /// Tasks by id, each row led by its id.
    GetMany,
    /// The task holding an idempotency key.
    ByKey,
    /// [`Q::Submit`] for tasks with unique keys (`$15`, their slots):
    /// a task whose slot another row names is not inserted, as one whose
    /// id is taken (`docs/uniqueness.md`).
    SubmitUnique,
    /// The rows naming the slots (`$1` queues, `$2` slots), each led by its
    /// queue, slot and id, locked in id order.
    SlotHolders,
    /// The row naming a slot (`$1` queue, `$2` slot), led by its id.
    SlotHolder,
    /// [`Q::SlotHolder`], the row locked.
    SlotHolderForUpdate,
    /// Clears the slot of rows by id (their slots move to new tasks).
    SlotFree,
    /// Row `$1` names slot `$2` (a redriven task takes its slot back).
    SlotTake,
    /// A waiting holder of a unique slot takes a submit's payload
    /// (replace, debounce).
    ReplaceHolder,
    /// A page of a queue's tasks.
    List {
        /// Which statuses.
        listing: Listing,
        /// Newest first (by id, descending).
        newest: bool,
        /// Continues after a cursor.
        cursor: bool,
    },
    /// Dead tasks of a queue by id (redrive by ids).
    DeadByIds {
        /// Lock them (a real redrive) or only read (a dry run).
        lock: bool,
    },
    /// PENDING tasks of a queue by id (cancel).
    PendingByIds {
        /// Lock them (a real cancel) or only read (a dry run).
        lock: bool,
    },
    /// Dead tasks of a queue in id order (redrive by filter).
    DeadPage {
        /// Lock them (a real redrive) or only read (a dry run).
        lock: bool,
        /// Continues after a cursor.
        cursor: bool,
    },
    /// Removes every task of a queue in one status.
    Purge(Status),
    /// Counts the tasks of a queue in one status (a dry-run purge).
    CountStatus(Status),
    /// Removes one task.
    Delete,
    /// Removes old SUCCEEDED tasks of a queue.
    Prune,
    /// Sums the count deltas per queue.
    Counts,
    /// Folds the count deltas into one row per queue.
    FoldCounts,
    /// Names of queues with a stored policy.
    QueueNames,
    /// One queue's stored policy.
    GetConfig,
    /// Stores a queue's policy and tells every node.
    PutConfig,
    /// Every cursor of source `$1`, by partition.
    SourceCursors,
    /// The cursor of source `$1`, partition `$2`, and when it moved.
    SourceCursor,
    /// A partition's first cursor (`$1` source, `$2` partition, `$3` next,
    /// `$4` now), unless it has one: a row when it was inserted. A racing
    /// insert of the same partition waits for this one's transaction.
    CursorCreate,
    /// Moves the cursor of `$1`, `$2` from `$3` to `$4` (at `$5`): a row
    /// when it still held `$3`. Racing moves wait on the row's lock and
    /// compare again with what the winner committed.
    CursorMove,
    /// Removes every cursor of source `$1`.
    DeleteCursors,
}

/// The statement texts of one schema.
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    schema: String,
}

/// The count column of a status in `queue_counts`.
fn count_column(status: Status) -> &'static str {
    match status {
        Status::Pending => "pending",
        Status::InFlight => "in_flight",
        Status::Succeeded => "succeeded",
        Status::Dead => "dead",
    }
}

/// The stored code of a status (`tasks.status`).
pub(crate) fn status_code(status: Status) -> i16 {
    match status {
        Status::Pending => 0,
        Status::InFlight => 1,
        Status::Succeeded => 2,
        Status::Dead => 3,
    }
}

/// A `WHERE` condition for the tasks of queue `$1` in `status`, written so
/// that PENDING rows are read from the two claim indexes (with and without
/// a flow key) rather than by a scan of the table.
fn of_status(s: &str, status: Status) -> String {
    match status {
        Status::Pending => format!(
            "id IN (SELECT id FROM {s}.tasks WHERE queue = $1 AND status = 0 AND flow_key IS NULL
                    UNION ALL
                    SELECT id FROM {s}.tasks WHERE queue = $1 AND status = 0
                        AND flow_key IS NOT NULL)"
        ),
        other => format!("queue = $1 AND status = {}", status_code(other)),
    }
}

/// Per-queue deltas of a CTE `src` whose rows carry `status` (the new
/// status) and `old` (the previous one, NULL for a new row), as four
/// `count(*) FILTER` expressions.
const DELTAS: &str = "\
    count(*) FILTER (WHERE status = 0) - count(*) FILTER (WHERE old = 0), \
    count(*) FILTER (WHERE status = 1) - count(*) FILTER (WHERE old = 1), \
    count(*) FILTER (WHERE status = 2) - count(*) FILTER (WHERE old = 2), \
    count(*) FILTER (WHERE status = 3) - count(*) FILTER (WHERE old = 3)";

/// Keeps only queues whose counts changed.
const CHANGED: &str = "HAVING count(*) FILTER (WHERE status IS DISTINCT FROM old) > 0";

impl Sql {
    /// The statements of `schema` (a validated plain name).
    pub(crate) fn new(schema: &str) -> Self {
        Self {
            schema: schema.to_owned(),
        }
    }

    /// The schema these statements run in.
    pub(crate) fn schema(&self) -> &str {
        &self.schema
    }

    /// The text of `q`.
    pub(crate) fn text(&self, q: Q) -> String {
        let s = &self.schema;
        match q {
            Q::Submit => submit_sql(s, false),
            Q::SubmitUnique => submit_sql(s, true),
            // `v.cancel`: the new state knows the task was asked to stop;
            // one that does not cannot overwrite a request (schema v5).
            Q::Settle => format!(
                "WITH v AS (
                    SELECT * FROM unnest($1::uuid[], $2::int8[], {ROW_ARRAYS}, $13::bool[])
                        AS v(id, expected, {ROW_COLUMNS}, cancel)
                 ), u AS (
                    UPDATE {s}.tasks t SET {SET_SETTLED},
                        cancel_requested = (v.status = 1 AND v.cancel)
                    FROM v
                    WHERE t.id = v.id AND t.status = 1 AND t.claim_count = v.expected
                        AND (NOT t.cancel_requested OR v.cancel)
                    RETURNING t.id, t.queue, t.status, 1::int2 AS old
                 ), counted AS (
                    INSERT INTO {s}.queue_counts (queue, pending, in_flight, succeeded, dead)
                    SELECT queue, {DELTAS} FROM u GROUP BY queue {CHANGED}
                 ), woken AS (
                    SELECT pg_notify($11::text, 'w ' || $12::text || ' ' || queue)
                    FROM (SELECT DISTINCT queue FROM u WHERE status = 0) q
                 )
                 SELECT id, (SELECT count(*) FROM woken) FROM u"
            ),
            Q::Rewrite => format!(
                "WITH v AS (
                    SELECT * FROM unnest($1::uuid[], $2::int2[], {ROW_ARRAYS})
                        AS v(id, old, {ROW_COLUMNS})
                 ), u AS (
                    UPDATE {s}.tasks t SET {SET_ROW}
                    FROM v
                    WHERE t.id = v.id
                    RETURNING t.id, t.queue, t.status, v.old
                 ), counted AS (
                    INSERT INTO {s}.queue_counts (queue, pending, in_flight, succeeded, dead)
                    SELECT queue, {DELTAS} FROM u GROUP BY queue {CHANGED}
                 ), woken AS (
                    SELECT pg_notify($11::text, 'w ' || $12::text || ' ' || queue)
                    FROM (SELECT DISTINCT queue FROM u WHERE status = 0) q
                 )
                 SELECT id, (SELECT count(*) FROM woken) FROM u"
            ),
            // A queue without flow control claims from `tasks_claim` (rows
            // without a flow key), first moving there the rows written with
            // one while it was under flow control (a policy stored since, or
            // a node that had not heard of it yet): the next claim sees them.
            Q::Claim => format!(
                "WITH moved AS (
                    UPDATE {s}.tasks SET flow_key = NULL
                    WHERE id IN (
                        SELECT id FROM {s}.tasks
                        WHERE queue = $1 AND status = 0 AND flow_key IS NOT NULL
                        LIMIT {MOVE_BATCH} FOR UPDATE SKIP LOCKED)
                 ), picked AS (
                    SELECT id FROM {s}.tasks
                    WHERE queue = $1 AND status = 0 AND flow_key IS NULL
                        AND next_attempt_at <= $2 AND claim_count < {MAX_COUNT}
                    ORDER BY priority DESC, next_attempt_at, id
                    LIMIT $3
                    FOR UPDATE SKIP LOCKED
                 ), claimed AS (
                    UPDATE {s}.tasks t
                    SET status = 1, claim_count = t.claim_count + 1, claimed_at = $2,
                        lease_expires_at = $4
                    FROM picked WHERE t.id = picked.id
                    RETURNING t.queue, t.envelope
                 ), counted AS (
                    INSERT INTO {s}.queue_counts (queue, pending, in_flight)
                    SELECT queue, -count(*), count(*) FROM claimed GROUP BY queue
                 )
                 SELECT envelope FROM claimed"
            ),
            Q::LockQueue => format!(
                "SELECT pg_advisory_xact_lock(hashtextextended('{s}.' || $1, 0))"
            ),
            Q::InFlight => format!(
                "SELECT count(*) FROM {s}.tasks WHERE status = 1 AND queue = $1"
            ),
            Q::FlowRead => format!(
                "{candidates}
                 SELECT 0::int2, flow_key, n, NULL::int2, NULL::int8, NULL::uuid FROM busy
                 UNION ALL
                 SELECT 1::int2, flow_key, NULL, priority, next_attempt_at, id FROM cands
                 UNION ALL
                 SELECT 2::int2, ledger, NULL, NULL, NULL, NULL FROM {s}.flow_ledgers
                 WHERE queue = $1",
                candidates = flow_candidates(s)
            ),
            // The whole claim of a policy that limits counts only, decided
            // in SQL (`flow.rs`): the candidates a key's limit leaves in
            // claim order, none while a throttle holds (then a row of kind
            // 1 sends the claim to the ledger's way), and a claim cut short
            // by a key's limit counted in the ledger, as
            // `FlowLedger::select` counts it. The chosen rows are looked up
            // by id (`status + 0`, as in `Q::FlowClaim`) and checked again
            // on their latest version, so a cancel that got there first
            // wins.
            Q::FlowClaimCounted => format!(
                "{candidates}, blocked AS (
                    SELECT coalesce((l ->> 'blocked_until')::int8, 0) > $2
                        OR EXISTS (
                            SELECT 1 FROM jsonb_each(coalesce(l -> 'keys', '{{}}'::jsonb)) k
                            WHERE coalesce((k.value ->> 'blocked_until')::int8, 0) > $2) AS b
                    FROM (SELECT ledger::jsonb AS l FROM {s}.flow_ledgers WHERE queue = $1) x
                 ), picked AS (
                    SELECT id FROM cands
                    WHERE (key_room IS NULL OR rank <= key_room)
                        AND NOT EXISTS (SELECT 1 FROM blocked WHERE b)
                    ORDER BY priority DESC, next_attempt_at, id
                    LIMIT (SELECT r FROM room)
                 ), claimed AS (
                    UPDATE {s}.tasks t
                    SET status = 1, claim_count = t.claim_count + 1, claimed_at = $2,
                        lease_expires_at = $6
                    FROM picked
                    WHERE t.id = picked.id AND t.status + 0 = 0 AND t.next_attempt_at <= $2
                        AND t.claim_count < {MAX_COUNT}
                    RETURNING t.queue, t.envelope
                 ), counted AS (
                    INSERT INTO {s}.queue_counts (queue, pending, in_flight)
                    SELECT queue, -count(*), count(*) FROM claimed GROUP BY queue
                 ), cut AS (
                    INSERT INTO {s}.flow_ledgers AS f (queue, ledger)
                    SELECT $1, '{{\"throttled_claims\":1}}'
                    WHERE NOT EXISTS (SELECT 1 FROM blocked WHERE b)
                        AND (SELECT count(*) FROM picked)
                            < least((SELECT r FROM room), (SELECT count(*) FROM cands))
                    ON CONFLICT (queue) DO UPDATE SET ledger = (f.ledger::jsonb
                        || jsonb_build_object('throttled_claims',
                            coalesce((f.ledger::jsonb ->> 'throttled_claims')::int8, 0) + 1))::text
                 )
                 SELECT 0::int2, envelope FROM claimed
                 UNION ALL
                 SELECT 1::int2, NULL FROM blocked WHERE b AND (SELECT r FROM room) > 0",
                candidates = flow_candidates(s)
            ),
            Q::FlowAdopt => format!(
                "UPDATE {s}.tasks SET flow_key = {ENVELOPE_FLOW_KEY}
                 WHERE id IN (
                    SELECT id FROM {s}.tasks
                    WHERE queue = $1 AND status = 0 AND flow_key IS NULL
                    LIMIT {MOVE_BATCH} FOR UPDATE SKIP LOCKED)"
            ),
            // `status + 0` keeps the partial indexes on status out of the
            // plan: a queue newer than the table's statistics looks empty
            // to the planner, which then scans `tasks_flow` over the whole
            // backlog filtering by id instead of looking the ids up.
            Q::FlowClaim => format!(
                "WITH picked AS (
                    SELECT id FROM {s}.tasks
                    WHERE id = ANY($3::uuid[]) AND queue = $1 AND status + 0 = 0
                        AND next_attempt_at <= $2 AND claim_count < {MAX_COUNT}
                    FOR UPDATE
                 ), claimed AS (
                    UPDATE {s}.tasks t
                    SET status = 1, claim_count = t.claim_count + 1, claimed_at = $2,
                        lease_expires_at = $4
                    FROM picked WHERE t.id = picked.id
                    RETURNING t.queue, t.envelope
                 ), counted AS (
                    INSERT INTO {s}.queue_counts (queue, pending, in_flight)
                    SELECT queue, -count(*), count(*) FROM claimed GROUP BY queue
                 ), kept AS (
                    INSERT INTO {s}.flow_ledgers (queue, ledger)
                    SELECT $1, $5::text WHERE $5::text IS NOT NULL
                    ON CONFLICT (queue) DO UPDATE SET ledger = excluded.ledger
                 )
                 SELECT envelope FROM claimed"
            ),
            Q::GetLedger => format!("SELECT ledger FROM {s}.flow_ledgers WHERE queue = $1"),
            Q::PutLedger => format!(
                "INSERT INTO {s}.flow_ledgers (queue, ledger) VALUES ($1, $2)
                 ON CONFLICT (queue) DO UPDATE SET ledger = excluded.ledger"
            ),
            Q::FlowStatus => format!(
                "SELECT NULL::text, NULL::int8, ledger FROM {s}.flow_ledgers WHERE queue = $1
                 UNION ALL
                 SELECT coalesce(flow_key, {ENVELOPE_FLOW_KEY}), count(*), NULL FROM {s}.tasks
                 WHERE status = 1 AND queue = $1 GROUP BY 1"
            ),
            Q::Expired => format!(
                "SELECT {STORED} FROM {s}.tasks
                 WHERE status = 1 AND lease_expires_at <= $1
                 ORDER BY lease_expires_at LIMIT $2"
            ),
            Q::Get => format!("SELECT {STORED} FROM {s}.tasks WHERE id = $1"),
            Q::SlotHolders => format!(
                "SELECT queue, unique_slot, id, {STORED} FROM {s}.tasks
                 WHERE (queue, unique_slot) IN (SELECT * FROM unnest($1::text[], $2::text[]))
                 ORDER BY id FOR UPDATE"
            ),
            Q::SlotHolder => format!(
                "SELECT id, {STORED} FROM {s}.tasks WHERE queue = $1 AND unique_slot = $2"
            ),
            Q::SlotHolderForUpdate => format!(
                "SELECT id, {STORED} FROM {s}.tasks WHERE queue = $1 AND unique_slot = $2
                 FOR UPDATE"
            ),
            Q::SlotFree => {
                format!("UPDATE {s}.tasks SET unique_slot = NULL WHERE id = ANY($1::uuid[])")
            }
            Q::SlotTake => format!("UPDATE {s}.tasks SET unique_slot = $2 WHERE id = $1"),
            Q::ReplaceHolder => format!(
                "UPDATE {s}.tasks SET envelope = $2, next_attempt_at = $3,
                    flow_key = CASE WHEN flow_key IS NULL THEN NULL ELSE $4 END
                 WHERE id = $1 AND status = 0"
            ),
            Q::GetMany => format!("SELECT id, {STORED} FROM {s}.tasks WHERE id = ANY($1::uuid[])"),
            Q::ByKey => format!(
                "SELECT {STORED} FROM {s}.tasks WHERE queue = $1 AND idempotency_key = $2"
            ),
            Q::List {
                listing,
                newest,
                cursor,
            } => {
                let (cmp, order) = if newest { ("<", "DESC") } else { (">", "") };
                let after = if cursor {
                    format!("AND id {cmp} $2")
                } else {
                    String::new()
                };
                let (status, limit) = match (listing, cursor) {
                    (Listing::All, true) => (String::new(), "$3"),
                    (Listing::All, false) => (String::new(), "$2"),
                    (Listing::Dead, true) => ("AND status = 3".to_owned(), "$3"),
                    (Listing::Dead, false) => ("AND status = 3".to_owned(), "$2"),
                    (Listing::Status, true) => ("AND status = $4".to_owned(), "$3"),
                    (Listing::Status, false) => ("AND status = $3".to_owned(), "$2"),
                };
                format!(
                    "SELECT id, error_type, {STORED} FROM {s}.tasks
                     WHERE queue = $1 {after} {status}
                     ORDER BY id {order} LIMIT {limit}"
                )
            }
            Q::DeadByIds { lock } => format!(
                "SELECT id, error_type, envelope FROM {s}.tasks
                 WHERE id = ANY($1) AND queue = $2 AND status = 3 {}",
                if lock { "FOR UPDATE" } else { "" }
            ),
            Q::PendingByIds { lock } => format!(
                "SELECT id, envelope FROM {s}.tasks
                 WHERE id = ANY($1) AND queue = $2 AND status = 0 {}",
                if lock { "FOR UPDATE" } else { "" }
            ),
            Q::DeadPage { lock, cursor } => format!(
                "SELECT id, error_type, envelope FROM {s}.tasks
                 WHERE queue = $1 AND status = 3 {}
                 ORDER BY id LIMIT {} {}",
                if cursor { "AND id > $3" } else { "" },
                "$2",
                if lock { "FOR UPDATE" } else { "" }
            ),
            Q::Purge(status) => format!(
                "WITH d AS (
                    DELETE FROM {s}.tasks WHERE {rows} RETURNING 1
                 ), counted AS (
                    INSERT INTO {s}.queue_counts (queue, {col})
                    SELECT $1, -count(*) FROM d HAVING count(*) > 0
                 )
                 SELECT count(*) FROM d",
                rows = of_status(s, status),
                col = count_column(status)
            ),
            Q::CountStatus(status) => format!(
                "SELECT count(*) FROM {s}.tasks WHERE {}",
                of_status(s, status)
            ),
            Q::Delete => format!(
                "WITH d AS (
                    DELETE FROM {s}.tasks WHERE id = $1 RETURNING queue, status
                 ), counted AS (
                    INSERT INTO {s}.queue_counts (queue, pending, in_flight, succeeded, dead)
                    SELECT queue, -(status = 0)::int, -(status = 1)::int,
                           -(status = 2)::int, -(status = 3)::int
                    FROM d
                 )
                 SELECT queue FROM d"
            ),
            Q::Prune => format!(
                "WITH doomed AS (
                    SELECT id FROM {s}.tasks
                    WHERE queue = $1 AND status = 2 AND finished_at < $2
                    ORDER BY finished_at LIMIT $3
                    FOR UPDATE SKIP LOCKED
                 ), d AS (
                    DELETE FROM {s}.tasks t USING doomed WHERE t.id = doomed.id RETURNING 1
                 ), counted AS (
                    INSERT INTO {s}.queue_counts (queue, succeeded)
                    SELECT $1, -count(*) FROM d HAVING count(*) > 0
                 )
                 SELECT count(*) FROM d"
            ),
            Q::Counts => format!(
                "SELECT queue, sum(pending)::int8, sum(in_flight)::int8, sum(succeeded)::int8,
                        sum(dead)::int8, count(*)
                 FROM {s}.queue_counts GROUP BY queue"
            ),
            Q::FoldCounts => format!(
                "WITH gone AS (
                    DELETE FROM {s}.queue_counts RETURNING queue, pending, in_flight, succeeded, dead
                 )
                 INSERT INTO {s}.queue_counts (queue, pending, in_flight, succeeded, dead)
                 SELECT queue, sum(pending), sum(in_flight), sum(succeeded), sum(dead)
                 FROM gone GROUP BY queue
                 HAVING sum(pending) <> 0 OR sum(in_flight) <> 0 OR sum(succeeded) <> 0
                     OR sum(dead) <> 0"
            ),
            Q::QueueNames => format!("SELECT name FROM {s}.queues"),
            Q::GetConfig => format!("SELECT policy FROM {s}.queues WHERE name = $1"),
            // `$5`: the policy puts the queue under flow control. Its
            // PENDING rows move to the claim index that policy reads.
            Q::PutConfig => format!(
                "WITH p AS (
                    INSERT INTO {s}.queues (name, policy) VALUES ($1, $2)
                    ON CONFLICT (name) DO UPDATE SET policy = excluded.policy
                    RETURNING name
                 ), listed AS (
                    INSERT INTO {s}.flow_queues (queue) SELECT $1 WHERE $5::bool
                    ON CONFLICT (queue) DO NOTHING
                 ), unlisted AS (
                    DELETE FROM {s}.flow_queues WHERE queue = $1 AND NOT $5::bool
                 ), keyed AS (
                    UPDATE {s}.tasks SET flow_key = {ENVELOPE_FLOW_KEY}
                    WHERE $5::bool AND queue = $1 AND status = 0 AND flow_key IS NULL
                 ), unkeyed AS (
                    UPDATE {s}.tasks SET flow_key = NULL
                    WHERE NOT $5::bool AND queue = $1 AND status = 0 AND flow_key IS NOT NULL
                 )
                 SELECT pg_notify($3::text, 'c ' || $4::text || ' ' || name) FROM p"
            ),
            Q::SourceCursors => format!(
                "SELECT partition, next, updated_at FROM {s}.source_cursors
                 WHERE source = $1 ORDER BY partition"
            ),
            Q::SourceCursor => format!(
                "SELECT next, updated_at FROM {s}.source_cursors
                 WHERE source = $1 AND partition = $2"
            ),
            Q::CursorCreate => format!(
                "INSERT INTO {s}.source_cursors (source, partition, next, updated_at)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (source, partition) DO NOTHING
                 RETURNING 1"
            ),
            Q::CursorMove => format!(
                "UPDATE {s}.source_cursors SET next = $4, updated_at = $5
                 WHERE source = $1 AND partition = $2 AND next = $3
                 RETURNING 1"
            ),
            Q::DeleteCursors => format!("DELETE FROM {s}.source_cursors WHERE source = $1"),
        }
    }
}

/// The text of [`Q::Submit`], or with `unique` of [`Q::SubmitUnique`]
/// (each task's slot, `$15`, in the column `unique_slot`).
fn submit_sql(s: &str, unique: bool) -> String {
    let (slot_array, slot_column) = if unique {
        (", $15::text[]", ", unique_slot")
    } else {
        ("", "")
    };
    format!(
        "WITH v AS (
                    SELECT * FROM unnest($1::uuid[], $2::text[], {ROW_ARRAYS}, $11::bytea[],
                                         $14::text[]{slot_array})
                        AS v(id, queue, {ROW_COLUMNS}, idempotency_key, flow_key{slot_column})
                 ), ins AS (
                    INSERT INTO {s}.tasks (id, queue, {ROW_COLUMNS}, idempotency_key, flow_key{slot_column})
                    SELECT id, queue, {ROW_COLUMNS}, idempotency_key,
                        CASE WHEN EXISTS (SELECT 1 FROM {s}.flow_queues f WHERE f.queue = v.queue)
                            THEN v.flow_key END{slot_column}
                    FROM v
                    ON CONFLICT DO NOTHING
                    RETURNING id, queue, status, NULL::int2 AS old
                 ), counted AS (
                    INSERT INTO {s}.queue_counts (queue, pending, in_flight, succeeded, dead)
                    SELECT queue, {DELTAS} FROM ins GROUP BY queue
                 ), woken AS (
                    SELECT pg_notify($12::text, 'w ' || $13::text || ' ' || queue)
                    FROM (SELECT DISTINCT queue FROM ins WHERE status = 0) q
                 )
                 SELECT id, (SELECT count(*) FROM woken) FROM ins"
    )
}
