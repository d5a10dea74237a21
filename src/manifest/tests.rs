//! Manifest validation, table-driven from the ADR reference vectors (section I)
//! plus spawnd's stricter rules. Where spawnd differs from the reference, the
//! case says so. I36 (parse → validate → re-encode) does not apply: spawnd
//! never re-encodes a manifest; `manifest pin` edits the text in place and its
//! black-box test checks that everything but the hash is byte-for-byte kept.
//! I37/I38 are in `paths.rs`.

use super::error::ManifestError;
use super::model::AlsoRuns;
use super::*;

pub(super) const HEADER: &str =
    "[connector]\nname = \"github://aileron-test/gitcrawl\"\nversion = \"0.1.0\"\n\n";
const HASH: &str = "sha256:2540879925a6881e3877ff7e3330746ba3027b04edf16a3a12dccd1644c4f32d";

/// The reference's `goodSpawn`, with `{programs}`, `{ops}`, `{env}`, `{extra}` slots.
pub(super) fn good_spawn(programs: &str, ops: &str, env: &str, extra: &str) -> String {
    format!(
        "{HEADER}[capabilities.spawn]\nprograms = {programs}\nenv_passthrough = {env}\nfs_read = [\"~/code/\"]\nfs_write = [\"~/.cache/aileron/gitcrawl/\"]\n{extra}\n{ops}"
    )
}

pub(super) const PROGRAMS: &str = "[{ path = \"/usr/bin/git\" }]";
pub(super) const LOG_OP: &str =
    "[capabilities.spawn.operations.log]\nargv = \"git log --since={since} --author={author}\"\n";
pub(super) const ENV: &str = "[\"GIT_AUTHOR_NAME\"]";

pub(super) fn load(text: &str) -> Result<Manifest, ManifestError> {
    parse_manifest("m.toml", text, LoadOptions::default())
}

pub(super) fn base() -> String {
    good_spawn(PROGRAMS, LOG_OP, ENV, "")
}

pub(super) fn expect_error(text: &str, needle: &str) {
    match load(text) {
        Ok(_) => {
            panic!("expected an error mentioning {needle:?}, but the manifest loaded:\n{text}")
        }
        Err(e) => assert!(
            e.mentions(needle),
            "error does not mention {needle:?}: {e}\n{text}"
        ),
    }
}

#[test]
fn i1_cwd_and_a_real_hash_are_valid_but_an_elided_hash_is_not() {
    let text = good_spawn(
        &format!("[{{ path = \"/usr/bin/git\", hash = \"{HASH}\" }}]"),
        LOG_OP,
        ENV,
        "cwd = \"~/code/\"",
    );
    let m = load(&text).unwrap();
    assert_eq!(m.spawn.unwrap().programs[0].hash.unwrap().to_string(), HASH);
    // Reference: "sha256:abc123" is valid. spawnd (docs/manifest.md): 64 lowercase hex required.
    expect_error(
        &good_spawn(
            "[{ path = \"/usr/bin/git\", hash = \"sha256:abc123\" }]",
            LOG_OP,
            ENV,
            "",
        ),
        "sha256:",
    );
}

#[test]
fn i2_only_programs_and_one_operation_is_enough() {
    let text = format!("{HEADER}[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/git\" }}]\n[capabilities.spawn.operations.status]\nargv = \"git status\"\n");
    let m = load(&text).unwrap();
    assert!(m.spawn.unwrap().env_passthrough.is_empty());
}

#[test]
fn i3_and_i30_no_spawn_block_is_valid_and_grants_nothing() {
    let m = load(HEADER).unwrap();
    assert!(m.spawn.is_none());
}

