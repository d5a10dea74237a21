//! `spawnd run`: the gate, then the sandbox, then supervision, in this process
//! (single-threaded, so cloning is safe). Without `--json` the child's output
//! streams live and spawnd exits with the child's code (128+N after signal N,
//! 124 after a timeout); spawnd's own messages go to stderr prefixed `spawnd:`.

use std::io::Read;
use std::path::Path;

use serde_json::json;

use super::args::{Cli, RunArgs};
use super::check::{decide_with, prepare, Prepared};
use super::output::{Failure, Success};
use super::run_audit::{exit_record_lost, open_audit, record_denial, record_exit, write_exit};
use super::run_launch::{Identity, Launching};
use super::run_report::{report, Ran};
use crate::audit::{events, Kind, Unsynced};
use crate::manifest::ScopePath;
use crate::plan::{EnvSource, SpawnPlan};
use crate::policy::Access;
use crate::policy::Decision;
use crate::probe::LANDLOCK_ABI_REQUIRED;
use crate::program::ProgramOpener;
use crate::sandbox::as_caller::CallerCreds;
use crate::sandbox::cgroup::sweep_stale_now_and_then;
use crate::sandbox::launch::{LaunchRequest, LimitsVia, StdinSource};
use crate::sandbox::seccomp::{filter_for, FilterOptions};
use crate::sandbox::spec::{build_spec, HostKind};
use crate::sandbox::sys::landlock_abi_version;
use crate::spawner::Spawner;
use crate::supervise::{supervise_to_report, Leaving, Supervision};
use crate::supervise::{LiveOutput, Terminal};
use crate::vault::{read_secret, Secret};
use std::os::fd::OwnedFd;

/// `spawnd run`.
pub fn run(cli: &Cli, args: &RunArgs) -> Result<Success, Failure> {
    if let Some(socket) = &args.socket {
        return super::remote::run_remote(cli, args, socket);
    }
    // Forked first, while this process has one thread, as the daemon does.
    let spawner = match args.via_spawner {
        true => Some(
            Spawner::start()
                .map_err(|e| Failure::new(5, format!("spawner: {e}; nothing was run")))?,
        ),
        false => None,
    };
    let prepared = prepare(cli, args)?;
    let (stdin, pump) = stdin_source(args.stdin_file.as_deref())?;
    execute(Execution {
        prepared: &prepared,
        access: &Access::Local,
        stdin,
        pump,
        timeout_ms: args.timeout,
        live: (!cli.json).then(|| Box::new(Terminal) as Box<dyn LiveOutput + Send>),
        json: cli.json,
        spawner: spawner.as_ref(),
        on_started: None,
        signals_end_the_run: true,
    })
}

/// One spawn of a prepared request, start to end: the gate, the audit
/// records, the sandbox (made here, or by a spawner) and its supervision.
/// `spawnd run` and the daemon both go through it.
pub(crate) struct Execution<'a> {
    /// Config, manifest, caller and request.
    pub prepared: &'a Prepared,
    /// Who may act for which connector.
    pub access: &'a Access,
    /// The child's stdin.
    pub stdin: StdinSource,
    /// What feeds a stdin pipe.
    pub pump: Pump,
    /// A tighter wall time than the manifest's.
    pub timeout_ms: Option<u64>,
    /// Where output goes as it arrives.
    pub live: Option<Box<dyn LiveOutput + Send>>,
    /// Whether the result is for a machine (no text rendering).
    pub json: bool,
    /// Launch through this spawner instead of in this process.
    pub spawner: Option<&'a Spawner>,
    /// Called once the program has started: its audit id and a pidfd for its init.
    pub on_started: Option<OnStarted<'a>>,
    /// SIGINT/SIGTERM/SIGHUP to this process kill the sandbox (`run`, not the daemon).
    pub signals_end_the_run: bool,
}

/// Told the audit id and a pidfd for init once a program has started.
pub(crate) type OnStarted<'a> = Box<dyn FnOnce(&str, Option<OwnedFd>) + Send + 'a>;

/// Runs an [`Execution`] to its result, exit record durable, init reaped.
/// The exit record goes to disk first, while the kernel tears init's
/// namespaces down on another core; waiting for init before the flush would
/// put the two in a row.
pub(crate) fn execute(x: Execution<'_>) -> Result<Success, Failure> {
    let Ended {
        mut result,
        exit_record,
        leaving,
    } = execute_until_written(x);
    if let Some(Err(e)) = exit_record.map(Unsynced::commit) {
        match result.as_mut() {
            Ok(s) => exit_record_lost(s, &e),
            Err(_) => eprintln!(
                "spawnd: the exit record could not be written either: {}",
                crate::printable::printable(&e.to_string())
            ),
        }
    }
    if let Some(leaving) = leaving {
        reap(leaving);
    }
    result
}

