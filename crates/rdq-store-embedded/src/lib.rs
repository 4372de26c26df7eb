//! rdq's embedded store: the zero-setup default, SQLite in one data directory.
//!
//! [`EmbeddedStore`] keeps every task in `DIR/rdq.db`, an SQLite database in
//! WAL mode, and answers a submit or settle only once the WAL holding it has
//! been fsynced, so one that returned `Ok` survives `kill -9` and power loss
//! (a claim survives `kill -9`; see `docs/stores/embedded.md`). Each row holds
//! the task's canonical envelope bytes (the source of truth, returned byte for
//! byte, unknown fields included) beside the columns its indexes need.
//!
//! All writes go to one writer thread that commits them in groups, and a
//! second thread fsyncs each commit while the writer runs the next group:
//! whatever requests are waiting share one transaction and one fsync, which is how the
//! store takes tens of thousands of writes a second on an ordinary disk, and
//! why claims are exclusive without any locking protocol. Reads use their own
//! connections and never wait for the writer. A file that is not an rdq store
//! is refused with `CORRUPT_STORE` and left untouched.
//!
//! See `docs/stores/embedded.md` for the layout, the schema and tuning.

#![forbid(unsafe_code)]

mod cache;
mod columns;
mod error;
mod flow;
mod integrity;
mod reader;
mod schedules;
mod schema;
mod sources;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rdq_engine::machine::LeaseToken;
use rdq_engine::{
    Cancel, CancelRequest, ClaimRequest, ConfigStore, EngineError, FlowPolicy, FlowStatus,
    LeasedUpdate, ListQuery, NewTask, Page, Pruning, QueueConfig, QueueCounts, Redrive,
    RedriveRequest, Removal, Store, Submitted, TaskCounts, TaskListing, TaskLookup,
    WorkCapabilities,
};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};
use tokio::sync::oneshot;

use crate::cache::{ConfigCache, LeaseCache, PendingCache};
use crate::reader::Readers;
use crate::schema::Tuning;
pub use crate::schema::{APPLICATION_ID, SCHEMA_VERSION};
use crate::writer::{Encoded, Job, Writer};

/// Name of the database file inside the data directory.
pub const DB_FILE_NAME: &str = "rdq.db";

/// Tuning for [`EmbeddedStore::open_with`]. The defaults suit most uses;
/// durability is not tunable (every acknowledged write is fsynced).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EmbeddedOptions {
    /// Most work one group commit takes (tasks of submits and settles, tasks
    /// asked for by claims, one per other request); default 4096. Larger
    /// groups amortise the fsync further but make each commit longer.
    pub max_group: usize,
    /// Idle read connections kept open for reuse; default 4.
    pub read_connections: usize,
    /// SQLite page cache per connection, in KiB; default 2 MiB.
    pub cache_kib: u32,
    /// How long a write waits for a lock held by another process using the
    /// same data directory before failing with `STORE_UNAVAILABLE`; default 5 s.
    pub busy_timeout: Duration,
    /// Time the integrity check at open (`PRAGMA quick_check`) may take;
    /// default 2 s. A damaged file is refused with `CORRUPT_STORE`; a check
    /// that runs out of time lets the store open and logs a warning (run
    /// [`EmbeddedStore::check_files`] for a full check). Zero skips it.
    pub open_check_budget: Duration,
    /// The writer thread's scheduling priority as a nice value (lower runs
    /// first); default -10. Every write waits for that one thread, so on a
    /// busy machine it should not wait for a core behind the threads that
    /// feed it. Taken only where the process may raise priority (root or
    /// `CAP_SYS_NICE` on Linux); elsewhere the writer keeps the process's
    /// priority. 0 leaves it as it is.
    pub writer_nice: i32,
    /// Most PENDING envelopes kept in memory after this process wrote them,
    /// so that claiming them decodes nothing; default 32,768. An entry
    /// holds the envelope's bytes and the decoded envelope (1.5–2 KiB for a
    /// small payload: about 60 MiB when full); 0 keeps none. See
    /// `docs/stores/embedded.md`, "Group commit".
    pub claim_cache: usize,
    /// SQLite page size, in bytes, of a store this open creates; default
    /// 16 KiB. A power of two from 512 to 65,536; a store that already
    /// exists keeps the page size it was created with. Each commit writes
    /// every page it changed to the write-ahead log, and the tasks a group
    /// claims or settles lie side by side, so larger pages mean fewer,
    /// larger writes per commit (`docs/stores/embedded.md`, "Tuning").
    pub page_size: u32,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        Self {
            max_group: 4096,
            read_connections: 4,
            cache_kib: 2 * 1024,
            busy_timeout: Duration::from_secs(5),
            open_check_budget: Duration::from_secs(2),
            writer_nice: -10,
            claim_cache: 32_768,
            page_size: 16 * 1024,
        }
    }
}

