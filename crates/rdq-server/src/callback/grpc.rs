//! gRPC callback targets (`docs/grpc.md`, "gRPC callbacks"): a queue whose
//! callback URL is `grpc://host:port` (plaintext HTTP/2) or
//! `grpcs://host[:port]` (TLS, port 443 by default) gets each task as a
//! call to `rdq.v1.Handler/Handle`, with the target's timeout as
//! the deadline (`grpc-timeout`, and the call is abandoned past it), the
//! target's headers, `rdq-task-id`, `rdq-attempt` and `traceparent` (the
//! call's own span when tracing is on, else the task's) as metadata.
//!
//! The status decides the outcome, `status_map` first (keys are code names
//! such as `"NOT_FOUND"` or numbers such as `"5"`), then the default of
//! `docs/outcomes.md`: `OK` SUCCESS; `UNAVAILABLE`, `DEADLINE_EXCEEDED`,
//! `RESOURCE_EXHAUSTED`, `ABORTED` RETRYABLE_FAILURE; every other code
//! PERMANENT_FAILURE. A connection that cannot be made is `UNAVAILABLE`
//! (as gRPC clients report it) and a deadline overrun `DEADLINE_EXCEEDED`.
//! The error recorded is `grpc.<Code>` (`grpc.Unavailable`, …) with the
//! status message, and the code, message and details (base64) in `detail`.
//!
//! Every connection resolves the host through the `[callbacks]` address
//! rules and connects only to the addresses that passed, as HTTP targets do.

use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use rdq_engine::{FailureKind, Settlement};
use rdq_envelope::{Envelope, ErrorInfo, truncate_text};
use serde_json::json;
use tonic::{Code, Status};
use url::Url;

use super::address::AddressPolicy;
use super::target::{CallbackTarget, MappedOutcome};

/// The URL scheme of a plaintext gRPC callback target.
pub const SCHEME: &str = "grpc";

/// The URL scheme of a gRPC callback target over TLS.
pub const TLS_SCHEME: &str = "grpcs";

/// For a gRPC scheme, whether it is the TLS one; `None` for any other.
pub fn is_tls_scheme(scheme: &str) -> Option<bool> {
    match scheme {
        SCHEME => Some(false),
        TLS_SCHEME => Some(true),
        _ => None,
    }
}

/// Every gRPC status code with its name, by number.
pub const CODES: [(Code, &str, &str); 17] = [
    (Code::Ok, "OK", "Ok"),
    (Code::Cancelled, "CANCELLED", "Cancelled"),
    (Code::Unknown, "UNKNOWN", "Unknown"),
    (Code::InvalidArgument, "INVALID_ARGUMENT", "InvalidArgument"),
    (
        Code::DeadlineExceeded,
        "DEADLINE_EXCEEDED",
        "DeadlineExceeded",
    ),
    (Code::NotFound, "NOT_FOUND", "NotFound"),
    (Code::AlreadyExists, "ALREADY_EXISTS", "AlreadyExists"),
    (
        Code::PermissionDenied,
        "PERMISSION_DENIED",
        "PermissionDenied",
    ),
    (
        Code::ResourceExhausted,
        "RESOURCE_EXHAUSTED",
        "ResourceExhausted",
    ),
    (
        Code::FailedPrecondition,
        "FAILED_PRECONDITION",
        "FailedPrecondition",
    ),
    (Code::Aborted, "ABORTED", "Aborted"),
    (Code::OutOfRange, "OUT_OF_RANGE", "OutOfRange"),
    (Code::Unimplemented, "UNIMPLEMENTED", "Unimplemented"),
    (Code::Internal, "INTERNAL", "Internal"),
    (Code::Unavailable, "UNAVAILABLE", "Unavailable"),
    (Code::DataLoss, "DATA_LOSS", "DataLoss"),
    (Code::Unauthenticated, "UNAUTHENTICATED", "Unauthenticated"),
];

/// A `status_map` key of a gRPC target: a code name (any case) or number.
pub fn parse_code(key: &str) -> Option<u16> {
    if let Ok(n) = key.parse::<u16>() {
        return (usize::from(n) < CODES.len()).then_some(n);
    }
    CODES
        .iter()
        .position(|(_, name, _)| name.eq_ignore_ascii_case(key))
        .and_then(|i| u16::try_from(i).ok())
}

