//! The read side: a task by id, pages by id, lapsed leases, counts and
//! stored policies. Reads are safe to repeat, so every one retries any
//! transient failure.

use futures::FutureExt;
use futures::future::try_join_all;
use rdq_engine::glob::Glob;
use rdq_engine::store::{MAX_PAGE, latest_error_type};
use rdq_engine::{EngineError, LeaseToken, ListOrder, ListQuery, Page, QueueConfig, QueueCounts};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};

use crate::Shared;
use crate::conn::{Conn, Retry, retrying};
use crate::error::{Failure, unexpected};
use crate::stored::{self, status_digit};

/// The queue `id` was submitted to, if the index knows it.
pub(crate) async fn queue_of(
    shared: &Shared,
    conn: &mut Conn,
    id: TaskId,
) -> Result<Option<String>, Failure> {
    Ok(redis::cmd("HGET")
        .arg(shared.keys.index(id))
        .arg(id.to_string())
        .query_async(conn)
        .await?)
}

/// The task with this id.
pub(crate) async fn get(shared: &Shared, id: TaskId) -> Result<Envelope, EngineError> {
    retrying(shared.options.wait, Retry::Always, |_| {
        async move {
            let mut conn = shared.conn().await?;
            let Some(queue) = queue_of(shared, &mut conn, id).await? else {
                return Err(EngineError::TaskNotFound(id).into());
            };
            let value: Option<Vec<u8>> = redis::cmd("HGET")
                .arg(shared.keys.queue(&queue).tasks())
                .arg(id.to_string())
                .query_async(&mut conn)
                .await?;
            match value {
                Some(value) => Ok(stored::decode(&value)?),
                None => Err(EngineError::TaskNotFound(id).into()),
            }
        }
        .boxed()
    })
    .await
}

/// One raw chunk of a listing: (id, stored value) in order.
pub(crate) async fn chunk(
    shared: &Shared,
    queue: &str,
    statuses: &str,
    cursor: Option<TaskId>,
    limit: usize,
    order: ListOrder,
) -> Result<Vec<(TaskId, Vec<u8>)>, EngineError> {
    let queue_keys = shared.keys.queue(queue);
    let cursor = cursor.map(|c| c.to_string()).unwrap_or_default();
    let order = match order {
        ListOrder::OldestFirst => "a",
        ListOrder::NewestFirst => "d",
    };
    let flat: Vec<Vec<u8>> = retrying(shared.options.wait, Retry::Always, |_| {
        let (queue_keys, cursor) = (&queue_keys, &cursor);
        async move {
            let mut conn = shared.conn().await?;
            crate::scripts::run(
                &mut conn,
                &shared.scripts.list,
                queue_keys,
                [statuses, cursor.as_str(), &limit.to_string(), order],
            )
            .await
        }
        .boxed()
    })
    .await?;
    let mut out = Vec::with_capacity(flat.len() / 2);
    let mut it = flat.into_iter();
    while let (Some(id), Some(value)) = (it.next(), it.next()) {
        let id = std::str::from_utf8(&id)
            .ok()
            .and_then(TaskId::parse)
            .ok_or_else(|| unexpected("a listing").into_engine())?;
        out.push((id, value));
    }
    Ok(out)
}

/// One page of a queue's tasks.
pub(crate) async fn list(shared: &Shared, query: &ListQuery) -> Result<Page, EngineError> {
    let limit = match query.limit {
        0 => MAX_PAGE,
        n => n.min(MAX_PAGE),
    };
    let glob = query
        .error_type
        .as_deref()
        .map(Glob::new)
        .transpose()
        .map_err(EngineError::InvalidArgument)?;
    let statuses: String = match query.status {
        Some(status) => status_digit(status).to_string(),
        None => "0123".to_owned(),
    };
    let mut items = Vec::with_capacity(limit);
    let mut cursor = query.cursor;
    'pages: loop {
        let raw = chunk(shared, &query.queue, &statuses, cursor, limit, query.order).await?;
        let full = raw.len() == limit;
        for (id, value) in raw {
            cursor = Some(id);
            let env = stored::decode(&value)?;
            if glob
                .as_ref()
                .is_none_or(|g| latest_error_type(&env).is_some_and(|t| g.matches(t)))
            {
                items.push(env);
                if items.len() == limit {
                    break 'pages;
                }
            }
        }
        if !full {
            break;
        }
    }
    let next_cursor = if items.len() == limit {
        items.last().map(|env| env.id)
    } else {
        None
    };
    Ok(Page { items, next_cursor })
}

