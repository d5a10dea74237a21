//! The mapping, record kind by record kind: each gap a SIEM met (a kill
//! that looked like a clean exit, an empty `process`, fields dropped,
//! repeats counted as one, network events without an actor, notes not
//! exported, undeclared profiles, the exporter posing as the host) has a
//! test here, every field of every kind is shown to reach its event, and
//! every event of these records passes `scripts/validate-ocsf` against the
//! OCSF 1.5.0 schema.

use super::*;

/// The attributes OCSF 1.5 marks required for Process Activity (class 1007):
/// activity_id, category_uid, class_uid, time, type_uid, severity_id,
/// metadata (with product and version), actor, device and process.
const REQUIRED: &[&str] = &[
    "activity_id",
    "category_uid",
    "class_uid",
    "time",
    "type_uid",
    "severity_id",
    "metadata",
    "actor",
    "device",
    "process",
];

#[test]
fn decisions_denials_and_exits_map_to_launch_and_terminate_with_required_attributes() {
    let decision: Map<String, Value> = serde_json::from_value(json!({"kind": "decision", "ts": "2026-11-22T01:02:03.456Z", "seq": 1, "audit_id": "a", "caller": {"uid": 0, "gid": 0, "pid": 7}, "program": {"resolved": "/usr/bin/git", "sha256": "sha256:ab"}, "argv_shape": "git status"})).unwrap();
    let e = to_ocsf(&decision, "host");
    for key in REQUIRED {
        assert!(!e[*key].is_null(), "{key} missing: {e}");
    }
    assert_eq!(
        (e["type_uid"].as_i64(), e["time"].as_i64()),
        (Some(100701), Some(1_795_309_323_456))
    );
    assert_eq!(e["process"]["file"]["hashes"][0]["value"], "ab");
    assert!(e["metadata"]["product"]["name"].is_string() && e["metadata"]["version"].is_string());
    let mut denial = decision.clone();
    denial.insert("kind".into(), json!("denial"));
    denial.insert("reason".into(), json!("option_injection"));
    let d = to_ocsf(&denial, "host");
    assert_eq!(
        (d["disposition_id"].as_i64(), d["status_detail"].as_str()),
        (Some(2), Some("option_injection"))
    );
    let mut exit = decision;
    exit.insert("kind".into(), json!("exit"));
    exit.insert("exit_code".into(), json!(3));
    let x = to_ocsf(&exit, "host");
    assert_eq!(
        (x["type_uid"].as_i64(), x["exit_code"].as_i64()),
        (Some(100702), Some(3))
    );
}

#[test]
fn an_exit_carries_its_label_and_who_ended_it_and_an_attach_is_an_open_by_its_peer() {
    let record = |fields: Value| -> Map<String, Value> {
        let mut r: Map<String, Value> = serde_json::from_value(json!({"ts": "2026-11-22T01:02:03.456Z", "seq": 5, "audit_id": "a", "connector": "local://t/x", "op": "sh"})).unwrap();
        r.extend(serde_json::from_value::<Map<String, Value>>(fields).unwrap());
        r
    };
    let killed = to_ocsf(
        &record(
            json!({"kind": "exit", "caller": {"uid": 1000, "gid": 1000, "pid": 7, "label": "ci-job-7"}, "exit_code": null, "signal": 9, "interrupted_by": "spawn_kill", "interrupted_by_peer": {"uid": 1000, "gid": 1000, "pid": 99}}),
        ),
        "host",
    );
    assert_eq!(killed["unmapped"]["label"], "ci-job-7");
    assert_eq!(killed["unmapped"]["interrupted_by"], "spawn_kill");
    assert_eq!(
        killed["unmapped"]["interrupted_by_peer"],
        json!({"uid": 1000, "gid": 1000, "pid": 99})
    );
    // The actor of the spawn's events stays the caller that started it.
    assert_eq!(killed["actor"]["process"]["pid"], 7);
    let expired = to_ocsf(
        &record(
            json!({"kind": "exit", "caller": {"uid": 1000, "gid": 1000, "pid": 7}, "exit_code": null, "signal": 9, "interrupted_by": "lease"}),
        ),
        "host",
    );
    assert_eq!(expired["unmapped"]["interrupted_by"], "lease");
    assert!(
        expired["unmapped"].get("interrupted_by_peer").is_none(),
        "{expired}"
    );
    assert!(expired["unmapped"].get("label").is_none(), "{expired}");
    let on_its_own = to_ocsf(
        &record(
            json!({"kind": "exit", "caller": {"uid": 0, "gid": 0, "pid": 7}, "exit_code": 0, "interrupted_by": null}),
        ),
        "host",
    );
    assert!(
        on_its_own["unmapped"].get("interrupted_by").is_none(),
        "{on_its_own}"
    );
    let attach = to_ocsf(
        &record(
            json!({"kind": "attach", "caller": {"uid": 1000, "gid": 1000, "pid": 99}, "label": "ci-job-7", "method": "spawn_attach", "state": "running"}),
        ),
        "host",
    );
    for key in REQUIRED {
        assert!(!attach[*key].is_null(), "{key} missing: {attach}");
    }
    assert_eq!(
        (attach["type_uid"].as_i64(), attach["status_id"].as_i64()),
        (Some(100703), Some(1))
    );
    assert_eq!(attach["actor"]["process"]["pid"], 99);
    assert_eq!(attach["actor"]["user"]["uid"], "1000");
    assert_eq!(attach["unmapped"]["label"], "ci-job-7");
    assert_eq!(attach["metadata"]["correlation_uid"], "a");
}

