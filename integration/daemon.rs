//! `spawnd serve` over a real socket: every method, who may ask, handles that
//! belong to their connection, frames the daemon must survive, a second
//! client in Python (standard library only), and `kill -9` of the daemon.

use crate::{daemon_harness, harness};

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use daemon_harness::{b64, Client, Daemon, CONNECTOR};
use harness::world;
use serde_json::{json, Value};

#[test]
fn every_method_over_a_real_socket() {
    let d = Daemon::start("methods", "");
    let mut c = d.client();
    let health = c.ok("health", json!({}));
    assert_eq!(health["protocol_version"], 1, "{health}");
    // spawn_op: output readable while running, at an offset, then the result.
    let h = c.ok("spawn_op", json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "echo first; sleep 0.3; echo second; echo oops >&2; exit 3"}}))["handle"].as_str().unwrap().to_string();
    let early = c.ok(
        "spawn_output_read",
        json!({"handle": h, "which": 0, "offset": 0, "len": 100, "wait_ms": 5000}),
    );
    assert_eq!(
        (b64(&early).as_str(), early["eof"].as_bool()),
        ("first\n", Some(false)),
        "{early}"
    );
    assert_eq!(
        c.ok("spawn_status", json!({"handle": h}))["state"],
        "running"
    );
    let done = c.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}));
    assert_eq!(
        (done["state"].as_str(), done["exit_code"].as_i64()),
        (Some("exited"), Some(3)),
        "{done}"
    );
    assert_eq!(done["stdout"]["text"], "first\nsecond\n");
    let size = c.ok("spawn_output_size", json!({"handle": h, "which": 1}));
    assert_eq!(size, json!({"bytes": 5, "truncated": false}));
    let tail = c.ok(
        "spawn_output_read",
        json!({"handle": h, "which": 0, "offset": 6, "len": 100}),
    );
    assert_eq!(
        (b64(&tail).as_str(), tail["eof"].as_bool()),
        ("second\n", Some(true))
    );
    // spawn: a raw envelope matched against the manifest, stdin as base64.
    let envelope = json!({"program": "/usr/bin/bash", "argv": ["bash", "-c", "tr a-z A-Z"], "env": {}, "stdin_b64": base64::engine::general_purpose::STANDARD.encode("piped in\n")});
    let h2 = c.ok(
        "spawn",
        json!({"connector": CONNECTOR, "envelope": envelope}),
    )["handle"]
        .as_str()
        .unwrap()
        .to_string();
    let done = c.ok("spawn_status", json!({"handle": h2, "wait_ms": 10000}));
    assert_eq!(done["stdout"]["text"], "PIPED IN\n", "{done}");
    // spawn_kill ends a running sandbox; spawn_release frees the handle.
    let h3 = c.ok(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "sleep 60"}}),
    )["handle"]
        .as_str()
        .unwrap()
        .to_string();
    c.ok("spawn_kill", json!({"handle": h3}));
    let killed = c.ok("spawn_status", json!({"handle": h3, "wait_ms": 10000}));
    assert_eq!(
        (killed["state"].as_str(), killed["signal"].as_i64()),
        (Some("signaled"), Some(9)),
        "{killed}"
    );
    c.ok("spawn_release", json!({"handle": h3}));
    assert_eq!(
        c.call("spawn_status", json!({"handle": h3}))["error"]["code"],
        -32002
    );
    // A denial is an error with the denial object, and creates no handle.
    let denied = c.call(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh", "args": {"nope": "x"}}),
    );
    assert_eq!(denied["error"]["code"], -32001, "{denied}");
    assert_eq!(denied["error"]["data"]["reason"], "arg_unknown");
    assert!(denied["error"]["data"]["audit_id"].is_string());
    let unknown = c.call(
        "spawn_op",
        json!({"connector": "local://test/none", "op": "sh"}),
    );
    assert_eq!(
        unknown["error"]["data"]["reason"], "connector_unknown",
        "{unknown}"
    );
    // Everything is in the audit trail, and the chain holds.
    let out = Command::new(&world().spawnd)
        .args(["audit", "verify"])
        .arg(&d.audit)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = std::fs::read_to_string(&d.audit).unwrap();
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("\"kind\":\"exit\""))
            .count(),
        3,
        "{text}"
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("\"kind\":\"denial\""))
            .count(),
        2,
        "{text}"
    );
}

#[test]
fn a_handle_belongs_to_its_connection() {
    let d = Daemon::start("owner", "");
    let mut a = d.client();
    let mut b = d.client();
    let h = a.ok("spawn_op", json!({"connector": CONNECTOR, "op": "true"}))["handle"].clone();
    for (method, params) in [
        ("spawn_status", json!({"handle": h})),
        ("spawn_output_size", json!({"handle": h, "which": 0})),
        ("spawn_output_read", json!({"handle": h, "which": 0})),
        ("spawn_kill", json!({"handle": h})),
        ("spawn_release", json!({"handle": h})),
    ] {
        let r = b.call(method, params);
        assert_eq!(r["error"]["code"], -32002, "{method}: {r}");
    }
    assert_eq!(
        a.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}))["state"],
        "exited"
    );
}

/// A `spawn_op` of the test connector sent by python as uid 65534 (whom
/// no `[[access]]` rule names); prints the answer line.
fn spawn_op_as_nobody_from_python(d: &Daemon) -> std::process::Output {
    let script = format!(
        "import socket,json\ns=socket.socket(socket.AF_UNIX)\ns.connect({:?})\ns.sendall(json.dumps({{'jsonrpc':'2.0','id':1,'method':'spawn_op','params':{{'connector':{CONNECTOR:?},'op':'true'}}}}).encode()+b'\\n')\nprint(s.makefile().readline())",
        d.socket.display().to_string()
    );
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            &script,
        ])
        .output()
        .unwrap()
}

#[test]
fn a_peer_not_in_access_is_refused_and_audited() {
    let d = Daemon::start("access", "");
    let out = spawn_op_as_nobody_from_python(&d);
    let answer: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"], "caller_not_allowed",
        "{answer}"
    );
    let text = std::fs::read_to_string(&d.audit).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains("caller_not_allowed") && l.contains("\"uid\":65534")),
        "{text}"
    );
}

#[test]
fn bad_frames_get_errors_and_the_daemon_keeps_serving() {
    let d = Daemon::start("frames", "max_frame_bytes = 4096\n");
    let mut c = d.client();
    c.send_raw(b"{not json\n");
    assert_eq!(c.answer().unwrap()["error"]["code"], -32700);
    assert_eq!(c.call("no_such_method", json!({}))["error"]["code"], -32601);
    c.send_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"health\"}]\n");
    assert_eq!(c.answer().unwrap()["error"]["code"], -32600);
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"spawn_status\",\"params\":{}}\n");
    assert_eq!(c.answer().unwrap()["error"]["code"], -32602);
    // Over the cap: an error naming the cap, the rest of the line dropped,
    // and the connection goes on (docs/operations.md, `max_frame_bytes`).
    let mut big = d.client();
    let mut frame = vec![b'x'; 10_000];
    frame.push(b'\n');
    big.send_raw(&frame);
    let refused = big.answer().unwrap();
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert_eq!(refused["id"], Value::Null, "{refused}");
    assert_eq!(
        refused["error"]["data"]["max_frame_bytes"], 4096,
        "{refused}"
    );
    assert_eq!(big.ok("health", json!({}))["protocol_version"], 1);
    // A line cut off by the end of the stream: an error, nothing run.
    let mut half = d.client();
    half.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"spawn_op\",\"params\":{\"conn");
    half.writer.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(half.answer().unwrap()["error"]["code"], -32700);
    // Others are still served, the first connection too.
    assert_eq!(d.client().ok("health", json!({}))["protocol_version"], 1);
    assert_eq!(c.ok("health", json!({}))["protocol_version"], 1);
}

#[test]
fn a_python_client_drives_every_method() {
    let d = Daemon::start("python", "");
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/integration/client.py");
    let out = Command::new("/usr/bin/python3")
        .arg(client)
        .arg(&d.socket)
        .arg(CONNECTOR)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("all methods ok"));
}

#[test]
fn kill_9_of_the_daemon_leaves_no_sandboxed_process() {
    let mut d = Daemon::start("kill9", "");
    let mut c = d.client();
    let token = format!("victim-of-kill9-{}", std::process::id());
    let script = format!("sleep 60; : {token}");
    c.ok(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": script}}),
    );
    harness::wait_for_host_process(&token);
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let killed = Instant::now();
    while !harness::host_processes_with(&token).is_empty() {
        assert!(
            killed.elapsed() < Duration::from_secs(1),
            "sandboxed processes outlived the daemon"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The credential reaches the child's env under its declared key only, comes
/// back redacted however the child writes it, and is in no argv, log line or
/// audit record; a group-readable credential file is refused.
#[test]
fn credentials_reach_the_child_only_and_come_back_redacted() {
    let w = world();
    let dir = w.path("daemon-creds-files");
    std::fs::create_dir_all(&dir).unwrap();
    let secret = format!("s3cr3t-{}-value", std::process::id());
    let file = dir.join("token");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let manifest = dir.join("creds.toml");
    std::fs::write(
        &manifest,
        "[connector]\nname = \"local://test/creds\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/bash\" }]\nenv_passthrough = [\"TOKEN\"]\ncredential_env_keys = [\"TOKEN\"]\n[capabilities.spawn.operations.sh]\nargv = [\"bash\", \"-c\", \"{script}\"]\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &manifest,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let extra = format!(
        "\n[[credentials]]\nconnector = \"local://test/creds\"\nkey = \"TOKEN\"\nsource = \"file:{}\"\n",
        file.display()
    );
    let d = Daemon::start_with_manifests("creds", &extra, &[&manifest]);
    let mut c = d.client();
    // Whole, then split across two writes with a pause, then the env's key names.
    let script = "echo \"whole=$TOKEN\"; printf 'split=%s' \"${TOKEN:0:5}\"; sleep 0.4; printf '%s\\n' \"${TOKEN:5}\"; env | cut -d= -f1 | grep -c TOKEN; echo \"$TOKEN\" >&2";
    let h = c.ok(
        "spawn_op",
        json!({"connector": "local://test/creds", "op": "sh", "args": {"script": script}}),
    )["handle"]
        .clone();
    // While it runs, no command line on the host holds the value.
    for _ in 0..10 {
        assert!(
            harness::host_processes_with(&secret).is_empty(),
            "the secret is in a command line"
        );
        std::thread::sleep(Duration::from_millis(30));
    }
    let done = c.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}));
    let out = done["stdout"]["text"].as_str().unwrap();
    assert_eq!(
        out, "whole=[REDACTED:TOKEN]\nsplit=[REDACTED:TOKEN]\n1\n",
        "{done}"
    );
    assert_eq!(done["stderr"]["text"], "[REDACTED:TOKEN]\n", "{done}");
    let read = c.ok(
        "spawn_output_read",
        json!({"handle": h, "which": 0, "offset": 0, "len": 1000}),
    );
    assert!(!b64(&read).contains(&secret));
    drop(c);
    let mut d = d;
    let _ = d.child.kill();
    let mut logs = String::new();
    let _ = std::io::Read::read_to_string(d.child.stderr.as_mut().unwrap(), &mut logs);
    assert!(!logs.contains(&secret), "the secret is in the daemon's log");
    let audit = std::fs::read_to_string(&d.audit).unwrap();
    assert!(!audit.contains(&secret), "the secret is in the audit trail");
    assert!(audit.contains("TOKEN"), "the key name is recorded");
    // The exit record counts what was redacted in each stream.
    let exit = audit_records(&d.audit)
        .into_iter()
        .find(|r| r["kind"] == "exit")
        .unwrap();
    assert_eq!(exit["stdout"]["redactions"], 2, "{exit}");
    assert_eq!(exit["stderr"]["redactions"], 1, "{exit}");
    // A group-readable file is refused before anything runs.
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let d2 = Daemon::start_with_manifests("creds-exposed", &extra, &[&manifest]);
    let refused = d2.client().call(
        "spawn_op",
        json!({"connector": "local://test/creds", "op": "sh", "args": {"script": "true"}}),
    );
    assert_eq!(refused["error"]["code"], -32005, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("invalid_credentials"),
        "{refused}"
    );
}

