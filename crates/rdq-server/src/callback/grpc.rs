//! gRPC callback targets (`docs/grpc.md`, "gRPC callbacks"): a queue whose
//! callback URL is `grpc://host:port` (plaintext HTTP/2) or
//! `grpcs://host[:port]` (TLS, port 443 by default) gets each task as a
//! call to `rdq.v1.Handler/Handle`, made with tonic's generated
//! [`HandlerClient`] over hyper's HTTP/2 client: one connection per
//! target that every call of the queue shares (multiplexed), made on the
//! first call and made again after it closes ([`Channels`]).
//!
//! A call carries the target's headers, `rdq-task-id`, `rdq-attempt` and
//! `traceparent` (the call's own span when tracing is on, else the task's)
//! as metadata, and the target's timeout as its deadline (`grpc-timeout`);
//! past the deadline the call is abandoned as `DEADLINE_EXCEEDED`. A
//! connection that cannot be made, or that breaks before the receiver
//! answers, is `UNAVAILABLE`, as gRPC clients report it. What each status
//! settles is [`super::mapping::decide_grpc`].
//!
//! Every connection resolves the host through the `[callbacks]` address
//! rules and connects only to the addresses that passed, as HTTP targets
//! do; a `grpcs://` connection is TLS (`rdq-tls`, ALPN `h2`) verified
//! against the system's roots and the target's host name.

use std::error::Error as StdError;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rdq_envelope::Envelope;
use rdq_grpc::pb::HandleRequest;
use rdq_grpc::pb::handler_client::HandlerClient;
use tonic::codegen::http::header::USER_AGENT;
use tonic::codegen::http::{HeaderMap, HeaderValue, Uri};
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use url::Url;

use super::address::AddressPolicy;
use super::scheme::{GRPCS, GRPCS_DEFAULT_PORT};
use super::target::{ATTEMPT_HEADER, CallbackTarget, TASK_ID_HEADER};

/// The HTTP/2 connection of one queue's gRPC target, made on the first
/// call, shared (multiplexed) by every call while the URL stays the same,
/// and made again when it has closed.
///
/// tonic's generated client runs on hyper's HTTP/2 connection directly
/// rather than on a tonic `Channel`: the channel decides TLS from the URI's
/// scheme and refuses `https` unless tonic's own TLS stack is built in,
/// while rdq makes every TLS connection with `rdq-tls`; what the channel
/// adds beyond that, dialling again after a break, is these few lines.
#[derive(Default)]
pub struct Channels {
    current: Mutex<Option<(Url, Target)>>,
    /// Held while a connection is made, so concurrent calls make one.
    dialing: tokio::sync::Mutex<()>,
}

/// One HTTP/2 connection's request handle.
type Connection = http2::SendRequest<tonic::body::Body>;

/// A live connection and the origin every call's path is joined to.
#[derive(Clone)]
struct Target {
    connection: Connection,
    origin: Uri,
}

impl Channels {
    /// The live connection to `url`, made now when there is none (or it
    /// has closed, or the URL changed).
    async fn get(&self, url: &Url, policy: AddressPolicy) -> Result<Target, Status> {
        if let Some(target) = self.live(url) {
            return Ok(target);
        }
        let _dialing = self.dialing.lock().await;
        if let Some(target) = self.live(url) {
            return Ok(target);
        }
        let target = Target {
            origin: origin(url)?,
            connection: connect(url, policy).await?,
        };
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((url.clone(), target.clone()));
        Ok(target)
    }

    fn live(&self, url: &Url) -> Option<Target> {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        match current.as_ref() {
            Some((open, target)) if open == url && !target.connection.is_closed() => {
                Some(target.clone())
            }
            _ => None,
        }
    }
}

