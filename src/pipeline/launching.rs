//! Where a spawn's sandbox is launched (in this process, or by the
//! daemon's spawner) and as whom: [`Launching`], the sandbox building its root while
//! the decision record goes to disk; [`Identity`], the child's ids and
//! how its memory and processes are limited (docs/sandbox.md); and
//! [`NotStarted`], why a sandbox did not start, which becomes the spawn's
//! [`Failure`] in one place.

use std::os::fd::OwnedFd;

use super::prepared::Prepared;
use crate::failure::{Failure, FailureKind};
use crate::plan::{ExecPlan, SpawnPlan};
use crate::sandbox::as_caller::CallerCreds;
use crate::sandbox::launch::{launch, Launched};
use crate::sandbox::network::Listeners;
use crate::sandbox::order::{DesignError, Ordered, RunAs, NOBODY};
use crate::sandbox::trace::Tracer;
use crate::sandbox::SetupError;
use crate::spawner::{PendingLaunch, Spawner, SpawnerError};
use crate::supervise::Watched;

/// A sandbox building its root — launched here, or by a spawner — whose
/// program waits for the decision record to be durable. Dropped, it is killed.
pub(super) enum Launching<'s> {
    Local(Result<Launched, SetupError>),
    Remote {
        pending: Result<PendingLaunch<'s>, SpawnerError>,
        begun: std::time::Instant,
        /// The order asked for a traced sandbox, which a spawner does not make.
        traced: bool,
    },
}

