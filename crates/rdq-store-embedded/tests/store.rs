//! The embedded store's own behaviour, beyond the shared compliance suite:
//! byte-exact envelopes on disk and across reopen, claim order and
//! exclusivity under concurrency, the settle compare-and-swap inside group
//! commits, the derived counts, query plans that stay on indexes, and a group
//! whose transaction cannot start failing as a whole.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use rdq_engine::ClaimRequest;
use rdq_engine::store::admin::{
    ConfigStore, Pruning, Redrive, Removal, TaskCounts, TaskListing, TaskLookup,
};
use std::collections::HashSet;
use std::sync::Arc;

use rdq_engine::machine::{self, LeaseToken};
use rdq_engine::{
    Backoff, EngineError, LeasedUpdate, ListOrder, ListQuery, NewTask, QueueConfig, QueuePolicy,
    RedriveRequest, Store, Submitted,
};
use rdq_envelope::{Envelope, ErrorInfo, Outcome, Status, TaskId, Timestamp};
use rdq_store_embedded::{DB_FILE_NAME, EmbeddedOptions, EmbeddedStore};

fn t(ms: i64) -> Timestamp {
    Timestamp::from_unix_ms(1_800_000_000_000 + ms).unwrap()
}

fn fresh() -> (tempfile::TempDir, EmbeddedStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    (dir, store)
}

fn task(queue: &str, priority: u8, due: Timestamp) -> NewTask {
    let mut env = Envelope::new(queue, "handler", b"{\"n\":1}", "application/json", t(0));
    env.priority = priority;
    env.next_attempt_at = Some(due);
    NewTask {
        envelope: env,
        idempotency_key: None,
        unique: None,
    }
}

async fn submit_ok(store: &EmbeddedStore, tasks: Vec<NewTask>) -> Vec<Envelope> {
    store
        .submit(tasks)
        .await
        .into_iter()
        .map(|r| r.unwrap().envelope().clone())
        .collect()
}

/// Settles a claimed task with `settlement` under the default policy.
async fn settle(
    store: &EmbeddedStore,
    claimed: &Envelope,
    settlement: machine::Settlement,
    policy: &QueuePolicy,
    now: Timestamp,
) -> Result<Envelope, EngineError> {
    let token = LeaseToken::current(claimed).unwrap();
    let next = machine::settle(claimed, token, &settlement, policy, now)?;
    store
        .settle(vec![LeasedUpdate {
            envelope: next.clone(),
            expected: token,
        }])
        .await
        .pop()
        .unwrap()?;
    Ok(next)
}

fn failure(error_type: &str) -> machine::Settlement {
    machine::Settlement::Failure {
        error: ErrorInfo::new(error_type, "it broke"),
        kind: machine::FailureKind::Permanent,
    }
}

/// A fixture as a PENDING task due at `t(0)`, as the tests submit it.
fn decoded_fixture(bytes: &[u8]) -> Envelope {
    let mut env = Envelope::decode(bytes).unwrap();
    env.next_attempt_at = Some(t(0));
    env
}

fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../compliance/fixtures/valid");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            out.push((
                path.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&path).unwrap(),
            ));
        }
    }
    assert!(out.len() > 10, "fixtures not found");
    out
}

#[tokio::test]
async fn every_valid_fixture_comes_back_byte_for_byte_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut stored = Vec::new();
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        for (name, bytes) in fixtures() {
            let mut env = Envelope::decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            // Fixtures share ids; give each its own.
            env.id = TaskId::generate();
            let canonical = env.encode();
            let results = store
                .submit(vec![NewTask {
                    envelope: env.clone(),
                    idempotency_key: None,
                    unique: None,
                }])
                .await;
            assert!(matches!(results[0], Ok(Submitted::Created(_))), "{name}");
            let back = store.get(env.id).await.unwrap();
            assert_eq!(back.encode(), canonical, "{name}");
            assert_eq!(back, env, "{name}");
            stored.push((name, env.id, canonical));
        }
        store.verify().await.unwrap();
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    for (name, id, canonical) in stored {
        assert_eq!(store.get(id).await.unwrap().encode(), canonical, "{name}");
    }
    store.verify().await.unwrap();
}

#[tokio::test]
async fn claims_follow_priority_then_due_time_then_id_and_skip_tasks_not_due() {
    let (_dir, store) = fresh();
    let a = submit_ok(&store, vec![task("q", 0, t(10))]).await;
    let b = submit_ok(&store, vec![task("q", 5, t(20))]).await;
    let c = submit_ok(&store, vec![task("q", 5, t(10))]).await;
    let d = submit_ok(&store, vec![task("q", 0, t(10))]).await;
    // Due only later, at the highest priority: must not block the others.
    let later = submit_ok(&store, vec![task("q", 9, t(1_000))]).await;
    let other = submit_ok(&store, vec![task("other", 9, t(0))]).await;

    let claimed = store
        .claim(&ClaimRequest::new("q", 10, 30_000, t(100)))
        .await
        .unwrap();
    let ids: Vec<TaskId> = claimed.iter().map(|e| e.id).collect();
    assert_eq!(ids, vec![c[0].id, b[0].id, a[0].id, d[0].id]);
    for env in &claimed {
        assert_eq!(env.status, Status::InFlight);
        assert_eq!(env.lease_expires_at, Some(t(30_100)));
        assert_eq!(store.get(env.id).await.unwrap(), *env);
    }
    assert!(
        store
            .claim(&ClaimRequest::new("q", 10, 30_000, t(100)))
            .await
            .unwrap()
            .is_empty()
    );
    let due = store
        .claim(&ClaimRequest::new("q", 10, 30_000, t(1_000)))
        .await
        .unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].id, later[0].id);
    assert_eq!(
        store
            .claim(&ClaimRequest::new("other", 1, 1, t(0)))
            .await
            .unwrap()[0]
            .id,
        other[0].id
    );
    store.verify().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claimers_never_share_a_task() {
    let (_dir, store) = fresh();
    let store = Arc::new(store);
    let total = 3000;
    let mut submitted = HashSet::new();
    for chunk in 0..30 {
        let tasks = (0..total / 30)
            .map(|i| task("race", (i % 3) as u8, t(chunk)))
            .collect();
        for env in submit_ok(&store, tasks).await {
            submitted.insert(env.id);
        }
    }
    let mut workers = Vec::new();
    for w in 0..16 {
        let store = Arc::clone(&store);
        workers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = store
                    .claim(&ClaimRequest::new("race", 1 + w % 7, 60_000, t(100)))
                    .await
                    .unwrap();
                if got.is_empty() {
                    break;
                }
                mine.extend(got.into_iter().map(|e| e.id));
            }
            mine
        }));
    }
    let mut seen = HashSet::new();
    for w in workers {
        for id in w.await.unwrap() {
            assert!(seen.insert(id), "task {id} was claimed twice");
        }
    }
    assert_eq!(seen, submitted);
    let counts = store.counts().await.unwrap();
    assert_eq!(counts[0].in_flight, total as u64);
    assert_eq!(counts[0].pending, 0);
    store.verify().await.unwrap();
}

