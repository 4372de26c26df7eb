//! The Lua scripts every atomic transition runs as, each prefixed with the
//! shared `lua/common.lua` (keys, value layout, index bookkeeping).
//!
//! Each script takes one queue's keys ([`QueueKeys`]) and a batch of work,
//! so a claim of N or a settle of N is one round trip and one atomic step.
//! They are sent by SHA1 (`EVALSHA`) and loaded again if Redis forgot them
//! (a restart, a failover).

use redis::{FromRedisValue, Script, ToRedisArgs};

use crate::conn::Conn;
use crate::error::Failure;
use crate::keys::QueueKeys;

macro_rules! lua {
    ($file:literal) => {
        concat!(include_str!("lua/common.lua"), include_str!($file))
    };
}

/// The first step of unique submits of new ids, sent whole (`EVAL`, a
/// short script without `lua/common.lua`) inside a MULTI after the HSET of
/// their values: by SHA1, a script Redis forgot would fail alone there,
/// and the HSET would stand.
pub(crate) const TAKE: &str = include_str!("lua/take.lua");

/// Every script, loaded once per store.
pub(crate) struct Scripts {
    /// New tasks, with idempotency keys.
    pub(crate) submit: Script,
    /// Due tasks to IN_FLIGHT, in claim order.
    pub(crate) claim: Script,
    /// Due tasks to IN_FLIGHT under flow limits: a snapshot, or a
    /// version-checked commit of a choice made on one.
    pub(crate) flow: Script,
    /// A version-checked write of the flow ledger (throttles).
    pub(crate) flow_put: Script,
    /// Compare-and-swap writes: settles, extensions, reaps, redrives.
    pub(crate) swap: Script,
    /// Removals: delete, purge, prune.
    pub(crate) remove: Script,
    /// Pages by id.
    pub(crate) list: Script,
    /// Lapsed leases.
    pub(crate) expired: Script,
    /// Tasks per status.
    pub(crate) counts: Script,
    /// A unique submit's compare-and-swap.
    pub(crate) unique: Script,
}

impl Default for Scripts {
    fn default() -> Self {
        Self {
            submit: Script::new(lua!("lua/submit.lua")),
            claim: Script::new(lua!("lua/claim.lua")),
            flow: Script::new(lua!("lua/flow.lua")),
            flow_put: Script::new(lua!("lua/flow_put.lua")),
            swap: Script::new(lua!("lua/swap.lua")),
            remove: Script::new(lua!("lua/remove.lua")),
            list: Script::new(lua!("lua/list.lua")),
            expired: Script::new(lua!("lua/expired.lua")),
            counts: Script::new(lua!("lua/counts.lua")),
            unique: Script::new(lua!("lua/unique.lua")),
        }
    }
}

/// Runs `script` on the queue of `keys` with `args`.
pub(crate) async fn run<T, A>(
    conn: &mut Conn,
    script: &Script,
    keys: &QueueKeys,
    args: impl IntoIterator<Item = A>,
) -> Result<T, Failure>
where
    T: FromRedisValue,
    A: ToRedisArgs,
{
    let mut invocation = script.prepare_invoke();
    for key in &keys.all {
        invocation.key(key.as_str());
    }
    for arg in args {
        invocation.arg(arg);
    }
    Ok(invocation.invoke_async(conn).await?)
}
