//! The daemon's spawner and what it keeps from one request for the next:
//! spare sandboxes (namespaces, ids mapped, the shared root
//! and system paths bound before the order) and cgroups used again. None of
//! it may carry anything of one sandbox into another, or let a spare's
//! early work (done before the order, while the host's root is still there)
//! reach into a program's sandbox.

use crate::{daemon_harness, harness};

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use daemon_harness::{Client, Daemon, CONNECTOR};
use harness::world;
use serde_json::{json, Value};

#[test]
fn namespaces_of_spare_sandboxes_are_fresh_and_never_shared_and_loopback_is_up() {
    let d = Daemon::start("netns", "");
    // Let the idle spawner fill its pool.
    std::thread::sleep(Duration::from_millis(300));
    // A spare is cloned into its user and pid namespaces and makes the
    // others itself: every one of them must be its own, none the host's.
    let code = "import os,socket,time\n\
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
s.bind(('127.0.0.1',0)); s.sendto(b'ping',s.getsockname())\n\
ns=','.join(os.readlink('/proc/self/ns/'+n) for n in ('net','mnt','ipc','uts','pid','user'))\n\
print(ns, s.recv(4).decode()); time.sleep(0.5)";
    let mut c = d.client();
    let handles: Vec<String> = (0..3)
        .map(|_| {
            c.ok(
                "spawn_op",
                json!({"connector": CONNECTOR, "op": "py", "args": {"code": code}}),
            )["handle"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut seen = Vec::new();
    for h in handles {
        let done = c.ok("spawn_status", json!({"handle": h, "wait_ms": 20000}));
        assert_eq!(done["exit_code"], 0, "{done}");
        assert_eq!(
            done["isolation"]["network_namespace"],
            "fresh, made ahead of the request; loopback only",
            "{done}"
        );
        let text = done["stdout"]["text"].as_str().unwrap().to_string();
        let (ns, reply) = text.trim().split_once(' ').unwrap();
        assert_eq!(reply, "ping", "loopback is up: {text}");
        seen.extend(ns.split(',').map(str::to_string));
    }
    for n in ["net", "mnt", "ipc", "uts", "pid", "user"] {
        let host = std::fs::read_link(format!("/proc/self/ns/{n}")).unwrap();
        seen.push(host.display().to_string());
    }
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "shared: {seen:?}");
}

#[test]
fn spare_sandboxes_serve_only_the_identity_they_were_prepared_for() {
    // Idle spares are prepared (ids mapped, shared root built) for whoever
    // ran last; a caller of another identity must get a sandbox of its own
    // identity all the same, every time the caller changes. Callers: root
    // (whose program runs as 65534), nobody, and uid 1.
    let w = world();
    let extra = format!("[[access]]\nconnector = {CONNECTOR:?}\nuids = [65534, 1]\n");
    let d = Daemon::start("identities", &extra);
    let order = [0u32, 65534, 65534, 1, 0, 1, 65534, 0];
    for (i, caller) in order.into_iter().enumerate() {
        // Time for the idle spawner to prepare its pool for the last caller.
        std::thread::sleep(Duration::from_millis(250));
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={caller}"))
            .arg(format!("--regid={caller}"))
            .arg("--clear-groups")
            .arg(&w.spawnd);
        let who = caller;
        let out = cmd
            .args(["run", "--json", "--socket"])
            .arg(&d.socket)
            .args(["--connector", CONNECTOR, "--op", "sh", "--arg"])
            .arg("script=id -u; id -g; cat /proc/self/uid_map")
            .current_dir(&w.dir)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let data = &v["data"];
        assert_eq!(data["exit_code"], 0, "#{i} {who:?}: {v}");
        let id = if caller == 0 {
            "65534".to_string()
        } else {
            caller.to_string()
        };
        let id = id.as_str();
        let text = data["stdout"]["text"].as_str().unwrap();
        let mut lines = text.lines();
        assert_eq!(
            (lines.next(), lines.next()),
            (Some(id), Some(id)),
            "#{i} {who:?}: {text}"
        );
        // The map holds root (to build the root) and the program's
        // identity, no one else.
        let mapped: Vec<&str> = lines.filter_map(|l| l.split_whitespace().next()).collect();
        assert_eq!(mapped, ["0", id], "#{i} {who:?}: {text}");
    }
}

/// The per-spawn cgroups of the spawner of daemon `d` (`<spawner pid>-<n>`).
fn spawner_cgroups(d: &Daemon) -> Vec<String> {
    let pid = d.child.id();
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    let spawner = children.split_whitespace().next().expect("the spawner");
    let mut names: Vec<String> = std::fs::read_dir("/sys/fs/cgroup/memory/spawnd")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{spawner}-")))
        .collect();
    names.sort();
    names
}

/// The spawner gives an ended sandbox's cgroups to a later sandbox only as
/// good as new: its peak reset, never after an OOM kill, never with the page
/// cache the last one wrote still charged to it. Each reading is the later
/// sandbox's own.
#[test]
fn cgroups_given_out_again_carry_nothing_of_the_last_sandbox() {
    // Only v1 cgroups are kept for later sandboxes; on the unified
    // hierarchy each sandbox's cgroup is made and removed (integration/limits.rs).
    if !std::path::Path::new("/sys/fs/cgroup/memory/spawnd").exists()
        && !std::path::Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists()
    {
        eprintln!("no cgroup v1 memory hierarchy: the spawner keeps no cgroups to give out again");
        return;
    }
    let d = Daemon::start("cgroup-reuse", "");
    let mut c = d.client();
    let mut run = |op: &str, args: Value| -> Value {
        let h = c.ok(
            "spawn_op",
            json!({"connector": CONNECTOR, "op": op, "args": args}),
        )["handle"]
            .clone();
        c.ok("spawn_status", json!({"handle": h, "wait_ms": 20000}))
    };
    let peak = |v: &Value| v["peak_memory_bytes"].as_u64().unwrap();
    // Python's first start brings its files into the page cache, charged to
    // that sandbox's cgroup: a new pair is made after it.
    // A pair is not given out while the daemon may still read it (until the
    // spawner's exit report arrived, just after the result): each step that
    // expects the last pair back waits a little first. (Without the wait, a
    // sandbox would get a new pair, and since the spawner checks idle pairs
    // and removes spent ones while it waits, the pair listing would not show
    // which pair served whom.)
    let settle = || std::thread::sleep(Duration::from_millis(100));
    let warm = run("py", json!({"code": "pass"}));
    assert_eq!(warm["isolation"]["limits_via"], "cgroup_v1", "{warm}");
    settle();
    run("true", json!({}));
    let pair = spawner_cgroups(&d);
    assert_eq!(pair.len(), 1, "{pair:?}");

    // A peak of 96 MiB, all freed at exit: the pair serves the next sandbox
    // (no new one is made), with its peak reset.
    settle();
    let big = run("py", json!({"code": "b = b'x' * (96 << 20)"}));
    assert_eq!(big["exit_code"], 0, "{big}");
    assert!(peak(&big) >= 96 << 20, "{big}");
    // (Kernel objects, too, are freed only after an RCU grace period.)
    settle();
    let after_big = run("true", json!({}));
    assert!(peak(&after_big) < 16 << 20, "peak left over: {after_big}");
    assert_eq!(spawner_cgroups(&d), pair, "the pair was not used again");

    // Killed by the OOM killer: the pair is never given out again. (Each
    // step settles first, so that it gets the pair the step before used: a
    // pair the daemon still holds would send it to a new one.)
    settle();
    let bomb = run("py", json!({"code": "b = b'x' * (512 << 20)"}));
    assert_eq!(bomb["oom_killed"], true, "{bomb}");
    settle();
    assert!(
        !spawner_cgroups(&d).contains(&pair[0]),
        "a pair that saw an OOM kill is kept: {:?}",
        spawner_cgroups(&d)
    );
    let after_bomb = run("true", json!({}));
    assert_eq!(after_bomb["oom_killed"], false, "{after_bomb}");
    let new_pair = spawner_cgroups(&d);
    assert_eq!(new_pair.len(), 1, "{new_pair:?}");
    assert_ne!(new_pair, pair, "a pair that saw an OOM kill was used again");

    // 8 MB written to disk stay cached and charged to the writer's cgroup:
    // that pair is not given out again; the next sandbox's peak is its own.
    let file = world().path("rw/cgroup-reuse-cache");
    settle();
    let wrote = run(
        "sh",
        json!({"script": format!("head -c 8000000 /dev/urandom > {}", file.display())}),
    );
    assert_eq!(wrote["exit_code"], 0, "{wrote}");
    settle();
    assert!(
        !spawner_cgroups(&d).contains(&new_pair[0]),
        "a pair still charged is kept: {:?}",
        spawner_cgroups(&d)
    );
    let after_write = run("true", json!({}));
    assert!(
        peak(&after_write) < 4 << 20,
        "cache left over: {after_write}"
    );
    assert!(
        !spawner_cgroups(&d).contains(&new_pair[0]),
        "a pair still charged was used again"
    );
    let _ = std::fs::remove_file(file);
}

/// An idle spare mounts the last request's system paths before its order
/// comes. After a reload that changes `[sandbox] system_paths`, a program
/// sees the paths in force, never a spare's stale binds: one mounted for
/// the old paths is not used, and spares are prepared again for the new.
#[test]
fn spare_sandboxes_mount_the_system_paths_in_force() {
    let w = world();
    let extra = w.path("daemon-system-extra");
    std::fs::create_dir_all(&extra).unwrap();
    std::fs::write(extra.join("marker"), "here\n").unwrap();
    let section = |with_extra: bool| {
        let mut paths: Vec<String> = spawnd::internals::config::DEFAULT_SYSTEM_PATHS
            .iter()
            .map(|p| format!("{p:?}"))
            .collect();
        if with_extra {
            paths.push(format!("{:?}", extra.display().to_string()));
        }
        format!("[sandbox]\nsystem_paths = [{}]\n", paths.join(", "))
    };
    // Info lines on stderr: the test waits for the one saying the reload is done.
    let log_info = ["env".to_string(), "RUST_LOG=spawnd=info".to_string()];
    let mut d = Daemon::start_under("system-paths", &section(false), &[], &log_info);
    let config = w.path("daemon-system-paths").join("config.toml");
    let original = std::fs::read_to_string(&config).unwrap();
    let mut log = BufReader::new(d.child.stderr.take().unwrap());
    let pid = nix::unistd::Pid::from_raw(d.child.id() as i32);
    let mut reload = |with_extra: bool| {
        let text = original.replace(&section(false), &section(with_extra));
        std::fs::write(&config, text).unwrap();
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
        let mut line = String::new();
        while !line.contains("reloaded") {
            line.clear();
            assert!(
                log.read_line(&mut line).unwrap() > 0,
                "the daemon's log ended"
            );
            assert!(!line.contains("refused"), "{line}");
        }
    };
    let mut c = d.client();
    let script = format!("cat {}/marker 2>/dev/null || echo absent", extra.display());
    // `spare`: the run must find a spare (and, the pool having had
    // time to prepare, one mounted for the paths of the run before it).
    let sees = |c: &mut Client, spare: bool| {
        // Time for the idle spawner to prepare spares for this request's paths.
        std::thread::sleep(Duration::from_millis(300));
        let done = c.run_sh(&script);
        assert_eq!(done["exit_code"], 0, "{done}");
        if spare {
            assert_eq!(
                done["isolation"]["network_namespace"],
                "fresh, made ahead of the request; loopback only",
                "{done}"
            );
        }
        done["stdout"]["text"].as_str().unwrap().trim().to_string()
    };
    // The first run after a change finds only spares mounted for the old
    // paths: none fits, and it clones. The next ones find spares mounted for
    // the new paths.
    let expect = |c: &mut Client, expected: &str| {
        for run in 0..3 {
            assert_eq!(
                sees(c, run > 0),
                expected,
                "run {run} after the last change"
            );
        }
    };
    expect(&mut c, "absent");
    reload(true);
    expect(&mut c, "here");
    reload(false);
    expect(&mut c, "absent");
}

/// A spare puts every signal action back to its default while it waits (the
/// program's start does not reset them again): the program starts with
/// none blocked or ignored, whatever the spawner it was cloned from had.
#[test]
fn a_program_in_a_spare_sandbox_starts_with_signals_at_their_defaults() {
    let d = Daemon::start("signals", "");
    let mut c = d.client();
    for _ in 0..2 {
        // Time for the idle spawner to fill and prepare its pool.
        std::thread::sleep(Duration::from_millis(300));
        let done = c.run_sh(
            "yes | head -n 1; echo \"yes=${PIPESTATUS[0]}\"; grep -E '^Sig(Blk|Ign)' /proc/self/status",
        );
        assert_eq!(
            done["isolation"]["network_namespace"],
            "fresh, made ahead of the request; loopback only",
            "{done}"
        );
        let text = done["stdout"]["text"].as_str().unwrap_or("");
        assert!(text.contains("yes=141"), "{done}");
        assert!(text.contains("SigBlk:\t0000000000000000"), "{text}");
        assert!(text.contains("SigIgn:\t0000000000000000"), "{text}");
    }
}

/// A sandbox made ahead clones the old root's unmount helper while it waits
/// for its order; the helper does its work at the pivot and is gone before
/// the program starts: the program sees init and itself, nothing else, and
/// no `/.oldroot`.
#[test]
fn the_unmount_helper_made_ahead_is_gone_before_the_program_starts() {
    let d = Daemon::start("helperahead", "");
    let children = |pid: u32| -> Vec<u32> {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    };
    let spawner = children(d.child.id())[0];
    let mut c = d.client();
    // Sandboxes are prepared ahead for the identity of the last request.
    c.run_sh("true");
    for round in 0..3 {
        // Every sandbox waiting for its order has its helper, waiting too
        // (given the time to make and prepare them all).
        let started = std::time::Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let spares = children(spawner);
            let helpers: Vec<Vec<u32>> = spares.iter().map(|b| children(*b)).collect();
            let waiting = |p: &u32| {
                std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                    s.rfind(')')
                        .is_some_and(|i| s[i + 1..].trim_start().starts_with('S'))
                })
            };
            if !spares.is_empty() && helpers.iter().all(|h| h.len() == 1 && waiting(&h[0])) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "spare sandboxes {spares:?} and their children {helpers:?}"
            );
        }
        // Last round: helpers killed while they wait; init then detaches
        // the old root as a sandbox made at the request does.
        if round == 2 {
            for spare in children(spawner) {
                for helper in children(spare) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(helper as i32),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        let done =
            c.run_sh("echo self=$$; for p in /proc/[0-9]*; do echo pid=${p#/proc/}; done; ls -a /");
        assert_eq!(
            done["isolation"]["network_namespace"],
            "fresh, made ahead of the request; loopback only",
            "{done}"
        );
        let text = done["stdout"]["text"].as_str().unwrap_or("");
        let me = text
            .lines()
            .find_map(|l| l.strip_prefix("self="))
            .expect("the program's pid");
        let pids: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("pid="))
            .collect();
        let mut expected = vec!["1", me];
        expected.sort_unstable();
        let mut seen = pids.clone();
        seen.sort_unstable();
        assert_eq!(seen, expected, "{text}");
        assert!(!text.lines().any(|l| l.contains("oldroot")), "{text}");
    }
}

