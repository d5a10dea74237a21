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
    )
    .record;
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

const K1: &[u8] = b"first key, thirty-two bytes long";
const K2: &[u8] = b"second key, 32 bytes long as wel";

fn keyed_log_with(n: usize, key: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path).unwrap().with_key(key.to_vec());
    for i in 0..n {
        log.append(Kind::Decision, None, body(&format!("op{i}")))
            .unwrap();
    }
    (dir, path)
}

fn with_keys<'a>(keys: &[&'a [u8]]) -> Options<'a> {
    Options {
        keys: keys.to_vec(),
        ..Options::default()
    }
}

fn head_text(path: &std::path::Path) -> String {
    std::fs::read_to_string(crate::audit::log::head_path(path)).unwrap()
}

/// The reproduction: the last 3 records dropped and the head
/// rewritten with values copied from the log (its old counter and MAC kept,
/// or none at all). Without a key only a head that knows more records than
/// the log catches a cut; with one, the head's MAC does.
#[test]
fn records_cut_off_the_end_and_a_head_copied_from_the_log_are_caught_when_keyed() {
    let (_d, path) = keyed_log_with(6, K1);
    let head: Value = serde_json::from_str(&head_text(&path)).unwrap();
    assert_eq!(head["counter"], 6, "{head}");
    assert!(head["mac"].as_str().unwrap().starts_with("hmac-sha256:"));
    assert_eq!(head_text(&path).len(), 256, "a fixed-width line");
    let l = lines(&path);
    write_lines(&path, &l[..3]);
    let third: Value = serde_json::from_str(&l[2]).unwrap();
    let forged_heads = [
        json!({"seq": 3, "hash": third["hash"], "counter": head["counter"], "mac": head["mac"]}),
        json!({"seq": 3, "hash": third["hash"], "counter": 3}),
        json!({"seq": 3, "hash": third["hash"]}),
    ];
    for forged in forged_heads {
        std::fs::write(crate::audit::log::head_path(&path), forged.to_string()).unwrap();
        let v = verify(&path, Some(K1)).unwrap();
        let t = v
            .tamper
            .clone()
            .unwrap_or_else(|| panic!("{forged}: {v:?}"));
        assert_eq!(t.seq, 4, "{t:?}");
        assert!(t.reason.contains("rewritten without the key"), "{t:?}");
    }
    // The same head without a key in force: the unkeyed chain's head has no
    // MAC to check (the documented limit), but this chain is keyed.
    assert!(verify(&path, None).unwrap().tamper.is_some());
}

#[test]
fn a_missing_head_is_an_error_for_a_keyed_chain_and_a_warning_without_a_key() {
    let (_d, path) = keyed_log_with(3, K1);
    std::fs::remove_file(crate::audit::log::head_path(&path)).unwrap();
    let t = verify(&path, Some(K1)).unwrap().tamper.unwrap();
    assert_eq!(t.seq, 4, "{t:?}");
    assert!(t.reason.contains("no head file"), "{t:?}");
    let (_d2, plain) = log_with(3);
    std::fs::remove_file(crate::audit::log::head_path(&plain)).unwrap();
    let v = verify(&plain, None).unwrap();
    assert_eq!(v.tamper, None);
    assert!(
        v.warnings.iter().any(|w| w.contains("no head file")),
        "{v:?}"
    );
    // The next keyed append notes the missing head, so the hole stays on
    // record after the head is back.
    AuditLog::open(&path)
        .unwrap()
        .with_key(K1.to_vec())
        .append(Kind::Decision, None, body("after"))
        .unwrap();
    let v = verify(&path, Some(K1)).unwrap();
    assert_eq!((v.tamper.clone(), v.last_seq), (None, 5), "{v:?}");
    assert!(
        v.warnings
            .iter()
            .any(|w| w.contains("seq 4: the writer found the head file missing")),
        "{v:?}"
    );
}

