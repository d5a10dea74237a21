//! A sandbox with network grants, at the `sandbox::launch` level (below the
//! spawn pipeline and its relay, which `network.rs` tests end to end): the
//! program inside reaches the listeners init handed to this process through
//! the fake pool and an IP-literal grant, every other TCP connection (but
//! to its loopback or a granted port) is refused at once and logged to the
//! socket handed over with them, the DNS
//! stub's UDP socket gets its queries, and `/etc/resolv.conf` names the stub.
//! A sandbox without grants gets none of it; a learning sandbox
//! (`spawnd learn`) gets every port of the pool redirected to one loopback
//! listener, whose connections say where they were going
//! (`SO_ORIGINAL_DST`), and other destinations refused and logged. Run as root, through a spare
//! sandbox too, and as the unprivileged user `nobody` (65534), which this
//! binary re-executes itself as. A launch needs a single-threaded process:
//! this runs in `spawnd-launch-checks netns` (integration/launch_checks/),
//! which the integration binary's test `netns::…` starts.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Command;

use spawnd::internals::egress::grant::Grant;
use spawnd::internals::egress::learning::Learning;
use spawnd::internals::manifest::{Limits, Sha256Digest, Tier};
use spawnd::internals::plan::{CwdPlan, FsPlan, ProgramPlan, SpawnPlan};
use spawnd::internals::sandbox::launch::{launch_order, LimitsVia, StdinSource};
use spawnd::internals::sandbox::network::Listeners;
use spawnd::internals::sandbox::order::{Design, RunAs};
use spawnd::internals::sandbox::spare::Spare;
use spawnd::internals::sandbox::spec::steps_mountable_ahead;

const PYTHON: &str = "/usr/bin/python3";
const GRANTED: u16 = 8443;
const OTHER: u16 = 8444;
const LITERAL: &str = "203.0.113.7";

/// What the program reports, one `name=value` line per check.
const SCRIPT: &str = r#"
import errno, socket
def tcp(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((host, port)); return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def udp_route(host):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((host, 9)); return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def bind(family, host, port):
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.bind((host, port)); return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def loopback(family, host):
    # A server on the sandbox's own loopback, on a port nobody granted,
    # serving a client in the same sandbox.
    try:
        srv = socket.socket(family, socket.SOCK_STREAM)
        srv.bind((host, 18080)); srv.listen(1)
        c = socket.socket(family, socket.SOCK_STREAM); c.settimeout(5)
        c.connect((host, 18080)); a, _ = srv.accept()
        a.sendall(b"pong"); return "ok" if c.recv(4) == b"pong" else "garbled"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
keep = []
print("pool_granted=" + tcp("198.18.0.1", 8443))
print("literal_granted=" + tcp("203.0.113.7", 8443))
print("pool_other_port=" + tcp("198.18.0.1", 8444))
print("elsewhere_granted_port=" + tcp("10.9.9.9", 8443))
print("route_pool=" + udp_route("198.18.0.1"))
print("route_elsewhere=" + udp_route("10.9.9.9"))
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"dns-query-from-inside", ("127.0.0.1", 53)); print("dns_sent=ok")
except OSError as e:
    print("dns_sent=" + errno.errorcode.get(e.errno, str(e.errno)))
print("bind_any6=" + bind(socket.AF_INET6, "::", 8443))
print("bind_lo4=" + bind(socket.AF_INET, "127.0.0.1", 8443))
print("loopback4=" + loopback(socket.AF_INET, "127.0.0.1"))
print("loopback6=" + loopback(socket.AF_INET6, "::1"))
for key, path in (("resolv", "/etc/resolv.conf"), ("hosts", "/etc/hosts")):
    try:
        print(key + "=" + repr(open(path).read()))
    except OSError as e:
        print(key + "=" + errno.errorcode.get(e.errno, str(e.errno)))
"#;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Via {
    Clone,
    Spare,
}

