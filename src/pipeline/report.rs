//! The result of a spawn: the `data` object of docs/cli.md (exit, signal,
//! timing, what isolation was applied, each stream as text or base64 with its
//! byte counts and sha256), the notices a person reading it should see, and
//! the exit code (the child's, 128+N after signal N, 124 after the wall time).

use serde_json::json;

use super::launching::Identity;
use super::notice::{Notice, OnNotice};
use crate::failure::{Failure, Success};
use crate::plan::{ExecPlan, GrantedAs, SpawnPlan};
use crate::sandbox::spec::{Access, SandboxSpec};
use crate::spawn_result::{
    ExecutableFile, Execute, Isolation, Landlock, NetworkReport, ProgramRun, Seccomp, SpawnResult,
    StreamOutput, Timings, TraceReport,
};
use crate::supervise::{Captured, Ending, Outcome};

/// Everything known about a finished run, for the report.
pub(super) struct Ran<'a> {
    /// Who ended the program from outside, when no signal to spawnd did.
    pub(super) ended_by: Option<&'static str>,
    pub(super) plan: &'a SpawnPlan,
    pub(super) spec: &'a SandboxSpec,
    pub(super) id: &'a Identity,
    pub(super) filter: &'a crate::sandbox::seccomp::Filter,
    pub(super) outcome: Outcome,
    pub(super) timings: Timings,
    /// What the relay reported, for a spawn with network grants.
    pub(super) network: Option<NetworkReport>,
    /// What the tracer saw, for a traced run.
    pub(super) trace: Option<TraceReport>,
}

fn stream_output(c: &Captured) -> StreamOutput {
    StreamOutput::of(
        &c.kept,
        c.total,
        c.truncated,
        c.sha256.to_string(),
        c.redactions,
    )
}

fn isolation(
    plan: &SpawnPlan,
    spec: &SandboxSpec,
    id: &Identity,
    filter: &crate::sandbox::seccomp::Filter,
    o: &Outcome,
) -> Isolation {
    let landlock = o.landlock.as_ref().map(|a| Landlock {
        abi: a.abi,
        status: "fully_enforced".into(),
        abstract_unix_and_signal_scoped: a.scoped,
        execute: execute(plan, spec),
    });
    let made = match &o.landlock {
        Some(a) if a.netns_of_spare => "fresh, made ahead of the request",
        _ => "fresh, made at clone",
    };
    let network_namespace = match plan.network_learning {
        Some(learning) => format!(
            "{made}; loopback, and any name on any TCP port through spawnd's learning relay ({})",
            learning.as_str()
        ),
        None if plan.network.is_empty() => format!("{made}; loopback only"),
        None => {
            format!("{made}; loopback, and the granted host:port pairs through spawnd's relay")
        }
    };
    let namespaces = ["user", "mount", "pid", "network", "ipc", "uts", "cgroup"];
    Isolation {
        namespaces: namespaces.map(String::from).to_vec(),
        root: "fresh tmpfs, pivot_root, read-only".into(),
        network_namespace,
        landlock,
        seccomp: Seccomp {
            filter: filter.id(),
            instructions: filter.len(),
            arch: crate::sandbox::seccomp::Arch::NATIVE.name().into(),
        },
        no_new_privs: true,
        capabilities: "none (all sets and the bounding set empty)".into(),
        uid: id.uid,
        gid: id.gid,
        limits_via: id.limits_via.name().into(),
        limits: plan.limits,
        missing_read_scopes: spec.missing_read_scopes.clone(),
        created_write_scopes: spec.create_write_scopes.clone(),
        idmapped: idmapped(spec, o),
        cwd: spec.cwd.clone(),
        fresh_cwd: spec.fresh_cwd,
        tmpfs: super::starting::tmpfs_of(spec),
    }
}

/// The write scopes mounted idmapped (docs/sandbox.md, "Write scopes of a
/// root caller"), by path, as init reported them.
fn idmapped(spec: &SandboxSpec, o: &Outcome) -> Vec<std::path::PathBuf> {
    o.landlock
        .iter()
        .flat_map(|a| a.idmapped.iter())
        .filter_map(|&i| spec.scopes.get(i as usize))
        .cloned()
        .collect()
}

