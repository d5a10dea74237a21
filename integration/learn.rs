//! `spawnd learn` drafts a manifest from one observed run, and the draft
//! runs the same command under `spawnd run` with nothing else granted, as
//! root and as nobody: node, whoami, getent and a TLS client's CA store,
//! programs pinned under `exec = "declared"`, argv[0] as typed, PATH probes
//! left out, a toolchain the run cannot see refused with the fix (the real
//! CI steps are `learn_corpus.rs`). Judged from outside: the files the
//! second run leaves on the host and its output. `run --trace` names the
//! layer of each wall a program meets and none for the sandbox's own
//! files; Ctrl-C at a terminal gives the program SIGTERM.

use crate::harness;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use harness::{world, As};
use serde_json::Value;

/// `spawnd ARGS` as `who`, in `cwd`, with the world's config.
fn spawnd(who: As, cwd: &Path, args: &[&str]) -> Output {
    let w = world();
    let mut cmd = match who {
        As::Nobody => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&w.spawnd);
            c
        }
        _ => Command::new(&w.spawnd),
    };
    cmd.arg("--config")
        .arg(w.config(who))
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A fresh directory anyone may write, for one case.
fn fresh(name: &str) -> PathBuf {
    let dir = world().path(&format!("learn/{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for d in [world().path("learn"), dir.clone()] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    dir
}

/// Learns `command` in the workspace `ws`, then `reset`s the workspace
/// and runs the draft there; returns the draft and the second run's data.
fn learn_then_run(
    who: As,
    case: &str,
    ws: &Path,
    command: &[&str],
    reset: impl Fn(),
) -> (String, Value) {
    learn_with_then_run(who, case, ws, &[], command, reset)
}

/// [`learn_then_run`] with more `learn` flags (`--exec DIR`…).
fn learn_with_then_run(
    who: As,
    case: &str,
    ws: &Path,
    flags: &[&str],
    command: &[&str],
    reset: impl Fn(),
) -> (String, Value) {
    let drafts = fresh(&format!("drafts-{case}-{who:?}"));
    let draft = drafts.join("draft.toml");
    let mut args = vec!["learn", "--output", draft.to_str().unwrap()];
    args.extend_from_slice(flags);
    args.push("--");
    args.extend_from_slice(command);
    let learned = spawnd(who, ws, &args);
    assert!(
        learned.status.success() && draft.exists(),
        "{case} {who:?}: learn failed: {learned:?}"
    );
    let text = std::fs::read_to_string(&draft).unwrap();
    let lint = spawnd(who, ws, &["manifest", "lint", draft.to_str().unwrap()]);
    assert!(lint.status.success(), "{case}: lint: {lint:?}\n{text}");
    reset();
    let ran = spawnd(
        who,
        ws,
        &[
            "--json",
            "run",
            "--manifest",
            draft.to_str().unwrap(),
            "--op",
            "run",
            "--workspace",
            ws.to_str().unwrap(),
            "--mode",
            "write",
        ],
    );
    let v: Value = serde_json::from_slice(&ran.stdout)
        .unwrap_or_else(|e| panic!("{case}: {e}: {ran:?}\n{text}"));
    assert_eq!(v["ok"], true, "{case} {who:?}: {v}\n{text}");
    assert_eq!(v["data"]["exit_code"], 0, "{case} {who:?}: {v}\n{text}");
    (text, v["data"].clone())
}

fn stdout(data: &Value) -> String {
    data["stdout"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn node_runs_under_the_default_limits(who: As) {
    let ws = fresh(&format!("node-{who:?}"));
    let (_, data) = learn_then_run(who, "node", &ws, &["node", "-e", "console.log(6*7)"], || {});
    assert_eq!(stdout(&data).trim(), "42", "{data}");
}

fn identity_names_and_the_ca_store(who: As) {
    let ws = fresh(&format!("ids-{who:?}"));
    let (_, whoami) = learn_then_run(who, "whoami", &ws, &["whoami"], || {});
    assert!(!stdout(&whoami).trim().is_empty(), "{whoami}");
    let (_, hosts) = learn_then_run(who, "getent", &ws, &["getent", "hosts", "localhost"], || {});
    assert!(
        stdout(&hosts).contains("127.0.0.1") || stdout(&hosts).contains("::1"),
        "{hosts}"
    );
    let (_, tls) = learn_then_run(
        who,
        "ca-store",
        &ws,
        &[
            "python3",
            "-c",
            "import ssl; print(ssl.create_default_context().cert_store_stats()['x509_ca'] > 0)",
        ],
        || {},
    );
    assert_eq!(stdout(&tls).trim(), "True", "{tls}");
}

/// `run --trace` names each wall: a file outside every scope (the mount
/// namespace), executing from a write scope (noexec), and a call the
/// seccomp filter refuses.
fn refusals_name_their_layer(who: As) {
    let ws = fresh(&format!("walls-{who:?}"));
    let outside = fresh(&format!("outside-{who:?}"));
    std::fs::write(outside.join("secret.txt"), "x").unwrap();
    std::fs::set_permissions(
        outside.join("secret.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let manifest = ws.join("../walls.toml");
    let code = format!(
        "import ctypes, shutil, subprocess\ntry: open('{}')\nexcept OSError as e: print(e)\nshutil.copy('/usr/bin/true', 'mytrue')\ntry: subprocess.run(['./mytrue'])\nexcept OSError as e: print(e)\nprint(ctypes.CDLL(None).unshare(0x20000))\n",
        outside.join("secret.txt").display()
    );
    std::fs::write(
        &manifest,
        format!(
            "[connector]\nname = \"local://test/walls\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/python3\" }}]\nfs_write = [\"{{workspace}}\"]\ncwd = \"{{workspace}}\"\n[capabilities.spawn.operations.walls]\nargv = [\"python3\", \"-c\", {}]\nmode = \"write\"\n",
            serde_json::to_string(&code).unwrap()
        ),
    )
    .unwrap();
    let pin = spawnd(who, &ws, &["manifest", "pin", manifest.to_str().unwrap()]);
    assert!(pin.status.success(), "{pin:?}");
    let run_args = [
        "run",
        "--manifest",
        manifest.to_str().unwrap(),
        "--op",
        "walls",
        "--workspace",
        ws.to_str().unwrap(),
        "--mode",
        "write",
        "--trace",
    ];
    let json_args: Vec<&str> = std::iter::once("--json").chain(run_args).collect();
    let out = spawnd(who, &ws, &json_args);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let refusals = v["data"]["trace"]["refusals"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .clone();
    let find = |layer: &str, needle: &str| {
        refusals.iter().any(|r| {
            r["layer"] == layer
                && (r["path"].as_str().unwrap_or_default().contains(needle)
                    || r["call"].as_str().unwrap_or_default() == needle)
        })
    };
    assert!(find("mount_namespace", "secret.txt"), "{refusals:?}");
    assert!(find("noexec", "mytrue"), "{refusals:?}");
    assert!(find("seccomp", "unshare"), "{refusals:?}");
    // The program saw what the layers say.
    let text = stdout(&v["data"]);
    assert!(
        text.contains("No such file") && text.contains("Permission denied"),
        "{text}"
    );
    // Without --json, each refusal is a line on stderr naming its layer and fix.
    let human = spawnd(who, &ws, &run_args);
    let err = String::from_utf8_lossy(&human.stderr);
    assert!(
        err.contains("refused by noexec") && err.contains("add it to fs_exec"),
        "{err}"
    );
    assert!(
        err.contains("refused by mount_namespace") && err.contains("to fs_read"),
        "{err}"
    );
}

/// What a run executed besides its program is pinned in `also_runs`, and
/// the draft allows only those (`exec = "declared"`): it reruns as learned,
/// and the same operation asked to run a program it never ran is refused.
fn learned_programs_are_pinned_and_rerun_under_exec_declared(who: As) {
    let ws = fresh(&format!("declared-{who:?}"));
    let script = "id -u > uid.txt && mkdir made";
    let (draft, data) = learn_then_run(who, "declared", &ws, &["sh", "-c", script], || {
        std::fs::remove_file(ws.join("uid.txt")).unwrap();
        std::fs::remove_dir(ws.join("made")).unwrap();
    });
    assert!(draft.lines().any(|l| l == "exec = \"declared\""), "{draft}");
    for program in ["/usr/bin/id", "/usr/bin/mkdir"] {
        let hash = String::from_utf8(
            Command::new(&world().spawnd)
                .args(["hash", program])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let hash = hash
            .split_whitespace()
            .find(|t| t.starts_with("sha256:"))
            .unwrap();
        assert!(
            draft.contains(&format!("{{ path = \"{program}\", hash = \"{hash}\" }}")),
            "{program} not pinned: {draft}"
        );
    }
    assert!(
        ws.join("uid.txt").exists() && ws.join("made").is_dir(),
        "{data}"
    );
    let execute = &data["isolation"]["landlock"]["execute"];
    assert_eq!(execute["policy"], "declared", "{data}");
    let granted = execute["files"].to_string();
    assert!(
        granted.contains("/usr/bin/mkdir") && granted.contains("also_runs"),
        "{execute}"
    );
    // The same operation, asked to run a program the learned run did not.
    let drafts = world().path(&format!("learn/drafts-declared-{who:?}/draft.toml"));
    let param = draft
        .lines()
        .find_map(|l| {
            l.strip_prefix("[capabilities.spawn.operations.run.params.")?
                .strip_suffix(']')
        })
        .unwrap_or_else(|| panic!("no param: {draft}"));
    let other = spawnd(
        who,
        &ws,
        &[
            "--json",
            "run",
            "--manifest",
            drafts.to_str().unwrap(),
            "--op",
            "run",
            "--workspace",
            ws.to_str().unwrap(),
            "--mode",
            "write",
            "--arg",
            &format!("{param}=touch touched || echo refused $?"),
        ],
    );
    let v: Value =
        serde_json::from_slice(&other.stdout).unwrap_or_else(|e| panic!("{e}: {other:?}"));
    assert!(
        !ws.join("touched").exists(),
        "an unlearned program ran: {v}"
    );
    assert!(stdout(&v["data"]).contains("refused 126"), "{v}");
}

/// argv[0] stays as typed, in the learned run and in the draft.
fn argv0_stays_as_typed(who: As) {
    let ws = fresh(&format!("argv0-{who:?}"));
    let (draft, data) = learn_then_run(
        who,
        "argv0",
        &ws,
        &["/bin/sh", "-c", "tr '\\0' ' ' < /proc/$$/cmdline"],
        || {},
    );
    assert!(draft.contains("argv = [\"/bin/sh\", "), "{draft}");
    assert!(stdout(&data).starts_with("/bin/sh -c "), "{data}");
}

/// The trace reads the path of every call of a simple run: init starting
/// the program (not dumpable, so an unprivileged spawnd may not read it)
/// is no gap to review.
fn a_simple_run_leaves_no_call_unread(who: As) {
    let ws = fresh(&format!("unread-{who:?}"));
    let draft = fresh(&format!("unread-draft-{who:?}")).join("draft.toml");
    let out = spawnd(
        who,
        &ws,
        &[
            "learn",
            "--output",
            draft.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "id -u > uid.txt",
        ],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(!said.contains("could not read the path"), "{said}");
}

/// A search along PATH that finds nothing is no program run: the draft
/// lists none of those attempts and keeps `exec = "declared"`, even for
/// an attempt in the workspace (where no pin would hold).
fn only_executions_that_found_their_program_are_listed(who: As) {
    let ws = fresh(&format!("probes-{who:?}"));
    // `env` searches PATH with execvp: an execve at each entry.
    let script = "PATH=$PWD/bin:/usr/bin:/bin; env id -u > uid.txt";
    let (draft, _) = learn_then_run(who, "probes", &ws, &["sh", "-c", script], || {
        std::fs::remove_file(ws.join("uid.txt")).unwrap();
    });
    assert!(!draft.contains(&format!("{}/bin", ws.display())), "{draft}");
    assert!(draft.lines().any(|l| l == "exec = \"declared\""), "{draft}");
    assert!(ws.join("uid.txt").exists());
}

/// A toolchain whose tree the run cannot see (a copy of `echo` in a 0700
/// prefix under the host's /tmp, run through a pyenv-like shim that execs
/// it by its absolute path): learn refuses before running, naming the
/// program, why and the fix (`--exec PREFIX`; for a root caller, uid 65534
/// must be able to read it); with the fix it learns, grants the prefix,
/// and the draft reruns with no `tmp_exec` review.
fn a_hidden_toolchain_is_refused_with_the_fix(who: As) {
    let base = fresh(&format!("toolchain-{who:?}"));
    let prefix = base.join("tool");
    let bin = prefix.join("versions/1/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(prefix.join("shims")).unwrap();
    std::fs::copy("/usr/bin/echo", bin.join("mytool")).unwrap();
    let shim = prefix.join("shims/mytool");
    std::fs::write(
        &shim,
        format!("#!/bin/sh\nexec {} \"$@\"\n", bin.join("mytool").display()),
    )
    .unwrap();
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&prefix, std::fs::Permissions::from_mode(0o700)).unwrap();
    if who == As::Nobody {
        let owned = Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(&prefix)
            .status()
            .unwrap();
        assert!(owned.success());
    }
    let ws = fresh(&format!("toolchain-ws-{who:?}"));
    let draft = base.join("draft.toml");
    let learn = |flags: &[&str]| {
        let mut args = vec!["learn", "--output", draft.to_str().unwrap()];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", shim.to_str().unwrap(), "hello"]);
        spawnd(who, &ws, &args)
    };
    let hidden = learn(&[]);
    let err = String::from_utf8_lossy(&hidden.stderr);
    assert_eq!(hidden.status.code(), Some(2), "{hidden:?}");
    assert!(
        err.contains(shim.to_str().unwrap())
            && err.contains("the sandbox has its own /tmp")
            && err.contains(&format!("--exec {}", prefix.display())),
        "{err}"
    );
    assert!(!draft.exists());
    let exec_flag = ["--exec", prefix.to_str().unwrap()];
    if who == As::Root {
        // Shown, but its identity (nobody) cannot enter the 0700 prefix.
        let denied = learn(&exec_flag);
        let err = String::from_utf8_lossy(&denied.stderr);
        assert_eq!(denied.status.code(), Some(2), "{denied:?}");
        assert!(
            err.contains(&format!(
                "uid 65534 (the run's identity) cannot enter {}",
                prefix.display()
            )) && err.contains("run_as"),
            "{err}"
        );
        std::fs::set_permissions(&prefix, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (text, data) = learn_with_then_run(
        who,
        "toolchain",
        &ws,
        &exec_flag,
        &[shim.to_str().unwrap(), "hello"],
        || {},
    );
    assert_eq!(stdout(&data).trim(), "hello", "{data}\n{text}");
    assert!(
        text.contains(&format!("fs_exec = [\"{}\"]", prefix.display())),
        "{text}"
    );
    assert!(
        text.contains(&bin.join("mytool").display().to_string()),
        "{text}"
    );
    assert!(!text.contains("tmp_exec"), "{text}");
}

macro_rules! both {
    ($($name:ident),*) => {
        mod as_root { use super::*; $( #[test] fn $name() { super::$name(As::Root) } )* }
        mod as_nobody { use super::*; $( #[test] fn $name() { super::$name(As::Nobody) } )* }
    };
}

both!(
    node_runs_under_the_default_limits,
    identity_names_and_the_ca_store,
    refusals_name_their_layer,
    learned_programs_are_pinned_and_rerun_under_exec_declared,
    argv0_stays_as_typed,
    a_simple_run_leaves_no_call_unread,
    only_executions_that_found_their_program_are_listed,
    a_hidden_toolchain_is_refused_with_the_fix,
    ctrl_c_at_a_terminal_gives_the_program_sigterm,
    trace_reports_no_refusal_for_the_sandboxs_own_files
);

/// Learning writes for real, so it refuses a draft inside what the command
/// may write (it could plant a link for the draft to be written through)
/// and a workspace holding a home or `/`; and a draft never lists what the
/// command only tried to write elsewhere.
#[test]
fn learn_refuses_a_draft_in_its_workspace_and_a_home_as_workspace() {
    let ws = fresh("guards");
    let inside = spawnd(
        As::Root,
        &ws,
        &["learn", "--output", "draft.toml", "--", "true"],
    );
    assert_eq!(inside.status.code(), Some(2), "{inside:?}");
    assert!(String::from_utf8_lossy(&inside.stderr).contains("keep the draft outside"));
    let root = spawnd(
        As::Root,
        Path::new("/"),
        &[
            "learn",
            "--output",
            ws.join("d.toml").to_str().unwrap(),
            "--",
            "true",
        ],
    );
    assert_eq!(root.status.code(), Some(2), "{root:?}");
    assert!(!ws.join("d.toml").exists());
}

/// Drives `argv` on a pseudo-terminal, as a user at a terminal would: once
/// `ready` exists, types Ctrl-C; returns the exit code and what the
/// terminal showed.
fn ctrl_c_on_a_terminal(argv: &[&std::ffi::OsStr], ready: &Path) -> (i32, String) {
    const DRIVER: &str = r#"
import os, pty, select, sys, time
ready, argv = sys.argv[1], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)
shown = b""
def read_for(seconds):
    global shown
    end = time.time() + seconds
    while time.time() < end:
        if select.select([fd], [], [], 0.05)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                return
            if not chunk:
                return
            shown += chunk
deadline = time.time() + 30
while not os.path.exists(ready) and time.time() < deadline:
    read_for(0.05)
read_for(0.2)
os.write(fd, b"\x03")
read_for(10)
_, status = os.waitpid(pid, 0)
sys.stdout.write(str(os.waitstatus_to_exitcode(status)) + "\n")
sys.stdout.write(shown.decode(errors="replace"))
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .arg(ready)
        .args(argv)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (code, shown) = text
        .split_once('\n')
        .unwrap_or_else(|| panic!("the driver failed: {out:?}"));
    (code.parse().unwrap(), shown.to_string())
}

/// Ctrl-C at a terminal reaches spawnd alone (the sandbox is outside the
/// terminal's process group): the program gets SIGTERM, never the
/// terminal's SIGINT, and spawnd exits 130 with `interrupted_by: SIGINT`.
fn ctrl_c_at_a_terminal_gives_the_program_sigterm(who: As) {
    let ws = fresh(&format!("ctrl-c-{who:?}"));
    let manifest = world().path(&format!("learn/ctrl-c-{who:?}.toml"));
    let script = "trap 'echo INT >> got' INT; trap 'echo TERM >> got; exit 0' TERM; : > ready; while :; do sleep 0.05; done";
    std::fs::write(
        &manifest,
        format!(
            "[connector]\nname = \"local://test/ctrl-c\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"/bin/sh\" }}]\nfs_write = [\"{{workspace}}\"]\ncwd = \"{{workspace}}\"\n[capabilities.spawn.operations.wait]\nargv = [\"sh\", \"-c\", {}]\nmode = \"write\"\n",
            serde_json::to_string(script).unwrap()
        ),
    )
    .unwrap();
    let pin = spawnd(who, &ws, &["manifest", "pin", manifest.to_str().unwrap()]);
    assert!(pin.status.success(), "{pin:?}");
    let w = world();
    let config = w.config(who);
    let mut argv: Vec<&std::ffi::OsStr> = Vec::new();
    if who == As::Nobody {
        argv.extend(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ]
            .map(std::ffi::OsStr::new),
        );
    }
    argv.extend([
        w.spawnd.as_os_str(),
        "--config".as_ref(),
        config.as_os_str(),
    ]);
    argv.extend(
        ["--json", "run", "--manifest"]
            .map(std::ffi::OsStr::new)
            .into_iter()
            .chain([manifest.as_os_str()])
            .chain(["--op", "wait", "--workspace"].map(std::ffi::OsStr::new))
            .chain([ws.as_os_str()])
            .chain(["--mode", "write"].map(std::ffi::OsStr::new)),
    );
    let (code, shown) = ctrl_c_on_a_terminal(&argv, &ws.join("ready"));
    let got = std::fs::read_to_string(ws.join("got")).unwrap_or_default();
    assert_eq!(got, "TERM\n", "{who:?}: the program got {got:?}\n{shown}");
    assert_eq!(code, 130, "{shown}");
    let json = &shown[shown.find('{').unwrap_or(0)..=shown.rfind('}').unwrap_or(0)];
    let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {shown}"));
    assert_eq!(v["data"]["interrupted_by"], "SIGINT", "{v}");
}

/// `run --trace` knows the files the sandbox writes for itself: reading
/// `/etc/passwd` and `/etc/hosts` meets no wall, and nothing suggests
/// granting the host's.
fn trace_reports_no_refusal_for_the_sandboxs_own_files(who: As) {
    let ws = fresh(&format!("own-files-{who:?}"));
    let manifest = world().path(&format!("learn/own-files-{who:?}.toml"));
    std::fs::write(
        &manifest,
        "[connector]\nname = \"local://test/own-files\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/cat\" }]\n[capabilities.spawn.operations.cat]\nargv = \"cat /etc/passwd /etc/hosts\"\n",
    )
    .unwrap();
    let pin = spawnd(who, &ws, &["manifest", "pin", manifest.to_str().unwrap()]);
    assert!(pin.status.success(), "{pin:?}");
    let run = [
        "run",
        "--manifest",
        manifest.to_str().unwrap(),
        "--op",
        "cat",
        "--trace",
    ];
    let json: Vec<&str> = std::iter::once("--json").chain(run).collect();
    let out = spawnd(who, &ws, &json);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(v["data"]["exit_code"], 0, "{v}");
    assert!(stdout(&v["data"]).contains("localhost"), "{v}");
    assert_eq!(v["data"]["trace"]["refusals"], serde_json::json!([]), "{v}");
    let human = spawnd(who, &ws, &run);
    let err = String::from_utf8_lossy(&human.stderr);
    assert!(!err.contains("refused by"), "{err}");
}
