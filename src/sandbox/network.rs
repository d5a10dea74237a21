//! A sandbox's network grants, from its own side: the sandbox keeps its own
//! network namespace with only `lo`, and spawnd's sockets inside it are the
//! only way out. While init still holds CAP_NET_ADMIN over the namespace it
//! routes every address to `lo` as `local` routes (`0.0.0.0/0`, `::/0`), so
//! no attempt fails for want of a route; opens the listeners — TCP on
//! `[::]:P` (dual-stack) for each granted port, UDP and TCP on `[::]:53`
//! for the DNS stub; adds nf_tables rules that log every other TCP
//! connection attempt and UDP datagram leaving for anything but the
//! loopback to an NFLOG group and refuse it at once (a reset, ICMP port
//! unreachable: [`crate::netlink::log_and_refuse_other_egress`]); binds a
//! socket to that group; and hands the listeners and that socket to the
//! process that launched it over a private socketpair, keeping no copy.
//! Sockets keep the namespace they were made in, so spawnd accepts the
//! program's connections, and reads what its rules refused, from its own
//! namespace without `setns`. A spawn without grants does none of this:
//! every destination but its loopback has no route (`ENETUNREACH`).
//!
//! A learning sandbox (`spawnd learn`, [`NetworkSetup::for_learning`]) has
//! no grants and takes every port of the fake pool: init opens the DNS
//! stub's sockets and one TCP listener on `127.0.0.1` at a port the kernel
//! picks, and adds an nf_tables rule that redirects every TCP connection
//! to the pool to that listener
//! ([`crate::netlink::redirect_tcp_to_loopback_port`]); spawnd reads each
//! connection's original destination. Other egress is logged and refused
//! as above. The program, without CAP_NET_ADMIN, cannot change the rules.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{
    bind, getsockname, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag,
    SockType, SockaddrIn, SockaddrIn6,
};

use super::{SetupError, Step};
use crate::egress::fake_pool::{FAKE_POOL_BASE, FAKE_POOL_PREFIX};
use crate::egress::grant::Grant;
use crate::ipc::{recv_up_to, send, MAX_FRAME_FDS};
use crate::plan::SpawnPlan;

/// The DNS stub's port, on both UDP and TCP.
pub(crate) const DNS_PORT: u16 = 53;

/// The NFLOG group a sandbox's refused egress is logged to (groups are
/// per network namespace: each sandbox has its own).
pub(crate) const REFUSAL_LOG_GROUP: u16 = 1;

/// Most distinct granted ports: their listeners, the DNS stub's two and a
/// launched sandbox's other descriptors travel in one [`crate::ipc`] frame.
pub(crate) const MAX_PORTS: usize = 64;

/// What init sets up in its namespace for a spawn with grants.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NetworkSetup {
    /// The distinct granted ports, ascending: one TCP listener each.
    pub ports: Vec<u16>,
    /// A learning sandbox: no grants, one loopback listener that every
    /// TCP connection to the fake pool is redirected to.
    #[serde(default)]
    pub learning: bool,
}

impl NetworkSetup {
    /// The setup `plan`'s network needs: a learning one when the plan
    /// learns (its grants, if any, are not used: every name is), else its
    /// grants'.
    pub fn for_plan(plan: &SpawnPlan) -> Result<Option<NetworkSetup>, SetupError> {
        if plan.network_learning.is_some() {
            return Ok(Some(NetworkSetup::for_learning()));
        }
        NetworkSetup::for_grants(&plan.network)
    }

    /// The setup of a learning sandbox: the fake pool routed, the DNS
    /// stub's sockets, and one listener that takes the pool's every port.
    pub fn for_learning() -> NetworkSetup {
        NetworkSetup {
            ports: Vec::new(),
            learning: true,
        }
    }

