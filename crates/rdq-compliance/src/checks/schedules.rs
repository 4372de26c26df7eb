//! Periodic schedules: each due time is submitted once however many nodes
//! tick at the same virtual instants; catch-up after a gap, overlap with the
//! previous task, pausing, changing and deleting behave as
//! `docs/schedules.md` states. A store without schedules says so, and the
//! engine refuses with `UNSUPPORTED`.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use futures::future::join_all;
use rdq_engine::{
    Engine, FIRE_BATCH, FireOutcome, FireReport, FireRequest, ListQuery, QueuePolicy,
    ScheduleOwner, SchedulePut, Settlement, Store, SubmitRequest, Submitted,
};
use rdq_envelope::{Envelope, Timestamp};
use rdq_schedule::{
    BACKFILLED_HEADER, CatchUp, Overlap, SCHEDULE_DUE_HEADER, SCHEDULE_HEADER, Schedule, Spec,
    TaskTemplate,
};

use crate::StoreFactory;
use crate::harness::{Harness, START_MS, code_of, test_policy};

/// The grace every tick here runs with: a one-second tick.
const GRACE_MS: u64 = 1_000;

const MINUTE: i64 = 60_000;

/// The `k`-th whole minute after the checks' start instant.
fn minute(k: i64) -> i64 {
    START_MS - START_MS.rem_euclid(MINUTE) + MINUTE * (k + 1)
}

fn instant(ms: i64) -> Timestamp {
    Timestamp::from_unix_ms(ms).expect("a representable instant")
}

/// A schedule submitting a small task to `queue` every minute, on the minute.
fn every_minute(name: &str, queue: &str) -> Schedule {
    Schedule {
        name: name.to_owned(),
        task: TaskTemplate {
            queue: queue.to_owned(),
            handler_ref: "compliance.noop".to_owned(),
            payload: br#"{"n":1}"#.to_vec(),
            payload_content_type: "application/json".to_owned(),
            headers: BTreeMap::new(),
            priority: 0,
            flow_key: None,
        },
        spec: Spec::EveryMs(60_000),
        tz: "UTC".to_owned(),
        start_ms: None,
        end_ms: None,
        paused: false,
        overlap: Overlap::Allow,
        catch_up: CatchUp::Latest,
    }
}

/// True (after checking the refusal) when the store has no schedules: the
/// engine must answer `UNSUPPORTED` and the check has nothing more to do.
async fn lacks_schedules(h: &Harness, check: &str) -> bool {
    if h.caps().schedules {
        return false;
    }
    let refused = h
        .engine
        .put_schedule(
            every_minute("compliance.none", "sched.none"),
            ScheduleOwner::Api,
        )
        .await;
    assert_eq!(
        code_of(&refused),
        "UNSUPPORTED",
        "a store without schedules says so"
    );
    assert_eq!(
        code_of(&h.engine.fire_due(h.now(), GRACE_MS).await),
        "UNSUPPORTED"
    );
    eprintln!("rdq-compliance: {check}: the store declares no schedules, and refuses them");
    true
}

/// A fire as the store holds it: the schedule, the due time, whether it was
/// backfilled, and the task.
#[derive(Debug, Clone)]
struct Fired {
    schedule: String,
    due: String,
    backfilled: bool,
    task: Envelope,
}

/// Every task in `queue` a schedule submitted, oldest first.
async fn fired_in(h: &Harness, queue: &str) -> Vec<Fired> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = h
            .engine
            .list(&ListQuery {
                queue: queue.to_owned(),
                cursor,
                ..ListQuery::default()
            })
            .await
            .expect("list the queue");
        for env in page.items {
            let Some(schedule) = env.headers.get(SCHEDULE_HEADER).cloned() else {
                continue;
            };
            out.push(Fired {
                schedule,
                due: env
                    .headers
                    .get(SCHEDULE_DUE_HEADER)
                    .cloned()
                    .expect("a fired task carries its due time"),
                backfilled: env.headers.get(BACKFILLED_HEADER).map(String::as_str) == Some("true"),
                task: env,
            });
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    out.sort_by(|a, b| a.due.cmp(&b.due));
    out
}

