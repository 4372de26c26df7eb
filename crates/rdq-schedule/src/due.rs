//! Due times: when a spec fires, as pure functions over UTC milliseconds.
//!
//! A [`Timing`] is a checked spec bound to its zone and its `[start, end]`
//! bounds, parsed once so each tick only computes. Cron due times follow the
//! zone's clock with the daylight-saving rules of [`crate::wall`]; interval
//! due times are `anchor + k × every_ms`, absolute, whatever the zone.

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::error::ScheduleError;
use crate::model::Spec;
use crate::wall::{Wall, first_instant, high_water, whole_second};

/// Longest interval, in ms: 366 days. A longer period is a calendar rule,
/// which a cron pattern states better.
pub const MAX_INTERVAL_MS: u64 = 366 * 86_400_000;

/// Earliest instant rdq timestamps hold, `0000-01-01T00:00:00.000Z`.
const MIN_MS: i64 = -62_167_219_200_000;
/// Latest instant rdq timestamps hold, `9999-12-31T23:59:59.999Z`.
const MAX_MS: i64 = 253_402_300_799_999;

/// The last wall time croner searches: cron due times end with year 4999.
const LAST_CRON_WALL: jiff::civil::DateTime =
    jiff::civil::DateTime::constant(4999, 12, 31, 23, 59, 59, 0);

/// Longest cron pattern, in bytes.
pub const MAX_CRON_LEN: usize = 256;

/// When a checked spec is due.
#[derive(Debug, Clone)]
pub struct Timing {
    rule: Rule,
    zone: TimeZone,
    start_ms: Option<i64>,
    end_ms: Option<i64>,
}

#[derive(Debug, Clone)]
enum Rule {
    Cron(Box<Cron>),
    /// Due at `anchor_ms + k × every_ms`; `every_ms` is positive.
    Every {
        every_ms: i64,
        anchor_ms: i64,
    },
}

impl Timing {
    /// Checks `spec` and `tz` and binds them to the inclusive bounds
    /// `start_ms`/`end_ms` (checked by [`ValidSchedule`](crate::ValidSchedule)).
    pub fn new(
        spec: &Spec,
        tz: &str,
        start_ms: Option<i64>,
        end_ms: Option<i64>,
    ) -> Result<Self, ScheduleError> {
        let zone = TimeZone::get(tz).map_err(|_| ScheduleError::UnknownTimeZone {
            why: format!("{tz:?} is not a zone of the IANA time zone database"),
        })?;
        let rule = match spec {
            Spec::Cron(pattern) => Rule::Cron(Box::new(parse_cron(pattern)?)),
            Spec::EveryMs(every) => {
                if *every == 0 {
                    return Err(ScheduleError::InvalidInterval {
                        why: "must be at least 1".to_owned(),
                    });
                }
                if *every > MAX_INTERVAL_MS {
                    return Err(ScheduleError::InvalidInterval {
                        why: format!("{every} is above the limit of {MAX_INTERVAL_MS} (366 days)"),
                    });
                }
                Rule::Every {
                    every_ms: i64::try_from(*every).unwrap_or(i64::MAX),
                    anchor_ms: start_ms.unwrap_or(0),
                }
            }
        };
        Ok(Self {
            rule,
            zone,
            start_ms,
            end_ms,
        })
    }

    /// The zone's IANA name, as the database spells it.
    pub fn zone_name(&self) -> Option<&str> {
        self.zone.iana_name()
    }

    /// The first due time strictly after `after_ms`.
    pub fn next_due_after(&self, after_ms: i64) -> Option<i64> {
        let after = match self.start_ms {
            Some(start) => after_ms.max(start.saturating_sub(1)),
            None => after_ms,
        };
        let due = match &self.rule {
            Rule::Cron(cron) => self.cron_next_after(cron, after)?,
            Rule::Every {
                every_ms,
                anchor_ms,
            } => {
                let k = (i128::from(after) - i128::from(*anchor_ms))
                    .div_euclid(i128::from(*every_ms))
                    + 1;
                i64::try_from(i128::from(*anchor_ms) + k * i128::from(*every_ms)).ok()?
            }
        };
        self.within_bounds(due)
    }

    /// The last due time at or before `at_ms`.
    pub fn last_due_at_or_before(&self, at_ms: i64) -> Option<i64> {
        let at = match self.end_ms {
            Some(end) => at_ms.min(end),
            None => at_ms,
        };
        let due = match &self.rule {
            Rule::Cron(cron) => self.cron_last_at_or_before(cron, at)?,
            Rule::Every {
                every_ms,
                anchor_ms,
            } => {
                let k = (i128::from(at) - i128::from(*anchor_ms)).div_euclid(i128::from(*every_ms));
                i64::try_from(i128::from(*anchor_ms) + k * i128::from(*every_ms)).ok()?
            }
        };
        self.within_bounds(due)
    }

