//! Which network addresses a callback may reach, and the DNS resolver that
//! enforces it on every connection.
//!
//! An allowlist of names is not enough against server-side request forgery:
//! a name can resolve to `127.0.0.1`, to a private network or to the cloud
//! metadata service, and can change what it resolves to between the check
//! and the connection (DNS rebinding). So every address is classified, and
//! the callback HTTP client resolves names through [`CheckedResolver`],
//! which refuses a name when any address it resolves to is not allowed and
//! hands the client exactly the addresses it checked: the client connects
//! to what was checked, never to a second lookup.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// What kind of network an address is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// An ordinary internet address.
    Public,
    /// This host: `127.0.0.0/8`, `::1`.
    Loopback,
    /// A private network: `10/8`, `172.16/12`, `192.168/16`, CGNAT
    /// `100.64/10`, unique-local `fc00::/7`, link-local `169.254/16` and
    /// `fe80::/10`.
    Private,
    /// Never a callback target, whatever the settings: the cloud metadata
    /// services (`169.254.169.254`, `fd00:ec2::254`), "this network"
    /// (`0.0.0.0/8`, `::`), multicast, broadcast and reserved ranges.
    Forbidden,
}

/// The metadata service of AWS (IPv6), also used by other clouds' IMDS.
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// Classifies `ip`. An IPv6 address that carries an IPv4 address
/// (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64
/// `64:ff9b::a.b.c.d`) is classified by the IPv4 address it reaches.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => classify_v4(v4),
            None => classify_v6(v6),
        },
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, _, _] = ip.octets();
    if ip == Ipv4Addr::new(169, 254, 169, 254)
        || a == 0
        || ip.is_broadcast()
        || ip.is_multicast()
        || a >= 240
    {
        AddressClass::Forbidden
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip.is_private() || ip.is_link_local() || (a == 100 && (64..128).contains(&b)) {
        AddressClass::Private
    } else {
        AddressClass::Public
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let first = ip.segments()[0];
    if ip == METADATA_V6 || ip.is_unspecified() || ip.is_multicast() {
        AddressClass::Forbidden
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80 {
        AddressClass::Private
    } else {
        AddressClass::Public
    }
}

/// The IPv4 address inside an IPv4-mapped, IPv4-compatible or NAT64 IPv6
/// address (`::` and `::1` are themselves, not IPv4-compatible forms).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let compatible = s[..6].iter().all(|&x| x == 0) && !ip.is_unspecified() && !ip.is_loopback();
    let nat64 = s[..6] == [0x0064, 0xff9b, 0, 0, 0, 0];
    (compatible || nat64).then_some(tail)
}

/// Which address classes a server lets callbacks reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressPolicy {
    /// `[callbacks] allow_loopback`.
    pub loopback: bool,
    /// `[callbacks] allow_private`.
    pub private: bool,
}

impl AddressPolicy {
    /// `Ok` when a callback may connect to `ip`, else why not.
    pub fn check(&self, ip: IpAddr) -> Result<(), String> {
        match classify(ip) {
            AddressClass::Public => Ok(()),
            AddressClass::Loopback if self.loopback => Ok(()),
            AddressClass::Private if self.private => Ok(()),
            AddressClass::Loopback => Err(format!(
                "{ip} is a loopback address ([callbacks] allow_loopback is off)"
            )),
            AddressClass::Private => Err(format!(
                "{ip} is a private, shared or link-local address ([callbacks] allow_private is off)"
            )),
            AddressClass::Forbidden => Err(format!(
                "{ip} is a metadata, unspecified, multicast or reserved address, never a callback target"
            )),
        }
    }

    /// Checks every address `host` resolves to now; `Ok` with them when all
    /// are allowed.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("{host} does not resolve: {e}"))?
            .collect();
        if addrs.is_empty() {
            return Err(format!("{host} resolves to no address"));
        }
        for addr in &addrs {
            self.check(addr.ip())
                .map_err(|why| format!("{host} resolves to {why}"))?;
        }
        Ok(addrs)
    }
}

/// The callback client's DNS resolver: [`AddressPolicy::resolve`] on every
/// name the client connects to.
#[derive(Debug, Clone)]
pub struct CheckedResolver {
    policy: AddressPolicy,
}

impl CheckedResolver {
    /// A resolver enforcing `policy`.
    pub fn new(policy: AddressPolicy) -> Self {
        Self { policy }
    }
}

