//! S: privileged leftovers: module loading, kexec, file
//! handles, port I/O (x86_64 only), reboot, the clock, accounting, swap,
//! and the process's own NoNewPrivs/capability/seccomp state.
//!
//! Host safety: each call is shaped so that passing the privilege check
//! changes nothing. finit_module gets /dev/null, kexec_load one segment too
//! many, acct and swapon a path that does not exist, reboot only the
//! Ctrl-Alt-Del switch (restored), settimeofday the time it just read.

use std::os::fd::AsRawFd;

use libc::{EACCES, EINVAL, ENOSYS, EPERM};

use crate::consts::*;
use crate::report::{judge, Args, Findings, UsageError, Verdict};
use crate::sys::{self, cstring, cvt, owned, ProcStatus};

/// Refusals of a syscall filter or a missing capability.
const DENIED: &[i32] = &[EPERM, EACCES, ENOSYS];
/// For calls whose privilege check precedes everything else: only these mean
/// refused; any other error means the check passed.
const PRIVILEGE_DENIED: &[i32] = &[EPERM, ENOSYS];

/// Judges a call that can never succeed: refused on `PRIVILEGE_DENIED`, and
/// escaped on any other error (the privilege check passed).
fn judge_privilege(what: &str, result: Result<i64, sys::Errno>) -> Verdict {
    match result {
        Ok(value) => Verdict::escaped(format!("{what} = {value}")),
        Err(e) if e.is_one_of(PRIVILEGE_DENIED) => Verdict::blocked(format!("{what}: {e}")),
        Err(e) => Verdict::escaped(format!("{what}: {e} (past the privilege check)")),
    }
}

/// finit_module(/dev/null): not a module, so it can never load.
pub fn init_module(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let (label, fd) = match sys::open("/dev/null", libc::O_RDONLY) {
        Ok(fd) => ("/dev/null", fd),
        Err(_) => match sys::open("/", libc::O_RDONLY | libc::O_DIRECTORY) {
            Ok(fd) => ("/", fd),
            Err(e) => {
                return Ok(Verdict::unclear(format!(
                    "open(/dev/null) and open(/): {e}"
                )))
            }
        },
    };
    // SAFETY: an open fd, a constant empty parameter string and no flags.
    let ret = unsafe { libc::syscall(libc::SYS_finit_module, fd.as_raw_fd(), c"".as_ptr(), 0) };
    Ok(judge_privilege(&format!("finit_module({label})"), cvt(ret)))
}

/// kexec_load with one segment more than allowed.
pub fn kexec_load(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    // SAFETY: the segment count is rejected before the NULL segment array
    // would be read; flags 0 = default architecture.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_kexec_load,
            0usize,
            KEXEC_SEGMENT_MAX + 1,
            0usize,
            0usize,
        )
    };
    Ok(judge_privilege("kexec_load(17 segments)", cvt(ret)))
}

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct FileHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; 128],
}

/// The file handle of "/", or a made-up one when the filesystem or the
/// filter refuses (a made-up handle still meets the privilege check first).
fn handle_of_root(findings: &mut Findings) -> FileHandle {
    let mut handle = FileHandle {
        handle_bytes: 128,
        handle_type: 0,
        f_handle: [0; 128],
    };
    let mut mount_id: i32 = 0;
    // SAFETY: `handle` has room for handle_bytes bytes; `mount_id` is a valid
    // out-pointer; the path is a constant.
    let named = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            c"/".as_ptr(),
            &mut handle as *mut FileHandle,
            &mut mount_id as *mut i32,
            0,
        )
    };
    if let Err(e) = cvt(named) {
        findings.note(format!("name_to_handle_at(/): {e}, using a made-up handle"));
        handle = FileHandle {
            handle_bytes: 8,
            handle_type: 1,
            f_handle: [0; 128],
        };
    }
    handle
}

/// name_to_handle_at("/") then open_by_handle_at ("shocker").
pub fn open_by_handle_at(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let mut findings = Findings::new();
    let mut handle = handle_of_root(&mut findings);
    let mount_fd = match sys::open("/", libc::O_RDONLY | libc::O_DIRECTORY) {
        Ok(fd) => fd,
        Err(e) => return Ok(Verdict::unclear(format!("open(/): {e}"))),
    };
    // SAFETY: `handle` is a valid file_handle; flags are plain words.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount_fd.as_raw_fd(),
            &mut handle as *mut FileHandle,
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    let what = "open_by_handle_at(handle of /)";
    match cvt(ret) {
        Ok(fd) => {
            drop(owned(fd as i32));
            findings.escaped(format!("{what} = fd {fd} (closed)"));
        }
        Err(e) if e.is_one_of(&[libc::ESTALE, EINVAL]) => {
            findings.escaped(format!("{what}: {e} (past the privilege check)"))
        }
        Err(e) => findings.check(what, Err(e), DENIED),
    }
    Ok(findings.verdict())
}

