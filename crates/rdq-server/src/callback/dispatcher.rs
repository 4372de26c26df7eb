//! The dispatcher: one [`Worker`] per queue that has a callback target, whose
//! handler sends the task to the target (an HTTP POST, or a gRPC call
//! through [`super::grpc`]) and maps the answer to an outcome
//! ([`super::mapping`]).
//!
//! Building on the runtime's worker loop means callbacks get exactly what
//! in-process handlers get: claims and settles in batches, bounded
//! concurrency (the target's `concurrency`), lease fencing, and graceful
//! shutdown (stop claiming, let running callbacks finish within the grace
//! period, hand back the rest unrun).
//!
//! The dispatcher reconciles its workers with the stored policies every
//! `refresh_interval_ms`, and at once when this server changes a queue's
//! config. A target change (URL, headers, mapping) applies to the next
//! dispatch; a concurrency change restarts that queue's worker gracefully.

use std::collections::{HashMap, HashSet};
use std::error::Error as _;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use rdq_engine::{Engine, Settlement};
use rdq_runtime::{Shutdown, ShutdownTrigger, Task, Worker, WorkerConfig, shutdown_channel};
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use rdq_app::metrics::{Metrics, OutcomeLabel};

use super::address::{AddressPolicy, CheckedResolver};
use super::grpc::{self, Channels};
use super::grpc_status::code_name;
use super::mapping::{CallResult, decide, decide_grpc, parse_retry_after};
use super::settings::CallbackSettings;
use super::target::{ATTEMPT_HEADER, CallbackTarget, TASK_ID_HEADER};

/// Most bytes of a response body read (for body rules and the excerpt); a
/// longer body is cut there.
pub const MAX_BODY_READ: usize = 64 * 1024;

/// Pushes tasks of callback queues to their targets. See the module documentation.
pub struct Dispatcher {
    engine: Engine,
    settings: CallbackSettings,
    client: reqwest::Client,
    metrics: Arc<Metrics>,
    shutdown_grace: Duration,
    refresh: Notify,
    tracer: Option<rdq_telemetry::Tracer>,
}

/// What one queue's handler needs; the target is swapped in place when the
/// queue's config changes.
struct QueueDispatch {
    queue: String,
    target: RwLock<Arc<CallbackTarget>>,
    client: reqwest::Client,
    metrics: Arc<Metrics>,
    excerpt_bytes: usize,
    max_retry_after: Duration,
    tracer: Option<rdq_telemetry::Tracer>,
    /// The gRPC target's channel (unused by an HTTP target).
    grpc: Channels,
    address_policy: AddressPolicy,
    /// Throttles flow keys on a target's back-pressure.
    engine: Engine,
}

struct Running {
    dispatch: Arc<QueueDispatch>,
    concurrency: usize,
    trigger: ShutdownTrigger,
    handle: JoinHandle<()>,
}

impl Dispatcher {
    /// A dispatcher over `engine` with one shared HTTP client: keep-alive
    /// connection pooling, no redirects followed, no proxies, and every
    /// resolved address checked against the `[callbacks]` address rules.
    pub fn new(
        engine: Engine,
        settings: CallbackSettings,
        metrics: Arc<Metrics>,
        shutdown_grace: Duration,
    ) -> Result<Self, reqwest::Error> {
        let client = http_client(CheckedResolver::new(settings.address_policy()))?;
        Ok(Self {
            engine,
            settings,
            client,
            metrics,
            shutdown_grace,
            refresh: Notify::new(),
            tracer: None,
        })
    }

    /// Records a CLIENT span per callback request, whose context the target
    /// receives as `traceparent`, and the attempt's CONSUMER span
    /// (`docs/observability.md`); `None` records nothing.
    pub fn with_tracer(mut self, tracer: Option<rdq_telemetry::Tracer>) -> Self {
        self.tracer = tracer;
        self
    }

    /// Asks for a reconcile now (after this server changed a queue's config).
    pub fn refresh_soon(&self) {
        self.refresh.notify_one();
    }

