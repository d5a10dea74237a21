//! What a sandboxed program can do to the host files and services it can
//! see, beyond what its scopes grant: own them through host uid 0, change
//! the modes and times of device nodes, of its `--stdin-file` or of its own
//! `#!` script, undo a read-only scope nested in a writable one, or ask the
//! daemon for another connector's spawn. Each is judged from outside: the
//! host file's mode and ctime, lint's and run's answers, the daemon's reply
//! and its audit log. With spawnd as root, as nobody and through the
//! spawner where it applies.

use crate::{daemon_harness, harness};

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use daemon_harness::{Daemon, CONNECTOR};
use harness::{world, As};
use serde_json::{json, Value};

/// A host file's mode and change time: what a chmod, chown or utime moves.
#[derive(Debug, PartialEq, Eq)]
struct Stamp {
    mode: u32,
    ctime: (i64, i64),
}

fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).unwrap();
    Stamp {
        mode: m.mode() & 0o7777,
        ctime: (m.ctime(), m.ctime_nsec()),
    }
}

fn uid_of(who: As) -> u32 {
    if who.is_root() {
        0
    } else {
        65534
    }
}

fn chown_to(path: &Path, who: As) {
    let id = uid_of(who);
    std::os::unix::fs::chown(path, Some(id), Some(id)).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A directory of the test world for one test and identity.
fn scratch(name: &str, who: As) -> PathBuf {
    let dir = world().path(&format!("outside/{name}-{who:?}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    chmod(&dir, 0o755);
    dir
}

/// Writes a manifest (connector header added) readable by every identity.
fn manifest(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("manifest.toml");
    std::fs::write(
        &path,
        format!(
            "[connector]\nname = \"local://test/host-authority\"\nversion = \"1.0.0\"\n\n{body}"
        ),
    )
    .unwrap();
    chmod(&path, 0o644);
    path
}

/// `spawnd run --json` of `op` in `manifest` as `who`.
fn run(who: As, manifest: &Path, op: &str, args: &[(&str, &str)], extra: &[&str]) -> Output {
    let w = world();
    let mut cmd = who.spawnd_run(&w.spawnd);
    cmd.args(["--json", "--manifest"])
        .arg(manifest)
        .args(["--op", op, "--config"])
        .arg(w.config(who));
    for (k, v) in args {
        cmd.arg("--arg").arg(format!("{k}={v}"));
    }
    cmd.args(extra)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir(&w.dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "spawnd printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn stdout_text(v: &Value) -> &str {
    v["data"]["stdout"]["text"].as_str().unwrap_or("")
}

const PYTHON_OP: &str = r#"[capabilities.spawn.operations.py]
argv = ["python3", "-I", "-c", "{code}"]
[capabilities.spawn.operations.py.params.code]
max_len = 8192
"#;

macro_rules! for_each {
    ($($name:ident: [$($who:ident),+] => $body:expr;)*) => {
        $( mod $name {
            use super::*;
            $( #[test] #[allow(non_snake_case)] fn $who() { let f: fn(As) = $body; f(As::$who) } )+
        } )*
    };
}

for_each! {
    // A root caller's program runs as 65534 (no run_as set), in cgroup mode
    // too: a root-owned copy of python3 cannot make itself set-uid root on
    // the host through /proc/self/exe.
    a_root_callers_program_never_runs_as_host_uid_0: [Root, RootViaSpawner] => |who| {
        let dir = scratch("root-exe", who);
        let python = dir.join("python3");
        std::fs::copy("/usr/bin/python3", &python).unwrap();
        chmod(&python, 0o755);
        let m = manifest(&dir, &format!(
            "[capabilities.spawn]\nprograms = [{{ path = \"{}\" }}]\n\n{PYTHON_OP}",
            python.display()
        ));
        let before = stamp(&python);
        let code = "import os\nprint(os.getuid(), os.geteuid(), os.getgid())\ntry:\n    os.fchmod(os.open('/proc/self/exe', os.O_RDONLY), 0o4755)\n    print('ESCAPED')\nexcept OSError as e:\n    print('refused', e.errno)\n";
        let v = json_of(&run(who, &m, "py", &[("code", code)], &[]));
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["data"]["isolation"]["uid"], 65534, "{v}");
        assert!(stdout_text(&v).starts_with("65534 65534 65534\n"), "{v}");
        assert!(!stdout_text(&v).contains("ESCAPED"), "{v}");
        assert_eq!(stamp(&python), before, "the host's copy of python3 was changed");
    };

    // A program the child's identity owns is executed from a read-only
    // bind of itself: /proc/self/exe cannot change the host file's mode or
    // times (its bytes: Landlock and ETXTBSY).
    a_program_cannot_change_its_own_host_binary: [Root, Nobody, RootViaSpawner] => |who| {
        let dir = scratch("own-exe", who);
        let python = dir.join("python3");
        std::fs::copy("/usr/bin/python3", &python).unwrap();
        std::os::unix::fs::chown(&python, Some(65534), Some(65534)).unwrap();
        chmod(&python, 0o755);
        let m = manifest(&dir, &format!(
            "[capabilities.spawn]\nprograms = [{{ path = \"{}\" }}]\n\n{PYTHON_OP}",
            python.display()
        ));
        let before = stamp(&python);
        let code = "import os\nprint(os.readlink('/proc/self/exe'))\nfor name, f in [('chmod', lambda: os.chmod('/proc/self/exe', 0o777)), ('utime', lambda: os.utime('/proc/self/exe')), ('chmod-path', lambda: os.chmod(os.readlink('/proc/self/exe'), 0o777))]:\n    try:\n        f(); print('ESCAPED', name)\n    except OSError as e:\n        print('refused', name, e.errno)\n";
        let v = json_of(&run(who, &m, "py", &[("code", code)], &[]));
        assert_eq!(v["data"]["exit_code"], 0, "{v}");
        assert!(stdout_text(&v).starts_with(&format!("{}\n", python.display())), "{v}");
        assert!(!stdout_text(&v).contains("ESCAPED"), "{v}");
        assert_eq!(stamp(&python), before, "the host's program file was changed");
    };

    // The /dev nodes are the host's own inodes, bound read-only: usable,
    // but their mode and times cannot change.
    device_nodes_are_usable_but_their_host_inodes_cannot_change: [Root, Nobody, RootViaSpawner] => |who| {
        let before = stamp(Path::new("/dev/full"));
        let null_before = stamp(Path::new("/dev/null"));
        // Descriptor 0 is /dev/null when no stdin is given: the sandbox's own.
        let code = "import os\nfor name, f in [('chmod', lambda: os.chmod('/dev/full', 0o666)), ('utime', lambda: os.utime('/dev/full')), ('futimens0', lambda: os.utime(0))]:\n    try:\n        f(); print('ESCAPED', name)\n    except OSError as e:\n        print('refused', name, e.errno)\nprint('wrote', os.write(os.open('/dev/null', os.O_WRONLY), b'x'))\nprint('read', len(os.read(os.open('/dev/zero', os.O_RDONLY), 4)))\n";
        let out = world().run(who, "py", &[("code", code)], &[]);
        let v = json_of(&out);
        let text = stdout_text(&v);
        assert!(!text.contains("ESCAPED"), "{v}");
        assert!(text.contains("wrote 1\nread 4\n"), "{v}");
        assert_eq!(stamp(Path::new("/dev/full")), before, "the host's /dev/full was changed");
        assert_eq!(stamp(Path::new("/dev/null")), null_before, "the host's /dev/null was touched through fd 0");
    };

    // `--stdin-file` reaches the program through a pipe, never as the host
    // file's descriptor (through which fchmod and futimens would work).
    the_stdin_file_cannot_be_changed_through_descriptor_0: [Root, Nobody, RootViaSpawner] => |who| {
        let dir = scratch("stdin-file", who);
        let file = dir.join("input.txt");
        std::fs::write(&file, "fed through stdin\n").unwrap();
        chown_to(&file, who);
        chmod(&file, 0o644);
        let before = stamp(&file);
        let code = "import os, sys\nfor name, f in [('fchmod', lambda: os.fchmod(0, 0o6777)), ('futimens', lambda: os.utime(0))]:\n    try:\n        f()\n    except OSError as e:\n        print('refused', name, e.errno)\nprint(sys.stdin.read(), end='')\n";
        let v = json_of(&run(who, &world().manifest, "py", &[("code", code)], &["--stdin-file", &file.display().to_string()]));
        assert!(stdout_text(&v).ends_with("fed through stdin\n"), "{v}");
        assert_eq!(stamp(&file), before, "the host's --stdin-file was changed");
    };

    // A `#!` script runs from a sealed copy: bound read-only at its own
    // path where that path is the sandbox's own (outside every scope), else
    // read by its interpreter through /dev/fd/3 (here: in a read scope).
    // Neither its path nor descriptor 3 changes or writes the host's script.
    a_script_cannot_change_its_own_host_file: [Root, Nobody, RootViaSpawner] => |who| {
        let dir = scratch("script", who);
        let scope = dir.join("scope");
        std::fs::create_dir(&scope).unwrap();
        chmod(&scope, 0o755);
        let text = "#!/usr/bin/python3\nimport os, sys\nprint('argv0', sys.argv[0])\nfor name, f in [('fchmod', lambda: os.fchmod(3, 0o777)), ('futimens', lambda: os.utime(3)), ('write', lambda: os.write(os.open('/dev/fd/3', os.O_WRONLY), b'x')), ('chmod-path', lambda: os.chmod(sys.argv[0], 0o777)), ('utime-path', lambda: os.utime(sys.argv[0])), ('write-path', lambda: os.write(os.open(sys.argv[0], os.O_WRONLY), b'x'))]:\n    try:\n        f()\n        print('changed', name)\n    except OSError as e:\n        print('refused', name, e.errno)\nprint('reads itself', open(sys.argv[0]).read().startswith('#!/usr/bin/python3'))\n";
        let own = dir.join("own.py");
        let scoped = scope.join("scoped.py");
        for script in [&own, &scoped] {
            std::fs::write(script, text).unwrap();
            chown_to(script, who);
            chmod(script, 0o755);
        }
        let m = manifest(&dir, &format!(
            "[capabilities.spawn]\nprograms = [{{ path = \"{}\" }}, {{ path = \"{}\" }}]\nfs_read = [\"{}\"]\n\n[capabilities.spawn.operations.own]\nargv = \"own.py\"\n[capabilities.spawn.operations.scoped]\nargv = \"scoped.py\"\n",
            own.display(), scoped.display(), scope.display()
        ));
        for (op, script, argv0) in [("own", &own, own.display().to_string()), ("scoped", &scoped, "/dev/fd/3".to_string())] {
            let before = stamp(script);
            let v = json_of(&run(who, &m, op, &[], &[]));
            assert_eq!(v["data"]["exit_code"], 0, "{v}");
            let said = stdout_text(&v);
            assert!(said.starts_with(&format!("argv0 {argv0}\n")), "{v}");
            assert!(said.contains("reads itself True"), "{v}");
            assert!(said.contains("refused write "), "{v}");
            assert!(said.contains("refused write-path"), "{v}");
            if op == "own" {
                // Its own path is a read-only bind, and no descriptor 3 is open.
                for name in ["fchmod", "futimens", "chmod-path", "utime-path"] {
                    assert!(said.contains(&format!("refused {name} ")), "{name}: {v}");
                }
            }
            assert_eq!(stamp(script), before, "the host's script was changed");
            assert_eq!(std::fs::read_to_string(script).unwrap(), text);
        }
    };

    // Init is a clone of spawnd: its command line (the config path, `--env`
    // values) must not be readable at /proc/1/cmdline.
    inits_command_line_shows_nothing_of_spawnds: [Root, Nobody, RootViaSpawner] => |who| {
        let code = "print(repr(open('/proc/1/cmdline', 'rb').read().rstrip(bytes(1))))";
        let out = world().run(who, "py", &[("code", code)], &["--env", "SENTINEL=sentinel-value-on-the-command-line"]);
        let v = json_of(&out);
        assert_eq!(stdout_text(&v), "b'spawnd-init'\n", "{v}");
    };

    // A read-only scope inside a writable one could be renamed away with a
    // directory above it: lint and run refuse the layout, and nothing runs.
    a_read_scope_nested_in_a_write_scope_is_refused: [Root, Nobody] => |who| {
        let dir = scratch("nested", who);
        let repo = dir.join("repo");
        std::fs::create_dir_all(repo.join(".git/hooks")).unwrap();
        for d in [&repo, &repo.join(".git"), &repo.join(".git/hooks")] {
            chown_to(d, who);
        }
        let m = manifest(&dir, &format!(
            "[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/python3\" }}]\nfs_write = [\"{repo}\"]\nfs_read = [\"{repo}/.git/hooks\"]\n\n{PYTHON_OP}",
            repo = repo.display()
        ));
        let lint = Command::new(&world().spawnd).args(["manifest", "lint"]).arg(&m).output().unwrap();
        let said = String::from_utf8_lossy(&lint.stderr);
        assert_eq!(lint.status.code(), Some(4), "{said}");
        assert!(said.contains("lies inside the writable scope"), "{said}");
        assert!(said.contains("capabilities.spawn.fs_read"), "{said}");
        let code = "import os\nos.rename('.git', '.git-moved')\nos.makedirs('.git/hooks')\nopen('.git/hooks/pre-commit', 'w').write('ESCAPED')\n";
        let out = run(who, &m, "py", &[("code", code)], &["--cwd", &repo.display().to_string()]);
        assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stdout));
        assert!(repo.join(".git/hooks").is_dir() && !repo.join(".git-moved").exists());
        assert!(!repo.join(".git/hooks/pre-commit").exists());
    };
}

/// A peer in another user namespace — mapped to host root, as a rootless
/// container's or a sandbox's could be — gets nothing from being uid 0
/// there: refused as `caller_not_allowed`, and audited, while the same
/// request from the daemon's own namespace runs.
#[test]
fn the_daemon_refuses_a_peer_in_another_user_namespace() {
    let d = Daemon::start("userns-peer", "");
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "spawn_op", "params": {"connector": CONNECTOR, "op": "true", "args": {}}});
    let client = format!(
        "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.connect({socket:?})\ns.sendall({line:?}.encode() + b'\\n')\nprint(s.makefile().readline(), end='')\n",
        socket = d.socket.display().to_string(),
        line = request.to_string(),
    );
    let answer = |wrap: &[&str]| -> Value {
        let out = Command::new(wrap[0])
            .args(&wrap[1..])
            .args(["/usr/bin/python3", "-c", &client])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    };
    let here = answer(&["env"]);
    assert!(here["result"]["handle"].is_string(), "{here}");
    let foreign = answer(&["unshare", "--user", "--map-root-user"]);
    assert_eq!(foreign["error"]["code"], -32001, "{foreign}");
    assert_eq!(
        foreign["error"]["data"]["reason"], "caller_not_allowed",
        "{foreign}"
    );
    let granted = foreign["error"]["data"]["granted"].to_string();
    assert!(granted.contains("own user namespace"), "{foreign}");
    assert!(daemon_harness::audit_has(
        &d.audit,
        &["caller_not_allowed", "\"uid\":0"]
    ));
}