/// Why the resolver refused a name (the request fails as a transport error
/// carrying this message).
#[derive(Debug, thiserror::Error)]
#[error("callback target refused: {0}")]
pub struct AddressRefused(String);

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // The port is the connector's to set; 0 is a placeholder.
            match policy.resolve(&host, 0).await {
                Ok(addrs) => Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs),
                Err(why) => Err(Box::new(AddressRefused(why)) as _),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_are_classified_including_ipv6_forms_of_ipv4() {
        for (s, class) in [
            ("8.8.8.8", AddressClass::Public),
            ("2606:4700::1111", AddressClass::Public),
            ("127.0.0.1", AddressClass::Loopback),
            ("127.255.0.9", AddressClass::Loopback),
            ("::1", AddressClass::Loopback),
            ("::ffff:127.0.0.1", AddressClass::Loopback),
            ("::127.0.0.1", AddressClass::Loopback),
            ("64:ff9b::7f00:1", AddressClass::Loopback),
            ("10.0.0.1", AddressClass::Private),
            ("172.16.5.4", AddressClass::Private),
            ("172.31.255.255", AddressClass::Private),
            ("192.168.1.1", AddressClass::Private),
            ("100.64.0.1", AddressClass::Private),
            ("100.127.255.254", AddressClass::Private),
            ("169.254.1.1", AddressClass::Private),
            ("fc00::1", AddressClass::Private),
            ("fd12:3456::1", AddressClass::Private),
            ("fe80::1", AddressClass::Private),
            ("::ffff:10.0.0.1", AddressClass::Private),
            ("::ffff:100.64.0.1", AddressClass::Private),
            ("169.254.169.254", AddressClass::Forbidden),
            ("::ffff:169.254.169.254", AddressClass::Forbidden),
            ("fd00:ec2::254", AddressClass::Forbidden),
            ("0.0.0.0", AddressClass::Forbidden),
            ("0.1.2.3", AddressClass::Forbidden),
            ("::", AddressClass::Forbidden),
            ("::ffff:0.0.0.0", AddressClass::Forbidden),
            ("255.255.255.255", AddressClass::Forbidden),
            ("224.0.0.1", AddressClass::Forbidden),
            ("ff02::1", AddressClass::Forbidden),
            ("240.0.0.1", AddressClass::Forbidden),
            ("100.63.255.255", AddressClass::Public),
            ("100.128.0.0", AddressClass::Public),
            ("172.32.0.1", AddressClass::Public),
        ] {
            assert_eq!(classify(ip(s)), class, "{s}");
        }
    }

    #[test]
    fn the_policy_lifts_only_what_it_names() {
        let strict = AddressPolicy {
            loopback: false,
            private: false,
        };
        let open = AddressPolicy {
            loopback: true,
            private: true,
        };
        assert!(strict.check(ip("127.0.0.1")).is_err());
        assert!(strict.check(ip("10.0.0.1")).is_err());
        assert!(strict.check(ip("8.8.8.8")).is_ok());
        assert!(open.check(ip("127.0.0.1")).is_ok());
        assert!(open.check(ip("10.0.0.1")).is_ok());
        assert!(open.check(ip("169.254.169.254")).is_err());
        assert!(open.check(ip("fd00:ec2::254")).is_err());
        assert!(open.check(ip("0.0.0.0")).is_err());
    }

    /// A one-shot HTTP server on loopback answering 204; its port.
    async fn answer_once() -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        port
    }

    #[tokio::test]
    async fn the_client_refuses_at_connect_time_a_name_that_resolves_to_loopback() {
        let port = answer_once().await;
        let url = format!("http://localhost:{port}/hook");
        let client = |loopback| {
            reqwest::Client::builder()
                .no_proxy()
                .dns_resolver(CheckedResolver::new(AddressPolicy {
                    loopback,
                    private: false,
                }))
                .build()
                .unwrap()
        };
        let err = client(false).post(&url).send().await.unwrap_err();
        let mut chain = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(s) = source {
            chain.push_str(&format!(": {s}"));
            source = s.source();
        }
        assert!(chain.contains("callback target refused"), "{chain}");
        let ok = client(true).post(&url).send().await.unwrap();
        assert_eq!(ok.status().as_u16(), 204);
    }

    #[tokio::test]
    async fn a_name_that_resolves_to_loopback_is_refused_unless_loopback_is_allowed() {
        let strict = AddressPolicy {
            loopback: false,
            private: false,
        };
        let err = strict.resolve("localhost", 80).await.unwrap_err();
        assert!(err.contains("loopback"), "{err}");
        let local = AddressPolicy {
            loopback: true,
            private: false,
        };
        let addrs = local.resolve("localhost", 80).await.unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()));
    }
}
