//! The checks behind the fuzz targets in `fuzz/` (run with `scripts/fuzz`),
//! kept here so the regression suite (`tests/fuzz_regressions.rs`) runs every
//! seed and every input a fuzzer ever found against exactly the same
//! assertions. Each function panics when a property breaks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use hickory_proto::op::{Message, MessageType};

use crate::audit::verify::verify_bytes;
use crate::daemon::request::request_from;
use crate::egress::client_hello::{classify, sni_matches, FirstFlight, MAX_FIRST_FLIGHT};
use crate::egress::dns::{next_tcp_message, respond, Outcome, TcpMessage, Transport};
use crate::egress::fake_pool::{in_fake_pool, GrantedNames};
use crate::egress::grant::{Grant, Host};
use crate::manifest::{parse_manifest, LoadOptions, Manifest, LIMIT_SPECS};
use crate::policy::{decide, Access, Caller, Decision, GateContext};
use crate::program::ProgramOpener;
use crate::rpc;
use crate::template::{ParamRule, Params, Pattern, Template};

/// Manifest parsing and validation on arbitrary text: never a panic; a
/// manifest that loads binds each operation to a declared program within
/// the limits' ceilings; a refusal names at least one problem.
pub fn manifest(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_manifest("fuzz.toml", text, LoadOptions::default()) {
        Ok(m) => {
            if let Some(spawn) = &m.spawn {
                for op in spawn.operations.values() {
                    assert!(op.program < spawn.programs.len());
                    assert!(op.limits.max_stdout_bytes <= LIMIT_SPECS[0].ceiling);
                    assert!(op.limits.max_stderr_bytes <= LIMIT_SPECS[1].ceiling);
                }
            }
        }
        Err(e) => {
            assert!(!e.problems.is_empty());
            let _ = e.to_string();
        }
    }
}

/// A placeholder rule picked by `choice` from a small palette over a tiny
/// alphabet (so literals, values and patterns collide as often as possible);
/// shared with the template's property tests.
pub(crate) fn rule(choice: u8) -> Option<ParamRule> {
    let base = ParamRule::default();
    let values = |vs: &[&str]| Some(vs.iter().map(|v| v.to_string()).collect());
    let pattern = |p: &str| Pattern::new(p).ok();
    Some(match choice % 11 {
        0 => return None,
        1 => ParamRule {
            allow_dash: true,
            ..base
        },
        2 => ParamRule {
            allow_empty: true,
            ..base
        },
        3 => ParamRule {
            values: values(&["a", "ab"]),
            ..base
        },
        4 => ParamRule {
            values: values(&["-a", "x"]),
            allow_dash: true,
            ..base
        },
        5 => ParamRule {
            pattern: pattern("[a:]+"),
            ..base
        },
        6 => ParamRule {
            pattern: pattern("[ax]+"),
            allow_dash: true,
            ..base
        },
        7 => ParamRule {
            pattern: pattern("a*"),
            allow_empty: true,
            ..base
        },
        8 => ParamRule {
            default: Some("a".into()),
            ..base
        },
        9 => ParamRule {
            values: values(&["x", "xa", "a"]),
            ..base
        },
        _ => ParamRule { max_len: 2, ..base },
    })
}