/// The due times, as the header spells them, of minutes `ks`.
fn dues(ks: &[i64]) -> Vec<String> {
    ks.iter().map(|&k| instant(minute(k)).to_string()).collect()
}

/// The due times `fired` holds for `schedule`, with their backfill flags.
fn of(fired: &[Fired], schedule: &str) -> Vec<(String, bool)> {
    fired
        .iter()
        .filter(|f| f.schedule == schedule)
        .map(|f| (f.due.clone(), f.backfilled))
        .collect()
}

/// Ticks every engine at once at the virtual now (and each `skew_ms` off it).
async fn race(engines: &[Engine], now: Timestamp, skews_ms: &[i64]) -> Vec<FireReport> {
    let ticks = engines.iter().zip(skews_ms).map(|(engine, &skew)| {
        let at = instant(now.unix_ms() + skew);
        async move { engine.fire_due(at, GRACE_MS).await.expect("a tick") }
    });
    join_all(ticks).await
}

/// Five schedulers (engines on one store, one of them 700 ms behind) tick
/// a schedule due every second at the same virtual instants, concurrently:
/// every due time from the schedule's creation on is submitted exactly
/// once, each with its own idempotency key and due-time header, and the
/// schedulers' reports add up to the tasks stored.
pub async fn schedules_fire_each_due_time_once_across_racing_nodes(factory: StoreFactory) {
    const QUEUE: &str = "sched.race";
    let h = Harness::new(&factory).await;
    if lacks_schedules(&h, "schedules_fire_each_due_time_once_across_racing_nodes").await {
        return;
    }
    let mut schedule = every_minute("race.every-second", QUEUE);
    schedule.spec = Spec::EveryMs(1_000);
    schedule.catch_up = CatchUp::All {
        max: 1_000,
        window_ms: 3_600_000,
    };
    h.engine
        .put_schedule(schedule, ScheduleOwner::Code)
        .await
        .expect("put");
    let store: Arc<dyn Store> = h.store.clone();
    let engines: Vec<Engine> = (0..5)
        .map(|_| Engine::new(store.clone(), h.clock.clone()).with_fallback_policy(test_policy()))
        .collect();
    let skews = [0, 0, 0, 0, -700];
    let mut created = 0;
    let mut raced = 0;
    // Steps of 0.3 to 2.3 s: on time, and late enough to catch up.
    for step in 0..24u64 {
        h.advance(300 + (step * 700) % 2_000);
        for report in race(&engines, h.now(), &skews).await {
            assert!(
                report.failed.is_empty(),
                "no fire fails: {:?}",
                report.failed
            );
            created += report.fired.iter().filter(|f| f.created).count();
            raced += report.raced;
        }
    }
    let fired = fired_in(&h, QUEUE).await;
    let unique: HashSet<&str> = fired.iter().map(|f| f.due.as_str()).collect();
    assert_eq!(unique.len(), fired.len(), "a due time was submitted twice");
    let expected = (h.now().unix_ms() / 1_000 - START_MS / 1_000) as usize;
    assert_eq!(fired.len(), expected, "every due time since creation, once");
    assert_eq!(created, fired.len(), "the reports count what was stored");
    let info = h
        .engine
        .get_schedule("race.every-second")
        .await
        .expect("get");
    assert_eq!(info.fires, fired.len() as u64);
    assert_eq!(info.owner, ScheduleOwner::Code);
    assert_eq!(info.last_fired_task, fired.last().map(|f| f.task.id));
    assert_eq!(
        info.last_due_ms,
        Some(h.now().unix_ms() / 1_000 * 1_000),
        "the cursor stands at the latest due time"
    );
    eprintln!(
        "rdq-compliance: {} ticks lost a race, as they should",
        raced
    );
}

