//! Ordinary programs work in the sandbox, as root and as nobody: git reads a
//! repository under `fs_read`, tar writes an archive into `fs_write`, python3
//! computes, and dynamically linked programs find their libraries.

use crate::harness;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use harness::{world, As};
use serde_json::Value;
use spawnd::internals::spawn_result::SpawnResult;

fn result(out: &std::process::Output) -> Value {
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(v["ok"], true, "{v}");
    v["data"].clone()
}

fn repo() -> String {
    let w = world();
    let repo = w.path("ro/repo");
    if !repo.join(".git").exists() {
        let git = |args: &[&str]| {
            assert!(Command::new("git")
                .args(args)
                .current_dir(&repo)
                .env("HOME", "/nonexistent")
                .status()
                .unwrap()
                .success())
        };
        std::fs::create_dir_all(&repo).unwrap();
        git(&["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("README"), "hello\n").unwrap();
        git(&["add", "README"]);
        git(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            "first",
        ]);
        std::fs::write(repo.join("new.txt"), "untracked\n").unwrap();
    }
    repo.display().to_string()
}

fn git_status_works(who: As) {
    let repo = repo();
    let data = result(&world().run(who, "git-status", &[("repo", &repo)], &[]));
    assert_eq!(data["exit_code"], 0, "{data}");
    let text = data["stdout"]["text"].as_str().unwrap();
    assert!(
        text.contains("## main") && text.contains("?? new.txt"),
        "{text}"
    );
}

fn tar_writes_into_the_write_scope(who: As) {
    let w = world();
    let archive = w.path(&format!("rw/out-{:?}.tar", who));
    let data = result(&w.run(
        who,
        "tar-create",
        &[
            ("src", &w.path("ro").display().to_string()),
            ("archive", &archive.display().to_string()),
        ],
        &[],
    ));
    assert_eq!(data["exit_code"], 0, "{data}");
    let list = Command::new("tar")
        .arg("-tf")
        .arg(&archive)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&list.stdout).contains("readable.txt"));
}

/// The result of `python3 -c code` in the sandbox (the `py` operation).
fn python(who: As, code: &str) -> Value {
    result(&world().run(who, "py", &[("code", code)], &[]))
}

fn python_computes(who: As) {
    let data = python(
        who,
        "import json, hashlib; print(sum(range(10)), hashlib.sha256(b'x').hexdigest()[:8])",
    );
    assert_eq!(
        data["stdout"]["text"].as_str().map(str::trim),
        Some("45 2d711642"),
        "{data}"
    );
}

/// The sandbox's own loopback is up (brought up at launch, or ahead):
/// a datagram to itself on 127.0.0.1 arrives.
fn its_own_loopback_works(who: As) {
    let data = python(
        who,
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('127.0.0.1',0)); s.sendto(b'ping',s.getsockname()); print(s.recv(4).decode())",
    );
    assert_eq!(data["exit_code"], 0, "{data}");
    assert_eq!(
        data["stdout"]["text"].as_str().map(str::trim),
        Some("ping"),
        "{data}"
    );
}

fn dynamic_programs_find_their_libraries(who: As) {
    let data = result(&world().run(
        who,
        "sh",
        &[(
            "script",
            "ldd /usr/bin/git | grep -c '=> /' && /usr/bin/git --version",
        )],
        &[],
    ));
    assert_eq!(data["exit_code"], 0, "{data}");
    assert!(
        data["stdout"]["text"]
            .as_str()
            .unwrap()
            .contains("git version"),
        "{data}"
    );
}

fn exit_codes_and_signals_come_back(who: As) {
    let w = world();
    let out = w.run(who, "sh", &[("script", "exit 7")], &[]);
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(result(&out)["exit_code"], 7);
    let out = w.run(who, "sh", &[("script", "kill -TERM $$")], &[]);
    assert_eq!(out.status.code(), Some(128 + 15));
    let data = result(&out);
    assert_eq!(
        (data["signal"].as_i64(), data["signal_name"].as_str()),
        (Some(15), Some("SIGTERM"))
    );
}

/// Found through the spawner, whose signal mask the sandbox inherited: the
/// program starts with no signal blocked or ignored, so a writer into a closed
/// pipe dies of SIGPIPE as it would outside (spawnd itself ignores SIGPIPE).
fn signals_start_at_their_defaults(who: As) {
    let w = world();
    let script =
        "yes | head -n 1; echo \"yes=${PIPESTATUS[0]}\"; grep -E '^Sig(Blk|Ign)' /proc/self/status";
    let out = w.run(who, "sh", &[("script", script)], &[]);
    let data = result(&out);
    let text = data["stdout"]["text"].as_str().unwrap_or("");
    assert!(text.contains("yes=141"), "{data}");
    assert!(text.contains("SigBlk:\t0000000000000000"), "{text}");
    assert!(text.contains("SigIgn:\t0000000000000000"), "{text}");
}

