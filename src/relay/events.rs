//! What the relay tells its caller: a [`ConnectionRecord`] for each
//! connection spawnd dialed (the first [`MAX_CONNECTIONS_REPORTED`] of a
//! spawn), the first of each kind of refusal, the DNS names it refused,
//! and, when it stops, how often each refusal happened, the connections
//! past the budget by destination, and the totals.
//!
//! Nothing is lost and nothing floods. A connection spawnd dialed is
//! reported by its task, which waits for room in the channel while it
//! still holds its connection slot: a consumer that falls behind (an audit
//! log slow to sync) slows new connections rather than losing records, and
//! the waiting is bounded by the spawn's connection limit. Past the
//! budget, dialed connections are counted by destination with their bytes
//! ([`Dialed`]), so a program looping connections grows the log by a
//! bounded amount. A refusal, or a connection whose dial failed, is
//! counted under its destination and reason ([`Refusals`]); only the first
//! of each kind, for the first [`MAX_REFUSALS_REPORTED`] kinds, is
//! reported one by one.
//! Refused DNS names are reported once each, the first
//! [`MAX_DNS_REFUSED_EVENTS`] of them (`DnsRefusals`). Those two are
//! bounded, so they never wait: when the channel has no room they are
//! kept and sent when the relay stops.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use hickory_proto::rr::RecordType;
use tokio::sync::mpsc;

use crate::egress::address_policy::Denial;
use crate::egress::grant::{Grant, Host};

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
    /// address policy (an address of spawnd's own host among the
    /// reasons, `host_address`); the record's `denial` is the first
    /// one's.
    pub const RESOLVED_TO_DENIED_ADDRESS: &str = "resolved_to_denied_address";
    /// The granted address itself is denied by the address policy (a
    /// metadata service, the operator's `deny_cidrs`…).
    pub const DENIED_ADDRESS: &str = "denied_address";
    /// A TLS ClientHello named another server than the granted name.
    pub const SNI_MISMATCH: &str = "sni_mismatch";
    /// A TLS ClientHello to a granted name named no server.
    pub const SNI_MISSING: &str = "sni_missing";
    /// The client's first bytes began TLS (a record of type 20–24 whatever
    /// its version bytes, or an SSLv2-format hello) that is not a
    /// well-formed ClientHello in handshake records of version 3.0–3.4,
    /// or ended before it was complete; the record's `error` says what.
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
    /// A learning relay in record mode (`spawnd learn`): the connection
    /// was recorded, then refused without dialing.
    pub const RECORD_ONLY: &str = "record_only";
    /// spawnd could not read its host's own addresses, so it could not
    /// tell a resolved address from one of the host's: nothing was
    /// dialed (spawnd's failure, not the program's).
    pub const HOST_ADDRESSES_UNREADABLE: &str = "host_addresses_unreadable";

    /// Every reason, for documentation checks and tests.
    pub const ALL: [&str; 16] = [
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
        RECORD_ONLY,
        HOST_ADDRESSES_UNREADABLE,
    ];
}

/// How many refused DNS names a spawn reports one by one; further ones
/// are only counted ([`NetEvent::DnsRefusedMore`]).
pub(crate) const MAX_DNS_REFUSED_EVENTS: usize = 64;

/// How many dialed connections a spawn reports one by one; later ones are
/// counted by destination ([`NetEvent::Unreported`]).
pub(crate) const MAX_CONNECTIONS_REPORTED: u64 = 256;

/// How many kinds of refusal (destination and reason) a spawn reports one
/// by one; refusals of further kinds are only counted
/// ([`NetEvent::Refusals`]).
pub(crate) const MAX_REFUSALS_REPORTED: usize = 64;

/// How a program tried to reach a destination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) enum Transport {
    /// A TCP connection: the only transport a grant names.
    #[default]
    Tcp,
    /// A UDP datagram (refused, but for DNS to spawnd's stub).
    Udp,
    /// A packet of another IP protocol (UDP-Lite, SCTP…; always refused),
    /// by its number.
    Other(u8),
}

impl Transport {
    /// Its name in records and messages: `tcp`, `udp`, `other`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
            Transport::Other(_) => "other",
        }
    }

    /// The IP protocol number of an `other` transport.
    pub(crate) fn ip_protocol(self) -> Option<u8> {
        match self {
            Transport::Other(n) => Some(n),
            Transport::Tcp | Transport::Udp => None,
        }
    }
}

