//! The sandbox's DNS stub, its pure part: strict query parsing and the
//! answers, over `hickory-proto`'s wire format. The stub has no resolver
//! and never forwards a query: a name is answered from the grants alone,
//! so DNS is no channel out of the sandbox.
//!
//! * An A query for a granted name gets that name's fixed address in the
//!   fake pool ([`super::fake_pool`]), which the engine turns back into the
//!   name when the program connects to it.
//! * Any other type for a granted name (AAAA, HTTPS, SVCB…) gets NOERROR
//!   with no answer: no IPv6 address, no ECH configuration and no
//!   alternative endpoint reaches the program.
//! * Any other name gets NXDOMAIN, and the caller is told, to audit it.
//! * In a learning spawn (`spawnd learn`), every name a manifest could
//!   grant is answered as if granted ([`respond_learning`]).
//! * A query that is not exactly one IN question with an LDH name, in an
//!   ordinary QUERY message, gets FORMERR, NOTIMP, BADVERS or REFUSED, or
//!   no reply at all when it cannot be answered (too short to have an id,
//!   or a response rather than a query).
//!
//! Names are compared lowercased without the trailing dot, but answers
//! echo the question exactly as asked, since clients that randomize the
//! case of their queries check it. Over UDP a reply fits the client's
//! limit (512 bytes, or its EDNS size up to [`UDP_REPLY_MAX`]); over TCP
//! each message carries a two-byte length ([`tcp_frame`],
//! [`next_tcp_message`]).

use std::net::Ipv4Addr;

use hickory_proto::op::{
    Edns, Header, Message, MessageType, Metadata, OpCode, Query, ResponseCode,
};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};
use thiserror::Error;

use super::fake_pool::{fake_ip, GrantedNames};
use super::grant::{is_ldh_label, MAX_NAME_LEN};
use super::learning::LearnedNames;

/// The TTL of a fake address: the mapping never changes during a spawn.
pub(crate) const FAKE_TTL: u32 = 300;

/// The longest query the stub reads. One question with a name of at most
/// 253 characters and an OPT record fits with room to spare; a longer
/// message is no query this stub answers.
pub(crate) const MAX_QUERY_LEN: usize = 512;

/// A UDP receive buffer one byte longer than [`MAX_QUERY_LEN`], so a
/// datagram that fills it is known to be too long rather than silently
/// cut.
pub(crate) const UDP_RECEIVE_BUFFER: usize = MAX_QUERY_LEN + 1;

/// The largest UDP reply the stub sends, whatever a client's EDNS offers
/// (the DNS flag day 2020 size, which avoids IP fragmentation).
pub(crate) const UDP_REPLY_MAX: u16 = 1232;

/// The reply limit of a client without EDNS (RFC 1035).
const UDP_CLASSIC_MAX: u16 = 512;

/// Where a reply goes, which decides its size limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// A UDP datagram: 512 bytes, or the client's EDNS size up to
    /// [`UDP_REPLY_MAX`].
    Udp,
    /// A TCP stream: up to 65535 bytes, framed by [`tcp_frame`].
    Tcp,
}

/// A query the stub answers: one IN question about an LDH name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DnsQuery {
    metadata: Metadata,
    question: Query,
    name: String,
    edns_payload: Option<u16>,
}

impl DnsQuery {
    /// The name asked about: lowercase LDH labels, no trailing dot.
    #[cfg(test)]
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The type asked for.
    pub(crate) fn record_type(&self) -> RecordType {
        self.question.query_type()
    }

    /// What the stub answers for this query, given the spawn's names: the
    /// fake address for A of a granted name, no data for other types of a
    /// granted name, NXDOMAIN for any other name.
    pub(crate) fn answer_from(&self, names: &GrantedNames) -> Answer {
        match names.index_of(&self.name) {
            Some(index) if self.record_type() == RecordType::A => match fake_ip(index) {
                Some(ip) => Answer::Address(ip),
                None => Answer::ServFail,
            },
            Some(_) => Answer::NoData,
            None => Answer::NxDomain,
        }
    }

    /// What the stub answers for this query in a learning spawn
    /// ([`super::learning`]): for A, the name's fake address, given now
    /// when it has none; no data for other types; NXDOMAIN for a name no
    /// manifest could grant, or an A query past the names' cap.
    pub(crate) fn answer_learning(&self, names: &mut LearnedNames) -> Answer {
        if self.record_type() == RecordType::A {
            return names
                .address_for(&self.name)
                .map_or(Answer::NxDomain, Answer::Address);
        }
        if LearnedNames::learnable(&self.name) {
            Answer::NoData
        } else {
            Answer::NxDomain
        }
    }

