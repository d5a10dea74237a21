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
//! Each download's CPU time is measured too, per party, over the transfer
//! alone: the client's (its own `getrusage`), the server thread's (its
//! `/proc/thread-self/schedstat`), and the middle's (every thread of the
//! `spawnd run` process, or the proxy's processes and their forks, from
//! `/proc`), with the whole machine's (`/proc/stat`) beside them. Per GiB,
//! their sum bounds the throughput a way can reach on this machine's
//! cores, and so the relayed download against the direct one.
//!
//! Run: `scripts/bench` (everything, installs tinyproxy and socat) or
//! `cargo bench --bench network`.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

const CLIENT: &str = include_str!("support/net_client.py");

/// The chunk the bulk server writes at a time.
const BULK_CHUNK: usize = 1 << 20;

/// How long the bench waits for the bulk server's account of a download
/// after the client has exited.
const TRANSFER_REPORT: Duration = Duration::from_secs(60);

/// One way of reaching the servers, and what its runs measured.
struct Way {
    name: String,
    /// Short name for the CPU table.
    short: String,
    /// Runs the client once and returns what it printed, naming in the
    /// [`Middle`] the processes between the client and the server.
    run: Box<dyn Fn(&Middle) -> Value>,
    setup: Vec<Duration>,
    /// Seconds each download took.
    bulk: Vec<f64>,
    /// What each download cost, in CPU seconds.
    cpu: Vec<DownloadCpu>,
}

/// The CPU seconds one download cost, each party over its transfer.
#[derive(Clone, Copy, Default)]
struct DownloadCpu {
    client: f64,
    server: f64,
    /// The processes between them: spawnd, or the proxy and its bridge.
    middle: f64,
    /// The busiest of the middle's threads, when they are read one by one.
    middle_thread: Option<f64>,
    /// Every CPU of the machine, whatever ran on it.
    machine: f64,
    /// The transfer's wall time as the server saw it, seconds.
    wall: f64,
}

/// A process whose CPU time is part of the middle party's.
#[derive(Clone, Copy)]
enum Watched {
    /// Every thread of the process, read one by one to the nanosecond
    /// (spawnd's relay among them); a thread that ends within the transfer
    /// is not counted, so it suits a process whose threads outlive it.
    Threads(u32),
    /// The process and the children it forks per connection, running or
    /// reaped, in clock ticks (a thread or child that ends within the
    /// transfer is still counted).
    Forking(u32),
}

/// The middle's CPU time at one moment: the forking processes' in all,
/// and per thread of the processes read thread by thread.
#[derive(Default)]
struct MiddleSample {
    forking: Duration,
    threads: HashMap<String, Duration>,
}

impl MiddleSample {
    fn add(&mut self, watched: Watched) {
        match watched {
            Watched::Threads(pid) => {
                let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                    return;
                };
                for task in tasks.filter_map(|t| t.ok()) {
                    let task = format!("{pid}/task/{}", task.file_name().to_string_lossy());
                    // A thread that ended since the listing has nothing
                    // left to read.
                    let Some(cpu) = thread_cpu(&task) else {
                        continue;
                    };
                    self.threads.insert(task, cpu);
                }
            }
            Watched::Forking(pid) => self.forking += ticks(process_tree_cpu_ticks(pid)),
        }
    }

    /// What the middle spent since `start`: in all, and by the thread that
    /// spent the most (`None` when no thread was read one by one).
    /// Each thread counts what it ran between the two samples, or since it
    /// started when `start` did not list it.
    fn since(&self, start: &MiddleSample) -> (Duration, Option<Duration>) {
        let ran: Vec<Duration> = self
            .threads
            .iter()
            .map(|(task, cpu)| {
                cpu.saturating_sub(start.threads.get(task).copied().unwrap_or_default())
            })
            .collect();
        let total = self.forking.saturating_sub(start.forking) + ran.iter().sum::<Duration>();
        (total, ran.into_iter().max())
    }
}

/// The processes between the client and the server in the current run:
/// the bench names them, the bulk server reads their CPU time at each end
/// of a transfer.
#[derive(Clone, Default)]
struct Middle(Arc<Mutex<Vec<Watched>>>);

