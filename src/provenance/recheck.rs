//! Before each spawn of a verified connector (installed, or a served
//! manifest file stating `provenance_hash`), its files checked
//! against the digests it was loaded with ([`Verified`]): the names in
//! `bin/` and each file's SHA-256, the program's taken from the digest the
//! gate computed as it opened it, so the program is read once per spawn
//! and only the manifest (small) is read again. Equal names and equal
//! digests for every file of the stream mean an equal stream, so the
//! content hash holds without hashing the stream again; on a difference the
//! directory is hashed whole, to name the content hash it has now.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::content::shipped_names;
use super::content::{hash_shipped_files, MAX_MANIFEST_BYTES, SHIPPED_DIR};
use crate::manifest::{Sha256Digest, Verified};
use crate::policy::ContentChanged;

/// Checks `verified`'s files; `hashed` holds digests already taken
/// this spawn, by resolved path.
pub fn recheck_verified(
    verified: &Verified,
    hashed: &[(PathBuf, Sha256Digest)],
) -> Result<(), ContentChanged> {
    first_difference(verified, hashed).map_or(Ok(()), |what| {
        Err(ContentChanged {
            what,
            found: content_now(verified),
        })
    })
}

/// The content hash of the directory's stream as it is now: the files of
/// `bin/`, then the manifest file the stream ends with.
fn content_now(verified: &Verified) -> Option<Sha256Digest> {
    let (manifest, _) = verified.files.last()?;
    let (_, stream) = hash_shipped_files(&verified.dir).ok()?;
    let text = super::files::read_small(&verified.dir.join(manifest), MAX_MANIFEST_BYTES).ok()?;
    Some(stream.finish(&text))
}

/// What differs first, if anything.
fn first_difference(verified: &Verified, hashed: &[(PathBuf, Sha256Digest)]) -> Option<String> {
    let prefix = format!("{SHIPPED_DIR}/");
    let loaded: Vec<&str> = verified
        .files
        .iter()
        .filter_map(|(path, _)| path.strip_prefix(&prefix))
        .collect();
    let names = match shipped_names(&verified.dir) {
        Ok(names) => names,
        Err(e) => return Some(e.to_string()),
    };
    if names != loaded {
        return Some(format!(
            "{SHIPPED_DIR}/ holds [{}] where it held [{}]",
            names.join(", "),
            loaded.join(", ")
        ));
    }
    let last = verified.files.len().saturating_sub(1);
    for (i, (rel, expected)) in verified.files.iter().enumerate() {
        let path = verified.dir.join(rel);
        let known = hashed.iter().find(|(p, _)| *p == path).map(|(_, h)| *h);
        // The stream ends with the manifest, which spawnd reads only so far.
        let limit = if i == last {
            MAX_MANIFEST_BYTES + 1
        } else {
            u64::MAX
        };
        let found = match known {
            Some(digest) => digest,
            None => match digest_of(&path, limit) {
                Ok(digest) => digest,
                Err(e) => return Some(format!("{rel}: {e}")),
            },
        };
        if found != *expected {
            return Some(format!("{rel} is {found}, loaded as {expected}"));
        }
    }
    None
}

/// The SHA-256 of a stored file's first `limit` bytes, opened without
/// following a link (a manifest larger than any spawnd reads hashes short,
/// so it counts as changed).
fn digest_of(path: &Path, limit: u64) -> std::io::Result<Sha256Digest> {
    let file = super::files::open_regular(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file.take(limit), &mut hasher)?;
    Ok(Sha256Digest(hasher.finalize().into()))
}
