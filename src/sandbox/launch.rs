//! The parent's side of starting a sandbox: create missing write scopes, open
//! every scope once (O_PATH), mount a root caller's scopes idmapped where
//! their owner is not the program's uid ([`super::idmap`]), make the pipes and the cgroups, compile nothing
//! in the child — then `clone` into fresh user, mount, pid, network, ipc and
//! uts namespaces, write the child's uid/gid maps and let it build its root
//! ([`launch`] returns a [`Launched`] sandbox). The program starts only on a
//! second go-ahead ([`Launched::start_program`]), so the caller can make the
//! audit record durable while the child works; dropping a `Launched` kills it.
//! Must be called from a single-threaded process (the CLI, or the spawner).

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::pipe2;

use super::as_caller::{check_as_child, required_access, with_identity, CallerCreds};
use super::cgroup::{CgroupPool, SpawnCgroup, V1Roots, V2Base};
use super::child::{init_main, ChildSetup, ScopeId};
use super::handover::Handover;
use super::idmap::{idmap_scopes, NotIdmapped};
use super::network::{receive_listeners, Listeners, NetworkSetup};
use super::order::Ordered;
use super::prepare::{
    chown_created, create_write_scopes, identify_scope, is_script, nix_prep, only_root_may_write,
    prep, sealed_copy, write_id_maps, CreatedOwner,
};
use super::seccomp::{Filter, Policy, SockFilter};
use super::spare::Spare;
use super::spec::SandboxSpec;
use super::status_pipe;
use super::threads::ensure_single_threaded;
use super::trace::Tracer;
use super::{Cause, SetupError, Step};
use crate::ipc::MAX_FRAME_FDS;
use crate::manifest::Limits;
use crate::sys::clone_process;

/// How memory and process counts are limited.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum LimitsVia {
    /// One cgroup per sandbox on the unified hierarchy, made in this place.
    CgroupV2(V2Base),
    /// cgroup v1 `memory` and `pids` controllers.
    CgroupV1(V1Roots),
    /// `RLIMIT_DATA` (and a wider `RLIMIT_AS`) and `RLIMIT_NPROC`.
    Rlimits,
}

impl LimitsVia {
    /// The name recorded in results and audit.
    pub fn name(&self) -> &'static str {
        match self {
            LimitsVia::CgroupV2(_) => "cgroup_v2",
            LimitsVia::CgroupV1(_) => "cgroup_v1",
            LimitsVia::Rlimits => "rlimits",
        }
    }

    /// Whether a memory cgroup counts the sandbox's memory.
    pub fn is_cgroup(&self) -> bool {
        !matches!(self, LimitsVia::Rlimits)
    }

    /// Removes per-spawn cgroups a `kill -9`'d spawnd left behind, at most
    /// every few seconds ([`crate::sandbox::cgroup::sweep_stale_now_and_then`]).
    pub fn sweep_stale_cgroups(&self) {
        let parents = match self {
            LimitsVia::CgroupV2(base) => vec![base.dir.clone()],
            LimitsVia::CgroupV1(roots) => roots.parents(),
            LimitsVia::Rlimits => return,
        };
        super::cgroup::sweep_stale_now_and_then(&parents);
    }
}

/// Where the child's stdin comes from (told the spawner as this value; the
/// pipe is made where the sandbox is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StdinSource {
    /// `/dev/null`.
    Null,
    /// Bytes spawnd writes into a pipe (its own stdin, a `--stdin-file`, or
    /// request bytes). Never a host file's own descriptor: the program could
    /// `fchmod` or `futimens` the file through it (docs/sandbox.md).
    Pipe,
}

