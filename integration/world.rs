//! A small internet on this machine for black-box network tests: a
//! **world**, a network namespace the test creates (`ip netns add`, a
//! unique name), the host spawnd runs on, with `lo` up, a DNS server the
//! test controls, and a link (a veth pair) to its **internet**, a second
//! namespace holding the addresses the test gives the world and the
//! servers listening there. spawnd runs inside the world (`ip netns
//! exec`), so its own resolver (getaddrinfo in spawnd's network
//! namespace) asks the world's DNS server, and what it dials is the
//! internet's servers; the program it sandboxes gets its own namespace
//! from there, as always. The internet's addresses are not the world's
//! own: spawnd refuses a granted name that resolves to an address of its
//! host.
//!
//! * **The link**: the world is [`HOST_IP`] and [`HOST_IP6`] on `wan0`,
//!   with a route through it to each address of the internet
//!   ([`World::add_address`], on the internet's end `wan1`) and no other:
//!   any other address has no route. The internet routes everything back
//!   through `wan1`.
//!
//! * **Names**: `/etc/netns/<world>/resolv.conf` names `127.0.0.1`, where a
//!   thread of the test process answers over UDP from a table the test sets
//!   ([`World::map`]: any name to any addresses, changeable at any time,
//!   TTL 0) and logs every question ([`World::dns_queries`]); it answers
//!   at more addresses of the world when asked ([`World::dns_also_on`]).
//!   The world's `hosts` holds only `localhost`, so no name of the host's
//!   `/etc/hosts` leaks in. `ip netns exec` bind-mounts both over `/etc`
//!   for what it runs.
//! * **Servers**: [`World::http_server`], [`World::tcp_server`] and
//!   [`World::udp_server`] are threads of the test process whose sockets
//!   were made inside the internet, or the world for a loopback address
//!   (a thread that entered the namespace with `setns`; a socket keeps its
//!   namespace), and count what they accept or receive.
//!   [`World::host_tcp_server`] is a service of the world itself, on any
//!   of its addresses ([`World::add_host_address`]). [`World::start`]
//!   runs any program inside the internet and waits for it to say
//!   `ready`; [`World::start_http`] runs `world_http.py` (static files,
//!   HTTPS with a CA from [`World::make_tls`], `git http-backend`), which
//!   logs every request with its Host header and TLS server name
//!   ([`server_log`]).
//! * **spawnd**: [`World::operator_config`] writes a config with its own
//!   audit log, and [`World::spawnd`] a command running spawnd inside the
//!   world, optionally as another user ([`World::spawnd_as`]); [`Run`]
//!   parses what `spawnd run --json` printed.
//!
//! Dropping the world stops its servers, kills its processes, deletes both
//! namespaces and `/etc/netns/<world>`, also when a test panicked. Needs
//! root: without it a test fails, unless SPAWND_TEST_SKIP_PRIVILEGED asks
//! to skip.

// A harness: not every test file uses every part.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use nix::sched::{setns, CloneFlags};
use serde_json::Value;

/// The world's public-looking address: TEST-NET-3, a documentation range,
/// so spawnd refuses it unless the operator allows [`WORLD_CIDR`].
pub const WORLD_IP: &str = "203.0.113.10";
/// The range holding [`WORLD_IP`], for `[network] allow_cidrs`.
pub const WORLD_CIDR: &str = "203.0.113.0/24";
/// The world's own address on its link to the internet (TEST-NET-1), the
/// source of what spawnd dials.
pub const HOST_IP: &str = "192.0.2.1";
/// The world's own IPv6 address on that link.
pub const HOST_IP6: &str = "2001:db8:ffff::1";

/// The Python that runs `world_http.py` (and tests' helper scripts).
pub const PYTHON: &str = "/usr/bin/python3";
/// The HTTP(S) server program [`World::start_http`] runs.
const WORLD_HTTP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/integration/world_http.py");

/// The spawnd binary under test: Cargo names it to the integration tests,
/// and `spawnd-launch-checks`, a binary of the same build, has it beside
/// itself.
pub fn spawnd_binary() -> PathBuf {
    match option_env!("CARGO_BIN_EXE_spawnd") {
        Some(path) => PathBuf::from(path),
        None => std::env::current_exe().unwrap().with_file_name("spawnd"),
    }
}