/// Writes a manifest for the discoverable-operations tests: `log` has a
/// required pattern param, an enumerated one with a default, a path and
/// an optional group; the connector may reach one host.
fn discoverable_manifest(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            r#"[connector]
name = "local://disc/{name}"
version = "1.0.0"
[capabilities.spawn]
programs = [{{ path = "/usr/bin/echo" }}]
network = ["api.example.com:443"]
[capabilities.spawn.operations.log]
argv = "echo {{rev}} --format={{format}} {{file}} [--since={{since}}]"
description = "shows a log"
[capabilities.spawn.operations.log.params.rev]
pattern = "[0-9a-f]{{7,40}}"
max_len = 40
description = "a commit"
[capabilities.spawn.operations.log.params.format]
values = ["short", "full"]
default = "short"
[capabilities.spawn.operations.log.params.file]
kind = "path"
allow_dash = true
"#
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    path
}

/// `connectors_status` gives each operation's params with their kinds and
/// rules and the connector's network grants, in full in the JSON and one
/// line each in the block; a disabled connector lists no operations.
#[test]
fn connectors_status_describes_params_and_hides_disabled_operations() {
    let w = world();
    let dir = w.path("daemon-discoverable");
    std::fs::create_dir_all(&dir).unwrap();
    let on = discoverable_manifest(&dir, "on");
    let off = discoverable_manifest(&dir, "off");
    let d = Daemon::start_with_manifests(
        "discoverable",
        "\n[[disable]]\nconnector = \"local://disc/off\"\n",
        &[on.as_path(), off.as_path()],
    );
    let v = d.client().ok("connectors_status", json!({}));
    let on = &v["connectors"]["local://disc/on"];
    assert_eq!(on["network"], json!(["api.example.com:443"]), "{v}");
    let log = &on["operations"][0];
    assert_eq!(log["name"], "log", "{v}");
    assert_eq!(
        log["params"],
        json!([
            {"name": "rev", "kind": "string", "required": true, "pattern": "[0-9a-f]{7,40}",
             "allow_dash": false, "allow_empty": false, "max_len": 40, "description": "a commit"},
            {"name": "format", "kind": "string", "required": false, "default": "short",
             "values": ["short", "full"], "allow_dash": false, "allow_empty": false, "max_len": 4096},
            {"name": "file", "kind": "path", "required": true,
             "allow_dash": true, "allow_empty": false, "max_len": 4096},
            {"name": "since", "kind": "string", "required": false,
             "allow_dash": false, "allow_empty": false, "max_len": 4096},
        ]),
        "{v}"
    );
    let block = v["block"].as_str().unwrap();
    for line in [
        r#""rev (string, required, pattern /[0-9a-f]{7,40}/, max_len 40): a commit""#,
        r#""format (string, default \"short\", one of short|full)""#,
        r#""since (string, optional)""#,
        r#""file (path, required, allow_dash)""#,
    ] {
        assert!(block.contains(line), "{line} not in {block}");
    }
    let off = &v["connectors"]["local://disc/off"];
    assert_eq!(off["status"], "disabled_by_admin", "{v}");
    assert!(
        off.get("operations").is_none() && off.get("network").is_none(),
        "{v}"
    );
    assert_eq!(block.matches("shows a log").count(), 1, "{block}");
}

/// `connectors_status` over the socket and `spawnd connectors --json` agree
/// on each status of seed 003's block.
#[test]
fn connectors_status_reports_each_connector() {
    let w = world();
    let dir = w.path("daemon-status-files");
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good");
    std::fs::write(&good, "value\n").unwrap();
    std::fs::set_permissions(&good, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let exposed = dir.join("exposed");
    std::fs::write(&exposed, "value\n").unwrap();
    std::fs::set_permissions(
        &exposed,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let mut manifests = Vec::new();
    for name in ["bound", "unbound", "broken", "off"] {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(
            &path,
            format!("[connector]\nname = \"local://status/{name}\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/true\" }}]\nenv_passthrough = [\"K\"]\ncredential_env_keys = [\"K\"]\n[capabilities.spawn.operations.t]\nargv = \"true\"\ndescription = \"does nothing\"\n"),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        manifests.push(path);
    }
    let extra = format!(
        "\n[[credentials]]\nconnector = \"local://status/bound\"\nsource = \"file:{}\"\n[[credentials]]\nconnector = \"local://status/broken\"\nsource = \"file:{}\"\n[[credentials]]\nconnector = \"local://status/off\"\nsource = \"file:{}\"\n[[disable]]\nconnector = \"local://status/off\"\n",
        good.display(),
        exposed.display(),
        good.display()
    );
    let refs: Vec<&std::path::Path> = manifests.iter().map(|p| p.as_path()).collect();
    let d = Daemon::start_with_manifests("status", &extra, &refs);
    let v = d.client().ok("connectors_status", json!({}));
    let status = |name: &str| {
        v["connectors"][name]["status"]
            .as_str()
            .unwrap_or("missing")
            .to_string()
    };
    assert_eq!(status("local://status/bound"), "connected", "{v}");
    assert_eq!(status("local://status/unbound"), "not_configured", "{v}");
    assert_eq!(
        status("local://status/broken"),
        "invalid_credentials",
        "{v}"
    );
    assert_eq!(status("local://status/off"), "disabled_by_admin", "{v}");
    assert_eq!(status("local://test/escape"), "connected", "{v}");
    let ops = &v["connectors"]["local://status/bound"]["operations"][0];
    assert_eq!(
        (
            ops["name"].as_str(),
            ops["description"].as_str(),
            ops["mode"].as_str()
        ),
        (Some("t"), Some("does nothing"), Some("readonly"))
    );
    let block = v["block"].as_str().unwrap();
    assert!(
        block.starts_with("<connector_status captured_at=\"")
            && block.ends_with("</connector_status>"),
        "{block}"
    );
    let config = d.socket.parent().unwrap().join("config.toml");
    let out = Command::new(&w.spawnd)
        .args(["connectors", "--json", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        cli["data"]["connectors"]["local://status/broken"]["status"], "invalid_credentials",
        "{cli}"
    );
    assert_eq!(
        cli["data"]["connectors"]["local://status/off"]["status"],
        "disabled_by_admin"
    );
}

/// SIGTERM: no new connections, the running spawn finishes, its exit record
/// is written, and the daemon exits cleanly.
#[test]
fn sigterm_lets_running_spawns_finish() {
    let mut d = Daemon::start("drain", "");
    let mut c = d.client();
    let h = c.ok(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "sleep 1; echo finished"}}),
    )["handle"]
        .clone();
    let stopped = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    while UnixStream::connect(&d.socket).is_ok() {
        assert!(
            stopped.elapsed() < Duration::from_secs(5),
            "still accepting after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The open connection is still served while the spawn drains.
    let done = c.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}));
    assert_eq!(
        (done["exit_code"].as_i64(), done["stdout"]["text"].as_str()),
        (Some(0), Some("finished\n")),
        "{done}"
    );
    let status = d.child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(stopped.elapsed() < Duration::from_secs(5));
    assert!(
        daemon_harness::audit_has(&d.audit, &["\"kind\":\"exit\"", "\"exit_code\":0"]),
        "{}",
        std::fs::read_to_string(&d.audit).unwrap()
    );
}

/// SIGHUP with a broken manifest keeps serving the old one; a good one is
/// taken. (Found here: a running spawn's supervisor took the daemon's SIGHUP
/// from the process and killed its sandbox instead.)
#[test]
fn sighup_with_a_broken_manifest_keeps_the_old_one() {
    let w = world();
    let dir = w.path("daemon-reload-files");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("reload.toml");
    let text = |op: &str| {
        format!("[connector]\nname = \"local://reload/a\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/true\" }}]\n[capabilities.spawn.operations.{op}]\nargv = \"true\"\n")
    };
    std::fs::write(&path, text("first")).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let mut d = Daemon::start_with_manifests("reload", "", &[&path]);
    let mut log = BufReader::new(d.child.stderr.take().unwrap());
    let pid = nix::unistd::Pid::from_raw(d.child.id() as i32);
    let hup = || nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    let mut c = d.client();
    let run = |c: &mut Client, op: &str| {
        c.call(
            "spawn_op",
            json!({"connector": "local://reload/a", "op": op}),
        )
    };
    assert!(run(&mut c, "first").get("result").is_some());
    std::fs::write(&path, "[connector\nthis is not TOML").unwrap();
    hup();
    // The daemon says why it refused the reload (and reads nothing else).
    let mut line = String::new();
    while !line.contains("reload refused") {
        line.clear();
        assert!(
            log.read_line(&mut line).unwrap() > 0,
            "the daemon's log ended"
        );
    }
    assert!(line.contains("reload.toml"), "{line}");
    let still = run(&mut c, "first");
    assert!(
        still.get("result").is_some(),
        "the old manifest stays in force: {still}"
    );
    std::fs::write(&path, text("second")).unwrap();
    hup();
    let fixed = Instant::now();
    while run(&mut c, "second").get("result").is_none() {
        assert!(
            fixed.elapsed() < Duration::from_secs(10),
            "the fixed manifest is never taken"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        run(&mut c, "first")["error"]["data"]["reason"],
        "op_unknown"
    );
}

/// A manifest for connector `local://log/{name}` with one operation `op`.
fn small_manifest(dir: &std::path::Path, name: &str, op: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!("[connector]\nname = \"local://log/{name}\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/true\" }}]\n[capabilities.spawn.operations.{op}]\nargv = \"true\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    path
}

/// Without `--verbose`, `serve` tells the operator at info what it serves on
/// start, what each reload changed, why a reload was refused (and that the
/// old manifests stay), and that it drains on SIGTERM.
#[test]
fn serve_logs_start_reload_refusal_and_drain_without_verbose() {
    let w = world();
    let dir = w.path("daemon-log-manifests");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    small_manifest(&dir, "kept", "x");
    small_manifest(&dir, "gone", "x");
    small_manifest(&dir, "edited", "x");
    let mut d = Daemon::start_with_manifests("log", "", &[&dir]);
    let log = d.log();
    let start = log.line_with("serving");
    assert!(start.starts_with("spawnd: "), "{start}");
    assert!(start.contains(&d.socket.display().to_string()), "{start}");
    assert!(
        start.contains("local://log/kept") && start.contains("local://log/gone"),
        "{start}"
    );
    assert!(start.contains("daemon-log-manifests"), "{start}");

    std::fs::remove_file(dir.join("gone.toml")).unwrap();
    small_manifest(&dir, "edited", "y");
    small_manifest(&dir, "new", "x");
    d.signal(nix::sys::signal::Signal::SIGHUP);
    let reloaded = log.line_with("reloaded");
    assert!(
        reloaded.contains("added=[\"local://log/new\"]")
            && reloaded.contains("removed=[\"local://log/gone\"]")
            && reloaded.contains("changed=[\"local://log/edited\"]"),
        "{reloaded}"
    );
    d.signal(nix::sys::signal::Signal::SIGHUP);
    assert!(log.line_with("reloaded").contains("no connector changed"));

    std::fs::write(dir.join("new.toml"), "[connector\nnot TOML").unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    let refused = log.line_with("reload refused");
    assert!(
        refused.contains("new.toml") && refused.contains("stay in force"),
        "{refused}"
    );

    d.signal(nix::sys::signal::Signal::SIGTERM);
    let stopping = log.line_with("stopping");
    assert!(stopping.contains("SIGTERM"), "{stopping}");
    log.line_with("stopped");
    assert!(d.child.wait().unwrap().success());
}

/// After a refused reload, `health` says the daemon serves stale manifests,
/// why and since when, until a reload succeeds.
#[test]
fn health_says_stale_manifests_after_a_refused_reload_until_one_succeeds() {
    let w = world();
    let dir = w.path("daemon-stale-manifests");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let file = small_manifest(&dir, "stale", "x");
    let mut d = Daemon::start_with_manifests("stale", "", &[&file]);
    let log = d.log();
    let mut c = d.client();
    let before = c.ok("health", json!({}));
    assert_eq!(before["stale_manifests"], Value::Null, "{before}");

    std::fs::write(&file, "[connector\nnot TOML").unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    log.line_with("reload refused");
    let stale = c.ok("health", json!({}));
    assert_ne!(stale["status"], "healthy", "{stale}");
    let error = stale["stale_manifests"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(error.contains("stale.toml"), "{stale}");
    let at = stale["stale_manifests"]["refused_at"]
        .as_str()
        .unwrap_or_default();
    assert!(at.ends_with('Z') && at.contains('T'), "{stale}");
    assert!(
        stale["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str().unwrap_or_default().contains("stale manifests")),
        "{stale}"
    );

    small_manifest(&dir, "stale", "y");
    d.signal(nix::sys::signal::Signal::SIGHUP);
    log.line_with("reloaded");
    let fresh = c.ok("health", json!({}));
    assert_eq!(fresh["stale_manifests"], Value::Null, "{fresh}");
    assert_eq!(fresh["status"], before["status"], "{fresh}");
    assert_eq!(fresh["reasons"], before["reasons"], "{fresh}");
}

/// A connector named by two manifest files: the refused reload names both.
#[test]
fn a_duplicate_connector_names_both_manifest_files() {
    let w = world();
    let dir = w.path("daemon-duplicate-manifests");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let first = small_manifest(&dir, "twice", "x");
    let mut d = Daemon::start_with_manifests("duplicate", "", &[&dir]);
    let log = d.log();
    log.line_with("serving");
    let second = dir.join("zz-second.toml");
    std::fs::copy(&first, &second).unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    let refused = log.line_with("reload refused");
    assert!(
        refused.contains("local://log/twice")
            && refused.contains(&first.display().to_string())
            && refused.contains(&second.display().to_string()),
        "{refused}"
    );
}

/// A signal to the daemon is the daemon's: a running spawn is not killed by it.
#[test]
fn a_sighup_to_the_daemon_does_not_end_a_running_spawn() {
    let d = Daemon::start("hup-running", "");
    let mut c = d.client();
    let h = c.ok(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "sleep 0.5; echo survived"}}),
    )["handle"]
        .clone();
    std::thread::sleep(Duration::from_millis(100));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.child.id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let done = c.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}));
    assert_eq!(
        (done["state"].as_str(), done["stdout"]["text"].as_str()),
        (Some("exited"), Some("survived\n")),
        "{done}"
    );
}

