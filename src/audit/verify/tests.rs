//! Every kind of tampering is found at the right record.

use std::io::Write;

use serde_json::{json, Map, Value};

use super::*;
use crate::audit::{AuditLog, Kind};

fn body(op: &str) -> Map<String, Value> {
    json!({"op": op, "argv_shape": "git log --since={since}"})
        .as_object()
        .cloned()
        .unwrap()
}

fn log_with(n: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path).unwrap();
    for i in 0..n {
        log.append(Kind::Decision, None, body(&format!("op{i}")))
            .unwrap();
    }
    (dir, path)
}

fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn write_lines(path: &std::path::Path, lines: &[String]) {
    std::fs::write(
        path,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
}

#[test]
fn an_intact_log_verifies() {
    let (_d, path) = log_with(5);
    let v = verify(&path, None).unwrap();
    assert_eq!((v.records, v.last_seq, v.tamper), (5, 5, None));
}

#[test]
fn an_edited_record_is_named() {
    let (_d, path) = log_with(5);
    let mut l = lines(&path);
    l[2] = l[2].replace("op2", "op9");
    write_lines(&path, &l);
    let t = verify(&path, None).unwrap().tamper.unwrap();
    assert_eq!(t.seq, 3);
    assert!(t.reason.contains("edited"), "{t:?}");
}

#[test]
fn a_deleted_record_is_named() {
    let (_d, path) = log_with(5);
    let mut l = lines(&path);
    l.remove(1);
    write_lines(&path, &l);
    let t = verify(&path, None).unwrap().tamper.unwrap();
    assert_eq!(t.seq, 2);
    assert!(t.reason.contains("deleted"), "{t:?}");
}

#[test]
fn reordered_and_inserted_records_are_named() {
    let (_d, path) = log_with(5);
    let mut l = lines(&path);
    l.swap(1, 2);
    write_lines(&path, &l);
    let t = verify(&path, None).unwrap().tamper.unwrap();
    assert_eq!((t.seq, t.line), (2, 2), "{t:?}");
    assert!(
        t.reason.contains("out of order (seq 2 is at line 3)") && !t.reason.contains("deleted"),
        "{t:?}"
    );
    let (_d2, path2) = log_with(3);
    let mut l = lines(&path2);
    let copy = l[0].clone();
    l.insert(2, copy);
    write_lines(&path2, &l);
    let t = verify(&path2, None).unwrap().tamper.unwrap();
    assert_eq!(t.seq, 3, "{t:?}");
}

#[test]
fn a_record_moved_further_down_is_out_of_order_wherever_it_went() {
    let (_d, path) = log_with(6);
    let mut l = lines(&path);
    let moved = l.remove(2);
    l.push(moved);
    write_lines(&path, &l);
    let t = verify(&path, None).unwrap().tamper.unwrap();
    assert_eq!((t.seq, t.line), (3, 3), "{t:?}");
    assert!(
        t.reason
            .contains("seq 4 where 3 was expected: records out of order (seq 3 is at line 6)"),
        "{t:?}"
    );
}

#[test]
fn cutting_records_off_the_end_is_caught_by_the_head() {
    let (_d, path) = log_with(5);
    let l = lines(&path);
    write_lines(&path, &l[..3]);
    let t = verify(&path, None).unwrap().tamper.unwrap();
    assert_eq!(t.seq, 4);
    assert!(t.reason.contains("truncated"), "{t:?}");
}

#[test]
fn a_torn_last_line_is_a_warning_and_the_next_append_chains_past_it() {
    let (_d, path) = log_with(2);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"{\"v\":1,\"kind\":\"deci")
        .unwrap();
    let v = verify(&path, None).unwrap();
    assert_eq!(v.tamper, None);
    assert!(v.warnings.iter().any(|w| w.contains("torn")), "{v:?}");
    AuditLog::open(&path)
        .unwrap()
        .append(Kind::Decision, None, body("after"))
        .unwrap();
    let v = verify(&path, None).unwrap();
    assert_eq!((v.tamper.clone(), v.last_seq), (None, 4), "{v:?}");
    assert!(
        v.warnings.iter().any(|w| w.contains("chained past")),
        "{v:?}"
    );
}

