//! Sources' cursors in Redis: each kept in the slot of the queue its
//! records' tasks go to, so an ingest is one Lua script on that queue's
//! shard (`lua/ingest.lua` followed by `lua/submit.lua`): the cursor's
//! compare-and-swap and the run's tasks stored exactly as a submit stores
//! them. Keeping the cursor with its queue is what makes that one script on
//! Redis Cluster, where a script may touch one hash slot only.
//!
//! The cursors of source `S` in queue `Q`'s slot are one hash,
//! `{P:Q}:src:S`, partition → cursor. A registry hash per source,
//! `P:src:S`, names the queues whose slots hold its cursors (`q:QUEUE`) and
//! each partition's first queue (`h:PARTITION`, set once); the set
//! `P:sources` names every source. Both are written before the script: they
//! are only an index, and an entry naming no cursor reads as none. So
//! [`SourceCursors::source_cursors`] and a reset read every cursor hash the
//! registry names, and a reset leaves the registry as it is: an ingest that
//! registered its queue just before the reset finds its entry still there.
//!
//! **A cursor moves with its queue.** A cursor reads `L,GEN,NEXT,AT,TOKEN`
//! where it lives and `M,GEN,NEXT,AT,QUEUE` in a slot it left for
//! `QUEUE`'s (`NEXT` empty: no cursor, `AT` when it last moved, `TOKEN` the
//! ingest that moved it). A partition with no cursor anywhere lives, as
//! none, in its first queue's slot. An ingest into another queue's slot than
//! the one the cursor lives in finds no cursor there and moves it first:
//! one script marks it moved in its old slot (from then on an ingest there
//! is told to look elsewhere), a second writes it live in the new slot
//! under generation `GEN + 1` unless that slot already holds as late a
//! generation, and the ingest runs again. Either step may be repeated: an
//! ingest that finds a cursor marked moved to a slot that lacks it finishes
//! that move before anything else. At most one slot holds a partition's
//! cursor live, so racing ingests into different queues still have one
//! winner.

use std::collections::{BTreeMap, HashMap};
use std::sync::{LazyLock, Mutex};

use async_trait::async_trait;
use futures::FutureExt;
use rdq_engine::{
    EngineError, IngestOutcome, IngestRequest, NewTask, SourceCursor, SourceCursors, Submitted,
};
use rdq_envelope::TaskId;
use redis::{Script, Value};

use crate::conn::{Conn, Retry, retrying};
use crate::error::{Failure, unexpected};
use crate::keys::Keys;
use crate::schedules::{push_tasks, submit_answers};
use crate::{RedisStore, Shared, stored, writes};

/// The ingest: the compare-and-swap, then a submit, in one script.
static INGEST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/common.lua"),
        include_str!("lua/ingest.lua"),
        include_str!("lua/submit.lua")
    ))
});

/// Registers queue ARGV[1] in a source's registry (KEYS[1]) as holding
/// cursors, makes it partition ARGV[2]'s first queue unless it has one,
/// and answers that first queue.
static REGISTER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "redis.call('HSET', KEYS[1], 'q:' .. ARGV[1], '1')
         redis.call('HSETNX', KEYS[1], 'h:' .. ARGV[2], ARGV[1])
         return redis.call('HGET', KEYS[1], 'h:' .. ARGV[2])",
    )
});

/// Marks partition ARGV[1]'s cursor in this slot (KEYS[1]) moved to queue
/// ARGV[3] if it is generation ARGV[2] (or was already moved there), and
/// answers its cursor and when it moved; none (`ARGV[4]` '1': this is the
/// partition's first queue) reads as generation 0 without a cursor. Answers
/// nothing when the cursor is not that generation any more.
static MOVE_OUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local raw = redis.call('HGET', KEYS[1], ARGV[1])
         if not raw then
           if ARGV[4] == '1' and ARGV[2] == '0' then
             redis.call('HSET', KEYS[1], ARGV[1], 'M,0,,0,' .. ARGV[3])
             return { '', '0' }
           end
           return {}
         end
         local state, gen, n, at, rest = string.match(raw, '^(%a),(%d+),(%d*),(-?%d+),(.*)$')
         if gen ~= ARGV[2] then return {} end
         if state == 'L' then
           redis.call('HSET', KEYS[1], ARGV[1], 'M,' .. gen .. ',' .. n .. ',' .. at .. ',' .. ARGV[3])
           return { n, at }
         end
         if rest == ARGV[3] then return { n, at } end
         return {}",
    )
});

