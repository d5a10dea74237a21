//! Who is on the other end of a connection: the uid, gid and pid from
//! `SO_PEERCRED`, and whether the peer runs in another user namespace than
//! the daemon's — a container, or a program inside a spawnd sandbox that
//! can reach the socket through one of its scopes. SPEC §4: such a peer is
//! refused unless an `[[access]]` rule says `other_user_namespaces = true`;
//! otherwise a sandboxed program could ask the daemon, as its own caller,
//! for a spawn of another connector and its credential.
//!
//! The namespace is read race-free: through a pidfd for the very process
//! that connected (`SO_PEERPIDFD`, Linux 6.5), whose user namespace the
//! kernel hands over (`PIDFD_GET_USER_NAMESPACE`, Linux 6.11). Anything
//! else counts as another namespace — fail closed: a kernel without either
//! call (a pidfd taken by pid could name a process that reused the pid),
//! and an unprivileged daemon that may not look at another user's process
//! (such a peer needs a rule with `other_user_namespaces`).

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;

use tokio::net::UnixStream;

use crate::sandbox::sys::{peer_pidfd, pidfd_user_namespace};

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
        other_user_namespace: !in_own_user_namespace(stream.as_fd()),
    })
}

/// Whether the process that connected `socket` shares the daemon's user
/// namespace (see the module doc for how it is read).
fn in_own_user_namespace(socket: BorrowedFd<'_>) -> bool {
    let Ok(own) = std::fs::metadata("/proc/self/ns/user") else {
        return false;
    };
    let Ok(pidfd) = peer_pidfd(socket) else {
        return false;
    };
    let Ok(ns) = pidfd_user_namespace(pidfd.as_fd()) else {
        return false;
    };
    nix::sys::stat::fstat(&ns).is_ok_and(|st| (st.st_dev, st.st_ino) == (own.dev(), own.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
