//! The edges of a store's life: counters at their maximum never wedge a
//! task, the lease secret is stable, and a healthy store says it is ready.

use rdq_engine::machine::{self, MAX_COUNT};
use rdq_engine::{FailureKind, LeaseKey, LeaseToken, NewTask, RedriveRequest, Settlement};
use rdq_envelope::{Envelope, Status, TaskId, Timestamp};

use crate::StoreFactory;
use crate::harness::{Harness, Need, code_of, failure, test_policy};

/// A DEAD envelope of `queue` (as a DLQ import brings one in), changed by `set`.
fn dead_envelope(queue: &str, now: Timestamp, set: impl FnOnce(&mut Envelope)) -> Envelope {
    let policy = test_policy();
    let mut fresh = Envelope::new(
        queue,
        "compliance.noop",
        br#"{"n":1}"#,
        "application/json",
        now,
    );
    fresh.id = TaskId::generate();
    let pending = machine::submit(&fresh, &policy, now, 0).expect("submit");
    let (leased, token) = machine::claim(&pending, policy.lease_ms, now).expect("claim");
    let dead = machine::settle(
        &leased,
        token,
        &failure("app.Boom", FailureKind::Permanent),
        &policy,
        now,
    )
    .expect("settle");
    let mut dead = dead;
    set(&mut dead);
    dead
}

/// Stores `env` as it is.
async fn store_as_is(h: &Harness, env: &Envelope) {
    let mut results = h
        .store
        .submit(vec![NewTask {
            envelope: env.clone(),
            idempotency_key: None,
            unique: None,
        }])
        .await;
    assert_eq!(results.len(), 1);
    results
        .remove(0)
        .expect("the store should take a valid envelope");
}

async fn redrive_one(h: &Harness, env: &Envelope) -> Vec<TaskId> {
    h.engine
        .redrive(&RedriveRequest {
            queue: env.queue.clone(),
            ids: Some(vec![env.id]),
            ..RedriveRequest::default()
        })
        .await
        .expect("a redrive by id should be answered")
}