fn plan(network: &[&str], learning: Option<Learning>) -> SpawnPlan {
    SpawnPlan {
        connector: "local://test/netns".into(),
        version: "1".into(),
        manifest_sha256: Sha256Digest([0; 32]),
        manifest_path: String::new(),
        provenance: None,
        op: "probe".into(),
        op_mode: Tier::Readonly,
        program: ProgramPlan {
            declared: PYTHON.into(),
            resolved: std::fs::canonicalize(PYTHON).unwrap(),
            sha256: Sha256Digest([0; 32]),
            pinned: false,
            interpreter: None,
        },
        argv: vec!["python3".into(), "-c".into(), SCRIPT.into()],
        argv_shape: "python3 -c {script}".into(),
        env: Vec::new(),
        env_values: BTreeMap::new(),
        cwd: CwdPlan::FreshTemp,
        fs: FsPlan::default(),
        network: network.iter().map(|g| Grant::parse(g).unwrap()).collect(),
        action: None,
        network_learning: learning,
        on_violation: Default::default(),
        limits: Limits::default(),
        exec: Default::default(),
    }
}

/// What one sandbox showed: the program's report, and the listeners.
struct Seen {
    report: BTreeMap<String, String>,
    listeners: Option<Listeners>,
}

fn run_sandbox(network: &[&str], learning: Option<Learning>, via: Via) -> Seen {
    let privileged = nix::unistd::geteuid().is_root();
    let plan = plan(network, learning);
    let system: Vec<PathBuf> = ["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let run_as = RunAs {
        uid: 65534,
        gid: 65534,
        privileged,
        limits_via: LimitsVia::Rlimits,
        check_as: None,
    };
    // The sandbox's front door, as the pipeline goes through it: the spec
    // with the files every spawn's sandbox gets in /etc, and the filter.
    let ordered = Design::new(&plan, &system, &run_as, 0, false)
        .unwrap()
        .order(
            File::open(&plan.program.resolved).unwrap(),
            &[],
            StdinSource::Null,
        )
        .unwrap();
    let spec = ordered.spec().clone();
    let filter = ordered.filter();
    let spare = match via {
        Via::Clone => None,
        Via::Spare => {
            let mut spare = Spare::make().unwrap();
            spare
                .make_ready_for(
                    (65534, 65534, privileged),
                    steps_mountable_ahead(&spec.mounts),
                )
                .unwrap();
            Some(spare)
        }
    };
    let mut launched = launch_order(
        &ordered.order,
        &filter.instructions,
        ordered.program,
        StdinSource::Null,
        spare,
        None,
    )
    .unwrap_or_else(|e| panic!("launch: {e}"));
    // Taken before the release: the program cannot run without them.
    let listeners = launched.take_listeners();
    let running = launched.start_program().unwrap();
    let mut out = String::new();
    File::from(running.stdout).read_to_string(&mut out).unwrap();
    let mut err = String::new();
    File::from(running.stderr).read_to_string(&mut err).unwrap();
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(running.init_pid), None);
    let report: BTreeMap<String, String> = out
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert!(
        report.contains_key("resolv"),
        "program output: {out}\n{err}"
    );
    Seen { report, listeners }
}

/// Accepts one connection on `listener` (already queued) and returns the
/// address the program dialed, as the accepted socket's own name.
fn accept_dialed(listener: &OwnedFd) -> SocketAddr {
    use nix::sys::socket::{accept4, getsockname, SockFlag, SockaddrIn6};
    let fd =
        accept4(listener.as_raw_fd(), SockFlag::SOCK_CLOEXEC).expect("accept a queued connection");
    let name: SockaddrIn6 = getsockname(fd).unwrap();
    let _ = nix::unistd::close(fd);
    let ip = name.ip();
    let ip = ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4);
    SocketAddr::new(ip, name.port())
}

