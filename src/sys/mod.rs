//! The only module with `unsafe`: thin wrappers over system calls that
//! neither `nix` nor `landlock` expose (or expose only as `unsafe fn`), and
//! in `start.rs` the start of the sandboxed program, in `mount.rs` the
//! mount calls and the old root's unmount helpers, in `nice.rs` a thread's
//! nice value; for the static musl build, the allocator (`heap.rs`) and, on
//! x86_64, `memcpy`/`memmove` (`memcopy.rs`; musl's own elsewhere).
//! Each wrapper returns `io::Result` with an error that names the call, and
//! each `unsafe` block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

#[cfg(target_env = "musl")]
pub mod heap;
#[cfg(all(target_env = "musl", target_arch = "x86_64"))]
mod memcopy;
mod mount;
mod nice;
mod start;
pub use mount::{
    detach_mount_in_background, detach_mount_when_told, mount_setattr, mount_setattr_fd,
    WaitingDetach,
};
pub use nice::{nice_value, set_nice_value};
pub use start::{restore_every_default_action, start_program, ProgramStart, StatusPipe};

/// `LANDLOCK_CREATE_RULESET_VERSION` from `<linux/landlock.h>`.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;

/// The current errno, unchanged (callers name the step in a `StepError`, and
/// `raw_os_error` stays available to them). `call` documents the site.
fn last_error(call: &str) -> io::Error {
    let _ = call;
    io::Error::last_os_error()
}

/// The Landlock ABI version the running kernel offers (0 when Landlock is
/// compiled out or disabled at boot: `EOPNOTSUPP`/`ENOSYS`).
pub fn landlock_abi_version() -> io::Result<u32> {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    // is the documented version query: with a null attribute pointer and size 0
    // the kernel reads no memory and returns the ABI number or -1 with errno.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if ret >= 0 {
        return u32::try_from(ret)
            .map_err(|_| io::Error::other("landlock_create_ruleset: ABI out of range"));
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(0),
        _ => Err(io::Error::new(
            err.kind(),
            format!("landlock_create_ruleset(NULL, 0, VERSION): {err}"),
        )),
    }
}

/// `clone(flags | SIGCHLD)` without a new stack: like `fork`, the child
/// continues on a copy of the caller's stack. Returns 0 in the child, the
/// child's pid in the parent.
///
/// Callers must be single-threaded (spawnd's CLI, or the spawner process):
/// the child may then allocate freely, because no other thread can hold a lock.
pub fn clone_process(flags: libc::c_int) -> io::Result<libc::pid_t> {
    // SAFETY: the raw clone syscall with a null stack pointer duplicates the
    // calling thread exactly like fork(2); no memory is shared (no CLONE_VM)
    // and the parent/child/TLS pointers are null, so the kernel writes nothing
    // (their order differs between x86_64 and aarch64, which takes the TLS
    // before the child's tid: with every one null, the call is the same).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            std::ptr::null::<libc::c_void>(),
            std::ptr::null::<libc::c_void>(),
            std::ptr::null::<libc::c_void>(),
            0usize,
        )
    };
    if ret < 0 {
        return Err(last_error(&format!("clone(flags={flags:#x})")));
    }
    libc::pid_t::try_from(ret).map_err(|_| io::Error::other("clone: pid out of range"))
}

/// One classic BPF instruction (built by the sandbox's seccomp compiler), laid out as the kernel's `struct sock_filter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SockFilter {
    /// Opcode: class, size/operation and source bits.
    pub code: u16,
    /// Instructions to skip when a conditional jump's test holds.
    pub jt: u8,
    /// Instructions to skip when it does not.
    pub jf: u8,
    /// The constant operand (offset, value, or `ja`'s 32-bit skip).
    pub k: u32,
}

/// Installs a seccomp filter on the calling thread (`seccomp(SECCOMP_SET_MODE_FILTER)`).
/// No-new-privileges must already be set.
pub fn install_seccomp_filter_on_current_thread(program: &[SockFilter]) -> io::Result<()> {
    #[repr(C)]
    struct SockFprog {
        len: libc::c_ushort,
        filter: *const SockFilter,
    }
    let len = libc::c_ushort::try_from(program.len())
        .map_err(|_| io::Error::other("seccomp: filter too long"))?;
    let prog = SockFprog {
        len,
        filter: program.as_ptr(),
    };
    // SAFETY: `prog` points at `len` valid `sock_filter` instructions that stay
    // alive for the whole call; the kernel copies the program before returning.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0u32,
            &prog as *const SockFprog,
        )
    };
    if ret < 0 {
        return Err(last_error(&format!(
            "seccomp(SET_MODE_FILTER, {} instructions)",
            program.len()
        )));
    }
    Ok(())
}

