//! Which address a grant may be dialed at. The engine resolves a granted
//! name itself and asks, for each address it would connect to, whether
//! that exact address is allowed; names are never resolved twice, so what
//! is checked is what is dialed.
//!
//! The policy is the operator's, and a manifest cannot widen it:
//!
//! * **Always denied**: the unspecified network 0.0.0.0/8 and `::`,
//!   loopback, link-local (169.254.0.0/16, fe80::/10), multicast,
//!   broadcast, the fake pool 198.18.0.0/15, and cloud metadata services
//!   (169.254.169.254, Alibaba's 100.100.100.200, AWS's fd00:ec2::254).
//! * **Denied unless the operator's `allow_cidrs` covers the address**:
//!   RFC 1918 space, CGNAT 100.64.0.0/10, 192.0.0.0/24, the documentation
//!   networks, 240.0.0.0/4, unique-local fc00::/7, site-local fec0::/10,
//!   and IPv6 outside global unicast 2000::/3.
//! * An IPv4 address inside IPv6 (IPv4-mapped, IPv4-compatible,
//!   IPv4-translated, NAT64 64:ff9b::/96, 6to4 2002::/16, Teredo
//!   2001::/32) is judged as that IPv4 address, so `::ffff:127.0.0.1` and
//!   `64:ff9b::a9fe:a9fe` are loopback and metadata.
//! * The operator's `deny_cidrs` deny whatever they cover.
//! * **The host's own addresses** ([`HostAddresses`]: those assigned to
//!   the interfaces of the network namespace the engine dials from) are
//!   denied to a name whatever else allows them, `allow_cidrs` included,
//!   and so is an IPv6 form that carries one of them. A connection to
//!   one of them is a connection to the host itself: it reaches every
//!   service bound to `0.0.0.0` or `::`, through `lo`, past security
//!   groups and the `-i lo -j ACCEPT` of host firewalls. `allow_cidrs`
//!   opens networks (a LAN, a VPC) to granted names; the host's own
//!   address inside such a network (its LAN address, `docker0`'s
//!   172.17.0.1) is not a service of that network, so only a grant that
//!   names the address reaches it.
//!
//! A grant that is itself an address allows exactly that address, even in
//! a denied range or when it is the host's own (`127.0.0.1:8080` reaches
//! a service on the host's loopback), except where the operator's
//! `deny_cidrs` say otherwise and except metadata services, the
//! unspecified network and the fake pool: a metadata service hands out
//! the machine's cloud credentials, so no manifest reaches it. The tables
//! are data below ([`V4_RANGES`], [`V6_RANGES`]), most specific first.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use super::fake_pool::{FAKE_POOL_BASE, FAKE_POOL_PREFIX};
use super::grant::Host;
use crate::printable::printable;

/// Why an address may not be dialed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum DenyReason {
    /// 0.0.0.0/8 or `::`: `connect` takes it for this machine.
    Unspecified,
    /// 127.0.0.0/8 or `::1`.
    Loopback,
    /// 169.254.0.0/16 or fe80::/10.
    LinkLocal,
    /// A cloud metadata service.
    Metadata,
    /// 224.0.0.0/4 or ff00::/8.
    Multicast,
    /// 255.255.255.255.
    Broadcast,
    /// 198.18.0.0/15, the addresses spawnd answers granted names with.
    FakePool,
    /// RFC 1918: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16.
    Private,
    /// 100.64.0.0/10, carrier-grade NAT space (RFC 6598).
    SharedAddress,
    /// 192.0.0.0/24, IETF protocol assignments.
    ProtocolAssignments,
    /// TEST-NET-1/2/3, 2001:db8::/32, 3fff::/20.
    Documentation,
    /// 240.0.0.0/4, 100::/64, and IPv6 outside 2000::/3.
    Reserved,
    /// fc00::/7.
    UniqueLocal,
    /// fec0::/10 (deprecated, still routed on some networks).
    SiteLocal,
    /// Covered by the operator's `deny_cidrs`.
    OperatorDenied,
    /// Not the address an address grant names.
    NotGrantedAddress,
    /// Assigned to an interface of the host the engine dials from, and
    /// reached through a name: only a grant of the address itself may.
    HostAddress,
}

impl DenyReason {
    /// Every reason, for documentation checks and tests.
    #[cfg(test)]
    pub(crate) const ALL: [DenyReason; 17] = [
        DenyReason::Unspecified,
        DenyReason::Loopback,
        DenyReason::LinkLocal,
        DenyReason::Metadata,
        DenyReason::Multicast,
        DenyReason::Broadcast,
        DenyReason::FakePool,
        DenyReason::Private,
        DenyReason::SharedAddress,
        DenyReason::ProtocolAssignments,
        DenyReason::Documentation,
        DenyReason::Reserved,
        DenyReason::UniqueLocal,
        DenyReason::SiteLocal,
        DenyReason::OperatorDenied,
        DenyReason::NotGrantedAddress,
        DenyReason::HostAddress,
    ];

