//! Where the store connects and how: [`RedisOptions`], parsed from the one
//! URL users type (`--store redis://…`).
//!
//! rdq's own settings are query parameters of that URL (`prefix`,
//! `cluster`, `wait_ms`, `max_group`, `promote`) and are taken out before
//! the rest goes to the `redis` crate (`redis://[user:password@]host:port/db`).

use std::time::Duration;

use rdq_engine::EngineError;

use crate::tls::{RedisTls, TlsParams};

/// The key prefix when the URL names none.
pub const DEFAULT_PREFIX: &str = "rdq";

/// Longest prefix accepted.
const MAX_PREFIX_LEN: usize = 64;

/// How the store connects: the server (or cluster), its key prefix and tuning.
///
/// Built from a URL with [`RedisOptions::from_url`]; the fields can be
/// changed afterwards.
#[derive(Clone)]
#[non_exhaustive]
pub struct RedisOptions {
    /// The node URL handed to the `redis` crate, rdq's parameters removed.
    pub url: String,
    /// Further cluster nodes (`?cluster=host:port,host:port`), or empty.
    /// With `cluster` set (even to `yes`, naming no other node) the store
    /// speaks the cluster protocol and discovers the rest of the cluster.
    pub cluster_nodes: Vec<String>,
    /// Whether the URL names a Redis Cluster.
    pub cluster: bool,
    /// Every key rdq writes starts with this (`?prefix=`, default `rdq`):
    /// letters, digits and `._:-`, at most 64 bytes. Installations sharing a
    /// Redis use different prefixes.
    pub prefix: String,
    /// How long an operation waits for Redis to come back (reconnecting
    /// meanwhile) before failing with `STORE_UNAVAILABLE` (`?wait_ms=`,
    /// default 10,000).
    pub wait: Duration,
    /// Most tasks one submit or settle script writes (`?max_group=`, default 500).
    pub max_group: usize,
    /// Most delayed tasks one claim moves into the ready set (`?promote=`,
    /// default 10,000).
    pub promote: usize,
    /// TLS, for `rediss://` URLs (`?tls_ca=`, `?tls_cert=`, `?tls_key=`;
    /// `docs/stores/redis.md`, "TLS").
    pub tls: RedisTls,
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password.
        f.debug_struct("RedisOptions")
            .field("url", &redact(&self.url))
            .field("cluster", &self.cluster)
            .field("cluster_nodes", &self.cluster_nodes)
            .field("prefix", &self.prefix)
            .field("wait", &self.wait)
            .field("max_group", &self.max_group)
            .field("promote", &self.promote)
            .field("tls", &self.tls.enabled())
            .finish()
    }
}

fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

impl RedisOptions {
    /// Parses `redis://[user:password@]host:port[/db]?prefix=rdq&…`, or
    /// `rediss://…` for TLS.
    ///
    /// Refuses with `INVALID_ARGUMENT` a URL of another scheme, a prefix
    /// outside `[A-Za-z0-9._:-]`, a number that does not parse, TLS files
    /// that cannot be used, or the `redis` crate's `#insecure` fragment.
    pub fn from_url(url: &str) -> Result<Self, EngineError> {
        let invalid = |why: String| EngineError::InvalidArgument(why);
        let tls = url.starts_with("rediss://");
        if !tls && !url.starts_with("redis://") {
            return Err(invalid(
                "a Redis store URL starts with redis:// (or rediss:// for TLS)".into(),
            ));
        }
        let mut parsed =
            url::Url::parse(url).map_err(|e| invalid(format!("not a usable Redis URL: {e}")))?;
        if parsed.fragment().is_some() {
            return Err(invalid(
                "a Redis store URL takes no #fragment (rdq never skips certificate checks; \
                 name the server's CA with ?tls_ca=FILE instead of #insecure)"
                    .into(),
            ));
        }
        let mut tls_params = TlsParams::default();
        let mut options = Self {
            url: String::new(),
            cluster_nodes: Vec::new(),
            cluster: false,
            prefix: DEFAULT_PREFIX.to_owned(),
            wait: Duration::from_secs(10),
            max_group: 500,
            promote: 10_000,
            tls: RedisTls::default(),
        };
        let mut passed_on: Vec<(String, String)> = Vec::new();
        for (key, value) in parsed.query_pairs() {
            if tls_params.take(&key, &value) {
                continue;
            }
            let number = |what: &str| {
                value
                    .parse::<u64>()
                    .map_err(|_| invalid(format!("{what} must be a whole number, not {value:?}")))
            };
            match key.as_ref() {
                "prefix" => options.prefix = value.to_string(),
                "wait_ms" => options.wait = Duration::from_millis(number("wait_ms")?),
                "max_group" => {
                    options.max_group = usize::try_from(number("max_group")?).unwrap_or(1)
                }
                "promote" => options.promote = usize::try_from(number("promote")?).unwrap_or(1),
                "cluster" => {
                    options.cluster = !matches!(value.as_ref(), "no" | "false" | "0");
                    options.cluster_nodes = value
                        .split(',')
                        .map(str::trim)
                        .filter(|n| n.contains(':'))
                        .map(|n| node_url(&parsed, n))
                        .collect();
                }
                _ => passed_on.push((key.to_string(), value.to_string())),
            }
        }
        validate_prefix(&options.prefix)?;
        options.tls = RedisTls::resolve(tls, tls_params)?;
        if passed_on.is_empty() {
            parsed.set_query(None);
        } else {
            parsed.query_pairs_mut().clear().extend_pairs(passed_on);
        }
        options.url = parsed.to_string();
        options.max_group = options.max_group.max(1);
        options.promote = options.promote.max(1);
        options
            .tls
            .client(options.url.as_str())
            .map_err(|e| invalid(format!("not a usable Redis URL: {e}")))?;
        Ok(options)
    }
}

