//! The parent's side of starting a sandbox: create missing write scopes, open
//! every scope once (O_PATH), make the pipes, compile nothing in the child —
//! then `clone` into fresh user, mount, pid, network, ipc and uts namespaces,
//! write the child's uid/gid maps, put it in its cgroups, and release it.
//! Must be called from a single-threaded process (the CLI, or the spawner).

use std::fs::File;
use std::os::fd::OwnedFd;

use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::pipe2;

use super::cgroup::{SpawnCgroup, V1Roots};
use super::child::{init_main, ChildSetup};
use super::prepare::{
    create_write_scopes, env_entries, identify_scope, is_script, nix_prep, prep, rlimits,
    to_cstrings, write_id_maps,
};
use super::seccomp::Filter;
use super::spec::SandboxSpec;
use super::sys::clone_process;
use super::StepError;
use crate::plan::SpawnPlan;

/// How memory and process counts are limited.
#[derive(Debug, Clone)]
pub enum LimitsVia {
    /// cgroup v1 `memory` and `pids` controllers.
    CgroupV1(V1Roots),
    /// `RLIMIT_AS` and `RLIMIT_NPROC`.
    Rlimits,
}

impl LimitsVia {
    /// The name recorded in results and audit.
    pub fn name(&self) -> &'static str {
        match self {
            LimitsVia::CgroupV1(_) => "cgroup_v1",
            LimitsVia::Rlimits => "rlimits",
        }
    }
}

/// Where the child's stdin comes from.
pub enum StdinSource {
    /// `/dev/null`.
    Null,
    /// A regular file, handed over as is (read-only).
    File(File),
    /// Bytes spawnd writes into a pipe (its own stdin, or request bytes).
    Pipe,
}

/// Everything needed to start one sandboxed program.
pub struct LaunchRequest<'a> {
    /// The gate's plan.
    pub plan: &'a SpawnPlan,
    /// The decided sandbox.
    pub spec: &'a SandboxSpec,
    /// The program file the gate hashed.
    pub program: File,
    /// Its stdin.
    pub stdin: StdinSource,
    /// Identity inside (same numbers outside).
    pub uid: u32,
    /// Group inside.
    pub gid: u32,
    /// Whether spawnd has CAP_SETUID/CAP_SETGID (root): maps more than itself.
    pub privileged: bool,
    /// Landlock ABI to enforce.
    pub landlock_abi: u32,
    /// The compiled seccomp filter.
    pub seccomp: &'a Filter,
    /// Memory/process limit mechanism.
    pub limits_via: LimitsVia,
    /// Values for credential keys (read by the caller from the operator's binding).
    pub credentials: Vec<(String, crate::vault::Secret)>,
}

/// A started sandbox, as the supervisor sees it.
pub struct Running {
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
    /// The sync pipe's write end, held open for the sandbox's lifetime: init
    /// checks it after changing uid to learn whether spawnd is still alive.
    pub parent_alive: OwnedFd,
    /// When `clone` was called.
    pub cloned_at: std::time::Instant,
    /// When the child was released (ids mapped, cgroups joined).
    pub released_at: std::time::Instant,
}

/// The namespaces every sandbox gets at clone time (cgroup is unshared once inside its cgroup).
const NAMESPACES: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS;