/// One connection a sandboxed program opened, as it ended, or one attempt
/// the sandbox's own rules refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectionRecord {
    /// The destination: the granted name a fake address stands for, or
    /// the address the program connected to.
    pub host: Host,
    /// The destination port (0 when the refused packet did not say).
    pub port: u16,
    /// TCP, or UDP for a refused datagram.
    pub transport: Transport,
    /// The address spawnd connected to (the last one tried when none
    /// answered).
    pub dialed: Option<SocketAddr>,
    /// Whether the grants and the address policy allowed it.
    pub allowed: bool,
    /// Whether spawnd's connection to the server was made.
    pub connected: bool,
    /// Why it was refused, or why an allowed connection ended otherwise
    /// than by both sides closing: one of [`reason`]'s names.
    pub reason: Option<&'static str>,
    /// For [`reason::RESOLVED_TO_DENIED_ADDRESS`] and
    /// [`reason::DENIED_ADDRESS`]: why the (first) address was denied.
    pub denial: Option<Denial>,
    /// The server name of the client's TLS ClientHello, when checked.
    pub sni: Option<String>,
    /// The error behind a failed connect or relay, or what was wrong
    /// with a first flight refused as [`reason::MALFORMED_CLIENT_HELLO`],
    /// as text.
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
            transport: Transport::Tcp,
            dialed: None,
            allowed: true,
            connected: false,
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

    /// Whether spawnd dialed its server (a connection refused after that,
    /// by its first flight, included): such a connection is reported on
    /// its own, within the spawn's budget; any other is counted as a
    /// refusal.
    pub(crate) fn reached_server(&self) -> bool {
        self.connected
    }

    /// What its refusals are counted under.
    fn refusal_kind(&self) -> RefusalKind {
        RefusalKind {
            host: self.host.clone(),
            port: self.port,
            transport: self.transport,
            reason: self.reason.unwrap_or(reason::CONNECT_FAILED),
        }
    }
}

/// A kind of refusal: the destination and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RefusalKind {
    /// Where the program was going.
    pub host: Host,
    /// Its port.
    pub port: u16,
    /// How.
    pub transport: Transport,
    /// One of [`reason`]'s names.
    pub reason: &'static str,
}

/// Dialed connections to one destination past the spawn's budget of
/// individual reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DialedCount {
    /// Where the program was going.
    pub host: Host,
    /// Its port.
    pub port: u16,
    /// How many connections.
    pub count: u64,
    /// Of those, how many were refused after the dial (their first flight).
    pub refused: u64,
    /// Bytes relayed from the program, over those connections.
    pub bytes_up: u64,
    /// Bytes relayed to the program, over those connections.
    pub bytes_down: u64,
}

/// How often one kind of refusal happened in a spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RefusalCount {
    /// The kind.
    pub kind: RefusalKind,
    /// How many connections, the reported first one included.
    pub count: u64,
}

/// What the relay reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NetEvent {
    /// A connection ended: each one spawnd dialed, within the spawn's
    /// budget, and the first refusal of each kind before a dial (see
    /// [`ConnectionRecord::reached_server`]).
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
    /// How often each reported kind of refusal happened, and refusals of
    /// kinds past [`MAX_REFUSALS_REPORTED`]; sent when the relay stops, if
    /// anything was refused.
    Refusals {
        /// Each reported kind with its count, in the order first seen.
        counts: Vec<RefusalCount>,
        /// Refusals of kinds not reported one by one.
        unreported: u64,
    },
    /// Dialed connections past [`MAX_CONNECTIONS_REPORTED`], by
    /// destination; sent when the relay stops, if there were any.
    Unreported {
        /// Each destination, in the order first counted.
        connections: Vec<DialedCount>,
    },
    /// The `host:port` pairs a learning relay's program connected to, or
    /// tried to: each once, sorted, the first
    /// [`MAX_CONTACTED`](crate::egress::learning::MAX_CONTACTED); sent when
    /// a learning relay stops, before its summary.
    Contacted {
        /// The pairs, each a grant a manifest could hold.
        pairs: Vec<Grant>,
        /// Connections to pairs past the cap, not listed.
        unlisted: u64,
    },
    /// The relay stopped: its totals. Always the last event.
    Summary(Summary),
}