    /// The due times in `(start_exclusive, end_inclusive]`, oldest first, at
    /// most `limit` of them.
    pub fn due_between(&self, start_exclusive: i64, end_inclusive: i64, limit: usize) -> Vec<i64> {
        let mut out = Vec::new();
        let mut cursor = start_exclusive;
        while out.len() < limit {
            match self.next_due_after(cursor) {
                Some(due) if due <= end_inclusive => {
                    out.push(due);
                    cursor = due;
                }
                _ => break,
            }
        }
        out
    }

    /// How many due times lie in `(start_exclusive, end_inclusive]`, counting
    /// no further than `cap`: exact for intervals, and for cron patterns up to
    /// `cap`, since a cron pattern's due times can only be counted one by one.
    pub fn count_between(&self, start_exclusive: i64, end_inclusive: i64, cap: u64) -> u64 {
        match &self.rule {
            Rule::Every { every_ms, .. } => {
                let (Some(first), Some(last)) = (
                    self.next_due_after(start_exclusive),
                    self.last_due_at_or_before(end_inclusive),
                ) else {
                    return 0;
                };
                if first > last {
                    return 0;
                }
                let n = (i128::from(last) - i128::from(first)) / i128::from(*every_ms) + 1;
                u64::try_from(n).unwrap_or(u64::MAX).min(cap)
            }
            Rule::Cron(_) => {
                let mut n = 0;
                let mut cursor = start_exclusive;
                while n < cap {
                    match self.next_due_after(cursor) {
                        Some(due) if due <= end_inclusive => {
                            n += 1;
                            cursor = due;
                        }
                        _ => break,
                    }
                }
                n
            }
        }
    }

    /// A due time if it lies within `[start, end]` and within the years
    /// 0000–9999 every rdq timestamp lies in.
    fn within_bounds(&self, due: i64) -> Option<i64> {
        let after_start = self.start_ms.is_none_or(|s| due >= s);
        let before_end = self.end_ms.is_none_or(|e| due <= e);
        (after_start && before_end && (MIN_MS..=MAX_MS).contains(&due)).then_some(due)
    }

    /// The first wall time after the clock's highest reading up to `after`
    /// is the first whose instant is after `after` (`crate::wall`).
    fn cron_next_after(&self, cron: &Cron, after_ms: i64) -> Option<i64> {
        // No due time lies outside rdq's timestamps, so searching from their
        // edge loses nothing and keeps jiff in its range.
        let after = Timestamp::from_millisecond(after_ms.clamp(MIN_MS - 1, jiff_max_ms())).ok()?;
        let high = whole_second(high_water(&self.zone, after));
        let wall = cron.find_next_occurrence(&Wall(high), false).ok()?;
        Some(first_instant(&self.zone, wall.0)?.as_millisecond())
    }

    /// The last wall time at or before the clock's highest reading up to `at`
    /// is the last whose instant is at or before `at`.
    fn cron_last_at_or_before(&self, cron: &Cron, at_ms: i64) -> Option<i64> {
        let at = Timestamp::from_millisecond(at_ms.clamp(MIN_MS - 1, jiff_max_ms())).ok()?;
        // croner searches wall times up to the end of year 4999.
        let high = whole_second(high_water(&self.zone, at)).min(LAST_CRON_WALL);
        let wall = cron.find_previous_occurrence(&Wall(high), true).ok()?;
        Some(first_instant(&self.zone, wall.0)?.as_millisecond())
    }
}

/// jiff's last instant, a day short of rdq's (room for any zone's offset).
fn jiff_max_ms() -> i64 {
    Timestamp::MAX.as_millisecond().min(MAX_MS)
}

/// Parses 5 fields, or 6 with leading seconds; no year field.
fn parse_cron(pattern: &str) -> Result<Cron, ScheduleError> {
    if pattern.len() > MAX_CRON_LEN {
        return Err(ScheduleError::InvalidCron {
            why: format!(
                "is {} bytes long; the limit is {MAX_CRON_LEN}",
                pattern.len()
            ),
        });
    }
    let parser = CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build();
    let cron = parser
        .parse(pattern)
        .map_err(|e| ScheduleError::InvalidCron {
            why: format!("{pattern:?}: {e}"),
        })?;
    // A pattern like `0 0 30 2 *` parses but never matches: refuse it now
    // rather than have a schedule that silently never fires.
    let epoch = Wall(jiff::civil::DateTime::constant(1970, 1, 1, 0, 0, 0, 0));
    if cron.find_next_occurrence(&epoch, true).is_err() {
        return Err(ScheduleError::InvalidCron {
            why: format!("{pattern:?} matches no date"),
        });
    }
    Ok(cron)
}

#[cfg(test)]
mod tests {
    use rdq_envelope::Timestamp;

    #[test]
    fn the_range_of_due_times_is_the_range_of_rdq_timestamps() {
        assert!(Timestamp::from_unix_ms(super::MIN_MS).is_some());
        assert!(Timestamp::from_unix_ms(super::MIN_MS - 1).is_none());
        assert!(Timestamp::from_unix_ms(super::MAX_MS).is_some());
        assert!(Timestamp::from_unix_ms(super::MAX_MS + 1).is_none());
    }
}