/// Threat 39, raced: while init is still detaching the host's root (kept at
/// `/.oldroot` until the detach is done), a link in a writable scope that
/// its owner keeps swapping between a real directory and `/.oldroot` must
/// never give a program a working directory inside the host's root. Found
/// in review when init chdir'ed before the detach was done; a sandbox made
/// ahead won that race almost every time.
#[test]
fn a_working_directory_never_lands_in_the_host_root_being_detached() {
    let w = world();
    let base = w.dir.join("rw").join("cwdrace");
    std::fs::create_dir_all(base.join("real/etc")).unwrap();
    std::fs::write(base.join("real/etc/inside-marker"), "").unwrap();
    let link = base.join("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("real", &link).unwrap();
    let d = Daemon::start("cwd-race", "");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, base) = (stop.clone(), base.clone());
        std::thread::spawn(move || {
            let (tmp, link) = (base.join("link.new"), base.join("link"));
            let mut flip = false;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let target = if flip { "/.oldroot" } else { "real" };
                let _ = std::fs::remove_file(&tmp);
                std::os::unix::fs::symlink(target, &tmp).unwrap();
                std::fs::rename(&tmp, &link).unwrap();
                flip = !flip;
            }
        })
    };
    let mut c = d.client();
    let cwd = link.join("etc").display().to_string();
    // Outcomes by kind: "inside" (the real directory), "refused at the
    // gate" (the link pointed away when the daemon checked it), "refused
    // by the sandbox" (it pointed away when init changed directory: the
    // race this test is about).
    let mut outcomes: std::collections::BTreeMap<&str, usize> = Default::default();
    // At least 60 spawns, and more (up to 240) until one has run in the
    // real directory, so a slow machine that rarely sees the link at rest
    // still shows the directory works when it is not swapped away.
    for attempt in 0..240 {
        if attempt >= 60 && outcomes.contains_key("inside") {
            break;
        }
        // Time for the idle spawner to prepare a spare: the fastest path.
        std::thread::sleep(Duration::from_millis(30));
        let a = c.call(
            "spawn_op",
            json!({"connector": CONNECTOR, "op": "sh", "cwd": cwd,
                   "args": {"script": "test -e passwd && echo HOST-ROOT; ls"}}),
        );
        let Some(h) = a["result"]["handle"].as_str() else {
            let message = a["error"]["message"].as_str().unwrap_or("");
            let kind = if message.contains("reported by the sandbox") {
                "refused by the sandbox"
            } else {
                "refused at the gate"
            };
            *outcomes.entry(kind).or_default() += 1;
            continue;
        };
        let done = c.ok("spawn_status", json!({"handle": h, "wait_ms": 10000}));
        let text = done["stdout"]["text"].as_str().unwrap_or("").to_string();
        assert!(
            !text.contains("HOST-ROOT"),
            "the host's root as cwd: {done}"
        );
        let kind = if text.contains("inside-marker") {
            "inside"
        } else if done["state"] == "failed" {
            "refused by the sandbox"
        } else {
            panic!("a spawn neither ran in the real directory nor was refused: {done}")
        };
        *outcomes.entry(kind).or_default() += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    eprintln!("outcomes: {outcomes:?}");
    assert!(
        outcomes.contains_key("inside"),
        "no spawn ran in the real directory: {outcomes:?}"
    );
}

