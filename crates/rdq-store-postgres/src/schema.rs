//! The schema rdq owns and its versioned migrations.
//!
//! Everything lives in one schema (default `rdq`), so several rdq
//! installations (or test runs) share a database without seeing each other.
//! `migrations` records which versions were applied. [`migrate`] runs in one
//! transaction under an advisory lock: nodes starting together apply each
//! migration once, and a failed migration leaves the schema as it was. A
//! schema written by a newer rdq is refused (`CORRUPT_STORE`: upgrade rdq),
//! as is one holding tables that are not rdq's, so a wrong `?schema=` never
//! writes over somebody else's data.

use rdq_engine::EngineError;
use tokio_postgres::Client;

use crate::error::Failure;

/// The newest schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = 11;

/// One schema version: its number, what it does and its DDL for a schema.
struct Migration {
    version: i32,
    description: &'static str,
    ddl: fn(&str) -> String,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "tasks, queues and queue_counts",
        ddl: v1,
    },
    Migration {
        version: 2,
        description: "secrets (the lease-token key)",
        ddl: v2,
    },
    Migration {
        version: 3,
        description: "flow keys (tasks.flow_key, tasks_flow) and flow_ledgers",
        ddl: v3,
    },
    Migration {
        version: 4,
        description: "flow keys only on flow-controlled queues (flow_queues)",
        ddl: v4,
    },
    Migration {
        version: 5,
        description: "cancel requests of running tasks (tasks.cancel_requested)",
        ddl: v5,
    },
    Migration {
        version: 6,
        description: "periodic schedules (schedules)",
        ddl: v6,
    },
    Migration {
        version: 7,
        description: "transactional enqueue and complete (submit, complete)",
        ddl: v7,
    },
    Migration {
        version: 8,
        description: "unique keys (unique_slots)",
        ddl: v8,
    },
    Migration {
        version: 9,
        description: "unique keys on the task rows (tasks.unique_slot)",
        ddl: v9,
    },
    Migration {
        version: 10,
        description: "sources' cursors (source_cursors)",
        ddl: v10,
    },
    Migration {
        version: 11,
        description: "faster submit function; tasks pages half full (fillfactor 50)",
        ddl: v11,
    },
];

/// Schema version 1. The envelope bytes are each row's source of truth (the
/// canonical encoding, returned byte for byte); every other column of `tasks`
/// is derived from them for the queries' sake. Partial indexes keep each hot
/// lookup a seek over only the rows it can match: claimable PENDING tasks,
/// leased IN_FLIGHT tasks, the DLQ and prunable SUCCEEDED tasks. There is
/// deliberately no `(queue, id)` index over every row: each claim and settle
/// writes a new row version, and every index over all rows takes an entry
/// for each (15% of the work rate, measured). Listings other than the DLQ's
/// walk the primary key instead.
/// `queue_counts` is an insert-only log of count deltas, folded now and then.
fn v1(s: &str) -> String {
    format!(
        "CREATE TABLE {s}.tasks (
            id               uuid     PRIMARY KEY,
            queue            text     NOT NULL,
            status           smallint NOT NULL,
            priority         smallint NOT NULL,
            next_attempt_at  bigint,
            lease_expires_at bigint,
            claim_count      bigint   NOT NULL,
            claimed_at       bigint,
            error_type       bytea,
            finished_at      bigint,
            idempotency_key  bytea,
            envelope         bytea    NOT NULL
        ) WITH (
            autovacuum_vacuum_scale_factor = 0.01,
            autovacuum_vacuum_insert_scale_factor = 0.05,
            autovacuum_analyze_scale_factor = 0.02
        );
        CREATE INDEX tasks_claim ON {s}.tasks (queue, priority DESC, next_attempt_at, id)
            WHERE status = 0;
        CREATE INDEX tasks_lease ON {s}.tasks (lease_expires_at) WHERE status = 1;
        CREATE INDEX tasks_done ON {s}.tasks (queue, finished_at) WHERE status = 2;
        CREATE INDEX tasks_dead ON {s}.tasks (queue, id) WHERE status = 3;
        CREATE UNIQUE INDEX tasks_idempotency ON {s}.tasks (queue, idempotency_key)
            WHERE idempotency_key IS NOT NULL;
        CREATE TABLE {s}.queues (
            name   text PRIMARY KEY,
            policy text NOT NULL
        );
        CREATE TABLE {s}.queue_counts (
            queue     text   NOT NULL,
            pending   bigint NOT NULL DEFAULT 0,
            in_flight bigint NOT NULL DEFAULT 0,
            succeeded bigint NOT NULL DEFAULT 0,
            dead      bigint NOT NULL DEFAULT 0
        ) WITH (autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000);"
    )
}

