//! `rdq migrate` against the local PostgreSQL, in a schema of its own.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::process::Command;

fn rdq_migrate(url: &str) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdq"))
        .args(["migrate", "--store", url])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn migrate_creates_the_schema_once_and_then_has_nothing_to_do() {
    let schema = format!("rdq_cli_migrate_{}", std::process::id());
    let url = format!("postgres://postgres@127.0.0.1:5432/test?schema={schema}");
    let first = rdq_migrate(&url);
    let second = rdq_migrate(&url);
    let dropped = Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-c"])
        .arg(format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .output();
    assert_eq!(first.0, 0, "{}", first.2);
    assert!(
        first.1.contains(&format!(
            "migrated from version 0 to {}",
            rdq_store_postgres::SCHEMA_VERSION
        )),
        "{}",
        first.1
    );
    assert_eq!(second.0, 0, "{}", second.2);
    assert!(second.1.contains("nothing to do"), "{}", second.1);
    assert!(
        dropped.is_ok_and(|o| o.status.success()),
        "could not drop {schema}"
    );
}

#[test]
fn migrate_refuses_an_unreachable_database_with_a_stable_code() {
    let (code, _, stderr) = rdq_migrate("postgres://postgres@127.0.0.1:1/test?wait_ms=0");
    assert_eq!(code, 1);
    assert!(stderr.starts_with("STORE_UNAVAILABLE: "), "{stderr}");
}
