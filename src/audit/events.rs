//! The bodies of the records spawnd writes: what a security team needs to
//! answer "what ran, for whom, with what program bytes, what did it output,
//! and what was refused" — and nothing a caller supplied as a value: argv
//! shapes with placeholder names, env key names, hashes.

use serde_json::{json, Map, Value};

use crate::origin::Origin;
use crate::plan::SpawnPlan;
use crate::policy::{Caller, Denial};
use crate::spawn_result::{SpawnResult, StreamOutput};

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The caller as every record of its spawn names it: `{uid, gid, pid,
/// label?, via, exe?, exe_sha256?, cgroup?, start_time?, login_uid?,
/// parent?}` ([`crate::origin`]).
pub(crate) fn caller_json(c: &Caller) -> Value {
    let mut v = peer_json(c.uid, c.gid, c.pid, &c.origin);
    if let Some(label) = &c.label {
        v["label"] = json!(label);
    }
    v
}

/// A peer as a record's `caller`: its credentials and where it came from.
pub(crate) fn peer_json(uid: u32, gid: u32, pid: Option<u32>, origin: &Origin) -> Value {
    let mut m = origin.json_fields();
    m.insert("uid".into(), json!(uid));
    m.insert("gid".into(), json!(gid));
    m.insert("pid".into(), json!(pid));
    Value::Object(m)
}

/// A daemon peer that acted on a spawn it may not have started (took it
/// up, killed or released it, or closed the connection holding it), as
/// `SO_PEERCRED` gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Actor {
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
    /// Its pid, when the kernel told.
    pub pid: Option<u32>,
}

impl Actor {
    /// `{uid, gid, pid}`, as a record's `caller` (without a label: the
    /// label is the spawn's, given by whoever started it).
    pub fn json(&self) -> Value {
        json!({"uid": self.uid, "gid": self.gid, "pid": self.pid})
    }
}

/// What a detached spawn's records are filed under: the connector and
/// operation its decision record names, and its caller's label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnFiled {
    /// The spawn's `audit_id` (its decision's).
    pub audit_id: String,
    /// The connector's FQN.
    pub connector: String,
    /// The operation.
    pub op: String,
    /// The label the spawn's caller gave it.
    pub label: Option<String>,
}

/// A detached spawn taken up again by `spawn_attach`: who took it up
/// (`caller`, as [`peer_json`] gives it), the spawn's connector, op and label, and its state then
/// (`running`, or how it ended while no connection held it). The record's
/// `audit_id` is the spawn's.
pub(crate) fn attach(spawn: &SpawnFiled, by: Value, state: &Value) -> Map<String, Value> {
    let mut body = object(json!({
        "connector": spawn.connector,
        "op": spawn.op,
        "caller": by,
        "method": "spawn_attach",
        "state": state,
    }));
    if let Some(label) = &spawn.label {
        body.insert("label".into(), json!(label));
    }
    body
}

/// An allowed spawn, written before the child starts.
pub(crate) fn decision(plan: &SpawnPlan, caller: &Caller, isolation: Value) -> Map<String, Value> {
    let mut body = object(json!({
        "decision": "allowed",
        "connector": plan.connector,
        "connector_version": plan.version,
        "manifest_sha256": plan.manifest_sha256.to_string(),
        "manifest_path": plan.manifest_path,
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
        // What the program may reach, after the action subset narrowed the
        // op's grants. Not `network`: an exit's `network` is an object.
        "network_granted": plan.network,
    }));
    insert_provenance(&mut body, plan.provenance.as_ref());
    // The action subset the request carried, as the gate repeats it.
    if let Some(action) = &plan.action {
        body.insert("action".into(), json!(action));
    }
    // Only `spawnd learn` sets it: the record says the network was learned.
    if let Some(learning) = plan.network_learning {
        body.insert("network_learning".into(), json!(learning.as_str()));
    }
    body
}

/// A refused request (the denial object holds no submitted values).
pub(crate) fn denial(d: &Denial, caller: &Caller, op: Option<&str>) -> Map<String, Value> {
    let mut body = object(json!({
        "decision": "denied",
        "connector": d.connector,
        "connector_version": d.connector_version,
        "caller": caller_json(caller),
        "op": op,
        "class": d.class,
        "boundary_detail": d.boundary_detail,
        "reason": d.reason,
        "requested": d.requested,
        "granted": d.granted,
    }));
    insert_provenance(&mut body, d.provenance.as_ref());
    body
}

/// The connector's `(hash, signer)` beside its name and version: the
/// content hash, signature status and signing key of an installed
/// connector, all null for one served from a manifest file.
fn insert_provenance(body: &mut Map<String, Value>, provenance: Option<&crate::plan::Provenance>) {
    body.insert(
        "connector_hash".into(),
        json!(provenance.map(|p| p.hash.to_string())),
    );
    body.insert(
        "connector_signature".into(),
        json!(provenance.map(|p| p.signature)),
    );
    body.insert(
        "connector_signer".into(),
        json!(provenance.and_then(|p| p.signer.clone())),
    );
}

/// One network event of a spawn (`event`: a connection, or a DNS name
/// refused, as [`crate::pipeline`] describes them), under its connector and
/// op; the record's `audit_id` is the spawn's.
pub(crate) fn net(connector: &str, op: &str, event: Value) -> Map<String, Value> {
    let mut body = object(event);
    body.insert("connector".into(), json!(connector));
    body.insert("op".into(), json!(op));
    body
}

/// How an allowed spawn ended; `result` is the run's result. The caller,
/// and who interrupted the program when a peer did, are added by
/// [`ended_by`].
pub(crate) fn exit(result: &SpawnResult) -> Map<String, Value> {
    let stream = |s: &StreamOutput| json!({"bytes": s.bytes, "total_bytes": s.total_bytes, "truncated": s.truncated, "sha256": s.sha256, "redactions": s.redactions});
    let mut body = object(json!({
        "connector": result.connector,
        "op": result.op,
        "exit_code": result.exit_code,
        "signal": result.signal,
        "timed_out": result.timed_out,
        "interrupted_by": result.interrupted_by,
        "duration_ms": result.duration_ms,
        "cpu_ms": result.cpu_ms,
        "peak_memory_bytes": result.peak_memory_bytes,
        "oom_killed": result.oom_killed,
        "sandbox_pid": result.sandbox_pid,
        "stdout": stream(&result.stdout),
        "stderr": stream(&result.stderr),
        "isolation_applied": result.isolation,
    }));
    // A spawn with network grants: its totals and refusal counts (each
    // connection has a `net` record of its own).
    if let Some(network) = &result.network {
        body.insert("network".into(), network.summary());
    }
    body
}

/// What an exit record says of who: the spawn's `caller` (with its
/// label), and when a daemon peer ended the program from outside
/// (`spawn_kill`, `spawn_release`, closing its connection), that peer as
/// `interrupted_by_peer`; `interrupted_by` itself names how.
pub(crate) fn ended_by(body: &mut Map<String, Value>, caller: &Caller, peer: Option<&Actor>) {
    body.insert("caller".into(), caller_json(caller));
    if let Some(peer) = peer {
        body.insert("interrupted_by_peer".into(), peer.json());
    }
}