/// The attributes OCSF 1.5 marks required for Network Activity (4001)
/// and DNS Activity (4003).
const REQUIRED_NETWORK: &[&str] = &[
    "activity_id",
    "category_uid",
    "class_uid",
    "time",
    "type_uid",
    "severity_id",
    "metadata",
];

fn net(fields: Value) -> Map<String, Value> {
    let mut record: Map<String, Value> = serde_json::from_value(json!({"kind": "net", "ts": "2026-11-22T01:02:03.456Z", "seq": 4, "audit_id": "a", "connector": "local://t/x", "op": "fetch"})).unwrap();
    record.extend(serde_json::from_value::<Map<String, Value>>(fields).unwrap());
    record
}

#[test]
fn connections_map_to_network_activity_and_refused_names_to_dns_activity() {
    let closed = to_ocsf(
        &net(
            json!({"protocol": "tcp", "host": "api.example.com", "port": 443, "dialed": "93.184.215.14:443", "allowed": true, "connected": true, "reason": null, "sni": "api.example.com", "bytes_up": 10, "bytes_down": 20, "duration_ms": 7}),
        ),
        "host",
    );
    for key in REQUIRED_NETWORK {
        assert!(!closed[*key].is_null(), "{key} missing: {closed}");
    }
    assert_eq!(
        (
            closed["type_uid"].as_i64(),
            closed["disposition_id"].as_i64()
        ),
        (Some(400102), Some(1))
    );
    assert_eq!(
        closed["dst_endpoint"],
        json!({"hostname": "api.example.com", "ip": "93.184.215.14", "port": 443})
    );
    assert_eq!(closed["traffic"]["bytes"], 30);
    assert_eq!(closed["tls"]["sni"], "api.example.com");
    assert_eq!(closed["metadata"]["correlation_uid"], "a");
    let refused = to_ocsf(
        &net(
            json!({"protocol": "tcp", "host": "10.0.0.5", "port": 22, "dialed": null, "allowed": false, "connected": false, "reason": "not_granted"}),
        ),
        "host",
    );
    assert_eq!(
        (
            refused["type_uid"].as_i64(),
            refused["disposition_id"].as_i64(),
            refused["status_detail"].as_str()
        ),
        (Some(400105), Some(2), Some("not_granted"))
    );
    assert_eq!(
        refused["dst_endpoint"],
        json!({"ip": "10.0.0.5", "port": 22})
    );
    assert_eq!(refused["connection_info"]["protocol_name"], "tcp");
    let datagram = to_ocsf(
        &net(
            json!({"protocol": "udp", "host": "8.8.8.8", "port": 123, "dialed": null, "allowed": false, "connected": false, "reason": "not_granted"}),
        ),
        "host",
    );
    assert_eq!(
        (
            datagram["type_uid"].as_i64(),
            datagram["connection_info"]["protocol_name"].as_str(),
            datagram["connection_info"]["protocol_num"].as_i64()
        ),
        (Some(400105), Some("udp"), Some(17))
    );
    let failed = to_ocsf(
        &net(
            json!({"protocol": "tcp", "host": "api.example.com", "port": 443, "allowed": true, "connected": false, "reason": "connect_failed"}),
        ),
        "host",
    );
    assert_eq!(failed["type_uid"].as_i64(), Some(400104));
    let dns = to_ocsf(
        &net(
            json!({"protocol": "dns", "query": "leak.example.com", "type": "TXT", "allowed": false, "reason": "not_granted"}),
        ),
        "host",
    );
    for key in REQUIRED_NETWORK {
        assert!(!dns[*key].is_null(), "{key} missing: {dns}");
    }
    assert_eq!(
        (
            dns["type_uid"].as_i64(),
            dns["rcode_id"].as_i64(),
            dns["query"]["hostname"].as_str()
        ),
        (Some(400302), Some(3), Some("leak.example.com"))
    );
}
fn rec(v: Value) -> Map<String, Value> {
    serde_json::from_value(v).unwrap()
}

const SHA_PROGRAM: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const SHA_EXE: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

fn machine() -> Value {
    json!({"hostname": "build-7.example", "machine_id": "0123456789abcdef0123456789abcdef", "boot_id": "5b1c6f0e-3f1a-4c55-9a57-1f1d2c3b4a59"})
}

