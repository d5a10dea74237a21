//! What the daemon and its spawner say to each other, in frames of
//! [`crate::ipc`]: requests (launch, release, kill…) and replies (launched,
//! exited…).

use serde::{Deserialize, Serialize};

use crate::sandbox::launch::LaunchOrder;
use crate::supervise::InitExit;

/// Where the child's stdin comes from (the descriptor, if any, travels with the frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StdinKind {
    /// `/dev/null`.
    Null,
    /// A pipe the spawner makes; its write end comes back with `Launched`.
    Pipe,
}

/// Daemon → spawner.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// Create a sandbox (descriptor: the hashed program).
    /// Its init builds the root and waits for its go-ahead byte, which the
    /// daemon writes itself (see `Launched`).
    Launch {
        /// The daemon's number for this sandbox.
        id: u64,
        /// What to build and run.
        order: Box<LaunchOrder>,
        /// Where stdin comes from.
        stdin: StdinKind,
    },
    /// The daemon has released the program (written the go-ahead byte):
    /// from now on its init is reaped here. No reply, unless it names no
    /// sandbox waiting for its release (then `Failed`).
    Started {
        /// Which sandbox.
        id: u64,
    },
    /// Kill a launched sandbox whose program never started.
    Abort {
        /// Which sandbox.
        id: u64,
    },
}

/// Spawner → daemon.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The sandbox exists (descriptors: stdout, stderr and status read ends,
    /// a pidfd for init, the write end of init's go-ahead pipe, the memory
    /// cgroup's directory when `cgroup`, the listeners when `listener_ports`
    /// (DNS UDP, DNS TCP, then one per port), then the stdin pipe's write
    /// end for `StdinKind::Pipe`). The daemon releases the program by writing one
    /// byte to the go-ahead pipe itself, once its audit record is durable —
    /// a trip through the spawner less — and then tells it `Started`.
    Launched {
        /// Which sandbox.
        id: u64,
        /// Init's pid, as the daemon sees it.
        init_pid: i32,
        /// Whether the sandbox has cgroups: then the memory cgroup's
        /// directory follows the pidfd, for readings before init is reaped.
        #[serde(default)]
        cgroup: bool,
        /// With network grants: the granted ports, in the order of their
        /// listeners' descriptors ([`crate::sandbox::network::Listeners`]).
        #[serde(default)]
        listener_ports: Option<Vec<u16>>,
    },
    /// A step failed; nothing of the program ran.
    Failed {
        /// Which sandbox.
        id: u64,
        /// What failed, as the sandbox or the spawner reported it.
        error: String,
    },
    /// Init was reaped.
    Exited {
        /// Which sandbox.
        id: u64,
        /// The usage and limits readings at the end.
        exit: InitExit,
    },
}

impl Reply {
    /// The sandbox a reply is about.
    pub fn id(&self) -> u64 {
        match self {
            Reply::Launched { id, .. } | Reply::Failed { id, .. } | Reply::Exited { id, .. } => *id,
        }
    }
}

#[cfg(test)]
mod tests;