/// A spawn's network totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    /// Connections accepted, refused ones included.
    pub connections: u64,
    /// Connections refused, or whose dial failed.
    pub refused: u64,
    /// Bytes relayed from the program, over all connections.
    pub bytes_up: u64,
    /// Bytes relayed to the program, over all connections.
    pub bytes_down: u64,
}

/// The relay's end of the events channel: reports what it is given as the
/// module documentation says, and keeps the totals.
pub(super) struct EventSink {
    events: mpsc::Sender<NetEvent>,
    /// Bounded events the channel had no room for, sent at the end.
    held: Mutex<Vec<NetEvent>>,
    refusals: Mutex<Refusals>,
    dialed: Mutex<Dialed>,
    connections: AtomicU64,
    refused: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

impl EventSink {
    pub(super) fn new(events: mpsc::Sender<NetEvent>) -> EventSink {
        EventSink {
            events,
            held: Mutex::new(Vec::new()),
            refusals: Mutex::new(Refusals::default()),
            dialed: Mutex::new(Dialed::default()),
            connections: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            bytes_up: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
        }
    }

    /// Sends one of the bounded events (a first refusal, a refused DNS
    /// name) without waiting: kept for the end when the channel is full.
    /// A closed channel drops it.
    pub(super) fn report(&self, event: NetEvent) {
        if let Err(mpsc::error::TrySendError::Full(event)) = self.events.try_send(event) {
            if let Ok(mut held) = self.held.lock() {
                held.push(event);
            }
        }
    }

    /// Adds a connection that ended, refused or not, to the totals, with
    /// its duration since `started`. One spawnd dialed is given back for
    /// the caller to [`send`](Self::send) while the spawn's budget lasts,
    /// then counted by destination; any other is counted under its kind,
    /// the first of each reported now.
    pub(super) fn connection_ended(
        &self,
        mut record: ConnectionRecord,
        started: Instant,
    ) -> Option<NetEvent> {
        record.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.connections.fetch_add(1, Ordering::Relaxed);
        self.bytes_up.fetch_add(record.bytes_up, Ordering::Relaxed);
        self.bytes_down
            .fetch_add(record.bytes_down, Ordering::Relaxed);
        if !record.allowed || !record.connected {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        if record.reached_server() {
            let within_budget = self
                .dialed
                .lock()
                .map(|mut dialed| dialed.count(&record))
                .unwrap_or(false);
            if within_budget {
                return Some(NetEvent::Connection(record));
            }
            // Past the budget, one refused after its dial (a ClientHello
            // naming another server) is also counted under its kind, the
            // first of each reported, so no refusal goes unseen.
            if record.allowed {
                return None;
            }
        }
        let first = self
            .refusals
            .lock()
            .map(|mut refusals| refusals.count(record.refusal_kind()))
            .unwrap_or(false);
        if first {
            self.report(NetEvent::Connection(record));
        }
        None
    }

    /// Counts a connection refused before it was dialed.
    pub(super) fn refused(&self, record: ConnectionRecord, started: Instant) {
        debug_assert!(!record.allowed);
        if let Some(event) = self.connection_ended(record, started) {
            self.report(event);
        }
    }

    /// Counts refusals the kernel could not log (its log's buffer was
    /// full): at least one, of kinds unknown, counted as unreported.
    pub(super) fn refusals_lost(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut refusals) = self.refusals.lock() {
            refusals.unreported += 1;
        }
    }

    /// Sends `event`, waiting for room. A closed channel drops it.
    pub(super) async fn send(&self, event: NetEvent) {
        let _ = self.events.send(event).await;
    }

    /// The totals so far.
    pub(super) fn summary(&self) -> Summary {
        Summary {
            connections: self.connections.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            bytes_up: self.bytes_up.load(Ordering::Relaxed),
            bytes_down: self.bytes_down.load(Ordering::Relaxed),
        }
    }

