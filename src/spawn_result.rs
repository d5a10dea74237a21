//! The result of a spawn as one type: the `data` object of `spawnd run
//! --json` (docs/cli.md, "The run result"), of the daemon's `spawn_status`
//! once the program ended, and the source of the audit log's exit record.
//! Built once by the report, serialized where the result leaves spawnd, and
//! deserialized where a front end reads one back (the CLI's remote path).
//! Every struct refuses fields it does not know, so the type and the wire
//! stay one (SPEC §10: fields are added, never renamed). Below `audit` (its
//! exit record is made from a result) and above `manifest` and `plan`
//! (whose types a result names), in `tests/layering.rs`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::manifest::Limits;

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
    /// `exec`'s `NETWORK_VIOLATION`.
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
    /// learning (docs/network.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkReport>,
    /// What the tracer saw, for a traced run (`--trace`, `learn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceReport>,
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

/// Durations of the phases of one spawn, as seen by the supervisor, and
/// init's own times on its setup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phases {
    /// `clone` into the namespaces (or the order to the spawner), id maps,
    /// release to build the root; with a spawner, until its reply was read
    /// once the audit record was durable (µs).
    pub clone_and_release_us: u64,
    /// Inside: cgroups, fresh root, identity, Landlock, seccomp — and the
    /// go-ahead once the audit record is durable — until init reports (µs).
    pub sandbox_setup_us: u64,
    /// Fork, seccomp, exec and the program's own run, until it ended (µs).
    pub program_us: u64,
    /// Killing leftovers, namespace teardown, reaping (µs).
    pub teardown_us: u64,
    /// By init's clock: from its start on the order until it stood
    /// confined, ready for the program (µs; absent when init did not say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_ready_us: Option<u64>,
    /// By init's clock: from ready until the release came, which is once
    /// the audit record is durable (and, through a spawner, its reply is
    /// read) (µs). Near 0 when the sandbox's setup held the program back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release_wait_us: Option<u64>,
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
    /// `spawnd run` in this process: its whole wall time, from the start of
    /// its `main` until the result was ready — the exit record durable and
    /// init reaped (µs; absent from the daemon and through `--socket`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_us: Option<u64>,
}

impl SpawnResult {
    /// The result as JSON, as the envelope's `data` carries it.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// A result read back from its JSON (an envelope's `data`).
    pub fn from_value(data: &Value) -> Result<SpawnResult, serde_json::Error> {
        SpawnResult::deserialize(data)
    }

    /// The refused egress that ended the sandbox under `on_violation =
    /// "terminate"`, if one did.
    pub fn violation(&self) -> Option<&Violation> {
        self.network.as_ref()?.violation.as_ref()
    }
}

/// `spawn_status`'s answer: the handle's state, and once the program has
/// ended, its result (the `state` names how it ended). The daemon answers
/// with the result it holds borrowed (`SpawnStatus<&SpawnResult>`); a
/// client reads it back owned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SpawnStatus<R = SpawnResult> {
    /// The program runs.
    Running {
        /// Since it started.
        duration_ms: u64,
    },
    /// The sandbox could not be set up, or was lost: nothing (more) ran.
    Failed {
        /// Why.
        error: String,
    },
    /// The program exited.
    Exited(R),
    /// A signal ended it.
    Signaled(R),
    /// Its wall time ran out.
    TimedOut(R),
}

impl<R: std::borrow::Borrow<SpawnResult>> SpawnStatus<R> {
    /// The status of a program that ended with `result`.
    pub fn ended(result: R) -> SpawnStatus<R> {
        match Self::ended_state(result.borrow()) {
            "timed_out" => SpawnStatus::TimedOut(result),
            "signaled" => SpawnStatus::Signaled(result),
            _ => SpawnStatus::Exited(result),
        }
    }

    /// The state of a program that ended with `result`: `timed_out`,
    /// `signaled` or `exited`.
    pub fn ended_state(result: &SpawnResult) -> &'static str {
        if result.timed_out {
            "timed_out"
        } else if result.signal.is_some() {
            "signaled"
        } else {
            "exited"
        }
    }

    /// The state's name, as the protocol writes it.
    pub fn state(&self) -> &'static str {
        match self {
            SpawnStatus::Running { .. } => "running",
            SpawnStatus::Failed { .. } => "failed",
            SpawnStatus::Exited(r) | SpawnStatus::Signaled(r) | SpawnStatus::TimedOut(r) => {
                Self::ended_state(r.borrow())
            }
        }
    }
}