#[tokio::test]
async fn settle_is_a_compare_and_swap_and_one_refusal_spares_the_batch() {
    let (_dir, store) = fresh();
    let policy = QueuePolicy {
        backoff: Backoff::None,
        ..QueuePolicy::default()
    };
    submit_ok(&store, (0..3).map(|_| task("q", 0, t(0))).collect()).await;
    let claimed = store
        .claim(&ClaimRequest::new("q", 3, 1_000, t(0)))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);

    // A stale token: the task's lease is attempt 1, not 7.
    let next0 = machine::settle(
        &claimed[0],
        LeaseToken(1),
        &machine::Settlement::Success,
        &policy,
        t(5),
    )
    .unwrap();
    let next1 = machine::settle(
        &claimed[1],
        LeaseToken(1),
        &machine::Settlement::Success,
        &policy,
        t(5),
    )
    .unwrap();
    let mut gone = next1.clone();
    gone.id = TaskId::generate();
    let results = store
        .settle(vec![
            LeasedUpdate {
                envelope: next0.clone(),
                expected: LeaseToken(7),
            },
            LeasedUpdate {
                envelope: next1.clone(),
                expected: LeaseToken(1),
            },
            LeasedUpdate {
                envelope: gone.clone(),
                expected: LeaseToken(1),
            },
        ])
        .await;
    assert_eq!(results[0], Err(EngineError::LeaseLost(next0.id)));
    assert_eq!(results[1], Ok(()));
    assert_eq!(results[2], Err(EngineError::TaskNotFound(gone.id)));
    assert_eq!(store.get(claimed[0].id).await.unwrap(), claimed[0]);
    assert_eq!(
        store.get(claimed[1].id).await.unwrap().status,
        Status::Succeeded
    );
    // Settling twice: the lease is gone.
    let again = store
        .settle(vec![LeasedUpdate {
            envelope: next1.clone(),
            expected: LeaseToken(1),
        }])
        .await;
    assert_eq!(again[0], Err(EngineError::LeaseLost(next1.id)));

    // A lapsed lease reaped, then the original worker's settle is refused.
    let expired = store.expired_leases(t(1_000), 10).await.unwrap();
    let ids: HashSet<TaskId> = expired.iter().map(|e| e.id).collect();
    assert_eq!(ids, HashSet::from([claimed[0].id, claimed[2].id]));
    assert!(store.expired_leases(t(999), 10).await.unwrap().is_empty());
    let reaped = machine::expire_lease(&claimed[2], &policy, t(1_000)).unwrap();
    assert_eq!(
        store
            .settle(vec![LeasedUpdate {
                envelope: reaped,
                expected: LeaseToken(1),
            }])
            .await[0],
        Ok(())
    );
    assert_eq!(
        settle(
            &store,
            &claimed[2],
            machine::Settlement::Success,
            &policy,
            t(1_001)
        )
        .await,
        Err(EngineError::LeaseLost(claimed[2].id))
    );
    let back = store.get(claimed[2].id).await.unwrap();
    assert_eq!(back.status, Status::Pending);
    assert_eq!(back.attempts[0].outcome, Some(Outcome::LeaseExpired));
    store.verify().await.unwrap();
}

