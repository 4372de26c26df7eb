//! Cancelling tasks: a PENDING one is terminal with reason `CANCELLED`, by
//! id or by filter with a dry run and a limit, reversed by a redrive, and
//! atomic against concurrent claims; a running one is asked to stop, which
//! no settle from a stale copy can overwrite. A store that cannot cancel
//! says so, and the engine refuses with `UNSUPPORTED`.

use std::collections::{BTreeMap, HashSet};

use rdq_engine::{CancelFilter, ListQuery, QueuePolicy, RedriveRequest, Settlement};
use rdq_envelope::{Status, TaskId};

use crate::StoreFactory;
use crate::harness::{
    Harness, Need, assert_same_bytes, assert_same_ids, claimed_ids, code_of, ids_of, retryable,
    task, test_policy,
};

fn cancel_of(queue: &str) -> CancelFilter {
    CancelFilter {
        queue: queue.to_owned(),
        by: "compliance@example.com".to_owned(),
        message: "not wanted any more".to_owned(),
        ..CancelFilter::default()
    }
}

/// True when the store declares it cannot cancel, after checking that a
/// cancel of a running task is then refused with `UNSUPPORTED`.
async fn refuses_cancel(h: &Harness, queue: &str) -> bool {
    if h.caps().cancel {
        return false;
    }
    h.submit(task(queue)).await;
    let claimed = h.claim_one(queue).await;
    let refused = h
        .engine
        .cancel(&CancelFilter {
            ids: Some(vec![claimed.envelope.id]),
            ..cancel_of(queue)
        })
        .await;
    assert_eq!(
        code_of(&refused),
        "UNSUPPORTED",
        "a store without cancel says so"
    );
    true
}

/// A cancelled PENDING task is DEAD with reason `CANCELLED`, who and why,
/// its history kept; no claim hands it out; cancelling it again, or a task
/// that does not exist, is refused and changes nothing; filters on handler,
/// headers and age with a dry run and a limit take exactly the matching
/// tasks, oldest first; a redrive brings a cancelled task back.
pub async fn cancelling_a_pending_task_is_terminal_and_redrivable(factory: StoreFactory) {
    const QUEUE: &str = "cancel.pending";
    let h = Harness::with_policy(&factory, test_policy()).await;
    if !h.caps().cancel {
        let refused = h.engine.cancel(&cancel_of(QUEUE)).await;
        assert_eq!(
            code_of(&refused),
            "UNSUPPORTED",
            "a store without cancel says so"
        );
        return;
    }
    if h.skips(
        "cancelling_a_pending_task_is_terminal_and_redrivable",
        &[Need::List, Need::Redrive],
    ) {
        return;
    }
    let one = h.submit(task(QUEUE)).await;
    let by_id = CancelFilter {
        ids: Some(vec![one.id]),
        ..cancel_of(QUEUE)
    };
    let dry = h
        .engine
        .cancel(&CancelFilter {
            dry_run: true,
            ..by_id.clone()
        })
        .await
        .expect("dry run");
    assert_eq!(dry.ids, vec![one.id]);
    assert!(dry.running.is_empty());
    h.assert_status(one.id, Status::Pending, "a dry run changes nothing")
        .await;
    h.advance(10);
    assert_eq!(
        h.engine.cancel(&by_id).await.expect("cancel").ids,
        vec![one.id]
    );
    let dead = h
        .engine
        .list(&ListQuery {
            queue: QUEUE.into(),
            status: Some(Status::Dead),
            ..ListQuery::default()
        })
        .await
        .expect("list");
    assert_eq!(ids_of(&dead.items), vec![one.id]);
    let reason = dead.items[0].dead_reason.as_ref().expect("a reason");
    assert_eq!(reason.code, "CANCELLED");
    assert_eq!(reason.by, "compliance@example.com");
    assert_eq!(reason.message.as_deref(), Some("not wanted any more"));
    assert_eq!(reason.at, h.now());
    assert!(
        h.engine
            .claim(QUEUE, 10, None)
            .await
            .expect("claim")
            .is_empty(),
        "a cancelled task is never handed out"
    );
    let again = h.engine.cancel(&by_id).await;
    assert_eq!(code_of(&again), "INVALID_TRANSITION", "already DEAD");
    if h.caps().get_by_id {
        let unknown = h
            .engine
            .cancel(&CancelFilter {
                ids: Some(vec![TaskId::generate()]),
                ..cancel_of(QUEUE)
            })
            .await;
        assert_eq!(code_of(&unknown), "TASK_NOT_FOUND");
    }

    // Filters: handler, headers and age, oldest first, with a limit.
    let mut tenant = task(QUEUE);
    tenant.handler_ref = "compliance.report".into();
    tenant.headers = BTreeMap::from([("tenant".to_owned(), "acme".to_owned())]);
    let old: Vec<TaskId> = {
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(h.submit(tenant.clone()).await.id);
        }
        ids
    };
    h.advance(60_000);
    let young = h.submit(tenant.clone()).await;
    let other = h.submit(task(QUEUE)).await;
    let mut elsewhere = tenant.clone();
    elsewhere.headers = BTreeMap::from([("tenant".to_owned(), "globex".to_owned())]);
    let globex = h.submit(elsewhere).await;
    let filter = CancelFilter {
        handler_ref: Some("compliance.report".into()),
        headers: BTreeMap::from([("tenant".to_owned(), "acme".to_owned())]),
        older_than_ms: Some(30_000),
        ..cancel_of(QUEUE)
    };
    let would = h
        .engine
        .cancel(&CancelFilter {
            dry_run: true,
            ..filter.clone()
        })
        .await
        .expect("dry run");
    assert_eq!(would.ids, old, "the old acme reports, oldest first");
    let first_two = h
        .engine
        .cancel(&CancelFilter {
            limit: Some(2),
            ..filter.clone()
        })
        .await
        .expect("cancel");
    assert_eq!(first_two.ids, old[..2].to_vec());
    let rest = h.engine.cancel(&filter).await.expect("cancel");
    assert_eq!(rest.ids, old[2..].to_vec());
    let left: Vec<TaskId> = h
        .engine
        .claim(QUEUE, 10, None)
        .await
        .expect("claim")
        .into_iter()
        .map(|c| c.envelope.id)
        .collect();
    assert_same_ids(&left, &[young.id, other.id, globex.id], "the others run");

    // A redrive brings a cancelled task back, without its reason.
    let back = h
        .engine
        .redrive(&RedriveRequest {
            queue: QUEUE.into(),
            ids: Some(vec![one.id]),
            ..RedriveRequest::default()
        })
        .await
        .expect("redrive");
    assert_eq!(back, vec![one.id]);
    let again = h.claim_one(QUEUE).await;
    assert_eq!(again.envelope.id, one.id);
    assert!(again.envelope.dead_reason.is_none());
}