/// Everything a launch needs, owned and serializable: what
/// [`super::order::Design::order`] makes, what [`launch_order`] works
/// from, and what the daemon hands its spawner over their private socket.
/// `env` holds credential values; it is wiped when the order is dropped.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct LaunchOrder {
    /// The decided sandbox, shared with the pipeline's report (which reads
    /// it after the launch) rather than copied.
    pub spec: std::sync::Arc<SandboxSpec>,
    /// argv, `argv[0]` included.
    #[serde(with = "crate::ipc::byte_strings")]
    pub argv: Vec<Vec<u8>>,
    /// The digest the gate decided on: a `#!` script's sealed copy must have it.
    pub program_sha256: [u8; 32],
    /// `KEY=VALUE` entries, exactly the plan's, credentials included.
    pub env: EnvEntries,
    /// The plan's limits.
    pub limits: Limits,
    /// Identity inside (same numbers outside).
    pub uid: u32,
    /// Group inside.
    pub gid: u32,
    /// Whether spawnd has CAP_SETUID/CAP_SETGID (root): maps more than itself.
    pub privileged: bool,
    /// Landlock ABI to enforce.
    pub landlock_abi: u32,
    /// The compiled seccomp filter as the kernel reads it
    /// ([`Filter::to_bytes`]): raw bytes in the frame.
    #[serde(with = "serde_bytes")]
    pub seccomp: Vec<u8>,
    /// Memory/process limit mechanism.
    pub limits_via: LimitsVia,
    /// As root for another user: create, open and check every scope as this
    /// caller (docs/sandbox.md), so nothing is bound that the caller could not open.
    #[serde(default)]
    pub check_as: Option<CallerCreds>,
    /// With network grants: the routes and listeners init sets up in the
    /// sandbox's namespace ([`super::network`]); `None` without grants.
    #[serde(default)]
    pub network: Option<NetworkSetup>,
    /// Whether init installs the filter with a listener and hands it over
    /// ([`super::trace`]).
    #[serde(default)]
    pub trace: bool,
}

/// Environment entries that may hold secrets: zeroed on drop.
#[derive(Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct EnvEntries(#[serde(with = "crate::ipc::byte_strings")] pub Vec<Vec<u8>>);

impl Drop for EnvEntries {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

impl LaunchOrder {
    /// The order's seccomp filter, read back from its bytes
    /// ([`Filter::to_bytes`]): by the spawner, which the order reached in
    /// a frame.
    pub fn filter(&self) -> Result<Filter, SetupError> {
        Filter::from_bytes(&self.seccomp).ok_or_else(|| {
            SetupError::new(
                Step::Seccomp,
                "seccomp filter",
                std::io::Error::from_raw_os_error(libc::EINVAL),
            )
        })
    }
}

/// A sandbox made in this process, from its clone on: init and the
/// parent's ends of its pipes. Its program starts with
/// [`Launched::start_program`]; the supervisor then watches it.
pub struct LocalSandbox {
    /// The init process (pid 1 inside), as seen from here.
    pub init_pid: i32,
    /// Read end of the child's stdout.
    pub stdout: OwnedFd,
    /// Read end of the child's stderr.
    pub stderr: OwnedFd,
    /// Read end of the status pipe.
    pub status: OwnedFd,
    /// Write end of the stdin pipe, for `StdinSource::Pipe`.
    pub stdin: Option<OwnedFd>,
    /// The per-spawn cgroups, if any.
    pub cgroup: Option<SpawnCgroup>,
    /// The go-ahead pipe's write end, held open for the sandbox's lifetime: init
    /// checks it after changing uid to learn whether spawnd is still alive
    /// (when a spawner launched it, the spawner's caller holds a copy until
    /// it starts the program).
    pub go_ahead: OwnedFd,
    /// With network grants: the listeners init opened in the sandbox's
    /// network namespace, received before the program may start.
    pub listeners: Option<Listeners>,
    /// With tracing: spawnd's end of the channel init hands its seccomp
    /// listener over.
    pub tracer: Option<std::os::unix::net::UnixStream>,
    /// When `clone` was called.
    pub cloned_at: std::time::Instant,
    /// When the ids were mapped and the child went on to build its root.
    pub mapped_at: std::time::Instant,
    /// When the program's go-ahead was written (the wall-time clock starts here).
    pub started_at: std::time::Instant,
}

/// A sandbox whose init is building its root and will start the program only
/// on [`Launched::start_program`]. Dropped without it, the sandbox is killed
/// and nothing of the program has run.
pub struct Launched {
    sandbox: Option<LocalSandbox>,
    /// A traced sandbox's answers ([`super::order::Design`]), for
    /// [`Launched::start_tracer`].
    answers: Option<Policy>,
}

impl Launched {
    /// Lets init fork the program; the wall-time clock starts now.
    pub fn start_program(mut self) -> Result<LocalSandbox, SetupError> {
        let Some(mut running) = self.sandbox.take() else {
            return Err(SetupError::new(
                Step::GoAhead,
                "start the program",
                std::io::Error::other("already started"),
            ));
        };
        match go_ahead(&running.go_ahead, GoAhead::StartProgram) {
            Ok(()) => {
                running.started_at = std::time::Instant::now();
                Ok(running)
            }
            Err(e) => Err(abort(running, e)),
        }
    }

