//! Per-queue task counts by status, kept up to date inside each group.
//!
//! The `queue_counts` table answers counts without scanning `tasks`; every
//! operation records here how it moved tasks between statuses, and the group
//! adds the sums to the table in the same transaction, just before it commits.

use rdq_envelope::Status;
use rusqlite::{Connection, params};

use crate::columns::slot;
use crate::error::Fatal;

/// Per-queue count changes made by the current group, applied before commit.
#[derive(Default)]
pub(super) struct Deltas(Vec<(String, [i64; 4])>);

impl Deltas {
    pub(super) fn add(&mut self, queue: &str, status: Status, by: i64) {
        if by == 0 {
            return;
        }
        if let Some((_, counts)) = self.0.iter_mut().find(|(q, _)| q == queue) {
            counts[slot(status)] += by;
        } else {
            let mut counts = [0; 4];
            counts[slot(status)] = by;
            self.0.push((queue.to_owned(), counts));
        }
    }

    /// The change the current group made to `queue`'s count of `status`.
    pub(super) fn of(&self, queue: &str, status: Status) -> i64 {
        self.0
            .iter()
            .find(|(q, _)| q == queue)
            .map_or(0, |(_, counts)| counts[slot(status)])
    }

    pub(super) fn moved(&mut self, queue: &str, from: Status, to: Status, n: i64) {
        if from != to {
            self.add(queue, from, -n);
            self.add(queue, to, n);
        }
    }

    /// Forgets every change (the group committed or was rolled back).
    pub(super) fn clear(&mut self) {
        self.0.clear();
    }

    /// Adds the changes to the `queue_counts` table, in the open transaction.
    pub(super) fn flush(&self, conn: &Connection) -> Result<(), Fatal> {
        if self.0.is_empty() {
            return Ok(());
        }
        let mut stmt = conn.prepare_cached(
            "INSERT INTO queue_counts (queue, pending, in_flight, succeeded, dead)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (queue) DO UPDATE SET
             pending = pending + excluded.pending,
             in_flight = in_flight + excluded.in_flight,
             succeeded = succeeded + excluded.succeeded,
             dead = dead + excluded.dead",
        )?;
        for (queue, [p, i, s, d]) in &self.0 {
            if [*p, *i, *s, *d] != [0; 4] {
                stmt.execute(params![queue, p, i, s, d])?;
            }
        }
        Ok(())
    }
}
