//! NFLOG, by hand: the socket a sandbox with grants hands spawnd so that
//! spawnd sees the egress its nf_tables rules refused
//! ([`crate::netlink::log_and_refuse_other_egress`]). Init binds it to the
//! log group in its own network namespace while it holds CAP_NET_ADMIN
//! there (binding needs it; reading does not), and spawnd reads each
//! refused packet's first bytes from it: where it was going, and how.
//!
//! Hand-built for the reason `crate::netlink`'s messages are: one fixed
//! configuration message (a header, an nfgenmsg, two attributes) and a parser for the
//! one attribute spawnd reads, with no `unsafe` and no allocation per
//! message in init.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use nix::sys::socket::{
    bind, recv, send, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};
use nix::sys::time::TimeVal;

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NFNL_SUBSYS_ULOG: u16 = 4;
const NFULNL_MSG_PACKET: u16 = 0;
const NFULNL_MSG_CONFIG: u16 = 1;
const NFULA_CFG_CMD: u16 = 1;
const NFULA_CFG_MODE: u16 = 2;
const NFULA_CFG_NLBUFSIZ: u16 = 3;
const NFULA_CFG_QTHRESH: u16 = 5;
const NFULNL_CFG_CMD_BIND: u8 = 1;
const NFULNL_COPY_PACKET: u8 = 2;
const NFULA_PAYLOAD: u16 = 9;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

/// The socket's receive buffer asked for (the kernel caps it at
/// `net.core.rmem_max`): a burst of refused packets waits here until
/// spawnd reads it; past it the kernel drops log messages (the program's
/// packets are refused all the same) and the next read says `ENOBUFS`.
const RECEIVE_BUFFER: usize = 1 << 20;

/// The size of each log message's buffer: the kernel's default is a page
/// or more per message, which would fill the receive buffer after about a
/// hundred entries; a message here is a few hundred bytes.
const MESSAGE_BUFFER: u32 = 512;

/// How long init waits for the kernel's acknowledgement.
const ACK_WITHIN: Duration = Duration::from_secs(5);

/// One refused packet, as logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedPacket {
    /// Where it was going.
    pub destination: IpAddr,
    /// Its IP protocol (6 TCP, 17 UDP).
    pub protocol: u8,
    /// Its destination port, when its TCP or UDP header was in the log.
    pub port: Option<u16>,
}

/// The configuration request binding this socket to `group`, asking for
/// the first `bytes` of each packet, each sent as it is logged (a queue
/// threshold of 1: the kernel's default holds up to 100 packets for up
/// to a second) in a message buffer of its own size, with sequence number
/// `seq`.
pub(crate) fn bind_request(group: u16, bytes: u32, seq: u32) -> Vec<u8> {
    let mut msg = Vec::with_capacity(40);
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&((NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG).to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    // nfgenmsg: family AF_UNSPEC, version 0, the group (big-endian).
    msg.extend_from_slice(&[0, 0]);
    msg.extend_from_slice(&group.to_be_bytes());
    // NFULA_CFG_CMD { u8 command }, padded.
    msg.extend_from_slice(&5u16.to_ne_bytes());
    msg.extend_from_slice(&NFULA_CFG_CMD.to_ne_bytes());
    msg.extend_from_slice(&[NFULNL_CFG_CMD_BIND, 0, 0, 0]);
    // NFULA_CFG_MODE { __be32 copy_range; u8 copy_mode; u8 pad }, padded.
    msg.extend_from_slice(&10u16.to_ne_bytes());
    msg.extend_from_slice(&NFULA_CFG_MODE.to_ne_bytes());
    msg.extend_from_slice(&bytes.to_be_bytes());
    msg.extend_from_slice(&[NFULNL_COPY_PACKET, 0, 0, 0]);
    // NFULA_CFG_QTHRESH { __be32 }, NFULA_CFG_NLBUFSIZ { __be32 }.
    msg.extend_from_slice(&8u16.to_ne_bytes());
    msg.extend_from_slice(&NFULA_CFG_QTHRESH.to_ne_bytes());
    msg.extend_from_slice(&1u32.to_be_bytes());
    msg.extend_from_slice(&8u16.to_ne_bytes());
    msg.extend_from_slice(&NFULA_CFG_NLBUFSIZ.to_ne_bytes());
    msg.extend_from_slice(&MESSAGE_BUFFER.to_be_bytes());
    let len = msg.len() as u32;
    msg[..4].copy_from_slice(&len.to_ne_bytes());
    msg
}

/// A NETLINK_NETFILTER socket of the current network namespace bound to
/// NFLOG group `group` (needs CAP_NET_ADMIN over the namespace), receiving
/// the first `bytes` of each packet logged there; close-on-exec. The
/// error names the step.
pub(crate) fn bind_log_group(group: u16, bytes: u32) -> io::Result<OwnedFd> {
    let named = |what: &str, e: nix::Error| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("{what} (nflog group {group}): {e}"),
        )
    };
    let sock = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkNetFilter,
    )
    .map_err(|e| named("socket(AF_NETLINK, NETLINK_NETFILTER)", e))?;
    bind(sock.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(|e| named("bind(netlink)", e))?;
    setsockopt(&sock, sockopt::RcvBuf, &RECEIVE_BUFFER)
        .map_err(|e| named("setsockopt(SO_RCVBUF)", e))?;
    let within = TimeVal::new(ACK_WITHIN.as_secs() as _, 0);
    setsockopt(&sock, sockopt::ReceiveTimeout, &within)
        .map_err(|e| named("setsockopt(SO_RCVTIMEO)", e))?;
    let seq = 1;
    send(
        sock.as_raw_fd(),
        &bind_request(group, bytes, seq),
        MsgFlags::empty(),
    )
    .map_err(|e| named("send", e))?;
    let mut answer = [0u8; 512];
    let n = recv(sock.as_raw_fd(), &mut answer, MsgFlags::empty()).map_err(|e| named("recv", e))?;
    crate::netlink::read_ack(&answer[..n], seq).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("nflog: binding group {group} was refused: {e}"),
        )
    })?;
    // Reads block no longer: spawnd polls the socket.
    setsockopt(&sock, sockopt::ReceiveTimeout, &TimeVal::new(0, 0))
        .map_err(|e| named("setsockopt(SO_RCVTIMEO)", e))?;
    Ok(sock)
}