    /// The write end of init's go-ahead pipe, for whoever is to start the
    /// program (the daemon, given a copy by its spawner): one byte starts it.
    pub fn go_ahead(&self) -> Option<BorrowedFd<'_>> {
        self.sandbox.as_ref().map(|r| r.go_ahead.as_fd())
    }

    /// The program was started by writing to a copy of [`Launched::go_ahead`]
    /// elsewhere: the sandbox is running from now on.
    pub fn started_elsewhere(mut self) -> Option<LocalSandbox> {
        let mut running = self.sandbox.take()?;
        running.started_at = std::time::Instant::now();
        Some(running)
    }

    /// The init process's pid, as seen from here.
    pub fn init_pid(&self) -> Option<i32> {
        self.sandbox.as_ref().map(|r| r.init_pid)
    }

    /// The read ends of stdout, stderr and the status pipe (to hand on as copies).
    pub fn pipes(&self) -> Option<[BorrowedFd<'_>; 3]> {
        self.sandbox
            .as_ref()
            .map(|r| [r.stdout.as_fd(), r.stderr.as_fd(), r.status.as_fd()])
    }

    /// Opens the memory cgroup's peak and OOM files now (see
    /// [`SpawnCgroup::open_readings`]); nothing without cgroups.
    pub fn open_cgroup_readings(&mut self) {
        if let Some(cg) = self.sandbox.as_mut().and_then(|r| r.cgroup.as_mut()) {
            cg.open_readings();
        }
    }

    /// The memory cgroup's directory, opened (see
    /// [`SpawnCgroup::open_memory_dir`]); `None` without cgroups.
    pub fn open_cgroup_memory_dir(&self) -> Option<std::io::Result<OwnedFd>> {
        self.sandbox
            .as_ref()
            .and_then(|r| r.cgroup.as_ref())
            .map(SpawnCgroup::open_memory_dir)
    }

    /// Takes the listeners of a sandbox with network grants (see
    /// [`LocalSandbox::listeners`]).
    pub fn take_listeners(&mut self) -> Option<Listeners> {
        self.sandbox.as_mut().and_then(|r| r.listeners.take())
    }

    /// Starts a traced sandbox's tracer, answering by the untraced policy
    /// on the channel init hands its seccomp listener over (see
    /// [`LocalSandbox::tracer`]); `None` for a sandbox that is not traced.
    pub fn start_tracer(&mut self) -> Result<Option<Tracer>, SetupError> {
        let channel = self.sandbox.as_mut().and_then(|r| r.tracer.take());
        match (channel, self.answers.take()) {
            (Some(channel), Some(answers)) => Tracer::start(channel, answers)
                .map(Some)
                .map_err(|e| SetupError::new(Step::Seccomp, "start the tracer", e)),
            (None, None) => Ok(None),
            _ => Err(SetupError::because(
                Step::Seccomp,
                "a traced sandbox",
                Cause::Other("its tracer's channel or answers are missing".into()),
            )),
        }
    }

    /// Takes the write end of the stdin pipe (`StdinSource::Pipe`): whoever
    /// feeds stdin must hold the only copy, so closing it ends the input.
    pub fn take_stdin(&mut self) -> Option<OwnedFd> {
        self.sandbox.as_mut().and_then(|r| r.stdin.take())
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        if let Some(running) = self.sandbox.take() {
            let _ = abort(
                running,
                SetupError::new(Step::GoAhead, "abandon", std::io::Error::other("dropped")),
            );
        }
    }
}

/// Kills and reaps a sandbox that must not go on, removes its cgroups, and
/// returns the error to report: the child's own, when it failed first.
fn abort(running: LocalSandbox, fallback: SetupError) -> SetupError {
    let pid = nix::unistd::Pid::from_raw(running.init_pid);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    let _ = nix::sys::wait::waitpid(pid, None);
    if let Some(cg) = running.cgroup {
        cg.remove();
    }
    drop(running.go_ahead);
    status_pipe::read_dead_init_report(running.status.as_fd()).unwrap_or(fallback)
}

