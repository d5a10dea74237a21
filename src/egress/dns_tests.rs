//! The DNS stub against queries built byte by byte (so hostile messages
//! are exactly what they claim to be), replies decoded with hickory.

use std::net::Ipv4Addr;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use proptest::prelude::*;

use super::dns::*;
use super::fake_pool::GrantedNames;
use super::grant::Grant;
use super::learning::LearnedNames;

const ID: u16 = 0xbeef;
/// RD set, everything else clear: an ordinary stub resolver's query.
const RD: u16 = 0x0100;
const A: u16 = 1;
const AAAA: u16 = 28;
const IN: u16 = 1;

fn header(id: u16, flags: u16, counts: [u16; 4]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    for c in counts {
        out.extend_from_slice(&c.to_be_bytes());
    }
    out
}

/// A name in wire form from dotted text (no escapes, no compression).
fn wire_name(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in name.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out
}

fn question(name: &[u8], qtype: u16, qclass: u16) -> Vec<u8> {
    let mut out = name.to_vec();
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&qclass.to_be_bytes());
    out
}

/// An OPT record: root name, type 41, `payload` as class, version in TTL.
fn opt(payload: u16, version: u8) -> Vec<u8> {
    let mut out = vec![0, 0, 41];
    out.extend_from_slice(&payload.to_be_bytes());
    out.extend_from_slice(&[0, version, 0, 0, 0, 0]);
    out
}

/// An ordinary query for `name` of type `qtype`.
fn query(name: &str, qtype: u16) -> Vec<u8> {
    let mut out = header(ID, RD, [1, 0, 0, 0]);
    out.extend(question(&wire_name(name), qtype, IN));
    out
}

/// The same with an OPT record offering `payload` bytes.
fn query_edns(name: &str, qtype: u16, payload: u16) -> Vec<u8> {
    let mut out = header(ID, RD, [1, 0, 0, 1]);
    out.extend(question(&wire_name(name), qtype, IN));
    out.extend(opt(payload, 0));
    out
}

fn names(grants: &[&str]) -> GrantedNames {
    let grants: Vec<Grant> = grants.iter().map(|g| g.parse().unwrap()).collect();
    GrantedNames::new(&grants).unwrap()
}

fn granted() -> GrantedNames {
    names(&[
        "api.example.com:443",
        "api.example.com:80",
        "192.0.2.1:22",
        "files.example.org:443",
    ])
}

fn decode(reply: &[u8]) -> Message {
    Message::from_vec(reply).unwrap_or_else(|e| panic!("reply does not decode: {e}"))
}

fn answered(message: &[u8]) -> (Message, Outcome) {
    let response = respond(message, &granted(), Transport::Udp);
    let reply = response.reply.expect("a reply");
    (decode(&reply), response.outcome)
}

fn refused(message: &[u8]) -> (Option<Message>, QueryProblem) {
    let response = respond(message, &granted(), Transport::Udp);
    match response.outcome {
        Outcome::Refused(problem) => (response.reply.as_deref().map(decode), problem),
        other => panic!("{message:?} was answered: {other:?}"),
    }
}

#[test]
fn an_a_query_for_a_granted_name_gets_its_fake_address() {
    let (reply, outcome) = answered(&query("api.example.com", A));
    assert_eq!(reply.metadata.id, ID);
    assert_eq!(reply.metadata.message_type, MessageType::Response);
    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
    assert!(reply.metadata.recursion_desired && reply.metadata.recursion_available);
    assert_eq!(reply.answers.len(), 1);
    assert_eq!(
        reply.answers[0].data,
        RData::A(Ipv4Addr::new(198, 18, 0, 1).into())
    );
    assert_eq!(reply.answers[0].ttl, FAKE_TTL);
    assert_eq!(
        outcome,
        Outcome::Answered {
            name: "api.example.com".into(),
            record_type: RecordType::A,
            answer: Answer::Address(Ipv4Addr::new(198, 18, 0, 1)),
        }
    );
    // Names are indexed once each, in grant order; IP grants have none.
    let (reply, _) = answered(&query("files.example.org", A));
    assert_eq!(
        reply.answers[0].data,
        RData::A(Ipv4Addr::new(198, 18, 0, 2).into())
    );
}

