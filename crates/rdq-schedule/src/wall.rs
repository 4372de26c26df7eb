//! Wall-clock times and the instants they stand for, in one zone.
//!
//! croner searches wall-clock (civil) times only: [`Wall`] hands it jiff's
//! civil `DateTime` with no zone, so croner never resolves an instant. The
//! instant of each wall time is decided here, by rdq's rules rather than
//! croner's (croner fires wildcard patterns twice in a repeated hour and skips
//! them in a gap; rdq fires each wall time once, always):
//!
//! - a wall time that happens once is that instant;
//! - a wall time that happens twice (the clock was set back) is its first
//!   occurrence;
//! - a wall time that never happens (the clock was set forward) is the first
//!   instant after the gap, the transition itself.
//!
//! Put another way, the instant of wall time `w` is the first instant at
//! which the zone's clock reads `w` or later. That map never decreases, which
//! is what makes the searches below exact: the first wall time whose instant
//! is after `t` is the first wall time after the highest reading the clock
//! reached up to `t` ([`high_water`]).

use std::cmp::Ordering;

use croner::errors::CronError;
use croner::{CivilDate, CivilDateTime, CivilTime, CronDateTime, Resolution, Weekday};
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

/// How far back a clock reading can still exceed the current one: zone
/// offsets stay within ±26 hours, so a transition older than 52 hours cannot.
const OFFSET_SPAN: SignedDuration = SignedDuration::from_hours(72);

/// A wall-clock time with no zone: what croner searches over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Wall(pub(crate) DateTime);

impl CronDateTime for Wall {
    fn to_civil(&self) -> CivilDateTime {
        let d = self.0;
        // jiff keeps every part in range, so croner's unchecked constructors hold.
        CivilDateTime::new(
            CivilDate::from_parts_unchecked(
                i32::from(d.year()),
                d.month().unsigned_abs().into(),
                d.day().unsigned_abs().into(),
            ),
            CivilTime::from_parts_unchecked(
                d.hour().unsigned_abs().into(),
                d.minute().unsigned_abs().into(),
                d.second().unsigned_abs().into(),
            ),
        )
    }

    fn civil_weekday(&self) -> Weekday {
        Weekday::from_days_from_sunday(
            self.0
                .weekday()
                .to_sunday_zero_offset()
                .unsigned_abs()
                .into(),
        )
    }

    fn resolve_civil(&self, civil: CivilDateTime) -> Result<Resolution<Self>, CronError> {
        Ok(Resolution::Single(Wall(to_datetime(civil)?)))
    }

    fn checked_add_seconds(&self, seconds: i64) -> Option<Self> {
        self.0
            .checked_add(SignedDuration::from_secs(seconds))
            .ok()
            .map(Wall)
    }

    fn cmp_instant(&self, other: &Self) -> Ordering {
        self.0.cmp(&other.0)
    }
}

fn to_datetime(c: CivilDateTime) -> Result<DateTime, CronError> {
    let part = |v: u32| i8::try_from(v).map_err(|_| CronError::InvalidTime);
    let year = i16::try_from(c.year()).map_err(|_| CronError::InvalidDate)?;
    DateTime::new(
        year,
        part(c.month())?,
        part(c.day())?,
        part(c.hour())?,
        part(c.minute())?,
        part(c.second())?,
        0,
    )
    .map_err(|_| CronError::InvalidDate)
}

/// The instant wall time `w` stands for in `tz` (module docs: the first
/// instant the clock reads `w` or later).
pub(crate) fn first_instant(tz: &TimeZone, w: DateTime) -> Option<Timestamp> {
    match tz.to_ambiguous_timestamp(w).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(w).ok(),
        // `before` is the larger offset of a fold, so this is the earlier instant.
        AmbiguousOffset::Fold { before, .. } => before.to_timestamp(w).ok(),
        AmbiguousOffset::Gap { after, .. } => {
            // Read with the later offset, `w` lands before the transition;
            // the next transition is the end of the gap.
            let before_gap = after.to_timestamp(w).ok()?;
            tz.following(before_gap).next().map(|t| t.timestamp())
        }
    }
}

/// The highest reading of `tz`'s clock at any instant up to `at`: the
/// reading at `at`, unless the clock was set back since and `at` is in the
/// repeated stretch.
pub(crate) fn high_water(tz: &TimeZone, at: Timestamp) -> DateTime {
    let mut high = tz.to_datetime(at);
    let horizon = at.checked_sub(OFFSET_SPAN).unwrap_or(Timestamp::MIN);
    let from = at.checked_add(SignedDuration::from_nanos(1)).unwrap_or(at);
    for transition in tz.preceding(from) {
        let changed = transition.timestamp();
        if changed <= horizon {
            break;
        }
        if let Ok(just_before) = changed.checked_sub(SignedDuration::from_nanos(1)) {
            high = high.max(tz.to_datetime(just_before));
        }
    }
    high
}

/// `w` without its fraction of a second: cron patterns match whole seconds.
pub(crate) fn whole_second(w: DateTime) -> DateTime {
    w.with().subsec_nanosecond(0).build().unwrap_or(w)
}
