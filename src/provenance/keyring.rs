//! The operator's keyring (`[connectors] keyring`): which publisher keys are
//! trusted for which authority. One directory per authority, one file per
//! key, `KEYRING/<scheme>/<owner>/<key id>.pub`, each the key's PEM as
//! `openssl pkey -pubout` prints it, so the keyring can be read, audited and
//! copied with ordinary tools. Several keys per authority make a rotation:
//! trust the new key, install what it signed, then remove the old one.
//!
//! A key file whose name is not the id of the key it holds, or that
//! someone other than its owner (root or this user) could change, is
//! refused: the keyring is as trusted as spawnd.

use std::path::{Path, PathBuf};

use ed25519_dalek::VerifyingKey;

use super::files;
use super::identity::Authority;
use super::keys::{parse_public_key, public_key_pem, KeyError, KeyId};

/// The largest key file spawnd reads.
const MAX_KEY_FILE_BYTES: u64 = 16 << 10;

/// A key the keyring trusts for an authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    /// For whom.
    pub authority: Authority,
    /// Its id.
    pub id: KeyId,
    /// The key.
    pub key: VerifyingKey,
    /// Its file in the keyring.
    pub file: PathBuf,
}

/// Why the keyring could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum KeyringError {
    /// A file or directory that could not be read or written.
    #[error("keyring {path}: {cause}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        cause: String,
    },
    /// The key file given does not exist.
    #[error(
        "{path} does not exist: give the publisher's public key file (its keys/publisher.pub)"
    )]
    Missing {
        /// The file given.
        path: PathBuf,
    },
    /// A file in the keyring that is not a key spawnd wrote, or not safe.
    #[error("keyring file {path} {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong and how to fix it.
        why: String,
    },
    /// A key file given to `trust` that is not a public key.
    #[error("{path}: {source}")]
    Key {
        /// The file given.
        path: PathBuf,
        /// Why.
        source: KeyError,
    },
    /// Nothing to remove.
    #[error("{0}")]
    NotFound(String),
}

/// What `trust` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustOutcome {
    /// The key was added.
    Added,
    /// The key was trusted for the authority already.
    AlreadyTrusted,
}

/// The keyring at a directory.
#[derive(Debug, Clone)]
pub struct Keyring {
    root: PathBuf,
}

impl Keyring {
    /// The keyring at `root` (it may not exist yet: then it is empty).
    pub fn at(root: &Path) -> Keyring {
        Keyring {
            root: root.to_path_buf(),
        }
    }