/// Writes partition ARGV[1]'s cursor live in this slot (KEYS[1]) as
/// generation ARGV[2], cursor ARGV[3], moved at ARGV[4], unless the slot
/// holds that generation or a later one; 1 when it wrote.
static MOVE_IN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local raw = redis.call('HGET', KEYS[1], ARGV[1])
         if raw then
           local gen = tonumber(string.match(raw, '^%a,(%d+),'))
           if gen and gen >= tonumber(ARGV[2]) then return 0 end
         end
         redis.call('HSET', KEYS[1], ARGV[1], 'L,' .. ARGV[2] .. ',' .. ARGV[3] .. ',' .. ARGV[4] .. ',')
         return 1",
    )
});

/// Deletes a hash (KEYS[1]) and answers what it held.
static TAKE_ALL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local all = redis.call('HGETALL', KEYS[1])
         redis.call('DEL', KEYS[1])
         return all",
    )
});

/// Times one ingest moves its cursor between slots and tries again before
/// it gives up (another ingest keeps moving it back).
const MAX_ROUNDS: usize = 16;

/// One slot's copy of a partition's cursor.
#[derive(Debug, Clone, PartialEq)]
struct Held {
    /// Lives here (`L`), rather than moved away (`M`).
    live: bool,
    /// How many moves between slots made it.
    generation: u64,
    /// The cursor; `None` when there is none.
    next: Option<u64>,
    /// When the cursor last moved (ms).
    at_ms: i64,
    /// The token of the ingest that moved it (live), or the queue it moved
    /// to (moved).
    rest: String,
}

impl Held {
    fn parse(raw: &str) -> Result<Self, Failure> {
        let damaged = || unexpected("a source cursor");
        let mut parts = raw.splitn(5, ',');
        let mut part = || parts.next().ok_or_else(damaged);
        let live = match part()? {
            "L" => true,
            "M" => false,
            _ => return Err(damaged()),
        };
        let generation = part()?.parse().map_err(|_| damaged())?;
        let next = match part()? {
            "" => None,
            n => Some(n.parse().map_err(|_| damaged())?),
        };
        let at_ms = part()?.parse().map_err(|_| damaged())?;
        let rest = part()?.to_owned();
        Ok(Self {
            live,
            generation,
            next,
            at_ms,
            rest,
        })
    }

    /// Of two copies of one partition's cursor, the higher tells where it
    /// is: the later generation (a live copy over one moved away from it).
    fn rank(&self) -> (u64, bool) {
        (self.generation, self.live)
    }
}

/// The queues the registry `P:src:SOURCE` names as holding cursors.
async fn registered_queues(
    conn: &mut Conn,
    keys: &Keys,
    source: &str,
) -> Result<Vec<String>, Failure> {
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(keys.source(source))
        .query_async(conn)
        .await?;
    Ok(fields
        .into_iter()
        .filter_map(|f| f.strip_prefix("q:").map(str::to_owned))
        .collect())
}

/// Each partition's cursor, read from the copies of every slot: the
/// latest generation's value, live or on its way to another slot.
fn cursors_of(hashes: Vec<HashMap<String, String>>) -> Result<BTreeMap<String, Held>, Failure> {
    let mut out: BTreeMap<String, Held> = BTreeMap::new();
    for hash in hashes {
        for (partition, raw) in hash {
            let copy = Held::parse(&raw)?;
            if out
                .get(&partition)
                .is_none_or(|seen| copy.rank() > seen.rank())
            {
                out.insert(partition, copy);
            }
        }
    }
    Ok(out)
}

/// Deletes every source's cursors and registry under `keys`' prefix (with
/// the prefix's keys).
pub(crate) async fn delete_sources(conn: &mut Conn, keys: &Keys) -> Result<(), Failure> {
    let sources: Vec<String> = redis::cmd("SMEMBERS")
        .arg(keys.sources())
        .query_async(conn)
        .await?;
    for source in &sources {
        let mut cmds = Vec::new();
        for queue in registered_queues(conn, keys, source).await? {
            cmds.push(
                redis::cmd("DEL")
                    .arg(keys.queue(&queue).source_cursors(source))
                    .clone(),
            );
        }
        cmds.push(redis::cmd("DEL").arg(keys.source(source)).clone());
        let _: Vec<Value> = conn.each(cmds).await?;
    }
    let _: Value = redis::cmd("DEL")
        .arg(keys.sources())
        .query_async(conn)
        .await?;
    Ok(())
}

