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

#[test]
fn pairs_measure_http_against_grpc_in_one_run() {
    let r = bench(&["--workload", "pull", "--workers", "2", "--pairs", "2"]);
    let pairs = r["pairs"].as_array().expect("pairs");
    assert_eq!(pairs.len(), 2, "{r}");
    let mut ratios = Vec::new();
    for (i, p) in pairs.iter().enumerate() {
        assert_eq!(p["pair"], i + 1, "{r}");
        let http = p["http_per_s"].as_f64().expect("http rate");
        let grpc = p["grpc_per_s"].as_f64().expect("gRPC rate");
        assert!(http > 0.0 && grpc > 0.0, "{r}");
        let ratio = p["ratio"].as_f64().expect("ratio");
        assert!((ratio - grpc / http).abs() < 1e-9, "{r}");
        ratios.push(ratio);
    }
    let median = r["ratio_median"].as_f64().expect("median");
    assert!((median - (ratios[0] + ratios[1]) / 2.0).abs() < 1e-9, "{r}");
    assert_eq!(
        r["ratio_min"].as_f64(),
        ratios.iter().copied().reduce(f64::min)
    );
    assert_eq!(
        r["ratio_max"].as_f64(),
        ratios.iter().copied().reduce(f64::max)
    );
}

#[test]
fn pairs_apply_only_to_the_server_workloads() {
    for args in [
        &["--workload", "drain", "--pairs", "2"][..],
        &["--workload", "pull", "--pairs", "0"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rdq"))
            .args(["bench", "--jobs", "10"])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("INVALID_ARGUMENT"), "{args:?}: {stderr}");
    }
}
