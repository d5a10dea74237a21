//! Manifest rules spawnd adds beyond the ADR reference: error positions,
//! reserved env keys, system paths, program binding, ambiguity, params, and
//! strict connector identity.

use super::tests::*;

#[test]
fn validation_errors_point_at_the_offending_value() {
    let text = base().replace(
        "fs_write = [\"~/.cache/aileron/gitcrawl/\"]",
        "fs_write = [\"/\"]",
    );
    let e = load(&text).unwrap_err();
    let p = &e.problems[0];
    assert_eq!(
        (p.line, p.key.as_str()),
        (9, "capabilities.spawn.fs_write"),
        "{e}"
    );
    assert_eq!(p.column, 13, "{e}");
    assert!(e.to_string().contains("m.toml:9:13"), "{e}");
}

#[test]
fn fs_write_may_not_cover_root_or_a_system_path() {
    for scope in ["/", "/usr/local/lib", "/etc/", "/var"] {
        let text = base().replace(
            "fs_write = [\"~/.cache/aileron/gitcrawl/\"]",
            &format!("fs_write = [\"{scope}\"]"),
        );
        expect_error(&text, "system path");
    }
}

#[test]
fn loader_and_interpreter_env_keys_are_refused_everywhere() {
    for key in [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "BASH_ENV",
        "ENV",
        "PYTHONPATH",
        "NODE_OPTIONS",
        "PERL5OPT",
        "GIT_SSH_COMMAND",
    ] {
        expect_error(
            &good_spawn(PROGRAMS, LOG_OP, &format!("[\"{key}\"]"), ""),
            "reserved",
        );
        expect_error(
            &good_spawn(
                PROGRAMS,
                LOG_OP,
                ENV,
                &format!("env_set = {{ {key} = \"x\" }}"),
            ),
            "reserved",
        );
    }
}

#[test]
fn env_set_may_not_overlap_passthrough() {
    expect_error(
        &good_spawn(
            PROGRAMS,
            LOG_OP,
            ENV,
            "env_set = { GIT_AUTHOR_NAME = \"x\" }",
        ),
        "not both",
    );
}

#[test]
fn each_operation_binds_to_exactly_one_program() {
    let ops = "[capabilities.spawn.operations.x]\nargv = \"curl https://example.com\"\n";
    expect_error(
        &good_spawn(PROGRAMS, ops, ENV, ""),
        "names no declared program",
    );
    let two = "[{ path = \"/usr/bin/git\" }, { path = \"/usr/local/bin/git\" }]";
    expect_error(
        &good_spawn(two, LOG_OP, ENV, ""),
        "several declared programs",
    );
    let ops = "[capabilities.spawn.operations.x]\nargv = \"/usr/local/bin/git status\"\n";
    let m = load(&good_spawn(two, ops, ENV, "")).unwrap();
    assert_eq!(m.spawn.unwrap().operations["x"].program, 1);
}

#[test]
fn ambiguous_templates_are_refused() {
    let ops = "[capabilities.spawn.operations.x]\nargv = \"git log {a}{b}\"\n";
    assert!(load(&good_spawn(PROGRAMS, ops, ENV, "")).is_err());
    let ops = "[capabilities.spawn.operations.x]\nargv = \"git log [{a}] {b}\"\n";
    assert!(load(&good_spawn(PROGRAMS, ops, ENV, "")).is_err());
}

#[test]
fn params_must_name_placeholders_and_have_valid_rules() {
    let ops = format!("{LOG_OP}[capabilities.spawn.operations.log.params.nope]\npattern = \"x\"\n");
    expect_error(&good_spawn(PROGRAMS, &ops, ENV, ""), "not a placeholder");
    let ops =
        format!("{LOG_OP}[capabilities.spawn.operations.log.params.since]\npattern = \"(\"\n");
    assert!(load(&good_spawn(PROGRAMS, &ops, ENV, "")).is_err());
    let ops = format!("{LOG_OP}[capabilities.spawn.operations.log.params.since]\nmax_len = 0\n");
    expect_error(&good_spawn(PROGRAMS, &ops, ENV, ""), "max_len");
    let ops = format!("{LOG_OP}[capabilities.spawn.operations.log.params.since]\nkind = \"url\"\n");
    expect_error(&good_spawn(PROGRAMS, &ops, ENV, ""), "unknown kind");
}

#[test]
fn connector_identity_is_strict() {
    for (name, version, needle) in [
        ("acme/gitcrawl", "0.1.0", "scheme://"),
        ("ftp://acme/gitcrawl", "0.1.0", "unknown scheme"),
        ("github://acme", "0.1.0", "owner and a repository"),
        ("github://acme/../x", "0.1.0", "segment"),
        ("github://acme/x", "^1.2", "SemVer"),
        ("github://acme/x", "latest", "SemVer"),
        ("github://acme/x", "2026.04.29.1", "SemVer"),
    ] {
        let text = format!("[connector]\nname = \"{name}\"\nversion = \"{version}\"\n");
        expect_error(&text, needle);
    }
    let ok = "[connector]\nname = \"github://aileron/integrations/connectors/slack\"\nversion = \"2.0.0-rc.1+sha.abc\"\n";
    load(ok).unwrap();
}

#[test]
fn caller_chosen_home_or_path_is_allowed_with_a_warning() {
    let m = load(&good_spawn(PROGRAMS, LOG_OP, "[\"HOME\", \"PATH\"]", "")).unwrap();
    assert_eq!(
        m.warnings
            .iter()
            .filter(|w| w.message.contains("configuration"))
            .count(),
        2,
        "{:?}",
        m.warnings
    );
}

/// The manifest's cwd must lie in a scope written the same way.
#[test]
fn a_manifest_cwd_outside_every_scope_is_refused() {
    for cwd in ["/etc", "/home/alr/code", "~/elsewhere"] {
        expect_error(
            &good_spawn(PROGRAMS, LOG_OP, ENV, &format!("cwd = \"{cwd}\"")),
            "outside fs_read and fs_write",
        );
    }
    assert!(load(&good_spawn(PROGRAMS, LOG_OP, ENV, "cwd = \"~/code/sub\"")).is_ok());
}

/// A path value must be the path the program opens.
#[test]
fn a_path_placeholder_after_a_directory_literal_is_refused() {
    for argv in ["cat /srv/{p}", "cat --file=~/{p}", "cat x/{p}"] {
        let ops = format!("[capabilities.spawn.operations.x]\nargv = \"{argv}\"\n[capabilities.spawn.operations.x.params.p]\nkind = \"path\"\n");
        let text = good_spawn("[{ path = \"/usr/bin/cat\" }]", &ops, ENV, "");
        expect_error(&text, "follows a directory");
    }
    let ops = "[capabilities.spawn.operations.x]\nargv = \"cat --file={p}\"\n[capabilities.spawn.operations.x.params.p]\nkind = \"path\"\n";
    assert!(load(&good_spawn("[{ path = \"/usr/bin/cat\" }]", ops, ENV, "")).is_ok());
}
