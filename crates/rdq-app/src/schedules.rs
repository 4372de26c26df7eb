//! Periodic schedules (`docs/schedules.md`): put by name, read with their
//! firing state, deleted, paused, resumed, run once now, and their next due
//! times previewed.
//!
//! A schedule belongs to the queue its task template names: reading one
//! needs any scope on that queue, changing one `admin` on it (on the old
//! queue too, when a put moves it). A caller who may not read a
//! schedule's queue gets `SCHEDULE_NOT_FOUND`, exactly as for a name that
//! does not exist, and a list leaves such schedules out. Every change is
//! audited (`schedule.put`, `schedule.delete`, `schedule.pause`,
//! `schedule.resume`, `schedule.run`).
//!
//! "Run now" submits the template once, outside the cadence: its task
//! carries `rdq.schedule` (the name) and `rdq.schedule_manual: true`
//! instead of `rdq.schedule_due`, has no idempotency key and moves
//! neither the schedule's cursor nor its counters.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rdq_api::schedules::{self as wire, ScheduleBody, ScheduleState, ScheduleTask};
use rdq_engine::{EngineError, ScheduleInfo, ScheduleOwner, SubmitRequest, Submitted};
use rdq_envelope::{Envelope, Timestamp};
use rdq_schedule::{
    CatchUp, Overlap, SCHEDULE_HEADER, Schedule, Spec, TaskTemplate, ValidSchedule,
};
use serde_json::json;

use crate::auth::{Caller, READ_SCOPES, Scope};
use crate::error::AppError;
use crate::submit::SUBMITTED_BY_HEADER;
use crate::{App, AuditRecord};

/// The header marking a task submitted by "run now", not by the cadence.
pub const SCHEDULE_MANUAL_HEADER: &str = "rdq.schedule_manual";

/// Due times a preview computes when the caller names no count.
pub const DEFAULT_NEXT_DUE: usize = 5;

/// The schedule a put body stands for, under the path's `name`: a body
/// naming another schedule is `INVALID_FIELD` on `name`, a payload that
/// is not standard base64 `INVALID_FIELD` on `task.payload`. The rules of
/// schedules are checked by the engine when it is put.
pub fn schedule_from_body(name: &str, body: ScheduleBody) -> Result<Schedule, AppError> {
    if let Some(named) = &body.name
        && named != name
    {
        return Err(AppError::invalid_field(
            "name",
            format!("the body names {named:?}, the path {name:?}"),
        ));
    }
    let t = body.task;
    let payload = match t.payload {
        Some(text) => STANDARD
            .decode(text.as_bytes())
            .map_err(|e| AppError::invalid_field("task.payload", format!("is not base64: {e}")))?,
        None => Vec::new(),
    };
    Ok(Schedule {
        name: name.to_owned(),
        task: TaskTemplate {
            queue: t.queue,
            handler_ref: t.handler_ref,
            payload,
            payload_content_type: t
                .payload_content_type
                .unwrap_or_else(|| rdq_schedule::DEFAULT_CONTENT_TYPE.to_owned()),
            headers: t.headers,
            priority: t.priority,
            flow_key: t.flow_key,
        },
        spec: match body.spec {
            wire::Spec::Cron(pattern) => Spec::Cron(pattern),
            wire::Spec::EveryMs(ms) => Spec::EveryMs(ms),
        },
        tz: body
            .tz
            .unwrap_or_else(|| rdq_schedule::DEFAULT_TIME_ZONE.to_owned()),
        start_ms: body.start_ms,
        end_ms: body.end_ms,
        paused: body.paused.unwrap_or(false),
        overlap: match body.overlap {
            None | Some(wire::Overlap::Allow) => Overlap::Allow,
            Some(wire::Overlap::SkipIfPending) => Overlap::SkipIfPending,
            Some(wire::Overlap::SkipIfRunning) => Overlap::SkipIfRunning,
            Some(wire::Overlap::SkipIfUnfinished) => Overlap::SkipIfUnfinished,
        },
        catch_up: match body.catch_up {
            None | Some(wire::CatchUp::Latest) => CatchUp::Latest,
            Some(wire::CatchUp::Skip) => CatchUp::Skip,
            Some(wire::CatchUp::All { max, window_ms }) => CatchUp::All { max, window_ms },
        },
    })
}