#[test]
fn the_question_is_echoed_in_the_case_it_was_asked() {
    let (reply, outcome) = answered(&query("aPi.ExAmPlE.cOm", A));
    assert_eq!(reply.queries[0].name().to_ascii(), "aPi.ExAmPlE.cOm.");
    assert_eq!(reply.answers[0].name.to_ascii(), "aPi.ExAmPlE.cOm.");
    assert!(matches!(outcome, Outcome::Answered { name, .. } if name == "api.example.com"));
}

#[test]
fn other_types_for_a_granted_name_get_no_data() {
    for qtype in [
        AAAA, 64,  /* SVCB */
        65,  /* HTTPS */
        16,  /* TXT */
        255, /* ANY */
        5,   /* CNAME */
    ] {
        let (reply, outcome) = answered(&query("api.example.com", qtype));
        assert_eq!(
            reply.metadata.response_code,
            ResponseCode::NoError,
            "{qtype}"
        );
        assert!(
            reply.answers.is_empty() && reply.authorities.is_empty(),
            "{qtype}"
        );
        assert!(
            matches!(
                outcome,
                Outcome::Answered {
                    answer: Answer::NoData,
                    ..
                }
            ),
            "{qtype}"
        );
    }
}

#[test]
fn names_not_granted_get_nxdomain_and_are_reported() {
    for name in [
        "evil.example.com",
        "x.api.example.com",
        "example.com",
        "localhost",
        "com",
    ] {
        for qtype in [A, AAAA] {
            let (reply, outcome) = answered(&query(name, qtype));
            assert_eq!(
                reply.metadata.response_code,
                ResponseCode::NXDomain,
                "{name}"
            );
            assert!(reply.answers.is_empty());
            assert_eq!(
                outcome,
                Outcome::Answered {
                    name: name.to_string(),
                    record_type: RecordType::from(qtype),
                    answer: Answer::NxDomain,
                }
            );
        }
    }
}

#[test]
fn a_learning_stub_gives_every_grantable_name_an_address_in_the_order_asked() {
    let mut learned = LearnedNames::default();
    let mut ask = |name: &str, qtype: u16| {
        let response = respond_learning(&query(name, qtype), &mut learned, Transport::Udp);
        (decode(&response.reply.unwrap()), response.outcome)
    };
    let (reply, outcome) = ask("Files.Example.org", A);
    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
    assert_eq!(
        reply.answers[0].data,
        RData::A(Ipv4Addr::new(198, 18, 0, 1).into())
    );
    assert_eq!(reply.answers[0].name.to_ascii(), "Files.Example.org.");
    assert!(matches!(outcome, Outcome::Answered { name, .. } if name == "files.example.org"));
    let (reply, _) = ask("api.example.com", A);
    assert_eq!(
        reply.answers[0].data,
        RData::A(Ipv4Addr::new(198, 18, 0, 2).into())
    );
    let (reply, _) = ask("files.example.org", A);
    assert_eq!(
        reply.answers[0].data,
        RData::A(Ipv4Addr::new(198, 18, 0, 1).into())
    );
    // Other types, asked first or after, get no data, as a granted name's.
    for name in ["api.example.com", "new.example.net"] {
        let (reply, outcome) = ask(name, AAAA);
        assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
        assert!(reply.answers.is_empty());
        assert!(matches!(
            outcome,
            Outcome::Answered {
                answer: Answer::NoData,
                ..
            }
        ));
    }
    // Names no manifest could grant get NXDOMAIN and no address.
    for name in ["localhost", "wpad", "192.0.2.1", "example.123"] {
        for qtype in [A, AAAA] {
            let (reply, outcome) = ask(name, qtype);
            assert_eq!(
                reply.metadata.response_code,
                ResponseCode::NXDomain,
                "{name}"
            );
            assert!(matches!(
                outcome,
                Outcome::Answered {
                    answer: Answer::NxDomain,
                    ..
                }
            ));
        }
    }
    assert_eq!(learned.len(), 2);
}

