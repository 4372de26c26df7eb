//! Sources' cursors: an ingest submits its tasks and moves its cursor as
//! one compare-and-swap step, of racing ingests from one cursor exactly one
//! applies, a replayed record is one task, and a refused record is kept DEAD
//! with its bytes (docs/sources.md). A store without cursors says so: the
//! engine refuses to read them with `UNSUPPORTED`, and an ingest is a plain
//! submit under the records' locators.

use std::collections::{BTreeMap, HashSet};

use futures::future::join_all;
use rdq_engine::{
    EngineError, IngestOutcome, IngestRequest, NewTask, QueuePolicy, RefusedRecord, SOURCE_HEADER,
    SourceCursor, SubmitRequest, Submitted,
};
use rdq_envelope::{Status, dead_reasons};

use crate::StoreFactory;
use crate::harness::{Harness, code_of, test_policy};

/// The locator of record `offset` of `partition` of a test topic.
fn locator(source: &str, partition: &str, offset: u64) -> String {
    format!("kafka://compliance/{source}/{partition}/{offset}")
}

/// The task of record `offset`, as a bridge builds it.
async fn record(h: &Harness, queue: &str, source: &str, partition: &str, offset: u64) -> NewTask {
    let locator = locator(source, partition, offset);
    let mut system_headers = BTreeMap::new();
    system_headers.insert(SOURCE_HEADER.to_owned(), locator.clone());
    h.engine
        .record_task(&SubmitRequest {
            queue: queue.to_owned(),
            handler_ref: "compliance.record".to_owned(),
            payload: format!("record {offset}").into_bytes(),
            payload_content_type: "text/plain".to_owned(),
            system_headers,
            idempotency_key: Some(locator),
            ..SubmitRequest::default()
        })
        .await
        .expect("a record's task")
}

/// An ingest of records `from..to` of `partition`, from cursor `expected`.
async fn run_of(
    h: &Harness,
    queue: &str,
    (source, partition): (&str, &str),
    expected: Option<u64>,
    from: u64,
    to: u64,
) -> IngestRequest {
    let mut tasks = Vec::new();
    for offset in from..to {
        tasks.push(record(h, queue, source, partition, offset).await);
    }
    IngestRequest {
        source: source.to_owned(),
        partition: partition.to_owned(),
        queue: queue.to_owned(),
        expected,
        next: to,
        tasks,
        now_ms: h.now().unix_ms(),
    }
}

fn ingested(outcome: Result<IngestOutcome, EngineError>, what: &str) -> Vec<Submitted> {
    match outcome {
        Ok(IngestOutcome::Ingested(results)) => results
            .into_iter()
            .map(|r| r.unwrap_or_else(|e| panic!("{what}: a task was refused: {e}")))
            .collect(),
        other => panic!("{what}: expected the ingest to apply, got {other:?}"),
    }
}

/// The locators of every task a claim of `queue` hands out (every store
/// can claim), each once.
async fn claimed_locators(h: &Harness, queue: &str) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let claims = h.claim(queue, 100).await;
        if claims.is_empty() {
            break;
        }
        for claimed in &claims {
            out.push(
                claimed
                    .envelope
                    .headers
                    .get(SOURCE_HEADER)
                    .cloned()
                    .expect("a record's task carries its locator"),
            );
            h.settle(claimed, rdq_engine::Settlement::Success).await;
        }
    }
    out.sort();
    out
}

/// True (after checking the refusal) when the store keeps no cursors.
async fn lacks_cursors(h: &Harness, check: &str) -> bool {
    if h.caps().source_cursors {
        return false;
    }
    assert_eq!(
        code_of(&h.engine.source_cursors("compliance.none").await),
        "UNSUPPORTED",
        "a store without source cursors says so"
    );
    eprintln!("rdq-compliance: {check}: the store declares no source cursors, and refuses them");
    true
}