/// Schema version 2: secrets the store keeps for every node, such as the
/// key of lease tokens (created by the first node that asks, see
/// [`lease_secret`]).
fn v2(s: &str) -> String {
    format!(
        "CREATE TABLE {s}.secrets (
            name  text  PRIMARY KEY,
            value bytea NOT NULL
        );"
    )
}

/// Schema version 3: flow control.
///
/// `tasks.flow_key` copies the task's flow key (its `rdq.flow_key` header,
/// `''` without one), fixed at submit. Adding it with a constant default
/// rewrites nothing; rows written before it carry their key only in the
/// envelope, so those that mention the header get it copied here (the
/// envelope is canonical JSON; the byte search keeps the JSON parse to the
/// rows that can match). `tasks_flow` serves a flow-controlled claim: the
/// distinct keys of a queue's PENDING tasks (a loose index scan) and each
/// key's next due tasks in claim order. `flow_ledgers` holds each
/// flow-controlled queue's `FlowLedger` as JSON, read and written under the
/// queue's advisory lock.
fn v3(s: &str) -> String {
    format!(
        "ALTER TABLE {s}.tasks ADD COLUMN flow_key text NOT NULL DEFAULT '';
        UPDATE {s}.tasks
            SET flow_key = coalesce(
                convert_from(envelope, 'UTF8')::json -> 'headers' ->> 'rdq.flow_key', '')
            WHERE position('\"rdq.flow_key\"'::bytea IN envelope) > 0;
        CREATE INDEX tasks_flow ON {s}.tasks (queue, flow_key, priority DESC, next_attempt_at, id)
            WHERE status = 0;
        CREATE TABLE {s}.flow_ledgers (
            queue  text PRIMARY KEY,
            ledger text NOT NULL
        );"
    )
}

/// Schema version 4: a PENDING task takes one claim index entry, not two.
///
/// `tasks.flow_key` is NULL on a queue without flow control (as the
/// embedded store keeps it) and the task's key (`''` without one) on a queue
/// under it; `flow_queues` lists the queues under it (their policy needs
/// the flow ledger). `tasks_claim` now holds the PENDING rows without a key
/// and `tasks_flow` those with one, so each PENDING row is in one of them:
/// a queue without flow control writes what it wrote before flow control
/// existed. Which side a row is on follows the queue's policy: storing the
/// policy moves the queue's rows across (`Q::PutConfig`), and a claim moves
/// any row written against the policy it replaced (`Q::Claim`,
/// `Q::FlowAdopt`). The PENDING rows of queues without flow control go back
/// to NULL here; a queue whose stored policy has a `flow` limit is listed.
fn v4(s: &str) -> String {
    format!(
        "ALTER TABLE {s}.tasks ALTER COLUMN flow_key DROP NOT NULL,
            ALTER COLUMN flow_key DROP DEFAULT;
        CREATE TABLE {s}.flow_queues (queue text PRIMARY KEY);
        INSERT INTO {s}.flow_queues (queue)
            SELECT name FROM {s}.queues
            WHERE (policy::jsonb -> 'flow') ?| array['rate', 'concurrency', 'key_concurrency', 'key_rate']
                OR policy::jsonb -> 'flow' ->> 'fairness' = 'weighted';
        UPDATE {s}.tasks SET flow_key = NULL
            WHERE status = 0 AND queue NOT IN (SELECT queue FROM {s}.flow_queues);
        DROP INDEX {s}.tasks_claim;
        CREATE INDEX tasks_claim ON {s}.tasks (queue, priority DESC, next_attempt_at, id)
            WHERE status = 0 AND flow_key IS NULL;
        DROP INDEX {s}.tasks_flow;
        CREATE INDEX tasks_flow ON {s}.tasks (queue, flow_key, priority DESC, next_attempt_at, id)
            WHERE status = 0 AND flow_key IS NOT NULL;"
    )
}

