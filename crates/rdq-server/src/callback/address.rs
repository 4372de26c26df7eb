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
//! to what was checked, never to a second lookup. gRPC targets connect
//! through [`AddressPolicy::resolve`] the same way.
//!
//! The classification is a table ([`V4_RANGES`], [`V6_RANGES`]) with one
//! row per entry of the IANA IPv4 and IPv6 Special-Purpose Address
//! Registries (RFC 6890) and the other ranges that matter here (multicast,
//! the IPv6 space IANA has not opened for unicast); the most specific row
//! that contains an address decides. `docs/server.md` carries the same
//! table, and a test holds the two together. The cloud metadata services
//! ([`METADATA_V4`], [`METADATA_V6`], [`METADATA_NAMES`]) are refused
//! whatever the table and the settings say.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// What kind of network an address is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// An ordinary internet address.
    Public,
    /// This host: `127.0.0.0/8`, `::1`.
    Loopback,
    /// A private network: `10/8`, `172.16/12`, `192.168/16`, CGNAT
    /// `100.64/10`, unique-local `fc00::/7`.
    Private,
    /// Never a callback target, whatever the settings: the cloud metadata
    /// services, link-local, "this network", documentation, benchmarking,
    /// protocol-assignment, multicast, broadcast and reserved ranges (see
    /// [`V4_RANGES`] and [`V6_RANGES`]).
    Forbidden,
}

/// How an IPv6 address carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedding {
    /// `::ffff:a.b.c.d` (RFC 4291): the IPv4 address itself.
    Mapped,
    /// `::a.b.c.d` (RFC 4291, deprecated): the last 32 bits.
    Compatible,
    /// `64:ff9b::a.b.c.d` (RFC 6052 well-known prefix): the last 32 bits.
    Nat64,
    /// `2002:aabb:ccdd::/48` (RFC 3056): bits 16–47.
    SixToFour,
    /// `2001:0:ssss:ssss:…:cccc:cccc` (RFC 4380): the server in bits 32–63
    /// and the client's (NAT's) address, inverted, in the last 32 bits.
    Teredo,
}

/// What a row of the address table decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Every address of the range is of this class.
    Is(AddressClass),
    /// The IPv4 address(es) the IPv6 address carries decide: the most
    /// restrictive of their classes.
    ByIpv4(Embedding),
}

/// One row of the address table: a prefix, what it is, the decision.
#[derive(Debug, Clone, Copy)]
pub struct Range<A> {
    /// The first address of the range.
    pub prefix: A,
    /// The prefix length.
    pub len: u8,
    /// What the range is, as the registry names it.
    pub what: &'static str,
    /// Which class its addresses are.
    pub decision: Decision,
}

const fn v4(
    a: u8,
    b: u8,
    c: u8,
    d: u8,
    len: u8,
    what: &'static str,
    decision: Decision,
) -> Range<Ipv4Addr> {
    Range {
        prefix: Ipv4Addr::new(a, b, c, d),
        len,
        what,
        decision,
    }
}

const fn v6(
    segments: [u16; 8],
    len: u8,
    what: &'static str,
    decision: Decision,
) -> Range<Ipv6Addr> {
    let [a, b, c, d, e, f, g, h] = segments;
    Range {
        prefix: Ipv6Addr::new(a, b, c, d, e, f, g, h),
        len,
        what,
        decision,
    }
}

const PUBLIC: Decision = Decision::Is(AddressClass::Public);
const LOOPBACK: Decision = Decision::Is(AddressClass::Loopback);
const PRIVATE: Decision = Decision::Is(AddressClass::Private);
const NEVER: Decision = Decision::Is(AddressClass::Forbidden);

/// The IPv4 address table: every entry of the IANA IPv4 Special-Purpose
/// Address Registry, multicast, and the rest of the space (public).
pub const V4_RANGES: &[Range<Ipv4Addr>] = &[
    v4(0, 0, 0, 0, 8, "\"this network\"", NEVER),
    v4(0, 0, 0, 0, 32, "\"this host on this network\"", NEVER),
    v4(10, 0, 0, 0, 8, "private use", PRIVATE),
    v4(
        100,
        64,
        0,
        0,
        10,
        "shared address space (carrier-grade NAT)",
        PRIVATE,
    ),
    v4(127, 0, 0, 0, 8, "loopback", LOOPBACK),
    v4(169, 254, 0, 0, 16, "link-local", NEVER),
    v4(172, 16, 0, 0, 12, "private use", PRIVATE),
    v4(192, 0, 0, 0, 24, "IETF protocol assignments", NEVER),
    v4(
        192,
        0,
        0,
        0,
        29,
        "IPv4 service continuity prefix (DS-Lite)",
        NEVER,
    ),
    v4(192, 0, 0, 8, 32, "IPv4 dummy address", NEVER),
    v4(192, 0, 0, 9, 32, "Port Control Protocol anycast", NEVER),
    v4(192, 0, 0, 10, 32, "TURN anycast", NEVER),
    v4(192, 0, 0, 170, 32, "NAT64/DNS64 discovery", NEVER),
    v4(192, 0, 0, 171, 32, "NAT64/DNS64 discovery", NEVER),
    v4(192, 0, 2, 0, 24, "documentation (TEST-NET-1)", NEVER),
    v4(192, 31, 196, 0, 24, "AS112-v4", NEVER),
    v4(192, 52, 193, 0, 24, "AMT", NEVER),
    v4(192, 88, 99, 0, 24, "deprecated 6to4 relay anycast", NEVER),
    v4(192, 168, 0, 0, 16, "private use", PRIVATE),
    v4(
        192,
        175,
        48,
        0,
        24,
        "direct delegation AS112 service",
        NEVER,
    ),
    v4(198, 18, 0, 0, 15, "benchmarking", NEVER),
    v4(198, 51, 100, 0, 24, "documentation (TEST-NET-2)", NEVER),
    v4(203, 0, 113, 0, 24, "documentation (TEST-NET-3)", NEVER),
    v4(224, 0, 0, 0, 4, "multicast", NEVER),
    v4(240, 0, 0, 0, 4, "reserved", NEVER),
    v4(255, 255, 255, 255, 32, "limited broadcast", NEVER),
    v4(0, 0, 0, 0, 0, "any other address", PUBLIC),
];

