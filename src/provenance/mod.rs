//! Connector provenance (docs/provenance.md): what identifies a published
//! connector and who vouches for it, apart from what it may do.
//!
//! A connector directory holds `manifest.toml` and, under `bin/`, the files
//! it ships. Its **content hash** is the SHA-256 of one byte stream, the
//! shipped files in name order and then the manifest ([`content`]); its
//! **signature** is an ed25519 signature by a publisher key over a statement
//! naming the connector, its version, its content hash and each file
//! ([`signature`], [`keys`]); the operator's **keyring** says which keys are
//! trusted for which authority (`github://acme`, [`keyring`]); the
//! **store** holds installed connectors by content hash, each checked at
//! install ([`store`]), with the operator's pins of system programs kept
//! beside an entry, outside the signed bytes ([`pins`]). Every refusal has a
//! name ([`refusal`]).
//!
//! A signature is information, never authorization: it widens no grant and
//! skips no check. Files are read and written here (the store, the keyring,
//! a connector directory); deciding what a request may do stays in `policy`.

pub(crate) mod content;
mod files;
pub(crate) mod identity;
pub(crate) mod keyring;
pub(crate) mod keys;
pub(crate) mod pins;
pub(crate) mod recheck;
pub(crate) mod refusal;
pub(crate) mod serve;
pub(crate) mod signature;
pub(crate) mod store;

pub(crate) use identity::{Authority, ConnectorRef};
pub(crate) use keyring::{Keyring, KeyringError};
pub(crate) use keys::KeyId;
pub(crate) use refusal::InstallRefusal;
pub(crate) use signature::SignatureStatus;
pub(crate) use store::{Entry, InstallRequest, Store, StoreError};
