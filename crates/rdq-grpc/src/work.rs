//! The `Workers/Work` stream: a pull worker on one bidirectional stream.
//!
//! The worker's first message is a `WorkHello` (queues, credits, optional
//! lease). The server then claims through the application layer
//! ([`rdq_app::App::claim`], the same use case as `POST …/claim`) as long
//! as the worker holds fewer tasks than its credits (once it holds any,
//! when at least a quarter of them are free), taking the queues in
//! turn, and waits for new work (the engine's wake-up, or a short poll for
//! tasks that become due) when none is due. Settles (`WorkSettle`, one
//! store call per message) and extensions (`WorkExtend`) are answered by a
//! `WorkAck` echoing the worker's `seq`; a settle of a task this stream
//! handed out gives its credit back, whatever its result.
//!
//! The stream is pipelined: a settle's credits come back when it arrives,
//! so the next claim runs while the settle is still being stored, and up
//! to [`MAX_PENDING_ACKS`] settles and extensions of one stream are stored
//! at once (the store groups them with other streams' writes). Acks
//! therefore come in the order the store finishes, matched by `seq`.
//!
//! A stream that ends or breaks releases nothing: tasks handed out keep
//! their leases until settled by id and token (on any stream or over HTTP)
//! or until they lapse and the reaper records `LEASE_EXPIRED`. A protocol
//! violation (no hello first, a second hello, more than 1000 settles in a
//! message, credits over the limit) ends the stream with a status carrying
//! the stable code, and changes nothing.

use foldhash::HashSet;
use std::time::Duration;

use futures::StreamExt as _;
use rdq_app::work::MAX_CLAIM;
use rdq_app::{App, AppError, Caller, Scope};
use rdq_envelope::{TaskId, validate_queue_name};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use crate::pb;
use crate::pb::work_request::Kind;
use crate::service::{BoxStream, parse_id, settle_items, settle_result};
use crate::status::to_status;
use crate::wire::WorkOut;

/// Most credits a stream may hold.
pub const MAX_CREDITS: u32 = 10_000;

/// Most queues one stream serves.
pub const MAX_QUEUES: usize = 64;

/// How long a stream with credits and nothing due waits before it looks
/// again, when no submit in this process woke it first (tasks that become
/// due by time wake nobody).
pub const IDLE_POLL: Duration = Duration::from_millis(100);

/// Batches of messages (a claim's tasks, an ack) buffered towards the worker.
const OUTBOUND: usize = 256;

/// Most settles and extensions of one stream being stored at once; a
/// worker that sends more waits (its messages are read no further, so it
/// is claimed for no further either) until one is acknowledged. Acks wait
/// for the store's fsync: at 8, one slow fsync of a few tens of
/// milliseconds used up a busy stream's allowance and its claims stopped
/// until the disk answered (docs/benchmarks.md, "What was tried").
pub const MAX_PENDING_ACKS: usize = 64;

struct Hello {
    queues: Vec<String>,
    credits: u32,
    lease_ms: Option<u64>,
    bare_acks: bool,
}

fn check_hello(caller: &Caller, h: pb::WorkHello) -> Result<Hello, AppError> {
    if h.queues.is_empty() || h.queues.len() > MAX_QUEUES {
        return Err(AppError::invalid_field(
            "hello.queues",
            format!("must name 1 to {MAX_QUEUES} queues"),
        ));
    }
    for q in &h.queues {
        validate_queue_name(q)?;
        caller.require(Scope::Work, q)?;
    }
    if h.credits == 0 || h.credits > MAX_CREDITS {
        return Err(AppError::invalid_field(
            "hello.credits",
            format!("must be 1 to {MAX_CREDITS}"),
        ));
    }
    if h.lease_ms == Some(0) {
        return Err(AppError::invalid_field(
            "hello.lease_ms",
            "must be at least 1",
        ));
    }
    Ok(Hello {
        queues: h.queues,
        credits: h.credits,
        lease_ms: h.lease_ms,
        bare_acks: h.bare_acks,
    })
}

