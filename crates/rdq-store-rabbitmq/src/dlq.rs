//! The admin path a broker can offer, all of it by reading `q.dead`: DLQ
//! listing (and so show/export), redrive, purge and delete of dead tasks.
//!
//! A queue cannot be read without taking its messages, so a read takes every
//! dead letter on a private channel with `basic.get` (unacknowledged), works
//! on the copy, acks what it removes (redrive, delete) and closes the
//! channel, which puts the rest back where they were. While a read is under
//! way the letters it holds are invisible to another read; two operators
//! listing at the same moment may each see part of the queue. Pending and
//! in-flight tasks cannot be listed at all: they are in `q` and hold queues,
//! or held by a worker.

use std::collections::HashSet;

use lapin::Acker;
use lapin::Channel;
use lapin::options::{BasicAckOptions, BasicGetOptions, QueuePurgeOptions};
use rdq_engine::glob::Glob;
use rdq_engine::store::{MAX_PAGE, latest_error_type};
use rdq_engine::{EngineError, ListOrder, ListQuery, Page, RedriveRequest, machine};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use tracing::warn;

use crate::connection::{is_not_found, short_name};
use crate::core::Core;
use crate::queue::QueueState;
use crate::wire::{self, Incoming};

struct DeadLetter {
    envelope: Envelope,
    acker: Acker,
}

/// The dead letters of one queue, held unacked on `channel`.
struct DeadRead {
    channel: Channel,
    letters: Vec<DeadLetter>,
}

impl DeadRead {
    /// Puts back every letter not acked.
    async fn release(self) {
        let _ = self.channel.close(200, "OK".into()).await;
    }
}

async fn read(core: &Core, q: &QueueState) -> Result<Option<DeadRead>, EngineError> {
    if core.broker.depth(&q.names.dead).await?.is_none() {
        return Ok(None);
    }
    let channel = core.broker.channel().await?;
    let name = short_name(&q.names.dead)?;
    let mut letters = Vec::new();
    let limit = core.broker.options().dlq_scan_limit;
    while letters.len() < limit {
        let got = channel
            .basic_get(name.clone(), BasicGetOptions { no_ack: false })
            .await;
        let message = match got {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(e) if is_not_found(&e) => break,
            Err(e) => return Err(crate::error::RabbitError::from(e).into()),
        };
        let delivery = message.delivery;
        let envelope = match wire::decode(&delivery.data) {
            Ok(Incoming::Rdq(mut env)) => {
                env.status = Status::Dead;
                *env
            }
            Ok(Incoming::Queuey(job)) => {
                wire::queuey_dead_to_rdq(&job, &q.name, &delivery.properties)
            }
            Err(_) => {
                // A malformed body copied verbatim: not a task, left in place.
                continue;
            }
        };
        letters.push(DeadLetter {
            envelope,
            acker: delivery.acker,
        });
    }
    Ok(Some(DeadRead { channel, letters }))
}

fn glob(pattern: Option<&str>) -> Result<Option<Glob>, EngineError> {
    pattern
        .map(|p| Glob::new(p).map_err(EngineError::InvalidArgument))
        .transpose()
}

fn matches(env: &Envelope, glob: Option<&Glob>) -> bool {
    glob.is_none_or(|g| latest_error_type(env).is_some_and(|t| g.matches(t)))
}

/// One page of a queue's dead tasks (the only tasks a broker can list).
pub(crate) async fn list(core: &Core, query: &ListQuery) -> Result<Page, EngineError> {
    if query.status.is_some_and(|s| s != Status::Dead) {
        return Err(EngineError::Unsupported(
            "a RabbitMQ store lists dead tasks only (pending and in-flight tasks are inside the broker)".into(),
        ));
    }
    let filter = glob(query.error_type.as_deref())?;
    let q = core.queue(&query.queue)?;
    let Some(read) = read(core, &q).await? else {
        return Ok(Page {
            items: Vec::new(),
            next_cursor: None,
        });
    };
    let mut items: Vec<Envelope> = read
        .letters
        .iter()
        .map(|l| &l.envelope)
        .filter(|env| matches(env, filter.as_ref()))
        .filter(|env| match (query.cursor, query.order) {
            (None, _) => true,
            (Some(c), ListOrder::NewestFirst) => env.id < c,
            (Some(c), ListOrder::OldestFirst) => env.id > c,
        })
        .cloned()
        .collect();
    read.release().await;
    items.sort_by_key(|env| env.id);
    if query.order == ListOrder::NewestFirst {
        items.reverse();
    }
    items.dedup_by_key(|env| env.id);
    let limit = if query.limit == 0 {
        MAX_PAGE
    } else {
        query.limit.min(MAX_PAGE)
    };
    items.truncate(limit);
    let next_cursor = (items.len() == limit)
        .then(|| items.last().map(|e| e.id))
        .flatten();
    Ok(Page { items, next_cursor })
}

