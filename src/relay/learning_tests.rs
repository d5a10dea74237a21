//! A learning relay (`spawnd learn`) in the world of `world_tests`: its
//! sandbox set up by init's own code (the fake pool routed, one loopback
//! listener, the nf_tables redirect of every pool port to it), any name
//! answered, any port of a learned name taken, each connection recorded
//! and then refused or relayed, and the contacted pairs reported. A
//! forwarded connection is held to every check a granted one is.

use std::io::{ErrorKind, Read, Write};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use crate::egress::address_policy::DenyReason;
use crate::egress::grant::{Grant, Host};
use crate::egress::learning::Learning;

use super::tests::{
    ask_udp, assert_reset, assert_reset_at, finish, name, refused, relayed, HELLO_API_EXAMPLE_COM,
};
use super::world_tests::uninterrupted;
use super::world_tests::{
    connect, read_exact, roundtrip, run, Finished, Scenario, BANNER, BANNER_TEXT, ECHO, TLS,
};
use super::{reason, NetEvent};

/// The pairs a learning relay reported as contacted, as text, and how
/// many it left unlisted.
fn contacted(finished: &Finished) -> (Vec<String>, u64) {
    let found: Vec<(Vec<String>, u64)> = finished
        .events
        .iter()
        .filter_map(|event| match event {
            NetEvent::Contacted { pairs, unlisted } => {
                Some((pairs.iter().map(Grant::to_string).collect(), *unlisted))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one Contacted event: {:#?}",
        finished.events
    );
    // Reported before the summary, which is last.
    let at = finished
        .events
        .iter()
        .position(|e| matches!(e, NetEvent::Contacted { .. }));
    assert_eq!(at, Some(finished.events.len() - 2));
    found.into_iter().next().unwrap_or_default()
}

#[test]
fn a_learning_stub_gives_any_grantable_name_a_pool_address_in_the_order_asked() {
    let scenario = Scenario::learning(Learning::Record, &[]);
    let Some(finished) = run(scenario, |_| {
        let first = [std::net::Ipv4Addr::new(198, 18, 0, 1)];
        let second = [std::net::Ipv4Addr::new(198, 18, 0, 2)];
        assert_eq!(
            ask_udp("registry.npmjs.org", RecordType::A),
            (ResponseCode::NoError, first.to_vec())
        );
        assert_eq!(
            ask_udp("anything.example.net", RecordType::A),
            (ResponseCode::NoError, second.to_vec())
        );
        assert_eq!(
            ask_udp("registry.npmjs.org", RecordType::A),
            (ResponseCode::NoError, first.to_vec())
        );
        // No IPv6 address, as for a granted name.
        assert_eq!(
            ask_udp("registry.npmjs.org", RecordType::AAAA),
            (ResponseCode::NoError, Vec::new())
        );
        // Nothing a manifest could not grant: one label, an address.
        for refused in ["localhost", "192.0.2.1"] {
            assert_eq!(
                ask_udp(refused, RecordType::A),
                (ResponseCode::NXDomain, Vec::new()),
                "{refused}"
            );
        }
    }) else {
        return;
    };
    let refused: Vec<&str> = finished
        .events
        .iter()
        .filter_map(|e| match e {
            NetEvent::DnsRefused { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(refused, ["localhost", "192.0.2.1"]);
    // Nothing was resolved for real: the stub answers from memory.
    assert_eq!(finished.resolved, 0);
    assert_eq!(contacted(&finished), (Vec::new(), 0));
}

#[test]
fn forward_relays_any_port_of_a_learned_name_and_reports_each_pair_once() {
    let scenario = Scenario::learning(
        Learning::Forward,
        &[
            ("api.example.com", &["16.0.0.1"]),
            ("mail.example.com", &["16.0.0.2"]),
        ],
    );
    let Some(finished) = run(scenario, |_| {
        assert_eq!(
            ask_udp("mail.example.com", RecordType::A).0,
            ResponseCode::NoError
        );
        assert_eq!(
            ask_udp("api.example.com", RecordType::A).0,
            ResponseCode::NoError
        );
        // mail is 198.18.0.1 (asked first), api 198.18.0.2.
        for _ in 0..2 {
            let mut stream = connect("198.18.0.2", ECHO).unwrap();
            assert_eq!(roundtrip(&mut stream, b"hello").unwrap(), b"hello");
            finish(stream);
        }
        let mut stream = connect("198.18.0.1", BANNER).unwrap();
        assert_eq!(
            read_exact(&mut stream, BANNER_TEXT.len()).unwrap(),
            BANNER_TEXT
        );
        finish(stream);
        // A pool address no name was given, and an address itself: the
        // sandbox's rules refuse it at once, and log it.
        assert_reset_at("198.18.0.9", ECHO);
        let error = connect("16.0.0.1", ECHO).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ECONNREFUSED));
    }) else {
        return;
    };
    let records = finished.connections();
    let api = relayed(name("api.example.com"), ECHO, "16.0.0.1:7", 5, 5);
    let mut mail = relayed(name("mail.example.com"), BANNER, "16.0.0.2:25", 0, 0);
    mail.bytes_down = BANNER_TEXT.len() as u64;
    let nameless = refused(
        Host::Ip("198.18.0.9".parse().unwrap()),
        ECHO,
        reason::NOT_GRANTED,
    );
    let mut literal = refused(
        Host::Ip("16.0.0.1".parse().unwrap()),
        ECHO,
        reason::NOT_GRANTED,
    );
    literal.error =
        Some("refused in the sandbox before it left: nothing spawnd serves there".into());
    assert_eq!(records, [api.clone(), api, mail, nameless, literal]);
    assert_eq!(finished.upstream_accepted, 3);
    assert_eq!(
        contacted(&finished),
        (
            vec![
                "api.example.com:7".to_string(),
                "mail.example.com:25".into()
            ],
            0
        )
    );
}

#[test]
fn record_refuses_every_connection_without_resolving_or_dialing_and_reports_the_pairs() {
    let scenario = Scenario::learning(Learning::Record, &[("api.example.com", &["16.0.0.1"])]);
    let Some(finished) = run(scenario, |_| {
        assert_eq!(
            ask_udp("api.example.com", RecordType::A).0,
            ResponseCode::NoError
        );
        for port in [TLS, ECHO, TLS, 8443] {
            match connect("198.18.0.1", port) {
                Ok(mut stream) => {
                    // Whatever the program sends goes nowhere.
                    let _ = stream.write_all(b"GET / HTTP/1.1\r\n\r\n");
                    let mut buffer = [0u8; 16];
                    let read = uninterrupted(|| stream.read(&mut buffer)).map_err(|e| e.kind());
                    assert!(
                        matches!(read, Err(ErrorKind::ConnectionReset) | Ok(0)),
                        "{read:?}"
                    );
                }
                Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset),
            }
        }
    }) else {
        return;
    };
    assert_eq!(finished.upstream_accepted, 0);
    assert_eq!(finished.resolved, 0);
    // The first refusal of each destination is a record; repeats are
    // counted.
    assert_eq!(
        finished.connections(),
        [
            refused(name("api.example.com"), TLS, reason::RECORD_ONLY),
            refused(name("api.example.com"), ECHO, reason::RECORD_ONLY),
            refused(name("api.example.com"), 8443, reason::RECORD_ONLY),
        ]
    );
    assert_eq!(finished.summary.connections, 4);
    assert_eq!(finished.summary.refused, 4);
    assert_eq!(
        contacted(&finished),
        (
            vec![
                "api.example.com:7".to_string(),
                "api.example.com:443".into(),
                "api.example.com:8443".into()
            ],
            0
        )
    );
}

#[test]
fn forward_refuses_a_learned_name_that_resolves_to_loopback_or_metadata() {
    let scenario = Scenario::learning(
        Learning::Forward,
        &[
            ("loop.example.com", &["127.0.0.1"]),
            ("meta.example.com", &["169.254.169.254"]),
        ],
    );
    let Some(finished) = run(scenario, |_| {
        for asked in ["loop.example.com", "meta.example.com"] {
            assert_eq!(ask_udp(asked, RecordType::A).0, ResponseCode::NoError);
        }
        assert_reset_at("198.18.0.1", ECHO);
        assert_reset_at("198.18.0.2", ECHO);
    }) else {
        return;
    };
    assert_eq!(finished.upstream_accepted, 0);
    let records = finished.connections();
    let denied: Vec<(Host, Option<&str>, Option<DenyReason>, bool)> = records
        .iter()
        .map(|r| {
            (
                r.host.clone(),
                r.reason,
                r.denial.map(|d| d.reason),
                r.dialed.is_some(),
            )
        })
        .collect();
    assert_eq!(
        denied,
        [
            (
                name("loop.example.com"),
                Some(reason::RESOLVED_TO_DENIED_ADDRESS),
                Some(DenyReason::Loopback),
                false
            ),
            (
                name("meta.example.com"),
                Some(reason::RESOLVED_TO_DENIED_ADDRESS),
                Some(DenyReason::Metadata),
                false
            ),
        ]
    );
    // Tried, so contacted: the records say how it went.
    assert_eq!(
        contacted(&finished).0,
        ["loop.example.com:7", "meta.example.com:7"]
    );
}

#[test]
fn forward_requires_a_client_hello_to_name_the_learned_name() {
    let scenario = Scenario::learning(
        Learning::Forward,
        &[
            ("api.example.com", &["16.0.0.1"]),
            ("other.example.com", &["16.0.0.1"]),
        ],
    );
    let Some(finished) = run(scenario, |_| {
        assert_eq!(
            ask_udp("api.example.com", RecordType::A).0,
            ResponseCode::NoError
        );
        assert_eq!(
            ask_udp("other.example.com", RecordType::A).0,
            ResponseCode::NoError
        );
        let mut stream = connect("198.18.0.1", TLS).unwrap();
        assert_eq!(
            roundtrip(&mut stream, HELLO_API_EXAMPLE_COM).unwrap(),
            HELLO_API_EXAMPLE_COM
        );
        finish(stream);
        // The hello for api, sent to other's address.
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
    let mut mismatch = relayed(name("other.example.com"), TLS, "16.0.0.1:443", 0, 0);
    mismatch.refuse(reason::SNI_MISMATCH);
    mismatch.sni = Some("api.example.com".into());
    assert_eq!(records, [passed, mismatch]);
}

#[test]
fn a_grants_relay_is_unchanged_beside_learning_ones_and_reports_no_contacted_pairs() {
    let scenario = Scenario::new(
        &["api.example.com:7"],
        &[("api.example.com", &["16.0.0.1"])],
    );
    let Some(finished) = run(scenario, |_| {
        assert_eq!(
            ask_udp("other.example.com", RecordType::A),
            (ResponseCode::NXDomain, Vec::new())
        );
        let mut stream = connect("198.18.0.1", ECHO).unwrap();
        assert_eq!(roundtrip(&mut stream, b"x").unwrap(), b"x");
        finish(stream);
        // Nothing takes another port of a granted name.
        let error = connect("198.18.0.1", 8443).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ConnectionRefused);
    }) else {
        return;
    };
    assert!(!finished
        .events
        .iter()
        .any(|e| matches!(e, NetEvent::Contacted { .. })));
    assert_eq!(
        finished.connections(),
        [relayed(name("api.example.com"), ECHO, "16.0.0.1:7", 1, 1)]
    );
}
