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

use super::{SetupError, Step};

/// What to create when the last component is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Create {
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

fn fail(what: String) -> impl FnOnce(nix::Error) -> SetupError {
    move |e| {
        let hint = if e == nix::Error::ELOOP {
            " (a symlink is in the way; spawnd never follows one here)"
        } else {
            ""
        };
        SetupError::new(Step::Root, format!("{what}{hint}"), e.into())
    }
}

/// Opens `rel` beneath `root` (O_PATH), creating missing directories on the
/// way and the last component as `create` says. `root` is a directory fd.
///
/// The whole path is tried in one `openat2` first (the resolve flags hold for
/// every component); only a missing part makes it walk, and below a directory
/// it has just created itself (or at the last component, known missing) it
/// creates without looking first.
pub(super) fn open_beneath(
    root: &OwnedFd,
    rel: &Path,
    create: Create,
) -> Result<OwnedFd, SetupError> {
    open_beneath_made(root, rel, create).map(|(fd, _)| fd)
}

/// [`open_beneath`], and whether this call made the last component (a
/// directory or file that was there already, or came meanwhile, was not).
pub(super) fn open_beneath_made(
    root: &OwnedFd,
    rel: &Path,
    create: Create,
) -> Result<(OwnedFd, bool), SetupError> {
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
        done => {
            return done
                .map(|fd| (fd, false))
                .map_err(fail(format!("open {shown}")))
        }
    }
    let mut current: Option<OwnedFd> = None;
    let mut created_parent = false;
    let mut made = false;
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
                            Ok(_) => {
                                made = true;
                                false
                            }
                            Err(nix::Error::EEXIST) => false,
                            Err(e) => return Err(fail(format!("create {shown}"))(e)),
                        }
                    }
                    (_, Create::Dir(mode)) if last => {
                        made = mkdir_tolerant(dir, part, mode, &shown)?;
                        made
                    }
                    _ => mkdir_tolerant(dir, part, 0o755, &shown)?,
                };
                openat2(dir, *part, how(flags)).map_err(fail(format!("open {shown}")))?
            }
            other => other.map_err(fail(format!("open {shown}")))?,
        };
        current = Some(next);
    }
    match current {
        Some(fd) => Ok((fd, made)),
        None => openat2(root, ".", how(flags_for(true)))
            .map(|fd| (fd, false))
            .map_err(fail(format!("open {shown}"))),
    }
}

/// How many symlinks [`through_final_links`] follows.
const MAX_FINAL_LINKS: usize = 8;

/// Where a file target stands, beneath `root`: `rel` itself, or, when its
/// last component is a symlink (a host's `/etc/resolv.conf` pointing at
/// systemd-resolved's stub file, say), where the link points, read with
/// `readlinkat` and resolved lexically beneath `root` (an absolute target
/// from `root`, `..` never above it), link after link. Only the last
/// component is ever a link here: a link on the way is refused by
/// [`open_beneath`] as always. More than [`MAX_FINAL_LINKS`] links, or a
/// target that climbs out of `root`, is refused.
pub(super) fn through_final_links(
    root: &OwnedFd,
    rel: &Path,
) -> Result<std::path::PathBuf, SetupError> {
    let mut current = rel.to_path_buf();
    for _ in 0..=MAX_FINAL_LINKS {
        let shown = current.display().to_string();
        let link = match openat2(root, &current, how(OFlag::O_PATH | OFlag::O_NOFOLLOW)) {
            Ok(fd) => fd,
            // Missing, or a link on the way (which open_beneath refuses
            // with its own message): nothing to follow.
            Err(_) => return Ok(current),
        };
        let target = match nix::fcntl::readlinkat(&link, Path::new("")) {
            Ok(target) => std::path::PathBuf::from(target),
            // Not a symlink.
            Err(nix::Error::ENOENT | nix::Error::EINVAL) => return Ok(current),
            Err(e) => {
                return Err(SetupError::new(
                    Step::Root,
                    format!("readlink {shown}"),
                    e.into(),
                ))
            }
        };
        let base = if target.is_absolute() {
            std::path::PathBuf::new()
        } else {
            current.parent().map(Path::to_path_buf).unwrap_or_default()
        };
        current = lexically_beneath(&base.join(&target)).ok_or_else(|| {
            SetupError::new(
                Step::Root,
                format!("follow {shown} -> {}", target.display()),
                std::io::Error::other("the link leads out of the sandbox's root"),
            )
        })?;
    }
    Err(SetupError::new(
        Step::Root,
        format!("follow {}", rel.display()),
        std::io::Error::other(format!("more than {MAX_FINAL_LINKS} symlinks")),
    ))
}