/// Empties the effective, permitted and inheritable capability sets (`capset`).
pub fn clear_capabilities() -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: version 3 capset takes a header and an array of two data
    // structs, both valid and correctly laid out for the duration of the call.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
    if ret < 0 {
        return Err(last_error("capset(all empty)"));
    }
    Ok(())
}

/// Drops capability `cap` from the bounding set.
pub fn drop_bounding_capability(cap: u32) -> io::Result<()> {
    // SAFETY: prctl(PR_CAPBSET_DROP, cap) takes plain integers.
    let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) };
    if ret < 0 {
        return Err(last_error(&format!("prctl(PR_CAPBSET_DROP, {cap})")));
    }
    Ok(())
}

/// Clears the ambient capability set.
pub fn clear_ambient_capabilities() -> io::Result<()> {
    // SAFETY: prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL) takes plain integers.
    let ret = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if ret < 0 {
        return Err(last_error("prctl(PR_CAP_AMBIENT_CLEAR_ALL)"));
    }
    Ok(())
}

/// `close_range(first, u32::MAX, 0)`: closes every descriptor from `first` on.
pub fn close_descriptors_from(first: u32) -> io::Result<()> {
    close_descriptor_range(first, u32::MAX)
}

/// Closes every descriptor from `first` to `last` (inclusive) with one call;
/// none of them may belong to a live Rust object.
pub fn close_descriptor_range(first: u32, last: u32) -> io::Result<()> {
    // SAFETY: close_range takes plain integers; the callers pass ranges that
    // hold no descriptor a Rust object still owns, so nothing is closed twice
    // or used after closing.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if ret < 0 {
        return Err(last_error(&format!("close_range({first}, {last})")));
    }
    Ok(())
}

/// Brings the loopback interface of the current network namespace up.
pub fn set_loopback_up() -> io::Result<()> {
    let sock =
        std::net::UdpSocket::bind("0.0.0.0:0").or_else(|_| std::net::UdpSocket::bind("[::]:0"));
    let sock = match sock {
        Ok(s) => s,
        // A socket needs an address family that works without lo: fall back to AF_UNIX.
        Err(_) => return set_loopback_up_via_unix(),
    };
    ifflags_up(sock.as_raw_fd())
}

fn set_loopback_up_via_unix() -> io::Result<()> {
    let (a, _b) = std::os::unix::net::UnixDatagram::pair()
        .map_err(|e| io::Error::new(e.kind(), format!("socketpair(AF_UNIX): {e}")))?;
    ifflags_up(a.as_raw_fd())
}

fn ifflags_up(fd: RawFd) -> io::Result<()> {
    // SAFETY: `ifreq` is plain old data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name from and writes the flags into `req`,
    // a valid, exclusively borrowed ifreq.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req) } < 0 {
        return Err(last_error("ioctl(SIOCGIFFLAGS, lo)"));
    }
    // SAFETY: the union member ifru_flags is the one SIOCGIFFLAGS filled in.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads the name and flags from `req`.
    if unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req) } < 0 {
        return Err(last_error("ioctl(SIOCSIFFLAGS, lo up)"));
    }
    Ok(())
}

/// Resource usage and status of a reaped child.
#[derive(Debug, Clone, Copy)]
pub struct Reaped {
    /// The raw wait status.
    pub status: libc::c_int,
    /// User + system CPU time, in milliseconds (children it reaped included).
    pub cpu_ms: u64,
    /// Peak resident set size in bytes (the largest of it and its reaped children).
    pub max_rss_bytes: u64,
}

/// `wait4(pid, &status, 0, &rusage)`, retrying on EINTR.
pub fn wait_with_usage(pid: libc::pid_t) -> io::Result<Reaped> {
    loop {
        match wait4_usage(pid, 0) {
            Ok(Some(reaped)) => return Ok(reaped),
            Ok(None) => continue,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(io::Error::new(e.kind(), format!("wait4({pid}): {e}"))),
        }
    }
}

