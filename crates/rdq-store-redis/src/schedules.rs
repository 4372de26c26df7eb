//! Schedules in Redis: one hash per schedule, under the hash tag of the
//! queue its fires submit to, and a registry hash (name → queue).
//!
//! A fire is one Lua script on the queue's shard (`lua/fire.lua` followed
//! by `lua/submit.lua`): the compare-and-swap on the cursor, the counters,
//! and the fire's tasks stored exactly as a submit stores them. Keeping the
//! record with its queue is what makes that one script on Redis Cluster,
//! where a script may touch one hash slot only.
//!
//! A schedule changed to another queue moves between slots, which no
//! script can do at once: the put marks the old record moved (a fire on it
//! answers `Raced` from then on), writes the record under the new queue
//! with the cursor and counters it read, points the registry at it and
//! deletes the old one. A put interrupted half-way leaves the schedule
//! unfired until it is put again.

use std::collections::HashMap;
use std::sync::LazyLock;

use async_trait::async_trait;
use futures::FutureExt;
use rdq_engine::{
    EngineError, FireOutcome, FireRequest, NewTask, ScheduleOwner, SchedulePut, Schedules,
    StoredSchedule, Submitted,
};
use rdq_envelope::TaskId;
use redis::{Script, ScriptInvocation, Value};

use crate::conn::{Conn, Retry, retrying};
use crate::error::{Failure, unexpected};
use crate::keys::Keys;
use crate::stored::{self, Placement, envelope_bytes};
use crate::{RedisStore, Shared};

/// The fire: the compare-and-swap, then a submit, in one script.
static FIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/common.lua"),
        include_str!("lua/fire.lua"),
        include_str!("lua/submit.lua")
    ))
});

/// Writes a record (KEYS[1]): the fields carried over from a move first
/// (ARGV[4] on, in pairs), then the definition; answers 1 when it is new.
static PUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
         local created = redis.call('HSETNX', KEYS[1], 'created', ARGV[3])
         redis.call('HSET', KEYS[1], 'def', ARGV[1], 'owner', ARGV[2], 'updated', ARGV[3])
         redis.call('HDEL', KEYS[1], 'moved')
         return created",
    )
});

/// Replaces a record's definition only while it is the expected one (and
/// the record was not moved to another queue): 1 when it did.
static REPLACE_IF: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('HGET', KEYS[1], 'def') ~= ARGV[1]
             or redis.call('HEXISTS', KEYS[1], 'moved') == 1 then return 0 end
         redis.call('HSET', KEYS[1], 'def', ARGV[2], 'owner', ARGV[3], 'updated', ARGV[4])
         return 1",
    )
});

/// Marks a record moved and answers its fields (none when there is none).
static MOVE_OUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
         redis.call('HSET', KEYS[1], 'moved', '1')
         return redis.call('HGETALL', KEYS[1])",
    )
});

/// Fields a put writes itself rather than carry over from a moved record.
const OWN_FIELDS: [&str; 4] = ["def", "owner", "updated", "moved"];

/// The registry of schedules under `keys`' prefix: name → queue.
fn registry(keys: &Keys) -> String {
    format!("{}:schedules", keys.prefix())
}

/// Deletes every schedule under `keys`' prefix (with the prefix's keys).
pub(crate) async fn delete_schedules(conn: &mut Conn, keys: &Keys) -> Result<(), Failure> {
    let registry_key = registry(keys);
    let all: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(&registry_key)
        .query_async(conn)
        .await?;
    for (name, queue) in &all {
        let _: Value = redis::cmd("DEL")
            .arg(keys.queue(queue).schedule(name))
            .query_async(conn)
            .await?;
    }
    let _: Value = redis::cmd("DEL")
        .arg(registry_key)
        .query_async(conn)
        .await?;
    Ok(())
}

impl Shared {
    fn schedule_registry(&self) -> String {
        registry(&self.keys)
    }

    fn schedule_record(&self, queue: &str, name: &str) -> String {
        self.keys.queue(queue).schedule(name)
    }

    async fn queue_of_schedule(
        &self,
        conn: &mut Conn,
        name: &str,
    ) -> Result<Option<String>, Failure> {
        Ok(redis::cmd("HGET")
            .arg(self.schedule_registry())
            .arg(name)
            .query_async(conn)
            .await?)
    }