/// The upper-case name of `code` (`UNAVAILABLE`), as `status_map` keys
/// and spans' `error.type` spell it.
pub fn code_name(code: Code) -> &'static str {
    names(code).0
}

fn names(code: Code) -> (&'static str, &'static str) {
    CODES
        .get(code as usize)
        .map_or(("UNKNOWN", "Unknown"), |(_, upper, camel)| (*upper, *camel))
}

/// The default outcome of a status code (`docs/outcomes.md`).
pub fn default_outcome(code: Code) -> MappedOutcome {
    match code {
        Code::Ok => MappedOutcome::Success,
        Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted | Code::Aborted => {
            MappedOutcome::RetryableFailure
        }
        _ => MappedOutcome::PermanentFailure,
    }
}

/// The settlement for the status a call ended with (`Ok` stands for an OK
/// answer).
pub fn decide(
    target: &CallbackTarget,
    result: &Result<(), Status>,
    excerpt_bytes: usize,
) -> Settlement {
    let (code, message, details) = match result {
        Ok(()) => (Code::Ok, String::new(), Vec::new()),
        Err(s) => (s.code(), s.message().to_owned(), s.details().to_vec()),
    };
    let outcome = target
        .mapped_grpc(code as u16)
        .unwrap_or_else(|| default_outcome(code));
    let kind = match outcome {
        MappedOutcome::Success => return Settlement::Success,
        MappedOutcome::RetryableFailure => FailureKind::Retryable,
        MappedOutcome::PermanentFailure => FailureKind::Permanent,
    };
    let (upper, camel) = names(code);
    let url = target.display_url();
    let message = truncate_text(&message, excerpt_bytes);
    let mut detail =
        json!({"url": url, "code": upper, "code_number": code as i32, "message": message});
    if !details.is_empty() {
        detail["details_base64"] =
            json!(base64::engine::general_purpose::STANDARD.encode(&details));
    }
    let text = if message.is_empty() {
        format!("rdq.v1.Handler/Handle at {url}: {upper}")
    } else {
        format!("rdq.v1.Handler/Handle at {url}: {upper}: {message}")
    };
    Settlement::Failure {
        error: ErrorInfo::new(format!("grpc.{camel}"), &text).with_detail(detail),
        kind,
    }
}

/// The connection of one queue's gRPC target, made once per URL and
/// reused (HTTP/2 multiplexes the calls).
#[derive(Default)]
pub struct Connections {
    current: Mutex<Option<(Url, Target)>>,
}

/// A connected byte stream: TCP, or TLS over TCP.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

type Connect = Arc<
    dyn Fn() -> futures::future::BoxFuture<'static, std::io::Result<Box<dyn Io>>> + Send + Sync,
>;

/// One target: how to connect to it, and the HTTP/2 connection in use.
///
/// Calls go straight onto `h2` (no `hyper` client in between): a call
/// queues its HEADERS and its one DATA frame together, so the connection
/// writes them (and those of every call queued meanwhile) in one go.
#[derive(Clone)]
struct Target {
    /// `http[s]://host:port/rdq.v1.Handler/Handle`, every call's URI.
    uri: tonic::codegen::http::Uri,
    connect: Connect,
    live: Arc<Live>,
}

#[derive(Default)]
struct Live {
    /// The connection's handle, and a number telling connections apart.
    send: Mutex<Option<(u64, h2::client::SendRequest<bytes::Bytes>)>>,
    /// Held while connecting, so concurrent calls share one new connection.
    connecting: tokio::sync::Mutex<u64>,
}

