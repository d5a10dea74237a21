//! What the relay tells its caller: one [`ConnectionRecord`] per
//! connection when it ends, the DNS names it refused, and a [`Summary`]
//! when it stops. Events go into a bounded channel without waiting
//! (`EventSink`): a consumer that falls behind loses events, which are
//! counted, and never slows a connection. Refused DNS names are reported
//! once each and at most [`MAX_DNS_REFUSED_EVENTS`] of them
//! (`DnsRefusals`), so a program cannot flood the log by asking for
//! names.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use hickory_proto::rr::RecordType;
use tokio::sync::mpsc;

use crate::egress::address_policy::Denial;
use crate::egress::grant::Host;

/// Why a connection was refused (`allowed: false`), or why an allowed one
/// ended other than by both sides closing. Audit records and messages use
/// these names.
pub mod reason {
    /// The destination, `(host, port)`, is not one of the spawn's grants.
    pub const NOT_GRANTED: &str = "not_granted";
    /// The spawn already has its maximum of open connections.
    pub const TOO_MANY_CONNECTIONS: &str = "too_many_connections";
    /// The granted name did not resolve (an error, a timeout, or no
    /// address).
    pub const UNRESOLVED: &str = "unresolved";
    /// Every address the granted name resolved to is denied by the
    /// address policy; the record's `denial` is the first one's.
    pub const RESOLVED_TO_DENIED_ADDRESS: &str = "resolved_to_denied_address";
    /// The granted address itself is denied by the address policy (a
    /// metadata service, the operator's `deny_cidrs`…).
    pub const DENIED_ADDRESS: &str = "denied_address";
    /// A TLS ClientHello named another server than the granted name.
    pub const SNI_MISMATCH: &str = "sni_mismatch";
    /// A TLS ClientHello to a granted name named no server.
    pub const SNI_MISSING: &str = "sni_missing";
    /// The client's first bytes began a TLS handshake that is not a
    /// well-formed ClientHello, or ended before it was complete.
    pub const MALFORMED_CLIENT_HELLO: &str = "malformed_client_hello";
    /// A ClientHello begun did not complete within the first-flight
    /// timeout.
    pub const FIRST_FLIGHT_TIMEOUT: &str = "first_flight_timeout";
    /// Allowed, but no address could be connected to.
    pub const CONNECT_FAILED: &str = "connect_failed";
    /// Allowed, but the last address tried did not answer within the
    /// connect timeout.
    pub const CONNECT_TIMEOUT: &str = "connect_timeout";
    /// Nothing moved either way for the idle timeout.
    pub const IDLE_TIMEOUT: &str = "idle_timeout";
    /// The spawn ended while the connection was open.
    pub const STOPPED: &str = "stopped";
    /// A read or write failed on either side (a reset, say).
    pub const IO_ERROR: &str = "io_error";

    /// Every reason, for documentation checks and tests.
    pub const ALL: [&str; 14] = [
        NOT_GRANTED,
        SNI_MISSING,
        TOO_MANY_CONNECTIONS,
        UNRESOLVED,
        RESOLVED_TO_DENIED_ADDRESS,
        DENIED_ADDRESS,
        SNI_MISMATCH,
        MALFORMED_CLIENT_HELLO,
        FIRST_FLIGHT_TIMEOUT,
        CONNECT_FAILED,
        CONNECT_TIMEOUT,
        IDLE_TIMEOUT,
        STOPPED,
        IO_ERROR,
    ];
}

/// How many refused DNS names a spawn reports one by one; further ones
/// are only counted ([`NetEvent::DnsRefusedMore`]).
pub const MAX_DNS_REFUSED_EVENTS: usize = 64;