/// Cancels of PENDING tasks only (`pending_only`) and claims of the same
/// tasks race: every task ends either cancelled or claimed, never both and
/// never neither.
pub async fn a_cancel_racing_a_claim_has_exactly_one_winner(factory: StoreFactory) {
    const QUEUE: &str = "cancel.race";
    const TASKS: usize = 60;
    let h = Harness::with_policy(&factory, test_policy()).await;
    if !h.caps().cancel {
        return;
    }
    let submitted = crate::harness::submit_n(&h.engine, QUEUE, TASKS).await;
    let ids = ids_of(&submitted);
    let claimer = {
        let engine = h.engine.clone();
        tokio::spawn(async move {
            let mut claimed = Vec::new();
            for _ in 0..TASKS {
                let got = engine.claim(QUEUE, 3, None).await.expect("claim");
                if got.is_empty() {
                    tokio::task::yield_now().await;
                }
                claimed.extend(got.into_iter().map(|c| c.envelope.id));
            }
            claimed
        })
    };
    let mut cancelled = Vec::new();
    for chunk in ids.chunks(4) {
        let filter = CancelFilter {
            ids: Some(chunk.to_vec()),
            pending_only: true,
            ..cancel_of(QUEUE)
        };
        let answer = h.engine.cancel(&filter).await.unwrap_or_default();
        assert!(
            answer.running.is_empty(),
            "pending_only asks no running task"
        );
        cancelled.extend(answer.ids);
        tokio::task::yield_now().await;
    }
    let mut claimed = claimer.await.expect("the claimer");
    // What neither took yet is claimed now.
    loop {
        let got = h.engine.claim(QUEUE, 100, None).await.expect("claim");
        if got.is_empty() {
            break;
        }
        claimed.extend(got.into_iter().map(|c| c.envelope.id));
    }
    let claimed_set: HashSet<TaskId> = claimed.iter().copied().collect();
    assert_eq!(claimed_set.len(), claimed.len(), "no task claimed twice");
    for id in &cancelled {
        assert!(
            !claimed_set.contains(id),
            "task {id} was cancelled and claimed"
        );
    }
    let mut all = cancelled.clone();
    all.extend(&claimed);
    assert_same_ids(&all, &ids, "every task is cancelled or claimed");
    for id in &cancelled {
        h.assert_status(*id, Status::Dead, "a cancelled task").await;
    }
}

