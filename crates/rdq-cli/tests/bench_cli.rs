//! `rdq bench`'s server workloads run end to end in a small size: every
//! task is delivered and succeeds, over HTTP and over gRPC (callbacks to
//! the benchmark's own receivers, pull workers on `POST …/claim` and on
//! the `Work` stream). What they measure is in docs/benchmarks.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::process::Command;

fn bench(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_rdq"))
        .args(["bench", "--jobs", "60", "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "rdq bench {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_task_of_each_server_workload_succeeds() {
    for (args, transport) in [
        (
            &["--workload", "callback", "--concurrency", "8"][..],
            "http",
        ),
        (
            &["--workload", "callback", "--concurrency", "8", "--grpc"][..],
            "grpc",
        ),
        (&["--workload", "pull", "--workers", "2"][..], "http"),
        (
            &["--workload", "pull", "--workers", "2", "--grpc"][..],
            "grpc-work-stream",
        ),
    ] {
        let r = bench(args);
        assert_eq!(r["transport"], transport, "{args:?}: {r}");
        assert_eq!(r["succeeded"], 60, "{args:?}: {r}");
        assert_eq!(r["dead"], 0, "{args:?}: {r}");
        if r["workload"] == "callback" {
            assert_eq!(r["callbacks_received"], 60, "{args:?}: {r}");
        }
    }
}
