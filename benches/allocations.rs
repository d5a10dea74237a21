//! Allocations per spawn (not a timed test): how many blocks the static
//! build's allocator hands out (calls of dlmalloc's `malloc`, which every
//! `alloc`, `alloc_zeroed` and moving `realloc` of `src/sys/heap.rs` goes
//! through), counted by a uprobe on that function (`perf probe`, then
//! `perf stat`):
//!
//! - one `spawnd run` of /usr/bin/true: spawnd and the sandbox's init, from
//!   the process's start to its end (the median of `SPAWND_BENCH_N` runs);
//! - `spawnd --version`, the start-up every command pays (argument parsing);
//! - the daemon, once warm, per `spawn_op` + `spawn_status` + `spawn_release`
//!   of /usr/bin/true from one client in sequence: the daemon's own threads,
//!   and its spawner with the inits it starts.
//!
//! Run: `./scripts/bench-allocations` (as root: uprobes; it installs perf).
//! With `SPAWND_BENCH_PROFILE=DIR`, the daemon's and the spawner's
//! allocations are also recorded with their call chains into
//! `DIR/daemon.data` and `DIR/spawner.data`
//! (`perf report -i DIR/daemon.data --no-children`).
//! Needs the static musl build with `musl-dlmalloc` (the default), whose
//! allocator is a function of its own to probe. Not part of `scripts/bench`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

mod support;
use support::{count_from_env, spawnd, spawner_of, start_daemon, write_table, Client};

/// The uprobe's event: group and name.
const EVENT: &str = "spawnd_bench:malloc";

/// The address of dlmalloc's `malloc` in `binary`, from its symbol table.
fn malloc_address(binary: &Path) -> String {
    let out = Command::new("nm")
        .arg(binary)
        .output()
        .expect("nm (binutils)");
    let symbols = String::from_utf8_lossy(&out.stdout);
    let line = symbols
        .lines()
        .find(|l| l.contains("8dlmalloc8dlmalloc17Dlmalloc") && l.contains("6malloc17h"))
        .unwrap_or_else(|| {
            panic!(
                "{} has no dlmalloc malloc: build the static musl binary with musl-dlmalloc",
                binary.display()
            )
        });
    format!("0x{}", line.split_whitespace().next().expect("address"))
}

/// Puts the uprobe on `binary`'s `malloc` (and removes any left over).
fn add_probe(binary: &Path) {
    let _ = Command::new("perf")
        .args(["probe", "-q", "-d", EVENT])
        .stderr(Stdio::null())
        .status();
    let ok = Command::new("perf")
        .args(["probe", "-q", "-x"])
        .arg(binary)
        .arg("-a")
        .arg(format!("{EVENT}={}", malloc_address(binary)))
        .status()
        .expect("perf probe (scripts/bench-allocations installs perf)")
        .success();
    assert!(ok, "perf probe failed: run as root");
}

fn remove_probe() {
    let _ = Command::new("perf")
        .args(["probe", "-q", "-d", EVENT])
        .status();
}