/// An ingest submits its run's tasks and moves the cursor; a second one
/// from the new cursor goes on; one from a stale cursor changes nothing
/// and says where the cursor is. Partitions and sources are apart, and a
/// reset removes a source's cursors only. A store without cursors submits
/// the tasks of every ingest.
pub async fn an_ingest_moves_the_cursor_with_its_tasks(factory: StoreFactory) {
    const QUEUE: &str = "src.cursor";
    let h = Harness::new(&factory).await;
    let part = ("orders", "0");
    let first = run_of(&h, QUEUE, part, None, 0, 3).await;
    let results = ingested(h.engine.ingest(&first).await, "the first run");
    assert_eq!(results.len(), 3);
    assert!(
        results.iter().all(|r| matches!(r, Submitted::Created(_))),
        "every task of the first run is new"
    );
    if lacks_cursors(&h, "an_ingest_moves_the_cursor_with_its_tasks").await {
        let expected: Vec<String> = (0..3).map(|o| locator("orders", "0", o)).collect();
        assert_eq!(claimed_locators(&h, QUEUE).await, expected);
        return;
    }
    let cursors = h.engine.source_cursors("orders").await.expect("cursors");
    assert_eq!(
        cursors,
        vec![SourceCursor {
            partition: "0".into(),
            next: 3,
            updated_at_ms: h.now().unix_ms(),
        }],
        "the cursor stands one past the run"
    );

    h.advance(1_000);
    let second = run_of(&h, QUEUE, part, Some(3), 3, 5).await;
    ingested(h.engine.ingest(&second).await, "the second run");
    // A run read before the second moved the cursor.
    let stale = run_of(&h, QUEUE, part, Some(3), 3, 7).await;
    assert_eq!(
        h.engine.ingest(&stale).await.expect("a stale ingest"),
        IngestOutcome::Moved { current: Some(5) },
        "a stale cursor changes nothing and says where the cursor is"
    );
    let never = run_of(&h, QUEUE, part, None, 0, 9).await;
    assert_eq!(
        h.engine.ingest(&never).await.expect("a stale ingest"),
        IngestOutcome::Moved { current: Some(5) },
        "a bridge that read no cursor is refused once there is one"
    );
    // Another partition and another source start apart.
    ingested(
        h.engine
            .ingest(&run_of(&h, QUEUE, ("orders", "1"), None, 40, 41).await)
            .await,
        "partition 1",
    );
    ingested(
        h.engine
            .ingest(&run_of(&h, QUEUE, ("refunds", "0"), None, 7, 8).await)
            .await,
        "another source",
    );
    let mut cursors: Vec<(String, u64)> = h
        .engine
        .source_cursors("orders")
        .await
        .expect("cursors")
        .into_iter()
        .map(|c| (c.partition, c.next))
        .collect();
    cursors.sort();
    assert_eq!(cursors, vec![("0".into(), 5), ("1".into(), 41)]);
    let cursor_zero = h.engine.source_cursors("orders").await.expect("cursors");
    assert!(
        cursor_zero
            .iter()
            .any(|c| c.partition == "0" && c.updated_at_ms == h.now().unix_ms()),
        "a move records when: {cursor_zero:?}"
    );

    let mut expected: Vec<String> = (0..5).map(|o| locator("orders", "0", o)).collect();
    expected.push(locator("orders", "1", 40));
    expected.push(locator("refunds", "0", 7));
    expected.sort();
    assert_eq!(
        claimed_locators(&h, QUEUE).await,
        expected,
        "exactly the applied runs' tasks are stored"
    );

    assert_eq!(
        h.engine
            .delete_source_cursors("orders")
            .await
            .expect("reset"),
        2
    );
    assert!(
        h.engine
            .source_cursors("orders")
            .await
            .expect("cursors")
            .is_empty()
    );
    assert_eq!(
        h.engine
            .source_cursors("refunds")
            .await
            .expect("cursors")
            .len(),
        1,
        "a reset removes its own source's cursors only"
    );
    assert_eq!(
        code_of(&h.engine.source_cursors("Not A Name").await),
        "INVALID_ARGUMENT",
        "a source name is [a-z0-9._-]"
    );
}

/// Eight bridges ingest different runs from the same cursor at once: one
/// applies, the others are told the cursor moved, and only the winner's
/// tasks are stored.
pub async fn racing_ingests_from_one_cursor_have_one_winner(factory: StoreFactory) {
    const QUEUE: &str = "src.race";
    let h = Harness::new(&factory).await;
    if lacks_cursors(&h, "racing_ingests_from_one_cursor_have_one_winner").await {
        return;
    }
    ingested(
        h.engine
            .ingest(&run_of(&h, QUEUE, ("race", "0"), None, 0, 1).await)
            .await,
        "the first run",
    );
    let mut runs = Vec::new();
    for bridge in 0..8u64 {
        // Each bridge read a different run (as if each had its own view).
        let from = 100 * (bridge + 1);
        runs.push(run_of(&h, QUEUE, ("race", "0"), Some(1), from, from + 3).await);
    }
    let outcomes = join_all(runs.iter().map(|run| h.engine.ingest(run))).await;
    let mut winners = Vec::new();
    for (run, outcome) in runs.iter().zip(outcomes) {
        match outcome.expect("an ingest") {
            IngestOutcome::Ingested(results) => {
                assert!(results.iter().all(Result::is_ok));
                winners.push(run.next);
            }
            IngestOutcome::Moved { current } => {
                assert!(
                    current.is_some_and(|c| c != 1),
                    "the cursor moved: {current:?}"
                );
            }
        }
    }
    assert_eq!(winners.len(), 1, "exactly one racing ingest applies");
    let won = winners[0];
    let cursors = h.engine.source_cursors("race").await.expect("cursors");
    assert_eq!(cursors.len(), 1);
    assert_eq!(cursors[0].next, won, "the winner's cursor is stored");
    let mut expected: Vec<String> = vec![locator("race", "0", 0)];
    expected.extend((won - 3..won).map(|o| locator("race", "0", o)));
    expected.sort();
    assert_eq!(
        claimed_locators(&h, QUEUE).await,
        expected,
        "only the winner's tasks are stored"
    );
}