#[tokio::test]
async fn idempotency_keys_are_per_queue_even_within_one_batch() {
    let (_dir, store) = fresh();
    let keyed = |queue: &str| NewTask {
        idempotency_key: Some("order-42".into()),
        ..task(queue, 0, t(0))
    };
    let results = store.submit(vec![keyed("a"), keyed("a"), keyed("b")]).await;
    let first = match &results[0] {
        Ok(Submitted::Created(env)) => env.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(results[1], Ok(Submitted::Existing(first.clone())));
    assert!(matches!(results[2], Ok(Submitted::Created(_))));
    let again = store.submit(vec![keyed("a")]).await;
    assert_eq!(again[0], Ok(Submitted::Existing(first.clone())));
    // A duplicate id is refused alone.
    let dup = NewTask {
        envelope: first.clone(),
        idempotency_key: None,
        unique: None,
    };
    let mixed = store.submit(vec![dup, task("a", 0, t(0))]).await;
    assert_eq!(mixed[0].as_ref().unwrap_err().code(), "INVALID_ARGUMENT");
    assert!(matches!(mixed[1], Ok(Submitted::Created(_))));
    // Once the task is gone the key is free again.
    store.delete(first.id).await.unwrap();
    assert!(matches!(
        store.submit(vec![keyed("a")]).await[0],
        Ok(Submitted::Created(_))
    ));
    store.verify().await.unwrap();
}

#[tokio::test]
async fn dlq_listing_pages_by_id_with_error_type_globs_and_redrive_works() {
    let (_dir, store) = fresh();
    let policy = QueuePolicy::default();
    let envs = submit_ok(&store, (0..25).map(|_| task("jobs", 0, t(0))).collect()).await;
    let claimed = store
        .claim(&ClaimRequest::new("jobs", 25, 1_000, t(0)))
        .await
        .unwrap();
    let mut dead = Vec::new();
    for (i, env) in claimed.iter().enumerate() {
        if i % 5 == 4 {
            settle(&store, env, machine::Settlement::Success, &policy, t(1))
                .await
                .unwrap();
            continue;
        }
        let ty = if i % 2 == 0 {
            "io.Timeout"
        } else {
            "db.Deadlock"
        };
        settle(&store, env, failure(ty), &policy, t(1))
            .await
            .unwrap();
        dead.push((env.id, ty));
    }
    assert_eq!(dead.len(), 20);
    let ids_of = |page: &rdq_engine::Page| page.items.iter().map(|e| e.id).collect::<Vec<_>>();

    // Newest first, pages of 7.
    let mut cursor = None;
    let mut walked = Vec::new();
    loop {
        let page = store
            .list(&ListQuery {
                queue: "jobs".into(),
                status: Some(Status::Dead),
                cursor,
                limit: 7,
                ..ListQuery::default()
            })
            .await
            .unwrap();
        walked.extend(ids_of(&page));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let mut expected: Vec<TaskId> = dead.iter().map(|(id, _)| *id).collect();
    expected.sort();
    expected.reverse();
    assert_eq!(walked, expected);

    // Oldest first with a glob.
    let page = store
        .list(&ListQuery {
            queue: "jobs".into(),
            status: Some(Status::Dead),
            error_type: Some("io.*".into()),
            limit: 100,
            order: ListOrder::OldestFirst,
            ..ListQuery::default()
        })
        .await
        .unwrap();
    let mut timeouts: Vec<TaskId> = dead
        .iter()
        .filter(|(_, ty)| *ty == "io.Timeout")
        .map(|(id, _)| *id)
        .collect();
    timeouts.sort();
    assert_eq!(ids_of(&page), timeouts);
    assert_eq!(page.next_cursor, None);

    // Every status, every order; other statuses filter by status.
    let all = store
        .list(&ListQuery {
            queue: "jobs".into(),
            order: ListOrder::OldestFirst,
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(ids_of(&all), envs.iter().map(|e| e.id).collect::<Vec<_>>());
    let done = store
        .list(&ListQuery {
            queue: "jobs".into(),
            status: Some(Status::Succeeded),
            limit: 2,
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(done.items.len(), 2);
    assert!(done.next_cursor.is_some());
    assert!(done.items.iter().all(|e| e.status == Status::Succeeded));
    let bad = store
        .list(&ListQuery {
            queue: "jobs".into(),
            error_type: Some("[".into()),
            ..ListQuery::default()
        })
        .await;
    assert_eq!(bad.unwrap_err().code(), "INVALID_ARGUMENT");

    // Redrive: dry run, by ids (only dead ones count), by filter with a limit.
    let request = RedriveRequest {
        queue: "jobs".into(),
        error_type: Some("db.*".into()),
        dry_run: true,
        ..RedriveRequest::default()
    };
    let would = store.redrive(&request, t(2)).await.unwrap();
    assert_eq!(would.len(), 10);
    assert_eq!(store.counts().await.unwrap()[0].dead, 20);
    let by_ids = store
        .redrive(
            &RedriveRequest {
                queue: "jobs".into(),
                ids: Some(vec![dead[0].0, dead[0].0, envs[4].id, TaskId::generate()]),
                ..RedriveRequest::default()
            },
            t(2),
        )
        .await
        .unwrap();
    assert_eq!(by_ids, vec![dead[0].0]);
    let redriven = store.get(dead[0].0).await.unwrap();
    assert_eq!(redriven.status, Status::Pending);
    assert_eq!(redriven.redrive_count, 1);
    assert_eq!(redriven.attempts.len(), 1);
    let limited = store
        .redrive(
            &RedriveRequest {
                queue: "jobs".into(),
                limit: Some(3),
                ..RedriveRequest::default()
            },
            t(2),
        )
        .await
        .unwrap();
    assert_eq!(limited.len(), 3);
    let counts = store.counts().await.unwrap();
    assert_eq!(
        (counts[0].pending, counts[0].dead, counts[0].succeeded),
        (4, 16, 5)
    );
    // The redriven tasks are claimable again.
    assert_eq!(
        store
            .claim(&ClaimRequest::new("jobs", 10, 1_000, t(3)))
            .await
            .unwrap()
            .len(),
        4
    );
    store.verify().await.unwrap();
}

#[tokio::test]
async fn purge_delete_prune_and_counts_agree() {
    let (_dir, store) = fresh();
    let policy = QueuePolicy::default();
    submit_ok(&store, (0..10).map(|_| task("p", 0, t(0))).collect()).await;
    let claimed = store
        .claim(&ClaimRequest::new("p", 6, 1_000, t(0)))
        .await
        .unwrap();
    for (i, env) in claimed.iter().enumerate() {
        settle(
            &store,
            env,
            machine::Settlement::Success,
            &policy,
            t(10 * i as i64),
        )
        .await
        .unwrap();
    }
    let counts = store.counts().await.unwrap();
    assert_eq!((counts[0].pending, counts[0].succeeded), (4, 6));

    // Finished at t(0), t(10) .. t(50): before t(25) are three.
    assert_eq!(store.prune_succeeded("p", t(25), 2).await.unwrap(), 2);
    assert_eq!(store.prune_succeeded("p", t(25), 100).await.unwrap(), 1);
    assert_eq!(store.prune_succeeded("p", t(25), 100).await.unwrap(), 0);
    assert_eq!(store.prune_succeeded("nope", t(25), 100).await.unwrap(), 0);
    assert_eq!(store.counts().await.unwrap()[0].succeeded, 3);

    assert_eq!(store.purge("p", Status::Pending, true).await.unwrap(), 4);
    assert_eq!(store.counts().await.unwrap()[0].pending, 4);
    assert_eq!(store.purge("p", Status::Pending, false).await.unwrap(), 4);
    assert_eq!(store.counts().await.unwrap()[0].pending, 0);

    store.delete(claimed[5].id).await.unwrap();
    assert_eq!(
        store.delete(claimed[5].id).await,
        Err(EngineError::TaskNotFound(claimed[5].id))
    );
    assert_eq!(
        store.get(claimed[5].id).await,
        Err(EngineError::TaskNotFound(claimed[5].id))
    );
    assert_eq!(store.counts().await.unwrap()[0].succeeded, 2);
    assert_eq!(store.purge("p", Status::Succeeded, false).await.unwrap(), 2);
    // A queue with no tasks and no policy is not listed.
    assert!(store.counts().await.unwrap().is_empty());
    store.verify().await.unwrap();
}

#[tokio::test]
async fn policies_round_trip_and_persist() {
    let dir = tempfile::tempdir().unwrap();
    let policy = QueueConfig::from(QueuePolicy {
        max_attempts: 3,
        backoff: Backoff::Fixed { delay_ms: 250 },
        retryable_errors: vec!["io.*".into()],
        paused: true,
        ..QueuePolicy::default()
    })
    .with_section(
        "callback",
        serde_json::json!({"url": "http://127.0.0.1:9/x"}),
    );
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        assert_eq!(store.get_config("cfg").await.unwrap(), None);
        store
            .put_config("cfg", &QueueConfig::default())
            .await
            .unwrap();
        store.put_config("cfg", &policy).await.unwrap();
        assert_eq!(store.get_config("cfg").await.unwrap(), Some(policy.clone()));
        let counts = store.counts().await.unwrap();
        assert_eq!(counts.len(), 1);
        assert_eq!(counts[0].queue, "cfg");
        submit_ok(&store, vec![task("cfg", 0, t(0))]).await;
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(store.get_config("cfg").await.unwrap(), Some(policy));
    assert_eq!(store.counts().await.unwrap()[0].pending, 1);
}

/// A store parses a queue's stored configuration once and keeps it, but
/// every read still sees the row: a change made by another process (here
/// a second store on the same directory) is read at once, and each queue
/// keeps its own.
#[tokio::test]
async fn a_configuration_changed_by_another_process_is_read_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let reader = EmbeddedStore::open(dir.path()).unwrap();
    let other = EmbeddedStore::open(dir.path()).unwrap();
    let config = |max_attempts| {
        QueueConfig::from(QueuePolicy {
            max_attempts,
            ..QueuePolicy::default()
        })
    };
    reader.put_config("a", &config(2)).await.unwrap();
    reader.put_config("b", &config(3)).await.unwrap();
    for _ in 0..2 {
        assert_eq!(reader.get_config("a").await.unwrap(), Some(config(2)));
        assert_eq!(reader.get_config("b").await.unwrap(), Some(config(3)));
    }
    other.put_config("a", &config(7)).await.unwrap();
    assert_eq!(reader.get_config("a").await.unwrap(), Some(config(7)));
    assert_eq!(reader.get_config("b").await.unwrap(), Some(config(3)));
    other
        .put_config(
            "a",
            &config(2).with_section("callback", serde_json::json!({"x": 1})),
        )
        .await
        .unwrap();
    assert_eq!(
        reader.get_config("a").await.unwrap(),
        Some(config(2).with_section("callback", serde_json::json!({"x": 1})))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_writers_share_commits_and_all_land() {
    let (_dir, store) = fresh();
    let store = Arc::new(store);
    let mut handles = Vec::new();
    for _ in 0..64 {
        let store = Arc::clone(&store);
        handles.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..20 {
                let env = submit_ok(&store, vec![task("w", 0, t(0))]).await;
                ids.push(env[0].id);
            }
            ids
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    assert_eq!(all.len(), 64 * 20);
    for id in &all {
        store.get(*id).await.unwrap();
    }
    assert_eq!(store.counts().await.unwrap()[0].pending, 64 * 20);
    store.verify().await.unwrap();
}

#[tokio::test]
async fn a_group_that_cannot_commit_fails_whole_and_the_store_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = EmbeddedOptions::default();
    options.busy_timeout = std::time::Duration::from_millis(50);
    let store = EmbeddedStore::open_with(dir.path(), options).unwrap();
    submit_ok(&store, vec![task("q", 0, t(0))]).await;
    // Another process holds the write lock.
    let other = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let refused = store
        .submit(vec![task("q", 0, t(0)), task("q", 0, t(0))])
        .await;
    assert_eq!(refused.len(), 2);
    for r in &refused {
        assert_eq!(r.as_ref().unwrap_err().code(), "STORE_UNAVAILABLE");
    }
    assert_eq!(
        store
            .claim(&ClaimRequest::new("q", 1, 1, t(0)))
            .await
            .unwrap_err()
            .code(),
        "STORE_UNAVAILABLE"
    );
    other.execute_batch("ROLLBACK").unwrap();
    drop(other);
    submit_ok(&store, vec![task("q", 0, t(0))]).await;
    assert_eq!(store.counts().await.unwrap()[0].pending, 2);
    assert_eq!(
        store
            .claim(&ClaimRequest::new("q", 5, 1, t(0)))
            .await
            .unwrap()
            .len(),
        2
    );
    store.verify().await.unwrap();
}

/// The hot queries are index seeks (a full scan of `tasks` would not stay flat
/// at a million rows).
#[tokio::test]
async fn hot_queries_use_their_indexes() {
    let (dir, store) = fresh();
    submit_ok(&store, vec![task("q", 0, t(0))]).await;
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
    let plan = |sql: &str| -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let n = stmt.parameter_count();
        let nulls = rusqlite::params_from_iter(std::iter::repeat_n(rusqlite::types::Null, n));
        let rows = stmt
            .query_map(nulls, |row| row.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect::<Vec<_>>();
        rows.join(" | ")
    };
    let cases = [
        (
            "SELECT priority FROM tasks WHERE queue = ?1 AND status = 0 AND priority < ?2 ORDER BY priority DESC LIMIT 1",
            "tasks_claim",
        ),
        (
            "SELECT seq, envelope FROM tasks WHERE queue = ?1 AND status = 0 AND priority = ?2 AND next_attempt_at <= ?3 ORDER BY next_attempt_at, id LIMIT ?4",
            "tasks_claim",
        ),
        (
            "SELECT envelope FROM tasks WHERE status = 1 AND lease_expires_at <= ?1 ORDER BY lease_expires_at LIMIT ?2",
            "tasks_lease",
        ),
        (
            "SELECT error_type, envelope FROM tasks WHERE queue = ?1 AND status = 3 AND id < ?2 ORDER BY id DESC",
            "tasks_dead",
        ),
        (
            "SELECT error_type, envelope FROM tasks WHERE queue = ?1 AND id < ?2 AND status = ?3 ORDER BY id DESC",
            "tasks_queue",
        ),
        (
            "SELECT seq FROM tasks WHERE queue = ?1 AND status = 2 AND finished_at < ?2 ORDER BY finished_at LIMIT ?3",
            "tasks_done",
        ),
        (
            "SELECT envelope FROM tasks WHERE queue = ?1 AND idempotency_key = ?2",
            "tasks_idempotency",
        ),
        ("SELECT envelope FROM tasks WHERE id = ?1", "tasks_id"),
        // Flow control: the keys with PENDING tasks, each key's levels and
        // due tasks (index entries only), and the IN_FLIGHT tasks per key.
        (
            "SELECT flow_key FROM tasks WHERE queue = ?1 AND status = 0 AND flow_key > ?2 ORDER BY flow_key LIMIT 1",
            "COVERING INDEX tasks_flow",
        ),
        (
            "SELECT flow_key FROM tasks WHERE queue = ?1 AND status = 0 AND flow_key >= '' ORDER BY flow_key LIMIT 1",
            "COVERING INDEX tasks_flow",
        ),
        (
            "SELECT priority FROM tasks WHERE queue = ?1 AND status = 0 AND flow_key = ?2 AND priority < ?3 ORDER BY priority DESC LIMIT 1",
            "COVERING INDEX tasks_flow",
        ),
        (
            "SELECT seq, id, next_attempt_at FROM tasks WHERE queue = ?1 AND status = 0 AND flow_key = ?2 AND priority = ?3 AND next_attempt_at <= ?4 AND lease_attempt < 4294967295 ORDER BY next_attempt_at, id LIMIT ?5",
            "COVERING INDEX tasks_flow",
        ),
        (
            "SELECT flow_key, count(*) FROM tasks WHERE queue = ?1 AND status = 1 AND flow_key IS NOT NULL GROUP BY flow_key",
            "COVERING INDEX tasks_busy",
        ),
        // Sources: an ingest's cursor compare, and a source's cursors.
        (
            "SELECT next FROM source_cursors WHERE source = ?1 AND partition = ?2",
            "PRIMARY KEY (source=? AND partition=?)",
        ),
        (
            "SELECT partition, next, updated_at_ms FROM source_cursors WHERE source = ?1 ORDER BY partition",
            "PRIMARY KEY (source=?)",
        ),
    ];
    for (sql, index) in cases {
        let plan = plan(sql);
        assert!(plan.contains(index), "{sql}\n  plan: {plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{sql}\n  sorts: {plan}");
    }
    drop(store);
}

#[tokio::test]
async fn empty_calls_and_unknown_things_are_harmless() {
    let (_dir, store) = fresh();
    assert!(store.submit(Vec::new()).await.is_empty());
    assert!(store.settle(Vec::new()).await.is_empty());
    assert!(
        store
            .claim(&ClaimRequest::new("none", 0, 1, t(0)))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .claim(&ClaimRequest::new("none", 5, 1, t(0)))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.expired_leases(t(0), 0).await.unwrap().is_empty());
    let id = TaskId::generate();
    assert_eq!(store.get(id).await, Err(EngineError::TaskNotFound(id)));
    let page = store
        .list(&ListQuery {
            queue: "none".into(),
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert!(page.items.is_empty() && page.next_cursor.is_none());
    assert_eq!(store.purge("none", Status::Dead, false).await.unwrap(), 0);
    assert!(store.counts().await.unwrap().is_empty());
    store.verify().await.unwrap();
}

#[tokio::test]
async fn a_temporary_store_is_removed_with_its_last_clone() {
    let store = EmbeddedStore::open_temporary().unwrap();
    let dir = store.path().parent().unwrap().to_path_buf();
    assert!(store.path().exists());
    let clone = store.clone();
    drop(store);
    submit_ok(&clone, vec![task("tmp", 0, t(0))]).await;
    assert!(dir.exists());
    drop(clone);
    assert!(!dir.exists(), "{} was left behind", dir.display());
}

#[tokio::test]
async fn a_claim_stores_only_columns_and_every_read_sees_the_claimed_envelope() {
    let (_dir, store) = fresh();
    let submitted = submit_ok(&store, vec![task("lazy", 0, t(0))]).await;
    let claimed = store
        .claim(&ClaimRequest::new("lazy", 1, 30_000, t(10)))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let expected = machine::claim(&submitted[0], 30_000, t(10)).unwrap().0;
    assert_eq!(claimed[0].encode(), expected.encode());
    // Read back by id, by listing and by the reaper: the same bytes.
    assert_eq!(
        store.get(expected.id).await.unwrap().encode(),
        expected.encode()
    );
    let page = store
        .list(&ListQuery {
            queue: "lazy".into(),
            status: Some(Status::InFlight),
            limit: 10,
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(page.items[0].encode(), expected.encode());
    let expired = store.expired_leases(t(40_000), 10).await.unwrap();
    assert_eq!(expired[0].encode(), expected.encode());
    store.verify().await.unwrap();
    // The settle's compare-and-swap takes the claim's token; a retried task
    // claimed again keeps its recorded error (the DLQ filter's column).
    let policy = QueuePolicy {
        backoff: Backoff::None,
        ..QueuePolicy::default()
    };
    let retry = machine::Settlement::Failure {
        error: ErrorInfo::new("app.Flaky", "try again"),
        kind: machine::FailureKind::Retryable,
    };
    let failed = settle(&store, &claimed[0], retry, &policy, t(20))
        .await
        .unwrap();
    assert_eq!(failed.status, Status::Pending);
    let again = store
        .claim(&ClaimRequest::new("lazy", 1, 30_000, t(30)))
        .await
        .unwrap();
    assert_eq!(
        again[0].encode(),
        machine::claim(&failed, 30_000, t(30)).unwrap().0.encode()
    );
    store.verify().await.unwrap();
    let done = settle(
        &store,
        &again[0],
        machine::Settlement::Success,
        &policy,
        t(40),
    )
    .await
    .unwrap();
    assert_eq!(store.get(done.id).await.unwrap().encode(), done.encode());
    store.verify().await.unwrap();
}

#[tokio::test]
async fn a_version_1_store_is_upgraded_and_claims_count_on_from_its_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let deferred;
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        submit_ok(&store, vec![task("old", 0, t(0))]).await;
        // Claimed and deferred twice: claim_count 2 while PENDING.
        let mut env = store
            .claim(&ClaimRequest::new("old", 1, 30_000, t(1)))
            .await
            .unwrap()
            .remove(0);
        for n in 0..2 {
            env = settle(
                &store,
                &env,
                machine::Settlement::Defer { delay_ms: 0 },
                &QueuePolicy::default(),
                t(2 + n),
            )
            .await
            .unwrap();
            if n == 0 {
                env = store
                    .claim(&ClaimRequest::new("old", 1, 30_000, t(3)))
                    .await
                    .unwrap()
                    .remove(0);
            }
        }
        assert_eq!(env.claim_count, 2);
        assert_eq!(env.status, Status::Pending);
        deferred = env;
    }
    // Make it a version-1 file: no `claimed_at`, no counter on PENDING rows.
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
        conn.execute_batch(
            "ALTER TABLE tasks DROP COLUMN claimed_at;
             UPDATE tasks SET lease_attempt = NULL WHERE status != 1;
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    store.verify().await.unwrap();
    let version: i32 = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME))
        .unwrap()
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, rdq_store_embedded::SCHEMA_VERSION);
    let claimed = store
        .claim(&ClaimRequest::new("old", 1, 30_000, t(10)))
        .await
        .unwrap();
    assert_eq!(claimed[0].claim_count, 3);
    assert_eq!(
        claimed[0].encode(),
        machine::claim(&deferred, 30_000, t(10)).unwrap().0.encode()
    );
    settle(
        &store,
        &claimed[0],
        machine::Settlement::Success,
        &QueuePolicy::default(),
        t(11),
    )
    .await
    .unwrap();
    assert_eq!(
        store.get(deferred.id).await.unwrap().status,
        Status::Succeeded
    );
}

/// The row of `id` as stored: status column, the status its envelope bytes
/// hold, `claimed_at`, `finished_at`.
fn raw_row(dir: &std::path::Path, id: TaskId) -> (i64, String, Option<i64>, Option<i64>) {
    let conn = rusqlite::Connection::open(dir.join(DB_FILE_NAME)).unwrap();
    conn.query_row(
        "SELECT status, envelope, claimed_at, finished_at FROM tasks WHERE id = ?1",
        [&id.to_bytes()[..]],
        |row| {
            let bytes: Vec<u8> = row.get(1)?;
            let env = Envelope::decode(&bytes).unwrap();
            Ok((
                row.get(0)?,
                env.status.as_str().to_owned(),
                row.get(2)?,
                row.get(3)?,
            ))
        },
    )
    .unwrap()
}

/// A success writes only its row's columns; every read (get, list,
/// verify, after reopen) replays the same SUCCEEDED envelope the engine
/// decided, byte for byte: straight from a claim, after a lease extension,
/// and after earlier failed attempts.
#[tokio::test]
async fn a_success_writes_its_columns_only_and_reads_back_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let policy = QueuePolicy {
        max_attempts: 5,
        backoff: Backoff::None,
        ..QueuePolicy::default()
    };
    let mut expected = Vec::new();
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let ids: Vec<TaskId> = submit_ok(&store, (0..3).map(|_| task("ok", 0, t(0))).collect())
            .await
            .iter()
            .map(|e| e.id)
            .collect();
        let claimed = store
            .claim(&ClaimRequest::new("ok", 3, 30_000, t(10)))
            .await
            .unwrap();
        assert_eq!(claimed.len(), 3);
        let by_id = |id: TaskId| claimed.iter().find(|e| e.id == id).unwrap().clone();

        // Straight from the claim.
        let plain = settle(
            &store,
            &by_id(ids[0]),
            machine::Settlement::Success,
            &policy,
            t(20),
        )
        .await
        .unwrap();
        assert_eq!(
            raw_row(dir.path(), ids[0]),
            (
                2,
                "PENDING".into(),
                Some(t(10).unix_ms()),
                Some(t(20).unix_ms())
            )
        );
        expected.push(plain);

        // After a lease extension (the row then holds IN_FLIGHT bytes).
        let first = by_id(ids[1]);
        let token = LeaseToken::current(&first).unwrap();
        let extended = machine::extend_lease(&first, token, 60_000, t(15)).unwrap();
        store
            .settle(vec![LeasedUpdate {
                envelope: extended.clone(),
                expected: token,
            }])
            .await
            .pop()
            .unwrap()
            .unwrap();
        let after_extension = settle(
            &store,
            &extended,
            machine::Settlement::Success,
            &policy,
            t(25),
        )
        .await
        .unwrap();
        assert_eq!(
            raw_row(dir.path(), ids[1]),
            (2, "IN_FLIGHT".into(), None, Some(t(25).unix_ms()))
        );
        expected.push(after_extension);

        // After a failed attempt: the second claim's success.
        let retried = settle(
            &store,
            &by_id(ids[2]),
            machine::Settlement::Failure {
                error: ErrorInfo::new("Flaky", "try again"),
                kind: machine::FailureKind::Retryable,
            },
            &policy,
            t(30),
        )
        .await
        .unwrap();
        assert_eq!(retried.status, Status::Pending);
        let again = store
            .claim(&ClaimRequest::new("ok", 1, 30_000, t(40)))
            .await
            .unwrap()
            .remove(0);
        assert_eq!(again.attempts.len(), 2);
        let succeeded = settle(&store, &again, machine::Settlement::Success, &policy, t(50))
            .await
            .unwrap();
        assert_eq!(
            succeeded.attempts[0].outcome,
            Some(Outcome::RetryableFailure)
        );
        assert_eq!(raw_row(dir.path(), ids[2]).0, 2);
        expected.push(succeeded);

        for env in &expected {
            assert_eq!(env.status, Status::Succeeded);
            assert_eq!(store.get(env.id).await.unwrap().encode(), env.encode());
        }
        let page = store
            .list(&ListQuery {
                queue: "ok".into(),
                status: Some(Status::Succeeded),
                order: ListOrder::OldestFirst,
                ..ListQuery::default()
            })
            .await
            .unwrap();
        let mut listed: Vec<Vec<u8>> = page.items.iter().map(Envelope::encode).collect();
        let mut want: Vec<Vec<u8>> = expected.iter().map(Envelope::encode).collect();
        listed.sort();
        want.sort();
        assert_eq!(listed, want);
        store.verify().await.unwrap();
        // A second settle of a succeeded task is fenced as before.
        let stale = settle(
            &store,
            &by_id(ids[0]),
            machine::Settlement::Success,
            &policy,
            t(60),
        )
        .await;
        assert!(matches!(stale, Err(EngineError::LeaseLost(_))), "{stale:?}");
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    for env in &expected {
        assert_eq!(store.get(env.id).await.unwrap().encode(), env.encode());
    }
    store.verify().await.unwrap();
}

/// Every valid fixture that can be claimed, claimed and settled as a
/// success, reads back as exactly the envelope the engine decided: the
/// replayed success keeps unknown fields and the wire form byte for byte.
#[tokio::test]
async fn every_claimable_fixture_succeeds_and_reads_back_byte_for_byte() {
    let (_dir, store) = fresh();
    let late = Timestamp::from_unix_ms(253_402_300_000_000).unwrap();
    let mut checked = 0;
    for (name, bytes) in fixtures() {
        let mut env = Envelope::decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Only what a claim accepts (a counter at its maximum is refused).
        if machine::claim(&env, 1_000, late).is_err() {
            continue;
        }
        env.id = TaskId::generate();
        env.queue = format!("fx.{}", env.id.to_string().to_lowercase());
        submit_ok(
            &store,
            vec![NewTask {
                envelope: env.clone(),
                idempotency_key: None,
                unique: None,
            }],
        )
        .await;
        let Some(claimed) = store
            .claim(&ClaimRequest::new(&env.queue, 1, 1_000, late))
            .await
            .unwrap()
            .pop()
        else {
            continue;
        };
        let done = settle(
            &store,
            &claimed,
            machine::Settlement::Success,
            &QueuePolicy::default(),
            late,
        )
        .await
        .unwrap();
        assert_eq!(
            store.get(env.id).await.unwrap().encode(),
            done.encode(),
            "{name}"
        );
        checked += 1;
    }
    assert!(checked > 3, "only {checked} fixtures were claimable");
    store.verify().await.unwrap();
}

/// A row stored as succeeded whose bytes cannot have been settled that way
/// (no finish time, or bytes of a task that was never claimed) is refused
/// as `CORRUPT_STORE` on read and reported by `verify`.
#[tokio::test]
async fn a_success_row_that_cannot_replay_is_corrupt() {
    let (dir, store) = fresh();
    let ids: Vec<TaskId> = submit_ok(&store, vec![task("bad", 0, t(0)), task("bad", 0, t(0))])
        .await
        .iter()
        .map(|e| e.id)
        .collect();
    let claimed = store
        .claim(&ClaimRequest::new("bad", 2, 30_000, t(10)))
        .await
        .unwrap();
    for env in &claimed {
        settle(
            &store,
            env,
            machine::Settlement::Success,
            &QueuePolicy::default(),
            t(20),
        )
        .await
        .unwrap();
    }
    drop(store);
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
        conn.execute(
            "UPDATE tasks SET finished_at = NULL WHERE id = ?1",
            [&ids[0].to_bytes()[..]],
        )
        .unwrap();
        conn.execute(
            "UPDATE tasks SET claimed_at = NULL WHERE id = ?1",
            [&ids[1].to_bytes()[..]],
        )
        .unwrap();
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    for id in ids {
        let got = store.get(id).await;
        assert!(matches!(got, Err(EngineError::CorruptStore(_))), "{got:?}");
    }
    let report = store.verify().await.unwrap_err().to_string();
    assert!(report.contains("succeeded"), "{report}");
}

/// A settle's lease check answers from the envelopes this process handed
/// out (no row read), and an entry left stale by a delete, an expiry and
/// re-claim, or an earlier settle still fails the lease fencing.
#[tokio::test]
async fn the_lease_check_after_a_claim_matches_the_database_and_stale_entries_are_fenced() {
    let (_dir, store) = fresh();
    let policy = QueuePolicy::default();
    let mut due = Vec::new();
    for _ in 0..4 {
        due.push(task("cache", 0, t(0)));
    }
    submit_ok(&store, due).await;
    let claimed = store
        .claim(&ClaimRequest::new("cache", 4, 1_000, t(10)))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 4);

    // The shortcut answers exactly what a read of the row answers.
    let leases: Vec<(TaskId, LeaseToken)> = claimed
        .iter()
        .map(|e| (e.id, LeaseToken::current(e).unwrap()))
        .collect();
    for (env, got) in claimed.iter().zip(store.leased(&leases).await) {
        let got = got.unwrap();
        assert_eq!(&got, env);
        assert_eq!(got, store.get(env.id).await.unwrap());
        assert_eq!(got.encode(), store.get(env.id).await.unwrap().encode());
    }
    // Taken once: the next look-up reads the row, with the same answer.
    assert_eq!(
        store.leased(&leases[..1]).await.pop().unwrap().unwrap(),
        claimed[0]
    );
    // A wrong token is refused either way.
    let wrong = [(claimed[1].id, LeaseToken(leases[1].1.0 + 1))];
    assert!(matches!(
        store.leased(&wrong).await.pop().unwrap(),
        Err(EngineError::LeaseLost(_))
    ));

    // Settled, then settled again under the same claim: the second fails.
    settle(
        &store,
        &claimed[0],
        machine::Settlement::Success,
        &policy,
        t(20),
    )
    .await
    .unwrap();
    let again = settle(
        &store,
        &claimed[0],
        machine::Settlement::Success,
        &policy,
        t(21),
    )
    .await;
    assert!(matches!(again, Err(EngineError::LeaseLost(_))), "{again:?}");

    // Deleted while in flight: the settle finds no task.
    store.delete(claimed[2].id).await.unwrap();
    assert!(matches!(
        store.leased(&leases[2..3]).await.pop().unwrap(),
        Err(EngineError::TaskNotFound(_))
    ));

    // Lapsed, reaped and claimed again: the old claim's settle is fenced,
    // the new one's goes through.
    let stale = claimed[3].clone();
    let expired = store.expired_leases(t(5_000), 10).await.unwrap();
    let lapsed = expired.iter().find(|e| e.id == stale.id).unwrap();
    let token = LeaseToken::current(lapsed).unwrap();
    let next = machine::expire_lease(lapsed, &policy, t(5_000)).unwrap();
    store
        .settle(vec![LeasedUpdate {
            envelope: next,
            expected: token,
        }])
        .await
        .pop()
        .unwrap()
        .unwrap();
    let reclaimed = store
        .claim(&ClaimRequest::new("cache", 4, 1_000, t(6_000)))
        .await
        .unwrap();
    let fresh_claim = reclaimed.iter().find(|e| e.id == stale.id).unwrap();
    let old = settle(
        &store,
        &stale,
        machine::Settlement::Success,
        &policy,
        t(6_001),
    )
    .await;
    assert!(matches!(old, Err(EngineError::LeaseLost(_))), "{old:?}");
    let new_token = LeaseToken::current(fresh_claim).unwrap();
    assert_eq!(
        store
            .leased(&[(stale.id, new_token)])
            .await
            .pop()
            .unwrap()
            .unwrap(),
        *fresh_claim
    );
    settle(
        &store,
        fresh_claim,
        machine::Settlement::Success,
        &policy,
        t(6_002),
    )
    .await
    .unwrap();
    assert_eq!(store.get(stale.id).await.unwrap().status, Status::Succeeded);
}

/// A claim right after a submit finishes the envelope the submit kept
/// (no decode); it must hand out exactly what a claim decoding the row
/// hands out (a read of the row), for every valid PENDING fixture; a
/// retried task is kept again; and a row rewritten behind the
/// cache's back (here by a second store on the same directory, as another
/// process would) is read from the row.
#[tokio::test]
async fn a_claim_of_a_kept_envelope_equals_a_claim_of_the_decoded_row() {
    let dir = tempfile::tempdir().unwrap();
    let kept = EmbeddedStore::open(dir.path()).unwrap();
    let other = EmbeddedStore::open(dir.path()).unwrap();
    let (mut n, mut checked) = (0, 0);
    for (name, bytes) in fixtures() {
        let mut env = Envelope::decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        if env.status != Status::Pending {
            continue;
        }
        n += 1;
        let queue = format!("kept-{n}");
        env.id = TaskId::generate();
        env.queue.clone_from(&queue);
        env.next_attempt_at = Some(t(0));
        submit_ok(
            &kept,
            vec![NewTask {
                envelope: env,
                idempotency_key: None,
                unique: None,
            }],
        )
        .await;
        // A fixture whose counters are at their maximum is never handed out
        // (the claim answers, without it).
        let Some(claimed) = kept
            .claim(&ClaimRequest::new(&queue, 1, 1_000, t(10)))
            .await
            .unwrap()
            .pop()
        else {
            assert!(
                machine::claim(&decoded_fixture(&bytes), 1_000, t(10)).is_err(),
                "{name}: a claimable fixture was not handed out"
            );
            continue;
        };
        checked += 1;
        // `get` decodes the row and replays the claim on it.
        let decoded = kept.get(claimed.id).await.unwrap();
        assert_eq!(claimed, decoded, "{name}");
        assert_eq!(claimed.encode(), decoded.encode(), "{name}");
    }
    assert!(
        checked > 3,
        "too few claimable PENDING fixtures ({checked} of {n})"
    );

    // Kept by the first store, then deleted and submitted again with
    // another payload by the second: the claim hands out the new one.
    let first = task("rewritten", 0, t(0));
    let id = first.envelope.id;
    submit_ok(&kept, vec![first.clone()]).await;
    other.delete(id).await.unwrap();
    let mut second = first;
    let other_payload = Envelope::new(
        "rewritten",
        "handler",
        b"{\"n\":2}",
        "application/json",
        t(0),
    );
    second.envelope.payload.clone_from(&other_payload.payload);
    submit_ok(&other, vec![second]).await;
    let claimed = kept
        .claim(&ClaimRequest::new("rewritten", 1, 1_000, t(10)))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].payload, other_payload.payload);
    assert_eq!(claimed[0], kept.get(id).await.unwrap());

    // A task settled back to PENDING (a retry) is kept again and claimed
    // from the cache, equal to its row.
    let retried = task("retried", 0, t(0));
    submit_ok(&kept, vec![retried]).await;
    let claimed = kept
        .claim(&ClaimRequest::new("retried", 1, 1_000, t(10)))
        .await
        .unwrap();
    let retry = machine::Settlement::Failure {
        error: ErrorInfo::new("app.Busy", "later"),
        kind: machine::FailureKind::Retryable,
    };
    let next = settle(&kept, &claimed[0], retry, &QueuePolicy::default(), t(20))
        .await
        .unwrap();
    assert_eq!(next.status, Status::Pending);
    let due = next.next_attempt_at.unwrap();
    let again = kept
        .claim(&ClaimRequest::new("retried", 1, 1_000, due))
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0], kept.get(next.id).await.unwrap());
    // The failed attempt and the one just begun.
    assert_eq!(again[0].attempts.len(), 2);

    // With the cache turned off every claim decodes its row, to the same.
    let mut options = EmbeddedOptions::default();
    options.claim_cache = 0;
    let plain = EmbeddedStore::open_with(dir.path(), options).unwrap();
    let task = task("plain", 0, t(0));
    let id = task.envelope.id;
    submit_ok(&plain, vec![task]).await;
    let claimed = plain
        .claim(&ClaimRequest::new("plain", 1, 1_000, t(10)))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0], plain.get(id).await.unwrap());
}

