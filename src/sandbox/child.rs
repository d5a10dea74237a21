//! Inside the sandbox. The cloned child becomes pid 1 of the new pid
//! namespace and runs `init_main`: it waits for the parent to map its ids,
//! builds the root, drops privileges, applies Landlock and installs the
//! seccomp filter as the last step of its setup, then starts the program
//! (which inherits all of it) and stays as a tiny init that reaps every process and forwards SIGTERM,
//! SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the program. When the program ends, init kills what is
//! left, reports the wait status and exits — which ends the namespace.
//!
//! The program's own process — already under the filter, so even its last
//! steps are — sets up its descriptors, session and limits and executes the
//! hashed descriptor (or a `#!` script's sealed copy, by the script's path
//! where it is bound there). It is started the way `posix_spawn` starts a child
//! ([`crate::sys::start_program`]): it borrows init's memory until it
//! executes, so nothing of init's address space is copied only to be thrown
//! away by exec.
//! What init has to say goes to the parent over the status pipe
//! ([`super::status_pipe`]): a failed step, the layers in force, and at the
//! end the program's wait status and usage.

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};

use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::identity::{drop_bounding_set, drop_privileges_in_child, BoundingSetEmpty};
use super::landlock::{restrict_current_process, LandlockApplied};
use super::mounts::{finish_root_in_child, stage_base_in_child, ProgramFile, Rooted, Staged};
use super::network::{set_up_network_in_child, NetworkSetup};
use super::seccomp::SockFilter;
use super::spec::{MountStep, SandboxSpec};
use super::status_pipe::{self, Applied, ProgramEnded, SetupTimes, StatusKind};
use super::trace::hand_over_listener;
use super::{SetupError, Step};
use crate::sys::{
    adopt_fd, close_descriptor_range, close_descriptors_from, exit_immediately,
    install_seccomp_filter_on_current_thread, install_seccomp_filter_with_listener,
    replace_command_line, restore_every_default_action, set_loopback_up, start_program,
    wait_signal_with_sender, Execute, ProgramStart, StatusPipe,
};

/// Everything the child needs, prepared by the parent before `clone`.
pub(super) struct ChildSetup<'a> {
    /// The decided sandbox.
    pub spec: &'a SandboxSpec,
    /// The scopes as resolved by the parent, in `spec.scopes` order.
    pub scopes: Vec<ScopeId>,
    /// The hashed program.
    pub program: OwnedFd,
    /// Whether the program is a `#!` script run from its descriptor (which
    /// stays open as fd 3 for its interpreter). Init clears it when it runs
    /// the script by its path instead ([`run_script_by_its_path`]).
    pub script: bool,
    /// Whether `program` is the sealed copy of a program others than root
    /// may rewrite: it runs from that descriptor, never from a path.
    pub sealed: bool,
    /// Whether stdin is `/dev/null`: opened by init inside the sandbox
    /// ([`use_own_dev_null`]), `stdio[0]` being a placeholder until then.
    pub stdin_null: bool,
    /// argv, `argv[0]` included.
    pub argv: Vec<CString>,
    /// `KEY=VALUE` entries, exactly the plan's.
    pub envp: super::prepare::WipedCStrings,
    /// The child's stdin, stdout and stderr.
    pub stdio: [OwnedFd; 3],
    /// Read end of the parent's go-ahead pipe: one byte once the ids are mapped,
    /// one when the program may start (its audit record is on disk).
    pub go_ahead: OwnedFd,
    /// Write end of the status pipe.
    pub status: OwnedFd,
    /// The per-spawn cgroups' `tasks` files, opened by spawnd (empty with rlimits).
    pub cgroup_tasks: Vec<OwnedFd>,
    /// With network grants: what to set up, and the channel the listeners
    /// go to the parent over ([`super::network`]).
    pub network: Option<(&'a NetworkSetup, OwnedFd)>,
    /// With tracing: the channel init hands its seccomp listener over
    /// ([`super::trace`]).
    pub tracer: Option<OwnedFd>,
    /// Identity inside.
    pub uid: u32,
    /// Group inside.
    pub gid: u32,
    /// Whether `setgroups` is permitted in the new user namespace.
    pub may_setgroups: bool,
    /// Landlock ABI to enforce in full.
    pub landlock_abi: u32,
    /// The compiled seccomp filter.
    pub seccomp: &'a [SockFilter],
    /// Resource limits for the program: (resource, value).
    pub rlimits: Vec<(nix::sys::resource::Resource, u64)>,
    /// The namespaces were made before the request (a [`super::spare::Spare`]).
    pub made_ahead: bool,
    /// The shared part of the root, when a spare sandbox built it
    /// before its order came (or the error it met doing so).
    pub staged: Option<Result<Staged, SetupError>>,
    /// The bounding set, when a spare sandbox emptied it before its
    /// order came.
    pub bounding_emptied: Option<BoundingSetEmpty>,
}