    /// The setup `grants` need: `None` without grants (nothing is done).
    pub fn for_grants(grants: &[Grant]) -> Result<Option<NetworkSetup>, SetupError> {
        if grants.is_empty() {
            return Ok(None);
        }
        let mut ports: Vec<u16> = grants.iter().map(Grant::port).collect();
        ports.sort_unstable();
        ports.dedup();
        if ports.len() > MAX_PORTS {
            return Err(SetupError::new(Step::Network,
                format!(
                    "network grants name {} distinct ports, more than the {MAX_PORTS} a sandbox listens on",
                    ports.len()
                ),
                std::io::Error::from_raw_os_error(libc::E2BIG),
            ));
        }
        Ok(Some(NetworkSetup {
            ports,
            learning: false,
        }))
    }
}

/// The listeners of one sandbox, in its network namespace.
#[derive(Debug)]
pub struct Listeners {
    /// UDP `[::]:53`, the DNS stub's.
    pub dns_udp: OwnedFd,
    /// TCP `[::]:53`, the DNS stub's.
    pub dns_tcp: OwnedFd,
    /// TCP `[::]:P` per granted port, in [`NetworkSetup::ports`] order; in
    /// a learning sandbox, the one TCP `127.0.0.1:P` the fake pool is
    /// redirected to.
    pub tcp: Vec<(u16, OwnedFd)>,
    /// NETLINK_NETFILTER, bound to [`REFUSAL_LOG_GROUP`]: what the
    /// sandbox's rules refused.
    pub refusal_log: OwnedFd,
}

impl Listeners {
    /// Every descriptor, in the order [`Listeners::from_fds`] takes them back.
    pub fn fds(&self) -> Vec<BorrowedFd<'_>> {
        let mut v = vec![self.dns_udp.as_fd(), self.dns_tcp.as_fd()];
        v.extend(self.tcp.iter().map(|(_, fd)| fd.as_fd()));
        v.push(self.refusal_log.as_fd());
        v
    }

    /// How many descriptors [`Listeners::fds`] gives for `ports`.
    pub fn count(ports: &[u16]) -> usize {
        3 + ports.len()
    }

    /// The granted ports, in the order of their descriptors.
    pub fn ports(&self) -> Vec<u16> {
        self.tcp.iter().map(|(p, _)| *p).collect()
    }

    /// The listeners again, from [`Listeners::ports`] and the descriptors
    /// of [`Listeners::fds`] as received.
    pub fn from_fds(ports: &[u16], fds: Vec<OwnedFd>) -> Option<Listeners> {
        if fds.len() != Listeners::count(ports) {
            return None;
        }
        let mut fds = fds.into_iter();
        let dns_udp = fds.next()?;
        let dns_tcp = fds.next()?;
        let refusal_log = fds.next_back()?;
        let tcp = ports.iter().copied().zip(fds).collect();
        Some(Listeners {
            dns_udp,
            dns_tcp,
            tcp,
            refusal_log,
        })
    }
}

/// Routes and listeners for `setup` in the current network namespace
/// (whose `lo` is up), then hands the listeners over `channel` and closes
/// this process's copies. Each failing step is named.
pub(crate) fn set_up_network_in_child(
    setup: &NetworkSetup,
    channel: OwnedFd,
) -> Result<(), SetupError> {
    let listeners = set_up_network(setup)?;
    let channel = UnixStream::from(channel);
    send(&channel, &listeners.ports(), &listeners.fds())
        .map_err(|e| SetupError::new(Step::Network, "hand the listeners to spawnd", e))?;
    Ok(())
}

