//! A small internet for the relay's tests, with no real network
//! (network.md §1.5). Three threads of the test process each enter a new
//! network namespace (`unshare(CLONE_NEWNET)` acts on the calling thread
//! only):
//!
//! * the **world**: `lo` up with "public" addresses 16.0.0.1 and
//!   16.0.0.2, and 10.0.0.5 and 169.254.169.254 for the policy's cases;
//!   upstream servers on `[::]` (echo on [`ECHO`] and [`TLS`], a server
//!   that speaks first on [`BANNER`]) on a current-thread runtime, so
//!   every socket they make is in the world;
//! * the **host**, spawnd's side: `lo` up, [`HOST_ADDRESS`] on a veth
//!   whose peer is in the world, a route to each of the world's addresses
//!   through it, and the relay on a current-thread runtime. The world's
//!   addresses are not the host's, as the internet's are not spawnd's
//!   (the relay refuses a name that resolves to an address of its own
//!   host);
//! * the **sandbox**: `lo` up, the fake pool and each granted address
//!   routed `local` on it, the listeners the sandbox's init would make,
//!   sent to the host over a channel (sockets keep their namespace),
//!   then the test's client code, with blocking std sockets. A learning
//!   scenario's sandbox is set up by init's own code (routes, listener and
//!   the nf_tables redirect).
//!
//! `ip` commands run as children of the thread that needs them, and a
//! child starts in its parent thread's namespaces. Without the right to
//! unshare (not root), the tests print why and pass without running.

use crate::sandbox::network::Listeners;
use std::collections::{BTreeSet, HashMap};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use nix::errno::Errno;
use nix::sched::{unshare, CloneFlags};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::egress::grant::{Grant, Host};

use super::resolve::Resolving;
use super::{serve, ConnectionRecord, NetEvent, RelayConfig, RelayMode, Resolve, Summary};
use crate::egress::learning::Learning;
use crate::sandbox::network::{set_up_network, NetworkSetup};

/// The upstream echo port.
pub(super) const ECHO: u16 = 7;
/// An upstream echo port for TLS-shaped traffic.
pub(super) const TLS: u16 = 443;
/// The upstream port whose server sends [`BANNER_TEXT`] on accepting,
/// then echoes.
pub(super) const BANNER: u16 = 25;
/// What the banner server says first.
pub(super) const BANNER_TEXT: &[u8] = b"220 upstream ready\r\n";

/// The world's addresses besides loopback.
const WORLD_ADDRESSES: [&str; 4] = ["16.0.0.1", "16.0.0.2", "10.0.0.5", "169.254.169.254"];

/// The host's address on its link to the world, the source of what the
/// relay dials.
pub(super) const HOST_ADDRESS: &str = "16.0.9.1";

/// How long a client socket waits before a test fails rather than hangs.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// A test's grants (or learning), resolver table and relay settings.
pub(super) struct Scenario {
    pub mode: RelayMode,
    pub names: HashMap<String, Vec<IpAddr>>,
    pub config: RelayConfig,
}

impl Scenario {
    /// Grants from their text, names resolving as given, and a config
    /// with short timeouts.
    pub(super) fn new(grants: &[&str], names: &[(&str, &[&str])]) -> Scenario {
        Scenario {
            mode: RelayMode::Grants(grants.iter().map(|g| g.parse().unwrap()).collect()),
            names: names
                .iter()
                .map(|(name, ips)| {
                    let ips = ips.iter().map(|ip| ip.parse().unwrap()).collect();
                    (name.to_string(), ips)
                })
                .collect(),
            config: RelayConfig {
                connect_timeout: Duration::from_secs(2),
                idle_timeout: Duration::from_secs(10),
                first_flight_timeout: Duration::from_secs(2),
                ..RelayConfig::default()
            },
        }
    }

    /// A learning relay, names resolving as given, short timeouts.
    pub(super) fn learning(learning: Learning, names: &[(&str, &[&str])]) -> Scenario {
        Scenario {
            mode: RelayMode::Learning(learning),
            ..Scenario::new(&[], names)
        }
    }
}

/// The tests' resolver: a fixed table; any other name fails. Counts
/// what it is asked.
struct TableResolver(HashMap<String, Vec<IpAddr>>, Arc<AtomicUsize>);

