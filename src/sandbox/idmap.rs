//! docs/sandbox.md, "Scopes of a root caller": a root caller's program
//! runs as `run_as` (65534 unless set), never as host uid 0, so a checkout
//! owned by root would be closed to it (and git would call it of dubious
//! ownership). Each scope (`fs_write`, `fs_read`, `fs_exec`: a directory
//! or a regular file) whose owner is not the program's uid is mounted
//! idmapped instead: the
//! parent (root, in the host's user namespace, which owns the scope's
//! filesystem) clones the scope's mount detached (`open_tree`), gives
//! it the id maps of a user namespace made for them (`OWNER RUN_UID 1`,
//! `OWNER_GID RUN_GID 1`) and hands the tree to init, which moves it onto
//! the scope's target ([`super::mounts`]). The program then sees the scope
//! as its own, and what it creates lands on the host owned by the scope's
//! owner; ids other than the owner's are not mapped and give it nothing.
//! The program is still never host uid 0, and set-id modes and file
//! capabilities stay out of its reach (the seccomp filter refuses set-id
//! modes; it has no capability to set `security.capability`); a read-only
//! scope stays read-only (no chmod, utime or xattr there), though the
//! owner's read bits now apply to the program. Never a scope that is, lies
//! in or holds a system path (`/etc`, `/usr`…, which no `fs_write` may
//! touch): root's files there stay closed to the program as they were;
//! nor a scope that holds another mount (its files are not the scope's,
//! and may be a system path's).
//! Not with a manifest that grants unix sockets: a socket in an idmapped
//! scope would take the program's connect as its owner's. Not a scope
//! holding a file of its owner with another name (a hard link), whose
//! other names may lie outside it ([`linked_elsewhere`]).
//!
//! Where the kernel or the filesystem cannot idmap (`mount_setattr` before
//! Linux 5.12, tmpfs before 6.3, 9p, NFS, FUSE; spawnd without
//! CAP_SYS_ADMIN over the filesystem), the scope is bound as before and
//! the run identity's access is checked as before, the refusal then saying
//! why the scope was not idmapped.
//!
//! Runs in the parent, single-threaded (the spawner, or `spawnd run`),
//! before the sandbox is cloned or a spare sandbox is given its order.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;

use super::as_caller::CallerCreds;
use super::child::ScopeId;
use super::launch::LaunchOrder;
use super::spec::{Access, BindSource, MountKind};
use crate::manifest::system_path_overlap;
use crate::sys::{clone_detached_tree, clone_process, exit_immediately, idmap_detached_tree};

/// A scope that is not idmapped though its owner is not the
/// program's uid, and why ([`why_not_idmapped`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NotIdmapped {
    /// Its index in `spec.scopes`.
    pub index: usize,
    /// The reason, with the fixes.
    pub why: String,
}

/// Whether a scope owned by `owner` (uid, gid) is mounted idmapped
/// for a program running as `run` (uid, gid) on behalf of `caller` (`None`:
/// spawnd's own identity, root). Only where the owner is not the program's
/// uid, and only for a caller who may give the program the owner's rights:
/// root, or a caller who owns the scope and is in its group (a `run_as`
/// for everyone), so no caller gains through the program what it may not
/// do itself.
pub(super) fn wanted(caller: Option<&CallerCreds>, run: (u32, u32), owner: (u32, u32)) -> bool {
    if owner.0 == run.0 {
        return false;
    }
    match caller {
        None => true,
        Some(c) if c.uid == 0 => true,
        Some(c) => c.uid == owner.0 && (c.gid == owner.1 || c.groups.contains(&owner.1)),
    }
}

