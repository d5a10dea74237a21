//! Shared setup for the sandbox tests: a world-readable scratch directory with
//! copies of `spawnd` and the hostile `spawnd-probe`, a read-only and a
//! writable scope, a manifest over them, and runners that drive the real
//! binary as root or as the unprivileged user `nobody` (65534).

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// Who runs `spawnd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum As {
    /// uid 0.
    Root,
    /// uid/gid 65534 through setpriv.
    Nobody,
    /// uid 0, launching through a forked spawner process as `spawnd serve`
    /// does (`spawnd run --via-spawner`).
    RootViaSpawner,
}

impl As {
    /// `spawnd` (as this identity) with `run` and, for the spawner path, its flag.
    pub fn spawnd_run(self, spawnd: &std::path::Path) -> Command {
        let mut cmd = match self {
            As::Root | As::RootViaSpawner => Command::new(spawnd),
            As::Nobody => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                    .arg(spawnd);
                c
            }
        };
        cmd.arg("run");
        if self == As::RootViaSpawner {
            cmd.arg("--via-spawner");
        }
        cmd
    }

    /// Whether spawnd runs as root.
    pub fn is_root(self) -> bool {
        self != As::Nobody
    }
}

/// A scratch world for one test.
pub struct World {
    pub dir: PathBuf,
    pub spawnd: PathBuf,
    pub probe: PathBuf,
    pub manifest: PathBuf,
}

/// The world shared by every test of one test binary (copies are made once).
pub fn world() -> &'static World {
    static WORLD: std::sync::OnceLock<World> = std::sync::OnceLock::new();
    WORLD.get_or_init(World::new)
}

