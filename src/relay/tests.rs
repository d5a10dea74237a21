//! The relay in a world of two network namespaces (`world_tests`): a
//! program's connections and DNS queries from the sandbox side, the
//! records the relay writes, and what the program sees when refused.

use std::io::{ErrorKind, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};

use crate::egress::address_policy::{AddressPolicy, Denial, DenyReason};
use crate::egress::grant::Host;

use super::world_tests::uninterrupted;
use super::world_tests::{
    connect, read_end, read_exact, roundtrip, run, Scenario, BANNER, BANNER_TEXT, ECHO,
    HOST_ADDRESS, TLS,
};
use super::{reason, ConnectionRecord, NetEvent, Summary};

/// A ClientHello OpenSSL's `s_client` sent for `api.example.com`.
pub(super) const HELLO_API_EXAMPLE_COM: &[u8] =
    include_bytes!("../../fuzz/seeds/client_hello/openssl-s_client");

pub(super) fn name(name: &str) -> Host {
    Host::Name(name.to_string())
}

fn addr(text: &str) -> std::net::SocketAddr {
    text.parse().unwrap()
}

/// The record of an allowed connection that relayed `up` and `down`
/// bytes after dialing `dialed`.
pub(super) fn relayed(host: Host, port: u16, dialed: &str, up: u64, down: u64) -> ConnectionRecord {
    ConnectionRecord {
        dialed: Some(addr(dialed)),
        connected: true,
        bytes_up: up,
        bytes_down: down,
        ..ConnectionRecord::new(host, port)
    }
}

/// The record of a connection refused for `why` before anything moved.
pub(super) fn refused(host: Host, port: u16, why: &'static str) -> ConnectionRecord {
    let mut record = ConnectionRecord::new(host, port);
    record.refuse(why);
    record
}

/// Closes the client's side and waits for the relay to close the other:
/// the relay has then recorded the connection as ended by both sides.
pub(super) fn finish(mut stream: TcpStream) {
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(read_end(&mut stream), Ok(0));
}

pub(super) fn assert_reset(stream: &mut TcpStream) {
    assert_eq!(read_end(stream), Err(ErrorKind::ConnectionReset));
}

/// Connects to `ip:port` and expects the relay to reset the connection
/// (before `connect` returns, or after).
pub(super) fn assert_reset_at(ip: &str, port: u16) {
    match connect(ip, port) {
        Ok(mut stream) => assert_reset(&mut stream),
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{ip}:{port}"),
    }
}

#[test]
fn a_granted_name_over_plain_tcp_is_relayed_and_recorded() {
    let scenario = Scenario::new(
        &["api.example.com:7"],
        &[("api.example.com", &["16.0.0.1"])],
    );
    let Some(finished) = run(scenario, |_| {
        let mut stream = connect("198.18.0.1", ECHO).unwrap();
        assert_eq!(roundtrip(&mut stream, b"hello").unwrap(), b"hello");
        assert_eq!(roundtrip(&mut stream, b", world").unwrap(), b", world");
        finish(stream);
    }) else {
        return;
    };
    assert_eq!(
        finished.connections(),
        [relayed(name("api.example.com"), ECHO, "16.0.0.1:7", 12, 12)]
    );
    assert_eq!(
        finished.summary,
        Summary {
            connections: 1,
            refused: 0,
            bytes_up: 12,
            bytes_down: 12,
        }
    );
    assert_eq!(
        finished.events.last(),
        Some(&NetEvent::Summary(finished.summary))
    );
}

