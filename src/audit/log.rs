//! The append-only audit file. Every append takes an exclusive `flock` on a
//! lock file beside the log (so `run` and `serve` can share it), reads the
//! head (`<log>.head`: the last `seq` and `hash`), chains the new record to
//! it, writes one JSON line and updates the head. (The log's last record is
//! read back too, unless the log and the head file are exactly as this
//! process's last append left them: see `LastAppend`.) The `fdatasync` comes
//! after the lock is released, and one serves every thread of the process
//! whose record was written before it began ([`super::group_sync`]);
//! `append` returns only once its record is durable. `write` and
//! [`Unsynced::commit`] split that in two, so a caller can do other work (a
//! sandbox building its root) while the disk flushes — the record is still
//! durable before the program starts.
//!
//! Only the log is fsynced: the head file is overwritten in place and may lag
//! the log after a power loss, which the next append and `verify` detect and
//! report (the chain continues from the log's last complete record; a garbled
//! head gets a `note` record). A torn last line left by a crash is detected,
//! reported in a `note` record and chained past — never silently dropped.
//!
//! With a key (`with_key`), the head also carries a `counter` of head writes
//! (continued from the previous head, never reset) and a `mac` over `seq`,
//! `hash` and `counter`, so that a head rewritten without the key (records
//! cut off the end and the head set to match) is caught. A head found
//! missing, garbled or not vouched for by the key gets a `note` before the
//! chain goes on from the log's last record, so the next append cannot hide
//! it. When the chain was sealed with another key than the writer's (a
//! retired key named by `with_previous_keys`, or none), the writer first
//! writes a key rotation note sealed by both; a chain sealed with a key it
//! does not hold is never continued (fail closed: nothing is written).
//!
//! Rotation (`with_rotation`) renames a full log to `<log>.N`; retention
//! (`with_retention`) then removes the oldest rotated files beyond the number
//! kept. Before any is removed, a `note` record naming them and where the
//! remaining chain starts (`chain_starts_at`: the `seq` and `prev` of the
//! oldest kept record) is written and made durable, so `verify` can tell
//! retention from deletion; a crash between the two leaves files `verify`
//! still walks.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde_json::{json, Map, Value};

use super::group_sync::{self, Ticket};
use super::record::{
    head_mac, head_mac_matches, key_id, key_rotation, seal, seal_key_rotation, sealed_with, Kind,
    Sealed, GENESIS,
};
use tail::read_tail;

mod tail;

/// Why a record could not be made durable.
#[derive(Debug, thiserror::Error)]
#[error("audit log {path}: {what}: {source}")]
pub struct AuditError {
    /// The log.
    pub path: PathBuf,
    /// The failing step.
    pub what: String,
    /// The cause.
    pub source: std::io::Error,
}

/// What an append produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The record's sequence number.
    pub seq: u64,
    /// Its audit id.
    pub audit_id: String,
}

/// A record written but not yet known to be on disk.
#[must_use = "a record is durable only once committed"]
pub struct Unsynced {
    file: File,
    path: PathBuf,
    appended: Appended,
    ticket: Ticket,
    /// When the record was written, for the flush time operators watch.
    written: std::time::Instant,
}

impl Unsynced {
    /// Starts writing the record to disk without waiting, so that the
    /// [`Unsynced::commit`] that follows other work waits less. Only a head
    /// start: the record is durable once `commit` returns, and not before.
    pub fn start_flush(&self) {
        use std::os::fd::AsFd;
        let _ = crate::sys::start_writeback(self.file.as_fd());
    }

    /// Waits until the record is on disk (synced here, or by another
    /// thread's sync of the same file that began after it was written).
    pub fn commit(self) -> Result<Appended, AuditError> {
        group_sync::commit(&self.file, self.ticket).map_err(|source| AuditError {
            path: self.path,
            what: "fsync".into(),
            source,
        })?;
        crate::metrics::audit_flushed(self.written.elapsed());
        Ok(self.appended)
    }