/// A running task asked to stop keeps its lease and learns of it (the
/// engine's cancel channel, a read under its lease, its next extension);
/// whatever its worker then reports, even from a copy taken before the
/// request, a success stands and anything else ends it DEAD with reason
/// `CANCELLED` without a retry, as does a lapsed lease; asking again is
/// harmless; a dry run changes nothing; a redrive brings it back to run as
/// usual.
pub async fn cancelling_a_running_task_stops_it_without_a_retry(factory: StoreFactory) {
    const QUEUE: &str = "cancel.running";
    let policy = QueuePolicy {
        max_attempts: 10,
        ..test_policy()
    };
    let h = Harness::with_policy(&factory, policy).await;
    if refuses_cancel(&h, QUEUE).await
        || h.skips(
            "cancelling_a_running_task_stops_it_without_a_retry",
            &[Need::GetById, Need::Redrive],
        )
    {
        return;
    }
    h.submit_n(QUEUE, 4).await;
    let claims = h.claim(QUEUE, 4).await;
    assert_eq!(claims.len(), 4);
    let ids = claimed_ids(&claims);
    let mut heard = h.engine.cancel_requests();

    let dry = h
        .engine
        .cancel(&CancelFilter {
            ids: Some(vec![ids[0]]),
            dry_run: true,
            ..cancel_of(QUEUE)
        })
        .await
        .expect("dry run");
    assert_eq!((dry.ids, dry.running), (vec![ids[0]], vec![ids[0]]));
    let untouched = h.stored(ids[0]).await.expect("stored");
    assert!(
        untouched.cancel_requested.is_none(),
        "a dry run asks nothing"
    );

    h.advance(10);
    let asked = h
        .engine
        .cancel(&CancelFilter {
            ids: Some(ids.clone()),
            ..cancel_of(QUEUE)
        })
        .await
        .expect("cancel");
    assert_eq!(asked.ids, ids);
    assert_eq!(asked.running, ids, "all four were running");
    let mut told = Vec::new();
    while let Ok(id) = heard.try_recv() {
        told.push(id);
    }
    assert_same_ids(&told, &ids, "the cancel channel names each task");
    let stored = h.stored(ids[0]).await.expect("stored");
    assert_eq!(stored.status, Status::InFlight, "the lease is kept");
    assert_eq!(stored.lease_expires_at, claims[0].envelope.lease_expires_at);
    let request = stored.cancel_requested.as_ref().expect("marked");
    assert_eq!(request.by, "compliance@example.com");
    assert_eq!(request.message.as_deref(), Some("not wanted any more"));
    assert_eq!(request.at, h.now());
    let again = h
        .engine
        .cancel(&CancelFilter {
            ids: Some(vec![ids[0]]),
            ..cancel_of(QUEUE)
        })
        .await
        .expect("asking again is harmless");
    assert_eq!(again.running, vec![ids[0]]);
    let read = h.engine.leased(&[(ids[0], claims[0].token)]).await;
    let read = read.into_iter().next().expect("one").expect("under lease");
    assert!(
        read.cancel_requested.is_some(),
        "a read under the lease shows it"
    );

    // Every outcome below is reported from the copy taken at the claim,
    // before the request.
    let extended = h
        .engine
        .extend_lease(&claims[1].envelope, claims[1].token, 5_000)
        .await
        .expect("an extension still works");
    assert!(
        extended.cancel_requested.is_some(),
        "and answers the request"
    );
    let failed = h.settle(&claims[0], retryable("app.Timeout")).await;
    assert_eq!(failed.status, Status::Dead);
    let reason = failed.dead_reason.as_ref().expect("a reason");
    assert_eq!(
        (reason.code.as_str(), reason.by.as_str()),
        ("CANCELLED", "compliance@example.com")
    );
    assert_eq!(failed.attempt_count, 1, "no further attempt");
    h.assert_stored(&failed, "the cancelled failure as answered")
        .await;
    let succeeded = h.settle(&claims[1], Settlement::Success).await;
    assert_eq!(succeeded.status, Status::Succeeded, "a success stands");
    h.assert_stored(
        &succeeded,
        "the success after a cancel request, as answered",
    )
    .await;
    if let Some(stored) = h.stored(ids[1]).await {
        assert_eq!(stored.status, Status::Succeeded);
        assert!(stored.dead_reason.is_none());
    }
    let deferred = h
        .settle(&claims[2], Settlement::Defer { delay_ms: 0 })
        .await;
    assert_eq!(deferred.status, Status::Dead);
    assert_eq!(
        deferred.dead_reason.as_ref().map(|r| r.code.as_str()),
        Some("CANCELLED")
    );
    h.advance(10_000);
    let reaped = h.engine.reap_expired(10).await.expect("reap");
    assert_eq!(ids_of(&reaped), vec![ids[3]]);
    assert_eq!(
        reaped[0].status,
        Status::Dead,
        "a lapsed lease is not retried"
    );
    assert_eq!(
        reaped[0].dead_reason.as_ref().map(|r| r.code.as_str()),
        Some("CANCELLED")
    );
    assert!(h.claim(QUEUE, 10).await.is_empty(), "nothing runs again");
    let finished = h
        .engine
        .cancel(&CancelFilter {
            ids: Some(vec![ids[1]]),
            ..cancel_of(QUEUE)
        })
        .await;
    assert_eq!(code_of(&finished), "INVALID_TRANSITION", "SUCCEEDED");

    let back = h
        .engine
        .redrive(&RedriveRequest {
            queue: QUEUE.into(),
            ids: Some(vec![ids[0]]),
            ..RedriveRequest::default()
        })
        .await
        .expect("redrive");
    assert_eq!(back, vec![ids[0]]);
    let rerun = h.claim_one(QUEUE).await;
    assert!(rerun.envelope.cancel_requested.is_none());
    let retried = h.settle(&rerun, retryable("app.Timeout")).await;
    assert_eq!(retried.status, Status::Pending, "retried as usual again");
}