/// A record with the envelope every record has, `machine` included.
fn enveloped(kind: &str, seq: u64, audit_id: &str, body: Value) -> Map<String, Value> {
    let mut r = rec(
        json!({"v": 1, "kind": kind, "seq": seq, "ts": format!("2026-11-22T01:00:{:02}.000Z", seq % 60), "audit_id": audit_id, "prev": format!("sha256:prev{seq}"), "hash": format!("sha256:hash{seq}"), "machine": machine()}),
    );
    r.extend(rec(body));
    r
}

/// The caller as the daemon names it, with every field it can carry.
fn full_caller() -> Value {
    json!({"uid": 1000, "gid": 1001, "pid": 4242, "label": "ci-job-7", "via": "daemon", "exe": "/usr/bin/python3.12", "exe_sha256": SHA_EXE, "cgroup": "/user.slice/user-1000.slice/session-3.scope", "start_time": "2026-11-22T00:59:00.000Z", "login_uid": 1000})
}

/// One of each kind of record, with every field its writer gives it, in
/// chain order: a spawn (decision, attach, its net records, exit), a
/// denial, a record of repeats, an invalid name's denial, a spawn whose
/// setup failed, notes, the daemon's lifecycle and heartbeat.
fn every_kind() -> Vec<Map<String, Value>> {
    let spawn = "00000000000000a1";
    vec![
        enveloped(
            "lifecycle",
            1,
            "00000000000000f1",
            json!({"event": "start", "pid": 321, "version": "0.1.0", "config_path": "/etc/spawnd/config.toml", "manifests": [{"connector": "local://t/x", "path": "/etc/spawnd/x.toml", "sha256": SHA_PROGRAM}], "unfinished": [{"audit_id": "00000000000000e9", "seq": 9, "connector": "local://t/x", "op": "sh"}]}),
        ),
        enveloped(
            "decision",
            2,
            spawn,
            json!({"decision": "allowed", "connector": "local://t/x", "connector_version": "1.2.0", "connector_hash": SHA_PROGRAM, "connector_signature": "signed", "connector_signer": "0123456789abcdef", "manifest_sha256": "sha256:3333", "manifest_path": "/etc/spawnd/x.toml", "caller": full_caller(), "op": "py", "program": {"declared": "python3", "resolved": "/usr/bin/python3.12", "sha256": SHA_PROGRAM, "pinned": true}, "argv_shape": "python3 -c {code}", "env_keys": ["PATH", "HOME"], "credential_keys": ["TOKEN"], "cwd": "/work/app", "fs": {"read": ["/work/app"], "write": [], "exec": []}, "workspace": "/work/app", "isolation": {"namespaces": ["user", "mount"], "landlock_abi": 6, "seccomp_filter": "f1", "limits_via": "cgroup", "uid": 65534, "gid": 65534, "missing_read_scopes": [], "tmpfs": {"tmp_bytes": 1, "tmp_exec": false, "dev_shm_bytes": 1}}, "network_granted": ["api.example.com:443"], "action": ["spawn:py", "network:api.example.com:443", "network:10.0.0.5:22"], "network_learning": "record"}),
        ),
        enveloped(
            "attach",
            3,
            spawn,
            json!({"connector": "local://t/x", "op": "py", "caller": {"uid": 0, "gid": 0, "pid": 99}, "method": "spawn_attach", "label": "ci-job-7", "state": "running"}),
        ),
        enveloped(
            "net",
            4,
            spawn,
            json!({"connector": "local://t/x", "op": "py", "protocol": "tcp", "host": "api.example.com", "port": 443, "dialed": "93.184.215.14:443", "allowed": true, "connected": true, "reason": null, "denial": null, "sni": "api.example.com", "error": null, "bytes_up": 10, "bytes_down": 20, "duration_ms": 7}),
        ),
        enveloped(
            "net",
            5,
            spawn,
            json!({"connector": "local://t/x", "op": "py", "protocol": "tcp", "host": "10.0.0.5", "port": 22, "dialed": "10.0.0.5:22", "allowed": false, "connected": false, "reason": "not_granted", "denial": "no grant names 10.0.0.5:22", "error": null, "bytes_up": 0, "bytes_down": 0, "duration_ms": 0}),
        ),
        enveloped(
            "net",
            6,
            spawn,
            json!({"connector": "local://t/x", "op": "py", "protocol": "tcp", "host": "api.example.com", "port": 8443, "dialed": null, "allowed": true, "connected": false, "reason": "connect_failed", "error": "connection refused"}),
        ),
        enveloped(
            "net",
            7,
            spawn,
            json!({"connector": "local://t/x", "op": "py", "protocol": "udp", "host": "8.8.8.8", "port": 123, "allowed": false, "connected": false, "reason": "not_granted"}),
        ),
        enveloped(
            "net",
            8,
            spawn,
            json!({"connector": "local://t/x", "op": "py", "protocol": "other", "ip_protocol": 132, "host": "10.0.0.9", "port": 0, "allowed": false, "connected": false, "reason": "not_granted"}),
        ),
        enveloped(
            "net",
            9,
            spawn,
            json!({"connector": "local://t/x", "op": "py", "protocol": "dns", "query": "leak.example.com", "type": "TXT", "allowed": false, "reason": "not_granted"}),
        ),
        enveloped(
            "exit",
            10,
            spawn,
            json!({"connector": "local://t/x", "op": "py", "caller": full_caller(), "exit_code": null, "signal": 9, "timed_out": true, "interrupted_by": "spawn_kill", "interrupted_by_peer": {"uid": 0, "gid": 0, "pid": 99}, "duration_ms": 30000, "cpu_ms": 12, "peak_memory_bytes": 4096, "oom_killed": false, "sandbox_pid": 31337, "stdout": {"bytes": 5, "total_bytes": 5, "truncated": false, "sha256": SHA_PROGRAM, "redactions": 2}, "stderr": {"bytes": 0, "total_bytes": 0, "truncated": false, "sha256": SHA_EXE, "redactions": 0}, "isolation_applied": {"uid": 65534, "gid": 65534, "no_new_privs": true}, "network": {"connections": 1, "refused": 3, "bytes_up": 10, "bytes_down": 20}}),
        ),
        enveloped(
            "denial",
            11,
            "00000000000000b1",
            json!({"decision": "denied", "connector": "local://t/x", "manifest_path": "/etc/spawnd/x.toml", "caller": {"uid": 1000, "gid": 1000, "pid": 4243, "via": "cli"}, "op": "py", "class": "argument", "boundary_detail": "argv", "reason": "arg_unknown", "requested": ["extra"], "granted": ["code"]}),
        ),
        enveloped(
            "denial",
            12,
            "00000000000000b2",
            json!({"decision": "denied", "connector": null, "caller": {"uid": 65534, "gid": 65534, "pid": 77}, "op": null, "class": "invalid_params", "boundary_detail": "request", "reason": "params_invalid", "requested": null, "granted": null, "method": "spawn_op", "repeats_window_ms": 60000, "invalid": {"field": "connector", "bytes": 9}}),
        ),
        enveloped(
            "denial",
            13,
            "00000000000000b3",
            json!({"decision": "denied", "caller": {"uid": 65534, "gid": 65534, "pid": 77}, "class": "invalid_params", "boundary_detail": "request", "reason": "params_invalid", "repeats": {"count": 999, "of": "00000000000000b2", "first_ts": "2026-11-22T01:00:12.000Z", "last_ts": "2026-11-22T01:00:12.900Z", "window_ms": 60000, "methods": ["spawn_op"], "connectors": [], "ops": [], "pids": [77], "samples_truncated": false, "invalid": {"connector": {"count": 999, "max_bytes": 9}}}}),
        ),
        enveloped(
            "decision",
            14,
            "00000000000000c1",
            json!({"decision": "allowed", "connector": "local://t/x", "caller": {"uid": 0, "gid": 0, "pid": 5}, "op": "sh", "program": {"declared": "bash", "resolved": "/usr/bin/bash", "sha256": SHA_PROGRAM, "pinned": false}, "argv_shape": "bash -c {script}", "cwd": "fresh_temp", "isolation": {"not_started": "Landlock ABI 3; spawnd requires at least 99"}}),
        ),
        enveloped(
            "exit",
            15,
            "00000000000000c1",
            json!({"caller": {"uid": 0, "gid": 0, "pid": 5}, "setup_failed": "Landlock ABI 3; spawnd requires at least 99"}),
        ),
        enveloped(
            "note",
            16,
            "00000000000000d1",
            json!({"note": "rotated files removed ([audit] keep_rotated = 2)", "removed_files": ["audit.jsonl.1"], "chain_starts_at": {"seq": 9, "prev": "sha256:9"}}),
        ),
        enveloped(
            "note",
            17,
            "00000000000000d2",
            json!({"note": "torn line left by an interrupted write; chained past", "torn_at_byte": 512, "torn_bytes": 17}),
        ),
        enveloped(
            "note",
            18,
            "00000000000000d3",
            json!({"note": "key rotated", "key_rotated": {"from_key_id": "k1", "to_key_id": "k2"}}),
        ),
        enveloped(
            "lifecycle",
            19,
            "00000000000000f2",
            json!({"event": "reload", "added": [{"connector": "local://t/y", "path": "/etc/spawnd/y.toml", "sha256": SHA_EXE}], "removed": [], "changed": [{"connector": "local://t/x", "path": "/etc/spawnd/x.toml", "sha256": SHA_EXE, "previous_sha256": SHA_PROGRAM}]}),
        ),
        enveloped(
            "heartbeat",
            20,
            "00000000000000f3",
            json!({"interval_s": 60, "pid": 321}),
        ),
        enveloped(
            "lifecycle",
            21,
            "00000000000000f4",
            json!({"event": "stop", "reason": "SIGTERM"}),
        ),
        enveloped(
            "mystery",
            22,
            "00000000000000f5",
            json!({"what": "a kind from a newer spawnd"}),
        ),
    ]
}