/// A record replayed under its locator is the original task: from a
/// cursor that was reset (the store keeps the key), and, on a store
/// without cursors, whenever it comes again.
pub async fn a_replayed_record_is_one_task(factory: StoreFactory) {
    const QUEUE: &str = "src.replay";
    let h = Harness::new(&factory).await;
    if !h.caps().idempotent_submit && !h.caps().source_cursors {
        eprintln!(
            "rdq-compliance: skipping a_replayed_record_is_one_task: the store keeps neither keys nor cursors"
        );
        return;
    }
    let part = ("replay", "0");
    let first = ingested(
        h.engine
            .ingest(&run_of(&h, QUEUE, part, None, 0, 4).await)
            .await,
        "the first run",
    );
    if h.caps().source_cursors {
        h.engine
            .delete_source_cursors("replay")
            .await
            .expect("reset");
    }
    // The consumer group was reset: the same records come again, and one more.
    let again = ingested(
        h.engine
            .ingest(&run_of(&h, QUEUE, part, None, 0, 5).await)
            .await,
        "the replay",
    );
    assert_eq!(again.len(), 5);
    for (original, replayed) in first.iter().zip(&again) {
        match replayed {
            Submitted::Existing(env) => assert_eq!(
                env.id,
                original.envelope().id,
                "a replayed record is its original task"
            ),
            Submitted::Created(env) => panic!("record {:?} became a second task", env.headers),
        }
    }
    assert!(
        matches!(again[4], Submitted::Created(_)),
        "the new record is new"
    );
    let locators = claimed_locators(&h, QUEUE).await;
    let distinct: HashSet<&String> = locators.iter().collect();
    assert_eq!(locators.len(), 5, "five records, five tasks: {locators:?}");
    assert_eq!(distinct.len(), 5);
}

/// A record the queue refuses (too large for its `max_envelope_bytes`)
/// is kept DEAD with reason `UNDECODABLE_SOURCE`, its locator and as many
/// of its bytes as fit, beside its run's other tasks; it is never claimed.
pub async fn a_refused_record_is_kept_dead(factory: StoreFactory) {
    const QUEUE: &str = "src.poison";
    let h = Harness::with_policy(
        &factory,
        QueuePolicy {
            max_envelope_bytes: 2_048,
            ..test_policy()
        },
    )
    .await;
    let big = vec![b'x'; 10_000];
    let poison = locator("poison", "0", 1);
    let refusal = h
        .engine
        .record_task(&SubmitRequest {
            queue: QUEUE.into(),
            handler_ref: "compliance.record".into(),
            payload: big.clone(),
            payload_content_type: "application/octet-stream".into(),
            idempotency_key: Some(poison.clone()),
            ..SubmitRequest::default()
        })
        .await
        .expect_err("too large for the queue");
    assert_eq!(refusal.code(), "PAYLOAD_TOO_LARGE");
    let dead = h
        .engine
        .refused_record_task(RefusedRecord {
            queue: QUEUE.into(),
            handler_ref: "compliance.record".into(),
            payload: big.clone(),
            full_len: big.len(),
            payload_content_type: "application/octet-stream".into(),
            locator: poison.clone(),
            error: refusal,
        })
        .await
        .expect("the DEAD task fits");
    let mut run = run_of(&h, QUEUE, ("poison", "0"), None, 0, 3).await;
    run.tasks[1] = dead;
    let results = ingested(h.engine.ingest(&run).await, "a run with a refused record");
    let kept = results[1].envelope().clone();
    assert_eq!(kept.status, Status::Dead);
    let reason = kept.dead_reason.clone().expect("a reason");
    assert_eq!(reason.code, dead_reasons::UNDECODABLE_SOURCE);
    assert!(
        reason
            .message
            .as_deref()
            .is_some_and(|m| m.contains("10000 bytes")),
        "the reason says how long the record was: {reason:?}"
    );
    assert_eq!(kept.headers.get(SOURCE_HEADER), Some(&poison));
    let payload = kept.payload_bytes();
    assert!(
        !payload.is_empty() && payload.len() < big.len() && big.starts_with(&payload),
        "the record's first bytes are kept ({} of {})",
        payload.len(),
        big.len()
    );
    assert!(kept.encoded_len() <= 2_048);
    let claimed = claimed_locators(&h, QUEUE).await;
    assert_eq!(
        claimed,
        vec![locator("poison", "0", 0), locator("poison", "0", 2)],
        "the refused record is never claimed; its neighbours are"
    );
    if h.caps().get_by_id {
        let stored = h
            .engine
            .get(kept.id)
            .await
            .expect("the DEAD task is stored");
        assert_eq!(stored.status, Status::Dead);
    }
}
