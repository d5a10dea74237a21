//! S: system-call ABI and namespace attacks: foreign-ABI entry
//! points that a filter checking only x86_64 numbers would miss (x32 and
//! i386: x86_64 builds only), and every way to make or join a namespace. Each
//! runs in a forked child, so a SIGSYS kill or a namespace change never
//! touches the probe itself.

use std::os::fd::AsRawFd;

use libc::{c_long, EACCES, ENOSPC, ENOSYS, EPERM, EUSERS};

use crate::child::{exit_now, in_child, wait, ChildReport, Exit, Reply};
#[cfg(target_arch = "x86_64")]
use crate::consts::{I386_GETPID, X32_SYSCALL_BIT};
use crate::report::{judge, Args, UsageError, Verdict};
use crate::sys::{self, cvt, Errno};

/// Refusals of a syscall filter or a missing capability.
const DENIED: &[i32] = &[EPERM, EACCES, ENOSYS];
/// Refusals of creating a user namespace: also the namespace-count limits.
const USERNS_DENIED: &[i32] = &[EPERM, EACCES, ENOSYS, ENOSPC, EUSERS];

/// Judges a call made in a forked child: death by SIGSYS is a refusal.
pub(super) fn judge_child(
    what: &str,
    report: Result<ChildReport, Errno>,
    refusals: &[i32],
) -> Verdict {
    match report {
        Err(e) => Verdict::unclear(format!("fork for {what}: {e}")),
        Ok(ChildReport {
            exit: Exit::Signal(libc::SIGSYS),
            ..
        }) => Verdict::blocked(format!("{what}: child killed by SIGSYS")),
        Ok(ChildReport {
            reply: Some(reply),
            pid,
            ..
        }) => judge(
            what,
            reply
                .result
                .map(|value| format!("{value} (in child pid {pid})")),
            refusals,
        ),
        Ok(ChildReport { exit, .. }) => {
            Verdict::unclear(format!("{what}: child {exit} before replying"))
        }
    }
}

/// getpid through the x32 ABI (nr | 0x40000000).
#[cfg(target_arch = "x86_64")]
pub fn x32_syscall(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let report = in_child(|| {
        // SAFETY: x32 getpid takes no arguments and touches no memory.
        cvt(unsafe { libc::syscall(libc::SYS_getpid | X32_SYSCALL_BIT) }).into()
    });
    Ok(judge_child("syscall(getpid | 0x40000000)", report, DENIED))
}

/// getpid through the i386 `int 0x80` gate.
#[cfg(target_arch = "x86_64")]
pub fn int80_i386(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let report = in_child(|| {
        let ret: i32;
        // SAFETY: `int 0x80` with eax = 20 is i386 getpid: no arguments, no
        // memory access. The kernel returns in eax and clobbers r8-r11 on
        // this entry path, which are declared as clobbered.
        unsafe {
            std::arch::asm!(
                "int 0x80",
                inlateout("eax") I386_GETPID => ret,
                out("r8") _, out("r9") _, out("r10") _, out("r11") _,
                options(nostack),
            );
        }
        let result = if (-4095..0).contains(&ret) {
            Err(Errno(-ret))
        } else {
            Ok(i64::from(ret))
        };
        Reply {
            result,
            note: i64::from(sys::getpid()),
        }
    });
    if let Ok(ChildReport {
        exit: Exit::Signal(libc::SIGSEGV),
        ..
    }) = report
    {
        return Ok(Verdict::blocked(
            "int 0x80 getpid: child killed by SIGSEGV (no i386 entry: ia32 emulation is off)",
        ));
    }
    Ok(judge_child("int 0x80 getpid", report, DENIED))
}

/// The first version of `struct clone_args` (64 bytes).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
}

/// After a fork-like clone: the new process leaves at once, the caller reaps it.
fn finish_clone(ret: c_long) -> Reply {
    if ret == 0 {
        exit_now(0);
    }
    let result = cvt(ret);
    if let Ok(pid) = result {
        let _ = wait(pid as i32);
    }
    result.into()
}

/// clone3 with CLONE_NEWUSER hidden in its argument struct.
pub fn clone3_newuser(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let report = in_child(|| {
        let clone_args = CloneArgs {
            flags: libc::CLONE_NEWUSER as u64,
            exit_signal: libc::SIGCHLD as u64,
            ..CloneArgs::default()
        };
        // SAFETY: without CLONE_VM this is a fork: the new process gets its
        // own copy of memory and only calls _exit. The struct is valid for
        // the size passed.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &clone_args as *const CloneArgs,
                std::mem::size_of::<CloneArgs>(),
            )
        };
        finish_clone(ret)
    });
    Ok(judge_child("clone3(CLONE_NEWUSER)", report, USERNS_DENIED))
}

/// clone with CLONE_NEWUSER in its flags register.
pub fn clone_newuser(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let report = in_child(|| {
        let flags = (libc::CLONE_NEWUSER | libc::SIGCHLD) as c_long;
        // SAFETY: flags without CLONE_VM and a NULL stack make this a fork;
        // the new process only calls _exit. No pointers are passed.
        let ret = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
        finish_clone(ret)
    });
    Ok(judge_child(
        "clone(CLONE_NEWUSER|SIGCHLD)",
        report,
        USERNS_DENIED,
    ))
}

fn unshare_in_child(flag: i32, what: &str, refusals: &[i32]) -> Verdict {
    // SAFETY: unshare takes a flag word; it changes only the child.
    let report = in_child(|| cvt(unsafe { libc::unshare(flag) }).into());
    judge_child(what, report, refusals)
}

/// unshare(CLONE_NEWUSER).
pub fn unshare_user(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    Ok(unshare_in_child(
        libc::CLONE_NEWUSER,
        "unshare(CLONE_NEWUSER)",
        USERNS_DENIED,
    ))
}

/// unshare(CLONE_NEWNS).
pub fn unshare_mount(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    Ok(unshare_in_child(
        libc::CLONE_NEWNS,
        "unshare(CLONE_NEWNS)",
        DENIED,
    ))
}

/// unshare(CLONE_NEWNET).
pub fn unshare_net(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    Ok(unshare_in_child(
        libc::CLONE_NEWNET,
        "unshare(CLONE_NEWNET)",
        DENIED,
    ))
}

/// setns into its own network namespace (a no-op join that still needs
/// CAP_SYS_ADMIN).
pub fn setns(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let path = "/proc/self/ns/net";
    let fd = match sys::open(path, libc::O_RDONLY) {
        Ok(fd) => fd,
        Err(e) if e.is_one_of(&[EPERM, EACCES, libc::ENOENT]) => {
            return Ok(Verdict::blocked(format!("open({path}): {e}")))
        }
        Err(e) => return Ok(Verdict::unclear(format!("open({path}): {e}"))),
    };
    // SAFETY: `fd` is an open namespace file; setns takes it and a flag word.
    let result = cvt(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) });
    Ok(judge(
        "setns(/proc/self/ns/net, CLONE_NEWNET)",
        result.map(|v| v.to_string()),
        DENIED,
    ))
}

/// chroot("/") in a child: needs CAP_SYS_CHROOT (the classic way out of a
/// chroot jail, and of a pivot_root'ed sandbox that keeps the capability).
pub fn chroot(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    // SAFETY: a constant NUL-terminated path; it changes only the child.
    let report = in_child(|| cvt(unsafe { libc::chroot(c"/".as_ptr()) }).into());
    Ok(judge_child("chroot(/)", report, DENIED))
}