#[test]
fn i4_to_i9_program_entries_are_checked() {
    let cases = [
        ("[]", "programs is required"),
        ("[{ path = \"\" }]", "path is required"),
        ("[{ path = \"   \" }]", "path is required"),
        ("[{ path = \"git\" }]", "absolute"),
        (
            "[{ path = \"/usr/bin/git\", hash = \"md5:abc\" }]",
            "sha256:",
        ),
        (
            "[{ path = \"/usr/bin/git\", hash = \"sha256:\" }]",
            "sha256:",
        ),
    ];
    for (programs, needle) in cases {
        expect_error(&good_spawn(programs, LOG_OP, ENV, ""), needle);
    }
}

#[test]
fn i10_i11_operations_and_argv_are_required() {
    expect_error(
        &good_spawn(PROGRAMS, "", ENV, ""),
        "operations] is required",
    );
    expect_error(
        &good_spawn(
            PROGRAMS,
            "[capabilities.spawn.operations.x]\nargv = \"   \"\n",
            ENV,
            "",
        ),
        "argv is required",
    );
}

#[test]
fn i12_i31_i32_operation_names() {
    for ok in ["log", "list", "list_recent", "send-msg", "x1"] {
        let ops = format!("[capabilities.spawn.operations.{ok}]\nargv = \"git status\"\n");
        assert!(load(&good_spawn(PROGRAMS, &ops, ENV, "")).is_ok(), "{ok}");
    }
    for bad in [
        "\"\"",
        "Log",
        "1log",
        "\"log!\"",
        "_internal",
        "Send-Msg",
        "BadName",
    ] {
        let ops = format!("[capabilities.spawn.operations.{bad}]\nargv = \"git status\"\n");
        expect_error(&good_spawn(PROGRAMS, &ops, ENV, ""), "name must match");
    }
}

#[test]
fn i13_to_i15_and_i28_env_keys_must_be_posix_shaped() {
    for bad in ["1VAR", "MY-VAR", ""] {
        expect_error(
            &good_spawn(PROGRAMS, LOG_OP, &format!("[\"{bad}\"]"), ""),
            "valid environment variable",
        );
    }
    // I28: the env check runs before the credential-subset check.
    expect_error(
        &good_spawn(
            PROGRAMS,
            LOG_OP,
            "[\"1BAD\"]",
            "credential_env_keys = [\"1BAD\"]",
        ),
        "valid environment variable",
    );
}

#[test]
fn i16_to_i19_scopes_and_cwd_must_be_absolute() {
    expect_error(
        &good_spawn(PROGRAMS, LOG_OP, ENV, "fs_exec = [\"code/\"]"),
        "absolute",
    );
    let text = base().replace(
        "fs_write = [\"~/.cache/aileron/gitcrawl/\"]",
        "fs_write = [\"cache/\"]",
    );
    expect_error(&text, "absolute");
    expect_error(
        &good_spawn(PROGRAMS, LOG_OP, ENV, "cwd = \"code/\""),
        "absolute",
    );
    expect_error(
        &good_spawn(PROGRAMS, LOG_OP, ENV, "cwd = 'C:\\Users\\me'"),
        "absolute",
    );
}

fn limits_of(block: &str) -> Result<Limits, ManifestError> {
    let text = good_spawn(
        PROGRAMS,
        LOG_OP,
        ENV,
        &format!("[capabilities.spawn.limits]\n{block}\n"),
    );
    load(&text).map(|m| m.spawn.unwrap().limits)
}

#[test]
fn i20_to_i25_output_limits_resolve_and_are_bounded() {
    let l = limits_of("max_stdout_bytes = 2097152\nmax_stderr_bytes = 65536").unwrap();
    assert_eq!(
        (l.max_stdout_bytes, l.max_stderr_bytes),
        (2 << 20, 64 << 10)
    );
    let d = load(&base()).unwrap().spawn.unwrap().limits;
    assert_eq!(
        (d.max_stdout_bytes, d.max_stderr_bytes),
        (1 << 20, 256 << 10)
    );
    let l = limits_of("max_stdout_bytes = 4194304").unwrap();
    assert_eq!(
        (l.max_stdout_bytes, l.max_stderr_bytes),
        (4 << 20, 256 << 10)
    );
    for key in ["max_stdout_bytes", "max_stderr_bytes"] {
        for (value, needle) in [("0", key), ("-1", key), ("67108865", "exceeds the maximum")] {
            let e = limits_of(&format!("{key} = {value}")).unwrap_err();
            assert!(e.mentions(needle), "{key}={value}: {e}");
        }
    }
}