    /// The reply carrying `answer`, within the transport's size limit (a
    /// reply too long for UDP goes out truncated, with TC set, so the
    /// client asks again over TCP).
    pub(crate) fn reply(&self, answer: Answer, transport: Transport) -> Vec<u8> {
        let mut message = self.reply_message(answer.response_code());
        if let Answer::Address(ip) = answer {
            message.add_answer(Record::from_rdata(
                self.question.name().clone(),
                FAKE_TTL,
                RData::A(A(ip)),
            ));
        }
        let bytes = encode(&message);
        let limit = match transport {
            Transport::Udp => usize::from(self.udp_limit()),
            Transport::Tcp => usize::from(u16::MAX),
        };
        if bytes.len() <= limit {
            return bytes;
        }
        let mut cut = self.reply_message(answer.response_code());
        cut.metadata.truncation = true;
        encode(&cut)
    }

    /// The largest UDP reply this client takes.
    fn udp_limit(&self) -> u16 {
        match self.edns_payload {
            Some(size) => size.clamp(UDP_CLASSIC_MAX, UDP_REPLY_MAX),
            None => UDP_CLASSIC_MAX,
        }
    }

    /// A reply header and the question, with an OPT record when the query
    /// had one.
    fn reply_message(&self, code: ResponseCode) -> Message {
        let mut message = reply_to(&self.metadata, code);
        message.add_query(self.question.clone());
        if self.edns_payload.is_some() {
            message.set_edns(stub_edns());
        }
        message
    }
}

/// What the stub answers a query with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// NOERROR with one A record.
    Address(Ipv4Addr),
    /// NOERROR with no answer: the name exists, the type does not.
    NoData,
    /// NXDOMAIN: the name is not granted.
    NxDomain,
    /// SERVFAIL: the name is granted, but no address can be given.
    ServFail,
}

impl Answer {
    fn response_code(self) -> ResponseCode {
        match self {
            Answer::Address(_) | Answer::NoData => ResponseCode::NoError,
            Answer::NxDomain => ResponseCode::NXDomain,
            Answer::ServFail => ResponseCode::ServFail,
        }
    }
}

/// Why a message is not a query the stub answers.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum QueryProblem {
    /// Shorter than a DNS header: there is not even an id to reply to.
    #[error("{0} bytes, shorter than a DNS header")]
    TooShort(usize),
    /// A response (QR set), never answered: that could make two stubs
    /// answer each other forever.
    #[error("a response, not a query")]
    NotAQuery,
    /// Longer than [`MAX_QUERY_LEN`].
    #[error("{0} bytes, longer than any query this stub answers")]
    TooLong(usize),
    /// An opcode other than QUERY (NOTIFY, UPDATE…).
    #[error("opcode {0} is not QUERY")]
    NotQueryOpcode(u8),
    /// The TC bit set on a query.
    #[error("a query marked truncated")]
    Truncated,
    /// Not exactly one question.
    #[error("{0} questions, and a query has exactly one")]
    QuestionCount(u16),
    /// Answer or authority records in a query, or additional records other
    /// than one OPT.
    #[error("records that a query does not carry")]
    UnexpectedRecords,
    /// The message does not decode.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// Bytes after the last record.
    #[error("{0} bytes after the message")]
    TrailingBytes(usize),
    /// An EDNS version other than 0.
    #[error("EDNS version {0}, and this stub speaks version 0")]
    EdnsVersion(u8),
    /// A class other than IN.
    #[error("class {0}, and this stub answers IN only")]
    NotInClass(u16),
    /// The root name, or a name with a label that is not LDH (letters,
    /// digits, inner hyphens), shown in DNS presentation format.
    #[error("`{0}` is not a name of LDH labels")]
    NotLdh(String),
    /// A name longer than 253 characters.
    #[error("a name of {0} characters, above 253")]
    NameTooLong(usize),
}

impl QueryProblem {
    /// The response code this problem is answered with, or `None` when it
    /// is not answered at all.
    pub(crate) fn response_code(&self) -> Option<ResponseCode> {
        Some(match self {
            QueryProblem::TooShort(_) | QueryProblem::NotAQuery => return None,
            QueryProblem::NotQueryOpcode(_) => ResponseCode::NotImp,
            QueryProblem::EdnsVersion(_) => ResponseCode::BADVERS,
            QueryProblem::NotInClass(_)
            | QueryProblem::NotLdh(_)
            | QueryProblem::NameTooLong(_) => ResponseCode::Refused,
            QueryProblem::TooLong(_)
            | QueryProblem::Truncated
            | QueryProblem::QuestionCount(_)
            | QueryProblem::UnexpectedRecords
            | QueryProblem::Malformed(_)
            | QueryProblem::TrailingBytes(_) => ResponseCode::FormErr,
        })
    }
}