/// Schema version 5: `tasks.cancel_requested` is true while an IN_FLIGHT
/// task has been asked to stop (its envelope's `cancel_requested`). A
/// settle's compare-and-swap refuses a new state decided without the
/// request (a worker's stale copy), so a failure cannot overwrite the
/// cancel with a retry (`Q::Settle`). A constant default rewrites nothing,
/// and no row needs another value: no older build asked a task to stop.
fn v5(s: &str) -> String {
    format!(
        "ALTER TABLE {s}.tasks ADD COLUMN IF NOT EXISTS cancel_requested boolean NOT NULL DEFAULT false;"
    )
}

/// Schema version 6: periodic schedules (`docs/schedules.md`). The
/// definition is the schedule's JSON, which the store never reads;
/// `last_due` is the cursor a fire compares and moves in the transaction
/// that submits its tasks (`schedules.rs`); `last_task` is the task of the
/// last fire (the overlap policy reads its status); `skips` counts skipped
/// due times by reason.
fn v6(s: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {s}.schedules (
            name         text   PRIMARY KEY,
            owner        text   NOT NULL,
            definition   text   NOT NULL,
            created_at   bigint NOT NULL,
            updated_at   bigint NOT NULL,
            last_due     bigint,
            last_task    uuid,
            last_fire_at bigint,
            fires        bigint NOT NULL DEFAULT 0,
            skips        jsonb  NOT NULL DEFAULT '{{}}'
        );"
    )
}

/// The lease secret of `schema`: `candidate` when no node stored one yet,
/// else the one stored first. Race-free across nodes: the insert of a second
/// candidate does nothing, and the select reads whichever won.
pub(crate) async fn lease_secret(
    client: &Client,
    schema: &str,
    candidate: &[u8; 32],
) -> Result<[u8; 32], Failure> {
    client
        .execute(
            &format!(
                "INSERT INTO {schema}.secrets (name, value) VALUES ('lease_secret', $1)
                 ON CONFLICT (name) DO NOTHING"
            ),
            &[&&candidate[..]],
        )
        .await?;
    let value: Vec<u8> = client
        .query_one(
            &format!("SELECT value FROM {schema}.secrets WHERE name = 'lease_secret'"),
            &[],
        )
        .await?
        .try_get(0)?;
    value.try_into().map_err(|v: Vec<u8>| {
        EngineError::CorruptStore(format!(
            "schema {schema}: the stored lease secret is {} bytes, not 32",
            v.len()
        ))
        .into()
    })
}

/// Schema version 9: a unique slot is a column of the task that took it
/// last, under a partial unique index, instead of a row of its own: a
/// submit of a free key is one insert, as a plain one is. A deleted task
/// frees its slot with its row.
fn v9(s: &str) -> String {
    format!(
        "ALTER TABLE {s}.tasks ADD COLUMN IF NOT EXISTS unique_slot text;
         UPDATE {s}.tasks t SET unique_slot = u.slot
             FROM {s}.unique_slots u WHERE u.queue = t.queue AND u.task = t.id;
         CREATE UNIQUE INDEX IF NOT EXISTS tasks_unique ON {s}.tasks (queue, unique_slot)
             WHERE unique_slot IS NOT NULL;
         DROP TABLE IF EXISTS {s}.unique_slots;"
    )
}

