//! `rdq check --store DIR`: a sound embedded store passes; one whose pages
//! are damaged fails with `CORRUPT_STORE` and a non-zero exit status.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{Seek, SeekFrom, Write};
use std::process::Command;

fn rdq(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdq"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_passes_a_sound_store_and_refuses_a_damaged_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap();
    let (code, _, stderr) = rdq(&["migrate", "--store", store]);
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = rdq(&["check", "--store", store]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("ok"), "{stdout}");

    // Keep page 1 (header and schema), damage the pages after it.
    let path = dir.path().join("rdq.db");
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len > 8192, "{len}");
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.seek(SeekFrom::Start(4096)).unwrap();
    let noise: Vec<u8> = (0..len - 4096).map(|i| (i * 7919 % 251) as u8).collect();
    file.write_all(&noise).unwrap();
    file.sync_all().unwrap();
    drop(file);

    let (code, _, stderr) = rdq(&["check", "--store", store]);
    assert_ne!(code, 0);
    assert!(stderr.starts_with("CORRUPT_STORE"), "{stderr}");
}