/// The URL of another cluster node, with the first node's credentials.
fn node_url(first: &url::Url, host_port: &str) -> String {
    let mut node = format!("{}://{host_port}", first.scheme());
    if let Ok(mut parsed) = url::Url::parse(&node) {
        let _ = parsed.set_username(first.username());
        let _ = parsed.set_password(first.password());
        node = parsed.to_string();
    }
    node
}

/// Refuses a prefix that could break the key layout (a `{` would change the
/// hash tag) or that is empty.
pub(crate) fn validate_prefix(prefix: &str) -> Result<(), EngineError> {
    let ok = !prefix.is_empty()
        && prefix.len() <= MAX_PREFIX_LEN
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
    if ok {
        Ok(())
    } else {
        Err(EngineError::InvalidArgument(format!(
            "prefix {prefix:?} must be 1 to {MAX_PREFIX_LEN} letters, digits or ._:-"
        )))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn rdq_parameters_are_taken_out() {
        let o = RedisOptions::from_url(
            "redis://127.0.0.1:6379/2?prefix=jobs:a&wait_ms=250&max_group=64&promote=9",
        )
        .unwrap();
        assert_eq!(o.prefix, "jobs:a");
        assert_eq!(o.wait, Duration::from_millis(250));
        assert_eq!((o.max_group, o.promote), (64, 9));
        assert_eq!(o.url, "redis://127.0.0.1:6379/2");
        assert!(!o.cluster);
    }

    #[test]
    fn a_cluster_url_names_its_nodes_with_the_same_credentials() {
        let o = RedisOptions::from_url(
            "redis://:pw@127.0.0.1:7001/?cluster=127.0.0.1:7002,127.0.0.1:7003",
        )
        .unwrap();
        assert!(o.cluster);
        assert_eq!(
            o.cluster_nodes,
            ["redis://:pw@127.0.0.1:7002", "redis://:pw@127.0.0.1:7003"]
        );
        let discover = RedisOptions::from_url("redis://127.0.0.1:7001?cluster=yes").unwrap();
        assert!(discover.cluster && discover.cluster_nodes.is_empty());
        assert!(format!("{o:?}").contains("***"));
    }

    #[test]
    fn bad_urls_and_prefixes_are_refused() {
        for bad in [
            "postgres://localhost/x",
            "rediss://localhost#insecure",
            "redis://localhost?tls_ca=/ca.pem",
            "redis://localhost?prefix={x}",
            "redis://localhost?prefix=",
            "redis://localhost?wait_ms=soon",
        ] {
            assert_eq!(
                RedisOptions::from_url(bad).unwrap_err().code(),
                "INVALID_ARGUMENT",
                "{bad}"
            );
        }
    }
}