#[test]
fn a_learning_stub_parses_as_strictly_as_the_grants_stub() {
    let mut learned = LearnedNames::default();
    let mut two = query("api.example.com", A);
    two[5] = 2;
    let mut not_ldh = header(ID, RD, [1, 0, 0, 0]);
    not_ldh.extend(question(b"\x05a_b_c\x07example\x00", A, IN));
    for message in [two, not_ldh] {
        let learning = respond_learning(&message, &mut learned, Transport::Udp);
        let granted = respond(&message, &GrantedNames::default(), Transport::Udp);
        assert!(matches!(learning.outcome, Outcome::Refused(_)));
        assert_eq!(learning, granted);
    }
    assert!(learned.is_empty());
}

#[test]
fn edns_is_answered_with_edns_and_the_stub_s_own_size() {
    let (reply, _) = answered(&query_edns("api.example.com", A, 4096));
    let edns = reply.edns.expect("an OPT record");
    assert_eq!(edns.max_payload(), UDP_REPLY_MAX);
    assert_eq!(edns.version(), 0);
    assert!(!edns.flags().dnssec_ok);
    let (reply, _) = answered(&query("api.example.com", A));
    assert!(reply.edns.is_none());
}

#[test]
fn replies_fit_in_512_bytes_even_for_the_longest_name() {
    let l = "a".repeat(63);
    let long = format!("{l}.{l}.{l}.{}", "b".repeat(61));
    let grants = names(&[&format!("{long}:443")]);
    for message in [query(&long, A), query_edns(&long, A, 512)] {
        let query = parse_query(&message).unwrap();
        assert_eq!(query.name(), long);
        let reply = query.reply(query.answer_from(&grants), Transport::Udp);
        assert!(reply.len() <= 512, "{}", reply.len());
        assert_eq!(decode(&reply).answers.len(), 1);
        assert!(!decode(&reply).metadata.truncation);
    }
}

#[test]
fn messages_without_an_id_to_answer_or_that_are_responses_get_no_reply() {
    assert_eq!(refused(&[]), (None, QueryProblem::TooShort(0)));
    assert_eq!(refused(&[0; 11]), (None, QueryProblem::TooShort(11)));
    let mut response = query("api.example.com", A);
    response[2] |= 0x80;
    assert_eq!(refused(&response), (None, QueryProblem::NotAQuery));
}

