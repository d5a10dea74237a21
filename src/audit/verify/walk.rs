//! The record-by-record walk of `verify`: each line must be a record, the
//! next `seq`, linked to the one before (`prev`), sealed with the chain's
//! key and written in its canonical form. Every break is reported and the
//! walk goes on: a record that moves the chain forward is taken as the new
//! point to link from (its `seq` and stored `hash`), one that goes back is
//! skipped, and after a line that is no record the next record is taken as
//! it stands.
//!
//! The key: the walk starts under the key its first record is sealed with
//! (plain SHA-256, or whichever key of the keyring seals it) and changes
//! only at a key rotation note that names the key it leaves, is sealed by
//! it, and is vouched for (`rotation_mac`) by the key it moves to. A record
//! sealed with another key of the keyring without such a note is reported.

use serde_json::{Map, Value};

use super::{Tamper, Verified};
use crate::audit::record::{key_id, key_rotation, rotation_vouched_by, sealed_with};

/// Breaks listed one by one; past this many they are only counted.
pub(crate) const MAX_LISTED: usize = 100;

/// The key the walk checks records with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sealing {
    /// Not known yet: the first record decides.
    Undetermined,
    /// Plain SHA-256.
    Unkeyed,
    /// The keyring's key number `i`.
    Key(usize),
    /// A key the keyring lacks (reported once; links are still checked).
    Unknown,
}

/// The state of a walk over the chain's files.
pub(super) struct Walk<'a> {
    pub(super) keys: &'a [&'a [u8]],
    pub(super) sealing: Sealing,
    /// The hash the next record must name as `prev`.
    pub(super) prev: String,
    /// Take the next record's `seq` and `prev` as they stand (after a line
    /// that is no record, or at an unanchored segment's start).
    pub(super) resync: bool,
    /// Records below this `seq` are skipped (a segment verified from it).
    pub(super) skip_below: Option<u64>,
    /// Where the chain's last stretch without a key starts (a keyring given
    /// and a chain that ends unkeyed was rebuilt without the key).
    pub(super) unkeyed_since: Option<u64>,
    /// The chain starts retention notes name (`chain_starts_at`).
    pub(super) starts_noted: Vec<(u64, String)>,
    /// The `seq`s anchors vouch for, and the hash found at each.
    pub(super) anchored: std::collections::BTreeMap<u64, Option<String>>,
    /// The daemon's liveness as the records tell it.
    pub(super) daemon: Daemon,
    pub(super) out: Verified,
}

/// What the records say about the daemon that wrote them: whether its
/// last `lifecycle start` has no `stop` after it, its heartbeat interval,
/// and the last record's kind and time.
#[derive(Debug, Default)]
pub(super) struct Daemon {
    pub(super) running: bool,
    pub(super) interval_s: Option<u64>,
    pub(super) last_kind: Option<String>,
    pub(super) last_ts: Option<String>,
}

