//! X: exec and identity: setuid binaries and programs
//! outside the scopes. The executed program's credentials are read from
//! /proc/<pid>/status after it exits and before it is reaped, so the verdict
//! does not depend on what the program prints.

use libc::{EACCES, ENOENT, EPERM};

use crate::child::{run_program, Program, ProgramRun};
use crate::report::{Args, Findings, UsageError, Verdict};
use crate::sys::{self, ProcStatus};

/// Refusals of an exec: denied by noexec/Landlock/seccomp, or not visible.
const EXEC_DENIED: &[i32] = &[EACCES, EPERM, ENOENT];

/// Executes `PATH -u` and checks whether it gained root or capabilities.
pub fn setuid_binary(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let path = args.required(0, "PATH")?;
    let own = ProcStatus::read("self").unwrap_or_default();
    let own_euid = sys::geteuid();
    let own_caps = own.cap("CapEff").unwrap_or(0) | own.cap("CapPrm").unwrap_or(0);
    let mut findings = Findings::new();
    let what = format!("execve({path} -u)");
    let run = match run_program(Program::Path(path), &[path, "-u"]) {
        Ok(run) => run,
        Err(e) => return Ok(Verdict::unclear(format!("fork for {what}: {e}"))),
    };
    let ProgramRun {
        exec,
        stdout,
        exit,
        creds,
    } = run;
    if let Err(e) = exec {
        findings.check(&what, Err(e), EXEC_DENIED);
        return Ok(findings.verdict());
    }
    let printed = String::from_utf8_lossy(&stdout).trim().to_string();
    findings.note(format!(
        "{what}: ran ({exit}), printed {printed:?}; probe euid {own_euid}, caps {own_caps:#x}"
    ));
    match creds {
        Some(creds) => {
            let euid = creds.euid();
            let caps = creds.cap("CapEff").unwrap_or(0) | creds.cap("CapPrm").unwrap_or(0);
            let gained_root = euid == Some(0) && own_euid != 0;
            let gained_caps = caps & !own_caps != 0;
            let seen = format!("its uids {:?}, caps {caps:#x}", creds.uids);
            if gained_root || gained_caps {
                findings.escaped(format!("{seen}: gained privilege"));
            } else {
                findings.refused(format!("{seen}: no privilege gained"));
            }
        }
        None => match printed.parse::<u32>() {
            Ok(0) if own_euid != 0 => findings.escaped("printed euid 0: became root"),
            Ok(euid) if euid == own_euid && own_euid != 0 => findings.refused("euid unchanged"),
            _ => findings
                .unclear("could not read its credentials, and its output does not settle it"),
        },
    }
    Ok(findings.verdict())
}

/// Executes a program outside the scopes.
pub fn exec_outside(args: &Args<'_>) -> Result<Verdict, UsageError> {
    let path = args.required(0, "PATH")?;
    let mut argv: Vec<&str> = vec![path];
    argv.extend(args.rest(1).iter().map(String::as_str));
    let what = format!("execve({path})");
    let mut findings = Findings::new();
    match run_program(Program::Path(path), &argv) {
        Ok(ProgramRun {
            exec: Ok(()), exit, ..
        }) => findings.escaped(format!("{what}: ran ({exit})")),
        Ok(ProgramRun { exec: Err(e), .. }) => findings.check(&what, Err(e), EXEC_DENIED),
        Err(e) => findings.unclear(format!("fork for {what}: {e}")),
    }
    Ok(findings.verdict())
}