impl<R: Serialize> SpawnStatus<R> {
    /// The status as JSON, as the daemon answers it.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// The relay's report of a spawn: totals, each connection that reached its
/// server and the first refusal of each kind, how often each kind of
/// refusal happened, and the names the DNS stub refused; for a learning
/// spawn, also its mode and the `host:port` pairs its program contacted,
/// sorted, each once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkReport {
    /// Connections accepted, refused ones included.
    pub connections: u64,
    /// Connections refused, or whose dial failed.
    pub refused: u64,
    /// Bytes relayed from the program.
    pub bytes_up: u64,
    /// Bytes relayed to the program.
    pub bytes_down: u64,
    /// Each connection spawnd dialed (within the budget) and the first
    /// refusal of each kind.
    pub listed: Vec<Connection>,
    /// Connections past the budget, counted only.
    pub unlisted: u64,
    /// How often each kind of refusal happened.
    pub refusals: Vec<RefusalsOfAKind>,
    /// Refusals of kinds past the budget.
    pub refusals_unreported: u64,
    /// Dialed connections past the budget, by destination.
    pub connections_unreported: Vec<UnreportedConnections>,
    /// The names the DNS stub refused.
    pub dns_refused: Vec<DnsRefused>,
    /// Refused names past the budget.
    pub dns_refused_more: u64,
    /// A learning spawn's mode (`record` or `forward`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning: Option<String>,
    /// A learning spawn's contacted `host:port` pairs, sorted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contacted: Option<Vec<String>>,
    /// Contacted pairs past the budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contacted_unlisted: Option<u64>,
    /// Why the relay's records could not be written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Under `on_violation = "terminate"`, the refused egress that ended
    /// the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub violation: Option<Violation>,
}

impl NetworkReport {
    /// The report without its lists of connections and refused names: what
    /// the exit record carries (each has a `net` record of its own).
    pub fn summary(&self) -> Value {
        let mut summary = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(fields) = &mut summary {
            fields.remove("listed");
            fields.remove("dns_refused");
        }
        summary
    }
}

/// One connection of a spawn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    /// `tcp`, `udp` or `other`.
    pub protocol: String,
    /// The IP protocol number, for `other`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_protocol: Option<u8>,
    /// The name or address the program asked for.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The address spawnd dialed, if it dialed.
    pub dialed: Option<String>,
    /// The grants allowed it.
    pub allowed: bool,
    /// The server answered.
    pub connected: bool,
    /// Why it was refused or failed.
    pub reason: Option<String>,
    /// The address policy's denial, for a refused address.
    pub denial: Option<String>,
    /// The server name of the ClientHello.
    pub sni: Option<String>,
    /// The dial's error.
    pub error: Option<String>,
    /// Bytes from the program.
    pub bytes_up: u64,
    /// Bytes to the program.
    pub bytes_down: u64,
    /// How long it lasted.
    pub duration_ms: u64,
}

/// How often one kind of refusal happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefusalsOfAKind {
    /// The destination asked for.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// `tcp`, `udp` or `other`.
    pub protocol: String,
    /// The IP protocol number, for `other`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_protocol: Option<u8>,
    /// Why (docs/network.md lists the reasons).
    pub reason: String,
    /// How many connections.
    pub count: u64,
}

/// Dialed connections to one destination past the listing budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnreportedConnections {
    /// The destination.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// How many connections.
    pub count: u64,
    /// How many of them were refused after the dial.
    pub refused: u64,
    /// Bytes from the program.
    pub bytes_up: u64,
    /// Bytes to the program.
    pub bytes_down: u64,
}

/// A name the DNS stub refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsRefused {
    /// The name.
    pub name: String,
    /// The record type asked for (`A`, `AAAA`…).
    #[serde(rename = "type")]
    pub record_type: String,
}

/// The refused egress that ended a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Violation {
    /// What the program asked for.
    pub requested: String,
    /// Why it was refused.
    pub reason: String,
    /// What the manifest granted.
    pub granted: Vec<String>,
}

/// What a traced run's program did and ran into (`--trace`, `learn`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceReport {
    /// The walls the program met, seccomp's first, then by path.
    pub refusals: Vec<Refusal>,
    /// Each distinct (path, use), sorted by path.
    pub paths: Vec<TracedPath>,
    /// Every path executed, in the order first seen.
    pub executed: Vec<PathBuf>,
    /// The calls the filter refused, by call.
    pub refused_calls: Vec<RefusedCall>,
    /// Notifications whose path could not be read or resolved.
    pub unresolved: u64,
    /// Distinct paths past the tracer's budget, counted only.
    pub dropped: u64,
    /// Whether the kernel woke the traced calls synchronously.
    pub sync_wake_up: bool,
    /// Why tracing stopped early, if it did.
    pub error: Option<String>,
}

/// A path a traced program used, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracedPath {
    /// Absolute, lexically normalized, as the program's mounts name it.
    pub path: PathBuf,
    /// How.
    #[serde(rename = "use")]
    pub how: Use,
    /// The first call that did so (`openat`, `execve`…).
    pub call: String,
    /// How many calls did so.
    pub calls: u64,
}

/// How a call used a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Use {
    /// Opened for reading.
    Read,
    /// Opened as a directory (listed).
    List,
    /// Opened for writing (maybe created: `O_CREAT`), or truncated.
    Write,
    /// Created: a directory, node, link or a rename's new name.
    Create,
    /// Removed, or renamed away.
    Remove,
    /// Executed.
    Execute,
}

impl Use {
    /// The name the JSON gives it (`read`, `execute`…).
    pub fn as_str(self) -> &'static str {
        match self {
            Use::Read => "read",
            Use::List => "list",
            Use::Write => "write",
            Use::Create => "create",
            Use::Remove => "remove",
            Use::Execute => "execute",
        }
    }
}

