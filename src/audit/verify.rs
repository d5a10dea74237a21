//! `spawnd audit verify`: walks the chain's files from the first line,
//! recomputing the chain, and names every record that is wrong and how —
//! edited (its hash does not match), deleted (a `seq` is missing), out of
//! order (a later `seq` where an earlier one belongs, and that one further
//! on), inserted or reordered (`seq` or `prev` out of line otherwise),
//! sealed with another key than the chain's without a key rotation note,
//! truncated (the head file knows more records than the log holds, or an
//! anchor vouches for a `seq` the log no longer reaches), or rewritten
//! (an anchor's hash differs) — and reports a torn last line as a warning.
//! The walk goes on past each break ([`walk`]).
//!
//! When the oldest rotated files were removed by retention (`[audit]
//! keep_rotated`), the walk starts at the oldest file left, from its first
//! record's `seq` and `prev`; that start must be one a retention `note` in
//! the walked chain names (`chain_starts_at`), else the records before it
//! were deleted and the log is reported tampered. A segment (`from_seq`, or
//! files starting where an anchor vouches for the record before) is walked
//! from its first record, its `prev` vouched for by the anchor or reported
//! as unanchored.
//!
//! Anchors come from `--anchor SEQ:HASH` or signed checkpoints
//! ([`super::checkpoint`]): the record at each anchored `seq` must have
//! exactly that hash.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use time::OffsetDateTime;

use super::log::read_head;
use super::record::GENESIS;
use walk::{Daemon, Sealing, Walk};

mod walk;

pub(crate) use walk::MAX_LISTED;

/// A break in the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tamper {
    /// The `seq` where the chain breaks (the expected one for a deletion).
    pub seq: u64,
    /// 1-based line of the log (0: not a line, e.g. the head file).
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// A `seq` and the hash its record must have, and who says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Anchor {
    /// The record's `seq`.
    pub seq: u64,
    /// Its `hash`.
    pub hash: String,
    /// Who vouches for it, for messages (`--anchor`, `checkpoint FILE:LINE
    /// (signed TS)`).
    pub by: String,
}

/// How to verify: the keyring, the anchors, where a segment starts and
/// the time heartbeats are judged at.
#[derive(Debug, Clone, Default)]
pub(crate) struct Options<'a> {
    /// HMAC keys the chain may be sealed with (the current one first).
    pub keys: Vec<&'a [u8]>,
    /// Hashes that records at given `seq`s must have.
    pub anchors: Vec<Anchor>,
    /// Verify a segment from this `seq` (records before it are skipped).
    pub from_seq: Option<u64>,
    /// Now (`None`: heartbeats are not judged).
    pub now: Option<OffsetDateTime>,
}

/// The head file as `verify` found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeadSeen {
    /// Its `seq`.
    pub seq: u64,
    /// Its write counter.
    pub counter: u64,
    /// Whether it carries a MAC that verified.
    pub vouched: bool,
}

/// A segment verified on its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// Its first `seq`.
    pub from_seq: u64,
    /// The anchor that vouches for the record before it (`None`:
    /// unanchored, its `prev` taken as it stands).
    pub vouched_by: Option<String>,
}

/// The outcome of a verification.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verified {
    /// Records checked.
    pub records: u64,
    /// The last `seq` walked.
    pub last_seq: u64,
    /// Its hash.
    pub last_hash: String,
    /// The `seq` the walk started at: 1, or later when retention removed
    /// the oldest rotated files or a segment was verified (0 for an empty
    /// log).
    pub first_seq: u64,
    /// The first break (by `seq`), if any.
    pub tamper: Option<Tamper>,
    /// Every break, by `seq` (the first [`MAX_LISTED`] found).
    pub tampered: Vec<Tamper>,
    /// Breaks found beyond those listed.
    pub tampered_unlisted: u64,
    /// Warnings (a torn last line, a head behind the log after a crash).
    pub warnings: Vec<String>,
    /// The head file, when there is one that parses.
    pub head: Option<HeadSeen>,
    /// The segment verified, when the walk started at one.
    pub segment: Option<Segment>,
    /// The anchors checked: who vouched, for which `seq`.
    pub anchored: Vec<String>,
}