/// No counter saturates or wraps (`docs/envelope.md`): a DEAD task whose
/// `redrive_count`, `claim_count` or last `attempt_no` is at the maximum is
/// not redriven and stays as it was; a PENDING task at the maximum
/// `claim_count`, `attempt_count` or last `attempt_no` is not handed out,
/// fails no claim of the tasks beside it, and stays as it was; one below the
/// maximum is claimed with the last token, which still settles (the store's
/// compare-and-swap and the envelope agree at the edge); a deferral at the
/// maximum `deferral_count` is refused with `INVALID_TRANSITION` and the
/// lease still settles otherwise.
pub async fn counters_at_their_maximum_never_wedge_a_task(factory: StoreFactory) {
    const CHECK: &str = "counters_at_their_maximum_never_wedge_a_task";
    let h = Harness::new(&factory).await;
    if h.skips(CHECK, &[Need::Redrive, Need::GetById]) {
        return;
    }
    let now = h.now();

    let stuck = [
        dead_envelope("limits.redrive", now, |e| e.redrive_count = MAX_COUNT),
        dead_envelope("limits.redrive", now, |e| e.claim_count = MAX_COUNT),
        dead_envelope("limits.redrive", now, |e| {
            e.attempts[0].attempt_no = MAX_COUNT;
        }),
    ];
    for env in &stuck {
        store_as_is(&h, env).await;
        assert!(
            redrive_one(&h, env).await.is_empty(),
            "a DEAD task that could not count again must not be redriven: {}",
            env.encode_string()
        );
        h.assert_stored(env, "a refused redrive changes nothing")
            .await;
    }

    let redriven = || {
        machine::submit(
            &dead_envelope("limits.pending", now, |_| {}),
            &test_policy(),
            now,
            0,
        )
        .expect("submit")
    };
    let mut at_max = Vec::new();
    for (counter, set) in [
        (
            "claim_count",
            (|e: &mut Envelope| e.claim_count = MAX_COUNT) as fn(&mut Envelope),
        ),
        ("attempt_count", |e: &mut Envelope| {
            e.attempt_count = MAX_COUNT
        }),
        ("attempt_no", |e: &mut Envelope| {
            e.attempts[0].attempt_no = MAX_COUNT
        }),
    ] {
        let mut pending = redriven();
        pending.status = Status::Pending;
        set(&mut pending);
        assert!(
            machine::claim(&pending, 1_000, now).is_err(),
            "{counter}: the engine refuses this claim"
        );
        store_as_is(&h, &pending).await;
        at_max.push((counter, pending));
    }
    // A claimable task behind them is still handed out.
    let mut fine = redriven();
    fine.status = Status::Pending;
    store_as_is(&h, &fine).await;
    // A broker may deliver the last task a moment after the others.
    let mut claimed = Vec::new();
    for _ in 0..50 {
        claimed = h
            .engine
            .claim("limits.pending", 10, None)
            .await
            .expect("a claim should be answered");
        if !claimed.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let ids: Vec<TaskId> = claimed.iter().map(|c| c.envelope.id).collect();
    assert_eq!(
        ids,
        vec![fine.id],
        "only the task whose counters have room is handed out"
    );
    for (counter, pending) in &at_max {
        h.assert_stored(
            pending,
            &format!("a task at the maximum {counter} cannot be claimed and stays as it was"),
        )
        .await;
    }

    let almost = dead_envelope("limits.edge", now, |e| {
        e.claim_count = MAX_COUNT - 1;
        e.redrive_count = MAX_COUNT - 1;
    });
    store_as_is(&h, &almost).await;
    assert_eq!(redrive_one(&h, &almost).await, vec![almost.id]);
    let edge = h.claim_one("limits.edge").await;
    assert_eq!(edge.token, LeaseToken(MAX_COUNT));
    assert_eq!(edge.envelope.claim_count, MAX_COUNT);
    assert_eq!(edge.envelope.redrive_count, MAX_COUNT);
    let done = h.settle(&edge, Settlement::Success).await;
    assert_eq!(done.status, Status::Succeeded);
    h.assert_status(almost.id, Status::Succeeded, "the last token settles")
        .await;

    let deferred = dead_envelope("limits.defer", now, |e| e.deferral_count = MAX_COUNT);
    store_as_is(&h, &deferred).await;
    assert_eq!(redrive_one(&h, &deferred).await, vec![deferred.id]);
    let leased = h.claim_one("limits.defer").await;
    let refused = h
        .engine
        .settle(
            &leased.envelope,
            leased.token,
            Settlement::Defer { delay_ms: 10 },
        )
        .await;
    assert_eq!(code_of(&refused), "INVALID_TRANSITION");
    h.assert_stored(&leased.envelope, "a refused deferral changes nothing")
        .await;
    let done = h.settle(&leased, Settlement::Success).await;
    assert_eq!(done.deferral_count, MAX_COUNT);
}

/// The lease secret is the same every time the store is asked, so the key
/// built from it accepts the tokens it issued; a store that keeps none says
/// so with `None`.
pub async fn the_lease_secret_is_stable(factory: StoreFactory) {
    let h = Harness::new(&factory).await;
    let first = h.store.lease_secret().await.expect("lease_secret");
    let second = h.store.lease_secret().await.expect("lease_secret");
    assert_eq!(first, second, "the lease secret must not change");
    if let Some(secret) = first {
        assert_ne!(secret, [0; 32], "a lease secret must be random");
        let id = TaskId::generate();
        let text = LeaseKey::new(secret).format(id, LeaseToken(7));
        let again = LeaseKey::of(h.store.as_ref()).await.expect("the key");
        assert_eq!(again.parse(id, &text), Ok(LeaseToken(7)));
    }
}

/// A freshly made store that took a write is ready.
pub async fn a_healthy_store_is_ready(factory: StoreFactory) {
    let h = Harness::new(&factory).await;
    h.submit_n("limits.ready", 1).await;
    let ready = h.store.ready().await;
    assert_eq!(code_of(&ready), "OK", "{ready:?}");
}