/// What a byte down init's go-ahead pipe lets it do. Init reads one byte
/// for each, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GoAhead {
    /// Its ids are mapped: build the root, take the program's identity and
    /// confine itself.
    BuildRoot,
    /// The spawn's decision record is durable: start the program.
    StartProgram,
}

/// Writes one go-ahead byte to init's go-ahead pipe (this process's end, or
/// a copy of it the daemon holds). An init that died meanwhile makes it
/// fail with EPIPE: its own report is then on its status pipe
/// ([`status_pipe::read_dead_init_report`]).
pub(crate) fn go_ahead(pipe: impl AsFd, what: GoAhead) -> Result<(), SetupError> {
    let (byte, call) = match what {
        GoAhead::BuildRoot => (b"m", "release the child"),
        GoAhead::StartProgram => (b"c", "release the program"),
    };
    nix::unistd::write(pipe, byte)
        .map(drop)
        .map_err(|e| SetupError::new(Step::GoAhead, call, e.into()))
}

/// The namespaces every sandbox gets at clone time (cgroup is unshared once
/// inside its cgroup); a spare sandbox unshares all but its user and pid
/// namespaces itself, right after its clone (see `spare::CLONED`).
pub(super) const NAMESPACES: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS;

/// Starts the sandbox an [`Ordered`] launch describes, in this process,
/// with its compiled filter as it is. Nothing of the program runs before
/// every layer is in place.
pub(crate) fn launch(ordered: Ordered) -> Result<Launched, SetupError> {
    let Ordered {
        order,
        program,
        stdin,
        filter,
        answers,
    } = ordered;
    let mut launched = launch_order(&order, &filter.instructions, program, stdin, None, None)?;
    launched.answers = answers;
    Ok(launched)
}

/// Starts the sandbox an order describes, for the program file the gate
/// hashed: in `spare`, a sandbox whose namespaces were made before the
/// request, or else in namespaces made now by `clone`. A `Spare` that died
/// meanwhile is reaped and replaced by a fresh clone; either way the sandbox
/// is the same. Its cgroups (with cgroup limits) come from `cgroups` when
/// given, else are made for it.
pub fn launch_order(
    order: &LaunchOrder,
    seccomp: &[SockFilter],
    program: File,
    stdin: StdinSource,
    spare: Option<Spare>,
    cgroups: Option<&mut CgroupPool>,
) -> Result<Launched, SetupError> {
    ensure_single_threaded()?;
    // Read here, once per process, so the clone inherits the answer (see
    // `init_main`, which hides spawnd's command line).
    let _ = crate::sys::command_line_area();
    check_no_nul_in_argv_or_env(order)?;
    let (mut scopes, created) = open_scopes(order, &program)?;
    check_sockets_are_sockets(&order.spec, &scopes)?;
    let not_idmapped = idmap_scopes(order, &mut scopes);
    give_unmapped_created_scopes_to_the_child(order, &created, &scopes, &not_idmapped)?;
    check_as_run_as(order, &scopes, &not_idmapped, &program)?;
    let (parent, child) = make_pipes(stdin)?;
    let (program, script, sealed) = program_to_run(program, order)?;
    let (cgroup, cgroup_tasks) = cgroups_for(order, cgroups)?;
    let (listener_channel, network) = listener_channel(order)?;
    let (tracer_channel, tracer) = tracer_channel(order)?;
    let handover = Handover {
        scopes,
        program: OwnedFd::from(program),
        script,
        sealed,
        stdin_null: parent.stdin.is_none(),
        stdio: child.stdio,
        go_ahead: child.go_ahead,
        status: child.status,
        cgroup_tasks,
        network,
        tracer,
    };
    let cloned_at = std::time::Instant::now();
    let (pid, mapped, parent) = match deliver_to_spare(order, &handover, spare) {
        Some((pid, mapped)) => {
            // The spare holds its own copies now. Ours go at once: were the
            // first go-ahead to fail, `abort` reads the status pipe to its
            // end, which never comes while this process holds a write end.
            drop(handover);
            (pid, mapped, parent)
        }
        None => {
            let setup = handover.into_setup(order, seccomp, false)?;
            match clone_init(setup, parent) {
                Ok((pid, parent)) => (pid, false, parent),
                Err(e) => {
                    if let Some(cg) = cgroup {
                        cg.remove();
                    }
                    return Err(clone_failed(e));
                }
            }
        }
    };
    // The parent's copies of the child's ends went with `handover` (or the
    // setup, which the clone consumed): only the sandbox holds them now.
    let running = LocalSandbox {
        init_pid: pid,
        stdout: parent.stdout,
        stderr: parent.stderr,
        status: parent.status,
        stdin: parent.stdin,
        cgroup,
        go_ahead: parent.go_ahead,
        listeners: None,
        tracer: tracer_channel,
        cloned_at,
        mapped_at: cloned_at,
        started_at: cloned_at,
    };
    let launched = first_go_ahead(running, order, mapped)?;
    match listener_channel {
        Some(channel) => with_listeners(launched, &channel),
        None => Ok(launched),
    }
}