/// Whether what is missing of `rel` would be created on `root`'s own
/// filesystem: its deepest existing ancestor (or `rel` itself) is on the
/// same device as `root`, not on a mount over it (a scope, a system path).
pub(super) fn creates_on_root_filesystem(root: &OwnedFd, rel: &Path) -> Result<bool, SetupError> {
    use nix::sys::stat::fstat;
    let device = |fd: &OwnedFd, shown: &Path| {
        fstat(fd)
            .map(|st| st.st_dev)
            .map_err(|e| SetupError::new(Step::Root, format!("stat {}", shown.display()), e.into()))
    };
    let root_device = device(root, Path::new("/"))?;
    let mut at = rel;
    loop {
        match openat2(root, at, how(OFlag::O_PATH)) {
            Ok(fd) => return Ok(device(&fd, at)? == root_device),
            Err(nix::Error::ENOENT) => match at.parent() {
                Some(parent) => at = parent,
                None => return Ok(true),
            },
            Err(e) => return Err(fail(format!("open {}", at.display()))(e)),
        }
    }
}

/// Whether `rel` is missing beneath `root` and [`open_beneath`] can create
/// it: its deepest existing ancestor is a directory, reached without a
/// symlink. False when something is there already, or a symlink or a
/// non-directory stands on the way.
pub(super) fn creatable_beneath(root: &OwnedFd, rel: &Path) -> bool {
    if openat2(root, rel, how(OFlag::O_PATH)).is_ok() {
        return false;
    }
    let mut at = rel;
    while let Some(parent) = at.parent() {
        let dir = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        match openat2(root, dir, how(OFlag::O_PATH | OFlag::O_DIRECTORY)) {
            Ok(_) => return true,
            Err(nix::Error::ENOENT) => at = parent,
            Err(_) => return false,
        }
    }
    false
}

/// `path` with `.` and `..` resolved as text, relative to the root; `None`
/// when a `..` would climb above it.
fn lexically_beneath(path: &Path) -> Option<std::path::PathBuf> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Some(parts.iter().collect())
}

/// Creates a directory; true when this call made it (so it is empty).
fn mkdir_tolerant(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    mode: u32,
    shown: &str,
) -> Result<bool, SetupError> {
    match mkdirat(dir, name, Mode::from_bits_truncate(mode)) {
        Ok(()) => Ok(true),
        Err(nix::Error::EEXIST) => Ok(false),
        Err(e) => Err(SetupError::new(
            Step::Root,
            format!("mkdir {shown}"),
            e.into(),
        )),
    }
}