    /// The reason as audit records and messages name it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DenyReason::Unspecified => "unspecified",
            DenyReason::Loopback => "loopback",
            DenyReason::LinkLocal => "link_local",
            DenyReason::Metadata => "metadata",
            DenyReason::Multicast => "multicast",
            DenyReason::Broadcast => "broadcast",
            DenyReason::FakePool => "fake_pool",
            DenyReason::Private => "private",
            DenyReason::SharedAddress => "shared_address",
            DenyReason::ProtocolAssignments => "protocol_assignments",
            DenyReason::Documentation => "documentation",
            DenyReason::Reserved => "reserved",
            DenyReason::UniqueLocal => "unique_local",
            DenyReason::SiteLocal => "site_local",
            DenyReason::OperatorDenied => "operator_denied",
            DenyReason::NotGrantedAddress => "not_granted_address",
            DenyReason::HostAddress => "host_address",
        }
    }
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an IPv6 address carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Embedding {
    /// `::ffff:a.b.c.d` (IPv4-mapped).
    Ipv4Mapped,
    /// `::a.b.c.d` (IPv4-compatible, deprecated).
    Ipv4Compatible,
    /// `::ffff:0:a.b.c.d` (IPv4-translated, SIIT).
    Ipv4Translated,
    /// `64:ff9b::a.b.c.d` (NAT64 well-known prefix).
    Nat64,
    /// `2002:AABB:CCDD::/48` (6to4).
    SixToFour,
    /// `2001:0:SSSS:SSSS:…:CCCC:CCCC` (Teredo: server, and the client's
    /// address inverted).
    Teredo,
}

impl Embedding {
    /// The form as audit records name it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Embedding::Ipv4Mapped => "ipv4_mapped",
            Embedding::Ipv4Compatible => "ipv4_compatible",
            Embedding::Ipv4Translated => "ipv4_translated",
            Embedding::Nat64 => "nat64",
            Embedding::SixToFour => "6to4",
            Embedding::Teredo => "teredo",
        }
    }
}

/// What the policy thinks of an address, before the operator's lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Class {
    /// Globally reachable: allowed.
    Public,
    /// Denied unless `allow_cidrs` covers it.
    DeniedUnlessAllowed(DenyReason),
    /// Denied whatever the operator allows.
    AlwaysDenied(DenyReason),
}

use Class::{AlwaysDenied, DeniedUnlessAllowed};

/// IPv4 ranges that are not public, most specific first.
pub(crate) const V4_RANGES: &[(Ipv4Net, Class)] = &[
    (
        v4(169, 254, 169, 254, 32),
        AlwaysDenied(DenyReason::Metadata),
    ),
    (
        v4(100, 100, 100, 200, 32),
        AlwaysDenied(DenyReason::Metadata),
    ),
    // Azure's WireServer, ECS task credentials, EKS Pod Identity,
    // Tencent's and Oracle Cloud's legacy metadata addresses.
    (v4(168, 63, 129, 16, 32), AlwaysDenied(DenyReason::Metadata)),
    (v4(169, 254, 170, 2, 32), AlwaysDenied(DenyReason::Metadata)),
    (
        v4(169, 254, 170, 23, 32),
        AlwaysDenied(DenyReason::Metadata),
    ),
    (v4(169, 254, 0, 23, 32), AlwaysDenied(DenyReason::Metadata)),
    (v4(192, 0, 0, 192, 32), AlwaysDenied(DenyReason::Metadata)),
    (
        v4(255, 255, 255, 255, 32),
        AlwaysDenied(DenyReason::Broadcast),
    ),
    (v4(0, 0, 0, 0, 8), AlwaysDenied(DenyReason::Unspecified)),
    (v4(127, 0, 0, 0, 8), AlwaysDenied(DenyReason::Loopback)),
    (v4(169, 254, 0, 0, 16), AlwaysDenied(DenyReason::LinkLocal)),
    (v4(224, 0, 0, 0, 4), AlwaysDenied(DenyReason::Multicast)),
    (
        Ipv4Net::new_assert(FAKE_POOL_BASE, FAKE_POOL_PREFIX),
        AlwaysDenied(DenyReason::FakePool),
    ),
    (v4(10, 0, 0, 0, 8), DeniedUnlessAllowed(DenyReason::Private)),
    (
        v4(172, 16, 0, 0, 12),
        DeniedUnlessAllowed(DenyReason::Private),
    ),
    (
        v4(192, 168, 0, 0, 16),
        DeniedUnlessAllowed(DenyReason::Private),
    ),
    (
        v4(100, 64, 0, 0, 10),
        DeniedUnlessAllowed(DenyReason::SharedAddress),
    ),
    (
        v4(192, 0, 0, 0, 24),
        DeniedUnlessAllowed(DenyReason::ProtocolAssignments),
    ),
    (
        v4(192, 0, 2, 0, 24),
        DeniedUnlessAllowed(DenyReason::Documentation),
    ),
    (
        v4(198, 51, 100, 0, 24),
        DeniedUnlessAllowed(DenyReason::Documentation),
    ),
    (
        v4(203, 0, 113, 0, 24),
        DeniedUnlessAllowed(DenyReason::Documentation),
    ),
    (
        v4(240, 0, 0, 0, 4),
        DeniedUnlessAllowed(DenyReason::Reserved),
    ),
];

