//! Network grants end to end, through `spawnd run` and the daemon: a real
//! client in the sandbox (curl, python's urllib) reaches exactly the granted
//! host:port through spawnd's relay, and nothing else; judged from outside,
//! by what the host's test servers accept, by the result's `network` object
//! and by the audit trail. Run as root (the program runs as 65534).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

/// An HTTP server on the host's loopback that counts what it accepts.
struct HostServer {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl HostServer {
    fn start(body: &'static str) -> HostServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let mut request = [0u8; 4096];
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = stream.read(&mut request);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        HostServer { port, accepted }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// A scratch directory (readable by 65534) with a config and manifests.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let s = Scratch { dir };
        std::fs::write(
            s.path("config.toml"),
            format!("[audit]\npath = \"{}\"\n", s.path("audit.jsonl").display()),
        )
        .unwrap();
        s
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// curl and python3, granted `network`.
    fn manifest(&self, network: &[String]) -> PathBuf {
        let list = network
            .iter()
            .map(|g| format!("\"{g}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let text = format!(
            r#"[connector]
name = "local://test/net"
version = "1.0.0"

[capabilities.spawn]
programs = [{{ path = "/usr/bin/curl" }}, {{ path = "/usr/bin/python3" }}]
network = [{list}]

[capabilities.spawn.operations.curl]
argv = "curl -sS --max-time 5 {{url}}"

[capabilities.spawn.operations.python]
argv = "python3 -c {{code}}"
"#
        );
        let path = self.path("m.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn run(&self, manifest: &Path, op: &str, arg: &str) -> (Output, Value) {
        let out = Command::new(env!("CARGO_BIN_EXE_spawnd"))
            .env("SPAWND_CONFIG", self.path("config.toml"))
            .args(["run", "--json", "--manifest"])
            .arg(manifest)
            .args(["--op", op, "--arg", arg])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out, v)
    }
}

#[test]
fn curl_reaches_a_granted_host_service_through_spawnd_and_the_trail_records_it() {
    let server = HostServer::start("hello through the relay");
    let s = Scratch::new();
    let grant = format!("127.0.0.1:{}", server.port);
    let m = s.manifest(std::slice::from_ref(&grant));
    let url = format!("url=http://{grant}/");
    let (out, v) = s.run(&m, "curl", &url);
    assert_eq!(out.status.code(), Some(0), "{v}");
    let data = &v["data"];
    assert_eq!(data["stdout"]["text"], "hello through the relay", "{v}");
    assert_eq!(server.accepted(), 1, "{v}");
    let network = &data["network"];
    assert_eq!(network["connections"], 1, "{network}");
    assert_eq!(network["refused"], 0, "{network}");
    let c = &network["listed"][0];
    assert_eq!(c["allowed"], true, "{c}");
    assert_eq!(c["dialed"], grant.as_str(), "{c}");
    assert!(c["bytes_down"].as_u64().unwrap() > 0, "{c}");
    // The exit record carries it, in the verified chain.
    let log = std::fs::read_to_string(s.path("audit.jsonl")).unwrap();
    let exit = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["kind"] == "exit")
        .unwrap();
    assert_eq!(exit["network"]["connections"], 1, "{exit}");
    let verify = Command::new(env!("CARGO_BIN_EXE_spawnd"))
        .args(["audit", "verify"])
        .arg(s.path("audit.jsonl"))
        .output()
        .unwrap();
    assert!(verify.status.success(), "{verify:?}");
}

#[test]
fn python_reaches_the_granted_service_and_nothing_else_on_the_host() {
    let granted = HostServer::start("granted");
    let other = HostServer::start("other");
    let s = Scratch::new();
    let m = s.manifest(&[
        format!("127.0.0.1:{}", granted.port),
        format!("other.invalid:{}", other.port),
    ]);
    let code = format!(
        "code=import urllib.request\n\
         def get(u):\n    \
           try: return urllib.request.urlopen(u, timeout=5).read().decode()\n    \
           except Exception as e: return 'refused: ' + type(e).__name__\n\
         print(get('http://127.0.0.1:{g}/'))\n\
         print(get('http://127.0.0.1:{o}/'))\n\
         print(get('http://other.invalid:{o}/'))\n\
         print(get('http://127.0.0.2:{g}/'))",
        g = granted.port,
        o = other.port
    );
    let (out, v) = s.run(&m, "python", &code);
    assert_eq!(out.status.code(), Some(0), "{v}");
    let lines: Vec<&str> = v["data"]["stdout"]["text"]
        .as_str()
        .unwrap()
        .lines()
        .collect();
    assert_eq!(lines[0], "granted", "{v}");
    for refused in &lines[1..] {
        assert!(refused.starts_with("refused: "), "{v}");
    }
    // Judged from outside: the granted service served once, the other
    // never: 127.0.0.1 with the other port is not granted, and the granted
    // name resolves (through the sandbox's DNS, spawnd's stub) to a fake
    // address spawnd dials only at what it resolves itself: nothing.
    assert_eq!(granted.accepted(), 1, "{v}");
    assert_eq!(other.accepted(), 0, "{v}");
    let network = &v["data"]["network"];
    assert!(network["refused"].as_u64().unwrap() >= 1, "{network}");
}

#[test]
fn the_daemon_relays_for_its_spawns_too() {
    let server = HostServer::start("through the daemon");
    let s = Scratch::new();
    let grant = format!("127.0.0.1:{}", server.port);
    let m = s.manifest(std::slice::from_ref(&grant));
    let socket = s.path("spawnd.sock");
    std::fs::write(
        s.path("serve.toml"),
        format!(
            "[audit]\npath = \"{}\"\n[server]\nsocket = \"{}\"\nmanifests = [\"{}\"]\n",
            s.path("audit-d.jsonl").display(),
            socket.display(),
            m.display()
        ),
    )
    .unwrap();
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_spawnd"))
        .env("SPAWND_CONFIG", s.path("serve.toml"))
        .arg("serve")
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while !socket.exists() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_spawnd"))
        .env("SPAWND_CONFIG", s.path("serve.toml"))
        .args(["run", "--json", "--socket"])
        .arg(&socket)
        .args(["--connector", "local://test/net", "--op", "curl", "--arg"])
        .arg(format!("url=http://{grant}/"))
        .output()
        .unwrap();
    let _ = daemon.kill();
    let _ = daemon.wait();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(v["data"]["stdout"]["text"], "through the daemon", "{v}");
    assert_eq!(v["data"]["network"]["connections"], 1, "{v}");
    assert_eq!(server.accepted(), 1, "{v}");
}

#[test]
fn an_operator_who_disabled_network_grants_gets_a_gate_denial() {
    let server = HostServer::start("never");
    let s = Scratch::new();
    let grant = format!("127.0.0.1:{}", server.port);
    let m = s.manifest(std::slice::from_ref(&grant));
    std::fs::write(
        s.path("config.toml"),
        format!(
            "[audit]\npath = \"{}\"\n[network]\nenabled = false\n",
            s.path("audit.jsonl").display()
        ),
    )
    .unwrap();
    let (out, v) = s.run(&m, "curl", &format!("url=http://{grant}/"));
    assert_eq!(out.status.code(), Some(3), "{v}");
    assert_eq!(v["error"]["details"]["reason"], "network_disabled", "{v}");
    assert_eq!(server.accepted(), 0, "{v}");
}
