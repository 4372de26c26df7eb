//! Properties of due times and plans over random specs, zones and instants,
//! biased towards the days zones change their offset.

use jiff::Timestamp;
use jiff::tz::TimeZone;
use proptest::prelude::*;
use rdq_schedule::{CatchUp, Overlap, RunState, Spec, Tick, Timing, ValidSchedule, plan};

use crate::schedule;

const ZONES: &[&str] = &[
    "UTC",
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "America/St_Johns",
    "Pacific/Chatham",
    "America/Sao_Paulo",
    "Asia/Kolkata",
];

const PATTERNS: &[&str] = &[
    "* * * * *",
    "*/7 * * * *",
    "30 2 * * *",
    "0 1 * * *",
    "15,45 1-3 * * *",
    "0 */2 * * *",
    "*/20 * * * * *",
    "0 30 1 * * *",
    "45 1 * * SUN",
    "*/15 2 * * *",
    "0 0 L * *",
    "0 0 1 1 *",
];

const HOUR: i64 = 3_600_000;

/// 2000-01-01 to 2040-01-01, in ms.
const YEARS: std::ops::Range<i64> = 946_684_800_000..2_208_988_800_000;

/// An instant, half the time within six hours of a transition of `zone`.
fn instant(zone: &'static str) -> impl Strategy<Value = i64> {
    (YEARS, any::<bool>(), -6 * HOUR..6 * HOUR).prop_map(move |(base, near, jitter)| {
        if !near {
            return base;
        }
        let tz = TimeZone::get(zone).unwrap();
        let at = Timestamp::from_millisecond(base).unwrap();
        match tz.following(at).next() {
            Some(t) => t.timestamp().as_millisecond() + jitter,
            None => base,
        }
    })
}

fn cron_case() -> impl Strategy<Value = (&'static str, &'static str, i64)> {
    (prop::sample::select(ZONES), prop::sample::select(PATTERNS))
        .prop_flat_map(|(zone, pattern)| (Just(zone), Just(pattern), instant(zone)))
}

fn cron(pattern: &str, zone: &str) -> Timing {
    Timing::new(&Spec::Cron(pattern.to_owned()), zone, None, None).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn due_times_are_strictly_increasing((zone, pattern, at) in cron_case()) {
        let t = cron(pattern, zone);
        let dues = t.due_between(at, i64::MAX, 40);
        prop_assert!(!dues.is_empty());
        prop_assert!(dues[0] > at);
        prop_assert!(dues.windows(2).all(|w| w[0] < w[1]), "{dues:?}");
    }

    #[test]
    fn next_and_last_agree_with_due_between(
        (zone, pattern, at) in cron_case(),
        probes in prop::collection::vec(0..4 * HOUR, 8),
    ) {
        let t = cron(pattern, zone);
        let end = at + 4 * HOUR;
        let dues = t.due_between(at, end, 100_000);
        for (i, &d) in dues.iter().enumerate() {
            prop_assert_eq!(t.next_due_after(d - 1), Some(d));
            prop_assert_eq!(t.last_due_at_or_before(d), Some(d));
            if let Some(&next) = dues.get(i + 1) {
                prop_assert_eq!(t.next_due_after(d), Some(next));
                prop_assert_eq!(t.last_due_at_or_before(next - 1), Some(d));
            }
        }
        for p in probes {
            let x = at + p;
            let expect_last = dues.iter().rev().find(|&&d| d <= x).copied();
            match expect_last {
                Some(d) => prop_assert_eq!(t.last_due_at_or_before(x), Some(d)),
                None => prop_assert!(t.last_due_at_or_before(x).is_none_or(|d| d <= at)),
            }
            let expect_next = dues.iter().find(|&&d| d > x).copied();
            match expect_next {
                Some(d) => prop_assert_eq!(t.next_due_after(x), Some(d)),
                None => prop_assert!(t.next_due_after(x).is_none_or(|d| d > end)),
            }
        }
        prop_assert_eq!(
            t.count_between(at, end, u64::MAX),
            u64::try_from(dues.len()).unwrap()
        );
    }

    #[test]
    fn due_times_lie_within_start_and_end(
        (zone, pattern, start) in cron_case(),
        span in 1..48 * HOUR,
        probe in -24 * HOUR..72 * HOUR,
    ) {
        let end = start + span;
        let t = Timing::new(&Spec::Cron(pattern.to_owned()), zone, Some(start), Some(end)).unwrap();
        for d in t.due_between(start - 48 * HOUR, end + 48 * HOUR, 10_000) {
            prop_assert!((start..=end).contains(&d), "{d} outside [{start}, {end}]");
        }
        let x = start + probe;
        if let Some(d) = t.next_due_after(x) {
            prop_assert!(d > x && (start..=end).contains(&d));
        }
        if let Some(d) = t.last_due_at_or_before(x) {
            prop_assert!(d <= x && (start..=end).contains(&d));
        }
    }

    #[test]
    fn no_wall_time_fires_twice((zone, pattern, at) in cron_case()) {
        let t = cron(pattern, zone);
        let tz = TimeZone::get(zone).unwrap();
        let dues = t.due_between(at - 8 * HOUR, at + 8 * HOUR, 100_000);
        let walls: Vec<_> = dues
            .iter()
            .map(|&d| tz.to_datetime(Timestamp::from_millisecond(d).unwrap()))
            .collect();
        // Strictly increasing readings: a repeated hour is never fired twice.
        prop_assert!(walls.windows(2).all(|w| w[0] < w[1]), "{walls:?}");
    }

    #[test]
    fn interval_due_times_differ_by_exactly_every_ms(
        every in 1..=rdq_schedule::MAX_INTERVAL_MS,
        start in prop::option::of(YEARS),
        at in YEARS,
        zone in prop::sample::select(ZONES),
    ) {
        let t = Timing::new(&Spec::EveryMs(every), zone, start, None).unwrap();
        let dues = t.due_between(at, i64::MAX, 20);
        prop_assert_eq!(dues.len(), 20);
        let every = i64::try_from(every).unwrap();
        let anchor = start.unwrap_or(0);
        prop_assert!(dues.windows(2).all(|w| w[1] - w[0] == every));
        prop_assert!(dues.iter().all(|d| (d - anchor).rem_euclid(every) == 0));
        prop_assert!(dues[0] > at && dues[0] - every <= at.max(anchor - 1));
    }
}