/// A scope as the parent resolved it: where it is and what it is.
pub(super) struct ScopeId {
    /// Canonical path (symlinks resolved).
    pub canonical: std::path::PathBuf,
    /// Device of the resolved inode.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// The descriptor the scope was opened (and, as root for another user,
    /// checked) through, held until the child has re-opened and compared
    /// it: while it is open, no other file can take this inode number, so a
    /// matching device and inode is this very file.
    pub pinned: OwnedFd,
    /// A scope mounted idmapped ([`super::idmap`]): its mount tree,
    /// cloned detached from `pinned` and idmapped by the parent, which init
    /// moves onto the scope's target instead of binding the scope.
    pub idmapped: Option<OwnedFd>,
}

/// Signals init forwards to the program: spawnd's own SIGTERM at the wall
/// time, and those the daemon's `spawn_kill` may send (SIGKILL aside,
/// which ends the sandbox).
const FORWARDED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// The cloned child's entry point. Never returns.
pub(super) fn init_main(mut setup: ChildSetup<'_>) -> ! {
    let started = std::time::Instant::now();
    // A spare sandbox did these first thing, while it waited for its
    // order: not a moment at the spawner's raised priority (see
    // `priority`), and every signal action at its default.
    if !setup.made_ahead {
        if let Err(e) = super::priority::back_to_base().and_then(|()| default_signal_actions()) {
            status_pipe::send(&setup.status, &status_pipe::encode_failed(&e));
            exit_immediately(126)
        }
    }
    if let Err(e) = own_process_group() {
        status_pipe::send(&setup.status, &status_pipe::encode_failed(&e));
        exit_immediately(126)
    }
    // `/proc/1/cmdline` in the sandbox would show spawnd's own command line
    // (its config path, `--env` values): init's becomes its name alone.
    if let Err(e) = replace_command_line(b"spawnd-init") {
        status_pipe::send(
            &setup.status,
            &status_pipe::encode_failed(&SetupError::new(
                Step::Init,
                "replace the command line",
                e,
            )),
        );
        exit_immediately(126)
    }
    if let Err(e) = keep_only_own_descriptors(&mut setup) {
        status_pipe::send(&setup.status, &status_pipe::encode_failed(&e));
        exit_immediately(126)
    }
    match init_steps(&mut setup, started) {
        Ok(program_pid) => supervise_program(setup, program_pid),
        Err(e) => {
            status_pipe::send(&setup.status, &status_pipe::encode_failed(&e));
            exit_immediately(126)
        }
    }
}

/// Takes init out of the process group it was cloned in (spawnd's, which a
/// terminal's Ctrl-C signals as a whole) into one of its own. Init forwards
/// SIGINT to the program, so while it shared spawnd's group a Ctrl-C
/// reached the program as SIGINT before spawnd's own SIGTERM; alone in its
/// group it gets only what spawnd sends: SIGTERM and, after the grace,
/// SIGKILL. (The program has a session of its own, so a terminal reaches
/// it through init alone.) Done before init blocks the signals it forwards:
/// until then, pid 1 of a namespace with no handler drops them.
fn own_process_group() -> Result<(), SetupError> {
    nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0))
        .map_err(|e| SetupError::new(Step::Init, "setpgid(0, 0)", e.into()))
}

/// Puts every signal action back to its default, and blocks SIGPIPE. Init
/// needs no handler (it takes its signals with `sigwait`), so the program
/// inherits none and none ignored, without a reset of its own between clone
/// and exec; and the handlers Rust's runtime installed for SIGSEGV and SIGBUS
/// (stack overflow reports) go: with no handler, the kernel drops these
/// signals when a process of the sandbox sends them to its pid 1, so the
/// program cannot interrupt init (say, in the wait that precedes its report).
/// SIGPIPE is blocked rather than ignored (an ignored signal would survive
/// exec): a write to a closed pipe fails with EPIPE instead of killing init;
/// the program's mask is cleared before it executes.
pub(super) fn default_signal_actions() -> Result<(), SetupError> {
    restore_every_default_action()
        .map_err(|e| SetupError::new(Step::Init, "sigaction(SIG_DFL)", e))?;
    let mut pipe = SigSet::empty();
    pipe.add(Signal::SIGPIPE);
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&pipe), None)
        .map_err(|e| SetupError::new(Step::Init, "sigprocmask(block SIGPIPE)", e.into()))
}