/// Makes the HTTP/2 connection to a `grpc://` or `grpcs://` URL, through
/// the address rules (and TLS for `grpcs://`), and runs it on a task of
/// its own.
async fn connect(url: &Url, policy: AddressPolicy) -> Result<Connection, Status> {
    let host = url.host_str().unwrap_or_default().to_owned();
    let tls = url.scheme() == GRPCS;
    let port = match url.port() {
        Some(port) => port,
        None if tls => GRPCS_DEFAULT_PORT,
        None => return Err(Status::unavailable("a grpc:// URL needs a port")),
    };
    // Brackets belong to the URL, not to the address or the TLS name.
    let name = host.trim_start_matches('[').trim_end_matches(']');
    let tls = if tls {
        Some(tls_connector().map_err(Status::unavailable)?)
    } else {
        None
    };
    let unavailable = |e: std::io::Error| Status::unavailable(format!("connect: {e}"));
    let tcp = connect_checked(name, port, policy)
        .await
        .map_err(unavailable)?;
    let io: Box<dyn Io> = match tls {
        Some(tls) => Box::new(tls.connect(name, tcp).await.map_err(unavailable)?),
        None => Box::new(tcp),
    };
    let (connection, driver) = http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| Status::unavailable(format!("HTTP/2 handshake: {e}")))?;
    tokio::spawn(async move {
        if let Err(e) = driver.await {
            tracing::debug!(error = %e, "a gRPC callback connection ended");
        }
    });
    Ok(connection)
}

/// What a call's transport fails with (tonic finds a status in its chain).
type BoxError = Box<dyn StdError + Send + Sync>;

/// The `user-agent` of every call.
const RDQ_USER_AGENT: &str = concat!("rdq/", env!("CARGO_PKG_VERSION"));

/// The base URI every call's path is joined to.
fn origin(url: &Url) -> Result<Uri, Status> {
    let scheme = if url.scheme() == GRPCS {
        "https"
    } else {
        "http"
    };
    let host = url.host_str().unwrap_or_default();
    let authority = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    format!("{scheme}://{authority}")
        .parse()
        .map_err(|e| Status::unavailable(format!("not a call URI: {e}")))
}

/// A connected byte stream: TCP, or TLS over TCP.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// A TCP connection to `name:port`, made only to addresses the policy allows.
async fn connect_checked(
    name: &str,
    port: u16,
    policy: AddressPolicy,
) -> std::io::Result<tokio::net::TcpStream> {
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
    Ok(stream)
}

/// TLS with ALPN `h2`, verified against the system's roots
/// (`SSL_CERT_FILE` names another bundle) and the target's host name.
#[cfg(feature = "https")]
fn tls_connector() -> Result<rdq_tls::client::Connector, String> {
    let mut settings = rdq_tls::client::ClientTls::new();
    settings.alpn = vec![b"h2".to_vec()];
    settings.connector().map_err(|e| e.to_string())
}

/// Without the `https` feature there is no TLS to connect with.
#[cfg(not(feature = "https"))]
#[derive(Clone)]
enum NoTls {}

#[cfg(not(feature = "https"))]
impl NoTls {
    async fn connect(
        &self,
        _: &str,
        _: tokio::net::TcpStream,
    ) -> std::io::Result<tokio::net::TcpStream> {
        match *self {}
    }
}

#[cfg(not(feature = "https"))]
fn tls_connector() -> Result<NoTls, String> {
    Err("this build has no TLS support (rdq-server's `https` feature)".into())
}

