//! Deleting everything under a prefix: what a temporary store does when it
//! drops, and what [`crate::RedisStore::delete_everything`] does on request.
//!
//! The keys are known by name (each registered queue's keys, the index
//! shards, the registry; schedules and sources through their registries), so no `SCAN` is needed and the same code works on
//! a cluster, where one `DEL` may name only keys of one slot.

use std::time::Duration;

use crate::conn::Conn;
use crate::error::Failure;
use crate::keys::Keys;
use crate::options::RedisOptions;

/// Owns a temporary prefix; dropping it deletes the prefix's keys.
pub(crate) struct TemporaryPrefix {
    pub(crate) options: RedisOptions,
}

impl Drop for TemporaryPrefix {
    fn drop(&mut self) {
        // Drop may run inside an async runtime or while one shuts down, so
        // the cleanup gets a thread and a small runtime of its own, and the
        // caller waits for it: the keys are gone when the store is.
        let options = self.options.clone();
        let worker = std::thread::Builder::new()
            .name("rdq-drop-prefix".into())
            .spawn(move || drop_prefix(options));
        match worker.map(std::thread::JoinHandle::join) {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "cannot delete a temporary rdq prefix"),
            _ => tracing::warn!("the thread deleting a temporary rdq prefix failed"),
        }
    }
}

fn drop_prefix(mut options: RedisOptions) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    options.wait = Duration::from_secs(5);
    runtime.block_on(async {
        let mut conn = Conn::connect(&options).await.map_err(|e| e.to_string())?;
        delete_prefix(&mut conn, &Keys::new(&options.prefix))
            .await
            .map_err(|e| e.to_string())
    })
}

/// Deletes every key rdq wrote under `keys`' prefix.
pub(crate) async fn delete_prefix(conn: &mut Conn, keys: &Keys) -> Result<(), Failure> {
    crate::schedules::delete_schedules(conn, keys).await?;
    crate::sources::delete_sources(conn, keys).await?;
    let queues: Vec<String> = redis::cmd("SMEMBERS")
        .arg(keys.registry())
        .query_async(conn)
        .await?;
    let mut cmds = Vec::new();
    for queue in &queues {
        let queue_keys = keys.queue(queue);
        let mut del = redis::cmd("DEL");
        // Each flow key's ready set first: the set naming them goes below.
        let flow_keys: Vec<String> = redis::cmd("SMEMBERS")
            .arg(queue_keys.flow_keys())
            .query_async(conn)
            .await?;
        for key in &flow_keys {
            del.arg(queue_keys.flow_ready(key));
        }
        for key in &queue_keys.all {
            del.arg(key);
        }
        del.arg(queue_keys.unique_slots());
        cmds.push(del);
    }
    for shard in keys.index_shards() {
        let mut del = redis::cmd("DEL");
        del.arg(shard);
        cmds.push(del);
    }
    let _: Vec<redis::Value> = conn.each(cmds).await?;
    for key in [keys.registry(), keys.lease_secret(), keys.probe()] {
        let _: redis::Value = redis::cmd("DEL").arg(key).query_async(conn).await?;
    }
    Ok(())
}