    /// [`Unsynced::commit`] for a record nothing waits on (the daemon's exit
    /// records): another thread's sync that begins within `patience` makes
    /// it durable too, and only past that does this one flush the disk.
    pub fn commit_within(self, patience: std::time::Duration) -> Result<Appended, AuditError> {
        group_sync::commit_within(&self.file, self.ticket, patience).map_err(|source| {
            AuditError {
                path: self.path,
                what: "fsync".into(),
                source,
            }
        })?;
        crate::metrics::audit_flushed(self.written.elapsed());
        Ok(self.appended)
    }
}

/// An audit log at a path.
#[derive(Clone)]
pub struct AuditLog {
    path: PathBuf,
    key: Option<zeroize::Zeroizing<Vec<u8>>>,
    previous_keys: Vec<zeroize::Zeroizing<Vec<u8>>>,
    rotate_bytes: Option<u64>,
    keep_rotated: Option<u32>,
    forward: Option<std::sync::Arc<super::forward::Forwarder>>,
}

/// The last record's `seq` and `hash`, as the head file keeps them, with
/// the head's write counter and (keyed) its MAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    /// Last sequence number (0: empty log).
    pub seq: u64,
    /// Last hash (`GENESIS` for an empty log).
    pub hash: String,
    /// How many times the head file was written, continued from the head
    /// before (0 when the head file does not say).
    pub counter: u64,
    /// `hmac-sha256:` over `seq`, `hash` and `counter` under the chain's
    /// key ([`head_mac`]); `None` for an unkeyed chain.
    pub mac: Option<String>,
}

impl Head {
    /// The head of a chain whose last record is `seq` with `hash` (no
    /// counter, no MAC: as a record, not a head file, says it).
    pub(crate) fn at(seq: u64, hash: &str) -> Head {
        Head {
            seq,
            hash: hash.to_string(),
            counter: 0,
            mac: None,
        }
    }

    /// Whether the head's MAC verifies under `key`.
    pub(crate) fn vouched_by(&self, key: &[u8]) -> bool {
        self.mac
            .as_deref()
            .is_some_and(|mac| head_mac_matches(key, self.seq, &self.hash, self.counter, mac))
    }
}

/// The head file beside a log.
pub(crate) fn head_path(log: &Path) -> PathBuf {
    let mut p = log.as_os_str().to_owned();
    p.push(".head");
    PathBuf::from(p)
}

/// Reads a head file (`None` when it does not exist).
pub(crate) fn read_head(log: &Path) -> std::io::Result<Option<Head>> {
    read_head_bytes(log)?
        .map(|bytes| parse_head(&bytes))
        .transpose()
}

/// A head file's bytes (`None` when it does not exist).
fn read_head_bytes(log: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match std::fs::read(head_path(log)) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A head file's content as a [`Head`] (`InvalidData` when garbled).
fn parse_head(bytes: &[u8]) -> std::io::Result<Head> {
    let invalid = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| invalid(&format!("head file: {e}")))?;
    let seq = v["seq"]
        .as_u64()
        .ok_or_else(|| invalid("head file without seq"))?;
    let hash = v["hash"]
        .as_str()
        .ok_or_else(|| invalid("head file without hash"))?
        .to_string();
    let counter = match &v["counter"] {
        Value::Null => 0,
        c => c
            .as_u64()
            .ok_or_else(|| invalid("head file with a counter that is not a number"))?,
    };
    let mac = match &v["mac"] {
        Value::Null => None,
        m => Some(
            m.as_str()
                .ok_or_else(|| invalid("head file with a mac that is not a string"))?
                .to_string(),
        ),
    };
    Ok(Head {
        seq,
        hash,
        counter,
        mac,
    })
}

