//! The fire plan: what one scheduler tick does with one schedule, decided
//! without I/O.
//!
//! A tick reads the schedule, the last due time it accounted for and the
//! state of the previous fire's task, and gets back the due times to submit,
//! the due times to skip (with why), the new last due time to store, and
//! when the schedule is next due. The store then moves its cursor from the
//! old last due time to the new one and submits each fire with its
//! idempotency key in one atomic step, so ticks on many nodes fire each due
//! time once.
//!
//! The missed due times of a tick are those after the last one accounted for
//! (or, for a schedule never fired, from its creation) up to now. In order:
//!
//! 1. past `end_ms` by more than the grace: all skipped, `ended`;
//! 2. paused: all skipped, `paused`;
//! 3. the catch-up policy picks which to submit. The latest missed due time
//!    is *on time* when at most the grace late; an on-time due time is
//!    submitted under every policy. Older ones are `backfilled`;
//! 4. the overlap policy, decided once against the previous fire's task:
//!    if it blocks, every fire the catch-up policy picked is skipped.

use crate::due::Timing;
use crate::model::{CatchUp, Overlap};
use crate::valid::ValidSchedule;

/// Most due times a skipped run counts one by one (cron patterns only;
/// intervals are counted exactly): a schedule every second left for a year
/// should not make one tick walk 31 million due times.
pub const MAX_COUNTED: u64 = 100_000;

/// The state of the task the previous fire submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunState {
    /// Waiting to be claimed, including a retry waiting out its backoff.
    Pending,
    /// Claimed by a worker.
    Running,
    /// Succeeded, dead or cancelled.
    Finished,
    /// No longer there (pruned or removed).
    Unknown,
}

/// One tick's view of the world, besides the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// Now, in ms since the Unix epoch.
    pub now_ms: i64,
    /// The last due time a previous tick accounted for (the previous plan's
    /// [`Plan::last_due_ms`]); `None` for a schedule never fired.
    pub last_fired_due_ms: Option<i64>,
    /// The state of the previous fire's task; `None` if there was none.
    pub previous_run: Option<RunState>,
    /// When the schedule was created: a schedule never fired starts here,
    /// not at its first due time ever.
    pub created_at_ms: i64,
    /// How late a due time may be and still count as on time, in ms:
    /// typically the tick period.
    pub grace_ms: u64,
}

/// A due time to submit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fire {
    /// The logical time of the fire, in ms since the Unix epoch.
    pub due_ms: i64,
    /// True when this is not the latest missed due time: a catch-up run.
    pub backfilled: bool,
}

/// Why due times were not submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// `catch_up: skip` or `latest` left it out.
    CatchUpSkip,
    /// Older than `catch_up: all`'s `window_ms`.
    CatchUpWindow,
    /// Beyond `catch_up: all`'s `max` newest.
    CatchUpMax,
    /// `overlap: skip_if_pending` and the previous task was pending.
    OverlapPending,
    /// `overlap: skip_if_running` and the previous task was running.
    OverlapRunning,
    /// `overlap: skip_if_unfinished` and the previous task was pending or running.
    OverlapUnfinished,
    /// The schedule is paused.
    Paused,
    /// The schedule's `end_ms` has passed.
    Ended,
}

impl SkipReason {
    /// The stable name, as a metric label (`rdq_schedule_skipped_total{reason}`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CatchUpSkip => "catch_up_skip",
            Self::CatchUpWindow => "catch_up_window",
            Self::CatchUpMax => "catch_up_max",
            Self::OverlapPending => "overlap_pending",
            Self::OverlapRunning => "overlap_running",
            Self::OverlapUnfinished => "overlap_unfinished",
            Self::Paused => "paused",
            Self::Ended => "ended",
        }
    }
}

/// Consecutive due times skipped for one reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Skipped {
    /// Why.
    pub reason: SkipReason,
    /// The oldest due time of the run.
    pub first_due_ms: i64,
    /// The newest due time of the run.
    pub last_due_ms: i64,
    /// How many due times the run holds; for a cron pattern at most [`MAX_COUNTED`].
    pub count: u64,
}

/// What one tick does with one schedule.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// The fires to submit, oldest first.
    pub submit: Vec<Fire>,
    /// The runs of due times not submitted, oldest first.
    pub skipped: Vec<Skipped>,
    /// The last due time this plan accounts for, submitted or skipped: the
    /// next tick's `last_fired_due_ms`. Unchanged when nothing was due.
    pub last_due_ms: Option<i64>,
    /// The first due time after now (and after `last_due_ms`), if any: when
    /// to tick this schedule next. Given while paused, too.
    pub next_due_ms: Option<i64>,
}

