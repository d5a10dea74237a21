//! A `spawnd serve` in the test world and a line-per-request JSON-RPC client,
//! shared by the daemon and fault-injection suites.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

use crate::harness::world;

/// A daemon on its own socket and audit log inside the test world.
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub audit: PathBuf,
}

impl Daemon {
    pub fn start(name: &str, extra: &str) -> Daemon {
        Daemon::start_with_manifests(name, extra, &[])
    }

    pub fn start_with_manifests(name: &str, extra: &str, more: &[&std::path::Path]) -> Daemon {
        Daemon::start_under(name, extra, more, &[])
    }

    /// The daemon started through `wrap` (a command that execs the rest).
    pub fn start_under(
        name: &str,
        extra: &str,
        more: &[&std::path::Path],
        wrap: &[String],
    ) -> Daemon {
        Daemon::launch(name, extra, more, wrap, None, "").serving()
    }

    /// The daemon with its audit log at `audit` (else in its own directory).
    pub fn start_logging_to(name: &str, audit: &std::path::Path) -> Daemon {
        Daemon::launch(name, "", &[], &[], Some(audit.to_path_buf()), "").serving()
    }

    /// The daemon run by uid 65534 through `wrap` (which drops to it and
    /// execs the rest), in a directory of its own that it owns, with its
    /// socket and audit log there.
    pub fn start_as_service_user(name: &str, wrap: &[String]) -> Daemon {
        let dir = world().path(&format!("daemon-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        let nobody = Some(nix::unistd::Uid::from_raw(65534));
        nix::unistd::chown(&dir, nobody, Some(nix::unistd::Gid::from_raw(65534))).unwrap();
        Daemon::launch(name, "", &[], wrap, Some(dir.join("audit.jsonl")), "").serving()
    }

    /// The daemon with its audit log at `audit`, `audit_extra` in its
    /// `[audit]` table, and `more` manifests.
    pub fn start_auditing(
        name: &str,
        audit: &std::path::Path,
        audit_extra: &str,
        more: &[&std::path::Path],
    ) -> Daemon {
        Daemon::launch(name, "", more, &[], Some(audit.to_path_buf()), audit_extra).serving()
    }

    /// Waits until the daemon's socket takes connections.
    fn serving(self) -> Daemon {
        let started = Instant::now();
        while UnixStream::connect(&self.socket).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the daemon did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self
    }

    /// The daemon with its audit log at `audit`, started and not waited
    /// for: its socket may not be there yet.
    pub fn launch_auditing(name: &str, audit: &std::path::Path) -> Daemon {
        Daemon::launch(name, "", &[], &[], Some(audit.to_path_buf()), "")
    }

    fn launch(
        name: &str,
        extra: &str,
        more: &[&std::path::Path],
        wrap: &[String],
        audit: Option<PathBuf>,
        audit_extra: &str,
    ) -> Daemon {
        let w = world();
        let dir = w.path(&format!("daemon-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        // 0755 so that nobody can reach the socket (mode 0666) in the access test.
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let socket = dir.join("spawnd.sock");
        let audit = audit.unwrap_or_else(|| dir.join("audit.jsonl"));
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[audit]\npath = \"{}\"\n{audit_extra}\n[server]\nsocket = \"{}\"\nsocket_mode = \"0666\"\nmanifests = [{}]\n{extra}",
                audit.display(),
                socket.display(),
                std::iter::once(w.manifest.as_path())
                    .chain(more.iter().copied())
                    .map(|p| format!("{:?}", p.display().to_string()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .unwrap();
        let mut cmd = match wrap.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&w.spawnd);
                c
            }
            None => Command::new(&w.spawnd),
        };
        let child = cmd
            .args(["serve", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Daemon {
            child,
            socket,
            audit,
        }
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.socket)
    }

    /// The daemon's stderr from here on, read by a thread so that lines can
    /// be awaited with a deadline.
    pub fn log(&mut self) -> Log {
        let stderr = self.child.stderr.take().expect("the daemon's stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Log { lines: rx }
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }
}

/// Lines of a daemon's stderr.
pub struct Log {
    lines: std::sync::mpsc::Receiver<String>,
}

impl Log {
    /// The next line that contains `needle`, skipping others; panics with
    /// the lines skipped if none comes within 10 s.
    pub fn line_with(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut skipped = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(line) => skipped.push(line),
                Err(e) => panic!(
                    "no log line with {needle:?} ({e}); saw:\n{}",
                    skipped.join("\n")
                ),
            }
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Client {
    pub reader: BufReader<UnixStream>,
    pub writer: UnixStream,
    next: u64,
    /// For a client of another uid: the process that holds its connection
    /// and relays it (ended when the client is dropped).
    proxy: Option<Child>,
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(mut proxy) = self.proxy.take() {
            let _ = proxy.kill();
            let _ = proxy.wait();
        }
    }
}

/// Relays its stdin to the daemon's socket (its first argument) and the
/// socket to its stdout, as whoever runs it.
const PROXY: &str = r#"import os, socket, sys, threading
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
def up():
    while True:
        b = os.read(0, 65536)
        if not b:
            s.shutdown(socket.SHUT_WR)
            return
        s.sendall(b)
threading.Thread(target=up, daemon=True).start()
while True:
    b = s.recv(65536)
    if not b:
        break
    while b:
        b = b[os.write(1, b):]
"#;

impl Client {
    pub fn connect(path: &std::path::Path) -> Client {
        let s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Client {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
            next: 0,
            proxy: None,
        }
    }

    /// A client whose connection is made by uid and gid `id` (no groups):
    /// a process of that identity connects and relays it.
    pub fn connect_as(path: &std::path::Path, id: u32) -> Client {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let out = theirs.try_clone().unwrap();
        let proxy = Command::new("setpriv")
            .args([
                format!("--reuid={id}"),
                format!("--regid={id}"),
                "--clear-groups".into(),
            ])
            .args(["/usr/bin/python3", "-c", PROXY])
            .arg(path)
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::from(std::os::fd::OwnedFd::from(out)))
            .spawn()
            .unwrap();
        ours.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Client {
            reader: BufReader::new(ours.try_clone().unwrap()),
            writer: ours,
            next: 0,
            proxy: Some(proxy),
        }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    /// [`Client::send_raw`] that tells a connection the daemon already
    /// closed (a refused one) rather than panicking.
    pub fn try_send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(bytes)
    }

    /// The next answer line, or `None` once the daemon closed the connection.
    pub fn answer(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).unwrap()),
        }
    }

    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let req = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        self.send_raw(format!("{req}\n").as_bytes());
        let a = self.answer().expect("an answer");
        assert_eq!(a["id"], self.next, "{a}");
        a
    }