/// The init process's setup, in order, timed from `started` (init's start
/// on its order); returns the program's pid.
fn init_steps(s: &mut ChildSetup<'_>, started: std::time::Instant) -> Result<Pid, SetupError> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| SetupError::new(Step::Init, "prctl(PR_SET_PDEATHSIG)", e.into()))?;
    join_own_cgroups(s)?;
    wait_for_go_ahead(&s.go_ahead)?;
    let (mut rooted, emptied) = build_root(s)?;
    // Still holding CAP_NET_ADMIN in its namespace, with `lo` up: routes
    // and listeners, handed to the parent before anything drops.
    if let Some((setup, channel)) = s.network.take() {
        set_up_network_in_child(setup, channel)?;
    }
    prepare_cwd(s)?;
    if s.stdin_null {
        use_own_dev_null(s)?;
    }
    if !s.script && !s.sealed {
        execute_from_the_sandbox(s)?;
    }
    let script_path = run_script_by_its_path(s, rooted.script_copy.take())?;
    take_the_programs_identity(s, emptied)?;
    let tracer = s.tracer.take();
    let applied = confine_init(s, rooted.scope_fds, tracer)?;
    let idmapped = rooted.idmapped;
    // Read under the filter, which allows `clock_gettime` (clocks and timers).
    let ready = std::time::Instant::now();
    // The second go-ahead: the program may start (spawnd has made its audit
    // record durable meanwhile). Without it — spawnd gone, or the sandbox
    // aborted — nothing runs.
    wait_for_go_ahead(&s.go_ahead)?;
    let times = SetupTimes {
        ready_us: micros(ready - started),
        release_wait_us: micros(ready.elapsed()),
    };
    reap_detach_helper(rooted.detaching)?;
    report_layers_in_force(s, &applied, times, idmapped);
    start_program_process(s, script_path.as_deref())
}

/// Moves init into its cgroups first, so everything after is counted, then
/// unshares the cgroup namespace, rooted there. The `tasks` files are
/// closed once joined.
fn join_own_cgroups(s: &mut ChildSetup<'_>) -> Result<(), SetupError> {
    for tasks in &s.cgroup_tasks {
        nix::unistd::write(tasks, b"0").map_err(|e| {
            SetupError::new(
                Step::Init,
                "join the cgroup (write 0 to its tasks or cgroup.procs)",
                e.into(),
            )
        })?;
    }
    s.cgroup_tasks.clear();
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP)
        .map_err(|e| SetupError::new(Step::Init, "unshare(CLONE_NEWCGROUP)", e.into()))
}

/// Builds the root (the staged base a spare sandbox made ahead, or made
/// now), pivots into it and lets go of the scopes' pins; returns it with
/// the proof that the bounding set is empty, emptied ahead or while the old
/// root detached (`None`: it was not). A spare sandbox has its loopback up and its
/// bounding set empty already; one launched now does both while the old
/// root is being detached (the kernel's work of a `SIOCSIFFLAGS` on a new
/// namespace's lo then overlaps the detach on the other core
/// instead of adding to it). Nothing that resolves a path goes there: until
/// the detach is done, the host's root is at the old root's mount point,
/// and a link the owner of a writable scope swaps in could lead a working
/// directory or a Landlock rule into it.
fn build_root(s: &mut ChildSetup<'_>) -> Result<(Rooted, Option<BoundingSetEmpty>), SetupError> {
    let (staged, prepared_ahead) = match s.staged.take() {
        Some(made_ahead) => (made_ahead?, true),
        None => (stage_and_name()?, false),
    };
    let mut emptied = s.bounding_emptied.take();
    let mut meanwhile = || {
        if !prepared_ahead {
            set_loopback_up().map_err(|e| SetupError::new(Step::Network, "bring lo up", e))?;
        }
        if emptied.is_none() {
            emptied = Some(drop_bounding_set()?);
        }
        Ok(())
    };
    let program = match (s.script, s.sealed) {
        (true, _) => ProgramFile::SealedScript(s.program.as_fd()),
        (false, true) => ProgramFile::SealedProgram(s.program.as_fd()),
        (false, false) => ProgramFile::Hashed(s.program.as_fd()),
    };
    let rooted = finish_root_in_child(staged, s.spec, &mut s.scopes, program, &mut meanwhile)?;
    // Verified and mounted: the pins are no longer needed.
    s.scopes.clear();
    Ok((rooted, emptied))
}