fn isolation_is_reported(who: As) {
    let data = result(&world().run(who, "true", &[], &[]));
    let iso = &data["isolation"];
    assert_eq!(iso["namespaces"].as_array().unwrap().len(), 7, "{iso}");
    assert!(iso["landlock"]["abi"].as_u64().unwrap() >= 1, "{iso}");
    assert!(iso["seccomp"]["filter"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    // Root has a cgroup where the host has a memory controller (v2 here
    // or v1); any other user is limited by rlimits (integration/limits.rs
    // checks the choice against `health` on every layout).
    if who.is_root() {
        assert!(
            ["cgroup_v2", "cgroup_v1"].contains(&iso["limits_via"].as_str().unwrap()),
            "{iso}"
        );
    } else {
        assert_eq!(iso["limits_via"], "rlimits", "{iso}");
    }
}

/// A real result is exactly [`SpawnResult`]: it deserializes with every
/// struct refusing unknown fields, and serializes back to the same JSON, so
/// the type and the wire stay one (stdout as text, stderr's bytes that are
/// not UTF-8 as base64).
fn the_result_is_the_typed_spawn_result(who: As) {
    let script = "printf 'out\\n'; printf '\\377' >&2; exit 3";
    let data = result(&world().run(who, "sh", &[("script", script)], &[]));
    let typed: SpawnResult =
        serde_json::from_value(data.clone()).unwrap_or_else(|e| panic!("{e}: {data:#}"));
    assert_eq!(serde_json::to_value(&typed).unwrap(), data);
    assert_eq!(typed.exit_code, Some(3), "{data}");
    assert_eq!(typed.stdout.text.as_deref(), Some("out\n"), "{data}");
    assert_eq!(typed.stderr.base64.as_deref(), Some("/w=="), "{data}");
    assert!(typed.audit_id.is_some(), "{data}");
    // A local run reports its whole wall time, which holds the parts it
    // times inside.
    let t = &typed.timings;
    let process = t
        .process_us
        .unwrap_or_else(|| panic!("no process_us: {data}"));
    assert!(process >= t.gate_us + t.spec_and_filter_us, "{data}");
}

/// The mount table inside holds only what the sandbox was given: its root
/// is a tmpfs, the old root (detached by a helper, off the critical path)
/// is gone, and no host mount shows.
fn the_mount_table_holds_only_the_sandbox(who: As) {
    let data = result(&world().run(who, "sh", &[("script", "cat /proc/self/mountinfo")], &[]));
    assert_eq!(data["exit_code"], 0, "{data}");
    let text = data["stdout"]["text"].as_str().unwrap_or("");
    let mounts: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            Some((left.split(' ').nth(4)?, right.split(' ').next()?))
        })
        .collect();
    // The root is spawnd's tmpfs (a scope idmapped for a root caller was
    // made before it, so it may be listed first).
    let roots: Vec<&(&str, &str)> = mounts.iter().filter(|(point, _)| *point == "/").collect();
    assert_eq!(roots, [&("/", "tmpfs")], "{text}");
    assert!(!text.contains("oldroot"), "{text}");
    for (point, _) in &mounts {
        let shown = ["/", "/tmp", "/dev", "/dev/shm", "/proc"].contains(point)
            || point.starts_with("/dev/")
            || ["/usr", "/etc", "/lib", "/bin", "/sbin", "/opt"]
                .iter()
                .any(|p| point.starts_with(p))
            || point.starts_with(world().dir.to_str().unwrap());
        assert!(shown, "unexpected mount {point}: {text}");
    }
}

/// The CPU time and peak memory of the program's processes come back
/// (init reports them as it ends, so the exit is recorded while the kernel
/// still tears the namespaces down).
fn usage_is_reported(who: As) {
    let code = "import time\nt=time.process_time()\nx=bytearray(64<<20)\nwhile time.process_time()-t<0.3: pass\nprint(len(x))";
    let data = python(who, code);
    assert_eq!(data["exit_code"], 0, "{data}");
    let cpu = data["cpu_ms"].as_u64().unwrap();
    assert!((250..5000).contains(&cpu), "cpu_ms {cpu}: {data}");
    let peak = data["peak_memory_bytes"].as_u64().unwrap();
    assert!(peak >= 64 << 20, "peak_memory_bytes {peak}: {data}");
}