impl Verified {
    /// Whether nothing was found wrong.
    pub fn intact(&self) -> bool {
        self.tampered.is_empty() && self.tampered_unlisted == 0
    }
}

/// Verifies the log at `path` against itself and its head file, with at
/// most one key.
pub fn verify(path: &Path, key: Option<&[u8]>) -> std::io::Result<Verified> {
    verify_with(
        path,
        &Options {
            keys: key.into_iter().collect(),
            now: Some(OffsetDateTime::now_utc()),
            ..Options::default()
        },
    )
}

/// Verifies the chain whose live file is `path` (its rotated files first).
pub(crate) fn verify_with(path: &Path, options: &Options) -> std::io::Result<Verified> {
    let mut files: Vec<std::path::PathBuf> = super::log::rotated_files(path)
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    files.push(path.to_path_buf());
    let mut walk = new_walk(&options.keys, &options.anchors);
    // Where the walk starts: the genesis; a segment's first record (its
    // `prev` vouched for by an anchor on the record before, or taken as it
    // stands when `from_seq` asks for it); or (the oldest files removed by
    // retention) the oldest file's first record, checked against the
    // retention notes once the chain after it has verified. A first record
    // claiming seq 0, or seq 1 after anything but the genesis, is no start:
    // the walk from the genesis reports it.
    let first = match files.first() {
        Some(oldest) => super::log::first_record(oldest)?
            .filter(|(seq, prev)| *seq > 1 || (*seq == 1 && prev != GENESIS)),
        None => None,
    };
    let vouching = |seq: u64| options.anchors.iter().find(|a| a.seq + 1 == seq);
    let mut retention_start = None;
    match (options.from_seq.filter(|n| *n > 1), &first) {
        (Some(from), _) => {
            walk.skip_below = Some(from);
            walk.out.last_seq = from - 1;
            walk.out.first_seq = from;
            match vouching(from) {
                Some(anchor) => {
                    walk.prev.clone_from(&anchor.hash);
                    walk.out.segment = Some(Segment {
                        from_seq: from,
                        vouched_by: Some(anchor.by.clone()),
                    });
                }
                None => {
                    walk.resync = true;
                    walk.out.segment = Some(Segment {
                        from_seq: from,
                        vouched_by: None,
                    });
                }
            }
        }
        (None, Some((seq, prev))) if *seq > 1 && vouching(*seq).is_some() => {
            let anchor = vouching(*seq).cloned().unwrap_or_else(|| Anchor {
                seq: seq - 1,
                hash: prev.clone(),
                by: String::new(),
            });
            walk.prev = anchor.hash;
            walk.out.last_seq = seq - 1;
            walk.out.first_seq = *seq;
            walk.out.segment = Some(Segment {
                from_seq: *seq,
                vouched_by: Some(anchor.by),
            });
        }
        (None, Some((seq, prev))) if files.len() > 1 => {
            walk.prev.clone_from(prev);
            walk.out.last_seq = seq - 1;
            retention_start = Some((*seq, prev.clone()));
        }
        _ => {}
    }
    let count = files.len();
    for (i, file) in files.iter().enumerate() {
        let text = std::fs::read(file)?;
        let label = if count > 1 {
            format!("{}: ", file.display())
        } else {
            String::new()
        };
        walk.file(&text, &label, i + 1 == count);
    }
    if walk.out.segment.is_none() {
        walk.out.first_seq = match (&retention_start, walk.out.records) {
            (_, 0) => 0,
            (None, _) => 1,
            (Some((seq, _)), _) => *seq,
        };
    }
    if let Some(from) = walk.skip_below {
        walk.report(
            from,
            0,
            format!(
                "no record from seq {from} on: the files end at seq {}",
                walk.out.last_seq
            ),
        );
    }
    if let Some((seq, first_prev)) = retention_start {
        check_retention_start(&mut walk, &files[0], seq, first_prev);
    }
    check_unkeyed_end(&mut walk);
    check_anchors(&mut walk, &options.anchors);
    check_head(path, &mut walk)?;
    check_heartbeat(&mut walk, options.now);
    Ok(finish(walk))
}

