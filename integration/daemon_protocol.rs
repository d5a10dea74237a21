//! One connection, many requests (docs/daemon.md): answers as they
//! complete, `spawn_wait`, notifications, detached spawns with leases,
//! streamed stdin, an oversized frame's error the peer can read, requests
//! that never wait behind waits, cancellation, and each uid's fair share.

use crate::{daemon_harness, harness};

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use base64::Engine;
use daemon_harness::{Client, Daemon, CONNECTOR};
use serde_json::{json, Value};

/// Sends a request with `id` without waiting for its answer.
fn send(c: &mut Client, id: u64, method: &str, params: Value) {
    let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    c.send_raw(format!("{req}\n").as_bytes());
}

/// The answer to `id`: one read earlier and kept in `seen`, or the next
/// lines until it comes, keeping the others there.
fn answer_to(c: &mut Client, id: u64, seen: &mut Vec<Value>) -> Value {
    if let Some(at) = seen.iter().position(|a| a["id"] == id) {
        return seen.remove(at);
    }
    loop {
        let line = c.answer().expect("the daemon closed the connection");
        if line["id"] == id {
            return line;
        }
        seen.push(line);
    }
}

fn spawn_sh(c: &mut Client, script: &str, extra: Value) -> Value {
    let mut params = json!({"connector": CONNECTOR, "op": "sh", "args": {"script": script}});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    c.ok("spawn_op", params)
}

fn handle_of(v: &Value) -> String {
    v["handle"].as_str().expect("a handle").to_string()
}

/// The exit records' `interrupted_by` values, once `n` exit records exist.
fn exit_records(audit: &std::path::Path, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let exits: Vec<Value> = std::fs::read_to_string(audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["kind"] == "exit")
            .collect();
        if exits.len() >= n || Instant::now() > deadline {
            return exits;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A status that waits on a long spawn does not hold up another request's
/// answer on the same connection: the answer to the later request comes
/// first.
#[test]
fn a_waiting_request_does_not_hold_up_the_next_answer() {
    let d = Daemon::start("concurrent", "");
    let mut c = d.client();
    let long = handle_of(&spawn_sh(&mut c, "sleep 3", json!({})));
    let short = handle_of(&spawn_sh(&mut c, "echo quick", json!({})));
    send(
        &mut c,
        100,
        "spawn_status",
        json!({"handle": long, "wait_ms": 20000}),
    );
    send(
        &mut c,
        101,
        "spawn_status",
        json!({"handle": short, "wait_ms": 20000}),
    );
    let first = c.answer().unwrap();
    assert_eq!(first["id"], 101, "{first}");
    assert_eq!(first["result"]["stdout"]["text"], "quick\n", "{first}");
    let second = c.answer().unwrap();
    assert_eq!(second["id"], 100, "{second}");
    assert_eq!(second["result"]["state"], "exited", "{second}");
}

/// `spawn_wait` answers with the first of its handles to end, and with
/// none when its wait passes first.
#[test]
fn spawn_wait_returns_the_first_to_end() {
    let d = Daemon::start("wait-any", "");
    let mut c = d.client();
    let slow = handle_of(&spawn_sh(&mut c, "sleep 30", json!({})));
    let fast = handle_of(&spawn_sh(&mut c, "sleep 0.3", json!({})));
    let none = c.ok("spawn_wait", json!({"handles": [slow, fast], "wait_ms": 1}));
    assert_eq!(none["handle"], Value::Null, "{none}");
    let w = c.ok(
        "spawn_wait",
        json!({"handles": [slow, fast], "wait_ms": 20000}),
    );
    assert_eq!(w["handle"], fast.as_str(), "{w}");
    assert_eq!(w["state"], "exited", "{w}");
    assert_eq!(w["ended"], json!([fast]), "{w}");
    let unknown = c.call("spawn_wait", json!({"handles": [slow, "h-nope"]}));
    assert_eq!(unknown["error"]["code"], -32002, "{unknown}");
    let empty = c.call("spawn_wait", json!({"handles": []}));
    assert_eq!(empty["error"]["code"], -32602, "{empty}");
    c.ok("spawn_kill", json!({"handle": slow}));
}

/// With `notify`, the output arrives as `spawn_output` notifications after
/// the spawn's answer, whole and in order, then one `spawn_exited`.
#[test]
fn notifications_carry_the_output_then_the_exit() {
    let d = Daemon::start("notify", "");
    let mut c = d.client();
    send(
        &mut c,
        1,
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh", "notify": true,
               "args": {"script": "for i in $(seq 1 3000); do echo line $i; done; echo bye >&2; exit 4"}}),
    );
    let answer = c.answer().unwrap();
    assert_eq!(
        answer["id"], 1,
        "the answer comes before any notification: {answer}"
    );
    let handle = handle_of(&answer["result"]);
    let mut streams = [Vec::new(), Vec::new()];
    let status = loop {
        let n = c.answer().expect("a notification");
        assert_eq!(n["params"]["handle"], handle.as_str(), "{n}");
        assert!(n.get("id").is_none(), "{n}");
        match n["method"].as_str() {
            Some("spawn_output") => {
                let w = n["params"]["which"].as_u64().unwrap() as usize;
                assert_eq!(n["params"]["offset"], streams[w].len(), "{n}");
                assert_eq!(n["params"]["skipped"], 0, "{n}");
                let data = base64::engine::general_purpose::STANDARD
                    .decode(n["params"]["data_b64"].as_str().unwrap())
                    .unwrap();
                streams[w].extend(data);
            }
            Some("spawn_exited") => break n["params"]["status"].clone(),
            _ => panic!("unexpected line {n}"),
        }
    };
    let expected: String = (1..=3000).map(|i| format!("line {i}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&streams[0]), expected);
    assert_eq!(streams[1], b"bye\n");
    assert_eq!(status["exit_code"], 4, "{status}");
    assert_eq!(status["state"], "exited", "{status}");
    assert!(status["stdout"].get("text").is_none(), "{status}");
    assert_eq!(status["stdout"]["bytes"], expected.len(), "{status}");
}

/// 2 MB through a streamed stdin, in frames within the frame limit, up to
/// four writes waiting at once; then the program reads end of file.
#[test]
fn a_streamed_stdin_carries_two_megabytes() {
    let d = Daemon::start("stdin-stream", "");
    let mut c = d.client();
    let h = handle_of(&spawn_sh(
        &mut c,
        "sha256sum | cut -d' ' -f1; wc -c < /dev/null",
        json!({"stdin_stream": true}),
    ));
    let chunk: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
    let mut all = Vec::new();
    let mut seen = Vec::new();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&chunk);
    for round in 0..2u64 {
        for i in 0..4u64 {
            send(
                &mut c,
                1000 + round * 10 + i,
                "spawn_stdin_write",
                json!({"handle": h, "data_b64": b64}),
            );
            all.extend_from_slice(&chunk);
        }
        for i in 0..4u64 {
            let a = answer_to(&mut c, 1000 + round * 10 + i, &mut seen);
            assert_eq!(a["result"]["bytes"], chunk.len(), "{a}");
        }
    }
    c.ok("spawn_stdin_close", json!({"handle": h}));
    let done = c.ok("spawn_status", json!({"handle": h, "wait_ms": 20000}));
    let digest = sha256_hex(&all);
    assert_eq!(done["stdout"]["text"], format!("{digest}\n0\n"), "{done}");
    let after = c.call("spawn_stdin_write", json!({"handle": h, "data": "late"}));
    assert_eq!(after["error"]["code"], -32002, "{after}");
    let plain = handle_of(&spawn_sh(&mut c, "true", json!({})));
    let not_streamed = c.call("spawn_stdin_write", json!({"handle": plain, "data": "x"}));
    assert_eq!(not_streamed["error"]["code"], -32602, "{not_streamed}");
    assert!(seen.is_empty(), "{seen:?}");
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// A 2 MB frame: the peer finishes writing it, reads an error that says
/// why and what to use instead, and the connection goes on serving.
#[test]
fn an_oversized_frame_gets_an_error_the_peer_can_read() {
    let d = Daemon::start("oversized", "");
    let mut c = d.client();
    let big = "A".repeat(2 << 20);
    let req = json!({"jsonrpc": "2.0", "id": 7, "method": "spawn_op",
                     "params": {"connector": CONNECTOR, "op": "sh", "args": {"script": "cat"}, "stdin_b64": big}});
    // The whole frame is written before anything is read: the daemon
    // must keep reading it rather than close the connection under the peer.
    c.writer
        .write_all(format!("{req}\n").as_bytes())
        .expect("the daemon reads the whole oversized frame");
    let e = c.answer().expect("an error, readable");
    assert_eq!(e["id"], Value::Null, "{e}");
    assert_eq!(e["error"]["code"], -32600, "{e}");
    assert_eq!(e["error"]["data"]["max_frame_bytes"], 1 << 20, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stdin_stream"),
        "{e}"
    );
    assert_eq!(c.ok("health", json!({}))["protocol_version"], 1);
}

/// A detached spawn outlives its connection; the same peer takes it up
/// with its token; a wrong token or an unknown name gets the same -32002;
/// a lease that runs out kills the program (`interrupted_by: "lease"`).
#[test]
fn a_detached_spawn_is_taken_up_again_and_its_lease_ends_it() {
    let d = Daemon::start("lease", "max_lease_ms = 60000\n");
    let mut first = d.client();
    let over = first.call(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "true"}, "lease_ms": 60001}),
    );
    assert_eq!(over["error"]["code"], -32602, "{over}");
    let kept = spawn_sh(
        &mut first,
        "echo before; read line; echo got $line",
        json!({"lease_ms": 60000, "stdin_stream": true}),
    );
    let (kept_name, token) = (
        handle_of(&kept),
        kept["token"].as_str().unwrap().to_string(),
    );
    let short = spawn_sh(&mut first, "sleep 60", json!({"lease_ms": 1000}));
    let short_name = handle_of(&short);
    drop(first);

    let mut second = d.client();
    let wrong = second.call(
        "spawn_attach",
        json!({"handle": kept_name, "token": "t-00"}),
    );
    let unknown = second.call("spawn_attach", json!({"handle": "h-00", "token": token}));
    assert_eq!(wrong["error"]["code"], -32002, "{wrong}");
    assert_eq!(unknown["error"], {
        let mut e = wrong["error"].clone();
        e["data"]["handle"] = json!("h-00");
        e
    });
    let attached = second.attach_once_parked(&json!(kept_name), &json!(token));
    assert_eq!(attached["state"], "running", "{attached}");
    // Held by this connection, it cannot be taken up elsewhere.
    let mut third = d.client();
    let elsewhere = third.call("spawn_attach", json!({"handle": kept_name, "token": token}));
    assert_eq!(elsewhere["error"]["code"], -32002, "{elsewhere}");
    second.ok(
        "spawn_stdin_write",
        json!({"handle": kept_name, "data": "hello\n"}),
    );
    let done = second.ok(
        "spawn_status",
        json!({"handle": kept_name, "wait_ms": 20000}),
    );
    assert_eq!(done["stdout"]["text"], "before\ngot hello\n", "{done}");

    // The short lease runs out with no connection holding it.
    std::thread::sleep(Duration::from_millis(3000));
    let late = second.call(
        "spawn_attach",
        json!({"handle": short_name, "token": short["token"]}),
    );
    assert_eq!(late["error"]["code"], -32002, "{late}");
    let exits = exit_records(&d.audit, 2);
    assert!(
        exits.iter().any(|r| r["interrupted_by"] == "lease"),
        "{exits:?}"
    );
}

