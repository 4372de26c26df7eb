//! The connection to Redis, one node or a cluster, and the retry loop every
//! operation runs in.
//!
//! [`Conn`] is one multiplexed connection (the `redis` crate's
//! `ConnectionManager`, which reconnects by itself) or a cluster connection
//! (which follows slot moves and failovers): cheap to clone, and commands
//! sent at once from many tasks share it as one pipeline. [`Attempts`]
//! retries what failed while Redis was away, until the store's `wait` has
//! passed; then the caller gets `STORE_UNAVAILABLE`, never a guess.

use std::time::Duration;

use futures::future::{BoxFuture, try_join_all};
use rdq_engine::EngineError;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, Value};
use tokio::time::Instant;

use crate::error::Failure;
use crate::options::RedisOptions;

/// How long one command may take before its connection is presumed lost.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A connection to one Redis node or to a cluster.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One node (or a primary behind a proxy).
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl Conn {
    /// Connects as `options` say: fails if no node answers now.
    pub(crate) async fn connect(options: &RedisOptions) -> Result<Self, Failure> {
        if options.cluster {
            let mut nodes = vec![options.url.clone()];
            nodes.extend(options.cluster_nodes.iter().cloned());
            let client = options
                .tls
                .cluster(redis::cluster::ClusterClient::builder(nodes))
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .retries(6)
                .build()?;
            return Ok(Self::Cluster(client.get_async_connection().await?));
        }
        let client = options.tls.client(options.url.as_str())?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(3)
            .set_max_delay(Duration::from_millis(500));
        Ok(Self::Single(
            ConnectionManager::new_with_config(client, config).await?,
        ))
    }

    /// Runs independent commands and answers each: one pipeline on a single
    /// node, concurrent commands on a cluster (whose pipelines must stay in
    /// one slot).
    pub(crate) async fn each<T: FromRedisValue>(
        &mut self,
        cmds: Vec<Cmd>,
    ) -> Result<Vec<T>, Failure> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            Self::Single(conn) => {
                let mut pipe = redis::pipe();
                for cmd in cmds {
                    pipe.add_command(cmd);
                }
                Ok(pipe.query_async(conn).await?)
            }
            Self::Cluster(conn) => {
                let runs = cmds.into_iter().map(|cmd| {
                    let mut conn = conn.clone();
                    async move { cmd.query_async::<T>(&mut conn).await }
                });
                Ok(try_join_all(runs).await?)
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// Which failures an operation may be retried after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Any transient failure: the operation is safe to repeat (reads,
    /// claims, policy writes, pruning) or recognises that an earlier
    /// attempt landed (submits and settles compare the stored bytes).
    Always,
    /// Only failures where Redis certainly ran nothing: repeating after an
    /// unknown outcome would answer wrongly (purge, redrive).
    NotAppliedOnly,
}

/// Where a retried operation stands.
pub(crate) struct Attempts {
    deadline: Instant,
    backoff: Duration,
    /// An earlier attempt failed with its outcome unknown.
    pub(crate) maybe_applied: bool,
}

impl Attempts {
    /// A first attempt, with until `wait` from now for all of them.
    pub(crate) fn new(wait: Duration) -> Self {
        Self {
            deadline: Instant::now() + wait,
            backoff: Duration::from_millis(10),
            maybe_applied: false,
        }
    }

    /// After a failed attempt: `Ok(())` once it is time to try again, or the
    /// error to give the caller.
    pub(crate) async fn after(
        &mut self,
        failure: Failure,
        retry: Retry,
    ) -> Result<(), EngineError> {
        let again = match failure {
            Failure::NotApplied(_) => true,
            Failure::Unknown(_) => retry == Retry::Always,
            Failure::Fatal(_) | Failure::Engine(_) => false,
        };
        if !again || Instant::now() + self.backoff >= self.deadline {
            return Err(failure.into_engine());
        }
        tracing::debug!(error = %failure, "retrying a Redis operation");
        if matches!(failure, Failure::Unknown(_)) {
            self.maybe_applied = true;
        }
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(Duration::from_millis(500));
        Ok(())
    }
}

/// Runs `attempt` until it succeeds or [`Attempts`] gives up.
pub(crate) async fn retrying<'s, T, F>(
    wait: Duration,
    retry: Retry,
    mut attempt: F,
) -> Result<T, EngineError>
where
    F: FnMut(bool) -> BoxFuture<'s, Result<T, Failure>>,
{
    let mut attempts = Attempts::new(wait);
    loop {
        match attempt(attempts.maybe_applied).await {
            Ok(value) => return Ok(value),
            Err(failure) => attempts.after(failure, retry).await?,
        }
    }
}
