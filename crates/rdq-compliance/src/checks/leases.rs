//! Leases and settles: a lapsed lease is reaped exactly once, lease tokens
//! fence stale workers, extensions move the deadline, batches answer per item,
//! and every outcome lands the task in the state the lifecycle table says.

use std::collections::HashSet;

use rdq_engine::machine;
use rdq_engine::{
    Backoff, Claimed, FailureKind, LeaseToken, LeasedUpdate, QueuePolicy, RedriveRequest,
    SettleRequest, Settlement,
};
use rdq_envelope::error_types;
use rdq_envelope::{Envelope, Outcome, Status, TaskId};
use tokio::task::JoinSet;

use crate::StoreFactory;
use crate::harness::{
    Harness, assert_same_bytes, assert_same_ids, at, claimed_ids, code_of, failure, ids_of,
    permanent, retryable, task, test_policy,
};

/// Lapsed leases are found at their deadline (not before) and, with four
/// reapers racing, each is closed as `LEASE_EXPIRED` by exactly one of them;
/// a task whose every attempt lapses ends DEAD (a poison pill reaches the DLQ).
pub async fn expired_leases_are_reaped_exactly_once(factory: StoreFactory) {
    const QUEUE: &str = "lease.reap";
    const TASKS: usize = 40;
    const REAPERS: usize = 4;
    let h = Harness::new(&factory).await;
    let submitted = h.submit_n(QUEUE, TASKS).await;
    let max_attempts = test_policy().max_attempts;

    for round in 1..=max_attempts {
        let claimed = h.claim(QUEUE, TASKS + 10).await;
        assert_same_ids(&claimed_ids(&claimed), &ids_of(&submitted), "claim all");
        for c in &claimed {
            assert_eq!(c.token, LeaseToken(round));
            assert_eq!(c.envelope.attempt_count, round);
        }

        h.advance(999);
        let early = h
            .store
            .expired_leases(h.now(), 1_000)
            .await
            .expect("expired_leases");
        assert!(
            early.is_empty(),
            "no lease has lapsed 1 ms before its deadline"
        );
        assert!(h.engine.reap_expired(1_000).await.expect("reap").is_empty());

        h.advance(1);
        let lapsed = h
            .store
            .expired_leases(h.now(), 1_000)
            .await
            .expect("expired_leases");
        assert_same_ids(
            &ids_of(&lapsed),
            &ids_of(&submitted),
            "lapsed at the deadline",
        );
        assert!(lapsed.iter().all(|env| env.status == Status::InFlight));
        let limited = h
            .store
            .expired_leases(h.now(), 5)
            .await
            .expect("expired_leases");
        assert_eq!(limited.len(), 5, "expired_leases honours its limit");

        let mut reapers = JoinSet::new();
        for _ in 0..REAPERS {
            let engine = h.engine.clone();
            reapers.spawn(async move { engine.reap_expired(1_000).await.expect("reap") });
        }
        let mut reaped: Vec<Envelope> = Vec::new();
        while let Some(joined) = reapers.join_next().await {
            reaped.extend(joined.expect("a reaper panicked"));
        }
        assert_same_ids(
            &ids_of(&reaped),
            &ids_of(&submitted),
            "each lease reaped once",
        );
        for env in &reaped {
            let last = env.attempts.last().expect("the lapsed attempt is recorded");
            assert_eq!(last.attempt_no, round);
            assert_eq!(last.outcome, Some(Outcome::LeaseExpired));
            assert_eq!(
                last.error.as_ref().map(|e| e.error_type.as_str()),
                Some(error_types::LEASE_EXPIRED)
            );
            let expected = if round < max_attempts {
                Status::Pending
            } else {
                Status::Dead
            };
            assert_eq!(env.status, expected, "after lapse {round}");
            h.assert_stored(env, "the reaped state is stored").await;
        }
        assert!(
            h.store
                .expired_leases(h.now(), 1_000)
                .await
                .expect("expired_leases")
                .is_empty(),
            "nothing left to reap"
        );

        let stale = &claimed[0];
        let refused = h
            .engine
            .settle(&stale.envelope, stale.token, Settlement::Success)
            .await;
        assert_eq!(
            code_of(&refused),
            "LEASE_LOST",
            "the lapsed worker is fenced"
        );
    }
    assert!(h.claim(QUEUE, 10).await.is_empty(), "every task is dead");
    if let Some(dead) = h.stored(submitted[0].id).await {
        assert_eq!(dead.attempt_count, max_attempts);
        assert!(
            dead.attempts
                .iter()
                .all(|a| a.outcome == Some(Outcome::LeaseExpired))
        );
    }
}