/// iopl(3), dropped back to 0. x86 only: no other architecture has the call.
#[cfg(target_arch = "x86_64")]
pub fn iopl(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    // SAFETY: iopl takes a level; the probe performs no port I/O.
    let result = cvt(unsafe { libc::syscall(libc::SYS_iopl, 3) }).map(|v| {
        // SAFETY: as above; level 0 drops the privilege again.
        unsafe { libc::syscall(libc::SYS_iopl, 0) };
        format!("{v} (dropped back to 0)")
    });
    Ok(judge("iopl(3)", result, DENIED))
}

fn reboot_cmd(cmd: libc::c_long) -> Result<i64, sys::Errno> {
    // SAFETY: CAD_OFF/CAD_ON only flip the Ctrl-Alt-Del switch; no pointer
    // argument is read for them.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_reboot,
            LINUX_REBOOT_MAGIC1,
            LINUX_REBOOT_MAGIC2,
            cmd,
            0usize,
        )
    })
}

/// reboot(LINUX_REBOOT_CMD_CAD_OFF), restored afterwards.
pub fn reboot(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let before = sys::read_file("/proc/sys/kernel/ctrl-alt-del")
        .ok()
        .map(|s| s.trim().to_string());
    let what = "reboot(LINUX_REBOOT_CMD_CAD_OFF)";
    Ok(match reboot_cmd(LINUX_REBOOT_CMD_CAD_OFF) {
        Ok(_) => {
            let restore = match before.as_deref() {
                Some("0") => "was already off".to_string(),
                Some(_) => format!(
                    "restored CAD_ON: {:?}",
                    reboot_cmd(LINUX_REBOOT_CMD_CAD_ON).map_err(|e| e.to_string())
                ),
                None => "previous state unknown, left off".to_string(),
            };
            Verdict::escaped(format!("{what} = 0 ({restore})"))
        }
        Err(e) if e.0 == EINVAL => Verdict::blocked(format!(
            "{what}: EINVAL (a child pid namespace ignores the switch)"
        )),
        Err(e) => judge(what, Err(e), DENIED),
    })
}

/// settimeofday to the current time.
pub fn settimeofday(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let mut now = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    // SAFETY: `now` is a valid out-pointer; the timezone may be NULL.
    if unsafe { libc::gettimeofday(&mut now, std::ptr::null_mut()) } != 0 {
        return Ok(Verdict::unclear(format!(
            "gettimeofday: {}",
            sys::Errno::last()
        )));
    }
    // SAFETY: `now` is a valid timeval; a NULL timezone leaves it unchanged.
    let result = cvt(unsafe { libc::settimeofday(&now, std::ptr::null()) });
    let result = result.map(|_| {
        format!(
            "0 (set to {}.{:06}, the time just read)",
            now.tv_sec, now.tv_usec
        )
    });
    Ok(judge("settimeofday(now)", result, DENIED))
}

/// acct(a missing path): refused with EPERM before the path is looked at.
pub fn acct(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let path = cstring(NONEXISTENT_PATH);
    // SAFETY: a NUL-terminated path.
    let ret = unsafe { libc::acct(path.as_ptr()) };
    Ok(judge_privilege(
        &format!("acct({NONEXISTENT_PATH})"),
        cvt(ret),
    ))
}

/// swapon(a missing path).
pub fn swapon(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let path = cstring(NONEXISTENT_PATH);
    // SAFETY: a NUL-terminated path and no flags.
    let ret = unsafe { libc::syscall(libc::SYS_swapon, path.as_ptr(), 0) };
    Ok(judge_privilege(
        &format!("swapon({NONEXISTENT_PATH})"),
        cvt(ret),
    ))
}

/// NoNewPrivs, the five capability sets and the seccomp mode.
pub fn no_new_privs_and_caps(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let status = match ProcStatus::read("self") {
        Ok(status) => status,
        Err(e) => return Ok(Verdict::unclear(format!("read(/proc/self/status): {e}"))),
    };
    let mut findings = Findings::new();
    match status.no_new_privs {
        Some(1) => findings.refused("NoNewPrivs: 1"),
        other => findings.escaped(format!("NoNewPrivs: {}", shown(other))),
    }
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        match status.cap(set) {
            Some(0) => findings.refused(format!("{set}: 0")),
            Some(bits) => findings.escaped(format!("{set}: {bits:016x}")),
            None => findings.escaped(format!("{set}: missing")),
        }
    }
    match status.seccomp {
        Some(2) => findings.refused("Seccomp: 2"),
        other => findings.escaped(format!("Seccomp: {}", shown(other))),
    }
    Ok(findings.verdict())
}

fn shown(value: Option<u32>) -> String {
    value.map_or("missing".to_string(), |v| v.to_string())
}
