//! The fresh root, built inside the child's own mount namespace: propagation
//! cut from the host, a tmpfs staged on `/sys`, every step of the spec
//! mounted into it — first the steps every sandbox shares
//! ([`stage_base_in_child`]), then the system paths (a spare sandbox
//! does both before its order, [`Staged::mount_more`], with the small
//! files that follow them when no scope comes first), then the scopes
//! ([`finish_root_in_child`]) —
//! then `pivot_root` into it and the old root detached. Everything
//! is nosuid and nodev (device nodes excepted) and noexec unless the spec
//! grants execution.
//!
//! Two kinds of paths are never trusted: scope sources are opened here and
//! checked against the device and inode the parent resolved (a path swapped
//! in between is refused), and every mount target is reached with
//! `beneath::open_beneath`, which refuses symlinks — a target can pass
//! through a writable scope an earlier run could have planted links in.
//! Mounts go onto the opened descriptors, never onto path strings. A scope
//! the parent mounted idmapped ([`super::idmap`]) arrives as a detached
//! tree cloned from the descriptor it verified, and is moved onto its
//! target instead of bound; it is re-opened and checked like any scope.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};

use super::beneath::{
    creatable_beneath, creates_on_root_filesystem, fd_path, open_beneath, through_final_links,
    Create,
};
use super::child::ScopeId;
use super::spec::{base_mounts, BindSource, MountKind, MountStep, SandboxSpec, TmpfsSizes};
use super::{SetupError, Step};
use crate::sys::{detach_mount_when_told, mount_setattr_fd, move_detached_tree, WaitingDetach};

mod pivot;
use pivot::pivot_into;

/// Where the new root is staged before `pivot_root`, inside our own mount
/// namespace: a path no scope or system path may be on or under (the
/// sandbox has no /sys), so staging hides nothing a bind still needs.
const STAGE: &str = "/sys";
/// Where the old root is parked during `pivot_root`.
const OLD_ROOT: &str = ".oldroot";
/// The same, as the path the unmount helper is given after the pivot.
const OLD_ROOT_INSIDE: &std::ffi::CStr = c"/.oldroot";

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;

fn step(what: impl Into<std::borrow::Cow<'static, str>>) -> impl FnOnce(nix::Error) -> SetupError {
    let what = what.into();
    move |e| SetupError::new(Step::Root, what, std::io::Error::from(e))
}

fn io_step(
    what: impl Into<std::borrow::Cow<'static, str>>,
) -> impl FnOnce(std::io::Error) -> SetupError {
    let what = what.into();
    move |e| SetupError::new(Step::Root, what, e)
}

/// A root being built: the staged tmpfs, with the steps every sandbox
/// shares ([`base_mounts`]: /tmp, /dev, /dev/shm, /proc) in place.
pub(super) struct Staged {
    stage: OwnedFd,
    base: Vec<MountStep>,
    /// Where in `base` the steps of [`Staged::mount_more`] begin.
    more_from: usize,
    /// The old root's unmount helper, cloned ahead (a spare sandbox).
    detach: Option<WaitingDetach>,
}

impl Staged {
    /// Mounts `steps` (system paths: binds by path and symbolic links, and
    /// small files; [`crate::sandbox::spec::steps_mountable_ahead`]) after
    /// the ones staged; an order's mount steps must then go on with them.
    pub(super) fn mount_more(&mut self, steps: &[MountStep]) -> Result<(), SetupError> {
        apply_steps(&self.stage, steps, ScopeSources::none(), None, None)?;
        self.more_from = self.base.len();
        self.base.extend_from_slice(steps);
        Ok(())
    }

    /// Clones the old root's unmount helper now, to wait until the pivot
    /// ([`detach_mount_when_told`]): a spare sandbox does it while it
    /// waits for its order, so the clone is not on the way to the program.
    pub(super) fn clone_detach_helper_ahead(&mut self) -> Result<(), SetupError> {
        // Its working directory is a copy of this one's: at the root, which
        // the pivot moves along, not in a host directory it would keep.
        nix::unistd::chdir("/").map_err(step("chdir(/)"))?;
        let helper = detach_mount_when_told(OLD_ROOT_INSIDE).map_err(|e| {
            SetupError::new(Step::Root, "clone the old root's unmount helper ahead", e)
        })?;
        self.detach = Some(helper);
        Ok(())
    }

    /// The descriptors a staged root holds (for init to keep them across its
    /// descriptor clean-up).
    pub(super) fn fds_mut(&mut self) -> impl Iterator<Item = &mut OwnedFd> {
        std::iter::once(&mut self.stage).chain(self.detach.as_mut().map(|d| &mut d.trigger))
    }
}

