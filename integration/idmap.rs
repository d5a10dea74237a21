//! A root caller's scopes mounted idmapped (docs/sandbox.md, "Scopes of a
//! root caller"): spawnd as root, the program as 65534, a workspace owned
//! by root with no chown. Where this kernel and the test directory's
//! filesystem can idmap ([`idmap_expected`]), the program sees the
//! workspace as its own, what it writes lands owned by root, and set-id
//! modes and file capabilities stay refused, judged on the host; where they
//! cannot, the run is refused as before, and the refusal says why and how
//! to fix it. The kernel matrix (`scripts/kernels`) runs this suite on
//! 6.1, where tmpfs cannot idmap, and on 6.12, where it can.

use crate::harness;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use harness::{world, As, Report};
use serde_json::Value;

/// Whether this kernel idmaps a mount of `dir`'s filesystem: `None` for a
/// filesystem this test does not know (either answer is then accepted, and
/// checked to be consistent).
fn idmap_expected(dir: &Path) -> Option<bool> {
    let fs = nix::sys::statfs::statfs(dir).unwrap();
    let magic = fs.filesystem_type().0;
    let release = nix::sys::utsname::uname().unwrap();
    let release = release.release().to_string_lossy().into_owned();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let at_least = |a: u32, b: u32| (major, minor) >= (a, b);
    match magic {
        // ext4, xfs
        0xEF53 | 0x5846_5342 => Some(at_least(5, 12)),
        // btrfs
        0x9123_683E => Some(at_least(5, 15)),
        // tmpfs
        0x0102_1994 => Some(at_least(6, 3)),
        // 9p, NFS, FUSE
        0x0102_1997 | 0x6969 | 0x6573_5546 => Some(false),
        _ => None,
    }
}