/// How long the parent waits for init's listeners: init builds its root
/// first, a matter of milliseconds.
const LISTENERS_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// For an order with network grants, the private socketpair init hands its
/// listeners over: the parent's end, and init's (in the [`Handover`]).
fn listener_channel(
    order: &LaunchOrder,
) -> Result<(Option<std::os::unix::net::UnixStream>, Option<OwnedFd>), SetupError> {
    if order.network.is_none() {
        return Ok((None, None));
    }
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| SetupError::new(Step::Prepare, "socketpair(the listeners' channel)", e))?;
    ours.set_read_timeout(Some(LISTENERS_WITHIN))
        .map_err(|e| SetupError::new(Step::Prepare, "set the listeners' channel's timeout", e))?;
    Ok((Some(ours), Some(OwnedFd::from(theirs))))
}

/// For a traced order, the private socketpair init hands its seccomp
/// listener over: the parent's end, and init's (in the [`Handover`]).
fn tracer_channel(
    order: &LaunchOrder,
) -> Result<(Option<std::os::unix::net::UnixStream>, Option<OwnedFd>), SetupError> {
    if !order.trace {
        return Ok((None, None));
    }
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| SetupError::new(Step::Prepare, "socketpair(the tracer's channel)", e))?;
    Ok((Some(ours), Some(OwnedFd::from(theirs))))
}

/// Waits for init's listeners and keeps them in the sandbox. If they do
/// not come (init failed a step, and said which on its status pipe), the
/// sandbox is aborted with init's reason.
fn with_listeners(
    mut launched: Launched,
    channel: &std::os::unix::net::UnixStream,
) -> Result<Launched, SetupError> {
    let received = receive_listeners(channel);
    let Some(mut running) = launched.sandbox.take() else {
        return Err(SetupError::new(
            Step::Prepare,
            "receive the sandbox's listeners",
            std::io::Error::other("no sandbox"),
        ));
    };
    match received {
        Ok(listeners) => {
            running.listeners = Some(listeners);
            launched.sandbox = Some(running);
            Ok(launched)
        }
        Err(e) => Err(abort(running, e)),
    }
}

/// Refuses an argv or env entry with a NUL byte. Checked first, so that a
/// spare sandbox never meets an error only the parent could report (a spare
/// that fails to read its order just exits).
fn check_no_nul_in_argv_or_env(order: &LaunchOrder) -> Result<(), SetupError> {
    if order
        .argv
        .iter()
        .chain(order.env.0.iter())
        .any(|a| a.contains(&0))
    {
        return Err(SetupError::new(
            Step::Prepare,
            "argv/env",
            std::io::Error::from_raw_os_error(libc::EINVAL),
        ));
    }
    Ok(())
}

/// Missing write scopes spawnd created for itself, with a descriptor each.
type Created = Vec<(std::path::PathBuf, OwnedFd)>;

/// Creates the missing write scopes and opens every scope once (O_PATH), in
/// `spec.scopes` order: as spawnd itself, or with an order that names
/// `check_as`, as that caller ([`open_scopes_as_caller`]). Root launching
/// for itself makes each missing scope its directory owner's, as the
/// program writing that directory idmapped would
/// ([`give_unmapped_created_scopes_to_the_child`] hands over those that
/// are not idmapped after all); anyone else makes them the child's.
fn open_scopes(order: &LaunchOrder, program: &File) -> Result<(Vec<ScopeId>, Created), SetupError> {
    match &order.check_as {
        None => {
            let owner = match order.privileged {
                true => CreatedOwner::OfParent,
                false => CreatedOwner::Set(order.uid, order.gid),
            };
            let created = create_write_scopes(&order.spec, owner)?;
            let scopes = order
                .spec
                .scopes
                .iter()
                .map(|p| identify_scope(p, None))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((scopes, created))
        }
        Some(caller) => open_scopes_as_caller(order, caller, program),
    }
}

