//! The result of a spawn as one type: the `data` object of `spawnd run
//! --json` (docs/cli.md, "The run result"), of the daemon's `spawn_status`
//! once the program ended, and the source of the audit log's exit record.
//! Built once by the report, serialized where the result leaves spawnd, and
//! deserialized where a front end reads one back (the CLI's remote path).
//! Every struct refuses fields it does not know, so the type and the wire
//! stay one (SPEC §10: fields are added, never renamed).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::manifest::Limits;
use crate::supervise::Phases;

/// A finished run: how the program ended, what it used, what isolation it
/// ran under, where the time went, and its two output streams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpawnResult {
    /// The program's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed the program, when one did.
    pub signal: Option<i32>,
    /// That signal's name (`SIGKILL`).
    pub signal_name: Option<String>,
    /// The wall time ran out.
    pub timed_out: bool,
    /// Who interrupted the program: a signal to spawnd (`SIGINT`), what
    /// ended it from outside (`spawn_kill`, `disconnect`…), or
    /// [`super::report::NETWORK_VIOLATION`].
    pub interrupted_by: Option<String>,
    /// From release to the end.
    pub duration_ms: u64,
    /// User and system CPU time of all the program's processes.
    pub cpu_ms: u64,
    /// Peak memory of the sandbox.
    pub peak_memory_bytes: u64,
    /// The cgroup's OOM killer acted.
    pub oom_killed: bool,
    /// The host pid of the sandbox's init.
    pub sandbox_pid: i32,
    /// The connector's FQN.
    pub connector: String,
    /// The operation run.
    pub op: String,
    /// The program executed.
    pub program: ProgramRun,
    /// The argv with its values shown by kind only.
    pub argv_shape: String,
    /// What confined the program.
    pub isolation: Isolation,
    /// Where the spawn's time went.
    pub timings: Timings,
    /// The program's stdout.
    pub stdout: StreamOutput,
    /// The program's stderr.
    pub stderr: StreamOutput,
    /// What the relay saw and refused, for a spawn with network grants or
    /// learning (docs/network.md); its shape is the relay's report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Value>,
    /// What the tracer saw, for a traced run (`--trace`, `learn`); its shape
    /// is the tracer's report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<Value>,
    /// The audit id of the spawn's decision record, which its exit record
    /// links to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_id: Option<String>,
    /// Why the exit record could not be written or made durable (the run
    /// exits 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_error: Option<String>,
    /// `run --fail-on-refusal` turned a clean exit into exit 7 for refused
    /// network egress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_on_refusal: Option<bool>,
}

/// The program as the gate opened it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgramRun {
    /// The path the manifest declares.
    pub declared: String,
    /// That path after symlinks.
    pub resolved: PathBuf,
    /// `sha256:<hex>` of the bytes run.
    pub sha256: String,
    /// The manifest pinned that hash.
    pub pinned: bool,
}

/// One output stream: the bytes kept (as `text` when they are UTF-8, else
/// `base64`), their count and hash, and what the cap dropped. Through the
/// daemon a result is held without the bytes (they live in the handle's
/// buffers), so `text` and `base64` may both be absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOutput {
    /// Bytes kept.
    pub bytes: u64,
    /// Bytes the program wrote.
    pub total_bytes: u64,
    /// Bytes were dropped past the cap.
    pub truncated: bool,
    /// `sha256:<hex>` of exactly the bytes kept.
    pub sha256: String,
    /// Credential values replaced by `[REDACTED:KEY]`.
    pub redactions: u64,
    /// The bytes kept, when they are UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The bytes kept, base64, when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
}

impl StreamOutput {
    /// A stream's counts and hash, and `kept` as text or base64.
    pub fn of(
        kept: &[u8],
        total_bytes: u64,
        truncated: bool,
        sha256: String,
        redactions: u64,
    ) -> Self {
        let (text, base64) = match std::str::from_utf8(kept) {
            Ok(text) => (Some(text.to_string()), None),
            Err(_) => (
                None,
                Some(base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    kept,
                )),
            ),
        };
        StreamOutput {
            bytes: kept.len() as u64,
            total_bytes,
            truncated,
            sha256,
            redactions,
            text,
            base64,
        }
    }
}