#[derive(Debug, Clone)]
struct Step {
    gap_ms: i64,
    paused: bool,
    previous_run: Option<RunState>,
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        (30_000u64..2 * HOUR as u64).prop_map(Spec::EveryMs),
        prop::sample::select(&PATTERNS[..6]).prop_map(|p| Spec::Cron(p.to_owned())),
    ]
}

fn catch_up() -> impl Strategy<Value = CatchUp> {
    prop_oneof![
        Just(CatchUp::Skip),
        Just(CatchUp::Latest),
        (1u32..20, 1u64..(6 * HOUR as u64))
            .prop_map(|(max, window_ms)| CatchUp::All { max, window_ms }),
    ]
}

fn overlap() -> impl Strategy<Value = Overlap> {
    prop::sample::select(vec![
        Overlap::Allow,
        Overlap::SkipIfPending,
        Overlap::SkipIfRunning,
        Overlap::SkipIfUnfinished,
    ])
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop_oneof![0i64..2_000, 0i64..10 * 60_000, 0i64..6 * HOUR],
        prop::bool::weighted(0.15),
        prop::option::of(prop::sample::select(vec![
            RunState::Pending,
            RunState::Running,
            RunState::Finished,
            RunState::Unknown,
        ])),
    )
        .prop_map(|(gap_ms, paused, previous_run)| Step {
            gap_ms,
            paused,
            previous_run,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Ticks at random times, each fed the previous plan's cursor: no due
    /// time is submitted twice, and every due time up to the last tick is
    /// accounted for exactly once, submitted or skipped.
    #[test]
    fn plans_fed_their_own_output_never_fire_a_due_time_twice(
        spec in spec(),
        zone in prop::sample::select(ZONES),
        catch_up in catch_up(),
        overlap in overlap(),
        end_after in prop::option::of(HOUR..48 * HOUR),
        created in instant("America/New_York"),
        steps in prop::collection::vec(step(), 1..40),
        grace_ms in 0u64..5_000,
    ) {
        let mut s = schedule(spec);
        s.tz = zone.to_owned();
        s.catch_up = catch_up;
        s.overlap = overlap;
        s.end_ms = end_after.map(|e| created + e);
        let mut now = created;
        let mut cursor = None;
        let mut submitted = Vec::new();
        let mut accounted = Vec::new();
        for st in steps {
            now += st.gap_ms;
            s.paused = st.paused;
            let valid = ValidSchedule::new(s.clone()).unwrap();
            let p = plan(&valid, &Tick {
                now_ms: now,
                last_fired_due_ms: cursor,
                previous_run: st.previous_run,
                created_at_ms: created,
                grace_ms,
            });
            for f in &p.submit {
                prop_assert!(f.due_ms <= now);
                submitted.push(f.due_ms);
                accounted.push(f.due_ms);
            }
            for run in &p.skipped {
                let dues = valid.timing().due_between(run.first_due_ms - 1, run.last_due_ms, 1_000_000);
                prop_assert_eq!(u64::try_from(dues.len()).unwrap(), run.count);
                accounted.extend(dues);
            }
            if let Some(next) = p.next_due_ms {
                prop_assert!(next > now);
            }
            prop_assert!(p.last_due_ms >= cursor);
            cursor = p.last_due_ms;
        }
        prop_assert!(submitted.windows(2).all(|w| w[0] < w[1]), "{submitted:?}");
        accounted.sort_unstable();
        let all = ValidSchedule::new(s).unwrap().timing().due_between(created - 1, now, 1_000_000);
        prop_assert_eq!(accounted, all);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever a client sends as a pattern, it is parsed or refused with
    /// `INVALID_CRON`; nothing panics.
    #[test]
    fn any_cron_text_is_parsed_or_refused(
        pattern in r"([0-9*/,\-LW#?A-Za-z@]{0,6} ){0,7}[0-9*/,\-LW#?A-Za-z@]{0,6}",
        at in YEARS,
    ) {
        match Timing::new(&Spec::Cron(pattern), "UTC", None, None) {
            Ok(t) => {
                if let Some(d) = t.next_due_after(at) {
                    prop_assert!(d > at);
                }
            }
            Err(e) => prop_assert_eq!(e.code(), "INVALID_CRON"),
        }
    }
}
