//! Server-wide callback settings (`[callbacks]` in the configuration file):
//! which URLs a queue may point its callback at, and the defaults a queue's
//! callback target does not set.
//!
//! The allowlist exists because a queue's callback URL is chosen by whoever
//! may change queue configuration; without it, an admin token would be a
//! way to make the server send requests anywhere its network reaches. An
//! entry is matched against the parsed URL part by part (scheme, host, port,
//! path; see [`AllowRule`]), never as one string, so `http://*.partner.test/*`
//! cannot be satisfied by a path that merely contains `.partner.test`. The
//! address a URL reaches is checked too ([`super::address`]): loopback only
//! with `allow_loopback` (on by default, so local development needs no
//! configuration), private networks only with `allow_private`, metadata
//! services and the other special-purpose ranges never: for literal IPs
//! here, when the target is configured, and for names on every connection,
//! by the callback client's resolver. The names of cloud metadata services
//! are refused here and before every lookup.

use std::net::IpAddr;

use rdq_engine::glob::Glob;
use serde::Deserialize;
use url::{Host, Url};

use super::address::AddressPolicy;

/// The `[callbacks]` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CallbackSettings {
    /// Rules a callback URL must match, each `scheme://host[:port][/path]`
    /// (e.g. `https://*.hooks.example.com/v1/*`); see [`AllowRule`]. Query
    /// strings are not matched.
    pub allow: Vec<String>,
    /// Allow loopback targets (`127.0.0.0/8`, `::1`, `localhost`), with or
    /// without an allowlist entry.
    pub allow_loopback: bool,
    /// Allow targets on private networks (`10/8`, `172.16/12`,
    /// `192.168/16`, `100.64/10`, `fc00::/7`); they must still match the
    /// allowlist. Off by default. Link-local, metadata and the other
    /// special-purpose ranges stay refused.
    pub allow_private: bool,
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
            allow_private: false,
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
    /// Checks the allowlist and numbers.
    pub fn validate(&self) -> Result<(), String> {
        for rule in &self.allow {
            AllowRule::parse(rule).map_err(|why| format!("allow: {rule:?}: {why}"))?;
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

    /// The address classes callbacks may reach.
    pub fn address_policy(&self) -> AddressPolicy {
        AddressPolicy {
            loopback: self.allow_loopback,
            private: self.allow_private,
        }
    }

    /// Refuses a callback URL that is not http(s), carries credentials,
    /// names a literal address (or `localhost`, or a cloud metadata
    /// service's name) the address policy refuses,
    /// or is neither loopback (when allowed) nor matched by the allowlist.
    /// What a name resolves to is checked on every connection instead (see
    /// [`super::address::CheckedResolver`]), and by [`Self::check_resolved`].
    pub fn check_url(&self, url: &Url) -> Result<(), String> {
        if let Some(tls) = super::scheme::grpc_tls(url.scheme()) {
            // A grpc:// URL's host is opaque to the URL parser: check the
            // http(s):// URL of the same authority, against the rules
            // written for the gRPC scheme (docs/grpc.md).
            let web = if tls { "https" } else { "http" };
            let http = Url::parse(&format!(
                "{web}://{}",
                &url[url::Position::BeforeUsername..]
            ))
            .map_err(|e| e.to_string())?;
            return self.check_as(&http, url.scheme());
        }
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "the scheme {:?} is not http, https, grpc or grpcs",
                url.scheme()
            ));
        }
        self.check_as(url, url.scheme())
    }

    /// [`Self::check_url`] of an http(s) URL, matching allowlist rules
    /// written for `scheme`.
    fn check_as(&self, url: &Url, scheme: &str) -> Result<(), String> {
        if url.scheme() == "https" && !cfg!(feature = "https") {
            return Err("this build has no HTTPS support (rdq-server's `https` feature)".into());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("credentials in the URL are not allowed; use callback.headers".into());
        }
        let Some(host) = url.host() else {
            return Err("the URL has no host".into());
        };
        let policy = self.address_policy();
        let loopback = match &host {
            Host::Domain(name) => {
                super::address::check_name(name)?;
                if is_localhost(name) && !policy.loopback {
                    return Err(format!(
                        "{name} is a loopback name ([callbacks] allow_loopback is off)"
                    ));
                }
                is_localhost(name)
            }
            Host::Ipv4(ip) => {
                policy.check(IpAddr::V4(*ip))?;
                super::address::classify(IpAddr::V4(*ip)) == super::address::AddressClass::Loopback
            }
            Host::Ipv6(ip) => {
                policy.check(IpAddr::V6(*ip))?;
                super::address::classify(IpAddr::V6(*ip)) == super::address::AddressClass::Loopback
            }
        };
        if loopback {
            return Ok(());
        }
        let allowed = self
            .allow
            .iter()
            .filter_map(|rule| AllowRule::parse(rule).ok())
            .any(|rule| rule.matches_as(url, scheme));
        if allowed {
            Ok(())
        } else {
            let shown = normalized(url);
            let shown = match shown.split_once("://") {
                Some((_, rest)) if scheme != url.scheme() => format!("{scheme}://{rest}"),
                _ => shown,
            };
            Err(format!(
                "{shown} is not in the server's callback allowlist ([callbacks] allow)"
            ))
        }
    }

    /// [`Self::check_url`], then what the URL's host resolves to now: every
    /// address must be one the address policy allows. For configuration
    /// time; dispatch checks again on every connection.
    pub async fn check_resolved(&self, url: &Url) -> Result<(), String> {
        self.check_url(url)?;
        if let Some(Host::Domain(name)) = url.host() {
            let port = url.port_or_known_default().unwrap_or(0);
            self.address_policy().resolve(name, port).await?;
        }
        Ok(())
    }
}

