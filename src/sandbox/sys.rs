//! The only file with `unsafe`: thin wrappers over system calls that neither
//! `nix` nor `landlock` expose (or expose only as `unsafe fn`). Each wrapper
//! returns `io::Result` with an error that names the call, and each `unsafe`
//! block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

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
    // and the parent/child/TLS pointers are null, so the kernel writes nothing.
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

/// Starts `umount2(path, MNT_DETACH)` in a helper process that shares this
/// process's memory — `clone(CLONE_VM)` on a stack of its own, the way
/// `posix_spawn` starts its child — and returns the helper's pid at once.
/// The kernel detaches the mounts straight away but then waits for an RCU
/// grace period before freeing them (0.1–0.8 ms here, longer on an idle
/// machine): that wait is the helper's, not the caller's. The caller learns
/// the detach is done when the mount point can be removed (`rmdir` stops
/// failing with EBUSY) and reaps the helper like any child.
///
/// The helper makes its two system calls directly (no libc wrapper, so it
/// never writes the errno it shares with the caller) and touches nothing
/// else; its exit code is umount2's errno (0 on success). On other
/// architectures than x86_64 the unmount is done here.
pub fn detach_mount_in_background(path: &'static CStr) -> io::Result<Option<libc::pid_t>> {
    #[cfg(target_arch = "x86_64")]
    {
        const STACK: usize = 16 * 1024;
        extern "C" fn helper(arg: *mut libc::c_void) -> libc::c_int {
            // SAFETY: two raw system calls with register arguments only:
            // umount2 reads the NUL-terminated path `arg` points to (a
            // 'static string, valid for the whole process), and exit ends
            // this task alone. Neither touches memory the caller uses.
            unsafe {
                let ret: i64;
                std::arch::asm!(
                    "syscall",
                    inlateout("rax") libc::SYS_umount2 => ret,
                    in("rdi") arg,
                    in("rsi") libc::MNT_DETACH as i64,
                    lateout("rcx") _,
                    lateout("r11") _,
                    options(nostack),
                );
                // Exit code: 0, or umount2's errno.
                std::arch::asm!(
                    "syscall",
                    in("rax") libc::SYS_exit,
                    in("rdi") if ret < 0 { -ret } else { 0 },
                    options(noreturn, nostack),
                );
            }
        }
        // The helper's stack lives as long as the process: it is small, and
        // the helper may still be waiting in the kernel when the caller goes on.
        let stack: &'static mut [u8] = Box::leak(vec![0u8; STACK].into_boxed_slice());
        let top = (stack.as_mut_ptr() as usize + STACK) & !15;
        // SAFETY: glibc's clone runs `helper` on the stack given, in a new
        // process sharing this address space (CLONE_VM, not CLONE_THREAD: it
        // is reaped with waitpid). `helper` only makes raw system calls on its
        // own stack and the 'static path, so sharing memory cannot race with
        // anything the caller does; SIGCHLD tells the caller when it ends.
        let pid = unsafe {
            libc::clone(
                helper,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::SIGCHLD,
                path.as_ptr() as *mut libc::c_void,
            )
        };
        if pid < 0 {
            return Err(last_error("clone(CLONE_VM, the unmount helper)"));
        }
        Ok(Some(pid))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH)?;
        Ok(None)
    }
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn mount_setattr_at(
    dirfd: RawFd,
    path: &CStr,
    flags: libc::c_uint,
    attr_set: u64,
    attr_clr: u64,
) -> io::Result<()> {
    let attr = MountAttr {
        attr_set,
        attr_clr,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is a valid NUL-terminated string, `dirfd` is open or
    // AT_FDCWD, and `attr` is a live, correctly laid out `struct mount_attr`
    // whose size we pass; the kernel only reads them during the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret < 0 {
        return Err(last_error("mount_setattr"));
    }
    Ok(())
}

