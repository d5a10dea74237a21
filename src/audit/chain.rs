//! The whole audit chain read back, as `query`, `tail`, `export` and
//! `verify` see it: the rotated files oldest first (`<log>.N`, ascending
//! N), then the live file. [`Follower`] reads records as they are
//! appended, across rotations: it follows the file it has open by its
//! byte offset, and when the log's path names another file (a rotation
//! renamed the one it holds), it drains the file it holds, reads any file
//! rotated after that one, and goes on with the new live file from its
//! start. A record is given once: by `seq`, never one at or below the last
//! given.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::log::rotated_files;

/// One record as read.
pub(crate) type Record = Map<String, Value>;

/// The chain's files, oldest first: the rotated ones, then the live one
/// (when it exists).
pub(crate) fn chain_files(log: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = rotated_files(log).into_iter().map(|(_, p)| p).collect();
    if log.exists() {
        files.push(log.to_path_buf());
    }
    files
}

/// Every complete record of the chain, oldest first. A file that vanished
/// between listing and reading (retention removed it) is skipped; any
/// other error is returned. Lines that are not JSON objects (a torn last
/// line) are skipped: `verify` is what judges them.
pub(crate) fn read_chain(log: &Path) -> std::io::Result<Vec<Record>> {
    let mut records = Vec::new();
    for file in chain_files(log) {
        records.extend(records_of(&file)?);
    }
    Ok(records)
}