/// `spawnd run` as root with `args`, in-process or through `socket`.
fn run_cli(socket: Option<&std::path::Path>, args: &[&str], stdin: &[u8]) -> std::process::Output {
    let w = world();
    let mut cmd = Command::new(&w.spawnd);
    cmd.arg("run");
    match socket {
        Some(s) => cmd.arg("--socket").arg(s),
        None => cmd.arg("--config").arg(w.config(harness::As::Root)),
    };
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir(&w.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// A result's `timings.phases` carry init's own times on its setup, and
/// they fit within the span the supervisor saw from the clone (or the order
/// to the spawner) to init's report: init starts after the one and sends
/// the other once released.
fn init_times_fit_in_the_supervisors(result: &Value) {
    let phases = &result["data"]["timings"]["phases"];
    let us = |key: &str| {
        phases[key]
            .as_u64()
            .unwrap_or_else(|| panic!("no {key} in {phases}"))
    };
    let (ready, waited) = (us("init_ready_us"), us("release_wait_us"));
    assert!(ready > 0, "{phases}");
    // Whole µs on each side: a rounding each.
    let seen = us("clone_and_release_us") + us("sandbox_setup_us") + 2;
    assert!(ready + waited <= seen, "{phases}");
}

#[test]
fn run_through_the_socket_matches_run_in_this_process() {
    let d = Daemon::start("remote", "");
    let w = world();
    let manifest = w.manifest.display().to_string();
    let sh = |script: &str| {
        vec![
            "--manifest".to_string(),
            manifest.clone(),
            "--op".into(),
            "sh".into(),
            "--arg".into(),
            format!("script={script}"),
        ]
    };
    let cases: Vec<(Vec<String>, &[u8], Option<i32>)> = vec![
        (sh("echo out; echo err >&2; exit 7"), b"", Some(7)),
        (sh("kill -TERM $$"), b"", Some(143)),
        (sh("tr a-z A-Z"), b"from stdin\n", Some(0)),
        // Long enough for the program to have started under an emulated
        // kernel too: a deadline passing while the sandbox is still being
        // set up is met by SIGKILL after the grace (init is pid 1 of its
        // namespace: it drops a SIGTERM that comes before it is ready to
        // forward one), and the two runs would end by different signals.
        (
            [sh("sleep 30"), vec!["--timeout".into(), "2s".into()]].concat(),
            b"",
            Some(124),
        ),
        (
            [sh("echo x"), vec!["--arg".into(), "nope=1".into()]].concat(),
            b"",
            Some(3),
        ),
    ];
    for (args, stdin, expected) in cases {
        let mut args = args;
        if !stdin.is_empty() {
            args.extend(["--stdin-file".into(), "-".into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let local = run_cli(None, &args, stdin);
        let remote = run_cli(Some(&d.socket), &args, stdin);
        let shown = |o: &std::process::Output| {
            format!(
                "exit {:?}\nstdout {}\nstderr {}",
                o.status.code(),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        };
        assert_eq!(local.status.code(), expected, "{args:?}\n{}", shown(&local));
        assert_eq!(
            remote.status.code(),
            expected,
            "{args:?}\n{}",
            shown(&remote)
        );
        assert_eq!(local.stdout, remote.stdout, "{args:?}");
        // The denial's message names the same reason; spawnd's notes match too.
        let lines = |o: &std::process::Output| {
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .filter(|l| !l.contains("audit_id"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(lines(&local), lines(&remote), "{args:?}");

        // --json: the same result object (timings and ids aside).
        let json_args: Vec<&str> = std::iter::once("--json")
            .chain(args.iter().copied())
            .collect();
        let local = run_cli(None, &json_args, stdin);
        let remote = run_cli(Some(&d.socket), &json_args, stdin);
        assert_eq!(local.status.code(), remote.status.code(), "{json_args:?}");
        let (l, r): (Value, Value) = (
            serde_json::from_slice(&local.stdout).unwrap(),
            serde_json::from_slice(&remote.stdout).unwrap(),
        );
        assert_eq!(l["ok"], r["ok"], "{l}\n{r}");
        if l["ok"] == json!(true) {
            for key in [
                "exit_code",
                "signal",
                "timed_out",
                "stdout",
                "stderr",
                "connector",
                "op",
                "program",
                "argv_shape",
            ] {
                assert_eq!(l["data"][key], r["data"][key], "{key}: {l}\n{r}");
            }
            let keys = |v: &Value| {
                v["data"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
            };
            assert_eq!(keys(&l), keys(&r));
            assert!(r["data"]["audit_id"].is_string(), "{r}");
            init_times_fit_in_the_supervisors(&l);
            init_times_fit_in_the_supervisors(&r);
        } else {
            assert_eq!(l["error"]["code"], r["error"]["code"]);
            assert_eq!(
                l["error"]["details"]["reason"],
                r["error"]["details"]["reason"]
            );
        }
    }

    // --connector instead of --manifest; a daemon that is not there is exit 5.
    let by_name = run_cli(
        Some(&d.socket),
        &[
            "--connector",
            CONNECTOR,
            "--op",
            "sh",
            "--arg",
            "script=echo named",
        ],
        b"",
    );
    assert_eq!(
        (by_name.status.code(), by_name.stdout.as_slice()),
        (Some(0), b"named\n".as_slice())
    );
    let gone = run_cli(
        Some(&w.path("no-such-daemon.sock")),
        &[
            "--connector",
            CONNECTOR,
            "--op",
            "sh",
            "--arg",
            "script=true",
        ],
        b"",
    );
    assert_eq!(gone.status.code(), Some(5));
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("daemon unavailable"),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );
}

#[test]
fn run_through_the_socket_streams_output_as_it_arrives() {
    let d = Daemon::start("remote-live", "");
    // The program prints its first lines, then waits for a file the test
    // creates only after it has read them: lines that reach the caller
    // before that file exists were streamed, not delivered at the end.
    let go = world()
        .path("ro")
        .join(format!("go-{}-remote-live", std::process::id()));
    let _ = std::fs::remove_file(&go);
    let script = format!(
        "echo early; echo early-err >&2; while [ ! -e {} ]; do sleep 0.05; done; echo late",
        go.display()
    );
    let mut child = Command::new(&world().spawnd)
        .arg("run")
        .arg("--socket")
        .arg(&d.socket)
        .args(["--connector", CONNECTOR, "--op", "sh", "--arg"])
        .arg(format!("script={script}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Without streaming the reads below would wait for the end, which never
    // comes: after 60 s a watchdog creates the file and the test fails.
    let gave_up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let (go, gave_up) = (go.clone(), gave_up.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            while !go.exists() && started.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(50));
            }
            if !go.exists() {
                gave_up.store(true, std::sync::atomic::Ordering::SeqCst);
                std::fs::write(&go, "").unwrap();
            }
        })
    };
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let (mut first, mut first_err) = (String::new(), String::new());
    out.read_line(&mut first).unwrap();
    err.read_line(&mut first_err).unwrap();
    assert!(
        !gave_up.load(std::sync::atomic::Ordering::SeqCst),
        "the first lines arrived only when the program could end"
    );
    assert_eq!(
        (first.as_str(), first_err.as_str()),
        ("early\n", "early-err\n")
    );
    std::fs::write(&go, "").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(rest, "late\n");
    assert!(child.wait().unwrap().success());
    watchdog.join().unwrap();
    let _ = std::fs::remove_file(&go);
}

/// The capability bounding set of the shipped unit, in setpriv's syntax.
fn unit_bounding_set() -> String {
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/systemd/spawnd.service"),
    )
    .unwrap();
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit sets CapabilityBoundingSet");
    std::iter::once("-all".to_string())
        .chain(
            line.split_whitespace()
                .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase())),
        )
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn the_daemon_works_under_the_shipped_units_capabilities_and_no_new_privileges() {
    let w = world();
    let extra = format!("[[access]]\nconnector = {CONNECTOR:?}\nuids = [65534]\n");
    let wrap: Vec<String> = vec![
        "setpriv".into(),
        "--no-new-privs".into(),
        format!("--bounding-set={}", unit_bounding_set()),
        format!("--inh-caps=-all"),
    ];
    let d = Daemon::start_under("unitcaps", &extra, &[], &wrap);
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.child.id())).unwrap();
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    // The unit keeps CAP_SYS_NICE: the spawner runs ahead of the daemon.
    let stat = |pid: &str| std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let daemon = d.child.id().to_string();
    let children =
        std::fs::read_to_string(format!("/proc/{daemon}/task/{daemon}/children")).unwrap();
    let spawner = children.split_whitespace().next().expect("a spawner");
    assert_eq!(
        nice_in_stat(&stat(spawner)),
        (nice_in_stat(&stat(&daemon)) - 5).max(-20),
        "the spawner's priority under the unit's capabilities"
    );
    // Root and an unprivileged peer, each through `run --socket`.
    for who in [harness::As::Root, harness::As::Nobody] {
        let mut cmd = daemon_harness::spawnd_as(who);
        let out = cmd
            .args(["run", "--socket"])
            .arg(&d.socket)
            .args(["--connector", CONNECTOR, "--op", "sh", "--arg"])
            .arg("script=id -u; echo hello > /tmp/x; cat /tmp/x; head -c 4 /dev/urandom | wc -c")
            .current_dir(&w.dir)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        // A root caller's child runs as 65534 (docs/sandbox.md: never host uid 0).
        let expected_uid = "65534";
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{expected_uid}\nhello\n4\n"),
            "{who:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(0), "{who:?}");
    }
    // spawn_kill reaches an unprivileged peer's sandbox.
    let mut c = d.client();
    let h = c.ok(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "sleep 60"}}),
    )["handle"]
        .as_str()
        .unwrap()
        .to_string();
    c.ok("spawn_kill", json!({"handle": h}));
    let killed = c.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}));
    assert_eq!(killed["signal"], 9, "{killed}");
}