/// One connection a sandboxed program opened, as it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionRecord {
    /// The destination: the granted name a fake address stands for, or
    /// the address the program connected to.
    pub host: Host,
    /// The destination port.
    pub port: u16,
    /// The address spawnd connected to (the last one tried when none
    /// answered).
    pub dialed: Option<SocketAddr>,
    /// Whether the grants and the address policy allowed it.
    pub allowed: bool,
    /// Why it was refused, or why an allowed connection ended otherwise
    /// than by both sides closing: one of [`reason`]'s names.
    pub reason: Option<&'static str>,
    /// For [`reason::RESOLVED_TO_DENIED_ADDRESS`] and
    /// [`reason::DENIED_ADDRESS`]: why the (first) address was denied.
    pub denial: Option<Denial>,
    /// The server name of the client's TLS ClientHello, when checked.
    pub sni: Option<String>,
    /// The error behind a failed connect or relay, as text.
    pub error: Option<String>,
    /// Bytes relayed from the program to the server.
    pub bytes_up: u64,
    /// Bytes relayed from the server to the program.
    pub bytes_down: u64,
    /// From accept to the end.
    pub duration_ms: u64,
}

impl ConnectionRecord {
    /// An allowed connection to `host:port` that has moved nothing yet.
    pub(super) fn new(host: Host, port: u16) -> ConnectionRecord {
        ConnectionRecord {
            host,
            port,
            dialed: None,
            allowed: true,
            reason: None,
            denial: None,
            sni: None,
            error: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
        }
    }

    /// Marks the connection refused for `reason`.
    pub(super) fn refuse(&mut self, reason: &'static str) {
        self.allowed = false;
        self.reason = Some(reason);
    }
}

/// What the relay reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetEvent {
    /// A connection ended (or was refused).
    Connection(ConnectionRecord),
    /// The DNS stub answered NXDOMAIN: the name is not granted. Once per
    /// name and type, for the first [`MAX_DNS_REFUSED_EVENTS`].
    DnsRefused {
        /// The name, lowercase, without the trailing dot.
        name: String,
        /// The type asked for.
        record_type: RecordType,
    },
    /// Refused queries not reported one by one, past the cap (repeats
    /// included); sent when the relay stops, if any.
    DnsRefusedMore {
        /// How many.
        count: u64,
    },
    /// The relay stopped: its totals. Always the last event.
    Summary(Summary),
}

/// A spawn's network totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Connections accepted, refused ones included.
    pub connections: u64,
    /// Connections refused.
    pub refused: u64,
    /// Events the consumer had no room for, lost.
    pub dropped_events: u64,
    /// Bytes relayed from the program, over all connections.
    pub bytes_up: u64,
    /// Bytes relayed to the program, over all connections.
    pub bytes_down: u64,
}

/// The relay's end of the events channel: sends without waiting, counts
/// what does not fit, and keeps the totals of the records it is given.
pub(super) struct EventSink {
    events: mpsc::Sender<NetEvent>,
    dropped: AtomicU64,
    connections: AtomicU64,
    refused: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

impl EventSink {
    pub(super) fn new(events: mpsc::Sender<NetEvent>) -> EventSink {
        EventSink {
            events,
            dropped: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            bytes_up: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
        }
    }