/// A store handed many fires at once applies each from its own expected
/// cursor: a fire planned from the stored cursor submits and records, one
/// planned from a stale cursor or for a schedule that is gone changes
/// nothing, and a fire of skips alone counts them. Then three nodes tick
/// more schedules than one batch holds, at the same instants: every due
/// time of every schedule is submitted once.
pub async fn many_fires_apply_each_from_its_own_cursor(factory: StoreFactory) {
    const QUEUE: &str = "sched.batch";
    let h = Harness::new(&factory).await;
    if lacks_schedules(&h, "many_fires_apply_each_from_its_own_cursor").await {
        return;
    }
    for name in ["batch.a", "batch.b", "batch.c"] {
        h.engine
            .put_schedule(every_minute(name, QUEUE), ScheduleOwner::Api)
            .await
            .expect("put");
    }
    let policy = h.engine.policy(QUEUE).await.expect("policy");
    let task = |key: &str| {
        h.engine
            .build(
                &SubmitRequest {
                    queue: QUEUE.to_owned(),
                    handler_ref: "compliance.noop".to_owned(),
                    payload: b"{}".to_vec(),
                    payload_content_type: "application/json".to_owned(),
                    idempotency_key: Some(key.to_owned()),
                    ..SubmitRequest::default()
                },
                &policy,
            )
            .expect("a task")
    };
    let fire =
        |name: &str, expected: Option<i64>, tasks, skipped: Vec<(String, u64)>| FireRequest {
            name: name.to_owned(),
            expected_last_due_ms: expected,
            last_due_ms: minute(0),
            tasks,
            skipped,
            now_ms: h.now().unix_ms(),
        };
    let fires = [
        fire("batch.a", None, vec![task("batch.a:0")], Vec::new()),
        fire(
            "batch.b",
            Some(minute(-5)),
            vec![task("batch.b:0")],
            Vec::new(),
        ),
        fire("batch.gone", None, vec![task("batch.gone:0")], Vec::new()),
        fire("batch.c", None, Vec::new(), vec![("paused".to_owned(), 2)]),
    ];
    let store = h.store.as_schedules().expect("a store with schedules");
    let outcomes = store.fire_schedules(&fires).await;
    assert_eq!(outcomes.len(), fires.len(), "one outcome per fire");
    let a_task = match &outcomes[0] {
        Ok(FireOutcome::Fired(results)) => match results.as_slice() {
            [Ok(Submitted::Created(env))] => env.id,
            other => panic!("the won fire submits its task: {other:?}"),
        },
        other => panic!("a fire from the stored cursor applies: {other:?}"),
    };
    assert!(
        matches!(outcomes[1], Ok(FireOutcome::Raced)),
        "a stale cursor changes nothing: {:?}",
        outcomes[1]
    );
    assert!(
        matches!(outcomes[2], Ok(FireOutcome::Raced)),
        "a schedule that is gone changes nothing: {:?}",
        outcomes[2]
    );
    assert!(
        matches!(&outcomes[3], Ok(FireOutcome::Fired(r)) if r.is_empty()),
        "a fire of skips alone applies: {:?}",
        outcomes[3]
    );
    let stored: Vec<Envelope> = h
        .engine
        .list(&ListQuery {
            queue: QUEUE.to_owned(),
            ..ListQuery::default()
        })
        .await
        .expect("list")
        .items;
    assert_eq!(
        stored.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![a_task],
        "only the won fire's task is stored"
    );
    let a = h.engine.get_schedule("batch.a").await.expect("get");
    assert_eq!(
        (a.last_due_ms, a.fires, a.last_fired_task),
        (Some(minute(0)), 1, Some(a_task))
    );
    let b = h.engine.get_schedule("batch.b").await.expect("get");
    assert_eq!(
        (b.last_due_ms, b.fires),
        (None, 0),
        "the raced fire left no trace"
    );
    let c = h.engine.get_schedule("batch.c").await.expect("get");
    assert_eq!(c.last_due_ms, Some(minute(0)));
    assert_eq!(c.skips.get("paused"), Some(&2));
    assert_eq!((c.fires, c.last_fired_task), (0, None));

    // More schedules than a batch, ticked by three nodes at once.
    const MANY: usize = 2 * FIRE_BATCH + 37;
    const MANY_QUEUE: &str = "sched.batch-many";
    for i in 0..MANY {
        h.engine
            .put_schedule(
                every_minute(&format!("many.{i:04}"), MANY_QUEUE),
                ScheduleOwner::Api,
            )
            .await
            .expect("put");
    }
    let engines: Vec<Engine> = (0..3)
        .map(|_| Engine::new(h.store.clone(), h.clock.clone()).with_fallback_policy(test_policy()))
        .collect();
    let mut created = 0;
    for k in 1..=3 {
        h.clock.set(instant(minute(k) + 5));
        for report in race(&engines, h.now(), &[0, 0, 0]).await {
            assert!(
                report.failed.is_empty(),
                "no fire fails: {:?}",
                report.failed
            );
            created += report
                .fired
                .iter()
                .filter(|f| f.created && f.schedule.starts_with("many."))
                .count();
        }
    }
    let fired = fired_in(&h, MANY_QUEUE).await;
    let unique: HashSet<(&str, &str)> = fired
        .iter()
        .map(|f| (f.schedule.as_str(), f.due.as_str()))
        .collect();
    assert_eq!(unique.len(), fired.len(), "a due time was submitted twice");
    assert_eq!(fired.len(), 3 * MANY, "three due times of every schedule");
    assert_eq!(created, fired.len(), "the reports count what was stored");
}