#[test]
fn wall_time_ceiling_follows_the_operator() {
    // The built-in ceiling is an hour.
    assert!(limits_of("wall_time_ms = 3600000").is_ok());
    assert!(limits_of("wall_time_ms = 3600001")
        .unwrap_err()
        .mentions("exceeds the maximum"));
    let text = good_spawn(
        PROGRAMS,
        LOG_OP,
        ENV,
        "[capabilities.spawn.limits]\nwall_time_ms = 600000\n",
    );
    // An operator's lower ceiling binds.
    let lowered = parse_manifest(
        "m",
        &text,
        LoadOptions {
            max_wall_time_ms: 300_000,
        },
    );
    assert!(lowered.is_err());
    let m = parse_manifest(
        "m",
        &text,
        LoadOptions {
            max_wall_time_ms: 3_600_000,
        },
    )
    .unwrap();
    assert_eq!(m.spawn.unwrap().limits.wall_time_ms, 600_000);
}

#[test]
fn an_operation_may_tighten_limits_but_never_loosen_them() {
    let op = |ms: u64| {
        format!("{LOG_OP}[capabilities.spawn.operations.log.limits]\nwall_time_ms = {ms}\n")
    };
    let text = good_spawn(
        PROGRAMS,
        &op(5000),
        ENV,
        "[capabilities.spawn.limits]\nwall_time_ms = 10000\n",
    );
    let m = load(&text).unwrap();
    let spawn = m.spawn.unwrap();
    assert_eq!(spawn.operations["log"].limits.wall_time_ms, 5000);
    assert_eq!(spawn.limits.wall_time_ms, 10000);
    let text = good_spawn(
        PROGRAMS,
        &op(20000),
        ENV,
        "[capabilities.spawn.limits]\nwall_time_ms = 10000\n",
    );
    expect_error(&text, "only tighten");
}

#[test]
fn tmp_size_and_exec_are_settings_bounded_by_the_memory_limit() {
    // Unset: /tmp's size follows the memory limit, and nothing there executes.
    let d = load(&base()).unwrap().spawn.unwrap().limits;
    assert_eq!((d.tmp_size_bytes, d.tmp_exec), (None, false));
    let l = limits_of("tmp_size_bytes = 1048576\ntmp_exec = true").unwrap();
    assert_eq!((l.tmp_size_bytes, l.tmp_exec), (Some(1 << 20), true));
    // Up to the memory limit less the smallest /dev/shm.
    let l = limits_of("max_memory_bytes = 67108864\ntmp_size_bytes = 66060288").unwrap();
    assert_eq!(l.tmp_size_bytes, Some(63 << 20));
    for (block, needle) in [
        ("tmp_size_bytes = 1048575", "below the minimum of 1048576"),
        ("tmp_size_bytes = 0", "below the minimum"),
        ("tmp_size_bytes = -5", "below the minimum"),
        (
            "max_memory_bytes = 67108864\ntmp_size_bytes = 66060289",
            "tmp_size_bytes = 66060289 exceeds what max_memory_bytes = 67108864 leaves for /tmp (66060288): /tmp is a tmpfs, whose pages are memory",
        ),
        // Unset, the memory limit is its default (512 MiB).
        ("tmp_size_bytes = 536870912", "raise max_memory_bytes to at least 537919488"),
        ("tmp_exec = 1", "tmp_exec"),
    ] {
        let e = limits_of(block).unwrap_err();
        assert!(e.mentions(needle), "{block}: {e}");
    }
}

