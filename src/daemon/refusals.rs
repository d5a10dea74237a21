//! Refusals the daemon records once per window rather than once per
//! request, so that a peer sending thousands of frames grows the audit log
//! by a bounded amount: requests naming a connector or operation that no
//! manifest could declare (`params_invalid`), connectors that are not
//! loaded (`connector_unknown`), and peers that `[[access]]` does not allow
//! (`caller_not_allowed`, or `connector_disabled` when the gate says that
//! first). Every other refusal keeps a record of its own.
//!
//! Per peer (uid and gid) and reason, a window opens with a refusal that is
//! recorded in full before it is answered (its record says
//! `repeats_window_ms`). Repeats within the window are counted, and answered
//! with the `audit_id` of the record that will count them: one `denial`
//! record with `repeats {count, of, first_ts, last_ts, …}`, written when the
//! window closes, when a connection of that peer ends (once per window, so
//! that reconnecting cannot force a record per connection), or when the
//! daemon stops. Such a peer adds at most three records per reason and
//! window, each of bounded size: names are kept only when valid, a few of
//! each, and an invalid one only as its field and length.
//!
//! [`Tallies`] is the pure part (time is passed in); the rest writes its
//! records.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::{Daemon, Peer};
use crate::audit::Kind;
use crate::rpc::{self, RpcError};

/// Distinct connector names, operation names and pids a record of repeats lists.
pub(crate) const SAMPLES: usize = 8;

/// A request field holding a name no manifest could declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InvalidField {
    /// `connector` or `op`.
    pub field: &'static str,
    /// Its length in bytes (its bytes are never kept).
    pub bytes: usize,
}

/// A refusal, as much of it as may be recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// `capability_denied`, or `invalid_params`.
    pub class: &'static str,
    /// The denial's `boundary_detail` (none for invalid params).
    pub boundary_detail: Option<&'static str>,
    /// The record's `reason`.
    pub reason: &'static str,
    /// The JSON-RPC method refused.
    pub method: &'static str,
    /// The connector named, when it is a valid FQN.
    pub connector: Option<String>,
    /// The operation named, when it is a valid operation name.
    pub op: Option<String>,
    /// The denial's `requested` (bounded: built from valid names only).
    pub requested: String,
    /// The denial's `granted`.
    pub granted: Vec<String>,
    /// The field found invalid, for `params_invalid`.
    pub invalid: Option<InvalidField>,
}

impl Refusal {
    /// A request whose connector or op name is invalid; `connector` and
    /// `op` are the names that are valid, if any.
    pub(crate) fn invalid(
        method: &'static str,
        invalid: InvalidField,
        connector: Option<String>,
        op: Option<String>,
    ) -> Refusal {
        Refusal {
            class: "invalid_params",
            boundary_detail: None,
            reason: "params_invalid",
            method,
            connector,
            op,
            requested: format!("{}:(invalid, {} bytes)", invalid.field, invalid.bytes),
            granted: Vec::new(),
            invalid: Some(invalid),
        }
    }

    /// A denial of the gate (its connector and op are valid names, or the
    /// connector is empty for a method that names none).
    pub(crate) fn denied(
        method: &'static str,
        denial: &crate::policy::Denial,
        op: Option<String>,
    ) -> Refusal {
        Refusal {
            class: denial.class,
            boundary_detail: Some(denial.boundary_detail),
            reason: denial.reason.as_str(),
            method,
            connector: (!denial.connector.is_empty()).then(|| denial.connector.clone()),
            op,
            requested: denial.requested.clone(),
            granted: denial.granted.clone(),
            invalid: None,
        }
    }

    /// The body of the record of this refusal, the first of its window.
    fn record_body(&self, peer: &Peer, window: Duration) -> Map<String, Value> {
        let mut body = json!({
            "decision": "denied",
            "connector": self.connector,
            "caller": peer.caller_json(),
            "op": self.op,
            "class": self.class,
            "boundary_detail": self.boundary_detail,
            "reason": self.reason,
            "requested": self.requested,
            "granted": self.granted,
            "method": self.method,
            "repeats_window_ms": window.as_millis() as u64,
        });
        if let Some(i) = self.invalid {
            body["invalid"] = json!({"field": i.field, "bytes": i.bytes});
        }
        match body {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }
}

fn peer_pid(peer: &Peer) -> Option<u32> {
    peer.pid.and_then(|p| u32::try_from(p).ok())
}

/// What a window is keyed by: the peer's uid and gid, and the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    uid: u32,
    gid: u32,
    reason: &'static str,
}