/// `wait4(pid, &status, WNOHANG, &rusage)`: `None` while `pid` still runs.
pub fn try_wait_with_usage(pid: libc::pid_t) -> io::Result<Option<Reaped>> {
    loop {
        match wait4_usage(pid, libc::WNOHANG) {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            other => return other,
        }
    }
}

fn wait4_usage(pid: libc::pid_t, options: libc::c_int) -> io::Result<Option<Reaped>> {
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data; zeroed is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: both out-pointers are valid, exclusively borrowed locals.
    let ret = unsafe { libc::wait4(pid, &mut status, options, &mut usage) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    if ret == 0 {
        return Ok(None);
    }
    let ms = |t: libc::timeval| (t.tv_sec as u64) * 1000 + (t.tv_usec as u64) / 1000;
    Ok(Some(Reaped {
        status,
        cpu_ms: ms(usage.ru_utime) + ms(usage.ru_stime),
        max_rss_bytes: (usage.ru_maxrss as u64) * 1024,
    }))
}

/// `pidfd_open(pid, 0)`: a descriptor that names this process and no other,
/// even after its pid is reused. Only race-free for a child not yet reaped.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: pidfd_open takes plain integers and returns a new descriptor or -1.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if ret < 0 {
        return Err(last_error("pidfd_open"));
    }
    Ok(adopt_fd(ret as RawFd))
}

/// Where this process's command line lives: `arg_start` and `arg_end` of
/// `/proc/self/stat`, read once. A clone inherits the answer along with the
/// memory it describes, so a parent that asked before cloning spares its
/// children the reading.
pub fn command_line_area() -> Option<(usize, usize)> {
    static AREA: std::sync::OnceLock<Option<(usize, usize)>> = std::sync::OnceLock::new();
    *AREA.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name's closing parenthesis start at field
        // 3 (state); arg_start and arg_end are fields 48 and 49.
        let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(45);
        let start = fields.next()?.parse().ok()?;
        let end = fields.next()?.parse().ok()?;
        (start < end).then_some((start, end))
    })
}

/// Replaces this process's command line — what `/proc/PID/cmdline` shows —
/// with `name`, the rest of the area zeroed (truncated if the area is
/// shorter). The memory is this process's own; other processes see only
/// the new bytes.
pub fn replace_command_line(name: &[u8]) -> io::Result<()> {
    let (start, end) = command_line_area()
        .ok_or_else(|| io::Error::other("no command line area in /proc/self/stat"))?;
    let len = end - start;
    // SAFETY: [start, end) is this process's argument area as the kernel
    // reports it: mapped and writable (the initial stack), of `len` bytes.
    // No Rust reference to it is alive (std copies arguments out when asked),
    // and the caller is single-threaded, so nothing reads it meanwhile.
    unsafe {
        let area = start as *mut u8;
        std::ptr::write_bytes(area, 0, len);
        std::ptr::copy_nonoverlapping(name.as_ptr(), area, name.len().min(len.saturating_sub(1)));
    }
    Ok(())
}

/// `SO_PEERPIDFD` from `<asm-generic/socket.h>` (Linux 6.5).
const SO_PEERPIDFD: libc::c_int = 77;
/// `PIDFD_GET_USER_NAMESPACE` from `<linux/pidfd.h>`: `_IO(0xFF, 9)` (Linux 6.11).
const PIDFD_GET_USER_NAMESPACE: libc::c_ulong = 0xFF09;

/// A pidfd for the process that connected a Unix socket
/// (`getsockopt(SO_PEERPIDFD)`): that very process, whatever its pid
/// becomes, even after it exited.
pub fn peer_pidfd(socket: BorrowedFd<'_>) -> io::Result<std::os::fd::OwnedFd> {
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
pub fn pidfd_user_namespace(pidfd: BorrowedFd<'_>) -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: this ioctl takes no argument (the third is ignored) and
    // returns a new descriptor or -1.
    let ret = unsafe { libc::ioctl(pidfd.as_raw_fd(), PIDFD_GET_USER_NAMESPACE as _, 0) };
    if ret < 0 {
        return Err(last_error("ioctl(PIDFD_GET_USER_NAMESPACE)"));
    }
    Ok(adopt_fd(ret as RawFd))
}

/// `pidfd_send_signal(pidfd, sig, NULL, 0)`.
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: a valid descriptor, a signal number and a null siginfo pointer
    // (the kernel then fills it in as kill(2) would).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if ret < 0 {
        return Err(last_error("pidfd_send_signal"));
    }
    Ok(())
}

