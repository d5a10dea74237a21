//! Mount system calls without a safe wrapper: `mount_setattr`, and the old
//! root's lazy unmount in a helper process that shares the caller's memory.
//!
//! Per architecture: `mount_setattr` is the same everywhere. The unmount
//! helpers make raw system calls in inline assembly, written for x86_64
//! only. On aarch64, [`detach_mount_in_background`] unmounts in the caller
//! (init waits out the kernel's grace period itself) and
//! [`detach_mount_when_told`] reports `Unsupported`, so a spare sandbox
//! has no helper waiting and init detaches at the pivot as a sandbox made at
//! the request does. Either way a failed unmount is an error: the pivot
//! fails and the program never starts with the host's root mounted.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

use super::last_error;

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
/// else; its exit code is umount2's errno (0 on success). On aarch64 the
/// unmount is done here, in the caller, and no pid is returned.
pub(crate) fn detach_mount_in_background(path: &'static CStr) -> io::Result<Option<libc::pid_t>> {
    #[cfg(target_arch = "x86_64")]
    {
        extern "C" fn helper(arg: *mut libc::c_void) -> libc::c_int {
            // SAFETY: umount2 reads the NUL-terminated path `arg` points to
            // (a 'static string), and exit ends this task alone; neither
            // touches memory the caller uses.
            unsafe { exit_task(raw_detach(arg.cast())) }
        }
        // SAFETY: `helper` makes only raw system calls, on its own stack and
        // the 'static path.
        let pid = unsafe {
            clone_vm_helper(
                helper,
                path.as_ptr() as *mut libc::c_void,
                "clone(CLONE_VM, the unmount helper)",
            )?
        };
        Ok(Some(pid))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH)?;
        Ok(None)
    }
}

/// A helper cloned ahead of time, like [`detach_mount_in_background`]'s, that
/// closes every descriptor but its pipe's read end, waits for one byte on
/// it and then unmounts its path (`MNT_DETACH`):
/// a spare sandbox clones it while it waits for its order, so the clone
/// is off the way from request to program. Writing one byte to `trigger`
/// starts the unmount; closing `trigger` unwritten lets the helper go
/// without unmounting (exit code ECANCELED). Its exit code is otherwise
/// umount2's errno (0 on success), as with the other helper. It stays in
/// the cgroups of whoever cloned it (init moves only itself into the
/// sandbox's): it runs no code of a request, and init reaps it before the
/// program starts.
pub(crate) struct WaitingDetach {
    /// The helper's pid (the caller reaps it).
    pub pid: libc::pid_t,
    /// The write end of its pipe.
    pub trigger: std::os::fd::OwnedFd,
}

/// What the waiting helper gets: only it touches this memory after the clone.
#[cfg(target_arch = "x86_64")]
#[repr(C)]
struct WaitingArgs {
    path: *const libc::c_char,
    read_fd: libc::c_int,
    byte: u8,
}