#[test]
fn an_operation_may_shrink_tmp_or_turn_its_exec_off_but_never_the_reverse() {
    let op =
        |limits: &str| format!("{LOG_OP}[capabilities.spawn.operations.log.limits]\n{limits}\n");
    let connector = "[capabilities.spawn.limits]\nmax_memory_bytes = 268435456\ntmp_size_bytes = 134217728\ntmp_exec = true\n";
    let m = load(&good_spawn(
        PROGRAMS,
        &op("tmp_size_bytes = 67108864\ntmp_exec = false"),
        ENV,
        connector,
    ))
    .unwrap();
    let spawn = m.spawn.unwrap();
    let l = spawn.operations["log"].limits;
    assert_eq!((l.tmp_size_bytes, l.tmp_exec), (Some(64 << 20), false));
    assert_eq!(spawn.limits.tmp_size_bytes, Some(128 << 20));
    expect_error(
        &good_spawn(PROGRAMS, &op("tmp_size_bytes = 268435455"), ENV, connector),
        "loosens the connector's /tmp of 134217728 bytes",
    );
    expect_error(
        &good_spawn(
            PROGRAMS,
            &op("tmp_exec = true"),
            ENV,
            "[capabilities.spawn.limits]\nwall_time_ms = 1000\n",
        ),
        "tmp_exec = true loosens",
    );
    // An operation's lower memory limit bounds the connector's /tmp too.
    expect_error(
        &good_spawn(PROGRAMS, &op("max_memory_bytes = 67108864"), ENV, connector),
        "tmp_size_bytes = 134217728 exceeds what max_memory_bytes = 67108864 leaves",
    );
    // Without a size, /tmp follows the operation's memory limit.
    let m = load(&good_spawn(
        PROGRAMS,
        &op("max_memory_bytes = 67108864"),
        ENV,
        "",
    ))
    .unwrap();
    assert_eq!(
        m.spawn.unwrap().operations["log"].limits.tmp_bytes(),
        48 << 20
    );
}

#[test]
fn i26_i27_credential_keys_must_be_passed_through() {
    assert!(load(&good_spawn(
        PROGRAMS,
        LOG_OP,
        "[\"GIT_AUTHOR_NAME\", \"GH_TOKEN\"]",
        "credential_env_keys = [\"GH_TOKEN\"]"
    ))
    .is_ok());
    expect_error(
        &good_spawn(
            PROGRAMS,
            LOG_OP,
            ENV,
            "credential_env_keys = [\"GH_TOKEN\"]",
        ),
        "env_passthrough",
    );
}

#[test]
fn i29_every_operation_keeps_its_shape() {
    let ops = format!("{LOG_OP}[capabilities.spawn.operations.status]\nargv = \"git status\"\n");
    let m = load(&good_spawn(PROGRAMS, &ops, ENV, "")).unwrap();
    let shapes: Vec<String> = m
        .spawn
        .unwrap()
        .operations
        .values()
        .map(|o| o.template.shape())
        .collect();
    assert!(shapes.contains(&"git log --since={since} --author={author}".to_string()));
    assert!(shapes.contains(&"git status".to_string()));
}

#[test]
fn i33_i34_home_and_absolute_scopes_with_cwd() {
    let text = format!("{HEADER}[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/git\" }}]\nfs_read = [\"~\"]\ncwd = \"~\"\n{LOG_OP}");
    let m = load(&text).unwrap();
    assert!(
        m.warnings.iter().any(|w| w.message.contains("broad")),
        "{:?}",
        m.warnings
    );
    let text = format!("{HEADER}[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/git\" }}]\nfs_read = [\"/var/spool/\", \"/etc/aileron/\"]\nfs_write = [\"/tmp/aileron/\"]\ncwd = \"/tmp/aileron/\"\n{LOG_OP}");
    load(&text).unwrap();
}