/// The owner a put names (`api` when it names none): `INVALID_FIELD` on
/// `owner` for anything but `api` or `code`.
pub fn owner_of(named: Option<&str>) -> Result<ScheduleOwner, AppError> {
    match named {
        None | Some("") => Ok(ScheduleOwner::Api),
        Some(text) => ScheduleOwner::parse(text).ok_or_else(|| {
            AppError::invalid_field("owner", format!("is {text:?}, not \"api\" or \"code\""))
        }),
    }
}

/// The wire form of a schedule, every default written out.
pub fn schedule_body(s: &Schedule) -> ScheduleBody {
    let t = &s.task;
    ScheduleBody {
        name: Some(s.name.clone()),
        task: ScheduleTask {
            queue: t.queue.clone(),
            handler_ref: t.handler_ref.clone(),
            payload: (!t.payload.is_empty()).then(|| STANDARD.encode(&t.payload)),
            payload_content_type: Some(t.payload_content_type.clone()),
            headers: t.headers.clone(),
            priority: t.priority,
            flow_key: t.flow_key.clone(),
        },
        spec: match &s.spec {
            Spec::Cron(pattern) => wire::Spec::Cron(pattern.clone()),
            Spec::EveryMs(ms) => wire::Spec::EveryMs(*ms),
        },
        tz: Some(s.tz.clone()),
        start_ms: s.start_ms,
        end_ms: s.end_ms,
        paused: Some(s.paused),
        overlap: Some(match s.overlap {
            Overlap::Allow => wire::Overlap::Allow,
            Overlap::SkipIfPending => wire::Overlap::SkipIfPending,
            Overlap::SkipIfRunning => wire::Overlap::SkipIfRunning,
            Overlap::SkipIfUnfinished => wire::Overlap::SkipIfUnfinished,
        }),
        catch_up: Some(match s.catch_up {
            CatchUp::Skip => wire::CatchUp::Skip,
            CatchUp::Latest => wire::CatchUp::Latest,
            CatchUp::All { max, window_ms } => wire::CatchUp::All { max, window_ms },
        }),
    }
}

/// The wire form of a stored schedule and its firing state.
pub fn schedule_state(info: ScheduleInfo) -> ScheduleState {
    ScheduleState {
        name: info.schedule.name.clone(),
        schedule: schedule_body(&info.schedule),
        owner: info.owner.as_str().to_owned(),
        created_at_ms: info.created_at_ms,
        updated_at_ms: info.updated_at_ms,
        last_due_ms: info.last_due_ms,
        last_fire_at_ms: info.last_fire_at_ms,
        last_fired_task: info.last_fired_task.map(|id| id.to_string()),
        next_due_ms: info.next_due_ms,
        fires: info.fires,
        skips: info.skips,
    }
}

/// An instant as the envelope writes timestamps (`YYYY-MM-DDTHH:MM:SS.mmmZ`).
pub fn format_instant(ms: i64) -> String {
    Timestamp::from_unix_ms(ms).map_or_else(|| ms.to_string(), |t| t.to_string())
}

impl App {
    /// Every schedule on a queue the caller may read, by name.
    pub async fn schedules(&self, caller: &Caller) -> Result<Vec<ScheduleState>, AppError> {
        let all = self.engine.list_schedules().await?;
        Ok(all
            .into_iter()
            .filter(|s| {
                caller
                    .require_any(READ_SCOPES, &s.schedule.task.queue)
                    .is_ok()
            })
            .map(schedule_state)
            .collect())
    }

    /// The schedule `name` (any scope on its queue).
    pub async fn schedule(&self, caller: &Caller, name: &str) -> Result<ScheduleState, AppError> {
        Ok(schedule_state(self.readable_schedule(caller, name).await?))
    }