/// The runtime tools expect: the program's own name (`whoami`, `id`,
/// python's `getpass`), `localhost`, the CA store, the time zone, and
/// commands reached through `/etc/alternatives` (`cc`, `awk`). The
/// account files are written for the sandbox: the host's accounts are
/// not in them.
fn the_runtime_tools_expect_is_there(who: As) {
    let script = "whoami; id -un; id -gn; \
                  python3 -c 'import getpass; print(getpass.getuser())'; \
                  getent hosts localhost | head -1; \
                  test -s /etc/ssl/certs/ca-certificates.crt && echo ca-store; \
                  date +%Z; \
                  awk 'BEGIN { print \"awk-works\" }'; \
                  cc --version >/dev/null && echo cc-works; \
                  cat /etc/passwd /etc/group";
    let data = result(&world().run(who, "sh", &[("script", script)], &[]));
    assert_eq!(data["exit_code"], 0, "{data}");
    let text = data["stdout"]["text"].as_str().unwrap_or("");
    let lines: Vec<&str> = text.lines().collect();
    // A root caller's program runs as nobody, and so does spawnd run by
    // nobody (an unprivileged spawnd's program keeps its user).
    let user = "nobody".to_string();
    assert_eq!(&lines[..2], [user.as_str(), user.as_str()], "{text}");
    assert_eq!(lines[3], user, "{text}");
    assert!(
        lines[4].ends_with("localhost") || lines[4].contains("localhost "),
        "{text}"
    );
    assert_eq!(
        &lines[5..9],
        ["ca-store", "UTC", "awk-works", "cc-works"],
        "{text}"
    );
    // The host's accounts (daemon, bin, sys…) are not shown.
    for line in std::fs::read_to_string("/etc/passwd").unwrap().lines() {
        let name = line.split(':').next().unwrap_or("");
        if !["root", "nobody", user.as_str()].contains(&name) {
            assert!(
                !text.contains(&format!("\n{name}:x:")),
                "{name} shown: {text}"
            );
        }
    }
}

/// The files spawnd writes for the sandbox (the accounts, hosts,
/// nsswitch.conf) lie on its read-only root, with no mount of their own:
/// the program can neither change them nor their mode.
fn the_files_written_for_the_sandbox_stay_read_only(who: As) {
    let script = "for f in /etc/passwd /etc/group /etc/hosts /etc/nsswitch.conf; do \
                    grep -c \" $f \" /proc/self/mountinfo; \
                    (echo x >> $f) 2>/dev/null && echo appended || echo refused; \
                    chmod 666 $f 2>/dev/null && echo chmodded || echo chmod-refused; \
                    stat -c %a $f; \
                  done";
    let data = result(&world().run(who, "sh", &[("script", script)], &[]));
    let text = data["stdout"]["text"].as_str().unwrap_or("");
    let expected = ["0", "refused", "chmod-refused", "444"].repeat(4);
    assert_eq!(text.lines().collect::<Vec<_>>(), expected, "{data}");
}

/// Runtimes that reserve gigabytes of address space they never touch
/// (V8, the JVM) start under the default memory limit, whether a memory
/// cgroup or the rlimits bound it; and the limit still bounds what they
/// write.
fn jit_runtimes_start_under_the_default_limits(who: As) {
    let w = world();
    let data = result(&w.run(who, "node", &[("js", "console.log(6 * 7)")], &[]));
    assert_eq!(data["exit_code"], 0, "{data}");
    assert_eq!(data["stdout"]["text"], "42\n", "{data}");
    // The JVM sizes its heap from the machine's memory, not from an
    // rlimit: under the default limit (512 MiB) it starts; a tighter one
    // needs its -Xmx.
    let manifest = w.dir.join("java.toml");
    std::fs::write(
        &manifest,
        "[connector]\nname = \"local://test/java\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/java\" }]\n[capabilities.spawn.operations.version]\nargv = \"java -version\"\n",
    )
    .unwrap();
    let out = w
        .command_for(who, &manifest, "version", &[], &[])
        .output()
        .unwrap();
    let data = result(&out);
    assert_eq!(data["exit_code"], 0, "{data}");
    assert!(
        data["stderr"]["text"]
            .as_str()
            .unwrap_or("")
            .contains("version"),
        "{data}"
    );
    // The harness's limit is 256 MiB: 512 MiB of buffers do not fit.
    let data = result(&w.run(
        who,
        "node",
        &[("js", "const a = []; for (let i = 0; i < 64; i++) a.push(Buffer.alloc(8 << 20, 1)); console.log('fits')")],
        &[],
    ));
    assert_ne!(data["exit_code"], 0, "{data}");
    assert_ne!(data["stdout"]["text"], "fits\n", "{data}");
}