impl Key {
    /// The window of `peer`'s refusals of `reason`.
    pub(crate) fn of(peer: &Peer, reason: &'static str) -> Key {
        Key {
            uid: peer.uid,
            gid: peer.gid,
            reason,
        }
    }
}

/// Repeats of one refusal counted in a window, and the record that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Repeats {
    /// The id of the record to write (answered to every repeat it counts).
    pub audit_id: String,
    key: Key,
    class: &'static str,
    boundary_detail: Option<&'static str>,
    /// The first counted refusal's pid.
    pid: Option<u32>,
    /// How many refusals the record counts.
    pub count: u64,
    first_ts: String,
    last_ts: String,
    /// The `audit_id` of the window's first record, once it is written.
    of: Option<String>,
    window_ms: u64,
    methods: BTreeSet<&'static str>,
    connectors: BTreeSet<String>,
    ops: BTreeSet<String>,
    pids: BTreeSet<u32>,
    samples_truncated: bool,
    /// Repeats that named a (valid) connector, and an op.
    named: (u64, u64),
    /// Per invalid field: how many, and the longest.
    invalid: BTreeMap<&'static str, (u64, usize)>,
}

impl Repeats {
    fn new(audit_id: String, key: Key, refusal: &Refusal, window: Duration, ts: &str) -> Repeats {
        Repeats {
            audit_id,
            key,
            class: refusal.class,
            boundary_detail: refusal.boundary_detail,
            pid: None,
            count: 0,
            first_ts: ts.to_string(),
            last_ts: ts.to_string(),
            of: None,
            window_ms: window.as_millis() as u64,
            methods: BTreeSet::new(),
            connectors: BTreeSet::new(),
            ops: BTreeSet::new(),
            pids: BTreeSet::new(),
            samples_truncated: false,
            named: (0, 0),
            invalid: BTreeMap::new(),
        }
    }

    fn count(&mut self, refusal: &Refusal, pid: Option<u32>, ts: &str) {
        if self.count == 0 {
            self.pid = pid;
        }
        self.count += 1;
        ts.clone_into(&mut self.last_ts);
        self.methods.insert(refusal.method);
        let mut sample = |set: &mut BTreeSet<String>, name: &Option<String>| {
            if let Some(name) = name {
                if set.len() < SAMPLES {
                    set.insert(name.clone());
                } else if !set.contains(name) {
                    self.samples_truncated = true;
                }
            }
        };
        sample(&mut self.connectors, &refusal.connector);
        sample(&mut self.ops, &refusal.op);
        self.named.0 += u64::from(refusal.connector.is_some());
        self.named.1 += u64::from(refusal.op.is_some());
        if let Some(pid) = pid {
            if self.pids.len() < SAMPLES {
                self.pids.insert(pid);
            } else if !self.pids.contains(&pid) {
                self.samples_truncated = true;
            }
        }
        if let Some(i) = refusal.invalid {
            let slot = self.invalid.entry(i.field).or_insert((0, 0));
            slot.0 += 1;
            slot.1 = slot.1.max(i.bytes);
        }
    }