/// How long a server program gets to say `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the world's server threads look at their stop flag.
const POLL: Duration = Duration::from_millis(20);

/// One question the world's DNS server was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsQuery {
    /// Lowercase, without the trailing dot.
    pub name: String,
    pub record_type: RecordType,
}

/// The name table and the question log, shared with the DNS thread.
#[derive(Default)]
struct Dns {
    names: Mutex<BTreeMap<String, Vec<IpAddr>>>,
    queries: Mutex<Vec<DnsQuery>>,
}

/// A network namespace with its DNS server, its internet, servers and
/// processes.
pub struct World {
    name: String,
    /// The internet's namespace.
    internet: String,
    dir: tempfile::TempDir,
    dns: Arc<Dns>,
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    processes: Mutex<Vec<Child>>,
}

impl World {
    /// A new world with `lo` up, its link to an internet holding
    /// [`WORLD_IP`], and its DNS server answering nothing yet (every name
    /// NXDOMAIN). Without root it fails
    /// the test, unless SPAWND_TEST_SKIP_PRIVILEGED asks to skip: then
    /// `None`.
    pub fn new() -> Option<World> {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var_os("SPAWND_TEST_SKIP_PRIVILEGED").is_some(),
                "a world network namespace needs root: run as root, or set SPAWND_TEST_SKIP_PRIVILEGED=1 to skip"
            );
            eprintln!("skipped: a world network namespace needs root");
            return None;
        }
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "spawnd-world-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::SeqCst)
        );
        let internet = format!("{name}-net");
        run_checked(Command::new("ip").args(["netns", "add", &name]));
        run_checked(Command::new("ip").args(["netns", "add", &internet]));
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let world = World {
            name,
            internet,
            dir,
            dns: Arc::default(),
            stop: Arc::default(),
            threads: Mutex::default(),
            processes: Mutex::default(),
        };
        world.link_to_the_internet();
        world.add_address(WORLD_IP.parse().unwrap());
        let etc = world.etc();
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("hosts"), "127.0.0.1 localhost\n::1 localhost\n").unwrap();
        std::fs::write(etc.join("resolv.conf"), "nameserver 127.0.0.1\n").unwrap();
        world.start_dns();
        Some(world)
    }

    /// The namespace's name (as `ip netns` knows it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The internet's namespace's name (as `ip netns` knows it).
    pub fn internet_name(&self) -> &str {
        &self.internet
    }

    /// `lo` up in both namespaces, and the veth pair between them: the
    /// world's end `wan0` with [`HOST_IP`] and [`HOST_IP6`], the
    /// internet's `wan1` its route back for everything. Duplicate address
    /// detection is off in both, so IPv6 works at once (a tentative
    /// link-local address sends no neighbour solicitation).
    fn link_to_the_internet(&self) {
        for ns in [&self.name, &self.internet] {
            run_checked(Command::new("ip").args(["-n", ns, "link", "set", "lo", "up"]));
            run_checked(
                Command::new("ip")
                    .args(["netns", "exec", ns, "sysctl", "-qw"])
                    .args([
                        "net.ipv6.conf.all.accept_dad=0",
                        "net.ipv6.conf.default.accept_dad=0",
                    ]),
            );
        }
        let ip_in = |ns: &str, args: &[&str]| {
            run_checked(Command::new("ip").args(["-n", ns]).args(args));
        };
        ip_in(
            &self.name,
            &[
                "link",
                "add",
                "wan0",
                "type",
                "veth",
                "peer",
                "name",
                "wan1",
                "netns",
                &self.internet,
            ],
        );
        ip_in(
            &self.name,
            &["addr", "add", &format!("{HOST_IP}/32"), "dev", "wan0"],
        );
        ip_in(
            &self.name,
            &[
                "addr",
                "add",
                &format!("{HOST_IP6}/128"),
                "dev",
                "wan0",
                "nodad",
            ],
        );
        ip_in(&self.name, &["link", "set", "wan0", "up"]);
        ip_in(&self.internet, &["link", "set", "wan1", "up"]);
        ip_in(&self.internet, &["route", "add", "default", "dev", "wan1"]);
        ip_in(
            &self.internet,
            &["-6", "route", "add", "default", "dev", "wan1"],
        );
    }

    /// A path in the world's scratch directory (mode 0755, so the
    /// sandbox's uid 65534 can read what the test makes readable).
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// `/etc/netns/<world>`, which `ip netns exec` mounts over `/etc`'s
    /// files.
    fn etc(&self) -> PathBuf {
        Path::new("/etc/netns").join(&self.name)
    }

    /// Adds `ip` to the internet's end of the link, `wan1` (a /32 or
    /// /128), and a route to it through the world's end, so servers can
    /// listen there and spawnd can dial it. On `wan1` rather than `lo`:
    /// IPv6 neighbour discovery answers only for an address of the
    /// interface asked.
    pub fn add_address(&self, ip: IpAddr) {
        add_address_in(&self.internet, ip, "wan1");
        let host = host_prefix(ip);
        run_checked(
            Command::new("ip").args(["-n", &self.name, "route", "add", &host, "dev", "wan0"]),
        );
    }

    /// Adds `ip` to the world's own link `wan0`: an address of the host
    /// spawnd runs on, as a public address on a machine's uplink is.
    pub fn add_host_address(&self, ip: IpAddr) {
        add_address_in(&self.name, ip, "wan0");
    }

    /// From now on the world's DNS server answers `name` with `ips` (its
    /// IPv4 ones to A, its IPv6 ones to AAAA); an empty list answers
    /// NOERROR with no address.
    pub fn map(&self, name: &str, ips: &[IpAddr]) {
        self.dns
            .names
            .lock()
            .unwrap()
            .insert(name.to_ascii_lowercase(), ips.to_vec());
    }

    /// Every question the world's DNS server was asked so far, in order.
    pub fn dns_queries(&self) -> Vec<DnsQuery> {
        self.dns.queries.lock().unwrap().clone()
    }

    /// Runs `f` on a thread inside the world's network namespace: the
    /// sockets it makes belong to the world wherever they are used later.
    pub fn in_world<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        in_namespace(&self.name, f)
    }

    /// Runs `f` on a thread inside the internet's network namespace.
    pub fn in_internet<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        in_namespace(&self.internet, f)
    }

    /// Runs `f` where a server on `addr` belongs: the world for a
    /// loopback address (its own services, which only it reaches), the
    /// internet for any other.
    fn where_served<T: Send>(&self, addr: SocketAddr, f: impl FnOnce() -> T + Send) -> T {
        if addr.ip().is_loopback() {
            self.in_world(f)
        } else {
            self.in_internet(f)
        }
    }

    /// The DNS server on 127.0.0.1:53 (UDP) of the world.
    fn start_dns(&self) {
        self.dns_also_on(SocketAddr::from(([127, 0, 0, 1], 53)));
    }

    /// The world's DNS server answers on `addr` (UDP) too, from the same
    /// table and into the same question log: a resolver on the internet,
    /// as a program would hard-code one (`addr`'s address must be the
    /// internet's, [`World::add_address`]).
    pub fn dns_also_on(&self, addr: SocketAddr) {
        let socket = self.where_served(addr, || UdpSocket::bind(addr).unwrap());
        socket.set_read_timeout(Some(POLL)).unwrap();
        let dns = self.dns.clone();
        let stop = self.stop.clone();
        self.spawn_thread(move || {
            let mut buf = [0u8; 1500];
            while !stop.load(Ordering::SeqCst) {
                let Ok((n, from)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                if let Some(reply) = dns_reply(&buf[..n], &dns) {
                    let _ = socket.send_to(&reply, from);
                }
            }
        });
    }

    fn spawn_thread(&self, f: impl FnOnce() + Send + 'static) {
        self.threads.lock().unwrap().push(std::thread::spawn(f));
    }

    /// A TCP server on `addr` on the internet (in the world for a
    /// loopback address): each accepted connection is counted, then
    /// handed to `serve` on a thread of its own.
    pub fn tcp_server(
        &self,
        addr: SocketAddr,
        serve: impl Fn(TcpStream) + Send + Sync + 'static,
    ) -> TcpServer {
        let listener = self.where_served(addr, || TcpListener::bind(addr).unwrap());
        self.serve_tcp(listener, serve)
    }

    /// A TCP server on `addr` in the world itself, a service of the host
    /// spawnd runs on (`0.0.0.0:P` listens on every address the world
    /// has), served as [`World::tcp_server`] serves.
    pub fn host_tcp_server(
        &self,
        addr: SocketAddr,
        serve: impl Fn(TcpStream) + Send + Sync + 'static,
    ) -> TcpServer {
        let listener = self.in_world(|| TcpListener::bind(addr).unwrap());
        self.serve_tcp(listener, serve)
    }

    /// Counts each connection `listener` accepts and hands it to `serve`
    /// on a thread of its own, until the world is dropped.
    fn serve_tcp(
        &self,
        listener: TcpListener,
        serve: impl Fn(TcpStream) + Send + Sync + 'static,
    ) -> TcpServer {
        let addr = listener.local_addr().unwrap();
        let serve = Arc::new(serve);
        listener.set_nonblocking(true).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let stop = self.stop.clone();
        self.spawn_thread(move || {
            while !stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        count.fetch_add(1, Ordering::SeqCst);
                        let _ = stream.set_nonblocking(false);
                        let serve = serve.clone();
                        std::thread::spawn(move || serve(stream));
                    }
                    Err(_) => std::thread::sleep(POLL),
                }
            }
        });
        TcpServer { addr, accepted }
    }

    /// A UDP server on `addr` on the internet (in the world for a
    /// loopback address) that counts the datagrams it receives and
    /// answers none.
    pub fn udp_server(&self, addr: SocketAddr) -> UdpServer {
        let socket = self.where_served(addr, || UdpSocket::bind(addr).unwrap());
        socket.set_read_timeout(Some(POLL)).unwrap();
        let received = Arc::new(AtomicUsize::new(0));
        let count = received.clone();
        let stop = self.stop.clone();
        self.spawn_thread(move || {
            let mut buf = [0u8; 65536];
            while !stop.load(Ordering::SeqCst) {
                if socket.recv_from(&mut buf).is_ok() {
                    count.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        UdpServer { addr, received }
    }

    /// An HTTP server on `0.0.0.0:port` on the internet that answers
    /// every request with 200 and `body`, and counts what it accepts.
    pub fn http_server(&self, port: u16, body: &'static str) -> TcpServer {
        self.tcp_server(SocketAddr::from(([0, 0, 0, 0], port)), move |stream| {
            answer_http(stream, body)
        })
    }

    /// Starts `argv` on the internet and waits until it prints a line
    /// `ready` on stdout; its stderr goes to `<name>.stderr` in the
    /// scratch directory. It is killed when the world is dropped.
    pub fn start(&self, name: &str, argv: &[&str]) {
        let stderr = File::create(self.path(&format!("{name}.stderr"))).unwrap();
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.internet])
            .args(argv)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        self.processes.lock().unwrap().push(child);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.trim() == "ready" {
                    let _ = tx.send(());
                }
            }
        });
        if rx.recv_timeout(READY_TIMEOUT).is_err() {
            let said = std::fs::read_to_string(self.path(&format!("{name}.stderr")));
            panic!("{name} did not become ready: {said:?}");
        }
    }

    /// Starts `world_http.py` on `0.0.0.0:port` on the internet, serving the
    /// files under `root`, with `extra` options (`--cert F --key F` for
    /// HTTPS, `--git-root D` for `git http-backend` at `/git/`). Returns
    /// its request log, `<name>.log` in the scratch directory (one line
    /// per request, [`server_log`]).
    pub fn start_http(&self, name: &str, port: u16, root: &Path, extra: &[&str]) -> PathBuf {
        let log = self.path(&format!("{name}.log"));
        let port = port.to_string();
        let mut argv = vec![
            PYTHON,
            WORLD_HTTP,
            "--port",
            &port,
            "--root",
            root.to_str().unwrap(),
            "--log",
            log.to_str().unwrap(),
        ];
        argv.extend_from_slice(extra);
        self.start(name, &argv);
        log
    }

    /// A directory `rel` in the scratch directory owned by 65534 (the
    /// program's uid when spawnd runs as root, and `nobody`'s), for it to
    /// write into.
    pub fn writable_dir(&self, rel: &str) -> PathBuf {
        let dir = self.path(rel);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        dir
    }

    /// A CA and a server certificate for `name` signed by it, made with
    /// openssl in `tls/` of the scratch directory; the CA certificate is
    /// copied alone to `ca/`, a directory a manifest can give the sandbox
    /// as an `fs_read` scope.
    pub fn make_tls(&self, name: &str) -> Tls {
        let dir = self.path("tls");
        std::fs::create_dir_all(&dir).unwrap();
        let at = |f: &str| dir.join(f);
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        run_checked(
            Command::new("openssl")
                .args(["req", "-x509"])
                .args(ec)
                .args(["-days", "2", "-subj", "/CN=spawnd test CA", "-keyout"])
                .arg(at("ca.key"))
                .arg("-out")
                .arg(at("ca.pem")),
        );
        run_checked(
            Command::new("openssl")
                .arg("req")
                .args(ec)
                .arg("-subj")
                .arg(format!("/CN={name}"))
                .arg("-keyout")
                .arg(at("server.key"))
                .arg("-out")
                .arg(at("server.csr")),
        );
        std::fs::write(
            at("server.ext"),
            format!(
                "subjectAltName=DNS:{name}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
            ),
        )
        .unwrap();
        run_checked(
            Command::new("openssl")
                .args(["x509", "-req", "-days", "2", "-CAcreateserial", "-in"])
                .arg(at("server.csr"))
                .arg("-CA")
                .arg(at("ca.pem"))
                .arg("-CAkey")
                .arg(at("ca.key"))
                .arg("-extfile")
                .arg(at("server.ext"))
                .arg("-out")
                .arg(at("server.pem")),
        );
        let public = self.path("ca");
        std::fs::create_dir_all(&public).unwrap();
        std::fs::copy(at("ca.pem"), public.join("ca.pem")).unwrap();
        Tls {
            ca: public.join("ca.pem"),
            cert: at("server.pem"),
            key: at("server.key"),
        }
    }

    /// The `world_http.py` options that make it serve HTTPS with `tls`.
    pub fn https_options(tls: &Tls) -> [&str; 4] {
        [
            "--cert",
            tls.cert.to_str().unwrap(),
            "--key",
            tls.key.to_str().unwrap(),
        ]
    }

    /// An operator config at `<name>.toml` in the scratch directory: the
    /// audit log `<name>.audit.jsonl` beside it, then `body` (e.g. a
    /// `[network]` table).
    pub fn operator_config(&self, name: &str, body: &str) -> PathBuf {
        let path = self.path(&format!("{name}.toml"));
        let audit = self.path(&format!("{name}.audit.jsonl"));
        std::fs::write(
            &path,
            format!("[audit]\npath = \"{}\"\n{body}", audit.display()),
        )
        .unwrap();
        path
    }

    /// spawnd inside the world with `config` as its operator config.
    pub fn spawnd(&self, config: &Path) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.name])
            .arg(spawnd_binary())
            .env("SPAWND_CONFIG", config);
        command
    }

    /// spawnd inside the world as `uid`/`gid` with no supplementary
    /// groups (`setpriv`, after `ip netns exec` mounted the world's files).
    pub fn spawnd_as(&self, uid: u32, gid: u32, config: &Path) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.name, "setpriv"])
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .arg(spawnd_binary())
            .env("SPAWND_CONFIG", config);
        command
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for mut child in self.processes.lock().unwrap().drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
        for thread in self.threads.lock().unwrap().drain(..) {
            let _ = thread.join();
        }
        for ns in [&self.name, &self.internet] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(self.etc());
    }
}