impl Walk<'_> {
    /// Records a break: the first [`MAX_LISTED`] are listed, the rest
    /// counted.
    pub(super) fn report(&mut self, seq: u64, line: usize, reason: String) {
        if self.out.tampered.len() < MAX_LISTED {
            self.out.tampered.push(Tamper { seq, line, reason });
        } else {
            self.out.tampered_unlisted += 1;
        }
    }

    /// Walks one file's bytes (`label` prefixes its messages; `newest`: a
    /// torn last line there is a crash's, not an edit).
    pub(super) fn file(&mut self, text: &[u8], label: &str, newest: bool) {
        let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
        let ends_with_newline = text.last().is_none_or(|b| *b == b'\n');
        for (i, raw) in lines.iter().enumerate() {
            let line_no = i + 1;
            let is_last = i + 1 == lines.len();
            if raw.is_empty() && is_last {
                break;
            }
            let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(raw) else {
                if is_last && !ends_with_newline && newest {
                    self.out.warnings.push(format!(
                        "{label}line {line_no}: torn last line ({} bytes) left by an interrupted write",
                        raw.len()
                    ));
                    break;
                }
                if next_is_torn_note(&lines, i) {
                    self.out.warnings.push(format!("{label}line {line_no}: torn line, reported and chained past by the next record"));
                    continue;
                }
                let seq = self.out.last_seq + 1;
                self.report(
                    seq,
                    line_no,
                    format!("{label}unreadable: not a JSON record (edited, or torn in the middle)"),
                );
                self.resync = true;
                continue;
            };
            self.record(&record, raw, &lines[i + 1..], label, line_no);
        }
    }

    /// Checks one record and moves the walk past it (or skips it when it
    /// goes back).
    fn record(
        &mut self,
        record: &Map<String, Value>,
        raw: &[u8],
        rest: &[&[u8]],
        label: &str,
        line_no: usize,
    ) {
        let seq = record.get("seq").and_then(Value::as_u64).unwrap_or(0);
        if let Some(from) = self.skip_below {
            if seq < from {
                return;
            }
            self.skip_below = None;
            if seq != from {
                self.report(
                    from,
                    line_no,
                    format!("{label}seq {seq} where the segment's first, {from}, was expected: record(s) deleted"),
                );
                self.resync = true;
            }
        }
        let problem = if std::mem::take(&mut self.resync) {
            None
        } else {
            self.link_problem(record, seq, rest, label, line_no)
        };
        if let Some((at, why)) = problem {
            self.report(at, line_no, why);
            if seq <= self.out.last_seq {
                // Going back (a copy inserted, a record moved up): skipped,
                // so the records after it link to the chain as it was.
                return;
            }
        }
        if let Some(why) = self.seal_problem(record, label) {
            self.report(seq, line_no, why);
        } else if serde_json::to_vec(record).ok().as_deref() != Some(raw) {
            // The line must be the record exactly as spawnd writes it: a
            // key given twice (parsers disagree on which value wins), other
            // spacing or escapes would verify as the record parsed, not as
            // the bytes a reader sees.
            self.report(
                seq,
                line_no,
                format!("{label}the line is not the record's canonical form (a key given twice, or spacing or escapes changed): rewritten"),
            );
        }
        self.rotation(record, seq, label, line_no);
        self.take(record, seq);
    }

    /// A broken link: the `seq` not the next one, or `prev` not the hash
    /// before. Returns the `seq` to report at and why.
    fn link_problem(
        &self,
        record: &Map<String, Value>,
        seq: u64,
        rest: &[&[u8]],
        label: &str,
        line_no: usize,
    ) -> Option<(u64, String)> {
        let expected = self.out.last_seq + 1;
        if seq != expected {
            let why = if seq > expected {
                match line_of_seq(rest, expected) {
                    Some(later) => format!(
                        "{label}seq {seq} where {expected} was expected: records out of order (seq {expected} is at line {})",
                        line_no + later
                    ),
                    None if expected == 1 && self.out.records == 0 => format!(
                        "{label}seq {seq} where {expected} was expected: record(s) deleted (a segment shipped on its own? verify it with --from-seq {seq}, and vouch for its start with --anchor or --checkpoint at seq {})",
                        seq - 1
                    ),
                    None => format!(
                        "{label}seq {seq} where {expected} was expected: record(s) deleted"
                    ),
                }
            } else {
                format!("{label}seq {seq} where {expected} was expected: reordered or inserted")
            };
            return Some((expected, why));
        }
        if record.get("prev").and_then(Value::as_str) != Some(self.prev.as_str()) {
            return Some((
                seq,
                format!(
                    "{label}prev does not match the record before: inserted, reordered or replaced"
                ),
            ));
        }
        None
    }

    /// The record not sealed with the chain's key. Settles the key at the
    /// first record.
    fn seal_problem(&mut self, record: &Map<String, Value>, label: &str) -> Option<String> {
        let stored = record.get("hash").and_then(Value::as_str).unwrap_or("");
        let keyed = stored.starts_with("hmac-sha256:");
        if self.sealing == Sealing::Undetermined {
            self.sealing = if !keyed {
                Sealing::Unkeyed
            } else {
                match self.sealing_key(record) {
                    Some(i) => Sealing::Key(i),
                    None => {
                        self.sealing = Sealing::Unknown;
                        return Some(self.unknown_key_reason(label));
                    }
                }
            };
        }
        let key = match self.sealing {
            Sealing::Unknown => return None,
            Sealing::Key(i) => Some(self.keys[i]),
            Sealing::Unkeyed | Sealing::Undetermined => None,
        };
        if sealed_with(record, key) {
            return None;
        }
        let other = self.sealing_key(record);
        Some(match (key, other) {
            (None, _) if keyed && self.keys.is_empty() => {
                self.sealing = Sealing::Unknown;
                self.unknown_key_reason(label)
            }
            (_, Some(i)) => format!(
                "{label}sealed with key {}, but the chain is {} and no key rotation note moved it: spliced in or rebuilt",
                key_id(self.keys[i]),
                key.map_or_else(|| "unkeyed".to_string(), |k| format!("under key {}", key_id(k)))
            ),
            (Some(_), None) if !keyed => format!(
                "{label}not keyed although a key is in force: rebuilt without the key, or edited"
            ),
            _ => format!("{label}hash does not match the content: edited"),
        })
    }

    /// The keyring key that seals `record`.
    fn sealing_key(&self, record: &Map<String, Value>) -> Option<usize> {
        self.keys.iter().position(|k| sealed_with(record, Some(k)))
    }

    fn unknown_key_reason(&self, label: &str) -> String {
        if self.keys.is_empty() {
            format!("{label}the chain is keyed (hmac-sha256) and no key was given: set [audit] hmac_key_file in the config, or give the key with --key FILE")
        } else {
            format!("{label}sealed with a key not in the keyring (none of the {} key(s) given verifies it), or edited: give the key it was written with (--key FILE, [audit] previous_hmac_key_files)", self.keys.len())
        }
    }

    /// At a key rotation note: checks it names the key it leaves and is
    /// vouched for by the key it moves to, and moves the walk to that key.
    fn rotation(&mut self, record: &Map<String, Value>, seq: u64, label: &str, line_no: usize) {
        let Some((from, to)) = key_rotation(record) else {
            return;
        };
        let leaving = match self.sealing {
            Sealing::Key(i) => Some(key_id(self.keys[i])),
            _ => None,
        };
        if self.sealing != Sealing::Unknown && from != leaving {
            self.report(
                seq,
                line_no,
                format!(
                    "{label}the key rotation note leaves key {} but the chain is {}: forged",
                    from.as_deref().unwrap_or("none"),
                    leaving.as_deref().unwrap_or("unkeyed")
                ),
            );
        }
        match self.keys.iter().position(|k| key_id(k) == to) {
            Some(i) => {
                if !rotation_vouched_by(record, self.keys[i]) {
                    self.report(
                        seq,
                        line_no,
                        format!("{label}the key rotation note is not vouched for by the key it moves to ({to}): forged"),
                    );
                }
                self.sealing = Sealing::Key(i);
            }
            None => {
                self.report(
                    seq + 1,
                    0,
                    format!("{label}the chain is sealed with key {to} after seq {seq} and that key was not given: give it with --key FILE (or [audit] hmac_key_file)"),
                );
                self.sealing = Sealing::Unknown;
            }
        }
    }

    /// Moves the walk past a record it checked.
    fn take(&mut self, record: &Map<String, Value>, seq: u64) {
        let stored = record.get("hash").and_then(Value::as_str).unwrap_or("");
        self.prev = stored.to_string();
        self.out.records += 1;
        self.out.last_seq = seq;
        self.out.last_hash = stored.to_string();
        match self.sealing {
            Sealing::Unkeyed => {
                self.unkeyed_since.get_or_insert(seq);
            }
            _ => self.unkeyed_since = None,
        }
        if let Some(found) = self.anchored.get_mut(&seq) {
            *found = Some(stored.to_string());
        }
        if let Some(start) = retention_start(record) {
            self.starts_noted.push(start);
        }
        self.head_note(record, seq);
        self.daemon.observe(record);
    }

    /// A writer's note that it found the head file missing, garbled or not
    /// vouched for by the key on a keyed chain: records cut off the end
    /// before it cannot be ruled out, so it is a warning.
    fn head_note(&mut self, record: &Map<String, Value>, seq: u64) {
        let Some(error) = record.get("head_error") else {
            return;
        };
        if !matches!(self.sealing, Sealing::Key(_) | Sealing::Unknown) {
            return;
        }
        let what = match error.as_str() {
            Some("missing") => "missing",
            Some("mac") => "not vouched for by the key",
            _ => "unreadable",
        };
        self.out.warnings.push(format!(
            "seq {seq}: the writer found the head file {what} and chained from the log's last record: records cut off the end before seq {seq} cannot be ruled out"
        ));
    }
}

