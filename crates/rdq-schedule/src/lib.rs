//! Periodic schedules for rdq, as pure functions: the model, its validation,
//! due times across time zones, and the plan of one scheduler tick.
//!
//! Nothing here does I/O or reads a clock. A store-backed service runs a
//! tick on every node; each tick calls [`plan`], then, in one atomic step,
//! moves the schedule's stored cursor to [`Plan::last_due_ms`] and submits
//! each [`Fire`] with its [`idempotency_key`] and [`fire_headers`]. Every
//! node computes the same due times, so no leader is needed and a due time
//! fires once.
//!
//! # Due times
//!
//! A spec is a cron pattern (5 fields, or 6 with leading seconds) read on
//! the wall clock of the schedule's zone, or a fixed interval of `every_ms`
//! milliseconds anchored at `start_ms` (the Unix epoch without one). Due
//! times lie within `[start_ms, end_ms]`, both inclusive.
//!
//! # Daylight saving time
//!
//! Cron patterns match wall-clock times; each matching wall time fires once,
//! at one instant:
//!
//! - a wall time the clock skips (the spring-forward gap, such as 02:30 on the
//!   day New York moves from 02:00 to 03:00) fires at the first instant after
//!   the gap (03:00 local); several wall times of one gap, and a wall time
//!   matching right at its end, are that one instant and fire once;
//! - a wall time the clock shows twice (the fall-back hour) fires once, at its
//!   first occurrence; the repeat of the hour fires nothing.
//!
//! The rules hold for any shift (Lord Howe Island's 30 minutes, a zone
//! changing its standard offset). Interval specs are absolute durations and
//! ignore zones: `every_ms: 3600000` fires every hour of elapsed time
//! through a DST change.
//!
//! The IANA time zone database is compiled in (jiff's bundled copy), so the
//! results do not depend on the machine's `/usr/share/zoneinfo`.

mod due;
mod error;
mod fire;
mod model;
mod plan;
mod valid;
mod wall;

pub use due::{MAX_CRON_LEN, MAX_INTERVAL_MS, Timing};
pub use error::ScheduleError;
pub use fire::{
    BACKFILLED_HEADER, IDEMPOTENCY_KEY_PREFIX, MAX_IDEMPOTENCY_KEY_LEN, MAX_NAME_IN_KEY,
    SCHEDULE_DUE_HEADER, SCHEDULE_HEADER, fire_headers, idempotency_key,
};
pub use model::{
    CatchUp, DEFAULT_CONTENT_TYPE, DEFAULT_TIME_ZONE, Overlap, Schedule, Spec, TaskTemplate,
};
pub use plan::{Fire, MAX_COUNTED, Plan, RunState, SkipReason, Skipped, Tick, plan};
pub use valid::{MAX_CATCH_UP_FIRES, MAX_CATCH_UP_WINDOW_MS, MAX_CONTENT_TYPE_LEN, ValidSchedule};
