//! [`RabbitOptions`]: where the broker is and how the store talks to it,
//! built in code or read from the query string of an `amqp://` URL.
//!
//! Options never change a broker queue's *arguments* (those are a pure
//! function of the queue's name and mode, as in queuey, so processes with
//! different settings never lock each other out with `PRECONDITION_FAILED`);
//! they only change which hold queue a delay lands in, how much is
//! prefetched, and how hard a lost connection is redialled.

use std::collections::BTreeSet;
use std::time::Duration;

use url::Url;

use crate::error::RabbitError;
use crate::tls::TlsParams;

/// How a lost connection is redialled: a bounded, jittered exponential
/// backoff. The first connection is never retried (a process that cannot
/// reach its broker at startup says so at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconnectPolicy {
    /// Delay before the second attempt (the first after a drop is immediate).
    pub base: Duration,
    /// Longest delay between attempts.
    pub max: Duration,
    /// Give up after this many failed attempts in a row (`None`: never).
    pub max_attempts: Option<u32>,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(500),
            max: Duration::from_secs(30),
            max_attempts: None,
        }
    }
}

impl ReconnectPolicy {
    /// The wait before attempt `failures + 1`, `None` once the policy gives
    /// up. "Equal jitter": half the exponential step is fixed, the other half
    /// drawn from `unit` (a number in `[0, 1)`), so a fleet does not redial in
    /// lockstep.
    pub fn delay(&self, failures: u32, unit: f64) -> Option<Duration> {
        if self.max_attempts.is_some_and(|max| failures >= max) {
            return None;
        }
        if failures == 0 {
            return Some(Duration::ZERO);
        }
        let exp = failures.saturating_sub(1).min(30);
        let step = self.base.saturating_mul(1u32 << exp).min(self.max);
        let half = step / 2;
        Some(half + half.mul_f64(unit.clamp(0.0, 1.0)))
    }
}

/// Everything the store needs to know. [`RabbitOptions::from_url`] reads it
/// from a URL; the fields are public for building it in code.
#[derive(Debug, Clone, PartialEq)]
pub struct RabbitOptions {
    /// The AMQP URI handed to the client (the store's own query parameters removed).
    pub uri: String,
    /// Unacknowledged deliveries the broker pushes to this process per queue
    /// (`basic.qos`), default 128. Claims are served from them; raise it to at
    /// least the worker's concurrency.
    pub prefetch: u16,
    /// Confirm-mode channels publishing at once, each with one publish in
    /// flight (default 64); see the module docs of `connection` for why one.
    pub publish_channels: usize,
    /// Speak queuey 1.1's wire format on every queue (`queuey=all`).
    pub queuey_all: bool,
    /// Speak queuey 1.1's wire format on these queues (`queuey=a,b`), in
    /// addition to queues whose configuration says `queuey_compatible`.
    pub queuey_queues: BTreeSet<String>,
    /// Retry backoffs and delayed submits are rounded up to this (default 1 s).
    pub retry_granularity: Duration,
    /// Deferrals are rounded up to this (default 1 s).
    pub defer_granularity: Duration,
    /// `x-max-priority` of every work queue (default 10, queuey's default).
    /// Must match what queuey processes sharing the queues declare.
    pub max_priority: u8,
    /// Prefixed to every broker queue name (default empty): isolates tests
    /// or tenants sharing a vhost. The envelope's `queue` stays unprefixed.
    pub namespace: String,
    /// The name RabbitMQ shows for the connection.
    pub connection_name: Option<String>,
    /// How a dropped connection is redialled.
    pub reconnect: ReconnectPolicy,
    /// Longest wait for the broker in one store operation (default 10 s):
    /// a publish and its confirm (waiting out a reconnect included), a
    /// queue declaration, a depth read. Past it the operation fails with
    /// `STORE_UNAVAILABLE` instead of hanging.
    pub op_timeout: Duration,
    /// Most dead letters read by one DLQ listing or redrive (default 100,000).
    pub dlq_scan_limit: usize,
    /// TLS for an `amqps://` URL (`?tls_ca=`, `?tls_cert=`, `?tls_key=`,
    /// `?tls_server_name=`; `docs/stores/rabbitmq.md`, "TLS"); `None` for `amqp://`.
    pub tls: Option<rdq_tls::client::ClientTls>,
}