/// Without a lease, closing the connection still kills the program.
#[test]
fn without_a_lease_closing_the_connection_kills() {
    let d = Daemon::start("no-lease", "");
    let mut c = d.client();
    spawn_sh(&mut c, "sleep 60", json!({}));
    drop(c);
    let exits = exit_records(&d.audit, 1);
    assert_eq!(exits.len(), 1, "{exits:?}");
    assert_eq!(exits[0]["interrupted_by"], "disconnect", "{exits:?}");
}

/// A peer that shuts down its writing side after a request still reads
/// the answer, even one that waits.
#[test]
fn a_half_closed_peer_still_gets_its_answers() {
    let d = Daemon::start("half-close", "");
    let mut c = d.client();
    let h = handle_of(&spawn_sh(&mut c, "sleep 0.5; echo late", json!({})));
    send(
        &mut c,
        9,
        "spawn_status",
        json!({"handle": h, "wait_ms": 20000}),
    );
    c.writer.shutdown(std::net::Shutdown::Write).unwrap();
    let mut line = String::new();
    c.reader.read_line(&mut line).unwrap();
    let a: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(a["result"]["stdout"]["text"], "late\n", "{a}");
}

/// The daemon's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// 64 requests for the status of a handle holding 1 MiB of output, sent
/// by a peer that reads nothing: the daemon renders an answer only when
/// it can queue it, so it holds a few, not 64.
#[test]
fn answers_waiting_for_a_peer_that_does_not_read_are_not_all_rendered() {
    let d = Daemon::start("unread", "");
    let mut c = d.client();
    let h = handle_of(&spawn_sh(&mut c, "head -c 1048576 /dev/urandom", json!({})));
    let done = c.ok("spawn_status", json!({"handle": h, "wait_ms": 20000}));
    assert_eq!(done["stdout"]["bytes"], 1 << 20, "{}", done["stdout"]);
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(d.child.id());
    for id in 0..64u64 {
        let method = if id % 2 == 0 {
            "spawn_status"
        } else {
            "spawn_output_read"
        };
        send(
            &mut c,
            10_000 + id,
            method,
            json!({"handle": h, "wait_ms": 1, "which": 0, "offset": 0, "len": 1 << 20}),
        );
    }
    std::thread::sleep(Duration::from_millis(2000));
    let grown = rss_kib(d.child.id()).saturating_sub(before);
    assert!(
        grown < 24 << 10,
        "the daemon grew by {grown} KiB for 64 unread answers of about 1.4 MiB each"
    );
}

