//! Where per-sandbox cgroups go on the unified (v2) hierarchy, and setting
//! that place up once per process.
//!
//! On v2 a cgroup that enables controllers for its children
//! (`cgroup.subtree_control`) may hold no process itself, so sandboxes
//! cannot be made below the cgroup spawnd runs in without moving spawnd
//! first. Two places, in this order:
//!
//! - **A delegated cgroup** (the daemon only, [`Placement::Delegated`]):
//!   systemd's `Delegate=yes` (the shipped unit) hands the service its own
//!   cgroup. spawnd moves itself into a leaf, `<own>/supervisor`, enables
//!   `memory` and `pids` for its children and makes each sandbox's cgroup
//!   beside that leaf. A cgroup counts as delegated when systemd marked it
//!   (`trusted.delegate` or `user.delegate` set to `1`), or, for a service
//!   user, when that user owns it and its `cgroup.procs` and
//!   `cgroup.subtree_control`, which is what delegation to a user is.
//! - **`spawnd/` at the hierarchy's root** (root only): for `spawnd run`
//!   and for a root daemon outside a delegated cgroup, as container
//!   runtimes' cgroupfs drivers do. The root cgroup may hold processes and
//!   enable controllers at once; `spawnd/` holds none.
//!
//! Anything else (no `memory` or `pids` controller on v2, a service user
//! without delegation, a cgroup namespace whose root holds processes)
//! leaves v2 unusable, and the reason is kept for `health`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The directory each sandbox's v2 cgroup is made in, with `memory` and
/// `pids` enabled for its children.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct V2Base {
    /// The directory (under the cgroup2 mount).
    pub dir: PathBuf,
}

/// Which places a process may use (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// `spawnd/` at the root, for root only (`spawnd run`, `health`).
    RootOnly,
    /// Its own cgroup when delegated, else as [`Placement::RootOnly`]:
    /// the daemon, which may move itself.
    Delegated,
}

/// The controllers every sandbox's cgroup needs.
const CONTROLLERS: [&str; 2] = ["memory", "pids"];

/// The leaf a delegated daemon moves itself into.
pub(crate) const SUPERVISOR_LEAF: &str = "supervisor";

/// Sets up the place for this process's sandboxes' cgroups, or says why
/// there is none. `root` is whether spawnd has root's powers here.
pub(crate) fn settle(placement: Placement, root: bool) -> Result<V2Base, String> {
    let mount = mount_point().ok_or("no cgroup2 hierarchy is mounted")?;
    let available = read_words(&mount.join("cgroup.controllers"));
    if let Some(missing) = CONTROLLERS
        .iter()
        .find(|c| !available.iter().any(|a| a == *c))
    {
        return Err(format!(
            "the {missing} controller is not on the cgroup v2 hierarchy at {} (its cgroup.controllers lists: {})",
            mount.display(),
            if available.is_empty() { "none".to_string() } else { available.join(" ") }
        ));
    }
    let own = own_cgroup().ok_or("cannot read this process's cgroup from /proc/self/cgroup")?;
    let own_dir = mount.join(own.trim_start_matches('/'));
    if placement == Placement::Delegated && own != "/" && delegated(&own_dir) {
        return settle_delegated(&own_dir);
    }
    if !root {
        return Err(format!(
            "spawnd is not root and its cgroup {} is not delegated to it (run the daemon with systemd's Delegate=yes, as the shipped unit does)",
            own_dir.display()
        ));
    }
    settle_at_root(&mount)
}

/// `<mount>/spawnd`, with the controllers enabled at the root and in it.
fn settle_at_root(mount: &Path) -> Result<V2Base, String> {
    enable_for_children(mount)?;
    let dir = mount.join("spawnd");
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("mkdir {}: {e}", dir.display())),
    }
    enable_for_children(&dir)?;
    Ok(V2Base { dir })
}