/// The events of `records`, exported in order by one exporter.
fn exported(records: &[Map<String, Value>]) -> Vec<Value> {
    let mut exporter = Exporter::new("exporter.example");
    records.iter().map(|r| exporter.event(r)).collect()
}

fn at<'v>(v: &'v Value, path: &str) -> &'v Value {
    path.split('.').fold(v, |v, k| &v[k])
}

/// Record fields the mapping holds in an OCSF attribute (kind `*`: any):
/// (kind, record path, event path, whether the event keeps the value
/// itself, give or take its form, rather than something derived from it).
const MAPPED: &[(&str, &str, &str, bool)] = &[
    ("*", "v", "metadata.log_version", true),
    ("*", "kind", "class_uid", false),
    ("*", "seq", "metadata.sequence", true),
    ("*", "ts", "time", true),
    ("*", "audit_id", "metadata.correlation_uid", true),
    ("*", "machine.hostname", "device.hostname", true),
    ("*", "machine.machine_id", "device.uid", true),
    ("*", "machine.boot_id", "device.boot_uid", true),
    ("*", "caller.uid", "actor.user.uid", true),
    ("*", "caller.gid", "actor.user.groups", true),
    ("*", "caller.pid", "actor.process.pid", true),
    ("*", "caller.exe", "actor.process.file.path", true),
    ("*", "caller.exe_sha256", "actor.process.file.hashes", true),
    ("*", "caller.start_time", "actor.process.created_time", true),
    ("*", "caller.label", "unmapped.label", true),
    ("*", "decision", "disposition_id", false),
    ("decision", "program.resolved", "process.file.path", true),
    ("decision", "program.sha256", "process.file.hashes", true),
    ("decision", "argv_shape", "process.cmd_line", true),
    ("decision", "cwd", "process.working_directory", true),
    ("decision", "isolation.uid", "process.user.uid", true),
    ("decision", "isolation.gid", "process.user.groups", true),
    ("denial", "reason", "status_detail", true),
    ("denial", "repeats.count", "count", true),
    ("denial", "repeats.first_ts", "start_time", true),
    ("denial", "repeats.last_ts", "end_time", true),
    ("exit", "exit_code", "exit_code", true),
    ("exit", "duration_ms", "duration", true),
    ("exit", "sandbox_pid", "process.pid", true),
    ("exit", "isolation_applied.uid", "process.user.uid", true),
    ("exit", "isolation_applied.gid", "process.user.groups", true),
    ("net", "protocol", "class_uid", false),
    ("net", "host", "dst_endpoint", true),
    ("net", "port", "dst_endpoint.port", true),
    ("net", "dialed", "dst_endpoint.ip", false),
    ("net", "allowed", "disposition_id", false),
    ("net", "connected", "activity_id", false),
    ("net", "reason", "status_detail", true),
    ("net", "sni", "tls.sni", true),
    ("net", "bytes_up", "traffic.bytes_out", true),
    ("net", "bytes_down", "traffic.bytes_in", true),
    ("net", "duration_ms", "duration", true),
    ("net", "ip_protocol", "connection_info.protocol_num", true),
    ("net", "query", "query.hostname", true),
    ("net", "type", "query.type", true),
    ("note", "note", "message", true),
    ("lifecycle", "event", "activity_id", false),
    ("lifecycle", "version", "app.version", true),
    ("lifecycle", "pid", "actor.process.pid", true),
    ("lifecycle", "reason", "message", true),
    ("heartbeat", "pid", "actor.process.pid", true),
];

