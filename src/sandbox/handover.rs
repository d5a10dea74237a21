//! What the parent hands a sandbox's init besides the order: the
//! descriptors (program, stdio, go-ahead and status pipes, cgroup `tasks`
//! files, the listeners' channel, the scopes' pins and idmapped mount
//! trees) and the facts that go with them. A child cloned
//! at launch gets them in its copy of memory; a spare sandbox
//! ([`super::spare`]) gets them in one frame, descriptors by `SCM_RIGHTS`,
//! and rebuilds the same [`ChildSetup`] from them.

use std::os::fd::{AsFd, OwnedFd};

use super::child::{ChildSetup, ScopeId};
use super::launch::LaunchOrder;
use super::prepare::{rlimits, to_cstrings, WipedCStrings};
use super::seccomp::SockFilter;
use super::SetupError;

/// The descriptors and facts the parent prepares for one sandbox: built into
/// a [`ChildSetup`] by a child cloned now, or sent (with the order) to a
/// spare sandbox, which builds the same setup from them.
pub(super) struct Handover {
    /// The scopes as resolved by the parent, in `spec.scopes` order.
    pub scopes: Vec<ScopeId>,
    /// The hashed program.
    pub program: OwnedFd,
    /// Whether the program is a `#!` script.
    pub script: bool,
    /// Whether `program` is the sealed copy of a program others than root
    /// may rewrite ([`super::prepare::sealed_copy`]).
    pub sealed: bool,
    /// Whether stdin is `/dev/null`: init opens the sandbox's own (a
    /// read-only bind), and `stdio[0]` is only a placeholder.
    pub stdin_null: bool,
    /// The child's stdin, stdout and stderr.
    pub stdio: [OwnedFd; 3],
    /// Read end of the go-ahead pipe.
    pub go_ahead: OwnedFd,
    /// Write end of the status pipe.
    pub status: OwnedFd,
    /// The per-spawn cgroups' `tasks` files.
    pub cgroup_tasks: Vec<OwnedFd>,
    /// With network grants: init's end of the channel it hands its
    /// listeners over ([`super::network`]).
    pub network: Option<OwnedFd>,
    /// With tracing: init's end of the channel it hands its seccomp
    /// listener over ([`super::trace`]).
    pub tracer: Option<OwnedFd>,
}

/// Descriptors every sandbox is handed besides its cgroups and scopes:
/// program, stdin, stdout, stderr, go-ahead, status.
const CHILD_FIXED_FDS: usize = 6;

