//! Credentials: the `Secret` type (never printed, wiped on drop) and reading
//! an operator binding's value at spawn time (docs/operations.md, "Credentials"):
//! - `file:PATH`: a file owned by spawnd's user and readable by no one else;
//! - `systemd:NAME`: `$CREDENTIALS_DIRECTORY/NAME` (`LoadCredential=`);
//! - `keyring:DESC`: a `user` key in the Linux kernel keyring, found with
//!   `request_key` from spawnd's keyrings (`keyctl add user DESC VALUE @u`);
//! - `exec:/path/to/helper arg…`: a helper run without a shell, stdin closed,
//!   its stdout the value, killed after [`EXEC_TIMEOUT`] (`pass show x`,
//!   `op read op://…`, `vault kv get -field=token secret/x`).
//!
//! One trailing newline is trimmed; an empty value is refused. The value
//! never travels through argv or an environment, and errors never carry it.

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
pub(crate) enum VaultError {
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
    /// The keyring has no such key, or it cannot be read.
    #[error("keyring:{0}: {1} (add it with `keyctl add user {0} VALUE @u` as spawnd's user)")]
    Keyring(String, std::io::Error),
    /// The helper could not run, failed, or took too long.
    #[error("exec:{0}: {1}")]
    Helper(String, String),
    /// The source gave an empty value.
    #[error("{0}: the value is empty")]
    Empty(String),
    /// The value holds a NUL byte, which no environment variable can carry.
    #[error("{0}: the value holds a NUL byte; an environment variable cannot carry it")]
    Nul(String),
}

/// Appends `more` to `buf`. When `buf` must grow, its bytes move to a larger
/// buffer and the old one is wiped: a plain `Vec` would hand it back to the
/// allocator with the bytes still in it.
pub(crate) fn extend_wiped(buf: &mut Zeroizing<Vec<u8>>, more: &[u8]) {
    let needed = buf.len() + more.len();
    if needed > buf.capacity() {
        let mut grown = Zeroizing::new(Vec::with_capacity(needed.max(2 * buf.capacity())));
        grown.extend_from_slice(buf);
        // The old buffer is dropped here, and zeroed as it goes.
        *buf = grown;
    }
    buf.extend_from_slice(more);
}

/// Everything `reader` gives, in wiped memory (see [`extend_wiped`]); the
/// read buffer is wiped too.
fn read_wiped(mut reader: impl std::io::Read) -> std::io::Result<Zeroizing<Vec<u8>>> {
    let mut out = Zeroizing::new(Vec::new());
    let mut chunk = Zeroizing::new([0u8; 4096]);
    loop {
        match reader.read(&mut chunk[..]) {
            Ok(0) => return Ok(out),
            Ok(n) => extend_wiped(&mut out, &chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// How long an `exec:` helper may take.
pub(crate) const EXEC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads the value of a binding.
pub(crate) fn read_secret(source: &CredentialSource) -> Result<Secret, VaultError> {
    match source {
        CredentialSource::File(path) => read_private_file(path),
        CredentialSource::Systemd(name) => {
            let dir = std::env::var_os("CREDENTIALS_DIRECTORY")
                .ok_or_else(|| VaultError::NoCredentialsDirectory(name.clone()))?;
            read_private_file(&Path::new(&dir).join(name))
        }
        CredentialSource::Keyring(desc) => read_keyring(desc),
        CredentialSource::Exec { program, args } => run_helper(program, args, EXEC_TIMEOUT),
    }
    .and_then(|secret| {
        if secret.expose().is_empty() {
            Err(VaultError::Empty(source.to_string()))
        } else if secret.expose().contains(&0) {
            Err(VaultError::Nul(source.to_string()))
        } else {
            Ok(secret)
        }
    })
}

fn trim_newline(mut bytes: Zeroizing<Vec<u8>>) -> Secret {
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    Secret(bytes)
}

fn read_keyring(desc: &str) -> Result<Secret, VaultError> {
    let c = std::ffi::CString::new(desc).map_err(|_| {
        VaultError::Keyring(
            desc.to_string(),
            std::io::Error::from_raw_os_error(libc::EINVAL),
        )
    })?;
    crate::sys::read_user_key(&c)
        .map(trim_newline)
        .map_err(|e| VaultError::Keyring(desc.to_string(), e))
}

/// Runs an `exec:` helper: no shell, stdin closed, stdout read into wiped
/// memory, stderr kept for the error (its first line), killed at the timeout.
fn run_helper(
    program: &Path,
    args: &[String],
    timeout: std::time::Duration,
) -> Result<Secret, VaultError> {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let shown = program.display().to_string();
    let fail = |why: String| VaultError::Helper(shown.clone(), why);
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!("cannot start: {e}")))?;
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| fail("no stdout".into()))?;
    let mut stderr = child
        .stderr
        .take()
        .ok_or_else(|| fail("no stderr".into()))?;
    let out_reader = std::thread::spawn(move || read_wiped(&mut stdout).unwrap_or_default());
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = (&mut stderr).take(4096).read_to_end(&mut buf);
        buf
    });
    let deadline = std::time::Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(format!(
                    "no answer within {} ms; killed",
                    timeout.as_millis()
                )));
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(5)),
            Err(e) => return Err(fail(format!("wait: {e}"))),
        }
    };
    let value = out_reader
        .join()
        .map_err(|_| fail("reading its output failed".into()))?;
    let err = err_reader.join().unwrap_or_default();
    if !status.success() {
        let first = String::from_utf8_lossy(&err)
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect::<String>();
        return Err(fail(format!("{status}: {first}")));
    }
    Ok(trim_newline(value))
}