/// Stages a tmpfs and mounts the steps every sandbox shares. Needs the ids mapped (it creates mount points), nothing of the
/// request: a spare sandbox does it before its order comes.
pub(super) fn stage_base_in_child() -> Result<Staged, SetupError> {
    // The host's mounts stay as the namespace copied them (slaves of the
    // host's shared ones) until the order comes, so a spare sandbox
    // still sees the host as it is then; the staged tmpfs, mounted on a
    // slave, propagates nowhere.
    let stage = Path::new(STAGE);
    mount(
        Some("tmpfs"),
        stage,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755,size=16m"),
    )
    .map_err(step("mount(tmpfs, new root)"))?;
    let stage_fd = nix::fcntl::open(
        stage,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(step("open new root"))?;
    let base = base_mounts();
    apply_steps(&stage_fd, &base, ScopeSources::none(), None, None)?;
    let more_from = base.len();
    Ok(Staged {
        stage: stage_fd,
        base,
        more_from,
        detach: None,
    })
}

/// A root in place: the verified scope descriptors (in `spec.scopes`
/// order) for the Landlock rules, the scopes mounted idmapped, the helper
/// still finishing the old root's detach, which init must reap before the
/// program starts, and a `#!` script's copy when one was bound at the
/// program's path.
pub(super) struct Rooted {
    /// The scopes, verified.
    pub scope_fds: Vec<OwnedFd>,
    /// The scopes (indices into `spec.scopes`) whose idmapped trees were
    /// moved onto their targets ([`super::idmap`]).
    pub idmapped: Vec<u32>,
    /// The unmount helper's pid (see [`detach_mount_in_background`]).
    pub detaching: Option<i32>,
    /// The script's copy bound at `spec.program` (O_PATH), if one was
    /// ([`bind_script_copy`]): init then runs the script by that path.
    pub script_copy: Option<OwnedFd>,
}

/// The program file init holds, as [`MountKind::Program`] binds it.
#[derive(Clone, Copy)]
pub(super) enum ProgramFile<'a> {
    /// The descriptor the gate hashed: bound if its path still holds it
    /// ([`bind_program`]).
    Hashed(BorrowedFd<'a>),
    /// A `#!` script's sealed copy (a memfd with the digest the gate
    /// decided on): copied onto the sandbox's own filesystem and bound at
    /// the script's path where that path lies on it ([`bind_script_copy`]).
    SealedScript(BorrowedFd<'a>),
    /// A program others than root may rewrite, as its sealed copy (a memfd
    /// with the digest the gate decided on): copied into a tmpfs of its own
    /// and bound at its path ([`bind_program_copy`]).
    SealedProgram(BorrowedFd<'a>),
}

/// Mounts the rest of `spec` onto a staged root and pivots into it; runs
/// `meanwhile` while the old root is being detached. `meanwhile` must not
/// resolve paths: the host's root is still reachable at the old root's
/// mount point until the detach is done. `program` is the file the gate
/// hashed, or a script's sealed copy ([`MountKind::Program`] binds only
/// that file). A scope the parent mounted idmapped has its detached tree
/// taken from `scopes` and moved onto its target instead of a bind; it is
/// verified like every scope, its descriptor kept for Landlock.
pub(super) fn finish_root_in_child(
    staged: Staged,
    spec: &SandboxSpec,
    scopes: &mut [ScopeId],
    program: ProgramFile<'_>,
    meanwhile: &mut dyn FnMut() -> Result<(), SetupError>,
) -> Result<Rooted, SetupError> {
    let Staged {
        stage,
        base,
        more_from,
        detach,
    } = staged;
    // From here on nothing the host mounts or unmounts reaches the sandbox.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(step("mount(/, MS_REC|MS_PRIVATE)"))?;
    // Binds made ahead were slaves of the host's mounts until now: what the
    // host mounted beneath them meanwhile came in without their attributes.
    // They are applied again, over everything now beneath them.
    for m in base.get(more_from..).unwrap_or_default() {
        if let MountKind::Bind { writable, exec, .. } = m.kind {
            restrict_mount(
                &stage,
                relative(&m.target),
                bind_attrs(writable, exec),
                true,
                &m.target.display().to_string(),
            )?;
        }
    }
    let Some(rest) = spec.mounts.strip_prefix(base.as_slice()) else {
        return Err(SetupError::new(
            Step::Root,
            "the sandbox's mount table does not begin with the shared steps",
            std::io::Error::from_raw_os_error(libc::EINVAL),
        ));
    };
    let scope_fds = scopes
        .iter()
        .map(open_verified)
        .collect::<Result<Vec<_>, _>>()?;
    let mut trees: Vec<Option<OwnedFd>> = scopes.iter_mut().map(|s| s.idmapped.take()).collect();
    let idmapped = (0..trees.len())
        .filter(|&i| trees[i].is_some())
        .filter_map(|i| u32::try_from(i).ok())
        .collect();
    let sources = ScopeSources {
        verified: &scope_fds,
        idmapped: &mut trees,
    };
    let script_copy = apply_steps(&stage, rest, sources, Some(program), Some(spec))?;
    adjust_tmpfs(&stage, spec.tmpfs, spec.tmp_exec)?;
    drop(stage);
    let detaching = pivot_into(Path::new(STAGE), detach, meanwhile)?;
    Ok(Rooted {
        scope_fds,
        idmapped,
        detaching,
        script_copy,
    })
}

/// Applies mount steps in order. Each device node's bind is then made
/// read-only, nosuid and noexec (it keeps `dev`, the point of binding it):
/// the device stays readable and writable (a read-only mount does not stop
/// writes to a device), but its inode — the host's own node — cannot be
/// chmod'ed, chown'ed or touched. Returns a script's copy, when a step
/// bound one ([`bind_script_copy`]). `spec` is the request's (absent for
/// the shared steps).
fn apply_steps(
    stage: &OwnedFd,
    steps: &[MountStep],
    mut scopes: ScopeSources<'_>,
    program: Option<ProgramFile<'_>>,
    spec: Option<&SandboxSpec>,
) -> Result<Option<OwnedFd>, SetupError> {
    let mut script_copy = None;
    for m in steps {
        if let Some(copy) = apply_step(stage, m, &mut scopes, program, spec)? {
            script_copy = Some(copy);
        }
    }
    for m in steps {
        if matches!(m.kind, MountKind::Device { .. }) {
            restrict_mount(
                stage,
                relative(&m.target),
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
                false,
                &m.target.display().to_string(),
            )?;
        }
    }
    Ok(script_copy)
}

/// Opens a scope in this mount namespace (a bind needs a mount of our own) and
/// checks it is still the inode the parent resolved.
fn open_verified(scope: &ScopeId) -> Result<OwnedFd, SetupError> {
    use nix::fcntl::{open, OFlag};
    let shown = scope.canonical.display().to_string();
    let fd = open(
        &scope.canonical,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(step(format!("open({shown}, O_PATH|O_NOFOLLOW)")))?;
    let st = nix::sys::stat::fstat(&fd).map_err(step(format!("fstat({shown})")))?;
    if (st.st_dev, st.st_ino) != (scope.dev, scope.ino) {
        return Err(SetupError::new(
            Step::Root,
            format!("scope {shown} changed between check and mount"),
            std::io::Error::from_raw_os_error(libc::ESTALE),
        ));
    }
    Ok(fd)
}

/// The SysV IPC limits of the sandbox's own IPC namespace, written through
/// its fresh `/proc` before that turns read-only. The kernel's defaults let
/// one namespace hold far more memory than any spawn's limit, in objects
/// that outlive their processes and that rlimits do not count:
/// - `shm_rmid_forced`: a shared memory segment is destroyed once no process
///   has it attached, so its pages are always in some process's address
///   space (and so under `RLIMIT_AS`, or in the cgroup);
/// - at most 64 segments, 16 message queues of 16 KiB (256 KiB in all), and
///   32 semaphore sets with 8000 semaphores in all.
///
/// A value the kernel refuses stops the setup: nothing runs with the defaults.
fn limit_sysv_ipc(proc_root: &Path) -> Result<(), SetupError> {
    for (key, value) in [
        ("sys/kernel/shm_rmid_forced", "1"),
        ("sys/kernel/shmmni", "64"),
        ("sys/kernel/msgmni", "16"),
        ("sys/kernel/msgmnb", "16384"),
        ("sys/kernel/sem", "250 8000 32 32"),
    ] {
        std::fs::write(proc_root.join(key), value).map_err(|e| {
            SetupError::new(Step::Root, format!("write {value:?} to /proc/{key}"), e)
        })?;
    }
    Ok(())
}

/// Gives the private /tmp and /dev/shm the request's sizes, and /tmp
/// execution when `tmp_exec` grants it: the shared steps mounted them
/// before any request was known, noexec. Each is remounted only when it
/// differs. A remount sets the mount's flags as well as the tmpfs's size,
/// so it repeats nosuid and nodev, and noexec unless execution is granted.
fn adjust_tmpfs(stage: &OwnedFd, sizes: TmpfsSizes, tmp_exec: bool) -> Result<(), SetupError> {
    let base = super::spec::base_tmpfs_sizes();
    for (target, size, exec, unchanged) in [
        (
            "tmp",
            sizes.tmp,
            tmp_exec,
            sizes.tmp == base.tmp && !tmp_exec,
        ),
        ("dev/shm", sizes.shm, false, sizes.shm == base.shm),
    ] {
        if unchanged {
            continue;
        }
        let root = open_beneath(stage, Path::new(target), Create::Nothing)?;
        let data = format!("size={size}");
        let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        if !exec {
            flags |= MsFlags::MS_NOEXEC;
        }
        let shown = if exec { ", exec" } else { "" };
        mount(
            None::<&str>,
            &fd_path(&root),
            None::<&str>,
            flags,
            Some(data.as_str()),
        )
        .map_err(step(format!("mount(/{target}, MS_REMOUNT, {data}{shown})")))?;
    }
    Ok(())
}

/// Binds the program file read-only (and executable) at its path, opened
/// here in this mount namespace, if that is still the file the gate hashed
/// (`program`, same device and inode). If the path was replaced meanwhile
/// (before the check, or between it and the bind), nothing is bound: init then runs the hashed descriptor, and the file it
/// could reach through `/proc/self/exe` is no longer at that path.
fn bind_program(
    stage: &OwnedFd,
    rel: &Path,
    path: &Path,
    program: BorrowedFd<'_>,
) -> Result<(), SetupError> {
    use nix::fcntl::{open, OFlag};
    let shown = path.display().to_string();
    let identity = |fd: BorrowedFd<'_>| nix::sys::stat::fstat(fd).map(|st| (st.st_dev, st.st_ino));
    let hashed = identity(program).map_err(step("fstat(the program)"))?;
    let Ok(here) = open(
        path,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    ) else {
        return Ok(());
    };
    if identity(here.as_fd()).ok() != Some(hashed) {
        return Ok(());
    }
    let target = open_beneath(stage, rel, Create::File(0o644))?;
    match mount_onto(
        &fd_path(&here),
        &target,
        MsFlags::MS_BIND,
        None,
        None,
        &shown,
    ) {
        Ok(()) => {}
        // Replaced after the check: the file `here` names is unlinked, and
        // the bind finds no path through it. As above, nothing is bound.
        Err(e) if e.source.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        Err(e) => return Err(e),
    }
    restrict_mount(
        stage,
        rel,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        false,
        &shown,
    )
}

/// Whether a regular file stands at `rel` beneath the stage (never
/// through a link).
fn regular_file_beneath(stage: &OwnedFd, rel: &Path) -> bool {
    open_beneath(stage, rel, Create::Nothing)
        .ok()
        .and_then(|fd| nix::sys::stat::fstat(&fd).ok())
        .is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG)
}

/// Binds a `#!` script's sealed copy at the script's path
/// ([`bind_sealed_copy`]), so that it is executed by that path and its
/// interpreter is given that path (bash's `$0`, python's `sys.argv[0]`
/// and `__file__`) instead of `/dev/fd/3`. Returns the copy (O_PATH) for
/// init to check the path, give the file its Landlock rule and execute it.
///
/// The interpreter opens the script again by its path once it runs, so
/// nothing outside the sandbox may be able to change the way to it
/// meanwhile. That holds on the sandbox's own filesystems
/// ([`SandboxSpec::program_path_is_the_sandboxs_own`]), and on a host
/// filesystem only where root alone may change the path
/// ([`SandboxSpec::program_root_only`]): elsewhere (a scope, say) a host
/// process could rename a directory on the way, or replace the file, which
/// detaches a bind on it in every other mount namespace, and the
/// interpreter would read other bytes than those the gate hashed. There,
/// and for a script larger than [`SEALED_COPY_MAX`], nothing is bound:
/// the script runs from its sealed descriptor as `/dev/fd/3`.
fn bind_script_copy(
    stage: &OwnedFd,
    rel: &Path,
    path: &Path,
    sealed: BorrowedFd<'_>,
    spec: &SandboxSpec,
) -> Result<Option<OwnedFd>, SetupError> {
    // On the sandbox's own filesystems, where the path is free; or over
    // the script itself where only root may change the way to it
    // ([`SandboxSpec::program_root_only`]).
    let own = spec.program_path_is_the_sandboxs_own() && creatable_beneath(stage, rel);
    let over_root_only = spec.program_root_only && regular_file_beneath(stage, rel);
    if !own && !over_root_only {
        return Ok(None);
    }
    bind_sealed_copy(stage, rel, path, sealed)
}

/// Binds the sealed copy of a program others than root may rewrite at the
/// program's path ([`bind_sealed_copy`]), so that `/proc/self/exe` names
/// that path (programs find what lies beside them through it) while what
/// runs is the copy. Init checks that the path holds the copy and executes
/// the descriptor it opened there, so a path changed meanwhile fails the
/// run rather than running something else: any path that takes a bind
/// will do (on the sandbox's own filesystem, or over the host file within
/// a scope). Elsewhere, and for a program over [`SEALED_COPY_MAX`], nothing
/// is bound and the program runs from its sealed descriptor.
fn bind_program_copy(
    stage: &OwnedFd,
    rel: &Path,
    path: &Path,
    sealed: BorrowedFd<'_>,
) -> Result<Option<OwnedFd>, SetupError> {
    if !creatable_beneath(stage, rel) && !regular_file_beneath(stage, rel) {
        return Ok(None);
    }
    bind_sealed_copy(stage, rel, path, sealed)
}

/// Where a sealed copy is staged: a tmpfs of its own on the staged root,
/// detached (and its directory removed) once the copy is bound.
const SEALED_COPY_STAGE: &str = ".spawnd-copy";

/// The largest sealed copy bound at a path; a larger program runs from its
/// sealed descriptor.
const SEALED_COPY_MAX: u64 = 256 << 20;

/// Writes a sealed memfd's bytes into a tmpfs made for them (nosuid,
/// nodev; the pages are the sandbox's memory), binds the file read-only
/// over `rel` (created, with the directories on its way, where missing),
/// detaches the stage and removes its directory: the program can neither
/// change the file nor find it anywhere else. Returns the copy (O_PATH);
/// `None` for a copy over [`SEALED_COPY_MAX`].
fn bind_sealed_copy(
    stage: &OwnedFd,
    rel: &Path,
    path: &Path,
    sealed: BorrowedFd<'_>,
) -> Result<Option<OwnedFd>, SetupError> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    let shown = path.display().to_string();
    let len = nix::sys::stat::fstat(sealed)
        .map_err(step("fstat(the sealed copy)"))?
        .st_size;
    let Some(len) = u64::try_from(len).ok().filter(|&l| l <= SEALED_COPY_MAX) else {
        return Ok(None);
    };
    let at = Path::new(SEALED_COPY_STAGE);
    let dir = open_beneath(stage, at, Create::Dir(0o700))?;
    let data = format!("mode=0700,size={}", len + (1 << 20));
    mount_onto(
        Path::new("tmpfs"),
        &dir,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("tmpfs"),
        Some(&data),
        &shown,
    )?;
    let staged = open_beneath(stage, at, Create::Nothing)?;
    let file = openat(
        &staged,
        "copy",
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::from_bits_truncate(0o555),
    )
    .map_err(step(format!("create the copy of {shown}")))?;
    copy_sealed(sealed, &std::fs::File::from(file))
        .map_err(io_step(format!("write the copy of {shown}")))?;
    let target = open_beneath(stage, rel, Create::File(0o644))?;
    let from = open_beneath(stage, &at.join("copy"), Create::Nothing)?;
    mount_onto(
        &fd_path(&from),
        &target,
        MsFlags::MS_BIND,
        None,
        None,
        &shown,
    )?;
    nix::mount::umount2(&fd_path(&staged), nix::mount::MntFlags::MNT_DETACH)
        .map_err(step(format!("detach the stage of the copy of {shown}")))?;
    drop((staged, dir));
    nix::unistd::unlinkat(stage, at, nix::unistd::UnlinkatFlags::RemoveDir)
        .map_err(step(format!("remove the stage of the copy of {shown}")))?;
    restrict_mount(
        stage,
        rel,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        false,
        &shown,
    )?;
    Ok(Some(from))
}

/// Copies the sealed memfd's bytes into `to`: sealed against writes,
/// growing and shrinking, they are the bytes whose digest was compared
/// with the gate's when the memfd was written.
fn copy_sealed(sealed: BorrowedFd<'_>, to: &std::fs::File) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 << 10];
    let mut offset: i64 = 0;
    loop {
        let n = match nix::sys::uio::pread(sealed, &mut buf, offset) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        std::io::Write::write_all(&mut &*to, &buf[..n])?;
        offset += n as i64;
    }
}

/// Where a [`MountKind::File`] is written before it is bound: in the
/// staged root's own tmpfs, and unlinked once bound (the bind keeps it).
const SMALL_FILE_SOURCE: &str = ".spawnd-file";

/// Puts `contents` at the target (a target that is a symlink, as a host's
/// `/etc/resolv.conf` often is, at where it points). Missing on the fresh
/// root's own tmpfs, the file is written there in place, mode 0444: the
/// root is made read-only at the pivot, so it needs no mount of its own.
/// Otherwise (it exists, or it lies under a mount — a scope or a system
/// path) the contents go into a fresh file of the staged root, which is
/// bound over the target (created only on the fresh root itself, never on
/// a mount), unlinked, and the bind made read-only. Either way the program
/// can neither change the file nor find it anywhere else.
fn bind_small_file(
    stage: &OwnedFd,
    rel: &Path,
    contents: &str,
    shown: &str,
) -> Result<(), SetupError> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    let rel = &through_final_links(stage, rel)?;
    // Created only on the fresh root's own tmpfs: never through a mount
    // (a scope or a system path) onto a host filesystem.
    let on_root = creates_on_root_filesystem(stage, rel)?;
    if on_root && creatable_beneath(stage, rel) {
        return write_small_file_in_place(stage, rel, contents, shown);
    }
    let source = Path::new(SMALL_FILE_SOURCE);
    let file = openat(
        stage,
        source,
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::from_bits_truncate(0o444),
    )
    .map_err(step(format!("create the file for {shown}")))?;
    std::io::Write::write_all(&mut std::fs::File::from(file), contents.as_bytes())
        .map_err(io_step(format!("write the file for {shown}")))?;
    let create = if on_root {
        Create::File(0o644)
    } else {
        Create::Nothing
    };
    let target = open_beneath(stage, rel, create)?;
    let from = open_beneath(stage, source, Create::Nothing)?;
    mount_onto(
        &fd_path(&from),
        &target,
        MsFlags::MS_BIND,
        None,
        None,
        shown,
    )?;
    nix::unistd::unlinkat(stage, source, nix::unistd::UnlinkatFlags::NoRemoveDir)
        .map_err(step(format!("unlink the file for {shown}")))?;
    restrict_mount(
        stage,
        rel,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        false,
        shown,
    )
}

/// Writes `contents` into a new file at `rel` on the fresh root's own
/// tmpfs (what is missing of its directories made there too), mode 0444.
/// Refuses anything already at `rel` and a symlink on the way.
fn write_small_file_in_place(
    stage: &OwnedFd,
    rel: &Path,
    contents: &str,
    shown: &str,
) -> Result<(), SetupError> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(SetupError::new(
            Step::Root,
            format!("write {shown}: not a file's path"),
            std::io::Error::from_raw_os_error(libc::EINVAL),
        ));
    };
    let dir = open_beneath(stage, parent, Create::Dir(0o755))?;
    let file = openat(
        &dir,
        name,
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::from_bits_truncate(0o444),
    )
    .map_err(step(format!("create {shown}")))?;
    std::io::Write::write_all(&mut std::fs::File::from(file), contents.as_bytes())
        .map_err(io_step(format!("write {shown}")))
}

