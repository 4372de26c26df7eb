//! `rdq dlq list|show|export|import|redrive|purge`: the dead-letter queue.
//!
//! Export, import and redrive show progress bars on stderr. Redrive goes in
//! batches of [`REDRIVE_BATCH`] so the bar moves and a large DLQ is not one
//! huge transaction; it never redrives more than the DLQ held when it
//! started, so tasks that die again meanwhile are not redriven twice.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::json;

use crate::CliError;
use crate::backend::{Backend, DeadFilter, ImportRefusal, TargetArgs};
use crate::input::read_all;
use crate::output;
use crate::output::{out, outln};

/// Dead tasks redriven per call.
pub const REDRIVE_BATCH: usize = 500;

/// Subcommands of `rdq dlq`.
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// A page of a queue's dead tasks, newest first.
    List {
        /// The queue.
        queue: String,
        #[command(flatten)]
        filter: FilterArgs,
        /// Page size, 1–1000.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Continue after this cursor (printed at the end of a page).
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// One dead task with its attempt history (`--json`: the envelope).
    Show {
        /// The task id.
        id: String,
        /// The task's queue: the DLQ is searched instead of looking the id
        /// up, which is what a store without lookup by id (RabbitMQ) needs.
        #[arg(long, value_name = "QUEUE")]
        queue: Option<String>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Write a queue's dead tasks as JSONL (one canonical envelope per line).
    Export {
        /// The queue.
        queue: String,
        /// Write to this file instead of standard output.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Import a JSONL export back into a DLQ: all lines or none.
    Import {
        /// The JSONL file; `-` reads standard input.
        file: PathBuf,
        /// The queue (default: the queue of the file's first envelope).
        #[arg(long)]
        queue: Option<String>,
        /// Check every line, import nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Send dead tasks back to PENDING (attempts reset, history kept).
    Redrive {
        /// The queue.
        queue: String,
        /// Only this task (repeatable).
        #[arg(long = "id", value_name = "ID")]
        ids: Vec<String>,
        #[command(flatten)]
        filter: FilterArgs,
        /// At most this many.
        #[arg(long)]
        limit: Option<usize>,
        /// List what would be redriven, change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// How many dead tasks died for each reason, most first.
    Reasons {
        /// The queue.
        queue: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Remove every dead task of a queue.
    Purge {
        /// The queue.
        queue: String,
        /// Count what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
}

/// Which dead tasks a listing, an export or a redrive takes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct FilterArgs {
    /// Only tasks whose latest error type matches this glob (`http.*`).
    #[arg(long, value_name = "GLOB")]
    error_type: Option<String>,
    /// Only tasks that died for this reason: ATTEMPTS_EXHAUSTED,
    /// PERMANENT_FAILURE, LEASE_EXPIRIES_EXHAUSTED, CANCELLED,
    /// HANDLER_VERSION_MISMATCH, COUNTERS_EXHAUSTED or UNRECORDED.
    #[arg(long, value_name = "REASON")]
    reason: Option<String>,
}

impl FilterArgs {
    fn into_filter(self) -> DeadFilter {
        DeadFilter {
            error_type: self.error_type,
            reason: self.reason,
        }
    }
}

/// Runs `rdq dlq …`.
pub async fn run(cmd: DlqCommand) -> Result<(), CliError> {
    match cmd {
        DlqCommand::List {
            queue,
            filter,
            limit,
            cursor,
            target,
        } => {
            list(
                &queue,
                &filter.into_filter(),
                limit,
                cursor.as_deref(),
                &target,
            )
            .await
        }
        DlqCommand::Show {
            id,
            queue: None,
            target,
        } => crate::task_cmd::show(&id, &target).await.map_err(|e| {
            e.hint_if_unsupported(
                "pass --queue QUEUE to search that queue's dead-letter queue instead",
            )
        }),
        DlqCommand::Show {
            id,
            queue: Some(queue),
            target,
        } => show_in(&queue, &id, &target).await,
        DlqCommand::Export {
            queue,
            output,
            filter,
            target,
        } => export(&queue, output, &filter.into_filter(), &target).await,
        DlqCommand::Import {
            file,
            queue,
            dry_run,
            target,
        } => import(&file, queue, dry_run, &target).await,
        DlqCommand::Redrive {
            queue,
            ids,
            filter,
            limit,
            dry_run,
            target,
        } => redrive(&queue, ids, filter.into_filter(), limit, dry_run, &target).await,
        DlqCommand::Reasons { queue, target } => reasons(&queue, &target).await,
        DlqCommand::Purge {
            queue,
            dry_run,
            target,
        } => purge(&queue, dry_run, &target).await,
    }
}

/// `dlq show ID --queue Q`: searches the queue's DLQ for the task.
async fn show_in(queue: &str, id: &str, target: &TargetArgs) -> Result<(), CliError> {
    let env = Backend::open(target).await?.dead_task(queue, id).await?;
    crate::task_cmd::print(&env, target)
}

/// `dlq reasons Q`: the DLQ counted by dead reason.
async fn reasons(queue: &str, target: &TargetArgs) -> Result<(), CliError> {
    let counts = Backend::open(target).await?.dead_reasons(queue).await?;
    if target.json {
        let reasons: Vec<serde_json::Value> = counts
            .iter()
            .map(|c| json!({"reason": c.reason, "count": c.count}))
            .collect();
        outln!("{}", json!({"queue": queue, "reasons": reasons}))?;
        return Ok(());
    }
    if counts.is_empty() {
        outln!("the DLQ of {queue} is empty")?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = counts
        .iter()
        .map(|c| vec![c.reason.clone(), c.count.to_string()])
        .collect();
    out!("{}", output::table(&["REASON", "COUNT"], &rows))?;
    Ok(())
}

async fn list(
    queue: &str,
    filter: &DeadFilter,
    limit: usize,
    cursor: Option<&str>,
    target: &TargetArgs,
) -> Result<(), CliError> {
    let backend = Backend::open(target).await?;
    let (items, next) = backend.dead_page(queue, filter, cursor, limit).await?;
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
            let last = e.attempts.last();
            vec![
                e.id.to_string(),
                last.and_then(|a| a.finished_at)
                    .map_or_else(|| "—".to_owned(), |t| t.to_string()),
                e.attempt_count.to_string(),
                e.redrive_count.to_string(),
                rdq_engine::store::reason_code(e).to_owned(),
                e.last_error()
                    .map_or_else(|| "—".to_owned(), |err| err.error_type.clone()),
                e.last_error()
                    .map_or_else(String::new, |err| output::one_line(&err.message, 60)),
            ]
        })
        .collect();
    out!(
        "{}",
        output::table(
            &[
                "ID",
                "DIED",
                "ATTEMPTS",
                "REDRIVES",
                "REASON",
                "ERROR TYPE",
                "MESSAGE"
            ],
            &rows
        )
    )?;
    match next {
        Some(c) => outln!("more: rdq dlq list {queue} --cursor {c}")?,
        None if items.is_empty() => outln!("the DLQ of {queue} is empty")?,
        None => {}
    }
    Ok(())
}

async fn dead_count(backend: &dyn crate::backend::Operations, queue: &str) -> u64 {
    backend
        .queues(&[queue.to_owned()])
        .await
        .ok()
        .and_then(|qs| qs.into_iter().next())
        .map_or(0, |q| q.dead)
}

async fn export(
    queue: &str,
    output_file: Option<PathBuf>,
    filter: &DeadFilter,
    target: &TargetArgs,
) -> Result<(), CliError> {
    let backend = Backend::open(target).await?;
    let total = if filter.error_type.is_none() && filter.reason.is_none() {
        dead_count(&*backend, queue).await
    } else {
        0
    };
    let bar = output::progress("export", total, target.json);
    let mut sink: Box<dyn Write> = match &output_file {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|e| {
                CliError::new("IO_ERROR", format!("cannot create {}: {e}", path.display()))
            })?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let written = backend
        .export(queue, filter, &mut *sink, &|n| bar.set_position(n))
        .await?;
    bar.finish_and_clear();
    drop(sink);
    if let Some(path) = output_file {
        if target.json {
            outln!(
                "{}",
                json!({"queue": queue, "exported": written, "file": path})
            )?;
        } else {
            eprintln!(
                "exported {written} dead task(s) of {queue} to {}",
                path.display()
            );
        }
    }
    Ok(())
}

async fn import(
    file: &Path,
    queue: Option<String>,
    dry_run: bool,
    target: &TargetArgs,
) -> Result<(), CliError> {
    let backend = Backend::open(target).await?;
    let bytes = read_all(Some(file))?;
    let queue = match queue {
        Some(q) => q,
        None => first_queue(&bytes).ok_or_else(|| {
            CliError::new(
                "INVALID_ARGUMENT",
                "cannot tell the queue from the file's first line; give --queue",
            )
        })?,
    };
    let lines = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .count() as u64;
    let bar = output::progress(if dry_run { "check" } else { "import" }, lines, target.json);
    let result = backend
        .import(&queue, bytes, dry_run, &|n| bar.set_position(n))
        .await;
    bar.finish_and_clear();
    match result {
        Ok(n) => {
            if target.json {
                outln!(
                    "{}",
                    json!({"queue": queue, "dry_run": dry_run, "imported": if dry_run { 0 } else { n }, "checked": n})
                )?;
            } else if dry_run {
                outln!(
                    "{n} envelope(s) can be imported into the DLQ of {queue}; nothing was imported (dry run)"
                )?;
            } else {
                outln!("imported {n} envelope(s) into the DLQ of {queue}")?;
            }
            Ok(())
        }
        Err(ImportRefusal::Lines(errors, total)) => {
            for e in &errors {
                eprintln!("line {}: {}: {}", e.line, e.code, e.message);
            }
            if total > errors.len() {
                eprintln!("… and {} more", total - errors.len());
            }
            Err(CliError::new(
                "INVALID_IMPORT",
                format!(
                    "{total} line(s) of {} cannot be imported; nothing was imported",
                    file.display()
                ),
            ))
        }
        Err(ImportRefusal::Other(e)) => Err(e),
    }
}

fn first_queue(bytes: &[u8]) -> Option<String> {
    let line = bytes
        .split(|&b| b == b'\n')
        .find(|l| !l.iter().all(u8::is_ascii_whitespace))?;
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    v.get("queue")?.as_str().map(str::to_owned)
}

async fn redrive(
    queue: &str,
    ids: Vec<String>,
    filter: DeadFilter,
    limit: Option<usize>,
    dry_run: bool,
    target: &TargetArgs,
) -> Result<(), CliError> {
    let backend = Backend::open(target).await?;
    let ids = (!ids.is_empty()).then_some(ids);
    let mut redriven: Vec<String> = Vec::new();
    if dry_run {
        redriven = backend
            .redrive(queue, ids, filter.clone(), limit, true)
            .await?;
    } else {
        let dead = dead_count(&*backend, queue).await;
        // Never more than the DLQ held when we started, nor than --limit / --id.
        let budget = match (&ids, limit) {
            (Some(ids), Some(l)) => ids.len().min(l) as u64,
            (Some(ids), None) => ids.len() as u64,
            (None, Some(l)) => (l as u64).min(dead),
            (None, None) => dead,
        };
        let bar = output::progress("redrive", budget, target.json);
        match ids {
            Some(ids) => {
                let wanted = ids.into_iter().take(budget as usize).collect::<Vec<_>>();
                for chunk in wanted.chunks(REDRIVE_BATCH) {
                    let done = backend
                        .redrive(queue, Some(chunk.to_vec()), filter.clone(), None, false)
                        .await?;
                    redriven.extend(done);
                    bar.set_position(redriven.len() as u64);
                }
            }
            None => {
                while (redriven.len() as u64) < budget {
                    let room = (budget - redriven.len() as u64).min(REDRIVE_BATCH as u64) as usize;
                    let done = backend
                        .redrive(queue, None, filter.clone(), Some(room), false)
                        .await?;
                    let n = done.len();
                    redriven.extend(done);
                    bar.set_position(redriven.len() as u64);
                    if n < room {
                        break;
                    }
                }
            }
        }
        bar.finish_and_clear();
    }
    if target.json {
        outln!(
            "{}",
            json!({"queue": queue, "dry_run": dry_run, "count": redriven.len(), "ids": redriven})
        )?;
    } else if dry_run {
        for id in &redriven {
            outln!("{id}")?;
        }
        outln!(
            "{} dead task(s) of {queue} would be redriven (dry run: nothing changed)",
            redriven.len()
        )?;
    } else {
        outln!("redrove {} dead task(s) of {queue}", redriven.len())?;
    }
    Ok(())
}

async fn purge(queue: &str, dry_run: bool, target: &TargetArgs) -> Result<(), CliError> {
    let n = Backend::open(target).await?.purge(queue, dry_run).await?;
    if target.json {
        outln!(
            "{}",
            json!({"queue": queue, "dry_run": dry_run, "purged": n})
        )?;
    } else if dry_run {
        outln!("{n} dead task(s) of {queue} would be purged (dry run: nothing changed)")?;
    } else {
        outln!("purged {n} dead task(s) of {queue}")?;
    }
    Ok(())
}
