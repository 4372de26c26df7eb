//! A schedule that passed every rule, with its due times parsed once.
//!
//! Each rule names the field it checks. The task template is checked by the
//! same functions a submit goes through (`rdq-envelope`'s name and header
//! rules, `rdq-engine`'s flow-key rule), so a schedule cannot hold a task
//! that every fire would then have refused.

use rdq_envelope::{
    EnvelopeError, ErrorCode, Timestamp, is_valid_name, validate_handler_ref, validate_queue_name,
    validate_user_headers,
};

use crate::due::Timing;
use crate::error::ScheduleError;
use crate::model::{CatchUp, Schedule, TaskTemplate};

/// Most fires one tick submits under `catch_up: all`.
pub const MAX_CATCH_UP_FIRES: u32 = 1_000;

/// Longest `catch_up: all` window, in ms: 366 days.
pub const MAX_CATCH_UP_WINDOW_MS: u64 = 366 * 86_400_000;

/// Longest `payload_content_type`, in characters (as for a submit).
pub const MAX_CONTENT_TYPE_LEN: usize = 255;

/// A checked schedule and its [`Timing`].
#[derive(Debug, Clone)]
pub struct ValidSchedule {
    schedule: Schedule,
    timing: Timing,
}

impl ValidSchedule {
    /// Checks every rule, in the order of the fields.
    pub fn new(schedule: Schedule) -> Result<Self, ScheduleError> {
        check_name(&schedule.name)?;
        check_task(&schedule.task)?;
        check_bounds(schedule.start_ms, schedule.end_ms)?;
        check_catch_up(schedule.catch_up)?;
        let timing = Timing::new(
            &schedule.spec,
            &schedule.tz,
            schedule.start_ms,
            schedule.end_ms,
        )?;
        Ok(Self { schedule, timing })
    }

    /// The schedule as it was given.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Its due times.
    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// The schedule back, for an update.
    pub fn into_schedule(self) -> Schedule {
        self.schedule
    }
}

fn check_name(name: &str) -> Result<(), ScheduleError> {
    if is_valid_name(name) {
        return Ok(());
    }
    // The queue-name rule explains itself; only the code differs.
    let why = match validate_queue_name(name) {
        Err(e) => e.message().to_owned(),
        Ok(()) => "is not a valid name".to_owned(),
    };
    Err(ScheduleError::InvalidScheduleName { why })
}

fn check_task(task: &TaskTemplate) -> Result<(), ScheduleError> {
    let in_task = |e: EnvelopeError| {
        let path = format!("task.{}", e.path().unwrap_or(""));
        ScheduleError::InvalidTask(EnvelopeError::at(e.code(), path, e.message()))
    };
    validate_queue_name(&task.queue).map_err(in_task)?;
    validate_handler_ref(&task.handler_ref).map_err(in_task)?;
    let ct = &task.payload_content_type;
    if ct.is_empty() || ct.chars().count() > MAX_CONTENT_TYPE_LEN {
        return Err(in_task(EnvelopeError::at(
            ErrorCode::InvalidField,
            "payload_content_type",
            format!("must be 1 to {MAX_CONTENT_TYPE_LEN} characters"),
        )));
    }
    validate_user_headers(&task.headers).map_err(in_task)?;
    if let Some(key) = &task.flow_key {
        rdq_engine::flow::validate_flow_key(key).map_err(|e| match e {
            rdq_engine::EngineError::Envelope(e) => in_task(e),
            other => in_task(EnvelopeError::at(
                ErrorCode::InvalidField,
                "flow_key",
                other.to_string(),
            )),
        })?;
    }
    Ok(())
}

fn check_bounds(start_ms: Option<i64>, end_ms: Option<i64>) -> Result<(), ScheduleError> {
    let in_range = |field: &'static str, ms: Option<i64>| match ms {
        Some(ms) if Timestamp::from_unix_ms(ms).is_none() => Err(ScheduleError::InvalidWindow {
            field,
            why: format!("{ms} lies outside the years 0000-9999"),
        }),
        _ => Ok(()),
    };
    in_range("start_ms", start_ms)?;
    in_range("end_ms", end_ms)?;
    if let (Some(start), Some(end)) = (start_ms, end_ms)
        && end <= start
    {
        return Err(ScheduleError::InvalidWindow {
            field: "end_ms",
            why: format!("{end} is not after start_ms {start}"),
        });
    }
    Ok(())
}

fn check_catch_up(catch_up: CatchUp) -> Result<(), ScheduleError> {
    let CatchUp::All { max, window_ms } = catch_up else {
        return Ok(());
    };
    if max == 0 || max > MAX_CATCH_UP_FIRES {
        return Err(ScheduleError::InvalidWindow {
            field: "catch_up.all.max",
            why: format!("{max} is outside 1 to {MAX_CATCH_UP_FIRES}"),
        });
    }
    if window_ms == 0 || window_ms > MAX_CATCH_UP_WINDOW_MS {
        return Err(ScheduleError::InvalidWindow {
            field: "catch_up.all.window_ms",
            why: format!("{window_ms} is outside 1 to {MAX_CATCH_UP_WINDOW_MS} (366 days)"),
        });
    }
    Ok(())
}