/// The embedded SQLite store. Cheap to clone: clones share one writer thread
/// and one pool of read connections, which close when the last clone drops.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

struct Inner {
    path: PathBuf,
    /// Read once at open; it never changes (see `schema::ensure_lease_secret`).
    lease_secret: [u8; 32],
    // Fields drop in order. Readers close before the writer, so the writer's
    // connection is the last one and checkpoints the WAL into the database
    // as it closes; a temporary directory goes only after both.
    readers: Readers,
    writer: Writer,
    leases: LeaseCache,
    pending: PendingCache,
    configs: ConfigCache,
    _temporary: Option<TemporaryDir>,
}

/// A directory removed when dropped: the home of [`EmbeddedStore::open_temporary`].
struct TemporaryDir(PathBuf);

impl TemporaryDir {
    fn create() -> Result<Self, EngineError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        let mut last_error = None;
        for _ in 0..16 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = format!(
                "rdq-store-{}-{}-{nanos:09}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            let dir = base.join(name);
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok(Self(dir)),
                Err(e) => last_error = Some(e),
            }
        }
        Err(EngineError::Unavailable(format!(
            "cannot create a temporary directory in {}: {}",
            base.display(),
            last_error.map_or_else(|| "unknown error".to_owned(), |e| e.to_string())
        )))
    }
}

impl Drop for TemporaryDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!(dir = %self.0.display(), error = %e, "cannot remove a temporary store");
        }
    }
}

