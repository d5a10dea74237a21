//! Network benchmark (not a timed test): connection setup and bulk
//! throughput to a server on the host's loopback, in one interleaved run,
//! four ways with the same client (`support/net_client.py`):
//!
//! * direct, on the host (the baseline);
//! * from inside one `spawnd run` sandbox granted `127.0.0.1:PORT`, through
//!   spawnd's relay;
//! * through tinyproxy, a CONNECT proxy named by `HTTPS_PROXY`, as proxy-based
//!   sandboxes do it, when tinyproxy is installed;
//! * through tinyproxy behind a socat bridge (loopback TCP → unix socket →
//!   TCP, a fork per connection at each end), the path sandbox-runtime's
//!   Linux sandbox gives its programs, when socat is installed too.
//!
//! Each run of the client is one process, so a spawn's cost is not part of
//! what it measures: `SPAWND_BENCH_N` (default 200) connections, each from
//! `connect()` to the first byte of the answer to a one-byte request, then
//! one download of `SPAWND_BENCH_BYTES` (default 1 GiB), from `connect()`
//! until the server closes. `SPAWND_BENCH_REPS` (default 5) rounds, every
//! way once per round. Medians and spread, against direct, as Markdown.
//!
//! Run: `scripts/bench` (everything, installs tinyproxy and socat) or
//! `cargo bench --bench network`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

const CLIENT: &str = include_str!("support/net_client.py");

/// The chunk the bulk server writes at a time.
const BULK_CHUNK: usize = 1 << 20;

/// One way of reaching the servers, and what its runs measured.
struct Way {
    name: String,
    /// Runs the client once and returns what it printed.
    run: Box<dyn Fn() -> Value>,
    setup: Vec<Duration>,
    /// Seconds each download took.
    bulk: Vec<f64>,
}

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let count: usize = env_or("SPAWND_BENCH_N", 200);
    let bytes: u64 = env_or("SPAWND_BENCH_BYTES", 1 << 30);
    let reps: usize = env_or("SPAWND_BENCH_REPS", 5);
    let setup_port = serve_setup();
    let bulk_port = serve_bulk(bytes);
    let client_args: Vec<String> = vec![
        "127.0.0.1".into(),
        setup_port.to_string(),
        bulk_port.to_string(),
        count.to_string(),
        bytes.to_string(),
    ];

    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("network.toml");
    std::fs::write(&manifest, manifest_text(setup_port, bulk_port)).expect("manifest");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[audit]\npath = \"{}\"\n",
            dir.path().join("audit.jsonl").display()
        ),
    )
    .expect("config");

    let mut ways = vec![
        Way::new("direct, on the host (baseline)", {
            let args = client_args.clone();
            move || run_client(host_client(&args, None))
        }),
        Way::new(
            "`spawnd run`, granted `127.0.0.1:PORT`, through spawnd's relay",
            {
                let spawnd = support::spawnd();
                let args = client_args.clone();
                move || {
                    let mut c = Command::new(&spawnd);
                    c.args(["run", "--json", "--config"])
                        .arg(&config)
                        .arg("--manifest")
                        .arg(&manifest)
                        .args(["--op", "client", "--arg"])
                        .arg(format!("code={CLIENT}"));
                    for (name, value) in ["host", "setup", "bulk", "count", "bytes"]
                        .iter()
                        .zip(&args)
                    {
                        c.arg("--arg").arg(format!("{name}={value}"));
                    }
                    relayed_output(c)
                }
            },
        ),
    ];
    // Kept alive until the end of the run; killed on drop.
    let mut peers = Vec::new();
    if let Some(proxy) = Peer::tinyproxy(dir.path()) {
        let proxy_port = proxy.port;
        ways.push(Way::new(
            format!("{}, `HTTPS_PROXY` (CONNECT), on the host", proxy.version),
            {
                let args = client_args.clone();
                move || run_client(host_client(&args, Some(proxy_port)))
            },
        ));
        peers.push(proxy);
        if let Some(bridge) = Peer::socat_bridge(dir.path(), proxy_port) {
            let bridge_port = bridge.port;
            peers.push(bridge);
            ways.push(Way::new(
                "tinyproxy behind a socat bridge (TCP → unix socket → TCP, a fork per connection at each end), `HTTPS_PROXY`",
                {
                    let args = client_args.clone();
                    move || run_client(host_client(&args, Some(bridge_port)))
                },
            ));
        }
    }

    for _ in 0..reps {
        for way in ways.iter_mut() {
            way.measure();
        }
    }
    drop(peers);

    let table = table(&mut ways, count, reps, bytes);
    println!("{table}");
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-network.md");
    if let Ok(mut f) = std::fs::File::create(&out) {
        let _ = f.write_all(table.as_bytes());
        eprintln!("written to {}", out.display());
    }
}

