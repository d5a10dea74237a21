//! The validated manifest: every field typed, every bound checked. A value of
//! these types can only be built by `validate`, so the gate never re-checks shape.

use crate::egress::grant::Grant;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use super::limits::Limits;
use super::paths::ScopePath;
use crate::template::{Params, Template};

/// A connector's fully-qualified name: `scheme://owner/repo[/subpath…]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Fqn(String);

/// Publication schemes spawnd knows (`local` is for operator-written manifests).
pub(crate) const FQN_SCHEMES: &[&str] = &["github", "gitlab", "local"];

/// The longest FQN, in bytes: room for any owner, repository and subpath a
/// forge allows, and a bound on what a caller's request can make spawnd
/// hold, answer or record.
pub(crate) const MAX_FQN_BYTES: usize = 256;

impl Fqn {
    /// Parses and checks an FQN. An error never repeats more than a bounded,
    /// escaped part of `text`.
    pub fn parse(text: &str) -> Result<Fqn, String> {
        if text.len() > MAX_FQN_BYTES {
            return Err(format!(
                "is {} bytes long; an FQN has at most {MAX_FQN_BYTES}",
                text.len()
            ));
        }
        let (scheme, rest) = text
            .split_once("://")
            .ok_or("must look like `scheme://owner/repo`, e.g. `github://acme/gitcrawl`")?;
        if !FQN_SCHEMES.contains(&scheme) {
            return Err(format!(
                "unknown scheme `{}`; use one of {}",
                crate::printable::printable(scheme),
                FQN_SCHEMES.join(", ")
            ));
        }
        let segments: Vec<&str> = rest.split('/').collect();
        if segments.len() < 2 {
            return Err("needs an owner and a repository after the scheme".into());
        }
        let ok = |s: &&str| {
            !s.is_empty()
                && *s != "."
                && *s != ".."
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        };
        if let Some(bad) = segments.iter().find(|s| !ok(s)) {
            return Err(format!(
                "segment `{}` must be non-empty letters, digits, `.`, `_` or `-`",
                crate::printable::printable(bad)
            ));
        }
        Ok(Fqn(text.to_string()))
    }

    /// The FQN as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Fqn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A SHA-256 digest, written `sha256:<64 lowercase hex>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha256Digest(pub [u8; 32]);

impl FromStr for Sha256Digest {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let hex_part = text
            .strip_prefix("sha256:")
            .ok_or("must start with `sha256:` (the only supported algorithm)")?;
        let well_formed = hex_part.len() == 64
            && hex_part
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !well_formed {
            return Err(format!(
                "must be `sha256:` followed by 64 lowercase hex digits (got {} characters after the prefix); run `spawnd hash FILE` or `spawnd manifest pin`",
                hex_part.len()
            ));
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut out).map_err(|e| e.to_string())?;
        Ok(Sha256Digest(out))
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", hex::encode(self.0))
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Sha256Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The permission tier of the connector CLI contract.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
    Default,
)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Queries only.
    #[default]
    Readonly,
    /// Create and update.
    Write,
    /// Bulk operations.
    Full,
    /// Destructive and configuration.
    Admin,
}

impl FromStr for Tier {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "readonly" => Ok(Tier::Readonly),
            "write" => Ok(Tier::Write),
            "full" => Ok(Tier::Full),
            "admin" => Ok(Tier::Admin),
            other => Err(format!(
                "unknown mode `{other}`; use readonly, write, full or admin"
            )),
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tier::Readonly => "readonly",
            Tier::Write => "write",
            Tier::Full => "full",
            Tier::Admin => "admin",
        })
    }
}

/// How a placeholder's value is used.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ValueKind {
    /// Any string that passes the value rules.
    #[default]
    String,
    /// A path: no `..` component; an absolute path must lie inside a scope.
    Path,
}

/// `[connector]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorId {
    /// Fully-qualified name.
    pub name: Fqn,
    /// Strict SemVer.
    pub version: semver::Version,
    /// Publish-time hash of the connector artifact.
    pub provenance_hash: Option<Sha256Digest>,
}

/// Sections spawnd accepts, shows and does not enforce.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Informational {
    /// `[capabilities.network] hosts` (the connector's, never the child's).
    pub network_hosts: Vec<String>,
    /// `[capabilities.credential] kind`.
    pub credential_kind: Option<String>,
    /// `[capabilities.credential] scope`.
    pub credential_scope: Option<String>,
    /// `[capabilities.credential] header` / `format` (HTTP injection by the connector runtime).
    pub credential_header: Option<String>,
    /// `[capabilities.credential.oauth2]`: authorize and token endpoints, client id, scopes.
    pub oauth2: Option<Oauth2Info>,
    /// `[capabilities.runtime] imports`.
    pub runtime_imports: Vec<String>,
    /// `[provides] intents`.
    pub intents: Vec<String>,
    /// `forwarder`.
    pub forwarder: Option<String>,
}

