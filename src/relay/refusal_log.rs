//! What the sandbox's own rules refused: every TCP connection attempt and
//! UDP datagram that left for neither the loopback nor a granted port was
//! logged to the NFLOG socket init handed over
//! ([`crate::sandbox::network`]) and refused at once; each becomes a
//! refusal like the relay's own (`not_granted`, its destination a granted
//! name when it went to the name's fake address), counted by kind, the
//! first of each reported, so a program's probes of IP literals, other
//! ports and UDP are in the records, the result and the refusal lines.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use nix::sys::socket::{recv, MsgFlags};

use super::events::{reason, ConnectionRecord, Transport};
use super::Relay;
use crate::egress::fake_pool::in_fake_pool;
use crate::egress::grant::Host;
use crate::sys::{read_logged_packets, watched_log, LoggedPacket};

/// Big enough for any batch of log messages the kernel sends at once.
const READ_BUFFER: usize = 64 * 1024;

/// Reads of what is left once the spawn ended: enough for the log's whole
/// receive buffer, and a bound on a program that floods on regardless
/// (its spawn ends all the same).
const DRAIN_READS: usize = 4096;

/// Reads the log until the spawn ends, then what is left in it; each
/// packet is a refusal. A log that cannot be read any more is warned
/// about, and the rules keep refusing.
pub(super) async fn watch(relay: Arc<Relay>, log: OwnedFd) {
    let log = match watched_log(log) {
        Ok(log) => log,
        Err(e) => {
            tracing::warn!("relay: the refused-egress log: {e}");
            return;
        }
    };
    let mut buffer = vec![0u8; READ_BUFFER];
    loop {
        let ready = tokio::select! {
            ready = log.readable() => ready,
            () = relay.stop.cancelled() => break,
        };
        let mut ready = match ready {
            Ok(ready) => ready,
            Err(e) => {
                tracing::warn!("relay: the refused-egress log: {e}");
                return;
            }
        };
        match ready.try_io(|log| read(log.get_ref(), &mut buffer)) {
            Ok(Ok(n)) => take(&relay, &buffer[..n]),
            Ok(Err(e)) if e.raw_os_error() == Some(libc::ENOBUFS) => relay.events.refusals_lost(),
            Ok(Err(e)) => {
                tracing::warn!("relay: the refused-egress log: {e}");
                return;
            }
            Err(_would_block) => {}
        }
    }
    // The program is gone: what it was refused last is in the log already
    // (a packet is logged as it is refused).
    for _ in 0..DRAIN_READS {
        match read(log.get_ref(), &mut buffer) {
            Ok(n) => take(&relay, &buffer[..n]),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => relay.events.refusals_lost(),
            Err(_) => break,
        }
    }
}

fn read(log: &OwnedFd, buffer: &mut [u8]) -> io::Result<usize> {
    recv(log.as_raw_fd(), buffer, MsgFlags::MSG_DONTWAIT).map_err(io::Error::from)
}

/// Counts each packet logged in `bytes` as a refusal.
fn take(relay: &Relay, bytes: &[u8]) {
    for packet in read_logged_packets(bytes) {
        relay.events.refused(refusal(relay, packet), Instant::now());
    }
}

/// The refusal a logged packet stands for.
fn refusal(relay: &Relay, packet: LoggedPacket) -> ConnectionRecord {
    let to = packet.destination.to_canonical();
    let host = match to {
        IpAddr::V4(v4) if in_fake_pool(v4) => relay
            .rules
            .name_of(v4)
            .map(Host::Name)
            .unwrap_or(Host::Ip(to)),
        _ => Host::Ip(to),
    };
    let mut record = ConnectionRecord::new(host, packet.port.unwrap_or(0));
    record.transport = match packet.protocol {
        6 => Transport::Tcp,
        17 => Transport::Udp,
        other => Transport::Other(other),
    };
    record.refuse(reason::NOT_GRANTED);
    record.error = Some(match record.transport {
        Transport::Other(n) => format!(
            "refused in the sandbox before it left: IP protocol {n} (IPv4 options and IPv6 extension headers are refused too)"
        ),
        _ => "refused in the sandbox before it left: nothing spawnd serves there".into(),
    });
    record
}
