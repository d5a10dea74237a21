//! Where forking happens in the daemon. A child cloned from a multi-threaded
//! process may deadlock on a lock another thread held (the allocator, stdio),
//! and `unshare(CLONE_NEWUSER)` fails there with EINVAL. So `spawnd serve`
//! forks a **spawner** first, before its runtime starts any thread: a
//! single-threaded copy of itself that creates every sandbox (`launch`)
//! and reaps each init; the daemon starts each program itself, through a
//! copy of init's go-ahead pipe the spawner hands it with the sandbox. The
//! daemon talks to it over a private socketpair ([`wire`]): the launch order
//! — argv, the exact env with credential values, the sandbox spec, the
//! seccomp filter — goes in the frame body, never through argv or an
//! environment; descriptors (the hashed program, the launch's socket for
//! its replies; back: the output pipes, a pidfd for init, the go-ahead
//! pipe, the stdin pipe) go with `SCM_RIGHTS`.
//!
//! The alternative — re-executing spawnd as a helper for each spawn — pays a
//! whole exec of spawnd's binary per spawn (about 2 ms here: `perf stat -r 300
//! spawnd --version`); a request to the forked spawner is one round trip on a
//! socket. Each sandbox is driven in two steps, like `spawnd run`: `launch`
//! returns while init builds its root, and the program starts only on
//! [`RemoteLaunched::start_program`], once the caller's audit record is
//! durable; dropping a `RemoteLaunched` kills the sandbox.
//!
//! One consequence of the daemon holding a copy of the go-ahead pipe: init's
//! check that its parent is still there (a hang-up on that pipe) no longer
//! sees a spawner that died while the daemon lives. Init's parent-death
//! signal covers nearly all of that; a spawner dying in one of two short
//! windows goes unnoticed — after `Launched` but before init first sets the
//! signal, or between init's change of uid and setting it again. The daemon
//! starts no program whose spawner it knows to be gone (its socket
//! closed); one that dies in the instant between that check and the go-ahead
//! leaves a program that still runs fully confined, under the daemon's
//! pidfd and wall time, but whose init is reaped by whoever adopts it, and
//! the daemon reports the sandbox lost. (A go-ahead pipe of the daemon's own, apart
//! from the spawner's, would close these windows.)
//!
//! The client is thread-safe. Requests share the one socket; each launch
//! brings a socket of its own for its replies (`Launched` or `Failed`, then
//! `Exited`), so the thread waiting for a sandbox reads them itself, with
//! no thread between it and the spawner. The spawner writes nothing on the
//! shared socket: it hangs up only when the spawner is gone, which a launch
//! checks before it is sent and before its program starts.

mod remote;
mod server;
mod spares;
pub(crate) mod wire;

pub(crate) use remote::{RemoteLaunched, RemoteSandbox};

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::sandbox::launch::{LaunchOrder, StdinSource};
use crate::sandbox::network::Listeners;
use crate::sandbox::SetupError;
use crate::sys::{exit_immediately, fork_process};
use wire::{LaunchedFds, Reply, Request};

/// Why the spawner could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SpawnerError {
    /// The spawner (or the socket to it) failed.
    #[error("spawner unavailable: {0}")]
    Unavailable(String),
    /// The sandbox could not be set up; nothing of the program ran.
    #[error("{0}")]
    Setup(SetupError),
}

/// The daemon's side of its spawner.
pub struct Spawner {
    sock: Mutex<UnixStream>,
    /// The shared socket again, polled for the spawner's hang-up.
    hang_up: UnixStream,
    next_id: AtomicU64,
    pid: i32,
    /// Set when the spawner's socket closed: it died, and so did its sandboxes.
    gone: AtomicBool,
}

impl Spawner {
    /// Forks the spawner. Call it while the process is still single-threaded
    /// (before an async runtime starts); it refuses otherwise.
    pub fn start() -> std::io::Result<Spawner> {
        let threads = crate::sandbox::threads::thread_count()?;
        if threads != 1 {
            return Err(std::io::Error::other(format!(
                "the spawner must be forked before any thread starts (this process has {threads})"
            )));
        }
        let (ours, theirs) = UnixStream::pair()?;
        let parent = std::process::id();
        let pid = fork_process()?;
        if pid == 0 {
            drop(ours);
            // Die with the daemon; and if it died before this line, leave now.
            let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
            if nix::unistd::getppid().as_raw() as u32 != parent {
                exit_immediately(0);
            }
            exit_immediately(server::serve(theirs));
        }
        drop(theirs);
        Spawner::connected(ours, pid)
    }

