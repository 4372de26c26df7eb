//! What each source is doing, as the API, the CLI, the dashboard and the
//! metrics show it: its state, lag, rate, counters and last error.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use serde::Serialize;

use crate::config::Kind;

/// How a source stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceState {
    /// Connecting, or reading its cursors.
    Starting,
    /// Reading records.
    Running,
    /// Not reading: its queue is above the high-water mark.
    Paused,
    /// The last step failed; it tries again after a wait.
    Retrying,
    /// Stopped (the process is shutting down).
    Stopped,
}

impl SourceState {
    /// The state's name, as status and logs say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Retrying => "retrying",
            Self::Stopped => "stopped",
        }
    }
}

/// One partition's standing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionStatus {
    /// The partition (a Kafka partition's number, a stream's name).
    pub partition: String,
    /// The next position to ingest, as last known.
    pub cursor: Option<u64>,
    /// Records behind the newest, as last measured.
    pub lag: Option<u64>,
}

/// A source's status.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceStatus {
    /// The source's name.
    pub name: String,
    /// `kafka`, `nats` or `sqs`.
    pub kind: Kind,
    /// The queue its tasks go to.
    pub queue: String,
    /// How it stands.
    pub state: SourceState,
    /// True while it does not read because its queue is above the
    /// high-water mark.
    pub paused: bool,
    /// Records in the source not yet ingested (Kafka: the partitions'
    /// newest offsets minus their cursors; JetStream: the consumer's
    /// pending count; SQS: the queue's approximate message count), as last
    /// measured; `None` until measured.
    pub lag: Option<u64>,
    /// Records that became PENDING tasks since start.
    pub ingested: u64,
    /// Records that became DEAD tasks (`UNDECODABLE_SOURCE`) since start.
    pub dead: u64,
    /// Records skipped because their task was already stored (behind the
    /// cursor, or an idempotency key seen before) since start.
    pub duplicates: u64,
    /// Records per second over the last few seconds.
    pub rate: f64,
    /// The last error, if the last step failed or one failed before.
    pub last_error: Option<String>,
    /// When the last error happened (ms since the Unix epoch).
    pub last_error_at_ms: Option<i64>,
    /// True when the store keeps this source's cursors (exactly once even
    /// after idempotency keys are pruned).
    pub cursors_in_store: bool,
    /// Per partition, where known.
    pub partitions: Vec<PartitionStatus>,
}

/// Every source's status, shared between the sources and their readers.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    inner: Arc<Mutex<BTreeMap<String, Cell>>>,
}

#[derive(Debug)]
struct Cell {
    status: SourceStatus,
    /// Ingested counts at recent instants, for the rate.
    window: Vec<(Instant, u64)>,
}

impl Registry {
    fn cells(&self) -> MutexGuard<'_, BTreeMap<String, Cell>> {
        // A panic cannot leave a status half-written: every change is a
        // plain field assignment.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a source as starting ([`crate::start`] registers each
    /// source it starts; a front end's tests can register one by hand).
    pub fn add(&self, name: &str, kind: Kind, queue: &str) {
        self.cells().insert(
            name.to_owned(),
            Cell {
                status: SourceStatus {
                    name: name.to_owned(),
                    kind,
                    queue: queue.to_owned(),
                    state: SourceState::Starting,
                    paused: false,
                    lag: None,
                    ingested: 0,
                    dead: 0,
                    duplicates: 0,
                    rate: 0.0,
                    last_error: None,
                    last_error_at_ms: None,
                    cursors_in_store: false,
                    partitions: Vec::new(),
                },
                window: Vec::new(),
            },
        );
    }

    /// Changes a source's status (nothing when `name` is not registered).
    pub fn update(&self, name: &str, change: impl FnOnce(&mut SourceStatus)) {
        if let Some(cell) = self.cells().get_mut(name) {
            change(&mut cell.status);
        }
    }

