//! One nf_tables batch, built by hand: a table `ip spawnd_learn` with a
//! `nat` chain on the output hook and one rule, as `nft` would send
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
//! A learning sandbox (`spawnd learn`) has no listener per port: every TCP
//! connection its program makes to a prefix (the fake pool) is redirected
//! to one listener on the sandbox's loopback, and spawnd reads where it was
//! going with `SO_ORIGINAL_DST`. The sandbox's init adds the rule while it
//! still holds CAP_NET_ADMIN over its namespace; the program never can.
//!
//! Hand-built for the reason `netlink.rs` is: one fixed message, sent from
//! init, with no `unsafe` (bytes with `to_ne_bytes`/`to_be_bytes`, sent and
//! read through `nix`). nf_tables' own values are big-endian; netlink's
//! headers are the machine's order.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use nix::sys::socket::{
    bind, recv, send, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};
use nix::sys::time::TimeVal;

/// The table the rule lives in.
pub const LEARN_TABLE: &str = "spawnd_learn";
/// Its chain.
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

/// `NF_INET_LOCAL_OUT`: the program's own packets, before routing.
const HOOK_LOCAL_OUT: u32 = 3;
/// `NF_IP_PRI_NAT_DST`: where destination NAT runs.
const PRIORITY_NAT_DST: i32 = -100;
const NF_ACCEPT: u32 = 1;
/// nf_tables' first 32-bit data register (`NFT_REG_1`).
const REG_1: u32 = 1;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
/// The destination address's offset in an IPv4 header.
const IPV4_DADDR_OFFSET: u32 = 16;
const NFT_CMP_EQ: u32 = 0;
const NFT_META_L4PROTO: u32 = 16;
const IPPROTO_TCP: u8 = 6;
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

/// The bytes of the batch that redirects every TCP connection to
/// `prefix/prefix_len` to port `port` of the loopback, its messages
/// numbered from `seq`: batch begin, the table, the chain, the rule, batch
/// end. The table, the chain and the rule ask for an acknowledgement
/// (sequence numbers `seq + 1` to `seq + 3`).
pub fn redirect_batch(prefix: Ipv4Addr, prefix_len: u8, port: u16, seq: u32) -> Vec<u8> {
    let mask = u32::MAX
        .checked_shl(32 - u32::from(prefix_len.min(32)))
        .unwrap_or(0);
    let network = u32::from(prefix) & mask;
    let create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    let mut batch = Vec::with_capacity(512);
    batch.extend(
        Message::new(
            NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            seq,
            0,
            NFNL_SUBSYS_NFTABLES,
        )
        .finish(),
    );
    let mut table = Message::new(nft_type(NFT_MSG_NEWTABLE), create, seq + 1, NFPROTO_IPV4, 0);
    table.string(NFTA_TABLE_NAME, LEARN_TABLE);
    batch.extend(table.finish());
    let mut chain = Message::new(nft_type(NFT_MSG_NEWCHAIN), create, seq + 2, NFPROTO_IPV4, 0);
    chain
        .string(NFTA_CHAIN_TABLE, LEARN_TABLE)
        .string(NFTA_CHAIN_NAME, CHAIN)
        .begin(NFTA_CHAIN_HOOK)
        .be32(NFTA_HOOK_HOOKNUM, HOOK_LOCAL_OUT)
        .attr(NFTA_HOOK_PRIORITY, &PRIORITY_NAT_DST.to_be_bytes())
        .end()
        .be32(NFTA_CHAIN_POLICY, NF_ACCEPT)
        .string(NFTA_CHAIN_TYPE, "nat");
    batch.extend(chain.finish());
    let rule_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_APPEND;
    let mut rule = Message::new(
        nft_type(NFT_MSG_NEWRULE),
        rule_flags,
        seq + 3,
        NFPROTO_IPV4,
        0,
    );
    rule.string(NFTA_RULE_TABLE, LEARN_TABLE)
        .string(NFTA_RULE_CHAIN, CHAIN)
        .begin(NFTA_RULE_EXPRESSIONS)
        // ip daddr & mask == network
        .expression("payload", |m| {
            m.be32(1, REG_1) // NFTA_PAYLOAD_DREG
                .be32(2, NFT_PAYLOAD_NETWORK_HEADER) // NFTA_PAYLOAD_BASE
                .be32(3, IPV4_DADDR_OFFSET) // NFTA_PAYLOAD_OFFSET
                .be32(4, 4); // NFTA_PAYLOAD_LEN
        })
        .expression("bitwise", |m| {
            m.be32(1, REG_1) // NFTA_BITWISE_SREG
                .be32(2, REG_1) // NFTA_BITWISE_DREG
                .be32(3, 4) // NFTA_BITWISE_LEN
                .data(4, &mask.to_be_bytes()) // NFTA_BITWISE_MASK
                .data(5, &[0; 4]); // NFTA_BITWISE_XOR
        })
        .expression("cmp", |m| {
            m.be32(1, REG_1) // NFTA_CMP_SREG
                .be32(2, NFT_CMP_EQ) // NFTA_CMP_OP
                .data(3, &network.to_be_bytes()); // NFTA_CMP_DATA
        })
        // meta l4proto == tcp
        .expression("meta", |m| {
            m.be32(1, REG_1) // NFTA_META_DREG
                .be32(2, NFT_META_L4PROTO); // NFTA_META_KEY
        })
        .expression("cmp", |m| {
            m.be32(1, REG_1).be32(2, NFT_CMP_EQ).data(3, &[IPPROTO_TCP]);
        })
        // redirect to :port
        .expression("immediate", |m| {
            m.be32(1, REG_1) // NFTA_IMMEDIATE_DREG
                .data(2, &port.to_be_bytes()); // NFTA_IMMEDIATE_DATA
        })
        .expression("redir", |m| {
            m.be32(1, REG_1) // NFTA_REDIR_REG_PROTO_MIN
                .be32(2, REG_1) // NFTA_REDIR_REG_PROTO_MAX
                .be32(3, NF_NAT_RANGE_PROTO_SPECIFIED); // NFTA_REDIR_FLAGS
        })
        .end();
    batch.extend(rule.finish());
    batch.extend(
        Message::new(
            NFNL_MSG_BATCH_END,
            NLM_F_REQUEST,
            seq + 4,
            0,
            NFNL_SUBSYS_NFTABLES,
        )
        .finish(),
    );
    batch
}