    /// Starts a spawner by executing `exe` (spawnd itself, `__spawner`) with
    /// its socket as descriptor 3. Safe from a multi-threaded process: the
    /// child only places the descriptor and executes. The daemon uses it
    /// when its first spawner died.
    pub fn start_exec(exe: &std::path::Path) -> std::io::Result<Spawner> {
        let (ours, theirs) = UnixStream::pair()?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("__spawner")
            .arg("--parent")
            .arg(std::process::id().to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        crate::sys::pass_fd_as_3(&mut cmd, std::os::fd::AsRawFd::as_raw_fd(&theirs));
        let child = cmd.spawn()?;
        drop(theirs);
        let pid = i32::try_from(child.id()).map_err(std::io::Error::other)?;
        Spawner::connected(ours, pid)
    }

    fn connected(ours: UnixStream, pid: i32) -> std::io::Result<Spawner> {
        Ok(Spawner {
            hang_up: ours.try_clone()?,
            sock: Mutex::new(ours),
            next_id: AtomicU64::new(1),
            pid,
            gone: AtomicBool::new(false),
        })
    }

    /// Whether the spawner is still there (its socket open).
    pub fn is_alive(&self) -> bool {
        if self.gone.load(Ordering::Acquire) {
            return false;
        }
        if self.hung_up(nix::poll::PollTimeout::ZERO) {
            self.gone.store(true, Ordering::Release);
            return false;
        }
        true
    }

    /// Whether the spawner's end of the shared socket closed, waiting up to
    /// `timeout` for it (it writes nothing there: a readable socket has
    /// hung up, or the spawner broke the protocol, which is no better).
    fn hung_up(&self, timeout: nix::poll::PollTimeout) -> bool {
        use nix::poll::{poll, PollFd, PollFlags};
        let mut fds = [PollFd::new(self.hang_up.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, timeout).is_ok_and(|n| n > 0)
    }

    /// The spawner's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    fn send(&self, request: &Request, fds: &[BorrowedFd<'_>]) -> Result<(), SpawnerError> {
        let sock = self
            .sock
            .lock()
            .map_err(|_| SpawnerError::Unavailable("socket lock poisoned".into()))?;
        crate::ipc::send(&sock, request, fds).map_err(|e| SpawnerError::Unavailable(e.to_string()))
    }

    /// Sends the launch and returns without waiting for the spawner, so the
    /// caller can make its audit record durable meanwhile;
    /// [`PendingLaunch::finish`] waits. Dropped unfinished, the sandbox is
    /// aborted.
    pub fn launch_begin(
        &self,
        order: LaunchOrder,
        program: &File,
        stdin: StdinSource,
    ) -> Result<PendingLaunch<'_>, SpawnerError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if !self.is_alive() {
            return Err(SpawnerError::Unavailable("the spawner went away".into()));
        }
        let (replies, theirs) = UnixStream::pair().map_err(|e| {
            SpawnerError::Unavailable(format!("a socket for the launch's replies: {e}"))
        })?;
        let request = Request::Launch {
            id,
            order: Box::new(order),
            stdin,
        };
        let sent = self.send(&request, &[program.as_fd(), theirs.as_fd()]);
        drop(request);
        // Only the spawner holds the other end: when it dies, our reads end.
        drop(theirs);
        sent?;
        Ok(PendingLaunch {
            spawner: self,
            id,
            stdin,
            replies: Some(replies),
        })
    }
}

/// A launch sent to the spawner whose reply has not been read.
pub struct PendingLaunch<'s> {
    spawner: &'s Spawner,
    id: u64,
    /// Where the sandbox's stdin comes from: a pipe's write end comes back.
    stdin: StdinSource,
    /// This launch's replies come on it.
    replies: Option<UnixStream>,
}

impl<'s> PendingLaunch<'s> {
    /// Waits for the spawner: the sandbox building its root, or why not.
    pub fn finish(mut self) -> Result<RemoteLaunched<'s>, SpawnerError> {
        let (spawner, id) = (self.spawner, self.id);
        let Some(replies) = self.replies.take() else {
            return Err(SpawnerError::Unavailable("finished already".into()));
        };
        spawner.launched(id, replies, self.stdin)
    }
}

