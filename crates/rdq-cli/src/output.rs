//! How operator commands print for people: aligned tables, a readable
//! envelope with its attempt history, and progress bars on stderr (shown only
//! when stderr is a terminal, so scripts and logs stay clean).

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::io::Write as _;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rdq_envelope::Envelope;

/// Columns padded to their widest cell; the last column is not padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            if i + 1 < widths.len() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                text.extend(std::iter::repeat_n(' ', pad));
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// `text` on one line, cut at `max` characters with an ellipsis.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// An envelope for people: its fields, then its attempt history.
pub fn envelope(env: &Envelope) -> String {
    let dash = || "—".to_owned();
    let mut out = String::new();
    let handler = match &env.handler_version {
        Some(v) => format!("{} ({v})", env.handler_ref),
        None => env.handler_ref.clone(),
    };
    let payload = env.payload_bytes();
    let shown_payload = match std::str::from_utf8(&payload) {
        Ok(text) if text.chars().count() <= 200 => text.to_owned(),
        Ok(text) => format!("{} ({} bytes)", one_line(text, 200), payload.len()),
        Err(_) => format!("<{} bytes of binary>", payload.len()),
    };
    let headers = if env.headers.is_empty() {
        dash()
    } else {
        env.headers
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (label, value) in [
        ("id", env.id.to_string()),
        ("queue", env.queue.clone()),
        ("handler", handler),
        ("status", env.status.as_str().to_owned()),
        (
            "attempts",
            format!(
                "{} (redriven {}, deferred {})",
                env.attempt_count, env.redrive_count, env.deferral_count
            ),
        ),
        ("priority", env.priority.to_string()),
        ("created", env.created_at.to_string()),
        (
            "next attempt",
            env.next_attempt_at.map_or_else(dash, |t| t.to_string()),
        ),
        (
            "lease until",
            env.lease_expires_at.map_or_else(dash, |t| t.to_string()),
        ),
        ("content type", env.payload_content_type.clone()),
        ("payload", shown_payload),
        ("headers", headers),
    ] {
        let _ = writeln!(out, "{label:<13} {value}");
    }
    if env.attempts.is_empty() {
        let _ = writeln!(out, "\nno attempts yet");
        return out;
    }
    let _ = writeln!(out, "\nattempt history");
    let rows: Vec<Vec<String>> = env
        .attempts
        .iter()
        .map(|a| {
            vec![
                a.attempt_no.to_string(),
                a.started_at.to_string(),
                a.finished_at.map_or_else(dash, |t| t.to_string()),
                a.outcome.map_or("(in flight)", |o| o.as_str()).to_owned(),
                a.error.as_ref().map_or_else(dash, |e| {
                    one_line(&format!("{}: {}", e.error_type, e.message), 100)
                }),
            ]
        })
        .collect();
    out.push_str(&table(
        &["#", "STARTED", "FINISHED", "OUTCOME", "ERROR"],
        &rows,
    ));
    if let Some(last) = env.last_error() {
        let _ = writeln!(out, "\nlast error");
        let _ = writeln!(out, "  type     {}", last.error_type);
        let _ = writeln!(out, "  message  {}", last.message);
        if let Some(detail) = &last.detail {
            let _ = writeln!(out, "  detail   {detail}");
        }
        if let Some(stack) = &last.stack {
            let _ = writeln!(out, "  stack");
            for l in stack.lines().take(20) {
                let _ = writeln!(out, "    {l}");
            }
        }
    }
    out
}

/// A progress bar on stderr, hidden unless stderr is a terminal and output
/// is for people. `total` 0 means unknown (a spinner with a count).
pub fn progress(label: &str, total: u64, json: bool) -> ProgressBar {
    let bar = if total > 0 {
        ProgressBar::new(total)
    } else {
        ProgressBar::new_spinner()
    };
    if json || !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    } else {
        bar.set_draw_target(ProgressDrawTarget::stderr());
    }
    let template = if total > 0 {
        "{msg:>9} [{bar:40}] {pos}/{len} {per_sec}"
    } else {
        "{msg:>9} {spinner} {pos} {per_sec}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(label.to_owned());
    bar
}

/// Writes to standard output. A closed pipe (`rdq dlq list q | head`) ends the
/// command quietly with `BROKEN_PIPE` instead of panicking as `print!` would.
pub fn write_stdout(args: std::fmt::Arguments<'_>, newline: bool) -> Result<(), crate::CliError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_fmt(args)
        .and_then(|()| {
            if newline {
                stdout.write_all(b"\n")
            } else {
                Ok(())
            }
        })
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => {
                crate::CliError::new(BROKEN_PIPE, "standard output was closed")
            }
            _ => crate::CliError::new("IO_ERROR", format!("cannot write standard output: {e}")),
        })
}

/// The code of a command whose reader went away; `main` exits quietly on it.
pub const BROKEN_PIPE: &str = "BROKEN_PIPE";

/// `print!` that reports a closed pipe as an error instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write_stdout(format_args!($($arg)*), false) };
}

/// `println!` that reports a closed pipe as an error instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => { $crate::output::write_stdout(format_args!($($arg)*), true) };
}

pub(crate) use {out, outln};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["QUEUE", "DEAD"],
            &[
                vec!["emails".into(), "3".into()],
                vec!["q".into(), "12".into()],
            ],
        );
        assert_eq!(t, "QUEUE   DEAD\nemails  3\nq       12\n");
    }

    #[test]
    fn long_text_is_cut_on_one_line() {
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 4), "abc…");
    }
}