/// IPv6 ranges that are not public, most specific first, after the forms
/// that embed IPv4 (see [`embedded_ipv4`]). What is not in 2000::/3 and
/// not listed is [`DenyReason::Reserved`].
pub(crate) const V6_RANGES: &[(Ipv6Net, Class)] = &[
    (
        v6([0, 0, 0, 0, 0, 0, 0, 0], 128),
        AlwaysDenied(DenyReason::Unspecified),
    ),
    (
        v6([0, 0, 0, 0, 0, 0, 0, 1], 128),
        AlwaysDenied(DenyReason::Loopback),
    ),
    (
        v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254], 128),
        AlwaysDenied(DenyReason::Metadata),
    ),
    (
        v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23], 128),
        AlwaysDenied(DenyReason::Metadata),
    ),
    (
        v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
        AlwaysDenied(DenyReason::LinkLocal),
    ),
    (
        v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),
        AlwaysDenied(DenyReason::Multicast),
    ),
    (
        v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
        DeniedUnlessAllowed(DenyReason::UniqueLocal),
    ),
    (
        v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),
        DeniedUnlessAllowed(DenyReason::SiteLocal),
    ),
    (
        v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32),
        DeniedUnlessAllowed(DenyReason::Documentation),
    ),
    (
        v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),
        DeniedUnlessAllowed(DenyReason::Documentation),
    ),
    (v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3), Class::Public),
];

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)
}

const fn v6(s: [u16; 8], len: u8) -> Ipv6Net {
    Ipv6Net::new_assert(
        Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        len,
    )
}

/// The class of an IPv4 address.
pub(crate) fn classify_v4(ip: Ipv4Addr) -> Class {
    V4_RANGES
        .iter()
        .find(|(net, _)| net.contains(&ip))
        .map_or(Class::Public, |(_, class)| *class)
}

/// The IPv4 addresses an IPv6 address carries, and how. Teredo carries
/// two (its server's, and its client's public address, inverted); the
/// others one.
pub(crate) fn embedded_ipv4(ip: Ipv6Addr) -> Vec<(Embedding, Ipv4Addr)> {
    let s = ip.segments();
    let o = ip.octets();
    let low = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    match s {
        // `::` and `::1` are themselves, not IPv4 in IPv6.
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => vec![],
        [0, 0, 0, 0, 0, 0xffff, _, _] => vec![(Embedding::Ipv4Mapped, low)],
        [0, 0, 0, 0, 0xffff, 0, _, _] => vec![(Embedding::Ipv4Translated, low)],
        [0, 0, 0, 0, 0, 0, _, _] => vec![(Embedding::Ipv4Compatible, low)],
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => vec![(Embedding::Nat64, low)],
        [0x2002, _, _, ..] => vec![(Embedding::SixToFour, Ipv4Addr::new(o[2], o[3], o[4], o[5]))],
        [0x2001, 0, ..] => vec![
            (Embedding::Teredo, Ipv4Addr::new(o[4], o[5], o[6], o[7])),
            (Embedding::Teredo, Ipv4Addr::from(!u32::from(low))),
        ],
        _ => vec![],
    }
}

/// The class of an IPv6 address, and the embedded IPv4 address that
/// decided it, if one did. An embedding is judged by the strictest class
/// of what it carries.
pub(crate) fn classify_v6(ip: Ipv6Addr) -> (Class, Option<(Embedding, Ipv4Addr)>) {
    let embedded = embedded_ipv4(ip);
    if let Some(worst) = embedded
        .iter()
        .map(|&(how, v4)| (classify_v4(v4), (how, v4)))
        .max_by_key(|(class, _)| *class)
    {
        return (worst.0, Some(worst.1));
    }
    let class = V6_RANGES
        .iter()
        .find(|(net, _)| net.contains(&ip))
        .map_or(DeniedUnlessAllowed(DenyReason::Reserved), |(_, class)| {
            *class
        });
    (class, None)
}

/// An address may not be dialed: why, and through which embedding when
/// the reason is an IPv4 address inside IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub(crate) struct Denial {
    /// Why.
    pub reason: DenyReason,
    /// The IPv6 form that carried the denied IPv4 address.
    pub embedded: Option<Embedding>,
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.embedded {
            Some(how) => write!(f, "{} (IPv4 inside IPv6, {})", self.reason, how.as_str()),
            None => write!(f, "{}", self.reason),
        }
    }
}

/// The operator's address policy: the fixed rules above, and its
/// `allow_cidrs` and `deny_cidrs`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AddressPolicy {
    allow: Vec<Cidr>,
    deny: Vec<Cidr>,
}

impl AddressPolicy {
    /// A policy with the operator's lists (empty lists: the fixed rules
    /// alone).
    pub(crate) fn new(allow_cidrs: Vec<Cidr>, deny_cidrs: Vec<Cidr>) -> AddressPolicy {
        AddressPolicy {
            allow: allow_cidrs,
            deny: deny_cidrs,
        }
    }

