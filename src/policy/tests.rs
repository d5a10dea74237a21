//! The gate, table-driven from the ADR reference vectors (sections A and H)
//! and the documented check order (docs/cli.md). `reference_behaviour_tests.rs` covers section R. Vectors that
//! concern the sandbox, the daemon's handles or the audit trail (D, E, G, J–Q,
//! R2–R5, R23–R34, R38) are not gate behaviour and are tested with those parts.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::test_support::*;
use super::*;
use crate::manifest::Manifest;
use crate::plan::{CwdPlan, EnvEntry, EnvSource};

#[test]
fn a1_a_manifest_without_spawn_grants_nothing() {
    let d = decide_m(EMPTY, &Request::raw("/usr/bin/git", &["git", "status"]));
    assert_reason(&d, Reason::ProgramNotDeclared, "connector_manifest");
    assert_eq!(denied(&d).class, "capability_denied");
}

#[test]
fn a2_a3_declared_shapes_are_allowed() {
    let p = decide_m(M0, &Request::raw("/usr/bin/git", &["git", "status"]));
    assert_eq!(allowed(&p).argv, ["git", "status"]);
    let p = decide_m(
        M0,
        &Request::raw("/usr/bin/git", &["git", "log", "--since=2026-01-01"]),
    );
    assert_eq!(allowed(&p).argv, ["git", "log", "--since=2026-01-01"]);
    assert_eq!(allowed(&p).op, "log");
}

#[test]
fn a4_an_undeclared_program_is_refused_with_requested_and_granted() {
    let d = decide_m(
        M0,
        &Request::raw("/usr/bin/curl", &["curl", "https://evil.example.com"]),
    );
    assert_reason(&d, Reason::ProgramNotDeclared, "connector_manifest");
    assert_eq!(denied(&d).requested, "spawn:/usr/bin/curl");
    assert_eq!(denied(&d).granted, ["spawn:/usr/bin/git"]);
}

#[test]
fn a5_an_undeclared_argv_shape_is_refused() {
    let d = decide_m(M0, &Request::raw("git", &["git", "push", "--force"]));
    assert_reason(&d, Reason::ArgvNotDeclared, "connector_manifest");
}

#[test]
fn a6_a7_a8_only_passthrough_env_keys() {
    let d = decide_m(
        M0,
        &with_env(
            Request::raw("git", &["git", "status"]),
            &[("AWS_SECRET_KEY", "leaked")],
        ),
    );
    assert_reason(&d, Reason::EnvNotDeclared, "connector_manifest");
    let p = decide_m(
        M0,
        &with_env(
            Request::raw("git", &["git", "status"]),
            &[("GIT_AUTHOR_NAME", "alr")],
        ),
    );
    assert_eq!(allowed(&p).env_values["GIT_AUTHOR_NAME"], "alr");
    // A8: callers cannot name credential keys at all in spawnd; asking for an
    // undeclared key through env is the same refusal.
    let d = decide_m(
        M0,
        &with_env(
            Request::raw("git", &["git", "status"]),
            &[("NOT_DECLARED", "x")],
        ),
    );
    assert_reason(&d, Reason::EnvNotDeclared, "connector_manifest");
}

#[test]
fn a9_a10_a11_cwd_must_lie_inside_the_scopes_and_the_manifest_cwd() {
    let d = decide_m(
        M0,
        &with_cwd(Request::raw("git", &["git", "status"]), "~/other/path"),
    );
    assert_reason(&d, Reason::CwdOutsideScope, "connector_manifest");
    let with_policy_cwd = M0.replace("fs_write =", "cwd = \"~/code/aileron\"\nfs_write =");
    let d = decide_m(
        &with_policy_cwd,
        &with_cwd(Request::raw("git", &["git", "status"]), "~/code/elsewhere"),
    );
    assert_reason(&d, Reason::CwdOutsideScope, "connector_manifest");
    let p = decide_m(
        M0,
        &with_cwd(Request::raw("git", &["git", "status"]), "~/code/aileron"),
    );
    assert_eq!(
        allowed(&p).cwd,
        CwdPlan::Dir("/home/alr/code/aileron".into())
    );
}

