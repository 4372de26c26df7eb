//! The schedule use cases on a store without schedules (RabbitMQ's case):
//! every one answers `UNSUPPORTED` (501), and a schedule's own name rule
//! still comes first where nothing needs the store.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use async_trait::async_trait;
use rdq_app::schedules::schedule_from_body;
use rdq_app::{App, AppParts, Caller, ErrorKind};
use rdq_engine::{
    ClaimRequest, Engine, EngineError, LeasedUpdate, NewTask, Store, Submitted, SystemClock,
    WorkCapabilities,
};
use rdq_envelope::{Envelope, Timestamp};
use rdq_store_memory::MemoryStore;

/// The memory store's work path, and nothing else.
struct WorkPathOnly(MemoryStore);

#[async_trait]
impl Store for WorkPathOnly {
    fn capabilities(&self) -> WorkCapabilities {
        self.0.capabilities()
    }
    async fn submit(&self, tasks: Vec<NewTask>) -> Vec<Result<Submitted, EngineError>> {
        self.0.submit(tasks).await
    }
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Envelope>, EngineError> {
        self.0.claim(request).await
    }
    async fn settle(&self, updates: Vec<LeasedUpdate>) -> Vec<Result<(), EngineError>> {
        self.0.settle(updates).await
    }
    async fn expired_leases(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Envelope>, EngineError> {
        self.0.expired_leases(now, limit).await
    }
}

#[tokio::test]
async fn a_store_without_schedules_answers_unsupported_to_every_schedule_use_case() {
    let engine = Engine::new(
        Arc::new(WorkPathOnly(MemoryStore::new())),
        Arc::new(SystemClock),
    );
    let app = App::new(AppParts::local(engine)).await.unwrap();
    let caller = Caller::open();
    let body = serde_json::from_str(
        r#"{"task": {"queue": "q", "handler_ref": "h"}, "spec": {"every_ms": 1000}}"#,
    )
    .unwrap();
    let schedule = schedule_from_body("tick", body).unwrap();
    let errors = [
        app.put_schedule(&caller, schedule, rdq_engine::ScheduleOwner::Api)
            .await
            .map(drop)
            .unwrap_err(),
        app.schedules(&caller).await.map(drop).unwrap_err(),
        app.schedule(&caller, "tick").await.map(drop).unwrap_err(),
        app.delete_schedule(&caller, "tick").await.unwrap_err(),
        app.set_schedule_paused(&caller, "tick", true)
            .await
            .map(drop)
            .unwrap_err(),
        app.run_schedule(&caller, "tick")
            .await
            .map(drop)
            .unwrap_err(),
        app.next_due(&caller, "tick", 5)
            .await
            .map(drop)
            .unwrap_err(),
    ];
    for e in errors {
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
        assert_eq!(e.code(), "UNSUPPORTED");
        assert_eq!(e.kind().http_status(), 501);
    }
    // A bad name is the caller's error whatever the store.
    let e = app.schedule(&caller, "Bad Name").await.unwrap_err();
    assert_eq!(e.code(), "INVALID_SCHEDULE_NAME");
    assert_eq!(e.kind(), ErrorKind::Invalid);
}