impl Middle {
    fn set(&self, watched: Vec<Watched>) {
        *self.0.lock().expect("middle") = watched;
    }

    fn sample(&self) -> MiddleSample {
        let mut sample = MiddleSample::default();
        for &watched in self.0.lock().expect("middle").iter() {
            sample.add(watched);
        }
        sample
    }
}

/// What the bulk server measured over one transfer, from the client's
/// request to the client's close.
struct Transfer {
    wall: Duration,
    /// CPU time of the server's thread, of the middle's processes, and of
    /// every CPU of the machine.
    server: Duration,
    middle: Duration,
    machine: Duration,
    /// The busiest of the middle's threads, when they are read one by one.
    middle_thread: Option<Duration>,
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
    let middle = Middle::default();
    let (bulk_port, transfers) = serve_bulk(bytes, middle.clone());
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
        Way::new("direct, on the host (baseline)", "direct", {
            let args = client_args.clone();
            move |middle: &Middle| {
                middle.set(Vec::new());
                run_client(host_client(&args, None))
            }
        }),
        Way::new(
            "`spawnd run`, granted `127.0.0.1:PORT`, through spawnd's relay",
            "`spawnd run`, relayed",
            {
                let spawnd = support::spawnd();
                let args = client_args.clone();
                move |middle: &Middle| {
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
                    relayed_output(c, middle)
                }
            },
        ),
    ];
    // Kept alive until the end of the run; killed on drop.
    let mut peers = Vec::new();
    if let Some(proxy) = Peer::tinyproxy(dir.path()) {
        let proxy_port = proxy.port;
        let proxy_processes = proxy.watched();
        ways.push(Way::new(
            format!("{}, `HTTPS_PROXY` (CONNECT), on the host", proxy.version),
            "tinyproxy",
            {
                let args = client_args.clone();
                let watched = proxy_processes.clone();
                move |middle: &Middle| {
                    middle.set(watched.clone());
                    run_client(host_client(&args, Some(proxy_port)))
                }
            },
        ));
        peers.push(proxy);
        if let Some(bridge) = Peer::socat_bridge(dir.path(), proxy_port) {
            let bridge_port = bridge.port;
            let mut watched = proxy_processes;
            watched.extend(bridge.watched());
            peers.push(bridge);
            ways.push(Way::new(
                "tinyproxy behind a socat bridge (TCP → unix socket → TCP, a fork per connection at each end), `HTTPS_PROXY`",
                "tinyproxy behind socat",
                {
                    let args = client_args.clone();
                    move |middle: &Middle| {
                        middle.set(watched.clone());
                        run_client(host_client(&args, Some(bridge_port)))
                    }
                },
            ));
        }
    }

    for _ in 0..reps {
        for way in ways.iter_mut() {
            way.measure(&middle, &transfers);
        }
    }
    drop(peers);

    let mut table = table(&mut ways, count, reps, bytes);
    table.push('\n');
    table.push_str(&cpu_table(&ways, bytes));
    println!("{table}");
    support::write_table("network", &table);
}

impl Way {
    fn new(
        name: impl Into<String>,
        short: impl Into<String>,
        run: impl Fn(&Middle) -> Value + 'static,
    ) -> Way {
        Way {
            name: name.into(),
            short: short.into(),
            run: Box::new(run),
            setup: Vec::new(),
            bulk: Vec::new(),
            cpu: Vec::new(),
        }
    }