/// A peer hangs up while the daemon reads no more of its connection (every
/// request slot taken by waits, or its input budget by stdin writes the
/// programs do not read): the daemon notices without a line to read, and
/// ends its programs.
#[test]
fn a_peer_that_hangs_up_while_the_daemon_waits_for_room_has_its_programs_ended() {
    let d = Daemon::start("hang-up", "");
    // Every slot: 64 waits on a program that runs on.
    let mut waits = d.client();
    let h = handle_of(&spawn_sh(&mut waits, "sleep 300", json!({})));
    for id in 0..64u64 {
        send(
            &mut waits,
            100 + id,
            "spawn_status",
            json!({"handle": h, "wait_ms": 60000}),
        );
    }
    // The input budget: writes of 160 KiB, each filling a program's pipes.
    let mut writes = d.client();
    let handles: Vec<String> = (0..16)
        .map(|_| {
            handle_of(&spawn_sh(
                &mut writes,
                "sleep 300",
                json!({"stdin_stream": true}),
            ))
        })
        .collect();
    let socket = writes.writer.try_clone().unwrap();
    let filling = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; 160 << 10]);
    let writer = std::thread::spawn(move || {
        for (id, h) in handles.iter().enumerate() {
            // The daemon stops reading once its budget is taken: this
            // blocks until the hang-up below.
            let req = json!({"jsonrpc": "2.0", "id": id, "method": "spawn_stdin_write", "params": {"handle": h, "data_b64": filling}});
            if writes
                .writer
                .write_all(format!("{req}\n").as_bytes())
                .is_err()
            {
                break;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(1500));
    drop(waits);
    socket.shutdown(std::net::Shutdown::Both).unwrap();
    writer.join().unwrap();
    drop(socket);
    let exits = exit_records(&d.audit, 17);
    assert_eq!(exits.len(), 17, "{} exit records", exits.len());
    let by: Vec<&Value> = exits.iter().map(|r| &r["interrupted_by"]).collect();
    assert!(by.iter().all(|b| *b == "disconnect"), "{by:?}");
}

/// Bytes of stdin waiting for their program count in the daemon's buffered
/// budget: past it, a write is refused (-32003), not held.
#[test]
fn waiting_stdin_counts_in_the_buffered_budget() {
    // One `sh` spawn reserves 1 MiB + 256 KiB of caps and a 512 KiB window.
    let d = Daemon::start("stdin-budget", "max_buffered_output_bytes = 2135008\n");
    let mut c = d.client();
    let h = handle_of(&spawn_sh(
        &mut c,
        "sleep 300",
        json!({"stdin_stream": true}),
    ));
    let chunk = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; 256 << 10]);
    send(
        &mut c,
        1,
        "spawn_stdin_write",
        json!({"handle": h, "data_b64": chunk}),
    );
    send(
        &mut c,
        2,
        "spawn_stdin_write",
        json!({"handle": h, "data_b64": chunk}),
    );
    let mut seen = Vec::new();
    let refused = answer_to(&mut c, 2, &mut seen);
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_buffered_output_bytes"),
        "{refused}"
    );
    c.ok("spawn_kill", json!({"handle": h}));
}

/// A detached spawn cannot be taken up from another user namespace of the
/// same uid (a container, a sandboxed program reaching the socket): the
/// access rules refuse such a peer every method, `spawn_attach` included.
#[test]
fn a_detached_spawn_cannot_be_taken_up_from_another_user_namespace() {
    let d = Daemon::start("lease-userns", "");
    let mut c = d.client();
    let kept = spawn_sh(&mut c, "sleep 60", json!({"lease_ms": 60000}));
    let (name, token) = (
        handle_of(&kept),
        kept["token"].as_str().unwrap().to_string(),
    );
    drop(c);
    let attach = format!(
        r#"import json, socket
s = socket.socket(socket.AF_UNIX); s.connect({socket:?})
s.sendall(json.dumps({{"jsonrpc": "2.0", "id": 1, "method": "spawn_attach", "params": {{"handle": {name:?}, "token": {token:?}}}}}).encode() + b"\n")
print(s.makefile().readline(), end="")"#,
        socket = d.socket.display().to_string(),
    );
    let out = std::process::Command::new("unshare")
        .args([
            "--user",
            "--map-current-user",
            "/usr/bin/python3",
            "-c",
            &attach,
        ])
        .output()
        .unwrap();
    let answer: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(answer["error"]["code"], -32002, "{answer}");
    // The same peer, from the daemon's namespace, still may.
    let mut again = d.client();
    let ok = again.ok("spawn_attach", json!({"handle": name, "token": token}));
    assert_eq!(ok["state"], "running", "{ok}");
    again.ok("spawn_kill", json!({"handle": name}));
}

/// A detached spawn whose connection closes before its answer could be
/// read has a token no one holds: it is ended (`disconnect`), not parked.
#[test]
fn a_detached_spawn_nobody_heard_of_is_ended() {
    let d = Daemon::start("lease-unheard", "");
    let mut c = d.client();
    send(
        &mut c,
        1,
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "sleep 60"}, "lease_ms": 60000}),
    );
    drop(c);
    let exits = exit_records(&d.audit, 1);
    assert_eq!(exits.len(), 1, "{exits:?}");
    assert_eq!(exits[0]["interrupted_by"], "disconnect", "{exits:?}");
}