/// What Landlock lets the program execute, for an auditor: under
/// `exec = "declared"` every file granted (the program first) and why;
/// under the default, the directories whose files may run.
fn execute(plan: &SpawnPlan, spec: &SandboxSpec) -> Execute {
    match &plan.exec {
        ExecPlan::Declared { files } => {
            let program = ExecutableFile {
                path: plan.program.resolved.clone(),
                granted_as: GrantedAs::Program,
                sha256: plan.program.sha256.to_string(),
            };
            let mut listed = vec![program];
            listed.extend(
                files
                    .iter()
                    .filter(|f| f.path != plan.program.resolved)
                    .map(|f| ExecutableFile {
                        path: f.path.clone(),
                        granted_as: f.granted_as,
                        sha256: f.sha256.to_string(),
                    }),
            );
            Execute::Declared {
                limited_to: "declared programs: no directory grants execution, only these files"
                    .into(),
                count: listed.len(),
                files: listed,
            }
        }
        ExecPlan::Scopes => Execute::Scopes {
            directories: spec
                .landlock
                .iter()
                .filter(|r| matches!(r.access, Access::ReadExec | Access::ReadWriteExec))
                .map(|r| r.path.clone())
                .collect(),
        },
    }
}

pub(super) fn report(
    json: bool,
    ran: Ran<'_>,
    on_notice: OnNotice<'_>,
) -> Result<Concluded, Failure> {
    let Ran {
        ended_by,
        plan,
        spec,
        id,
        filter,
        outcome: o,
        timings,
        network,
        trace,
    } = ran;
    crate::metrics::spawn_ended(&plan.connector, outcome_counted(&o));
    let (exit_code, signal) = match &o.ending {
        Ending::SetupFailed(why) => {
            return Err(Failure::sandbox_unavailable(format!(
            "spawn_sandbox_unavailable: sandbox setup failed: {why}; nothing of the program ran"
        )))
        }
        Ending::Exited(c) => (Some(*c), None),
        Ending::Signaled(s) => (None, Some(*s)),
    };
    let signal_name = signal
        .and_then(|s| nix::sys::signal::Signal::try_from(s).ok())
        .map(|s| s.as_str());
    // `on_violation = "terminate"`: the relay killed the sandbox.
    let killed_for_violation = network.as_ref().is_some_and(|n| n.violation.is_some());
    let interrupted_by = match killed_for_violation {
        true => Some(NETWORK_VIOLATION.to_string()),
        false => interrupted_by(o.interrupted_by, ended_by),
    };
    let result = SpawnResult {
        exit_code,
        signal,
        signal_name: signal_name.map(String::from),
        timed_out: o.timed_out,
        interrupted_by,
        duration_ms: o.duration.as_millis() as u64,
        cpu_ms: o.cpu_ms,
        peak_memory_bytes: o.peak_memory_bytes,
        oom_killed: o.oom_killed,
        sandbox_pid: o.sandbox_pid,
        connector: plan.connector.clone(),
        op: plan.op.clone(),
        program: ProgramRun {
            declared: plan.program.declared.clone(),
            resolved: plan.program.resolved.clone(),
            sha256: plan.program.sha256.to_string(),
            pinned: plan.program.pinned,
        },
        argv_shape: plan.argv_shape.clone(),
        isolation: isolation(plan, spec, id, filter, &o),
        timings,
        stdout: stream_output(&o.stdout),
        stderr: stream_output(&o.stderr),
        network,
        trace,
        audit_id: None,
        audit_error: None,
        failed_on_refusal: None,
    };
    Ok(conclude(json, result, on_notice))
}

/// How `spawnd_spawns_total` counts a run that ended.
fn outcome_counted(o: &Outcome) -> crate::metrics::Outcome {
    use crate::metrics::Outcome as Counted;
    match o.ending {
        Ending::SetupFailed(_) => Counted::SetupFailed,
        _ if o.timed_out || o.interrupted_by.is_some() => Counted::Killed,
        Ending::Signaled(_) => Counted::Killed,
        Ending::Exited(0) => Counted::Succeeded,
        Ending::Exited(_) => Counted::Failed,
    }
}

