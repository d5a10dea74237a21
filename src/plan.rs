//! `SpawnPlan`: the pure description of what an allowed request will run —
//! program, exact argv, env, cwd, scopes and limits. The gate builds it; the
//! sandbox (a later stage) makes it true. Values of env keys live here for the
//! launcher but are never serialized: output and audit see key names only.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::egress::grant::Grant;
use crate::egress::learning::Learning;
use crate::manifest::{Limits, Sha256Digest, Tier};

/// An installed connector's provenance as records name it: the content
/// hash it was verified to have before the spawn, and who signed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provenance {
    /// The content hash.
    pub hash: Sha256Digest,
    /// `signed` or `unsigned`.
    pub signature: &'static str,
    /// The signing key's id, when signed.
    pub signer: Option<String>,
}

impl Provenance {
    /// The provenance of `manifest`, when it is an installed connector
    /// (a manifest file has no signature or store entry to name).
    pub fn of(manifest: &crate::manifest::Manifest) -> Option<Provenance> {
        manifest
            .verified
            .as_ref()
            .filter(|v| v.installed)
            .map(|i| Provenance {
                hash: i.content,
                signature: i.signature,
                signer: i.signer.clone(),
            })
    }
}

/// What will run, decided and resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpawnPlan {
    /// Connector FQN.
    pub connector: String,
    /// Connector version.
    pub version: String,
    /// SHA-256 of the manifest file.
    pub manifest_sha256: Sha256Digest,
    /// Where the manifest was read from (its path, for the audit trail).
    pub manifest_path: String,
    /// For an installed connector, its content hash and signer.
    pub provenance: Option<Provenance>,
    /// Operation name.
    pub op: String,
    /// The operation's tier.
    pub op_mode: Tier,
    /// The program, as declared and as opened.
    pub program: ProgramPlan,
    /// The exact argv, `argv[0]` included.
    pub argv: Vec<String>,
    /// The argv with placeholder names instead of values (`git log --since={since}`).
    pub argv_shape: String,
    /// Env keys the child gets, with where each value comes from.
    pub env: Vec<EnvEntry>,
    /// Values for `EnvSource::Request` and `EnvSource::Fixed` keys (never serialized).
    #[serde(skip)]
    pub env_values: BTreeMap<String, String>,
    /// Working directory.
    pub cwd: CwdPlan,
    /// Filesystem scopes, expanded for the caller.
    pub fs: FsPlan,
    /// The `host:port` pairs the program may reach: the operation's, or
    /// those of them the request's action subset names when it names any.
    pub network: Vec<Grant>,
    /// The request's action subset, as records repeat it (each entry
    /// `shown`, at most 16 of them), when it carried one.
    #[serde(skip)]
    pub action: Option<Vec<String>>,
    /// `spawnd learn` only: no grants, every name reachable on every port,
    /// each connection recorded and then refused or relayed as this says
    /// ([`crate::egress::learning`]). The gate always leaves it `None`: no
    /// manifest or daemon request can ask for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_learning: Option<Learning>,
    /// What a refused network egress does (the manifest's `on_violation`).
    pub on_violation: crate::manifest::OnViolation,
    /// Limits in force.
    pub limits: Limits,
    /// What the program may execute.
    pub exec: ExecPlan,
}

impl SpawnPlan {
    /// Whether the sandbox gets spawnd's relay: with grants, or learning.
    pub fn uses_relay(&self) -> bool {
        !self.network.is_empty() || self.network_learning.is_some()
    }
}

/// The program to execute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProgramPlan {
    /// Path as declared in the manifest.
    pub declared: String,
    /// Path after following symlinks (what was opened).
    pub resolved: PathBuf,
    /// SHA-256 of the bytes read through the opened file.
    pub sha256: Sha256Digest,
    /// Whether the manifest pinned that hash.
    pub pinned: bool,
    /// The interpreter (`#!`) or ELF loader it names, when absolute.
    #[serde(skip)]
    pub interpreter: Option<crate::interpreter::Interpreter>,
}

/// A file's device and inode: which file a path held when it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileId {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