#[async_trait]
impl SourceCursors for RedisStore {
    async fn source_cursors(&self, source: &str) -> Result<Vec<SourceCursor>, EngineError> {
        let shared = self.shared();
        retrying(shared.options.wait, Retry::Always, |_applied| {
            async move {
                let mut conn = shared.conn().await?;
                let queues = registered_queues(&mut conn, &shared.keys, source).await?;
                let cmds = queues
                    .iter()
                    .map(|q| {
                        redis::cmd("HGETALL")
                            .arg(shared.keys.queue(q).source_cursors(source))
                            .clone()
                    })
                    .collect();
                let hashes: Vec<HashMap<String, String>> = conn.each(cmds).await?;
                Ok(cursors_of(hashes)?
                    .into_iter()
                    .filter_map(|(partition, copy)| {
                        Some(SourceCursor {
                            partition,
                            next: copy.next?,
                            updated_at_ms: copy.at_ms,
                        })
                    })
                    .collect())
            }
            .boxed()
        })
        .await
    }

    async fn ingest(&self, request: &IngestRequest) -> Result<IngestOutcome, EngineError> {
        if request.tasks.iter().any(|t| t.unique.is_some()) {
            return Err(EngineError::InvalidArgument(
                "tasks: an ingest's tasks take their record's locator as idempotency key, \
                 not a unique key"
                    .into(),
            ));
        }
        self.started().await;
        let shared = self.shared();
        let values: Vec<Vec<u8>> = request
            .tasks
            .iter()
            .map(|t| stored::value_of(&t.envelope))
            .collect();
        let ingest = Ingest {
            shared,
            request,
            values: &values,
            token: TaskId::generate().to_string(),
            fresh: Mutex::new(vec![false; request.tasks.len()]),
        };
        let ingest = &ingest;
        let outcome = retrying(shared.options.wait, Retry::Always, |maybe_applied| {
            ingest.attempt(maybe_applied).boxed()
        })
        .await?;
        if let IngestOutcome::Ingested(results) = &outcome
            && results
                .iter()
                .any(|r| matches!(r, Ok(Submitted::Created(_))))
        {
            writes::announce_work(shared).await;
        }
        Ok(outcome)
    }

    async fn delete_source_cursors(&self, source: &str) -> Result<u64, EngineError> {
        let shared = self.shared();
        retrying(shared.options.wait, Retry::NotAppliedOnly, |_applied| {
            async move {
                let mut conn = shared.conn().await?;
                let queues = registered_queues(&mut conn, &shared.keys, source).await?;
                let mut hashes = Vec::with_capacity(queues.len());
                for queue in &queues {
                    let pairs: Vec<String> = TAKE_ALL
                        .key(shared.keys.queue(queue).source_cursors(source))
                        .invoke_async(&mut conn)
                        .await?;
                    hashes.push(
                        pairs
                            .chunks(2)
                            .filter_map(|p| match p {
                                [field, value] => Some((field.clone(), value.clone())),
                                _ => None,
                            })
                            .collect(),
                    );
                }
                let cursors = cursors_of(hashes)?;
                Ok(cursors.values().filter(|c| c.next.is_some()).count() as u64)
            }
            .boxed()
        })
        .await
    }
}

/// One ingest, across the attempts the retry loop makes.
struct Ingest<'a> {
    shared: &'a Shared,
    request: &'a IngestRequest,
    /// The tasks' stored values.
    values: &'a [Vec<u8>],
    /// Written with the cursor: an attempt finding it there knows an
    /// earlier one moved it.
    token: String,
    /// Which tasks' index entries an attempt of this ingest wrote.
    fresh: Mutex<Vec<bool>>,
}