/// Starts the sandbox. Nothing of the program runs before every layer is in place.
pub fn launch(req: LaunchRequest<'_>) -> Result<Running, StepError> {
    ensure_single_threaded()?;
    create_write_scopes(req.spec, req.uid, req.gid)?;
    let scopes = req
        .spec
        .scopes
        .iter()
        .map(|p| identify_scope(p))
        .collect::<Result<Vec<_>, _>>()?;
    let (stdout_r, stdout_w) = pipe2(OFlag::O_CLOEXEC).map_err(nix_prep("pipe2(stdout)"))?;
    let (stderr_r, stderr_w) = pipe2(OFlag::O_CLOEXEC).map_err(nix_prep("pipe2(stderr)"))?;
    let (status_r, status_w) = pipe2(OFlag::O_CLOEXEC).map_err(nix_prep("pipe2(status)"))?;
    let (sync_r, sync_w) = pipe2(OFlag::O_CLOEXEC).map_err(nix_prep("pipe2(sync)"))?;
    let (stdin_child, stdin_parent) = match req.stdin {
        StdinSource::Null => (
            open(
                "/dev/null",
                OFlag::O_RDONLY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(nix_prep("open(/dev/null)"))?,
            None,
        ),
        StdinSource::File(f) => (OwnedFd::from(f), None),
        StdinSource::Pipe => {
            let (r, w) = pipe2(OFlag::O_CLOEXEC).map_err(nix_prep("pipe2(stdin)"))?;
            (r, Some(w))
        }
    };
    let script = is_script(&req.program);
    let setup = ChildSetup {
        spec: req.spec,
        scopes,
        program: OwnedFd::from(req.program),
        script,
        argv: to_cstrings(req.plan.argv.iter().map(String::as_bytes))?,
        envp: env_entries(req.plan, &req.credentials)?,
        stdio: [stdin_child, stdout_w, stderr_w],
        sync: sync_r,
        status: status_w,
        uid: req.uid,
        gid: req.gid,
        may_setgroups: req.privileged,
        landlock_abi: req.landlock_abi,
        seccomp: &req.seccomp.instructions,
        rlimits: rlimits(req.plan, &req.limits_via),
    };
    let cgroup = match &req.limits_via {
        LimitsVia::CgroupV1(roots) => Some(
            SpawnCgroup::create(
                roots,
                &format!("{}-{}", std::process::id(), unique()),
                req.plan.limits.max_memory_bytes,
                req.plan.limits.max_processes,
            )
            .map_err(prep("create cgroups"))?,
        ),
        LimitsVia::Rlimits => None,
    };
    let cloned_at = std::time::Instant::now();
    let pid = clone_process(NAMESPACES).map_err(|e| {
        let hint = match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::ENOSPC) | Some(libc::EUSERS) => " — user namespaces look unavailable: check sysctl user.max_user_namespaces (and kernel.unprivileged_userns_clone / AppArmor's userns restriction); `spawnd health` shows what this kernel offers",
            _ => "",
        };
        StepError::new(format!("clone(new user, mount, pid, net, ipc, uts namespaces){hint}"), e)
    })?;
    if pid == 0 {
        drop((stdout_r, stderr_r, status_r, sync_w, stdin_parent));
        init_main(setup);
    }
    drop(setup);
    let release = || -> Result<(), StepError> {
        write_id_maps(pid, req.uid, req.gid, req.privileged)?;
        // First go-ahead: the child builds its root while we move it into its
        // cgroups (a v1 move can wait for an RCU grace period); the second one
        // lets it fork the program, which must start inside them.
        nix::unistd::write(&sync_w, b"m").map_err(nix_prep("release the child"))?;
        if let Some(cg) = &cgroup {
            cg.add(pid).map_err(prep("join cgroups"))?;
        }
        nix::unistd::write(&sync_w, b"c").map_err(nix_prep("release the program"))?;
        Ok(())
    };
    if let Err(mut e) = release() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        if let Some(cg) = cgroup {
            cg.remove();
        }
        // The child may have failed first: its own report names the real cause.
        let mut report = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = nix::unistd::read(&status_r, &mut buf) {
            report.extend_from_slice(&buf[..n]);
        }
        if let Some(text) = report.strip_prefix(b"E") {
            let text = String::from_utf8_lossy(text).trim_end().to_string();
            e = StepError::new(text, std::io::Error::other("reported by the sandbox"));
        }
        return Err(e);
    }
    let released_at = std::time::Instant::now();
    Ok(Running {
        init_pid: pid,
        stdout: stdout_r,
        stderr: stderr_r,
        status: status_r,
        stdin: stdin_parent,
        cgroup,
        parent_alive: sync_w,
        cloned_at,
        released_at,
    })
}

/// The child of a multi-threaded process may deadlock on a lock another thread
/// held at `clone` (allocator, stdio), and `unshare(CLONE_NEWUSER)` fails there:
/// refuse rather than risk it. The daemon launches from its single-threaded spawner.
fn ensure_single_threaded() -> Result<(), StepError> {
    let status =
        std::fs::read_to_string("/proc/self/status").map_err(prep("read /proc/self/status"))?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse::<u32>().ok())
        .unwrap_or(0);
    if threads != 1 {
        return Err(StepError::new(
            format!("launch from a process with {threads} threads"),
            std::io::Error::from_raw_os_error(libc::EDEADLK),
        ));
    }
    Ok(())
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
