//! The file operations the keyring and the store share: opening a file
//! without following a symbolic link and only when it is a regular file,
//! checking that nobody but its owner (root or this user) can change a
//! file or directory, writing a file whole or not at all, and removing a
//! tree whose directories were made read-only.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Opens `path` for reading: never through a symbolic link, never a FIFO
/// or device (which could block or change between reads), only a regular
/// file, checked on the descriptor that is then read.
pub(super) fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => io::Error::new(
                io::ErrorKind::InvalidInput,
                "is a symbolic link: give the file itself",
            ),
            _ => e,
        })?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is not a regular file",
        ));
    }
    Ok(file)
}

/// Reads a regular file of at most `limit` bytes whole.
pub(super) fn read_small(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("is larger than {limit} bytes"),
        ));
    }
    Ok(bytes)
}

/// Refuses a file or directory that someone other than its owner could
/// change (group or other write), or whose owner is neither root nor this
/// process's user: what spawnd trusts must be as trusted as spawnd.
pub(super) fn check_owner_and_mode(path: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() != 0 && meta.uid() != euid {
        return Err(format!(
            "{} is owned by uid {}, neither root nor this user (uid {euid}): chown it, or point the config at a directory of your own",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is writable by its group or others (mode {:04o}): `chmod go-w {}`",
            path.display(),
            meta.mode() & 0o7777,
            path.display()
        ));
    }
    Ok(())
}

/// Creates `dir` and its missing parents with mode 0755.
pub(super) fn create_dirs(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
}

/// Writes `bytes` to `path` whole or not at all: a temporary file in the
/// same directory, synced, given `mode`, then renamed over `path`.
pub(super) fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir)
}

/// Makes a directory's entries (renames, new files) durable.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Removes a tree whose directories may be read-only (store entries):
/// each directory is made writable by its owner first.
pub(super) fn remove_tree(path: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_dir() {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
        for entry in std::fs::read_dir(path)? {
            remove_tree(&entry?.path())?;
        }
        std::fs::remove_dir(path)
    } else {
        std::fs::remove_file(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_opened_and_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        std::os::unix::fs::symlink(&file, dir.path().join("link")).unwrap();
        assert!(open_regular(&file).is_ok());
        let e = open_regular(&dir.path().join("link")).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let e = open_regular(dir.path()).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert!(read_small(&file, 0).is_err());
        assert_eq!(read_small(&file, 1).unwrap(), b"x");
    }

    #[test]
    fn a_file_others_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(check_owner_and_mode(&file).is_ok());
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = check_owner_and_mode(&file).unwrap_err();
        assert!(e.contains("chmod go-w"), "{e}");
    }

    #[test]
    fn a_read_only_tree_is_removed_whole() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("t");
        std::fs::create_dir_all(tree.join("bin")).unwrap();
        std::fs::write(tree.join("bin/x"), "x").unwrap();
        for d in [tree.join("bin"), tree.clone()] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o555)).unwrap();
        }
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
    }
}