/// Mounts idmapped, for the order's program, every bound scope (a
/// directory or a regular file, off the system paths) whose owner is not
/// its uid ([`wanted`]):
/// each such scope's detached tree goes into its [`ScopeId::idmapped`].
/// Returns the scopes that could not be idmapped, and why. Only for a
/// privileged order; never an error: a scope not idmapped is bound as it
/// was, and the run identity's access check decides.
pub(super) fn idmap_scopes(order: &LaunchOrder, scopes: &mut [ScopeId]) -> Vec<NotIdmapped> {
    let mut not_idmapped = Vec::new();
    if !order.privileged {
        return not_idmapped;
    }
    let grants_sockets = order
        .spec
        .landlock
        .iter()
        .any(|rule| matches!(rule.access, Access::UnixSocket));
    let run = (order.uid, order.gid);
    // Read once, at the first scope that may be idmapped.
    let mut mount_table: Option<Result<String, String>> = None;
    for step in &order.spec.mounts {
        let MountKind::Bind {
            source: BindSource::Scope(index),
            ..
        } = step.kind
        else {
            continue;
        };
        let Some(scope) = scopes.get_mut(index) else {
            continue;
        };
        let Ok(st) = nix::sys::stat::fstat(&scope.pinned) else {
            continue;
        };
        let kind = st.st_mode & libc::S_IFMT;
        let owner = (st.st_uid, st.st_gid);
        if !matches!(kind, libc::S_IFDIR | libc::S_IFREG)
            || system_path_overlap(&scope.canonical).is_some()
            || !wanted(order.check_as.as_ref(), run, owner)
        {
            continue;
        }
        if grants_sockets {
            not_idmapped.push(NotIdmapped {
                index,
                why: format!(
                    "it is owned by {}:{} and is not mounted idmapped to uid {} for a manifest that grants unix sockets (a socket there would take the program's connect as its owner's); {}",
                    owner.0,
                    owner.1,
                    run.0,
                    fixes(owner, run)
                ),
            });
            continue;
        }
        let table = mount_table.get_or_insert_with(|| {
            std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())
        });
        if let Some(why) = holds_mounts(&scope.canonical, table) {
            not_idmapped.push(NotIdmapped {
                index,
                why: format!(
                    "it is owned by {}:{} and is not mounted idmapped to uid {}: {why} (an idmapping would give the program its owner's files there too, a system path's among them); {}",
                    owner.0,
                    owner.1,
                    run.0,
                    fixes(owner, run)
                ),
            });
            continue;
        }
        if let Some(linked) = linked_elsewhere(&scope.canonical, owner) {
            not_idmapped.push(NotIdmapped {
                index,
                why: format!(
                    "it is owned by {}:{} and is not mounted idmapped to uid {}: it holds {linked}, a file with another name (a hard link), which may lie outside the scope, and an idmapping would give the program that file wherever its other names are (copy instead of linking: `git clone --no-hardlinks`, `cp` without `-l`, pnpm's `package-import-method=copy`); {}",
                    owner.0,
                    owner.1,
                    run.0,
                    fixes(owner, run)
                ),
            });
            continue;
        }
        match idmapped_tree(scope, owner, run) {
            Ok(tree) => scope.idmapped = Some(tree),
            Err(e) => not_idmapped.push(NotIdmapped {
                index,
                why: why_not_idmapped(&e, &filesystem_name(scope), &kernel_release(), owner, run),
            }),
        }
    }
    not_idmapped
}

/// The first file in the scope at `canonical` (the scope itself, for a
/// file) that has another name and would be mapped (`owner`'s uid or
/// gid), or `None`. A hard link's other names may lie anywhere on the
/// filesystem (a local `git clone` links its objects, pnpm its store, `cp
/// -al` everything): through an idmapping the program would own that file
/// there too. Directories are not links; the walk follows no symlink and
/// stays on the scope's filesystem (a scope holding another mount is not
/// idmapped anyway); what cannot be read counts as linked.
fn linked_elsewhere(canonical: &std::path::Path, owner: (u32, u32)) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    for entry in walkdir::WalkDir::new(canonical)
        .follow_links(false)
        .same_file_system(true)
    {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => return Some(format!("a path it could not look at ({e})")),
        };
        if entry.file_type().is_dir() {
            continue;
        }
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            Err(e) => return Some(format!("a path it could not look at ({e})")),
        };
        if meta.nlink() > 1 && (meta.uid() == owner.0 || meta.gid() == owner.1) {
            return Some(entry.path().display().to_string());
        }
    }
    None
}

