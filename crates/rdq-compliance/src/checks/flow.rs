//! Flow control (`docs/flow-control.md`): a store that declares
//! `claim_flow` holds every per-key limit, rate and fairness promise in its
//! claim step, with many claimers at once; a store that does not refuses
//! flow limits with `UNSUPPORTED`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rdq_engine::{ClaimRequest, Claimed, FlowPolicy, QueuePolicy, Settlement, SubmitRequest};
use rdq_envelope::TaskId;
use serde_json::{Value, json};

use crate::StoreFactory;
use crate::harness::{Harness, code_of, task, test_policy};

const QUEUE: &str = "compliance.flow";

fn flow(doc: Value) -> FlowPolicy {
    QueuePolicy::from_json(json!({ "flow": doc }))
        .expect("a valid flow section")
        .flow
}

/// A harness whose queue runs under `doc` as its `flow` section, or `None`
/// (the check skips) when the store does not declare `claim_flow`.
async fn flow_harness(factory: &StoreFactory, check: &str, doc: Value) -> Option<Harness> {
    let policy = QueuePolicy {
        flow: flow(doc),
        ..test_policy()
    };
    let h = Harness::with_policy(factory, policy.clone()).await;
    if h.skips_unless(check, h.caps().claim_flow) {
        return None;
    }
    if h.caps().queue_config {
        h.engine
            .set_policy(QUEUE, &policy)
            .await
            .expect("set_policy");
    }
    Some(h)
}

/// Sets the queue's flow section (the store holds queue configuration: every
/// store that declares `claim_flow` does).
async fn set_flow(h: &Harness, doc: Value) {
    let policy = QueuePolicy {
        flow: flow(doc),
        ..test_policy()
    };
    h.engine
        .set_policy(QUEUE, &policy)
        .await
        .expect("set_policy");
}

fn keyed(key: &str) -> SubmitRequest {
    SubmitRequest {
        flow_key: Some(key.to_owned()),
        ..task(QUEUE)
    }
}

/// Submits `n` tasks of flow key `key`; returns their ids in order.
async fn submit_keyed(h: &Harness, key: &str, n: usize) -> Vec<TaskId> {
    let mut ids = Vec::with_capacity(n);
    let mut left = n;
    while left > 0 {
        let batch = left.min(100);
        left -= batch;
        for r in h.engine.submit_many(vec![keyed(key); batch]).await {
            ids.push(r.expect("submit").envelope().id);
        }
    }
    ids
}

fn key_of(c: &Claimed) -> String {
    rdq_engine::flow::key_of(&c.envelope).to_owned()
}

/// A store without `claim_flow` refuses a flow policy, a claim that carries
/// one, and a throttle, with `UNSUPPORTED`; one with it stores the task's
/// flow key as the `rdq.flow_key` header.
pub async fn flow_limits_hold_or_are_refused(factory: StoreFactory) {
    let h = Harness::new(&factory).await;
    let limits = flow(json!({"key_concurrency": 1, "fairness": "weighted"}));
    let submitted = h.submit(keyed("tenant-1")).await;
    assert_eq!(
        submitted.headers.get("rdq.flow_key").map(String::as_str),
        Some("tenant-1"),
        "the flow key is stored as the rdq.flow_key header"
    );
    if h.caps().claim_flow {
        return;
    }
    let request = ClaimRequest::new(QUEUE, 5, 1_000, h.now()).with_flow(limits.clone());
    assert_eq!(code_of(&h.store.claim(&request).await), "UNSUPPORTED");
    assert_eq!(
        code_of(&h.engine.throttle(QUEUE, Some("tenant-1"), h.now()).await),
        "UNSUPPORTED"
    );
    if h.caps().queue_config {
        let policy = QueuePolicy {
            flow: limits,
            ..test_policy()
        };
        assert_eq!(
            code_of(&h.engine.set_policy(QUEUE, &policy).await),
            "UNSUPPORTED",
            "a flow policy the store cannot hold is refused when it is set"
        );
    }
}