fn reap(leaving: Leaving<'_>) {
    if let Err(e) = leaving.reap() {
        tracing::warn!("reaping the sandbox's init: {e}");
    }
}

/// An [`Execution`] whose program has ended and whose exit record is written.
pub(crate) struct Ended<'a> {
    /// What to report (its `audit_id` names the records).
    pub result: Result<Success, Failure>,
    /// The exit record of a program that ran, in the log and chained but not
    /// yet known to be on disk: commit it before relying on the trail. (Every
    /// other exit record — setup failed, sandbox lost — has been flushed
    /// already, and a failure to write or flush it is in `result`.)
    pub exit_record: Option<Unsynced>,
    /// Init, maybe still leaving (the kernel tearing its namespaces down):
    /// the caller reaps it, after handing the result on if it likes.
    pub leaving: Option<Leaving<'a>>,
}

/// Runs an [`Execution`] until its exit record is written (not yet flushed).
pub(crate) fn execute_until_written(x: Execution<'_>) -> Ended<'_> {
    let mut leaving = None;
    let mut exit_record = None;
    let result = execute_inner(x, &mut leaving, &mut exit_record);
    Ended {
        result,
        exit_record,
        leaving,
    }
}

/// Init, still leaving once its exit is written, is handed back in
/// `leaving_out` for the caller to reap, and the unflushed exit record of a
/// program that ran in `exit_out`.
fn execute_inner<'a>(
    x: Execution<'a>,
    leaving_out: &mut Option<Leaving<'a>>,
    exit_out: &mut Option<Unsynced>,
) -> Result<Success, Failure> {
    let started = std::time::Instant::now();
    let prepared = x.prepared;
    let identity = Identity::choose(prepared);
    let audit = open_audit(&prepared.config)?;
    let mut opener = ProgramOpener::default();
    let mut plan = match decide_with(prepared, &mut opener, x.access) {
        Decision::Allowed(plan) => plan,
        Decision::Denied(denial) => {
            return Err(record_denial(
                &audit,
                denial,
                &prepared.caller,
                &prepared.request,
            ))
        }
    };
    if let Some(t) = x.timeout_ms {
        plan.limits.wall_time_ms = plan.limits.wall_time_ms.min(t);
    }
    let gated = started.elapsed();
    // Allowed, but it cannot be started (a missing kernel layer, a bad
    // scope, …): still on record, as its decision and an exit saying why
    // nothing ran.
    let unstarted = |failure: Failure| -> Failure {
        let planned = json!({ "not_started": failure.message });
        match audit.append(
            Kind::Decision,
            None,
            events::decision(&plan, &prepared.caller, &planned),
        ) {
            Ok(decided) => record_exit(
                &audit,
                &decided.audit_id,
                &prepared.caller,
                Err(("setup_failed", failure)),
            )
            .err()
            .unwrap_or_else(|| Failure::new(10, "an unstarted spawn reported success")),
            Err(e) => Failure::new(
                5,
                format!(
                    "audit unavailable: {e}; and nothing was run: {}",
                    failure.message
                ),
            ),
        }
    };
    let landlock_abi = landlock_abi_version().unwrap_or(0);
    let required = prepared
        .config
        .sandbox
        .landlock_min_abi
        .max(LANDLOCK_ABI_REQUIRED);
    if landlock_abi < required {
        return Err(unstarted(Failure::new(5, format!("spawn_sandbox_unavailable: this kernel offers Landlock ABI {landlock_abi} and spawnd requires at least {required} ([sandbox] landlock_min_abi); enable Landlock (lsm=…,landlock) or lower the requirement — nothing was run"))));
    }
    let spec = build_spec(&plan, &prepared.config.sandbox.system_paths, &host_kind)
        .map_err(|e| unstarted(Failure::config(e.to_string())))?;
    let credentials = read_credentials(prepared, &plan)
        .map_err(|d| record_denial(&audit, d, &prepared.caller, &prepared.request))?;
    // Kept (in wiped memory) to redact the values from the output.
    let redact: Vec<(String, Secret)> = credentials
        .iter()
        .map(|(k, v)| (k.clone(), Secret::new(v.expose().to_vec())))
        .collect();
    let home = &prepared.caller.home;
    let declared = ScopePath::parse(&plan.program.declared)
        .map(|p| p.expand(home))
        .map_err(|e| unstarted(Failure::new(10, e.to_string())))?;
    let program = opener
        .take(&declared)
        .ok_or_else(|| unstarted(Failure::new(10, "the program opened by the gate was lost")))?;
    // Unix sockets where the manifest grants socket paths; SysV IPC objects
    // where spawnd, as root, writes the sandbox's IPC limits; memfds where a
    // memory cgroup counts them.
    let options = FilterOptions::for_spawn(
        !plan.fs.unix_sockets.is_empty(),
        identity.privileged,
        matches!(identity.limits_via, LimitsVia::CgroupV1(_)),
    );
    let filter = filter_for(options)
        .map_err(|e| unstarted(Failure::new(10, format!("seccomp filter: {e}"))))?;
    let (stdin, pump) = (x.stdin, x.pump);
    let request = LaunchRequest {
        plan: &plan,
        spec: &spec,
        program: program.file,
        stdin,
        uid: identity.uid,
        gid: identity.gid,
        privileged: identity.privileged,
        landlock_abi,
        seccomp: filter,
        limits_via: identity.limits_via.clone(),
        credentials,
        // SPEC §4: as root acting for another user, scopes are checked as that user.
        check_as: (identity.privileged && prepared.caller.uid != 0)
            .then(|| CallerCreds::of(prepared.caller.uid, prepared.caller.gid)),
    };
    for missing in &spec.missing_read_scopes {
        if !x.json {
            let what = match plan.fs.unix_sockets.contains(missing) {
                true => "unix socket",
                false => "fs_read scope",
            };
            eprintln!(
                "spawnd: {what} {} does not exist; left out",
                crate::printable::printable(&missing.display().to_string())
            );
        }
    }
    let prepared_sandbox = started.elapsed();
    let planned = json!({
        "namespaces": ["user", "mount", "pid", "network", "ipc", "uts", "cgroup"],
        "landlock_abi": landlock_abi,
        "seccomp_filter": filter.id(),
        "limits_via": identity.limits_via.name(),
        "uid": identity.uid,
        "gid": identity.gid,
        "missing_read_scopes": spec.missing_read_scopes,
    });
    // The decision is written first (nothing on the host changes before it
    // is), then made durable while the sandbox builds its root; the program
    // starts only once the record is on disk, and if it cannot get there the
    // sandbox is dropped (killed) with nothing run.
    let written = audit
        .write(
            Kind::Decision,
            None,
            events::decision(&plan, &prepared.caller, &planned),
        )
        .map_err(|e| Failure::new(5, format!("audit unavailable: {e}; nothing was run")))?;
    // The launch goes first (a clone here, or an order to the spawner), the
    // flush right after it: the disk works while the sandbox builds its root,
    // and starting the write-back does not hold the launch up.
    let mut launching = Launching::begin(request, x.spawner);
    written.start_flush();
    // Stale cgroups (a `kill -9`'d spawnd's) are swept here, beside the
    // sandbox building its root; the spawner sweeps its own way.
    if let (None, LimitsVia::CgroupV1(roots)) = (x.spawner, &identity.limits_via) {
        sweep_stale_now_and_then(roots);
    }
    launching.open_cgroup_readings();
    let committing = std::time::Instant::now();
    let decided = written
        .commit()
        .map_err(|e| Failure::new(5, format!("audit unavailable: {e}; nothing was run")))?;
    let audit_commit = committing.elapsed();
    // Another spawn's record (the daemon's threads) failed to flush while
    // this one was gated: a flush error is reported once per open file, so
    // this commit may have succeeded over a hole. Nothing starts (the
    // sandbox is dropped).
    if let Some(why) = crate::audit::group_sync::stopped_by_a_failed_sync() {
        return record_exit(
            &audit,
            &decided.audit_id,
            &prepared.caller,
            Err(("setup_failed", Failure::new(5, why))),
        );
    }
    tracing::info!(audit_id = %decided.audit_id, connector = %plan.connector, op = %plan.op, sha256 = %plan.program.sha256, "spawn allowed");
    let running = match launching.start_program() {
        Ok((running, pidfd)) => {
            if let Some(f) = x.on_started {
                f(&decided.audit_id, pidfd);
            }
            running
        }
        Err(e) => {
            let failure = Failure::new(5, format!("sandbox setup failed: {e}; nothing was run"));
            return record_exit(
                &audit,
                &decided.audit_id,
                &prepared.caller,
                Err(("setup_failed", failure)),
            );
        }
    };
    let supervision = Supervision {
        stdout_cap: plan.limits.max_stdout_bytes,
        stderr_cap: plan.limits.max_stderr_bytes,
        wall_time: std::time::Duration::from_millis(plan.limits.wall_time_ms),
        live: x.live,
        stdin: pump,
        redact,
        signals_end_the_run: x.signals_end_the_run,
    };
    let (outcome, leaving) = match supervise_to_report(running, supervision) {
        Ok(ended) => ended,
        Err(e) => {
            // Lost after the program started (its spawner died, say): the
            // sandbox is gone, and the exit record says what happened.
            let failure = Failure::new(
                5,
                format!("the sandbox was lost while its program ran: {e}; it was killed"),
            );
            return record_exit(
                &audit,
                &decided.audit_id,
                &prepared.caller,
                Err(("failed", failure)),
            );
        }
    };
    tracing::debug!(
        connector = %plan.connector,
        op = %plan.op,
        gate_us = gated.as_micros() as u64,
        clone_us = outcome.phases.clone_and_release_us,
        audit_commit_us = audit_commit.as_micros() as u64,
        setup_us = outcome.phases.sandbox_setup_us,
        program_us = outcome.phases.program_us,
        teardown_us = outcome.phases.teardown_us,
        "sandbox finished"
    );
    let timings = json!({
        "gate_us": gated.as_micros() as u64,
        "spec_and_filter_us": (prepared_sandbox - gated).as_micros() as u64,
        "audit_commit_us": audit_commit.as_micros() as u64,
        "phases": outcome.phases,
    });
    let reported = report(
        x.json,
        Ran {
            plan: &plan,
            spec: &spec,
            id: &identity,
            filter,
            outcome,
            timings,
        },
    );
    // Recorded while the kernel still tears the namespaces down; the caller
    // reaps init (and removes its cgroups) afterwards.
    let reported = reported.map_err(|f| ("setup_failed", f));
    *leaving_out = leaving;
    let (result, written) = write_exit(&audit, &decided.audit_id, &prepared.caller, reported);
    *exit_out = written;
    result
}

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