#[test]
fn a_keyed_chain_verifies_only_with_its_key_and_a_rebuilt_chain_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path)
        .unwrap()
        .with_key(b"operator secret".to_vec());
    for i in 0..3 {
        log.append(Kind::Decision, None, body(&format!("op{i}")))
            .unwrap();
    }
    assert_eq!(
        verify(&path, Some(b"operator secret")).unwrap().tamper,
        None
    );
    assert!(verify(&path, None)
        .unwrap()
        .tamper
        .unwrap()
        .reason
        .contains("keyed"));
    assert!(verify(&path, Some(b"wrong")).unwrap().tamper.is_some());
    // An attacker edits record 2 and rebuilds the chain with plain SHA-256.
    let mut prev = crate::audit::record::GENESIS.to_string();
    let mut rebuilt = Vec::new();
    for (i, line) in lines(&path).iter().enumerate() {
        let mut r: Map<String, Value> = serde_json::from_str(line).unwrap();
        if i == 1 {
            r.insert("op".into(), Value::from("forged"));
        }
        r.insert("prev".into(), Value::from(prev.clone()));
        let h = crate::audit::record::chain_hash(&r, None);
        r.insert("hash".into(), Value::from(h.clone()));
        prev = h;
        rebuilt.push(Value::Object(r).to_string());
    }
    write_lines(&path, &rebuilt);
    let t = verify(&path, Some(b"operator secret"))
        .unwrap()
        .tamper
        .unwrap();
    assert_eq!(t.seq, 1, "{t:?}");
}

#[test]
fn rotation_keeps_one_chain_across_files_and_a_missing_file_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path).unwrap().with_rotation(600);
    for i in 0..12 {
        log.append(Kind::Decision, None, body(&format!("op{i}")))
            .unwrap();
    }
    let rotated = crate::audit::log::rotated_files(&path);
    assert!(rotated.len() >= 2, "{rotated:?}");
    let v = verify(&path, None).unwrap();
    assert_eq!((v.tamper, v.records), (None, 12));
    std::fs::remove_file(&rotated[1].1).unwrap();
    let t = verify(&path, None).unwrap().tamper.unwrap();
    assert!(t.reason.contains("deleted"), "{t:?}");
}

/// Found by the kill -9 fault test: a crash after a record is written but
/// before the head is updated must not make the next writer reuse its `seq`.
#[test]
fn a_head_left_behind_by_a_crash_does_not_fork_the_chain() {
    let (_d, path) = log_with(3);
    let head_file = crate::audit::log::head_path(&path);
    let stale = std::fs::read_to_string(&head_file).unwrap();
    AuditLog::open(&path)
        .unwrap()
        .append(Kind::Decision, None, body("x"))
        .unwrap();
    std::fs::write(&head_file, stale).unwrap();
    AuditLog::open(&path)
        .unwrap()
        .append(Kind::Decision, None, body("y"))
        .unwrap();
    let v = verify(&path, None).unwrap();
    assert_eq!((v.tamper, v.last_seq), (None, 5));
}

/// A head garbled by a torn write (it is overwritten in place) is reported by
/// `verify`, noted by the next append, and rewritten — never trusted, never
/// a reason to stop auditing.
#[test]
fn a_garbled_head_is_noted_and_rewritten() {
    let (_d, path) = log_with(2);
    let head_file = crate::audit::log::head_path(&path);
    std::fs::write(&head_file, b"{\"seq\":2,\"ha\0\0\0").unwrap();
    let v = verify(&path, None).unwrap();
    assert_eq!(v.tamper, None);
    assert!(
        v.warnings.iter().any(|w| w.contains("head file")),
        "{:?}",
        v.warnings
    );
    AuditLog::open(&path)
        .unwrap()
        .append(Kind::Decision, None, body("after"))
        .unwrap();
    let v = verify(&path, None).unwrap();
    assert_eq!((v.tamper, v.last_seq), (None, 4), "{:?}", v.warnings);
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("head file unreadable"), "a note records it");
}

/// `write` chains the record at once; `commit` only waits for the disk.
#[test]
fn a_written_record_is_chained_before_it_is_committed() {
    let (_d, path) = log_with(1);
    let log = AuditLog::open(&path).unwrap();
    let pending = log.write(Kind::Decision, None, body("a")).unwrap();
    let after = log.append(Kind::Exit, None, body("b")).unwrap();
    assert_eq!(after.seq, 3);
    assert_eq!(pending.commit().unwrap().seq, 2);
    let v = verify(&path, None).unwrap();
    assert_eq!((v.tamper, v.last_seq), (None, 3));
}

/// An append from another process (`spawnd run` beside the daemon) moves the
/// log on: this process's next append must chain after it, not after what
/// it wrote itself last.
#[test]
fn an_append_from_another_writer_is_chained_after() {
    let (_d, path) = log_with(2);
    let head = crate::audit::log::read_head(&path).unwrap().unwrap();
    let theirs = crate::audit::record::seal(
        Kind::Decision,
        head.seq + 1,
        "2026-01-01T00:00:00.000Z",
        "0123456789abcdef",
        &head.hash,
        body("theirs"),
        None,
    );
    let mut line = serde_json::to_string(&Value::Object(theirs)).unwrap();
    line.push('\n');
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(line.as_bytes())
        .unwrap();
    AuditLog::open(&path)
        .unwrap()
        .append(Kind::Decision, None, body("ours"))
        .unwrap();
    let v = verify(&path, None).unwrap();
    assert_eq!((v.tamper.clone(), v.last_seq), (None, 4), "{v:?}");
}

