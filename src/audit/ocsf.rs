//! OCSF export: each record as an OCSF 1.5.0 event a SIEM can ingest, valid
//! against the schema itself (`scripts/validate-ocsf`, with the schema's
//! files in `integration/ocsf-1.5.0`). A spawn's `decision`, `denial`,
//! `attach` and `exit` are Process Activity (1007); its `net` records
//! Network Activity (4001), or DNS Activity (4003) for a name refused; a
//! `note` about the log is Event Log Activity (1008); the daemon's
//! `lifecycle` and `heartbeat` records are Application Lifecycle (6002); a
//! kind this version does not know is a Base Event (0) carrying the record
//! in `unmapped`. docs/audit.md ("OCSF mapping") has the tables.
//!
//! Nothing of a record is dropped: what an OCSF attribute holds is mapped
//! there, and every other field (and the rest of a field mapped in part,
//! such as `caller` or `program`) is copied into `unmapped` under its own
//! name. An event's `process` is the spawned program: `uid` is the spawn's
//! `audit_id`, and what its decision named (file, argv shape, run-as user)
//! is remembered by audit id, so the spawn's later events carry it too, as
//! its `net` events carry its caller as `actor`. The host is the record's
//! own `host` when it has one; a record without it gets the exporting
//! machine's name, and `unmapped.device_from_exporter: true` says so.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Map, Value};

/// The OCSF release the events follow (`metadata.version`).
pub(crate) const OCSF_VERSION: &str = "1.5.0";

/// How many open spawns' decisions an export keeps for their later
/// records: past it, the oldest is forgotten (a spawn whose exit never
/// came, as when its writer was killed).
const SPAWNS_REMEMBERED: usize = 65_536;

/// An event class: its uid and name, and its category's.
#[derive(Clone, Copy)]
struct Class {
    uid: i64,
    name: &'static str,
    category_uid: i64,
    category: &'static str,
}

const BASE_EVENT: Class = Class {
    uid: 0,
    name: "Base Event",
    category_uid: 0,
    category: "Uncategorized",
};
const PROCESS_ACTIVITY: Class = Class {
    uid: 1007,
    name: "Process Activity",
    category_uid: 1,
    category: "System Activity",
};
const EVENT_LOG_ACTIVITY: Class = Class {
    uid: 1008,
    name: "Event Log Activity",
    category_uid: 1,
    category: "System Activity",
};
const NETWORK_ACTIVITY: Class = Class {
    uid: 4001,
    name: "Network Activity",
    category_uid: 4,
    category: "Network Activity",
};
const DNS_ACTIVITY: Class = Class {
    uid: 4003,
    name: "DNS Activity",
    category_uid: 4,
    category: "Network Activity",
};
const APPLICATION_LIFECYCLE: Class = Class {
    uid: 6002,
    name: "Application Lifecycle",
    category_uid: 6,
    category: "Application Activity",
};

/// An activity of a class: its `activity_id` and caption (for 99, Other,
/// the source's own word).
type Activity = (i64, &'static str);

/// `severity_id` and its caption.
#[derive(Clone, Copy)]
enum Severity {
    Informational = 1,
    Low = 2,
    Medium = 3,
}

impl Severity {
    fn caption(self) -> &'static str {
        match self {
            Severity::Informational => "Informational",
            Severity::Low => "Low",
            Severity::Medium => "Medium",
        }
    }
}

/// The attributes each profile adds to the classes spawnd exports: an event
/// that has one declares the profile in `metadata.profiles`.
const PROFILE_ATTRIBUTES: &[(&str, &[&str])] = &[
    ("host", &["actor", "device"]),
    (
        "security_control",
        &["action", "action_id", "disposition", "disposition_id"],
    ),
];

/// Record fields every class maps: `v` (`metadata.log_version`), `kind`
/// (the class and activity), `seq`, `ts`, `audit_id` (`metadata`, `time`)
/// and `machine` (`device`). `prev` and `hash` go to `unmapped`.
const ENVELOPE: &[&str] = &["v", "kind", "seq", "ts", "audit_id", "machine"];