/// The values of the plan's credential keys, from the operator's bindings. A
/// missing or unreadable binding is a denial (`binding_required`,
/// `invalid_credentials`) naming the connector and the key.
fn read_credentials(
    p: &Prepared,
    plan: &SpawnPlan,
) -> Result<Vec<(String, Secret)>, Box<crate::policy::Denial>> {
    use crate::policy::{Denial, Reason};
    let mut out = Vec::new();
    for entry in plan
        .env
        .iter()
        .filter(|e| e.source == EnvSource::Credential)
    {
        let requested = format!("credential:{}", entry.key);
        let binding = p.config.binding_for(&p.manifest.connector.name, &entry.key);
        let Some(binding) = binding else {
            return Err(Denial::new(
                Reason::BindingRequired,
                &plan.connector,
                requested,
                Vec::new(),
                format!(
                    "{} has no credential bound for {}; add a [[credentials]] binding to the operator config",
                    plan.connector, entry.key
                ),
            ));
        };
        let secret = read_secret(&binding.source).map_err(|e| {
            Denial::new(
                Reason::InvalidCredentials,
                &plan.connector,
                requested.clone(),
                // The kind of source only: its path or helper arguments stay
                // with the operator.
                vec![format!(
                    "binding:{}",
                    binding.source.to_string().split(':').next().unwrap_or("")
                )],
                format!("{} key {}: {e}", plan.connector, entry.key),
            )
        })?;
        out.push((entry.key.clone(), secret));
    }
    Ok(out)
}

