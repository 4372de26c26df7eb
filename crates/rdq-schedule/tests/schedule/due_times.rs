//! Due times of cron patterns and intervals, and the `[start, end]` bounds.

use rdq_schedule::{Spec, Timing};

use crate::{cron, ms, next_n};

#[test]
fn five_fields_fire_on_whole_minutes() {
    let t = cron("*/5 * * * *", "UTC");
    assert_eq!(
        next_n(&t, ms("2026-01-01T10:02:30Z"), 3),
        [
            ms("2026-01-01T10:05:00Z"),
            ms("2026-01-01T10:10:00Z"),
            ms("2026-01-01T10:15:00Z")
        ]
    );
}

#[test]
fn a_leading_sixth_field_is_seconds() {
    let t = cron("*/20 * * * * *", "UTC");
    assert_eq!(
        next_n(&t, ms("2026-01-01T10:00:05Z"), 4),
        [
            ms("2026-01-01T10:00:20Z"),
            ms("2026-01-01T10:00:40Z"),
            ms("2026-01-01T10:01:00Z"),
            ms("2026-01-01T10:01:20Z")
        ]
    );
    let t = cron("30 15 9 * * MON-FRI", "UTC");
    // 2026-01-02 is a Friday; the next weekday after it is Monday the 5th.
    assert_eq!(
        next_n(&t, ms("2026-01-02T09:15:30Z"), 1),
        [ms("2026-01-05T09:15:30Z")]
    );
}

#[test]
fn lists_ranges_steps_and_names_combine() {
    let t = cron("0 9-17/4 * JAN,JUL mon", "UTC");
    // Mondays of January 2026 at 09:00, 13:00 and 17:00.
    assert_eq!(
        next_n(&t, ms("2026-01-01T00:00:00Z"), 4),
        [
            ms("2026-01-05T09:00:00Z"),
            ms("2026-01-05T13:00:00Z"),
            ms("2026-01-05T17:00:00Z"),
            ms("2026-01-12T09:00:00Z")
        ]
    );
    let t = cron("0 0 1,15 * *", "UTC");
    assert_eq!(
        next_n(&t, ms("2026-02-10T00:00:00Z"), 2),
        [ms("2026-02-15T00:00:00Z"), ms("2026-03-01T00:00:00Z")]
    );
}

#[test]
fn day_of_month_and_day_of_week_match_either_as_in_vixie_cron() {
    // The 13th, or any Friday.
    let t = cron("0 0 13 * FRI", "UTC");
    assert_eq!(
        next_n(&t, ms("2026-03-01T00:00:00Z"), 3),
        [
            ms("2026-03-06T00:00:00Z"),
            ms("2026-03-13T00:00:00Z"),
            ms("2026-03-20T00:00:00Z")
        ]
    );
}

#[test]
fn l_is_the_last_day_and_hash_the_nth_weekday() {
    let t = cron("0 12 L * *", "UTC");
    assert_eq!(
        next_n(&t, ms("2028-02-01T00:00:00Z"), 2),
        [ms("2028-02-29T12:00:00Z"), ms("2028-03-31T12:00:00Z")]
    );
    // The second Monday of each month.
    let t = cron("0 8 * * MON#2", "UTC");
    assert_eq!(
        next_n(&t, ms("2026-01-01T00:00:00Z"), 2),
        [ms("2026-01-12T08:00:00Z"), ms("2026-02-09T08:00:00Z")]
    );
}

#[test]
fn nicknames_are_their_five_field_patterns() {
    let t = cron("@daily", "UTC");
    assert_eq!(
        next_n(&t, ms("2026-01-01T10:00:00Z"), 1),
        [ms("2026-01-02T00:00:00Z")]
    );
}

#[test]
fn a_cron_pattern_is_read_on_the_zones_wall_clock() {
    let t = cron("0 9 * * *", "Asia/Tokyo");
    assert_eq!(
        next_n(&t, ms("2025-12-31T12:00:00Z"), 1),
        [ms("2026-01-01T09:00:00+09:00")]
    );
}

#[test]
fn next_due_after_is_strictly_after() {
    let t = cron("0 * * * *", "UTC");
    let hour = ms("2026-01-01T10:00:00Z");
    assert_eq!(t.next_due_after(hour), Some(hour + 3_600_000));
    assert_eq!(t.next_due_after(hour - 1), Some(hour));
    assert_eq!(t.last_due_at_or_before(hour), Some(hour));
    assert_eq!(t.last_due_at_or_before(hour - 1), Some(hour - 3_600_000));
}