/// Requests whose id or method repeat a megabyte, sent by a peer that
/// reads nothing: the daemon refuses them at once and keeps none of it
/// (the same amount of lines kept whole would grow it by hundreds of MiB).
#[test]
fn long_ids_and_method_names_are_refused_not_kept() {
    let d = Daemon::start("long-members", "");
    let mut c = d.client();
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(d.child.id());
    let del = "\u{7f}".repeat(1_000_000);
    for id in 0..32u64 {
        let method = json!({"jsonrpc": "2.0", "id": id, "method": del});
        c.send_raw(format!("{method}\n").as_bytes());
        let long_id = json!({"jsonrpc": "2.0", "id": del, "method": "spawn_output_size", "params": {"handle": "h-00"}});
        c.send_raw(format!("{long_id}\n").as_bytes());
    }
    std::thread::sleep(Duration::from_millis(2000));
    let grown = rss_kib(d.child.id()).saturating_sub(before);
    assert!(grown < 24 << 10, "the daemon grew by {grown} KiB");
    let first = c.answer().unwrap();
    assert_eq!(
        first["error"]["code"],
        -32601,
        "{}",
        first.to_string().len()
    );
    assert!(first.to_string().len() < 1024, "{first}");
}

/// A refused stdin write breaks the stream: the writes after it and the
/// close are refused too, so the program never reads bytes with a hole
/// before them.
#[test]
fn a_refused_stdin_write_breaks_the_stream() {
    let d = Daemon::start("stdin-broken", "");
    let mut c = d.client();
    let h = handle_of(&spawn_sh(
        &mut c,
        "sleep 2; wc -c",
        json!({"stdin_stream": true}),
    ));
    // The pipes fill, four writes wait, and the next one is refused.
    let chunk = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; 100 << 10]);
    for id in 1..=8u64 {
        send(
            &mut c,
            id,
            "spawn_stdin_write",
            json!({"handle": h, "data_b64": chunk}),
        );
    }
    let mut seen = Vec::new();
    let answers: Vec<Value> = (1..=8u64)
        .map(|id| answer_to(&mut c, id, &mut seen))
        .collect();
    let first_refused = answers
        .iter()
        .position(|a| a.get("error").is_some())
        .unwrap_or_else(|| panic!("no write was refused: {answers:?}"));
    for a in &answers[first_refused..] {
        assert_eq!(a["error"]["code"], -32003, "{a}");
        assert_eq!(a["error"]["data"]["stdin"], "broken", "{a}");
    }
    let close = c.call("spawn_stdin_close", json!({"handle": h}));
    assert_eq!(close["error"]["data"]["stdin"], "broken", "{close}");
    c.ok("spawn_kill", json!({"handle": h}));
}

/// One uid holds at most `max_connections_per_uid` connections: past that
/// it is told -32003 and closed, and another user still gets in.
#[test]
fn one_uid_cannot_hold_every_connection() {
    let d = Daemon::start("per-uid", "max_connections_per_uid = 2\n");
    // nobody opens three connections and keeps them; each asks `health`
    // (refused by the access rules: an answer from a served connection).
    // The third is refused as it is accepted: its error line may already
    // be waiting, and the connection closed, when the request is sent.
    let ask = format!(
        r#"import json, socket
held = []
for _ in range(3):
    s = socket.socket(socket.AF_UNIX); s.connect({socket:?}); held.append(s)
    try:
        s.sendall(b'{{"jsonrpc": "2.0", "id": 1, "method": "health"}}\n')
    except BrokenPipeError:
        pass
    print(s.makefile().readline(), end="")"#,
        socket = d.socket.display().to_string(),
    );
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["/usr/bin/python3", "-c", &ask])
        .output()
        .unwrap();
    let answers: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), 3, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(answers[0]["error"]["code"], -32001, "{}", answers[0]);
    assert_eq!(answers[1]["error"]["code"], -32001, "{}", answers[1]);
    assert_eq!(answers[2]["error"]["code"], -32003, "{}", answers[2]);
    assert!(
        answers[2]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("uid 65534 has 2 connections open"),
        "{}",
        answers[2]
    );
    // Another uid is not held up.
    assert_eq!(d.client().ok("health", json!({}))["protocol_version"], 1);
}

/// With every wait slot of a connection held by waits that do not end, a
/// kill and `health` on the same connection are still read and answered
/// (before any of the waits), one more wait is refused at once with the
/// bound in its `data`, and `$/cancelRequest` ends a wait (-32800) and
/// frees its slot.
#[test]
fn waits_never_hold_up_a_kill_or_health() {
    let d = Daemon::start("no-stall", "");
    let mut c = d.client();
    let waited = handle_of(&spawn_sh(&mut c, "sleep 300", json!({})));
    let killed = handle_of(&spawn_sh(&mut c, "sleep 300", json!({})));
    for id in 0..64u64 {
        send(
            &mut c,
            100 + id,
            "spawn_status",
            json!({"handle": waited, "wait_ms": 60000}),
        );
    }
    send(&mut c, 1, "health", json!({}));
    send(&mut c, 2, "spawn_kill", json!({"handle": killed}));
    send(
        &mut c,
        3,
        "spawn_wait",
        json!({"handles": [waited], "wait_ms": 60000}),
    );
    let mut seen = Vec::new();
    let health = answer_to(&mut c, 1, &mut seen);
    assert_eq!(health["result"]["protocol_version"], 1, "{health}");
    let kill = answer_to(&mut c, 2, &mut seen);
    assert!(kill.get("error").is_none(), "{kill}");
    let refused = answer_to(&mut c, 3, &mut seen);
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    assert_eq!(
        refused["error"]["data"],
        json!({"limit": "waits_in_progress_per_connection", "max": 64, "caller_uses": 64}),
        "{refused}"
    );
    assert!(
        seen.iter()
            .all(|a| a["id"].as_u64().is_some_and(|id| id < 100)),
        "a wait was answered though its program runs on: {seen:?}"
    );
    // A cancelled wait is answered at once, and its slot is free again.
    c.send_raw(
        format!(
            "{}\n",
            json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 100}})
        )
        .as_bytes(),
    );
    let cancelled = answer_to(&mut c, 100, &mut seen);
    assert_eq!(cancelled["error"]["code"], -32800, "{cancelled}");
    send(
        &mut c,
        4,
        "spawn_status",
        json!({"handle": killed, "wait_ms": 60000}),
    );
    let ended = answer_to(&mut c, 4, &mut seen);
    assert!(!ended["result"]["interrupted_by"].is_null(), "{ended}");
}

