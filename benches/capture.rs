//! Output capture benchmark (not a timed test): a child writes 1 GiB of
//! zeros to stdout. `spawnd run` drains both pipes, keeps and SHA-256-hashes
//! up to the operation's cap (64 MiB, the ceiling), counts the rest, and
//! forwards what it keeps live; beside it, in the same interleaved run, the
//! same writer into `cat > /dev/null` and into `sha256sum`. Medians of
//! `SPAWND_BENCH_REPS` (default 5) runs each, as Markdown.
//!
//! Run: `scripts/bench` (everything) or `cargo bench --bench capture`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;

const BYTES: u64 = 1 << 30;

/// Builds one way's command afresh for each run.
type MakeCommand = Box<dyn Fn() -> Command>;

fn main() {
    let reps = support::count_from_env("SPAWND_BENCH_REPS", 5);
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("bench.toml");
    std::fs::write(&manifest, support::MANIFEST).expect("manifest");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[audit]\npath = \"{}\"\n",
            dir.path().join("audit.jsonl").display()
        ),
    )
    .expect("config");
    let spawnd = support::spawnd();
    let shell = |pipeline: &str| {
        let mut c = Command::new("sh");
        c.args(["-c", pipeline]);
        c
    };
    let run = |mut cmd: Command| -> Duration {
        let t = Instant::now();
        let out = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        t.elapsed()
    };
    let ways: [(&str, MakeCommand); 3] = [
        (
            "`head -c 1G /dev/zero \\| cat > /dev/null` (baseline)",
            Box::new(move || shell(&format!("head -c {BYTES} /dev/zero | cat > /dev/null"))),
        ),
        (
            "`head -c 1G /dev/zero \\| sha256sum`",
            Box::new(move || shell(&format!("head -c {BYTES} /dev/zero | sha256sum > /dev/null"))),
        ),
        (
            "`spawnd run` of `head -c 1G /dev/zero`: sandbox, drain, keep + hash 64 MiB, count the rest",
            Box::new(move || {
                let mut c = Command::new(&spawnd);
                c.args(["run", "--config"])
                    .arg(&config)
                    .arg("--manifest")
                    .arg(&manifest)
                    .args(["--op", "flood", "--arg", &format!("bytes={BYTES}")]);
                c
            }),
        ),
    ];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); ways.len()];
    for _ in 0..reps {
        for (i, (_, make)) in ways.iter().enumerate() {
            times[i].push(run(make()));
        }
    }
    let medians: Vec<Duration> = times
        .iter_mut()
        .map(|t| {
            t.sort();
            t[t.len() / 2]
        })
        .collect();
    let gib = BYTES as f64 / (1u64 << 30) as f64;
    let mut table = format!(
        "1 GiB written to stdout, {reps} runs each, interleaved, medians\n\n| way | time | throughput | vs baseline |\n|---|---|---|---|\n"
    );
    for ((name, _), m) in ways.iter().zip(&medians) {
        table.push_str(&format!(
            "| {name} | {:.3} s | {:.2} GiB/s | {:.2}× |\n",
            m.as_secs_f64(),
            gib / m.as_secs_f64(),
            m.as_secs_f64() / medians[0].as_secs_f64()
        ));
    }
    println!("{table}");
    support::write_table("capture", &table);
}