/// The writer thread runs at the nice value asked for where the process may
/// set it (lowering priority always may; raising needs privilege).
#[cfg(target_os = "linux")]
#[test]
fn the_writer_thread_runs_at_the_priority_asked_for() {
    fn writer_nice() -> Vec<i64> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc/self/task").unwrap() {
            let stat =
                std::fs::read_to_string(entry.unwrap().path().join("stat")).unwrap_or_default();
            // pid (comm) state … : fields after the comm, nice is the 17th.
            let Some((head, rest)) = stat.rsplit_once(") ") else {
                continue;
            };
            if !head.ends_with("rdq-embedded-wr") {
                continue;
            }
            found.push(rest.split(' ').nth(16).unwrap().parse().unwrap());
        }
        found
    }
    let dir = tempfile::tempdir().unwrap();
    let mut options = EmbeddedOptions::default();
    options.writer_nice = 7;
    let store = EmbeddedStore::open_with(dir.path(), options).unwrap();
    // The thread sets its own priority as it starts.
    // Other tests' stores may run in this process too.
    let mut nices = writer_nice();
    for _ in 0..200 {
        if nices.contains(&7) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        nices = writer_nice();
    }
    assert!(nices.contains(&7), "writer threads' nice values: {nices:?}");
    drop(store);
}

