//! The one impure step the gate takes: looking at files. The gate asks a
//! `ProgramInspector`; the real one (`crate::program::ProgramOpener`) opens
//! the program once, checks it and hashes it through that same descriptor,
//! and keeps the descriptor for execution; for a connector verified at load
//! (installed, or a manifest file stating `provenance_hash`) it also
//! checks its files against their digests at load.
//! Tests use a table instead.

use std::path::{Path, PathBuf};

use crate::manifest::{Sha256Digest, Verified};
use crate::plan::FileId;

/// What the gate needs to know about a program file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramFacts {
    /// The path after symlinks (what was opened).
    pub resolved: PathBuf,
    /// Whether it is a regular file.
    pub regular: bool,
    /// Setuid or setgid bit set.
    pub setid: bool,
    /// Carries file capabilities (`security.capability`).
    pub file_caps: bool,
    /// SHA-256 of its bytes (meaningful only for a regular file).
    pub sha256: Sha256Digest,
    /// The interpreter (`#!`) or ELF loader (`PT_INTERP`) it names, when
    /// absolute ([`crate::interpreter`]).
    pub interpreter: Option<crate::interpreter::Interpreter>,
    /// Its device and inode, as opened.
    pub file: FileId,
}

/// Why a program could not be inspected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramFault {
    /// No file at the path.
    #[error("{path} does not exist")]
    Missing {
        /// The path.
        path: PathBuf,
    },
    /// Any other failure to open, stat or read it.
    #[error("cannot read {path}: {cause}")]
    Unreadable {
        /// The path.
        path: PathBuf,
        /// The failing call and errno.
        cause: String,
    },
}

/// How a verified connector's files differ from what was loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentChanged {
    /// What differs: a file changed, added or removed, or why it could not
    /// be read.
    pub what: String,
    /// The content hash the entry's files have now, when they could be
    /// hashed.
    pub found: Option<Sha256Digest>,
}

/// Looks at files for the gate.
pub trait ProgramInspector {
    /// Opens, checks and hashes the program at `path` (symlinks followed).
    fn inspect(&mut self, path: &Path) -> Result<ProgramFacts, ProgramFault>;

    /// Checks that the verified connector's files are still those
    /// it was loaded with: the same names in `bin/`, each file's digest as
    /// at load. `hashed` holds digests this spawn already took (the
    /// program's, by resolved path), used instead of reading those files
    /// again.
    fn recheck_verified(
        &mut self,
        verified: &Verified,
        hashed: &[(PathBuf, Sha256Digest)],
    ) -> Result<(), ContentChanged>;
}