/// A settle naming a lease that is no longer current — already settled,
/// reaped and reclaimed, or dead and redriven — is refused with `LEASE_LOST`
/// and changes nothing.
pub async fn stale_settles_are_refused(factory: StoreFactory) {
    const QUEUE: &str = "lease.stale";
    let h = Harness::new(&factory).await;

    // Settled once; the same settle again is stale.
    h.submit(task(QUEUE)).await;
    let first = h.claim_one(QUEUE).await;
    let succeeded = h.settle(&first, Settlement::Success).await;
    let again = h
        .engine
        .settle(&first.envelope, first.token, permanent("app.Late"))
        .await;
    assert_eq!(code_of(&again), "LEASE_LOST");
    h.assert_stored(&succeeded, "a refused settle changes nothing")
        .await;

    // Lease lapsed, reaped and the task claimed by someone else.
    h.submit(task(QUEUE)).await;
    let old = h.claim_one(QUEUE).await;
    h.advance(1_000);
    assert_eq!(h.engine.reap_expired(10).await.expect("reap").len(), 1);
    let new = h.claim_one(QUEUE).await;
    assert_eq!(new.envelope.id, old.envelope.id);
    assert_eq!(new.token, LeaseToken(2));
    let stale = h
        .engine
        .settle(&old.envelope, old.token, Settlement::Success)
        .await;
    assert_eq!(code_of(&stale), "LEASE_LOST");
    h.assert_stored(&new.envelope, "the new claim is untouched")
        .await;

    // Straight through the SPI: a compare-and-swap on the wrong lease.
    let decided = machine::settle(
        &new.envelope,
        new.token,
        &Settlement::Success,
        &test_policy(),
        h.now(),
    )
    .expect("the machine settles a current claim");
    let wrong_lease = h
        .store
        .settle(vec![LeasedUpdate {
            envelope: decided.clone(),
            expected: old.token,
        }])
        .await;
    assert_eq!(wrong_lease.len(), 1);
    assert_eq!(code_of(&wrong_lease[0]), "LEASE_LOST");
    h.assert_stored(&new.envelope, "a refused update changes nothing")
        .await;
    h.settle(&new, Settlement::Success).await;

    // A PENDING task holds no lease at all.
    let waiting = h.submit(task(QUEUE)).await;
    let mut forged = waiting.clone();
    forged.status = Status::Succeeded;
    let no_lease = h
        .store
        .settle(vec![LeasedUpdate {
            envelope: forged,
            expected: LeaseToken(1),
        }])
        .await;
    assert_eq!(code_of(&no_lease[0]), "LEASE_LOST");
    h.assert_stored(&waiting, "a PENDING task is not settled")
        .await;

    // Dead, then redriven: the dead attempt's token is stale too.
    let doomed = h.claim_one(QUEUE).await;
    h.settle(&doomed, permanent("app.Bad")).await;
    if h.caps().redrive {
        let redriven = h
            .engine
            .redrive(&RedriveRequest {
                queue: QUEUE.into(),
                ids: Some(vec![doomed.envelope.id]),
                ..RedriveRequest::default()
            })
            .await
            .expect("redrive");
        assert_eq!(redriven, vec![doomed.envelope.id]);
        let after_redrive = h
            .engine
            .settle(&doomed.envelope, doomed.token, Settlement::Success)
            .await;
        assert_eq!(code_of(&after_redrive), "LEASE_LOST");
        let reclaimed = h.claim_one(QUEUE).await;
        assert_eq!(
            reclaimed.token,
            LeaseToken(2),
            "attempt numbers keep counting"
        );
    }

    // Leases looked up in one call (what a batch settle reads first): one
    // answer per lease, in order, the current claim as it was handed out.
    const LOOKUP: &str = "lease.lookup";
    h.submit(task(LOOKUP)).await;
    let held = h.claim_one(LOOKUP).await;
    let idle = h.submit(task(LOOKUP)).await;
    let ghost = TaskId::generate();
    let id = held.envelope.id;
    let answers = h
        .store
        .leased(&[
            (id, held.token),
            (id, LeaseToken(held.token.0 + 1)),
            (idle.id, LeaseToken(1)),
            (ghost, LeaseToken(1)),
            (id, held.token),
        ])
        .await;
    assert_eq!(answers.len(), 5, "one answer per lease");
    for at in [0, 4] {
        match &answers[at] {
            Ok(env) => assert_same_bytes(env, &held.envelope, "a held lease reads the claim"),
            Err(e) => panic!("a held lease was refused: {e}"),
        }
    }
    assert_eq!(code_of(&answers[1]), "LEASE_LOST", "another claim's token");
    assert_eq!(code_of(&answers[2]), "LEASE_LOST", "a task never claimed");
    assert_eq!(code_of(&answers[3]), "TASK_NOT_FOUND", "an unknown id");
}