/// `mount_setattr(AT_FDCWD, path, AT_RECURSIVE?, {attr_set, attr_clr})`.
pub fn mount_setattr(path: &CStr, recursive: bool, attr_set: u64, attr_clr: u64) -> io::Result<()> {
    let flags = if recursive {
        libc::AT_RECURSIVE as libc::c_uint
    } else {
        0
    };
    mount_setattr_at(libc::AT_FDCWD, path, flags, attr_set, attr_clr)
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE?, …)`: the mount whose root `fd` is.
pub fn mount_setattr_fd(
    fd: &std::os::fd::OwnedFd,
    recursive: bool,
    attr_set: u64,
    attr_clr: u64,
) -> io::Result<()> {
    let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    mount_setattr_at(fd.as_raw_fd(), c"", flags, attr_set, attr_clr)
}

/// One classic-BPF instruction, laid out as the kernel's `struct sock_filter`.
pub use super::seccomp::SockFilter;

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
    if unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(last_error("ioctl(SIOCGIFFLAGS, lo)"));
    }
    // SAFETY: the union member ifru_flags is the one SIOCGIFFLAGS filled in.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads the name and flags from `req`.
    if unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) } < 0 {
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

/// What the program's process does between its start and `execveat`, all of
/// it prepared by init beforehand. That process shares init's memory until it
/// executes (see [`start_program`]), so it only makes system calls with what
/// is here and writes nothing but its own stack: no allocation, no locks.
pub struct ProgramStart<'a> {
    /// `argv` as a NULL-terminated array of pointers into init's CStrings.
    argv: Vec<*const libc::c_char>,
    /// `envp`, likewise.
    envp: Vec<*const libc::c_char>,
    /// Become descriptors 0, 1 and 2.
    stdio: [RawFd; 3],
    /// The hashed program: becomes descriptor 3 and is executed.
    program: RawFd,
    /// Init's status pipe: becomes descriptor 4 (close-on-exec), where a
    /// failed step is reported as `E<step>: <error>`.
    status: RawFd,
    /// Descriptor 3 stays open across exec (a `#!` script's interpreter reads it).
    script: bool,
    /// `setrlimit` calls, soft = hard, each with the step name it reports.
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlimit, &'static str)>,
    /// The CStrings the pointers point into outlive this value.
    _strings: std::marker::PhantomData<&'a CStr>,
}

impl<'a> ProgramStart<'a> {
    /// Prepares the start; `argv` and `envp` must stay alive and unchanged
    /// while the value does (the borrow makes sure of it).
    pub fn new(
        argv: &'a [std::ffi::CString],
        envp: &'a [std::ffi::CString],
        stdio: [BorrowedFd<'a>; 3],
        program: BorrowedFd<'a>,
        status: BorrowedFd<'a>,
        script: bool,
        rlimits: &[(nix::sys::resource::Resource, u64)],
    ) -> ProgramStart<'a> {
        let pointers = |v: &'a [std::ffi::CString]| {
            v.iter()
                .map(|c| c.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        ProgramStart {
            argv: pointers(argv),
            envp: pointers(envp),
            stdio: stdio.map(|fd| fd.as_raw_fd()),
            program: program.as_raw_fd(),
            status: status.as_raw_fd(),
            script,
            rlimits: rlimits
                .iter()
                .map(|&(resource, value)| {
                    (
                        resource as libc::__rlimit_resource_t,
                        libc::rlimit {
                            rlim_cur: value,
                            rlim_max: value,
                        },
                        setrlimit_step(resource),
                    )
                })
                .collect(),
            _strings: std::marker::PhantomData,
        }
    }

    /// The program process's steps, ending in `execveat`. Returns only on
    /// failure: the step and errno, and the descriptor to report them on.
    fn run(&self) -> (&'static str, libc::c_int, RawFd) {
        let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // A clean slate, whatever init (or spawnd before it) blocked or
        // ignored: every signal at its default action (an ignored SIGPIPE
        // would otherwise survive exec), then none blocked.
        for signo in 1..=64 {
            if signo == libc::SIGKILL || signo == libc::SIGSTOP {
                continue;
            }
            if raw_set_default_action(signo) < 0 {
                return ("reset signal actions", errno(), self.status);
            }
        }
        // SAFETY: sigemptyset initializes the local set; sigprocmask reads it
        // and writes no old mask (null). Both touch only this stack frame.
        let ret = unsafe {
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut())
        };
        if ret < 0 {
            return ("clear signal mask", errno(), self.status);
        }
        // SAFETY: setsid takes no arguments.
        if unsafe { libc::setsid() } < 0 {
            return ("setsid", errno(), self.status);
        }
        const STDIO_STEPS: [&str; 3] = ["dup2(stdio 0)", "dup2(stdio 1)", "dup2(stdio 2)"];
        for ((target, &fd), step) in self.stdio.iter().enumerate().zip(STDIO_STEPS) {
            // SAFETY: dup2 takes plain integers. Init keeps its own descriptors
            // at 64 and above, so placing 0..=4 replaces nothing it still
            // needs, and this process has its own table (no CLONE_FILES).
            if unsafe { libc::dup2(fd, target as libc::c_int) } < 0 {
                return (step, errno(), self.status);
            }
        }
        // SAFETY: as above.
        if unsafe { libc::dup2(self.program, 3) } < 0 {
            return ("dup2(program, 3)", errno(), self.status);
        }
        // SAFETY: as above.
        if unsafe { libc::dup2(self.status, 4) } < 0 {
            return ("dup2(status, 4)", errno(), self.status);
        }
        // SAFETY: close_range takes plain integers; in this process nothing
        // but the program itself will use the descriptors from 5 on.
        if unsafe { libc::syscall(libc::SYS_close_range, 5u32, u32::MAX, 0u32) } < 0 {
            return ("close_range(5..)", errno(), 4);
        }
        let keep = if self.script { 0 } else { libc::FD_CLOEXEC };
        // SAFETY: fcntl(F_SETFD) on descriptors this process just placed.
        if unsafe { libc::fcntl(3, libc::F_SETFD, keep) } < 0 {
            return ("fcntl(3, F_SETFD)", errno(), 4);
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(4, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
            return ("fcntl(4, F_SETFD)", errno(), 4);
        }
        for (resource, limit, step) in &self.rlimits {
            // SAFETY: `limit` is a valid rlimit the kernel only reads.
            if unsafe { libc::setrlimit(*resource, limit) } < 0 {
                return (step, errno(), 4);
            }
        }
        // SAFETY: descriptor 3 is the hashed program; `argv` and `envp` are
        // NULL-terminated arrays of pointers to NUL-terminated strings that
        // init keeps alive (it is suspended until this call succeeds), and
        // AT_EMPTY_PATH with "" executes the descriptor itself.
        unsafe {
            libc::syscall(
                libc::SYS_execveat,
                3,
                c"".as_ptr(),
                self.argv.as_ptr(),
                self.envp.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        ("execveat(program, AT_EMPTY_PATH)", errno(), 4)
    }
}

/// Puts `signo` back to its default action (SIG_DFL).
pub fn restore_default_action(signo: libc::c_int) -> io::Result<()> {
    if raw_set_default_action(signo) < 0 {
        return Err(last_error("rt_sigaction(SIG_DFL)"));
    }
    Ok(())
}

/// `rt_sigaction(signo, SIG_DFL)` through the raw system call, which also
/// reaches the real-time signals the C library reserves.
fn raw_set_default_action(signo: libc::c_int) -> libc::c_long {
    /// The kernel's `struct sigaction` on x86_64 (not the C library's).
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: u64,
        restorer: usize,
        mask: u64,
    }
    let default = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    // SAFETY: `default` is a valid kernel sigaction that outlives the call,
    // the old-action pointer is null and the mask size is the kernel's (8).
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            signo,
            &default as *const KernelSigaction,
            std::ptr::null_mut::<KernelSigaction>(),
            8usize,
        )
    }
}

