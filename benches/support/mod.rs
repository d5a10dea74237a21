//! Shared by the benchmarks: a `spawnd serve` with a small manifest
//! (`/usr/bin/true`, `/usr/bin/echo TOKEN`, `sleep`, `head -c` of zeros), a JSON-RPC client, percentiles,
//! RSS readings, and writing a bench's table where `scripts/bench` reads it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const CONNECTOR: &str = "local://bench/daemon";

pub const MANIFEST: &str = r#"
[connector]
name = "local://bench/daemon"
version = "1.0.0"

[capabilities.spawn]
programs = [{ path = "/usr/bin/true" }, { path = "/usr/bin/echo" }, { path = "/usr/bin/head" }, { path = "/usr/bin/sleep" }]

[capabilities.spawn.limits]
wall_time_ms = 300000
max_stdout_bytes = 67108864

[capabilities.spawn.operations.true]
argv = "true"

[capabilities.spawn.operations.true.limits]
wall_time_ms = 30000
max_stdout_bytes = 1048576

[capabilities.spawn.operations.echo]
argv = "echo {token}"

[capabilities.spawn.operations.echo.params.token]
pattern = "[a-z0-9-]{1,40}"

[capabilities.spawn.operations.echo.limits]
wall_time_ms = 30000
max_stdout_bytes = 1048576

[capabilities.spawn.operations.sleep]
argv = "sleep {seconds}"

[capabilities.spawn.operations.sleep.params.seconds]
pattern = "[0-9]{1,3}"

[capabilities.spawn.operations.flood]
argv = "head -c {bytes} /dev/zero"

[capabilities.spawn.operations.flood.params.bytes]
pattern = "[0-9]{1,12}"
"#;

/// The binary the benchmarks measure: Cargo builds it with the bench
/// profile (release settings) before the benchmark; `SPAWND_BENCH_BIN`,
/// when set, names another build to measure the same way (an A/B run
/// against an older commit).
pub fn spawnd() -> PathBuf {
    std::env::var_os("SPAWND_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_spawnd")))
}

/// One JSON-RPC connection.
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next: u64,
}

impl Client {
    pub fn connect(socket: &Path) -> Client {
        let s = UnixStream::connect(socket).expect("connect to the daemon");
        Client {
            reader: BufReader::new(s.try_clone().expect("clone")),
            writer: s,
            next: 0,
        }
    }

    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next += 1;
        let req = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        self.writer
            .write_all(format!("{req}\n").as_bytes())
            .map_err(|e| e.to_string())?;
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
        if v["id"] != json!(self.next) {
            return Err(format!(
                "answer for id {} to request {}",
                v["id"], self.next
            ));
        }
        match v.get("error") {
            Some(e) => Err(format!("{method}: {e}")),
            None => Ok(v["result"].clone()),
        }
    }

    /// spawn_op + spawn_status (to the end): the result and the round trip.
    pub fn spawn_and_wait(&mut self, op: &str, args: Value) -> Result<(Value, Duration), String> {
        let t = Instant::now();
        let handle = self.call(
            "spawn_op",
            json!({"connector": CONNECTOR, "op": op, "args": args}),
        )?["handle"]
            .as_str()
            .ok_or("no handle")?
            .to_string();
        let status = self.call("spawn_status", json!({"handle": handle, "wait_ms": 30_000}))?;
        let elapsed = t.elapsed();
        self.call("spawn_release", json!({ "handle": handle }))?;
        Ok((status, elapsed))
    }
}

/// The CPU time a process has used, user and system, all its threads.
pub fn cpu_time(pid: u32) -> Duration {
    stat_ticks(pid, 11)
}

/// The CPU time of a process's children it has reaped (and of theirs, as
/// each reaped its own), user and system.
pub fn reaped_children_cpu_time(pid: u32) -> Duration {
    stat_ticks(pid, 13)
}

/// Two consecutive tick counts of `/proc/PID/stat`, summed, as a duration:
/// `at` counts the fields after the command name (which may hold spaces),
/// from 0 for the state: utime is the 12th, stime the 13th, cutime and
/// cstime the 14th and 15th.
fn stat_ticks(pid: u32, at: usize) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let ticks = fields.get(at).copied().unwrap_or(0) + fields.get(at + 1).copied().unwrap_or(0);
    ticks_as_duration(ticks)
}

fn ticks_as_duration(ticks: u64) -> Duration {
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as u64;
    Duration::from_micros(ticks * 1_000_000 / per_second)
}

/// The CPU time the whole machine has been busy (every core; user, nice,
/// system, irq and softirq), from `/proc/stat`.
pub fn machine_busy_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks = stat
        .lines()
        .find_map(|l| l.strip_prefix("cpu "))
        .map_or(0, |fields| {
            fields
                .split_whitespace()
                .map(|f| f.parse::<u64>().unwrap_or(0))
                .enumerate()
                // user nice system idle iowait irq softirq steal…: not idle, iowait or steal.
                .filter(|(i, _)| matches!(i, 0 | 1 | 2 | 5 | 6))
                .map(|(_, t)| t)
                .sum()
        });
    ticks_as_duration(ticks)
}

pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The daemon's pid and its spawner's (its only child that is spawnd).
pub fn spawner_of(daemon: u32) -> Option<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{daemon}/task/{daemon}/children")).ok()?;
    children.split_whitespace().find_map(|p| p.parse().ok())
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// A count a bench takes from the environment variable `name` (how many
/// spawns, rounds or repetitions), or `default` when it is unset or not a
/// number.
pub fn count_from_env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

pub fn start_daemon(dir: &Path) -> (Child, PathBuf) {
    let spawnd = spawnd();
    let manifest = dir.join("daemon.toml");
    std::fs::write(&manifest, MANIFEST).expect("manifest");
    let run = dir.join("run");
    std::fs::create_dir_all(&run).expect("socket directory");
    std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o750))
        .expect("chmod");
    let socket = run.join("spawnd.sock");
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[audit]\npath = \"{}\"\n[server]\nsocket = \"{}\"\nmanifests = [\"{}\"]\nmax_connections = 64\n",
            dir.join("audit.jsonl").display(),
            socket.display(),
            manifest.display()
        ),
    )
    .expect("config");
    let child = Command::new(&spawnd)
        .args(["serve", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawnd serve");
    let t = Instant::now();
    while UnixStream::connect(&socket).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the daemon did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, socket)
}

/// Writes a bench's Markdown table to `target/bench-NAME.md` in the source
/// tree, where `scripts/bench` collects it (the directory is made when the
/// build's target directory is elsewhere); a table that cannot be written
/// stops the bench.
pub fn write_table(name: &str, table: &str) {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("target/bench-{name}.md"));
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    }
    std::fs::write(&out, table).unwrap_or_else(|e| panic!("write {}: {e}", out.display()));
    eprintln!("written to {}", out.display());
}