/// What this process's last append left behind: the log file (device,
/// inode) and its length, and the head file's exact bytes. An append that
/// finds, under the lock, the same log file at that length and the head file
/// still holding those bytes knows how the log ends without reading its tail
/// back (a daemon appends twice per spawn). Any difference — another
/// writer, a rotation, a torn line, a head rewritten or garbled — means the
/// full reading, with its notes.
struct LastAppend {
    log: PathBuf,
    /// The key id the chain was continued under (a writer with another key
    /// must read the tail and seal the rotation).
    key_id: Option<String>,
    file: (u64, u64),
    len: u64,
    head: Head,
    head_bytes: Vec<u8>,
}

static LAST_APPEND: std::sync::Mutex<Option<LastAppend>> = std::sync::Mutex::new(None);

/// Takes the last append's state (leaving none behind, so that an append
/// that fails half-way is never trusted).
fn take_last_append() -> Option<LastAppend> {
    LAST_APPEND.lock().ok()?.take()
}

fn keep_last_append(last: LastAppend) {
    if let Ok(mut slot) = LAST_APPEND.lock() {
        *slot = Some(last);
    }
}

/// Now, as RFC 3339 UTC with milliseconds (the audit `ts` format).
pub(crate) fn now_rfc3339_millis() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    now.format(&fmt).unwrap_or_default()
}

/// A fresh audit id: 64 bits from `getrandom(2)` (no descriptor needed).
pub(crate) fn new_audit_id() -> std::io::Result<String> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(format!("getrandom: {e}")))?;
    Ok(hex::encode(bytes))
}

