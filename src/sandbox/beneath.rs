//! Walking paths without following symlinks. Every place spawnd creates or
//! mounts something whose path passes through a writable scope goes through
//! here: each component is opened with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` relative to the one before,
//! and a missing one is created with `mkdirat`. A symlink planted by an
//! earlier run (or a concurrent one sharing the scope) is refused, never
//! followed.

use std::os::fd::OwnedFd;
use std::path::{Component, Path};

use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{mkdirat, Mode};

use super::StepError;

/// What to create when the last component is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Create {
    /// Nothing: it must exist.
    Nothing,
    /// A directory with this mode.
    Dir(u32),
    /// An empty regular file with this mode.
    File(u32),
}

fn how(flags: OFlag) -> OpenHow {
    OpenHow::new().flags(flags | OFlag::O_CLOEXEC).resolve(
        ResolveFlag::RESOLVE_BENEATH
            | ResolveFlag::RESOLVE_NO_SYMLINKS
            | ResolveFlag::RESOLVE_NO_MAGICLINKS,
    )
}

fn fail(what: String) -> impl FnOnce(nix::Error) -> StepError {
    move |e| {
        let hint = if e == nix::Error::ELOOP {
            " (a symlink is in the way; spawnd never follows one here)"
        } else {
            ""
        };
        StepError::new(format!("{what}{hint}"), e.into())
    }
}

/// Opens `rel` beneath `root` (O_PATH), creating missing directories on the
/// way and the last component as `create` says. `root` is a directory fd.
///
/// The whole path is tried in one `openat2` first (the resolve flags hold for
/// every component); only a missing part makes it walk, and below a directory
/// it has just created itself (or at the last component, known missing) it
/// creates without looking first.
pub fn open_beneath(root: &OwnedFd, rel: &Path, create: Create) -> Result<OwnedFd, StepError> {
    let parts: Vec<&std::ffi::OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p),
            _ => None,
        })
        .collect();
    let shown = rel.display().to_string();
    let flags_for = |last: bool| {
        if last && !matches!(create, Create::Dir(_)) {
            OFlag::O_PATH
        } else {
            OFlag::O_PATH | OFlag::O_DIRECTORY
        }
    };
    let whole: std::path::PathBuf = parts.iter().collect();
    let whole = if parts.is_empty() {
        Path::new(".")
    } else {
        whole.as_path()
    };
    match openat2(root, whole, how(flags_for(true))) {
        Err(nix::Error::ENOENT) if create != Create::Nothing => {}
        done => return done.map_err(fail(format!("open {shown}"))),
    }
    let mut current: Option<OwnedFd> = None;
    let mut created_parent = false;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let dir = current.as_ref().unwrap_or(root);
        let flags = flags_for(last);
        // The whole path was just found missing: below a directory made here,
        // and at the last component, there is nothing to look for.
        let probe = if created_parent || last {
            Err(nix::Error::ENOENT)
        } else {
            openat2(dir, *part, how(flags))
        };
        let next = match probe {
            Err(nix::Error::ENOENT) if !last || create != Create::Nothing => {
                created_parent = match (last, create) {
                    (true, Create::File(mode)) => {
                        let created = openat2(
                            dir,
                            *part,
                            how(OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY)
                                .mode(Mode::from_bits_truncate(mode)),
                        );
                        match created {
                            Ok(_) | Err(nix::Error::EEXIST) => false,
                            Err(e) => return Err(fail(format!("create {shown}"))(e)),
                        }
                    }
                    (_, Create::Dir(mode)) if last => mkdir_tolerant(dir, part, mode, &shown)?,
                    _ => mkdir_tolerant(dir, part, 0o755, &shown)?,
                };
                openat2(dir, *part, how(flags)).map_err(fail(format!("open {shown}")))?
            }
            other => other.map_err(fail(format!("open {shown}")))?,
        };
        current = Some(next);
    }
    match current {
        Some(fd) => Ok(fd),
        None => openat2(root, ".", how(flags_for(true))).map_err(fail(format!("open {shown}"))),
    }
}

/// Creates a directory; true when this call made it (so it is empty).
fn mkdir_tolerant(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    mode: u32,
    shown: &str,
) -> Result<bool, StepError> {
    match mkdirat(dir, name, Mode::from_bits_truncate(mode)) {
        Ok(()) => Ok(true),
        Err(nix::Error::EEXIST) => Ok(false),
        Err(e) => Err(StepError::new(format!("mkdir {shown}"), e.into())),
    }
}

/// The path through which `mount(2)` reaches the object behind `fd`.
pub fn fd_path(fd: &OwnedFd) -> std::path::PathBuf {
    use std::os::fd::AsRawFd;
    std::path::PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(dir: &Path) -> OwnedFd {
        nix::fcntl::open(
            dir,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .unwrap()
    }

    #[test]
    fn missing_directories_and_files_are_created_beneath_the_root() {
        let d = tempfile::tempdir().unwrap();
        open_beneath(&root(d.path()), Path::new("a/b/c"), Create::Dir(0o700)).unwrap();
        assert!(d.path().join("a/b/c").is_dir());
        open_beneath(&root(d.path()), Path::new("a/f"), Create::File(0o600)).unwrap();
        assert!(d.path().join("a/f").is_file());
        assert!(open_beneath(&root(d.path()), Path::new("a/missing"), Create::Nothing).is_err());
    }

    #[test]
    fn a_planted_symlink_is_refused_wherever_it_stands() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("w")).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("w/sub")).unwrap();
        for rel in ["w/sub", "w/sub/deeper", "w/sub/file"] {
            let err =
                open_beneath(&root(d.path()), Path::new(rel), Create::Dir(0o755)).unwrap_err();
            assert_eq!(err.source.raw_os_error(), Some(libc::ELOOP), "{rel}: {err}");
        }
        assert!(
            std::fs::read_dir(outside.path()).unwrap().next().is_none(),
            "nothing was created through the link"
        );
    }
}