/// Many tenants, one daemon: while one uid (root) takes every running
/// spawn it may, with detached spawns that outlive its connection, a
/// second uid that is present keeps its share: its spawns and `health`
/// are answered. The first is refused past what leaves the second's share
/// free, and its -32003 names the limit and its use.
#[test]
fn a_present_tenant_keeps_its_share_of_running_spawns() {
    let extra = format!("[[access]]\nconnector = {CONNECTOR:?}\nuids = [65534]\n");
    let d = Daemon::start("shares", &extra);
    let mut second = Client::connect_as(&d.socket, 65534);
    assert_eq!(second.ok("health", json!({}))["protocol_version"], 1);
    let mut first = d.client();
    let mut started = 0;
    let refused = loop {
        let a = first.call(
            "spawn_op",
            json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "sleep 300"}, "lease_ms": 60000}),
        );
        if a.get("error").is_some() || started == 64 {
            break a;
        }
        started += 1;
    };
    assert_eq!(
        started, 48,
        "the first uid ran {started} at once: {refused}"
    );
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    let data = &refused["error"]["data"];
    assert_eq!(data["limit"], "server.running_spawns_share", "{refused}");
    assert_eq!(
        (data["max"].as_u64(), data["caller_uses"].as_u64()),
        (Some(16), Some(48)),
        "{refused}"
    );
    // The detached spawns run on without their connection.
    drop(first);
    for _ in 0..16 {
        let a = second.call(
            "spawn_op",
            json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "sleep 300"}}),
        );
        assert!(a.get("error").is_none(), "the second uid: {a}");
    }
    assert_eq!(second.ok("health", json!({}))["protocol_version"], 1);
}

/// Starts a spawn with `params` from a process of its own (Python,
/// standard library only) that exits once it has the answer, closing its
/// connection: the first process of a detached spawn, or a client that
/// went away. Returns that process's pid and the answer's result.
fn spawn_from_a_process_that_exits(d: &Daemon, params: Value) -> (u32, Value) {
    let script = "import socket,sys,json\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\ns.sendall((json.dumps({'jsonrpc':'2.0','id':1,'method':'spawn_op','params':json.loads(sys.argv[2])})+'\\n').encode())\nprint(s.makefile('rb').readline().decode().strip())\n";
    let child = std::process::Command::new("/usr/bin/python3")
        .args(["-c", script])
        .arg(&d.socket)
        .arg(params.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(answer.get("error").is_none(), "{answer}");
    (pid, answer["result"].clone())
}

/// The records of the audit log at `path`.
fn records_of(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `spawnd audit …` on the log at `path`: its standard output.
fn audit_cli(path: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new(&harness::world().spawnd)
        .arg("audit")
        .args(args)
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Who did what to a detached spawn is on record, not the process that
/// started it: a spawn started by a process that then exits, taken up by
/// another (this test) and killed there, has an `attach` record naming the
/// process that took it up, and an exit record naming that one as
/// `interrupted_by_peer` and carrying the spawn's label; `audit query
/// --label` finds the spawn's records, its lines say who took the spawn up
/// and who ended it, and the OCSF export carries the label and
/// `interrupted_by`.
#[test]
fn a_reattached_spawn_killed_there_names_who_took_it_up_and_who_killed_it() {
    let d = Daemon::start("actors", "max_lease_ms = 60000\n");
    let (first_pid, started) = spawn_from_a_process_that_exits(
        &d,
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "sleep 60"}, "label": "ci-job-7", "lease_ms": 60000}),
    );
    let me = std::process::id();
    assert_ne!(first_pid, me);
    let name = handle_of(&started);
    let mut c = d.client();
    let attached = c.ok(
        "spawn_attach",
        json!({"handle": name, "token": started["token"]}),
    );
    assert_eq!(attached["state"], "running", "{attached}");
    c.ok("spawn_kill", json!({"handle": name}));
    let status = c.ok("spawn_status", json!({"handle": name, "wait_ms": 10000}));
    assert_eq!(status["interrupted_by"], "spawn_kill", "{status}");
    let audit_id = status["audit_id"].as_str().unwrap().to_string();

    let records = records_of(&d.audit);
    let of_spawn: Vec<&Value> = records
        .iter()
        .filter(|r| r["audit_id"] == audit_id.as_str())
        .collect();
    let kinds: Vec<&str> = of_spawn.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert_eq!(kinds, ["decision", "attach", "exit"], "{of_spawn:?}");
    let (decision, attach, exit) = (of_spawn[0], of_spawn[1], of_spawn[2]);
    assert_eq!(decision["caller"]["pid"], first_pid, "{decision}");
    assert_eq!(
        (
            &attach["caller"]["uid"],
            &attach["caller"]["gid"],
            &attach["caller"]["pid"],
            &attach["caller"]["via"]
        ),
        (&json!(0), &json!(0), &json!(me), &json!("daemon")),
        "{attach}"
    );
    assert_eq!(
        (
            &attach["connector"],
            &attach["op"],
            &attach["label"],
            &attach["state"]
        ),
        (
            &json!(CONNECTOR),
            &json!("sh"),
            &json!("ci-job-7"),
            &json!("running")
        ),
        "{attach}"
    );
    // The exit names the spawn's caller (the first process, with its
    // label) and, apart, the peer that killed it.
    assert_eq!(exit["caller"]["pid"], first_pid, "{exit}");
    assert_eq!(exit["caller"]["label"], "ci-job-7", "{exit}");
    assert_eq!(exit["interrupted_by"], "spawn_kill", "{exit}");
    assert_eq!(
        exit["interrupted_by_peer"],
        json!({"uid": 0, "gid": 0, "pid": me}),
        "{exit}"
    );

    // `audit query --label` finds exactly the spawn's labelled records.
    let found: Value = serde_json::from_str(&audit_cli(
        &d.audit,
        &["query", "--label", "ci-job-7", "--json"],
    ))
    .unwrap();
    let found: Vec<(&str, &str)> = found["data"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["kind"].as_str().unwrap(), r["audit_id"].as_str().unwrap()))
        .collect();
    assert_eq!(
        found,
        [
            ("decision", audit_id.as_str()),
            ("attach", audit_id.as_str()),
            ("exit", audit_id.as_str())
        ]
    );
    assert!(audit_cli(&d.audit, &["query", "--label", "ci-job-8"])
        .trim()
        .is_empty());
    // Its one-liners show the label, who took the spawn up and who ended it.
    let lines = audit_cli(&d.audit, &["query", "--label", "ci-job-7"]);
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.contains(" label ci-job-7 ")),
        "{lines:?}"
    );
    assert!(
        lines[1].contains(&format!("attached sh by uid 0 gid 0 pid {me} (running)")),
        "{lines:?}"
    );
    assert!(
        lines[2].contains(&format!("signal 9 (spawn_kill by uid 0 gid 0 pid {me})")),
        "{lines:?}"
    );

    // The OCSF export carries both.
    let events: Vec<Value> = audit_cli(
        &d.audit,
        &["export", "--format", "ocsf", "--label", "ci-job-7"],
    )
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    let terminate = events
        .iter()
        .find(|e| e["type_uid"] == 100702)
        .unwrap_or_else(|| panic!("no Terminate event: {events:?}"));
    assert_eq!(terminate["unmapped"]["label"], "ci-job-7", "{terminate}");
    assert_eq!(
        terminate["unmapped"]["interrupted_by"], "spawn_kill",
        "{terminate}"
    );
    assert_eq!(
        terminate["unmapped"]["interrupted_by_peer"]["pid"], me,
        "{terminate}"
    );
    let open = events
        .iter()
        .find(|e| e["type_uid"] == 100703)
        .unwrap_or_else(|| panic!("no Open event for the attach: {events:?}"));
    assert_eq!(open["actor"]["process"]["pid"], me, "{open}");
    assert_eq!(
        open["metadata"]["correlation_uid"],
        audit_id.as_str(),
        "{open}"
    );
}

