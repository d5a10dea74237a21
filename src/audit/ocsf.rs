//! OCSF export: each record as an OCSF 1.5 Process Activity event (class
//! 1007) a SIEM can ingest. The mapping, field by field:
//!
//! | spawnd record | OCSF |
//! |---|---|
//! | `decision` | `activity_id` 1 Launch, `status_id` 1 Success, `disposition_id` 1 Allowed |
//! | `denial` | `activity_id` 1 Launch, `status_id` 2 Failure, `disposition_id` 2 Blocked, `status_detail` = reason |
//! | `exit` | `activity_id` 2 Terminate, `exit_code` |
//! | `ts` | `time` (epoch ms) |
//! | `audit_id`, `seq`, `hash` | `metadata.uid`, `metadata.sequence`, `metadata.correlation_uid` = audit_id |
//! | `caller.uid/gid/pid` | `actor.user.uid`, `actor.user.groups`, `actor.process.pid` |
//! | `program.resolved`, `program.sha256` | `process.file.path`, `process.file.hashes[{algorithm_id: 3 SHA-256}]` |
//! | `argv_shape` | `process.cmd_line` (placeholder names, never values) |
//! | `connector`, `op`, `reason`, everything else | `unmapped` |

use serde_json::{json, Map, Value};

fn epoch_ms(ts: &str) -> Option<i64> {
    let t = time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).ok()?;
    Some((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

/// One record as an OCSF Process Activity event (`None` for `note` records).
pub fn to_ocsf(record: &Map<String, Value>, hostname: &str) -> Option<Value> {
    let kind = record.get("kind")?.as_str()?;
    let (activity_id, activity) = match kind {
        "decision" | "denial" => (1, "Launch"),
        "exit" => (2, "Terminate"),
        _ => return None,
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
    let mut event = json!({
        "class_uid": 1007, "class_name": "Process Activity",
        "category_uid": 1, "category_name": "System Activity",
        "activity_id": activity_id, "activity_name": activity,
        "type_uid": 1007 * 100 + activity_id, "type_name": format!("Process Activity: {activity}"),
        "severity_id": if denied { 3 } else { 1 }, "severity": if denied { "Medium" } else { "Informational" },
        "status_id": if denied { 2 } else { 1 }, "status": if denied { "Failure" } else { "Success" },
        "time": record.get("ts").and_then(Value::as_str).and_then(epoch_ms),
        "metadata": {
            "version": "1.5.0",
            "product": {"name": "spawnd", "vendor_name": "spawnd", "version": env!("CARGO_PKG_VERSION")},
            "uid": format!("{}:{}", record.get("audit_id").and_then(Value::as_str).unwrap_or(""), record.get("seq").and_then(Value::as_u64).unwrap_or(0)),
            "correlation_uid": record.get("audit_id"),
            "sequence": record.get("seq"),
        },
        "actor": {"user": {"uid": caller.get("uid").map(|u| u.to_string()), "groups": caller.get("gid").map(|g| json!([{"uid": g.to_string()}]))}, "process": {"pid": caller.get("pid")}},
        "device": {"hostname": hostname, "type_id": 0, "type": "Unknown"},
        "process": {"cmd_line": record.get("argv_shape"), "file": file, "name": path.and_then(|p| std::path::Path::new(p).file_name()).map(|n| n.to_string_lossy().into_owned())},
        "unmapped": {"connector": record.get("connector"), "op": record.get("op"), "hash": record.get("hash")},
    });
    if denied {
        event["disposition_id"] = json!(2);
        event["disposition"] = json!("Blocked");
        event["status_detail"] = record.get("reason").cloned().unwrap_or(Value::Null);
    } else if kind == "decision" {
        event["disposition_id"] = json!(1);
        event["disposition"] = json!("Allowed");
    } else {
        event["exit_code"] = record.get("exit_code").cloned().unwrap_or(Value::Null);
    }
    Some(event)
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
}