impl Resolve for TableResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> Resolving<'a> {
        self.1.fetch_add(1, Ordering::Relaxed);
        let found = self.0.get(name).cloned();
        Box::pin(async move {
            found.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not in the table"))
        })
    }
}

/// What the client code can do besides connecting: end the spawn, and
/// learn when an upstream connection saw its client close.
pub(super) struct Client {
    stop: CancellationToken,
    served: std::sync::mpsc::Receiver<()>,
    upstream_closed: std::sync::mpsc::Receiver<()>,
}

impl Client {
    /// Ends the spawn and waits until `serve` has returned.
    pub(super) fn stop_relay(&self) {
        self.stop.cancel();
        self.served
            .recv_timeout(CLIENT_TIMEOUT)
            .expect("serve returns after stop");
    }

    /// Waits until an upstream connection reads the end of its stream.
    pub(super) fn upstream_saw_eof(&self) -> bool {
        self.upstream_closed.recv_timeout(CLIENT_TIMEOUT).is_ok()
    }
}

/// What the relay reported, once stopped, and what the world saw.
pub(super) struct Finished {
    pub events: Vec<NetEvent>,
    pub summary: Summary,
    /// Connections the upstream servers accepted.
    pub upstream_accepted: usize,
    /// Bytes the upstream servers read, over all their connections.
    pub upstream_received: usize,
    /// Names the relay asked its resolver for.
    pub resolved: usize,
}

impl Finished {
    /// The connection records, in the order they ended, durations zeroed
    /// so records compare whole.
    pub(super) fn connections(&self) -> Vec<ConnectionRecord> {
        self.events
            .iter()
            .filter_map(|event| match event {
                NetEvent::Connection(record) => Some(ConnectionRecord {
                    duration_ms: 0,
                    ..record.clone()
                }),
                _ => None,
            })
            .collect()
    }
}

/// Runs `client` in a sandbox namespace against a relay serving
/// `scenario` in a host namespace linked to the world; stops the relay
/// when `client` returns (or panics) and gives back what it reported.
/// `None` when this process may not make network namespaces and
/// SPAWND_TEST_SKIP_PRIVILEGED asks to skip (without it, the test fails).
pub(super) fn run(
    scenario: Scenario,
    client: impl FnOnce(&Client) + Send + 'static,
) -> Option<Finished> {
    if let Err(why) = thread::spawn(enter_new_netns).join().unwrap() {
        // A missing privilege fails the test unless skipping is asked for.
        assert!(
            std::env::var_os("SPAWND_TEST_SKIP_PRIVILEGED").is_some(),
            "unshare(CLONE_NEWNET) is not permitted here ({why}): run as root, or set SPAWND_TEST_SKIP_PRIVILEGED=1 to skip"
        );
        eprintln!("skipped: unshare(CLONE_NEWNET) is not permitted here ({why})");
        return None;
    }
    let stop = CancellationToken::new();
    let (listeners_tx, listeners_rx) = std::sync::mpsc::channel();
    let (served_tx, served_rx) = std::sync::mpsc::channel();
    let (closed_tx, closed_rx) = std::sync::mpsc::channel();
    let (client_done_tx, client_done_rx) = tokio::sync::oneshot::channel::<()>();
    let (host_ns_tx, host_ns_rx) = std::sync::mpsc::channel();
    let (world_up_tx, world_up_rx) = std::sync::mpsc::channel();
    let upstream = Upstream::default();
    let sandbox = {
        let mode = scenario.mode.clone();
        let client_side = Client {
            stop: stop.clone(),
            served: served_rx,
            upstream_closed: closed_rx,
        };
        thread::spawn(move || {
            // However the client code ends, the spawn ends with it, and
            // the world learns it is done (the sender dropped).
            let _stop_on_exit = client_side.stop.clone().drop_guard();
            let _done_on_exit = client_done_tx;
            enter_new_netns().expect("unshare the sandbox");
            listeners_tx
                .send(sandbox_listeners(&mode))
                .expect("the host takes the listeners");
            client(&client_side);
        })
    };
    let world = {
        let upstream = upstream.clone();
        thread::spawn(move || {
            enter_new_netns().expect("unshare the world");
            ip(&["link", "set", "lo", "up"]);
            for address in WORLD_ADDRESSES {
                ip(&["addr", "add", &format!("{address}/32"), "dev", "lo"]);
            }
            let host_ns: String = host_ns_rx.recv().expect("the host's namespace");
            let peer = ["peer", "name", "wan0", "netns", &host_ns];
            ip(&[&["link", "add", "wan1", "type", "veth"][..], &peer].concat());
            ip(&["link", "set", "wan1", "up"]);
            // Whatever the source, answers go back to the host.
            ip(&["route", "add", "default", "dev", "wan1"]);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                upstream.serve(closed_tx).await;
                let _ = world_up_tx.send(());
                // The upstream servers go on until the client code is
                // done, so they see what the relay's stop did to their
                // connections.
                let _ = client_done_rx.await;
            });
        })
    };
    let host = thread::spawn(move || {
        enter_new_netns().expect("unshare the host");
        let ns = format!(
            "/proc/{}/task/{}/ns/net",
            std::process::id(),
            nix::unistd::gettid()
        );
        host_ns_tx
            .send(ns)
            .expect("the world takes the host's namespace");
        world_up_rx.recv().expect("the world's link and servers");
        ip(&["link", "set", "lo", "up"]);
        ip(&["addr", "add", &format!("{HOST_ADDRESS}/32"), "dev", "wan0"]);
        ip(&["link", "set", "wan0", "up"]);
        for address in WORLD_ADDRESSES {
            ip(&["route", "add", &format!("{address}/32"), "dev", "wan0"]);
        }
        let listeners = listeners_rx.recv().expect("the sandbox's listeners");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(relay(scenario, listeners, stop, served_tx, upstream))
    });
    // The client's panic says more than the host's and the world's that
    // follow it.
    let sandbox_result = sandbox.join();
    let host_result = host.join();
    let world_result = world.join();
    if let Err(panic) = sandbox_result {
        std::panic::resume_unwind(panic);
    }
    if let Err(panic) = world_result {
        std::panic::resume_unwind(panic);
    }
    Some(host_result.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
}