/// A call the seccomp filter refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefusedCall {
    /// The syscall's name (or its number, when the table has none).
    pub call: String,
    /// The errno it got.
    pub errno: i32,
    /// How many times.
    pub calls: u64,
}

/// One wall the program met.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Refusal {
    /// Which layer: `mount_namespace` (the path is not in the sandbox:
    /// ENOENT), `read_only_mount` (EROFS), `noexec` (EACCES: the mount is
    /// noexec and Landlock grants no execution), `landlock` (EACCES), or
    /// `seccomp` (the filter refused the call).
    pub layer: String,
    /// The errno the program got.
    pub errno: String,
    /// The call (`openat`, `execve`, `ptrace`…).
    pub call: String,
    /// The path it named, for a path call.
    pub path: Option<PathBuf>,
    /// How it used the path.
    #[serde(rename = "use")]
    pub how: Option<Use>,
    /// How many calls met this wall.
    pub calls: u64,
    /// What would move it.
    pub fix: String,
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

    /// A learning spawn's `network` as the relay's report has it (every key
    /// the report writes, nulls included) reads back and serializes to the
    /// same JSON; a granted spawn's has no learning keys.
    #[test]
    fn network_round_trips_and_refuses_unknown_keys() {
        let wire = json!({
            "connections": 3, "refused": 2, "bytes_up": 10, "bytes_down": 20,
            "listed": [{
                "protocol": "tcp", "host": "a.example", "port": 443,
                "dialed": "192.0.2.1:443", "allowed": false, "connected": false,
                "reason": "sni_mismatch", "denial": null, "sni": "b.example",
                "error": null, "bytes_up": 0, "bytes_down": 0, "duration_ms": 1,
            }, {
                "protocol": "other", "ip_protocol": 132, "host": "192.0.2.9", "port": 0,
                "dialed": null, "allowed": false, "connected": false,
                "reason": "not_granted", "denial": null, "sni": null,
                "error": null, "bytes_up": 0, "bytes_down": 0, "duration_ms": 0,
            }],
            "unlisted": 0,
            "refusals": [{"host": "192.0.2.9", "port": 0, "protocol": "other", "ip_protocol": 132, "reason": "not_granted", "count": 4}],
            "refusals_unreported": 1,
            "connections_unreported": [{"host": "a.example", "port": 443, "count": 2, "refused": 1, "bytes_up": 5, "bytes_down": 6}],
            "dns_refused": [{"name": "c.example", "type": "AAAA"}],
            "dns_refused_more": 0,
            "learning": "record",
            "contacted": ["a.example:443"],
            "contacted_unlisted": 0,
            "violation": {"requested": "c.example:443", "reason": "not_granted", "granted": ["a.example:443"]},
        });
        let typed: NetworkReport = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), wire);
        let summary = typed.summary();
        assert!(summary.get("listed").is_none() && summary.get("dns_refused").is_none());
        assert_eq!(summary.get("refused"), Some(&json!(2)));
        let granted = NetworkReport::default();
        let wire = serde_json::to_value(&granted).unwrap();
        assert!(wire.get("learning").is_none() && wire.get("violation").is_none());
        let mut unknown = wire;
        unknown["extra"] = json!(1);
        assert!(serde_json::from_value::<NetworkReport>(unknown).is_err());
    }

    /// A traced run's `trace` reads back and serializes to the same JSON.
    #[test]
    fn trace_round_trips() {
        let wire = json!({
            "refusals": [
                {"layer": "seccomp", "errno": "EPERM", "call": "ptrace", "path": null, "use": null, "calls": 2, "fix": "none"},
                {"layer": "mount_namespace", "errno": "ENOENT", "call": "openat", "path": "/etc/x", "use": "read", "calls": 1, "fix": "add /etc to fs_read"},
            ],
            "paths": [{"path": "/etc/x", "use": "read", "call": "openat", "calls": 1}],
            "executed": ["/bin/sh"],
            "refused_calls": [{"call": "ptrace", "errno": 1, "calls": 2}],
            "unresolved": 0,
            "dropped": 0,
            "sync_wake_up": true,
            "error": null,
        });
        let typed: TraceReport = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), wire);
        assert_eq!(typed.paths[0].how, Use::Read);
    }

    /// A result with the process's wall time carries it; one without (the
    /// daemon's) leaves the key out of the JSON.
    #[test]
    fn process_us_is_in_the_json_only_when_measured() {
        let mut timings = Timings {
            gate_us: 1,
            spec_and_filter_us: 2,
            audit_commit_us: 3,
            phases: Phases::default(),
            process_us: None,
        };
        let wire = serde_json::to_value(timings).unwrap();
        assert!(wire.get("process_us").is_none());
        timings.process_us = Some(6500);
        let wire = serde_json::to_value(timings).unwrap();
        assert_eq!(wire["process_us"], 6500);
        let typed: Timings = serde_json::from_value(wire).unwrap();
        assert_eq!(typed.process_us, Some(6500));
    }
}