/// Drops every privilege and takes the program's uid and gid, once the
/// bounding set is empty. Changing uid clears the parent-death signal: it
/// is set again, and then init makes sure the parent did not die in between
/// (it holds the go-ahead pipe open until the end; when a spawner launched
/// the sandbox, a copy its caller holds can hide a dead spawner until the
/// program starts) — if it did, init exits.
fn take_the_programs_identity(
    s: &ChildSetup<'_>,
    emptied: Option<BoundingSetEmpty>,
) -> Result<(), SetupError> {
    let Some(emptied) = emptied else {
        return Err(SetupError::new(
            Step::Identity,
            "drop bounding set",
            std::io::Error::other("not done while the old root detached"),
        ));
    };
    drop_privileges_in_child(s.uid, s.gid, s.may_setgroups, emptied)?;
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| {
        SetupError::new(
            Step::Identity,
            "prctl(PR_SET_PDEATHSIG) after setresuid",
            e.into(),
        )
    })?;
    if parent_gone(&s.go_ahead) {
        exit_immediately(125);
    }
    Ok(())
}

/// Confines init as the program will be: Landlock on the verified scopes
/// (whose descriptors are closed then), and the seccomp filter as the last
/// step (a traced run's with a listener, handed to spawnd at once: the
/// program's first traced call, its own execution, waits for spawnd's
/// answer). Init shares the program's uid, so it is made non-dumpable first:
/// its /proc/1/{mem,fd,environ} stay closed to the program; and the same
/// filter binds init too, so it cannot be turned into an unfiltered helper.
/// Returns the Landlock layers in force.
fn confine_init(
    s: &ChildSetup<'_>,
    scope_fds: Vec<OwnedFd>,
    tracer: Option<OwnedFd>,
) -> Result<LandlockApplied, SetupError> {
    let applied = restrict_current_process(
        &s.spec.landlock,
        &scope_fds,
        (!s.script && !s.sealed).then(|| s.program.as_fd()),
        s.spec.executables.as_deref(),
        s.landlock_abi,
    )?;
    drop(scope_fds);
    nix::sys::prctl::set_dumpable(false)
        .map_err(|e| SetupError::new(Step::Identity, "prctl(PR_SET_DUMPABLE, 0)", e.into()))?;
    match tracer {
        None => install_seccomp_filter_on_current_thread(s.seccomp)
            .map_err(|e| SetupError::new(Step::Seccomp, "seccomp (init)", e))?,
        Some(channel) => {
            let listener = install_seccomp_filter_with_listener(s.seccomp)
                .map_err(|e| SetupError::new(Step::Seccomp, "seccomp with a listener (init)", e))?;
            hand_over_listener(listener, channel).map_err(|e| {
                SetupError::new(Step::Seccomp, "hand the seccomp listener to spawnd", e)
            })?;
        }
    }
    Ok(applied)
}

/// Reaps the old root's unmount helper (its detach is done by then, as a
/// rule), so nothing of it is left when the program starts: a program
/// started first could signal the helper (`kill(-1, 0)`; the escape suite's
/// T4 checks it cannot).
fn reap_detach_helper(detaching: Option<i32>) -> Result<(), SetupError> {
    if let Some(helper) = detaching {
        waitpid(Pid::from_raw(helper), Some(WaitPidFlag::__WALL))
            .map_err(|e| SetupError::new(Step::Root, "wait for the old root's detach", e.into()))?;
    }
    Ok(())
}

/// Tells the parent the layers in force: Landlock's, whether the
/// namespaces were made ahead (a spare sandbox), and which scopes (indices
/// into `spec.scopes`) were mounted idmapped; and init's `times` on its
/// setup (see [`SetupTimes`]). Sent once, just before the
/// program starts, so it also marks the end of the sandbox's setup.
fn report_layers_in_force(
    s: &ChildSetup<'_>,
    landlock: &LandlockApplied,
    times: SetupTimes,
    idmapped: Vec<u32>,
) {
    let layers = Applied {
        abi: landlock.abi,
        scoped: landlock.scoped,
        netns_of_spare: s.made_ahead,
        setup: Some(times),
        idmapped,
    };
    status_pipe::send(&s.status, &status_pipe::encode_layers(&layers));
}