/// A crash between a record and its head update leaves a keyed head
/// behind: a warning, and the next append chains from the log with the
/// counter going on. A garbled keyed head gets its note.
#[test]
fn a_keyed_head_behind_the_log_or_garbled_still_chains_and_is_noted() {
    let (_d, path) = keyed_log_with(3, K1);
    let stale = head_text(&path);
    let log = AuditLog::open(&path).unwrap().with_key(K1.to_vec());
    log.append(Kind::Decision, None, body("x")).unwrap();
    std::fs::write(crate::audit::log::head_path(&path), &stale).unwrap();
    let v = verify(&path, Some(K1)).unwrap();
    assert_eq!(v.tamper, None, "{v:?}");
    assert!(v.warnings.iter().any(|w| w.contains("behind")), "{v:?}");
    AuditLog::open(&path)
        .unwrap()
        .with_key(K1.to_vec())
        .append(Kind::Decision, None, body("y"))
        .unwrap();
    let v = verify(&path, Some(K1)).unwrap();
    assert_eq!((v.tamper.clone(), v.last_seq), (None, 5), "{v:?}");
    let head = v.head.clone().unwrap();
    assert!(
        head.vouched && head.seq == 5 && head.counter == 4,
        "{head:?}"
    );
    std::fs::write(crate::audit::log::head_path(&path), b"{\"seq\":5,\"ha\0\0").unwrap();
    assert!(verify(&path, Some(K1)).unwrap().tamper.is_some());
    AuditLog::open(&path)
        .unwrap()
        .with_key(K1.to_vec())
        .append(Kind::Decision, None, body("z"))
        .unwrap();
    let v = verify(&path, Some(K1)).unwrap();
    assert_eq!((v.tamper.clone(), v.last_seq), (None, 7), "{v:?}");
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .contains("head file unreadable"));
}

/// Replacing the key: the writer holding the old one as a retired key seals
/// a rotation note under both, and the keyring verifies the whole chain.
#[test]
fn a_rotated_key_keeps_the_old_chain_verifying_with_the_keyring() {
    let (_d, path) = keyed_log_with(3, K1);
    // Without the old key the writer refuses: it cannot seal the switch.
    let refused = AuditLog::open(&path)
        .unwrap()
        .with_key(K2.to_vec())
        .append(Kind::Decision, None, body("refused"))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("previous_hmac_key_files") && refused.contains("seq 3"),
        "{refused}"
    );
    assert_eq!(lines(&path).len(), 3, "nothing written");
    let refused = AuditLog::open(&path)
        .unwrap()
        .append(Kind::Decision, None, body("refused"))
        .unwrap_err()
        .to_string();
    assert!(refused.contains("hmac_key_file"), "{refused}");
    let log = AuditLog::open(&path)
        .unwrap()
        .with_key(K2.to_vec())
        .with_previous_keys(vec![K1.to_vec()]);
    for i in 0..2 {
        log.append(Kind::Decision, None, body(&format!("new{i}")))
            .unwrap();
    }
    let note: Map<String, Value> = serde_json::from_str(&lines(&path)[3]).unwrap();
    assert_eq!(
        note["key_rotated"],
        json!({"from_key_id": crate::audit::record::key_id(K1), "to_key_id": crate::audit::record::key_id(K2)})
    );
    let v = verify_with(&path, &with_keys(&[K2, K1])).unwrap();
    assert_eq!((v.tamper.clone(), v.last_seq), (None, 6), "{v:?}");
    assert!(v.head.unwrap().vouched);
    // Either key alone verifies only its part.
    let t = verify_with(&path, &with_keys(&[K2]))
        .unwrap()
        .tamper
        .unwrap();
    assert_eq!(t.seq, 1, "{t:?}");
    let v = verify_with(&path, &with_keys(&[K1])).unwrap();
    assert!(
        v.tampered
            .iter()
            .any(|t| t.seq == 5 && t.reason.contains("was not given")),
        "{v:?}"
    );
}

