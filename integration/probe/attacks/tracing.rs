//! S: reaching into another process (threat 9): ptrace, process_vm_readv and
//! pidfd_getfd against a pid the test names (the supervisor, a sibling, or in
//! the control run a host process it started). None of them stops or changes
//! the target: PTRACE_SEIZE does not stop it and the kernel detaches when the
//! probe exits; the memory read and the fd copy are read-only.

use std::os::fd::AsRawFd;

use libc::{EACCES, EBADF, EFAULT, ENOSYS, EPERM, ESRCH};

use crate::report::{judge, Args, Findings, UsageError, Verdict};
use crate::sys::{self, cvt, owned};

/// Refusals: filtered, not permitted, or not visible from here.
const DENIED: &[i32] = &[EPERM, EACCES, ENOSYS, ESRCH];

fn target_pid(args: &Args<'_>) -> Result<i32, UsageError> {
    args.at_most(1)?;
    let pid: i32 = args.parsed(0, "PID")?;
    if pid <= 0 {
        return Err(UsageError(format!("PID must be positive, got {pid}")));
    }
    Ok(pid)
}

/// ptrace(PTRACE_SEIZE, PID).
pub fn ptrace_attach(args: &Args<'_>) -> Result<Verdict, UsageError> {
    let pid = target_pid(args)?;
    // SAFETY: PTRACE_SEIZE takes a pid and two zero words; no pointers.
    let ret = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0usize, 0usize) };
    let result = cvt(ret).map(|_| "0 (attached; detached when the probe exits)".to_string());
    Ok(judge(
        &format!("ptrace(PTRACE_SEIZE, {pid})"),
        result,
        DENIED,
    ))
}

/// The start of the first readable mapping of `pid`, if its maps are readable.
fn first_readable_address(pid: i32) -> Option<usize> {
    let maps = sys::read_file(&format!("/proc/{pid}/maps")).ok()?;
    maps.lines().find_map(|line| {
        let (range, rest) = line.split_once(' ')?;
        if !rest.starts_with('r') {
            return None;
        }
        usize::from_str_radix(range.split('-').next()?, 16).ok()
    })
}

/// process_vm_readv of 16 bytes from PID.
pub fn process_vm_readv(args: &Args<'_>) -> Result<Verdict, UsageError> {
    let pid = target_pid(args)?;
    // Unknown address: any page will do, the access check comes first and an
    // unmapped address then fails with EFAULT.
    let address = first_readable_address(pid).unwrap_or(0x1000);
    let mut buf = [0u8; 16];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, which is writable for its length; the
    // remote iovec is only interpreted in the target's address space.
    let ret = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    let what = format!("process_vm_readv({pid}, {address:#x})");
    let mut findings = Findings::new();
    match cvt(ret as i64) {
        Err(e) if e.0 == EFAULT => {
            findings.escaped(format!("{what}: EFAULT (access granted, address unmapped)"))
        }
        result => findings.check(&what, result.map(|n| format!("{n} bytes read")), DENIED),
    }
    Ok(findings.verdict())
}

/// pidfd_open(PID) then pidfd_getfd of fds 0-2.
pub fn pidfd_getfd(args: &Args<'_>) -> Result<Verdict, UsageError> {
    let pid = target_pid(args)?;
    // SAFETY: pidfd_open takes a pid and a flag word; no pointers.
    let pidfd = match cvt(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) }) {
        Ok(fd) => owned(fd as i32),
        Err(e) => return Ok(judge(&format!("pidfd_open({pid})"), Err(e), DENIED)),
    };
    let mut findings = Findings::new();
    for target_fd in 0..3 {
        // SAFETY: pidfd_getfd takes an open pidfd, an fd number and flags.
        let ret = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target_fd, 0) };
        let what = format!("pidfd_getfd(pidfd of {pid}, {target_fd})");
        match cvt(ret) {
            Ok(fd) => {
                drop(owned(fd as i32));
                findings.escaped(format!("{what} = fd {fd} (stolen, closed)"));
            }
            Err(e) if e.0 == EBADF => {
                findings.escaped(format!("{what}: EBADF (access granted, no such fd)"))
            }
            Err(e) => findings.check(&what, Err(e), DENIED),
        }
        if findings.any_escaped() {
            break;
        }
    }
    Ok(findings.verdict())
}
