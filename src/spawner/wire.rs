//! What the daemon and its spawner say to each other, in frames of
//! [`crate::ipc`]: requests (launch, started, abort) and replies (launched,
//! exited…).

use serde::{Deserialize, Serialize};

use crate::sandbox::launch::{LaunchOrder, StdinSource};
use crate::sandbox::SetupError;
use crate::supervise::InitExit;

/// Daemon → spawner.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Request {
    /// Create a sandbox (descriptors: the hashed program, then the socket
    /// this launch's replies go on).
    /// Its init builds the root and waits for its go-ahead byte, which the
    /// daemon writes itself (see `Launched`).
    Launch {
        /// The daemon's number for this sandbox.
        id: u64,
        /// What to build and run.
        order: Box<LaunchOrder>,
        /// Where stdin comes from: a pipe's write end comes back with
        /// `Launched`.
        stdin: StdinSource,
    },
    /// The daemon has started the program (written the go-ahead byte):
    /// from now on its init is reaped here. No reply, unless the sandbox's
    /// program was started already (then `Failed`).
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

/// Spawner → daemon, each on its launch's own socket.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reply {
    /// The sandbox exists (descriptors: a [`LaunchedFds`]). The daemon
    /// starts the program by writing the go-ahead byte itself, once its
    /// audit record is durable — a trip through the spawner less — and
    /// then tells it `Started`.
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
        error: SetupError,
    },
    /// Init was reaped.
    Exited {
        /// Which sandbox.
        id: u64,
        /// The usage and limits readings at the end.
        exit: InitExit,
    },
}

/// The descriptors a `Launched` reply carries, by name. They travel in
/// the order [`LaunchedFds::into_list`] gives, and come back only in
/// exactly the number the reply and the launch announced
/// ([`LaunchedFds::from_list`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct LaunchedFds<Fd> {
    /// Read end of the program's stdout.
    pub stdout: Fd,
    /// Read end of its stderr.
    pub stderr: Fd,
    /// Read end of the status pipe.
    pub status: Fd,
    /// A pidfd for init.
    pub pidfd: Fd,
    /// The write end of init's go-ahead pipe.
    pub go_ahead: Fd,
    /// The memory cgroup's directory, when the sandbox has cgroups.
    pub cgroup_memory: Option<Fd>,
    /// With network grants: the listeners' descriptors, as
    /// [`crate::sandbox::network::Listeners::fds`] orders them.
    pub listeners: Vec<Fd>,
    /// The stdin pipe's write end, for [`StdinSource::Pipe`].
    pub stdin: Option<Fd>,
}

impl<Fd> LaunchedFds<Fd> {
    /// Every descriptor, in the frame's order.
    pub(crate) fn into_list(self) -> Vec<Fd> {
        let mut list = vec![
            self.stdout,
            self.stderr,
            self.status,
            self.pidfd,
            self.go_ahead,
        ];
        list.extend(self.cgroup_memory);
        list.extend(self.listeners);
        list.extend(self.stdin);
        list
    }

    /// The descriptors again, from a frame's: `None` unless there are
    /// exactly as many as a reply with `cgroup` and `listeners` listener
    /// descriptors, for a launch whose stdin came from `stdin`, carries.
    pub(crate) fn from_list(
        fds: Vec<Fd>,
        cgroup: bool,
        listeners: usize,
        stdin: StdinSource,
    ) -> Option<LaunchedFds<Fd>> {
        let pipe = stdin == StdinSource::Pipe;
        if fds.len() != 5 + usize::from(cgroup) + listeners + usize::from(pipe) {
            return None;
        }
        let mut fds = fds.into_iter();
        let mut next = || fds.next();
        let (stdout, stderr, status, pidfd, go_ahead) =
            (next()?, next()?, next()?, next()?, next()?);
        let cgroup_memory = match cgroup {
            true => Some(next()?),
            false => None,
        };
        let listeners = (0..listeners)
            .map(|_| next())
            .collect::<Option<Vec<Fd>>>()?;
        let stdin = match pipe {
            true => Some(next()?),
            false => None,
        };
        Some(LaunchedFds {
            stdout,
            stderr,
            status,
            pidfd,
            go_ahead,
            cgroup_memory,
            listeners,
            stdin,
        })
    }
}

impl Reply {
    /// The sandbox a reply is about.
    pub(crate) fn id(&self) -> u64 {
        match self {
            Reply::Launched { id, .. } | Reply::Failed { id, .. } | Reply::Exited { id, .. } => *id,
        }
    }
}

#[cfg(test)]
mod tests;