/// `spawn_release` of a running spawn, a connection that closes with a
/// spawn running, and a lease that runs out are on record too, each exit
/// record with the spawn's label: the peer that released it, the peer
/// whose connection closed (another process), and for the lease no peer.
#[test]
fn release_disconnect_and_lease_expiry_record_who_ended_the_program() {
    let d = Daemon::start("actors-end", "max_lease_ms = 60000\n");
    let me = std::process::id();
    let mut c = d.client();
    let released = spawn_sh(&mut c, "sleep 60", json!({"label": "released"}));
    c.ok("spawn_release", json!({"handle": handle_of(&released)}));
    let (gone_pid, _) = spawn_from_a_process_that_exits(
        &d,
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "sleep 60"}, "label": "went-away"}),
    );
    spawn_from_a_process_that_exits(
        &d,
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "sleep 60"}, "label": "leased", "lease_ms": 1000}),
    );
    let exits = exit_records(&d.audit, 3);
    let by_label = |label: &str| {
        exits
            .iter()
            .find(|r| r["caller"]["label"] == label)
            .unwrap_or_else(|| panic!("no exit record labelled {label}: {exits:?}"))
    };
    let released = by_label("released");
    assert_eq!(released["interrupted_by"], "spawn_release", "{released}");
    assert_eq!(
        released["interrupted_by_peer"],
        json!({"uid": 0, "gid": 0, "pid": me}),
        "{released}"
    );
    let gone = by_label("went-away");
    assert_eq!(gone["interrupted_by"], "disconnect", "{gone}");
    assert_eq!(gone["interrupted_by_peer"]["pid"], gone_pid, "{gone}");
    assert_eq!(gone["caller"]["pid"], gone_pid, "{gone}");
    let leased = by_label("leased");
    assert_eq!(leased["interrupted_by"], "lease", "{leased}");
    assert!(leased.get("interrupted_by_peer").is_none(), "{leased}");
    let lines = audit_cli(&d.audit, &["query", "--kind", "exit"]);
    assert!(lines.contains("(lease ran out) label leased "), "{lines}");
    assert!(
        lines.contains(&format!(
            "(disconnect by uid 0 gid 0 pid {gone_pid}) label went-away "
        )),
        "{lines}"
    );
}

/// Every method's params are typed: an unknown key and a key of the wrong
/// type are -32602 whose message names the key (by its path), and the
/// connection goes on serving. A spawn's `envelope.cwd` of the wrong type
/// is refused like `spawn_op`'s `cwd`, never read as no cwd.
#[test]
fn an_unknown_or_wrong_typed_param_is_refused_by_name_in_every_method() {
    let d = Daemon::start("typed-params", "");
    let mut c = d.client();
    let op = json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "true"}});
    let raw = json!({"connector": CONNECTOR,
                     "envelope": {"program": "/bin/sh", "argv": ["sh", "-c", "true"], "env": {}}});
    let with = |base: &Value, key: &str, value: Value| {
        let mut params = base.clone();
        params[key] = value;
        params
    };
    let mut raw_cwd = raw.clone();
    raw_cwd["envelope"]["cwd"] = json!(5);
    let mut raw_unknown = raw.clone();
    raw_unknown["envelope"]["workdir"] = json!("/");
    let handle = json!({"handle": "h-none"});
    // (method, params, the key the message names)
    let cases = [
        ("health", json!({"verbose": true}), "verbose"),
        ("connectors_status", json!({"all": 1}), "all"),
        ("spawn_op", with(&op, "cwd", json!(5)), "cwd"),
        ("spawn_op", with(&op, "cwdir", json!("/")), "cwdir"),
        (
            "spawn_op",
            with(&op, "args", json!({"script": 1})),
            "args.script",
        ),
        ("spawn_op", with(&op, "notify", json!("yes")), "notify"),
        ("spawn", raw_cwd.clone(), "envelope.cwd"),
        ("spawn", raw_unknown.clone(), "envelope.workdir"),
        ("spawn", with(&raw, "stdin", json!("x")), "stdin"),
        ("spawn", with(&raw, "timeout_ms", json!("5")), "timeout_ms"),
        ("spawn_check", with(&op, "cwd", json!(["/"])), "cwd"),
        ("spawn_check", raw_cwd, "envelope.cwd"),
        ("spawn_check", with(&op, "extra", json!(1)), "extra"),
        ("spawn_status", json!({"handle": 5}), "handle"),
        ("spawn_status", with(&handle, "wait", json!(1)), "wait"),
        (
            "spawn_wait",
            json!({"handles": ["h-none"], "wait_ms": "1"}),
            "wait_ms",
        ),
        (
            "spawn_wait",
            json!({"handles": ["h-none"], "handle": "h"}),
            "handle",
        ),
        ("spawn_stdin_write", with(&handle, "data", json!(5)), "data"),
        (
            "spawn_stdin_write",
            with(&handle, "text", json!("x")),
            "text",
        ),
        ("spawn_stdin_close", json!({"handle": true}), "handle"),
        (
            "spawn_stdin_close",
            with(&handle, "data", json!("x")),
            "data",
        ),
        (
            "spawn_attach",
            json!({"handle": "h-none", "token": 5}),
            "token",
        ),
        (
            "spawn_attach",
            json!({"handle": "h-none", "token": "t", "peer": 0}),
            "peer",
        ),
        (
            "spawn_output_size",
            with(&handle, "which", json!("stdout")),
            "which",
        ),
        (
            "spawn_output_size",
            with(&handle, "stream", json!(0)),
            "stream",
        ),
        (
            "spawn_output_read",
            json!({"handle": "h-none", "which": 0, "offset": -1}),
            "offset",
        ),
        (
            "spawn_output_read",
            json!({"handle": "h-none", "which": 0, "limit": 1}),
            "limit",
        ),
        ("spawn_kill", json!({"handle": ["h-none"]}), "handle"),
        ("spawn_kill", with(&handle, "signal", json!(9)), "signal"),
        ("spawn_release", json!({"handle": 1}), "handle"),
        (
            "spawn_release",
            with(&handle, "force", json!(true)),
            "force",
        ),
        ("$/cancelRequest", json!({"id": true}), "id"),
        ("$/cancelRequest", json!({"id": 1, "reason": "x"}), "reason"),
    ];
    for (method, params, key) in cases {
        let refused = c.call(method, params.clone());
        assert_eq!(
            refused["error"]["code"], -32602,
            "{method} {params}: {refused}"
        );
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("{key}: ")),
            "{method} {params}: {message}"
        );
    }
    assert_eq!(c.ok("health", json!({}))["protocol_version"], 1);
    // Nothing refused above ran.
    let ran = std::fs::read_to_string(&d.audit).unwrap_or_default();
    assert!(!ran.contains("\"kind\":\"exit\""), "{ran}");
}

