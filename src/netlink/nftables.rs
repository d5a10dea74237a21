//! nf_tables batches, built by hand: the two rule sets a sandbox's init
//! adds to its own network namespace while it still holds CAP_NET_ADMIN
//! over it (the program never can).
//!
//! A learning sandbox (`spawnd learn`) has no listener per port: every TCP
//! connection its program makes to a prefix (the fake pool) is redirected
//! to one listener on the sandbox's loopback, and spawnd reads where it was
//! going with `SO_ORIGINAL_DST` ([`redirect_tcp_to_loopback_port`]):
//!
//! ```text
//! table ip spawnd_learn {
//!     chain out {
//!         type nat hook output priority -100; policy accept;
//!         ip daddr 198.18.0.0/15 meta l4proto tcp redirect to :PORT
//!     }
//! }
//! ```
//!
//! A sandbox with grants routes every address to its loopback, so that no
//! attempt fails before a packet exists; its refused egress is then
//! logged to an NFLOG group spawnd reads and refused at once
//! ([`log_and_refuse_other_egress`]), the same in `ip6`:
//!
//! ```text
//! table ip spawnd_egress {
//!     chain out {
//!         type filter hook output priority 0; policy accept;
//!         ip ihl != 5 log group G snaplen 128 reject with icmp port-unreachable
//!         ip daddr 127.0.0.0/8 accept
//!         meta l4proto tcp tcp flags & (syn | ack) != syn accept
//!         meta l4proto tcp tcp dport P accept        # each granted port
//!         meta l4proto tcp log group G snaplen 128 reject with tcp reset
//!         meta l4proto != icmp log group G snaplen 128 reject with icmp port-unreachable
//!     }
//! }
//! ```
//!
//! The first rule refuses IPv4 options (source routing would name a first
//! hop in the header and carry the real destination further in); in `ip6`
//! its place is taken by a rule refusing every next header but TCP, UDP
//! and ICMPv6 (a routing header does the same). The last refuses UDP and
//! every other transport (UDP-Lite, SCTP, DCCP) alike; ICMP passes, for
//! the refusals' own messages.
//!
//! Hand-built for the reason `route.rs` is: fixed messages, sent from
//! init, with no `unsafe` (bytes with `to_ne_bytes`/`to_be_bytes`, sent and
//! read through `nix`), where the crates bring a generic message model and
//! its allocations into init. nf_tables' own values are big-endian;
//! netlink's headers are the machine's order.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use nix::sys::socket::{recv, send, setsockopt, sockopt, MsgFlags, SockProtocol};
use nix::sys::time::TimeVal;

/// The table the learning redirect lives in.
pub(crate) const LEARN_TABLE: &str = "spawnd_learn";
/// The tables (one `ip`, one `ip6`) of a sandbox with grants.
pub(crate) const EGRESS_TABLE: &str = "spawnd_egress";
/// Each table's chain.
const CHAIN: &str = "out";

const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;
const NLA_F_NESTED: u16 = 0x8000;

const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;

/// `NF_INET_LOCAL_OUT`: the program's own packets, before routing.
const HOOK_LOCAL_OUT: u32 = 3;
/// `NF_IP_PRI_NAT_DST`: where destination NAT runs.
const PRIORITY_NAT_DST: i32 = -100;
/// `NF_IP_PRI_FILTER`.
const PRIORITY_FILTER: i32 = 0;
const NF_ACCEPT: u32 = 1;
/// nf_tables' first 32-bit data register (`NFT_REG_1`).
const REG_1: u32 = 1;
/// `NFT_REG_VERDICT`.
const REG_VERDICT: u32 = 0;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
/// The destination address's offset in an IPv6 header.
const IPV6_DADDR_OFFSET: u32 = 24;
/// The version and header length byte's offset in an IPv4 header, and
/// the next header's in an IPv6 one.
const IPV4_VERSION_IHL_OFFSET: u32 = 0;
const IPV6_NEXT_HEADER_OFFSET: u32 = 6;
/// An IPv4 header without options: 5 words.
const IPV4_IHL_PLAIN: u8 = 5;
/// The TCP flags byte's offset in a TCP header.
const TCP_FLAGS_OFFSET: u32 = 13;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;
/// The destination port's offset in a TCP or UDP header.
const DPORT_OFFSET: u32 = 2;
/// The destination address's offset in an IPv4 header.
const IPV4_DADDR_OFFSET: u32 = 16;
const NFT_CMP_EQ: u32 = 0;
const NFT_CMP_NEQ: u32 = 1;
const NFT_META_L4PROTO: u32 = 16;
const IPPROTO_ICMP: u8 = 1;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_ICMPV6: u8 = 58;
/// `NFT_REJECT_ICMP_UNREACH` and `NFT_REJECT_TCP_RST`.
const NFT_REJECT_ICMP_UNREACH: u32 = 0;
const NFT_REJECT_TCP_RST: u32 = 1;
/// Port unreachable: ICMP code 3, ICMPv6 code 4.
const ICMP_PORT_UNREACH: u8 = 3;
const ICMPV6_PORT_UNREACH: u8 = 4;
/// How much of a refused packet the log carries: its IP header (IPv6's is
/// 40 bytes, an IPv4 header at most 60) and the start of its TCP or UDP
/// header.
pub(crate) const LOGGED_BYTES: u32 = 128;
/// `NF_NAT_RANGE_PROTO_SPECIFIED`: the redirect names a port.
const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 2;

