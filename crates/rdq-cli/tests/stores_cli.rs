//! `--store` through the registry of stores: every store of the default
//! build is listed by `rdq stores`, and a value no store answers to, or a
//! URL parameter its store does not understand, is refused with a stable
//! code before anything is opened.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::process::Command;

use serde_json::Value;

fn rdq(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdq"))
        .args(args)
        .env_remove("RDQ_STORE")
        .env_remove("RDQ_SERVER")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn rdq_stores_lists_every_store_of_the_default_build_with_its_schemes() {
    let (code, stdout, stderr) = rdq(&["stores", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    let stores = listed["stores"].as_array().unwrap();
    let by_name = |name: &str| {
        stores
            .iter()
            .find(|s| s["store"] == name)
            .unwrap_or_else(|| panic!("{name} is not listed: {stdout}"))
    };
    assert_eq!(
        by_name("embedded")["store_values"],
        serde_json::json!(["a directory path"])
    );
    assert_eq!(
        by_name("postgres")["store_values"],
        serde_json::json!(["postgres://", "postgresql://"])
    );
    assert_eq!(
        by_name("redis")["store_values"],
        serde_json::json!(["redis://", "rediss://"])
    );
    assert_eq!(by_name("rabbitmq")["feature"], "store-rabbitmq");
    assert_eq!(
        by_name("rabbitmq")["config_sections"],
        serde_json::json!(["queuey_compatible"])
    );
    assert!(
        by_name("memory")["store_values"]
            .as_array()
            .unwrap()
            .contains(&Value::from("memory:"))
    );
    assert_eq!(stores.len(), 5, "{stdout}");

    let (code, table, _) = rdq(&["stores"]);
    assert_eq!(code, 0);
    assert!(table.starts_with("STORE"), "{table}");
    assert!(table.contains("postgres://, postgresql://"), "{table}");
}

#[test]
fn a_scheme_no_store_answers_to_is_refused_with_the_ones_this_build_opens() {
    for args in [
        &["queue", "list", "--store", "mysql://localhost/db"][..],
        &["migrate", "--store", "mysql://localhost/db"][..],
        &["check", "--store", "mysql://localhost/db"][..],
    ] {
        let (code, _, stderr) = rdq(args);
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("UNSUPPORTED_STORE: "), "{stderr}");
        assert!(stderr.contains("mysql://"), "{stderr}");
        for known in [
            "a directory path (embedded)",
            "postgres://",
            "rediss://",
            "amqps://",
            "memory:",
        ] {
            assert!(stderr.contains(known), "{known} missing: {stderr}");
        }
    }
}

#[test]
fn serve_refuses_an_unknown_scheme_before_listening() {
    let (code, _, stderr) = rdq(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--store",
        "mongodb://localhost/rdq",
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("UNSUPPORTED_STORE: "), "{stderr}");
    assert!(stderr.contains("mongodb://"), "{stderr}");
}

#[test]
fn a_misspelt_url_parameter_is_refused_before_the_store_is_opened() {
    // Nothing listens on port 1: the refusal comes before any connection.
    let (code, _, stderr) = rdq(&[
        "queue",
        "list",
        "--store",
        "redis://127.0.0.1:1/?prefx=jobs",
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.starts_with("INVALID_ARGUMENT: "), "{stderr}");
    assert!(stderr.contains("\"prefx\""), "{stderr}");
    assert!(stderr.contains("prefix, cluster, wait_ms"), "{stderr}");
}

#[test]
fn memory_takes_no_host_path_or_parameter() {
    let (code, _, stderr) = rdq(&["queue", "list", "--store", "memory://somewhere"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.starts_with("INVALID_ARGUMENT: "), "{stderr}");
    let (code, _, stderr) = rdq(&["queue", "list", "--store", "memory:"]);
    assert_eq!(code, 0, "{stderr}");
}
