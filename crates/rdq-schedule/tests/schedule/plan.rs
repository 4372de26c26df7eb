//! One tick's decision: catch-up, overlap, pause and end.

use rdq_schedule::{
    CatchUp, Fire, Overlap, Plan, RunState, SkipReason, Skipped, Spec, Tick, ValidSchedule, plan,
};

use crate::{schedule, valid};

const MIN: i64 = 60_000;

/// Every minute, created at 0, last fired at `last`, ticking at `now`.
fn every_minute(catch_up: CatchUp) -> ValidSchedule {
    let mut s = schedule(Spec::EveryMs(MIN as u64));
    s.catch_up = catch_up;
    valid(s)
}

fn tick(last: Option<i64>, now: i64) -> Tick {
    Tick {
        now_ms: now,
        last_fired_due_ms: last,
        previous_run: None,
        created_at_ms: 0,
        grace_ms: 1_000,
    }
}

fn on_time(due: i64) -> Fire {
    Fire {
        due_ms: due,
        backfilled: false,
    }
}

fn backfill(due: i64) -> Fire {
    Fire {
        due_ms: due,
        backfilled: true,
    }
}

fn run(reason: SkipReason, first: i64, last: i64, count: u64) -> Skipped {
    Skipped {
        reason,
        first_due_ms: first,
        last_due_ms: last,
        count,
    }
}

#[test]
fn a_tick_on_time_submits_the_due_time_and_moves_the_cursor() {
    let p = plan(
        &every_minute(CatchUp::Skip),
        &tick(Some(10 * MIN), 11 * MIN + 200),
    );
    assert_eq!(
        p,
        Plan {
            submit: vec![on_time(11 * MIN)],
            skipped: vec![],
            last_due_ms: Some(11 * MIN),
            next_due_ms: Some(12 * MIN),
        }
    );
}

#[test]
fn a_tick_with_nothing_due_changes_nothing() {
    let p = plan(
        &every_minute(CatchUp::Latest),
        &tick(Some(11 * MIN), 11 * MIN + 500),
    );
    assert!(p.submit.is_empty() && p.skipped.is_empty());
    assert_eq!(p.last_due_ms, Some(11 * MIN));
    assert_eq!(p.next_due_ms, Some(12 * MIN));
}

#[test]
fn a_schedule_never_fired_starts_at_its_creation_not_the_epoch() {
    let mut t = tick(None, 100 * MIN + 10);
    t.created_at_ms = 100 * MIN - 30_000;
    let p = plan(
        &every_minute(CatchUp::All {
            max: 1000,
            window_ms: 86_400_000,
        }),
        &t,
    );
    assert_eq!(p.submit, [on_time(100 * MIN)]);
    assert!(p.skipped.is_empty());
}

#[test]
fn a_due_time_at_the_creation_instant_is_due() {
    let mut t = tick(None, 5 * MIN);
    t.created_at_ms = 5 * MIN;
    let p = plan(&every_minute(CatchUp::Skip), &t);
    assert_eq!(p.submit, [on_time(5 * MIN)]);
}

#[test]
fn catch_up_skip_submits_only_an_on_time_due_time() {
    // Down from minute 10 to 15.5: 11..15 missed, 15 is 30 s late.
    let p = plan(
        &every_minute(CatchUp::Skip),
        &tick(Some(10 * MIN), 15 * MIN + 30_000),
    );
    assert!(p.submit.is_empty());
    assert_eq!(
        p.skipped,
        [run(SkipReason::CatchUpSkip, 11 * MIN, 15 * MIN, 5)]
    );
    assert_eq!(p.last_due_ms, Some(15 * MIN));
    assert_eq!(p.next_due_ms, Some(16 * MIN));
}

#[test]
fn catch_up_skip_submits_the_latest_when_within_the_grace() {
    let p = plan(
        &every_minute(CatchUp::Skip),
        &tick(Some(10 * MIN), 15 * MIN + 1_000),
    );
    assert_eq!(p.submit, [on_time(15 * MIN)]);
    assert_eq!(
        p.skipped,
        [run(SkipReason::CatchUpSkip, 11 * MIN, 14 * MIN, 4)]
    );
}

#[test]
fn catch_up_latest_submits_the_most_recent_missed_due_time_however_late() {
    let p = plan(
        &every_minute(CatchUp::Latest),
        &tick(Some(10 * MIN), 15 * MIN + 59_000),
    );
    assert_eq!(p.submit, [on_time(15 * MIN)]);
    assert_eq!(
        p.skipped,
        [run(SkipReason::CatchUpSkip, 11 * MIN, 14 * MIN, 4)]
    );
}

#[test]
fn catch_up_all_submits_each_missed_due_time_oldest_first_flagging_backfills() {
    let all = CatchUp::All {
        max: 10,
        window_ms: 3_600_000,
    };
    let p = plan(&every_minute(all), &tick(Some(10 * MIN), 13 * MIN + 5_000));
    assert_eq!(
        p.submit,
        [backfill(11 * MIN), backfill(12 * MIN), on_time(13 * MIN)]
    );
    assert!(p.skipped.is_empty());
}