/// The queues in the registry.
pub(crate) async fn queues(shared: &Shared, conn: &mut Conn) -> Result<Vec<String>, Failure> {
    let mut queues: Vec<String> = redis::cmd("SMEMBERS")
        .arg(shared.keys.registry())
        .query_async(conn)
        .await?;
    queues.sort();
    Ok(queues)
}

/// Up to `limit` lapsed leases over every queue.
pub(crate) async fn expired_leases(
    shared: &Shared,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<Envelope>, EngineError> {
    let values: Vec<Vec<Vec<u8>>> = retrying(shared.options.wait, Retry::Always, |_| {
        async move {
            let mut conn = shared.conn().await?;
            let queues = queues(shared, &mut conn).await?;
            let scans = queues.iter().map(|queue| {
                let mut conn = conn.clone();
                let queue_keys = shared.keys.queue(queue);
                async move {
                    crate::scripts::run::<Vec<Vec<u8>>, _>(
                        &mut conn,
                        &shared.scripts.expired,
                        &queue_keys,
                        [now.unix_ms(), limit as i64],
                    )
                    .await
                }
            });
            try_join_all(scans).await
        }
        .boxed()
    })
    .await?;
    let mut lapsed = Vec::new();
    for value in values.into_iter().flatten() {
        match stored::decode(&value) {
            Ok(env) => lapsed.push(env),
            Err(e) => tracing::warn!(error = %e, "a leased task does not decode"),
        }
    }
    lapsed.sort_by_key(|env| (env.lease_expires_at, env.id));
    lapsed.truncate(limit);
    Ok(lapsed)
}

/// Tasks per status of `queue`, and whether it has a stored policy.
pub(crate) async fn queue_counts(
    shared: &Shared,
    conn: &mut Conn,
    queue: &str,
) -> Result<(QueueCounts, bool), Failure> {
    let n: Vec<u64> = crate::scripts::run(
        conn,
        &shared.scripts.counts,
        &shared.keys.queue(queue),
        std::iter::empty::<&str>(),
    )
    .await?;
    let [pending, in_flight, succeeded, dead, configured] = n[..] else {
        return Err(unexpected("counts"));
    };
    Ok((
        QueueCounts {
            queue: queue.to_owned(),
            pending,
            in_flight,
            succeeded,
            dead,
        },
        configured == 1,
    ))
}

/// Tasks per status for every queue that has tasks or a stored policy.
pub(crate) async fn counts(shared: &Shared) -> Result<Vec<QueueCounts>, EngineError> {
    retrying(shared.options.wait, Retry::Always, |_| {
        async move {
            let mut conn = shared.conn().await?;
            let queues = queues(shared, &mut conn).await?;
            let each = queues.iter().map(|queue| {
                let mut conn = conn.clone();
                async move { queue_counts(shared, &mut conn, queue).await }
            });
            let all = try_join_all(each).await?;
            Ok(all
                .into_iter()
                .filter(|(c, configured)| {
                    *configured || c.pending + c.in_flight + c.succeeded + c.dead > 0
                })
                .map(|(c, _)| c)
                .collect())
        }
        .boxed()
    })
    .await
}

/// How many tasks of `queue` are in `status`.
pub(crate) async fn count_of(
    shared: &Shared,
    queue: &str,
    status: Status,
) -> Result<u64, EngineError> {
    let (counts, _) = retrying(shared.options.wait, Retry::Always, |_| {
        async move {
            let mut conn = shared.conn().await?;
            queue_counts(shared, &mut conn, queue).await
        }
        .boxed()
    })
    .await?;
    Ok(match status {
        Status::Pending => counts.pending,
        Status::InFlight => counts.in_flight,
        Status::Succeeded => counts.succeeded,
        Status::Dead => counts.dead,
    })
}

/// The stored policy of `queue`, if one was stored.
pub(crate) async fn get_config(
    shared: &Shared,
    queue: &str,
) -> Result<Option<QueueConfig>, EngineError> {
    if let Some(policy) = shared.events.cached(queue) {
        return Ok(policy);
    }
    let epoch = shared.events.epoch();
    let key = shared.keys.queue(queue).config().to_owned();
    let text: Option<String> = retrying(shared.options.wait, Retry::Always, |_| {
        let key = &key;
        async move {
            let mut conn = shared.conn().await?;
            Ok(redis::cmd("GET").arg(key).query_async(&mut conn).await?)
        }
        .boxed()
    })
    .await?;
    let policy: Option<QueueConfig> = text
        .map(|t| {
            serde_json::from_str(&t).map_err(|e| {
                EngineError::CorruptStore(format!(
                    "the stored policy of queue {queue} does not parse: {e}"
                ))
            })
        })
        .transpose()?;
    shared.events.insert(queue, policy.clone(), epoch);
    Ok(policy)
}

/// The in-flight envelope behind each `(id, token)`, one result per item.
pub(crate) async fn leased(
    shared: &Shared,
    leases: &[(TaskId, LeaseToken)],
) -> Vec<Result<Envelope, EngineError>> {
    if leases.is_empty() {
        return Vec::new();
    }
    let found = retrying(shared.options.wait, Retry::Always, |_| {
        async move {
            let mut conn = shared.conn().await?;
            let lookups = leases
                .iter()
                .map(|(id, _)| {
                    let mut cmd = redis::cmd("HGET");
                    cmd.arg(shared.keys.index(*id)).arg(id.to_string());
                    cmd
                })
                .collect();
            let queues: Vec<Option<String>> = conn.each(lookups).await?;
            let reads = leases
                .iter()
                .zip(&queues)
                .map(|((id, _), queue)| {
                    let mut cmd = redis::cmd("HGET");
                    // An unknown id reads a key that does not exist.
                    let queue = queue.as_deref().unwrap_or("-");
                    cmd.arg(shared.keys.queue(queue).tasks())
                        .arg(id.to_string());
                    cmd
                })
                .collect();
            let values: Vec<Option<Vec<u8>>> = conn.each(reads).await?;
            Ok(values)
        }
        .boxed()
    })
    .await;
    match found {
        Ok(values) => leases
            .iter()
            .zip(values)
            .map(|(&(id, token), value)| {
                let env = stored::decode(&value.ok_or(EngineError::TaskNotFound(id))?)?;
                if LeaseToken::current(&env) == Some(token) {
                    Ok(env)
                } else {
                    Err(EngineError::LeaseLost(id))
                }
            })
            .collect(),
        Err(e) => vec![Err(e); leases.len()],
    }
}

/// Whether Redis answers and takes writes now: one write, no retries.
pub(crate) async fn ready(shared: &Shared) -> Result<(), EngineError> {
    let probe = async {
        let mut conn = shared.conn().await?;
        let _: redis::Value = redis::cmd("SET")
            .arg(shared.keys.probe())
            .arg(Timestamp::now().unix_ms())
            .arg("PX")
            .arg(60_000)
            .query_async(&mut conn)
            .await?;
        Ok::<(), Failure>(())
    };
    match tokio::time::timeout(std::time::Duration::from_secs(2), probe).await {
        Ok(result) => result.map_err(Failure::into_engine),
        Err(_) => Err(EngineError::Unavailable(
            "Redis did not answer within 2 s".into(),
        )),
    }
}
