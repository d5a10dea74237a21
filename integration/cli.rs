//! Black-box tests of the built `spawnd` binary: every refusal the gate knows,
//! driven through `spawnd check` exactly as a user or CI would, plus the
//! manifest tools, `hash`, `capabilities`, `health` and `config show`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

fn spawnd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spawnd"))
        .args(args)
        .env_remove("SPAWND_CONFIG")
        .output()
        .expect("run spawnd")
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A scratch directory with a manifest over programs the test controls.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("work/sub")).unwrap();
        Scratch { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Copies `/usr/bin/true` to `name` with `mode`.
    fn program(&self, name: &str, mode: u32) -> PathBuf {
        let p = self.path(name);
        std::fs::copy("/usr/bin/true", &p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// The standard test manifest: git (read-only ops) and a local tool.
    fn manifest(&self, git_hash: Option<&str>) -> PathBuf {
        let work = self.path("work");
        let tool = self.program("tool", 0o755);
        let hash = git_hash
            .map(|h| format!(", hash = \"{h}\""))
            .unwrap_or_default();
        let text = format!(
            r#"[connector]
name = "local://test/tools"
version = "1.0.0"

[capabilities.spawn]
programs = [{{ path = "/usr/bin/git"{hash} }}, {{ path = "{tool}" }}]
env_passthrough = ["GIT_AUTHOR_NAME"]
fs_read = ["{work}"]

[capabilities.spawn.operations.log]
argv = "git log --since={{since}}"

[capabilities.spawn.operations.show]
argv = "git show {{rev}}"

[capabilities.spawn.operations.ssh-like]
argv = "tool {{host}} status"

[capabilities.spawn.operations.cat]
argv = "tool -- {{file}}"

[capabilities.spawn.operations.cat.params.file]
kind = "path"
allow_dash = true
"#,
            tool = tool.display(),
            work = work.display()
        );
        self.write("m.toml", &text)
    }
}

fn check(manifest: &Path, extra: &[&str]) -> Output {
    let m = manifest.to_str().unwrap();
    let mut args = vec!["check", "--json", "--manifest", m];
    args.extend_from_slice(extra);
    spawnd(&args)
}

/// Runs `check` and asserts a denial with `reason` (exit 3 unless said otherwise).
fn assert_denied(out: &Output, reason: &str, exit: i32) -> Value {
    let v = json_of(out);
    assert_eq!(out.status.code(), Some(exit), "{v}");
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["error"]["details"]["reason"], reason, "{v}");
    assert_eq!(v["error"]["details"]["boundary"], "sandbox", "{v}");
    v
}

#[test]
fn an_allowed_request_prints_the_exact_argv_and_exits_0() {
    let s = Scratch::new();
    let out = check(
        &s.manifest(None),
        &["--op", "log", "--arg", "since=2026-01-01"],
    );
    let v = json_of(&out);
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(v["data"]["decision"], "allowed");
    assert_eq!(
        v["data"]["argv"],
        serde_json::json!(["git", "log", "--since=2026-01-01"])
    );
    assert_eq!(v["tool"], "spawnd");
    assert_eq!(v["command"], "check");
    assert!(v["meta"]["duration_ms"].is_u64());
}

#[test]
fn option_injection_is_refused() {
    let s = Scratch::new();
    let m = s.manifest(None);
    for value in ["--upload-pack=touch /tmp/pwned", "-oProxyCommand=sh -c id"] {
        let arg = format!("rev={value}");
        let v = assert_denied(
            &check(&m, &["--op", "show", "--arg", &arg]),
            "option_injection",
            3,
        );
        assert_eq!(v["error"]["details"]["placeholder"], "{rev}");
        assert_eq!(v["error"]["code"], "PERMISSION_DENIED");
    }
    assert_denied(
        &check(&m, &["--op", "ssh-like", "--arg", "host=-oProxyCommand=x"]),
        "option_injection",
        3,
    );
}

#[test]
fn dot_dot_in_cwd_and_in_path_values_is_refused() {
    let s = Scratch::new();
    let m = s.manifest(None);
    let cwd = format!("{}/work/../..", s.dir.path().display());
    assert_denied(
        &check(&m, &["--op", "log", "--arg", "since=x", "--cwd", &cwd]),
        "cwd_outside_scope",
        3,
    );
    assert_denied(
        &check(&m, &["--op", "log", "--arg", "since=x", "--cwd", "/etc"]),
        "cwd_outside_scope",
        3,
    );
    assert_denied(
        &check(&m, &["--op", "cat", "--arg", "file=../../etc/shadow"]),
        "value_invalid",
        3,
    );
    assert_denied(
        &check(&m, &["--op", "cat", "--arg", "file=/etc/shadow"]),
        "value_invalid",
        3,
    );
    let inside = format!("{}/work/sub", s.dir.path().display());
    assert_eq!(
        check(&m, &["--op", "log", "--arg", "since=x", "--cwd", &inside])
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn nul_bytes_and_over_long_values_are_refused() {
    let s = Scratch::new();
    let m = s.manifest(None);
    let env = s.write(
        "nul.json",
        r#"{"program": "/usr/bin/git", "argv": ["git", "log", "--since=a\u0000b"]}"#,
    );
    assert_denied(
        &check(&m, &["--envelope", env.to_str().unwrap()]),
        "value_invalid",
        3,
    );
    let long = format!("since={}", "x".repeat(5000));
    assert_denied(
        &check(&m, &["--op", "log", "--arg", &long]),
        "value_invalid",
        3,
    );
}

#[test]
fn unknown_args_and_missing_placeholders_are_refused() {
    let s = Scratch::new();
    let m = s.manifest(None);
    assert_denied(
        &check(&m, &["--op", "log", "--arg", "since=x", "--arg", "extra=y"]),
        "arg_unknown",
        3,
    );
    assert_denied(&check(&m, &["--op", "log"]), "placeholder_missing", 3);
    let v = assert_denied(&check(&m, &["--op", "push"]), "op_unknown", 6);
    assert_eq!(v["error"]["code"], "NOT_FOUND");
    let dup = spawnd(&[
        "check",
        "--manifest",
        m.to_str().unwrap(),
        "--op",
        "log",
        "--arg",
        "since=a",
        "--arg",
        "since=b",
    ]);
    assert_eq!(dup.status.code(), Some(2));
}

#[test]
fn a_raw_argv_borrowed_from_another_programs_operation_is_refused() {
    let s = Scratch::new();
    let m = s.manifest(None);
    let tool = s.path("tool");
    let env = s.write(
        "borrowed.json",
        &format!(
            r#"{{"program": "{}", "argv": ["git", "log", "--since=x"]}}"#,
            tool.display()
        ),
    );
    assert_denied(
        &check(&m, &["--envelope", env.to_str().unwrap()]),
        "argv_not_declared",
        3,
    );
    let env = s.write(
        "curl.json",
        r#"{"program": "/usr/bin/curl", "argv": ["curl", "https://evil.example.com"]}"#,
    );
    assert_denied(
        &check(&m, &["--envelope", env.to_str().unwrap()]),
        "program_not_declared",
        3,
    );
    let env = s.write(
        "strict.json",
        r#"{"Program": "/usr/bin/git", "argv": ["git", "log"]}"#,
    );
    assert_eq!(
        check(&m, &["--envelope", env.to_str().unwrap()])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn a_hash_mismatch_is_refused_and_a_pinned_match_allowed() {
    let s = Scratch::new();
    let wrong = format!("sha256:{}", "0".repeat(64));
    assert_denied(
        &check(
            &s.manifest(Some(&wrong)),
            &["--op", "log", "--arg", "since=x"],
        ),
        "program_hash_mismatch",
        3,
    );
    let real = String::from_utf8(spawnd(&["hash", "/usr/bin/git"]).stdout).unwrap();
    let out = check(
        &s.manifest(Some(real.trim())),
        &["--op", "log", "--arg", "since=x"],
    );
    assert_eq!(json_of(&out)["data"]["program"]["pinned"], true);
}

#[test]
fn a_setuid_program_is_refused() {
    let s = Scratch::new();
    let m = s.manifest(None);
    s.program("tool", 0o4755);
    assert_denied(
        &check(&m, &["--op", "ssh-like", "--arg", "host=h"]),
        "program_setuid",
        3,
    );
    s.program("tool", 0o2755);
    assert_denied(
        &check(&m, &["--op", "ssh-like", "--arg", "host=h"]),
        "program_setuid",
        3,
    );
}

#[test]
fn env_keys_outside_passthrough_and_loader_keys_are_refused() {
    let s = Scratch::new();
    let m = s.manifest(None);
    assert_denied(
        &check(
            &m,
            &[
                "--op",
                "log",
                "--arg",
                "since=x",
                "--env",
                "AWS_SECRET_KEY=x",
            ],
        ),
        "env_not_declared",
        3,
    );
    assert_denied(
        &check(
            &m,
            &[
                "--op",
                "log",
                "--arg",
                "since=x",
                "--env",
                "LD_PRELOAD=/x.so",
            ],
        ),
        "env_reserved",
        3,
    );
    let out = check(
        &m,
        &[
            "--op",
            "log",
            "--arg",
            "since=x",
            "--env",
            "GIT_AUTHOR_NAME=alr",
        ],
    );
    assert_eq!(json_of(&out)["data"]["env"][0]["key"], "GIT_AUTHOR_NAME");
}

#[test]
fn mode_tiers_are_enforced() {
    let s = Scratch::new();
    let text = std::fs::read_to_string(s.manifest(None)).unwrap().replace(
        "argv = \"git show {rev}\"",
        "argv = \"git show {rev}\"\nmode = \"admin\"",
    );
    let m = s.write("m2.toml", &text);
    assert_denied(
        &check(&m, &["--op", "show", "--arg", "rev=HEAD"]),
        "mode_insufficient",
        3,
    );
    assert_eq!(
        check(
            &m,
            &["--op", "show", "--arg", "rev=HEAD", "--mode", "admin"]
        )
        .status
        .code(),
        Some(0)
    );
}

#[test]
fn capabilities_says_runs_mode_must_reach_the_operations_tier_as_the_gate_does() {
    let caps = json_of(&spawnd(&["capabilities", "--json"]));
    let commands = caps["data"]["commands"].as_array().unwrap();
    let run = commands.iter().find(|c| c["id"] == "run").unwrap();
    let summary = run["summary"].as_str().unwrap();
    assert!(!summary.contains("own mode"), "{summary}");
    assert!(
        summary.contains("--mode must reach the operation's tier"),
        "{summary}"
    );
    // What it says is what the gate does: a write operation needs --mode write.
    let s = Scratch::new();
    let text = std::fs::read_to_string(s.manifest(None)).unwrap().replace(
        "argv = \"git show {rev}\"",
        "argv = \"git show {rev}\"\nmode = \"write\"",
    );
    let m = s.write("m2.toml", &text);
    let denied = assert_denied(
        &check(&m, &["--op", "show", "--arg", "rev=HEAD"]),
        "mode_insufficient",
        3,
    );
    let message = denied["error"]["message"].as_str().unwrap();
    assert!(message.contains("pass --mode write"), "{message}");
    let allowed = check(
        &m,
        &["--op", "show", "--arg", "rev=HEAD", "--mode", "write"],
    );
    assert_eq!(allowed.status.code(), Some(0));
}

#[test]
fn a_disabled_connector_and_an_unbound_credential_are_refused() {
    let s = Scratch::new();
    let m = s.manifest(None);
    let cfg = s.write(
        "c.toml",
        "[[disable]]\nconnector = \"local://test/tools\"\n",
    );
    let out = spawnd(&[
        "check",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--manifest",
        m.to_str().unwrap(),
        "--op",
        "log",
        "--arg",
        "since=x",
    ]);
    assert_denied(&out, "connector_disabled", 3);
    let text = std::fs::read_to_string(&m).unwrap().replace(
        "env_passthrough = [\"GIT_AUTHOR_NAME\"]",
        "env_passthrough = [\"GIT_AUTHOR_NAME\", \"TOKEN\"]\ncredential_env_keys = [\"TOKEN\"]",
    );
    let m2 = s.write("m3.toml", &text);
    let v = json_of(&check(&m2, &["--op", "log", "--arg", "since=x"]));
    assert_eq!(v["error"]["details"]["class"], "binding_required", "{v}");
    assert_eq!(v["error"]["code"], "CONFIG_ERROR");
}

#[test]
fn manifest_errors_name_file_line_column_key_and_fix() {
    let s = Scratch::new();
    let m = s.write("bad.toml", "[connector]\nname = \"local://a/b\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/git\" }]\nenv_passthrough = [\"LD_PRELOAD\"]\n[capabilities.spawn.operations.x]\nargv = \"git status\"\n");
    let out = spawnd(&["manifest", "lint", m.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml:6:20")
            && err.contains("env_passthrough")
            && err.contains("reserved")
            && err.contains("hint:"),
        "{err}"
    );
}

#[test]
fn pin_fills_in_hashes_keeping_comments_and_layout() {
    let s = Scratch::new();
    let text = "# keep me\n[connector]\nname = \"local://a/b\"   # and me\nversion = \"1.0.0\"\n\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/git\" }]\n\n[capabilities.spawn.operations.x]\nargv = \"git status\" # status\n";
    let m = s.write("pin.toml", text);
    let out = spawnd(&["manifest", "pin", m.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pinned = std::fs::read_to_string(&m).unwrap();
    let hash = String::from_utf8(spawnd(&["hash", "/usr/bin/git"]).stdout).unwrap();
    assert!(
        pinned.contains(&format!("hash = \"{}\"", hash.trim())),
        "{pinned}"
    );
    for keep in ["# keep me", "# and me", "# status"] {
        assert!(pinned.contains(keep), "{pinned}");
    }
    assert_eq!(
        pinned.replace(&format!(", hash = \"{}\"", hash.trim()), ""),
        text
    );
    let again = spawnd(&["manifest", "pin", m.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&again.stdout).starts_with("unchanged"));
    let stale = format!("sha256:{}", "0".repeat(64));
    let m2 = s.write("stale.toml", &pinned.replace(hash.trim(), &stale));
    // --check over several files: says what is stale, writes nothing,
    // exits 1; a pinned file alone passes.
    let checked = spawnd(&[
        "manifest",
        "pin",
        "--check",
        m.to_str().unwrap(),
        m2.to_str().unwrap(),
    ]);
    assert_eq!(checked.status.code(), Some(1));
    let said = String::from_utf8_lossy(&checked.stdout);
    // It writes nothing, so it says what pinning would do.
    assert!(
        said.contains(&format!(
            "would update /usr/bin/git {stale} -> {}",
            hash.trim()
        )),
        "{said}"
    );
    assert!(!said.lines().any(|l| l.starts_with("updated")), "{said}");
    assert!(std::fs::read_to_string(&m2).unwrap().contains(&stale));
    let m3 = s.write("unpinned.toml", text);
    let unpinned = spawnd(&["manifest", "pin", "--check", m3.to_str().unwrap()]);
    assert_eq!(unpinned.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&unpinned.stdout)
            .starts_with(&format!("would pin /usr/bin/git {}", hash.trim())),
        "{unpinned:?}"
    );
    assert_eq!(std::fs::read_to_string(&m3).unwrap(), text);
    let fine = spawnd(&["manifest", "pin", "--check", m.to_str().unwrap()]);
    assert_eq!(fine.status.code(), Some(0));
    // Re-pinned in one go, it says what changed: old -> new.
    let out = spawnd(&["manifest", "pin", m.to_str().unwrap(), m2.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("{}:\nunchanged", m.display())),
        "{said}"
    );
    assert!(
        said.contains(&format!("updated /usr/bin/git {stale} -> ")),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&m2).unwrap(), pinned);
}

#[test]
fn hash_prints_sha256_of_a_file() {
    let s = Scratch::new();
    let f = s.write("abc", "abc");
    let out = spawnd(&["hash", f.to_str().unwrap()]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(spawnd(&["hash", "/nonexistent"]).status.code(), Some(6));
}

#[test]
fn explain_speaks_plainly_about_what_is_granted() {
    let out = spawnd(&["manifest", "explain", "policies/git.toml"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    for needle in [
        "/usr/bin/git",
        "NOT pinned",
        "may read:",
        "no network",
        "{since}",
    ] {
        assert!(text.contains(needle), "missing {needle}: {text}");
    }
}

#[test]
fn every_shipped_policy_is_valid() {
    for entry in std::fs::read_dir("policies").unwrap() {
        let path = entry.unwrap().path();
        let out = spawnd(&["manifest", "lint", path.to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn capabilities_health_and_config_show_speak_json() {
    let caps = json_of(&spawnd(&["capabilities", "--json"]));
    assert_eq!(caps["data"]["tool"], "spawnd");
    assert_eq!(caps["data"]["denial_reasons"].as_array().unwrap().len(), 26);
    let health = spawnd(&["health", "--json"]);
    let h = json_of(&health);
    // This machine offers every layer: the probe must find them.
    assert_eq!(h["data"]["userns"]["available"], true, "{h}");
    assert!(h["data"]["landlock_abi"].as_u64().unwrap() >= 1, "{h}");
    assert_eq!(h["data"]["seccomp"]["available"], true, "{h}");
    // SPEC §10: 0 while spawns run (healthy, or degraded with each
    // degradation named), 4 for needs_setup, 5 for error.
    let expected = match h["data"]["status"].as_str().unwrap() {
        "healthy" => 0,
        "degraded" => {
            assert!(!h["data"]["reasons"].as_array().unwrap().is_empty(), "{h}");
            0
        }
        "needs_setup" => 4,
        _ => 5,
    };
    assert_eq!(health.status.code(), Some(expected), "{h}");
    let s = Scratch::new();
    let cfg = s.write("c.toml", "[[credentials]]\nconnector = \"local://a/b\"\nkey = \"K\"\nsource = \"file:/etc/spawnd/k\"\n");
    let shown = json_of(&spawnd(&[
        "config",
        "show",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
    ]));
    assert_eq!(
        shown["data"]["credentials"][0]["source"],
        "file:/etc/spawnd/k"
    );
}

#[test]
fn config_show_prints_the_socket_mode_as_octal_in_text_and_json() {
    let s = Scratch::new();
    let cfg = s.write("c.toml", "[server]\nsocket_mode = \"0640\"\n");
    let json = json_of(&spawnd(&[
        "config",
        "show",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
    ]));
    assert_eq!(json["data"]["server"]["socket_mode"], "0640", "{json}");
    let text = spawnd(&["config", "show", "--config", cfg.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(r#""socket_mode": "0640""#), "{text}");
    let defaults = json_of(&spawnd(&["config", "show", "--json"]));
    assert_eq!(
        defaults["data"]["server"]["socket_mode"], "0660",
        "{defaults}"
    );
}

#[test]
fn a_config_file_that_cannot_be_read_is_a_config_error_naming_the_file() {
    let s = Scratch::new();
    let missing = s.path("missing.toml");
    let out = spawnd(&[
        "config",
        "show",
        "--json",
        "--config",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(4));
    let json = json_of(&out);
    assert_eq!(json["error"]["code"], "CONFIG_ERROR", "{json}");
    let message = json["error"]["message"].as_str().unwrap();
    for part in [missing.to_str().unwrap(), "--config", "$SPAWND_CONFIG"] {
        assert!(message.contains(part), "{part}: {message}");
    }
    // The same through $SPAWND_CONFIG, and for a directory (read, not found).
    let out = Command::new(env!("CARGO_BIN_EXE_spawnd"))
        .args(["health"])
        .env("SPAWND_CONFIG", &missing)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = s.path("work");
    let out = spawnd(&["config", "show", "--config", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains(dir.to_str().unwrap()));
}

#[test]
fn serve_without_its_manifests_directory_says_to_create_it_or_set_server_manifests() {
    let s = Scratch::new();
    let missing = s.path("manifests");
    let cfg = s.write(
        "c.toml",
        &format!(
            "[audit]\npath = \"{}\"\n[server]\nsocket = \"{}\"\nmanifests = [\"{}\"]\n",
            s.path("audit.jsonl").display(),
            s.path("spawnd.sock").display(),
            missing.display()
        ),
    );
    let out = spawnd(&["serve", "--config", cfg.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{} does not exist", missing.display())),
        "{err}"
    );
    assert!(err.contains("create it"), "{err}");
    assert!(
        err.contains(&format!("set [server] manifests in {}", cfg.display())),
        "{err}"
    );
}

#[test]
fn lint_of_an_unknown_key_points_to_where_the_keys_are_described() {
    let s = Scratch::new();
    let m = s.write("typo.toml", "[connector]\nname = \"local://a/b\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/git\" }]\nfs_reed = []\n[capabilities.spawn.operations.x]\nargv = \"git status\"\n");
    let out = spawnd(&["manifest", "lint", m.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fs_reed") && err.contains("docs/manifest.md"),
        "{err}"
    );
    assert!(!err.contains("explain --help"), "{err}");
}

#[test]
fn usage_errors_exit_2_with_a_json_envelope_when_asked() {
    let out = spawnd(&["check", "--json", "--manifest", "x.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let error = &json_of(&out)["error"];
    assert_eq!(error["code"], "INVALID_USAGE");
    // The message names what is missing, on one line.
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("not provided") && message.contains("--op"),
        "{message}"
    );
    assert!(
        !message.contains('\n') && !message.contains("Usage"),
        "{message}"
    );
    assert_eq!(
        spawnd(&["manifest", "lint", "/nonexistent.toml"])
            .status
            .code(),
        Some(6)
    );
}

// ---------------------------------------------------------------------------
// Audit hardening: text a manifest or a caller supplies reaches a terminal
// with its control characters escaped, and cannot add lines of its own.
// ---------------------------------------------------------------------------

fn has_control(text: &[u8]) -> bool {
    String::from_utf8_lossy(text)
        .chars()
        .any(|c| c.is_control() && c != '\n')
}

#[test]
fn explain_escapes_control_characters_from_the_manifest() {
    let s = Scratch::new();
    let m = s.write(
        "hostile.toml",
        r#"[connector]
name = "local://test/hostile"
version = "1.0.0"

[capabilities.spawn]
programs = [{ path = "/usr/bin/true" }]
env_set = { LANG = "C\u001b[2J" }

[capabilities.spawn.operations.t]
argv = "true {x}"
description = "harmless\nFiles:\n  may write:   nothing\u001b[8m"

[capabilities.spawn.operations.t.params.x]
values = ["a\rb", "c"]
description = "x\u009b31m"
"#,
    );
    let out = spawnd(&["manifest", "explain", m.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !has_control(&out.stdout),
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("  may write:"))
            .count(),
        1,
        "a description forged a line: {text}"
    );
}

#[test]
fn error_messages_escape_control_characters() {
    let s = Scratch::new();
    let m = s.write(
        "bad.toml",
        "[connector]\nname = \"local://test/bad\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/true\" }]\n[capabilities.spawn.operations.\"t\\u001b[2J\\nspawnd: ok\"]\nargv = \"true\"\n",
    );
    let out = spawnd(&["manifest", "lint", m.to_str().unwrap()]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        !has_control(&out.stderr) && !has_control(&out.stdout),
        "{:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An op name that could never be declared is a usage error, not a
    // denial, and is not echoed raw.
    let tools = s.manifest(None);
    let out = spawnd(&[
        "check",
        "--manifest",
        tools.to_str().unwrap(),
        "--op",
        "log\u{1b}[2J",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!has_control(&out.stderr), "{out:?}");
}

/// A manifest whose `fetch` operation is granted one host:port pair.
fn network_manifest(s: &Scratch) -> PathBuf {
    let tool = s.program("tool", 0o755);
    let text = format!(
        r#"[connector]
name = "local://test/net"
version = "1.0.0"

[capabilities.spawn]
programs = [{{ path = "{tool}" }}]
network = ["api.example.com:443", "127.0.0.1:8080"]

[capabilities.spawn.operations.fetch]
argv = "tool fetch"
network = ["api.example.com:443"]

[capabilities.spawn.operations.offline]
argv = "tool offline"
network = []
"#,
        tool = tool.display()
    );
    s.write("net.toml", &text)
}

#[test]
fn network_grants_are_shown_by_check_and_explain_and_lint_warns_of_host_loopback() {
    let s = Scratch::new();
    let m = network_manifest(&s);
    let v = json_of(&check(&m, &["--op", "fetch"]));
    assert_eq!(
        v["data"]["network"],
        serde_json::json!(["api.example.com:443"])
    );
    let v = json_of(&check(&m, &["--op", "offline"]));
    assert_eq!(v["data"]["network"], serde_json::json!([]));
    let text = spawnd(&["check", "--manifest", m.to_str().unwrap(), "--op", "fetch"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("network: api.example.com:443"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    let explained = spawnd(&["manifest", "explain", m.to_str().unwrap()]);
    let explained = String::from_utf8_lossy(&explained.stdout);
    assert!(
        explained.contains("exactly these host:port pairs")
            && explained.contains("api.example.com:443, 127.0.0.1:8080")
            && explained.contains("network: only api.example.com:443"),
        "{explained}"
    );
    // An operation narrowed to no pair says so, never "only nothing".
    assert!(
        explained.contains("network: none (only its own loopback)")
            && !explained.contains("only nothing"),
        "{explained}"
    );
    let lint = spawnd(&["manifest", "lint", "--json", m.to_str().unwrap()]);
    let lint = String::from_utf8_lossy(&lint.stdout);
    assert!(
        lint.contains("127.0.0.1:8080") && lint.contains("loopback"),
        "{lint}"
    );
}

#[test]
fn a_wildcard_grant_is_a_lint_error_at_its_line_and_column() {
    let s = Scratch::new();
    let m = network_manifest(&s);
    let text = std::fs::read_to_string(&m).unwrap().replace(
        "\"api.example.com:443\", \"127",
        "\"*.example.com:443\", \"127",
    );
    let bad = s.write("bad.toml", &text);
    let out = spawnd(&["manifest", "lint", bad.to_str().unwrap()]);
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(out.status.code(), Some(0), "{shown}");
    let line = text
        .lines()
        .position(|l| l.starts_with("network = [\"*"))
        .unwrap()
        + 1;
    assert!(
        shown.contains(&format!("bad.toml:{line}:13:")),
        "line {line}, column 13: {shown}"
    );
}

/// A directory any user may use, holding a copy of spawnd and a config
/// whose audit log lies inside it. The copy is written by another process:
/// a copy written by this one is open for writing while other tests fork,
/// and executing it would fail with ETXTBSY.
fn reachable_by_anyone() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let spawnd = dir.path().join("spawnd");
    let copied = Command::new("cp")
        .arg(env!("CARGO_BIN_EXE_spawnd"))
        .arg(&spawnd)
        .status()
        .unwrap();
    assert!(copied.success());
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[audit]\npath = \"{}/audit/audit.jsonl\"\n",
            dir.path().display()
        ),
    )
    .unwrap();
    (dir, spawnd, config)
}

/// For an unprivileged user rlimits are how every run is limited, so a
/// machine where such runs work is healthy for that user (as root, a
/// missing cgroup controller is a degradation).
#[test]
fn health_as_an_unprivileged_user_with_a_writable_audit_location_is_healthy() {
    let (_dir, spawnd, config) = reachable_by_anyone();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&spawnd)
        .args(["health", "--json"])
        .env_clear()
        .env("SPAWND_CONFIG", &config)
        .env("HOME", "/nonexistent")
        .output()
        .unwrap();
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let h = json_of(&out);
    assert_eq!(h["data"]["root"], false, "{h}");
    assert_eq!(h["data"]["cgroups"]["limits_via"], "rlimits", "{h}");
    assert_eq!(h["data"]["status"], "healthy", "{h}");
    assert_eq!(out.status.code(), Some(0), "{h}");
}

#[test]
fn manifest_init_drafts_a_pinned_manifest_that_lints_and_never_overwrites() {
    let s = Scratch::new();
    let out = s.path("draft.toml");
    let made = spawnd(&[
        "manifest",
        "init",
        "--name",
        "local://ci/build",
        "--program",
        "/usr/bin/git",
        "--program",
        "/usr/bin/tar",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(made.status.code(), Some(0), "{made:?}");
    let text = std::fs::read_to_string(&out).unwrap();
    let hash = String::from_utf8(spawnd(&["hash", "/usr/bin/git"]).stdout).unwrap();
    assert!(
        text.contains(&format!(
            "{{ path = \"/usr/bin/git\", hash = \"{}\" }}",
            hash.trim()
        )),
        "{text}"
    );
    assert!(
        text.contains("[capabilities.spawn.operations.tar]"),
        "{text}"
    );
    let lint = spawnd(&["manifest", "lint", out.to_str().unwrap()]);
    assert_eq!(lint.status.code(), Some(0), "{lint:?}");
    // An existing file is never overwritten.
    let again = spawnd(&[
        "manifest",
        "init",
        "--name",
        "local://ci/build",
        "--program",
        "/usr/bin/git",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(again.status.code(), Some(2), "{again:?}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), text);
}

/// In a rootless container (`unshare -r`: root of a user namespace that
/// maps only the user who made it), spawnd is that one user: runs work,
/// as it, and health says so. spawnd running as its parent's root without
/// power over other users (real root inside `unshare -r`, or under
/// another uid) runs nothing, and health says why.
#[test]
fn a_rootless_container_runs_as_its_one_user_and_real_root_alone_runs_nothing() {
    let (dir, spawnd, config) = reachable_by_anyone();
    let manifest = dir.path().join("m.toml");
    std::fs::write(
        &manifest,
        "[connector]\nname = \"local://t/rootless\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/id\" }]\n[capabilities.spawn.operations.id]\nargv = \"id -u\"\n",
    )
    .unwrap();
    let in_unshare = |as_nobody: bool, args: &[&str]| {
        let mut c = if as_nobody {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "unshare",
                "-r",
            ]);
            c
        } else {
            let mut c = Command::new("unshare");
            c.arg("-r");
            c
        };
        c.arg(&spawnd)
            .args(args)
            .env_clear()
            .env("SPAWND_CONFIG", &config)
            .env("HOME", "/nonexistent")
            .output()
            .unwrap()
    };
    let run = [
        "run",
        "--json",
        "--manifest",
        manifest.to_str().unwrap(),
        "--op",
        "id",
    ];
    let out = in_unshare(true, &run);
    let v = json_of(&out);
    assert_eq!(out.status.code(), Some(0), "{v}");
    // uid 0 of its namespace: nobody on the host.
    assert_eq!(v["data"]["stdout"]["text"], "0\n", "{v}");
    let health = in_unshare(true, &["health", "--json"]);
    assert_eq!(json_of(&health)["data"]["status"], "healthy");
    let out = in_unshare(false, &run);
    let v = json_of(&out);
    assert_eq!(out.status.code(), Some(5), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("its parent namespace's root"),
        "{v}"
    );
    let health = in_unshare(false, &["health", "--json"]);
    assert_eq!(json_of(&health)["data"]["status"], "error");
    // The host's root under another name (uid 1000 of a namespace whose
    // 1000 is its parent's 0) runs nothing either.
    let out = Command::new("unshare")
        .args(["-U", "--map-user=1000", "--map-group=1000"])
        .arg(&spawnd)
        .args(run)
        .env_clear()
        .env("SPAWND_CONFIG", &config)
        .env("HOME", "/nonexistent")
        .output()
        .unwrap();
    let v = json_of(&out);
    assert_eq!(out.status.code(), Some(5), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("its parent namespace's root"),
        "{v}"
    );
}

/// `run --label` is checked before anything runs: a control character is
/// a usage error (exit 2).
#[test]
fn a_label_with_a_control_character_is_a_usage_error() {
    let out = spawnd(&[
        "run",
        "--manifest",
        "policies/coreutils.toml",
        "--op",
        "x",
        "--label",
        "a\u{7}b",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--label"),
        "{out:?}"
    );
}

/// `spawnd connectors` shows each operation's params, one line each in the
/// text block and in full in `--json`, and nothing of a disabled connector
/// but its status.
#[test]
fn connectors_shows_each_param_and_nothing_of_a_disabled_connector() {
    let s = Scratch::new();
    let manifest = |name: &str| {
        let p = s.write(
            &format!("{name}.toml"),
            &format!(
                "[connector]\nname = \"local://cli/{name}\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/echo\" }}]\n[capabilities.spawn.operations.greet]\nargv = \"echo {{who}} [--loud={{loud}}]\"\ndescription = \"greets someone\"\n[capabilities.spawn.operations.greet.params.who]\nvalues = [\"world\", \"you\"]\ndescription = \"who is greeted\"\n"
            ),
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        p
    };
    let (on, off) = (manifest("on"), manifest("off"));
    let cfg = s.write("c.toml", "[[disable]]\nconnector = \"local://cli/off\"\n");
    let args = |json: bool| {
        let mut a = vec!["connectors", "--config", cfg.to_str().unwrap()];
        if json {
            a.push("--json");
        }
        a.extend([
            "--manifest",
            on.to_str().unwrap(),
            "--manifest",
            off.to_str().unwrap(),
        ]);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let text = spawnd(&args(false).iter().map(String::as_str).collect::<Vec<_>>());
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(
        text.contains(r#""who (string, required, one of world|you): who is greeted""#)
            && text.contains(r#""loud (string, optional)""#),
        "{text}"
    );
    assert_eq!(text.matches("greets someone").count(), 1, "{text}");
    let v = json_of(&spawnd(
        &args(true).iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    let on = &v["data"]["connectors"]["local://cli/on"]["operations"][0]["params"][0];
    assert_eq!(
        (&on["name"], &on["required"], &on["values"]),
        (
            &serde_json::json!("who"),
            &serde_json::json!(true),
            &serde_json::json!(["world", "you"])
        ),
        "{v}"
    );
    let off = &v["data"]["connectors"]["local://cli/off"];
    assert_eq!(off["status"], "disabled_by_admin", "{v}");
    assert!(off.get("operations").is_none(), "{v}");
}

/// A `[server] manifests` entry that does not exist, a directory or a file,
/// is a config problem: `serve` exits 4 (`CONFIG_ERROR` with `--json`),
/// naming the entry.
#[test]
fn serve_with_a_missing_manifests_entry_exits_4() {
    let s = Scratch::new();
    for missing in [s.path("manifests"), s.path("gone.toml")] {
        let cfg = s.write(
            "c.toml",
            &format!(
                "[audit]\npath = \"{}\"\n[server]\nsocket = \"{}\"\nmanifests = [\"{}\"]\n",
                s.path("audit.jsonl").display(),
                s.path("spawnd.sock").display(),
                missing.display()
            ),
        );
        let out = spawnd(&["serve", "--config", cfg.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(4), "{out:?}");
        let out = spawnd(&["serve", "--json", "--config", cfg.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(4), "{out:?}");
        let v = json_of(&out);
        assert_eq!(v["error"]["code"], "CONFIG_ERROR", "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("{} does not exist", missing.display())),
            "{message}"
        );
        assert!(!s.path("spawnd.sock").exists(), "serve bound its socket");
    }
}

/// Root of a user namespace that maps only itself (`unshare -r`) is one
/// user like any other: with no config, its audit log goes under
/// `XDG_STATE_HOME`, as the hint on an unusable location says, not to
/// `/var/log/spawnd`.
#[test]
fn under_unshare_r_the_default_audit_log_follows_xdg_state_home() {
    let (dir, spawnd, _config) = reachable_by_anyone();
    let manifest = dir.path().join("m.toml");
    std::fs::write(
        &manifest,
        "[connector]\nname = \"local://t/state\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/true\" }]\n[capabilities.spawn.operations.t]\nargv = \"true\"\n",
    )
    .unwrap();
    let state = dir.path().join("state");
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "unshare",
            "-r",
        ])
        .arg(&spawnd)
        .args(["run", "--manifest", manifest.to_str().unwrap(), "--op", "t"])
        .env_clear()
        .env("HOME", "/nonexistent")
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let log = std::fs::read_to_string(state.join("spawnd/audit.jsonl")).unwrap();
    assert!(log.contains("\"local://t/state\""), "{log}");
}

/// Whether `instance` is valid against `schema` (draft 2020-12), as
/// Python's jsonschema judges it (scripts/setup installs it).
fn schema_accepts(schema: &Value, instance: &Value) -> bool {
    let out = Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import json, sys, jsonschema\nschema, instance = json.loads(sys.argv[1]), json.loads(sys.argv[2])\njsonschema.Draft202012Validator.check_schema(schema)\nprint(jsonschema.Draft202012Validator(schema).is_valid(instance))",
        ])
        .arg(schema.to_string())
        .arg(instance.to_string())
        .output()
        .expect("python3");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said.trim() == "True"
}

/// `connectors --tools`: one JSON Schema per operation of the shipped git
/// policy, which takes the arguments the manifest takes and refuses what
/// it refuses: a value its pattern matches only in part (the pattern is
/// anchored), a missing required arg, an unknown one. The
/// MCP form carries the same schema as `inputSchema`.
#[test]
fn connectors_tools_validate_arguments_as_the_manifest_does() {
    let git = concat!(env!("CARGO_MANIFEST_DIR"), "/policies/git.toml");
    let out = spawnd(&[
        "connectors",
        "--json",
        "--tools",
        "json-schema",
        "--manifest",
        git,
    ]);
    let tools = json_of(&out)["data"]["tools"].clone();
    let log = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["title"] == "local_spawnd_git__log")
        .unwrap_or_else(|| panic!("{tools}"))
        .clone();
    assert_eq!(log["additionalProperties"], false, "{log}");
    assert_eq!(log["required"], json!(["since"]), "{log}");
    let gate = |args: &[&str]| {
        let mut a = vec!["--op", "log"];
        for arg in args {
            a.extend(["--arg", arg]);
        }
        check(Path::new(git), &a).status.code()
    };
    // The manifest's verdicts (check exits 0 when allowed) and the schema's agree.
    for (args, instance, allowed) in [
        (
            vec!["since=2026-01-31"],
            json!({"since": "2026-01-31"}),
            true,
        ),
        (
            vec!["since=2026-01-31", "author=Ada Lovelace"],
            json!({"since": "2026-01-31", "author": "Ada Lovelace"}),
            true,
        ),
        (
            vec!["since=x2026-01-31y"],
            json!({"since": "x2026-01-31y"}),
            false,
        ),
        (
            vec!["since=2026-01-31", "color=red"],
            json!({"since": "2026-01-31", "color": "red"}),
            false,
        ),
        (vec![], json!({}), false),
    ] {
        let by_manifest = gate(&args) == Some(0);
        assert_eq!(by_manifest, allowed, "the manifest on {args:?}");
        assert_eq!(
            schema_accepts(&log, &instance),
            allowed,
            "the schema on {instance}"
        );
    }
    // Unanchored, the same pattern would have let the partial match through.
    let mut unanchored = log.clone();
    unanchored["properties"]["since"]["pattern"] = json!("[0-9]{4}-[0-9]{2}-[0-9]{2}");
    assert!(schema_accepts(
        &unanchored,
        &json!({"since": "x2026-01-31y"})
    ));

    let mcp = json_of(&spawnd(&[
        "connectors",
        "--json",
        "--tools",
        "mcp",
        "--manifest",
        git,
    ]))["data"]["tools"]
        .clone();
    let tool = mcp
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "local_spawnd_git__log")
        .unwrap_or_else(|| panic!("{mcp}"));
    assert_eq!(
        tool.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["description", "inputSchema", "name"]
    );
    assert!(schema_accepts(
        &tool["inputSchema"],
        &json!({"since": "2026-01-31"})
    ));
    assert!(!schema_accepts(
        &tool["inputSchema"],
        &json!({"since": "2026-1-31"})
    ));
    assert_eq!(
        mcp.as_array().unwrap().len(),
        tools.as_array().unwrap().len()
    );
}