/// Why a scope at `canonical` cannot be idmapped because other mounts lie
/// beneath it (a bind of `/etc` in a build root, a disk mounted in a
/// checkout), or `None` when none does. Their files are no part of the
/// scope's filesystem, and a system path's must stay closed to the program;
/// the clone ([`clone_detached_tree`]) leaves them out even if one appears
/// after this look. `table` is `/proc/self/mountinfo`, or why it could not
/// be read: then the scope counts as holding mounts.
fn holds_mounts(canonical: &std::path::Path, table: &Result<String, String>) -> Option<String> {
    match table {
        Ok(table) => {
            mount_beneath(canonical, table).map(|point| format!("it holds another mount ({point})"))
        }
        Err(e) => Some(format!(
            "whether it holds other mounts is unknown (/proc/self/mountinfo: {e})"
        )),
    }
}

/// The first mount point of a `mountinfo` table strictly beneath `dir`, as
/// the table writes it (space, tab, newline and backslash as `\ooo`).
fn mount_beneath(dir: &std::path::Path, mountinfo: &str) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let mut prefix = Vec::new();
    for &b in dir.as_os_str().as_bytes() {
        match b {
            b' ' | b'\t' | b'\n' | b'\\' => prefix.extend(format!("\\{b:03o}").bytes()),
            _ => prefix.push(b),
        }
    }
    if prefix.last() != Some(&b'/') {
        prefix.push(b'/');
    }
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .find(|point| point.len() > prefix.len() && point.as_bytes().starts_with(&prefix))
        .map(str::to_string)
}

/// The scope's mount (without the mounts beneath it), cloned detached and
/// idmapped `owner` → `run`.
fn idmapped_tree(scope: &ScopeId, owner: (u32, u32), run: (u32, u32)) -> std::io::Result<OwnedFd> {
    let userns = mapping_namespace(owner, run)?;
    let tree = clone_detached_tree(scope.pinned.as_fd())?;
    idmap_detached_tree(&tree, userns.as_fd())?;
    Ok(tree)
}

/// User namespaces made for idmappings, by (owner uid, owner gid, run uid,
/// run gid): a long-lived spawner makes each one once. At most
/// [`KEPT_NAMESPACES`]; the oldest goes first.
static NAMESPACES: Mutex<Vec<(MappingKey, OwnedFd)>> = Mutex::new(Vec::new());

/// A mapping namespace's owner uid and gid, then run uid and gid.
type MappingKey = (u32, u32, u32, u32);

/// How many idmapping namespaces are kept.
const KEPT_NAMESPACES: usize = 16;

/// A user namespace (its `/proc/PID/ns/user`, opened) whose uid map is
/// `OWNER RUN_UID 1` and gid map `OWNER_GID RUN_GID 1`: as a mount's
/// idmapping, files owned by the owner show as the run identity's, and
/// files the run identity creates are stored as the owner's.
fn mapping_namespace(owner: (u32, u32), run: (u32, u32)) -> std::io::Result<OwnedFd> {
    let key = (owner.0, owner.1, run.0, run.1);
    let mut kept = NAMESPACES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, fd)) = kept.iter().find(|(k, _)| *k == key) {
        return fd.try_clone();
    }
    let made = make_mapping_namespace(owner, run)?;
    if kept.len() >= KEPT_NAMESPACES {
        kept.remove(0);
    }
    kept.push((key, made.try_clone()?));
    Ok(made)
}