/// The count `perf stat -x,` wrote to `file`.
fn read_count(file: &Path) -> u64 {
    let text = std::fs::read_to_string(file).expect("perf stat output");
    text.lines()
        .find(|l| l.contains(EVENT))
        .and_then(|l| l.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count in perf stat's output:\n{text}"))
}

/// Allocations of one run of `spawnd ARGS`, its children included.
fn allocations_of(args: &[&str], dir: &Path) -> u64 {
    let out = dir.join("stat.csv");
    let ok = Command::new("perf")
        .args(["stat", "-x,", "-e", EVENT, "-o"])
        .arg(&out)
        .arg("--")
        .arg(spawnd())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("perf stat")
        .success();
    assert!(ok, "spawnd {args:?} failed under perf stat");
    read_count(&out)
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// `perf` attached to `pid` (every thread, and the children it starts
/// meanwhile) until it is stopped, writing to `out`: `perf stat` counting
/// the probe's event, or with `SPAWND_BENCH_PROFILE` also `perf record`
/// of its call chains (for `perf report -i OUT --no-children`).
fn attach_perf(pid: u32, command: &[&str], out: &Path) -> Child {
    Command::new("perf")
        .args(command)
        .args(["-e", EVENT, "-o"])
        .arg(out)
        .args(["-p", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("perf attached to a process")
}

/// `perf stat`'s arguments before the event.
const COUNT: &[&str] = &["stat", "-x,"];
/// `perf record`'s arguments before the event.
const RECORD: &[&str] = &["record", "-q", "-m", "4096", "--call-graph", "dwarf,16384"];

/// Stops a counting `perf stat` (SIGINT makes it write its counts).
fn stop(mut perf: Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(perf.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    let _ = perf.wait();
}

fn main() {
    let n = count_from_env("SPAWND_BENCH_N", 20);
    let dir = tempfile::tempdir().expect("tempdir");
    let binary = spawnd();
    add_probe(&binary);

    let manifest = dir.path().join("true.toml");
    std::fs::write(
        &manifest,
        "[connector]\nname = \"local://bench/true\"\nversion = \"1.0.0\"\n\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/true\" }]\n\n[capabilities.spawn.operations.true]\nargv = \"true\"\n",
    )
    .expect("manifest");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[audit]\npath = \"{}\"\n",
            dir.path().join("run-audit.jsonl").display()
        ),
    )
    .expect("config");
    let run_args = [
        "run",
        "--config",
        config.to_str().expect("utf-8"),
        "--manifest",
        manifest.to_str().expect("utf-8"),
        "--op",
        "true",
    ];
    let run = median(
        (0..n)
            .map(|_| allocations_of(&run_args, dir.path()))
            .collect(),
    );
    let version = median(
        (0..n)
            .map(|_| allocations_of(&["--version"], dir.path()))
            .collect(),
    );

    let (mut daemon, socket) = start_daemon(dir.path());
    let pid = daemon.id();
    let mut client = Client::connect(&socket);
    // Warm: the spawner's spares made, the blocking pool started, the
    // metrics registered.
    for _ in 0..20 {
        client.spawn_and_wait("true", json!({})).expect("spawn_op");
    }
    std::thread::sleep(Duration::from_millis(300));
    let spawner = spawner_of(pid).expect("the daemon's spawner");
    let (daemon_out, spawner_out) = (
        dir.path().join("daemon.csv"),
        dir.path().join("spawner.csv"),
    );
    let mut counting = vec![
        attach_perf(pid, COUNT, &daemon_out),
        attach_perf(spawner, COUNT, &spawner_out),
    ];
    let profile = std::env::var_os("SPAWND_BENCH_PROFILE").map(std::path::PathBuf::from);
    if let Some(profile) = &profile {
        std::fs::create_dir_all(profile).expect("SPAWND_BENCH_PROFILE's directory");
        counting.push(attach_perf(pid, RECORD, &profile.join("daemon.data")));
        counting.push(attach_perf(spawner, RECORD, &profile.join("spawner.data")));
    }
    // perf stat attaches in the background: give it the time to.
    std::thread::sleep(Duration::from_millis(500));
    let spawns = count_from_env("SPAWND_BENCH_SPAWNS", 200);
    for _ in 0..spawns {
        let (status, _) = client.spawn_and_wait("true", json!({})).expect("spawn_op");
        assert_eq!(status["exit_code"], 0, "{status}");
    }
    std::thread::sleep(Duration::from_millis(300));
    for perf in counting {
        stop(perf);
    }
    let per_spawn = |file: &Path| read_count(file) as f64 / spawns as f64;
    let (daemon_each, spawner_each) = (per_spawn(&daemon_out), per_spawn(&spawner_out));
    let _ = daemon.kill();
    let _ = daemon.wait();
    remove_probe();

    let table = format!(
        "Blocks allocated (dlmalloc `malloc` calls, by uprobe); `spawnd run` and `--version`: medians of {n} runs; the daemon: {spawns} spawns in sequence, once warm\n\n| what | allocations |\n|---|---|\n| `spawnd run` of /usr/bin/true (spawnd and init) | {run} |\n| `spawnd --version` (start-up and argument parsing) | {version} |\n| daemon, per `spawn_op` + `spawn_status` + `spawn_release`: its own threads | {daemon_each:.1} |\n| daemon, per spawn: its spawner and the inits it starts | {spawner_each:.1} |\n"
    );
    println!("{table}");
    write_table("allocations", &table);
}
