//! The CI recipes of `docs/ci.md`, run as written on a copy of
//! `examples/ci`: the learn block once per runner identity, then the plain
//! shell script, each GitHub Actions job's `run` steps (with `$GITHUB_ENV`
//! carried between steps, as the runner does) and the GitLab job's scripts.
//! Left out are only the steps that fetch spawnd or the tools (named
//! `Install spawnd…`, and GitLab's `before_script`) and the CI systems' own
//! actions; the artifact paths those upload are checked instead.
//!
//! A root runner works on a root-owned checkout and the unprivileged runner
//! on its own, neither chowns anything, and each is judged on the host: the
//! files the steps leave are owned by the checkout's owner, every step's
//! JSON result says exit 0, and the audit log the recipe keeps verifies and
//! holds the job's labels.

use crate::harness;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use harness::{world, As};
use serde_json::Value;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The recipes, as `integration/ci_recipes.py` reads them from docs/ci.md.
fn recipes() -> &'static Value {
    static RECIPES: OnceLock<Value> = OnceLock::new();
    RECIPES.get_or_init(|| {
        let out = Command::new("/usr/bin/python3")
            .arg(Path::new(REPO).join("integration/ci_recipes.py"))
            .arg(Path::new(REPO).join("docs/ci.md"))
            .output()
            .unwrap();
        assert!(out.status.success(), "ci_recipes.py: {out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        for name in ["learn", "shell", "github", "gitlab"] {
            assert!(!v[name].is_null(), "docs/ci.md has no `{name}` recipe");
        }
        v
    })
}

/// The runner's uid and gid: the checkout's owner.
fn owner(who: As) -> (u32, u32) {
    if who.is_root() {
        (0, 0)
    } else {
        (65534, 65534)
    }
}

/// A directory holding `spawnd` alone, for the recipes' `PATH`.
fn spawnd_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = world().path("ci-bin");
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("spawnd");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&world().spawnd, &link).unwrap();
        dir
    })
}

/// A fresh copy of `examples/ci` at `dir/checkout`, owned by the runner
/// (`dir` itself too: results and drafts go beside the checkout).
fn checkout(who: As, dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let co = dir.join("checkout");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(Path::new(REPO).join("examples/ci"))
        .arg(&co)
        .status()
        .unwrap();
    assert!(copied.success());
    let (uid, gid) = owner(who);
    let owned = Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{gid}"))
        .arg(dir)
        .status()
        .unwrap();
    assert!(owned.success());
    co
}

/// `bash -eo pipefail -c SCRIPT` as the runner, in `cwd`, with `env`.
fn sh(who: As, cwd: &Path, script: &str, env: &BTreeMap<String, String>) -> std::process::Output {
    let mut cmd = match who {
        As::Nobody => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "bash"]);
            c
        }
        _ => Command::new("bash"),
    };
    cmd.args(["--noprofile", "--norc", "-eo", "pipefail", "-c", script])
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", spawnd_bin().display()))
        .env("HOME", "/nonexistent")
        .envs(env)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The learned manifests for `who`: the learn block run once in a clean
/// checkout, its `ci/spawnd/` kept (what the workflow commits).
fn learned(who: As) -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    static NOBODY: OnceLock<PathBuf> = OnceLock::new();
    let cell = if who.is_root() { &ROOT } else { &NOBODY };
    cell.get_or_init(|| {
        let dir = world().path(&format!("ci-learn-{who:?}"));
        let co = checkout(who, &dir);
        // Where learning's own audit records go: the machine's defaults are
        // not the test's to write.
        let mut env = BTreeMap::new();
        env.insert("SPAWND_CONFIG".to_string(), config(who, &dir));
        let out = sh(who, &co, recipes()["learn"].as_str().unwrap(), &env);
        assert!(
            out.status.success(),
            "{who:?}: the learn block failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let kept = world().path(&format!("ci-manifests-{who:?}"));
        let _ = std::fs::remove_dir_all(&kept);
        let copied = Command::new("cp")
            .arg("-r")
            .arg(co.join("ci/spawnd"))
            .arg(&kept)
            .status()
            .unwrap();
        assert!(copied.success());
        kept
    })
}

