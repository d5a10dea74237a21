//! The connector directory and its content hash (docs/provenance.md, "The
//! content hash").
//!
//! A connector directory holds `manifest.toml` at its root and, in `bin/`,
//! the files the connector ships (its program, a script, data it reads):
//! regular files only, directly in `bin/`, named with letters, digits, `.`,
//! `_` and `-` and not starting with `.`. Nothing else in the directory is
//! part of the connector (a `signature.json`, a README, `keys/`).
//!
//! The content hash is the SHA-256 of one byte stream: the files of `bin/`
//! in byte order of their names, then `manifest.toml`, each whole and with
//! nothing between them, so `cat bin/x manifest.toml | sha256sum` computes
//! it (`LC_ALL=C cat bin/* manifest.toml` for several files). The shipped
//! files come first so that a spawn, which hashes the program it runs
//! anyway, can clone the hash state after the program ([`ContentHasher`]):
//! finalizing the clone gives the program's own hash, going on with the
//! manifest gives the content hash, from one read of each file.
//!
//! A plain concatenation does not fix where one file ends and the next
//! begins. The manifest's `provenance_hash`, the hash of the shipped part
//! (of the one shipped file, when there is one), does: it is required when
//! anything is shipped, so moving bytes between the program and the
//! manifest changes one or the other's hash. A signature lists every file's
//! size and hash too.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::manifest::Sha256Digest;

/// The manifest's file name in a connector directory.
pub(crate) const MANIFEST_FILE: &str = "manifest.toml";
/// The directory of shipped files.
pub(crate) const SHIPPED_DIR: &str = "bin";
/// The largest manifest spawnd reads.
pub(crate) const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Why a connector directory could not be hashed.
#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    /// No `manifest.toml` at the root.
    #[error("{dir} has no {MANIFEST_FILE}: a connector directory holds its manifest at its root (and shipped files in {SHIPPED_DIR}/)")]
    NoManifest {
        /// The directory.
        dir: PathBuf,
    },
    /// The directory does not exist.
    #[error("{path} does not exist: give the connector's directory")]
    Missing {
        /// The path.
        path: PathBuf,
    },
    /// A file or directory that could not be read.
    #[error("cannot read {path}: {cause}")]
    Unreadable {
        /// The path.
        path: PathBuf,
        /// What failed.
        cause: String,
    },
    /// Something in `bin/` that is not a shippable file.
    #[error("{path} {why}")]
    NotShippable {
        /// The entry.
        path: PathBuf,
        /// Why it cannot be shipped, and what to do.
        why: &'static str,
    },
    /// The manifest is not UTF-8 text.
    #[error("{path} is not UTF-8 text")]
    NotText {
        /// The manifest.
        path: PathBuf,
    },
}

/// One file of the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamFile {
    /// Its path in the directory: `bin/NAME` or `manifest.toml`.
    pub path: String,
    /// Its size.
    pub bytes: u64,
    /// The SHA-256 of its bytes.
    pub sha256: Sha256Digest,
}

/// A connector directory, hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorContent {
    /// The stream's files, in stream order (the manifest last).
    pub files: Vec<StreamFile>,
    /// The hash of the shipped part (the `bin/` files in order), `None`
    /// when nothing is shipped: what `provenance_hash` must say.
    pub shipped: Option<Sha256Digest>,
    /// The content hash.
    pub content: Sha256Digest,
    /// The manifest's text.
    pub manifest_text: String,
}

/// The stream's hash state: shipped bytes first, then the manifest. The
/// shipped part's hash is read from a clone, so the bytes are hashed once.
#[derive(Clone, Default)]
pub(crate) struct ContentHasher {
    state: Sha256,
    any_shipped: bool,
}

impl ContentHasher {
    /// A hasher at the start of the stream.
    pub(crate) fn new() -> ContentHasher {
        ContentHasher::default()
    }

    /// Feeds bytes of the shipped part (an empty slice marks an empty
    /// shipped file: the connector still ships something).
    pub(crate) fn shipped(&mut self, bytes: &[u8]) {
        self.any_shipped = true;
        self.state.update(bytes);
    }

    /// The hash of the shipped part so far, from a clone of the state
    /// (`None` when nothing is shipped).
    pub(crate) fn shipped_digest(&self) -> Option<Sha256Digest> {
        self.any_shipped
            .then(|| Sha256Digest(self.state.clone().finalize().into()))
    }

    /// Feeds the manifest's bytes and returns the content hash.
    pub(crate) fn finish(mut self, manifest: &[u8]) -> Sha256Digest {
        self.state.update(manifest);
        Sha256Digest(self.state.finalize().into())
    }
}