#[test]
fn catch_up_all_skips_due_times_older_than_the_window() {
    let all = CatchUp::All {
        max: 100,
        window_ms: 3 * MIN as u64,
    };
    let p = plan(&every_minute(all), &tick(Some(10 * MIN), 20 * MIN));
    assert_eq!(
        p.submit,
        [
            backfill(17 * MIN),
            backfill(18 * MIN),
            backfill(19 * MIN),
            on_time(20 * MIN)
        ]
    );
    assert_eq!(
        p.skipped,
        [run(SkipReason::CatchUpWindow, 11 * MIN, 16 * MIN, 6)]
    );
}

#[test]
fn catch_up_all_keeps_the_newest_max_and_skips_the_oldest() {
    let all = CatchUp::All {
        max: 2,
        window_ms: 3_600_000,
    };
    let p = plan(&every_minute(all), &tick(Some(10 * MIN), 20 * MIN));
    assert_eq!(p.submit, [backfill(19 * MIN), on_time(20 * MIN)]);
    assert_eq!(
        p.skipped,
        [run(SkipReason::CatchUpMax, 11 * MIN, 18 * MIN, 8)]
    );
}

#[test]
fn catch_up_all_reports_the_window_and_the_max_separately() {
    let all = CatchUp::All {
        max: 2,
        window_ms: 5 * MIN as u64,
    };
    let p = plan(&every_minute(all), &tick(Some(10 * MIN), 20 * MIN));
    assert_eq!(p.submit, [backfill(19 * MIN), on_time(20 * MIN)]);
    assert_eq!(
        p.skipped,
        [
            run(SkipReason::CatchUpWindow, 11 * MIN, 14 * MIN, 4),
            run(SkipReason::CatchUpMax, 15 * MIN, 18 * MIN, 4)
        ]
    );
}

#[test]
fn catch_up_all_skips_a_latest_due_time_outside_the_window() {
    let all = CatchUp::All {
        max: 5,
        window_ms: 10_000,
    };
    let p = plan(&every_minute(all), &tick(Some(10 * MIN), 12 * MIN + 30_000));
    assert!(p.submit.is_empty());
    assert_eq!(
        p.skipped,
        [run(SkipReason::CatchUpWindow, 11 * MIN, 12 * MIN, 2)]
    );
}

#[test]
fn an_on_time_due_time_is_submitted_even_with_a_window_shorter_than_the_grace() {
    let all = CatchUp::All {
        max: 5,
        window_ms: 100,
    };
    let p = plan(&every_minute(all), &tick(Some(10 * MIN), 11 * MIN + 900));
    assert_eq!(p.submit, [on_time(11 * MIN)]);
}

fn with_overlap(overlap: Overlap, previous: RunState) -> Plan {
    let mut s = schedule(Spec::EveryMs(MIN as u64));
    s.overlap = overlap;
    let mut t = tick(Some(10 * MIN), 11 * MIN);
    t.previous_run = Some(previous);
    plan(&valid(s), &t)
}

#[test]
fn overlap_policies_skip_against_the_previous_runs_state() {
    use Overlap::*;
    use RunState::*;
    let blocked = [
        (SkipIfPending, Pending, SkipReason::OverlapPending),
        (SkipIfRunning, Running, SkipReason::OverlapRunning),
        (SkipIfUnfinished, Pending, SkipReason::OverlapUnfinished),
        (SkipIfUnfinished, Running, SkipReason::OverlapUnfinished),
    ];
    for (overlap, state, reason) in blocked {
        let p = with_overlap(overlap, state);
        assert!(p.submit.is_empty(), "{overlap:?} {state:?}");
        assert_eq!(p.skipped, [run(reason, 11 * MIN, 11 * MIN, 1)]);
        assert_eq!(
            p.last_due_ms,
            Some(11 * MIN),
            "a skipped fire is accounted for"
        );
    }
    let allowed = [
        (Allow, Pending),
        (Allow, Running),
        (SkipIfPending, Running),
        (SkipIfRunning, Pending),
        (SkipIfUnfinished, Finished),
        (SkipIfUnfinished, Unknown),
    ];
    for (overlap, state) in allowed {
        let p = with_overlap(overlap, state);
        assert_eq!(p.submit, [on_time(11 * MIN)], "{overlap:?} {state:?}");
    }
}