/// A config naming an audit log in `dir`, owned by the runner.
fn config(who: As, dir: &Path) -> String {
    let path = dir.join("learn-config.toml");
    std::fs::write(
        &path,
        format!("[audit]\npath = \"{}/learn-audit.jsonl\"\n", dir.display()),
    )
    .unwrap();
    let (uid, gid) = owner(who);
    std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
    path.display().to_string()
}

/// A fresh checkout with the learned manifests committed in it.
fn checkout_with_manifests(who: As, case: &str) -> (PathBuf, PathBuf) {
    let dir = world().path(&format!("ci-{case}-{who:?}"));
    let manifests = learned(who);
    let co = checkout(who, &dir);
    std::fs::create_dir_all(co.join("ci")).unwrap();
    let copied = Command::new("cp")
        .arg("-r")
        .arg(manifests)
        .arg(co.join("ci/spawnd"))
        .status()
        .unwrap();
    assert!(copied.success());
    let (uid, gid) = owner(who);
    Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{gid}"))
        .arg(co.join("ci"))
        .status()
        .unwrap();
    (dir, co)
}

/// What every recipe must leave: the built program and the installed
/// dependency, owned by the checkout's owner; a JSON result per step
/// saying exit 0; an audit log that verifies and holds `labels`.
fn judge(who: As, case: &str, co: &Path, results: &Path, labels: &[String]) {
    let (uid, gid) = owner(who);
    for made in ["build/greet", ".deps/shout/__init__.py"] {
        let meta = std::fs::metadata(co.join(made))
            .unwrap_or_else(|e| panic!("{case} {who:?}: {made}: {e}"));
        assert_eq!(
            (meta.uid(), meta.gid()),
            (uid, gid),
            "{case} {who:?}: {made} is owned as the checkout is"
        );
    }
    for step in ["install", "build", "test"] {
        let text = std::fs::read_to_string(results.join(format!("{step}.json")))
            .unwrap_or_else(|e| panic!("{case} {who:?}: {step}.json: {e}"));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["ok"], true, "{case} {who:?}: {step}: {v}");
        assert_eq!(v["data"]["exit_code"], 0, "{case} {who:?}: {step}: {v}");
    }
    let log = results.join("audit.jsonl");
    let verified = Command::new(&world().spawnd)
        .args(["audit", "verify"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(verified.status.success(), "{case} {who:?}: {verified:?}");
    let records = std::fs::read_to_string(&log).unwrap();
    for label in labels {
        assert!(
            records.contains(&format!("\"label\":\"{label}\"")),
            "{case} {who:?}: no record labelled {label}"
        );
    }
}

fn show(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn shell_script(who: As) {
    let (dir, co) = checkout_with_manifests(who, "shell");
    let script = dir.join("ci.sh");
    std::fs::write(&script, recipes()["shell"].as_str().unwrap()).unwrap();
    let out = sh(
        who,
        &co,
        &format!("sh {}", script.display()),
        &BTreeMap::new(),
    );
    assert!(out.status.success(), "shell {who:?}: {}", show(&out));
    let labels: Vec<String> = ["install", "build", "test"]
        .iter()
        .map(|s| format!("ci-{s}"))
        .collect();
    judge(who, "shell", &co, &dir.join("results"), &labels);
}

/// Runs one GitHub Actions job's steps the way the runner does: each `run`
/// in `bash --noprofile --norc -eo pipefail`, what a step appends to
/// `$GITHUB_ENV` in the environment of the steps after it, `if: always()`
/// steps after a failure too.
fn github_job(who: As, job: &str) {
    let (dir, co) = checkout_with_manifests(who, &format!("github-{job}"));
    let temp = dir.join("runner-temp");
    std::fs::create_dir_all(&temp).unwrap();
    let (uid, gid) = owner(who);
    std::os::unix::fs::chown(&temp, Some(uid), Some(gid)).unwrap();
    let github_env = temp.join("github-env");
    std::fs::write(&github_env, "").unwrap();
    std::os::unix::fs::chown(&github_env, Some(uid), Some(gid)).unwrap();
    let mut env: BTreeMap<String, String> = [
        ("RUNNER_TEMP", temp.display().to_string()),
        ("GITHUB_ENV", github_env.display().to_string()),
        ("GITHUB_WORKSPACE", co.display().to_string()),
        ("GITHUB_RUN_ID", "4242".to_string()),
        ("CI", "true".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let steps = recipes()["github"]["jobs"][job]["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("docs/ci.md: no steps in job {job}"));
    let mut failed = None;
    let mut uploaded = Vec::new();
    for step in steps {
        let name = step["name"].as_str().unwrap_or_default();
        if let Some(action) = step["uses"].as_str() {
            if action.starts_with("actions/upload-artifact") {
                let path = step["with"]["path"].as_str().unwrap();
                uploaded.push(path.replace("${{ runner.temp }}", &env["RUNNER_TEMP"]));
            }
            continue;
        }
        if name.starts_with("Install spawnd") {
            continue;
        }
        let always = step["if"].as_str() == Some("always()");
        if failed.is_some() && !always {
            continue;
        }
        let run = step["run"].as_str().unwrap();
        let out = sh(who, &co, run, &env);
        if !out.status.success() && failed.is_none() {
            failed = Some(format!("step `{name}`: {}", show(&out)));
        }
        for line in std::fs::read_to_string(&github_env).unwrap().lines() {
            if let Some((k, v)) = line.split_once('=') {
                env.insert(k.to_string(), v.to_string());
            }
        }
    }
    if let Some(why) = failed {
        panic!("github {job} {who:?}: {why}");
    }
    assert_eq!(uploaded.len(), 1, "github {job}: one artifact upload");
    let results = PathBuf::from(&uploaded[0]);
    let labels: Vec<String> = ["install", "build", "test"]
        .iter()
        .map(|s| format!("4242-{s}"))
        .collect();
    judge(who, &format!("github {job}"), &co, &results, &labels);
}

/// Runs the GitLab job: its `variables` expanded as the runner does, the
/// `script` lines in one shell that stops at the first failing line, then
/// `after_script` in a shell of its own; `before_script` installs and is
/// left out.
fn gitlab_job(who: As) {
    let (dir, co) = checkout_with_manifests(who, "gitlab");
    let job = &recipes()["gitlab"]["test"];
    let mut env: BTreeMap<String, String> = [
        ("CI_PROJECT_DIR", co.display().to_string()),
        ("CI_JOB_ID", "77".to_string()),
        ("CI", "true".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (k, v) in job["variables"].as_object().unwrap() {
        let value = v
            .as_str()
            .unwrap()
            .replace("$CI_PROJECT_DIR", &env["CI_PROJECT_DIR"]);
        env.insert(k.clone(), value);
    }
    let lines = |key: &str| -> String {
        job[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let out = sh(who, &co, &lines("script"), &env);
    assert!(out.status.success(), "gitlab {who:?}: {}", show(&out));
    let after = sh(who, &co, &lines("after_script"), &env);
    assert!(
        after.status.success(),
        "gitlab after_script {who:?}: {}",
        show(&after)
    );
    let artifacts = job["artifacts"]["paths"].as_array().unwrap();
    assert_eq!(artifacts.len(), 1);
    let results = co.join(artifacts[0].as_str().unwrap());
    let labels: Vec<String> = ["install", "build", "test"]
        .iter()
        .map(|s| format!("77-{s}"))
        .collect();
    judge(who, "gitlab", &co, &results, &labels);
    assert!(dir.join("results/audit.jsonl").exists());
}

fn github_runner_job(who: As) {
    github_job(who, "test");
}

fn github_container_job(who: As) {
    github_job(who, "test-in-container");
}

macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod as_root { use super::*; $( #[test] fn $name() { super::$name(As::Root) } )* }
        mod as_nobody { use super::*; $( #[test] fn $name() { super::$name(As::Nobody) } )* }
    };
}

both!(
    shell_script,
    github_runner_job,
    github_container_job,
    gitlab_job
);