    async fn read_schedule(
        &self,
        conn: &mut Conn,
        name: &str,
        queue: &str,
    ) -> Result<Option<StoredSchedule>, Failure> {
        let fields: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.schedule_record(queue, name))
            .query_async(conn)
            .await?;
        Ok(record(name, &fields))
    }
}

fn record(name: &str, fields: &HashMap<String, String>) -> Option<StoredSchedule> {
    let int = |f: &str| fields.get(f).and_then(|v| v.parse::<i64>().ok());
    let definition = fields.get("def")?.clone();
    Some(StoredSchedule {
        name: name.to_owned(),
        owner: fields
            .get("owner")
            .and_then(|o| ScheduleOwner::parse(o))
            .unwrap_or_default(),
        definition,
        created_at_ms: int("created").unwrap_or(0),
        updated_at_ms: int("updated").unwrap_or(0),
        last_due_ms: int("cursor"),
        last_fired_task: fields.get("task").and_then(|t| TaskId::parse(t)),
        last_fire_at_ms: int("fire_at"),
        fires: int("fires")
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0),
        skips: fields
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("skip:")?.to_owned(), v.parse().ok()?)))
            .collect(),
    })
}

#[async_trait]
impl Schedules for RedisStore {
    async fn put_schedule(&self, put: &SchedulePut) -> Result<bool, EngineError> {
        self.started().await;
        let shared = self.shared();
        retrying(shared.options.wait, Retry::Always, |_applied| {
            put_attempt(shared, put).boxed()
        })
        .await
    }

    async fn replace_schedule_if(
        &self,
        put: &SchedulePut,
        expected: &str,
    ) -> Result<bool, EngineError> {
        self.started().await;
        let shared = self.shared();
        retrying(shared.options.wait, Retry::NotAppliedOnly, |_applied| {
            async move {
                let mut conn = shared.conn().await?;
                let replaced: i64 = REPLACE_IF
                    .key(shared.schedule_record(&put.queue, &put.name))
                    .arg(expected)
                    .arg(&put.definition)
                    .arg(put.owner.as_str())
                    .arg(put.now_ms)
                    .invoke_async(&mut conn)
                    .await?;
                Ok(replaced == 1)
            }
            .boxed()
        })
        .await
    }

    async fn get_schedule(&self, name: &str) -> Result<Option<StoredSchedule>, EngineError> {
        self.started().await;
        let shared = self.shared();
        retrying(shared.options.wait, Retry::Always, |_applied| {
            async move {
                let mut conn = shared.conn().await?;
                match shared.queue_of_schedule(&mut conn, name).await? {
                    Some(queue) => shared.read_schedule(&mut conn, name, &queue).await,
                    None => Ok(None),
                }
            }
            .boxed()
        })
        .await
    }

