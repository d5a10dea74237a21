//! `spawnd audit verify`: walks a log from the first line, recomputing the
//! chain, and names the first record that is wrong and how — edited (its
//! hash does not match), deleted (a `seq` is missing), out of order (a
//! later `seq` where an earlier one belongs, and that one further on),
//! inserted or reordered (`seq` or `prev` out of line otherwise), truncated (the head file knows more records
//! than the log holds) — and reports a torn last line as a warning.
//!
//! When the oldest rotated files were removed by retention (`[audit]
//! keep_rotated`), the walk starts at the oldest file left, from its first
//! record's `seq` and `prev`; that start must be one a retention `note` in
//! the walked chain names (`chain_starts_at`), else the records before it
//! were deleted and the log is reported tampered.

use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use super::log::read_head;
use super::record::{chain_hash, GENESIS};

/// The first problem found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tamper {
    /// The `seq` where the chain breaks (the expected one for a deletion).
    pub seq: u64,
    /// 1-based line of the log.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// The outcome of a verification.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verified {
    /// Records checked.
    pub records: u64,
    /// The last good `seq`.
    pub last_seq: u64,
    /// The `seq` the walk started at: 1, or later when retention removed
    /// the oldest rotated files (0 for an empty log).
    pub first_seq: u64,
    /// The first problem, if any.
    pub tamper: Option<Tamper>,
    /// Warnings (a torn last line, a head behind the log after a crash).
    pub warnings: Vec<String>,
}

/// Verifies the log at `path` against itself and its head file.
pub fn verify(path: &Path, key: Option<&[u8]>) -> std::io::Result<Verified> {
    let mut out = Verified::default();
    let mut prev = GENESIS.to_string();
    let mut files: Vec<std::path::PathBuf> = super::log::rotated_files(path)
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    files.push(path.to_path_buf());
    // Where the walk starts: the genesis, or (the oldest files removed by
    // retention) the oldest file's first record, checked against the
    // retention notes once the chain after it has verified.
    // A first record claiming seq 0 is no start: the walk from the genesis
    // reports it.
    let start = match files.first() {
        Some(oldest) if files.len() > 1 => super::log::first_record(oldest)?
            .filter(|(seq, prev)| *seq > 1 || (*seq == 1 && prev != GENESIS)),
        _ => None,
    };
    if let Some((seq, first_prev)) = &start {
        out.last_seq = seq - 1;
        prev.clone_from(first_prev);
    }
    let mut starts_noted = Vec::new();
    let count = files.len();
    for (i, file) in files.iter().enumerate() {
        let text = std::fs::read(file)?;
        let label = if count > 1 {
            format!("{}: ", file.display())
        } else {
            String::new()
        };
        let newest = i + 1 == count;
        if !verify_file(
            &text,
            &label,
            newest,
            key,
            &mut prev,
            &mut out,
            &mut starts_noted,
        ) {
            return Ok(out);
        }
    }
    out.first_seq = match (&start, out.records) {
        (_, 0) => 0,
        (None, _) => 1,
        (Some((seq, _)), _) => *seq,
    };
    if let Some((seq, first_prev)) = start {
        if !starts_noted.contains(&(seq, first_prev)) {
            let why = format!(
                "{}: the log starts at seq {seq} and no retention note names that start: record(s) before it deleted",
                files[0].display()
            );
            let missing_from = starts_noted
                .iter()
                .map(|(s, _)| *s)
                .filter(|s| *s < seq)
                .max()
                .unwrap_or(1);
            return Ok(fail_at(out, missing_from, 1, &why));
        }
        out.warnings.push(format!(
            "records before seq {seq} were removed by retention ([audit] keep_rotated)"
        ));
    }
    check_head(path, &prev, &mut out)?;
    Ok(out)
}

/// Verifies one file's bytes as a whole chain from the genesis record (no
/// head file, no rotation): what the fuzz target feeds arbitrary bytes to.
pub fn verify_bytes(text: &[u8], key: Option<&[u8]>) -> Verified {
    let mut out = Verified::default();
    let mut prev = GENESIS.to_string();
    verify_file(text, "", true, key, &mut prev, &mut out, &mut Vec::new());
    out.first_seq = u64::from(out.records > 0);
    out
}