fn relative(target: &Path) -> &Path {
    target.strip_prefix("/").unwrap_or(target)
}

/// Mounts `source` (a path or a descriptor's magic link) onto the opened target.
fn mount_onto(
    source: &Path,
    target: &OwnedFd,
    flags: MsFlags,
    fstype: Option<&str>,
    data: Option<&str>,
    shown: &str,
) -> Result<(), SetupError> {
    mount(Some(source), &fd_path(target), fstype, flags, data)
        .map_err(step(format!("mount({}, {shown})", source.display())))
}

/// Applies mount attributes to the mount now at `rel` (re-opened: the target
/// descriptor still names the directory underneath it).
fn restrict_mount(
    stage: &OwnedFd,
    rel: &Path,
    attrs: u64,
    recursive: bool,
    shown: &str,
) -> Result<(), SetupError> {
    let root = open_beneath(stage, rel, Create::Nothing)?;
    mount_setattr_fd(&root, recursive, attrs, 0).map_err(io_step(format!("mount_setattr({shown})")))
}

/// Mounts one step of the spec onto the staged root, at its target reached
/// beneath the stage (never through a link). Returns the script's copy a
/// [`MountKind::Program`] step bound, if it bound one.
fn apply_step(
    stage: &OwnedFd,
    m: &MountStep,
    scopes: &mut ScopeSources<'_>,
    program: Option<ProgramFile<'_>>,
    spec: Option<&SandboxSpec>,
) -> Result<Option<OwnedFd>, SetupError> {
    let rel = relative(&m.target);
    let shown = m.target.display().to_string();
    if let MountKind::Program = m.kind {
        return match (program, spec) {
            (Some(ProgramFile::Hashed(fd)), _) => {
                bind_program(stage, rel, &m.target, fd).map(|()| None)
            }
            (Some(ProgramFile::SealedScript(fd)), Some(spec)) => {
                bind_script_copy(stage, rel, &m.target, fd, spec)
            }
            (Some(ProgramFile::SealedProgram(fd)), _) => {
                bind_program_copy(stage, rel, &m.target, fd)
            }
            _ => Err(SetupError::new(
                Step::Root,
                format!("bind the program {shown}: no descriptor"),
                std::io::Error::from_raw_os_error(libc::EBADF),
            )),
        };
    }
    match &m.kind {
        MountKind::Tmpfs { mode, size } => mount_tmpfs(stage, rel, *mode, *size, &shown),
        MountKind::Proc => mount_proc(stage, rel, &shown),
        MountKind::Device { host } => bind_device(stage, rel, host, &shown),
        // Bound above, from the program's file.
        MountKind::Program => Ok(()),
        MountKind::File { contents } => bind_small_file(stage, rel, contents, &shown),
        MountKind::Symlink { target: link } => make_symlink(stage, rel, link, &shown),
        MountKind::Bind {
            source: BindSource::Scope(i),
            dir,
            writable,
            exec,
        } if scopes.idmapped.get(*i).is_some_and(Option::is_some) => {
            let tree = scopes.idmapped.get_mut(*i).and_then(Option::take);
            move_idmapped_onto(stage, rel, tree, *dir, bind_attrs(*writable, *exec), &shown)
        }
        MountKind::Bind {
            source,
            dir,
            writable,
            exec,
        } => {
            let from = bind_source(source, scopes.verified, &shown)?;
            bind_onto(
                stage,
                rel,
                &from,
                *dir,
                bind_attrs(*writable, *exec),
                &shown,
            )
        }
    }
    .map(|()| None)
}