#[test]
fn a12_a13_an_empty_program_or_argv_is_an_envelope_error() {
    assert_reason(
        &decide_m(M0, &Request::raw("", &["git", "status"])),
        Reason::ValueInvalid,
        "envelope",
    );
    assert_reason(
        &decide_m(M0, &Request::raw("git", &[])),
        Reason::ValueInvalid,
        "envelope",
    );
}

#[test]
fn h1_h11_spawn_op_builds_the_program_and_argv() {
    let p = decide_m(M0, &Request::op("log", &[("since", "2026-01-01")]));
    let plan = allowed(&p);
    assert_eq!(plan.program.declared, "/usr/bin/git");
    assert_eq!(plan.argv, ["git", "log", "--since=2026-01-01"]);
    assert_eq!(plan.argv_shape, "git log --since={since}");
}

#[test]
fn h2_h12_an_unknown_operation_is_refused_before_the_program_is_touched() {
    let mut programs = FakePrograms::standard();
    let d = decide_full(
        &manifest(M0),
        &Request::op("push", &[]),
        &Operator::default(),
        &mut programs,
    );
    assert_reason(&d, Reason::OpUnknown, "connector_manifest");
    assert_eq!(programs.calls.get(), 0);
    assert_eq!(denied(&d).exit_code(), 6);
}

#[test]
fn h3_h13_a_missing_placeholder_names_it() {
    let d = decide_m(M0, &Request::op("log", &[]));
    assert_reason(&d, Reason::PlaceholderMissing, "envelope");
    assert_eq!(denied(&d).placeholder.as_deref(), Some("{since}"));
}

#[test]
fn h4_env_holds_exactly_what_was_passed() {
    let p = decide_m(
        M0,
        &with_env(Request::op("status", &[]), &[("GIT_AUTHOR_NAME", "alr")]),
    );
    // From the caller exactly what it passed (GH_TOKEN, unset, omitted);
    // besides, only spawnd's runtime defaults.
    let plan = allowed(&p);
    let from: Vec<(&str, EnvSource)> = plan
        .env
        .iter()
        .map(|e| (e.key.as_str(), e.source))
        .collect();
    assert_eq!(
        from,
        [
            ("GIT_AUTHOR_NAME", EnvSource::Request),
            ("PATH", EnvSource::Default),
            ("HOME", EnvSource::Default),
            ("LANG", EnvSource::Default)
        ]
    );
    assert_eq!(plan.env_values["GIT_AUTHOR_NAME"], "alr");
}

#[test]
fn a_manifest_or_caller_value_replaces_spawnds_runtime_default() {
    let text = M0.replace("fs_read", "env_set = { PATH = \"/opt/tool/bin\" }\nfs_read");
    let p = decide_m(&text, &Request::op("status", &[]));
    let plan = allowed(&p);
    let path: Vec<&EnvEntry> = plan.env.iter().filter(|e| e.key == "PATH").collect();
    assert_eq!(path.len(), 1);
    assert_eq!(path[0].source, EnvSource::Fixed);
    assert_eq!(plan.env_values["PATH"], "/opt/tool/bin");
    assert_eq!(plan.env_values["HOME"], "/tmp");
}

#[test]
fn h5_h14_no_spawn_grant_no_operation() {
    assert_reason(
        &decide_m(EMPTY, &Request::op("log", &[])),
        Reason::OpUnknown,
        "connector_manifest",
    );
}

#[test]
fn h6_credential_keys_come_from_the_binding_only() {
    let text = M0.replace(
        "[\"GIT_AUTHOR_NAME\", \"GH_TOKEN\"]",
        "[\"GIT_AUTHOR_NAME\", \"GH_TOKEN\", \"API_TOKEN\"]\ncredential_env_keys = [\"API_TOKEN\"]",
    );
    let m = manifest(&text);
    let mut op = Operator::default();
    let d = decide_full(
        &m,
        &Request::op("status", &[]),
        &op,
        &mut FakePrograms::standard(),
    );
    assert_reason(&d, Reason::BindingRequired, "vault");
    assert_eq!(denied(&d).class, "binding_required");
    assert_eq!(denied(&d).exit_code(), 4);
    op.bound.insert("API_TOKEN".into());
    let d = decide_full(
        &m,
        &Request::op("status", &[]),
        &op,
        &mut FakePrograms::standard(),
    );
    let env = &allowed(&d).env;
    assert!(
        env.iter()
            .any(|e| e.key == "API_TOKEN" && e.source == EnvSource::Credential),
        "{env:?}"
    );
}