/// How long init waits for the kernel's acknowledgements.
const ACK_WITHIN: Duration = Duration::from_secs(5);

/// A netlink message under construction: its header, nfgenmsg and
/// attributes, nests closed in order.
struct Message {
    bytes: Vec<u8>,
    nests: Vec<usize>,
}

impl Message {
    fn new(kind: u16, flags: u16, seq: u32, family: u8, res_id: u16) -> Message {
        let mut bytes = Vec::with_capacity(256);
        // nlmsghdr; the length is filled in by `finish`.
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(&flags.to_ne_bytes());
        bytes.extend_from_slice(&seq.to_ne_bytes());
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        // nfgenmsg: family, version (NFNETLINK_V0), resource id (big-endian).
        bytes.push(family);
        bytes.push(0);
        bytes.extend_from_slice(&res_id.to_be_bytes());
        Message {
            bytes,
            nests: Vec::new(),
        }
    }

    /// One attribute, padded to four bytes.
    fn attr(&mut self, kind: u16, value: &[u8]) -> &mut Message {
        let len = u16::try_from(4 + value.len()).unwrap_or(u16::MAX);
        self.bytes.extend_from_slice(&len.to_ne_bytes());
        self.bytes.extend_from_slice(&kind.to_ne_bytes());
        self.bytes.extend_from_slice(value);
        self.pad();
        self
    }

    /// A string attribute, NUL-terminated.
    fn string(&mut self, kind: u16, value: &str) -> &mut Message {
        let mut with_nul = value.as_bytes().to_vec();
        with_nul.push(0);
        self.attr(kind, &with_nul)
    }

    /// A 32-bit attribute, big-endian as nf_tables reads it.
    fn be32(&mut self, kind: u16, value: u32) -> &mut Message {
        self.attr(kind, &value.to_be_bytes())
    }

    /// Opens a nested attribute; [`Message::end`] closes it.
    fn begin(&mut self, kind: u16) -> &mut Message {
        self.nests.push(self.bytes.len());
        self.bytes.extend_from_slice(&0u16.to_ne_bytes());
        self.bytes
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        self
    }