/// A chain that changes keys without a rotation note (records sealed with
/// another key of the keyring spliced in) is tampering, and so is a
/// rotation note the new key does not vouch for.
#[test]
fn a_key_change_without_a_note_vouched_for_by_both_keys_is_caught() {
    let (_d, path) = keyed_log_with(3, K1);
    let head = crate::audit::log::read_head(&path).unwrap().unwrap();
    let spliced = crate::audit::record::seal(
        Kind::Decision,
        4,
        "2026-01-01T00:00:00.000Z",
        "0123456789abcdef",
        &head.hash,
        body("spliced"),
        Some(K2),
    )
    .record;
    let mut l = lines(&path);
    l.push(Value::Object(spliced).to_string());
    write_lines(&path, &l);
    let v = verify_with(&path, &with_keys(&[K1, K2])).unwrap();
    let t = v.tamper.unwrap();
    assert_eq!(t.seq, 4, "{t:?}");
    assert!(t.reason.contains("no key rotation note"), "{t:?}");
    // A rotation note forged by whoever holds only the old key.
    let mut note = crate::audit::record::seal_key_rotation(
        4,
        "2026-01-01T00:00:00.000Z",
        "0123456789abcdef",
        &head.hash,
        Some(K1),
        K2,
    );
    note.insert(
        "rotation_mac".into(),
        Value::from(format!("hmac-sha256:{}", "0".repeat(64))),
    );
    note.remove("hash");
    let h = crate::audit::record::chain_hash(&note, Some(K1));
    note.insert("hash".into(), Value::from(h));
    l[3] = Value::Object(note).to_string();
    write_lines(&path, &l);
    let t = verify_with(&path, &with_keys(&[K1, K2]))
        .unwrap()
        .tamper
        .unwrap();
    assert!(
        t.reason.contains("not vouched for by the key it moves to"),
        "{t:?}"
    );
}

/// A chain written before a key was set moves to it at the next append.
#[test]
fn an_unkeyed_chain_moves_to_a_new_key_through_a_rotation_note() {
    let (_d, path) = log_with(2);
    AuditLog::open(&path)
        .unwrap()
        .with_key(K1.to_vec())
        .append(Kind::Decision, None, body("keyed"))
        .unwrap();
    let l = lines(&path);
    assert!(l[2].contains("\"from_key_id\":null"), "{}", l[2]);
    assert!(l[3].contains("hmac-sha256:"));
    let v = verify(&path, Some(K1)).unwrap();
    assert_eq!((v.tamper.clone(), v.last_seq), (None, 4), "{v:?}");
    // Without the key the keyed part is named.
    let t = verify(&path, None).unwrap().tamper.unwrap();
    assert_eq!(t.seq, 4, "{t:?}");
}

/// Every break is listed, each at its record, and the walk goes on.
#[test]
fn verify_lists_every_break_and_goes_on_after_each() {
    let (_d, path) = log_with(12);
    let mut l = lines(&path);
    l[1] = l[1].replace("op1", "forged");
    l[5] = l[5].replace("op5", "forged");
    l.remove(9);
    write_lines(&path, &l);
    let v = verify(&path, None).unwrap();
    let at: Vec<u64> = v.tampered.iter().map(|t| t.seq).collect();
    assert_eq!(at, [2, 6, 10], "{v:?}");
    assert_eq!(v.tamper.as_ref().unwrap().seq, 2);
    assert!(v.tampered[2].reason.contains("deleted"), "{v:?}");
    assert_eq!((v.records, v.last_seq), (11, 12));
    // Past the listing bound, breaks are counted.
    let (_d, path) = log_with(150);
    let l: Vec<String> = lines(&path)
        .iter()
        .map(|x| x.replacen("op", "OP", 1))
        .collect();
    write_lines(&path, &l);
    let v = verify(&path, None).unwrap();
    assert_eq!(v.tampered.len(), MAX_LISTED, "{:?}", v.tampered.len());
    assert_eq!(v.tampered_unlisted, 50);
}