fn check_with_grants(via: Via) {
    let seen = run_sandbox(&["api.example.com:8443", "203.0.113.7:8443"], None, via);
    let r = &seen.report;
    let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("missing");
    assert_eq!(get("pool_granted"), "ok", "{r:?}");
    assert_eq!(get("literal_granted"), "ok", "{r:?}");
    // Another port of the pool: refused at once by the sandbox's rules,
    // and logged.
    assert_eq!(get("pool_other_port"), "ECONNREFUSED", "{r:?}");
    // Every address is routed to the loopback: on a granted port another
    // address reaches the listener too, where spawnd judges it.
    assert_eq!(get("elsewhere_granted_port"), "ok", "{r:?}");
    assert_eq!(get("route_pool"), "ok", "{r:?}");
    assert_eq!(get("route_elsewhere"), "ok", "{r:?}");
    assert_eq!(get("dns_sent"), "ok", "{r:?}");
    // The granted port is the listener's, which holds [::]:8443 without
    // SO_REUSE*: the program cannot take it over.
    assert_eq!(get("bind_any6"), "EADDRINUSE", "{r:?}");
    assert_eq!(get("bind_lo4"), "EADDRINUSE", "{r:?}");
    // Its own loopback is its own, on any other port.
    assert_eq!(get("loopback4"), "ok", "{r:?}");
    assert_eq!(get("loopback6"), "ok", "{r:?}");
    assert_eq!(get("resolv"), "'nameserver 127.0.0.1\\n'", "{r:?}");
    assert_eq!(
        get("hosts"),
        "'127.0.0.1 localhost\\n::1 localhost ip6-localhost ip6-loopback\\n'",
        "{r:?}"
    );
    let listeners = seen.listeners.expect("listeners handed over");
    assert_eq!(listeners.ports(), vec![GRANTED]);
    let granted = &listeners.tcp[0].1;
    let first = accept_dialed(granted);
    let second = accept_dialed(granted);
    assert_eq!(
        first,
        SocketAddr::new("198.18.0.1".parse().unwrap(), GRANTED)
    );
    assert_eq!(second, SocketAddr::new(LITERAL.parse().unwrap(), GRANTED));
    let mut buf = [0u8; 512];
    let n = nix::sys::socket::recv(
        listeners.dns_udp.as_raw_fd(),
        &mut buf,
        nix::sys::socket::MsgFlags::empty(),
    )
    .expect("the DNS query is queued on the UDP listener");
    assert_eq!(&buf[..n], b"dns-query-from-inside");
    assert_eq!(
        logged(&listeners),
        [("198.18.0.1".parse().unwrap(), 6, Some(8444))]
    );
    // The sockets' own properties, from this side.
    for (_, fd) in &listeners.tcp {
        let fd = fd.as_fd();
        let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        assert!(flags & libc::O_NONBLOCK != 0, "nonblocking");
        let v6only =
            nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::Ipv6V6Only).unwrap();
        assert!(!v6only, "dual-stack");
        assert!(!nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::ReuseAddr).unwrap());
        assert!(!nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::ReusePort).unwrap());
    }
    let _ = OTHER;
}

fn check_without_grants(via: Via) {
    let seen = run_sandbox(&[], None, via);
    let r = &seen.report;
    let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("missing");
    assert!(seen.listeners.is_none());
    assert_eq!(get("route_pool"), "ENETUNREACH", "{r:?}");
    // Without grants nothing but the loopback has a route.
    assert_eq!(get("pool_granted"), "ENETUNREACH", "{r:?}");
    assert_eq!(get("loopback4"), "ok", "{r:?}");
    assert_eq!(get("loopback6"), "ok", "{r:?}");
    let host = std::fs::read_to_string("/etc/resolv.conf").unwrap();
    assert_eq!(
        get("resolv"),
        format!("{host:?}").replace('"', "'"),
        "{r:?}"
    );
}

/// Accepts one connection on a learning listener (already queued) and
/// returns where the program was going, before the redirect.
fn accept_original(listener: &OwnedFd) -> SocketAddr {
    use nix::sys::socket::{getsockopt, sockopt};
    let listener = std::net::TcpListener::from(listener.try_clone().unwrap());
    let (stream, _) = listener.accept().expect("accept a queued connection");
    let original = getsockopt(&stream, sockopt::OriginalDst).expect("SO_ORIGINAL_DST");
    SocketAddr::new(
        IpAddr::V4(u32::from_be(original.sin_addr.s_addr).into()),
        u16::from_be(original.sin_port),
    )
}