#[test]
fn a_bulk_transfer_is_relayed_whole_and_in_order_both_ways_and_counted() {
    // Far more than a splice pipe holds at first, so the relay's pipes
    // grow midway; written and read at once, as the echo needs.
    const BYTES: usize = 8 << 20;
    let sent: Vec<u8> = (0..BYTES).map(|i| (i % 251) as u8).collect();
    let scenario = Scenario::new(&["10.0.0.5:7"], &[]);
    let Some(finished) = run(scenario, move |_| {
        let mut stream = connect("10.0.0.5", ECHO).unwrap();
        let mut writer = stream.try_clone().unwrap();
        let expected = sent.clone();
        let writing = std::thread::spawn(move || writer.write_all(&sent).unwrap());
        assert!(read_exact(&mut stream, BYTES).unwrap() == expected);
        writing.join().unwrap();
        finish(stream);
    }) else {
        return;
    };
    let ten = Host::Ip("10.0.0.5".parse().unwrap());
    let bytes = BYTES as u64;
    assert_eq!(
        finished.connections(),
        [relayed(ten, ECHO, "10.0.0.5:7", bytes, bytes)]
    );
}

#[test]
fn a_granted_name_on_another_port_is_refused_by_the_kernel_or_reset_by_the_relay() {
    let scenario = Scenario::new(
        &["api.example.com:7", "mail.example.com:25"],
        &[
            ("api.example.com", &["16.0.0.1"]),
            ("mail.example.com", &["16.0.0.2"]),
        ],
    );
    let Some(finished) = run(scenario, |_| {
        // No listener on 8: the sandbox's own stack refuses.
        let error = connect("198.18.0.1", 8).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ConnectionRefused);
        // A listener on 25 (for mail), but api is not granted 25.
        assert_reset_at("198.18.0.1", BANNER);
        // A fake address no name stands for.
        assert_reset_at("198.18.0.9", ECHO);
    }) else {
        return;
    };
    assert_eq!(
        finished.connections(),
        [
            refused(name("api.example.com"), BANNER, reason::NOT_GRANTED),
            refused(
                Host::Ip(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 9))),
                ECHO,
                reason::NOT_GRANTED
            ),
        ]
    );
    assert_eq!(finished.summary.refused, 2);
}

#[test]
fn an_address_grant_is_dialed_exactly_and_other_addresses_are_unreachable() {
    let scenario = Scenario::new(&["10.0.0.5:7", "api.example.com:25"], &[]);
    let Some(finished) = run(scenario, |_| {
        let mut stream = connect("10.0.0.5", ECHO).unwrap();
        assert_eq!(roundtrip(&mut stream, b"ping").unwrap(), b"ping");
        finish(stream);
        // No route to an address that is not granted.
        for (ip, port) in [
            ("16.0.0.1", ECHO),
            ("10.0.0.6", ECHO),
            ("169.254.169.254", 80),
        ] {
            let error = connect(ip, port).unwrap_err();
            assert_eq!(error.raw_os_error(), Some(libc::ENETUNREACH), "{ip}:{port}");
        }
        // The granted address on a port that is another grant's.
        assert_reset_at("10.0.0.5", BANNER);
    }) else {
        return;
    };
    let ten = Host::Ip("10.0.0.5".parse().unwrap());
    let records = finished.connections();
    assert_eq!(records.len(), 2);
    assert!(records.contains(&relayed(ten.clone(), ECHO, "10.0.0.5:7", 4, 4)));
    assert!(records.contains(&refused(ten, BANNER, reason::NOT_GRANTED)));
}