#[test]
fn the_shipped_units_pass_systemd_analyze_verify() {
    let dir = world().path("units");
    std::fs::create_dir_all(&dir).unwrap();
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/systemd");
    for name in ["spawnd.service", "spawnd.socket"] {
        // ExecStart must name a file that exists: this build's binary.
        let text = std::fs::read_to_string(shipped.join(name))
            .unwrap()
            .replace(
                "/usr/local/bin/spawnd",
                &world().spawnd.display().to_string(),
            );
        std::fs::write(dir.join(name), text).unwrap();
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.join("spawnd.service"))
        .arg(dir.join("spawnd.socket"))
        .output()
        .expect("systemd-analyze (package systemd) is installed by scripts/setup");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

#[test]
fn as_root_the_daemon_checks_each_scope_as_the_calling_user() {
    use std::os::unix::fs::PermissionsExt;
    let w = world();
    let base = w.path("daemon-scopes");
    let parent = base.join("parent");
    let readable = parent.join("data");
    let writable = base.join("out");
    std::fs::create_dir_all(&readable).unwrap();
    std::fs::create_dir_all(&writable).unwrap();
    std::fs::write(readable.join("file"), "scoped data\n").unwrap();
    let chmod = |p: &std::path::Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    chmod(&base, 0o755);
    chmod(&readable.join("file"), 0o644);
    // A program only root may execute.
    let private = base.join("private-true");
    std::fs::copy("/usr/bin/true", &private).unwrap();
    chmod(&private, 0o700);
    let manifest = base.join("scopes.toml");
    std::fs::write(
        &manifest,
        format!(
            "[connector]\nname = \"local://test/scopes\"\nversion = \"1.0.0\"\n\n\
             [capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/bash\" }}, {{ path = \"{}\" }}]\n\
             fs_read = [\"{}\"]\nfs_write = [\"{}\"]\nenv_set = {{ PATH = \"/usr/bin:/bin\" }}\n\n\
             [capabilities.spawn.operations.sh]\nargv = [\"bash\", \"-c\", \"{{script}}\"]\n\n\
             [capabilities.spawn.operations.private]\nargv = [\"private-true\"]\n",
            private.display(),
            readable.display(),
            writable.display()
        ),
    )
    .unwrap();
    chmod(&manifest, 0o644);
    let extra = "[[access]]\nconnector = \"local://test/scopes\"\nuids = [65534]\n";
    let d = Daemon::start_with_manifests("scopes", extra, &[&manifest]);
    let run = |who: harness::As, write: bool| {
        let mut cmd = daemon_harness::spawnd_as(who);
        let out = cmd
            .args(["run", "--socket"])
            .arg(&d.socket)
            .args(["--connector", "local://test/scopes", "--op", "sh", "--arg"])
            .arg(match write {
                true => format!(
                    "script=cat {}/file && echo ok > {}/written",
                    readable.display(),
                    writable.display()
                ),
                false => format!("script=cat {}/file", readable.display()),
            })
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let nobody = harness::As::Nobody;

    // Everything open to nobody: the run works.
    chmod(&parent, 0o755);
    chmod(&readable, 0o755);
    std::os::unix::fs::chown(&writable, Some(65534), Some(65534)).unwrap();
    chmod(&writable, 0o700);
    let (code, out, err) = run(nobody, true);
    assert_eq!((code, out.as_str()), (Some(0), "scoped data\n"), "{err}");
    assert!(writable.join("written").exists());

    // A read scope nobody may not list, one it cannot reach, a write scope it
    // may not write: each refused, naming the scope, nothing run. Root's
    // program runs as 65534 (docs/sandbox.md): allowed where only the path to
    // a scope is closed (the sandbox makes its own path); a scope root owns
    // is mounted idmapped, the program its owner there ("Scopes of a root
    // caller"), and where this kernel cannot idmap it, the run is refused as
    // 65534 may not use the scope's own inode, saying why.
    let cases: [(&dyn Fn(), &std::path::Path, &str, bool); 3] = [
        (
            &|| chmod(&readable, 0o700),
            &readable,
            "may not read+search/execute",
            false,
        ),
        (
            &|| {
                chmod(&readable, 0o755);
                chmod(&parent, 0o700)
            },
            &readable,
            "must be able to reach it",
            true,
        ),
        (
            &|| {
                chmod(&parent, 0o755);
                std::os::unix::fs::chown(&writable, Some(0), Some(0)).unwrap();
                chmod(&writable, 0o755);
            },
            &writable,
            "may not read+write+search/execute",
            false,
        ),
    ];
    for (arrange, scope, says, root_may) in cases {
        arrange();
        let _ = std::fs::remove_file(writable.join("written"));
        let (code, out, err) = run(nobody, true);
        assert_eq!(code, Some(5), "{out}{err}");
        assert!(
            err.contains(&scope.display().to_string()) && err.contains(says),
            "{err}"
        );
        assert!(!writable.join("written").exists());
        let (code, out, err) = run(harness::As::Root, false);
        if root_may || code == Some(0) {
            assert_eq!((code, out.as_str()), (Some(0), "scoped data\n"), "{err}");
        } else {
            assert_eq!(code, Some(5), "{out}{err}");
            assert!(
                err.contains("the program runs as uid 65534")
                    && err.contains(says)
                    && err.contains("could not be mounted idmapped"),
                "{err}"
            );
        }
    }
    // Nor does spawnd run a program the caller could not execute (the
    // scopes open to nobody again).
    std::os::unix::fs::chown(&writable, Some(65534), Some(65534)).unwrap();
    chmod(&writable, 0o700);
    let private_run = |who: harness::As| {
        let mut cmd = daemon_harness::spawnd_as(who);
        cmd.args(["run", "--socket"])
            .arg(&d.socket)
            .args(["--connector", "local://test/scopes", "--op", "private"])
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let refused = private_run(nobody);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(5), "{said}");
    assert!(said.contains("may not execute"), "{said}");
    // Nor for root, whose program would run as 65534.
    let refused = private_run(harness::As::Root);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(5), "{said}");
    assert!(said.contains("the program runs as uid 65534"), "{said}");
}

#[test]
fn buffered_output_is_bounded_across_the_daemon() {
    // The test connector keeps at most 1 MiB of stdout and 256 KiB of stderr
    // per spawn (1.25 MiB reserved while it runs): 2 MiB holds one, not two.
    let d = Daemon::start("budget", "max_buffered_output_bytes = 2097152\n");
    let mut c = d.client();
    let mut other = d.client();
    let spawn = |c: &mut Client, script: &str| {
        c.call(
            "spawn_op",
            json!({"connector": CONNECTOR, "op": "sh", "args": {"script": script}}),
        )
    };
    let first = spawn(&mut c, "sleep 1; head -c 900000 /dev/zero | tr '\\0' x")["result"]["handle"]
        .as_str()
        .unwrap()
        .to_string();
    // Another connection is refused while the first may still fill its caps.
    let refused = spawn(&mut other, "true");
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_buffered_output_bytes"),
        "{refused}"
    );
    // Once it ends, what it kept (900,000 bytes) stays reserved until the
    // handle is released: 0.86 + 1.25 MiB does not fit in 2 MiB yet.
    let done = c.ok("spawn_status", json!({"handle": first, "wait_ms": 10000}));
    assert_eq!(done["stdout"]["bytes"], 900000, "{}", done["stderr"]);
    assert_eq!(done["stdout"]["text"].as_str().unwrap().len(), 900000);
    assert_eq!(spawn(&mut other, "true")["error"]["code"], -32003);
    // Releasing the handle gives its bytes back.
    c.ok("spawn_release", json!({"handle": first}));
    let next = spawn(&mut other, "echo after");
    let h = next["result"]["handle"]
        .as_str()
        .unwrap_or_else(|| panic!("{next}"));
    let done = other.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}));
    assert_eq!(done["stdout"]["text"], "after\n");
}

