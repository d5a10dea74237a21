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

pub mod content;
mod files;
pub mod identity;
pub mod keyring;
pub mod keys;
pub mod pins;
pub mod recheck;
pub mod refusal;
pub mod serve;
pub mod signature;
pub mod store;

pub use content::{ConnectorContent, ContentError, ContentHasher, StreamFile};
pub use identity::{Authority, ConnectorRef};
pub use keyring::{Keyring, KeyringError, TrustedKey};
pub use keys::{KeyError, KeyId};
pub use refusal::{InstallRefusal, Refusal, RefusalInfo, REFUSALS};
pub use signature::{SignatureFile, SignatureStatus};
pub use store::{Entry, InstallRequest, Installed, Store, StoreError};