#[test]
fn names_that_resolve_only_to_denied_addresses_are_refused_with_the_first_denial() {
    let cases: [(&str, &[&str], Option<DenyReason>); 7] = [
        (
            "loop.example.com",
            &["127.0.0.1"],
            Some(DenyReason::Loopback),
        ),
        (
            "meta.example.com",
            &["169.254.169.254"],
            Some(DenyReason::Metadata),
        ),
        (
            "private.example.com",
            &["10.0.0.5"],
            Some(DenyReason::Private),
        ),
        (
            "mapped.example.com",
            &["::ffff:127.0.0.1"],
            Some(DenyReason::Loopback),
        ),
        (
            "nat64.example.com",
            &["64:ff9b::a9fe:a9fe"],
            Some(DenyReason::Metadata),
        ),
        (
            "both.example.com",
            &["169.254.169.254", "127.0.0.1"],
            Some(DenyReason::Metadata),
        ),
        ("gone.example.com", &[], None),
    ];
    let grants: Vec<String> = cases.iter().map(|(n, _, _)| format!("{n}:7")).collect();
    let grants: Vec<&str> = grants.iter().map(String::as_str).collect();
    let names: Vec<(&str, &[&str])> = cases.iter().map(|(n, ips, _)| (*n, *ips)).collect();
    let count = cases.len();
    let Some(finished) = run(Scenario::new(&grants, &names), move |_| {
        for i in 0..count {
            assert_reset_at(&format!("198.18.0.{}", i + 1), ECHO);
        }
    }) else {
        return;
    };
    let records = finished.connections();
    for (name_text, _, denial) in cases {
        let record = records
            .iter()
            .find(|r| r.host == name(name_text))
            .unwrap_or_else(|| panic!("no record for {name_text}"));
        assert!(!record.allowed, "{name_text}");
        assert_eq!(record.dialed, None, "{name_text}");
        match denial {
            Some(deny) => {
                assert_eq!(record.reason, Some(reason::RESOLVED_TO_DENIED_ADDRESS));
                assert_eq!(
                    record.denial.map(|d: Denial| d.reason),
                    Some(deny),
                    "{name_text}"
                );
            }
            None => assert_eq!(record.reason, Some(reason::UNRESOLVED)),
        }
    }
}

#[test]
fn only_allowed_addresses_are_dialed_and_private_ones_when_the_operator_allows_them() {
    let mut scenario = Scenario::new(
        &["mixed.example.com:7", "private.example.com:7"],
        &[
            (
                "mixed.example.com",
                &["127.0.0.1", "169.254.169.254", "16.0.0.2"],
            ),
            ("private.example.com", &["10.0.0.5"]),
        ],
    );
    scenario.config.policy = AddressPolicy::new(vec!["10.0.0.0/8".parse().unwrap()], vec![]);
    let Some(finished) = run(scenario, |_| {
        for ip in ["198.18.0.1", "198.18.0.2"] {
            let mut stream = connect(ip, ECHO).unwrap();
            assert_eq!(roundtrip(&mut stream, b"x").unwrap(), b"x");
            finish(stream);
        }
    }) else {
        return;
    };
    let records = finished.connections();
    assert!(records.contains(&relayed(
        name("mixed.example.com"),
        ECHO,
        "16.0.0.2:7",
        1,
        1
    )));
    assert!(records.contains(&relayed(
        name("private.example.com"),
        ECHO,
        "10.0.0.5:7",
        1,
        1
    )));
}

#[test]
fn a_name_never_dials_the_hosts_own_address_and_a_grant_of_the_address_does() {
    let mut scenario = Scenario::new(
        &[
            "self.example.com:7",
            "mixed.example.com:7",
            &format!("{HOST_ADDRESS}:7"),
        ],
        &[
            ("self.example.com", &[HOST_ADDRESS]),
            ("mixed.example.com", &[HOST_ADDRESS, "16.0.0.2"]),
        ],
    );
    // Allowing every range does not make the host's address a name's.
    scenario.config.policy = AddressPolicy::new(
        vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()],
        vec![],
    );
    let Some(finished) = run(scenario, |_| {
        assert_reset_at("198.18.0.1", ECHO);
        let mut stream = connect("198.18.0.2", ECHO).unwrap();
        assert_eq!(roundtrip(&mut stream, b"x").unwrap(), b"x");
        finish(stream);
        // Nothing listens on the host: dialed, and the dial refused.
        assert_reset_at(HOST_ADDRESS, ECHO);
    }) else {
        return;
    };
    let records = finished.connections();
    let mut own = refused(
        name("self.example.com"),
        ECHO,
        reason::RESOLVED_TO_DENIED_ADDRESS,
    );
    own.denial = Some(Denial {
        reason: DenyReason::HostAddress,
        embedded: None,
    });
    assert!(records.contains(&own), "{records:?}");
    assert!(records.contains(&relayed(
        name("mixed.example.com"),
        ECHO,
        "16.0.0.2:7",
        1,
        1
    )));
    let literal = records
        .iter()
        .find(|r| r.host == Host::Ip(HOST_ADDRESS.parse().unwrap()))
        .expect("the literal grant's record");
    assert_eq!(literal.dialed, Some(addr(&format!("{HOST_ADDRESS}:7"))));
    assert_eq!(literal.reason, Some(reason::CONNECT_FAILED));
    assert_eq!(finished.upstream_accepted, 1);
}