/// Extending a lease moves its deadline (so it is not reaped at the old one);
/// a wrong token or a lapsed lease cannot extend; after a reap the old claim
/// is fenced while the new claim extends and settles normally.
pub async fn extend_lease_moves_the_deadline_and_fences(factory: StoreFactory) {
    const QUEUE: &str = "lease.extend";
    let h = Harness::new(&factory).await;
    h.submit(task(QUEUE)).await;
    let claimed = h.claim_one(QUEUE).await;
    assert_eq!(claimed.envelope.lease_expires_at, Some(at(1_000)));

    h.advance(800);
    let extended = h
        .engine
        .extend_lease(&claimed.envelope, claimed.token, 1_000)
        .await
        .expect("the holder extends its lease");
    assert_eq!(extended.lease_expires_at, Some(at(1_800)));
    assert_eq!(extended.status, Status::InFlight);
    h.assert_stored(&extended, "the new deadline is stored")
        .await;

    let wrong_token = h
        .engine
        .extend_lease(&claimed.envelope, LeaseToken(claimed.token.0 + 1), 1_000)
        .await;
    assert_eq!(code_of(&wrong_token), "LEASE_LOST");

    h.advance(500);
    assert!(
        h.store
            .expired_leases(h.now(), 10)
            .await
            .expect("expired_leases")
            .is_empty(),
        "the old deadline no longer counts"
    );
    assert!(h.engine.reap_expired(10).await.expect("reap").is_empty());

    h.advance(500);
    let late = h.engine.extend_lease(&extended, claimed.token, 1_000).await;
    assert_eq!(
        code_of(&late),
        "LEASE_LOST",
        "a lapsed lease is the reaper's"
    );
    let lapsed = h
        .store
        .expired_leases(h.now(), 10)
        .await
        .expect("expired_leases");
    assert_eq!(ids_of(&lapsed), vec![claimed.envelope.id]);
    assert_eq!(h.engine.reap_expired(10).await.expect("reap").len(), 1);

    // The reaped claim cannot be extended through the SPI either.
    let mut revived = extended.clone();
    revived.lease_expires_at = Some(h.now().plus_ms(60_000));
    let refused = h
        .store
        .settle(vec![LeasedUpdate {
            envelope: revived,
            expected: claimed.token,
        }])
        .await;
    assert_eq!(code_of(&refused[0]), "LEASE_LOST");

    let reclaimed = h.claim_one(QUEUE).await;
    let longer = h
        .engine
        .extend_lease(&reclaimed.envelope, reclaimed.token, 5_000)
        .await
        .expect("the new holder extends");
    assert_eq!(longer.lease_expires_at, Some(h.now().plus_ms(5_000)));
    // Settled from the state the claim handed out, older than the stored
    // (extended) one: what is stored is what the settle answered.
    let done = h.settle(&reclaimed, Settlement::Success).await;
    assert_eq!(done.status, Status::Succeeded);
    h.assert_stored(&done, "a success after an extension, as answered")
        .await;
    let stale = h
        .engine
        .settle(&claimed.envelope, claimed.token, Settlement::Success)
        .await;
    assert_eq!(code_of(&stale), "LEASE_LOST");
}