/// The log socket registered with the current tokio runtime, nonblocking,
/// for spawnd to await its messages.
pub(crate) fn watched_log(log: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    nix::fcntl::fcntl(
        &log,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )?;
    // SAFETY: the AsyncFd owns the descriptor for as long as it is
    // registered (an OwnedFd, its raw value constant, closed only when the
    // AsyncFd drops it after deregistering), as `register` requires.
    unsafe { tokio::io::unix::AsyncFd::register(log) }.map_err(|e| e.into_parts().1)
}

/// The packets logged in one read of the socket (whole netlink messages);
/// anything else, or a packet too short to say where it went, is skipped.
pub fn read_logged_packets(bytes: &[u8]) -> Vec<LoggedPacket> {
    let mut found = Vec::new();
    let mut at = 0;
    while at + 20 <= bytes.len() {
        let len =
            u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
        if len < 20 || at + len > bytes.len() {
            break;
        }
        let kind = u16::from_ne_bytes([bytes[at + 4], bytes[at + 5]]);
        if kind == (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET {
            let family = bytes[at + 16];
            let payload = attribute(&bytes[at + 20..at + len], NFULA_PAYLOAD);
            if let Some(packet) = payload.and_then(|p| packet(family, p)) {
                found.push(packet);
            }
        }
        at += len.next_multiple_of(4);
    }
    found
}

/// The value of the first attribute of type `kind` among `attrs`.
fn attribute(attrs: &[u8], kind: u16) -> Option<&[u8]> {
    let mut at = 0;
    while at + 4 <= attrs.len() {
        let len = usize::from(u16::from_ne_bytes([attrs[at], attrs[at + 1]]));
        let this = u16::from_ne_bytes([attrs[at + 2], attrs[at + 3]]) & 0x3fff;
        if len < 4 || at + len > attrs.len() {
            return None;
        }
        if this == kind {
            return Some(&attrs[at + 4..at + len]);
        }
        at += len.next_multiple_of(4);
    }
    None
}

/// Where an IPv4 or IPv6 packet (from its network header on) was going.
fn packet(family: u8, p: &[u8]) -> Option<LoggedPacket> {
    let (destination, protocol, transport) = match family {
        AF_INET if p.len() >= 20 => {
            let header = usize::from(p[0] & 0x0f) * 4;
            let to = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
            (IpAddr::V4(to), p[9], p.get(header..))
        }
        AF_INET6 if p.len() >= 40 => {
            let to: [u8; 16] = p[24..40].try_into().ok()?;
            (IpAddr::V6(Ipv6Addr::from(to)), p[6], p.get(40..))
        }
        _ => return None,
    };
    let port = match (protocol, transport) {
        (IPPROTO_TCP | IPPROTO_UDP, Some(t)) if t.len() >= 4 => {
            Some(u16::from_be_bytes([t[2], t[3]]))
        }
        _ => None,
    };
    Some(LoggedPacket {
        destination,
        protocol,
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An NFULNL_MSG_PACKET message of `family` carrying `payload`, with
    /// a packet header attribute before it as the kernel sends.
    fn logged(family: u8, payload: &[u8]) -> Vec<u8> {
        let mut m = vec![0u8; 16];
        m[4..6].copy_from_slice(&((NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET).to_ne_bytes());
        m.extend_from_slice(&[family, 0, 0, 1]);
        // NFULA_PACKET_HDR { be16 hw_protocol, u8 hook, u8 pad }
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&1u16.to_ne_bytes());
        m.extend_from_slice(&[0x08, 0, 3, 0]);
        m.extend_from_slice(&(4 + payload.len() as u16).to_ne_bytes());
        m.extend_from_slice(&NFULA_PAYLOAD.to_ne_bytes());
        m.extend_from_slice(payload);
        while !m.len().is_multiple_of(4) {
            m.push(0);
        }
        let len = m.len() as u32;
        m[..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    fn ipv4(protocol: u8, to: [u8; 4], port: u16) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, protocol, 0, 0];
        p.extend_from_slice(&to);
        p.extend_from_slice(&to);
        p.extend_from_slice(&40000u16.to_be_bytes());
        p.extend_from_slice(&port.to_be_bytes());
        p.extend_from_slice(&[0; 16]);
        p
    }

    #[test]
    fn the_bind_request_names_the_group_the_command_and_the_copy_range() {
        let m = bind_request(7, 128, 1);
        assert_eq!(m.len(), 56);
        assert_eq!(u32::from_ne_bytes(m[..4].try_into().unwrap()), 56);
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), 0x0401);
        assert_eq!(&m[18..20], &[0, 7]);
        assert_eq!(&m[20..25], &[5, 0, 1, 0, NFULNL_CFG_CMD_BIND]);
        assert_eq!(&m[28..32], &[10, 0, 2, 0]);
        assert_eq!(&m[32..36], &128u32.to_be_bytes());
        assert_eq!(m[36], NFULNL_COPY_PACKET);
        assert_eq!(&m[40..48], &[8, 0, 5, 0, 0, 0, 0, 1]);
        assert_eq!(&m[48..56], &[8, 0, 3, 0, 0, 0, 2, 0]);
    }

    #[test]
    fn logged_tcp_and_udp_packets_give_their_destination_and_port() {
        let mut read = logged(AF_INET, &ipv4(IPPROTO_TCP, [203, 0, 113, 9], 22));
        read.extend(logged(AF_INET, &ipv4(IPPROTO_UDP, [8, 8, 8, 8], 53)));
        let mut v6 = vec![0x60, 0, 0, 0, 0, 20, IPPROTO_TCP, 64];
        v6.extend_from_slice(&[0; 16]);
        v6.extend_from_slice(&"2001:db8::7".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend_from_slice(&[0x9c, 0x40, 0x01, 0xbb]);
        read.extend(logged(AF_INET6, &v6));
        assert_eq!(
            read_logged_packets(&read),
            [
                LoggedPacket {
                    destination: "203.0.113.9".parse().unwrap(),
                    protocol: IPPROTO_TCP,
                    port: Some(22)
                },
                LoggedPacket {
                    destination: "8.8.8.8".parse().unwrap(),
                    protocol: IPPROTO_UDP,
                    port: Some(53)
                },
                LoggedPacket {
                    destination: "2001:db8::7".parse().unwrap(),
                    protocol: IPPROTO_TCP,
                    port: Some(443)
                },
            ]
        );
    }

    #[test]
    fn short_or_foreign_messages_are_skipped_and_a_cut_one_ends_the_read() {
        // A packet whose transport header was not logged has no port.
        let header_only = ipv4(IPPROTO_TCP, [192, 0, 2, 1], 80)[..20].to_vec();
        let mut read = logged(AF_INET, &header_only);
        // Another family, a too-short IPv6 header: skipped.
        read.extend(logged(7, &[0; 40]));
        read.extend(logged(AF_INET6, &[0x60; 30]));
        let mut cut = logged(AF_INET, &ipv4(IPPROTO_TCP, [192, 0, 2, 2], 80));
        cut[..4].copy_from_slice(&1000u32.to_ne_bytes());
        read.extend(cut);
        assert_eq!(
            read_logged_packets(&read),
            [LoggedPacket {
                destination: "192.0.2.1".parse().unwrap(),
                protocol: IPPROTO_TCP,
                port: None
            }]
        );
        assert!(read_logged_packets(&[1, 2, 3]).is_empty());
    }
}
