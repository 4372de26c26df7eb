//! The daylight-saving rules on real zones: a skipped wall time fires at the
//! first instant after the gap, a repeated one once, at its first occurrence.

use crate::{cron, ms, next_n};

// America/New_York, 2026: 02:00 EST becomes 03:00 EDT on March 8 (07:00Z);
// 02:00 EDT becomes 01:00 EST on November 1 (06:00Z).

#[test]
fn new_york_a_daily_time_in_the_spring_gap_fires_when_the_gap_ends() {
    let t = cron("30 2 * * *", "America/New_York");
    assert_eq!(
        next_n(&t, ms("2026-03-07T00:00:00Z"), 3),
        [
            ms("2026-03-07T02:30:00-05:00"),
            ms("2026-03-08T03:00:00-04:00"),
            ms("2026-03-09T02:30:00-04:00")
        ]
    );
}

#[test]
fn new_york_every_wall_time_of_the_gap_is_one_fire_at_its_end() {
    let t = cron("*/15 * * * *", "America/New_York");
    assert_eq!(
        next_n(&t, ms("2026-03-08T01:40:00-05:00"), 3),
        [
            ms("2026-03-08T01:45:00-05:00"),
            ms("2026-03-08T03:00:00-04:00"),
            ms("2026-03-08T03:15:00-04:00")
        ]
    );
}

#[test]
fn new_york_a_daily_time_in_the_repeated_hour_fires_once_at_its_first_occurrence() {
    let t = cron("30 1 * * *", "America/New_York");
    assert_eq!(
        next_n(&t, ms("2026-10-31T12:00:00Z"), 2),
        [
            ms("2026-11-01T01:30:00-04:00"),
            ms("2026-11-02T01:30:00-05:00")
        ]
    );
}

#[test]
fn new_york_the_repeat_of_the_hour_fires_nothing() {
    let t = cron("*/30 * * * *", "America/New_York");
    assert_eq!(
        next_n(&t, ms("2026-11-01T00:15:00-04:00"), 5),
        [
            ms("2026-11-01T00:30:00-04:00"),
            ms("2026-11-01T01:00:00-04:00"),
            ms("2026-11-01T01:30:00-04:00"),
            ms("2026-11-01T02:00:00-05:00"),
            ms("2026-11-01T02:30:00-05:00")
        ]
    );
}

#[test]
fn new_york_a_search_from_inside_the_repeat_finds_the_first_time_after_it() {
    let t = cron("*/30 * * * *", "America/New_York");
    let in_repeat = ms("2026-11-01T01:10:00-05:00");
    assert_eq!(
        t.next_due_after(in_repeat),
        Some(ms("2026-11-01T02:00:00-05:00"))
    );
    assert_eq!(
        t.last_due_at_or_before(in_repeat),
        Some(ms("2026-11-01T01:30:00-04:00"))
    );
}

// Europe/London, 2026: 01:00 GMT becomes 02:00 BST on March 29 (01:00Z);
// 02:00 BST becomes 01:00 GMT on October 25 (01:00Z).

#[test]
fn london_one_in_the_morning_on_the_spring_day_fires_at_two() {
    let t = cron("0 1 * * *", "Europe/London");
    assert_eq!(
        next_n(&t, ms("2026-03-28T00:00:00Z"), 3),
        [
            ms("2026-03-28T01:00:00+00:00"),
            ms("2026-03-29T02:00:00+01:00"),
            ms("2026-03-30T01:00:00+01:00")
        ]
    );
}

#[test]
fn london_a_time_in_the_autumn_repeat_fires_once_in_summer_time() {
    let t = cron("15 1 * * *", "Europe/London");
    assert_eq!(
        next_n(&t, ms("2026-10-24T12:00:00Z"), 2),
        [
            ms("2026-10-25T01:15:00+01:00"),
            ms("2026-10-26T01:15:00+00:00")
        ]
    );
}

#[test]
fn london_hourly_fires_23_times_on_the_spring_day_and_24_on_the_autumn_day() {
    let t = cron("0 * * * *", "Europe/London");
    let spring = t.due_between(
        ms("2026-03-29T00:00:00+00:00") - 1,
        ms("2026-03-29T23:59:59+01:00"),
        100,
    );
    assert_eq!(spring.len(), 23);
    let autumn = t.due_between(
        ms("2026-10-25T00:00:00+01:00") - 1,
        ms("2026-10-25T23:59:59+00:00"),
        100,
    );
    assert_eq!(autumn.len(), 24);
}

// Australia/Lord_Howe shifts by 30 minutes. 2026: 02:00 (+11:00) becomes
// 01:30 (+10:30) on April 5; 02:00 (+10:30) becomes 02:30 (+11:00) on
// October 4.

#[test]
fn lord_howe_a_time_in_the_half_hour_gap_fires_when_it_ends() {
    let t = cron("15 2 * * *", "Australia/Lord_Howe");
    assert_eq!(
        next_n(&t, ms("2026-10-02T12:00:00Z"), 3),
        [
            ms("2026-10-03T02:15:00+10:30"),
            ms("2026-10-04T02:30:00+11:00"),
            ms("2026-10-05T02:15:00+11:00")
        ]
    );
}

#[test]
fn lord_howe_a_time_in_the_repeated_half_hour_fires_once() {
    let t = cron("45 1 * * *", "Australia/Lord_Howe");
    assert_eq!(
        next_n(&t, ms("2026-04-03T12:00:00Z"), 3),
        [
            ms("2026-04-04T01:45:00+11:00"),
            ms("2026-04-05T01:45:00+11:00"),
            ms("2026-04-06T01:45:00+10:30")
        ]
    );
}

#[test]
fn a_whole_skipped_day_fires_once_at_the_start_of_the_next() {
    // Samoa skipped 2011-12-30 when it moved across the date line.
    let t = cron("0 12 * * *", "Pacific/Apia");
    assert_eq!(
        next_n(&t, ms("2011-12-29T12:00:00-10:00"), 2),
        [
            ms("2011-12-31T00:00:00+14:00"),
            ms("2011-12-31T12:00:00+14:00")
        ]
    );
}