/// `interrupted_by` of a sandbox killed at its first refused egress
/// (`on_violation = "terminate"`).
pub(super) const NETWORK_VIOLATION: &str = "network_violation";

/// The exit code of a run ended for a refused egress: the gate's denial's.
const EXIT_DENIED: i32 = 3;

/// Who interrupted the program: the signal that interrupted spawnd
/// (`SIGINT`, `SIGTERM`, `SIGHUP`), else what ended it from outside
/// (`spawn_kill`, `spawn_release`, `disconnect`, `shutdown`), else no one.
fn interrupted_by(signal: Option<i32>, ended_by: Option<&'static str>) -> Option<String> {
    match signal {
        Some(sig) => Some(
            nix::sys::signal::Signal::try_from(sig)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {sig}")),
        ),
        None => ended_by.map(String::from),
    }
}

/// The signal number of an `interrupted_by` that names a signal to
/// spawnd, for its exit code (128 + N).
pub(crate) fn interrupting_signal(result: &SpawnResult) -> Option<i32> {
    signal_named(result.interrupted_by.as_deref()?)
}

/// The number of the signal `name` names (`SIGINT`), if it names one.
fn signal_named(name: &str) -> Option<i32> {
    name.parse::<nix::sys::signal::Signal>()
        .ok()
        .map(|s| s as i32)
}

/// The exit code a run's result stands for (the child's code, 128+N after
/// signal N, 124 after the wall time); for a human reader (not `json`),
/// `on_notice` is told what the result says went wrong. In-process `run` and
/// `run --socket` end here alike.
/// A spawn's result as the pipeline ends it: the typed result, the exit
/// code a front end reports, and whether `ok` stays true with it.
#[derive(Debug, Clone)]
pub struct Concluded {
    /// The result (its `audit_id` names the records once they are written).
    pub result: SpawnResult,
    /// The exit code: the program's, or what spawnd made of its end.
    pub exit: i32,
    /// `ok: true` despite a non-zero exit: the program ran, whatever its code.
    pub keep_ok: bool,
}

impl Concluded {
    /// As a front end's envelope carries it: the result as `data`.
    pub(crate) fn into_success(self) -> Success {
        let mut success = Success::new(&self.result, String::new());
        success.exit = self.exit;
        success.keep_ok = self.keep_ok;
        success
    }
}

pub(crate) fn conclude(json: bool, result: SpawnResult, on_notice: OnNotice<'_>) -> Concluded {
    let signal_to_spawnd = result.interrupted_by.as_deref().and_then(signal_named);
    let exit = match (
        signal_to_spawnd,
        result.timed_out,
        result.exit_code,
        result.signal,
    ) {
        (Some(sig), _, _, _) => 128 + sig,
        (None, true, _, _) => 124,
        (None, false, Some(c), _) => c,
        (None, false, None, Some(s)) => 128 + s,
        _ => 10,
    };
    // Killed for a refused egress: a denial, whatever the program did.
    let violation = result.violation();
    let exit = match violation {
        Some(_) => EXIT_DENIED,
        None => exit,
    };
    if !json {
        for (name, c) in [("stdout", &result.stdout), ("stderr", &result.stderr)] {
            if c.truncated {
                on_notice(Notice::Truncated {
                    stream: name,
                    kept: json!(c.bytes),
                    total: json!(c.total_bytes),
                });
            }
        }
        let limits = &result.isolation.limits;
        if result.timed_out {
            on_notice(Notice::TimedOut {
                wall_time_ms: json!(limits.wall_time_ms),
            });
        }
        if result.oom_killed {
            on_notice(Notice::OutOfMemory {
                max_memory_bytes: json!(limits.max_memory_bytes),
            });
        }
        if let Some(network) = &result.network {
            for refused in network_refusals(network) {
                on_notice(refused);
            }
        }
        if let Some(violation) = violation {
            on_notice(Notice::NetworkViolation {
                requested: violation.requested.clone(),
                reason: violation.reason.clone(),
            });
        }
        if let Some(trace) = &result.trace {
            tell_refusals(trace, on_notice);
        }
        if exit != 0 {
            tell_likely_walls(&result, on_notice);
        }
    }
    // The child ran, but its exit record could not be written: that is the
    // audit unavailable (5), whatever the child's code, here and through a daemon.
    if let (Some(error), false) = (&result.audit_error, json) {
        on_notice(Notice::ExitRecordLost {
            error: error.clone(),
        });
    }
    let audit_failed = result.audit_error.is_some();
    let denied = violation.is_some();
    Concluded {
        exit: if audit_failed { 5 } else { exit },
        keep_ok: !audit_failed && !denied,
        result,
    }
}

