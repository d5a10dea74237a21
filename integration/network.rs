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
        HostServer::start_at("127.0.0.1:0", body)
    }

    /// A server listening at `address` (`127.0.0.2:PORT`, say).
    fn start_at(address: &str, body: &'static str) -> HostServer {
        let listener = TcpListener::bind(address).unwrap();
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

    /// The audit log's records, in order.
    fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path("audit.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// `spawnd audit verify` passes on the log.
    fn verify(&self) {
        let verify = Command::new(env!("CARGO_BIN_EXE_spawnd"))
            .args(["audit", "verify"])
            .arg(self.path("audit.jsonl"))
            .output()
            .unwrap();
        assert!(verify.status.success(), "{verify:?}");
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
    // The connection has a record of its own, between the decision and
    // the exit, under the spawn's audit id.
    let records = s.records();
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["decision", "net", "exit"], "{records:#?}");
    let net = &records[1];
    assert_eq!(net["audit_id"], v["data"]["audit_id"], "{net}");
    assert_eq!(
        (
            &net["host"],
            &net["port"],
            &net["dialed"],
            &net["allowed"],
            &net["connected"]
        ),
        (
            &Value::from("127.0.0.1"),
            &Value::from(server.port),
            &Value::from(grant.as_str()),
            &Value::from(true),
            &Value::from(true)
        ),
        "{net}"
    );
    assert_eq!(
        (&net["connector"], &net["op"]),
        (&Value::from("local://test/net"), &Value::from("curl")),
        "{net}"
    );
    assert!(
        net["bytes_up"].as_u64().unwrap() > 0 && net["bytes_down"].as_u64().unwrap() > 0,
        "{net}"
    );
    s.verify();
    // Exported, it is OCSF Network Activity, valid against the model.
    let export = Command::new(env!("CARGO_BIN_EXE_spawnd"))
        .args(["audit", "export", "--format", "ocsf"])
        .arg(s.path("audit.jsonl"))
        .output()
        .unwrap();
    assert!(export.status.success(), "{export:?}");
    let events: Vec<Value> = String::from_utf8_lossy(&export.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let network_activity: Vec<&Value> = events.iter().filter(|e| e["class_uid"] == 4001).collect();
    assert_eq!(network_activity.len(), 1, "{events:#?}");
    assert_eq!(
        network_activity[0]["dst_endpoint"]["port"], server.port,
        "{events:#?}"
    );
    let exported = s.path("ocsf.jsonl");
    std::fs::write(&exported, &export.stdout).unwrap();
    let valid = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/validate-ocsf"
    ))
    .arg(&exported)
    .output()
    .unwrap();
    assert!(
        valid.status.success(),
        "{}{}",
        String::from_utf8_lossy(&valid.stdout),
        String::from_utf8_lossy(&valid.stderr)
    );
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

/// A JSON-RPC connection to the daemon (its handles are its own).
struct DaemonConnection {
    reader: std::io::BufReader<std::os::unix::net::UnixStream>,
    writer: std::os::unix::net::UnixStream,
}

impl DaemonConnection {
    fn open(socket: &Path) -> DaemonConnection {
        let stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        DaemonConnection {
            reader: std::io::BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    /// One call: its answer.
    fn call(&mut self, method: &str, params: Value) -> Value {
        use std::io::BufRead;
        let request =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        self.writer
            .write_all(format!("{request}\n").as_bytes())
            .unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }
}

#[test]
fn an_action_subset_naming_one_grant_leaves_the_others_unreachable() {
    // Three services the operation is granted: the one the action names,
    // another address on its port (a connection spawnd's relay takes and
    // refuses), and another port (which the sandbox's loopback refuses).
    let named = HostServer::start("named");
    let same_port = HostServer::start_at(&format!("127.0.0.2:{}", named.port), "same port");
    let other_port = HostServer::start("other port");
    let s = Scratch::new();
    let named_grant = format!("127.0.0.1:{}", named.port);
    let same_port_grant = format!("127.0.0.2:{}", same_port.port);
    let other_port_grant = format!("127.0.0.1:{}", other_port.port);
    let m = s.manifest(&[
        named_grant.clone(),
        same_port_grant.clone(),
        other_port_grant.clone(),
    ]);
    let socket = s.path("spawnd.sock");
    std::fs::write(
        s.path("serve.toml"),
        format!(
            "[audit]\npath = \"{}\"\n[server]\nsocket = \"{}\"\nmanifests = [\"{}\"]\n",
            s.path("audit.jsonl").display(),
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
    let code = format!(
        "import urllib.request\n\
         def get(u):\n    \
           try: return urllib.request.urlopen(u, timeout=5).read().decode()\n    \
           except Exception as e: return 'refused: ' + type(e).__name__\n\
         print(get('http://{named_grant}/'))\n\
         print(get('http://{same_port_grant}/'))\n\
         print(get('http://{other_port_grant}/'))"
    );
    let action = serde_json::json!(["spawn:python", format!("network:{named_grant}")]);
    let mut connection = DaemonConnection::open(&socket);
    // A malformed network entry is refused before anything runs.
    let malformed = connection.call(
        "spawn_op",
        serde_json::json!({"connector": "local://test/net", "op": "python", "args": {"code": "print(1)"},
                           "action": ["spawn:python", "network:127.0.0.1"]}),
    );
    // The check shows the narrowed grants.
    let check = connection.call(
        "spawn_check",
        serde_json::json!({"connector": "local://test/net", "op": "python", "args": {"code": code}, "action": action}),
    );
    let started = connection.call(
        "spawn_op",
        serde_json::json!({"connector": "local://test/net", "op": "python", "args": {"code": code}, "action": action}),
    );
    let status = connection.call(
        "spawn_status",
        serde_json::json!({"handle": started["result"]["handle"], "wait_ms": 30000}),
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_eq!(malformed["error"]["code"], -32602, "{malformed}");
    assert!(
        malformed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("action entry 1 is not a network grant"),
        "{malformed}"
    );
    assert_eq!(
        check["result"]["network"],
        serde_json::json!([named_grant]),
        "{check}"
    );
    let r = &status["result"];
    assert_eq!(r["exit_code"], 0, "{status}");
    let lines: Vec<&str> = r["stdout"]["text"].as_str().unwrap().lines().collect();
    assert_eq!(lines.len(), 3, "{status}");
    assert_eq!(lines[0], "named", "{status}");
    for refused in &lines[1..] {
        assert!(refused.starts_with("refused: "), "{status}");
    }
    // Judged from outside: the named grant's service served once, the
    // withheld ones never saw a connection.
    assert_eq!(named.accepted(), 1, "{status}");
    assert_eq!(same_port.accepted(), 0, "{status}");
    assert_eq!(other_port.accepted(), 0, "{status}");
    assert_eq!(r["network"]["refused"], 1, "{status}");
    assert_eq!(
        r["network"]["refusals"],
        serde_json::json!([{"host": "127.0.0.2", "port": named.port, "protocol": "tcp", "reason": "not_granted", "count": 1}]),
        "{status}"
    );
    // The trail: the decision names the subset and what it left granted,
    // and the refusal has its record.
    let records = s.records();
    let decision = records.iter().find(|r| r["kind"] == "decision").unwrap();
    assert_eq!(decision["action"], action, "{decision}");
    assert_eq!(
        decision["network_granted"],
        serde_json::json!([named_grant]),
        "{decision}"
    );
    let refused: Vec<&Value> = records
        .iter()
        .filter(|r| r["kind"] == "net" && r["allowed"] == false)
        .collect();
    assert_eq!(refused.len(), 1, "{records:#?}");
    assert_eq!(
        (&refused[0]["host"], &refused[0]["reason"]),
        (&Value::from("127.0.0.2"), &Value::from("not_granted")),
        "{refused:#?}"
    );
    s.verify();
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

#[test]
fn a_flood_of_refused_connections_is_one_record_and_a_count() {
    let granted = HostServer::start("granted");
    let s = Scratch::new();
    let m = s.manifest(&[format!("127.0.0.1:{}", granted.port)]);
    // 3000 connections to an address nobody granted (on the granted
    // port, so they reach spawnd, which resets them: the connect may
    // complete, the first read fails), and DNS queries for 200 names
    // nobody granted.
    let code = format!(
        "code=import socket\n\
         refused = 0\n\
         for i in range(3000):\n    \
           s = socket.socket()\n    \
           try: s.connect(('127.0.0.2', {g})); s.recv(1)\n    \
           except OSError: refused += 1\n    \
           s.close()\n\
         for i in range(200):\n    \
           try: socket.getaddrinfo('n%d.leak.example' % i, 80)\n    \
           except OSError: pass\n\
         print(refused)",
        g = granted.port
    );
    let (out, v) = s.run(&m, "python", &code);
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(v["data"]["stdout"]["text"], "3000\n", "{v}");
    assert_eq!(granted.accepted(), 0, "{v}");
    let network = &v["data"]["network"];
    assert_eq!(network["refused"], 3000, "{network}");
    assert_eq!(
        network["refusals"],
        serde_json::json!([{"host": "127.0.0.2", "port": granted.port, "protocol": "tcp", "reason": "not_granted", "count": 3000}]),
        "{network}"
    );
    // Judged by the log: one record for the 3000 refusals, one per
    // refused name up to the cap, and the count in the exit record.
    let records = s.records();
    let refused: Vec<&Value> = records
        .iter()
        .filter(|r| r["kind"] == "net" && r["protocol"] == "tcp")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(refused[0]["reason"], "not_granted");
    let names = records
        .iter()
        .filter(|r| r["kind"] == "net" && r["protocol"] == "dns")
        .count();
    assert_eq!(
        names, 64,
        "one record per refused name and type, at most 64"
    );
    let exit = records.iter().find(|r| r["kind"] == "exit").unwrap();
    assert_eq!(exit["network"]["refusals"][0]["count"], 3000, "{exit}");
    assert!(
        exit["network"]["dns_refused_more"].as_u64().unwrap() > 0,
        "{exit}"
    );
    assert!(records.len() < 70, "{} records", records.len());
    s.verify();
}

#[test]
fn once_a_network_record_cannot_be_written_the_spawn_has_no_more_network() {
    let server = HostServer::start("served");
    let s = Scratch::new();
    let log = s.path("audit.jsonl");
    // Made immutable (so even root cannot append) once the first
    // connection's record is in; mutable again at the end, to be removed.
    struct Mutable(PathBuf);
    impl Drop for Mutable {
        fn drop(&mut self) {
            let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
        }
    }
    let _mutable = Mutable(log.clone());
    let m = s.manifest(&[format!("127.0.0.1:{}", server.port)]);
    // Three fetches, 4 s apart: the log stops taking records after the
    // first one's.
    let code = format!(
        "code=import urllib.request, time\n\
         def get():\n    \
           try: return urllib.request.urlopen('http://127.0.0.1:{p}/', timeout=5).read().decode()\n    \
           except Exception as e: return 'refused: ' + type(e).__name__\n\
         for i in range(3):\n    \
           print(get(), flush=True)\n    \
           time.sleep(4)",
        p = server.port
    );
    let breaker = {
        let log = log.clone();
        std::thread::spawn(move || {
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_secs(30) {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.lines().any(|l| l.contains("\"kind\":\"net\"")) {
                    return Command::new("chattr")
                        .arg("+i")
                        .arg(&log)
                        .status()
                        .unwrap()
                        .success();
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            false
        })
    };
    let (_out, v) = s.run(&m, "python", &code);
    assert!(
        breaker.join().unwrap(),
        "the first connection's record never appeared: {v}"
    );
    let lines: Vec<&str> = v["data"]["stdout"]["text"]
        .as_str()
        .unwrap()
        .lines()
        .collect();
    // The second connection is made; its record is not written, and from
    // then on there is no network: the third is refused, and the service
    // never sees it.
    assert_eq!(lines[0], "served", "{v}");
    assert!(lines[2].starts_with("refused: "), "{v}");
    assert_eq!(server.accepted(), 2, "{v}");
    let error = v["data"]["network"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("audit unavailable"), "{v}");
}

#[test]
fn a_host_whose_resolv_conf_and_hosts_are_symlinks_still_gives_the_sandbox_the_stub() {
    let server = HostServer::start("linked");
    let s = Scratch::new();
    // A copy of /etc where both files are symlinks, as systemd-resolved
    // leaves them (one relative, one absolute, neither target present).
    let etc = s.path("etc");
    let copied = Command::new("cp")
        .args(["-a", "/etc"])
        .arg(&etc)
        .status()
        .unwrap();
    assert!(copied.success());
    for (name, target) in [
        ("resolv.conf", "../run/systemd/resolve/stub-resolv.conf"),
        ("hosts", "/run/elsewhere/hosts"),
    ] {
        let _ = std::fs::remove_file(etc.join(name));
        std::os::unix::fs::symlink(target, etc.join(name)).unwrap();
    }
    // The operator shows the sandbox the whole of /etc.
    std::fs::write(
        s.path("config.toml"),
        format!(
            "[audit]\npath = \"{}\"\n[sandbox]\nsystem_paths = [\"/usr\", \"/lib\", \"/lib64\", \"/bin\", \"/sbin\", \"/etc\"]\n",
            s.path("audit.jsonl").display()
        ),
    )
    .unwrap();
    let m = s.manifest(&[format!("127.0.0.1:{}", server.port)]);
    let code = format!(
        "code=import urllib.request\n\
         print(repr(open('/etc/resolv.conf').read()))\n\
         print(repr(open('/etc/hosts').read()))\n\
         print(urllib.request.urlopen('http://127.0.0.1:{}/', timeout=5).read().decode())",
        server.port
    );
    // spawnd runs in a mount namespace of its own where that copy is /etc.
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount --bind "$1" /etc && shift && exec "$@""#)
        .arg("sh")
        .arg(&etc)
        .arg(env!("CARGO_BIN_EXE_spawnd"))
        .args(["run", "--json", "--manifest"])
        .arg(&m)
        .args(["--op", "python", "--arg", &code])
        .env("SPAWND_CONFIG", s.path("config.toml"))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    assert_eq!(out.status.code(), Some(0), "{v}");
    let lines: Vec<&str> = v["data"]["stdout"]["text"]
        .as_str()
        .unwrap()
        .lines()
        .collect();
    assert_eq!(lines[0], r"'nameserver 127.0.0.1\n'", "{v}");
    assert!(lines[1].starts_with("'127.0.0.1 localhost"), "{v}");
    assert_eq!(lines[2], "linked", "{v}");
}

#[test]
fn a_flood_of_granted_connections_grows_the_log_by_a_bounded_amount() {
    let server = HostServer::start("x");
    let s = Scratch::new();
    let m = s.manifest(&[format!("127.0.0.1:{}", server.port)]);
    let code = format!(
        "code=import socket\n\
         for i in range(600):\n    \
           s = socket.create_connection(('127.0.0.1', {p}))\n    \
           s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n    \
           while s.recv(4096): pass\n    \
           s.close()\n\
         print('done')",
        p = server.port
    );
    let (out, v) = s.run(&m, "python", &code);
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(server.accepted(), 600, "{v}");
    let records = s.records();
    let net = records.iter().filter(|r| r["kind"] == "net").count();
    // The first 256 one by one, the rest a count by destination.
    assert_eq!(net, 256, "{} net records", net);
    let exit = records.iter().find(|r| r["kind"] == "exit").unwrap();
    let unreported = &exit["network"]["connections_unreported"];
    assert_eq!(unreported[0]["count"], 344, "{exit}");
    assert_eq!(unreported[0]["port"], server.port, "{exit}");
    assert_eq!(exit["network"]["connections"], 600, "{exit}");
    s.verify();
}