/// The world's upstream servers and what they saw, shared with the host,
/// which reads it when the relay has stopped.
#[derive(Clone, Default)]
struct Upstream {
    accepted: Arc<AtomicUsize>,
    received: Arc<AtomicUsize>,
}

impl Upstream {
    /// Starts the servers on the world's runtime, listening once this
    /// returns.
    async fn serve(&self, upstream_closed: std::sync::mpsc::Sender<()>) {
        for (port, banner) in [(ECHO, None), (TLS, None), (BANNER, Some(BANNER_TEXT))] {
            let listener = tokio::net::TcpListener::bind(("::", port)).await.unwrap();
            tokio::spawn(upstream(
                listener,
                banner,
                upstream_closed.clone(),
                (self.accepted.clone(), self.received.clone()),
            ));
        }
    }
}

/// The relay, on the host, until it stops.
async fn relay(
    scenario: Scenario,
    listeners: Listeners,
    stop: CancellationToken,
    served: std::sync::mpsc::Sender<()>,
    upstream: Upstream,
) -> Finished {
    let resolved = Arc::new(AtomicUsize::new(0));
    let (events_tx, mut events_rx) = tokio::sync::mpsc::channel(256);
    let summary = serve(
        scenario.mode,
        scenario.config,
        listeners,
        Arc::new(TableResolver(scenario.names, resolved.clone())),
        events_tx,
        stop,
    )
    .await
    .expect("serve");
    let _ = served.send(());
    let mut events = Vec::new();
    while let Ok(event) = events_rx.try_recv() {
        events.push(event);
    }
    Finished {
        events,
        summary,
        upstream_accepted: upstream.accepted.load(Ordering::Relaxed),
        upstream_received: upstream.received.load(Ordering::Relaxed),
        resolved: resolved.load(Ordering::Relaxed),
    }
}

/// An upstream server: says `banner` to each connection, then echoes
/// until the client closes, and reports that close. Counts the
/// connections it accepts and the bytes it reads.
async fn upstream(
    listener: tokio::net::TcpListener,
    banner: Option<&'static [u8]>,
    closed: std::sync::mpsc::Sender<()>,
    (accepted, received): (Arc<AtomicUsize>, Arc<AtomicUsize>),
) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        accepted.fetch_add(1, Ordering::Relaxed);
        let closed = closed.clone();
        let received = received.clone();
        tokio::spawn(async move {
            if let Some(banner) = banner {
                let _ = stream.write_all(banner).await;
            }
            let mut buffer = [0u8; 4096];
            loop {
                match stream.read(&mut buffer).await {
                    Ok(0) => {
                        let _ = closed.send(());
                        return;
                    }
                    Ok(n) => {
                        received.fetch_add(n, Ordering::Relaxed);
                        if stream.write_all(&buffer[..n]).await.is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                }
            }
        });
    }
}