fn anchor(path: &std::path::Path, seq: u64) -> Anchor {
    let l = lines(path);
    let r: Value = serde_json::from_str(&l[seq as usize - 1]).unwrap();
    Anchor {
        seq,
        hash: r["hash"].as_str().unwrap().to_string(),
        by: format!("test anchor {seq}"),
    }
}

/// Root with the key can rebuild a chain that verifies; an anchor taken
/// before (an off-host checkpoint) catches the rebuilt record, a log cut
/// below it, and a log wiped and started again.
#[test]
fn an_anchor_catches_a_consistent_rewrite_a_cut_and_a_restart() {
    let (_d, path) = keyed_log_with(8, K1);
    let a = anchor(&path, 6);
    let options = |anchors: Vec<Anchor>| Options {
        keys: vec![K1],
        anchors,
        ..Options::default()
    };
    let v = verify_with(&path, &options(vec![a.clone()])).unwrap();
    assert_eq!(v.tamper, None, "{v:?}");
    assert_eq!(v.anchored.len(), 1);
    // Rewrite record 2 and reseal everything after with the key (a writer
    // with the key does exactly that).
    let rebuilt = tempfile::tempdir().unwrap();
    let again = rebuilt.path().join("audit.jsonl");
    let log = AuditLog::open(&again).unwrap().with_key(K1.to_vec());
    for i in 0..8 {
        let op = if i == 1 {
            "forged".into()
        } else {
            format!("op{i}")
        };
        log.append(Kind::Decision, None, body(&op)).unwrap();
    }
    assert_eq!(verify(&again, Some(K1)).unwrap().tamper, None);
    let t = verify_with(&again, &options(vec![a.clone()]))
        .unwrap()
        .tamper
        .unwrap();
    assert_eq!(t.seq, 6, "{t:?}");
    assert!(t.reason.contains("rewritten"), "{t:?}");
    // Wiped and started at seq 1: four records, fewer than the anchor's 6.
    let wiped = tempfile::tempdir().unwrap();
    let short = wiped.path().join("audit.jsonl");
    let log = AuditLog::open(&short).unwrap().with_key(K1.to_vec());
    for i in 0..4 {
        log.append(Kind::Decision, None, body(&format!("op{i}")))
            .unwrap();
    }
    let t = verify_with(&short, &options(vec![a]))
        .unwrap()
        .tamper
        .unwrap();
    assert!(t.reason.contains("cut off the end"), "{t:?}");
}