/// Template parsing, substitution and raw-argv matching, asserting the
/// agreement property: for a template the lint accepts, whatever
/// substitution produces the matcher finds again, with arguments that
/// substitute to exactly that argv; for any template, an argv the matcher
/// accepts is exactly what substitution makes of what it found.
///
/// Input: line 1 the template (string form), line 2 one rule choice per
/// placeholder, then `name=value` lines, a `--` line, and a raw argv after
/// the program token, one element per line.
pub fn template(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let Some(source) = lines.next() else { return };
    let choices = lines.next().unwrap_or("").as_bytes().to_vec();
    let Ok(t) = Template::parse_str(source) else {
        return;
    };
    let params: Params = t
        .placeholders()
        .iter()
        .zip(choices.iter().chain(std::iter::repeat(&0)))
        .filter_map(|(name, &c)| Some((name.to_string(), rule(c)?)))
        .collect();
    let mut args = BTreeMap::new();
    let mut argv = vec![t.program_token().to_string()];
    let mut in_args = true;
    for line in lines {
        if in_args {
            if line == "--" {
                in_args = false;
            } else if let Some((k, v)) = line.split_once('=') {
                args.insert(k.to_string(), v.to_string());
            }
        } else {
            argv.push(line.to_string());
        }
    }
    let program = "/usr/bin/prog";
    if t.check_unambiguous(&params).is_ok() {
        if let Ok(rendered) = t.substitute(&args, &params) {
            assert_eq!(
                rendered.first().map(String::as_str),
                Some(t.program_token())
            );
            let found = t
                .match_argv(&rendered, program, &params)
                .unwrap_or_else(|e| panic!("{} {rendered:?} {args:?}: {e:?}", t.shape()));
            assert_eq!(t.substitute(&found, &params).ok(), Some(rendered));
        }
    }
    if let Ok(found) = t.match_argv(&argv, program, &params) {
        assert_eq!(
            t.substitute(&found, &params).ok(),
            Some(argv.clone()),
            "{} accepted {argv:?} as {found:?}",
            t.shape()
        );
    }
}

fn coreutils() -> &'static Manifest {
    static M: OnceLock<Manifest> = OnceLock::new();
    M.get_or_init(|| {
        parse_manifest(
            "coreutils.toml",
            include_str!("../policies/coreutils.toml"),
            LoadOptions::default(),
        )
        .unwrap_or_else(|e| panic!("policies/coreutils.toml: {e}"))
    })
}

/// One JSON-RPC frame as the daemon handles it up to the gate: parsed,
/// turned into a spawn request, decided against `policies/coreutils.toml`.
/// Never a panic; an allowed plan has an argv, a denial a reason.
pub fn rpc_request(data: &[u8]) {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let call = match rpc::parse(line) {
        Ok(call) => call,
        Err((_, e)) => {
            let _ = rpc::failure(&serde_json::Value::Null, &e);
            return;
        }
    };
    if call.method != "spawn" && call.method != "spawn_op" {
        return;
    }
    let Ok(spawn) = request_from(&call.method, &call.params) else {
        return;
    };
    let m = coreutils();
    let name = m.connector.name.to_string();
    let caller = Caller {
        uid: 1000,
        gid: 1000,
        pid: Some(4242),
        home: "/home/fuzz".into(),
        workspace: None,
        other_user_namespace: false,
        label: None,
        origin: std::sync::Arc::new(crate::origin::Origin::via(crate::origin::Via::Daemon)),
    };
    let bound = BTreeSet::new();
    let ctx = GateContext {
        connector: &spawn.connector,
        manifest: (spawn.connector == name).then_some(m),
        disabled: false,
        access: &Access::Local,
        bound_credentials: &bound,
        require_program_hash: false,
        network_enabled: true,
    };
    match decide(&ctx, &caller, &spawn.request, &mut ProgramOpener::default()) {
        Decision::Allowed(plan) => assert!(!plan.argv.is_empty()),
        Decision::Denied(d) => assert!(!d.reason.as_str().is_empty()),
    }
}

/// Audit-chain verification on arbitrary bytes, with and without a key:
/// never a panic; a chain that verifies counts exactly its records.
pub fn audit_verify(data: &[u8]) {
    for key in [None, Some(&b"fuzz-key"[..])] {
        let v = verify_bytes(data, key);
        if v.tamper.is_none() {
            assert_eq!(v.records, v.last_seq);
        }
    }
}

/// Grant parsing on arbitrary text: never a panic; a grant that parses is
/// exactly its canonical form (so never a wildcard or a wider grant), with
/// a lowercase name of valid labels or a grantable address, and survives
/// serde; a refusal points inside the text, says how to write it instead,
/// and prints no control character.
pub fn grant(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Grant::parse(text) {
        Ok(grant) => {
            assert_eq!(grant.to_string(), text);
            assert!(!text.contains('*'));
            assert_ne!(grant.port(), 0);
            match grant.host() {
                Host::Name(name) => {
                    assert!(name.len() <= 253 && name.contains('.'));
                    assert!(name.split('.').all(|l| {
                        (1..=63).contains(&l.len())
                            && l.bytes()
                                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    }));
                }
                Host::Ip(ip) => {
                    assert!(!ip.is_unspecified());
                    match ip {
                        std::net::IpAddr::V4(v4) => assert!(!in_fake_pool(*v4)),
                        std::net::IpAddr::V6(v6) => assert!(v6.to_ipv4_mapped().is_none()),
                    }
                }
            }
            let json = serde_json::to_string(&grant).unwrap_or_default();
            assert_eq!(serde_json::from_str::<Grant>(&json).ok(), Some(grant));
        }
        Err(e) => {
            assert!(e.at <= text.len());
            assert!(!e.hint.is_empty());
            let shown = e.to_string();
            assert!(!shown.chars().any(char::is_control), "{shown:?}");
        }
    }
}