/// Clones a helper into a new user namespace, writes its maps, opens its
/// namespace and lets it go: it waits only for its pipe to close.
fn make_mapping_namespace(owner: (u32, u32), run: (u32, u32)) -> std::io::Result<OwnedFd> {
    let (wait_end, hold_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let pid = clone_process(libc::CLONE_NEWUSER)?;
    if pid == 0 {
        // The helper: holds its namespace until the parent closes the pipe.
        drop(hold_end);
        let mut byte = [0u8; 1];
        let _ = nix::unistd::read(&wait_end, &mut byte);
        exit_immediately(0);
    }
    drop(wait_end);
    let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
    let opened = std::fs::write(
        proc_dir.join("uid_map"),
        format!("{} {} 1\n", owner.0, run.0),
    )
    .and_then(|()| {
        std::fs::write(
            proc_dir.join("gid_map"),
            format!("{} {} 1\n", owner.1, run.1),
        )
    })
    .and_then(|()| {
        nix::fcntl::open(
            &proc_dir.join("ns/user"),
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(std::io::Error::from)
    });
    drop(hold_end);
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    opened
}

/// The filesystem a scope is on, by name where it is a known one.
fn filesystem_name(scope: &ScopeId) -> String {
    let Ok(fs) = nix::sys::statfs::fstatfs(&scope.pinned) else {
        return "unknown".to_string();
    };
    // The type's width and sign are the C library's (`i64` with glibc, an
    // unsigned word with musl): widened to one type here.
    #[allow(clippy::unnecessary_cast)]
    let magic = fs.filesystem_type().0 as u64;
    let known: &[(u64, &str)] = &[
        (0xEF53, "ext4"),
        (0x5846_5342, "xfs"),
        (0x9123_683E, "btrfs"),
        (0x0102_1994, "tmpfs"),
        (0x8584_58F6, "ramfs"),
        (0x794C_7630, "overlayfs"),
        (0x0102_1997, "9p"),
        (0x6969, "nfs"),
        (0x6573_5546, "fuse"),
        (0xF2F5_2010, "f2fs"),
        (0x2FC1_2FC1, "zfs"),
        (0xFF53_4D42, "cifs"),
        (0x5346_4846, "wslfs"),
    ];
    known
        .iter()
        .find(|(m, _)| *m == magic)
        .map_or_else(|| format!("magic {magic:#x}"), |(_, name)| name.to_string())
}

/// The running kernel's release (`uname -r`).
fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// Why a scope of `owner` could not be idmapped for `run`, from the error
/// met, the scope's filesystem and the kernel's release, and the two fixes.
pub(super) fn why_not_idmapped(
    e: &std::io::Error,
    filesystem: &str,
    kernel: &str,
    owner: (u32, u32),
    run: (u32, u32),
) -> String {
    let cause = match e.raw_os_error() {
        Some(libc::ENOSYS) => format!(
            "Linux {kernel} has no idmapped mounts (mount_setattr, from 5.12)"
        ),
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => format!(
            "its filesystem ({filesystem}) cannot be idmapped on Linux {kernel} (tmpfs only from 6.3; 9p, NFS and FUSE not at all)"
        ),
        Some(libc::EPERM) => format!(
            "spawnd may not idmap its filesystem ({filesystem}): it lacks CAP_SYS_ADMIN over it (spawnd in a user namespace, as in a container)"
        ),
        _ => format!("idmapping it failed on its filesystem ({filesystem}), Linux {kernel}: {e}"),
    };
    format!(
        "it is owned by {}:{} and could not be mounted idmapped to uid {}: {cause}; {}",
        owner.0,
        owner.1,
        run.0,
        fixes(owner, run)
    )
}

/// How to open a scope of `owner` to a program running as `run` without an
/// idmapping: give it to the run identity, or run as its owner (never as
/// root, which no program runs as).
fn fixes(owner: (u32, u32), run: (u32, u32)) -> String {
    if owner.0 == 0 {
        format!(
            "chown it to {}:{} (or to the account [sandbox] run_as names)",
            run.0, run.1
        )
    } else {
        format!(
            "chown it to {}:{}, or set [sandbox] run_as = \"{}:{}\"",
            run.0, run.1, owner.0, owner.1
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(uid: u32, gid: u32, groups: &[u32]) -> CallerCreds {
        CallerCreds {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn a_root_callers_scope_of_another_owner_is_idmapped() {
        assert!(wanted(None, (65534, 65534), (0, 0)));
        assert!(wanted(
            Some(&caller(0, 0, &[0])),
            (65534, 65534),
            (1000, 1000)
        ));
        assert!(wanted(None, (1001, 1001), (0, 0)));
    }

    #[test]
    fn a_scope_the_program_owns_is_not_idmapped() {
        assert!(!wanted(None, (65534, 65534), (65534, 65534)));
        // The uid decides: its group need not be the program's.
        assert!(!wanted(None, (65534, 65534), (65534, 0)));
        assert!(!wanted(
            Some(&caller(1000, 1000, &[1000])),
            (1000, 1000),
            (1000, 1000)
        ));
    }

    #[test]
    fn another_callers_scope_is_idmapped_only_when_the_caller_owns_it_and_its_group() {
        let run_as = (2000, 2000);
        let alice = caller(1000, 1000, &[1000, 27]);
        assert!(wanted(Some(&alice), run_as, (1000, 1000)));
        assert!(wanted(Some(&alice), run_as, (1000, 27)));
        // A group the caller is not in: the program would gain its rights.
        assert!(!wanted(Some(&alice), run_as, (1000, 50)));
        // Someone else's scope the caller may write: never the owner's rights.
        assert!(!wanted(Some(&alice), run_as, (1500, 1000)));
        assert!(!wanted(Some(&alice), run_as, (0, 0)));
    }

    #[test]
    fn a_mount_strictly_beneath_the_scope_is_found_as_the_table_writes_it() {
        let table = "\
22 1 254:0 / / rw - ext4 /dev/vda rw
30 22 254:0 /etc /ci/ws/etc rw - ext4 /dev/vda rw
31 22 0:40 / /ci/ws2 rw - tmpfs tmpfs rw
32 22 0:41 / /ci/my\\040ws/cache rw - tmpfs tmpfs rw
33 22 0:42 / /ci/wsx/y rw - tmpfs tmpfs rw
";
        let beneath = |dir: &str| mount_beneath(std::path::Path::new(dir), table);
        assert_eq!(beneath("/ci/ws").as_deref(), Some("/ci/ws/etc"));
        assert_eq!(beneath("/ci/my ws").as_deref(), Some("/ci/my\\040ws/cache"));
        // The scope's own mount, and a sibling sharing a name's prefix, are not beneath it.
        assert_eq!(beneath("/ci/ws2"), None);
        assert_eq!(beneath("/ci/w"), None);
        assert_eq!(beneath("/ci/ws/etc"), None);
        assert_eq!(beneath("/").as_deref(), Some("/ci/ws/etc"));
    }

    #[test]
    fn the_reason_names_the_filesystem_the_kernel_and_the_fixes() {
        let e = std::io::Error::from_raw_os_error(libc::EINVAL);
        let why = why_not_idmapped(&e, "tmpfs", "6.1.0-57-amd64", (0, 0), (65534, 65534));
        assert!(why.contains("owned by 0:0"), "{why}");
        assert!(
            why.contains("tmpfs") && why.contains("6.1.0-57-amd64"),
            "{why}"
        );
        assert!(
            why.contains("chown it to 65534:65534 (or to the account [sandbox] run_as names)"),
            "{why}"
        );
        // Never root as run_as: a program never runs as uid 0.
        assert!(!why.contains("run_as = "), "{why}");
        let why = why_not_idmapped(&e, "9p", "6.1.0", (1000, 1000), (65534, 65534));
        assert!(
            why.contains("chown it to 65534:65534, or set [sandbox] run_as = \"1000:1000\""),
            "{why}"
        );
        let e = std::io::Error::from_raw_os_error(libc::ENOSYS);
        let why = why_not_idmapped(&e, "ext4", "5.10.0", (0, 0), (65534, 65534));
        assert!(why.contains("Linux 5.10.0 has no idmapped mounts"), "{why}");
        let e = std::io::Error::from_raw_os_error(libc::EPERM);
        let why = why_not_idmapped(&e, "ext4", "6.12.0", (0, 0), (65534, 65534));
        assert!(why.contains("CAP_SYS_ADMIN"), "{why}");
    }
}
