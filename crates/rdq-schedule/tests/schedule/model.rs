//! The JSON form of a schedule.

use rdq_schedule::{CatchUp, Overlap, Schedule, Spec};

fn parse(json: &str) -> Result<Schedule, serde_json::Error> {
    serde_json::from_str(json)
}

#[test]
fn a_minimal_schedule_takes_the_defaults() {
    let s = parse(
        r#"{"name":"n","task":{"queue":"q","handler_ref":"h"},"spec":{"cron":"*/5 * * * *"}}"#,
    )
    .unwrap();
    assert_eq!(s.spec, Spec::Cron("*/5 * * * *".to_owned()));
    assert_eq!(s.tz, "UTC");
    assert_eq!(s.overlap, Overlap::Allow);
    assert_eq!(s.catch_up, CatchUp::Latest);
    assert!(!s.paused);
    assert_eq!(s.task.payload_content_type, "application/octet-stream");
    assert!(s.task.payload.is_empty());
}

#[test]
fn every_field_reads_naturally_and_round_trips() {
    let json = r#"{"name":"n","task":{"queue":"q","handler_ref":"h","payload":"e30=","payload_content_type":"application/json","headers":{"team":"data"},"priority":3,"flow_key":"tenant-1"},"spec":{"every_ms":60000},"tz":"Europe/London","start_ms":1000,"end_ms":2000,"paused":true,"overlap":"skip_if_unfinished","catch_up":{"all":{"max":10,"window_ms":3600000}}}"#;
    let s = parse(json).unwrap();
    assert_eq!(s.spec, Spec::EveryMs(60_000));
    assert_eq!(s.task.payload, b"{}");
    assert_eq!(s.overlap, Overlap::SkipIfUnfinished);
    assert_eq!(
        s.catch_up,
        CatchUp::All {
            max: 10,
            window_ms: 3_600_000
        }
    );
    assert_eq!(serde_json::to_string(&s).unwrap(), json);
}

#[test]
fn unit_policies_are_plain_strings() {
    assert_eq!(serde_json::to_string(&CatchUp::Skip).unwrap(), r#""skip""#);
    assert_eq!(
        serde_json::to_string(&Overlap::SkipIfPending).unwrap(),
        r#""skip_if_pending""#
    );
}

#[test]
fn unknown_fields_are_refused_at_every_level() {
    let base = |extra_top: &str, extra_task: &str, catch_up: &str| {
        format!(
            r#"{{"name":"n","task":{{"queue":"q","handler_ref":"h"{extra_task}}},"spec":{{"cron":"* * * * *"}},"catch_up":{catch_up}{extra_top}}}"#
        )
    };
    assert!(parse(&base("", "", r#""skip""#)).is_ok());
    assert!(parse(&base(r#","owner":"api""#, "", r#""skip""#)).is_err());
    assert!(parse(&base("", r#","delay_ms":5"#, r#""skip""#)).is_err());
    assert!(parse(&base("", "", r#"{"all":{"max":1,"window_ms":1,"x":1}}"#)).is_err());
    assert!(parse(&base("", "", r#""sometimes""#)).is_err());
}

#[test]
fn a_spec_is_exactly_one_of_cron_and_every_ms() {
    let with_spec = |spec: &str| {
        parse(&format!(
            r#"{{"name":"n","task":{{"queue":"q","handler_ref":"h"}},"spec":{spec}}}"#
        ))
    };
    assert!(with_spec(r#"{"cron":"* * * * *","every_ms":5}"#).is_err());
    assert!(with_spec(r#"{"every":5}"#).is_err());
    assert!(with_spec(r#"{}"#).is_err());
    assert!(with_spec(r#"{"every_ms":-5}"#).is_err());
}

#[test]
fn a_payload_that_is_not_base64_is_refused() {
    let e = parse(
        r#"{"name":"n","task":{"queue":"q","handler_ref":"h","payload":"not base64!"},"spec":{"every_ms":1}}"#,
    )
    .unwrap_err();
    assert!(e.to_string().contains("base64"), "{e}");
}
