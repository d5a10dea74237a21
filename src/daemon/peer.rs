//! Who is on the other end of a connection: the uid, gid and pid from
//! `SO_PEERCRED`, and whether the peer runs in another user namespace than
//! the daemon's — a container, or a program inside a spawnd sandbox that
//! can reach the socket through one of its scopes. docs/sandbox.md: such a peer is
//! refused unless an `[[access]]` rule says `other_user_namespaces = true`;
//! otherwise a sandboxed program could ask the daemon, as its own caller,
//! for a spawn of another connector and its credential.
//!
//! The namespace is read race-free, through a pidfd for the very process
//! that connected (`SO_PEERPIDFD`, Linux 6.5; without it, fail closed: a
//! pidfd taken by pid could name a process that reused the pid):
//! - the kernel hands over its user namespace (`PIDFD_GET_USER_NAMESPACE`,
//!   Linux 6.11), compared with the daemon's;
//! - where that is refused (it needs ptrace access to the peer: the shipped
//!   unit has no `CAP_SYS_PTRACE`, and an unprivileged daemon may not look
//!   at another user's process), its `/proc/PID/uid_map` and `gid_map`,
//!   readable by everyone and shown relative to the reader's namespace,
//!   must read exactly as the daemon's own — which a namespace below it
//!   cannot (only root could map every id) — and the pidfd must still name
//!   a live process once they were read, so the pid was not reused.
//!
//! Anything that cannot be read counts as another namespace: fail closed.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;

use tokio::net::UnixStream;

use crate::sys::{peer_pidfd, pidfd_user_namespace};

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
    let Some(own) = own_user_namespace() else {
        return false;
    };
    let Ok(pidfd) = peer_pidfd(socket) else {
        return false;
    };
    if let Ok(ns) = pidfd_user_namespace(pidfd.as_fd()) {
        return nix::sys::stat::fstat(&ns).is_ok_and(|st| (st.st_dev, st.st_ino) == own.id);
    }
    let Some(pid) = pid else { return false };
    let maps_match = ["uid_map", "gid_map"]
        .iter()
        .zip([&own.uid_map, &own.gid_map])
        .all(|(map, ours)| std::fs::read(format!("/proc/{pid}/{map}")).is_ok_and(|t| &t == ours));
    maps_match && still_running(pidfd.as_fd())
}

/// The daemon's own user namespace, read once: its identity and id maps.
struct OwnNamespace {
    id: (u64, u64),
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

fn own_user_namespace() -> Option<&'static OwnNamespace> {
    static OWN: std::sync::OnceLock<Option<OwnNamespace>> = std::sync::OnceLock::new();
    OWN.get_or_init(|| {
        let ns = std::fs::metadata("/proc/self/ns/user").ok()?;
        Some(OwnNamespace {
            id: (ns.dev(), ns.ino()),
            uid_map: std::fs::read("/proc/self/uid_map").ok()?,
            gid_map: std::fs::read("/proc/self/gid_map").ok()?,
        })
    })
    .as_ref()
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