impl Default for RabbitOptions {
    fn default() -> Self {
        Self {
            uri: "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned(),
            prefetch: 128,
            publish_channels: 64,
            queuey_all: false,
            queuey_queues: BTreeSet::new(),
            retry_granularity: Duration::from_secs(1),
            defer_granularity: Duration::from_secs(1),
            max_priority: 10,
            namespace: String::new(),
            connection_name: None,
            reconnect: ReconnectPolicy::default(),
            op_timeout: Duration::from_secs(10),
            dlq_scan_limit: 100_000,
            tls: None,
        }
    }
}

impl RabbitOptions {
    /// Reads `amqp://user:pass@host:port/vhost?option=value&…` (or
    /// `amqps://…` for TLS, with the TLS parameters of
    /// `docs/stores/rabbitmq.md`). The store's
    /// options are taken out of the query; the rest (`heartbeat`,
    /// `frame_max`, …) is left for the AMQP client.
    ///
    /// | parameter | field |
    /// |---|---|
    /// | `prefetch` | [`prefetch`](Self::prefetch) |
    /// | `publish_channels` | [`publish_channels`](Self::publish_channels) |
    /// | `queuey` | `all`, or a comma-separated list of queues |
    /// | `retry_granularity_ms`, `defer_granularity_ms` | the granularities |
    /// | `max_priority` | [`max_priority`](Self::max_priority) |
    /// | `namespace` | [`namespace`](Self::namespace) |
    /// | `connection_name` | [`connection_name`](Self::connection_name) |
    /// | `reconnect_max_attempts` | [`ReconnectPolicy::max_attempts`] (0: never reconnect) |
    /// | `op_timeout_ms` | [`op_timeout`](Self::op_timeout) |
    pub fn from_url(url: &str) -> Result<Self, RabbitError> {
        let mut parsed =
            Url::parse(url).map_err(|e| RabbitError::InvalidUrl(format!("{url}: {e}")))?;
        let tls = match parsed.scheme() {
            "amqp" => false,
            "amqps" => true,
            other => {
                return Err(RabbitError::InvalidUrl(format!(
                    "{other}:// is not supported: use amqp:// or amqps:// (TLS)"
                )));
            }
        };
        let mut options = Self::default();
        let mut rest: Vec<(String, String)> = Vec::new();
        let mut tls_params = TlsParams::default();
        for (key, value) in parsed.query_pairs() {
            let (key, value) = (key.into_owned(), value.into_owned());
            if tls_params.take(&key, &value) {
                continue;
            }
            let bad = |what: &str| RabbitError::InvalidUrl(format!("{key}={value}: {what}"));
            match key.as_str() {
                "prefetch" => {
                    options.prefetch = value
                        .parse::<u16>()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| bad("expected 1–65535"))?;
                }
                "publish_channels" => {
                    options.publish_channels = value
                        .parse::<usize>()
                        .ok()
                        .filter(|p| (1..=2048).contains(p))
                        .ok_or_else(|| bad("expected 1–2048"))?;
                }
                "queuey" => {
                    if value == "all" {
                        options.queuey_all = true;
                    } else {
                        options.queuey_queues.extend(
                            value
                                .split(',')
                                .filter(|q| !q.is_empty())
                                .map(str::to_owned),
                        );
                    }
                }
                "retry_granularity_ms" | "defer_granularity_ms" => {
                    let ms = value
                        .parse::<u64>()
                        .ok()
                        .filter(|ms| *ms > 0)
                        .ok_or_else(|| bad("expected a positive number of milliseconds"))?;
                    if key.starts_with("retry") {
                        options.retry_granularity = Duration::from_millis(ms);
                    } else {
                        options.defer_granularity = Duration::from_millis(ms);
                    }
                }
                "op_timeout_ms" => {
                    let ms = value
                        .parse::<u64>()
                        .ok()
                        .filter(|ms| (1..=3_600_000).contains(ms))
                        .ok_or_else(|| bad("expected 1–3600000 milliseconds"))?;
                    options.op_timeout = Duration::from_millis(ms);
                }
                "max_priority" => {
                    options.max_priority = value.parse().map_err(|_| bad("expected 0–255"))?;
                }
                "namespace" => options.namespace = value,
                "connection_name" => options.connection_name = Some(value),
                "reconnect_max_attempts" => {
                    options.reconnect.max_attempts =
                        Some(value.parse().map_err(|_| bad("expected a count"))?);
                }
                _ => rest.push((key, value)),
            }
        }
        if rest.is_empty() {
            parsed.set_query(None);
        } else {
            parsed.query_pairs_mut().clear().extend_pairs(rest);
        }
        options.uri = parsed.to_string();
        options.tls = tls_params.resolve(tls)?;
        Ok(options)
    }

    /// True when `queue` (an rdq queue name) speaks queuey's wire format by
    /// this configuration.
    pub fn is_queuey(&self, queue: &str) -> bool {
        self.queuey_all || self.queuey_queues.contains(queue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_parameters_are_taken_out_of_the_uri() {
        let o = RabbitOptions::from_url(
            "amqp://guest:guest@localhost:5672/%2f?prefetch=64&queuey=a,b&heartbeat=10&namespace=t1.&op_timeout_ms=2500",
        )
        .unwrap_or_default();
        assert_eq!(o.prefetch, 64);
        assert_eq!(o.op_timeout, Duration::from_millis(2_500));
        assert!(o.is_queuey("a") && o.is_queuey("b") && !o.is_queuey("c"));
        assert_eq!(o.namespace, "t1.");
        assert_eq!(o.uri, "amqp://guest:guest@localhost:5672/%2f?heartbeat=10");
    }

    #[test]
    fn bad_parameters_and_schemes_are_refused() {
        assert!(RabbitOptions::from_url("amqp://h/?prefetch=0").is_err());
        assert!(RabbitOptions::from_url("amqp://h/?op_timeout_ms=0").is_err());
        assert!(RabbitOptions::from_url("amqp://h/?op_timeout_ms=soon").is_err());
        assert_eq!(
            RabbitOptions::from_url("amqp://h/").map(|o| o.op_timeout),
            Ok(Duration::from_secs(10))
        );
        assert!(RabbitOptions::from_url("amqps://h/").is_ok_and(|o| o.tls.is_some()));
        assert!(RabbitOptions::from_url("amqpx://h/").is_err());
        assert!(RabbitOptions::from_url("amqp://h/?tls_ca=/ca.pem").is_err());
        assert!(RabbitOptions::from_url("not a url").is_err());
    }

    #[test]
    fn reconnect_delays_grow_are_jittered_and_bounded() {
        let p = ReconnectPolicy {
            max_attempts: Some(5),
            ..ReconnectPolicy::default()
        };
        assert_eq!(p.delay(0, 0.9), Some(Duration::ZERO));
        assert_eq!(p.delay(1, 0.0), Some(Duration::from_millis(250)));
        assert_eq!(p.delay(1, 1.0), Some(Duration::from_millis(500)));
        assert_eq!(p.delay(3, 0.0), Some(Duration::from_millis(1_000)));
        assert!(
            p.delay(4, 0.5)
                .is_some_and(|d| d <= Duration::from_secs(30))
        );
        assert_eq!(p.delay(5, 0.5), None);
        let forever = ReconnectPolicy::default();
        assert_eq!(forever.delay(40, 1.0), Some(Duration::from_secs(30)));
    }
}