/// Checks that `dir` is a directory with a `manifest.toml` (not a link).
pub(crate) fn check_connector_dir(dir: &Path) -> Result<(), ContentError> {
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ContentError::Missing {
            path: dir.to_path_buf(),
        }),
        Err(e) => Err(unreadable(dir, e)),
        Ok(meta) if !meta.is_dir() => Err(ContentError::Unreadable {
            path: dir.to_path_buf(),
            cause: "not a directory: give the connector's directory".into(),
        }),
        Ok(_) if std::fs::symlink_metadata(dir.join(MANIFEST_FILE)).is_err() => {
            Err(ContentError::NoManifest {
                dir: dir.to_path_buf(),
            })
        }
        Ok(_) => Ok(()),
    }
}

/// Reads and hashes the connector directory `dir`.
pub(crate) fn hash_connector(dir: &Path) -> Result<ConnectorContent, ContentError> {
    check_connector_dir(dir)?;
    let manifest_path = dir.join(MANIFEST_FILE);
    let (mut files, hasher) = hash_shipped_files(dir)?;
    let shipped = hasher.shipped_digest();
    let manifest = super::files::read_small(&manifest_path, MAX_MANIFEST_BYTES)
        .map_err(|e| unreadable(&manifest_path, e))?;
    files.push(StreamFile {
        path: MANIFEST_FILE.into(),
        bytes: manifest.len() as u64,
        sha256: Sha256Digest(Sha256::digest(&manifest).into()),
    });
    let content = hasher.finish(&manifest);
    let manifest_text = String::from_utf8(manifest).map_err(|_| ContentError::NotText {
        path: manifest_path.clone(),
    })?;
    Ok(ConnectorContent {
        files,
        shipped,
        content,
        manifest_text,
    })
}

/// The hash of what `dir` ships (its `bin/` files in the stream's order),
/// `None` when it ships nothing: what its manifest's `provenance_hash` must
/// say. `dir` need not hold a `manifest.toml` (`spawnd run --manifest F`
/// checks F's directory, whatever F is called).
pub(crate) fn hash_shipped_part(dir: &Path) -> Result<Option<Sha256Digest>, ContentError> {
    Ok(hash_shipped_files(dir)?.1.shipped_digest())
}

/// Each shipped file of `dir`, hashed on its own and into the stream, in
/// the stream's order.
pub(crate) fn hash_shipped_files(
    dir: &Path,
) -> Result<(Vec<StreamFile>, ContentHasher), ContentError> {
    let mut hasher = ContentHasher::new();
    let mut files = Vec::new();
    for name in shipped_names(dir)? {
        let rel = format!("{SHIPPED_DIR}/{name}");
        files.push(hash_shipped(&dir.join(&rel), &rel, &mut hasher)?);
    }
    Ok((files, hasher))
}

fn unreadable(path: &Path, e: std::io::Error) -> ContentError {
    ContentError::Unreadable {
        path: path.to_path_buf(),
        cause: e.to_string(),
    }
}

/// The names in `bin/`, in byte order; each must be a plain regular file
/// with a name the shell recipe's glob (`bin/*`, `LC_ALL=C`) lists the same.
pub(crate) fn shipped_names(dir: &Path) -> Result<Vec<String>, ContentError> {
    let bin = dir.join(SHIPPED_DIR);
    match std::fs::symlink_metadata(&bin) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(unreadable(&bin, e)),
        Ok(meta) if !meta.file_type().is_dir() => {
            return Err(ContentError::NotShippable {
                path: bin,
                why: "is not a directory: shipped files go in a bin/ directory",
            })
        }
        Ok(_) => {}
    }
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&bin).map_err(|e| unreadable(&bin, e))? {
        let entry = entry.map_err(|e| unreadable(&bin, e))?;
        let path = entry.path();
        let name = entry.file_name().into_string().map_err(|_| ContentError::NotShippable {
            path: path.clone(),
            why: "has a name that is not UTF-8: name shipped files with letters, digits, `.`, `_` and `-`",
        })?;
        check_shipped_name(&name).map_err(|why| ContentError::NotShippable {
            path: path.clone(),
            why,
        })?;
        let kind = entry.file_type().map_err(|e| unreadable(&path, e))?;
        if !kind.is_file() {
            return Err(ContentError::NotShippable {
                path,
                why: "is not a regular file: bin/ holds only files (no directories, symbolic links or devices)",
            });
        }
        names.push(name);
    }
    names.sort();
    Ok(names)
}

/// A shipped file's name: what the recipe's glob lists, in the same order
/// under `LC_ALL=C` (no leading `.`, which `*` skips).
fn check_shipped_name(name: &str) -> Result<(), &'static str> {
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if name.starts_with('.') {
        Err("starts with `.`: the shell recipe's `bin/*` would leave it out; rename it or remove it")
    } else if !plain {
        Err("has a name with characters other than letters, digits, `.`, `_` and `-`: rename it")
    } else {
        Ok(())
    }
}

