//! Daemon load benchmark (not a timed test): `spawnd serve` under 16
//! concurrent clients, each making 200 `spawn_op` calls (alternately
//! `/usr/bin/true` and `/usr/bin/echo TOKEN`, so a result that went to the
//! wrong caller would show), plus 4 clients sending garbage all along.
//!
//! Reports, as Markdown: the round trip of `spawn_op` + `spawn_status`
//! (waiting for the end) against a plain fork/exec of `/usr/bin/true`,
//! measured interleaved in the same run with one client, and where its time
//! goes by the results' own `timings`; sustained spawns per
//! second under the load; the CPU time per spawn under the load of the
//! daemon, its spawner, the sandboxes themselves, the clients and the rest
//! of the machine, and the rate the cores would allow if the daemon and its
//! spawner cost nothing; the delay a request waiting on a long spawn
//! adds to another request's answer on the same connection; the daemon's
//! RSS idle, at peak and after the load; and fails if a result was lost or
//! mixed up, or RSS grows without bound.
//!
//! Run: `scripts/bench-daemon`. `SPAWND_BENCH_N` changes the per-client count.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod support;
use support::{
    count_from_env, cpu_time, machine_busy_time, ms, percentile, reaped_children_cpu_time, rss_kib,
    spawner_of, start_daemon, Client, CONNECTOR,
};

const CLIENTS: usize = 16;
const GARBAGE_CLIENTS: usize = 4;

/// Sends malformed frames, over and over, each answered with an error,
/// until told to stop; reconnects whenever the daemon closes the connection.
fn garbage(socket: PathBuf, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) {
    let frames: [&[u8]; 6] = [
        b"{not json\n",
        b"[1,2,3]\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"no_such\"}\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"spawn_status\",\"params\":{\"handle\":\"h-00\"}}\n",
        b"\xff\xfe\x00\x01\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"spawn_op\",\"params\":{\"connector\":\"local://bench/daemon\",\"op\":\"echo\",\"args\":{\"token\":\"--evil\"}}}\n",
    ];
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = UnixStream::connect(&socket) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let mut reader = BufReader::new(s.try_clone().expect("clone"));
        while !stop.load(Ordering::Relaxed) {
            i += 1;
            // Every 50th frame is over the cap: the daemon answers it once
            // and drops the rest of its line.
            let frame: Vec<u8> = if i.is_multiple_of(50) {
                let mut big = vec![b'x'; 2 << 20];
                big.push(b'\n');
                big
            } else {
                frames[i % frames.len()].to_vec()
            };
            if s.write_all(&frame).is_err() {
                break;
            }
            sent.fetch_add(1, Ordering::Relaxed);
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// `clients` connections each making `per_client` `spawn_op` + wait calls
/// (alternately `true` and `echo TOKEN`, checked): the round trips, the
/// results that were wrong or missing, and the wall time.
fn load(
    socket: &Path,
    clients: usize,
    per_client: usize,
) -> (Vec<Duration>, Vec<String>, Duration) {
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|k| {
            let socket = socket.to_path_buf();
            std::thread::spawn(move || {
                let mut c = Client::connect(&socket);
                let mut times = Vec::with_capacity(per_client);
                let mut wrong = Vec::new();
                for i in 0..per_client {
                    let token = format!("c{k}-n{i}");
                    let (op, args) = if i.is_multiple_of(2) {
                        ("true", json!({}))
                    } else {
                        ("echo", json!({ "token": token }))
                    };
                    match c.spawn_and_wait(op, args) {
                        Ok((s, d)) => {
                            times.push(d);
                            let expected = if op == "echo" {
                                format!("{token}\n")
                            } else {
                                String::new()
                            };
                            if s["exit_code"] != 0 || s["stdout"]["text"] != json!(expected) {
                                wrong.push(format!("{token}: {s}"));
                            }
                        }
                        Err(e) => wrong.push(format!("{token}: {e}")),
                    }
                }
                (times, wrong)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut wrong = Vec::new();
    for t in threads {
        let (times, w) = t.join().expect("client");
        all.extend(times);
        wrong.extend(w);
    }
    (all, wrong, started.elapsed())
}

/// The round trips of `rounds` quick requests (`spawn_output_size` of a
/// finished handle) on one connection, sorted.
fn quick_round_trips(c: &mut RawClient, handle: &str, rounds: usize) -> Vec<Duration> {
    let mut times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            let id = c.send("spawn_output_size", json!({"handle": handle, "which": 0}));
            c.answer_to(id);
            t.elapsed()
        })
        .collect();
    times.sort();
    times
}

/// A client that may have several requests in flight on its connection.
struct RawClient {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next: u64,
    /// Answers read while looking for another.
    early: Vec<serde_json::Value>,
}

impl RawClient {
    fn connect(socket: &Path) -> RawClient {
        let s = UnixStream::connect(socket).expect("connect");
        RawClient {
            reader: BufReader::new(s.try_clone().expect("clone")),
            writer: s,
            next: 0,
            early: Vec::new(),
        }
    }

    fn send(&mut self, method: &str, params: serde_json::Value) -> u64 {
        self.next += 1;
        let req = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        self.writer
            .write_all(format!("{req}\n").as_bytes())
            .expect("send");
        self.next
    }

    fn answer_to(&mut self, id: u64) -> serde_json::Value {
        if let Some(at) = self.early.iter().position(|a| a["id"] == id) {
            return self.early.remove(at);
        }
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).expect("read");
            let v: serde_json::Value = serde_json::from_str(&line).expect("json");
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{v}");
                return v["result"].clone();
            }
            self.early.push(v);
        }
    }
}