    /// Whether the engine may dial `candidate` for a grant of `host`: for
    /// a name, an address it resolved to; for an address grant, the
    /// address itself. `own` are the addresses of the host the engine
    /// dials from. IPv4-mapped candidates count as their IPv4 address.
    pub(crate) fn check(
        &self,
        host: &Host,
        candidate: IpAddr,
        own: &HostAddresses,
    ) -> Result<(), Denial> {
        let candidate = candidate.to_canonical();
        let (class, embedded, carried) = match candidate {
            IpAddr::V4(v4) => (classify_v4(v4), None, vec![]),
            IpAddr::V6(v6) => {
                let (class, embedded) = classify_v6(v6);
                (class, embedded, embedded_ipv4(v6))
            }
        };
        let covers = |list: &[Cidr], ip: IpAddr| list.iter().any(|cidr| cidr.contains(ip));
        // The operator's deny list covers an address, or any IPv4 address
        // it carries.
        let operator_denied = covers(&self.deny, candidate)
            || carried
                .iter()
                .any(|&(_, v4)| covers(&self.deny, IpAddr::V4(v4)));
        // The allow list covers an address, or every IPv4 address it
        // carries that is not public.
        let operator_allowed = covers(&self.allow, candidate)
            || (!carried.is_empty()
                && carried.iter().all(|&(_, v4)| {
                    classify_v4(v4) == Class::Public || covers(&self.allow, IpAddr::V4(v4))
                }));
        let deny = |reason| {
            Err(Denial {
                reason,
                embedded: embedded.map(|(how, _)| how),
            })
        };
        if let Host::Ip(granted) = host {
            if granted.to_canonical() != candidate {
                return Err(Denial {
                    reason: DenyReason::NotGrantedAddress,
                    embedded: None,
                });
            }
            if operator_denied {
                return deny(DenyReason::OperatorDenied);
            }
            return match class {
                AlwaysDenied(
                    reason @ (DenyReason::Metadata
                    | DenyReason::LinkLocal
                    | DenyReason::Unspecified
                    | DenyReason::FakePool),
                ) => deny(reason),
                _ => Ok(()),
            };
        }
        match class {
            AlwaysDenied(reason) => deny(reason),
            _ if operator_denied => deny(DenyReason::OperatorDenied),
            DeniedUnlessAllowed(reason) if !operator_allowed => deny(reason),
            // Whatever allowed it, the host's own address is not for a
            // name: checked last, so an address denied for its range
            // keeps that reason.
            DeniedUnlessAllowed(_) | Class::Public => match own.held_by(candidate, &carried) {
                Some(embedded) => Err(Denial {
                    reason: DenyReason::HostAddress,
                    embedded,
                }),
                None => Ok(()),
            },
        }
    }
}

/// The addresses of the host the engine dials from: those assigned to
/// the interfaces of its network namespace, as the engine reads them
/// when it checks a connection. Kept canonical (IPv4 unmapped).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HostAddresses(BTreeSet<IpAddr>);

impl HostAddresses {
    /// Whether `ip` is one of them (an IPv4-mapped `ip` as its IPv4
    /// address).
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip.to_canonical())
    }

    /// Whether `candidate` (canonical), or one of the IPv4 addresses it
    /// `carries`, is one of them: `Some` with the embedding that carried
    /// it (`None` for the address itself), else `None`.
    fn held_by(
        &self,
        candidate: IpAddr,
        carried: &[(Embedding, Ipv4Addr)],
    ) -> Option<Option<Embedding>> {
        if self.contains(candidate) {
            return Some(None);
        }
        carried
            .iter()
            .find(|&&(_, v4)| self.contains(IpAddr::V4(v4)))
            .map(|&(how, _)| Some(how))
    }
}

impl FromIterator<IpAddr> for HostAddresses {
    fn from_iter<I: IntoIterator<Item = IpAddr>>(addresses: I) -> HostAddresses {
        HostAddresses(addresses.into_iter().map(|ip| ip.to_canonical()).collect())
    }
}

/// An IP network in CIDR notation, as the operator's lists write it:
/// `10.0.0.0/8`, `fd00::/8`. Strict: a canonical IPv4 address or an IPv6
/// address, a decimal prefix length, and no host bits set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr(IpNet);

impl Cidr {
    /// Whether the network contains `ip`.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip)
    }

    /// The network.
    pub fn net(&self) -> IpNet {
        self.0
    }
}

