//! The admin path: idempotent submit, counts, purge, delete, prune, and the
//! refusals every store gives for ids it does not hold.

use rdq_engine::{
    ClaimRequest, LeaseToken, LeasedUpdate, ListQuery, QueuePolicy, RedriveRequest, Settlement,
    Submitted,
};
use rdq_envelope::{Envelope, Status, TaskId};

use crate::StoreFactory;
use crate::harness::{
    Harness, Need, Spi as _, assert_same_bytes, at, claimed_ids, code_of, permanent, task,
    test_policy,
};

/// A second submit with the same idempotency key to the same queue returns
/// the original task, unchanged; keys are scoped to their queue, hold within
/// one batch, and hold while the original lives on.
pub async fn idempotent_submit_returns_the_original(factory: StoreFactory) {
    const QUEUE: &str = "admin.idempotent";
    const OTHER: &str = "admin.idempotent-other";
    let h = Harness::new(&factory).await;
    if h.skips(
        "idempotent_submit_returns_the_original",
        &[Need::IdempotentSubmit],
    ) {
        return;
    }
    let keyed = |queue: &str, key: &str, payload: &[u8]| {
        let mut request = task(queue);
        request.idempotency_key = Some(key.to_owned());
        request.payload = payload.to_vec();
        request
    };

    let original = h.submit(keyed(QUEUE, "order-42", b"first")).await;
    h.advance(10);
    match h
        .engine
        .submit(keyed(QUEUE, "order-42", b"second"))
        .await
        .expect("submit")
    {
        Submitted::Existing(env) => assert_same_bytes(&env, &original, "the original task"),
        other => panic!("a repeated key should return the original, got {other:?}"),
    }
    let elsewhere = h.submit(keyed(OTHER, "order-42", b"first")).await;
    assert_ne!(elsewhere.id, original.id, "keys are per queue");

    let unkeyed = [h.submit(task(QUEUE)).await, h.submit(task(QUEUE)).await];
    assert_ne!(unkeyed[0].id, unkeyed[1].id, "no key, no deduplication");

    let batch = h
        .engine
        .submit_many(vec![
            keyed(QUEUE, "batch-1", b"a"),
            keyed(QUEUE, "batch-1", b"b"),
            keyed(QUEUE, "batch-2", b"c"),
        ])
        .await;
    let created_first = match &batch[0] {
        Ok(Submitted::Created(env)) => env.clone(),
        other => panic!("the first of a key is created, got {other:?}"),
    };
    match &batch[1] {
        Ok(Submitted::Existing(env)) => assert_eq!(env.id, created_first.id),
        other => panic!("a key repeated within a batch returns the first, got {other:?}"),
    }
    assert!(matches!(&batch[2], Ok(Submitted::Created(_))));

    let all = h.claim(QUEUE, 100).await;
    assert_eq!(all.len(), 5, "one task per key, plus the unkeyed ones");
    assert!(claimed_ids(&all).contains(&original.id));

    match h
        .engine
        .submit(keyed(QUEUE, "order-42", b"third"))
        .await
        .expect("submit")
    {
        Submitted::Existing(env) => {
            assert_eq!(env.id, original.id, "the key holds while the task lives");
            assert_eq!(env.payload, original.payload);
        }
        other => panic!("a repeated key should return the original, got {other:?}"),
    }
}