    fn end(&mut self) -> &mut Message {
        if let Some(at) = self.nests.pop() {
            let len = u16::try_from(self.bytes.len() - at).unwrap_or(u16::MAX);
            self.bytes[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        }
        self
    }

    /// `NFTA_*_DATA { NFTA_DATA_VALUE value }`.
    fn data(&mut self, kind: u16, value: &[u8]) -> &mut Message {
        self.begin(kind).attr(NFTA_DATA_VALUE, value).end()
    }

    /// One expression of a rule: `{ NFTA_EXPR_NAME name, NFTA_EXPR_DATA {…} }`
    /// in a list element, its data written by `body`.
    fn expression(&mut self, name: &str, body: impl FnOnce(&mut Message)) -> &mut Message {
        self.begin(NFTA_LIST_ELEM).string(NFTA_EXPR_NAME, name);
        self.begin(NFTA_EXPR_DATA);
        body(self);
        self.end().end()
    }

    /// `payload load base offset len => reg 1`.
    fn load(&mut self, base: u32, offset: u32, len: u32) -> &mut Message {
        self.expression("payload", |m| {
            m.be32(1, REG_1) // NFTA_PAYLOAD_DREG
                .be32(2, base) // NFTA_PAYLOAD_BASE
                .be32(3, offset) // NFTA_PAYLOAD_OFFSET
                .be32(4, len); // NFTA_PAYLOAD_LEN
        })
    }

    /// `bitwise reg 1 = (reg 1 & mask) ^ 0`.
    fn mask(&mut self, mask: &[u8]) -> &mut Message {
        let len = u32::try_from(mask.len()).unwrap_or(0);
        let zero = vec![0u8; mask.len()];
        self.expression("bitwise", |m| {
            m.be32(1, REG_1) // NFTA_BITWISE_SREG
                .be32(2, REG_1) // NFTA_BITWISE_DREG
                .be32(3, len) // NFTA_BITWISE_LEN
                .data(4, mask) // NFTA_BITWISE_MASK
                .data(5, &zero); // NFTA_BITWISE_XOR
        })
    }

    /// `cmp op reg 1 value`.
    fn compare(&mut self, op: u32, value: &[u8]) -> &mut Message {
        self.expression("cmp", |m| {
            m.be32(1, REG_1) // NFTA_CMP_SREG
                .be32(2, op) // NFTA_CMP_OP
                .data(3, value); // NFTA_CMP_DATA
        })
    }

    /// `meta l4proto == proto`.
    fn l4proto(&mut self, proto: u8) -> &mut Message {
        self.expression("meta", |m| {
            m.be32(1, REG_1) // NFTA_META_DREG
                .be32(2, NFT_META_L4PROTO); // NFTA_META_KEY
        })
        .compare(NFT_CMP_EQ, &[proto])
    }

    /// `accept`: the verdict, as an immediate into the verdict register.
    fn accept(&mut self) -> &mut Message {
        self.expression("immediate", |m| {
            m.be32(1, REG_VERDICT) // NFTA_IMMEDIATE_DREG
                .begin(2) // NFTA_IMMEDIATE_DATA
                .begin(NFTA_DATA_VERDICT)
                .be32(NFTA_VERDICT_CODE, NF_ACCEPT)
                .end()
                .end();
        })
    }

    /// `log group G snaplen LOGGED_BYTES`.
    fn log(&mut self, group: u16) -> &mut Message {
        self.expression("log", |m| {
            m.attr(1, &group.to_be_bytes()) // NFTA_LOG_GROUP
                .be32(3, LOGGED_BYTES); // NFTA_LOG_SNAPLEN
        })
    }

    /// `reject with tcp reset`, or with an ICMP `code`.
    fn reject(&mut self, kind: u32, code: Option<u8>) -> &mut Message {
        self.expression("reject", |m| {
            m.be32(1, kind); // NFTA_REJECT_TYPE
            if let Some(code) = code {
                m.attr(2, &[code]); // NFTA_REJECT_ICMP_CODE
            }
        })
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        let len = u32::try_from(self.bytes.len()).unwrap_or(u32::MAX);
        self.bytes[..4].copy_from_slice(&len.to_ne_bytes());
        self.bytes
    }
}

/// The message type of an nf_tables request.
fn nft_type(msg: u16) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | msg
}

/// A batch under construction: batch begin, then messages that each ask
/// for an acknowledgement, numbered on from the first.
struct Batch {
    bytes: Vec<u8>,
    seq: u32,
    acks: Vec<u32>,
}

impl Batch {
    fn new(seq: u32) -> Batch {
        let mut bytes = Vec::with_capacity(1024);
        bytes.extend(
            Message::new(
                NFNL_MSG_BATCH_BEGIN,
                NLM_F_REQUEST,
                seq,
                0,
                NFNL_SUBSYS_NFTABLES,
            )
            .finish(),
        );
        Batch {
            bytes,
            seq,
            acks: Vec::new(),
        }
    }

    /// The next message's sequence number, to be acknowledged.
    fn next(&mut self) -> u32 {
        self.seq += 1;
        self.acks.push(self.seq);
        self.seq
    }

    fn table(&mut self, family: u8, table: &str) {
        let seq = self.next();
        let create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
        let mut m = Message::new(nft_type(NFT_MSG_NEWTABLE), create, seq, family, 0);
        m.string(NFTA_TABLE_NAME, table);
        self.bytes.extend(m.finish());
    }

