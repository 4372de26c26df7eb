//! `rdq envelope` as a user runs it: the real binary, stdin/stdout, exit codes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// The example envelope of `docs/envelope.md`, from the compliance fixtures.
const SEED: &str = include_str!("../../../compliance/fixtures/valid/seed_concrete_envelope.json");

fn rdq(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdq"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn the_seed_envelope_checks_and_comes_back_json_equal() {
    let out = rdq(&["envelope", "check", "-"], SEED.as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json(&out.stdout), json(SEED.as_bytes()));
    // The printed form is canonical: checking it again reproduces it byte for byte.
    let again = rdq(&["envelope", "check"], &out.stdout);
    assert_eq!(again.stdout, out.stdout);
}

#[test]
fn a_file_argument_is_read() {
    let dir = std::env::temp_dir().join(format!("rdq-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("seed.json");
    std::fs::write(&path, SEED).unwrap();
    let out = rdq(&["envelope", "check", path.to_str().unwrap()], b"");
    assert!(out.status.success());
    std::fs::remove_dir_all(&dir).unwrap();
    let missing = rdq(&["envelope", "check", "/nonexistent/rdq.json"], b"");
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).starts_with("IO_ERROR: "));
}

fn first_stderr_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

#[test]
fn invalid_input_exits_1_with_the_code_first_on_stderr() {
    let cases = [
        (
            SEED.replace("payments.charge", "Payments"),
            "INVALID_QUEUE_NAME: ",
        ),
        (
            SEED.replace("charge-payment", "charge payment"),
            "INVALID_HANDLER_REF: ",
        ),
        (
            SEED.replace("\"envelope_version\": 1", "\"envelope_version\": 2"),
            "UNSUPPORTED_ENVELOPE_VERSION: ",
        ),
        (
            SEED.replace("\"PENDING\"", "\"WAITING\""),
            "INVALID_FIELD: status: ",
        ),
        ("{not json".to_owned(), "MALFORMED_ENVELOPE: "),
    ];
    for (input, prefix) in cases {
        let out = rdq(&["envelope", "check", "-"], input.as_bytes());
        assert_eq!(out.status.code(), Some(1), "{prefix}");
        assert!(out.stdout.is_empty());
        let line = first_stderr_line(&out);
        assert!(
            line.starts_with(prefix),
            "{line:?} does not start with {prefix:?}"
        );
    }
}

#[test]
fn max_bytes_overrides_the_size_limit() {
    let out = rdq(
        &["envelope", "check", "--max-bytes", "200", "-"],
        SEED.as_bytes(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(first_stderr_line(&out).starts_with("PAYLOAD_TOO_LARGE: "));
    let ok = rdq(
        &["envelope", "check", "--max-bytes", "100000", "-"],
        SEED.as_bytes(),
    );
    assert!(ok.status.success());
}

#[test]
fn new_prints_a_valid_pending_envelope() {
    let out = rdq(
        &[
            "envelope",
            "new",
            "--queue",
            "emails",
            "--handler",
            "send-email",
            "--payload-json",
            r#"{"to":"a@b.c"}"#,
            "--header",
            "traceparent=00-x-01",
        ],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out.stdout);
    assert_eq!(v["status"], "PENDING");
    assert_eq!(v["queue"], "emails");
    assert_eq!(v["payload"], "eyJ0byI6ImFAYi5jIn0=");
    assert_eq!(v["payload_content_type"], "application/json");
    assert_eq!(v["headers"]["traceparent"], "00-x-01");
    assert!(
        v.get("payload_ref").is_none(),
        "payload_ref is reserved and never populated"
    );
    let check = rdq(&["envelope", "check"], &out.stdout);
    assert_eq!(check.stdout, out.stdout);

    let reserved = rdq(
        &[
            "envelope",
            "new",
            "--queue",
            "q",
            "--handler",
            "h",
            "--header",
            "rdq.source=x",
        ],
        b"",
    );
    assert!(first_stderr_line(&reserved).starts_with("RESERVED_HEADER: "));
    let bad_queue = rdq(&["envelope", "new", "--queue", "Q", "--handler", "h"], b"");
    assert!(first_stderr_line(&bad_queue).starts_with("INVALID_QUEUE_NAME: "));
}

#[test]
fn queuey_bodies_convert_there_and_back_byte_for_byte() {
    let queuey = br#"{"job_id":"0d8f9c22-5e3b-4f1a-9c77-2b1a6f0e3d44","job_type":"myapp::jobs::SendEmail","queue":"myapp.emails","attempt":2,"enqueued_at_ms":1757846400123,"deferrals":0,"priority":0,"payload":{"body":"hi","to":"a@b.c"}}"#;
    let rdq_env = rdq(&["envelope", "from-queuey"], queuey);
    assert!(
        rdq_env.status.success(),
        "{}",
        String::from_utf8_lossy(&rdq_env.stderr)
    );
    let v = json(&rdq_env.stdout);
    assert_eq!(v["attempt_count"], 1);
    assert_eq!(
        v["headers"]["rdq.queuey.job_type"],
        "myapp::jobs::SendEmail"
    );
    let back = rdq(&["envelope", "to-queuey"], &rdq_env.stdout);
    assert!(back.status.success());
    assert_eq!(back.stdout.strip_suffix(b"\n").unwrap(), &queuey[..]);
}

#[test]
fn a_closed_stdout_ends_the_command_quietly_instead_of_panicking() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdq"))
        .args(["envelope", "check", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the reading end first (`rdq … | head -0`); the command cannot
    // write before it has read all of stdin, so the order is certain.
    drop(child.stdout.take());
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(SEED.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(141));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