#[test]
fn i35_array_of_tables_programs_with_hash_and_described_operations() {
    let text = format!(
        "{HEADER}[[capabilities.spawn.programs]]\npath = \"/usr/bin/git\"\nhash = \"{HASH}\"\n\n[capabilities.spawn.operations.log]\nargv = \"git log --since={{since}}\"\ndescription = \"List commits\"\n"
    );
    let m = load(&text).unwrap();
    let spawn = m.spawn.unwrap();
    assert_eq!(
        spawn.operations["log"].description.as_deref(),
        Some("List commits")
    );
    assert_eq!(spawn.programs[0].path.to_string(), "/usr/bin/git");
}

#[test]
fn i39_unknown_keys_are_errors_naming_the_key_with_line_and_column() {
    let text = format!("{HEADER}[unrecognized]\nx = 1\n");
    let e = load(&text).unwrap_err();
    assert!(e.mentions("unrecognized"), "{e}");
    assert_eq!(e.problems[0].line, 5, "{e}");
    let text = base().replace("fs_read =", "fs_reed =");
    let e = load(&text).unwrap_err();
    assert!(e.mentions("fs_reed") && e.problems[0].hint.is_some(), "{e}");
}

#[test]
fn the_hint_for_an_unknown_key_points_where_the_keys_are_described() {
    let text = base().replace("fs_read =", "fs_reed =");
    let e = load(&text).unwrap_err();
    let hint = e.problems[0].hint.as_deref().unwrap_or_default();
    // `explain --help` lists flags, not manifest keys.
    assert!(!hint.contains("--help"), "{hint}");
    assert!(hint.contains("docs/manifest.md"), "{hint}");
    // The keys allowed where the unknown one stands are in the message.
    assert!(e.problems[0].message.contains("fs_read"), "{e}");
}

#[test]
fn i40_forwarder_manifests() {
    let fwd = base().replace(
        "[connector]",
        "forwarder = \"builtin://spawn-forwarder\"\n[connector]",
    );
    load(&fwd).unwrap();
    expect_error(
        &base().replace(
            "[connector]",
            "forwarder = \"builtin://other\"\n[connector]",
        ),
        "unknown forwarder",
    );
    expect_error(
        &HEADER.replace(
            "[connector]",
            "forwarder = \"builtin://spawn-forwarder\"\n[connector]",
        ),
        "needs a [capabilities.spawn]",
    );
}

