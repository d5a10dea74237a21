//! The sandbox's front door: a decided spawn made into one launch order,
//! here and nowhere else. [`Design::new`] takes the gate's plan and who
//! the program runs as ([`RunAs`]) and decides the sandbox: its spec, the
//! Landlock ABI it enforces, and the seccomp filter, compiled once per
//! process. [`Design::order`] adds the program file the gate hashed, the
//! credential values and stdin: an [`Ordered`] launch, which
//! [`super::launch::launch`] starts in this process, or whose
//! [`LaunchOrder`] goes to the daemon's spawner with the program's
//! descriptor. The filter crosses that frame once, as the kernel's bytes;
//! a launch in this process installs the compiled filter as it is.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::as_caller::CallerCreds;
use super::launch::{EnvEntries, LaunchOrder, LimitsVia, StdinSource};
use super::network::NetworkSetup;
use super::prepare::{env_entries, is_script};
use super::seccomp::{
    filter_for, policy_for, traced_filter_for, CompileError, Filter, FilterOptions, Policy,
};
use super::spec::{
    account_name, add_runtime_files, bind_root_only_script, build_spec, only_root_may_change,
    HostKind, RuntimeIdentity, SandboxSpec, SpecError,
};
use super::SetupError;
use crate::plan::SpawnPlan;
use crate::sys::landlock_abi_version;
use crate::vault::Secret;

/// The identity a root caller's program runs as when no other is chosen:
/// the kernel's overflow ids, `nobody`/`nogroup` on most systems.
pub(crate) const NOBODY: (u32, u32) = (65534, 65534);

/// Who the program runs as, and how its memory and processes are limited.
#[derive(Debug, Clone)]
pub struct RunAs {
    /// Its uid, inside and out.
    pub uid: u32,
    /// Its gid, inside and out.
    pub gid: u32,
    /// Whether spawnd has CAP_SETUID/CAP_SETGID (root): maps more than itself.
    pub privileged: bool,
    /// How memory and process counts are limited.
    pub limits_via: LimitsVia,
    /// As root for another user: the caller whose access every scope is
    /// created, opened and checked with (docs/sandbox.md).
    pub check_as: Option<CallerCreds>,
}

impl RunAs {
    /// The identity as the sandbox's `/etc/passwd` and `/etc/group` name
    /// it: the host's names for its ids when they are plain, else `user`
    /// and `group`. Root and nobody have fixed lines there: the password
    /// database is read (once per spawn) only for another identity.
    pub fn runtime(&self) -> RuntimeIdentity {
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
}

/// Why a plan cannot be made into a sandbox; nothing was launched.
#[derive(Debug)]
pub enum DesignError {
    /// This kernel's Landlock ABI is below the one required.
    Landlock {
        /// What the kernel offers (0: no Landlock).
        offered: u32,
        /// What spawnd requires.
        required: u32,
    },
    /// The plan's paths cannot be laid out as a root.
    Spec(SpecError),
    /// The seccomp filter did not compile.
    Filter(CompileError),
}

/// A sandbox decided for a plan, before its program is known: the spec,
/// the Landlock ABI and the seccomp filter.
pub struct Design<'a> {
    plan: &'a SpawnPlan,
    run_as: &'a RunAs,
    spec: SandboxSpec,
    landlock_abi: u32,
    filter: &'static Filter,
    /// For a traced run (whose `filter` is the traced one): the untraced
    /// policy, by which the tracer answers ([`super::trace`]).
    answers: Option<Policy>,
}