#[test]
fn sigterm_kills_what_outlives_the_grace_period_and_records_it() {
    let mut d = Daemon::start("grace", "shutdown_grace_ms = 300\n");
    let mut c = d.client();
    let token = "grace-outliver-7f3a";
    let h = c.ok(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": format!("exec -a {token} sleep 60")}}),
    )["handle"]
        .clone();
    harness::wait_for_host_process(token);
    let stopped = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // The waiting caller learns the sandbox was killed after the grace period.
    let done = c.ok("spawn_status", json!({"handle": h, "wait_ms": 20000}));
    assert_eq!(
        (done["state"].as_str(), done["signal"].as_i64()),
        (Some("signaled"), Some(9)),
        "{done}"
    );
    let status = d.child.wait().unwrap();
    let took = stopped.elapsed();
    assert!(status.success(), "{status}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(harness::host_processes_with(token).is_empty());
    assert!(
        daemon_harness::audit_has(&d.audit, &["\"kind\":\"exit\"", "\"signal\":9"]),
        "{}",
        std::fs::read_to_string(&d.audit).unwrap()
    );
}

/// Field 19 of `/proc/PID/stat` (the text after the command's parenthesis).
fn nice_in_stat(stat: &str) -> i32 {
    let after = &stat[stat.rfind(')').expect("a stat line") + 1..];
    after.split_whitespace().nth(16).unwrap().parse().unwrap()
}

/// The spawner runs ahead of the daemon (a lower nice value: it is the one
/// serial stage under load), and no sandbox keeps that: the program runs at
/// the daemon's own priority, whether its sandbox was made at the request
/// or ahead of it, and under a spawner started again after the first died.
#[test]
fn the_spawner_runs_ahead_and_its_programs_at_the_daemons_priority() {
    let _w = world();
    let d = Daemon::start("priority", "");
    let stat = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let daemon_nice = nice_in_stat(&stat(d.child.id()));
    // The live one (a killed spawner stays a child until it is reaped), a
    // child of whichever of the daemon's threads started it.
    let spawner_of_daemon = || -> Option<u32> {
        std::fs::read_dir(format!("/proc/{}/task", d.child.id()))
            .ok()?
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|c| {
                c.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .find(|p: &u32| {
                std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                    s.rfind(')')
                        .is_some_and(|i| !s[i + 1..].trim_start().starts_with('Z'))
                })
            })
    };
    let mut c = d.client();
    for generation in ["forked", "started again"] {
        let spawner = spawner_of_daemon().expect("the daemon has its spawner");
        assert_eq!(
            nice_in_stat(&stat(spawner)),
            (daemon_nice - 5).max(-20),
            "the {generation} spawner's priority"
        );
        let mut ahead = 0;
        for _ in 0..3 {
            // Nor can the program raise its own (no CAP_SYS_NICE, RLIMIT_NICE 0).
            let r = c.run_sh("renice -n -1 -p $$ >/dev/null 2>&1; cat /proc/self/stat");
            assert_eq!(r["exit_code"], 0, "{r}");
            let text = r["stdout"]["text"].as_str().unwrap();
            assert_eq!(
                nice_in_stat(text),
                daemon_nice,
                "the program's priority: {r}"
            );
            if r["isolation"]["network_namespace"]
                .as_str()
                .is_some_and(|n| n.contains("made ahead"))
            {
                ahead += 1;
            }
            // Time for a spare sandbox to be made before the next request.
            std::thread::sleep(Duration::from_millis(200));
            // Spare sandboxes wait at the daemon's priority too.
            let spares =
                std::fs::read_to_string(format!("/proc/{spawner}/task/{spawner}/children"))
                    .unwrap_or_default();
            for spare in spares.split_whitespace() {
                if let Ok(s) = std::fs::read_to_string(format!("/proc/{spare}/stat")) {
                    assert_eq!(nice_in_stat(&s), daemon_nice, "a spare sandbox: {s}");
                }
            }
        }
        assert!(
            ahead > 0,
            "no run of the {generation} spawner used a spare sandbox"
        );
        if generation == "forked" {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(spawner as i32),
                nix::sys::signal::Signal::SIGKILL,
            )
            .unwrap();
            // The next request finds it gone and starts another.
            let started = Instant::now();
            loop {
                let r = c.call(
                    "spawn_op",
                    json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "true"}}),
                );
                if let Some(h) = r.get("result").map(|r| r["handle"].clone()) {
                    c.ok("spawn_release", json!({"handle": h}));
                    if spawner_of_daemon().is_some_and(|p| p != spawner) {
                        break;
                    }
                }
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "no new spawner: {r}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// A sandbox whose setup fails inside it (here, a scope
/// swapped for another directory between the daemon's check and the
/// sandbox's mount) has usually left the go-ahead pipe broken by the time
/// the daemon releases the program; the daemon must still report the
/// sandbox's own reason, as in-process `run` does, not the pipe.
#[test]
fn a_setup_failure_inside_the_sandbox_keeps_its_reason_through_the_daemon() {
    let w = world();
    let nest = w.path("rw/swap-daemon");
    let _ = std::fs::remove_dir_all(&nest);
    std::fs::create_dir_all(nest.join("a")).unwrap();
    std::fs::create_dir_all(nest.join("b")).unwrap();
    let manifest = w.path("outside/swap-daemon.toml");
    std::fs::write(&manifest, format!(
        "[connector]\nname = \"local://t/swap-daemon\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/true\" }}]\nfs_read = [\"{n}/a\"]\n[capabilities.spawn.operations.x]\nargv = \"true\"\n",
        n = nest.display()
    )).unwrap();
    let d = Daemon::start_with_manifests("swap", "", &[manifest.as_path()]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, a, b, t) = (stop.clone(), nest.join("a"), nest.join("b"), nest.join("t"));
        // Not atomic: the scope is missing now and then, which the daemon
        // takes as a missing read scope (not mounted), never an error.
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::rename(&a, &t).unwrap();
                std::fs::rename(&b, &a).unwrap();
                std::fs::rename(&t, &b).unwrap();
                std::thread::sleep(Duration::from_micros(50));
            }
        })
    };
    let m = manifest.display().to_string();
    let (mut inside, mut runs) = (0, 0);
    let started = Instant::now();
    while inside < 5 && started.elapsed() < Duration::from_secs(60) {
        runs += 1;
        let out = run_cli(
            Some(&d.socket),
            &["--json", "--manifest", &m, "--op", "x"],
            b"",
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.code() == Some(0) {
            continue;
        }
        assert!(
            !text.contains("release the program"),
            "the sandbox's reason is lost: {text}"
        );
        if text.contains("changed between check and mount") {
            inside += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(
        inside >= 5,
        "only {inside} of {runs} runs failed inside the sandbox"
    );
}

// ---------------------------------------------------------------------------
// Audit hardening: peers that `[[access]]` does not allow can neither flood
// nor forge the audit log, and `health` / `connectors_status` follow
// `[[access]]` like every other method.
// ---------------------------------------------------------------------------

/// Runs `script` (Python, standard library only) as nobody (uid 65534, gid
/// 65534, no groups) with the daemon's socket path as its first argument, and
/// returns what it printed: one JSON answer per line.
fn python_as_nobody(socket: &std::path::Path, script: &str) -> Vec<Value> {
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            script,
        ])
        .arg(socket)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Sends each request of `requests` (JSON lines) as nobody and returns the answers.
fn calls_as_nobody(socket: &std::path::Path, requests: &[Value]) -> Vec<Value> {
    let lines: Vec<String> = requests.iter().map(Value::to_string).collect();
    let script = format!(
        "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\nf=s.makefile('rb')\nfor line in {lines:?}:\n    s.sendall(line.encode()+b'\\n')\n    sys.stdout.write(f.readline().decode())\n"
    );
    python_as_nobody(socket, &script)
}

/// The audit records of a log.
fn audit_records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// How many refusals of `reason` to uid 65534 the log accounts for: one per
/// record, or the count a record of repeats carries.
fn refusals_of_nobody(records: &[Value], reason: &str) -> u64 {
    records
        .iter()
        .filter(|r| r["reason"] == reason && r["caller"]["uid"] == 65534)
        .map(|r| r["repeats"]["count"].as_u64().unwrap_or(1))
        .sum()
}

#[test]
fn a_stranger_flooding_refusals_grows_the_audit_log_by_a_bounded_amount_and_nothing_is_lost() {
    let d = Daemon::start("flood", "");
    // 30 frames naming a 1 MB connector, 300 naming connectors nobody
    // loaded, 30 for a loaded connector nobody let this peer use.
    let script = format!(
        "import socket,sys,json\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\nf=s.makefile('rb')\ndef call(i,params):\n    s.sendall(json.dumps({{'jsonrpc':'2.0','id':i,'method':'spawn_op','params':params}}).encode()+b'\\n')\n    a=json.loads(f.readline())\n    print(json.dumps({{'id':i,'code':a.get('error',{{}}).get('code'),'audit_id':a.get('error',{{}}).get('data',{{}}).get('audit_id')}}))\nbig='local://a/'+'x'*1000000\nfor i in range(30):\n    call(i,{{'connector':big,'op':'sh'}})\nfor i in range(300):\n    call(100+i,{{'connector':'local://nobody/c%d'%i,'op':'sh'}})\nfor i in range(30):\n    call(1000+i,{{'connector':{CONNECTOR:?},'op':'true'}})\ns.close()\n"
    );
    let answers = python_as_nobody(&d.socket, &script);
    assert_eq!(answers.len(), 360);
    // The connection is closed: the counts of the repeats reach the log.
    let started = Instant::now();
    let complete = |r: &[Value]| {
        refusals_of_nobody(r, "params_invalid") == 30
            && refusals_of_nobody(r, "connector_unknown") == 300
            && refusals_of_nobody(r, "caller_not_allowed") == 30
    };
    while !complete(&audit_records(&d.audit)) && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let size = std::fs::metadata(&d.audit).unwrap().len();
    assert!(
        size < 32 << 10,
        "360 refusals grew the audit log by {size} bytes"
    );
    let records = audit_records(&d.audit);
    assert!(complete(&records), "{records:#?}");
    let codes = |from: u64, to: u64| {
        answers
            .iter()
            .filter(|a| (from..to).contains(&a["id"].as_u64().unwrap()))
            .map(|a| a["code"].as_i64().unwrap_or(0))
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(
        codes(0, 30),
        [-32602].into(),
        "an invalid FQN is invalid params"
    );
    assert_eq!(
        codes(100, 400),
        [-32002].into(),
        "an unknown connector is not found"
    );
    assert_eq!(codes(1000, 1030), [-32001].into(), "a stranger is denied");
    let text = std::fs::read_to_string(&d.audit).unwrap();
    assert!(
        !text.contains("xxxxxxxxxxxxxxxx"),
        "the invalid name was copied"
    );
    let invalid = records
        .iter()
        .find(|r| r["reason"] == "params_invalid" && r["repeats"].is_null())
        .unwrap();
    assert_eq!(invalid["invalid"]["field"], "connector", "{invalid}");
    assert_eq!(invalid["invalid"]["bytes"], 1_000_010, "{invalid}");
    // Every refusal the peer got names a record that exists.
    let ids: std::collections::BTreeSet<&str> = records
        .iter()
        .filter_map(|r| r["audit_id"].as_str())
        .collect();
    for a in &answers {
        if let Some(id) = a["audit_id"].as_str() {
            assert!(ids.contains(id), "{a} names no record");
        }
    }
    let verify = Command::new(&world().spawnd)
        .args(["audit", "verify"])
        .arg(&d.audit)
        .output()
        .unwrap();
    assert!(verify.status.success(), "{verify:?}");
}

#[test]
fn a_connector_name_with_newlines_and_escape_codes_forges_no_audit_line() {
    let d = Daemon::start("forge", "");
    let mut c = d.client();
    let forged = "local://a/b\n2026-01-01T00:00:00.000Z #99 local://test/escape allowed sh \u{1b}[31mforged\u{1b}[0m\r";
    let first = c.call(
        "spawn_op",
        json!({"connector": forged, "op": "sh", "args": {"script": "true"}}),
    );
    let second = c.call(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh\n#98 \u{1b}[2J", "args": {}}),
    );
    drop(c);
    // Both refusals are accounted for (the second may be counted in a
    // record of repeats, written once the connection is closed).
    let accounted = |records: &[Value]| -> u64 {
        records
            .iter()
            .filter(|r| r["kind"] == "denial")
            .map(|r| r["repeats"]["count"].as_u64().unwrap_or(1))
            .sum()
    };
    let started = Instant::now();
    while accounted(&audit_records(&d.audit)) < 2 && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let records = audit_records(&d.audit).len();
    assert!(records >= 1);
    let log = d.audit.to_str().unwrap();
    for args in [
        vec!["audit", "tail", "-n", "100", log],
        vec!["audit", "query", log],
    ] {
        let out = Command::new(&world().spawnd).args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            !text.bytes().any(|b| b.is_ascii_control() && b != b'\n'),
            "{args:?} printed a control byte: {text:?}"
        );
        assert_eq!(text.lines().count(), records, "{args:?}: {text}");
    }
    // Neither name is valid: refused as invalid params, never copied.
    assert_eq!(first["error"]["code"], -32602, "{first}");
    assert_eq!(second["error"]["code"], -32602, "{second}");
    let text = std::fs::read_to_string(&d.audit).unwrap();
    assert!(!text.contains("#99") && !text.contains("#98"), "{text}");
}

#[test]
fn health_and_connectors_status_follow_access() {
    let w = world();
    let dir = w.path("daemon-side-access");
    std::fs::create_dir_all(&dir).unwrap();
    let other = dir.join("other.toml");
    std::fs::write(
        &other,
        "[connector]\nname = \"local://status/other\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/true\" }]\n[capabilities.spawn.operations.t]\nargv = \"true\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    // A stranger: no rule names uid or gid 65534.
    let d = Daemon::start_with_manifests("side-stranger", "", &[other.as_path()]);
    let answers = calls_as_nobody(
        &d.socket,
        &[
            json!({"jsonrpc": "2.0", "id": 1, "method": "health"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "connectors_status"}),
        ],
    );
    for a in &answers {
        assert_eq!(a["error"]["code"], -32001, "{a}");
        assert_eq!(a["error"]["data"]["reason"], "caller_not_allowed", "{a}");
        assert!(a.get("result").is_none(), "{a}");
    }
    let started = Instant::now();
    while refusals_of_nobody(&audit_records(&d.audit), "caller_not_allowed") < 2
        && started.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        refusals_of_nobody(&audit_records(&d.audit), "caller_not_allowed"),
        2,
        "{:#?}",
        audit_records(&d.audit)
    );
    // Allowed for one connector: health answers, and the status lists that one only.
    let allowed = Daemon::start_with_manifests(
        "side-allowed",
        "[[access]]\nconnector = \"local://status/other\"\nuids = [65534]\n",
        &[other.as_path()],
    );
    let answers = calls_as_nobody(
        &allowed.socket,
        &[
            json!({"jsonrpc": "2.0", "id": 1, "method": "health"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "connectors_status"}),
        ],
    );
    assert_eq!(
        answers[0]["result"]["protocol_version"], 1,
        "{}",
        answers[0]
    );
    let listed: Vec<&String> = answers[1]["result"]["connectors"]
        .as_object()
        .unwrap_or_else(|| panic!("{}", answers[1]))
        .keys()
        .collect();
    assert_eq!(listed, ["local://status/other"], "{}", answers[1]);
    // Root still sees every connector.
    let all = allowed.client().ok("connectors_status", json!({}));
    assert_eq!(all["connectors"].as_object().unwrap().len(), 2, "{all}");
}

#[test]
fn counted_refusals_reach_the_log_when_their_window_closes_and_when_the_daemon_stops() {
    let mut d = Daemon::start("refusal-windows", "refusal_window_ms = 1000\n");
    let three = "import socket,sys,json,time\ndef conn(n,pause):\n    s=socket.socket(socket.AF_UNIX)\n    s.connect(sys.argv[1])\n    f=s.makefile('rb')\n    for i in range(n):\n        s.sendall(json.dumps({'jsonrpc':'2.0','id':i,'method':'spawn_op','params':{'connector':'local://nobody/x','op':'sh'}}).encode()+b'\\n')\n        print(f.readline().decode().strip())\n    time.sleep(pause)\n    s.close()\nconn(3,0)\nconn(3,0)\nconn(3,2.5)\n";
    // Three connections in one window: the first one's end writes its
    // repeats, the second's does not (reconnecting forces no record), and
    // the window's end writes the rest while the third is still open.
    let answers = python_as_nobody(&d.socket, three);
    assert_eq!(answers.len(), 9);
    let records = audit_records(&d.audit);
    assert_eq!(
        refusals_of_nobody(&records, "connector_unknown"),
        9,
        "{records:#?}"
    );
    assert!(records.len() <= 5, "{records:#?}");
    // Repeats still counted when the daemon stops are written before it exits.
    let again = "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\nf=s.makefile('rb')\nfor i in range(5):\n    s.sendall(b'{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"health\"}\\n')\n    print(f.readline().decode().strip())\n";
    let answers = python_as_nobody(&d.socket, again);
    assert!(answers
        .iter()
        .all(|a| a["error"]["data"]["reason"] == "caller_not_allowed"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(d.child.wait().unwrap().success());
    let records = audit_records(&d.audit);
    assert_eq!(
        refusals_of_nobody(&records, "caller_not_allowed"),
        5,
        "{records:#?}"
    );
    assert_eq!(refusals_of_nobody(&records, "connector_unknown"), 9);
    let verify = Command::new(&world().spawnd)
        .args(["audit", "verify"])
        .arg(&d.audit)
        .output()
        .unwrap();
    assert!(verify.status.success(), "{verify:?}");
}

/// The daemon's workspace is the operator's (`[sandbox] workspace`): a
/// manifest anchored at `{workspace}` writes into it; a caller has no way
/// to name another.
#[test]
fn the_operators_workspace_anchors_a_daemon_spawns_scopes() {
    let w = world();
    let dir = w.path("daemon-workspace-files");
    let checkout = dir.join("checkout");
    std::fs::create_dir_all(checkout.join("build")).unwrap();
    // The program runs as nobody (a root caller's).
    for d in [&checkout, &checkout.join("build")] {
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    }
    let manifest = dir.join("ws.toml");
    std::fs::write(
        &manifest,
        "[connector]\nname = \"local://test/ws\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/bash\" }]\nfs_write = [\"{workspace}/build\"]\ncwd = \"{workspace}/build\"\n[capabilities.spawn.operations.build]\nargv = [\"bash\", \"-c\", \"echo built > out.txt; pwd\"]\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &manifest,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let extra = format!("\n[sandbox]\nworkspace = \"{}\"\n", checkout.display());
    let d = Daemon::start_with_manifests("workspace", &extra, &[&manifest]);
    let mut c = d.client();
    let h = c.ok(
        "spawn_op",
        json!({"connector": "local://test/ws", "op": "build"}),
    )["handle"]
        .clone();
    let done = c.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}));
    assert_eq!(done["exit_code"], 0, "{done}");
    assert_eq!(
        std::fs::read_to_string(checkout.join("build/out.txt")).unwrap(),
        "built\n"
    );
    // The caller's cwd spelled with the anchor is a path like any other,
    // refused, never expanded.
    let refused = c.call(
        "spawn_op",
        json!({"connector": "local://test/ws", "op": "build", "cwd": "{workspace}/build"}),
    );
    assert!(refused.get("error").is_some(), "{refused}");
}