    /// Sends, once the relay has stopped, the events held back, then the
    /// refusal counts, then `closing`, waiting for room: nothing is held
    /// up but the end of `serve`.
    pub(super) async fn finish(&self, closing: impl IntoIterator<Item = NetEvent>) {
        let held = self
            .held
            .lock()
            .map(|mut held| std::mem::take(&mut *held))
            .unwrap_or_default();
        let counts = self.refusals.lock().ok().and_then(|r| r.closing());
        let unreported = self.dialed.lock().ok().and_then(|d| d.closing());
        for event in held
            .into_iter()
            .chain(counts)
            .chain(unreported)
            .chain(closing)
        {
            self.send(event).await;
        }
    }
}

/// A spawn's dialed connections: how many were reported one by one, and
/// those past [`MAX_CONNECTIONS_REPORTED`] by destination (only granted
/// destinations are dialed, so the destinations are few).
#[derive(Debug, Default)]
struct Dialed {
    reported: u64,
    past_budget: Vec<DialedCount>,
}

impl Dialed {
    /// Counts one dialed connection; true while it may be reported on its
    /// own.
    fn count(&mut self, record: &ConnectionRecord) -> bool {
        if self.reported < MAX_CONNECTIONS_REPORTED {
            self.reported += 1;
            return true;
        }
        let at = match self
            .past_budget
            .iter()
            .position(|c| c.host == record.host && c.port == record.port)
        {
            Some(at) => at,
            None => {
                self.past_budget.push(DialedCount {
                    host: record.host.clone(),
                    port: record.port,
                    count: 0,
                    refused: 0,
                    bytes_up: 0,
                    bytes_down: 0,
                });
                self.past_budget.len() - 1
            }
        };
        let c = &mut self.past_budget[at];
        c.count += 1;
        c.refused += u64::from(!record.allowed);
        c.bytes_up += record.bytes_up;
        c.bytes_down += record.bytes_down;
        false
    }

    /// The closing counts, if any connection was past the budget.
    fn closing(&self) -> Option<NetEvent> {
        (!self.past_budget.is_empty()).then(|| NetEvent::Unreported {
            connections: self.past_budget.clone(),
        })
    }
}

/// A spawn's refusals by kind: the first [`MAX_REFUSALS_REPORTED`] kinds
/// counted one by one, the rest together.
#[derive(Debug, Default)]
struct Refusals {
    counts: HashMap<RefusalKind, u64>,
    order: Vec<RefusalKind>,
    unreported: u64,
}

impl Refusals {
    /// Counts one refusal; true when it is the first of a kind to report.
    fn count(&mut self, kind: RefusalKind) -> bool {
        if let Some(count) = self.counts.get_mut(&kind) {
            *count += 1;
            return false;
        }
        if self.order.len() >= MAX_REFUSALS_REPORTED {
            self.unreported += 1;
            return false;
        }
        self.order.push(kind.clone());
        self.counts.insert(kind, 1);
        true
    }