/// `localhost` and names under it (RFC 6761: they resolve to loopback).
fn is_localhost(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// One allowlist entry, `scheme://host[:port][/path]` (or `*`, any URL),
/// matched against a parsed URL part by part:
///
/// - `scheme` is `http` or `https`, exactly;
/// - `host` is a name or a literal address, compared after the same
///   normalisation URLs get (lower case, IDNA, IP forms such as
///   `0x7f.1`); or `*.suffix`, which matches names ending in `.suffix` with
///   one or more labels before it (`*.partner.test` matches
///   `a.partner.test` and `a.b.partner.test`, not `partner.test` and never
///   an IP address); or `*`, any host (the address rules still apply);
/// - `port` is a number or `*`; without one, only the scheme's default port
///   matches;
/// - `path` is a glob over the URL's path after normalisation (dot segments
///   resolved, percent-encoding as the URL has it), `*` crossing `/`;
///   without one, any path matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowRule {
    /// `None`: the entry `*`, any http or https URL (the address rules still apply).
    scheme: Option<String>,
    host: HostRule,
    port: PortRule,
    path: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostRule {
    Any,
    Exact(Host<String>),
    Suffix(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PortRule {
    Default,
    Any,
    Exact(u16),
}

impl AllowRule {
    /// Parses an entry; `Err` says what is wrong with it.
    pub fn parse(rule: &str) -> Result<Self, String> {
        if rule == "*" {
            return Ok(Self {
                scheme: None,
                host: HostRule::Any,
                port: PortRule::Any,
                path: "*".to_owned(),
            });
        }
        let (scheme, rest) = rule
            .split_once("://")
            .ok_or("expected scheme://host[:port][/path]")?;
        if !matches!(scheme, "http" | "https" | "grpc" | "grpcs") {
            return Err(format!(
                "the scheme {scheme:?} is not http, https, grpc or grpcs"
            ));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/*"),
        };
        if authority.contains('@') {
            return Err("credentials are not part of an allowlist entry".into());
        }
        if path.contains('?') || path.contains('#') {
            return Err("query strings and fragments are not matched".into());
        }
        let (host, port) = split_port(authority)?;
        let port = match port {
            None => PortRule::Default,
            Some("*") => PortRule::Any,
            Some(p) => PortRule::Exact(
                p.parse()
                    .map_err(|_| format!("the port {p:?} is not a number from 0 to 65535"))?,
            ),
        };
        let host = if host == "*" {
            HostRule::Any
        } else if let Some(suffix) = host.strip_prefix("*.") {
            let parsed = Host::parse(suffix).map_err(|e| format!("the host {suffix:?}: {e}"))?;
            match parsed {
                Host::Domain(d) if !d.contains('*') => HostRule::Suffix(d),
                _ => {
                    return Err(format!(
                        "*.{suffix}: a wildcard stands for names, not addresses"
                    ));
                }
            }
        } else if host.contains('*') {
            return Err(format!(
                "the host {host:?}: a wildcard may only be the first label (*.example.com) or the whole host"
            ));
        } else {
            HostRule::Exact(Host::parse(host).map_err(|e| format!("the host {host:?}: {e}"))?)
        };
        Glob::new(path).map_err(|why| format!("the path: {why}"))?;
        Ok(Self {
            scheme: Some(scheme.to_owned()),
            host,
            port,
            path: path.to_owned(),
        })
    }

    /// True if `url` matches every part of the rule.
    pub fn matches(&self, url: &Url) -> bool {
        self.matches_as(url, url.scheme())
    }

    /// True if `url` (an http(s) URL standing for one of `scheme`)
    /// matches every part of the rule.
    fn matches_as(&self, url: &Url, scheme: &str) -> bool {
        if self.scheme.as_deref().is_some_and(|s| s != scheme) {
            return false;
        }
        let host_ok = match (&self.host, url.host()) {
            (_, None) => false,
            (HostRule::Any, Some(_)) => true,
            (HostRule::Exact(want), Some(host)) => host.to_owned() == *want,
            (HostRule::Suffix(suffix), Some(Host::Domain(name))) => name
                .strip_suffix(suffix.as_str())
                .and_then(|labels| labels.strip_suffix('.'))
                .is_some_and(|labels| !labels.is_empty() && !labels.starts_with('.')),
            (HostRule::Suffix(_), Some(_)) => false,
        };
        let port_ok = match self.port {
            PortRule::Any => true,
            PortRule::Default => url.port().is_none(),
            PortRule::Exact(p) => url.port_or_known_default() == Some(p),
        };
        host_ok && port_ok && Glob::new(&self.path).is_ok_and(|g| g.matches(url.path()))
    }
}

/// `host[:port]` with a bracketed IPv6 literal kept whole.
fn split_port(authority: &str) -> Result<(&str, Option<&str>), String> {
    if authority.starts_with('[') {
        let end = authority
            .find(']')
            .ok_or("an IPv6 literal is missing its ']'")?;
        let (host, rest) = authority.split_at(end + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => rest
                .strip_prefix(':')
                .map(|p| (host, Some(p)))
                .ok_or_else(|| format!("unexpected {rest:?} after the host")),
        };
    }
    Ok(match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    })
}

/// `scheme://host[:port]/path` (the port only when not the scheme's
/// default): how a URL is shown in refusals.
pub fn normalized(url: &Url) -> String {
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    format!(
        "{}://{}{port}{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.path()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(allow: &[&str], loopback: bool, private: bool) -> CallbackSettings {
        CallbackSettings {
            allow: allow.iter().map(|&a| a.to_owned()).collect(),
            allow_loopback: loopback,
            allow_private: private,
            ..CallbackSettings::default()
        }
    }

    /// `Ok` when `url` parses and is allowed.
    fn check(s: &CallbackSettings, url: &str) -> Result<(), String> {
        let url = Url::parse(url).map_err(|e| format!("unparsable: {e}"))?;
        s.check_url(&url)
    }

    #[test]
    fn a_host_wildcard_matches_whole_labels_of_the_host_only() {
        let s = settings(&["http://*.partner.test/*"], false, false);
        for ok in [
            "http://a.partner.test/x",
            "http://a.b.partner.test/x",
            "http://A.Partner.TEST/x",
            "http://a%2epartner.test/x",
        ] {
            assert!(check(&s, ok).is_ok(), "{ok}: {:?}", check(&s, ok));
        }
        for refused in [
            "http://127.0.0.1:8080/.partner.test/x",
            "https://10.0.0.1/.partner.test/x",
            "http://evil.test/.partner.test/x",
            "http://partner.test/x",
            "http://apartner.test/x",
            "http://a.partner.test.evil.test/x",
            "https://a.partner.test/x",
            "http://a.partner.test:8080/x",
            "http://evil.test/?.partner.test",
            "http://evil.test/#.partner.test",
        ] {
            assert!(check(&s, refused).is_err(), "{refused} was admitted");
        }
    }

    #[test]
    fn ports_and_paths_are_matched_as_their_own_parts() {
        let s = settings(
            &[
                "https://hooks.example.com:8443/v1/*",
                "http://api.example.com:*/hook",
            ],
            false,
            false,
        );
        assert!(check(&s, "https://hooks.example.com:8443/v1/charge").is_ok());
        assert!(check(&s, "https://hooks.example.com/v1/charge").is_err());
        assert!(check(&s, "https://hooks.example.com:8443/v2/charge").is_err());
        // Dot segments, encoded or not, are resolved before the path is matched.
        assert!(check(&s, "https://hooks.example.com:8443/v1/../admin").is_err());
        assert!(check(&s, "https://hooks.example.com:8443/v1/%2e%2e/admin").is_err());
        assert!(check(&s, "http://api.example.com:9000/hook").is_ok());
        assert!(check(&s, "http://api.example.com/hook").is_ok());
        assert!(check(&s, "http://api.example.com/hook/x").is_err());
    }

    #[test]
    fn grpc_targets_match_rules_written_for_their_own_scheme() {
        let s = settings(
            &["grpc://*.svc.test:50051", "grpcs://secure.svc.test"],
            false,
            false,
        );
        assert!(check(&s, "grpc://a.svc.test:50051").is_ok());
        assert!(check(&s, "grpcs://secure.svc.test").is_ok());
        assert!(check(&s, "grpcs://secure.svc.test:443").is_ok());
        for refused in [
            // Another scheme than the rule's, even on the same authority.
            "http://a.svc.test:50051/",
            "grpcs://a.svc.test:50051",
            "grpc://secure.svc.test:443",
            "grpcs://secure.svc.test:8443",
            "grpc://a.svc.test:50052",
            "grpc://127.0.0.1:50051",
            "grpc://a.svc.test@127.0.0.1:50051",
        ] {
            assert!(check(&s, refused).is_err(), "{refused} was admitted");
        }
        // An http:// rule does not admit a gRPC target of the same host.
        let web = settings(&["http://a.svc.test:*"], false, false);
        let err = check(&web, "grpc://a.svc.test:50051").unwrap_err();
        assert!(err.starts_with("grpc://a.svc.test:50051"), "{err}");
    }

    #[test]
    fn credentials_and_encoded_at_signs_never_reach_another_host() {
        let s = settings(&["http://*.partner.test/*"], false, false);
        for url in [
            "http://a.partner.test@127.0.0.1/",
            "http://a.partner.test:pw@127.0.0.1/",
            "http://a.partner.test%40127.0.0.1/",
            "http://127.0.0.1%40a.partner.test/",
        ] {
            assert!(check(&s, url).is_err(), "{url} was admitted");
        }
    }

    #[test]
    fn loopback_in_every_spelling_needs_allow_loopback() {
        let strict = settings(&["*"], false, false);
        let local = settings(&[], true, false);
        for url in [
            "http://127.0.0.1/",
            "http://127.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0177.0.0.1/",
            "http://0x7f.1/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[::127.0.0.1]/",
            "http://localhost/",
            "http://LOCALHOST./",
            "http://app.localhost/",
        ] {
            assert!(check(&strict, url).is_err(), "{url} was admitted");
            assert!(
                check(&local, url).is_ok(),
                "{url}: {:?}",
                check(&local, url)
            );
        }
    }

    #[test]
    fn private_and_metadata_addresses_are_refused_even_when_listed() {
        let listed = [
            "http://10.0.0.1/*",
            "http://192.168.1.20/*",
            "http://100.64.0.1/*",
            "http://[fd00::1]/*",
            "http://[::ffff:10.0.0.1]/*",
            "http://169.254.169.254/*",
            "http://[fd00:ec2::254]/*",
            "http://0.0.0.0/*",
            "http://[::]/*",
        ];
        let strict = settings(&listed, true, false);
        let private = settings(&listed, true, true);
        for (url, private_ok) in [
            ("http://10.0.0.1/x", true),
            ("http://012.0.0.1/x", true),
            ("http://167772161/x", true),
            ("http://192.168.1.20/x", true),
            ("http://100.64.0.1/x", true),
            ("http://[fd00::1]/x", true),
            ("http://[::ffff:10.0.0.1]/x", true),
            ("http://[::ffff:a00:1]/x", true),
            ("http://169.254.169.254/x", false),
            ("http://[::ffff:169.254.169.254]/x", false),
            ("http://[fd00:ec2::254]/x", false),
            ("http://0.0.0.0/x", false),
            ("http://0/x", false),
            ("http://[::]/x", false),
        ] {
            assert!(check(&strict, url).is_err(), "{url} was admitted");
            assert_eq!(
                check(&private, url).is_ok(),
                private_ok,
                "{url} with allow_private: {:?}",
                check(&private, url)
            );
        }
        // allow_private lifts the address rule, not the allowlist.
        assert!(check(&settings(&[], false, true), "http://10.0.0.1/x").is_err());
    }

    #[test]
    fn special_purpose_addresses_and_metadata_names_are_refused_whatever_the_settings() {
        let open = settings(&["*", "grpc://*:*", "grpcs://*:*"], true, true);
        for url in [
            "http://169.254.1.1/x",
            "http://[fe80::1]/x",
            "http://100.100.100.200/x",
            "http://192.0.2.10/x",
            "http://198.18.0.1/x",
            "http://192.0.0.192/x",
            "http://[2001:db8::1]/x",
            "http://[64:ff9b::a9fe:a9fe]/x",
            "http://[2002:a9fe:a9fe::1]/x",
            "http://[2001:0:a9fe:a9fe::1]/x",
            "http://[fd20:ce::254]/x",
            "http://metadata.google.internal/computeMetadata/v1/",
            "http://METADATA.GOOGLE.INTERNAL./x",
            "http://metadata/x",
            "http://instance-data/latest/meta-data/",
            "grpc://metadata.google.internal:80",
            "grpcs://instance-data.ec2.internal",
            "grpc://169.254.169.254:80",
        ] {
            let err = check(&open, url).unwrap_err();
            assert!(err.contains("never a callback target"), "{url}: {err}");
        }
        for url in [
            "http://8.8.8.8/x",
            "http://[2606:4700::1111]/x",
            "http://[2002:808:808::1]/x",
            "http://metadata.example.com/x",
        ] {
            assert!(check(&open, url).is_ok(), "{url}: {:?}", check(&open, url));
        }
    }

    #[test]
    fn malformed_allowlist_entries_are_refused_at_startup() {
        for bad in [
            "hooks.example.com",
            "ftp://x.test/*",
            "http://a*.example.com/*",
            "http://*.10.0.0.1/*",
            "http://x.test:port/*",
            "http://user@x.test/*",
            "http://x.test/a?b",
            "http://[::1/*",
        ] {
            assert!(settings(&[bad], true, false).validate().is_err(), "{bad}");
        }
        for good in [
            "*",
            "http://x.test",
            "http://*.x.test:*/a/*",
            "http://[::1]:80/*",
        ] {
            assert!(settings(&[good], true, false).validate().is_ok(), "{good}");
        }
    }

    #[tokio::test]
    async fn a_name_that_resolves_to_loopback_is_refused_at_configuration() {
        let s = settings(&["*"], false, false);
        let url = Url::parse("http://localhost:9/x").unwrap();
        assert!(s.check_resolved(&url).await.is_err());
        let s = settings(&[], true, false);
        assert!(s.check_resolved(&url).await.is_ok());
    }
}