    /// Its directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn authority_dir(&self, authority: &Authority) -> PathBuf {
        self.root.join(authority.scheme()).join(authority.owner())
    }

    /// Trusts the public key in `key_file` for `authority`.
    pub fn trust(
        &self,
        authority: &Authority,
        key_file: &Path,
    ) -> Result<(TrustedKey, TrustOutcome), KeyringError> {
        let text = files::read_small(key_file, MAX_KEY_FILE_BYTES).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                KeyringError::Missing {
                    path: key_file.to_path_buf(),
                }
            } else {
                io(key_file, e)
            }
        })?;
        let text = String::from_utf8(text).map_err(|_| KeyringError::Key {
            path: key_file.to_path_buf(),
            source: KeyError::Public("the file is not text".into()),
        })?;
        let key = parse_public_key(&text).map_err(|source| KeyringError::Key {
            path: key_file.to_path_buf(),
            source,
        })?;
        let id = KeyId::of(&key);
        let dir = self.authority_dir(authority);
        let file = dir.join(format!("{id}.pub"));
        let trusted = TrustedKey {
            authority: authority.clone(),
            id,
            key,
            file: file.clone(),
        };
        if self.keys_for(authority)?.iter().any(|k| k.key == key) {
            return Ok((trusted, TrustOutcome::AlreadyTrusted));
        }
        files::create_dirs(&dir).map_err(|e| io(&dir, e))?;
        self.check_tree(&dir)?;
        let pem = public_key_pem(&key).map_err(|source| KeyringError::Key {
            path: key_file.to_path_buf(),
            source,
        })?;
        files::write_atomically(&file, pem.as_bytes(), 0o644).map_err(|e| io(&file, e))?;
        Ok((trusted, TrustOutcome::Added))
    }

    /// Every trusted key, by authority and id.
    pub fn keys(&self) -> Result<Vec<TrustedKey>, KeyringError> {
        let mut out = Vec::new();
        for scheme in subdirs(&self.root)? {
            for owner in subdirs(&self.root.join(&scheme))? {
                let text = format!("{scheme}://{owner}");
                let authority = Authority::parse(&text).map_err(|why| KeyringError::Corrupt {
                    path: self.root.join(&scheme).join(&owner),
                    why: format!("is not an authority's directory ({why}): remove it"),
                })?;
                out.extend(self.keys_for(&authority)?);
            }
        }
        Ok(out)
    }

    /// The keys trusted for `authority`, by id.
    pub fn keys_for(&self, authority: &Authority) -> Result<Vec<TrustedKey>, KeyringError> {
        let dir = self.authority_dir(authority);
        if !dir.exists() {
            return Ok(Vec::new());
        }
        self.check_tree(&dir)?;
        let mut keys = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| io(&dir, e))? {
            let path = entry.map_err(|e| io(&dir, e))?.path();
            keys.push(read_key_file(&path, authority)?);
        }
        keys.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(keys)
    }

    /// Removes `authority`'s key `id`, or all its keys; returns what was
    /// removed.
    pub fn remove(
        &self,
        authority: &Authority,
        id: Option<&KeyId>,
    ) -> Result<Vec<TrustedKey>, KeyringError> {
        let keys = self.keys_for(authority)?;
        let chosen: Vec<TrustedKey> = keys
            .into_iter()
            .filter(|k| id.is_none_or(|id| &k.id == id))
            .collect();
        if chosen.is_empty() {
            return Err(KeyringError::NotFound(match id {
                Some(id) => format!(
                    "no key {id} is trusted for {authority}: `spawnd keyring list` shows the keys"
                ),
                None => format!(
                    "no key is trusted for {authority}: `spawnd keyring list` shows the keys"
                ),
            }));
        }
        for k in &chosen {
            std::fs::remove_file(&k.file).map_err(|e| io(&k.file, e))?;
        }
        let dir = self.authority_dir(authority);
        files::sync_dir(&dir).map_err(|e| io(&dir, e))?;
        // An authority with no key left leaves no directory behind.
        if std::fs::remove_dir(&dir).is_ok() {
            let _ = std::fs::remove_dir(self.root.join(authority.scheme()));
        }
        Ok(chosen)
    }

    /// The keyring's root, the scheme's and the authority's directories
    /// are each changeable by their owner alone.
    fn check_tree(&self, authority_dir: &Path) -> Result<(), KeyringError> {
        let mut dirs = vec![self.root.clone()];
        if let Some(scheme) = authority_dir.parent() {
            dirs.push(scheme.to_path_buf());
        }
        dirs.push(authority_dir.to_path_buf());
        for d in dirs {
            files::check_owner_and_mode(&d).map_err(|why| KeyringError::Corrupt {
                path: d.clone(),
                why: format!("is not safe: {why}"),
            })?;
        }
        Ok(())
    }
}

/// One key file: named `<id>.pub` after the key it holds, safe, a key.
fn read_key_file(path: &Path, authority: &Authority) -> Result<TrustedKey, KeyringError> {
    let corrupt = |why: String| KeyringError::Corrupt {
        path: path.to_path_buf(),
        why,
    };
    files::check_owner_and_mode(path).map_err(|why| corrupt(format!("is not safe: {why}")))?;
    let bytes = files::read_small(path, MAX_KEY_FILE_BYTES).map_err(|e| io(path, e))?;
    let key = std::str::from_utf8(&bytes)
        .map_err(|_| KeyError::Public("not text".into()))
        .and_then(parse_public_key)
        .map_err(|e| {
            corrupt(format!(
                "does not hold a public key ({e}): remove it and trust the key again"
            ))
        })?;
    let id = KeyId::of(&key);
    let expected = format!("{id}.pub");
    if path.file_name().and_then(|n| n.to_str()) != Some(expected.as_str()) {
        return Err(corrupt(format!(
            "holds key {id} under another name: a key file is named after its key ({expected}); remove it and trust the key with `spawnd keyring trust`"
        )));
    }
    Ok(TrustedKey {
        authority: authority.clone(),
        id,
        key,
        file: path.to_path_buf(),
    })
}