/// A duration in whole µs, at most `u32::MAX` (71 minutes).
fn micros(d: std::time::Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// Starts the program's process ([`start_program`]) with the signals init
/// forwards, and SIGCHLD, blocked in init from now on: it takes them with
/// `sigwait` ([`supervise_program`]). The program is executed from its
/// descriptor, or by `script_path` for a script bound there. Returns the
/// program's pid.
fn start_program_process(
    s: &ChildSetup<'_>,
    script_path: Option<&std::ffi::CStr>,
) -> Result<Pid, SetupError> {
    let mut blocked = SigSet::empty();
    for sig in FORWARDED.iter().chain([&Signal::SIGCHLD]) {
        blocked.add(*sig);
    }
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&blocked), None)
        .map_err(|e| SetupError::new(Step::Exec, "sigprocmask", e.into()))?;
    let start = ProgramStart::new(
        &s.argv,
        &s.envp,
        [s.stdio[0].as_fd(), s.stdio[1].as_fd(), s.stdio[2].as_fd()],
        match script_path {
            Some(path) => Execute::Path(path),
            None => Execute::Descriptor {
                fd: s.program.as_fd(),
                script: s.script,
            },
        },
        StatusPipe {
            fd: s.status.as_fd(),
            failure_lead: [StatusKind::Failed.tag(), Step::Exec.byte()],
            step_end: status_pipe::FAILED_CALL_END,
        },
        &s.rlimits,
    );
    let pid =
        start_program(&start).map_err(|e| SetupError::new(Step::Exec, "start the program", e))?;
    Ok(Pid::from_raw(pid))
}

/// What every sandbox needs before its request is known, once its ids are
/// mapped: the staged root with /tmp, /dev and /proc and then `system` (the
/// system paths and small files the daemon's last request had,
/// [`super::spec::steps_mountable_ahead`]), its host name, its loopback
/// up, its bounding set empty. A spare sandbox does this while it
/// waits for its order.
pub(super) fn prepare_base(system: &[MountStep]) -> Result<(Staged, BoundingSetEmpty), SetupError> {
    let mut staged = stage_and_name()?;
    staged.mount_more(system)?;
    set_loopback_up().map_err(|e| SetupError::new(Step::Network, "bring lo up", e))?;
    let emptied = drop_bounding_set()?;
    Ok((staged, emptied))
}

/// The staged root with its shared steps, and the host name.
fn stage_and_name() -> Result<Staged, SetupError> {
    let staged = stage_base_in_child()?;
    nix::unistd::sethostname("spawnd")
        .map_err(|e| SetupError::new(Step::Root, "sethostname", e.into()))?;
    Ok(staged)
}

/// The program is executed from its path inside the sandbox — a system
/// path, or its own read-only bind ([`super::spec::MountKind::Program`]) —
/// rather than through the descriptor the parent opened on the host's
/// mount: there `/proc/self/exe` would be the host's file, whose mode and
/// times a program owning it could change. Only if that path holds the
/// very file the gate hashed (same device and inode); if the file was
/// replaced meanwhile, the hashed descriptor runs, as what was hashed must,
/// and the file it exposes is no longer at that path. A `#!` script runs
/// from its sealed copy instead ([`run_script_by_its_path`]).
fn execute_from_the_sandbox(s: &mut ChildSetup<'_>) -> Result<(), SetupError> {
    use nix::fcntl::{fcntl, open, FcntlArg, OFlag};
    let root = open(
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| SetupError::new(Step::Exec, "open the sandbox's root", e.into()))?;
    let rel = s.spec.program.strip_prefix("/").unwrap_or(&s.spec.program);
    let Ok(inside) = super::beneath::open_beneath(&root, rel, super::beneath::Create::Nothing)
    else {
        return Ok(());
    };
    let identity = |fd: std::os::fd::BorrowedFd<'_>| {
        nix::sys::stat::fstat(fd).map(|st| (st.st_dev, st.st_ino))
    };
    let hashed = identity(s.program.as_fd())
        .map_err(|e| SetupError::new(Step::Exec, "fstat(the program)", e.into()))?;
    if identity(inside.as_fd()).ok() != Some(hashed) {
        return Ok(());
    }
    let moved = fcntl(&inside, FcntlArg::F_DUPFD_CLOEXEC(FD_FLOOR))
        .map_err(|e| SetupError::new(Step::Exec, "move the program's descriptor", e.into()))?;
    s.program = adopt_fd(moved);
    Ok(())
}

