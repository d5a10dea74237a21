//! The daemon's own records (`lifecycle` and `heartbeat`): what a security
//! team needs to tell a quiet daemon from a dead one and a changed policy
//! from an unchanged one.
//!
//! - `start`: the daemon's pid and version, its config file, every manifest
//!   it serves (connector, path, SHA-256), and the spawns an earlier daemon
//!   decided but never recorded an exit for (it was killed, or the host
//!   lost power) — found by reading the chain back to that daemon's own
//!   `start`, at most [`SCAN_FILES`] files, and saying how far it read.
//! - `reload`: a SIGHUP taken (what was added, removed and changed, with
//!   both hashes of a changed manifest) or refused (and why).
//! - `stop`: a clean stop, after every spawn's exit record, and why.
//! - `heartbeat`: every `[audit] heartbeat_secs` while it runs, so a log
//!   that ends long before now without a `stop` was cut, or its daemon
//!   died.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Map, Value};

use super::chain::{chain_files, records_of, Record};

/// A manifest as the lifecycle records name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Served {
    /// The connector's FQN.
    pub connector: String,
    /// The manifest file.
    pub path: String,
    /// Its SHA-256 (`sha256:` and 64 hex).
    pub sha256: String,
    /// The connector's version.
    pub version: String,
    /// For an installed connector, its content hash and signer.
    pub provenance: Option<crate::plan::Provenance>,
}

impl Served {
    fn json(&self) -> Value {
        let mut out = json!({"connector": self.connector, "version": self.version, "path": self.path, "sha256": self.sha256});
        if let Some(p) = &self.provenance {
            out["connector_hash"] = json!(p.hash.to_string());
            out["signature"] = json!(p.signature);
            out["signer"] = json!(p.signer);
        }
        out
    }
}

/// The most files of the chain, newest first, read back for spawns left
/// without an exit: the live file and two rotated ones.
pub(crate) const SCAN_FILES: usize = 3;

/// The most unfinished spawns a `start` record lists (the rest counted).
pub(crate) const MAX_LISTED: usize = 64;

/// The spawns a daemon decided and never recorded an exit for, since the
/// last daemon `start` in the chain: `(listed, more, scanned_from_seq,
/// previous start)`.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Unfinished {
    /// Decisions without an exit, oldest first (at most [`MAX_LISTED`]).
    pub spawns: Vec<Value>,
    /// How many more there were.
    pub more: usize,
    /// The first `seq` read (the scan stops at a daemon `start` or after
    /// [`SCAN_FILES`] files).
    pub scanned_from_seq: Option<u64>,
    /// The previous daemon's `start`: its seq, pid, and whether a `stop`
    /// of it followed.
    pub previous: Option<Value>,
}

/// Reads the chain of `log` back to the last daemon `start` and lists the
/// daemon's spawns left without an exit record since then.
pub(crate) fn unfinished(log: &Path) -> std::io::Result<Unfinished> {
    let files = chain_files(log);
    let mut tail: Vec<Record> = Vec::new();
    let mut found_start = false;
    for file in files.iter().rev().take(SCAN_FILES) {
        let mut records = records_of(file)?;
        if let Some(at) = records.iter().rposition(is_daemon_start) {
            records.drain(..at);
            found_start = true;
        }
        records.append(&mut tail);
        tail = records;
        if found_start {
            break;
        }
    }
    let mut out = Unfinished {
        scanned_from_seq: tail
            .first()
            .and_then(|r| r.get("seq"))
            .and_then(Value::as_u64),
        ..Unfinished::default()
    };
    if found_start {
        let start = &tail[0];
        let stopped = tail.iter().any(|r| is_event(r, "stop"));
        out.previous = Some(json!({
            "seq": start.get("seq"),
            "pid": start.get("pid"),
            "stopped": stopped,
        }));
    }
    let mut open: BTreeMap<String, &Record> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for r in &tail {
        let id = r.get("audit_id").and_then(Value::as_str).unwrap_or("");
        match r.get("kind").and_then(Value::as_str) {
            Some("decision") if by_daemon(r) => {
                open.insert(id.to_string(), r);
                order.push(id.to_string());
            }
            Some("exit") => {
                open.remove(id);
            }
            _ => {}
        }
    }
    for id in order.iter().filter(|id| open.contains_key(*id)) {
        if out.spawns.len() == MAX_LISTED {
            out.more += 1;
            continue;
        }
        let r = open[id];
        out.spawns.push(json!({
            "audit_id": id,
            "seq": r.get("seq"),
            "ts": r.get("ts"),
            "connector": r.get("connector"),
            "op": r.get("op"),
            "caller": r.get("caller"),
        }));
    }
    Ok(out)
}

fn is_event(r: &Record, event: &str) -> bool {
    r.get("kind").and_then(Value::as_str) == Some("lifecycle")
        && r.get("event").and_then(Value::as_str) == Some(event)
}

fn is_daemon_start(r: &Record) -> bool {
    is_event(r, "start")
}

