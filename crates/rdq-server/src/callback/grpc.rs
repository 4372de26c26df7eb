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
use hyper_util::rt::TokioIo;
use rdq_engine::{FailureKind, Settlement};
use rdq_envelope::{Envelope, ErrorInfo, truncate_text};
use rdq_grpc::pb::handler_client::HandlerClient;
use serde_json::json;
use tonic::transport::{Channel, Endpoint};
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

/// The channel of one queue's gRPC target, made once per URL and reused
/// (HTTP/2 multiplexes the calls).
#[derive(Default)]
pub struct Channels {
    current: Mutex<Option<(Url, Channel)>>,
}

impl Channels {
    fn get(&self, url: &Url, policy: &AddressPolicy) -> Result<Channel, String> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((u, ch)) = current.as_ref()
            && u == url
        {
            return Ok(ch.clone());
        }
        let host = url.host_str().unwrap_or_default().to_owned();
        let tls = url.scheme() == TLS_SCHEME;
        let port = match url.port() {
            Some(port) => port,
            None if tls => 443,
            None => return Err("a grpc:// URL needs a port".into()),
        };
        let endpoint = Endpoint::from_shared(format!("http://{host}:{port}"))
            .map_err(|e| e.to_string())?
            .tcp_nodelay(true);
        let policy = *policy;
        let connect = move |host: String| async move {
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
        let channel = if tls {
            tls_channel(endpoint, host, connect)?
        } else {
            endpoint.connect_with_connector_lazy(tower::service_fn(
                move |_uri: tonic::transport::Uri| {
                    let connected = connect(host.clone());
                    async move { Ok::<_, std::io::Error>(TokioIo::new(connected.await?)) }
                },
            ))
        };
        *current = Some((url.clone(), channel.clone()));
        Ok(channel)
    }
}

/// A channel whose connections are TLS (ALPN `h2`) over what `connect`
/// opens, verified against the system's roots (`SSL_CERT_FILE` names
/// another bundle) and the target's host name.
#[cfg(feature = "https")]
fn tls_channel<C, F>(endpoint: Endpoint, host: String, connect: C) -> Result<Channel, String>
where
    C: Fn(String) -> F + Send + Sync + Clone + 'static,
    F: std::future::Future<Output = std::io::Result<tokio::net::TcpStream>> + Send + 'static,
{
    let mut settings = rdq_tls::client::ClientTls::new();
    settings.alpn = vec![b"h2".to_vec()];
    let tls = settings.connector().map_err(|e| e.to_string())?;
    Ok(endpoint.connect_with_connector_lazy(tower::service_fn(
        move |_uri: tonic::transport::Uri| {
            let (tls, host) = (tls.clone(), host.clone());
            let connected = connect(host.clone());
            async move {
                let stream = tls.connect(&host, connected.await?).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        },
    )))
}

#[cfg(not(feature = "https"))]
fn tls_channel<C>(_: Endpoint, _: String, _: C) -> Result<Channel, String> {
    Err("this build has no TLS support (rdq-server's `https` feature)".into())
}

/// Calls `rdq.v1.Handler/Handle` with `env` (and `traceparent` as
/// metadata) and maps the answer: the status code the call ended with and
/// the settlement.
pub async fn call(
    channels: &Arc<Channels>,
    policy: &AddressPolicy,
    target: &CallbackTarget,
    env: &Envelope,
    attempt: u32,
    traceparent: Option<&str>,
    excerpt_bytes: usize,
) -> (Code, Settlement) {
    let result = match channels.get(&target.url, policy) {
        Ok(channel) => handle(channel, target, env, attempt, traceparent).await,
        Err(why) => Err(Status::unavailable(why)),
    };
    let code = result.as_ref().err().map_or(Code::Ok, Status::code);
    (code, decide(target, &result, excerpt_bytes))
}

async fn handle(
    channel: Channel,
    target: &CallbackTarget,
    env: &Envelope,
    attempt: u32,
    traceparent: Option<&str>,
) -> Result<(), Status> {
    let mut request = tonic::Request::new(rdq_grpc::pb::HandleRequest {
        envelope: Some(rdq_grpc::codec::to_proto(env)),
    });
    request.set_timeout(target.timeout);
    let md = request.metadata_mut();
    for (name, value) in &target.headers {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::AsciiMetadataKey::from_bytes(name.as_str().as_bytes()),
            tonic::metadata::AsciiMetadataValue::try_from(value.as_bytes()),
        ) {
            md.insert(k, v);
        }
    }
    // Values unique to each call are sent as never-indexed literals (RFC
    // 7541 §6.2.3), so they do not push the connection's repeated headers
    // out of the HPACK table on either side.
    if let Ok(mut v) = env
        .id
        .to_string()
        .parse::<tonic::metadata::AsciiMetadataValue>()
    {
        v.set_sensitive(true);
        md.insert(super::dispatcher::TASK_ID_HEADER, v);
    }
    if let Ok(v) = attempt.to_string().parse() {
        md.insert(super::dispatcher::ATTEMPT_HEADER, v);
    }
    if let Some(mut v) =
        traceparent.and_then(|v| v.parse::<tonic::metadata::AsciiMetadataValue>().ok())
    {
        v.set_sensitive(true);
        md.insert("traceparent", v);
    }
    let mut client = HandlerClient::new(channel);
    let started = std::time::Instant::now();
    let overrun = || {
        Status::deadline_exceeded(format!(
            "no answer within {} ms",
            target.timeout.as_millis()
        ))
    };
    match tokio::time::timeout(target.timeout, client.handle(request)).await {
        Ok(Ok(_)) => Ok(()),
        // The client gives up at the deadline with CANCELLED: that is the
        // deadline passing, not the receiver cancelling.
        Ok(Err(status))
            if status.code() == Code::Cancelled && started.elapsed() >= target.timeout =>
        {
            Err(overrun())
        }
        Ok(Err(status)) => Err(status),
        Err(_) => Err(overrun()),
    }
}
