//! Every refusal: one per code, each naming its field.

use rdq_schedule::{
    CatchUp, MAX_CATCH_UP_FIRES, MAX_INTERVAL_MS, ScheduleError, Spec, ValidSchedule,
};

use crate::schedule;

fn refusal(s: rdq_schedule::Schedule) -> ScheduleError {
    ValidSchedule::new(s).unwrap_err()
}

fn every_minute() -> rdq_schedule::Schedule {
    schedule(Spec::Cron("* * * * *".to_owned()))
}

#[test]
fn a_well_formed_schedule_is_accepted() {
    assert!(ValidSchedule::new(every_minute()).is_ok());
}

#[test]
fn a_schedule_name_follows_the_queue_name_rules() {
    for bad in ["", ".", "..", "Nightly", "a b", "a/b", &"a".repeat(241)] {
        let mut s = every_minute();
        s.name = bad.to_owned();
        let e = refusal(s);
        assert_eq!(e.code(), "INVALID_SCHEDULE_NAME", "{bad:?}");
        assert_eq!(e.field(), "name");
        assert!(e.to_string().starts_with("name: "), "{e}");
    }
    let mut s = every_minute();
    s.name = "a".repeat(240);
    assert!(ValidSchedule::new(s).is_ok());
}

#[test]
fn a_cron_pattern_that_does_not_parse_is_refused() {
    for bad in [
        "",
        "* * * *",
        "* * * * * * *",
        "61 * * * *",
        "* 24 * * *",
        "*/0 * * * *",
        "5-1 * * * *",
        "* * * FOO *",
        "hello",
    ] {
        let e = refusal(schedule(Spec::Cron(bad.to_owned())));
        assert_eq!(e.code(), "INVALID_CRON", "{bad:?}");
        assert_eq!(e.field(), "spec.cron");
    }
}

#[test]
fn a_cron_pattern_that_matches_no_date_is_refused() {
    let e = refusal(schedule(Spec::Cron("0 0 30 2 *".to_owned())));
    assert_eq!(e.code(), "INVALID_CRON");
    assert!(e.to_string().contains("matches no date"), "{e}");
}

#[test]
fn an_overlong_cron_pattern_is_refused() {
    let e = refusal(schedule(Spec::Cron(format!(
        "{} * * * *",
        "1,".repeat(200)
    ))));
    assert_eq!(e.code(), "INVALID_CRON");
}

#[test]
fn a_zone_outside_the_iana_database_is_refused() {
    for bad in ["Mars/Olympus_Mons", "", "+05:00", "America/New York"] {
        let mut s = every_minute();
        s.tz = bad.to_owned();
        let e = refusal(s);
        assert_eq!(e.code(), "UNKNOWN_TIME_ZONE", "{bad:?}");
        assert_eq!(e.field(), "tz");
    }
}

#[test]
fn a_zero_interval_is_refused() {
    let e = refusal(schedule(Spec::EveryMs(0)));
    assert_eq!(e.code(), "INVALID_INTERVAL");
    assert_eq!(e.field(), "spec.every_ms");
}

#[test]
fn an_interval_over_366_days_is_refused() {
    assert!(ValidSchedule::new(schedule(Spec::EveryMs(MAX_INTERVAL_MS))).is_ok());
    let e = refusal(schedule(Spec::EveryMs(MAX_INTERVAL_MS + 1)));
    assert_eq!(e.code(), "INVALID_INTERVAL");
}

#[test]
fn an_end_not_after_the_start_is_refused() {
    for end in [1_000, 999] {
        let mut s = every_minute();
        s.start_ms = Some(1_000);
        s.end_ms = Some(end);
        let e = refusal(s);
        assert_eq!(e.code(), "INVALID_WINDOW");
        assert_eq!(e.field(), "end_ms");
    }
}

#[test]
fn bounds_outside_the_years_0000_to_9999_are_refused() {
    let mut s = every_minute();
    s.start_ms = Some(i64::MIN);
    assert_eq!(refusal(s).field(), "start_ms");
    let mut s = every_minute();
    s.end_ms = Some(i64::MAX);
    let e = refusal(s);
    assert_eq!((e.code(), e.field()), ("INVALID_WINDOW", "end_ms"));
}

#[test]
fn a_catch_up_max_of_zero_or_above_the_cap_is_refused() {
    for max in [0, MAX_CATCH_UP_FIRES + 1] {
        let mut s = every_minute();
        s.catch_up = CatchUp::All {
            max,
            window_ms: 60_000,
        };
        let e = refusal(s);
        assert_eq!(
            (e.code(), e.field()),
            ("INVALID_WINDOW", "catch_up.all.max")
        );
    }
}

#[test]
fn a_catch_up_window_of_zero_or_above_the_cap_is_refused() {
    for window_ms in [0, rdq_schedule::MAX_CATCH_UP_WINDOW_MS + 1] {
        let mut s = every_minute();
        s.catch_up = CatchUp::All { max: 1, window_ms };
        let e = refusal(s);
        assert_eq!(
            (e.code(), e.field()),
            ("INVALID_WINDOW", "catch_up.all.window_ms")
        );
    }
}

#[test]
fn the_task_queue_is_checked_as_a_submit_checks_it() {
    let mut s = every_minute();
    s.task.queue = "Reports".to_owned();
    let e = refusal(s);
    assert_eq!((e.code(), e.field()), ("INVALID_QUEUE_NAME", "task.queue"));
}

#[test]
fn the_task_handler_is_checked_as_a_submit_checks_it() {
    let mut s = every_minute();
    s.task.handler_ref = "".to_owned();
    let e = refusal(s);
    assert_eq!(
        (e.code(), e.field()),
        ("INVALID_HANDLER_REF", "task.handler_ref")
    );
}

#[test]
fn the_task_may_not_set_reserved_headers() {
    let mut s = every_minute();
    s.task
        .headers
        .insert("rdq.schedule".to_owned(), "forged".to_owned());
    let e = refusal(s);
    assert_eq!(
        (e.code(), e.field()),
        ("RESERVED_HEADER", "task.headers.rdq.schedule")
    );
}

#[test]
fn the_task_flow_key_is_checked_as_a_submit_checks_it() {
    let mut s = every_minute();
    s.task.flow_key = Some("has space".to_owned());
    let e = refusal(s);
    assert_eq!((e.code(), e.field()), ("INVALID_FIELD", "task.flow_key"));
}

#[test]
fn the_task_content_type_must_not_be_empty() {
    let mut s = every_minute();
    s.task.payload_content_type = String::new();
    let e = refusal(s);
    assert_eq!(
        (e.code(), e.field()),
        ("INVALID_FIELD", "task.payload_content_type")
    );
}