/// Each outcome lands where the lifecycle says: SUCCESS → SUCCEEDED;
/// RETRYABLE_FAILURE → PENDING after backoff until `max_attempts`, then DEAD;
/// PERMANENT_FAILURE (forced or by glob) → DEAD at once; defer → PENDING after
/// exactly the delay, `deferral_count + 1`, priority = the queue's max, no attempt spent.
pub async fn settled_tasks_reach_terminal_states(factory: StoreFactory) {
    let policy = QueuePolicy {
        max_attempts: 3,
        backoff: Backoff::Fixed { delay_ms: 100 },
        max_priority: 7,
        non_retryable_errors: vec!["validation.*".into()],
        ..test_policy()
    };
    let h = Harness::with_policy(&factory, policy).await;

    // Success.
    h.submit(task("terminal.success")).await;
    let c = h.claim_one("terminal.success").await;
    h.advance(10);
    let done = h.settle(&c, Settlement::Success).await;
    assert_eq!(done.status, Status::Succeeded);
    assert_eq!(done.next_attempt_at, None);
    assert_eq!(done.lease_expires_at, None);
    assert_eq!(done.attempt_count, 1);
    let attempt = &done.attempts[0];
    assert_eq!(attempt.outcome, Some(Outcome::Success));
    assert_eq!(attempt.finished_at, Some(h.now()));
    assert!(attempt.error.is_none());
    h.assert_stored(&done, "SUCCEEDED is stored").await;
    assert!(h.claim("terminal.success", 10).await.is_empty());

    // Retryable until the attempts are spent.
    let retried = h.submit(task("terminal.retry")).await;
    for n in 1..=3 {
        let c = h.claim_one("terminal.retry").await;
        assert_eq!(c.token, LeaseToken(n));
        let after = h.settle(&c, retryable("net.Timeout")).await;
        h.assert_stored(&after, "the retry state is stored").await;
        assert_eq!(after.attempt_count, n);
        if n < 3 {
            assert_eq!(after.status, Status::Pending);
            assert_eq!(after.next_attempt_at, Some(h.now().plus_ms(100)));
            assert!(h.claim("terminal.retry", 10).await.is_empty(), "backoff");
            h.advance(100);
        } else {
            assert_eq!(after.status, Status::Dead, "max_attempts spent");
            assert_eq!(after.next_attempt_at, None);
            assert_eq!(after.attempts.len(), 3);
            assert!(
                after
                    .attempts
                    .iter()
                    .all(|a| a.outcome == Some(Outcome::RetryableFailure))
            );
        }
    }
    assert!(h.claim("terminal.retry", 10).await.is_empty());
    h.assert_status(retried.id, Status::Dead, "the retried task is dead")
        .await;

    // Permanent, forced by the worker and by the queue's glob.
    for (queue, settlement) in [
        ("terminal.permanent", permanent("app.Bad")),
        (
            "terminal.glob",
            failure("validation.MissingField", FailureKind::Unclassified),
        ),
    ] {
        h.submit(task(queue)).await;
        let c = h.claim_one(queue).await;
        let dead = h.settle(&c, settlement).await;
        assert_eq!(dead.status, Status::Dead, "{queue}");
        assert_eq!(dead.attempt_count, 1, "{queue}");
        assert_eq!(dead.next_attempt_at, None, "{queue}");
        assert_eq!(
            dead.attempts[0].outcome,
            Some(Outcome::PermanentFailure),
            "{queue}"
        );
        assert!(
            dead.last_error().is_some(),
            "{queue}: the error is recorded"
        );
        h.assert_stored(&dead, "DEAD is stored").await;
    }

    // Deferred.
    let mut low = task("terminal.defer");
    low.priority = 2;
    let submitted = h.submit(low).await;
    let c = h.claim_one("terminal.defer").await;
    assert_eq!(c.envelope.attempt_count, submitted.attempt_count + 1);
    let deferred = h.settle(&c, Settlement::Defer { delay_ms: 250 }).await;
    assert_eq!(deferred.status, Status::Pending);
    assert_eq!(deferred.deferral_count, submitted.deferral_count + 1);
    assert_eq!(
        deferred.priority, 7,
        "deferred tasks come back at max_priority"
    );
    assert_eq!(
        deferred.attempt_count, submitted.attempt_count,
        "a deferral spends no attempt"
    );
    assert!(deferred.attempts.is_empty());
    assert_eq!(deferred.next_attempt_at, Some(h.now().plus_ms(250)));
    h.assert_stored(&deferred, "the deferral is stored").await;
    h.advance(249);
    assert!(
        h.claim("terminal.defer", 10).await.is_empty(),
        "deferred 250 ms"
    );
    h.advance(1);
    let again = h.claim_one("terminal.defer").await;
    assert_eq!(again.envelope.id, submitted.id);
    assert_eq!(again.envelope.attempt_count, 1);
}

