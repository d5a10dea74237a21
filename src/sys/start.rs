//! Starting the sandboxed program from init the way `posix_spawn` does:
//! `clone(CLONE_VM | CLONE_VFORK)` on a stack of its own, with every step up
//! to the exec prepared beforehand, so the new process allocates nothing
//! and writes nothing of init's but its own stack. Part of [`super`], the
//! one module with `unsafe`.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use super::last_error;

/// Init's status pipe, as the program's process reports a failed step on
/// it: the descriptor, the bytes that start a failure's line and the byte
/// that ends its step's name (given by init: the protocol is the
/// sandbox's, above this module).
#[derive(Clone, Copy)]
pub(crate) struct StatusPipe<'a> {
    /// The pipe's write end.
    pub fd: BorrowedFd<'a>,
    /// The first bytes of a failure's line.
    pub failure_lead: [u8; 2],
    /// The byte between the failed step's name and its error.
    pub step_end: u8,
}

/// How the program's process executes the program.
#[derive(Clone, Copy)]
pub(crate) enum Execute<'a> {
    /// `execveat(fd, "", AT_EMPTY_PATH)` from descriptor 3, where `fd` is
    /// placed. With `script`, descriptor 3 stays open across exec: a `#!`
    /// script's interpreter reads it as `/dev/fd/3`.
    Descriptor {
        /// The program file.
        fd: BorrowedFd<'a>,
        /// Whether descriptor 3 stays open for a `#!` script's interpreter.
        script: bool,
    },
    /// `execve(path)`: a `#!` script whose interpreter is to be given this
    /// path. No descriptor but 0–2 stays open.
    Path(&'a CStr),
}

/// [`Execute`] as plain values the program's process uses.
enum Executed {
    Descriptor { fd: RawFd, script: bool },
    Path(*const libc::c_char),
}

/// What the program's process does between its start and its exec, all of
/// it prepared by init beforehand. That process shares init's memory until it
/// executes (see [`start_program`]), so it only makes system calls with what
/// is here and writes nothing but its own stack: no allocation, no locks.
pub(crate) struct ProgramStart<'a> {
    /// `argv` as a NULL-terminated array of pointers into init's CStrings.
    argv: Vec<*const libc::c_char>,
    /// `envp`, likewise.
    envp: Vec<*const libc::c_char>,
    /// Become descriptors 0, 1 and 2.
    stdio: [RawFd; 3],
    /// What is executed: a descriptor, which becomes descriptor 3, or a path.
    program: Executed,
    /// Init's status pipe: becomes descriptor 4 (close-on-exec), where a
    /// failed step is reported as `<failure_lead><step><step_end><error>\n`.
    status: RawFd,
    /// The first bytes of a failure's line (see [`StatusPipe`]).
    failure_lead: [u8; 2],
    /// The byte between the step and its error (see [`StatusPipe`]).
    step_end: u8,
    /// `setrlimit` calls, soft = hard, each with the step name it reports.
    rlimits: Vec<(libc::c_int, libc::rlimit, &'static str)>,
    /// The CStrings the pointers point into outlive this value.
    _strings: std::marker::PhantomData<&'a CStr>,
}