/// Every network egress spawnd refused the program, from a result's
/// `network` object: each refused destination with its count, reason and
/// what would grant it, then each DNS name refused. Empty when nothing was
/// refused (or the spawn had no network).
pub(crate) fn network_refusals(network: &NetworkReport) -> Vec<Notice> {
    let mut refused = Vec::new();
    for r in &network.refusals {
        let (host, port) = (r.host.as_str(), r.port);
        let (what, grant) = match r.protocol.as_str() {
            "udp" => (
                format!("{host}:{port}/udp"),
                "nothing: UDP leaves a sandbox only as DNS to spawnd's stub (grants are TCP)"
                    .to_string(),
            ),
            "other" => (
                format!(
                    "{host} (IP protocol {})",
                    r.ip_protocol.map_or("null".to_string(), |n| n.to_string())
                ),
                "nothing: only TCP to granted destinations and DNS to spawnd's stub leave a sandbox, without IP options or IPv6 extension headers".to_string(),
            ),
            _ => (
                format!("{host}:{port}"),
                what_would_grant(&r.reason, host, &port.to_string()),
            ),
        };
        refused.push(Notice::NetworkRefused {
            what,
            count: r.count,
            reason: r.reason.clone(),
            grant,
        });
    }
    // Refused after the dial (the first flight: SNI, a malformed
    // ClientHello): listed one by one within the budget, counted by
    // destination past it.
    let mut dialed: Vec<(String, String, u64)> = Vec::new();
    for c in &network.listed {
        if !c.allowed && c.dialed.is_some() {
            let what = format!("{}:{}", c.host, c.port);
            let reason = c.reason.clone().unwrap_or_else(|| "refused".to_string());
            match dialed
                .iter_mut()
                .find(|(w, r, _)| *w == what && *r == reason)
            {
                Some(seen) => seen.2 += 1,
                None => dialed.push((what, reason, 1)),
            }
        }
    }
    for (what, reason, count) in dialed {
        let (host, port) = what.rsplit_once(':').unwrap_or((&what, "?"));
        refused.push(Notice::NetworkRefused {
            grant: what_would_grant(&reason, host, port),
            what,
            count,
            reason,
        });
    }
    for c in &network.connections_unreported {
        if c.refused > 0 {
            refused.push(Notice::NetworkRefused {
                what: format!("{}:{}", c.host, c.port),
                count: c.refused,
                reason: "refused after the dial".into(),
                grant: "the audit log's exit record counts them; the first of each kind has a net record".into(),
            });
        }
    }
    if network.refusals_unreported > 0 {
        refused.push(Notice::NetworkRefused {
            what: "other destinations".into(),
            count: network.refusals_unreported,
            reason: "of other kinds".into(),
            grant: "the audit log's net records list them".into(),
        });
    }
    for d in &network.dns_refused {
        let name = &d.name;
        refused.push(Notice::NetworkRefused {
            what: format!("DNS {name} ({})", d.record_type),
            count: 1,
            reason: crate::relay::reason::NOT_GRANTED.into(),
            grant: format!("grant \"{name}:PORT\" in the manifest's network"),
        });
    }
    if network.dns_refused_more > 0 {
        refused.push(Notice::NetworkRefused {
            what: "other DNS names".into(),
            count: network.dns_refused_more,
            reason: crate::relay::reason::NOT_GRANTED.into(),
            grant: "the audit log's net records list them".into(),
        });
    }
    refused
}

