//! Uniqueness (docs/uniqueness.md): one holder per key, each hold an
//! invariant over the holder's state, conflicts typed and naming the
//! holder, redrive and import into a held key refused. A store that does
//! not declare `unique` must refuse a unique submit with `UNSUPPORTED`.

use rdq_engine::unique::{Hold, OnConflict, Scope, UniqueRequest};
use rdq_engine::{EngineError, RedriveRequest, SubmitRequest, Submitted};
use rdq_envelope::{Envelope, Status};

use crate::StoreFactory;
use crate::harness::{Harness, code_of, permanent, task};

fn keyed(queue: &str, key: &str, hold: Hold, on_conflict: OnConflict) -> SubmitRequest {
    SubmitRequest {
        unique: Some(UniqueRequest {
            key: Some(key.to_owned()),
            hold,
            on_conflict,
            ..UniqueRequest::default()
        }),
        ..task(queue)
    }
}

fn holder_of<T: std::fmt::Debug>(result: &Result<T, EngineError>) -> Option<rdq_envelope::TaskId> {
    match result {
        Err(EngineError::UniqueHeld { holder, .. }) => Some(*holder),
        _ => None,
    }
}

/// Submits `request`, which must create a task.
async fn created(h: &Harness, request: SubmitRequest, what: &str) -> Envelope {
    match h.engine.submit(request).await {
        Ok(Submitted::Created(env)) => env,
        other => panic!("{what}: a new task should be created, got {other:?}"),
    }
}

/// Submits `request`, which must conflict with `holder`.
async fn conflicts(h: &Harness, request: SubmitRequest, holder: &Envelope, what: &str) {
    let result = h.engine.submit(request).await;
    assert_eq!(
        holder_of(&result),
        Some(holder.id),
        "{what}: UNIQUE_HELD naming {} expected, got {result:?}",
        holder.id
    );
}

/// The tasks `results` created.
fn created_among(results: &[Result<Submitted, EngineError>]) -> Vec<&Envelope> {
    results
        .iter()
        .filter_map(|r| match r {
            Ok(Submitted::Created(env)) => Some(env),
            _ => None,
        })
        .collect()
}

/// Skips (after checking the refusal) on a store without `unique`.
async fn skips(h: &Harness, check: &str) -> bool {
    if h.caps().unique {
        return false;
    }
    let refused = h
        .engine
        .submit(keyed(
            "compliance.unique",
            "k",
            Hold::Forever,
            OnConflict::Return,
        ))
        .await;
    assert_eq!(
        code_of(&refused),
        "UNSUPPORTED",
        "a store without `unique` must refuse a unique submit: {refused:?}"
    );
    h.skips_unless(check, false)
}

/// Twenty submitters of one key at once: exactly one task is created, and
/// every other submit is refused naming it.
pub async fn two_submitters_of_one_unique_key_get_one_holder(factory: StoreFactory) {
    let h = Harness::new(&factory).await;
    if skips(&h, "two_submitters_of_one_unique_key_get_one_holder").await {
        return;
    }
    let queue = "compliance.unique.race";
    let submits = (0..20).map(|_| {
        h.engine.submit(keyed(
            queue,
            "order-7",
            Hold::UntilFinished,
            OnConflict::Return,
        ))
    });
    let results = futures::future::join_all(submits).await;
    let winners = created_among(&results);
    assert_eq!(winners.len(), 1, "one holder expected: {results:?}");
    let holder = winners[0].id;
    for r in &results {
        if !matches!(r, Ok(Submitted::Created(_))) {
            assert_eq!(
                holder_of(r),
                Some(holder),
                "a loser must name the holder: {r:?}"
            );
        }
    }
    assert_eq!(h.claim(queue, 100).await.len(), 1, "one task exists");
    // In one batch too: the second of two alike is refused.
    let batch = h
        .engine
        .submit_many(vec![
            keyed(queue, "order-8", Hold::UntilFinished, OnConflict::Return),
            keyed(queue, "order-8", Hold::UntilFinished, OnConflict::Return),
        ])
        .await;
    let first = match &batch[0] {
        Ok(Submitted::Created(env)) => env.id,
        other => panic!("the batch's first submit should create: {other:?}"),
    };
    assert_eq!(holder_of(&batch[1]), Some(first), "{batch:?}");
}

