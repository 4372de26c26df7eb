//! Capabilities tell the truth: every capability a store declares works
//! (answers something other than `UNSUPPORTED`), and every one it does not
//! declare answers `UNSUPPORTED` and changes nothing.

use rdq_engine::{EngineError, ListQuery, RedriveRequest};
use rdq_envelope::{Status, TaskId};

use crate::StoreFactory;
use crate::harness::{Harness, Spi as _, task, test_policy};

fn unsupported<T>(r: &Result<T, EngineError>) -> bool {
    matches!(r, Err(EngineError::Unsupported(_)))
}

/// Each capability, declared or not, is checked by calling what it stands
/// for on a store with one task in it.
pub async fn capabilities_tell_the_truth(factory: StoreFactory) {
    let h = Harness::new(&factory).await;
    let caps = h.caps();
    let queue = "compliance.caps";
    let env = h.submit(task(queue)).await;
    let mut answers: Vec<(&str, bool, bool)> = Vec::new();
    let missing = TaskId::generate();

    let r = h.store.get(env.id).await;
    answers.push(("get_by_id", caps.get_by_id, !unsupported(&r)));
    let r = h
        .store
        .list(&ListQuery {
            queue: queue.into(),
            status: Some(Status::Dead),
            limit: 10,
            ..ListQuery::default()
        })
        .await;
    answers.push(("list", caps.list, !unsupported(&r)));
    let r = h
        .store
        .redrive(
            &RedriveRequest {
                queue: queue.into(),
                dry_run: true,
                ..RedriveRequest::default()
            },
            h.now(),
        )
        .await;
    answers.push(("redrive", caps.redrive, !unsupported(&r)));
    let r = h.store.purge(queue, Status::Dead, true).await;
    answers.push(("purge", caps.purge, !unsupported(&r)));
    let r = h.store.counts().await;
    answers.push(("counts", caps.counts, !unsupported(&r)));
    let r = h.store.depths(queue).await;
    answers.push(("depths", caps.depths, !unsupported(&r)));
    let r = h.store.get_config(queue).await;
    answers.push(("queue_config", caps.queue_config, !unsupported(&r)));
    let r = h.store.prune_succeeded(queue, h.now(), 1).await;
    answers.push(("prune", caps.prune, !unsupported(&r)));
    let r = h.engine.list_schedules().await;
    answers.push(("schedules", caps.schedules, !unsupported(&r)));
    let r = h.engine.source_cursors("compliance.caps").await;
    answers.push(("source_cursors", caps.source_cursors, !unsupported(&r)));
    if caps.queue_config {
        let r = h.store.put_config(queue, &test_policy().into()).await;
        assert!(
            !unsupported(&r),
            "the store declares queue_config but put_config answers UNSUPPORTED"
        );
    }
    if caps.purge {
        // Deleting a task that does not exist is answered, not refused.
        let r = h.store.delete(missing).await;
        assert!(
            !unsupported(&r),
            "purge is declared but delete answers UNSUPPORTED"
        );
    } else {
        let r = h.store.delete(env.id).await;
        assert!(
            unsupported(&r),
            "purge is not declared, so delete must answer UNSUPPORTED"
        );
    }
    let keyed = h
        .store
        .submit(vec![rdq_engine::NewTask {
            envelope: {
                let mut e = env.clone();
                e.id = TaskId::generate();
                e
            },
            idempotency_key: Some("compliance-caps-key".into()),
            unique: None,
        }])
        .await;
    answers.push((
        "idempotent_submit",
        caps.idempotent_submit,
        !keyed.first().is_some_and(unsupported),
    ));
    for (name, declared, works) in answers {
        assert_eq!(
            declared,
            works,
            "capability {name}: declared {declared}, but the store {}",
            if works {
                "does it"
            } else {
                "answers UNSUPPORTED"
            }
        );
    }
    if !caps.purge && caps.get_by_id {
        // Nothing was removed by the refused calls.
        assert!(h.store.get(env.id).await.is_ok());
    }
}