impl Target {
    async fn sender(&self) -> Result<(u64, h2::client::SendRequest<bytes::Bytes>), Status> {
        if let Some(live) = self.current() {
            return Ok(live);
        }
        let mut made = self.live.connecting.lock().await;
        if let Some(live) = self.current() {
            return Ok(live);
        }
        let io = (self.connect)()
            .await
            .map_err(|e| Status::unavailable(format!("cannot connect: {e}")))?;
        let (send, connection) = h2::client::handshake(io)
            .await
            .map_err(|e| Status::unavailable(format!("HTTP/2 handshake failed: {e}")))?;
        *made += 1;
        let id = *made;
        let live = Arc::clone(&self.live);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "a gRPC callback connection ended");
            }
            forget(&live, id);
        });
        *self
            .live
            .send
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((id, send.clone()));
        Ok((id, send))
    }

    fn current(&self) -> Option<(u64, h2::client::SendRequest<bytes::Bytes>)> {
        self.live
            .send
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Drops connection `id` from `live` (a newer one stays).
fn forget(live: &Live, id: u64) {
    let mut send = live.send.lock().unwrap_or_else(PoisonError::into_inner);
    if send.as_ref().is_some_and(|(current, _)| *current == id) {
        *send = None;
    }
}

impl Connections {
    fn get(&self, url: &Url, policy: &AddressPolicy) -> Result<Target, String> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((u, target)) = current.as_ref()
            && u == url
        {
            return Ok(target.clone());
        }
        let host = url.host_str().unwrap_or_default().to_owned();
        let tls = url.scheme() == TLS_SCHEME;
        let port = match url.port() {
            Some(port) => port,
            None if tls => 443,
            None => return Err("a grpc:// URL needs a port".into()),
        };
        let policy = *policy;
        let tcp = move |host: String| async move {
            let name = host.trim_start_matches('[').trim_end_matches(']');
            let addrs = match name.parse::<std::net::IpAddr>() {
                Ok(ip) => {
                    policy.check(ip).map_err(std::io::Error::other)?;
                    vec![std::net::SocketAddr::new(ip, port)]
                }
                Err(_) => policy
                    .resolve(name, port)
                    .await
                    .map_err(std::io::Error::other)?,
            };
            let stream = tokio::net::TcpStream::connect(&addrs[..]).await?;
            stream.set_nodelay(true)?;
            Ok::<_, std::io::Error>(stream)
        };
        let connect: Connect = if tls {
            tls_connect(host.clone(), tcp)?
        } else {
            let host = host.clone();
            Arc::new(move || {
                let connected = tcp(host.clone());
                Box::pin(async move { Ok(Box::new(connected.await?) as Box<dyn Io>) })
            })
        };
        let scheme = if tls { "https" } else { "http" };
        let uri = format!("{scheme}://{host}:{port}/rdq.v1.Handler/Handle")
            .parse()
            .map_err(|e| format!("not a call URI: {e}"))?;
        let target = Target {
            uri,
            connect,
            live: Arc::default(),
        };
        *current = Some((url.clone(), target.clone()));
        Ok(target)
    }
}

/// Connections that are TLS (ALPN `h2`) over what `tcp` opens, verified
/// against the system's roots (`SSL_CERT_FILE` names another bundle) and
/// the target's host name.
#[cfg(feature = "https")]
fn tls_connect<C, F>(host: String, tcp: C) -> Result<Connect, String>
where
    C: Fn(String) -> F + Send + Sync + Clone + 'static,
    F: std::future::Future<Output = std::io::Result<tokio::net::TcpStream>> + Send + 'static,
{
    let mut settings = rdq_tls::client::ClientTls::new();
    settings.alpn = vec![b"h2".to_vec()];
    let tls = settings.connector().map_err(|e| e.to_string())?;
    Ok(Arc::new(move || {
        let (tls, host) = (tls.clone(), host.clone());
        let connected = tcp(host.clone());
        Box::pin(async move {
            let stream = tls.connect(&host, connected.await?).await?;
            Ok(Box::new(stream) as Box<dyn Io>)
        })
    }))
}

#[cfg(not(feature = "https"))]
fn tls_connect<C>(_: String, _: C) -> Result<Connect, String> {
    Err("this build has no TLS support (rdq-server's `https` feature)".into())
}

