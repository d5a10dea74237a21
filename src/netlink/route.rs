//! One rtnetlink request, built by hand: `RTM_NEWROUTE` for a `local` route
//! (table local, `RTN_LOCAL`, scope host) on an interface, as
//! `ip route add local <prefix> dev lo` sends it, and the kernel's
//! acknowledgement read back. A sandbox with network grants routes the fake
//! pool and its IP-literal grants to its own loopback this way, so that
//! connections to them land on spawnd's listeners.
//!
//! Hand-built rather than through `netlink-packet-route` and `netlink-sys`:
//! the sandbox's init needs this one fixed-layout message (a 16-byte header,
//! a 12-byte `rtmsg`, two attributes) and its 36-byte answer, where the
//! crates bring a generic message model, its dependency tree and its
//! allocations into init for every spawn with grants. The message is built
//! in a stack buffer with `to_ne_bytes`, sent and read through `nix`: no
//! `unsafe` is needed.

use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;

use nix::sys::socket::{recv, send, MsgFlags, SockProtocol};

const RTM_NEWROUTE: u16 = 24;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const RT_TABLE_LOCAL: u8 = 255;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_HOST: u8 = 254;
const RTN_LOCAL: u8 = 2;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;

/// Header (16) + rtmsg (12) + RTA_DST for IPv6 (4 + 16) + RTA_OIF (4 + 4).
const MAX_REQUEST: usize = 56;

/// The bytes of an `RTM_NEWROUTE` request for `local <dst>/<prefix_len> dev
/// <ifindex>` in the local table, with sequence number `seq`.
pub(super) fn local_route_request(dst: IpAddr, prefix_len: u8, ifindex: u32, seq: u32) -> Vec<u8> {
    let (family, addr): (u8, Vec<u8>) = match dst {
        IpAddr::V4(v4) => (libc::AF_INET as u8, v4.octets().to_vec()),
        IpAddr::V6(v6) => (libc::AF_INET6 as u8, v6.octets().to_vec()),
    };
    let mut msg = Vec::with_capacity(MAX_REQUEST);
    // nlmsghdr; the length is filled in at the end.
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&RTM_NEWROUTE.to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL).to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    msg.extend_from_slice(&[
        family,
        prefix_len,
        0,
        0,
        RT_TABLE_LOCAL,
        RTPROT_BOOT,
        RT_SCOPE_HOST,
        RTN_LOCAL,
    ]);
    msg.extend_from_slice(&0u32.to_ne_bytes());
    // Attributes: lengths of 8 and 20 bytes, already 4-byte aligned.
    msg.extend_from_slice(&(4 + addr.len() as u16).to_ne_bytes());
    msg.extend_from_slice(&RTA_DST.to_ne_bytes());
    msg.extend_from_slice(&addr);
    msg.extend_from_slice(&8u16.to_ne_bytes());
    msg.extend_from_slice(&RTA_OIF.to_ne_bytes());
    msg.extend_from_slice(&ifindex.to_ne_bytes());
    let len = msg.len() as u32;
    msg[..4].copy_from_slice(&len.to_ne_bytes());
    msg
}

/// The kernel's answer to request `seq`: `Ok` for an acknowledgement
/// (`NLMSG_ERROR` with error 0), the errno it carries otherwise.
pub(crate) fn read_ack(answer: &[u8], seq: u32) -> io::Result<()> {
    let field = |at: usize| -> io::Result<[u8; 4]> {
        answer
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| io::Error::other("rtnetlink: short answer"))
    };
    let kind = u16::from_ne_bytes([
        answer.get(4).copied().unwrap_or(0),
        answer.get(5).copied().unwrap_or(0),
    ]);
    if kind != NLMSG_ERROR || u32::from_ne_bytes(field(8)?) != seq {
        return Err(io::Error::other(format!(
            "rtnetlink: unexpected answer (type {kind})"
        )));
    }
    match i32::from_ne_bytes(field(16)?) {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(-e)),
    }
}

/// Adds `local <dst>/<prefix_len> dev <ifindex>` to the local table of the
/// current network namespace (needs CAP_NET_ADMIN over it). The error names
/// the route.
pub(crate) fn add_local_route(dst: IpAddr, prefix_len: u8, ifindex: u32) -> io::Result<()> {
    let shown = format!("RTM_NEWROUTE local {dst}/{prefix_len} dev {ifindex}");
    let named = |what: &str, e: nix::Error| {
        io::Error::new(io::Error::from(e).kind(), format!("{what} ({shown}): {e}"))
    };
    let sock = super::bound_socket((SockProtocol::NetlinkRoute, "NETLINK_ROUTE"), &named)?;
    let seq = 1;
    let request = local_route_request(dst, prefix_len, ifindex, seq);
    send(sock.as_raw_fd(), &request, MsgFlags::empty()).map_err(|e| named("send", e))?;
    // The acknowledgement echoes the request after its error field.
    let mut answer = [0u8; 256];
    let n = recv(sock.as_raw_fd(), &mut answer, MsgFlags::empty()).map_err(|e| named("recv", e))?;
    read_ack(&answer[..n], seq).map_err(|e| match e.raw_os_error() {
        Some(errno) => io::Error::new(
            io::Error::from_raw_os_error(errno).kind(),
            format!("{shown}: {e}"),
        ),
        None => io::Error::other(format!("{shown}: {e}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_route_request_for_the_fake_pool_has_the_layout_ip_route_sends() {
        let msg = local_route_request("198.18.0.0".parse().unwrap(), 15, 1, 7);
        assert_eq!(msg.len(), 44);
        assert_eq!(u32::from_ne_bytes(msg[0..4].try_into().unwrap()), 44);
        assert_eq!(u16::from_ne_bytes([msg[4], msg[5]]), RTM_NEWROUTE);
        assert_eq!(u16::from_ne_bytes([msg[6], msg[7]]), 0x605);
        assert_eq!(u32::from_ne_bytes(msg[8..12].try_into().unwrap()), 7);
        assert_eq!(&msg[16..24], &[2, 15, 0, 0, 255, 3, 254, 2]);
        assert_eq!(&msg[28..36], &[8, 0, 1, 0, 198, 18, 0, 0]);
        assert_eq!(&msg[36..44], &[8, 0, 4, 0, 1, 0, 0, 0]);
        let v6 = local_route_request("2001:db8::7".parse().unwrap(), 128, 1, 1);
        assert_eq!(v6.len(), MAX_REQUEST);
        assert_eq!(&v6[16..18], &[10, 128]);
    }

    #[test]
    fn an_acknowledgement_is_ok_and_an_error_carries_its_errno() {
        let ack = |seq: u32, err: i32| {
            let mut a = vec![0u8; 36];
            a[..4].copy_from_slice(&36u32.to_ne_bytes());
            a[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
            a[8..12].copy_from_slice(&seq.to_ne_bytes());
            a[16..20].copy_from_slice(&err.to_ne_bytes());
            a
        };
        assert!(read_ack(&ack(3, 0), 3).is_ok());
        let e = read_ack(&ack(3, -libc::EEXIST), 3).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
        assert!(read_ack(&ack(4, 0), 3).is_err());
        assert!(read_ack(&[0u8; 10], 3).is_err());
    }
}
