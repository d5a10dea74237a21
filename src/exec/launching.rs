//! Where a spawn's sandbox is launched (in this process, or by the
//! daemon's spawner) and as whom: [`Launching`], the sandbox building its root while
//! the decision record goes to disk, and [`Identity`], the child's ids and
//! how its memory and processes are limited (docs/sandbox.md).

use std::os::fd::OwnedFd;

use super::prepared::Prepared;
use crate::sandbox::launch::{launch, LaunchRequest, Launched, LimitsVia, StdinSource};
use crate::sandbox::network::Listeners;
use crate::sandbox::seccomp::Policy;
use crate::sandbox::spec::{account_name, RuntimeIdentity};
use crate::sandbox::trace::Tracer;
use crate::spawner::{PendingLaunch, RemoteStdin, Spawner, SpawnerError};
use crate::supervise::Watched;

/// A sandbox building its root — launched here, or by a spawner — whose
/// program waits for the decision record to be durable. Dropped, it is killed.
pub(super) enum Launching<'s> {
    Local(Result<Launched, crate::sandbox::StepError>),
    Remote {
        pending: Result<PendingLaunch<'s>, SpawnerError>,
        begun: std::time::Instant,
    },
}

impl<'s> Launching<'s> {
    pub(super) fn begin(request: LaunchRequest<'_>, spawner: Option<&'s Spawner>) -> Launching<'s> {
        let Some(spawner) = spawner else {
            return Launching::Local(launch(request));
        };
        let begun = std::time::Instant::now();
        // Sent, not waited for: the spawner launches while the caller
        // writes and flushes the decision record.
        let pending = match request.order() {
            Ok(order) => {
                let stdin = match &request.stdin {
                    StdinSource::Null => RemoteStdin::Null,
                    StdinSource::Pipe => RemoteStdin::Pipe,
                };
                spawner.launch_begin(order, &request.program, stdin)
            }
            Err(e) => Err(SpawnerError::Setup(e.to_string())),
        };
        Launching::Remote { pending, begun }
    }

    /// Opens the memory cgroup's reading files now, while the caller waits
    /// for the disk, rather than after the program's end (a local launch;
    /// a spawner's sandbox has its files opened by the daemon's side).
    pub(super) fn open_cgroup_readings(&mut self) {
        if let Launching::Local(Ok(launched)) = self {
            launched.open_cgroup_readings();
        }
    }

    /// Releases the program; for a remote sandbox, also a pidfd for its init.
    /// The listeners of a sandbox with network grants go to `serve` first:
    /// if it cannot serve them, the sandbox is killed unreleased.
    /// A traced sandbox's tracer starts before the release, answering
    /// by `answers`.
    pub(super) fn start_program<T>(
        self,
        serve: impl FnOnce(Option<Listeners>) -> Result<T, String>,
        answers: Option<Policy>,
    ) -> Result<(Released<'s>, T), String> {
        match self {
            Launching::Local(launched) => {
                let mut launched = launched.map_err(|e| e.to_string())?;
                let served = serve(launched.take_listeners())?;
                let tracer = match (launched.take_tracer_channel(), answers) {
                    (Some(channel), Some(policy)) => Some(
                        Tracer::start(channel, policy)
                            .map_err(|e| format!("start the tracer: {e}"))?,
                    ),
                    (None, None) => None,
                    _ => return Err("a traced sandbox without its tracer's channel".into()),
                };
                let running = launched.start_program().map_err(|e| e.to_string())?;
                let released = Released {
                    running: Watched::from(running),
                    pidfd: None,
                    tracer,
                };
                Ok((released, served))
            }
            Launching::Remote { .. } if answers.is_some() => {
                Err("tracing runs in spawnd's own process, not through a spawner".into())
            }
            Launching::Remote { pending, begun } => {
                let mut launched = pending
                    .and_then(PendingLaunch::finish)
                    .map_err(|e| e.to_string())?;
                let built = std::time::Instant::now();
                let served = serve(launched.take_listeners())?;
                let s = launched.start_program().map_err(|e| e.to_string())?;
                let pidfd = s.pidfd.try_clone().ok();
                let released = Released {
                    running: s.into_watched(begun, built, std::time::Instant::now()),
                    pidfd,
                    tracer: None,
                };
                Ok((released, served))
            }
        }
    }
}

