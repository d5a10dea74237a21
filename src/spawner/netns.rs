//! Network namespaces made ahead of requests. Creating one is about a third
//! of a sandbox's kernel work (0.5–0.6 ms here); the spawner makes a few
//! while it is idle, so a request usually clones straight into a fresh one.
//! Each is used by exactly one sandbox and closed at its `clone`: two
//! sandboxes never share a network namespace. Its loopback is brought up
//! here, and it belongs to the spawner's user namespace, so nothing inside a
//! sandbox (which has its own user namespace) has any capability over it.
//!
//! Only a root spawner can `setns` into one; otherwise every sandbox gets its
//! network namespace at `clone`, as `spawnd run` does.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::fcntl::{open, OFlag};
use nix::sched::CloneFlags;
use nix::sys::stat::Mode;

use crate::sandbox::launch::PremadeNetns;
use crate::sandbox::sys::set_loopback_up;

/// How many are kept ready.
pub const POOL_SIZE: usize = 8;

/// The ready namespaces and the way home.
pub struct NetnsPool {
    home: OwnedFd,
    ready: Vec<OwnedFd>,
}

fn own_netns() -> nix::Result<OwnedFd> {
    open(
        "/proc/thread-self/ns/net",
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

impl NetnsPool {
    /// A pool, when this process may make and join namespaces (root).
    pub fn new() -> Option<NetnsPool> {
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        let home = own_netns().ok()?;
        Some(NetnsPool {
            home,
            ready: Vec::with_capacity(POOL_SIZE),
        })
    }

    /// Whether another one should be made now.
    pub fn wants_more(&self) -> bool {
        self.ready.len() < POOL_SIZE
    }

    /// Makes one namespace: enter a new one, bring lo up, keep a descriptor,
    /// return home. Not being able to return home ends the process: every
    /// later sandbox would otherwise be cloned into this one.
    pub fn make_one(&mut self) -> Result<(), String> {
        nix::sched::unshare(CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("unshare(CLONE_NEWNET): {e}"))?;
        let made = set_loopback_up()
            .map_err(|e| format!("bring lo up: {e}"))
            .and_then(|()| own_netns().map_err(|e| format!("open the new namespace: {e}")));
        if let Err(e) = nix::sched::setns(&self.home, CloneFlags::CLONE_NEWNET) {
            eprintln!("spawnd: spawner: cannot return to its own network namespace ({e}); exiting");
            std::process::exit(70);
        }
        self.ready.push(made?);
        Ok(())
    }

    /// One ready namespace for the next sandbox, if any.
    pub fn take(&mut self) -> Option<PremadeNetns<'_>> {
        let ns = self.ready.pop()?;
        Some(PremadeNetns {
            ns,
            home: self.home(),
        })
    }

    fn home(&self) -> BorrowedFd<'_> {
        self.home.as_fd()
    }
}