/// What a spawn's decision said of its process and caller, for the spawn's
/// later records.
#[derive(Clone)]
struct Spawn {
    process: Map<String, Value>,
    actor: Option<Value>,
}

/// Turns records into OCSF events, in chain order; it remembers each
/// spawn's decision until its exit.
pub(crate) struct Exporter {
    exporter_host: String,
    /// Open spawns by audit id: when each was remembered, and its decision.
    spawns: HashMap<String, (u64, Spawn)>,
    /// The open spawns' audit ids, oldest first.
    by_age: BTreeMap<u64, String>,
    remembered: u64,
    capacity: usize,
}

/// One record as an event, alone (no earlier decision to draw on).
#[cfg(test)]
pub(crate) fn to_ocsf(record: &Map<String, Value>, exporter_host: &str) -> Value {
    Exporter::new(exporter_host).event(record)
}

impl Exporter {
    /// An exporter on the machine named `exporter_host` (the `device` of a
    /// record that does not name its host).
    pub(crate) fn new(exporter_host: &str) -> Exporter {
        Exporter::remembering(exporter_host, SPAWNS_REMEMBERED)
    }

    /// An exporter that keeps at most `capacity` open spawns.
    fn remembering(exporter_host: &str, capacity: usize) -> Exporter {
        Exporter {
            exporter_host: exporter_host.to_string(),
            spawns: HashMap::new(),
            by_age: BTreeMap::new(),
            remembered: 0,
            capacity,
        }
    }

    /// The OCSF event of one record. Feed every record of the chain, in
    /// order, including those a filter leaves out of the output: a spawn's
    /// decision fills the `process` and `actor` of its later events.
    pub(crate) fn event(&mut self, record: &Map<String, Value>) -> Value {
        let r = Record(record);
        let spawn = r
            .str("audit_id")
            .and_then(|id| self.spawns.get(id))
            .map(|(_, s)| s.clone());
        let mut out = Out::new();
        match r.str("kind").unwrap_or("") {
            "decision" => {
                let spawn = decision(&r, &mut out);
                self.remember(&r, spawn);
            }
            "denial" => denial(&r, &mut out),
            "exit" => {
                exit(&r, spawn.as_ref(), &mut out);
                self.forget(&r);
            }
            "attach" => attach(&r, spawn.as_ref(), &mut out),
            "net" if r.str("protocol") == Some("dns") => dns(&r, spawn.as_ref(), &mut out),
            "net" => network(&r, spawn.as_ref(), &mut out),
            "note" => note(&r, &mut out),
            "lifecycle" => lifecycle(&r, &mut out),
            "heartbeat" => heartbeat(&r, &mut out),
            _ => unknown(&r, &mut out),
        }
        out.finish(&r, &self.exporter_host)
    }

    /// Keeps a spawn's decision for its later records; past `capacity`
    /// open spawns, the oldest is forgotten (a spawn whose exit never
    /// came, as when its writer was killed).
    fn remember(&mut self, r: &Record, spawn: Spawn) {
        let Some(id) = r.str("audit_id") else { return };
        self.forget(r);
        self.remembered += 1;
        self.by_age.insert(self.remembered, id.to_string());
        self.spawns.insert(id.to_string(), (self.remembered, spawn));
        while self.spawns.len() > self.capacity {
            let Some((_, oldest)) = self.by_age.pop_first() else {
                break;
            };
            self.spawns.remove(&oldest);
        }
    }

    /// A spawn ended: its decision is no longer needed.
    fn forget(&mut self, r: &Record) {
        if let Some((age, _)) = r.str("audit_id").and_then(|id| self.spawns.remove(id)) {
            self.by_age.remove(&age);
        }
    }
}

/// Read access to a record's fields.
struct Record<'a>(&'a Map<String, Value>);

impl Record<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }
    fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }
    fn object(&self, key: &str) -> Option<&Map<String, Value>> {
        self.get(key).and_then(Value::as_object)
    }
    fn flag(&self, key: &str) -> bool {
        self.get(key).and_then(Value::as_bool).unwrap_or(false)
    }
}

