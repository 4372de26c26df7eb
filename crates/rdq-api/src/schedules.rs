//! `/v1/schedules`: periodic schedules (`docs/schedules.md`), put by name,
//! read with their firing state, paused, resumed, run once now, previewed.
//!
//! The body is the schedule's JSON form as `rdq_schedule::Schedule` reads
//! it, field for field: these types only carry it over the wire with the
//! API's integer rule and their OpenAPI schemas; the application layer
//! turns them into the model and `rdq-schedule` validates it. The `spec`
//! and `catch_up` choices are externally tagged (`{"cron": "…"}`,
//! `"latest"`, `{"all": {…}}`), whose schemas are written by hand here: a
//! derived schema of a newtype variant carries no bounds.

use std::collections::BTreeMap;

use serde::de::{Deserializer, Error};
use serde::{Deserialize, Serialize};
use serde_json::{Number, json};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{IntoParams, ToSchema};

use crate::schema::{HandlerRef, QueueName, verbatim};

/// Longest interval and catch-up window: 366 days in ms.
pub const MAX_PERIOD_MS: u64 = 31_622_400_000;

/// Most due times `GET /v1/schedules/{name}/next` computes.
pub const MAX_NEXT_DUE: usize = 100;

/// The earliest instant a schedule may name: 0000-01-01T00:00:00.000Z.
pub const MIN_INSTANT_MS: i64 = -62_167_219_200_000;

/// The latest instant a schedule may name: 9999-12-31T23:59:59.999Z.
pub const MAX_INSTANT_MS: i64 = 253_402_300_799_999;

/// A schedule as `PUT /v1/schedules/{name}` takes it and every read gives
/// it back (`docs/schedules.md`). In a request `name` may be left out (the
/// path names the schedule); when present it must equal the path's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Schedule)]
pub struct ScheduleBody {
    /// The schedule's name: the path's, if given at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 240, pattern = "^(?:[a-z0-9_-][a-z0-9._-]{0,239}|\\.[a-z0-9_-][a-z0-9._-]{0,238}|\\.\\.[a-z0-9._-]{1,238})$")]
    pub name: Option<String>,
    /// The task each fire submits.
    pub task: ScheduleTask,
    /// When it fires: `{"cron": "<pattern>"}` or `{"every_ms": <ms>}`.
    #[schema(schema_with = spec_schema)]
    pub spec: Spec,
    /// IANA zone a cron pattern is read in (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1)]
    pub tz: Option<String>,
    /// No due time before this instant (ms since the Unix epoch, inclusive);
    /// an interval's anchor.
    #[serde(
        default,
        deserialize_with = "option_i64",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(minimum = -62_167_219_200_000_i64, maximum = 253_402_300_799_999_i64)]
    pub start_ms: Option<i64>,
    /// No due time after this instant (inclusive); after `start_ms`.
    #[serde(
        default,
        deserialize_with = "option_i64",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(minimum = -62_167_219_200_000_i64, maximum = 253_402_300_799_999_i64)]
    pub end_ms: Option<i64>,
    /// A paused schedule submits nothing; resuming does not catch up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// What a fire does while the previous fire's task is unfinished
    /// (default `allow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<Overlap>,
    /// What a tick does with missed due times (default `"latest"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = catch_up_schema)]
    pub catch_up: Option<CatchUp>,
}

/// The task a schedule's fires submit: the fields of a submit worth repeating.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleTask {
    /// Target queue.
    #[schema(value_type = QueueName)]
    pub queue: String,
    /// Handler name.
    #[schema(value_type = HandlerRef)]
    pub handler_ref: String,
    /// The payload's bytes as standard base64 with padding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        pattern = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$",
        content_encoding = "base64"
    )]
    pub payload: Option<String>,
    /// MIME type (default `application/octet-stream`); 1 to 255 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 255)]
    pub payload_content_type: Option<String>,
    /// User headers (the `rdq.` prefix is reserved, in any case).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(schema_with = crate::schema::user_headers)]
    pub headers: BTreeMap<String, String>,
    /// Claim priority, 0–255 (higher first).
    #[serde(default, deserialize_with = "crate::int::u8")]
    #[schema(maximum = 255)]
    pub priority: u8,
    /// The flow key of each task (`docs/flow-control.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:/@=+-]+$")]
    pub flow_key: Option<String>,
}