/// A `#!` script whose sealed copy was bound at its path
/// ([`super::mounts`], `bind_script_copy`) is executed by that path, so its
/// interpreter is given the script's own path rather than `/dev/fd/3`; a
/// program's copy bound there (`bind_program_copy`) is executed through
/// the descriptor checked here, which names that path. The
/// path must hold that copy (same device and inode), opened beneath the
/// new root without following a link; the copy becomes the program's
/// descriptor, which gets its Landlock rule, and none stays open across
/// exec. Returns the path to execute; `None` (no copy bound) leaves the
/// script to run from its descriptor.
fn run_script_by_its_path(
    s: &mut ChildSetup<'_>,
    copy: Option<OwnedFd>,
) -> Result<Option<CString>, SetupError> {
    use nix::fcntl::{fcntl, open, FcntlArg, OFlag};
    use std::os::unix::ffi::OsStrExt;
    let Some(copy) = copy else {
        return Ok(None);
    };
    let shown = s.spec.program.display().to_string();
    let root = open(
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| SetupError::new(Step::Exec, "open the sandbox's root", e.into()))?;
    let rel = s.spec.program.strip_prefix("/").unwrap_or(&s.spec.program);
    let inside = super::beneath::open_beneath(&root, rel, super::beneath::Create::Nothing)?;
    let identity = |fd: std::os::fd::BorrowedFd<'_>| {
        nix::sys::stat::fstat(fd).map(|st| (st.st_dev, st.st_ino))
    };
    let bound = identity(copy.as_fd())
        .map_err(|e| SetupError::new(Step::Exec, "fstat(the script's copy)", e.into()))?;
    if identity(inside.as_fd()).ok() != Some(bound) {
        return Err(SetupError::new(
            Step::Exec,
            format!("the script's path {shown} does not hold its copy"),
            std::io::Error::from_raw_os_error(libc::ESTALE),
        ));
    }
    let path = CString::new(s.spec.program.as_os_str().as_bytes()).map_err(|_| {
        SetupError::new(
            Step::Exec,
            format!("the script's path {shown}"),
            std::io::Error::from_raw_os_error(libc::EINVAL),
        )
    })?;
    if s.sealed {
        // A program's copy: executed through the descriptor opened at its
        // path and checked above, which names that path on the read-only
        // bind (its `/proc/self/exe`), with its Landlock rule.
        let moved = fcntl(&inside, FcntlArg::F_DUPFD_CLOEXEC(FD_FLOOR))
            .map_err(|e| SetupError::new(Step::Exec, "move the program's copy", e.into()))?;
        s.program = adopt_fd(moved);
        s.sealed = false;
        return Ok(None);
    }
    let moved = fcntl(&copy, FcntlArg::F_DUPFD_CLOEXEC(FD_FLOOR))
        .map_err(|e| SetupError::new(Step::Exec, "move the script's copy", e.into()))?;
    s.program = adopt_fd(moved);
    s.script = false;
    Ok(Some(path))
}

/// The program's stdin becomes the sandbox's own `/dev/null`, a read-only
/// bind: the host's node, opened by the parent, would let the program
/// change the host inode's times through descriptor 0 (`futimens`). Moved
/// to [`FD_FLOOR`] or above like init's other descriptors.
fn use_own_dev_null(s: &mut ChildSetup<'_>) -> Result<(), SetupError> {
    use nix::fcntl::{fcntl, open, FcntlArg, OFlag};
    let opened = open(
        "/dev/null",
        OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| SetupError::new(Step::Exec, "open the sandbox's /dev/null", e.into()))?;
    let moved = fcntl(&opened, FcntlArg::F_DUPFD_CLOEXEC(FD_FLOOR))
        .map_err(|e| SetupError::new(Step::Exec, "move the sandbox's /dev/null", e.into()))?;
    s.stdio[0] = adopt_fd(moved);
    Ok(())
}

/// Lowest descriptor number init moves its own descriptors to, so that the
/// program's dup2 onto 0..=4 can never overwrite one it still needs.
const FD_FLOOR: i32 = 64;

