//! Processes: cloning and forking without a new stack, ending at once,
//! reaping with resource usage, pidfds and signals through them, the
//! process's command line as `ps` shows it, a thread's nice value, and the
//! allocator's retention (glibc).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use super::fds::adopt_fd;
use super::last_error;

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

/// Resource usage and status of a reaped child.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reaped {
    /// The raw wait status.
    pub status: libc::c_int,
    /// User + system CPU time, in milliseconds (children it reaped included).
    pub cpu_ms: u64,
    /// Peak resident set size in bytes (the largest of it and its reaped children).
    pub max_rss_bytes: u64,
}

/// `wait4(pid, &status, 0, &rusage)`, retrying on EINTR.
pub(crate) fn wait_with_usage(pid: libc::pid_t) -> io::Result<Reaped> {
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
pub(crate) fn try_wait_with_usage(pid: libc::pid_t) -> io::Result<Option<Reaped>> {
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
pub(crate) fn pidfd_open(pid: libc::pid_t) -> io::Result<std::os::fd::OwnedFd> {
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
pub(crate) fn command_line_area() -> Option<(usize, usize)> {
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
pub(crate) fn replace_command_line(name: &[u8]) -> io::Result<()> {
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

/// `pidfd_send_signal(pidfd, sig, NULL, 0)`.
pub(crate) fn pidfd_send_signal(pidfd: BorrowedFd<'_>, signal: libc::c_int) -> io::Result<()> {
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

/// `sigwaitinfo(set)`: the next of `set`'s (blocked) signals, and the pid
/// that sent it as the caller's pid namespace sees it: 0 when the sender
/// is outside that namespace, or is the kernel. `None` when the wait was
/// interrupted. Allocates nothing (the sandbox's init waits with it).
pub(crate) fn wait_signal_with_sender(
    set: &nix::sys::signal::SigSet,
) -> Option<(libc::c_int, libc::pid_t)> {
    let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::zeroed();
    // SAFETY: `set` is a valid sigset_t and `info` points to writable
    // memory of a siginfo_t.
    let signal = unsafe { libc::sigwaitinfo(set.as_ref(), info.as_mut_ptr()) };
    if signal < 0 {
        return None;
    }
    // SAFETY: sigwaitinfo filled `info` in for the signal it returned.
    let info = unsafe { info.assume_init() };
    // SAFETY: the waited signals are sent with kill(2), pidfd_send_signal(2)
    // or are SIGCHLD, whose siginfo carries the sender's pid; one the kernel
    // raises otherwise leaves the field zeroed.
    let sender = unsafe { info.si_pid() };
    Some((signal, sender))
}

/// Ends the calling process at once, without running atexit handlers or
/// flushing stdio buffers copied from the parent (for forked children).
pub fn exit_immediately(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust-managed state.
    unsafe { libc::_exit(code) }
}

/// `fork()`, for the sandbox's init process (single-threaded by construction).
pub(crate) fn fork_process() -> io::Result<libc::pid_t> {
    clone_process(0)
}

/// Makes the allocator hand large blocks (1 MiB and up: hash buffers, big
/// output) straight back to the kernel when freed, and keeps it to a few
/// arenas however many threads come and go, so a long-running daemon's
/// resident memory follows what it holds rather than what it once held.
///
/// Only glibc's allocator needs telling: the musl build (the one the
/// scripts make, see `scripts/static-target`) uses `heap::Heap` (feature
/// `musl-dlmalloc`), which does the same by itself, or musl's own allocator,
/// which unmaps freed blocks of that size at once.
pub(crate) fn bound_allocator_retention() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets glibc allocator parameters; it is called at
    // the daemon's start, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// The calling thread's nice value (`getpriority(PRIO_PROCESS, 0)`).
pub(crate) fn nice_value() -> io::Result<i32> {
    // SAFETY: errno is this thread's; getpriority reads no memory of ours.
    // -1 is a valid nice value, so errno, cleared first, tells an error.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
        if nice == -1 && *libc::__errno_location() != 0 {
            return Err(last_error("getpriority"));
        }
        Ok(nice)
    }
}

/// Sets the calling thread's nice value (`setpriority(PRIO_PROCESS, 0, nice)`):
/// raising it (a lower priority) is always allowed; lowering it takes
/// `CAP_SYS_NICE` or a `RLIMIT_NICE` that allows it.
pub(crate) fn set_nice_value(nice: i32) -> io::Result<()> {
    // SAFETY: a system call on this thread's own priority; no memory passed.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } < 0 {
        return Err(last_error("setpriority"));
    }
    Ok(())
}