/// The step name a failed `setrlimit` of `resource` reports.
fn setrlimit_step(resource: nix::sys::resource::Resource) -> &'static str {
    use nix::sys::resource::Resource;
    match resource {
        Resource::RLIMIT_AS => "setrlimit(RLIMIT_AS)",
        Resource::RLIMIT_CORE => "setrlimit(RLIMIT_CORE)",
        Resource::RLIMIT_CPU => "setrlimit(RLIMIT_CPU)",
        Resource::RLIMIT_DATA => "setrlimit(RLIMIT_DATA)",
        Resource::RLIMIT_FSIZE => "setrlimit(RLIMIT_FSIZE)",
        Resource::RLIMIT_NOFILE => "setrlimit(RLIMIT_NOFILE)",
        Resource::RLIMIT_NPROC => "setrlimit(RLIMIT_NPROC)",
        Resource::RLIMIT_STACK => "setrlimit(RLIMIT_STACK)",
        _ => "setrlimit",
    }
}

/// Writes `E<step>: <strerror> (os error N)` to `fd` from a stack buffer (the
/// same text a `StepError` shows), allocating nothing.
fn report_step_failure(fd: RawFd, step: &str, errno: libc::c_int) {
    let mut line = [0u8; 256];
    let mut len = 0;
    let mut push = |bytes: &[u8]| {
        let n = bytes.len().min(line.len() - len);
        line[len..len + n].copy_from_slice(&bytes[..n]);
        len += n;
    };
    push(b"E");
    push(step.as_bytes());
    push(b": ");
    extern "C" {
        /// glibc ≥ 2.32: the English description of an errno, a static
        /// string (NULL when unknown). Unlike strerror_r it neither goes
        /// through gettext nor takes the locale's locks.
        fn strerrordesc_np(errnum: libc::c_int) -> *const libc::c_char;
    }
    // SAFETY: strerrordesc_np only reads its argument and returns a pointer
    // to a NUL-terminated string in glibc's read-only data, or NULL.
    let text = unsafe { strerrordesc_np(errno) };
    if text.is_null() {
        push(b"Unknown error ");
    } else {
        // SAFETY: non-NULL: a static NUL-terminated string (see above).
        push(unsafe { CStr::from_ptr(text) }.to_bytes());
        push(b" ");
    }
    push(b"(os error ");
    let mut digits = [0u8; 12];
    let mut at = digits.len();
    let mut n = errno.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    push(&digits[at..]);
    push(b")\n");
    // SAFETY: writes `len` initialized bytes of the local buffer.
    let _ = unsafe { libc::write(fd, line.as_ptr().cast(), len) };
}

