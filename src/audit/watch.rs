//! The daemon's watch over the live log between its own appends: at each
//! heartbeat it reads the file again and checks that the bytes it saw the
//! last time are still there, unchanged — an audit log only ever grows at
//! its end. An edit, a cut or a replaced file under the running daemon is
//! then written into the log itself as a `note` (and to the daemon's own
//! log), instead of waiting for someone to run `verify`.
//!
//! What is compared is the SHA-256 of the file's first N bytes, N being
//! where its last complete line ended at the last check; a rotation (the
//! file renamed to `<log>.K`) is followed by inode, and the renamed file is
//! checked the same way. The lines appended since are checked as they are
//! first seen: each must be a record in its canonical form whose hash is
//! its own (under one of the writer's keys), so a record edited between its
//! append and the next check is found too.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::log::rotated_files;

/// One record as read.
type Record = Map<String, Value>;

/// What the watch found changed since its last check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Changed {
    /// The file is shorter than it was: records cut off its end.
    Shortened {
        /// The file.
        file: PathBuf,
        /// Its length at the last check.
        was: u64,
        /// Its length now.
        now: u64,
    },
    /// Bytes the file already had are different now: rewritten.
    Rewritten {
        /// The file.
        file: PathBuf,
        /// How many leading bytes were compared.
        bytes: u64,
    },
    /// The live file is another file, and the one seen last is neither
    /// there nor among the rotated files: replaced or removed.
    Replaced {
        /// The log.
        file: PathBuf,
    },
    /// A line appended since the last check is not a record whose hash
    /// is its own: edited after it was written, or not written by spawnd.
    Unsealed {
        /// The file.
        file: PathBuf,
        /// Where the line starts.
        at_byte: u64,
    },
}

impl Changed {
    /// One sentence for the note and the daemon's log.
    pub(crate) fn describe(&self) -> String {
        match self {
            Changed::Shortened { file, was, now } => format!(
                "{} is {now} bytes, shorter than the {was} it was at the last check: records were cut off its end",
                file.display()
            ),
            Changed::Rewritten { file, bytes } => format!(
                "the first {bytes} bytes of {} are not what they were at the last check: records were rewritten",
                file.display()
            ),
            Changed::Replaced { file } => format!(
                "{} is another file than at the last check, and the one it was is not among the rotated files: the log was replaced or removed",
                file.display()
            ),
            Changed::Unsealed { file, at_byte } => format!(
                "the line at byte {at_byte} of {}, appended since the last check, is not a record whose hash is its own: it was edited after it was written",
                file.display()
            ),
        }
    }

    /// The note record's body.
    pub(crate) fn note(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert(
            "note".into(),
            format!(
                "the log changed under the running daemon: {}",
                self.describe()
            )
            .into(),
        );
        let what = match self {
            Changed::Shortened { .. } => "shortened",
            Changed::Rewritten { .. } => "rewritten",
            Changed::Replaced { .. } => "replaced",
            Changed::Unsealed { .. } => "rewritten",
        };
        m.insert("log_changed".into(), what.into());
        m
    }
}

/// A file as last seen: which file, how long, and the hash of its bytes.
#[derive(Debug, Clone)]
struct Seen {
    dev: u64,
    ino: u64,
    len: u64,
    digest: [u8; 32],
}

/// The watch over one log.
#[derive(Debug)]
pub(crate) struct Watch {
    log: PathBuf,
    seen: Option<Seen>,
}

impl Watch {
    /// A watch that has seen nothing yet (its first check only looks).
    pub(crate) fn new(log: &Path) -> Watch {
        Watch {
            log: log.to_path_buf(),
            seen: None,
        }
    }

    /// The log it watches.
    pub(crate) fn log(&self) -> &Path {
        &self.log
    }