/// The kernel's answers in one read: for each `NLMSG_ERROR` among them,
/// its sequence number and errno (0 for an acknowledgement).
pub fn read_answers(answer: &[u8]) -> io::Result<Vec<(u32, i32)>> {
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
pub fn redirect_tcp_to_loopback_port(
    prefix: Ipv4Addr,
    prefix_len: u8,
    port: u16,
) -> io::Result<()> {
    let shown =
        format!("nf_tables: ip daddr {prefix}/{prefix_len} meta l4proto tcp redirect to :{port}");
    let named = |what: &str, e: nix::Error| {
        io::Error::new(io::Error::from(e).kind(), format!("{what} ({shown}): {e}"))
    };
    let sock = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkNetFilter,
    )
    .map_err(|e| named("socket(AF_NETLINK, NETLINK_NETFILTER)", e))?;
    bind(sock.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(|e| named("bind(netlink)", e))?;
    let within = TimeVal::new(ACK_WITHIN.as_secs() as _, 0);
    setsockopt(&sock, sockopt::ReceiveTimeout, &within)
        .map_err(|e| named("setsockopt(SO_RCVTIMEO)", e))?;
    let seq = 1;
    let batch = redirect_batch(prefix, prefix_len, port, seq);
    send(sock.as_raw_fd(), &batch, MsgFlags::empty()).map_err(|e| named("send", e))?;
    // An error answer echoes the whole request after its error field.
    let mut answer = vec![0u8; 8192];
    let mut acknowledged = Vec::new();
    while acknowledged.len() < 3 {
        let n =
            recv(sock.as_raw_fd(), &mut answer, MsgFlags::empty()).map_err(|e| named("recv", e))?;
        for (answered, errno) in read_answers(&answer[..n])? {
            if errno != 0 {
                let e = io::Error::from_raw_os_error(-errno);
                return Err(io::Error::new(e.kind(), format!("{shown}: {e}")));
            }
            if (seq + 1..=seq + 3).contains(&answered) && !acknowledged.contains(&answered) {
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
}