/// The IPv6 address table: every entry of the IANA IPv6 Special-Purpose
/// Address Registry, multicast, the deprecated site-local range, and the
/// space outside `2000::/3` that IANA keeps reserved; the rest of
/// `2000::/3` is public.
pub const V6_RANGES: &[Range<Ipv6Addr>] = &[
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, "unspecified", NEVER),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, "loopback", LOOPBACK),
    v6(
        [0, 0, 0, 0, 0, 0, 0, 0],
        96,
        "IPv4-compatible (deprecated)",
        Decision::ByIpv4(Embedding::Compatible),
    ),
    v6(
        [0, 0, 0, 0, 0, 0xffff, 0, 0],
        96,
        "IPv4-mapped",
        Decision::ByIpv4(Embedding::Mapped),
    ),
    v6(
        [0x64, 0xff9b, 0, 0, 0, 0, 0, 0],
        96,
        "IPv4/IPv6 translation (NAT64 well-known prefix)",
        Decision::ByIpv4(Embedding::Nat64),
    ),
    v6(
        [0x64, 0xff9b, 1, 0, 0, 0, 0, 0],
        48,
        "IPv4/IPv6 translation (NAT64 local use)",
        NEVER,
    ),
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "discard-only", NEVER),
    v6([0x100, 0, 0, 1, 0, 0, 0, 0], 64, "dummy IPv6 prefix", NEVER),
    v6(
        [0x2001, 0, 0, 0, 0, 0, 0, 0],
        23,
        "IETF protocol assignments",
        NEVER,
    ),
    v6(
        [0x2001, 0, 0, 0, 0, 0, 0, 0],
        32,
        "Teredo",
        Decision::ByIpv4(Embedding::Teredo),
    ),
    v6(
        [0x2001, 1, 0, 0, 0, 0, 0, 1],
        128,
        "Port Control Protocol anycast",
        NEVER,
    ),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 2], 128, "TURN anycast", NEVER),
    v6(
        [0x2001, 1, 0, 0, 0, 0, 0, 3],
        128,
        "DNS-SD service registration anycast",
        NEVER,
    ),
    v6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48, "benchmarking", NEVER),
    v6([0x2001, 3, 0, 0, 0, 0, 0, 0], 32, "AMT", NEVER),
    v6([0x2001, 4, 0x112, 0, 0, 0, 0, 0], 48, "AS112-v6", NEVER),
    v6(
        [0x2001, 0x10, 0, 0, 0, 0, 0, 0],
        28,
        "deprecated ORCHID",
        NEVER,
    ),
    v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28, "ORCHIDv2", NEVER),
    v6(
        [0x2001, 0x30, 0, 0, 0, 0, 0, 0],
        28,
        "drone remote ID entity tags",
        NEVER,
    ),
    v6(
        [0x2001, 0xdb8, 0, 0, 0, 0, 0, 0],
        32,
        "documentation",
        NEVER,
    ),
    v6(
        [0x2002, 0, 0, 0, 0, 0, 0, 0],
        16,
        "6to4",
        Decision::ByIpv4(Embedding::SixToFour),
    ),
    v6(
        [0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0],
        48,
        "direct delegation AS112 service",
        NEVER,
    ),
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "documentation", NEVER),
    v6(
        [0x5f00, 0, 0, 0, 0, 0, 0, 0],
        16,
        "segment routing (SRv6) SIDs",
        NEVER,
    ),
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "unique local", PRIVATE),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link-local", NEVER),
    v6(
        [0xfec0, 0, 0, 0, 0, 0, 0, 0],
        10,
        "site-local (deprecated)",
        NEVER,
    ),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast", NEVER),
    v6([0, 0, 0, 0, 0, 0, 0, 0], 3, "reserved by the IETF", NEVER),
    v6(
        [0x4000, 0, 0, 0, 0, 0, 0, 0],
        2,
        "reserved by the IETF",
        NEVER,
    ),
    v6(
        [0x8000, 0, 0, 0, 0, 0, 0, 0],
        2,
        "reserved by the IETF",
        NEVER,
    ),
    v6(
        [0xc000, 0, 0, 0, 0, 0, 0, 0],
        3,
        "reserved by the IETF",
        NEVER,
    ),
    v6(
        [0xe000, 0, 0, 0, 0, 0, 0, 0],
        4,
        "reserved by the IETF",
        NEVER,
    ),
    v6(
        [0xf000, 0, 0, 0, 0, 0, 0, 0],
        5,
        "reserved by the IETF",
        NEVER,
    ),
    v6(
        [0xf800, 0, 0, 0, 0, 0, 0, 0],
        6,
        "reserved by the IETF",
        NEVER,
    ),
    v6(
        [0xfe00, 0, 0, 0, 0, 0, 0, 0],
        9,
        "reserved by the IETF",
        NEVER,
    ),
    v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3, "global unicast", PUBLIC),
];

