//! The append-only audit file. Every append takes an exclusive `flock` on a
//! lock file beside the log (so `run` and `serve` can share it), reads the
//! head (`<log>.head`: the last `seq` and `hash`), chains the new record to
//! it, writes one JSON line and replaces the head atomically; the `fsync`s
//! come after the lock is released, so concurrent writers commit together,
//! and `append` returns only once its record is durable. A
//! torn last line left by a crash is detected, reported in a `note` record
//! and chained past — never silently dropped.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde_json::{json, Map, Value};

use super::record::{seal, Kind, GENESIS};

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

/// An audit log at a path.
pub struct AuditLog {
    path: PathBuf,
    key: Option<zeroize::Zeroizing<Vec<u8>>>,
    rotate_bytes: Option<u64>,
}

/// The last record's `seq` and `hash`, as the head file keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Last sequence number (0: empty log).
    pub seq: u64,
    /// Last hash (`GENESIS` for an empty log).
    pub hash: String,
}

/// The head file beside a log.
pub fn head_path(log: &Path) -> PathBuf {
    let mut p = log.as_os_str().to_owned();
    p.push(".head");
    PathBuf::from(p)
}

/// Reads a head file (`None` when it does not exist).
pub fn read_head(log: &Path) -> std::io::Result<Option<Head>> {
    match std::fs::read_to_string(head_path(log)) {
        Ok(text) => {
            let v: Value = serde_json::from_str(&text).map_err(std::io::Error::other)?;
            let seq = v["seq"]
                .as_u64()
                .ok_or_else(|| std::io::Error::other("head without seq"))?;
            let hash = v["hash"]
                .as_str()
                .ok_or_else(|| std::io::Error::other("head without hash"))?
                .to_string();
            Ok(Some(Head { seq, hash }))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn now_rfc3339_millis() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    now.format(&fmt).unwrap_or_default()
}

fn random_id() -> String {
    let mut bytes = [0u8; 8];
    let _ = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    hex::encode(bytes)
}

impl AuditLog {
    /// Opens (creating if needed, directory 0750 and file 0640) the log at `path`,
    /// checking it can be written.
    pub fn open(path: &Path) -> Result<AuditLog, AuditError> {
        let log = AuditLog {
            path: path.to_path_buf(),
            key: None,
            rotate_bytes: None,
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

    /// Starts a new file once the current one reaches `bytes`; the full one
    /// becomes `<log>.N` (N counting up) and the chain continues across files.
    pub fn with_rotation(mut self, bytes: u64) -> AuditLog {
        self.rotate_bytes = Some(bytes.max(1));
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
        self.rotate_if_full().map_err(|e| self.err("rotate", e))?;
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| self.err("open for appending", e))?;
        let recorded = read_head(&self.path)
            .map_err(|e| self.err("read the head file", e))?
            .unwrap_or(Head {
                seq: 0,
                hash: GENESIS.into(),
            });
        // The chain continues from whichever is further along: the head file,
        // or the log's last complete record (a crash between writing a record
        // and updating the head leaves the head one behind — found by the
        // kill -9 fault test). A log shorter than its head (records cut off)
        // keeps the head, so the gap stays visible to `verify`.
        let last =
            last_complete_record(&mut file).map_err(|e| self.err("read the last record", e))?;
        let mut head = match last {
            Some(last) if last.seq > recorded.seq => last,
            _ => recorded,
        };
        if let Some(torn) = torn_tail(&mut file).map_err(|e| self.err("check the last line", e))? {
            file.write_all(b"\n")
                .map_err(|e| self.err("close a torn line", e))?;
            let note = json!({"note": "torn line left by an interrupted write; chained past", "torn_at_byte": torn.0, "torn_bytes": torn.1});
            head = self.write_record(
                &mut file,
                &head,
                Kind::Note,
                &random_id(),
                note.as_object().cloned().unwrap_or_default(),
            )?;
        }
        let id = audit_id.map_or_else(random_id, str::to_string);
        let next = self.write_record(&mut file, &head, kind, &id, body)?;
        // Group commit: the record and the head are written under the lock (so
        // the chain stays in order), the fsyncs happen after it is released, so
        // concurrent writers' flushes share the same journal commits. The call
        // returns only once the record is on disk.
        drop(lock);
        file.sync_data().map_err(|e| self.err("fsync", e))?;
        File::open(head_path(&self.path))
            .and_then(|h| h.sync_data())
            .map_err(|e| self.err("fsync the head file", e))?;
        Ok(Appended {
            seq: next.seq,
            audit_id: id,
        })
    }

    fn write_record(
        &self,
        file: &mut File,
        head: &Head,
        kind: Kind,
        id: &str,
        body: Map<String, Value>,
    ) -> Result<Head, AuditError> {
        let seq = head.seq + 1;
        let key = self.key.as_deref().map(Vec::as_slice);
        let record = seal(kind, seq, &now_rfc3339_millis(), id, &head.hash, body, key);
        let hash = record["hash"].as_str().unwrap_or_default().to_string();
        let mut line = serde_json::to_vec(&Value::Object(record))
            .map_err(|e| self.err("encode", std::io::Error::other(e)))?;
        line.push(b'\n');
        file.write_all(&line).map_err(|e| self.err("write", e))?;
        let new_head = Head { seq, hash };
        self.write_head(&new_head)?;
        Ok(new_head)
    }

    fn write_head(&self, head: &Head) -> Result<(), AuditError> {
        let path = head_path(&self.path);
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let text = json!({"seq": head.seq, "hash": head.hash}).to_string();
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o640)
            .open(&tmp)
            .map_err(|e| self.err("write the head file", e))?;
        f.write_all(text.as_bytes())
            .map_err(|e| self.err("write the head file", e))?;
        std::fs::rename(&tmp, &path).map_err(|e| self.err("replace the head file", e))
    }
}

impl AuditLog {
    fn rotate_if_full(&self) -> std::io::Result<()> {
        let Some(limit) = self.rotate_bytes else {
            return Ok(());
        };
        if std::fs::metadata(&self.path)?.len() < limit {
            return Ok(());
        }
        let next = rotated_files(&self.path).last().map_or(1, |(n, _)| n + 1);
        std::fs::rename(&self.path, rotated_name(&self.path, next))?;
        OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(&self.path)?
            .sync_all()
    }
}

/// `<log>.N`.
pub fn rotated_name(log: &Path, n: u64) -> PathBuf {
    let mut p = log.as_os_str().to_owned();
    p.push(format!(".{n}"));
    PathBuf::from(p)
}

/// The rotated files of a log, oldest first: `(N, path)`.
pub fn rotated_files(log: &Path) -> Vec<(u64, PathBuf)> {
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

/// The `seq` and `hash` of the last newline-terminated record, if any.
fn last_complete_record(file: &mut File) -> std::io::Result<Option<Head>> {
    let len = file.metadata()?.len();
    let window = len.min(1 << 20);
    if window == 0 {
        return Ok(None);
    }
    file.seek(SeekFrom::Start(len - window))?;
    let mut tail = vec![0u8; window as usize];
    file.read_exact(&mut tail)?;
    let Some(end) = tail.iter().rposition(|b| *b == b'\n') else {
        return Ok(None);
    };
    let complete = &tail[..end];
    let start = complete
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let Ok(record) = serde_json::from_slice::<Value>(&complete[start..]) else {
        return Ok(None);
    };
    match (record["seq"].as_u64(), record["hash"].as_str()) {
        (Some(seq), Some(hash)) => Ok(Some(Head {
            seq,
            hash: hash.to_string(),
        })),
        _ => Ok(None),
    }
}

/// If the file does not end with a newline, the offset and length of its torn last line.
fn torn_tail(file: &mut File) -> std::io::Result<Option<(u64, u64)>> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(None);
    }
    let window = len.min(1 << 20);
    file.seek(SeekFrom::Start(len - window))?;
    let mut tail = vec![0u8; window as usize];
    file.read_exact(&mut tail)?;
    if tail.last() == Some(&b'\n') {
        return Ok(None);
    }
    let start = tail
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(len - window, |i| len - window + i as u64 + 1);
    Ok(Some((start, len - start)))
}