fn check_learning(via: Via) {
    let seen = run_sandbox(&[], Some(Learning::Record), via);
    let r = &seen.report;
    let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("missing");
    // Every port of the pool reaches spawnd's one listener.
    assert_eq!(get("pool_granted"), "ok", "{r:?}");
    assert_eq!(get("pool_other_port"), "ok", "{r:?}");
    // Addresses are not learned: refused at once, and logged.
    assert_eq!(get("literal_granted"), "ECONNREFUSED", "{r:?}");
    assert_eq!(get("elsewhere_granted_port"), "ECONNREFUSED", "{r:?}");
    assert_eq!(get("route_elsewhere"), "ok", "{r:?}");
    assert_eq!(get("dns_sent"), "ok", "{r:?}");
    // The program's own ports and loopback are its own.
    assert_eq!(get("bind_any6"), "ok", "{r:?}");
    assert_eq!(get("bind_lo4"), "ok", "{r:?}");
    assert_eq!(get("loopback4"), "ok", "{r:?}");
    assert_eq!(get("loopback6"), "ok", "{r:?}");
    assert_eq!(get("resolv"), "'nameserver 127.0.0.1\\n'", "{r:?}");
    let listeners = seen.listeners.expect("listeners handed over");
    let [(port, listener)] = listeners.tcp.as_slice() else {
        panic!("one learning listener: {:?}", listeners.ports());
    };
    assert_ne!(*port, 0);
    let pool = |p: u16| SocketAddr::new("198.18.0.1".parse().unwrap(), p);
    assert_eq!(accept_original(listener), pool(GRANTED));
    assert_eq!(accept_original(listener), pool(OTHER));
    assert_eq!(
        logged(&listeners),
        [
            ("203.0.113.7".parse().unwrap(), 6, Some(GRANTED)),
            ("10.9.9.9".parse().unwrap(), 6, Some(GRANTED))
        ]
    );
}

/// What the sandbox's rules refused and logged, as (destination,
/// protocol, port), read from the log socket init handed over.
fn logged(listeners: &Listeners) -> Vec<(IpAddr, u8, Option<u16>)> {
    let mut buf = vec![0u8; 65536];
    let mut seen = Vec::new();
    while let Ok(n) = nix::sys::socket::recv(
        listeners.refusal_log.as_raw_fd(),
        &mut buf,
        nix::sys::socket::MsgFlags::MSG_DONTWAIT,
    ) {
        seen.extend(
            spawnd::internals::sys::read_logged_packets(&buf[..n])
                .into_iter()
                .map(|p| (p.destination, p.protocol, p.port)),
        );
    }
    seen
}

fn scenarios(spares: bool) {
    let mut vias = vec![Via::Clone];
    if spares {
        vias.push(Via::Spare);
    }
    for via in vias {
        check_with_grants(via);
        println!("ok: a sandbox with grants ({via:?})");
        check_without_grants(via);
        println!("ok: a sandbox without grants ({via:?})");
        check_learning(via);
        println!("ok: a learning sandbox ({via:?})");
    }
}

pub fn main() {
    if std::env::var_os("SPAWND_NETNS_AS_NOBODY").is_some() {
        scenarios(false);
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        if std::env::var_os("SPAWND_TEST_ALLOW_SKIP").is_some() {
            println!("skipped: not root");
            return;
        }
        panic!("the netns tests run as root (and re-run as nobody); set SPAWND_TEST_ALLOW_SKIP=1 to skip");
    }
    scenarios(true);
    // As nobody: this binary again, through setpriv.
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .arg("netns")
        .env("SPAWND_NETNS_AS_NOBODY", "1")
        .output()
        .unwrap();
    print!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "as nobody: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
