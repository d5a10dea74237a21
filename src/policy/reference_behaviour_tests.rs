//! The gate against the ADR reference section R (behaviours derived from the
//! reference code) and spawnd's further refusals. Each test says where spawnd
//! differs from the reference.

use super::test_support::*;
use super::*;
use crate::manifest::Sha256Digest;

const TOOLS: &str = r#"
[connector]
name = "github://acme/tools"
version = "1.0.0"

[capabilities.spawn]
programs = [{ path = "/usr/bin/git" }, { path = "/usr/bin/cat" }]
fs_read = ["~/code/"]
fs_write = ["~/out/"]

[capabilities.spawn.operations.view]
argv = "git show {rev}"

[capabilities.spawn.operations.log]
argv = "git log --since={since}"

[capabilities.spawn.operations.json]
argv = "cat {f}.json"

[capabilities.spawn.operations.grouped]
argv = "cat [--x={x} --y={y}] last"

[capabilities.spawn.operations.read]
argv = "cat -- {file}"

[capabilities.spawn.operations.read.params.file]
kind = "path"
allow_dash = true
"#;

#[test]
fn r1_a_hash_mismatch_is_refused() {
    let pinned = format!("sha256:{}", "ab".repeat(32));
    let text = M0.replace(
        "{ path = \"/usr/bin/git\" }",
        &format!("{{ path = \"/usr/bin/git\", hash = \"{pinned}\" }}"),
    );
    let d = decide_m(&text, &Request::op("status", &[]));
    assert_reason(&d, Reason::ProgramHashMismatch, "connector_manifest");
    assert_eq!(denied(&d).granted, [pinned]);
    // A matching pin is allowed and recorded as pinned.
    let good = M0.replace(
        "{ path = \"/usr/bin/git\" }",
        &format!(
            "{{ path = \"/usr/bin/git\", hash = \"{}\" }}",
            Sha256Digest(GIT_SHA)
        ),
    );
    assert!(
        allowed(&decide_m(&good, &Request::op("status", &[])))
            .program
            .pinned
    );
}

#[test]
fn an_operator_can_require_pinned_hashes() {
    let op = Operator {
        require_pin: true,
        ..Operator::default()
    };
    let d = decide_full(
        &manifest(M0),
        &Request::op("status", &[]),
        &op,
        &mut FakePrograms::standard(),
    );
    assert_reason(&d, Reason::ProgramHashMismatch, "connector_manifest");
}

#[test]
fn r6_option_injection_through_a_token_leading_placeholder_is_refused() {
    for (req, name) in [
        (Request::op("view", &[("rev", "--web")]), "{rev}"),
        (
            Request::op("view", &[("rev", "--upload-pack=touch /tmp/pwned")]),
            "{rev}",
        ),
        (
            Request::op("view", &[("rev", "-oProxyCommand=sh")]),
            "{rev}",
        ),
    ] {
        let d = decide_m(TOOLS, &req);
        assert_reason(&d, Reason::OptionInjection, "envelope");
        assert_eq!(denied(&d).placeholder.as_deref(), Some(name));
    }
    // The same through a raw envelope.
    let d = decide_m(
        TOOLS,
        &Request::raw("git", &["git", "show", "--upload-pack=evil"]),
    );
    assert_reason(&d, Reason::OptionInjection, "envelope");
    // A dash inside a token after a literal prefix is a value, not an option.
    allowed(&decide_m(TOOLS, &Request::op("log", &[("since", "-1")])));
}

#[test]
fn r7_r9_empty_and_nul_values_are_refused_and_long_ones_too() {
    assert_reason(
        &decide_m(TOOLS, &Request::op("log", &[("since", "")])),
        Reason::ValueInvalid,
        "envelope",
    );
    assert_reason(
        &decide_m(TOOLS, &Request::op("log", &[("since", "a\0b")])),
        Reason::ValueInvalid,
        "envelope",
    );
    let long = "x".repeat(4097);
    assert_reason(
        &decide_m(TOOLS, &Request::op("log", &[("since", &long)])),
        Reason::ValueInvalid,
        "envelope",
    );
}