    /// Reconciles until `shutdown`, then stops every worker gracefully and
    /// returns once their in-flight callbacks are settled or handed back.
    pub async fn run(self: Arc<Self>, mut shutdown: Shutdown) {
        let mut running: HashMap<String, Running> = HashMap::new();
        let mut reported: HashSet<(String, String)> = HashSet::new();
        let interval = Duration::from_millis(self.settings.refresh_interval_ms);
        loop {
            self.reconcile(&mut running, &mut reported, &shutdown).await;
            tokio::select! {
                () = shutdown.wait() => break,
                () = tokio::time::sleep(interval) => {}
                () = self.refresh.notified() => {}
            }
        }
        info!(
            queues = running.len(),
            "callback dispatch stopping: finishing in-flight callbacks"
        );
        for r in running.values() {
            r.trigger.trigger();
        }
        for (queue, r) in running {
            if r.handle.await.is_err() {
                warn!(queue = %queue, "a callback worker ended abnormally");
            }
        }
    }

    async fn reconcile(
        &self,
        running: &mut HashMap<String, Running>,
        reported: &mut HashSet<(String, String)>,
        shutdown: &Shutdown,
    ) {
        if shutdown.is_triggered() {
            return;
        }
        let queues = match self.engine.queue_names().await {
            Ok(q) => q,
            Err(e) => {
                warn!(error = %e, "callback dispatch cannot list queues");
                return;
            }
        };
        let mut wanted: HashMap<String, CallbackTarget> = HashMap::new();
        for queue in queues {
            let config = match self.engine.config(&queue).await {
                Ok(c) => c,
                Err(e) => {
                    warn!(queue = %queue, error = %e, "cannot read the queue's configuration");
                    continue;
                }
            };
            match CallbackTarget::from_config(&config, &self.settings) {
                Ok(Some(target)) => {
                    wanted.insert(queue, target);
                }
                Ok(None) => {}
                Err(why) => {
                    // A target stored before the allowlist changed, say: log once.
                    if reported.insert((queue.clone(), why.clone())) {
                        warn!(queue = %queue, error = %why, "not dispatching: the stored callback target is not valid");
                    }
                }
            }
        }
        let stale: Vec<String> = running
            .iter()
            .filter(|(q, r)| {
                wanted
                    .get(*q)
                    .is_none_or(|t| t.concurrency != r.concurrency)
            })
            .map(|(q, _)| q.clone())
            .collect();
        for queue in stale {
            if let Some(r) = running.remove(&queue) {
                info!(queue = %queue, "callback target removed or resized: stopping its dispatch");
                r.trigger.trigger();
                // Let it drain in the background; a replacement may start now.
                tokio::spawn(async move {
                    let _ = r.handle.await;
                });
            }
        }
        for (queue, target) in wanted {
            if let Some(r) = running.get(&queue) {
                *r.dispatch
                    .target
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = Arc::new(target);
                continue;
            }
            info!(queue = %queue, url = %target.display_url(), concurrency = target.concurrency, "dispatching callbacks");
            let concurrency = target.concurrency;
            let dispatch = Arc::new(QueueDispatch {
                queue: queue.clone(),
                target: RwLock::new(Arc::new(target)),
                client: self.client.clone(),
                metrics: Arc::clone(&self.metrics),
                excerpt_bytes: self.settings.body_excerpt_bytes,
                max_retry_after: Duration::from_millis(self.settings.max_retry_after_ms),
                tracer: self.tracer.clone(),
                grpc: Channels::default(),
                address_policy: self.settings.address_policy(),
                engine: self.engine.clone(),
            });
            let config = WorkerConfig {
                queues: vec![queue.clone()],
                concurrency,
                claim_batch: concurrency.min(64),
                poll_interval: Duration::from_millis(self.settings.poll_interval_ms),
                shutdown_grace: self.shutdown_grace,
                ..WorkerConfig::default()
            };
            let handler_dispatch = Arc::clone(&dispatch);
            let worker = Worker::new(self.engine.clone(), config, move |task: Arc<Task>| {
                dispatch_one(Arc::clone(&handler_dispatch), task)
            });
            let (trigger, worker_shutdown) = shutdown_channel();
            let handle = tokio::spawn(async move {
                let stats = worker.run(worker_shutdown).await;
                debug!(?stats, "callback worker stopped");
            });
            running.insert(
                queue,
                Running {
                    dispatch,
                    concurrency,
                    trigger,
                    handle,
                },
            );
        }
    }
}