/// Many claimers at once under a per-key limit (with weighted fairness,
/// decided from the ledger; then in claim order under a global limit too,
/// a policy of counts only that PostgreSQL decides in one statement): no
/// key ever has more tasks in flight than its limit, nor the queue more
/// than its own, and every task runs once.
pub async fn key_concurrency_holds_under_concurrent_claimers(factory: StoreFactory) {
    const CHECK: &str = "key_concurrency_holds_under_concurrent_claimers";
    const LIMIT: u64 = 2;
    const GLOBAL: u64 = 4;
    let policies = [
        (
            json!({"key_concurrency": LIMIT, "fairness": "weighted"}),
            None,
        ),
        (
            json!({"key_concurrency": LIMIT, "concurrency": GLOBAL}),
            Some(GLOBAL),
        ),
    ];
    for (doc, global) in policies {
        let Some(h) = flow_harness(&factory, CHECK, doc.clone()).await else {
            return;
        };
        claim_concurrently(&h, LIMIT, global, &doc).await;
    }
}

/// Six claimers working three keys of 20 tasks each under `doc`: checks
/// the peaks per key (`limit`) and in all (`global`).
async fn claim_concurrently(h: &Harness, limit: u64, global: Option<u64>, doc: &Value) {
    let keys = ["a", "b", "c"];
    for key in keys {
        submit_keyed(h, key, 20).await;
    }
    let total = keys.len() * 20;
    // Per flow key, and `None` for the whole queue (`""` is the key of
    // tasks without one).
    let in_flight: Arc<Mutex<HashMap<Option<String>, u64>>> = Arc::default();
    let peak: Arc<Mutex<HashMap<Option<String>, u64>>> = Arc::default();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut claimers = Vec::new();
    for _ in 0..6 {
        let engine = h.engine.clone();
        let (in_flight, peak, done) = (in_flight.clone(), peak.clone(), done.clone());
        claimers.push(tokio::spawn(async move {
            use std::sync::atomic::Ordering::SeqCst;
            let mut idle = 0;
            while done.load(SeqCst) < total && idle < 2_000 {
                let claimed = engine.claim(QUEUE, 3, Some(60_000)).await.expect("claim");
                if claimed.is_empty() {
                    idle += 1;
                    tokio::task::yield_now().await;
                    continue;
                }
                idle = 0;
                {
                    // Counted up after the store handed them out and down
                    // before a settle frees the slot: never more than the
                    // store's own count.
                    let mut now = in_flight.lock().unwrap();
                    let mut peak = peak.lock().unwrap();
                    for c in &claimed {
                        for key in [Some(key_of(c)), None] {
                            let n = now.entry(key.clone()).or_default();
                            *n += 1;
                            let p = peak.entry(key).or_default();
                            *p = (*p).max(*n);
                        }
                    }
                }
                tokio::task::yield_now().await;
                for c in claimed {
                    {
                        let mut now = in_flight.lock().unwrap();
                        *now.get_mut(&Some(key_of(&c))).unwrap() -= 1;
                        *now.get_mut(&None).unwrap() -= 1;
                    }
                    engine
                        .settle(&c.envelope, c.token, Settlement::Success)
                        .await
                        .expect("settle");
                    done.fetch_add(1, SeqCst);
                }
            }
        }));
    }
    for c in claimers {
        c.await.expect("claimer");
    }
    assert_eq!(
        done.load(std::sync::atomic::Ordering::SeqCst),
        total,
        "every task ran once under {doc}"
    );
    let peak = peak.lock().unwrap();
    for key in keys {
        let p = peak.get(&Some(key.to_owned())).copied().unwrap_or(0);
        assert!(
            (1..=limit).contains(&p),
            "key {key} peaked at {p} in flight under a limit of {limit} ({doc})"
        );
    }
    if let Some(global) = global {
        let p = peak.get(&None).copied().unwrap_or(0);
        assert!(
            (1..=global).contains(&p),
            "the queue peaked at {p} in flight under a limit of {global} ({doc})"
        );
    }
}