/// What would let a refused connection to `host:port` through, by the
/// refusal's reason (docs/network.md lists them).
fn what_would_grant(reason: &str, host: &str, port: &str) -> String {
    use crate::relay::reason;
    match reason {
        reason::NOT_GRANTED => format!("grant \"{host}:{port}\" in the manifest's network"),
        reason::TOO_MANY_CONNECTIONS => {
            "the operator's [network] max_connections_per_spawn, or connections_share through a daemon".into()
        }
        reason::RESOLVED_TO_DENIED_ADDRESS | reason::DENIED_ADDRESS => {
            "the operator's [network] allow_cidrs, for a private range; loopback, link-local, metadata and the host's own addresses only by a grant of the address itself".into()
        }
        reason::SNI_MISMATCH | reason::SNI_MISSING => format!(
            "the TLS client must name {host} as its server (SNI); grant the name it asked for instead, if that one is meant"
        ),
        reason::MALFORMED_CLIENT_HELLO | reason::FIRST_FLIGHT_TIMEOUT => {
            "a TLS client that sends a well-formed ClientHello naming the granted server".into()
        }
        reason::RECORD_ONLY => {
            "learning in record mode refuses every connection; `spawnd learn --net forward` relays them, and the draft grants what it saw".into()
        }
        _ => "docs/network.md explains the reason".into(),
    }
}

/// What a failed program's stderr suggests: an allocation the rlimits
/// refused (they fail it, where a cgroup would kill and say so), or a wall
/// of the sandbox an untraced run cannot name.
fn tell_likely_walls(result: &SpawnResult, on_notice: OnNotice<'_>) {
    let stderr = result.stderr.text.as_deref().unwrap_or_default();
    let memory = [
        "Cannot allocate memory",
        "MemoryError",
        "out of memory",
        "Out of memory",
        "std::bad_alloc",
        "Failed to reserve",
    ];
    if result.isolation.limits_via == "rlimits" && memory.iter().any(|m| stderr.contains(m)) {
        on_notice(Notice::MemoryRefused {
            max_memory_bytes: json!(result.isolation.limits.max_memory_bytes),
        });
    }
    let walls = [
        "Permission denied",
        "No such file or directory",
        "Read-only file system",
        "Operation not permitted",
    ];
    if result.trace.is_none() && walls.iter().any(|w| stderr.contains(w)) {
        on_notice(Notice::TryTrace);
    }
}

/// Most refusals a person is shown one by one; `--json` has them all.
const REFUSALS_SHOWN: usize = 20;