/// Pausing and resuming are a compare-and-swap on the definition: a
/// replace from a stale read (or of a schedule that is gone) changes
/// nothing, and pauses racing puts never undo a put.
pub async fn a_pause_racing_a_put_undoes_nothing(factory: StoreFactory) {
    const QUEUE: &str = "sched.pause-race";
    const NAME: &str = "pause.race";
    let h = Harness::new(&factory).await;
    if lacks_schedules(&h, "a_pause_racing_a_put_undoes_nothing").await {
        return;
    }
    let original = every_minute(NAME, QUEUE);
    h.engine
        .put_schedule(original.clone(), ScheduleOwner::Api)
        .await
        .expect("put");
    let store = h.store.as_schedules().expect("a store with schedules");
    let read = store
        .get_schedule(NAME)
        .await
        .expect("get")
        .expect("stored");
    // A put lands after the read.
    let mut changed = original.clone();
    changed.spec = Spec::EveryMs(120_000);
    h.engine
        .put_schedule(changed.clone(), ScheduleOwner::Api)
        .await
        .expect("put");
    let replace = |schedule: &Schedule| SchedulePut {
        name: NAME.to_owned(),
        queue: QUEUE.to_owned(),
        owner: ScheduleOwner::Api,
        definition: serde_json::to_string(schedule).expect("json"),
        now_ms: h.now().unix_ms(),
    };
    let mut stale = original.clone();
    stale.paused = true;
    assert!(
        !store
            .replace_schedule_if(&replace(&stale), &read.definition)
            .await
            .expect("replace"),
        "a replace from a stale read replaces nothing"
    );
    let info = h.engine.get_schedule(NAME).await.expect("get");
    assert_eq!(
        (info.schedule.spec.clone(), info.schedule.paused),
        (changed.spec.clone(), false)
    );
    let current = store
        .get_schedule(NAME)
        .await
        .expect("get")
        .expect("stored");
    let mut paused = changed.clone();
    paused.paused = true;
    assert!(
        store
            .replace_schedule_if(&replace(&paused), &current.definition)
            .await
            .expect("replace"),
        "a replace from the stored definition applies"
    );
    let info = h.engine.get_schedule(NAME).await.expect("get");
    assert_eq!(
        (info.schedule.spec.clone(), info.schedule.paused),
        (changed.spec.clone(), true)
    );
    assert_eq!(
        info.created_at_ms, read.created_at_ms,
        "the creation time stays"
    );
    let mut gone = paused.clone();
    gone.name = "pause.gone".to_owned();
    let mut put_gone = replace(&gone);
    put_gone.name = gone.name.clone();
    assert!(
        !store
            .replace_schedule_if(&put_gone, &current.definition)
            .await
            .expect("replace"),
        "a schedule that is gone is not created"
    );
    assert_eq!(
        code_of(&h.engine.get_schedule("pause.gone").await),
        "SCHEDULE_NOT_FOUND"
    );

    // Pauses and resumes racing puts: the put always stands.
    for i in 0..12u64 {
        let mut next = original.clone();
        next.spec = Spec::EveryMs(60_000 * (i + 2));
        let (put, paused) = futures::join!(
            h.engine.put_schedule(next.clone(), ScheduleOwner::Api),
            h.engine.set_schedule_paused(NAME, i % 2 == 0),
        );
        put.expect("put");
        paused.expect("pause or resume");
        let info = h.engine.get_schedule(NAME).await.expect("get");
        assert_eq!(info.schedule.spec, next.spec, "a pause undid a put");
    }
    assert_eq!(
        code_of(&h.engine.set_schedule_paused("pause.gone", true).await),
        "SCHEDULE_NOT_FOUND"
    );
}