#[test]
fn h7_the_manifest_cwd_is_used_expanded_for_the_caller() {
    let text = M0.replace("fs_write =", "cwd = \"~/code/\"\nfs_write =");
    let p = decide_m(&text, &Request::op("status", &[]));
    // Reference: the envelope keeps "~/code/" unexpanded. spawnd expands `~`
    // from the password database of the caller, never $HOME.
    assert_eq!(allowed(&p).cwd, CwdPlan::Dir("/home/alr/code".into()));
}

#[test]
fn h16_a_substituted_argv_passes_the_gate_again_as_a_raw_envelope() {
    let from_op = decide_m(M0, &Request::op("log", &[("since", "2026-01-01")]));
    let argv: Vec<&str> = allowed(&from_op).argv.iter().map(String::as_str).collect();
    let from_raw = decide_m(M0, &Request::raw("/usr/bin/git", &argv));
    assert_eq!(allowed(&from_raw), allowed(&from_op));
}

#[test]
fn the_program_path_may_stand_as_argv0_of_a_raw_envelope() {
    let p = decide_m(
        M0,
        &Request::raw("/usr/bin/git", &["/usr/bin/git", "status"]),
    );
    assert_eq!(allowed(&p).argv, ["git", "status"]);
}

#[test]
fn checks_run_in_the_spec_order_and_the_first_failure_wins() {
    // A bad arg and a bad env key: the arg is checked first.
    let req = with_env(
        Request::op("log", &[("nope", "x")]),
        &[("LD_PRELOAD", "/x.so")],
    );
    assert_reason(&decide_m(M0, &req), Reason::ArgUnknown, "envelope");
    // A bad env key and a bad cwd: env first.
    let req = with_cwd(
        with_env(Request::op("status", &[]), &[("NOPE", "x")]),
        "/etc",
    );
    assert_reason(
        &decide_m(M0, &req),
        Reason::EnvNotDeclared,
        "connector_manifest",
    );
    // Mode before args.
    let text = M0.replace(
        "argv = \"git log --since={since}\"",
        "argv = \"git log --since={since}\"\nmode = \"write\"",
    );
    assert_reason(
        &decide_m(&text, &Request::op("log", &[])),
        Reason::ModeInsufficient,
        "action",
    );
}

#[test]
fn a_mode_denial_says_how_each_front_end_raises_the_mode() {
    let text = M0.replace(
        "argv = \"git log --since={since}\"",
        "argv = \"git log --since={since}\"\nmode = \"write\"",
    );
    let m = manifest(&text);
    let message = |access: Access| {
        let op = Operator {
            access,
            ..Operator::default()
        };
        let d = decide_full(
            &m,
            &Request::op("log", &[]),
            &op,
            &mut FakePrograms::standard(),
        );
        let denial = denied(&d);
        assert_eq!(denial.reason, Reason::ModeInsufficient);
        denial.message.clone()
    };
    let local = message(Access::Local);
    assert!(local.ends_with("pass --mode write"), "{local}");
    let daemon = message(Access::Rules {
        rules: Vec::new(),
        daemon_uid: caller().uid,
    });
    assert!(
        daemon.contains("set the request's `mode` param to \"write\""),
        "{daemon}"
    );
    assert!(!daemon.contains("; pass --mode"), "{daemon}");
}

