//! `rdq.v1.Schedules` end to end: the real `rdq serve` on the embedded
//! store, a tonic client on its address: put (the definition as JSON
//! text), get, list, next, pause, resume, run, delete; refusals with the
//! same stable codes as over HTTP; scopes; and the scheduler firing what
//! was put.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use common::RdqServer;
use common::grpc::{ALL, SUBMIT_ONLY, channel, config, req};
use rdq_grpc::pb;
use rdq_grpc::pb::schedules_client::SchedulesClient;
use rdq_grpc::pb::tasks_client::TasksClient;
use serde_json::{Value, json};
use tonic::{Code, Status};

fn assert_refused<T: std::fmt::Debug>(r: Result<T, Status>, grpc: Code, code: &str) {
    let s = r.expect_err("refused");
    assert_eq!(s.code(), grpc, "{s:?}");
    let problem = rdq_grpc::status::problem_of(&s).expect("an rdq.v1.Problem in the details");
    assert_eq!(problem.code, code, "{s:?}");
}

fn put(name: &str, schedule: &Value) -> pb::PutScheduleRequest {
    pb::PutScheduleRequest {
        name: name.into(),
        schedule_json: schedule.to_string(),
        owner: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_over_grpc_are_managed_and_fired() {
    let dir = tempfile::tempdir().unwrap();
    let server = RdqServer::start(dir.path(), &config(), &[]);
    let ch = channel(&server).await;
    let mut schedules = SchedulesClient::new(ch.clone());
    let tick =
        json!({"task": {"queue": "ticks", "handler_ref": "tick"}, "spec": {"every_ms": 1000}});

    // Bad input: the HTTP API's codes, nothing stored.
    let bad =
        json!({"task": {"queue": "ticks", "handler_ref": "tick"}, "spec": {"cron": "0 0 30 2 *"}});
    assert_refused(
        schedules.put(req(put("tick", &bad), ALL)).await,
        Code::InvalidArgument,
        "INVALID_CRON",
    );
    assert_refused(
        schedules
            .put(req(put("tick", &json!({"spec": 1})), ALL))
            .await,
        Code::InvalidArgument,
        "MALFORMED_REQUEST",
    );
    assert_refused(
        schedules.put(req(put("Bad Name", &tick), ALL)).await,
        Code::InvalidArgument,
        "INVALID_SCHEDULE_NAME",
    );
    assert_refused(
        schedules.put(req(put("tick", &tick), SUBMIT_ONLY)).await,
        Code::PermissionDenied,
        "FORBIDDEN",
    );
    assert_refused(
        schedules
            .get(req(
                pb::GetScheduleRequest {
                    name: "tick".into(),
                },
                ALL,
            ))
            .await,
        Code::NotFound,
        "SCHEDULE_NOT_FOUND",
    );

    let created = schedules
        .put(req(put("tick", &tick), ALL))
        .await
        .unwrap()
        .into_inner();
    assert!(created.created);
    let stored = created.schedule.unwrap();
    let definition: Value = serde_json::from_str(&stored.schedule_json).unwrap();
    assert_eq!(definition["spec"]["every_ms"], 1000);
    assert_eq!(definition["catch_up"], "latest");
    assert_eq!(stored.owner, "api");
    // Declared in code: the owner says so; an unknown owner is refused.
    let mut declared = put("tick", &tick);
    declared.owner = "code".into();
    let again = schedules
        .put(req(declared, ALL))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.schedule.unwrap().owner, "code");
    let mut bad = put("tick", &tick);
    bad.owner = "robot".into();
    assert_refused(
        schedules.put(req(bad, ALL)).await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );

    let next = schedules
        .next(req(
            pb::NextDueRequest {
                name: "tick".into(),
                count: 3,
            },
            SUBMIT_ONLY,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.due_ms.len(), 3);
    assert_eq!(next.due_ms[1] - next.due_ms[0], 1000);
    assert_refused(
        schedules
            .next(req(
                pb::NextDueRequest {
                    name: "tick".into(),
                    count: 101,
                },
                ALL,
            ))
            .await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );

    // The scheduler of `rdq serve` fires it.
    let mut fired = 0;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let got = schedules
            .get(req(
                pb::GetScheduleRequest {
                    name: "tick".into(),
                },
                ALL,
            ))
            .await
            .unwrap()
            .into_inner();
        fired = got.fires;
        if fired >= 2 {
            let id = got.last_fired_task.unwrap();
            let task = TasksClient::new(ch.clone())
                .get(req(pb::GetTaskRequest { id }, ALL))
                .await
                .unwrap()
                .into_inner();
            let env = task.envelope.unwrap();
            assert_eq!(env.headers["rdq.schedule"], "tick");
            assert!(env.headers.contains_key("rdq.schedule_due"));
            break;
        }
    }
    assert!(fired >= 2, "two fires within five seconds");

    let list = schedules
        .list(req(pb::ListSchedulesRequest {}, SUBMIT_ONLY))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.schedules.len(), 1);
    let paused = schedules
        .pause(req(
            pb::PauseScheduleRequest {
                name: "tick".into(),
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(paused.schedule_json.contains("\"paused\":true"));
    schedules
        .resume(req(
            pb::ResumeScheduleRequest {
                name: "tick".into(),
            },
            ALL,
        ))
        .await
        .unwrap();
    let run = schedules
        .run(req(
            pb::RunScheduleRequest {
                name: "tick".into(),
            },
            ALL,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(run.envelope.unwrap().headers["rdq.schedule_manual"], "true");
    assert_refused(
        schedules
            .delete(req(
                pb::DeleteScheduleRequest {
                    name: "tick".into(),
                },
                SUBMIT_ONLY,
            ))
            .await,
        Code::PermissionDenied,
        "FORBIDDEN",
    );
    schedules
        .delete(req(
            pb::DeleteScheduleRequest {
                name: "tick".into(),
            },
            ALL,
        ))
        .await
        .unwrap();
    assert_refused(
        schedules
            .delete(req(
                pb::DeleteScheduleRequest {
                    name: "tick".into(),
                },
                ALL,
            ))
            .await,
        Code::NotFound,
        "SCHEDULE_NOT_FOUND",
    );
    assert!(server.terminate());
}