    /// The closing counts, if anything was refused.
    fn closing(&self) -> Option<NetEvent> {
        (!self.order.is_empty() || self.unreported > 0).then(|| NetEvent::Refusals {
            counts: self
                .order
                .iter()
                .map(|kind| RefusalCount {
                    kind: kind.clone(),
                    count: self.counts.get(kind).copied().unwrap_or(0),
                })
                .collect(),
            unreported: self.unreported,
        })
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

    fn refused_to(host: &str, port: u16, why: &'static str) -> ConnectionRecord {
        let mut record = ConnectionRecord::new(Host::Name(host.into()), port);
        record.refuse(why);
        record
    }

    #[tokio::test]
    async fn reached_connections_are_given_back_refusals_are_counted_and_nothing_is_lost() {
        let (tx, mut rx) = mpsc::channel(1);
        let sink = EventSink::new(tx);
        let mut reached = ConnectionRecord::new(Host::Name("a.example".into()), 443);
        reached.connected = true;
        reached.bytes_up = 1;
        let given = sink.connection_ended(reached, Instant::now());
        assert!(matches!(&given, Some(NetEvent::Connection(r)) if r.bytes_up == 1));
        // Three refusals of one kind, one of another: two reported, the
        // second held because the channel (room for one) is full.
        for _ in 0..3 {
            assert_eq!(
                sink.connection_ended(
                    refused_to("b.example", 443, reason::NOT_GRANTED),
                    Instant::now()
                ),
                None
            );
        }
        sink.connection_ended(
            refused_to("b.example", 80, reason::NOT_GRANTED),
            Instant::now(),
        );
        // An allowed connection whose dial failed counts as a refusal.
        let mut failed = ConnectionRecord::new(Host::Name("a.example".into()), 443);
        failed.reason = Some(reason::CONNECT_FAILED);
        sink.connection_ended(failed, Instant::now());
        assert_eq!(
            sink.summary(),
            Summary {
                connections: 6,
                refused: 5,
                bytes_up: 1,
                bytes_down: 0,
            }
        );
        let first = rx.recv().await.unwrap();
        assert!(matches!(first, NetEvent::Connection(r) if r.port == 443 && !r.allowed));
        let finishing = tokio::spawn(async move {
            sink.finish([NetEvent::Summary(Summary::default())]).await;
        });
        let mut rest = Vec::new();
        while let Some(event) = rx.recv().await {
            rest.push(event);
        }
        finishing.await.unwrap();
        assert!(matches!(&rest[0], NetEvent::Connection(r) if r.port == 80));
        assert!(
            matches!(&rest[1], NetEvent::Connection(r) if r.reason == Some(reason::CONNECT_FAILED))
        );
        let NetEvent::Refusals { counts, unreported } = &rest[2] else {
            panic!("no refusal counts: {rest:?}");
        };
        let counted: Vec<(u16, &str, u64)> = counts
            .iter()
            .map(|c| (c.kind.port, c.kind.reason, c.count))
            .collect();
        assert_eq!(
            counted,
            [
                (443, reason::NOT_GRANTED, 3),
                (80, reason::NOT_GRANTED, 1),
                (443, reason::CONNECT_FAILED, 1)
            ]
        );
        assert_eq!(*unreported, 0);
        assert!(matches!(rest[3], NetEvent::Summary(_)));
        assert_eq!(rest.len(), 4);
    }

    #[tokio::test]
    async fn every_dialed_connection_is_reported_up_to_the_budget_then_counted_by_destination() {
        let (tx, mut rx) = mpsc::channel(4);
        let sink = EventSink::new(tx);
        let dialed = |port: u16, allowed: bool| {
            let mut r = ConnectionRecord::new(Host::Name("a.example".into()), port);
            r.connected = true;
            r.bytes_down = 10;
            if !allowed {
                // Refused by its first flight, after the dial: reported
                // on its own all the same.
                r.refuse(reason::SNI_MISMATCH);
            }
            r
        };
        assert!(sink
            .connection_ended(dialed(443, false), Instant::now())
            .is_some());
        for _ in 1..MAX_CONNECTIONS_REPORTED {
            assert!(sink
                .connection_ended(dialed(443, true), Instant::now())
                .is_some());
        }
        // Past the budget: counted by destination, with bytes.
        for port in [443, 443, 80] {
            assert_eq!(
                sink.connection_ended(dialed(port, true), Instant::now()),
                None
            );
        }
        assert_eq!(
            sink.connection_ended(dialed(443, false), Instant::now()),
            None
        );
        assert_eq!(sink.summary().refused, 2);
        let finishing = tokio::spawn(async move { sink.finish([]).await });
        let mut closing = Vec::new();
        while let Some(event) = rx.recv().await {
            closing.push(event);
        }
        finishing.await.unwrap();
        // The one refused past the budget is also counted under its kind,
        // and, the first of its kind, reported on its own.
        let [NetEvent::Connection(first), NetEvent::Refusals { counts, .. }, NetEvent::Unreported { connections }] =
            closing.as_slice()
        else {
            panic!("{closing:?}");
        };
        assert_eq!(first.reason, Some(reason::SNI_MISMATCH), "{first:?}");
        assert_eq!(
            counts
                .iter()
                .map(|c| (c.kind.port, c.kind.reason, c.count))
                .collect::<Vec<_>>(),
            [(443, reason::SNI_MISMATCH, 1)]
        );
        let counted: Vec<(u16, u64, u64, u64)> = connections
            .iter()
            .map(|c| (c.port, c.count, c.refused, c.bytes_down))
            .collect();
        assert_eq!(counted, [(443, 3, 1, 30), (80, 1, 0, 10)]);
    }

    #[test]
    fn refusal_kinds_past_the_cap_are_counted_together() {
        let mut refusals = Refusals::default();
        for port in 0..MAX_REFUSALS_REPORTED as u16 {
            assert!(refusals
                .count(refused_to("c.example", port + 1, reason::NOT_GRANTED).refusal_kind()));
        }
        assert!(!refusals.count(refused_to("c.example", 9999, reason::NOT_GRANTED).refusal_kind()));
        assert!(!refusals.count(refused_to("c.example", 1, reason::NOT_GRANTED).refusal_kind()));
        let Some(NetEvent::Refusals { counts, unreported }) = refusals.closing() else {
            panic!("no counts");
        };
        assert_eq!(
            (counts.len(), counts[0].count, unreported),
            (MAX_REFUSALS_REPORTED, 2, 1)
        );
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