/// Whether `held` (an event's attribute) holds `value` (a record's), in
/// its OCSF form: as is, as text, a time as epoch milliseconds, a digest
/// without its `sha256:`.
fn holds(held: &Value, value: &Value) -> bool {
    let text = held.to_string();
    let bare = value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_string);
    held == value
        || held.as_str() == Some(bare.as_str())
        || value
            .as_str()
            .and_then(epoch_ms)
            .is_some_and(|ms| held == &json!(ms))
        || text.contains(bare.strip_prefix("sha256:").unwrap_or(&bare))
}

/// Every leaf of `v` (arrays whole), as (dotted path, value).
fn leaves(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v.as_object() {
        Some(map) if !map.is_empty() => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(&path, v, out);
            }
        }
        _ => out.push((prefix.to_string(), v.clone())),
    }
}

#[test]
fn every_field_of_every_kind_of_record_reaches_its_event() {
    let records = every_kind();
    for (record, event) in records.iter().zip(exported(&records)) {
        let kind = record["kind"].as_str().unwrap();
        let mut all = Vec::new();
        leaves("", &Value::Object(record.clone()), &mut all);
        for (path, value) in all.into_iter().filter(|(_, v)| !v.is_null()) {
            if at(&event["unmapped"], &path) == &value {
                continue;
            }
            let mapped = MAPPED
                .iter()
                .find(|(k, p, _, _)| (*k == "*" || *k == kind) && *p == path);
            let Some((_, _, to, same)) = mapped else {
                panic!("{kind} record's {path} = {value} is nowhere in its event: {event:#}");
            };
            let held = at(&event, to);
            assert!(
                !held.is_null(),
                "{kind} record's {path} should be at {to}: {event:#}"
            );
            assert!(
                !same || holds(held, &value),
                "{kind} record's {path} = {value}, but {to} = {held}"
            );
        }
    }
}