/// An event being built: its attributes, and which record fields they
/// hold (the others go to `unmapped`).
struct Out {
    event: Map<String, Value>,
    unmapped: Map<String, Value>,
    mapped: Vec<&'static str>,
}

impl Out {
    fn new() -> Out {
        Out {
            event: Map::new(),
            unmapped: Map::new(),
            mapped: ENVELOPE.to_vec(),
        }
    }

    fn set(&mut self, key: &str, value: Value) {
        if !value.is_null() {
            self.event.insert(key.to_string(), value);
        }
    }

    /// The record fields `keys` are held by the event's attributes.
    fn maps(&mut self, keys: &[&'static str]) {
        self.mapped.extend_from_slice(keys);
    }

    /// The field `key` is mapped in part: what is `left` of it goes to
    /// `unmapped.key`.
    fn partly(&mut self, key: &'static str, left: Map<String, Value>) {
        self.mapped.push(key);
        if !left.is_empty() {
            self.unmapped.insert(key.to_string(), Value::Object(left));
        }
    }

    fn class(&mut self, class: Class, activity: Activity, severity: Severity) {
        self.set("class_uid", json!(class.uid));
        self.set("class_name", json!(class.name));
        self.set("category_uid", json!(class.category_uid));
        self.set("category_name", json!(class.category));
        self.set("activity_id", json!(activity.0));
        self.set("activity_name", json!(activity.1));
        self.set("type_uid", json!(class.uid * 100 + activity.0));
        // `type_name` is the caption of `type_uid`, which for 99 is
        // "Other"; `activity_name` is then the source's own word.
        let caption = if activity.0 == 99 {
            "Other"
        } else {
            activity.1
        };
        self.set("type_name", json!(format!("{}: {caption}", class.name)));
        self.set("severity_id", json!(severity as i64));
        self.set("severity", json!(severity.caption()));
    }

    /// `status_id` 1 Success, or 2 Failure with `detail`.
    fn status(&mut self, failed: bool, detail: Option<String>) {
        self.set("status_id", json!(if failed { 2 } else { 1 }));
        self.set("status", json!(if failed { "Failure" } else { "Success" }));
        if let Some(detail) = detail {
            self.set("status_detail", json!(detail));
        }
    }

    /// `disposition` and `action`: Allowed, or Blocked and Denied.
    fn blocked(&mut self, blocked: bool) {
        self.set("disposition_id", json!(if blocked { 2 } else { 1 }));
        self.set(
            "disposition",
            json!(if blocked { "Blocked" } else { "Allowed" }),
        );
        self.set("action_id", json!(if blocked { 2 } else { 1 }));
        self.set("action", json!(if blocked { "Denied" } else { "Allowed" }));
    }

    /// The caller as `actor`; its `label` goes to `unmapped.label`, the
    /// rest of it to `unmapped.caller`.
    fn caller(&mut self, r: &Record) {
        let Some(caller) = r.object("caller") else {
            return;
        };
        let (actor, mut left) = actor_of(caller);
        if let Some(label) = left.remove("label") {
            self.unmapped.insert("label".into(), label);
        }
        self.set("actor", actor);
        self.partly("caller", left);
    }

    /// The event: the envelope, the device, `metadata.profiles` for the
    /// profiles its attributes use, and `unmapped` with every record field
    /// not mapped.
    fn finish(mut self, r: &Record, exporter_host: &str) -> Value {
        let mut metadata = json!({
            "version": OCSF_VERSION,
            "product": {"name": "spawnd", "vendor_name": "spawnd", "version": env!("CARGO_PKG_VERSION")},
            "log_provider": "spawnd",
            "log_name": "audit",
            "uid": format!("{}:{}", r.str("audit_id").unwrap_or(""), r.get("seq").and_then(Value::as_u64).unwrap_or(0)),
        });
        if let Some(id) = r.str("audit_id") {
            metadata["correlation_uid"] = json!(id);
        }
        if let Some(seq) = r.get("seq").filter(|s| s.is_u64()) {
            metadata["sequence"] = seq.clone();
        }
        if let Some(v) = r.get("v").filter(|v| v.is_number() || v.is_string()) {
            let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            metadata["log_version"] = json!(text);
        }
        if let Some(ms) = r.str("ts").and_then(epoch_ms) {
            self.set("time", json!(ms));
        }
        let (device, machine_left, from_exporter) = device(r, exporter_host);
        self.set("device", device);
        if let Some(left) = machine_left {
            self.unmapped.insert("machine".into(), Value::Object(left));
        }
        if from_exporter {
            self.unmapped
                .insert("device_from_exporter".into(), json!(true));
        }
        for (key, value) in r.0 {
            if !value.is_null() && !self.mapped.contains(&key.as_str()) {
                self.unmapped.entry(key.clone()).or_insert(value.clone());
            }
        }
        let profiles: Vec<&str> = PROFILE_ATTRIBUTES
            .iter()
            .filter(|(_, attrs)| attrs.iter().any(|a| self.event.contains_key(*a)))
            .map(|(profile, _)| *profile)
            .collect();
        if !profiles.is_empty() {
            metadata["profiles"] = json!(profiles);
        }
        self.event.insert("metadata".into(), metadata);
        if !self.unmapped.is_empty() {
            self.event
                .insert("unmapped".into(), Value::Object(self.unmapped));
        }
        Value::Object(self.event)
    }
}

fn epoch_ms(ts: &str) -> Option<i64> {
    let t = time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// `fields` without `keys`.
fn without(fields: &Map<String, Value>, keys: &[&str]) -> Map<String, Value> {
    fields
        .iter()
        .filter(|(k, v)| !keys.contains(&k.as_str()) && !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A `sha256:HEX` (or bare hex) digest as an OCSF fingerprint list.
fn sha256_hashes(digest: &str) -> Option<Value> {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    (!hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| json!([{"algorithm_id": 3, "algorithm": "SHA-256", "value": hex}]))
}

/// A regular file at `path`, with its digest when given.
fn file(path: &str, digest: Option<&str>) -> Value {
    let name = std::path::Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string());
    let mut f = json!({"path": path, "name": name, "type_id": 1, "type": "Regular File"});
    if let Some(hashes) = digest.and_then(sha256_hashes) {
        f["hashes"] = hashes;
    }
    f
}

/// A user by uid and primary gid (OCSF uids are strings).
fn user(uid: &Value, gid: Option<&Value>) -> Value {
    let mut u = json!({"uid": id_text(uid)});
    if let Some(gid) = gid.filter(|g| !g.is_null()) {
        u["groups"] = json!([{"uid": id_text(gid)}]);
    }
    u
}

fn id_text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// A caller or daemon peer (`{uid, gid, pid, exe?, exe_sha256?,
/// start_time?, …}`) as an OCSF actor: `user` by uid and gid, `process`
/// by pid with its executable and start time. Returns the actor and the
/// fields it does not hold.
fn actor_of(caller: &Map<String, Value>) -> (Value, Map<String, Value>) {
    let field = |k: &str| caller.get(k).filter(|v| !v.is_null());
    let mut actor = Map::new();
    let mut held = vec!["gid"];
    if let Some(uid) = field("uid") {
        actor.insert("user".into(), user(uid, field("gid")));
        held.push("uid");
    }
    if let Some(pid) = field("pid").filter(|p| p.is_u64()) {
        let mut process = json!({"pid": pid});
        held.push("pid");
        if let Some(exe) = field("exe").and_then(Value::as_str) {
            let digest = field("exe_sha256").and_then(Value::as_str);
            process["file"] = file(exe, digest);
            held.push("exe");
            if digest.and_then(sha256_hashes).is_some() {
                held.push("exe_sha256");
            }
        }
        if let Some(ms) = field("start_time")
            .and_then(Value::as_str)
            .and_then(epoch_ms)
        {
            process["created_time"] = json!(ms);
            held.push("start_time");
        }
        if let Some(u) = actor.get("user") {
            process["user"] = u.clone();
        }
        actor.insert("process".into(), process);
    }
    if !actor.contains_key("user") {
        held.retain(|k| *k != "gid");
    }
    (Value::Object(actor), without(caller, &held))
}

/// The device a record happened on: its `machine {hostname, machine_id,
/// boot_id}`, or the exporting machine. Returns the device, what of
/// `machine` it does not hold, and whether it is the exporter's.
fn device(r: &Record, exporter_host: &str) -> (Value, Option<Map<String, Value>>, bool) {
    let mut device = json!({"type_id": 0, "type": "Unknown"});
    let Some(machine) = r.object("machine") else {
        device["hostname"] = json!(exporter_host);
        return (device, None, true);
    };
    let field = |k: &str| machine.get(k).and_then(Value::as_str);
    let mut held = Vec::new();
    if let Some(name) = field("hostname") {
        device["hostname"] = json!(name);
        held.push("hostname");
    }
    if let Some(id) = field("machine_id") {
        device["uid"] = json!(id);
        if let Some(uuid) = machine_uuid(id) {
            device["os_machine_uuid"] = json!(uuid);
        }
        held.push("machine_id");
    }
    if let Some(boot) = field("boot_id") {
        device["boot_uid"] = json!(boot);
        held.push("boot_id");
    }
    let left = without(machine, &held);
    (device, (!left.is_empty()).then_some(left), false)
}

/// /etc/machine-id (32 hex digits) in the UUID form OCSF's
/// `os_machine_uuid` takes.
fn machine_uuid(id: &str) -> Option<String> {
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(format!(
        "{}-{}-{}-{}-{}",
        &id[..8],
        &id[8..12],
        &id[12..16],
        &id[16..20],
        &id[20..]
    ))
}

/// The spawned program as OCSF `process`: `uid` the spawn's audit id,
/// with what the record or the spawn's decision says of it.
fn spawned_process(r: &Record, spawn: Option<&Spawn>) -> Map<String, Value> {
    let mut process = spawn.map(|s| s.process.clone()).unwrap_or_default();
    if let Some(id) = r.str("audit_id") {
        process.insert("uid".into(), json!(id));
    }
    process
}

/// The run-as user of an `isolation` object (`uid`, `gid`), and the rest
/// of it.
fn run_as(isolation: &Map<String, Value>) -> (Option<Value>, Map<String, Value>) {
    match isolation.get("uid").filter(|u| !u.is_null()) {
        Some(uid) => (
            Some(user(uid, isolation.get("gid"))),
            without(isolation, &["uid", "gid"]),
        ),
        None => (None, without(isolation, &[])),
    }
}

/// A `decision`: Process Activity Launch, allowed. Returns what its later
/// records draw on.
fn decision(r: &Record, out: &mut Out) -> Spawn {
    out.class(PROCESS_ACTIVITY, (1, "Launch"), Severity::Informational);
    out.status(false, None);
    out.blocked(false);
    out.maps(&["decision"]);
    out.caller(r);
    let mut process = Map::new();
    if let Some(program) = r.object("program") {
        if let Some(path) = program.get("resolved").and_then(Value::as_str) {
            let digest = program.get("sha256").and_then(Value::as_str);
            let f = file(path, digest);
            process.insert("name".into(), f["name"].clone());
            process.insert("file".into(), f);
            let mut held = vec!["resolved"];
            if digest.and_then(sha256_hashes).is_some() {
                held.push("sha256");
            }
            out.partly("program", without(program, &held));
        }
    }
    if let Some(shape) = r.str("argv_shape") {
        process.insert("cmd_line".into(), json!(shape));
        out.maps(&["argv_shape"]);
    }
    if let Some(cwd) = r.str("cwd").filter(|c| c.starts_with('/')) {
        process.insert("working_directory".into(), json!(cwd));
        out.maps(&["cwd"]);
    }
    if let Some(isolation) = r.object("isolation") {
        let (user, left) = run_as(isolation);
        if let Some(user) = user {
            process.insert("user".into(), user);
        }
        out.partly("isolation", left);
    }
    let spawn = Spawn {
        process,
        actor: out.event.get("actor").cloned(),
    };
    out.set("process", Value::Object(spawned_process(r, Some(&spawn))));
    spawn
}

/// A `denial`: Process Activity Launch, blocked; a record counting repeats
/// carries their `count`, `start_time` and `end_time`.
fn denial(r: &Record, out: &mut Out) {
    out.class(PROCESS_ACTIVITY, (1, "Launch"), Severity::Medium);
    out.status(true, r.str("reason").map(str::to_string));
    out.blocked(true);
    out.maps(&["decision", "reason"]);
    out.caller(r);
    out.set("process", Value::Object(spawned_process(r, None)));
    if let Some(repeats) = r.object("repeats") {
        let mut held = Vec::new();
        if let Some(count) = repeats.get("count").filter(|c| c.is_u64()) {
            out.set("count", count.clone());
            held.push("count");
        }
        for (key, attribute) in [("first_ts", "start_time"), ("last_ts", "end_time")] {
            if let Some(ms) = repeats.get(key).and_then(Value::as_str).and_then(epoch_ms) {
                out.set(attribute, json!(ms));
                held.push(key);
            }
        }
        out.partly("repeats", without(repeats, &held));
    }
}

/// An `exit`: Process Activity Terminate (Launch, failed, for a spawn whose
/// setup failed), Success only for exit code 0 with no signal, timeout or
/// OOM kill; `signal`, `timed_out` and `interrupted_by` are in
/// `status_detail` and `unmapped`.
fn exit(r: &Record, spawn: Option<&Spawn>, out: &mut Out) {
    let setup_failed = r.str("setup_failed");
    let activity = if setup_failed.is_some() {
        (1, "Launch")
    } else {
        (2, "Terminate")
    };
    out.class(PROCESS_ACTIVITY, activity, Severity::Informational);
    let (failed, detail) = how_it_ended(r);
    out.status(failed, detail);
    out.caller(r);
    let mut process = spawned_process(r, spawn);
    if let Some(isolation) = r.object("isolation_applied") {
        let (user, left) = run_as(isolation);
        if let Some(user) = user {
            process.insert("user".into(), user);
        }
        out.partly("isolation_applied", left);
    }
    if let Some(ms) = r.str("ts").and_then(epoch_ms) {
        if setup_failed.is_none() {
            process.insert("terminated_time".into(), json!(ms));
        }
    }
    // The host pid of the sandbox's init, the process the program runs under.
    if let Some(pid) = r
        .get("sandbox_pid")
        .filter(|p| p.as_i64().is_some_and(|p| p > 0))
    {
        process.insert("pid".into(), pid.clone());
        out.maps(&["sandbox_pid"]);
    }
    out.set("process", Value::Object(process));
    if let Some(code) = r.get("exit_code").filter(|c| c.is_i64()) {
        out.set("exit_code", code.clone());
        out.maps(&["exit_code"]);
    }
    if let Some(ms) = r.get("duration_ms").filter(|d| d.is_u64()) {
        out.set("duration", ms.clone());
        out.maps(&["duration_ms"]);
    }
}

/// Whether an exit failed, and how it ended in words.
fn how_it_ended(r: &Record) -> (bool, Option<String>) {
    if let Some(why) = r.str("setup_failed") {
        return (true, Some(format!("setup failed: {why}")));
    }
    if let Some(why) = r.str("failed") {
        return (true, Some(format!("failed: {why}")));
    }
    let mut words = Vec::new();
    match (
        r.get("signal").and_then(Value::as_i64),
        r.get("exit_code").and_then(Value::as_i64),
    ) {
        (Some(signal), _) => words.push(format!("killed by signal {signal}")),
        (None, Some(code)) => words.push(format!("exit code {code}")),
        (None, None) => words.push("no exit status".to_string()),
    }
    if r.flag("timed_out") {
        words.push("timed out".into());
    }
    if r.flag("oom_killed") {
        words.push("out of memory".into());
    }
    if let Some(by) = r.str("interrupted_by") {
        words.push(format!("interrupted by {by}"));
    }
    let clean = r.get("exit_code").and_then(Value::as_i64) == Some(0)
        && r.get("signal").is_none()
        && !r.flag("timed_out")
        && !r.flag("oom_killed");
    (!clean, Some(words.join(", ")))
}

/// An `attach`: Process Activity Open, by the peer that took the spawn up
/// (its `actor`).
fn attach(r: &Record, spawn: Option<&Spawn>, out: &mut Out) {
    out.class(PROCESS_ACTIVITY, (3, "Open"), Severity::Informational);
    out.status(false, None);
    out.caller(r);
    out.set("process", Value::Object(spawned_process(r, spawn)));
}

/// The actor of a spawn's `net` record: the spawn's caller, from its
/// decision.
fn spawn_actor(spawn: Option<&Spawn>, out: &mut Out) {
    if let Some(actor) = spawn.and_then(|s| s.actor.clone()) {
        out.set("actor", actor);
    }
}

/// A connection's `net` record as Network Activity: Close for one that
/// reached its server, Fail for an allowed one that did not, Refuse for one
/// refused.
fn network(r: &Record, spawn: Option<&Spawn>, out: &mut Out) {
    let (allowed, connected) = (r.flag("allowed"), r.flag("connected"));
    let activity = match (allowed, connected) {
        (true, true) => (2, "Close"),
        (true, false) => (4, "Fail"),
        (false, _) => (5, "Refuse"),
    };
    let severity = if allowed {
        Severity::Informational
    } else {
        Severity::Medium
    };
    out.class(NETWORK_ACTIVITY, activity, severity);
    out.blocked(!allowed);
    out.status(!(allowed && connected), r.str("reason").map(str::to_string));
    out.maps(&["allowed", "connected", "reason", "protocol", "host", "port"]);
    spawn_actor(spawn, out);
    let host = r.str("host").unwrap_or("");
    let dialed: Option<std::net::SocketAddr> = r.str("dialed").and_then(|d| d.parse().ok());
    let mut destination = Map::new();
    if let Some(port) = r.get("port") {
        destination.insert("port".into(), port.clone());
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => {
            destination.insert("ip".into(), json!(ip.to_string()));
        }
        Err(_) => {
            destination.insert("hostname".into(), json!(host));
            if let Some(dialed) = dialed {
                destination.insert("ip".into(), json!(dialed.ip().to_string()));
                out.maps(&["dialed"]);
            }
        }
    }
    out.set("dst_endpoint", Value::Object(destination));
    let (protocol_name, protocol_num) = match r.str("protocol") {
        Some("udp") => ("udp", Some(json!(17))),
        Some("other") => ("other", r.get("ip_protocol").cloned()),
        _ => ("tcp", Some(json!(6))),
    };
    let mut connection =
        json!({"direction_id": 2, "direction": "Outbound", "protocol_name": protocol_name});
    if let Some(num) = protocol_num.filter(|n| n.is_u64()) {
        connection["protocol_num"] = num;
        out.maps(&["ip_protocol"]);
    }
    out.set("connection_info", connection);
    if r.get("bytes_up").is_some() || r.get("bytes_down").is_some() {
        let count = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
        let (up, down) = (count("bytes_up"), count("bytes_down"));
        out.set(
            "traffic",
            json!({"bytes_out": up, "bytes_in": down, "bytes": up + down}),
        );
        out.maps(&["bytes_up", "bytes_down"]);
    }
    if let Some(ms) = r.get("duration_ms").filter(|d| d.is_u64()) {
        out.set("duration", ms.clone());
        out.maps(&["duration_ms"]);
    }
    if let Some(sni) = r.str("sni") {
        // The ClientHello's version is not recorded: "unknown", as OCSF
        // requires one.
        out.set("tls", json!({"sni": sni, "version": "unknown"}));
        out.maps(&["sni"]);
    }
}

/// The address and port of spawnd's DNS stub inside the sandbox
/// (`nameserver 127.0.0.1`, RESOLVER_CONFIG in src/sandbox/spec.rs).
const DNS_STUB: (&str, u16) = ("127.0.0.1", 53);

/// A DNS name the stub refused as DNS Activity: a Response of NXDomain,
/// blocked, from the stub the sandbox asks.
fn dns(r: &Record, spawn: Option<&Spawn>, out: &mut Out) {
    out.class(DNS_ACTIVITY, (2, "Response"), Severity::Medium);
    out.blocked(true);
    out.status(true, r.str("reason").map(str::to_string));
    out.maps(&["allowed", "reason", "protocol", "query", "type"]);
    spawn_actor(spawn, out);
    let mut query = json!({"hostname": r.str("query").unwrap_or("")});
    if let Some(kind) = r.str("type") {
        query["type"] = json!(kind);
    }
    out.set("query", query);
    out.set("rcode_id", json!(3));
    out.set("rcode", json!("NXDomain"));
    out.set(
        "dst_endpoint",
        json!({"ip": DNS_STUB.0, "port": DNS_STUB.1, "svc_name": "spawnd DNS stub"}),
    );
}

/// A `note` about the log as Event Log Activity: Delete for rotated files
/// retention removed, Other for the rest (a torn line or a garbled head
/// chained past, a key rotation); the note's text is the `message`.
fn note(r: &Record, out: &mut Out) {
    let (activity, severity) = if r.get("removed_files").is_some() {
        ((2, "Delete"), Severity::Low)
    } else if r.get("key_rotated").is_some() {
        ((99, "Key Rotation"), Severity::Informational)
    } else if r.get("torn_at_byte").is_some() || r.get("head_error").is_some() {
        ((99, "Repair"), Severity::Low)
    } else {
        ((99, "Note"), Severity::Informational)
    };
    out.class(EVENT_LOG_ACTIVITY, activity, severity);
    out.status(false, None);
    out.set("log_provider", json!("spawnd"));
    out.set("log_name", json!("audit"));
    if let Some(text) = r.str("note") {
        out.set("message", json!(text));
        out.maps(&["note"]);
    }
    out.caller(r);
}

/// The daemon's `lifecycle` records as Application Lifecycle: Start,
/// Stop, and Other ("Reload") for a reload; the daemon is `app` and, by
/// pid, `actor`.
fn lifecycle(r: &Record, out: &mut Out) {
    let event = r.str("event").unwrap_or("");
    let activity = match event {
        "start" => (3, "Start"),
        "stop" => (4, "Stop"),
        "reload" => (99, "Reload"),
        _ => (99, "Other"),
    };
    out.class(APPLICATION_LIFECYCLE, activity, Severity::Informational);
    if activity.1 == "Other" && !event.is_empty() {
        out.set("activity_name", json!(event));
    }
    out.status(false, None);
    out.maps(&["event"]);
    let mut app = json!({"name": "spawnd", "vendor_name": "spawnd"});
    if let Some(version) = r.str("version") {
        app["version"] = json!(version);
        out.maps(&["version"]);
    }
    out.set("app", app);
    if let Some(reason) = r.str("reason") {
        out.set("message", json!(reason));
        out.maps(&["reason"]);
    }
    daemon_actor(r, out);
}

/// The daemon's `heartbeat`: Application Lifecycle, Other ("Heartbeat"),
/// so that a SIEM sees the daemon alive, and a gap when it is not.
fn heartbeat(r: &Record, out: &mut Out) {
    out.class(
        APPLICATION_LIFECYCLE,
        (99, "Heartbeat"),
        Severity::Informational,
    );
    out.status(false, None);
    out.set("app", json!({"name": "spawnd", "vendor_name": "spawnd"}));
    daemon_actor(r, out);
}

/// The daemon itself as `actor`: `app_name`, and its `pid` when the record
/// has one.
fn daemon_actor(r: &Record, out: &mut Out) {
    let mut actor = json!({"app_name": "spawnd"});
    if let Some(pid) = r.get("pid").filter(|p| p.is_u64()) {
        actor["process"] = json!({"pid": pid});
        out.maps(&["pid"]);
    }
    out.set("actor", actor);
}

/// A record of a kind this version does not know: a Base Event, Other,
/// named by its kind, the whole record in `unmapped`.
fn unknown(r: &Record, out: &mut Out) {
    out.class(BASE_EVENT, (99, "Other"), Severity::Informational);
    if let Some(kind) = r.str("kind") {
        out.set("activity_name", json!(kind));
    }
    out.mapped.retain(|k| *k != "kind");
}

#[cfg(test)]
mod tests;