/// A CIDR that does not parse, with how to write it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CidrError {
    /// No `/prefix`.
    #[error("`{}` has no prefix length: write a network such as `10.0.0.0/8`, or `{}/{}` for one address", printable(.0), printable(.0), if .0.contains(':') { 128 } else { 32 })]
    MissingPrefix(String),
    /// The address part is not a canonical IPv4 or an IPv6 address.
    #[error("`{}` is not an IPv4 address in four decimal parts without leading zeros, nor an IPv6 address", printable(.0))]
    BadAddress(String),
    /// The prefix length is not a decimal number within the address's
    /// bits.
    #[error("`/{}` is not a prefix length: write 0-32 for IPv4, 0-128 for IPv6, in decimal without leading zeros", printable(.0))]
    BadPrefix(String),
    /// Bits set after the prefix.
    #[error("`{}` has bits set past its prefix: write the network, `{}`", printable(.0), .1)]
    HostBits(String, IpNet),
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Cidr, CidrError> {
        let Some((addr, len)) = text.split_once('/') else {
            return Err(CidrError::MissingPrefix(text.to_string()));
        };
        let ip = match (addr.parse::<Ipv4Addr>(), addr.parse::<Ipv6Addr>()) {
            // Only the canonical spelling of IPv4: no leading zeros.
            (Ok(v4), _) if v4.to_string() == addr => IpAddr::V4(v4),
            (_, Ok(v6)) => IpAddr::V6(v6),
            _ => return Err(CidrError::BadAddress(addr.to_string())),
        };
        let bad_len = || CidrError::BadPrefix(len.to_string());
        if len.is_empty()
            || !len.bytes().all(|b| b.is_ascii_digit())
            || (len.len() > 1 && len.starts_with('0'))
        {
            return Err(bad_len());
        }
        let prefix = len.parse::<u8>().map_err(|_| bad_len())?;
        let net = IpNet::new(ip, prefix).map_err(|_| bad_len())?;
        if net.network() != ip {
            return Err(CidrError::HostBits(text.to_string(), net.trunc()));
        }
        Ok(Cidr(net))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Serialize for Cidr {
    /// As its string.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    /// From a string, strictly.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Cidr, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn name() -> Host {
        Host::Name("api.example.com".into())
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// A host with no address a candidate could be.
    fn no_host() -> HostAddresses {
        HostAddresses::default()
    }

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| c.parse().unwrap()).collect()
    }

    /// Every range of the policy, from both sides of its edges where they
    /// matter, for a granted name and no operator lists: `None` is allowed.
    #[test]
    fn the_default_policy_for_a_name_table() {
        use DenyReason as R;
        use Embedding as E;
        type Want = Option<(DenyReason, Option<Embedding>)>;
        let table: &[(&str, Want)] = &[
            ("93.184.215.14", None),
            ("1.1.1.1", None),
            ("0.0.0.0", Some((R::Unspecified, None))),
            ("0.255.255.255", Some((R::Unspecified, None))),
            ("1.0.0.0", None),
            ("127.0.0.1", Some((R::Loopback, None))),
            ("127.255.255.254", Some((R::Loopback, None))),
            ("128.0.0.0", None),
            ("169.254.169.254", Some((R::Metadata, None))),
            ("100.100.100.200", Some((R::Metadata, None))),
            ("169.254.0.1", Some((R::LinkLocal, None))),
            ("169.254.170.2", Some((R::Metadata, None))),
            ("169.254.170.23", Some((R::Metadata, None))),
            ("169.254.0.23", Some((R::Metadata, None))),
            ("168.63.129.16", Some((R::Metadata, None))),
            ("192.0.0.192", Some((R::Metadata, None))),
            ("fd00:ec2::23", Some((R::Metadata, None))),
            ("169.254.170.3", Some((R::LinkLocal, None))),
            ("169.255.0.1", None),
            ("224.0.0.1", Some((R::Multicast, None))),
            ("239.255.255.250", Some((R::Multicast, None))),
            ("255.255.255.255", Some((R::Broadcast, None))),
            ("255.255.255.254", Some((R::Reserved, None))),
            ("240.0.0.1", Some((R::Reserved, None))),
            ("223.255.255.255", None),
            ("198.18.0.1", Some((R::FakePool, None))),
            ("198.19.255.255", Some((R::FakePool, None))),
            ("198.17.255.255", None),
            ("198.20.0.0", None),
            ("10.0.0.5", Some((R::Private, None))),
            ("11.0.0.0", None),
            ("172.16.0.1", Some((R::Private, None))),
            ("172.31.255.255", Some((R::Private, None))),
            ("172.32.0.0", None),
            ("172.15.255.255", None),
            ("192.168.1.1", Some((R::Private, None))),
            ("192.169.0.0", None),
            ("100.64.0.1", Some((R::SharedAddress, None))),
            ("100.127.255.255", Some((R::SharedAddress, None))),
            ("100.128.0.0", None),
            ("192.0.0.8", Some((R::ProtocolAssignments, None))),
            ("192.0.2.1", Some((R::Documentation, None))),
            ("198.51.100.7", Some((R::Documentation, None))),
            ("203.0.113.9", Some((R::Documentation, None))),
            ("2606:4700::1111", None),
            ("2a00:1450:4001::200e", None),
            ("::", Some((R::Unspecified, None))),
            ("::1", Some((R::Loopback, None))),
            ("fd00:ec2::254", Some((R::Metadata, None))),
            ("fd00:ec2::253", Some((R::UniqueLocal, None))),
            ("fe80::1", Some((R::LinkLocal, None))),
            ("febf:ffff::1", Some((R::LinkLocal, None))),
            ("fec0::1", Some((R::SiteLocal, None))),
            ("ff02::1", Some((R::Multicast, None))),
            ("fc00::1", Some((R::UniqueLocal, None))),
            ("fdff::1", Some((R::UniqueLocal, None))),
            ("2001:db8::1", Some((R::Documentation, None))),
            ("3fff::1", Some((R::Documentation, None))),
            ("100::1", Some((R::Reserved, None))),
            ("4000::1", Some((R::Reserved, None))),
            ("::2:0:0:1", Some((R::Reserved, None))),
            ("::ffff:127.0.0.1", Some((R::Loopback, None))),
            ("::ffff:169.254.169.254", Some((R::Metadata, None))),
            ("::ffff:8.8.8.8", None),
            ("::127.0.0.1", Some((R::Loopback, Some(E::Ipv4Compatible)))),
            ("::10.0.0.5", Some((R::Private, Some(E::Ipv4Compatible)))),
            ("::8.8.8.8", None),
            (
                "::ffff:0:127.0.0.1",
                Some((R::Loopback, Some(E::Ipv4Translated))),
            ),
            ("64:ff9b::7f00:1", Some((R::Loopback, Some(E::Nat64)))),
            ("64:ff9b::a9fe:a9fe", Some((R::Metadata, Some(E::Nat64)))),
            ("64:ff9b::a00:5", Some((R::Private, Some(E::Nat64)))),
            ("64:ff9b::808:808", None),
            ("64:ff9b:1::1", Some((R::Reserved, None))),
            ("2002:7f00:1::1", Some((R::Loopback, Some(E::SixToFour)))),
            ("2002:a9fe:a9fe::", Some((R::Metadata, Some(E::SixToFour)))),
            ("2002:c612:1::1", Some((R::FakePool, Some(E::SixToFour)))),
            ("2002:808:808::1", None),
            // Teredo: server 8.8.8.8, client !0x80fffffe = 127.0.0.1.
            (
                "2001:0:808:808::80ff:fffe",
                Some((R::Loopback, Some(E::Teredo))),
            ),
            (
                "2001:0:7f00:1::f7f7:f7f7",
                Some((R::Loopback, Some(E::Teredo))),
            ),
            ("2001:0:808:808::f7f7:f7f7", None),
        ];
        let policy = AddressPolicy::default();
        for (text, want) in table {
            let got = policy.check(&name(), ip(text), &no_host()).err();
            let want = want.map(|(reason, embedded)| Denial { reason, embedded });
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn allow_cidrs_open_only_the_ranges_denied_unless_allowed() {
        let policy = AddressPolicy::new(
            cidrs(&[
                "10.0.0.0/8",
                "fd00::/8",
                "100.64.0.0/10",
                "0.0.0.0/0",
                "::/0",
            ]),
            vec![],
        );
        for allowed in [
            "10.0.0.5",
            "fd12::1",
            "100.64.0.1",
            "192.0.2.1",
            "64:ff9b::a00:5",
            "240.0.0.1",
        ] {
            assert_eq!(
                policy.check(&name(), ip(allowed), &no_host()),
                Ok(()),
                "{allowed}"
            );
        }
        // Alibaba's metadata address is inside CGNAT space, and stays denied.
        for denied in [
            "127.0.0.1",
            "169.254.169.254",
            "100.100.100.200",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "198.18.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "fe80::1",
        ] {
            assert!(
                policy.check(&name(), ip(denied), &no_host()).is_err(),
                "{denied}"
            );
        }
        // An embedded address is allowed when the list covers the IPv4 it carries.
        let narrow = AddressPolicy::new(cidrs(&["10.0.0.0/8"]), vec![]);
        assert_eq!(
            narrow.check(&name(), ip("64:ff9b::a00:5"), &no_host()),
            Ok(())
        );
        assert!(narrow.check(&name(), ip("172.16.0.1"), &no_host()).is_err());
    }

    #[test]
    fn deny_cidrs_deny_public_and_allowed_addresses_alike() {
        let policy = AddressPolicy::new(
            cidrs(&["10.0.0.0/8"]),
            cidrs(&["10.1.0.0/16", "8.8.8.0/24", "2001:4860::/32"]),
        );
        let operator = |embedded| {
            Err(Denial {
                reason: DenyReason::OperatorDenied,
                embedded,
            })
        };
        assert_eq!(policy.check(&name(), ip("10.2.0.1"), &no_host()), Ok(()));
        assert_eq!(
            policy.check(&name(), ip("10.1.0.1"), &no_host()),
            operator(None)
        );
        assert_eq!(
            policy.check(&name(), ip("8.8.8.8"), &no_host()),
            operator(None)
        );
        assert_eq!(
            policy.check(&name(), ip("::ffff:8.8.8.8"), &no_host()),
            operator(None)
        );
        assert_eq!(
            policy.check(&name(), ip("64:ff9b::808:808"), &no_host()),
            operator(Some(Embedding::Nat64))
        );
        assert_eq!(
            policy.check(&name(), ip("2001:4860::8888"), &no_host()),
            operator(None)
        );
        let literal = Host::Ip(ip("8.8.8.8"));
        assert_eq!(
            policy.check(&literal, ip("8.8.8.8"), &no_host()),
            operator(None)
        );
    }

    #[test]
    fn an_address_grant_allows_exactly_its_address() {
        let policy = AddressPolicy::default();
        for text in ["127.0.0.1", "10.0.0.5", "::1", "192.0.2.1", "93.184.215.14"] {
            let host = Host::Ip(ip(text));
            assert_eq!(policy.check(&host, ip(text), &no_host()), Ok(()), "{text}");
        }
        // Link-local addresses hold cloud credential services beside the
        // metadata ones: never dialed, even when granted by address.
        for text in ["fe80::1", "169.254.170.3", "169.254.170.2"] {
            let host = Host::Ip(ip(text));
            assert!(policy.check(&host, ip(text), &no_host()).is_err(), "{text}");
        }
        let loopback = Host::Ip(ip("127.0.0.1"));
        assert_eq!(
            policy.check(&loopback, ip("::ffff:127.0.0.1"), &no_host()),
            Ok(())
        );
        for other in ["127.0.0.2", "::1", "93.184.215.14"] {
            assert_eq!(
                policy
                    .check(&loopback, ip(other), &no_host())
                    .map_err(|d| d.reason),
                Err(DenyReason::NotGrantedAddress),
                "{other}"
            );
        }
        // Never a metadata service, the unspecified network or the pool.
        for (text, reason) in [
            ("169.254.169.254", DenyReason::Metadata),
            ("fd00:ec2::254", DenyReason::Metadata),
            ("64:ff9b::a9fe:a9fe", DenyReason::Metadata),
            ("0.0.0.1", DenyReason::Unspecified),
            ("198.18.0.1", DenyReason::FakePool),
        ] {
            let host = Host::Ip(ip(text));
            assert_eq!(
                policy
                    .check(&host, ip(text), &no_host())
                    .map_err(|d| d.reason),
                Err(reason),
                "{text}"
            );
        }
    }

    /// The host of the report: an ordinary address on one of its
    /// interfaces (203.0.113.7, in a range the operator allows), a LAN
    /// address, a public IPv4 and IPv6 address.
    fn host() -> HostAddresses {
        [
            "203.0.113.7",
            "10.0.0.5",
            "93.184.215.14",
            "2606:4700::1111",
        ]
        .into_iter()
        .map(ip)
        .collect()
    }

    #[test]
    fn a_name_never_reaches_an_address_of_the_host_even_where_the_operator_allows_it() {
        let policy = AddressPolicy::new(
            cidrs(&["203.0.113.0/24", "10.0.0.0/8", "0.0.0.0/0", "::/0"]),
            vec![],
        );
        let host_address = |embedded| {
            Err(Denial {
                reason: DenyReason::HostAddress,
                embedded,
            })
        };
        for text in [
            "203.0.113.7",
            "::ffff:203.0.113.7",
            "10.0.0.5",
            "93.184.215.14",
            "2606:4700::1111",
        ] {
            assert_eq!(
                policy.check(&name(), ip(text), &host()),
                host_address(None),
                "{text}"
            );
        }
        for (text, how) in [
            ("64:ff9b::cb00:7107", Embedding::Nat64),
            ("::203.0.113.7", Embedding::Ipv4Compatible),
            ("::ffff:0:203.0.113.7", Embedding::Ipv4Translated),
            ("2002:cb00:7107::1", Embedding::SixToFour),
            ("2001:0:cb00:7107::f7f7:f7f7", Embedding::Teredo),
        ] {
            assert_eq!(
                policy.check(&name(), ip(text), &host()),
                host_address(Some(how)),
                "{text}"
            );
        }
        // The host's neighbours are the network's, as before.
        for text in [
            "203.0.113.8",
            "10.0.0.6",
            "93.184.215.15",
            "2606:4700::1112",
        ] {
            assert_eq!(policy.check(&name(), ip(text), &host()), Ok(()), "{text}");
        }
    }

    #[test]
    fn an_address_denied_for_its_range_keeps_that_reason_on_the_host() {
        let own: HostAddresses = ["127.0.0.1", "::1", "fe80::1", "10.0.0.5", "8.8.8.8"]
            .into_iter()
            .map(ip)
            .collect();
        let policy = AddressPolicy::new(vec![], cidrs(&["8.8.8.0/24"]));
        for (text, reason) in [
            ("127.0.0.1", DenyReason::Loopback),
            ("::1", DenyReason::Loopback),
            ("fe80::1", DenyReason::LinkLocal),
            ("10.0.0.5", DenyReason::Private),
            ("8.8.8.8", DenyReason::OperatorDenied),
            ("0.0.0.0", DenyReason::Unspecified),
            ("::", DenyReason::Unspecified),
        ] {
            assert_eq!(
                policy.check(&name(), ip(text), &own).map_err(|d| d.reason),
                Err(reason),
                "{text}"
            );
        }
    }

    #[test]
    fn a_grant_of_the_hosts_own_address_reaches_exactly_it() {
        let policy = AddressPolicy::default();
        for text in [
            "203.0.113.7",
            "10.0.0.5",
            "93.184.215.14",
            "2606:4700::1111",
        ] {
            let literal = Host::Ip(ip(text));
            assert_eq!(policy.check(&literal, ip(text), &host()), Ok(()), "{text}");
        }
        let literal = Host::Ip(ip("203.0.113.7"));
        assert_eq!(
            policy.check(&literal, ip("::ffff:203.0.113.7"), &host()),
            Ok(())
        );
        assert_eq!(
            policy
                .check(&literal, ip("10.0.0.5"), &host())
                .map_err(|d| d.reason),
            Err(DenyReason::NotGrantedAddress)
        );
        // The unspecified address is this machine to `connect`, and no
        // grant reaches it.
        for text in ["0.0.0.0", "::", "::ffff:0.0.0.0"] {
            let literal = Host::Ip(ip(text));
            assert_eq!(
                policy
                    .check(&literal, ip(text), &host())
                    .map_err(|d| d.reason),
                Err(DenyReason::Unspecified),
                "{text}"
            );
        }
    }

    #[test]
    fn host_addresses_are_kept_canonical() {
        let own: HostAddresses = [ip("::ffff:203.0.113.7")].into_iter().collect();
        assert!(own.contains(ip("203.0.113.7")));
        assert!(own.contains(ip("::ffff:203.0.113.7")));
        assert!(!own.contains(ip("203.0.113.8")));
    }

    #[test]
    fn cidrs_parse_strictly_and_say_how_to_write_them() {
        for good in [
            "10.0.0.0/8",
            "0.0.0.0/0",
            "192.0.2.1/32",
            "fd00::/8",
            "::/0",
            "2001:db8::1/128",
        ] {
            let cidr: Cidr = good.parse().unwrap_or_else(|e| panic!("{good}: {e}"));
            assert_eq!(cidr.to_string(), good);
        }
        let table: &[(&str, &str)] = &[
            ("10.0.0.0", "`10.0.0.0/32`"),
            ("fd00::", "`fd00::/128`"),
            ("10.0.0.1/8", "`10.0.0.0/8`"),
            ("fd00::1/8", "`fd00::/8`"),
            ("010.0.0.0/8", "leading zeros"),
            ("10.0.0/8", "four decimal parts"),
            ("0x0a.0.0.0/8", "four decimal parts"),
            ("fe80::1%eth0/64", "IPv6"),
            ("10.0.0.0/33", "0-32"),
            ("10.0.0.0/08", "0-32"),
            ("10.0.0.0/+8", "0-32"),
            ("10.0.0.0/", "0-32"),
            ("fd00::/129", "0-128"),
            ("10.0.0.0/8/8", "0-32"),
            (" 10.0.0.0/8", "IPv6"),
        ];
        for (text, fix) in table {
            let e = text.parse::<Cidr>().unwrap_err();
            assert!(e.to_string().contains(fix), "{text}: {e}");
        }
        let json: Cidr = serde_json::from_str("\"100.64.0.0/10\"").unwrap();
        assert_eq!(serde_json::to_string(&json).unwrap(), "\"100.64.0.0/10\"");
        assert!(serde_json::from_str::<Cidr>("\"100.64.0.1/10\"").is_err());
    }

    #[test]
    fn reasons_have_distinct_snake_case_names() {
        let names: std::collections::BTreeSet<_> =
            DenyReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), DenyReason::ALL.len());
        assert!(names
            .iter()
            .all(|n| n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
    }

    fn embeddings(v4: Ipv4Addr) -> Vec<(Ipv6Addr, Embedding)> {
        let [a, b, c, d] = v4.octets();
        let hi = u16::from_be_bytes([a, b]);
        let lo = u16::from_be_bytes([c, d]);
        let mut forms = vec![
            (
                Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, hi, lo),
                Embedding::Ipv4Translated,
            ),
            (
                Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, hi, lo),
                Embedding::Nat64,
            ),
            (
                Ipv6Addr::new(0x2002, hi, lo, 0, 0, 0, 0, 1),
                Embedding::SixToFour,
            ),
            (
                Ipv6Addr::new(0x2001, 0, hi, lo, 0, 0, 0xf7f7, 0xf7f7),
                Embedding::Teredo,
            ),
            (
                Ipv6Addr::new(0x2001, 0, 0x808, 0x808, 0, 0, !hi, !lo),
                Embedding::Teredo,
            ),
        ];
        // `::0.0.0.0` and `::0.0.0.1` are `::` and `::1`.
        if u32::from(v4) > 1 {
            forms.push((
                Ipv6Addr::new(0, 0, 0, 0, 0, 0, hi, lo),
                Embedding::Ipv4Compatible,
            ));
        }
        forms
    }

    proptest! {
        /// Any IPv4 address is judged the same in every IPv6 form that
        /// carries it (mapped ones count as the address itself).
        #[test]
        fn ipv4_inside_ipv6_is_judged_as_the_ipv4_address(bits in any::<u32>(), allow_private in any::<bool>()) {
            let v4 = Ipv4Addr::from(bits);
            let allow = if allow_private { cidrs(&["10.0.0.0/8", "172.16.0.0/12"]) } else { vec![] };
            let policy = AddressPolicy::new(allow, vec![]);
            let direct = policy.check(&name(), IpAddr::V4(v4), &no_host()).map_err(|d| d.reason);
            let mapped = policy.check(&name(), IpAddr::V6(v4.to_ipv6_mapped()), &no_host()).map_err(|d| d.reason);
            prop_assert_eq!(mapped, direct);
            for (v6, how) in embeddings(v4) {
                let got = policy.check(&name(), IpAddr::V6(v6), &no_host());
                match direct {
                    Ok(()) => prop_assert_eq!(got, Ok(()), "{} {:?}", v6, how),
                    Err(reason) => prop_assert_eq!(got, Err(Denial { reason, embedded: Some(how) }), "{}", v6),
                }
            }
        }

        /// An IPv4 address of the host is denied to a name in every form
        /// that carries it, whatever the operator allows; an address
        /// grant of it reaches it.
        #[test]
        fn a_host_address_is_denied_to_a_name_in_every_form(bits in any::<u32>()) {
            let v4 = Ipv4Addr::from(bits);
            let own: HostAddresses = [IpAddr::V4(v4)].into_iter().collect();
            let everything = AddressPolicy::new(cidrs(&["0.0.0.0/0", "::/0"]), vec![]);
            let forms = embeddings(v4).into_iter().map(|(v6, _)| IpAddr::V6(v6));
            for candidate in [IpAddr::V4(v4), IpAddr::V6(v4.to_ipv6_mapped())].into_iter().chain(forms) {
                prop_assert!(everything.check(&name(), candidate, &own).is_err(), "{}", candidate);
            }
            let literal = Host::Ip(IpAddr::V4(v4));
            let fixed = everything.check(&literal, IpAddr::V4(v4), &no_host());
            prop_assert_eq!(everything.check(&literal, IpAddr::V4(v4), &own), fixed);
        }

        /// No allow list lets an always-denied address through.
        #[test]
        fn allow_cidrs_never_open_what_is_always_denied(bits in any::<u128>(), v4 in any::<u32>()) {
            let everything = AddressPolicy::new(cidrs(&["0.0.0.0/0", "::/0"]), vec![]);
            for candidate in [IpAddr::V6(Ipv6Addr::from(bits)), IpAddr::V4(Ipv4Addr::from(v4))] {
                let always = match candidate.to_canonical() {
                    IpAddr::V4(a) => matches!(classify_v4(a), AlwaysDenied(_)),
                    IpAddr::V6(a) => matches!(classify_v6(a).0, AlwaysDenied(_)),
                };
                prop_assert_eq!(everything.check(&name(), candidate, &no_host()).is_err(), always, "{}", candidate);
            }
        }
    }
}