/// Starts the program the way `posix_spawn` does: `clone(CLONE_VM |
/// CLONE_VFORK)` on a stack of its own. The new process borrows init's memory
/// instead of copying its page tables (no copy, no copy-on-write faults
/// afterwards, nothing to tear down at exec), and init is suspended until the
/// program has executed, or failed, reported why and exited (127). Returns
/// the program's pid.
pub fn start_program(start: &ProgramStart<'_>) -> io::Result<libc::pid_t> {
    const GUARD: usize = 4096;
    const STACK: usize = 128 * 1024;
    extern "C" fn program_process(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `ProgramStart` that `start_program` passed,
        // alive and unchanged while init is suspended (CLONE_VFORK).
        let start = unsafe { &*(arg as *const ProgramStart<'_>) };
        let (step, errno, fd) = start.run();
        report_step_failure(fd, step, errno);
        127
    }
    // SAFETY: a fresh private anonymous mapping, owned by this function.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            GUARD + STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(last_error("mmap(the program's start stack)"));
    }
    // SAFETY: the lowest page of the mapping above becomes a guard, so an
    // overflow faults instead of writing into init's memory.
    let guarded = unsafe { libc::mprotect(base, GUARD, libc::PROT_NONE) };
    // Every signal blocked across the clone (as posix_spawn does): until
    // the new process has reset each action to its default, no handler
    // inherited from init may run in it. The process clears its mask itself.
    let mut unblocked = nix::sys::signal::SigSet::empty();
    let all_blocked = nix::sys::signal::pthread_sigmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::all()),
        Some(&mut unblocked),
    );
    let pid = if guarded < 0 {
        Err(last_error("mprotect(the stack's guard page)"))
    } else if let Err(e) = all_blocked {
        Err(io::Error::from(e))
    } else {
        let top = (base as usize + GUARD + STACK) & !15;
        // SAFETY: the new process runs `program_process` on the stack above
        // and shares this address space only until exec or exit, during
        // which this caller is suspended (CLONE_VFORK): nothing else runs in
        // the memory it reads. It writes only its own stack, allocates
        // nothing and keeps its own copy of the signal actions and the
        // descriptor table (no CLONE_SIGHAND, no CLONE_FILES).
        let pid = unsafe {
            libc::clone(
                program_process,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                start as *const ProgramStart<'_> as *mut libc::c_void,
            )
        };
        if pid < 0 {
            Err(last_error("clone(CLONE_VM|CLONE_VFORK, the program)"))
        } else {
            Ok(pid)
        }
    };
    if all_blocked.is_ok() {
        let _ = nix::sys::signal::pthread_sigmask(
            nix::sys::signal::SigmaskHow::SIG_SETMASK,
            Some(&unblocked),
            None,
        );
    }
    // SAFETY: the program has executed (its own memory now) or exited, so
    // nothing uses the stack any more; unmapping what mmap returned above.
    unsafe { libc::munmap(base, GUARD + STACK) };
    pid
}

/// `dup2(fd, target)`: makes descriptor number `target` refer to `fd`'s file
/// (close-on-exec cleared, as dup2 does).
pub fn dup_onto(fd: BorrowedFd<'_>, target: RawFd) -> io::Result<()> {
    // SAFETY: dup2 takes plain integers; `fd` is open for the call's duration.
    // Replacing `target` is this process's own choice: callers only use it for
    // 0..=4 in a freshly forked child, where no Rust object owns those numbers
    // beyond the ones being replaced on purpose.
    if unsafe { libc::dup2(fd.as_raw_fd(), target) } < 0 {
        return Err(last_error(&format!("dup2({}, {target})", fd.as_raw_fd())));
    }
    Ok(())
}

/// Takes ownership of a descriptor the caller has just created (e.g. with
/// `fcntl(F_DUPFD_CLOEXEC)`), so it is closed when dropped.
pub fn adopt_fd(fd: RawFd) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: callers pass a descriptor that a system call returned to them a
    // moment ago and that nothing else owns, so there is exactly one owner.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

/// Borrows descriptor number `fd`, which the caller has just placed with
/// `dup_onto` and keeps open until exec or exit.
pub fn borrow_fd(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: only used in the forked program child for descriptors 3 and 4,
    // which `dup_onto` created and nothing closes before exec or `_exit`.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// Makes `cmd`'s child start with `fd` as its descriptor 3 (the spawner's
/// socket, when the daemon restarts a spawner by executing spawnd).
pub fn pass_fd_as_3(cmd: &mut std::process::Command, fd: RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec. It calls
    // only dup2 and fcntl, which are async-signal-safe, and allocates nothing
    // (`last_os_error` builds an error from errno alone).
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
pub fn bound_allocator_retention() {
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