impl Way {
    fn new(name: impl Into<String>, run: impl Fn() -> Value + 'static) -> Way {
        Way {
            name: name.into(),
            run: Box::new(run),
            setup: Vec::new(),
            bulk: Vec::new(),
        }
    }

    fn measure(&mut self) {
        let out = (self.run)();
        let setup = out["setup_ns"].as_array().expect("setup_ns");
        self.setup.extend(
            setup
                .iter()
                .map(|ns| Duration::from_nanos(ns.as_u64().expect("setup time"))),
        );
        let bulk_ns = out["bulk_ns"].as_u64().expect("bulk_ns");
        self.bulk.push(bulk_ns as f64 / 1e9);
    }
}

/// The manifest: python3 running the client, granted the two servers.
fn manifest_text(setup_port: u16, bulk_port: u16) -> String {
    format!(
        r#"[connector]
name = "local://bench/network"
version = "1.0.0"

[capabilities.spawn]
programs = [{{ path = "/usr/bin/python3" }}]
network = ["127.0.0.1:{setup_port}", "127.0.0.1:{bulk_port}"]

[capabilities.spawn.limits]
wall_time_ms = 300000

[capabilities.spawn.operations.client]
argv = "python3 -c {{code}} {{host}} {{setup}} {{bulk}} {{count}} {{bytes}}"
"#
    )
}

/// The client on the host, through the proxy at `proxy` when given.
fn host_client(args: &[String], proxy: Option<u16>) -> Command {
    let mut c = Command::new("/usr/bin/python3");
    c.arg("-c").arg(CLIENT).args(args).env_remove("HTTPS_PROXY");
    if let Some(port) = proxy {
        c.env("HTTPS_PROXY", format!("http://127.0.0.1:{port}"));
    }
    c
}

/// Runs the client and parses what it printed.
fn run_client(mut c: Command) -> Value {
    let out = c.stdin(Stdio::null()).output().expect("client");
    assert!(
        out.status.success(),
        "client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("client output")
}

/// Runs `spawnd run --json` of the client and parses what the client
/// printed, checking that the relay carried every connection it opened.
fn relayed_output(mut c: Command) -> Value {
    let out = c.stdin(Stdio::null()).output().expect("spawnd run");
    let result: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("spawnd run: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    let data = &result["data"];
    assert_eq!(data["exit_code"], 0, "{result}");
    let text = data["stdout"]["text"].as_str().expect("stdout text");
    let client: Value = serde_json::from_str(text).expect("client output");
    let network = &data["network"];
    assert_eq!(network["connections"], client["connections"], "{network}");
    assert_eq!(network["refused"], 0, "{network}");
    client
}

/// A loopback server that answers each connection's one-byte request with
/// one byte, then closes. Returns its port.
fn serve_setup() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_nodelay(true);
            let mut request = [0u8; 1];
            if stream.read_exact(&mut request).is_ok() {
                let _ = stream.write_all(b"!");
            }
        }
    });
    port
}

/// A loopback server that sends `bytes` bytes to each connection after
/// its one-byte request, then closes. Returns its port.
fn serve_bulk(bytes: u64) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        let chunk = vec![0x5a_u8; BULK_CHUNK];
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 1];
            if stream.read_exact(&mut request).is_err() {
                continue;
            }
            let mut left = bytes;
            while left > 0 {
                let n = left.min(BULK_CHUNK as u64) as usize;
                if stream.write_all(&chunk[..n]).is_err() {
                    break;
                }
                left -= n as u64;
            }
        }
    });
    port
}

/// A peer's proxy processes, killed when dropped, and the port its
/// clients connect to.
struct Peer {
    children: Vec<Child>,
    port: u16,
    /// What `-v` says, for the table.
    version: String,
}

