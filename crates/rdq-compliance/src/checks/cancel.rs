//! Cancelling PENDING tasks: terminal with reason `CANCELLED`, by id or by
//! filter with a dry run and a limit, reversed by a redrive, and atomic
//! against concurrent claims. A store that cannot cancel says so, and the
//! engine refuses with `UNSUPPORTED`.

use std::collections::{BTreeMap, HashSet};

use rdq_engine::{CancelFilter, ListQuery, RedriveRequest};
use rdq_envelope::{Status, TaskId};

use crate::StoreFactory;
use crate::harness::{Harness, Need, assert_same_ids, code_of, ids_of, task, test_policy};

fn cancel_of(queue: &str) -> CancelFilter {
    CancelFilter {
        queue: queue.to_owned(),
        by: "compliance@example.com".to_owned(),
        message: "not wanted any more".to_owned(),
        ..CancelFilter::default()
    }
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
    assert_eq!(dry, vec![one.id]);
    h.assert_status(one.id, Status::Pending, "a dry run changes nothing")
        .await;
    h.advance(10);
    assert_eq!(h.engine.cancel(&by_id).await.expect("cancel"), vec![one.id]);
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
    assert_eq!(would, old, "the old acme reports, oldest first");
    let first_two = h
        .engine
        .cancel(&CancelFilter {
            limit: Some(2),
            ..filter.clone()
        })
        .await
        .expect("cancel");
    assert_eq!(first_two, old[..2].to_vec());
    let rest = h.engine.cancel(&filter).await.expect("cancel");
    assert_eq!(rest, old[2..].to_vec());
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

/// Cancels and claims of the same PENDING tasks race: every task ends
/// either cancelled or claimed, never both and never neither.
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
            ..cancel_of(QUEUE)
        };
        cancelled.extend(h.engine.cancel(&filter).await.unwrap_or_default());
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