/// Each hold is an invariant over the holder's state: until started, until
/// finished, until succeeded (a DEAD holder keeps it), and the scopes keep
/// apart.
pub async fn each_hold_releases_when_its_holder_leaves_it(factory: StoreFactory) {
    let h = Harness::new(&factory).await;
    if skips(&h, "each_hold_releases_when_its_holder_leaves_it").await {
        return;
    }
    let queue = "compliance.unique.holds";
    let submit = |key: &str, hold| keyed(queue, key, hold, OnConflict::Return);

    // until_started: held while waiting, free once claimed.
    let a = created(&h, submit("s", Hold::UntilStarted), "until_started").await;
    conflicts(
        &h,
        submit("s", Hold::UntilStarted),
        &a,
        "until_started, waiting",
    )
    .await;
    let claimed = h.claim_one(queue).await;
    assert_eq!(claimed.envelope.id, a.id);
    let _b = created(
        &h,
        submit("s", Hold::UntilStarted),
        "until_started, claimed",
    )
    .await;

    // until_finished: held while running, free once it succeeded.
    let held = created(&h, submit("f", Hold::UntilFinished), "until_finished").await;
    h.settle(&claimed, rdq_engine::machine::Settlement::Success)
        .await;
    let mut claims = h.claim(queue, 10).await;
    claims.retain(|c| c.envelope.id == held.id);
    assert_eq!(claims.len(), 1, "the until_finished holder is claimable");
    conflicts(
        &h,
        submit("f", Hold::UntilFinished),
        &held,
        "until_finished, running",
    )
    .await;
    h.settle(&claims[0], rdq_engine::machine::Settlement::Success)
        .await;
    created(
        &h,
        submit("f", Hold::UntilFinished),
        "until_finished, succeeded",
    )
    .await;

    // until_succeeded: a DEAD holder keeps its key.
    let doomed = created(&h, submit("d", Hold::UntilSucceeded), "until_succeeded").await;
    let mut claims = h.claim(queue, 10).await;
    claims.retain(|c| c.envelope.id == doomed.id);
    h.settle(&claims[0], permanent("Doomed")).await;
    h.assert_status(doomed.id, Status::Dead, "the holder died")
        .await;
    conflicts(
        &h,
        submit("d", Hold::UntilSucceeded),
        &doomed,
        "until_succeeded, dead",
    )
    .await;
    // ... and until_finished does not.
    let dying = created(&h, submit("e", Hold::UntilFinished), "until_finished").await;
    let mut claims = h.claim(queue, 10).await;
    claims.retain(|c| c.envelope.id == dying.id);
    h.settle(&claims[0], permanent("Doomed")).await;
    created(&h, submit("e", Hold::UntilFinished), "until_finished, dead").await;

    // Scopes: per handler, two handlers hold one key each; per queue, one.
    let scoped = |handler: &str, scope| SubmitRequest {
        handler_ref: handler.to_owned(),
        unique: Some(UniqueRequest {
            key: Some("shared".into()),
            scope,
            hold: Hold::Forever,
            ..UniqueRequest::default()
        }),
        ..task(queue)
    };
    let first = created(&h, scoped("a", Scope::Handler), "handler a").await;
    created(&h, scoped("b", Scope::Handler), "handler b").await;
    conflicts(&h, scoped("a", Scope::Handler), &first, "handler a again").await;
    let whole = created(&h, scoped("a", Scope::Queue), "queue scope").await;
    conflicts(
        &h,
        scoped("b", Scope::Queue),
        &whole,
        "queue scope, other handler",
    )
    .await;
}

/// A hold for a duration ends at its expiry exactly, whatever the
/// holder's state.
pub async fn a_hold_for_a_duration_releases_at_its_expiry(factory: StoreFactory) {
    let h = Harness::new(&factory).await;
    if skips(&h, "a_hold_for_a_duration_releases_at_its_expiry").await {
        return;
    }
    let queue = "compliance.unique.ttl";
    let submit = || keyed(queue, "t", Hold::For(1_000), OnConflict::Return);
    let a = created(&h, submit(), "the first").await;
    let claimed = h.claim_one(queue).await;
    h.settle(&claimed, rdq_engine::machine::Settlement::Success)
        .await;
    h.advance(999);
    conflicts(
        &h,
        submit(),
        &a,
        "1 ms before the expiry (the holder succeeded)",
    )
    .await;
    h.advance(1);
    created(&h, submit(), "at the expiry").await;
}