    /// The record's body: a denial whose `repeats` says how many, when and
    /// what. `connector` and `op` are set when every repeat named the same.
    pub(crate) fn record_body(&self) -> Map<String, Value> {
        let only = |set: &BTreeSet<String>, named: u64| {
            (set.len() == 1 && !self.samples_truncated && named == self.count)
                .then(|| set.iter().next().cloned())
                .flatten()
        };
        let invalid: Map<String, Value> = self
            .invalid
            .iter()
            .map(|(field, (count, max))| {
                (
                    (*field).to_string(),
                    json!({"count": count, "max_bytes": max}),
                )
            })
            .collect();
        let body = json!({
            "decision": "denied",
            "connector": only(&self.connectors, self.named.0),
            "caller": crate::audit::events::peer_json(self.key.uid, self.key.gid, self.pid, &crate::origin::Origin::via(crate::origin::Via::Daemon)),
            "op": only(&self.ops, self.named.1),
            "class": self.class,
            "boundary_detail": self.boundary_detail,
            "reason": self.key.reason,
            "repeats": {
                "count": self.count,
                "of": self.of,
                "first_ts": self.first_ts,
                "last_ts": self.last_ts,
                "window_ms": self.window_ms,
                "methods": self.methods,
                "connectors": self.connectors,
                "ops": self.ops,
                "pids": self.pids,
                "samples_truncated": self.samples_truncated,
                "invalid": invalid,
            },
        });
        match body {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }
}

/// What to do with a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The first of its window: record it in full, then answer.
    RecordInFull,
    /// Counted; the record with this id will count it.
    Counted {
        /// The id of that record.
        audit_id: String,
    },
}

struct Window {
    opened: Instant,
    /// The `audit_id` of the record of the window's first refusal.
    first: Option<String>,
    /// Whether a connection's end has written this window's repeats once.
    flushed_at_close: bool,
    pending: Option<Repeats>,
}

/// Every open window.
pub(crate) struct Tallies {
    window: Duration,
    open: BTreeMap<Key, Window>,
    /// Repeats of windows that ended while nobody swept them.
    ended: Vec<Repeats>,
}

impl Tallies {
    /// No window open; each lasts `window`.
    pub(crate) fn new(window: Duration) -> Tallies {
        Tallies {
            window,
            open: BTreeMap::new(),
            ended: Vec::new(),
        }
    }

    /// How long a window lasts.
    pub(crate) fn window(&self) -> Duration {
        self.window
    }

    /// Notes a refusal of `peer` at `now` (`ts`: the same instant for the
    /// record). `new_id` makes the id of a record of repeats.
    pub(crate) fn note(
        &mut self,
        peer: &Peer,
        refusal: &Refusal,
        now: Instant,
        ts: &str,
        new_id: impl FnOnce() -> String,
    ) -> Verdict {
        let key = Key::of(peer, refusal.reason);
        let window = self.window;
        if let Some(w) = self.open.get(&key) {
            if now.duration_since(w.opened) >= window {
                if let Some(ended) = self.open.remove(&key).and_then(take_pending) {
                    self.ended.push(ended);
                }
            }
        }
        let Some(w) = self.open.get_mut(&key) else {
            self.open.insert(
                key,
                Window {
                    opened: now,
                    first: None,
                    flushed_at_close: false,
                    pending: None,
                },
            );
            return Verdict::RecordInFull;
        };
        let pending = w
            .pending
            .get_or_insert_with(|| Repeats::new(new_id(), key, refusal, window, ts));
        pending.count(refusal, peer_pid(peer), ts);
        Verdict::Counted {
            audit_id: pending.audit_id.clone(),
        }
    }

    /// The window's first refusal is on record as `audit_id`.
    pub(crate) fn recorded(&mut self, key: Key, audit_id: String) {
        if let Some(w) = self.open.get_mut(&key) {
            w.first = Some(audit_id);
        }
    }

    /// The window's first refusal could not be recorded: the window is
    /// dropped, so the next refusal is recorded in full (or fails the same
    /// way). Repeats it counted meanwhile are still written.
    pub(crate) fn unrecorded(&mut self, key: Key) {
        if let Some(pending) = self.open.remove(&key).and_then(take_pending) {
            self.ended.push(pending);
        }
    }

    /// A connection of the peer `uid`/`gid` ended: the repeats of each of
    /// its windows that has not been written at a connection's end yet.
    pub(crate) fn connection_closed(&mut self, uid: u32, gid: u32) -> Vec<Repeats> {
        self.open
            .iter_mut()
            .filter(|(k, w)| k.uid == uid && k.gid == gid && !w.flushed_at_close)
            .filter_map(|(_, w)| {
                let pending = take_pending_of(w)?;
                w.flushed_at_close = true;
                Some(pending)
            })
            .collect()
    }