fn new_walk<'a>(keys: &'a [&'a [u8]], anchors: &[Anchor]) -> Walk<'a> {
    Walk {
        keys,
        sealing: Sealing::Undetermined,
        prev: GENESIS.to_string(),
        resync: false,
        skip_below: None,
        unkeyed_since: None,
        starts_noted: Vec::new(),
        anchored: anchors
            .iter()
            .map(|a| (a.seq, None))
            .collect::<BTreeMap<_, _>>(),
        daemon: Daemon::default(),
        out: Verified::default(),
    }
}

/// The breaks by `seq` (a stable sort: those at one `seq` in the order
/// found), the first of them as `tamper`.
fn finish(walk: Walk) -> Verified {
    let mut out = walk.out;
    out.tampered.sort_by_key(|t| t.seq);
    out.tamper = out.tampered.first().cloned();
    out
}

/// Verifies one file's bytes as a whole chain from the genesis record (no
/// head file, no rotation): what the fuzz target feeds arbitrary bytes to.
pub(crate) fn verify_bytes(text: &[u8], key: Option<&[u8]>) -> Verified {
    let keys: Vec<&[u8]> = key.into_iter().collect();
    let mut walk = new_walk(&keys, &[]);
    walk.file(text, "", true);
    check_unkeyed_end(&mut walk);
    walk.out.first_seq = u64::from(walk.out.records > 0);
    finish(walk)
}

/// The oldest file's start must be one a retention note names.
fn check_retention_start(walk: &mut Walk, oldest: &Path, seq: u64, first_prev: String) {
    if walk.starts_noted.contains(&(seq, first_prev)) {
        walk.out.warnings.push(format!(
            "records before seq {seq} were removed by retention ([audit] keep_rotated)"
        ));
        return;
    }
    let why = format!(
        "{}: the log starts at seq {seq} and no retention note names that start: record(s) before it deleted",
        oldest.display()
    );
    let missing_from = walk
        .starts_noted
        .iter()
        .map(|(s, _)| *s)
        .filter(|s| *s < seq)
        .max()
        .unwrap_or(1);
    walk.report(missing_from, 1, why);
}

/// With a keyring, a chain must end keyed: a last stretch of unkeyed
/// records that no key rotation note ends was rebuilt without the key.
fn check_unkeyed_end(walk: &mut Walk) {
    if walk.keys.is_empty() || walk.sealing != Sealing::Unkeyed {
        return;
    }
    if let Some(since) = walk.unkeyed_since {
        walk.report(
            since,
            0,
            "not keyed although a key is in force, and no key rotation note moves the chain to it: rebuilt without the key, or edited (a chain written before its key was set moves to it at the next append)".into(),
        );
    }
}

/// Each anchor's `seq` must be in the walk with exactly its hash, or be the
/// record before a segment's start; a log that ends before it was cut.
fn check_anchors(walk: &mut Walk, anchors: &[Anchor]) {
    let first = walk.out.first_seq.max(1);
    for anchor in anchors {
        let found = walk.anchored.get(&anchor.seq).cloned().flatten();
        let by = &anchor.by;
        match found {
            Some(hash) if hash == anchor.hash => {
                walk.out.anchored.push(format!("seq {}: {by}", anchor.seq));
            }
            Some(hash) => walk.report(
                anchor.seq,
                0,
                format!(
                    "the record at seq {} has hash {hash}, but {by} vouches for {}: rewritten",
                    anchor.seq, anchor.hash
                ),
            ),
            None if anchor.seq > walk.out.last_seq => walk.report(
                walk.out.last_seq + 1,
                0,
                format!(
                    "the log ends at seq {}, but {by} vouches for seq {}: records cut off the end, or the log replaced",
                    walk.out.last_seq, anchor.seq
                ),
            ),
            None if anchor.seq + 1 == first && walk.out.segment.is_some() => {
                walk.out
                    .anchored
                    .push(format!("seq {} (the segment's start): {by}", anchor.seq));
            }
            None => walk.out.warnings.push(format!(
                "{by} vouches for seq {}, before the records verified (from seq {first}): not checked",
                anchor.seq
            )),
        }
    }
}

/// The head file against the chain's end: a head that knows more records
/// than the log holds, or another hash for the last one, is tampering; one
/// behind is a crash's. On a keyed chain the head must carry a MAC under
/// the chain's key, and a missing or unreadable head is an error, since
/// only the head catches records cut off the end.
fn check_head(path: &Path, walk: &mut Walk) -> std::io::Result<()> {
    let keyed = match walk.sealing {
        Sealing::Key(i) => Some(Some(walk.keys[i])),
        Sealing::Unknown => Some(None),
        Sealing::Unkeyed | Sealing::Undetermined => None,
    };
    let segment = walk.out.segment.is_some();
    let last_seq = walk.out.last_seq;
    let head = match read_head(path) {
        Ok(head) => head,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            if keyed.is_some() && !segment {
                walk.report(last_seq + 1, 0, format!("{e}: the chain is keyed and its head file is unreadable: records cut off the end cannot be ruled out (the next append notes it and rewrites the head)"));
            } else {
                walk.out.warnings.push(format!(
                    "{e}: truncation at the end cannot be checked (the next append notes it and rewrites the head)"
                ));
            }
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let Some(head) = head else {
        if walk.out.records == 0 {
            return Ok(());
        }
        if keyed.is_some() && !segment {
            walk.report(last_seq + 1, 0, "no head file and the chain is keyed: records cut off the end cannot be ruled out (the head file beside the log was deleted)".into());
        } else if segment {
            walk.out
                .warnings
                .push("no head file beside the segment: only anchors vouch for its end".into());
        } else {
            walk.out
                .warnings
                .push("no head file: truncation at the end cannot be checked".into());
        }
        return Ok(());
    };
    let vouched = matches!(keyed, Some(Some(key)) if head.vouched_by(key));
    walk.out.head = Some(HeadSeen {
        seq: head.seq,
        counter: head.counter,
        vouched,
    });
    if let Some(Some(_)) = keyed {
        if !vouched {
            let what = if head.mac.is_none() {
                "carries no MAC although the chain is keyed"
            } else {
                "has a MAC that does not verify under the chain's key"
            };
            walk.report(last_seq + 1, 0, format!("the head file (seq {}) {what}: rewritten without the key, so records may have been cut off the end after seq {last_seq}", head.seq));
            return Ok(());
        }
    }
    if head.seq > last_seq {
        let why = format!(
            "the head file records seq {} but the log ends at {last_seq}: truncated",
            head.seq
        );
        walk.report(last_seq + 1, 0, why);
    } else if head.seq == last_seq && head.hash != walk.out.last_hash {
        let why = "the last record's hash differs from the head file: edited".to_string();
        walk.report(last_seq, 0, why);
    } else if head.seq < last_seq {
        walk.out.warnings.push(format!(
            "the head file is behind (seq {} < {last_seq}): a crash between write and head update",
            head.seq
        ));
    }
    Ok(())
}

/// A daemon that recorded a start and no stop writes a heartbeat every
/// `interval_s`: a log whose last record is much older than that was cut
/// at the end, or its daemon died.
fn check_heartbeat(walk: &mut Walk, now: Option<OffsetDateTime>) {
    let daemon = &walk.daemon;
    let ends_in_heartbeat = daemon.last_kind.as_deref() == Some("heartbeat");
    let (Some(now), Some(interval), true) =
        (now, daemon.interval_s, daemon.running || ends_in_heartbeat)
    else {
        return;
    };
    let Some(at) = daemon
        .last_ts
        .as_deref()
        .and_then(super::time_bound::record_instant)
    else {
        return;
    };
    let age = (now - at).whole_seconds();
    let limit = i64::try_from(interval.saturating_mul(2).saturating_add(60)).unwrap_or(i64::MAX);
    if age > limit {
        walk.out.warnings.push(format!(
            "the last record is {} old; the daemon that wrote it sends a heartbeat every {interval} s and recorded no stop: records may have been cut off the end, or the daemon died",
            age_words(age)
        ));
    }
}

/// A duration in words: `95 s`, `12 min`, `5 h 3 min`, `3 d 2 h`.
fn age_words(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        s => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
#[path = "verify/tests.rs"]
mod tests;