    /// A base chain [`CHAIN`] on the output hook, policy accept.
    fn chain(&mut self, family: u8, table: &str, kind: &str, priority: i32) {
        let seq = self.next();
        let create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
        let mut m = Message::new(nft_type(NFT_MSG_NEWCHAIN), create, seq, family, 0);
        m.string(NFTA_CHAIN_TABLE, table)
            .string(NFTA_CHAIN_NAME, CHAIN)
            .begin(NFTA_CHAIN_HOOK)
            .be32(NFTA_HOOK_HOOKNUM, HOOK_LOCAL_OUT)
            .attr(NFTA_HOOK_PRIORITY, &priority.to_be_bytes())
            .end()
            .be32(NFTA_CHAIN_POLICY, NF_ACCEPT)
            .string(NFTA_CHAIN_TYPE, kind);
        self.bytes.extend(m.finish());
    }

    /// A rule appended to the table's chain, its expressions written by
    /// `expressions`.
    fn rule(&mut self, family: u8, table: &str, expressions: impl FnOnce(&mut Message)) {
        let seq = self.next();
        let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_APPEND;
        let mut m = Message::new(nft_type(NFT_MSG_NEWRULE), flags, seq, family, 0);
        m.string(NFTA_RULE_TABLE, table)
            .string(NFTA_RULE_CHAIN, CHAIN)
            .begin(NFTA_RULE_EXPRESSIONS);
        expressions(&mut m);
        m.end();
        self.bytes.extend(m.finish());
    }

    /// The batch's bytes, ended, and the sequence numbers to be
    /// acknowledged.
    fn finish(mut self) -> (Vec<u8>, Vec<u32>) {
        self.bytes.extend(
            Message::new(
                NFNL_MSG_BATCH_END,
                NLM_F_REQUEST,
                self.seq + 1,
                0,
                NFNL_SUBSYS_NFTABLES,
            )
            .finish(),
        );
        (self.bytes, self.acks)
    }
}

/// The bytes of the batch that redirects every TCP connection to
/// `prefix/prefix_len` to port `port` of the loopback, its messages
/// numbered from `seq`: batch begin, the table, the chain, the rule, batch
/// end. The table, the chain and the rule ask for an acknowledgement
/// (sequence numbers `seq + 1` to `seq + 3`).
pub(super) fn redirect_batch(prefix: Ipv4Addr, prefix_len: u8, port: u16, seq: u32) -> Vec<u8> {
    let mask = u32::MAX
        .checked_shl(32 - u32::from(prefix_len.min(32)))
        .unwrap_or(0);
    let network = u32::from(prefix) & mask;
    let mut batch = Batch::new(seq);
    batch.table(NFPROTO_IPV4, LEARN_TABLE);
    batch.chain(NFPROTO_IPV4, LEARN_TABLE, "nat", PRIORITY_NAT_DST);
    batch.rule(NFPROTO_IPV4, LEARN_TABLE, |m| {
        // ip daddr & mask == network, meta l4proto tcp
        m.load(NFT_PAYLOAD_NETWORK_HEADER, IPV4_DADDR_OFFSET, 4)
            .mask(&mask.to_be_bytes())
            .compare(NFT_CMP_EQ, &network.to_be_bytes())
            .l4proto(IPPROTO_TCP)
            // redirect to :port
            .expression("immediate", |m| {
                m.be32(1, REG_1) // NFTA_IMMEDIATE_DREG
                    .data(2, &port.to_be_bytes()); // NFTA_IMMEDIATE_DATA
            })
            .expression("redir", |m| {
                m.be32(1, REG_1) // NFTA_REDIR_REG_PROTO_MIN
                    .be32(2, REG_1) // NFTA_REDIR_REG_PROTO_MAX
                    .be32(3, NF_NAT_RANGE_PROTO_SPECIFIED); // NFTA_REDIR_FLAGS
            });
    });
    batch.finish().0
}