/// Reads the hello and starts the stream's driver; the returned stream is
/// what the worker receives.
pub async fn start(
    app: App,
    caller: Caller,
    mut inbound: Streaming<pb::WorkRequest>,
) -> Result<BoxStream<WorkOut>, Status> {
    let hello = match inbound.message().await? {
        Some(pb::WorkRequest {
            kind: Some(Kind::Hello(h)),
        }) => h,
        Some(_) => {
            return Err(to_status(&AppError::malformed(
                "the first message of a Work stream must be a hello",
            )));
        }
        None => {
            return Err(to_status(&AppError::malformed(
                "the Work stream ended before its hello",
            )));
        }
    };
    let hello = check_hello(&caller, hello).map_err(|e| to_status(&e))?;
    let (tx, rx) = mpsc::channel(OUTBOUND);
    tokio::spawn(drive(app, caller, hello, inbound, tx));
    Ok(Box::pin(
        ReceiverStream::new(rx).flat_map(futures::stream::iter),
    ))
}

/// Messages towards the worker, a claim's tasks together: one hand-over
/// (and one wake-up of the connection) per claim rather than per task.
type Out = mpsc::Sender<Vec<Result<WorkOut, Status>>>;

/// What to do after a message from the worker.
enum Next {
    Go,
    Stop,
}

struct Driver {
    app: App,
    caller: Caller,
    hello: Hello,
    tx: Out,
    held: HashSet<TaskId>,
    credits: u32,
    next_queue: usize,
    pending: std::sync::Arc<tokio::sync::Semaphore>,
}

async fn drive(
    app: App,
    caller: Caller,
    hello: Hello,
    mut inbound: Streaming<pb::WorkRequest>,
    tx: Out,
) {
    let notify = std::sync::Arc::clone(app.engine().work_available());
    let credits = hello.credits;
    let mut d = Driver {
        app,
        caller,
        hello,
        tx,
        held: HashSet::default(),
        credits,
        next_queue: 0,
        pending: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_ACKS)),
    };
    let mut starved = false;
    loop {
        let free = (d.credits as usize).saturating_sub(d.held.len());
        if free > 0 && free >= d.refill_at() && !starved {
            match d.claim_round(free).await {
                Ok(0) => starved = true,
                Ok(_) => {}
                Err(()) => return,
            }
            // Look at the worker's messages between claims without waiting.
            match futures::FutureExt::now_or_never(inbound.message()) {
                None => continue,
                Some(msg) => match d.on_message(msg).await {
                    Next::Go => continue,
                    Next::Stop => return,
                },
            }
        }
        let wake = notify.notified();
        let waiting = free > 0 && free >= d.refill_at();
        tokio::select! {
            msg = inbound.message() => {
                if let Next::Stop = d.on_message(msg).await {
                    return;
                }
            }
            () = wake, if waiting => starved = false,
            () = tokio::time::sleep(IDLE_POLL), if waiting => starved = false,
            () = d.tx.closed() => return,
        }
    }
}

impl Driver {
    /// The free credits a claim waits for while the worker still holds
    /// tasks: a quarter of its credits (at most a full claim), so claims
    /// and settles go in batches rather than one task at a time. A worker
    /// holding nothing is served at once, whatever it can take.
    fn refill_at(&self) -> usize {
        if self.held.is_empty() {
            1
        } else {
            (self.credits as usize / 4).clamp(1, MAX_CLAIM)
        }
    }

    /// One claim of up to `free` tasks, trying each queue in turn until one
    /// has due tasks; how many were handed out. `Err` ends the stream.
    async fn claim_round(&mut self, free: usize) -> Result<usize, ()> {
        let n = self.hello.queues.len();
        for _ in 0..n {
            let queue = &self.hello.queues[self.next_queue % n];
            self.next_queue = (self.next_queue + 1) % n;
            let claimed = match self
                .app
                .claim(
                    &self.caller,
                    queue,
                    free.min(MAX_CLAIM),
                    self.hello.lease_ms,
                )
                .await
            {
                Ok(c) => c,
                Err(e) => {
                    let _ = self.tx.send(vec![Err(to_status(&e))]).await;
                    return Err(());
                }
            };
            if claimed.is_empty() {
                continue;
            }
            let count = claimed.len();
            let mut batch = Vec::with_capacity(count);
            for task in claimed {
                self.held.insert(task.envelope.id);
                batch.push(Ok(WorkOut::Task(task)));
            }
            if self.tx.send(batch).await.is_err() {
                // The worker is gone: what it was handed keeps its lease
                // and lapses as usual.
                return Err(());
            }
            return Ok(count);
        }
        Ok(0)
    }