/// After a gap with no tick, each catch-up policy submits what
/// `docs/schedules.md`'s table says, backfills flagged, and counts the rest
/// as skipped by reason.
pub async fn schedules_catch_up_after_a_gap_by_policy(factory: StoreFactory) {
    const QUEUE: &str = "sched.catch-up";
    let h = Harness::new(&factory).await;
    if lacks_schedules(&h, "schedules_catch_up_after_a_gap_by_policy").await {
        return;
    }
    h.clock.set(instant(minute(0)));
    let policies = [
        ("catch.skip", CatchUp::Skip),
        ("catch.latest", CatchUp::Latest),
        (
            "catch.all",
            CatchUp::All {
                max: 10,
                window_ms: 3_600_000,
            },
        ),
        (
            "catch.all-bounded",
            CatchUp::All {
                max: 2,
                window_ms: 180_000,
            },
        ),
    ];
    for (name, catch_up) in policies {
        let mut s = every_minute(name, QUEUE);
        s.catch_up = catch_up;
        h.engine
            .put_schedule(s, ScheduleOwner::Api)
            .await
            .expect("put");
    }
    // Due at its creation instant: each fires minute 0 on time.
    let first = h.engine.fire_due(h.now(), GRACE_MS).await.expect("tick");
    assert_eq!(first.fired.len(), 4, "{first:?}");
    // No tick for five and a half minutes.
    h.clock.set(instant(minute(5) + 30_000));
    let report = h.engine.fire_due(h.now(), GRACE_MS).await.expect("tick");
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    let fired = fired_in(&h, QUEUE).await;
    let plain = |ks: &[i64], backfilled: &[i64]| -> Vec<(String, bool)> {
        ks.iter()
            .map(|&k| (dues(&[k]).remove(0), backfilled.contains(&k)))
            .collect()
    };
    assert_eq!(of(&fired, "catch.skip"), plain(&[0], &[]));
    assert_eq!(of(&fired, "catch.latest"), plain(&[0, 5], &[]));
    assert_eq!(
        of(&fired, "catch.all"),
        plain(&[0, 1, 2, 3, 4, 5], &[1, 2, 3, 4])
    );
    assert_eq!(of(&fired, "catch.all-bounded"), plain(&[0, 4, 5], &[4]));
    let engine = &h.engine;
    let skips =
        |name: &'static str| async move { engine.get_schedule(name).await.expect("get").skips };
    let counted = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
        pairs.iter().map(|&(r, n)| (r.to_owned(), n)).collect()
    };
    assert_eq!(skips("catch.skip").await, counted(&[("catch_up_skip", 5)]));
    assert_eq!(
        skips("catch.latest").await,
        counted(&[("catch_up_skip", 4)])
    );
    assert_eq!(skips("catch.all").await, counted(&[]));
    assert_eq!(
        skips("catch.all-bounded").await,
        counted(&[("catch_up_window", 2), ("catch_up_max", 1)])
    );
    let by_reason = report.skipped_by_reason();
    assert_eq!(by_reason.get("catch_up_skip"), Some(&9));
    // Nothing more is due within the minute.
    let again = h.engine.fire_due(h.now(), GRACE_MS).await.expect("tick");
    assert!(again.fired.is_empty() && again.skipped.is_empty());
}

