//! Where the daemon's CPU time per spawn goes, thread by thread (not a timed
//! test): one client makes `SPAWND_BENCH_N` (default 500) `spawn_op` +
//! `spawn_status` + `spawn_release` calls of `/usr/bin/true` in sequence,
//! then the same number of quick requests (`spawn_output_size`), and the
//! daemon's threads are read before and after each
//! (`/proc/PID/task/*/schedstat` for CPU time, `status` for context
//! switches). Prints a Markdown table per part: each thread's CPU time and
//! context switches per call, grouped by thread name.
//!
//! Run: `cargo bench --locked --bench daemon_threads` (as root, like the
//! daemon bench). Not part of `scripts/bench`: it explains the daemon
//! bench's CPU row rather than measuring a goal.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::json;

mod support;
use support::{count_from_env, start_daemon, Client, CONNECTOR};

/// One thread of the daemon: its name, CPU time (ns) and context switches.
#[derive(Clone)]
struct ThreadTimes {
    name: String,
    cpu_ns: u64,
    switches: u64,
}

/// Every live thread of `pid`, by thread id.
fn threads(pid: u32) -> BTreeMap<u32, ThreadTimes> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let path = entry.path();
        let read = |f: &str| std::fs::read_to_string(path.join(f)).unwrap_or_default();
        let cpu_ns = read("schedstat")
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let switches = read("status")
            .lines()
            .filter(|l| l.contains("voluntary_ctxt_switches"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        let name = read("comm").trim().to_string();
        out.insert(
            tid,
            ThreadTimes {
                name,
                cpu_ns,
                switches,
            },
        );
    }
    out
}

/// Runs `calls` of `work`, and tabulates per call what each group of the
/// daemon's threads (by name) spent meanwhile. Threads that ended during the
/// part are not counted: the blocking pool keeps its threads for 10 s, more
/// than a part takes.
fn part(
    title: &str,
    pid: u32,
    runtime: &BTreeSet<u32>,
    calls: usize,
    mut work: impl FnMut(),
) -> String {
    let before = threads(pid);
    let started = Instant::now();
    for _ in 0..calls {
        work();
    }
    let wall = started.elapsed();
    let after = threads(pid);
    let mut groups: BTreeMap<String, (usize, u64, u64)> = BTreeMap::new();
    for (tid, t) in &after {
        let base = before.get(tid).cloned().unwrap_or(ThreadTimes {
            name: t.name.clone(),
            cpu_ns: 0,
            switches: 0,
        });
        let group = match (runtime.contains(tid), t.name.as_str()) {
            (true, _) => format!("{} (async runtime)", t.name),
            (false, "spawnd-worker") => "spawnd-worker (blocking pool: spawn pipelines)".into(),
            (false, name) => name.to_string(),
        };
        let g = groups.entry(group).or_default();
        g.0 += 1;
        g.1 += t.cpu_ns.saturating_sub(base.cpu_ns);
        g.2 += t.switches.saturating_sub(base.switches);
    }
    let per = |v: u64| v as f64 / calls as f64;
    let mut table = format!(
        "{title}: {calls} calls, {:.1} µs wall each\n\n| threads | count | CPU µs per call | context switches per call |\n|---|---|---|---|\n",
        wall.as_secs_f64() * 1e6 / calls as f64
    );
    let (mut cpu, mut switches) = (0, 0);
    for (name, (count, c, s)) in &groups {
        table.push_str(&format!(
            "| {name} | {count} | {:.1} | {:.2} |\n",
            per(*c) / 1e3,
            per(*s)
        ));
        cpu += c;
        switches += s;
    }
    table.push_str(&format!(
        "| all | {} | {:.1} | {:.2} |\n",
        after.len(),
        per(cpu) / 1e3,
        per(switches)
    ));
    table
}

fn main() {
    let calls = count_from_env("SPAWND_BENCH_N", 500);
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut daemon, socket) = start_daemon(dir.path());
    let pid = daemon.id();
    // The async runtime's workers start with the daemon; the blocking pool's
    // threads (same name) only once there is blocking work.
    let runtime: BTreeSet<u32> = threads(pid)
        .into_iter()
        .filter(|(_, t)| t.name == "spawnd-worker")
        .map(|(tid, _)| tid)
        .collect();
    let mut c = Client::connect(&socket);
    // Warm: the spawner's spares made and prepared, the blocking pool started.
    for _ in 0..20 {
        c.spawn_and_wait("true", json!({})).expect("spawn_op");
    }
    std::thread::sleep(Duration::from_millis(300));
    let spawns = part(
        "`spawn_op` + `spawn_status` + `spawn_release` of /usr/bin/true, in sequence",
        pid,
        &runtime,
        calls,
        || {
            let (status, _) = c.spawn_and_wait("true", json!({})).expect("spawn_op");
            assert_eq!(status["exit_code"], 0, "{status}");
        },
    );
    let handle = c
        .call(
            "spawn_op",
            json!({"connector": CONNECTOR, "op": "true", "args": {}}),
        )
        .expect("spawn_op")["handle"]
        .as_str()
        .expect("handle")
        .to_string();
    c.call("spawn_status", json!({"handle": handle, "wait_ms": 30_000}))
        .expect("spawn_status");
    let quick = part(
        "`spawn_output_size` of a finished handle, in sequence",
        pid,
        &runtime,
        calls,
        || {
            c.call("spawn_output_size", json!({"handle": handle, "which": 0}))
                .expect("spawn_output_size");
        },
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
    println!("{spawns}\n{quick}");
}
