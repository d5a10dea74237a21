//! Mount system calls without a safe wrapper: `mount_setattr`, and the old
//! root's lazy unmount in a helper process that shares the caller's memory.

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