/// A private tmpfs of `size` bytes whose root has `mode`: nosuid, nodev,
/// noexec.
fn mount_tmpfs(
    stage: &OwnedFd,
    rel: &Path,
    mode: u32,
    size: u64,
    shown: &str,
) -> Result<(), SetupError> {
    let target = open_beneath(stage, rel, Create::Dir(0o755))?;
    let data = format!("mode={mode:o},size={size}");
    mount_onto(
        Path::new("tmpfs"),
        &target,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("tmpfs"),
        Some(&data),
        shown,
    )
}

/// The sandbox's own /proc (of its pid namespace), with memfds sealed
/// noexec and, when the namespace's uid 0 may, the SysV IPC limits written
/// ([`limit_sysv_ipc`]), then made read-only as a whole. The kernel refuses
/// a fresh /proc in a user namespace when the host's has parts covered by
/// other mounts: the error then says so.
fn mount_proc(stage: &OwnedFd, rel: &Path, shown: &str) -> Result<(), SetupError> {
    let target = open_beneath(stage, rel, Create::Dir(0o555))?;
    mount_onto(
        Path::new("proc"),
        &target,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("proc"),
        None,
        shown,
    )
    .map_err(|mut e| {
        if e.source.raw_os_error() == Some(libc::EPERM) {
            e.call.to_mut().push_str(
                " (the host's /proc has parts covered by other mounts, as systemd's \
                 ProtectKernelTunables= or a container's masked paths do, and the kernel \
                 then refuses a fresh /proc in a user namespace; run spawnd without them)",
            );
        }
        e
    })?;
    // Per pid namespace: memfds are created noexec-sealed and MFD_EXEC is
    // refused (seccomp refuses memfd_create without MFD_NOEXEC_SEAL too).
    // Written now, before the whole of /proc becomes read-only.
    let _ = std::fs::write(Path::new(STAGE).join(rel).join("sys/vm/memfd_noexec"), "2");
    // Only the namespace's uid 0 may write the IPC limits: an
    // unprivileged spawnd maps nothing but its own uid, and there
    // the seccomp filter refuses SysV IPC objects instead.
    if nix::unistd::geteuid().is_root() {
        limit_sysv_ipc(&Path::new(STAGE).join(rel))?;
    }
    // Read-only as a whole (a child mapped to host root
    // would otherwise pass the permission checks of /proc/sys,
    // sysrq-trigger and the like); Landlock refuses writes there too.
    restrict_mount(stage, rel, MOUNT_ATTR_RDONLY, false, shown)
}