#[test]
fn a_mode_denial_over_the_socket_names_the_mode_param() {
    let w = world();
    let dir = w.path("daemon-mode-files");
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = dir.join("modes.toml");
    std::fs::write(
        &manifest,
        "[connector]\nname = \"local://test/modes\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/bash\" }]\n[capabilities.spawn.operations.change]\nargv = [\"bash\", \"-c\", \"true\"]\nmode = \"write\"\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &manifest,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let d = Daemon::start_with_manifests("modes", "", &[&manifest]);
    let mut c = d.client();
    let denied = c.call(
        "spawn_op",
        json!({"connector": "local://test/modes", "op": "change"}),
    );
    assert_eq!(
        denied["error"]["data"]["reason"], "mode_insufficient",
        "{denied}"
    );
    let message = denied["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("set the request's `mode` param to \"write\""),
        "{message}"
    );
    assert!(!message.contains("; pass --mode"), "{message}");
    // The param it names is the one that works.
    let h = c.ok(
        "spawn_op",
        json!({"connector": "local://test/modes", "op": "change", "mode": "write"}),
    )["handle"]
        .clone();
    let done = c.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}));
    assert_eq!(done["exit_code"], 0, "{done}");
}

/// Through the daemon too, the live log is not cut by the result's cap:
/// `run --socket` shows the program's output past the cap (the daemon keeps
/// a window of it for live readers) while the result keeps the capped bytes.
#[test]
fn the_live_log_through_the_socket_is_not_cut_by_the_results_cap() {
    let d = Daemon::start("live-past-cap", "");
    let w = world();
    let script = "head -c 409600 /dev/zero | tr '\\0' x >&2; echo; echo SUMMARY >&2";
    let manifest = w.manifest.display().to_string();
    let out = run_cli(
        Some(&d.socket),
        &[
            "--manifest",
            &manifest,
            "--op",
            "sh",
            "--arg",
            &format!("script={script}"),
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stderr.len() > 409600, "{}", out.stderr.len());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("xSUMMARY\n"), "the summary was cut");
    assert!(
        stderr.ends_with(
            "spawnd: stderr truncated: kept 262144 of 409608 bytes (cap from the manifest)\n"
        ),
        "{}",
        &stderr[stderr.len() - 200..]
    );
}

/// `run --socket` interrupted by SIGINT or SIGTERM ends its program through
/// the daemon and exits as in-process `run` does, 130 or 143, with spawnd's
/// own exit line, instead of dying by the signal itself.
#[test]
fn run_through_the_socket_exits_130_or_143_when_interrupted() {
    let d = Daemon::start("interrupted", "");
    let w = world();
    for (sig, code) in [
        (nix::sys::signal::Signal::SIGINT, 130),
        (nix::sys::signal::Signal::SIGTERM, 143),
    ] {
        let mut child = Command::new(&w.spawnd)
            .args(["run", "--socket"])
            .arg(&d.socket)
            .args(["--manifest"])
            .arg(&w.manifest)
            .args(["--op", "sh", "--arg", "script=echo started; sleep 60"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir(&w.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert_eq!(line, "started\n");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
        let status = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(code), "{sig:?}: {status:?} {err}");
        assert!(
            err.trim_end()
                .ends_with(&format!("spawnd: exit {code} (interrupted)")),
            "{err}"
        );
    }
}

/// A caller's label (a CI job id) is recorded with the spawn: in its
/// decision record (its exit record shares the audit id), through the daemon (`label` param) and
/// through `run --socket --label`; a label with a control character is
/// refused before anything runs.
#[test]
fn a_callers_label_is_recorded_with_the_spawn() {
    let d = Daemon::start("label", "");
    let w = world();
    let mut c = d.client();
    let h = c.ok(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "true"}, "label": "ci-job-41"}),
    )["handle"]
        .as_str()
        .unwrap()
        .to_string();
    c.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}));
    let bad = c.call(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "true"}, "label": "a\nb"}),
    );
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let out = Command::new(&w.spawnd)
        .args(["run", "--socket"])
        .arg(&d.socket)
        .args(["--manifest"])
        .arg(&w.manifest)
        .args(["--op", "sh", "--arg", "script=true", "--label", "ci-job-42"])
        .current_dir(&w.dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let records: Vec<Value> = std::fs::read_to_string(&d.audit)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    for label in ["ci-job-41", "ci-job-42"] {
        let decision = records
            .iter()
            .find(|r| r["kind"] == "decision" && r["caller"]["label"] == label)
            .unwrap_or_else(|| panic!("no decision record labelled {label}"));
        // The spawn's other records share its audit id.
        assert!(
            records
                .iter()
                .any(|r| r["kind"] == "exit" && r["audit_id"] == decision["audit_id"]),
            "{label}: no exit record for {decision}"
        );
    }
}

/// `interrupted_by` says who ended a program from outside: `spawn_kill`,
/// `spawn_release`, or a closed connection (`disconnect`), in the result
/// and in the exit record, where a plain SIGKILL said nothing of who.
#[test]
fn interrupted_by_names_who_ended_the_program() {
    let d = Daemon::start("ended-by", "");
    let start = |c: &mut Client| {
        c.ok(
            "spawn_op",
            json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "sleep 60"}}),
        )["handle"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut c = d.client();
    let killed = start(&mut c);
    c.ok("spawn_kill", json!({"handle": killed}));
    let status = c.ok("spawn_status", json!({"handle": killed, "wait_ms": 10000}));
    assert_eq!(status["interrupted_by"], "spawn_kill", "{status}");
    let released = start(&mut c);
    c.ok("spawn_release", json!({"handle": released}));
    let mut gone = d.client();
    start(&mut gone);
    drop(gone);
    // The exit records of all three, once written.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut seen = Vec::new();
    while std::time::Instant::now() < deadline {
        seen = std::fs::read_to_string(&d.audit)
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["kind"] == "exit")
            .filter_map(|r| r["interrupted_by"].as_str().map(str::to_string))
            .collect::<Vec<_>>();
        if seen.len() >= 3 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    seen.sort();
    assert_eq!(
        seen,
        ["disconnect", "spawn_kill", "spawn_release"],
        "{seen:?}"
    );
}

/// `spawn_check` runs the gate alone: an allowed `spawn_op` or raw `spawn`
/// answers the decision and the exact argv, nothing runs and nothing is
/// recorded; a denial is the error `spawn_op` gives (without an `audit_id`).
#[test]
fn spawn_check_decides_without_running_or_recording() {
    let w = world();
    let d = Daemon::start("spawn-check", "");
    let mut c = d.client();
    let marker = w.path("spawn-check-ran");
    let script = format!("touch {}", marker.display());
    let audit_before = std::fs::read_to_string(&d.audit).unwrap_or_default();
    let allowed = c.ok(
        "spawn_check",
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": script}, "timeout_ms": 1234}),
    );
    assert_eq!(allowed["decision"], "allowed", "{allowed}");
    assert_eq!(allowed["argv"], json!(["bash", "-c", script]), "{allowed}");
    assert_eq!(allowed["op"], "sh", "{allowed}");
    assert_eq!(allowed["limits"]["wall_time_ms"], 1234, "{allowed}");
    let envelope = json!({"program": "/usr/bin/bash", "argv": ["bash", "-c", script], "env": {}});
    let raw = c.ok(
        "spawn_check",
        json!({"connector": CONNECTOR, "envelope": envelope}),
    );
    assert_eq!(
        (&raw["decision"], &raw["argv"]),
        (&json!("allowed"), &json!(["bash", "-c", script])),
        "{raw}"
    );
    let bad = json!({"connector": CONNECTOR, "op": "sh", "args": {"nope": "x"}});
    let checked = c.call("spawn_check", bad.clone());
    std::thread::sleep(Duration::from_millis(300));
    assert!(!marker.exists(), "spawn_check ran the program");
    assert_eq!(
        std::fs::read_to_string(&d.audit).unwrap_or_default(),
        audit_before,
        "spawn_check wrote to the audit log"
    );
    let spawned = c.call("spawn_op", bad);
    let (checked, spawned) = (&checked["error"], &spawned["error"]);
    assert_eq!(
        (
            &checked["code"],
            &checked["message"],
            &checked["data"]["reason"]
        ),
        (
            &spawned["code"],
            &spawned["message"],
            &spawned["data"]["reason"]
        ),
        "{checked} vs {spawned}"
    );
    assert!(checked["data"].get("audit_id").is_none(), "{checked}");
    let neither = c.call("spawn_check", json!({"connector": CONNECTOR}));
    assert_eq!(neither["error"]["code"], -32602, "{neither}");
}