/// What isolation was applied (docs/sandbox.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Isolation {
    /// The namespaces the sandbox has of its own.
    pub namespaces: Vec<String>,
    /// How its root was made.
    pub root: String,
    /// The network namespace and what leaves it.
    pub network_namespace: String,
    /// Landlock as init reported it applied.
    pub landlock: Option<Landlock>,
    /// The seccomp filter.
    pub seccomp: Seccomp,
    /// `PR_SET_NO_NEW_PRIVS` is set.
    pub no_new_privs: bool,
    /// What capabilities the program holds.
    pub capabilities: String,
    /// The uid the program ran as.
    pub uid: u32,
    /// The gid the program ran as.
    pub gid: u32,
    /// `cgroup` or `rlimits`.
    pub limits_via: String,
    /// The limits applied.
    pub limits: Limits,
    /// Read scopes that did not exist, left out.
    pub missing_read_scopes: Vec<PathBuf>,
    /// Write scopes created for the spawn.
    pub created_write_scopes: Vec<PathBuf>,
    /// Write scopes mounted idmapped.
    pub idmapped: Vec<PathBuf>,
    /// The program's working directory.
    pub cwd: PathBuf,
    /// The working directory is a fresh, empty one.
    pub fresh_cwd: bool,
    /// The private tmpfs mounts.
    pub tmpfs: Tmpfs,
}

/// Landlock as applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Landlock {
    /// The ABI enforced.
    pub abi: u32,
    /// `fully_enforced`.
    pub status: String,
    /// Abstract unix sockets and signals are scoped to the sandbox.
    pub abstract_unix_and_signal_scoped: bool,
    /// What the program may execute.
    pub execute: Execute,
}

/// What Landlock lets the program execute, by the manifest's `exec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "snake_case", deny_unknown_fields)]
pub enum Execute {
    /// `exec = "declared"`: only these files.
    Declared {
        /// What that means, for a reader.
        limited_to: String,
        /// How many files.
        count: usize,
        /// Each file, the program first.
        files: Vec<ExecutableFile>,
    },
    /// The default: files under these directories.
    Scopes {
        /// The directories whose files may run.
        directories: Vec<PathBuf>,
    },
}

/// A file `exec = "declared"` lets the program execute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutableFile {
    /// Its path after symlinks.
    pub path: PathBuf,
    /// Why it may run.
    pub granted_as: crate::plan::GrantedAs,
    /// `sha256:<hex>` of its bytes when the gate read them.
    pub sha256: String,
}

/// The seccomp filter installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seccomp {
    /// The filter's id (a hash of its program).
    pub filter: String,
    /// Its length in BPF instructions.
    pub instructions: usize,
    /// The one architecture whose calls it admits; it kills all others.
    pub arch: String,
}

/// The private tmpfs mounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tmpfs {
    /// /tmp's size.
    pub tmp_bytes: u64,
    /// Files in /tmp may be executed.
    pub tmp_exec: bool,
    /// /dev/shm's size.
    pub dev_shm_bytes: u64,
}

/// Where a spawn's time went, from the gate to init's teardown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timings {
    /// The gate's decision (µs).
    pub gate_us: u64,
    /// The sandbox spec and seccomp filter (µs).
    pub spec_and_filter_us: u64,
    /// Making the decision record durable (µs).
    pub audit_commit_us: u64,
    /// The phases of the sandbox, as the supervisor and init saw them.
    pub phases: Phases,
}

impl SpawnResult {
    /// The result as JSON, as the envelope's `data` carries it.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Both `execute` shapes read back as they were written, and a key the
    /// type does not know is refused rather than dropped.
    #[test]
    fn execute_round_trips_and_refuses_unknown_keys() {
        let declared = json!({
            "policy": "declared",
            "limited_to": "declared programs: no directory grants execution, only these files",
            "count": 1,
            "files": [{"path": "/bin/sh", "granted_as": "program", "sha256": "sha256:00"}],
        });
        let scopes = json!({"policy": "scopes", "directories": ["/usr"]});
        for wire in [declared, scopes] {
            let typed: Execute = serde_json::from_value(wire.clone()).unwrap();
            assert_eq!(serde_json::to_value(&typed).unwrap(), wire);
        }
        let unknown = json!({"policy": "scopes", "directories": [], "extra": 1});
        assert!(serde_json::from_value::<Execute>(unknown).is_err());
    }
}