/// Cloud metadata and instance-service addresses (IPv4), refused whatever
/// range they are in: a request from the server to one of them can read
/// the credentials of the machine it runs on.
pub const METADATA_V4: &[(Ipv4Addr, &str)] = &[
    (
        Ipv4Addr::new(169, 254, 169, 254),
        "instance metadata (AWS, Google Cloud, Azure, Oracle Cloud, DigitalOcean, OpenStack, Hetzner, Linode, Vultr, IBM Cloud)",
    ),
    (
        Ipv4Addr::new(169, 254, 170, 2),
        "AWS ECS task metadata and credentials",
    ),
    (
        Ipv4Addr::new(169, 254, 170, 23),
        "AWS EKS Pod Identity agent",
    ),
    (Ipv4Addr::new(169, 254, 169, 253), "AWS DNS resolver"),
    (Ipv4Addr::new(169, 254, 169, 123), "AWS time sync"),
    (Ipv4Addr::new(169, 254, 0, 23), "Tencent Cloud metadata"),
    (Ipv4Addr::new(169, 254, 42, 42), "Scaleway metadata"),
    (Ipv4Addr::new(100, 100, 100, 200), "Alibaba Cloud metadata"),
    (
        Ipv4Addr::new(192, 0, 0, 192),
        "Oracle Cloud (classic) metadata",
    ),
    (
        Ipv4Addr::new(168, 63, 129, 16),
        "Azure WireServer (host agent)",
    ),
];

/// Cloud metadata and instance-service addresses (IPv6), refused whatever
/// range they are in.
pub const METADATA_V6: &[(Ipv6Addr, &str)] = &[
    (
        Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
        "AWS instance metadata",
    ),
    (
        Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x253),
        "AWS DNS resolver",
    ),
    (
        Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x123),
        "AWS time sync",
    ),
    (
        Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23),
        "AWS EKS Pod Identity agent",
    ),
    (
        Ipv6Addr::new(0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254),
        "Google Cloud metadata",
    ),
    (
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0xa9fe, 0xa9fe),
        "OpenStack metadata",
    ),
];

/// Names of cloud metadata services, refused before they are resolved
/// (compared in lower case, without a trailing dot). The single-label names
/// reach the service through the instance's DNS search domain.
pub const METADATA_NAMES: &[(&str, &str)] = &[
    ("metadata.google.internal", "Google Cloud metadata"),
    ("metadata.goog", "Google Cloud metadata"),
    ("metadata", "Google Cloud metadata (search domain)"),
    ("instance-data", "AWS instance metadata (search domain)"),
    ("instance-data.ec2.internal", "AWS instance metadata"),
    ("metadata.tencentyun.com", "Tencent Cloud metadata"),
    ("metadata.platformequinix.com", "Equinix Metal metadata"),
    ("metadata.packet.net", "Equinix Metal metadata"),
];

/// Classifies `ip` by the table: the cloud metadata services first, then
/// the most specific row that contains it. An IPv6 address that carries
/// IPv4 addresses (IPv4-mapped, IPv4-compatible, NAT64 `64:ff9b::/96`,
/// 6to4, Teredo, an ISATAP interface identifier) is judged by the most
/// restrictive class among them (and, for ISATAP, its own prefix's).
pub fn classify(ip: IpAddr) -> AddressClass {
    judge(ip).0
}

/// The class of `ip` and why (the row or service that decided it).
fn judge(ip: IpAddr) -> (AddressClass, Cow<'static, str>) {
    match ip {
        IpAddr::V4(ip) => judge_v4(ip),
        IpAddr::V6(ip) => judge_v6(ip),
    }
}

fn judge_v4(ip: Ipv4Addr) -> (AddressClass, Cow<'static, str>) {
    if let Some((_, who)) = METADATA_V4.iter().find(|(m, _)| *m == ip) {
        return (AddressClass::Forbidden, Cow::Borrowed(*who));
    }
    let bits = u32::from(ip);
    let row = V4_RANGES
        .iter()
        .filter(|r| contains(u32::from(r.prefix).into(), bits.into(), r.len, 32))
        .max_by_key(|r| r.len);
    match row {
        Some(Range {
            decision: Decision::Is(class),
            what,
            ..
        }) => (*class, Cow::Borrowed(*what)),
        // No IPv4 row embeds another address, and `0.0.0.0/0` covers all.
        Some(_) | None => (AddressClass::Forbidden, Cow::Borrowed("unclassified")),
    }
}