/// The bytes of the batch behind [`log_and_refuse_other_egress`] (the
/// module documentation shows its rules), its messages numbered from
/// `seq`, and the sequence numbers to be acknowledged: for each of `ip`
/// and `ip6`, the table, the chain and each rule.
pub(super) fn egress_batch(ports: &[u16], group: u16, seq: u32) -> (Vec<u8>, Vec<u32>) {
    let mut batch = Batch::new(seq);
    for family in [NFPROTO_IPV4, NFPROTO_IPV6] {
        let (unreachable, icmp) = if family == NFPROTO_IPV4 {
            (ICMP_PORT_UNREACH, IPPROTO_ICMP)
        } else {
            (ICMPV6_PORT_UNREACH, IPPROTO_ICMPV6)
        };
        batch.table(family, EGRESS_TABLE);
        batch.chain(family, EGRESS_TABLE, "filter", PRIORITY_FILTER);
        // Headers that could carry the destination past the one judged
        // here (IPv4 options, IPv6 extension headers), to any address.
        batch.rule(family, EGRESS_TABLE, |m| {
            if family == NFPROTO_IPV4 {
                m.load(NFT_PAYLOAD_NETWORK_HEADER, IPV4_VERSION_IHL_OFFSET, 1)
                    .mask(&[0x0f])
                    .compare(NFT_CMP_NEQ, &[IPV4_IHL_PLAIN]);
            } else {
                m.load(NFT_PAYLOAD_NETWORK_HEADER, IPV6_NEXT_HEADER_OFFSET, 1)
                    .compare(NFT_CMP_NEQ, &[IPPROTO_TCP])
                    .compare(NFT_CMP_NEQ, &[IPPROTO_UDP])
                    .compare(NFT_CMP_NEQ, &[IPPROTO_ICMPV6]);
            }
            m.log(group)
                .reject(NFT_REJECT_ICMP_UNREACH, Some(unreachable));
        });
        // The sandbox's own loopback: a test suite's servers, the DNS
        // stub at 127.0.0.1 and its answers.
        batch.rule(family, EGRESS_TABLE, |m| {
            if family == NFPROTO_IPV4 {
                m.load(NFT_PAYLOAD_NETWORK_HEADER, IPV4_DADDR_OFFSET, 4)
                    .mask(&[255, 0, 0, 0])
                    .compare(NFT_CMP_EQ, &[127, 0, 0, 0]);
            } else {
                m.load(NFT_PAYLOAD_NETWORK_HEADER, IPV6_DADDR_OFFSET, 16)
                    .compare(NFT_CMP_EQ, &std::net::Ipv6Addr::LOCALHOST.octets());
            }
            m.accept();
        });
        // Only a connection's first packet (SYN without ACK) is judged:
        // replies and resets pass.
        batch.rule(family, EGRESS_TABLE, |m| {
            m.l4proto(IPPROTO_TCP)
                .load(NFT_PAYLOAD_TRANSPORT_HEADER, TCP_FLAGS_OFFSET, 1)
                .mask(&[TCP_SYN | TCP_ACK])
                .compare(NFT_CMP_NEQ, &[TCP_SYN])
                .accept();
        });
        // A granted port reaches spawnd's listener, which judges the
        // destination.
        for port in ports {
            batch.rule(family, EGRESS_TABLE, |m| {
                m.l4proto(IPPROTO_TCP)
                    .load(NFT_PAYLOAD_TRANSPORT_HEADER, DPORT_OFFSET, 2)
                    .compare(NFT_CMP_EQ, &port.to_be_bytes())
                    .accept();
            });
        }
        batch.rule(family, EGRESS_TABLE, |m| {
            m.l4proto(IPPROTO_TCP)
                .log(group)
                .reject(NFT_REJECT_TCP_RST, None);
        });
        // UDP and every other transport; ICMP passes (the refusals' own
        // port-unreachable messages among it).
        batch.rule(family, EGRESS_TABLE, |m| {
            m.expression("meta", |m| {
                m.be32(1, REG_1) // NFTA_META_DREG
                    .be32(2, NFT_META_L4PROTO); // NFTA_META_KEY
            })
            .compare(NFT_CMP_NEQ, &[icmp])
            .log(group)
            .reject(NFT_REJECT_ICMP_UNREACH, Some(unreachable));
        });
    }
    batch.finish()
}

