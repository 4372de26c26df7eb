//! The writer's promises about time: no write is answered before its fsync,
//! a claim never waits for one, a failed fsync fails every later write, and
//! closing still answers the write waiting for its fsync. Also: ingests in
//! one group see each other's cursor moves.

use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use rdq_engine::EngineError;
use rdq_envelope::Timestamp;
use tokio::sync::oneshot;

use super::job::ClaimedRow;
use super::{Job, SyncFn, Writer};
use crate::schema::{Tuning, open_writer};

/// A writer on a fresh store whose fsyncs are done by `sync`.
fn writer(dir: &tempfile::TempDir, sync: SyncFn) -> Writer {
    let tuning = Tuning {
        page_size: 4096,
        cache_kib: 1024,
        busy_timeout: Duration::from_secs(1),
        check_budget: Duration::ZERO,
    };
    let conn = open_writer(&dir.path().join("rdq.db"), tuning).expect("open");
    Writer::start(conn, sync, 64, 0).expect("start")
}

fn put_config(w: &Writer) -> oneshot::Receiver<Result<(), EngineError>> {
    let (reply, answer) = oneshot::channel();
    w.send(Job::PutConfig {
        queue: "q".into(),
        policy: "{}".into(),
        reply,
    })
    .expect("send");
    answer
}

fn claim(w: &Writer) -> oneshot::Receiver<Result<Vec<ClaimedRow>, EngineError>> {
    let (reply, answer) = oneshot::channel();
    w.send(Job::Claim {
        queue: "q".into(),
        max: 10,
        max_in_flight: None,
        flow: None,
        lease_ms: 1000,
        now: Timestamp::now(),
        reply,
    })
    .expect("send");
    answer
}

/// The answer, waiting up to ten seconds for it.
fn answer<T>(mut rx: oneshot::Receiver<T>) -> T {
    for _ in 0..1000 {
        match rx.try_recv() {
            Ok(v) => return v,
            Err(oneshot::error::TryRecvError::Empty) => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("the writer dropped the request: {e}"),
        }
    }
    panic!("no answer within ten seconds");
}

/// Whether `rx` is still unanswered a tenth of a second from now.
fn still_waiting<T>(rx: &mut oneshot::Receiver<T>) -> bool {
    std::thread::sleep(Duration::from_millis(100));
    still_waiting_now(rx)
}

/// A writer whose every fsync says on `entered` that it began, then
/// waits for a message on `gate` (and fails once `gate` is dropped).
fn gated_writer(dir: &tempfile::TempDir) -> (Writer, std_mpsc::Receiver<()>, std_mpsc::Sender<()>) {
    let (entered_tx, entered) = std_mpsc::channel::<()>();
    let (gate, gate_rx) = std_mpsc::channel::<()>();
    let w = writer(
        dir,
        Box::new(move || {
            entered_tx.send(()).map_err(|e| e.to_string())?;
            gate_rx.recv().map_err(|e| e.to_string())
        }),
    );
    (w, entered, gate)
}

#[test]
fn writes_wait_for_their_fsync_and_claims_do_not() {
    let dir = tempfile::tempdir().expect("dir");
    let (w, entered, gate) = gated_writer(&dir);
    let mut first = put_config(&w);
    entered
        .recv_timeout(Duration::from_secs(10))
        .expect("the first write's fsync began");
    assert!(still_waiting(&mut first), "answered before its fsync");
    // Committed and fsyncing: a write now waits for a second fsync, a
    // claim for nothing.
    let mut second = put_config(&w);
    assert!(answer(claim(&w)).expect("claim").is_empty());
    assert!(still_waiting(&mut first));
    assert!(still_waiting(&mut second));
    gate.send(()).expect("open");
    answer(first).expect("first write");
    entered
        .recv_timeout(Duration::from_secs(10))
        .expect("the second write's fsync began");
    assert!(still_waiting(&mut second), "answered before its own fsync");
    gate.send(()).expect("open");
    answer(second).expect("second write");
}