    fn measure(&mut self, middle: &Middle, transfers: &Receiver<Transfer>) {
        let out = (self.run)(middle);
        let setup = out["setup_ns"].as_array().expect("setup_ns");
        self.setup.extend(
            setup
                .iter()
                .map(|ns| Duration::from_nanos(ns.as_u64().expect("setup time"))),
        );
        let bulk_ns = out["bulk_ns"].as_u64().expect("bulk_ns");
        self.bulk.push(bulk_ns as f64 / 1e9);
        let transfer = transfers
            .recv_timeout(TRANSFER_REPORT)
            .expect("the bulk server's account of the download");
        self.cpu.push(DownloadCpu {
            client: out["bulk_cpu_ns"].as_u64().expect("bulk_cpu_ns") as f64 / 1e9,
            server: transfer.server.as_secs_f64(),
            middle: transfer.middle.as_secs_f64(),
            middle_thread: transfer.middle_thread.map(|t| t.as_secs_f64()),
            machine: transfer.machine.as_secs_f64(),
            wall: transfer.wall.as_secs_f64(),
        });
        // Each download is the bulk server's only connection.
        assert!(transfers.try_recv().is_err(), "one download per run");
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

/// Runs `spawnd run --json` of the client, naming spawnd's process as the
/// middle, and parses what the client printed, checking that the relay
/// carried every connection it opened. The middle is spawnd's own threads
/// (the relay's among them), not its children: those are the sandbox's
/// init and the client.
fn relayed_output(mut c: Command, middle: &Middle) -> Value {
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawnd run");
    middle.set(vec![Watched::Threads(child.id())]);
    let out = child.wait_with_output().expect("spawnd run");
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
/// its one-byte request, then closes its side and waits for the client to
/// close. Returns its port and, for each connection, what the transfer
/// cost: from the request to the client's close, which comes once the
/// client has every byte, so nothing still in flight is left out.
fn serve_bulk(bytes: u64, middle: Middle) -> (u16, Receiver<Transfer>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let (report, transfers) = mpsc::channel();
    std::thread::spawn(move || {
        let chunk = vec![0x5a_u8; BULK_CHUNK];
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 1];
            if stream.read_exact(&mut request).is_err() {
                continue;
            }
            let started = Instant::now();
            let server_start = own_thread_cpu();
            let middle_start = middle.sample();
            let machine_start = machine_busy_ticks();
            let mut left = bytes;
            while left > 0 {
                let n = left.min(BULK_CHUNK as u64) as usize;
                if stream.write_all(&chunk[..n]).is_err() {
                    break;
                }
                left -= n as u64;
            }
            let _ = stream.shutdown(std::net::Shutdown::Write);
            let _ = stream.read_to_end(&mut Vec::new());
            let (middle, middle_thread) = middle.sample().since(&middle_start);
            let transfer = Transfer {
                wall: started.elapsed(),
                server: own_thread_cpu().saturating_sub(server_start),
                middle,
                machine: ticks(machine_busy_ticks().saturating_sub(machine_start)),
                middle_thread,
            };
            if report.send(transfer).is_err() {
                return;
            }
        }
    });
    (port, transfers)
}

/// `n` of the kernel's clock ticks, the unit of `/proc`'s CPU times.
fn ticks(n: u64) -> Duration {
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .expect("sysconf(_SC_CLK_TCK)");
    Duration::from_secs_f64(n as f64 / per_second as f64)
}

/// The CPU time of one thread (`/proc/TASK/schedstat`'s first field, the
/// time it has run, which `/proc/TASK/stat` splits into user and system
/// time): `task` is `thread-self` or `PID/task/TID`. `None` once the
/// thread has ended.
fn thread_cpu(task: &str) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{task}/schedstat")).ok()?;
    let ns = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// The CPU time of the calling thread.
fn own_thread_cpu() -> Duration {
    thread_cpu("thread-self").expect("/proc/thread-self/schedstat")
}

/// The fields of a `/proc/.../stat` line after the command name, which may
/// hold spaces and parentheses: the state is the first.
fn stat_fields(path: &str) -> Vec<u64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let after_name = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    after_name
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect()
}

/// User + system ticks of process `pid` (every thread, living or ended)
/// and of its children: those it has reaped (cutime, cstime) and those
/// still running, each counted the same way. A process gone reads as 0.
fn process_tree_cpu_ticks(pid: u32) -> u64 {
    let f = stat_fields(&format!("/proc/{pid}/stat"));
    // utime, stime, cutime and cstime: the 14th to 17th fields, counting
    // from the pid.
    let field = |i: usize| f.get(i).copied().unwrap_or(0);
    let running: u64 = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .map(process_tree_cpu_ticks)
        .sum();
    field(10) + field(11) + field(12) + field(13) + running
}