impl Handover {
    /// The child's setup for `order`, with `seccomp` compiled from it.
    pub(super) fn into_setup<'a>(
        self,
        order: &'a LaunchOrder,
        seccomp: &'a [SockFilter],
        made_ahead: bool,
    ) -> Result<ChildSetup<'a>, SetupError> {
        Ok(ChildSetup {
            spec: &order.spec,
            scopes: self.scopes,
            program: self.program,
            script: self.script,
            sealed: self.sealed,
            stdin_null: self.stdin_null,
            argv: to_cstrings(order.argv.iter().map(Vec::as_slice))?,
            envp: WipedCStrings::new(to_cstrings(order.env.0.iter().map(Vec::as_slice))?),
            stdio: self.stdio,
            go_ahead: self.go_ahead,
            status: self.status,
            cgroup_tasks: self.cgroup_tasks,
            network: order.network.as_ref().zip(self.network),
            tracer: self.tracer,
            uid: order.uid,
            gid: order.gid,
            may_setgroups: order.privileged,
            landlock_abi: order.landlock_abi,
            seccomp,
            rlimits: rlimits(&order.limits, &order.limits_via),
            made_ahead,
            staged: None,
            bounding_emptied: None,
        })
    }

    /// Every descriptor, in the order [`Handover::from_fds`] takes them back.
    pub(super) fn fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        let mut v = vec![self.program.as_fd()];
        v.extend(self.stdio.iter().map(AsFd::as_fd));
        v.push(self.go_ahead.as_fd());
        v.push(self.status.as_fd());
        v.extend(self.cgroup_tasks.iter().map(AsFd::as_fd));
        v.extend(self.network.iter().map(AsFd::as_fd));
        v.extend(self.tracer.iter().map(AsFd::as_fd));
        v.extend(self.scopes.iter().map(|s| s.pinned.as_fd()));
        v.extend(
            self.scopes
                .iter()
                .filter_map(|s| s.idmapped.as_ref())
                .map(AsFd::as_fd),
        );
        v
    }

    /// What travels with the descriptors: the scopes' identities, whether
    /// the program is a script, how many cgroups.
    pub(super) fn facts(&self) -> HandoverFacts {
        HandoverFacts {
            scopes: self
                .scopes
                .iter()
                .map(|s| (s.canonical.clone(), s.dev, s.ino))
                .collect(),
            idmapped: self
                .scopes
                .iter()
                .enumerate()
                .filter(|(_, s)| s.idmapped.is_some())
                .map(|(i, _)| i)
                .collect(),
            script: self.script,
            sealed: self.sealed,
            stdin_null: self.stdin_null,
            cgroups: self.cgroup_tasks.len(),
            network: self.network.is_some(),
            tracer: self.tracer.is_some(),
        }
    }

    /// The handover again, from [`Handover::facts`] and the descriptors of
    /// [`Handover::fds`] as received.
    pub(super) fn from_fds(facts: HandoverFacts, fds: Vec<OwnedFd>) -> Option<Handover> {
        let channels = usize::from(facts.network) + usize::from(facts.tracer);
        let scopes = facts.scopes.len();
        if fds.len() != CHILD_FIXED_FDS + facts.cgroups + channels + scopes + facts.idmapped.len()
            || facts.idmapped.iter().any(|&i| i >= scopes)
        {
            return None;
        }
        let mut fds = fds.into_iter();
        let mut next = || fds.next();
        let program = next()?;
        let stdio = [next()?, next()?, next()?];
        let go_ahead = next()?;
        let status = next()?;
        let cgroup_tasks = (0..facts.cgroups)
            .map(|_| next())
            .collect::<Option<Vec<_>>>()?;
        let network = match facts.network {
            true => Some(next()?),
            false => None,
        };
        let tracer = match facts.tracer {
            true => Some(next()?),
            false => None,
        };
        let mut scopes = facts
            .scopes
            .into_iter()
            .map(|(canonical, dev, ino)| {
                next().map(|pinned| ScopeId {
                    canonical,
                    dev,
                    ino,
                    pinned,
                    idmapped: None,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        for i in facts.idmapped {
            scopes.get_mut(i)?.idmapped = Some(next()?);
        }
        Some(Handover {
            scopes,
            program,
            script: facts.script,
            sealed: facts.sealed,
            stdin_null: facts.stdin_null,
            stdio,
            go_ahead,
            status,
            cgroup_tasks,
            network,
            tracer,
        })
    }
}

/// The plain facts of [`Handover`], sent beside its descriptors.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct HandoverFacts {
    /// Each scope's canonical path, device and inode, in `spec.scopes` order.
    pub scopes: Vec<(std::path::PathBuf, u64, u64)>,
    /// The scopes (indices into `scopes`, ascending) whose idmapped mount
    /// trees come last, in this order, after the scopes' pins.
    #[serde(default)]
    pub idmapped: Vec<usize>,
    /// Whether the program is a `#!` script.
    pub script: bool,
    /// Whether the program is a sealed copy.
    #[serde(default)]
    pub sealed: bool,
    /// Whether stdin is `/dev/null`.
    pub stdin_null: bool,
    /// How many cgroup `tasks` descriptors come after the fixed ones.
    pub cgroups: usize,
    /// Whether the listeners' channel comes after the cgroups'.
    pub network: bool,
    /// Whether the tracer's channel comes after that.
    #[serde(default)]
    pub tracer: bool,
}