impl Ingest<'_> {
    fn tasks(&self) -> &[NewTask] {
        &self.request.tasks
    }

    async fn attempt(&self, maybe_applied: bool) -> Result<IngestOutcome, Failure> {
        let shared = self.shared;
        let keys = &shared.keys;
        let request = self.request;
        let queue = request.queue.as_str();
        let mut conn = shared.conn().await?;

        // As a submit does: the queue registry and the id index first, so
        // no task is stored where the reaper, `counts` or `get` cannot find
        // it; and the source's registry, so no cursor is stored where
        // `source_cursors` cannot find it.
        let mut cmds = Vec::with_capacity(self.tasks().len() + 2);
        cmds.push(
            redis::cmd("SADD")
                .arg(keys.sources())
                .arg(&request.source)
                .clone(),
        );
        if !self.tasks().is_empty() {
            cmds.push(redis::cmd("SADD").arg(keys.registry()).arg(queue).clone());
        }
        let skip = cmds.len();
        for task in self.tasks() {
            cmds.push(
                redis::cmd("HSETNX")
                    .arg(keys.index(task.envelope.id))
                    .arg(task.envelope.id.to_string())
                    .arg(queue)
                    .clone(),
            );
        }
        let mut register_conn = conn.clone();
        let mut register = REGISTER.key(keys.source(&request.source));
        register.arg(queue).arg(&request.partition);
        let (answers, first_queue) =
            futures::try_join!(async { conn.each::<Value>(cmds).await }, async {
                let first: String = register.invoke_async(&mut register_conn).await?;
                Ok(first)
            },)?;
        {
            let mut fresh = self.fresh.lock().unwrap_or_else(|e| e.into_inner());
            for (i, answer) in answers.iter().skip(skip).enumerate() {
                if matches!(answer, Value::Int(1)) {
                    fresh[i] = true;
                }
            }
        }

        let cursors = keys.queue(queue).source_cursors(&request.source);
        for _ in 0..MAX_ROUNDS {
            let answer = self.run(&mut conn, &cursors, first_queue == queue).await?;
            match answer.as_slice() {
                [code] if code == b"F" => {
                    self.move_here(&mut conn, &first_queue).await?;
                }
                [code, current, _] if code == b"M" => {
                    let current = match current.as_slice() {
                        b"" => None,
                        n => Some(
                            std::str::from_utf8(n)
                                .ok()
                                .and_then(|n| n.parse().ok())
                                .ok_or_else(|| unexpected("a source cursor"))?,
                        ),
                    };
                    // Nothing was stored, unless an attempt whose answer
                    // was lost was applied (and the cursor moved on since):
                    // then its index entries stay, and point at its tasks.
                    if !maybe_applied {
                        self.forget(&mut conn, |_| false).await?;
                    }
                    return Ok(IngestOutcome::Moved { current });
                }
                _ => {
                    let (results, stored_here) = submit_answers(
                        self.tasks(),
                        self.values,
                        &answer,
                        maybe_applied,
                        "an ingest",
                    )?;
                    // Ids that lost to an idempotency key were never stored.
                    self.forget(&mut conn, |i| stored_here[i]).await?;
                    return Ok(IngestOutcome::Ingested(results));
                }
            }
        }
        Err(Failure::Engine(EngineError::Unavailable(format!(
            "the cursor of source {:?} partition {:?} kept moving to another queue's slot",
            request.source, request.partition
        ))))
    }

    /// Runs the ingest script on the queue's slot.
    async fn run(
        &self,
        conn: &mut Conn,
        cursors: &str,
        first_queue: bool,
    ) -> Result<Vec<Vec<u8>>, Failure> {
        let request = self.request;
        let mut invocation = INGEST.prepare_invoke();
        for key in &self.shared.keys.queue(&request.queue).all {
            invocation.key(key.as_str());
        }
        invocation.key(cursors);
        invocation
            .arg(&request.partition)
            .arg(request.expected.map(|c| c.to_string()).unwrap_or_default())
            .arg(request.next.to_string())
            .arg(request.now_ms.to_string())
            .arg(&self.token)
            .arg(if first_queue { "1" } else { "0" });
        push_tasks(&mut invocation, self.tasks(), self.values);
        Ok(invocation.invoke_async(conn).await?)
    }

    /// Drops the index entries this ingest wrote for tasks it did not store.
    async fn forget(&self, conn: &mut Conn, stored: impl Fn(usize) -> bool) -> Result<(), Failure> {
        let unused: Vec<TaskId> = {
            let fresh = self.fresh.lock().unwrap_or_else(|e| e.into_inner());
            self.tasks()
                .iter()
                .enumerate()
                .filter(|&(i, _)| fresh[i] && !stored(i))
                .map(|(_, t)| t.envelope.id)
                .collect()
        };
        if unused.is_empty() {
            return Ok(());
        }
        self.shared.forget_ids(conn, &unused).await
    }

    /// Brings the partition's cursor one step closer to the queue's slot
    /// (module documentation): finds the latest copy through the registry,
    /// then moves it here, or finishes the move it is in.
    async fn move_here(&self, conn: &mut Conn, first_queue: &str) -> Result<(), Failure> {
        let keys = &self.shared.keys;
        let request = self.request;
        let (source, partition) = (&request.source, &request.partition);
        let queues = registered_queues(conn, keys, source).await?;
        let cmds = queues
            .iter()
            .map(|q| {
                redis::cmd("HGET")
                    .arg(keys.queue(q).source_cursors(source))
                    .arg(partition)
                    .clone()
            })
            .collect();
        let raws: Vec<Option<String>> = conn.each(cmds).await?;
        let mut latest: Option<(&str, Held)> = None;
        for (queue, raw) in queues.iter().zip(raws) {
            if let Some(raw) = raw {
                let copy = Held::parse(&raw)?;
                if latest
                    .as_ref()
                    .is_none_or(|(_, seen)| copy.rank() > seen.rank())
                {
                    latest = Some((queue.as_str(), copy));
                }
            }
        }
        let here = request.queue.as_str();
        match latest {
            // No cursor anywhere: none lives in the partition's first queue.
            None if first_queue != here => self.move_between(conn, first_queue, 0, true).await,
            None => Ok(()),
            Some((at, copy)) if copy.live => {
                if at == here {
                    return Ok(());
                }
                self.move_between(conn, at, copy.generation, at == first_queue)
                    .await
            }
            // Marked moved to a slot that may lack it: finish that move.
            Some((_, copy)) => {
                let to = copy.rest.as_str();
                if rdq_envelope::is_valid_name(to) {
                    self.move_in(conn, to, copy.generation + 1, copy.next, copy.at_ms)
                        .await
                } else {
                    Err(unexpected("a source cursor"))
                }
            }
        }
    }

    /// Moves the cursor of generation `generation` from queue `from`'s
    /// slot to this ingest's queue's.
    async fn move_between(
        &self,
        conn: &mut Conn,
        from: &str,
        generation: u64,
        from_first_queue: bool,
    ) -> Result<(), Failure> {
        let keys = &self.shared.keys;
        let request = self.request;
        let taken: Vec<String> = MOVE_OUT
            .key(keys.queue(from).source_cursors(&request.source))
            .arg(&request.partition)
            .arg(generation.to_string())
            .arg(&request.queue)
            .arg(if from_first_queue { "1" } else { "0" })
            .invoke_async(conn)
            .await?;
        let [next, at] = taken.as_slice() else {
            // It moved on meanwhile: the next round looks again.
            return Ok(());
        };
        let next = match next.as_str() {
            "" => None,
            n => Some(n.parse().map_err(|_| unexpected("a source cursor"))?),
        };
        let at = at.parse().map_err(|_| unexpected("a source cursor"))?;
        self.move_in(conn, &request.queue, generation + 1, next, at)
            .await
    }

    /// Writes the cursor live in queue `to`'s slot as `generation`, unless
    /// that slot holds as late a generation.
    async fn move_in(
        &self,
        conn: &mut Conn,
        to: &str,
        generation: u64,
        next: Option<u64>,
        at_ms: i64,
    ) -> Result<(), Failure> {
        let request = self.request;
        let _: i64 = MOVE_IN
            .key(self.shared.keys.queue(to).source_cursors(&request.source))
            .arg(&request.partition)
            .arg(generation.to_string())
            .arg(next.map(|n| n.to_string()).unwrap_or_default())
            .arg(at_ms.to_string())
            .invoke_async(conn)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_cursor_reads_back() {
        let live = Held::parse("L,2,17,1700000000000,01J0TOKEN").expect("live");
        assert!(live.live);
        assert_eq!(
            (live.generation, live.next, live.at_ms),
            (2, Some(17), 1_700_000_000_000)
        );
        let moved = Held::parse("M,0,,0,payments.charge").expect("moved");
        assert!(!moved.live);
        assert_eq!((moved.next, moved.rest.as_str()), (None, "payments.charge"));
        for damaged in ["", "L", "X,0,1,2,", "L,a,1,2,", "L,0,1,2"] {
            assert!(Held::parse(damaged).is_err(), "{damaged:?}");
        }
    }

    #[test]
    fn the_latest_generation_tells_where_a_cursor_is() {
        let slot = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let cursors = cursors_of(vec![
            slot(&[("0", "M,1,5,10,b"), ("1", "L,0,9,11,t")]),
            slot(&[("0", "L,2,7,12,t"), ("2", "M,0,3,13,c")]),
        ])
        .expect("cursors");
        let next: Vec<(&str, Option<u64>)> =
            cursors.iter().map(|(p, c)| (p.as_str(), c.next)).collect();
        assert_eq!(next, vec![("0", Some(7)), ("1", Some(9)), ("2", Some(3))]);
    }
}