impl Daemon {
    fn observe(&mut self, record: &Map<String, Value>) {
        let kind = record.get("kind").and_then(Value::as_str).unwrap_or("");
        match kind {
            "lifecycle" => match record.get("event").and_then(Value::as_str) {
                Some("start") => {
                    self.running = true;
                    self.interval_s = record.get("heartbeat_secs").and_then(Value::as_u64);
                }
                Some("stop") => self.running = false,
                _ => {}
            },
            "heartbeat" => {
                self.running = true;
                self.interval_s = record.get("interval_s").and_then(Value::as_u64);
            }
            _ => {}
        }
        self.last_kind = Some(kind.to_string());
        self.last_ts = record.get("ts").and_then(Value::as_str).map(str::to_string);
    }
}

/// How many lines after the first of `rest` the record numbered `seq` is
/// (1 for the first), if it is there: a record that turns up later was
/// moved, not deleted.
fn line_of_seq(rest: &[&[u8]], seq: u64) -> Option<usize> {
    rest.iter()
        .position(|raw| {
            serde_json::from_slice::<Map<String, Value>>(raw)
                .is_ok_and(|r| r.get("seq").and_then(Value::as_u64) == Some(seq))
        })
        .map(|i| i + 1)
}

/// The `chain_starts_at` of a retention note.
fn retention_start(record: &Map<String, Value>) -> Option<(u64, String)> {
    if record.get("kind").and_then(Value::as_str) != Some("note") {
        return None;
    }
    let at = record.get("chain_starts_at")?;
    Some((
        at.get("seq")?.as_u64()?,
        at.get("prev")?.as_str()?.to_string(),
    ))
}

fn next_is_torn_note(lines: &[&[u8]], i: usize) -> bool {
    let Some(next) = lines.get(i + 1) else {
        return false;
    };
    matches!(serde_json::from_slice::<Map<String, Value>>(next), Ok(n) if n.get("kind").and_then(Value::as_str) == Some("note") && n.contains_key("torn_at_byte"))
}