    async fn fail(&self, e: AppError) -> Next {
        let _ = self.tx.send(vec![Err(to_status(&e))]).await;
        Next::Stop
    }

    async fn on_message(&mut self, msg: Result<Option<pb::WorkRequest>, Status>) -> Next {
        let kind = match msg {
            // Ended or broken: stop handing out tasks; nothing is released.
            Ok(None) | Err(_) => return Next::Stop,
            Ok(Some(pb::WorkRequest { kind: None })) => {
                return self
                    .fail(AppError::malformed("a Work message must have a kind"))
                    .await;
            }
            Ok(Some(pb::WorkRequest { kind: Some(k) })) => k,
        };
        match kind {
            Kind::Hello(_) => {
                self.fail(AppError::malformed(
                    "a Work stream takes one hello, as its first message",
                ))
                .await
            }
            Kind::Credit(c) => {
                let total = self.credits.saturating_add(c.credits);
                if total > MAX_CREDITS {
                    return self
                        .fail(AppError::invalid_field(
                            "credit.credits",
                            format!("the stream's credits would exceed {MAX_CREDITS}"),
                        ))
                        .await;
                }
                self.credits = total;
                Next::Go
            }
            Kind::Settle(s) => {
                if s.settles.is_empty() || s.settles.len() > rdq_app::work::MAX_SETTLE_BATCH {
                    return self
                        .fail(AppError::invalid_field(
                            "settle.settles",
                            format!("must hold 1 to {} settles", rdq_app::work::MAX_SETTLE_BATCH),
                        ))
                        .await;
                }
                for item in &s.settles {
                    if let Some(id) = TaskId::parse(&item.id) {
                        self.held.remove(&id);
                    }
                }
                let (app, caller) = (self.app.clone(), self.caller.clone());
                let with_envelopes = !self.hello.bare_acks;
                self.acknowledge(s.seq, async move {
                    settle_items(&app, &caller, s.settles, with_envelopes).await
                })
                .await
            }
            Kind::Extend(x) => {
                let Some(ext) = x.extend else {
                    return self
                        .fail(AppError::invalid_field("extend.extend", "is required"))
                        .await;
                };
                let (app, caller) = (self.app.clone(), self.caller.clone());
                let with_envelope = !self.hello.bare_acks;
                self.acknowledge(x.seq, async move {
                    let result = match parse_id(&ext.id) {
                        Ok(id) => {
                            app.extend_lease(&caller, id, &ext.lease_token, ext.extend_ms)
                                .await
                        }
                        Err(e) => Err(e),
                    };
                    vec![settle_result(ext.id, result, with_envelope)]
                })
                .await
            }
        }
    }

    /// Stores a settle or extension beside the stream's other work and
    /// acks it with `seq` once stored; waits while [`MAX_PENDING_ACKS`] are
    /// already being stored. A worker gone by then misses only the ack:
    /// what it sent is stored all the same.
    async fn acknowledge<F>(&self, seq: u64, work: F) -> Next
    where
        F: Future<Output = Vec<pb::SettleItemResult>> + Send + 'static,
    {
        let Ok(permit) = std::sync::Arc::clone(&self.pending).acquire_owned().await else {
            return Next::Stop;
        };
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let results = work.await;
            let msg = WorkOut::Message(pb::WorkResponse {
                kind: Some(pb::work_response::Kind::Ack(pb::WorkAck { seq, results })),
            });
            let _ = tx.send(vec![Ok(msg)]).await;
            drop(permit);
        });
        Next::Go
    }
}
