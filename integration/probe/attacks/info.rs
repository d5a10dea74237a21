//! Helpers the tests use to look inside: the environment and the identity the
//! program runs with. They attack nothing and always report "blocked"; the
//! detail is itself a JSON object (serialized into the detail string).

use std::ffi::CStr;

use serde_json::{json, Map, Value};

use crate::report::{Args, UsageError, Verdict};
use crate::sys::{self, ProcStatus};

/// The environment as a JSON object.
pub fn env_dump(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let env: Map<String, Value> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                Value::String(v.to_string_lossy().into_owned()),
            )
        })
        .collect();
    Ok(Verdict::blocked(Value::Object(env).to_string()))
}

fn hostname() -> Option<String> {
    // SAFETY: an all-zero utsname is a valid out-buffer.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid out-pointer.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return None;
    }
    // SAFETY: uname NUL-terminates nodename within its array.
    Some(
        unsafe { CStr::from_ptr(uts.nodename.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Who the program is, as a JSON object.
pub fn whoami(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let status = ProcStatus::read("self").unwrap_or_default();
    let caps: Map<String, Value> = status
        .caps
        .iter()
        .map(|(name, bits)| (name.clone(), Value::String(format!("{bits:016x}"))))
        .collect();
    // SAFETY: getppid has no preconditions and cannot fail.
    let ppid = unsafe { libc::getppid() };
    let detail = json!({
        "uid": status.uids,
        "gid": status.gids,
        "groups": status.groups,
        "caps": caps,
        "no_new_privs": status.no_new_privs,
        "seccomp": status.seccomp,
        "pid": sys::getpid(),
        "ppid": ppid,
        "cwd": std::env::current_dir().ok().map(|p| p.to_string_lossy().into_owned()),
        "hostname": hostname(),
    });
    Ok(Verdict::blocked(detail.to_string()))
}