/// A scope spawnd created for itself as its directory owner's, that is
/// not idmapped (the filesystem or kernel cannot), goes to the child's
/// identity, as every created scope did before idmapping: its directory
/// owner's rights would not reach the program.
fn give_unmapped_created_scopes_to_the_child(
    order: &LaunchOrder,
    created: &Created,
    scopes: &[ScopeId],
    not_idmapped: &[NotIdmapped],
) -> Result<(), SetupError> {
    for n in not_idmapped {
        let Some(scope) = scopes.get(n.index) else {
            continue;
        };
        if let Some((dir, fd)) = created.iter().find(|(d, _)| *d == scope.canonical) {
            chown_created(fd, dir, order.uid, order.gid)?;
        }
    }
    Ok(())
}

/// Root launching for another user: creates, opens and checks every scope
/// as `caller`, who must also be able to execute the program
/// ([`check_caller_may_execute`]), so nothing is bound or run that the caller
/// could not open or run itself. Directories created for a `run_as` identity
/// other than the caller's then go to that identity.
fn open_scopes_as_caller(
    order: &LaunchOrder,
    caller: &CallerCreds,
    program: &File,
) -> Result<(Vec<ScopeId>, Created), SetupError> {
    let need = required_access(&order.spec);
    // A root caller's missing scopes are made as for spawnd itself.
    let owner = match caller.uid == 0 && order.privileged {
        true => CreatedOwner::OfParent,
        false => CreatedOwner::Creator,
    };
    let (created, scopes) = with_identity(caller, || {
        let created = create_write_scopes(&order.spec, owner)?;
        let scopes = order
            .spec
            .scopes
            .iter()
            .zip(need)
            .map(|(p, n)| identify_scope(p, Some((n, caller.uid))))
            .collect::<Result<Vec<_>, _>>()?;
        check_caller_may_execute(program, caller)?;
        Ok((created, scopes))
    })?;
    if owner == CreatedOwner::OfParent {
        return Ok((scopes, created));
    }
    if (order.uid, order.gid) != (caller.uid, caller.gid) {
        // `run_as`: the directories just created, as the caller,
        // belong to the child's identity.
        for (dir, fd) in &created {
            chown_created(fd, dir, order.uid, order.gid)?;
        }
    }
    Ok((scopes, Vec::new()))
}

/// The caller (whose identity this thread has taken) must be able to
/// execute the file spawnd opened, and read it for a `#!` script, whose
/// interpreter reads it through a descriptor.
fn check_caller_may_execute(program: &File, caller: &CallerCreds) -> Result<(), SetupError> {
    let mut need = nix::unistd::AccessFlags::X_OK;
    if is_script(program) {
        need |= nix::unistd::AccessFlags::R_OK;
    }
    nix::unistd::faccessat(
        program,
        "",
        need,
        nix::fcntl::AtFlags::AT_EMPTY_PATH | nix::fcntl::AtFlags::AT_EACCESS,
    )
    .map_err(|e| {
        SetupError::new(Step::Prepare,
            format!(
                "the program: the caller (uid {}) may not execute it, and spawnd runs nothing the caller could not run itself",
                caller.uid
            ),
            e.into(),
        )
    })
}

/// When spawnd is root and the program runs as another identity than the
/// one the scopes were opened as, checks that identity's access to the
/// scopes (an idmapped one as the program will see it) and the program
/// ([`check_as_child`]), so a refusal is explained here rather than met as
/// EACCES inside.
fn check_as_run_as(
    order: &LaunchOrder,
    scopes: &[ScopeId],
    not_idmapped: &[NotIdmapped],
    program: &File,
) -> Result<(), SetupError> {
    let checked_as = match &order.check_as {
        Some(caller) => (caller.uid, caller.gid),
        None => (0, 0),
    };
    if order.privileged && (order.uid, order.gid) != checked_as {
        check_as_child(
            scopes,
            not_idmapped,
            &required_access(&order.spec),
            program.as_fd(),
            is_script(program),
            order.uid,
            order.gid,
        )?;
    }
    Ok(())
}