/// A raw three-argument system call (no libc wrapper: no errno, which a
/// helper would share with its parent). Returns the kernel's value
/// (negative errno on failure).
///
/// # Safety
/// The arguments must be valid for system call `nr`.
#[cfg(target_arch = "x86_64")]
unsafe fn raw_syscall3(nr: i64, a: i64, b: i64, c: i64) -> i64 {
    let ret: i64;
    // SAFETY: the caller's promise; the kernel clobbers rcx and r11 only.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// `umount2(path, MNT_DETACH)` as a raw call: 0, or the errno.
///
/// # Safety
/// `path` must point to a NUL-terminated string.
#[cfg(target_arch = "x86_64")]
unsafe fn raw_detach(path: *const libc::c_char) -> i64 {
    // SAFETY: the caller's promise; umount2 only reads the path.
    let ret = unsafe { raw_syscall3(libc::SYS_umount2, path as i64, libc::MNT_DETACH as i64, 0) };
    if ret < 0 {
        ret.wrapping_neg()
    } else {
        0
    }
}

/// Ends the calling task alone (`exit`, not `exit_group`) with `code`.
///
/// # Safety
/// Only for a helper task made by [`clone_vm_helper`]: nothing runs after it.
#[cfg(target_arch = "x86_64")]
unsafe fn exit_task(code: i64) -> ! {
    // SAFETY: the caller's promise; exit does not return.
    unsafe {
        std::arch::asm!(
            "syscall",
            in("rax") libc::SYS_exit,
            in("rdi") code,
            options(noreturn, nostack),
        )
    }
}

/// Clones `helper(arg)` into a process sharing this address space
/// (CLONE_VM, not CLONE_THREAD: reaped with waitpid, SIGCHLD when it ends),
/// on a 16 KiB stack of its own that lives as long as the process (the
/// helper may wait in the kernel long after the caller went on). `what`
/// names the call in an error.
///
/// # Safety
/// `helper` must touch nothing but its own stack, `arg` (which nothing else
/// may touch after the clone) and 'static data, and only through raw
/// system calls ([`raw_syscall3`], [`exit_task`]): it shares the caller's
/// memory, errno and TLS.
#[cfg(target_arch = "x86_64")]
unsafe fn clone_vm_helper(
    helper: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
    what: &str,
) -> io::Result<libc::pid_t> {
    const STACK: usize = 16 * 1024;
    let stack: &'static mut [u8] = Box::leak(vec![0u8; STACK].into_boxed_slice());
    let top = (stack.as_mut_ptr() as usize + STACK) & !15;
    // SAFETY: libc's clone (musl's in the static build: it aligns the stack
    // and touches no TLS in the child) runs `helper` on the stack given; the
    // caller's promise keeps sharing memory from racing with anything the
    // caller does.
    let pid = unsafe {
        libc::clone(
            helper,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::SIGCHLD,
            arg,
        )
    };
    if pid < 0 {
        return Err(last_error(what));
    }
    Ok(pid)
}

/// Clones a [`WaitingDetach`] helper for `path`.
#[cfg(target_arch = "x86_64")]
pub(crate) fn detach_mount_when_told(path: &'static CStr) -> io::Result<WaitingDetach> {
    use std::os::fd::{FromRawFd, OwnedFd};
    extern "C" fn helper(arg: *mut libc::c_void) -> libc::c_int {
        let args = arg.cast::<WaitingArgs>();
        // SAFETY: `args` is the helper's own leaked `WaitingArgs` (nothing
        // else touches it after the clone); every call is a raw system call
        // on this task's copy of the descriptor table, on the 'static path,
        // or into `args.byte`; exit ends this task alone.
        unsafe {
            // Only the pipe's read end stays in this copy of the table (the
            // write end too is closed, so a dropped trigger reads as EOF): no
            // copy of the spare's order socket, or of anything else open at
            // the clone, outlives the spare by the helper's last moments.
            let keep = (*args).read_fd as i64;
            if keep > 0 {
                let _ = raw_syscall3(libc::SYS_close_range, 0, keep - 1, 0);
            }
            let _ = raw_syscall3(libc::SYS_close_range, keep + 1, u32::MAX as i64, 0);
            let got = loop {
                let n = raw_syscall3(
                    libc::SYS_read,
                    keep,
                    std::ptr::addr_of_mut!((*args).byte) as i64,
                    1,
                );
                if n != -(libc::EINTR as i64) {
                    break n;
                }
            };
            exit_task(if got == 1 {
                raw_detach((*args).path)
            } else {
                libc::ECANCELED as i64
            })
        }
    }
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(last_error("pipe2(the unmount helper's trigger)"));
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // Lives as long as the process, like the stack.
    let args: &'static mut WaitingArgs = Box::leak(Box::new(WaitingArgs {
        path: path.as_ptr(),
        read_fd: read_end.as_raw_fd(),
        byte: 0,
    }));
    // SAFETY: `helper` makes only raw system calls, on its own stack, its
    // own `args` and the 'static path; it has its own copy of the descriptor
    // table, so closing descriptors on either side affects only that side.
    let pid = unsafe {
        clone_vm_helper(
            helper,
            (args as *mut WaitingArgs).cast(),
            "clone(CLONE_VM, the waiting unmount helper)",
        )?
    };
    drop(read_end);
    Ok(WaitingDetach {
        pid,
        trigger: write_end,
    })
}