/// The publisher's OAuth app (the client secret is never kept).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Oauth2Info {
    /// Authorization endpoint.
    pub authorize_url: Option<String>,
    /// Token endpoint.
    pub token_url: Option<String>,
    /// Client id.
    pub client_id: Option<String>,
    /// Scopes.
    pub scopes: Vec<String>,
    /// Whether a client secret is bound into the manifest.
    pub has_client_secret: bool,
}

/// A declared program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// Path as declared.
    pub path: ScopePath,
    /// Pinned hash, if declared.
    pub hash: Option<Sha256Digest>,
}

/// What the sandbox lets a program execute (`exec` under
/// `[capabilities.spawn]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecPolicy {
    /// Files under the operator's system paths and the `fs_exec` scopes
    /// (and `/tmp` with `tmp_exec`): Landlock's execute right on those
    /// directories.
    #[default]
    Scopes,
    /// Only the declared programs, the `also_runs` files, and the
    /// interpreters and ELF loaders these name: Landlock's execute right
    /// on each file, on no directory.
    Declared,
}

impl FromStr for ExecPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "scopes" => Ok(ExecPolicy::Scopes),
            "declared" => Ok(ExecPolicy::Declared),
            other => Err(format!(
                "unknown exec policy `{}`; use \"scopes\" (the system paths and fs_exec scopes) or \"declared\" (only the declared programs and also_runs)",
                crate::printable::printable(other)
            )),
        }
    }
}

impl fmt::Display for ExecPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ExecPolicy::Scopes => "scopes",
            ExecPolicy::Declared => "declared",
        })
    }
}

/// An `also_runs` entry: a file the program may execute under
/// `exec = "declared"`, pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlsoRuns {
    /// Absolute, or in the connector's directory (`{connector}/…`), as
    /// declared.
    pub path: ScopePath,
    /// Its pinned hash.
    pub hash: Sha256Digest,
}

/// A declared operation, bound to one program.
#[derive(Debug, Clone)]
pub struct Operation {
    /// Operation name.
    pub name: String,
    /// Parsed, unambiguous argv template.
    pub template: Template,
    /// Value rules per placeholder.
    pub params: Params,
    /// How each placeholder's value is used (absent: `String`).
    pub kinds: BTreeMap<String, ValueKind>,
    /// Human descriptions of params.
    pub param_descriptions: BTreeMap<String, String>,
    /// Human description.
    pub description: Option<String>,
    /// Minimum tier.
    pub mode: Tier,
    /// Index into `SpawnGrant::programs`.
    pub program: usize,
    /// Effective limits (connector's, tightened by the operation's).
    pub limits: Limits,
    /// Unix sockets it may connect to: the connector's and its own.
    pub unix_sockets: Vec<ScopePath>,
    /// The `host:port` pairs it may reach: its own list, or the connector's.
    pub network: Vec<Grant>,
}

/// `[capabilities.spawn]`, validated.
#[derive(Debug, Clone)]
pub struct SpawnGrant {
    /// Declared programs.
    pub programs: Vec<Program>,
    /// Operations by name.
    pub operations: BTreeMap<String, Operation>,
    /// Keys the child may receive, in declared order.
    pub env_passthrough: Vec<String>,
    /// Keys filled from the operator's credential binding.
    pub credential_env_keys: Vec<String>,
    /// Fixed values.
    pub env_set: BTreeMap<String, String>,
    /// Read-only scopes.
    pub fs_read: Vec<ScopePath>,
    /// Read-write scopes.
    pub fs_write: Vec<ScopePath>,
    /// Executable scopes.
    pub fs_exec: Vec<ScopePath>,
    /// Unix sockets every operation may connect to.
    pub unix_sockets: Vec<ScopePath>,
    /// The `host:port` pairs any operation may reach.
    pub network: Vec<Grant>,
    /// Working-directory policy.
    pub cwd: Option<ScopePath>,
    /// Connector-wide limits.
    pub limits: Limits,
    /// What the program may execute.
    pub exec: ExecPolicy,
    /// Files besides `programs` it may execute under [`ExecPolicy::Declared`].
    pub also_runs: Vec<AlsoRuns>,
    /// What spawnd does when it refuses the program's network egress.
    pub on_violation: OnViolation,
}

