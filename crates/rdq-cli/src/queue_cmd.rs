//! `rdq queue list`, `rdq queue config QUEUE [--set key=value…]`,
//! `rdq queue flow QUEUE` and `rdq queue throttle QUEUE [--key K]
//! --for 30s|--until TIME`.
//!
//! `--set` takes a dotted path into the policy (`max_attempts=5`,
//! `backoff.kind=none`, `callback.url=http://…`, `callback=null`). The value
//! is read as JSON when it parses as JSON, as a string otherwise. A dotted
//! path changes one field of a nested object and keeps its other fields.

use clap::Subcommand;
use serde_json::{Map, Value};

use crate::CliError;
use crate::backend::{Backend, TargetArgs};
use crate::output;
use crate::output::{out, outln};

/// Subcommands of `rdq queue`.
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Every queue with its tasks per status, or only the named queues.
    /// On RabbitMQ, name them: a broker reports the depths of its queues
    /// (ready and dead messages), not tasks per status.
    List {
        /// Only these queues.
        queues: Vec<String>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Show a queue's live policy, or change it with `--set`.
    Config {
        /// The queue.
        queue: String,
        /// Change a field: `KEY=VALUE`, KEY a dotted path (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Show a queue's flow limits and how they stand now: tokens left,
    /// throttles, the busiest flow keys, claims the limits cut short.
    Flow {
        /// The queue.
        queue: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Throttle a flow key, or the whole queue, for a while: claims pass
    /// over its tasks until then, on every node.
    Throttle {
        /// The queue.
        queue: String,
        /// The flow key to throttle (default: the whole queue).
        #[arg(long, value_name = "KEY")]
        key: Option<String>,
        /// For how long: `500ms`, `30s`, `5m`, `2h`, `1d` (at most 7 days).
        #[arg(
            long = "for",
            value_name = "DURATION",
            required_unless_present = "until",
            conflicts_with = "until"
        )]
        for_: Option<String>,
        /// Until this RFC 3339 time (`2026-07-20T14:00:00Z`).
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
        #[command(flatten)]
        target: TargetArgs,
    },
}

/// Runs `rdq queue …`.
pub async fn run(cmd: QueueCommand) -> Result<(), CliError> {
    match cmd {
        QueueCommand::List { queues, target } => list(&queues, &target).await,
        QueueCommand::Config { queue, set, target } => config(&queue, &set, &target).await,
        QueueCommand::Flow { queue, target } => {
            let flow = Backend::open(&target).await?.flow(&queue).await?;
            print_flow(&flow, target.json)
        }
        QueueCommand::Throttle {
            queue,
            key,
            for_,
            until,
            target,
        } => {
            let for_ms = for_.as_deref().map(parse_duration_ms).transpose()?;
            let flow = Backend::open(&target)
                .await?
                .throttle(&queue, key, for_ms, until)
                .await?;
            print_flow(&flow, target.json)
        }
    }
}