    /// Creates or replaces the schedule `schedule.name` (`admin` on its
    /// queue, and on the replaced one's); audited. Answers the stored
    /// schedule and whether it is new. A schedule that breaks a rule is
    /// refused with the rule's code and field, and so is a template a
    /// submit would refuse (checked by building its task); nothing is
    /// stored then.
    pub async fn put_schedule(
        &self,
        caller: &Caller,
        schedule: Schedule,
        owner: ScheduleOwner,
    ) -> Result<(ScheduleState, bool), AppError> {
        check_name(&schedule.name)?;
        caller.require(Scope::Admin, &schedule.task.queue)?;
        let previous = match self.engine.get_schedule(&schedule.name).await {
            Ok(info) => Some(info),
            Err(EngineError::ScheduleNotFound(_)) => None,
            Err(e) => return Err(e.into()),
        };
        if let Some(old) = &previous {
            caller.require(Scope::Admin, &old.schedule.task.queue)?;
        }
        let valid = ValidSchedule::new(schedule).map_err(EngineError::from)?;
        // A template a submit would refuse (a header too long, a flow key
        // of the wrong shape, a payload over the queue's limit) is refused
        // now, not at every fire.
        let policy = self.engine.policy(&valid.schedule().task.queue).await?;
        self.engine
            .build(&self.manual_request(valid.schedule(), None), &policy)
            .map_err(template_error)?;
        let info = self
            .engine
            .put_schedule(valid.into_schedule(), owner)
            .await?;
        self.audit_schedule(
            caller,
            "schedule.put",
            &info.schedule,
            json!({
                "created": previous.is_none(),
                "owner": owner.as_str(),
                "schedule": schedule_body(&info.schedule),
            }),
        );
        Ok((schedule_state(info), previous.is_none()))
    }

    /// Removes the schedule `name` (`admin` on its queue); audited. The
    /// tasks it submitted stay.
    pub async fn delete_schedule(&self, caller: &Caller, name: &str) -> Result<(), AppError> {
        let info = self.writable_schedule(caller, name).await?;
        self.engine.delete_schedule(name).await?;
        self.audit_schedule(caller, "schedule.delete", &info.schedule, json!({}));
        Ok(())
    }

    /// Pauses (`paused`) or resumes the schedule `name` (`admin` on its
    /// queue); audited. Due times passed while paused are skipped as
    /// `paused`; resuming does not catch up on them.
    pub async fn set_schedule_paused(
        &self,
        caller: &Caller,
        name: &str,
        paused: bool,
    ) -> Result<ScheduleState, AppError> {
        self.writable_schedule(caller, name).await?;
        let info = self.engine.set_schedule_paused(name, paused).await?;
        let action = if paused {
            "schedule.pause"
        } else {
            "schedule.resume"
        };
        self.audit_schedule(caller, action, &info.schedule, json!({}));
        Ok(schedule_state(info))
    }

    /// Submits the template of schedule `name` once now (`admin` on its
    /// queue), marked as a manual run (module documentation); audited.
    pub async fn run_schedule(&self, caller: &Caller, name: &str) -> Result<Envelope, AppError> {
        let info = self.writable_schedule(caller, name).await?;
        let request = self.manual_request(&info.schedule, caller.name());
        let submitted = self.engine.submit(request).await?;
        let env = match submitted {
            Submitted::Created(env) | Submitted::Existing(env) => env,
        };
        self.metrics.submitted(&env.queue, 1);
        self.audit_schedule(
            caller,
            "schedule.run",
            &info.schedule,
            json!({"task": env.id.to_string()}),
        );
        Ok(env)
    }

