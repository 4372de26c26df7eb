//! The writer's open transaction: the one write connection, what the
//! current group has changed so far, and how a group begins and commits.

use foldhash::HashMap;
use rusqlite::Connection;

use super::counts::Deltas;
use crate::error::Fatal;

/// The writer thread's state.
pub(super) struct Ctx {
    pub(super) conn: Connection,
    /// Reused for every envelope encoding, so writes allocate nothing per row.
    pub(super) buf: Vec<u8>,
    pub(super) deltas: Deltas,
    /// Whether each queue asked about is flow-controlled (has a `flows`
    /// row): a submit of a task without a flow key needs to know
    /// (`work::submit_one`). This thread is the database's only writer and
    /// a `flows` row is never removed, so only its own writes change the
    /// answer, and they update it; forgotten when a group rolls back.
    pub(super) flow_queues: HashMap<String, bool>,
}

pub(super) fn begin(conn: &Connection) -> Result<(), Fatal> {
    if !conn.is_autocommit() {
        // A failed rollback left a transaction open: end it before anything else.
        conn.execute_batch("ROLLBACK")?;
    }
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    Ok(())
}

pub(super) fn commit(conn: &Connection) -> Result<(), Fatal> {
    conn.prepare_cached("COMMIT")?.execute([])?;
    Ok(())
}