/// A fresh directory of the world, owned by root, mode 0755: open to the
/// program (65534) only through an idmapping.
fn root_owned_dir(name: &str) -> PathBuf {
    let dir = world().path(&format!("idmap-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A manifest writing `workspace`, with a bash and a python operation,
/// and `extra` lines in its spawn capability.
fn manifest(name: &str, workspace: &Path, extra: &str) -> PathBuf {
    let path = world().path(&format!("outside/idmap-{name}.toml"));
    let ws = workspace.display();
    std::fs::write(
        &path,
        format!(
            r#"[connector]
name = "local://test/idmap-{name}"
version = "1.0.0"

[capabilities.spawn]
programs = [{{ path = "/usr/bin/bash" }}, {{ path = "/usr/bin/python3" }}]
fs_write = ["{ws}"]
cwd = "{ws}"
env_set = {{ PATH = "/usr/bin:/bin" }}
{extra}

[capabilities.spawn.limits]
wall_time_ms = 60000

[capabilities.spawn.operations.sh]
argv = ["bash", "-c", "{{script}}"]
[capabilities.spawn.operations.sh.params.script]
max_len = 8192

[capabilities.spawn.operations.py]
argv = ["python3", "-I", "-c", "{{code}}"]
[capabilities.spawn.operations.py.params.code]
max_len = 8192
"#
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    path
}

fn run(who: As, manifest: &Path, op: &str, key: &str, value: &str) -> Report {
    let out = world()
        .command_for(who, manifest, op, &[(key, value)], &[])
        .output()
        .unwrap();
    Report::from_output(&out)
}

fn stdout(r: &Report) -> &str {
    r.envelope["data"]["stdout"]["text"].as_str().unwrap_or("")
}

/// The run was refused as a root caller's run on a scope 65534 may not
/// write is refused, the refusal saying why `scope` was not idmapped.
fn assert_refused_not_idmapped(r: &Report, scope: &Path, because: &str) {
    assert_eq!(r.exit, Some(5), "{}\n{}", r.envelope, r.stderr);
    let scope = scope.display().to_string();
    let said = refusal(r);
    for says in [
        scope.as_str(),
        "the program runs as uid 65534",
        "may not read+write+search/execute",
        "could not be mounted idmapped to uid 65534",
        because,
        "chown it to 65534:65534 (or to the account [sandbox] run_as names)",
    ] {
        assert!(said.contains(says), "no {says:?} in: {said}");
    }
}

/// What a refused run said: its JSON error and anything on stderr.
fn refusal(r: &Report) -> String {
    let message = r.envelope["error"]["message"].as_str().unwrap_or("");
    format!("{message}\n{}", r.stderr)
}

fn idmapped(r: &Report) -> Vec<String> {
    r.envelope["data"]["isolation"]["idmapped"]
        .as_array()
        .unwrap_or_else(|| panic!("no isolation.idmapped: {}", r.envelope))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// Whether this run idmapped (checked against what the kernel should do),
/// the fallback's refusal checked where it did not.
fn idmapped_here(r: &Report, ws: &Path) -> bool {
    let expected = idmap_expected(ws);
    let did = r.exit == Some(0);
    if let Some(expected) = expected {
        assert_eq!(did, expected, "{}\n{}", r.envelope, r.stderr);
    }
    if !did {
        assert_refused_not_idmapped(r, ws, "cannot be idmapped on Linux");
    }
    did
}

fn a_root_callers_program_owns_a_root_owned_workspace(who: As, name: &str) {
    let ws = root_owned_dir(name);
    std::fs::write(ws.join("existing"), "old\n").unwrap();
    let m = manifest(name, &ws, "");
    let script = "id -u; stat -c %u . existing; echo new > made; mkdir sub; : > sub/deeper; \
                  : > /tmp/own; stat -c %u /tmp/own; echo more >> existing";
    let r = run(who, &m, "sh", "script", script);
    if !idmapped_here(&r, &ws) {
        assert!(!ws.join("made").exists());
        return;
    }
    // Inside: the program is 65534 and owns the workspace and its files; a
    // file of its own elsewhere (its private /tmp) is 65534's.
    assert_eq!(stdout(&r), "65534\n65534\n65534\n65534\n", "{}", r.envelope);
    assert_eq!(idmapped(&r), [ws.display().to_string()], "{}", r.envelope);
    assert_eq!(r.envelope["data"]["isolation"]["uid"], 65534);
    // On the host: everything it wrote is root's, as the workspace is.
    for made in ["made", "sub", "sub/deeper", "existing"] {
        let meta = std::fs::metadata(ws.join(made)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "{made}");
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("existing")).unwrap(),
        "old\nmore\n"
    );
}

#[test]
fn a_root_callers_program_owns_a_root_owned_workspace_run_here() {
    a_root_callers_program_owns_a_root_owned_workspace(As::Root, "own-here");
}

#[test]
fn a_root_callers_program_owns_a_root_owned_workspace_via_the_spawner() {
    a_root_callers_program_owns_a_root_owned_workspace(As::RootViaSpawner, "own-spawner");
}

/// Every way to a set-id file or a file capability, tried by the program
/// on the idmapped workspace it owns; each outcome printed as JSON.
const SET_ID_ATTEMPTS: &str = r#"
import json, os, subprocess
def attempt(f):
    try:
        f()
        return "done"
    except OSError as e:
        return e.strerror
open("plain", "w").write("x")
results = {
    "chmod u+s": attempt(lambda: os.chmod("plain", 0o4755)),
    "chmod g+s": attempt(lambda: os.chmod("plain", 0o2755)),
    "create 4755": attempt(lambda: os.close(os.open("created", os.O_CREAT | os.O_WRONLY, 0o4755))),
    "mkdir g+s": attempt(lambda: os.mkdir("sgid-dir", 0o2755)),
    "setxattr security.capability": attempt(lambda: os.setxattr(
        "plain", "security.capability",
        bytes([1, 0, 0, 2]) + bytes([0xff, 0xff, 0xff, 0xff]) + bytes(12))),
}
def status(argv):
    try:
        return subprocess.run(argv, capture_output=True).returncode
    except OSError as e:
        return e.strerror
results["install -m 4755"] = status(["install", "-m", "4755", "plain", "installed"])
results["setcap"] = status(["setcap", "cap_setuid+ep", "plain"])
results["uid"] = os.getuid()
results["owner"] = os.stat("plain").st_uid
print(json.dumps(results))
"#;

/// A missing write scope in a root-owned checkout (a `build/` a fresh
/// clone lacks) is made root's, as the program writing the checkout would
/// leave it, and idmapped; where the filesystem cannot idmap it goes to
/// the run identity, as every created scope did before.
#[test]
fn a_missing_write_scope_is_made_as_its_directory_owners() {
    let ws = root_owned_dir("created");
    let build = ws.join("build");
    let m = manifest("created", &build, "");
    let r = run(
        As::Root,
        &m,
        "sh",
        "script",
        "stat -c %u .; echo built > out",
    );
    assert_eq!(r.exit, Some(0), "{}\n{}", r.envelope, r.stderr);
    let owner = |p: &Path| {
        let meta = std::fs::metadata(p).unwrap();
        (meta.uid(), meta.gid())
    };
    assert_eq!(stdout(&r), "65534\n", "{}", r.envelope);
    match idmap_expected(&ws) {
        Some(false) => {
            assert_eq!(owner(&build), (65534, 65534));
            return;
        }
        Some(true) => {}
        None if owner(&build) == (65534, 65534) => return,
        None => {}
    }
    assert_eq!(
        idmapped(&r),
        [build.display().to_string()],
        "{}",
        r.envelope
    );
    assert_eq!(owner(&build), (0, 0));
    assert_eq!(owner(&build.join("out")), (0, 0));
}

#[test]
fn set_id_modes_and_file_capabilities_stay_refused_on_an_idmapped_workspace() {
    let ws = root_owned_dir("setid");
    let m = manifest("setid", &ws, "");
    let r = run(As::Root, &m, "py", "code", SET_ID_ATTEMPTS);
    if !idmapped_here(&r, &ws) {
        return;
    }
    let said: Value = serde_json::from_str(stdout(&r).trim())
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", r.envelope, r.stderr));
    // The program believes it owns the file, and still may not.
    assert_eq!(
        (said["uid"].as_u64(), said["owner"].as_u64()),
        (Some(65534), Some(65534)),
        "{said}"
    );
    for call in ["chmod u+s", "chmod g+s", "create 4755", "mkdir g+s"] {
        assert_eq!(said[call], "Operation not permitted", "{call}: {said}");
    }
    assert_ne!(said["setxattr security.capability"], "done", "{said}");
    assert_ne!(said["install -m 4755"], 0, "{said}");
    assert_ne!(said["setcap"], 0, "{said}");
    // Judged on the host: nothing set-id, no file capability, all root's.
    for entry in walk(&ws) {
        let meta = std::fs::symlink_metadata(&entry).unwrap();
        assert_eq!(meta.mode() & 0o6000, 0, "{} is set-id", entry.display());
        assert_eq!(meta.uid(), 0, "{}", entry.display());
        let cap = xattr::get(&entry, "security.capability").unwrap();
        assert!(cap.is_none(), "{} has a file capability", entry.display());
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_scope_the_program_owns_already_is_not_idmapped() {
    let ws = root_owned_dir("owned");
    nix::unistd::chown(&ws, Some(65534.into()), Some(65534.into())).unwrap();
    let m = manifest("owned", &ws, "");
    let r = run(
        As::Root,
        &m,
        "sh",
        "script",
        "echo x > made; stat -c %u made",
    );
    assert_eq!(r.exit, Some(0), "{}\n{}", r.envelope, r.stderr);
    assert_eq!(stdout(&r), "65534\n");
    assert!(idmapped(&r).is_empty(), "{}", r.envelope);
    assert_eq!(std::fs::metadata(ws.join("made")).unwrap().uid(), 65534);
}

#[test]
fn with_unix_sockets_granted_nothing_is_idmapped_and_the_refusal_says_so() {
    let ws = root_owned_dir("sockets");
    let sockets = world().path("idmap-sockets.sock");
    let _ = std::fs::remove_file(&sockets);
    let _listener = std::os::unix::net::UnixListener::bind(&sockets).unwrap();
    let extra = format!("unix_sockets = [\"{}\"]", sockets.display());
    let m = manifest("sockets", &ws, &extra);
    let r = run(As::Root, &m, "sh", "script", "echo x > made");
    assert_eq!(r.exit, Some(5), "{}\n{}", r.envelope, r.stderr);
    let said = refusal(&r);
    for says in [
        ws.display().to_string().as_str(),
        "the program runs as uid 65534",
        "not mounted idmapped to uid 65534 for a manifest that grants unix sockets",
        "chown it to 65534:65534",
    ] {
        assert!(said.contains(says), "no {says:?} in: {said}");
    }
    assert!(!ws.join("made").exists());
}

#[test]
fn a_scope_on_a_filesystem_that_cannot_idmap_is_refused_as_before_saying_why() {
    // ramfs has no idmapped mounts on any kernel.
    let ws = root_owned_dir("ramfs");
    nix::mount::mount(
        Some("ramfs"),
        &ws,
        Some("ramfs"),
        nix::mount::MsFlags::empty(),
        Some("mode=0755"),
    )
    .unwrap();
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }
    let _unmount = Unmount(&ws);
    let m = manifest("ramfs", &ws, "");
    for who in [As::Root, As::RootViaSpawner] {
        let r = run(who, &m, "sh", "script", "echo x > made");
        assert_refused_not_idmapped(
            &r,
            &ws,
            "its filesystem (ramfs) cannot be idmapped on Linux",
        );
        assert!(!ws.join("made").exists());
    }
    // Given to the program's identity, as the refusal says, it runs.
    nix::unistd::chown(&ws, Some(65534.into()), Some(65534.into())).unwrap();
    let r = run(As::Root, &m, "sh", "script", "echo x > made");
    assert_eq!(r.exit, Some(0), "{}\n{}", r.envelope, r.stderr);
    assert!(idmapped(&r).is_empty());
    assert_eq!(std::fs::metadata(ws.join("made")).unwrap().uid(), 65534);
}

#[test]
fn git_policy_works_on_a_root_owned_repository_without_safe_directory() {
    let code = root_owned_dir("code");
    let repo = code.join("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("tracked"), "one\n").unwrap();
    git(&["add", "tracked"]);
    git(&["commit", "-q", "-m", "first"]);
    std::fs::write(repo.join("tracked"), "two\n").unwrap();
    // policies/git.toml as shipped, its `~/code/` pointed at this root-owned one.
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/git.toml"))
            .unwrap();
    assert!(shipped.contains("\"~/code/\""));
    let policy = world().path("outside/idmap-git.toml");
    std::fs::write(
        &policy,
        shipped.replace("\"~/code/\"", &format!("\"{}/\"", code.display())),
    )
    .unwrap();
    let out = world()
        .command_for(
            As::Root,
            &policy,
            "status",
            &[],
            &["--cwd", repo.to_str().unwrap()],
        )
        .output()
        .unwrap();
    let r = Report::from_output(&out);
    if !idmapped_here_read_only(&r, &code) {
        return;
    }
    assert_eq!(
        stdout(&r),
        "## main\n M tracked\n",
        "{}\n{}",
        r.envelope,
        r.stderr
    );
    // The scope holding the repository (and ~/.gitconfig, where root has one).
    assert!(
        idmapped(&r).contains(&code.display().to_string()),
        "{}",
        r.envelope
    );
}

/// [`idmapped_here`] for a read scope: where it cannot be idmapped, git
/// runs and finds the repository of dubious ownership, as before.
fn idmapped_here_read_only(r: &Report, scope: &Path) -> bool {
    let expected = idmap_expected(scope);
    let did = idmapped(r).contains(&scope.display().to_string());
    if let Some(expected) = expected {
        assert_eq!(did, expected, "{}\n{}", r.envelope, r.stderr);
    }
    if !did {
        let stderr = r.envelope["data"]["stderr"]["text"].as_str().unwrap_or("");
        assert!(stderr.contains("dubious ownership"), "{}", r.envelope);
    }
    did
}

/// Unmounts a test's mount when the test ends, passed or not.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// A root-owned checkout may hold hard links to root's files elsewhere on
/// its filesystem: root's own tools make them (`git clone` of a local
/// mirror links its objects, `cp -al`, pnpm's store). The program owns
/// the workspace's files through the idmapping, but a linked inode is also
/// a file outside every scope: it must not be able to read, write or chmod
/// it (judged on the host: the outside file is unchanged).
#[test]
fn a_hard_link_in_the_workspace_gives_no_hold_on_root_files_outside_it() {
    let ws = root_owned_dir("hardlink");
    let outside = world().path("outside/idmap-hardlink-target");
    std::fs::write(&outside, "root's own\n").unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::hard_link(&outside, ws.join("linked")).unwrap();
    let m = manifest("hardlink", &ws, "");
    let script = "cat linked; echo written >> linked; chmod 666 linked; true";
    let r = run(As::Root, &m, "sh", "script", script);
    // Judged on the host: the file outside is as it was, and was not read.
    assert!(
        !stdout(&r).contains("root's own"),
        "read it: {}",
        r.envelope
    );
    let meta = std::fs::metadata(&outside).unwrap();
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "root's own\n",
        "{}",
        r.envelope
    );
    assert_eq!(meta.mode() & 0o7777, 0o600, "{}", r.envelope);
    // The workspace is not idmapped: the run is refused as before, saying
    // why (where the filesystem could idmap at all).
    assert_eq!(r.exit, Some(5), "{}\n{}", r.envelope, r.stderr);
    if idmap_expected(&ws) == Some(true) {
        let said = refusal(&r);
        assert!(said.contains("hard link"), "{said}");
        assert!(
            said.contains(&ws.join("linked").display().to_string()),
            "{said}"
        );
    }
}

/// A scope that holds a mount of a system path (a bind of `/etc` in a
/// build root, as chroot builders make) must not give the program root's
/// files there: system paths are never idmapped.
#[test]
fn a_system_path_mounted_inside_a_scope_is_not_idmapped() {
    let ws = root_owned_dir("holds-etc");
    let etc = ws.join("etc");
    std::fs::create_dir(&etc).unwrap();
    nix::mount::mount(
        Some("/etc"),
        &etc,
        None::<&str>,
        nix::mount::MsFlags::MS_BIND,
        None::<&str>,
    )
    .unwrap();
    let _unmount = Unmount(etc.clone());
    let m = manifest("holds-etc", &ws, "");
    let code = r#"
import json, os
def attempt(f):
    try:
        f()
        return "done"
    except OSError as e:
        return e.strerror
print(json.dumps({
    "read shadow": attempt(lambda: open("etc/shadow").read()),
    "owner of passwd": os.stat("etc/passwd").st_uid,
    "write access to passwd": os.access("etc/passwd", os.W_OK),
}))
"#;
    let r = run(As::Root, &m, "py", "code", code);
    if r.exit == Some(5) {
        // Not idmapped, and 65534 may not write the root-owned workspace.
        let said = refusal(&r);
        let says = format!("it holds another mount ({})", etc.display());
        assert!(said.contains(&says), "no {says:?} in: {said}");
        return;
    }
    assert_eq!(r.exit, Some(0), "{}\n{}", r.envelope, r.stderr);
    let said: Value = serde_json::from_str(stdout(&r).trim())
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", r.envelope, r.stderr));
    assert_ne!(said["read shadow"], "done", "{said}");
    assert_ne!(said["owner of passwd"], 65534, "{said}");
    assert_eq!(said["write access to passwd"], false, "{said}");
}