/// What spawnd does when it refuses a program's network egress
/// (`[capabilities.spawn] on_violation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnViolation {
    /// The attempt fails for the program (a reset, NXDOMAIN), which goes on.
    #[default]
    Refuse,
    /// The sandbox is killed at the first refused attempt, and the result
    /// is a `capability_denied` naming what was requested and granted.
    Terminate,
}

impl OnViolation {
    /// The manifest's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            OnViolation::Refuse => "refuse",
            OnViolation::Terminate => "terminate",
        }
    }
}

impl SpawnGrant {
    /// Operations bound to program `index`, in name order.
    pub fn operations_of(&self, index: usize) -> impl Iterator<Item = &Operation> {
        self.operations
            .values()
            .filter(move |op| op.program == index)
    }

    /// The first declared path anchored at the connector's directory
    /// (`{connector}/…`): a program, an `also_runs` file, a scope or the
    /// cwd. Such a manifest runs only where that directory is known.
    pub fn first_connector_path(&self) -> Option<&ScopePath> {
        self.programs
            .iter()
            .map(|p| &p.path)
            .chain(self.also_runs.iter().map(|a| &a.path))
            .chain(&self.fs_read)
            .chain(&self.fs_write)
            .chain(&self.fs_exec)
            .chain(&self.cwd)
            .find(|p| p.needs_connector_dir())
    }
}

/// A non-fatal finding `lint` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// Dotted key path.
    pub key: String,
    /// What is worth a second look.
    pub message: String,
}

/// A loaded, validated manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// Where it came from (for messages).
    pub source: String,
    /// The directory holding the manifest's file, absolute: what
    /// `{connector}` paths expand against. `None` for a manifest not read
    /// from a file named by an absolute path (a draft, a test's text), where
    /// a `{connector}` path names no place.
    pub dir: Option<std::path::PathBuf>,
    /// SHA-256 of the file's bytes (recorded in audit).
    pub digest: Sha256Digest,
    /// Identity.
    pub connector: ConnectorId,
    /// Accepted, shown, not enforced.
    pub info: Informational,
    /// What spawnd enforces; `None` when the manifest grants no spawning.
    pub spawn: Option<SpawnGrant>,
    /// Lint findings.
    pub warnings: Vec<Warning>,
    /// Its connector directory as verified at load, for an installed
    /// connector and for a served manifest file that states
    /// `provenance_hash` (`None` otherwise): what the gate verifies again
    /// before each spawn, and what records name.
    pub verified: Option<std::sync::Arc<Verified>>,
}

/// Whether `named` (as a request, an action or a command names a version)
/// names the release `actual`: equal, build metadata included when `named`
/// has some; when it has none, build metadata is not compared (SemVer gives
/// it no part in a version's identity, and the store holds one content per
/// release, [`same_release`]).
pub(crate) fn names_version(named: &semver::Version, actual: &semver::Version) -> bool {
    if named.build.is_empty() {
        same_release(named, actual)
    } else {
        named == actual
    }
}

/// Whether two versions are the same release: equal but for build metadata.
pub(crate) fn same_release(a: &semver::Version, b: &semver::Version) -> bool {
    (a.major, a.minor, a.patch, &a.pre) == (b.major, b.minor, b.patch, &b.pre)
}

/// A connector directory as the daemon verified it at load
/// (docs/provenance.md): an installed connector (a store entry), or a
/// served manifest file that states `provenance_hash` and the `bin/` beside
/// it. Where it lies, the content hash of its stream, each file of the
/// stream with its digest, and for an installed one who signed it and the
/// operator's pins of its system programs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The directory, with symbolic links resolved.
    pub dir: std::path::PathBuf,
    /// A store entry (an installed connector), not a manifest file.
    pub installed: bool,
    /// The content hash of its stream.
    pub content: Sha256Digest,
    /// Each file of the stream in stream order (`bin/NAME`, then the
    /// manifest: `manifest.toml` in a store entry, the file's own name
    /// otherwise) and the SHA-256 of its bytes at load.
    pub files: Vec<(String, Sha256Digest)>,
    /// The signature's status: `signed` or `unsigned` (an entry whose
    /// signature is untrusted or invalid is not served); `unchecked` for
    /// a manifest file, whose signature nothing checks.
    pub signature: &'static str,
    /// The id of the key that signed it, when signed.
    pub signer: Option<String>,
    /// The operator's pins: program path → hash.
    pub pins: BTreeMap<std::path::PathBuf, Sha256Digest>,
}