/// Ticks every CPU of the machine has spent busy (user, nice, system,
/// interrupts; not idle, waiting for I/O or stolen by the hypervisor).
fn machine_busy_ticks() -> u64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = text.lines().find_map(|l| l.strip_prefix("cpu ")) else {
        return 0;
    };
    let f: Vec<u64> = cpu
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let field = |i: usize| f.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal: guest time is in user.
    field(0) + field(1) + field(2) + field(5) + field(6)
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
    /// Its processes, each with the children it forks per connection.
    fn watched(&self) -> Vec<Watched> {
        self.children
            .iter()
            .map(|c| Watched::Forking(c.id()))
            .collect()
    }

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

/// The CPU each party spent per GiB downloaded (medians of the rounds),
/// and the throughput those costs allow on this machine: every party needs
/// its CPU seconds per GiB, so together they cannot go faster than the
/// cores divided by their sum, nor faster than one core divided by the
/// busiest thread's.
fn cpu_table(ways: &[Way], bytes: u64) -> String {
    let gib = bytes as f64 / (1u64 << 30) as f64;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut table = format!(
        "CPU seconds per GiB downloaded, each party over its transfer (medians of the rounds), \
         and the throughput they allow on {cores} cores\n\n\
         | way | client | server | relay or proxy | sum | whole machine | cores busy | \
         {cores} cores ÷ sum | 1 core ÷ busiest thread | bound | measured | measured ÷ bound |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    let mut bounds = Vec::new();
    for way in ways {
        let per_gib = |part: fn(&DownloadCpu) -> f64| {
            median_f64(&mut way.cpu.iter().map(part).collect::<Vec<_>>()) / gib
        };
        let client = per_gib(|c| c.client);
        let server = per_gib(|c| c.server);
        let middle = per_gib(|c| c.middle);
        let machine = per_gib(|c| c.machine);
        let busy = median_f64(
            &mut way
                .cpu
                .iter()
                .map(|c| c.machine / (c.wall * cores as f64))
                .collect::<Vec<_>>(),
        );
        let sum = client + server + middle;
        let by_cores = cores as f64 / sum;
        // The client and the server are one thread each; the middle's
        // threads count one by one where they were read so.
        let middle_thread = way
            .cpu
            .iter()
            .map(|c| c.middle_thread)
            .collect::<Option<Vec<_>>>()
            .map(|mut t| median_f64(&mut t) / gib);
        let busiest = client.max(server).max(middle_thread.unwrap_or(0.0));
        let by_thread = 1.0 / busiest;
        let bound = by_cores.min(by_thread);
        let measured = median_f64(&mut way.bulk.iter().map(|s| gib / s).collect::<Vec<_>>());
        let middle = match middle_thread {
            _ if way.cpu.iter().all(|c| c.middle == 0.0) => "—".to_string(),
            Some(thread) => format!("{middle:.3} ({thread:.3} its busiest thread)"),
            None => format!("{middle:.3}"),
        };
        table.push_str(&format!(
            "| {} | {client:.3} | {server:.3} | {middle} | {sum:.3} | {machine:.3} | {:.0}% | \
             {by_cores:.2} GiB/s | {by_thread:.2} GiB/s | {bound:.2} GiB/s | {measured:.2} GiB/s | \
             {:.0}% |\n",
            way.short,
            100.0 * busy,
            100.0 * measured / bound,
        ));
        bounds.push((bound, measured));
    }
    if let [(direct_bound, direct), (relayed_bound, relayed), ..] = bounds[..] {
        let ceiling = 100.0 * relayed_bound / direct;
        let of_bounds = 100.0 * relayed_bound / direct_bound;
        let measured = 100.0 * relayed / direct;
        let verdict = match (ceiling < 80.0, of_bounds < 80.0) {
            (true, _) => "above the ceiling: this machine's cores cannot carry it",
            (false, true) => {
                "within the ceiling and above the ratio of the bounds: the cores allow it \
                 only with the relayed download nearer its bound than the direct one comes \
                 to its own"
            }
            (false, false) => "within both",
        };
        table.push_str(&format!(
            "\nRelayed against direct on {cores} cores: measured {measured:.0}%. Ceiling, the \
             relayed bound against the direct download as measured: {ceiling:.0}%. With both \
             equally near their bounds (relayed bound ÷ direct bound): {of_bounds:.0}%. The \
             relay's goal, 80%, is {verdict}.\n"
        ));
    }
    table
}
