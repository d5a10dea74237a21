//! Connector manifests (docs/manifest.md): strict TOML parsing into raw types, then
//! validation into a typed [`Manifest`]. Pure: no file I/O here beyond what the
//! caller hands in as text (`load_file` is the one thin reader at the edge).

pub(crate) mod env_keys;
mod error;
mod exec;
pub(crate) mod limits;
pub(crate) mod model;
mod network;
mod ops;
pub(crate) mod paths;
mod raw;
mod scopes;
pub(crate) mod validate;

pub(crate) use limits::{Limits, LIMIT_SPECS};
pub(crate) use model::{
    names_version, same_release, ExecPolicy, Fqn, Manifest, OnViolation, Operation, Sha256Digest,
    SpawnGrant, Tier, ValueKind, Verified, Warning, FQN_SCHEMES,
};
pub(crate) use ops::{check_op_name, code_placeholders};
pub(crate) use paths::{paths_plain, system_path_overlap, Anchors, ScopePath};
pub(crate) use validate::{parse_manifest, LoadOptions};

#[cfg(test)]
mod network_tests;
#[cfg(test)]
mod stricter_than_adr_tests;
#[cfg(test)]
mod tests;
