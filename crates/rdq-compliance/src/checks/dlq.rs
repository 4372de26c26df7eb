//! The dead-letter queue: paging that neither loses nor repeats a task while
//! new dead tasks arrive, and redrive by id or filter, with dry runs and
//! limits, resetting attempts while keeping the whole history.

use std::collections::HashSet;

use rdq_engine::{DeadReasonFilter, ListOrder, ListQuery, QueuePolicy, RedriveRequest, Settlement};
use rdq_envelope::{Status, TaskId};

use crate::StoreFactory;
use crate::harness::{
    Harness, Need, Spi as _, assert_same_ids, code_of, ids_of, kill, retryable, task, test_policy,
};

/// Paging a queue's DEAD tasks with a small page, newest first and oldest
/// first, while another task keeps adding dead tasks: every task that was
/// dead before paging began is seen exactly once, pages keep their order,
/// cursors are the last id of a full page, and error-type filters page too.
pub async fn dlq_paging_is_stable_under_concurrent_inserts(factory: StoreFactory) {
    const QUEUE: &str = "dlq.paging";
    const INITIAL: usize = 90;
    const PAGE: usize = 7;
    let h = Harness::new(&factory).await;
    if h.skips(
        "dlq_paging_is_stable_under_concurrent_inserts",
        &[Need::List],
    ) {
        return;
    }
    let initial = h.kill(QUEUE, INITIAL, "app.Boom").await;
    let mut added_total: Vec<TaskId> = Vec::new();

    for order in [ListOrder::NewestFirst, ListOrder::OldestFirst] {
        let engine = h.engine.clone();
        let inserter = tokio::spawn(async move {
            let mut added = Vec::new();
            for _ in 0..15 {
                added.extend(kill(&engine, QUEUE, 3, "app.Later").await);
                tokio::task::yield_now().await;
            }
            added
        });

        let mut seen: Vec<TaskId> = Vec::new();
        let mut cursor = None;
        loop {
            let page = h
                .store
                .list(&ListQuery {
                    queue: QUEUE.into(),
                    status: Some(Status::Dead),
                    error_type: None,
                    reason: None,
                    handler_ref: None,
                    headers: Default::default(),
                    cursor,
                    limit: PAGE,
                    order,
                })
                .await
                .expect("list");
            assert!(page.items.len() <= PAGE, "a page holds at most its limit");
            for env in &page.items {
                assert_eq!(env.status, Status::Dead);
                assert_eq!(env.queue, QUEUE);
            }
            if page.items.len() == PAGE {
                assert_eq!(
                    page.next_cursor,
                    page.items.last().map(|env| env.id),
                    "a full page's cursor is its last id"
                );
            } else {
                assert_eq!(page.next_cursor, None, "a short page is the last");
            }
            seen.extend(page.items.iter().map(|env| env.id));
            assert!(seen.len() < 10 * INITIAL, "paging does not end");
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
            tokio::task::yield_now().await;
        }
        let added = inserter.await.expect("the inserter panicked");

        let in_order = seen.windows(2).all(|w| match order {
            ListOrder::NewestFirst => w[0] > w[1],
            ListOrder::OldestFirst => w[0] < w[1],
        });
        assert!(
            in_order,
            "{order:?}: pages keep their order and never repeat"
        );
        let seen_set: HashSet<TaskId> = seen.iter().copied().collect();
        let missing: Vec<&TaskId> = initial.iter().filter(|id| !seen_set.contains(id)).collect();
        assert!(
            missing.is_empty(),
            "{order:?}: dead tasks lost in paging: {missing:?}"
        );
        let known: HashSet<TaskId> = initial
            .iter()
            .chain(&added_total)
            .chain(&added)
            .copied()
            .collect();
        assert!(
            seen.iter().all(|id| known.contains(id)),
            "{order:?}: only the queue's dead tasks are listed"
        );
        added_total.extend(added);
    }

    // A filter on the latest error type pages the same way.
    let mut later: Vec<TaskId> = Vec::new();
    let mut cursor = None;
    loop {
        let page = h
            .store
            .list(&ListQuery {
                queue: QUEUE.into(),
                status: Some(Status::Dead),
                error_type: Some("app.L*".into()),
                reason: None,
                handler_ref: None,
                headers: Default::default(),
                cursor,
                limit: PAGE,
                order: ListOrder::OldestFirst,
            })
            .await
            .expect("list");
        later.extend(page.items.iter().map(|env| env.id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_same_ids(&later, &added_total, "error_type filter");

    let nothing = h
        .store
        .list(&ListQuery {
            queue: QUEUE.into(),
            status: Some(Status::Dead),
            error_type: Some("db.*".into()),
            limit: PAGE,
            ..ListQuery::default()
        })
        .await
        .expect("list");
    assert!(nothing.items.is_empty());
    assert_eq!(nothing.next_cursor, None);

    let bad_glob = h
        .store
        .list(&ListQuery {
            queue: QUEUE.into(),
            error_type: Some("app.[".into()),
            limit: PAGE,
            ..ListQuery::default()
        })
        .await;
    assert_eq!(code_of(&bad_glob), "INVALID_ARGUMENT");
}

/// A redriven task is PENDING and due now with `attempt_count` 0 and
/// `redrive_count + 1`, its attempt history intact; its attempt numbers keep
/// counting and it gets a full attempt budget again.
pub async fn redrive_resets_attempts_and_keeps_history(factory: StoreFactory) {
    const QUEUE: &str = "dlq.redrive";
    let policy = QueuePolicy {
        max_attempts: 2,
        ..test_policy()
    };
    let h = Harness::with_policy(&factory, policy).await;
    if h.skips(
        "redrive_resets_attempts_and_keeps_history",
        &[Need::Redrive, Need::GetById],
    ) {
        return;
    }
    let submitted = h.submit(task(QUEUE)).await;
    for _ in 0..2 {
        let c = h.claim_one(QUEUE).await;
        h.settle(&c, retryable("net.Timeout")).await;
    }
    let dead = h.store.get(submitted.id).await.expect("get");
    assert_eq!(dead.status, Status::Dead);
    assert_eq!(dead.attempt_count, 2);

    h.advance(5_000);
    let request = RedriveRequest {
        queue: QUEUE.into(),
        ids: Some(vec![submitted.id]),
        ..RedriveRequest::default()
    };
    let redriven = h.engine.redrive(&request).await.expect("redrive");
    assert_eq!(redriven, vec![submitted.id]);
    let back = h.store.get(submitted.id).await.expect("get");
    assert_eq!(back.status, Status::Pending);
    assert_eq!(back.attempt_count, 0);
    assert_eq!(back.redrive_count, dead.redrive_count + 1);
    assert_eq!(back.next_attempt_at, Some(h.now()));
    assert_eq!(back.lease_expires_at, None);
    assert_eq!(back.attempts, dead.attempts, "history kept");
    assert_eq!(
        back.last_error().map(|e| e.error_type.as_str()),
        Some("net.Timeout")
    );
    assert!(
        h.engine
            .redrive(&request)
            .await
            .expect("redrive")
            .is_empty(),
        "a task that is not DEAD is not redriven"
    );

    let c = h.claim_one(QUEUE).await;
    assert_eq!(c.envelope.id, submitted.id);
    assert_eq!(c.token.0, 3, "attempt numbers continue the history");
    assert_eq!(c.envelope.attempt_count, 1);
    assert_eq!(c.envelope.attempts.len(), 3);
    let retry = h.settle(&c, retryable("net.Timeout")).await;
    assert_eq!(retry.status, Status::Pending, "a full budget again");
    let c = h.claim_one(QUEUE).await;
    let dead_again = h
        .settle(
            &c,
            Settlement::Failure {
                error: rdq_envelope::ErrorInfo::new("net.Reset", "again"),
                kind: rdq_engine::FailureKind::Retryable,
            },
        )
        .await;
    assert_eq!(dead_again.status, Status::Dead);
    assert_eq!(dead_again.attempts.len(), 4);
    assert_eq!(dead_again.redrive_count, back.redrive_count);
}

/// Redrive by error-type glob, by ids, with a limit and as a dry run: a dry
/// run changes nothing, a limit is honoured, ids that are not DEAD tasks of
/// the queue are skipped, and the filters combine.
pub async fn redrive_by_filter_with_dry_run_and_limit(factory: StoreFactory) {
    const QUEUE: &str = "dlq.filter";
    let h = Harness::new(&factory).await;
    if h.skips("redrive_by_filter_with_dry_run_and_limit", &[Need::Redrive]) {
        return;
    }
    let net = h.kill(QUEUE, 6, "net.Timeout").await;
    let db = h.kill(QUEUE, 4, "db.Constraint").await;
    let pending = h.submit(task(QUEUE)).await;
    let engine = &h.engine;
    let redrive =
        |request: RedriveRequest| async move { engine.redrive(&request).await.expect("redrive") };
    let base = RedriveRequest {
        queue: QUEUE.into(),
        ..RedriveRequest::default()
    };

    let would = redrive(RedriveRequest {
        error_type: Some("net.*".into()),
        dry_run: true,
        ..base.clone()
    })
    .await;
    assert_same_ids(&would, &net, "a dry run names what would be redriven");
    for id in net.iter().chain(&db) {
        h.assert_status(*id, Status::Dead, "a dry run changes nothing")
            .await;
    }
    let limited_dry_run = redrive(RedriveRequest {
        limit: Some(3),
        dry_run: true,
        ..base.clone()
    })
    .await;
    assert_eq!(limited_dry_run.len(), 3);

    let first = redrive(RedriveRequest {
        error_type: Some("net.*".into()),
        limit: Some(4),
        ..base.clone()
    })
    .await;
    assert_eq!(first.len(), 4, "the limit is honoured");
    for id in &first {
        assert!(net.contains(id), "only matching tasks are redriven");
        if let Some(env) = h.stored(*id).await {
            assert_eq!(env.status, Status::Pending);
            assert_eq!(env.redrive_count, 1);
        }
    }
    let rest = redrive(RedriveRequest {
        error_type: Some("net.*".into()),
        ..base.clone()
    })
    .await;
    let both: Vec<TaskId> = first.iter().chain(&rest).copied().collect();
    assert_same_ids(&both, &net, "every net task redriven once");
    assert!(
        redrive(RedriveRequest {
            error_type: Some("net.*".into()),
            ..base.clone()
        })
        .await
        .is_empty()
    );

    let picked = redrive(RedriveRequest {
        ids: Some(vec![db[0], pending.id, TaskId::generate(), db[0]]),
        ..base.clone()
    })
    .await;
    assert_eq!(
        picked,
        vec![db[0]],
        "only DEAD tasks of the queue, once each"
    );
    h.assert_status(pending.id, Status::Pending, "a PENDING task is left alone")
        .await;
    let mismatch = redrive(RedriveRequest {
        ids: Some(vec![db[1], db[2]]),
        error_type: Some("net.*".into()),
        ..base.clone()
    })
    .await;
    assert!(mismatch.is_empty(), "ids and error_type combine");
    let elsewhere = redrive(RedriveRequest {
        queue: "dlq.elsewhere".into(),
        ids: Some(vec![db[1]]),
        ..RedriveRequest::default()
    })
    .await;
    assert!(elsewhere.is_empty(), "the queue bounds the ids");

    let remaining = redrive(base.clone()).await;
    assert_same_ids(&remaining, &db[1..], "the rest of the DLQ");
    h.advance(1);
    let claimed = h.claim(QUEUE, 100).await;
    assert_eq!(
        claimed.len(),
        net.len() + db.len() + 1,
        "all claimable again"
    );
}

/// `Engine::dead_task` finds a DEAD task by queue and id, by lookup or by
/// paging the DLQ, whichever the store can do; a task of another queue, one
/// still PENDING and an unknown id are all `TASK_NOT_FOUND`, and a bad queue
/// name is refused.
pub async fn a_dead_task_is_found_by_queue_and_id(factory: StoreFactory) {
    const QUEUE: &str = "dlq.show";
    const OTHER: &str = "dlq.show-other";
    let h = Harness::new(&factory).await;
    if h.skips("a_dead_task_is_found_by_queue_and_id", &[Need::List]) {
        return;
    }
    let dead = h.kill(QUEUE, 3, "app.Shown").await;
    let elsewhere = h.kill(OTHER, 1, "app.Elsewhere").await;
    let waiting = h.submit(task(QUEUE)).await;

    for id in &dead {
        let env = h.engine.dead_task(QUEUE, *id).await.expect("dead task");
        assert_eq!(env.id, *id);
        assert_eq!(env.queue, QUEUE);
        assert_eq!(env.status, Status::Dead);
        assert_eq!(
            env.last_error().map(|e| e.error_type.as_str()),
            Some("app.Shown")
        );
    }
    for (queue, id, what) in [
        (QUEUE, elsewhere[0], "a dead task of another queue"),
        (OTHER, dead[0], "a dead task looked for in another queue"),
        (QUEUE, waiting.id, "a PENDING task"),
        (QUEUE, TaskId::generate(), "an unknown id"),
    ] {
        let missing = h.engine.dead_task(queue, id).await;
        assert_eq!(code_of(&missing), "TASK_NOT_FOUND", "{what}");
    }
    let bad = h.engine.dead_task("Bad Queue", dead[0]).await;
    assert_eq!(code_of(&bad), "INVALID_QUEUE_NAME");
}

/// Why a task is DEAD survives the store: every dead task read back has the
/// reason the machine gave it (a permanent failure, spent attempts, lapsed
/// leases over `max_lease_expiries`); listings, counts and redrives filter
/// on it; a redrive by reason takes exactly those tasks and removes their
/// reason.
pub async fn dead_reasons_are_kept_filtered_and_redriven(factory: StoreFactory) {
    const QUEUE: &str = "dlq.reasons";
    let policy = QueuePolicy {
        max_attempts: 2,
        max_lease_expiries: 1,
        ..test_policy()
    };
    let h = Harness::with_policy(&factory, policy).await;
    if h.skips(
        "dead_reasons_are_kept_filtered_and_redriven",
        &[Need::List, Need::Redrive],
    ) {
        return;
    }
    let permanent = h.kill(QUEUE, 3, "app.Invalid").await;
    // Two retryable failures spend both attempts.
    let spent = h.submit(task(QUEUE)).await;
    for _ in 0..2 {
        let c = h.claim_one(QUEUE).await;
        assert_eq!(c.envelope.id, spent.id);
        h.settle(&c, retryable("net.Timeout")).await;
    }
    // One lapsed lease spends the poison budget.
    let poison = h.submit(task(QUEUE)).await;
    let c = h.claim_one(QUEUE).await;
    assert_eq!(c.envelope.id, poison.id);
    h.advance(2_000);
    let reaped = h.engine.reap_expired(100).await.expect("reap");
    assert_eq!(ids_of(&reaped), vec![poison.id]);

    let by_reason = |code: &str| {
        let engine = h.engine.clone();
        let code = code.to_owned();
        async move {
            let mut ids = Vec::new();
            let mut cursor = None;
            loop {
                let page = engine
                    .list(&ListQuery {
                        queue: QUEUE.into(),
                        status: Some(Status::Dead),
                        reason: Some(DeadReasonFilter::parse(&code).expect("a known code")),
                        cursor,
                        limit: 2,
                        ..ListQuery::default()
                    })
                    .await
                    .expect("list");
                for env in &page.items {
                    let reason = env
                        .dead_reason
                        .as_ref()
                        .expect("a dead task has its reason");
                    assert_eq!(reason.code, code);
                }
                ids.extend(page.items.iter().map(|env| env.id));
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            ids
        }
    };
    assert_same_ids(
        &by_reason("PERMANENT_FAILURE").await,
        &permanent,
        "PERMANENT_FAILURE",
    );
    assert_same_ids(
        &by_reason("ATTEMPTS_EXHAUSTED").await,
        &[spent.id],
        "ATTEMPTS_EXHAUSTED",
    );
    assert_same_ids(
        &by_reason("LEASE_EXPIRIES_EXHAUSTED").await,
        &[poison.id],
        "LEASE_EXPIRIES_EXHAUSTED",
    );
    assert!(by_reason("CANCELLED").await.is_empty());
    let poisoned = h
        .engine
        .list(&ListQuery {
            queue: QUEUE.into(),
            status: Some(Status::Dead),
            reason: Some(DeadReasonFilter::parse("LEASE_EXPIRIES_EXHAUSTED").expect("known")),
            ..ListQuery::default()
        })
        .await
        .expect("list");
    let reason = poisoned.items[0].dead_reason.as_ref().expect("reason");
    assert_eq!(reason.by, "reaper");
    assert_eq!(reason.at, h.now());

    let counts = h.engine.dead_reasons(QUEUE).await.expect("reasons");
    let counted: Vec<(&str, u64)> = counts
        .iter()
        .map(|c| (c.reason.as_str(), c.count))
        .collect();
    assert_eq!(
        counted,
        vec![
            ("PERMANENT_FAILURE", 3),
            ("ATTEMPTS_EXHAUSTED", 1),
            ("LEASE_EXPIRIES_EXHAUSTED", 1)
        ]
    );
    assert_eq!(
        code_of(&DeadReasonFilter::parse("NO_SUCH_REASON").map(drop)),
        "INVALID_ARGUMENT"
    );

    // A redrive by reason: a dry run lists, then exactly those go back.
    let request = RedriveRequest {
        queue: QUEUE.into(),
        reason: Some(DeadReasonFilter::parse("PERMANENT_FAILURE").expect("known")),
        limit: Some(2),
        dry_run: true,
        ..RedriveRequest::default()
    };
    let would = h.engine.redrive(&request).await.expect("dry run");
    assert_eq!(would.len(), 2);
    assert!(would.iter().all(|id| permanent.contains(id)));
    assert_eq!(
        by_reason("PERMANENT_FAILURE").await.len(),
        3,
        "a dry run changes nothing"
    );
    let done = h
        .engine
        .redrive(&RedriveRequest {
            dry_run: false,
            limit: None,
            ..request
        })
        .await
        .expect("redrive");
    assert_same_ids(&done, &permanent, "redriven by reason");
    assert!(by_reason("PERMANENT_FAILURE").await.is_empty());
    for id in &permanent {
        if let Some(env) = h.stored(*id).await {
            assert_eq!(env.status, Status::Pending);
            assert!(
                env.dead_reason.is_none(),
                "a redriven task has no dead reason"
            );
        }
    }
    assert_same_ids(
        &by_reason("ATTEMPTS_EXHAUSTED").await,
        &[spent.id],
        "untouched",
    );
}