/// Milliseconds in a duration written `500ms`, `30s`, `5m`, `2h` or `1d`
/// (a bare number is milliseconds).
pub fn parse_duration_ms(text: &str) -> Result<u64, CliError> {
    let bad = || {
        CliError::new(
            "INVALID_ARGUMENT",
            format!("--for {text:?}: expected a duration such as 500ms, 30s, 5m, 2h or 1d"),
        )
    };
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let scale: u64 = match unit {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    n.checked_mul(scale).ok_or_else(bad)
}

fn print_flow(flow: &rdq_api::flow::QueueFlow, json: bool) -> Result<(), CliError> {
    if json {
        let text =
            serde_json::to_string(flow).map_err(|e| CliError::new("INTERNAL", e.to_string()))?;
        outln!("{text}")?;
        return Ok(());
    }
    let limits = if flow.limits.as_object().is_none_or(Map::is_empty) {
        "none".to_owned()
    } else {
        flow.limits.to_string()
    };
    outln!("queue:            {}", flow.queue)?;
    outln!("limits:           {limits}")?;
    if let Some(tokens) = flow.tokens {
        outln!("tokens:           {tokens:.1}")?;
    }
    outln!(
        "throttled until:  {}",
        flow.blocked_until.as_deref().unwrap_or("-")
    )?;
    outln!("in flight:        {}", flow.in_flight)?;
    outln!("throttled claims: {}", flow.throttled_claims)?;
    if flow.keys.is_empty() {
        return Ok(());
    }
    let rows: Vec<Vec<String>> = flow
        .keys
        .iter()
        .map(|k| {
            vec![
                k.key.clone(),
                k.in_flight.to_string(),
                k.tokens
                    .map_or_else(|| "-".to_owned(), |t| format!("{t:.1}")),
                k.blocked_until.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    outln!("")?;
    out!(
        "{}",
        output::table(
            &["FLOW KEY", "IN_FLIGHT", "TOKENS", "THROTTLED UNTIL"],
            &rows
        )
    )?;
    Ok(())
}

async fn list(names: &[String], target: &TargetArgs) -> Result<(), CliError> {
    let queues = Backend::open(target).await?.queues(names).await?;
    if target.json {
        outln!("{}", serde_json::json!({ "queues": queues }))?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = queues
        .iter()
        .map(|q| {
            vec![
                q.queue.clone(),
                q.pending.to_string(),
                q.in_flight
                    .map_or_else(|| "-".to_owned(), |n| n.to_string()),
                q.succeeded
                    .map_or_else(|| "-".to_owned(), |n| n.to_string()),
                q.dead.to_string(),
            ]
        })
        .collect();
    out!(
        "{}",
        output::table(
            &["QUEUE", "PENDING", "IN_FLIGHT", "SUCCEEDED", "DEAD"],
            &rows
        )
    )?;
    Ok(())
}

async fn config(queue: &str, set: &[String], target: &TargetArgs) -> Result<(), CliError> {
    let backend = Backend::open(target).await?;
    let policy = if set.is_empty() {
        backend.config(queue).await?.ok_or_else(|| {
            CliError::new(
                "QUEUE_NOT_FOUND",
                format!("no queue {queue:?}: it has no tasks and no stored policy"),
            )
        })?
    } else {
        let current = backend.config(queue).await?.unwrap_or(Value::Null);
        let patch = build_patch(&current, set)?;
        backend.set_config(queue, patch).await?
    };
    if target.json {
        outln!("{policy}")?;
    } else {
        let pretty = serde_json::to_string_pretty(&policy)
            .map_err(|e| CliError::new("INTERNAL", e.to_string()))?;
        outln!("{pretty}")?;
    }
    Ok(())
}

/// The partial policy document for `sets`, nested objects taken from
/// `current` so a dotted path changes one field only.
pub fn build_patch(current: &Value, sets: &[String]) -> Result<Value, CliError> {
    let mut patch = Map::new();
    for s in sets {
        let (path, raw) = s.split_once('=').ok_or_else(|| {
            CliError::new(
                "INVALID_ARGUMENT",
                format!("--set {s:?}: expected KEY=VALUE"),
            )
        })?;
        let value: Value =
            serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()));
        let keys: Vec<&str> = path.split('.').collect();
        if keys.iter().any(|k| k.is_empty()) {
            return Err(CliError::new(
                "INVALID_ARGUMENT",
                format!("--set {s:?}: empty key in {path:?}"),
            ));
        }
        let top = keys[0];
        if keys.len() == 1 {
            patch.insert(top.to_owned(), value);
            continue;
        }
        let entry = patch
            .entry(top.to_owned())
            .or_insert_with(|| match current.get(top) {
                Some(Value::Object(o)) => Value::Object(o.clone()),
                _ => Value::Object(Map::new()),
            });
        let mut node = entry;
        for key in &keys[1..keys.len() - 1] {
            if !node.is_object() {
                *node = Value::Object(Map::new());
            }
            node = node
                .as_object_mut()
                .map(|o| {
                    o.entry((*key).to_owned())
                        .or_insert_with(|| Value::Object(Map::new()))
                })
                .ok_or_else(|| CliError::new("INVALID_ARGUMENT", format!("--set {s:?}")))?;
        }
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        if let (Some(obj), Some(last)) = (node.as_object_mut(), keys.last()) {
            obj.insert((*last).to_owned(), value);
        }
    }
    Ok(Value::Object(patch))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_take_a_unit_and_a_bare_number_is_milliseconds() {
        for (text, ms) in [
            ("250", 250),
            ("500ms", 500),
            ("30s", 30_000),
            ("5m", 300_000),
            ("2h", 7_200_000),
            ("1d", 86_400_000),
        ] {
            assert_eq!(parse_duration_ms(text).unwrap(), ms, "{text}");
        }
        for bad in ["", "s", "1.5s", "10x", "-1s", "99999999999999999999d"] {
            assert_eq!(
                parse_duration_ms(bad).unwrap_err().code,
                "INVALID_ARGUMENT",
                "{bad}"
            );
        }
    }

    #[test]
    fn values_are_json_when_they_parse_and_strings_otherwise() {
        let patch = build_patch(
            &Value::Null,
            &[
                "max_attempts=5".into(),
                "paused=true".into(),
                "callback=null".into(),
                "x=hello".into(),
            ],
        )
        .unwrap();
        assert_eq!(
            patch,
            json!({"max_attempts": 5, "paused": true, "callback": null, "x": "hello"})
        );
    }

    #[test]
    fn a_dotted_path_keeps_the_other_fields_of_the_object() {
        let current = json!({"callback": {"url": "http://127.0.0.1:1/a", "timeout_ms": 100}});
        let patch = build_patch(
            &current,
            &[
                "callback.timeout_ms=500".into(),
                "callback.status_map.404=SUCCESS".into(),
            ],
        )
        .unwrap();
        assert_eq!(
            patch,
            json!({"callback": {"url": "http://127.0.0.1:1/a", "timeout_ms": 500, "status_map": {"404": "SUCCESS"}}})
        );
        assert!(build_patch(&current, &["nothing".into()]).is_err());
        assert!(build_patch(&current, &["a..b=1".into()]).is_err());
    }
}
