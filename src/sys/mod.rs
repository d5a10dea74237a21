//! The only module with `unsafe`: thin wrappers over system calls that
//! neither `nix` nor `landlock` expose (or expose only as `unsafe fn`), by
//! concept: `confine.rs` (Landlock's ABI, seccomp, capabilities, loopback),
//! `process.rs` (clone, reaping, pidfds, nice values), `fds.rs`, `peer.rs`
//! (a socket peer's pidfd and user namespace, and the boot-time clock that
//! dates a connection against a process's start), `keyring.rs`, `mount.rs` (the
//! mount calls and the old root's unmount helpers), `notify.rs` (seccomp
//! user notification), `nflog.rs` (reading the log of the egress that
//! `crate::netlink`'s nf_tables rules refuse) and `start.rs` (the start of
//! the sandboxed program); for the static musl build, behind the binary's feature
//! `musl-dlmalloc` (on by default), the allocator (`heap.rs`).
//! Each wrapper returns `io::Result` with an error that names the call, and
//! each `unsafe` block says why it is sound.
#![allow(unsafe_code)]

use std::io;

pub(crate) mod confine;
mod fds;
#[cfg(all(target_env = "musl", feature = "musl-dlmalloc"))]
pub(crate) mod heap;
mod keyring;
mod mount;
pub(crate) mod nflog;
mod notify;
mod peer;
pub(crate) mod process;
mod start;
pub(crate) use mount::{
    clone_detached_tree, detach_mount_in_background, detach_mount_when_told, idmap_detached_tree,
    mount_setattr, mount_setattr_fd, move_detached_tree, WaitingDetach,
};
pub(crate) use nflog::{bind_log_group, read_logged_packets, watched_log, LoggedPacket};
pub(crate) use notify::{
    answer_notification, install_seccomp_filter_with_listener, notification_pending,
    prefer_sync_wake_up, receive_notification, Answer, Notification,
};
pub(crate) use start::{
    restore_every_default_action, start_program, Execute, ProgramStart, StatusPipe,
};

pub use confine::*;
pub(crate) use fds::*;
pub(crate) use keyring::*;
pub(crate) use peer::*;
pub(crate) use process::*;

/// The current errno, unchanged (callers name the step in a `SetupError`, and
/// `raw_os_error` stays available to them). `call` documents the site.
fn last_error(call: &str) -> io::Error {
    let _ = call;
    io::Error::last_os_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_open_for_writing_is_seen_by_the_lease_probe() {
        use std::os::fd::AsFd;
        let f = tempfile::NamedTempFile::new().unwrap();
        let reader = std::fs::File::open(f.path()).unwrap();
        // This process owns the file, so it may take a lease.
        let writer = std::fs::OpenOptions::new()
            .write(true)
            .open(f.path())
            .unwrap();
        assert!(file_open_for_writing(reader.as_fd()).unwrap());
        drop(writer);
        // The temp file's own handle was opened for writing too.
        let (file, path) = f.into_parts();
        drop(file);
        assert!(!file_open_for_writing(reader.as_fd()).unwrap());
        drop(path);
    }

    #[test]
    fn the_landlock_version_query_answers_without_error() {
        let v = landlock_abi_version().expect("landlock_create_ruleset version query");
        assert!(v <= 64, "implausible ABI {v}");
    }
}