/// Counts per queue and status (including a queue with only a stored
/// policy, never a queue with neither), purge with dry run, delete, and
/// pruning of SUCCEEDED tasks strictly before a cutoff, honouring its limit.
pub async fn counts_purge_delete_and_prune(factory: StoreFactory) {
    const QUEUE: &str = "admin.main";
    const CONFIGURED: &str = "admin.configured";
    const EMPTIED: &str = "admin.emptied";
    let h = Harness::new(&factory).await;
    if h.skips(
        "counts_purge_delete_and_prune",
        &[Need::Counts, Need::Purge, Need::Prune, Need::GetById],
    ) {
        return;
    }
    // Two SUCCEEDED (finished at t0+100 and t0+600), one DEAD, two IN_FLIGHT, three PENDING.
    h.submit_n(QUEUE, 2).await;
    let winners = h.claim(QUEUE, 2).await;
    h.advance(100);
    let early = h.settle(&winners[0], Settlement::Success).await;
    h.advance(500);
    let late = h.settle(&winners[1], Settlement::Success).await;
    h.submit(task(QUEUE)).await;
    let loser = h.claim_one(QUEUE).await;
    h.settle(&loser, permanent("app.Bad")).await;
    h.submit_n(QUEUE, 2).await;
    let running = h.claim(QUEUE, 2).await;
    let waiting = h.submit_n(QUEUE, 3).await;
    if h.caps().queue_config {
        h.engine
            .set_policy(CONFIGURED, &test_policy())
            .await
            .expect("set_policy");
    }
    h.submit(task(EMPTIED)).await;
    assert_eq!(
        h.store
            .purge(EMPTIED, Status::Pending, false)
            .await
            .expect("purge"),
        1
    );

    let counts_of = |queue: &'static str| {
        let store = h.store.clone();
        async move {
            let counts = store.counts().await.expect("counts");
            counts
                .into_iter()
                .find(|c| c.queue == queue)
                .map(|c| (c.pending, c.in_flight, c.succeeded, c.dead))
        }
    };
    assert_eq!(counts_of(QUEUE).await, Some((3, 2, 2, 1)));
    if h.caps().queue_config {
        assert_eq!(
            counts_of(CONFIGURED).await,
            Some((0, 0, 0, 0)),
            "a queue with a stored policy is counted"
        );
    }
    assert_eq!(
        counts_of(EMPTIED).await,
        None,
        "a queue with nothing is not"
    );

    assert_eq!(
        h.store
            .purge(QUEUE, Status::Dead, true)
            .await
            .expect("purge"),
        1
    );
    assert_eq!(
        counts_of(QUEUE).await,
        Some((3, 2, 2, 1)),
        "a dry run removes nothing"
    );
    assert_eq!(
        h.store
            .purge(QUEUE, Status::Pending, false)
            .await
            .expect("purge"),
        3
    );
    assert_eq!(counts_of(QUEUE).await, Some((0, 2, 2, 1)));
    assert_eq!(code_of(&h.store.get(waiting[0].id).await), "TASK_NOT_FOUND");

    let gone = running[0].envelope.id;
    h.store.delete(gone).await.expect("delete");
    assert_eq!(code_of(&h.store.get(gone).await), "TASK_NOT_FOUND");
    assert_eq!(code_of(&h.store.delete(gone).await), "TASK_NOT_FOUND");
    let orphan = h
        .engine
        .settle(&running[0].envelope, running[0].token, Settlement::Success)
        .await;
    assert_eq!(code_of(&orphan), "TASK_NOT_FOUND");
    assert_eq!(counts_of(QUEUE).await, Some((0, 1, 2, 1)));

    let prune = |before: rdq_envelope::Timestamp, limit: usize| {
        let store = h.store.clone();
        async move {
            store
                .prune_succeeded(QUEUE, before, limit)
                .await
                .expect("prune")
        }
    };
    assert_eq!(prune(at(100), 10).await, 0, "the cutoff is exclusive");
    assert_eq!(prune(at(101), 10).await, 1);
    assert_eq!(code_of(&h.store.get(early.id).await), "TASK_NOT_FOUND");
    h.store.get(late.id).await.expect("the later one stays");
    assert_eq!(
        h.store
            .prune_succeeded("admin.nothing-here", at(1_000_000), 10)
            .await
            .expect("prune"),
        0
    );

    // The limit holds, and the engine's pruner applies the queue's retention.
    h.submit_n(QUEUE, 3).await;
    let more = h.claim(QUEUE, 3).await;
    for c in &more {
        h.settle(c, Settlement::Success).await;
    }
    h.advance(1);
    assert_eq!(prune(h.now(), 1).await, 1, "prune honours its limit");
    assert_eq!(counts_of(QUEUE).await, Some((0, 1, 3, 1)));
    let retention = QueuePolicy::default().retain_succeeded_ms;
    h.advance(retention - 1_000);
    assert_eq!(
        h.engine.prune(100).await.expect("prune"),
        0,
        "within retention"
    );
    h.advance(1_001);
    assert_eq!(
        h.engine.prune(100).await.expect("prune"),
        3,
        "past retention"
    );
    assert_eq!(counts_of(QUEUE).await, Some((0, 1, 0, 1)));
}

/// Ids and queues a store does not hold: `get`, `delete` and a settle answer
/// `TASK_NOT_FOUND`; redrive skips them; claims and listings of unknown
/// queues are empty; an unconfigured queue has no stored policy.
pub async fn unknown_ids_are_reported(factory: StoreFactory) {
    let h = Harness::new(&factory).await;
    let caps = h.caps();
    let ghost = TaskId::generate();
    let mut ghost_env = Envelope::new("admin.ghost", "ghost", b"", "text/plain", h.now());
    ghost_env.id = ghost;
    ghost_env.status = Status::InFlight;

    let settled = h
        .store
        .settle(vec![LeasedUpdate {
            envelope: ghost_env,
            expected: LeaseToken(1),
        }])
        .await;
    assert_eq!(settled.len(), 1);
    assert_eq!(code_of(&settled[0]), "TASK_NOT_FOUND");
    assert!(
        h.store
            .claim(&ClaimRequest::new("admin.never-used", 10, 1_000, h.now()))
            .await
            .expect("claim")
            .is_empty()
    );
    if caps.get_by_id {
        assert_eq!(code_of(&h.store.get(ghost).await), "TASK_NOT_FOUND");
    }
    if caps.purge {
        assert_eq!(code_of(&h.store.delete(ghost).await), "TASK_NOT_FOUND");
        assert_eq!(
            h.store
                .purge("admin.never-used", Status::Dead, false)
                .await
                .expect("purge"),
            0
        );
    }
    if caps.redrive {
        let redriven = h
            .store
            .redrive(
                &RedriveRequest {
                    queue: "admin.ghost".into(),
                    ids: Some(vec![ghost]),
                    ..RedriveRequest::default()
                },
                h.now(),
            )
            .await
            .expect("redrive");
        assert!(redriven.is_empty());
    }
    if caps.list {
        let page = h
            .store
            .list(&ListQuery {
                queue: "admin.never-used".into(),
                limit: 10,
                ..ListQuery::default()
            })
            .await
            .expect("list");
        assert!(page.items.is_empty());
        assert_eq!(page.next_cursor, None);
    }
    if caps.queue_config {
        assert_eq!(
            h.store
                .get_config("admin.never-used")
                .await
                .expect("get_config"),
            None
        );
    }
    if caps.counts {
        assert!(
            h.store.counts().await.expect("counts").is_empty(),
            "a fresh store counts no queues"
        );
    }
}