/// Removes worlds left by earlier test processes that are gone.
fn remove_stale_worlds() {
    for entry in std::fs::read_dir("/tmp").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("spawnd-it-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

impl World {
    pub fn new() -> World {
        remove_stale_worlds();
        let prefix = format!("spawnd-it-{}-", std::process::id());
        let dir = tempfile::Builder::new()
            .prefix(&prefix)
            .tempdir_in("/tmp")
            .unwrap()
            .keep();
        chmod(&dir, 0o755);
        for sub in ["ro", "rw", "outside"] {
            std::fs::create_dir(dir.join(sub)).unwrap();
        }
        chmod(&dir.join("ro"), 0o755);
        std::fs::write(dir.join("ro/readable.txt"), "inside a read-only scope\n").unwrap();
        std::fs::write(
            dir.join("outside/secret.txt"),
            "host secret outside every scope\n",
        )
        .unwrap();
        chmod(&dir.join("outside/secret.txt"), 0o644);
        nix::unistd::chown(
            &dir.join("rw"),
            Some(nix::unistd::Uid::from_raw(65534)),
            Some(nix::unistd::Gid::from_raw(65534)),
        )
        .unwrap();
        // Writable by both identities the tests use (the root child has no DAC override).
        chmod(&dir.join("rw"), 0o1777);
        let spawnd = dir.join("spawnd");
        std::fs::copy(env!("CARGO_BIN_EXE_spawnd"), &spawnd).unwrap();
        let probe = dir.join("spawnd-probe");
        std::fs::copy(env!("CARGO_BIN_EXE_spawnd-probe"), &probe).unwrap();
        chmod(&spawnd, 0o755);
        chmod(&probe, 0o755);
        for (who, uid) in [("root", 0), ("nobody", 65534)] {
            let audit_dir = dir.join(format!("audit-{who}"));
            std::fs::create_dir(&audit_dir).unwrap();
            nix::unistd::chown(
                &audit_dir,
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(uid)),
            )
            .unwrap();
            let config = dir.join(format!("config-{who}.toml"));
            std::fs::write(
                &config,
                format!("[audit]\npath = \"{}/audit.jsonl\"\n", audit_dir.display()),
            )
            .unwrap();
            chmod(&config, 0o644);
        }
        let manifest = dir.join("escape.toml");
        std::fs::write(&manifest, manifest_text(&dir, &probe)).unwrap();
        chmod(&manifest, 0o644);
        World {
            dir,
            spawnd,
            probe,
            manifest,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// The config each identity's runs use (its own audit log in the world).
    pub fn config(&self, who: As) -> PathBuf {
        self.dir.join(if who.is_root() {
            "config-root.toml"
        } else {
            "config-nobody.toml"
        })
    }

    /// The audit log of `who`'s runs.
    pub fn audit_log(&self, who: As) -> PathBuf {
        self.dir.join(if who.is_root() {
            "audit-root/audit.jsonl"
        } else {
            "audit-nobody/audit.jsonl"
        })
    }

    /// A config for `who` with `extra` TOML appended (the audit section kept).
    pub fn config_with(&self, who: As, name: &str, extra: &str) -> PathBuf {
        let base = std::fs::read_to_string(self.config(who)).unwrap();
        let path = self.dir.join(format!("outside/{name}-{who:?}.toml"));
        std::fs::write(&path, format!("{base}{extra}")).unwrap();
        chmod(&path, 0o644);
        path
    }

    /// `spawnd run --json --manifest M --op OP --arg k=v… EXTRA…` as `who`.
    pub fn run(&self, who: As, op: &str, args: &[(&str, &str)], extra: &[&str]) -> Output {
        self.command(who, op, args, extra).output().unwrap()
    }

    pub fn command(&self, who: As, op: &str, args: &[(&str, &str)], extra: &[&str]) -> Command {
        self.command_for(who, &self.manifest, op, args, extra)
    }

    /// [`World::command`] with another manifest.
    pub fn command_for(
        &self,
        who: As,
        manifest: &Path,
        op: &str,
        args: &[(&str, &str)],
        extra: &[&str],
    ) -> Command {
        let mut cmd = who.spawnd_run(&self.spawnd);
        cmd.args(["--json", "--manifest"])
            .arg(manifest)
            .args(["--op", op]);
        if !extra.contains(&"--config") {
            cmd.arg("--config").arg(self.config(who));
        }
        for (k, v) in args {
            cmd.arg("--arg").arg(format!("{k}={v}"));
        }
        cmd.args(extra)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir(&self.dir)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs an attack of the probe inside the sandbox and returns its report.
    pub fn attack(&self, who: As, attack: &str, args: &[&str]) -> Report {
        let op = ["probe0", "probe1", "probe2"][args.len()];
        let mut kv = vec![("attack", attack)];
        kv.extend(["a1", "a2"].iter().zip(args).map(|(k, v)| (*k, *v)));
        let out = self.run(who, op, &kv, &[]);
        Report::from_output(&out)
    }
}

/// What `spawnd run --json` said, and what the probe said inside it.
#[derive(Debug)]
pub struct Report {
    pub exit: Option<i32>,
    pub envelope: Value,
    pub probe: Value,
    pub stderr: String,
}

impl Report {
    pub fn from_output(out: &Output) -> Report {
        let envelope: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "spawnd did not print JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let text = envelope["data"]["stdout"]["text"].as_str().unwrap_or("");
        let probe = text
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str::<Value>(l).ok())
            .unwrap_or(Value::Null);
        Report {
            exit: out.status.code(),
            envelope,
            probe,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The probe ran inside the sandbox and says the attack was blocked.
    pub fn assert_blocked(&self) {
        assert_eq!(
            self.envelope["ok"], true,
            "spawnd did not run the probe: {}\n{}",
            self.envelope, self.stderr
        );
        assert_eq!(
            self.probe["outcome"], "blocked",
            "ESCAPED: {}\nfull result: {}",
            self.probe, self.envelope["data"]
        );
    }
}

fn manifest_text(dir: &Path, probe: &Path) -> String {
    let d = dir.display();
    format!(
        r#"[connector]
name = "local://test/escape"
version = "1.0.0"

[capabilities.spawn]
programs = [
  {{ path = "{probe}" }},
  {{ path = "/usr/bin/bash" }},
  {{ path = "/usr/bin/python3" }},
  {{ path = "/usr/bin/git" }},
  {{ path = "/usr/bin/tar" }},
  {{ path = "/usr/bin/true" }},
  {{ path = "/usr/bin/node" }},
]
fs_read = ["{d}/ro"]
fs_write = ["{d}/rw"]
env_passthrough = ["SENTINEL"]
env_set = {{ PATH = "/usr/bin:/bin" }}

[capabilities.spawn.limits]
wall_time_ms = 30000
max_stdout_bytes = 1048576
max_memory_bytes = 268435456
max_processes = 64
max_file_size_bytes = 67108864
max_open_files = 128

[capabilities.spawn.operations.probe0]
argv = ["spawnd-probe", "{{attack}}"]
[capabilities.spawn.operations.probe1]
argv = ["spawnd-probe", "{{attack}}", "{{a1}}"]
[capabilities.spawn.operations.probe1.params.a1]
allow_dash = true
[capabilities.spawn.operations.probe2]
argv = ["spawnd-probe", "{{attack}}", "{{a1}}", "{{a2}}"]
[capabilities.spawn.operations.probe2.params.a1]
allow_dash = true
[capabilities.spawn.operations.probe2.params.a2]
allow_dash = true

[capabilities.spawn.operations.sh]
argv = ["bash", "-c", "{{script}}"]
[capabilities.spawn.operations.sh.params.script]
max_len = 8192

[capabilities.spawn.operations.node]
argv = ["node", "-e", "{{js}}"]

[capabilities.spawn.operations.py]
argv = ["python3", "-I", "-c", "{{code}}"]
[capabilities.spawn.operations.py.params.code]
max_len = 8192

[capabilities.spawn.operations.git-status]
argv = ["git", "-c", "safe.directory=*", "-C", "{{repo}}", "status", "--short", "--branch"]
[capabilities.spawn.operations.git-status.params.repo]
kind = "path"

[capabilities.spawn.operations.tar-create]
argv = ["tar", "-C", "{{src}}", "-cf", "{{archive}}", "."]
[capabilities.spawn.operations.tar-create.params.src]
kind = "path"
[capabilities.spawn.operations.tar-create.params.archive]
kind = "path"

[capabilities.spawn.operations.true]
argv = "true"
"#,
        probe = probe.display()
    )
}

/// Pids of host processes whose command line contains `token`.
pub fn host_processes_with(token: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(token) {
            pids.push(pid);
        }
    }
    pids
}

/// Waits until some host process carries `token` (a sandbox reaches exec
/// in milliseconds here and in seconds in an emulated guest), failing the
/// test when none appears within 30 s.
pub fn wait_for_host_process(token: &str) {
    let started = std::time::Instant::now();
    while host_processes_with(token).is_empty() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "no host process carrying {token} appeared within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Runs a blocking socket call again when a signal interrupted it: a
/// socket with a read timeout answers any signal the test process takes
/// (a stop and continue among them) with `EINTR`, even where the handler
/// asked for restarts (signal(7)).
pub fn uninterrupted<T>(mut call: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    loop {
        match call() {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            done => return done,
        }
    }
}