/// The number of tasks started in any window never exceeds
/// `burst + rate × window`, and the bucket does hand out that much.
pub async fn the_rate_never_exceeds_burst_plus_rate_times_the_window(factory: StoreFactory) {
    const CHECK: &str = "the_rate_never_exceeds_burst_plus_rate_times_the_window";
    let Some(h) = flow_harness(
        &factory,
        CHECK,
        json!({"rate": {"per_second": 10, "burst": 5}}),
    )
    .await
    else {
        return;
    };
    h.submit_n(QUEUE, 60).await;
    // (virtual ms since start, tasks started then)
    let mut starts: Vec<(u64, usize)> = Vec::new();
    let mut elapsed = 0;
    while elapsed <= 3_000 {
        let claimed = h.claim(QUEUE, 50).await;
        if !claimed.is_empty() {
            starts.push((elapsed, claimed.len()));
        }
        for c in &claimed {
            h.settle(c, Settlement::Success).await;
        }
        h.advance(37);
        elapsed += 37;
    }
    for (i, &(from, _)) in starts.iter().enumerate() {
        let mut started = 0;
        for &(at, n) in &starts[i..] {
            started += n;
            let allowed = 5.0 + 10.0 * (at - from) as f64 / 1_000.0;
            assert!(
                started as f64 <= allowed + 1e-9,
                "{started} started between {from} ms and {at} ms; the bucket allows {allowed}"
            );
        }
    }
    let total: usize = starts.iter().map(|s| s.1).sum();
    assert!(
        total >= 5 + 29,
        "a rate of 10/s with a burst of 5 starts at least 34 tasks in 3 s, not {total}"
    );
}

/// A key with a huge backlog cannot starve a quiet key: under weighted
/// fairness the quiet key's task starts within one round over the keys.
pub async fn a_flooding_key_cannot_starve_a_quiet_key(factory: StoreFactory) {
    const CHECK: &str = "a_flooding_key_cannot_starve_a_quiet_key";
    let Some(h) = flow_harness(&factory, CHECK, json!({"fairness": "weighted"})).await else {
        return;
    };
    submit_keyed(&h, "loud", 300).await;
    // The loud key has been running a while before the quiet one shows up.
    for _ in 0..20 {
        for c in h.claim(QUEUE, 2).await {
            h.settle(&c, Settlement::Success).await;
        }
    }
    h.advance(1);
    let quiet = submit_keyed(&h, "quiet", 2).await;
    let mut before = 0;
    loop {
        let claimed = h.claim(QUEUE, 1).await;
        assert_eq!(claimed.len(), 1, "work is due");
        let c = &claimed[0];
        h.settle(c, Settlement::Success).await;
        if c.envelope.id == quiet[0] {
            break;
        }
        before += 1;
        assert!(
            before <= 2,
            "{before} loud tasks started before the quiet key's first"
        );
    }
}

/// A backlog spread over many keys (one tenant sharding its work) cannot
/// starve a key with a small one either: weighted fair queuing serves the
/// newcomer within one round over the keys with due work, where a per-key
/// cap alone would leave it behind the whole backlog.
pub async fn a_backlog_spread_over_many_keys_cannot_starve_a_quiet_key(factory: StoreFactory) {
    const CHECK: &str = "a_backlog_spread_over_many_keys_cannot_starve_a_quiet_key";
    const SHARDS: usize = 20;
    let Some(h) = flow_harness(&factory, CHECK, json!({"fairness": "weighted"})).await else {
        return;
    };
    for shard in 0..SHARDS {
        submit_keyed(&h, &format!("loud-{shard}"), 15).await;
    }
    for _ in 0..20 {
        for c in h.claim(QUEUE, 2).await {
            h.settle(&c, Settlement::Success).await;
        }
    }
    h.advance(1);
    let quiet = submit_keyed(&h, "quiet", 3).await;
    let mut started = Vec::new();
    let mut claims = 0;
    while started.len() < quiet.len() {
        let claimed = h.claim(QUEUE, 1).await;
        assert_eq!(claimed.len(), 1, "work is due");
        let c = &claimed[0];
        h.settle(c, Settlement::Success).await;
        claims += 1;
        if key_of(c) == "quiet" {
            started.push(claims);
        }
        assert!(
            claims <= 3 * (SHARDS + 1),
            "{claims} claims and the quiet key's tasks started at {started:?}: \
             a backlog over {SHARDS} keys held the quiet key back more than one round per task"
        );
    }
    assert!(
        started[0] <= SHARDS + 1,
        "the quiet key's first task was claim {} of a round of {}",
        started[0],
        SHARDS + 1
    );
}