impl EmbeddedStore {
    /// Opens the store in directory `dir`, creating the directory and
    /// `rdq.db` if absent, with default [`EmbeddedOptions`].
    ///
    /// Refuses with `CORRUPT_STORE` (and changes nothing) when `rdq.db` is not
    /// an rdq store: bytes that are not SQLite, another program's SQLite
    /// database, or a schema version newer than this build. Fails with
    /// `STORE_UNAVAILABLE` when the directory cannot be created or the file
    /// cannot be opened.
    ///
    /// Opening blocks the calling thread: usually for milliseconds, longer
    /// after a crash while SQLite recovers a large write-ahead log.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, EngineError> {
        Self::open_with(dir, EmbeddedOptions::default())
    }

    /// [`EmbeddedStore::open`] with explicit tuning.
    pub fn open_with(dir: impl AsRef<Path>, options: EmbeddedOptions) -> Result<Self, EngineError> {
        Self::open_in(dir.as_ref(), options, None)
    }

    /// A store in a fresh directory under the system's temporary directory,
    /// removed with everything in it when the last clone drops: for tests,
    /// benchmarks and throwaway runs.
    pub fn open_temporary() -> Result<Self, EngineError> {
        let dir = TemporaryDir::create()?;
        let path = dir.0.clone();
        Self::open_in(&path, EmbeddedOptions::default(), Some(dir))
    }

    fn open_in(
        dir: &Path,
        options: EmbeddedOptions,
        temporary: Option<TemporaryDir>,
    ) -> Result<Self, EngineError> {
        if !(512..=65_536).contains(&options.page_size) || !options.page_size.is_power_of_two() {
            return Err(EngineError::InvalidArgument(format!(
                "page_size must be a power of two from 512 to 65536, not {}",
                options.page_size
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| {
            EngineError::Unavailable(format!(
                "cannot create the data directory {}: {e}",
                dir.display()
            ))
        })?;
        let path = dir.join(DB_FILE_NAME);
        let tuning = Tuning {
            page_size: options.page_size,
            cache_kib: options.cache_kib,
            busy_timeout: options.busy_timeout,
            check_budget: options.open_check_budget,
        };
        let conn = schema::open_writer(&path, tuning)?;
        let lease_secret = schema::lease_secret(&conn, &path)?;
        // Make the directory entries of a new store durable too (the
        // directory in its parent, `rdq.db` in the directory).
        if let Some(parent) = dir.parent() {
            sync_dir(parent);
        }
        sync_dir(dir);
        let readers = Readers::new(path.clone(), tuning, options.read_connections)?;
        let wal = dir.join(format!("{DB_FILE_NAME}-wal"));
        let writer = Writer::start(
            conn,
            writer::wal_sync(wal),
            options.max_group,
            options.writer_nice,
        )?;
        tracing::debug!(path = %path.display(), "embedded store open");
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                lease_secret,
                readers,
                writer,
                leases: LeaseCache::default(),
                pending: PendingCache::new(options.claim_cache),
                configs: ConfigCache::default(),
                _temporary: temporary,
            }),
        })
    }

    /// The database file, `DIR/rdq.db`.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Checks the whole store against itself in one snapshot: SQLite's
    /// `quick_check`, every envelope decodes and agrees with its row's
    /// columns, and the per-queue counts match the tasks. Reads every row, so
    /// it is for tools and tests, not for the hot path. Returns
    /// `CORRUPT_STORE` listing (up to 20 of) the problems found.
    pub async fn verify(&self) -> Result<(), EngineError> {
        let problems = self.read_blocking(reader::verify).await?;
        if problems.is_empty() {
            Ok(())
        } else {
            Err(EngineError::CorruptStore(format!(
                "{} failed verification: {}",
                self.inner.path.display(),
                problems.join("; ")
            )))
        }
    }

    /// SQLite's full `PRAGMA integrity_check` of the store in `dir`, without
    /// opening it as a store (so it also runs on a file that open refuses):
    /// `CORRUPT_STORE` listing (up to 20 of) the damaged pages and indexes.
    /// Reads the whole file; for `rdq check` and operators, not the hot path.
    /// [`EmbeddedStore::verify`] then checks the tasks themselves.
    pub fn check_files(dir: impl AsRef<Path>) -> Result<(), EngineError> {
        let path = dir.as_ref().join(DB_FILE_NAME);
        if !path.exists() {
            return Err(EngineError::InvalidArgument(format!(
                "{} does not exist",
                path.display()
            )));
        }
        integrity::full_check(&path)
    }

    /// Runs a potentially long read off the async executor when there is one.
    async fn read_blocking<T, F>(&self, f: F) -> Result<T, EngineError>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> Result<T, EngineError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle
                .spawn_blocking(move || inner.readers.with(f))
                .await
                .unwrap_or_else(|e| {
                    Err(EngineError::Unavailable(format!(
                        "a read of the embedded store failed: {e}"
                    )))
                }),
            Err(_) => inner.readers.with(f),
        }
    }

    /// Sends one job to the writer and waits for its answer.
    async fn write<T>(
        &self,
        job: impl FnOnce(oneshot::Sender<T>) -> Job,
    ) -> Result<T, EngineError> {
        let (tx, rx) = oneshot::channel();
        self.inner.writer.send(job(tx))?;
        rx.await.map_err(|_| {
            EngineError::Unavailable("the embedded store's writer stopped before answering".into())
        })
    }
}