/// `spawnd check --socket` asks the daemon's gate (`spawn_check`): the same
/// text and argv as in-process `check`, a denial's exit code and reason,
/// and nothing run.
#[test]
fn check_through_the_socket_matches_check_in_process() {
    let w = world();
    let d = Daemon::start("check-socket", "");
    let marker = w.path("check-socket-ran");
    let script = format!("touch {}", marker.display());
    let check = |via_socket: bool, extra: &[&str]| {
        let mut cmd = Command::new(&w.spawnd);
        cmd.arg("check");
        if via_socket {
            cmd.arg("--socket")
                .arg(&d.socket)
                .args(["--connector", CONNECTOR]);
        } else {
            cmd.arg("--config")
                .arg(w.config(harness::As::Root))
                .arg("--manifest")
                .arg(&w.manifest);
        }
        cmd.args(extra)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir(&w.dir)
            .output()
            .unwrap()
    };
    let arg = format!("script={script}");
    let remote = check(true, &["--op", "sh", "--arg", &arg]);
    let local = check(false, &["--op", "sh", "--arg", &arg]);
    assert_eq!(remote.status.code(), Some(0), "{remote:?}");
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(text(&remote), text(&local));
    assert!(text(&remote).starts_with("allowed: "), "{remote:?}");
    let json_out = check(true, &["--json", "--op", "sh", "--arg", &arg]);
    let v: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(
        (&v["data"]["decision"], &v["data"]["argv"]),
        (&json!("allowed"), &json!(["bash", "-c", script])),
        "{v}"
    );
    let denied = check(true, &["--json", "--op", "sh", "--arg", "nope=x"]);
    let local_denied = check(false, &["--json", "--op", "sh", "--arg", "nope=x"]);
    assert_eq!(
        denied.status.code(),
        local_denied.status.code(),
        "{denied:?}"
    );
    assert_eq!(denied.status.code(), Some(3), "{denied:?}");
    let reason = |o: &std::process::Output| {
        serde_json::from_slice::<Value>(&o.stdout).unwrap()["error"]["details"]["reason"].clone()
    };
    assert!(reason(&denied).is_string(), "{denied:?}");
    assert_eq!(reason(&denied), reason(&local_denied), "{denied:?}");
    assert!(!marker.exists(), "check --socket ran the program");
}

/// `spawnd connectors --socket` shows what the daemon loaded: after the
/// manifest file changes on disk (and no SIGHUP), it still shows the loaded
/// one, in text and `--json`, while in-process `connectors` reads the file.
#[test]
fn connectors_through_the_socket_shows_the_loaded_manifest_not_the_file() {
    let w = world();
    let dir = w.path("daemon-connectors-socket-files");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("drift.toml");
    let text = |version: &str, op: &str| {
        format!("[connector]\nname = \"local://drift/a\"\nversion = \"{version}\"\n[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/true\" }}]\n[capabilities.spawn.operations.{op}]\nargv = \"true\"\ndescription = \"the {op} one\"\n")
    };
    std::fs::write(&path, text("1.0.0", "loaded")).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let d = Daemon::start_with_manifests("connectors-socket", "", &[&path]);
    let config = d.socket.parent().unwrap().join("config.toml");
    std::fs::write(&path, text("2.0.0", "edited")).unwrap();
    let connectors = |via_socket: bool, json: bool| {
        let mut cmd = Command::new(&w.spawnd);
        cmd.arg("connectors");
        if via_socket {
            cmd.arg("--socket").arg(&d.socket);
        } else {
            cmd.arg("--config").arg(&config);
        }
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let entry = |out: &str| {
        let v: Value = serde_json::from_str(out).unwrap();
        assert_eq!(
            (&v["ok"], &v["command"]),
            (&json!(true), &json!("connectors")),
            "{v}"
        );
        let a = &v["data"]["connectors"]["local://drift/a"];
        (
            a["version"].as_str().unwrap_or("missing").to_string(),
            a["operations"][0]["name"]
                .as_str()
                .unwrap_or("missing")
                .to_string(),
        )
    };
    let loaded = ("1.0.0".to_string(), "loaded".to_string());
    let on_disk = ("2.0.0".to_string(), "edited".to_string());
    assert_eq!(entry(&connectors(true, true)), loaded);
    assert_eq!(entry(&connectors(false, true)), on_disk);
    // The text is the block, as in-process `connectors` prints its own.
    let remote = connectors(true, false);
    let local = connectors(false, false);
    for block in [&remote, &local] {
        assert!(
            block.starts_with("<connector_status captured_at=\"")
                && block.trim_end().ends_with("</connector_status>"),
            "{block}"
        );
    }
    assert!(
        remote.contains("\"the loaded one\"") && !remote.contains("edited"),
        "{remote}"
    );
    assert!(
        local.contains("\"the edited one\"") && !local.contains("\"the loaded one\""),
        "{local}"
    );
    // A daemon that cannot be reached is exit 5, naming the socket.
    let gone = Command::new(&w.spawnd)
        .args(["connectors", "--socket"])
        .arg(dir.join("no-such.sock"))
        .output()
        .unwrap();
    assert_eq!(gone.status.code(), Some(5), "{gone:?}");
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("no-such.sock"),
        "{gone:?}"
    );
}

/// A manifest anchored at `{workspace}` where no workspace is named: the
/// refusal (`workspace_unset`, exit 4) tells each front end its own fix.
/// A daemon's caller cannot name a workspace, so over the socket (raw
/// `spawn_op` and `spawnd run --socket`) it says the operator must set
/// `[sandbox] workspace`; in-process `run` says `--workspace` or the config.
#[test]
fn a_workspace_unset_refusal_names_the_fix_each_front_end_can_make() {
    let w = world();
    let dir = w.path("daemon-workspace-unset-files");
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = dir.join("ws-unset.toml");
    std::fs::write(
        &manifest,
        "[connector]\nname = \"local://test/ws-unset\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/true\" }]\nfs_read = [\"{workspace}/src\"]\n[capabilities.spawn.operations.t]\nargv = \"true\"\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &manifest,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let d = Daemon::start_with_manifests("workspace-unset", "", &[&manifest]);
    let operator_fix = "its operator must set [sandbox] workspace in the daemon's config";
    let refused = d.client().call(
        "spawn_op",
        json!({"connector": "local://test/ws-unset", "op": "t"}),
    );
    let error = &refused["error"];
    assert_eq!(error["data"]["reason"], "workspace_unset", "{refused}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(operator_fix), "{message}");
    assert!(!message.contains("--workspace"), "{message}");
    let remote = run_cli(
        Some(&d.socket),
        &[
            "--json",
            "--connector",
            "local://test/ws-unset",
            "--op",
            "t",
        ],
        b"",
    );
    assert_eq!(remote.status.code(), Some(4), "{remote:?}");
    let v: Value = serde_json::from_slice(&remote.stdout).unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(operator_fix), "{v}");
    assert!(!message.contains("--workspace"), "{v}");
    let local = run_cli(
        None,
        &[
            "--json",
            "--manifest",
            manifest.to_str().unwrap(),
            "--op",
            "t",
        ],
        b"",
    );
    assert_eq!(local.status.code(), Some(4), "{local:?}");
    let v: Value = serde_json::from_slice(&local.stdout).unwrap();
    assert_eq!(v["error"]["details"]["reason"], "workspace_unset", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "pass `spawnd run --workspace DIR`, or set [sandbox] workspace in the config"
        ),
        "{v}"
    );
}

/// SHA-256 of a file, as records write it.
fn sha256_of(path: &std::path::Path) -> String {
    use sha2::Digest;
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
    )
}

/// A daemon's records say a request came through the daemon and from which
/// process: its executable and that file's hash, cgroup, start time — for
/// a spawn and for a refusal alike.
#[test]
fn records_name_where_a_daemon_request_came_from() {
    let d = Daemon::start("origin", "");
    let mut c = d.client();
    let done = c.run_sh("true");
    assert_eq!(done["exit_code"], 0, "{done}");
    let me = std::fs::read_link("/proc/self/exe").unwrap();
    let records = audit_records(&d.audit);
    let decision = records.iter().find(|r| r["kind"] == "decision").unwrap();
    let caller = &decision["caller"];
    assert_eq!(caller["via"], "daemon", "{caller}");
    assert_eq!(caller["pid"], std::process::id(), "{caller}");
    assert_eq!(caller["exe"], me.to_str().unwrap(), "{caller}");
    assert_eq!(caller["exe_sha256"], sha256_of(&me), "{caller}");
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let cgroup = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
        .unwrap_or_else(|| cgroup.lines().collect::<Vec<_>>().join(";"));
    assert_eq!(caller["cgroup"], cgroup, "{caller}");
    assert!(caller["start_time"].as_str().is_some(), "{caller}");
    assert!(
        decision["machine"]["boot_id"].as_str().is_some(),
        "{decision}"
    );
    // A refused stranger: python, as uid 65534.
    let out = spawn_op_as_nobody_from_python(&d);
    assert!(out.status.success(), "{out:?}");
    let python = std::fs::canonicalize("/usr/bin/python3").unwrap();
    let denial = audit_records(&d.audit)
        .into_iter()
        .find(|r| r["kind"] == "denial" && r["caller"]["uid"] == 65534)
        .unwrap();
    let caller = &denial["caller"];
    assert_eq!(caller["via"], "daemon", "{caller}");
    assert_eq!(caller["exe"], python.to_str().unwrap(), "{caller}");
    assert_eq!(caller["exe_sha256"], sha256_of(&python), "{caller}");
}

/// Waits up to 30 s for a record `found` accepts in the log; returns it.
fn await_record(audit: &std::path::Path, found: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        if let Some(r) = audit_records(audit).into_iter().find(|r| found(r)) {
            return r;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no such record in {}",
            std::fs::read_to_string(audit).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn is_lifecycle(r: &Value, event: &str) -> bool {
    r["kind"] == "lifecycle" && r["event"] == event
}

/// A daemon whose start is on record records its stop however soon SIGTERM
/// follows: its signal handlers are in place before it writes the start
/// record, so no SIGTERM can end it with the default action.
#[test]
fn a_sigterm_as_soon_as_the_start_is_recorded_ends_in_a_stop_record() {
    let w = world();
    let dir = w.path("daemon-early-sigterm-files");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for attempt in 0..5 {
        let audit = dir.join(format!("audit-{attempt}.jsonl"));
        let mut d = Daemon::launch_auditing("early-sigterm", &audit);
        let started = Instant::now();
        // No sleep: the signal goes within microseconds of the start record.
        while !std::fs::read(&audit).is_ok_and(|b| b.ends_with(b"\n")) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no start record"
            );
        }
        d.signal(nix::sys::signal::Signal::SIGTERM);
        let status = d.child.wait().unwrap();
        let records = audit_records(&audit);
        assert!(is_lifecycle(&records[0], "start"), "{records:?}");
        let last = records.last().unwrap();
        assert!(
            is_lifecycle(last, "stop"),
            "attempt {attempt}: {status:?}, {records:?}"
        );
        assert_eq!(last["signal"], "SIGTERM", "{last}");
        assert_eq!(status.code(), Some(0), "attempt {attempt}");
    }
}