/// How much a request waiting on a long spawn delays the answers to other
/// requests on the same connection: quick round trips with and without it.
fn cross_delay(socket: &Path, rounds: usize) -> (Duration, Duration, Duration) {
    let mut c = RawClient::connect(socket);
    let id = c.send(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "true", "args": {}}),
    );
    let done = c.answer_to(id)["handle"]
        .as_str()
        .expect("handle")
        .to_string();
    let id = c.send("spawn_status", json!({"handle": done, "wait_ms": 30_000}));
    c.answer_to(id);
    let alone = quick_round_trips(&mut c, &done, rounds);
    let id = c.send(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sleep", "args": {"seconds": "60"}}),
    );
    let long = c.answer_to(id)["handle"]
        .as_str()
        .expect("handle")
        .to_string();
    let waiting = c.send("spawn_status", json!({"handle": long, "wait_ms": 60_000}));
    let beside = quick_round_trips(&mut c, &done, rounds);
    let id = c.send("spawn_kill", json!({"handle": long}));
    c.answer_to(id);
    c.answer_to(waiting);
    (
        percentile(&alone, 0.5),
        percentile(&beside, 0.5),
        percentile(&beside, 1.0),
    )
}

/// The round trips' own `timings` (from `spawn_status`), each phase's
/// values in µs: where a sequential spawn's time goes.
#[derive(Default)]
struct RoundTripTimings {
    gate_and_spec: Vec<u64>,
    commit: Vec<u64>,
    order_to_commit_done: Vec<u64>,
    init_ready: Vec<u64>,
    release_wait: Vec<u64>,
    after_release: Vec<u64>,
    program: Vec<u64>,
    /// The round trip less the phases on its path (gate, spec, order to
    /// release, setup, program, teardown): requests, records, answers.
    rest: Vec<u64>,
}

impl RoundTripTimings {
    fn add(&mut self, t: &Value, round_trip: Duration) {
        let us = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("timings: {t}"));
        let phases = &t["phases"];
        let gate_and_spec = us(&t["gate_us"]) + us(&t["spec_and_filter_us"]);
        self.gate_and_spec.push(gate_and_spec);
        self.commit.push(us(&t["audit_commit_us"]));
        self.order_to_commit_done
            .push(us(&phases["clone_and_release_us"]));
        self.init_ready.push(us(&phases["init_ready_us"]));
        self.release_wait.push(us(&phases["release_wait_us"]));
        self.after_release.push(us(&phases["sandbox_setup_us"]));
        self.program.push(us(&phases["program_us"]));
        let on_path = gate_and_spec
            + [
                "clone_and_release_us",
                "sandbox_setup_us",
                "program_us",
                "teardown_us",
            ]
            .iter()
            .map(|k| us(&phases[*k]))
            .sum::<u64>();
        self.rest
            .push((round_trip.as_micros() as u64).saturating_sub(on_path));
    }

    /// Table rows: each phase's median.
    fn rows(&self) -> String {
        let p50 = |v: &[u64]| {
            let mut v = v.to_vec();
            v.sort_unstable();
            ms(Duration::from_micros(
                v.get(v.len() / 2).copied().unwrap_or(0),
            ))
        };
        [
            ("the gate and the sandbox's spec", &self.gate_and_spec),
            ("the decision record's flush (`audit_commit_us`)", &self.commit),
            ("from the order to the spawner until that flush was done and the spawner's reply read (`clone_and_release_us`)", &self.order_to_commit_done),
            ("beside it, init from its start on the order until ready for the program (`init_ready_us`)", &self.init_ready),
            ("init then waiting for the release (`release_wait_us`)", &self.release_wait),
            ("from the release until init's report that the sandbox is set up (`sandbox_setup_us`)", &self.after_release),
            ("the program, from init's report until its end (`program_us`)", &self.program),
            ("the rest: the requests, the records and the answers around these", &self.rest),
        ]
        .iter()
        .map(|(what, values)| format!("| round trip, p50: {what} | {} | |\n", p50(values)))
        .collect()
    }
}

