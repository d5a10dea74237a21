//! OCSF export: each record as an OCSF 1.5 event a SIEM can ingest. A
//! spawn's `decision`, `denial` and `exit` are Process Activity (class
//! 1007), its `net` records Network Activity (class 4001) or, for a DNS
//! name refused, DNS Activity (class 4003). The mapping, field by field:
//!
//! | spawnd record | OCSF |
//! |---|---|
//! | `decision` | `activity_id` 1 Launch, `status_id` 1 Success, `disposition_id` 1 Allowed |
//! | `denial` | `activity_id` 1 Launch, `status_id` 2 Failure, `disposition_id` 2 Blocked, `status_detail` = reason |
//! | `exit` | `activity_id` 2 Terminate, `exit_code` |
//! | `attach` | `activity_id` 3 Open (a peer took a detached spawn's handle up), `status_id` 1 Success; `actor` is that peer |
//! | `ts` | `time` (epoch ms) |
//! | `audit_id`, `seq`, `hash` | `metadata.uid`, `metadata.sequence`, `metadata.correlation_uid` = audit_id |
//! | `caller.uid/gid/pid` | `actor.user.uid`, `actor.user.groups`, `actor.process.pid` |
//! | `program.resolved`, `program.sha256` | `process.file.path`, `process.file.hashes[{algorithm_id: 3 SHA-256}]` |
//! | `argv_shape` | `process.cmd_line` (placeholder names, never values) |
//! | `caller.label` (an attach record's `label`) | `unmapped.label` |
//! | `interrupted_by`, `interrupted_by_peer {uid, gid, pid}` | `unmapped.interrupted_by`, `unmapped.interrupted_by_peer` |
//! | `connector`, `op`, `reason`, everything else | `unmapped` |
//!
//! | `net` record | OCSF |
//! |---|---|
//! | `protocol: tcp`, reached its server (`connected`, `allowed`) | 4001, `activity_id` 2 Close, `disposition_id` 1 Allowed |
//! | `protocol: tcp`, allowed but not connected | 4001, `activity_id` 4 Fail, `status_id` 2 Failure |
//! | `protocol: tcp`, refused | 4001, `activity_id` 5 Refuse, `disposition_id` 2 Blocked |
//! | `protocol: udp` (always refused: a datagram the sandbox's rules stopped) | 4001, `activity_id` 5 Refuse, `disposition_id` 2 Blocked, `connection_info.protocol_name` `udp` |
//! | `host`, `port`, `dialed` | `dst_endpoint.hostname` (a name) or `.ip`, `.port`; `dst_endpoint.ip` = the address dialed |
//! | `bytes_up`, `bytes_down`, `duration_ms` | `traffic.bytes_out`, `traffic.bytes_in`, `duration` |
//! | `sni` | `tls.sni` |
//! | `reason` | `status_detail` |
//! | `protocol: dns` | 4003, `activity_id` 2 Response, `rcode_id` 3 NXDomain, `query.hostname`, `query.type`, `disposition_id` 2 Blocked |
//! | `ts`, `audit_id`, `seq`, `hash`, `connector`, `op` | as for the spawn's records |

use serde_json::{json, Map, Value};