/// Cancels race the settles of the tasks' workers (failures and
/// successes, each from the copy taken at the claim): a task a cancel did
/// not report is untouched by it; one it reported ends DEAD with reason
/// `CANCELLED` unless its worker's success came first or after, which
/// stands; every settle's answer is the state stored; nothing runs again.
pub async fn a_cancel_racing_a_settle_has_exactly_one_winner(factory: StoreFactory) {
    const QUEUE: &str = "cancel.settle.race";
    const TASKS: usize = 40;
    let h = Harness::with_policy(&factory, test_policy()).await;
    if !h.caps().cancel
        || h.skips(
            "a_cancel_racing_a_settle_has_exactly_one_winner",
            &[Need::GetById],
        )
    {
        return;
    }
    h.submit_n(QUEUE, TASKS).await;
    let claims = h.claim(QUEUE, TASKS).await;
    assert_eq!(claims.len(), TASKS);
    let ids = claimed_ids(&claims);
    let settler = {
        let engine = h.engine.clone();
        let claims = claims.clone();
        tokio::spawn(async move {
            let mut answers = Vec::new();
            for (i, c) in claims.iter().enumerate() {
                let settlement = if i % 2 == 0 {
                    Settlement::Success
                } else {
                    retryable("app.Timeout")
                };
                let answer = engine
                    .settle(&c.envelope, c.token, settlement)
                    .await
                    .expect("a settle under its lease is accepted");
                answers.push(answer);
                tokio::task::yield_now().await;
            }
            answers
        })
    };
    let mut reported = HashSet::new();
    for chunk in ids.chunks(4) {
        let answer = h
            .engine
            .cancel(&CancelFilter {
                ids: Some(chunk.to_vec()),
                ..cancel_of(QUEUE)
            })
            .await
            .expect("cancel");
        reported.extend(answer.ids);
        tokio::task::yield_now().await;
    }
    let answers = settler.await.expect("the settler");
    for (i, answer) in answers.iter().enumerate() {
        let stored = h.stored(answer.id).await.expect("stored");
        let success = i % 2 == 0;
        let cancelled = stored
            .dead_reason
            .as_ref()
            .is_some_and(|r| r.code == "CANCELLED");
        if success {
            assert_eq!(
                stored.status,
                Status::Succeeded,
                "task {i}: a success stands"
            );
            assert_eq!(
                reported.contains(&answer.id),
                stored.cancel_requested.is_some(),
                "task {i}: reported exactly when the request was recorded"
            );
            assert_same_bytes(&stored, answer, "the settle's answer is what is stored");
        } else {
            assert!(
                reported.contains(&answer.id),
                "task {i}: a failed task was running or pending again, and the cancel took it"
            );
            assert!(cancelled, "task {i}: cancelled, not retried: {stored:?}");
        }
    }
    assert!(h.claim(QUEUE, TASKS).await.is_empty(), "nothing runs again");
}