impl AuditLog {
    /// Opens (creating if needed, directory 0750 and file 0640) the log at `path`,
    /// checking it can be written.
    pub fn open(path: &Path) -> Result<AuditLog, AuditError> {
        let log = AuditLog {
            path: path.to_path_buf(),
            key: None,
            previous_keys: Vec::new(),
            rotate_bytes: None,
            keep_rotated: None,
            forward: None,
        };
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(dir)
                .map_err(|e| log.err("create its directory", e))?;
        }
        OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(path)
            .map_err(|e| log.err("open for appending", e))?;
        Ok(log)
    }

    /// Keys the chain with HMAC-SHA256 (the operator's `[audit] hmac_key_file`).
    pub fn with_key(mut self, key: Vec<u8>) -> AuditLog {
        self.key = Some(zeroize::Zeroizing::new(key));
        self
    }

    /// Retired keys (`[audit] previous_hmac_key_files`): a chain last sealed
    /// with one of them is continued after a key rotation note sealed with
    /// it and vouched for by the current key.
    pub fn with_previous_keys(mut self, keys: Vec<Vec<u8>>) -> AuditLog {
        self.previous_keys = keys.into_iter().map(zeroize::Zeroizing::new).collect();
        self
    }

    /// The current key, then the retired ones.
    fn known_keys(&self) -> impl Iterator<Item = &[u8]> {
        self.key
            .iter()
            .chain(self.previous_keys.iter())
            .map(|k| k.as_slice())
    }

    /// Whether `record`'s stored hash is its chain hash under one of this
    /// writer's keys (the current one, or a retired one), or its plain
    /// SHA-256 on an unkeyed chain.
    pub fn seals(&self, record: &Map<String, Value>) -> bool {
        let stored = record.get("hash").and_then(Value::as_str).unwrap_or("");
        if stored.starts_with("sha256:") {
            return super::record::sealed_with(record, None);
        }
        self.known_keys()
            .any(|k| super::record::sealed_with(record, Some(k)))
    }

    fn key_id(&self) -> Option<String> {
        self.key.as_deref().map(|k| key_id(k))
    }

    /// Starts a new file once the current one reaches `bytes`; the full one
    /// becomes `<log>.N` (N counting up) and the chain continues across files.
    pub fn with_rotation(mut self, bytes: u64) -> AuditLog {
        self.rotate_bytes = Some(bytes.max(1));
        self
    }

    /// Keeps at most `keep` (at least 1) rotated files: at each rotation the
    /// oldest beyond that are removed, after a durable `note` record says so.
    pub fn with_retention(mut self, keep: u32) -> AuditLog {
        self.keep_rotated = Some(keep.max(1));
        self
    }

    /// Sends a copy of every record, once written, to the host's log
    /// service (`[audit] forward`, [`super::forward`]).
    pub fn with_forward(mut self, forwarder: super::forward::Forwarder) -> AuditLog {
        self.forward = Some(std::sync::Arc::new(forwarder));
        self
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, what: &str, source: std::io::Error) -> AuditError {
        AuditError {
            path: self.path.clone(),
            what: what.to_string(),
            source,
        }
    }

    /// Appends one record durably. `audit_id` is reused when given (an exit
    /// record carries its decision's id), else a fresh one is made.
    pub fn append(
        &self,
        kind: Kind,
        audit_id: Option<&str>,
        body: Map<String, Value>,
    ) -> Result<Appended, AuditError> {
        self.write(kind, audit_id, body)?.commit()
    }

    /// Chains and writes one record without waiting for the disk: nothing the
    /// record allows may happen before [`Unsynced::commit`] returns.
    pub fn write(
        &self,
        kind: Kind,
        audit_id: Option<&str>,
        body: Map<String, Value>,
    ) -> Result<Unsynced, AuditError> {
        self.write_batch(kind, audit_id, vec![body])
    }

    /// Chains and writes records of one `kind` and audit id (a fresh one
    /// when `None`), in order, under one hold of the lock, without waiting
    /// for the disk: committing the returned [`Unsynced`] (the last
    /// record's) makes them all durable. An empty batch writes nothing but
    /// what the log itself needs (a torn line's note).
    pub fn write_batch(
        &self,
        kind: Kind,
        audit_id: Option<&str>,
        bodies: Vec<Map<String, Value>>,
    ) -> Result<Unsynced, AuditError> {
        let mut lock_path = self.path.as_os_str().to_owned();
        lock_path.push(".lock");
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o640)
            .open(PathBuf::from(lock_path))
            .map_err(|e| self.err("open the lock file", e))?;
        let lock = Flock::lock(lock_file, FlockArg::LockExclusive)
            .map_err(|(_, e)| self.err("flock", e.into()))?;
        let retention = self.rotate_if_full().map_err(|e| self.err("rotate", e))?;
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| self.err("open for appending", e))?;
        let before = file.metadata().map_err(|e| self.err("stat the log", e))?;
        let at = (before.dev(), before.ino());
        let head_bytes =
            read_head_bytes(&self.path).map_err(|e| self.err("read the head file", e))?;
        let key_id = self.key_id();
        let known = take_last_append().filter(|last| {
            last.log == self.path
                && last.key_id == key_id
                && last.file == at
                && last.len == before.len()
                && head_bytes.as_deref() == Some(last.head_bytes.as_slice())
        });
        let mut written = 0u64;
        let mut head = match known {
            Some(last) => last.head,
            None => self.chain_from_disk(&mut file, head_bytes.as_deref(), &mut written)?,
        };
        if let Some(retention) = retention {
            head = self.remove_old_rotated(&mut file, at, &head, retention, &mut written)?;
        }
        let id = match audit_id {
            Some(id) => id.to_string(),
            None => new_audit_id().map_err(|e| self.err("make an audit id", e))?,
        };
        let mut head_text = Vec::new();
        for body in bodies {
            let (next, text) =
                self.write_record(&mut file, &head, kind, &id, body, &mut written)?;
            head = next;
            head_text = text;
        }
        keep_last_append(LastAppend {
            log: self.path.clone(),
            key_id,
            file: at,
            len: before.len() + written,
            head: head.clone(),
            head_bytes: head_text,
        });
        let ticket = group_sync::written(&file, at);
        // The record and the head are written under the lock (so the chain
        // stays in order); the sync happens after it is released, and within
        // this process one sync serves every record written before it began
        // (group commit, `group_sync`).
        drop(lock);
        Ok(Unsynced {
            file,
            path: self.path.clone(),
            appended: Appended {
                seq: head.seq,
                audit_id: id,
            },
            ticket,
            written: std::time::Instant::now(),
        })
    }

    /// Where the chain continues when this process does not know how the
    /// log ends: from the head file or the log's last complete record,
    /// whichever is further along, after noting a torn last line or a head
    /// file that is garbled, or (keyed) missing or not vouched for by the
    /// key, and after sealing a key rotation when the chain was last sealed
    /// with another key. `written` counts the bytes appended.
    fn chain_from_disk(
        &self,
        file: &mut File,
        head_bytes: Option<&[u8]>,
        written: &mut u64,
    ) -> Result<Head, AuditError> {
        let mut tail = read_tail(file).map_err(|e| self.err("read the last record", e))?;
        if tail.last.is_none() {
            // A log rotated a moment ago is empty: its chain ends in the
            // newest rotated file.
            if let Some((_, newest)) = rotated_files(&self.path).pop() {
                let rotated = File::open(&newest)
                    .and_then(|f| read_tail(&f))
                    .map_err(|e| self.err("read the last rotated file's last record", e))?;
                tail.last = rotated.last;
                tail.record = rotated.record;
            }
        }
        let mut notes = Vec::new();
        // The head file counts as where the chain ends only when it parses
        // and, with a key, its MAC verifies under a key this writer holds:
        // a head rewritten without the key must not move the chain.
        let (recorded, counter) = match head_bytes.map(parse_head) {
            None => {
                if self.key.is_some() && tail.last.is_some() {
                    notes.push(json!({"note": "head file missing; chained from the log's last complete record", "head_error": "missing"}));
                }
                (None, 0)
            }
            Some(Err(e)) => {
                notes.push(json!({"note": "head file unreadable; chained from the log's last complete record", "head_error": e.to_string()}));
                (None, 0)
            }
            Some(Ok(head)) => {
                let counter = head.counter;
                if self.key.is_some()
                    && !self.known_keys().any(|k| head.vouched_by(k))
                    && !unkeyed_head_of(&head, tail.record.as_ref())
                {
                    notes.push(json!({"note": "head file not vouched for by the key (its MAC is missing or wrong); chained from the log's last complete record", "head_error": "mac", "head_seq": head.seq}));
                    // Its counter is not vouched for either: counting starts
                    // again after the note.
                    (None, 0)
                } else {
                    (Some(head), counter)
                }
            }
        };
        // The chain continues from whichever is further along: the head file,
        // or the log's last complete record (a crash between writing a record
        // and updating the head leaves the head behind — found by the kill -9
        // fault test). A log shorter than its head (records cut off) keeps the
        // head, so the gap stays visible to `verify`.
        let from_record = match (&tail.last, &recorded) {
            (Some(last), Some(head)) => last.seq > head.seq,
            (Some(_), None) => true,
            (None, _) => false,
        };
        let mut head = if from_record {
            tail.last.clone()
        } else {
            recorded.clone()
        }
        .unwrap_or_else(|| Head::at(0, GENESIS));
        head.counter = counter;
        if head.seq > 0 {
            let same_point = from_record || tail.last.as_ref().map(|l| l.seq) == Some(head.seq);
            let last = tail.record.as_ref().filter(|_| same_point);
            let under = self.continues_under(from_record, recorded.as_ref(), last);
            self.check_key(&head, under)?;
            if let (Some(key), Under::Key(Some(_)) | Under::Unkeyed) = (&self.key, under) {
                let from = match under {
                    Under::Key(Some(i)) => self.previous_keys.get(i).map(|k| k.as_slice()),
                    _ => None,
                };
                head = self.write_key_rotation(file, &head, from, key, written)?;
            }
        }
        if let Some(torn) = tail.torn {
            file.write_all(b"\n")
                .map_err(|e| self.err("close a torn line", e))?;
            *written += 1;
            notes.insert(0, json!({"note": "torn line left by an interrupted write; chained past", "torn_at_byte": torn.0, "torn_bytes": torn.1}));
        }
        for note in notes {
            let body = note.as_object().cloned().unwrap_or_default();
            let id = new_audit_id().map_err(|e| self.err("make an audit id", e))?;
            head = self
                .write_record(file, &head, Kind::Note, &id, body, written)?
                .0;
        }
        Ok(head)
    }

    /// The key the chain goes on under after the point it continues from:
    /// the key the head file's MAC verifies under when the head names that
    /// point, else the key that sealed the last record (the new key after a
    /// rotation note).
    fn continues_under(
        &self,
        from_record: bool,
        head: Option<&Head>,
        last: Option<&Map<String, Value>>,
    ) -> Under {
        let position = |found: Option<usize>| match found {
            Some(0) if self.key.is_some() => Under::Key(None),
            Some(i) => Under::Key(Some(i - usize::from(self.key.is_some()))),
            None => Under::Unknown,
        };
        if let (false, Some(head)) = (from_record, head) {
            if head.mac.is_some() {
                return position(self.known_keys().position(|k| head.vouched_by(k)));
            }
        }
        let Some(record) = last else {
            return match head {
                Some(h) if h.hash.starts_with("sha256:") && h.mac.is_none() => Under::Unkeyed,
                _ => Under::Unknown,
            };
        };
        if let Some((_, to)) = key_rotation(record) {
            return position(self.known_keys().position(|k| key_id(k) == to));
        }
        let stored = record.get("hash").and_then(Value::as_str).unwrap_or("");
        if stored.starts_with("sha256:") {
            return Under::Unkeyed;
        }
        position(self.known_keys().position(|k| sealed_with(record, Some(k))))
    }

    /// Refuses to continue a chain under a key this writer cannot seal the
    /// switch from: a keyed chain without a key, or a key it does not hold.
    fn check_key(&self, head: &Head, under: Under) -> Result<(), AuditError> {
        let refuse = |why: String| {
            Err(self.err(
                "continue the chain",
                std::io::Error::new(std::io::ErrorKind::InvalidData, why),
            ))
        };
        match (&self.key, under) {
            (None, Under::Unkeyed) | (Some(_), Under::Unkeyed | Under::Key(_)) => Ok(()),
            (None, _) => refuse(format!(
                "the chain is keyed (its last record, seq {}, is sealed with an HMAC key) and no key is set: set [audit] hmac_key_file to the key it was written with",
                head.seq
            )),
            (Some(_), _) => refuse(format!(
                "the chain's last record (seq {}) is sealed with a key this writer does not hold ([audit] hmac_key_file is {}): add the key it was written with to [audit] previous_hmac_key_files, so that the switch to the new key can be sealed by both",
                head.seq,
                self.key_id().unwrap_or_default()
            )),
        }
    }

    /// Writes the note that moves the chain from `from` (`None`: unkeyed)
    /// to `to`, sealed by the old key and vouched for by the new one.
    fn write_key_rotation(
        &self,
        file: &mut File,
        head: &Head,
        from: Option<&[u8]>,
        to: &[u8],
        written: &mut u64,
    ) -> Result<Head, AuditError> {
        let id = new_audit_id().map_err(|e| self.err("make an audit id", e))?;
        let seq = head.seq + 1;
        let record = seal_key_rotation(seq, &now_rfc3339_millis(), &id, &head.hash, from, to);
        Ok(self
            .append_sealed(file, head, Sealed::from_record(record), written)?
            .0)
    }

    /// Appends one record after `head` (naming this machine, `super::machine`) and
    /// updates the head file: the new
    /// head and the head file's bytes. `written` counts the bytes appended.
    fn write_record(
        &self,
        file: &mut File,
        head: &Head,
        kind: Kind,
        id: &str,
        body: Map<String, Value>,
        written: &mut u64,
    ) -> Result<(Head, Vec<u8>), AuditError> {
        let seq = head.seq + 1;
        let key = self.key.as_deref().map(Vec::as_slice);
        let mut body = body;
        body.insert("machine".into(), super::machine::this_machine().clone());
        let record = seal(kind, seq, &now_rfc3339_millis(), id, &head.hash, body, key);
        self.append_sealed(file, head, record, written)
    }

    /// Appends a sealed record after `head` and updates the head file (its
    /// counter one more than `head`'s): the new head and the head file's
    /// bytes.
    fn append_sealed(
        &self,
        file: &mut File,
        head: &Head,
        sealed: Sealed,
        written: &mut u64,
    ) -> Result<(Head, Vec<u8>), AuditError> {
        let Sealed { record, line } = sealed;
        let seq = head.seq + 1;
        let hash = record["hash"].as_str().unwrap_or_default().to_string();
        file.write_all(&line).map_err(|e| self.err("write", e))?;
        *written += line.len() as u64;
        if let Some(forward) = &self.forward {
            forward.send(&record, &line);
        }
        let mut new_head = Head::at(seq, &hash);
        new_head.counter = head.counter.saturating_add(1);
        new_head.mac = self
            .key
            .as_deref()
            .map(|k| head_mac(k, seq, &hash, new_head.counter));
        let text = self.write_head(&new_head)?;
        Ok((new_head, text))
    }

    /// Overwrites the head file in place with a fixed-width line: one small
    /// write inside the first sector, no rename (which costs ext4 a flush of
    /// the new file each time). A torn or garbled head is reported and
    /// chained past by the next append, never trusted.
    fn write_head(&self, head: &Head) -> Result<Vec<u8>, AuditError> {
        use std::os::unix::fs::FileExt;
        let mut fields = json!({"seq": head.seq, "hash": head.hash, "counter": head.counter});
        if let Some(mac) = &head.mac {
            fields["mac"] = json!(mac);
        }
        let mut text = fields.to_string();
        while text.len() + 1 < HEAD_WIDTH {
            text.push(' ');
        }
        text.push('\n');
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o640)
            .open(head_path(&self.path))
            .map_err(|e| self.err("open the head file", e))?;
        f.write_all_at(text.as_bytes(), 0)
            .and_then(|()| match f.metadata()?.len() {
                n if n == text.len() as u64 => Ok(()),
                _ => f.set_len(text.len() as u64),
            })
            .map_err(|e| self.err("write the head file", e))?;
        Ok(text.into_bytes())
    }
}