/// The path through which `mount(2)` reaches the object behind `fd`.
pub(super) fn fd_path(fd: &OwnedFd) -> std::path::PathBuf {
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
    fn a_final_symlink_is_followed_as_text_beneath_the_root_and_never_out() {
        use std::os::unix::fs::symlink;
        let d = tempfile::tempdir().unwrap();
        let r = root(d.path());
        std::fs::create_dir_all(d.path().join("etc")).unwrap();
        std::fs::write(d.path().join("etc/hosts"), "x").unwrap();
        symlink(
            "../run/systemd/resolve/stub-resolv.conf",
            d.path().join("etc/resolv.conf"),
        )
        .unwrap();
        symlink("/run/abs", d.path().join("etc/absolute")).unwrap();
        symlink("hop2", d.path().join("etc/hop1")).unwrap();
        symlink("/etc/hosts", d.path().join("etc/hop2")).unwrap();
        symlink("../../../outside", d.path().join("etc/climbs")).unwrap();
        symlink("loop-b", d.path().join("etc/loop-a")).unwrap();
        symlink("loop-a", d.path().join("etc/loop-b")).unwrap();
        let follow =
            |p: &str| through_final_links(&r, Path::new(p)).map(|p| p.display().to_string());
        assert_eq!(
            follow("etc/resolv.conf").unwrap(),
            "run/systemd/resolve/stub-resolv.conf"
        );
        assert_eq!(follow("etc/absolute").unwrap(), "run/abs");
        assert_eq!(follow("etc/hop1").unwrap(), "etc/hosts");
        assert_eq!(follow("etc/hosts").unwrap(), "etc/hosts");
        assert_eq!(follow("etc/missing").unwrap(), "etc/missing");
        assert!(follow("etc/climbs").is_err());
        assert!(follow("etc/loop-a").is_err());
        // The followed target is then created as usual, beneath the root.
        let target = follow("etc/resolv.conf").unwrap();
        open_beneath(&r, Path::new(&target), Create::File(0o644)).unwrap();
        assert!(d
            .path()
            .join("run/systemd/resolve/stub-resolv.conf")
            .is_file());
    }

    #[test]
    fn only_what_lies_on_the_roots_own_filesystem_is_created() {
        let d = tempfile::tempdir().unwrap();
        let r = root(d.path());
        std::fs::create_dir_all(d.path().join("etc")).unwrap();
        assert!(creates_on_root_filesystem(&r, Path::new("etc/hosts")).unwrap());
        assert!(creates_on_root_filesystem(&r, Path::new("run/a/b")).unwrap());
        // A mount over a directory (a scope, in a sandbox) is another
        // filesystem: nothing is created through it.
        let mounted = d.path().join("scope");
        std::fs::create_dir(&mounted).unwrap();
        let made = nix::mount::mount(
            Some("tmpfs"),
            &mounted,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=64k"),
        );
        if let Err(e) = made {
            assert!(
                std::env::var_os("SPAWND_TEST_SKIP_PRIVILEGED").is_some(),
                "mounting a tmpfs is not permitted here ({e}): run as root, or set SPAWND_TEST_SKIP_PRIVILEGED=1 to skip"
            );
            return;
        }
        let answers = [
            creates_on_root_filesystem(&r, Path::new("scope/resolv.conf")),
            creates_on_root_filesystem(&r, Path::new("scope/x/y")),
        ];
        let _ = nix::mount::umount(&mounted);
        assert!(!answers[0].as_ref().unwrap());
        assert!(!answers[1].as_ref().unwrap());
    }

    #[test]
    fn a_missing_path_is_creatable_unless_a_file_or_a_link_is_in_the_way() {
        let d = tempfile::tempdir().unwrap();
        let r = root(d.path());
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        std::fs::write(d.path().join("a/file"), "x").unwrap();
        std::os::unix::fs::symlink("b", d.path().join("a/link")).unwrap();
        let creatable = |rel: &str| creatable_beneath(&r, Path::new(rel));
        assert!(creatable("a/b/c/d.sh"));
        assert!(creatable("x.sh"));
        assert!(!creatable("a/file"));
        assert!(!creatable("a/file/x.sh"));
        assert!(!creatable("a/link/x.sh"));
    }

    #[test]
    fn only_a_last_component_this_call_made_counts_as_made() {
        let d = tempfile::tempdir().unwrap();
        let r = root(d.path());
        let made = |rel: &str| {
            open_beneath_made(&r, Path::new(rel), Create::Dir(0o700))
                .unwrap()
                .1
        };
        assert!(made("a/b"));
        assert!(!made("a/b"), "there already");
        assert!(!made("a"), "made as a parent, there now");
        std::fs::create_dir(d.path().join("c")).unwrap();
        assert!(!made("c"));
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