/// Binds the host's device node `host` onto an empty file (its attributes
/// are restricted after every step, see [`apply_steps`]).
fn bind_device(stage: &OwnedFd, rel: &Path, host: &Path, shown: &str) -> Result<(), SetupError> {
    let target = open_beneath(stage, rel, Create::File(0o644))?;
    mount_onto(host, &target, MsFlags::MS_BIND, None, None, shown)
}

/// Creates the symbolic link `link` at `rel`, in its parent directory
/// reached beneath the stage.
fn make_symlink(stage: &OwnedFd, rel: &Path, link: &Path, shown: &str) -> Result<(), SetupError> {
    let parent = rel.parent().unwrap_or(Path::new(""));
    let name = rel.file_name().ok_or_else(|| {
        SetupError::new(
            Step::Root,
            format!("symlink {shown}"),
            std::io::Error::from_raw_os_error(libc::EINVAL),
        )
    })?;
    let dir = open_beneath(stage, parent, Create::Dir(0o755))?;
    nix::unistd::symlinkat(link, &dir, name)
        .map_err(step(format!("symlink({}, {shown})", link.display())))
}

/// What a bind mounts: a system path as it is, or a scope through its
/// verified descriptor (its magic link), so a path swapped in meanwhile is
/// never what is bound.
fn bind_source(
    source: &BindSource,
    scope_fds: &[OwnedFd],
    shown: &str,
) -> Result<PathBuf, SetupError> {
    match source {
        BindSource::System(p) => Ok(p.clone()),
        BindSource::Scope(i) => {
            let fd = scope_fds.get(*i).ok_or_else(|| {
                SetupError::new(
                    Step::Root,
                    format!("scope descriptor {i} for {shown}"),
                    std::io::Error::from_raw_os_error(libc::EBADF),
                )
            })?;
            Ok(fd_path(fd))
        }
    }
}