/// A DNS query for `name` of type `qtype`, id 0x5eed, RD set.
pub(super) fn dns_query(name: &str, qtype: RecordType) -> Vec<u8> {
    let mut query = vec![0x5e, 0xed, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.push(0);
    query.extend_from_slice(&u16::from(qtype).to_be_bytes());
    query.extend_from_slice(&1u16.to_be_bytes());
    query
}

/// The response code and the A addresses of a reply.
pub(super) fn dns_answer(reply: &[u8]) -> (ResponseCode, Vec<Ipv4Addr>) {
    let message = Message::from_vec(reply).unwrap();
    let addresses = message
        .answers
        .iter()
        .filter_map(|record| match &record.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect();
    (message.metadata.response_code, addresses)
}

pub(super) fn ask_udp(name: &str, qtype: RecordType) -> (ResponseCode, Vec<Ipv4Addr>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    socket.connect("127.0.0.1:53").unwrap();
    socket.send(&dns_query(name, qtype)).unwrap();
    let mut reply = [0u8; 1500];
    let len = uninterrupted(|| socket.recv(&mut reply)).unwrap();
    dns_answer(&reply[..len])
}

fn ask_tcp(stream: &mut TcpStream, name: &str, qtype: RecordType) -> (ResponseCode, Vec<Ipv4Addr>) {
    let query = dns_query(name, qtype);
    let mut framed = (query.len() as u16).to_be_bytes().to_vec();
    framed.extend(query);
    stream.write_all(&framed).unwrap();
    let len = read_exact(stream, 2).unwrap();
    let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
    dns_answer(&read_exact(stream, len).unwrap())
}

#[test]
fn the_dns_stub_answers_from_the_grants_over_udp_and_tcp_and_reports_refused_names() {
    let scenario = Scenario::new(&["api.example.com:443", "files.example.org:443"], &[]);
    let Some(finished) = run(scenario, |_| {
        let fake = |last| vec![Ipv4Addr::new(198, 18, 0, last)];
        assert_eq!(
            ask_udp("api.example.com", RecordType::A),
            (ResponseCode::NoError, fake(1))
        );
        assert_eq!(
            ask_udp("FILES.example.org", RecordType::A),
            (ResponseCode::NoError, fake(2))
        );
        assert_eq!(
            ask_udp("api.example.com", RecordType::AAAA),
            (ResponseCode::NoError, vec![])
        );
        assert_eq!(
            ask_udp("evil.example.net", RecordType::A),
            (ResponseCode::NXDomain, vec![])
        );
        let mut stream = connect("127.0.0.1", 53).unwrap();
        assert_eq!(
            ask_tcp(&mut stream, "files.example.org", RecordType::A),
            (ResponseCode::NoError, fake(2))
        );
        assert_eq!(
            ask_tcp(&mut stream, "files.example.org", RecordType::HTTPS),
            (ResponseCode::NoError, vec![])
        );
        // Asked again, over TCP: reported once.
        assert_eq!(
            ask_tcp(&mut stream, "evil.example.net", RecordType::A),
            (ResponseCode::NXDomain, vec![])
        );
        assert_eq!(
            ask_tcp(&mut stream, "other.example.net", RecordType::AAAA),
            (ResponseCode::NXDomain, vec![])
        );
    }) else {
        return;
    };
    let refused: Vec<&NetEvent> = finished
        .events
        .iter()
        .filter(|e| {
            matches!(
                e,
                NetEvent::DnsRefused { .. } | NetEvent::DnsRefusedMore { .. }
            )
        })
        .collect();
    assert_eq!(
        refused,
        [
            &NetEvent::DnsRefused {
                name: "evil.example.net".into(),
                record_type: RecordType::A
            },
            &NetEvent::DnsRefused {
                name: "other.example.net".into(),
                record_type: RecordType::AAAA
            },
        ]
    );
    assert_eq!(finished.summary.connections, 0);
}

#[test]
fn a_client_hello_must_name_the_granted_name() {
    let scenario = Scenario::new(
        &["api.example.com:443", "other.example.com:443"],
        &[
            ("api.example.com", &["16.0.0.1"]),
            ("other.example.com", &["16.0.0.1"]),
        ],
    );
    let Some(finished) = run(scenario, |_| {
        let mut stream = connect("198.18.0.1", TLS).unwrap();
        assert_eq!(
            roundtrip(&mut stream, HELLO_API_EXAMPLE_COM).unwrap(),
            HELLO_API_EXAMPLE_COM
        );
        finish(stream);
        // The same hello to the address of other.example.com.
        let mut stream = connect("198.18.0.2", TLS).unwrap();
        stream.write_all(HELLO_API_EXAMPLE_COM).unwrap();
        assert_reset(&mut stream);
    }) else {
        return;
    };
    let len = HELLO_API_EXAMPLE_COM.len() as u64;
    let records = finished.connections();
    let mut passed = relayed(name("api.example.com"), TLS, "16.0.0.1:443", len, len);
    passed.sni = Some("api.example.com".into());
    assert!(records.contains(&passed), "{records:#?}");
    let mut mismatch = relayed(name("other.example.com"), TLS, "16.0.0.1:443", 0, 0);
    mismatch.refuse(reason::SNI_MISMATCH);
    mismatch.sni = Some("api.example.com".into());
    assert!(records.contains(&mismatch), "{records:#?}");
}

/// A ClientHello for `sni` in one handshake record whose version bytes
/// are `version`: a minimal TLS 1.2 hello, its only extension server_name.
fn hello_record(version: [u8; 2], sni: &str) -> Vec<u8> {
    let name = sni.as_bytes();
    let mut sni_ext = vec![0, 0];
    sni_ext.extend((name.len() as u16 + 5).to_be_bytes());
    sni_ext.extend((name.len() as u16 + 3).to_be_bytes());
    sni_ext.push(0);
    sni_ext.extend((name.len() as u16).to_be_bytes());
    sni_ext.extend(name);
    let mut body = vec![3, 3];
    body.extend([0u8; 32]);
    body.extend([0, 0, 2, 0, 0x2f, 1, 0]);
    body.extend((sni_ext.len() as u16).to_be_bytes());
    body.extend(sni_ext);
    let mut handshake = vec![1, 0];
    handshake.extend((body.len() as u16).to_be_bytes());
    handshake.extend(body);
    let mut record = vec![0x16, version[0], version[1]];
    record.extend((handshake.len() as u16).to_be_bytes());
    record.extend(handshake);
    record
}

/// Domain fronting by SNI past a granted name with TLS records a server
/// accepts and a check reading only `16 03` would not: a handshake record
/// with version bytes `00 01` (Go's server takes any first-record version
/// below 16.0), and a warning alert of version `00 01` before an ordinary
/// hello (Go skips it). Each is reset, recorded as a malformed hello, and
/// the server behind the granted name never reads a byte of it.
#[test]
fn a_hello_behind_record_bytes_a_server_accepts_is_checked_or_refused() {
    let scenario = Scenario::new(
        &["api.example.com:443"],
        &[("api.example.com", &["16.0.0.1"])],
    );
    let odd_version = hello_record([0, 1], "evil.example.org");
    let mut alert_first = vec![0x15, 0, 1, 0, 2, 1, 90];
    alert_first.extend(hello_record([3, 1], "evil.example.org"));
    let plain = hello_record([3, 1], "evil.example.org");
    let flights = [odd_version, alert_first, plain];
    let Some(finished) = run(scenario, move |_| {
        for flight in &flights {
            let mut stream = connect("198.18.0.1", TLS).unwrap();
            stream.write_all(flight).unwrap();
            assert_reset(&mut stream);
        }
    }) else {
        return;
    };
    assert_eq!(finished.upstream_received, 0);
    let refused = |why, sni: Option<&str>, error: Option<&str>| {
        let mut record = relayed(name("api.example.com"), TLS, "16.0.0.1:443", 0, 0);
        record.refuse(why);
        record.sni = sni.map(str::to_string);
        record.error = error.map(str::to_string);
        record
    };
    let records = finished.connections();
    assert_eq!(records.len(), 3, "{records:#?}");
    for expected in [
        refused(
            reason::MALFORMED_CLIENT_HELLO,
            None,
            Some("record version 0.1"),
        ),
        refused(
            reason::MALFORMED_CLIENT_HELLO,
            None,
            Some("TLS record type 21 before the ClientHello"),
        ),
        refused(reason::SNI_MISMATCH, Some("evil.example.org"), None),
    ] {
        assert!(records.contains(&expected), "{expected:#?} in {records:#?}");
    }
}

#[test]
fn a_client_hello_that_does_not_complete_in_time_is_refused() {
    let mut scenario = Scenario::new(
        &["api.example.com:443"],
        &[("api.example.com", &["16.0.0.1"])],
    );
    scenario.config.first_flight_timeout = Duration::from_millis(300);
    let Some(finished) = run(scenario, |_| {
        let mut stream = connect("198.18.0.1", TLS).unwrap();
        stream.write_all(&HELLO_API_EXAMPLE_COM[..40]).unwrap();
        assert_reset(&mut stream);
    }) else {
        return;
    };
    let records = finished.connections();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].reason, Some(reason::FIRST_FLIGHT_TIMEOUT));
    assert_eq!(records[0].bytes_up, 0);
}