/// What the sandbox's init makes, in the calling thread's (new)
/// namespace: routes, then a dual-stack listener per granted port and
/// the DNS stub's sockets; for learning, what init's own code makes.
fn sandbox_listeners(mode: &RelayMode) -> Listeners {
    ip(&["link", "set", "lo", "up"]);
    let grants = match mode {
        RelayMode::Grants(grants) => grants,
        RelayMode::Learning(_) => {
            return set_up_network(&NetworkSetup::for_learning()).expect("the learning setup");
        }
    };
    ip(&["route", "add", "local", "198.18.0.0/15", "dev", "lo"]);
    for grant in grants {
        match grant.host() {
            Host::Ip(IpAddr::V4(v4)) => {
                ip(&["route", "add", "local", &format!("{v4}/32"), "dev", "lo"])
            }
            Host::Ip(IpAddr::V6(v6)) => ip(&[
                "-6",
                "route",
                "add",
                "local",
                &format!("{v6}/128"),
                "dev",
                "lo",
            ]),
            Host::Name(_) => {}
        }
    }
    let ports: BTreeSet<u16> = grants.iter().map(Grant::port).collect();
    Listeners {
        tcp: ports
            .into_iter()
            .map(|port| {
                let l = std::net::TcpListener::bind(("::", port)).unwrap();
                (port, OwnedFd::from(l))
            })
            .collect(),
        dns_udp: OwnedFd::from(UdpSocket::bind("[::]:53").unwrap()),
        dns_tcp: OwnedFd::from(std::net::TcpListener::bind("[::]:53").unwrap()),
        refusal_log: crate::sys::bind_log_group(
            crate::sandbox::network::REFUSAL_LOG_GROUP,
            crate::netlink::LOGGED_BYTES,
        )
        .expect("the refused-egress log"),
    }
}

/// Moves the calling thread into a new network namespace.
fn enter_new_netns() -> Result<(), Errno> {
    unshare(CloneFlags::CLONE_NEWNET)
}

/// Runs `ip` with `args` in the calling thread's network namespace.
fn ip(args: &[&str]) {
    let status = Command::new("ip")
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("ip {args:?}: {e}"));
    assert!(status.success(), "ip {args:?}: {status}");
}

/// A connection from the sandbox, with timeouts so a test fails rather
/// than hangs.
pub(super) fn connect(ip: &str, port: u16) -> io::Result<TcpStream> {
    let addr = SocketAddr::new(ip.parse().unwrap(), port);
    let stream = TcpStream::connect_timeout(&addr, CLIENT_TIMEOUT)?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    Ok(stream)
}

/// Sends `message` and reads as many bytes back.
pub(super) fn roundtrip(stream: &mut TcpStream, message: &[u8]) -> io::Result<Vec<u8>> {
    stream.write_all(message)?;
    read_exact(stream, message.len())
}

/// Reads exactly `len` bytes.
pub(super) fn read_exact(stream: &mut TcpStream, len: usize) -> io::Result<Vec<u8>> {
    let mut back = vec![0u8; len];
    stream.read_exact(&mut back)?;
    Ok(back)
}

/// What reading from a connection gives once the relay has ended it:
/// `Ok(0)` for a close, an error kind for a reset.
pub(super) fn read_end(stream: &mut TcpStream) -> Result<usize, io::ErrorKind> {
    let mut buffer = [0u8; 64];
    uninterrupted(|| stream.read(&mut buffer)).map_err(|e| e.kind())
}

/// Runs a blocking socket call again when a signal interrupted it. A
/// socket with a read timeout answers any signal the test process takes
/// (a stop and continue among them) with `EINTR`, even where the handler
/// asked for restarts (signal(7)); the call is asked again, its timeout
/// with it.
pub(super) fn uninterrupted<T>(mut call: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match call() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            done => return done,
        }
    }
}