/// A store is created with the page size asked for; one that exists keeps
/// its own whatever is asked and works as before; a page size SQLite
/// cannot use is refused before anything is created.
#[tokio::test]
async fn a_new_store_takes_the_page_size_asked_for_and_an_existing_one_keeps_its_own() {
    fn page_size(dir: &std::path::Path) -> i64 {
        rusqlite::Connection::open(dir.join(DB_FILE_NAME))
            .unwrap()
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap()
    }
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let kept = submit_ok(&store, vec![task("paged", 0, t(0))]).await;
    drop(store);
    assert_eq!(page_size(dir.path()), 16_384);

    let mut options = EmbeddedOptions::default();
    options.page_size = 4096;
    let small = tempfile::tempdir().unwrap();
    drop(EmbeddedStore::open_with(small.path(), options.clone()).unwrap());
    assert_eq!(page_size(small.path()), 4096);

    // Reopened asking for another size: the file keeps its pages and tasks.
    let reopened = EmbeddedStore::open_with(dir.path(), options).unwrap();
    assert_eq!(reopened.get(kept[0].id).await.unwrap(), kept[0]);
    let claimed = reopened
        .claim(&ClaimRequest::new("paged", 1, 1_000, t(10)))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    drop(reopened);
    assert_eq!(page_size(dir.path()), 16_384);

    for bad in [0, 1000, 256, 131_072] {
        let mut options = EmbeddedOptions::default();
        options.page_size = bad;
        let parent = tempfile::tempdir().unwrap();
        let target = parent.path().join("never");
        let err = EmbeddedStore::open_with(&target, options).unwrap_err();
        assert!(
            matches!(err, EngineError::InvalidArgument(ref m) if m.contains("page_size")),
            "{bad}: {err}"
        );
        assert!(!target.exists(), "{bad}: the directory was created");
    }
}
