//! `rdq bench --workload pull --grpc`: a pull worker on the gRPC `Work`
//! stream (`docs/grpc.md`), with two HTTP claims' worth of credits; the
//! tasks that arrived are settled as one `WorkSettle` (at most a claim's
//! worth) as soon as no more are waiting. And
//! `rdq bench --workload callback --grpc`: the callback target is a minimal
//! `rdq.v1.Handler` answering OK at once without decoding the task.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::FutureExt as _;
use rdq_grpc::pb;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use crate::CliError;

fn failed(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::new("BENCH_FAILED", format!("{what}: {e}"))
}

fn authorized<T>(msg: T, token: Option<&str>) -> Result<tonic::Request<T>, CliError> {
    let mut r = tonic::Request::new(msg);
    if let Some(t) = token {
        let v = format!("Bearer {t}")
            .parse()
            .map_err(|e| failed("the token is not valid metadata", e))?;
        r.metadata_mut().insert("authorization", v);
    }
    Ok(r)
}

/// A connection to the server's gRPC API, made before the work phase is
/// timed, as the HTTP workers' pooled connections are already open from
/// the submits.
pub async fn connect(base: &str) -> Result<tonic::transport::Channel, CliError> {
    tonic::transport::Channel::from_shared(base.to_owned())
        .map_err(|e| failed("gRPC address", e))?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|e| failed("gRPC connect", e))
}

/// Works `queue` over one Work stream on `channel` until `settled` reaches `jobs`:
/// settles go out in batches of up to `batch` (an HTTP worker's claim), or
/// as soon as no more tasks are waiting to be read (nothing waits on a timer
/// holding finished work). The stream has two batches' worth of credits, so
/// the next tasks are on their way while a batch is settled. The worker
/// whose acknowledgement completes the run says so on `done`, so that every
/// worker stops at once rather than at its next poll.
pub async fn work_stream_worker(
    channel: tonic::transport::Channel,
    token: Option<&str>,
    queue: &str,
    batch_size: u64,
    settled: &AtomicU64,
    jobs: u64,
    done: &watch::Sender<bool>,
) -> Result<(), CliError> {
    let mut finished = done.subscribe();
    let (tx, rx) = mpsc::channel(64);
    let send = |kind| {
        let tx = tx.clone();
        async move {
            tx.send(pb::WorkRequest { kind: Some(kind) })
                .await
                .map_err(|e| failed("Work stream", e))
        }
    };
    send(pb::work_request::Kind::Hello(pb::WorkHello {
        queues: vec![queue.to_owned()],
        credits: u32::try_from(batch_size.saturating_mul(2)).unwrap_or(u32::MAX),
        lease_ms: None,
        bare_acks: true,
        // One message a task: batches made no difference to these workers
        // (docs/benchmarks.md), so the ceiling is measured as it always was.
        task_batches: false,
    }))
    .await?;
    let mut inbound = pb::workers_client::WorkersClient::new(channel)
        .work(authorized(ReceiverStream::new(rx), token)?)
        .await
        .map_err(|e| failed("Work stream", e))?
        .into_inner();
    let mut batch: Vec<pb::SettleRequest> = Vec::new();
    let mut seq = 0u64;
    while settled.load(Ordering::Relaxed) < jobs {
        let next = if batch.len() as u64 >= batch_size {
            None
        } else if batch.is_empty() {
            tokio::select! {
                m = inbound.message() => Some(m),
                // The run is complete (or the bench is ending): look again.
                _ = finished.changed() => continue,
            }
        } else {
            match inbound.message().now_or_never() {
                Some(m) => Some(m),
                None => {
                    // Let frames already on their way be read first.
                    tokio::task::yield_now().await;
                    inbound.message().now_or_never()
                }
            }
        };
        let msg = match next {
            None => {
                seq += 1;
                send(pb::work_request::Kind::Settle(pb::WorkSettle {
                    seq,
                    settles: std::mem::take(&mut batch),
                }))
                .await?;
                continue;
            }
            Some(m) => m.map_err(|e| failed("Work stream", e))?,
        };
        match msg.and_then(|m| m.kind) {
            Some(pb::work_response::Kind::Task(t)) => batch.push(success(t)),
            Some(pb::work_response::Kind::Tasks(b)) => {
                batch.extend(b.tasks.into_iter().map(success))
            }
            Some(pb::work_response::Kind::Ack(a)) => {
                let ok = a.results.iter().filter(|r| r.problem.is_none()).count() as u64;
                if settled.fetch_add(ok, Ordering::Relaxed) + ok >= jobs {
                    done.send_replace(true);
                }
            }
            // The benchmark cancels nothing.
            Some(pb::work_response::Kind::Cancel(_)) => {}
            None => return Err(failed("Work stream", "ended early")),
        }
    }
    Ok(())
}

/// A no-op handler's settle of `t`.
fn success(t: pb::LeasedTask) -> pb::SettleRequest {
    pb::SettleRequest {
        id: t.id,
        lease_token: t.lease_token,
        outcome: pb::ReportedOutcome::ReportedSuccess as i32,
        error: None,
        defer_ms: None,
        throttle: 0,
    }
}

/// A minimal `rdq.v1.Handler` on `127.0.0.1:0` answering OK at once and
/// counting calls in `hits`; returns its `grpc://` URL. It speaks HTTP/2
/// with the `h2` crate directly and answers without decoding the task (its
/// bytes are read and dropped), as the HTTP receiver is one minimal route
/// answering without reading its body: the two receivers should cost about
/// the same, so that the benchmark compares the dispatchers, not the
/// receivers' server stacks.
pub async fn start_receiver(hits: Arc<AtomicU64>) -> Result<String, CliError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| failed("receiver", e))?;
    let addr = listener.local_addr().map_err(|e| failed("receiver", e))?;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            // As gRPC servers do: without it HTTP/2's small frames wait for ACKs.
            let _ = tcp.set_nodelay(true);
            let hits = Arc::clone(&hits);
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((request, respond))) = connection.accept().await {
                    tokio::spawn(answer(request, respond, Arc::clone(&hits)));
                }
            });
        }
    });
    Ok(format!("grpc://{addr}"))
}

/// Answers one call: OK with an empty `HandleResponse` for `Handle`,
/// `UNIMPLEMENTED` for any other method.
async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<bytes::Bytes>,
    hits: Arc<AtomicU64>,
) {
    let handle = request.uri().path() == "/rdq.v1.Handler/Handle";
    let mut body = request.into_body();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let mut response = http::Response::new(());
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    if !handle {
        // Trailers-only: the status rides in the headers.
        response
            .headers_mut()
            .insert("grpc-status", http::HeaderValue::from_static("12"));
        let _ = respond.send_response(response, true);
        return;
    }
    hits.fetch_add(1, Ordering::Relaxed);
    let Ok(mut stream) = respond.send_response(response, false) else {
        return;
    };
    // One message: not compressed, zero bytes long (an empty HandleResponse).
    let _ = stream.send_data(bytes::Bytes::from_static(&[0; 5]), false);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let _ = stream.send_trailers(trailers);
}