/// Calls `rdq.v1.Handler/Handle` with `env` (and `traceparent` as
/// metadata) and maps the answer: the status code the call ended with and
/// the settlement.
pub async fn call(
    connections: &Arc<Connections>,
    policy: &AddressPolicy,
    target: &CallbackTarget,
    env: &Envelope,
    attempt: u32,
    traceparent: Option<&str>,
    excerpt_bytes: usize,
) -> (Code, Settlement) {
    let result = match connections.get(&target.url, policy) {
        Ok(conn) => handle(conn, target, env, attempt, traceparent).await,
        Err(why) => Err(Status::unavailable(why)),
    };
    let code = result.as_ref().err().map_or(Code::Ok, Status::code);
    (code, decide(target, &result, excerpt_bytes))
}

async fn handle(
    target_conn: Target,
    target: &CallbackTarget,
    env: &Envelope,
    attempt: u32,
    traceparent: Option<&str>,
) -> Result<(), Status> {
    let message = rdq_grpc::pb::HandleRequest {
        envelope: Some(rdq_grpc::codec::to_proto(env)),
    };
    let mut request = tonic::codegen::http::Request::builder()
        .method("POST")
        .uri(target_conn.uri.clone())
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", grpc_timeout(target.timeout))
        .header("user-agent", concat!("rdq/", env!("CARGO_PKG_VERSION")))
        .body(())
        .map_err(|e| Status::internal(format!("cannot build the call: {e}")))?;
    let headers = request.headers_mut();
    // The target's headers as ASCII metadata, leaving out what gRPC and
    // HTTP/2 reserve (as tonic's metadata does).
    for (name, value) in &target.headers {
        let reserved = matches!(
            name.as_str(),
            "te" | "content-type"
                | "user-agent"
                | "host"
                | "connection"
                | "keep-alive"
                | "proxy-connection"
                | "transfer-encoding"
                | "upgrade"
        ) || name.as_str().starts_with("grpc-");
        if !reserved && value.to_str().is_ok() {
            headers.insert(name.clone(), value.clone());
        }
    }
    // Values unique to each call are sent as never-indexed literals (RFC
    // 7541 §6.2.3), so they do not push the connection's repeated headers
    // out of the HPACK table on either side.
    let mut unique = |name: &'static str, value: &str| {
        if let Ok(mut v) = tonic::codegen::http::HeaderValue::from_str(value) {
            v.set_sensitive(true);
            headers.insert(name, v);
        }
    };
    unique(super::dispatcher::TASK_ID_HEADER, &env.id.to_string());
    if let Some(tp) = traceparent {
        unique("traceparent", tp);
    }
    if let Ok(v) = tonic::codegen::http::HeaderValue::from_str(&attempt.to_string()) {
        headers.insert(super::dispatcher::ATTEMPT_HEADER, v);
    }
    let body = frame(&message)?;
    let started = std::time::Instant::now();
    let overrun = || {
        Status::deadline_exceeded(format!(
            "no answer within {} ms",
            target.timeout.as_millis()
        ))
    };
    match tokio::time::timeout(target.timeout, exchange(&target_conn, request, body)).await {
        Ok(Err(status))
            if status.code() == Code::Cancelled && started.elapsed() >= target.timeout =>
        {
            Err(overrun())
        }
        Ok(result) => result,
        Err(_) => Err(overrun()),
    }
}

/// `message` as one gRPC length-prefixed message: uncompressed, its
/// length as four big-endian bytes, then the message.
fn frame(message: &impl prost::Message) -> Result<bytes::Bytes, Status> {
    let len = message.encoded_len();
    let prefix = u32::try_from(len)
        .map_err(|_| Status::internal(format!("a task of {len} bytes is too large to send")))?;
    let mut body = Vec::with_capacity(5 + len);
    body.push(0);
    body.extend_from_slice(&prefix.to_be_bytes());
    message
        .encode(&mut body)
        .map_err(|e| Status::internal(format!("cannot encode the task: {e}")))?;
    Ok(body.into())
}

/// The `grpc-timeout` value for `timeout`: whole milliseconds (at most
/// eight digits, as the header allows), seconds beyond that.
fn grpc_timeout(timeout: std::time::Duration) -> String {
    let ms = timeout.as_millis();
    if ms < 100_000_000 {
        format!("{ms}m")
    } else {
        format!("{}S", timeout.as_secs().min(99_999_999))
    }
}