/// A released program's sandbox, as [`Launching::start_program`] gives it back.
pub(super) struct Released<'s> {
    /// The sandbox to supervise.
    pub(super) running: Watched<'s>,
    /// A pidfd for its init (a spawner's sandbox).
    pub(super) pidfd: Option<OwnedFd>,
    /// A traced sandbox's tracer, answering already.
    pub(super) tracer: Option<Tracer>,
}

/// The identity a root caller's program runs as when `[sandbox] run_as` is
/// not set: the kernel's overflow ids, `nobody`/`nogroup` on most systems.
pub(super) const NOBODY: (u32, u32) = (65534, 65534);

/// Who the child is and how its memory and processes are limited.
pub(super) struct Identity {
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) privileged: bool,
    pub(super) limits_via: LimitsVia,
}

impl Identity {
    /// The identity as the sandbox's `/etc/passwd` and `/etc/group` name
    /// it: the host's names for its ids when they are plain, else `user`
    /// and `group`.
    /// Root and nobody have fixed lines there: the password database is
    /// read (once per spawn) only for another identity.
    pub(super) fn runtime(&self) -> RuntimeIdentity {
        use nix::unistd::{Gid, Group, Uid, User};
        let named = |id: u32, nobody: u32| id != 0 && id != nobody;
        let user = named(self.uid, NOBODY.0)
            .then(|| User::from_uid(Uid::from_raw(self.uid)).ok().flatten())
            .flatten();
        let group = named(self.gid, NOBODY.1)
            .then(|| Group::from_gid(Gid::from_raw(self.gid)).ok().flatten())
            .flatten();
        RuntimeIdentity {
            uid: self.uid,
            gid: self.gid,
            user: account_name(user.as_ref().map(|u| u.name.as_str()), "user"),
            group: account_name(group.as_ref().map(|g| g.name.as_str()), "group"),
        }
    }

    /// docs/sandbox.md: the caller's uid/gid (spawnd's own when unprivileged). A root
    /// caller's program never runs as host uid 0: it would own every
    /// root-owned file it can see, and chmod, utime and xattrs on them are
    /// outside Landlock's reach; it runs as `run_as`, or [`NOBODY`] when the
    /// operator set none. `run_as_everyone` makes `run_as` every caller's.
    pub(super) fn choose(p: &Prepared) -> Result<Identity, crate::failure::Failure> {
        let euid = nix::unistd::geteuid().as_raw();
        let privileged = crate::kernel_features::privileged();
        // Without root's powers over other users, a program runs as
        // spawnd's own uid: refused when that uid is the parent
        // namespace's root (the host's), whatever it is called here.
        if !privileged && crate::kernel_features::runs_as_parents_root() {
            return Err(crate::failure::Failure::sandbox_unavailable(
                "spawnd runs as its parent namespace's root (the host's, seen from the first namespace) in a user namespace that maps no other user: a program would run as it; run spawnd as another user, or where uid and gid 65534 are mapped and groups may be set; nothing was run",
            ));
        }
        let limits_via = super::limits::for_this_process().under(p.config.sandbox.limits);
        let sandbox = &p.config.sandbox;
        let (uid, gid) = if !privileged {
            (euid, nix::unistd::getegid().as_raw())
        } else if p.caller.uid == 0 {
            sandbox.run_as.unwrap_or(NOBODY)
        } else if let (true, Some(pair)) = (sandbox.run_as_everyone, sandbox.run_as) {
            pair
        } else {
            (p.caller.uid, p.caller.gid)
        };
        Ok(Identity {
            uid,
            gid,
            privileged,
            limits_via,
        })
    }
}