/// When a schedule is due.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Spec {
    /// A cron pattern, 5 fields or 6 with leading seconds, read in `tz`.
    Cron(String),
    /// A fixed period in ms, 1 to 366 days.
    EveryMs(#[serde(deserialize_with = "crate::int::u64")] u64),
}

/// The overlap policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Submit regardless.
    Allow,
    /// Skip while the previous task waits to be claimed.
    SkipIfPending,
    /// Skip while the previous task is claimed.
    SkipIfRunning,
    /// Skip while the previous task waits or is claimed.
    SkipIfUnfinished,
}

/// The catch-up policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum CatchUp {
    /// Submit a missed due time only if it is on time.
    Skip,
    /// Submit the most recent missed due time.
    Latest,
    /// Submit every missed due time within `window_ms`, at most `max`.
    All {
        /// 1 to 1000.
        #[serde(deserialize_with = "u32_field")]
        max: u32,
        /// 1 to 366 days, in ms.
        #[serde(deserialize_with = "crate::int::u64")]
        window_ms: u64,
    },
}

fn spec_schema() -> RefOr<Schema> {
    verbatim(json!({
        "description": "{\"cron\": \"<pattern>\"} (5 fields, or 6 with leading seconds) or {\"every_ms\": <ms>}",
        "oneOf": [
            {"type": "object", "required": ["cron"], "additionalProperties": false,
             "properties": {"cron": {"type": "string", "minLength": 1, "maxLength": 256}}},
            {"type": "object", "required": ["every_ms"], "additionalProperties": false,
             "properties": {"every_ms": {"type": "integer", "minimum": 1, "maximum": MAX_PERIOD_MS}}}
        ]
    }))
}

fn catch_up_schema() -> RefOr<Schema> {
    verbatim(json!({
        "description": "\"skip\", \"latest\" (default) or {\"all\": {\"max\": N, \"window_ms\": W}}",
        "oneOf": [
            {"type": "null"},
            {"type": "string", "enum": ["skip", "latest"]},
            {"type": "object", "required": ["all"], "additionalProperties": false,
             "properties": {"all": {
                 "type": "object", "required": ["max", "window_ms"], "additionalProperties": false,
                 "properties": {
                     "max": {"type": "integer", "minimum": 1, "maximum": 1000},
                     "window_ms": {"type": "integer", "minimum": 1, "maximum": MAX_PERIOD_MS}
                 }}}}
        ]
    }))
}

fn skip_counts_schema() -> RefOr<Schema> {
    verbatim(json!({
        "type": "object",
        "additionalProperties": {"type": "integer", "minimum": 0, "format": "uint64"}
    }))
}

fn u32_field<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = crate::int::u64(d)?;
    u32::try_from(v).map_err(D::Error::custom)
}

/// Reads an optional `i64` (`null` is absent) from any integral JSON number.
fn option_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let Some(n) = Option::<Number>::deserialize(d)? else {
        return Ok(None);
    };
    if let Some(v) = n.as_i64() {
        return Ok(Some(v));
    }
    let text = n.to_string();
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    let v = crate::int::parse_unsigned(magnitude, i64::MAX.unsigned_abs())
        .map_err(|e| D::Error::custom(format!("{n} {e}")))?;
    let v = i64::try_from(v).map_err(D::Error::custom)?;
    Ok(Some(if negative { -v } else { v }))
}

/// A stored schedule with its firing state, as every read answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleState {
    /// The schedule's name.
    #[schema(value_type = String)]
    pub name: String,
    /// The definition, as put (with its name and defaults filled in).
    pub schedule: ScheduleBody,
    /// Who put it: `api` (HTTP, gRPC, the CLI) or `code` (a program at its start).
    #[schema(pattern = "^(api|code)$")]
    pub owner: String,
    /// When it was first put (ms since the Unix epoch).
    pub created_at_ms: i64,
    /// When it was last put.
    pub updated_at_ms: i64,
    /// The last due time accounted for, submitted or skipped.
    #[serde(default)]
    pub last_due_ms: Option<i64>,
    /// When the last fire that submitted a task ran.
    #[serde(default)]
    pub last_fire_at_ms: Option<i64>,
    /// The task of the last fire.
    #[serde(default)]
    #[schema(value_type = Option<crate::schema::TaskId>)]
    pub last_fired_task: Option<String>,
    /// The next due time, if any.
    #[serde(default)]
    pub next_due_ms: Option<i64>,
    /// Tasks submitted over the schedule's life.
    pub fires: u64,
    /// Due times skipped, by reason (`catch_up_skip`, `paused`, `overlap_running`, …).
    #[schema(schema_with = skip_counts_schema)]
    pub skips: BTreeMap<String, u64>,
}

