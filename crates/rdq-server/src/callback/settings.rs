//! Server-wide callback settings (`[callbacks]` in the configuration file):
//! which URLs a queue may point its callback at, and the defaults a queue's
//! callback target does not set.
//!
//! The allowlist exists because a queue's callback URL is chosen by whoever
//! may change queue configuration; without it, an admin token would be a
//! way to make the server send requests anywhere its network reaches.
//! Loopback targets are allowed by default so local development needs no
//! configuration.

use std::net::IpAddr;

use rdq_engine::glob::Glob;
use serde::Deserialize;
use url::Url;

/// The `[callbacks]` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CallbackSettings {
    /// Globs on `scheme://host[:port]/path` a callback URL must match
    /// (e.g. `https://hooks.example.com/*`). Query strings are not matched.
    pub allow: Vec<String>,
    /// Also allow loopback hosts (`127.0.0.0/8`, `::1`, `localhost`).
    pub allow_loopback: bool,
    /// Timeout of a callback that sets no `timeout_ms` (clamped below the
    /// queue's lease).
    pub default_timeout_ms: u64,
    /// Callbacks in flight per queue when the target sets no `concurrency`.
    pub default_concurrency: usize,
    /// Most callbacks in flight per queue a target may ask for.
    pub max_concurrency: usize,
    /// Bytes of a response body kept in the attempt's error message and detail.
    pub body_excerpt_bytes: usize,
    /// Longest deferral a `Retry-After` header can cause (ms).
    pub max_retry_after_ms: u64,
    /// How often the dispatcher looks for queues whose callback changed (ms);
    /// changes made through this server apply at once.
    pub refresh_interval_ms: u64,
    /// Longest idle wait of a dispatching worker for tasks submitted through
    /// another process (ms).
    pub poll_interval_ms: u64,
}

impl Default for CallbackSettings {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            allow_loopback: true,
            default_timeout_ms: 10_000,
            default_concurrency: 64,
            max_concurrency: 1024,
            body_excerpt_bytes: 512,
            max_retry_after_ms: 3_600_000,
            refresh_interval_ms: 1_000,
            poll_interval_ms: 200,
        }
    }
}

impl CallbackSettings {
    /// Checks the globs and numbers.
    pub fn validate(&self) -> Result<(), String> {
        for g in &self.allow {
            Glob::new(g).map_err(|why| format!("allow: {why}"))?;
        }
        if self.default_timeout_ms == 0 {
            return Err("default_timeout_ms: must be at least 1".into());
        }
        if self.default_concurrency == 0 || self.max_concurrency == 0 {
            return Err("default_concurrency and max_concurrency: must be at least 1".into());
        }
        if self.refresh_interval_ms == 0 || self.poll_interval_ms == 0 {
            return Err("refresh_interval_ms and poll_interval_ms: must be at least 1".into());
        }
        Ok(())
    }

    /// Refuses a callback URL that is not http(s), carries credentials, or
    /// is neither loopback (when allowed) nor matched by the allowlist.
    pub fn check_url(&self, url: &Url) -> Result<(), String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "the scheme {:?} is not http or https",
                url.scheme()
            ));
        }
        if url.scheme() == "https" && !cfg!(feature = "https") {
            return Err("this build has no HTTPS support (rdq-server's `https` feature)".into());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("credentials in the URL are not allowed; use callback.headers".into());
        }
        let Some(host) = url.host() else {
            return Err("the URL has no host".into());
        };
        let loopback = match host {
            url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
            url::Host::Ipv4(ip) => IpAddr::V4(ip).is_loopback(),
            url::Host::Ipv6(ip) => IpAddr::V6(ip).is_loopback(),
        };
        if loopback && self.allow_loopback {
            return Ok(());
        }
        let normalized = normalized(url);
        let allowed = self
            .allow
            .iter()
            .any(|g| Glob::new(g).is_ok_and(|g| g.matches(&normalized)));
        if allowed {
            Ok(())
        } else {
            Err(format!(
                "{normalized} is not in the server's callback allowlist ([callbacks] allow)"
            ))
        }
    }
}

/// `scheme://host[:port]/path` (the port only when not the scheme's
/// default), the form allowlist globs match.
pub fn normalized(url: &Url) -> String {
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    format!(
        "{}://{}{port}{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.path()
    )
}