/// The head file's line width: padded so that every update overwrites the
/// same bytes (two `hmac-sha256:` values and two u64 fit within it, and it
/// stays inside the first 512-byte sector).
const HEAD_WIDTH: usize = 256;

/// Whether `head` is the MAC-less head of an unkeyed chain that ends in
/// `last`: the same `seq` and plain `sha256:` hash, and `last` no key
/// rotation note (after which the chain is keyed and its head must carry a
/// MAC). A writer given a key for such a chain moves it to the key.
fn unkeyed_head_of(head: &Head, last: Option<&Map<String, Value>>) -> bool {
    let Some(last) = last else {
        return false;
    };
    head.mac.is_none()
        && head.hash.starts_with("sha256:")
        && last.get("seq").and_then(Value::as_u64) == Some(head.seq)
        && last.get("hash").and_then(Value::as_str) == Some(head.hash.as_str())
        && key_rotation(last).is_none()
}

/// The key a chain goes on under after its last record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Under {
    /// Plain SHA-256.
    Unkeyed,
    /// The writer's key (`None`) or its retired key number `i`.
    Key(Option<usize>),
    /// A key the writer does not hold.
    Unknown,
}

impl AuditLog {
    /// Renames a full log to `<log>.N` and starts an empty one; with
    /// retention, says which rotated files are now beyond the number kept.
    fn rotate_if_full(&self) -> std::io::Result<Option<Retention>> {
        let Some(limit) = self.rotate_bytes else {
            return Ok(None);
        };
        if std::fs::metadata(&self.path)?.len() < limit {
            return Ok(None);
        }
        let next = rotated_files(&self.path).last().map_or(1, |(n, _)| n + 1);
        std::fs::rename(&self.path, rotated_name(&self.path, next))?;
        OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(&self.path)?
            .sync_all()?;
        Ok(self
            .keep_rotated
            .and_then(|keep| Retention::plan(&self.path, keep as usize)))
    }

