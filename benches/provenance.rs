//! Provenance benchmark (not a timed test): the per-spawn cost of verifying
//! an installed connector. One daemon serves the same connector directory
//! twice, as version 1.0.0 from a manifest file (no per-spawn check) and as
//! 2.0.0 installed in the store (its stored files checked before every
//! spawn); `spawn_op` + `spawn_status` round trips of each alternate, and the
//! medians and their ratio are the cost of the check on a whole spawn. The
//! program is a copy of `true` padded to 8 MiB, the size of a typical CLI,
//! so hashing it is part of both ways, as the gate always hashes the
//! program it runs. The check itself is timed in-process too
//! (`recheck_verified` with the program's digest given, as the gate calls
//! it). Run as root: `cargo bench --bench provenance` (`scripts/bench` runs
//! it); SPAWND_BENCH_N sets the count.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

mod support;

const NAME: &str = "local://bench/shipped";
/// The padded program's size.
const PROGRAM_BYTES: u64 = 8 << 20;

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// A connector directory at `dir` for `version`, shipping the padded
/// program as `bin/true`.
fn connector(dir: &Path, version: &str, program: &[u8]) {
    std::fs::create_dir_all(dir.join("bin")).expect("bin");
    let bin = dir.join("bin/true");
    std::fs::write(&bin, program).expect("program");
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    std::fs::write(
        dir.join("manifest.toml"),
        format!(
            "[connector]\nname = \"{NAME}\"\nversion = \"{version}\"\nprovenance_hash = \"sha256:{}\"\n\n[capabilities.spawn]\nprograms = [{{ path = \"{{connector}}/bin/true\" }}]\nfs_exec = [\"{{connector}}/bin\"]\n\n[capabilities.spawn.operations.true]\nargv = \"true\"\n",
            sha256_hex(program)
        ),
    )
    .expect("manifest");
}

fn spawnd(config: &Path, args: &[&str]) {
    let out = Command::new(support::spawnd())
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("spawnd");
    assert!(
        out.status.success(),
        "spawnd {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn round_trip(client: &mut support::Client, version: &str) -> Duration {
    let t = Instant::now();
    let handle = client
        .call(
            "spawn_op",
            json!({"connector": NAME, "version": version, "op": "true", "args": {}}),
        )
        .expect("spawn_op")["handle"]
        .clone();
    let status = client
        .call("spawn_status", json!({"handle": handle, "wait_ms": 30_000}))
        .expect("spawn_status");
    let took = t.elapsed();
    assert_eq!(status["exit_code"], 0, "{status}");
    client
        .call("spawn_release", json!({ "handle": handle }))
        .expect("spawn_release");
    took
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The check alone, in-process, as the gate makes it (the program's
/// digest given) and without the digest (the program read again): `n`
/// calls each, medians.
fn recheck_alone(store: &Path, n: usize) -> (Duration, Duration) {
    let store = spawnd::internals::provenance::Store::at(store);
    let keyring = spawnd::internals::provenance::Keyring::at(Path::new("/nonexistent"));
    let served = spawnd::internals::provenance::serve::installed_manifests(
        &store,
        &keyring,
        spawnd::internals::manifest::LoadOptions::default(),
    )
    .expect("the store loads");
    let installed = served[0].verified.clone().expect("installed");
    let program = installed.dir.join("bin/true");
    let digest = installed.files[0].1;
    let hashed: Vec<(PathBuf, spawnd::internals::manifest::Sha256Digest)> = vec![(program, digest)];
    let time = |hashed: &[(PathBuf, spawnd::internals::manifest::Sha256Digest)]| {
        let mut times: Vec<Duration> = (0..n)
            .map(|_| {
                let t = Instant::now();
                spawnd::internals::provenance::recheck::recheck_verified(&installed, hashed)
                    .expect("unchanged");
                t.elapsed()
            })
            .collect();
        median(&mut times)
    };
    (time(&hashed), time(&[]))
}

fn main() {
    let n = support::count_from_env("SPAWND_BENCH_N", 200);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let mut program = std::fs::read("/usr/bin/true").expect("/usr/bin/true");
    program.resize(PROGRAM_BYTES as usize, 0);
    let from_file = dir.path().join("served/file");
    connector(&from_file, "1.0.0", &program);
    let source = dir.path().join("source");
    connector(&source, "2.0.0", &program);
    let store = dir.path().join("store");
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).expect("run");
    let socket = run.join("spawnd.sock");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[audit]\npath = \"{}\"\n[server]\nsocket = \"{}\"\nmanifests = [\"{}\"]\n[connectors]\nstore = \"{}\"\nkeyring = \"{}\"\n",
            dir.path().join("audit.jsonl").display(),
            socket.display(),
            from_file.join("manifest.toml").display(),
            store.display(),
            dir.path().join("keyring").display()
        ),
    )
    .expect("config");
    spawnd(&config, &["connector", "install", source.to_str().unwrap()]);
    let mut daemon = Command::new(support::spawnd())
        .args(["serve", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawnd serve");
    let t = Instant::now();
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the daemon did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client = support::Client::connect(&socket);
    let ways = [
        ("1.0.0", "from a manifest file"),
        ("2.0.0", "installed, verified before each spawn"),
    ];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(), Vec::new()];
    for _ in 0..10 {
        for (version, _) in ways {
            round_trip(&mut client, version);
        }
    }
    for i in 0..n {
        // Alternate which goes first, so neither always follows the other.
        for k in 0..2 {
            let w = (i + k) % 2;
            times[w].push(round_trip(&mut client, ways[w].0));
        }
    }
    let _ = daemon.kill();
    let _ = daemon.wait();
    let medians: Vec<Duration> = times.iter_mut().map(|t| median(t)).collect();
    let (check, rereading) = recheck_alone(&store, 200);
    let mut table = format!(
        "{n} spawns each, alternating, one daemon, the program 8 MiB\n\n| connector | median `spawn_op` round trip | vs from a manifest file |\n|---|---|---|\n"
    );
    for ((_, name), m) in ways.iter().zip(&medians) {
        table.push_str(&format!(
            "| {name} | {} | {:.3}× |\n",
            support::ms(*m),
            m.as_secs_f64() / medians[0].as_secs_f64()
        ));
    }
    table.push_str(&format!(
        "\nThe check alone (`recheck_verified`, median of 200): {:.1} µs with the program's digest the gate took, {:.1} µs reading the program again.\n",
        check.as_secs_f64() * 1e6,
        rereading.as_secs_f64() * 1e6
    ));
    println!("{table}");
    support::write_table("provenance", &table);
}
