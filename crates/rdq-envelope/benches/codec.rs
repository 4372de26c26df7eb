//! Envelope decode/encode next to `serde_json::from_slice::<Value>` on the same bytes.
//!
//! Run: `cargo bench -p rdq-envelope --bench codec`. The target
//! (docs/benchmarks.md) is that envelope decode stays within 2x of the untyped
//! `Value` parse.

#![allow(missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rdq_envelope::{Envelope, ErrorInfo, Outcome, Timestamp};
use std::hint::black_box;

fn envelope_of(total_bytes: usize) -> Vec<u8> {
    let now = Timestamp::from_unix_ms(1_784_556_202_117).unwrap_or(Timestamp::EPOCH);
    let mut env = Envelope::new(
        "payments.charge",
        "charge-payment",
        b"",
        "application/json",
        now,
    );
    env.headers.insert(
        "traceparent".into(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
    );
    env.attempt_count = 1;
    let mut attempt = rdq_envelope::AttemptRecord::open(1, now);
    attempt.finished_at = Some(now.plus_ms(750));
    attempt.outcome = Some(Outcome::RetryableFailure);
    attempt.error = Some(ErrorInfo::new(
        "java.net.SocketTimeoutException",
        "connect timed out after 500ms",
    ));
    env.attempts.push(attempt);
    let overhead = env.encoded_len();
    let payload_len = (total_bytes.saturating_sub(overhead)) * 3 / 4;
    let payload: Vec<u8> = (0..payload_len)
        .map(|i| b"{\"order_id\": 42}"[i % 16])
        .collect();
    env.set_payload_bytes(&payload);
    env.encode()
}

fn codec(c: &mut Criterion) {
    let mut group = c.benchmark_group("envelope");
    for (label, size) in [
        ("1KiB", 1024),
        ("64KiB", 64 * 1024),
        ("1MiB", 1024 * 1024 - 64),
    ] {
        let bytes = envelope_of(size);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("serde_json_value", label),
            &bytes,
            |b, bytes| b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(bytes))),
        );
        group.bench_with_input(BenchmarkId::new("decode", label), &bytes, |b, bytes| {
            b.iter(|| Envelope::decode(black_box(bytes)))
        });
        let Ok(env) = Envelope::decode(&bytes) else {
            continue;
        };
        group.bench_with_input(BenchmarkId::new("encode", label), &env, |b, env| {
            b.iter(|| black_box(env).encode())
        });
    }
    group.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