/// The HTTP client of every callback. Names resolve through `resolver`
/// (the address rules) on every new connection, and the client connects
/// to exactly the addresses that passed: a URL's literal address skips the
/// resolver, and was checked when the target was configured. Redirects are
/// never followed (a 3xx is the answer, PERMANENT_FAILURE by default), so no
/// request goes to an address nobody checked; no proxy is used, so nothing
/// else resolves the name.
fn http_client(resolver: CheckedResolver) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(resolver)
        .no_proxy()
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(60))
        .user_agent(concat!("rdq-server/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// One callback: POST the envelope (or call `rdq.v1.Handler/Handle`), map
/// the answer.
async fn dispatch_one(dispatch: Arc<QueueDispatch>, task: Arc<Task>) -> Settlement {
    let target = Arc::clone(
        &dispatch
            .target
            .read()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let env = task.envelope();
    dispatch.metrics.claimed(&dispatch.queue, 1);
    let attempt = env
        .open_attempt()
        .map_or(env.attempt_count, |a| a.attempt_no);
    let started = Instant::now();
    // Tracing on: the request's own span context; off: the submitter's, as stored.
    let traced = dispatch
        .tracer
        .as_ref()
        .map(|t| t.start_dispatch(env, attempt));
    let traceparent = match &traced {
        Some(span) => Some(span.traceparent()),
        None => env.headers.get("traceparent").cloned(),
    };
    let url = target.display_url();
    let (settlement, protocol, status_code, error_type) = if target.is_grpc() {
        let call = grpc::call(
            &dispatch.grpc,
            dispatch.address_policy,
            &target,
            env,
            attempt,
            traceparent.as_deref(),
        );
        // A cancel asked of the task aborts the call in flight.
        let result = tokio::select! {
            result = call => result,
            () = task.cancelled() => return cancelled(&dispatch, &task, started),
        };
        let settlement = decide_grpc(&target, &result, dispatch.excerpt_bytes);
        let code = result
            .as_ref()
            .err()
            .map_or(tonic::Code::Ok, tonic::Status::code);
        let error_type = (code != tonic::Code::Ok).then(|| code_name(code).to_owned());
        (
            settlement,
            rdq_telemetry::CallProtocol::Grpc,
            Some(code as u16),
            error_type,
        )
    } else {
        let result = tokio::select! {
            result = post(&dispatch, &target, env, attempt, traceparent.as_deref()) => result,
            () = task.cancelled() => return cancelled(&dispatch, &task, started),
        };
        let now = SystemTime::now();
        let settlement = decide(
            &target,
            &result,
            env.deferral_count,
            dispatch.excerpt_bytes,
            dispatch.max_retry_after,
            now,
        );
        if let Some(delay) = back_pressure(&result, dispatch.max_retry_after, now) {
            throttle_flow(&dispatch, env, delay).await;
        }
        let (status_code, error_type) = match &result {
            CallResult::Answered { status, .. } if *status >= 400 => {
                (Some(*status), Some(status.to_string()))
            }
            CallResult::Answered { status, .. } => (Some(*status), None),
            CallResult::TimedOut => (None, Some("timeout".to_owned())),
            CallResult::ConnectFailed(_) => (None, Some("connect".to_owned())),
            CallResult::Failed(_) => (None, Some("transport".to_owned())),
        };
        (
            settlement,
            rdq_telemetry::CallProtocol::Http,
            status_code,
            error_type,
        )
    };
    if let (Some(tracer), Some(span)) = (&dispatch.tracer, traced) {
        let call = rdq_telemetry::DispatchResult {
            protocol,
            host: target.url.host_str().unwrap_or(""),
            port: target.url.port_or_known_default(),
            url: &url,
            status_code,
            error_type: error_type.as_deref(),
        };
        trace_dispatch(tracer, span, env, attempt, &call, &settlement);
    }
    dispatch
        .metrics
        .dispatch_latency(&dispatch.queue, started.elapsed());
    dispatch
        .metrics
        .outcome(&dispatch.queue, label(&settlement));
    settlement
}

/// A callback cut short because a cancel was asked of its task: the
/// request is dropped (its connection closed) and the failure
/// `rdq.Cancelled` reported, which ends the task DEAD with reason
/// `CANCELLED`.
fn cancelled(dispatch: &QueueDispatch, task: &Task, started: Instant) -> Settlement {
    dispatch
        .metrics
        .dispatch_latency(&dispatch.queue, started.elapsed());
    let settlement = task.cancelled_failure();
    dispatch
        .metrics
        .outcome(&dispatch.queue, label(&settlement));
    settlement
}

/// How long a target asked to be left alone: a `429` or `503` answer with
/// a `Retry-After` (seconds or an HTTP date) in the future, capped by
/// `max_retry_after_ms`.
pub fn back_pressure(result: &CallResult, max: Duration, now: SystemTime) -> Option<Duration> {
    let CallResult::Answered {
        status: 429 | 503,
        retry_after: Some(value),
        ..
    } = result
    else {
        return None;
    };
    parse_retry_after(value, now)
        .map(|d| d.min(max))
        .filter(|d| !d.is_zero())
}

/// Throttles the task's flow key (the whole queue for a task without one)
/// for `delay`, for every node on the store (`docs/flow-control.md`). A
/// store without flow limits keeps the deferral alone.
async fn throttle_flow(dispatch: &QueueDispatch, env: &rdq_envelope::Envelope, delay: Duration) {
    let key = env
        .headers
        .get(rdq_engine::flow::FLOW_KEY_HEADER)
        .map(String::as_str);
    if !dispatch.engine.capabilities().claim_flow {
        debug!(queue = %dispatch.queue, task_id = %env.id, "the target pushed back; this store keeps no flow limits, so only the task waits");
        return;
    }
    let until = rdq_envelope::Timestamp::now().plus(delay);
    match dispatch.engine.throttle(&dispatch.queue, key, until).await {
        Ok(()) => debug!(
            queue = %dispatch.queue,
            task_id = %env.id,
            flow_key = key.unwrap_or(""),
            %until,
            "the target pushed back: flow throttled"
        ),
        Err(e) => warn!(
            queue = %dispatch.queue,
            task_id = %env.id,
            error = %e,
            "the target pushed back but the flow could not be throttled"
        ),
    }
}

/// POSTs the envelope to an HTTP target.
async fn post(
    dispatch: &QueueDispatch,
    target: &CallbackTarget,
    env: &rdq_envelope::Envelope,
    attempt: u32,
    traceparent: Option<&str>,
) -> CallResult {
    let mut request = dispatch
        .client
        .post(target.url.clone())
        .timeout(target.timeout)
        .headers(target.headers.clone())
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .header(TASK_ID_HEADER, env.id.to_string())
        .header(ATTEMPT_HEADER, attempt.to_string());
    if let Some(tp) = traceparent.and_then(|v| HeaderValue::from_str(v).ok()) {
        request = request.header("traceparent", tp);
    }
    match request.body(env.encode()).send().await {
        Ok(response) => read_answer(response).await,
        Err(e) => transport_failure(&e),
    }
}

async fn read_answer(mut response: reqwest::Response) -> CallResult {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_BODY_READ - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if body.len() >= MAX_BODY_READ {
                    break;
                }
            }
            Ok(None) => break,
            Err(e) if e.is_timeout() => return CallResult::TimedOut,
            Err(e) => {
                return CallResult::Failed(format!(
                    "the response body broke off: {}",
                    error_chain(&e)
                ));
            }
        }
    }
    CallResult::Answered {
        status,
        body,
        retry_after,
    }
}