/// The kernel's answers in one read: for each `NLMSG_ERROR` among them,
/// its sequence number and errno (0 for an acknowledgement).
pub(super) fn read_answers(answer: &[u8]) -> io::Result<Vec<(u32, i32)>> {
    let mut found = Vec::new();
    let mut at = 0;
    while at + 16 <= answer.len() {
        let word = |i: usize| -> [u8; 4] {
            let mut w = [0u8; 4];
            w.copy_from_slice(&answer[at + i..at + i + 4]);
            w
        };
        let len = u32::from_ne_bytes(word(0)) as usize;
        if len < 16 || at + len > answer.len() {
            return Err(io::Error::other("nf_tables: a malformed answer"));
        }
        let kind = u16::from_ne_bytes([answer[at + 4], answer[at + 5]]);
        let seq = u32::from_ne_bytes(word(8));
        if kind == NLMSG_ERROR {
            if len < 20 {
                return Err(io::Error::other("nf_tables: a short error answer"));
            }
            found.push((seq, i32::from_ne_bytes(word(16))));
        }
        at += len.next_multiple_of(4);
    }
    Ok(found)
}

/// In the current network namespace (needs CAP_NET_ADMIN over it),
/// redirects every TCP connection to `prefix/prefix_len` to port `port`
/// of the loopback ([`redirect_batch`]), and waits for the kernel to
/// acknowledge the table, the chain and the rule. The error names the
/// step and the rule.
pub(crate) fn redirect_tcp_to_loopback_port(
    prefix: Ipv4Addr,
    prefix_len: u8,
    port: u16,
) -> io::Result<()> {
    let seq = 1;
    let batch = redirect_batch(prefix, prefix_len, port, seq);
    apply(
        &batch,
        &[seq + 1, seq + 2, seq + 3],
        &format!("nf_tables: ip daddr {prefix}/{prefix_len} meta l4proto tcp redirect to :{port}"),
    )
}

/// In the current network namespace (needs CAP_NET_ADMIN over it), logs
/// every TCP connection attempt that leaves neither for the loopback nor
/// for one of `ports`, every datagram of another transport but ICMP not
/// for the loopback, and every packet with IPv4 options or IPv6 extension
/// headers, to NFLOG group `group`, and refuses it at once (a reset, ICMP
/// port unreachable), for IPv4 and IPv6 ([`egress_batch`]); waits for the
/// kernel to acknowledge every part.
/// The error names the step.
pub(crate) fn log_and_refuse_other_egress(ports: &[u16], group: u16) -> io::Result<()> {
    let (batch, acks) = egress_batch(ports, group, 1);
    apply(
        &batch,
        &acks,
        &format!(
            "nf_tables: table {EGRESS_TABLE}, log group {group} and refuse egress but to the loopback and TCP ports {ports:?}"
        ),
    )
}