/// Routes, listeners, for a learning sandbox the redirect, and the logged
/// refusal of other egress, in the current network namespace (whose `lo`
/// is up).
pub(crate) fn set_up_network(setup: &NetworkSetup) -> Result<Listeners, SetupError> {
    route_everything_to_loopback()?;
    let (dns_udp, dns_tcp, tcp) = open_listeners(setup)?;
    // Ports whose connections reach a listener (in a learning sandbox,
    // redirected to the loopback before the rules see them).
    let mut served = Vec::new();
    if setup.learning {
        if let Some((port, _)) = tcp.first() {
            crate::netlink::redirect_tcp_to_loopback_port(FAKE_POOL_BASE, FAKE_POOL_PREFIX, *port)
                .map_err(|e| {
                    SetupError::new(
                        Step::Network,
                        "redirect the fake pool to the learning listener",
                        e,
                    )
                })?;
        }
    } else {
        served.clone_from(&setup.ports);
    }
    let refusal_log =
        crate::sys::bind_log_group(REFUSAL_LOG_GROUP, crate::netlink::LOGGED_BYTES)
            .map_err(|e| SetupError::new(Step::Network, "bind the refused-egress log", e))?;
    crate::netlink::log_and_refuse_other_egress(&served, REFUSAL_LOG_GROUP)
        .map_err(|e| SetupError::new(Step::Network, "log and refuse egress nothing granted", e))?;
    Ok(Listeners {
        dns_udp,
        dns_tcp,
        tcp,
        refusal_log,
    })
}

/// `local 0.0.0.0/0 dev lo` and `local ::/0 dev lo`, in the local table:
/// every destination is the sandbox's own, so a connection to any address
/// meets a listener or the logged refusal, never `ENETUNREACH`, and
/// nothing can leave the namespace.
fn route_everything_to_loopback() -> Result<(), SetupError> {
    let lo = nix::net::if_::if_nametoindex("lo")
        .map_err(|e| SetupError::new(Step::Network, "if_nametoindex(lo)", e.into()))?;
    for dst in [
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    ] {
        crate::netlink::add_local_route(dst, 0, lo).map_err(|e| {
            SetupError::new(
                Step::Network,
                format!("add the route local {dst}/0 dev lo"),
                e,
            )
        })?;
    }
    Ok(())
}

/// `spawnd health`'s helper (a fresh, single-threaded process): in new user
/// and network namespaces, sets up what a sandbox granted one port gets,
/// so that a kernel lacking any part of it is named before a spawn fails.
pub(crate) fn network_probe_helper() -> Result<(), String> {
    use nix::sched::{unshare, CloneFlags};
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("unshare(CLONE_NEWUSER | CLONE_NEWNET): {e}"))?;
    crate::sys::set_loopback_up().map_err(|e| format!("bring lo up: {e}"))?;
    let setup = NetworkSetup {
        ports: vec![443],
        learning: false,
    };
    set_up_network(&setup).map(drop).map_err(|e| e.to_string())
}

/// The DNS stub's UDP and TCP sockets and one TCP listener per port: all
/// AF_INET6 with IPV6_V6ONLY off (IPv4 arrives v4-mapped), bound to
/// `[::]`, close-on-exec and nonblocking. Neither SO_REUSEADDR nor
/// SO_REUSEPORT is set, so nothing in the sandbox can bind the same port.
#[allow(clippy::type_complexity)]
fn open_listeners(
    setup: &NetworkSetup,
) -> Result<(OwnedFd, OwnedFd, Vec<(u16, OwnedFd)>), SetupError> {
    let dns_udp = dual_stack_socket(SockType::Datagram, DNS_PORT)?;
    let dns_tcp = dual_stack_socket(SockType::Stream, DNS_PORT)?;
    let tcp = if setup.learning {
        vec![loopback_listener()?]
    } else {
        setup
            .ports
            .iter()
            .map(|&p| dual_stack_socket(SockType::Stream, p).map(|fd| (p, fd)))
            .collect::<Result<Vec<_>, _>>()?
    };
    Ok((dns_udp, dns_tcp, tcp))
}