/// A `#!` script sees the path it is declared at as its own: bash's `$0`,
/// python's `sys.argv[0]` and `__file__`. Scripts that find their siblings
/// or re-read themselves by that path then work as they do outside.
fn scripts_see_their_declared_path(who: As) {
    let w = world();
    let dir = w.path(&format!("outside/declared-{who:?}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sh = dir.join("own-path.sh");
    let py = dir.join("own-path.py");
    // It also tries to change the file it runs from, and hashes what it read.
    std::fs::write(
        &sh,
        "#!/usr/bin/bash\necho \"$0\"\nchmod 0777 \"$0\" 2>/dev/null && echo CHANGED-MODE\ntouch \"$0\" 2>/dev/null && echo CHANGED-TIMES\n{ echo exit 9 >> \"$0\"; } 2>/dev/null && echo CHANGED-BYTES\nsha256sum < \"$0\"\n",
    )
    .unwrap();
    std::fs::write(
        &py,
        "#!/usr/bin/python3\nimport sys\nprint(sys.argv[0])\nprint(__file__)\n",
    )
    .unwrap();
    for f in [&sh, &py] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let manifest = dir.join("own-path.toml");
    std::fs::write(
        &manifest,
        format!(
            "[connector]\nname = \"local://t/own-path\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"{}\" }}, {{ path = \"{}\" }}]\n[capabilities.spawn.operations.sh]\nargv = \"own-path.sh\"\n[capabilities.spawn.operations.py]\nargv = \"own-path.py\"\n",
            sh.display(),
            py.display()
        ),
    )
    .unwrap();
    let run = |op: &str| {
        result(
            &w.command_for(who, &manifest, op, &[], &[])
                .output()
                .unwrap(),
        )
    };
    let data = run("sh");
    assert_eq!(data["exit_code"], 0, "{data}");
    let hashed = data["program"]["sha256"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:");
    assert_eq!(
        data["stdout"]["text"].as_str(),
        Some(format!("{}\n{hashed}  -\n", sh.display()).as_str()),
        "{data}"
    );
    let data = run("py");
    assert_eq!(data["exit_code"], 0, "{data}");
    assert_eq!(
        data["stdout"]["text"].as_str(),
        Some(format!("{0}\n{0}\n", py.display()).as_str()),
        "{data}"
    );
}

/// A `#!` script the system paths show, whose path only root may change,
/// runs by its path too: npm (`/usr/bin/npm`, a link to its `npm-cli.js`)
/// finds the modules beside it and answers its version, where from
/// `/dev/fd/3` node looked for them under `/dev/fd`.
fn a_system_script_finds_what_lies_beside_it(who: As) {
    let w = world();
    let npm = std::path::Path::new("/usr/bin/npm");
    if !npm.exists() {
        eprintln!("skipped: no /usr/bin/npm here");
        return;
    }
    let manifest = w.path(&format!("outside/npm-{who:?}.toml"));
    std::fs::write(
        &manifest,
        "[connector]\nname = \"local://t/npm\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/npm\" }]\n[capabilities.spawn.operations.version]\nargv = \"npm --version\"\n",
    )
    .unwrap();
    let data = result(
        &w.command_for(who, &manifest, "version", &[], &[])
            .output()
            .unwrap(),
    );
    assert_eq!(data["exit_code"], 0, "{data}");
    let version = data["stdout"]["text"].as_str().unwrap().trim().to_string();
    assert!(
        version.split('.').count() == 3 && version.chars().all(|c| c.is_ascii_digit() || c == '.'),
        "{data}"
    );
}

/// The private /tmp as the manifest's limits set it: a program copied into
/// it runs only with `tmp_exec = true` (else EACCES), a file larger than
/// the default /tmp fits in a `tmp_size_bytes` /tmp, and a size the memory
/// limit cannot hold is refused by lint and run, saying why.
fn tmp_size_and_exec_follow_the_manifest(who: As) {
    let w = world();
    let dir = w.path(&format!("outside/tmp-limits-{who:?}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let manifest = |name: &str, limits: &str| {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(
            &path,
            format!(
                "[connector]\nname = \"local://t/{name}\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/bash\" }}, {{ path = \"/usr/bin/python3\" }}]\n[capabilities.spawn.limits]\n{limits}\n[capabilities.spawn.operations.sh]\nargv = [\"bash\", \"-c\", \"{{script}}\"]\n[capabilities.spawn.operations.py]\nargv = [\"python3\", \"-I\", \"-c\", \"{{code}}\"]\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        path
    };
    let run = |m: &std::path::Path, op: &str, arg: (&str, &str)| {
        result(&w.command_for(who, m, op, &[arg], &[]).output().unwrap())
    };
    // A program copied into /tmp, then executed.
    let copy_and_run = "import os, shutil, subprocess\nshutil.copy('/usr/bin/true', '/tmp/copied-true')\nos.chmod('/tmp/copied-true', 0o755)\ntry:\n    print('ran', subprocess.run(['/tmp/copied-true']).returncode)\nexcept OSError as e:\n    print('refused', e.errno)\n";
    for (name, limits, said) in [
        ("tmp-noexec", "", "refused 13\n"),
        ("tmp-exec-off", "tmp_exec = false", "refused 13\n"),
        ("tmp-exec", "tmp_exec = true", "ran 0\n"),
    ] {
        let data = run(&manifest(name, limits), "py", ("code", copy_and_run));
        assert_eq!(data["stdout"]["text"], said, "{name}: {data}");
        assert_eq!(
            data["isolation"]["tmpfs"]["tmp_exec"],
            name == "tmp-exec",
            "{data}"
        );
    }
    // 52 MiB: more than the 48 MiB /tmp a 64 MiB memory limit leaves by
    // default, within a 60 MiB tmp_size_bytes.
    let write = "head -c 54525952 /dev/zero > /tmp/big && stat -c %s /tmp/big";
    let small = manifest("tmp-default-size", "max_memory_bytes = 67108864");
    let data = run(&small, "sh", ("script", write));
    assert_ne!(data["exit_code"], 0, "{data}");
    assert!(
        data["stderr"]["text"]
            .as_str()
            .unwrap_or("")
            .contains("No space left on device"),
        "{data}"
    );
    assert_eq!(data["isolation"]["tmpfs"]["tmp_bytes"], 48 << 20, "{data}");
    let large = manifest(
        "tmp-large",
        "max_memory_bytes = 67108864\ntmp_size_bytes = 62914560",
    );
    let data = run(&large, "sh", ("script", write));
    assert_eq!(data["exit_code"], 0, "{data}");
    assert_eq!(data["stdout"]["text"], "54525952\n", "{data}");
    assert_eq!(
        (
            &data["isolation"]["tmpfs"]["tmp_bytes"],
            &data["isolation"]["tmpfs"]["dev_shm_bytes"]
        ),
        (&serde_json::json!(60 << 20), &serde_json::json!(4 << 20)),
        "{data}"
    );
    // explain says how large /tmp is and whether its files execute.
    let explain = |m: &std::path::Path| {
        let out = Command::new(&w.spawnd)
            .args(["manifest", "explain"])
            .arg(m)
            .env_clear()
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let said = explain(&large);
    assert!(
        said.contains(
            "a private /tmp of 62914560 bytes (tmp_size_bytes) whose files cannot be executed"
        ),
        "{said}"
    );
    let said = explain(&manifest("tmp-exec", "tmp_exec = true"));
    assert!(
        said.contains("a private /tmp of 469762048 bytes (the memory limit less /dev/shm's 67108864 bytes) whose files MAY be executed (tmp_exec)"),
        "{said}"
    );
    // More than the memory limit can hold: lint and run refuse it.
    let too_large = manifest(
        "tmp-too-large",
        "max_memory_bytes = 67108864\ntmp_size_bytes = 67108864",
    );
    let mut lint = match who {
        As::Nobody => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&w.spawnd);
            c
        }
        _ => Command::new(&w.spawnd),
    };
    let lint = lint
        .args(["manifest", "lint"])
        .arg(&too_large)
        .env_clear()
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&lint.stderr);
    assert_eq!(lint.status.code(), Some(4), "{said}");
    assert!(
        said.contains("capabilities.spawn.limits.tmp_size_bytes")
            && said.contains("tmp_size_bytes = 67108864 exceeds what max_memory_bytes = 67108864 leaves for /tmp (66060288): /tmp is a tmpfs, whose pages are memory")
            && said.contains("raise max_memory_bytes to at least 68157440"),
        "{said}"
    );
    let out = w
        .command_for(who, &too_large, "sh", &[("script", "true")], &[])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

macro_rules! both {
    ($($name:ident),*) => {
        mod as_root { use super::*; $( #[test] fn $name() { super::$name(As::Root) } )* }
        mod as_nobody { use super::*; $( #[test] fn $name() { super::$name(As::Nobody) } )* }
        mod via_spawner { use super::*; $( #[test] fn $name() { super::$name(As::RootViaSpawner) } )* }
    };
}

both!(
    a_system_script_finds_what_lies_beside_it,
    tmp_size_and_exec_follow_the_manifest,
    scripts_see_their_declared_path,
    workspace_anchored_scopes_follow_the_checkout,
    jit_runtimes_start_under_the_default_limits,
    the_runtime_tools_expect_is_there,
    the_files_written_for_the_sandbox_stay_read_only,
    the_mount_table_holds_only_the_sandbox,
    usage_is_reported,
    git_status_works,
    tar_writes_into_the_write_scope,
    python_computes,
    its_own_loopback_works,
    dynamic_programs_find_their_libraries,
    exit_codes_and_signals_come_back,
    signals_start_at_their_defaults,
    isolation_is_reported,
    the_result_is_the_typed_spawn_result
);

#[test]
fn live_output_streams_and_the_exit_code_passes_through_without_json() {
    let w = world();
    let out = Command::new(&w.spawnd)
        .env("SPAWND_CONFIG", w.config(As::Root))
        .args(["run", "--manifest"])
        .arg(&w.manifest)
        .args([
            "--op",
            "sh",
            "--arg",
            "script=echo out; echo err >&2; exit 3",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
}

/// The caps bound what the result keeps, not the live log: a long test run
/// whose summary comes after 400 KiB of stderr (the cap is 256 KiB) shows
/// the summary live, and the result says its stderr was cut.
#[test]
fn the_live_log_is_not_cut_by_the_results_cap() {
    let w = world();
    let script = "head -c 409600 /dev/zero | tr '\\0' x >&2; echo; echo SUMMARY >&2";
    let out = Command::new(&w.spawnd)
        .env("SPAWND_CONFIG", w.config(As::Root))
        .args(["run", "--manifest"])
        .arg(&w.manifest)
        .args(["--op", "sh", "--arg"])
        .arg(format!("script={script}"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.len() > 409600, "{}", out.stderr.len());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("xSUMMARY\n"), "the summary was cut");
    // spawnd's own note says what the result kept.
    assert!(
        stderr.ends_with(
            "spawnd: stderr truncated: kept 262144 of 409608 bytes (cap from the manifest)\n"
        ),
        "{}",
        &stderr[stderr.len() - 200..]
    );
    let data = result(&w.run(As::Root, "sh", &[("script", script)], &[]));
    assert_eq!(data["stderr"]["truncated"], true, "{data}");
    assert_eq!(data["stderr"]["bytes"], 262144, "{data}");
}

/// Without `--json`, a run whose exit code is spawnd's own (a refusal, the
/// wall time) ends with one stable line, `spawnd: exit N (why)`, and a
/// program's own exit code never does: a CI step tells them apart.
#[test]
fn spawnds_own_exit_codes_end_with_a_line_a_programs_never_do() {
    let w = world();
    let run = |args: &[&str]| {
        Command::new(&w.spawnd)
            .env("SPAWND_CONFIG", w.config(As::Root))
            .args(["run", "--manifest"])
            .arg(&w.manifest)
            .args(args)
            .output()
            .unwrap()
    };
    let last_line = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
            .to_string()
    };
    // The program's own 3, 5 and 124.
    for code in [3, 5, 124] {
        let out = run(&["--op", "sh", "--arg", &format!("script=exit {code}")]);
        assert_eq!(out.status.code(), Some(code));
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("spawnd: exit"),
            "{out:?}"
        );
    }
    // spawnd's 3 (a refusal) and 124 (the wall time).
    let denied = run(&["--op", "sh", "--arg", "script=true", "--arg", "extra=1"]);
    assert_eq!(denied.status.code(), Some(3));
    assert_eq!(last_line(&denied), "spawnd: exit 3 (permission_denied)");
    let timed_out = run(&[
        "--op",
        "sh",
        "--arg",
        "script=sleep 10",
        "--timeout",
        "300ms",
    ]);
    assert_eq!(timed_out.status.code(), Some(124));
    assert_eq!(last_line(&timed_out), "spawnd: exit 124 (timed_out)");
}

/// A manifest a repository can carry: scopes and cwd anchored at
/// `{workspace}`, which `spawnd run --workspace DIR` names. The program
/// writes into the checkout's build directory (judged on the host), the
/// decision record holds the workspace and the scopes as resolved, and
/// without a workspace nothing runs (exit 4, saying what to pass).
fn workspace_anchored_scopes_follow_the_checkout(who: As) {
    let w = world();
    let checkout = w.path(&format!("rw/checkout-{who:?}"));
    std::fs::create_dir_all(checkout.join("src")).unwrap();
    std::fs::write(checkout.join("src/input.txt"), "from the checkout\n").unwrap();
    for dir in [&checkout, &checkout.join("src")] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let _ = std::fs::remove_dir_all(checkout.join("build"));
    let manifest = w.dir.join("workspace.toml");
    std::fs::write(
        &manifest,
        "[connector]\nname = \"local://test/workspace\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/bash\" }]\nfs_read = [\"{workspace}/src\"]\nfs_write = [\"{workspace}/build\"]\ncwd = \"{workspace}/build\"\n[capabilities.spawn.operations.build]\nargv = [\"bash\", \"-c\", \"cat ../src/input.txt > out.txt && pwd\"]\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        w.command_for(who, &manifest, "build", &[], extra)
            .output()
            .unwrap()
    };
    let unset = run(&[]);
    assert_eq!(unset.status.code(), Some(4), "{unset:?}");
    let v: Value = serde_json::from_slice(&unset.stdout).unwrap();
    assert_eq!(v["error"]["details"]["reason"], "workspace_unset", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--workspace"),
        "{v}"
    );
    let data = result(&run(&["--workspace", checkout.to_str().unwrap()]));
    assert_eq!(data["exit_code"], 0, "{data}");
    let real = std::fs::canonicalize(&checkout).unwrap();
    assert_eq!(
        data["stdout"]["text"].as_str().unwrap().trim(),
        real.join("build").to_str().unwrap(),
        "{data}"
    );
    assert_eq!(
        std::fs::read_to_string(checkout.join("build/out.txt")).unwrap(),
        "from the checkout\n"
    );
    let log = std::fs::read_to_string(w.audit_log(who)).unwrap();
    let decision: Value = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["kind"] == "decision" && r["audit_id"] == data["audit_id"])
        .unwrap();
    assert_eq!(decision["workspace"], real.to_str().unwrap(), "{decision}");
    assert_eq!(
        decision["fs"]["write"][0],
        real.join("build").to_str().unwrap(),
        "{decision}"
    );
}

/// A reader of spawnd's output that stops reading cannot keep the wall
/// time (or Ctrl-C) from ending the run: `yes` under a 2 s limit, its
/// spawnd's stdout a pipe nobody reads, ends with 124 in seconds, and
/// nothing of the sandbox is left.
#[test]
fn a_stalled_reader_of_the_live_view_does_not_stop_the_wall_time() {
    let w = world();
    let mut child = Command::new(&w.spawnd)
        .env("SPAWND_CONFIG", w.config(As::Root))
        .args(["run", "--manifest"])
        .arg(&w.manifest)
        .args([
            "--op",
            "sh",
            "--arg",
            "script=exec yes spawnd-stalled-reader",
            "--timeout",
            "2s",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The pipe is held open and never read.
    let _unread = child.stdout.take();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("spawnd did not end with its reader stalled");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(124));
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let left = Command::new("pgrep")
        .args(["-f", "yes spawnd-stalled-reader"])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "left running: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}

/// A manifest carried in the checkout it writes into could be rewritten by
/// its own program for the next run: a write scope that holds the
/// manifest (or the config, or the audit log's directory) runs nothing,
/// and the manifest on the host is unchanged.
#[test]
fn a_write_scope_holding_its_own_manifest_runs_nothing() {
    let w = world();
    let checkout = w.path("rw/self-policy");
    std::fs::create_dir_all(&checkout).unwrap();
    let manifest = checkout.join("build.toml");
    let text = "[connector]\nname = \"local://test/self-policy\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/bash\" }]\nfs_write = [\"{workspace}\"]\n[capabilities.spawn.operations.build]\nargv = [\"bash\", \"-c\", \"echo 'fs_write = [\\\"/\\\"]' >> {workspace_file}\"]\n";
    let text = text.replace("{workspace_file}", &manifest.display().to_string());
    std::fs::write(&manifest, &text).unwrap();
    let out = Command::new(&w.spawnd)
        .env("SPAWND_CONFIG", w.config(As::Root))
        .args(["run", "--json", "--manifest"])
        .arg(&manifest)
        .args(["--op", "build", "--workspace"])
        .arg(&checkout)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(4), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("holds the manifest"),
        "{v}"
    );
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), text);
}

/// `--json --live`: the result on stdout stays pure JSON, and the program's
/// output streams to stderr as it arrives (a CI log shows progress, a
/// script parses the result).
#[test]
fn json_with_live_output_keeps_stdout_for_the_result() {
    let w = world();
    let out = w.run(
        As::Root,
        "sh",
        &[("script", "echo progress-out; echo progress-err >&2")],
        &["--live"],
    );
    let data = result(&out);
    assert_eq!(data["stdout"]["text"], "progress-out\n", "{data}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("progress-out\n") && stderr.contains("progress-err\n"),
        "{stderr}"
    );
}

/// Ctrl-C (or SIGTERM) to `spawnd run` asks the program to end first: a
/// program that traps SIGTERM cleans up (judged by the file it leaves on
/// the host), and one that ignores it is killed a grace later; the run
/// exits 130 either way.
fn interrupt_a_run(tag: &str, script: &str) -> (std::process::ExitStatus, Duration, PathBuf) {
    let w = world();
    let rw = w.path("rw");
    let started = rw.join(format!("started-{tag}"));
    let cleaned = rw.join(format!("cleaned-{tag}"));
    let _ = std::fs::remove_file(&started);
    let _ = std::fs::remove_file(&cleaned);
    let script = script
        .replace("STARTED", &started.display().to_string())
        .replace("CLEANED", &cleaned.display().to_string());
    let mut child = Command::new(&w.spawnd)
        .env("SPAWND_CONFIG", w.config(As::Root))
        .args(["run", "--manifest"])
        .arg(&w.manifest)
        .args(["--op", "sh", "--arg"])
        .arg(format!("script={script}"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !started.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the program never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let interrupted = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    (status, interrupted.elapsed(), cleaned)
}

#[test]
fn an_interrupted_run_lets_a_program_that_traps_sigterm_clean_up() {
    let (status, _, cleaned) = interrupt_a_run(
        "trap",
        "trap 'echo cleaned > CLEANED; exit 0' TERM; : > STARTED; while :; do sleep 0.05; done",
    );
    assert_eq!(status.code(), Some(130));
    // The trap ran: the program ended itself, inside the grace.
    assert_eq!(std::fs::read_to_string(&cleaned).unwrap(), "cleaned\n");
}

#[test]
fn an_interrupted_run_kills_a_program_that_ignores_sigterm_a_grace_later() {
    let (status, took, cleaned) = interrupt_a_run(
        "ignore",
        "trap '' TERM; : > STARTED; while :; do sleep 0.05; done; echo never > CLEANED",
    );
    assert_eq!(status.code(), Some(130));
    assert!(!cleaned.exists());
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(10),
        "{took:?}"
    );
}

#[test]
fn the_shipped_python_policy_runs() {
    let out = Command::new(env!("CARGO_BIN_EXE_spawnd"))
        .env("SPAWND_CONFIG", world().config(As::Root))
        .args([
            "run",
            "--manifest",
            "policies/python3.toml",
            "--op",
            "eval",
            "--arg",
            "code=print(6*7)",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "42\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_script_runs_when_its_interpreter_is_executable_and_not_otherwise() {
    use std::os::unix::fs::PermissionsExt;
    let w = world();
    let good = w.path("ro/hello.sh");
    let bad = w.path("ro/planted.sh");
    let planted_interp = w.path("rw/planted-bash");
    std::fs::write(
        &good,
        "#!/usr/bin/bash\necho \"script ran with $# args: $1\"\n",
    )
    .unwrap();
    std::fs::copy("/usr/bin/bash", &planted_interp).unwrap();
    std::fs::set_permissions(&planted_interp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        &bad,
        format!("#!{}\necho ESCAPED\n", planted_interp.display()),
    )
    .unwrap();
    for f in [&good, &bad] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let manifest = w.path("outside/script.toml");
    std::fs::write(&manifest, format!(
        "[connector]\nname = \"local://t/script\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"{}\" }}, {{ path = \"{}\" }}]\nfs_read = [\"{}\"]\nfs_write = [\"{}\"]\n[capabilities.spawn.operations.good]\nargv = \"hello.sh {{x}}\"\n[capabilities.spawn.operations.bad]\nargv = \"planted.sh\"\n",
        good.display(), bad.display(), w.path("ro").display(), w.path("rw").display()
    )).unwrap();
    let run = |op: &str, extra: &[&str]| {
        Command::new(&w.spawnd)
            .env("SPAWND_CONFIG", w.config(As::Root))
            .args(["run", "--json", "--manifest"])
            .arg(&manifest)
            .args(["--op", op])
            .args(extra)
            .output()
            .unwrap()
    };
    let ok = run("good", &["--arg", "x=one"]);
    let v: Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(
        v["data"]["stdout"]["text"], "script ran with 1 args: one\n",
        "{v}"
    );
    let refused = run("bad", &[]);
    assert_eq!(
        refused.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&refused.stdout)
    );
    let said = String::from_utf8_lossy(&refused.stdout);
    assert!(!said.contains("ESCAPED"));
    // The program's process reports the step that failed, with the error
    // (it borrows init's memory until exec, so it formats without allocating).
    assert!(
        said.contains("execveat(program, AT_EMPTY_PATH): Permission denied (os error 13)"),
        "{said}"
    );
}

/// A program that catches the wall time's SIGTERM and exits 0 in its
/// handler was ended by the wall time: timed out, whatever its code.
#[test]
fn a_program_that_exits_0_when_the_wall_times_sigterm_comes_timed_out() {
    let data = result(&world().run(
        As::Root,
        "sh",
        &[("script", "trap 'exit 0' TERM; sleep 5 & wait")],
        &["--timeout", "300ms"],
    ));
    assert_eq!(data["timed_out"], true, "{data}");
}

/// A program that ends on its own as its wall time runs out is not
/// reported as timed out: its own exit stands (the wall time's SIGTERM can
/// cross its exit; init tells which came first). Hammered around the
/// deadline: a result never says exit 0 and timed out together.
#[test]
fn a_program_ending_at_its_deadline_is_never_exit_0_and_timed_out() {
    let w = world();
    let mut seen = [0u32; 2];
    for i in 0..30 {
        let sleep = format!("sleep 0.{}", 280 + (i % 8) * 5);
        let data = result(&w.run(
            As::Root,
            "sh",
            &[("script", &sleep)],
            &["--timeout", "300ms"],
        ));
        let timed_out = data["timed_out"] == true;
        seen[usize::from(timed_out)] += 1;
        assert!(
            !(timed_out && data["exit_code"] == 0),
            "exit 0 and timed out at once: {data}"
        );
        if !timed_out {
            assert_eq!(data["exit_code"], 0, "{data}");
        }
    }
    eprintln!("ended on their own, timed out: {seen:?}");
}
