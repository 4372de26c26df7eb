//! `rdq schedule …`: periodic schedules (`docs/schedules.md`) on a server
//! or straight on a store: put one (from its JSON, or from flags for the
//! simple cases), list, show with its next due times, preview, pause,
//! resume, run once now, delete.

use std::path::PathBuf;

use base64::Engine as _;
use clap::{Args, Subcommand};
use rdq_api::schedules::{CatchUp, Overlap, ScheduleBody, ScheduleState, ScheduleTask, Spec};
use rdq_app::schedules::format_instant;
use serde_json::json;

use crate::CliError;
use crate::backend::{Backend, TargetArgs};
use crate::output;
use crate::output::{out, outln};

/// Due times `rdq schedule show` lists.
const SHOWN_NEXT: usize = 5;

/// Subcommands of `rdq schedule`.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Create or replace a schedule: from its JSON (`--file`, `-` for
    /// stdin), or from flags (`--cron` or `--every`, `--queue`, `--handler`).
    Put(Box<PutArgs>),
    /// Every schedule: spec, zone, paused, last fire, next run.
    List {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// One schedule, its firing state and its next 5 due times.
    Show {
        /// The schedule's name.
        name: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// The next due times of a schedule.
    Next {
        /// The schedule's name.
        name: String,
        /// How many, 1–100.
        #[arg(long, default_value_t = 5)]
        count: usize,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Pause a schedule: its due times are skipped until it is resumed.
    Pause {
        /// The schedule's name.
        name: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Resume a paused schedule from now (no catching up).
    Resume {
        /// The schedule's name.
        name: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Submit the schedule's task once now (headers rdq.schedule and rdq.schedule_manual).
    Run {
        /// The schedule's name.
        name: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Delete a schedule; the tasks it submitted stay.
    Delete {
        /// The schedule's name.
        name: String,
        #[command(flatten)]
        target: TargetArgs,
    },
}

/// `rdq schedule put`.
#[derive(Debug, Args)]
pub struct PutArgs {
    /// The schedule's name.
    name: String,
    /// The schedule's JSON (docs/schedules.md); `-` reads standard input.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["cron", "every", "queue", "handler"])]
    file: Option<PathBuf>,
    /// A cron pattern (5 fields, or 6 with seconds), read in --tz.
    #[arg(long, conflicts_with = "every")]
    cron: Option<String>,
    /// A fixed interval (`30s`, `15m`, `2h`, `1d`).
    #[arg(long, value_name = "DURATION")]
    every: Option<String>,
    /// The IANA zone of a cron pattern [default: UTC].
    #[arg(long)]
    tz: Option<String>,
    /// The queue each fire submits to.
    #[arg(long)]
    queue: Option<String>,
    /// The handler of each fire's task.
    #[arg(long = "handler", value_name = "HANDLER")]
    handler: Option<String>,
    /// The payload, as JSON text (content type application/json).
    #[arg(long, value_name = "JSON")]
    payload: Option<String>,
    /// A header `KEY=VALUE` of each task (repeatable).
    #[arg(long = "header", value_name = "KEY=VALUE")]
    headers: Vec<String>,
    /// Claim priority, 0–255.
    #[arg(long, default_value_t = 0)]
    priority: u8,
    /// allow, skip_if_pending, skip_if_running or skip_if_unfinished.
    #[arg(long)]
    overlap: Option<String>,
    /// skip or latest (all takes --file).
    #[arg(long)]
    catch_up: Option<String>,
    /// Store it paused.
    #[arg(long)]
    paused: bool,
    #[command(flatten)]
    target: TargetArgs,
}

/// Runs `rdq schedule …`.
pub async fn run(cmd: ScheduleCommand) -> Result<(), CliError> {
    match cmd {
        ScheduleCommand::Put(args) => put(*args).await,
        ScheduleCommand::List { target } => list(&target).await,
        ScheduleCommand::Show { name, target } => show(&name, &target).await,
        ScheduleCommand::Next {
            name,
            count,
            target,
        } => {
            let due = Backend::open(&target).await?.next_due(&name, count).await?;
            print_due(&name, &due, &target)
        }
        ScheduleCommand::Pause { name, target } => paused(&name, true, &target).await,
        ScheduleCommand::Resume { name, target } => paused(&name, false, &target).await,
        ScheduleCommand::Run { name, target } => {
            let env = Backend::open(&target).await?.run_schedule(&name).await?;
            if target.json {
                outln!("{}", env.encode_string())?;
            } else {
                outln!(
                    "submitted task {} to {} (manual run of {name})",
                    env.id,
                    env.queue
                )?;
            }
            Ok(())
        }
        ScheduleCommand::Delete { name, target } => {
            Backend::open(&target).await?.delete_schedule(&name).await?;
            if target.json {
                outln!("{}", json!({"name": name, "deleted": true}))?;
            } else {
                outln!("deleted schedule {name}")?;
            }
            Ok(())
        }
    }
}

async fn put(args: PutArgs) -> Result<(), CliError> {
    let body = match &args.file {
        Some(path) => {
            let bytes = crate::input::read_all(Some(path))?;
            serde_json::from_slice::<ScheduleBody>(&bytes).map_err(|e| {
                CliError::new(
                    "MALFORMED_REQUEST",
                    format!("{} is not a schedule: {e}", path.display()),
                )
            })?
        }
        None => body_from_flags(&args)?,
    };
    let (state, created) = Backend::open(&args.target)
        .await?
        .put_schedule(&args.name, body)
        .await?;
    if args.target.json {
        outln!("{}", serde_json::to_string(&state).unwrap_or_default())?;
    } else {
        let verb = if created { "created" } else { "replaced" };
        let next = state
            .next_due_ms
            .map_or_else(|| "none".to_owned(), format_instant);
        outln!("{verb} schedule {}; next run {next}", state.name)?;
    }
    Ok(())
}

fn missing(flag: &str) -> CliError {
    CliError::new(
        "INVALID_ARGUMENT",
        format!("{flag} is required without --file"),
    )
}

fn body_from_flags(args: &PutArgs) -> Result<ScheduleBody, CliError> {
    let spec = match (&args.cron, &args.every) {
        (Some(cron), None) => Spec::Cron(cron.clone()),
        (None, Some(every)) => Spec::EveryMs(crate::queue_cmd::parse_duration_ms(every)?),
        _ => return Err(missing("--cron or --every")),
    };
    let queue = args.queue.clone().ok_or_else(|| missing("--queue"))?;
    let handler_ref = args.handler.clone().ok_or_else(|| missing("--handler"))?;
    let (payload, payload_content_type) = match &args.payload {
        Some(text) => {
            serde_json::from_str::<serde_json::Value>(text).map_err(|e| {
                CliError::new("INVALID_ARGUMENT", format!("--payload is not JSON: {e}"))
            })?;
            (
                Some(base64::engine::general_purpose::STANDARD.encode(text.as_bytes())),
                Some("application/json".to_owned()),
            )
        }
        None => (None, None),
    };
    let overlap = args
        .overlap
        .as_deref()
        .map(|o| serde_json::from_value::<Overlap>(json!(o)))
        .transpose()
        .map_err(|_| {
            CliError::new(
                "INVALID_ARGUMENT",
                "--overlap is allow, skip_if_pending, skip_if_running or skip_if_unfinished",
            )
        })?;
    let catch_up = match args.catch_up.as_deref() {
        None => None,
        Some("skip") => Some(CatchUp::Skip),
        Some("latest") => Some(CatchUp::Latest),
        Some(_) => {
            return Err(CliError::new(
                "INVALID_ARGUMENT",
                "--catch-up is skip or latest; write {\"all\": {…}} in a --file",
            ));
        }
    };
    Ok(ScheduleBody {
        name: None,
        task: ScheduleTask {
            queue,
            handler_ref,
            payload,
            payload_content_type,
            headers: crate::envelope_cmd::parse_headers(&args.headers)?,
            priority: args.priority,
            flow_key: None,
        },
        spec,
        tz: args.tz.clone(),
        start_ms: None,
        end_ms: None,
        paused: args.paused.then_some(true),
        overlap,
        catch_up,
    })
}

fn spec_text(state: &ScheduleState) -> String {
    match &state.schedule.spec {
        Spec::Cron(pattern) => pattern.clone(),
        Spec::EveryMs(ms) => format!("every {ms}ms"),
    }
}

fn instant(ms: Option<i64>) -> String {
    ms.map_or_else(|| "—".to_owned(), format_instant)
}

async fn list(target: &TargetArgs) -> Result<(), CliError> {
    let schedules = Backend::open(target).await?.schedules().await?;
    if target.json {
        outln!("{}", json!({"schedules": schedules}))?;
        return Ok(());
    }
    if schedules.is_empty() {
        outln!("no schedules")?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = schedules
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                spec_text(s),
                s.schedule.tz.clone().unwrap_or_default(),
                if s.schedule.paused == Some(true) {
                    "yes".to_owned()
                } else {
                    "no".to_owned()
                },
                instant(s.last_fire_at_ms),
                instant(s.next_due_ms),
            ]
        })
        .collect();
    out!(
        "{}",
        output::table(
            &["NAME", "SPEC", "TZ", "PAUSED", "LAST FIRE", "NEXT RUN"],
            &rows
        )
    )?;
    Ok(())
}

async fn show(name: &str, target: &TargetArgs) -> Result<(), CliError> {
    let backend = Backend::open(target).await?;
    let state = backend.schedule(name).await?;
    let due = backend.next_due(name, SHOWN_NEXT).await?;
    if target.json {
        outln!("{}", json!({"schedule": state, "next_due_ms": due}))?;
        return Ok(());
    }
    let s = &state.schedule;
    let skips = if state.skips.is_empty() {
        "none".to_owned()
    } else {
        state
            .skips
            .iter()
            .map(|(reason, n)| format!("{reason} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let lines = [
        ("name", state.name.clone()),
        ("spec", spec_text(&state)),
        ("tz", s.tz.clone().unwrap_or_default()),
        ("queue", s.task.queue.clone()),
        ("handler", s.task.handler_ref.clone()),
        ("paused", s.paused.unwrap_or(false).to_string()),
        (
            "overlap",
            serde_json::to_value(s.overlap).map_or_else(|_| String::new(), |v| plain(&v)),
        ),
        (
            "catch_up",
            serde_json::to_value(s.catch_up).map_or_else(|_| String::new(), |v| plain(&v)),
        ),
        ("start", instant(s.start_ms)),
        ("end", instant(s.end_ms)),
        ("owner", state.owner.clone()),
        ("fires", state.fires.to_string()),
        ("skips", skips),
        ("last due", instant(state.last_due_ms)),
        ("last fire", instant(state.last_fire_at_ms)),
        (
            "last task",
            state.last_fired_task.clone().unwrap_or_else(|| "—".into()),
        ),
    ];
    for (label, value) in lines {
        outln!("{label:<10} {value}")?;
    }
    outln!("next due:")?;
    for ms in &due {
        outln!("  {}", format_instant(*ms))?;
    }
    Ok(())
}

/// A JSON value for people: a string without its quotes.
fn plain(v: &serde_json::Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

async fn paused(name: &str, pause: bool, target: &TargetArgs) -> Result<(), CliError> {
    let state = Backend::open(target)
        .await?
        .set_schedule_paused(name, pause)
        .await?;
    if target.json {
        outln!("{}", serde_json::to_string(&state).unwrap_or_default())?;
    } else if pause {
        outln!("paused schedule {name}")?;
    } else {
        outln!(
            "resumed schedule {name}; next run {}",
            instant(state.next_due_ms)
        )?;
    }
    Ok(())
}

fn print_due(name: &str, due: &[i64], target: &TargetArgs) -> Result<(), CliError> {
    if target.json {
        let text: Vec<String> = due.iter().map(|&ms| format_instant(ms)).collect();
        outln!("{}", json!({"name": name, "due_ms": due, "due": text}))?;
        return Ok(());
    }
    if due.is_empty() {
        outln!("{name} is not due again")?;
    }
    for ms in due {
        outln!("{}", format_instant(*ms))?;
    }
    Ok(())
}