    /// The windows over at `now` close: the repeats they counted.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<Repeats> {
        let window = self.window;
        let over: Vec<Key> = self
            .open
            .iter()
            .filter(|(_, w)| now.duration_since(w.opened) >= window)
            .map(|(k, _)| *k)
            .collect();
        let mut out = std::mem::take(&mut self.ended);
        out.extend(
            over.into_iter()
                .filter_map(|k| self.open.remove(&k).and_then(take_pending)),
        );
        out
    }

    /// Every window closes (the daemon stops): the repeats they counted.
    pub(crate) fn drain(&mut self) -> Vec<Repeats> {
        let mut out = std::mem::take(&mut self.ended);
        out.extend(
            std::mem::take(&mut self.open)
                .into_values()
                .filter_map(take_pending),
        );
        out
    }
}

fn take_pending(mut w: Window) -> Option<Repeats> {
    take_pending_of(&mut w)
}

/// The window's counted repeats, linked to its first record.
fn take_pending_of(w: &mut Window) -> Option<Repeats> {
    let mut pending = w.pending.take()?;
    pending.of.clone_from(&w.first);
    Some(pending)
}

fn tallies(daemon: &Daemon) -> std::sync::MutexGuard<'_, Tallies> {
    match daemon.refusals.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Records or counts `refusal` of `peer` and returns `error` with the