/// A traced run's refusals, one notice each (the first
/// [`REFUSALS_SHOWN`]), and what the trace could not see.
fn tell_refusals(trace: &TraceReport, on_notice: OnNotice<'_>) {
    let refusals = &trace.refusals;
    for r in refusals.iter().take(REFUSALS_SHOWN) {
        on_notice(Notice::Refused {
            line: super::refusals::describe(r),
        });
    }
    if refusals.len() > REFUSALS_SHOWN {
        on_notice(Notice::Refused {
            line: format!(
                "{} more refusals (--json lists them all)",
                refusals.len() - REFUSALS_SHOWN
            ),
        });
    }
    if refusals.is_empty() {
        on_notice(Notice::Refused {
            line: "the trace saw no refusal by the sandbox".into(),
        });
    }
    if let Some(e) = &trace.error {
        on_notice(Notice::Refused {
            line: format!("tracing stopped early: {e}"),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Limits;
    use crate::spawn_result::Tmpfs;
    use crate::supervise::Phases;

    fn stream(text: &str) -> StreamOutput {
        StreamOutput::of(
            text.as_bytes(),
            text.len() as u64,
            false,
            "sha256:00".into(),
            0,
        )
    }

    /// A program that exited 0 with no output, under 1024 bytes of memory
    /// and 500 ms of wall time, limited by rlimits.
    fn ran() -> SpawnResult {
        let limits = Limits {
            max_memory_bytes: 1024,
            wall_time_ms: 500,
            ..Limits::default()
        };
        SpawnResult {
            exit_code: Some(0),
            signal: None,
            signal_name: None,
            timed_out: false,
            interrupted_by: None,
            duration_ms: 1,
            cpu_ms: 1,
            peak_memory_bytes: 1,
            oom_killed: false,
            sandbox_pid: 2,
            connector: "acme.tool".into(),
            op: "run".into(),
            program: ProgramRun {
                declared: "/bin/true".into(),
                resolved: "/bin/true".into(),
                sha256: "sha256:00".into(),
                pinned: false,
            },
            argv_shape: String::new(),
            isolation: Isolation {
                namespaces: vec![],
                root: String::new(),
                network_namespace: String::new(),
                landlock: None,
                seccomp: Seccomp {
                    filter: String::new(),
                    instructions: 0,
                    arch: String::new(),
                },
                no_new_privs: true,
                capabilities: String::new(),
                uid: 1,
                gid: 1,
                limits_via: "rlimits".into(),
                limits,
                missing_read_scopes: vec![],
                created_write_scopes: vec![],
                idmapped: vec![],
                cwd: "/".into(),
                fresh_cwd: true,
                tmpfs: Tmpfs {
                    tmp_bytes: 0,
                    tmp_exec: false,
                    dev_shm_bytes: 0,
                },
            },
            timings: Timings {
                gate_us: 0,
                spec_and_filter_us: 0,
                audit_commit_us: 0,
                phases: Phases::default(),
                process_us: None,
            },
            stdout: stream(""),
            stderr: stream(""),
            network: None,
            trace: None,
            audit_id: None,
            audit_error: None,
            failed_on_refusal: None,
        }
    }

    #[test]
    fn a_failed_program_whose_errors_read_like_walls_gets_a_hint() {
        let mut failed = ran();
        failed.exit_code = Some(1);
        failed.stderr = stream("x: Cannot allocate memory\nopen: Permission denied\n");
        let told = std::cell::RefCell::new(Vec::new());
        conclude(false, failed.clone(), &|n| told.borrow_mut().push(n));
        assert_eq!(
            told.take(),
            vec![
                Notice::MemoryRefused {
                    max_memory_bytes: json!(1024)
                },
                Notice::TryTrace
            ]
        );
        let mut ok = failed;
        ok.exit_code = Some(0);
        conclude(false, ok, &|n| told.borrow_mut().push(n));
        assert!(told.take().is_empty());
    }

    #[test]
    fn exit_codes_follow_the_child_and_an_unwritten_exit_record_is_5() {
        let code = |edit: &dyn Fn(&mut SpawnResult)| {
            let mut result = ran();
            edit(&mut result);
            conclude(true, result, &|_| {}).exit
        };
        assert_eq!(code(&|r| r.exit_code = Some(7)), 7);
        let signaled = |r: &mut SpawnResult, signal: i32| {
            r.exit_code = None;
            r.signal = Some(signal);
        };
        assert_eq!(code(&|r| signaled(r, 15)), 143);
        assert_eq!(
            code(&|r| {
                signaled(r, 9);
                r.timed_out = true;
            }),
            124
        );
        assert_eq!(
            code(&|r| {
                signaled(r, 9);
                r.interrupted_by = Some("SIGINT".into());
            }),
            130
        );
        // Ended from outside, not by a signal to spawnd: the program's own.
        assert_eq!(
            code(&|r| {
                signaled(r, 9);
                r.interrupted_by = Some("spawn_kill".into());
            }),
            137
        );
        let mut lost = ran();
        lost.audit_error = Some("No space left".into());
        let failed = conclude(true, lost, &|_| {});
        assert_eq!((failed.exit, failed.keep_ok), (5, false));
    }

    #[test]
    fn a_human_reader_is_told_what_went_wrong_and_a_machine_reader_nothing() {
        let mut result = ran();
        result.exit_code = None;
        result.signal = Some(9);
        result.timed_out = true;
        result.oom_killed = true;
        result.audit_error = Some("No space left".into());
        result.stdout = StreamOutput {
            truncated: true,
            total_bytes: 9,
            ..stream("abcd")
        };
        let told = std::cell::RefCell::new(Vec::new());
        conclude(false, result.clone(), &|n| told.borrow_mut().push(n));
        assert_eq!(
            told.take(),
            [
                Notice::Truncated {
                    stream: "stdout",
                    kept: json!(4),
                    total: json!(9)
                },
                Notice::TimedOut {
                    wall_time_ms: json!(500)
                },
                Notice::OutOfMemory {
                    max_memory_bytes: json!(1024)
                },
                Notice::ExitRecordLost {
                    error: "No space left".into()
                },
            ]
        );
        conclude(true, result, &|n| told.borrow_mut().push(n));
        assert_eq!(told.take(), []);
    }
}
