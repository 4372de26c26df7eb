//! Kills of `rdq serve` nodes under load (docs/reliability.md): two nodes on
//! one PostgreSQL schema. Node B carries three submitting threads, a pull
//! worker and two gRPC `Work` streams; node A one more `Work` stream. B is
//! killed with SIGKILL and started again on its address, again and again;
//! every client rides out the errors and reconnects. At the end every
//! submit B acknowledged must be there and every settle either node
//! acknowledged must have left its task SUCCEEDED; the streams must have
//! settled work on both sides of the kills.
//!
//! `RDQ_FAULT_CYCLES` sets the number of kills (default 3).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::faults::{Acknowledged, Load, assert_nothing_lost};
use common::{FAST_CONFIG, RdqServer, closed_port, postgres_store};
use rdq_grpc::pb;
use rdq_grpc::pb::workers_client::WorkersClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

const QUEUE: &str = "node-kills";
const SUBMITTERS: usize = 3;
/// Acknowledged submits between two kills.
const BETWEEN_KILLS: usize = 300;
/// The streams' lease: a task held by a killed node comes back this soon.
const STREAM_LEASE_MS: u64 = 2_000;

fn cycles() -> usize {
    std::env::var("RDQ_FAULT_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// `Work` stream workers: each settles every task it is sent with SUCCESS,
/// records the settles the server acknowledged, and opens a new stream
/// when its stream breaks (its node died), until stopped.
struct Streams {
    stop: Arc<AtomicBool>,
    /// Settles acknowledged on a stream.
    settled: Arc<AtomicUsize>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Streams {
    fn start(bases: &[&str], acked: &Arc<Mutex<Acknowledged>>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let settled = Arc::new(AtomicUsize::new(0));
        let threads = bases
            .iter()
            .map(|base| {
                let base = (*base).to_owned();
                let (stop, settled, acked) =
                    (Arc::clone(&stop), Arc::clone(&settled), Arc::clone(acked));
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    runtime.block_on(async move {
                        while !stop.load(Ordering::Acquire) {
                            work(&base, &stop, &settled, &acked).await;
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    });
                })
            })
            .collect();
        Self {
            stop,
            settled,
            threads,
        }
    }

    fn settled(&self) -> usize {
        self.settled.load(Ordering::Acquire)
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads {
            t.join().unwrap();
        }
    }
}

/// One stream's life: until it breaks or `stop`.
async fn work(base: &str, stop: &AtomicBool, settled: &AtomicUsize, acked: &Mutex<Acknowledged>) {
    let Ok(endpoint) = Channel::from_shared(base.to_owned()) else {
        return;
    };
    let Ok(channel) = endpoint
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await
    else {
        return;
    };
    let (tx, rx) = mpsc::channel(64);
    let hello = pb::WorkHello {
        queues: vec![QUEUE.into()],
        credits: 4,
        lease_ms: Some(STREAM_LEASE_MS),
        bare_acks: false,
        task_batches: false,
    };
    let sent = tx
        .send(pb::WorkRequest {
            kind: Some(pb::work_request::Kind::Hello(hello)),
        })
        .await;
    if sent.is_err() {
        return;
    }
    let Ok(response) = WorkersClient::new(channel)
        .work(ReceiverStream::new(rx))
        .await
    else {
        return;
    };
    let mut rx = response.into_inner();
    let mut seq = 0u64;
    let mut waiting: HashMap<u64, String> = HashMap::new();
    while !stop.load(Ordering::Acquire) {
        let message = match tokio::time::timeout(Duration::from_millis(200), rx.message()).await {
            Err(_) => continue,
            Ok(Ok(Some(message))) => message,
            Ok(_) => return,
        };
        match message.kind {
            Some(pb::work_response::Kind::Task(task)) => {
                seq += 1;
                waiting.insert(seq, task.id.clone());
                let settle = pb::SettleRequest {
                    id: task.id,
                    lease_token: task.lease_token,
                    outcome: pb::ReportedOutcome::ReportedSuccess as i32,
                    ..Default::default()
                };
                let sent = tx
                    .send(pb::WorkRequest {
                        kind: Some(pb::work_request::Kind::Settle(pb::WorkSettle {
                            seq,
                            settles: vec![settle],
                        })),
                    })
                    .await;
                if sent.is_err() {
                    return;
                }
            }
            Some(pb::work_response::Kind::Ack(ack)) => {
                let Some(id) = waiting.remove(&ack.seq) else {
                    panic!("an acknowledgement of seq {} never sent", ack.seq)
                };
                let done = ack.results.first().is_some_and(|r| {
                    r.problem.is_none()
                        && r.envelope.as_ref().map(|e| e.status)
                            == Some(pb::Status::Succeeded as i32)
                });
                if done {
                    acked.lock().unwrap().settled.push(id);
                    settled.fetch_add(1, Ordering::AcqRel);
                }
            }
            _ => {}
        }
    }
}

/// Waits until `load` has `target` acknowledged submits; answers how long.
fn until_submitted(load: &Load, target: usize, what: &str) -> Duration {
    let started = Instant::now();
    while load.submitted() < target {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: {} of {target} submits acknowledged after 60 s",
            load.submitted()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    started.elapsed()
}

#[test]
fn rdq_serve_killed_with_pull_workers_and_work_streams_attached_loses_nothing_acknowledged() {
    let schema = format!("rdq_node_kills_{}", std::process::id());
    common::drop_postgres_schema(&schema);
    let store = postgres_store(&schema);
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = RdqServer::start_on(dir_a.path(), FAST_CONFIG, &store, &[]);
    let address = format!("127.0.0.1:{}", closed_port());
    let start_b =
        || RdqServer::start_listening(dir_b.path(), FAST_CONFIG, &store, &address, &[], &[]);
    let mut b = start_b();
    let base_b = b.base.clone();

    let load = Load::enduring(&base_b, QUEUE, SUBMITTERS);
    let streams = Streams::start(&[&base_b, &base_b, &a.base], &load.acked);
    until_submitted(&load, BETWEEN_KILLS, "before the first kill");
    let mut recoveries = Vec::new();
    let mut streamed_before = Vec::new();
    for cycle in 0..cycles() {
        streamed_before.push(streams.settled());
        b.kill_hard();
        let restarted = Instant::now();
        b = start_b();
        let target = load.submitted() + BETWEEN_KILLS;
        until_submitted(&load, target, &format!("kill {cycle}"));
        recoveries.push(restarted.elapsed());
    }
    // Let the leases of the last kill lapse and their tasks be settled.
    std::thread::sleep(Duration::from_millis(STREAM_LEASE_MS + 500));
    let streamed = streams.settled();
    streams.stop();
    let acked = load.stop();
    assert_nothing_lost(&a.base, &acked);
    assert!(
        streamed > streamed_before[0] && streamed_before[0] > 0,
        "the Work streams settled {streamed} tasks ({streamed_before:?} before each kill): \
         stream settles went untested across the kills"
    );
    let slowest = recoveries.iter().max().copied().unwrap_or_default();
    eprintln!(
        "{} kills of rdq serve: {} acknowledged submits, {} acknowledged settles ({streamed} on \
         Work streams), none lost; {BETWEEN_KILLS} more submits acknowledged at most {slowest:?} \
         after each restart",
        cycles(),
        acked.submitted.len(),
        acked.settled.len()
    );
    b.terminate();
    a.terminate();
    common::drop_postgres_schema(&schema);
}