/// The daemon's life is on record: its start (what it serves, by path and
/// hash), heartbeats, a reload that changed a manifest (both hashes), and a
/// clean stop; after a `kill -9`, the next daemon's start lists the spawn
/// the killed one left without an exit record and says it recorded no stop.
#[test]
fn the_daemons_start_reload_heartbeats_stop_and_spawns_left_without_an_exit_are_recorded() {
    let w = world();
    let dir = w.path("daemon-lifecycle-files");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let audit = dir.join("audit.jsonl");
    let extra = dir.join("extra.toml");
    let manifest = |version: &str| {
        format!("[connector]\nname = \"local://test/lifecycle\"\nversion = \"{version}\"\n[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/true\" }}]\n[capabilities.spawn.operations.t]\nargv = [\"true\"]\n")
    };
    std::fs::write(&extra, manifest("1.0.0")).unwrap();
    std::fs::set_permissions(&extra, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let first_hash = sha256_of(&extra);
    let mut d = Daemon::start_auditing("lifecycle", &audit, "heartbeat_secs = 1", &[&extra]);
    let start = audit_records(&audit).remove(0);
    assert!(is_lifecycle(&start, "start"), "{start}");
    assert_eq!(start["pid"], d.child.id(), "{start}");
    assert_eq!(start["unfinished"], json!([]), "{start}");
    let served = start["manifests"].as_array().unwrap();
    let ours = served
        .iter()
        .find(|m| m["connector"] == "local://test/lifecycle")
        .unwrap();
    assert_eq!(ours["path"], extra.display().to_string(), "{start}");
    assert_eq!(ours["sha256"], first_hash, "{start}");
    let beat = await_record(&audit, |r| r["kind"] == "heartbeat");
    assert_eq!(beat["pid"], d.child.id(), "{beat}");
    assert_eq!(beat["interval_s"], 1, "{beat}");
    // A reload that changed the manifest names both hashes.
    std::fs::write(&extra, manifest("1.0.1")).unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    let reload = await_record(&audit, |r| is_lifecycle(r, "reload"));
    assert_eq!(reload["outcome"], "taken", "{reload}");
    assert_eq!(
        reload["changed"][0]["connector"], "local://test/lifecycle",
        "{reload}"
    );
    assert_eq!(
        reload["changed"][0]["previous_sha256"], first_hash,
        "{reload}"
    );
    assert_eq!(
        reload["changed"][0]["sha256"],
        sha256_of(&extra),
        "{reload}"
    );
    // A spawn running when the daemon is killed has a decision and no exit.
    let token = format!("left-by-kill9-{}", std::process::id());
    let mut holder = d.client();
    let handle = holder.ok(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": format!("sleep 60; : {token}")}}),
    );
    assert!(handle.get("handle").is_some(), "{handle}");
    harness::wait_for_host_process(&token);
    let decided = audit_records(&audit)
        .into_iter()
        .rfind(|r| r["kind"] == "decision")
        .unwrap();
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    drop(holder);
    let killed_pid = d.child.id();
    let mut d = Daemon::start_auditing("lifecycle", &audit, "heartbeat_secs = 1", &[&extra]);
    let again = await_record(&audit, |r| {
        is_lifecycle(r, "start") && r["pid"] == d.child.id()
    });
    assert_eq!(
        again["unfinished"][0]["audit_id"], decided["audit_id"],
        "{again}"
    );
    assert_eq!(again["previous_start"]["pid"], killed_pid, "{again}");
    assert_eq!(again["previous_start"]["stopped"], false, "{again}");
    // A clean stop is the last record.
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.child.wait().unwrap();
    let last = audit_records(&audit).pop().unwrap();
    assert!(is_lifecycle(&last, "stop"), "{last}");
    assert_eq!(last["signal"], "SIGTERM", "{last}");
    let verified = Command::new(&w.spawnd)
        .args(["audit", "verify"])
        .arg(&audit)
        .output()
        .unwrap();
    assert_eq!(verified.status.code(), Some(0), "{verified:?}");
    let lines = Command::new(&w.spawnd)
        .args(["audit", "query", "--kind", "lifecycle"])
        .arg(&audit)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&lines.stdout);
    assert!(text.contains("daemon start pid"), "{text}");
    assert!(
        text.contains("1 spawn(s) of an earlier daemon left without an exit"),
        "{text}"
    );
    assert!(text.contains("0 added, 0 removed, 1 changed"), "{text}");
    assert!(text.contains("(SIGTERM)"), "{text}");
}

/// An edit of the live log under a running daemon is written into the log
/// by the daemon itself (a `note`) at its next heartbeat.
#[test]
fn an_edit_of_the_live_log_under_the_daemon_is_noted_at_its_next_heartbeat() {
    let w = world();
    let dir = w.path("daemon-watch-files");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let audit = dir.join("audit.jsonl");
    let d = Daemon::start_auditing("watch", &audit, "heartbeat_secs = 1", &[]);
    let done = d.client().run_sh("true");
    assert_eq!(done["exit_code"], 0, "{done}");
    // The watch guards what it saw at its last check. Each heartbeat's
    // check runs just before it is written, so the check before the second
    // heartbeat after the exit record ran after that record was written,
    // and saw it.
    let exit_seq = audit_records(&audit)
        .iter()
        .find(|r| r["kind"] == "exit")
        .and_then(|r| r["seq"].as_u64())
        .unwrap();
    let after_exit = |r: &Value| r["kind"] == "heartbeat" && r["seq"].as_u64() > Some(exit_seq);
    let first = await_record(&audit, after_exit)["seq"].as_u64().unwrap();
    await_record(&audit, |r| {
        r["kind"] == "heartbeat" && r["seq"].as_u64() > Some(first)
    });
    let text = std::fs::read_to_string(&audit).unwrap();
    let edited = text.replacen("\"exit_code\":0", "\"exit_code\":7", 1);
    assert_ne!(edited, text);
    std::fs::write(&audit, edited).unwrap();
    let note = await_record(&audit, |r| {
        r["kind"] == "note" && r.get("log_changed").is_some()
    });
    assert_eq!(note["log_changed"], "rewritten", "{note}");
    assert!(
        note["note"]
            .as_str()
            .unwrap()
            .contains("changed under the running daemon"),
        "{note}"
    );
}

/// The `[server]` keys (with their defaults) the daemon runs under with
/// the config `scripts/install-systemd` writes, as `config show` prints them.
fn installed_server_config() -> Value {
    let script = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-systemd"),
    )
    .unwrap();
    let start = script
        .find("<<'TOML'\n")
        .expect("install-systemd writes a config")
        + "<<'TOML'\n".len();
    let end = start + script[start..].find("\nTOML\n").unwrap();
    let dir = world().path("installed-config");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(&config, &script[start..end]).unwrap();
    let out = Command::new(&world().spawnd)
        .args(["config", "show", "--json", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    shown["data"]["server"].clone()
}

/// The one value of `key` in a unit file's text.
fn unit_value<'a>(unit: &'a str, key: &str) -> Option<&'a str> {
    unit.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(str::trim)
}

/// The shipped socket unit listens where the daemon would, with the mode
/// and group the installed config gives a socket `serve` makes itself; its
/// directory lets that group reach the socket (systemd makes it root's);
/// and the service does not manage that directory, whose removal at a stop
/// would take the socket with it.
#[test]
fn the_shipped_units_agree_with_the_daemons_socket_config() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/systemd");
    let socket = std::fs::read_to_string(dir.join("spawnd.socket")).unwrap();
    let service = std::fs::read_to_string(dir.join("spawnd.service")).unwrap();
    let server = installed_server_config();
    assert_eq!(
        unit_value(&socket, "ListenStream"),
        server["socket"].as_str(),
        "{server}"
    );
    assert_eq!(
        unit_value(&socket, "SocketMode"),
        server["socket_mode"].as_str(),
        "{server}"
    );
    assert_eq!(
        unit_value(&socket, "SocketGroup"),
        server["socket_group"].as_str(),
        "{server}"
    );
    let directory_mode = unit_value(&socket, "DirectoryMode").expect("DirectoryMode");
    let directory_mode = u32::from_str_radix(directory_mode, 8).unwrap();
    assert_ne!(
        directory_mode & 0o001,
        0,
        "systemd makes the socket's directory root:root {directory_mode:o}: group members could not reach the socket"
    );
    assert_eq!(unit_value(&service, "RuntimeDirectory"), None);
}

/// A socket directory `serve` creates is 0750 with `[server] socket_group`
/// as its group (whatever the umask), so that group's members, whom the
/// socket's mode (0660, the same group) lets connect, can reach it: uid
/// 65534, whose group is the one named, connects and is answered.
#[test]
fn the_socket_directory_the_daemon_creates_belongs_to_socket_group() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let w = world();
    let dir = w.path("daemon-socket-group");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.join("run").join("spawnd.sock");
    let audit = dir.join("audit.jsonl");
    let config = dir.join("config.toml");
    let group = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(65534))
        .unwrap()
        .expect("a group with gid 65534")
        .name;
    std::fs::write(
        &config,
        format!(
            "[audit]\npath = {:?}\n[server]\nsocket = {:?}\nsocket_group = {group:?}\nmanifests = [{:?}]\n[[access]]\nconnector = {CONNECTOR:?}\nuids = [65534]\n",
            audit.display().to_string(),
            socket.display().to_string(),
            w.manifest.display().to_string(),
        ),
    )
    .unwrap();
    let child = Command::new("sh")
        .args(["-c", "umask 077; exec \"$0\" serve --config \"$1\""])
        .arg(&w.spawnd)
        .arg(&config)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let d = Daemon {
        child,
        socket: socket.clone(),
        audit,
    };
    let started = Instant::now();
    while std::os::unix::net::UnixStream::connect(&d.socket).is_err() {
        assert!(started.elapsed() < Duration::from_secs(10), "no daemon");
        std::thread::sleep(Duration::from_millis(20));
    }
    let made = std::fs::metadata(socket.parent().unwrap()).unwrap();
    assert_eq!(
        (made.mode() & 0o7777, made.gid()),
        (0o750, 65534),
        "{:o}",
        made.mode()
    );
    let sock = std::fs::metadata(&socket).unwrap();
    assert_eq!((sock.mode() & 0o777, sock.gid()), (0o660, 65534));
    let mut member = Client::connect_as(&d.socket, 65534);
    let pong = member.ok("ping", json!({}));
    assert!(pong["version"].is_string(), "{pong}");
}

/// The `spawn_op` request of docs/daemon.md's opening example, sent as it
/// is to a daemon serving the shipped policies/git.toml, for alice (a user
/// the daemon's password database has, through a copy of /etc/passwd
/// mounted over it in the daemon's own mount namespace), whose home holds
/// the repository the example names: it runs, exit 0, as the example says.
#[test]
fn the_daemon_docs_spawn_op_example_runs_against_the_shipped_git_policy() {
    use std::os::unix::fs::PermissionsExt;
    const ALICE: u32 = 42424;
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/daemon.md"),
    )
    .unwrap();
    let request: Value = doc
        .lines()
        .filter_map(|l| l.strip_prefix("→ "))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["method"] == "spawn_op")
        .expect("a spawn_op example in docs/daemon.md");
    let cwd = request["params"]["cwd"]
        .as_str()
        .expect("the example's cwd");
    let in_home = cwd
        .strip_prefix("/home/alice/")
        .expect("the example works in alice's home");

    let w = world();
    let base = w.path("doc-example");
    let _ = std::fs::remove_dir_all(&base);
    let home = base.join("alice");
    let repo = home.join(in_home);
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let init = Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .arg(&repo)
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    let chown = Command::new("chown")
        .args(["-R", &format!("{ALICE}:{ALICE}")])
        .arg(&home)
        .status()
        .unwrap();
    assert!(chown.success());
    let passwd = base.join("passwd");
    let mut users = std::fs::read_to_string("/etc/passwd").unwrap();
    users.push_str(&format!(
        "alice:x:{ALICE}:{ALICE}::{}:/bin/sh\n",
        home.display()
    ));
    std::fs::write(&passwd, users).unwrap();
    std::fs::set_permissions(&passwd, std::fs::Permissions::from_mode(0o644)).unwrap();

    let policy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/git.toml");
    let extra = format!("[[access]]\nconnector = \"local://spawnd/git\"\nuids = [{ALICE}]\n");
    let wrap: Vec<String> = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount --bind \"$0\" /etc/passwd && exec \"$@\"",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([passwd.display().to_string()])
    .collect();
    let d = Daemon::start_under("doc-example", &extra, &[policy.as_path()], &wrap);
    let mut alice = Client::connect_as(&d.socket, ALICE);
    let params = request["params"]
        .to_string()
        .replace(cwd, &repo.display().to_string());
    let started = alice.call("spawn_op", serde_json::from_str(&params).unwrap());
    assert!(started.get("error").is_none(), "{started}");
    let h = started["result"]["handle"].clone();
    let status = alice.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}));
    assert_eq!(status["state"], "exited", "{status}");
    assert_eq!(status["exit_code"], 0, "{status}");
    assert!(
        status["stdout"]["text"]
            .as_str()
            .unwrap()
            .starts_with("## "),
        "{status}"
    );
}
