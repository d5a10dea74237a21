//! Connector manifests (docs/manifest.md): strict TOML parsing into raw types, then
//! validation into a typed [`Manifest`]. Pure: no file I/O here beyond what the
//! caller hands in as text (`load_file` is the one thin reader at the edge).

pub mod env_keys;
mod error;
mod exec;
pub mod limits;
mod model;
mod network;
mod ops;
pub mod paths;
mod raw;
mod scopes;
mod validate;

pub use error::{line_column, ManifestError, Problem};
pub use limits::{LimitSpec, Limits, LIMIT_SPECS};
pub use model::{
    names_version, same_release, AlsoRuns, ConnectorId, ExecPolicy, Fqn, Informational, Manifest,
    Oauth2Info, OnViolation, Operation, Program, Sha256Digest, SpawnGrant, Tier, ValueKind,
    Verified, Warning, FQN_SCHEMES, MAX_FQN_BYTES,
};
pub use ops::{check_op_name, code_placeholders, MAX_OP_NAME_BYTES, MAX_VALUE_LEN};
pub use paths::{
    paths_plain, system_path_overlap, Anchors, PathProblem, ScopePath, CONNECTOR_ANCHOR,
    SYSTEM_PATHS, WORKSPACE_ANCHOR,
};
pub use validate::{parse_manifest, LoadOptions};

#[cfg(test)]
mod network_tests;
#[cfg(test)]
mod stricter_than_adr_tests;
#[cfg(test)]
mod tests;