#[test]
fn r8_a_value_with_spaces_and_newlines_stays_one_element() {
    let p = decide_m(TOOLS, &Request::op("log", &[("since", "a b\nc")]));
    assert_eq!(allowed(&p).argv, ["git", "log", "--since=a b\nc"]);
}

#[test]
fn r10_unknown_args_are_refused() {
    let d = decide_m(
        TOOLS,
        &Request::op("log", &[("since", "x"), ("extra", "y")]),
    );
    assert_reason(&d, Reason::ArgUnknown, "envelope");
}

#[test]
fn r12_a_suffix_literal_is_no_false_negative() {
    let p = decide_m(TOOLS, &Request::op("json", &[("f", "a.json")]));
    assert_eq!(allowed(&p).argv, ["cat", "a.json.json"]);
    let raw = decide_m(TOOLS, &Request::raw("cat", &["cat", "a.json.json"]));
    assert_eq!(allowed(&raw).argv, allowed(&p).argv);
}

#[test]
fn r13_r14_r15_optional_groups() {
    assert_eq!(
        allowed(&decide_m(TOOLS, &Request::op("grouped", &[]))).argv,
        ["cat", "last"]
    );
    let both = decide_m(TOOLS, &Request::op("grouped", &[("x", "1"), ("y", "2")]));
    assert_eq!(allowed(&both).argv, ["cat", "--x=1", "--y=2", "last"]);
    assert_reason(
        &decide_m(TOOLS, &Request::op("grouped", &[("x", "1")])),
        Reason::PlaceholderMissing,
        "envelope",
    );
    // R15: reference renders `--y=`; spawnd treats empty as absent, so the group is partial.
    assert_reason(
        &decide_m(TOOLS, &Request::op("grouped", &[("x", "1"), ("y", "")])),
        Reason::PlaceholderMissing,
        "envelope",
    );
}

#[test]
fn r16_r17_literal_only_and_empty_groups_do_not_load() {
    for argv in ["cat [--verbose]", "cat [] x"] {
        let text = TOOLS.replace(
            "argv = \"cat [--x={x} --y={y}] last\"",
            &format!("argv = \"{argv}\""),
        );
        assert!(
            crate::manifest::parse_manifest("m", &text, Default::default()).is_err(),
            "{argv}"
        );
    }
}

#[test]
fn r18_an_argv_is_only_matched_against_operations_of_its_own_program() {
    let d = decide_m(
        TOOLS,
        &Request::raw("/usr/bin/cat", &["git", "log", "--since=x"]),
    );
    assert_reason(&d, Reason::ArgvNotDeclared, "connector_manifest");
    let d = decide_m(
        TOOLS,
        &Request::raw("/usr/bin/cat", &["cat", "log", "--since=x"]),
    );
    assert_reason(&d, Reason::ArgvNotDeclared, "connector_manifest");
}

#[test]
fn r19_r20_r21_cwd_by_components_never_by_string() {
    let d = decide_m(M0, &with_cwd(Request::op("status", &[]), "~/code/../.ssh"));
    assert_reason(&d, Reason::CwdOutsideScope, "connector_manifest");
    let d = decide_m(M0, &with_cwd(Request::op("status", &[]), "/home/alr/codex"));
    assert_reason(&d, Reason::CwdOutsideScope, "connector_manifest");
    let d = decide_m(M0, &with_cwd(Request::op("status", &[]), "relative/dir"));
    assert_reason(&d, Reason::CwdOutsideScope, "connector_manifest");
    let no_scopes = M0.replace(
        "fs_read = [\"~/code/\"]\nfs_write = [\"~/.cache/aileron/gitcrawl/\"]\n",
        "",
    );
    assert_reason(
        &decide_m(&no_scopes, &with_cwd(Request::op("status", &[]), "/")),
        Reason::CwdOutsideScope,
        "connector_manifest",
    );
    assert_eq!(
        allowed(&decide_m(M0, &Request::op("status", &[]))).cwd,
        crate::plan::CwdPlan::FreshTemp
    );
}

