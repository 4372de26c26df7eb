//! Wire timestamps: RFC 3339 UTC with exactly three fractional digits and `Z`.
//!
//! The envelope fixes one spelling (`2026-07-20T14:03:22.117Z`) so that the
//! canonical encoding is byte-stable; any other spelling is refused rather than
//! normalised, because normalising would change the bytes a writer produced.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A point in time with millisecond precision, as milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

/// Earliest representable instant: `0000-01-01T00:00:00.000Z`.
const MIN_MS: i64 = -62_167_219_200_000;
/// Latest representable instant: `9999-12-31T23:59:59.999Z`.
const MAX_MS: i64 = 253_402_300_799_999;

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// A timestamp from milliseconds since the Unix epoch, if it lies in years 0000–9999.
    pub fn from_unix_ms(ms: i64) -> Option<Self> {
        (MIN_MS..=MAX_MS).contains(&ms).then_some(Self(ms))
    }

    /// Milliseconds since the Unix epoch.
    pub fn unix_ms(self) -> i64 {
        self.0
    }

    /// The current wall-clock time, truncated to the millisecond.
    pub fn now() -> Self {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        Self(ms.clamp(MIN_MS, MAX_MS))
    }

    /// This instant plus `ms` milliseconds, saturating at the representable range.
    pub fn plus_ms(self, ms: u64) -> Self {
        let ms = i64::try_from(ms).unwrap_or(i64::MAX);
        Self(self.0.saturating_add(ms).clamp(MIN_MS, MAX_MS))
    }

    /// This instant minus `ms` milliseconds, saturating at the representable range.
    pub fn minus_ms(self, ms: u64) -> Self {
        let ms = i64::try_from(ms).unwrap_or(i64::MAX);
        Self(self.0.saturating_sub(ms).clamp(MIN_MS, MAX_MS))
    }

    /// This instant plus a duration, saturating at the representable range.
    pub fn plus(self, d: Duration) -> Self {
        self.plus_ms(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    /// Milliseconds from `earlier` to `self`, zero if `earlier` is later.
    pub fn ms_since(self, earlier: Timestamp) -> u64 {
        u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0)
    }

    /// Parses the one accepted spelling, `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    pub fn parse(s: &str) -> Option<Self> {
        let b = s.as_bytes();
        if b.len() != 24
            || b[4] != b'-'
            || b[7] != b'-'
            || b[10] != b'T'
            || b[13] != b':'
            || b[16] != b':'
            || b[19] != b'.'
            || b[23] != b'Z'
        {
            return None;
        }
        let num = |range: std::ops::Range<usize>| -> Option<i64> {
            b[range].iter().try_fold(0i64, |acc, &c| {
                c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
            })
        };
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, minute, second, milli) =
            (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
        if !(1..=12).contains(&month)
            || day < 1
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 59
        {
            return None;
        }
        let days = days_from_civil(year, month, day);
        Some(Self(
            ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + milli,
        ))
    }
}

impl Timestamp {
    /// The canonical text (`2026-12-04T05:00:00.123Z`, always 24 ASCII
    /// bytes) without an allocation, for encoders that write it straight
    /// into a buffer.
    pub fn text(self) -> [u8; 24] {
        let days = self.0.div_euclid(86_400_000);
        let rem = self.0.rem_euclid(86_400_000);
        let (year, month, day) = civil_from_days(days);
        // Digit by digit into a fixed buffer: this runs for every timestamp of
        // every envelope encoded, and `write!` with padding is several times slower.
        let mut out = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, width: usize, mut v: i64| {
            for i in (at..at + width).rev() {
                out[i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        };
        put(0, 4, year);
        put(5, 2, month);
        put(8, 2, day);
        put(11, 2, rem / 3_600_000);
        put(14, 2, rem / 60_000 % 60);
        put(17, 2, rem / 1000 % 60);
        put(20, 3, rem % 1000);
        out
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(std::str::from_utf8(&self.text()).map_err(|_| fmt::Error)?)
    }
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's days_from_civil / civil_from_days, proleptic Gregorian.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_timestamp_round_trips() {
        let t = Timestamp::parse("2026-07-20T14:03:22.117Z").unwrap();
        assert_eq!(t.to_string(), "2026-07-20T14:03:22.117Z");
        assert_eq!(t.unix_ms(), 1_784_556_202_117);
    }

    #[test]
    fn the_range_ends_format_and_parse() {
        for s in [
            "0000-01-01T00:00:00.000Z",
            "9999-12-31T23:59:59.999Z",
            "1970-01-01T00:00:00.000Z",
        ] {
            assert_eq!(Timestamp::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(
            Timestamp::parse("0000-01-01T00:00:00.000Z")
                .unwrap()
                .unix_ms(),
            MIN_MS
        );
        assert_eq!(
            Timestamp::parse("9999-12-31T23:59:59.999Z")
                .unwrap()
                .unix_ms(),
            MAX_MS
        );
    }

    #[test]
    fn other_spellings_and_impossible_dates_are_refused() {
        for s in [
            "2026-07-20T14:03:22Z",
            "2026-07-20T14:03:22.11Z",
            "2026-07-20T14:03:22.1170Z",
            "2026-07-20T14:03:22.117+00:00",
            "2026-07-20t14:03:22.117Z",
            "2026-07-20 14:03:22.117Z",
            "2026-02-30T00:00:00.000Z",
            "2025-02-29T00:00:00.000Z",
            "2026-13-01T00:00:00.000Z",
            "2026-07-20T24:00:00.000Z",
            "2026-07-20T23:60:00.000Z",
            "2026-07-20T23:59:60.000Z",
            "+2026-07-20T14:03:22.117Z",
            "",
        ] {
            assert!(Timestamp::parse(s).is_none(), "{s} was accepted");
        }
        assert!(Timestamp::parse("2024-02-29T00:00:00.000Z").is_some());
    }

    #[test]
    fn every_day_of_a_range_round_trips() {
        let mut ms = Timestamp::parse("1899-12-25T01:02:03.004Z")
            .unwrap()
            .unix_ms();
        for _ in 0..(366 * 205) {
            let t = Timestamp(ms);
            assert_eq!(Timestamp::parse(&t.to_string()), Some(t));
            ms += 86_400_000;
        }
    }
}