/// Moves this process into `<own>/supervisor` and enables the controllers
/// in `own` for the sandboxes made beside it. Processes other than this one
/// already in `own` (none, in a service whose main process is spawnd) would
/// keep the controllers off: the write fails and says so.
fn settle_delegated(own: &Path) -> Result<V2Base, String> {
    let leaf = own.join(SUPERVISOR_LEAF);
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("mkdir {}: {e}", leaf.display())),
    }
    write(&leaf.join("cgroup.procs"), &std::process::id().to_string())?;
    enable_for_children(own)?;
    Ok(V2Base {
        dir: own.to_path_buf(),
    })
}

/// Writes `+memory +pids` to `dir`'s `cgroup.subtree_control`, unless both
/// are enabled there already.
fn enable_for_children(dir: &Path) -> Result<(), String> {
    let file = dir.join("cgroup.subtree_control");
    let enabled = read_words(&file);
    if CONTROLLERS.iter().all(|c| enabled.iter().any(|e| e == c)) {
        return Ok(());
    }
    write(&file, "+memory +pids").map_err(|e| {
        format!("{e} (a cgroup whose controllers its children share may hold no process itself: is this a cgroup namespace whose root holds processes?)")
    })
}

/// Whether `dir` was delegated to this process (see the module doc).
fn delegated(dir: &Path) -> bool {
    let marked = ["trusted.delegate", "user.delegate"].iter().any(|name| {
        xattr::get(dir, name)
            .ok()
            .flatten()
            .is_some_and(|v| v == b"1")
    });
    if marked {
        return true;
    }
    let euid = nix::unistd::geteuid().as_raw();
    euid != 0
        && ["", "cgroup.procs", "cgroup.subtree_control"]
            .iter()
            .all(|f| std::fs::metadata(dir.join(f)).is_ok_and(|m| m.uid() == euid))
}

/// This process's cgroup on the unified hierarchy (`0::<path>`).
fn own_cgroup() -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

/// Where cgroup2 is mounted: `/sys/fs/cgroup` when it is cgroup2 there (or
/// `/sys/fs/cgroup/unified`, a hybrid host's), else the mount table's first.
fn mount_point() -> Option<PathBuf> {
    let is_v2 = |dir: &str| {
        nix::sys::statfs::statfs(dir)
            .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
    };
    for usual in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        if is_v2(usual) {
            return Some(PathBuf::from(usual));
        }
    }
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    first_cgroup2_mount(&table)
}

/// The first cgroup2 mount point in a `mountinfo` text.
fn first_cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        (right.split_whitespace().next() == Some("cgroup2"))
            .then(|| left.split_whitespace().nth(4).map(PathBuf::from))
            .flatten()
    })
}

fn read_words(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .map(|t| t.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

fn write(file: &Path, value: &str) -> Result<(), String> {
    std::fs::write(file, value).map_err(|e| format!("write {value:?} to {}: {e}", file.display()))
}

/// Whether the host has swap a sandbox could use: without swap accounting
/// (no `memory.swap.max`), `memory.max` alone bounds a sandbox only when
/// there is no swap to page it out to.
pub(super) fn host_has_swap() -> bool {
    std::fs::read_to_string("/proc/swaps").map_or(true, |t| t.lines().count() > 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_cgroup2_mount_is_found_in_a_mount_table() {
        let table = "\
25 30 0:22 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
26 30 0:23 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
27 30 0:24 / /mnt/other rw - cgroup2 cgroup2 rw
";
        assert_eq!(
            first_cgroup2_mount(table),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            first_cgroup2_mount("1 2 0:1 / / rw - ext4 /dev/sda rw\n"),
            None
        );
    }

    /// A directory marked by systemd, or owned with its two files by a
    /// service user, is delegated; root's own files are not a mark.
    #[test]
    fn delegation_is_systemds_mark_or_a_service_users_ownership() {
        let d = tempfile::tempdir().unwrap();
        for f in ["cgroup.procs", "cgroup.subtree_control"] {
            std::fs::write(d.path().join(f), "").unwrap();
        }
        let is_root = nix::unistd::geteuid().is_root();
        assert_eq!(delegated(d.path()), !is_root, "owned by the euid");
        if xattr::set(d.path(), "user.delegate", b"1").is_ok() {
            assert!(delegated(d.path()));
        }
    }
}