#[test]
fn r22_a_caller_can_neither_supply_nor_redirect_a_credential() {
    let text = M0.replace("fs_read", "credential_env_keys = [\"GH_TOKEN\"]\nfs_read");
    let d = decide_m(
        &text,
        &with_env(Request::op("status", &[]), &[("GH_TOKEN", "forged")]),
    );
    assert_reason(&d, Reason::EnvReserved, "envelope");
    assert!(!denied(&d).message.contains("forged"));
}

#[test]
fn loader_keys_from_the_caller_are_reserved_even_if_undeclared() {
    let d = decide_m(
        M0,
        &with_env(Request::op("status", &[]), &[("LD_PRELOAD", "/tmp/x.so")]),
    );
    assert_reason(&d, Reason::EnvReserved, "envelope");
}

#[test]
fn r35_r36_the_program_file_itself_is_checked() {
    let m = manifest(M0);
    let mut programs = FakePrograms::standard();
    let facts = programs
        .files
        .get_mut(std::path::Path::new("/usr/bin/git"))
        .unwrap();
    facts.resolved = "/usr/lib/git-core/git".into();
    let d = decide_full(
        &m,
        &Request::op("status", &[]),
        &Operator::default(),
        &mut programs,
    );
    assert_eq!(
        allowed(&d).program.resolved,
        std::path::Path::new("/usr/lib/git-core/git")
    );
    for (setid, caps, regular, reason) in [
        (true, false, true, Reason::ProgramSetuid),
        (false, true, true, Reason::ProgramSetuid),
        (false, false, false, Reason::ProgramNotRegular),
    ] {
        let mut programs = FakePrograms::standard();
        let f = programs
            .files
            .get_mut(std::path::Path::new("/usr/bin/git"))
            .unwrap();
        (f.setid, f.file_caps, f.regular) = (setid, caps, regular);
        let d = decide_full(
            &m,
            &Request::op("status", &[]),
            &Operator::default(),
            &mut programs,
        );
        assert_reason(&d, reason, "connector_manifest");
    }
    let d = decide_full(
        &m,
        &Request::op("status", &[]),
        &Operator::default(),
        &mut FakePrograms::default(),
    );
    assert_reason(&d, Reason::ProgramNotRegular, "connector_manifest");
    assert_eq!(denied(&d).exit_code(), 6);
}

#[test]
fn path_values_may_not_climb_or_leave_the_scopes() {
    for value in [
        "../../etc/shadow",
        "/etc/shadow",
        "a/../../b",
        "/home/alr/codex/x",
    ] {
        let d = decide_m(TOOLS, &Request::op("read", &[("file", value)]));
        assert_reason(&d, Reason::ValueInvalid, "envelope");
    }
    // `~/y` is relative (nothing expands `~` in an argv element): it resolves under the cwd.
    for value in [
        "notes.txt",
        "/home/alr/code/x.txt",
        "/home/alr/out/y",
        "-odd-name",
        "~/out/y",
    ] {
        allowed(&decide_m(TOOLS, &Request::op("read", &[("file", value)])));
    }
}

#[test]
fn denial_messages_never_contain_submitted_values() {
    let secret = "s3cr3t-value-7781";
    let cases = [
        Request::op("view", &[("rev", &format!("--{secret}"))]),
        Request::op("log", &[("since", &format!("{secret}\0"))]),
        Request::op("read", &[("file", &format!("/etc/{secret}"))]),
        with_env(Request::op("status", &[]), &[("NOPE", secret)]),
    ];
    for req in cases {
        let d = decide_m(TOOLS, &req);
        let json = serde_json::to_string(denied(&d)).unwrap();
        assert!(!json.contains(secret), "{json}");
    }
}