/// Hashes one shipped file into the stream and on its own.
fn hash_shipped(
    path: &Path,
    rel: &str,
    stream: &mut ContentHasher,
) -> Result<StreamFile, ContentError> {
    let mut file = super::files::open_regular(path).map_err(|e| unreadable(path, e))?;
    let mut own = Sha256::new();
    stream.shipped(&[]);
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(unreadable(path, e)),
        };
        own.update(&buf[..n]);
        stream.shipped(&buf[..n]);
        bytes += n as u64;
    }
    Ok(StreamFile {
        path: rel.to_string(),
        bytes,
        sha256: Sha256Digest(own.finalize().into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(bytes: &[u8]) -> Sha256Digest {
        Sha256Digest(Sha256::digest(bytes).into())
    }

    fn connector(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (rel, bytes) in files {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
        dir
    }

    #[test]
    fn the_stream_is_the_shipped_files_in_name_order_then_the_manifest() {
        let dir = connector(&[
            ("manifest.toml", b"M"),
            ("bin/b", b"BB"),
            ("bin/a", b"A"),
            ("bin/Z", b"z"),
            ("README", b"not shipped"),
            ("signature.json", b"{}"),
        ]);
        let c = hash_connector(dir.path()).unwrap();
        // Byte order: uppercase before lowercase, as `LC_ALL=C` globbing.
        let paths: Vec<&str> = c.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["bin/Z", "bin/a", "bin/b", "manifest.toml"]);
        assert_eq!(c.content, sha(b"zABBM"));
        assert_eq!(c.shipped, Some(sha(b"zABB")));
        assert_eq!(c.files[2].bytes, 2);
        assert_eq!(c.files[2].sha256, sha(b"BB"));
        assert_eq!(c.files[3].sha256, sha(b"M"));
        assert_eq!(c.manifest_text, "M");
    }

    #[test]
    fn without_shipped_files_the_content_hash_is_the_manifests_own() {
        let dir = connector(&[("manifest.toml", b"[connector]\n")]);
        let c = hash_connector(dir.path()).unwrap();
        assert_eq!(c.content, sha(b"[connector]\n"));
        assert_eq!(c.shipped, None);
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        assert_eq!(hash_connector(dir.path()).unwrap(), c);
    }

    #[test]
    fn the_clone_of_the_state_gives_the_programs_own_hash() {
        let mut h = ContentHasher::new();
        assert_eq!(h.shipped_digest(), None);
        h.shipped(b"prog");
        h.shipped(b"ram");
        assert_eq!(h.shipped_digest(), Some(sha(b"program")));
        assert_eq!(h.finish(b"manifest"), sha(b"programmanifest"));
    }

    #[test]
    fn the_shipped_part_alone_hashes_as_in_the_connector_hash() {
        let dir = connector(&[("x.toml", b"M"), ("bin/b", b"BB"), ("bin/a", b"A")]);
        assert_eq!(hash_shipped_part(dir.path()).unwrap(), Some(sha(b"ABB")));
        let dir = connector(&[("x.toml", b"M")]);
        assert_eq!(hash_shipped_part(dir.path()).unwrap(), None);
        let dir = connector(&[("x.toml", b"M"), ("bin/.x", b"A")]);
        assert!(hash_shipped_part(dir.path()).is_err());
    }

    #[test]
    fn what_cannot_be_shipped_is_refused_by_name() {
        let dir = connector(&[("manifest.toml", b"M"), ("bin/.hidden", b"x")]);
        let e = hash_connector(dir.path()).unwrap_err().to_string();
        assert!(e.contains("starts with `.`"), "{e}");

        let dir = connector(&[("manifest.toml", b"M"), ("bin/sub/x", b"x")]);
        let e = hash_connector(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");

        let dir = connector(&[("manifest.toml", b"M"), ("bin/x", b"x")]);
        std::os::unix::fs::symlink("/usr/bin/true", dir.path().join("bin/t")).unwrap();
        let e = hash_connector(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");

        let dir = connector(&[("manifest.toml", b"M"), ("bin/a b", b"x")]);
        let e = hash_connector(dir.path()).unwrap_err().to_string();
        assert!(e.contains("rename it"), "{e}");

        let dir = connector(&[("bin/x", b"x")]);
        let e = hash_connector(dir.path()).unwrap_err().to_string();
        assert!(e.contains("has no manifest.toml"), "{e}");

        let dir = connector(&[("real.toml", b"M")]);
        std::os::unix::fs::symlink(
            dir.path().join("real.toml"),
            dir.path().join("manifest.toml"),
        )
        .unwrap();
        let e = hash_connector(dir.path()).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");

        let dir = connector(&[("manifest.toml", b"\xff\xfe")]);
        let e = hash_connector(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not UTF-8"), "{e}");
    }
}