/// Each malformed or unsupported query: the problem and the RCODE of the
/// reply, which always carries the query's id.
#[test]
fn malformed_and_unsupported_queries_get_error_replies() {
    let q = |name: &str| question(&wire_name(name), A, IN);
    let with = |flags: u16, counts: [u16; 4], body: &[u8]| {
        let mut m = header(ID, flags, counts);
        m.extend_from_slice(body);
        m
    };
    let name = "api.example.com";
    let mut two_opts = q(name);
    two_opts.extend(opt(1232, 0));
    two_opts.extend(opt(1232, 0));
    let mut not_opt = q(name);
    not_opt.extend(question(&wire_name("x.example"), A, IN));
    not_opt.extend_from_slice(&[0, 0, 0, 0, 0, 4, 192, 0, 2, 1]);
    let mut trailing = q(name);
    trailing.push(0);
    let mut loop_name = vec![0xc0, 12]; // points at itself
    loop_name.extend_from_slice(&[0, 1, 0, 1]);
    let mut bad_label_type = vec![0x41];
    bad_label_type.extend_from_slice(&[b'a'; 0x41]);
    bad_label_type.extend_from_slice(&[0, 0, 1, 0, 1]);
    let mut huge = with(RD, [1, 0, 0, 0], &q(name));
    huge.resize(600, 0);
    let cases: Vec<(Vec<u8>, QueryProblem, ResponseCode)> = vec![
        (
            with(RD | (4 << 11), [1, 0, 0, 0], &q(name)),
            QueryProblem::NotQueryOpcode(4),
            ResponseCode::NotImp,
        ),
        (
            with(RD | (5 << 11), [1, 0, 0, 0], &q(name)),
            QueryProblem::NotQueryOpcode(5),
            ResponseCode::NotImp,
        ),
        (
            with(RD | (1 << 11), [1, 0, 0, 0], &q(name)),
            QueryProblem::NotQueryOpcode(1),
            ResponseCode::NotImp,
        ),
        (
            with(RD | 0x0200, [1, 0, 0, 0], &q(name)),
            QueryProblem::Truncated,
            ResponseCode::FormErr,
        ),
        (
            with(RD, [0, 0, 0, 0], &[]),
            QueryProblem::QuestionCount(0),
            ResponseCode::FormErr,
        ),
        (
            with(RD, [2, 0, 0, 0], &[q(name), q(name)].concat()),
            QueryProblem::QuestionCount(2),
            ResponseCode::FormErr,
        ),
        (
            with(RD, [1, 1, 0, 0], &q(name)),
            QueryProblem::UnexpectedRecords,
            ResponseCode::FormErr,
        ),
        (
            with(RD, [1, 0, 1, 0], &q(name)),
            QueryProblem::UnexpectedRecords,
            ResponseCode::FormErr,
        ),
        (
            with(RD, [1, 0, 0, 2], &two_opts),
            QueryProblem::UnexpectedRecords,
            ResponseCode::FormErr,
        ),
        (
            with(RD, [1, 0, 0, 1], &not_opt),
            QueryProblem::UnexpectedRecords,
            ResponseCode::FormErr,
        ),
        (
            with(RD, [1, 0, 0, 0], &trailing),
            QueryProblem::TrailingBytes(1),
            ResponseCode::FormErr,
        ),
        (huge, QueryProblem::TooLong(600), ResponseCode::FormErr),
    ];
    for (i, (message, problem, code)) in cases.into_iter().enumerate() {
        let (reply, got) = refused(&message);
        assert_eq!(got, problem, "case {i}");
        let reply = reply.unwrap_or_else(|| panic!("case {i}: no reply"));
        assert_eq!(reply.metadata.id, ID, "case {i}");
        assert_eq!(reply.metadata.response_code, code, "case {i}");
        assert!(reply.answers.is_empty(), "case {i}");
    }
    // Names that do not decode: a pointer loop, a reserved label type, a
    // question cut short, a pointer past the end.
    for body in [
        loop_name,
        bad_label_type,
        q(name)[..10].to_vec(),
        vec![0xc0, 0xff, 0, 1, 0, 1],
    ] {
        let (reply, problem) = refused(&with(RD, [1, 0, 0, 0], &body));
        assert!(
            matches!(problem, QueryProblem::Malformed(_)),
            "{body:?}: {problem:?}"
        );
        assert_eq!(reply.unwrap().metadata.response_code, ResponseCode::FormErr);
    }
}

#[test]
fn questions_of_other_classes_or_non_ldh_names_are_refused_with_the_question() {
    let with_question = |name: &[u8], qclass: u16| {
        let mut m = header(ID, RD, [1, 0, 0, 0]);
        m.extend(question(name, A, qclass));
        m
    };
    for qclass in [
        3,   /* CH */
        4,   /* HS */
        255, /* ANY */
        254, /* NONE */
    ] {
        let (reply, problem) = refused(&with_question(&wire_name("api.example.com"), qclass));
        assert_eq!(problem, QueryProblem::NotInClass(qclass));
        let reply = reply.unwrap();
        assert_eq!(reply.metadata.response_code, ResponseCode::Refused);
        assert_eq!(reply.queries.len(), 1);
    }
    let raw = |labels: &[&[u8]]| {
        let mut n = Vec::new();
        for l in labels {
            n.push(l.len() as u8);
            n.extend_from_slice(l);
        }
        n.push(0);
        n
    };
    let table: &[(Vec<u8>, &str)] = &[
        (raw(&[]), "."),
        (raw(&[b"_dmarc", b"example", b"com"]), "_dmarc.example.com"),
        (raw(&[b"a b", b"example"]), "a\\032b.example"),
        (raw(&[b"a\0", b"example"]), "a\\000.example"),
        (raw(&[b"a.b", b"example"]), "a\\.b.example"),
        (raw(&[b"-a", b"example"]), "-a.example"),
        (raw(&[b"a-", b"example"]), "a-.example"),
        (
            raw(&["bücher".as_bytes(), b"example"]),
            "b\\195\\188cher.example",
        ),
        (raw(&[b"*", b"example", b"com"]), "*.example.com"),
    ];
    for (name, shown) in table {
        let (reply, problem) = refused(&with_question(name, IN));
        assert_eq!(problem, QueryProblem::NotLdh(shown.to_string()));
        assert_eq!(reply.unwrap().metadata.response_code, ResponseCode::Refused);
    }
}