#[test]
fn an_interval_without_a_start_is_anchored_at_the_epoch() {
    let t = Timing::new(&Spec::EveryMs(7_000), "UTC", None, None).unwrap();
    assert_eq!(t.next_due_after(0), Some(7_000));
    assert_eq!(t.next_due_after(-1), Some(0));
    assert_eq!(t.next_due_after(20_999), Some(21_000));
    assert_eq!(t.last_due_at_or_before(-1), Some(-7_000));
}

#[test]
fn an_interval_with_a_start_is_anchored_there_and_begins_there() {
    let t = Timing::new(&Spec::EveryMs(60_000), "UTC", Some(1_234), None).unwrap();
    assert_eq!(t.next_due_after(0), Some(1_234));
    assert_eq!(t.next_due_after(1_234), Some(61_234));
    assert_eq!(t.last_due_at_or_before(1_233), None);
}

#[test]
fn an_interval_ignores_the_zone() {
    let hour = 3_600_000;
    let t = Timing::new(&Spec::EveryMs(hour as u64), "America/New_York", None, None).unwrap();
    let dues = next_n(&t, ms("2026-03-08T05:00:00Z"), 4);
    assert!(dues.windows(2).all(|w| w[1] - w[0] == hour), "{dues:?}");
}

#[test]
fn due_times_stay_within_start_and_end_inclusive() {
    let start = ms("2026-01-01T10:00:00Z");
    let end = ms("2026-01-01T10:30:00Z");
    let t = Timing::new(
        &Spec::Cron("*/15 * * * *".to_owned()),
        "UTC",
        Some(start),
        Some(end),
    )
    .unwrap();
    assert_eq!(
        t.due_between(i64::MIN, i64::MAX, 10),
        [start, start + 900_000, end]
    );
    assert_eq!(t.next_due_after(end), None);
    assert_eq!(t.last_due_at_or_before(start - 1), None);
}

#[test]
fn due_between_stops_at_its_limit_and_counting_at_its_cap() {
    let t = cron("* * * * * *", "UTC");
    assert_eq!(t.due_between(0, 10_000, 3), [1_000, 2_000, 3_000]);
    assert_eq!(t.count_between(0, 10_000, 100), 10);
    assert_eq!(t.count_between(0, 10_000, 4), 4);
    let every = Timing::new(&Spec::EveryMs(1_000), "UTC", None, None).unwrap();
    assert_eq!(every.count_between(0, 10_000, u64::MAX), 10);
    assert_eq!(every.count_between(10_000, 0, u64::MAX), 0);
}

#[test]
fn searches_from_beyond_the_timestamp_range_still_answer() {
    let t = cron("0 0 1 1 *", "Europe/London");
    assert_eq!(
        t.next_due_after(i64::MIN),
        Some(ms("0001-01-01T00:00:00-00:01:15"))
    );
    assert_eq!(
        t.last_due_at_or_before(i64::MAX),
        Some(ms("4999-01-01T00:00:00Z"))
    );
}

#[test]
fn nth_last_and_nearest_weekday_forms_and_sunday_as_seven() {
    // The last Friday of January 2026 is the 30th.
    let t = cron("0 0 * * 5L", "UTC");
    assert_eq!(
        next_n(&t, ms("2026-01-01T00:00:00Z"), 1),
        [ms("2026-01-30T00:00:00Z")]
    );
    // 2026-02-15 is a Sunday: the nearest weekday is Monday the 16th.
    let t = cron("0 0 15W * *", "UTC");
    assert_eq!(
        next_n(&t, ms("2026-02-01T00:00:00Z"), 1),
        [ms("2026-02-16T00:00:00Z")]
    );
    let sunday = next_n(&cron("0 0 * * 7", "UTC"), ms("2026-01-01T00:00:00Z"), 1);
    assert_eq!(
        sunday,
        next_n(&cron("0 0 * * SUN", "UTC"), ms("2026-01-01T00:00:00Z"), 1)
    );
    assert_eq!(sunday, [ms("2026-01-04T00:00:00Z")]);
}