#[test]
fn connector_state_and_caller_come_first() {
    let m = manifest(M0);
    let ctx_for = |connector: &str, manifest: Option<&Manifest>, disabled: bool, access: Access| {
        let bound = BTreeSet::new();
        let ctx = GateContext {
            connector,
            manifest,
            disabled,
            access: &access,
            bound_credentials: &bound,
            require_program_hash: false,
            network_enabled: true,
        };
        decide(
            &ctx,
            &caller(),
            &Request::op("status", &[]),
            &mut FakePrograms::standard(),
        )
    };
    let d = ctx_for("github://nobody/x", None, false, Access::Local);
    assert_reason(&d, Reason::ConnectorUnknown, "connector_manifest");
    assert_eq!(denied(&d).exit_code(), 6);
    assert_reason(
        &ctx_for(
            "github://aileron-test/gitcrawl",
            Some(&m),
            true,
            Access::Local,
        ),
        Reason::ConnectorDisabled,
        "connector_manifest",
    );
    let rules = |uids: Vec<u32>| Access::Rules {
        rules: vec![AccessRule {
            connector: m.connector.name.clone(),
            uids,
            gids: vec![],
            other_user_namespaces: false,
        }],
        daemon_uid: 999,
    };
    let d = ctx_for(
        "github://aileron-test/gitcrawl",
        Some(&m),
        false,
        rules(vec![2000]),
    );
    assert_reason(&d, Reason::CallerNotAllowed, "caller");
    assert_eq!(denied(&d).granted, ["uid:2000"]);
    allowed(&ctx_for(
        "github://aileron-test/gitcrawl",
        Some(&m),
        false,
        rules(vec![1000]),
    ));
}

#[test]
fn d4_an_action_subset_must_permit_the_spawn() {
    let mut req = Request::raw("git", &["git", "status"]);
    req.action = Some(vec!["/usr/bin/other".into()]);
    assert_reason(&decide_m(M0, &req), Reason::ActionDenied, "action");
    req.action = Some(vec!["spawn:log".into()]);
    assert_reason(&decide_m(M0, &req), Reason::ActionDenied, "action");
    req.action = Some(vec!["spawn:status".into()]);
    allowed(&decide_m(M0, &req));
    let mut req = Request::op("status", &[]);
    req.action = Some(vec!["spawn".into()]);
    allowed(&decide_m(M0, &req));
}

#[test]
fn a_peer_in_another_user_namespace_needs_a_rule_that_says_so() {
    let m = manifest(M0);
    let fqn = m.connector.name.clone();
    let foreign = |uid: u32| Caller {
        uid,
        workspace: None,
        other_user_namespace: true,
        ..caller()
    };
    let rules = |other_user_namespaces: bool| Access::Rules {
        rules: vec![AccessRule {
            connector: fqn.clone(),
            uids: vec![1000],
            gids: vec![],
            other_user_namespaces,
        }],
        daemon_uid: 999,
    };
    // Root and the daemon's own uid gain nothing from another namespace.
    for uid in [0, 999, 1000] {
        let refused = rules(false).allows(&foreign(uid), &fqn).unwrap_err();
        assert!(
            refused.iter().any(|g| g.contains("own user namespace")),
            "{refused:?}"
        );
    }
    assert!(rules(true).allows(&foreign(1000), &fqn).is_ok());
    assert!(rules(true).allows(&foreign(0), &fqn).is_err());
    // Nor may they ask anything else (health, connectors_status).
    assert!(!rules(false).allows_some(&foreign(0)));
    assert!(!rules(false).allows_some(&foreign(1000)));
    assert!(rules(true).allows_some(&foreign(1000)));
    // The same peers in the daemon's namespace, as before.
    let here = |uid: u32| Caller { uid, ..caller() };
    assert!(rules(false).allows(&here(0), &fqn).is_ok());
    assert!(rules(false).allows(&here(999), &fqn).is_ok());
}

/// Names a caller chose (arg and env keys, action entries) reach a denial
/// escaped and bounded: they cannot forge lines or grow its record.
#[test]
fn caller_chosen_names_in_a_denial_are_escaped_and_bounded() {
    let long = format!("x\u{1b}[2J\n{}", "k".repeat(100_000));
    let mut req = Request::op("status", &[]);
    req.action = Some((0..1000).map(|_| long.clone()).collect());
    let d = decide_m(M0, &req);
    assert_reason(&d, Reason::ActionDenied, "action");
    let granted = &denied(&d).granted;
    assert!(granted.len() <= 17, "{}", granted.len());
    assert!(granted
        .iter()
        .all(|g| g.len() < 1024 && !g.contains('\u{1b}') && !g.contains('\n')));
    let d = decide_m(M0, &Request::op("status", &[(long.as_str(), "v")]));
    assert_reason(&d, Reason::ArgUnknown, "envelope");
    let d = denied(&d);
    assert!(
        d.requested.len() < 1024 && d.message.len() < 4096,
        "{}",
        d.requested.len()
    );
    assert!(!d.requested.contains('\n') && !d.message.contains('\u{1b}'));
}