    async fn list_schedules(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StoredSchedule>, EngineError> {
        self.started().await;
        let shared = self.shared();
        retrying(shared.options.wait, Retry::Always, |_applied| {
            async move {
                let mut conn = shared.conn().await?;
                let registry: HashMap<String, String> = redis::cmd("HGETALL")
                    .arg(shared.schedule_registry())
                    .query_async(&mut conn)
                    .await?;
                let mut names: Vec<(&String, &String)> = registry
                    .iter()
                    .filter(|(name, _)| after.is_none_or(|a| name.as_str() > a))
                    .collect();
                names.sort();
                let mut out = Vec::new();
                for (name, queue) in names.into_iter().take(limit) {
                    if let Some(s) = shared.read_schedule(&mut conn, name, queue).await? {
                        out.push(s);
                    }
                }
                Ok(out)
            }
            .boxed()
        })
        .await
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool, EngineError> {
        self.started().await;
        let shared = self.shared();
        retrying(shared.options.wait, Retry::NotAppliedOnly, |_applied| {
            async move {
                let mut conn = shared.conn().await?;
                let Some(queue) = shared.queue_of_schedule(&mut conn, name).await? else {
                    return Ok(false);
                };
                // The record first: a fire that read the registry before
                // finds no record and changes nothing.
                let _: Value = redis::cmd("DEL")
                    .arg(shared.schedule_record(&queue, name))
                    .query_async(&mut conn)
                    .await?;
                let _: Value = redis::cmd("HDEL")
                    .arg(shared.schedule_registry())
                    .arg(name)
                    .query_async(&mut conn)
                    .await?;
                Ok(true)
            }
            .boxed()
        })
        .await
    }

    async fn fire_schedule(&self, fire: &FireRequest) -> Result<FireOutcome, EngineError> {
        self.started().await;
        let shared = self.shared();
        let values: Vec<Vec<u8>> = fire
            .tasks
            .iter()
            .map(|t| stored::value_of(&t.envelope))
            .collect();
        let values = &values;
        retrying(shared.options.wait, Retry::Always, |maybe_applied| {
            fire_attempt(shared, fire, values, maybe_applied).boxed()
        })
        .await
    }
}

async fn put_attempt(shared: &Shared, put: &SchedulePut) -> Result<bool, Failure> {
    let mut conn = shared.conn().await?;
    let old = shared.queue_of_schedule(&mut conn, &put.name).await?;
    let mut carried: Vec<String> = Vec::new();
    if let Some(old) = old.as_deref().filter(|q| *q != put.queue) {
        let fields: Vec<String> = MOVE_OUT
            .key(shared.schedule_record(old, &put.name))
            .invoke_async(&mut conn)
            .await?;
        for pair in fields.chunks(2) {
            if let [field, value] = pair
                && !OWN_FIELDS.contains(&field.as_str())
            {
                carried.push(field.clone());
                carried.push(value.clone());
            }
        }
    }
    let mut invocation = PUT.key(shared.schedule_record(&put.queue, &put.name));
    invocation
        .arg(&put.definition)
        .arg(put.owner.as_str())
        .arg(put.now_ms);
    for field in &carried {
        invocation.arg(field);
    }
    let created: i64 = invocation.invoke_async(&mut conn).await?;
    let _: Value = redis::cmd("HSET")
        .arg(shared.schedule_registry())
        .arg(&put.name)
        .arg(&put.queue)
        .query_async(&mut conn)
        .await?;
    if let Some(old) = old.as_deref().filter(|q| *q != put.queue) {
        let _: Value = redis::cmd("DEL")
            .arg(shared.schedule_record(old, &put.name))
            .query_async(&mut conn)
            .await?;
    }
    Ok(old.is_none() && created == 1)
}

async fn fire_attempt(
    shared: &Shared,
    fire: &FireRequest,
    values: &[Vec<u8>],
    maybe_applied: bool,
) -> Result<FireOutcome, Failure> {
    let mut conn = shared.conn().await?;
    let Some(queue) = shared.queue_of_schedule(&mut conn, &fire.name).await? else {
        return Ok(FireOutcome::Raced);
    };
    // Planned before the schedule moved to another queue: stale.
    if fire.tasks.iter().any(|t| t.envelope.queue != queue) {
        return Ok(FireOutcome::Raced);
    }
    let keys = &shared.keys;
    // As a submit does: the queue registry and the id index first, so no
    // task is stored where the reaper, `counts` or `get` cannot find it.
    let mut cmds = Vec::with_capacity(fire.tasks.len() + 1);
    cmds.push(redis::cmd("SADD").arg(keys.registry()).arg(&queue).clone());
    for task in &fire.tasks {
        cmds.push(
            redis::cmd("HSETNX")
                .arg(keys.index(task.envelope.id))
                .arg(task.envelope.id.to_string())
                .arg(&queue)
                .clone(),
        );
    }
    let answers: Vec<Value> = conn.each(cmds).await?;
    let fresh: Vec<bool> = answers
        .iter()
        .skip(1)
        .map(|v| matches!(v, Value::Int(1)))
        .collect();

    let queue_keys = keys.queue(&queue);
    let mut invocation = FIRE.prepare_invoke();
    for key in &queue_keys.all {
        invocation.key(key.as_str());
    }
    invocation.key(queue_keys.schedule(&fire.name));
    invocation
        .arg(
            fire.expected_last_due_ms
                .map(|c| c.to_string())
                .unwrap_or_default(),
        )
        .arg(fire.last_due_ms.to_string())
        .arg(fire.now_ms.to_string())
        .arg(fire.skipped.len());
    for (reason, n) in &fire.skipped {
        invocation.arg(reason.as_str()).arg(*n);
    }
    push_tasks(&mut invocation, &fire.tasks, values);
    let answer: Vec<Vec<u8>> = invocation.invoke_async(&mut conn).await?;
    let fresh_ids = |keep: &dyn Fn(usize) -> bool| -> Vec<TaskId> {
        fire.tasks
            .iter()
            .enumerate()
            .filter(|&(i, _)| fresh.get(i).copied().unwrap_or(false) && !keep(i))
            .map(|(_, t)| t.envelope.id)
            .collect()
    };
    if answer.len() == 1 && answer[0] == b"R" {
        let unused = fresh_ids(&|_| false);
        if !unused.is_empty() {
            shared.forget_ids(&mut conn, &unused).await?;
        }
        return Ok(FireOutcome::Raced);
    }
    let (results, stored_here) =
        submit_answers(&fire.tasks, values, &answer, maybe_applied, "a fire")?;
    // Ids that lost to an idempotency key were never stored.
    let unused = fresh_ids(&|i| stored_here[i]);
    if !unused.is_empty() {
        shared.forget_ids(&mut conn, &unused).await?;
    }
    Ok(FireOutcome::Fired(results))
}

/// Adds `lua/submit.lua`'s six arguments per task (id, idempotency key,
/// stored value, status, place kind, score) to a script that ends with it.
pub(crate) fn push_tasks(
    invocation: &mut ScriptInvocation<'_>,
    tasks: &[NewTask],
    values: &[Vec<u8>],
) {
    for (task, value) in tasks.iter().zip(values) {
        let env = &task.envelope;
        let place = Placement::of(env);
        invocation
            .arg(env.id.to_string())
            .arg(match &task.idempotency_key {
                Some(key) => [b"+", key.as_bytes()].concat(),
                None => b"-".to_vec(),
            })
            .arg(value.as_slice())
            .arg(place.status.to_string())
            .arg(place.kind.to_string())
            .arg(place.score.as_str());
    }
}

/// One result per task, as a submit answers.
pub(crate) type SubmitResults = Vec<Result<Submitted, EngineError>>;

/// Reads `lua/submit.lua`'s answer for `tasks` (stored as `values`) when
/// it ran inside a cursor's compare-and-swap (a fire, an ingest): one result
/// per task, and whether each task's id is stored (as that task, or taken by
/// another). An id stored with these very bytes is this step's own write
/// (an earlier attempt whose answer was lost): `Created`.
pub(crate) fn submit_answers(
    tasks: &[NewTask],
    values: &[Vec<u8>],
    answer: &[Vec<u8>],
    maybe_applied: bool,
    what: &str,
) -> Result<(SubmitResults, Vec<bool>), Failure> {
    if answer.len() != tasks.len() * 2 {
        return Err(unexpected(what));
    }
    let mut results: Vec<Result<Submitted, EngineError>> = Vec::with_capacity(tasks.len());
    let mut stored_here = vec![false; tasks.len()];
    for (i, (task, pair)) in tasks.iter().zip(answer.chunks(2)).enumerate() {
        let env = &task.envelope;
        let (code, value) = (pair[0].first().copied(), &pair[1]);
        results.push(match code {
            Some(b'C') => {
                stored_here[i] = true;
                Ok(Submitted::Created(env.clone()))
            }
            Some(b'E') => {
                let original = stored::decode(value)?;
                if maybe_applied && original.id == env.id {
                    stored_here[i] = true;
                    Ok(Submitted::Created(env.clone()))
                } else {
                    Ok(Submitted::Existing(original))
                }
            }
            Some(b'D') if envelope_bytes(value) == envelope_bytes(&values[i]) => {
                stored_here[i] = true;
                Ok(Submitted::Created(env.clone()))
            }
            Some(b'D') => {
                stored_here[i] = true;
                Err(EngineError::InvalidArgument(format!(
                    "a task with id {} already exists",
                    env.id
                )))
            }
            _ => return Err(unexpected(what)),
        });
    }
    Ok((results, stored_here))
}
