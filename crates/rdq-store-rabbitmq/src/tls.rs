//! `amqps://`: the store's AMQP connection over rdq's TLS stack (`rdq-tls`,
//! rustls with aws-lc-rs), not over lapin's own TLS features
//! (`docs/stores/rabbitmq.md`, "TLS").
//!
//! Why not lapin's: its rustls support comes through `tcp-stream` and
//! `rustls-connector` with a TLS configuration of their own (PKCS#12
//! identities, no server-name override, their own choice of roots), a second
//! TLS set-up beside the one every other rdq connection uses. Instead the
//! store hands lapin a connect function (`Connection::connector`) that dials
//! TCP and runs rdq's handshake; lapin speaks AMQP over the result. lapin
//! asks for the stream as its runtime's TCP stream type, so the runtime is
//! tokio's with one change, [`TlsKit`]: its stream type is [`Transport`],
//! which may be a TLS session. `amqp://` URLs connect exactly as before.
//!
//! The URL's query names the files and the name: `tls_ca` (the CA the
//! broker's chain must lead to, instead of the system's roots), `tls_cert`
//! and `tls_key` (a client certificate, for `fail_if_no_peer_cert` or the
//! EXTERNAL mechanism), `tls_server_name` (the name the broker's certificate
//! must carry, when it is not the URL's host).

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::unix::io::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_compat::Compat;
use async_rs::traits::{Executor, Reactor, RuntimeKit};
use async_rs::util::Task;
use async_rs::{Runtime, Tokio};
use futures::{AsyncRead, AsyncWrite, Stream};
use lapin::tcp::AsyncTcpStream;
use lapin::uri::AMQPUri;
use lapin::{Connection, ConnectionProperties};
use rdq_tls::client::{ClientIdentity, ClientTls, Roots};
use tokio::net::TcpStream;

use crate::error::RabbitError;

/// The TLS parameters of a URL, as given.
#[derive(Debug, Default)]
pub(crate) struct TlsParams {
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    server_name: Option<String>,
}

impl TlsParams {
    /// Takes `key=value` if it is a TLS parameter.
    pub(crate) fn take(&mut self, key: &str, value: &str) -> bool {
        match key {
            "tls_ca" => self.ca = Some(PathBuf::from(value)),
            "tls_cert" => self.cert = Some(PathBuf::from(value)),
            "tls_key" => self.key = Some(PathBuf::from(value)),
            "tls_server_name" => self.server_name = Some(value.to_owned()),
            _ => return false,
        }
        true
    }

    /// The TLS set-up of an `amqps://` URL (`tls`), checked now (files read,
    /// key against certificate); `None` for `amqp://`, which takes no TLS
    /// parameter.
    pub(crate) fn resolve(self, tls: bool) -> Result<Option<ClientTls>, RabbitError> {
        let given = self.ca.is_some()
            || self.cert.is_some()
            || self.key.is_some()
            || self.server_name.is_some();
        if !tls {
            return if given {
                Err(RabbitError::InvalidUrl(
                    "tls_ca, tls_cert, tls_key and tls_server_name apply to amqps:// URLs only"
                        .into(),
                ))
            } else {
                Ok(None)
            };
        }
        let mut client = ClientTls::new();
        client.roots = self.ca.map_or(Roots::System, Roots::CaFile);
        client.identity = match (self.cert, self.key) {
            (Some(certificate), Some(key)) => Some(ClientIdentity { certificate, key }),
            (None, None) => None,
            _ => {
                return Err(RabbitError::InvalidUrl(
                    "tls_cert and tls_key go together".into(),
                ));
            }
        };
        client.server_name = self.server_name;
        client.alpn = vec![b"amqp".to_vec()];
        client
            .connector()
            .map_err(|e| RabbitError::InvalidUrl(format!("RabbitMQ TLS settings: {e}")))?;
        Ok(Some(client))
    }
}