impl<'a> ProgramStart<'a> {
    /// Prepares the start; `argv`, `envp` and a path to execute must stay
    /// alive and unchanged while the value does (the borrow makes sure of it).
    pub(crate) fn new(
        argv: &'a [std::ffi::CString],
        envp: &'a [std::ffi::CString],
        stdio: [BorrowedFd<'a>; 3],
        program: Execute<'a>,
        status: StatusPipe<'a>,
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
            program: match program {
                Execute::Descriptor { fd, script } => Executed::Descriptor {
                    fd: fd.as_raw_fd(),
                    script,
                },
                Execute::Path(path) => Executed::Path(path.as_ptr()),
            },
            status: status.fd.as_raw_fd(),
            failure_lead: status.failure_lead,
            step_end: status.step_end,
            rlimits: rlimits
                .iter()
                .map(|&(resource, value)| {
                    (
                        resource as libc::c_int,
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

    /// The program process's steps, ending in its exec. Returns only on
    /// failure: the step and errno, and the descriptor to report them on.
    fn run(&self) -> (&'static str, libc::c_int, RawFd) {
        let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // A clean slate: every action is at its default already (init put
        // them there, `child::default_signal_actions`, and installs none), so
        // nothing init inherited runs a handler here or stays ignored after
        // exec; what init blocked is unblocked now.
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
        match self.program {
            Executed::Descriptor { fd, .. } => {
                // SAFETY: as above.
                if unsafe { libc::dup2(fd, 3) } < 0 {
                    return ("dup2(program, 3)", errno(), self.status);
                }
            }
            // Executed by path: nothing is placed at 3, and whatever init
            // held there goes (the program gets 0–2 only).
            Executed::Path(_) => {
                // SAFETY: close_range takes plain integers.
                if unsafe { libc::syscall(libc::SYS_close_range, 3u32, 3u32, 0u32) } < 0 {
                    return ("close_range(3)", errno(), self.status);
                }
            }
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
        if let Executed::Descriptor { script, .. } = self.program {
            let keep = if script { 0 } else { libc::FD_CLOEXEC };
            // SAFETY: fcntl(F_SETFD) on a descriptor this process just placed.
            if unsafe { libc::fcntl(3, libc::F_SETFD, keep) } < 0 {
                return ("fcntl(3, F_SETFD)", errno(), 4);
            }
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(4, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
            return ("fcntl(4, F_SETFD)", errno(), 4);
        }
        for (resource, limit, step) in &self.rlimits {
            // SAFETY: `limit` is a valid rlimit the kernel only reads.
            if unsafe { libc::setrlimit(*resource as _, limit) } < 0 {
                return (step, errno(), 4);
            }
        }
        match self.program {
            Executed::Descriptor { .. } => {
                // SAFETY: descriptor 3 is the hashed program; `argv` and
                // `envp` are NULL-terminated arrays of pointers to
                // NUL-terminated strings that init keeps alive (it is
                // suspended until this call succeeds), and AT_EMPTY_PATH
                // with "" executes the descriptor itself.
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
            Executed::Path(path) => {
                // SAFETY: `path` points into a NUL-terminated string init
                // keeps alive (it is suspended until this call succeeds);
                // `argv` and `envp` as above.
                unsafe { libc::execve(path, self.argv.as_ptr(), self.envp.as_ptr()) };
                ("execve(the script's path)", errno(), 4)
            }
        }
    }
}

/// Puts every signal but SIGKILL and SIGSTOP back to its default action
/// (SIG_DFL), the real-time ones included.
pub(crate) fn restore_every_default_action() -> io::Result<()> {
    for signo in 1..=64 {
        if signo == libc::SIGKILL || signo == libc::SIGSTOP {
            continue;
        }
        if raw_set_default_action(signo) < 0 {
            return Err(last_error(&format!("rt_sigaction({signo}, SIG_DFL)")));
        }
    }
    Ok(())
}

/// `rt_sigaction(signo, SIG_DFL)` through the raw system call, which also
/// reaches the real-time signals the C library reserves.
fn raw_set_default_action(signo: libc::c_int) -> libc::c_long {
    /// The kernel's `struct sigaction` (not the C library's), the same on
    /// x86_64 and aarch64: x86_64's own (arch/x86/include/uapi/asm/signal.h)
    /// and arm64's, the generic one (include/uapi/asm-generic/signal.h) with
    /// SA_RESTORER defined for AArch32 compatibility
    /// (arch/arm64/include/uapi/asm/signal.h), both have the restorer between
    /// the flags and the 8-byte mask.
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

/// The C library's description of `errno`, the text Rust's `io::Error` shows:
/// a pointer to a static NUL-terminated string, or NULL. Safe in the child
/// that shares init's memory: neither variant allocates or takes a lock.
#[cfg(target_env = "musl")]
fn errno_description(errno: libc::c_int) -> *const libc::c_char {
    // SAFETY: musl's strerror only indexes its static message table (the C
    // locale: no translation, no lock) and returns a pointer into it.
    unsafe { libc::strerror(errno) }
}

/// See the musl variant. glibc's strerror may go through gettext and take
/// locks, so this uses strerrordesc_np (glibc ≥ 2.32): the English text, a
/// static string, NULL when unknown.
#[cfg(not(target_env = "musl"))]
fn errno_description(errno: libc::c_int) -> *const libc::c_char {
    extern "C" {
        fn strerrordesc_np(errnum: libc::c_int) -> *const libc::c_char;
    }
    // SAFETY: strerrordesc_np only reads its argument and returns a pointer
    // to a NUL-terminated string in glibc's read-only data, or NULL.
    unsafe { strerrordesc_np(errno) }
}

/// Writes `<failure_lead><step><step_end><strerror> (os error N)\n` to
/// `fd` from a stack buffer (the error as `io::Error` shows it), allocating
/// nothing.
fn report_step_failure(fd: RawFd, start: &ProgramStart<'_>, step: &str, errno: libc::c_int) {
    let mut line = [0u8; 256];
    let mut len = 0;
    let mut push = |bytes: &[u8]| {
        let n = bytes.len().min(line.len() - len);
        line[len..len + n].copy_from_slice(&bytes[..n]);
        len += n;
    };
    push(&start.failure_lead);
    push(step.as_bytes());
    push(&[start.step_end]);
    let text = errno_description(errno);
    if text.is_null() {
        push(b"Unknown error ");
    } else {
        // SAFETY: non-NULL: a static NUL-terminated string (see
        // `errno_description`).
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
pub(crate) fn start_program(start: &ProgramStart<'_>) -> io::Result<libc::pid_t> {
    const GUARD: usize = 4096;
    const STACK: usize = 128 * 1024;
    extern "C" fn program_process(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `ProgramStart` that `start_program` passed,
        // alive and unchanged while init is suspended (CLONE_VFORK).
        let start = unsafe { &*(arg as *const ProgramStart<'_>) };
        let (step, errno, fd) = start.run();
        report_step_failure(fd, start, step, errno);
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
    // Every signal blocked across the clone (as posix_spawn does): init's
    // actions are all at their defaults (`child::default_signal_actions`),
    // and none is delivered to the new process before it has its own
    // descriptors in place. The process clears its mask itself.
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