#[test]
fn workspace_scopes_expand_against_the_named_workspace_and_are_refused_without_one() {
    let text = M0
        .replace(
            "fs_read = [\"~/code/\"]",
            "fs_read = [\"{workspace}/src\"]\ncwd = \"{workspace}/build\"",
        )
        .replace(
            "fs_write = [\"~/.cache/aileron/gitcrawl/\"]",
            "fs_write = [\"{workspace}/build\"]",
        );
    let m = manifest(&text);
    let name = m.connector.name.to_string();
    let operator = Operator::default();
    let decide_as = |workspace: Option<&str>| {
        let ctx = GateContext {
            connector: &name,
            manifest: Some(&m),
            disabled: false,
            access: &operator.access,
            bound_credentials: &operator.bound,
            require_program_hash: false,
            network_enabled: true,
        };
        let who = Caller {
            workspace: workspace.map(PathBuf::from),
            ..caller()
        };
        decide(
            &ctx,
            &who,
            &Request::op("status", &[]),
            &mut FakePrograms::standard(),
        )
    };
    let d = decide_as(None);
    assert_reason(&d, Reason::WorkspaceUnset, "operator_config");
    assert_eq!(denied(&d).exit_code(), 4);
    assert!(
        denied(&d).message.contains("--workspace"),
        "{}",
        denied(&d).message
    );
    let p = decide_as(Some("/ci/checkout"));
    let plan = allowed(&p);
    assert_eq!(plan.fs.read, [PathBuf::from("/ci/checkout/src")]);
    assert_eq!(plan.fs.write, [PathBuf::from("/ci/checkout/build")]);
    assert_eq!(plan.cwd, CwdPlan::Dir(PathBuf::from("/ci/checkout/build")));
    // A workspace that puts a write scope on a system path is refused
    // like a home that does.
    let d = decide_as(Some("/usr/local"));
    assert_reason(&d, Reason::CallerNotAllowed, "caller");
    assert!(
        denied(&d).message.contains("/usr/local"),
        "{}",
        denied(&d).message
    );
}

#[test]
fn a_caller_cannot_name_the_workspace_through_its_values() {
    // A requested cwd or path value spelled with the anchor is a path like
    // any other: refused as a pattern, never expanded.
    let text = M0.replace(
        "fs_read = [\"~/code/\"]",
        "fs_read = [\"~/code/\", \"{workspace}/src\"]",
    );
    let m = manifest(&text);
    let mut req = Request::op("status", &[]);
    req.cwd = Some("{workspace}/src".into());
    let d = decide_full(
        &m,
        &req,
        &Operator::default(),
        &mut FakePrograms::standard(),
    );
    assert!(d.denial().is_some(), "{d:?}");
}

#[test]
fn a_workspace_unset_denial_tells_each_front_end_its_own_fix() {
    let text = M0.replace("fs_read = [\"~/code/\"]", "fs_read = [\"{workspace}/src\"]");
    let m = manifest(&text);
    let message = |access: Access| {
        let op = Operator {
            access,
            ..Operator::default()
        };
        let d = decide_full(
            &m,
            &Request::op("status", &[]),
            &op,
            &mut FakePrograms::standard(),
        );
        assert_reason(&d, Reason::WorkspaceUnset, "operator_config");
        denied(&d).message.clone()
    };
    let local = message(Access::Local);
    assert!(
        local.contains("pass `spawnd run --workspace DIR`"),
        "{local}"
    );
    assert!(local.contains("[sandbox] workspace"), "{local}");
    // A daemon's caller cannot pass a workspace: only the operator can.
    let daemon = message(Access::Rules {
        rules: Vec::new(),
        daemon_uid: caller().uid,
    });
    assert!(!daemon.contains("--workspace"), "{daemon}");
    assert!(
        daemon.contains("its operator must set [sandbox] workspace in the daemon's config"),
        "{daemon}"
    );
}