fn transport_failure(e: &reqwest::Error) -> CallResult {
    if e.is_timeout() {
        CallResult::TimedOut
    } else if e.is_connect() {
        CallResult::ConnectFailed(error_chain(e))
    } else {
        CallResult::Failed(error_chain(e))
    }
}

/// The innermost causes of `e`, which say what actually went wrong
/// ("Connection refused (os error 111)"), without the URL (it may hold a query).
fn error_chain(e: &reqwest::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source = e.source();
    while let Some(s) = source {
        parts.push(s.to_string());
        source = s.source();
    }
    if parts.is_empty() {
        "the request failed".to_owned()
    } else {
        parts.join(": ")
    }
}

/// Records a callback's CLIENT span and its attempt's CONSUMER span.
fn trace_dispatch(
    tracer: &rdq_telemetry::Tracer,
    span: rdq_telemetry::Dispatch,
    env: &rdq_envelope::Envelope,
    attempt: u32,
    call: &rdq_telemetry::DispatchResult<'_>,
    settlement: &Settlement,
) {
    span.finish(tracer, env, call);
    let failure = match settlement {
        Settlement::Failure { error, .. } | Settlement::FailureWithRetry { error, .. } => {
            Some(error.error_type.as_str())
        }
        _ => None,
    };
    tracer.record_attempt(&rdq_telemetry::Attempt {
        task: env.id,
        queue: &env.queue,
        handler_ref: &env.handler_ref,
        traceparent: env.headers.get("traceparent").map(String::as_str),
        attempt_no: attempt,
        started_ms: env
            .open_attempt()
            .map_or_else(|| env.created_at.unix_ms(), |a| a.started_at.unix_ms()),
        outcome: label(settlement).as_str(),
        error_type: failure,
    });
}