    /// Writes the retention `note`, makes it durable, then removes the
    /// files it names. Returns the new head.
    fn remove_old_rotated(
        &self,
        file: &mut File,
        at: (u64, u64),
        head: &Head,
        retention: Retention,
        written: &mut u64,
    ) -> Result<Head, AuditError> {
        let names: Vec<String> = retention
            .remove
            .iter()
            .map(|p| {
                p.file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
            })
            .collect();
        let body = json!({
            "note": format!("rotated files removed ([audit] keep_rotated = {})", retention.keep),
            "removed_files": names,
            "chain_starts_at": {"seq": retention.starts_at.0, "prev": retention.starts_at.1},
        });
        let id = new_audit_id().map_err(|e| self.err("make an audit id", e))?;
        let (next, _) = self.write_record(
            file,
            head,
            Kind::Note,
            &id,
            body.as_object().cloned().unwrap_or_default(),
            written,
        )?;
        // The note is on disk before any file it names is gone: a crash in
        // between leaves files that `verify` still walks, never a gap.
        group_sync::commit(file, group_sync::written(file, at))
            .map_err(|e| self.err("fsync the retention note", e))?;
        for old in &retention.remove {
            if let Err(e) = std::fs::remove_file(old) {
                tracing::warn!(file = %old.display(), error = %e, "audit retention: cannot remove a rotated file; it stays");
            }
        }
        Ok(next)
    }
}

