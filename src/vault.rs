//! Credentials: the `Secret` type (never printed, wiped on drop) and reading
//! an operator binding's value at spawn time. Sources read here: `file:` (a
//! file owned by spawnd's user and readable by no one else) and `systemd:NAME`
//! (`$CREDENTIALS_DIRECTORY/NAME`). One trailing newline is trimmed.

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use zeroize::Zeroizing;

use crate::config::CredentialSource;

/// A credential value. No `Debug`/`Display` of the bytes; zeroed when dropped.
pub struct Secret(Zeroizing<Vec<u8>>);

impl Secret {
    /// Wraps bytes.
    pub fn new(bytes: Vec<u8>) -> Secret {
        Secret(Zeroizing::new(bytes))
    }

    /// The bytes, for the one place that puts them into the child's env.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret([REDACTED; {} bytes])", self.0.len())
    }
}

/// Why a credential could not be read (the value is never part of it).
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// The file is readable by others or owned by someone else.
    #[error("{path}: mode {mode:o} owner {owner}: a credential file must be owned by uid {expected} and readable by no one else (chmod 600)")]
    Exposed {
        /// The file.
        path: String,
        /// Its mode bits.
        mode: u32,
        /// Its owner.
        owner: u32,
        /// spawnd's uid.
        expected: u32,
    },
    /// It could not be read.
    #[error("{0}: {1}")]
    Unreadable(String, std::io::Error),
    /// `$CREDENTIALS_DIRECTORY` is not set.
    #[error(
        "systemd:{0}: $CREDENTIALS_DIRECTORY is not set (run under systemd with LoadCredential=)"
    )]
    NoCredentialsDirectory(String),
    /// A source kind this command does not read.
    #[error("{0}: `spawnd run` reads file: and systemd: sources; keyring: and exec: are read by the daemon")]
    Unsupported(String),
}

/// Reads the value of a binding.
pub fn read_secret(source: &CredentialSource) -> Result<Secret, VaultError> {
    match source {
        CredentialSource::File(path) => read_private_file(path),
        CredentialSource::Systemd(name) => {
            let dir = std::env::var_os("CREDENTIALS_DIRECTORY")
                .ok_or_else(|| VaultError::NoCredentialsDirectory(name.clone()))?;
            read_private_file(&Path::new(&dir).join(name))
        }
        other => Err(VaultError::Unsupported(other.to_string())),
    }
}

fn read_private_file(path: &Path) -> Result<Secret, VaultError> {
    let shown = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| VaultError::Unreadable(shown.clone(), e))?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.mode() & 0o077 != 0 || meta.uid() != me {
        return Err(VaultError::Exposed {
            path: shown,
            mode: meta.mode() & 0o7777,
            owner: meta.uid(),
            expected: me,
        });
    }
    let mut bytes = std::fs::read(path).map_err(|e| VaultError::Unreadable(shown, e))?;
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    Ok(Secret::new(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_private_file_is_read_with_one_newline_trimmed_and_never_debug_printed() {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), "s3cret\n\n").unwrap();
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
        let s = read_secret(&CredentialSource::File(f.path().into())).unwrap();
        assert_eq!(s.expose(), b"s3cret\n");
        assert!(!format!("{s:?}").contains("s3cret"));
    }

    #[test]
    fn a_group_readable_file_is_refused() {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(matches!(
            read_secret(&CredentialSource::File(f.path().into())),
            Err(VaultError::Exposed { .. })
        ));
    }
}