mod exec_declared {
    use super::*;
    use crate::interpreter::{Interpreter, InterpreterKind};
    use crate::manifest::Sha256Digest;
    use crate::plan::{ExecPlan, FileId, GrantedAs};

    fn fact(path: &str, sha: u8, interpreter: Option<(&str, InterpreterKind)>) -> ProgramFacts {
        ProgramFacts {
            resolved: path.into(),
            regular: true,
            setid: false,
            file_caps: false,
            sha256: Sha256Digest([sha; 32]),
            interpreter: interpreter.map(|(p, kind)| Interpreter {
                path: p.into(),
                kind,
            }),
            file: FileId {
                dev: 1,
                ino: u64::from(sha),
            },
        }
    }

    /// A script, its interpreter, their loader, a second program and an
    /// also_runs file.
    fn files() -> FakePrograms {
        let mut f = FakePrograms::default();
        for facts in [
            fact(
                "/opt/t/run.sh",
                1,
                Some(("/bin/sh", InterpreterKind::Shebang)),
            ),
            fact(
                "/usr/bin/dash",
                2,
                Some(("/lib64/ld.so", InterpreterKind::ElfLoader)),
            ),
            fact("/usr/lib/ld.so", 3, None),
            fact(
                "/usr/bin/git",
                4,
                Some(("/lib64/ld.so", InterpreterKind::ElfLoader)),
            ),
            fact(
                "/usr/bin/node",
                5,
                Some(("/lib64/ld.so", InterpreterKind::ElfLoader)),
            ),
        ] {
            let named = match facts.resolved.to_str() {
                Some("/usr/bin/dash") => "/bin/sh",
                Some("/usr/lib/ld.so") => "/lib64/ld.so",
                Some(p) => p,
                None => unreachable!(),
            };
            f.files.insert(named.into(), facts);
        }
        f
    }

    fn manifest_text(exec: &str, node_pin: u8) -> String {
        format!(
            "{EMPTY}[capabilities.spawn]\nprograms = [{{ path = \"/opt/t/run.sh\" }}, {{ path = \"/usr/bin/git\", hash = \"{}\" }}]\n{exec}\nalso_runs = [{{ path = \"/usr/bin/node\", hash = \"{}\" }}]\n[capabilities.spawn.operations.run]\nargv = \"run.sh\"\n",
            Sha256Digest([4; 32]),
            Sha256Digest([node_pin; 32])
        )
    }

    #[test]
    fn declared_grants_the_programs_also_runs_and_their_interpreters_and_loaders() {
        let m = manifest(&manifest_text("exec = \"declared\"", 5));
        let mut programs = files();
        let d = decide_full(
            &m,
            &Request::op("run", &[]),
            &Operator::default(),
            &mut programs,
        );
        let ExecPlan::Declared { files } = &allowed(&d).exec else {
            panic!("not declared: {:?}", allowed(&d).exec)
        };
        let got: Vec<(&str, GrantedAs)> = files
            .iter()
            .map(|f| (f.path.to_str().unwrap(), f.granted_as))
            .collect();
        // The program itself is the plan's own; each file once.
        assert_eq!(
            got,
            [
                ("/usr/bin/git", GrantedAs::DeclaredProgram),
                ("/usr/bin/node", GrantedAs::AlsoRuns),
                ("/usr/lib/ld.so", GrantedAs::Loader),
                ("/usr/bin/dash", GrantedAs::Interpreter),
            ]
        );
        assert_eq!(files[1].file, FileId { dev: 1, ino: 5 });
    }

    #[test]
    fn the_default_opens_nothing_beyond_the_program() {
        let m = manifest(&manifest_text("", 5));
        let mut programs = files();
        let d = decide_full(
            &m,
            &Request::op("run", &[]),
            &Operator::default(),
            &mut programs,
        );
        assert_eq!(allowed(&d).exec, ExecPlan::Scopes);
        assert_eq!(programs.calls.get(), 1);
    }