/// Decides one tick for one schedule (module docs).
pub fn plan(schedule: &ValidSchedule, tick: &Tick) -> Plan {
    let timing = schedule.timing();
    let rules = schedule.schedule();
    // Exclusive: a due time at the creation instant itself is due.
    let lower = tick
        .last_fired_due_ms
        .unwrap_or_else(|| tick.created_at_ms.saturating_sub(1));
    let mut plan = Plan {
        last_due_ms: tick.last_fired_due_ms,
        next_due_ms: timing.next_due_after(tick.now_ms.max(lower)),
        ..Plan::default()
    };
    let Some(latest) = timing
        .last_due_at_or_before(tick.now_ms)
        .filter(|&due| due > lower)
    else {
        return plan;
    };
    plan.last_due_ms = Some(latest);
    let missed = Missed {
        timing,
        lower,
        latest,
    };
    let grace = i64::try_from(tick.grace_ms).unwrap_or(i64::MAX);
    let on_time = tick.now_ms.saturating_sub(latest) <= grace;

    let ended = rules
        .end_ms
        .is_some_and(|end| tick.now_ms.saturating_sub(end) > grace);
    if ended {
        plan.skipped
            .extend(missed.run(SkipReason::Ended, lower, latest));
        return plan;
    }
    if rules.paused {
        plan.skipped
            .extend(missed.run(SkipReason::Paused, lower, latest));
        return plan;
    }

    // The oldest due time submitted; every due time after it up to
    // `latest` is submitted too.
    let before = |due: i64| timing.last_due_at_or_before(due.saturating_sub(1));
    let oldest_kept = match rules.catch_up {
        CatchUp::Skip | CatchUp::Latest => {
            let keep = on_time || rules.catch_up == CatchUp::Latest;
            let skip_through = if keep { before(latest) } else { Some(latest) };
            if let Some(through) = skip_through {
                plan.skipped
                    .extend(missed.run(SkipReason::CatchUpSkip, lower, through));
            }
            keep.then_some(latest)
        }
        CatchUp::All { max, window_ms } => {
            let window = i64::try_from(window_ms).unwrap_or(i64::MAX);
            let window_start = tick.now_ms.saturating_sub(window);
            if on_time || latest >= window_start {
                let oldest = missed.newest(max, window_start);
                if let Some(through) = before(oldest) {
                    // Older than the window, then in it but beyond `max`.
                    let outside = window_start.saturating_sub(1);
                    plan.skipped.extend(missed.run(
                        SkipReason::CatchUpWindow,
                        lower,
                        through.min(outside),
                    ));
                    plan.skipped
                        .extend(missed.run(SkipReason::CatchUpMax, outside, through));
                }
                Some(oldest)
            } else {
                plan.skipped
                    .extend(missed.run(SkipReason::CatchUpWindow, lower, latest));
                None
            }
        }
    };
    let fires: Vec<Fire> = oldest_kept.map_or_else(Vec::new, |oldest| {
        timing
            .due_between(oldest.saturating_sub(1), latest, usize::MAX)
            .into_iter()
            .map(|due_ms| Fire {
                due_ms,
                backfilled: due_ms != latest,
            })
            .collect()
    });

    match overlap_blocks(rules.overlap, tick.previous_run) {
        Some(reason) if !fires.is_empty() => {
            let first = fires.first().map_or(latest, |f| f.due_ms);
            plan.skipped.push(Skipped {
                reason,
                first_due_ms: first,
                last_due_ms: latest,
                count: u64::try_from(fires.len()).unwrap_or(u64::MAX),
            });
        }
        _ => plan.submit = fires,
    }
    plan
}

/// The reason the overlap policy refuses a fire, if it does.
fn overlap_blocks(overlap: Overlap, previous: Option<RunState>) -> Option<SkipReason> {
    match (overlap, previous?) {
        (Overlap::SkipIfPending, RunState::Pending) => Some(SkipReason::OverlapPending),
        (Overlap::SkipIfRunning, RunState::Running) => Some(SkipReason::OverlapRunning),
        (Overlap::SkipIfUnfinished, RunState::Pending | RunState::Running) => {
            Some(SkipReason::OverlapUnfinished)
        }
        _ => None,
    }
}

/// The due times a tick missed: `(lower, latest]`.
struct Missed<'a> {
    timing: &'a Timing,
    lower: i64,
    latest: i64,
}

impl Missed<'_> {
    /// The run of missed due times in `(after, through]`, if it holds any.
    fn run(&self, reason: SkipReason, after: i64, through: i64) -> Option<Skipped> {
        let after = after.max(self.lower);
        let through = through.min(self.latest);
        let first = self.timing.next_due_after(after)?;
        let last = self.timing.last_due_at_or_before(through)?;
        (first <= last).then(|| Skipped {
            reason,
            first_due_ms: first,
            last_due_ms: last,
            count: self.timing.count_between(after, through, MAX_COUNTED),
        })
    }

    /// Walks back from the latest missed due time (submitted: the caller
    /// checked it is on time or in the window) over at most `max` due times
    /// at or after `window_start`; the oldest of them.
    fn newest(&self, max: u32, window_start: i64) -> i64 {
        let mut kept = 1;
        let mut oldest = self.latest;
        while kept < max {
            match self.timing.last_due_at_or_before(oldest.saturating_sub(1)) {
                Some(due) if due > self.lower && due >= window_start => {
                    kept += 1;
                    oldest = due;
                }
                _ => break,
            }
        }
        oldest
    }
}