/// The answer of `GET /v1/schedules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleList {
    /// Every schedule the caller may read, by name.
    pub schedules: Vec<ScheduleState>,
}

/// Query of `PUT /v1/schedules/{name}`.
#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PutScheduleQuery {
    /// Who puts it: `api` (the default) or `code`, for a schedule a
    /// program declares at its start (an SDK's schedule declarations);
    /// the owner is shown with the schedule and tells an SDK which stored
    /// schedules its code no longer declares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(example = "code")]
    pub owner: Option<String>,
}

/// Query of `GET /v1/schedules/{name}/next`.
#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct NextDueQuery {
    /// How many due times, 1–100 (default 5).
    #[serde(
        default,
        deserialize_with = "crate::int::query_option_usize",
        skip_serializing_if = "Option::is_none"
    )]
    #[param(minimum = 1, maximum = 100)]
    pub count: Option<usize>,
}

/// The answer of `GET /v1/schedules/{name}/next`: the schedule's next due
/// times as the scheduler will see them, from now (pausing aside: a paused
/// schedule skips them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NextDue {
    /// The schedule's name.
    pub name: String,
    /// The due times, ms since the Unix epoch, ascending; fewer than asked
    /// when the schedule ends.
    pub due_ms: Vec<i64>,
    /// The same instants in UTC (`YYYY-MM-DDTHH:MM:SS.mmmZ`).
    pub due: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_schedule_reads_and_writes_back_unchanged() {
        let text = r#"{"name":"nightly.report","task":{"queue":"reports","handler_ref":"build-report","payload":"eyJkYXlzIjoxfQ==","payload_content_type":"application/json","headers":{"team":"data"},"priority":5,"flow_key":"tenant-42"},"spec":{"cron":"30 2 * * *"},"tz":"Europe/London","start_ms":1767225600000,"end_ms":1798761599999,"paused":false,"overlap":"skip_if_unfinished","catch_up":{"all":{"max":10,"window_ms":3600000}}}"#;
        let body: ScheduleBody = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&body).unwrap(), text);
    }

    #[test]
    fn integers_may_have_a_zero_fraction_and_instants_may_be_negative() {
        let body: ScheduleBody = serde_json::from_str(
            r#"{"task":{"queue":"q","handler_ref":"h","priority":5.0},"spec":{"every_ms":1000.0},"start_ms":-1000.0,"catch_up":{"all":{"max":2.0,"window_ms":6e4}}}"#,
        )
        .unwrap();
        assert_eq!(body.spec, Spec::EveryMs(1000));
        assert_eq!(body.start_ms, Some(-1000));
        assert_eq!(
            body.catch_up,
            Some(CatchUp::All {
                max: 2,
                window_ms: 60_000
            })
        );
    }

    #[test]
    fn unknown_fields_and_two_specs_do_not_parse() {
        for text in [
            r#"{"task":{"queue":"q","handler_ref":"h"},"spec":{"every_ms":1},"color":1}"#,
            r#"{"task":{"queue":"q","handler_ref":"h","delay_ms":1},"spec":{"every_ms":1}}"#,
            r#"{"task":{"queue":"q","handler_ref":"h"},"spec":{"every_ms":1,"cron":"* * * * *"}}"#,
            r#"{"task":{"queue":"q","handler_ref":"h"},"spec":{"every_ms":1.5}}"#,
            r#"{"task":{"queue":"q","handler_ref":"h"},"spec":{"every_ms":1},"start_ms":0.5}"#,
        ] {
            assert!(
                serde_json::from_str::<ScheduleBody>(text).is_err(),
                "{text}"
            );
        }
    }
}