/// The events of [`every_kind`] pass the strict validator against the
/// OCSF 1.5.0 schema kept in the repository.
#[test]
fn the_events_of_every_kind_of_record_are_valid_ocsf_1_5_0() {
    let records = every_kind();
    let mut events = exported(&records);
    // The same records exported on their own: no decision to draw on, and
    // no machine (an older record).
    for r in &records {
        let mut old = r.clone();
        old.remove("machine");
        events.push(to_ocsf(&old, "exporter.example"));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    let text: String = events.iter().map(|e| format!("{e}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let out = std::process::Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/validate-ocsf"
    ))
    .arg(&file)
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_killed_program_is_a_failure_with_its_signal_timeout_duration_and_who_ended_it() {
    let events = exported(&every_kind());
    let killed = &events[9];
    assert_eq!(killed["type_uid"], 100702, "{killed}");
    assert_eq!(
        (&killed["status_id"], &killed["status"]),
        (&json!(2), &json!("Failure")),
        "{killed}"
    );
    assert_eq!(
        killed["status_detail"],
        "killed by signal 9, timed out, interrupted by spawn_kill"
    );
    assert_eq!(killed["duration"], 30000);
    assert!(killed.get("exit_code").is_none(), "{killed}");
    for (key, value) in [
        ("signal", json!(9)),
        ("timed_out", json!(true)),
        ("interrupted_by", json!("spawn_kill")),
    ] {
        assert_eq!(killed["unmapped"][key], value, "{killed}");
    }
    let ended = |fields: Value| {
        let mut r = rec(
            json!({"kind": "exit", "seq": 1, "ts": "2026-11-22T01:00:00.000Z", "audit_id": "a", "caller": {"uid": 0, "gid": 0, "pid": 1}}),
        );
        r.extend(rec(fields));
        to_ocsf(&r, "h")
    };
    let clean = ended(json!({"exit_code": 0, "signal": null, "timed_out": false}));
    assert_eq!(
        (
            &clean["status"],
            &clean["exit_code"],
            &clean["status_detail"]
        ),
        (&json!("Success"), &json!(0), &json!("exit code 0"))
    );
    let nonzero = ended(json!({"exit_code": 3, "signal": null, "timed_out": false}));
    assert_eq!(
        (&nonzero["status"], &nonzero["exit_code"]),
        (&json!("Failure"), &json!(3))
    );
    let timed_out = ended(json!({"exit_code": 0, "signal": null, "timed_out": true}));
    assert_eq!(timed_out["status"], "Failure", "{timed_out}");
    let unstarted = &events[14];
    assert_eq!(
        (
            &unstarted["type_uid"],
            &unstarted["status"],
            &unstarted["status_detail"]
        ),
        (
            &json!(100701),
            &json!("Failure"),
            &json!("setup failed: Landlock ABI 3; spawnd requires at least 99")
        ),
        "{unstarted}"
    );
}

#[test]
fn every_process_event_names_the_spawn_and_its_decision_fills_the_later_ones() {
    let events = exported(&every_kind());
    for event in events.iter().filter(|e| e["class_uid"] == 1007) {
        let process = &event["process"];
        assert_eq!(
            process["uid"], event["metadata"]["correlation_uid"],
            "{event}"
        );
    }
    let (decision, attach, exit) = (&events[1], &events[2], &events[9]);
    let run_as = json!({"uid": "65534", "groups": [{"uid": "65534"}]});
    assert_eq!(decision["process"]["user"], run_as, "{decision}");
    assert_eq!(
        decision["process"]["working_directory"], "/work/app",
        "{decision}"
    );
    for later in [attach, exit] {
        assert_eq!(
            later["process"]["file"], decision["process"]["file"],
            "{later}"
        );
        assert_eq!(later["process"]["cmd_line"], "python3 -c {code}", "{later}");
        assert_eq!(later["process"]["user"], run_as, "{later}");
    }
    assert_eq!(
        exit["process"]["file"]["hashes"][0]["value"],
        SHA_PROGRAM.strip_prefix("sha256:").unwrap()
    );
    assert_eq!(exit["process"]["terminated_time"], exit["time"], "{exit}");
    // The host pid of the sandbox's init, which the exit record names.
    assert_eq!(exit["process"]["pid"], 31337, "{exit}");
    // A denial launched nothing: its process is the refused request's id.
    let denied = &events[10];
    assert_eq!(denied["process"], json!({"uid": "00000000000000b1"}));
}

#[test]
fn the_caller_is_the_actor_of_every_event_of_its_spawn_with_what_the_daemon_knows_of_it() {
    let events = exported(&every_kind());
    let decision = &events[1];
    let actor = &decision["actor"];
    assert_eq!(
        actor["user"],
        json!({"uid": "1000", "groups": [{"uid": "1001"}]})
    );
    assert_eq!(actor["process"]["pid"], 4242);
    assert_eq!(actor["process"]["file"]["path"], "/usr/bin/python3.12");
    assert_eq!(
        actor["process"]["file"]["hashes"][0]["value"],
        SHA_EXE.strip_prefix("sha256:").unwrap()
    );
    assert_eq!(
        actor["process"]["created_time"],
        epoch_ms("2026-11-22T00:59:00.000Z").unwrap()
    );
    assert_eq!(
        decision["unmapped"]["caller"],
        json!({"via": "daemon", "cgroup": "/user.slice/user-1000.slice/session-3.scope", "login_uid": 1000})
    );
    assert_eq!(decision["unmapped"]["label"], "ci-job-7");
    for net in &events[3..9] {
        assert_eq!(&net["actor"], actor, "{net}");
        assert!(
            net["metadata"]["profiles"]
                .as_array()
                .unwrap()
                .contains(&json!("host")),
            "{net}"
        );
    }
    // The attach's actor is the peer that took the spawn up.
    assert_eq!(events[2]["actor"]["process"]["pid"], 99);
}

#[test]
fn what_has_no_ocsf_attribute_is_in_unmapped() {
    let events = exported(&every_kind());
    let decision = &events[1]["unmapped"];
    assert_eq!(decision["manifest_sha256"], "sha256:3333");
    assert_eq!(decision["manifest_path"], "/etc/spawnd/x.toml");
    assert_eq!(
        decision["program"],
        json!({"declared": "python3", "pinned": true})
    );
    assert_eq!(decision["env_keys"], json!(["PATH", "HOME"]));
    assert_eq!(decision["credential_keys"], json!(["TOKEN"]));
    // The action subset the caller gave, and what it left the spawn.
    assert_eq!(
        decision["action"],
        json!([
            "spawn:py",
            "network:api.example.com:443",
            "network:10.0.0.5:22"
        ])
    );
    assert_eq!(decision["network_granted"], json!(["api.example.com:443"]));
    assert_eq!(decision["connector"], "local://t/x");
    // The connector's (version, hash, signer) beside its name.
    assert_eq!(
        (
            &decision["connector_version"],
            &decision["connector_hash"],
            &decision["connector_signature"],
            &decision["connector_signer"]
        ),
        (
            &json!("1.2.0"),
            &json!(SHA_PROGRAM),
            &json!("signed"),
            &json!("0123456789abcdef")
        )
    );
    let unstarted = &events[13];
    assert_eq!(unstarted["unmapped"]["cwd"], "fresh_temp", "{unstarted}");
    let denied = &events[10]["unmapped"];
    assert_eq!(
        (&denied["requested"], &denied["granted"]),
        (&json!(["extra"]), &json!(["code"]))
    );
    let exit = &events[9]["unmapped"];
    assert_eq!(exit["stdout"]["redactions"], 2);
    assert_eq!(exit["interrupted_by_peer"]["pid"], 99);
}

#[test]
fn a_record_of_repeats_carries_their_count_and_time_span() {
    let events = exported(&every_kind());
    let repeats = &events[12];
    assert_eq!(repeats["count"], 999);
    assert_eq!(
        (&repeats["start_time"], &repeats["end_time"]),
        (
            &json!(epoch_ms("2026-11-22T01:00:12.000Z").unwrap()),
            &json!(epoch_ms("2026-11-22T01:00:12.900Z").unwrap())
        )
    );
    assert_eq!(repeats["unmapped"]["repeats"]["of"], "00000000000000b2");
    assert_eq!(repeats["status_detail"], "params_invalid");
}

#[test]
fn notes_about_the_log_are_event_log_activity() {
    let events = exported(&every_kind());
    let (removed, torn, rotated) = (&events[15], &events[16], &events[17]);
    assert_eq!(
        (&removed["type_uid"], &removed["activity_name"]),
        (&json!(100802), &json!("Delete"))
    );
    assert_eq!(
        removed["unmapped"]["removed_files"],
        json!(["audit.jsonl.1"])
    );
    assert_eq!(
        removed["message"],
        "rotated files removed ([audit] keep_rotated = 2)"
    );
    assert_eq!(
        (
            &torn["type_uid"],
            &torn["activity_name"],
            &torn["unmapped"]["torn_bytes"]
        ),
        (&json!(100899), &json!("Repair"), &json!(17))
    );
    assert_eq!(
        rotated["unmapped"]["key_rotated"],
        json!({"from_key_id": "k1", "to_key_id": "k2"})
    );
    assert_eq!(rotated["activity_name"], "Key Rotation");
}

#[test]
fn the_daemons_lifecycle_and_heartbeat_are_application_lifecycle() {
    let events = exported(&every_kind());
    let (start, reload, heartbeat, stop) = (&events[0], &events[18], &events[19], &events[20]);
    assert_eq!(
        (
            &start["type_uid"],
            &start["app"]["version"],
            &start["actor"]["process"]["pid"]
        ),
        (&json!(600203), &json!("0.1.0"), &json!(321))
    );
    assert_eq!(
        start["unmapped"]["unfinished"][0]["audit_id"],
        "00000000000000e9"
    );
    assert_eq!(
        (
            &reload["type_uid"],
            &reload["activity_name"],
            &reload["type_name"]
        ),
        (
            &json!(600299),
            &json!("Reload"),
            &json!("Application Lifecycle: Other")
        )
    );
    assert_eq!(
        reload["unmapped"]["changed"][0]["previous_sha256"],
        SHA_PROGRAM
    );
    assert_eq!(
        (
            &heartbeat["activity_name"],
            &heartbeat["unmapped"]["interval_s"]
        ),
        (&json!("Heartbeat"), &json!(60))
    );
    assert_eq!(
        (&stop["type_uid"], &stop["message"]),
        (&json!(600204), &json!("SIGTERM"))
    );
    let mystery = &events[21];
    assert_eq!(
        (
            &mystery["class_uid"],
            &mystery["activity_name"],
            &mystery["unmapped"]["what"]
        ),
        (
            &json!(0),
            &json!("mystery"),
            &json!("a kind from a newer spawnd")
        )
    );
}

#[test]
fn profiles_an_event_uses_are_declared() {
    for event in exported(&every_kind()) {
        let declared: Vec<&str> = event["metadata"]["profiles"]
            .as_array()
            .map(|p| p.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let uses = |keys: &[&str]| keys.iter().any(|k| event.get(*k).is_some());
        assert_eq!(
            declared.contains(&"security_control"),
            uses(&["disposition_id", "action_id"]),
            "{event}"
        );
        assert_eq!(
            declared.contains(&"host"),
            uses(&["device", "actor"]),
            "{event}"
        );
    }
}

#[test]
fn the_device_is_the_records_machine_and_never_silently_the_exporter() {
    let events = exported(&every_kind());
    assert_eq!(
        events[1]["device"],
        json!({"hostname": "build-7.example", "uid": "0123456789abcdef0123456789abcdef", "os_machine_uuid": "01234567-89ab-cdef-0123-456789abcdef", "boot_uid": "5b1c6f0e-3f1a-4c55-9a57-1f1d2c3b4a59", "type_id": 0, "type": "Unknown"})
    );
    assert!(events[1]["unmapped"].get("device_from_exporter").is_none());
    let mut old = every_kind()[1].clone();
    old.remove("machine");
    let e = to_ocsf(&old, "exporter.example");
    assert_eq!(e["device"]["hostname"], "exporter.example");
    assert_eq!(e["unmapped"]["device_from_exporter"], true);
    let mut odd = every_kind()[1].clone();
    odd.insert(
        "machine".into(),
        json!({"hostname": "n", "machine_id": "not-hex", "rack": 4}),
    );
    let e = to_ocsf(&odd, "exporter.example");
    assert_eq!(e["device"]["uid"], "not-hex");
    assert!(e["device"].get("os_machine_uuid").is_none(), "{e}");
    assert_eq!(e["unmapped"]["machine"], json!({"rack": 4}));
}

#[test]
fn ids_are_the_records_own_whatever_came_before() {
    let records = every_kind();
    let in_order = exported(&records);
    for (record, event) in records.iter().zip(&in_order) {
        let alone = to_ocsf(record, "exporter.example");
        assert_eq!(alone["metadata"]["uid"], event["metadata"]["uid"]);
        assert_eq!(
            event["metadata"]["uid"],
            format!("{}:{}", record["audit_id"].as_str().unwrap(), record["seq"])
        );
    }
}

#[test]
fn a_long_spawn_outlives_many_short_ones_and_forgotten_spawns_are_bounded() {
    let mut exporter = Exporter::remembering("h", 4);
    let decision_of = |id: &str| {
        enveloped(
            "decision",
            1,
            id,
            json!({"caller": {"uid": 0, "gid": 0, "pid": 1}, "program": {"resolved": "/usr/bin/bash", "sha256": SHA_PROGRAM}, "argv_shape": "bash -c {script}"}),
        )
    };
    let exit_of = |id: &str| enveloped("exit", 2, id, json!({"exit_code": 0}));
    exporter.event(&decision_of("long"));
    for i in 0..100 {
        let id = format!("short{i}");
        exporter.event(&decision_of(&id));
        exporter.event(&exit_of(&id));
    }
    let long_exit = exporter.event(&exit_of("long"));
    assert_eq!(
        long_exit["process"]["cmd_line"], "bash -c {script}",
        "{long_exit}"
    );
    // Decisions without exits: only the newest `capacity` are kept.
    for i in 0..10 {
        exporter.event(&decision_of(&format!("lost{i}")));
    }
    assert_eq!((exporter.spawns.len(), exporter.by_age.len()), (4, 4));
    assert!(exporter.event(&exit_of("lost0"))["process"]
        .get("cmd_line")
        .is_none());
    let kept = exporter.event(&exit_of("lost9"));
    assert_eq!(kept["process"]["cmd_line"], "bash -c {script}", "{kept}");
}