/// One call on the target's connection: the request, its message, and the
/// status it ended with (`Ok` for OK).
async fn exchange(
    target: &Target,
    request: tonic::codegen::http::Request<()>,
    message: bytes::Bytes,
) -> Result<(), Status> {
    let (id, send) = target.sender().await?;
    let mut send = match send.ready().await {
        Ok(send) => send,
        Err(e) => {
            forget(&target.live, id);
            return Err(from_h2(&e));
        }
    };
    let (response, mut stream) = send.send_request(request, false).map_err(|e| {
        forget(&target.live, id);
        from_h2(&e)
    })?;
    stream.send_data(message, true).map_err(|e| from_h2(&e))?;
    let (parts, mut body) = response.await.map_err(|e| from_h2(&e))?.into_parts();
    // A trailers-only answer carries its status in the headers.
    if let Some(status) = Status::from_header_map(&parts.headers) {
        return ok_or(status);
    }
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| from_h2(&e))?;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.map_err(|e| from_h2(&e))?;
    match trailers.as_ref().and_then(Status::from_header_map) {
        Some(status) => ok_or(status),
        None => Err(from_http(parts.status)),
    }
}

fn ok_or(status: Status) -> Result<(), Status> {
    if status.code() == Code::Ok {
        Ok(())
    } else {
        Err(status)
    }
}

/// The status of an answer without `grpc-status`, from its HTTP status
/// (gRPC's "HTTP to gRPC status code mapping").
fn from_http(status: tonic::codegen::http::StatusCode) -> Status {
    let code = match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(
        code,
        format!("the answer (HTTP {status}) carried no grpc-status"),
    )
}

/// The status of a call that HTTP/2 ended: as gRPC maps its error codes.
fn from_h2(e: &h2::Error) -> Status {
    let code = match e.reason() {
        _ if e.is_io() || e.is_go_away() => Code::Unavailable,
        Some(h2::Reason::REFUSED_STREAM) => Code::Unavailable,
        Some(h2::Reason::CANCEL) => Code::Cancelled,
        Some(h2::Reason::ENHANCE_YOUR_CALM) => Code::ResourceExhausted,
        Some(h2::Reason::INADEQUATE_SECURITY) => Code::PermissionDenied,
        _ => Code::Internal,
    };
    Status::new(code, format!("HTTP/2: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_the_flag_the_length_and_the_message() {
        let message = rdq_grpc::pb::HandleResponse {};
        assert_eq!(&frame(&message).unwrap()[..], &[0, 0, 0, 0, 0]);
        let request = rdq_grpc::pb::HandleRequest {
            envelope: Some(rdq_grpc::pb::Envelope::default()),
        };
        let bytes = frame(&request).unwrap();
        let encoded = prost::Message::encode_to_vec(&request);
        assert_eq!(bytes[0], 0);
        assert_eq!(
            &bytes[1..5],
            &u32::try_from(encoded.len()).unwrap().to_be_bytes()
        );
        assert_eq!(&bytes[5..], &encoded[..]);
    }

    #[test]
    fn grpc_timeout_is_whole_milliseconds_then_seconds() {
        assert_eq!(grpc_timeout(std::time::Duration::from_secs(10)), "10000m");
        assert_eq!(grpc_timeout(std::time::Duration::from_micros(1500)), "1m");
        assert_eq!(
            grpc_timeout(std::time::Duration::from_millis(99_999_999)),
            "99999999m"
        );
        assert_eq!(
            grpc_timeout(std::time::Duration::from_secs(200_000)),
            "200000S"
        );
    }

    #[test]
    fn an_answer_without_grpc_status_maps_from_its_http_status() {
        let code =
            |n: u16| from_http(tonic::codegen::http::StatusCode::from_u16(n).unwrap()).code();
        assert_eq!(code(400), Code::Internal);
        assert_eq!(code(401), Code::Unauthenticated);
        assert_eq!(code(403), Code::PermissionDenied);
        assert_eq!(code(404), Code::Unimplemented);
        for n in [429, 502, 503, 504] {
            assert_eq!(code(n), Code::Unavailable, "{n}");
        }
        assert_eq!(code(200), Code::Unknown);
        assert_eq!(code(500), Code::Unknown);
    }
}