/// The names of the directories in `dir` (none when it does not exist).
fn subdirs(dir: &Path) -> Result<Vec<String>, KeyringError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io(dir, e))?;
        let path = entry.path();
        if !entry.file_type().map_err(|e| io(&path, e))?.is_dir() {
            return Err(KeyringError::Corrupt {
                path,
                why: "is not a directory: the keyring holds <scheme>/<owner>/<key id>.pub only; remove it".into(),
            });
        }
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

fn io(path: &Path, e: std::io::Error) -> KeyringError {
    KeyringError::Io {
        path: path.to_path_buf(),
        cause: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provenance::keys::new_signing_key;

    fn pub_file(dir: &Path, name: &str) -> (PathBuf, VerifyingKey) {
        let key = new_signing_key().unwrap().verifying_key();
        let path = dir.join(name);
        std::fs::write(&path, public_key_pem(&key).unwrap()).unwrap();
        (path, key)
    }

    #[test]
    fn keys_are_trusted_per_authority_listed_and_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let ring = Keyring::at(&tmp.path().join("keyring"));
        let acme = Authority::parse("github://acme").unwrap();
        let other = Authority::parse("gitlab://other").unwrap();
        assert!(ring.keys().unwrap().is_empty());
        let (f1, k1) = pub_file(tmp.path(), "one.pub");
        let (f2, k2) = pub_file(tmp.path(), "two.pub");
        assert_eq!(ring.trust(&acme, &f1).unwrap().1, TrustOutcome::Added);
        assert_eq!(
            ring.trust(&acme, &f1).unwrap().1,
            TrustOutcome::AlreadyTrusted
        );
        ring.trust(&acme, &f2).unwrap();
        ring.trust(&other, &f2).unwrap();
        let all = ring.keys().unwrap();
        assert_eq!(all.len(), 3);
        let acme_keys: Vec<VerifyingKey> = ring
            .keys_for(&acme)
            .unwrap()
            .iter()
            .map(|k| k.key)
            .collect();
        assert!(acme_keys.contains(&k1) && acme_keys.contains(&k2));
        let id1 = KeyId::of(&k1);
        let file = tmp.path().join(format!("keyring/github/acme/{id1}.pub"));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            public_key_pem(&k1).unwrap()
        );
        assert_eq!(ring.remove(&acme, Some(&id1)).unwrap().len(), 1);
        assert!(matches!(
            ring.remove(&acme, Some(&id1)),
            Err(KeyringError::NotFound(_))
        ));
        assert_eq!(ring.remove(&acme, None).unwrap().len(), 1);
        assert!(!tmp.path().join("keyring/github").exists());
        assert_eq!(ring.keys().unwrap().len(), 1);
    }

    #[test]
    fn a_key_file_that_does_not_match_its_name_or_is_not_safe_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let ring = Keyring::at(&tmp.path().join("keyring"));
        let acme = Authority::parse("github://acme").unwrap();
        let (f1, _) = pub_file(tmp.path(), "one.pub");
        let (trusted, _) = ring.trust(&acme, &f1).unwrap();
        let renamed = trusted.file.with_file_name("0000000000000000.pub");
        std::fs::copy(&trusted.file, &renamed).unwrap();
        let e = ring.keys_for(&acme).unwrap_err().to_string();
        assert!(e.contains("under another name"), "{e}");
        std::fs::remove_file(&renamed).unwrap();
        std::fs::set_permissions(&trusted.file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = ring.keys_for(&acme).unwrap_err().to_string();
        assert!(e.contains("chmod go-w"), "{e}");
        let private =
            crate::provenance::keys::signing_key_pem(&new_signing_key().unwrap()).unwrap();
        let pf = tmp.path().join("private");
        std::fs::write(&pf, private.as_bytes()).unwrap();
        let e = ring.trust(&acme, &pf).unwrap_err().to_string();
        assert!(e.contains("private key"), "{e}");
    }
}