/// Moves every descriptor init owns to `FD_FLOOR` and above, then closes all
/// others it inherited from spawnd (its stdio, anything spawnd's caller leaked).
fn keep_only_own_descriptors(s: &mut ChildSetup<'_>) -> Result<(), SetupError> {
    use nix::fcntl::{fcntl, FcntlArg};
    use std::os::fd::AsRawFd;
    let lift = |fd: &mut OwnedFd| -> Result<(), SetupError> {
        let raw = fcntl(&*fd, FcntlArg::F_DUPFD_CLOEXEC(FD_FLOOR))
            .map_err(|e| SetupError::new(Step::Init, "fcntl(F_DUPFD_CLOEXEC)", e.into()))?;
        *fd = adopt_fd(raw);
        Ok(())
    };
    for fd in s
        .stdio
        .iter_mut()
        .chain([&mut s.program, &mut s.go_ahead, &mut s.status])
        .chain(s.cgroup_tasks.iter_mut())
        .chain(s.network.iter_mut().map(|(_, channel)| channel))
        .chain(s.tracer.iter_mut())
        .chain(
            s.scopes
                .iter_mut()
                .flat_map(|scope| std::iter::once(&mut scope.pinned).chain(&mut scope.idmapped)),
        )
        .chain(s.staged.iter_mut().flatten().flat_map(Staged::fds_mut))
    {
        lift(fd)?;
    }
    let mut keep: Vec<u32> = s
        .stdio
        .iter()
        .chain([&s.program, &s.go_ahead, &s.status])
        .chain(s.cgroup_tasks.iter())
        .chain(s.network.iter().map(|(_, channel)| channel))
        .chain(s.tracer.iter())
        .chain(s.scopes.iter().map(|scope| &scope.pinned))
        .chain(s.scopes.iter().filter_map(|scope| scope.idmapped.as_ref()))
        .map(|fd| fd.as_raw_fd() as u32)
        .chain(
            s.staged
                .iter_mut()
                .flatten()
                .flat_map(Staged::fds_mut)
                .map(|fd| fd.as_raw_fd() as u32),
        )
        .collect();
    keep.sort_unstable();
    // Everything else — spawnd's stdio, anything spawnd's caller leaked — is
    // closed in a few calls: below the floor, between the kept ones, above them.
    let mut next = 0u32;
    for fd in keep {
        if fd > next {
            close_descriptor_range(next, fd - 1)
                .map_err(|e| SetupError::new(Step::Init, "close inherited descriptors", e))?;
        }
        next = fd + 1;
    }
    close_descriptors_from(next)
        .map_err(|e| SetupError::new(Step::Init, "close inherited descriptors", e))?;
    Ok(())
}

/// True when the parent's end of the go-ahead pipe is closed (spawnd is gone).
fn parent_gone(go_ahead: &OwnedFd) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(go_ahead.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0 && fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLHUP)))
}

fn wait_for_go_ahead(go_ahead: &OwnedFd) -> Result<(), SetupError> {
    let mut byte = [0u8; 1];
    match nix::unistd::read(go_ahead, &mut byte) {
        Ok(1) => Ok(()),
        Ok(_) => exit_immediately(125), // the parent went away before mapping us
        Err(e) => Err(SetupError::new(Step::Init, "read(go-ahead pipe)", e.into())),
    }
}

fn prepare_cwd(s: &ChildSetup<'_>) -> Result<(), SetupError> {
    if s.spec.fresh_cwd {
        // create_dir, not create_dir_all: it must be new (never someone's directory).
        std::fs::create_dir(&s.spec.cwd).map_err(|e| {
            SetupError::new(Step::Root, format!("mkdir {}", s.spec.cwd.display()), e)
        })?;
        nix::unistd::chown(
            &s.spec.cwd,
            Some(nix::unistd::Uid::from_raw(s.uid)),
            Some(nix::unistd::Gid::from_raw(s.gid)),
        )
        .map_err(|e| SetupError::new(Step::Root, "chown fresh cwd", e.into()))?;
    }
    nix::unistd::chdir(&s.spec.cwd).map_err(|e| {
        SetupError::new(
            Step::Root,
            format!("chdir({})", s.spec.cwd.display()),
            e.into(),
        )
    })
}