#[test]
fn a_server_that_speaks_first_is_heard_before_the_client_speaks() {
    let scenario = Scenario::new(
        &["mail.example.com:25"],
        &[("mail.example.com", &["16.0.0.2"])],
    );
    let Some(finished) = run(scenario, |_| {
        let mut stream = connect("198.18.0.1", BANNER).unwrap();
        assert_eq!(
            read_exact(&mut stream, BANNER_TEXT.len()).unwrap(),
            BANNER_TEXT
        );
        assert_eq!(
            roundtrip(&mut stream, b"EHLO sandbox\r\n").unwrap(),
            b"EHLO sandbox\r\n"
        );
        finish(stream);
    }) else {
        return;
    };
    assert_eq!(
        finished.connections(),
        [relayed(
            name("mail.example.com"),
            BANNER,
            "16.0.0.2:25",
            14,
            BANNER_TEXT.len() as u64 + 14
        )]
    );
}

#[test]
fn a_connection_idle_for_the_idle_timeout_is_closed() {
    let mut scenario = Scenario::new(
        &["api.example.com:7"],
        &[("api.example.com", &["16.0.0.1"])],
    );
    scenario.config.idle_timeout = Duration::from_millis(300);
    let Some(finished) = run(scenario, |client| {
        let mut stream = connect("198.18.0.1", ECHO).unwrap();
        assert_eq!(roundtrip(&mut stream, b"once").unwrap(), b"once");
        let quiet = Instant::now();
        assert_eq!(read_end(&mut stream), Ok(0));
        let waited = quiet.elapsed();
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        assert!(client.upstream_saw_eof());
    }) else {
        return;
    };
    let mut idle = relayed(name("api.example.com"), ECHO, "16.0.0.1:7", 4, 4);
    idle.reason = Some(reason::IDLE_TIMEOUT);
    assert_eq!(finished.connections(), [idle]);
}