/// What [`World::make_tls`] made.
pub struct Tls {
    /// The CA's certificate, alone in its directory.
    pub ca: PathBuf,
    /// The server's certificate and key.
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The lines of a `world_http.py` log so far: `METHOD PATH HOST SNI`, with
/// `-` for a missing Host header or SNI (and for plain HTTP).
pub fn server_log(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A server in the world and what it accepted.
pub struct TcpServer {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

impl TcpServer {
    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// A UDP server in the world and what it received.
pub struct UdpServer {
    pub addr: SocketAddr,
    received: Arc<AtomicUsize>,
}

impl UdpServer {
    /// Datagrams received so far.
    pub fn received(&self) -> usize {
        self.received.load(Ordering::SeqCst)
    }
}

/// Reads one request (whatever it is) and answers 200 with `body`.
fn answer_http(mut stream: TcpStream, body: &str) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut request = [0u8; 4096];
    let _ = stream.read(&mut request);
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// The DNS server's reply to `query`: the question logged, then its name's
/// addresses of the asked type, or NXDOMAIN for a name not in the table.
/// Anything it cannot decode gets no reply.
fn dns_reply(query: &[u8], dns: &Dns) -> Option<Vec<u8>> {
    let message = Message::from_vec(query).ok()?;
    if message.metadata.message_type != MessageType::Query {
        return None;
    }
    let question = message.queries.first()?.clone();
    let name = question
        .name()
        .to_ascii()
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let record_type = question.query_type();
    dns.queries.lock().unwrap().push(DnsQuery {
        name: name.clone(),
        record_type,
    });
    let mut reply = Message::response(message.metadata.id, message.metadata.op_code);
    reply.metadata.recursion_desired = message.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    reply.add_query(question.clone());
    match dns.names.lock().unwrap().get(&name) {
        None => reply.metadata.response_code = ResponseCode::NXDomain,
        Some(ips) => {
            for ip in ips {
                let rdata = match (ip, record_type) {
                    (IpAddr::V4(v4), RecordType::A) => RData::A(A(*v4)),
                    (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(*v6)),
                    _ => continue,
                };
                reply.add_answer(Record::from_rdata(question.name().clone(), 0, rdata));
            }
        }
    }
    reply.to_vec().ok()
}

/// Runs `f` on a thread inside the network namespace `ns` (as `ip netns`
/// knows it): the sockets it makes belong to it wherever they are used
/// later.
fn in_namespace<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    let ns = File::open(Path::new("/run/netns").join(ns)).unwrap();
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                setns(&ns, CloneFlags::CLONE_NEWNET).expect("setns into the namespace");
                f()
            })
            .join()
            .unwrap()
    })
}