/// A limit lowered while tasks are in flight holds for the next claims:
/// nothing more starts until enough have finished.
pub async fn a_lowered_limit_is_obeyed_by_the_next_claim(factory: StoreFactory) {
    const CHECK: &str = "a_lowered_limit_is_obeyed_by_the_next_claim";
    let Some(h) = flow_harness(&factory, CHECK, json!({"key_concurrency": 4})).await else {
        return;
    };
    submit_keyed(&h, "a", 10).await;
    let held = h.claim(QUEUE, 10).await;
    assert_eq!(held.len(), 4, "four at once under a limit of four");
    set_flow(&h, json!({"key_concurrency": 2})).await;
    h.settle(&held[0], Settlement::Success).await;
    assert!(
        h.claim(QUEUE, 10).await.is_empty(),
        "three in flight under a lowered limit of two: no room"
    );
    h.settle(&held[1], Settlement::Success).await;
    h.settle(&held[2], Settlement::Success).await;
    assert_eq!(
        h.claim(QUEUE, 10).await.len(),
        1,
        "one in flight leaves one"
    );
    set_flow(&h, json!({})).await;
    assert_eq!(
        h.claim(QUEUE, 10).await.len(),
        5,
        "with the limit gone the five left start"
    );
}

/// A deferral and a lapsed lease each give back exactly the slot their
/// claim took.
pub async fn a_deferral_and_a_lease_expiry_give_their_slot_back(factory: StoreFactory) {
    const CHECK: &str = "a_deferral_and_a_lease_expiry_give_their_slot_back";
    let Some(h) = flow_harness(&factory, CHECK, json!({"key_concurrency": 1})).await else {
        return;
    };
    submit_keyed(&h, "a", 3).await;
    let first = h.claim_one(QUEUE).await;
    assert!(
        h.claim(QUEUE, 5).await.is_empty(),
        "the key's one slot is taken"
    );
    h.settle(&first, Settlement::Defer { delay_ms: 60_000 })
        .await;
    let second = h.claim(QUEUE, 5).await;
    assert_eq!(second.len(), 1, "the deferral gave its slot back");
    assert_ne!(second[0].envelope.id, first.envelope.id);
    assert!(h.claim(QUEUE, 5).await.is_empty());
    h.advance(1_001);
    let reaped = h.engine.reap_expired(100).await.expect("reap");
    assert_eq!(reaped.len(), 1, "the lease lapsed");
    assert_eq!(
        h.claim(QUEUE, 5).await.len(),
        1,
        "the lapsed lease gave its slot back"
    );
}

/// A throttle passes over its key (or the whole queue) for every claimer
/// until its time, and the flow status shows it: under weighted fairness
/// (decided from the ledger) and under a policy of counts only (decided in
/// one statement on PostgreSQL, which must then see the throttle).
pub async fn a_throttle_passes_over_its_key_until_its_time(factory: StoreFactory) {
    const CHECK: &str = "a_throttle_passes_over_its_key_until_its_time";
    for doc in [
        json!({"fairness": "weighted"}),
        json!({"key_concurrency": 10, "concurrency": 20}),
    ] {
        let Some(h) = flow_harness(&factory, CHECK, doc).await else {
            return;
        };
        throttles_pass_over(&h).await;
    }
}

