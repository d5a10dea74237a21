//! The daemon's handles on a sandbox its spawner made: [`RemoteLaunched`]
//! while init builds the root (the program waits for its go-ahead), then
//! [`RemoteSandbox`], which supervision drives like a local one.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use super::wire::{Reply, Request};
use super::{Spawner, SpawnerError};
use crate::sandbox::launch::{go_ahead, GoAhead};
use crate::sandbox::status_pipe::read_dead_init_report;
use crate::supervise::InitExit;
use crate::sys::pidfd_send_signal;

/// A sandbox the spawner made, in either state.
pub struct RemoteSandbox<'s> {
    pub(super) spawner: &'s Spawner,
    pub(super) id: u64,
    /// Init's pid (as the daemon sees it).
    pub init_pid: i32,
    /// Read end of the program's stdout.
    pub stdout: OwnedFd,
    /// Read end of its stderr.
    pub stderr: OwnedFd,
    /// Read end of the status pipe ([`crate::sandbox::status_pipe`]).
    pub status: OwnedFd,
    /// Write end of the stdin pipe, for [`crate::sandbox::launch::StdinSource::Pipe`].
    pub stdin: Option<OwnedFd>,
    /// With network grants: the listeners in its network namespace.
    pub listeners: Option<crate::sandbox::network::Listeners>,
    /// A pidfd for init: signals reach this sandbox and no later process.
    pub pidfd: OwnedFd,
    /// The write end of init's go-ahead pipe, until the program is started.
    pub(super) go_ahead: Option<OwnedFd>,
    /// The memory cgroup's directory, when it has cgroups.
    pub(super) cgroup_memory: Option<nix::fcntl::Flock<OwnedFd>>,
    /// Whether it has cgroups.
    pub(super) has_cgroup: bool,
    /// This sandbox's own socket for the spawner's replies.
    pub(super) replies: UnixStream,
}

/// The supervisor's handle on a remote sandbox's init.
struct RemoteEnd<'s> {
    /// Shared with the [`crate::supervise::Killer`] it gives out.
    pidfd: std::sync::Arc<OwnedFd>,
    cgroup_memory: Option<nix::fcntl::Flock<OwnedFd>>,
    /// Its peak and OOM files, opened while the program runs.
    readings: Option<crate::sandbox::cgroup::Readings>,
    has_cgroup: bool,
    id: u64,
    replies: UnixStream,
    spawner: &'s Spawner,
}

impl crate::supervise::SandboxEnd for RemoteEnd<'_> {
    fn signal(&self, signal: nix::sys::signal::Signal) {
        let _ = pidfd_send_signal(self.pidfd.as_fd(), signal as i32);
    }

    fn killer(&self) -> Option<crate::supervise::Killer> {
        Some(crate::supervise::killer_through(std::sync::Arc::clone(
            &self.pidfd,
        )))
    }

    /// Read through the directory the spawner sent, so the exit can be
    /// recorded before the spawner has reaped init; if the spawner removed
    /// the cgroup first, its exit report carries the readings.
    fn readings_before_reap(&self) -> Option<(Option<u64>, bool)> {
        match (&self.cgroup_memory, self.has_cgroup) {
            (Some(dir), _) => match &self.readings {
                Some(opened) => opened.read(),
                None => crate::sandbox::cgroup::readings_at(dir.as_fd()),
            },
            (None, false) => Some((None, false)),
            (None, true) => None,
        }
    }

    fn reap(self: Box<Self>) -> std::io::Result<InitExit> {
        loop {
            match self.spawner.next_reply(self.id, &self.replies) {
                Ok((Reply::Exited { exit, .. }, _)) => return Ok(exit),
                Ok(_) => continue,
                Err(_) => {
                    return Err(std::io::Error::other(
                        "the spawner went away before init was reaped",
                    ))
                }
            }
        }
    }
}