/// What feeds a stdin pipe.
pub(crate) type Pump = Option<Box<dyn Read + Send>>;

fn stdin_source(path: Option<&Path>) -> Result<(StdinSource, Pump), Failure> {
    match path {
        None => Ok((StdinSource::Null, None)),
        Some(p) if p.as_os_str() == "-" => {
            Ok((StdinSource::Pipe, Some(Box::new(std::io::stdin()))))
        }
        Some(p) => {
            // O_NONBLOCK: opening a FIFO with no writer must not hang spawnd
            // before any time limit applies; reads go through the feeder thread.
            use std::os::unix::fs::OpenOptionsExt;
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(p);
            let file = opened
                .and_then(|f| {
                    let flags = nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_GETFL)
                        .map_err(std::io::Error::from)?;
                    let blocking = nix::fcntl::OFlag::from_bits_truncate(flags)
                        & !nix::fcntl::OFlag::O_NONBLOCK;
                    nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_SETFL(blocking))
                        .map_err(std::io::Error::from)?;
                    Ok(f)
                })
                .map_err(|e| {
                    Failure::new(
                        if e.kind() == std::io::ErrorKind::NotFound {
                            6
                        } else {
                            2
                        },
                        format!("--stdin-file {}: {e}", p.display()),
                    )
                })?;
            // Copied through a pipe, whatever it is (a regular file, a tty, a
            // fifo): the child never holds the host file's descriptor, through
            // which it could change the file's mode or times (docs/sandbox.md).
            Ok((StdinSource::Pipe, Some(Box::new(file))))
        }
    }
}