/// `audit_id` that accounts for it in its `data` (or the audit's own error
/// when the first record of a window cannot be written).
pub(crate) async fn refuse(
    daemon: &Arc<Daemon>,
    peer: &Peer,
    refusal: Refusal,
    mut error: RpcError,
) -> RpcError {
    crate::metrics::denied(refusal.reason);
    let ts = crate::audit::log::now_rfc3339_millis();
    let verdict = tallies(daemon).note(peer, &refusal, Instant::now(), &ts, || {
        crate::audit::log::new_audit_id().unwrap_or_default()
    });
    let audit_id = match verdict {
        Verdict::Counted { audit_id } => audit_id,
        Verdict::RecordInFull => {
            let key = Key::of(peer, refusal.reason);
            let d = Arc::clone(daemon);
            let body = refusal.record_body(peer, tallies(daemon).window());
            let written = tokio::task::spawn_blocking(move || {
                let config = d.loaded().config.clone();
                crate::pipeline::open_audit(&config)
                    .map_err(|f| f.message)
                    .and_then(|log| {
                        log.append(Kind::Denial, None, body)
                            .map_err(|e| format!("audit unavailable: {e}"))
                    })
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
            match written {
                Ok(appended) => {
                    tallies(daemon).recorded(key, appended.audit_id.clone());
                    appended.audit_id
                }
                Err(why) => {
                    tallies(daemon).unrecorded(key);
                    return RpcError::new(
                        rpc::AUDIT_UNAVAILABLE,
                        format!(
                            "{why}; the request was refused, and the refusal could not be recorded"
                        ),
                    );
                }
            }
        }
    };
    match &mut error.data {
        Some(Value::Object(data)) => {
            data.insert("audit_id".into(), json!(audit_id));
        }
        _ => error.data = Some(json!({"audit_id": audit_id})),
    }
    error
}

/// Writes records of repeats (errors are logged: the refusals were answered).
fn write_repeats(daemon: &Daemon, repeats: Vec<Repeats>) {
    if repeats.is_empty() {
        return;
    }
    let config = daemon.loaded().config.clone();
    let log = match crate::pipeline::open_audit(&config) {
        Ok(log) => log,
        Err(f) => {
            tracing::error!(error = %f.message, lost = repeats.len(), "records of repeated refusals cannot be written");
            return;
        }
    };
    for r in repeats {
        match log.append(Kind::Denial, Some(&r.audit_id), r.record_body()) {
            Ok(_) => {
                tracing::info!(audit_id = %r.audit_id, reason = r.key.reason, uid = r.key.uid, count = r.count, "repeated refusals recorded")
            }
            Err(e) => {
                tracing::error!(audit_id = %r.audit_id, count = r.count, error = %e, "a record of repeated refusals cannot be written")
            }
        }
    }
}

/// Writes `repeats` from a blocking thread and waits for it.
async fn write_repeats_async(daemon: &Arc<Daemon>, repeats: Vec<Repeats>) {
    if repeats.is_empty() {
        return;
    }
    let d = Arc::clone(daemon);
    if let Err(e) = tokio::task::spawn_blocking(move || write_repeats(&d, repeats)).await {
        tracing::error!(error = %e, "writing records of repeated refusals");
    }
}

/// A connection of `peer` ended.
pub(crate) async fn connection_closed(daemon: &Arc<Daemon>, peer: &Peer) {
    let repeats = tallies(daemon).connection_closed(peer.uid, peer.gid);
    write_repeats_async(daemon, repeats).await;
}

/// Windows that are over close.
pub(crate) async fn close_due(daemon: &Arc<Daemon>) {
    let repeats = tallies(daemon).due(Instant::now());
    write_repeats_async(daemon, repeats).await;
}

/// The daemon stops: every window closes.
pub(crate) async fn close_all(daemon: &Arc<Daemon>) {
    let repeats = tallies(daemon).drain();
    write_repeats_async(daemon, repeats).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_secs(60);

    fn peer(uid: u32, pid: i32) -> Peer {
        Peer {
            uid,
            gid: uid,
            pid: Some(pid),
            other_user_namespace: false,
            origin: std::sync::Arc::new(crate::origin::Origin::via(crate::origin::Via::Daemon)),
        }
    }

    fn unknown(connector: &str) -> Refusal {
        let d = crate::policy::Denial::new(
            crate::policy::Reason::ConnectorUnknown,
            connector,
            format!("connector:{connector}"),
            vec![],
            "no such connector",
        );
        Refusal::denied("spawn_op", &d, Some("sh".into()))
    }

    fn ids() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("id{n}")
        }
    }

    #[test]
    fn the_first_refusal_of_a_window_is_recorded_and_repeats_are_counted_in_one_record() {
        let mut t = Tallies::new(W);
        let mut id = ids();
        let start = Instant::now();
        let p = peer(65534, 7);
        assert_eq!(
            t.note(&p, &unknown("local://a/b"), start, "t0", &mut id),
            Verdict::RecordInFull
        );
        t.recorded(Key::of(&p, "connector_unknown"), "first".into());
        for i in 1..=1000u32 {
            let at = start + Duration::from_millis(u64::from(i));
            let v = t.note(&p, &unknown(&format!("local://a/c{i}")), at, "t1", &mut id);
            assert_eq!(
                v,
                Verdict::Counted {
                    audit_id: "id1".into()
                }
            );
        }
        // Another reason of the same peer has its own window.
        let invalid = Refusal::invalid(
            "spawn_op",
            InvalidField {
                field: "connector",
                bytes: 1 << 20,
            },
            None,
            Some("sh".into()),
        );
        assert_eq!(
            t.note(&p, &invalid, start, "t0", &mut id),
            Verdict::RecordInFull
        );
        assert!(t.due(start + W / 2).is_empty());
        let due = t.due(start + W);
        assert_eq!(due.len(), 1, "{due:?}");
        let body = due[0].record_body();
        assert_eq!(body["reason"], "connector_unknown");
        assert_eq!(body["repeats"]["count"], 1000);
        assert_eq!(body["repeats"]["of"], "first");
        assert_eq!(
            body["repeats"]["connectors"].as_array().unwrap().len(),
            SAMPLES
        );
        assert_eq!(body["repeats"]["samples_truncated"], true);
        assert_eq!(
            body["connector"],
            Value::Null,
            "several connectors: none named"
        );
        assert_eq!(
            body["caller"],
            json!({"uid": 65534, "gid": 65534, "pid": 7, "via": "daemon"})
        );
        // The window closed: the next refusal opens a new one.
        assert_eq!(
            t.note(&p, &unknown("local://a/b"), start + W, "t2", &mut id),
            Verdict::RecordInFull
        );
    }

    #[test]
    fn a_connections_end_writes_the_repeats_once_per_window_and_nothing_is_lost() {
        let mut t = Tallies::new(W);
        let mut id = ids();
        let start = Instant::now();
        let p = peer(1000, 1);
        let mut counted = 0;
        let mut written = Vec::new();
        for round in 0..5u64 {
            for i in 0..10u64 {
                let at = start + Duration::from_millis(round * 10 + i);
                if matches!(
                    t.note(&p, &unknown("local://a/b"), at, "t", &mut id),
                    Verdict::Counted { .. }
                ) {
                    counted += 1;
                }
            }
            written.extend(t.connection_closed(1000, 1000));
        }
        assert_eq!(written.len(), 1, "only the first connection's end writes");
        assert_eq!(written[0].record_body()["connector"], "local://a/b");
        assert_eq!(written[0].record_body()["op"], "sh");
        // A repeat naming no connector (a `health` refused): none is named.
        let d = crate::policy::Denial::new(
            crate::policy::Reason::ConnectorUnknown,
            "",
            "method:health",
            vec![],
            "refused",
        );
        let later = start + Duration::from_secs(1);
        t.note(
            &p,
            &Refusal::denied("health", &d, None),
            later,
            "t",
            &mut id,
        );
        counted += 1;
        let mixed = t.drain();
        assert_eq!(mixed[0].record_body()["connector"], Value::Null);
        assert_eq!(mixed[0].record_body()["op"], Value::Null);
        written.extend(mixed);
        assert!(t.connection_closed(1000, 1000).is_empty());
        assert_eq!(written.len(), 2);
        assert_eq!(written.iter().map(|r| r.count).sum::<u64>(), counted);
        assert_eq!(counted, 50);
        assert!(t.drain().is_empty());
    }

    #[test]
    fn repeats_of_a_window_that_ended_unswept_are_kept_and_a_failed_first_record_reopens() {
        let mut t = Tallies::new(W);
        let mut id = ids();
        let start = Instant::now();
        let p = peer(5, 5);
        t.note(&p, &unknown("local://a/b"), start, "t", &mut id);
        t.note(&p, &unknown("local://a/b"), start, "t", &mut id);
        // Past the window before any sweep: the next refusal opens a new one
        // and the old count waits for the next sweep.
        assert_eq!(
            t.note(&p, &unknown("local://a/b"), start + W, "t", &mut id),
            Verdict::RecordInFull
        );
        let key = Key::of(&p, "connector_unknown");
        t.note(&p, &unknown("local://a/b"), start + W, "t", &mut id);
        t.unrecorded(key);
        let due = t.due(start + W);
        assert_eq!(due.iter().map(|r| r.count).sum::<u64>(), 2, "{due:?}");
        assert_eq!(
            t.note(&p, &unknown("local://a/b"), start + W, "t", &mut id),
            Verdict::RecordInFull
        );
    }

    #[test]
    fn an_invalid_field_is_recorded_as_its_length_never_its_bytes() {
        let p = peer(65534, 9);
        let invalid = Refusal::invalid(
            "spawn",
            InvalidField {
                field: "connector",
                bytes: 1_000_000,
            },
            None,
            None,
        );
        let body = invalid.record_body(&p, W);
        assert_eq!(
            body["invalid"],
            json!({"field": "connector", "bytes": 1_000_000})
        );
        assert_eq!(body["connector"], Value::Null);
        assert_eq!(body["reason"], "params_invalid");
        assert_eq!(body["repeats_window_ms"], 60_000);
        let mut t = Tallies::new(W);
        let mut id = ids();
        let now = Instant::now();
        t.note(&p, &invalid, now, "t", &mut id);
        t.note(&p, &invalid, now, "t", &mut id);
        let body = t.drain()[0].record_body();
        assert_eq!(
            body["repeats"]["invalid"],
            json!({"connector": {"count": 1, "max_bytes": 1_000_000}})
        );
        assert!(body.values().all(|v| !v.to_string().contains("xxxx")));
    }
}