/// `replace` and `debounce` update a holder still waiting (payload,
/// headers; debounce also its due time) and answer it; a running holder
/// is never touched, the submit conflicts.
pub async fn replace_never_touches_a_running_holder(factory: StoreFactory) {
    let h = Harness::new(&factory).await;
    if skips(&h, "replace_never_touches_a_running_holder").await {
        return;
    }
    let queue = "compliance.unique.replace";
    let with = |payload: &str, mode, delay_ms| SubmitRequest {
        payload: payload.as_bytes().to_vec(),
        delay_ms,
        ..keyed(queue, "r", Hold::UntilFinished, mode)
    };
    let a = created(&h, with(r#"{"v":1}"#, OnConflict::Return, 0), "first").await;
    let replaced = match h
        .engine
        .submit(with(r#"{"v":2}"#, OnConflict::Replace, 0))
        .await
    {
        Ok(Submitted::Existing(env)) => env,
        other => panic!("replace on a waiting holder answers it: {other:?}"),
    };
    assert_eq!(replaced.id, a.id);
    assert_eq!(replaced.payload_bytes(), br#"{"v":2}"#);
    assert_eq!(
        replaced.next_attempt_at, a.next_attempt_at,
        "replace keeps the due time"
    );
    h.assert_stored(&replaced, "the replaced holder").await;

    let debounced = match h
        .engine
        .submit(with(r#"{"v":3}"#, OnConflict::Debounce, 5_000))
        .await
    {
        Ok(Submitted::Existing(env)) => env,
        other => panic!("debounce on a waiting holder answers it: {other:?}"),
    };
    assert_eq!(debounced.id, a.id);
    assert_eq!(debounced.payload_bytes(), br#"{"v":3}"#);
    assert_eq!(debounced.next_attempt_at, Some(h.now().plus_ms(5_000)));
    h.assert_stored(&debounced, "the debounced holder").await;
    assert!(
        h.claim(queue, 10).await.is_empty(),
        "debounced: not due yet"
    );

    h.advance(5_000);
    let claimed = h.claim_one(queue).await;
    assert_eq!(claimed.envelope.payload_bytes(), br#"{"v":3}"#);
    for mode in [
        OnConflict::Replace,
        OnConflict::Debounce,
        OnConflict::Return,
    ] {
        conflicts(&h, with(r#"{"v":4}"#, mode, 0), &a, "a running holder").await;
    }
    assert_eq!(
        claimed.envelope.payload_bytes(),
        br#"{"v":3}"#,
        "the payload in flight is never replaced"
    );
    let done = h
        .settle(&claimed, rdq_engine::machine::Settlement::Success)
        .await;
    assert_eq!(done.payload_bytes(), br#"{"v":3}"#);
}

/// A dead task whose key another task took meanwhile cannot be redriven
/// (nor imported again) while that task holds it: `UNIQUE_HELD`, nothing
/// changed; once the key is free it can.
pub async fn redrive_and_import_into_a_held_key_are_refused(factory: StoreFactory) {
    let h = Harness::new(&factory).await;
    if skips(&h, "redrive_and_import_into_a_held_key_are_refused").await {
        return;
    }
    let queue = "compliance.unique.redrive";
    let submit = || keyed(queue, "x", Hold::UntilFinished, OnConflict::Return);
    let dead = created(&h, submit(), "the first").await;
    let claimed = h.claim_one(queue).await;
    let dead_state = h.settle(&claimed, permanent("Boom")).await;
    let holder = created(&h, submit(), "the next holder").await;

    if h.caps().redrive {
        let by_id = RedriveRequest {
            queue: queue.into(),
            ids: Some(vec![dead.id]),
            ..RedriveRequest::default()
        };
        for dry_run in [true, false] {
            let refused = h
                .engine
                .redrive(&RedriveRequest {
                    dry_run,
                    ..by_id.clone()
                })
                .await;
            assert_eq!(
                holder_of(&refused),
                Some(holder.id),
                "dry run {dry_run}: {refused:?}"
            );
        }
        let everything = RedriveRequest {
            queue: queue.into(),
            ..RedriveRequest::default()
        };
        let refused = h.engine.redrive(&everything).await;
        assert_eq!(holder_of(&refused), Some(holder.id), "{refused:?}");
        h.assert_stored(&dead_state, "the refused task, unchanged")
            .await;

        // The import of a copy of the dead task is refused the same way.
        let mut copy = dead_state.clone();
        copy.id = rdq_envelope::TaskId::generate();
        let imported = h.engine.import(vec![copy]).await;
        assert_eq!(holder_of(&imported[0]), Some(holder.id), "{imported:?}");

        let claimed = h.claim_one(queue).await;
        h.settle(&claimed, rdq_engine::machine::Settlement::Success)
            .await;
        let redriven = h.engine.redrive(&by_id).await.expect("the key is free");
        assert_eq!(redriven, vec![dead.id]);
        // The redriven task holds its key again.
        conflicts(&h, submit(), &dead, "the redriven task").await;

        // A redrive racing a submit of the same key: one of them holds it.
        let racing = "compliance.unique.redrive.race";
        for round in 0..10 {
            let key = format!("race-{round}");
            let submit = || keyed(racing, &key, Hold::UntilFinished, OnConflict::Return);
            let first = created(&h, submit(), "a task to kill").await;
            let claimed = h.claim_one(racing).await;
            h.settle(&claimed, permanent("Boom")).await;
            let redrive = RedriveRequest {
                queue: racing.into(),
                ids: Some(vec![first.id]),
                ..RedriveRequest::default()
            };
            let (redriven, submitted) =
                futures::join!(h.engine.redrive(&redrive), h.engine.submit(submit()));
            let redriven = matches!(&redriven, Ok(ids) if ids == &vec![first.id]);
            let submitted = matches!(&submitted, Ok(Submitted::Created(_)));
            assert!(
                redriven != submitted,
                "round {round}: redriven {redriven}, submitted {submitted}: one holder expected"
            );
            // Clear the queue for the next round.
            for c in h.claim(racing, 10).await {
                h.settle(&c, rdq_engine::machine::Settlement::Success).await;
            }
        }
    }
}

/// A batch decides its unique submits in order, against the store and
/// against its own earlier submits; concurrent batches over the same keys
/// still leave one holder per key.
pub async fn batches_decide_unique_submits_in_order(factory: StoreFactory) {
    let h = Harness::new(&factory).await;
    if skips(&h, "batches_decide_unique_submits_in_order").await {
        return;
    }
    let queue = "compliance.unique.batch";
    let with = |key: &str, payload: &str, mode| SubmitRequest {
        payload: payload.as_bytes().to_vec(),
        ..keyed(queue, key, Hold::UntilFinished, mode)
    };
    let stored = created(&h, with("s", r#"{"v":0}"#, OnConflict::Return), "stored").await;
    let batch = h
        .engine
        .submit_many(vec![
            with("a", r#"{"v":1}"#, OnConflict::Return),
            with("a", r#"{"v":2}"#, OnConflict::Replace),
            with("b", r#"{"v":3}"#, OnConflict::Return),
            with("a", r#"{"v":4}"#, OnConflict::Return),
            with("s", r#"{"v":5}"#, OnConflict::Return),
            with("s", r#"{"v":6}"#, OnConflict::Replace),
        ])
        .await;
    let a = match &batch[0] {
        Ok(Submitted::Created(env)) => env.id,
        other => panic!("the first of key a creates: {other:?}"),
    };
    match &batch[1] {
        Ok(Submitted::Existing(env)) => {
            assert_eq!(env.id, a, "replace answers the batch's own holder");
            assert_eq!(env.payload_bytes(), br#"{"v":2}"#);
        }
        other => panic!("replace of the batch's own waiting holder: {other:?}"),
    }
    assert!(
        matches!(&batch[2], Ok(Submitted::Created(_))),
        "key b is free: {:?}",
        batch[2]
    );
    assert_eq!(holder_of(&batch[3]), Some(a), "{:?}", batch[3]);
    assert_eq!(holder_of(&batch[4]), Some(stored.id), "{:?}", batch[4]);
    match &batch[5] {
        Ok(Submitted::Existing(env)) => {
            assert_eq!(env.id, stored.id);
            assert_eq!(env.payload_bytes(), br#"{"v":6}"#);
        }
        other => panic!("replace of a stored waiting holder: {other:?}"),
    }
    let mut payloads: Vec<Vec<u8>> = h
        .claim(queue, 100)
        .await
        .iter()
        .map(|c| c.envelope.payload_bytes().to_vec())
        .collect();
    payloads.sort();
    assert_eq!(
        payloads,
        vec![
            br#"{"v":2}"#.to_vec(),
            br#"{"v":3}"#.to_vec(),
            br#"{"v":6}"#.to_vec()
        ],
        "three tasks: a (replaced), b and s (replaced)"
    );

    // Eight batches at once over keys c0..c9, each in its own order.
    let racing = "compliance.unique.batch.race";
    let batches = (0..8usize).map(|b| {
        let requests = (0..10usize)
            .map(|k| {
                keyed(
                    racing,
                    &format!("c{}", (k * 3 + b) % 10),
                    Hold::UntilFinished,
                    OnConflict::Return,
                )
            })
            .collect();
        h.engine.submit_many(requests)
    });
    let results: Vec<_> = futures::future::join_all(batches)
        .await
        .into_iter()
        .flatten()
        .collect();
    let winners = created_among(&results);
    assert_eq!(winners.len(), 10, "one holder per key: {results:?}");
    let holders: std::collections::HashSet<_> = winners.iter().map(|e| e.id).collect();
    for r in &results {
        if !matches!(r, Ok(Submitted::Created(_))) {
            let named = holder_of(r).unwrap_or_else(|| panic!("a loser conflicts: {r:?}"));
            assert!(holders.contains(&named), "a loser names a holder: {r:?}");
        }
    }
    assert_eq!(h.claim(racing, 100).await.len(), 10, "ten tasks exist");

    // A unique task waits for its due time, and one with a flow key is
    // claimed as any other.
    let placed = "compliance.unique.batch.placed";
    let later = created(
        &h,
        SubmitRequest {
            delay_ms: 5_000,
            ..keyed(placed, "later", Hold::UntilFinished, OnConflict::Return)
        },
        "delayed",
    )
    .await;
    let keyed_now = created(
        &h,
        SubmitRequest {
            flow_key: Some("tenant-a".into()),
            ..keyed(placed, "now", Hold::UntilFinished, OnConflict::Return)
        },
        "with a flow key",
    )
    .await;
    let now: Vec<_> = h.claim(placed, 10).await;
    assert_eq!(crate::harness::claimed_ids(&now), vec![keyed_now.id]);
    h.advance(5_000);
    assert_eq!(h.claim_one(placed).await.envelope.id, later.id);
}

/// `existing` answers the holder, unchanged, whatever its state; hold
/// `forever` in the queue's scope with `existing` is the idempotency key:
/// either spelling finds a task submitted with the other.
pub async fn existing_answers_the_holder_and_is_the_idempotency_key(factory: StoreFactory) {
    let h = Harness::new(&factory).await;
    if skips(&h, "existing_answers_the_holder_and_is_the_idempotency_key").await {
        return;
    }
    let queue = "compliance.unique.existing";
    let with = |key: &str, hold, payload: &str| SubmitRequest {
        payload: payload.as_bytes().to_vec(),
        ..keyed(queue, key, hold, OnConflict::Existing)
    };
    let existing = |result: Result<Submitted, EngineError>, what: &str| match result {
        Ok(Submitted::Existing(env)) => env,
        other => panic!("{what}: the holder should be answered, got {other:?}"),
    };
    let a = created(&h, with("e", Hold::UntilFinished, r#"{"v":1}"#), "first").await;
    let met = existing(
        h.engine
            .submit(with("e", Hold::UntilFinished, r#"{"v":2}"#))
            .await,
        "a waiting holder",
    );
    assert_eq!(met.id, a.id);
    assert_eq!(met.payload_bytes(), br#"{"v":1}"#, "nothing is replaced");
    let claimed = h.claim_one(queue).await;
    assert_eq!(claimed.envelope.id, a.id);
    let met = existing(
        h.engine
            .submit(with("e", Hold::UntilFinished, r#"{"v":3}"#))
            .await,
        "a running holder",
    );
    assert_eq!((met.id, met.status), (a.id, Status::InFlight));
    h.settle(&claimed, rdq_engine::machine::Settlement::Success)
        .await;
    created(
        &h,
        with("e", Hold::UntilFinished, r#"{"v":4}"#),
        "after the holder finished",
    )
    .await;

    // The idempotency key's case, both ways round.
    let idem = |key: &str| SubmitRequest {
        idempotency_key: Some(key.to_owned()),
        ..task(queue)
    };
    let b = created(&h, idem("order-1"), "by idempotency key").await;
    let both = h
        .engine
        .submit(SubmitRequest {
            idempotency_key: Some("order-9".into()),
            ..with("order-9", Hold::UntilFinished, r#"{"v":0}"#)
        })
        .await;
    assert_eq!(code_of(&both), "INVALID_ARGUMENT", "{both:?}");
    let met = existing(
        h.engine
            .submit(with("order-1", Hold::Forever, r#"{"v":5}"#))
            .await,
        "unique forever/existing after an idempotency key",
    );
    assert_eq!(met.id, b.id);
    let c = created(&h, with("order-2", Hold::Forever, r#"{"v":6}"#), "unique").await;
    let met = existing(
        h.engine.submit(idem("order-2")).await,
        "an idempotency key after unique forever/existing",
    );
    assert_eq!(met.id, c.id);
    // A key too long for an idempotency key holds its slot the same way.
    let long = "k".repeat(300);
    let d = created(&h, with(&long, Hold::Forever, r#"{"v":7}"#), "a long key").await;
    let met = existing(
        h.engine
            .submit(with(&long, Hold::Forever, r#"{"v":8}"#))
            .await,
        "a long key's repeat",
    );
    assert_eq!(met.id, d.id);
}
