//! S: the mount family: mount, umount of the root,
//! pivot_root, open_tree and fsopen.
//!
//! Host safety: a successful umount2("/") or pivot_root in the host's mount
//! namespace would wreck the machine, and the suite runs the probe unconfined
//! as a control. So the destructive attacks run in a forked child that first
//! tries to unshare a private copy of its mount namespace (made MS_PRIVATE so
//! nothing propagates back). The permission question is the same there: the
//! copy belongs to the same user namespace and keeps any locked mounts. When
//! the copy cannot be made (the sandbox denies unshare), the child attacks in
//! place, which can only matter inside a sandbox; it refuses to do so when it
//! holds CAP_SYS_ADMIN in the initial user namespace, and reports that as
//! inconclusive instead.

use std::ffi::CString;
use std::ptr;

use libc::{EACCES, EINVAL, ENOSYS, EPERM};

use super::abi::judge_child;
use crate::child::{in_child, ChildReport, Reply};
use crate::consts::{FSOPEN_CLOEXEC, OPEN_TREE_CLOEXEC};
use crate::report::{judge, Args, UsageError, Verdict};
use crate::sys::{cstring, cvt, holds_host_sys_admin, owned, Errno};

/// Refusals of a syscall filter or a missing CAP_SYS_ADMIN.
const DENIED: &[i32] = &[EPERM, EACCES, ENOSYS];

/// Where the child ran the attack (sent back as the reply's note).
const IN_PRIVATE_COPY: i64 = 1;
const IN_PLACE: i64 = 2;
const NOT_ATTEMPTED: i64 = 3;
const COPY_NOT_PRIVATE: i64 = 4;

fn in_disposable_mount_ns(
    attack: impl FnOnce() -> Result<i64, Errno>,
) -> Result<ChildReport, Errno> {
    let host_admin = holds_host_sys_admin();
    in_child(move || {
        // SAFETY: unshare takes a flag word and changes only this child.
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } == 0 {
            // SAFETY: NULL source/type/data are valid for a propagation change.
            let ret = unsafe {
                libc::mount(
                    ptr::null(),
                    c"/".as_ptr(),
                    ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    ptr::null(),
                )
            };
            if ret != 0 {
                return Reply {
                    result: Err(Errno::last()),
                    note: COPY_NOT_PRIVATE,
                };
            }
            return Reply {
                result: attack(),
                note: IN_PRIVATE_COPY,
            };
        }
        if host_admin {
            return Reply {
                result: Ok(0),
                note: NOT_ATTEMPTED,
            };
        }
        Reply {
            result: attack(),
            note: IN_PLACE,
        }
    })
}

fn judge_mount(what: &str, report: Result<ChildReport, Errno>, refusals: &[i32]) -> Verdict {
    let note = report
        .as_ref()
        .ok()
        .and_then(|r| r.reply)
        .map(|reply| (reply.note, reply.result));
    match note {
        Some((NOT_ATTEMPTED, _)) => Verdict::unclear(format!(
            "{what}: not attempted: holds CAP_SYS_ADMIN in the initial user namespace and could not unshare a private mount namespace"
        )),
        Some((COPY_NOT_PRIVATE, result)) => Verdict::unclear(format!(
            "{what}: not attempted: unshare(CLONE_NEWNS) worked (CAP_SYS_ADMIN) but making the copy private failed: {:?}",
            result.err()
        )),
        Some((place, _)) => {
            let mut verdict = judge_child(what, report, refusals);
            let place = if place == IN_PRIVATE_COPY {
                "in a private copy of the mount namespace (unshare(CLONE_NEWNS) was allowed)"
            } else {
                "in the current mount namespace (unshare(CLONE_NEWNS) was refused)"
            };
            verdict.detail = format!("{} [{place}]", verdict.detail);
            verdict
        }
        None => judge_child(what, report, refusals),
    }
}

fn mount_tmpfs_at(target: &CString) -> Result<i64, Errno> {
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // SAFETY: every pointer is a NUL-terminated string alive for the call.
    let ret = unsafe {
        libc::mount(
            c"spawnd-probe".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            flags,
            c"size=1m".as_ptr().cast(),
        )
    };
    cvt(ret)
}

/// mount(tmpfs) on DIR, unmounted again.
pub fn mount_tmpfs(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let dir = args.optional(0).unwrap_or("/tmp");
    let target = cstring(dir);
    let report = in_disposable_mount_ns(|| {
        let mounted = mount_tmpfs_at(&target)?;
        // SAFETY: `target` is a NUL-terminated path.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        Ok(mounted)
    });
    Ok(judge_mount(&format!("mount(tmpfs, {dir})"), report, DENIED))
}

/// umount2("/", MNT_DETACH).
pub fn umount_root(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let report = in_disposable_mount_ns(|| {
        // SAFETY: a constant NUL-terminated path and a flag word.
        cvt(unsafe { libc::umount2(c"/".as_ptr(), libc::MNT_DETACH) })
    });
    // EINVAL: the mount is locked (it came from a more privileged namespace).
    Ok(judge_mount(
        "umount2(/, MNT_DETACH)",
        report,
        &[EPERM, EACCES, ENOSYS, EINVAL],
    ))
}

/// pivot_root(".", ".") after mounting a tmpfs at /tmp and entering it.
pub fn pivot_root(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let report = in_disposable_mount_ns(|| {
        let new_root = c"/tmp";
        // Without privilege this fails like pivot_root will; ignore it here.
        let _ = mount_tmpfs_at(&new_root.into());
        // SAFETY: constant NUL-terminated paths.
        cvt(unsafe { libc::chdir(new_root.as_ptr()) })?;
        // SAFETY: as above; "." and "." stack the old root under the new one.
        let pivoted =
            cvt(unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) })?;
        // SAFETY: as above.
        unsafe { libc::umount2(c".".as_ptr(), libc::MNT_DETACH) };
        Ok(pivoted)
    });
    Ok(judge_mount(
        "pivot_root(., .) in a tmpfs at /tmp",
        report,
        DENIED,
    ))
}

fn judge_new_fd(what: &str, ret: libc::c_long) -> Verdict {
    let result = cvt(ret).map(|fd| {
        drop(owned(fd as i32));
        format!("fd {fd} (closed)")
    });
    judge(what, result, DENIED)
}

/// open_tree("/", OPEN_TREE_CLONE): a detached copy of the root mount.
pub fn open_tree(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    // SAFETY: a constant NUL-terminated path and flag words.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c"/".as_ptr(),
            libc::OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC,
        )
    };
    Ok(judge_new_fd("open_tree(/, OPEN_TREE_CLONE)", ret))
}

/// fsopen("tmpfs"): a filesystem context, never mounted.
pub fn fsopen(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    // SAFETY: a constant NUL-terminated name and a flag word.
    let ret = unsafe { libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) };
    Ok(judge_new_fd("fsopen(tmpfs)", ret))
}