    /// Reads the live file again: what changed since the last check, if
    /// anything, and remembers the file as it is now. `seals` says whether
    /// a record's hash is its own (the writer's [`super::AuditLog::seals`]).
    pub(crate) fn check(
        &mut self,
        seals: &dyn Fn(&Record) -> bool,
    ) -> std::io::Result<Option<Changed>> {
        let mut file = File::open(&self.log)?;
        let meta = file.metadata()?;
        let (dev, ino) = (meta.dev(), meta.ino());
        let mut hasher = Sha256::new();
        let mut hashed = 0;
        let mut changed = match self.seen.take() {
            None => None,
            Some(seen) if (seen.dev, seen.ino) == (dev, ino) => {
                let changed = compare(&mut file, &self.log, &seen, &mut hasher)?;
                if changed.is_none() {
                    hashed = seen.len;
                } else {
                    hasher = Sha256::new();
                }
                changed
            }
            Some(seen) => match renamed(&self.log, &seen) {
                // Rotated: the file seen is `<log>.K` now, and must still
                // begin with what was seen; what was appended to it after
                // is checked as new lines are.
                Some(path) => {
                    let mut old = File::open(&path)?;
                    let mut old_hasher = Sha256::new();
                    match compare(&mut old, &path, &seen, &mut old_hasher)? {
                        Some(c) => Some(c),
                        None => new_lines(&mut old, &path, seen.len, seals, &mut old_hasher)?.1,
                    }
                }
                None => Some(Changed::Replaced {
                    file: self.log.clone(),
                }),
            },
        };
        // The lines appended since (or the whole of a new file), each a
        // sealed record, hashed on: what is seen ends with the last
        // complete line.
        let (len, unsealed) = new_lines(&mut file, &self.log, hashed, seals, &mut hasher)?;
        changed = changed.or(unsealed);
        self.seen = Some(Seen {
            dev,
            ino,
            len,
            digest: hasher.finalize().into(),
        });
        Ok(changed)
    }
}

/// Reads `file` from `from` to its last complete line, feeding `hasher`,
/// and checks each line is a sealed record in its canonical form: where
/// the lines read end, and the first line that is not. A line that is not
/// JSON is a torn line when a writer's `note` of it follows (a crash cut
/// it, and the next append closed it and said so); one with no line after
/// it yet is left for the next check, which will see whether the note came.
fn new_lines(
    file: &mut File,
    path: &Path,
    from: u64,
    seals: &dyn Fn(&Record) -> bool,
    hasher: &mut Sha256,
) -> std::io::Result<(u64, Option<Changed>)> {
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let lines: Vec<&[u8]> = bytes[..complete].split_inclusive(|b| *b == b'\n').collect();
    let mut unsealed = None;
    let mut end = 0;
    for (i, line) in lines.iter().enumerate() {
        let text = &line[..line.len() - 1];
        let sealed = match serde_json::from_slice::<Record>(text) {
            Ok(record) => {
                seals(&record) && serde_json::to_vec(&record).ok().as_deref() == Some(text)
            }
            Err(_) => match lines.get(i + 1) {
                None => break,
                Some(next) => is_torn_note(next),
            },
        };
        if !sealed && unsealed.is_none() {
            unsealed = Some(Changed::Unsealed {
                file: path.to_path_buf(),
                at_byte: from + end as u64,
            });
        }
        end += line.len();
    }
    hasher.update(&bytes[..end]);
    Ok((from + end as u64, unsealed))
}

/// Whether `line` is a writer's note of a torn line before it.
fn is_torn_note(line: &[u8]) -> bool {
    serde_json::from_slice::<Record>(line).is_ok_and(|r| {
        r.get("kind").and_then(Value::as_str) == Some("note") && r.contains_key("torn_at_byte")
    })
}

/// The rotated file that is the file `seen` (by device and inode).
fn renamed(log: &Path, seen: &Seen) -> Option<PathBuf> {
    rotated_files(log)
        .into_iter()
        .map(|(_, p)| p)
        .find(|p| std::fs::metadata(p).is_ok_and(|m| (m.dev(), m.ino()) == (seen.dev, seen.ino)))
}

/// Compares the first `seen.len` bytes of `file` with what was seen;
/// `hasher` is left holding them.
fn compare(
    file: &mut File,
    path: &Path,
    seen: &Seen,
    hasher: &mut Sha256,
) -> std::io::Result<Option<Changed>> {
    let now = file.metadata()?.len();
    if now < seen.len {
        return Ok(Some(Changed::Shortened {
            file: path.to_path_buf(),
            was: seen.len,
            now,
        }));
    }
    hash_range(file, 0, seen.len, hasher)?;
    let digest: [u8; 32] = hasher.clone().finalize().into();
    Ok((digest != seen.digest).then(|| Changed::Rewritten {
        file: path.to_path_buf(),
        bytes: seen.len,
    }))
}