#[test]
fn connections_past_the_maximum_are_reset() {
    let mut scenario = Scenario::new(
        &["api.example.com:7"],
        &[("api.example.com", &["16.0.0.1"])],
    );
    scenario.config.max_connections = 2;
    let Some(finished) = run(scenario, |_| {
        let mut open = Vec::new();
        for _ in 0..2 {
            let mut stream = connect("198.18.0.1", ECHO).unwrap();
            assert_eq!(roundtrip(&mut stream, b"in").unwrap(), b"in");
            open.push(stream);
        }
        assert_reset_at("198.18.0.1", ECHO);
        // A slot frees when a connection ends.
        // The relay frees the slot in the same step as it closes the
        // client's side, before the client can connect again.
        finish(open.remove(0));
        let mut again = connect("198.18.0.1", ECHO).unwrap();
        assert_eq!(roundtrip(&mut again, b"ok").unwrap(), b"ok");
    }) else {
        return;
    };
    let records = finished.connections();
    let too_many: Vec<_> = records.iter().filter(|r| !r.allowed).collect();
    let mut expected = refused(name("api.example.com"), ECHO, reason::TOO_MANY_CONNECTIONS);
    expected.error = Some(
        "at this spawn's limit of 2 relayed connections ([network] max_connections_per_spawn)"
            .into(),
    );
    assert_eq!(too_many, [&expected]);
    assert_eq!(finished.summary.connections, 4);
}