/// The body of [`a_throttle_passes_over_its_key_until_its_time`].
async fn throttles_pass_over(h: &Harness) {
    let a = submit_keyed(h, "a", 2).await;
    let b = submit_keyed(h, "b", 2).await;
    h.engine
        .throttle(QUEUE, Some("a"), h.now().plus_ms(1_000))
        .await
        .expect("throttle");
    // An earlier time never shortens a throttle.
    h.engine
        .throttle(QUEUE, Some("a"), h.now().plus_ms(10))
        .await
        .expect("throttle");
    let status = h.engine.flow_status(QUEUE).await.expect("flow status");
    let shown = status
        .keys
        .iter()
        .find(|k| k.key == "a")
        .expect("key a is listed");
    assert_eq!(shown.blocked_until, Some(h.now().plus_ms(1_000)));
    let claimed: Vec<TaskId> = h
        .claim(QUEUE, 10)
        .await
        .iter()
        .map(|c| c.envelope.id)
        .collect();
    assert_eq!(claimed.len(), 2, "only b's tasks start: {claimed:?}");
    assert!(claimed.iter().all(|id| b.contains(id)));
    h.advance(999);
    assert!(
        h.claim(QUEUE, 10).await.is_empty(),
        "a is throttled until its time"
    );
    h.advance(1);
    h.engine
        .throttle(QUEUE, None, h.now().plus_ms(500))
        .await
        .expect("throttle the queue");
    assert!(
        h.claim(QUEUE, 10).await.is_empty(),
        "the queue is throttled"
    );
    h.advance(500);
    let late: Vec<TaskId> = h
        .claim(QUEUE, 10)
        .await
        .iter()
        .map(|c| c.envelope.id)
        .collect();
    assert_eq!(late.len(), 2);
    assert!(late.iter().all(|id| a.contains(id)));
}

/// A claim that flow limits cut short (due tasks passed over for a key's
/// limit) is counted in the flow status, once per claim, whichever way the
/// store decides it.
pub async fn a_claim_cut_short_is_counted(factory: StoreFactory) {
    const CHECK: &str = "a_claim_cut_short_is_counted";
    for doc in [
        json!({"key_concurrency": 1, "fairness": "weighted"}),
        json!({"key_concurrency": 1}),
    ] {
        let Some(h) = flow_harness(&factory, CHECK, doc.clone()).await else {
            return;
        };
        submit_keyed(&h, "a", 3).await;
        let status = h.engine.flow_status(QUEUE).await.expect("flow status");
        assert_eq!(status.throttled_claims, 0, "{doc}");
        assert_eq!(h.claim(QUEUE, 3).await.len(), 1, "one of key a ({doc})");
        let status = h.engine.flow_status(QUEUE).await.expect("flow status");
        assert_eq!(
            status.throttled_claims, 1,
            "the first claim was cut short ({doc})"
        );
        assert!(h.claim(QUEUE, 3).await.is_empty(), "key a is full ({doc})");
        let status = h.engine.flow_status(QUEUE).await.expect("flow status");
        assert_eq!(status.throttled_claims, 2, "so was the second ({doc})");
        assert_eq!(status.in_flight, 1, "{doc}");
    }
}

/// Local concurrency bounds what one engine (one process) holds, on every
/// store: a settle or a lapsed lease frees its slot, and another process
/// has slots of its own.
pub async fn local_concurrency_bounds_each_process(factory: StoreFactory) {
    let policy = QueuePolicy {
        flow: flow(json!({"local_concurrency": 2})),
        ..test_policy()
    };
    let h = Harness::with_policy(&factory, policy.clone()).await;
    if h.caps().queue_config {
        h.engine
            .set_policy(QUEUE, &policy)
            .await
            .expect("set_policy");
    }
    h.submit_n(QUEUE, 6).await;
    // A broker hands deliveries over as they arrive: claim until the
    // process holds its two, never more.
    let mut held = Vec::new();
    for _ in 0..200 {
        held.extend(h.claim(QUEUE, 6).await);
        assert!(
            held.len() <= 2,
            "{} held under a local limit of 2",
            held.len()
        );
        if held.len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(held.len(), 2, "the process takes its two");
    assert!(h.claim(QUEUE, 6).await.is_empty(), "no third slot");
    h.settle(&held[0], Settlement::Success).await;
    let mut next = Vec::new();
    for _ in 0..200 {
        next.extend(h.claim(QUEUE, 6).await);
        assert!(
            next.len() <= 1,
            "a settle frees one slot, not {}",
            next.len()
        );
        if next.len() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(next.len(), 1, "the settle freed a slot");
    // Another process over the same store has slots of its own.
    let other =
        rdq_engine::Engine::new(h.store.clone(), h.clock.clone()).with_fallback_policy(policy);
    let mut theirs = Vec::new();
    for _ in 0..200 {
        theirs.extend(other.claim(QUEUE, 6, None).await.expect("claim"));
        assert!(theirs.len() <= 2);
        if theirs.len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(theirs.len(), 2, "another process takes its own two");
}