/// Walks one file of the chain; false once a problem is recorded in `out`.
/// The chain starts a verified retention note names are added to `starts_noted`.
fn verify_file(
    text: &[u8],
    label: &str,
    newest: bool,
    key: Option<&[u8]>,
    prev: &mut String,
    out: &mut Verified,
    starts_noted: &mut Vec<(u64, String)>,
) -> bool {
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
                out.warnings.push(format!(
                    "{label}line {line_no}: torn last line ({} bytes) left by an interrupted write",
                    raw.len()
                ));
                break;
            }
            if next_is_torn_note(&lines, i) {
                out.warnings.push(format!("{label}line {line_no}: torn line, reported and chained past by the next record"));
                continue;
            }
            *out = fail(
                std::mem::take(out),
                line_no,
                &format!("{label}unreadable: not a JSON record (edited, or torn in the middle)"),
            );
            return false;
        };
        let expected = out.last_seq + 1;
        let seq = record.get("seq").and_then(Value::as_u64).unwrap_or(0);
        if seq != expected {
            let why = if seq > expected {
                match line_of_seq(&lines[i + 1..], expected) {
                    Some(later) => format!(
                        "{label}seq {seq} where {expected} was expected: records out of order (seq {expected} is at line {})",
                        line_no + later
                    ),
                    None => format!(
                        "{label}seq {seq} where {expected} was expected: record(s) deleted"
                    ),
                }
            } else {
                format!("{label}seq {seq} where {expected} was expected: reordered or inserted")
            };
            *out = fail_at(std::mem::take(out), expected, line_no, &why);
            return false;
        }
        if record.get("prev").and_then(Value::as_str) != Some(prev.as_str()) {
            *out = fail_at(
                std::mem::take(out),
                seq,
                line_no,
                &format!(
                    "{label}prev does not match the record before: inserted, reordered or replaced"
                ),
            );
            return false;
        }
        let stored = record.get("hash").and_then(Value::as_str).unwrap_or("");
        if stored.starts_with("hmac-sha256:") && key.is_none() {
            *out = fail_at(std::mem::take(out), seq, line_no, "the chain is keyed (hmac-sha256) and no key was given: set [audit] hmac_key_file in the config");
            return false;
        }
        let hash = chain_hash(&record, key);
        if stored != hash {
            let why = if key.is_some() && !stored.starts_with("hmac-sha256:") {
                "not keyed although a key is in force: rebuilt without the key, or edited"
            } else {
                "hash does not match the content: edited"
            };
            *out = fail_at(std::mem::take(out), seq, line_no, &format!("{label}{why}"));
            return false;
        }
        // The line must be the record exactly as spawnd writes it: a key
        // given twice (parsers disagree on which value wins), other
        // spacing or escapes would verify as the record parsed, not as
        // the bytes a reader sees.
        if serde_json::to_vec(&record).ok().as_deref() != Some(*raw) {
            *out = fail_at(
                std::mem::take(out),
                seq,
                line_no,
                &format!("{label}the line is not the record's canonical form (a key given twice, or spacing or escapes changed): rewritten"),
            );
            return false;
        }
        if let Some(start) = retention_start(&record) {
            starts_noted.push(start);
        }
        *prev = hash;
        out.records += 1;
        out.last_seq = seq;
    }
    true
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

fn check_head(path: &Path, last_hash: &str, out: &mut Verified) -> std::io::Result<()> {
    let head = match read_head(path) {
        Ok(head) => head,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            out.warnings.push(format!(
                "{e}: truncation at the end cannot be checked (the next append notes it and rewrites the head)"
            ));
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let Some(head) = head else {
        if out.records > 0 {
            out.warnings
                .push("no head file: truncation at the end cannot be checked".into());
        }
        return Ok(());
    };
    if head.seq > out.last_seq {
        let why = format!(
            "the head file records seq {} but the log ends at {}: truncated",
            head.seq, out.last_seq
        );
        let seq = out.last_seq + 1;
        *out = fail_at(std::mem::take(out), seq, 0, &why);
    } else if head.seq == out.last_seq && head.hash != last_hash {
        let why = "the last record's hash differs from the head file: edited".to_string();
        let seq = out.last_seq;
        *out = fail_at(std::mem::take(out), seq, 0, &why);
    } else if head.seq < out.last_seq {
        out.warnings.push(format!(
            "the head file is behind (seq {} < {}): a crash between write and head update",
            head.seq, out.last_seq
        ));
    }
    Ok(())
}

fn fail(out: Verified, line: usize, reason: &str) -> Verified {
    let seq = out.last_seq + 1;
    fail_at(out, seq, line, reason)
}

fn fail_at(mut out: Verified, seq: u64, line: usize, reason: &str) -> Verified {
    out.tamper = Some(Tamper {
        seq,
        line,
        reason: reason.to_string(),
    });
    out
}

#[cfg(test)]
#[path = "verify/tests.rs"]
mod tests;
