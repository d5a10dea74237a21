//! The netlink messages a sandbox's init sends to its own network namespace
//! while it holds CAP_NET_ADMIN over it, each built by hand and sent through
//! `nix` without `unsafe`: `route.rs` (a `local` route to the sandbox's
//! loopback) and `nftables.rs` (a learning sandbox's redirect of the fake
//! pool, a granted sandbox's logged refusal of other egress). Reading the
//! refusals' log (NFLOG) needs `unsafe` and lives in `sys`, which shares
//! [`read_ack`] (so this module sits below `sys` in `tests/layering.rs`).

mod nftables;
mod route;

pub(crate) use nftables::{
    log_and_refuse_other_egress, redirect_tcp_to_loopback_port, LOGGED_BYTES,
};
pub(crate) use route::{add_local_route, read_ack};

/// A netlink socket of `protocol` (`shown` in errors, `NETLINK_ROUTE`),
/// bound; `named` says which call failed.
fn bound_socket(
    (protocol, shown): (nix::sys::socket::SockProtocol, &str),
    named: &dyn Fn(&str, nix::Error) -> std::io::Error,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::sys::socket::{bind, socket, AddressFamily, NetlinkAddr, SockFlag, SockType};
    use std::os::fd::AsRawFd;
    let sock = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        protocol,
    )
    .map_err(|e| named(&format!("socket(AF_NETLINK, {shown})"), e))?;
    bind(sock.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(|e| named("bind(netlink)", e))?;
    Ok(sock)
}