    /// Sends `event` if the channel has room, else counts it as dropped
    /// (a closed channel drops everything).
    pub(super) fn emit(&self, event: NetEvent) {
        if self.events.try_send(event).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Adds a finished connection to the totals and reports it, with its
    /// duration since `started`.
    pub(super) fn connection_ended(&self, mut record: ConnectionRecord, started: Instant) {
        record.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.connections.fetch_add(1, Ordering::Relaxed);
        if !record.allowed {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        self.bytes_up.fetch_add(record.bytes_up, Ordering::Relaxed);
        self.bytes_down
            .fetch_add(record.bytes_down, Ordering::Relaxed);
        self.emit(NetEvent::Connection(record));
    }

    /// The totals so far.
    pub(super) fn summary(&self) -> Summary {
        Summary {
            connections: self.connections.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            dropped_events: self.dropped.load(Ordering::Relaxed),
            bytes_up: self.bytes_up.load(Ordering::Relaxed),
            bytes_down: self.bytes_down.load(Ordering::Relaxed),
        }
    }

    /// Sends a closing event, waiting for room: the relay has stopped, so
    /// waiting holds up nothing but the end of `serve`. A closed channel
    /// drops it.
    pub(super) async fn emit_last(&self, event: NetEvent) {
        let _ = self.events.send(event).await;
    }
}

/// The refused DNS names of a spawn: each name and type reported once,
/// the first [`MAX_DNS_REFUSED_EVENTS`] of them, the rest counted.
#[derive(Debug, Default)]
pub(super) struct DnsRefusals {
    reported: HashSet<(String, RecordType)>,
    more: u64,
}

impl DnsRefusals {
    /// The event to report for a refused query, if it is one.
    pub(super) fn refused(&mut self, name: &str, record_type: RecordType) -> Option<NetEvent> {
        let key = (name.to_string(), record_type);
        if self.reported.contains(&key) {
            return None;
        }
        if self.reported.len() >= MAX_DNS_REFUSED_EVENTS {
            self.more += 1;
            return None;
        }
        self.reported.insert(key);
        Some(NetEvent::DnsRefused {
            name: name.to_string(),
            record_type,
        })
    }

    /// The closing count of refusals past the cap, if any.
    pub(super) fn more(&self) -> Option<NetEvent> {
        (self.more > 0).then_some(NetEvent::DnsRefusedMore { count: self.more })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_names_are_reported_once_each_up_to_the_cap_then_counted() {
        let mut refusals = DnsRefusals::default();
        assert_eq!(
            refusals.refused("a.example", RecordType::A),
            Some(NetEvent::DnsRefused {
                name: "a.example".into(),
                record_type: RecordType::A
            })
        );
        assert_eq!(refusals.refused("a.example", RecordType::A), None);
        assert!(refusals.refused("a.example", RecordType::AAAA).is_some());
        for i in 2..MAX_DNS_REFUSED_EVENTS {
            assert!(refusals
                .refused(&format!("n{i}.example"), RecordType::A)
                .is_some());
        }
        assert_eq!(refusals.more(), None);
        assert_eq!(refusals.refused("late.example", RecordType::A), None);
        assert_eq!(refusals.refused("late.example", RecordType::A), None);
        // Names already reported stay quiet past the cap.
        assert_eq!(refusals.refused("a.example", RecordType::A), None);
        assert_eq!(refusals.more(), Some(NetEvent::DnsRefusedMore { count: 2 }));
    }

    #[test]
    fn a_full_channel_loses_events_counted_and_never_waits() {
        let (tx, mut rx) = mpsc::channel(1);
        let sink = EventSink::new(tx);
        let record = |up| ConnectionRecord {
            bytes_up: up,
            ..ConnectionRecord::new(Host::Name("a.example".into()), 443)
        };
        sink.connection_ended(record(1), Instant::now());
        let mut refused = record(2);
        refused.refuse(reason::NOT_GRANTED);
        sink.connection_ended(refused, Instant::now());
        assert_eq!(
            sink.summary(),
            Summary {
                connections: 2,
                refused: 1,
                dropped_events: 1,
                bytes_up: 3,
                bytes_down: 0,
            }
        );
        assert!(matches!(rx.try_recv(), Ok(NetEvent::Connection(r)) if r.bytes_up == 1));
        drop(rx);
        sink.emit(NetEvent::DnsRefusedMore { count: 1 });
        assert_eq!(sink.summary().dropped_events, 2);
    }

    #[test]
    fn reasons_are_distinct_snake_case_names() {
        let distinct: HashSet<&str> = reason::ALL.into_iter().collect();
        assert_eq!(distinct.len(), reason::ALL.len());
        for name in reason::ALL {
            assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
    }
}