/// Expects `ip:port` to refuse connections: no listener left. Another
/// test of this process that starts a program (`ip`) at the moment the
/// listener closes holds a copy of its descriptor until that program's
/// `exec`, so a connection may still be taken for a moment.
fn assert_closed_soon(ip: &str, port: u16) {
    for _ in 0..100 {
        match connect(ip, port) {
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => return,
            Err(e) => panic!("{ip}:{port}: {e}"),
            Ok(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    panic!("{ip}:{port} still has a listener 2 s after the relay stopped");
}

#[test]
fn stopping_closes_every_connection_and_listener() {
    let scenario = Scenario::new(
        &["api.example.com:7"],
        &[("api.example.com", &["16.0.0.1"])],
    );
    let Some(finished) = run(scenario, |client| {
        let mut stream = connect("198.18.0.1", ECHO).unwrap();
        assert_eq!(roundtrip(&mut stream, b"before").unwrap(), b"before");
        client.stop_relay();
        assert!(client.upstream_saw_eof());
        assert_eq!(read_end(&mut stream), Ok(0));
        assert_closed_soon("198.18.0.1", ECHO);
        assert_closed_soon("127.0.0.1", 53);
    }) else {
        return;
    };
    let mut stopped = relayed(name("api.example.com"), ECHO, "16.0.0.1:7", 6, 6);
    stopped.reason = Some(reason::STOPPED);
    assert_eq!(finished.connections(), [stopped]);
}

#[test]
fn a_client_hello_without_a_server_name_to_a_granted_name_is_refused() {
    let scenario = Scenario::new(
        &["api.example.com:443"],
        &[("api.example.com", &["16.0.0.1"])],
    );
    let Some(finished) = run(scenario, |_| {
        // A minimal TLS 1.2 ClientHello: no extensions, so no server name.
        let mut body = vec![3, 3];
        body.extend([0u8; 32]);
        body.extend([0, 0, 2, 0, 0x2f, 1, 0]);
        let mut handshake = vec![1, 0, 0, body.len() as u8];
        handshake.extend(body);
        let mut record = vec![0x16, 3, 1, 0, handshake.len() as u8];
        record.extend(handshake);
        let mut stream = connect("198.18.0.1", TLS).unwrap();
        stream.write_all(&record).unwrap();
        assert_reset(&mut stream);
    }) else {
        return;
    };
    let records = finished.connections();
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0].reason, Some(reason::SNI_MISSING), "{records:#?}");
    assert_eq!(records[0].bytes_up, 0);
}