/// Overlap policies read the previous fire's task: `skip_if_unfinished`
/// waits while it is pending or running, `skip_if_pending` only while it
/// waits, `skip_if_running` only while a worker holds it; a finished task
/// never blocks.
pub async fn schedules_overlap_policies_read_the_previous_task(factory: StoreFactory) {
    let policy = QueuePolicy {
        lease_ms: 3_600_000,
        ..test_policy()
    };
    let h = Harness::with_policy(&factory, policy).await;
    if lacks_schedules(&h, "schedules_overlap_policies_read_the_previous_task").await {
        return;
    }
    h.clock.set(instant(minute(0)));
    for (name, overlap) in [
        ("overlap.unfinished", Overlap::SkipIfUnfinished),
        ("overlap.pending", Overlap::SkipIfPending),
        ("overlap.running", Overlap::SkipIfRunning),
    ] {
        let mut s = every_minute(name, name);
        s.overlap = overlap;
        h.engine
            .put_schedule(s, ScheduleOwner::Api)
            .await
            .expect("put");
    }
    let (engine, clock) = (&h.engine, &h.clock);
    let tick = |k: i64| {
        clock.set(instant(minute(k)));
        async move { engine.fire_due(engine.now(), GRACE_MS).await.expect("tick") }
    };
    let fired_of = |report: &FireReport, name: &str| {
        report.fired.iter().filter(|f| f.schedule == name).count()
    };
    let skipped_of = |report: &FireReport, name: &str| {
        report
            .skipped
            .iter()
            .filter(|s| s.schedule == name)
            .map(|s| s.skipped.reason.as_str())
            .collect::<Vec<_>>()
    };
    // Minute 0: each fires its first task.
    let r = tick(0).await;
    assert_eq!(r.fired.len(), 3, "{r:?}");
    // Minute 1: every previous task is pending.
    let r = tick(1).await;
    assert_eq!(skipped_of(&r, "overlap.unfinished"), ["overlap_unfinished"]);
    assert_eq!(skipped_of(&r, "overlap.pending"), ["overlap_pending"]);
    assert_eq!(
        fired_of(&r, "overlap.running"),
        1,
        "pending does not block it"
    );
    // Workers take every task: the previous tasks are running.
    let unfinished = h.claim("overlap.unfinished", 10).await;
    assert_eq!(unfinished.len(), 1);
    assert_eq!(h.claim("overlap.pending", 10).await.len(), 1);
    assert_eq!(h.claim("overlap.running", 10).await.len(), 2);
    let r = tick(2).await;
    assert_eq!(skipped_of(&r, "overlap.unfinished"), ["overlap_unfinished"]);
    assert_eq!(
        fired_of(&r, "overlap.pending"),
        1,
        "running does not block it"
    );
    assert_eq!(skipped_of(&r, "overlap.running"), ["overlap_running"]);
    // The unfinished one's task succeeds: the next due time fires.
    h.settle(&unfinished[0], Settlement::Success).await;
    let r = tick(3).await;
    assert_eq!(fired_of(&r, "overlap.unfinished"), 1, "{r:?}");
    let info = h
        .engine
        .get_schedule("overlap.unfinished")
        .await
        .expect("get");
    assert_eq!(info.fires, 2);
    assert_eq!(info.skips.get("overlap_unfinished"), Some(&2));
    assert_eq!(info.last_due_ms, Some(minute(3)));
}

