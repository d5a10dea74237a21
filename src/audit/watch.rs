//! The daemon's watch over the live log between its own appends: at each
//! heartbeat it reads the file again and checks that the bytes it saw the
//! last time are still there, unchanged — an audit log only ever grows at
//! its end. An edit, a cut or a replaced file under the running daemon is
//! then written into the log itself as a `note` (and to the daemon's own
//! log), instead of waiting for someone to run `verify`.
//!
//! What is compared is the SHA-256 of the file's first N bytes, N being
//! its length at the last check; a rotation (the file renamed to `<log>.K`)
//! is followed by inode, and the renamed file is checked the same way.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::log::rotated_files;

/// What the watch found changed since its last check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Changed {
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
}

impl Changed {
    /// One sentence for the note and the daemon's log.
    pub fn describe(&self) -> String {
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
        }
    }

    /// The note record's body.
    pub fn note(&self) -> serde_json::Map<String, serde_json::Value> {
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
pub struct Watch {
    log: PathBuf,
    seen: Option<Seen>,
}

impl Watch {
    /// A watch that has seen nothing yet (its first check only looks).
    pub fn new(log: &Path) -> Watch {
        Watch {
            log: log.to_path_buf(),
            seen: None,
        }
    }

    /// The log it watches.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Reads the live file again: what changed since the last check, if
    /// anything, and remembers the file as it is now.
    pub fn check(&mut self) -> std::io::Result<Option<Changed>> {
        let mut file = File::open(&self.log)?;
        let meta = file.metadata()?;
        let (dev, ino) = (meta.dev(), meta.ino());
        let len = meta.len();
        let mut hasher = Sha256::new();
        let mut hashed = 0;
        let changed = match self.seen.take() {
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
                // begin with what was seen.
                Some(path) => compare(&mut File::open(&path)?, &path, &seen, &mut Sha256::new())?,
                None => Some(Changed::Replaced {
                    file: self.log.clone(),
                }),
            },
        };
        // The file as it is now: its length when opened, and the hash of
        // that many bytes (what was compared, and what was appended since).
        let len = len.max(hashed);
        hash_range(&mut file, hashed, len - hashed, &mut hasher)?;
        self.seen = Some(Seen {
            dev,
            ino,
            len,
            digest: hasher.finalize().into(),
        });
        Ok(changed)
    }
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
    use std::io::Write;

    fn append(path: &Path, text: &str) {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }

    #[test]
    fn appends_and_rotations_are_quiet_and_edits_cuts_and_replacements_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.jsonl");
        append(&log, "one\n");
        let mut w = Watch::new(&log);
        assert_eq!(w.check().unwrap(), None, "the first check only looks");
        append(&log, "two\n");
        assert_eq!(w.check().unwrap(), None, "appends are what a log does");
        // Rotated, then a new live file.
        std::fs::rename(&log, dir.path().join("audit.jsonl.1")).unwrap();
        append(&log, "three\n");
        assert_eq!(w.check().unwrap(), None, "a rotation keeps what was seen");
        // An edit in place.
        std::fs::write(&log, "thrEe\n").unwrap();
        assert!(matches!(
            w.check().unwrap(),
            Some(Changed::Rewritten { bytes: 6, .. })
        ));
        // A cut.
        std::fs::write(&log, "thr").unwrap();
        assert!(matches!(
            w.check().unwrap(),
            Some(Changed::Shortened { was: 6, now: 3, .. })
        ));
        // Replaced by another file: neither live nor rotated.
        let other = dir.path().join("other");
        std::fs::write(&other, "thr").unwrap();
        std::fs::rename(&other, &log).unwrap();
        let replaced = w.check().unwrap().unwrap();
        assert!(matches!(replaced, Changed::Replaced { .. }));
        assert_eq!(replaced.note()["log_changed"], "replaced");
        assert_eq!(w.check().unwrap(), None, "and then it watches the new file");
    }

    #[test]
    fn an_edit_of_a_rotated_file_since_the_last_check_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.jsonl");
        append(&log, "one\ntwo\n");
        let mut w = Watch::new(&log);
        w.check().unwrap();
        let rotated = dir.path().join("audit.jsonl.1");
        std::fs::rename(&log, &rotated).unwrap();
        append(&log, "three\n");
        // Edited in place after the rename: same inode.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&rotated)
            .unwrap();
        f.write_all(b"ONE").unwrap();
        assert!(matches!(
            w.check().unwrap(),
            Some(Changed::Rewritten { bytes: 8, .. })
        ));
    }
}