/// No helper outside x86_64 (its raw calls are x86_64 assembly): always
/// `Unsupported`, and init unmounts the old root itself at the pivot.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn detach_mount_when_told(_path: &'static CStr) -> io::Result<WaitingDetach> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
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
    userns: Option<RawFd>,
) -> io::Result<()> {
    let attr = MountAttr {
        attr_set,
        attr_clr,
        propagation: 0,
        userns_fd: userns.map_or(0, |fd| fd as u64),
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
pub(crate) fn mount_setattr(
    path: &CStr,
    recursive: bool,
    attr_set: u64,
    attr_clr: u64,
) -> io::Result<()> {
    let flags = if recursive {
        libc::AT_RECURSIVE as libc::c_uint
    } else {
        0
    };
    mount_setattr_at(libc::AT_FDCWD, path, flags, attr_set, attr_clr, None)
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE?, …)`: the mount whose root `fd` is.
pub(crate) fn mount_setattr_fd(
    fd: &std::os::fd::OwnedFd,
    recursive: bool,
    attr_set: u64,
    attr_clr: u64,
) -> io::Result<()> {
    let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    mount_setattr_at(fd.as_raw_fd(), c"", flags, attr_set, attr_clr, None)
}

/// `MOUNT_ATTR_IDMAP` of `<linux/mount.h>`.
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
/// `OPEN_TREE_CLONE` of `<linux/mount.h>`.
const OPEN_TREE_CLONE: libc::c_uint = 1;
/// `MOVE_MOUNT_F_EMPTY_PATH` of `<linux/mount.h>`.
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x04;
/// `MOVE_MOUNT_T_EMPTY_PATH` of `<linux/mount.h>`.
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

/// `open_tree(fd, "", OPEN_TREE_CLONE | AT_EMPTY_PATH)`: a detached copy
/// of the mount at `fd`'s file (that file's filesystem only: no mount
/// beneath it comes along), in an anonymous mount namespace of its own,
/// close-on-exec.
/// Only such a detached tree may be given an idmapping
/// ([`idmap_detached_tree`]).
pub(crate) fn clone_detached_tree(
    fd: std::os::fd::BorrowedFd<'_>,
) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let flags =
        OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_EMPTY_PATH as libc::c_uint;
    // SAFETY: `fd` is open and the path is an empty NUL-terminated string;
    // open_tree reads them and returns a new descriptor or -1.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, fd.as_raw_fd(), c"".as_ptr(), flags) };
    if ret < 0 {
        return Err(last_error("open_tree(OPEN_TREE_CLONE)"));
    }
    let raw = RawFd::try_from(ret).map_err(|_| io::Error::other("open_tree: fd out of range"))?;
    // SAFETY: the descriptor was just returned by the kernel and nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) })
}

/// `mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, {MOUNT_ATTR_IDMAP,
/// userns})`: every mount of the detached `tree` shows its files' owners
/// through `userns`'s id maps. EINVAL where a filesystem of the tree cannot
/// be idmapped, ENOSYS before Linux 5.12, EPERM without CAP_SYS_ADMIN over
/// the filesystem's user namespace.
pub(crate) fn idmap_detached_tree(
    tree: &std::os::fd::OwnedFd,
    userns: std::os::fd::BorrowedFd<'_>,
) -> io::Result<()> {
    let flags = (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint;
    mount_setattr_at(
        tree.as_raw_fd(),
        c"",
        flags,
        MOUNT_ATTR_IDMAP,
        0,
        Some(userns.as_raw_fd()),
    )
}

/// `move_mount(tree, "", target, "", MOVE_MOUNT_F_EMPTY_PATH |
/// MOVE_MOUNT_T_EMPTY_PATH)`: attaches the detached `tree` onto the file
/// `target` is opened on, in the caller's mount namespace.
pub(crate) fn move_detached_tree(
    tree: &std::os::fd::OwnedFd,
    target: &std::os::fd::OwnedFd,
) -> io::Result<()> {
    // SAFETY: both descriptors are open and both paths are empty
    // NUL-terminated strings; move_mount only reads them during the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if ret < 0 {
        return Err(last_error("move_mount"));
    }
    Ok(())
}