/// A message the stub does not answer normally: why, and the error reply
/// to send, if any.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{problem}")]
pub(crate) struct Refusal {
    /// Why.
    pub problem: QueryProblem,
    /// The error reply (FORMERR, NOTIMP, BADVERS, REFUSED), or `None`
    /// when nothing is sent back.
    pub reply: Option<Vec<u8>>,
}

/// Parses a query strictly: a header with QR clear, opcode QUERY and TC
/// clear, exactly one question, no answer or authority records, at most
/// one additional record and that an OPT of version 0, nothing after it;
/// the question of class IN, about a name of LDH labels of at most 253
/// characters.
pub(crate) fn parse_query(message: &[u8]) -> Result<DnsQuery, Refusal> {
    let mut decoder = BinDecoder::new(message);
    let header = match Header::read(&mut decoder) {
        Ok(header) => header,
        Err(_) => return Err(refusal(QueryProblem::TooShort(message.len()), None)),
    };
    let metadata = header.metadata;
    // Checked in this order so that a response or an oversized message
    // is never parsed further.
    if metadata.message_type != MessageType::Query {
        return Err(refusal(QueryProblem::NotAQuery, None));
    }
    let fail = |problem| Err(refusal(problem, Some((&metadata, None))));
    if message.len() > MAX_QUERY_LEN {
        return fail(QueryProblem::TooLong(message.len()));
    }
    if metadata.op_code != OpCode::Query {
        return fail(QueryProblem::NotQueryOpcode(u8::from(metadata.op_code)));
    }
    if metadata.truncation {
        return fail(QueryProblem::Truncated);
    }
    if header.counts.queries != 1 {
        return fail(QueryProblem::QuestionCount(header.counts.queries));
    }
    if header.counts.answers != 0 || header.counts.authorities != 0 || header.counts.additionals > 1
    {
        return fail(QueryProblem::UnexpectedRecords);
    }
    let question = match Query::read(&mut decoder) {
        Ok(question) => question,
        Err(e) => return fail(QueryProblem::Malformed(e.to_string())),
    };
    let additionals = usize::from(header.counts.additionals);
    let edns = match Message::read_records(&mut decoder, additionals, true, OpCode::Query) {
        Ok((records, _, _)) if !records.is_empty() => return fail(QueryProblem::UnexpectedRecords),
        Ok((_, edns, _)) => edns,
        Err(e) => return fail(QueryProblem::Malformed(e.to_string())),
    };
    if !decoder.is_empty() {
        return fail(QueryProblem::TrailingBytes(decoder.len()));
    }
    // From here the question is known and is echoed in error replies.
    let fail = |problem| {
        Err(refusal(
            problem,
            Some((&metadata, Some((&question, edns.is_some())))),
        ))
    };
    if let Some(edns) = &edns {
        if edns.version() != 0 {
            return fail(QueryProblem::EdnsVersion(edns.version()));
        }
    }
    if question.query_class() != DNSClass::IN {
        return fail(QueryProblem::NotInClass(u16::from(question.query_class())));
    }
    let name = match lowercase_ldh(question.name()) {
        Ok(name) => name,
        Err(problem) => return fail(problem),
    };
    Ok(DnsQuery {
        metadata,
        question,
        name,
        edns_payload: edns.as_ref().map(Edns::max_payload),
    })
}

/// The name as a lowercase string without the trailing dot, when it has
/// at least one label, every label is LDH, and it is 253 characters at
/// most.
fn lowercase_ldh(name: &Name) -> Result<String, QueryProblem> {
    let labels: Vec<&[u8]> = name.iter().collect();
    if labels.is_empty() || !labels.iter().all(|l| is_ldh_label(l)) {
        return Err(QueryProblem::NotLdh(presentation(&labels)));
    }
    let text = labels
        .iter()
        .map(|l| String::from_utf8_lossy(l).to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join(".");
    if text.len() > MAX_NAME_LEN {
        return Err(QueryProblem::NameTooLong(text.len()));
    }
    Ok(text)
}

/// Labels in DNS presentation format: printable ASCII as is (with `.` and
/// `\` escaped), any other byte as `\DDD`; the root as `.`.
fn presentation(labels: &[&[u8]]) -> String {
    if labels.is_empty() {
        return ".".to_string();
    }
    let mut out = String::new();
    for (i, label) in labels.iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        for &b in *label {
            match b {
                b'.' | b'\\' => {
                    out.push('\\');
                    out.push(char::from(b));
                }
                0x21..=0x7e => out.push(char::from(b)),
                _ => out.push_str(&format!("\\{b:03}")),
            }
        }
    }
    out
}