/// What the program may execute (the manifest's `exec`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "policy")]
pub enum ExecPlan {
    /// Files under the system paths and `fs_exec` scopes (and `/tmp` with
    /// `tmp_exec`).
    #[default]
    Scopes,
    /// Only these files (the program itself besides, by its descriptor).
    Declared {
        /// Each file granted, as opened and checked by the gate.
        files: Vec<ExecutableFile>,
    },
}

/// A file `exec = "declared"` lets the program execute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecutableFile {
    /// Its path after symlinks (where the gate opened it).
    pub path: PathBuf,
    /// Why it may run.
    pub granted_as: GrantedAs,
    /// The SHA-256 of its bytes when the gate read them.
    pub sha256: Sha256Digest,
    /// Which file that was: the sandbox's rule is made only on that file.
    #[serde(skip)]
    pub file: FileId,
}

/// Why a file may be executed under `exec = "declared"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantedAs {
    /// The program this spawn runs.
    Program,
    /// Another entry of `programs`.
    DeclaredProgram,
    /// An `also_runs` entry.
    AlsoRuns,
    /// The interpreter a granted `#!` script names.
    Interpreter,
    /// The ELF loader (`PT_INTERP`) a granted file names.
    Loader,
}

/// One env key of the child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvEntry {
    /// The key.
    pub key: String,
    /// Where its value comes from.
    pub source: EnvSource,
}

/// Where an env value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvSource {
    /// The request (daemon) or the invoking environment / `--env` (`run`).
    Request,
    /// The manifest's `env_set`.
    Fixed,
    /// The operator's credential binding, read at spawn time.
    Credential,
    /// spawnd's runtime default ([`DEFAULT_ENV`]), for a key the request,
    /// the manifest and the credentials left unset.
    Default,
}

/// The home directory a sandbox's program has: the private `/tmp`, always
/// there and writable.
pub(crate) const RUNTIME_HOME: &str = "/tmp";

/// What every program gets unless its manifest sets or passes the key:
/// a `PATH` of the system's program directories, `HOME` inside the
/// sandbox, and a UTF-8 locale every C library has built in.
pub(crate) const DEFAULT_ENV: &[(&str, &str)] = &[
    (
        "PATH",
        "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
    ),
    ("HOME", RUNTIME_HOME),
    ("LANG", "C.UTF-8"),
];

/// The child's working directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CwdPlan {
    /// An existing directory inside the scopes.
    Dir(PathBuf),
    /// A fresh private directory, removed afterwards.
    FreshTemp,
}

/// Scopes with `~` expanded for the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FsPlan {
    /// Read-only.
    pub read: Vec<PathBuf>,
    /// Read-write.
    pub write: Vec<PathBuf>,
    /// Executable.
    pub exec: Vec<PathBuf>,
    /// Unix sockets the program may connect to (`unix_sockets`): with any,
    /// `socket(AF_UNIX)` is allowed, and each is bound in where no scope
    /// shows it already.
    pub unix_sockets: Vec<PathBuf>,
}

#[cfg(test)]
impl SpawnPlan {
    /// A plan that runs `/usr/bin/true` with nothing granted, for a test
    /// to change what it is about.
    pub(crate) fn of_true() -> SpawnPlan {
        SpawnPlan {
            connector: "local://t/t".into(),
            version: "1.0.0".into(),
            manifest_sha256: Sha256Digest([0; 32]),
            manifest_path: "/etc/spawnd/manifests/t.toml".into(),
            provenance: None,
            op: "x".into(),
            op_mode: Tier::Readonly,
            program: ProgramPlan {
                declared: "/usr/bin/true".into(),
                resolved: "/usr/bin/true".into(),
                sha256: Sha256Digest([0; 32]),
                pinned: false,
                interpreter: None,
            },
            argv: vec!["true".into()],
            argv_shape: "true".into(),
            env: vec![],
            env_values: Default::default(),
            cwd: CwdPlan::FreshTemp,
            fs: FsPlan::default(),
            network: Vec::new(),
            action: None,
            network_learning: None,
            on_violation: Default::default(),
            limits: Limits::default(),
            exec: Default::default(),
        }
    }
}
