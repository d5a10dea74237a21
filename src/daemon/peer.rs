//! Who is on the other end of a connection: the uid, gid and pid from
//! `SO_PEERCRED`, and whether the peer runs in another user namespace than
//! the daemon's — a container, or a program inside a spawnd sandbox that
//! can reach the socket through one of its scopes. SPEC §4: such a peer is
//! refused unless an `[[access]]` rule says `other_user_namespaces = true`;
//! otherwise a sandboxed program could ask the daemon, as its own caller,
//! for a spawn of another connector and its credential.
//!
//! The namespace is read race-free: through a pidfd for the very process
//! that connected (`SO_PEERPIDFD`), whose user namespace the kernel hands
//! over (`PIDFD_GET_USER_NAMESPACE`). When that is refused — an
//! unprivileged daemon may not look at another user's process, and kernels
//! before 6.11 lack the call — the peer's `/proc/PID/status` (readable by
//! everyone) must show it in the daemon's own pid namespace, which no spawnd
//! sandbox is, and the pidfd must still name a live process once that was
//! read, so a reused pid cannot answer for it. Anything that cannot be read
//! counts as another namespace: fail closed.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;

use tokio::net::UnixStream;

use crate::sandbox::sys::{peer_pidfd, pidfd_open, pidfd_user_namespace};

/// The peer of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
    /// Its pid (as the daemon sees it), when the kernel told.
    pub pid: Option<i32>,
    /// It runs in another user namespace than the daemon (or that could not
    /// be ruled out).
    pub other_user_namespace: bool,
}

/// The peer of `stream`, or `None` when the kernel gives no credentials.
pub fn peer_of(stream: &UnixStream) -> Option<Peer> {
    let cred = stream.peer_cred().ok()?;
    Some(Peer {
        uid: cred.uid(),
        gid: cred.gid(),
        pid: cred.pid(),
        other_user_namespace: !in_own_user_namespace(stream.as_fd(), cred.pid()),
    })
}

/// Whether the process that connected `socket` shares the daemon's user
/// namespace (see the module doc for how it is read).
fn in_own_user_namespace(socket: BorrowedFd<'_>, pid: Option<i32>) -> bool {
    let Ok(own) = std::fs::metadata("/proc/self/ns/user") else {
        return false;
    };
    // Kernels before 6.5 have no SO_PEERPIDFD: a pidfd by pid, taken now.
    let pidfd = match (peer_pidfd(socket), pid) {
        (Ok(fd), _) => fd,
        (Err(_), Some(pid)) => match pidfd_open(pid) {
            Ok(fd) => fd,
            Err(_) => return false,
        },
        (Err(_), None) => return false,
    };
    if let Ok(ns) = pidfd_user_namespace(pidfd.as_fd()) {
        return nix::sys::stat::fstat(&ns)
            .is_ok_and(|st| (st.st_dev, st.st_ino) == (own.dev(), own.ino()));
    }
    let Some(pid) = pid else { return false };
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    single_pid_namespace_level(&status) && still_running(pidfd.as_fd())
}

/// The `NSpid:` line lists the pid in every pid namespace from the reader's
/// down to the process's own: one entry means the daemon's own namespace.
fn single_pid_namespace_level(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .is_some_and(|ids| ids.split_whitespace().count() == 1)
}

/// A pidfd polls readable once its process has exited.
fn still_running(pidfd: BorrowedFd<'_>) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(pidfd, PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_nspid_entry_is_the_daemons_own_pid_namespace() {
        assert!(single_pid_namespace_level("Name:\tx\nNSpid:\t4242\n"));
        assert!(!single_pid_namespace_level("Name:\tx\nNSpid:\t4242\t1\n"));
        assert!(!single_pid_namespace_level("Name:\tx\n"));
    }

    #[test]
    fn a_peer_in_the_daemons_namespace_is_recognised_as_such() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (a, _b) = UnixStream::pair().unwrap();
            let peer = peer_of(&a).unwrap();
            assert!(!peer.other_user_namespace, "{peer:?}");
        });
    }
}
