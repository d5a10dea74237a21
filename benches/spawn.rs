//! Spawn benchmark (not a timed test): 200+ spawns of /bin/true each way,
//! interleaved in one run — plain fork/exec, `unshare` with the same
//! namespaces, bubblewrap with the closest isolation it offers, firejail when
//! installed, `spawnd run` with full isolation, and the daemon's `spawn_op`
//! round trip (request to end, one client) — medians and ratios, as Markdown.
//!
//! Run: `scripts/bench-spawn` (installs bubblewrap first), or
//! `cargo bench --bench spawn` with bwrap on PATH. Set SPAWND_BENCH_N to change
//! the count.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MANIFEST: &str = r#"
[connector]
name = "local://bench/true"
version = "1.0.0"

[capabilities.spawn]
programs = [{ path = "/usr/bin/true" }]

[capabilities.spawn.operations.true]
argv = "true"
"#;

mod support;

struct Way {
    name: &'static str,
    program: String,
    args: Vec<String>,
    /// Through a daemon instead of a command.
    daemon: Option<support::Client>,
    times: Vec<Duration>,
}

fn run_once(way: &mut Way) {
    if let Some(client) = &mut way.daemon {
        let (status, took) = client
            .spawn_and_wait("true", serde_json::json!({}))
            .expect("spawn_op");
        assert_eq!(status["exit_code"], 0, "{status}");
        way.times.push(took);
        return;
    }
    let t = Instant::now();
    let status = Command::new(&way.program)
        .args(&way.args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("spawn");
    way.times.push(t.elapsed());
    assert!(
        status.status.success(),
        "{} failed: {}",
        way.name,
        String::from_utf8_lossy(&status.stderr)
    );
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let n = support::count_from_env("SPAWND_BENCH_N", 250);
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("true.toml");
    std::fs::write(&manifest, MANIFEST).expect("manifest");
    let audit = dir.path().join("audit.jsonl");
    let rlimits_config = dir.path().join("rlimits.toml");
    std::fs::write(
        &rlimits_config,
        format!(
            "[audit]\npath = \"{}\"\n[sandbox]\nlimits = \"rlimits\"\n",
            audit.display()
        ),
    )
    .expect("config");
    let default_config = dir.path().join("default.toml");
    std::fs::write(
        &default_config,
        format!("[audit]\npath = \"{}\"\n", audit.display()),
    )
    .expect("config");
    let spawnd = support::spawnd();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let bwrap_args = s(&[
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--ro-bind",
        "/etc/ld.so.cache",
        "/etc/ld.so.cache",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--chdir",
        "/tmp",
        "--clearenv",
        "/usr/bin/true",
    ]);
    let ways = [
        Way {
            name: "plain fork/exec of /bin/true (baseline)",
            program: "/usr/bin/true".into(),
            args: vec![],
            daemon: None,
            times: vec![],
        },
        Way {
            name: "unshare -U -m -p -n -i -u --fork (namespaces only)",
            program: "unshare".into(),
            args: s(&[
                "--user",
                "--map-root-user",
                "--mount",
                "--pid",
                "--net",
                "--ipc",
                "--uts",
                "--fork",
                "/usr/bin/true",
            ]),
            daemon: None,
            times: vec![],
        },
        Way {
            name: "bwrap, closest isolation",
            program: "bwrap".into(),
            args: bwrap_args,
            daemon: None,
            times: vec![],
        },
        Way {
            name: "spawnd run, all layers (root: cgroup v1 memory+pids)",
            program: spawnd.display().to_string(),
            args: vec![
                "run".into(),
                "--config".into(),
                default_config.display().to_string(),
                "--manifest".into(),
                manifest.display().to_string(),
                "--op".into(),
                "true".into(),
            ],
            daemon: None,
            times: vec![],
        },
        Way {
            name: "spawnd run, all layers, `[sandbox] limits = \"rlimits\"`",
            program: spawnd.display().to_string(),
            args: vec![
                "run".into(),
                "--config".into(),
                rlimits_config.display().to_string(),
                "--manifest".into(),
                manifest.display().to_string(),
                "--op".into(),
                "true".into(),
            ],
            daemon: None,
            times: vec![],
        },
    ];
    let mut ways: Vec<Way> = ways.into_iter().collect();
    if Command::new("firejail").arg("--version").output().is_ok() {
        ways.push(Way {
            name: "firejail --noprofile --net=none --private --private-dev --private-tmp --caps.drop=all --seccomp",
            program: "firejail".into(),
            args: s(&[
                "--quiet",
                "--noprofile",
                "--net=none",
                "--private",
                "--private-dev",
                "--private-tmp",
                "--caps.drop=all",
                "--seccomp",
                "/usr/bin/true",
            ]),
            daemon: None,
            times: vec![],
        });
    }
    let daemon_dir = tempfile::tempdir().expect("tempdir");
    let (mut daemon, socket) = support::start_daemon(daemon_dir.path());
    ways.push(Way {
        name: "`spawnd serve`: `spawn_op` + `spawn_status` round trip, one client",
        program: String::new(),
        args: vec![],
        daemon: Some(support::Client::connect(&socket)),
        times: vec![],
    });
    for w in ways.iter_mut() {
        for _ in 0..10 {
            run_once(w);
        }
        w.times.clear();
    }
    for _ in 0..n {
        for w in ways.iter_mut() {
            run_once(w);
        }
    }
    let _ = daemon.kill();
    let _ = daemon.wait();
    let medians: Vec<Duration> = ways.iter_mut().map(|w| median(&mut w.times)).collect();
    let (plain, bwrap) = (medians[0], medians[2]);
    let mut table = format!("{n} spawns each, interleaved\n\n| way | median | vs plain | vs bwrap |\n|---|---|---|---|\n");
    for (w, m) in ways.iter().zip(&medians) {
        table.push_str(&format!(
            "| {} | {} | {:.2}× | {:.2}× |\n",
            w.name,
            ms(*m),
            m.as_secs_f64() / plain.as_secs_f64(),
            m.as_secs_f64() / bwrap.as_secs_f64()
        ));
    }
    println!("{table}");
    support::write_table("spawn", &table);
}
