//! Memory and process limits hold per sandbox on whatever cgroup layout the
//! host has (v2 unified, v1 hierarchies, or rlimits without either), and
//! `health` names exactly the mechanism runs use. The kernel matrix
//! (`scripts/kernels`) runs this suite in every guest: cgroup v2 there is
//! tested as root on the unified hierarchy and for a service user in a
//! delegated cgroup, as systemd's `Delegate=yes` makes one.

use crate::{daemon_harness, harness};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use daemon_harness::{Daemon, CONNECTOR};
use harness::{world, As};
use serde_json::{json, Value};

/// `spawnd health --json` as `who`, with the world's config for `who`.
fn health(who: As) -> Value {
    let mut cmd = match who {
        As::Nobody => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&world().spawnd);
            c
        }
        As::Root | As::RootViaSpawner => Command::new(&world().spawnd),
    };
    let out = cmd
        .args(["health", "--json", "--config"])
        .arg(world().config(who))
        .current_dir(&world().dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "health --json: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The `data` of a `spawnd run --json` as `who`.
fn run(who: As, op: &str, args: &[(&str, &str)]) -> Value {
    let out = world().run(who, op, args, &[]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "run --json: {e}: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    v["data"].clone()
}

/// A python program that holds 200 MiB more than the world's 256 MiB limit
/// allows, written page by page, and a child that sleeps meanwhile.
const MEMORY_HOG: &str = "import os, time\n\
if os.fork() == 0:\n    time.sleep(60)\n    os._exit(0)\n\
held = []\n\
for i in range(456):\n    held.append(b'x' * (1 << 20))\n\
print('HELD', len(held))\n";

/// What every run says it was limited by is what `health` says, for
/// each identity spawnd runs as and through the daemon's spawner; with root
/// on a host with a cgroup memory controller, a cgroup.
#[test]
fn health_names_the_mechanism_runs_use() {
    for who in [As::Root, As::Nobody, As::RootViaSpawner] {
        let h = health(who);
        let said = h["data"]["cgroups"]["limits_via"].clone();
        let data = run(who, "true", &[]);
        assert_eq!(
            data["isolation"]["limits_via"], said,
            "{who:?}: health {h}\nrun {data}"
        );
        let memory_controller = !h["data"]["cgroups"]["v2_controllers"]
            .as_array()
            .unwrap()
            .is_empty()
            && h["data"]["cgroups"]["v2_controllers"]
                .as_array()
                .unwrap()
                .contains(&json!("memory"))
            || !h["data"]["cgroups"]["v1_memory"].is_null();
        if who.is_root() && memory_controller {
            assert_ne!(
                said, "rlimits",
                "root on a host with a memory controller: {h}"
            );
        }
        if said == "rlimits" && who.is_root() {
            let reasons = h["data"]["reasons"].to_string();
            assert!(
                reasons.contains("rlimits"),
                "rlimits for root, not named: {h}"
            );
        }
    }
}

/// A program that holds more memory than its limit is stopped: by the
/// kernel's OOM killer in the sandbox's own cgroup (and the result says
/// so, in the words `run` prints), or by its rlimit without one.
#[test]
fn a_memory_hog_is_stopped_at_the_sandboxs_limit() {
    for who in [As::Root, As::Nobody, As::RootViaSpawner] {
        let data = run(who, "py", &[("code", MEMORY_HOG)]);
        let text = data["stdout"]["text"].as_str().unwrap_or("");
        assert!(
            !text.contains("HELD"),
            "{who:?} held 456 MiB under a 256 MiB limit: {data}"
        );
        if data["isolation"]["limits_via"] == "rlimits" {
            let err = data["stderr"]["text"].as_str().unwrap_or("");
            assert!(err.contains("MemoryError"), "{who:?}: {data}");
        } else {
            assert_eq!(data["oom_killed"], true, "{who:?}: {data}");
            assert_eq!(data["signal"], 9, "{who:?}: {data}");
        }
    }
    // The words of a plain `spawnd run`.
    let out = {
        let mut cmd = As::Root.spawnd_run(&world().spawnd);
        cmd.arg("--manifest")
            .arg(&world().manifest)
            .args(["--op", "py", "--arg"])
            .arg(format!("code={MEMORY_HOG}"))
            .arg("--config")
            .arg(world().config(As::Root))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir(&world().dir)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let err = String::from_utf8_lossy(&out.stderr);
    if health(As::Root)["data"]["cgroups"]["limits_via"] != "rlimits" {
        assert!(
            err.contains("the memory limit of 268435456 bytes was reached"),
            "{err}"
        );
    }
}

/// On cgroup v2, as root: each sandbox's cgroup is made under `spawnd/` at
/// the hierarchy's root, which enables `memory` and `pids` for it and holds
/// no process, with the limits, no swap and the OOM group set; it is gone
/// once the run ended.
#[test]
fn on_cgroup_v2_root_makes_each_sandboxs_cgroup_under_spawnd_and_removes_it() {
    let h = health(As::Root);
    if h["data"]["cgroups"]["limits_via"] != "cgroup_v2" {
        eprintln!("not a cgroup v2 host for root (limits via {}): nothing to check here; the kernel matrix's v2 guests run this", h["data"]["cgroups"]["limits_via"]);
        return;
    }
    let mount = PathBuf::from(h["data"]["cgroups"]["v2_mount"].as_str().unwrap());
    let base = mount.join("spawnd");
    let mut child = world()
        .command(As::Root, "sh", &[("script", "sleep 3")], &[])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let leaf = wait_for_leaf(&base, pid);
    let read = |f: &str| {
        std::fs::read_to_string(leaf.join(f))
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(read("memory.max"), "268435456");
    assert_eq!(read("pids.max"), "64");
    assert_eq!(read("memory.oom.group"), "1");
    if leaf.join("memory.swap.max").exists() {
        assert_eq!(read("memory.swap.max"), "0");
    }
    assert!(
        !read("cgroup.procs").is_empty(),
        "the sandbox is in its cgroup"
    );
    let enabled = std::fs::read_to_string(base.join("cgroup.subtree_control")).unwrap();
    assert!(
        enabled.contains("memory") && enabled.contains("pids"),
        "{enabled}"
    );
    assert_eq!(
        std::fs::read_to_string(base.join("cgroup.procs")).unwrap(),
        ""
    );
    assert!(child.wait().unwrap().success());
    assert!(!leaf.exists(), "{} is left after the run", leaf.display());
}

/// On cgroup v2, a daemon run by a service user in a cgroup delegated to
/// it (as systemd's `Delegate=yes` does for `User=`: the directory and its
/// `cgroup.procs`, `cgroup.subtree_control` and `cgroup.threads` owned by
/// the user) moves itself into a leaf, `supervisor`, and limits each
/// sandbox in a cgroup of its own beside it; `health` through it says so.
#[test]
fn on_cgroup_v2_a_service_users_daemon_limits_each_sandbox_in_its_delegated_cgroup() {
    daemon_in_a_delegated_cgroup(Delegation::ToServiceUser);
}

/// The same for a root daemon in a cgroup systemd marked as delegated
/// (`trusted.delegate = 1`, as systemd sets it for `Delegate=yes`).
#[test]
fn on_cgroup_v2_a_root_daemon_limits_each_sandbox_in_the_cgroup_systemd_delegated() {
    daemon_in_a_delegated_cgroup(Delegation::MarkedForRoot);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Delegation {
    ToServiceUser,
    MarkedForRoot,
}

fn daemon_in_a_delegated_cgroup(how: Delegation) {
    let h = health(As::Root);
    if h["data"]["cgroups"]["limits_via"] != "cgroup_v2" {
        eprintln!("not a cgroup v2 host (limits via {}): nothing to check here; the kernel matrix's v2 guests run this", h["data"]["cgroups"]["limits_via"]);
        return;
    }
    let mount = PathBuf::from(h["data"]["cgroups"]["v2_mount"].as_str().unwrap());
    let name = match how {
        Delegation::ToServiceUser => "user",
        Delegation::MarkedForRoot => "root",
    };
    let delegated = Delegated::make(
        &mount.join(format!("spawnd-delegated-{name}-{}", std::process::id())),
        how,
    );
    let enter = format!("echo $$ > {}", delegated.0.join("cgroup.procs").display());
    let drop_to = match how {
        Delegation::ToServiceUser => "setpriv --reuid=65534 --regid=65534 --clear-groups ",
        Delegation::MarkedForRoot => "",
    };
    let wrap = [
        "sh".to_string(),
        "-c".to_string(),
        format!("{enter} && exec {drop_to}\"$@\""),
        "sh".to_string(),
    ];
    let d = match how {
        Delegation::ToServiceUser => Daemon::start_as_service_user("delegated-user", &wrap),
        Delegation::MarkedForRoot => Daemon::start_under("delegated-root", "", &[], &wrap),
    };
    let own = std::fs::read_to_string(format!("/proc/{}/cgroup", d.child.id())).unwrap();
    assert!(
        own.trim_end().ends_with("/supervisor"),
        "the daemon is in {own}"
    );
    let mut c = d.client();
    let health = c.ok("health", json!({}));
    assert_eq!(health["cgroups"]["limits_via"], "cgroup_v2", "{health}");
    let mut spawn = |code: &str| -> Value {
        let h = c.ok(
            "spawn_op",
            json!({"connector": CONNECTOR, "op": "py", "args": {"code": code}}),
        )["handle"]
            .clone();
        c.ok("spawn_status", json!({"handle": h, "wait_ms": 60000}))
    };
    let fine = spawn("print('fine')");
    assert_eq!(fine["exit_code"], 0, "{fine}");
    assert_eq!(fine["isolation"]["limits_via"], "cgroup_v2", "{fine}");
    let hog = spawn(MEMORY_HOG);
    assert_eq!(hog["oom_killed"], true, "{hog}");
    assert_eq!(hog["isolation"]["limits_via"], "cgroup_v2", "{hog}");
    std::thread::sleep(Duration::from_millis(200));
    let leaves: Vec<String> = std::fs::read_dir(&delegated.0)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        leaves,
        ["supervisor"],
        "cgroups left behind in the delegated cgroup"
    );
    drop(d);
}

/// A cgroup made for the test and delegated as systemd delegates one: to
/// uid 65534 by ownership, or marked for a root service; removed (with what
/// the daemon made in it) when dropped.
struct Delegated(PathBuf);

impl Delegated {
    fn make(dir: &Path, how: Delegation) -> Delegated {
        std::fs::create_dir(dir).unwrap();
        match how {
            Delegation::ToServiceUser => {
                let nobody = Some(nix::unistd::Uid::from_raw(65534));
                for f in [
                    "",
                    "cgroup.procs",
                    "cgroup.subtree_control",
                    "cgroup.threads",
                ] {
                    nix::unistd::chown(&dir.join(f), nobody, None).unwrap();
                }
            }
            Delegation::MarkedForRoot => xattr::set(dir, "trusted.delegate", b"1").unwrap(),
        }
        Delegated(dir.to_path_buf())
    }
}

impl Drop for Delegated {
    fn drop(&mut self) {
        for _ in 0..100 {
            let children: Vec<PathBuf> = std::fs::read_dir(&self.0)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect();
            for child in &children {
                let _ = std::fs::remove_dir(child);
            }
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The per-spawn cgroup `<pid>-<n>` that process `pid` made under `base`.
fn wait_for_leaf(base: &Path, pid: u32) -> PathBuf {
    for _ in 0..200 {
        let found = std::fs::read_dir(base)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{pid}-")))
                    && p.join("cgroup.procs").exists()
                    && std::fs::read_to_string(p.join("cgroup.procs")).is_ok_and(|t| !t.is_empty())
            });
        if let Some(leaf) = found {
            return leaf;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!(
        "no cgroup of spawnd {pid} appeared under {}",
        base.display()
    );
}
