//! The `Workers/Work` stream: a pull worker on one bidirectional stream.
//!
//! The worker's first message is a `WorkHello` (queues, credits, optional
//! lease). The stream is authorised then, once: the caller behind its
//! `authorization` metadata (which a stream cannot change later) gets a
//! [`WorkGrant`] for the hello's queues ([`App::grant_work`]), and every
//! claim, and every settle or extension of a task of those queues, goes
//! under that grant without being authorised again. The server then claims
//! ([`App::claim_granted`], the use case behind `POST …/claim`) as long
//! as the worker holds fewer tasks than its credits (once it holds any,
//! when at least a quarter of them are free), taking the queues in
//! turn, and waits for new work (the engine's wake-up, or a short poll for
//! tasks that become due) when none is due. A claim's tasks go out as one
//! `task` message each, or together in one `tasks` message when the hello
//! asked for `task_batches`. Settles (`WorkSettle`, one
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
//! A cancel asked of a task the stream handed out and has not seen settled
//! is pushed at once as a `WorkCancel` (once per task): the engine's cancel
//! channel names it (from this process, or from another one on stores that
//! announce), the stream reads the task's `cancel_requested` and sends it.
//! An extension's ack says the same (`cancel_requested`).
//!
//! A stream that ends or breaks releases nothing: tasks handed out keep
//! their leases until settled by id and token (on any stream or over HTTP)
//! or until they lapse and the reaper records `LEASE_EXPIRED`. A protocol
//! violation (no hello first, a second hello, more than 1000 settles in a
//! message, credits over the limit) ends the stream with a status carrying
//! the stable code, and changes nothing.

use std::sync::Arc;
use std::time::Duration;

use foldhash::HashMap;
use futures::{Stream, StreamExt as _};
use rdq_app::work::{MAX_CLAIM, MAX_SETTLE_BATCH, WorkGrant};
use rdq_app::{App, AppError, Caller};
use rdq_envelope::TaskId;
use tokio::sync::{Semaphore, broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use crate::messages::{caller, parse_id, settle_result, settle_results, settles_of};
use crate::pb::work_request::Kind;
use crate::status::to_status;
use crate::wire::WorkOut;
use crate::{BoxStream, pb};

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

/// The path of the `Work` method, which [`crate::router`] serves with
/// [`crate::wire::WorkCodec`] ahead of the generated `Workers` server.
pub const WORK_PATH: &str = "/rdq.v1.Workers/Work";

/// The `Work` method over an application, as the generated server would
/// call it.
#[derive(Clone)]
pub struct WorkMethod(pub App);

impl tonic::server::StreamingService<pb::WorkRequest> for WorkMethod {
    type Response = WorkOut;
    type ResponseStream = BoxStream<WorkOut>;
    type Future =
        futures::future::BoxFuture<'static, Result<tonic::Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, request: tonic::Request<Streaming<pb::WorkRequest>>) -> Self::Future {
        Box::pin(open(self.0.clone(), request))
    }
}

/// Opens a `Work` stream: authenticates its caller, reads and checks the
/// hello, and starts the stream's driver; the answer is what the worker
/// receives.
pub async fn open(
    app: App,
    request: tonic::Request<Streaming<pb::WorkRequest>>,
) -> Result<tonic::Response<BoxStream<WorkOut>>, Status> {
    let caller = caller(&app, request.metadata())?;
    start(app, &caller, request.into_inner())
        .await
        .map(tonic::Response::new)
}

/// What a hello asks for, checked.
struct Hello {
    grant: Arc<WorkGrant>,
    credits: u32,
    lease_ms: Option<u64>,
    bare_acks: bool,
    task_batches: bool,
}

fn check_hello(app: &App, caller: &Caller, h: pb::WorkHello) -> Result<Hello, AppError> {
    if h.queues.is_empty() || h.queues.len() > MAX_QUEUES {
        return Err(AppError::invalid_field(
            "hello.queues",
            format!("must name 1 to {MAX_QUEUES} queues"),
        ));
    }
    let grant = app.grant_work(caller, h.queues)?;
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
        grant: Arc::new(grant),
        credits: h.credits,
        lease_ms: h.lease_ms,
        bare_acks: h.bare_acks,
        task_batches: h.task_batches,
    })
}