impl Drop for PendingLaunch<'_> {
    fn drop(&mut self) {
        if self.replies.take().is_some() {
            // Never used: whatever the spawner made is killed, its reply dropped.
            let _ = self.spawner.send(&Request::Abort { id: self.id }, &[]);
        }
    }
}

impl Spawner {
    fn launched(
        &self,
        id: u64,
        replies: UnixStream,
        stdin: StdinSource,
    ) -> Result<RemoteLaunched<'_>, SpawnerError> {
        match self.next_reply(id, &replies)? {
            (
                Reply::Launched {
                    init_pid,
                    cgroup,
                    listener_ports,
                    ..
                },
                fds,
            ) => {
                let listener_count = listener_ports.as_deref().map_or(0, Listeners::count);
                let Some(fds) = LaunchedFds::from_list(fds, cgroup, listener_count, stdin) else {
                    // Whatever the spawner made is killed, not left waiting.
                    let _ = self.send(&Request::Abort { id }, &[]);
                    return Err(SpawnerError::Unavailable(
                        "launched without its descriptors".into(),
                    ));
                };
                let listeners = match &listener_ports {
                    Some(ports) => match Listeners::from_fds(ports, fds.listeners) {
                        Some(l) => Some(l),
                        None => {
                            let _ = self.send(&Request::Abort { id }, &[]);
                            return Err(SpawnerError::Unavailable(
                                "launched without its listeners".into(),
                            ));
                        }
                    },
                    None => None,
                };
                Ok(RemoteLaunched {
                    inner: Some(RemoteSandbox {
                        spawner: self,
                        id,
                        init_pid,
                        stdout: fds.stdout,
                        stderr: fds.stderr,
                        status: fds.status,
                        // Held until the readings are taken (the spawner
                        // gives the cgroup out again only then); without
                        // the lock, the exit report brings them.
                        cgroup_memory: fds
                            .cgroup_memory
                            .and_then(crate::sandbox::cgroup::hold_for_reading),
                        has_cgroup: cgroup,
                        stdin: fds.stdin,
                        listeners,
                        pidfd: fds.pidfd,
                        go_ahead: Some(fds.go_ahead),
                        replies,
                    }),
                })
            }
            (Reply::Failed { error, .. }, _) => Err(SpawnerError::Setup(error)),
            (other, _) => Err(SpawnerError::Unavailable(format!(
                "unexpected reply {other:?}"
            ))),
        }
    }
}

impl Spawner {
    /// The next reply on launch `id`'s own socket. The spawner closes it
    /// only after its last reply (or when told the launch was dropped), so
    /// its end here means the spawner is gone: then it is marked gone
    /// before the caller learns it, and the next launch gets a new one.
    fn next_reply(
        &self,
        id: u64,
        replies: &UnixStream,
    ) -> Result<(Reply, Vec<OwnedFd>), SpawnerError> {
        // A `Launched` reply can carry a sandbox's listeners: up to a frame's limit.
        match crate::ipc::recv_up_to::<Reply>(replies, crate::ipc::MAX_FRAME_FDS) {
            Ok(Some((reply, fds))) if reply.id() == id => Ok((reply, fds)),
            Ok(Some((reply, _))) => Err(SpawnerError::Unavailable(format!(
                "a reply about sandbox {} on sandbox {id}'s socket",
                reply.id()
            ))),
            Ok(None) | Err(_) => {
                self.await_its_end();
                Err(SpawnerError::Unavailable("the spawner went away".into()))
            }
        }
    }

    /// Marks the spawner gone once its shared socket has closed too
    /// (within a second: its exit closes every descriptor it holds).
    fn await_its_end(&self) {
        if self.hung_up(nix::poll::PollTimeout::from(1000u16)) {
            self.gone.store(true, Ordering::Release);
        }
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        // Closing both our ends ends the spawner's loop; its sandboxes follow.
        let _ = self.hang_up.shutdown(std::net::Shutdown::Both);
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(self.pid), None);
    }
}

/// `spawnd __spawner --parent PID`: serves as a spawner on descriptor 3,
/// dying with the daemon. Returns the exit code.
pub(crate) fn serve_on_fd3(parent: u32) -> i32 {
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    if nix::unistd::getppid().as_raw() as u32 != parent {
        return 0;
    }
    match crate::sys::adopt_inherited_fd3() {
        Ok(fd) => server::serve(UnixStream::from(fd)),
        Err(e) => {
            tracing::error!("__spawner: {e}");
            70
        }
    }
}