impl Drop for Peer {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Peer {
    /// tinyproxy on a free loopback port, in the foreground, logging only
    /// what is critical; `None` when it is not installed.
    fn tinyproxy(dir: &Path) -> Option<Peer> {
        let tinyproxy = which("tinyproxy")?;
        let port = free_port();
        let conf = dir.join("tinyproxy.conf");
        std::fs::write(
            &conf,
            format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients 100\n\
                 Allow 127.0.0.1\nLogLevel Critical\nLogFile \"{}\"\n",
                dir.join("tinyproxy.log").display()
            ),
        )
        .expect("tinyproxy config");
        let version = Command::new(&tinyproxy)
            .arg("-v")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .unwrap_or_default();
        let mut peer = Peer {
            children: Vec::new(),
            port,
            version,
        };
        peer.start(Command::new(tinyproxy).arg("-d").arg("-c").arg(&conf));
        peer.wait_until_listening("tinyproxy");
        Some(peer)
    }

    /// Two socats forking per connection: loopback TCP to a unix socket,
    /// and that socket to the proxy at `proxy_port`; `None` when socat is
    /// not installed.
    fn socat_bridge(dir: &Path, proxy_port: u16) -> Option<Peer> {
        let socat = which("socat")?;
        let socket = dir.join("proxy.sock");
        let mut peer = Peer {
            children: Vec::new(),
            port: free_port(),
            version: String::new(),
        };
        peer.start(
            Command::new(&socat)
                .arg(format!("UNIX-LISTEN:{},fork", socket.display()))
                .arg(format!("TCP:127.0.0.1:{proxy_port}")),
        );
        let start = Instant::now();
        while !socket.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "socat: no socket"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        peer.start(
            Command::new(&socat)
                .arg(format!(
                    "TCP-LISTEN:{},bind=127.0.0.1,fork,reuseaddr",
                    peer.port
                ))
                .arg(format!("UNIX-CONNECT:{}", socket.display())),
        );
        peer.wait_until_listening("socat");
        Some(peer)
    }

    fn start(&mut self, command: &mut Command) {
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("a peer's process");
        self.children.push(child);
    }

    fn wait_until_listening(&self, what: &str) {
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{what} does not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A loopback port free right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|p| p.is_file())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn median_f64(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn table(ways: &mut [Way], count: usize, reps: usize, bytes: u64) -> String {
    let gib = bytes as f64 / (1u64 << 30) as f64;
    let mut rows = Vec::new();
    for way in ways.iter_mut() {
        way.setup.sort();
        let throughput: Vec<f64> = way.bulk.iter().map(|s| gib / s).collect();
        let mut sorted = throughput.clone();
        let median = median_f64(&mut sorted);
        rows.push((
            percentile(&way.setup, 0.5),
            percentile(&way.setup, 0.1),
            percentile(&way.setup, 0.9),
            median,
            sorted[0],
            sorted[sorted.len() - 1],
        ));
    }
    let (direct_setup, direct_throughput) = (rows[0].0, rows[0].3);
    let mut table = format!(
        "{count} connections × {reps} runs per way, and one {gib} GiB download per run, interleaved; \
         setup is connect() to the first byte of the answer, timed inside the client's process\n\n\
         | way | setup p50 | p10–p90 | over direct | throughput (median) | min–max | vs direct |\n\
         |---|---|---|---|---|---|---|\n"
    );
    for (way, (p50, p10, p90, median, min, max)) in ways.iter().zip(&rows) {
        let over = p50.as_secs_f64() - direct_setup.as_secs_f64();
        table.push_str(&format!(
            "| {} | {} | {}–{} | {:+.3} ms | {:.2} GiB/s | {:.2}–{:.2} | {:.0}% |\n",
            way.name,
            support::ms(*p50),
            support::ms(*p10),
            support::ms(*p90),
            over * 1e3,
            median,
            min,
            max,
            100.0 * median / direct_throughput
        ));
    }
    let relay = rows[1];
    let over_ms = (relay.0.as_secs_f64() - direct_setup.as_secs_f64()) * 1e3;
    let share = 100.0 * relay.3 / direct_throughput;
    let met = |ok: bool| if ok { "met" } else { "not met" };
    table.push_str(&format!(
        "\nGoals for the relay: setup at most +0.200 ms over direct: {over_ms:+.3} ms, {}; \
         throughput at least 80% of direct: {share:.0}%, {}. A spawn without grants makes no \
         listeners and starts no relay: its cost is the spawn table's.\n",
        met(over_ms <= 0.2),
        met(share >= 80.0)
    ));
    table
}