fn by_daemon(r: &Record) -> bool {
    r.get("caller")
        .and_then(|c| c.get("via"))
        .and_then(Value::as_str)
        == Some("daemon")
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A daemon's `start`.
pub(crate) fn start(
    config_path: Option<&Path>,
    served: &[Served],
    heartbeat_secs: u64,
    unfinished: &Unfinished,
) -> Map<String, Value> {
    object(json!({
        "event": "start",
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "config_path": config_path.map(|p| p.display().to_string()),
        "manifests": served.iter().map(Served::json).collect::<Vec<_>>(),
        "heartbeat_secs": heartbeat_secs,
        "unfinished": unfinished.spawns,
        "unfinished_more": unfinished.more,
        "scanned_from_seq": unfinished.scanned_from_seq,
        "previous_start": unfinished.previous,
    }))
}

/// A reload taken: what changed between `old` and `new`. A connector
/// served before and now is the same one when its version or its manifest
/// file is (a file edited to another version has changed; an installed
/// version beside others, each in its own entry, is added or removed).
pub(crate) fn reload(old: &[Served], new: &[Served]) -> Map<String, Value> {
    let find = |list: &[Served], s: &Served| {
        list.iter()
            .find(|o| o.connector == s.connector && (o.version == s.version || o.path == s.path))
            .cloned()
    };
    let added: Vec<Value> = new
        .iter()
        .filter(|s| find(old, s).is_none())
        .map(Served::json)
        .collect();
    let removed: Vec<Value> = old
        .iter()
        .filter(|s| find(new, s).is_none())
        .map(Served::json)
        .collect();
    let changed: Vec<Value> = new
        .iter()
        .filter_map(|s| {
            let was = find(old, s)?;
            (was != *s).then(|| {
                let mut v = s.json();
                v["previous_path"] = json!(was.path);
                v["previous_sha256"] = json!(was.sha256);
                v["previous_version"] = json!(was.version);
                v
            })
        })
        .collect();
    object(json!({
        "event": "reload",
        "outcome": "taken",
        "pid": std::process::id(),
        "added": added,
        "removed": removed,
        "changed": changed,
        "manifests": new.len(),
    }))
}

/// A reload refused: the previous config and manifests stay in force.
pub(crate) fn reload_refused(error: &str) -> Map<String, Value> {
    object(json!({
        "event": "reload",
        "outcome": "refused",
        "pid": std::process::id(),
        "error": error,
    }))
}

/// A clean stop, once every spawn's exit record is written.
pub(crate) fn stop(signal: &str) -> Map<String, Value> {
    object(json!({
        "event": "stop",
        "pid": std::process::id(),
        "signal": signal,
    }))
}

/// A heartbeat: the daemon alive, `interval_secs` until the next one.
pub(crate) fn heartbeat(interval_secs: u64, running: u64) -> Map<String, Value> {
    object(json!({
        "pid": std::process::id(),
        "interval_s": interval_secs,
        "running": running,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditLog, Kind};

    fn served(name: &str, sha: &str) -> Served {
        Served {
            connector: name.into(),
            path: format!("/etc/spawnd/manifests/{name}.toml"),
            sha256: sha.into(),
            version: "1.0.0".into(),
            provenance: None,
        }
    }

    fn decision(log: &AuditLog, via: &str) -> String {
        let body = object(
            json!({"connector": "local://t/x", "op": "sh", "caller": {"uid": 0, "via": via}}),
        );
        log.append(Kind::Decision, None, body).unwrap().audit_id
    }

    #[test]
    fn a_start_lists_the_daemons_spawns_left_without_an_exit_since_the_last_start() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::open(&dir.path().join("audit.jsonl")).unwrap();
        // Before any daemon start: a daemon decision (an older daemon) is
        // listed only if the scan reaches it.
        let first = start(None, &[], 300, &Unfinished::default());
        log.append(Kind::Lifecycle, None, first).unwrap();
        let ended = decision(&log, "daemon");
        log.append(Kind::Exit, Some(&ended), Map::new()).unwrap();
        let left = decision(&log, "daemon");
        let _cli_running = decision(&log, "cli");
        let found = unfinished(log.path()).unwrap();
        assert_eq!(found.spawns.len(), 1, "{found:?}");
        assert_eq!(found.spawns[0]["audit_id"], left.as_str());
        assert_eq!(found.scanned_from_seq, Some(1));
        assert_eq!(found.previous.as_ref().unwrap()["stopped"], false);
        // A new start: what the last one listed is not listed again.
        log.append(Kind::Lifecycle, None, start(None, &[], 300, &found))
            .unwrap();
        log.append(Kind::Lifecycle, None, stop("SIGTERM")).unwrap();
        let again = unfinished(log.path()).unwrap();
        assert!(again.spawns.is_empty(), "{again:?}");
        assert_eq!(again.previous.unwrap()["stopped"], true);
    }

    #[test]
    fn a_reload_names_what_was_added_removed_and_changed_with_both_hashes() {
        let old = [served("a", "sha256:1"), served("b", "sha256:2")];
        let new = [served("b", "sha256:3"), served("c", "sha256:4")];
        let body = reload(&old, &new);
        assert_eq!(body["added"][0]["connector"], "c");
        assert_eq!(body["removed"][0]["connector"], "a");
        assert_eq!(body["changed"][0]["sha256"], "sha256:3");
        assert_eq!(body["changed"][0]["previous_sha256"], "sha256:2");
        assert_eq!(reload(&new, &new)["changed"], json!([]));
    }
}
