//! The installed connectors a daemon serves (docs/provenance.md, "Served
//! from the store"): every store entry, opened and checked as `connector
//! list` checks it (its bytes still its content hash, its manifest
//! loading, its signature against the keyring), with the operator's pins
//! beside it, as a [`Manifest`] that carries its [`Installed`] facts. The
//! daemon does this at start and at every reload; an entry that fails a
//! check, or whose signature is untrusted or invalid, fails the load and
//! the error names the entry, so nothing unverified is ever served.

use std::sync::Arc;

use super::keyring::Keyring;
use super::signature::SignatureStatus;
use super::store::{Entry, Store};
use crate::manifest::{Installed, LoadOptions, Manifest};

/// Every entry of `store` as a manifest to serve, in content hash order.
pub fn installed_manifests(
    store: &Store,
    keyring: &Keyring,
    options: LoadOptions,
) -> Result<Vec<Manifest>, String> {
    let refuse = |what: String| format!("connector store {}: {what}", store.root().display());
    let mut out = Vec::new();
    for (hash, opened) in store
        .list(options, keyring)
        .map_err(|e| refuse(e.to_string()))?
    {
        let entry = opened.map_err(|e| refuse(format!("entry {hash}: {e}")))?;
        let pins = store
            .pins(&hash)
            .map_err(|e| refuse(format!("entry {hash}: {e}")))?;
        out.push(served(entry, pins.programs).map_err(refuse)?);
    }
    Ok(out)
}

/// One checked entry as the daemon serves it.
fn served(
    entry: Entry,
    pins: std::collections::BTreeMap<std::path::PathBuf, crate::manifest::Sha256Digest>,
) -> Result<Manifest, String> {
    let name = format!(
        "{}@{} ({})",
        entry.manifest.connector.name,
        entry.manifest.connector.version,
        entry.hash()
    );
    let (signature, signer) = match &entry.signature {
        SignatureStatus::Unsigned => ("unsigned", None),
        SignatureStatus::Signed { key_id, .. } => ("signed", Some(key_id.clone())),
        SignatureStatus::Untrusted { authority, key_id } => {
            return Err(format!(
                "{name} is signed by key {key_id}, which the keyring no longer trusts for {authority}: trust the key again (`spawnd keyring trust {authority} --key FILE`) or remove the connector (`spawnd connector remove {}`)",
                entry.hash()
            ))
        }
        SignatureStatus::Invalid { why } => {
            return Err(format!(
                "{name}'s signature does not hold ({why}): remove the connector (`spawnd connector remove {}`) and install it again from its source",
                entry.hash()
            ))
        }
    };
    let dir = entry
        .dir
        .canonicalize()
        .map_err(|e| format!("{name}: {}: {e}", entry.dir.display()))?;
    let mut manifest = entry.manifest;
    // `{connector}` expands at the resolved directory, the one the per-spawn
    // check reads (`Installed::dir`): the program opened there is the one
    // whose digest that check takes, whatever links the store's path has.
    manifest.dir = Some(dir.clone());
    manifest.source = dir
        .join(super::content::MANIFEST_FILE)
        .display()
        .to_string();
    manifest.installed = Some(Arc::new(Installed {
        dir,
        content: entry.content.content,
        files: entry
            .content
            .files
            .iter()
            .map(|f| (f.path.clone(), f.sha256))
            .collect(),
        signature,
        signer,
        pins,
    }));
    Ok(manifest)
}