/// Binds `from` (recursively) onto a directory or an empty file at `rel`,
/// then gives the whole of it `attrs`.
fn bind_onto(
    stage: &OwnedFd,
    rel: &Path,
    from: &Path,
    dir: bool,
    attrs: u64,
    shown: &str,
) -> Result<(), SetupError> {
    let create = if dir {
        Create::Dir(0o755)
    } else {
        Create::File(0o644)
    };
    let target = open_beneath(stage, rel, create)?;
    mount_onto(
        from,
        &target,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None,
        None,
        shown,
    )?;
    restrict_mount(stage, rel, attrs, true, shown)
}

/// Moves a scope's idmapped tree (cloned detached and idmapped by the
/// parent from the scope's pinned descriptor, [`super::idmap`]) onto the
/// directory or empty file at `rel`, then gives the whole of it `attrs`,
/// as [`bind_onto`] does a bind.
fn move_idmapped_onto(
    stage: &OwnedFd,
    rel: &Path,
    tree: Option<OwnedFd>,
    dir: bool,
    attrs: u64,
    shown: &str,
) -> Result<(), SetupError> {
    let tree = tree.ok_or_else(|| {
        SetupError::new(
            Step::Root,
            format!("the idmapped tree of {shown}"),
            std::io::Error::from_raw_os_error(libc::EBADF),
        )
    })?;
    let create = if dir {
        Create::Dir(0o755)
    } else {
        Create::File(0o644)
    };
    let target = open_beneath(stage, rel, create)?;
    move_detached_tree(&tree, &target)
        .map_err(io_step(format!("move_mount(the idmapped tree of {shown})")))?;
    restrict_mount(stage, rel, attrs, true, shown)
}

/// Where a scope's bind comes from: its verified descriptor, or the
/// idmapped tree the parent made of it (taken when moved).
struct ScopeSources<'a> {
    /// The scopes re-opened here and verified, in `spec.scopes` order.
    verified: &'a [OwnedFd],
    /// Each scope's idmapped tree, if it has one.
    idmapped: &'a mut [Option<OwnedFd>],
}

impl ScopeSources<'_> {
    /// No scopes: the steps every sandbox shares, and system paths.
    fn none() -> ScopeSources<'static> {
        ScopeSources {
            verified: &[],
            idmapped: &mut [],
        }
    }
}

/// A bind's attributes: never suid or devices; read-only unless writable,
/// no execution unless granted.
fn bind_attrs(writable: bool, exec: bool) -> u64 {
    let mut attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if !writable {
        attrs |= MOUNT_ATTR_RDONLY;
    }
    if !exec {
        attrs |= MOUNT_ATTR_NOEXEC;
    }
    attrs
}
