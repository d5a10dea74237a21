//! The manifest exactly as written: serde types that mirror the TOML, with every
//! table refusing unknown keys and the keys that later checks need wrapped in
//! `Spanned` so an error can point at the line and column that caused it.
//! Nothing here is validated; `validate` turns a `RawManifest` into a `Manifest`.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// The whole file: the ADR's sections plus spawnd's extensions.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawManifest {
    /// `[connector]`: identity.
    pub connector: Option<Spanned<RawConnector>>,
    /// `[capabilities]`: the grants the connector asks for.
    #[serde(default)]
    pub capabilities: RawCapabilities,
    /// `[provides]`: intents, shown by `explain`.
    pub provides: Option<RawProvides>,
    /// `forwarder = "builtin://spawn-forwarder"`: the reference implementation's
    /// marker for manifests of local CLIs installed as connectors.
    pub forwarder: Option<Spanned<String>>,
}

/// `[connector]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConnector {
    /// Fully-qualified URI.
    pub name: Spanned<String>,
    /// Strict SemVer.
    pub version: Spanned<String>,
    /// `sha256:` of the connector artifact at publish time (shown, not enforced).
    pub provenance_hash: Option<Spanned<String>>,
}

/// `[capabilities]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCapabilities {
    /// `[capabilities.network]`: the connector's own egress (never the child's).
    pub network: Option<RawNetwork>,
    /// `[capabilities.credential]`.
    pub credential: Option<RawCredential>,
    /// `[capabilities.runtime]`.
    pub runtime: Option<RawRuntime>,
    /// `[capabilities.spawn]`: what spawnd enforces.
    pub spawn: Option<Spanned<RawSpawn>>,
}

/// `[capabilities.network]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNetwork {
    /// `host:port` pairs.
    #[serde(default)]
    pub hosts: Vec<String>,
}

/// `[capabilities.credential]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCredential {
    /// `oauth2`, `api_key`, `basic`, ...
    pub kind: Spanned<String>,
    /// Human-readable or OAuth scope.
    pub scope: Option<String>,
    /// API-key header name (ADR, HTTP injection).
    pub header: Option<String>,
    /// API-key header format with `{key}` (ADR, HTTP injection).
    pub format: Option<String>,
    /// `[capabilities.credential.oauth2]`.
    pub oauth2: Option<RawOauth2>,
}

/// `[capabilities.credential.oauth2]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOauth2 {
    /// Authorization endpoint.
    pub authorize_url: Option<String>,
    /// Token endpoint.
    pub token_url: Option<String>,
    /// The publisher's client id.
    pub client_id: Option<String>,
    /// Release-bound client secret (never shown by spawnd).
    pub client_secret: Option<String>,
    /// OAuth scopes.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// `[capabilities.runtime]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRuntime {
    /// Host-function imports.
    #[serde(default)]
    pub imports: Vec<String>,
}

/// `[provides]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvides {
    /// Intents the connector implements.
    #[serde(default)]
    pub intents: Vec<String>,
}

/// `[capabilities.spawn]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpawn {
    /// Declared programs.
    pub programs: Option<Spanned<Vec<Spanned<RawProgram>>>>,
    /// Operations by name.
    pub operations: Option<Spanned<BTreeMap<Spanned<String>, Spanned<RawOperation>>>>,
    /// Env keys the child may receive.
    #[serde(default)]
    pub env_passthrough: Vec<Spanned<String>>,
    /// Keys spawnd fills from the operator's credential binding.
    #[serde(default)]
    pub credential_env_keys: Vec<Spanned<String>>,
    /// Fixed env values (extension).
    #[serde(default)]
    pub env_set: BTreeMap<Spanned<String>, Spanned<String>>,
    /// Read-only scopes.
    #[serde(default)]
    pub fs_read: Vec<Spanned<String>>,
    /// Read-write scopes.
    #[serde(default)]
    pub fs_write: Vec<Spanned<String>>,
    /// Executable scopes (extension).
    #[serde(default)]
    pub fs_exec: Vec<Spanned<String>>,
    /// Unix sockets every operation may connect to (extension).
    #[serde(default)]
    pub unix_sockets: Vec<Spanned<String>>,
    /// `host:port` pairs the program may reach.
    #[serde(default)]
    pub network: Vec<Spanned<String>>,
    /// Working-directory policy.
    pub cwd: Option<Spanned<String>>,
    /// Connector-wide limits.
    pub limits: Option<Spanned<RawLimits>>,
    /// What a refused network egress does: `refuse` (default) or `terminate`.
    pub on_violation: Option<Spanned<String>>,
    /// What the sandbox lets the program execute: `scopes` (default) or
    /// `declared` (extension).
    pub exec: Option<Spanned<String>>,
    /// Files besides `programs` that may be executed under
    /// `exec = "declared"`, each pinned (extension).
    #[serde(default)]
    pub also_runs: Vec<Spanned<RawAlsoRuns>>,
}