impl<'s> Launching<'s> {
    pub(super) fn begin(ordered: Ordered, spawner: Option<&'s Spawner>) -> Launching<'s> {
        let Some(spawner) = spawner else {
            return Launching::Local(launch(ordered));
        };
        let begun = std::time::Instant::now();
        let traced = ordered.order.trace;
        // Sent, not waited for: the spawner launches while the caller
        // writes and flushes the decision record.
        let pending = spawner.launch_begin(ordered.order, &ordered.program, ordered.stdin);
        Launching::Remote {
            pending,
            begun,
            traced,
        }
    }

    /// Opens the memory cgroup's reading files now, while the caller waits
    /// for the disk, rather than after the program's end (a local launch;
    /// a spawner's sandbox has its files opened by the daemon's side).
    pub(super) fn open_cgroup_readings(&mut self) {
        if let Launching::Local(Ok(launched)) = self {
            launched.open_cgroup_readings();
        }
    }

    /// Starts the program; for a remote sandbox, also a pidfd for its init.
    /// The listeners of a sandbox with network grants go to `serve` first:
    /// if it cannot serve them, the sandbox is killed unstarted.
    /// A traced sandbox's tracer starts before the program.
    pub(super) fn start_program<T>(
        self,
        serve: impl FnOnce(Option<Listeners>) -> Result<T, Failure>,
    ) -> Result<(Started<'s>, T), NotStarted> {
        match self {
            Launching::Local(launched) => {
                let mut launched = launched?;
                let served = serve(launched.take_listeners()).map_err(NotStarted::Relay)?;
                let tracer = launched.start_tracer()?;
                let running = launched.start_program()?;
                let started = Started {
                    running: Watched::from(running),
                    pidfd: None,
                    tracer,
                };
                Ok((started, served))
            }
            Launching::Remote { traced: true, .. } => Err(NotStarted::Mismatch(
                "tracing runs in spawnd's own process, not through a spawner",
            )),
            Launching::Remote { pending, begun, .. } => {
                let mut launched = pending.and_then(PendingLaunch::finish)?;
                let built = std::time::Instant::now();
                let served = serve(launched.take_listeners()).map_err(NotStarted::Relay)?;
                let s = launched.start_program()?;
                let pidfd = s.pidfd.try_clone().ok();
                let started = Started {
                    running: s.into_watched(begun, built, std::time::Instant::now()),
                    pidfd,
                    tracer: None,
                };
                Ok((started, served))
            }
        }
    }
}

/// Why an allowed spawn's sandbox, or its program, was not started:
/// nothing of the program ran.
#[derive(Debug)]
pub(super) enum NotStarted {
    /// The plan could not be made into a sandbox (the kernel's Landlock,
    /// the plan's paths, the filter).
    Design(DesignError),
    /// The sandbox's setup failed: here, inside, or in the daemon's spawner.
    Setup(SetupError),
    /// The daemon's spawner is gone, or broke its protocol.
    Spawner(String),
    /// The relay could not serve the sandbox's listeners.
    Relay(Failure),
    /// The sandbox and what serves it do not go together.
    Mismatch(&'static str),
}

impl From<SetupError> for NotStarted {
    fn from(e: SetupError) -> NotStarted {
        NotStarted::Setup(e)
    }
}

impl From<SpawnerError> for NotStarted {
    fn from(e: SpawnerError) -> NotStarted {
        match e {
            SpawnerError::Setup(e) => NotStarted::Setup(e),
            unavailable @ SpawnerError::Unavailable(_) => {
                NotStarted::Spawner(unavailable.to_string())
            }
        }
    }
}

impl NotStarted {
    /// The one place a sandbox that did not start becomes a [`Failure`] of
    /// a kind: a plan's paths that make no root are the manifest's
    /// (config), a filter that does not compile is spawnd's own fault
    /// (internal), anything else leaves the sandbox unavailable. `plan`
    /// words the message.
    pub(super) fn into_failure(self, plan: &SpawnPlan) -> Failure {
        let (kind, message) = match self {
            NotStarted::Design(DesignError::Landlock { offered, required }) => {
                // exec = "declared" is Landlock's execute right on each
                // file: no other layer could stand in for it, as none
                // stands in for any.
                let declared = match plan.exec {
                    ExecPlan::Declared { .. } => {
                        "; exec = \"declared\" is enforced by Landlock alone"
                    }
                    ExecPlan::Scopes => "",
                };
                (FailureKind::SandboxUnavailable, format!("spawn_sandbox_unavailable: this kernel offers Landlock ABI {offered} and spawnd requires at least {required} ([sandbox] landlock_min_abi){declared}; enable Landlock (lsm=…,landlock) or lower the requirement — nothing was run"))
            }
            NotStarted::Design(DesignError::Spec(e)) => (FailureKind::Config, e.to_string()),
            NotStarted::Design(DesignError::Filter(e)) => {
                (FailureKind::Internal, format!("seccomp filter: {e}"))
            }
            NotStarted::Setup(e) => (FailureKind::SandboxUnavailable, setup_failed(e)),
            NotStarted::Spawner(why) => (FailureKind::SandboxUnavailable, setup_failed(why)),
            NotStarted::Relay(failure) => (
                FailureKind::SandboxUnavailable,
                setup_failed(failure.message),
            ),
            NotStarted::Mismatch(why) => (FailureKind::SandboxUnavailable, setup_failed(why)),
        };
        Failure::new(kind, message)
    }
}

/// The message of a sandbox whose setup failed.
fn setup_failed(why: impl std::fmt::Display) -> String {
    format!("sandbox setup failed: {why}; nothing was run")
}

/// A started program's sandbox, as [`Launching::start_program`] gives it back.
pub(super) struct Started<'s> {
    /// The sandbox to supervise.
    pub(super) running: Watched<'s>,
    /// A pidfd for its init (a spawner's sandbox).
    pub(super) pidfd: Option<OwnedFd>,
    /// A traced sandbox's tracer, answering already.
    pub(super) tracer: Option<Tracer>,
}

/// Who the child is and how its memory and processes are limited: the
/// sandbox's [`RunAs`], chosen by [`choose_identity`].
pub(super) type Identity = RunAs;

/// docs/sandbox.md: the caller's uid/gid (spawnd's own when unprivileged). A root
/// caller's program never runs as host uid 0: it would own every
/// root-owned file it can see, and chmod, utime and xattrs on them are
/// outside Landlock's reach; it runs as `run_as`, or [`NOBODY`] when the
/// operator set none. `run_as_everyone` makes `run_as` every caller's. As
/// root acting for another user, scopes are checked as that user.
pub(super) fn choose_identity(p: &Prepared) -> Result<Identity, Failure> {
    let euid = nix::unistd::geteuid().as_raw();
    let privileged = crate::kernel_features::privileged();
    // Without root's powers over other users, a program runs as
    // spawnd's own uid: refused when that uid is the parent
    // namespace's root (the host's), whatever it is called here.
    if !privileged && crate::kernel_features::runs_as_parents_root() {
        return Err(Failure::sandbox_unavailable(
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
    let caller = &p.caller;
    Ok(RunAs {
        uid,
        gid,
        privileged,
        limits_via,
        check_as: (privileged && caller.uid != 0).then(|| CallerCreds::of(caller.uid, caller.gid)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::{Cause, Step};

    fn plan(exec: ExecPlan) -> SpawnPlan {
        SpawnPlan {
            exec,
            ..SpawnPlan::of_true()
        }
    }

    #[test]
    fn a_setup_error_is_a_sandbox_unavailable_by_its_type_and_keeps_its_text() {
        let reported = SetupError::because(
            Step::Root,
            "chdir(/w)",
            Cause::Reported("No such file or directory (os error 2)".into()),
        );
        let f = NotStarted::Setup(reported).into_failure(&plan(ExecPlan::Scopes));
        assert_eq!(f.kind, FailureKind::SandboxUnavailable);
        assert_eq!(
            f.message,
            "sandbox setup failed: chdir(/w): No such file or directory (os error 2): reported by the sandbox; nothing was run"
        );
        // Through the spawner: the same setup error, the same failure.
        let spawner = SpawnerError::Setup(SetupError::new(
            Step::Clone,
            "clone(new namespaces)",
            nix::Error::EPERM.into(),
        ));
        let f = NotStarted::from(spawner).into_failure(&plan(ExecPlan::Scopes));
        assert_eq!(f.kind, FailureKind::SandboxUnavailable);
        assert!(f
            .message
            .starts_with("sandbox setup failed: clone(new namespaces): "));
        let gone = SpawnerError::Unavailable("the spawner went away".into());
        let f = NotStarted::from(gone).into_failure(&plan(ExecPlan::Scopes));
        assert_eq!(
            f.message,
            "sandbox setup failed: spawner unavailable: the spawner went away; nothing was run"
        );
    }

    #[test]
    fn a_design_error_names_its_own_kind() {
        let landlock = DesignError::Landlock {
            offered: 3,
            required: 99,
        };
        let declared = plan(ExecPlan::Declared { files: Vec::new() });
        let f = NotStarted::Design(landlock).into_failure(&declared);
        assert_eq!(f.kind, FailureKind::SandboxUnavailable);
        assert!(
            f.message
                .contains("Landlock ABI 3 and spawnd requires at least 99")
                && f.message.contains("enforced by Landlock alone"),
            "{}",
            f.message
        );
        let relay = NotStarted::Relay(Failure::config("no relay"));
        let f = relay.into_failure(&declared);
        assert_eq!(f.kind, FailureKind::SandboxUnavailable);
        assert_eq!(f.message, "sandbox setup failed: no relay; nothing was run");
    }
}