/// The confused deputy: a sandboxed program that can reach the daemon's
/// socket (here granted outright with `unix_sockets`) asks it for a spawn
/// of a connector its caller may use. The daemon sees a peer in another
/// user namespace and refuses; no spawn of that connector is recorded for
/// it. The same request from the host's namespace, as the same uid, runs.
/// Also with a daemon that may not look at other users' namespaces (no
/// `CAP_SYS_PTRACE`, as under the shipped unit): it compares their id maps.
#[test]
fn a_sandboxed_program_gets_no_spawn_out_of_the_daemon() {
    a_sandboxed_program_gets_no_spawn_out_of(&[], "deputy");
}

#[test]
fn a_sandboxed_program_gets_no_spawn_out_of_a_daemon_without_ptrace_access() {
    a_sandboxed_program_gets_no_spawn_out_of(
        &["setpriv".into(), "--bounding-set=-sys_ptrace".into()],
        "deputy-no-ptrace",
    );
}

fn a_sandboxed_program_gets_no_spawn_out_of(wrap: &[String], name: &str) {
    let d = Daemon::start_under(
        name,
        &format!("[[access]]\nconnector = {CONNECTOR:?}\nuids = [65534]\n"),
        &[],
        wrap,
    );
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "spawn_op", "params": {"connector": CONNECTOR, "op": "true", "args": {}}});
    let client = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({socket:?})\ns.sendall({line:?}.encode() + b'\\n')\nprint(s.makefile().readline(), end='')\n",
        socket = d.socket.display().to_string(),
        line = request.to_string(),
    );
    for who in [As::Root, As::Nobody, As::RootViaSpawner] {
        let dir = scratch(name, who);
        let m = manifest(
            &dir,
            &format!(
                "[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/python3\" }}]\nunix_sockets = [\"{}\"]\n\n{PYTHON_OP}",
                d.socket.display()
            ),
        );
        let before = std::fs::read_to_string(&d.audit)
            .unwrap_or_default()
            .lines()
            .count();
        let v = json_of(&run(who, &m, "py", &[("code", &client)], &[]));
        let answer: Value = serde_json::from_str(stdout_text(&v))
            .unwrap_or_else(|e| panic!("{who:?}: no answer from the daemon ({e}): {v}"));
        assert_eq!(
            answer["error"]["data"]["reason"], "caller_not_allowed",
            "{who:?}: {answer}"
        );
        let log = std::fs::read_to_string(&d.audit).unwrap_or_default();
        let new: Vec<&str> = log.lines().skip(before).collect();
        assert!(
            !new.iter().any(|l| l.contains("\"kind\":\"decision\"")),
            "{who:?}: the daemon decided a spawn for a sandboxed peer: {new:?}"
        );
    }
    // The same uid from the daemon's own namespace may.
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            &client,
        ])
        .output()
        .unwrap();
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(answer["result"]["handle"].is_string(), "{answer}");
}

