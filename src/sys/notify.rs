//! seccomp user notification: installing a filter that hands some calls to
//! a supervisor (`SECCOMP_FILTER_FLAG_NEW_LISTENER`), and the supervisor's
//! side of the listener (receive a notification, check that it is still
//! pending, answer it). `nix` exposes none of these ioctls.
//!
//! spawnd uses the listener to observe, never to grant: a notification is
//! answered with the decision spawnd's own policy already makes (continue
//! an allowed call, fail a refused one with its errno), so the kernel's
//! re-read of the call's arguments after "continue" cannot widen anything
//! (the uapi header says the same: a notifier cannot implement a policy).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::confine::{set_mode_filter, SockFilter};
use super::last_error;

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6): the woken task runs on
/// the supervisor's CPU, which cuts a notification's cost several times.
const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;

/// One pending notification: who made which call, with what arguments.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Notification {
    /// The kernel's cookie for the answer.
    pub id: u64,
    /// The calling thread, as this process's pid namespace numbers it.
    pub pid: u32,
    /// The call's number.
    pub nr: i32,
    /// `AUDIT_ARCH_*` of the call.
    pub arch: u32,
    /// The call's six arguments.
    pub args: [u64; 6],
}

/// The answer to a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Let the call run as if no filter had stopped it.
    Continue,
    /// Fail the call with this errno, without running it.
    Fail(i32),
}

/// Installs `program` on the calling thread like
/// [`super::install_seccomp_filter_on_current_thread`], and returns the
/// listener its `SECCOMP_RET_USER_NOTIF` actions report to (close-on-exec).
pub(crate) fn install_seccomp_filter_with_listener(program: &[SockFilter]) -> io::Result<OwnedFd> {
    let ret = set_mode_filter(
        program,
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as libc::c_uint,
    )?;
    let fd =
        i32::try_from(ret).map_err(|_| io::Error::other("seccomp: descriptor out of range"))?;
    // SAFETY: with NEW_LISTENER the kernel returned a fresh descriptor that
    // nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Asks for synchronous wake-ups on `listener` (Linux 6.6); `false` when
/// the kernel does not offer them (answers still work, only slower).
pub(crate) fn prefer_sync_wake_up(listener: BorrowedFd<'_>) -> bool {
    // SAFETY: SET_FLAGS reads its flags from the third argument by value;
    // no memory is passed.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS as _,
            SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
        )
    };
    ret == 0
}

/// Waits for the next notification on `listener` (blocking). `ENOENT` means
/// the notifying task died before it could be received; the caller tries
/// again.
pub(crate) fn receive_notification(listener: BorrowedFd<'_>) -> io::Result<Notification> {
    // SAFETY: an all-zero `seccomp_notif` is a valid value (plain integers),
    // and the kernel requires the buffer zeroed.
    let mut raw: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: RECV writes one `struct seccomp_notif` into `raw`, which is
    // exactly that struct, writable and alive for the call.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV as _,
            &mut raw as *mut libc::seccomp_notif,
        )
    };
    if ret < 0 {
        return Err(last_error("ioctl(SECCOMP_IOCTL_NOTIF_RECV)"));
    }
    Ok(Notification {
        id: raw.id,
        pid: raw.pid,
        nr: raw.data.nr,
        arch: raw.data.arch,
        args: raw.data.args,
    })
}

/// Whether the notification `id` is still pending: after reading the
/// caller's memory, this says the thread read is still the one that made
/// the call (its pid was not reused meanwhile).
pub(crate) fn notification_pending(listener: BorrowedFd<'_>, id: u64) -> bool {
    // SAFETY: ID_VALID reads one u64 through the pointer, which points at
    // `id`, alive for the call.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _,
            &id as *const u64,
        )
    };
    ret == 0
}

/// Answers the notification `id`. `ENOENT` means its task is gone (killed,
/// or its call interrupted): nothing is left to answer.
pub(crate) fn answer_notification(
    listener: BorrowedFd<'_>,
    id: u64,
    answer: Answer,
) -> io::Result<()> {
    let (error, flags) = match answer {
        Answer::Continue => (0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
        Answer::Fail(errno) => (-errno.abs(), 0),
    };
    let mut resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error,
        flags,
    };
    // SAFETY: SEND reads one `struct seccomp_notif_resp` from `resp`, which
    // is exactly that struct, alive for the call.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND as _,
            &mut resp as *mut libc::seccomp_notif_resp,
        )
    };
    if ret < 0 {
        return Err(last_error("ioctl(SECCOMP_IOCTL_NOTIF_SEND)"));
    }
    Ok(())
}
