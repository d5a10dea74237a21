//! The fresh root, built inside the child's own mount namespace: propagation
//! cut from the host, a tmpfs staged on `/tmp`, every step of the spec mounted
//! into it (scopes from the descriptors opened before the child existed, so a
//! path swapped afterwards changes nothing), then `pivot_root` into it and the
//! old root detached. Everything is nosuid and nodev (device nodes excepted)
//! and noexec unless the spec grants execution.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use super::child::ScopeId;
use super::spec::{BindSource, MountKind, MountStep, SandboxSpec};
use super::sys::mount_setattr;
use super::StepError;

/// Where the new root is staged before `pivot_root` (inside our own mount namespace).
const STAGE: &str = "/tmp";
/// Where the old root is parked during `pivot_root`.
const OLD_ROOT: &str = ".oldroot";

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;

fn step(what: impl Into<String>) -> impl FnOnce(nix::Error) -> StepError {
    let what = what.into();
    move |e| StepError::new(what, std::io::Error::from(e))
}

fn io_step(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StepError {
    let what = what.into();
    move |e| StepError::new(what, e)
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// Builds the root described by `spec` and pivots into it.
pub fn build_root_in_child(spec: &SandboxSpec, scopes: &[ScopeId]) -> Result<(), StepError> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(step("mount(/, MS_REC|MS_PRIVATE)"))?;
    let scope_fds = scopes
        .iter()
        .map(open_verified)
        .collect::<Result<Vec<_>, _>>()?;
    let scope_fds = scope_fds.as_slice();
    let stage = Path::new(STAGE);
    mount(
        Some("tmpfs"),
        stage,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755,size=16m"),
    )
    .map_err(step("mount(tmpfs, new root)"))?;
    for m in &spec.mounts {
        apply_step(stage, m, scope_fds)?;
    }
    pivot_into(stage)
}

/// Opens a scope in this mount namespace (a bind needs a mount of our own) and
/// checks it is still the inode the parent resolved.
fn open_verified(scope: &ScopeId) -> Result<OwnedFd, StepError> {
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
        return Err(StepError::new(
            format!("scope {shown} changed between check and mount"),
            std::io::Error::from_raw_os_error(libc::ESTALE),
        ));
    }
    Ok(fd)
}

fn inside(stage: &Path, target: &Path) -> PathBuf {
    stage.join(target.strip_prefix("/").unwrap_or(target))
}

fn apply_step(stage: &Path, m: &MountStep, scope_fds: &[OwnedFd]) -> Result<(), StepError> {
    let target = inside(stage, &m.target);
    let shown = m.target.display().to_string();
    match &m.kind {
        MountKind::Tmpfs { mode, size } => {
            mkdir_all(&target)?;
            let data = format!("mode={mode:o},size={size}");
            let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            mount(
                Some("tmpfs"),
                &target,
                Some("tmpfs"),
                flags,
                Some(data.as_str()),
            )
            .map_err(step(format!("mount(tmpfs, {shown})")))
        }
        MountKind::Proc => {
            mkdir_all(&target)?;
            let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            mount(Some("proc"), &target, Some("proc"), flags, None::<&str>)
                .map_err(step(format!("mount(proc, {shown})")))?;
            // A child mapped to host root would pass the permission checks of
            // /proc/sys: make it read-only (Landlock refuses the writes too).
            let sys = target.join("sys");
            mount(
                Some(sys.as_path()),
                &sys,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )
            .map_err(step("mount(/proc/sys, MS_BIND)"))?;
            mount_setattr(
                &cpath(&sys),
                true,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                0,
            )
            .map_err(io_step("make /proc/sys read-only"))
        }
        MountKind::Device { host } => {
            touch(&target)?;
            mount(
                Some(host.as_path()),
                &target,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(step(format!("mount({}, {shown}, MS_BIND)", host.display())))?;
            mount_setattr(
                &cpath(&target),
                false,
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
                0,
            )
            .map_err(io_step(format!("restrict {shown}")))
        }
        MountKind::Symlink { target: link } => {
            if let Some(parent) = target.parent() {
                mkdir_all(parent)?;
            }
            std::os::unix::fs::symlink(link, &target)
                .map_err(io_step(format!("symlink({}, {shown})", link.display())))
        }
        MountKind::Bind {
            source,
            dir,
            writable,
            exec,
        } => {
            let from = match source {
                BindSource::System(p) => p.clone(),
                BindSource::Scope(i) => {
                    let fd = scope_fds.get(*i).ok_or_else(|| {
                        StepError::new(
                            format!("scope descriptor {i} for {shown}"),
                            std::io::Error::from_raw_os_error(libc::EBADF),
                        )
                    })?;
                    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
                }
            };
            if *dir {
                mkdir_all(&target)?
            } else {
                touch(&target)?
            }
            let flags = MsFlags::MS_BIND | MsFlags::MS_REC;
            mount(
                Some(from.as_path()),
                &target,
                None::<&str>,
                flags,
                None::<&str>,
            )
            .map_err(step(format!("mount({shown}, MS_BIND|MS_REC)")))?;
            let mut attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
            if !writable {
                attrs |= MOUNT_ATTR_RDONLY;
            }
            if !exec {
                attrs |= MOUNT_ATTR_NOEXEC;
            }
            mount_setattr(&cpath(&target), true, attrs, 0)
                .map_err(io_step(format!("mount_setattr({shown}, recursive)")))
        }
    }
}

fn mkdir_all(path: &Path) -> Result<(), StepError> {
    std::fs::create_dir_all(path).map_err(io_step(format!("mkdir -p {}", path.display())))
}

fn touch(path: &Path) -> Result<(), StepError> {
    if let Some(parent) = path.parent() {
        mkdir_all(parent)?;
    }
    if path.exists() {
        return Ok(());
    }
    std::fs::File::create(path)
        .map(drop)
        .map_err(io_step(format!("create mount point {}", path.display())))
}

fn pivot_into(stage: &Path) -> Result<(), StepError> {
    let old = stage.join(OLD_ROOT);
    mkdir_all(&old)?;
    nix::unistd::pivot_root(stage, &old).map_err(step("pivot_root"))?;
    nix::unistd::chdir("/").map_err(step("chdir(/)"))?;
    let old_inside = Path::new("/").join(OLD_ROOT);
    umount2(&old_inside, MntFlags::MNT_DETACH).map_err(step("umount2(old root, MNT_DETACH)"))?;
    std::fs::remove_dir(&old_inside).map_err(io_step("rmdir old root"))?;
    let root = CString::new("/").unwrap_or_default();
    mount_setattr(
        &root,
        false,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        0,
    )
    .map_err(io_step("make / read-only"))
}