/// Retention removes the oldest rotated files after a note naming them and
/// where the chain now starts: what remains verifies from there.
#[test]
fn retention_keeps_the_newest_rotated_files_and_what_remains_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path)
        .unwrap()
        .with_rotation(600)
        .with_retention(2);
    for i in 0..40 {
        log.append(Kind::Decision, None, body(&format!("op{i}")))
            .unwrap();
    }
    let rotated = crate::audit::log::rotated_files(&path);
    assert_eq!(rotated.len(), 2, "{rotated:?}");
    assert!(rotated[0].0 > 1, "the oldest were removed: {rotated:?}");
    let v = verify(&path, None).unwrap();
    assert_eq!(v.tamper, None, "{v:?}");
    assert!(v.first_seq > 1, "{v:?}");
    assert!(
        v.warnings
            .iter()
            .any(|w| w.contains("removed by retention")),
        "{:?}",
        v.warnings
    );
    let all: String = rotated
        .iter()
        .map(|(_, p)| std::fs::read_to_string(p).unwrap())
        .chain(std::iter::once(std::fs::read_to_string(&path).unwrap()))
        .collect();
    assert!(all.contains("\"chain_starts_at\""), "a note says so");
    // Removing the oldest file left is deletion, not retention.
    std::fs::remove_file(&rotated[0].1).unwrap();
    let t = verify(&path, None).unwrap().tamper.unwrap();
    assert!(t.reason.contains("deleted"), "{t:?}");
}

/// A crash between the retention note and the removal leaves files the
/// note names: they still verify (the walk starts earlier).
#[test]
fn files_a_retention_note_names_but_a_crash_left_still_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path)
        .unwrap()
        .with_rotation(600)
        .with_retention(1);
    for i in 0..40 {
        let saved: Vec<(std::path::PathBuf, Vec<u8>)> = crate::audit::log::rotated_files(&path)
            .into_iter()
            .map(|(_, p)| {
                let bytes = std::fs::read(&p).unwrap();
                (p, bytes)
            })
            .collect();
        log.append(Kind::Decision, None, body(&format!("op{i}")))
            .unwrap();
        let removed: Vec<_> = saved.iter().filter(|(p, _)| !p.exists()).collect();
        if i > 20 && !removed.is_empty() {
            // As if the removal had not happened: the note is on disk, the files too.
            for (p, bytes) in removed {
                std::fs::write(p, bytes).unwrap();
            }
            let v = verify(&path, None).unwrap();
            assert_eq!(v.tamper, None, "{:?}", v.warnings);
            assert!(v.first_seq > 1, "{v:?}");
            return;
        }
    }
    panic!("no rotation removed a file");
}

/// An oldest file whose first record claims seq 0 or 1 with a foreign
/// `prev` is no retention start: it is reported, never trusted.
#[test]
fn a_forged_start_of_the_oldest_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path).unwrap().with_rotation(600);
    for i in 0..12 {
        log.append(Kind::Decision, None, body(&format!("op{i}")))
            .unwrap();
    }
    let oldest = crate::audit::log::rotated_files(&path)[0].1.clone();
    let text = std::fs::read_to_string(&oldest).unwrap();
    for forged in ["\"seq\":0", "\"seq\":1,\"prev\":\"sha256:00\""] {
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let mut first: Map<String, Value> = serde_json::from_str(&lines[0]).unwrap();
        let patch: Map<String, Value> = serde_json::from_str(&format!("{{{forged}}}")).unwrap();
        first.extend(patch);
        lines[0] = Value::Object(first).to_string();
        write_lines(&oldest, &lines);
        assert!(verify(&path, None).unwrap().tamper.is_some(), "{forged}");
    }
}

#[test]
fn a_line_that_is_not_its_records_canonical_form_is_named() {
    // A key given twice, the first a forged value: parsers disagree on
    // which one wins, so the line is not the record spawnd wrote.
    let (_d, path) = log_with(4);
    let mut l = lines(&path);
    l[1] = l[1].replacen('{', "{\"op\":\"forged\",", 1);
    write_lines(&path, &l);
    let t = verify(&path, None).unwrap().tamper.unwrap();
    assert_eq!(t.seq, 2, "{t:?}");
    assert!(t.reason.contains("canonical"), "{t:?}");
    // Spacing changed, content the same.
    let (_d, path) = log_with(4);
    let mut l = lines(&path);
    l[2] = l[2].replacen(":", ": ", 1);
    write_lines(&path, &l);
    let t = verify(&path, None).unwrap().tamper.unwrap();
    assert_eq!(t.seq, 3, "{t:?}");
    assert!(t.reason.contains("canonical"), "{t:?}");
}