/// Sends `batch` and waits for an acknowledgement of each of `acks`; the
/// error names `shown`.
fn apply(batch: &[u8], acks: &[u32], shown: &str) -> io::Result<()> {
    let named = |what: &str, e: nix::Error| {
        io::Error::new(io::Error::from(e).kind(), format!("{what} ({shown}): {e}"))
    };
    let sock = super::bound_socket(
        (SockProtocol::NetlinkNetFilter, "NETLINK_NETFILTER"),
        &named,
    )?;
    let within = TimeVal::new(ACK_WITHIN.as_secs() as _, 0);
    setsockopt(&sock, sockopt::ReceiveTimeout, &within)
        .map_err(|e| named("setsockopt(SO_RCVTIMEO)", e))?;
    send(sock.as_raw_fd(), batch, MsgFlags::empty()).map_err(|e| named("send", e))?;
    // An error answer echoes the whole request after its error field.
    let mut answer = vec![0u8; 65536];
    let mut acknowledged = Vec::new();
    while acknowledged.len() < acks.len() {
        let n =
            recv(sock.as_raw_fd(), &mut answer, MsgFlags::empty()).map_err(|e| named("recv", e))?;
        for (answered, errno) in read_answers(&answer[..n])? {
            if errno != 0 {
                let e = io::Error::from_raw_os_error(-errno);
                return Err(io::Error::new(e.kind(), format!("{shown}: {e}")));
            }
            if acks.contains(&answered) && !acknowledged.contains(&answered) {
                acknowledged.push(answered);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages of a batch: (type, flags, seq, family, attribute bytes).
    fn messages(batch: &[u8]) -> Vec<(u16, u16, u32, u8, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < batch.len() {
            let len = u32::from_ne_bytes(batch[at..at + 4].try_into().unwrap()) as usize;
            assert!(len >= 20 && len.is_multiple_of(4), "length {len}");
            let m = &batch[at..at + len];
            out.push((
                u16::from_ne_bytes([m[4], m[5]]),
                u16::from_ne_bytes([m[6], m[7]]),
                u32::from_ne_bytes(m[8..12].try_into().unwrap()),
                m[16],
                m[20..].to_vec(),
            ));
            at += len;
        }
        assert_eq!(at, batch.len());
        out
    }

    /// An attribute: its type without NLA_F_NESTED, whether nested, its value.
    type Attr = (u16, bool, Vec<u8>);

    /// Attributes at one level.
    fn attrs(bytes: &[u8]) -> Vec<Attr> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let len = usize::from(u16::from_ne_bytes([bytes[at], bytes[at + 1]]));
            let kind = u16::from_ne_bytes([bytes[at + 2], bytes[at + 3]]);
            out.push((
                kind & !NLA_F_NESTED,
                kind & NLA_F_NESTED != 0,
                bytes[at + 4..at + len].to_vec(),
            ));
            at += len.next_multiple_of(4);
        }
        assert_eq!(at, bytes.len());
        out
    }

    #[test]
    fn the_batch_holds_begin_table_chain_rule_end_in_order_with_acks_asked() {
        let batch = redirect_batch(Ipv4Addr::new(198, 18, 0, 0), 15, 40000, 1);
        let m = messages(&batch);
        let kinds: Vec<(u16, u32, u8)> = m.iter().map(|(k, _, s, f, _)| (*k, *s, *f)).collect();
        assert_eq!(
            kinds,
            [
                (NFNL_MSG_BATCH_BEGIN, 1, 0),
                (0x0a00, 2, NFPROTO_IPV4),
                (0x0a03, 3, NFPROTO_IPV4),
                (0x0a06, 4, NFPROTO_IPV4),
                (NFNL_MSG_BATCH_END, 5, 0),
            ]
        );
        for (_, flags, seq, _, _) in &m[1..4] {
            assert_ne!(flags & NLM_F_ACK, 0, "message {seq}");
        }
        // The batch messages name the nf_tables subsystem, big-endian.
        assert_eq!(&batch[18..20], &[0, 10]);
        assert_eq!(
            attrs(&m[1].4),
            [(NFTA_TABLE_NAME, false, b"spawnd_learn\0".to_vec())]
        );
        let chain = attrs(&m[2].4);
        assert_eq!(
            chain[0],
            (NFTA_CHAIN_TABLE, false, b"spawnd_learn\0".to_vec())
        );
        assert_eq!(chain[1], (NFTA_CHAIN_NAME, false, b"out\0".to_vec()));
        assert_eq!(chain[2].0, NFTA_CHAIN_HOOK);
        assert_eq!(
            attrs(&chain[2].2),
            [
                (NFTA_HOOK_HOOKNUM, false, 3u32.to_be_bytes().to_vec()),
                (NFTA_HOOK_PRIORITY, false, (-100i32).to_be_bytes().to_vec()),
            ]
        );
        assert_eq!(chain[4], (NFTA_CHAIN_TYPE, false, b"nat\0".to_vec()));
    }

    #[test]
    fn the_rule_matches_the_prefix_and_tcp_and_redirects_to_the_port_as_nft_does() {
        let batch = redirect_batch(Ipv4Addr::new(198, 18, 7, 9), 15, 40000, 1);
        let rule = &messages(&batch)[3].4;
        let rule = attrs(rule);
        assert_eq!(rule[2].0, NFTA_RULE_EXPRESSIONS);
        let expressions: Vec<(String, Vec<Attr>)> = attrs(&rule[2].2)
            .into_iter()
            .map(|(kind, nested, elem)| {
                assert_eq!((kind, nested), (NFTA_LIST_ELEM, true));
                let parts = attrs(&elem);
                let name = String::from_utf8(parts[0].2.clone()).unwrap();
                (name.trim_end_matches('\0').to_string(), attrs(&parts[1].2))
            })
            .collect();
        let names: Vec<&str> = expressions.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "payload",
                "bitwise",
                "cmp",
                "meta",
                "cmp",
                "immediate",
                "redir"
            ]
        );
        // What `nft --debug=netlink` shows for the same rule.
        let value = |attrs: &[Attr], kind: u16| -> Vec<u8> {
            let (_, _, nested) = attrs.iter().find(|(k, _, _)| *k == kind).unwrap();
            attrs_value(nested)
        };
        fn attrs_value(nested: &[u8]) -> Vec<u8> {
            attrs(nested)[0].2.clone()
        }
        assert_eq!(value(&expressions[1].1, 4), [0xff, 0xfe, 0, 0]);
        assert_eq!(value(&expressions[2].1, 3), [198, 18, 0, 0]);
        assert_eq!(value(&expressions[4].1, 3), [6]);
        assert_eq!(value(&expressions[5].1, 2), 40000u16.to_be_bytes());
        assert_eq!(expressions[6].1[2].2, 2u32.to_be_bytes());
    }

    #[test]
    fn answers_are_read_by_sequence_number_and_errno() {
        let error = |seq: u32, err: i32, extra: usize| {
            let len = 36 + extra;
            let mut a = vec![0u8; len];
            a[..4].copy_from_slice(&(len as u32).to_ne_bytes());
            a[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
            a[8..12].copy_from_slice(&seq.to_ne_bytes());
            a[16..20].copy_from_slice(&err.to_ne_bytes());
            a
        };
        let mut two = error(2, 0, 0);
        two.extend(error(4, -libc::EOPNOTSUPP, 20));
        assert_eq!(
            read_answers(&two).unwrap(),
            [(2, 0), (4, -libc::EOPNOTSUPP)]
        );
        assert!(read_answers(&[0u8; 8]).unwrap().is_empty());
        let mut cut = error(2, 0, 0);
        cut[..4].copy_from_slice(&100u32.to_ne_bytes());
        assert!(read_answers(&cut).is_err());
    }

    /// The expression names of a rule message's attributes.
    fn expression_names(rule: &[u8]) -> Vec<String> {
        let rule = attrs(rule);
        let (_, _, list) = rule
            .iter()
            .find(|(k, _, _)| *k == NFTA_RULE_EXPRESSIONS)
            .unwrap();
        attrs(list)
            .into_iter()
            .map(|(_, _, elem)| {
                let name = attrs(&elem)[0].2.clone();
                String::from_utf8(name)
                    .unwrap()
                    .trim_end_matches('\0')
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn the_egress_batch_logs_and_refuses_all_but_the_loopback_and_the_granted_ports_in_both_families(
    ) {
        let (batch, acks) = egress_batch(&[443, 8080], 1, 1);
        let m = messages(&batch);
        // Per family: the table, the chain, headers that carry another
        // destination, loopback, not-a-first-packet, two ports, TCP, the
        // other transports.
        assert_eq!(m.len(), 2 + 2 * 9);
        assert_eq!(acks, (2..=19).collect::<Vec<u32>>());
        let families: Vec<u8> = m[1..19].iter().map(|(_, _, _, f, _)| *f).collect();
        assert_eq!(families[..9], [NFPROTO_IPV4; 9]);
        assert_eq!(families[9..], [NFPROTO_IPV6; 9]);
        let chain = attrs(&m[2].4);
        assert_eq!(chain[4], (NFTA_CHAIN_TYPE, false, b"filter\0".to_vec()));
        let names: Vec<Vec<String>> = m[3..10].iter().map(|r| expression_names(&r.4)).collect();
        assert_eq!(
            names,
            [
                vec!["payload", "bitwise", "cmp", "log", "reject"],
                vec!["payload", "bitwise", "cmp", "immediate"],
                vec!["meta", "cmp", "payload", "bitwise", "cmp", "immediate"],
                vec!["meta", "cmp", "payload", "cmp", "immediate"],
                vec!["meta", "cmp", "payload", "cmp", "immediate"],
                vec!["meta", "cmp", "log", "reject"],
                vec!["meta", "cmp", "log", "reject"],
            ]
        );
        // IPv6 refuses every next header but TCP, UDP and ICMPv6, and its
        // loopback rule compares the whole address with ::1.
        assert_eq!(
            expression_names(&m[12].4),
            ["payload", "cmp", "cmp", "cmp", "log", "reject"]
        );
        assert_eq!(expression_names(&m[13].4), ["payload", "cmp", "immediate"]);
    }
}