/// One entry of `also_runs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAlsoRuns {
    /// Absolute path.
    pub path: Spanned<String>,
    /// `sha256:<hex>`; required (an optional key here, so that its absence
    /// gets a message of ours).
    pub hash: Option<Spanned<String>>,
}

/// One entry of `programs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProgram {
    /// Absolute or `~/` path.
    pub path: Spanned<String>,
    /// Optional `sha256:<hex>`.
    pub hash: Option<Spanned<String>>,
}

/// `[capabilities.spawn.operations.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOperation {
    /// The argv template: a string, or an array of tokens and nested groups.
    pub argv: Spanned<RawArgv>,
    /// What the operation does.
    pub description: Option<String>,
    /// `readonly` (default), `write`, `full` or `admin`.
    pub mode: Option<Spanned<String>>,
    /// Per-placeholder value rules.
    #[serde(default)]
    pub params: BTreeMap<Spanned<String>, Spanned<RawParam>>,
    /// Limits that tighten the connector's.
    pub limits: Option<Spanned<RawLimits>>,
    /// Unix sockets this operation may connect to besides the connector's
    /// (extension).
    #[serde(default)]
    pub unix_sockets: Vec<Spanned<String>>,
    /// The `host:port` pairs of the connector's this operation may reach
    /// (absent: all of them).
    pub network: Option<Vec<Spanned<String>>>,
}

/// An argv template in either form.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawArgv {
    /// `"git log --since={since}"`.
    Text(String),
    /// `["git", "log", ["--author={who}"]]`.
    Tokens(Vec<RawArgvItem>),
}

/// One item of the array form.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawArgvItem {
    /// A token (may contain spaces).
    Token(String),
    /// An optional group.
    Group(Vec<String>),
}

/// `[…params.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawParam {
    /// Whole-value regex.
    pub pattern: Option<Spanned<String>>,
    /// Enumerated values.
    pub values: Option<Vec<String>>,
    /// Maximum bytes.
    pub max_len: Option<Spanned<i64>>,
    /// Allow a leading `-` where the value begins a token.
    pub allow_dash: Option<bool>,
    /// Allow the empty string.
    pub allow_empty: Option<bool>,
    /// Value used when the arg is absent.
    pub default: Option<String>,
    /// `string` (default) or `path` (no `..`, absolute only inside the scopes).
    pub kind: Option<Spanned<String>>,
    /// Human description.
    pub description: Option<String>,
}

/// `[…limits]`. Signed so a negative number gets a clear message.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    /// Stdout cap.
    pub max_stdout_bytes: Option<Spanned<i64>>,
    /// Stderr cap.
    pub max_stderr_bytes: Option<Spanned<i64>>,
    /// Wall time.
    pub wall_time_ms: Option<Spanned<i64>>,
    /// Memory.
    pub max_memory_bytes: Option<Spanned<i64>>,
    /// Processes/threads.
    pub max_processes: Option<Spanned<i64>>,
    /// Largest file the child may write.
    pub max_file_size_bytes: Option<Spanned<i64>>,
    /// Open descriptors.
    pub max_open_files: Option<Spanned<i64>>,
    /// The private /tmp's size.
    pub tmp_size_bytes: Option<Spanned<i64>>,
    /// Files in the private /tmp may be executed.
    pub tmp_exec: Option<Spanned<bool>>,
}