fn judge_v6(ip: Ipv6Addr) -> (AddressClass, Cow<'static, str>) {
    if let Some((_, who)) = METADATA_V6.iter().find(|(m, _)| *m == ip) {
        return (AddressClass::Forbidden, Cow::Borrowed(*who));
    }
    let bits = u128::from(ip);
    let row = V6_RANGES
        .iter()
        .filter(|r| contains(u128::from(r.prefix), bits, r.len, 128))
        .max_by_key(|r| r.len);
    // The rows cover the whole space; refuse rather than guess otherwise.
    let Some(row) = row else {
        return (AddressClass::Forbidden, Cow::Borrowed("unclassified"));
    };
    match row.decision {
        Decision::Is(class) => {
            let own = (class, Cow::Borrowed(row.what));
            match isatap(ip) {
                Some(inner) => stricter(own, carried("ISATAP", inner)),
                None => own,
            }
        }
        Decision::ByIpv4(embedding) => {
            let [first, second] = embedded(ip, embedding);
            stricter(carried(row.what, first), carried(row.what, second))
        }
    }
}

/// The class of an IPv4 address an IPv6 address carries, said so.
fn carried(form: &str, inner: Ipv4Addr) -> (AddressClass, Cow<'static, str>) {
    let (class, what) = judge_v4(inner);
    (
        class,
        Cow::Owned(format!("{form} carrying {inner}: {what}")),
    )
}

/// The more restrictive of two verdicts: a public one yields to the other;
/// two different non-public classes (say loopback and private) satisfy no
/// single setting, so the address is never a target.
fn stricter(
    a: (AddressClass, Cow<'static, str>),
    b: (AddressClass, Cow<'static, str>),
) -> (AddressClass, Cow<'static, str>) {
    match (a.0, b.0) {
        (x, y) if x == y => a,
        (AddressClass::Public, _) => b,
        (_, AddressClass::Public) => a,
        (AddressClass::Forbidden, _) => a,
        (_, AddressClass::Forbidden) => b,
        _ => (
            AddressClass::Forbidden,
            Cow::Owned(format!("{}; {}", a.1, b.1)),
        ),
    }
}

/// True if `addr` is in `prefix/len`, both `width` bits wide.
fn contains(prefix: u128, addr: u128, len: u8, width: u32) -> bool {
    let host_bits = width.saturating_sub(u32::from(len));
    if host_bits >= width {
        return true;
    }
    (prefix >> host_bits) == (addr >> host_bits)
}

/// The 32 bits of `ip` from segment `at` on, as an IPv4 address.
fn v4_at(ip: Ipv6Addr, at: usize) -> Ipv4Addr {
    let s = ip.segments();
    let hi = s.get(at).copied().unwrap_or(0);
    let lo = s.get(at + 1).copied().unwrap_or(0);
    Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo))
}

/// The IPv4 addresses `ip` carries in the layout of `embedding`.
fn embedded(ip: Ipv6Addr, embedding: Embedding) -> [Ipv4Addr; 2] {
    match embedding {
        // One address: given twice, it decides alone.
        Embedding::Mapped | Embedding::Compatible | Embedding::Nat64 => {
            let inner = v4_at(ip, 6);
            [inner, inner]
        }
        Embedding::SixToFour => {
            let inner = v4_at(ip, 1);
            [inner, inner]
        }
        Embedding::Teredo => [v4_at(ip, 2), Ipv4Addr::from(!u32::from(v4_at(ip, 6)))],
    }
}

/// The IPv4 address of an ISATAP interface identifier (RFC 5214:
/// `…:0000:5efe:a.b.c.d`, `…:0200:5efe:a.b.c.d`, with the group bit too).
fn isatap(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    (s[4] & 0xfcff == 0 && s[5] == 0x5efe).then(|| v4_at(ip, 6))
}