fn granted_names() -> &'static GrantedNames {
    static NAMES: OnceLock<GrantedNames> = OnceLock::new();
    NAMES.get_or_init(|| {
        let grants: Vec<Grant> = ["api.example.com:443", "a.b:1", "192.0.2.1:22"]
            .iter()
            .filter_map(|g| g.parse().ok())
            .collect();
        GrantedNames::new(&grants).unwrap_or_default()
    })
}

/// A DNS message as the stub handles it, over UDP and as the first
/// message of a TCP stream: never a panic; a reply is a response with the
/// message's id that decodes, within the UDP size the stub allows; an
/// answered name is lowercase LDH.
pub fn dns_query(data: &[u8]) {
    let mut messages = vec![(data, Transport::Udp)];
    if let TcpMessage::Complete { message, consumed } = next_tcp_message(data) {
        assert_eq!(consumed, message.len() + 2);
        messages.push((message, Transport::Tcp));
    }
    for (message, transport) in messages {
        let response = respond(message, granted_names(), transport);
        if let Some(reply) = &response.reply {
            assert_eq!(reply.get(..2), message.get(..2));
            let Ok(decoded) = Message::from_vec(reply) else {
                panic!("a reply that does not decode: {reply:?}");
            };
            assert_eq!(decoded.metadata.message_type, MessageType::Response);
            if transport == Transport::Udp {
                assert!(reply.len() <= 1232);
            }
        }
        if let Outcome::Answered { name, .. } = &response.outcome {
            assert!(name.len() <= 253);
            assert!(name.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            }));
        }
    }
}

/// The first bytes of a connection: never a panic; a server name is
/// lowercase printable ASCII without a trailing dot and matches itself;
/// 16 KiB or more is never "need more"; and a decision, once made on a
/// prefix, is the decision on the whole.
pub fn client_hello(data: &[u8]) {
    let whole = classify(data);
    if let FirstFlight::Tls { sni: Some(sni) } = &whole {
        assert!(!sni.is_empty() && !sni.ends_with('.') && sni.len() <= 255);
        assert!(sni
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase()));
        assert!(sni_matches(sni, sni));
    }
    if data.len() >= MAX_FIRST_FLIGHT {
        assert_ne!(whole, FirstFlight::NeedMore);
    }
    let step = (data.len() / 16).max(1);
    for cut in (0..data.len()).step_by(step) {
        let early = classify(&data[..cut]);
        if early != FirstFlight::NeedMore {
            assert_eq!(early, whole, "decided at {cut} of {}", data.len());
        }
    }
}

/// spawnd's reading of a first flight against a reference TLS server's
/// (`reference`: the server name it read from `data`, if it read a
/// ClientHello with one; the `client_hello_rustls` fuzz target asks
/// rustls). One way round: when the reference reads a name, spawnd reads
/// the same one (up to case and a trailing dot), or holds the bytes
/// (needs more), or refuses them. Passing them as not TLS, as a hello
/// without a name, or as one naming another server would let a name
/// nobody checked reach the server. The checks of [`client_hello`] hold
/// too.
pub fn client_hello_against(data: &[u8], reference: Option<&str>) {
    client_hello(data);
    let Some(name) = reference else {
        return;
    };
    match classify(data) {
        FirstFlight::NeedMore | FirstFlight::Malformed(_) => {}
        FirstFlight::Tls { sni: Some(sni) } if sni_matches(name, &sni) => {}
        other => panic!("the reference reads server name {name:?}; spawnd reads {other:?}"),
    }
}
