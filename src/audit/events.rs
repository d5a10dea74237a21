//! The bodies of the records spawnd writes: what a security team needs to
//! answer "what ran, for whom, with what program bytes, what did it output,
//! and what was refused" — and nothing a caller supplied as a value: argv
//! shapes with placeholder names, env key names, hashes.

use serde_json::{json, Map, Value};

use crate::plan::SpawnPlan;
use crate::policy::{Caller, Denial};

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn caller_json(c: &Caller) -> Value {
    let mut v = json!({"uid": c.uid, "gid": c.gid, "pid": c.pid});
    if let Some(label) = &c.label {
        v["label"] = json!(label);
    }
    v
}

/// An allowed spawn, written before the child starts.
pub fn decision(plan: &SpawnPlan, caller: &Caller, isolation: &Value) -> Map<String, Value> {
    let mut body = object(json!({
        "decision": "allowed",
        "connector": plan.connector,
        "connector_version": plan.version,
        "manifest_sha256": plan.manifest_sha256.to_string(),
        "caller": caller_json(caller),
        "op": plan.op,
        "program": {"declared": plan.program.declared, "resolved": plan.program.resolved, "sha256": plan.program.sha256.to_string(), "pinned": plan.program.pinned},
        "argv_shape": plan.argv_shape,
        "env_keys": plan.env.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        "credential_keys": plan.env.iter().filter(|e| e.source == crate::plan::EnvSource::Credential).map(|e| e.key.as_str()).collect::<Vec<_>>(),
        "cwd": plan.cwd,
        "fs": {"read": plan.fs.read, "write": plan.fs.write, "exec": plan.fs.exec},
        "workspace": caller.workspace,
        "isolation": isolation,
    }));
    // Only `spawnd learn` sets it: the record says the network was learned.
    if let Some(learning) = plan.network_learning {
        body.insert("network_learning".into(), json!(learning.as_str()));
    }
    body
}

/// A refused request (the denial object holds no submitted values).
pub fn denial(d: &Denial, caller: &Caller, op: Option<&str>) -> Map<String, Value> {
    object(json!({
        "decision": "denied",
        "connector": d.connector,
        "caller": caller_json(caller),
        "op": op,
        "class": d.class,
        "boundary_detail": d.boundary_detail,
        "reason": d.reason,
        "requested": d.requested,
        "granted": d.granted,
    }))
}

/// One network event of a spawn (`event`: a connection, or a DNS name
/// refused, as [`crate::exec`] describes them), under its connector and
/// op; the record's `audit_id` is the spawn's.
pub fn net(connector: &str, op: &str, event: Value) -> Map<String, Value> {
    let mut body = object(event);
    body.insert("connector".into(), json!(connector));
    body.insert("op".into(), json!(op));
    body
}

/// How an allowed spawn ended; `result` is the run's result object.
pub fn exit(result: &Value) -> Map<String, Value> {
    let stream = |s: &Value| json!({"bytes": s["bytes"], "total_bytes": s["total_bytes"], "truncated": s["truncated"], "sha256": s["sha256"]});
    let mut body = object(json!({
        "connector": result["connector"],
        "op": result["op"],
        "exit_code": result["exit_code"],
        "signal": result["signal"],
        "timed_out": result["timed_out"],
        "interrupted_by": result["interrupted_by"],
        "duration_ms": result["duration_ms"],
        "cpu_ms": result["cpu_ms"],
        "peak_memory_bytes": result["peak_memory_bytes"],
        "oom_killed": result["oom_killed"],
        "stdout": stream(&result["stdout"]),
        "stderr": stream(&result["stderr"]),
        "isolation_applied": result["isolation"],
    }));
    // A spawn with network grants: its totals and refusal counts (each
    // connection has a `net` record of its own).
    if let Some(network) = result.get("network").and_then(Value::as_object) {
        let mut summary = network.clone();
        summary.remove("listed");
        summary.remove("dns_refused");
        body.insert("network".into(), Value::Object(summary));
    }
    body
}
