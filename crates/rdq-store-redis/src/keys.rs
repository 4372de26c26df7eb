//! The key layout: every key of one queue shares the hash tag
//! `{PREFIX:QUEUE}`, so a queue's scripts run atomically on one shard of a
//! cluster while queues spread over all of them. What spans queues (the
//! registry of queues, the id → queue index, the registry of sources) has
//! keys of its own.

use rdq_envelope::TaskId;

/// Shards of the id → queue index: small hashes that spread over a cluster.
pub(crate) const INDEX_SHARDS: u32 = 256;

/// Positions in [`QueueKeys::all`], in the order every script takes them
/// as `KEYS` (see `lua/common.lua`). The last three are flow control's: the
/// flow keys with ready tasks, the IN_FLIGHT count per flow key, and the
/// ledger with its version. Each flow key's ready set, `TAG:fr:KEY`, is
/// named by the scripts themselves (same hash tag, so same slot).
const NAMES: [&str; 15] = [
    "tasks", "ready", "delayed", "leases", "done", "ids:0", "ids:1", "ids:2", "ids:3", "bykey",
    "keyof", "config", "fkeys", "fif", "flow",
];

/// The names of one installation's keys (one prefix).
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    /// The keys under `prefix`.
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// The prefix.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The keys of `queue`.
    pub(crate) fn queue(&self, queue: &str) -> QueueKeys {
        let tag = format!("{{{}:{}}}", self.prefix, queue);
        QueueKeys {
            all: NAMES.map(|name| format!("{tag}:{name}")),
            tag,
        }
    }

    /// The set of every queue that ever had a task or a policy.
    pub(crate) fn registry(&self) -> String {
        format!("{}:queues", self.prefix)
    }

    /// The index shard holding `id`'s queue.
    pub(crate) fn index(&self, id: TaskId) -> String {
        // The low bits of a ULID are random: the shards fill evenly.
        self.shard((id.as_u128() % u128::from(INDEX_SHARDS)) as u32)
    }

    /// Every index shard.
    pub(crate) fn index_shards(&self) -> impl Iterator<Item = String> + '_ {
        (0..INDEX_SHARDS).map(|n| self.shard(n))
    }

    fn shard(&self, n: u32) -> String {
        format!("{}:idx:{n:02x}", self.prefix)
    }

    /// The set of every source that ever ingested (`sources.rs`).
    pub(crate) fn sources(&self) -> String {
        format!("{}:sources", self.prefix)
    }

    /// The registry of source `source`: which queues' slots hold its
    /// cursors (`q:QUEUE`) and each partition's first queue (`h:PARTITION`),
    /// a hash (`sources.rs`).
    pub(crate) fn source(&self, source: &str) -> String {
        format!("{}:src:{source}", self.prefix)
    }

    /// The secret lease tokens are keyed with, shared by every process.
    pub(crate) fn lease_secret(&self) -> String {
        format!("{}:lease_secret", self.prefix)
    }

    /// The channel processes announce policy changes and new work on.
    pub(crate) fn channel(&self) -> String {
        format!("{}:events", self.prefix)
    }

    /// What the readiness probe writes.
    pub(crate) fn probe(&self) -> String {
        format!("{}:probe", self.prefix)
    }
}

/// The keys of one queue, all in one hash slot.
#[derive(Debug, Clone)]
pub(crate) struct QueueKeys {
    /// Every key, in script order.
    pub(crate) all: [String; 15],
    /// The hash tag every key of the queue starts with.
    tag: String,
}

impl QueueKeys {
    /// The task hash: id → stored value.
    pub(crate) fn tasks(&self) -> &str {
        &self.all[0]
    }

    /// The queue's stored policy (JSON).
    pub(crate) fn config(&self) -> &str {
        &self.all[11]
    }

    /// The flow keys that have tasks in the ready set (a set).
    pub(crate) fn flow_keys(&self) -> &str {
        &self.all[12]
    }

    /// IN_FLIGHT tasks per flow key, for tasks with a key (a hash).
    pub(crate) fn flow_in_flight(&self) -> &str {
        &self.all[13]
    }

    /// The flow ledger (`ledger`, JSON), its version (`v`) and the count of
    /// claims flow limits cut short (`t`): a hash.
    pub(crate) fn flow(&self) -> &str {
        &self.all[14]
    }

    /// The ready tasks of flow key `key` (a sorted set scored as the ready
    /// set), as `lua/common.lua`'s FR.
    pub(crate) fn flow_ready(&self, key: &str) -> String {
        format!("{}:fr:{key}", self.tag)
    }

    /// The queue's unique slots (`docs/uniqueness.md`): slot → the id of
    /// the task that took it last (a hash), as `lua/unique.lua`'s UNIQ.
    pub(crate) fn unique_slots(&self) -> String {
        format!("{}:uniq", self.tag)
    }

    /// The record of schedule `name`, whose fires submit to this queue: in
    /// the queue's slot, so a fire is one script (`schedules.rs`).
    pub(crate) fn schedule(&self, name: &str) -> String {
        format!("{}:sch:{name}", self.tag)
    }

    /// The cursors of source `source` kept in this queue's slot, by
    /// partition (a hash): in the queue's slot, so an ingest is one script
    /// (`sources.rs`).
    pub(crate) fn source_cursors(&self, source: &str) -> String {
        format!("{}:src:{source}", self.tag)
    }

    /// The id set of status digit `status` ('0' PENDING … '3' DEAD).
    pub(crate) fn ids(&self, status: char) -> Option<&str> {
        let n = status.to_digit(10).filter(|n| *n <= 3)?;
        Some(&self.all[5 + n as usize])
    }

    /// The scored set a placement kind names (`r` ready, `d` delayed, `l`
    /// leases, `f` done; none for `-`), as `lua/common.lua`'s PLACES.
    pub(crate) fn scored(&self, kind: char) -> Option<&str> {
        let at = match kind {
            'r' => 1,
            'd' => 2,
            'l' => 3,
            'f' => 4,
            _ => return None,
        };
        Some(&self.all[at])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_queue_shares_one_hash_tag() {
        let keys = Keys::new("rdq");
        let q = keys.queue("payments.charge");
        for key in &q.all {
            assert!(key.starts_with("{rdq:payments.charge}:"), "{key}");
        }
        assert_eq!(q.tasks(), "{rdq:payments.charge}:tasks");
        assert_eq!(q.config(), "{rdq:payments.charge}:config");
        assert_eq!(q.flow_ready("t-1"), "{rdq:payments.charge}:fr:t-1");
        assert_eq!(
            q.source_cursors("orders"),
            "{rdq:payments.charge}:src:orders"
        );
        assert_eq!(keys.source("orders"), "rdq:src:orders");
    }

    #[test]
    fn index_shards_cover_every_id() {
        let keys = Keys::new("p");
        let shards: Vec<String> = keys.index_shards().collect();
        assert_eq!(shards.len(), INDEX_SHARDS as usize);
        assert!(shards.contains(&keys.index(TaskId::generate())));
    }
}