fn label(settlement: &Settlement) -> OutcomeLabel {
    match settlement {
        Settlement::Success => OutcomeLabel::Success,
        Settlement::Failure { kind, .. } | Settlement::FailureWithRetry { kind, .. } => {
            if *kind == rdq_engine::FailureKind::Permanent {
                OutcomeLabel::PermanentFailure
            } else {
                OutcomeLabel::RetryableFailure
            }
        }
        Settlement::Defer { .. } => OutcomeLabel::Deferred,
        Settlement::Release => OutcomeLabel::Released,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback HTTP server giving every request `answer` (then closing
    /// the connection); its port and how many connections it accepted.
    async fn serve(answer: String) -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.shutdown().await;
            }
        });
        (port, accepted)
    }

    fn refused(e: &reqwest::Error) -> bool {
        error_chain(e).contains("callback target refused")
    }

    const LOCAL: AddressPolicy = AddressPolicy {
        loopback: true,
        private: false,
    };

    /// A name whose answer changes between lookups (DNS rebinding) reaches
    /// the receiver only on the lookups that passed: the client never
    /// resolves the name a second time to connect.
    #[tokio::test]
    async fn the_client_connects_only_to_the_addresses_it_checked() {
        let (port, accepted) =
            serve("HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n".into()).await;
        let lookups = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&lookups);
        let answers: [&[&str]; 4] = [
            &["127.0.0.1"],
            &["169.254.169.254"],
            &["127.0.0.1", "10.0.0.1"],
            &["127.0.0.1"],
        ];
        let resolver = CheckedResolver::with_lookup(LOCAL, move |name| {
            assert_eq!(name, "rebind.test");
            let n = seen.fetch_add(1, Ordering::SeqCst);
            answers[n % answers.len()]
                .iter()
                .map(|a| a.parse::<IpAddr>().unwrap())
                .collect()
        });
        let client = http_client(resolver).unwrap();
        let url = format!("http://rebind.test:{port}/hook");
        let mut outcomes = Vec::new();
        for _ in 0..4 {
            outcomes.push(match client.post(&url).send().await {
                Ok(r) => r.status().as_u16().to_string(),
                Err(e) if refused(&e) => "refused".to_owned(),
                Err(e) => error_chain(&e),
            });
        }
        assert_eq!(outcomes, ["204", "refused", "refused", "204"]);
        assert_eq!(
            lookups.load(Ordering::SeqCst),
            4,
            "one lookup per connection"
        );
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        let err = client
            .post(format!("http://metadata.google.internal:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert!(
            error_chain(&err).contains("cloud metadata service name"),
            "{err}"
        );
    }

    /// A redirect is the answer: its target, allowed or not, gets nothing.
    #[tokio::test]
    async fn redirects_are_not_followed() {
        let (elsewhere, reached) =
            serve("HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n".into()).await;
        for location in [
            format!("http://127.0.0.1:{elsewhere}/"),
            format!("http://localhost:{elsewhere}/"),
            "http://169.254.169.254/latest/meta-data/".to_owned(),
        ] {
            for status in [
                "301 Moved Permanently",
                "302 Found",
                "307 Temporary Redirect",
                "308 Permanent Redirect",
            ] {
                let (port, _) = serve(format!(
                    "HTTP/1.1 {status}\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                ))
                .await;
                let client = http_client(CheckedResolver::new(LOCAL)).unwrap();
                let answer = client
                    .post(format!("http://127.0.0.1:{port}/hook"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(answer.status().as_str(), &status[..3], "{location}");
            }
        }
        assert_eq!(reached.load(Ordering::SeqCst), 0);
    }

    fn answered(status: u16, retry_after: Option<&str>) -> CallResult {
        CallResult::Answered {
            status,
            body: Vec::new(),
            retry_after: retry_after.map(str::to_owned),
        }
    }

    #[test]
    fn only_a_429_or_503_with_a_future_retry_after_is_back_pressure() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let max = Duration::from_secs(60);
        assert_eq!(
            back_pressure(&answered(429, Some("2")), max, now),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            back_pressure(&answered(503, Some("3600")), max, now),
            Some(max)
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(5));
        assert_eq!(
            back_pressure(&answered(503, Some(&date)), max, now),
            Some(Duration::from_secs(5))
        );
        for quiet in [
            answered(429, None),
            answered(429, Some("0")),
            answered(429, Some("soon")),
            answered(500, Some("2")),
            answered(200, Some("2")),
            CallResult::TimedOut,
        ] {
            assert_eq!(back_pressure(&quiet, max, now), None, "{quiet:?}");
        }
    }
}