/// Reads stream `which` of `handle` until it holds `needle` (within 10 s).
fn output_until(c: &mut Client, handle: &str, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let read = c.ok(
            "spawn_output_read",
            json!({"handle": handle, "which": 0, "offset": 0, "len": 65536, "wait_ms": 500}),
        );
        let text = daemon_harness::b64(&read);
        if text.contains(needle) || Instant::now() > deadline {
            return text;
        }
    }
}

/// `ping` answers spawnd's version (the number `spawnd --version` prints)
/// and takes no params.
#[test]
fn ping_answers_the_version() {
    let d = Daemon::start("ping", "");
    let mut c = d.client();
    let pong = c.ok("ping", json!({}));
    let printed = std::process::Command::new(&harness::world().spawnd)
        .arg("--version")
        .output()
        .unwrap();
    let printed = String::from_utf8(printed.stdout).unwrap();
    assert_eq!(
        printed.split_whitespace().last(),
        pong["version"].as_str(),
        "{printed} / {pong}"
    );
    let refused = c.call("ping", json!({"verbose": true}));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
}

/// `spawn_list` lists a connection's own handles with their state and
/// label; a detached spawn is listed with its token to another connection
/// of the same uid, which attaches with that token and kills it; another
/// uid, allowed the same connector, sees none of them.
#[test]
fn spawn_list_shows_a_callers_spawns_and_detached_tokens_to_its_uid_only() {
    let extra = format!("[[access]]\nconnector = {CONNECTOR:?}\nuids = [65534]\n");
    let d = Daemon::start("spawn-list", &extra);
    let mut first = d.client();
    let plain = handle_of(&spawn_sh(&mut first, "sleep 60", json!({"label": "plain"})));
    let ended = handle_of(&spawn_sh(&mut first, "true", json!({})));
    first.ok("spawn_status", json!({"handle": ended, "wait_ms": 10000}));
    let kept = spawn_sh(
        &mut first,
        "sleep 60",
        json!({"lease_ms": 60000, "label": "kept"}),
    );
    let (kept_name, token) = (handle_of(&kept), kept["token"].clone());
    let listed = first.ok("spawn_list", json!({}))["spawns"].clone();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["handle"].as_str().unwrap())
        .collect();
    assert_eq!(names, [&plain, &ended, &kept_name], "{listed}");
    assert_eq!(
        listed[0],
        json!({"handle": plain, "state": "running", "label": "plain", "connector": CONNECTOR,
               "op": "sh", "detached": false, "attached": true, "lease_ms_left": null, "token": null})
    );
    assert_eq!(listed[1]["state"], "exited", "{listed}");
    assert_eq!(listed[1]["label"], Value::Null, "{listed}");
    assert_eq!(
        listed[2],
        json!({"handle": kept_name, "state": "running", "label": "kept", "connector": CONNECTOR,
               "op": "sh", "detached": true, "attached": true, "lease_ms_left": null, "token": token})
    );

    // Another connection of the same uid sees the detached one only, held
    // elsewhere; once the first closes, parked with its lease running.
    let mut second = d.client();
    let seen = second.ok("spawn_list", json!({}))["spawns"].clone();
    assert_eq!(seen.as_array().unwrap().len(), 1, "{seen}");
    assert_eq!(
        (&seen[0]["handle"], &seen[0]["attached"], &seen[0]["token"]),
        (&json!(kept_name), &json!(false), &token),
        "{seen}"
    );
    assert_eq!(seen[0]["lease_ms_left"], Value::Null, "{seen}");
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    let seen = loop {
        let seen = second.ok("spawn_list", json!({}))["spawns"].clone();
        if !seen[0]["lease_ms_left"].is_null() || Instant::now() > deadline {
            break seen;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(seen.as_array().unwrap().len(), 1, "{seen}");
    let left = seen[0]["lease_ms_left"].as_u64().expect("a lease running");
    assert!(left > 0 && left <= 60000, "{seen}");

    // The other uid sees nothing of root's.
    let mut nobody = Client::connect_as(&d.socket, 65534);
    let theirs = nobody.ok("spawn_list", json!({}));
    assert_eq!(theirs, json!({"spawns": []}));

    // The token listed takes the spawn up, and the kill ends it.
    let attached = second.ok(
        "spawn_attach",
        json!({"handle": kept_name, "token": seen[0]["token"]}),
    );
    assert_eq!(attached["state"], "running", "{attached}");
    let now = second.ok("spawn_list", json!({}))["spawns"].clone();
    assert_eq!(now[0]["attached"], true, "{now}");
    assert_eq!(now[0]["lease_ms_left"], Value::Null, "{now}");
    second.ok("spawn_kill", json!({"handle": kept_name}));
    let status = second.ok(
        "spawn_status",
        json!({"handle": kept_name, "wait_ms": 10000}),
    );
    assert_eq!(status["state"], "signaled", "{status}");
    assert_eq!(status["interrupted_by"], "spawn_kill", "{status}");
}

/// `spawn_kill {signal}` sends that signal to the program through the
/// sandbox's init: a program that traps SIGUSR1 goes on, one that traps
/// SIGTERM exits as it likes (0 here), and the result says so. Any other
/// signal is -32602 naming `signal`.
#[test]
fn spawn_kill_sends_the_signal_asked_for_to_the_program() {
    let d = Daemon::start("kill-signal", "");
    let mut c = d.client();
    let h = handle_of(&spawn_sh(
        &mut c,
        "trap 'echo usr1' USR1; trap 'echo caught; exit 0' TERM; echo ready; while :; do sleep 0.1; done",
        json!({}),
    ));
    assert!(output_until(&mut c, &h, "ready").contains("ready"));
    let refused = c.call("spawn_kill", json!({"handle": h, "signal": "SIGSTOP"}));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("signal: "),
        "{refused}"
    );
    assert_eq!(
        c.ok("spawn_kill", json!({"handle": h, "signal": "SIGUSR1"})),
        json!({})
    );
    assert!(output_until(&mut c, &h, "usr1").contains("usr1"));
    let running = c.ok("spawn_status", json!({"handle": h}));
    assert_eq!(running["state"], "running", "{running}");
    c.ok("spawn_kill", json!({"handle": h, "signal": "SIGTERM"}));
    let status = c.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}));
    assert_eq!(status["state"], "exited", "{status}");
    assert_eq!(status["exit_code"], 0, "{status}");
    assert_eq!(status["signal"], Value::Null, "{status}");
    assert_eq!(
        status["stdout"]["text"], "ready\nusr1\ncaught\n",
        "{status}"
    );
    assert_eq!(status["interrupted_by"], "spawn_kill", "{status}");
}