/// Init's loop: reap everything, forward signals, report the program's status.
fn supervise_program(s: ChildSetup<'_>, program: Pid) -> ! {
    let mut waited = SigSet::empty();
    for sig in FORWARDED.iter().chain([&Signal::SIGCHLD]) {
        waited.add(*sig);
    }
    // Whether a signal of spawnd's reached the program while it ran: a
    // program that ended before it did ended on its own, however close to
    // the wall time's deadline (the parent's SIGTERM may cross its exit).
    let mut forwarded = false;
    // Whether the program catches or ignores a signal passed on to it: if
    // none, a normal exit after one was its own (the signal, at its
    // default, would have ended it by that signal), even one that crossed
    // the signal between init's look at the program and the kill.
    let mut forwarded_is_handled = false;
    loop {
        let Some((number, sender)) = wait_signal_with_sender(&waited) else {
            continue;
        };
        let Ok(sig) = Signal::try_from(number) else {
            continue;
        };
        if sig != Signal::SIGCHLD {
            // Init acts for spawnd alone, outside the sandbox's pid
            // namespace (the sender it sees is 0): a signal the program
            // sends it (`kill(1, …)`) is dropped, never passed on.
            if sender != 0 {
                continue;
            }
            match waitpid(program, Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL)) {
                Ok(WaitStatus::Exited(_, code)) => finish(s, code << 8, !forwarded),
                Ok(WaitStatus::Signaled(_, sig, core)) => {
                    finish(s, sig as i32 | if core { 0x80 } else { 0 }, !forwarded)
                }
                _ => {}
            }
            forwarded_is_handled |= handles_signal(program, sig);
            forwarded = true;
            let _ = kill(program, sig);
            continue;
        }
        while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL)) {
            match status {
                WaitStatus::StillAlive => break,
                WaitStatus::Exited(pid, code) if pid == program => {
                    finish(s, code << 8, !forwarded || !forwarded_is_handled)
                }
                WaitStatus::Signaled(pid, sig, core) if pid == program => {
                    finish(s, sig as i32 | if core { 0x80 } else { 0 }, !forwarded)
                }
                _ => {}
            }
        }
    }
}

/// Whether `program` catches or ignores `sig` now, as its
/// `/proc/PID/status` says (`SigCgt`, `SigIgn`); true when that cannot be
/// read. Allocates nothing (init's loop): the path and the file are read
/// into buffers on the stack.
fn handles_signal(program: Pid, sig: Signal) -> bool {
    use nix::fcntl::{open, OFlag};
    let mut path = [0u8; 32];
    let mut len = 0;
    let mut push = |bytes: &[u8]| {
        for b in bytes {
            if len < path.len() {
                path[len] = *b;
                len += 1;
            }
        }
    };
    push(b"/proc/");
    let mut digits = [0u8; 10];
    let mut n = program.as_raw().unsigned_abs();
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || at == 0 {
            break;
        }
    }
    push(&digits[at..]);
    push(b"/status");
    let Ok(path) = std::ffi::CStr::from_bytes_until_nul(&path[..=len.min(path.len() - 1)]) else {
        return true;
    };
    let Ok(fd) = open(
        path,
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    ) else {
        return true;
    };
    let mut text = [0u8; 2048];
    let mut filled = 0;
    while filled < text.len() {
        match nix::unistd::read(&fd, &mut text[filled..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => filled += n,
        }
    }
    let bit = 1u64 << (sig as i32 - 1);
    let mask_of = |key: &[u8]| -> Option<u64> {
        let line = text[..filled]
            .split(|b| *b == b'\n')
            .find(|l| l.starts_with(key))?;
        let hex = std::str::from_utf8(&line[key.len()..]).ok()?.trim();
        u64::from_str_radix(hex, 16).ok()
    };
    match (mask_of(b"SigCgt:"), mask_of(b"SigIgn:")) {
        (Some(caught), Some(ignored)) => (caught | ignored) & bit != 0,
        _ => true,
    }
}

/// The program ended: kill what it left behind, report, and exit (ending the namespace).
fn finish(s: ChildSetup<'_>, raw_status: i32, on_its_own: bool) -> ! {
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    // Until ECHILD: an interrupted wait (EINTR) must not end the loop, or
    // the report could leave before every process is reaped.
    while let Ok(_) | Err(nix::errno::Errno::EINTR) = waitpid(None, Some(WaitPidFlag::__WALL)) {}
    // Everything is reaped: what the program's processes used, so spawnd
    // can record the exit while the kernel still tears the namespaces down.
    let (cpu_us, max_rss_kib) = nix::sys::resource::getrusage(
        nix::sys::resource::UsageWho::RUSAGE_CHILDREN,
    )
    .map_or((0, 0), |u| {
        let us = |t: nix::sys::time::TimeVal| {
            (t.tv_sec().max(0) as u64) * 1_000_000 + t.tv_usec().max(0) as u64
        };
        (
            us(u.user_time()) + us(u.system_time()),
            u.max_rss().max(0) as u64,
        )
    });
    let ended = status_pipe::encode_ended(&ProgramEnded {
        wait_status: raw_status,
        cpu_us,
        max_rss_kib,
        on_its_own,
    });
    // Init's own ends of the program's stdio go before the report: nothing in
    // the sandbox holds them any more, so spawnd sees the output end with the
    // report and need not wait for init's exit.
    let ChildSetup { stdio, status, .. } = s;
    drop(stdio);
    status_pipe::send(&status, &ended);
    exit_immediately(0)
}