/// A batch of compare-and-swap updates answers per update, in order, applying
/// the good ones and refusing the rest (`LEASE_LOST`, `TASK_NOT_FOUND`); a
/// repeated update of one lease within the batch applies once.
pub async fn settle_batches_report_per_item(factory: StoreFactory) {
    const QUEUE: &str = "lease.batch";
    let h = Harness::new(&factory).await;
    h.submit_n(QUEUE, 4).await;
    let claims = h.claim(QUEUE, 4).await;
    let [a, b, c, d]: [Claimed; 4] = claims.try_into().expect("four claims");
    let succeed = |claim: &Claimed| {
        machine::settle(
            &claim.envelope,
            claim.token,
            &Settlement::Success,
            &test_policy(),
            h.now(),
        )
        .expect("the machine settles a current claim")
    };
    let mut ghost = succeed(&a);
    ghost.id = TaskId::generate();

    let results = h
        .store
        .settle(vec![
            LeasedUpdate {
                envelope: succeed(&a),
                expected: a.token,
            },
            LeasedUpdate {
                envelope: succeed(&b),
                expected: LeaseToken(b.token.0 + 1),
            },
            LeasedUpdate {
                envelope: ghost,
                expected: LeaseToken(1),
            },
            LeasedUpdate {
                envelope: succeed(&c),
                expected: c.token,
            },
            LeasedUpdate {
                envelope: succeed(&a),
                expected: a.token,
            },
        ])
        .await;
    let codes: Vec<&str> = results.iter().map(code_of).collect();
    assert_eq!(
        codes,
        ["OK", "LEASE_LOST", "TASK_NOT_FOUND", "OK", "LEASE_LOST"],
        "one answer per update, in order"
    );
    h.assert_status(a.envelope.id, Status::Succeeded, "a applied")
        .await;
    h.assert_stored(&b.envelope, "b untouched").await;
    h.assert_status(c.envelope.id, Status::Succeeded, "c applied")
        .await;

    // Through the engine: refusals by the machine and by the store line up too.
    let results = h
        .engine
        .settle_many(vec![
            SettleRequest {
                envelope: b.envelope.clone(),
                token: b.token,
                settlement: Settlement::Success,
            },
            SettleRequest {
                envelope: d.envelope.clone(),
                token: LeaseToken(d.token.0 + 5),
                settlement: Settlement::Success,
            },
            SettleRequest {
                envelope: a.envelope.clone(),
                token: a.token,
                settlement: Settlement::Success,
            },
            SettleRequest {
                envelope: d.envelope.clone(),
                token: d.token,
                settlement: permanent("app.Bad"),
            },
        ])
        .await;
    let codes: Vec<&str> = results.iter().map(code_of).collect();
    assert_eq!(codes, ["OK", "LEASE_LOST", "LEASE_LOST", "OK"]);
    let statuses: Vec<Option<Status>> = results
        .iter()
        .map(|r| r.as_ref().ok().map(|env| env.status))
        .collect();
    assert_eq!(
        statuses,
        [Some(Status::Succeeded), None, None, Some(Status::Dead)]
    );
    let settled: HashSet<TaskId> = [a.envelope.id, b.envelope.id, c.envelope.id, d.envelope.id]
        .into_iter()
        .collect();
    assert_eq!(settled.len(), 4);
    if let Some(stored_d) = h.stored(d.envelope.id).await {
        assert_same_bytes(
            &stored_d,
            results[3].as_ref().expect("d settled"),
            "d is stored as settled",
        );
    }
}