#[test]
fn overlap_is_decided_once_for_all_the_fires_of_a_tick() {
    let mut s = schedule(Spec::EveryMs(MIN as u64));
    s.overlap = Overlap::SkipIfRunning;
    s.catch_up = CatchUp::All {
        max: 10,
        window_ms: 3_600_000,
    };
    let mut t = tick(Some(10 * MIN), 13 * MIN);
    t.previous_run = Some(RunState::Running);
    let p = plan(&valid(s.clone()), &t);
    assert!(p.submit.is_empty());
    assert_eq!(
        p.skipped,
        [run(SkipReason::OverlapRunning, 11 * MIN, 13 * MIN, 3)]
    );
    t.previous_run = Some(RunState::Finished);
    assert_eq!(plan(&valid(s), &t).submit.len(), 3);
}

#[test]
fn a_paused_schedule_skips_what_falls_due_and_does_not_catch_up_on_resume() {
    let mut s = schedule(Spec::EveryMs(MIN as u64));
    s.paused = true;
    s.catch_up = CatchUp::All {
        max: 100,
        window_ms: 3_600_000,
    };
    let p = plan(&valid(s.clone()), &tick(Some(10 * MIN), 15 * MIN));
    assert!(p.submit.is_empty());
    assert_eq!(p.skipped, [run(SkipReason::Paused, 11 * MIN, 15 * MIN, 5)]);
    s.paused = false;
    let resumed = plan(&valid(s), &tick(p.last_due_ms, 15 * MIN + 10_000));
    assert!(resumed.submit.is_empty());
    assert_eq!(resumed.next_due_ms, Some(16 * MIN));
}

#[test]
fn an_ended_schedule_submits_nothing_but_its_last_due_time_keeps_the_grace() {
    let mut s = schedule(Spec::EveryMs(MIN as u64));
    s.end_ms = Some(12 * MIN);
    let s = valid(s);
    let late = plan(&s, &tick(Some(10 * MIN), 12 * MIN + 5_000));
    assert!(late.submit.is_empty());
    assert_eq!(
        late.skipped,
        [run(SkipReason::Ended, 11 * MIN, 12 * MIN, 2)]
    );
    assert_eq!(late.next_due_ms, None);
    let on_time_at_end = plan(&s, &tick(Some(11 * MIN), 12 * MIN + 500));
    assert_eq!(on_time_at_end.submit, [on_time(12 * MIN)]);
}

#[test]
fn a_schedule_before_its_start_has_nothing_due_and_says_when_it_starts() {
    let mut s = schedule(Spec::Cron("0 * * * *".to_owned()));
    s.start_ms = Some(10 * 3_600_000);
    let p = plan(&valid(s), &tick(None, 3_600_000 + 5));
    assert!(p.submit.is_empty() && p.skipped.is_empty());
    assert_eq!(p.last_due_ms, None);
    assert_eq!(p.next_due_ms, Some(10 * 3_600_000));
}

#[test]
fn skip_reasons_have_stable_names() {
    use SkipReason::*;
    let names: Vec<_> = [
        CatchUpSkip,
        CatchUpWindow,
        CatchUpMax,
        OverlapPending,
        OverlapRunning,
        OverlapUnfinished,
        Paused,
        Ended,
    ]
    .into_iter()
    .map(SkipReason::as_str)
    .collect();
    assert_eq!(
        names,
        [
            "catch_up_skip",
            "catch_up_window",
            "catch_up_max",
            "overlap_pending",
            "overlap_running",
            "overlap_unfinished",
            "paused",
            "ended"
        ]
    );
}

/// The example table of docs/schedules.md: every minute, last fired at
/// 10:00, ticking at 10:05:30 with a grace of one second.
#[test]
fn the_catch_up_table_of_the_reference_holds() {
    let (last, now) = (600 * MIN, 605 * MIN + 30_000);
    let at = |m: i64| (600 + m) * MIN;
    let p = plan(&every_minute(CatchUp::Skip), &tick(Some(last), now));
    assert!(p.submit.is_empty());
    assert_eq!(p.skipped, [run(SkipReason::CatchUpSkip, at(1), at(5), 5)]);
    let p = plan(&every_minute(CatchUp::Latest), &tick(Some(last), now));
    assert_eq!(p.submit, [on_time(at(5))]);
    assert_eq!(p.skipped, [run(SkipReason::CatchUpSkip, at(1), at(4), 4)]);
    let all = CatchUp::All {
        max: 10,
        window_ms: 3_600_000,
    };
    let p = plan(&every_minute(all), &tick(Some(last), now));
    assert_eq!(
        p.submit,
        [
            backfill(at(1)),
            backfill(at(2)),
            backfill(at(3)),
            backfill(at(4)),
            on_time(at(5))
        ]
    );
    let all = CatchUp::All {
        max: 2,
        window_ms: 180_000,
    };
    let p = plan(&every_minute(all), &tick(Some(last), now));
    assert_eq!(p.submit, [backfill(at(4)), on_time(at(5))]);
    assert_eq!(
        p.skipped,
        [
            run(SkipReason::CatchUpWindow, at(1), at(2), 2),
            run(SkipReason::CatchUpMax, at(3), at(3), 1)
        ]
    );
}