/// `Err` when `name` is a cloud metadata service's name ([`METADATA_NAMES`]),
/// refused before it is resolved.
pub fn check_name(name: &str) -> Result<(), String> {
    let lower = name.trim_end_matches('.').to_ascii_lowercase();
    match METADATA_NAMES.iter().find(|(n, _)| *n == lower) {
        Some((_, who)) => Err(format!(
            "{name} is a cloud metadata service name ({who}), never a callback target"
        )),
        None => Ok(()),
    }
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
        let (class, what) = judge(ip);
        match class {
            AddressClass::Public => Ok(()),
            AddressClass::Loopback if self.loopback => Ok(()),
            AddressClass::Private if self.private => Ok(()),
            AddressClass::Loopback => Err(format!(
                "{ip} is a loopback address ([callbacks] allow_loopback is off)"
            )),
            AddressClass::Private => Err(format!(
                "{ip} is a private or shared address ([callbacks] allow_private is off)"
            )),
            AddressClass::Forbidden => Err(format!(
                "{ip} is a metadata, unspecified, multicast or reserved address ({what}), never a callback target"
            )),
        }
    }

    /// Checks `host` ([`check_name`]) and every address it resolves to now;
    /// `Ok` with them when all are allowed.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        check_name(host)?;
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("{host} does not resolve: {e}"))?
            .collect();
        self.check_all(host, addrs)
    }

    /// `addrs`, when there are some and the policy allows every one.
    fn check_all(&self, host: &str, addrs: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, String> {
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
#[derive(Clone)]
pub struct CheckedResolver {
    policy: AddressPolicy,
    /// Tests answer lookups themselves.
    #[cfg(test)]
    lookup: Option<TestLookup>,
}

/// A lookup a test answers itself.
#[cfg(test)]
type TestLookup = std::sync::Arc<dyn Fn(&str) -> Vec<IpAddr> + Send + Sync>;

impl std::fmt::Debug for CheckedResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckedResolver")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl CheckedResolver {
    /// A resolver enforcing `policy`.
    pub fn new(policy: AddressPolicy) -> Self {
        Self {
            policy,
            #[cfg(test)]
            lookup: None,
        }
    }

    /// A resolver enforcing `policy` on the answers of `lookup` instead of
    /// the system's resolver.
    #[cfg(test)]
    pub(crate) fn with_lookup(
        policy: AddressPolicy,
        lookup: impl Fn(&str) -> Vec<IpAddr> + Send + Sync + 'static,
    ) -> Self {
        Self {
            policy,
            lookup: Some(std::sync::Arc::new(lookup)),
        }
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
        #[cfg(test)]
        let lookup = self.lookup.clone();
        Box::pin(async move {
            // The port is the connector's to set; 0 is a placeholder.
            #[cfg(test)]
            let checked = match lookup {
                Some(lookup) => check_name(&host).and_then(|()| {
                    let addrs = lookup(&host)
                        .into_iter()
                        .map(|ip| SocketAddr::new(ip, 0))
                        .collect();
                    policy.check_all(&host, addrs)
                }),
                None => policy.resolve(&host, 0).await,
            };
            #[cfg(not(test))]
            let checked = policy.resolve(&host, 0).await;
            match checked {
                Ok(addrs) => Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs),
                Err(why) => Err(Box::new(AddressRefused(why)) as _),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AddressClass::{Forbidden, Loopback, Private, Public};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Samples of every row (its first, a middle and its last address where
    /// no more specific row takes them), written out by hand rather than
    /// computed from the table.
    #[test]
    fn every_row_of_the_table_decides_its_addresses() {
        for (s, class) in [
            // "this network", "this host on this network"
            ("0.0.0.0", Forbidden),
            ("0.1.2.3", Forbidden),
            ("0.255.255.255", Forbidden),
            // private use
            ("10.0.0.0", Private),
            ("10.128.0.1", Private),
            ("10.255.255.255", Private),
            ("172.16.0.0", Private),
            ("172.24.5.4", Private),
            ("172.31.255.255", Private),
            ("192.168.0.0", Private),
            ("192.168.128.1", Private),
            ("192.168.255.255", Private),
            // shared address space
            ("100.64.0.0", Private),
            ("100.96.0.1", Private),
            ("100.127.255.255", Private),
            // loopback
            ("127.0.0.0", Loopback),
            ("127.0.0.1", Loopback),
            ("127.255.255.255", Loopback),
            // link-local
            ("169.254.0.0", Forbidden),
            ("169.254.1.1", Forbidden),
            ("169.254.255.255", Forbidden),
            // IETF protocol assignments and their sub-entries
            ("192.0.0.0", Forbidden),
            ("192.0.0.7", Forbidden),
            ("192.0.0.8", Forbidden),
            ("192.0.0.9", Forbidden),
            ("192.0.0.10", Forbidden),
            ("192.0.0.128", Forbidden),
            ("192.0.0.170", Forbidden),
            ("192.0.0.171", Forbidden),
            ("192.0.0.255", Forbidden),
            // documentation, AS112, AMT, 6to4 relay, benchmarking
            ("192.0.2.0", Forbidden),
            ("192.0.2.128", Forbidden),
            ("192.0.2.255", Forbidden),
            ("192.31.196.0", Forbidden),
            ("192.31.196.255", Forbidden),
            ("192.52.193.0", Forbidden),
            ("192.52.193.255", Forbidden),
            ("192.88.99.0", Forbidden),
            ("192.88.99.1", Forbidden),
            ("192.88.99.255", Forbidden),
            ("192.175.48.0", Forbidden),
            ("192.175.48.255", Forbidden),
            ("198.18.0.0", Forbidden),
            ("198.18.255.255", Forbidden),
            ("198.19.0.0", Forbidden),
            ("198.19.255.255", Forbidden),
            ("198.51.100.0", Forbidden),
            ("198.51.100.255", Forbidden),
            ("203.0.113.0", Forbidden),
            ("203.0.113.255", Forbidden),
            // multicast, reserved, broadcast
            ("224.0.0.0", Forbidden),
            ("232.1.2.3", Forbidden),
            ("239.255.255.255", Forbidden),
            ("240.0.0.0", Forbidden),
            ("248.0.0.1", Forbidden),
            ("255.255.255.254", Forbidden),
            ("255.255.255.255", Forbidden),
            // the neighbours of the ranges are public
            ("1.1.1.1", Public),
            ("8.8.8.8", Public),
            ("9.255.255.255", Public),
            ("11.0.0.0", Public),
            ("100.63.255.255", Public),
            ("100.128.0.0", Public),
            ("126.255.255.255", Public),
            ("128.0.0.0", Public),
            ("169.253.255.255", Public),
            ("169.255.0.0", Public),
            ("172.15.255.255", Public),
            ("172.32.0.0", Public),
            ("192.0.1.0", Public),
            ("192.0.3.0", Public),
            ("192.88.98.255", Public),
            ("192.88.100.0", Public),
            ("192.167.255.255", Public),
            ("192.169.0.0", Public),
            ("198.17.255.255", Public),
            ("198.20.0.0", Public),
            ("223.255.255.255", Public),
            // IPv6: unspecified, loopback
            ("::", Forbidden),
            ("::1", Loopback),
            // NAT64 local use, discard-only, dummy prefix
            ("64:ff9b:1::", Forbidden),
            ("64:ff9b:1:8000::1", Forbidden),
            ("64:ff9b:1:ffff:ffff:ffff:ffff:ffff", Forbidden),
            ("100::", Forbidden),
            ("100::ffff:ffff:ffff:ffff", Forbidden),
            ("100:0:0:1::", Forbidden),
            ("100:0:0:1:ffff:ffff:ffff:ffff", Forbidden),
            // IETF protocol assignments and their sub-entries
            ("2001:100::", Forbidden),
            ("2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", Forbidden),
            ("2001:1::", Forbidden),
            ("2001:1::1", Forbidden),
            ("2001:1::2", Forbidden),
            ("2001:1::3", Forbidden),
            ("2001:2::", Forbidden),
            ("2001:2:0:ffff:ffff:ffff:ffff:ffff", Forbidden),
            ("2001:3::", Forbidden),
            ("2001:3:ffff:ffff:ffff:ffff:ffff:ffff", Forbidden),
            ("2001:4:112::", Forbidden),
            ("2001:4:112:ffff:ffff:ffff:ffff:ffff", Forbidden),
            ("2001:10::", Forbidden),
            ("2001:1f:ffff:ffff:ffff:ffff:ffff:ffff", Forbidden),
            ("2001:20::", Forbidden),
            ("2001:2f:ffff:ffff:ffff:ffff:ffff:ffff", Forbidden),
            ("2001:30::", Forbidden),
            ("2001:3f:ffff:ffff:ffff:ffff:ffff:ffff", Forbidden),
            // documentation, AS112, SRv6
            ("2001:db8::", Forbidden),
            ("2001:db8:8000::1", Forbidden),
            ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", Forbidden),
            ("2620:4f:8000::", Forbidden),
            ("2620:4f:8000:ffff:ffff:ffff:ffff:ffff", Forbidden),
            ("3fff::", Forbidden),
            ("3fff:800::1", Forbidden),
            ("3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", Forbidden),
            ("5f00::", Forbidden),
            ("5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Forbidden),
            // unique local, link-local, site-local, multicast
            ("fc00::", Private),
            ("fd12:3456::1", Private),
            ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Private),
            ("fe80::", Forbidden),
            ("fe80::1", Forbidden),
            ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Forbidden),
            ("fec0::", Forbidden),
            ("feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Forbidden),
            ("ff00::", Forbidden),
            ("ff02::1", Forbidden),
            ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Forbidden),
            // reserved by the IETF (outside 2000::/3)
            ("::1:0:0:0", Forbidden),
            ("1000::", Forbidden),
            ("1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Forbidden),
            ("4000::", Forbidden),
            ("7fff::1", Forbidden),
            ("8000::", Forbidden),
            ("bfff::1", Forbidden),
            ("c000::", Forbidden),
            ("e000::", Forbidden),
            ("f000::", Forbidden),
            ("f800::", Forbidden),
            ("fbff::1", Forbidden),
            ("fe00::", Forbidden),
            ("fe7f::1", Forbidden),
            // global unicast
            ("2000::", Public),
            ("2001:200::", Public),
            ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", Public),
            ("2001:db9::", Public),
            ("2606:4700::1111", Public),
            ("2620:4f:7fff:ffff:ffff:ffff:ffff:ffff", Public),
            ("2620:4f:8001::", Public),
            ("3ffe:ffff::1", Public),
            ("3fff:1000::", Public),
        ] {
            assert_eq!(classify(ip(s)), class, "{s}");
        }
    }

    /// The first, a middle and the last address of every row, computed
    /// from the table: each one no more specific row takes is decided by
    /// its row, and every row decides at least one of them.
    #[test]
    fn classify_follows_the_table_row_by_row() {
        fn owner<A: Copy, const W: u32>(
            rows: &[Range<A>],
            bits: fn(A) -> u128,
            addr: u128,
        ) -> Option<usize> {
            rows.iter()
                .enumerate()
                .filter(|(_, r)| contains(bits(r.prefix), addr, r.len, W))
                .max_by_key(|(_, r)| r.len)
                .map(|(i, _)| i)
        }
        fn samples(prefix: u128, len: u8, width: u32) -> [u128; 3] {
            let host_bits = width - u32::from(len);
            let mask = if host_bits == 0 {
                0
            } else {
                u128::MAX >> (128 - host_bits)
            };
            let middle = if host_bits == 0 {
                0
            } else {
                1u128 << (host_bits - 1)
            };
            [prefix, prefix | middle, prefix | mask]
        }
        for (i, row) in V4_RANGES.iter().enumerate() {
            let Decision::Is(class) = row.decision else {
                panic!("an IPv4 row embeds nothing");
            };
            let mut decided = 0;
            for s in samples(u32::from(row.prefix).into(), row.len, 32) {
                let addr = Ipv4Addr::from(u32::try_from(s).unwrap());
                let metadata = METADATA_V4.iter().any(|(m, _)| *m == addr);
                if owner::<_, 32>(V4_RANGES, |a| u32::from(a).into(), s) == Some(i) && !metadata {
                    assert_eq!(classify(IpAddr::V4(addr)), class, "{addr} in {}", row.what);
                    decided += 1;
                }
            }
            assert!(decided > 0, "{}/{}: no sample", row.prefix, row.len);
        }
        for (i, row) in V6_RANGES.iter().enumerate() {
            let Decision::Is(class) = row.decision else {
                continue;
            };
            let mut decided = 0;
            for s in samples(u128::from(row.prefix), row.len, 128) {
                let addr = Ipv6Addr::from(s);
                let metadata = METADATA_V6.iter().any(|(m, _)| *m == addr);
                if owner::<_, 128>(V6_RANGES, u128::from, s) == Some(i)
                    && !metadata
                    && isatap(addr).is_none()
                {
                    assert_eq!(classify(IpAddr::V6(addr)), class, "{addr} in {}", row.what);
                    decided += 1;
                }
            }
            assert!(decided > 0, "{}/{}: no sample", row.prefix, row.len);
        }
    }

    #[test]
    fn metadata_services_are_refused_in_every_range_they_sit_in() {
        for (addr, who) in METADATA_V4 {
            assert_eq!(classify(IpAddr::V4(*addr)), Forbidden, "{addr} {who}");
            let mapped = IpAddr::V6(addr.to_ipv6_mapped());
            assert_eq!(classify(mapped), Forbidden, "{mapped} {who}");
        }
        for (addr, who) in METADATA_V6 {
            assert_eq!(classify(IpAddr::V6(*addr)), Forbidden, "{addr} {who}");
        }
        // Their neighbours in the same ranges are not.
        assert_eq!(classify(ip("100.100.100.201")), Private);
        assert_eq!(classify(ip("168.63.129.17")), Public);
        assert_eq!(classify(ip("fd00:ec2::255")), Private);
        assert_eq!(classify(ip("fd20:ce::253")), Private);
        for name in [
            "metadata.google.internal",
            "METADATA.Google.Internal.",
            "metadata",
            "metadata.goog",
            "instance-data",
            "instance-data.ec2.internal",
            "metadata.tencentyun.com",
        ] {
            assert!(check_name(name).is_err(), "{name}");
        }
        for name in ["metadata.example.com", "hooks.test", "localhost"] {
            assert!(check_name(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn ipv6_forms_of_ipv4_are_judged_by_the_ipv4_inside() {
        for (s, class) in [
            // IPv4-mapped, IPv4-compatible, NAT64 well-known prefix
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:7f00:1", Loopback),
            ("::ffff:10.0.0.1", Private),
            ("::ffff:100.64.0.1", Private),
            ("::ffff:8.8.8.8", Public),
            ("::ffff:0.0.0.0", Forbidden),
            ("::ffff:169.254.169.254", Forbidden),
            ("::ffff:192.0.2.1", Forbidden),
            ("::127.0.0.1", Loopback),
            ("::10.0.0.1", Private),
            ("::8.8.8.8", Public),
            ("::0.0.0.2", Forbidden),
            ("::169.254.169.254", Forbidden),
            ("64:ff9b::7f00:1", Loopback),
            ("64:ff9b::10.1.2.3", Private),
            ("64:ff9b::8.8.8.8", Public),
            ("64:ff9b::169.254.169.254", Forbidden),
            ("64:ff9b::100.100.100.200", Forbidden),
            // NAT64 local use: the layout depends on the prefix length
            // chosen by the network, so the whole /48 is refused.
            ("64:ff9b:1::8.8.8.8", Forbidden),
            ("64:ff9b:1:808:8:800::", Forbidden),
            // 6to4: the IPv4 address is bits 16-47
            ("2002:808:808::1", Public),
            ("2002:7f00:1::", Loopback),
            ("2002:a00:1::1", Private),
            ("2002:a9fe:a9fe::", Forbidden),
            ("2002:c000:201::1", Forbidden),
            ("2002:e000:1::", Forbidden),
            ("2002::1", Forbidden),
            // Teredo: server in bits 32-63, client inverted in the last 32
            // bits (f7f7:f7f7 is 8.8.8.8, 80ff:fffe is 127.0.0.1,
            // 5601:5601 is 169.254.169.254, f5ff:fffe is 10.0.0.1)
            ("2001:0:808:808:8000:f227:f7f7:f7f7", Public),
            ("2001:0:808:808:8000:f227:80ff:fffe", Loopback),
            ("2001:0:7f00:1:8000:f227:f7f7:f7f7", Loopback),
            ("2001:0:808:808:8000:f227:5601:5601", Forbidden),
            ("2001:0:a9fe:a9fe:8000:f227:f7f7:f7f7", Forbidden),
            ("2001:0:a00:1:8000:f227:f5ff:fffe", Private),
            // Two different non-public classes: never.
            ("2001:0:7f00:1:8000:f227:f5ff:fffe", Forbidden),
            // ISATAP interface identifiers, under any prefix
            ("2606:4700::5efe:808:808", Public),
            ("2606:4700::5efe:7f00:1", Loopback),
            ("2606:4700::200:5efe:a9fe:a9fe", Forbidden),
            ("2606:4700::200:5efe:a00:1", Private),
            ("fd00::5efe:808:808", Private),
            ("fd00::5efe:7f00:1", Forbidden),
            ("fd00::5efe:a00:1", Private),
            ("fd00::5efe:c000:201", Forbidden),
        ] {
            assert_eq!(classify(ip(s)), class, "{s}");
        }
    }

    /// The table in `docs/server.md` ("Callbacks") lists the same ranges
    /// with the same decisions, and the same metadata services.
    #[test]
    fn the_docs_table_is_the_code_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/server.md");
        let docs = std::fs::read_to_string(path).unwrap();
        let table = |header: &str| -> Vec<Vec<String>> {
            let mut lines = docs.lines().skip_while(|l| l.trim() != header);
            assert!(lines.next().is_some(), "no table headed {header}");
            lines
                .skip(1)
                .take_while(|l| l.trim_start().starts_with('|'))
                .map(|l| {
                    l.trim()
                        .trim_matches('|')
                        .split('|')
                        .map(|c| c.trim().to_owned())
                        .collect()
                })
                .collect()
        };
        let ticked = |cell: &str| -> Vec<String> {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect()
        };
        let decision = |cell: &str| match cell.trim_matches('*').to_ascii_lowercase().as_str() {
            "never" => NEVER,
            "loopback" => LOOPBACK,
            "private" => PRIVATE,
            "public" => PUBLIC,
            other => {
                assert_eq!(other, "its ipv4", "unknown decision {cell:?}");
                Decision::ByIpv4(Embedding::Mapped)
            }
        };
        // Embeddings compare equal: the docs name the decision, not the layout.
        let flat = |d: Decision| match d {
            Decision::ByIpv4(_) => Decision::ByIpv4(Embedding::Mapped),
            d => d,
        };
        let mut documented: Vec<(IpAddr, u8, Decision)> = Vec::new();
        for row in table("| range | what it is | decision | why |") {
            assert_eq!(row.len(), 4, "{row:?}");
            let ranges = ticked(&row[0]);
            assert!(!ranges.is_empty(), "{row:?}");
            for range in ranges {
                let (addr, len) = range.split_once('/').unwrap();
                documented.push((ip(addr), len.parse().unwrap(), decision(&row[2])));
            }
        }
        let code: Vec<(IpAddr, u8, Decision)> = V4_RANGES
            .iter()
            .map(|r| (IpAddr::V4(r.prefix), r.len, flat(r.decision)))
            .chain(
                V6_RANGES
                    .iter()
                    .map(|r| (IpAddr::V6(r.prefix), r.len, flat(r.decision))),
            )
            .collect();
        for row in &code {
            assert!(documented.contains(row), "the docs lack {row:?}");
        }
        for row in &documented {
            assert!(code.contains(row), "the code lacks {row:?}");
        }
        assert_eq!(documented.len(), code.len(), "a range is listed twice");

        let mut services: Vec<String> = table("| metadata service | addresses and names |")
            .iter()
            .flat_map(|row| ticked(&row[1]))
            .collect();
        services.sort();
        let mut code: Vec<String> = METADATA_V4
            .iter()
            .map(|(a, _)| a.to_string())
            .chain(METADATA_V6.iter().map(|(a, _)| a.to_string()))
            .chain(METADATA_NAMES.iter().map(|(n, _)| (*n).to_owned()))
            .collect();
        code.sort();
        assert_eq!(services, code);
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
        assert!(open.check(ip("fd00::1")).is_ok());
        for never in [
            "169.254.169.254",
            "169.254.1.1",
            "fe80::1",
            "fd00:ec2::254",
            "100.100.100.200",
            "0.0.0.0",
            "192.0.2.1",
            "198.18.0.1",
        ] {
            let err = open.check(ip(never)).unwrap_err();
            assert!(err.ends_with("never a callback target"), "{err}");
        }
        // A 6to4 address carrying a loopback address is loopback.
        assert!(open.check(ip("2002:7f00:1::")).is_ok());
        assert!(strict.check(ip("2002:7f00:1::")).is_err());
        let err = open.check(ip("169.254.169.254")).unwrap_err();
        assert!(err.contains("AWS"), "{err}");
        let err = strict.check(ip("2002:a00:1::")).unwrap_err();
        assert!(err.contains("allow_private is off"), "{err}");
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

    #[tokio::test]
    async fn metadata_names_are_refused_before_they_are_resolved() {
        let open = AddressPolicy {
            loopback: true,
            private: true,
        };
        for name in ["metadata.google.internal", "metadata", "instance-data."] {
            let err = open.resolve(name, 80).await.unwrap_err();
            assert!(err.contains("cloud metadata service name"), "{err}");
        }
    }

    #[test]
    fn any_answer_the_policy_refuses_refuses_the_name() {
        let local = AddressPolicy {
            loopback: true,
            private: false,
        };
        let at = |s: &str| SocketAddr::new(ip(s), 80);
        assert!(local.check_all("a.test", vec![at("127.0.0.1")]).is_ok());
        let err = local
            .check_all("a.test", vec![at("127.0.0.1"), at("169.254.169.254")])
            .unwrap_err();
        assert!(
            err.starts_with("a.test resolves to 169.254.169.254"),
            "{err}"
        );
        assert!(local.check_all("a.test", vec![]).is_err());
    }
}