/// Opened once, without following a symbolic link at the last component,
/// checked through that descriptor (a regular file, spawnd's own, private)
/// and read through it: nothing can be swapped between the check and the read.
fn read_private_file(path: &Path) -> Result<Secret, VaultError> {
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display().to_string();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| VaultError::Unreadable(shown.clone(), e))?;
    let meta = file
        .metadata()
        .map_err(|e| VaultError::Unreadable(shown.clone(), e))?;
    if !meta.file_type().is_file() {
        return Err(VaultError::Unreadable(
            shown,
            std::io::Error::other("not a regular file"),
        ));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.mode() & 0o077 != 0 || meta.uid() != me {
        return Err(VaultError::Exposed {
            path: shown,
            mode: meta.mode() & 0o7777,
            owner: meta.uid(),
            expected: me,
        });
    }
    let bytes = read_wiped(&file).map_err(|e| VaultError::Unreadable(shown, e))?;
    Ok(trim_newline(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn helper(dir: &tempfile::TempDir, body: &str) -> std::path::PathBuf {
        let p = dir.path().join("helper.sh");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        p
    }

    #[test]
    fn an_exec_helper_gives_its_stdout_without_a_shell() {
        let d = tempfile::tempdir().unwrap();
        // The argument reaches the helper as one word, `$(…)` and all: no shell parses it.
        let p = helper(&d, "printf '%s-value\\n' \"$1\"");
        let s = run_helper(&p, &["tok $(id)".into()], EXEC_TIMEOUT).unwrap();
        assert_eq!(s.expose(), b"tok $(id)-value");
        let failing = helper(&d, "echo 'vault: permission denied' >&2; exit 2");
        let e = run_helper(&failing, &[], EXEC_TIMEOUT)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("permission denied") && e.contains("exit status: 2"),
            "{e}"
        );
        let hanging = helper(&d, "sleep 30");
        let started = std::time::Instant::now();
        let e = run_helper(&hanging, &[], std::time::Duration::from_millis(200))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("killed") && started.elapsed().as_secs() < 5,
            "{e}"
        );
        let empty = helper(&d, "echo");
        let src = CredentialSource::Exec {
            program: empty,
            args: vec![],
        };
        assert!(matches!(read_secret(&src), Err(VaultError::Empty(_))));
        assert!(run_helper(Path::new("/nonexistent/helper"), &[], EXEC_TIMEOUT).is_err());
    }

    #[test]
    fn a_keyring_key_is_read_and_a_missing_one_named() {
        let desc = format!("spawnd-test-{}", std::process::id());
        let c = std::ffi::CString::new(desc.clone()).unwrap();
        crate::sys::add_user_key(&c, b"from-the-keyring\n").unwrap();
        let s = read_secret(&CredentialSource::Keyring(desc)).unwrap();
        assert_eq!(s.expose(), b"from-the-keyring");
        let e = read_secret(&CredentialSource::Keyring("spawnd-test-missing".into())).unwrap_err();
        assert!(e.to_string().contains("keyctl add user"), "{e}");
    }

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
    fn a_symlink_to_a_credential_file_is_refused_and_a_directory_is_not_read() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        std::fs::write(&real, "s3cret").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = read_secret(&CredentialSource::File(link)).unwrap_err();
        assert!(matches!(e, VaultError::Unreadable(..)), "{e}");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let e = read_secret(&CredentialSource::File(d.path().into())).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    #[test]
    fn growing_a_wiped_buffer_keeps_every_byte() {
        let mut buf = Zeroizing::new(Vec::new());
        let mut want = Vec::new();
        for i in 0..2000u32 {
            let piece = i.to_le_bytes();
            extend_wiped(&mut buf, &piece);
            want.extend_from_slice(&piece);
        }
        assert_eq!(&buf[..], &want[..]);
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