/// A paused schedule submits nothing and counts the due times it passes as
/// `paused`; resumed, it fires from the next due time on, without catching
/// up, whether or not a tick saw the pause.
pub async fn a_paused_schedule_skips_and_resumes_without_catching_up(factory: StoreFactory) {
    const QUEUE: &str = "sched.pause";
    const NAME: &str = "pause.every-minute";
    let h = Harness::new(&factory).await;
    if lacks_schedules(
        &h,
        "a_paused_schedule_skips_and_resumes_without_catching_up",
    )
    .await
    {
        return;
    }
    let mut s = every_minute(NAME, QUEUE);
    s.catch_up = CatchUp::All {
        max: 100,
        window_ms: 3_600_000,
    };
    let at = |ms: i64| h.clock.set(instant(ms));
    at(minute(0));
    h.engine
        .put_schedule(s.clone(), ScheduleOwner::Api)
        .await
        .expect("put");
    h.engine.fire_due(h.now(), GRACE_MS).await.expect("tick");
    at(minute(0) + 10_000);
    s.paused = true;
    h.engine
        .put_schedule(s.clone(), ScheduleOwner::Api)
        .await
        .expect("pause");
    for k in 1..=3 {
        at(minute(k));
        let r = h.engine.fire_due(h.now(), GRACE_MS).await.expect("tick");
        assert!(r.fired.is_empty(), "a paused schedule submits nothing");
    }
    at(minute(3) + 30_000);
    s.paused = false;
    h.engine
        .put_schedule(s.clone(), ScheduleOwner::Api)
        .await
        .expect("resume");
    let r = h.engine.fire_due(h.now(), GRACE_MS).await.expect("tick");
    assert!(r.fired.is_empty(), "resuming catches nothing up: {r:?}");
    at(minute(4));
    h.engine.fire_due(h.now(), GRACE_MS).await.expect("tick");
    // Paused and resumed with no tick between: still nothing caught up.
    at(minute(4) + 10_000);
    s.paused = true;
    h.engine
        .put_schedule(s.clone(), ScheduleOwner::Api)
        .await
        .expect("pause");
    at(minute(6) + 30_000);
    s.paused = false;
    h.engine
        .put_schedule(s.clone(), ScheduleOwner::Api)
        .await
        .expect("resume");
    at(minute(6) + 31_000);
    let r = h.engine.fire_due(h.now(), GRACE_MS).await.expect("tick");
    assert!(r.fired.is_empty(), "resuming catches nothing up: {r:?}");
    at(minute(7));
    h.engine.fire_due(h.now(), GRACE_MS).await.expect("tick");
    let fired = fired_in(&h, QUEUE).await;
    assert_eq!(
        of(&fired, NAME),
        dues(&[0, 4, 7])
            .into_iter()
            .map(|d| (d, false))
            .collect::<Vec<_>>()
    );
    let info = h.engine.get_schedule(NAME).await.expect("get");
    assert_eq!(info.skips.get("paused"), Some(&3));
    assert_eq!(info.fires, 3);
}

/// A schedule changed between two due times keeps its cursor: the due time
/// already fired is not fired again, the new definition (spec, headers,
/// queue) applies from the change on, and no due time of it before the
/// change is fired or counted.
pub async fn a_changed_schedule_keeps_its_cursor(factory: StoreFactory) {
    const NAME: &str = "change.me";
    let h = Harness::new(&factory).await;
    if lacks_schedules(&h, "a_changed_schedule_keeps_its_cursor").await {
        return;
    }
    let at = |ms: i64| h.clock.set(instant(ms));
    let mut s = every_minute(NAME, "sched.change.a");
    s.catch_up = CatchUp::All {
        max: 100,
        window_ms: 3_600_000,
    };
    s.task.headers.insert("version".into(), "1".into());
    at(minute(0));
    let put = h
        .engine
        .put_schedule(s.clone(), ScheduleOwner::Api)
        .await
        .expect("put");
    assert_eq!(put.next_due_ms, Some(minute(0)));
    h.engine.fire_due(h.now(), GRACE_MS).await.expect("tick");
    at(minute(1));
    h.engine.fire_due(h.now(), GRACE_MS).await.expect("tick");
    // Between minute 1 and 2: every two minutes, version 2, another queue.
    at(minute(1) + 20_000);
    s.spec = Spec::EveryMs(120_000);
    s.task.queue = "sched.change.b".into();
    s.task.headers.insert("version".into(), "2".into());
    let changed = h
        .engine
        .put_schedule(s.clone(), ScheduleOwner::Api)
        .await
        .expect("change");
    assert_eq!(changed.last_due_ms, Some(minute(1)), "the cursor is kept");
    assert_eq!(changed.fires, 2, "the counters are kept");
    assert_eq!(changed.created_at_ms, minute(0));
    assert_eq!(changed.updated_at_ms, minute(1) + 20_000);
    for k in 2..=6 {
        at(minute(k));
        let r = h.engine.fire_due(h.now(), GRACE_MS).await.expect("tick");
        assert!(r.failed.is_empty(), "{:?}", r.failed);
    }
    let before = fired_in(&h, "sched.change.a").await;
    assert_eq!(
        of(&before, NAME),
        dues(&[0, 1])
            .into_iter()
            .map(|d| (d, false))
            .collect::<Vec<_>>()
    );
    assert!(before.iter().all(|f| f.task.headers["version"] == "1"));
    let after = fired_in(&h, "sched.change.b").await;
    let even: Vec<i64> = (2..=6)
        .filter(|&k| minute(k).rem_euclid(120_000) == 0)
        .collect();
    assert_eq!(
        of(&after, NAME),
        dues(&even)
            .into_iter()
            .map(|d| (d, false))
            .collect::<Vec<_>>()
    );
    assert!(after.iter().all(|f| f.task.headers["version"] == "2"));
    let info = h.engine.get_schedule(NAME).await.expect("get");
    assert!(
        info.skips.is_empty(),
        "nothing was skipped: {:?}",
        info.skips
    );
    assert_eq!(h.engine.list_schedules().await.expect("list").len(), 1);
}