/// The file init executes, whether it is a `#!` script, and whether it is
/// a sealed copy: the program the gate hashed where only root may rewrite
/// it, else its sealed copy ([`sealed_copy`]), which must have the digest
/// the gate decided on; a script always runs from its copy. Whether it is
/// a script is read from the bytes that run.
fn program_to_run(program: File, order: &LaunchOrder) -> Result<(File, bool, bool), SetupError> {
    if !is_script(&program) && only_root_may_write(&program) {
        return Ok((program, false, false));
    }
    let copy = sealed_copy(&program, &order.program_sha256)?;
    let script = is_script(&copy);
    Ok((copy, script, !script))
}

/// The parent's ends of a sandbox's pipes.
struct ParentEnds {
    /// Read end of the program's stdout.
    stdout: OwnedFd,
    /// Read end of its stderr.
    stderr: OwnedFd,
    /// Read end of the status pipe.
    status: OwnedFd,
    /// Write end of the go-ahead pipe.
    go_ahead: OwnedFd,
    /// Write end of the stdin pipe, for `StdinSource::Pipe`.
    stdin: Option<OwnedFd>,
}

/// The child's ends of a sandbox's pipes, handed over to init.
struct ChildEnds {
    /// The program's stdin (`/dev/null`'s placeholder, or the pipe's read
    /// end), stdout and stderr.
    stdio: [OwnedFd; 3],
    /// Write end of the status pipe.
    status: OwnedFd,
    /// Read end of the go-ahead pipe.
    go_ahead: OwnedFd,
}

