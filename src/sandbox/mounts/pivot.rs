//! The last step of a root: `pivot_root` into the staged tmpfs, and the
//! host's old root detached by a helper (see [`detach_mount_in_background`])
//! while init goes on, until the mount point can be removed.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::{umount2, MntFlags};

use super::{
    io_step, step, SetupError, Step, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY, OLD_ROOT, OLD_ROOT_INSIDE,
};
use crate::sys::{detach_mount_in_background, mount_setattr, WaitingDetach};

/// Pivots into the staged root; returns the pid of the helper detaching
/// the old one, if one does (`ahead`: one cloned before, waiting for word).
pub(super) fn pivot_into(
    stage: &Path,
    ahead: Option<WaitingDetach>,
    meanwhile: &mut dyn FnMut() -> Result<(), SetupError>,
) -> Result<Option<i32>, SetupError> {
    let old = stage.join(OLD_ROOT);
    std::fs::create_dir(&old).map_err(io_step("mkdir old root"))?;
    // Opened before the pivot, while the host's /proc is where it always
    // is: the mount table's changes wake the wait for the detach below.
    let mount_table = std::fs::File::open("/proc/self/mountinfo").ok();
    nix::unistd::pivot_root(stage, &old).map_err(step("pivot_root"))?;
    nix::unistd::chdir("/").map_err(step("chdir(/)"))?;
    // The old root is detached by a helper (see `detach_mount_in_background`)
    // so the kernel's grace-period wait after a detach is not this
    // process's; once the mount point can be removed, the host's tree is
    // gone from this namespace. Init reaps the helper before the program
    // starts, so no process the program could see is left of it.
    let old_inside: PathBuf = Path::new("/").join(OLD_ROOT);
    // A helper cloned ahead resolves the path from its own root, which the
    // pivot has just moved to the new root like this process's (pivot_root
    // moves every process whose root was the old one).
    let detaching = match ahead {
        Some(WaitingDetach { pid, trigger }) if nix::unistd::write(&trigger, b"u").is_ok() => {
            Some(pid)
        }
        ahead => {
            // A helper made ahead that is gone (killed) is reaped, and the
            // detach goes the way of a sandbox made at the request.
            if let Some(gone) = ahead {
                drop(gone.trigger);
                let _ = nix::sys::wait::waitpid(
                    nix::unistd::Pid::from_raw(gone.pid),
                    Some(nix::sys::wait::WaitPidFlag::__WALL),
                );
            }
            match detach_mount_in_background(OLD_ROOT_INSIDE) {
                Ok(helper) => helper,
                Err(_) => {
                    umount2(&old_inside, MntFlags::MNT_DETACH)
                        .map_err(step("umount2(old root, MNT_DETACH)"))?;
                    None
                }
            }
        }
    };
    meanwhile()?;
    let mut detaching = detaching;
    let waiting = std::time::Instant::now();
    loop {
        match std::fs::remove_dir(&old_inside) {
            Ok(()) => break,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                // A helper that has exited without detaching failed: its exit
                // code is umount2's errno.
                if let Some(pid) = detaching {
                    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
                    match waitpid(
                        nix::unistd::Pid::from_raw(pid),
                        Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL),
                    ) {
                        Ok(WaitStatus::StillAlive) => {}
                        Ok(WaitStatus::Exited(_, 0)) => detaching = None,
                        Ok(WaitStatus::Exited(_, errno)) => {
                            return Err(SetupError::new(
                                Step::Root,
                                "umount2(old root, MNT_DETACH)",
                                std::io::Error::from_raw_os_error(errno),
                            ))
                        }
                        // Killed (before or after it was told to go
                        // ahead): the detach is done here instead.
                        Ok(WaitStatus::Signaled(..)) => {
                            // EINVAL: it had detached it before it died.
                            match umount2(&old_inside, MntFlags::MNT_DETACH) {
                                Ok(()) | Err(nix::Error::EINVAL) => {}
                                Err(e) => return Err(step("umount2(old root, MNT_DETACH)")(e)),
                            }
                            detaching = None;
                        }
                        other => {
                            return Err(SetupError::new(
                                Step::Root,
                                format!("the old root's unmount helper: {other:?}"),
                                std::io::Error::from_raw_os_error(libc::ECHILD),
                            ))
                        }
                    }
                }
                if waiting.elapsed() > std::time::Duration::from_secs(5) {
                    return Err(SetupError::new(
                        Step::Root,
                        "detach the old root (still mounted after 5 s)",
                        e,
                    ));
                }
                wait_for_a_mount_change(mount_table.as_ref());
            }
            Err(e) => return Err(SetupError::new(Step::Root, "rmdir old root", e)),
        }
    }
    let root = CString::new(Path::new("/").as_os_str().as_bytes()).unwrap_or_default();
    mount_setattr(
        &root,
        false,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        0,
    )
    .map_err(io_step("make / read-only"))?;
    Ok(detaching)
}

/// Sleeps until this mount namespace's table changes (the kernel marks
/// `/proc/self/mountinfo` with `POLLPRI` then: the old root's detach, say),
/// or 1 ms has passed, so a helper that died is noticed within that;
/// without the table, yields the processor instead. Sleeping rather than
/// spinning leaves the processor to the helper and the parent meanwhile: a
/// detach takes about a millisecond, some thousand rounds of a spin.
fn wait_for_a_mount_change(mount_table: Option<&std::fs::File>) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let Some(table) = mount_table else {
        std::thread::yield_now();
        return;
    };
    let mut fds = [PollFd::new(table.as_fd(), PollFlags::POLLPRI)];
    let _ = poll(&mut fds, PollTimeout::from(1u8));
}