/// The complete records of one file; none when it is gone (retention
/// removed it after it was listed).
pub(crate) fn records_of(file: &Path) -> std::io::Result<Vec<Record>> {
    match std::fs::read(file) {
        Ok(bytes) => Ok(complete_records(&bytes).0),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The records of the complete (newline-ended) lines in `bytes`, and how
/// many bytes they took.
fn complete_records(bytes: &[u8]) -> (Vec<Record>, usize) {
    let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let records = bytes[..end]
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice::<Record>(l).ok())
        .collect();
    (records, end)
}

fn seq_of(record: &Record) -> u64 {
    record.get("seq").and_then(Value::as_u64).unwrap_or(0)
}

/// The file a follower holds: open, where it has read to, and which file
/// it is.
struct Held {
    file: File,
    offset: u64,
    dev: u64,
    ino: u64,
}

impl Held {
    fn open(path: &Path, offset: u64) -> std::io::Result<Held> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        Ok(Held {
            file,
            offset,
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    fn is(&self, meta: &std::fs::Metadata) -> bool {
        (meta.dev(), meta.ino()) == (self.dev, self.ino)
    }

    /// The complete records appended since the last read; a line still
    /// being written waits for the next.
    fn read_new(&mut self) -> std::io::Result<Vec<Record>> {
        self.file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        self.file.read_to_end(&mut bytes)?;
        let (records, used) = complete_records(&bytes);
        self.offset += used as u64;
        Ok(records)
    }
}

/// Reads a log's records as they are appended, across rotations.
pub(crate) struct Follower {
    log: PathBuf,
    held: Option<Held>,
    /// The last `seq` given (0: none yet).
    last_seq: u64,
}

impl Follower {
    /// A follower that gives the records after `after_seq` (0: all), the
    /// chain's existing ones first.
    pub(crate) fn after(log: &Path, after_seq: u64) -> Follower {
        Follower {
            log: log.to_path_buf(),
            held: None,
            last_seq: after_seq,
        }
    }

    /// The last `seq` given.
    #[cfg(test)]
    pub(crate) fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// The records appended since the last call (on the first, every record
    /// of the chain after the starting `seq`), each once, in order.
    ///
    /// The live file is opened before the rotated files are listed: a
    /// rotation between the two then leaves the file it renamed among the
    /// rotated ones (read here) or in hand (read from its start), never
    /// between them unread.
    pub(crate) fn poll(&mut self) -> std::io::Result<Vec<Record>> {
        let mut found = Vec::new();
        let after = match self.held.as_mut() {
            None => None,
            Some(held) => {
                found.extend(held.read_new()?);
                let live = match std::fs::metadata(&self.log) {
                    Ok(meta) => Some(meta),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => return Err(e),
                };
                if live.as_ref().is_none_or(|meta| held.is(meta)) {
                    return Ok(self.given(found));
                }
                // Rotated: what was appended to the held file before the
                // rename is read above; files rotated after it, then the
                // new live file, follow.
                found.extend(held.read_new()?);
                Some((held.dev, held.ino))
            }
        };
        let next = match Held::open(&self.log, 0) {
            Ok(next) => Some(next),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let mut rotated = Vec::new();
        for (_, path) in rotated_files(&self.log) {
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if next.as_ref().is_some_and(|n| n.is(&meta)) {
                // Rotated since it was opened: read through the handle.
                break;
            }
            rotated.push(((meta.dev(), meta.ino()), path));
        }
        // The files after the one held; all of them on the first read, or
        // when the held file is gone from the rotated ones too (retention
        // removed it): the seq filter keeps each record once.
        let start = after
            .and_then(|id| rotated.iter().position(|(file, _)| *file == id))
            .map_or(0, |i| i + 1);
        for (_, path) in &rotated[start..] {
            found.extend(records_of(path)?);
        }
        self.held = match next {
            Some(mut next) => {
                found.extend(next.read_new()?);
                Some(next)
            }
            None => None,
        };
        Ok(self.given(found))
    }

    /// The records of `found` after the last `seq` given, each once.
    fn given(&mut self, found: Vec<Record>) -> Vec<Record> {
        let mut given = Vec::with_capacity(found.len());
        for record in found {
            let seq = seq_of(&record);
            if seq > self.last_seq {
                self.last_seq = seq;
                given.push(record);
            }
        }
        given
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::log::AuditLog;
    use crate::audit::record::Kind;
    use serde_json::json;

    fn write(log: &AuditLog, n: u64) {
        for i in 0..n {
            let body = json!({"note": format!("n{i}"), "pad": "x".repeat(200)});
            let body = body.as_object().unwrap().clone();
            log.append(Kind::Note, None, body).unwrap();
        }
    }

    #[test]
    fn the_chain_is_the_rotated_files_oldest_first_then_the_live_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap().with_rotation(2048);
        write(&log, 30);
        let files = chain_files(&path);
        assert!(files.len() >= 3, "{files:?}");
        assert_eq!(files.last().unwrap(), &path);
        let seqs: Vec<u64> = read_chain(&path).unwrap().iter().map(seq_of).collect();
        assert_eq!(seqs, (1..=30).collect::<Vec<u64>>());
    }

    #[test]
    fn a_follower_across_three_rotations_gets_every_record_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap().with_rotation(2048);
        write(&log, 3);
        let mut follower = Follower::after(&path, 0);
        let mut seen: Vec<u64> = follower.poll().unwrap().iter().map(seq_of).collect();
        // Between two polls: appends, then a rotation, more appends, then
        // another rotation and more (two renames before the next poll).
        for batch in [4, 9, 1, 12, 7, 25] {
            write(&log, batch);
            seen.extend(follower.poll().unwrap().iter().map(seq_of));
        }
        assert!(
            rotated_files(&path).len() >= 3,
            "{:?}",
            rotated_files(&path)
        );
        assert_eq!(seen, (1..=61).collect::<Vec<u64>>());
        assert_eq!(follower.last_seq(), 61);
        // Nothing is given twice.
        assert!(follower.poll().unwrap().is_empty());
    }

    #[test]
    fn a_follower_resumes_after_a_seq_and_waits_for_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap().with_rotation(2048);
        write(&log, 20);
        let mut follower = Follower::after(&path, 15);
        let seqs: Vec<u64> = follower.poll().unwrap().iter().map(seq_of).collect();
        assert_eq!(seqs, [16, 17, 18, 19, 20]);
        // Half a line is not a record yet.
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"{\"seq\":21,").unwrap();
        assert!(follower.poll().unwrap().is_empty());
        f.write_all(b"\"kind\":\"note\"}\n").unwrap();
        let seqs: Vec<u64> = follower.poll().unwrap().iter().map(seq_of).collect();
        assert_eq!(seqs, [21]);
    }
}