/// Calls `rdq.v1.Handler/Handle` with `env` on the target's channel: `Ok`
/// for an `OK` answer, else the status the call ended with.
pub async fn call(
    channels: &Channels,
    policy: AddressPolicy,
    target: &CallbackTarget,
    env: &Envelope,
    attempt: u32,
    traceparent: Option<&str>,
) -> Result<(), Status> {
    let Target { connection, origin } = channels.get(&target.url, policy).await?;
    let mut request = tonic::Request::from_parts(
        metadata(target, env, attempt, traceparent),
        tonic::Extensions::default(),
        HandleRequest {
            envelope: Some(rdq_grpc::codec::to_proto(env)),
        },
    );
    request.set_timeout(target.timeout);
    let service = tower::service_fn(move |request| send(connection.clone(), request));
    let mut client = HandlerClient::with_origin(service, origin);
    let started = Instant::now();
    let overrun = || {
        Status::deadline_exceeded(format!(
            "no answer within {} ms",
            target.timeout.as_millis()
        ))
    };
    match tokio::time::timeout(target.timeout, client.handle(request)).await {
        Ok(Ok(_)) => Ok(()),
        // tonic ends a call past its `grpc-timeout` as CANCELLED.
        Ok(Err(status))
            if status.code() == Code::Cancelled && started.elapsed() >= target.timeout =>
        {
            Err(overrun())
        }
        Ok(Err(status)) => Err(transport_status(status)),
        Err(_) => Err(overrun()),
    }
}

/// Sends one call's request on `connection`, with rdq's `user-agent`.
///
/// tonic encodes a unary request as a stream that ends after its one
/// message, which hyper sends as a DATA frame and then an empty one to end
/// the stream. Collected first (at once: the message is already encoded)
/// into one complete body, the message and the stream's end go out as a
/// single DATA frame.
async fn send(
    mut connection: Connection,
    request: tonic::codegen::http::Request<tonic::body::Body>,
) -> Result<tonic::codegen::http::Response<hyper::body::Incoming>, BoxError> {
    let (mut parts, body) = request.into_parts();
    parts
        .headers
        .insert(USER_AGENT, HeaderValue::from_static(RDQ_USER_AGENT));
    let body = tonic::body::Body::new(Full::new(body.collect().await?.to_bytes()));
    let request = tonic::codegen::http::Request::from_parts(parts, body);
    Ok(connection.send_request(request).await?)
}

/// The metadata of one call: the target's headers as ASCII metadata
/// (leaving out what gRPC and HTTP/2 reserve), then rdq's own.
fn metadata(
    target: &CallbackTarget,
    env: &Envelope,
    attempt: u32,
    traceparent: Option<&str>,
) -> MetadataMap {
    let mut headers = HeaderMap::with_capacity(target.headers.len() + 3);
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
        if let Ok(mut v) = HeaderValue::from_str(value) {
            v.set_sensitive(true);
            headers.insert(name, v);
        }
    };
    unique(TASK_ID_HEADER, &env.id.to_string());
    if let Some(tp) = traceparent {
        unique("traceparent", tp);
    }
    headers.insert(ATTEMPT_HEADER, HeaderValue::from(attempt));
    MetadataMap::from_headers(headers)
}

/// A status the receiver never sent (the call broke in transport: tonic
/// keeps the error as the status's source), recast as gRPC's HTTP/2
/// mapping has it: a broken connection is `UNAVAILABLE`, and a stream
/// reset gets the code of its reason. A status the receiver sent has no
/// source and stays as it is.
fn transport_status(status: Status) -> Status {
    if !matches!(
        status.code(),
        Code::Unknown | Code::Cancelled | Code::Internal
    ) {
        return status;
    }
    match status.source().and_then(transport_code) {
        Some(code) => Status::new(code, status.message().to_owned()),
        None => status,
    }
}

