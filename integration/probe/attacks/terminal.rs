//! T: terminal and session attacks: injecting input into a tty
//! the supervisor shares, reading the console, and signalling processes
//! outside the sandbox through kill(-1) or a shared process group.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use libc::{EACCES, EBADF, EIO, ENODEV, ENOENT, ENOTTY, ENXIO, EPERM, ESRCH};

use crate::child::kill;
use crate::consts::TIOCL_GETSHIFTSTATE;
use crate::report::{Args, Findings, UsageError, Verdict};
use crate::sys::{self, cvt, Errno};

/// Refusals of a tty ioctl: not allowed, not a tty, fd closed, or
/// `dev.tty.legacy_tiocsti=0` (EIO).
const IOCTL_REFUSALS: &[i32] = &[EPERM, EACCES, ENOTTY, EBADF, EIO, libc::ENOSYS];
/// Refusals of opening a tty device: no controlling tty, absent, denied.
const OPEN_REFUSALS: &[i32] = &[ENXIO, ENOENT, EACCES, EPERM, ENODEV, EIO];

/// A tty candidate: a label and a descriptor (owned when opened here).
struct Target {
    label: String,
    fd: RawFd,
    _owned: Option<OwnedFd>,
}

/// fds 0-2 plus the given device paths that can be opened.
fn targets(paths: &[&str], findings: &mut Findings) -> Vec<Target> {
    let mut targets: Vec<Target> = (0..3)
        .map(|fd| Target {
            label: format!("fd {fd}"),
            fd,
            _owned: None,
        })
        .collect();
    for path in paths {
        match sys::open(path, libc::O_RDWR | libc::O_NOCTTY | libc::O_NONBLOCK) {
            Ok(fd) => targets.push(Target {
                label: path.to_string(),
                fd: fd.as_raw_fd(),
                _owned: Some(fd),
            }),
            Err(e) if e.is_one_of(OPEN_REFUSALS) => findings.refused(format!("open({path}): {e}")),
            Err(e) => findings.unclear(format!("open({path}): {e}")),
        }
    }
    targets
}

fn inject(args: &Args<'_>, high_bits: bool) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let text = args.optional(0).unwrap_or("x");
    let mut findings = Findings::new();
    for target in targets(&["/dev/tty"], &mut findings) {
        if findings.any_escaped() {
            // One injection proves it; spare the tty the rest.
            findings.note(format!("{}: not tried", target.label));
            continue;
        }
        let mut first = None;
        for byte in text.bytes() {
            let result = push_byte(target.fd, byte, high_bits);
            first.get_or_insert(result);
            if result.is_err() {
                break;
            }
        }
        let what = format!(
            "ioctl({}, TIOCSTI{})",
            target.label,
            if high_bits { "|1<<32" } else { "" }
        );
        let result = first.unwrap_or(Err(Errno(libc::EINVAL)));
        findings.check(
            &what,
            result.map(|_| format!("0 (injected {text:?})")),
            IOCTL_REFUSALS,
        );
    }
    Ok(findings.verdict())
}

fn push_byte(fd: RawFd, byte: u8, high_bits: bool) -> Result<i64, Errno> {
    // libc's TIOCSTI is a c_int for musl and a c_ulong for glibc.
    #[allow(clippy::unnecessary_cast)]
    let cmd: u64 = libc::TIOCSTI as u64 | if high_bits { 1 << 32 } else { 0 };
    // SAFETY: TIOCSTI reads one byte from the pointer, which points at `byte`;
    // the raw syscall passes the full 64-bit cmd the kernel truncates to 32.
    cvt(unsafe { libc::syscall(libc::SYS_ioctl, fd, cmd, &byte as *const u8) })
}

/// ioctl(TIOCSTI) on the std fds and /dev/tty.
pub fn tiocsti(args: &Args<'_>) -> Result<Verdict, UsageError> {
    inject(args, false)
}

/// ioctl(TIOCSTI | 1<<32): the filter-bypass variant (snapd CVE-2019-7303).
pub fn tiocsti_high_bits(args: &Args<'_>) -> Result<Verdict, UsageError> {
    inject(args, true)
}

/// ioctl(TIOCLINUX, TIOCL_GETSHIFTSTATE): proves the console ioctl is reachable
/// without changing anything.
pub fn tioclinux(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let mut findings = Findings::new();
    for target in targets(&["/dev/tty", "/dev/tty0", "/dev/console"], &mut findings) {
        let mut arg = [TIOCL_GETSHIFTSTATE, 0];
        // SAFETY: TIOCLINUX reads the subcode byte at the pointer and writes
        // one result byte back there; `arg` is two valid bytes.
        let ret = unsafe { libc::ioctl(target.fd, libc::TIOCLINUX as _, arg.as_mut_ptr()) };
        let result = cvt(ret).map(|_| format!("0 (shift state {})", arg[0]));
        findings.check(
            &format!("ioctl({}, TIOCLINUX)", target.label),
            result,
            IOCTL_REFUSALS,
        );
    }
    Ok(findings.verdict())
}

/// kill(-1, 0) and the process-group check.
pub fn kill_parent_group(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let me = sys::getpid();
    let mut findings = Findings::new();
    findings.check(
        "kill(-1, 0)",
        kill(-1, 0).map(|_| "0: some other process can be signalled".into()),
        &[ESRCH, EPERM],
    );
    // SAFETY: getpgrp and getsid(0) take no pointers and cannot fail for self.
    let (pgrp, sid) = unsafe { (libc::getpgrp(), libc::getsid(0)) };
    if pgrp == 0 {
        findings.escaped("getpgrp() = 0: the process group is led from outside this pid namespace, so kill(0, sig) reaches it");
    } else {
        findings.note(format!("getpgrp() = {pgrp}, getsid(0) = {sid}"));
    }
    match sys::visible_pids() {
        Ok(pids) => {
            let reachable: Vec<i32> = pids
                .into_iter()
                .filter(|&p| p != me && kill(p, 0).is_ok())
                .collect();
            findings.note(format!(
                "signalable pids besides itself: {} {:?}",
                reachable.len(),
                &reachable[..reachable.len().min(10)]
            ));
        }
        Err(e) => findings.note(format!("read_dir(/proc): {e}")),
    }
    Ok(findings.verdict())
}