/// A connection refused at `max_connections` is not counted among its
/// uid's open connections: the refusal's `caller_uses` is the one the uid
/// holds, and once that closes the uid connects again.
#[test]
fn a_refused_connection_is_not_counted_as_open() {
    let d = Daemon::start("max-connections", "max_connections = 1\n");
    // The harness's probe for the socket may still hold the one slot.
    let held = answered_connection(&d);
    let mut refused = d.client();
    let said = refused.answer().expect("the refusal");
    assert_eq!(said["error"]["code"], -32003, "{said}");
    let data = &said["error"]["data"];
    assert_eq!(data["limit"], "server.max_connections", "{said}");
    assert_eq!(
        (data["max"].as_u64(), data["caller_uses"].as_u64()),
        (Some(1), Some(1)),
        "{said}"
    );
    assert!(refused.answer().is_none(), "closed after the refusal");
    drop(held);
    answered_connection(&d);
}

/// A connection whose `ping` is answered, once the daemon has a slot for
/// it (within 10 s). A connection refused meanwhile may be closed before
/// the ping is written, or after.
fn answered_connection(d: &Daemon) -> Client {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = d.client();
        let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}});
        let answered = c
            .try_send_raw(format!("{ping}\n").as_bytes())
            .ok()
            .and_then(|()| c.answer());
        if answered.as_ref().is_some_and(|a| a.get("result").is_some()) {
            return c;
        }
        assert!(Instant::now() < deadline, "{answered:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `ping` keeps no idle connection open: one that only pings and holds no
/// handle is closed after `idle_timeout_ms` as a silent one is, while any
/// other request counts as activity.
#[test]
fn pings_do_not_keep_an_idle_connection_open() {
    let d = Daemon::start("ping-idle", "idle_timeout_ms = 800\n");
    let mut pinging = d.client();
    let mut asking = d.client();
    let started = Instant::now();
    let closed = loop {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the pinging connection was never closed"
        );
        send(&mut pinging, 1, "ping", json!({}));
        let a = pinging.answer().expect("an answer or the closing error");
        if a.get("error").is_some() {
            break a;
        }
        // Asking something else each time keeps the other one open.
        assert!(asking.ok("spawn_list", json!({}))["spawns"].is_array());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "{closed} after {:?}",
        started.elapsed()
    );
    assert!(
        closed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("idle_timeout_ms"),
        "{closed}"
    );
    assert!(asking.ok("ping", json!({}))["version"].is_string());
}

/// The daemon's metrics: a spawn that ran and a request the gate refused
/// are counted under their connector, outcome and reason, the round trips
/// and audit flushes timed; `metrics` answers them and `[server]
/// metrics_file` holds the same for the node exporter, readable by it.
#[test]
fn metrics_count_spawns_and_denials_on_the_socket_and_in_the_textfile() {
    let w = harness::world();
    let dir = w.path("metrics-textfile");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("spawnd.prom");
    let _ = std::fs::remove_file(&file);
    let d = Daemon::start(
        "metrics",
        &format!(
            "metrics_file = {:?}\nmetrics_interval_ms = 1000\n",
            file.display().to_string()
        ),
    );
    let mut c = d.client();
    let h = handle_of(&spawn_sh(&mut c, "true", json!({})));
    c.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}));
    let refused = c.call(
        "spawn_op",
        json!({"connector": CONNECTOR, "op": "sh", "args": {"script": "true", "nope": "x"}}),
    );
    assert_eq!(
        refused["error"]["data"]["reason"], "arg_unknown",
        "{refused}"
    );
    let expected = [
        format!("spawnd_spawns_total{{connector=\"{CONNECTOR}\",outcome=\"succeeded\"}} 1"),
        "spawnd_denials_total{reason=\"arg_unknown\"} 1".to_string(),
        "# TYPE spawnd_request_duration_seconds histogram".to_string(),
        "# TYPE spawnd_audit_flush_seconds histogram".to_string(),
    ];
    let answered = c.ok("metrics", json!({}));
    let text = answered["text"].as_str().unwrap();
    for line in &expected {
        assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
    }
    let spawn_ops = text
        .lines()
        .find_map(|l| l.strip_prefix("spawnd_request_duration_seconds_count{method=\"spawn_op\"} "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(spawn_ops.is_some_and(|n| n >= 2), "{text}");
    // The textfile: written within its interval, whole, mode 0644.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let written = std::fs::read_to_string(&file).unwrap_or_default();
        if expected
            .iter()
            .all(|line| written.lines().any(|l| l == line))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} never held the counts:\n{written}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o644);
    // Nothing of a half-written file is left beside it.
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["spawnd.prom"]);
}

/// `spawn_status`'s answer is exactly `SpawnStatus`: a running spawn's and
/// an ended one's read back typed (every struct refusing unknown fields)
/// and serialize to the same JSON.
#[test]
fn a_status_answer_is_the_typed_spawn_status() {
    use spawnd::internals::spawn_result::SpawnStatus;
    let d = Daemon::start("typed-status", "");
    let mut c = d.client();
    let running = handle_of(&spawn_sh(&mut c, "sleep 30", json!({})));
    let ended = handle_of(&spawn_sh(&mut c, "printf out; exit 3", json!({})));
    for (handle, wait_ms) in [(&running, 0), (&ended, 10000)] {
        let answer = c.ok(
            "spawn_status",
            json!({"handle": handle, "wait_ms": wait_ms}),
        );
        let typed: SpawnStatus =
            serde_json::from_value(answer.clone()).unwrap_or_else(|e| panic!("{e}: {answer:#}"));
        assert_eq!(serde_json::to_value(&typed).unwrap(), answer);
        assert_eq!(typed.state(), answer["state"], "{answer}");
        match (handle == &running, typed) {
            (true, SpawnStatus::Running { .. }) => {}
            (false, SpawnStatus::Exited(result)) => {
                assert_eq!(result.exit_code, Some(3), "{answer}");
                assert_eq!(result.stdout.text.as_deref(), Some("out"), "{answer}");
            }
            (_, other) => panic!("unexpected {other:?}"),
        }
    }
    c.ok("spawn_kill", json!({"handle": running}));
}