/// Makes the output, status and go-ahead pipes and the program's stdin (a
/// pipe, or `/dev/null` as the placeholder init replaces with the sandbox's
/// own), all close-on-exec.
fn make_pipes(stdin: StdinSource) -> Result<(ParentEnds, ChildEnds), SetupError> {
    let (stdout_r, stdout_w) = pipe2(OFlag::O_CLOEXEC).map_err(nix_prep("pipe2(stdout)"))?;
    let (stderr_r, stderr_w) = pipe2(OFlag::O_CLOEXEC).map_err(nix_prep("pipe2(stderr)"))?;
    let (status_r, status_w) = pipe2(OFlag::O_CLOEXEC).map_err(nix_prep("pipe2(status)"))?;
    let (go_ahead_r, go_ahead_w) = pipe2(OFlag::O_CLOEXEC).map_err(nix_prep("pipe2(go-ahead)"))?;
    let (stdin_child, stdin_parent) = match stdin {
        StdinSource::Null => (
            open(
                "/dev/null",
                OFlag::O_RDONLY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(nix_prep("open(/dev/null)"))?,
            None,
        ),
        StdinSource::Pipe => {
            let (r, w) = pipe2(OFlag::O_CLOEXEC).map_err(nix_prep("pipe2(stdin)"))?;
            (r, Some(w))
        }
    };
    let parent = ParentEnds {
        stdout: stdout_r,
        stderr: stderr_r,
        status: status_r,
        go_ahead: go_ahead_w,
        stdin: stdin_parent,
    };
    let child = ChildEnds {
        stdio: [stdin_child, stdout_w, stderr_w],
        status: status_w,
        go_ahead: go_ahead_r,
    };
    Ok((parent, child))
}

/// With cgroup limits, the sandbox's cgroups — from `pool` when given, else
/// made now — and their `tasks` files, opened for init to join; with
/// rlimits, none. Cgroups whose files cannot be opened are removed.
fn cgroups_for(
    order: &LaunchOrder,
    pool: Option<&mut CgroupPool>,
) -> Result<(Option<SpawnCgroup>, Vec<OwnedFd>), SetupError> {
    let cgroup = match &order.limits_via {
        LimitsVia::CgroupV1(roots) => {
            let name = || format!("{}-{}", std::process::id(), unique());
            let (memory, processes) = (order.limits.max_memory_bytes, order.limits.max_processes);
            let made = match pool {
                Some(pool) => pool.take(roots, name, memory, processes),
                None => SpawnCgroup::create(roots, &name(), memory, processes),
            };
            Some(made.map_err(prep("create cgroups"))?)
        }
        LimitsVia::CgroupV2(base) => {
            let name = format!("{}-{}", std::process::id(), unique());
            let (memory, processes) = (order.limits.max_memory_bytes, order.limits.max_processes);
            let made = SpawnCgroup::create_v2(base, &name, memory, processes);
            Some(made.map_err(prep("create the cgroup"))?)
        }
        LimitsVia::Rlimits => None,
    };
    let cgroup_tasks = match &cgroup {
        Some(cg) => cg
            .open_tasks()
            .map_err(prep("open the cgroups' tasks files")),
        None => Ok(Vec::new()),
    };
    match cgroup_tasks {
        Ok(fds) => Ok((cgroup, fds)),
        Err(e) => {
            if let Some(cg) = cgroup {
                cg.remove();
            }
            Err(e)
        }
    }
}

/// Hands the order and `handover` to `spare`: its init's pid, and whether
/// its ids are mapped already (it was prepared for this identity). `None`
/// when there is no spare, or it was prepared for someone else, the
/// descriptors do not fit one frame, or it died: the spare is then dropped
/// (killed and reaped) and the sandbox is cloned now.
fn deliver_to_spare(
    order: &LaunchOrder,
    handover: &Handover,
    spare: Option<Spare>,
) -> Option<(i32, bool)> {
    let me = (order.uid, order.gid, order.privileged);
    let fits = handover.fds().len() <= MAX_FRAME_FDS;
    let spare = spare.filter(|b| fits && b.fits(me, &order.spec.mounts));
    spare.and_then(|spare| match spare.deliver(order, handover) {
        Ok(()) => {
            let mapped = spare.mapped_for().is_some();
            Some((spare.into_pid(), mapped))
        }
        Err(_) => None,
    })
}

/// Clones init into the sandbox's namespaces. The child closes its copies
/// of the parent's ends and runs `setup`, never returning; the parent gets
/// init's pid and keeps its ends.
fn clone_init(setup: ChildSetup<'_>, parent: ParentEnds) -> std::io::Result<(i32, ParentEnds)> {
    let pid = clone_process(NAMESPACES)?;
    if pid == 0 {
        drop(parent);
        init_main(setup);
    }
    Ok((pid, parent))
}

/// The first go-ahead: init's ids are mapped (unless a spare's were
/// already), and one byte lets it build its root (and move itself into its
/// cgroups) while the caller commits the audit record. If either fails, the
/// sandbox is aborted.
fn first_go_ahead(
    running: LocalSandbox,
    order: &LaunchOrder,
    mapped: bool,
) -> Result<Launched, SetupError> {
    let maps = match mapped {
        true => Ok(()),
        false => write_id_maps(running.init_pid, order.uid, order.gid, order.privileged),
    };
    let building = maps.and_then(|()| go_ahead(&running.go_ahead, GoAhead::BuildRoot));
    match building {
        Ok(()) => {
            let mut running = running;
            running.mapped_at = std::time::Instant::now();
            Ok(Launched {
                sandbox: Some(running),
                answers: None,
            })
        }
        Err(e) => Err(abort(running, e)),
    }
}

/// A `unix_sockets` entry bound by itself must be a socket: the grant binds
/// the path read-only, and must not become a way to bind anything else.
fn check_sockets_are_sockets(spec: &SandboxSpec, scopes: &[ScopeId]) -> Result<(), SetupError> {
    for rule in &spec.landlock {
        let (super::spec::Access::UnixSocket, Some(i)) = (rule.access, rule.scope) else {
            continue;
        };
        let Some(scope) = scopes.get(i) else { continue };
        let st = nix::sys::stat::fstat(&scope.pinned)
            .map_err(nix_prep(format!("fstat({})", rule.path.display())))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(SetupError::new(
                Step::Prepare,
                format!(
                    "unix_sockets entry {} is not a socket; list only sockets there",
                    rule.path.display()
                ),
                std::io::Error::from_raw_os_error(libc::ENOTSOCK),
            ));
        }
    }
    Ok(())
}

/// The error for a failed `clone` into the sandbox's namespaces, with a hint
/// when user namespaces look unavailable.
pub(super) fn clone_failed(e: std::io::Error) -> SetupError {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::ENOSPC) | Some(libc::EUSERS) => " — user namespaces look unavailable: check sysctl user.max_user_namespaces (and kernel.unprivileged_userns_clone / AppArmor's userns restriction); `spawnd health` shows what this kernel offers",
        _ => "",
    };
    SetupError::new(Step::Clone, format!("clone(new namespaces){hint}"), e)
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
