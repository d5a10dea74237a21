//! The audit trail through the real binary: every run leaves a decision and
//! an exit record (or one denial record) on disk, chained and verifiable, with
//! hashes that match what the caller got back and no argument or env value in
//! sight; an unwritable audit location runs nothing. Its OCSF export is
//! validated strictly against the OCSF 1.5.0 schema (`scripts/validate-ocsf`,
//! itself tested here on events it must refuse).

use crate::{daemon_harness, harness};

use std::path::Path;
use std::process::Command;

use harness::{world, As};
use serde_json::{json, Value};

/// A config whose audit log lives in a fresh directory of the world.
fn audit_config(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let w = world();
    let dir = w.path(&format!("outside/audit-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("audit.jsonl");
    let cfg = dir.join("config.toml");
    std::fs::write(&cfg, format!("[audit]\npath = \"{}\"\n", log.display())).unwrap();
    (cfg, log)
}

fn records(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn spawnd(args: &[&str]) -> std::process::Output {
    Command::new(&world().spawnd).args(args).output().unwrap()
}

#[test]
fn an_allowed_run_leaves_a_decision_and_an_exit_record_whose_hash_matches_the_output() {
    let w = world();
    let (cfg, log) = audit_config("allowed");
    let out = w.run(
        As::Root,
        "sh",
        &[("script", "echo hello from the sandbox")],
        &["--config", cfg.to_str().unwrap()],
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let recs = records(&log);
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!(
        (recs[0]["kind"].as_str(), recs[1]["kind"].as_str()),
        (Some("decision"), Some("exit"))
    );
    assert_eq!(recs[0]["audit_id"], result["data"]["audit_id"]);
    assert_eq!(recs[1]["audit_id"], result["data"]["audit_id"]);
    assert_eq!(
        recs[1]["stdout"]["sha256"],
        result["data"]["stdout"]["sha256"]
    );
    assert_eq!(recs[0]["argv_shape"], "bash -c {script}");
    assert_eq!(
        recs[0]["program"]["sha256"],
        result["data"]["program"]["sha256"]
    );
    let verified = spawnd(&["audit", "verify", log.to_str().unwrap()]);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
}

#[test]
fn a_denial_leaves_exactly_one_denial_record_with_the_returned_audit_id() {
    let w = world();
    let (cfg, log) = audit_config("denied");
    let out = w.run(
        As::Root,
        "probe1",
        &[("attack", "read-host-file"), ("a1", "x"), ("extra", "y")],
        &["--config", cfg.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(3));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let recs = records(&log);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(
        (recs[0]["kind"].as_str(), recs[0]["reason"].as_str()),
        (Some("denial"), Some("arg_unknown"))
    );
    assert_eq!(recs[0]["audit_id"], v["error"]["details"]["audit_id"]);
}

#[test]
fn argument_and_env_values_never_reach_the_audit_file() {
    let w = world();
    let (cfg, log) = audit_config("sentinel");
    let sentinel = "s3ntinel-value-90210";
    w.run(
        As::Root,
        "sh",
        &[("script", &format!("echo {sentinel}"))],
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--env",
            &format!("SENTINEL={sentinel}-env"),
        ],
    );
    w.run(
        As::Root,
        "probe1",
        &[("attack", sentinel), ("a1", sentinel), ("bogus", sentinel)],
        &["--config", cfg.to_str().unwrap()],
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(records(&log).len(), 3);
    assert!(!text.contains(sentinel), "{text}");
}

/// Runs a script that would create `marker` under `cfg` and checks that
/// spawnd refused with exit 5 ("audit unavailable") and the script never
/// ran; returns what spawnd printed.
fn assert_runs_nothing(who: As, cfg: &std::path::Path, marker: &std::path::Path) -> String {
    let out = world().run(
        who,
        "sh",
        &[("script", &format!("touch {}", marker.display()))],
        &["--config", cfg.to_str().unwrap()],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "{stdout}");
    assert!(stdout.contains("audit unavailable"), "{stdout}");
    assert!(
        !marker.exists(),
        "the program ran although nothing could be recorded"
    );
    stdout.into_owned()
}

#[test]
fn an_unwritable_audit_location_runs_nothing() {
    let w = world();
    let marker = w.path("rw/must-not-exist");
    let _ = std::fs::remove_file(&marker);
    let cfg = w.path("outside/audit-unwritable.toml");
    std::fs::write(&cfg, "[audit]\npath = \"/proc/spawnd-audit/audit.jsonl\"\n").unwrap();
    let said = assert_runs_nothing(As::Root, &cfg, &marker);
    // A location that cannot be opened: the message says what to set.
    assert!(
        said.contains("[audit] path") && said.contains("XDG_STATE_HOME"),
        "{said}"
    );
    let ro = w.path("outside/audit-readonly");
    let _ = std::fs::create_dir_all(&ro);
    std::fs::write(ro.join("audit.jsonl"), "").unwrap();
    std::fs::set_permissions(
        ro.join("audit.jsonl"),
        std::os::unix::fs::PermissionsExt::from_mode(0o444),
    )
    .unwrap();
    let cfg = w.path("outside/audit-readonly.toml");
    std::fs::write(
        &cfg,
        format!("[audit]\npath = \"{}/audit.jsonl\"\n", ro.display()),
    )
    .unwrap();
    assert_runs_nothing(As::Nobody, &cfg, &marker);
}

#[test]
fn tampering_with_the_log_is_reported_with_the_record_number() {
    let w = world();
    let (cfg, log) = audit_config("tamper");
    for i in 0..3 {
        w.run(
            As::Root,
            "sh",
            &[("script", &format!("exit {i}"))],
            &["--config", cfg.to_str().unwrap()],
        );
    }
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(&log, text.replacen("\"exit_code\":1", "\"exit_code\":0", 1)).unwrap();
    let out = spawnd(&["audit", "verify", "--json", log.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["data"]["tamper"]["seq"], 4, "{v}");
    assert!(v["data"]["tamper"]["reason"]
        .as_str()
        .unwrap()
        .contains("edited"));
}

#[test]
fn query_tail_and_ocsf_export_read_the_log() {
    let w = world();
    let (cfg, log) = audit_config("reading");
    let c = cfg.to_str().unwrap();
    w.run(As::Root, "sh", &[("script", "exit 4")], &["--config", c]);
    w.run(
        As::Root,
        "probe0",
        &[("attack", "whoami"), ("nope", "x")],
        &["--config", c],
    );
    let l = log.to_str().unwrap();
    let q: Value = serde_json::from_slice(
        &spawnd(&[
            "audit",
            "query",
            "--json",
            "--kind",
            "denial",
            "--reason",
            "arg_unknown",
            l,
        ])
        .stdout,
    )
    .unwrap();
    assert_eq!(q["data"]["records"].as_array().unwrap().len(), 1, "{q}");
    let q: Value = serde_json::from_slice(
        &spawnd(&[
            "audit",
            "query",
            "--json",
            "--uid",
            "0",
            "--since",
            "2000-01-01T00:00:00Z",
            l,
        ])
        .stdout,
    )
    .unwrap();
    assert_eq!(q["data"]["records"].as_array().unwrap().len(), 3, "{q}");
    let tail = String::from_utf8(spawnd(&["audit", "tail", "-n", "2", l]).stdout).unwrap();
    assert!(tail.contains("exit 4") && tail.contains("DENIED"), "{tail}");
    let ocsf =
        String::from_utf8(spawnd(&["audit", "export", "--format", "ocsf", l]).stdout).unwrap();
    let events: Vec<Value> = ocsf
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 3);
    // Required attributes of OCSF 1.3 Process Activity (class 1007), per the published class definition.
    for e in &events {
        for key in [
            "activity_id",
            "category_uid",
            "class_uid",
            "time",
            "type_uid",
            "severity_id",
            "metadata",
            "actor",
            "device",
            "process",
        ] {
            assert!(!e[key].is_null(), "{key} missing in {e}");
        }
        assert_eq!(e["class_uid"], 1007);
    }
    assert_eq!(
        events
            .iter()
            .map(|e| e["type_uid"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [100701, 100702, 100701]
    );
    assert_eq!(events[2]["disposition"], "Blocked");
    // And strictly against the OCSF 1.5.0 schema itself.
    let file = log.with_extension("ocsf.jsonl");
    std::fs::write(&file, &ocsf).unwrap();
    let (code, said) = validate_ocsf(&file);
    assert_eq!(code, Some(0), "OCSF validation failed: {said}");
}

/// `scripts/validate-ocsf FILE`: its exit code, and what it printed.
fn validate_ocsf(file: &Path) -> (Option<i32>, String) {
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/validate-ocsf"
    ))
    .arg(file)
    .output()
    .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), said)
}

/// `spawnd audit export --format ocsf LOG`, written beside the log and
/// validated strictly (every event valid, or the test fails with the
/// validator's report); the events.
fn export_valid_ocsf(log: &Path) -> Vec<Value> {
    let out = spawnd(&["audit", "export", "--format", "ocsf", log.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let file = log.with_extension("ocsf.jsonl");
    std::fs::write(&file, &out.stdout).unwrap();
    let (code, said) = validate_ocsf(&file);
    assert_eq!(
        code,
        Some(0),
        "the export of {} is not valid OCSF:\n{said}",
        log.display()
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Fault test: `kill -9` of spawnd at random points while runs are in
/// progress. Afterwards the chain verifies (torn tails reported, not hidden)
/// and every run that completed has its exit record.
#[test]
fn killing_spawnd_mid_run_never_breaks_the_chain_or_loses_a_completed_run() {
    let w = world();
    let (cfg, log) = audit_config("kill9");
    let mut completed = Vec::new();
    for i in 0..24u64 {
        let mut child = w
            .command(
                As::Root,
                "sh",
                &[("script", "echo x")],
                &["--config", cfg.to_str().unwrap()],
            )
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        if i.is_multiple_of(3) {
            let out = child.wait_with_output().unwrap();
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            completed.push(v["data"]["audit_id"].as_str().unwrap().to_string());
        } else {
            std::thread::sleep(std::time::Duration::from_micros(500 + (i * 1_733) % 12_000));
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    let out = spawnd(&["audit", "verify", "--json", log.to_str().unwrap()]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{v}");
    let recs = records(&log);
    for id in &completed {
        assert!(
            recs.iter()
                .any(|r| r["kind"] == "exit" && r["audit_id"] == id.as_str()),
            "completed run {id} has no exit record"
        );
    }
}

/// A full audit filesystem: nothing runs, and the message says why.
#[test]
fn a_full_audit_location_runs_nothing() {
    let w = world();
    let mnt = w.path("outside/full-fs");
    std::fs::create_dir_all(&mnt).unwrap();
    assert!(
        Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&mnt)
            .status()
            .unwrap()
            .success(),
        "mount a tiny tmpfs (needs root)"
    );
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mnt.clone());
    let filler = vec![b'x'; 4096];
    let mut f = std::fs::File::create(mnt.join("filler")).unwrap();
    while std::io::Write::write_all(&mut f, &filler).is_ok() {}
    drop(f);
    let cfg = w.path("outside/audit-full.toml");
    std::fs::write(
        &cfg,
        format!("[audit]\npath = \"{}/audit.jsonl\"\n", mnt.display()),
    )
    .unwrap();
    let marker = w.path("rw/full-marker");
    let _ = std::fs::remove_file(&marker);
    assert_runs_nothing(As::Root, &cfg, &marker);
}

// ---------------------------------------------------------------------------
// Audit hardening: human output escapes control characters, and rotated
// files are kept only as many as `[audit] keep_rotated` says.
// ---------------------------------------------------------------------------

/// A log written by hand whose fields hold newlines and terminal escapes (a
/// record from before names were validated, or a file edited by someone):
/// `tail` and `query` print one line per record and no control byte.
#[test]
fn tail_and_query_print_control_characters_escaped_one_line_per_record() {
    let (_cfg, log) = audit_config("escapes");
    let hostile = serde_json::json!({
        "v": 1, "kind": "denial", "seq": 1, "ts": "2026-01-01T00:00:00.000Z\r",
        "audit_id": "00000000000000aa", "prev": "x", "hash": "y",
        "connector": "local://a/b\n2026-01-01T00:00:00.000Z #99 local://test/escape allowed sh \u{1b}[31mforged\u{1b}[0m",
        "op": "sh\u{1b}]0;title\u{7}", "reason": "connector_unknown\u{9b}2J", "decision": "denied",
    });
    let note = serde_json::json!({
        "v": 1, "kind": "note", "seq": 2, "ts": "2026-01-01T00:00:00.001Z",
        "audit_id": "00000000000000ab", "prev": "y", "hash": "z", "note": "a\nb\u{8}\u{7f}",
    });
    std::fs::write(&log, format!("{hostile}\n{note}\n")).unwrap();
    let l = log.to_str().unwrap();
    for args in [
        vec!["audit", "tail", l],
        vec!["audit", "query", l],
        vec!["audit", "query", "--kind", "denial", l],
    ] {
        let out = spawnd(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{args:?} printed a control character: {text:?}"
        );
        let expected = if args.contains(&"denial") { 1 } else { 2 };
        assert_eq!(text.lines().count(), expected, "{args:?}: {text}");
        assert!(text.contains("\\u{1b}[31mforged"), "{args:?}: {text}");
    }
}

/// `keep_rotated = 2`: however often the log rotates, two rotated files stay,
/// the chain over what remains verifies, and removing one more is caught.
#[test]
fn only_keep_rotated_files_remain_and_what_remains_verifies() {
    let w = world();
    let (cfg, log) = audit_config("retention");
    std::fs::write(
        &cfg,
        format!(
            "[audit]\npath = \"{}\"\nrotate_bytes = 1500\nkeep_rotated = 2\n",
            log.display()
        ),
    )
    .unwrap();
    for i in 0..24 {
        let out = w.run(
            As::Root,
            "probe0",
            &[("attack", "whoami"), ("nope", &format!("{i}"))],
            &["--config", cfg.to_str().unwrap()],
        );
        assert_eq!(out.status.code(), Some(3), "{out:?}");
    }
    let dir = log.parent().unwrap();
    let mut rotated: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.strip_prefix("audit.jsonl.")
                .is_some_and(|s| s.parse::<u64>().is_ok())
        })
        .collect();
    rotated.sort_by_key(|n| n.rsplit('.').next().unwrap().parse::<u64>().unwrap());
    assert_eq!(rotated.len(), 2, "{rotated:?}");
    assert_ne!(rotated[0], "audit.jsonl.1", "the oldest files were removed");
    let l = log.to_str().unwrap();
    let verified = spawnd(&["audit", "verify", "--json", l]);
    let v: Value = serde_json::from_slice(&verified.stdout).unwrap();
    assert_eq!(verified.status.code(), Some(0), "{v}");
    assert!(v["data"]["first_seq"].as_u64().unwrap() > 1, "{v}");
    // The retention notes are exported, as Event Log Activity: Delete.
    let events = export_valid_ocsf(&log);
    let deletes: Vec<&Value> = events.iter().filter(|e| e["type_uid"] == 100802).collect();
    assert!(
        !deletes.is_empty(),
        "no retention note exported: {events:#?}"
    );
    assert!(
        deletes
            .iter()
            .all(|e| e["unmapped"]["removed_files"].is_array()),
        "{deletes:#?}"
    );
    // Removing the oldest remaining file is not retention: it is caught.
    std::fs::remove_file(dir.join(&rotated[0])).unwrap();
    let tampered = spawnd(&["audit", "verify", "--json", l]);
    assert_eq!(
        tampered.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&tampered.stdout)
    );
}

/// A log of five records at known times, for the time filters: three on
/// 2025-06-01 (09:59:59.999, 10:00:00.000 and 10:30:00.000 UTC), then one
/// three hours and one ten minutes before now. `query` reads records, not
/// the chain, so they are written as they are.
fn timed_log(name: &str) -> std::path::PathBuf {
    let (_cfg, log) = audit_config(name);
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    let now = time::OffsetDateTime::now_utc();
    let ago = |d: time::Duration| (now - d).format(&fmt).unwrap();
    let stamps = [
        ("denial", "2025-06-01T09:59:59.999Z".to_string()),
        ("decision", "2025-06-01T10:00:00.000Z".to_string()),
        ("exit", "2025-06-01T10:30:00.000Z".to_string()),
        ("net", ago(time::Duration::hours(3))),
        ("note", ago(time::Duration::minutes(10))),
    ];
    let text: String = stamps
        .iter()
        .enumerate()
        .map(|(i, (kind, ts))| {
            format!(
                "{}\n",
                serde_json::json!({"v": 1, "kind": kind, "seq": i + 1, "ts": ts,
                    "audit_id": format!("{:016x}", i + 1), "prev": "p", "hash": "h", "note": "n"})
            )
        })
        .collect();
    std::fs::write(&log, text).unwrap();
    log
}

/// The `seq`s `audit query --json ARGS… LOG` lists (exit 0 required).
fn queried(log: &std::path::Path, args: &[&str]) -> Vec<u64> {
    let mut all = vec!["audit", "query", "--json"];
    all.extend_from_slice(args);
    all.push(log.to_str().unwrap());
    let out = spawnd(&all);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["data"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect()
}

#[test]
fn since_and_until_compare_instants_whatever_the_offset_or_precision() {
    let log = timed_log("since-instants");
    for (args, expected) in [
        (vec!["--since", "2025-06-01T10:00:00Z"], vec![2, 3, 4, 5]),
        (
            vec!["--since", "2025-06-01T12:00:00+02:00"],
            vec![2, 3, 4, 5],
        ),
        (
            vec!["--since", "2025-06-01T05:00:00.5-05:00"],
            vec![3, 4, 5],
        ),
        (vec!["--until", "2025-06-01T10:00:00.000Z"], vec![1]),
        (
            vec![
                "--since",
                "2025-06-01T10:00:00Z",
                "--until",
                "2025-06-01T10:30:00Z",
            ],
            vec![2],
        ),
    ] {
        assert_eq!(queried(&log, &args), expected, "{args:?}");
    }
}

#[test]
fn since_and_until_take_durations_back_from_now() {
    let log = timed_log("since-durations");
    for (args, expected) in [
        (vec!["--since", "1h"], vec![5]),
        (vec!["--since", "60m"], vec![5]),
        (vec!["--since", "3600s"], vec![5]),
        (vec!["--since", "1d"], vec![4, 5]),
        (vec!["--until", "2h"], vec![1, 2, 3, 4]),
        (vec!["--since", "4h", "--until", "1h"], vec![4]),
        (vec!["--since", "800d"], vec![1, 2, 3, 4, 5]),
    ] {
        assert_eq!(queried(&log, &args), expected, "{args:?}");
    }
}

#[test]
fn a_time_that_is_neither_rfc3339_nor_a_duration_is_a_usage_error_naming_the_forms() {
    let log = timed_log("since-garbage");
    let l = log.to_str().unwrap();
    for bad in [
        "--since=garbage",
        "--since=yesterday",
        "--since=15",
        "--since=15x",
        "--since=-15m",
        "--since=1.5h",
        "--since=2025-06-01",
        "--since=2025-06-01 10:00:00",
        "--since=99999999999999999999d",
        "--until=",
        "--until=1m ago",
    ] {
        let out = spawnd(&["audit", "query", bad, l]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        assert!(
            err.contains("RFC 3339") && err.contains("15m"),
            "{bad}: {err}"
        );
        assert!(out.stdout.is_empty(), "{bad}: {out:?}");
        let json = spawnd(&["audit", "export", "--format", "ocsf", "--json", bad, l]);
        assert_eq!(json.status.code(), Some(2), "{bad}: {json:?}");
        let v: Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(v["error"]["code"], "INVALID_USAGE", "{bad}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("RFC 3339"),
            "{bad}: {v}"
        );
    }
}

#[test]
fn an_unknown_kind_is_a_usage_error_listing_the_kinds() {
    let log = timed_log("kinds");
    let l = log.to_str().unwrap();
    let out = spawnd(&["audit", "query", "--kind", "bogus", l]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bogus") && err.contains("decision, denial, exit, attach, net, note"),
        "{err}"
    );
    let json = spawnd(&["audit", "query", "--json", "--kind", "Denial", l]);
    assert_eq!(json.status.code(), Some(2), "{json:?}");
    let v: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("decision, denial, exit, attach, net, note"),
        "{v}"
    );
    for (kind, seq) in [
        ("denial", 1),
        ("decision", 2),
        ("exit", 3),
        ("net", 4),
        ("note", 5),
    ] {
        assert_eq!(queried(&log, &["--kind", kind]), vec![seq], "{kind}");
    }
}

#[test]
fn two_swapped_records_are_reported_as_out_of_order_not_deleted() {
    let w = world();
    let (cfg, log) = audit_config("swapped");
    for i in 0..4 {
        let out = w.run(
            As::Root,
            "probe0",
            &[("attack", "whoami"), ("nope", &format!("{i}"))],
            &["--config", cfg.to_str().unwrap()],
        );
        assert_eq!(out.status.code(), Some(3), "{out:?}");
    }
    let l = log.to_str().unwrap();
    let mut lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.swap(1, 2);
    std::fs::write(
        &log,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    let out = spawnd(&["audit", "verify", "--json", l]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tamper = &v["data"]["tamper"];
    assert_eq!(
        (tamper["seq"].as_u64(), tamper["line"].as_u64()),
        (Some(2), Some(2)),
        "{v}"
    );
    let reason = tamper["reason"].as_str().unwrap();
    assert!(
        reason.contains("out of order") && reason.contains("line 3") && !reason.contains("deleted"),
        "{reason}"
    );
    let text = String::from_utf8(spawnd(&["audit", "verify", l]).stdout).unwrap();
    assert!(
        text.contains("TAMPERED at seq 2") && text.contains("out of order"),
        "{text}"
    );
    // A record really removed is still reported as deleted.
    lines.swap(1, 2);
    lines.remove(1);
    std::fs::write(
        &log,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    let out = spawnd(&["audit", "verify", "--json", l]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["data"]["tamper"]["reason"]
            .as_str()
            .unwrap()
            .contains("deleted"),
        "{v}"
    );
}

/// A log rotated at least three times (`rotate_bytes`; every rotated file
/// kept), written by
/// denied runs: each a denial record.
fn rotated_log(name: &str, runs: usize) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cfg, log) = audit_config(name);
    std::fs::write(
        &cfg,
        format!(
            "[audit]\npath = \"{}\"\nrotate_bytes = 1500\nkeep_rotated = 1000\n",
            log.display()
        ),
    )
    .unwrap();
    deny(&cfg, 0..runs);
    (cfg, log)
}

/// Denied runs, each leaving one denial record.
fn deny(cfg: &std::path::Path, runs: std::ops::Range<usize>) {
    for i in runs {
        let out = world().run(
            As::Root,
            "probe0",
            &[("attack", "whoami"), ("nope", &format!("{i}"))],
            &["--config", cfg.to_str().unwrap()],
        );
        assert_eq!(out.status.code(), Some(3), "{out:?}");
    }
}

/// The seqs of `--json` lines.
fn seqs_of(stdout: &[u8]) -> Vec<u64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["seq"].as_u64())
        .collect()
}

/// `query`, `tail` and `export` read the whole chain: the rotated files,
/// oldest first, then the live one.
#[test]
fn query_tail_and_export_read_the_rotated_files_too() {
    let (_cfg, log) = rotated_log("chain-read", 24);
    let l = log.to_str().unwrap();
    let rotated = std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("audit.jsonl.")
        })
        .count();
    assert!(rotated >= 3, "{rotated} rotated files");
    let denials = spawnd(&["audit", "query", "--kind", "denial", "--json", l]);
    let v: Value = serde_json::from_slice(&denials.stdout).unwrap();
    let seqs: Vec<u64> = v["data"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs.len(), 24, "{v}");
    assert_eq!(seqs[0], 1, "{v}");
    let tail = spawnd(&["audit", "tail", "-n", "30", "--json", l]);
    let v: Value = serde_json::from_slice(&tail.stdout).unwrap();
    assert_eq!(v["data"]["records"].as_array().unwrap().len(), 24, "{v}");
    let from = spawnd(&["audit", "tail", "--from-seq", "20", "--json", l]);
    let v: Value = serde_json::from_slice(&from.stdout).unwrap();
    let seqs: Vec<u64> = v["data"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [20, 21, 22, 23, 24], "{v}");
    let export = spawnd(&["audit", "export", "--format", "ocsf", l]);
    assert_eq!(
        String::from_utf8_lossy(&export.stdout).lines().count(),
        24,
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
}

/// `tail -f` follows the log across rotations: every record exactly once,
/// in order, while runs append and rotate beside it.
#[test]
fn a_follower_across_three_rotations_prints_every_record_exactly_once() {
    let (cfg, log) = rotated_log("chain-follow", 2);
    let mut follower = Command::new(&world().spawnd)
        .args(["audit", "tail", "-f", "-n", "100", "--json"])
        .arg(&log)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    deny(&cfg, 2..40);
    let rotated = std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("audit.jsonl.")
        })
        .count();
    assert!(rotated >= 3, "{rotated} rotated files");
    // The follower polls every 250 ms; give it time to catch up.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    follower.kill().unwrap();
    let out = follower.wait_with_output().unwrap();
    assert_eq!(seqs_of(&out.stdout), (1..=40).collect::<Vec<u64>>());
}

/// `export --follow` gives an OCSF event for every record, across
/// rotations, each once.
#[test]
fn an_ocsf_export_follows_across_rotations() {
    let (cfg, log) = rotated_log("chain-export", 2);
    let mut export = Command::new(&world().spawnd)
        .args(["audit", "export", "--format", "ocsf", "--follow"])
        .arg(&log)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    deny(&cfg, 2..30);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    export.kill().unwrap();
    let out = export.wait_with_output().unwrap();
    let seqs: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|e| e["metadata"]["sequence"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(
        seqs,
        (1..=30).collect::<Vec<u64>>(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `audit keygen` writes a 256-bit key (64 hex digits, mode 0600) and never
/// overwrites one; a key shorter than 32 bytes runs nothing and says how to
/// make one; a generated key chains and verifies.
#[test]
fn keys_are_made_by_keygen_and_short_ones_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let w = world();
    let (cfg, log) = audit_config("keys");
    let dir = log.parent().unwrap();
    let key = dir.join("audit.key");
    let made = spawnd(&["audit", "keygen", key.to_str().unwrap()]);
    assert_eq!(made.status.code(), Some(0), "{made:?}");
    let text = std::fs::read_to_string(&key).unwrap();
    assert_eq!(text.len(), 65, "{text:?}");
    assert!(text.trim_end().bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let again = spawnd(&["audit", "keygen", key.to_str().unwrap()]);
    assert_ne!(again.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&key).unwrap(), text);
    let short = dir.join("short.key");
    std::fs::write(&short, "k\n").unwrap();
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = |k: &std::path::Path| {
        std::fs::write(
            &cfg,
            format!(
                "[audit]\npath = \"{}\"\nhmac_key_file = \"{}\"\n",
                log.display(),
                k.display()
            ),
        )
        .unwrap()
    };
    config(&short);
    let refused = w.run(
        As::Root,
        "probe0",
        &[("attack", "whoami")],
        &["--config", cfg.to_str().unwrap()],
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_ne!(refused.status.code(), Some(0), "{said}");
    assert!(
        said.contains("is 1 bytes, fewer than the 32") && said.contains("spawnd audit keygen"),
        "{said}"
    );
    assert!(records(&log).is_empty(), "nothing ran, nothing was written");
    config(&key);
    let ran = w.run(
        As::Root,
        "probe0",
        &[("attack", "whoami")],
        &["--config", cfg.to_str().unwrap()],
    );
    assert_eq!(ran.status.code(), Some(0), "{ran:?}");
    assert!(records(&log)[0]["hash"]
        .as_str()
        .unwrap()
        .starts_with("hmac-sha256:"));
    let verified = spawnd(&["audit", "verify", "--config", cfg.to_str().unwrap()]);
    assert_eq!(verified.status.code(), Some(0), "{verified:?}");
}

/// The `0::` line of a `/proc/PID/cgroup` text, or its lines joined with `;`.
fn cgroup_of(pid: u32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    match text.lines().find_map(|l| l.strip_prefix("0::")) {
        Some(path) => path.to_string(),
        None => text.lines().collect::<Vec<_>>().join(";"),
    }
}

/// Every record names the host that wrote it, and a run's records say it
/// came through the command line, from which process, in which cgroup,
/// started when, as which login, under which manifest file.
#[test]
fn records_name_the_host_and_where_a_command_line_request_came_from() {
    let w = world();
    let (cfg, log) = audit_config("origin-cli");
    let out = w.run(
        As::Root,
        "sh",
        &[("script", "true")],
        &["--config", cfg.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let recs = records(&log);
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let hostname = nix::unistd::gethostname().unwrap();
    for r in &recs {
        assert_eq!(r["machine"]["boot_id"], boot_id.trim(), "{r}");
        assert_eq!(r["machine"]["hostname"], hostname.to_str().unwrap(), "{r}");
        if let Ok(machine_id) = std::fs::read_to_string("/etc/machine-id") {
            assert_eq!(r["machine"]["machine_id"], machine_id.trim(), "{r}");
        }
    }
    let decision = &recs[0];
    let caller = &decision["caller"];
    assert_eq!(caller["via"], "cli", "{decision}");
    // spawnd's parent is this test.
    assert_eq!(caller["parent"]["pid"], std::process::id(), "{caller}");
    let me = std::fs::read_link("/proc/self/exe").unwrap();
    assert_eq!(caller["parent"]["exe"], me.to_str().unwrap(), "{caller}");
    assert_eq!(caller["cgroup"], cgroup_of(std::process::id()), "{caller}");
    let started = time::OffsetDateTime::parse(
        caller["start_time"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let age = time::OffsetDateTime::now_utc() - started;
    assert!(
        age < time::Duration::minutes(10) && age > -time::Duration::seconds(2),
        "{caller}"
    );
    assert_eq!(
        decision["manifest_path"],
        w.manifest.display().to_string(),
        "{decision}"
    );
    assert_eq!(recs[1]["caller"]["via"], "cli");
}

/// Every record also goes, as it is written, to the host's log service
/// when `[audit] forward` names one: the same bytes as the file's line.
#[test]
fn records_are_forwarded_to_syslog_and_journald_as_they_are_written() {
    let w = world();
    for service in ["syslog", "journald"] {
        let (cfg, log) = audit_config(&format!("forward-{service}"));
        let socket = log.with_file_name("log.sock");
        let server = std::os::unix::net::UnixDatagram::bind(&socket).unwrap();
        server
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        std::fs::write(
            &cfg,
            format!(
                "[audit]\npath = \"{}\"\nforward = \"{service}\"\nforward_socket = \"{}\"\n",
                log.display(),
                socket.display()
            ),
        )
        .unwrap();
        let out = w.run(
            As::Root,
            "sh",
            &[("script", "true")],
            &["--config", cfg.to_str().unwrap()],
        );
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let lines: Vec<String> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(lines.len(), 2);
        for line in &lines {
            let mut buf = vec![0u8; 1 << 16];
            let n = harness::uninterrupted(|| server.recv(&mut buf)).unwrap();
            let got = String::from_utf8_lossy(&buf[..n]).into_owned();
            match service {
                "syslog" => {
                    assert!(got.starts_with("<86>spawnd["), "{got}");
                    assert!(got.ends_with(&format!("]: {line}")), "{got}");
                }
                _ => {
                    assert!(got.contains("SYSLOG_IDENTIFIER=spawnd\n"), "{got}");
                    assert!(got.contains(&format!("SPAWND_RECORD={line}\n")), "{got}");
                    let record: Value = serde_json::from_str(line).unwrap();
                    assert!(
                        got.contains(&format!("SPAWND_SEQ={}\n", record["seq"])),
                        "{got}"
                    );
                }
            }
        }
    }
}

/// A config whose chain is keyed with a fresh key; returns (config, log, key).
fn keyed_config(name: &str) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let (cfg, log) = audit_config(name);
    let key = log.parent().unwrap().join("audit.key");
    let made = spawnd(&["audit", "keygen", key.to_str().unwrap()]);
    assert_eq!(made.status.code(), Some(0), "{made:?}");
    std::fs::write(
        &cfg,
        format!(
            "[audit]\npath = \"{}\"\nhmac_key_file = \"{}\"\n",
            log.display(),
            key.display()
        ),
    )
    .unwrap();
    (cfg, log, key)
}

/// `n` denied runs, each one denial record.
fn denied_runs(cfg: &std::path::Path, n: usize) {
    let w = world();
    for i in 0..n {
        let out = w.run(
            As::Root,
            "probe0",
            &[("attack", "whoami"), ("nope", &format!("{i}"))],
            &["--config", cfg.to_str().unwrap()],
        );
        assert_eq!(out.status.code(), Some(3), "{out:?}");
    }
}

fn verify_json(args: &[&str]) -> (Option<i32>, Value) {
    let mut all = vec!["audit", "verify", "--json"];
    all.extend_from_slice(args);
    let out = spawnd(&all);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{out:?}"));
    (out.status.code(), v)
}

/// Issue 35, point 3: the last 3 records dropped and the head rewritten
/// with values copied from the log, or the head deleted, are caught when
/// the chain is keyed.
#[test]
fn a_cut_tail_with_a_head_copied_from_the_log_or_no_head_fails_a_keyed_chain() {
    let (cfg, log, _key) = keyed_config("cut-tail");
    denied_runs(&cfg, 6);
    let c = cfg.to_str().unwrap();
    assert_eq!(verify_json(&["--config", c]).0, Some(0));
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    std::fs::write(
        &log,
        lines[..3]
            .iter()
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    )
    .unwrap();
    let third: Value = serde_json::from_str(&lines[2]).unwrap();
    let head = log.with_extension("jsonl.head");
    let old: Value = serde_json::from_str(&std::fs::read_to_string(&head).unwrap()).unwrap();
    let copied = serde_json::json!({"seq": 3, "hash": third["hash"], "counter": old["counter"], "mac": old["mac"]});
    std::fs::write(&head, copied.to_string()).unwrap();
    let (code, v) = verify_json(&["--config", c]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["data"]["tamper"]["seq"], 4, "{v}");
    assert!(v["data"]["tamper"]["reason"]
        .as_str()
        .unwrap()
        .contains("rewritten without the key"));
    std::fs::remove_file(&head).unwrap();
    let (code, v) = verify_json(&["--config", c]);
    assert_eq!(code, Some(1), "{v}");
    assert!(v["data"]["tamper"]["reason"]
        .as_str()
        .unwrap()
        .contains("no head file"));
}

/// Issue 35, point 5: replacing the key keeps the old chain verifying. A
/// writer without the old key refuses (exit 5, saying how to fix it); with
/// it as a retired key, it seals a rotation note under both.
#[test]
fn replacing_the_hmac_key_seals_a_rotation_and_the_whole_chain_verifies() {
    let (cfg, log, old) = keyed_config("rotate-key");
    denied_runs(&cfg, 2);
    let new = log.parent().unwrap().join("new.key");
    assert_eq!(
        spawnd(&["audit", "keygen", new.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    let config = |previous: &str| {
        std::fs::write(
            &cfg,
            format!(
                "[audit]\npath = \"{}\"\nhmac_key_file = \"{}\"\n{previous}",
                log.display(),
                new.display()
            ),
        )
        .unwrap()
    };
    config("");
    let c = cfg.to_str().unwrap();
    let refused = world().run(
        As::Root,
        "probe0",
        &[("attack", "whoami")],
        &["--config", c],
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(refused.status.code(), Some(5), "{said}");
    assert!(said.contains("previous_hmac_key_files"), "{said}");
    assert_eq!(records(&log).len(), 2, "nothing written");
    config(&format!(
        "previous_hmac_key_files = [\"{}\"]\n",
        old.display()
    ));
    denied_runs(&cfg, 2);
    let recs = records(&log);
    assert_eq!(recs[2]["kind"], "note", "{:?}", recs[2]);
    assert!(recs[2]["key_rotated"]["to_key_id"].is_string());
    let (code, v) = verify_json(&["--config", c]);
    assert_eq!(code, Some(0), "{v}");
    // Off the host: no config, the keys given as --key.
    let empty = log.parent().unwrap().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let (code, v) = verify_json(&[
        "--config",
        empty.to_str().unwrap(),
        "--key",
        new.to_str().unwrap(),
        "--key",
        old.to_str().unwrap(),
        log.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{v}");
    // The new key alone does not vouch for the old records.
    let (code, _) = verify_json(&[
        "--config",
        empty.to_str().unwrap(),
        "--key",
        new.to_str().unwrap(),
        log.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1));
}

/// Rewrites every record of `log` with `edit`, resealing the chain and the
/// head with `key`: what root holding the key can do.
fn reseal(log: &std::path::Path, key: &[u8], edit: &dyn Fn(&mut serde_json::Map<String, Value>)) {
    use spawnd::internals::audit::record::{chain_hash, head_mac, GENESIS};
    let mut prev = GENESIS.to_string();
    let mut out = String::new();
    let mut seq = 0;
    for line in std::fs::read_to_string(log).unwrap().lines() {
        let mut r: serde_json::Map<String, Value> = serde_json::from_str(line).unwrap();
        edit(&mut r);
        seq += 1;
        r.insert("seq".into(), seq.into());
        r.insert("prev".into(), prev.clone().into());
        r.remove("hash");
        prev = chain_hash(&r, Some(key));
        r.insert("hash".into(), prev.clone().into());
        out.push_str(&format!("{}\n", Value::Object(r)));
    }
    std::fs::write(log, out).unwrap();
    let head = serde_json::json!({"seq": seq, "hash": prev, "counter": 1000, "mac": head_mac(key, seq, &prev, 1000)});
    std::fs::write(log.with_extension("jsonl.head"), head.to_string()).unwrap();
}

/// Issue 35, point 4: root holding the HMAC key rewrites records, drops a
/// spawn and renumbers, or wipes the log and starts again: the host's own
/// verify says intact, a signed checkpoint taken before catches each, off
/// the host with just the files, the keys and the public key.
#[test]
fn a_signed_checkpoint_catches_what_root_with_the_key_rewrites() {
    let (cfg, log, key) = keyed_config("checkpoint");
    let dir = log.parent().unwrap().to_path_buf();
    let signing = dir.join("checkpoint.key");
    let made = spawnd(&[
        "audit",
        "keygen",
        "--signing",
        "--json",
        signing.to_str().unwrap(),
    ]);
    assert_eq!(made.status.code(), Some(0), "{made:?}");
    let public = serde_json::from_slice::<Value>(&made.stdout).unwrap()["data"]["public_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(public.starts_with("ed25519:"), "{public}");
    let again = spawnd(&["audit", "keygen", "--public", signing.to_str().unwrap()]);
    assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), public);
    let refused = spawnd(&["audit", "keygen", "--signing", signing.to_str().unwrap()]);
    assert_ne!(refused.status.code(), Some(0), "never over a key");
    denied_runs(&cfg, 5);
    let c = cfg.to_str().unwrap();
    let checkpoints = dir.join("checkpoints.jsonl");
    let taken = spawnd(&[
        "audit",
        "checkpoint",
        "--config",
        c,
        "--signing-key",
        signing.to_str().unwrap(),
        "-o",
        checkpoints.to_str().unwrap(),
    ]);
    assert_eq!(taken.status.code(), Some(0), "{taken:?}");
    let line: Value = serde_json::from_slice(&taken.stdout).unwrap();
    assert_eq!(line["seq"], 5, "{line}");
    assert_eq!(line["public_key"], public.as_str());
    for field in ["hostname", "machine_id", "boot_id"] {
        assert!(line["machine"].get(field).is_some(), "{line}");
    }
    assert_eq!(
        std::fs::read_to_string(&checkpoints).unwrap().trim(),
        String::from_utf8_lossy(&taken.stdout).trim()
    );
    denied_runs(&cfg, 2);
    let snapshot = std::fs::read(&log).unwrap();
    let key_bytes = std::fs::read_to_string(&key).unwrap();
    let key_bytes = key_bytes.trim_end().as_bytes();
    // Off the host: a copy of the files, no config but an empty one.
    let offhost = dir.join("offhost");
    std::fs::create_dir_all(&offhost).unwrap();
    let empty = offhost.join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let shipped = offhost.join("audit.jsonl");
    let verify_offhost = || {
        std::fs::copy(&log, &shipped).unwrap();
        std::fs::copy(
            log.with_extension("jsonl.head"),
            shipped.with_extension("jsonl.head"),
        )
        .unwrap();
        verify_json(&[
            "--config",
            empty.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
            "--checkpoint",
            checkpoints.to_str().unwrap(),
            "--public-key",
            &public,
            shipped.to_str().unwrap(),
        ])
    };
    let (code, v) = verify_offhost();
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["data"]["anchored"].as_array().unwrap().len(), 1, "{v}");
    type Rewrite<'a> = Box<dyn Fn(&std::path::Path) + 'a>;
    let rewrites: Vec<(&str, Rewrite)> = vec![
        (
            "every record's caller uid rewritten",
            Box::new(|l: &std::path::Path| {
                reseal(l, key_bytes, &|r| {
                    if let Some(caller) = r.get_mut("caller") {
                        caller["uid"] = 4242.into();
                    }
                })
            }),
        ),
        (
            "a record dropped and the rest renumbered",
            Box::new(|l: &std::path::Path| {
                let text = std::fs::read_to_string(l).unwrap();
                let kept: String = text
                    .lines()
                    .enumerate()
                    .filter(|(i, _)| *i != 1)
                    .map(|(_, x)| format!("{x}\n"))
                    .collect();
                std::fs::write(l, kept).unwrap();
                reseal(l, key_bytes, &|_| {});
            }),
        ),
        (
            "the log wiped and started again at seq 1",
            Box::new(|l: &std::path::Path| {
                let text = std::fs::read_to_string(l).unwrap();
                let first: String = text.lines().take(3).map(|x| format!("{x}\n")).collect();
                std::fs::write(l, first).unwrap();
                reseal(l, key_bytes, &|r| {
                    r.insert("ts".into(), "2030-01-01T00:00:00.000Z".into());
                });
            }),
        ),
    ];
    for (what, rewrite) in rewrites {
        std::fs::write(&log, &snapshot).unwrap();
        rewrite(&log);
        let (code, v) = verify_json(&["--config", c]);
        assert_eq!(
            code,
            Some(0),
            "{what}: the host's own verify is fooled: {v}"
        );
        let (code, v) = verify_offhost();
        assert_eq!(code, Some(1), "{what}: {v}");
        let reason = v["data"]["tamper"]["reason"].as_str().unwrap();
        assert!(reason.contains("checkpoint"), "{what}: {reason}");
    }
    // A checkpoint signed by another key, or edited, vouches for nothing.
    let (code, _) = verify_json(&[
        "--config",
        empty.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
        "--checkpoint",
        checkpoints.to_str().unwrap(),
        "--public-key",
        &format!("ed25519:{}", "11".repeat(32)),
        shipped.to_str().unwrap(),
    ]);
    assert_ne!(code, Some(0));
    let edited = offhost.join("edited.jsonl");
    std::fs::write(
        &edited,
        std::fs::read_to_string(&checkpoints)
            .unwrap()
            .replacen("\"seq\":5", "\"seq\":4", 1),
    )
    .unwrap();
    let (code, v) = verify_json(&[
        "--config",
        empty.to_str().unwrap(),
        "--checkpoint",
        edited.to_str().unwrap(),
        "--public-key",
        &public,
        shipped.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(4), "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("signature does not verify"));
    // A chain that does not verify is not signed.
    std::fs::write(
        &log,
        String::from_utf8_lossy(&snapshot).replacen("\"seq\":2", "\"seq\":9", 1),
    )
    .unwrap();
    let refused = spawnd(&[
        "audit",
        "checkpoint",
        "--config",
        c,
        "--signing-key",
        signing.to_str().unwrap(),
    ]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stdout).contains("not signed"));
}

/// Issue 35, point 10 (verify stops at the first break): every break is
/// listed in the text and in `tampered`, `tamper` staying the first.
#[test]
fn verify_reports_every_break_not_only_the_first() {
    let (cfg, log) = audit_config("every-break");
    denied_runs(&cfg, 8);
    let mut lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines[1] = lines[1].replacen("\"ts\":\"20", "\"ts\":\"19", 1);
    lines[6] = lines[6].replacen("\"ts\":\"20", "\"ts\":\"19", 1);
    lines.remove(4);
    std::fs::write(
        &log,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    let l = log.to_str().unwrap();
    let (code, v) = verify_json(&[l]);
    assert_eq!(code, Some(1), "{v}");
    let at: Vec<u64> = v["data"]["tampered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(at, [2, 5, 7], "{v}");
    assert_eq!(v["data"]["tamper"]["seq"], 2);
    let text = String::from_utf8(spawnd(&["audit", "verify", l]).stdout).unwrap();
    assert_eq!(text.matches("TAMPERED at seq").count(), 3, "{text}");
}

/// Issue 35, point 4: a shipped segment (a rotated file on its own) is
/// verified from its first record, its start vouched for by an anchor or
/// said to be unanchored.
#[test]
fn a_shipped_segment_verifies_on_its_own() {
    let (cfg, log) = audit_config("segment");
    denied_runs(&cfg, 6);
    let all: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let segment = log.parent().unwrap().join("segment.jsonl");
    std::fs::write(
        &segment,
        all[3..]
            .iter()
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    )
    .unwrap();
    let s = segment.to_str().unwrap();
    let (code, v) = verify_json(&[s]);
    assert_eq!(code, Some(1), "{v}");
    assert!(v["data"]["tamper"]["reason"]
        .as_str()
        .unwrap()
        .contains("--from-seq 4"));
    let out = spawnd(&["audit", "verify", "--from-seq", "4", s]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("segment from seq 4, start unanchored"),
        "{text}"
    );
    let third: Value = serde_json::from_str(&all[2]).unwrap();
    let anchor = format!("3:{}", third["hash"].as_str().unwrap());
    let out = spawnd(&["audit", "verify", "--anchor", &anchor, s]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("segment from seq 4, start vouched by --anchor 3:"),
        "{text}"
    );
    let bad = spawnd(&["audit", "verify", "--anchor", "3:sha256:00", s]);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "a malformed anchor is a usage error"
    );
}

// ---------------------------------------------------------------------------
// The OCSF export, strictly valid: the validator refuses what the schema
// does not allow, and an export of every kind of record a run makes passes.
// ---------------------------------------------------------------------------

/// A valid OCSF 1.5.0 Process Activity event, written by hand.
fn launch_event() -> Value {
    json!({
        "class_uid": 1007, "class_name": "Process Activity",
        "category_uid": 1, "category_name": "System Activity",
        "activity_id": 1, "activity_name": "Launch",
        "type_uid": 100701, "type_name": "Process Activity: Launch",
        "severity_id": 1, "severity": "Informational",
        "status_id": 1, "status": "Success",
        "disposition_id": 1, "disposition": "Allowed",
        "time": 1_795_309_323_456_i64,
        "metadata": {"version": "1.5.0", "profiles": ["security_control"], "product": {"name": "spawnd", "vendor_name": "spawnd"}, "uid": "a:1"},
        "actor": {"user": {"uid": "1000"}, "process": {"pid": 7}},
        "device": {"hostname": "build-7", "type_id": 0},
        "process": {"pid": 4242, "cmd_line": "git status", "file": {"name": "git", "path": "/usr/bin/git", "type_id": 1, "hashes": [{"algorithm_id": 3, "value": "ab12"}]}},
        "unmapped": {"anything": {"goes": [1, "here", null]}},
    })
}

/// Sets `path` (dotted) of `event` to `value`, or removes it for `None`.
fn edited(mut event: Value, path: &str, value: Option<Value>) -> Value {
    let (parent, key) = path.rsplit_once('.').unwrap_or(("", path));
    let target = parent
        .split('.')
        .filter(|k| !k.is_empty())
        .fold(&mut event, |v, k| &mut v[k]);
    match value {
        Some(v) => target[key] = v,
        None => {
            target.as_object_mut().unwrap().remove(key);
        }
    }
    event
}

/// `scripts/validate-ocsf` accepts a valid event and refuses, each with
/// its line, attribute path and why: a required attribute missing, a value
/// of the wrong type, an unknown attribute, an `at_least_one` constraint
/// unmet, a profile's attribute without the profile declared, an unknown
/// profile, an enum value the class does not define, a `type_uid` that is
/// not class * 100 + activity, a sibling that is not its enum's caption, a
/// hash that is not hex, a null, a lone value where an array belongs, an
/// older OCSF version.
#[test]
fn the_ocsf_validator_refuses_what_the_schema_does_not_allow() {
    let dir = world().path("outside/ocsf-validator");
    std::fs::create_dir_all(&dir).unwrap();
    let one = dir.join("accepted.jsonl");
    std::fs::write(&one, format!("{}\n", launch_event())).unwrap();
    let (code, said) = validate_ocsf(&one);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("1 events, 0 invalid"), "{said}");

    let bad: Vec<(Value, &str)> = vec![
        (
            edited(launch_event(), "time", None),
            "time: required attribute missing",
        ),
        (
            edited(launch_event(), "process.pid", Some(json!("4242"))),
            "process.pid: is a string, not integer_t",
        ),
        (
            edited(launch_event(), "process.colour", Some(json!("red"))),
            "process.colour: unknown attribute: object 'process' does not define 'colour'",
        ),
        (
            edited(
                edited(launch_event(), "process.pid", None),
                "process.file",
                None,
            ),
            "process: object 'process' needs at least one of pid, uid, cpid; none is given",
        ),
        (
            edited(launch_event(), "metadata.profiles", Some(json!([]))),
            "disposition_id: belongs to profile security_control, which metadata.profiles does not declare",
        ),
        (
            edited(
                launch_event(),
                "metadata.profiles",
                Some(json!(["security_control", "nonesuch"])),
            ),
            "metadata.profiles[1]: the schema in",
        ),
        (
            edited(
                edited(
                    edited(launch_event(), "activity_id", Some(json!(7))),
                    "type_uid",
                    Some(json!(100707)),
                ),
                "activity_name",
                None,
            ),
            "activity_id: 7 is not a value of this enum",
        ),
        (
            edited(launch_event(), "type_uid", Some(json!(100702))),
            "type_uid: is 100702, not class_uid 1007 * 100 + activity_id 1 = 100701",
        ),
        (
            edited(launch_event(), "activity_name", Some(json!("Terminate"))),
            "activity_name: is 'Terminate', but activity_id 1 is 'Launch'",
        ),
        (
            edited(
                launch_event(),
                "process.file.hashes",
                Some(json!([{"algorithm_id": 3, "value": "sha256:ab12"}])),
            ),
            "process.file.hashes[0].value: 'sha256:ab12' does not match file_hash_t's pattern",
        ),
        (
            edited(launch_event(), "exit_code", Some(Value::Null)),
            "exit_code: is null",
        ),
        (
            edited(launch_event(), "metadata.profiles", Some(json!("security_control"))),
            "metadata.profiles: is a string, not an array of string_t",
        ),
        (
            edited(launch_event(), "metadata.version", Some(json!("1.4.0"))),
            "metadata.version: is '1.4.0'; this schema is '1.5.0'",
        ),
    ];
    let file = dir.join("mixed.jsonl");
    let text: String = std::iter::once(launch_event())
        .chain(bad.iter().map(|(e, _)| e.clone()))
        .map(|e| format!("{e}\n"))
        .collect();
    std::fs::write(&file, text).unwrap();
    let (code, said) = validate_ocsf(&file);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        !said.contains("line 1:"),
        "the valid event was refused: {said}"
    );
    for (i, (_, why)) in bad.iter().enumerate() {
        let expected = format!("line {}: {why}", i + 2);
        assert!(
            said.contains(&expected),
            "expected {expected:?} in:\n{said}"
        );
    }
    assert!(
        said.contains(&format!("{} events, {} invalid", bad.len() + 1, bad.len())),
        "{said}"
    );
    // Nothing to validate is not a pass.
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    assert_eq!(validate_ocsf(&empty).0, Some(1));
}

/// A host server that answers every connection with a short HTTP reply.
fn http_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            let _ = std::io::Read::read(&mut stream, &mut request);
            let _ = std::io::Write::write_all(
                &mut stream,
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
            );
        }
    });
    port
}

/// A port on the host's loopback where nothing listens.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The records of `log` (a torn line left out) once `done` holds for
/// them (10 s at most).
fn records_once(log: &Path, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let started = std::time::Instant::now();
    loop {
        let recs: Vec<Value> = std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if done(&recs) || started.elapsed() > std::time::Duration::from_secs(10) {
            return recs;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The issue's "done": one log holding every kind of record the suite's
/// runs make (`spawnd run`: clean, nonzero, killed by a signal, past its
/// wall time, refused, failed in setup, connections granted, refused and
/// failed, a datagram and a DNS name refused; `spawnd serve`: a detached
/// spawn taken up and killed there, an invalid name refused three times
/// and counted; a torn line chained past) exports to events every one of
/// which the strict validator accepts, and which carry what a SIEM needs.
#[test]
fn an_export_of_every_kind_of_record_a_run_makes_is_strictly_valid_ocsf() {
    let w = world();
    let (cfg, log) = audit_config("ocsf-whole-run");
    let c = cfg.to_str().unwrap();
    let run = |script: &str, extra: &[&str]| {
        let mut all = vec!["--config", c];
        all.extend_from_slice(extra);
        w.run(As::Root, "sh", &[("script", script)], &all)
    };
    assert_eq!(run("echo hello", &[]).status.code(), Some(0));
    assert_eq!(run("exit 4", &[]).status.code(), Some(4));
    run("kill -9 $$", &[]);
    assert_eq!(
        run("sleep 10", &["--timeout", "300ms"]).status.code(),
        Some(124)
    );
    let refused = w.run(
        As::Root,
        "probe1",
        &[("attack", "x"), ("a1", "x"), ("extra", "y")],
        &["--config", c],
    );
    assert_eq!(refused.status.code(), Some(3));
    // A crash mid-write leaves a torn line; the next writer chains past it
    // with a note.
    let mut torn = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut torn, b"{\"v\":1,\"kind\":\"dec").unwrap();
    drop(torn);
    let strict = log.with_file_name("strict.toml");
    std::fs::write(
        &strict,
        format!(
            "[audit]\npath = \"{}\"\n[sandbox]\nlandlock_min_abi = 99\n",
            log.display()
        ),
    )
    .unwrap();
    let unstarted = w.run(
        As::Root,
        "true",
        &[],
        &["--config", strict.to_str().unwrap()],
    );
    assert_eq!(unstarted.status.code(), Some(5), "{unstarted:?}");

    // Connections: granted and served, granted with no listener, refused;
    // a datagram and a DNS name, refused.
    let (served, dead) = (http_server(), dead_port());
    let manifest = log.with_file_name("net.toml");
    std::fs::write(
        &manifest,
        format!(
            r#"[connector]
name = "local://test/ocsf-net"
version = "1.0.0"

[capabilities.spawn]
programs = [{{ path = "/usr/bin/python3" }}]
network = ["127.0.0.1:{served}", "127.0.0.1:{dead}"]

[capabilities.spawn.operations.python]
argv = "python3 -c {{code}}"
"#
        ),
    )
    .unwrap();
    let code = format!(
        "import socket, urllib.request\n\
         print(urllib.request.urlopen('http://127.0.0.1:{served}/', timeout=5).read())\n\
         for host, port in (('127.0.0.1', {dead}), ('192.0.2.1', 80)):\n    try: socket.create_connection((host, port), timeout=5).close()\n    except OSError: pass\n\
         try: socket.getaddrinfo('leak.invalid', 80)\nexcept OSError: pass\n\
         try: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('192.0.2.1', 53))\nexcept OSError: pass\n"
    );
    let net = w
        .command_for(
            As::Root,
            &manifest,
            "python",
            &[("code", &code)],
            &["--config", c],
        )
        .output()
        .unwrap();
    assert_eq!(net.status.code(), Some(0), "{net:?}");

    // The daemon: a detached spawn taken up by another connection and
    // killed there; an invalid connector name, three times on one
    // connection (the first recorded, the repeats counted when it closes).
    let d = daemon_harness::Daemon::start_logging_to("ocsf-whole-run", &log);
    let mut first = d.client();
    let kept = first.ok(
        "spawn_op",
        json!({"connector": daemon_harness::CONNECTOR, "op": "sh", "args": {"script": "sleep 60"}, "lease_ms": 60000, "label": "ocsf-run"}),
    );
    drop(first);
    let mut second = d.client();
    let handle = kept["handle"].clone();
    second.attach_once_parked(&handle, &kept["token"]);
    second.ok("spawn_kill", json!({"handle": handle}));
    second.ok("spawn_status", json!({"handle": handle, "wait_ms": 10000}));
    let mut third = d.client();
    for _ in 0..3 {
        let answer = third.call("spawn_op", json!({"connector": "not a name", "op": "sh"}));
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
    }
    drop(third);
    let recs = records_once(&log, |r| {
        r.iter()
            .any(|r| r["kind"] == "denial" && r["repeats"].is_object())
            && r.iter()
                .any(|r| r["kind"] == "exit" && r["interrupted_by"] == "spawn_kill")
    });
    drop(d);

    // Every kind the suite makes is in the log, which verifies.
    let has = |f: &dyn Fn(&Value) -> bool| recs.iter().any(f);
    for (what, found) in [
        (
            "a clean exit",
            has(&|r| r["kind"] == "exit" && r["exit_code"] == 0),
        ),
        (
            "a nonzero exit",
            has(&|r| r["kind"] == "exit" && r["exit_code"] == 4),
        ),
        (
            "a signal kill",
            has(&|r| r["kind"] == "exit" && r["signal"] == 9 && r["interrupted_by"].is_null()),
        ),
        (
            "a timeout",
            has(&|r| r["kind"] == "exit" && r["timed_out"] == true),
        ),
        (
            "a setup failure",
            has(&|r| r["kind"] == "exit" && r["setup_failed"].is_string()),
        ),
        (
            "a kill by a peer",
            has(&|r| r["kind"] == "exit" && r["interrupted_by"] == "spawn_kill"),
        ),
        (
            "a denial",
            has(&|r| r["kind"] == "denial" && r["reason"] == "arg_unknown"),
        ),
        (
            "an invalid name's denial",
            has(&|r| {
                r["kind"] == "denial" && r["class"] == "invalid_params" && r["repeats"].is_null()
            }),
        ),
        (
            "a record of repeats",
            has(&|r| r["kind"] == "denial" && r["repeats"]["count"].is_u64()),
        ),
        ("an attach", has(&|r| r["kind"] == "attach")),
        (
            "a connection",
            has(&|r| r["kind"] == "net" && r["connected"] == true),
        ),
        (
            "a failed dial",
            has(&|r| r["kind"] == "net" && r["allowed"] == true && r["connected"] == false),
        ),
        (
            "a refused connection",
            has(&|r| r["kind"] == "net" && r["protocol"] == "tcp" && r["allowed"] == false),
        ),
        (
            "a refused datagram",
            has(&|r| r["kind"] == "net" && r["protocol"] == "udp"),
        ),
        (
            "a refused name",
            has(&|r| r["kind"] == "net" && r["protocol"] == "dns"),
        ),
        ("a note", has(&|r| r["kind"] == "note")),
    ] {
        assert!(found, "no {what} in the log: {recs:#?}");
    }
    let verified = spawnd(&["audit", "verify", log.to_str().unwrap()]);
    assert_eq!(verified.status.code(), Some(0), "{verified:?}");

    // Exported, every event is valid OCSF 1.5.0, one per record.
    let events = export_valid_ocsf(&log);
    assert_eq!(events.len(), recs.len());
    let of = |r: &Value| {
        events
            .iter()
            .find(|e| e["metadata"]["sequence"] == r["seq"])
            .unwrap_or_else(|| panic!("no event for {r}"))
    };
    let find = |f: &dyn Fn(&Value) -> bool| of(recs.iter().find(|r| f(r)).unwrap());
    // A kill is a failure with its signal, not a clean exit.
    let killed =
        find(&|r| r["kind"] == "exit" && r["signal"] == 9 && r["interrupted_by"].is_null());
    assert_eq!(killed["status"], "Failure", "{killed}");
    assert_eq!(killed["unmapped"]["signal"], 9, "{killed}");
    assert!(killed["duration"].is_u64(), "{killed}");
    let timed_out = find(&|r| r["kind"] == "exit" && r["timed_out"] == true);
    assert_eq!(
        (&timed_out["status"], &timed_out["unmapped"]["timed_out"]),
        (&json!("Failure"), &json!(true)),
        "{timed_out}"
    );
    // The program is named, with its run-as user, on its exit too.
    let clean = find(&|r| r["kind"] == "exit" && r["exit_code"] == 0);
    assert_eq!(clean["process"]["file"]["path"], "/usr/bin/bash", "{clean}");
    assert_eq!(clean["process"]["user"]["uid"], "65534", "{clean}");
    assert_eq!(clean["process"]["cmd_line"], "bash -c {script}", "{clean}");
    // Repeats are counted.
    let repeats = find(&|r| r["kind"] == "denial" && r["repeats"].is_object());
    assert!(repeats["count"].as_u64().unwrap() >= 1, "{repeats}");
    assert!(
        repeats["start_time"].is_i64() && repeats["end_time"].is_i64(),
        "{repeats}"
    );
    // Network events have the spawn's caller as actor.
    let connection = find(&|r| r["kind"] == "net" && r["connected"] == true);
    assert_eq!(connection["actor"]["user"]["uid"], "0", "{connection}");
    // The label and the peer that killed the attached spawn.
    let by_peer = find(&|r| r["kind"] == "exit" && r["interrupted_by"] == "spawn_kill");
    assert_eq!(by_peer["unmapped"]["label"], "ocsf-run", "{by_peer}");
    // Notes are exported. The device is the record's host, or, for a
    // record that does not name it, the exporter, and the event says so.
    assert!(
        events.iter().any(|e| e["class_uid"] == 1008),
        "no note exported"
    );
    for r in &recs {
        let e = of(r);
        match r["machine"]["hostname"].as_str() {
            Some(name) => assert_eq!(e["device"]["hostname"], name, "{e}"),
            None => assert_eq!(e["unmapped"]["device_from_exporter"], true, "{e}"),
        }
    }
}