/// A refusal, with its error reply built from the query's header (and
/// question, and whether it had EDNS, once known) when the problem is
/// answered at all.
fn refusal(problem: QueryProblem, header: Option<(&Metadata, Option<(&Query, bool)>)>) -> Refusal {
    let reply = match (problem.response_code(), header) {
        (Some(code), Some((metadata, question))) => {
            let mut message = reply_to(metadata, code);
            // BADVERS lives partly in the OPT record, so it always has one.
            let with_edns = code == ResponseCode::BADVERS || question.is_some_and(|(_, e)| e);
            if let Some((question, _)) = question {
                message.add_query(question.clone());
            }
            if with_edns {
                message.set_edns(stub_edns());
            }
            Some(encode(&message))
        }
        _ => None,
    };
    Refusal { problem, reply }
}

/// A reply header for a query: its id, opcode and RD bit copied, RA set
/// (the stub answers as a recursive resolver would), `code` as RCODE.
fn reply_to(query: &Metadata, code: ResponseCode) -> Message {
    let mut message = Message::response(query.id, query.op_code);
    message.metadata.recursion_desired = query.recursion_desired;
    message.metadata.recursion_available = true;
    message.metadata.response_code = code;
    message
}

/// The OPT record of the stub's replies: version 0, no DNSSEC, the UDP
/// size it accepts.
fn stub_edns() -> Edns {
    let mut edns = Edns::new();
    edns.set_max_payload(UDP_REPLY_MAX);
    edns
}

/// A reply's bytes. A reply holds a header, at most one question of a
/// checked name, one A record and an OPT record, all of which encode.
fn encode(message: &Message) -> Vec<u8> {
    message.to_vec().unwrap_or_default()
}

/// What the stub sends for `message` and what happened, for the caller to
/// send and audit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    /// The reply, or `None` when nothing is sent back.
    pub reply: Option<Vec<u8>>,
    /// What the query was and how it was answered.
    pub outcome: Outcome,
}

/// How a message was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A query answered from the grants.
    Answered {
        /// The name, lowercase, without the trailing dot.
        name: String,
        /// The type asked for.
        record_type: RecordType,
        /// The answer.
        answer: Answer,
    },
    /// A message refused or not answered.
    Refused(QueryProblem),
}

/// Parses `message` and answers it from `names`, with a fake address for
/// A queries of granted names. (The engine, which resolves granted names
/// before it answers, calls [`parse_query`], [`DnsQuery::answer_from`]
/// and [`DnsQuery::reply`] itself.)
pub(crate) fn respond(message: &[u8], names: &GrantedNames, transport: Transport) -> Response {
    respond_with(message, transport, |query| query.answer_from(names))
}

/// Parses `message` and answers it as a learning spawn's stub does
/// ([`DnsQuery::answer_learning`]), giving a new name its fake address.
pub(crate) fn respond_learning(
    message: &[u8],
    names: &mut LearnedNames,
    transport: Transport,
) -> Response {
    respond_with(message, transport, |query| query.answer_learning(names))
}

/// Parses `message` and answers a query with `answer`'s answer.
fn respond_with(
    message: &[u8],
    transport: Transport,
    answer: impl FnOnce(&DnsQuery) -> Answer,
) -> Response {
    match parse_query(message) {
        Ok(query) => {
            let answer = answer(&query);
            Response {
                reply: Some(query.reply(answer, transport)),
                outcome: Outcome::Answered {
                    name: query.name,
                    record_type: query.question.query_type(),
                    answer,
                },
            }
        }
        Err(refusal) => Response {
            reply: refusal.reply,
            outcome: Outcome::Refused(refusal.problem),
        },
    }
}

/// A DNS message framed for TCP: its length as two big-endian bytes, then
/// the message. `None` for a message longer than 65535 bytes.
pub(crate) fn tcp_frame(message: &[u8]) -> Option<Vec<u8>> {
    let len = u16::try_from(message.len()).ok()?;
    let mut framed = Vec::with_capacity(2 + message.len());
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(message);
    Some(framed)
}

/// The first message of a TCP stream's buffered bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TcpMessage<'a> {
    /// The length prefix or the message is not complete yet.
    Incomplete,
    /// A whole message, and how many bytes of the buffer it took with its
    /// prefix.
    Complete {
        /// The message, without its prefix.
        message: &'a [u8],
        /// Bytes to drop from the buffer.
        consumed: usize,
    },
    /// The prefix announces a message longer than [`MAX_QUERY_LEN`]: no
    /// query, so the connection should close rather than buffer it.
    TooLong(usize),
}

/// Splits the first length-prefixed message off a TCP stream's buffer.
pub(crate) fn next_tcp_message(buffer: &[u8]) -> TcpMessage<'_> {
    let &[high, low, ..] = buffer else {
        return TcpMessage::Incomplete;
    };
    let len = usize::from(u16::from_be_bytes([high, low]));
    if len > MAX_QUERY_LEN {
        return TcpMessage::TooLong(len);
    }
    match buffer.get(2..2 + len) {
        Some(message) => TcpMessage::Complete {
            message,
            consumed: 2 + len,
        },
        None => TcpMessage::Incomplete,
    }
}
