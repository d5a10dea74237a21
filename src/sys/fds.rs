//! Descriptors: closing ranges, adopting raw ones, passing one to a child
//! as descriptor 3, and starting writeback of a file's dirty pages.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use super::last_error;

/// `close_range(first, u32::MAX, 0)`: closes every descriptor from `first` on.
pub(crate) fn close_descriptors_from(first: u32) -> io::Result<()> {
    close_descriptor_range(first, u32::MAX)
}

/// Closes every descriptor from `first` to `last` (inclusive) with one call;
/// none of them may belong to a live Rust object.
pub(crate) fn close_descriptor_range(first: u32, last: u32) -> io::Result<()> {
    // SAFETY: close_range takes plain integers; the callers pass ranges that
    // hold no descriptor a Rust object still owns, so nothing is closed twice
    // or used after closing.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if ret < 0 {
        return Err(last_error(&format!("close_range({first}, {last})")));
    }
    Ok(())
}

/// Takes ownership of a descriptor the caller has just created (e.g. with
/// `fcntl(F_DUPFD_CLOEXEC)`), so it is closed when dropped.
pub(crate) fn adopt_fd(fd: RawFd) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: callers pass a descriptor that a system call returned to them a
    // moment ago and that nothing else owns, so there is exactly one owner.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

/// Makes `cmd`'s child start with `fd` as its descriptor 3 (the spawner's
/// socket, when the daemon restarts a spawner by executing spawnd).
pub(crate) fn pass_fd_as_3(cmd: &mut std::process::Command, fd: RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec. It calls
    // only dup2 and fcntl, which are async-signal-safe, and allocates nothing
    // (`last_os_error` builds an error from errno alone). It must stay so:
    // the daemon is multi-threaded when it restarts a spawner, and in the
    // forked child the allocator's lock may be held by a thread that is gone
    // (see `heap.rs`).
    unsafe {
        cmd.pre_exec(move || {
            if fd == 3 {
                if libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
            } else if libc::dup2(fd, 3) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Takes descriptor 3, placed by [`pass_fd_as_3`] in the process that
/// executed this one, and marks it close-on-exec.
pub(crate) fn adopt_inherited_fd3() -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: fcntl(F_GETFD) only reads the flags of descriptor 3, if open.
    if unsafe { libc::fcntl(3, libc::F_GETFD) } < 0 {
        return Err(last_error("descriptor 3 (the spawner's socket)"));
    }
    let fd = adopt_fd(3);
    // SAFETY: sets FD_CLOEXEC on a descriptor this process now owns.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(last_error("fcntl(3, FD_CLOEXEC)"));
    }
    Ok(fd)
}

/// `sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE)`: starts writing the
/// file's dirty pages to disk and returns without waiting. Not durability —
/// an `fdatasync` that follows has less left to wait for.
pub(crate) fn start_writeback(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: sync_file_range takes a descriptor open for the call's
    // duration and plain integers; it reads and writes no memory of ours.
    let ret = unsafe { libc::sync_file_range(fd.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
    if ret < 0 {
        return Err(last_error("sync_file_range"));
    }
    Ok(())
}

/// Whether anyone holds the file behind `fd` open for writing, asked the
/// only way the kernel answers it: a read lease (`F_SETLEASE F_RDLCK`) is
/// refused with `EAGAIN` exactly then. A lease taken is let go at once;
/// a writer opening the file in between would break it with SIGIO, which
/// is ignored process-wide first (the sandbox's init puts every action
/// back to its default). `Err` when no lease may be taken here (not the
/// file's owner without CAP_LEASE, or leases disabled).
pub(crate) fn file_open_for_writing(fd: BorrowedFd<'_>) -> io::Result<bool> {
    static IGNORE_SIGIO: std::sync::Once = std::sync::Once::new();
    IGNORE_SIGIO.call_once(|| {
        // SAFETY: setting SIGIO's disposition to SIG_IGN installs no handler
        // code; nothing in spawnd relies on SIGIO.
        unsafe {
            libc::signal(libc::SIGIO, libc::SIG_IGN);
        }
    });
    // SAFETY: F_SETLEASE takes an int argument by value and reads no memory.
    let ret = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, libc::F_RDLCK) };
    if ret < 0 {
        let e = last_error("fcntl(F_SETLEASE, F_RDLCK)");
        return match e.raw_os_error() {
            Some(libc::EAGAIN) => Ok(true),
            _ => Err(e),
        };
    }
    // SAFETY: as above; F_UNLCK lets the lease go.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
    Ok(false)
}