/// A schedule that breaks a rule is refused with the rule's code and stores
/// nothing; a deleted schedule fires no more, and deleting or reading it
/// again answers `SCHEDULE_NOT_FOUND`; its tasks stay.
pub async fn a_deleted_or_invalid_schedule_fires_nothing(factory: StoreFactory) {
    const QUEUE: &str = "sched.delete";
    const NAME: &str = "delete.me";
    let h = Harness::new(&factory).await;
    if lacks_schedules(&h, "a_deleted_or_invalid_schedule_fires_nothing").await {
        return;
    }
    let mut bad = every_minute(NAME, QUEUE);
    bad.spec = Spec::Cron("61 * * * *".into());
    let refused = h.engine.put_schedule(bad, ScheduleOwner::Api).await;
    assert_eq!(code_of(&refused), "INVALID_CRON");
    let mut bad = every_minute(NAME, QUEUE);
    bad.tz = "Mars/Olympus_Mons".into();
    let refused = h.engine.put_schedule(bad, ScheduleOwner::Api).await;
    assert_eq!(code_of(&refused), "UNKNOWN_TIME_ZONE");
    let mut bad = every_minute("Bad Name", QUEUE);
    bad.catch_up = CatchUp::Latest;
    let refused = h.engine.put_schedule(bad, ScheduleOwner::Api).await;
    assert_eq!(code_of(&refused), "INVALID_SCHEDULE_NAME");
    assert_eq!(
        code_of(&h.engine.get_schedule(NAME).await),
        "SCHEDULE_NOT_FOUND"
    );
    assert!(h.engine.list_schedules().await.expect("list").is_empty());

    h.clock.set(instant(minute(0)));
    h.engine
        .put_schedule(every_minute(NAME, QUEUE), ScheduleOwner::Api)
        .await
        .expect("put");
    let r = h.engine.fire_due(h.now(), GRACE_MS).await.expect("tick");
    assert_eq!(r.fired.len(), 1);
    h.engine.delete_schedule(NAME).await.expect("delete");
    h.clock.set(instant(minute(1)));
    let r = h.engine.fire_due(h.now(), GRACE_MS).await.expect("tick");
    assert_eq!((r.schedules, r.fired.len()), (0, 0), "{r:?}");
    assert_eq!(
        code_of(&h.engine.delete_schedule(NAME).await),
        "SCHEDULE_NOT_FOUND"
    );
    assert_eq!(
        code_of(&h.engine.get_schedule(NAME).await),
        "SCHEDULE_NOT_FOUND"
    );
    assert_eq!(fired_in(&h, QUEUE).await.len(), 1, "its task stays");
}
