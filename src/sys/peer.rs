//! Who is at the other end of a unix socket beyond `SO_PEERCRED`: the
//! peer's pidfd, and through it the peer's user namespace; and the boot-time
//! clock that dates a connection's acceptance against a process's start
//! (for kernels without `SO_PEERPIDFD`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use super::fds::adopt_fd;
use super::last_error;

/// `SO_PEERPIDFD` from `<asm-generic/socket.h>` (Linux 6.5).
const SO_PEERPIDFD: libc::c_int = 77;
/// `PIDFD_GET_USER_NAMESPACE` from `<linux/pidfd.h>`: `_IO(0xFF, 9)` (Linux 6.11).
const PIDFD_GET_USER_NAMESPACE: libc::c_ulong = 0xFF09;

/// A pidfd for the process that connected a Unix socket
/// (`getsockopt(SO_PEERPIDFD)`): that very process, whatever its pid
/// becomes, even after it exited.
pub(crate) fn peer_pidfd(socket: BorrowedFd<'_>) -> io::Result<std::os::fd::OwnedFd> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` and `len` are live locals of the sizes passed; the kernel
    // writes at most `len` bytes (one int) into `fd` and the length into `len`.
    let ret = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if ret < 0 {
        return Err(last_error("getsockopt(SO_PEERPIDFD)"));
    }
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(adopt_fd(fd))
}

/// A descriptor for the user namespace of the process `pidfd` refers to
/// (`ioctl(PIDFD_GET_USER_NAMESPACE)`). Needs ptrace read access to it.
pub(crate) fn pidfd_user_namespace(pidfd: BorrowedFd<'_>) -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: this ioctl takes no argument (the third is ignored) and
    // returns a new descriptor or -1.
    let ret = unsafe { libc::ioctl(pidfd.as_raw_fd(), PIDFD_GET_USER_NAMESPACE as _, 0) };
    if ret < 0 {
        return Err(last_error("ioctl(PIDFD_GET_USER_NAMESPACE)"));
    }
    Ok(adopt_fd(ret as RawFd))
}

/// `clock_gettime(CLOCK_BOOTTIME)`: time since boot, suspend included — the
/// clock `/proc/PID/stat` gives a process's start time on.
pub(crate) fn boot_time() -> io::Result<std::time::Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec; the call writes only it.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if ret < 0 {
        return Err(last_error("clock_gettime(CLOCK_BOOTTIME)"));
    }
    Ok(std::time::Duration::new(
        ts.tv_sec as u64,
        ts.tv_nsec as u32,
    ))
}