/// Every manifest written for the ADR loads unchanged (with real hash values).
#[test]
fn the_adr_manifests_load_unchanged() {
    for path in [
        "tests/fixtures/adr-gmail.toml",
        "tests/fixtures/adr-gitcrawl.toml",
        "tests/fixtures/adr-oauth.toml",
    ] {
        let text = std::fs::read_to_string(path).expect(path);
        let m = load(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(!m.connector.name.as_str().is_empty());
    }
}

#[test]
fn code_an_interpreter_runs_from_a_placeholder_is_named_in_a_warning() {
    let warned = |programs: &str, argv: &str| -> Vec<String> {
        let text = format!(
            "{HEADER}[capabilities.spawn]\nprograms = [{programs}]\n[capabilities.spawn.operations.x]\nargv = {argv}\n"
        );
        load(&text)
            .unwrap()
            .warnings
            .into_iter()
            .filter(|w| w.message.contains("is code"))
            .map(|w| w.message)
            .collect()
    };
    let bash = warned(
        "{ path = \"/usr/bin/bash\" }",
        "[\"bash\", \"-c\", \"{script}\"]",
    );
    assert_eq!(bash.len(), 1, "{bash:?}");
    assert!(
        bash[0].starts_with("{script} is code `bash` runs"),
        "{bash:?}"
    );
    let python = warned(
        "{ path = \"/usr/bin/python3.11\" }",
        "\"python3.11 -I -c {code}\"",
    );
    assert_eq!(python.len(), 1, "{python:?}");
    let node = warned(
        "{ path = \"/usr/bin/node\" }",
        "\"node --eval {js} {file}\"",
    );
    assert_eq!(node.len(), 1, "{node:?}");
    let awk = warned("{ path = \"/usr/bin/awk\" }", "\"awk {prog} {file}\"");
    assert_eq!(awk.len(), 1, "{awk:?}");
    // A script file given by path, and other programs' options, are not
    // code from the caller.
    assert!(warned("{ path = \"/usr/bin/python3\" }", "\"python3 {script}\"").is_empty());
    assert!(warned("{ path = \"/usr/bin/git\" }", "\"git -c {option} status\"").is_empty());
    assert!(warned("{ path = \"/usr/bin/bash\" }", "\"bash -c true\"").is_empty());
}

#[test]
fn scopes_and_the_cwd_may_be_anchored_at_the_workspace_and_nothing_else_may() {
    let spawn = |extra: &str, programs: &str| {
        format!(
            "{HEADER}[capabilities.spawn]\nprograms = [{programs}]\n{extra}\n[capabilities.spawn.operations.x]\nargv = \"tool\"\n"
        )
    };
    let tool = "{ path = \"/usr/bin/tool\" }";
    let m = load(&spawn(
        "fs_read = [\"{workspace}/src\"]\nfs_write = [\"{workspace}/build\"]\ncwd = \"{workspace}/build\"",
        tool,
    ))
    .unwrap();
    let s = m.spawn.unwrap();
    assert_eq!(s.fs_read[0].to_string(), "{workspace}/src");
    assert!(s.cwd.as_ref().unwrap().needs_workspace());
    // A cwd outside the scopes, written the same way, is refused.
    assert!(load(&spawn(
        "fs_read = [\"{workspace}/src\"]\ncwd = \"{workspace}/other\"",
        tool
    ))
    .is_err());
    // Programs and sockets are never anchored at the workspace, and no
    // other anchor exists.
    assert!(load(&spawn("", "{ path = \"{workspace}/bin/tool\" }")).is_err());
    assert!(load(&spawn("unix_sockets = [\"{workspace}/s.sock\"]", tool)).is_err());
    assert!(load(&spawn("fs_read = [\"{home}/x\"]", tool)).is_err());
    assert!(load(&spawn("fs_read = [\"{workspace}/../x\"]", tool)).is_err());
    // A read scope inside a write scope, both at the workspace.
    assert!(load(&spawn(
        "fs_read = [\"{workspace}/.git\"]\nfs_write = [\"{workspace}\"]",
        tool
    ))
    .is_err());
}

#[test]
fn programs_also_runs_read_and_exec_scopes_and_the_cwd_may_be_anchored_at_the_connector() {
    let spawn = |extra: &str, programs: &str| {
        format!(
            "{HEADER}[capabilities.spawn]\nprograms = [{programs}]\n{extra}\n[capabilities.spawn.operations.x]\nargv = \"tool\"\n"
        )
    };
    let tool = "{ path = \"{connector}/bin/tool\" }";
    let m = load(&spawn(
        &format!("fs_read = [\"{{connector}}\"]\nfs_exec = [\"{{connector}}/bin\"]\ncwd = \"{{connector}}/data\"\nexec = \"declared\"\nalso_runs = [{{ path = \"{{connector}}/bin/helper\", hash = \"{HASH}\" }}]"),
        tool,
    ))
    .unwrap();
    let s = m.spawn.unwrap();
    assert_eq!(s.programs[0].path.to_string(), "{connector}/bin/tool");
    assert_eq!(s.fs_exec[0].to_string(), "{connector}/bin");
    assert_eq!(s.also_runs[0].path.to_string(), "{connector}/bin/helper");
    assert!(s.cwd.as_ref().unwrap().needs_connector_dir());
    assert_eq!(
        s.first_connector_path().unwrap().to_string(),
        "{connector}/bin/tool"
    );
    // Parsed from text, the manifest has no directory; from a file named by
    // its absolute path, it is that file's.
    assert_eq!(m.dir, None);
    let text = spawn("fs_exec = [\"{connector}/bin\"]", tool);
    let at = parse_manifest("/opt/c/manifest.toml", &text, LoadOptions::default()).unwrap();
    assert_eq!(at.dir, Some(std::path::PathBuf::from("/opt/c")));
    let dotted = parse_manifest("/opt/c/../manifest.toml", &text, LoadOptions::default()).unwrap();
    assert_eq!(dotted.dir, None);
    // Unix sockets are never anchored at the connector, nor is a path
    // climbing out of it.
    assert!(load(&spawn("unix_sockets = [\"{connector}/s.sock\"]", tool)).is_err());
    assert!(load(&spawn("", "{ path = \"{connector}/../bin/tool\" }")).is_err());
    assert!(load(&spawn("", "{ path = \"{connector}bin/tool\" }")).is_err());
    // A cwd at the connector needs a scope at the connector.
    assert!(load(&spawn("fs_read = [\"/opt\"]\ncwd = \"{connector}\"", tool)).is_err());
}

#[test]
fn a_write_scope_at_the_connector_is_refused_saying_why() {
    let text = format!(
        "{HEADER}[capabilities.spawn]\nprograms = [{{ path = \"{{connector}}/bin/tool\" }}]\nfs_write = [\"~/.cache/x\", \"{{connector}}/state\"]\n\n[capabilities.spawn.operations.x]\nargv = \"tool\"\n"
    );
    let e = load(&text).unwrap_err();
    assert!(e.mentions("capabilities.spawn.fs_write"), "{e}");
    let shown = e.to_string();
    assert!(
        shown.contains("`{connector}/state` would make the connector's own files writable"),
        "{shown}"
    );
    assert!(shown.contains("provenance_hash"), "{shown}");
    assert!(shown.contains("fs_read or fs_exec"), "{shown}");
    // The whole directory too.
    expect_error(
        &text.replace("{connector}/state", "{connector}"),
        "own files writable",
    );
}

#[test]
fn on_violation_is_refuse_by_default_terminate_when_asked_and_nothing_else() {
    let m = load(&good_spawn(PROGRAMS, LOG_OP, ENV, "")).unwrap();
    assert_eq!(
        m.spawn.unwrap().on_violation,
        crate::manifest::OnViolation::Refuse
    );
    let m = load(&good_spawn(
        PROGRAMS,
        LOG_OP,
        ENV,
        "on_violation = \"terminate\"",
    ))
    .unwrap();
    assert_eq!(
        m.spawn.unwrap().on_violation,
        crate::manifest::OnViolation::Terminate
    );
    let e = load(&good_spawn(
        PROGRAMS,
        LOG_OP,
        ENV,
        "on_violation = \"kill\"",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("capabilities.spawn.on_violation") && e.contains("`kill`"),
        "{e}"
    );
}

#[test]
fn exec_is_scopes_unless_declared_and_nothing_else() {
    let spawn = load(&base()).unwrap().spawn.unwrap();
    assert_eq!(spawn.exec, ExecPolicy::Scopes);
    assert!(spawn.also_runs.is_empty());
    for (written, policy) in [
        ("scopes", ExecPolicy::Scopes),
        ("declared", ExecPolicy::Declared),
    ] {
        let text = good_spawn(PROGRAMS, LOG_OP, ENV, &format!("exec = \"{written}\""));
        assert_eq!(load(&text).unwrap().spawn.unwrap().exec, policy);
    }
    for bad in ["\"Declared\"", "\"all\"", "\"\"", "true", "[\"declared\"]"] {
        let text = good_spawn(PROGRAMS, LOG_OP, ENV, &format!("exec = {bad}"));
        let e = load(&text).unwrap_err();
        assert!(e.mentions("exec"), "{bad}: {e}");
        // Pointed at: the line of `exec`, past the connector header.
        assert_eq!(e.problems[0].line, 10, "{bad}: {e}");
    }
    let e = load(&good_spawn(PROGRAMS, LOG_OP, ENV, "exec = \"all\"")).unwrap_err();
    assert!(e.mentions("unknown exec policy `all`"), "{e}");
    assert_eq!(e.problems[0].column, 8, "{e}");
}

#[test]
fn also_runs_entries_are_absolute_paths_each_pinned_once() {
    let good = format!(
        "exec = \"declared\"\nalso_runs = [{{ path = \"/usr/bin/node\", hash = \"{HASH}\" }}, {{ path = \"/usr/lib/node_modules/npm/bin/npm-cli.js\", hash = \"{HASH}\" }}]"
    );
    let m = load(&good_spawn(PROGRAMS, LOG_OP, ENV, &good)).unwrap();
    let spawn = m.spawn.unwrap();
    assert_eq!(
        spawn.also_runs,
        vec![
            AlsoRuns {
                path: ScopePath::Absolute("/usr/bin/node".into()),
                hash: HASH.parse().unwrap()
            },
            AlsoRuns {
                path: ScopePath::Absolute("/usr/lib/node_modules/npm/bin/npm-cli.js".into()),
                hash: HASH.parse().unwrap()
            },
        ]
    );
    assert!(
        !m.warnings.iter().any(|w| w.key.contains("also_runs")),
        "{:?}",
        m.warnings
    );
    let cases: &[(&str, &str)] = &[
        ("{ path = \"/usr/bin/node\" }", "hash is required"),
        ("{ path = \"/usr/bin/node\", hash = \"sha256:abc\" }", "64 lowercase hex"),
        ("{ path = \"/usr/bin/node\", hash = \"md5:00\" }", "sha256:"),
        ("{ path = \"~/bin/tool\", hash = \"HASH\" }", "is not absolute"),
        ("{ path = \"{workspace}/bin/tool\", hash = \"HASH\" }", "also_runs[0].path"),
        ("{ path = \"bin/tool\", hash = \"HASH\" }", "also_runs[0].path"),
        ("{ path = \"/usr/../bin/tool\", hash = \"HASH\" }", "also_runs[0].path"),
        ("{ path = \"\", hash = \"HASH\" }", "also_runs[0].path"),
        (
            "{ path = \"/usr/bin/node\", hash = \"HASH\" }, { path = \"/usr/bin/node\", hash = \"HASH\" }",
            "listed twice",
        ),
        ("{ path = \"/usr/bin/node\", hash = \"HASH\", mode = \"x\" }", "unknown field `mode`"),
        ("\"/usr/bin/node\"", "also_runs"),
    ];
    for (entry, needle) in cases {
        let entry = entry.replace("HASH", HASH);
        let text = good_spawn(
            PROGRAMS,
            LOG_OP,
            ENV,
            &format!("exec = \"declared\"\nalso_runs = [{entry}]"),
        );
        let e = load(&text).unwrap_err();
        assert!(
            e.mentions(needle),
            "{entry}: error does not say {needle:?}: {e}"
        );
        assert_eq!(e.problems[0].line, 11, "{entry}: {e}");
    }
}

#[test]
fn exec_settings_that_grant_nothing_are_named_in_warnings() {
    // also_runs without exec = "declared" decides nothing.
    let text = good_spawn(
        PROGRAMS,
        LOG_OP,
        ENV,
        &format!("also_runs = [{{ path = \"/usr/bin/node\", hash = \"{HASH}\" }}]"),
    );
    let m = load(&text).unwrap();
    assert!(
        m.warnings
            .iter()
            .any(|w| w.key == "capabilities.spawn.also_runs"
                && w.message.contains("only with exec = \"declared\"")),
        "{:?}",
        m.warnings
    );
    // tmp_exec lets nothing run under exec = "declared" (no file of the
    // private /tmp can be pinned).
    let text = good_spawn(
        PROGRAMS,
        LOG_OP,
        ENV,
        "exec = \"declared\"\n[capabilities.spawn.limits]\ntmp_exec = true\n",
    );
    let m = load(&text).unwrap();
    assert!(
        m.warnings
            .iter()
            .any(|w| w.key == "capabilities.spawn.limits.tmp_exec"),
        "{:?}",
        m.warnings
    );
}