fn main() {
    let per_client = count_from_env("SPAWND_BENCH_N", 200);
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut daemon, socket) = start_daemon(dir.path());
    let pid = daemon.id();
    std::thread::sleep(Duration::from_millis(300));
    let idle_daemon = rss_kib(pid);
    let idle_spawner = spawner_of(pid).map_or(0, rss_kib);

    // 1. Round trip against plain fork/exec, one client, interleaved.
    let mut c = Client::connect(&socket);
    let (mut rt, mut plain) = (Vec::new(), Vec::new());
    let mut timings = RoundTripTimings::default();
    for i in 0..(per_client + 20) {
        let t = Instant::now();
        let ok = Command::new("/usr/bin/true")
            .stdin(Stdio::null())
            .status()
            .expect("true")
            .success();
        let p = t.elapsed();
        assert!(ok);
        let (status, d) = c.spawn_and_wait("true", json!({})).expect("spawn_op");
        assert_eq!(status["exit_code"], 0, "{status}");
        if i >= 20 {
            rt.push(d);
            plain.push(p);
            timings.add(&status["timings"], d);
        }
    }
    drop(c);
    rt.sort();
    plain.sort();

    // 2. Spawns per second under 8 concurrent clients (no garbage).
    let (eight, wrong8, wall8) = load(&socket, 8, per_client);
    assert!(wrong8.is_empty(), "8 clients: {wrong8:?}");

    // 3. Load: 16 clients, 200 spawn_op each, plus 4 garbage senders.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let garbage_threads: Vec<_> = (0..GARBAGE_CLIENTS)
        .map(|_| {
            let (s, st, n) = (socket.clone(), Arc::clone(&stop), Arc::clone(&sent));
            std::thread::spawn(move || garbage(s, st, n))
        })
        .collect();
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (stop, peak) = (Arc::clone(&stop), Arc::clone(&peak));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let spawner = spawner_of(pid);
    let (cpu_before, spawner_before) = (cpu_time(pid), spawner.map(cpu_time));
    let (sandboxes_before, machine_before, clients_before) = (
        spawner.map(reaped_children_cpu_time),
        machine_busy_time(),
        cpu_time(std::process::id()),
    );
    let (mut all, wrong, wall) = load(&socket, CLIENTS, per_client);
    let daemon_cpu = cpu_time(pid) - cpu_before;
    let machine_cpu = machine_busy_time().saturating_sub(machine_before);
    // This process: the clients, the garbage senders and the RSS sampler.
    let clients_cpu = cpu_time(std::process::id()).saturating_sub(clients_before);
    let spawner_cpu = spawner
        .zip(spawner_before)
        .map(|(s, before)| cpu_time(s).saturating_sub(before));
    // The sandboxes' own CPU: every init and its program, reaped by the
    // spawner (a spare's namespaces are made in the process that becomes init).
    let sandboxes_cpu = spawner
        .zip(sandboxes_before)
        .map(|(s, before)| reaped_children_cpu_time(s).saturating_sub(before));
    stop.store(true, Ordering::Relaxed);
    for t in garbage_threads {
        let _ = t.join();
    }
    let _ = sampler.join();
    std::thread::sleep(Duration::from_millis(500));
    let after_daemon = rss_kib(pid);
    // 4. One connection: a request waiting on a long spawn beside quick ones.
    let (alone50, beside50, beside_max) = cross_delay(&socket, per_client);
    let alive = daemon.try_wait().expect("wait").is_none();
    let _ = daemon.kill();
    let _ = daemon.wait();
    all.sort();

    let total = CLIENTS * per_client;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rate8 = eight.len() as f64 / wall8.as_secs_f64();
    let rate = all.len() as f64 / wall.as_secs_f64();
    let per_spawn = |d: Duration| d.as_secs_f64() * 1e3 / all.len().max(1) as f64;
    // What the machine spent besides the daemon, its spawner, the
    // sandboxes and the clients; and what it would spend per spawn with a
    // daemon and spawner that cost nothing.
    let rest_cpu = sandboxes_cpu.zip(spawner_cpu).map(|(sandboxes, spawner)| {
        machine_cpu
            .saturating_sub(daemon_cpu)
            .saturating_sub(spawner)
            .saturating_sub(sandboxes)
            .saturating_sub(clients_cpu)
    });
    let without_daemon = sandboxes_cpu
        .zip(rest_cpu)
        .map(|(sandboxes, rest)| sandboxes + clients_cpu + rest);
    let (p50, p99, plain50) = (
        percentile(&rt, 0.5),
        percentile(&rt, 0.99),
        percentile(&plain, 0.5),
    );
    let table = format!(
        "`spawnd serve`, {per_client} round trips interleaved with plain fork/exec, then 8 clients × {per_client} `spawn_op`, then {CLIENTS} clients × {per_client} `spawn_op` + {GARBAGE_CLIENTS} garbage clients\n\n\
| measure | value | goal |\n|---|---|---|\n\
| plain fork/exec of /usr/bin/true, p50 (baseline) | {} | |\n\
| `spawn_op` + `spawn_status` round trip, p50 | {} ({:.2}× plain) | ≤ 2.5× plain |\n\
| `spawn_op` + `spawn_status` round trip, p99 | {} | |\n\
{}\
| under load: round trip p50 / p99 | {} / {} | |\n\
| sustained spawns per second, 8 clients | {rate8:.0}/s | |\n\
| sustained spawns per second, {CLIENTS} clients + garbage | {rate:.0}/s | ≥ 550/s |\n\
| daemon CPU time per spawn under that load (its spawner's apart) | {:.3} ms ({}) | ≤ 0.5 ms |\n\
| the sandboxes' own CPU time per spawn under that load (inits and programs, reaped by the spawner) | {} | |\n\
| the benchmark's clients' CPU time per spawn (this process: clients, garbage senders) | {:.3} ms | |\n\
| the rest of the machine's busy time per spawn (kernel threads: namespace teardown, softirqs) | {} | |\n\
| the whole machine's busy CPU time per spawn under that load | {:.3} ms | |\n\
| the most spawns per second {cores} cores allow if the daemon and its spawner cost nothing: {cores} ÷ (sandboxes + clients + rest) | {} | |\n\
| quick answer on one connection, p50 alone / p50 and slowest beside a request waiting on a long spawn | {} / {} and {} | ≤ 1 ms more |\n\
| results: completed / expected / lost or mixed up | {} / {total} / {} | 0 lost |\n\
| garbage frames sent meanwhile | {} | |\n\
| daemon RSS idle / peak under load / after | {:.1} / {:.1} / {:.1} MiB | idle < 15 MiB |\n\
| spawner RSS idle | {:.1} MiB | |\n\
| daemon still serving after the load | {alive} | |\n",
        ms(plain50),
        ms(p50),
        p50.as_secs_f64() / plain50.as_secs_f64(),
        ms(p99),
        timings.rows(),
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99)),
        daemon_cpu.as_secs_f64() * 1e3 / all.len().max(1) as f64,
        spawner_cpu.map_or("spawner not read".to_string(), |c| format!(
            "spawner {:.3} ms",
            c.as_secs_f64() * 1e3 / all.len().max(1) as f64
        )),
        sandboxes_cpu.map_or("spawner not read".to_string(), |c| format!(
            "{:.3} ms",
            c.as_secs_f64() * 1e3 / all.len().max(1) as f64
        )),
        per_spawn(clients_cpu),
        rest_cpu.map_or("spawner not read".to_string(), |c| format!(
            "{:.3} ms",
            per_spawn(c)
        )),
        per_spawn(machine_cpu),
        without_daemon
            .filter(|c| !c.is_zero())
            .map_or("spawner not read".to_string(), |c| format!(
                "{:.0}/s",
                cores as f64 * all.len() as f64 / c.as_secs_f64()
            )),
        ms(alone50),
        ms(beside50),
        ms(beside_max),
        all.len() - wrong.len().min(all.len()),
        wrong.len(),
        sent.load(Ordering::Relaxed),
        idle_daemon as f64 / 1024.0,
        peak.load(Ordering::Relaxed) as f64 / 1024.0,
        after_daemon as f64 / 1024.0,
        idle_spawner as f64 / 1024.0,
    );
    println!("{table}");
    support::write_table("daemon", &table);
    for w in wrong.iter().take(5) {
        eprintln!("wrong: {w}");
    }
    assert!(wrong.is_empty(), "{} results lost or mixed up", wrong.len());
    assert!(alive, "the daemon died under load");
}