#[test]
fn a_claim_does_not_wait_for_an_fsync_behind_a_full_group() {
    let dir = tempfile::tempdir().expect("dir");
    let (w, entered, gate) = gated_writer(&dir);
    let first = put_config(&w);
    entered
        .recv_timeout(Duration::from_secs(10))
        .expect("the first write's fsync began");
    // While it runs, writes fill the next group to its limit (64) and
    // beyond; they wait for an fsync, the claim must not.
    let mut waiting: Vec<_> = (0..80).map(|_| put_config(&w)).collect();
    assert!(answer(claim(&w)).expect("claim").is_empty());
    assert!(waiting.iter_mut().all(still_waiting_now));
    gate.send(()).expect("open");
    answer(first).expect("first write");
}

/// Whether `rx` is unanswered.
fn still_waiting_now<T>(rx: &mut oneshot::Receiver<T>) -> bool {
    matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty))
}

#[test]
fn a_failed_fsync_fails_its_writes_and_every_later_one() {
    let dir = tempfile::tempdir().expect("dir");
    let w = writer(&dir, Box::new(|| Err("the disk is on fire".to_owned())));
    let failed = answer(put_config(&w)).expect_err("the write was not durable");
    assert_eq!(failed.code(), "STORE_UNAVAILABLE");
    assert!(
        failed.to_string().contains("the disk is on fire"),
        "{failed}"
    );
    let Err(later) = answer(claim(&w)) else {
        panic!("a claim committed after a failed fsync");
    };
    assert!(later.to_string().contains("the disk is on fire"), "{later}");
    assert!(answer(put_config(&w)).is_err());
    let why = w.health().last_failure().expect("not healthy");
    assert!(why.contains("the disk is on fire"), "{why}");
}

#[test]
fn closing_answers_the_write_still_waiting_for_its_fsync() {
    let dir = tempfile::tempdir().expect("dir");
    let (entered_tx, entered) = std_mpsc::channel::<()>();
    let w = writer(
        &dir,
        Box::new(move || {
            let _ = entered_tx.send(());
            std::thread::sleep(Duration::from_millis(200));
            Ok(())
        }),
    );
    let pending = put_config(&w);
    entered
        .recv_timeout(Duration::from_secs(10))
        .expect("fsync began");
    drop(w);
    answer(pending).expect("answered before the writer stopped");
}

/// An ingest of no tasks from cursor `expected` to `next` of source
/// `s`, partition `0`.
fn ingest(
    w: &Writer,
    expected: Option<u64>,
    next: u64,
) -> oneshot::Receiver<Result<rdq_engine::IngestOutcome, EngineError>> {
    let (reply, answer) = oneshot::channel();
    w.send(Job::Source(super::SourceJob::Ingest {
        request: rdq_engine::IngestRequest {
            source: "s".into(),
            partition: "0".into(),
            queue: "q".into(),
            expected,
            next,
            tasks: Vec::new(),
            now_ms: 1,
        },
        tasks: Vec::new(),
        reply,
    }))
    .expect("send");
    answer
}

#[test]
fn ingests_in_one_group_see_each_other_and_wait_for_its_fsync() {
    use rdq_engine::IngestOutcome::{Ingested, Moved};
    let dir = tempfile::tempdir().expect("dir");
    let (w, entered, gate) = gated_writer(&dir);
    let first = put_config(&w);
    entered
        .recv_timeout(Duration::from_secs(10))
        .expect("the first write's fsync began");
    // While that fsync runs, these three run in one group: the second
    // finds the cursor the first moved, the third goes on from it.
    let mut won = ingest(&w, None, 5);
    let mut lost = ingest(&w, None, 9);
    let mut next = ingest(&w, Some(5), 7);
    assert!(still_waiting(&mut won), "answered before its fsync");
    gate.send(()).expect("open");
    answer(first).expect("first write");
    entered
        .recv_timeout(Duration::from_secs(10))
        .expect("the group's fsync began");
    assert!(still_waiting(&mut won), "answered before its own fsync");
    assert!(still_waiting_now(&mut lost) && still_waiting_now(&mut next));
    gate.send(()).expect("open");
    assert_eq!(answer(won).expect("first ingest"), Ingested(Vec::new()));
    assert_eq!(
        answer(lost).expect("second ingest"),
        Moved { current: Some(5) }
    );
    assert_eq!(answer(next).expect("third ingest"), Ingested(Vec::new()));
}