fn epoch_ms(ts: &str) -> Option<i64> {
    let t = time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).ok()?;
    Some((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

/// One record as an OCSF event (`None` for `note` records).
pub fn to_ocsf(record: &Map<String, Value>, hostname: &str) -> Option<Value> {
    match record.get("kind")?.as_str()? {
        "decision" | "denial" | "exit" | "attach" => Some(process_activity(record, hostname)),
        "net" if record.get("protocol").and_then(Value::as_str) == Some("dns") => {
            Some(dns_activity(record, hostname))
        }
        "net" => Some(network_activity(record, hostname)),
        _ => None,
    }
}

/// What every event has: its class and activity, when, which record, and
/// where; `blocked` events are Medium, the rest Informational.
fn envelope(
    record: &Map<String, Value>,
    hostname: &str,
    (class_uid, class_name, category_uid, category_name): (i64, &str, i64, &str),
    (activity_id, activity): (i64, &str),
    blocked: bool,
) -> Value {
    json!({
        "class_uid": class_uid, "class_name": class_name,
        "category_uid": category_uid, "category_name": category_name,
        "activity_id": activity_id, "activity_name": activity,
        "type_uid": class_uid * 100 + activity_id, "type_name": format!("{class_name}: {activity}"),
        "severity_id": if blocked { 3 } else { 1 }, "severity": if blocked { "Medium" } else { "Informational" },
        "time": record.get("ts").and_then(Value::as_str).and_then(epoch_ms),
        "metadata": {
            "version": "1.5.0",
            "product": {"name": "spawnd", "vendor_name": "spawnd", "version": env!("CARGO_PKG_VERSION")},
            "uid": format!("{}:{}", record.get("audit_id").and_then(Value::as_str).unwrap_or(""), record.get("seq").and_then(Value::as_u64).unwrap_or(0)),
            "correlation_uid": record.get("audit_id"),
            "sequence": record.get("seq"),
        },
        "device": {"hostname": hostname, "type_id": 0, "type": "Unknown"},
        "unmapped": {"connector": record.get("connector"), "op": record.get("op"), "hash": record.get("hash")},
    })
}

/// Sets the disposition: 1 Allowed, or 2 Blocked.
fn set_disposition(event: &mut Value, blocked: bool) {
    event["disposition_id"] = json!(if blocked { 2 } else { 1 });
    event["disposition"] = json!(if blocked { "Blocked" } else { "Allowed" });
}

/// Sets the status: 1 Success, or 2 Failure with `detail`.
fn set_status(event: &mut Value, failed: bool, detail: Option<&Value>) {
    event["status_id"] = json!(if failed { 2 } else { 1 });
    event["status"] = json!(if failed { "Failure" } else { "Success" });
    if let Some(detail) = detail.filter(|d| !d.is_null()) {
        event["status_detail"] = detail.clone();
    }
}

/// A `decision`, `denial`, `exit` or `attach` as Process Activity.
fn process_activity(record: &Map<String, Value>, hostname: &str) -> Value {
    let kind = record.get("kind").and_then(Value::as_str).unwrap_or("");
    let activity = match kind {
        "exit" => (2, "Terminate"),
        "attach" => (3, "Open"),
        _ => (1, "Launch"),
    };
    let denied = kind == "denial";
    let sha = record
        .get("program")
        .and_then(|p| p.get("sha256"))
        .and_then(Value::as_str)
        .and_then(|s| s.strip_prefix("sha256:"));
    let path = record
        .get("program")
        .and_then(|p| p.get("resolved"))
        .and_then(Value::as_str);
    let file = path.map(|p| {
        let name = std::path::Path::new(p)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut f = json!({"path": p, "name": name, "type_id": 1, "type": "Regular File"});
        if let Some(h) = sha {
            f["hashes"] = json!([{"algorithm_id": 3, "algorithm": "SHA-256", "value": h}]);
        }
        f
    });
    let caller = record.get("caller").cloned().unwrap_or(Value::Null);
    let class = (1007, "Process Activity", 1, "System Activity");
    let mut event = envelope(record, hostname, class, activity, denied);
    set_status(&mut event, denied, None);
    event["actor"] = json!({"user": {"uid": caller.get("uid").map(|u| u.to_string()), "groups": caller.get("gid").map(|g| json!([{"uid": g.to_string()}]))}, "process": {"pid": caller.get("pid")}});
    event["process"] = json!({"cmd_line": record.get("argv_shape"), "file": file, "name": path.and_then(|p| std::path::Path::new(p).file_name()).map(|n| n.to_string_lossy().into_owned())});
    match kind {
        "denial" => {
            set_disposition(&mut event, true);
            event["status_detail"] = record.get("reason").cloned().unwrap_or(Value::Null);
        }
        "decision" => set_disposition(&mut event, false),
        "exit" => {
            event["exit_code"] = record.get("exit_code").cloned().unwrap_or(Value::Null);
            // Who ended the program from outside: how, and the peer that
            // did, when one did (the actor stays the spawn's caller).
            for key in ["interrupted_by", "interrupted_by_peer"] {
                if let Some(v) = record.get(key).filter(|v| !v.is_null()) {
                    event["unmapped"][key] = v.clone();
                }
            }
        }
        _ => {}
    }
    let label = caller
        .get("label")
        .or_else(|| record.get("label"))
        .filter(|l| l.is_string());
    if let Some(label) = label {
        event["unmapped"]["label"] = label.clone();
    }
    event
}

/// A connection's `net` record as Network Activity: Close for one that
/// reached its server, Fail for an allowed one that did not, Refuse.
fn network_activity(record: &Map<String, Value>, hostname: &str) -> Value {
    let flag = |k: &str| record.get(k).and_then(Value::as_bool).unwrap_or(false);
    let (allowed, connected) = (flag("allowed"), flag("connected"));
    let activity = match (allowed, connected) {
        (true, true) => (2, "Close"),
        (true, false) => (4, "Fail"),
        (false, _) => (5, "Refuse"),
    };
    let class = (4001, "Network Activity", 4, "Network Activity");
    let mut event = envelope(record, hostname, class, activity, !allowed);
    set_disposition(&mut event, !allowed);
    set_status(&mut event, !(allowed && connected), record.get("reason"));
    let host = record.get("host").and_then(Value::as_str).unwrap_or("");
    let dialed: Option<std::net::SocketAddr> = record
        .get("dialed")
        .and_then(Value::as_str)
        .and_then(|d| d.parse().ok());
    let mut destination = json!({"port": record.get("port")});
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => destination["ip"] = json!(ip.to_string()),
        Err(_) => {
            destination["hostname"] = json!(host);
            if let Some(dialed) = dialed {
                destination["ip"] = json!(dialed.ip().to_string());
            }
        }
    }
    event["dst_endpoint"] = destination;
    let (protocol_name, protocol_num) = match record.get("protocol").and_then(Value::as_str) {
        Some("udp") => ("udp", json!(17)),
        Some("other") => ("other", json!(record.get("ip_protocol"))),
        _ => ("tcp", json!(6)),
    };
    event["connection_info"] = json!({"direction_id": 2, "direction": "Outbound", "protocol_name": protocol_name, "protocol_num": protocol_num});
    let up = record.get("bytes_up").and_then(Value::as_u64).unwrap_or(0);
    let down = record
        .get("bytes_down")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    event["traffic"] = json!({"bytes_out": up, "bytes_in": down, "bytes": up + down});
    event["duration"] = record.get("duration_ms").cloned().unwrap_or(Value::Null);
    if let Some(sni) = record.get("sni").and_then(Value::as_str) {
        // The ClientHello's version is not recorded: "unknown", as OCSF
        // requires one.
        event["tls"] = json!({"sni": sni, "version": "unknown"});
    }
    event["unmapped"]["denial"] = record.get("denial").cloned().unwrap_or(Value::Null);
    event["unmapped"]["error"] = record.get("error").cloned().unwrap_or(Value::Null);
    event
}

/// A DNS name the stub refused as DNS Activity: a Response of NXDomain,
/// blocked.
fn dns_activity(record: &Map<String, Value>, hostname: &str) -> Value {
    let class = (4003, "DNS Activity", 4, "Network Activity");
    let mut event = envelope(record, hostname, class, (2, "Response"), true);
    set_disposition(&mut event, true);
    set_status(&mut event, true, record.get("reason"));
    event["query"] = json!({"hostname": record.get("query"), "type": record.get("type")});
    event["rcode_id"] = json!(3);
    event["rcode"] = json!("NXDomain");
    event
}

#[cfg(test)]
mod tests {
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
        let e = to_ocsf(&decision, "host").unwrap();
        for key in REQUIRED {
            assert!(!e[*key].is_null(), "{key} missing: {e}");
        }
        assert_eq!(
            (e["type_uid"].as_i64(), e["time"].as_i64()),
            (Some(100701), Some(1_795_309_323_456))
        );
        assert_eq!(e["process"]["file"]["hashes"][0]["value"], "ab");
        assert!(
            e["metadata"]["product"]["name"].is_string() && e["metadata"]["version"].is_string()
        );
        let mut denial = decision.clone();
        denial.insert("kind".into(), json!("denial"));
        denial.insert("reason".into(), json!("option_injection"));
        let d = to_ocsf(&denial, "host").unwrap();
        assert_eq!(
            (d["disposition_id"].as_i64(), d["status_detail"].as_str()),
            (Some(2), Some("option_injection"))
        );
        let mut exit = decision;
        exit.insert("kind".into(), json!("exit"));
        exit.insert("exit_code".into(), json!(3));
        let x = to_ocsf(&exit, "host").unwrap();
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
        let killed = to_ocsf(&record(json!({"kind": "exit", "caller": {"uid": 1000, "gid": 1000, "pid": 7, "label": "ci-job-7"}, "exit_code": null, "signal": 9, "interrupted_by": "spawn_kill", "interrupted_by_peer": {"uid": 1000, "gid": 1000, "pid": 99}})), "host").unwrap();
        assert_eq!(killed["unmapped"]["label"], "ci-job-7");
        assert_eq!(killed["unmapped"]["interrupted_by"], "spawn_kill");
        assert_eq!(
            killed["unmapped"]["interrupted_by_peer"],
            json!({"uid": 1000, "gid": 1000, "pid": 99})
        );
        // The actor of the spawn's events stays the caller that started it.
        assert_eq!(killed["actor"]["process"]["pid"], 7);
        let expired = to_ocsf(&record(json!({"kind": "exit", "caller": {"uid": 1000, "gid": 1000, "pid": 7}, "exit_code": null, "signal": 9, "interrupted_by": "lease"})), "host").unwrap();
        assert_eq!(expired["unmapped"]["interrupted_by"], "lease");
        assert!(
            expired["unmapped"].get("interrupted_by_peer").is_none(),
            "{expired}"
        );
        assert!(expired["unmapped"].get("label").is_none(), "{expired}");
        let on_its_own = to_ocsf(&record(json!({"kind": "exit", "caller": {"uid": 0, "gid": 0, "pid": 7}, "exit_code": 0, "interrupted_by": null})), "host").unwrap();
        assert!(
            on_its_own["unmapped"].get("interrupted_by").is_none(),
            "{on_its_own}"
        );
        let attach = to_ocsf(&record(json!({"kind": "attach", "caller": {"uid": 1000, "gid": 1000, "pid": 99}, "label": "ci-job-7", "method": "spawn_attach", "state": "running"})), "host").unwrap();
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
        let closed = to_ocsf(&net(json!({"protocol": "tcp", "host": "api.example.com", "port": 443, "dialed": "93.184.215.14:443", "allowed": true, "connected": true, "reason": null, "sni": "api.example.com", "bytes_up": 10, "bytes_down": 20, "duration_ms": 7})), "host").unwrap();
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
        let refused = to_ocsf(&net(json!({"protocol": "tcp", "host": "10.0.0.5", "port": 22, "dialed": null, "allowed": false, "connected": false, "reason": "not_granted"})), "host").unwrap();
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
        let datagram = to_ocsf(&net(json!({"protocol": "udp", "host": "8.8.8.8", "port": 123, "dialed": null, "allowed": false, "connected": false, "reason": "not_granted"})), "host").unwrap();
        assert_eq!(
            (
                datagram["type_uid"].as_i64(),
                datagram["connection_info"]["protocol_name"].as_str(),
                datagram["connection_info"]["protocol_num"].as_i64()
            ),
            (Some(400105), Some("udp"), Some(17))
        );
        let failed = to_ocsf(&net(json!({"protocol": "tcp", "host": "api.example.com", "port": 443, "allowed": true, "connected": false, "reason": "connect_failed"})), "host").unwrap();
        assert_eq!(failed["type_uid"].as_i64(), Some(400104));
        let dns = to_ocsf(&net(json!({"protocol": "dns", "query": "leak.example.com", "type": "TXT", "allowed": false, "reason": "not_granted"})), "host").unwrap();
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
}