/// A segment shipped on its own verifies from its first record: vouched
/// for by an anchor on the record before it, or reported unanchored when
/// asked for with `from_seq`; without either it is deleted records, with a
/// hint.
#[test]
fn a_shipped_segment_verifies_on_its_own_and_says_what_vouches_for_its_start() {
    let (_d, path) = log_with(9);
    let dir = tempfile::tempdir().unwrap();
    let segment = dir.path().join("segment.jsonl");
    write_lines(&segment, &lines(&path)[4..]);
    let t = verify(&segment, None).unwrap().tamper.unwrap();
    assert!(t.reason.contains("--from-seq 5"), "{t:?}");
    let v = verify_with(
        &segment,
        &Options {
            from_seq: Some(5),
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(
        (v.tamper.clone(), v.first_seq, v.records),
        (None, 5, 5),
        "{v:?}"
    );
    assert_eq!(v.segment.clone().unwrap().vouched_by, None);
    let vouched = verify_with(
        &segment,
        &Options {
            anchors: vec![anchor(&path, 4)],
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(vouched.tamper, None, "{vouched:?}");
    assert_eq!(
        vouched.segment.unwrap().vouched_by.as_deref(),
        Some("test anchor 4")
    );
    // An anchor for the record before that names another hash: the
    // segment does not continue the chain it vouches for.
    let mut wrong = anchor(&path, 4);
    wrong.hash = anchor(&path, 3).hash;
    let t = verify_with(
        &segment,
        &Options {
            anchors: vec![wrong],
            ..Options::default()
        },
    )
    .unwrap()
    .tamper
    .unwrap();
    assert_eq!(t.seq, 5, "{t:?}");
}

/// A record sealed with its `ts` set by the test.
fn sealed_at(kind: Kind, seq: u64, ts: &str, prev: &str, fields: Value) -> Map<String, Value> {
    crate::audit::record::seal(
        kind,
        seq,
        ts,
        "0123456789abcdef",
        prev,
        fields.as_object().cloned().unwrap(),
        None,
    )
    .record
}

#[test]
fn a_daemon_silent_past_its_heartbeat_is_a_warning_and_a_stop_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let start = sealed_at(
        Kind::Lifecycle,
        1,
        "2026-03-01T10:00:00.000Z",
        crate::audit::record::GENESIS,
        json!({"event": "start"}),
    );
    let beat = sealed_at(
        Kind::Heartbeat,
        2,
        "2026-03-01T10:01:00.000Z",
        start["hash"].as_str().unwrap(),
        json!({"interval_s": 60, "pid": 42}),
    );
    let decision = sealed_at(
        Kind::Decision,
        3,
        "2026-03-01T10:01:30.000Z",
        beat["hash"].as_str().unwrap(),
        json!({"op": "x"}),
    );
    let stop = sealed_at(
        Kind::Lifecycle,
        4,
        "2026-03-01T10:02:00.000Z",
        decision["hash"].as_str().unwrap(),
        json!({"event": "stop"}),
    );
    let at = |s: &str| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).unwrap()
    };
    let judged = |records: &[&Map<String, Value>], now: &str| {
        let text: Vec<String> = records
            .iter()
            .map(|r| Value::Object((*r).clone()).to_string())
            .collect();
        write_lines(&path, &text);
        let v = verify_with(
            &path,
            &Options {
                now: Some(at(now)),
                ..Options::default()
            },
        )
        .unwrap();
        assert_eq!(v.tamper, None, "{v:?}");
        v.warnings
            .into_iter()
            .filter(|w| w.contains("heartbeat"))
            .collect::<Vec<_>>()
    };
    // 2 × 60 s + 60 s after the last record is still fine; past it is not.
    assert!(judged(&[&start, &beat, &decision], "2026-03-01T10:04:30.000Z").is_empty());
    let late = judged(&[&start, &beat, &decision], "2026-03-01T12:01:30.000Z");
    assert_eq!(late.len(), 1, "{late:?}");
    assert!(
        late[0].starts_with("the last record is 2 h 0 min old; the daemon that wrote it sends a heartbeat every 60 s and recorded no stop"),
        "{late:?}"
    );
    assert_eq!(
        judged(&[&start, &beat], "2026-03-02T10:00:00.000Z").len(),
        1
    );
    // A daemon that recorded its stop owes no heartbeat.
    assert!(judged(
        &[&start, &beat, &decision, &stop],
        "2026-03-05T00:00:00.000Z"
    )
    .is_empty());
    // Before its first heartbeat, the start record says how often they come.
    let announced = sealed_at(
        Kind::Lifecycle,
        1,
        "2026-03-01T10:00:00.000Z",
        crate::audit::record::GENESIS,
        json!({"event": "start", "heartbeat_secs": 300}),
    );
    assert!(judged(&[&announced], "2026-03-01T10:10:00.000Z").is_empty());
    let silent = judged(&[&announced], "2026-03-01T11:00:00.000Z");
    assert_eq!(silent.len(), 1, "{silent:?}");
    assert!(silent[0].contains("every 300 s"), "{silent:?}");
}
