//! `rdq task show ID`: one task, readable, with its attempt history;
//! `rdq task cancel QUEUE …`: cancel PENDING tasks by id or filter.

use clap::Subcommand;
use rdq_api::tasks::{CancelBody, TaskPageQuery};
use rdq_envelope::Envelope;
use serde_json::json;

use crate::CliError;
use crate::backend::{Backend, TargetArgs};
use crate::output;
use crate::output::{out, outln};

/// Subcommands of `rdq task`.
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Show a task: its fields and attempt history (`--json`: the envelope).
    Show {
        /// The task id.
        id: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// A page of a queue's tasks, newest first, by status, handler and headers.
    List {
        /// The queue.
        queue: String,
        /// Only tasks in this status: PENDING, IN_FLIGHT, SUCCEEDED or DEAD.
        #[arg(long)]
        status: Option<String>,
        /// Only tasks of this handler.
        #[arg(long = "handler", value_name = "HANDLER")]
        handler_ref: Option<String>,
        /// Only tasks with this header `KEY=VALUE`.
        #[arg(long = "header", value_name = "KEY=VALUE")]
        header: Option<String>,
        /// Page size, 1–1000.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Continue after this cursor (printed at the end of a page).
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Cancel PENDING tasks of a queue: each becomes DEAD with reason
    /// CANCELLED (its history kept; `rdq dlq redrive` brings it back). The
    /// filters combine; none cancels every PENDING task, so try --dry-run.
    Cancel {
        /// The queue.
        queue: String,
        /// Only this task (repeatable).
        #[arg(long = "id", value_name = "ID")]
        ids: Vec<String>,
        /// Only tasks of this handler.
        #[arg(long = "handler", value_name = "HANDLER")]
        handler_ref: Option<String>,
        /// Only tasks with this header `KEY=VALUE` (repeatable; all must match).
        #[arg(long = "header", value_name = "KEY=VALUE")]
        headers: Vec<String>,
        /// Only tasks submitted longer ago than this (`90s`, `15m`, `2h`, `1d`).
        #[arg(long, value_name = "DURATION")]
        older_than: Option<String>,
        /// At most this many, oldest first.
        #[arg(long)]
        limit: Option<usize>,
        /// Why, recorded in each task's dead reason.
        #[arg(long)]
        message: Option<String>,
        /// List what would be cancelled, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Leave running tasks alone: cancel only PENDING ones.
        #[arg(long)]
        pending_only: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
}

/// Runs `rdq task …`.
pub async fn run(cmd: TaskCommand) -> Result<(), CliError> {
    match cmd {
        TaskCommand::Show { id, target } => show(&id, &target).await,
        TaskCommand::List {
            queue,
            status,
            handler_ref,
            header,
            limit,
            cursor,
            target,
        } => {
            let query = TaskPageQuery {
                status,
                handler_ref,
                header,
                limit: Some(limit),
                cursor,
            };
            list(&queue, query, &target).await
        }
        TaskCommand::Cancel {
            queue,
            ids,
            handler_ref,
            headers,
            older_than,
            limit,
            message,
            dry_run,
            pending_only,
            target,
        } => {
            let headers = crate::envelope_cmd::parse_headers(&headers)?;
            let body = CancelBody {
                ids: (!ids.is_empty()).then_some(ids),
                handler_ref,
                headers: (!headers.is_empty()).then_some(headers),
                older_than_ms: older_than
                    .as_deref()
                    .map(crate::queue_cmd::parse_duration_ms)
                    .transpose()?,
                limit,
                dry_run,
                message,
                pending_only,
            };
            cancel(&queue, body, &target).await
        }
    }
}

async fn list(queue: &str, query: TaskPageQuery, target: &TargetArgs) -> Result<(), CliError> {
    let (items, next) = Backend::open(target).await?.tasks(queue, query).await?;
    if target.json {
        let items: Vec<serde_json::Value> = items
            .iter()
            .filter_map(|e| serde_json::from_slice(&e.encode()).ok())
            .collect();
        outln!("{}", json!({"items": items, "next_cursor": next}))?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|e| {
            vec![
                e.id.to_string(),
                e.status.as_str().to_owned(),
                e.handler_ref.clone(),
                e.attempt_count.to_string(),
                e.next_attempt_at
                    .map_or_else(|| "—".to_owned(), |t| t.to_string()),
            ]
        })
        .collect();
    out!(
        "{}",
        output::table(&["ID", "STATUS", "HANDLER", "ATTEMPTS", "DUE"], &rows)
    )?;
    match next {
        Some(c) => outln!("more: rdq task list {queue} … --cursor {c}")?,
        None if items.is_empty() => outln!("no task of {queue} matches")?,
        None => {}
    }
    Ok(())
}

async fn cancel(queue: &str, body: CancelBody, target: &TargetArgs) -> Result<(), CliError> {
    let dry_run = body.dry_run;
    let result = Backend::open(target).await?.cancel(queue, body).await?;
    if target.json {
        outln!(
            "{}",
            json!({"queue": result.queue, "dry_run": dry_run, "count": result.count, "ids": result.ids, "running": result.running})
        )?;
        return Ok(());
    }
    let running = result.running.len();
    let pending = result.count.saturating_sub(running);
    if dry_run {
        for id in &result.ids {
            let mark = if result.running.contains(id) {
                "  (running)"
            } else {
                ""
            };
            outln!("{id}{mark}")?;
        }
        outln!(
            "{pending} PENDING task(s) of {queue} would be cancelled and {running} running task(s) asked to stop (dry run: nothing changed)"
        )?;
    } else if running == 0 {
        outln!("cancelled {pending} PENDING task(s) of {queue}")?;
    } else {
        outln!(
            "cancelled {pending} PENDING task(s) of {queue}; asked {running} running task(s) to stop"
        )?;
    }
    Ok(())
}

/// Prints one task for people, or its canonical JSON with `--json`.
pub async fn show(id: &str, target: &TargetArgs) -> Result<(), CliError> {
    let env = Backend::open(target).await?.task(id).await?;
    print(&env, target)
}

/// Prints `env` for people, or its canonical JSON with `--json`.
pub fn print(env: &Envelope, target: &TargetArgs) -> Result<(), CliError> {
    if target.json {
        outln!("{}", env.encode_string())?;
    } else {
        out!("{}", output::envelope(env))?;
    }
    Ok(())
}