impl<'s> RemoteSandbox<'s> {
    /// Hands the sandbox to the supervisor; `launched_at`, `replied_at` and
    /// `started_at` stand for the clone, id-mapping and start instants
    /// the spawner does not report.
    pub fn into_watched(
        self,
        launched_at: std::time::Instant,
        replied_at: std::time::Instant,
        started_at: std::time::Instant,
    ) -> crate::supervise::Watched<'s> {
        crate::supervise::Watched {
            stdout: self.stdout,
            stderr: self.stderr,
            status: self.status,
            stdin: self.stdin,
            cloned_at: launched_at,
            mapped_at: replied_at,
            started_at,
            init_pid: self.init_pid,
            end: Box::new(RemoteEnd {
                pidfd: std::sync::Arc::new(self.pidfd),
                // Opened now, while the program runs (best effort: without
                // them, the readings open the files themselves).
                readings: self
                    .cgroup_memory
                    .as_ref()
                    .and_then(|dir| crate::sandbox::cgroup::Readings::open_at(dir.as_fd())),
                cgroup_memory: self.cgroup_memory,
                has_cgroup: self.has_cgroup,
                id: self.id,
                replies: self.replies,
                spawner: self.spawner,
            }),
        }
    }
}

impl RemoteSandbox<'_> {
    /// Sends `signal` to init (SIGKILL ends the whole sandbox: init is pid 1).
    pub fn signal(&self, signal: nix::sys::signal::Signal) -> std::io::Result<()> {
        pidfd_send_signal(self.pidfd.as_fd(), signal as i32)
    }
}

/// A sandbox building its root; its program waits for [`RemoteLaunched::start_program`].
pub struct RemoteLaunched<'s> {
    pub(super) inner: Option<RemoteSandbox<'s>>,
}

impl<'s> RemoteLaunched<'s> {
    /// The sandbox (its pipes can be read already: a setup failure arrives on `status`).
    pub fn sandbox(&self) -> Option<&RemoteSandbox<'s>> {
        self.inner.as_ref()
    }

    /// Takes the listeners of a sandbox with network grants.
    pub fn take_listeners(&mut self) -> Option<crate::sandbox::network::Listeners> {
        self.inner.as_mut().and_then(|s| s.listeners.take())
    }

    /// Takes the stdin pipe's write end.
    pub fn take_stdin(&mut self) -> Option<OwnedFd> {
        self.inner.as_mut().and_then(|s| s.stdin.take())
    }

    /// Releases the program (call once its audit record is durable): one
    /// byte down init's go-ahead pipe, straight from here, and then the
    /// spawner is told, so it reaps init from now on.
    pub fn start_program(mut self) -> Result<RemoteSandbox<'s>, SpawnerError> {
        let Some(mut sandbox) = self.inner.take() else {
            return Err(SpawnerError::Unavailable("already started".into()));
        };
        let Some(go_ahead_pipe) = sandbox.go_ahead.take() else {
            return Err(SpawnerError::Unavailable("already started".into()));
        };
        // A spawner known to be gone would never reap this init, and init
        // may have missed its death (see the module `crate::spawner`):
        // nothing is started, and the sandbox is killed.
        if !sandbox.spawner.is_alive() {
            let _ = sandbox.signal(nix::sys::signal::Signal::SIGKILL);
            return Err(SpawnerError::Unavailable(
                "the spawner went away before the program was released".into(),
            ));
        }
        // Written before the spawner knows: if this fails (init died), the
        // sandbox is aborted as if never started, with init's own reason
        // when it reported one (a setup step that failed).
        if let Err(e) = go_ahead(&go_ahead_pipe, GoAhead::StartProgram) {
            let reported = match e.source.raw_os_error() {
                Some(libc::EPIPE) => read_dead_init_report(sandbox.status.as_fd()),
                _ => None,
            };
            let reason = reported.unwrap_or(e);
            let _ = sandbox
                .spawner
                .send(&Request::Abort { id: sandbox.id }, &[]);
            return Err(SpawnerError::Setup(reason));
        }
        drop(go_ahead_pipe);
        // The program runs now. A spawner gone by this point took the
        // sandbox with it, which supervision reports as a sandbox lost.
        if let Err(e) = sandbox
            .spawner
            .send(&Request::Started { id: sandbox.id }, &[])
        {
            // The spawner would never reap this init: end the sandbox now
            // (supervision then reports it killed).
            tracing::error!("telling the spawner a program started: {e}; killing the sandbox");
            let _ = sandbox.signal(nix::sys::signal::Signal::SIGKILL);
        }
        Ok(sandbox)
    }
}

impl Drop for RemoteLaunched<'_> {
    fn drop(&mut self) {
        if let Some(sandbox) = self.inner.take() {
            let _ = sandbox
                .spawner
                .send(&Request::Abort { id: sandbox.id }, &[]);
        }
    }
}