    /// The next `count` due times of schedule `name` from now, as the
    /// scheduler will see them (any scope on its queue); `count` is 1 to
    /// [`wire::MAX_NEXT_DUE`].
    pub async fn next_due(
        &self,
        caller: &Caller,
        name: &str,
        count: usize,
    ) -> Result<Vec<i64>, AppError> {
        if !(1..=wire::MAX_NEXT_DUE).contains(&count) {
            return Err(AppError::invalid_field(
                "count",
                format!("must be 1 to {}", wire::MAX_NEXT_DUE),
            ));
        }
        let info = self.readable_schedule(caller, name).await?;
        let valid = ValidSchedule::new(info.schedule)
            .map_err(|e| EngineError::CorruptStore(format!("schedule {name}: {e}")))?;
        let timing = valid.timing();
        let mut due = Vec::with_capacity(count);
        let mut next = info.next_due_ms;
        while let Some(at) = next {
            due.push(at);
            if due.len() == count {
                break;
            }
            next = timing.next_due_after(at);
        }
        Ok(due)
    }

    /// The schedule `name` if the caller may read its queue;
    /// `SCHEDULE_NOT_FOUND` otherwise, as for a missing one.
    async fn readable_schedule(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<ScheduleInfo, AppError> {
        check_name(name)?;
        let info = self.engine.get_schedule(name).await?;
        if caller
            .require_any(READ_SCOPES, &info.schedule.task.queue)
            .is_err()
        {
            return Err(EngineError::ScheduleNotFound(name.to_owned()).into());
        }
        Ok(info)
    }

    /// The schedule `name` if the caller may change it (`admin` on its queue).
    async fn writable_schedule(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<ScheduleInfo, AppError> {
        let info = self.readable_schedule(caller, name).await?;
        caller.require(Scope::Admin, &info.schedule.task.queue)?;
        Ok(info)
    }

    /// The submit of a manual run of `schedule` by `by`.
    fn manual_request(&self, schedule: &Schedule, by: Option<&str>) -> SubmitRequest {
        let t = &schedule.task;
        let mut system_headers = BTreeMap::from([
            (SCHEDULE_HEADER.to_owned(), schedule.name.clone()),
            (SCHEDULE_MANUAL_HEADER.to_owned(), "true".to_owned()),
        ]);
        if let Some(name) = by {
            system_headers.insert(SUBMITTED_BY_HEADER.to_owned(), name.to_owned());
        }
        SubmitRequest {
            queue: t.queue.clone(),
            handler_ref: t.handler_ref.clone(),
            payload: t.payload.clone(),
            payload_content_type: t.payload_content_type.clone(),
            headers: t.headers.clone(),
            system_headers,
            priority: t.priority,
            flow_key: t.flow_key.clone(),
            ..SubmitRequest::default()
        }
    }

    fn audit_schedule(
        &self,
        caller: &Caller,
        action: &'static str,
        schedule: &Schedule,
        mut detail: serde_json::Value,
    ) {
        if let Some(map) = detail.as_object_mut() {
            map.insert("name".to_owned(), json!(schedule.name));
        }
        self.audit().record(AuditRecord {
            who: caller.who().to_owned(),
            action,
            queue: Some(schedule.task.queue.clone()),
            count: None,
            dry_run: false,
            detail,
        });
    }
}

/// `INVALID_SCHEDULE_NAME` unless `name` is a schedule's name (the rule
/// of queue names), before any store is asked.
pub fn check_name(name: &str) -> Result<(), AppError> {
    if rdq_envelope::is_valid_name(name) {
        return Ok(());
    }
    let why = match rdq_envelope::validate_queue_name(name) {
        Err(e) => e.message().to_owned(),
        Ok(()) => "is not a valid name".to_owned(),
    };
    Err(rdq_schedule::ScheduleError::InvalidScheduleName { why }.into())
}

/// A template refused as its task: the error's field under `task.`.
fn template_error(e: EngineError) -> AppError {
    let e = AppError::from(e);
    match e.extensions().get("field").and_then(|f| f.as_str()) {
        Some(field) if !field.starts_with("task.") => {
            let field = format!("task.{field}");
            AppError::new(
                e.kind(),
                e.code().to_owned(),
                format!("task.{}", e.detail()),
            )
            .with("field", json!(field))
        }
        _ => e,
    }
}