/// `ip` as a /32 or /128.
fn host_prefix(ip: IpAddr) -> String {
    let prefix = if ip.is_ipv4() { 32 } else { 128 };
    format!("{ip}/{prefix}")
}

/// Adds `ip` (a /32 or /128) to interface `dev` in namespace `ns`. An
/// IPv6 address skips duplicate address detection (`nodad`): while it is
/// tentative, binding it fails with EADDRNOTAVAIL.
fn add_address_in(ns: &str, ip: IpAddr, dev: &str) {
    let mut command = Command::new("ip");
    command.args(["-n", ns, "addr", "add", &host_prefix(ip), "dev", dev]);
    if ip.is_ipv6() {
        command.arg("nodad");
    }
    run_checked(&mut command);
}

/// Runs `command` and panics with its output unless it succeeds.
pub fn run_checked(command: &mut Command) -> Output {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What one `spawnd run --json` showed.
pub struct Run {
    pub output: Output,
    /// The JSON envelope on stdout.
    pub json: Value,
    pub elapsed: Duration,
}

impl Run {
    /// Runs `command` (a `spawnd run --json …`) and parses its envelope.
    pub fn of(command: &mut Command) -> Run {
        let started = Instant::now();
        let output = command.output().unwrap();
        let elapsed = started.elapsed();
        let json: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {command:?}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        });
        Run {
            output,
            json,
            elapsed,
        }
    }

    /// The exit code of spawnd (the program's own when it ran).
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    /// The program's stdout as text.
    pub fn stdout(&self) -> &str {
        self.json["data"]["stdout"]["text"].as_str().unwrap_or("")
    }

    /// The program's stderr as text.
    pub fn stderr(&self) -> &str {
        self.json["data"]["stderr"]["text"].as_str().unwrap_or("")
    }

    /// The result's `network` object.
    pub fn network(&self) -> &Value {
        &self.json["data"]["network"]
    }

    /// The network records of connections, in the order they ended.
    pub fn connections(&self) -> Vec<&Value> {
        self.network()["listed"]
            .as_array()
            .map(|list| list.iter().collect())
            .unwrap_or_default()
    }
}
