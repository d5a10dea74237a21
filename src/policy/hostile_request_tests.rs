//! The gate against hostile requests: a raw envelope that a broad operation
//! would shadow, home write scopes that land on system paths, malformed env
//! keys, and control characters or unbounded names echoed into denials.

use super::test_support::*;
use super::*;

/// A broad operation declared beside a narrow one must not
/// shadow it for raw envelopes (wrong mode or action refusal).
#[test]
fn a_raw_argv_takes_the_first_matching_operation_that_is_permitted() {
    let text = r#"
[connector]
name = "github://acme/any"
version = "1.0.0"
[capabilities.spawn]
programs = [{ path = "/usr/bin/git" }]
[capabilities.spawn.operations.any]
argv = "git {sub} {ref}"
mode = "write"
[capabilities.spawn.operations.any.params.sub]
values = ["show", "push"]
[capabilities.spawn.operations.show]
argv = "git show {ref}"
"#;
    let p = decide_m(text, &Request::raw("git", &["git", "show", "HEAD"]));
    assert_eq!(allowed(&p).op, "show");
    let mut req = Request::raw("git", &["git", "show", "HEAD"]);
    req.mode = crate::manifest::Tier::Admin;
    req.action = Some(vec!["spawn:show".into()]);
    assert_eq!(allowed(&decide_m(text, &req)).op, "show");
    let d = decide_m(text, &Request::raw("git", &["git", "push", "HEAD"]));
    assert_reason(&d, Reason::ModeInsufficient, "action");
}

/// `~/` write scopes are checked after expansion, for this caller.
#[test]
fn a_home_write_scope_that_lands_on_a_system_path_is_refused() {
    // (`fs_read = ["~/code/"]` would lie inside it: refused on its own.)
    let text = M0
        .replace(
            "fs_write = [\"~/.cache/aileron/gitcrawl/\"]",
            "fs_write = [\"~\"]",
        )
        .replace("fs_read = [\"~/code/\"]", "fs_read = []");
    let m = manifest(&text);
    for home in ["/", "/usr/sbin", "/var/lib/daemon"] {
        let name = m.connector.name.to_string();
        let bound = std::collections::BTreeSet::new();
        let ctx = GateContext {
            connector: &name,
            manifest: Some(&m),
            disabled: false,
            access: &Access::Local,
            bound_credentials: &bound,
            require_program_hash: false,
            network_enabled: true,
        };
        let who = Caller {
            home: home.into(),
            workspace: None,
            other_user_namespace: false,
            ..caller()
        };
        let d = decide(
            &ctx,
            &who,
            &Request::op("status", &[]),
            &mut FakePrograms::standard(),
        );
        assert_reason(&d, Reason::CallerNotAllowed, "caller");
    }
}

#[test]
fn malformed_env_keys_and_control_characters_are_not_echoed() {
    let d = decide_m(
        M0,
        &with_env(Request::op("status", &[]), &[("TOKEN=s3cr3t", "x")]),
    );
    assert_reason(&d, Reason::ValueInvalid, "envelope");
    assert!(!serde_json::to_string(denied(&d))
        .unwrap()
        .contains("s3cr3t"));
    let d = decide_m(
        M0,
        &with_cwd(
            Request::op("status", &[]),
            "/x\n2026 forged log line\u{1b}[2J",
        ),
    );
    let text = serde_json::to_string(denied(&d)).unwrap();
    assert!(
        !denied(&d).message.contains('\n') && !denied(&d).message.contains('\u{1b}'),
        "{text}"
    );
}