    /// Runs `script` through the test connector's `sh` operation and waits
    /// for its result (the `spawn_status` of the ended spawn).
    pub fn run_sh(&mut self, script: &str) -> Value {
        let h = self.ok(
            "spawn_op",
            json!({"connector": CONNECTOR, "op": "sh", "args": {"script": script}}),
        )["handle"]
            .clone();
        self.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}))
    }

    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        let a = self.call(method, params);
        assert!(a.get("error").is_none(), "{method}: {a}");
        a["result"].clone()
    }

    /// `spawn_attach` of a detached handle whose connection the test has
    /// just closed, with its right token: the daemon parks the handle when
    /// it reads that close, and until then answers as for any handle held
    /// by a connection (-32002, the same answer as a wrong token). Asks
    /// again for up to 10 s.
    pub fn attach_once_parked(&mut self, handle: &Value, token: &Value) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let a = self.call("spawn_attach", json!({"handle": handle, "token": token}));
            let held = a["error"]["code"] == -32002;
            if !held || std::time::Instant::now() > deadline {
                assert!(a.get("error").is_none(), "spawn_attach: {a}");
                return a["result"].clone();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub fn b64(v: &Value) -> String {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v["data_b64"].as_str().unwrap())
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

pub const CONNECTOR: &str = "local://test/escape";

/// The spawnd binary as root, or as nobody (65534, no groups) through `setpriv`.
pub fn spawnd_as(who: crate::harness::As) -> Command {
    match who {
        crate::harness::As::Nobody => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&world().spawnd);
            c
        }
        _ => Command::new(&world().spawnd),
    }
}

/// Whether some record of the audit log at `path` contains every one of `needles`.
pub fn audit_has(path: &std::path::Path, needles: &[&str]) -> bool {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .any(|l| needles.iter().all(|n| l.contains(n)))
}