/// The code of the first transport error in `e`'s chain, if any.
fn transport_code(e: &(dyn StdError + 'static)) -> Option<Code> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            return Some(match h2.reason() {
                _ if h2.is_io() || h2.is_go_away() => Code::Unavailable,
                Some(h2::Reason::REFUSED_STREAM) => Code::Unavailable,
                Some(h2::Reason::CANCEL) => Code::Cancelled,
                Some(h2::Reason::ENHANCE_YOUR_CALM) => Code::ResourceExhausted,
                Some(h2::Reason::INADEQUATE_SECURITY) => Code::PermissionDenied,
                _ => Code::Internal,
            });
        }
        if let Some(hyper) = e.downcast_ref::<hyper::Error>()
            && (hyper.is_canceled() || hyper.is_closed() || hyper.is_incomplete_message())
        {
            return Some(Code::Unavailable);
        }
        if e.is::<std::io::Error>() {
            return Some(Code::Unavailable);
        }
        next = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broken(e: impl StdError + Send + Sync + 'static) -> Status {
        Status::from_error(Box::new(e))
    }

    /// A gRPC connection goes only to addresses the policy allows: literal
    /// ones are checked, names resolve through the checked lookup.
    #[tokio::test]
    async fn connections_are_made_only_to_allowed_addresses() {
        let open = AddressPolicy {
            loopback: true,
            private: true,
        };
        let strict = AddressPolicy {
            loopback: false,
            private: false,
        };
        for (name, policy, why) in [
            ("169.254.169.254", open, "never a callback target"),
            ("fd00:ec2::254", open, "never a callback target"),
            ("::ffff:169.254.169.254", open, "never a callback target"),
            (
                "metadata.google.internal",
                open,
                "cloud metadata service name",
            ),
            ("127.0.0.1", strict, "allow_loopback is off"),
            ("localhost", strict, "allow_loopback is off"),
        ] {
            let err = connect_checked(name, 80, policy).await.unwrap_err();
            assert!(err.to_string().contains(why), "{name}: {err}");
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let stream = connect_checked("localhost", port, open).await.unwrap();
        assert!(stream.peer_addr().unwrap().ip().is_loopback());
    }

    #[test]
    fn a_call_broken_in_transport_is_unavailable_or_its_reset_reason() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(transport_status(broken(refused)).code(), Code::Unavailable);
        let code = |reason| transport_status(broken(h2::Error::from(reason))).code();
        assert_eq!(code(h2::Reason::REFUSED_STREAM), Code::Unavailable);
        assert_eq!(code(h2::Reason::CANCEL), Code::Cancelled);
        assert_eq!(code(h2::Reason::ENHANCE_YOUR_CALM), Code::ResourceExhausted);
        assert_eq!(
            code(h2::Reason::INADEQUATE_SECURITY),
            Code::PermissionDenied
        );
        assert_eq!(code(h2::Reason::PROTOCOL_ERROR), Code::Internal);
    }

    #[test]
    fn a_status_the_receiver_sent_is_kept() {
        for code in [
            Code::Unknown,
            Code::Cancelled,
            Code::Internal,
            Code::NotFound,
        ] {
            let sent = transport_status(Status::new(code, "from the receiver"));
            assert_eq!(sent.code(), code);
            assert_eq!(sent.message(), "from the receiver");
        }
    }

    #[test]
    fn metadata_carries_the_targets_headers_and_rdqs_but_not_reserved_ones() {
        let config = rdq_engine::QueueConfig::default().with_section(
            "callback",
            serde_json::json!({"url": "grpc://127.0.0.1:9", "headers": {
                "x-tenant": "acme", "keep-alive": "5", "grpc-encoding": "gzip"}}),
        );
        let settings = crate::callback::CallbackSettings::default();
        let target = CallbackTarget::from_config(&config, &settings)
            .unwrap()
            .unwrap();
        let env = Envelope::new(
            "q",
            "h",
            b"{}",
            "application/json",
            rdq_envelope::Timestamp::now(),
        );
        let md = metadata(&target, &env, 3, Some("00-tp")).into_headers();
        assert_eq!(md["x-tenant"], "acme");
        assert_eq!(md[TASK_ID_HEADER], env.id.to_string().as_str());
        assert!(md[TASK_ID_HEADER].is_sensitive());
        assert_eq!(md[ATTEMPT_HEADER], "3");
        assert_eq!(md["traceparent"], "00-tp");
        assert!(!md.contains_key("keep-alive"));
        assert!(!md.contains_key("grpc-encoding"));
    }
}