/// Schema version 10: sources' cursors (`docs/sources.md`): per source
/// and partition, the position of the next record to submit and when it
/// last moved (ms). An ingest compares and moves its row in the transaction
/// that submits the run's tasks (`sources.rs`).
fn v10(s: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {s}.source_cursors (
            source     text   NOT NULL,
            partition  text   NOT NULL,
            next       bigint NOT NULL CHECK (next >= 0),
            updated_at bigint NOT NULL,
            PRIMARY KEY (source, partition)
        );"
    )
}

/// Schema version 8: unique keys (`docs/uniqueness.md`): per queue and
/// slot, the task that took the slot last. Whether it still holds it is
/// read from its row, both rows locked, in the submit's transaction
/// (`writes::submit_unique`).
fn v8(s: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {s}.unique_slots (
            queue text NOT NULL,
            slot  text NOT NULL,
            task  uuid NOT NULL,
            PRIMARY KEY (queue, slot)
        );"
    )
}

/// Schema version 7: `submit(…)` and `submit_json(…)`, which write a task
/// in the caller's transaction, and `complete(…)`, which settles one's
/// success there (`submit.sql`, docs/stores/postgres.md).
fn v7(s: &str) -> String {
    include_str!("submit.sql").replace("@schema@", s)
}

/// Schema version 11: the functions of version 7 again, in their current
/// text (every statement in `submit.sql` replaces what it creates, so a
/// schema at version 7 to 10 takes the faster ones), and `tasks` pages
/// filled half by inserts. A claim and a settle each write a new version of
/// the row; with room on its page the new version stays there, and
/// PostgreSQL then logs only the bytes that changed, not the envelope the
/// claim and a success keep (W1 wrote 1.6 KB of WAL a task instead of
/// 3.1 KB). It applies to pages written from now on.
fn v11(s: &str) -> String {
    format!("{}\nALTER TABLE {s}.tasks SET (fillfactor = 50);", v7(s))
}

/// Brings `schema` to [`SCHEMA_VERSION`], creating it if absent; returns the
/// version it found (0 for a new schema).
pub(crate) async fn migrate(client: &mut Client, schema: &str) -> Result<i32, Failure> {
    let tx = client.transaction().await?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('rdq.migrate.' || $1::text))",
        &[&schema],
    )
    .await?;
    let row = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1),
                    to_regclass(quote_ident($1) || '.migrations') IS NOT NULL,
                    (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = $1)",
            &[&schema],
        )
        .await?;
    let (schema_exists, has_migrations, relations): (bool, bool, i64) =
        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
    if schema_exists && !has_migrations && relations > 0 {
        return Err(EngineError::CorruptStore(format!(
            "schema {schema} holds {relations} relations but no rdq migrations table: \
             it is not an rdq store (choose another ?schema=)"
        ))
        .into());
    }
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.migrations (
             version     integer     PRIMARY KEY,
             description text        NOT NULL,
             applied_at  timestamptz NOT NULL DEFAULT now()
         );"
    ))
    .await?;
    let found: i32 = tx
        .query_one(
            &format!("SELECT coalesce(max(version), 0) FROM {schema}.migrations"),
            &[],
        )
        .await?
        .try_get(0)?;
    if found > SCHEMA_VERSION {
        return Err(EngineError::CorruptStore(format!(
            "schema {schema} is at version {found}, newer than this build's \
             {SCHEMA_VERSION}: upgrade rdq"
        ))
        .into());
    }
    for m in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.batch_execute(&(m.ddl)(schema)).await?;
        tx.execute(
            &format!("INSERT INTO {schema}.migrations (version, description) VALUES ($1, $2)"),
            &[&m.version, &m.description],
        )
        .await?;
        tracing::info!(schema, version = m.version, "applied rdq migration");
    }
    tx.commit().await?;
    Ok(found)
}