#[test]
fn an_edns_version_other_than_0_gets_badvers() {
    let mut m = header(ID, RD, [1, 0, 0, 1]);
    m.extend(question(&wire_name("api.example.com"), A, IN));
    m.extend(opt(1232, 1));
    let (reply, problem) = refused(&m);
    assert_eq!(problem, QueryProblem::EdnsVersion(1));
    let reply = reply.unwrap();
    // RCODE 16 is BADVERS with an OPT record and BADSIG with a TSIG one;
    // hickory decodes it by its first name.
    assert_eq!(u16::from(reply.metadata.response_code), 16);
    assert!(reply.edns.is_some());
}

#[test]
fn tcp_messages_are_length_prefixed_and_split_one_at_a_time() {
    let a = query("api.example.com", A);
    let b = query("files.example.org", AAAA);
    let mut stream = tcp_frame(&a).unwrap();
    stream.extend(tcp_frame(&b).unwrap());
    assert_eq!(&stream[..2], &(a.len() as u16).to_be_bytes());
    for cut in [0, 1, 2, a.len() + 1] {
        assert_eq!(
            next_tcp_message(&stream[..cut]),
            TcpMessage::Incomplete,
            "{cut}"
        );
    }
    let TcpMessage::Complete { message, consumed } = next_tcp_message(&stream) else {
        panic!("first message");
    };
    assert_eq!((message, consumed), (&a[..], a.len() + 2));
    let TcpMessage::Complete { message, consumed } = next_tcp_message(&stream[consumed..]) else {
        panic!("second message");
    };
    assert_eq!((message, consumed), (&b[..], b.len() + 2));
    assert_eq!(next_tcp_message(&[0x02, 0x01]), TcpMessage::TooLong(513));
    assert_eq!(
        next_tcp_message(&[0xff, 0xff, 0]),
        TcpMessage::TooLong(65535)
    );
    assert!(tcp_frame(&vec![0; 65536]).is_none());
    // A reply framed for TCP parses again.
    let reply = respond(&a, &granted(), Transport::Tcp).reply.unwrap();
    let framed = tcp_frame(&reply).unwrap();
    assert_eq!(
        u16::from_be_bytes([framed[0], framed[1]]) as usize,
        reply.len()
    );
    assert_eq!(decode(&framed[2..]).metadata.op_code, OpCode::Query);
}

proptest! {
    /// Any bytes: no panic; a reply carries the message's id and is a
    /// response within 512 bytes (no EDNS larger than that is offered
    /// here); an answered query's name is lowercase LDH.
    #[test]
    fn any_message_gets_a_well_formed_reply_or_none(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let response = respond(&bytes, &granted(), Transport::Udp);
        if let Some(reply) = &response.reply {
            let message = decode(reply);
            prop_assert_eq!(&reply[..2], &bytes[..2]);
            prop_assert_eq!(message.metadata.message_type, MessageType::Response);
            prop_assert!(reply.len() <= usize::from(UDP_REPLY_MAX));
        }
        if let Outcome::Answered { name, .. } = &response.outcome {
            prop_assert!(name.split('.').all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')));
        }
    }

    /// Queries for generated names: granted ones get their address, others
    /// NXDOMAIN, whatever the case they are asked in.
    #[test]
    fn generated_names_are_answered_by_the_grants(
        labels in prop::collection::vec("[a-zA-Z][a-zA-Z0-9]{0,9}", 2..5),
        grant_it in any::<bool>(),
    ) {
        let name = labels.join(".");
        let lower = name.to_ascii_lowercase();
        let grants = if grant_it { names(&[&format!("{lower}:443"), "z.example:1"]) } else { names(&["z.example:1"]) };
        let query = parse_query(&query(&name, A)).unwrap();
        prop_assert_eq!(query.name(), lower.as_str());
        let answer = query.answer_from(&grants);
        if grant_it {
            prop_assert_eq!(answer, Answer::Address(Ipv4Addr::new(198, 18, 0, 1)));
        } else if lower != "z.example" {
            prop_assert_eq!(answer, Answer::NxDomain);
        }
    }
}