impl<'a> Design<'a> {
    /// Decides the sandbox for `plan`, run as `run_as`, with the operator's
    /// read-only `system_paths`. The kernel must offer Landlock ABI
    /// `required_landlock_abi` at least. `trace` installs the filter with a
    /// listener whose notifications spawnd answers and records.
    pub fn new(
        plan: &'a SpawnPlan,
        system_paths: &[PathBuf],
        run_as: &'a RunAs,
        required_landlock_abi: u32,
        trace: bool,
    ) -> Result<Design<'a>, DesignError> {
        let landlock_abi = landlock_abi_version().unwrap_or(0);
        if landlock_abi < required_landlock_abi {
            return Err(DesignError::Landlock {
                offered: landlock_abi,
                required: required_landlock_abi,
            });
        }
        let mut spec = build_spec(plan, system_paths, &host_kind).map_err(DesignError::Spec)?;
        add_runtime_files(&mut spec, &run_as.runtime());
        // Unix sockets where the manifest grants socket paths; SysV IPC
        // objects where spawnd, as root, writes the sandbox's IPC limits;
        // memfds where a memory cgroup counts them.
        let options = FilterOptions::for_spawn(
            !plan.fs.unix_sockets.is_empty(),
            run_as.privileged,
            run_as.limits_via.is_cgroup(),
        );
        let filter = match trace {
            true => traced_filter_for(options),
            false => filter_for(options),
        }
        .map_err(DesignError::Filter)?;
        Ok(Design {
            plan,
            run_as,
            spec,
            landlock_abi,
            filter,
            answers: trace.then(|| policy_for(options)),
        })
    }

    /// The sandbox's spec.
    pub fn spec(&self) -> &SandboxSpec {
        &self.spec
    }

    /// The order for the program the gate opened and hashed, with the
    /// values of the plan's credential keys and where stdin comes from. A
    /// `#!` script only root may change is bound over its own path (see
    /// [`bind_root_only_script`]).
    pub fn order(
        mut self,
        program: File,
        credentials: &[(String, Secret)],
        stdin: StdinSource,
    ) -> Result<Ordered, SetupError> {
        bind_root_only_script(&mut self.spec, is_script(&program), only_root_may_change);
        let plan = self.plan;
        let run_as = self.run_as;
        let order = LaunchOrder {
            argv: plan.argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
            program_sha256: plan.program.sha256.0,
            env: EnvEntries(env_entries(plan, credentials)?),
            limits: plan.limits,
            uid: run_as.uid,
            gid: run_as.gid,
            privileged: run_as.privileged,
            landlock_abi: self.landlock_abi,
            seccomp: self.filter.to_bytes(),
            limits_via: run_as.limits_via.clone(),
            check_as: run_as.check_as.clone(),
            network: NetworkSetup::for_plan(plan)?,
            trace: self.answers.is_some(),
            spec: std::sync::Arc::new(self.spec),
        };
        Ok(Ordered {
            order,
            program,
            stdin,
            filter: self.filter,
            answers: self.answers,
        })
    }
}

/// A launch, ordered: what [`super::launch::launch`] starts in this
/// process, or what the daemon hands its spawner.
pub struct Ordered {
    /// Everything the launch needs, as it crosses a frame.
    pub order: LaunchOrder,
    /// The program file the gate hashed.
    pub program: File,
    /// Where the program's stdin comes from.
    pub stdin: StdinSource,
    /// The compiled filter, installed as it is by a launch in this process.
    pub(super) filter: &'static Filter,
    /// A traced sandbox's answers (see [`Design`]).
    pub(super) answers: Option<Policy>,
}

impl Ordered {
    /// The decided sandbox.
    pub fn spec(&self) -> &SandboxSpec {
        &self.order.spec
    }

    /// The decided sandbox, shared: for what reads it after the launch.
    pub(crate) fn shared_spec(&self) -> std::sync::Arc<SandboxSpec> {
        std::sync::Arc::clone(&self.order.spec)
    }

    /// The compiled seccomp filter (its id and length go on record).
    pub fn filter(&self) -> &'static Filter {
        self.filter
    }
}

/// What a host path is, read from the host now (symbolic links not followed).
fn host_kind(path: &Path) -> HostKind {
    match std::fs::symlink_metadata(path) {
        Err(_) => HostKind::Missing,
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::read_link(path).map_or(HostKind::Missing, HostKind::Symlink)
        }
        Ok(m) if m.is_dir() => HostKind::Dir,
        Ok(_) => HostKind::File,
    }
}