    #[test]
    fn a_changed_also_runs_file_refuses_the_spawn() {
        let m = manifest(&manifest_text("exec = \"declared\"", 9));
        let d = decide_full(
            &m,
            &Request::op("run", &[]),
            &Operator::default(),
            &mut files(),
        );
        assert_reason(&d, Reason::ProgramHashMismatch, "connector_manifest");
        assert!(
            denied(&d).message.contains("also_runs /usr/bin/node"),
            "{:?}",
            denied(&d)
        );
    }

    #[test]
    fn a_missing_also_runs_file_or_a_setuid_interpreter_refuses_the_spawn() {
        let m = manifest(&manifest_text("exec = \"declared\"", 5));
        let mut programs = files();
        programs.files.remove(Path::new("/usr/bin/node"));
        let d = decide_full(
            &m,
            &Request::op("run", &[]),
            &Operator::default(),
            &mut programs,
        );
        assert_reason(&d, Reason::ProgramNotRegular, "connector_manifest");
        assert!(denied(&d).missing_program);
        let mut programs = files();
        programs.files.get_mut(Path::new("/bin/sh")).unwrap().setid = true;
        let d = decide_full(
            &m,
            &Request::op("run", &[]),
            &Operator::default(),
            &mut programs,
        );
        assert_reason(&d, Reason::ProgramSetuid, "connector_manifest");
    }
}

/// M0 running a program the connector ships, named at `{connector}`.
fn shipped_tool_manifest() -> String {
    M0.replace(
        "programs = [{ path = \"/usr/bin/git\" }]",
        "programs = [{ path = \"{connector}/bin/git\" }]\nfs_exec = [\"{connector}/bin\"]\ncwd = \"{connector}\"",
    )
    .replace("fs_read = [\"~/code/\"]", "fs_read = [\"~/code/\", \"{connector}\"]")
}

#[test]
fn a_connector_path_expands_to_the_directory_of_the_manifests_file() {
    let mut m = manifest(&shipped_tool_manifest());
    m.dir = Some(PathBuf::from("/store/sha256-ab"));
    let mut programs = FakePrograms::standard();
    let shipped = programs.files[Path::new("/usr/bin/git")].clone();
    programs.files.insert(
        "/store/sha256-ab/bin/git".into(),
        ProgramFacts {
            resolved: "/store/sha256-ab/bin/git".into(),
            ..shipped
        },
    );
    let d = decide_full(
        &m,
        &Request::op("status", &[]),
        &Operator::default(),
        &mut programs,
    );
    let plan = allowed(&d);
    assert_eq!(plan.program.declared, "{connector}/bin/git");
    assert_eq!(
        plan.program.resolved,
        PathBuf::from("/store/sha256-ab/bin/git")
    );
    assert_eq!(plan.fs.exec, [PathBuf::from("/store/sha256-ab/bin")]);
    assert_eq!(
        plan.fs.read,
        [
            PathBuf::from("/home/alr/code"),
            PathBuf::from("/store/sha256-ab")
        ]
    );
    assert_eq!(plan.cwd, CwdPlan::Dir(PathBuf::from("/store/sha256-ab")));
    // A raw envelope may name the program by its expanded path.
    let d = decide_full(
        &m,
        &Request::raw("/store/sha256-ab/bin/git", &["git", "status"]),
        &Operator::default(),
        &mut programs,
    );
    assert_eq!(allowed(&d).op, "status");
}

#[test]
fn a_connector_path_whose_directory_is_unknown_is_refused_before_any_file_is_opened() {
    let m = manifest(&shipped_tool_manifest());
    assert_eq!(m.dir, None);
    let mut programs = FakePrograms::standard();
    let d = decide_full(
        &m,
        &Request::op("status", &[]),
        &Operator::default(),
        &mut programs,
    );
    assert_reason(&d, Reason::ConnectorDirUnknown, "operator_config");
    let denial = denied(&d);
    assert_eq!(denial.exit_code(), 4);
    assert_eq!(denial.requested, "path:{connector}/bin/git");
    assert!(
        denial.message.contains("absolute path"),
        "{}",
        denial.message
    );
    assert_eq!(programs.calls.get(), 0);
    // A manifest without such paths needs no directory.
    let d = decide_m(M0, &Request::op("status", &[]));
    allowed(&d);
}