/// Reads the `user` key `description` from the calling process's keyrings
/// (`request_key` searches the thread, process, session and user keyrings)
/// into wiped memory.
pub fn read_user_key(description: &CStr) -> io::Result<zeroize::Zeroizing<Vec<u8>>> {
    const KEYCTL_READ: libc::c_long = 11;
    // SAFETY: two valid NUL-terminated strings, no callout, no destination keyring.
    let serial = unsafe {
        libc::syscall(
            libc::SYS_request_key,
            c"user".as_ptr(),
            description.as_ptr(),
            std::ptr::null::<libc::c_char>(),
            0 as libc::c_long,
        )
    };
    if serial < 0 {
        return Err(last_error("request_key"));
    }
    let mut buf = zeroize::Zeroizing::new(vec![0u8; 256]);
    loop {
        // SAFETY: `buf` is a valid, writable buffer of `buf.len()` bytes; the
        // kernel writes at most that many and returns the key's full length.
        let len = unsafe {
            libc::syscall(
                libc::SYS_keyctl,
                KEYCTL_READ,
                serial,
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if len < 0 {
            return Err(last_error("keyctl(KEYCTL_READ)"));
        }
        let len = len as usize;
        if len <= buf.len() {
            buf.truncate(len);
            return Ok(buf);
        }
        zeroize::Zeroize::zeroize(&mut *buf);
        buf.resize(len, 0);
    }
}

/// Adds a `user` key to the user keyring (tests of `keyring:` sources).
#[cfg(test)]
pub fn add_user_key(description: &CStr, value: &[u8]) -> io::Result<()> {
    const KEY_SPEC_USER_KEYRING: libc::c_long = -4;
    // SAFETY: valid NUL-terminated strings and a payload of `value.len()` bytes.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_add_key,
            c"user".as_ptr(),
            description.as_ptr(),
            value.as_ptr(),
            value.len(),
            KEY_SPEC_USER_KEYRING,
        )
    };
    if ret < 0 {
        return Err(last_error("add_key"));
    }
    Ok(())
}

/// Ends the calling process at once, without running atexit handlers or
/// flushing stdio buffers copied from the parent (for forked children).
pub fn exit_immediately(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust-managed state.
    unsafe { libc::_exit(code) }
}

/// `fork()`, for the sandbox's init process (single-threaded by construction).
pub fn fork_process() -> io::Result<libc::pid_t> {
    clone_process(0)
}

/// Takes ownership of a descriptor the caller has just created (e.g. with
/// `fcntl(F_DUPFD_CLOEXEC)`), so it is closed when dropped.
pub fn adopt_fd(fd: RawFd) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: callers pass a descriptor that a system call returned to them a
    // moment ago and that nothing else owns, so there is exactly one owner.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

/// Makes `cmd`'s child start with `fd` as its descriptor 3 (the spawner's
/// socket, when the daemon restarts a spawner by executing spawnd).
pub fn pass_fd_as_3(cmd: &mut std::process::Command, fd: RawFd) {
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
pub fn adopt_inherited_fd3() -> io::Result<std::os::fd::OwnedFd> {
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
pub fn start_writeback(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: sync_file_range takes a descriptor open for the call's
    // duration and plain integers; it reads and writes no memory of ours.
    let ret = unsafe { libc::sync_file_range(fd.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
    if ret < 0 {
        return Err(last_error("sync_file_range"));
    }
    Ok(())
}

/// Makes the allocator hand large blocks (1 MiB and up: hash buffers, big
/// output) straight back to the kernel when freed, and keeps it to a few
/// arenas however many threads come and go, so a long-running daemon's
/// resident memory follows what it holds rather than what it once held.
///
/// Only glibc's allocator needs telling: the musl build (the one the
/// scripts make, see `scripts/static-target`) uses [`heap::Heap`], which
/// does the same by itself.
pub fn bound_allocator_retention() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets glibc allocator parameters; it is called at
    // the daemon's start, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_landlock_version_query_answers_without_error() {
        let v = landlock_abi_version().expect("landlock_create_ruleset version query");
        assert!(v <= 64, "implausible ABI {v}");
    }
}