/// Rotated files to remove and where the chain then starts.
struct Retention {
    keep: usize,
    remove: Vec<PathBuf>,
    /// `seq` and `prev` of the first record of the oldest file kept.
    starts_at: (u64, String),
}

impl Retention {
    /// The files beyond `keep`, oldest first, or `None` when there are none
    /// or the first record of the oldest one kept cannot be read (nothing
    /// is removed then: `verify` could not tell retention from deletion).
    fn plan(log: &Path, keep: usize) -> Option<Retention> {
        let files = rotated_files(log);
        let excess = files.len().checked_sub(keep).filter(|n| *n > 0)?;
        let oldest_kept = &files[excess].1;
        let starts_at = match first_record(oldest_kept) {
            Ok(Some(start)) => start,
            Ok(None) | Err(_) => {
                tracing::warn!(file = %oldest_kept.display(), "audit retention: the first record of the oldest file kept is unreadable; no rotated file is removed");
                return None;
            }
        };
        Some(Retention {
            keep,
            remove: files[..excess].iter().map(|(_, p)| p.clone()).collect(),
            starts_at,
        })
    }
}

/// The longest first line [`first_record`] reads.
const FIRST_LINE_MAX: u64 = 16 << 20;

/// `seq` and `prev` of a file's first record (`None`: not a record).
pub(crate) fn first_record(path: &Path) -> std::io::Result<Option<(u64, String)>> {
    use std::io::{BufRead, Read};
    let mut line = Vec::new();
    std::io::BufReader::new(File::open(path)?.take(FIRST_LINE_MAX)).read_until(b'\n', &mut line)?;
    let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(&line) else {
        return Ok(None);
    };
    Ok(record.get("seq").and_then(Value::as_u64).zip(
        record
            .get("prev")
            .and_then(Value::as_str)
            .map(str::to_string),
    ))
}

/// `<log>.N`.
pub(crate) fn rotated_name(log: &Path, n: u64) -> PathBuf {
    let mut p = log.as_os_str().to_owned();
    p.push(format!(".{n}"));
    PathBuf::from(p)
}

/// The rotated files of a log, oldest first: `(N, path)`.
pub(crate) fn rotated_files(log: &Path) -> Vec<(u64, PathBuf)> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name().and_then(|n| n.to_str())) else {
        return Vec::new();
    };
    let prefix = format!("{name}.");
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e
                .file_name()
                .to_str()?
                .strip_prefix(&prefix)?
                .parse::<u64>()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    out.sort();
    out
}