/// Hashes `len` bytes of `file` from `from` (fewer if the file ends first).
fn hash_range(file: &mut File, from: u64, len: u64, hasher: &mut Sha256) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(from))?;
    let mut taken = file.take(len);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = taken.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        hasher.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditLog, Kind};

    /// A new log in a directory of its own.
    fn fresh_log() -> (tempfile::TempDir, PathBuf, AuditLog) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        (dir, path, log)
    }

    fn append(log: &AuditLog, op: &str) {
        let body = serde_json::json!({"op": op}).as_object().cloned().unwrap();
        log.append(Kind::Note, None, body).unwrap();
    }

    /// Replaces `from` by `to` (same length) in the file, in place.
    fn edit(path: &Path, from: &str, to: &str) {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.contains(from));
        std::fs::write(path, text.replacen(from, to, 1)).unwrap();
    }

    #[test]
    fn appends_and_rotations_are_quiet_and_edits_cuts_and_replacements_are_not() {
        let (dir, path, log) = fresh_log();
        let seals = |r: &Record| log.seals(r);
        append(&log, "one");
        let mut w = Watch::new(&path);
        assert_eq!(w.check(&seals).unwrap(), None, "the first check only looks");
        append(&log, "two");
        assert_eq!(
            w.check(&seals).unwrap(),
            None,
            "appends are what a log does"
        );
        // Rotated, then a new live file.
        std::fs::rename(&path, dir.path().join("audit.jsonl.1")).unwrap();
        File::create(&path).unwrap();
        append(&log, "three");
        assert_eq!(
            w.check(&seals).unwrap(),
            None,
            "a rotation keeps what was seen"
        );
        // An edit in place of what was seen.
        edit(&path, "three", "thrEe");
        assert!(matches!(
            w.check(&seals).unwrap(),
            Some(Changed::Rewritten { .. })
        ));
        // A cut.
        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 10)
            .unwrap();
        assert!(matches!(
            w.check(&seals).unwrap(),
            Some(Changed::Shortened { .. })
        ));
        // Replaced by another file: neither live nor rotated.
        let other = dir.path().join("other");
        std::fs::write(&other, "").unwrap();
        std::fs::rename(&other, &path).unwrap();
        let replaced = w.check(&seals).unwrap().unwrap();
        assert!(matches!(replaced, Changed::Replaced { .. }));
        assert_eq!(replaced.note()["log_changed"], "replaced");
        assert_eq!(
            w.check(&seals).unwrap(),
            None,
            "and then it watches the new file"
        );
    }

    #[test]
    fn an_edit_of_a_rotated_file_since_the_last_check_is_found() {
        let (dir, path, log) = fresh_log();
        let seals = |r: &Record| log.seals(r);
        append(&log, "one");
        let mut w = Watch::new(&path);
        w.check(&seals).unwrap();
        let rotated = dir.path().join("audit.jsonl.1");
        std::fs::rename(&path, &rotated).unwrap();
        File::create(&path).unwrap();
        append(&log, "two");
        // Edited in place after the rename: same inode.
        let text = std::fs::read_to_string(&rotated).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&rotated)
            .unwrap();
        std::io::Write::write_all(&mut f, text.replacen("one", "ONE", 1).as_bytes()).unwrap();
        assert!(matches!(
            w.check(&seals).unwrap(),
            Some(Changed::Rewritten { .. })
        ));
    }

    #[test]
    fn a_record_edited_before_any_check_saw_it_is_found_as_new_lines_are_checked() {
        let (_dir, path, log) = fresh_log();
        let seals = |r: &Record| log.seals(r);
        append(&log, "one");
        let mut w = Watch::new(&path);
        assert_eq!(w.check(&seals).unwrap(), None);
        append(&log, "two");
        edit(&path, "\"two\"", "\"TWO\"");
        let changed = w.check(&seals).unwrap().unwrap();
        assert!(matches!(changed, Changed::Unsealed { .. }), "{changed:?}");
        assert_eq!(changed.note()["log_changed"], "rewritten");
        // A line no writer wrote, appended.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all_at_end(b"{\"kind\":\"note\"}\n");
        assert!(matches!(
            w.check(&seals).unwrap(),
            Some(Changed::Unsealed { .. })
        ));
    }

    #[test]
    fn a_torn_line_closed_and_noted_by_the_next_writer_is_not_an_edit() {
        let (_dir, path, log) = fresh_log();
        let seals = |r: &Record| log.seals(r);
        append(&log, "one");
        let mut w = Watch::new(&path);
        w.check(&seals).unwrap();
        // A crash cut a line: what the next writer finds.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all_at_end(b"{\"kind\":\"deci");
        assert_eq!(w.check(&seals).unwrap(), None, "an unfinished line waits");
        append(&log, "two");
        assert_eq!(
            w.check(&seals).unwrap(),
            None,
            "closed and noted: {:?}",
            std::fs::read_to_string(&path)
        );
    }

    trait WriteAtEnd {
        fn write_all_at_end(self, bytes: &[u8]);
    }

    impl WriteAtEnd for File {
        fn write_all_at_end(mut self, bytes: &[u8]) {
            std::io::Write::write_all(&mut self, bytes).unwrap();
        }
    }
}
