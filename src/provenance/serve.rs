//! The installed connectors a daemon serves (docs/provenance.md, "Served
//! from the store"): every store entry, opened and checked as `connector
//! list` checks it (its bytes still its content hash, its manifest
//! loading, its signature against the keyring), with the operator's pins
//! beside it, as a [`Manifest`] that carries its [`Verified`] facts. The
//! daemon does this at start and at every reload; an entry that fails a
//! check, or whose signature is untrusted or invalid, fails the load and
//! the error names the entry, so nothing unverified is ever served.
//!
//! A manifest file in `[server] manifests` that states `provenance_hash`
//! is a connector directory too: the `bin/` beside it is checked against
//! that hash at load ([`verified_file`]) and, like an installed connector,
//! before every spawn.

use std::path::Path;
use std::sync::Arc;

use super::keyring::Keyring;
use super::signature::SignatureStatus;
use super::store::{Entry, Store};
use crate::manifest::{LoadOptions, Manifest, Verified};

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
    // check reads (`Verified::dir`): the program opened there is the one
    // whose digest that check takes, whatever links the store's path has.
    manifest.dir = Some(dir.clone());
    manifest.source = dir
        .join(super::content::MANIFEST_FILE)
        .display()
        .to_string();
    manifest.verified = Some(Arc::new(Verified {
        dir,
        installed: true,
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

/// A served manifest file that states `provenance_hash` (`text`, read from
/// `file`), with the `bin/` beside it: each shipped file only root or
/// spawnd's user can change, their hash the one the manifest states. Its
/// stream is the shipped files, then the manifest file.
pub(crate) fn verified_file(
    file: &Path,
    text: &[u8],
    manifest: &Manifest,
) -> Result<Verified, String> {
    let shown = file.display();
    let Some(declared) = manifest.connector.provenance_hash else {
        return Err(format!("{shown} states no provenance_hash"));
    };
    let dir = file
        .parent()
        .map(|d| {
            if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            }
        })
        .ok_or_else(|| format!("{shown} has no directory"))?
        .canonicalize()
        .map_err(|e| format!("{shown}: its directory: {e}"))?;
    let bin = dir.join(super::content::SHIPPED_DIR);
    if bin.exists() {
        super::files::check_owner_and_mode(&bin)?;
    }
    let (files, stream) =
        super::content::hash_shipped_files(&dir).map_err(|e| format!("{shown}: {e}"))?;
    for f in &files {
        super::files::check_owner_and_mode(&dir.join(&f.path))?;
    }
    match stream.shipped_digest() {
        Some(shipped) if shipped == declared => {}
        Some(shipped) => {
            return Err(format!(
                "{shown} states provenance_hash {declared}, but the files of {} hash to {shipped}: the program beside it is not the one the manifest was published with",
                bin.display()
            ))
        }
        None => {
            return Err(format!(
                "{shown} states provenance_hash {declared}, but nothing is shipped in {}: put the program there, or remove provenance_hash",
                bin.display()
            ))
        }
    }
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| format!("{shown} has no file name"))?;
    let manifest_digest = {
        use sha2::Digest;
        crate::manifest::Sha256Digest(sha2::Sha256::digest(text).into())
    };
    let mut streamed: Vec<(String, crate::manifest::Sha256Digest)> =
        files.into_iter().map(|f| (f.path, f.sha256)).collect();
    streamed.push((name, manifest_digest));
    Ok(Verified {
        dir,
        installed: false,
        content: stream.finish(text),
        files: streamed,
        signature: "unchecked",
        signer: None,
        pins: Default::default(),
    })
}