    /// Records whether back-pressure holds the source: `paused` and the
    /// state `paused` or `running` (which also ends a `retrying` once the
    /// source reads again).
    pub(crate) fn set_paused(&self, name: &str, paused: bool) {
        self.update(name, |s| {
            s.paused = paused;
            s.state = if paused {
                SourceState::Paused
            } else {
                SourceState::Running
            };
        });
    }

    /// Counts a step's records and refreshes the rate.
    pub(crate) fn count(&self, name: &str, ingested: u64, dead: u64, duplicates: u64) {
        if let Some(cell) = self.cells().get_mut(name) {
            let s = &mut cell.status;
            s.ingested += ingested;
            s.dead += dead;
            s.duplicates += duplicates;
            let total = s.ingested + s.dead;
            let now = Instant::now();
            cell.window.push((now, total));
            cell.refresh_rate(now);
        }
    }

    /// Records an error: the source is retrying, and this is its last
    /// error, at `at_ms` (ms since the Unix epoch).
    pub fn error(&self, name: &str, error: &str, at_ms: i64) {
        self.update(name, |s| {
            s.state = SourceState::Retrying;
            s.last_error = Some(error.to_owned());
            s.last_error_at_ms = Some(at_ms);
        });
    }

    /// Sets one partition's cursor and lag.
    pub(crate) fn partition(
        &self,
        name: &str,
        partition: &str,
        cursor: Option<u64>,
        lag: Option<u64>,
    ) {
        self.update(name, |s| {
            match s.partitions.iter_mut().find(|p| p.partition == partition) {
                Some(p) => {
                    if cursor.is_some() {
                        p.cursor = cursor;
                    }
                    if lag.is_some() {
                        p.lag = lag;
                    }
                }
                None => {
                    s.partitions.push(PartitionStatus {
                        partition: partition.to_owned(),
                        cursor,
                        lag,
                    });
                    s.partitions.sort_by(|a, b| {
                        (a.partition.len(), &a.partition).cmp(&(b.partition.len(), &b.partition))
                    });
                }
            }
            if s.partitions.iter().any(|p| p.lag.is_some()) {
                s.lag = Some(s.partitions.iter().filter_map(|p| p.lag).sum());
            }
        });
    }

    /// Forgets one partition (it went to another bridge).
    pub(crate) fn drop_partition(&self, name: &str, partition: &str) {
        self.update(name, |s| {
            s.partitions.retain(|p| p.partition != partition);
            s.lag = s
                .partitions
                .iter()
                .any(|p| p.lag.is_some())
                .then(|| s.partitions.iter().filter_map(|p| p.lag).sum());
        });
    }

    /// Every source's status, by name (the rate as of now: it falls to
    /// zero while no records come).
    pub fn all(&self) -> Vec<SourceStatus> {
        let now = Instant::now();
        self.cells()
            .values_mut()
            .map(|c| {
                c.refresh_rate(now);
                c.status.clone()
            })
            .collect()
    }

    /// One source's status (the rate as of now).
    pub fn get(&self, name: &str) -> Option<SourceStatus> {
        self.cells().get_mut(name).map(|c| {
            c.refresh_rate(Instant::now());
            c.status.clone()
        })
    }
}

/// The window a source's rate is measured over, in seconds.
const RATE_WINDOW_S: f64 = 10.0;

impl Cell {
    /// Records per second from the oldest count in the window to `now`;
    /// zero once no count is left in the window.
    fn refresh_rate(&mut self, now: Instant) {
        self.window
            .retain(|(at, _)| now.saturating_duration_since(*at).as_secs_f64() <= RATE_WINDOW_S);
        let total = self.status.ingested + self.status.dead;
        self.status.rate = match self.window.first() {
            Some(&(first_at, first)) => {
                let secs = now.saturating_duration_since(first_at).as_secs_f64();
                if secs > 0.0 {
                    total.saturating_sub(first) as f64 / secs
                } else {
                    0.0
                }
            }
            None => 0.0,
        };
    }
}