/// Fsyncs a directory so that entries created in it survive power loss. Best
/// effort: not every platform can open or sync a directory.
fn sync_dir(dir: &Path) {
    let synced = std::fs::File::open(dir).and_then(|d| d.sync_all());
    if let Err(e) = synced {
        tracing::debug!(dir = %dir.display(), error = %e, "cannot fsync a directory");
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    fn capabilities(&self) -> WorkCapabilities {
        WorkCapabilities {
            idempotent_submit: true,
            claim_max_in_flight: true,
            claim_flow: true,
            ends_once: true,
            unique: true,
        }
    }

    async fn submit(&self, tasks: Vec<NewTask>) -> Vec<Result<Submitted, EngineError>> {
        let n = tasks.len();
        if n == 0 {
            return Vec::new();
        }
        let tasks: Vec<_> = tasks.into_iter().map(Encoded::task).collect();
        let written =
            (self.inner.pending).copies(tasks.iter().map(|t| (&t.bytes, &t.item.envelope)));
        let results = self
            .write(|reply| Job::Submit { tasks, reply })
            .await
            .unwrap_or_else(|e| vec![Err(e); n]);
        self.inner.pending.keep(
            results
                .iter()
                .zip(written)
                .filter_map(|(r, kept)| kept.filter(|_| matches!(r, Ok(Submitted::Created(_))))),
        );
        results
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Envelope>, EngineError> {
        request.refuse_unsupported(self.capabilities())?;
        let ClaimRequest {
            ref queue,
            max,
            lease_ms,
            now,
            max_in_flight,
            ref flow,
            ..
        } = *request;
        if max == 0 {
            return Ok(Vec::new());
        }
        let rows = self
            .write(|reply| Job::Claim {
                queue: queue.to_owned(),
                max,
                max_in_flight,
                flow: flow.clone().map(Box::new),
                lease_ms,
                now,
                reply,
            })
            .await??;
        // The writer took the rows; the envelopes are finished here, off its
        // thread (see `columns::stored`).
        let seqs: Vec<i64> = rows.iter().map(|row| row.seq).collect();
        let claimed = rows
            .into_iter()
            .map(|row| {
                let cached = row
                    .id
                    .and_then(|id| self.inner.pending.take(id, &row.bytes));
                let pending = match cached {
                    Some(env) => env,
                    None => Envelope::decode(&row.bytes)
                        .map_err(|e| error::undecodable("a claimed task", &e))?,
                };
                rdq_engine::machine::replay_claim(pending, row.claimed_at, row.until)
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.inner.leases.keep(claimed.iter().zip(seqs));
        Ok(claimed)
    }

    async fn leased(&self, leases: &[(TaskId, LeaseToken)]) -> Vec<Result<Envelope, EngineError>> {
        let mut out = Vec::with_capacity(leases.len());
        for &(id, token) in leases {
            if let Some(env) = self.inner.leases.take(id, token) {
                out.push(Ok(env));
                continue;
            }
            out.push(rdq_engine::store::under_lease(
                self.get(id).await,
                id,
                token,
            ));
        }
        out
    }

    async fn settle(&self, updates: Vec<LeasedUpdate>) -> Vec<Result<(), EngineError>> {
        let n = updates.len();
        if n == 0 {
            return Vec::new();
        }
        let seqs = self
            .inner
            .leases
            .forget(updates.iter().map(|u| u.envelope.id));
        let updates: Vec<_> = updates.into_iter().map(Encoded::update).collect();
        let written =
            (self.inner.pending).copies(updates.iter().map(|u| (&u.bytes, &u.item.envelope)));
        let results = self
            .write(|reply| Job::Settle {
                updates,
                seqs,
                reply,
            })
            .await
            .unwrap_or_else(|e| vec![Err(e); n]);
        self.inner.pending.keep(
            results
                .iter()
                .zip(written)
                .filter_map(|(r, kept)| r.as_ref().ok().and(kept)),
        );
        results
    }

    async fn throttle(
        &self,
        queue: &str,
        key: Option<&str>,
        until: Timestamp,
    ) -> Result<(), EngineError> {
        self.write(|reply| Job::Throttle {
            queue: queue.to_owned(),
            key: key.map(str::to_owned),
            until,
            reply,
        })
        .await?
    }

    async fn flow_status(
        &self,
        queue: &str,
        flow: &FlowPolicy,
        now: Timestamp,
    ) -> Result<FlowStatus, EngineError> {
        let (queue, flow) = (queue.to_owned(), flow.clone());
        self.read_blocking(move |conn| reader::flow_status(conn, &queue, &flow, now))
            .await
    }

    async fn expired_leases(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Envelope>, EngineError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.read_blocking(move |conn| reader::expired_leases(conn, now, limit))
            .await
    }

    async fn lease_secret(&self) -> Result<Option<[u8; 32]>, EngineError> {
        Ok(Some(self.inner.lease_secret))
    }

    /// Ready while the writer thread runs and its last group committed;
    /// after a failed group, ready again once a probe write commits.
    async fn ready(&self) -> Result<(), EngineError> {
        let writer = &self.inner.writer;
        if !writer.is_alive() {
            return Err(EngineError::Unavailable(
                "the embedded store's writer thread has stopped".into(),
            ));
        }
        if writer.health().last_failure().is_none() {
            return Ok(());
        }
        self.write(|reply| Job::Probe { reply }).await?
    }

    rdq_engine::offer_extensions!(
        TaskLookup,
        TaskListing,
        TaskCounts,
        Redrive,
        Cancel,
        Removal,
        Pruning,
        ConfigStore,
        Schedules,
        SourceCursors
    );
}

#[async_trait]
impl TaskLookup for EmbeddedStore {
    async fn get(&self, id: TaskId) -> Result<Envelope, EngineError> {
        self.inner.readers.with(|conn| reader::get(conn, id))
    }
}

#[async_trait]
impl TaskListing for EmbeddedStore {
    async fn list(&self, query: &ListQuery) -> Result<Page, EngineError> {
        let query = query.clone();
        self.read_blocking(move |conn| reader::list(conn, &query))
            .await
    }

    async fn oldest_pending(&self, queue: &str) -> Result<Option<TaskId>, EngineError> {
        let queue = queue.to_owned();
        self.read_blocking(move |conn| reader::oldest_pending(conn, &queue))
            .await
    }

    async fn dead_groups(&self, queue: &str) -> Result<Vec<rdq_engine::DeadGroup>, EngineError> {
        let queue = queue.to_owned();
        self.read_blocking(move |conn| reader::dead_groups(conn, &queue))
            .await
    }
}

#[async_trait]
impl TaskCounts for EmbeddedStore {
    async fn counts(&self) -> Result<Vec<QueueCounts>, EngineError> {
        self.read_blocking(reader::counts).await
    }
}

#[async_trait]
impl Redrive for EmbeddedStore {
    async fn redrive(
        &self,
        request: &RedriveRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError> {
        let request = request.clone();
        self.write(|reply| Job::Redrive {
            request,
            now,
            reply,
        })
        .await?
    }
}

#[async_trait]
impl Cancel for EmbeddedStore {
    async fn cancel_pending(
        &self,
        request: &CancelRequest,
        now: Timestamp,
    ) -> Result<Vec<TaskId>, EngineError> {
        let request = request.clone();
        let cancelled = self
            .write(|reply| Job::Cancel {
                request,
                now,
                reply,
            })
            .await??;
        for &id in &cancelled {
            self.inner.pending.forget(id);
        }
        Ok(cancelled)
    }
}

#[async_trait]
impl Removal for EmbeddedStore {
    async fn purge(&self, queue: &str, status: Status, dry_run: bool) -> Result<u64, EngineError> {
        if status == Status::Pending && !dry_run {
            self.inner.pending.clear();
        }
        if status == Status::InFlight && !dry_run {
            // Entries whose envelope a lease check took are dropped too:
            // their writes find the row by id instead.
            self.inner
                .leases
                .lock()
                .retain(|_, l| l.env.as_ref().is_some_and(|env| env.queue != queue));
        }
        self.write(|reply| Job::Purge {
            queue: queue.to_owned(),
            status,
            dry_run,
            reply,
        })
        .await?
    }

    async fn delete(&self, id: TaskId) -> Result<(), EngineError> {
        self.inner.leases.forget(std::iter::once(id));
        self.inner.pending.forget(id);
        self.write(|reply| Job::Delete { id, reply }).await?
    }
}

#[async_trait]
impl Pruning for EmbeddedStore {
    async fn prune_succeeded(
        &self,
        queue: &str,
        finished_before: Timestamp,
        limit: usize,
    ) -> Result<u64, EngineError> {
        if limit == 0 {
            return Ok(0);
        }
        self.write(|reply| Job::Prune {
            queue: queue.to_owned(),
            before: finished_before,
            limit,
            reply,
        })
        .await?
    }
}

#[async_trait]
impl ConfigStore for EmbeddedStore {
    async fn get_config(&self, queue: &str) -> Result<Option<QueueConfig>, EngineError> {
        self.inner
            .readers
            .with(|conn| reader::get_config(conn, queue, &self.inner.configs))
    }

    async fn put_config(&self, queue: &str, policy: &QueueConfig) -> Result<(), EngineError> {
        let policy = serde_json::to_string(policy).map_err(|e| {
            EngineError::InvalidPolicy(format!("the policy does not serialise: {e}"))
        })?;
        self.write(|reply| Job::PutConfig {
            queue: queue.to_owned(),
            policy,
            reply,
        })
        .await?
    }
}