/// Binds a spare are slaves of the host's mounts until its order
/// comes: a mount the host makes beneath a system path meanwhile arrives in
/// the spare without the bind's attributes. At the order they are applied
/// again, so the program sees it read-only, nosuid and nodev like the rest
/// of the system paths. (The daemon runs in a mount namespace of its own
/// whose mounts are shared, as on a systemd host.)
#[test]
fn a_host_mount_under_a_system_path_made_ahead_gets_the_binds_attributes() {
    let w = world();
    let sys = w.path("daemon-propagation-sys");
    std::fs::create_dir_all(sys.join("late")).unwrap();
    let mut paths: Vec<String> = spawnd::internals::config::DEFAULT_SYSTEM_PATHS
        .iter()
        .map(|p| format!("{p:?}"))
        .collect();
    paths.push(format!("{:?}", sys.display().to_string()));
    let extra = format!("[sandbox]\nsystem_paths = [{}]\n", paths.join(", "));
    let wrap = ["unshare", "--mount", "--propagation", "shared"].map(String::from);
    let d = Daemon::start_under("propagation", &extra, &[], &wrap);
    let mut c = d.client();
    let late = sys.join("late").display().to_string();
    let script = format!("grep ' {late} ' /proc/self/mountinfo || echo not-mounted");
    // A first run, so that the idle spares are prepared with these paths.
    assert_eq!(c.run_sh(&script)["exit_code"], 0);
    std::thread::sleep(Duration::from_millis(300));
    // The host (the daemon's namespace) mounts beneath a system path.
    let mounted = Command::new("nsenter")
        .args(["--target", &d.child.id().to_string(), "--mount", "--"])
        .args([
            "mount",
            "-t",
            "tmpfs",
            "-o",
            "rw,suid,dev,exec",
            "late",
            &late,
        ])
        .status()
        .unwrap();
    assert!(mounted.success());
    let done = c.run_sh(&script);
    assert_eq!(
        done["isolation"]["network_namespace"], "fresh, made ahead of the request; loopback only",
        "{done}"
    );
    let line = done["stdout"]["text"].as_str().unwrap_or("").to_string();
    assert!(
        !line.contains("not-mounted"),
        "the host's mount did not arrive: {done}"
    );
    let options = line.split_whitespace().nth(5).unwrap_or("");
    for want in ["ro", "nosuid", "nodev"] {
        assert!(
            options.split(',').any(|o| o == want),
            "{want} missing: {line}"
        );
    }
}