/// Sends matching dead tasks back to their queue: publish the redriven task,
/// then ack its dead letter (publish before ack, as everywhere).
pub(crate) async fn redrive(
    core: &Core,
    request: &RedriveRequest,
    now: Timestamp,
) -> Result<Vec<TaskId>, EngineError> {
    let filter = glob(request.error_type.as_deref())?;
    let q = core.queue(&request.queue)?;
    let Some(read) = read(core, &q).await? else {
        return Ok(Vec::new());
    };
    let wanted: Option<HashSet<TaskId>> = request
        .ids
        .as_ref()
        .map(|ids| ids.iter().copied().collect());
    let mut taken: HashSet<TaskId> = HashSet::new();
    let mut chosen: Vec<&DeadLetter> = Vec::new();
    for letter in &read.letters {
        let env = &letter.envelope;
        if request.limit.is_some_and(|limit| chosen.len() >= limit) {
            break;
        }
        if wanted.as_ref().is_some_and(|w| !w.contains(&env.id))
            || !matches(env, filter.as_ref())
            || !taken.insert(env.id)
        {
            continue;
        }
        chosen.push(letter);
    }
    let ids: Vec<TaskId> = chosen.iter().map(|l| l.envelope.id).collect();
    if request.dry_run || chosen.is_empty() {
        read.release().await;
        return Ok(ids);
    }
    let result = async {
        core.declare(&q).await?;
        let granularity = core.broker.options().retry_granularity;
        let mut done = Vec::with_capacity(chosen.len());
        for letter in &chosen {
            let back = machine::redrive(&letter.envelope, now)?;
            core.publish_task(&q, &back, 0, granularity).await?;
            if let Err(e) = letter.acker.ack(BasicAckOptions::default()).await {
                warn!(task = %back.id, error = %e, "acking a redriven dead letter failed; it stays in the DLQ too");
            }
            lock_saw(core, back.id);
            done.push(back.id);
        }
        Ok::<_, EngineError>(done)
    }
    .await;
    read.release().await;
    result
}

fn lock_saw(core: &Core, id: TaskId) {
    core.leases
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .saw(id);
}

/// Removes a queue's PENDING (ready in `q`; held ones wait in hold queues
/// and are not counted) or DEAD tasks. A broker keeps no SUCCEEDED tasks
/// (none to purge) and cannot reach IN_FLIGHT ones.
pub(crate) async fn purge(
    core: &Core,
    queue: &str,
    status: Status,
    dry_run: bool,
) -> Result<u64, EngineError> {
    let q = core.queue(queue)?;
    let name = match status {
        Status::Pending => q.names.work.clone(),
        Status::Dead => q.names.dead.clone(),
        Status::Succeeded => return Ok(0),
        Status::InFlight => {
            return Err(EngineError::Unsupported(
                "a RabbitMQ store cannot purge in-flight tasks (workers hold them)".into(),
            ));
        }
    };
    let Some(depth) = core.broker.depth(&name).await? else {
        return Ok(0);
    };
    if dry_run {
        return Ok(u64::from(depth));
    }
    let channel = core.broker.channel().await?;
    let purged = channel
        .queue_purge(short_name(&name)?, QueuePurgeOptions::default())
        .await
        .map_err(crate::error::RabbitError::from)?;
    let _ = channel.close(200, "OK".into()).await;
    Ok(u64::from(purged))
}

/// Removes one dead task, looked for in the dead-letter queues of the queues
/// this process has used (a broker cannot find a task by id anywhere else).
pub(crate) async fn delete(core: &Core, id: TaskId) -> Result<(), EngineError> {
    for q in core.known_queues() {
        let Some(read) = read(core, &q).await? else {
            continue;
        };
        let found = read.letters.iter().find(|l| l.envelope.id == id);
        let acked = match found {
            Some(letter) => letter.acker.ack(BasicAckOptions::default()).await.is_ok(),
            None => false,
        };
        read.release().await;
        if acked {
            return Ok(());
        }
    }
    Err(EngineError::TaskNotFound(id))
}