fn dual_stack_socket(kind: SockType, port: u16) -> Result<OwnedFd, SetupError> {
    let proto = match kind {
        SockType::Datagram => "udp",
        _ => "tcp",
    };
    let at = |call: &str| format!("{call} ({proto} [::]:{port})");
    let fd = socket(
        AddressFamily::Inet6,
        kind,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(|e| SetupError::new(Step::Network, at("socket(AF_INET6)"), e.into()))?;
    setsockopt(&fd, sockopt::Ipv6V6Only, &false)
        .map_err(|e| SetupError::new(Step::Network, at("setsockopt(IPV6_V6ONLY, 0)"), e.into()))?;
    let addr = SockaddrIn6::from(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0));
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr)
        .map_err(|e| SetupError::new(Step::Network, at("bind"), e.into()))?;
    if kind == SockType::Stream {
        let backlog = Backlog::new(128).unwrap_or(Backlog::MAXCONN);
        listen(&fd, backlog).map_err(|e| SetupError::new(Step::Network, at("listen"), e.into()))?;
    }
    Ok(fd)
}

/// A learning sandbox's listener: TCP on `127.0.0.1`, at a port the
/// kernel picks (so it takes none a program may want for itself),
/// close-on-exec and nonblocking; with the port.
fn loopback_listener() -> Result<(u16, OwnedFd), SetupError> {
    let at = |call: &str| format!("{call} (tcp 127.0.0.1, the learning listener)");
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(|e| SetupError::new(Step::Network, at("socket(AF_INET)"), e.into()))?;
    let addr = SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr)
        .map_err(|e| SetupError::new(Step::Network, at("bind"), e.into()))?;
    let backlog = Backlog::new(128).unwrap_or(Backlog::MAXCONN);
    listen(&fd, backlog).map_err(|e| SetupError::new(Step::Network, at("listen"), e.into()))?;
    let bound: SockaddrIn = getsockname(std::os::fd::AsRawFd::as_raw_fd(&fd))
        .map_err(|e| SetupError::new(Step::Network, at("getsockname"), e.into()))?;
    Ok((bound.port(), fd))
}

/// The parent's side: the listeners init hands over `channel`, or the
/// reason they did not come (init failed first, and said why on its status
/// pipe, which the caller reads).
pub(crate) fn receive_listeners(channel: &UnixStream) -> Result<Listeners, SetupError> {
    let failed =
        |e: std::io::Error| SetupError::new(Step::Network, "receive the sandbox's listeners", e);
    match recv_up_to::<Vec<u16>>(channel, MAX_FRAME_FDS) {
        Ok(Some((ports, fds))) => Listeners::from_fds(&ports, fds).ok_or_else(|| {
            failed(std::io::Error::other(
                "the descriptors do not match the ports",
            ))
        }),
        Ok(None) => Err(failed(std::io::Error::from_raw_os_error(libc::EPIPE))),
        Err(e) => Err(failed(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(list: &[&str]) -> Vec<Grant> {
        list.iter().map(|g| Grant::parse(g).unwrap()).collect()
    }

    #[test]
    fn no_grants_need_no_setup() {
        assert_eq!(NetworkSetup::for_grants(&[]).unwrap(), None);
    }

    #[test]
    fn grants_give_their_distinct_ports() {
        let setup = NetworkSetup::for_grants(&grants(&[
            "api.example.com:443",
            "example.org:443",
            "203.0.113.7:8443",
            "[2001:db8::7]:22",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(setup.ports, vec![22, 443, 8443]);
    }

    #[test]
    fn a_learning_setup_listens_on_one_port() {
        let learning = NetworkSetup::for_learning();
        assert!(learning.learning);
        assert!(learning.ports.is_empty());
        // A grants' setup is never a learning one.
        let granted = NetworkSetup::for_grants(&grants(&["api.example.com:443"]))
            .unwrap()
            .unwrap();
        assert!(!granted.learning);
    }

    #[test]
    fn more_ports_than_one_frame_carries_are_refused() {
        let many: Vec<String> = (1..=MAX_PORTS as u16 + 1)
            .map(|p| format!("example.com:{}", 1000 + p))
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(NetworkSetup::for_grants(&grants(&many)).is_err());
    }
}