/// Connects to the broker at `uri`: plain for `tls: None` (lapin's own
/// path), else over a TLS session set up as `tls` says. The certificate
/// files are read again at every dial, so a renewed client certificate is
/// used from the next reconnection on.
pub(crate) async fn connect(
    uri: &str,
    properties: ConnectionProperties,
    tls: Option<&ClientTls>,
) -> Result<Connection, RabbitError> {
    let Some(tls) = tls else {
        return Ok(Connection::connect(uri, properties).await?);
    };
    let connector = tls
        .connector()
        .map_err(|e| RabbitError::InvalidUrl(format!("RabbitMQ TLS settings: {e}")))?;
    let uri: AMQPUri = uri
        .parse()
        .map_err(|e: String| RabbitError::InvalidUrl(e))?;
    let runtime = Runtime::new(TlsKit(Tokio::current()));
    let dial = async move |uri: AMQPUri, _runtime: Runtime<TlsKit>| {
        let host = uri.authority.host.clone();
        let tcp = TcpStream::connect((host.as_str(), uri.authority.port));
        let tcp = match uri.query.connection_timeout {
            Some(ms) => tokio::time::timeout(Duration::from_millis(ms), tcp)
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connecting timed out"))??,
            None => tcp.await?,
        };
        tcp.set_nodelay(true)?;
        let session = connector.connect(&host, tcp).await?;
        Ok(AsyncTcpStream::Plain(Transport::Tls(Box::new(
            Compat::new(session),
        ))))
    };
    Ok(Connection::connector(uri, runtime, dial, properties).await?)
}

/// tokio's runtime kit for lapin, with [`Transport`] as its TCP stream.
#[derive(Clone, Debug)]
pub(crate) struct TlsKit(Tokio);

impl RuntimeKit for TlsKit {}

impl Executor for TlsKit {
    type Task<T: Send + 'static> = <Tokio as Executor>::Task<T>;

    fn block_on<T, F: Future<Output = T>>(&self, f: F) -> T {
        self.0.block_on(f)
    }

    fn spawn<T: Send + 'static, F: Future<Output = T> + Send + 'static>(
        &self,
        f: F,
    ) -> Task<Self::Task<T>> {
        self.0.spawn(f)
    }

    fn spawn_blocking<T: Send + 'static, F: FnOnce() -> T + Send + 'static>(
        &self,
        f: F,
    ) -> Task<Self::Task<T>> {
        self.0.spawn_blocking(f)
    }
}

impl Reactor for TlsKit {
    type TcpStream = Transport;
    type Sleep = <Tokio as Reactor>::Sleep;

    fn register<H: Read + Write + AsFd + AsRawFd + Send + 'static>(
        &self,
        socket: H,
    ) -> io::Result<impl futures::AsyncRead + futures::AsyncWrite + Send + Unpin + 'static> {
        self.0.register(socket)
    }

    fn sleep(&self, dur: Duration) -> Self::Sleep {
        self.0.sleep(dur)
    }

    fn interval(&self, dur: Duration) -> impl Stream<Item = Instant> + Send + 'static {
        self.0.interval(dur)
    }

    fn tcp_connect_addr(
        &self,
        addr: SocketAddr,
    ) -> impl Future<Output = io::Result<Transport>> + Send + 'static {
        let plain = self.0.tcp_connect_addr(addr);
        async move { plain.await.map(Transport::Plain) }
    }
}

/// The byte stream lapin speaks AMQP over: plain TCP, or a TLS session on it.
pub(crate) enum Transport {
    /// What tokio's kit would have given.
    Plain(<Tokio as Reactor>::TcpStream),
    /// A TLS session (boxed: it is much larger than a socket).
    Tls(Box<Compat<rdq_tls::client::TlsStream<TcpStream>>>),
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_close(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_close(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn params(pairs: &[(&str, &str)]) -> TlsParams {
        let mut p = TlsParams::default();
        for (k, v) in pairs {
            assert!(p.take(k, v));
        }
        p
    }

    #[test]
    fn tls_parameters_need_an_amqps_url() {
        assert!(params(&[("tls_ca", "/ca.pem")]).resolve(false).is_err());
        assert_eq!(TlsParams::default().resolve(false).unwrap(), None);
    }

    #[test]
    fn missing_files_and_half_identities_are_refused() {
        let err = params(&[("tls_ca", "/nonexistent/ca.pem")])
            .resolve(true)
            .unwrap_err();
        assert!(err.to_string().contains("TLS_FILE_UNREADABLE"), "{err}");
        assert!(params(&[("tls_key", "/k.pem")]).resolve(true).is_err());
        let err = params(&[("tls_server_name", "not a name")])
            .resolve(true)
            .unwrap_err();
        assert!(err.to_string().contains("TLS_BAD_SERVER_NAME"), "{err}");
    }
}