/// A scope holding a socket reaches nothing by itself (socket(AF_UNIX) is
/// refused), but lint says it is there, and says what `unix_sockets` grants.
#[test]
fn lint_names_sockets_in_scopes_and_what_unix_sockets_grants() {
    let dir = scratch("lint-sockets", As::Root);
    let scope = dir.join("scope");
    std::fs::create_dir_all(scope.join("deep")).unwrap();
    let _listener =
        std::os::unix::net::UnixListener::bind(scope.join("deep/service.sock")).unwrap();
    let lint = |body: &str| {
        let m = manifest(&dir, body);
        let out = Command::new(&world().spawnd)
            .args(["manifest", "lint"])
            .arg(&m)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let plain = lint(&format!(
        "[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/python3\" }}]\nfs_read = [\"{}\"]\n\n{PYTHON_OP}",
        scope.display()
    ));
    assert!(
        plain.contains("holds unix sockets") && plain.contains("service.sock"),
        "{plain}"
    );
    let granted = lint(&format!(
        "[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/python3\" }}]\nunix_sockets = [\"{}\"]\n\n{PYTHON_OP}",
        scope.join("deep/service.sock").display()
    ));
    assert!(granted.contains("may create unix sockets"), "{granted}");
    // explain says so too, where it used to promise "no network" alone.
    let m = dir.join("manifest.toml");
    let explained = Command::new(&world().spawnd)
        .args(["manifest", "explain"])
        .arg(&m)
        .output()
        .unwrap();
    let explained = String::from_utf8_lossy(&explained.stdout);
    assert!(
        explained.contains("MAY connect to the unix sockets"),
        "{explained}"
    );
    assert!(
        explained.contains("no host services but the unix sockets listed above"),
        "{explained}"
    );
    // Without the grant, the sandboxed program cannot even make the socket.
    let m = manifest(&dir, &format!(
        "[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/python3\" }}]\nfs_read = [\"{}\"]\n\n{PYTHON_OP}",
        scope.display()
    ));
    let code = format!("import socket\ntry:\n    socket.socket(socket.AF_UNIX).connect({:?})\n    print('ESCAPED')\nexcept OSError as e:\n    print('refused', e.errno)\n", scope.join("deep/service.sock").display().to_string());
    let v = json_of(&run(As::Root, &m, "py", &[("code", &code)], &[]));
    assert_eq!(stdout_text(&v), format!("refused {}\n", libc::EPERM), "{v}");
}

/// `unix_sockets` binds what it lists read-only: it must not become a way to
/// bind anything else — not the host's /proc or /run, not a plain file.
#[test]
fn unix_sockets_binds_nothing_but_sockets() {
    let dir = scratch("not-a-socket", As::Root);
    let file = dir.join("plain.txt");
    std::fs::write(&file, "not a socket\n").unwrap();
    for (listed, code, says) in [
        ("/proc".to_string(), 4, "overlaps /proc"),
        ("/dev/shm".to_string(), 4, "overlaps /dev"),
        (file.display().to_string(), 5, "is not a socket"),
    ] {
        let m = manifest(
            &dir,
            &format!("[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/python3\" }}]\nunix_sockets = [\"{listed}\"]\n\n{PYTHON_OP}"),
        );
        let out = run(As::Root, &m, "py", &[("code", "print('ran')")], &[]);
        let v = json_of(&out);
        assert_eq!(out.status.code(), Some(code), "{listed}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap_or("").contains(says),
            "{listed}: {v}"
        );
    }
}

/// `run_as` is root callers' identity: another caller's program runs as its
/// caller, so it gets nothing `run_as` owns. Only `run_as_everyone` makes
/// every program `run_as` (and docs/operations.md says what that grants).
#[test]
fn run_as_is_for_root_callers_unless_the_operator_says_everyone() {
    for (extra, expected) in [
        ("[sandbox]\nrun_as = \"1:1\"\n", ["1", "65534"]),
        (
            "[sandbox]\nrun_as = \"1:1\"\nrun_as_everyone = true\n",
            ["1", "1"],
        ),
    ] {
        let d = Daemon::start(
            if expected[1] == "1" {
                "run-as-everyone"
            } else {
                "run-as-root"
            },
            &format!("[[access]]\nconnector = {CONNECTOR:?}\nuids = [65534]\n{extra}"),
        );
        for (who, want) in [(As::Root, expected[0]), (As::Nobody, expected[1])] {
            let out = daemon_harness::spawnd_as(who)
                .args(["run", "--socket"])
                .arg(&d.socket)
                .args([
                    "--connector",
                    CONNECTOR,
                    "--op",
                    "sh",
                    "--arg",
                    "script=id -u",
                ])
                .current_dir("/")
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                format!("{want}\n"),
                "{who:?} with {extra}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