/// Reads the hello from `inbound` and starts the stream's driver for
/// `caller`; the returned stream is what the worker receives.
pub async fn start<S>(
    app: App,
    caller: &Caller,
    mut inbound: S,
) -> Result<BoxStream<WorkOut>, Status>
where
    S: Stream<Item = Result<pb::WorkRequest, Status>> + Send + Unpin + 'static,
{
    let hello = match inbound.next().await.transpose()? {
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
    let hello = check_hello(&app, caller, hello).map_err(|e| to_status(&e))?;
    let (tx, rx) = mpsc::channel(OUTBOUND);
    tokio::spawn(drive(app, hello, inbound, tx));
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

/// A task the stream handed out and has not seen settled.
struct Held {
    lease_token: String,
    /// A `WorkCancel` was sent (or is on its way) for it.
    told: bool,
}

struct Driver {
    app: App,
    hello: Hello,
    tx: Out,
    held: HashMap<TaskId, Held>,
    credits: u32,
    next_queue: usize,
    pending: Arc<Semaphore>,
}

async fn drive<S>(app: App, hello: Hello, mut inbound: S, tx: Out)
where
    S: Stream<Item = Result<pb::WorkRequest, Status>> + Unpin,
{
    let notify = Arc::clone(app.engine().work_available());
    let mut cancels = app.engine().cancel_requests();
    let credits = hello.credits;
    let mut d = Driver {
        app,
        hello,
        tx,
        held: HashMap::default(),
        credits,
        next_queue: 0,
        pending: Arc::new(Semaphore::new(MAX_PENDING_ACKS)),
    };
    let mut starved = false;
    loop {
        // Cancels heard while busy go out before the next claim.
        loop {
            match cancels.try_recv() {
                Ok(id) => d.tell_cancel(Some(id)),
                Err(broadcast::error::TryRecvError::Lagged(_)) => d.tell_cancel(None),
                Err(_) => break,
            }
        }
        let free = (d.credits as usize).saturating_sub(d.held.len());
        if free > 0 && free >= d.refill_at() && !starved {
            match d.claim_round(free).await {
                Ok(0) => starved = true,
                Ok(_) => {}
                Err(()) => return,
            }
            // Look at the worker's messages between claims without waiting.
            match futures::FutureExt::now_or_never(inbound.next()) {
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
            msg = inbound.next() => {
                if let Next::Stop = d.on_message(msg).await {
                    return;
                }
            }
            () = wake, if waiting => starved = false,
            () = tokio::time::sleep(IDLE_POLL), if waiting => starved = false,
            heard = cancels.recv() => match heard {
                Ok(id) => d.tell_cancel(Some(id)),
                Err(broadcast::error::RecvError::Lagged(_)) => d.tell_cancel(None),
                // The engine is gone; nothing more to hear.
                Err(broadcast::error::RecvError::Closed) => cancels = broadcast::channel(1).1,
            },
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
        let n = self.hello.grant.queues().len();
        for _ in 0..n {
            let queue = self.next_queue % n;
            self.next_queue = (self.next_queue + 1) % n;
            let claimed = match self
                .app
                .claim_granted(
                    &self.hello.grant,
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
            for task in &claimed {
                self.held.insert(
                    task.envelope.id,
                    Held {
                        lease_token: task.lease_token.clone(),
                        told: false,
                    },
                );
            }
            let batch = if self.hello.task_batches {
                vec![Ok(WorkOut::Tasks(claimed))]
            } else {
                claimed.into_iter().map(|t| Ok(WorkOut::Task(t))).collect()
            };
            if self.tx.send(batch).await.is_err() {
                // The worker is gone: what it was handed keeps its lease
                // and lapses as usual.
                return Err(());
            }
            return Ok(count);
        }
        Ok(0)
    }

    /// Sends a `WorkCancel` for the task `id` (every held task with
    /// `None`, after the channel dropped some) if this stream holds it, has
    /// not told the worker yet, and the task has a cancel request. The read
    /// and the send run beside the stream.
    fn tell_cancel(&mut self, id: Option<TaskId>) {
        let ids: Vec<TaskId> = match id {
            Some(id) => vec![id],
            None => self.held.keys().copied().collect(),
        };
        for id in ids {
            let Some(held) = self.held.get_mut(&id).filter(|h| !h.told) else {
                continue;
            };
            held.told = true;
            let (engine, tx, lease_token) = (
                self.app.engine().clone(),
                self.tx.clone(),
                held.lease_token.clone(),
            );
            tokio::spawn(async move {
                let Ok(env) = engine.get(id).await else {
                    return;
                };
                let Some(request) = env
                    .cancel_requested
                    .filter(|_| env.status == rdq_envelope::Status::InFlight)
                else {
                    return;
                };
                let msg = WorkOut::Message(pb::WorkResponse {
                    kind: Some(pb::work_response::Kind::Cancel(pb::WorkCancel {
                        id: id.to_string(),
                        lease_token,
                        request: Some(crate::codec::cancel_request(request)),
                    })),
                });
                let _ = tx.send(vec![Ok(msg)]).await;
            });
        }
    }

    async fn fail(&self, e: AppError) -> Next {
        let _ = self.tx.send(vec![Err(to_status(&e))]).await;
        Next::Stop
    }

    async fn on_message(&mut self, msg: Option<Result<pb::WorkRequest, Status>>) -> Next {
        let kind = match msg {
            // Ended or broken: stop handing out tasks; nothing is released.
            None | Some(Err(_)) => return Next::Stop,
            Some(Ok(pb::WorkRequest { kind: None })) => {
                return self
                    .fail(AppError::malformed("a Work message must have a kind"))
                    .await;
            }
            Some(Ok(pb::WorkRequest { kind: Some(k) })) => k,
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
                if s.settles.is_empty() || s.settles.len() > MAX_SETTLE_BATCH {
                    return self
                        .fail(AppError::invalid_field(
                            "settle.settles",
                            format!("must hold 1 to {MAX_SETTLE_BATCH} settles"),
                        ))
                        .await;
                }
                for item in &s.settles {
                    if let Some(id) = TaskId::parse(&item.id) {
                        self.held.remove(&id);
                    }
                }
                let (app, grant) = (self.app.clone(), Arc::clone(&self.hello.grant));
                let with_envelopes = !self.hello.bare_acks;
                self.acknowledge(s.seq, async move {
                    let (ids, settles) = settles_of(s.settles);
                    let settled = app.settle_many_granted(&grant, settles).await;
                    settle_results(ids, settled, with_envelopes)
                })
                .await
            }
            Kind::Extend(x) => {
                let Some(ext) = x.extend else {
                    return self
                        .fail(AppError::invalid_field("extend.extend", "is required"))
                        .await;
                };
                let (app, grant) = (self.app.clone(), Arc::clone(&self.hello.grant));
                let with_envelope = !self.hello.bare_acks;
                self.acknowledge(x.seq, async move {
                    let result = match parse_id(&ext.id) {
                        Ok(id) => {
                            app.extend_lease_granted(&grant, id, &ext.lease_token, ext.extend_ms)
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
        let Ok(permit) = Arc::clone(&self.pending).acquire_owned().await else {
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
